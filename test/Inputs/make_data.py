"""Writes data directories for the classifier test model (input [N, 2, 4]
float32, target [N] int64 in [0, 3)), good and deliberately broken.

Usage: make_data.py OUTDIR
"""

import os
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((10, 2, 4)).astype(np.float32)
t = (np.arange(10) % 3).astype(np.int64)
cases = {
    "good": (x, t),
    "dtype": (x.astype(np.float64), t),
    "shape": (x.reshape(10, 8), t),
    "count": (x, t[:9]),
    "label": (x, t + 5),
    "missing": (x, None),
}
for name, (inp, tgt) in cases.items():
    os.makedirs(os.path.join(out, name), exist_ok=True)
    np.save(os.path.join(out, name, "input.npy"), inp)
    if tgt is not None:
        np.save(os.path.join(out, name, "target.npy"), tgt)
