"""Exports zoo models with a data directory their trainers can run on.

Usage: export_with_data.py OUTDIR --models gpt,vit

For each model: OUTDIR/<model>.onnx (with the zoo's dropout where the model
has one, else none) and OUTDIR/<model>-data/<input>.npy, two batches of the
zoo's data (test/zoo/models.py).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import zoolib as zl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--models", required=True,
                    help="comma-separated, of: " + ", ".join(models.NAMES))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    os.makedirs(args.outdir, exist_ok=True)
    for name in args.models.split(","):
        spec = models.get(name)
        data = spec.make_data(2 * spec.batch)
        data_dir = os.path.join(args.outdir, name + "-data")
        os.makedirs(data_dir, exist_ok=True)
        for key, arr in data.items():
            np.save(os.path.join(data_dir, key + ".npy"), arr)
        dropout = spec.dropout_p if spec.has_dropout else 0.0
        zl.export(spec, dropout, os.path.join(args.outdir, name + ".onnx"), data)
        print("exported %s (batch %d, dropout %s)" % (name, spec.batch, dropout))


if __name__ == "__main__":
    main()
