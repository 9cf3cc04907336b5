//===- Pool.cu - 2-D max and average pooling ------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The window semantics come from KernelCommon.h, shared with cpu/Pool.cpp.
// Forward: one thread per output. Backward: one thread per input element,
// gathering from the windows that cover it, which avoids atomics; windows
// are visited in row-major output order, the order in which the CPU
// scatters, so both sum each gradient in the same order. Max pooling's
// backward takes a band of an input plane's rows a block: the block first
// finds the argmax of every window reading the band (once, into shared
// memory), then its threads gather. Recomputing the argmax of each covering
// window per input element instead reads a 3x3 window's nine values up to
// four times per element (ResNet-50's stem: 8.2 ms a step on an H200).
//
//===----------------------------------------------------------------------===//

#include "Divisor.h"
#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <string>

namespace mtc::rt {

namespace {

bool validParams(Context &ctx, const Pool2dParams &p, const char *what) {
  if (p.strideH <= 0 || p.strideW <= 0 || p.dilationH <= 0 ||
      p.dilationW <= 0 || p.kh <= 0 || p.kw <= 0) {
    reportError(ctx, std::string(what) +
                         ": invalid pooling parameters (kernel, stride or "
                         "dilation)");
    return false;
  }
  return true;
}

/// How the kernels below split flat indices and divide by the strides:
/// Divisors for the launch (a multiply and a shift, not a 64-bit division,
/// for dividends below 2^31).
struct PoolDivisors {
  Divisor outPlane, ow; ///< oh * ow; ow
  Divisor inPlane, w;   ///< h * w; w
  Divisor strideH, strideW;
};

PoolDivisors poolDivisors(const Pool2dParams &p) {
  const int64_t bound =
      std::max(p.n * p.c * p.oh * p.ow, p.n * p.c * p.h * p.w);
  PoolDivisors d;
  d.outPlane = makeDivisor(p.oh * p.ow, bound);
  d.ow = makeDivisor(p.ow, bound);
  d.inPlane = makeDivisor(p.h * p.w, bound);
  d.w = makeDivisor(p.w, bound);
  // windowOf divides offsets below h + padTop (w + padLeft).
  d.strideH = makeDivisor(p.strideH, p.h + p.padTop);
  d.strideW = makeDivisor(p.strideW, p.w + p.padLeft);
  return d;
}

/// (plane, y, x) of flat index idx over planes of `plane` elements, rows of
/// `row`.
struct PlaneAt {
  int64_t plane, y, x;
};
__device__ inline PlaneAt planeAt(int64_t idx, const Divisor &plane,
                                  const Divisor &row) {
  PlaneAt a;
  a.plane = plane.divide(idx);
  const int64_t within = plane.remainder(idx, a.plane);
  a.y = row.divide(within);
  a.x = row.remainder(within, a.y);
  return a;
}

/// The output coordinate whose window reads input coordinate `in` with tap
/// `t`, or -1.
__device__ inline int64_t windowOf(int64_t in, int64_t t, int64_t pad,
                                   int64_t dilation, const Divisor &stride,
                                   int64_t outSize) {
  int64_t num = in + pad - t * dilation;
  if (num < 0)
    return -1;
  const int64_t out = stride.divide(num);
  if (stride.remainder(num, out) != 0 || out >= outSize)
    return -1;
  return out;
}

/// x stored as X, y as Y (16-bit ones in the format `bf16` names).
template <typename X, typename Y>
__global__ void maxPoolForwardKernel(Pool2dParams p, PoolDivisors d, const X *x,
                                     Y *y, bool bf16) {
  int64_t total = p.n * p.c * p.oh * p.ow;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    const PlaneAt o = planeAt(idx, d.outPlane, d.ow);
    const X *src = x + o.plane * p.h * p.w;
    int64_t at = maxPoolArgmax(p, src, o.y, o.x, bf16);
    storeFloat(y + idx, at < 0 ? -INFINITY : storedToFloat(src[at], bf16),
               bf16);
  }
}

/// x stored as X, dy as G, dx as DX (each sum rounded once).
template <typename X, typename G, typename DX>
__global__ void maxPoolBackwardKernel(Pool2dParams p, PoolDivisors d,
                                      const X *x, const G *dy, DX *dx,
                                      bool bf16) {
  int64_t total = p.n * p.c * p.h * p.w;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    const PlaneAt in = planeAt(idx, d.inPlane, d.w);
    const int64_t iy = in.y, ix = in.x;
    const X *src = x + in.plane * p.h * p.w;
    const G *grad = dy + in.plane * p.oh * p.ow;
    float sum = 0.0f;
    // Taps in reverse give windows in increasing output order.
    for (int64_t i = p.kh - 1; i >= 0; --i) {
      int64_t oy = windowOf(iy, i, p.padTop, p.dilationH, d.strideH, p.oh);
      if (oy < 0)
        continue;
      for (int64_t j = p.kw - 1; j >= 0; --j) {
        int64_t ox = windowOf(ix, j, p.padLeft, p.dilationW, d.strideW, p.ow);
        if (ox >= 0 && maxPoolArgmax(p, src, oy, ox, bf16) == iy * p.w + ix)
          sum += storedToFloat(grad[oy * p.ow + ox], bf16);
      }
    }
    storeFloat(dx + idx, sum, bf16);
  }
}

/// The output rows whose windows read input rows [y0, y0 + rows): [*lo,
/// *hi], empty when *lo > *hi.
__host__ __device__ inline void windowRowsOf(const Pool2dParams &p, int64_t y0,
                                             int64_t rows, int64_t *lo,
                                             int64_t *hi) {
  const int64_t first = y0 + p.padTop - (p.kh - 1) * p.dilationH;
  *lo = first <= 0 ? 0 : (first + p.strideH - 1) / p.strideH;
  const int64_t last = (y0 + rows - 1 + p.padTop) / p.strideH;
  *hi = last < p.oh - 1 ? last : p.oh - 1;
}

/// Max pooling's backward by bands of `bandRows` input rows (`bands` a
/// plane), a block a band at a time: the argmax of each window reading the
/// band (plane offsets, int32) goes to shared memory, then each input
/// element of the band sums dy over the windows whose argmax it is, in the
/// order of maxPoolBackwardKernel.
template <typename X, typename G, typename DX>
__global__ void maxPoolBackwardBandKernel(Pool2dParams p, PoolDivisors d,
                                          int64_t bandRows, int64_t bands,
                                          const X *x, const G *dy, DX *dx,
                                          bool bf16) {
  extern __shared__ int32_t argmax[];
  const int64_t total = p.n * p.c * bands;
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {
    const int64_t plane = b / bands, y0 = (b - plane * bands) * bandRows;
    const int64_t rows = y0 + bandRows < p.h ? bandRows : p.h - y0;
    int64_t oyLo, oyHi;
    windowRowsOf(p, y0, rows, &oyLo, &oyHi);
    const X *src = x + plane * p.h * p.w;
    const int64_t windows = oyHi >= oyLo ? (oyHi - oyLo + 1) * p.ow : 0;
    for (int64_t k = threadIdx.x; k < windows; k += blockDim.x) {
      const int64_t oy = d.ow.divide(k);
      const int64_t ox = d.ow.remainder(k, oy);
      argmax[k] =
          static_cast<int32_t>(maxPoolArgmax(p, src, oyLo + oy, ox, bf16));
    }
    __syncthreads();
    const G *grad = dy + plane * p.oh * p.ow;
    const int64_t count = rows * p.w;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
      const int64_t r = d.w.divide(e);
      const int64_t iy = y0 + r, ix = d.w.remainder(e, r);
      const int64_t self = iy * p.w + ix;
      float sum = 0.0f;
      // Taps in reverse give windows in increasing output order.
      for (int64_t i = p.kh - 1; i >= 0; --i) {
        int64_t oy = windowOf(iy, i, p.padTop, p.dilationH, d.strideH, p.oh);
        if (oy < 0)
          continue;
        const int32_t *rowArgmax = argmax + (oy - oyLo) * p.ow;
        for (int64_t j = p.kw - 1; j >= 0; --j) {
          int64_t ox = windowOf(ix, j, p.padLeft, p.dilationW, d.strideW, p.ow);
          if (ox >= 0 && rowArgmax[ox] == self)
            sum += storedToFloat(grad[oy * p.ow + ox], bf16);
        }
      }
      storeFloat(dx + plane * p.h * p.w + self, sum, bf16);
    }
    __syncthreads(); // the next band's argmax overwrite this one's
  }
}

__global__ void avgPoolForwardKernel(Pool2dParams p, PoolDivisors d,
                                     const float *x, float *y) {
  int64_t total = p.n * p.c * p.oh * p.ow;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    const PlaneAt o = planeAt(idx, d.outPlane, d.ow);
    const int64_t oy = o.y, ox = o.x;
    const float *src = x + o.plane * p.h * p.w;
    int64_t hStart = oy * p.strideH - p.padTop;
    int64_t wStart = ox * p.strideW - p.padLeft;
    float sum = 0.0f;
    for (int64_t i = 0; i < p.kh; ++i) {
      int64_t iy = hStart + i * p.dilationH;
      if (iy < 0 || iy >= p.h)
        continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        int64_t ix = wStart + j * p.dilationW;
        if (ix >= 0 && ix < p.w)
          sum += src[iy * p.w + ix];
      }
    }
    int64_t divisor = avgPoolDivisor(p, oy, ox);
    y[idx] = divisor > 0 ? sum / static_cast<float>(divisor) : 0.0f;
  }
}

__global__ void avgPoolBackwardKernel(Pool2dParams p, PoolDivisors d,
                                      const float *dy, float *dx) {
  int64_t total = p.n * p.c * p.h * p.w;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    const PlaneAt in = planeAt(idx, d.inPlane, d.w);
    const int64_t iy = in.y, ix = in.x;
    const float *grad = dy + in.plane * p.oh * p.ow;
    float sum = 0.0f;
    for (int64_t i = p.kh - 1; i >= 0; --i) {
      int64_t oy = windowOf(iy, i, p.padTop, p.dilationH, d.strideH, p.oh);
      if (oy < 0)
        continue;
      for (int64_t j = p.kw - 1; j >= 0; --j) {
        int64_t ox = windowOf(ix, j, p.padLeft, p.dilationW, d.strideW, p.ow);
        if (ox < 0)
          continue;
        int64_t divisor = avgPoolDivisor(p, oy, ox);
        if (divisor > 0)
          sum += grad[oy * p.ow + ox] / static_cast<float>(divisor);
      }
    }
    dx[idx] = sum;
  }
}

template <typename X, typename Y>
void maxPoolForwardAs(Context &ctx, const Pool2dParams &p, const X *x, Y *y,
                      bool bf16) {
  maxPoolForwardKernel<<<cuda::gridFor(p.n * p.c * p.oh * p.ow), cuda::kBlock,
                         0, ctx.stream>>>(p, poolDivisors(p), x, y, bf16);
  checkLaunch(ctx, "maxPoolForwardKernel");
}

/// Input elements a band of maxPoolBackwardBandKernel aims at: a few per
/// thread.
constexpr int64_t kBandElements = 8 * cuda::kBlock;

/// The input rows of a band of maxPoolBackwardBandKernel (about
/// kBandElements elements, as many rows as shared memory holds the argmax
/// of their windows for), or 0 where a plane's offsets exceed int32 or one
/// row's windows exceed the shared memory.
int64_t maxPoolBandRows(const Pool2dParams &p) {
  if (p.h * p.w > INT32_MAX)
    return 0;
  auto sharedBytes = [&](int64_t rows) {
    // The most output rows a band of `rows` rows can meet.
    const int64_t outRows =
        (rows - 1 + (p.kh - 1) * p.dilationH) / p.strideH + 1;
    return static_cast<size_t>(outRows * p.ow) * sizeof(int32_t);
  };
  int64_t rows = std::clamp<int64_t>(kBandElements / p.w, 1, p.h);
  while (rows > 1 && sharedBytes(rows) > cuda::kDefaultSharedBytes)
    rows /= 2;
  return sharedBytes(rows) <= cuda::kDefaultSharedBytes ? rows : 0;
}

template <typename X, typename G, typename DX>
void maxPoolBackwardAs(Context &ctx, const Pool2dParams &p, const X *x,
                       const G *dy, DX *dx, bool bf16) {
  if (p.n * p.c * p.h * p.w == 0)
    return;
  const int64_t rows = maxPoolBandRows(p);
  if (rows == 0) {
    maxPoolBackwardKernel<<<cuda::gridFor(p.n * p.c * p.h * p.w), cuda::kBlock,
                            0, ctx.stream>>>(p, poolDivisors(p), x, dy, dx,
                                             bf16);
    checkLaunch(ctx, "maxPoolBackwardKernel");
    return;
  }
  const int64_t bands = (p.h + rows - 1) / rows;
  const int64_t outRows = (rows - 1 + (p.kh - 1) * p.dilationH) / p.strideH + 1;
  maxPoolBackwardBandKernel<<<cuda::gridFor(p.n * p.c * bands, 1), cuda::kBlock,
                              outRows * p.ow * sizeof(int32_t), ctx.stream>>>(
      p, poolDivisors(p), rows, bands, x, dy, dx, bf16);
  checkLaunch(ctx, "maxPoolBackwardBandKernel");
}

} // namespace

#include "MaxPoolEntryPoints.inc"

void avgPool2dForward(Context &ctx, const Pool2dParams &p, const float *x,
                      float *y) {
  if (!validParams(ctx, p, "avgPool2dForward"))
    return;
  avgPoolForwardKernel<<<cuda::gridFor(p.n * p.c * p.oh * p.ow), cuda::kBlock,
                         0, ctx.stream>>>(p, poolDivisors(p), x, y);
  checkLaunch(ctx, "avgPoolForwardKernel");
}

void avgPool2dBackward(Context &ctx, const Pool2dParams &p, const float *dy,
                       float *dx) {
  if (!validParams(ctx, p, "avgPool2dBackward"))
    return;
  avgPoolBackwardKernel<<<cuda::gridFor(p.n * p.c * p.h * p.w), cuda::kBlock, 0,
                          ctx.stream>>>(p, poolDivisors(p), dy, dx);
  checkLaunch(ctx, "avgPoolBackwardKernel");
}

} // namespace mtc::rt
