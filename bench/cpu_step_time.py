#!/usr/bin/python3
"""CPU training step time and peak RSS: the mtc trainer against PyTorch eager.

For each zoo model (test/zoo/models.py, exported with dropout p = 0) at a
bench batch, and the zoo's GPT at sequence 512 (gpt-512: d_model 128, 4
heads, 2 layers, where the attention scores dominate), both sides train
the same model on the same data with AdamW (the zoo's hyperparameters)
with the same number of threads
(`--threads`, default: all cores; PyTorch through torch.set_num_threads,
the trainer through OMP_NUM_THREADS):

* step time: the median wall time of steps 3..N (the first two warm up
  caches and allocators), the trainer's from its --metrics (`time_ms`,
  which includes the batch copy), PyTorch's measured around zero_grad +
  forward + backward + step in the child; also the trainer compiled with
  --no-fusion (every elementwise op its own loop) and, for the models with
  attention, with --no-flash-attention (the exported matmul / softmax ops,
  storing the score matrices);
* peak RSS: of the trainer process, and of the PyTorch child minus a child
  that only imports torch and builds the model (the training increment).

The ratios are mtc / PyTorch (below 1: mtc is faster / smaller), from one
run on one machine. Shared machines vary by tens of percent from minute to
minute, so the trainer and PyTorch run alternately `--rounds` times
(default 3): the step times are the medians over the rounds, the time ratio
the median of the rounds' ratios, each round's pair measured a few seconds
apart (the RSS of the first round). The trainer's RSS includes its whole
process (about 8 MiB of code and libraries), PyTorch's only what training
added. The --no-fusion and --no-flash-attention columns are one run each.
Prints a Markdown table; `--doc FILE` also writes it with this explanation
(docs/bench-cpu.md is made this way).

Usage: cpu_step_time.py --mtc PATH --work DIR [--models a,b] [--threads N]
                        [--steps N] [--rounds N] [--precision fp32|bf16]
                        [--doc FILE]
Run with /usr/bin/python3 (torch, torchvision, onnx, numpy).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import remat_budgets as rb  # noqa: E402  (zoo access, RSS measurement)

# Batches that keep a step between ~10 ms and ~1 s on a small CPU.
BATCH = {"resnet18": 32, "mobilenetv2": 32, "transformer": 32, "gpt": 32,
         "vit": 32, "gpt-512": 4}

# Not in the zoo: its GPT at sequence 512 (d_model 128, 4 heads of 32, 2
# layers), where the score matrices are most of the activations.
LONG_SEQ = 512


def long_gpt_spec(zl):
    models = zl.models
    gpt = models.get("gpt")
    return models.ModelSpec(
        "gpt-512",
        lambda dropout=0.0: models._gpt_class()(
            d_model=128, nhead=4, num_layers=2, block_size=LONG_SEQ,
            dropout=dropout),
        lambda n: models._next_token_data(n, seq=LONG_SEQ),
        batch=BATCH["gpt-512"], dropout_p=None, sgd=gpt.sgd, adamw=gpt.adamw,
        smooth=True, loss=models.next_token_loss)


def thread_env(threads):
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1"})
    return env


def spec_of(zl, name):
    spec = long_gpt_spec(zl) if name == "gpt-512" else zl.models.get(name)
    spec.batch = BATCH.get(name, spec.batch)
    return spec


def torch_child(name, data_dir, steps, threads):
    """Trains the zoo model for `steps` AdamW steps (0: only builds it);
    prints the step times and ru_maxrss (KiB)."""
    import resource

    import torch
    zl = rb._zoo()
    torch.set_num_threads(threads)
    spec = spec_of(zl, name)
    wrapper = zl.tl.make_loss_wrapper(spec.build(0.0), spec.loss)
    wrapper.train()
    times = rb.torch_train(spec, wrapper, data_dir, steps)
    print("STEP_MS " + " ".join("%.3f" % t for t in times))
    print("MAXRSS_KIB %d" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def measured(argv, env):
    """(peak RSS KiB, stdout) of argv run under bench/rss_wrap.py."""
    return rb.measured(argv, env=env, keep_stdout=True)


def median_after_warmup(times):
    times = times[2:] if len(times) > 4 else times
    return statistics.median(times)


def bench_model(args, name):
    import numpy as np
    zl = rb._zoo()
    spec = spec_of(zl, name)
    work = os.path.join(args.work, name)
    data_dir = os.path.join(work, "data")
    os.makedirs(data_dir, exist_ok=True)
    data = spec.make_data(max(16, 4 * spec.batch))
    for k, v in data.items():
        np.save(os.path.join(data_dir, k + ".npy"), v)
    onnx_path = os.path.join(work, name + ".onnx")
    zl.export(spec, 0.0, onnx_path, data)
    env = thread_env(args.threads)

    def mtc_build(label, extra):
        """(trainer, arena bytes, whether it runs fused attention)."""
        exe = os.path.join(work, label, "trainer")
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        cmd = [args.mtc, "compile", onnx_path, "--optimizer", "adamw",
               "--lr", repr(spec.adamw["lr"]),
               "--weight-decay", repr(spec.adamw["weight_decay"]),
               "--precision", args.precision, "--report", exe + ".json",
               "-o", exe] + extra
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError("mtc compile failed: " + r.stderr[-400:])
        with open(exe + ".json") as f:
            arena = json.load(f)["total_bytes"]
        with open(exe + ".cpp") as f:
            attention = "attentionForward(" in f.read()
        return exe, arena, attention

    def mtc_run(exe):
        """(peak RSS KiB, median step ms) of a training run."""
        metrics = exe + ".jsonl"
        kib, _ = measured([exe, "--data", data_dir, "--steps",
                           str(args.steps), "--metrics", metrics], env)
        with open(metrics) as f:
            times = [json.loads(line)["time_ms"] for line in f if line.strip()]
        return kib, median_after_warmup(times)

    child = [sys.executable, os.path.abspath(__file__), "--torch-child", name,
             data_dir]

    def torch_run():
        """(peak RSS KiB, median step ms) of PyTorch's training run."""
        kib, out = measured(child + [str(args.steps), str(args.threads)], env)
        times = [float(t) for t in
                 re.search(r"STEP_MS (.*)", out).group(1).split()]
        return kib, median_after_warmup(times)

    fused, arena, attention = mtc_build("fused", [])
    unfused, _, _ = mtc_build("unfused", ["--no-fusion"])
    noflash = mtc_build("no-flash", ["--no-flash-attention"]) \
        if attention else None
    base_kib, _ = measured(child + ["0", str(args.threads)], env)
    rounds = []
    for _ in range(args.rounds):
        rounds.append((mtc_run(fused), torch_run()))
    (mtc_kib, _), (torch_kib, _) = rounds[0]
    mtc_ms = statistics.median(m for (_, m), _ in rounds)
    torch_ms = statistics.median(t for _, (_, t) in rounds)
    ratio = statistics.median(m / t for (_, m), (_, t) in rounds)
    unfused_ms = mtc_run(unfused)[1]
    plain = (noflash[1], mtc_run(noflash[0])[1]) if noflash else None
    res = {"name": name, "batch": spec.batch,
           "mtc_ms": mtc_ms, "unfused_ms": unfused_ms,
           "noflash_ms": plain[1] if plain else None,
           "noflash_arena": plain[0] if plain else None,
           "torch_ms": torch_ms, "ratio": ratio,
           "mtc_rss": mtc_kib * 1024, "arena": arena,
           "torch_rss": (torch_kib - base_kib) * 1024}
    print("  %-12s batch %3d: mtc %.1f ms/step, PyTorch %.1f ms/step (x%.2f); "
          "RSS mtc %s MiB, PyTorch +%s MiB" % (
              name, spec.batch, res["mtc_ms"], res["torch_ms"],
              res["ratio"], rb.mib(res["mtc_rss"]),
              rb.mib(res["torch_rss"])), flush=True)
    return res


def table(results):
    out = ["| model (batch) | mtc ms/step | mtc --no-fusion | mtc "
           "--no-flash-attention (arena MiB) | PyTorch ms/step "
           "| time ratio | mtc peak RSS MiB (arena) | PyTorch training RSS MiB "
           "| RSS ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        noflash = "-" if r["noflash_ms"] is None else "%.1f (%s)" % (
            r["noflash_ms"], rb.mib(r["noflash_arena"]))
        out.append("| %s (%d) | %.1f | %.1f | %s | %.1f | %.2f | %s (%s) | %s | %.2f |" % (
            r["name"], r["batch"], r["mtc_ms"], r["unfused_ms"], noflash,
            r["torch_ms"], r["ratio"], rb.mib(r["mtc_rss"]),
            rb.mib(r["arena"]), rb.mib(r["torch_rss"]),
            r["mtc_rss"] / r["torch_rss"] if r["torch_rss"] > 0 else 0.0))
    return "\n".join(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-child":
        torch_child(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                    int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtc", required=True, help="the mtc executable")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--models",
                    default="resnet18,mobilenetv2,transformer,gpt,vit,gpt-512")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate runs of the trainer and PyTorch "
                         "(default 3)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--doc", help="also write the table here (Markdown)")
    args = ap.parse_args()
    args.mtc = os.path.abspath(args.mtc)
    os.makedirs(args.work, exist_ok=True)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    print("threads %d, %d steps, %d rounds, precision %s" % (
        args.threads, args.steps, args.rounds, args.precision), flush=True)
    results = [bench_model(args, name) for name in args.models.split(",")]
    text = table(results)
    print(text)
    if args.doc:
        with open(args.doc, "w") as f:
            f.write("# CPU step time and memory: mtc vs PyTorch eager\n\n")
            f.write("Made by `/usr/bin/python3 bench/cpu_step_time.py --mtc "
                    "build/bin/mtc --work DIR --doc docs/bench-cpu.md` "
                    "(%d threads, %d AdamW steps, %d rounds, %s, CPU: %s)."
                    "\n\n" % (args.threads, args.steps, args.rounds,
                              args.precision, cpu_name()))
            f.write(__doc__.split("\n\n", 1)[1].split("\nUsage:")[0] + "\n")
            f.write(text + "\n")
    return 0


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "%s, %d cores" % (line.split(":", 1)[1].strip(),
                                             os.cpu_count())
    except OSError:
        pass
    return "%d cores" % os.cpu_count()


if __name__ == "__main__":
    sys.exit(main())
