"""Checks an exported inference model against the trainer's checkpoint.

Usage: check_export.py EXPORTED.onnx CHECKPOINT.safetensors
"""

import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

model = onnx.load(sys.argv[1])
onnx.checker.check_model(model)
print("checker ok")
g = model.graph
print("inputs", [i.name for i in g.input], "outputs", [o.name for o in g.output],
      "ops", [n.op_type for n in g.node])
dims = [d.dim_param or d.dim_value for d in g.input[0].type.tensor_type.shape.dim]
print("symbolic batch kept:", dims[0])
raw = open(sys.argv[2], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
count = 0
for t in g.initializer:
    b, e = header[t.name]["data_offsets"]
    want = np.frombuffer(data[b:e], dtype=np.float32).reshape(header[t.name]["shape"])
    got = numpy_helper.to_array(t)
    assert got.shape == want.shape and np.array_equal(got, want), t.name
    count += 1
print(count, "initializers equal the checkpoint")
