#!/usr/bin/python3
"""ONNX's own node tests through mtc's CPU backend: the forward conformance suite.

Run with /usr/bin/python3 (Debian's python3-onnx and python3-numpy); the test
data is Debian's libonnx-testdata.

Every node test (`test_<name>/model.onnx` with `test_data_set_*/input_*.pb`
and `output_*.pb`) whose model uses only ops that mtc supports is compiled
once with `mtc compile --forward-only` and run on each of its data sets; every
output must match ONNX's expected one (same shape and dtype; float32 within
rtol 1e-4 / atol 1e-5 unless TOLERANCES says otherwise, integers and bools
exactly). A test listed in EXPECTED_REFUSALS must instead be refused at import
with a clear `mtc: error: ...` that contains the listed text. Anything else is
a failure: a wrong value, a crash, an unclear or unexpected refusal, or a test
that the table says is refused but compiles.

Results are grouped by op: a single-node test counts for its node's op; an
`_expanded` test (the op's ONNX function body, in other ops) counts for
`<Op> (expanded)`, Op being the op of the test without the suffix.
"""

import argparse
import collections
import concurrent.futures
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

# ----------------------------------------------------------------------------
# Expected refusals: test name -> text that mtc's import error must contain.
#
# These tests use attributes, modes or dtypes that mtc refuses at import on
# purpose; the refusal must be a clear `mtc: error: ...` naming them, with a
# non-zero exit status and no crash.
# ----------------------------------------------------------------------------

EXPECTED_REFUSALS = {
}

# ----------------------------------------------------------------------------
# Float tolerances: op -> (rtol, atol, why). Everything else uses the default.
# ----------------------------------------------------------------------------

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5

TOLERANCES = {
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


class Result:
    """The outcome of one test: 'pass', 'refused' or 'fail', with detail."""

    def __init__(self, test, status, detail="", seconds=0.0):
        self.test = test
        self.status = status
        self.detail = detail
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
    """The op types mtc imports, from the error on a model with an unknown op."""
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
    return test.ops and all(op in supported for op in test.ops) and \
        test.domains <= {"ai.onnx"}


# ----------------------------------------------------------------------------
# Running one test
# ----------------------------------------------------------------------------


def load_tensor(path):
    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return numpy_helper.to_array(proto)


def graph_inputs(model):
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def tolerance(test):
    op = test.group.replace(" (expanded)", "")
    rtol, atol, _ = TOLERANCES.get(op, (DEFAULT_RTOL, DEFAULT_ATOL, ""))
    return rtol, atol


def compare(name, got, want, rtol, atol):
    """None when `got` matches `want`, else a one-line reason."""
    if got.dtype != want.dtype:
        return "%s: dtype %s, expected %s" % (name, got.dtype, want.dtype)
    if got.shape != want.shape:
        return "%s: shape %s, expected %s" % (name, got.shape, want.shape)
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
    status, detail = run_test_inner(mtc, work, test)
    return Result(test, status, detail, time.time() - start)


def run_test_inner(mtc, work, test):
    folder = os.path.join(work, test.name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    prog = os.path.join(folder, "prog")
    try:
        proc = subprocess.run(
            [mtc, "compile", os.path.join(test.path, "model.onnx"),
             "--forward-only", "-o", prog],
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "fail", "mtc compile timed out after %ds" % COMPILE_TIMEOUT_S
    expected_refusal = EXPECTED_REFUSALS.get(test.name)
    if proc.returncode != 0:
        message = clear_refusal(proc)
        if message is None:
            return "fail", "mtc compile crashed or failed without a clear " \
                "error (exit %d): %s" % (proc.returncode, one_line(proc.stderr))
        if expected_refusal is None:
            return "fail", "unexpected refusal: " + one_line(message)
        if expected_refusal not in message:
            return "fail", "refused with %r, expected a message containing " \
                "%r" % (one_line(message), expected_refusal)
        return "refused", one_line(message)
    if expected_refusal is not None:
        return "fail", "compiled, but EXPECTED_REFUSALS says mtc refuses it " \
            "with %r" % expected_refusal
    if not test.data_sets:
        return "fail", "no test_data_set_* folder"
    rtol, atol = tolerance(test)
    inputs = graph_inputs(test.model)
    outputs = [o.name for o in test.model.graph.output]
    for data_set in test.data_sets:
        src = os.path.join(test.path, data_set)
        in_dir = os.path.join(folder, data_set, "in")
        out_dir = os.path.join(folder, data_set, "out")
        os.makedirs(in_dir)
        os.makedirs(out_dir)
        for i, name in enumerate(inputs):
            pb = os.path.join(src, "input_%d.pb" % i)
            if not os.path.isfile(pb):
                return "fail", "%s: missing %s" % (data_set, pb)
            np.save(os.path.join(in_dir, name + ".npy"), load_tensor(pb))
        try:
            run = subprocess.run([prog, "--inputs", in_dir, "--outputs",
                                  out_dir], capture_output=True, text=True,
                                 timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return "fail", "%s: the program timed out after %ds" % (
                data_set, RUN_TIMEOUT_S)
        if run.returncode != 0:
            return "fail", "%s: the program failed (exit %d): %s" % (
                data_set, run.returncode, one_line(run.stderr))
        for i, name in enumerate(outputs):
            want = load_tensor(os.path.join(src, "output_%d.pb" % i))
            path = os.path.join(out_dir, name + ".npy")
            if not os.path.isfile(path):
                return "fail", "%s: the program wrote no %s.npy" % (
                    data_set, name)
            reason = compare(name, np.load(path), want, rtol, atol)
            if reason:
                return "fail", "%s: %s" % (data_set, reason)
    return "pass", ""


# ----------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mtc", required=True, help="the mtc executable")
    parser.add_argument("--work", required=True, help="scratch folder")
    parser.add_argument("--op", action="append", default=[],
                        help="run only the tests of this op (repeatable)")
    parser.add_argument("--test", action="append", default=[],
                        help="run only this test, e.g. test_relu "
                        "(repeatable)")
    parser.add_argument("--testdata", default=DEFAULT_TESTDATA,
                        help="folder of node tests (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count()),
                        help="tests compiled and run at once")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every test's outcome")
    args = parser.parse_args()

    if not os.path.isdir(args.testdata):
        sys.exit("run_node_tests: no node tests at %s (install Debian's "
                 "libonnx-testdata, or pass --testdata)" % args.testdata)
    mtc = os.path.abspath(args.mtc)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    start = time.time()

    supported = supported_ops(mtc, work)
    tests = [t for t in discover(args.testdata) if selected(t, supported)]
    stale = sorted(set(EXPECTED_REFUSALS) - {t.name for t in tests})
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
    failed_ops = 0
    for op in sorted(by_op, key=str.lower):
        rs = by_op[op]
        fails = [r for r in rs if r.status == "fail"]
        refused = [r for r in rs if r.status == "refused"]
        passed = [r for r in rs if r.status == "pass"]
        line = "%s %s (%d/%d tests" % ("FAIL" if fails else "PASS", op,
                                      len(passed), len(rs))
        if refused:
            line += "; refused as expected: " + ", ".join(
                '%s: "%s"' % (r.test.name, r.detail) for r in refused)
        print(line + ")")
        for r in fails:
            print("  FAIL %s: %s" % (r.test.name, r.detail))
        if args.verbose:
            for r in passed:
                print("  pass %s (%.1fs)" % (r.test.name, r.seconds))
        failed_ops += bool(fails)

    n_fail = sum(r.status == "fail" for r in results)
    n_refused = sum(r.status == "refused" for r in results)
    n_pass = sum(r.status == "pass" for r in results)
    if stale and not args.op and not args.test:
        n_fail += len(stale)
        print("FAIL EXPECTED_REFUSALS names tests that are not selected: " +
              ", ".join(stale))
    print("%d ops, %d node tests in %.0fs: %d passed, %d refused as expected"
          % (len(by_op), len(results), time.time() - start, n_pass,
             n_refused))
    print("%d passed, %d failed" % (n_pass + n_refused, n_fail))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
