//===- DataMovement.cpp - fill, copies, strided copies --------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Half.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

/// The identity conversion of a plain copy.
struct Same {
  template <typename T> T operator()(T v) const { return v; }
};

/// Elements of a row a copy task takes at most: rows longer than this
/// (a copy of few rows, such as a rank-1 gather over a large tensor) are
/// split so that every thread gets a share.
constexpr int64_t kCopyChunk = 1 << 14;

/// Copies `shape` elements, storing convert(source element).
template <typename S, typename T, typename Convert>
void stridedCopyImpl(int rank, const int64_t *shape, const S *src,
                     const int64_t *srcStrides, T *dst,
                     const int64_t *dstStrides, Convert convert) {
  if (rank == 0) {
    dst[0] = convert(src[0]);
    return;
  }
  // Rows along the last dim, split into chunks of at most kCopyChunk
  // elements; each chunk is independent.
  int64_t inner = shape[rank - 1];
  int64_t rows = 1;
  for (int i = 0; i < rank - 1; ++i)
    rows *= shape[i];
  int64_t srcInner = srcStrides[rank - 1];
  int64_t dstInner = dstStrides[rank - 1];
  const int64_t chunks = (inner + kCopyChunk - 1) / kCopyChunk;
  const bool parallel = rows * inner >= cpu::kParallelGrain;
  cpu::parallelFor(0, rows * chunks, parallel, [&](int64_t task) {
    const int64_t row = task / chunks, first = task % chunks * kCopyChunk;
    const int64_t count = std::min(kCopyChunk, inner - first);
    int64_t srcAt = first * srcInner, dstAt = first * dstInner, rest = row;
    for (int i = rank - 2; i >= 0; --i) {
      int64_t idx = rest % shape[i];
      rest /= shape[i];
      srcAt += idx * srcStrides[i];
      dstAt += idx * dstStrides[i];
    }
    const S *s = src + srcAt;
    T *t = dst + dstAt;
    if constexpr (std::is_same_v<S, T>)
      if (srcInner == 1 && dstInner == 1) {
        std::memcpy(t, s, sizeof(T) * count);
        return;
      }
    for (int64_t j = 0; j < count; ++j)
      t[j * dstInner] = convert(s[j * srcInner]);
  });
}

/// Whether a strided copy of `shape` has elements to copy; false (after
/// reporting it to `ctx` as `name`'s error) for an unsupported rank.
bool hasElements(Context &ctx, const char *name, int rank,
                 const int64_t *shape) {
  if (rank < 0 || rank > kMaxRank) {
    reportError(ctx, std::string(name) + ": unsupported rank " +
                         std::to_string(rank));
    return false;
  }
  for (int i = 0; i < rank; ++i)
    if (shape[i] == 0)
      return false;
  return true;
}

} // namespace

void widen16(Context &, Storage16 storage, const uint16_t *x, int64_t n,
             float *y) {
  const bool parallel = n >= cpu::kParallelGrain;
  if (storage == Storage16::Bf16)
    cpu::parallelFor(0, n, parallel,
                     [&](int64_t i) { y[i] = bf16ToFloat(x[i]); });
  else
    cpu::parallelFor(0, n, parallel,
                     [&](int64_t i) { y[i] = halfToFloat(x[i]); });
}

void fill(Context &, float *y, int64_t n, float value) {
  if (n <= 0)
    return;
  // Zero (+0.0, all bits clear; the gradients padded around a slice) goes
  // through memset, which writes large blocks about twice as fast as a
  // store loop; each thread clears a contiguous share.
  const bool zero = floatBits(value) == 0;
  const int64_t chunks = (n + kCopyChunk - 1) / kCopyChunk;
  cpu::parallelFor(0, chunks, n >= cpu::kParallelGrain, [&](int64_t c) {
    float *first = y + c * kCopyChunk;
    const int64_t count = std::min(kCopyChunk, n - c * kCopyChunk);
    if (zero)
      std::memset(first, 0, sizeof(float) * count);
    else
      std::fill(first, first + count, value);
  });
}

void copyBytes(Context &, void *dst, const void *src, uint64_t bytes) {
  if (bytes)
    std::memmove(dst, src, bytes);
}

void stridedCopy(Context &ctx, int rank, const int64_t *shape, const void *src,
                 int64_t srcOffset, const int64_t *srcStrides, void *dst,
                 int64_t dstOffset, const int64_t *dstStrides, int elemBytes) {
  bool known = withElementWord(elemBytes, [&](auto *word) {
    using Word = std::remove_pointer_t<decltype(word)>;
    if (hasElements(ctx, "stridedCopy", rank, shape))
      stridedCopyImpl(rank, shape, static_cast<const Word *>(src) + srcOffset,
                      srcStrides, static_cast<Word *>(dst) + dstOffset,
                      dstStrides, Same());
  });
  if (!known)
    reportError(ctx, badElementSizeMessage("stridedCopy", elemBytes));
}

void stridedCopyTo16(Context &ctx, Storage16 storage, int rank,
                     const int64_t *shape, const float *src,
                     int64_t srcOffset, const int64_t *srcStrides,
                     uint16_t *dst, int64_t dstOffset,
                     const int64_t *dstStrides) {
  if (!hasElements(ctx, "stridedCopyTo16", rank, shape))
    return;
  if (storage == Storage16::Bf16)
    stridedCopyImpl(rank, shape, src + srcOffset, srcStrides, dst + dstOffset,
                    dstStrides, [](float v) { return floatToBf16(v); });
  else
    stridedCopyImpl(rank, shape, src + srcOffset, srcStrides, dst + dstOffset,
                    dstStrides, [](float v) { return floatToHalf(v); });
}

} // namespace mtc::rt
