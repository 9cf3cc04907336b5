//===- Gather.cu - Gather and its transpose (scatter-add) -----------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The backward must be deterministic, so it uses no atomics: one thread owns
// each (outer, inner) column of ddata and walks the indices in order, adding
// dy's rows into the rows they name. That is O(count * inner) work per
// outer index, and every element of ddata sums its contributions in index
// order, exactly as cpu/Gather.cpp does, so the two agree bit for bit.
//
// A thread's additions form a chain through memory (the next index may name
// the same row), which would cost one memory round trip per index. Indices
// are therefore taken in chunks: all loads of a chunk are issued first, and
// an index repeated inside the chunk continues from its earlier occurrence's
// sum instead of the stale loaded value, which keeps the index-order sum.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

#include <string>

namespace mtc::rt {

namespace {

/// Indices per chunk of the backward (independent loads in flight).
constexpr int kChunk = 8;

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

__global__ void gatherBackwardKernel(int64_t outer, int64_t dim, int64_t inner,
                                     const float *dy, const int64_t *indices,
                                     int64_t count, float *ddata,
                                     cuda::DeviceErrorRecord *errors) {
  for (int64_t column = cuda::threadIndex(); column < outer * inner;
       column += cuda::threadCount()) {
    const int64_t o = column / inner;
    const float *src = dy + o * count * inner + (column - o * inner);
    float *dst = ddata + o * dim * inner + (column - o * inner);
    for (int64_t k0 = 0; k0 < count; k0 += kChunk) {
      int64_t rows[kChunk];
      float add[kChunk], acc[kChunk];
#pragma unroll
      for (int t = 0; t < kChunk; ++t) {
        rows[t] = -1;
        if (k0 + t >= count)
          continue;
        const int64_t index = indices[k0 + t];
        rows[t] = gatherRow(index, dim);
        if (rows[t] < 0 && column == 0)
          cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                                  index, k0 + t, dim, 0);
      }
#pragma unroll
      for (int t = 0; t < kChunk; ++t) {
        if (rows[t] < 0)
          continue;
        add[t] = src[(k0 + t) * inner];
        acc[t] = dst[rows[t] * inner];
      }
#pragma unroll
      for (int t = 0; t < kChunk; ++t) {
        if (rows[t] < 0)
          continue;
        float base = acc[t];
#pragma unroll
        for (int s = 0; s < t; ++s)
          if (rows[s] == rows[t])
            base = acc[s];
        acc[t] = base + add[t];
      }
      // In index order, so the last occurrence of a repeated row, which
      // holds its full sum, is the one that stays.
#pragma unroll
      for (int t = 0; t < kChunk; ++t)
        if (rows[t] >= 0)
          dst[rows[t] * inner] = acc[t];
    }
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
  gatherBackwardKernel<<<cuda::gridFor(outer * inner), cuda::kBlock, 0,
                         ctx.stream>>>(outer, dim, inner, dy, indices, count,
                                       ddata, errors);
  checkLaunch(ctx, "gatherBackwardKernel");
}

} // namespace mtc::rt
