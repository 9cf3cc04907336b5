"""Compares two trainer runs: PREFIX.safetensors and PREFIX.jsonl of each.

Usage: compare_runs.py A B TOL  (exit 1 when a relative error exceeds TOL)
"""

import json
import struct
import sys

import numpy as np


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                             dtype=np.float32).astype(np.float64)
            for k, v in header.items()}


a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
ta, tb = read(a + ".safetensors"), read(b + ".safetensors")
if sorted(ta) != sorted(tb):
    sys.exit("different tensors: %s vs %s" % (sorted(ta), sorted(tb)))
print("same tensors:", ", ".join(sorted(ta)))
worst = max(np.linalg.norm(ta[k] - tb[k]) / max(np.linalg.norm(tb[k]), 1e-30) for k in tb)
if worst > tol:
    sys.exit("tensors differ: worst relative error %.3g" % worst)
print("parameters and state within %g (worst %.3g)" % (tol, worst))
la = [json.loads(l)["loss"] for l in open(a + ".jsonl")]
lb = [json.loads(l)["loss"] for l in open(b + ".jsonl")]
worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
if len(la) != len(lb) or worst > tol:
    sys.exit("losses differ: %s vs %s" % (la, lb))
print("losses within %g (worst %.3g)" % (tol, worst))
