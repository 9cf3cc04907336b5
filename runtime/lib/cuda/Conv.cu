//===- Conv.cu - 2-D convolution as im2col + cuBLAS -----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The structure mirrors cpu/Conv.cpp: each group of a batch of images
// (convImagesPerGemm) is one GEMM over an im2col matrix [cg * kh * kw,
// images * oh * ow] in the workspace, which is exactly
// conv2dWorkspaceBytes(p, kernel, storage16) bytes, with the same staging
// matrix for several images, and 16-bit operands are widened the same
// way. The one difference is col2im: on the GPU every dx element gathers
// the taps that read it (one thread per element, fixed order) instead of
// being scattered into, which needs no atomics, no zeroing pass and is
// deterministic.
//
//===----------------------------------------------------------------------===//

#include "ConvOperand.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/LayerNormRow.h" // cuda::blockSum

#include <algorithm>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

struct ConvShape {
  int64_t cg, kg;  // input / output channels per group
  int64_t patch;   // cg * kh * kw: rows of the im2col matrix
  int64_t pixels;  // oh * ow: columns of one image in the im2col matrix
  int64_t inPlane; // h * w
  int64_t images;  // images per GEMM (convImagesPerGemm)
};

ConvShape shapeOf(const Conv2dParams &p) {
  ConvShape s;
  s.cg = p.c / p.groups;
  s.kg = p.k / p.groups;
  s.patch = s.cg * p.kh * p.kw;
  s.pixels = p.oh * p.ow;
  s.inPlane = p.h * p.w;
  s.images = convImagesPerGemm(p);
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

/// `v` as a kernel stores it into an Out matrix: widened to float32, or
/// (Out = uint16_t) the 16 bits as stored.
template <typename Out, typename T>
__device__ inline Out loadAs(T v, bool bf16) {
  if constexpr (std::is_same_v<Out, float>)
    return storedToFloat(v, bf16);
  else
    return v;
}

/// col[r, j * pixels + oy * ow + ox] = x_j[ci, iy, ix] (0 in padding) for
/// the `count` images x_j = x + j * imageStride, r = (ci * kh + i) * kw +
/// j; one thread per col element, so writes are coalesced. T is float or
/// uint16_t (bfloat16 when Bf16, else float16); col is float32 (widened) or
/// holds the 16 bits as stored (Out = uint16_t; 0 is +0 in both formats).
template <typename T, typename Out, bool Bf16>
__global__ void im2colKernel(Conv2dParams p, ConvShape s, const T *x,
                             int64_t count, int64_t imageStride, Out *col) {
  const int64_t ld = count * s.pixels, total = s.patch * ld;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t r = idx / ld;
    int64_t image = (idx % ld) / s.pixels;
    int64_t pixel = idx % s.pixels;
    int64_t ci = r / (p.kh * p.kw);
    int64_t i = (r / p.kw) % p.kh;
    int64_t j = r % p.kw;
    int64_t iy = (pixel / p.ow) * p.strideH - p.padTop + i * p.dilationH;
    int64_t ix = (pixel % p.ow) * p.strideW - p.padLeft + j * p.dilationW;
    col[idx] = (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w)
                   ? loadAs<Out>(x[image * imageStride + ci * s.inPlane +
                                   iy * p.w + ix],
                                 Bf16)
                   : Out(0);
  }
}

/// dx_j[ci, iy, ix] = sum of col[r, j * pixels + pixel] over the taps (i, j)
/// and output pixels that read (ci, iy, ix), for the `count` images dx_j =
/// dx + j * imageStride. dx is overwritten.
__global__ void col2imKernel(Conv2dParams p, ConvShape s, const float *col,
                             int64_t count, int64_t imageStride, float *dx) {
  const int64_t ld = count * s.pixels, perImage = s.cg * s.inPlane;
  for (int64_t idx = cuda::threadIndex(); idx < count * perImage;
       idx += cuda::threadCount()) {
    int64_t image = idx / perImage;
    int64_t ci = (idx % perImage) / s.inPlane;
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
        sum += col[((ci * p.kh + i) * p.kw + j) * ld + image * s.pixels +
                   oy * p.ow + ox];
      }
    }
    dx[image * imageStride + ci * s.inPlane + iy * p.w + ix] = sum;
  }
}

/// stage[k, j * pixels + q] = y[first + j, g * kg + k, q] (widened, or
/// the 16 bits as stored): group g of `count` images' output gradients as
/// one matrix. `y` points at image `first`, group g.
template <typename T, typename Out, bool Bf16>
__global__ void gatherKernel(Conv2dParams p, ConvShape s, const T *y,
                             int64_t count, Out *stage) {
  const int64_t ld = count * s.pixels;
  for (int64_t idx = cuda::threadIndex(); idx < s.kg * ld;
       idx += cuda::threadCount()) {
    int64_t k = idx / ld, image = (idx % ld) / s.pixels, q = idx % s.pixels;
    stage[idx] = loadAs<Out>(y[(image * p.k + k) * s.pixels + q], Bf16);
  }
}

/// The inverse of gather: y[first + j, g * kg + k, q] = stage[k, j *
/// pixels + q], `y` pointing at image `first`, group g.
__global__ void scatterKernel(Conv2dParams p, ConvShape s, const float *stage,
                              int64_t count, float *y) {
  const int64_t ld = count * s.pixels;
  for (int64_t idx = cuda::threadIndex(); idx < s.kg * ld;
       idx += cuda::threadCount()) {
    int64_t k = idx / ld, image = (idx % ld) / s.pixels, q = idx % s.pixels;
    y[(image * p.k + k) * s.pixels + q] = stage[idx];
  }
}

/// y[n, k, :] += bias[k].
__global__ void addBiasKernel(int64_t planes, int64_t k, int64_t pixels,
                              const float *bias, float *y) {
  for (int64_t idx = cuda::threadIndex(); idx < planes * pixels;
       idx += cuda::threadCount())
    y[idx] += bias[(idx / pixels) % k];
}

/// Depthwise forward, one thread per output: y[n, k, oy, ox] = the taps
/// of x[n, k / kg] under w[k], added in (i, j) order.
template <typename T, bool Bf16>
__global__ void depthwiseForwardKernel(Conv2dParams p, ConvShape s,
                                       const T *x, const T *w, float *y) {
  for (int64_t idx = cuda::threadIndex(); idx < p.n * p.k * s.pixels;
       idx += cuda::threadCount()) {
    const int64_t plane = idx / s.pixels, n = plane / p.k, k = plane % p.k;
    const int64_t oy = idx % s.pixels / p.ow, ox = idx % p.ow;
    const T *in = x + (n * p.c + k / s.kg) * s.inPlane;
    float sum = 0.0f;
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t iy = oy * p.strideH + i * p.dilationH - p.padTop;
      if (iy < 0 || iy >= p.h)
        continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t ix = ox * p.strideW + j * p.dilationW - p.padLeft;
        if (ix >= 0 && ix < p.w)
          sum += storedToFloat(w[(k * p.kh + i) * p.kw + j], Bf16) *
                 storedToFloat(in[iy * p.w + ix], Bf16);
      }
    }
    y[idx] = sum;
  }
}

/// Depthwise backward data, one thread per input element: the taps of
/// its channel's kg output gradients that read it.
template <typename T, bool Bf16>
__global__ void depthwiseBackwardDataKernel(Conv2dParams p, ConvShape s,
                                            const T *dy, const T *w,
                                            float *dx) {
  for (int64_t idx = cuda::threadIndex(); idx < p.n * p.c * s.inPlane;
       idx += cuda::threadCount()) {
    const int64_t plane = idx / s.inPlane, n = plane / p.c, c = plane % p.c;
    const int64_t iy = idx % s.inPlane / p.w, ix = idx % p.w;
    float sum = 0.0f;
    for (int64_t k = c * s.kg; k < (c + 1) * s.kg; ++k) {
      const T *out = dy + (n * p.k + k) * s.pixels;
      for (int64_t i = 0; i < p.kh; ++i) {
        const int64_t ny = iy + p.padTop - i * p.dilationH;
        if (ny < 0 || ny % p.strideH != 0 || ny / p.strideH >= p.oh)
          continue;
        for (int64_t j = 0; j < p.kw; ++j) {
          const int64_t nx = ix + p.padLeft - j * p.dilationW;
          if (nx < 0 || nx % p.strideW != 0 || nx / p.strideW >= p.ow)
            continue;
          sum += storedToFloat(w[(k * p.kh + i) * p.kw + j], Bf16) *
                 storedToFloat(out[ny / p.strideH * p.ow + nx / p.strideW],
                               Bf16);
        }
      }
    }
    dx[idx] = sum;
  }
}

/// Depthwise backward filter, one block per weight (k, i, j): its threads
/// sum dy * x over images and output pixels in double, then the block by a
/// fixed tree (cuda::blockSum).
template <typename T, bool Bf16>
__global__ void depthwiseBackwardFilterKernel(Conv2dParams p, ConvShape s,
                                              const T *x, const T *dy,
                                              float *dw) {
  __shared__ double scratch[cuda::kBlock];
  const int64_t taps = p.kh * p.kw;
  for (int64_t weight = blockIdx.x; weight < p.k * taps;
       weight += gridDim.x) {
    const int64_t k = weight / taps, i = weight % taps / p.kw,
                  j = weight % p.kw;
    double sum = 0.0;
    for (int64_t e = threadIdx.x; e < p.n * s.pixels; e += blockDim.x) {
      const int64_t n = e / s.pixels, oy = e % s.pixels / p.ow,
                    ox = e % p.ow;
      const int64_t iy = oy * p.strideH + i * p.dilationH - p.padTop;
      const int64_t ix = ox * p.strideW + j * p.dilationW - p.padLeft;
      if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
        continue;
      sum += double(storedToFloat(dy[(n * p.k + k) * s.pixels + oy * p.ow + ox],
                                  Bf16)) *
             storedToFloat(x[(n * p.c + k / s.kg) * s.inPlane + iy * p.w + ix],
                           Bf16);
    }
    sum = cuda::blockSum(sum, scratch);
    if (threadIdx.x == 0)
      dw[weight] = static_cast<float>(sum);
  }
}

template <typename T, typename Out, bool Bf16>
void launchIm2col(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                  const void *x, int64_t offset, int64_t count, Out *col) {
  im2colKernel<T, Out, Bf16><<<cuda::gridFor(s.patch * s.pixels * count),
                               cuda::kBlock, 0, ctx.stream>>>(
      p, s, static_cast<const T *>(x) + offset, count, p.c * s.inPlane, col);
}

/// The im2col matrix of `count` images of group g from image `first`:
/// float32, or (Out = uint16_t, x stored in 16 bits) 16-bit.
template <typename Out>
void im2col(Context &ctx, const Conv2dParams &p, const ConvShape &s,
            const Operand &x, int64_t first, int64_t count, int64_t g,
            Out *col) {
  int64_t offset = (first * p.c + g * s.cg) * s.inPlane;
  withStorage(x, [&](auto t, auto bf16) {
    using T = decltype(t);
    if constexpr (std::is_same_v<Out, float> || !std::is_same_v<T, float>)
      launchIm2col<T, Out, bf16()>(ctx, p, s, x.data, offset, count, col);
  });
  checkLaunch(ctx, "im2colKernel");
}

/// Group g of `count` images' output gradients from `first` gathered into
/// one [kg, count * pixels] matrix: float32, or (Out = uint16_t) 16-bit.
template <typename Out>
void gather(Context &ctx, const Conv2dParams &p, const ConvShape &s,
            const Operand &dy, int64_t first, int64_t count, int64_t g,
            Out *stage) {
  int64_t offset = (first * p.k + g * s.kg) * s.pixels;
  withStorage(dy, [&](auto t, auto bf16) {
    using T = decltype(t);
    if constexpr (std::is_same_v<Out, float> || !std::is_same_v<T, float>)
      gatherKernel<T, Out, bf16()>
          <<<cuda::gridFor(s.kg * s.pixels * count), cuda::kBlock, 0,
             ctx.stream>>>(p, s, static_cast<const T *>(dy.data) + offset,
                           count, stage);
  });
  checkLaunch(ctx, "gatherKernel");
}

/// Group g of the output gradients of `count` images from `first` as one
/// [kg, count * pixels] matrix: read in place (one float32 image), widened
/// into `scratch` (one 16-bit image, all its groups with group 0) or
/// gathered into `stage`.
const float *outputGradient(Context &ctx, const Conv2dParams &p,
                            const ConvShape &s, const Operand &dy,
                            int64_t first, int64_t count, int64_t g,
                            float *stage, float *scratch) {
  if (s.images == 1) {
    if (dy.low && g > 0)
      return scratch + g * s.kg * s.pixels;
    return asFloat(ctx, dy, first * p.k * s.pixels, p.k * s.pixels,
                   scratch) +
           (dy.low ? 0 : g * s.kg * s.pixels);
  }
  gather(ctx, p, s, dy, first, count, g, stage);
  return stage;
}

void gemmForward(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                 const Operand &x, const Operand &w, float *y,
                 float *workspace) {
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  float *scratch = s.images > 1 ? stage + s.kg * s.pixels * s.images : stage;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, scratch);
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(ctx, p, s, x, first, count, g, col);
      // out[kg, count * pixels] = w_g[kg, patch] * col[patch, count * pixels]
      float *group = y + (first * p.k + g * s.kg) * s.pixels;
      float *out = s.images > 1 ? stage : group;
      gemm(ctx, false, false, s.kg, ld, s.patch, 1.0f,
           wf + g * s.kg * s.patch, s.patch, col, ld, 0.0f, out, ld);
      if (s.images > 1 && s.kg * ld > 0) {
        scatterKernel<<<cuda::gridFor(s.kg * ld), cuda::kBlock, 0,
                        ctx.stream>>>(p, s, stage, count, group);
        checkLaunch(ctx, "scatterKernel");
      }
    }
  }
}

void forward(Context &ctx, const Conv2dParams &p, const Operand &x,
             const Operand &w, const float *bias, float *y, float *workspace) {
  if (!validParams(ctx, p, "conv2dForward"))
    return;
  ConvShape s = shapeOf(p);
  if (p.n * p.k * s.pixels == 0)
    return;
  if (convIsDepthwise(p)) {
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseForwardKernel<T, bf16()>
          <<<cuda::gridFor(p.n * p.k * s.pixels), cuda::kBlock, 0,
             ctx.stream>>>(p, s, static_cast<const T *>(x.data),
                           static_cast<const T *>(w.data), y);
    });
    checkLaunch(ctx, "depthwiseForwardKernel");
  } else {
    gemmForward(ctx, p, s, x, w, y, workspace);
  }
  if (!bias)
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
  if (convIsDepthwise(p)) {
    if (p.n * p.c * s.inPlane == 0)
      return;
    withStorage(dy, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseBackwardDataKernel<T, bf16()>
          <<<cuda::gridFor(p.n * p.c * s.inPlane), cuda::kBlock, 0,
             ctx.stream>>>(p, s, static_cast<const T *>(dy.data),
                           static_cast<const T *>(w.data), dx);
    });
    checkLaunch(ctx, "depthwiseBackwardDataKernel");
    return;
  }
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  float *scratch = s.images > 1 ? stage + s.kg * s.pixels * s.images : stage;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, scratch);
  if (w.low)
    scratch += p.k * s.patch;
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      const float *dyg =
          outputGradient(ctx, p, s, dy, first, count, g, stage, scratch);
      // col[patch, count * pixels] = w_g^T[patch, kg] * dy_g[kg, ...]
      gemm(ctx, true, false, s.patch, ld, s.kg, 1.0f,
           wf + g * s.kg * s.patch, s.patch, dyg, ld, 0.0f, col, ld);
      if (s.cg * s.inPlane == 0)
        continue;
      col2imKernel<<<cuda::gridFor(count * s.cg * s.inPlane), cuda::kBlock, 0,
                     ctx.stream>>>(p, s, col, count, p.c * s.inPlane,
                                   dx + (first * p.c + g * s.cg) * s.inPlane);
      checkLaunch(ctx, "col2imKernel");
    }
  }
}

void backwardFilter(Context &ctx, const Conv2dParams &p, const Operand &x,
                    const Operand &dy, float *dw, float *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardFilter"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p)) {
    const int64_t weights = p.k * p.kh * p.kw;
    if (weights == 0)
      return;
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseBackwardFilterKernel<T, bf16()>
          <<<unsigned(std::min<int64_t>(weights, 1 << 20)), cuda::kBlock, 0,
             ctx.stream>>>(p, s, static_cast<const T *>(x.data),
                           static_cast<const T *>(dy.data), dw);
    });
    checkLaunch(ctx, "depthwiseBackwardFilterKernel");
    return;
  }
  if (p.n == 0) {
    if (p.k * s.patch > 0)
      cudaMemsetAsync(dw, 0, sizeof(float) * p.k * s.patch, ctx.stream);
    return;
  }
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      const float *dyg =
          outputGradient(ctx, p, s, dy, first, count, g, stage, stage);
      im2col(ctx, p, s, x, first, count, g, col);
      // dw_g[kg, patch] (+)= dy_g[kg, count * pixels] * col^T
      gemm(ctx, false, true, s.kg, s.patch, ld, 1.0f, dyg, ld, col, ld,
           first == 0 ? 0.0f : 1.0f, dw + g * s.kg * s.patch, s.patch);
    }
  }
}

} // namespace

#include "ConvEntryPoints.inc"

//===----------------------------------------------------------------------===//
// 16-bit operands multiplied as stored (gemm16)
//===----------------------------------------------------------------------===//

namespace {

/// `bytes` rounded up to the 256 bytes each part of a native workspace
/// starts at (conv2dWorkspaceBytes).
int64_t alignedBytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// Group g of `count` images' 16-bit output gradients from `first`: in
/// place (one image per GEMM) or gathered into `stage`.
const uint16_t *outputGradient16(Context &ctx, Storage16 storage,
                                 const Conv2dParams &p, const ConvShape &s,
                                 const uint16_t *dy, int64_t first,
                                 int64_t count, int64_t g, uint16_t *stage) {
  if (s.images == 1)
    return dy + (first * p.k + g * s.kg) * s.pixels;
  gather(ctx, p, s, operand(storage, dy), first, count, g, stage);
  return stage;
}

} // namespace

void conv2dForwardNative16(Context &ctx, Storage16 storage,
                           const Conv2dParams &p, const uint16_t *x,
                           const uint16_t *w, const float *bias, float *y,
                           void *workspace) {
  if (!validParams(ctx, p, "conv2dForwardNative16"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p)) {
    forward(ctx, p, operand(storage, x), operand(storage, w), bias, y,
            nullptr);
    return;
  }
  if (p.n * p.k * s.pixels == 0)
    return;
  auto *col = static_cast<uint16_t *>(workspace);
  auto *stage = reinterpret_cast<float *>(
      static_cast<char *>(workspace) +
      alignedBytes(s.patch * s.pixels * s.images * 2));
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(ctx, p, s, operand(storage, x), first, count, g, col);
      float *group = y + (first * p.k + g * s.kg) * s.pixels;
      float *out = s.images > 1 ? stage : group;
      gemm16(ctx, storage, false, false, s.kg, ld, s.patch, 1.0f,
             w + g * s.kg * s.patch, s.patch, col, ld, 0.0f, out, ld);
      if (s.images > 1 && s.kg * ld > 0) {
        scatterKernel<<<cuda::gridFor(s.kg * ld), cuda::kBlock, 0,
                        ctx.stream>>>(p, s, stage, count, group);
        checkLaunch(ctx, "scatterKernel");
      }
    }
  }
  if (!bias)
    return;
  addBiasKernel<<<cuda::gridFor(p.n * p.k * s.pixels), cuda::kBlock, 0,
                  ctx.stream>>>(p.n * p.k, p.k, s.pixels, bias, y);
  checkLaunch(ctx, "addBiasKernel");
}

void conv2dBackwardDataNative16(Context &ctx, Storage16 storage,
                                const Conv2dParams &p, const uint16_t *dy,
                                const uint16_t *w, float *dx,
                                void *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardDataNative16"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p)) {
    backwardData(ctx, p, operand(storage, dy), operand(storage, w), dx,
                 nullptr);
    return;
  }
  auto *col = static_cast<float *>(workspace);
  auto *stage = reinterpret_cast<uint16_t *>(
      static_cast<char *>(workspace) +
      alignedBytes(s.patch * s.pixels * s.images * 4));
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      const uint16_t *dyg =
          outputGradient16(ctx, storage, p, s, dy, first, count, g, stage);
      gemm16(ctx, storage, true, false, s.patch, ld, s.kg, 1.0f,
             w + g * s.kg * s.patch, s.patch, dyg, ld, 0.0f, col, ld);
      if (s.cg * s.inPlane == 0)
        continue;
      col2imKernel<<<cuda::gridFor(count * s.cg * s.inPlane), cuda::kBlock, 0,
                     ctx.stream>>>(p, s, col, count, p.c * s.inPlane,
                                   dx + (first * p.c + g * s.cg) * s.inPlane);
      checkLaunch(ctx, "col2imKernel");
    }
  }
}

void conv2dBackwardFilterNative16(Context &ctx, Storage16 storage,
                                  const Conv2dParams &p, const uint16_t *x,
                                  const uint16_t *dy, float *dw,
                                  void *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardFilterNative16"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p) || p.n == 0) {
    backwardFilter(ctx, p, operand(storage, x), operand(storage, dy), dw,
                   nullptr);
    return;
  }
  auto *col = static_cast<uint16_t *>(workspace);
  auto *stage = reinterpret_cast<uint16_t *>(
      static_cast<char *>(workspace) +
      alignedBytes(s.patch * s.pixels * s.images * 2));
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      const uint16_t *dyg =
          outputGradient16(ctx, storage, p, s, dy, first, count, g, stage);
      im2col(ctx, p, s, operand(storage, x), first, count, g, col);
      gemm16(ctx, storage, false, true, s.kg, s.patch, ld, 1.0f, dyg, ld, col,
             ld, first == 0 ? 0.0f : 1.0f, dw + g * s.kg * s.patch, s.patch);
    }
  }
}

} // namespace mtc::rt
