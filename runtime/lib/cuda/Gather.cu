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
// Scanning every index costs each thread as much as the additions when the
// parts are many (GPT-2's: 64 parts, 8192 indices, 1.4 ms a step on an
// H200). So where the library workspace holds them, each part's positions
// are listed first, in increasing order (one block a part, compacting by
// warp ballots), and a thread walks only its part's list: the same
// additions in the same order, the same bits.
//
// gatherBackwardAccumulate runs the same scatter into a scratch row per
// first position of each named row (found by atomicMin, an order-free
// result), then adds the sums to base in one pass: cpu/Gather.cpp's bits.
//
//===----------------------------------------------------------------------===//

#include "Divisor.h"
#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace mtc::rt {

namespace {

/// Indices per chunk of the backward (independent loads in flight).
constexpr int kChunk = 8;
/// Threads the backward aims for (columns times parts of the rows).
constexpr int64_t kBackwardThreads = 64 * 1024;

/// y[o, k, i] = data[o, indices[k], i]; `inner` and `count` as Divisors
/// of the element and row indices.
__global__ void gatherForwardKernel(int64_t outer, int64_t dim, Divisor inner,
                                    const float *data, const int64_t *indices,
                                    Divisor count, float *y,
                                    cuda::DeviceErrorRecord *errors) {
  const int64_t total = outer * count.value * inner.value;
  for (int64_t at = cuda::threadIndex(); at < total;
       at += cuda::threadCount()) {
    const int64_t row = inner.divide(at);
    const int64_t i = inner.remainder(at, row);
    const int64_t o = count.divide(row);
    const int64_t k = count.remainder(row, o);
    const int64_t source = gatherRow(indices[k], dim);
    if (source < 0) {
      // One report per bad index, not one per element it zeroes.
      if (o == 0 && i == 0)
        cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                                indices[k], k, dim, 0);
      y[at] = 0.0f;
      continue;
    }
    y[at] = data[(o * dim + source) * inner.value + i];
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

/// The positions whose index names a row of each part, in increasing
/// order: part p's are positions[starts[p], starts[p] + sizes[p]).
struct PartLists {
  const int64_t *starts = nullptr, *sizes = nullptr;
  const int32_t *positions = nullptr;
};

/// Thread (part, column) for part in [0, parts), column in [0, outer *
/// inner): the column's rows r with r % parts == part (parts a power of
/// two), from the part's list when there are lists, else from every index
/// (bad ones reported).
__global__ void gatherBackwardKernel(int64_t outer, int64_t dim, int64_t inner,
                                     const float *dy, const int64_t *indices,
                                     int64_t count, int64_t parts,
                                     PartLists lists, float *ddata,
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
    auto visit = [&](int64_t k, int64_t row) {
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
    };
    if (lists.positions) {
      const int32_t *listed = lists.positions + lists.starts[part];
      for (int64_t i = 0, size = lists.sizes[part]; i < size; ++i) {
        const int64_t k = listed[i];
        visit(k, gatherRow(indices[k], dim));
      }
    } else {
      for (int64_t k = 0; k < count; ++k) {
        const int64_t index = indices[k];
        const int64_t row = gatherRow(index, dim);
        if (row < 0) {
          if (at == 0)
            cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                                    index, k, dim, 0);
          continue;
        }
        // parts is a power of two: no 64-bit division per index.
        if ((row & (parts - 1)) == part)
          visit(k, row);
      }
    }
    addChunk(ks, rows, n, inner, src, dst);
  }
}

/// Whether position k's index names a row of `part` (not a bad index).
__device__ inline bool namesPart(const int64_t *indices, int64_t k, int64_t dim,
                                 int64_t parts, int64_t part) {
  const int64_t row = gatherRow(indices[k], dim);
  return row >= 0 && (row & (parts - 1)) == part;
}

/// sizes[p] = how many positions name a row of part p (block p); block 0
/// reports the bad indices.
__global__ void __launch_bounds__(cuda::kBlock)
    gatherPartSizesKernel(int64_t dim, const int64_t *indices, int64_t count,
                          int64_t parts, int64_t *sizes,
                          cuda::DeviceErrorRecord *errors) {
  const int64_t part = blockIdx.x;
  int64_t total = 0;
  for (int64_t base = 0; base < count; base += blockDim.x) {
    const int64_t k = base + threadIdx.x;
    bool named = false;
    if (k < count) {
      named = namesPart(indices, k, dim, parts, part);
      if (part == 0 && errors && gatherRow(indices[k], dim) < 0)
        cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                                indices[k], k, dim, 0);
    }
    total += __syncthreads_count(named);
  }
  if (threadIdx.x == 0)
    sizes[part] = total;
}

/// Part p's list (block p): its start after the sizes of the parts before
/// it, then its positions in increasing order, a block of them at a time,
/// each placed by its warp's ballot and the counts of the warps before.
__global__ void __launch_bounds__(cuda::kBlock)
    gatherPartListsKernel(int64_t dim, const int64_t *indices, int64_t count,
                          int64_t parts, const int64_t *sizes, int64_t *starts,
                          int32_t *positions) {
  constexpr int kWarps = cuda::kBlock / 32;
  __shared__ int64_t partial[cuda::kBlock];
  __shared__ int warpCounts[kWarps];
  const int64_t part = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t before = 0;
  for (int64_t q = threadIdx.x; q < part; q += blockDim.x)
    before += sizes[q];
  partial[threadIdx.x] = before;
  __syncthreads();
  int64_t next = 0; // where the block's next listed position goes
  for (int t = 0; t < cuda::kBlock; ++t)
    next += partial[t];
  if (threadIdx.x == 0)
    starts[part] = next;
  for (int64_t base = 0; base < count; base += blockDim.x) {
    const int64_t k = base + threadIdx.x;
    const bool named = k < count && namesPart(indices, k, dim, parts, part);
    const unsigned ballot = __ballot_sync(0xffffffffu, named);
    if (lane == 0)
      warpCounts[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      offset += w < warp ? warpCounts[w] : 0;
      total += warpCounts[w];
    }
    if (named)
      positions[next + offset + __popc(ballot & ((1u << lane) - 1u))] =
          static_cast<int32_t>(k);
    next += total;
    __syncthreads(); // warpCounts is rewritten next round
  }
}

/// firstOf[row] = the first position whose index names row, by atomicMin
/// over firstOf set to all ones (-1 as int64_t: none): the same value in
/// whatever order the threads run.
__global__ void gatherFirstKernel(int64_t dim, const int64_t *indices,
                                  int64_t count, unsigned long long *firstOf,
                                  cuda::DeviceErrorRecord *errors) {
  for (int64_t k = cuda::threadIndex(); k < count; k += cuda::threadCount()) {
    const int64_t row = gatherRow(indices[k], dim);
    if (row < 0) {
      cuda::recordDeviceError(errors, cuda::DeviceErrorKind::GatherIndex,
                              indices[k], k, dim, 0);
      continue;
    }
    atomicMin(firstOf + row, static_cast<unsigned long long>(k));
  }
}

/// slotOf[k] = the first position naming the row k names, or count (a row
/// a scatter over count rows skips) for a bad index.
__global__ void gatherSlotKernel(int64_t dim, const int64_t *indices,
                                 int64_t count, const int64_t *firstOf,
                                 int64_t *slotOf) {
  for (int64_t k = cuda::threadIndex(); k < count; k += cuda::threadCount()) {
    const int64_t row = gatherRow(indices[k], dim);
    slotOf[k] = row < 0 ? count : firstOf[row];
  }
}

/// ddata = base + the sum of each named row (in the row of its first
/// position), base + 0 elsewhere; in place, only the elements whose bits
/// that changes are written.
__global__ void gatherAddSumsKernel(int64_t outer, int64_t dim, int64_t inner,
                                    int64_t count, const int64_t *firstOf,
                                    const float *sums, const float *base,
                                    float *ddata) {
  const int64_t total = outer * dim * inner;
  const bool inPlace = ddata == base;
  for (int64_t at = cuda::threadIndex(); at < total;
       at += cuda::threadCount()) {
    const int64_t row = at / inner, j = at - row * inner;
    const int64_t o = row / dim, first = firstOf[row - o * dim];
    const float b = base[at];
    if (first >= 0)
      ddata[at] = b + sums[(o * count + first) * inner + j];
    else if (!inPlace)
      ddata[at] = b + 0.0f;
    else if (b == 0.0f && signbit(b))
      ddata[at] = 0.0f;
  }
}

/// Most parts times indices the lists are made for (each part's block
/// reads every index once).
constexpr int64_t kMostListScans = int64_t(1) << 26;

/// Each part's list of positions in the library workspace (free between
/// GEMMs), bad indices reported; no lists (the scatter then scans every
/// index itself) for one part, or where the workspace cannot hold them.
PartLists listParts(Context &ctx, int64_t dim, const int64_t *indices,
                    int64_t count, int64_t parts,
                    cuda::DeviceErrorRecord *errors) {
  const size_t counters = sizeof(int64_t) * static_cast<size_t>(parts);
  const size_t bytes =
      2 * counters + sizeof(int32_t) * static_cast<size_t>(count);
  if (parts == 1 || count > std::numeric_limits<int32_t>::max() ||
      parts * count > kMostListScans || !ctx.ltWorkspace ||
      bytes > ctx.ltWorkspaceBytes)
    return {};
  auto *base = static_cast<unsigned char *>(ctx.ltWorkspace);
  auto *sizes = reinterpret_cast<int64_t *>(base);
  auto *starts = reinterpret_cast<int64_t *>(base + counters);
  auto *positions = reinterpret_cast<int32_t *>(base + 2 * counters);
  gatherPartSizesKernel<<<static_cast<unsigned>(parts), cuda::kBlock, 0,
                          ctx.stream>>>(dim, indices, count, parts, sizes,
                                        errors);
  checkLaunch(ctx, "gatherPartSizesKernel");
  gatherPartListsKernel<<<static_cast<unsigned>(parts), cuda::kBlock, 0,
                          ctx.stream>>>(dim, indices, count, parts, sizes,
                                        starts, positions);
  checkLaunch(ctx, "gatherPartListsKernel");
  return {starts, sizes, positions};
}

/// gatherBackwardKernel's launch: parts of the rows, so that columns *
/// parts threads fill the GPU; a power of two, never more than there are
/// rows.
void launchScatter(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                   const float *dy, const int64_t *indices, int64_t count,
                   float *ddata, cuda::DeviceErrorRecord *errors) {
  const int64_t columns = outer * inner;
  const int64_t most = std::min(dim, kBackwardThreads / columns);
  int64_t parts = 1;
  while (parts * 2 <= most)
    parts *= 2;
  const PartLists lists = listParts(ctx, dim, indices, count, parts, errors);
  gatherBackwardKernel<<<cuda::gridFor(columns * parts), cuda::kBlock, 0,
                         ctx.stream>>>(outer, dim, inner, dy, indices, count,
                                       parts, lists, ddata,
                                       lists.positions ? nullptr : errors);
  checkLaunch(ctx, "gatherBackwardKernel");
}

/// cudaMemsetAsync on the context's stream; false (reported) on failure.
bool memsetOn(Context &ctx, void *p, int value, size_t bytes,
              const char *what) {
  cudaError_t error = cudaMemsetAsync(p, value, bytes, ctx.stream);
  if (error == cudaSuccess)
    return true;
  reportError(ctx, std::string(what) + ": " + cudaGetErrorString(error));
  return false;
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
      outer, dim, makeDivisor(inner, total), data, indices,
      makeDivisor(count, outer * count), y, errors);
  checkLaunch(ctx, "gatherForwardKernel");
}

void gatherBackward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                    const float *dy, const int64_t *indices, int64_t count,
                    float *ddata) {
  const int64_t size = outer * dim * inner;
  if (size <= 0 ||
      !memsetOn(ctx, ddata, 0, sizeof(float) * static_cast<size_t>(size),
                "gatherBackward"))
    return;
  if (count > 0)
    launchScatter(ctx, outer, dim, inner, dy, indices, count, ddata,
                  cuda::deviceErrorRecord(ctx));
}

void gatherBackwardAccumulate(Context &ctx, int64_t outer, int64_t dim,
                              int64_t inner, const float *dy,
                              const int64_t *indices, int64_t count,
                              const float *base, float *ddata,
                              void *workspace) {
  const int64_t size = outer * dim * inner;
  if (size <= 0)
    return;
  GatherAccumulateScratch scratch(workspace, dim, count);
  if (!memsetOn(ctx, scratch.firstOf, 0xff,
                sizeof(int64_t) * static_cast<size_t>(dim),
                "gatherBackwardAccumulate"))
    return;
  if (count > 0) {
    gatherFirstKernel<<<cuda::gridFor(count), cuda::kBlock, 0, ctx.stream>>>(
        dim, indices, count,
        reinterpret_cast<unsigned long long *>(scratch.firstOf),
        cuda::deviceErrorRecord(ctx));
    checkLaunch(ctx, "gatherFirstKernel");
    gatherSlotKernel<<<cuda::gridFor(count), cuda::kBlock, 0, ctx.stream>>>(
        dim, indices, count, scratch.firstOf, scratch.slotOf);
    checkLaunch(ctx, "gatherSlotKernel");
    // Each named row's sum, in index order from +0 as gatherBackward forms
    // it, in the row of its first position (bad indices were reported).
    if (!memsetOn(ctx, scratch.sums, 0,
                  sizeof(float) * static_cast<size_t>(outer * count * inner),
                  "gatherBackwardAccumulate"))
      return;
    launchScatter(ctx, outer, count, inner, dy, scratch.slotOf, count,
                  scratch.sums, nullptr);
  }
  gatherAddSumsKernel<<<cuda::gridFor(size), cuda::kBlock, 0, ctx.stream>>>(
      outer, dim, inner, count, scratch.firstOf, scratch.sums, base, ddata);
  checkLaunch(ctx, "gatherAddSumsKernel");
}

} // namespace mtc::rt
