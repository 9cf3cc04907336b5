//===- Attention.cu - Fused attention without the score matrix ------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Mirrors cpu/Attention.cpp (same math, same dropout mask) with fp32 math on
// the CUDA cores. Every kernel runs blocks of kWarps warps; a block owns a
// tile of rows of one head, each warp rowsPerWarp(kT) of them, and streams the
// other side of the score matrix through shared memory kChunk rows at a
// time, lane l owning row l of the chunk:
//
//  - forward, one block per (head, query tile): lane l computes the score of
//    key l against each of its warp's queries (a full dot product), the warp
//    reduces the chunk's maximum and sum by shuffles (online softmax), then
//    the probabilities are broadcast lane by lane and the output rows, split
//    over the lanes along dv, accumulate p * v.
//  - backward dQ, one block per (head, query tile): the same walk over the
//    keys, recomputing P from the saved log-sum-exp, dp = dO . v_j and dS;
//    dQ rows accumulate dS * k_j.
//  - backward dK/dV, one block per (head, key tile): lane l owns query l of a
//    chunk of queries; dK and dV rows accumulate dS * q_i and P * dO_i.
//
// No atomics and no workspace: every output element is summed by one thread
// in increasing key (or query) order, and warp reductions are fixed
// butterflies whose result is the same bits in every lane, so results are
// reproducible run to run. The chunk buffer holds the K chunk and then the V
// chunk (or Q and dO) in turn, which keeps shared memory at or under
// 57,472 bytes for head dims up to 256 (Turing allows 64 KB per block).
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
/// Rows of the streamed side per step: one per lane.
constexpr int kChunk = 32;
constexpr int64_t kMaxHeadDim = 256;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
/// Dynamic shared memory a kernel may use without opting in.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

/// Rows of the block's own side per warp for kT 32-wide accumulator slices:
/// fewer when the head dims are large, to stay within shared memory.
__host__ __device__ constexpr int rowsPerWarp(int kT) {
  return kT <= 4 ? 4 : 2;
}

/// Forward tiles always have 4 rows per warp: their shared memory is the
/// query tile and one chunk.
constexpr int kForwardRows = 4;

/// Rows in [start, min(total, start + cap)): the valid rows of a tile.
__device__ inline int countFrom(int64_t total, int64_t start, int cap) {
  const int64_t left = total - start;
  return left < cap ? static_cast<int>(left) : cap;
}

__device__ inline float warpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

/// Every lane gets the same bits: each butterfly step adds the same two
/// values in either order.
__device__ inline float warpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

/// Copies `valid` rows of `width` contiguous floats from src into
/// dst[row * ld + x] and zeroes rows [valid, rows), so that no lane ever
/// reads stale or uninitialized values. Called by the whole block.
__device__ void stageRows(float *dst, int ld, const float *src, int valid,
                          int rows, int width) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int r = warp; r < rows; r += kWarps) {
    float *to = dst + r * ld;
    if (r < valid) {
      const float *from = src + static_cast<int64_t>(r) * width;
      for (int x = lane; x < width; x += 32)
        to[x] = from[x];
    } else {
      for (int x = lane; x < width; x += 32)
        to[x] = 0.0f;
    }
  }
}

/// dot[r] = sum_x rows[r * ldRows + x] * mine[x] over x < n: this lane's row
/// of the chunk against R rows every lane reads (broadcast).
template <int R>
__device__ inline void dotRows(const float *mine, const float *rows, int ldRows,
                               int n, float (&dot)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
    dot[r] = 0.0f;
#pragma unroll 4
  for (int x = 0; x < n; ++x) {
    const float m = mine[x];
#pragma unroll
    for (int r = 0; r < R; ++r)
      dot[r] = fmaf(rows[r * ldRows + x], m, dot[r]);
  }
}

/// acc[r][t] += (w[r] of lane c) * factor * chunk[c * ld + x] for chunk rows
/// c < count, in increasing c, where x = lane + 32 t < width. A zero weight
/// adds nothing (even to an infinite value), as on the CPU. Every lane must
/// call this with the same count.
template <int R, int kT>
__device__ inline void accumulateRows(const float (&w)[R], float factor,
                                      const float *chunk, int ld, int count,
                                      int width, float (&acc)[R][kT]) {
  const int lane = threadIdx.x % 32;
  for (int c = 0; c < count; ++c) {
    const float *row = chunk + c * ld;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // The shuffle makes p the same in every lane: the branch is uniform.
      const float p = __shfl_sync(kFullMask, w[r], c) * factor;
      if (p == 0.0f)
        continue;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int x = lane + 32 * t;
        if (x < width)
          acc[r][t] = fmaf(p, row[x], acc[r][t]);
      }
    }
  }
}

/// Whether score (i, j) of head h is masked out by the optional mask.
__device__ inline bool maskedOut(const AttentionDims &a,
                                 const unsigned char *maskHead, int64_t i,
                                 int64_t j) {
  return maskHead && maskHead[i * a.maskRowStride + j * a.maskColStride] != 0;
}

/// The dropout factor of probability (h, i, j): 1 without dropout, else 0
/// or 1 / (1 - ratio), from the generator words dropoutForward would draw.
__device__ inline float dropFactor(const DropoutParams &drop, bool dropout,
                                   const AttentionDims &a, int64_t h, int64_t i,
                                   int64_t j) {
  if (!dropout)
    return 1.0f;
  return attentionKeep(drop, a, h, i, j) ? drop.scale : 0.0f;
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Shared memory: the query tile [kForwardRows * kWarps][d], then the chunk
/// buffer [kChunk][ld] holding K rows, then V rows.
template <int kT>
__global__ void __launch_bounds__(kThreads)
    attentionForwardKernel(AttentionDims a, const float *q, const float *k,
                           const float *v, const unsigned char *mask,
                           DropoutParams drop,
                           const StepCounters *counters, bool dropout,
                           int ld, float *out,
                           float *lse) {
  constexpr int R = kForwardRows;
  constexpr int kTile = R * kWarps;
  extern __shared__ float smem[];
  drop.step = static_cast<uint64_t>(counters->step); // this step's mask
  const int d = static_cast<int>(a.d), dv = static_cast<int>(a.dv);
  float *qs = smem;
  float *chunk = smem + kTile * d;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tilesPerHead = (a.sq + kTile - 1) / kTile;

  for (int64_t tile = blockIdx.x; tile < a.batch * tilesPerHead;
       tile += gridDim.x) {
    const int64_t h = tile / tilesPerHead;
    const int64_t i0 = (tile % tilesPerHead) * kTile;
    const int rows = countFrom(a.sq, i0, kTile);
    const unsigned char *maskHead =
        mask ? mask + attentionMaskOffset(a, h) : nullptr;
    // The previous tile's readers of the shared buffers are done.
    __syncthreads();
    stageRows(qs, d, q + (h * a.sq + i0) * a.d, rows, kTile, d);

    float rowMax[R], rowSum[R], acc[R][kT];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      rowMax[r] = kNegInf;
      rowSum[r] = 0.0f;
#pragma unroll
      for (int t = 0; t < kT; ++t)
        acc[r][t] = 0.0f;
    }

    for (int64_t j0 = 0; j0 < a.sk; j0 += kChunk) {
      const int cols = countFrom(a.sk, j0, kChunk);
      const int64_t j = j0 + lane;
      __syncthreads(); // the V chunk's readers are done (and qs is written)
      stageRows(chunk, ld, k + (h * a.sk + j0) * a.d, cols, kChunk, d);
      __syncthreads();
      float s[R];
      dotRows<R>(chunk + lane * ld, qs + warp * R * d, d, d, s);

      float w[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = warp * R + r;
        const int64_t i = i0 + row;
        const bool live =
            lane < cols && row < rows && !maskedOut(a, maskHead, i, j);
        const float score = live ? s[r] * a.scale : kNegInf;
        // Uniform across the warp: the reductions give every lane the
        // same value.
        const float m = fmaxf(rowMax[r], warpMax(score));
        // m == -inf: every key so far is masked; nothing to rescale.
        const float rescale = m == kNegInf ? 1.0f : expf(rowMax[r] - m);
        const float e = m == kNegInf ? 0.0f : expf(score - m);
        rowSum[r] = rowSum[r] * rescale + warpSum(e);
        rowMax[r] = m;
#pragma unroll
        for (int t = 0; t < kT; ++t)
          acc[r][t] *= rescale;
        w[r] = live ? e * dropFactor(drop, dropout, a, h, i, j) : 0.0f;
      }

      __syncthreads(); // everyone is done with the K chunk
      stageRows(chunk, ld, v + (h * a.sk + j0) * a.dv, cols, kChunk, dv);
      __syncthreads();
      accumulateRows<R, kT>(w, 1.0f, chunk, ld, cols, dv, acc);
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * R + r;
      if (row >= rows)
        continue;
      const int64_t i = i0 + row;
      float *o = out + (h * a.sq + i) * a.dv;
      const bool empty = rowSum[r] == 0.0f; // every key masked
      const float inv = empty ? 0.0f : 1.0f / rowSum[r];
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int x = lane + 32 * t;
        if (x < dv)
          o[x] = empty ? 0.0f : acc[r][t] * inv;
      }
      if (lane == 0)
        lse[h * a.sq + i] = empty ? kNegInf : rowMax[r] + logf(rowSum[r]);
    }
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// dQ_i = scale * sum_j dS_ij k_j. Shared memory: the query tile
/// [kTile][d], the output gradient tile [kTile][dv], then the chunk buffer
/// [kChunk][ld] holding V rows (for dp), then K rows (for s and dQ).
template <int kT>
__global__ void __launch_bounds__(kThreads)
    attentionDqKernel(AttentionDims a, const float *q, const float *k,
                      const float *v, const unsigned char *mask,
                      const float *out, const float *lse, const float *dout,
                      DropoutParams drop,
                           const StepCounters *counters, bool dropout,
                           int ld, float *dq) {
  constexpr int R = rowsPerWarp(kT);
  constexpr int kTile = R * kWarps;
  extern __shared__ float smem[];
  drop.step = static_cast<uint64_t>(counters->step); // this step's mask
  const int d = static_cast<int>(a.d), dv = static_cast<int>(a.dv);
  float *qs = smem;
  float *gs = qs + kTile * d;
  float *chunk = gs + kTile * dv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tilesPerHead = (a.sq + kTile - 1) / kTile;

  for (int64_t tile = blockIdx.x; tile < a.batch * tilesPerHead;
       tile += gridDim.x) {
    const int64_t h = tile / tilesPerHead;
    const int64_t i0 = (tile % tilesPerHead) * kTile;
    const int rows = countFrom(a.sq, i0, kTile);
    const unsigned char *maskHead =
        mask ? mask + attentionMaskOffset(a, h) : nullptr;
    __syncthreads(); // the previous tile's readers of qs and gs are done
    stageRows(qs, d, q + (h * a.sq + i0) * a.d, rows, kTile, d);
    stageRows(gs, dv, dout + (h * a.sq + i0) * a.dv, rows, kTile, dv);

    // delta_i = dO_i . O_i and the log-sum-exp of this warp's rows.
    float delta[R], rowLse[R], acc[R][kT];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * R + r;
      const int64_t base = (h * a.sq + i0 + row) * a.dv;
      float part = 0.0f;
      if (row < rows)
        for (int x = lane; x < dv; x += 32)
          part = fmaf(dout[base + x], out[base + x], part);
      delta[r] = warpSum(part);
      rowLse[r] = row < rows ? lse[h * a.sq + i0 + row] : kNegInf;
#pragma unroll
      for (int t = 0; t < kT; ++t)
        acc[r][t] = 0.0f;
    }

    for (int64_t j0 = 0; j0 < a.sk; j0 += kChunk) {
      const int cols = countFrom(a.sk, j0, kChunk);
      const int64_t j = j0 + lane;
      __syncthreads(); // the K chunk's readers are done (and qs, gs written)
      stageRows(chunk, ld, v + (h * a.sk + j0) * a.dv, cols, kChunk, dv);
      __syncthreads();
      float dp[R];
      dotRows<R>(chunk + lane * ld, gs + warp * R * dv, dv, dv, dp);

      __syncthreads(); // everyone is done with the V chunk
      stageRows(chunk, ld, k + (h * a.sk + j0) * a.d, cols, kChunk, d);
      __syncthreads();
      float s[R];
      dotRows<R>(chunk + lane * ld, qs + warp * R * d, d, d, s);

      float ds[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = warp * R + r;
        const int64_t i = i0 + row;
        const bool live = lane < cols && row < rows && rowLse[r] != kNegInf &&
                          !maskedOut(a, maskHead, i, j);
        ds[r] = 0.0f;
        if (live) {
          const float p = expf(s[r] * a.scale - rowLse[r]);
          const float f = dropFactor(drop, dropout, a, h, i, j);
          ds[r] = p * (dp[r] * f - delta[r]);
        }
      }
      accumulateRows<R, kT>(ds, a.scale, chunk, ld, cols, d, acc);
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = warp * R + r;
      if (row >= rows)
        continue;
      float *g = dq + (h * a.sq + i0 + row) * a.d;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int x = lane + 32 * t;
        if (x < d)
          g[x] = acc[r][t];
      }
    }
  }
}

/// dK_j = scale * sum_i dS_ij q_i and dV_j = sum_i dropped(P)_ij dO_i.
/// Shared memory: the key tile [kTile][d], the value tile [kTile][dv], the
/// chunk buffer [kChunk][ld] (dO rows for dp, Q rows for s and dK, dO rows
/// again for dV), then the chunk's log-sum-exp and delta [kChunk] each.
template <int kT>
__global__ void __launch_bounds__(kThreads)
    attentionDkvKernel(AttentionDims a, const float *q, const float *k,
                       const float *v, const unsigned char *mask,
                       const float *out, const float *lse, const float *dout,
                       DropoutParams drop,
                           const StepCounters *counters, bool dropout,
                           int ld, float *dk,
                       float *dv) {
  constexpr int R = rowsPerWarp(kT);
  constexpr int kTile = R * kWarps;
  extern __shared__ float smem[];
  drop.step = static_cast<uint64_t>(counters->step); // this step's mask
  const int d = static_cast<int>(a.d), dvDim = static_cast<int>(a.dv);
  float *ks = smem;
  float *vs = ks + kTile * d;
  float *chunk = vs + kTile * dvDim;
  float *lseChunk = chunk + kChunk * ld;
  float *deltaChunk = lseChunk + kChunk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tilesPerHead = (a.sk + kTile - 1) / kTile;

  for (int64_t tile = blockIdx.x; tile < a.batch * tilesPerHead;
       tile += gridDim.x) {
    const int64_t h = tile / tilesPerHead;
    const int64_t j0 = (tile % tilesPerHead) * kTile;
    const int cols = countFrom(a.sk, j0, kTile);
    const unsigned char *maskHead =
        mask ? mask + attentionMaskOffset(a, h) : nullptr;
    __syncthreads(); // the previous tile's readers of ks and vs are done
    stageRows(ks, d, k + (h * a.sk + j0) * a.d, cols, kTile, d);
    stageRows(vs, dvDim, v + (h * a.sk + j0) * a.dv, cols, kTile, dvDim);

    float accK[R][kT], accV[R][kT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        accK[r][t] = 0.0f;
        accV[r][t] = 0.0f;
      }

    for (int64_t i0 = 0; i0 < a.sq; i0 += kChunk) {
      const int rows = countFrom(a.sq, i0, kChunk);
      const int64_t i = i0 + lane;
      __syncthreads(); // the dO chunk's readers are done (and ks, vs written)
      stageRows(chunk, ld, dout + (h * a.sq + i0) * a.dv, rows, kChunk, dvDim);
      // Warp w forms delta and fetches lse for queries w, w + kWarps, ...
      for (int c = warp; c < kChunk; c += kWarps) {
        const int64_t base = (h * a.sq + i0 + c) * a.dv;
        float part = 0.0f;
        if (c < rows)
          for (int x = lane; x < dvDim; x += 32)
            part = fmaf(dout[base + x], out[base + x], part);
        const float sum = warpSum(part);
        if (lane == 0) {
          deltaChunk[c] = sum;
          lseChunk[c] = c < rows ? lse[h * a.sq + i0 + c] : kNegInf;
        }
      }
      __syncthreads();
      float dp[R];
      dotRows<R>(chunk + lane * ld, vs + warp * R * dvDim, dvDim, dvDim, dp);
      const float myLse = lseChunk[lane], myDelta = deltaChunk[lane];

      __syncthreads(); // everyone is done with the dO chunk
      stageRows(chunk, ld, q + (h * a.sq + i0) * a.d, rows, kChunk, d);
      __syncthreads();
      float s[R];
      dotRows<R>(chunk + lane * ld, ks + warp * R * d, d, d, s);

      float ds[R], dropped[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int col = warp * R + r;
        const int64_t j = j0 + col;
        const bool live = lane < rows && col < cols && myLse != kNegInf &&
                          !maskedOut(a, maskHead, i, j);
        ds[r] = 0.0f;
        dropped[r] = 0.0f;
        if (live) {
          const float p = expf(s[r] * a.scale - myLse);
          const float f = dropFactor(drop, dropout, a, h, i, j);
          ds[r] = p * (dp[r] * f - myDelta);
          dropped[r] = p * f;
        }
      }
      accumulateRows<R, kT>(ds, a.scale, chunk, ld, rows, d, accK);

      __syncthreads(); // everyone is done with the Q chunk
      stageRows(chunk, ld, dout + (h * a.sq + i0) * a.dv, rows, kChunk, dvDim);
      __syncthreads();
      accumulateRows<R, kT>(dropped, 1.0f, chunk, ld, rows, dvDim, accV);
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int col = warp * R + r;
      if (col >= cols)
        continue;
      float *gk = dk + (h * a.sk + j0 + col) * a.d;
      float *gv = dv + (h * a.sk + j0 + col) * a.dv;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int x = lane + 32 * t;
        if (x < d)
          gk[x] = accK[r][t];
        if (x < dvDim)
          gv[x] = accV[r][t];
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

bool checkDims(Context &ctx, const AttentionDims &a) {
  if (a.d > kMaxHeadDim || a.dv > kMaxHeadDim) {
    reportError(ctx, "attention head dims above " +
                         std::to_string(kMaxHeadDim) + " are not supported");
    return false;
  }
  if (dropoutMode(a.dropout) == DropoutMode::Invalid) {
    reportError(ctx, badDropoutRatioMessage(a.dropout));
    return false;
  }
  return a.batch > 0 && a.sq > 0 && a.sk > 0 && a.d >= 0 && a.dv >= 0;
}

/// 32-wide accumulator slices for a head dim, rounded up to a power of two
/// so that only four instances of each kernel exist.
int slices(int64_t dim) {
  const int64_t n = (dim + 31) / 32;
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8;
}

/// The chunk buffer's row stride: odd, so that lane l reading row l at the
/// same column hits 32 different banks.
int chunkStride(const AttentionDims &a) {
  return static_cast<int>(std::max(a.d | 1, a.dv | 1));
}

/// Opts the kernel into `bytes` of dynamic shared memory when that is more
/// than the default allows. Each kernel instance asks once per size it
/// grows to, so a step being captured into a CUDA graph (which ran eagerly
/// before) sets no attribute.
template <auto kernel>
bool allowSharedBytes(Context &ctx, size_t bytes, const char *name) {
  static size_t granted = kDefaultSharedBytes; // per kernel
  if (bytes <= granted)
    return true;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
  if (error == cudaSuccess) {
    granted = bytes;
    return true;
  }
  reportError(ctx, std::string(name) + ": cannot use " + std::to_string(bytes) +
                       " bytes of shared memory: " + cudaGetErrorString(error));
  return false;
}

template <int kT>
void launchForward(Context &ctx, const AttentionDims &a, const float *q,
                   const float *k, const float *v, const unsigned char *mask,
                   const DropoutParams &drop, bool dropout, float *out,
                   float *lse) {
  constexpr int kTile = kForwardRows * kWarps;
  const int ld = chunkStride(a);
  const size_t bytes = sizeof(float) * (kTile * a.d + kChunk * ld);
  auto kernel = attentionForwardKernel<kT>;
  if (!allowSharedBytes<attentionForwardKernel<kT>>(ctx, bytes, "attentionForwardKernel"))
    return;
  const int64_t tiles = a.batch * ((a.sq + kTile - 1) / kTile);
  kernel<<<cuda::gridFor(tiles, 1), kThreads, bytes, ctx.stream>>>(
      a, q, k, v, mask, drop, cuda::stepCounters(ctx), dropout, ld, out, lse);
  checkLaunch(ctx, "attentionForwardKernel");
}

template <int kT>
void launchDq(Context &ctx, const AttentionDims &a, const float *q,
              const float *k, const float *v, const unsigned char *mask,
              const float *out, const float *lse, const float *dout,
              const DropoutParams &drop, bool dropout, float *dq) {
  constexpr int kTile = rowsPerWarp(kT) * kWarps;
  const int ld = chunkStride(a);
  const size_t bytes = sizeof(float) * (kTile * (a.d + a.dv) + kChunk * ld);
  auto kernel = attentionDqKernel<kT>;
  if (!allowSharedBytes<attentionDqKernel<kT>>(ctx, bytes, "attentionDqKernel"))
    return;
  const int64_t tiles = a.batch * ((a.sq + kTile - 1) / kTile);
  kernel<<<cuda::gridFor(tiles, 1), kThreads, bytes, ctx.stream>>>(
      a, q, k, v, mask, out, lse, dout, drop, cuda::stepCounters(ctx), dropout, ld, dq);
  checkLaunch(ctx, "attentionDqKernel");
}

template <int kT>
void launchDkv(Context &ctx, const AttentionDims &a, const float *q,
               const float *k, const float *v, const unsigned char *mask,
               const float *out, const float *lse, const float *dout,
               const DropoutParams &drop, bool dropout, float *dk, float *dv) {
  constexpr int kTile = rowsPerWarp(kT) * kWarps;
  const int ld = chunkStride(a);
  const size_t bytes =
      sizeof(float) * (kTile * (a.d + a.dv) + kChunk * (ld + 2));
  auto kernel = attentionDkvKernel<kT>;
  if (!allowSharedBytes<attentionDkvKernel<kT>>(ctx, bytes, "attentionDkvKernel"))
    return;
  const int64_t tiles = a.batch * ((a.sk + kTile - 1) / kTile);
  kernel<<<cuda::gridFor(tiles, 1), kThreads, bytes, ctx.stream>>>(
      a, q, k, v, mask, out, lse, dout, drop, cuda::stepCounters(ctx), dropout, ld, dk, dv);
  checkLaunch(ctx, "attentionDkvKernel");
}

/// Calls f(std::integral_constant<int, kT>) for the kernel instance of
/// `n` accumulator slices.
template <typename F> void withSlices(int n, F &&f) {
  switch (n) {
  case 1:
    f(std::integral_constant<int, 1>());
    break;
  case 2:
    f(std::integral_constant<int, 2>());
    break;
  case 4:
    f(std::integral_constant<int, 4>());
    break;
  default:
    f(std::integral_constant<int, 8>());
    break;
  }
}

} // namespace

void attentionForward(Context &ctx, const AttentionDims &a, const float *q,
                      const float *k, const float *v, const unsigned char *mask,
                      float *out, float *lse) {
  if (!checkDims(ctx, a))
    return;
  // Ratio 1 keeps nothing, so its infinite scale is never used.
  // The step is read on the device (a replayed CUDA graph's kernels keep
  // their arguments).
  const DropoutParams drop = dropoutParams(ctx.seed, 0, a.stream, a.dropout);
  const bool dropout = a.dropout > 0.0f;
  withSlices(slices(a.dv), [&](auto kT) {
    launchForward<decltype(kT)::value>(ctx, a, q, k, v, mask, drop, dropout,
                                       out, lse);
  });
}

void attentionBackward(Context &ctx, const AttentionDims &a, const float *q,
                       const float *k, const float *v,
                       const unsigned char *mask, const float *out,
                       const float *lse, const float *dout, float *dq,
                       float *dk, float *dv) {
  if (!checkDims(ctx, a))
    return;
  // The step is read on the device (a replayed CUDA graph's kernels keep
  // their arguments).
  const DropoutParams drop = dropoutParams(ctx.seed, 0, a.stream, a.dropout);
  const bool dropout = a.dropout > 0.0f;
  withSlices(slices(a.d), [&](auto kT) {
    launchDq<decltype(kT)::value>(ctx, a, q, k, v, mask, out, lse, dout, drop,
                                  dropout, dq);
  });
  withSlices(slices(std::max(a.d, a.dv)), [&](auto kT) {
    launchDkv<decltype(kT)::value>(ctx, a, q, k, v, mask, out, lse, dout, drop,
                                   dropout, dk, dv);
  });
}

} // namespace mtc::rt
