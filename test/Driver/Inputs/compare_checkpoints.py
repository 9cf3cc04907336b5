"""Prints, for each tensor of two safetensors checkpoints, whether it changed.

Usage: compare_checkpoints.py BEFORE AFTER
"""

import json
import struct
import sys


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}


before, after = read(sys.argv[1]), read(sys.argv[2])
for name in sorted(after):
    if name in before:
        print(name, "unchanged" if before[name] == after[name] else "changed")
    else:
        print(name, "new")
