"""Checks that a trainer checkpoint written with --steps 0 holds exactly the
ONNX model's initializers (bitwise) under their ONNX names, plus optimizer
state `<param>.<slot>` that is still all zeros.

Usage: check_init.py MODEL.onnx CHECKPOINT.safetensors
"""

import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

model = onnx.load(sys.argv[1])
with open(sys.argv[2], "rb") as f:
    raw = f.read()
(size,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + size])
data = raw[8 + size:]
meta = header.pop("__metadata__", {})
expected = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
state = {n for n in header if n not in expected}
for name in state:
    assert name.rsplit(".", 1)[0] in expected, name
    begin, end = header[name]["data_offsets"]
    assert not np.any(np.frombuffer(data[begin:end], dtype=np.float32)), name
assert set(header) - state == set(expected), (sorted(header), sorted(expected))
for name, want in expected.items():
    entry = header[name]
    begin, end = entry["data_offsets"]
    got = np.frombuffer(data[begin:end], dtype=np.float32).reshape(entry["shape"])
    assert got.shape == want.shape and np.array_equal(got, want), name
print("initializers match:", ", ".join(sorted(expected)), "step", meta.get("step"))
