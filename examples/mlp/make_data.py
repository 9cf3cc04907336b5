#!/usr/bin/python3
"""Writes synthetic, learnable data for the example MLP.

Each of the 10 classes is a Gaussian cluster around its own random centre in
784 dimensions, so a trained model separates them and the loss falls well
below its initial ln(10) ~ 2.30. Writes OUTDIR/input.npy (float32
[N, 784]) and OUTDIR/target.npy (int64 [N]), one file per graph input.

Usage: make_data.py OUTDIR [--samples N] [--seed S]
"""

import argparse
import os

import numpy as np

FEATURES = 784
CLASSES = 10


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread", type=float, default=0.1,
                    help="scale of the class centres; smaller is harder")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((CLASSES, FEATURES)) * args.spread
    target = rng.integers(0, CLASSES, args.samples)
    noise = rng.standard_normal((args.samples, FEATURES))
    data = (centres[target] + noise).astype(np.float32)

    os.makedirs(args.outdir, exist_ok=True)
    np.save(os.path.join(args.outdir, "input.npy"), data)
    np.save(os.path.join(args.outdir, "target.npy"), target.astype(np.int64))
    print("wrote %d samples to %s (input.npy %s float32, target.npy int64)" %
          (args.samples, args.outdir, list(data.shape)))


if __name__ == "__main__":
    main()
