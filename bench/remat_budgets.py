#!/usr/bin/python3
"""Recomputation budgets on the CPU: what `mtc plan --mem-budget` reaches, and peak RSS.

For each zoo model (test/zoo/models.py, p = 0 dropout export) at a batch
large enough that activations matter (BENCH_BATCH; the zoo's own test
batches leave the step dominated by weights and AdamW state):

1. `mtc plan MODEL.onnx --optimizer adamw --report` gives the plan without
   recomputation (`total_bytes`, `forward_flops`);
2. the same with `--mem-budget` at 100%, 75%, 50% and 35% of that total:
   fits or not (exit status), `total_bytes` reached, extra FLOPs
   (`recompute_flops / forward_flops`), the wall time of the call and of
   the solver, and the exact optimum: test/remat/ilp_reference.py solves
   the recomputation model (`--remat-json`) at the budget the compiled plan
   gave the solver, with CBC, and the production choice's FLOPs are
   compared with it;
3. peak RSS of 5 AdamW steps: PyTorch (a child process building the zoo
   model, minus one that only imports and builds it) and the mtc trainer
   compiled at 100% and at the smallest budget of step 2 that fit.

Prints a Markdown table; `--doc FILE` also writes it with the explanation
(docs/bench.md is made this way).

Usage: remat_budgets.py --mtc PATH --work DIR [--models a,b] [--doc FILE]
Run with /usr/bin/python3 (torch, torchvision, onnx, numpy).
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "test", "zoo")

FRACTIONS = [1.00, 0.75, 0.50, 0.35]
STEPS = 5
# Batches at which the step's activations outweigh weights + AdamW state.
BENCH_BATCH = {"resnet18": 128, "mobilenetv2": 128, "transformer": 64,
               "gpt": 64, "vit": 64}
ILP_SECONDS = 60
# One thread everywhere: the two sides compare like for like, and the runs
# stay modest next to other jobs.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}


def _zoo():
    sys.path.insert(0, ZOO)
    import zoolib
    return zoolib


def _spec(zl, name):
    spec = zl.models.get(name)
    spec.batch = BENCH_BATCH.get(name, spec.batch)
    return spec


def _env():
    env = dict(os.environ)
    env.update(THREAD_ENV)
    return env


def mib(n):
    return "%.2f" % (n / 2.0 ** 20)


# ----------------------------------------------------------------------------
# Child modes: the measured processes
# ----------------------------------------------------------------------------


def torch_child(model, data_dir, steps):
    """Builds the zoo model; with steps > 0 trains it with AdamW. Prints
    ru_maxrss (KiB) of this process."""
    import torch
    zl = _zoo()
    torch.set_num_threads(1)
    spec = _spec(zl, model)
    wrapper = zl.tl.make_loss_wrapper(spec.build(0.0), spec.loss)
    wrapper.train()
    torch_train(spec, wrapper, data_dir, steps)
    print("MAXRSS_KIB %d" % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def torch_train(spec, wrapper, data_dir, steps):
    """`steps` AdamW steps (the zoo's hyperparameters) on batches of the
    data directory's samples; returns each step's wall time in ms."""
    import numpy as np
    import torch
    times = []
    if steps <= 0:
        return times
    x_all = np.load(os.path.join(data_dir, "input.npy"))
    y_all = np.load(os.path.join(data_dir, "target.npy"))
    opt = torch.optim.AdamW(wrapper.parameters(), **spec.adamw)
    n = len(x_all)
    for i in range(steps):
        start = time.perf_counter()
        idx = [(i * spec.batch + j) % n for j in range(spec.batch)]
        x = torch.from_numpy(x_all[idx])
        y = torch.from_numpy(y_all[idx])
        opt.zero_grad()
        loss = wrapper(x, y)[0]
        loss.backward()
        opt.step()
        times.append(1000.0 * (time.perf_counter() - start))
    return times


def measured(argv, env=None, keep_stdout=False):
    """Peak RSS (KiB) of the command argv, run under the wrapper; with
    keep_stdout, (peak RSS, the command's stdout).

    Linux carries a process's peak RSS across fork + exec (the parent's
    resident pages at the exec count as the child's), so a child started
    from this process (which has torch loaded) would report at least this
    process's RSS. The wrapper (rss_wrap.py, run with -S) is a small fresh
    Python process: what its child reports is at least the wrapper's own RSS (the floor, measured
    with /bin/true) and otherwise the child's own peak.
    """
    wrapper = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "rss_wrap.py")
    flags = ["--keep-stdout"] if keep_stdout else []
    r = subprocess.run([sys.executable, "-S", wrapper] + flags + argv,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env or _env())
    m = re.search(r"MAXRSS_KIB (\d+)\s*$", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError("%s failed (%d): %s" % (
            " ".join(argv), r.returncode, r.stderr.strip()[-400:]))
    return (int(m.group(1)), r.stdout) if keep_stdout else int(m.group(1))


def torch_cmd(name, data_dir, steps):
    return [sys.executable, os.path.abspath(__file__), "--torch-child", name,
            data_dir, str(steps)]


# ----------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------


def plan(mtc, onnx_path, report, budget=None):
    cmd = [mtc, "plan", onnx_path, "--optimizer", "adamw", "--report", report,
           "--remat-json", report + ".remat"]
    if budget is not None:
        cmd += ["--mem-budget", str(budget)]
    for f in (report, report + ".remat"):
        if os.path.exists(f):
            os.remove(f)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=_env())
    wall = time.perf_counter() - t0
    rep = None
    if os.path.exists(report):
        with open(report) as f:
            rep = json.load(f)
    smallest = None
    if r.returncode != 0:
        m = re.search(r"the smallest budget mtc can meet [^(]*\((\d+) bytes\)",
                      r.stderr)
        if m:
            smallest = int(m.group(1))
        elif rep is None:
            raise RuntimeError("mtc plan failed: %s" % r.stderr.strip()[-400:])
    return r.returncode == 0, rep, wall, smallest, r.stderr


def optimum(report):
    """The compiled plan's recomputation choice next to the ILP optimum on
    the same model and budget, or None when the plan recomputed nothing."""
    sys.path.insert(0, os.path.join(ROOT, "test", "remat"))
    import ilp_reference
    path = report + ".remat"
    if not os.path.exists(path):
        return None
    with open(path) as f:
        problem = json.load(f)
    compiled = [s for s in problem["solutions"] if s.get("compiled")]
    if not compiled:
        return None
    s = compiled[0]
    opt, proven, seconds, _ = ilp_reference.solve(problem, s["budget"],
                                                  ILP_SECONDS)
    return {"flops": s["flops"], "solver_s": s["seconds"], "optimum": opt,
            "proven": proven, "ilp_s": seconds}


def bench_model(args, name):
    import numpy as np
    zl = _zoo()
    spec = _spec(zl, name)
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    data_dir = os.path.join(work, "data")
    os.makedirs(data_dir, exist_ok=True)
    data = spec.make_data(max(16, STEPS * spec.batch))
    for k, v in data.items():
        np.save(os.path.join(data_dir, k + ".npy"), v)
    onnx_path = os.path.join(work, name + ".onnx")
    zl.export(spec, 0.0, onnx_path, data)

    ok, base, wall0, _, err = plan(args.mtc, onnx_path,
                                   os.path.join(work, "r.json"))
    if not ok:
        raise RuntimeError("plan without budget failed: " + err[-400:])
    total = base["total_bytes"]
    fwd = base["forward_flops"]
    rows = []
    for frac in FRACTIONS:
        budget = int(total * frac)
        fits, rep, wall, smallest, _ = plan(
            args.mtc, onnx_path,
            os.path.join(work, "rb%d.json" % int(frac * 100)), budget)
        report = os.path.join(work, "rb%d.json" % int(frac * 100))
        rows.append({
            "fraction": frac, "budget": budget, "fits": fits,
            "total_bytes": rep["total_bytes"] if rep else smallest,
            "smallest": None if fits else smallest,
            "extra_flops_pct": (100.0 * rep["recompute_flops"] / fwd
                                if rep and fwd else None),
            "solve_s": wall,
            "exact": optimum(report) if fits else None})
        print("  %-12s budget %3d%% %s  total %s MiB  +%s FLOPs  %.2fs" % (
            name, frac * 100, "fits" if fits else "over",
            mib(rows[-1]["total_bytes"] or 0),
            "%.1f%%" % rows[-1]["extra_flops_pct"]
            if rows[-1]["extra_flops_pct"] is not None else "?", wall),
            flush=True)

    # Peak RSS.
    base_kib = measured(torch_cmd(name, data_dir, 0))
    train_kib = measured(torch_cmd(name, data_dir, STEPS))
    fitting = [r for r in rows if r["fits"]]
    smallest_fit = min(fitting, key=lambda r: r["budget"]) if fitting else None
    trainers = []
    for label, row in (("100%", rows[0]), ("min", smallest_fit)):
        if row is None:
            trainers.append(None)
            continue
        exe = os.path.join(work, "trainer_%d" % int(row["fraction"] * 100))
        cmd = [args.mtc, "compile", onnx_path, "--optimizer", "adamw",
               "--lr", repr(spec.adamw["lr"]),
               "--weight-decay", repr(spec.adamw["weight_decay"]),
               "--mem-budget", str(row["budget"]),
               "--report", exe + ".json", "-o", exe]
        r = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=_env())
        if r.returncode != 0:
            raise RuntimeError("mtc compile failed: " + r.stderr[-400:])
        with open(exe + ".json") as f:
            arena = json.load(f)["total_bytes"]
        kib = measured([exe, "--data", data_dir, "--steps", str(STEPS)])
        trainers.append({"fraction": row["fraction"], "arena": arena,
                         "rss_kib": kib})
        print("  %-12s trainer at %s budget: arena %s MiB, peak RSS %s MiB" % (
            name, label, mib(arena), mib(kib * 1024)), flush=True)
    print("  %-12s PyTorch peak RSS %s MiB (baseline %s MiB)" % (
        name, mib(train_kib * 1024), mib(base_kib * 1024)), flush=True)
    return {"name": name, "batch": spec.batch, "total": total, "fwd": fwd,
            "rows": rows, "torch_base_kib": base_kib,
            "torch_train_kib": train_kib, "trainers": trainers}


# ----------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------


def budget_table(results):
    out = ["| model (batch) | budget | MiB | fits | plan total MiB | "
           "extra FLOPs | plan s | solver s | optimum (ILP) | vs optimum |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            if r["fits"]:
                fits = "yes"
            elif r["smallest"]:
                fits = "no (min %s MiB)" % mib(r["smallest"])
            else:
                fits = "no"
            ex = r.get("exact")
            if ex is None:
                solver, opt, ratio = "-", "-", "-"
            else:
                solver = "%.3f" % ex["solver_s"]
                if ex["optimum"] is None:
                    opt, ratio = "infeasible?", "-"
                else:
                    opt = "+%.1f%%%s (%.1f s)" % (
                        100.0 * ex["optimum"] / res["fwd"],
                        "" if ex["proven"] else ", not proven", ex["ilp_s"])
                    ratio = ("%.3f" % (ex["flops"] / ex["optimum"])
                             if ex["optimum"] else
                             ("1.000" if ex["flops"] == 0 else "-"))
            out.append("| %s (%d) | %d%% | %s | %s | %s | %s | %.2f | %s | %s | %s |" % (
                res["name"], res["batch"], r["fraction"] * 100,
                mib(r["budget"]), fits,
                mib(r["total_bytes"]) if r["fits"] else "-",
                "+%.1f%%" % r["extra_flops_pct"]
                if r["fits"] and r["extra_flops_pct"] is not None else "-",
                r["solve_s"], solver, opt, ratio))
    return "\n".join(out)


def rss_table(results):
    out = ["| model | PyTorch peak RSS | PyTorch baseline | PyTorch "
           "difference | mtc arena 100% | mtc RSS 100% | mtc min budget | "
           "mtc arena min | mtc RSS min |",
           "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        t100, tmin = res["trainers"]
        cells = [res["name"], mib(res["torch_train_kib"] * 1024),
                 mib(res["torch_base_kib"] * 1024),
                 mib((res["torch_train_kib"] - res["torch_base_kib"]) * 1024)]
        cells += [mib(t100["arena"]), mib(t100["rss_kib"] * 1024)]
        if tmin:
            cells += ["%d%%" % (tmin["fraction"] * 100), mib(tmin["arena"]),
                      mib(tmin["rss_kib"] * 1024)]
        else:
            cells += ["-", "-", "-"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-child":
        torch_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtc", required=True, help="the mtc executable")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--models",
                    default="resnet18,mobilenetv2,transformer,gpt,vit")
    ap.add_argument("--doc", help="also write the tables here (Markdown)")
    args = ap.parse_args()
    args.mtc = os.path.abspath(args.mtc)
    os.makedirs(args.work, exist_ok=True)
    import torch
    torch.set_num_threads(1)

    floor_kib = measured(["/bin/true"])
    print("RSS floor (wrapper running /bin/true): %s MiB" %
          mib(floor_kib * 1024), flush=True)
    results = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        t0 = time.time()
        print("%s ..." % name, flush=True)
        try:
            results.append(bench_model(args, name))
        except Exception as e:  # noqa: report the model and go on
            print("  %s FAILED: %s" % (name, e), flush=True)
        print("  %s done in %.0fs" % (name, time.time() - t0), flush=True)

    text = "%s\n\n%s\n\nRSS floor (the wrapper running `/bin/true`): %s MiB.\n" % (
        budget_table(results), rss_table(results), mib(floor_kib * 1024))
    print("\n" + text)
    if args.doc:
        cmd = "/usr/bin/python3 bench/remat_budgets.py --mtc build/bin/mtc " \
              "--work WORKDIR --models %s" % args.models
        with open(args.doc, "w") as f:
            f.write(DOC.format(command=cmd, tables=text, steps=STEPS,
                               ilp=ILP_SECONDS))
        print("wrote %s" % args.doc)


DOC = """# Benchmarks

## Recomputation budgets (CPU)

Made with

    {command}

(zoo models of `test/zoo/models.py`, dropout p = 0 exports at the batch
shown, chosen so that activations outweigh weights and AdamW state; AdamW;
one thread everywhere: `OMP_NUM_THREADS=1`, `OPENBLAS_NUM_THREADS=1`,
torch `set_num_threads(1)`). MiB = 2^20 bytes.

{tables}
First table: `mtc plan MODEL.onnx --optimizer adamw --mem-budget B
--report F.json`, B being the given fraction of the plan without a budget.

- **budget / MiB**: the fraction and the byte count passed.
- **fits**: exit status 0. When it is not, mtc's error states the smallest
  budget its solver reaches (shown as "min").
- **plan total MiB**: `total_bytes` of the report (the arena plus nothing
  else: inputs, weights and state live in it), for budgets that fit.
- **extra FLOPs**: `recompute_flops / forward_flops` — the forward work
  recomputed per step, as a share of one forward pass.
- **plan s**: wall time of the whole `mtc plan` call (process start, ONNX
  import, autodiff, the plan, the budget curve it prints), not of the
  solver alone; **solver s**: the solver alone, at the budget the compiled
  plan gave it (a little under the budget: the arena's placement adds a
  few percent over the live bytes the solver works with).
- **optimum (ILP)**: the fewest recomputed FLOPs any choice reaches on the
  same recomputation model at that budget, as a share of one forward pass,
  and CBC's time (`test/remat/ilp_reference.py`, written apart from the
  C++ solver, limit {ilp} s; "not proven" when the limit stopped it before
  it proved optimality: then it is an upper bound). **vs optimum**: the
  production solver's FLOPs over the optimum's (the bar is 1.10).

Second table: peak resident set size of {steps} AdamW training steps on the
zoo data.

- **PyTorch peak RSS**: a Python process that builds the zoo model and its
  loss wrapper and runs the steps (torch.optim.AdamW with the zoo's
  hyperparameters), measured by the same wrapper as the trainers. It includes the interpreter, torch,
  torchvision and numpy (their code and allocations), so for these small
  models it is dominated by them.
- **PyTorch baseline**: the same process with only the imports and the
  model built; **difference** approximates what training adds (gradients,
  AdamW state, activations, autograd and allocator overheads). Allocator
  caching and freed pages that stay mapped make it approximate; it can
  undercount when training reuses memory freed after start-up.
- **mtc arena**: `total_bytes` of the compiled trainer's plan — one
  allocation for the whole step, known before it runs. "100%" is compiled
  with `--mem-budget` equal to the unbudgeted total, so it is the budgeted
  plan of the first table (which may already recompute), not the plan
  without `--mem-budget`.
- **mtc RSS**: the trainer (`--data DIR --steps {steps}`) run under a small
  Python wrapper (`bench/rss_wrap.py`, run with `python3 -S`) that
  reports `getrusage(RUSAGE_CHILDREN).ru_maxrss` after `subprocess.run`, one trainer per wrapper process. It includes the
  executable with its initial weights, the C++ runtime, OpenBLAS (its
  buffers; threads are pinned to one here, more threads mean more
  per-thread buffers) and the data set loaded from `.npy`. Pages of the
  arena that are never touched are not resident, so RSS may be below
  the arena.
- **mtc min budget**: the smallest of the tried fractions that fit; the
  trainer compiled with that `--mem-budget`.

`--doc FILE` rewrites FILE from these tables; notes on a particular run are
added by hand below.
"""


if __name__ == "__main__":
    main()
