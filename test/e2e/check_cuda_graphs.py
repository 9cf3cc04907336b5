#!/usr/bin/python3
"""CUDA graphs: a trainer replaying its step as a CUDA graph computes what
the same trainer launching kernel by kernel (--no-cuda-graphs) computes.

On a causal GPT with dropout 0.1 and fused attention (the dropout masks and
AdamW's bias corrections change every step, so they must be read on the
device, not baked into the captured graph), for AdamW with gradient
accumulation over 2 micro-batches (three graphs: first, last micro-batch)
and SGD with momentum (its first step differs from the others):

1. the per-step losses and the final checkpoint (parameters and optimizer
   state) are bitwise equal with and without graphs;
2. the trainer did capture its step (no "could not be captured" note).

On the cpu target the flag does nothing and the check is trivially true;
it is run by the GPU check (test/gpu/gpu_check.py).

Prints one line per check and "SUMMARY cuda-graphs: PASS|FAIL".
Usage: check_cuda_graphs.py --mtc PATH --work DIR [--target cuda|cpu]
"""

import argparse
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_flash_attention as fa  # noqa: E402
import models  # noqa: E402  (put on the path by check_flash_attention)
import mtc_testlib as tl  # noqa: E402

STEPS = 6
CONFIGS = {
    "adamw-accumulate": ["--optimizer", "adamw", "--accumulate", "2"],
    "sgd-momentum": ["--optimizer", "sgd", "--momentum", "0.9"],
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mtc", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--target", default="cuda")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    report = fa.Report()

    data = models._next_token_data(fa.BATCH * STEPS * 2, seq=fa.SEQ)
    data_dir = os.path.join(args.work, "data")
    os.makedirs(data_dir, exist_ok=True)
    for k, v in data.items():
        np.save(os.path.join(data_dir, k + ".npy"), v)
    model = fa.export(args.work, "gpt_dropout", 0.1)

    for name, flags in CONFIGS.items():
        trainer = tl.mtc_compile(args.mtc, model,
                                 os.path.join(args.work, name), flags,
                                 target=args.target)
        runs = {}
        for label, extra in (("graphs", []),
                             ("eager", ["--no-cuda-graphs"])):
            metrics = os.path.join(args.work, name, label + ".jsonl")
            save = os.path.join(args.work, name, label + ".safetensors")
            out = tl.run_trainer(trainer, STEPS, data=data_dir, seed=3,
                                 metrics=metrics, save=save,
                                 extra=extra)
            runs[label] = (tl.read_losses(metrics, STEPS),
                           tl.read_safetensors(save)[0], out)
        (lg, tg, out), (le, te, _) = runs["graphs"], runs["eager"]
        same = (np.array_equal(lg, le) and set(tg) == set(te) and
                all(np.array_equal(tg[n], te[n]) for n in tg))
        report.check(same, "%s: %d steps with CUDA graphs = without, "
                     "bitwise (losses, %d checkpoint tensors)"
                     % (name, STEPS, len(tg)),
                     "" if same else "losses %s vs %s" % (lg, le))
        report.check("could not be captured" not in out.stdout + out.stderr,
                     "%s: the step was captured" % name)

    print("SUMMARY cuda-graphs: %s" % ("FAIL" if report.failed else "PASS"))
    return 1 if report.failed else 0


if __name__ == "__main__":
    tl.run_check(main, "cuda-graphs")
