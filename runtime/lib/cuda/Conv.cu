//===- Conv.cu - 2-D convolution as im2col + cuBLAS -----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The structure mirrors cpu/Conv.cpp: each (image, group) pair is one GEMM
// over an im2col matrix [cg * kh * kw, oh * ow] in the workspace, which is
// exactly conv2dWorkspaceBytes(p, kernel, storage16) bytes, and 16-bit
// operands are widened the same way. The one difference is col2im: on
// the GPU every dx element gathers the taps that read it (one thread per
// element, fixed order) instead of being scattered into, which needs no
// atomics, no zeroing pass and is deterministic.
//
//===----------------------------------------------------------------------===//

#include "ConvOperand.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <string>

namespace mtc::rt {

namespace {

struct ConvShape {
  int64_t cg, kg;  // input / output channels per group
  int64_t patch;   // cg * kh * kw: rows of the im2col matrix
  int64_t pixels;  // oh * ow: columns of the im2col matrix
  int64_t inPlane; // h * w
};

ConvShape shapeOf(const Conv2dParams &p) {
  ConvShape s;
  s.cg = p.c / p.groups;
  s.kg = p.k / p.groups;
  s.patch = s.cg * p.kh * p.kw;
  s.pixels = p.oh * p.ow;
  s.inPlane = p.h * p.w;
  return s;
}

bool validParams(Context &ctx, const Conv2dParams &p, const char *what) {
  if (p.groups <= 0 || p.c % p.groups != 0 || p.k % p.groups != 0 ||
      p.strideH <= 0 || p.strideW <= 0 || p.dilationH <= 0 ||
      p.dilationW <= 0) {
    reportError(ctx, std::string(what) +
                         ": invalid convolution parameters (groups, stride "
                         "or dilation)");
    return false;
  }
  return true;
}

/// col[r, oy * ow + ox] = x[ci, iy, ix] (0 in padding), r = (ci * kh + i) *
/// kw + j; one thread per col element, so writes are coalesced. T is float
/// or uint16_t (bfloat16 when Bf16, else float16).
template <typename T, bool Bf16>
__global__ void im2colKernel(Conv2dParams p, ConvShape s, const T *x,
                             float *col) {
  int64_t total = s.patch * s.pixels;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t r = idx / s.pixels;
    int64_t pixel = idx % s.pixels;
    int64_t ci = r / (p.kh * p.kw);
    int64_t i = (r / p.kw) % p.kh;
    int64_t j = r % p.kw;
    int64_t iy = (pixel / p.ow) * p.strideH - p.padTop + i * p.dilationH;
    int64_t ix = (pixel % p.ow) * p.strideW - p.padLeft + j * p.dilationW;
    col[idx] = (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w)
                   ? storedToFloat(x[ci * s.inPlane + iy * p.w + ix], Bf16)
                   : 0.0f;
  }
}

/// dx[ci, iy, ix] = sum of col[r, pixel] over the taps (i, j) and output
/// pixels that read (ci, iy, ix). dx is overwritten.
__global__ void col2imKernel(Conv2dParams p, ConvShape s, const float *col,
                             float *dx) {
  int64_t total = s.cg * s.inPlane;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t ci = idx / s.inPlane;
    int64_t iy = (idx / p.w) % p.h;
    int64_t ix = idx % p.w;
    float sum = 0.0f;
    for (int64_t i = 0; i < p.kh; ++i) {
      int64_t ny = iy + p.padTop - i * p.dilationH;
      if (ny < 0 || ny % p.strideH != 0 || ny / p.strideH >= p.oh)
        continue;
      int64_t oy = ny / p.strideH;
      for (int64_t j = 0; j < p.kw; ++j) {
        int64_t nx = ix + p.padLeft - j * p.dilationW;
        if (nx < 0 || nx % p.strideW != 0 || nx / p.strideW >= p.ow)
          continue;
        int64_t ox = nx / p.strideW;
        sum += col[((ci * p.kh + i) * p.kw + j) * s.pixels + oy * p.ow + ox];
      }
    }
    dx[idx] = sum;
  }
}

/// y[n, k, :] += bias[k].
__global__ void addBiasKernel(int64_t planes, int64_t k, int64_t pixels,
                              const float *bias, float *y) {
  for (int64_t idx = cuda::threadIndex(); idx < planes * pixels;
       idx += cuda::threadCount())
    y[idx] += bias[(idx / pixels) % k];
}


template <typename T, bool Bf16>
void launchIm2col(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                  const void *x, int64_t offset, float *col) {
  im2colKernel<T, Bf16>
      <<<cuda::gridFor(s.patch * s.pixels), cuda::kBlock, 0, ctx.stream>>>(
          p, s, static_cast<const T *>(x) + offset, col);
}

/// im2col of the channels of `x` from element `offset` on.
void im2col(Context &ctx, const Conv2dParams &p, const ConvShape &s,
            const Operand &x, int64_t offset, float *col) {
  if (!x.low)
    launchIm2col<float, false>(ctx, p, s, x.data, offset, col);
  else if (x.storage == Storage16::Bf16)
    launchIm2col<uint16_t, true>(ctx, p, s, x.data, offset, col);
  else
    launchIm2col<uint16_t, false>(ctx, p, s, x.data, offset, col);
  checkLaunch(ctx, "im2colKernel");
}

void forward(Context &ctx, const Conv2dParams &p, const Operand &x,
             const Operand &w, const float *bias, float *y, float *workspace) {
  if (!validParams(ctx, p, "conv2dForward"))
    return;
  ConvShape s = shapeOf(p);
  float *col = workspace;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, col + s.patch * s.pixels);
  for (int64_t img = 0; img < p.n; ++img) {
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(ctx, p, s, x, (img * p.c + g * s.cg) * s.inPlane, col);
      // y[kg, pixels] = w_g[kg, patch] * col[patch, pixels]
      gemm(ctx, false, false, s.kg, s.pixels, s.patch, 1.0f,
           wf + g * s.kg * s.patch, s.patch, col, s.pixels, 0.0f,
           y + (img * p.k + g * s.kg) * s.pixels, s.pixels);
    }
  }
  if (!bias || p.n * p.k * s.pixels == 0)
    return;
  addBiasKernel<<<cuda::gridFor(p.n * p.k * s.pixels), cuda::kBlock, 0,
                  ctx.stream>>>(p.n * p.k, p.k, s.pixels, bias, y);
  checkLaunch(ctx, "addBiasKernel");
}

void backwardData(Context &ctx, const Conv2dParams &p, const Operand &dy,
                  const Operand &w, float *dx, float *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardData"))
    return;
  ConvShape s = shapeOf(p);
  float *col = workspace, *scratch = col + s.patch * s.pixels;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, scratch);
  if (w.low)
    scratch += p.k * s.patch;
  for (int64_t img = 0; img < p.n; ++img) {
    const float *dyf =
        asFloat(ctx, dy, img * p.k * s.pixels, p.k * s.pixels, scratch);
    for (int64_t g = 0; g < p.groups; ++g) {
      // col[patch, pixels] = w_g^T[patch, kg] * dy_g[kg, pixels]
      gemm(ctx, true, false, s.patch, s.pixels, s.kg, 1.0f,
           wf + g * s.kg * s.patch, s.patch, dyf + g * s.kg * s.pixels,
           s.pixels, 0.0f, col, s.pixels);
      if (s.cg * s.inPlane == 0)
        continue;
      col2imKernel<<<cuda::gridFor(s.cg * s.inPlane), cuda::kBlock, 0,
                     ctx.stream>>>(p, s, col,
                                   dx + (img * p.c + g * s.cg) * s.inPlane);
      checkLaunch(ctx, "col2imKernel");
    }
  }
}

void backwardFilter(Context &ctx, const Conv2dParams &p, const Operand &x,
                    const Operand &dy, float *dw, float *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardFilter"))
    return;
  ConvShape s = shapeOf(p);
  if (p.n == 0) {
    if (p.k * s.patch > 0)
      cudaMemsetAsync(dw, 0, sizeof(float) * p.k * s.patch, ctx.stream);
    return;
  }
  float *col = workspace, *scratch = col + s.patch * s.pixels;
  for (int64_t img = 0; img < p.n; ++img) {
    const float *dyf =
        asFloat(ctx, dy, img * p.k * s.pixels, p.k * s.pixels, scratch);
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(ctx, p, s, x, (img * p.c + g * s.cg) * s.inPlane, col);
      // dw_g[kg, patch] (+)= dy_g[kg, pixels] * col^T[pixels, patch]
      gemm(ctx, false, true, s.kg, s.patch, s.pixels, 1.0f,
           dyf + g * s.kg * s.pixels, s.pixels, col, s.pixels,
           img == 0 ? 0.0f : 1.0f, dw + g * s.kg * s.patch, s.patch);
    }
  }
}

} // namespace

#include "ConvEntryPoints.inc"

} // namespace mtc::rt
