#!/usr/bin/python3
"""Self-test of mtc_testlib: needs no mtc, only /usr/bin/python3 with torch/onnx.

Checks the safetensors reader/writer round trip, rel_err, and that torch
still exports the MLP/CNN of check_model.py with the ops the importer is
written against (see the notes at the top of mtc_testlib.py), before and
after fold_constants.

Usage: testlib_selftest.py --work DIR
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean under lit
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_model  # noqa: E402
import mtc_testlib as tl  # noqa: E402


def check_safetensors(work):
    rng = np.random.default_rng(0)
    tensors = {
        "model.0.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "model.0.weight.exp_avg": rng.standard_normal((3, 4)).astype(">f4"),
        "steps": np.arange(5, dtype=np.int64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    path = os.path.join(work, "roundtrip.safetensors")
    tl.write_safetensors(path, tensors, {"step": 7})
    back, meta = tl.read_safetensors(path)
    assert meta == {"step": "7"}, meta
    assert sorted(back) == sorted(tensors), sorted(back)
    for name, value in tensors.items():
        assert back[name].shape == value.shape, name
        assert np.array_equal(back[name], value), name
        assert back[name].dtype.kind == value.dtype.kind, name
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    assert hlen % 8 == 0, "header is not padded to 8 bytes"
    header = json.loads(raw[8:8 + hlen])
    assert header["steps"]["dtype"] == "I64"
    assert header["model.0.weight.exp_avg"]["dtype"] == "F32"
    assert header["scalar"]["shape"] == []
    assert len(raw) == 8 + hlen + sum(v.nbytes for v in tensors.values())
    print("safetensors round trip: ok")


def check_rel_err():
    assert tl.rel_err([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert abs(tl.rel_err([3.0, 4.0], [0.0, 0.0]) - 5e12) < 1.0
    assert abs(tl.rel_err([1.1, 0.0], [1.0, 0.0]) - 0.1) < 1e-12
    assert tl.rel_err(np.zeros(3), np.zeros(2)) == float("inf")
    print("rel_err: ok")


def check_exports(work):
    import onnx
    import torch
    torch.manual_seed(0)
    expected = {
        "mlp": ["Gemm", "Relu", "Gemm", "Tanh", "Gemm",
                "SoftmaxCrossEntropyLoss"],
        "cnn": ["Conv", "Relu", "MaxPool", "Constant", "Constant", "Pad",
                "Conv", "Relu",
                "Constant", "Pad", "AveragePool", "Flatten", "Gemm",
                "SoftmaxCrossEntropyLoss"],
    }
    for name in ("mlp", "cnn"):
        module, shape, batch = check_model.build_module(name)
        path = os.path.join(work, name + ".onnx")
        tl.export_with_loss(module, torch.randn((batch,) + shape),
                            torch.randint(0, 10, (batch,)), path)
        model = onnx.load(path)
        names = sorted(i.name for i in model.graph.initializer)
        assert names == sorted("model." + n for n, _ in
                               module.named_parameters()), names
        assert [i.name for i in model.graph.input] == ["input", "target"]
        ops = tl.op_types(model)
        folded = tl.fold_constants(model)
        onnx.shape_inference.infer_shapes(folded, strict_mode=True)
        assert tl.op_types(folded) == expected[name], tl.op_types(folded)
        if name == "mlp":
            assert ops == expected[name], ops
            gemm = model.graph.node[0]
            attrs = {a.name: onnx.helper.get_attribute_value(a)
                     for a in gemm.attribute}
            assert attrs == {"alpha": 1.0, "beta": 1.0, "transB": 1}, attrs
        else:
            consts = [onnx.numpy_helper.to_array(n.attribute[0].t)
                      for n in folded.graph.node if n.op_type == "Constant"]
            values = [c.tolist() for c in consts]
            assert values == [0.0, [0, 0, 1, 1, 0, 0, 1, 1], [0] * 8], values
            assert [c.dtype for c in consts] == [np.float32, np.int64,
                                                 np.int64]
        print("%s export: %s" % (name, " ".join(ops)))
        print("%s folded: %s" % (name, " ".join(tl.op_types(folded))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    check_safetensors(args.work)
    check_rel_err()
    check_exports(args.work)
    print("PASS")


if __name__ == "__main__":
    main()
