#!/usr/bin/python3
"""Exact reference for mtc's recomputation solver: an ILP solved by CBC.

`mtc plan MODEL.onnx --remat-json F.json` writes the recomputation model of
the training step (passes/include/mtc/Passes/Remat.h) and the production
solver's choices at each budget of its curve. This script, written apart
from the C++ solver, re-checks each production choice against the model
(feasible, peak within the budget, FLOPs as claimed) and computes the least
FLOPs any choice can reach at that budget with an integer program:

  y[u,t] = 1  <=>  candidate u is recomputed by a clone run before op t,
  t in T(u): one of its uses after the forward pass, the last use of one
  of its inputs, or a clone time of a consumer (the clone serves every use
  from t on; the original is dropped after its last read before t: its
  own use, or a consumer's clone reading it).

  minimize   sum flops[u] * y[u,t]
  subject to sum_t y[u,t] <= 1                                   (one clone)
             a clone's input is there: an original still live, an
             argument not yet overwritten, or a clone run no later
             live[k] - sum bytes[u] * f[u,t,k] <= budget      (every op k)
             f[u,t,k] <= y[u,t] for k in its freed range, and
             f[u,t,k] <= 1 - y[v,tv] for a consumer clone at k < tv < t

Usage:
  ilp_reference.py F.json [--time-limit S] [--bar 0.10] [--json OUT]
prints one line per budget and exits 1 when a production choice is
infeasible, misreports itself, or adds more than (1 + bar) x the optimum.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def used_before(c, t):
    before = [u for u in c["uses"] if u < t]
    return before[-1] if before else c["def"]


def last_use(c):
    return c["uses"][-1] if c["uses"] else c["def"]


def consumers_of(problem):
    cands = problem["candidates"]
    consumers = [[] for _ in cands]
    for v, c in enumerate(cands):
        for cand, _ in c["inputs"]:
            if cand >= 0 and v not in consumers[cand]:
                consumers[cand].append(v)
    return consumers


def evaluate(problem, clone_at):
    """Live bytes per op under clone_at, or None when infeasible."""
    mem = list(problem["live"])
    cands = problem["candidates"]
    consumers = consumers_of(problem)
    for u, c in enumerate(cands):
        t = clone_at[u]
        if t < 0:
            continue
        if t <= c["last_forward"]:
            return None
        for cand, until in c["inputs"]:
            clone_first = cand >= 0 and 0 <= clone_at[cand] <= t
            if not clone_first and until < t:
                return None
        # The original lives until its last read before the clone: its own
        # use or a consumer's clone reading it.
        # (a clone runs in the slot before its op: the original is dead at
        # that op).
        first = used_before(c, t) + 1
        for v in consumers[u]:
            if 0 <= clone_at[v] < t:
                first = max(first, clone_at[v])
        for k in range(first, min(t, last_use(c) + 1)):
            mem[k] -= c["bytes"]
    return mem


def clone_times(problem):
    """T(u) for every candidate, consumers first: its uses after the
    forward, the last uses of its inputs and its consumers' times."""
    cands = problem["candidates"]
    consumers = consumers_of(problem)
    times = [None] * len(cands)
    for u in range(len(cands) - 1, -1, -1):
        c = cands[u]
        ts = {t for t in c["uses"] if t > c["last_forward"]}
        ts.update(until for _, until in c["inputs"]
                  if c["last_forward"] < until < last_use(c))
        for v in consumers[u]:
            ts.update(t for t in times[v] if t > c["last_forward"])
        times[u] = sorted(ts)
    return times


def solve(problem, budget, time_limit):
    """(optimal FLOPs or None, proven optimal, seconds, clone_at)."""
    cands = problem["candidates"]
    live = problem["live"]
    consumers = consumers_of(problem)
    times = clone_times(problem)
    var = {}
    for u, ts in enumerate(times):
        for t in ts:
            var[(u, t)] = "y%d_%d" % (u, t)
    rows = []
    for u, ts in enumerate(times):
        if len(ts) > 1:
            rows.append(" + ".join(var[(u, t)] for t in ts) + " <= 1")
    # A clone's inputs: the original still there, or a clone run no later.
    for (v, t), name in var.items():
        for cand, until in cands[v]["inputs"]:
            if until >= t:
                continue
            sooner = ([var[(cand, s)] for s in times[cand] if s <= t]
                      if cand >= 0 else [])
            rows.append(name + " - " + " - ".join(sooner) + " <= 0"
                        if sooner else name + " <= 0")
    # Bytes freed at op k by y[u,t]: over [first, end) but only where no
    # consumer's clone reads the original later (f <= 1 - y[v,tv]). The
    # range splits into segments at those reads.
    over = {k for k, l in enumerate(live) if l > budget}
    covering = {}
    extra = []
    continuous = []
    for (u, t), name in var.items():
        c = cands[u]
        first, end = used_before(c, t) + 1, min(t, last_use(c) + 1)
        if not any(first <= k < end for k in over):
            continue
        reads = sorted({tv for v in consumers[u] for tv in times[v]
                        if first <= tv < t})
        cuts = sorted({first, end} | {tv for tv in reads if first < tv < end})
        for a, b in zip(cuts, cuts[1:]):
            ks = [k for k in range(a, b) if k in over]
            if not ks:
                continue
            # A read in the slot before op tv keeps it live at k < tv.
            blockers = [(v, tv) for v in consumers[u] for tv in times[v]
                        if b <= tv < t]
            if blockers:
                f = "f%d_%d_%d" % (u, t, a)
                continuous.append(f)
                extra.append(f + " - " + name + " <= 0")
                for v, tv in blockers:
                    extra.append(f + " + " + var[(v, tv)] + " <= 1")
            else:
                f = name
            for k in ks:
                covering.setdefault(k, []).append((c["bytes"], f))
    rows.extend(extra)
    for k in sorted(over):
        terms = covering.get(k, [])
        if not terms:
            return None, True, 0.0, None  # nothing can free bytes here
        rows.append(" + ".join("%d %s" % (b, n) for b, n in terms) +
                    " >= %d" % (live[k] - budget))
    obj = " + ".join("%d %s" % (cands[u]["flops"], name)
                     for (u, t), name in var.items()) or "0 dummy"
    work = tempfile.mkdtemp(prefix="mtc-ilp-")
    try:
        lp = os.path.join(work, "remat.lp")
        sol = os.path.join(work, "remat.sol")
        with open(lp, "w") as f:
            f.write("Minimize\n obj: %s\nSubject To\n" % obj)
            for i, r in enumerate(rows):
                f.write(" c%d: %s\n" % (i, r))
            if continuous:
                f.write("Bounds\n")
                for name in continuous:
                    f.write(" 0 <= %s <= 1\n" % name)
            f.write("Binary\n")
            for name in var.values():
                f.write(" %s\n" % name)
            f.write("End\n")
        start = time.time()
        proc = subprocess.run(
            ["cbc", lp, "sec", str(time_limit), "ratioGap", "0",
             "allowableGap", "0", "solve", "solution", sol],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.time() - start
        if not os.path.exists(sol):
            raise RuntimeError("cbc wrote no solution:\n" + proc.stdout[-2000:])
        with open(sol) as f:
            status = f.readline()
            values = {}
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    values[parts[1]] = float(parts[2])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if status.startswith("Infeasible"):
        return None, True, seconds, None
    proven = status.startswith("Optimal")
    clone_at = [-1] * len(cands)
    for (u, t), name in var.items():
        if values.get(name, 0.0) > 0.5:
            clone_at[u] = t
    flops = sum(cands[u]["flops"] for u in range(len(cands))
                if clone_at[u] >= 0)
    return flops, proven, seconds, clone_at


def compare(problem, time_limit, bar):
    """Checks every production solution; returns (rows, failures)."""
    rows, failures = [], []
    for s in problem["solutions"]:
        budget = s["budget"]
        mem = evaluate(problem, s["clone_at"])
        prod_flops = sum(c["flops"] for c, t in
                         zip(problem["candidates"], s["clone_at"]) if t >= 0)
        row = {"budget": budget, "production_flops": prod_flops,
               "production_peak": None, "production_seconds": s["seconds"]}
        if mem is None:
            failures.append("budget %d: the production choice is infeasible"
                            % budget)
            rows.append(row)
            continue
        row["production_peak"] = max(mem)
        if max(mem) != s["peak"] or prod_flops != s["flops"]:
            failures.append("budget %d: production reports peak %d, %d FLOPs;"
                            " the model gives %d, %d"
                            % (budget, s["peak"], s["flops"], max(mem),
                               prod_flops))
        fits = max(mem) <= budget
        opt, proven, seconds, clone_at = solve(problem, budget, time_limit)
        row.update({"optimum_flops": opt, "proven": proven,
                    "ilp_seconds": seconds, "fits": fits})
        if clone_at is not None:
            ref = evaluate(problem, clone_at)
            assert ref is not None and max(ref) <= budget, \
                "the ILP's own choice does not fit the model"
        if opt is None and proven and fits:
            failures.append("budget %d: the ILP finds no choice, yet the "
                            "production choice fits" % budget)
        if opt is not None and not fits:
            failures.append("budget %d: the optimum fits (%d FLOPs) but the "
                            "production choice peaks at %d"
                            % (budget, opt, max(mem)))
        elif fits and opt is not None and proven and \
                prod_flops > (1 + bar) * opt:
            failures.append("budget %d: production adds %d FLOPs, the optimum"
                            " %d (bar %.0f%%)" % (budget, prod_flops, opt,
                                                  100 * bar))
        rows.append(row)
    return rows, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("remat_json")
    ap.add_argument("--time-limit", type=float, default=120)
    ap.add_argument("--bar", type=float, default=0.10)
    ap.add_argument("--json", help="write the comparison rows here")
    args = ap.parse_args()
    with open(args.remat_json) as f:
        problem = json.load(f)
    rows, failures = compare(problem, args.time_limit, args.bar)
    peak = max(problem["live"]) if problem["live"] else 0
    fwd = problem["forward_flops"] or 1
    for r in rows:
        opt = r.get("optimum_flops")
        ratio = ("%.3f" % (r["production_flops"] / opt) if opt else
                 ("1.000" if opt == 0 and r["production_flops"] == 0 else
                  "n/a"))
        print("budget %5.1f%% (%d B): production +%.2f%% FLOPs (peak %s), "
              "optimum +%s%s, ratio %s, ILP %.2f s"
              % (100.0 * r["budget"] / max(peak, 1), r["budget"],
                 100.0 * r["production_flops"] / fwd, r["production_peak"],
                 "%.2f%%" % (100.0 * opt / fwd) if opt is not None
                 else "infeasible",
                 "" if r.get("proven", True) else " (time limit, not proven)",
                 ratio, r.get("ilp_seconds", 0.0)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    for msg in failures:
        print("FAIL: " + msg)
    print("%d budgets checked, %d failed" % (len(rows), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
