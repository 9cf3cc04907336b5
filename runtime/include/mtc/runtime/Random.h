//===- Random.h - The dropout generator -------------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The mask is never stored: element i of a dropout op is kept iff a uniform
// number that is a pure function of (seed, step, stream, i) is >= ratio, so
// the backward and any recomputation regenerate it, and CPU and CUDA agree
// bit for bit (integer arithmetic only, then an exact int -> float step).
//
// The generator is Philox-4x32-10 (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC'11), the counter-based generator cuRAND and
// PyTorch's CUDA dropout use: ten rounds of 32x32->64 multiplies pass
// BigCrush for any key and counter. The key identifies the random stream,
// (seed, stream) hashed together; the counter is (element group, step), one
// call giving the uniforms of four consecutive elements.
//
// Shared by the kernel libraries and by generated kernels that fuse a
// dropout into an elementwise chain, so all draw the same mask.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_RANDOM_H
#define MTC_RUNTIME_RANDOM_H

#include "mtc/runtime/Half.h" // MTC_HOST_DEVICE

#include <cstdint>

namespace mtc::rt {

/// The splitmix64 finalizer: a bijection of 64-bit words with good
/// avalanche, used to fold the seed and the stream id into a Philox key.
MTC_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Philox-4x32 with `rounds` rounds (10 for dropout) on counter `ctr` and
/// key (key0, key1); writes the four output words to `out`.
MTC_HOST_DEVICE inline void philox4x32(const uint32_t ctr[4], uint32_t key0,
                                       uint32_t key1, uint32_t out[4],
                                       int rounds = 10) {
  constexpr uint32_t kMul0 = 0xd2511f53u, kMul1 = 0xcd9e8d57u;
  constexpr uint32_t kWeyl0 = 0x9e3779b9u, kWeyl1 = 0xbb67ae85u;
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32),
             lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32),
             lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ key0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ key1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/// Everything a dropout kernel needs, formed once on the host.
struct DropoutParams {
  uint32_t key0, key1;
  uint64_t step;
  float ratio;
  /// 1 / (1 - ratio) in float, the factor PyTorch's mask holds.
  float scale;
};

inline DropoutParams dropoutParams(uint64_t seed, int64_t step, uint64_t stream,
                                   float ratio) {
  uint64_t key = mix64(seed ^ mix64(stream));
  DropoutParams p;
  p.key0 = static_cast<uint32_t>(key);
  p.key1 = static_cast<uint32_t>(key >> 32);
  p.step = static_cast<uint64_t>(step);
  p.ratio = ratio;
  p.scale = 1.0f / (1.0f - ratio);
  return p;
}

/// Elements per generator call; element i uses word i % 4 of group i / 4.
constexpr int kDropoutGroup = 4;

/// Which of the four elements of `group` are kept. A word's top 24 bits
/// become a uniform u in [0, 1) exactly (24 bits fit a float's
/// significand); the element is kept iff u >= ratio.
MTC_HOST_DEVICE inline void dropoutGroupKeep(const DropoutParams &p,
                                             uint64_t group, bool keep[4]) {
  uint32_t ctr[4] = {
      static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
      static_cast<uint32_t>(p.step), static_cast<uint32_t>(p.step >> 32)};
  uint32_t words[4];
  philox4x32(ctr, p.key0, p.key1, words);
  for (int j = 0; j < kDropoutGroup; ++j) {
    float u = static_cast<float>(words[j] >> 8) * (1.0f / 16777216.0f);
    keep[j] = u >= p.ratio;
  }
}

/// A dropped element is 0 even when x is not finite, as the contract says
/// (PyTorch's x * mask would give NaN there).
MTC_HOST_DEVICE inline float dropoutElement(float x, bool keep,
                                            const DropoutParams &p) {
  return keep ? x * p.scale : 0.0f;
}

/// The step counters as kernels read them on the device (CUDA): a kernel of
/// a captured CUDA graph replays with the arguments of its capture, so
/// whatever changes from step to step is read from device memory. The CUDA
/// runtime uploads them before every step.
struct StepCounters {
  long long batch;         ///< batchCounter(ctx): keys the dropout masks
  long long optimizerStep; ///< optimizer steps including this one
};

} // namespace mtc::rt

#endif // MTC_RUNTIME_RANDOM_H
