#!/usr/bin/python3
"""Dynamic loss scaling of fp16 trainers (--precision fp16).

On an MLP exported from PyTorch:

1. gradients: for a model whose loss is multiplied by 1e-4, so that its
   gradients lie below float16's normal range, one fp16 step's gradients
   (--dump-grads reports them unscaled) against PyTorch running the same
   step with float16 GEMM operands (rounded by PyTorch's own float16
   conversion, float32 accumulation, the incoming gradient of each GEMM
   rounded too, the logits rounded before the loss) on the loss times 65536
   then divided by it: within 1e-4;
   and without loss scaling (--loss-scale off) against the same emulation
   unscaled. Their distances from PyTorch's float32 gradients show what the
   scaling is for (the unscaled gradients underflow), and the check requires
   the scaled ones to be closer;
2. skipped steps change nothing: a trainer starting from a scale of 2^28
   overflows and skips its first k steps, halving the scale each time; its
   parameters and AdamW state after N steps are bitwise those of a trainer
   that starts at 2^28 / 2^k and runs N - k steps (so the skipped steps
   left the parameters, the moments and AdamW's step count alone);
3. an injected overflow: a batch with a value float16 cannot hold; the step
   that reads it is skipped (parameters and momentum bitwise unchanged),
   the scale halves, and training goes on;
4. resuming from a checkpoint continues the scale, its clean-step count
   and the optimizer step count: 4 + 4 steps equal 8 steps bitwise;
5. every run's per-step scales (--metrics) follow the rule of the issue,
   replayed here from the skipped flags: x0.5 on a skipped step, x2 after
   `interval` clean steps in a row.

Prints one line per check and "SUMMARY loss-scaling: PASS|FAIL".
Usage: check_loss_scaling.py --mtc PATH --work DIR [--target cpu|cuda]
"""

import argparse
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mtc_testlib as tl  # noqa: E402

BATCH = 32
# mtc against the float16 emulation: the same roundings, different
# summation orders.
GRAD_BAR = 1e-4


def build(loss_weight=1.0):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64),
                          nn.Tanh(), nn.Linear(64, 10))

    def loss(logits, target):
        return nn.functional.cross_entropy(logits, target) * loss_weight

    return model, loss


def make_data(directory, batches, poison_batch=None):
    rng = np.random.default_rng(0)
    n = BATCH * batches
    x = rng.standard_normal((n, 64)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    if poison_batch is not None:
        # Finite in float32, beyond float16's largest value (65504).
        x[poison_batch * BATCH + 3, 5] = 1.0e6
    os.makedirs(directory, exist_ok=True)
    np.save(os.path.join(directory, "input.npy"), x)
    np.save(os.path.join(directory, "target.npy"), y)
    return x, y


def export(work, name, loss_weight=1.0):
    import torch
    model, loss = build(loss_weight)
    path = os.path.join(work, name + ".onnx")
    tl.export_with_loss(model, torch.zeros(BATCH, 64),
                        torch.zeros(BATCH, dtype=torch.int64), path, loss=loss)
    return path


def compile_fp16(args, onnx, name, flags):
    return tl.mtc_compile(args.mtc, onnx, os.path.join(args.work, name),
                          ["--precision", "fp16"] + flags, target=args.target)


def spec_scales(skipped, init, interval, growth=2.0, backoff=0.5):
    """The scale of each step under the issue's rule, given which steps were
    skipped (computed in float32, as the scale is)."""
    scales, scale, clean = [], np.float32(init), 0
    for s in skipped:
        scales.append(float(scale))
        if s:
            scale, clean = np.float32(np.float64(scale) * backoff), 0
        else:
            clean += 1
            if clean == interval:
                grown = np.float32(np.float64(scale) * growth)
                if np.isfinite(grown):
                    scale = grown
                clean = 0
    return scales


def check_policy(label, metrics, init, interval, failures):
    records = tl.read_metrics(metrics)
    skipped = [bool(r["skipped"]) for r in records]
    scales = [float(r["loss_scale"]) for r in records]
    expected = spec_scales(skipped, init, interval)
    # The metrics print 9 significant digits, which round-trip float32.
    if [np.float32(v) for v in scales] != [np.float32(v) for v in expected]:
        failures.append("%s: scales %s, the rule gives %s" %
                        (label, scales, expected))
    return skipped, scales


def same_tensors(a, b):
    """Names whose values differ bitwise (or are missing on one side)."""
    ta, tb = tl.read_safetensors(a)[0], tl.read_safetensors(b)[0]
    bad = sorted(set(ta) ^ set(tb))
    for k in set(ta) & set(tb):
        if ta[k].tobytes() != tb[k].tobytes():
            bad.append(k)
    return bad


def fp16_step_gradients(x, y, scale):
    """PyTorch gradients of (loss * scale) / scale with float16 linear
    layers as torch.autocast runs them: each GEMM reads float16-rounded
    operands and accumulates in float32, the layer's output (bias included)
    is rounded to float16, the gradient flowing into it is rounded to
    float16 before the backward GEMMs and the bias gradient's sum read it,
    and the gradient of the layer's input comes out rounded to float16 (the
    weight's stays float32); everything else runs in float32."""
    import torch

    class Round(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.to(torch.float16).float()

        @staticmethod
        def backward(ctx, g):
            return g

    class RoundGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            return g.to(torch.float16).float()

    model, loss = build(1e-4)

    def linear(layer, a):
        a16 = Round.apply(RoundGrad.apply(a))
        out = a16 @ Round.apply(layer.weight).t() + layer.bias
        return Round.apply(RoundGrad.apply(out))

    h = torch.relu(linear(model[0], x))
    h = torch.tanh(linear(model[2], h))
    (loss(linear(model[4], h), y) * scale).backward()
    return {"model." + n: p.grad.double().numpy() / scale
            for n, p in model.named_parameters()}


def check_gradients(args, failures):
    import torch
    onnx = export(args.work, "tiny-loss", loss_weight=1e-4)
    data = os.path.join(args.work, "data-1")
    x, y = (torch.from_numpy(a) for a in make_data(data, 1))
    model, loss = build(1e-4)
    wrapper = tl.make_loss_wrapper(model, loss)
    wrapper(x, y)[0].backward()
    fp32 = {n: p.grad.detach().double().numpy()
            for n, p in wrapper.named_parameters()}
    errs, dist = {}, {}
    for mode, scale in (("dynamic", 65536.0), ("off", 1.0)):
        trainer = compile_fp16(args, onnx, "grads-" + mode,
                               ["--keep-grads", "--loss-scale", mode])
        path = os.path.join(args.work, "grads-%s.safetensors" % mode)
        tl.run_trainer(trainer, 1, data=data, dump_grads=path)
        ours = tl.read_safetensors(path)[0]
        ref = fp16_step_gradients(x, y, scale)
        errs[mode] = max(tl.rel_err(ours[n], g) for n, g in ref.items())
        dist[mode] = max(tl.rel_err(ours[n], g) for n, g in fp32.items())
        if errs[mode] > GRAD_BAR:
            failures.append("fp16 gradients (--loss-scale %s) %.3e from "
                            "PyTorch's float16 step (bar %g)" %
                            (mode, errs[mode], GRAD_BAR))
    print("gradients of a loss * 1e-4, fp16 vs PyTorch's float16 step: "
          "scaled by 65536 %.3e, unscaled %.3e (bar %g); from float32: "
          "scaled %.3e, unscaled %.3e" %
          (errs["dynamic"], errs["off"], GRAD_BAR, dist["dynamic"],
           dist["off"]))
    if not dist["off"] > 2 * dist["dynamic"]:
        failures.append("loss scaling did not bring the fp16 gradients "
                        "closer to float32 (%.3e vs %.3e unscaled)" %
                        (dist["dynamic"], dist["off"]))


def check_skips(args, onnx, failures):
    data = os.path.join(args.work, "data-1")
    make_data(data, 1)
    steps, init = 12, 2.0 ** 28
    flags = ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.01",
             "--loss-scale-interval", "1000"]
    a = compile_fp16(args, onnx, "skip-a", flags + ["--loss-scale-init",
                                                    repr(init)])
    ma, ca = (os.path.join(args.work, f) for f in ("a.jsonl", "a.safetensors"))
    tl.run_trainer(a, steps, data=data, metrics=ma, save=ca)
    skipped, scales = check_policy("2^28 run", ma, init, 1000, failures)
    k = 0
    while k < len(skipped) and skipped[k]:
        k += 1
    if k == 0 or k >= steps or any(skipped[k:]):
        failures.append("expected a run of skipped steps then clean ones, "
                        "got %s" % skipped)
        return
    b = compile_fp16(args, onnx, "skip-b", flags + ["--loss-scale-init",
                                                    repr(init / 2 ** k)])
    mb, cb = (os.path.join(args.work, f) for f in ("b.jsonl", "b.safetensors"))
    tl.run_trainer(b, steps - k, data=data, metrics=mb, save=cb)
    diff = same_tensors(ca, cb)
    meta_a, meta_b = (tl.read_safetensors(c)[1] for c in (ca, cb))
    print("skipped steps: scale 2^28 skips the first %d steps (scale %g -> "
          "%g); after %d steps its parameters and AdamW state %s those of "
          "%d steps from 2^%d; optimizer steps %s vs %s" %
          (k, scales[0], scales[k], steps,
           "equal bitwise" if not diff else "DIFFER from", steps - k, 28 - k,
           meta_a.get("optimizer_step"), meta_b.get("optimizer_step")))
    if diff:
        failures.append("skipped steps changed %s" % diff[:5])
    if meta_a.get("optimizer_step") != str(steps - k):
        failures.append("optimizer_step %s after %d skipped of %d steps" %
                        (meta_a.get("optimizer_step"), k, steps))


def check_injected(args, onnx, failures):
    data = os.path.join(args.work, "data-poison")
    make_data(data, 2, poison_batch=1)
    trainer = compile_fp16(args, onnx, "poison",
                           ["--lr", "0.05", "--momentum", "0.9"])
    saves = []
    for n in (1, 2, 3):
        save = os.path.join(args.work, "poison-%d.safetensors" % n)
        metrics = os.path.join(args.work, "poison-%d.jsonl" % n)
        tl.run_trainer(trainer, n, data=data, save=save, metrics=metrics)
        saves.append(save)
    records = tl.read_metrics(metrics)
    check_policy("injected overflow", metrics, 65536.0, 2000, failures)
    skipped = [r["skipped"] for r in records]
    unchanged = not same_tensors(saves[0], saves[1])
    moved = bool(same_tensors(saves[1], saves[2]))
    loss1, loss3 = float(records[0]["loss"]), float(records[2]["loss"])
    print("injected overflow (batch 2 holds 1e6): skipped %s, scales %s; "
          "parameters and momentum after the skipped step %s; step 3 "
          "trains again (loss %.4f -> %.4f)" %
          (skipped, [r["loss_scale"] for r in records],
           "unchanged" if unchanged else "CHANGED", loss1, loss3))
    if skipped != [False, True, False]:
        failures.append("injected overflow: skipped flags %s" % skipped)
    if not unchanged:
        failures.append("the skipped step changed the parameters or state")
    if not moved or not loss3 < loss1:
        failures.append("training did not go on after the skipped step")


def check_resume(args, onnx, failures):
    data = os.path.join(args.work, "data-4")
    make_data(data, 4)
    init, interval = 2.0 ** 24, 2
    trainer = compile_fp16(args, onnx, "resume",
                           ["--optimizer", "adamw", "--lr", "0.01",
                            "--loss-scale-init", repr(init),
                            "--loss-scale-interval", str(interval)])
    full, half, resumed = (os.path.join(args.work, f + ".safetensors")
                           for f in ("full", "half", "resumed"))
    mfull = os.path.join(args.work, "full.jsonl")
    tl.run_trainer(trainer, 8, data=data, save=full, metrics=mfull)
    tl.run_trainer(trainer, 4, data=data, save=half)
    tl.run_trainer(trainer, 4, data=data, load=half, save=resumed)
    skipped, scales = check_policy("resume", mfull, init, interval, failures)
    diff = same_tensors(full, resumed)
    meta_full, meta_resumed = (tl.read_safetensors(c)[1]
                               for c in (full, resumed))
    keys = ("step", "optimizer_step", "loss_scale", "loss_scale_clean_steps")
    state_full = [meta_full.get(k) for k in keys]
    state_resumed = [meta_resumed.get(k) for k in keys]
    print("resume: 8 steps (scales %s, %d skipped) vs 4 + 4: tensors %s, "
          "state %s vs %s" %
          (scales, sum(skipped), "equal bitwise" if not diff else "DIFFER",
           state_full, state_resumed))
    if diff or state_full != state_resumed:
        failures.append("resumed run differs: %s %s %s" %
                        (diff[:5], state_full, state_resumed))
    if not any(skipped) or all(skipped):
        failures.append("resume check should see both skipped and clean "
                        "steps: %s" % skipped)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--target", default="cpu", help="cpu or cuda")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    os.makedirs(args.work, exist_ok=True)
    failures = []
    check_gradients(args, failures)
    onnx = export(args.work, "mlp")
    check_skips(args, onnx, failures)
    check_injected(args, onnx, failures)
    check_resume(args, onnx, failures)
    for f in failures:
        print("FAIL: " + f)
    print("SUMMARY loss-scaling: %s" % ("FAIL" if failures else "PASS"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
