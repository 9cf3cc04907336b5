#!/usr/bin/python3
"""Writes node tests, in ONNX's layout, of Pow by the scalar exponents mtc
computes at run time (integers, +-0.5) beside ONNX's own, which have one
such case (x^2): test_pow_scalar_<name>/model.onnx and test_data_set_0 with
input_0.pb (x), input_1.pb (the exponent) and output_0.pb, the expected
values numpy's float32 power. run_node_tests.py --testdata DIR runs them as
it runs ONNX's.

Usage: make_pow_tests.py DIR
"""

import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

sys.dont_write_bytecode = True

# Exponent -> the bases: signs, zeros and the non-finite values where each
# power has a defined result (x^0 = 1 for NaN too; a fractional power of a
# negative is NaN).
rng = np.random.default_rng(0)
general = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
general[0, 0] = 0
positive = rng.uniform(0.25, 3, (3, 4)).astype(np.float32)
nonzero = np.where(general == 0, 1.5, general).astype(np.float32)
CASES = {
    "zero": (np.float32(0), np.array([np.nan, np.inf, -2, 0, 3], np.float32)),
    "one": (np.int64(1), general),
    "cube": (np.float32(3), general),
    "fifth": (np.float32(5), general),
    "sixteenth": (np.int64(16), positive),
    "minus_one": (np.float32(-1), nonzero),
    "minus_three": (np.float32(-3), nonzero),
    "half": (np.float32(0.5),
             np.append(positive.ravel(), [0, -1, np.inf]).astype(np.float32)),
    "minus_half": (np.float32(-0.5), positive),
}


def write(root, name, exponent, x):
    folder = os.path.join(root, "test_pow_scalar_" + name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    exponent = np.asarray(exponent)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.power(x, exponent.astype(np.float32)).astype(np.float32)
    elem = (TensorProto.INT64 if exponent.dtype == np.int64
            else TensorProto.FLOAT)
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "y"], ["z"])], "test_pow_scalar_" + name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("y", elem, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, y.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    save(model, os.path.join(folder, "model.onnx"))
    for i, (value, tag) in enumerate([(x, "x"), (exponent, "y")]):
        with open(os.path.join(data, "input_%d.pb" % i), "wb") as f:
            f.write(numpy_helper.from_array(value, tag).SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "z").SerializeToString())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, (exponent, x) in CASES.items():
        write(sys.argv[1], name, exponent, x)


if __name__ == "__main__":
    main()
