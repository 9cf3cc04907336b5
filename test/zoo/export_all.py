#!/usr/bin/python3
"""Exports every zoo model to ONNX and prints an inventory of what mtc must import.

For each model of models.py this exports the p = 0 dropout variant
(`OUTDIR/<model>.onnx`) and, where the model has dropout, the p > 0 variant
(`OUTDIR/<model>_dropout.onnx`), both with mtc_testlib's export call
(opset 17, TrainingMode.TRAINING, do_constant_folding=False, loss first),
runs onnx.checker (full check) and strict shape inference, and prints per model
in Markdown: graph inputs/outputs, initializers (parameters vs buffers), the
op histogram split by what each node's result depends on, and the distinct
signatures (attributes, where every input comes from, unused outputs) of each
op. `--inventory FILE` also writes the report to FILE (test/zoo/INVENTORY.md
is made this way). `--mtc PATH` also runs `mtc import` on each file and
prints what mtc says (console only).

Usage: export_all.py OUTDIR [--models a,b] [--inventory FILE] [--mtc PATH]
"""

import argparse
import collections
import io
import os
import subprocess
import sys
import time

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoolib as zl  # noqa: E402
from zoolib import models, tl  # noqa: E402

MAX_VARIANTS = 10

CLASS_COLUMNS = [(zl.RUNTIME, "runtime"), (zl.PARAM, "params only"),
                 (zl.BUFFER, "buffers only"), (zl.CONST, "constants only")]


def _count_text(counter):
    return ", ".join("%s x%d" % (k, v) for k, v in counter.most_common())


# Ops whose runtime operand shapes matter (broadcasting, layouts) and are
# printed in full; for the others runtime operands print as dtype and rank.
SHAPED_OPS = set("""
MatMul Gemm Gather Expand Split Slice Concat Reshape Transpose Unsqueeze Squeeze
Softmax LayerNormalization ReduceMean ReduceSum Flatten Cast Where Equal Trilu
SoftmaxCrossEntropyLoss GlobalAveragePool MaxPool AveragePool Dropout Erf
""".split())
ELEMENTWISE_BINARY = set("Add Sub Mul Div Pow".split())
# Ops README lists as importable, but which it describes as folded shape
# computations: a use on a non-constant tensor is new work.
FOLD_ONLY = set("""
Shape Gather Concat Slice Cast ConstantOfShape Equal Where Range Squeeze Unsqueeze
Expand
""".split())


def input_desc(g, name, role, shaped=True):
    """The grouping key for one input: class, dtype, shape or value."""
    if not name:
        return "%s=(absent)" % role
    c = g.cls.get(name, zl.RUNTIME)
    shape = g.shape_text(name) if shaped else \
        " rank %d" % len(g.shapes.get(name, []))
    if name in g.inits:
        kind = "param" if name in g.params else "buffer"
        return "%s=%s initializer %s%s" % (role, kind, g.dtype(name),
                                           shape)
    if name in g.inputs:
        return "%s=graph input '%s' %s%s" % (role, name, g.dtype(name),
                                             g.shape_text(name))
    node = g.producer.get(name)
    if c == zl.CONST:
        v = g.value.get(name)
        origin = "Constant" if node is not None and \
            node.op_type == "Constant" else "folded(%s)" % node.op_type
        vt = "?" if v is None else zl._value_text(v)
        return "%s=%s %s =%s" % (role, origin, g.dtype(name), vt)
    if c in (zl.PARAM, zl.BUFFER):
        what = "params" if c == zl.PARAM else "buffers"
        return "%s=%s(%s only) %s%s" % (role, node.op_type, what,
                                        g.dtype(name), g.shape_text(name))
    return "%s=%s%s" % (role, g.dtype(name), shape)


def node_signature(g, node, schema_inputs, schema_outputs):
    op = node.op_type
    shaped = op in SHAPED_OPS
    if op in ELEMENTWISE_BINARY:
        shapes = [g.shapes.get(i) for i in node.input]
        shaped = len(set(map(str, shapes))) > 1
    attrs = zl.attrs_text(node)
    if op == "Conv":
        group = zl._attr(node, "group", 1)
        cin = (g.shapes.get(node.input[0]) or [0, 0])[1]
        if group > 1 and group == cin:
            attrs = attrs.replace("group=%d" % group,
                                  "group=C_in (depthwise)")
        attrs += ", bias %s" % ("yes" if len(node.input) > 2 and
                                node.input[2] else "no")
        shaped = False
    ins = []
    for k, name in enumerate(node.input):
        role = schema_inputs[k] if k < len(schema_inputs) else \
            schema_inputs[-1] if schema_inputs else "in%d" % k
        ins.append(input_desc(g, name, role, shaped))
    outs = []
    for k, name in enumerate(node.output):
        role = schema_outputs[k] if k < len(schema_outputs) else "out%d" % k
        text = "%s %s%s" % (role, g.dtype(name),
                            g.shape_text(name) if shaped else "")
        if name in g.outputs:
            text += " (graph output '%s')" % name
        elif not g.used(name):
            text += " (unused)"
        outs.append(text)
    return "(%s): in %s -> out %s" % (attrs, "; ".join(ins), "; ".join(outs))


def schema_names(op):
    import onnx.defs
    try:
        s = onnx.defs.get_schema(op, 17)
        return [i.name for i in s.inputs], [o.name for o in s.outputs]
    except Exception:  # noqa: unknown op
        return [], []


def analyse(exp, out):
    """Writes the Markdown inventory of one export to `out`."""
    proto = exp.proto
    g = zl.GraphInfo(proto, exp.params)
    spec = exp.spec
    w = out.write
    w("- graph inputs: %s; outputs: %s\n" % (
        ", ".join("`%s` %s%s" % (n, g.dtype(n), g.shape_text(n))
                  for n in g.inputs),
        ", ".join("`%s` %s%s" % (n, g.dtype(n), g.shape_text(n))
                  for n in g.outputs)))
    n_param = sum(int(np.prod(exp.initial[n].shape)) for n in exp.params)
    w("- initializers: %d parameters (%d values), %d buffers; every name is "
      "`model.` + the torch state_dict name%s\n" % (
          len(exp.params), n_param, len(exp.buffers),
          "" if not exp.missing else "; state_dict names not in the graph: " +
          _missing_text(exp)))
    if exp.buffers:
        kinds = collections.Counter(n.rsplit(".", 1)[-1] for n in exp.buffers)
        w("- buffers (initializers that are not trainable parameters): %s; "
          "e.g. %s\n" % (_count_text(kinds), ", ".join(
              "`%s` %s%s" % (n, g.dtype(n), g.shape_text(n))
              for n in exp.buffers[:2])))
    multi = [(n, g.consumers[n]) for n in sorted(g.inits)
             if len(g.consumers[n]) > 1]
    if multi:
        for n, users in multi:
            w("- initializer used by %d nodes: `%s` -> %s\n" % (
                len(users), n, ", ".join("%s(%s)" % (u.op_type, u.name)
                                         for u in users)))
    else:
        w("- every initializer has exactly one consumer node\n")
    graph_outs_extra = [n for n in g.outputs if n not in ("loss", "logits")]
    w("- graph outputs besides loss/logits: %s\n" % (
        ", ".join(graph_outs_extra) if graph_outs_extra else "none"))

    # Highlights.
    new_ops = collections.Counter(n.op_type for n in proto.graph.node
                                  if n.op_type not in zl.MTC_TODAY)
    outside = sorted(set(n.op_type for n in proto.graph.node
                         if n.op_type not in zl.EXPECTED_OPS))
    beyond = collections.Counter(
        "%s(%s)" % (n.op_type, g.node_class(n)) for n in proto.graph.node
        if n.op_type in FOLD_ONLY and g.node_class(n) != zl.CONST)
    int_runtime = collections.Counter(
        "%s -> %s" % (n.op_type, g.dtype(n.output[0]))
        for n in proto.graph.node
        if g.node_class(n) != zl.CONST and n.output and
        g.dtype(n.output[0]) in ("i64", "i32", "bool"))
    unused = collections.Counter(
        "%s.%s" % (n.op_type, schema_names(n.op_type)[1][k]
                   if k < len(schema_names(n.op_type)[1]) else k)
        for n in proto.graph.node for k, o in enumerate(n.output)
        if not g.used(o))
    w("- ops not in mtc's README list: %s\n" % (_count_text(new_ops) or
                                                "none"))
    w("- ops outside the issue's list: %s\n" % (", ".join(outside) or
                                                "none"))
    w("- README ops used on non-constant tensors (README describes them as "
      "folded shape computations): %s\n" % (_count_text(beyond) or "none"))
    w("- integer/bool results that are not constants: %s\n" % (
        _count_text(int_runtime) or "none"))
    w("- unused node outputs: %s\n" % (_count_text(unused) or "none"))
    bn = [n for n in proto.graph.node if n.op_type == "BatchNormalization"]
    if bn:
        sizes = collections.Counter()
        for n in bn:
            s = g.shapes.get(n.input[0])
            sizes[int(np.prod([s[0]] + s[2:]))] += 1
        w("- BatchNormalization values per channel (N*H*W): %s\n" % ", ".join(
            "%d x%d" % (k, v) for k, v in sorted(sizes.items())))

    # Histogram by class.
    hist = collections.defaultdict(collections.Counter)
    for node in proto.graph.node:
        hist[node.op_type][g.node_class(node)] += 1
    w("\n| op | nodes | %s | README list | note |\n" % " | ".join(
        c[1] for c in CLASS_COLUMNS))
    w("|---|---:|%s|---|---|\n" % "|".join("---:" for _ in CLASS_COLUMNS))
    for op in sorted(hist, key=lambda o: (-sum(hist[o].values()), o)):
        total = sum(hist[op].values())
        cols = " | ".join(str(hist[op][c[0]] or "") for c in CLASS_COLUMNS)
        today = "yes" if op in zl.MTC_TODAY else "**no**"
        note = "" if op in zl.EXPECTED_OPS else "**outside the issue's list**"
        w("| %s | %d | %s | %s | %s |\n" % (op, total, cols, today, note))
    w("\n")

    # Signatures of the nodes that compute on non-constant values.
    by_op = collections.defaultdict(list)
    const_nodes = collections.Counter()
    for node in proto.graph.node:
        if g.node_class(node) == zl.CONST and node.op_type in zl.MTC_TODAY:
            if node.op_type != "Constant":
                const_nodes["%s(%s) -> %s" % (
                    node.op_type, zl.attrs_text(node),
                    "/".join(g.dtype(o) for o in node.output))] += 1
            continue
        by_op[node.op_type].append(node)
    for op in sorted(by_op):
        ins, outs = schema_names(op)
        nodes = by_op[op]
        sigs = collections.Counter(node_signature(g, n, ins, outs)
                                   for n in nodes)
        w("- **%s** x%d\n" % (op, len(nodes)))
        for k, (sig, count) in enumerate(sigs.most_common()):
            if k == MAX_VARIANTS:
                w("  - ... %d more variants\n" % (len(sigs) - k))
                break
            w("  - x%d %s\n" % (count, sig))
    if const_nodes:
        w("- constant-only nodes (foldable at import; their values appear "
          "above as `folded(...)`): %s\n" % ", ".join(
              "%s x%d" % (k, v) for k, v in sorted(const_nodes.items())))
    return g


def _missing_text(exp):
    names = [n for n in exp.missing if n not in exp.aliases]
    kinds = collections.Counter(n.rsplit(".", 1)[-1] for n in names)
    parts = ["%s x%d (not exported: no initializer, no node)" % (k, v)
             for k, v in kinds.items()]
    parts += ["`%s` (tied: the graph uses `%s`)" % (a, b)
              for a, b in sorted(exp.aliases.items())]
    return ", ".join(parts)


def names_block(exp, out, limit=60):
    names = sorted(exp.initial)
    out.write("- initializer names (%d): " % len(names))
    if len(names) <= limit:
        out.write(", ".join("`%s`" % n for n in names) + "\n")
        return
    # Long lists: one line per distinct suffix, with the first names.
    by_suffix = collections.defaultdict(list)
    for n in names:
        by_suffix[n.rsplit(".", 1)[-1]].append(n)
    out.write("grouped by last component:\n")
    for suffix, group in sorted(by_suffix.items()):
        out.write("  - `.%s` x%d: %s%s\n" % (
            suffix, len(group), ", ".join("`%s`" % n for n in group[:3]),
            ", ..." if len(group) > 3 else ""))


def export_side_effects(spec, exp, data):
    """Checks what the exported running statistics are (console + report)."""
    import torch
    if not any(n.endswith("running_mean") for n in exp.buffers):
        return None
    fresh = tl.make_loss_wrapper(spec.build(0.0), spec.loss)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    fresh.train()
    with torch.no_grad():
        fresh(torch.from_numpy(data["input"][exp.example_idx]),
              torch.from_numpy(data["target"][exp.example_idx]))
    after = fresh.state_dict()
    stats = [n for n in exp.buffers if n.endswith(("running_mean",
                                                   "running_var"))]
    eq_before = all(np.array_equal(exp.initial[n], before[n].numpy())
                    for n in stats)
    close_after = max(tl.rel_err(exp.initial[n], after[n].numpy())
                      for n in stats)
    return eq_before, close_after


def bn_variance_semantics():
    """Which variance torch's training-mode BatchNorm puts in running_var."""
    import torch
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3, momentum=0.1)
    x = torch.randn(2, 3, 1, 1)
    bn.train()
    with torch.no_grad():
        bn(x)
    unbiased = x.var(dim=(0, 2, 3), unbiased=True)
    biased = x.var(dim=(0, 2, 3), unbiased=False)
    want_u = 0.9 * 1.0 + 0.1 * unbiased
    want_b = 0.9 * 1.0 + 0.1 * biased
    return (torch.allclose(bn.running_var, want_u, rtol=1e-6),
            torch.allclose(bn.running_var, want_b, rtol=1e-6))


def mtc_status(mtc, path):
    try:
        proc = subprocess.run([mtc, "import", path], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "cannot run mtc: %s" % e
    if proc.returncode == 0:
        return "mtc import: OK"
    return "mtc import failed (exit %d): %s" % (
        proc.returncode, summarize_mtc_error(proc.stderr))


def summarize_mtc_error(stderr):
    """One line for mtc's error; counts op types of an unsupported-op list."""
    import re
    lines = stderr.strip().splitlines()
    if not lines:
        return "(no message)"
    if "unsupported ONNX ops" in lines[0]:
        ops = collections.Counter()
        for line in lines[1:]:
            m = re.match(r"\s+(\S+) \(node ", line)
            if m:
                ops[m.group(1)] += 1
        return "unsupported ONNX ops: " + _count_text(ops)
    return lines[0]


def overview_table(overview):
    """Ops x models: node counts of the p = 0 exports (constant-only ones in
    parentheses); new ops for mtc in bold."""
    ops = sorted(set(op for counts in overview.values() for op in counts
                     if op != "Constant"),
                 key=lambda op: (op in zl.MTC_TODAY, op))
    out = io.StringIO()
    out.write("\n## Overview: nodes per op (p = 0 exports; in parentheses "
              "those computing on constants only)\n\n")
    out.write("| op | %s |\n" % " | ".join(overview))
    out.write("|---|%s|\n" % "|".join("---:" for _ in overview))
    for op in ops:
        cells = []
        for counts in overview.values():
            n, c = counts.get(op, (0, 0))
            cells.append("" if not n else "%d" % n if not c else
                         "%d (%d)" % (n, c))
        label = op if op in zl.MTC_TODAY else "**%s**" % op
        if op not in zl.EXPECTED_OPS:
            label += " (outside the issue's list)"
        out.write("| %s | %s |\n" % (label, " | ".join(cells)))
    out.write("\nBold: not in README's list of ops mtc imports.\n")
    return out.getvalue()


PATTERNS = """\
- Export side effect: tracing in training mode runs one forward pass, so the
  exported BatchNorm `running_mean`/`running_var` initializers are the values
  after one pass over the example batch (see each model), not the module's
  fresh ones.
- nn.Linear: on 2-D input `Gemm(alpha=1, beta=1, transB=1)`; on 3-D input
  `Transpose(W, perm=[1,0])` -> `MatMul(x, W^T)` -> `Add(bias, y)` (bias
  first).
- LayerNormalization (opset 17 op, not decomposed): `axis=-1`, `epsilon`
  1e-5 (nn.LayerNorm default) or 1e-6 (torchvision ViT), inputs (X, Scale,
  B) all present, one output (no Mean/InvStdDev outputs).
- GELU (erf form): `Div(x, Constant 1.4142135)` -> `Erf` -> `Add(Constant 1.0)`
  -> `Mul(x, .)` -> `Mul(., Constant 0.5)`.
- nn.Embedding: `Gather(weight param [V,d], ids)` with no axis attribute
  (axis 0) and int64 ids straight from the graph input `input`.
- nn.MultiheadAttention (torch 1.13, batch_first=True, need_weights=False):
  `Transpose` to [T,B,E]; in-projection `MatMul` + `Add`; q/k/v are three
  `Slice`s of the last axis whose bounds come from an int64 constant subgraph
  `Shape -> Gather(-1) -> Add 2 -> Div 3 (integer division) -> Mul 1/2/3`;
  `Reshape` to [T, B*heads, hd] and `Transpose`; q `Div` by Constant
  sqrt(hd); 3-D `MatMul`s [B*heads,T,hd] x [B*heads,hd,T]; `Softmax(axis=-1)`;
  a `Dropout` on the attention weights only when p > 0; out-projection
  `Gemm` on [T*B, E]; `Reshape`/`Transpose` back to [B,T,E].
- Static shapes: with no dynamic axes, every `Shape` is of a statically
  shaped tensor, so all int64 shape arithmetic (Shape, Gather, Unsqueeze,
  Concat, Add/Mul/Div on int64, ConstantOfShape, Equal/Where on shapes) folds
  at import; the only non-constant integer tensors are the graph inputs and,
  in the GPT, `Reshape(target, [-1])`.
"""
LOOKED_FOR = ["Trilu", "Pow", "Sqrt", "ScatterND", "CastLike", "Range",
              "Split", "Expand", "Where", "Equal", "Cast", "Squeeze",
              "ConstantOfShape", "Tile", "Gelu", "Einsum"]


HEADER = """# Model-zoo ONNX inventory

Generated by `test/zoo/export_all.py OUTDIR --inventory test/zoo/INVENTORY.md`
(torch {torch}, torchvision {tv}, onnx {onnx}) from the models of
`test/zoo/models.py`, exported with `mtc_testlib.export_with_loss`:
opset 17, `TrainingMode.TRAINING`, `do_constant_folding=False`, outputs
`loss` then `logits`, static shapes (no dynamic axes).

How to read the tables: a node's class is what its result depends on:
*runtime* (a graph input), *params only* (trainable initializers and
constants, e.g. `Transpose` of a weight), *buffers only* (non-trainable
initializers and constants), *constants only* (`Constant` nodes and `Shape` of
statically shaped tensors: foldable at import). "README list": whether the
op is in the README's "What works today" list of importable ops when this
harness was written (some only as folded shape computations; mtc has moved
on since: run `export_all.py --mtc PATH` for what it imports now).
Signatures list attributes, then each input as `role=source dtype shape` (or
the value of a constant), then the outputs; `(unused)` marks an output no
node reads and that is no graph output. Values print as floats rounded to 7
digits.

## Facts common to all models

"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--models", default=",".join(models.NAMES))
    ap.add_argument("--inventory", help="also write the report here")
    ap.add_argument("--mtc", help="also run `mtc import` on each export")
    ap.add_argument("--samples", type=int, default=16)
    args = ap.parse_args()

    import onnx
    import torch
    import torchvision
    torch.set_num_threads(1)
    os.makedirs(args.outdir, exist_ok=True)
    report = io.StringIO()
    report.write(HEADER.format(torch=torch.__version__.split("+")[0],
                               tv=torchvision.__version__.split("+")[0],
                               onnx=onnx.__version__))
    unbiased, biased = bn_variance_semantics()
    common = report.write
    common("- torch's training-mode BatchNorm updates `running_var` with the "
           "%s batch variance (checked here: unbiased %s, biased %s); ONNX's "
           "BatchNormalization-15 defines `running_var` with the population "
           "(biased) variance. mtc must follow torch.\n" % (
               "unbiased (n/(n-1))" if unbiased else "biased",
               unbiased, biased))
    common("- BatchNormalization `momentum` is ONNX's (weight of the old "
           "value): 1 - torch's momentum, stored as float32 (0.9 -> "
           "0.899999976).\n")
    common("- `num_batches_tracked` (int64 BatchNorm buffer) is not exported: "
           "no initializer and no node; the trainer's checkpoint cannot have "
           "it.\n")
    common("- Dropout (opset 13+): inputs (data, ratio = Constant f32 scalar, "
           "training_mode = Constant bool scalar true), outputs (output, "
           "mask): the mask output is always declared (named) but no node "
           "reads it; torch exports the node even for p = 0.\n")
    common(PATTERNS)

    body = io.StringIO()
    overview = collections.OrderedDict()  # model -> {op: (nodes, const)}
    failures = []
    mtc_lines = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        spec = models.get(name)
        data = spec.make_data(args.samples)
        variants = [(0.0, name + ".onnx")]
        if spec.has_dropout:
            variants.append((spec.dropout_p, name + "_dropout.onnx"))
        body.write("## %s\n\n%s; batch %d.\n\n" % (name, spec.description,
                                                    spec.batch))
        exports = []
        for p, fname in variants:
            path = os.path.join(args.outdir, fname)
            t0 = time.time()
            exp = zl.export(spec, p, path, data)
            t_export = time.time() - t0
            try:
                onnx.checker.check_model(path, full_check=True)
                onnx.shape_inference.infer_shapes(exp.proto, strict_mode=True)
                checked = "checker + strict shape inference OK"
            except Exception as e:  # noqa: report and go on
                checked = "CHECK FAILED: %s" % str(e).splitlines()[0]
                failures.append("%s: %s" % (fname, checked))
            print("%-26s %4d nodes  export %.2fs  %s" % (
                fname, len(exp.proto.graph.node), t_export, checked),
                flush=True)
            exports.append((p, fname, exp))
            if args.mtc:
                line = "%s: %s" % (fname, mtc_status(args.mtc, path))
                mtc_lines.append(line)
                print("  " + line, flush=True)

        p0, fname0, exp0 = exports[0]
        g0 = zl.GraphInfo(exp0.proto, exp0.params)
        counts = collections.defaultdict(lambda: [0, 0])
        for node in exp0.proto.graph.node:
            counts[node.op_type][0] += 1
            if g0.node_class(node) == zl.CONST:
                counts[node.op_type][1] += 1
        overview[name] = counts
        body.write("### `%s` (dropout p = 0)\n\n" % fname0)
        analyse(exp0, body)
        names_block(exp0, body)
        side = export_side_effects(spec, exp0, data)
        if side is not None:
            eq_before, err_after = side
            body.write("- exported `running_mean`/`running_var` values: %s "
                       "the freshly initialised module's; they equal the "
                       "state after ONE training-mode forward pass on the "
                       "example batch (rel err %.1e): tracing runs the "
                       "model, so export a copy and start references from "
                       "the ONNX initializers\n" % (
                           "equal to" if eq_before else "NOT",
                           err_after))
        if spec.has_dropout:
            n0, r0, m0, u0 = zl.dropout_facts(exp0)
            p1, fname1, exp1 = exports[1]
            n1, r1, m1, u1 = zl.dropout_facts(exp1)
            ops0 = collections.Counter(tl.op_types(exp0.proto))
            ops1 = collections.Counter(tl.op_types(exp1.proto))
            diff = (ops1 - ops0) + (ops0 - ops1)
            body.write("\n### `%s` (dropout p = %g)\n\n" % (fname1, p1))
            body.write("- Dropout nodes: %d with p = 0 (ratios %s, "
                       "training_mode %s, mask outputs %s); %d with p = %g "
                       "(ratios %s, training_mode %s, mask outputs %s)\n" % (
                           n0, sorted(r0), sorted(m0),
                           "all unused" if u0 else "SOME USED",
                           n1, p1, sorted(r1), sorted(m1),
                           "all unused" if u1 else "SOME USED"))
            body.write("- op-count difference p>0 vs p=0: %s\n" % (
                _count_text(ops1 - ops0) if diff else "none") +
                ("" if not (ops0 - ops1) else
                 "; only in p=0: " + _count_text(ops0 - ops1)) + "\n")
            if ops1 - ops0:
                g1 = zl.GraphInfo(exp1.proto, exp1.params)
                ins, outs = schema_names("Dropout")
                extra = collections.Counter(
                    node_signature(g1, nd, ins, outs)
                    for nd in exp1.proto.graph.node if nd.op_type == "Dropout")
                body.write("- Dropout signatures with p > 0:\n")
                for sig, c in extra.most_common():
                    body.write("  - x%d %s\n" % (c, sig))
        body.write("\n")

    seen = collections.defaultdict(set)
    for model_name, counts in overview.items():
        for op in counts:
            seen[op].add(model_name)
    report.write("- Ops looked for: absent from every export: %s; present: %s "
                 "(see the models' sections for how).\n" % (
                     ", ".join(op for op in LOOKED_FOR if op not in seen),
                     ", ".join("%s (%s)" % (op, ", ".join(sorted(seen[op])))
                               for op in LOOKED_FOR if op in seen)))
    report.write(overview_table(overview))
    report.write("\n" + body.getvalue())
    text = report.getvalue()
    print("")
    print(text)
    if mtc_lines:
        print("mtc status:")
        for line in mtc_lines:
            print("  " + line)
    if args.inventory:
        with open(args.inventory, "w") as f:
            f.write(text)
        print("wrote %s" % args.inventory)
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
