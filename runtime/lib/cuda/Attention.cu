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
// With 16-bit operands (attentionForward16, attentionBackward16) the products
// run on the tensor cores through WMMA (16 x 16 x 16 steps, float32
// accumulators), and from sm_80 on through mma.sync for head dims up to
// 128; see the sections below.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#ifndef MTC_CUDA_EMULATION // the emulation's Kernel.h has its own
#include <cuda_pipeline.h>
#endif

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
/// Rows of the streamed side per step: one per lane.
constexpr int kChunk = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
/// log2(e) and ln(2): the mma.sync kernels exponentiate in base 2, the
/// scores' scale times log2(e) applied once per score (see The register
/// kernels on mma.sync; sm_75's compilation has none of them).
[[maybe_unused]] constexpr float kLog2e = 1.44269504088896341f;
[[maybe_unused]] constexpr float kLn2 = 0.693147180559945309f;
using cuda::allowSharedBytes;
using cuda::kDefaultSharedBytes;

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

/// What the kernels take as head h's mask: its mask bytes, null without a
/// mask, and under a causal mask a token that is never read (a non-null
/// maskHead says the scores may be masked; maskedOut and chunkState then
/// decide by position).
__device__ inline const unsigned char *
maskHeadOf(const AttentionDims &a, const unsigned char *mask, int64_t h) {
  static const unsigned char causalToken = 0;
  if (a.causal)
    return &causalToken;
  return mask ? mask + attentionMaskOffset(a, h) : nullptr;
}

/// Calls body(h, first, count, maskHead) for the block's tiles of `own`
/// rows of a side of `side` rows a head (the queries, or the keys):
/// tile blockIdx.x, then every gridDim.x-th, placed in `order`
/// (attentionTilePlace); [first, first + count) are the tile's rows in the
/// sequence and maskHead the head's mask (maskHeadOf).
template <typename Body>
__device__ void forEachTile(const AttentionDims &a, int64_t side, int own,
                            AttentionTileOrder order, const unsigned char *mask,
                            Body body) {
  const int64_t tilesPerHead = (side + own - 1) / own;
  for (int64_t tile = blockIdx.x; tile < a.batch * tilesPerHead;
       tile += gridDim.x) {
    int64_t h = 0, index = 0;
    attentionTilePlace(tile, a.batch, tilesPerHead, order, h, index);
    const int64_t first = index * own;
    body(h, first, countFrom(side, first, own), maskHeadOf(a, mask, h));
  }
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
__device__ void stageRows(float *dst, int ld, const float *src,
                          int64_t stride, int valid, int rows, int width) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int r = warp; r < rows; r += kWarps) {
    float *to = dst + r * ld;
    if (r < valid) {
      const float *from = src + r * stride;
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
/// (masked or dropped) adds nothing; the CPU adds 0 * x, which differs only
/// where x is infinite or NaN (NaN there, finite here). Every lane must call
/// this with the same count.
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

/// Whether score (i, j) of head h is masked out by the optional mask
/// (maskHeadOf: under a causal mask, whether key j is after query i).
__device__ inline bool maskedOut(const AttentionDims &a,
                                 const unsigned char *maskHead, int64_t i,
                                 int64_t j) {
  if (!maskHead)
    return false;
  if (a.causal)
    return j > i;
  return maskHead[i * a.maskRowStride + j * a.maskColStride] != 0;
}

/// Whether one of the four bytes of `word` is 0 (exact: a borrow can only
/// mark bytes above a zero byte).
__device__ inline bool hasZeroByte(unsigned word) {
  return ((word - 0x01010101u) & ~word & 0x80808080u) != 0;
}

/// What the mask leaves of the scores of queries [i0, i0 + rows) against
/// keys [j0, j0 + cols) of a head: none (Dead: half the chunks of a causal
/// mask; such a chunk adds nothing, its probabilities are 0 and its
/// products add zeros, so the kernels skip it), some (Partial) or all
/// (Full: the kernels then read no mask for it). Full is only told apart
/// where the mask's rows are whole 16-byte vectors (a causal mask over a
/// sequence that is a multiple of 16), else such a chunk is Partial.
/// Without a mask every chunk is Full; under a causal one (a.causal) the
/// chunk's position decides, exactly and without reading anything. Barriers
/// when there is a mask that is not causal: the whole block calls it and
/// gets the same answer.
enum class Chunk { Dead, Partial, Full };
__device__ inline Chunk chunkState(const AttentionDims &a,
                                   const unsigned char *maskHead, int64_t i0,
                                   int rows, int64_t j0, int cols) {
  if (!maskHead)
    return Chunk::Full;
  if (a.causal) {
    // Keys after the last query are dead, keys up to the first one live.
    if (j0 > i0 + rows - 1)
      return Chunk::Dead;
    return j0 + cols - 1 <= i0 ? Chunk::Full : Chunk::Partial;
  }
  bool live = false;
  const unsigned char *base =
      maskHead + i0 * a.maskRowStride + j0 * a.maskColStride;
  if (a.maskColStride == 1 && a.maskRowStride % 16 == 0 && cols % 16 == 0 &&
      reinterpret_cast<uintptr_t>(base) % 16 == 0) {
    // A live score is a zero byte in a vector, a masked one a nonzero byte.
    bool masked = false;
    const int vectors = cols / 16;
    for (int e = threadIdx.x; e < rows * vectors; e += blockDim.x) {
      const uint4 m = *reinterpret_cast<const uint4 *>(
          base + (e / vectors) * a.maskRowStride + (e % vectors) * 16);
      live = live || hasZeroByte(m.x) || hasZeroByte(m.y) || hasZeroByte(m.z) ||
             hasZeroByte(m.w);
      masked = masked || (m.x | m.y | m.z | m.w) != 0;
    }
    if (!__syncthreads_or(live))
      return Chunk::Dead;
    return __syncthreads_or(masked) ? Chunk::Partial : Chunk::Full;
  }
  for (int e = threadIdx.x; e < rows * cols && !live; e += blockDim.x)
    live = !maskedOut(a, maskHead, i0 + e / cols, j0 + e % cols);
  return __syncthreads_or(live) ? Chunk::Partial : Chunk::Dead;
}

/// Whether the mask hides every score of the chunk (chunkState).
__device__ inline bool chunkMasked(const AttentionDims &a,
                                   const unsigned char *maskHead, int64_t i0,
                                   int rows, int64_t j0, int cols) {
  return chunkState(a, maskHead, i0, rows, j0, cols) == Chunk::Dead;
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
                           DropoutParams drop, const StepCounters *counters,
                           bool dropout, int ld, AttentionTileOrder order,
                           float *out, float *lse) {
  constexpr int R = kForwardRows;
  constexpr int kTile = R * kWarps;
  extern __shared__ float smem[];
  drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
  const int d = static_cast<int>(a.d), dv = static_cast<int>(a.dv);
  float *qs = smem;
  float *chunk = smem + kTile * d;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  forEachTile(
      a, a.sq, kTile, order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        // The previous tile's readers of the shared buffers are done.
        __syncthreads();
        stageRows(qs, d, q + attentionRow(a, a.rows.q, h, i0), a.rows.q.row,
                  rows, kTile, d);

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
          if (chunkMasked(a, maskHead, i0, rows, j0, cols))
            continue;
          stageRows(chunk, ld, k + attentionRow(a, a.rows.k, h, j0),
                    a.rows.k.row, cols, kChunk, d);
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
          stageRows(chunk, ld, v + attentionRow(a, a.rows.v, h, j0),
                    a.rows.v.row, cols, kChunk, dv);
          __syncthreads();
          accumulateRows<R, kT>(w, 1.0f, chunk, ld, cols, dv, acc);
        }

#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int row = warp * R + r;
          if (row >= rows)
            continue;
          const int64_t i = i0 + row;
          float *o = out + attentionRow(a, a.rows.o, h, i);
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
      });
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
                      DropoutParams drop, const StepCounters *counters,
                      bool dropout, int ld, AttentionTileOrder order,
                      float *dq) {
  constexpr int R = rowsPerWarp(kT);
  constexpr int kTile = R * kWarps;
  extern __shared__ float smem[];
  drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
  const int d = static_cast<int>(a.d), dv = static_cast<int>(a.dv);
  float *qs = smem;
  float *gs = qs + kTile * d;
  float *chunk = gs + kTile * dv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  forEachTile(
      a, a.sq, kTile, order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's readers of qs and gs are done
        stageRows(qs, d, q + attentionRow(a, a.rows.q, h, i0), a.rows.q.row,
                  rows, kTile, d);
        stageRows(gs, dv, dout + attentionRow(a, a.rows.dout, h, i0),
                  a.rows.dout.row, rows, kTile, dv);

        // delta_i = dO_i . O_i and the log-sum-exp of this warp's rows.
        float delta[R], rowLse[R], acc[R][kT];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int row = warp * R + r;
          const float *g = dout + attentionRow(a, a.rows.dout, h, i0 + row);
          const float *o = out + attentionRow(a, a.rows.o, h, i0 + row);
          float part = 0.0f;
          if (row < rows)
            for (int x = lane; x < dv; x += 32)
              part = fmaf(g[x], o[x], part);
          delta[r] = warpSum(part);
          rowLse[r] = row < rows ? lse[h * a.sq + i0 + row] : kNegInf;
#pragma unroll
          for (int t = 0; t < kT; ++t)
            acc[r][t] = 0.0f;
        }

        for (int64_t j0 = 0; j0 < a.sk; j0 += kChunk) {
          const int cols = countFrom(a.sk, j0, kChunk);
          const int64_t j = j0 + lane;
          __syncthreads(); // the K chunk's readers are done (and qs, gs
                           // written)
          if (chunkMasked(a, maskHead, i0, rows, j0, cols))
            continue;
          stageRows(chunk, ld, v + attentionRow(a, a.rows.v, h, j0),
                    a.rows.v.row, cols, kChunk, dv);
          __syncthreads();
          float dp[R];
          dotRows<R>(chunk + lane * ld, gs + warp * R * dv, dv, dv, dp);

          __syncthreads(); // everyone is done with the V chunk
          stageRows(chunk, ld, k + attentionRow(a, a.rows.k, h, j0),
                    a.rows.k.row, cols, kChunk, d);
          __syncthreads();
          float s[R];
          dotRows<R>(chunk + lane * ld, qs + warp * R * d, d, d, s);

          float ds[R];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const int row = warp * R + r;
            const int64_t i = i0 + row;
            const bool live = lane < cols && row < rows &&
                              rowLse[r] != kNegInf &&
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
          float *g = dq + attentionRow(a, a.rows.dq, h, i0 + row);
#pragma unroll
          for (int t = 0; t < kT; ++t) {
            const int x = lane + 32 * t;
            if (x < d)
              g[x] = acc[r][t];
          }
        }
      });
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
                       DropoutParams drop, const StepCounters *counters,
                       bool dropout, int ld, AttentionTileOrder order,
                       float *dk, float *dv) {
  constexpr int R = rowsPerWarp(kT);
  constexpr int kTile = R * kWarps;
  extern __shared__ float smem[];
  drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
  const int d = static_cast<int>(a.d), dvDim = static_cast<int>(a.dv);
  float *ks = smem;
  float *vs = ks + kTile * d;
  float *chunk = vs + kTile * dvDim;
  float *lseChunk = chunk + kChunk * ld;
  float *deltaChunk = lseChunk + kChunk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  forEachTile(
      a, a.sk, kTile, order, mask,
      [&](int64_t h, int64_t j0, int cols, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's readers of ks and vs are done
        stageRows(ks, d, k + attentionRow(a, a.rows.k, h, j0), a.rows.k.row,
                  cols, kTile, d);
        stageRows(vs, dvDim, v + attentionRow(a, a.rows.v, h, j0), a.rows.v.row,
                  cols, kTile, dvDim);

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
          __syncthreads(); // the dO chunk's readers are done (and ks, vs
                           // written)
          if (chunkMasked(a, maskHead, i0, rows, j0, cols))
            continue;
          stageRows(chunk, ld, dout + attentionRow(a, a.rows.dout, h, i0),
                    a.rows.dout.row, rows, kChunk, dvDim);
          // Warp w forms delta and fetches lse for queries w, w + kWarps, ...
          for (int c = warp; c < kChunk; c += kWarps) {
            const float *g = dout + attentionRow(a, a.rows.dout, h, i0 + c);
            const float *o = out + attentionRow(a, a.rows.o, h, i0 + c);
            float part = 0.0f;
            if (c < rows)
              for (int x = lane; x < dvDim; x += 32)
                part = fmaf(g[x], o[x], part);
            const float sum = warpSum(part);
            if (lane == 0) {
              deltaChunk[c] = sum;
              lseChunk[c] = c < rows ? lse[h * a.sq + i0 + c] : kNegInf;
            }
          }
          __syncthreads();
          float dp[R];
          dotRows<R>(chunk + lane * ld, vs + warp * R * dvDim, dvDim, dvDim,
                     dp);
          const float myLse = lseChunk[lane], myDelta = deltaChunk[lane];

          __syncthreads(); // everyone is done with the dO chunk
          stageRows(chunk, ld, q + attentionRow(a, a.rows.q, h, i0),
                    a.rows.q.row, rows, kChunk, d);
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
          stageRows(chunk, ld, dout + attentionRow(a, a.rows.dout, h, i0),
                    a.rows.dout.row, rows, kChunk, dvDim);
          __syncthreads();
          accumulateRows<R, kT>(dropped, 1.0f, chunk, ld, rows, dvDim, accV);
        }

#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int col = warp * R + r;
          if (col >= cols)
            continue;
          float *gk = dk + attentionRow(a, a.rows.dk, h, j0 + col);
          float *gv = dv + attentionRow(a, a.rows.dv, h, j0 + col);
#pragma unroll
          for (int t = 0; t < kT; ++t) {
            const int x = lane + 32 * t;
            if (x < d)
              gk[x] = accK[r][t];
            if (x < dvDim)
              gv[x] = accV[r][t];
          }
        }
      });
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

/// Reports what keeps the kernels from running `a`; whether there is
/// work to do.
bool checkDims(Context &ctx, const AttentionDims &a) {
  if (std::string why = attentionDimsError(a); !why.empty()) {
    reportError(ctx, why);
    return false;
  }
  // Tiles are numbered in 32 bits (attentionTilePlace); the smallest own
  // 16 rows. 2^32 tiles would be 2^36 rows of Q or K, more memory than any
  // device has.
  constexpr int64_t kMaxTiles = int64_t{1} << 32;
  if (a.batch > 0 && (a.batch > kMaxTiles / ((a.sq + 15) / 16 + 1) ||
                      a.batch > kMaxTiles / ((a.sk + 15) / 16 + 1))) {
    reportError(ctx, "attention: too many rows for the CUDA kernels' tile "
                     "numbering (2^36 or more)");
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

/// What the attention kernels need to know of a device.
struct DeviceLimits {
  int major = 0, minor = 0, optin = 0, l2 = 0;
};

/// The current device's limits, queried once per device (so a step being
/// captured into a CUDA graph, which ran eagerly before, queries nothing).
bool deviceLimits(DeviceLimits &limits) {
  constexpr int kCachedDevices = 64;
  static DeviceLimits cache[kCachedDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return false;
  if (device >= 0 && device < kCachedDevices && cache[device].optin > 0) {
    limits = cache[device];
    return true;
  }
  if (cudaDeviceGetAttribute(&limits.major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&limits.minor, cudaDevAttrComputeCapabilityMinor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&limits.optin,
                             cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&limits.l2, cudaDevAttrL2CacheSize, device) !=
          cudaSuccess)
    return false;
  if (device >= 0 && device < kCachedDevices)
    cache[device] = limits;
  return true;
}

/// The order of a launch's tiles (AttentionTileOrder): those of kernels
/// that own queries stream the keys and values, those that own keys the
/// queries and output gradients, `elementBytes` each.
AttentionTileOrder tileOrder(const AttentionDims &a, bool ownQueries,
                             int elementBytes) {
  DeviceLimits device;
  const int64_t l2 = deviceLimits(device) ? device.l2 : 0;
  const int64_t streamed =
      (ownQueries ? a.sk : a.sq) * (a.d + a.dv) * elementBytes;
  return attentionTileOrder(a.batch, streamed, l2, ownQueries);
}

/// The chunk buffer's row stride: odd, so that lane l reading row l at the
/// same column hits 32 different banks.
int chunkStride(const AttentionDims &a) {
  return static_cast<int>(std::max(a.d | 1, a.dv | 1));
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
  if (!allowSharedBytes<attentionForwardKernel<kT>>(ctx, bytes,
                                                    "attentionForwardKernel"))
    return;
  const int64_t tiles = a.batch * ((a.sq + kTile - 1) / kTile);
  kernel<<<cuda::gridFor(tiles, 1), kThreads, bytes, ctx.stream>>>(
      a, q, k, v, mask, drop, cuda::stepCounters(ctx), dropout, ld,
      tileOrder(a, /*ownQueries=*/true, sizeof(float)), out, lse);
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
      a, q, k, v, mask, out, lse, dout, drop, cuda::stepCounters(ctx), dropout,
      ld, tileOrder(a, /*ownQueries=*/true, sizeof(float)), dq);
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
  if (!allowSharedBytes<attentionDkvKernel<kT>>(ctx, bytes,
                                                "attentionDkvKernel"))
    return;
  const int64_t tiles = a.batch * ((a.sk + kTile - 1) / kTile);
  kernel<<<cuda::gridFor(tiles, 1), kThreads, bytes, ctx.stream>>>(
      a, q, k, v, mask, out, lse, dout, drop, cuda::stepCounters(ctx), dropout,
      ld, tileOrder(a, /*ownQueries=*/false, sizeof(float)), dk, dv);
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

//===----------------------------------------------------------------------===//
// 16-bit operands on the tensor cores
//===----------------------------------------------------------------------===//
//
// The same three kernels with Q, K, V and dO in 16 bits and every product on
// the tensor cores: WMMA 16 x 16 x 16 steps of __half (sm_70+) or
// __nv_bfloat16 (sm_80+) operands into float32 accumulators. A block of
// kWarps warps owns `own` rows of one head (queries; keys for dK/dV) and
// streams the other side `step` rows at a time through shared memory, where
// the operands are staged as 16-bit rows zero-padded to the head dims
// rounded up to 16 (zeros add nothing to any product) and the rows past the
// end of the sequence are zero. Work within a phase is dealt out in 16 x 16
// output tiles, tile x to warp x % kWarps, and the phases are separated by
// __syncthreads.
//
// The accumulator fragments' element layout is opaque, so every per-row or
// per-element step (masking, the online softmax, dropout, dS) works on
// tiles stored to shared memory with store_matrix_sync and read back with
// load_matrix_sync, never on fragment elements:
//
//  - forward, one block per (head, query tile): S = Q K^T into a float32
//    tile [own][step]; a warp per row takes the running maximum and sum and
//    writes P = round16(e * dropout factor) over its own row of S; then each
//    output tile, kept in shared float32, is scaled by its rows' rescale
//    factors, loaded, gets P V added and is stored back. out = O / rowSum.
//  - backward dQ, one block per (head, query tile): per key step, a warp
//    forms the S and dP = dO V^T tiles of one 16 x 16 block, stores both to
//    its scratch tiles and writes round16(scale * dS) from them; then dQ,
//    kept in shared float32, gets dS K added.
//  - backward dK/dV, one block per (head, key tile): the same with the
//    roles swapped (S^T = K Q^T, dP^T = V dO^T), writing round16(dropped P)^T
//    and round16(scale * dS)^T; dV gets P^T dO and dK gets dS^T Q.
//
// Each output element is accumulated by one warp in a fixed order of
// tensor-core steps, so results are reproducible run to run. The tile sizes
// are chosen per call from the head dims and the device's shared memory
// (capped at 99 KB): the largest of 64 x 64, 32 x 64, 32 x 32, 16 x 32 and
// 16 x 16 (own x step) that fits in 80 KB, else the largest that fits.
// Head dims up to 128 take the register-accumulator variants below instead
// (64 rows, steps of 64 or the whole shorter side; with 64 x 64 tiles and
// d = dv = 64: 50,688, 56,832 and 66,048 bytes for the forward, dQ and
// dK/dV), where their shared memory fits; larger ones these kernels. For d = dv
// = 128 on sm_80 and sm_90 the forward and dQ tiles are 64 x 64 and the dK/dV
// tiles 32 x 64. On sm_75 (64 KB) bfloat16 is refused, and with float16 the
// dK/dV kernel does not fit once d + dv, each rounded up to 16, reaches 416 (d
// = dv = 208): attentionBackward16 reports that as an error.

namespace wmma = nvcuda::wmma;

/// The WMMA tile edge.
constexpr int kEdge = 16;
/// Padding after each shared row: 8 16-bit elements or 4 floats (16 bytes),
/// which keeps the row strides multiples of 16 bytes (as WMMA requires) and
/// moves consecutive rows to different banks.
constexpr int kPad16 = 8, kPad32 = 4;
/// The longest step: the forward's row pass gives each lane at most
/// kMaxStep / 32 columns.
constexpr int kMaxStep = 64;
constexpr int kColsPerLane = kMaxStep / 32;
/// The stride of the backward kernels' per-warp float32 scratch tiles.
constexpr int kScratchLd = kEdge + kPad32;
constexpr size_t kScratchBytes =
    sizeof(float) * kWarps * 2 * kEdge * kScratchLd;
/// The most shared memory a 16-bit kernel asks for: what sm_86 and sm_89
/// allow a block; sm_80 and sm_90 allow more, sm_75 less (64 KB).
constexpr size_t kMaxShared16 = 99 * 1024;
/// Tilings up to this size come first: two blocks still fit an sm_80 SM
/// (164 KB), where one block of 4 warps would leave it mostly idle.
constexpr size_t kPreferredShared16 = 80 * 1024;

using Accumulator =
    wmma::fragment<wmma::accumulator, kEdge, kEdge, kEdge, float>;

//===----------------------------------------------------------------------===//
// Dropout masks drawn once per group
//===----------------------------------------------------------------------===//
//
// A generator call (dropoutGroupKeep) gives the keep bits of a group of
// kDropoutGroup consecutive flat indices (h, i, j) -> (h * sq + i) * sk + j.
// attentionKeep makes one call per element and keeps one bit of four; the
// 16-bit kernels instead let each lane draw whole groups and pass their bits
// to the lanes that need them by shuffles, a quarter of the calls (the
// calls dominate the element-wise work when dropout is on). A line is up
// to kMaxStep consecutive flat indices from `base`; every lane of the warp
// calls these together (uniform control flow), with the same base.

/// The keep bits of group `group`, bit t for element t of the group.
__device__ inline unsigned groupKeepBits(const DropoutParams &drop,
                                         uint64_t group) {
  bool keep[kDropoutGroup];
  dropoutGroupKeep(drop, group, keep);
  unsigned bits = 0;
#pragma unroll
  for (int t = 0; t < kDropoutGroup; ++t)
    bits |= keep[t] ? 1u << t : 0u;
  return bits;
}

/// The group of position pos of the line starting at flat index base,
/// counted from the line's first group.
__device__ inline int lineGroup(uint64_t base, int pos) {
  return static_cast<int>((base % kDropoutGroup + pos) / kDropoutGroup);
}

/// A line of `len` <= kMaxStep positions: lane l draws the line's group l.
__device__ inline unsigned lineKeepBits(const DropoutParams &drop,
                                        uint64_t base, int len, int lane) {
  return lane < lineGroup(base, len + kDropoutGroup - 1)
             ? groupKeepBits(drop, base / kDropoutGroup + lane)
             : 0u;
}

/// The dropout factor (drop.scale or 0) of position pos of the line, from
/// the bits lineKeepBits gave the lanes.
__device__ inline float lineKeepFactor(const DropoutParams &drop, unsigned bits,
                                       uint64_t base, int pos) {
  const unsigned held = __shfl_sync(kFullMask, bits, lineGroup(base, pos) & 31);
  return (held >> ((base + pos) % kDropoutGroup)) & 1u ? drop.scale : 0.0f;
}

/// A 16 x 16 tile of 16 lines of kEdge positions: a line spans at most 5
/// groups, line L's take slots 5 L .. 5 L + 4, and lane l draws slots l,
/// l + 32 and l + 64. lineBase(L) is line L's first flat index.
constexpr int kTileGroupsPerLine = kEdge / kDropoutGroup + 1;
struct TileKeep {
  unsigned bits[3];
};
template <typename LineBase>
__device__ inline TileKeep tileKeepBits(const DropoutParams &drop,
                                        LineBase lineBase, int lane) {
  static_assert(kEdge * kTileGroupsPerLine <= 3 * 32, "slots per lane");
  TileKeep k;
#pragma unroll
  for (int part = 0; part < 3; ++part) {
    const int slot = lane + 32 * part;
    const int line = slot / kTileGroupsPerLine,
              group = slot % kTileGroupsPerLine;
    k.bits[part] = 0u;
    if (line < kEdge) {
      const uint64_t base = lineBase(line);
      if (group < lineGroup(base, kEdge + kDropoutGroup - 1))
        k.bits[part] = groupKeepBits(drop, base / kDropoutGroup + group);
    }
  }
  return k;
}

/// tileKeepBits when dropout is on and some element of the tile is live
/// (live(e) for the lane's elements e = lane, lane + 32, ...), which
/// `drops` then says; else nothing is drawn.
template <typename Live, typename LineBase>
__device__ inline TileKeep
tileKeepIfLive(const DropoutParams &drop, bool dropout, Live live,
               LineBase lineBase, int lane, bool &drops) {
  drops = false;
  if (!dropout)
    return TileKeep{};
  bool anyLive = false;
  for (int e = lane; e < kEdge * kEdge; e += 32)
    anyLive |= live(e);
  drops = __any_sync(kFullMask, anyLive);
  return drops ? tileKeepBits(drop, lineBase, lane) : TileKeep{};
}

/// The dropout factor of position pos of line `line` (first flat index
/// base) from the bits tileKeepBits gave the lanes.
__device__ inline float tileKeepFactor(const DropoutParams &drop,
                                       const TileKeep &k, uint64_t base,
                                       int line, int pos) {
  const int slot = kTileGroupsPerLine * line + lineGroup(base, pos);
  const unsigned b0 = __shfl_sync(kFullMask, k.bits[0], slot & 31);
  const unsigned b1 = __shfl_sync(kFullMask, k.bits[1], slot & 31);
  const unsigned b2 = __shfl_sync(kFullMask, k.bits[2], slot & 31);
  const int part = slot / 32;
  const unsigned held = part == 0 ? b0 : part == 1 ? b1 : b2;
  return (held >> ((base + pos) % kDropoutGroup)) & 1u ? drop.scale : 0.0f;
}

/// How a 16-bit kernel cuts the problem: `own` rows of the block's side and
/// `step` rows of the streamed side at a time (multiples of 16, step at most
/// kMaxStep), the head dims rounded up to 16, and how many buffers hold the
/// streamed side's tiles (2 in the register kernels when they fit: the next
/// step is copied in while this one is used), and the order of the tiles
/// (AttentionTileOrder).
struct Tiling16 {
  int own, step, d16, dv16;
  int buffers = 1;
  AttentionTileOrder order{};
};

__host__ __device__ constexpr int roundUp16(int64_t n) {
  return static_cast<int>((n + kEdge - 1) / kEdge * kEdge);
}

__host__ __device__ constexpr int maxInt(int x, int y) { return x > y ? x : y; }

// Shared memory layouts: byte offsets, each a multiple of 32 bytes (WMMA
// wants 256-bit aligned tiles), and the row strides in elements.

/// Forward: the query tile, one buffer for the K step and then the V step,
/// the float32 scores (P overwrites each row in 16 bits), the float32 output
/// accumulator and each row's maximum, sum and latest rescale factor.
struct ForwardLayout {
  int ldQ, ldKV, ldS, ldO;
  size_t q, kv, s, o, stats, bytes;
  __host__ __device__ explicit ForwardLayout(const Tiling16 &t)
      : ldQ(t.d16 + kPad16), ldKV(maxInt(t.d16, t.dv16) + kPad16),
        ldS(t.step + kPad32), ldO(t.dv16 + kPad32) {
    q = 0;
    kv = q + sizeof(uint16_t) * t.own * ldQ;
    s = kv + sizeof(uint16_t) * t.step * ldKV;
    o = s + sizeof(float) * t.own * ldS;
    stats = o + sizeof(float) * t.own * ldO;
    bytes = stats + sizeof(float) * 3 * t.own;
  }
};

/// Backward dQ: the query and output gradient tiles, the K and V steps
/// (`buffer` bytes apart from the next buffer's, when there are two),
/// scale * dS in 16 bits, the float32 dQ accumulator (none in the register
/// kernel: `sharedAcc` false), the warps' scratch tiles and each row's
/// log-sum-exp and delta.
struct DqLayout {
  int ldQ, ldG, ldK, ldV, ldDs, ldAcc;
  size_t q, g, k, v, buffer, ds, acc, scratch, lse, delta, bytes;
  __host__ __device__ explicit DqLayout(const Tiling16 &t,
                                        bool sharedAcc = true)
      : ldQ(t.d16 + kPad16), ldG(t.dv16 + kPad16), ldK(t.d16 + kPad16),
        ldV(t.dv16 + kPad16), ldDs(t.step + kPad16), ldAcc(t.d16 + kPad32) {
    q = 0;
    g = q + sizeof(uint16_t) * t.own * ldQ;
    k = g + sizeof(uint16_t) * t.own * ldG;
    v = k + sizeof(uint16_t) * t.step * ldK;
    buffer = sizeof(uint16_t) * t.step * (ldK + ldV);
    ds = k + t.buffers * buffer;
    acc = ds + sizeof(uint16_t) * t.own * ldDs;
    scratch = acc + (sharedAcc ? sizeof(float) * t.own * ldAcc : 0);
    lse = scratch + kScratchBytes;
    delta = lse + sizeof(float) * t.own;
    bytes = delta + sizeof(float) * t.own;
  }
};

/// Backward dK/dV (own = keys, step = queries): the key and value tiles, the
/// query and output gradient steps (`buffer` bytes apart from the next
/// buffer's, when there are two), scale * dS^T and the dropped P^T in 16
/// bits, the float32 dK and dV accumulators (none in the register kernel:
/// `sharedAcc` false), the warps' scratch tiles and each query's
/// log-sum-exp and delta (per buffer, `rowBuffer` bytes apart).
struct DkvLayout {
  int ldK, ldV, ldQ, ldG, ldT, ldAccK, ldAccV;
  size_t k, v, q, g, buffer, dsT, pT, accK, accV, scratch, lse, delta,
      rowBuffer, bytes;
  __host__ __device__ explicit DkvLayout(const Tiling16 &t,
                                         bool sharedAcc = true)
      : ldK(t.d16 + kPad16), ldV(t.dv16 + kPad16), ldQ(t.d16 + kPad16),
        ldG(t.dv16 + kPad16), ldT(t.step + kPad16), ldAccK(t.d16 + kPad32),
        ldAccV(t.dv16 + kPad32) {
    k = 0;
    v = k + sizeof(uint16_t) * t.own * ldK;
    q = v + sizeof(uint16_t) * t.own * ldV;
    g = q + sizeof(uint16_t) * t.step * ldQ;
    buffer = sizeof(uint16_t) * t.step * (ldQ + ldG);
    dsT = q + t.buffers * buffer;
    pT = dsT + sizeof(uint16_t) * t.own * ldT;
    accK = pT + sizeof(uint16_t) * t.own * ldT;
    accV = accK + (sharedAcc ? sizeof(float) * t.own * ldAccK : 0);
    scratch = accV + (sharedAcc ? sizeof(float) * t.own * ldAccV : 0);
    lse = scratch + kScratchBytes;
    delta = lse + sizeof(float) * t.step;
    rowBuffer = 2 * sizeof(float) * t.step;
    bytes = lse + t.buffers * rowBuffer;
  }
};

template <typename T> __host__ __device__ constexpr bool isBf16() {
  return std::is_same<T, __nv_bfloat16>::value;
}

/// Whether the architecture being compiled has tensor-core steps for T:
/// bfloat16 needs sm_80. The host never launches a kernel on a device
/// without them.
template <typename T> __device__ constexpr bool wmmaSupports() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return !isBf16<T>();
#else
  return true;
#endif
}

/// Whether the WMMA register kernels' bodies are compiled for the
/// architecture being compiled: from sm_80 on the host launches the
/// mma.sync kernels instead, so they run on sm_75 alone, which has no
/// bfloat16 tensor cores. The emulation has them all (MTC_CUDAEMU_SM says
/// which run).
template <typename T> __device__ constexpr bool wmmaRegCompiled() {
#if defined(__CUDA_ARCH__) && !defined(MTC_CUDA_EMULATION)
  return __CUDA_ARCH__ < 800 && !isBf16<T>();
#else
  return true;
#endif
}

/// x rounded to T's format, as the 16-bit operand of a later product.
template <typename T> __device__ inline uint16_t round16(float x) {
  return isBf16<T>() ? floatToBf16(x) : floatToHalf(x);
}

/// The attention output as it is stored: float32, or rounded to T's format
/// (uint16_t) as a conversion rounds it.
template <typename T> __device__ inline void storeOut(float *dst, float x) {
  *dst = x;
}
template <typename T> __device__ inline void storeOut(uint16_t *dst, float x) {
  *dst = round16<T>(x);
}

/// Element i of a gradient as it is stored: float32, or with `narrow`
/// rounded to T's format as a conversion rounds it.
template <typename T>
__device__ inline void storeGrad(void *grad, int64_t i, bool narrow, float x) {
  if (narrow)
    static_cast<uint16_t *>(grad)[i] = round16<T>(x);
  else
    static_cast<float *>(grad)[i] = x;
}

/// Copies `valid` rows of `width` contiguous 16-bit elements from src to
/// dst[row * ld + x] and writes zeros over the rest of the rows x padded
/// tile (columns [width, padded), rows [valid, rows)). Called by the whole
/// block.
__device__ void stage16(uint16_t *dst, int ld, const uint16_t *src,
                        int64_t stride, int valid, int rows, int width,
                        int padded) {
  // Rows of whole 16-byte vectors: copied 8 elements at a time.
  if (width % 8 == 0 && stride % 8 == 0 &&
      reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int vectors = padded / 8;
    for (int x = threadIdx.x; x < rows * vectors; x += kThreads) {
      const int r = x / vectors, c = x % vectors * 8;
      uint4 value = make_uint4(0u, 0u, 0u, 0u);
      if (r < valid && c < width)
        value = *reinterpret_cast<const uint4 *>(
            src + r * stride + c);
      *reinterpret_cast<uint4 *>(dst + r * ld + c) = value;
    }
    return;
  }
  for (int x = threadIdx.x; x < rows * padded; x += kThreads) {
    const int r = x / padded, c = x % padded;
    dst[r * ld + c] = r < valid && c < width
                          ? src[r * stride + c]
                          : static_cast<uint16_t>(0);
  }
}

/// stage16 through cp.async (sm_80 on; a plain copy before): the whole
/// 16-byte vectors of the rows are queued and land once the caller's
/// __pipeline_wait_prior lets their group complete; the zeros, and rows
/// that are not whole vectors, are stored at once. Called by the whole
/// block, which commits the group.
__device__ void stage16Async(uint16_t *dst, int ld, const uint16_t *src,
                             int64_t stride, int valid, int rows, int width,
                             int padded) {
  if (width % 8 != 0 || stride % 8 != 0 ||
      reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    stage16(dst, ld, src, stride, valid, rows, width, padded);
    return;
  }
  const int vectors = padded / 8;
  for (int x = threadIdx.x; x < rows * vectors; x += kThreads) {
    const int r = x / vectors, c = x % vectors * 8;
    uint16_t *to = dst + r * ld + c;
    if (r < valid && c < width)
      __pipeline_memcpy_async(to, src + r * stride + c, 16);
    else
      *reinterpret_cast<uint4 *>(to) = make_uint4(0u, 0u, 0u, 0u);
  }
}

/// acc += A B over `steps` 16-deep slices. A is 16 x (16 steps), row-major
/// at a with stride lda; B is (16 steps) x 16, row-major at b with stride
/// ldb, or with kTransposedB stored as its transpose (16 x (16 steps),
/// row-major at b): S = Q K^T takes the staged K rows as they are.
template <typename T, bool kTransposedB>
__device__ inline void mmaTile(Accumulator &acc, const uint16_t *a, int lda,
                               const uint16_t *b, int ldb, int steps) {
  using LayoutB =
      std::conditional_t<kTransposedB, wmma::col_major, wmma::row_major>;
  wmma::fragment<wmma::matrix_a, kEdge, kEdge, kEdge, T, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, kEdge, kEdge, kEdge, T, LayoutB> fb;
  for (int k = 0; k < steps; ++k) {
    wmma::load_matrix_sync(fa, reinterpret_cast<const T *>(a + k * kEdge),
                           static_cast<unsigned>(lda));
    const uint16_t *bk = kTransposedB ? b + k * kEdge : b + k * kEdge * ldb;
    wmma::load_matrix_sync(fb, reinterpret_cast<const T *>(bk),
                           static_cast<unsigned>(ldb));
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

/// The 16 x 16 tile at `tile` (stride ld) += A B, through an accumulator.
template <typename T, bool kTransposedB>
__device__ inline void accumulateTile(float *tile, int ld, const uint16_t *a,
                                      int lda, const uint16_t *b, int ldb,
                                      int steps) {
  Accumulator acc;
  wmma::load_matrix_sync(acc, tile, static_cast<unsigned>(ld),
                         wmma::mem_row_major);
  mmaTile<T, kTransposedB>(acc, a, lda, b, ldb, steps);
  wmma::store_matrix_sync(tile, acc, static_cast<unsigned>(ld),
                          wmma::mem_row_major);
}

/// The 16 x 16 tile A B^T, stored at `tile` (stride ld).
template <typename T>
__device__ inline void productTile(float *tile, int ld, const uint16_t *a,
                                   int lda, const uint16_t *b, int ldb,
                                   int steps) {
  Accumulator acc;
  wmma::fill_fragment(acc, 0.0f);
  mmaTile<T, true>(acc, a, lda, b, ldb, steps);
  wmma::store_matrix_sync(tile, acc, static_cast<unsigned>(ld),
                          wmma::mem_row_major);
}

__device__ inline void zeroShared(float *p, int n) {
  for (int x = threadIdx.x; x < n; x += kThreads)
    p[x] = 0.0f;
}

/// lse and delta = dO . O of rows [i0, i0 + count) of head h into
/// lseOut[r] and deltaOut[r] for r < tileRows (-inf and 0 past count), and
/// delta of row i into deltaHeads[h * sq + i] when deltaHeads is given. A
/// warp per row; called by the whole block.
template <typename T, typename O>
__device__ void rowTerms(const AttentionDims &a, const O *out, const float *lse,
                         const uint16_t *dout, int64_t h, int64_t i0, int count,
                         int tileRows, float *lseOut, float *deltaOut,
                         float *deltaHeads = nullptr) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int r = warp; r < tileRows; r += kWarps) {
    const uint16_t *g = dout + attentionRow(a, a.rows.dout, h, i0 + r);
    const O *o = out + attentionRow(a, a.rows.o, h, i0 + r);
    float part = 0.0f;
    if (r < count)
      for (int64_t x = lane; x < a.dv; x += 32)
        part = fmaf(storedToFloat(g[x], isBf16<T>()),
                    storedToFloat(o[x], isBf16<T>()), part);
    const float sum = warpSum(part);
    if (lane == 0) {
      deltaOut[r] = sum;
      lseOut[r] = r < count ? lse[h * a.sq + i0 + r] : kNegInf;
      if (deltaHeads && r < count)
        deltaHeads[h * a.sq + i0 + r] = sum;
    }
  }
}

/// rowTerms from the deltas an earlier kernel stored (deltaHeads, as
/// rowTerms leaves them). Called by the whole block.
__device__ void storedRowTerms(const AttentionDims &a, const float *lse,
                               const float *deltaHeads, int64_t h, int64_t i0,
                               int count, int tileRows, float *lseOut,
                               float *deltaOut) {
  for (int r = threadIdx.x; r < tileRows; r += kThreads) {
    lseOut[r] = r < count ? lse[h * a.sq + i0 + r] : kNegInf;
    deltaOut[r] = r < count ? deltaHeads[h * a.sq + i0 + r] : 0.0f;
  }
}

/// One row's step of the online softmax over keys [j0, j0 + cols) of a
/// step of `step` keys: reads the row's float32 scores at `scores`, writes
/// its dropped probabilities rounded to T over them at `probs` (16-bit),
/// updates its running maximum and sum (lane 0) and returns the factor its
/// earlier output is rescaled by. Query i of head h; `valid`: i is in the
/// sequence. The whole warp calls it, lane l owning columns l + 32 u.
template <typename T>
__device__ inline float
softmaxStepRow(const AttentionDims &a, const unsigned char *maskHead,
               const DropoutParams &drop, bool dropout, int64_t h, int64_t i,
               bool valid, int64_t j0, int cols, int step, const float *scores,
               uint16_t *probs, float *rowMax, float *rowSum, int lane) {
  float score[kColsPerLane], e[kColsPerLane];
  bool live[kColsPerLane];
  float localMax = kNegInf;
#pragma unroll
  for (int u = 0; u < kColsPerLane; ++u) {
    const int c = lane + 32 * u;
    live[u] = valid && c < cols && !maskedOut(a, maskHead, i, j0 + c);
    score[u] = live[u] ? scores[c] * a.scale : kNegInf;
    localMax = fmaxf(localMax, score[u]);
  }
  const float old = *rowMax;
  // Uniform across the warp: the reductions give every lane the same value.
  const float m = fmaxf(old, warpMax(localMax));
  // m == -inf: every key so far is masked; nothing to rescale.
  const float factor = m == kNegInf ? 1.0f : expf(old - m);
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kColsPerLane; ++u) {
    e[u] = m == kNegInf ? 0.0f : expf(score[u] - m);
    sum += e[u];
  }
  sum = warpSum(sum);
  __syncwarp(); // every lane has read its scores before P overwrites
  // The row's dropout groups, drawn once (a lane per group) when some key
  // of the step is live.
  bool anyLive = false;
#pragma unroll
  for (int u = 0; u < kColsPerLane; ++u)
    anyLive |= live[u];
  const bool drops = dropout && __any_sync(kFullMask, anyLive);
  const uint64_t rowBase = static_cast<uint64_t>((h * a.sq + i) * a.sk + j0);
  const unsigned keepBits =
      drops ? lineKeepBits(drop, rowBase, step, lane) : 0u;
#pragma unroll
  for (int u = 0; u < kColsPerLane; ++u) {
    const int c = lane + 32 * u;
    const float f = drops ? lineKeepFactor(drop, keepBits, rowBase, c) : 1.0f;
    if (c < step)
      probs[c] = round16<T>(live[u] ? e[u] * f : 0.0f);
  }
  if (lane == 0) {
    *rowMax = m;
    *rowSum = *rowSum * factor + sum;
  }
  return factor;
}

/// The online softmax's step over a warp's strip of 16 rows (queries
/// i0 + r; r < validRows are in the sequence) against keys [j0, j0 + cols)
/// of a step of `step` keys, for the register forward: reads row r's
/// float32 scores at s + r * ldS, writes its dropped probabilities rounded
/// to T over the row's first half (16-bit), updates rowMax[r] and
/// rowSum[r], and fills row r of the factor tile with the factor its
/// earlier output is rescaled by. Lane l takes row l % 16 and half l / 16
/// of its columns, so the 16 rows run side by side and a row's maximum and
/// sum are a lane's own plus one exchange (softmaxStepRow's row at a time
/// takes ten exchanges a row). The whole warp calls it.
template <typename T>
__device__ inline void
softmaxStepStrip(const AttentionDims &a, const unsigned char *maskHead,
                 const DropoutParams &drop, bool dropout, int64_t h, int64_t i0,
                 int validRows, int64_t j0, int cols, int step, float *s,
                 int ldS, float *rowMax, float *rowSum, float *factors,
                 int lane) {
  constexpr int kHalf = kMaxStep / 2;
  const int r = lane % kEdge, half = lane / kEdge;
  const int width = step / 2, c0 = half * width; // multiples of 8
  const int64_t i = i0 + r;
  const bool valid = r < validRows;
  const float *scores = s + r * ldS + c0;
  auto live = [&](int x) { // column c0 + x of the step
    return valid && c0 + x < cols && !maskedOut(a, maskHead, i, j0 + c0 + x);
  };

  float localMax = kNegInf;
  bool anyLive = false;
#pragma unroll
  for (int q = 0; q < kHalf / 4; ++q)
    if (4 * q < width) {
      const float4 v = *reinterpret_cast<const float4 *>(scores + 4 * q);
      const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (live(4 * q + u)) {
          localMax = fmaxf(localMax, x[u] * a.scale);
          anyLive = true;
        }
    }
  const float old = rowMax[r];
  const float m =
      fmaxf(old, fmaxf(localMax, __shfl_xor_sync(kFullMask, localMax, kEdge)));
  // m == -inf: every key so far is masked; nothing to rescale.
  const float factor = m == kNegInf ? 1.0f : expf(old - m);

  // The keep bits of the half's flat indices base .. base + width - 1, from
  // the groups that hold them (at most kHalf / kDropoutGroup + 1), drawn
  // when some of its keys are live.
  const uint64_t base = static_cast<uint64_t>((h * a.sq + i) * a.sk + j0 + c0);
  const int first = static_cast<int>(base % kDropoutGroup);
  const bool drops = dropout && anyLive;
  uint64_t keep = 0;
  if (drops) {
    static_assert((kHalf / kDropoutGroup + 1) * kDropoutGroup <= 64,
                  "a half's keep bits fit 64 bits");
#pragma unroll
    for (int g = 0; g <= kHalf / kDropoutGroup; ++g)
      if (g * kDropoutGroup < first + width)
        keep |=
            static_cast<uint64_t>(groupKeepBits(drop, base / kDropoutGroup + g))
            << (g * kDropoutGroup);
  }

  float sum = 0.0f;
  uint32_t packed[kHalf / 2]; // two 16-bit probabilities a word
#pragma unroll
  for (int q = 0; q < kHalf / 4; ++q)
    if (4 * q < width) {
      const float4 v = *reinterpret_cast<const float4 *>(scores + 4 * q);
      const float x[4] = {v.x, v.y, v.z, v.w};
      uint32_t bits[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float pr = 0.0f;
        if (live(4 * q + u)) {
          const float e = expf(x[u] * a.scale - m);
          sum += e;
          const bool kept = !drops || (keep >> (first + 4 * q + u)) & 1u;
          pr = kept ? e * (drops ? drop.scale : 1.0f) : 0.0f;
        }
        bits[u] = round16<T>(pr);
      }
      packed[2 * q] = bits[0] | bits[1] << 16;
      packed[2 * q + 1] = bits[2] | bits[3] << 16;
    }
  sum += __shfl_xor_sync(kFullMask, sum, kEdge);
  __syncwarp(); // every lane has read its scores before P overwrites them
  uint16_t *probs = reinterpret_cast<uint16_t *>(s + r * ldS) + c0;
#pragma unroll
  for (int o = 0; o < kHalf / 8; ++o)
    if (8 * o < width)
      *reinterpret_cast<uint4 *>(probs + 8 * o) =
          make_uint4(packed[4 * o], packed[4 * o + 1], packed[4 * o + 2],
                     packed[4 * o + 3]);
  if (half == 0) {
    rowMax[r] = m;
    rowSum[r] = rowSum[r] * factor + sum;
  }
#pragma unroll
  for (int u = 0; u < kEdge / 2; ++u)
    factors[r * kScratchLd + half * (kEdge / 2) + u] = factor;
  __syncwarp(); // P, the factors and the statistics are written
}

/// scale * dS of a 16 x 16 tile of queries i0 + row0 + r (the block's row
/// row0 + r, of `rows` in the sequence) against keys j0 + col0 + c (of
/// `cols`), from its S and dP tiles in the warp's scratch, rounded to T at
/// ds[r * ld + c]. The whole warp calls it.
template <typename T>
__device__ inline void
dsTile(const AttentionDims &a, const unsigned char *maskHead,
       const DropoutParams &drop, bool dropout, int64_t h, int64_t i0,
       int64_t j0, int row0, int col0, int rows, int cols, const float *lseRows,
       const float *deltaRows, const float *scratchS, const float *scratchP,
       uint16_t *ds, int ld, int lane) {
  auto live = [&](int e) {
    const int row = row0 + e / kEdge, col = col0 + e % kEdge;
    return row < rows && col < cols && lseRows[row] != kNegInf &&
           !maskedOut(a, maskHead, i0 + row, j0 + col);
  };
  auto lineBase = [&](int r) {
    return static_cast<uint64_t>((h * a.sq + i0 + row0 + r) * a.sk + j0 + col0);
  };
  bool drops;
  const TileKeep keep =
      tileKeepIfLive(drop, dropout, live, lineBase, lane, drops);
  for (int e = lane; e < kEdge * kEdge; e += 32) {
    const int r = e / kEdge, c = e % kEdge;
    const int row = row0 + r;
    const float f =
        drops ? tileKeepFactor(drop, keep, lineBase(r), r, c) : 1.0f;
    float g = 0.0f;
    if (live(e)) {
      const float pr =
          expf(scratchS[r * kScratchLd + c] * a.scale - lseRows[row]);
      g = pr * (scratchP[r * kScratchLd + c] * f - deltaRows[row]);
    }
    ds[r * ld + c] = round16<T>(g * a.scale);
  }
  __syncwarp(); // the scratch tiles are read before the next tile
}

/// scale * dS^T and the dropped P^T of a 16 x 16 tile of keys j0 + key0 + r
/// (of `cols` in the sequence) against queries i0 + query0 + c (the step's
/// query query0 + c, of `rows`), from its S^T and dP^T tiles in the warp's
/// scratch, rounded to T at dsT[r * ld + c] and pT[r * ld + c]. A line of
/// the mask is a query (a column of the tile). The whole warp calls it.
template <typename T>
__device__ inline void
dsPTransposedTile(const AttentionDims &a, const unsigned char *maskHead,
                  const DropoutParams &drop, bool dropout, int64_t h,
                  int64_t i0, int64_t j0, int key0, int query0, int rows,
                  int cols, const float *lseRows, const float *deltaRows,
                  const float *scratchS, const float *scratchP, uint16_t *dsT,
                  uint16_t *pT, int ld, int lane) {
  auto live = [&](int e) {
    const int key = key0 + e / kEdge, query = query0 + e % kEdge;
    return key < cols && query < rows && lseRows[query] != kNegInf &&
           !maskedOut(a, maskHead, i0 + query, j0 + key);
  };
  auto lineBase = [&](int c) {
    return static_cast<uint64_t>((h * a.sq + i0 + query0 + c) * a.sk + j0 +
                                 key0);
  };
  bool drops;
  const TileKeep keep =
      tileKeepIfLive(drop, dropout, live, lineBase, lane, drops);
  for (int e = lane; e < kEdge * kEdge; e += 32) {
    const int r = e / kEdge, c = e % kEdge;
    const int query = query0 + c;
    const float f =
        drops ? tileKeepFactor(drop, keep, lineBase(c), c, r) : 1.0f;
    float g = 0.0f, dropped = 0.0f;
    if (live(e)) {
      const float pr =
          expf(scratchS[r * kScratchLd + c] * a.scale - lseRows[query]);
      g = pr * (scratchP[r * kScratchLd + c] * f - deltaRows[query]);
      dropped = pr * f;
    }
    dsT[r * ld + c] = round16<T>(g * a.scale);
    pT[r * ld + c] = round16<T>(dropped);
  }
  __syncwarp(); // the scratch tiles are read before the next tile
}

template <typename T, typename O>
__device__ void forward16(const AttentionDims &a, const uint16_t *q,
                          const uint16_t *k, const uint16_t *v,
                          const unsigned char *mask, const DropoutParams &drop,
                          bool dropout, const Tiling16 &t, unsigned char *smem,
                          O *out, float *lse) {
  const ForwardLayout L(t);
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *kv = reinterpret_cast<uint16_t *>(smem + L.kv);
  float *s = reinterpret_cast<float *>(smem + L.s);
  // Row r of P (16-bit) overwrites the first half of row r of S.
  uint16_t *p = reinterpret_cast<uint16_t *>(s);
  const int ldP = 2 * L.ldS;
  float *o = reinterpret_cast<float *>(smem + L.o);
  float *rowMax = reinterpret_cast<float *>(smem + L.stats);
  float *rowSum = rowMax + t.own;
  float *rescale = rowSum + t.own;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int ownTiles = t.own / kEdge, stepTiles = t.step / kEdge;
  const int dvTiles = t.dv16 / kEdge;

  forEachTile(
      a, a.sq, t.own, t.order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's output pass is done
        stage16(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0), a.rows.q.row,
                rows, t.own, static_cast<int>(a.d), t.d16);
        zeroShared(o, t.own * L.ldO);
        for (int r = threadIdx.x; r < t.own; r += kThreads) {
          rowMax[r] = kNegInf;
          rowSum[r] = 0.0f;
        }

        for (int64_t j0 = 0; j0 < a.sk; j0 += t.step) {
          const int cols = countFrom(a.sk, j0, t.step);
          __syncthreads(); // the last P V product is done with kv and P
          if (chunkMasked(a, maskHead, i0, rows, j0, cols))
            continue;
          stage16(kv, L.ldKV, k + attentionRow(a, a.rows.k, h, j0),
                  a.rows.k.row, cols, t.step, static_cast<int>(a.d), t.d16);
          __syncthreads();
          for (int x = warp; x < ownTiles * stepTiles; x += kWarps) {
            const int rt = x / stepTiles, ct = x % stepTiles;
            productTile<T>(s + rt * kEdge * L.ldS + ct * kEdge, L.ldS,
                           qs + rt * kEdge * L.ldQ, L.ldQ,
                           kv + ct * kEdge * L.ldKV, L.ldKV, t.d16 / kEdge);
          }
          __syncthreads(); // S is complete; K is no longer needed
          stage16(kv, L.ldKV, v + attentionRow(a, a.rows.v, h, j0),
                  a.rows.v.row, cols, t.step, static_cast<int>(a.dv), t.dv16);

          // The online softmax, a warp per row.
          for (int r = warp; r < t.own; r += kWarps) {
            const float factor =
                softmaxStepRow<T>(a, maskHead, drop, dropout, h, i0 + r,
                                  r < rows, j0, cols, t.step, s + r * L.ldS,
                                  p + r * ldP, rowMax + r, rowSum + r, lane);
            if (lane == 0)
              rescale[r] = factor;
          }
          __syncthreads(); // P, the rescale factors and V are ready

          // O = rescale * O + P V, a 16 x 16 output tile at a time.
          for (int x = warp; x < ownTiles * dvTiles; x += kWarps) {
            const int rt = x / dvTiles, ct = x % dvTiles;
            float *tileO = o + rt * kEdge * L.ldO + ct * kEdge;
            for (int e = lane; e < kEdge * kEdge; e += 32) {
              const int r = e / kEdge;
              tileO[r * L.ldO + e % kEdge] *= rescale[rt * kEdge + r];
            }
            __syncwarp();
            accumulateTile<T, false>(tileO, L.ldO, p + rt * kEdge * ldP, ldP,
                                     kv + ct * kEdge, L.ldKV, stepTiles);
          }
        }

        __syncthreads(); // O is complete
        for (int r = warp; r < rows; r += kWarps) {
          const float sum = rowSum[r];
          const bool empty = sum == 0.0f; // every key masked
          const float inv = empty ? 0.0f : 1.0f / sum;
          O *orow = out + attentionRow(a, a.rows.o, h, i0 + r);
          for (int x = lane; x < a.dv; x += 32)
            storeOut<T>(orow + x, empty ? 0.0f : o[r * L.ldO + x] * inv);
          if (lane == 0)
            lse[h * a.sq + i0 + r] = empty ? kNegInf : rowMax[r] + logf(sum);
        }
      });
}

template <typename T, typename O>
__device__ void
dq16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
     const uint16_t *v, const unsigned char *mask, const O *out,
     const float *lse, const uint16_t *dout, const DropoutParams &drop,
     bool dropout, const Tiling16 &t, unsigned char *smem, void *dq,
     bool narrowGrads) {
  const DqLayout L(t);
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *gs = reinterpret_cast<uint16_t *>(smem + L.g);
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  uint16_t *ds = reinterpret_cast<uint16_t *>(smem + L.ds);
  float *acc = reinterpret_cast<float *>(smem + L.acc);
  float *lseRows = reinterpret_cast<float *>(smem + L.lse);
  float *deltaRows = reinterpret_cast<float *>(smem + L.delta);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float *scratchS = reinterpret_cast<float *>(smem + L.scratch) +
                    warp * 2 * kEdge * kScratchLd;
  float *scratchP = scratchS + kEdge * kScratchLd;
  const int ownTiles = t.own / kEdge, stepTiles = t.step / kEdge;
  const int dTiles = t.d16 / kEdge;

  forEachTile(
      a, a.sq, t.own, t.order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's output pass is done
        stage16(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0), a.rows.q.row,
                rows, t.own, static_cast<int>(a.d), t.d16);
        stage16(gs, L.ldG, dout + attentionRow(a, a.rows.dout, h, i0),
                a.rows.dout.row, rows, t.own, static_cast<int>(a.dv), t.dv16);
        zeroShared(acc, t.own * L.ldAcc);
        rowTerms<T>(a, out, lse, dout, h, i0, rows, t.own, lseRows, deltaRows);

        for (int64_t j0 = 0; j0 < a.sk; j0 += t.step) {
          const int cols = countFrom(a.sk, j0, t.step);
          __syncthreads(); // the last dS K product is done with ks and ds
          if (chunkMasked(a, maskHead, i0, rows, j0, cols))
            continue;
          stage16(ks, L.ldK, k + attentionRow(a, a.rows.k, h, j0), a.rows.k.row,
                  cols, t.step, static_cast<int>(a.d), t.d16);
          stage16(vs, L.ldV, v + attentionRow(a, a.rows.v, h, j0), a.rows.v.row,
                  cols, t.step, static_cast<int>(a.dv), t.dv16);
          __syncthreads();
          // scale * dS, a 16 x 16 tile at a time from its S and dP tiles.
          for (int x = warp; x < ownTiles * stepTiles; x += kWarps) {
            const int rt = x / stepTiles, ct = x % stepTiles;
            productTile<T>(scratchS, kScratchLd, qs + rt * kEdge * L.ldQ, L.ldQ,
                           ks + ct * kEdge * L.ldK, L.ldK, t.d16 / kEdge);
            productTile<T>(scratchP, kScratchLd, gs + rt * kEdge * L.ldG, L.ldG,
                           vs + ct * kEdge * L.ldV, L.ldV, t.dv16 / kEdge);
            __syncwarp();
            dsTile<T>(a, maskHead, drop, dropout, h, i0, j0, rt * kEdge,
                      ct * kEdge, rows, cols, lseRows, deltaRows, scratchS,
                      scratchP, ds + rt * kEdge * L.ldDs + ct * kEdge, L.ldDs,
                      lane);
          }
          __syncthreads(); // dS is complete
          for (int x = warp; x < ownTiles * dTiles; x += kWarps) {
            const int rt = x / dTiles, ct = x % dTiles;
            accumulateTile<T, false>(acc + rt * kEdge * L.ldAcc + ct * kEdge,
                                     L.ldAcc, ds + rt * kEdge * L.ldDs, L.ldDs,
                                     ks + ct * kEdge, L.ldK, stepTiles);
          }
        }

        __syncthreads(); // dQ is complete
        for (int r = warp; r < rows; r += kWarps) {
          const int64_t g = attentionRow(a, a.rows.dq, h, i0 + r);
          for (int x = lane; x < a.d; x += 32)
            storeGrad<T>(dq, g + x, narrowGrads, acc[r * L.ldAcc + x]);
        }
      });
}

template <typename T, typename O>
__device__ void
dkv16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
      const uint16_t *v, const unsigned char *mask, const O *out,
      const float *lse, const uint16_t *dout, const DropoutParams &drop,
      bool dropout, const Tiling16 &t, unsigned char *smem, void *dk,
      void *dv, bool narrowGrads) {
  const DkvLayout L(t);
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *gs = reinterpret_cast<uint16_t *>(smem + L.g);
  uint16_t *dsT = reinterpret_cast<uint16_t *>(smem + L.dsT);
  uint16_t *pT = reinterpret_cast<uint16_t *>(smem + L.pT);
  float *accK = reinterpret_cast<float *>(smem + L.accK);
  float *accV = reinterpret_cast<float *>(smem + L.accV);
  float *lseRows = reinterpret_cast<float *>(smem + L.lse);
  float *deltaRows = reinterpret_cast<float *>(smem + L.delta);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float *scratchS = reinterpret_cast<float *>(smem + L.scratch) +
                    warp * 2 * kEdge * kScratchLd;
  float *scratchP = scratchS + kEdge * kScratchLd;
  const int ownTiles = t.own / kEdge, stepTiles = t.step / kEdge;
  const int dTiles = t.d16 / kEdge, dvTiles = t.dv16 / kEdge;

  // The loop forEachTile runs, written out: through its lambda ptxas
  // spilled 52 bytes of this kernel's fp16 instance (sm_90).
  const int64_t tilesPerHead = (a.sk + t.own - 1) / t.own;
  for (int64_t tile = blockIdx.x; tile < a.batch * tilesPerHead;
       tile += gridDim.x) {
    int64_t h = 0, index = 0;
    attentionTilePlace(tile, a.batch, tilesPerHead, t.order, h, index);
    const int64_t j0 = index * t.own;
    const int cols = countFrom(a.sk, j0, t.own);
    const unsigned char *maskHead = maskHeadOf(a, mask, h);
    __syncthreads(); // the previous tile's output pass is done
    stage16(ks, L.ldK, k + attentionRow(a, a.rows.k, h, j0), a.rows.k.row, cols,
            t.own, static_cast<int>(a.d), t.d16);
    stage16(vs, L.ldV, v + attentionRow(a, a.rows.v, h, j0), a.rows.v.row, cols,
            t.own, static_cast<int>(a.dv), t.dv16);
    zeroShared(accK, t.own * L.ldAccK);
    zeroShared(accV, t.own * L.ldAccV);

    for (int64_t i0 = 0; i0 < a.sq; i0 += t.step) {
      const int rows = countFrom(a.sq, i0, t.step);
      __syncthreads(); // the last products are done with the query step
      if (chunkMasked(a, maskHead, i0, rows, j0, cols))
        continue;
      stage16(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0), a.rows.q.row,
              rows, t.step, static_cast<int>(a.d), t.d16);
      stage16(gs, L.ldG, dout + attentionRow(a, a.rows.dout, h, i0),
              a.rows.dout.row, rows, t.step, static_cast<int>(a.dv), t.dv16);
      rowTerms<T>(a, out, lse, dout, h, i0, rows, t.step, lseRows, deltaRows);
      __syncthreads();
      // scale * dS^T and the dropped P^T, a 16 x 16 tile (keys x queries)
      // at a time from its S^T and dP^T tiles.
      for (int x = warp; x < ownTiles * stepTiles; x += kWarps) {
        const int kt = x / stepTiles, qt = x % stepTiles;
        productTile<T>(scratchS, kScratchLd, ks + kt * kEdge * L.ldK, L.ldK,
                       qs + qt * kEdge * L.ldQ, L.ldQ, t.d16 / kEdge);
        productTile<T>(scratchP, kScratchLd, vs + kt * kEdge * L.ldV, L.ldV,
                       gs + qt * kEdge * L.ldG, L.ldG, t.dv16 / kEdge);
        __syncwarp();
        dsPTransposedTile<T>(a, maskHead, drop, dropout, h, i0, j0, kt * kEdge,
                             qt * kEdge, rows, cols, lseRows, deltaRows,
                             scratchS, scratchP,
                             dsT + kt * kEdge * L.ldT + qt * kEdge,
                             pT + kt * kEdge * L.ldT + qt * kEdge, L.ldT, lane);
      }
      __syncthreads(); // dS^T and P^T are complete
      const int vTiles = ownTiles * dvTiles;
      for (int x = warp; x < vTiles + ownTiles * dTiles; x += kWarps) {
        if (x < vTiles) {
          const int kt = x / dvTiles, ct = x % dvTiles;
          accumulateTile<T, false>(accV + kt * kEdge * L.ldAccV + ct * kEdge,
                                   L.ldAccV, pT + kt * kEdge * L.ldT, L.ldT,
                                   gs + ct * kEdge, L.ldG, stepTiles);
        } else {
          const int kt = (x - vTiles) / dTiles, ct = (x - vTiles) % dTiles;
          accumulateTile<T, false>(accK + kt * kEdge * L.ldAccK + ct * kEdge,
                                   L.ldAccK, dsT + kt * kEdge * L.ldT, L.ldT,
                                   qs + ct * kEdge, L.ldQ, stepTiles);
        }
      }
    }

    __syncthreads(); // dK and dV are complete
    for (int r = warp; r < cols; r += kWarps) {
      const int64_t gk = attentionRow(a, a.rows.dk, h, j0 + r);
      const int64_t gv = attentionRow(a, a.rows.dv, h, j0 + r);
      for (int x = lane; x < a.d; x += 32)
        storeGrad<T>(dk, gk + x, narrowGrads, accK[r * L.ldAccK + x]);
      for (int x = lane; x < a.dv; x += 32)
        storeGrad<T>(dv, gv + x, narrowGrads, accV[r * L.ldAccV + x]);
    }
  }
}

//===----------------------------------------------------------------------===//
// 16-bit operands, accumulators in registers
//===----------------------------------------------------------------------===//
//
// For head dims up to 128 (GPT-2's 64, and the 128 of most larger models)
// and sides of 64 rows or more, the three kernels keep their outputs in
// accumulator fragments for the whole walk instead of loading and storing a
// shared float32 tile around every step, and cut the block's `own` = 64 rows
// into one 16-row strip per warp: warp w forms the S (and dP) tiles of its
// strip, runs the row pass over them and multiplies them into its own
// accumulators, so only the staging of the streamed side is a block-wide
// phase (two barriers per step instead of four, and for d = 64 about a
// third less shared-memory traffic in the forward: 152 KB instead of 232 per
// step of 64 keys). Per-row
// factors reach the opaque accumulators through a fragment of the same type
// loaded from a 16 x 16 tile whose row r holds row r's factor: elementwise
// products of two fragments of one type pair the same matrix elements. The
// outputs are stored to shared memory once, at the end, and written out as
// the general kernels write them.
//
// Every output element is still accumulated by one warp over the same
// sequence of 16-deep tensor-core steps as the general kernels (the tiles of
// the streamed side in order), so the backward's results are bitwise
// theirs; the forward's row pass (softmaxStepStrip) runs the strip's rows
// side by side and adds a row's sum in another order, so its results agree
// to rounding.
//
// Where two buffers fit (head dims up to 64), the next live step of the
// streamed side is copied in with cp.async while this one is used
// (walkSteps), and a chunk the mask leaves whole reads no mask (chunkState).

/// The rows a register kernel's block owns: one 16-row strip per warp.
constexpr int kRegOwn = kWarps * kEdge;

/// The accumulator fragments per output (kTiles) of the register kernel
/// instance for a's head dims: 4 up to 64, 8 up to 128, else 0 (none).
int regTilesFor(const AttentionDims &a) {
  const int widest = std::max(roundUp16(a.d), roundUp16(a.dv));
  return widest <= 4 * kEdge ? 4 : widest <= 8 * kEdge ? 8 : 0;
}

/// A 16 x 16 tile of float32 whose line r holds value(r), for scaling the
/// rows of a warp's accumulators; the warp's 32 lanes fill it.
template <typename Value>
__device__ inline void fillRowFactors(float *tile, int lane, Value value) {
  for (int e = lane; e < kEdge * kEdge; e += 32)
    tile[(e / kEdge) * kScratchLd + e % kEdge] = value(e / kEdge);
  __syncwarp();
}

/// acc[t] *= the row factors in `tile` for t < count.
template <int kTiles>
__device__ inline void scaleRows(Accumulator *acc, int count,
                                 const float *tile) {
  Accumulator f;
  wmma::load_matrix_sync(f, tile, kScratchLd, wmma::mem_row_major);
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
    if (t < count)
      for (int i = 0; i < f.num_elements; ++i)
        acc[t].x[i] *= f.x[i];
}

/// acc[t] += A B_t over `steps` 16-deep slices, for t < count: A is the
/// warp's 16-row strip (row-major at a, stride lda), B_t the 16 columns from
/// t * 16 on of the row-major (16 steps) x (16 count) matrix at b. Each A
/// slice is loaded once for every t.
template <typename T, int kTiles>
__device__ inline void mmaStrip(Accumulator *acc, int count, const uint16_t *a,
                                int lda, const uint16_t *b, int ldb,
                                int steps) {
  wmma::fragment<wmma::matrix_a, kEdge, kEdge, kEdge, T, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, kEdge, kEdge, kEdge, T, wmma::row_major> fb;
  for (int k = 0; k < steps; ++k) {
    wmma::load_matrix_sync(fa, reinterpret_cast<const T *>(a + k * kEdge),
                           static_cast<unsigned>(lda));
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
      if (t < count) {
        wmma::load_matrix_sync(
            fb, reinterpret_cast<const T *>(b + k * kEdge * ldb + t * kEdge),
            static_cast<unsigned>(ldb));
        wmma::mma_sync(acc[t], fa, fb, acc[t]);
      }
  }
}

template <int kTiles>
__device__ inline void zeroAccumulators(Accumulator *acc) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
    wmma::fill_fragment(acc[t], 0.0f);
}

/// Stores the warp's accumulators acc[t] (t < count), the 16-row strip from
/// row `r0` on, to the float32 rows at `rows` (stride ld).
template <int kTiles>
__device__ inline void storeStrip(float *rows, int ld, int r0,
                                  const Accumulator *acc, int count) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
    if (t < count)
      wmma::store_matrix_sync(rows + r0 * ld + t * kEdge, acc[t],
                              static_cast<unsigned>(ld), wmma::mem_row_major);
  __syncwarp();
}

/// Forward: the query tile, the K and V steps (`buffer` bytes apart from the
/// next buffer's, when there are two), each warp's float32 scores
/// (16 rows; P overwrites each row in 16 bits) and row-factor tile, and each
/// row's maximum and sum. At the end the output rows, float32 with stride
/// dv16 + kPad32, are stored over the tiles from offset 0.
struct RegForwardLayout {
  int ldQ, ldKV, ldS, ldO;
  size_t q, k, v, buffer, s, factors, stats, bytes;
  __host__ __device__ explicit RegForwardLayout(const Tiling16 &t)
      : ldQ(t.d16 + kPad16), ldKV(maxInt(t.d16, t.dv16) + kPad16),
        ldS(t.step + kPad32), ldO(t.dv16 + kPad32) {
    q = 0;
    k = q + sizeof(uint16_t) * t.own * ldQ;
    v = k + sizeof(uint16_t) * t.step * ldKV;
    buffer = 2 * sizeof(uint16_t) * t.step * ldKV;
    s = k + t.buffers * buffer;
    factors = s + sizeof(float) * t.own * ldS;
    stats = factors + sizeof(float) * kWarps * kEdge * kScratchLd;
    bytes = stats + sizeof(float) * 2 * t.own;
  }
};

/// A step of the streamed side that the mask leaves live: its first row
/// and whether every score of it is (Chunk::Full).
struct LiveStep {
  int64_t at;
  bool full;
};

/// The states of up to kWindowSteps consecutive steps of a register
/// kernel's walk, classified at once (classifyWindow) and kept in the
/// block's shared memory, not in the walk's registers: [first, end) are
/// the rows classified, and bit c of `live` and `masked` is the step from
/// first + c * step (`warpLive` and `warpMasked` are each warp's share).
constexpr int kWindowSteps = 32;
struct ChunkWindow {
  int64_t first, end;
  unsigned live, masked;
  unsigned warpLive[kWarps], warpMasked[kWarps];
};

/// Classifies the steps of a walk over `total` rows from `at` on, at most
/// kWindowSteps of them, into w. The block owns rows [ownFirst, ownFirst +
/// ownCount) of the other side; the walk goes over the keys (the mask's
/// columns) with `overKeys`, else over the queries (its rows). Where the
/// mask's rows are whole 16-byte vectors, every thread reads its share of
/// the window's mask at once and the warps' answers meet in w: each step's
/// chunk is classified as chunkState would (Full only on that path), but
/// the loads of a window are in flight together and its steps cost no
/// barrier each; a causal mask's dead tail costs nothing past the window
/// that reaches it. Otherwise (and under a causal mask, where it reads
/// nothing) chunkState runs step by step. Without a mask every step is
/// Full. Block-wide, three barriers (the first: every thread is done
/// reading the previous window).
__device__ inline void classifyWindow(const AttentionDims &a,
                                      const unsigned char *maskHead,
                                      int64_t ownFirst, int ownCount,
                                      int64_t at, int64_t total, int step,
                                      bool overKeys, ChunkWindow &w) {
  const int64_t span = static_cast<int64_t>(kWindowSteps) * step;
  const int length = static_cast<int>(total - at < span ? total - at : span);
  const int steps = (length + step - 1) / step;
  unsigned live = steps == 32 ? ~0u : (1u << steps) - 1u, masked = 0;
  const int64_t r0 = overKeys ? ownFirst : at, c0 = overKeys ? at : ownFirst;
  const int rows = overKeys ? ownCount : length;
  const int cols = overKeys ? length : ownCount;
  const unsigned char *base =
      maskHead && !a.causal
          ? maskHead + r0 * a.maskRowStride + c0 * a.maskColStride
          : nullptr;
  if (maskHead &&
      (a.causal || a.maskColStride != 1 || a.maskRowStride % 16 != 0 ||
       cols % 16 != 0 || reinterpret_cast<uintptr_t>(base) % 16 != 0)) {
    live = 0;
    for (int c = 0; c < steps; ++c) {
      const int64_t from = at + static_cast<int64_t>(c) * step;
      const int count = countFrom(total, from, step);
      const Chunk state =
          overKeys ? chunkState(a, maskHead, ownFirst, ownCount, from, count)
                   : chunkState(a, maskHead, from, count, ownFirst, ownCount);
      live |= state != Chunk::Dead ? 1u << c : 0u;
      masked |= state == Chunk::Partial ? 1u << c : 0u;
    }
  } else if (maskHead) {
    // A live score is a zero byte in a vector, a masked one a nonzero byte.
    live = 0;
    const int vectors = cols / 16;
    for (int e = threadIdx.x; e < rows * vectors; e += blockDim.x) {
      const int r = e / vectors, x = (e % vectors) * 16;
      const uint4 m =
          *reinterpret_cast<const uint4 *>(base + r * a.maskRowStride + x);
      const unsigned bit = 1u << ((overKeys ? x : r) / step);
      if (hasZeroByte(m.x) || hasZeroByte(m.y) || hasZeroByte(m.z) ||
          hasZeroByte(m.w))
        live |= bit;
      if ((m.x | m.y | m.z | m.w) != 0)
        masked |= bit;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      live |= __shfl_xor_sync(kFullMask, live, offset);
      masked |= __shfl_xor_sync(kFullMask, masked, offset);
    }
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    w.warpLive[threadIdx.x / 32] = live;
    w.warpMasked[threadIdx.x / 32] = masked;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    w.first = at;
    w.end = at + length;
    w.live = w.masked = 0;
    for (int i = 0; i < kWarps; ++i) {
      w.live |= w.warpLive[i];
      w.masked |= w.warpMasked[i];
    }
  }
  __syncthreads();
}

/// The first step of `total` rows from `from` on (in steps of `step`) that
/// the mask leaves live, read from the ChunkWindow w: `fill(at)` classifies
/// the window from `at` when `from` lies past the one in w (block-wide).
/// {total, false} when none is. The walk asks for steps in order, so each
/// is classified once.
template <typename Fill>
__device__ inline LiveStep nextLiveWindowed(const ChunkWindow &w, int64_t from,
                                            int64_t total, int step,
                                            Fill fill) {
  for (int64_t at = from; at < total; at = w.end) {
    if (at >= w.end)
      fill(at);
    const int c = static_cast<int>(at - w.first) / step;
    const unsigned rest = w.live >> c;
    if (rest != 0) {
      const int n = c + __ffs(static_cast<int>(rest)) - 1;
      return {w.first + static_cast<int64_t>(n) * step,
              ((w.masked >> n) & 1u) == 0};
    }
  }
  return {total, false};
}

/// The block's ChunkWindow, marked empty. Block-wide (a barrier: every
/// thread is done reading the window of the block's previous tile).
__device__ inline ChunkWindow &emptyWindow() {
  __shared__ ChunkWindow window;
  __syncthreads();
  if (threadIdx.x == 0)
    window.first = window.end = 0;
  __syncthreads();
  return window;
}

/// Queues the K and V rows of the step of keys from j0 (head h) at ks and
/// vs (strides ldK and ldV) with stage16Async. Called by the whole block.
__device__ inline void stageKeysValues(const AttentionDims &a,
                                       const uint16_t *k, const uint16_t *v,
                                       int64_t h, int64_t j0, const Tiling16 &t,
                                       uint16_t *ks, int ldK, uint16_t *vs,
                                       int ldV) {
  const int cols = countFrom(a.sk, j0, t.step);
  stage16Async(ks, ldK, k + attentionRow(a, a.rows.k, h, j0), a.rows.k.row,
               cols, t.step, static_cast<int>(a.d), t.d16);
  stage16Async(vs, ldV, v + attentionRow(a, a.rows.v, h, j0), a.rows.v.row,
               cols, t.step, static_cast<int>(a.dv), t.dv16);
}

/// A register kernel's walk over the streamed side (`total` rows in steps
/// of t.step) for one tile: `liveFrom(at)` is the first live step from `at`
/// on (nextLiveWindowed; block-wide), `stage(at, b)` queues step `at` into
/// buffer b (block-wide, cp.async), `use(at, b, full)` runs the step. With
/// two buffers the next live step is copied in while this one is used. The
/// caller queues the tile's own rows first: they join the first group, and
/// the walk waits for everything before it returns.
template <typename Live, typename Stage, typename Use>
__device__ void walkSteps(int64_t total, const Tiling16 &t, Live liveFrom,
                          Stage stage, Use use) {
  const bool ahead = t.buffers == 2;
  LiveStep now = liveFrom(0);
  if (ahead && now.at < total)
    stage(now.at, 0);
  __pipeline_commit();
  for (int b = 0; now.at < total; b = ahead ? b ^ 1 : 0) {
    __syncthreads(); // every warp is done with the buffer staged next
    const LiveStep next = liveFrom(now.at + t.step);
    if (!ahead)
      stage(now.at, 0);
    else if (next.at < total)
      stage(next.at, b ^ 1);
    __pipeline_commit();
    __pipeline_wait_prior(ahead && next.at < total ? 1 : 0);
    __syncthreads(); // this step's tiles are in
    use(now.at, b, now.full);
    now = next;
  }
  __pipeline_wait_prior(0); // the own rows, when no step was live
}

/// walkSteps over the keys, for the forward and dQ register kernels: the
/// block's queries [i0, i0 + rows) of head h, K and V staged at ks and vs
/// (strides ldK and ldV, `buffer` bytes to the second buffer). For each
/// live step a warp whose strip (from row r0) is in the sequence runs
/// body(j0, cols, K rows, V rows, mask), the mask null for a chunk it
/// leaves whole.
template <typename Body>
__device__ void walkKeys(const AttentionDims &a, const unsigned char *maskHead,
                         int64_t h, int64_t i0, int rows, int r0,
                         const uint16_t *k, const uint16_t *v,
                         const Tiling16 &t, uint16_t *ks, int ldK, uint16_t *vs,
                         int ldV, size_t buffer, Body body) {
  const size_t stride = buffer / sizeof(uint16_t);
  ChunkWindow &window = emptyWindow();
  walkSteps(
      a.sk, t,
      [&](int64_t from) {
        return nextLiveWindowed(window, from, a.sk, t.step, [&](int64_t at) {
          classifyWindow(a, maskHead, i0, rows, at, a.sk, t.step,
                         /*overKeys=*/true, window);
        });
      },
      [&](int64_t j0, int b) {
        stageKeysValues(a, k, v, h, j0, t, ks + b * stride, ldK,
                        vs + b * stride, ldV);
      },
      [&](int64_t j0, int b, bool full) {
        if (r0 >= rows)
          return; // a strip past the end of the sequence
        body(j0, countFrom(a.sk, j0, t.step), ks + b * stride, vs + b * stride,
             full ? nullptr : maskHead);
      });
}

/// Whether an mma.sync kernel's step of `count` rows of the streamed side
/// is whole for a warp whose strips end at row `warpEnd` of the tile's
/// `valid` own rows: no mask to read for it (stepMask null), every one of
/// the warp's rows inside the sequence, and kMaxStep rows long. The step
/// body then runs its instance without per-score tests.
[[maybe_unused]] __device__ inline bool wholeStep(const Tiling16 &t,
                                                  const unsigned char *stepMask,
                                                  int warpEnd, int valid,
                                                  int count) {
  return !stepMask && warpEnd <= valid && count == t.step && t.step == kMaxStep;
}

/// walkKeys for an mma.sync kernel whose warp owns `warpRows` rows from r0:
/// step(full, j0, cols, K rows, V rows, mask) with full a std::true_type
/// where the step is whole for the warp (wholeStep), else a
/// std::false_type.
template <typename Step>
__device__ void
walkKeysWhole(const AttentionDims &a, const unsigned char *maskHead, int64_t h,
              int64_t i0, int rows, int r0, int warpRows, const uint16_t *k,
              const uint16_t *v, const Tiling16 &t, uint16_t *ks, int ldK,
              uint16_t *vs, int ldV, size_t buffer, Step &step) {
  walkKeys(a, maskHead, h, i0, rows, r0, k, v, t, ks, ldK, vs, ldV, buffer,
           [&](int64_t j0, int cols, const uint16_t *kb, const uint16_t *vb,
               const unsigned char *stepMask) {
             if (wholeStep(t, stepMask, r0 + warpRows, rows, cols))
               step(std::true_type{}, j0, cols, kb, vb, stepMask);
             else
               step(std::false_type{}, j0, cols, kb, vb, stepMask);
           });
}

template <typename T, int kTiles, typename O>
__device__ void
forwardReg16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
             const uint16_t *v, const unsigned char *mask,
             const DropoutParams &drop, bool dropout, const Tiling16 &t,
             unsigned char *smem, O *out, float *lse) {
  const RegForwardLayout L(t);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r0 = warp * kEdge; // the warp's strip of the block's rows
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  float *s = reinterpret_cast<float *>(smem + L.s) + r0 * L.ldS;
  // Row r of P (16-bit) overwrites the first half of row r of S.
  uint16_t *p = reinterpret_cast<uint16_t *>(s);
  const int ldP = 2 * L.ldS;
  float *factors =
      reinterpret_cast<float *>(smem + L.factors) + r0 * kScratchLd;
  float *rowMax = reinterpret_cast<float *>(smem + L.stats) + r0;
  float *rowSum = rowMax + t.own;
  const int stepTiles = t.step / kEdge, dvTiles = t.dv16 / kEdge;
  Accumulator acc[kTiles];

  forEachTile(
      a, a.sq, t.own, t.order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's output pass is done
        stage16Async(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0),
                     a.rows.q.row, rows, t.own, static_cast<int>(a.d), t.d16);
        if (lane < kEdge) {
          rowMax[lane] = kNegInf;
          rowSum[lane] = 0.0f;
        }
        __syncwarp();
        zeroAccumulators<kTiles>(acc);

        walkKeys(
            a, maskHead, h, i0, rows, r0, k, v, t, ks, L.ldKV, vs, L.ldKV,
            L.buffer,
            [&](int64_t j0, int cols, const uint16_t *kb, const uint16_t *vb,
                const unsigned char *stepMask) {
              for (int ct = 0; ct < stepTiles; ++ct)
                productTile<T>(s + ct * kEdge, L.ldS, qs + r0 * L.ldQ, L.ldQ,
                               kb + ct * kEdge * L.ldKV, L.ldKV, t.d16 / kEdge);
              __syncwarp();

              // The online softmax over the strip.
              softmaxStepStrip<T>(a, stepMask, drop, dropout, h, i0 + r0,
                                  rows - r0, j0, cols, t.step, s, L.ldS, rowMax,
                                  rowSum, factors, lane);

              // O = factor * O + P V.
              scaleRows<kTiles>(acc, dvTiles, factors);
              mmaStrip<T, kTiles>(acc, dvTiles, p, ldP, vb, L.ldKV, stepTiles);
              __syncwarp(); // P is read before the next step's S overwrites it
            });

        __syncthreads(); // every warp is done with Q, K and V
        if (r0 >= rows)
          return; // the next tile
        // out = O / rowSum (0 for a row whose every key is masked).
        fillRowFactors(factors, lane, [&](int r) {
          const float sum = rowSum[r];
          return sum == 0.0f ? 0.0f : 1.0f / sum;
        });
        scaleRows<kTiles>(acc, dvTiles, factors);
        float *o = reinterpret_cast<float *>(smem);
        storeStrip<kTiles>(o, L.ldO, r0, acc, dvTiles);
        for (int r = 0; r < kEdge && r0 + r < rows; ++r) {
          const float sum = rowSum[r];
          const bool empty = sum == 0.0f; // every key masked
          O *orow = out + attentionRow(a, a.rows.o, h, i0 + r0 + r);
          for (int x = lane; x < a.dv; x += 32)
            storeOut<T>(orow + x, o[(r0 + r) * L.ldO + x]);
          if (lane == 0)
            lse[h * a.sq + i0 + r0 + r] =
                empty ? kNegInf : rowMax[r] + logf(sum);
        }
      });
}

//===----------------------------------------------------------------------===//
// The register kernels on mma.sync (sm_80 on)
//===----------------------------------------------------------------------===//
//
// WMMA keeps its accumulators' layout opaque, so the register kernels
// above store S (and dP) to shared memory for the element-wise pass and
// read P (dS) back from there as the operand of the next product. PTX's
// mma.sync.m16n8k16 documents its fragments (see mmaM16N8K16), and the
// accumulator of a strip's product over two adjacent 8-column tiles is laid
// out across the lanes exactly as the A operand of a product over those 16
// columns. So S stays in registers, its row statistics are a lane's own
// values plus two shuffles within the lane's quad, and P goes from the
// softmax into P V without touching shared memory (FlashAttention-2's
// forward). The backward does the same with S and dP: dQ (a warp owns 16
// queries) turns them into dS in place for dS K; dK/dV (a warp owns 16
// keys, as FlashAttention-2's backward) forms S^T = K Q^T and dP^T =
// V dO^T, whose accumulators are the A operands of P^T dO and dS^T Q. The
// blocks' own rows and the streamed steps are staged as in the WMMA
// register kernels (walkKeys, walkQueries); the outputs leave from
// registers. Operands come from shared memory through ldmatrix (x4: four
// registers an instruction; .trans for the B operands read down the staged
// rows), whose rows, 16-byte aligned and kPad16 elements apart, fall in
// different banks.
//
// For head dims up to 64 a warp of the forward and of dQ owns two 16-row
// strips of queries (mmaStrips: blocks of 128), so that every K or V
// fragment loaded by ldmatrix feeds two tensor-core steps, not one; a warp
// of dK/dV holds its strip's K and V fragments in registers for the walk. Each
// step of the walk runs in one of two instances: where every score of the
// warp's strips is live (a step of kMaxStep rows that the mask leaves
// whole, within the sequence; all but the diagonal's steps under a causal
// mask) the per-score tests of mask, bounds and empty rows drop out and the
// tile counts are constants; otherwise they are made per score. Scores are
// exponentiated in base 2 with the scale times log2(e) folded into one
// multiply or multiply-add a score (exp2f is one PTX instruction,
// ex2.approx.f32, where expf takes eight); the log-sum-exp stays in
// natural units.

/// D += A B for one 16 x 8 x 16 tile on the tensor cores (PTX
/// mma.sync.aligned.m16n8k16.row.col.f32, T's format for A and B). With
/// g = lane / 4 and t = lane % 4, a lane holds a[0] = A[g][2t, 2t+1],
/// a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8,
/// 2t+9]; b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]; d[0..1] =
/// D[g][2t, 2t+1], d[2..3] = D[g+8][2t, 2t+1] (two 16-bit elements a
/// register, the lower index in the low half). The whole warp calls it.
template <typename T>
__device__ inline void mmaM16N8K16(float (&d)[4], const uint32_t (&a)[4],
                                   const uint32_t (&b)[2]) {
#ifdef MTC_CUDA_EMULATION
  ::mtc::cudaemu::mmaM16N8K16(d, a, b, isBf16<T>());
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (isBf16<T>())
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
#endif
}

/// PTX's ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives
/// `row`, the shared-memory address of row l % 8 of the 8 x 8 matrix l / 8
/// (16 bytes, 16-byte aligned); r[j] gets matrix j's row l / 4, columns
/// 2 (l % 4) and the next (the lower column in the low half), or with
/// kTrans its column l / 4, rows 2 (l % 4) and the next: one instruction for
/// four fragment registers. The whole warp calls it.
template <bool kTrans>
__device__ inline void ldmatrixX4(uint32_t (&r)[4], const uint16_t *row) {
#ifdef MTC_CUDA_EMULATION
  ::mtc::cudaemu::ldmatrixX4(r, row, kTrans);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
}

/// Whether this compilation has mma.sync for 16-bit operands.
__device__ constexpr bool mmaSupported() {
#if defined(MTC_CUDA_EMULATION) ||                                             \
    (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
  return true;
#else
  return false;
#endif
}

// sm_75's compilation instantiates no mma.sync kernel, hence the
// [[maybe_unused]] on its helpers.

/// Two 16-bit elements as one fragment register, lo in the low half.
[[maybe_unused]] __device__ inline uint32_t packPair(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}

/// Output columns per mma.sync tile.
constexpr int kNarrow = 8;
/// 8-key tiles of the longest step.
[[maybe_unused]] constexpr int kStepTiles = kMaxStep / kNarrow;

/// Shared memory: the query tile and the K and V steps (`buffer` bytes
/// apart from the next buffer's, when there are two). Nothing else: S, P,
/// the statistics and the output stay in registers.
struct MmaForwardLayout {
  int ldQ, ldKV;
  size_t q, k, v, buffer, bytes;
  __host__ __device__ explicit MmaForwardLayout(const Tiling16 &t)
      : ldQ(t.d16 + kPad16), ldKV(maxInt(t.d16, t.dv16) + kPad16) {
    q = 0;
    k = q + sizeof(uint16_t) * t.own * ldQ;
    v = k + sizeof(uint16_t) * t.step * ldKV;
    buffer = 2 * sizeof(uint16_t) * t.step * ldKV;
    bytes = k + t.buffers * buffer;
  }
};

/// Backward dQ on mma.sync: the query and output gradient tiles, the K and V
/// steps (`buffer` bytes apart from the next buffer's, when there are two)
/// and each row's log-sum-exp and delta. S, dP, dS and dQ stay in
/// registers.
struct MmaDqLayout {
  int ldQ, ldG, ldK, ldV;
  size_t q, g, k, v, buffer, lse, delta, bytes;
  __host__ __device__ explicit MmaDqLayout(const Tiling16 &t)
      : ldQ(t.d16 + kPad16), ldG(t.dv16 + kPad16), ldK(t.d16 + kPad16),
        ldV(t.dv16 + kPad16) {
    q = 0;
    g = q + sizeof(uint16_t) * t.own * ldQ;
    k = g + sizeof(uint16_t) * t.own * ldG;
    v = k + sizeof(uint16_t) * t.step * ldK;
    buffer = sizeof(uint16_t) * t.step * (ldK + ldV);
    lse = k + t.buffers * buffer;
    delta = lse + sizeof(float) * t.own;
    bytes = delta + sizeof(float) * t.own;
  }
};

/// Backward dK/dV on mma.sync (own = keys, step = queries): the key and
/// value tiles, the query and output gradient steps (`buffer` bytes apart
/// from the next buffer's, when there are two) and each query's log-sum-exp
/// and delta (per buffer, `rowBuffer` bytes apart). S^T, dP^T, P^T, dS^T,
/// dK and dV stay in registers.
struct MmaDkvLayout {
  int ldK, ldV, ldQ, ldG;
  size_t k, v, q, g, buffer, lse, delta, rowBuffer, bytes;
  __host__ __device__ explicit MmaDkvLayout(const Tiling16 &t)
      : ldK(t.d16 + kPad16), ldV(t.dv16 + kPad16), ldQ(t.d16 + kPad16),
        ldG(t.dv16 + kPad16) {
    k = 0;
    v = k + sizeof(uint16_t) * t.own * ldK;
    q = v + sizeof(uint16_t) * t.own * ldV;
    g = q + sizeof(uint16_t) * t.step * ldQ;
    buffer = sizeof(uint16_t) * t.step * (ldQ + ldG);
    lse = q + t.buffers * buffer;
    delta = lse + sizeof(float) * t.step;
    rowBuffer = 2 * sizeof(float) * t.step;
    bytes = lse + t.buffers * rowBuffer;
  }
};

/// The dropout factors of the lane's two consecutive scores from flat
/// index `index` (drop.scale or 0 each), drawing the one or two groups
/// that hold them.
[[maybe_unused]] __device__ inline void
pairKeepFactors(const DropoutParams &drop, uint64_t index, float (&f)[2]) {
  const uint64_t group = index / kDropoutGroup;
  const unsigned bits = groupKeepBits(drop, group);
  const int at = static_cast<int>(index % kDropoutGroup);
  const unsigned next = at + 1 < kDropoutGroup ? bits >> (at + 1)
                                               : groupKeepBits(drop, group + 1);
  f[0] = (bits >> at) & 1u ? drop.scale : 0.0f;
  f[1] = next & 1u ? drop.scale : 0.0f;
}

/// stripsProduct with the A fragments of slice kc from loadA(kc, fa):
/// with kChunks, the loop over the slices is unrolled for at most kChunks
/// of them, so that loadA may read registers by kc.
template <typename T, int kGroup, int kStrips, int kChunks = 0, typename LoadA>
__device__ inline void stripsProductFrom(float (&acc)[kStrips][kGroup][4],
                                         LoadA loadA, const uint16_t *b,
                                         int ldb, int chunks, int first,
                                         int tiles) {
  static_assert(kGroup % 2 == 0, "B fragments loaded two tiles at a time");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int st = 0; st < kStrips; ++st)
#pragma unroll
    for (int n = 0; n < kGroup; ++n)
      acc[st][n][0] = acc[st][n][1] = acc[st][n][2] = acc[st][n][3] = 0.0f;
  // ldmatrix rows: B's matrices are tile n's two halves of the slice
  // (b[0], b[1]), then tile n + 1's.
  const uint16_t *br =
      b + ((first + lane / 16) * kNarrow + lane % 8) * ldb + 8 * (lane / 8 % 2);
  const auto slice = [&](int kc) {
    uint32_t fa[kStrips][4];
    loadA(kc, fa);
#pragma unroll
    for (int n = 0; n < kGroup; n += 2)
      if (first + n < tiles) {
        uint32_t fb[4];
        ldmatrixX4<false>(fb, br + n * kNarrow * ldb + kc * kEdge);
        const uint32_t lo[2] = {fb[0], fb[1]}, hi[2] = {fb[2], fb[3]};
#pragma unroll
        for (int st = 0; st < kStrips; ++st) {
          mmaM16N8K16<T>(acc[st][n], fa[st], lo);
          mmaM16N8K16<T>(acc[st][n + 1], fa[st], hi);
        }
      }
  };
  if constexpr (kChunks == 0) {
    for (int kc = 0; kc < chunks; ++kc)
      slice(kc);
  } else {
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc)
      if (kc < chunks)
        slice(kc);
  }
}

/// The A fragments of slice kc of a warp's 16-row strips: kStrips strips
/// 16 rows apart from a (row-major, stride lda, rows 16-byte aligned), as
/// mmaM16N8K16 takes them. The whole warp calls it.
template <int kStrips>
__device__ inline void stripFragments(uint32_t (&fa)[kStrips][4],
                                      const uint16_t *a, int lda, int kc) {
  const int lane = threadIdx.x % 32;
  // ldmatrix rows: A's matrices are its four 8 x 8 quarters in fragment
  // order (rows 8 (j % 2), columns 8 (j / 2)).
  const uint16_t *ar =
      a + (lane % 8 + 8 * (lane / 8 % 2)) * lda + 8 * (lane / 16);
#pragma unroll
  for (int st = 0; st < kStrips; ++st)
    ldmatrixX4<false>(fa[st], ar + st * kEdge * lda + kc * kEdge);
}

/// acc[st][n] = A_st B_n^T for n < kGroup (tiles first + n < tiles; the
/// others are left 0; first and tiles even): A_st the warp's 16-row strip st
/// (row-major from a + 16 st rows, stride lda), B_n the 8 rows from row
/// 8 (first + n) of b (stride ldb), `chunks` 16-deep slices of both, rows
/// 16-byte aligned. Element e of acc[st][n] is A_st's row g + 8 (e / 2)
/// against B's row 8 (first + n) + 2 quad + e % 2. Each B fragment is
/// loaded once for all kStrips strips. The whole warp calls it.
template <typename T, int kGroup, int kStrips>
__device__ inline void
stripsProduct(float (&acc)[kStrips][kGroup][4], const uint16_t *a, int lda,
              const uint16_t *b, int ldb, int chunks, int first, int tiles) {
  stripsProductFrom<T, kGroup, kStrips>(
      acc,
      [&](int kc, uint32_t(&fa)[kStrips][4]) {
        stripFragments<kStrips>(fa, a, lda, kc);
      },
      b, ldb, chunks, first, tiles);
}

/// stripsProduct for one strip whose A fragments for its first kChunks
/// slices (chunks of them) are held in registers (stripFragments).
template <typename T, int kGroup, int kChunks>
__device__ inline void
heldStripProduct(float (&acc)[kGroup][4], const uint32_t (&held)[kChunks][4],
                 const uint16_t *b, int ldb, int chunks, int first, int tiles) {
  stripsProductFrom<T, kGroup, 1, kChunks>(
      reinterpret_cast<float(&)[1][kGroup][4]>(acc),
      [&](int kc, uint32_t(&fa)[1][4]) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
          fa[0][r] = held[kc][r];
      },
      b, ldb, chunks, first, tiles);
}

/// stripsProduct for one strip (acc[n]).
template <typename T, int kGroup>
__device__ inline void stripProduct(float (&acc)[kGroup][4], const uint16_t *a,
                                    int lda, const uint16_t *b, int ldb,
                                    int chunks, int first, int tiles) {
  stripsProduct<T, kGroup, 1>(reinterpret_cast<float(&)[1][kGroup][4]>(acc), a,
                              lda, b, ldb, chunks, first, tiles);
}

/// o[st][n] += P_st B_n for n < outTiles (even): P_st the warp's strip st,
/// 16 x (8 tiles), held as A halves (p[st][t][x]: row g + 8x, columns
/// 8t + 2 quad and the next; an accumulator of stripsProduct rounded in
/// place), B_n the 8 columns from 8n on of the rows at b (stride ldb, rows
/// 16-byte aligned), row r of them against P's column r. tiles is even.
/// Each B fragment is loaded once for all kStrips strips. The whole warp
/// calls it.
template <typename T, int kGroup, int kOut, int kStrips>
__device__ inline void stripsTimesRows(float (&o)[kStrips][kOut][4],
                                       const uint32_t (&p)[kStrips][kGroup][2],
                                       const uint16_t *b, int ldb, int tiles,
                                       int outTiles) {
  static_assert(kGroup % 2 == 0 && kOut % 2 == 0,
                "16-deep steps of two 8-column tiles");
  const int lane = threadIdx.x % 32;
  // ldmatrix.trans rows: output tile n's two 8-row halves of the slice
  // (b[0], b[1]), then tile n + 1's.
  const uint16_t *br =
      b + (lane % 8 + 8 * (lane / 8 % 2)) * ldb + 8 * (lane / 16);
#pragma unroll
  for (int kc = 0; kc < kGroup / 2; ++kc)
    if (2 * kc < tiles) {
      // Columns 16 kc .. 16 kc + 15 of P are its tiles 2 kc and 2 kc + 1.
      uint32_t fa[kStrips][4];
#pragma unroll
      for (int st = 0; st < kStrips; ++st) {
        fa[st][0] = p[st][2 * kc][0];
        fa[st][1] = p[st][2 * kc][1];
        fa[st][2] = p[st][2 * kc + 1][0];
        fa[st][3] = p[st][2 * kc + 1][1];
      }
#pragma unroll
      for (int n = 0; n < kOut; n += 2)
        if (n < outTiles) {
          uint32_t fb[4];
          ldmatrixX4<true>(fb, br + kc * kEdge * ldb + n * kNarrow);
          const uint32_t lo[2] = {fb[0], fb[1]}, hi[2] = {fb[2], fb[3]};
#pragma unroll
          for (int st = 0; st < kStrips; ++st) {
            mmaM16N8K16<T>(o[st][n], fa[st], lo);
            mmaM16N8K16<T>(o[st][n + 1], fa[st], hi);
          }
        }
    }
}

/// stripsTimesRows for one strip (o[n], p[t][x]).
template <typename T, int kGroup, int kOut>
__device__ inline void
stripTimesRows(float (&o)[kOut][4], const uint32_t (&p)[kGroup][2],
               const uint16_t *b, int ldb, int tiles, int outTiles) {
  stripsTimesRows<T, kGroup, kOut, 1>(
      reinterpret_cast<float(&)[1][kOut][4]>(o),
      reinterpret_cast<const uint32_t(&)[1][kGroup][2]>(p), b, ldb, tiles,
      outTiles);
}

/// Stores a warp's 16-row strip of gradient rows from its accumulators
/// (acc[n][2x + y]: row g + 8x of the strip, column 8n + 2 quad + y): rows
/// below `valid`, columns below `width`, at grad + rowAt(row) + column.
template <typename T, int kOut, typename RowAt>
__device__ inline void storeGradStrip(void *grad, bool narrow,
                                      const float (&acc)[kOut][4], int valid,
                                      int width, RowAt rowAt) {
  const int lane = threadIdx.x % 32, g = lane / 4, quad = lane % 4;
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int r = g + 8 * x;
    if (r >= valid)
      continue;
    const int64_t row = rowAt(r);
#pragma unroll
    for (int n = 0; n < kOut; ++n)
#pragma unroll
      for (int y = 0; y < 2; ++y) {
        const int c = n * kNarrow + 2 * quad + y;
        if (c < width)
          storeGrad<T>(grad, row + c, narrow, acc[n][2 * x + y]);
      }
  }
}

/// storeGradStrip for a warp's kStrips strips from row r0 of the tile's
/// `valid` rows (rowAt(r): where tile row r starts).
template <typename T, int kStrips, int kOut, typename RowAt>
__device__ inline void
storeGradStrips(void *grad, bool narrow, const float (&acc)[kStrips][kOut][4],
                int r0, int valid, int width, RowAt rowAt) {
#pragma unroll
  for (int st = 0; st < kStrips; ++st) {
    const int first = r0 + kEdge * st;
    if (first >= valid)
      return;
    storeGradStrip<T>(grad, narrow, acc[st], valid - first, width,
                      [&](int r) { return rowAt(first + r); });
  }
}

/// The dropout factors of the keys at positions g and g + 8 of a line of 16
/// consecutive keys of one query (flat index of its first key: base), the
/// quad's query: the line spans at most kTileGroupsPerLine groups, and lane
/// 4u + quad draws group u of its quad's line for the 8 lanes of the quad
/// column, which read it by shuffles. The whole warp calls it.
[[maybe_unused]] __device__ inline void
keyPairKeepFactors(const DropoutParams &drop, uint64_t base, float (&f)[2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, quad = lane % 4;
  const int lead = static_cast<int>(base % kDropoutGroup);
  const unsigned bits = g < kTileGroupsPerLine
                            ? groupKeepBits(drop, base / kDropoutGroup + g)
                            : 0u;
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int pos = g + 8 * x;
    const unsigned held =
        __shfl_sync(kFullMask, bits, 4 * ((lead + pos) / kDropoutGroup) + quad);
    f[x] = (held >> ((lead + pos) % kDropoutGroup)) & 1u ? drop.scale : 0.0f;
  }
}

/// The 16-row strips of queries a warp of the mma.sync forward and dQ
/// kernels owns, for kOut 8-column output tiles: two for head dims up to 64
/// (each K and V fragment loaded from shared memory feeds two tensor-core
/// steps, as in FlashAttention-2's 128-query tiles of 4 warps), one for up
/// to 128 (the accumulators of two would not fit the registers). The dK/dV
/// kernel's warps own dkvStrips strips of keys.
__host__ __device__ constexpr int mmaStrips(int kOut) {
  return kOut == 8 ? 2 : 1;
}

/// The 16-row strips of keys a warp of the mma.sync dK/dV kernel owns:
/// one. Two (for head dims up to 64, holding S^T and dP^T a quarter step at
/// a time beside their two sets of accumulators) spilled 28-40 bytes under
/// the 255 registers of two blocks an SM (sm_90).
__host__ __device__ constexpr int dkvStrips(int) { return 1; }

/// kOut 8-column output tiles (8 for dv <= 64, 16 for dv <= 128); a block
/// owns kWarps * 16 * mmaStrips(kOut) queries, warp w the
/// mmaStrips(kOut) strips from row 16 mmaStrips(kOut) w on.
template <typename T, int kOut, typename O>
__device__ void
forwardMma16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
             const uint16_t *v, const unsigned char *mask,
             const DropoutParams &drop, bool dropout, const Tiling16 &t,
             unsigned char *smem, O *out, float *lse) {
  constexpr int kStrips = mmaStrips(kOut);
  const MmaForwardLayout L(t);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, quad = lane % 4;
  const int r0 = warp * kEdge * kStrips; // the warp's first row
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  const int stepTiles = t.step / kNarrow, dTiles = t.d16 / kEdge;
  const int outTiles = t.dv16 / kNarrow;
  const float scaleLog2 = a.scale * kLog2e;

  forEachTile(
      a, a.sq, t.own, t.order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // every warp is done with the previous tile's Q
        stage16Async(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0),
                     a.rows.q.row, rows, t.own, static_cast<int>(a.d), t.d16);
        // The lane's rows g and g + 8 of each strip st (block row
        // r0 + 16 st + g + 8x): their running maximum (base 2), the lane's
        // share of their sums, and their output columns 8n + 2 quad + e.
        float rowMax[kStrips][2], rowSum[kStrips][2];
        float o[kStrips][kOut][4];
#pragma unroll
        for (int st = 0; st < kStrips; ++st) {
          rowMax[st][0] = rowMax[st][1] = kNegInf;
          rowSum[st][0] = rowSum[st][1] = 0.0f;
#pragma unroll
          for (int n = 0; n < kOut; ++n)
            o[st][n][0] = o[st][n][1] = o[st][n][2] = o[st][n][3] = 0.0f;
        }

        // One step of keys; kFull: every score of the warp's strips is live
        // (no mask test, no bound test per score).
        auto step = [&](auto full, int64_t j0, int cols, const uint16_t *kb,
                        const uint16_t *vb, const unsigned char *stepMask) {
          constexpr bool kFull = decltype(full)::value;
          // A full step is kMaxStep long: its tiles are known here.
          const int tiles = kFull ? kStepTiles : stepTiles;
          // S = Q K^T for the strips: 8-key tiles n, accumulators as D.
          float s[kStrips][kStepTiles][4];
          stripsProduct<T, kStepTiles, kStrips>(s, qs + r0 * L.ldQ, L.ldQ, kb,
                                                L.ldKV, dTiles, 0, tiles);

          // The online softmax in base 2 (scores times scale * log2(e)):
          // element e of tile n is row g + 8 (e / 2) of the strip, key
          // 8n + 2 quad + e % 2 of the step.
          bool live[kStrips][kStepTiles][4];
          float factor[kStrips][2];
#pragma unroll
          for (int st = 0; st < kStrips; ++st) {
            float stepMax[2] = {kNegInf, kNegInf};
#pragma unroll
            for (int n = 0; n < kStepTiles; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int r = r0 + kEdge * st + g + 8 * (e / 2),
                          c = n * kNarrow + 2 * quad + e % 2;
                bool &l = live[st][n][e];
                l = n < tiles &&
                    (kFull || (r < rows && c < cols &&
                               !maskedOut(a, stepMask, i0 + r, j0 + c)));
                s[st][n][e] = l ? s[st][n][e] * scaleLog2 : kNegInf;
                stepMax[e / 2] = fmaxf(stepMax[e / 2], s[st][n][e]);
              }
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              // The row's four lanes (a quad) hold its keys of the step.
              stepMax[x] =
                  fmaxf(stepMax[x], __shfl_xor_sync(kFullMask, stepMax[x], 1));
              stepMax[x] =
                  fmaxf(stepMax[x], __shfl_xor_sync(kFullMask, stepMax[x], 2));
              const float m = fmaxf(rowMax[st][x], stepMax[x]);
              // m == -inf: every key so far is masked; nothing to rescale.
              factor[st][x] = m == kNegInf ? 1.0f : exp2f(rowMax[st][x] - m);
              rowMax[st][x] = m;
              rowSum[st][x] *= factor[st][x];
            }
#pragma unroll
            for (int n = 0; n < kOut; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                o[st][n][e] *= factor[st][e / 2];
          }

          // P (dropped, rounded to T) as the A operand of P V: keys
          // 16 kc .. 16 kc + 15 are tiles 2 kc and 2 kc + 1.
          uint32_t p[kStrips][kStepTiles][2];
#pragma unroll
          for (int st = 0; st < kStrips; ++st)
#pragma unroll
            for (int n = 0; n < kStepTiles; ++n)
#pragma unroll
              for (int x = 0; x < 2; ++x) {
                float pr[2] = {0.0f, 0.0f};
                bool any = false;
#pragma unroll
                for (int y = 0; y < 2; ++y)
                  if (live[st][n][2 * x + y]) {
                    pr[y] = exp2f(s[st][n][2 * x + y] - rowMax[st][x]);
                    rowSum[st][x] += pr[y];
                    any = true;
                  }
                if (dropout && any) {
                  float f[2];
                  const int64_t i = i0 + r0 + kEdge * st + g + 8 * x;
                  pairKeepFactors(drop,
                                  static_cast<uint64_t>((h * a.sq + i) * a.sk +
                                                        j0 + n * kNarrow +
                                                        2 * quad),
                                  f);
                  pr[0] *= f[0];
                  pr[1] *= f[1];
                }
                p[st][n][x] = packPair(round16<T>(pr[0]), round16<T>(pr[1]));
              }

          // O += P V.
          stripsTimesRows<T, kStepTiles, kOut, kStrips>(o, p, vb, L.ldKV, tiles,
                                                        outTiles);
        };

        walkKeysWhole(a, maskHead, h, i0, rows, r0, kEdge * kStrips, k, v, t,
                      ks, L.ldKV, vs, L.ldKV, L.buffer, step);

        if (r0 >= rows)
          return; // the next tile

      // out = O / rowSum (0 for a row whose every key is masked).
#pragma unroll
        for (int st = 0; st < kStrips; ++st)
#pragma unroll
          for (int x = 0; x < 2; ++x) {
            float sum = rowSum[st][x];
            sum += __shfl_xor_sync(kFullMask, sum, 1);
            sum += __shfl_xor_sync(kFullMask, sum, 2);
            const int r = r0 + kEdge * st + g + 8 * x;
            if (r >= rows)
              continue;
            const bool empty = sum == 0.0f; // every key masked
            const float inverse = empty ? 0.0f : 1.0f / sum;
            O *orow = out + attentionRow(a, a.rows.o, h, i0 + r);
#pragma unroll
            for (int n = 0; n < kOut; ++n)
#pragma unroll
              for (int y = 0; y < 2; ++y) {
                const int c = n * kNarrow + 2 * quad + y;
                if (n < outTiles && c < a.dv)
                  storeOut<T>(orow + c, o[st][n][2 * x + y] * inverse);
              }
            if (quad == 0)
              lse[h * a.sq + i0 + r] =
                  empty ? kNegInf : rowMax[st][x] * kLn2 + logf(sum);
          }
      });
}

/// Backward dQ, shared memory as DqLayout without the accumulator; at the
/// end the dQ rows, float32 with stride ldAcc, are stored over the staged
/// tiles from offset 0.
template <typename T, int kTiles, typename O>
__device__ void
dqReg16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
        const uint16_t *v, const unsigned char *mask, const O *out,
        const float *lse, const uint16_t *dout, const DropoutParams &drop,
        bool dropout, const Tiling16 &t, unsigned char *smem, void *dq,
        bool narrowGrads, float *deltaHeads) {
  const DqLayout L(t, /*sharedAcc=*/false);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r0 = warp * kEdge; // the warp's strip of the block's queries
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *gs = reinterpret_cast<uint16_t *>(smem + L.g);
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  uint16_t *ds = reinterpret_cast<uint16_t *>(smem + L.ds) + r0 * L.ldDs;
  float *lseRows = reinterpret_cast<float *>(smem + L.lse);
  float *deltaRows = reinterpret_cast<float *>(smem + L.delta);
  float *scratchS = reinterpret_cast<float *>(smem + L.scratch) +
                    warp * 2 * kEdge * kScratchLd;
  float *scratchP = scratchS + kEdge * kScratchLd;
  const int stepTiles = t.step / kEdge, dTiles = t.d16 / kEdge;
  Accumulator acc[kTiles];

  forEachTile(
      a, a.sq, t.own, t.order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's output pass is done
        stage16Async(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0),
                     a.rows.q.row, rows, t.own, static_cast<int>(a.d), t.d16);
        stage16Async(gs, L.ldG, dout + attentionRow(a, a.rows.dout, h, i0),
                     a.rows.dout.row, rows, t.own, static_cast<int>(a.dv),
                     t.dv16);
        rowTerms<T>(a, out, lse, dout, h, i0, rows, t.own, lseRows, deltaRows,
                    deltaHeads);
        zeroAccumulators<kTiles>(acc);

        walkKeys(
            a, maskHead, h, i0, rows, r0, k, v, t, ks, L.ldK, vs, L.ldV,
            L.buffer,
            [&](int64_t j0, int cols, const uint16_t *kb, const uint16_t *vb,
                const unsigned char *stepMask) {
              // The strip's scale * dS, a 16 x 16 tile at a time from its S and
              // dP tiles; line r is query i0 + r0 + r, its keys from j0 + ct *
              // 16 on.
              for (int ct = 0; ct < stepTiles; ++ct) {
                productTile<T>(scratchS, kScratchLd, qs + r0 * L.ldQ, L.ldQ,
                               kb + ct * kEdge * L.ldK, L.ldK, t.d16 / kEdge);
                productTile<T>(scratchP, kScratchLd, gs + r0 * L.ldG, L.ldG,
                               vb + ct * kEdge * L.ldV, L.ldV, t.dv16 / kEdge);
                __syncwarp();
                dsTile<T>(a, stepMask, drop, dropout, h, i0, j0, r0, ct * kEdge,
                          rows, cols, lseRows, deltaRows, scratchS, scratchP,
                          ds + ct * kEdge, L.ldDs, lane);
              }
              // dQ += dS K.
              mmaStrip<T, kTiles>(acc, dTiles, ds, L.ldDs, kb, L.ldK,
                                  stepTiles);
            });

        __syncthreads(); // every warp is done with the staged tiles
        if (r0 >= rows)
          return; // the next tile
        float *o = reinterpret_cast<float *>(smem);
        storeStrip<kTiles>(o, L.ldAcc, r0, acc, dTiles);
        for (int r = 0; r < kEdge && r0 + r < rows; ++r) {
          const int64_t g = attentionRow(a, a.rows.dq, h, i0 + r0 + r);
          for (int x = lane; x < a.d; x += 32)
            storeGrad<T>(dq, g + x, narrowGrads, o[(r0 + r) * L.ldAcc + x]);
        }
      });
}

/// walkSteps over the queries, for the dK/dV register kernels: the block's
/// keys [j0, j0 + cols) of head h. A step's Q and dO rows are staged at qs
/// and gs (strides ldQ and ldG, `buffer` bytes to the second buffer), its
/// queries' log-sum-exp and delta at lseRows and deltaRows (`rowBuffer`
/// bytes to the second buffer's; delta from deltaHeads when given, else
/// from O and dO). For each live step a warp whose strip (from key r0) is
/// in the sequence runs body(i0, rows, Q rows, dO rows, lse, delta, mask),
/// the mask null for a chunk it leaves whole.
template <typename T, typename O, typename Body>
__device__ void
walkQueries(const AttentionDims &a, const unsigned char *maskHead, int64_t h,
            int64_t j0, int cols, int r0, const uint16_t *q,
            const uint16_t *dout, const O *out, const float *lse,
            const float *deltaHeads, const Tiling16 &t, uint16_t *qs, int ldQ,
            uint16_t *gs, int ldG, size_t buffer, float *lseRows,
            float *deltaRows, size_t rowBuffer, Body body) {
  const size_t stride = buffer / sizeof(uint16_t);
  const size_t rowStride = rowBuffer / sizeof(float);
  ChunkWindow &window = emptyWindow();
  walkSteps(
      a.sq, t,
      [&](int64_t from) {
        return nextLiveWindowed(window, from, a.sq, t.step, [&](int64_t at) {
          classifyWindow(a, maskHead, j0, cols, at, a.sq, t.step,
                         /*overKeys=*/false, window);
        });
      },
      [&](int64_t i0, int b) {
        const int rows = countFrom(a.sq, i0, t.step);
        stage16Async(qs + b * stride, ldQ, q + attentionRow(a, a.rows.q, h, i0),
                     a.rows.q.row, rows, t.step, static_cast<int>(a.d), t.d16);
        stage16Async(
            gs + b * stride, ldG, dout + attentionRow(a, a.rows.dout, h, i0),
            a.rows.dout.row, rows, t.step, static_cast<int>(a.dv), t.dv16);
        // Stored at once (not through cp.async).
        if (deltaHeads)
          storedRowTerms(a, lse, deltaHeads, h, i0, rows, t.step,
                         lseRows + b * rowStride, deltaRows + b * rowStride);
        else
          rowTerms<T>(a, out, lse, dout, h, i0, rows, t.step,
                      lseRows + b * rowStride, deltaRows + b * rowStride);
      },
      [&](int64_t i0, int b, bool full) {
        if (r0 >= cols)
          return; // a strip past the end of the sequence
        body(i0, countFrom(a.sq, i0, t.step), qs + b * stride, gs + b * stride,
             lseRows + b * rowStride, deltaRows + b * rowStride,
             full ? nullptr : maskHead);
      });
}

/// Backward dK/dV, shared memory as DkvLayout without the accumulators; at
/// the end the dK rows (stride ldAccK) and then the dV rows (ldAccV),
/// float32, are stored over the staged tiles from offset 0.
template <typename T, int kTiles, typename O>
__device__ void
dkvReg16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
         const uint16_t *v, const unsigned char *mask, const O *out,
         const float *lse, const uint16_t *dout, const DropoutParams &drop,
         bool dropout, const Tiling16 &t, unsigned char *smem, void *dk,
         void *dv, bool narrowGrads, const float *deltaHeads) {
  const DkvLayout L(t, /*sharedAcc=*/false);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r0 = warp * kEdge; // the warp's strip of the block's keys
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *gs = reinterpret_cast<uint16_t *>(smem + L.g);
  uint16_t *dsT = reinterpret_cast<uint16_t *>(smem + L.dsT) + r0 * L.ldT;
  uint16_t *pT = reinterpret_cast<uint16_t *>(smem + L.pT) + r0 * L.ldT;
  float *lseRows = reinterpret_cast<float *>(smem + L.lse);
  float *deltaRows = reinterpret_cast<float *>(smem + L.delta);
  float *scratchS = reinterpret_cast<float *>(smem + L.scratch) +
                    warp * 2 * kEdge * kScratchLd;
  float *scratchP = scratchS + kEdge * kScratchLd;
  const int stepTiles = t.step / kEdge;
  const int dTiles = t.d16 / kEdge, dvTiles = t.dv16 / kEdge;
  Accumulator accK[kTiles], accV[kTiles];

  forEachTile(
      a, a.sk, t.own, t.order, mask,
      [&](int64_t h, int64_t j0, int cols, const unsigned char *maskHead) {
        __syncthreads(); // the previous tile's output pass is done
        stage16Async(ks, L.ldK, k + attentionRow(a, a.rows.k, h, j0),
                     a.rows.k.row, cols, t.own, static_cast<int>(a.d), t.d16);
        stage16Async(vs, L.ldV, v + attentionRow(a, a.rows.v, h, j0),
                     a.rows.v.row, cols, t.own, static_cast<int>(a.dv), t.dv16);
        zeroAccumulators<kTiles>(accK);
        zeroAccumulators<kTiles>(accV);

        walkQueries<T>(
            a, maskHead, h, j0, cols, r0, q, dout, out, lse, deltaHeads, t, qs,
            L.ldQ, gs, L.ldG, L.buffer, lseRows, deltaRows, L.rowBuffer,
            [&](int64_t i0, int rows, const uint16_t *qb, const uint16_t *gb,
                const float *lseB, const float *deltaB,
                const unsigned char *stepMask) {
              // The strip's scale * dS^T and dropped P^T, a 16 x 16 tile (keys
              // x queries) at a time from its S^T and dP^T tiles; a line of the
              // mask is a query (column c of the tile, i0 + qt * 16 + c), its
              // keys from j0 + r0 on.
              for (int qt = 0; qt < stepTiles; ++qt) {
                productTile<T>(scratchS, kScratchLd, ks + r0 * L.ldK, L.ldK,
                               qb + qt * kEdge * L.ldQ, L.ldQ, t.d16 / kEdge);
                productTile<T>(scratchP, kScratchLd, vs + r0 * L.ldV, L.ldV,
                               gb + qt * kEdge * L.ldG, L.ldG, t.dv16 / kEdge);
                __syncwarp();
                dsPTransposedTile<T>(a, stepMask, drop, dropout, h, i0, j0, r0,
                                     qt * kEdge, rows, cols, lseB, deltaB,
                                     scratchS, scratchP, dsT + qt * kEdge,
                                     pT + qt * kEdge, L.ldT, lane);
              }
              // dV += P^T dO, dK += dS^T Q.
              mmaStrip<T, kTiles>(accV, dvTiles, pT, L.ldT, gb, L.ldG,
                                  stepTiles);
              mmaStrip<T, kTiles>(accK, dTiles, dsT, L.ldT, qb, L.ldQ,
                                  stepTiles);
            });

        __syncthreads(); // every warp is done with the staged tiles
        if (r0 >= cols)
          return; // the next tile
        float *outK = reinterpret_cast<float *>(smem);
        float *outV = outK + t.own * L.ldAccK;
        storeStrip<kTiles>(outK, L.ldAccK, r0, accK, dTiles);
        storeStrip<kTiles>(outV, L.ldAccV, r0, accV, dvTiles);
        for (int r = 0; r < kEdge && r0 + r < cols; ++r) {
          const int64_t gk = attentionRow(a, a.rows.dk, h, j0 + r0 + r);
          const int64_t gv = attentionRow(a, a.rows.dv, h, j0 + r0 + r);
          for (int x = lane; x < a.d; x += 32)
            storeGrad<T>(dk, gk + x, narrowGrads,
                         outK[(r0 + r) * L.ldAccK + x]);
          for (int x = lane; x < a.dv; x += 32)
            storeGrad<T>(dv, gv + x, narrowGrads,
                         outV[(r0 + r) * L.ldAccV + x]);
        }
      });
}

/// The 8-row tiles of the streamed side whose S and dP the backward's
/// mma.sync kernels hold at a time, next to kOut accumulator tiles (two
/// sets of them for dK/dV): half a step for head dims <= 64, a quarter for
/// <= 128. A whole step's S and dP for d <= 64 made ptxas spill in dQ
/// under its three blocks an SM.
[[maybe_unused]] __host__ __device__ constexpr int mmaGroupTiles(int kOut) {
  return kOut == 8 ? kStepTiles / 2 : kStepTiles / 4;
}

/// Backward dQ on mma.sync (sm_80 on), kOut 8-column tiles of dQ (8 for
/// head dims <= 64, 16 for <= 128): per step of keys, a warp forms its
/// strips' S = Q K^T and dP = dO V^T, kGroup 8-key tiles at a time, turns
/// them into scale * dS in place (rounded to T: the A operand of dS K) and
/// adds dS K to its dQ accumulators. A block owns kWarps * 16 * mmaStrips
/// queries, warp w the mmaStrips(kOut) strips from row 16 mmaStrips(kOut) w
/// on. Nothing goes through shared memory but the staged tiles.
template <typename T, int kOut, typename O>
__device__ void
dqMma16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
        const uint16_t *v, const unsigned char *mask, const O *out,
        const float *lse, const uint16_t *dout, const DropoutParams &drop,
        bool dropout, const Tiling16 &t, unsigned char *smem, void *dq,
        bool narrowGrads, float *deltaHeads) {
  constexpr int kGroup = mmaGroupTiles(kOut);
  constexpr int kStrips = mmaStrips(kOut);
  const MmaDqLayout L(t);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, quad = lane % 4;
  const int r0 = warp * kEdge * kStrips; // the warp's first query
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *gs = reinterpret_cast<uint16_t *>(smem + L.g);
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  float *lseRows = reinterpret_cast<float *>(smem + L.lse);
  float *deltaRows = reinterpret_cast<float *>(smem + L.delta);
  const int stepTiles = t.step / kNarrow;
  const int dChunks = t.d16 / kEdge, dvChunks = t.dv16 / kEdge;
  const float scaleLog2 = a.scale * kLog2e;

  forEachTile(
      a, a.sq, t.own, t.order, mask,
      [&](int64_t h, int64_t i0, int rows, const unsigned char *maskHead) {
        __syncthreads(); // every warp is done with the previous tile
        stage16Async(qs, L.ldQ, q + attentionRow(a, a.rows.q, h, i0),
                     a.rows.q.row, rows, t.own, static_cast<int>(a.d), t.d16);
        stage16Async(gs, L.ldG, dout + attentionRow(a, a.rows.dout, h, i0),
                     a.rows.dout.row, rows, t.own, static_cast<int>(a.dv),
                     t.dv16);
        rowTerms<T>(a, out, lse, dout, h, i0, rows, t.own, lseRows, deltaRows,
                    deltaHeads);
        // The lane's dQ columns 8n + 2 quad + y of rows g and g + 8 of each
        // strip.
        float acc[kStrips][kOut][4];
#pragma unroll
        for (int st = 0; st < kStrips; ++st)
#pragma unroll
          for (int n = 0; n < kOut; ++n)
            acc[st][n][0] = acc[st][n][1] = acc[st][n][2] = acc[st][n][3] =
                0.0f;

        // One step of keys; kFull: every score of the warp's strips is live.
        auto step = [&](auto full, int64_t j0, int cols, const uint16_t *kb,
                        const uint16_t *vb, const unsigned char *stepMask) {
          constexpr bool kFull = decltype(full)::value;
          // A full step is kMaxStep long: its tiles are known here.
          const int tiles = kFull ? kStepTiles : stepTiles;
          // The rows' log-sum-exp in base 2 and their deltas.
          float rowLse[kStrips][2], rowDelta[kStrips][2];
#pragma unroll
          for (int st = 0; st < kStrips; ++st)
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const int r = r0 + kEdge * st + g + 8 * x;
              rowLse[st][x] = lseRows[r] * kLog2e;
              rowDelta[st][x] = deltaRows[r];
            }
          for (int first = 0; first < tiles; first += kGroup) {
            float s[kStrips][kGroup][4], dp[kStrips][kGroup][4];
            stripsProduct<T, kGroup, kStrips>(s, qs + r0 * L.ldQ, L.ldQ, kb,
                                              L.ldK, dChunks, first, tiles);
            stripsProduct<T, kGroup, kStrips>(dp, gs + r0 * L.ldG, L.ldG, vb,
                                              L.ldV, dvChunks, first, tiles);
            // scale * dS, element 2x + y of tile n: row g + 8x of the strip,
            // key 8 (first + n) + 2 quad + y of the step.
            uint32_t ds[kStrips][kGroup][2];
#pragma unroll
            for (int st = 0; st < kStrips; ++st)
#pragma unroll
              for (int n = 0; n < kGroup; ++n)
#pragma unroll
                for (int x = 0; x < 2; ++x) {
                  const int r = r0 + kEdge * st + g + 8 * x;
                  const int c = (first + n) * kNarrow + 2 * quad;
                  bool live[2], any = false;
#pragma unroll
                  for (int y = 0; y < 2; ++y) {
                    live[y] = first + n < tiles &&
                              (kFull ||
                               (r < rows && c + y < cols &&
                                rowLse[st][x] != kNegInf &&
                                !maskedOut(a, stepMask, i0 + r, j0 + c + y)));
                    any |= live[y];
                  }
                  float f[2] = {1.0f, 1.0f}, value[2] = {0.0f, 0.0f};
                  if (dropout && any)
                    pairKeepFactors(drop,
                                    static_cast<uint64_t>(
                                        (h * a.sq + i0 + r) * a.sk + j0 + c),
                                    f);
#pragma unroll
                  for (int y = 0; y < 2; ++y)
                    if (live[y]) {
                      const float pr = exp2f(
                          fmaf(s[st][n][2 * x + y], scaleLog2, -rowLse[st][x]));
                      value[y] =
                          pr * (dp[st][n][2 * x + y] * f[y] - rowDelta[st][x]);
                    }
                  ds[st][n][x] = packPair(round16<T>(value[0] * a.scale),
                                          round16<T>(value[1] * a.scale));
                }
            // dQ += dS K.
            stripsTimesRows<T, kGroup, kOut, kStrips>(
                acc, ds, kb + first * kNarrow * L.ldK, L.ldK, tiles - first,
                t.d16 / kNarrow);
          }
        };

        walkKeysWhole(a, maskHead, h, i0, rows, r0, kEdge * kStrips, k, v, t,
                      ks, L.ldK, vs, L.ldV, L.buffer, step);

        storeGradStrips<T>(
            dq, narrowGrads, acc, r0, rows, static_cast<int>(a.d),
            [&](int r) { return attentionRow(a, a.rows.dq, h, i0 + r); });
      });
}

/// Backward dK/dV on mma.sync (sm_80 on), kOut 8-column tiles of each (as
/// dqMma16): per step of queries, a warp forms its strips' S^T = K Q^T and
/// dP^T = V dO^T, kGroup 8-query tiles at a time, turns them into the
/// dropped P^T and scale * dS^T in place (rounded to T: the A operands of
/// P^T dO and dS^T Q) and adds those products to its dV and dK
/// accumulators. A block owns kWarps * 16 * dkvStrips(kOut) keys, warp w
/// the dkvStrips(kOut) strips from key 16 dkvStrips(kOut) w on.
template <typename T, int kOut, typename O>
__device__ void
dkvMma16(const AttentionDims &a, const uint16_t *q, const uint16_t *k,
         const uint16_t *v, const unsigned char *mask, const O *out,
         const float *lse, const uint16_t *dout, const DropoutParams &drop,
         bool dropout, const Tiling16 &t, unsigned char *smem, void *dk,
         void *dv, bool narrowGrads, const float *deltaHeads) {
  constexpr int kStrips = dkvStrips(kOut);
  constexpr int kGroup = mmaGroupTiles(kOut) / kStrips;
  const MmaDkvLayout L(t);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, quad = lane % 4;
  const int r0 = warp * kEdge * kStrips; // the warp's first key
  uint16_t *ks = reinterpret_cast<uint16_t *>(smem + L.k);
  uint16_t *vs = reinterpret_cast<uint16_t *>(smem + L.v);
  uint16_t *qs = reinterpret_cast<uint16_t *>(smem + L.q);
  uint16_t *gs = reinterpret_cast<uint16_t *>(smem + L.g);
  float *lseRows = reinterpret_cast<float *>(smem + L.lse);
  float *deltaRows = reinterpret_cast<float *>(smem + L.delta);
  const int stepTiles = t.step / kNarrow;
  const int dChunks = t.d16 / kEdge, dvChunks = t.dv16 / kEdge;
  const float scaleLog2 = a.scale * kLog2e;
  // For head dims up to 64 the strip's K and V fragments (four slices
  // each) are held in registers for the tile's whole walk, not loaded
  // again for every group of queries.
  constexpr int kHeld = kStrips == 1 && kOut == 8 ? 4 : 0;
  constexpr int kHeldRows = kHeld > 0 ? kHeld : 1;

  forEachTile(
      a, a.sk, t.own, t.order, mask,
      [&](int64_t h, int64_t j0, int cols, const unsigned char *maskHead) {
        __syncthreads(); // every warp is done with the previous tile
        stage16Async(ks, L.ldK, k + attentionRow(a, a.rows.k, h, j0),
                     a.rows.k.row, cols, t.own, static_cast<int>(a.d), t.d16);
        stage16Async(vs, L.ldV, v + attentionRow(a, a.rows.v, h, j0),
                     a.rows.v.row, cols, t.own, static_cast<int>(a.dv), t.dv16);
        // The lane's dK and dV columns 8n + 2 quad + y of keys g and g + 8
        // of each strip.
        float accK[kStrips][kOut][4], accV[kStrips][kOut][4];
#pragma unroll
        for (int st = 0; st < kStrips; ++st)
#pragma unroll
          for (int n = 0; n < kOut; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              accK[st][n][e] = accV[st][n][e] = 0.0f;
        uint32_t heldK[kHeldRows][4], heldV[kHeldRows][4];
        bool held = false;

        // One step of queries; kFull: every score of the warp's strips is
        // live.
        auto step = [&](auto full, int64_t i0, int rows, const uint16_t *qb,
                        const uint16_t *gb, const float *lseB,
                        const float *deltaB, const unsigned char *stepMask) {
          constexpr bool kFull = decltype(full)::value;
          // A full step is kMaxStep long: its tiles are known here.
          const int tiles = kFull ? kStepTiles : stepTiles;
          if constexpr (kHeld > 0) {
            if (!held) { // the own rows are in from the first step on
#pragma unroll
              for (int kc = 0; kc < kHeld; ++kc) {
                if (kc < dChunks)
                  stripFragments<1>(
                      reinterpret_cast<uint32_t(&)[1][4]>(heldK[kc]),
                      ks + r0 * L.ldK, L.ldK, kc);
                if (kc < dvChunks)
                  stripFragments<1>(
                      reinterpret_cast<uint32_t(&)[1][4]>(heldV[kc]),
                      vs + r0 * L.ldV, L.ldV, kc);
              }
              held = true;
            }
          }
          for (int first = 0; first < tiles; first += kGroup) {
            float s[kStrips][kGroup][4], dp[kStrips][kGroup][4];
            if constexpr (kHeld > 0) {
              heldStripProduct<T, kGroup, kHeld>(s[0], heldK, qb, L.ldQ,
                                                 dChunks, first, tiles);
              heldStripProduct<T, kGroup, kHeld>(dp[0], heldV, gb, L.ldG,
                                                 dvChunks, first, tiles);
            } else {
              stripsProduct<T, kGroup, kStrips>(s, ks + r0 * L.ldK, L.ldK, qb,
                                                L.ldQ, dChunks, first, tiles);
              stripsProduct<T, kGroup, kStrips>(dp, vs + r0 * L.ldV, L.ldV, gb,
                                                L.ldG, dvChunks, first, tiles);
            }
            // Element 2x + y of tile n: key g + 8x of the strip, query
            // 8 (first + n) + 2 quad + y of the step.
            uint32_t pT[kStrips][kGroup][2], dsT[kStrips][kGroup][2];
#pragma unroll
            for (int n = 0; n < kGroup; ++n) {
              const int c = (first + n) * kNarrow + 2 * quad;
              // The queries' log-sum-exp in base 2 and their deltas (read
              // within the step's staged rows only).
              float queryLse[2] = {kNegInf, kNegInf}, queryDelta[2] = {0, 0};
              if (first + n < tiles)
#pragma unroll
                for (int y = 0; y < 2; ++y) {
                  queryLse[y] = lseB[c + y] * kLog2e;
                  queryDelta[y] = deltaB[c + y];
                }
#pragma unroll
              for (int st = 0; st < kStrips; ++st) {
                const int strip = r0 + kEdge * st;
                // f[y][x]: query c + y against key g + 8x (a line of the
                // dropout mask is a query; its 16 keys from j0 + strip).
                float f[2][2] = {{1.0f, 1.0f}, {1.0f, 1.0f}};
                if (dropout && first + n < tiles)
#pragma unroll
                  for (int y = 0; y < 2; ++y)
                    keyPairKeepFactors(
                        drop,
                        static_cast<uint64_t>((h * a.sq + i0 + c + y) * a.sk +
                                              j0 + strip),
                        f[y]);
#pragma unroll
                for (int x = 0; x < 2; ++x) {
                  const int key = strip + g + 8 * x;
                  float dropped[2] = {0.0f, 0.0f}, value[2] = {0.0f, 0.0f};
#pragma unroll
                  for (int y = 0; y < 2; ++y) {
                    const int query = c + y;
                    if (first + n < tiles &&
                        (kFull ||
                         (key < cols && query < rows &&
                          queryLse[y] != kNegInf &&
                          !maskedOut(a, stepMask, i0 + query, j0 + key)))) {
                      const float pr = exp2f(
                          fmaf(s[st][n][2 * x + y], scaleLog2, -queryLse[y]));
                      value[y] =
                          pr * (dp[st][n][2 * x + y] * f[y][x] - queryDelta[y]);
                      dropped[y] = pr * f[y][x];
                    }
                  }
                  pT[st][n][x] =
                      packPair(round16<T>(dropped[0]), round16<T>(dropped[1]));
                  dsT[st][n][x] = packPair(round16<T>(value[0] * a.scale),
                                           round16<T>(value[1] * a.scale));
                }
              }
            }
            // dV += P^T dO, dK += dS^T Q.
            stripsTimesRows<T, kGroup, kOut, kStrips>(
                accV, pT, gb + first * kNarrow * L.ldG, L.ldG, tiles - first,
                t.dv16 / kNarrow);
            stripsTimesRows<T, kGroup, kOut, kStrips>(
                accK, dsT, qb + first * kNarrow * L.ldQ, L.ldQ, tiles - first,
                t.d16 / kNarrow);
          }
        };

        walkQueries<T>(a, maskHead, h, j0, cols, r0, q, dout, out, lse,
                       deltaHeads, t, qs, L.ldQ, gs, L.ldG, L.buffer, lseRows,
                       deltaRows, L.rowBuffer,
                       [&](int64_t i0, int rows, const uint16_t *qb,
                           const uint16_t *gb, const float *lseB,
                           const float *deltaB, const unsigned char *stepMask) {
                         if (wholeStep(t, stepMask, r0 + kEdge * kStrips, cols,
                                       rows))
                           step(std::true_type{}, i0, rows, qb, gb, lseB,
                                deltaB, stepMask);
                         else
                           step(std::false_type{}, i0, rows, qb, gb, lseB,
                                deltaB, stepMask);
                       });

        storeGradStrips<T>(
            dk, narrowGrads, accK, r0, cols, static_cast<int>(a.d),
            [&](int r) { return attentionRow(a, a.rows.dk, h, j0 + r); });
        storeGradStrips<T>(
            dv, narrowGrads, accV, r0, cols, static_cast<int>(a.dv),
            [&](int r) { return attentionRow(a, a.rows.dv, h, j0 + r); });
      });
}

// The kernels: on an architecture without tensor-core steps for T (bfloat16
// below sm_80) the body is left out; the host never launches it there. The
// WMMA register kernels' bodies are compiled for sm_75 alone
// (wmmaRegCompiled), the mma.sync kernels' from sm_80 on (mmaSupported).
// The general kernels' tiles are sized for two blocks an SM
// (kPreferredShared16): their launch bounds say so, or ptxas aims at more
// blocks and spills.

template <typename T, typename O>
__global__ void __launch_bounds__(kThreads, 2)
    attentionForward16Kernel(AttentionDims a, const uint16_t *q,
                             const uint16_t *k, const uint16_t *v,
                             const unsigned char *mask, DropoutParams drop,
                             const StepCounters *counters, bool dropout,
                             Tiling16 t, O *out, float *lse) {
  if constexpr (wmmaSupports<T>()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    forward16<T>(a, q, k, v, mask, drop, dropout, t, smem16, out, lse);
  }
}

template <typename T, typename O>
__global__ void __launch_bounds__(kThreads, 2)
    attentionDq16Kernel(AttentionDims a, const uint16_t *q, const uint16_t *k,
                        const uint16_t *v, const unsigned char *mask,
                        const O *out, const float *lse, const uint16_t *dout,
                        DropoutParams drop, const StepCounters *counters,
                        bool dropout, Tiling16 t, void *dq, bool narrowGrads) {
  if constexpr (wmmaSupports<T>()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    dq16<T>(a, q, k, v, mask, out, lse, dout, drop, dropout, t, smem16, dq,
            narrowGrads);
  }
}

template <typename T, typename O>
__global__ void __launch_bounds__(kThreads, 2)
    attentionDkv16Kernel(AttentionDims a, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, const unsigned char *mask,
                         const O *out, const float *lse, const uint16_t *dout,
                         DropoutParams drop, const StepCounters *counters,
                         bool dropout, Tiling16 t, void *dk, void *dv,
                         bool narrowGrads) {
  if constexpr (wmmaSupports<T>()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    dkv16<T>(a, q, k, v, mask, out, lse, dout, drop, dropout, t, smem16, dk,
             dv, narrowGrads);
  }
}

// Three blocks of the forward and of dQ fit an SM's shared memory (69 and
// 75 KB for d <= 64 with two buffers); without the hint ptxas gives the
// forward's d <= 128 instances 190-221 registers (two blocks an SM) and
// keeps dQ's fp16 d <= 64 instance at 128, with spills.
template <typename T, typename O, int kTiles>
__global__ void __launch_bounds__(kThreads, 3)
    attentionForwardReg16Kernel(AttentionDims a, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v,
                                const unsigned char *mask, DropoutParams drop,
                                const StepCounters *counters, bool dropout,
                                Tiling16 t, O *out, float *lse) {
  if constexpr (wmmaRegCompiled<T>()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    forwardReg16<T, kTiles>(a, q, k, v, mask, drop, dropout, t, smem16, out,
                            lse);
  }
}

// The mma.sync forward: sm_80 on (the host launches it nowhere else). Two
// blocks an SM: the d <= 64 instance's warps hold two strips each, and the
// d <= 128 instance's shared memory (87,040 bytes) fits two blocks an sm_90
// SM, not three; under three (168 registers) it spilled.
template <typename T, typename O, int kOut>
__global__ void __launch_bounds__(kThreads, 2)
    attentionForwardMma16Kernel(AttentionDims a, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v,
                                const unsigned char *mask, DropoutParams drop,
                                const StepCounters *counters, bool dropout,
                                Tiling16 t, O *out, float *lse) {
  if constexpr (mmaSupported()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    forwardMma16<T, kOut>(a, q, k, v, mask, drop, dropout, t, smem16, out, lse);
  }
}

template <typename T, typename O, int kTiles>
__global__ void __launch_bounds__(kThreads, 3)
    attentionDqReg16Kernel(AttentionDims a, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v,
                           const unsigned char *mask, const O *out,
                           const float *lse, const uint16_t *dout,
                           DropoutParams drop, const StepCounters *counters,
                           bool dropout, Tiling16 t, void *dq, bool narrowGrads,
                           float *deltaHeads) {
  if constexpr (wmmaRegCompiled<T>()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    dqReg16<T, kTiles>(a, q, k, v, mask, out, lse, dout, drop, dropout, t,
                       smem16, dq, narrowGrads, deltaHeads);
  }
}

template <typename T, typename O, int kTiles>
__global__ void __launch_bounds__(kThreads)
    attentionDkvReg16Kernel(AttentionDims a, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v,
                            const unsigned char *mask, const O *out,
                            const float *lse, const uint16_t *dout,
                            DropoutParams drop, const StepCounters *counters,
                            bool dropout, Tiling16 t, void *dk, void *dv,
                            bool narrowGrads, const float *deltaHeads) {
  if constexpr (wmmaRegCompiled<T>()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    dkvReg16<T, kTiles>(a, q, k, v, mask, out, lse, dout, drop, dropout, t,
                        smem16, dk, dv, narrowGrads, deltaHeads);
  }
}

// The mma.sync backward: sm_80 on (the host launches it nowhere else). Two
// blocks an SM: dQ's d <= 64 instance holds two strips a warp, its d <= 128
// one (64 accumulators a lane) spilled under three blocks an SM (168
// registers); dK/dV (two sets of them) takes 219-255 registers.
template <typename T, typename O, int kOut>
__global__ void __launch_bounds__(kThreads, 2)
    attentionDqMma16Kernel(AttentionDims a, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v,
                           const unsigned char *mask, const O *out,
                           const float *lse, const uint16_t *dout,
                           DropoutParams drop, const StepCounters *counters,
                           bool dropout, Tiling16 t, void *dq, bool narrowGrads,
                           float *deltaHeads) {
  if constexpr (mmaSupported()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    dqMma16<T, kOut>(a, q, k, v, mask, out, lse, dout, drop, dropout, t, smem16,
                     dq, narrowGrads, deltaHeads);
  }
}

template <typename T, typename O, int kOut>
__global__ void __launch_bounds__(kThreads, 2)
    attentionDkvMma16Kernel(AttentionDims a, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v,
                            const unsigned char *mask, const O *out,
                            const float *lse, const uint16_t *dout,
                            DropoutParams drop, const StepCounters *counters,
                            bool dropout, Tiling16 t, void *dk, void *dv,
                            bool narrowGrads, const float *deltaHeads) {
  if constexpr (mmaSupported()) {
    extern __shared__ __align__(128) unsigned char smem16[];
    drop.step = static_cast<uint64_t>(counters->batch); // this batch's mask
    dkvMma16<T, kOut>(a, q, k, v, mask, out, lse, dout, drop, dropout, t,
                      smem16, dk, dv, narrowGrads, deltaHeads);
  }
}

/// Whether the current device has mma.sync for 16-bit operands (sm_80 on):
/// the register kernels then run on it, S and P (and dP, dS) in registers.
bool mmaDevice() {
  DeviceLimits device;
  return deviceLimits(device) && device.major >= 8;
}

/// The shared memory a 16-bit kernel may use on the current device (its
/// opt-in limit, at most kMaxShared16), after checking that the device has
/// tensor-core steps for `storage`.
bool sharedLimit16(Context &ctx, Storage16 storage, const char *name,
                   size_t &limit) {
  DeviceLimits device;
  if (!deviceLimits(device)) {
    reportError(ctx, std::string(name) + ": cannot query the CUDA device");
    return false;
  }
  if (storage == Storage16::Bf16 && device.major < 8) {
    reportError(ctx, std::string(name) +
                         ": bfloat16 attention needs the tensor cores of "
                         "sm_80 or newer, and this GPU is sm_" +
                         std::to_string(device.major) +
                         std::to_string(device.minor) +
                         " (use --precision fp16 there)");
    return false;
  }
  limit = std::min(static_cast<size_t>(device.optin), kMaxShared16);
  return true;
}

/// The largest tiling whose shared memory fits kPreferredShared16, else
/// the largest that fits `limit`: `own` rows of a side of `ownRows` and
/// steps of a side of `stepRows` (neither larger than its side rounded up
/// to 16).
template <typename Layout>
bool chooseTiling16(Context &ctx, const AttentionDims &a, int64_t ownRows,
                    int64_t stepRows, size_t limit, const char *name,
                    Tiling16 &tiling) {
  constexpr int kCandidates[][2] = {
      {64, 64}, {32, 64}, {32, 32}, {16, 32}, {16, 16}};
  const int d16 = roundUp16(a.d), dv16 = roundUp16(a.dv);
  size_t smallest = 0;
  for (size_t budget : {std::min(kPreferredShared16, limit), limit}) {
    for (const auto &candidate : kCandidates) {
      const int own =
          static_cast<int>(std::min<int64_t>(candidate[0], roundUp16(ownRows)));
      const int step = static_cast<int>(
          std::min<int64_t>(candidate[1], roundUp16(stepRows)));
      const Tiling16 t{own, step, d16, dv16};
      smallest = Layout(t).bytes;
      if (smallest <= budget) {
        tiling = t;
        return true;
      }
    }
  }
  reportError(ctx, std::string(name) + ": head dims d = " +
                       std::to_string(a.d) + ", dv = " + std::to_string(a.dv) +
                       " need " + std::to_string(smallest) +
                       " bytes of shared memory per block, more than the " +
                       std::to_string(limit) + " this GPU allows");
  return false;
}

/// The register kernels' instance for a's head dims (regTilesFor) and its
/// tiling (own = kRegOwn rows, times mmaStrips for the mma.sync
/// forward, of a side of `ownRows`; steps of kMaxStep rows
/// of a streamed side of `stepRows`, fewer when it is shorter, as
/// chooseTiling16 would; two buffers for the steps when they fit, else
/// one), when there is one, the own side has kRegOwn rows
/// or more and the shared memory fits `limit`; else 0. A shorter side
/// would leave warps without rows in a block whose shared memory is sized
/// for 64: the general kernels cut it into smaller tiles there.
template <typename Layout, typename... Extra>
int regTiling16(const AttentionDims &a, int64_t ownRows, int64_t stepRows,
                size_t limit, Tiling16 &tiling, Extra... extra) {
  const int tiles = ownRows >= kRegOwn ? regTilesFor(a) : 0;
  const int step =
      static_cast<int>(std::min<int64_t>(kMaxStep, roundUp16(stepRows)));
  if (tiles == 0)
    return 0;
  // The mma.sync kernels' warps own mmaStrips or dkvStrips strips (their
  // instance for 8-column tiles: 2 a WMMA accumulator's).
  int own = kRegOwn;
  if constexpr (std::is_same_v<Layout, MmaForwardLayout> ||
                std::is_same_v<Layout, MmaDqLayout>)
    own *= mmaStrips(2 * tiles);
  else if constexpr (std::is_same_v<Layout, MmaDkvLayout>)
    own *= dkvStrips(2 * tiles);
  for (int buffers : {2, 1}) {
    const Tiling16 t{own, step, roundUp16(a.d), roundUp16(a.dv), buffers};
    if (Layout(t, extra...).bytes <= limit) {
      tiling = t;
      return tiles;
    }
  }
  return 0;
}

/// Opts the kernel into `limit` bytes of dynamic shared memory, once per
/// kernel instance (a step being captured into a CUDA graph, which ran
/// eagerly before, sets no attribute); every tiling chosen for the device
/// fits under it.
template <auto kernel>
bool allowShared16(Context &ctx, size_t limit, const char *name) {
  static bool granted = false; // per kernel
  if (granted || limit <= kDefaultSharedBytes)
    return true;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(limit));
  if (error != cudaSuccess) {
    reportError(ctx,
                std::string(name) + ": cannot use " + std::to_string(limit) +
                    " bytes of shared memory: " + cudaGetErrorString(error));
    return false;
  }
  granted = true;
  return true;
}

/// Launches `kernel` on `tiles` blocks with `bytes` of dynamic shared
/// memory, after opting it into `limit`.
template <auto kernel, typename... Args>
void launch16(Context &ctx, const char *name, size_t limit, size_t bytes,
              int64_t tiles, Args... args) {
  if (!allowShared16<kernel>(ctx, limit, name))
    return;
  kernel<<<cuda::gridFor(tiles, 1), kThreads, bytes, ctx.stream>>>(args...);
  checkLaunch(ctx, name);
}

/// The forward with tiling t: the register kernel instance regTiles (4 or
/// 8; on mma.sync with `mma`), or the general kernel (0).
template <typename T, typename O>
void launchForward16(Context &ctx, const AttentionDims &a, const Tiling16 &t,
                     int regTiles, bool mma, size_t limit, const uint16_t *q,
                     const uint16_t *k, const uint16_t *v,
                     const unsigned char *mask, const DropoutParams &drop,
                     bool dropout, O *out, float *lse) {
  const int64_t tiles = a.batch * ((a.sq + t.own - 1) / t.own);
  const StepCounters *counters = cuda::stepCounters(ctx);
  const size_t regBytes = RegForwardLayout(t).bytes;
  const size_t mmaBytes = MmaForwardLayout(t).bytes;
  if (mma && regTiles == 4)
    launch16<attentionForwardMma16Kernel<T, O, 8>>(
        ctx, "attentionForwardMma16Kernel", limit, mmaBytes, tiles, a, q, k, v,
        mask, drop, counters, dropout, t, out, lse);
  else if (mma && regTiles == 8)
    launch16<attentionForwardMma16Kernel<T, O, 16>>(
        ctx, "attentionForwardMma16Kernel", limit, mmaBytes, tiles, a, q, k, v,
        mask, drop, counters, dropout, t, out, lse);
  else if (regTiles == 4)
    launch16<attentionForwardReg16Kernel<T, O, 4>>(
        ctx, "attentionForwardReg16Kernel", limit, regBytes, tiles, a, q, k, v,
        mask, drop, counters, dropout, t, out, lse);
  else if (regTiles == 8)
    launch16<attentionForwardReg16Kernel<T, O, 8>>(
        ctx, "attentionForwardReg16Kernel", limit, regBytes, tiles, a, q, k, v,
        mask, drop, counters, dropout, t, out, lse);
  else
    launch16<attentionForward16Kernel<T, O>>(
        ctx, "attentionForward16Kernel", limit, ForwardLayout(t).bytes, tiles,
        a, q, k, v, mask, drop, counters, dropout, t, out, lse);
}

/// dQ with tiling t: the register kernel instance regTiles (4 or 8; on
/// mma.sync with `mma`), or the general kernel (0).
template <typename T, typename O>
void launchDq16(Context &ctx, const AttentionDims &a, const Tiling16 &t,
                int regTiles, bool mma, size_t limit, const uint16_t *q,
                const uint16_t *k, const uint16_t *v, const unsigned char *mask,
                const O *out, const float *lse, const uint16_t *dout,
                const DropoutParams &drop, bool dropout, void *dq,
                bool narrowGrads, float *deltaHeads) {
  const int64_t tiles = a.batch * ((a.sq + t.own - 1) / t.own);
  const StepCounters *counters = cuda::stepCounters(ctx);
  const size_t regBytes = DqLayout(t, /*sharedAcc=*/false).bytes;
  const size_t mmaBytes = MmaDqLayout(t).bytes;
  if (mma && regTiles == 4)
    launch16<attentionDqMma16Kernel<T, O, 8>>(
        ctx, "attentionDqMma16Kernel", limit, mmaBytes, tiles, a, q, k, v, mask,
        out, lse, dout, drop, counters, dropout, t, dq, narrowGrads,
        deltaHeads);
  else if (mma && regTiles == 8)
    launch16<attentionDqMma16Kernel<T, O, 16>>(
        ctx, "attentionDqMma16Kernel", limit, mmaBytes, tiles, a, q, k, v, mask,
        out, lse, dout, drop, counters, dropout, t, dq, narrowGrads,
        deltaHeads);
  else if (regTiles == 4)
    launch16<attentionDqReg16Kernel<T, O, 4>>(
        ctx, "attentionDqReg16Kernel", limit, regBytes, tiles, a, q, k, v, mask,
        out, lse, dout, drop, counters, dropout, t, dq, narrowGrads,
        deltaHeads);
  else if (regTiles == 8)
    launch16<attentionDqReg16Kernel<T, O, 8>>(
        ctx, "attentionDqReg16Kernel", limit, regBytes, tiles, a, q, k, v, mask,
        out, lse, dout, drop, counters, dropout, t, dq, narrowGrads,
        deltaHeads);
  else
    launch16<attentionDq16Kernel<T, O>>(
        ctx, "attentionDq16Kernel", limit, DqLayout(t).bytes, tiles, a, q, k, v,
        mask, out, lse, dout, drop, counters, dropout, t, dq, narrowGrads);
}

/// dK/dV with tiling t, as launchDq16.
template <typename T, typename O>
void launchDkv16(Context &ctx, const AttentionDims &a, const Tiling16 &t,
                 int regTiles, bool mma, size_t limit, const uint16_t *q,
                 const uint16_t *k, const uint16_t *v,
                 const unsigned char *mask, const O *out, const float *lse,
                 const uint16_t *dout, const DropoutParams &drop, bool dropout,
                 void *dk, void *dv, bool narrowGrads,
                 const float *deltaHeads) {
  const int64_t tiles = a.batch * ((a.sk + t.own - 1) / t.own);
  const StepCounters *counters = cuda::stepCounters(ctx);
  const size_t regBytes = DkvLayout(t, /*sharedAcc=*/false).bytes;
  const size_t mmaBytes = MmaDkvLayout(t).bytes;
  if (mma && regTiles == 4)
    launch16<attentionDkvMma16Kernel<T, O, 8>>(
        ctx, "attentionDkvMma16Kernel", limit, mmaBytes, tiles, a, q, k, v,
        mask, out, lse, dout, drop, counters, dropout, t, dk, dv, narrowGrads,
        deltaHeads);
  else if (mma && regTiles == 8)
    launch16<attentionDkvMma16Kernel<T, O, 16>>(
        ctx, "attentionDkvMma16Kernel", limit, mmaBytes, tiles, a, q, k, v,
        mask, out, lse, dout, drop, counters, dropout, t, dk, dv, narrowGrads,
        deltaHeads);
  else if (regTiles == 4)
    launch16<attentionDkvReg16Kernel<T, O, 4>>(
        ctx, "attentionDkvReg16Kernel", limit, regBytes, tiles, a, q, k, v,
        mask, out, lse, dout, drop, counters, dropout, t, dk, dv, narrowGrads,
        deltaHeads);
  else if (regTiles == 8)
    launch16<attentionDkvReg16Kernel<T, O, 8>>(
        ctx, "attentionDkvReg16Kernel", limit, regBytes, tiles, a, q, k, v,
        mask, out, lse, dout, drop, counters, dropout, t, dk, dv, narrowGrads,
        deltaHeads);
  else
    launch16<attentionDkv16Kernel<T, O>>(ctx, "attentionDkv16Kernel", limit,
                                         DkvLayout(t).bytes, tiles, a, q, k, v,
                                         mask, out, lse, dout, drop, counters,
                                         dropout, t, dk, dv, narrowGrads);
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

namespace {

/// attentionForward16 with the output stored as O (float or 16-bit).
template <typename O>
void forward16Entry(Context &ctx, Storage16 storage, const AttentionDims &a,
                    const uint16_t *q, const uint16_t *k, const uint16_t *v,
                    const unsigned char *mask, O *out, float *lse) {
  size_t limit = 0;
  Tiling16 t;
  if (!checkDims(ctx, a) ||
      !sharedLimit16(ctx, storage, "attentionForward16", limit))
    return;
  const bool mma = mmaDevice();
  const int reg = mma ? regTiling16<MmaForwardLayout>(a, a.sq, a.sk, limit, t)
                      : regTiling16<RegForwardLayout>(a, a.sq, a.sk, limit, t);
  if (reg == 0 && !chooseTiling16<ForwardLayout>(ctx, a, a.sq, a.sk, limit,
                                                 "attentionForward16", t))
    return;
  t.order = tileOrder(a, /*ownQueries=*/true, sizeof(uint16_t));
  // The step is read on the device (a replayed CUDA graph's kernels keep
  // their arguments).
  const DropoutParams drop = dropoutParams(ctx.seed, 0, a.stream, a.dropout);
  const bool dropout = a.dropout > 0.0f;
  if (storage == Storage16::Bf16)
    launchForward16<__nv_bfloat16>(ctx, a, t, reg, mma, limit, q, k, v, mask,
                                   drop, dropout, out, lse);
  else
    launchForward16<__half>(ctx, a, t, reg, mma, limit, q, k, v, mask, drop,
                            dropout, out, lse);
}

/// attentionBackward16 with the output stored as O (float or 16-bit) and
/// the gradients as G.
template <typename O, typename G>
void backward16Entry(Context &ctx, Storage16 storage, const AttentionDims &a,
                     const uint16_t *q, const uint16_t *k, const uint16_t *v,
                     const unsigned char *mask, const O *out, const float *lse,
                     const uint16_t *dout, G *dq, G *dk, G *dv) {
  size_t limit = 0;
  Tiling16 tq, tkv;
  if (!checkDims(ctx, a) ||
      !sharedLimit16(ctx, storage, "attentionBackward16", limit))
    return;
  const bool mma = mmaDevice();
  const int regQ = mma ? regTiling16<MmaDqLayout>(a, a.sq, a.sk, limit, tq)
                       : regTiling16<DqLayout>(a, a.sq, a.sk, limit, tq,
                                               /*sharedAcc=*/false);
  const int regKv = mma ? regTiling16<MmaDkvLayout>(a, a.sk, a.sq, limit, tkv)
                        : regTiling16<DkvLayout>(a, a.sk, a.sq, limit, tkv,
                                                 /*sharedAcc=*/false);
  if ((regQ == 0 && !chooseTiling16<DqLayout>(ctx, a, a.sq, a.sk, limit,
                                              "attentionBackward16", tq)) ||
      (regKv == 0 && !chooseTiling16<DkvLayout>(ctx, a, a.sk, a.sq, limit,
                                                "attentionBackward16", tkv)))
    return;
  tq.order = tileOrder(a, /*ownQueries=*/true, sizeof(uint16_t));
  tkv.order = tileOrder(a, /*ownQueries=*/false, sizeof(uint16_t));
  // The step is read on the device (a replayed CUDA graph's kernels keep
  // their arguments).
  const DropoutParams drop = dropoutParams(ctx.seed, 0, a.stream, a.dropout);
  const bool dropout = a.dropout > 0.0f;
  constexpr bool narrow = std::is_same_v<G, uint16_t>;
  // delta = dO . O of every query, which the dK/dV kernel would otherwise
  // compute again for every block of keys (reading O and dO once more per
  // block: sk / 64 times in all): the register dQ kernel leaves it in the
  // cuBLASLt workspace, free between the GEMMs, for the register dK/dV
  // kernel that runs after it on the stream.
  float *deltaHeads =
      regQ != 0 && regKv != 0 && ctx.ltWorkspace &&
              static_cast<size_t>(a.batch * a.sq) * sizeof(float) <=
                  ctx.ltWorkspaceBytes
          ? static_cast<float *>(ctx.ltWorkspace)
          : nullptr;
  if (storage == Storage16::Bf16) {
    launchDq16<__nv_bfloat16>(ctx, a, tq, regQ, mma, limit, q, k, v, mask, out,
                              lse, dout, drop, dropout, dq, narrow, deltaHeads);
    launchDkv16<__nv_bfloat16>(ctx, a, tkv, regKv, mma, limit, q, k, v, mask,
                               out, lse, dout, drop, dropout, dk, dv, narrow,
                               deltaHeads);
  } else {
    launchDq16<__half>(ctx, a, tq, regQ, mma, limit, q, k, v, mask, out, lse,
                       dout, drop, dropout, dq, narrow, deltaHeads);
    launchDkv16<__half>(ctx, a, tkv, regKv, mma, limit, q, k, v, mask, out, lse,
                        dout, drop, dropout, dk, dv, narrow, deltaHeads);
  }
}

} // namespace

void attentionForward16(Context &ctx, Storage16 storage, const AttentionDims &a,
                        const uint16_t *q, const uint16_t *k, const uint16_t *v,
                        const unsigned char *mask, float *out, float *lse) {
  forward16Entry(ctx, storage, a, q, k, v, mask, out, lse);
}

void attentionForward16(Context &ctx, Storage16 storage, const AttentionDims &a,
                        const uint16_t *q, const uint16_t *k, const uint16_t *v,
                        const unsigned char *mask, uint16_t *out, float *lse) {
  forward16Entry(ctx, storage, a, q, k, v, mask, out, lse);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const float *out,
                         const float *lse, const uint16_t *dout, float *dq,
                         float *dk, float *dv) {
  backward16Entry(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const uint16_t *out,
                         const float *lse, const uint16_t *dout, float *dq,
                         float *dk, float *dv) {
  backward16Entry(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const float *out,
                         const float *lse, const uint16_t *dout, uint16_t *dq,
                         uint16_t *dk, uint16_t *dv) {
  backward16Entry(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &a, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const uint16_t *out,
                         const float *lse, const uint16_t *dout, uint16_t *dq,
                         uint16_t *dk, uint16_t *dv) {
  backward16Entry(ctx, storage, a, q, k, v, mask, out, lse, dout, dq, dk, dv);
}

} // namespace mtc::rt
