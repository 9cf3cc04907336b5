"""Shared pieces of the model-zoo scripts: export and ONNX graph analysis.

Run with /usr/bin/python3 (Debian's python3-torch, python3-torchvision,
python3-onnx, python3-numpy).
"""

import collections
import copy
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean under lit
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
import mtc_testlib as tl  # noqa: E402
import models  # noqa: E402,F401  (re-exported for the scripts)

# What mtc imports today (README "What works today" and the importer's list
# of supported ops); ops whose name is here may still be supported only as
# import-time shape computations (Gather, Cast, Equal, Where, Range, ...).
MTC_TODAY = set("""
Add AveragePool Cast Concat Constant ConstantOfShape Conv Div Equal Exp Flatten
Gather Gemm GlobalAveragePool Identity Log LogSoftmax MatMul MaxPool Mul Neg Pad
Range ReduceMean ReduceSum Relu Reshape Shape Sigmoid Slice Softmax
SoftmaxCrossEntropyLoss Sqrt Squeeze Sub Tanh Transpose Unsqueeze Where
""".split())

# The ops the "Real models" issue expects these models to need; anything else
# is flagged in the inventory.
EXPECTED_OPS = set("""
Add AveragePool BatchNormalization Cast Clip Concat Constant ConstantOfShape Conv
Div Dropout Equal Erf Expand Flatten Gather Gemm GlobalAveragePool Identity
LayerNormalization Log LogSoftmax MatMul MaxPool Mul Neg Pad Pow Range
ReduceMean ReduceSum Relu Reshape Shape Sigmoid Slice Softmax
SoftmaxCrossEntropyLoss Sqrt Squeeze Sub Tanh Transpose Trilu Unsqueeze Where
""".split())


# ----------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------


class Export:
    """One exported model: the ONNX file and how its names map to torch's."""

    def __init__(self, spec, dropout, path, proto, wrapper, example_idx):
        self.spec = spec
        self.dropout = dropout
        self.path = path
        self.proto = proto
        self.example_idx = example_idx
        from onnx import numpy_helper
        self.initial = {i.name: numpy_helper.to_array(i)
                        for i in proto.graph.initializer}
        import torch
        state = wrapper.state_dict(keep_vars=True)
        self.params = sorted(n for n in self.initial
                             if isinstance(state.get(n), torch.nn.Parameter))
        self.buffers = sorted(n for n in self.initial if n not in self.params)
        # torch state_dict names the graph does not have: BatchNorm's
        # num_batches_tracked, and second names of tied parameters.
        self.missing = sorted(n for n in state if n not in self.initial)
        self.aliases = {}
        for n in self.missing:
            for m in self.initial:
                if state[n] is state.get(m):
                    self.aliases[n] = m


def export(spec, dropout, path, data):
    """Exports spec's model (dropout ratio `dropout`) with the harness call.

    The example batch is the first training batch of `data`. The module is
    exported from a copy: tracing in training mode runs one forward pass,
    which updates BatchNorm running statistics, and the exported initializers
    hold the values after that pass.
    """
    import onnx
    import torch
    module = spec.build(dropout)
    idx = np.arange(spec.batch)
    x = torch.from_numpy(data["input"][idx])
    y = torch.from_numpy(data["target"][idx])
    exported = copy.deepcopy(module)
    tl.export_with_loss(exported, x, y, path, loss=spec.loss)
    proto = onnx.load(path)
    wrapper = tl.make_loss_wrapper(module, spec.loss)
    return Export(spec, dropout, path, proto, wrapper, idx)


def reference_wrapper(exp, dropout=0.0, dtype=None):
    """A fresh loss wrapper whose state equals the exported initializers."""
    import torch
    wrapper = tl.make_loss_wrapper(exp.spec.build(dropout), exp.spec.loss)
    state = wrapper.state_dict()
    with torch.no_grad():
        for name, value in exp.initial.items():
            if name not in state:
                raise tl.HarnessError("ONNX initializer %r is not in the torch "
                                      "state_dict" % name)
            state[name].copy_(torch.from_numpy(value))
    if dtype is not None:
        wrapper.to(dtype)
    wrapper.train()
    return wrapper


def parameters_by_name(wrapper, names):
    state = wrapper.state_dict(keep_vars=True)
    return [(n, state[n]) for n in names]


# ----------------------------------------------------------------------------
# Graph analysis
# ----------------------------------------------------------------------------

DTYPE_NAMES = {1: "f32", 2: "u8", 3: "i8", 5: "i16", 6: "i32", 7: "i64",
               9: "bool", 10: "f16", 11: "f64", 16: "bf16"}

# Value classes, from "known before training" to "data dependent".
CONST = "const"      # Constant nodes and shapes only: foldable at import
BUFFER = "buffer"    # needs a non-trainable initializer (buffer)
PARAM = "param"      # needs a trainable initializer, but no graph input
RUNTIME = "runtime"  # depends on a graph input
_RANK = {CONST: 0, BUFFER: 1, PARAM: 2, RUNTIME: 3}


def _attr(node, name, default=None):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def attrs_text(node):
    from onnx import helper, numpy_helper
    out = []
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif hasattr(v, "data_type"):
            v = _value_text(numpy_helper.to_array(v))
        elif isinstance(v, float):
            v = "%.9g" % v
        out.append("%s=%s" % (a.name, v))
    return ", ".join(out)


def _value_text(arr, limit=8):
    arr = np.asarray(arr)
    if arr.size > limit:
        return "<%s%s>" % (arr.dtype, list(arr.shape))
    if arr.dtype == np.bool_:
        v = arr.tolist()
    elif arr.dtype.kind == "f":
        v = [float("%.7g" % f) for f in arr.reshape(-1).tolist()]
        v = v if arr.ndim else v[0]
        if arr.ndim > 1:
            v = np.array(v).reshape(arr.shape).tolist()
    else:
        v = arr.tolist()
    text = str(v).replace("inf", "inf").replace(" ", "")
    if arr.dtype == np.bool_:
        text = text.lower()
    return text


class GraphInfo:
    """Per-tensor class, dtype, shape and (for constants) value of a graph."""

    def __init__(self, proto, params):
        import onnx
        from onnx import numpy_helper
        self.proto = proto
        self.graph = proto.graph
        self.params = set(params)
        self.inits = {i.name: i for i in self.graph.initializer}
        self.inputs = [i.name for i in self.graph.input
                       if i.name not in self.inits]
        self.outputs = [o.name for o in self.graph.output]
        self.producer = {}
        self.consumers = collections.defaultdict(list)
        for node in self.graph.node:
            for o in node.output:
                self.producer[o] = node
            for i in node.input:
                if i:
                    self.consumers[i].append(node)
        self.types = {}
        self.shapes = {}
        self._infer(proto)
        for i in self.graph.initializer:
            self.types[i.name] = i.data_type
            self.shapes[i.name] = list(i.dims)
        # Classes and constant values.
        self.cls = {}
        self.value = {}
        for name in self.inputs:
            self.cls[name] = RUNTIME
        for name in self.inits:
            self.cls[name] = PARAM if name in self.params else BUFFER
        for node in self.graph.node:
            ins = [i for i in node.input if i]
            if node.op_type == "Shape" and self._static(node.input[0]):
                c = CONST
            elif ins:
                c = max((self.cls.get(i, RUNTIME) for i in ins),
                        key=_RANK.get)
            else:
                c = CONST
            for o in node.output:
                self.cls[o] = c
            if c == CONST:
                try:
                    vals = self._evaluate(node)
                except Exception:  # noqa: unknown op or odd input: no value
                    vals = None
                if vals is not None:
                    for o, v in zip(node.output, vals):
                        self.value[o] = np.asarray(v)
        # Fold the constants into the graph and infer again: ONNX shape
        # inference alone loses shapes behind computed Slice bounds.
        self._infer(self._folded(proto, numpy_helper, onnx))

    def _infer(self, proto):
        import onnx
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        for vi in list(inferred.graph.value_info) + \
                list(inferred.graph.input) + list(inferred.graph.output):
            t = vi.type.tensor_type
            if t.elem_type:
                self.types[vi.name] = t.elem_type
            if t.HasField("shape") and all(d.HasField("dim_value")
                                           for d in t.shape.dim):
                self.shapes[vi.name] = [d.dim_value for d in t.shape.dim]

    def _folded(self, proto, numpy_helper, onnx):
        from onnx import helper
        out = onnx.ModelProto()
        out.CopyFrom(proto)
        del out.graph.node[:]
        for node in proto.graph.node:
            if all(o in self.value for o in node.output) and node.output:
                for o in node.output:
                    out.graph.node.append(helper.make_node(
                        "Constant", [], [o], value=numpy_helper.from_array(
                            self.value[o], o)))
            else:
                out.graph.node.append(node)
        return out

    def _static(self, name):
        return name in self.shapes

    def _evaluate(self, node):
        op = node.op_type
        ins = [self.value.get(i) if i else None for i in node.input]
        if op == "Constant":
            from onnx import numpy_helper
            return [numpy_helper.to_array(_attr(node, "value"))]
        if op == "Shape":
            return [np.array(self.shapes[node.input[0]], np.int64)]
        if any(v is None for v, i in zip(ins, node.input) if i):
            return None
        if op == "Gather":
            return [np.take(ins[0], ins[1], axis=_attr(node, "axis", 0))]
        if op in ("Add", "Sub", "Mul", "Div", "Equal"):
            a, b = ins
            if op == "Div" and a.dtype.kind in "iu":
                return [np.trunc(a / b).astype(a.dtype)]
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                 "Div": np.divide, "Equal": np.equal}[op]
            return [f(a, b)]
        if op == "Neg":
            return [-ins[0]]
        if op == "Cast":
            return [ins[0].astype(tl._np_dtype(_attr(node, "to")))]
        if op == "ConstantOfShape":
            from onnx import numpy_helper
            v = _attr(node, "value")
            fill = numpy_helper.to_array(v) if v is not None else \
                np.zeros(1, np.float32)
            return [np.full(tuple(ins[0]), fill.reshape(-1)[0], fill.dtype)]
        if op == "Concat":
            return [np.concatenate(ins, axis=_attr(node, "axis"))]
        if op == "Reshape":
            shape = [d if d != 0 else ins[0].shape[i]
                     for i, d in enumerate(ins[1].tolist())]
            return [ins[0].reshape(shape)]
        if op == "Transpose":
            return [np.transpose(ins[0], _attr(node, "perm"))]
        if op == "Unsqueeze":
            out = ins[0]
            for ax in sorted(int(a) % (out.ndim + len(ins[1])) for a in ins[1]):
                out = np.expand_dims(out, ax)
            return [out]
        if op == "Squeeze":
            axes = tuple(int(a) for a in ins[1]) if len(ins) > 1 else None
            return [np.squeeze(ins[0], axis=axes)]
        if op == "Where":
            return [np.where(ins[0], ins[1], ins[2])]
        if op == "Expand":
            return [ins[0] * np.ones(tuple(ins[1]), ins[0].dtype)]
        if op == "Range":
            return [np.arange(ins[0], ins[1], ins[2]).astype(ins[0].dtype)]
        if op == "Identity":
            return [ins[0]]
        if op == "Slice":
            data, starts, ends = ins[0], ins[1], ins[2]
            axes = ins[3] if len(ins) > 3 else range(len(starts))
            steps = ins[4] if len(ins) > 4 else [1] * len(starts)
            index = [slice(None)] * data.ndim
            for s, e, a, st in zip(starts, ends, axes, steps):
                dim = data.shape[int(a)]
                s, e, st = int(s), int(e), int(st)
                if st < 0 and e < -dim:
                    e = None
                index[int(a)] = slice(max(min(s, dim), -dim - 1), e, st)
            return [data[tuple(index)]]
        return None

    # -- descriptions --------------------------------------------------------

    def dtype(self, name):
        return DTYPE_NAMES.get(self.types.get(name), "?")

    def shape_text(self, name):
        s = self.shapes.get(name)
        return "?" if s is None else "[%s]" % ",".join(str(d) for d in s)

    def used(self, name):
        return bool(self.consumers.get(name)) or name in self.outputs

    def node_class(self, node):
        return max((self.cls.get(o, RUNTIME) for o in node.output),
                   key=_RANK.get, default=CONST)


def dropout_facts(exp):
    """(Dropout node count, set of ratios, set of training_mode values,
    whether every mask output is unused) of an export."""
    g = GraphInfo(exp.proto, exp.params)
    ratios, modes, unused, n = set(), set(), True, 0
    for node in exp.proto.graph.node:
        if node.op_type != "Dropout":
            continue
        n += 1
        r = g.value.get(node.input[1]) if len(node.input) > 1 else None
        # No training_mode input is inference (ONNX's default): PyTorch 2.9
        # and newer export nn.MultiheadAttention's dropout that way.
        t = (g.value.get(node.input[2]) if len(node.input) > 2 and
             node.input[2] else False)
        ratios.add(None if r is None else round(float(r), 7))
        modes.add(None if t is None else bool(t))
        unused = unused and not (len(node.output) > 1 and
                                 g.used(node.output[1]))
    return n, ratios, modes, unused
