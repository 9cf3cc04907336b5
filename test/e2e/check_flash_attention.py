#!/usr/bin/python3
"""Fused attention (mtc.attention) on a causal GPT at a sequence length that
spans several kernel tiles (80 = 5 x 16 query rows, 64 + 16 keys).

1. the plan: mtc.attention and mtc.attention_grad replace the chain, and no
   float tensor of the step has the [.., S, S] score shape; the planned
   activation peak falls by at least one S x S float tensor per layer
   against --no-flash-attention (printed with both peaks);
2. against PyTorch (dropout 0): the first step's loss and gradients
   (--dump-grads) and the losses of 5 SGD steps;
3. dropout 0.1 against --no-flash-attention with the same --seed: the fused
   kernels drop the same probabilities as the unfused dropout op, so the
   first step's gradients and 5 steps of losses agree to float32 rounding;
   another seed gives other losses.

Prints one line per check and "SUMMARY flash-attention: PASS|FAIL".
Usage: check_flash_attention.py --mtc PATH --work DIR [--target cpu|cuda]
"""

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
import models  # noqa: E402
import mtc_testlib as tl  # noqa: E402

SEQ, BATCH, HEADS, LAYERS, D_MODEL = 80, 4, 4, 2, 64
STEPS = 5
# Float32 against float32 in another summation order.
GRAD_BAR = 1e-5
LOSS_BAR = 1e-6


def build(dropout):
    import torch
    torch.manual_seed(0)
    return models._gpt_class()(d_model=D_MODEL, nhead=HEADS,
                               num_layers=LAYERS, block_size=SEQ,
                               dropout=dropout)


def export(work, name, dropout):
    import torch
    path = os.path.join(work, name + ".onnx")
    x = torch.zeros((BATCH, SEQ), dtype=torch.long)
    tl.export_with_loss(build(dropout), x, x, path,
                        loss=models.next_token_loss)
    return path


class Report:
    def __init__(self):
        self.failed = 0

    def check(self, ok, what, detail=""):
        print("  [%s] %s%s" % ("PASS" if ok else "FAIL", what,
                               ("  " + detail) if detail else ""))
        self.failed += 0 if ok else 1


def plan(args, model, flags, name):
    ir = os.path.join(args.work, name + ".mlir")
    report = os.path.join(args.work, name + ".json")
    tl.run_tool([args.mtc, "plan", model, "--precision", "fp32",
                 "--print-ir", ir, "--report", report] + flags)
    with open(ir) as f, open(report) as g:
        text, planned = f.read(), json.load(g)
    # The training step only (the evaluation step follows it).
    step = text[text.index("func.func @train_step"):]
    return step[:step.find("func.func", 1)], planned


def check_plan(report, args, model):
    fused_ir, fused = plan(args, model, [], "fused")
    plain_ir, plain = plan(args, model, ["--no-flash-attention"], "unfused")
    count = lambda ir, op: len(re.findall(r"= %s " % re.escape(op), ir))
    report.check(count(fused_ir, "mtc.attention") == LAYERS and
                 count(fused_ir, "mtc.attention_grad") == LAYERS and
                 count(fused_ir, "mtc.softmax") == 0,
                 "plan: %d mtc.attention, %d mtc.attention_grad, no softmax"
                 % (LAYERS, LAYERS),
                 "found %d, %d, %d" % (count(fused_ir, "mtc.attention"),
                                       count(fused_ir, "mtc.attention_grad"),
                                       count(fused_ir, "mtc.softmax")))
    scores = "<%dx%dx%dx%dxf32>" % (BATCH, HEADS, SEQ, SEQ)
    report.check(scores not in fused_ir and scores in plain_ir,
                 "plan: no tensor%s in the fused step (the unfused step has "
                 "them)" % scores)
    per_layer = BATCH * HEADS * SEQ * SEQ * 4
    saved = plain["activation_peak_bytes"] - fused["activation_peak_bytes"]
    report.check(saved >= LAYERS * per_layer,
                 "plan: activation peak %d -> %d bytes (saves %.1f score "
                 "matrices of %d bytes per layer)" % (
                     plain["activation_peak_bytes"],
                     fused["activation_peak_bytes"],
                     saved / per_layer / LAYERS, per_layer))


def torch_reference(data):
    import torch
    wrapper = tl.make_loss_wrapper(build(0.0), models.next_token_loss)
    x = torch.from_numpy(data["input"][:BATCH])
    y = torch.from_numpy(data["target"][:BATCH])
    loss = wrapper(x, y)[0]
    loss.backward()
    grads = {"model." + n: p.grad.numpy().copy()
             for n, p in wrapper.model.named_parameters()}
    # 5 SGD steps (the trainer's default optimizer and rate).
    wrapper = tl.make_loss_wrapper(build(0.0), models.next_token_loss)
    opt = torch.optim.SGD(wrapper.parameters(), lr=0.01)
    losses = []
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        opt.zero_grad()
        loss_t = wrapper(torch.from_numpy(data["input"][rows]),
                         torch.from_numpy(data["target"][rows]))[0]
        loss_t.backward()
        opt.step()
        losses.append(float(loss_t))
    return float(loss), grads, np.array(losses)


def trainer_run(args, trainer, data_dir, name, seed=None):
    grads = os.path.join(args.work, name + "-grads.safetensors")
    metrics = os.path.join(args.work, name + ".jsonl")
    tl.run_trainer(trainer, 1, data=data_dir, dump_grads=grads, seed=seed)
    tl.run_trainer(trainer, STEPS, data=data_dir, metrics=metrics, seed=seed)
    return tl.read_safetensors(grads)[0], tl.read_losses(metrics, STEPS)


def worst(got, ref):
    name = max(ref, key=lambda n: tl.rel_err(got.get(n, 0), ref[n]))
    return name, tl.rel_err(got.get(name, 0), ref[name])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mtc", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--target", default="cpu")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    report = Report()

    data = models._next_token_data(BATCH * STEPS, seq=SEQ)
    data_dir = os.path.join(args.work, "data")
    os.makedirs(data_dir, exist_ok=True)
    for k, v in data.items():
        np.save(os.path.join(data_dir, k + ".npy"), v)
    plain = export(args.work, "gpt", 0.0)
    dropped = export(args.work, "gpt_dropout", 0.1)

    check_plan(report, args, dropped)

    flags = ["--keep-grads"]
    fused = tl.mtc_compile(args.mtc, plain, os.path.join(args.work, "p0"),
                           flags, target=args.target)
    loss0, grads_ref, losses_ref = torch_reference(data)
    grads, losses = trainer_run(args, fused, data_dir, "p0")
    name, err = worst(grads, grads_ref)
    report.check(err <= GRAD_BAR and set(grads) == set(grads_ref),
                 "dropout 0: gradients of step 1 vs PyTorch",
                 "worst %s rel err %.2e (bar %.0e)" % (name, err, GRAD_BAR))
    err = float(np.max(np.abs(losses - losses_ref) / np.abs(losses_ref)))
    report.check(err <= LOSS_BAR, "dropout 0: %d SGD losses vs PyTorch"
                 % STEPS, "worst rel err %.2e (bar %.0e), PyTorch %s"
                 % (err, LOSS_BAR, np.array2string(losses_ref, precision=6)))

    fused = tl.mtc_compile(args.mtc, dropped, os.path.join(args.work, "p1"),
                           flags, target=args.target)
    unfused = tl.mtc_compile(args.mtc, dropped,
                             os.path.join(args.work, "p1-unfused"),
                             flags + ["--no-flash-attention"],
                             target=args.target)
    g_fused, l_fused = trainer_run(args, fused, data_dir, "p1", seed=5)
    g_plain, l_plain = trainer_run(args, unfused, data_dir, "p1-unfused",
                                   seed=5)
    name, err = worst(g_fused, g_plain)
    report.check(err <= GRAD_BAR, "dropout 0.1: gradients of step 1, fused "
                 "vs unfused (same seed)",
                 "worst %s rel err %.2e (bar %.0e)" % (name, err, GRAD_BAR))
    err = float(np.max(np.abs(l_fused - l_plain) / np.abs(l_plain)))
    report.check(err <= LOSS_BAR, "dropout 0.1: %d losses, fused vs unfused"
                 % STEPS, "worst rel err %.2e (bar %.0e)" % (err, LOSS_BAR))
    _, l_other = trainer_run(args, fused, data_dir, "p1-seed6", seed=6)
    err = float(np.max(np.abs(l_other - l_fused) / np.abs(l_fused)))
    report.check(err > 100 * LOSS_BAR, "dropout 0.1: another seed, other "
                 "losses", "rel diff %.2e" % err)
    d0 = float(np.max(np.abs(l_fused - losses_ref) / np.abs(losses_ref)))
    report.check(d0 > 100 * LOSS_BAR, "dropout 0.1 differs from dropout 0",
                 "rel diff %.2e" % d0)

    print("SUMMARY flash-attention: %s" % ("FAIL" if report.failed else
                                           "PASS"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    tl.run_check(main, "flash-attention")
