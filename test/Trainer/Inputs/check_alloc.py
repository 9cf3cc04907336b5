#!/usr/bin/python3
"""Runs a trainer under the allocation counter for 2 and for 8 steps, on one
thread and on two, and checks that the step loop allocates nothing, that
the planned arena is mapped once (fresh pages, off the heap) and that no
heap allocation is as large."""

import argparse
import json
import os
import subprocess
import sys


def count(args, steps, threads):
    out = os.path.join(args.work, "alloc-%d-%d.txt" % (steps, threads))
    env = dict(os.environ, LD_PRELOAD=args.preload, MTC_ALLOC_COUNT=out,
               MTC_ALLOC_WATCH=str(args.arena), OMP_NUM_THREADS=str(threads))
    subprocess.run([args.trainer, "--data", args.data, "--steps", str(steps),
                    "--metrics", os.path.join(args.work, "m.jsonl")],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    fields = open(out).read().split()
    calls = int(fields[fields.index("calls") + 1])
    at = fields.index("largest")
    largest = [int(x) for x in fields[at + 1:fields.index("watched")]]
    return calls, largest, int(fields[fields.index("watched") + 1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--trainer", "--data", "--report", "--preload", "--work"):
        ap.add_argument(flag, required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    arena = json.load(open(args.report))["total_bytes"]
    args.arena = arena
    ok = True
    for threads in (1, 2):
        short, largest, maps = count(args, 2, threads)
        long_, _, _ = count(args, 8, threads)
        if short != long_:
            print("threads %d: FAIL: 2 steps make %d allocations, 8 steps %d"
                  % (threads, short, long_))
            ok = False
            continue
        if maps != 1 or largest[0] >= arena:
            print("threads %d: FAIL: the arena of %d bytes mapped %d times, "
                  "largest heap allocations %s" % (threads, arena, maps,
                                                  largest))
            ok = False
            continue
        print("threads %d: steps 2 and 8 allocate the same (%d calls); "
              "arena (%d bytes) mapped once, no heap allocation as large"
              % (threads, short, arena))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
