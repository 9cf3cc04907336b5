"""Shared helpers for the mtc end-to-end and gradient-check harnesses.

Run with /usr/bin/python3 (Debian's python3-torch, python3-onnx, python3-numpy).

What torch 1.13 exports for a module wrapped by `LossWrapper` and exported with
`export_with_loss` (opset 17, TrainingMode.TRAINING, do_constant_folding=False),
checked against the MLP and CNN models of check_model.py:

* Graph inputs are only `input` (float32) and `target` (int64); initializers are
  NOT listed as graph inputs (ir_version 8). Initializer names are the wrapper's
  state_dict names, i.e. the inner module's names prefixed by `model.`
  (`model.0.weight`, `model.0.bias`, ...). No Identity nodes appear.
* nn.Linear on a 2-D input -> `Gemm(alpha=1.0, beta=1.0, transB=1)` with inputs
  (x, weight, bias). On a 3-D input it is `Transpose(perm=[1,0])` of the weight,
  then `MatMul`, then `Add(bias, matmul)` (bias first).
* nn.CrossEntropyLoss -> `SoftmaxCrossEntropyLoss(ignore_index=-100,
  reduction="mean")` with inputs (logits, target) and one output, the loss.
* nn.Conv2d -> `Conv(dilations, group, kernel_shape, pads, strides)` all spelled
  out; nn.MaxPool2d -> `MaxPool(ceil_mode=0, kernel_shape, pads, strides)`;
  nn.Flatten -> `Flatten(axis=1)`.
* nn.AvgPool2d with the default count_include_pad=True -> an explicit
  `Pad(mode="constant")` whose pads are a `Constant` node of 8 zeros (no
  constant_value input), followed by `AveragePool(ceil_mode=0, kernel_shape,
  pads=[0,0,0,0], strides)`. With count_include_pad=False there is no Pad.
* nn.ZeroPad2d / nn.ConstantPad2d / F.pad -> `Pad(mode="constant")` whose pads
  input is computed by an int64 subgraph of constant-only ops that reorders
  torch's (left, right, top, bottom) list into ONNX's begins-then-ends order:
  Constant (the torch list, e.g. [1,1,1,1]), Shape of that Constant,
  Gather(axis=0), Mul, Sub, Cast(to=INT64), ConstantOfShape, Concat(axis=0),
  Reshape(allowzero=0, shape [-1, 2]), Slice(starts [-1], ends [INT64_MIN+1],
  axes [0], steps [-1]), Transpose(perm=[1,0]), Reshape([-1]), Cast(to=INT64).
  For ZeroPad2d(1) on NCHW it evaluates to [0,0,1,1,0,0,1,1]. The pad value
  is a third, float `Constant` input (0.0) for ZeroPad2d/ConstantPad2d; F.pad
  passes no value input. The subgraph is the same in EVAL mode, and
  do_constant_folding=True only folds its Shape/Gather/Mul/Sub part.
  `fold_constants` below folds it to one Constant node.
* Every non-float constant (pads, shapes, axes) arrives as a `Constant` node
  with a `value` tensor attribute, never as an initializer.
* The CNN's `logits` output is declared with a made-up symbolic first dim
  (`Gemmlogits_dim_0`) although every input is static; shape inference gives
  the real size. With dynamic_axes the bound names (e.g. `batch`) appear on the
  inputs and on the outputs named in dynamic_axes.
"""

import json
import os
import shlex
import struct
import subprocess
import sys

import numpy as np

# ----------------------------------------------------------------------------
# Failure reporting
# ----------------------------------------------------------------------------


class HarnessError(Exception):
    """A tool invocation or file failed; the message says what and how."""


def _clip(text, limit=8000):
    if text is None:
        return ""
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "\n... [%d characters cut] ...\n" % (
        len(text) - limit) + text[-limit // 2:]


def run_check(main, name):
    """Exits with a check script's main(); a harness error (a command that
    failed) prints it and "SUMMARY <name>: FAIL" and exits with 1."""
    try:
        sys.exit(main())
    except HarnessError as e:
        print("error: %s" % e)
        print("SUMMARY %s: FAIL" % name)
        sys.exit(1)


def run_tool(cmd, timeout=600, cwd=None):
    """Runs `cmd` (a list); raises HarnessError with command and output on failure.

    Set MTC_TEST_VERBOSE=1 to print every command before it runs.
    """
    cmd = [str(c) for c in cmd]
    shown = shlex.join(cmd)
    if os.environ.get("MTC_TEST_VERBOSE"):
        print("$ " + shown, flush=True)
    try:
        proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              timeout=timeout)
    except FileNotFoundError as e:
        raise HarnessError("cannot run: %s\n  %s" % (shown, e))
    except subprocess.TimeoutExpired as e:
        raise HarnessError("timed out after %ss: %s\n--- stdout ---\n%s\n"
                           "--- stderr ---\n%s" % (
                               timeout, shown, _clip(_text(e.stdout)),
                               _clip(_text(e.stderr))))
    if proc.returncode != 0:
        raise HarnessError("command failed (exit %d): %s\n--- stdout ---\n%s\n"
                           "--- stderr ---\n%s" % (
                               proc.returncode, shown, _clip(proc.stdout),
                               _clip(proc.stderr)))
    return proc


def _text(data):
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


def mtc_compile(mtc, model, out_dir, flags=(), target="cpu", timeout=900):
    """`mtc compile MODEL --target T -o OUT_DIR/trainer FLAGS`; returns the trainer path."""
    os.makedirs(out_dir, exist_ok=True)
    trainer = os.path.join(out_dir, "trainer")
    flags = list(flags)
    if "--precision" not in flags:
        # The harnesses compare with float32 references; the cuda target
        # would otherwise default to bf16.
        flags += ["--precision", "fp32"]
    run_tool([mtc, "compile", model, "--target", target, "-o", trainer] +
             flags, timeout=timeout)
    if not os.path.isfile(trainer) or not os.access(trainer, os.X_OK):
        raise HarnessError("mtc compile succeeded but left no executable at " +
                           trainer)
    return trainer


def run_trainer(trainer, steps, data=None, seed=None, save=None, load=None,
                metrics=None, log_every=None, dump_grads=None, extra=(),
                timeout=600):
    """Runs a trainer produced by `mtc compile` with the documented flags."""
    cmd = [trainer]
    if data is not None:
        cmd += ["--data", data]
    cmd += ["--steps", str(steps)]
    for flag, value in (("--seed", seed), ("--save", save), ("--load", load),
                        ("--metrics", metrics), ("--log-every", log_every),
                        ("--dump-grads", dump_grads)):
        if value is not None:
            cmd += [flag, str(value)]
    return run_tool(cmd + list(extra), timeout=timeout)


def read_metrics(path):
    """Reads a --metrics JSONL file; returns its records sorted by "step"."""
    records = []
    try:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    raise HarnessError("%s:%d: not JSON (%s): %r" %
                                       (path, lineno, e, line))
                if "step" not in rec or "loss" not in rec:
                    raise HarnessError('%s:%d: record lacks "step" or "loss": '
                                       '%r' % (path, lineno, line))
                records.append(rec)
    except OSError as e:
        raise HarnessError("cannot read metrics file: %s" % e)
    records.sort(key=lambda r: r["step"])
    return records


def read_losses(path, expected_steps=None):
    """The per-step losses of a --metrics file, in step order, as float64."""
    records = read_metrics(path)
    if expected_steps is not None and len(records) != expected_steps:
        raise HarnessError("%s: expected %d step records, found %d" %
                           (path, expected_steps, len(records)))
    return np.array([float(r["loss"]) for r in records], dtype=np.float64)


# ----------------------------------------------------------------------------
# Numerics
# ----------------------------------------------------------------------------


def write_torch_noise(out_dir, ref, noise_ref, factor, required=True):
    """torch-noise.json beside a run's final checkpoint: PyTorch's own
    rounding error ||ref - noise_ref|| of every tensor (noise_ref: the same
    steps with each batch's samples reordered), the factor of it a tensor
    may differ by, and whether the tensors must match at all or are only
    reported; test/gpu/gpu_check.py compares two targets' checkpoints by
    it."""
    noise = {name: float(np.linalg.norm(
        (np.asarray(value, np.float64) - noise_ref[name]).ravel()))
        for name, value in ref.items()}
    with open(os.path.join(out_dir, "torch-noise.json"), "w") as f:
        json.dump({"required": bool(required), "factor": factor,
                   "noise": noise}, f, indent=1, sort_keys=True)


def rel_err(a, b, tiny=1e-12):
    """||a - b|| / max(||b||, tiny) in float64; b is the reference."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.linalg.norm((a - b).ravel()) /
                 max(float(np.linalg.norm(b.ravel())), tiny))


# ----------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------

_ST_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: array} (and string metadata) as a safetensors file."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        key = _ST_NAMES.get(arr.dtype.newbyteorder("<"))
        if key is None:
            raise HarnessError("safetensors: unsupported dtype %s for %r" %
                               (arr.dtype, name))
        data = arr.astype(_ST_DTYPES[key], copy=False).tobytes(order="C")
        header[name] = {"dtype": key, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def read_safetensors(path):
    """Returns ({name: array}, metadata dict) from a safetensors file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise HarnessError("cannot read safetensors file: %s" % e)
    if len(raw) < 8:
        raise HarnessError("%s: too short for a safetensors file" % path)
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise HarnessError("%s: header length %d exceeds the file size %d" %
                           (path, hlen, len(raw)))
    try:
        header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    except ValueError as e:
        raise HarnessError("%s: header is not JSON: %s" % (path, e))
    base = 8 + hlen
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        dtype = _ST_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise HarnessError("%s: tensor %r has unsupported dtype %r" %
                               (path, name, info.get("dtype")))
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * dtype.itemsize or base + end > len(raw):
            raise HarnessError("%s: tensor %r: offsets [%d, %d] do not fit "
                               "shape %s of %s" % (path, name, begin, end,
                                                    list(shape), info["dtype"]))
        tensors[name] = np.frombuffer(raw, dtype=dtype, count=count,
                                      offset=base + begin).reshape(shape).copy()
    return tensors, metadata


# ----------------------------------------------------------------------------
# ONNX export and inspection
# ----------------------------------------------------------------------------


def _torch():
    import torch  # noqa: local import so the safetensors helpers need no torch
    return torch


def make_loss_wrapper(module, loss=None):
    """Wraps `module` so forward(input, target) returns (loss, logits).

    `loss` maps (logits, target) to a scalar; the default is a
    torch.nn.CrossEntropyLoss submodule (mean reduction), which exports as one
    SoftmaxCrossEntropyLoss node. A custom `loss` (e.g. the next-token loss
    over flattened logits) is traced into the graph like the model itself.
    """
    torch = _torch()

    class LossWrapper(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
            if loss is None:
                self.criterion = torch.nn.CrossEntropyLoss()
            else:
                self.criterion = loss

        def forward(self, input, target):
            logits = self.model(input)
            return self.criterion(logits, target), logits

    return LossWrapper(module)


def export_with_loss(module, example_input, example_target, path,
                     dynamic_axes=None, loss=None, opset=17):
    """Exports `module` with its loss inside; returns the initializer-name prefix.

    Graph inputs are `input` and `target` with the dtypes of the examples
    (float32 images or int64 token ids; int64 class or next-token targets),
    outputs `loss` and `logits`. `loss` is as for make_loss_wrapper.
    Initializers are named "model." + the module's own state_dict names.
    """
    return export_wrapper(make_loss_wrapper(module, loss),
                          (example_input, example_target), path,
                          dynamic_axes=dynamic_axes, opset=opset)


def export_wrapper(wrapper, example_args, path, dynamic_axes=None,
                   input_names=("input", "target"),
                   output_names=("loss", "logits"), opset=17):
    """The one torch.onnx.export call of the harnesses (opset 17 unless
    told otherwise, training mode, no constant folding) for a module
    already returning (loss, ...)."""
    import inspect
    import warnings
    torch = _torch()
    # PyTorch 2.9 and newer export through torch.export (opset 18 and up,
    # other names) unless told not to: the harnesses want the TorchScript
    # exporter's opset-17 graphs on every version.
    legacy = ({"dynamo": False}
              if "dynamo" in inspect.signature(torch.onnx.export).parameters
              else {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, tuple(example_args), path,
                          opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False,
                          input_names=list(input_names),
                          output_names=list(output_names),
                          dynamic_axes=dynamic_axes, **legacy)
    _dropout_in_training_mode(path)
    return "model."


def _dropout_in_training_mode(path):
    """The training-mode export of PyTorch 2.9 and newer writes the dropout
    of scaled_dot_product_attention (nn.MultiheadAttention's) as a Dropout
    without its training_mode input, which ONNX reads as inference (no
    dropout) while the module trains with it. Gives such nodes the
    training_mode true that every other Dropout of the export has."""
    import onnx
    from onnx import helper
    model = onnx.load(path)
    nodes = [n for n in model.graph.node
             if n.op_type == "Dropout" and
             (len(n.input) < 3 or not n.input[2])]
    if not nodes:
        return
    name = "dropout_training_mode_true"
    const = helper.make_node(
        "Constant", [], [name], name=name,
        value=helper.make_tensor(name + "_value", onnx.TensorProto.BOOL, [],
                                 [True]))
    for n in nodes:
        while len(n.input) < 2:
            n.input.append("")
        if len(n.input) < 3:
            n.input.append(name)
        else:
            n.input[2] = name
    model.graph.node.insert(0, const)
    onnx.save(model, path)


def describe_onnx(model):
    """One line per node: op type and attributes (for logs)."""
    from onnx import helper, numpy_helper
    lines = []
    for node in model.graph.node:
        attrs = []
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif hasattr(v, "data_type"):
                v = numpy_helper.to_array(v).tolist()
            attrs.append("%s=%s" % (a.name, v))
        lines.append("%s(%s)" % (node.op_type, ", ".join(attrs)))
    return lines


def op_types(model):
    return [n.op_type for n in model.graph.node]


def fold_constants(model):
    """Folds int64 shape arithmetic (as torch emits for Pad) into Constant nodes.

    Evaluates nodes whose inputs are all known constants (Constant outputs,
    initializers of integer type, or Shape of a tensor with a static inferred
    shape) for a small set of ops, replaces what the remaining graph uses with
    Constant nodes and drops the rest. Float math is never folded, so trained
    initializers and their consumers are untouched.
    """
    import onnx
    from onnx import helper, numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model)
    static_shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + \
            list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            static_shapes[vi.name] = [d.dim_value for d in dims]

    known = {}
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind in "iu":
            known[init.name] = arr

    def attr(node, name, default=None):
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def evaluate(node, ins):
        op = node.op_type
        if op == "Constant":
            value = attr(node, "value")
            return [numpy_helper.to_array(value)] if value is not None else None
        if op == "Shape":
            shape = static_shapes.get(node.input[0])
            if node.input[0] in known:
                shape = list(known[node.input[0]].shape)
            return None if shape is None else [np.array(shape, np.int64)]
        if any(i is None for i in ins):
            return None
        if op == "Gather":
            return [np.take(ins[0], ins[1], axis=attr(node, "axis", 0))]
        if op in ("Add", "Sub", "Mul"):
            if ins[0].dtype.kind not in "iu":
                return None
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
            return [f(ins[0], ins[1])]
        if op == "Cast":
            to = _np_dtype(attr(node, "to"))
            return [ins[0].astype(to)] if np.dtype(to).kind in "iu" else None
        if op == "ConstantOfShape":
            value = attr(node, "value")
            fill = numpy_helper.to_array(value) if value is not None else \
                np.zeros(1, np.float32)
            if fill.dtype.kind not in "iu":
                return None
            return [np.full(tuple(ins[0]), fill.reshape(-1)[0], fill.dtype)]
        if op == "Concat":
            return [np.concatenate(ins, axis=attr(node, "axis"))]
        if op == "Reshape":
            shape = [d if d != 0 else ins[0].shape[i]
                     for i, d in enumerate(ins[1].tolist())]
            return [ins[0].reshape(shape)]
        if op == "Transpose":
            return [np.transpose(ins[0], attr(node, "perm"))]
        if op == "Unsqueeze":
            out = ins[0]
            for ax in sorted(int(a) % (out.ndim + len(ins[1]))
                             for a in ins[1]):
                out = np.expand_dims(out, ax)
            return [out]
        if op == "Slice":
            data, starts, ends = ins[0], ins[1], ins[2]
            axes = ins[3] if len(ins) > 3 else range(len(starts))
            steps = ins[4] if len(ins) > 4 else [1] * len(starts)
            index = [slice(None)] * data.ndim
            for s, e, a, st in zip(starts, ends, axes, steps):
                dim = data.shape[a]
                s, e = int(s), int(e)
                if st < 0:
                    e = None if e < -dim else e
                index[int(a)] = slice(max(min(s, dim), -dim - 1), e, int(st))
            return [data[tuple(index)]]
        return None

    folded_nodes = []
    for node in model.graph.node:
        ins = [known.get(i) if i else None for i in node.input]
        outs = evaluate(node, ins)
        if outs is not None and node.op_type != "Constant":
            for name, value in zip(node.output, outs):
                known[name] = np.asarray(value)
            folded_nodes.append(node)
        elif outs is not None:
            known[node.output[0]] = outs[0]

    folded = set(id(n) for n in folded_nodes)
    kept = [n for n in model.graph.node if id(n) not in folded]
    produced_by_kept = set(o for n in kept for o in n.output)
    needed = [i for n in kept for i in n.input
              if i in known and i not in produced_by_kept and
              i not in set(t.name for t in model.graph.initializer)]
    new_consts = []
    for name in dict.fromkeys(needed):
        new_consts.append(helper.make_node(
            "Constant", [], [name], name=name + "_folded",
            value=numpy_helper.from_array(np.asarray(known[name]), name)))
    # Drop Constant nodes that nothing uses any more.
    used = set(i for n in kept for i in n.input) | \
        set(o.name for o in model.graph.output)
    kept = [n for n in kept if n.op_type != "Constant" or
            any(o in used for o in n.output)]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    # Constants go right before their first user so the order stays topological.
    pending = {n.output[0]: n for n in new_consts}
    for n in kept:
        for i in n.input:
            if i in pending:
                out.graph.node.append(pending.pop(i))
        out.graph.node.append(n)
    onnx.checker.check_model(out)
    return out


def _np_dtype(onnx_type):
    from onnx import helper
    if hasattr(helper, "tensor_dtype_to_np_dtype"):  # onnx >= 1.13
        return helper.tensor_dtype_to_np_dtype(onnx_type)
    from onnx import mapping
    return mapping.TENSOR_TYPE_TO_NP_TYPE[onnx_type]
