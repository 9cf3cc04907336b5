"""Feeds mtc mutated copies of a model: none may crash it.

Usage: mutate_models.py MODEL.onnx --mtc MTC --work DIR [--count N] [--seed S]
           [--args "MORE MTC COMPILE FLAGS"]

Each copy gets one to three random edits of the kinds a broken exporter or
a hand-edited file makes (an input dropped, added or renamed, an op type
swapped, an attribute dropped or set to an odd value, an axis or a
permutation changed, an input or initializer dimension changed, a constant
index changed, an output renamed onto another value) and goes through `mtc
compile --no-build`. mtc may accept it or refuse it; it must not crash: a
signal, an exit status over 127, an assertion, a stack dump or an uncaught
exception fails the run, and the copy is kept in DIR as crash-<i>.onnx.
Prints how the copies ended (compiled, refused by the checker, by the
importer, ...) and "N copies, 0 crashes".
"""

import argparse
import collections
import copy
import os
import random
import re
import subprocess
import sys

import onnx
from onnx import AttributeProto, numpy_helper

OPS = ["Add", "Mul", "Sub", "Div", "MatMul", "Gemm", "Relu", "Reshape",
       "Transpose", "Softmax", "Gather", "Concat", "Split", "Slice",
       "ReduceMean", "LayerNormalization", "Conv", "MaxPool", "Unsqueeze",
       "Squeeze", "Where", "Expand", "Cast", "Sqrt", "Pow", "Erf", "Tanh",
       "Dropout", "BatchNormalization", "Flatten", "Identity"]
CRASH = re.compile(r"Stack dump|Assertion|terminate called|PLEASE submit")


def mutate(rng, model):
    g = model.graph
    names = ([o for n in g.node for o in n.output] +
             [i.name for i in g.input] + [t.name for t in g.initializer])
    node = rng.choice(g.node)
    kind = rng.randrange(13)
    if kind == 0 and node.input:
        del node.input[rng.randrange(len(node.input))]
    elif kind == 1:
        node.input.append(rng.choice(names))
    elif kind == 2 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(names + ["missing"])
    elif kind == 3:
        node.op_type = rng.choice(OPS)
    elif kind == 4 and node.attribute:
        del node.attribute[rng.randrange(len(node.attribute))]
    elif kind == 5 and node.attribute:
        a = rng.choice(node.attribute)
        if a.type == AttributeProto.INT:
            a.i = rng.choice([-3, -1, 0, 1, 2, 7, 1000, 2 ** 40])
        elif a.type == AttributeProto.INTS and a.ints:
            a.ints[rng.randrange(len(a.ints))] = rng.choice([-3, -1, 0, 1, 5, 100])
        elif a.type == AttributeProto.FLOAT:
            a.f = rng.choice([0.0, -1.0, 1e30, float("nan"), 2.0])
    elif kind == 6 or kind == 12:
        i = rng.choice(list(g.input))
        shape = i.type.tensor_type.shape
        if i.type.tensor_type.HasField("shape") and shape.dim:
            d = rng.choice(shape.dim)
            d.dim_value = (rng.choice([0, 1, 3, 2 ** 31, 7]) if kind == 6
                           else rng.randrange(1, 10))
    elif kind == 7 and g.initializer:
        t = rng.choice(g.initializer)
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice([0, 1, 3, 1000])
    elif kind == 8 and node.output:
        node.output[0] = rng.choice(names)
    elif kind == 9:
        consts = [n for n in g.node if n.op_type == "Constant" and n.attribute
                  and n.attribute[0].t.data_type == onnx.TensorProto.INT64]
        if consts:
            t = rng.choice(consts).attribute[0].t
            arr = numpy_helper.to_array(t).copy()
            if arr.size:
                arr.flat[rng.randrange(arr.size)] = rng.choice([-3, -1, 0, 1, 2, 5, 10])
                t.CopyFrom(numpy_helper.from_array(arr, t.name))
    elif kind == 10:
        axes = [a for n in g.node for a in n.attribute if a.name in ("axis", "axes")]
        if axes:
            a = rng.choice(axes)
            if a.type == AttributeProto.INT:
                a.i = rng.randrange(-4, 5)
            elif a.ints:
                a.ints[rng.randrange(len(a.ints))] = rng.randrange(-4, 5)
    elif kind == 11:
        perms = [n.attribute[0] for n in g.node
                 if n.op_type == "Transpose" and n.attribute]
        if perms:
            a = rng.choice(perms)
            p = list(a.ints)
            rng.shuffle(p)
            del a.ints[:]
            a.ints.extend(p)


def outcome(stderr):
    line = next((l for l in stderr.splitlines() if "error:" in l), "")
    if "fails the ONNX checker" in line:
        return "refused by the ONNX checker"
    if "ONNX shape inference failed" in line:
        return "refused by ONNX shape inference"
    if "cannot import" in line:
        return "refused by the importer"
    if "initializer" in line or "attribute '" in line:
        return "refused for its tensor data"
    return "refused later"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--mtc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--args", default="",
                    help="more flags for mtc compile (e.g. --target cuda)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(args.seed)
    original = onnx.load(args.model)
    ends = collections.Counter()
    crashes = 0
    path = os.path.join(args.work, "mutated.onnx")
    for i in range(args.count):
        model = copy.deepcopy(original)
        for _ in range(rng.randint(1, 3)):
            mutate(rng, model)
        onnx.save(model, path)
        try:
            r = subprocess.run([args.mtc, "compile", "--no-build", "-o",
                                os.path.join(args.work, "out", "trainer"), path] +
                               args.args.split(),
                               capture_output=True, text=True, errors="replace",
                               timeout=300)
        except subprocess.TimeoutExpired:
            r = None
        if r is None or r.returncode < 0 or r.returncode > 127 or CRASH.search(r.stderr):
            crashes += 1
            kept = os.path.join(args.work, "crash-%d.onnx" % i)
            os.replace(path, kept)
            what = ("timed out" if r is None else "exit status %d: %s" %
                    (r.returncode, r.stderr.strip()[-300:]))
            print("CRASH on copy %d (%s): %s" % (i, kept, what))
            continue
        ends["compiled" if r.returncode == 0 else outcome(r.stderr)] += 1
    for what, n in sorted(ends.items()):
        print("%s: %d" % (what, n))
    print("%d copies, %d crashes" % (args.count, crashes))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
