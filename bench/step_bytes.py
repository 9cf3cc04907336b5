#!/usr/bin/python3
"""Bytes a training step moves by the cost model, from a generated trainer.

The trainer's source (`trainer.cu` or `trainer.cpp`, written by `mtc compile`,
also with --no-build) holds the table --profile reports against: per op of
the step, the bytes its kernel reads and writes by the cost model (a layer
norm run in the kernel before it counted there, views as nothing). This sums
it, in total and by kind of op, so a change to fusion or storage formats can
be weighed without a GPU:

    mtc compile gpt2s.onnx --target cuda --precision bf16 --no-build -o t/trainer
    bench/step_bytes.py t/trainer.cu

Usage: step_bytes.py TRAINER_SOURCE [--top N]
"""

import argparse
import collections
import re
import sys


def step_bytes(source):
    """(total bytes, {kind: bytes}) of the kProfileOps table in `source`."""
    start = source.find("kProfileOps[] = {")
    if start < 0:
        raise ValueError("no kProfileOps table (was it written by mtc "
                         "compile?)")
    table = source[start:source.index("};", start)]
    by_kind = collections.Counter()
    for m in re.finditer(r'\{"([^"]*)", "(?:[^"\\]|\\.)*", (\d+)ull, '
                         r'(\d+)ull', table):
        by_kind[m.group(1).split()[0]] += int(m.group(2))
    return sum(by_kind.values()), by_kind


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("--top", type=int, default=12,
                    help="kinds of op listed (default 12)")
    args = ap.parse_args()
    try:
        with open(args.source) as f:
            total, by_kind = step_bytes(f.read())
    except (OSError, ValueError) as e:
        sys.exit("step_bytes: %s" % e)
    print("%.2f GB a step" % (total / 1e9))
    for kind, n in by_kind.most_common(args.top):
        print("  %-40s %7.2f GB" % (kind, n / 1e9))


if __name__ == "__main__":
    main()
