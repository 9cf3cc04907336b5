#!/usr/bin/python3
"""ONNX's node tests through mtc's CPU backend: the forward conformance suite.

(`--target cuda` builds the programs for the cuda target instead: on a GPU,
or on the CUDA emulation when $MTC_NVCC names test/cudaemu/nvcc-emu.)

Run with /usr/bin/python3 (Debian's python3-onnx and python3-numpy; the
BatchNormalization deviation below also uses python3-torch). The test data is
Debian's libonnx-testdata.

Every node test (`test_<name>/model.onnx` with `test_data_set_*/input_*.pb`
and `output_*.pb`) whose model uses only ops that mtc supports is compiled
with `mtc compile --forward-only` and run on each of its data sets; every
output must match ONNX's expected one: same shape and dtype, float32 within
rtol 1e-4 / atol 1e-5 (unless TOLERANCES says otherwise), integers and bools
exactly. A test listed in EXPECTED_REFUSALS must instead be refused at import
with a clear `mtc: error: ...` that contains the listed text. Anything else
fails: a wrong value, a crash, an unclear or unexpected refusal, or a test
that the table says is refused but compiles.

Translating a node test into mtc's static world (each step is printed):

* COMPILE_TIME_INPUTS: inputs that mtc needs at compile time (shapes, axes,
  pads, bounds, dropout ratio and mode) arrive in node tests as graph inputs,
  while exported models carry them as constants. They become Constant nodes
  holding the data set's value. When mtc refuses a test because its op is
  only evaluated at import ("only supported on compile-time constants"), the
  test runs again with all its inputs compiled in, which tests the
  import-time folder.
* Models older than opset 11 (mtc's oldest) are re-stamped to opset 11 when
  the op's definition did not change in between (onnx.defs says so).
* RANDOM_TESTS: outputs that depend on a random generator are checked by
  their defining property instead of ONNX's sampled values.
* DEVIATIONS: outputs where mtc follows PyTorch on purpose are compared with
  PyTorch.

Results are grouped by op: a single-node test counts for its node's op; an
`_expanded` test (the op's ONNX function body, in other ops) counts for
`<Op> (expanded)`, Op being the op of the test without the suffix.
"""

import argparse
import collections
import concurrent.futures
import copy
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper

# Where Debian's libonnx-testdata installs ONNX's node tests.
DEFAULT_TESTDATA = "/usr/share/libonnx-testdata/data/node"

# mtc's oldest supported opset of the default domain.
MIN_OPSET = 11

# ----------------------------------------------------------------------------
# Expected refusals: test name -> text that mtc's import error must contain.
#
# These tests use attributes, modes or element types that mtc refuses at
# import on purpose; the refusal must be a clear `mtc: error: ...` naming
# them, with a non-zero exit status and no crash.
# ----------------------------------------------------------------------------

_UINT8 = "has element type UINT8; mtc supports FLOAT, INT64 and BOOL inputs"
_INT8 = "has element type INT8; mtc supports FLOAT, INT64 and BOOL inputs"
_INT32 = "has element type INT32; mtc supports FLOAT, INT64 and BOOL inputs"
_CAST_TO = "casting tensors computed at run time to %s is not supported"
_IN = "input '%s' has element type %s; mtc supports FLOAT, INT64 and BOOL inputs"
_SCE_WEIGHTS = "class weights are not supported"
_POOL_RANK = "only 2-D (NCHW) inputs are supported, got rank %d"
_INT32_OUT = ("graph output '%s' has element type INT32; mtc supports FLOAT, "
              "INT64 and BOOL outputs")
# mtc computes in 16 bits inside a graph (mtc.convert) but does not take or
# give 16-bit graph inputs and outputs.
_OUT = "graph output 'output' has element type %s; mtc supports FLOAT, INT64 and BOOL outputs"

EXPECTED_REFUSALS = {
    # Element-wise arithmetic on unsupported element types.
    "test_add_uint8": _UINT8,
    "test_div_uint8": _UINT8,
    "test_mul_uint8": _UINT8,
    "test_sub_uint8": _UINT8,
    "test_clip_default_int8_inbounds": _INT8,
    "test_clip_default_int8_max": _INT8,
    "test_clip_default_int8_min": _INT8,
    "test_maxpool_2d_uint8": _UINT8,
    # Pad's edge and reflect tests feed INT32 data (refused before the mode).
    "test_edge_pad": _INT32,
    "test_reflect_pad": _INT32,
    # Cast and CastLike between types mtc does not have.
    "test_cast_BFLOAT16_to_FLOAT": _IN % ("input", "BFLOAT16"),
    "test_cast_DOUBLE_to_FLOAT": _IN % ("input", "DOUBLE"),
    "test_cast_DOUBLE_to_FLOAT16": _IN % ("input", "DOUBLE"),
    "test_cast_FLOAT16_to_DOUBLE": _IN % ("input", "FLOAT16"),
    "test_cast_FLOAT16_to_FLOAT": _IN % ("input", "FLOAT16"),
    "test_cast_STRING_to_FLOAT": _IN % ("input", "STRING"),
    "test_cast_FLOAT_to_BFLOAT16": _OUT % "BFLOAT16",
    "test_cast_FLOAT_to_DOUBLE": _CAST_TO % "DOUBLE",
    "test_cast_FLOAT_to_FLOAT16": _OUT % "FLOAT16",
    "test_cast_FLOAT_to_STRING": _CAST_TO % "STRING",
    "test_castlike_BFLOAT16_to_FLOAT_expanded": _IN % ("input", "BFLOAT16"),
    "test_castlike_DOUBLE_to_FLOAT16_expanded": _IN % ("input", "DOUBLE"),
    "test_castlike_DOUBLE_to_FLOAT_expanded": _IN % ("input", "DOUBLE"),
    "test_castlike_FLOAT16_to_DOUBLE_expanded": _IN % ("input", "FLOAT16"),
    "test_castlike_FLOAT16_to_FLOAT_expanded": _IN % ("input", "FLOAT16"),
    "test_castlike_STRING_to_FLOAT_expanded": _IN % ("input", "STRING"),
    "test_castlike_FLOAT_to_BFLOAT16_expanded": _IN % ("like", "BFLOAT16"),
    "test_castlike_FLOAT_to_DOUBLE_expanded": _IN % ("like", "DOUBLE"),
    "test_castlike_FLOAT_to_FLOAT16_expanded": _IN % ("like", "FLOAT16"),
    "test_castlike_FLOAT_to_STRING_expanded": _IN % ("like", "STRING"),
    # Where choosing between int64 tensors at run time.
    "test_where_long_example":
        "choosing between integer tensors at run time is not supported",
    # Mod (folded at import) on element types mtc does not have.
    "test_mod_broadcast": _IN % ("x", "INT32"),
    "test_mod_mixed_sign_float16": _IN % ("x", "FLOAT16"),
    "test_mod_mixed_sign_float64": _IN % ("x", "DOUBLE"),
    "test_mod_mixed_sign_int16": _IN % ("x", "INT16"),
    "test_mod_mixed_sign_int32": _IN % ("x", "INT32"),
    "test_mod_mixed_sign_int8": _IN % ("x", "INT8"),
    "test_mod_uint16": _IN % ("x", "UINT16"),
    "test_mod_uint32": _IN % ("x", "UINT32"),
    "test_mod_uint64": _IN % ("x", "UINT64"),
    "test_mod_uint8": _IN % ("x", "UINT8"),
    # Pow on element types mtc does not have (an INT32 base, an unsigned
    # exponent).
    "test_pow_types_int32_float32": _IN % ("x", "INT32"),
    "test_pow_types_int32_int32": _IN % ("x", "INT32"),
    "test_pow_types_float32_uint32":
        "constants of element type UINT32 are not supported",
    "test_pow_types_float32_uint64":
        "constants of element type UINT64 are not supported",
    # Equal and Range on INT32.
    "test_range_int32_type_negative_delta": _IN % ("start", "INT32"),
    "test_equal": _INT32,
    "test_equal_bcast": _INT32,
    # ConstantOfShape with an INT32 value: folded at import, but mtc has no
    # INT32 tensors.
    "test_constantofshape_int_shape_zero": _INT32_OUT % "y",
    "test_constantofshape_int_zeros": _INT32_OUT % "y",
    # Slice with negative steps (reversal) on a run-time tensor.
    "test_slice_neg_steps":
        "negative or zero steps on run-time tensors are not supported",
    # Optional and sequence types.
    "test_identity_opt": "input 'opt_in' is not a tensor",
    "test_identity_sequence": "input 'x' is not a tensor",
    # Dropout's mask output.
    "test_dropout_default_mask": "the mask output is not supported",
    "test_dropout_default_mask_ratio": "the mask output is not supported",
    "test_training_dropout_default_mask": "the mask output is not supported",
    "test_training_dropout_mask": "the mask output is not supported",
    "test_training_dropout_zero_ratio_mask":
        "the mask output is not supported",
    # Pooling: 1-D and 3-D windows, the Indices output.
    "test_averagepool_1d_default": _POOL_RANK % 3,
    "test_averagepool_3d_default": _POOL_RANK % 5,
    "test_maxpool_1d_default": _POOL_RANK % 3,
    "test_maxpool_3d_default": _POOL_RANK % 5,
    "test_maxpool_with_argmax_2d_precomputed_pads":
        "the Indices output is not supported",
    "test_maxpool_with_argmax_2d_precomputed_strides":
        "the Indices output is not supported",
    # SoftmaxCrossEntropyLoss with per-class weights.
    "test_sce_NCd1_mean_weight_negative_ii": _SCE_WEIGHTS,
    "test_sce_NCd1_mean_weight_negative_ii_log_prob": _SCE_WEIGHTS,
    "test_sce_NCd1d2d3_sum_weight_high_ii": _SCE_WEIGHTS,
    "test_sce_NCd1d2d3_sum_weight_high_ii_log_prob": _SCE_WEIGHTS,
    "test_sce_NCd1d2d3d4d5_mean_weight": _SCE_WEIGHTS,
    "test_sce_NCd1d2d3d4d5_mean_weight_log_prob": _SCE_WEIGHTS,
    "test_sce_mean_weight": _SCE_WEIGHTS,
    "test_sce_mean_weight_ii": _SCE_WEIGHTS,
    "test_sce_mean_weight_ii_3d": _SCE_WEIGHTS,
    "test_sce_mean_weight_ii_3d_log_prob": _SCE_WEIGHTS,
    "test_sce_mean_weight_ii_4d": _SCE_WEIGHTS,
    "test_sce_mean_weight_ii_4d_log_prob": _SCE_WEIGHTS,
    "test_sce_mean_weight_ii_log_prob": _SCE_WEIGHTS,
    "test_sce_mean_weight_log_prob": _SCE_WEIGHTS,
    "test_sce_none_weights": _SCE_WEIGHTS,
    "test_sce_none_weights_log_prob": _SCE_WEIGHTS,
}

# ----------------------------------------------------------------------------
# Inputs mtc needs at compile time: op -> input positions. Node tests feed
# them as graph inputs; here they become Constant nodes with the data set's
# value (as in exported models, where they are constants).
# ----------------------------------------------------------------------------

COMPILE_TIME_INPUTS = {
    "Clip": (1, 2),            # min, max
    "Dropout": (1, 2),         # ratio, training_mode
    "Expand": (1,),            # shape
    "Pad": (1, 2, 3),          # pads, constant_value, axes
    "Pow": (1,),               # the exponent
    "ReduceSum": (1,),         # axes
    "Reshape": (1,),           # shape
    "Slice": (1, 2, 3, 4),     # starts, ends, axes, steps
    "Split": (1,),             # split
    "Squeeze": (1,),           # axes
    "Unsqueeze": (1,),         # axes
}

# mtc's words for "this op is only evaluated at import": the test then runs
# again with every input compiled in.
FOLD_ONLY = re.compile(r"only supported on compile-time constants")

# ----------------------------------------------------------------------------
# Float tolerances: op -> (rtol, atol, why). Everything else uses the default.
# ----------------------------------------------------------------------------

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5

TOLERANCES = {
}

# ----------------------------------------------------------------------------
# Outputs drawn from a random generator: test -> (check, why). The check gets
# the inputs and ONNX's node and returns None or a reason.
# ----------------------------------------------------------------------------


def check_dropout(node, inputs, name, got, want):
    """Y is X scaled by 1/(1-ratio) where kept, 0 where dropped, and about a
    `ratio` fraction is dropped (within 5 standard deviations)."""
    x = inputs[node.input[0]]
    ratio = 0.5
    for a in node.attribute:
        if a.name == "ratio":
            ratio = a.f
    if len(node.input) > 1 and node.input[1]:
        ratio = float(inputs[node.input[1]])
    reason = check_dtype_shape(name, got, want)
    if reason:
        return reason
    kept = np.isclose(got, x / (1 - ratio), rtol=DEFAULT_RTOL,
                      atol=DEFAULT_ATOL)
    dropped = (got == 0) & ~kept
    if not np.all(kept | dropped):
        return "%s: %d elements are neither 0 nor X/(1-ratio)" % (
            name, int((~(kept | dropped)).sum()))
    n = x.size
    spread = 5 * np.sqrt(n * ratio * (1 - ratio)) + 1
    if abs(int(dropped.sum()) - n * ratio) > spread:
        return "%s: %d of %d elements dropped with ratio %g" % (
            name, int(dropped.sum()), n, ratio)
    return None


_OLD_DROPOUT = ("opset 11's Dropout has no training_mode; mtc runs it in "
                "training mode (PyTorch exports Dropout only for training), "
                "ONNX's data shows the inference copy")
_TRAINING_DROPOUT = "training_mode = 1: the mask is random"

RANDOM_TESTS = {
    "test_dropout_default_old": (check_dropout, _OLD_DROPOUT),
    "test_dropout_random_old": (check_dropout, _OLD_DROPOUT),
    "test_training_dropout": (check_dropout, _TRAINING_DROPOUT),
    "test_training_dropout_default": (check_dropout, _TRAINING_DROPOUT),
}

# ----------------------------------------------------------------------------
# Deliberate deviations: test -> {output: (reference, why)}. The reference
# gets ONNX's node and the inputs and returns the expected array.
# ----------------------------------------------------------------------------


def torch_batchnorm_running_var(node, inputs):
    """The running variance PyTorch's batch_norm leaves after one training
    step (it uses the unbiased batch variance; ONNX's data the biased one)."""
    import torch  # Debian's python3-torch; only these tests need it.
    attrs = {a.name: a.f for a in node.attribute}
    x, scale, bias, mean, var = (torch.from_numpy(inputs[n].copy())
                                 for n in node.input[:5])
    torch.nn.functional.batch_norm(
        x, mean, var, scale, bias, training=True,
        momentum=1 - attrs.get("momentum", 0.9),
        eps=attrs.get("epsilon", 1e-5))
    return var.numpy()


_UNBIASED = ("mtc updates the running variance with the unbiased batch "
             "variance, as PyTorch does (docs/runtime.md)")

DEVIATIONS = {
    "test_batchnorm_epsilon_training_mode":
        {"output_var": (torch_batchnorm_running_var, _UNBIASED)},
    "test_batchnorm_example_training_mode":
        {"output_var": (torch_batchnorm_running_var, _UNBIASED)},
}

# A refusal must be one of mtc's own error lines, not a crash.
ERROR_PREFIX = "mtc: error: "
CRASH_MARKERS = ("Stack dump", "PLEASE submit a bug report", "Assertion",
                 "terminate called", "Segmentation fault", "Aborted")

COMPILE_TIMEOUT_S = 300
RUN_TIMEOUT_S = 120


class NodeTest:
    """One test directory: its model, data sets and the op it counts for."""

    def __init__(self, name, path, model):
        self.name = name
        self.path = path
        self.model = model
        self.ops = [n.op_type for n in model.graph.node]
        self.domains = {n.domain or "ai.onnx" for n in model.graph.node}
        self.group = None
        self.data_sets = sorted(
            d for d in os.listdir(path) if d.startswith("test_data_set_"))
        initializers = {t.name for t in model.graph.initializer}
        # input_<i>.pb feeds the i-th graph input that is not an initializer.
        self.inputs = [i.name for i in model.graph.input
                       if i.name not in initializers]
        self.outputs = [o.name for o in model.graph.output]


class Result:
    """The outcome of one test: 'pass', 'refused' or 'fail', with detail and
    the steps that translated it (re-stamped opset, compiled-in inputs)."""

    def __init__(self, test, status, detail="", notes=(), seconds=0.0):
        self.test = test
        self.status = status
        self.detail = detail
        self.notes = list(notes)
        self.seconds = seconds


# ----------------------------------------------------------------------------
# Discovery and selection
# ----------------------------------------------------------------------------


def discover(testdata):
    tests = {}
    for name in sorted(os.listdir(testdata)):
        path = os.path.join(testdata, name)
        model_path = os.path.join(path, "model.onnx")
        if not name.startswith("test_") or not os.path.isfile(model_path):
            continue
        tests[name] = NodeTest(name, path, onnx.load(model_path))
    # Attribute each test to an op (see the module docstring).
    for t in tests.values():
        if t.name.endswith("_expanded"):
            base = tests.get(t.name[: -len("_expanded")])
            if base is not None and len(base.ops) == 1:
                t.group = base.ops[0] + " (expanded)"
        elif len(t.ops) == 1:
            t.group = t.ops[0]
        if t.group is None:
            t.group = "+".join(sorted(set(t.ops)))
    return list(tests.values())


def supported_ops(mtc, work):
    """The op types mtc imports, from its error on an unknown op."""
    probe = os.path.join(work, "probe.onnx")
    node = helper.make_node("Probe", ["x"], ["y"],
                            domain="mtc.conformance.probe")
    graph = helper.make_graph(
        [node], "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 13),
        helper.make_opsetid("mtc.conformance.probe", 1)])
    onnx.save(model, probe)
    proc = subprocess.run([mtc, "import", probe], capture_output=True,
                          text=True, timeout=60)
    match = re.search(r"^supported ops: (.+)$", proc.stderr, re.MULTILINE)
    if proc.returncode == 0 or not match:
        sys.exit("run_node_tests: cannot read mtc's supported ops from "
                 "`mtc import %s` (exit %d):\n%s" %
                 (probe, proc.returncode, proc.stderr))
    return set(op.strip() for op in match.group(1).split(","))


def selected(test, supported):
    return bool(test.ops) and all(op in supported for op in test.ops) and \
        test.domains <= {"ai.onnx"}


# ----------------------------------------------------------------------------
# Translating a test for mtc
# ----------------------------------------------------------------------------


def load_tensor_proto(path):
    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def load_tensor(path):
    return numpy_helper.to_array(load_tensor_proto(path))


def default_opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def unchanged_between(op, old, new):
    """Whether ONNX's definition of `op` is the same at opsets old and new."""
    try:
        return (onnx.defs.get_schema(op, old, "").since_version ==
                onnx.defs.get_schema(op, new, "").since_version)
    except onnx.defs.SchemaError:
        return False


def compile_time_inputs(test, everything):
    """The graph inputs to compile in, in graph input order: the
    COMPILE_TIME_INPUTS of each node's op, or all when `everything`."""
    wanted = set()
    for node in test.model.graph.node:
        if everything:
            positions = range(len(node.input))
        else:
            positions = COMPILE_TIME_INPUTS.get(node.op_type, ())
        for i in positions:
            if i < len(node.input) and node.input[i]:
                wanted.add(node.input[i])
    return [name for name in test.inputs if name in wanted]


class Build:
    """One model to compile and the data sets it runs."""

    def __init__(self, model_path, data_sets, runtime_inputs):
        self.model_path = model_path
        self.data_sets = data_sets
        self.runtime_inputs = runtime_inputs


def prepare(test, folder, constants):
    """The builds for `test` with the graph inputs `constants` compiled in
    (one build per distinct compiled-in value), and notes saying how."""
    model, notes = test.model, []
    opset = default_opset(model)
    if opset is not None and opset < MIN_OPSET and all(
            unchanged_between(op, opset, MIN_OPSET) for op in test.ops):
        model = copy.deepcopy(model)
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = MIN_OPSET
        notes.append("re-stamped from opset %d to %d" % (opset, MIN_OPSET))
    runtime_inputs = [n for n in test.inputs if n not in constants]
    if not constants and model is test.model:
        return [Build(os.path.join(test.path, "model.onnx"), test.data_sets,
                      runtime_inputs)], notes
    if constants:
        notes.append("compiled in: " + ", ".join(constants))
    # Data sets that compile in the same values share a build.
    def pb(data_set, name):
        return os.path.join(test.path, data_set,
                            "input_%d.pb" % test.inputs.index(name))

    groups = collections.OrderedDict()
    for data_set in test.data_sets:
        key = []
        for n in constants:
            with open(pb(data_set, n), "rb") as f:
                key.append(f.read())
        groups.setdefault(tuple(key), []).append(data_set)
    builds = []
    os.makedirs(folder)
    for k, data_sets in enumerate(groups.values()):
        m = copy.deepcopy(model)
        kept = [i for i in m.graph.input if i.name not in constants]
        del m.graph.input[:]
        m.graph.input.extend(kept)
        nodes = []
        for n in constants:
            value = load_tensor_proto(pb(data_sets[0], n))
            value.name = n
            nodes.append(helper.make_node("Constant", [], [n], value=value))
        nodes.extend(m.graph.node)
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        path = os.path.join(folder, "build%d" % k, "model.onnx")
        os.makedirs(os.path.dirname(path))
        onnx.save(m, path)
        builds.append(Build(path, data_sets, runtime_inputs))
    return builds, notes


# ----------------------------------------------------------------------------
# Running one test
# ----------------------------------------------------------------------------


def tolerance(test):
    op = test.group.replace(" (expanded)", "")
    rtol, atol, _ = TOLERANCES.get(op, (DEFAULT_RTOL, DEFAULT_ATOL, ""))
    return rtol, atol


def check_dtype_shape(name, got, want):
    if got.dtype != want.dtype:
        return "%s: dtype %s, expected %s" % (name, got.dtype, want.dtype)
    if got.shape != want.shape:
        return "%s: shape %s, expected %s" % (name, got.shape, want.shape)
    return None


def compare(name, got, want, rtol, atol):
    """None when `got` matches `want`, else a one-line reason."""
    reason = check_dtype_shape(name, got, want)
    if reason:
        return reason
    if want.dtype.kind == "f":
        if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            return None
        with np.errstate(invalid="ignore"):
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        worst = int(np.nanargmax(np.where(bad, err, -1)))
        return ("%s: %d of %d elements differ (rtol %g, atol %g); worst at "
                "flat index %d: got %r, expected %r" %
                (name, int(bad.sum()), want.size, rtol, atol, worst,
                 got.flat[worst], want.flat[worst]))
    if np.array_equal(got, want):
        return None
    bad = got != want
    first = int(np.argmax(bad))
    return ("%s: %d of %d elements differ; first at flat index %d: got %r, "
            "expected %r" % (name, int(bad.sum()), want.size, first,
                             got.flat[first], want.flat[first]))


def clear_refusal(proc):
    """The refusal message when `proc` failed cleanly, else None."""
    if proc.returncode <= 0 or proc.returncode >= 128:
        return None
    if any(marker in proc.stderr for marker in CRASH_MARKERS):
        return None
    for line in proc.stderr.splitlines():
        if line.startswith(ERROR_PREFIX):
            return proc.stderr[proc.stderr.index(line) + len(ERROR_PREFIX):]
    return None


def one_line(text, limit=300):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def run_test(mtc, work, test):
    start = time.time()
    folder = os.path.join(work, test.name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    constants = compile_time_inputs(test, everything=False)
    outcome, detail, notes = attempt(mtc, test, os.path.join(folder, "run"),
                                     constants)
    if outcome == "refused" and FOLD_ONLY.search(detail):
        every = compile_time_inputs(test, everything=True)
        if every != constants:
            outcome, detail, notes = attempt(
                mtc, test, os.path.join(folder, "folded"), every)
    expected_refusal = EXPECTED_REFUSALS.get(test.name)
    if outcome == "refused":
        if expected_refusal is None:
            hint = (" (an input for COMPILE_TIME_INPUTS?)"
                    if "compile-time" in detail else "")
            outcome, detail = "fail", "unexpected refusal: " + detail + hint
        elif expected_refusal not in detail:
            outcome, detail = "fail", (
                "refused with %r, expected a message containing %r" %
                (detail, expected_refusal))
    elif expected_refusal is not None and outcome == "pass":
        outcome, detail = "fail", (
            "compiled and ran, but EXPECTED_REFUSALS says mtc refuses it "
            "with %r" % expected_refusal)
    return Result(test, outcome, detail, notes, time.time() - start)


def attempt(mtc, test, folder, constants):
    """Compiles and runs every build of `test`: ('pass' | 'fail' | 'refused',
    detail or refusal message, notes)."""
    builds, notes = prepare(test, folder, constants)
    outcome, detail = "pass", ""
    for k, build in enumerate(builds):
        outcome, detail = run_build(mtc, test, build,
                                    os.path.join(folder, "build%d" % k))
        if outcome != "pass":
            break
    return outcome, detail, notes


# The target the programs are built for (--target).
TARGET = "cpu"


def run_build(mtc, test, build, folder):
    os.makedirs(folder, exist_ok=True)
    prog = os.path.join(folder, "prog")
    try:
        proc = subprocess.run(
            [mtc, "compile", build.model_path, "--forward-only",
             "--target", TARGET, "-o", prog],
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "fail", "mtc compile timed out after %ds" % COMPILE_TIMEOUT_S
    except OSError as e:
        return "fail", "cannot run mtc: %s" % e
    if proc.returncode != 0:
        message = clear_refusal(proc)
        if message is None:
            return "fail", ("mtc compile crashed or failed without a clear "
                            "error (exit %d): %s" % (proc.returncode,
                                                     one_line(proc.stderr)))
        # The model's path says nothing here, and would make the clipped
        # message's end depend on the work folder's length.
        return "refused", one_line(
            re.sub(r"^cannot import '[^']*': ", "", message))
    if not build.data_sets:
        return "fail", "no test_data_set_* folder"
    rtol, atol = tolerance(test)
    node = test.model.graph.node[0]
    random_check = RANDOM_TESTS.get(test.name, (None, ""))[0]
    deviations = DEVIATIONS.get(test.name, {})
    for data_set in build.data_sets:
        src = os.path.join(test.path, data_set)
        in_dir = os.path.join(folder, data_set, "in")
        out_dir = os.path.join(folder, data_set, "out")
        os.makedirs(in_dir)
        os.makedirs(out_dir)
        inputs = {}
        for i, name in enumerate(test.inputs):
            pb = os.path.join(src, "input_%d.pb" % i)
            if not os.path.isfile(pb):
                return "fail", "%s: missing %s" % (data_set, pb)
            inputs[name] = load_tensor(pb)
        for name in build.runtime_inputs:
            np.save(os.path.join(in_dir, name + ".npy"), inputs[name])
        try:
            run = subprocess.run([prog, "--inputs", in_dir, "--outputs",
                                  out_dir], capture_output=True, text=True,
                                 timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return "fail", "%s: the program timed out after %ds" % (
                data_set, RUN_TIMEOUT_S)
        except OSError as e:
            return "fail", "%s: cannot run the program: %s" % (data_set, e)
        if run.returncode != 0:
            return "fail", "%s: the program failed (exit %d): %s" % (
                data_set, run.returncode, one_line(run.stderr))
        for i, name in enumerate(test.outputs):
            want = load_tensor(os.path.join(src, "output_%d.pb" % i))
            path = os.path.join(out_dir, name + ".npy")
            if not os.path.isfile(path):
                return "fail", "%s: the program wrote no %s.npy" % (
                    data_set, name)
            got = np.load(path)
            if random_check:
                reason = random_check(node, inputs, name, got, want)
            elif name in deviations:
                reference = deviations[name][0](node, inputs)
                reason = compare(name, got, reference.astype(want.dtype),
                                 rtol, atol)
            else:
                reason = compare(name, got, want, rtol, atol)
            if reason:
                return "fail", "%s: %s" % (data_set, reason)
    return "pass", ""


# ----------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------


def summarize_notes(results):
    """Phrases saying how an op's tests were translated and checked."""
    phrases = []
    restamped = collections.OrderedDict()
    compiled_in = []
    n_compiled_in = 0
    for r in results:
        for note in r.notes:
            if note.startswith("compiled in: "):
                n_compiled_in += 1
                for name in note[len("compiled in: "):].split(", "):
                    if name not in compiled_in:
                        compiled_in.append(name)
            else:
                restamped[note] = restamped.get(note, 0) + 1
    for note, count in restamped.items():
        phrases.append("%s: %d" % (note, count))
    if compiled_in:
        phrases.append("inputs compiled in (%s): %d" % (
            ", ".join(compiled_in), n_compiled_in))
    random_tests = [r.test.name for r in results
                    if r.test.name in RANDOM_TESTS and r.status == "pass"]
    if random_tests:
        phrases.append("random, checked by property: " +
                       ", ".join(random_tests))
    deviating = [r.test.name for r in results
                 if r.test.name in DEVIATIONS and r.status == "pass"]
    if deviating:
        phrases.append("compared with PyTorch, which mtc follows: " +
                       ", ".join("%s %s" % (t, "/".join(DEVIATIONS[t]))
                                 for t in deviating))
    return phrases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mtc", required=True, help="the mtc executable")
    parser.add_argument("--work", required=True, help="scratch folder")
    parser.add_argument("--op", action="append", default=[],
                        help="run only the tests of this op, e.g. Conv "
                        "(repeatable)")
    parser.add_argument("--test", action="append", default=[],
                        help="run only this test, e.g. test_relu "
                        "(repeatable)")
    parser.add_argument("--testdata", default=DEFAULT_TESTDATA,
                        help="folder of node tests (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count()),
                        help="tests compiled and run at once")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every test's outcome and time")
    parser.add_argument("--target", default="cpu",
                        help="build the programs for this target (cuda: on "
                        "a GPU, or on the CUDA emulation with $MTC_NVCC "
                        "naming test/cudaemu/nvcc-emu)")
    args = parser.parse_args()
    global TARGET
    TARGET = args.target

    if not os.path.isdir(args.testdata):
        sys.exit("run_node_tests: no node tests at %s (install Debian's "
                 "libonnx-testdata, or pass --testdata)" % args.testdata)
    mtc = os.path.abspath(args.mtc)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    start = time.time()

    supported = supported_ops(mtc, work)
    found = discover(args.testdata)
    tests = [t for t in found if selected(t, supported)]
    # Table entries must name selected tests, so that the tables stay true.
    listed = set(EXPECTED_REFUSALS) | set(RANDOM_TESTS) | set(DEVIATIONS)
    stale = sorted(listed & ({t.name for t in found} -
                             {t.name for t in tests}))
    absent = sorted(listed - {t.name for t in found})
    if args.op:
        wanted = set(args.op)
        tests = [t for t in tests
                 if t.group in wanted or t.group.replace(" (expanded)", "")
                 in wanted]
    if args.test:
        tests = [t for t in tests if t.name in set(args.test)]
    if not tests:
        sys.exit("run_node_tests: no node test selected")

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda t: run_test(mtc, work, t), tests))

    by_op = collections.defaultdict(list)
    for r in results:
        by_op[r.test.group].append(r)
    for op in sorted(by_op, key=str.lower):
        rs = by_op[op]
        fails = [r for r in rs if r.status == "fail"]
        refused = [r for r in rs if r.status == "refused"]
        passed = [r for r in rs if r.status == "pass"]
        line = "%s %s (%d/%d tests" % ("FAIL" if fails else "PASS", op,
                                      len(passed), len(rs))
        phrases = summarize_notes(rs)
        if refused:
            phrases.append("refused as expected: " + ", ".join(
                '%s: "%s"' % (r.test.name, r.detail) for r in refused))
        print(line + "".join("; " + p for p in phrases) + ")")
        for r in fails:
            print("  FAIL %s: %s" % (r.test.name, r.detail))
        if args.verbose:
            for r in rs:
                why = [RANDOM_TESTS.get(r.test.name, (None, ""))[1]] + [
                    "%s: %s" % (out, ref[1]) for out, ref in
                    DEVIATIONS.get(r.test.name, {}).items()]
                print("  %s %s (%.1fs)%s" % (
                    r.status, r.test.name, r.seconds,
                    "".join("; " + w for w in r.notes + why if w)))

    untested = sorted(supported - {r.test.group for r in results})
    if untested and not args.op and not args.test:
        print("note: supported ops without a node test: " +
              ", ".join(untested))
    n_fail = sum(r.status == "fail" for r in results)
    n_refused = sum(r.status == "refused" for r in results)
    n_pass = sum(r.status == "pass" for r in results)
    if stale:
        n_fail += len(stale)
        print("FAIL the tables name tests whose ops mtc does not support: " +
              ", ".join(stale))
    if absent and not args.op and not args.test:
        print("note: the tables name tests that %s does not hold: %s" % (
            args.testdata, ", ".join(absent)))
    print("%d ops, %d node tests in %.0fs: %d matched ONNX, %d refused as "
          "expected" % (len(by_op), len(results), time.time() - start,
                        n_pass, n_refused))
    print("%d passed, %d failed" % (n_pass + n_refused, n_fail))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
