"""Writes a copy of a safetensors checkpoint whose float32 tensors with
names matching a glob are multiplied by a factor (other tensors unchanged).

Usage: scale_tensors.py IN OUT GLOB FACTOR
"""

import fnmatch
import json
import struct
import sys

import numpy as np


def main():
    src, dst, pattern, factor = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    raw = open(src, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    scaled = 0
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] != "F32" or not fnmatch.fnmatchcase(name, pattern):
            continue
        begin, end = entry["data_offsets"]
        values = np.frombuffer(bytes(data[begin:end]), dtype="<f4") * np.float32(factor)
        data[begin:end] = values.astype("<f4").tobytes()
        scaled += 1
    if scaled == 0:
        sys.exit("no float32 tensor matches " + pattern)
    open(dst, "wb").write(raw[:8 + n] + bytes(data))
    print("scaled", scaled)


if __name__ == "__main__":
    main()
