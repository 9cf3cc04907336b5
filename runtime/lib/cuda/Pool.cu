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
// scatters, so both sum each gradient in the same order.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Kernels.h"

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

/// The output coordinate whose window reads input coordinate `in` with tap
/// `t`, or -1.
__device__ inline int64_t windowOf(int64_t in, int64_t t, int64_t pad,
                                   int64_t dilation, int64_t stride,
                                   int64_t outSize) {
  int64_t num = in + pad - t * dilation;
  if (num < 0 || num % stride != 0 || num / stride >= outSize)
    return -1;
  return num / stride;
}

__global__ void maxPoolForwardKernel(Pool2dParams p, const float *x, float *y) {
  int64_t total = p.n * p.c * p.oh * p.ow;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t plane = idx / (p.oh * p.ow);
    int64_t oy = (idx / p.ow) % p.oh;
    int64_t ox = idx % p.ow;
    const float *src = x + plane * p.h * p.w;
    int64_t at = maxPoolArgmax(p, src, oy, ox);
    y[idx] = at < 0 ? -INFINITY : src[at];
  }
}

__global__ void maxPoolBackwardKernel(Pool2dParams p, const float *x,
                                      const float *dy, float *dx) {
  int64_t total = p.n * p.c * p.h * p.w;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t plane = idx / (p.h * p.w);
    int64_t iy = (idx / p.w) % p.h;
    int64_t ix = idx % p.w;
    const float *src = x + plane * p.h * p.w;
    const float *grad = dy + plane * p.oh * p.ow;
    float sum = 0.0f;
    // Taps in reverse give windows in increasing output order.
    for (int64_t i = p.kh - 1; i >= 0; --i) {
      int64_t oy = windowOf(iy, i, p.padTop, p.dilationH, p.strideH, p.oh);
      if (oy < 0)
        continue;
      for (int64_t j = p.kw - 1; j >= 0; --j) {
        int64_t ox = windowOf(ix, j, p.padLeft, p.dilationW, p.strideW, p.ow);
        if (ox >= 0 && maxPoolArgmax(p, src, oy, ox) == iy * p.w + ix)
          sum += grad[oy * p.ow + ox];
      }
    }
    dx[idx] = sum;
  }
}

__global__ void avgPoolForwardKernel(Pool2dParams p, const float *x, float *y) {
  int64_t total = p.n * p.c * p.oh * p.ow;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t plane = idx / (p.oh * p.ow);
    int64_t oy = (idx / p.ow) % p.oh;
    int64_t ox = idx % p.ow;
    const float *src = x + plane * p.h * p.w;
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

__global__ void avgPoolBackwardKernel(Pool2dParams p, const float *dy,
                                      float *dx) {
  int64_t total = p.n * p.c * p.h * p.w;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t plane = idx / (p.h * p.w);
    int64_t iy = (idx / p.w) % p.h;
    int64_t ix = idx % p.w;
    const float *grad = dy + plane * p.oh * p.ow;
    float sum = 0.0f;
    for (int64_t i = p.kh - 1; i >= 0; --i) {
      int64_t oy = windowOf(iy, i, p.padTop, p.dilationH, p.strideH, p.oh);
      if (oy < 0)
        continue;
      for (int64_t j = p.kw - 1; j >= 0; --j) {
        int64_t ox = windowOf(ix, j, p.padLeft, p.dilationW, p.strideW, p.ow);
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

} // namespace

void maxPool2dForward(Context &ctx, const Pool2dParams &p, const float *x,
                      float *y) {
  if (!validParams(ctx, p, "maxPool2dForward"))
    return;
  maxPoolForwardKernel<<<cuda::gridFor(p.n * p.c * p.oh * p.ow), cuda::kBlock,
                         0, ctx.stream>>>(p, x, y);
  checkLaunch(ctx, "maxPoolForwardKernel");
}

void maxPool2dBackward(Context &ctx, const Pool2dParams &p, const float *x,
                       const float *dy, float *dx) {
  if (!validParams(ctx, p, "maxPool2dBackward"))
    return;
  maxPoolBackwardKernel<<<cuda::gridFor(p.n * p.c * p.h * p.w), cuda::kBlock, 0,
                          ctx.stream>>>(p, x, dy, dx);
  checkLaunch(ctx, "maxPoolBackwardKernel");
}

void avgPool2dForward(Context &ctx, const Pool2dParams &p, const float *x,
                      float *y) {
  if (!validParams(ctx, p, "avgPool2dForward"))
    return;
  avgPoolForwardKernel<<<cuda::gridFor(p.n * p.c * p.oh * p.ow), cuda::kBlock,
                         0, ctx.stream>>>(p, x, y);
  checkLaunch(ctx, "avgPoolForwardKernel");
}

void avgPool2dBackward(Context &ctx, const Pool2dParams &p, const float *dy,
                       float *dx) {
  if (!validParams(ctx, p, "avgPool2dBackward"))
    return;
  avgPoolBackwardKernel<<<cuda::gridFor(p.n * p.c * p.h * p.w), cuda::kBlock, 0,
                          ctx.stream>>>(p, dy, dx);
  checkLaunch(ctx, "avgPoolBackwardKernel");
}

} // namespace mtc::rt
