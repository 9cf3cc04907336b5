#!/usr/bin/python3
"""Compares mtc's float32 <-> bfloat16/float16 conversions (runtime Half.h,
run by half_convert.cpp) with PyTorch's bfloat16 and NumPy's float16 on
random values over the whole range, halfway points and special values."""

import os
import subprocess
import sys

import numpy as np
import torch


def main():
    exe, work = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    parts = [
        rng.standard_normal(200000).astype(np.float32) *
        (10.0 ** rng.uniform(-12, 8, 200000)).astype(np.float32),
        rng.integers(0, 2 ** 32, 200000, dtype=np.uint64)
        .astype(np.uint32).view(np.float32),  # every kind of bit pattern
        np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 1e-8,
                  2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 3.3895314e38,
                  np.finfo(np.float32).max, np.finfo(np.float32).tiny],
                 np.float32),
    ]
    # Halfway points between neighbouring halves and bfloat16s.
    h = np.arange(0, 0x7bff, dtype=np.uint16).view(np.float16).astype(np.float32)
    parts.append((h[:-1] + (h[1:] - h[:-1]) / 2).astype(np.float32))
    b = (np.arange(0, 0x7f7f, dtype=np.uint32) << 16).view(np.float32)
    parts.append((b[:-1] + (b[1:] - b[:-1]) / 2).astype(np.float32))
    x = np.concatenate(parts).astype(np.float32)
    x = x[~np.isnan(x)]  # NaN payloads differ between libraries
    paths = [os.path.join(work, n) for n in
             ("x.f32", "bf16.u16", "fp16.u16", "from_bf16.f32", "from_fp16.f32")]
    x.tofile(paths[0])
    subprocess.run([exe] + paths, check=True)
    ours_bf16 = np.fromfile(paths[1], np.uint16)
    ours_fp16 = np.fromfile(paths[2], np.uint16)
    ref_bf16 = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16) \
        .numpy().view(np.uint16)
    with np.errstate(over="ignore"):
        ref_fp16 = x.astype(np.float16).view(np.uint16)
    bad_bf16 = np.count_nonzero(ours_bf16 != ref_bf16)
    bad_fp16 = np.count_nonzero(ours_fp16 != ref_fp16)
    print("float32 -> bfloat16: %d values, %d differ from PyTorch"
          % (len(x), bad_bf16))
    print("float32 -> float16: %d values, %d differ from NumPy"
          % (len(x), bad_fp16))
    all16 = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    from_bf16 = np.fromfile(paths[3], np.float32)
    from_fp16 = np.fromfile(paths[4], np.float32)
    ref_from_bf16 = torch.from_numpy(all16.view(np.int16)).view(torch.bfloat16) \
        .float().numpy()
    ref_from_fp16 = all16.view(np.float16).astype(np.float32)
    same = lambda a, r: np.count_nonzero(
        ~((a.view(np.uint32) == r.view(np.uint32)) | (np.isnan(a) & np.isnan(r))))
    print("bfloat16 -> float32: 65536 patterns, %d differ from PyTorch"
          % same(from_bf16, ref_from_bf16))
    print("float16 -> float32: 65536 patterns, %d differ from NumPy"
          % same(from_fp16, ref_from_fp16))


if __name__ == "__main__":
    main()
