#!/usr/bin/python3
"""Planning time of a GPT-2-small-sized graph: mtc compile --no-build and mtc plan.

Exports the zoo's GPT decoder (test/zoo/models.py) at GPT-2 small's size:
12 layers, d_model 768, 12 heads, vocab 50257, context 1024, tied
embeddings, batch 8 at sequence 1024 (the ONNX file is about 550 MB, kept
in the work directory and reused), then times, for each budget:

  mtc compile MODEL.onnx --optimizer adamw --mem-budget B --no-build
  mtc plan    MODEL.onnx --optimizer adamw --mem-budget B

and prints the arena, the recomputed FLOPs and the wall times.

Usage: plan_time.py --mtc PATH --work DIR [--budgets 7GiB,6GiB]
Run with /usr/bin/python3 (torch, onnx).
"""

import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export(path):
    sys.path.insert(0, os.path.join(ROOT, "test", "zoo"))
    sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
    import models
    import mtc_testlib as tl
    import torch
    torch.manual_seed(0)
    gpt = models._gpt_class()(vocab=50257, d_model=768, nhead=12,
                              num_layers=12, block_size=1024)
    x = torch.randint(0, 50257, (8, 1024))
    y = torch.randint(0, 50257, (8, 1024))
    tl.export_with_loss(gpt, x, y, path, loss=models.next_token_loss)


def run(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), r.stdout[-2000:]))
    return wall, r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--budgets", default="7GiB,6GiB")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "gpt2-small.onnx")
    if not os.path.exists(model):
        t0 = time.time()
        export(model)
        print("exported %s (%.0f MB) in %.0f s" % (
            model, os.path.getsize(model) / 1e6, time.time() - t0))
    for budget in args.budgets.split(","):
        base = [args.mtc, None, model, "--optimizer", "adamw",
                "--mem-budget", budget]
        compile_cmd = list(base)
        compile_cmd[1] = "compile"
        compile_cmd += ["--no-build", "-o", os.path.join(args.work, "trainer")]
        wall, out = run(compile_cmd)
        arena = re.search(r"arena \(planned peak\)\s+(\S+ \S+)", out).group(1)
        extra = re.search(r"recomputed in the backward pass: .*", out)
        print("budget %s: compile --no-build %.1f s, arena %s; %s" % (
            budget, wall, arena, extra.group(0) if extra else "nothing recomputed"))
        plan_cmd = list(base)
        plan_cmd[1] = "plan"
        wall, out = run(plan_cmd)
        print("budget %s: plan (with the curve) %.1f s" % (budget, wall))
        for line in out.splitlines():
            if re.match(r"\s+(\d+%|floor)\s", line):
                print("  " + line.strip())


if __name__ == "__main__":
    main()
