#!/usr/bin/python3
"""Trains a real model (models.py) with mtc and checks it against PyTorch.

For --model NAME this
  * exports the model with its loss inside (dropout p = 0, and the p > 0
    variant where the model has dropout) with mtc_testlib's export call, and
    checks the files: onnx.checker, initializer names (`model.` + torch's
    state_dict names), Dropout nodes in training mode with the given ratio;
  * computes the PyTorch references, starting from the exported initializers,
    on STEPS * batch samples (a fresh batch every step): the gradients of the
    first step, and 20-step trajectories for SGD (momentum, weight decay) and
    AdamW (losses; parameters, optimizer state and buffers such as BatchNorm
    running statistics after 5 and 20 steps), plus PyTorch's own rounding
    error for each (float64 runs, reordered batches: see NOISE_FP64);
  * compiles the p = 0 model with `mtc compile --target cpu` once per
    optimizer and requires, each within 1e-4 relative: the gradients after
    one step (`--dump-grads`), the BatchNorm running statistics (and other
    buffers) in the `--save` checkpoint after 5 steps, under their ONNX
    initializer names, and every loss of the 20-step trajectories
    (`--metrics`); that `--steps 0 --save` writes the ONNX initializers
    bitwise, a rerun gives bitwise the same losses, and the files hold no
    unexpected tensors. Parameters, optimizer state and buffers after 20 steps
    are required to match too for the smooth models, and reported only for
    the CNNs (ReLU/max-pool kinks make them ill-posed; see models.py);
  * evaluates and exports with the first configuration's trainer (SGD):
    `--eval --load` of its 5-step checkpoint, on the training samples plus a
    part batch it must leave out, against PyTorch's eval-mode model (dropout
    off, BatchNorm on running statistics) holding the checkpoint's tensors:
    the mean of the batch losses within 1e-4 relative, the same number of
    correct predictions (one flip allowed only at a logit near-tie under
    1e-5). The inference model that same run wrote with `--export`: it
    passes onnx.checker (full), has no Dropout, BatchNormalization in
    inference mode only, no loss output, the training inputs but the labels,
    and every initializer bitwise equal to the run's `--save` checkpoint;
    compiled again with `--loss cross-entropy --labels target --freeze '*'`
    its `--eval` prints the trainer's lines (the GPT's [B, T, V] logits get
    one appended Transpose to [B, V, T], the layout `--loss` reads: see
    _class_axis_first), and compiled `--forward-only` its logits of the
    first batch match PyTorch's within 1e-4;
  * compiles the p > 0 model and checks that dropout is deterministic: the
    same --seed gives bitwise identical losses, another seed other losses;
    and that it is off in --eval and --export: loading the p = 0 trainer's
    checkpoint, its `--eval` prints the p = 0 trainer's lines, and its
    `--export` has no Dropout and the checkpoint's weights.

When mtc cannot import the model yet (unsupported ONNX ops, or an op form the
importer refuses) the check says so in one line and fails; everything before
the mtc call still runs.

--torch-only skips mtc and checks the references themselves: the same
trajectory computed twice is bitwise identical, rounding-level input noise
moves no step-0 gradient by more than a third of the tolerance, and the
float32 loss trajectories stay within a fifth of it from float64 ones; it
also prints PyTorch's own float32 error for everything compared (slow for
the CNNs: ~15-40 s).

Usage: check_zoo.py --model NAME --mtc PATH --work DIR [--target cpu]
       check_zoo.py --model NAME --work DIR --torch-only
Exit status 0 when everything passes, 1 otherwise.
"""

import argparse
import os
import re
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean under lit
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoolib as zl  # noqa: E402
from zoolib import models, tl  # noqa: E402

STEPS = 20
BN_STEPS = 5
DROPOUT_STEPS = 5

GRAD_TOL = 1e-4
LOSS_TOL = 1e-4
PARAM_TOL = 1e-4
STATE_TOL = 1e-4
BUFFER_TOL = 1e-4
# A tensor also passes when its error is within a few times PyTorch's own
# float32 rounding error for that tensor: gradients that are zero in exact
# arithmetic (a bias followed by BatchNorm, attention's key bias), running
# means of such channels, and AdamW's moves of parameters whose gradient is
# only rounding noise are noise in any float32 implementation, and a relative
# error means nothing there. PyTorch's own error is measured against float64
# for the gradients and the 5-step buffers (NOISE_FP64 times it is allowed),
# and for the 20-step results, where float64 would be too slow for ResNet, as
# the difference to a float32 run fed each batch's samples in reverse order:
# the same mathematics, other rounding (NOISE_REORDERED times it).
NOISE_FP64 = 10.0
NOISE_REORDERED = 30.0
# A ReLU's or ReLU6's input within float32 rounding of its kink is a knife
# edge: which side of it an implementation lands on decides whether that
# element's gradient passes, and the flip moves the gradients below it by
# far more than rounding. Inputs of the first step's activations within
# KINK_REL of a kink (relative to the RMS of that activation's input, in
# float64) are such edges; when mtc's gradients miss PyTorch's, they are
# compared with float64 gradients with one of the MAX_KINK_FLIPS closest
# edges flipped at a time (the exact gradients of the same function at an
# input within rounding of this one) before the check fails.
KINK_REL = 2e-5
MAX_KINK_FLIPS = 32


def num_samples(spec):
    """Fresh samples for every step: STEPS batches, no repeats."""
    return STEPS * spec.batch


# ----------------------------------------------------------------------------
# Optimizers
# ----------------------------------------------------------------------------


def _num(v):
    return repr(float(v))


def optimizer_configs(spec):
    """name -> (mtc compile flags, torch optimizer factory, {torch key: slot})."""
    import torch
    s, a = spec.sgd, spec.adamw
    sgd_flags = ["--optimizer", "sgd", "--lr", _num(s["lr"]),
                 "--momentum", _num(s["momentum"]),
                 "--weight-decay", _num(s["weight_decay"])]
    adamw_flags = ["--optimizer", "adamw", "--lr", _num(a["lr"]),
                   "--beta1", _num(a["betas"][0]),
                   "--beta2", _num(a["betas"][1]),
                   "--eps", _num(a["eps"]),
                   "--weight-decay", _num(a["weight_decay"])]
    return {
        "sgd": (sgd_flags,
                lambda p: torch.optim.SGD(p, lr=s["lr"],
                                          momentum=s["momentum"],
                                          weight_decay=s["weight_decay"]),
                {"momentum_buffer": "momentum"} if s["momentum"] else {}),
        "adamw": (adamw_flags,
                  lambda p: torch.optim.AdamW(p, lr=a["lr"], betas=a["betas"],
                                              eps=a["eps"],
                                              weight_decay=a["weight_decay"]),
                  {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}),
    }


# ----------------------------------------------------------------------------
# PyTorch references
# ----------------------------------------------------------------------------


def batch_indices(step, batch, n):
    """The trainer's rule: step i uses samples (i*B + j) mod numSamples."""
    return (step * batch + np.arange(batch)) % n


def _batch(data, idx, dtype=None):
    import torch
    x = torch.from_numpy(data["input"][idx])
    if dtype is not None and x.is_floating_point():
        x = x.to(dtype)
    return x, torch.from_numpy(data["target"][idx])


def _numpy(t):
    return t.detach().cpu().numpy().copy()


def _kinked_activations(wrapper):
    """The wrapper's ReLU / ReLU6 (Hardtanh) modules with their kinks, made
    out of place (the same values) so that their inputs stay readable."""
    import torch.nn as nn
    found = []
    for mod in wrapper.modules():
        if isinstance(mod, nn.ReLU):
            kinks = (0.0,)
        elif isinstance(mod, nn.Hardtanh):
            kinks = (float(mod.min_val), float(mod.max_val))
        else:
            continue
        mod.inplace = False
        found.append((mod, kinks))
    return found


def _kink_hook(kinks, calls, flips, edges):
    """A forward hook of an activation with `kinks`: records its inputs near
    a kink into `edges` ((call, flat index, distance / RMS), when not None)
    and inverts the gradient mask of the (call, flat index) pairs in
    `flips` (the output's value stays)."""
    import torch

    def hook(mod, inputs, output):
        call = len(calls)
        calls.append(call)
        x = inputs[0]
        if edges is not None:
            xd = x.detach().double().flatten()
            rms = float(xd.pow(2).mean().sqrt())
            dist = torch.stack([(xd - k).abs() for k in kinks]).min(0).values
            for i in torch.nonzero(dist <= KINK_REL * rms).flatten().tolist():
                edges.append((call, i, float(dist[i]) / max(rms, 1e-30)))
        mine = [i for c, i in flips if c == call]
        if not mine:
            return None
        with torch.no_grad():
            at = torch.tensor(mine)
            v = x.detach().flatten()[at]
            passes = (v > kinks[0]) if len(kinks) == 1 else \
                ((v > kinks[0]) & (v < kinks[1]))
            delta = torch.zeros(x.numel(), dtype=x.dtype)
            delta[at] = 1.0 - 2.0 * passes.to(x.dtype)
        # d/dx adds delta * dL/doutput: a blocked element passes, a passing
        # one is blocked.
        return output + (x - x.detach()) * delta.view_as(x)
    return hook


def torch_gradients(exp, data, dtype=None, flips=(), edges=None):
    """(loss, {param name: gradient}) of the first training step. `edges`
    (a list) receives the activation inputs near a kink (see KINK_REL);
    `flips` lists those whose gradient mask is inverted."""
    wrapper = zl.reference_wrapper(exp, dtype=dtype)
    calls = []
    for mod, kinks in _kinked_activations(wrapper):
        mod.register_forward_hook(_kink_hook(kinks, calls, flips, edges))
    x, y = _batch(data, batch_indices(0, exp.spec.batch,
                                      len(data["target"])), dtype)
    loss = wrapper(x, y)[0]
    loss.backward()
    grads = {}
    for name, p in zl.parameters_by_name(wrapper, exp.params):
        grads[name] = _numpy(p.grad) if p.grad is not None else \
            np.zeros(tuple(p.shape), np.float32)
    return float(loss), grads


def torch_trajectory(exp, data, make_opt, slots, dtype=None, reverse=False,
                     steps=STEPS):
    """Losses of `steps` steps; params, state and buffers at the end; buffers
    after BN_STEPS steps. `reverse` feeds each batch's samples in reverse
    order: the same mathematics, other float32 rounding."""
    wrapper = zl.reference_wrapper(exp, dtype=dtype)
    params = zl.parameters_by_name(wrapper, exp.params)
    opt = make_opt([p for _, p in params])
    losses, buffers_early = [], None
    for step in range(steps):
        idx = batch_indices(step, exp.spec.batch, len(data["target"]))
        x, y = _batch(data, idx[::-1] if reverse else idx, dtype)
        opt.zero_grad()
        loss = wrapper(x, y)[0]
        loss.backward()
        losses.append(float(loss))
        opt.step()
        if step + 1 == BN_STEPS:
            state = wrapper.state_dict()
            buffers_early = {n: _numpy(state[n]) for n in exp.buffers}
    final = {n: _numpy(p) for n, p in params}
    opt_state = {}
    for n, p in params:
        for key, slot in slots.items():
            opt_state["%s.%s" % (n, slot)] = _numpy(opt.state[p][key])
    state = wrapper.state_dict()
    buffers = {n: _numpy(state[n]) for n in exp.buffers}
    return {"losses": np.array(losses), "params": final, "state": opt_state,
            "buffers": buffers, "buffers_early": buffers_early}


# ----------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------


class Report:
    def __init__(self):
        self.failures = []
        self.worst = {}
        self.times = {}

    def check(self, ok, what, detail=""):
        print("  [%s] %s%s" % ("PASS" if ok else "FAIL", what,
                               ("  " + detail) if detail else ""), flush=True)
        if not ok:
            self.failures.append(what + ((": " + detail) if detail else ""))
        return ok

    def note(self, ok, what, detail=""):
        """A comparison that is reported but cannot fail the check."""
        print("  [%s] %s%s" % ("INFO" if ok else "INFO, over tol", what,
                               ("  " + detail) if detail else ""), flush=True)
        return ok

    def error(self, what, err):
        text = str(err)
        print("  [FAIL] %s\n%s" % (what, "\n".join(
            "      " + line for line in text.splitlines())), flush=True)
        self.failures.append("%s: %s" % (what, text.splitlines()[0]
                                         if text else ""))


def _norm(a):
    return float(np.linalg.norm(np.asarray(a, np.float64).ravel()))


def group_errors(got, want, noise_ref, factor, tol, noise=None):
    """(failing tensors' lines, (worst rel err, its name), how many passed
    on noise alone) of compare_group; `noise` ({name: norm}) replaces
    ||want - noise_ref|| as PyTorch's own rounding error."""
    bad, worst, on_noise = [], (0.0, None), 0
    for name in sorted(want):
        w = want[name]
        g = got.get(name)
        if g is None:
            bad.append("%s missing" % name)
            worst = (float("inf"), name)
            continue
        if g.shape != w.shape:
            bad.append("%s has shape %s, expected %s" % (
                name, list(g.shape), list(w.shape)))
            worst = (float("inf"), name)
            continue
        err = _norm(g.astype(np.float64) - w)
        ref = _norm(w)
        rel = err / max(ref, 1e-30)
        own = noise[name] if noise is not None else \
            _norm(w.astype(np.float64) - noise_ref[name])
        allowed = max(tol * ref, factor * own)
        if not np.isfinite(g).all():
            err = rel = float("inf")
        if err > allowed:
            bad.append("%s rel err %.3e (torch's own %.1e)" % (
                name, rel, own / max(ref, 1e-30)))
        elif err > tol * ref:
            on_noise += 1
        if rel >= worst[0] or worst[1] is None:
            worst = (rel, name)
    return bad, worst, on_noise


def compare_group(report, label, got, want, noise_ref, factor, tol,
                  key=None, required=True):
    """Checks every tensor of `want` (PyTorch fp32) against `got` (mtc).

    A tensor passes when ||got - want|| <= tol * ||want||, or when the error
    is at most `factor` times PyTorch's own rounding error ||want - noise_ref||
    (`noise_ref`: the same result in float64 or from reordered batches).
    One line per group, listing the failing tensors.
    """
    bad, worst, on_noise = group_errors(got, want, noise_ref, factor, tol)
    if key:
        report.worst[key] = worst
    detail = "%d tensors, worst rel err %.3e (%s), tol %.0e" % (
        len(want), worst[0], worst[1], tol)
    if on_noise:
        detail += "; %d over tol but within %gx PyTorch's own rounding " \
            "error" % (on_noise, factor)
    if bad:
        detail += "; %d over: %s" % (len(bad), "; ".join(bad[:6]) +
                                     (" ..." if len(bad) > 6 else ""))
    if not required:
        return report.note(not bad, label, detail)
    return report.check(not bad, label, detail)


def loss_drift(losses, ref):
    rel = np.abs(np.asarray(losses) - ref) / np.maximum(np.abs(ref), 1e-12)
    rel[~np.isfinite(losses)] = np.inf
    return rel


def compare_losses(report, label, losses, ref32, ref_noise, key=None):
    """Every step within LOSS_TOL of PyTorch fp32 (PyTorch's own drift under
    reordered batches is printed alongside to show how much room is left)."""
    rel = loss_drift(losses, ref32)
    own = loss_drift(ref_noise, ref32).max()
    step = int(np.argmax(rel))
    if key:
        report.worst[key] = (float(rel[step]), "step %d" % step)
    return report.check(
        bool(np.all(rel <= LOSS_TOL)), label,
        "max rel err %.3e at step %d (mtc %.9g, torch %.9g); torch's own "
        "drift %.1e" % (rel[step], step, losses[step], ref32[step], own))


def mtc_error_summary(err):
    """One line for an mtc compile failure that is about importing the model
    (unsupported ops, or an op's form the importer refuses); None otherwise.
    The other configurations compile the same graph, so the check stops."""
    text = str(err)
    if "unsupported ONNX ops" in text:
        ops = {}
        for m in re.finditer(r"^\s+(\S+) \(node '", text, re.M):
            ops[m.group(1)] = ops.get(m.group(1), 0) + 1
        listed = ", ".join("%s x%d" % kv for kv in sorted(
            ops.items(), key=lambda kv: -kv[1]))
        return "mtc cannot import it yet: unsupported ONNX ops: %s" % (
            listed or "(see mtc's message)")
    m = re.search(r"^mtc: error: (cannot import .*)$", text, re.M)
    if m:
        return "mtc cannot import it yet: %s" % m.group(1)
    return None


# ----------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------


def check_exports(report, spec, exp0, exp1):
    import onnx
    for exp in [e for e in (exp0, exp1) if e is not None]:
        try:
            onnx.checker.check_model(exp.path, full_check=True)
            report.check(True, "%s passes onnx.checker (full)" %
                         os.path.basename(exp.path))
        except Exception as e:  # noqa: report and go on
            report.check(False, "%s passes onnx.checker" %
                         os.path.basename(exp.path), str(e).splitlines()[0])
    odd = [n for n in exp0.missing if n not in exp0.aliases and
           not n.endswith(".num_batches_tracked")]
    nbt = [n for n in exp0.missing if n.endswith(".num_batches_tracked")]
    report.check(not odd, "initializers are `model.` + torch state_dict names",
                 "%d params, %d buffers%s%s%s" % (
                     len(exp0.params), len(exp0.buffers),
                     "; tied: " + ", ".join("%s is %s" % kv for kv in
                                            sorted(exp0.aliases.items()))
                     if exp0.aliases else "",
                     "; %d num_batches_tracked not exported" % len(nbt)
                     if nbt else "",
                     "; not in the graph: " + ", ".join(odd) if odd else ""))
    for exp, ratio in ((exp0, 0.0), (exp1, spec.dropout_p)):
        if exp is None:
            continue
        n, ratios, modes, unused = zl.dropout_facts(exp)
        if not spec.has_dropout:
            report.check(n == 0, "no Dropout nodes", "%d found" % n)
            continue
        ok = n > 0 and ratios == {round(ratio, 7)} and modes == {True}
        report.check(ok, "%s: Dropout nodes in training mode, ratio %g" % (
            os.path.basename(exp.path), ratio),
            "%d nodes, ratios %s, training_mode %s, masks %s" % (
                n, sorted(ratios, key=str), sorted(modes, key=str),
                "unused" if unused else "USED"))


def run_mtc(report, args, exp0, exp1, data, data_dir, refs, grads_ref,
            buffers64, configs, wanted):
    """All mtc-side checks; returns the time spent in mtc compile."""
    compile_time = 0.0
    head = None  # the first config's trainer and its BN_STEPS-step run
    for name in wanted:
        flags, _, slots = configs[name]
        r32, rrev = refs[name]
        out_dir = os.path.join(args.work, name)
        print("config %s: mtc compile %s" % (name, " ".join(flags)),
              flush=True)
        t0 = time.time()
        try:
            # Gradients are dumped from the first configuration only; the
            # others run with early updates (gradients released).
            extra = ["--keep-grads"] if name == wanted[0] else []
            trainer = tl.mtc_compile(args.mtc, exp0.path, out_dir,
                                     list(flags) + extra, target=args.target)
        except tl.HarnessError as e:
            compile_time += time.time() - t0
            summary = mtc_error_summary(e)
            if summary:
                report.check(False, "mtc compile %s" %
                             os.path.basename(exp0.path), summary)
                return compile_time  # the other configs would say the same
            report.error("%s: mtc compile" % name, e)
            continue
        compile_time += time.time() - t0
        try:
            if name == wanted[0]:
                ckpt, export = check_first_steps(
                    report, trainer, data_dir, out_dir, exp0, grads_ref, r32,
                    buffers64)
                head = (name, trainer, ckpt, export)
            metrics = os.path.join(out_dir, "metrics.jsonl")
            final = os.path.join(out_dir, "final.safetensors")
            tl.run_trainer(trainer, STEPS, data=data_dir, metrics=metrics,
                           save=final)
            losses = tl.read_losses(metrics, STEPS)
            compare_losses(report, "%s loss trajectory (%d steps)" % (
                name, STEPS), losses, r32["losses"], rrev["losses"],
                key="loss " + name)
            # For the GPU check's cuda-vs-cpu comparison of checkpoints.
            tl.write_torch_noise(
                out_dir, {**r32["params"], **r32["state"], **r32["buffers"]},
                {**rrev["params"], **rrev["state"], **rrev["buffers"]},
                NOISE_REORDERED, required=exp0.spec.smooth)
            saved, meta = tl.read_safetensors(final)
            report.check(str(meta.get("step")) == str(STEPS),
                         "%s checkpoint metadata step" % name,
                         "got %r" % meta.get("step"))
            # Kinks (ReLU, MaxPool) make these ill-posed: see models.py.
            strict = exp0.spec.smooth
            compare_group(report, "%s params after %d steps" % (name, STEPS),
                          saved, r32["params"], rrev["params"],
                          NOISE_REORDERED, PARAM_TOL,
                          key="params " + name, required=strict)
            if slots:
                compare_group(report, "%s optimizer state (%s)" % (
                    name, ", ".join(slots.values())), saved, r32["state"],
                    rrev["state"], NOISE_REORDERED, STATE_TOL,
                    key="state " + name, required=strict)
            if exp0.buffers:
                compare_group(report, "%s buffers after %d steps" % (
                    name, STEPS), saved, r32["buffers"], rrev["buffers"],
                    NOISE_REORDERED, BUFFER_TOL,
                    key="buffers@%d %s" % (STEPS, name), required=strict)
            expected = set(r32["params"]) | set(r32["state"]) | \
                set(r32["buffers"])
            extra = sorted(set(saved) - expected)
            report.check(not extra, "%s no unexpected tensors in --save" %
                         name, ", ".join(extra[:10]))
            if name == wanted[0]:
                # The BN_STEPS-step run of check_first_steps, again.
                early = os.path.join(out_dir, "metrics%d.jsonl" % BN_STEPS)
                first = [r["loss"] for r in tl.read_metrics(metrics)]
                second = [r["loss"] for r in tl.read_metrics(early)]
                same = first[:BN_STEPS] == second
                report.check(same, "%s deterministic rerun (the first %d "
                             "losses of two runs are bitwise equal)" % (
                                 name, BN_STEPS),
                             "" if same else "%r vs %r" % (
                                 first[:3], second[:3]))
        except tl.HarnessError as e:
            report.error(name, e)

    evals = None
    if head is not None:
        t0 = time.time()
        evals, elapsed = check_eval_and_export(report, args, exp0, data,
                                               *head)
        compile_time += elapsed
        report.times["eval/export"] = time.time() - t0
    if exp1 is not None:
        compile_time += check_dropout(report, args, exp1, data_dir,
                                      configs[wanted[0]][0], evals)
    return compile_time


def check_first_steps(report, trainer, data_dir, out_dir, exp, grads_ref,
                      r32, buffers64):
    """--steps 0 --save, --dump-grads after one step, buffers after 5 steps
    (that run's losses also serve the determinism check)."""
    p0_path = os.path.join(out_dir, "initial.safetensors")
    tl.run_trainer(trainer, 0, data=data_dir, save=p0_path)
    p0, _ = tl.read_safetensors(p0_path)
    bad = [n for n in sorted(exp.initial)
           if n not in p0 or p0[n].shape != exp.initial[n].shape or
           not np.array_equal(p0[n], exp.initial[n])]
    report.check(not bad, "--steps 0 --save equals the ONNX initializers "
                 "(params and buffers, bitwise)", ", ".join(bad[:10]))

    loss0, grads32, grads64, flipped = grads_ref
    grads_path = os.path.join(out_dir, "grads.safetensors")
    tl.run_trainer(trainer, 1, data=data_dir, dump_grads=grads_path)
    got, meta = tl.read_safetensors(grads_path)
    edge = None
    if group_errors(got, grads32, grads64, NOISE_FP64, GRAD_TOL)[0]:
        # PyTorch's own rounding error stays that of the unflipped pair.
        own = {n: _norm(grads32[n].astype(np.float64) - grads64[n])
               for n in grads32}
        edge = next(((what, alt) for what, alt in flipped()
                     if not group_errors(got, alt, None, NOISE_FP64,
                                         GRAD_TOL, noise=own)[0]), None)
    if edge:
        # The worst of the tensors that are more than rounding noise (a
        # bias before a batch norm has a zero gradient: a float64 one of
        # 1e-17 makes any float32 one's relative error huge).
        alt = {n: g for n, g in edge[1].items()
               if _norm(g) > NOISE_FP64 * own[n]}
        _, worst, _ = group_errors(got, alt, None, NOISE_FP64, GRAD_TOL,
                                   noise=own)
        report.worst["grad"] = worst
        report.check(True, "gradients of step 0",
                     "%d tensors, worst rel err %.3e (%s), tol %.0e, against "
                     "PyTorch float64 with %s" % (len(grads32), worst[0],
                                                  worst[1], GRAD_TOL,
                                                  edge[0]))
    else:
        compare_group(report, "gradients of step 0", got, grads32, grads64,
                      NOISE_FP64, GRAD_TOL, key="grad")
    extra = sorted(set(got) - set(grads32))
    report.check(not extra, "gradient dump holds trainable parameters only",
                 ", ".join(extra[:10]))
    if "loss" in meta:
        err = abs(float(meta["loss"]) - loss0) / abs(loss0)
        report.check(err <= LOSS_TOL, "gradient dump loss",
                     "mtc %.9g torch %.9g rel err %.3e" % (
                         float(meta["loss"]), loss0, err))
    else:
        report.check(False, "gradient dump loss", "no \"loss\" metadata")

    early_path = os.path.join(out_dir, "steps%d.safetensors" % BN_STEPS)
    export_path = os.path.join(out_dir, "export.onnx")
    early_metrics = os.path.join(out_dir, "metrics%d.jsonl" % BN_STEPS)
    # The same run writes the inference model (check_export_file compares
    # its weights with this run's checkpoint). Should --export fail, the
    # run is repeated without it so that the other checks still run.
    try:
        tl.run_trainer(trainer, BN_STEPS, data=data_dir, save=early_path,
                       metrics=early_metrics,
                       extra=["--export", export_path])
    except tl.HarnessError as e:
        report.error("--steps %d --save --export" % BN_STEPS, e)
        export_path = None
        tl.run_trainer(trainer, BN_STEPS, data=data_dir, save=early_path,
                       metrics=early_metrics)
    if exp.buffers:
        early, _ = tl.read_safetensors(early_path)
        compare_group(report, "buffers after %d steps (BatchNorm running "
                      "statistics, masks)" % BN_STEPS, early,
                      r32["buffers_early"], buffers64, NOISE_FP64, BUFFER_TOL,
                      key="buffers@%d" % BN_STEPS)
    return early_path, export_path


# ----------------------------------------------------------------------------
# Evaluation (--eval) and the inference model (--export)
# ----------------------------------------------------------------------------

EVAL_TOL = 1e-4
# Two float32 implementations may rank two logits closer than this either way,
# so a prediction with such a near-tie may flip: see check_eval.
TIE_GAP = 1e-5


def eval_data(data, batch):
    """The training samples plus `extra` more (copies of the first ones) that
    do not fill a batch: --eval must use every full batch and leave the rest
    out. (With equal batches, the mean of the batch means is the mean over
    the samples, so the figures show which samples were used, not in which
    order.)"""
    extra = max(1, batch // 2)
    return {k: np.concatenate([v, v[:extra]]) for k, v in data.items()}, extra


def torch_eval(exp, weights, data, batches, dtype=None):
    """PyTorch's side of `trainer --eval --load`.

    The p = 0 model with `weights` (a trainer checkpoint: tensors under their
    ONNX initializer names; optimizer state is ignored), in eval mode (dropout
    off, BatchNorm on its running statistics). Batch b is samples
    [b*B, (b+1)*B); the loss is the mean over the batches of each batch's
    mean loss. Both losses of the zoo take the class scores on the logits'
    last axis (nn.CrossEntropyLoss on [N, C]; next_token_loss on [B, T, V]
    viewed as [B*T, V]), so a prediction is the argmax over the last axis at
    every label position. `gaps` holds, per position, |score of the label -
    best other score|: a prediction near a tie may differ between float32
    implementations.
    """
    import torch
    wrapper = zl.reference_wrapper(exp)
    state = wrapper.state_dict()
    missing = sorted(n for n in exp.initial if n not in weights)
    if missing:
        raise tl.HarnessError("the checkpoint lacks %d initializers: %s" % (
            len(missing), ", ".join(missing[:5])))
    with torch.no_grad():
        for name in exp.initial:
            state[name].copy_(torch.from_numpy(weights[name]))
    if dtype is not None:
        wrapper.to(dtype)
    wrapper.eval()
    batch = exp.spec.batch
    losses, gaps, correct, positions, logits0 = [], [], 0, 0, None
    with torch.no_grad():
        for b in range(batches):
            x, y = _batch(data, np.arange(b * batch, (b + 1) * batch), dtype)
            loss, logits = wrapper(x, y)[:2]
            losses.append(float(loss))
            if b == 0:
                logits0 = _numpy(logits)
            scores = logits.reshape(-1, logits.shape[-1]).double()
            labels = y.reshape(-1)
            correct += int((scores.argmax(dim=1) == labels).sum())
            positions += int(labels.numel())
            own = scores.gather(1, labels[:, None])[:, 0]
            other = scores.scatter(1, labels[:, None],
                                   float("-inf")).max(dim=1).values
            gaps.append(_numpy((own - other).abs()))
    return {"loss": float(np.mean(np.array(losses, np.float64))),
            "correct": correct, "positions": positions,
            "gaps": np.concatenate(gaps), "logits0": logits0}


_EVAL_LINES = (
    ("count", re.compile(r"^eval: (\d+) samples in (\d+) batches(.*)$", re.M)),
    ("loss", re.compile(r"^eval loss (\S+)$", re.M)),
    ("accuracy", re.compile(r"^eval accuracy (\S+) \((\d+) of (\d+)\)$",
                            re.M)),
)


def run_eval(trainer, data_dir, load=None, seed=None):
    """`trainer --data DIR --eval [--load F] [--seed S]`: its result lines."""
    cmd = [trainer, "--data", data_dir, "--eval"]
    if load is not None:
        cmd += ["--load", load]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    out = tl.run_tool(cmd).stdout
    res = {"lines": []}
    for key, pattern in _EVAL_LINES:
        m = pattern.search(out)
        if m is None:
            if key == "accuracy":
                continue
            raise tl.HarnessError("%s printed no %r line:\n%s" % (
                " ".join(cmd), key, out))
        res["lines"].append(m.group(0))
        res[key] = m.groups()
    res["samples"], res["batches"] = (int(v) for v in res["count"][:2])
    res["loss"] = float(res["loss"][0])
    if "accuracy" in res:
        res["correct"], res["positions"] = (int(v) for v in
                                            res["accuracy"][1:])
    return res


def _lines(res):
    return " | ".join(res["lines"])


def check_eval(report, label, got, ref, ref64, batches, batch, extra):
    """mtc's --eval lines against torch_eval: which samples, the loss within
    EVAL_TOL relative (or NOISE_FP64 times PyTorch's own float32 error,
    measured only when needed), the number of correct predictions exactly,
    but for one prediction whose logits are within TIE_GAP of a tie."""
    m = re.search(r"the last (\d+) samples", got["count"][2])
    rest = int(m.group(1)) if m else 0
    report.check(got["samples"] == batches * batch and
                 got["batches"] == batches and rest == extra,
                 "%s: the full batches' samples, not the part batch" %
                 label,
                 "%r (data: %d batches of %d + %d samples)" % (
                     got["lines"][0], batches, batch, extra))
    err = abs(got["loss"] - ref["loss"])
    rel = err / max(abs(ref["loss"]), 1e-30)
    detail = "mtc %.7g torch %.9g rel err %.2e (printed to 7 digits)" % (
        got["loss"], ref["loss"], rel)
    ok = rel <= EVAL_TOL
    if not ok:
        own = abs(ref["loss"] - ref64()["loss"])
        ok = err <= NOISE_FP64 * own
        detail += "; torch's own float32 error %.1e%s" % (
            own / abs(ref["loss"]), " (within %gx of it)" % NOISE_FP64
            if ok else "")
    report.check(ok, "%s: loss within %.0e of PyTorch's eval" % (
        label, EVAL_TOL), detail)
    report.worst["eval loss"] = (rel, label)
    if "correct" not in got:
        report.check(False, "%s: accuracy line" % label, "no 'eval accuracy' "
                     "line for a cross-entropy loss: %s" % _lines(got))
        return
    ties = int(np.sum(ref["gaps"] < TIE_GAP))
    diff = got["correct"] - ref["correct"]
    detail = "mtc %d of %d, torch %d of %d; smallest label-vs-best-other " \
        "logit gap %.1e" % (got["correct"], got["positions"], ref["correct"],
                            ref["positions"], float(ref["gaps"].min()))
    same = diff == 0 and got["positions"] == ref["positions"]
    if not same and abs(diff) == 1 and ties >= 1 and \
            got["positions"] == ref["positions"]:
        report.check(True, "%s: accuracy differs by ONE prediction, at a "
                     "near-tie" % label, detail + "; %d positions with a gap "
                     "< %.0e" % (ties, TIE_GAP))
        return
    report.check(same, "%s: same number of correct predictions, of as "
                 "many label positions" % label, detail)


def _dims(value_info):
    return [d.dim_param if d.dim_param else d.dim_value
            for d in value_info.type.tensor_type.shape.dim]


def check_export_file(report, exp, path, weights, label,
                      source="the same run's --save checkpoint"):
    """The inference model `--export` wrote, against the training export
    `exp` and the trainer's weights `weights` (`source`). Returns the loaded
    model and the name of the training graph's labels input (None when the
    graph is not as expected)."""
    import collections
    import onnx
    from onnx import numpy_helper
    try:
        onnx.checker.check_model(path, full_check=True)
        report.check(True, "%s passes onnx.checker (full)" % label)
    except Exception as e:  # noqa: report and go on
        report.check(False, "%s passes onnx.checker (full)" % label,
                     str(e).splitlines()[0])
    model = onnx.load(path)
    g, tg = model.graph, exp.proto.graph
    ops = collections.Counter(n.op_type for n in g.node)
    train_ops = collections.Counter(n.op_type for n in tg.node)
    report.check(ops["Dropout"] == 0, "%s: no Dropout node" % label,
                 "%d Dropout nodes (the training graph's %d became %d "
                 "Identity)" % (ops["Dropout"], train_ops["Dropout"],
                                ops["Identity"]))
    if train_ops["BatchNormalization"]:
        bns = [n for n in g.node if n.op_type == "BatchNormalization"]
        training = [n.name for n in bns if zl._attr(n, "training_mode", 0)]
        extra_out = [n.name for n in bns if len([o for o in n.output if o])
                     > 1]
        report.check(not training and not extra_out and
                     len(bns) == train_ops["BatchNormalization"],
                     "%s: BatchNormalization in inference mode" % label,
                     "%d nodes (training graph %d), %d with training_mode=1, "
                     "%d with running-statistics outputs" % (
                         len(bns), train_ops["BatchNormalization"],
                         len(training), len(extra_out)))
    loss_name = tg.output[0].name
    want_out = [(o.name, _dims(o)) for o in tg.output[1:]]
    got_out = [(o.name, _dims(o)) for o in g.output]
    losses = [n.op_type for n in g.node if n.op_type in (
        "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")]
    report.check(got_out == want_out and not losses,
                 "%s: no loss output (outputs = the training graph's but "
                 "%r)" % (label, loss_name), "outputs %s; loss nodes %s" % (
                     got_out, losses or "none"))
    train_in = [(i.name, _dims(i)) for i in tg.input
                if i.name not in exp.initial]
    got_in = [(i.name, _dims(i)) for i in g.input]
    dropped = [n for n, _ in train_in if n not in dict(got_in)]
    ok = got_in == [i for i in train_in if i[0] not in dropped] and \
        len(dropped) == 1
    report.check(ok, "%s: inputs = the training graph's but its labels, "
                 "dims as declared" % label, "inputs %s; dropped %s" % (
                     got_in, dropped))
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    bad = []
    for name in sorted(set(inits) | set(exp.initial)):
        a, w = inits.get(name), weights.get(name)
        if a is None or w is None:
            bad.append("%s %s" % (name, "not in the export" if a is None
                                  else "not in the checkpoint"))
        elif a.dtype != w.dtype or a.shape != w.shape or \
                a.tobytes() != w.tobytes():
            bad.append("%s differs (%s%s vs %s%s)" % (
                name, a.dtype, list(a.shape), w.dtype, list(w.shape)))
    trained = sum(1 for n in inits if n in exp.initial and
                  inits[n].tobytes() != exp.initial[n].tobytes())
    report.check(not bad, "%s: every initializer equals %s, bitwise" % (
                     label, source),
                 "%d initializers, %d of them moved by training; %s" % (
                     len(inits), trained, "; ".join(bad[:5]) +
                     (" ..." if len(bad) > 5 else "") if bad else
                     "names = the ONNX initializers"))
    return model, (dropped[0] if ok else None)


def _class_axis_first(model, path):
    """A copy of the inference model whose first output has the class scores
    on axis 1, as `mtc compile --loss cross-entropy` expects ([N, C, ...]).

    The zoo's losses read them on the last axis (see torch_eval); for rank-2
    logits that is axis 1 already. The GPT's logits are [B, T, V] and its
    loss is cross-entropy over logits.view(-1, V): one appended Transpose to
    [B, V, T] makes `--loss cross-entropy` (mean over every (b, t), labels
    [B, T]) that same loss, and accuracy the same per-position argmax. The
    exported file itself is checked unmodified.
    """
    import onnx
    from onnx import helper
    out = model.graph.output[0]
    dims = _dims(out)
    if len(dims) <= 2:
        return path, None
    perm = [0, len(dims) - 1] + list(range(1, len(dims) - 1))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    name = out.name + "_classes_on_axis_1"
    m.graph.node.append(helper.make_node("Transpose", [out.name], [name],
                                         perm=perm))
    m.graph.output.insert(0, helper.make_tensor_value_info(
        name, out.type.tensor_type.elem_type, [dims[p] for p in perm]))
    del m.graph.output[1]
    onnx.checker.check_model(m, full_check=True)
    copy = os.path.splitext(path)[0] + "_classes_on_axis_1.onnx"
    onnx.save(m, copy)
    return copy, "Transpose(perm=%s) appended to its %s output %s" % (
        perm, out.name, dims)


def check_eval_and_export(report, args, exp0, data, config, trainer, ckpt,
                          export_path):
    """`--eval --load` of the BN_STEPS-step checkpoint against PyTorch, and
    the inference model the same run exported: its file, and its outputs
    (compiled again with --loss, its --eval must print the same lines; its
    forward-only program the same logits as PyTorch on the first batch).
    Returns ({"dir", "ckpt", "eval", "weights"} or None, compile time)."""
    import torch
    work = os.path.join(args.work, "eval")
    os.makedirs(work, exist_ok=True)
    batch = exp0.spec.batch
    batches = len(data["target"]) // batch
    edata, extra = eval_data(data, batch)
    eval_dir = os.path.join(work, "data")
    os.makedirs(eval_dir, exist_ok=True)
    for key, arr in edata.items():
        np.save(os.path.join(eval_dir, key + ".npy"), arr)
    print("eval and export: %s trainer, checkpoint and export after %d steps; "
          "eval data: %d batches of %d + %d samples" % (
              config, BN_STEPS, batches, batch, extra), flush=True)
    compile_time = 0.0
    try:
        weights, _ = tl.read_safetensors(ckpt)
        ref = torch_eval(exp0, weights, data, batches)
        cache = {}

        def ref64():
            if "r" not in cache:
                cache["r"] = torch_eval(exp0, weights, data, batches,
                                        dtype=torch.float64)
            return cache["r"]

        got = run_eval(trainer, eval_dir, load=ckpt)
        check_eval(report, "--eval --load (%d-step checkpoint)" % BN_STEPS,
                   got, ref, ref64, batches, batch, extra)
    except tl.HarnessError as e:
        report.error("--eval --load", e)
        return None, compile_time
    evals = {"dir": eval_dir, "ckpt": ckpt, "eval": got, "weights": weights}
    if export_path is None:
        return evals, compile_time

    label = "export.onnx"
    try:
        model, labels = check_export_file(report, exp0, export_path, weights,
                                          label)
    except Exception as e:  # noqa: an unreadable file is one failure
        report.error("%s: cannot read it" % label, e)
        return evals, compile_time
    evals["export"] = export_path
    if labels is None:
        return evals, compile_time
    dims = []
    for i in model.graph.input:
        for d in _dims(i):
            if isinstance(d, str):
                dims += ["--dim", "%s=%d" % (d, batch)]
    try:
        path, edit = _class_axis_first(model, export_path)
        # Only evaluated: `--freeze '*'` leaves out the backward pass, which
        # would triple the build time (the evaluation function is imported
        # separately and does not depend on it).
        flags = ["--loss", "cross-entropy", "--labels", labels,
                 "--freeze", "*"] + sorted(set(dims))
        print("  export: mtc compile %s%s %s" % (
            os.path.basename(path), " (%s)" % edit if edit else "",
            " ".join(flags)), flush=True)
        t0 = time.time()
        prog = tl.mtc_compile(args.mtc, path, os.path.join(work, "export"),
                              flags, target=args.target)
        compile_time += time.time() - t0
        again = run_eval(prog, eval_dir)
        report.check(again["lines"] == got["lines"], "%s compiled with "
                     "--loss: its --eval prints the trainer's --eval --load "
                     "lines" % label, _lines(again) if again["lines"] ==
                     got["lines"] else "export: %s; trainer: %s" % (
                         _lines(again), _lines(got)))
    except Exception as e:  # noqa: mtc, the trainer or the edited copy
        report.error("%s compiled with --loss" % label, e)
    try:
        t0 = time.time()
        prog = tl.mtc_compile(args.mtc, export_path,
                              os.path.join(work, "forward"),
                              ["--forward-only"] + sorted(set(dims)),
                              target=args.target)
        compile_time += time.time() - t0
        in_dir = os.path.join(work, "forward", "inputs")
        out_dir = os.path.join(work, "forward", "outputs")
        os.makedirs(in_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        for i in model.graph.input:
            np.save(os.path.join(in_dir, i.name + ".npy"),
                    data[i.name][:batch])
        tl.run_tool([prog, "--inputs", in_dir, "--outputs", out_dir])
        first = model.graph.output[0].name
        logits = np.load(os.path.join(out_dir, first + ".npy"))
        want = ref["logits0"]
        if logits.shape != want.shape:
            report.check(False, "%s --forward-only: %s of batch 0" % (
                label, first), "shape %s, torch %s" % (
                    list(logits.shape), list(want.shape)))
        else:
            err = _norm(logits.astype(np.float64) - want)
            rel = err / max(_norm(want), 1e-30)
            detail = "rel err %.2e, max abs err %.1e" % (
                rel, float(np.abs(logits.astype(np.float64) - want).max()))
            ok = rel <= EVAL_TOL
            if not ok:
                own = _norm(want - ref64()["logits0"])
                ok = err <= NOISE_FP64 * own
                detail += "; torch's own float32 error %.1e" % (
                    own / max(_norm(want), 1e-30))
            report.check(ok, "%s --forward-only: %s of batch 0 = PyTorch's "
                         "eval with the checkpoint" % (label, first), detail)
            report.worst["export logits"] = (rel, "batch 0")
    except tl.HarnessError as e:
        report.error("%s --forward-only" % label, e)
    return evals, compile_time


def check_dropout(report, args, exp1, data_dir, flags, evals=None):
    """p > 0: same seed -> bitwise same losses; other seed -> other losses.
    With `evals` (check_eval_and_export's result): dropout is off in --eval
    (the p > 0 trainer, loading the p = 0 trainer's checkpoint, prints the
    p = 0 trainer's lines, whatever the seed) and absent from --export (the
    p > 0 trainer exports no Dropout node and the checkpoint's weights)."""
    out_dir = os.path.join(args.work, "dropout")
    label = os.path.basename(exp1.path)
    print("dropout p=%g: mtc compile %s" % (exp1.dropout, " ".join(flags)),
          flush=True)
    t0 = time.time()
    try:
        trainer = tl.mtc_compile(args.mtc, exp1.path, out_dir, flags,
                                 target=args.target)
    except tl.HarnessError as e:
        summary = mtc_error_summary(e)
        if summary:
            report.check(False, "mtc compile %s" % label, summary)
        else:
            report.error("%s: mtc compile" % label, e)
        return time.time() - t0
    elapsed = time.time() - t0
    try:
        runs = []
        for k, seed in enumerate((1, 1, 2)):
            path = os.path.join(out_dir, "metrics_seed%d_%d.jsonl" % (seed, k))
            tl.run_trainer(trainer, DROPOUT_STEPS, data=data_dir, seed=seed,
                           metrics=path)
            runs.append([r["loss"] for r in tl.read_metrics(path)])
        finite = all(np.isfinite(v) for run in runs for v in run)
        report.check(finite and len(runs[0]) == DROPOUT_STEPS,
                     "%s: %d finite losses" % (label, DROPOUT_STEPS),
                     "%r" % runs[0][:3])
        report.check(runs[0] == runs[1], "%s: same --seed, bitwise same "
                     "losses" % label, "" if runs[0] == runs[1] else
                     "%r vs %r" % (runs[0][:3], runs[1][:3]))
        report.check(runs[0] != runs[2], "%s: another --seed, other losses" %
                     label, "seed 1 %r, seed 2 %r" % (runs[0][:2],
                                                      runs[2][:2]))
    except tl.HarnessError as e:
        report.error(label, e)
    if evals is None:
        return elapsed
    t0 = time.time()
    try:
        got = run_eval(trainer, evals["dir"], load=evals["ckpt"], seed=2)
        want = evals["eval"]
        report.check(got["lines"] == want["lines"], "%s: --eval --load of "
                     "the p = 0 checkpoint (--seed 2) prints the p = 0 "
                     "trainer's lines (dropout off)" % label,
                     _lines(got) if got["lines"] == want["lines"] else
                     "p > 0: %s; p = 0: %s" % (_lines(got), _lines(want)))
        path = os.path.join(out_dir, "export.onnx")
        tl.run_trainer(trainer, 0, data=data_dir, load=evals["ckpt"],
                       extra=["--export", path])
        check_export_file(report, exp1, path, evals["weights"],
                          "%s --steps 0 --load --export" % label,
                          "the --load checkpoint")
    except tl.HarnessError as e:
        report.error("%s: --eval / --export" % label, e)
    report.times["p>0 eval/export"] = time.time() - t0
    return elapsed


def torch_self_checks(report, exp0, data, configs, wanted, refs, grads_ref,
                      buffers64):
    """Repeatability of the references, and how much room float32 leaves.

    Runs every trajectory again in float64 (slow for ResNet: this mode is for
    choosing sizes and learning rates, not for every test run) and reports
    PyTorch's own float32 error, and how the reordered-batch noise estimate
    used by the mtc checks compares with it.
    """
    import torch
    name = wanted[0]
    _, make_opt, slots = configs[name]
    again = torch_trajectory(exp0, data, make_opt, slots)
    r32 = refs[name][0]
    same = np.array_equal(again["losses"], r32["losses"]) and all(
        np.array_equal(again["params"][n], r32["params"][n])
        for n in exp0.params) and all(
        np.array_equal(again["buffers"][n], r32["buffers"][n])
        for n in exp0.buffers)
    report.check(same, "torch %s trajectory computed twice is bitwise "
                 "identical (losses, params, buffers)" % name)

    def worst(a, b):
        return max(((_norm(a[n] - b[n]) / max(_norm(b[n]), 1e-30), n)
                    for n in a), default=(0.0, "-"))

    loss32, g32, g64, _ = grads_ref
    print("  [INFO] torch fp32 vs fp64 gradients: worst rel err %.1e (%s)" %
          worst(g32, g64))
    # Kinks: does rounding-level noise on the input move a gradient by more
    # than the tolerance (a ReLU or max-pool choice flipping)?
    noisy = dict(data)
    if data["input"].dtype.kind == "f":
        rng = np.random.default_rng(1)
        noisy["input"] = (data["input"] * (1 + 1e-7 * rng.standard_normal(
            data["input"].shape))).astype(data["input"].dtype)
        _, gn = torch_gradients(exp0, noisy)
        w = max(((_norm(gn[n] - g32[n]) / max(_norm(g32[n]), 1e-30), n)
                 for n in g32 if _norm(g32[n] - g64[n]) <=
                 GRAD_TOL * _norm(g32[n])), default=(0.0, "-"))
        report.check(w[0] <= GRAD_TOL / 3, "torch step-0 gradients under 1e-7 "
                     "relative input noise move at most %.0e (no kink "
                     "flips; the 1e-4 check has room)" % (GRAD_TOL / 3),
                     "worst %.1e (%s), not counting tensors that are "
                     "rounding noise" % w)
    if exp0.buffers:
        print("  [INFO] torch fp32 vs fp64 buffers after %d steps: worst rel "
              "err %.1e (%s)" % ((BN_STEPS,) + worst(r32["buffers_early"],
                                                      buffers64)))
    # The --eval check: how far PyTorch's own float32 eval is from float64,
    # with the weights of the first configuration after STEPS steps.
    weights = dict(refs[name][0]["params"], **refs[name][0]["buffers"])
    batches = len(data["target"]) // exp0.spec.batch
    e32 = torch_eval(exp0, weights, data, batches)
    e64 = torch_eval(exp0, weights, data, batches, dtype=torch.float64)
    drift = abs(e32["loss"] - e64["loss"]) / abs(e64["loss"])
    report.check(drift <= EVAL_TOL / 5 and e32["correct"] == e64["correct"],
                 "torch fp32 vs fp64 eval (%s weights after %d steps): loss "
                 "drift at most %.0e, same correct count" % (
                     name, STEPS, EVAL_TOL / 5),
                 "drift %.1e; correct %d vs %d of %d; smallest "
                 "label-vs-best-other logit gap %.1e" % (
                     drift, e32["correct"], e64["correct"], e32["positions"],
                     float(e32["gaps"].min())))
    for cname in wanted:
        r32, rrev = refs[cname]
        _, make_opt, slots = configs[cname]
        r64 = torch_trajectory(exp0, data, make_opt, slots,
                               dtype=torch.float64)
        drift = loss_drift(r32["losses"], r64["losses"])
        report.check(drift.max() <= LOSS_TOL / 5,
                     "torch fp32 vs fp64 %s losses drift at most %.0e" % (
                         cname, LOSS_TOL / 5),
                     "max %.1e at step %d; reordered batches %.1e" % (
                         drift.max(), int(np.argmax(drift)),
                         loss_drift(rrev["losses"], r32["losses"]).max()))
        for what in ("params", "state", "buffers"):
            if not r32[what]:
                continue
            ratio = []
            for n in r32[what]:
                e64 = _norm(r32[what][n] - r64[what][n])
                erev = _norm(r32[what][n] - rrev[what][n])
                if e64 > 1e-4 * _norm(r32[what][n]):
                    ratio.append((e64 / max(erev, 1e-30), n))
            print("  [INFO] torch fp32 vs fp64 %s %s after %d steps: worst "
                  "rel err %.1e (%s); %d tensors over 1e-4, their fp64 error "
                  "is up to %.2gx the reordered-batch one (%s)" % (
                      (cname, what, STEPS) + worst(r32[what], r64[what]) +
                      (len(ratio),) + (max(ratio) if ratio else (0, "-"))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=models.NAMES, required=True)
    ap.add_argument("--mtc", help="path to the mtc driver")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--configs", default="sgd,adamw",
                    help="comma-separated optimizer configurations")
    ap.add_argument("--torch-only", action="store_true",
                    help="no mtc: check the PyTorch references themselves")
    args = ap.parse_args()
    if not args.torch_only and not args.mtc:
        ap.error("--mtc is required unless --torch-only")

    import warnings
    import torch
    warnings.filterwarnings("ignore", message="The given NumPy array is not "
                            "writable")
    torch.set_num_threads(1)
    t_start = time.time()
    os.makedirs(args.work, exist_ok=True)
    report = Report()
    spec = models.get(args.model)
    n = num_samples(spec)
    print("model %s: %s; batch %d, %d samples" % (
        args.model, spec.description, spec.batch, n), flush=True)

    data = spec.make_data(n)
    data_dir = os.path.join(args.work, "data")
    os.makedirs(data_dir, exist_ok=True)
    for key, arr in data.items():
        np.save(os.path.join(data_dir, key + ".npy"), arr)

    t0 = time.time()
    exp0 = zl.export(spec, 0.0, os.path.join(args.work, args.model + ".onnx"),
                     data)
    exp1 = None
    if spec.has_dropout:
        exp1 = zl.export(spec, spec.dropout_p, os.path.join(
            args.work, args.model + "_dropout.onnx"), data)
    t_export = time.time() - t0
    check_exports(report, spec, exp0, exp1)

    configs = optimizer_configs(spec)
    wanted = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in wanted:
        if c not in configs:
            ap.error("unknown config %r (known: %s)" % (c, ", ".join(configs)))
    t0 = time.time()
    loss0, g32 = torch_gradients(exp0, data)
    edges = []
    _, g64 = torch_gradients(exp0, data, dtype=torch.float64, edges=edges)
    if edges:
        print("  [INFO] %d activation input(s) within %.0e of a kink (RMS-"
              "relative)" % (len(edges), KINK_REL), flush=True)
    edges = sorted(edges, key=lambda e: e[2])[:MAX_KINK_FLIPS]

    def flipped():
        """(description, float64 gradients) with one knife edge flipped,
        closest first."""
        for call, index, dist in edges:
            _, alt = torch_gradients(exp0, data, dtype=torch.float64,
                                     flips=[(call, index)])
            yield ("the gradient mask of an activation input %.1e (RMS-"
                   "relative) from its kink flipped" % dist, alt)
    grads_ref = (loss0, g32, g64, flipped)
    refs = {}
    for c in wanted:
        _, make_opt, slots = configs[c]
        refs[c] = (torch_trajectory(exp0, data, make_opt, slots),
                   torch_trajectory(exp0, data, make_opt, slots,
                                    reverse=True))
    buffers64 = None
    if exp0.buffers:
        _, make_opt, slots = configs[wanted[0]]
        buffers64 = torch_trajectory(exp0, data, make_opt, slots,
                                     dtype=torch.float64,
                                     steps=BN_STEPS)["buffers"]
    t_ref = time.time() - t0
    ok = all(np.isfinite(r[0]["losses"]).all() for r in refs.values())
    report.check(ok, "torch references: loss %.6f -> %s" % (
        refs[wanted[0]][0]["losses"][0], ", ".join(
            "%s %.6f" % (c, refs[c][0]["losses"][-1]) for c in wanted)),
        "export %.1fs, references %.1fs" % (t_export, t_ref))

    compile_time = 0.0
    if args.torch_only:
        t0 = time.time()
        torch_self_checks(report, exp0, data, configs, wanted, refs,
                          grads_ref, buffers64)
        print("  (self checks %.1fs)" % (time.time() - t0))
    else:
        compile_time = run_mtc(report, args, exp0, exp1, data, data_dir,
                               refs, grads_ref, buffers64, configs, wanted)

    elapsed = time.time() - t_start
    print("")
    print("SUMMARY %s (%s): %s" % (args.model, "torch only" if args.torch_only
                                   else args.target,
                                   "PASS" if not report.failures else "FAIL"))
    for key in sorted(report.worst):
        err, where = report.worst[key]
        print("  worst %-22s %.3e  (%s)" % (key, err, where))
    print("  time %.1fs (export %.1fs, torch references %.1fs, mtc compile "
          "%.1fs%s)" % (elapsed, t_export, t_ref, compile_time, "".join(
              ", %s %.1fs" % kv for kv in sorted(report.times.items()))))
    if report.failures:
        print("  failures:")
        for f in report.failures:
            print("    - " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
