//===- Gather.cpp - Gather and its transpose (scatter-add) ----------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The backward is a scatter-add where several indices may hit the same row
// (repeated tokens of an embedding). Threads split (outer, column block)
// pairs, and each walks all indices in order, so every element of ddata is
// summed by one thread in index order: the result does not depend on the
// thread count and equals the CUDA kernel's, which sums in the same order.
//
// Bad indices are looked for serially first so that the error names the
// first one, whatever the thread count.
//
// gatherBackwardAccumulate (a tied embedding: the gather's gradient added
// to the output projection's) sums each named row in index order into a
// scratch row first, then adds it to base once, which is exactly what
// gatherBackward and an add give, without the [dim, inner] tensor between.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mtc::rt {

namespace {

void reportFirstBadIndex(Context &ctx, int64_t dim, const int64_t *indices,
                         int64_t count) {
  for (int64_t k = 0; k < count; ++k) {
    if (gatherRow(indices[k], dim) >= 0)
      continue;
    reportError(ctx, badGatherIndexMessage(indices[k], k, dim));
    return;
  }
}

/// ddata[o, indices[k], :] += dy[o, k, :] for every k in order (bad indices
/// skipped). Threads split (outer, column block) pairs; column blocks give
/// them work when outer is 1 (an embedding table) while each thread still
/// reads whole cache lines of dy.
void scatterAdd(int64_t outer, int64_t dim, int64_t inner, const float *dy,
                const int64_t *indices, int64_t count, float *ddata) {
  constexpr int64_t block = 64;
  const int64_t blocks = (inner + block - 1) / block;
  const bool parallel = outer * count * inner >= cpu::kParallelGrain;
  cpu::parallelFor(0, outer * blocks, parallel, [&](int64_t task) {
    int64_t o = task / blocks;
    int64_t first = (task % blocks) * block;
    int64_t width = std::min(block, inner - first);
    for (int64_t k = 0; k < count; ++k) {
      int64_t target = gatherRow(indices[k], dim);
      if (target < 0)
        continue;
      const float *src = dy + (o * count + k) * inner + first;
      float *dst = ddata + (o * dim + target) * inner + first;
      for (int64_t j = 0; j < width; ++j)
        dst[j] += src[j];
    }
  });
}

} // namespace

void gatherForward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                   const float *data, const int64_t *indices, int64_t count,
                   float *y) {
  reportFirstBadIndex(ctx, dim, indices, count);
  const int64_t rows = outer * count;
  const bool parallel = rows * inner >= cpu::kParallelGrain;
  cpu::parallelFor(0, rows, parallel, [&](int64_t row) {
    int64_t o = row / count;
    int64_t source = gatherRow(indices[row % count], dim);
    float *dst = y + row * inner;
    if (source < 0) {
      std::fill(dst, dst + inner, 0.0f);
      return;
    }
    std::memcpy(dst, data + (o * dim + source) * inner, sizeof(float) * inner);
  });
}

void gatherBackward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                    const float *dy, const int64_t *indices, int64_t count,
                    float *ddata) {
  reportFirstBadIndex(ctx, dim, indices, count);
  fill(ctx, ddata, outer * dim * inner, 0.0f);
  scatterAdd(outer, dim, inner, dy, indices, count, ddata);
}

void gatherBackwardAccumulate(Context &ctx, int64_t outer, int64_t dim,
                              int64_t inner, const float *dy,
                              const int64_t *indices, int64_t count,
                              const float *base, float *ddata,
                              void *workspace) {
  reportFirstBadIndex(ctx, dim, indices, count);
  GatherAccumulateScratch scratch(workspace, dim, count);
  std::fill(scratch.firstOf, scratch.firstOf + dim, int64_t(-1));
  for (int64_t k = 0; k < count; ++k) {
    int64_t row = gatherRow(indices[k], dim);
    if (row < 0) {
      scratch.slotOf[k] = count;
      continue;
    }
    if (scratch.firstOf[row] < 0)
      scratch.firstOf[row] = k;
    scratch.slotOf[k] = scratch.firstOf[row];
  }
  // Each named row's sum, in index order from +0 as gatherBackward forms
  // it, in the row of its first position.
  fill(ctx, scratch.sums, outer * count * inner, 0.0f);
  scatterAdd(outer, count, inner, dy, scratch.slotOf, count, scratch.sums);
  const bool inPlace = ddata == base;
  const bool parallel = outer * dim * inner >= cpu::kParallelGrain;
  cpu::parallelFor(0, outer * dim, parallel, [&](int64_t r) {
    const int64_t o = r / dim, first = scratch.firstOf[r % dim];
    const float *b = base + r * inner;
    float *d = ddata + r * inner;
    if (first >= 0) {
      const float *s = scratch.sums + (o * count + first) * inner;
      for (int64_t j = 0; j < inner; ++j)
        d[j] = b[j] + s[j];
    } else if (!inPlace) {
      for (int64_t j = 0; j < inner; ++j)
        d[j] = b[j] + 0.0f;
    } else {
      // base + 0 changes only -0 (to +0).
      for (int64_t j = 0; j < inner; ++j)
        if (b[j] == 0.0f && std::signbit(b[j]))
          d[j] = 0.0f;
    }
  });
}

} // namespace mtc::rt
