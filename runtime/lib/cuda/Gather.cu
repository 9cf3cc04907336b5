//===- Gather.cu - Gather and its transpose (scatter-add) -----------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The backward must be deterministic, so it uses no atomics: one thread owns
// each (outer, inner) column of ddata within one part of its rows (row %
// parts), walks the indices in order and adds dy's rows into the rows of
// its part they name. Every element of ddata sums its contributions in
// index order, exactly as cpu/Gather.cpp does, so the two agree bit for
// bit. The parts give the GPU enough threads when there are few columns
// (GPT-2's token embedding: 768 columns, 8192 indices): each thread reads
// every index (the same for a whole warp, from the cache) but adds only
// the 1/parts of them that name its rows.
//
// A thread's additions form a chain through memory (the next index may name
// the same row), which would cost one memory round trip per index. Indices
// are therefore taken in chunks of those that name its rows: all loads of
// a chunk are issued first, and an index repeated inside the chunk
// continues from its earlier occurrence's sum instead of the stale loaded
// value, which keeps the index-order sum.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <string>

namespace mtc::rt {

namespace {

/// Indices per chunk of the backward (independent loads in flight).
constexpr int kChunk = 8;
/// Threads the backward aims for (columns times parts of the rows).
constexpr int64_t kBackwardThreads = 64 * 1024;

__global__ void gatherForwardKernel(int64_t outer, int64_t dim, int64_t inner,
                                    const float *data, const int64_t *indices,
                                    int64_t count, float *y,
                                    cuda::DeviceErrorRecord *errors) {
  const int64_t total = outer * count * inner;
  for (int64_t at = cuda::threadIndex(); at < total;
       at += cuda::threadCount()) {
    const int64_t row = at / inner;
    const int64_t i = at - row * inner;
    const int64_t k = row % count;
    const int64_t o = row / count;
    const int64_t source = gatherRow(indices[k], dim);
    if (source < 0) {
      // One report per bad index, not one per element it zeroes.
      if (o == 0 && i == 0)
        cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                                indices[k], k, dim, 0);
      y[at] = 0.0f;
      continue;
    }
    y[at] = data[(o * dim + source) * inner + i];
  }
}

/// Adds the chunk's dy rows (ks, rows; n of them, in index order) into
/// dst's rows.
__device__ inline void addChunk(const int64_t (&ks)[kChunk],
                                const int64_t (&rows)[kChunk], int n,
                                int64_t inner, const float *src, float *dst) {
  float add[kChunk], acc[kChunk];
#pragma unroll
  for (int t = 0; t < kChunk; ++t)
    if (t < n) {
      add[t] = src[ks[t] * inner];
      acc[t] = dst[rows[t] * inner];
    }
#pragma unroll
  for (int t = 0; t < kChunk; ++t) {
    if (t >= n)
      continue;
    float base = acc[t];
#pragma unroll
    for (int s = 0; s < t; ++s)
      if (rows[s] == rows[t])
        base = acc[s];
    acc[t] = base + add[t];
  }
  // In index order, so the last occurrence of a repeated row, which holds
  // its full sum, is the one that stays.
#pragma unroll
  for (int t = 0; t < kChunk; ++t)
    if (t < n)
      dst[rows[t] * inner] = acc[t];
}

/// Thread (part, column) for part in [0, parts), column in [0, outer *
/// inner): the column's rows r with r % parts == part.
__global__ void gatherBackwardKernel(int64_t outer, int64_t dim, int64_t inner,
                                     const float *dy, const int64_t *indices,
                                     int64_t count, int64_t parts,
                                     float *ddata,
                                     cuda::DeviceErrorRecord *errors) {
  const int64_t columns = outer * inner;
  for (int64_t at = cuda::threadIndex(); at < columns * parts;
       at += cuda::threadCount()) {
    const int64_t part = at / columns, column = at - part * columns;
    const int64_t o = column / inner;
    const float *src = dy + o * count * inner + (column - o * inner);
    float *dst = ddata + o * dim * inner + (column - o * inner);
    int64_t ks[kChunk], rows[kChunk];
    int n = 0;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t index = indices[k];
      const int64_t row = gatherRow(index, dim);
      if (row < 0) {
        if (at == 0)
          cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                                  index, k, dim, 0);
        continue;
      }
      if (row % parts != part)
        continue;
      // Unrolled, so that the chunk stays in registers.
#pragma unroll
      for (int t = 0; t < kChunk; ++t)
        if (t == n) {
          ks[t] = k;
          rows[t] = row;
        }
      if (++n == kChunk) {
        addChunk(ks, rows, n, inner, src, dst);
        n = 0;
      }
    }
    addChunk(ks, rows, n, inner, src, dst);
  }
}

} // namespace

void gatherForward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                   const float *data, const int64_t *indices, int64_t count,
                   float *y) {
  const int64_t total = outer * count * inner;
  if (total <= 0)
    return;
  cuda::DeviceErrorRecord *errors = cuda::deviceErrorRecord(ctx);
  gatherForwardKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
      outer, dim, inner, data, indices, count, y, errors);
  checkLaunch(ctx, "gatherForwardKernel");
}

void gatherBackward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                    const float *dy, const int64_t *indices, int64_t count,
                    float *ddata) {
  const int64_t size = outer * dim * inner;
  if (size <= 0)
    return;
  cudaError_t error = cudaMemsetAsync(
      ddata, 0, sizeof(float) * static_cast<size_t>(size), ctx.stream);
  if (error != cudaSuccess) {
    reportError(ctx,
                std::string("gatherBackward: ") + cudaGetErrorString(error));
    return;
  }
  if (count <= 0)
    return;
  cuda::DeviceErrorRecord *errors = cuda::deviceErrorRecord(ctx);
  // Parts of the rows, so that columns * parts threads fill the GPU; never
  // more than there are rows.
  const int64_t columns = outer * inner;
  const int64_t parts =
      std::max<int64_t>(1, std::min(dim, kBackwardThreads / columns));
  gatherBackwardKernel<<<cuda::gridFor(columns * parts), cuda::kBlock, 0,
                         ctx.stream>>>(outer, dim, inner, dy, indices, count,
                                       parts, ddata, errors);
  checkLaunch(ctx, "gatherBackwardKernel");
}

} // namespace mtc::rt
