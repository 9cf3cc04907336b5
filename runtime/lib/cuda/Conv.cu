//===- Conv.cu - 2-D convolution as im2col + cuBLAS -----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The structure mirrors cpu/Conv.cpp, with the same GEMM loops
// (ConvGemms.inc): each group of a batch of images (convImagesPerGemm) is
// one GEMM over an im2col matrix [cg * kh * kw, images * oh * ow] in the
// workspace, which is exactly conv2dWorkspaceBytes(p, kernel, storage16,
// native16) bytes, with a staging matrix for several images. 16-bit
// operands are widened as on the CPU, or (conv2d*Native16) multiplied as
// they are stored, on the tensor cores; on maps of a multiple of 8
// pixels (convNativeBatched) the native forward and backward data run
// one strided-batched GEMM over the images instead (a matrix an image,
// read and written in place: no staging matrix), which a pointwise
// convolution runs on its planes alone. The native backward filter
// splits its GEMMs' K into slices run side by side (filterSlices). col2im
// differs: on the GPU
// every dx element gathers the taps that read it (one thread per element, fixed
// order) instead of being scattered into, which needs no atomics and is
// deterministic. Depthwise convolutions run directly, a thread per output
// (forward) or input (backward data) element, a block per weight
// (backward filter).
//
//===----------------------------------------------------------------------===//

#include "ConvOperand.h"
#include "Divisor.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/LayerNormRow.h" // cuda::blockSum

#include <algorithm>
#include <string>
#include <utility>
#include <type_traits>

namespace mtc::rt {

namespace {

/// `v` as a kernel stores it into an Out matrix: widened to float32, or
/// (Out = uint16_t) the 16 bits as stored.
template <typename Out, typename T>
__device__ inline Out loadAs(T v, bool bf16) {
  if constexpr (std::is_same_v<Out, float>)
    return storedToFloat(v, bf16);
  else
    return v;
}

/// How the index kernels below split a flat index into coordinates: by
/// Divisors made for the launch's index range (no 64-bit division on the
/// device for the ranges below 2^31).
struct ConvDivisors {
  Divisor ld;     ///< count * pixels: a row of the im2col matrix
  Divisor pixels; ///< oh * ow
  Divisor taps;   ///< kh * kw
  Divisor kw, ow;
  Divisor plane; ///< cg * h * w: one image's input channels of the group
  Divisor inPlane, w;
  Divisor strideH, strideW;
  Divisor runs; ///< kIm2colRun-element runs in an output row
  Divisor oh;
  Divisor images; ///< the images of the GEMM
};

/// Output pixels of an im2col row a thread copies at once: a vector of 16
/// bytes of 16-bit values.
constexpr int kIm2colRun = 8;

/// The divisors for `count` images per GEMM, every index below `bound`.
ConvDivisors convDivisors(const Conv2dParams &p, const ConvShape &s,
                          int64_t count, int64_t bound) {
  ConvDivisors d;
  d.ld = makeDivisor(count * s.pixels, bound);
  d.pixels = makeDivisor(s.pixels, bound);
  d.taps = makeDivisor(p.kh * p.kw, bound);
  d.kw = makeDivisor(p.kw, bound);
  d.ow = makeDivisor(p.ow, bound);
  d.plane = makeDivisor(s.cg * s.inPlane, bound);
  d.inPlane = makeDivisor(s.inPlane, bound);
  d.w = makeDivisor(p.w, bound);
  // col2im divides offsets below h + padTop (w + padLeft) by the strides.
  d.strideH = makeDivisor(p.strideH, p.h + p.padTop);
  d.strideW = makeDivisor(p.strideW, p.w + p.padLeft);
  d.runs = makeDivisor((p.ow + kIm2colRun - 1) / kIm2colRun, bound);
  d.oh = makeDivisor(p.oh, bound);
  d.images = makeDivisor(count, bound);
  return d;
}

/// Where the im2col matrix of a GEMM's images keeps element (r, pixel) of
/// image j: at r * row + j * image + pixel. Side by side (one GEMM over
/// all the images): row = images * pixels, image = pixels; image-major
/// (a strided-batched GEMM, a matrix an image): row = pixels, image =
/// patch * pixels.
struct ColLayout {
  int64_t row, image;
};

ColLayout sideBySide(const ConvShape &s, int64_t count) {
  return {count * s.pixels, s.pixels};
}
ColLayout imageMajor(const ConvShape &s, int64_t rows) {
  return {s.pixels, rows * s.pixels};
}

/// Stores the n <= kIm2colRun values at dst: as one vector where `vector`
/// (n == kIm2colRun, dst on 16 bytes for 16-bit Out, on 32 for float32),
/// else one at a time.
template <typename Out>
__device__ inline void storeRun(Out *dst, const Out *v, int n, bool vector) {
  if (vector) {
    if constexpr (std::is_same_v<Out, uint16_t>) {
      uint32_t w[kIm2colRun / 2];
#pragma unroll
      for (int e = 0; e < kIm2colRun / 2; ++e) // little-endian
        w[e] = v[2 * e] | static_cast<uint32_t>(v[2 * e + 1]) << 16;
      *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      reinterpret_cast<float4 *>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4 *>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < kIm2colRun; ++e)
    if (e < n)
      dst[e] = v[e];
}

/// col[r, j, oy * ow + ox] (at `at` in layout `c`) = x_j[ci, iy, ix] (0 in
/// padding) for the `count` images x_j = x + j * imageStride, r = (ci *
/// kh + i) * kw + j, and zero rows from r = patch to `rows` (a padded K).
/// A thread copies a run of kIm2colRun consecutive
/// output pixels of one row (fewer at a row's end): the coordinates are
/// worked out once a run rather than once an element, and a whole run
/// whose first element lies on a vector's bounds in `col` (aligned, the
/// host's `vectors`) is written as one vector. Consecutive threads take
/// consecutive runs, so writes are coalesced. T is float or uint16_t
/// (bfloat16 when Bf16, else float16); col is float32 (widened) or holds
/// the 16 bits as stored (Out = uint16_t; 0 is +0 in both formats).
template <typename T, typename Out, bool Bf16>
__global__ void im2colKernel(Conv2dParams p, ConvShape s, ConvDivisors d,
                             const T *x, int64_t count, int64_t imageStride,
                             ColLayout c, int64_t rows, bool vectors,
                             Out *col) {
  const int64_t total = rows * count * p.oh * d.runs.value;
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    const int64_t row = d.runs.divide(idx), run = d.runs.remainder(idx, row);
    const int64_t rest = d.oh.divide(row), oy = d.oh.remainder(row, rest);
    const int64_t r = d.images.divide(rest),
                  image = d.images.remainder(rest, r);
    const int64_t ci = d.taps.divide(r), tap = d.taps.remainder(r, ci);
    const int64_t i = d.kw.divide(tap), j = d.kw.remainder(tap, i);
    const int64_t ox0 = run * kIm2colRun;
    const int n =
        p.ow - ox0 < kIm2colRun ? static_cast<int>(p.ow - ox0) : kIm2colRun;
    const int64_t iy = oy * p.strideH - p.padTop + i * p.dilationH;
    const int64_t ix0 = ox0 * p.strideW - p.padLeft + j * p.dilationW;
    const T *src = x + image * imageStride + ci * s.inPlane + iy * p.w;
    const bool rowInside = r < s.patch && iy >= 0 && iy < p.h;
    Out v[kIm2colRun];
#pragma unroll
    for (int e = 0; e < kIm2colRun; ++e) {
      const int64_t ix = ix0 + e * p.strideW;
      v[e] = rowInside && e < n && ix >= 0 && ix < p.w
                 ? loadAs<Out>(src[ix], Bf16)
                 : Out(0);
    }
    const int64_t at = r * c.row + image * c.image + oy * p.ow + ox0;
    storeRun(col + at, v, n,
             vectors && n == kIm2colRun && at % kIm2colRun == 0);
  }
}

/// dx_j[ci, iy, ix] = sum of col[r, j, pixel] (layout `c`) over the taps
/// (i, j) and output pixels that read (ci, iy, ix), for the `count` images
/// dx_j = dx + j * imageStride. dx is overwritten; a 16-bit dx takes the
/// sums rounded (bfloat16 when `bf16`).
template <typename DX>
__global__ void col2imKernel(Conv2dParams p, ConvShape s, ConvDivisors d,
                             const float *col, ColLayout c, int64_t count,
                             int64_t imageStride, DX *dx, bool bf16) {
  const int64_t perImage = s.cg * s.inPlane;
  for (int64_t idx = cuda::threadIndex(); idx < count * perImage;
       idx += cuda::threadCount()) {
    const int64_t image = d.plane.divide(idx),
                  within = d.plane.remainder(idx, image);
    const int64_t ci = d.inPlane.divide(within),
                  at = d.inPlane.remainder(within, ci);
    const int64_t iy = d.w.divide(at), ix = d.w.remainder(at, iy);
    float sum = 0.0f;
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t ny = iy + p.padTop - i * p.dilationH;
      if (ny < 0)
        continue;
      const int64_t oy = d.strideH.divide(ny);
      if (d.strideH.remainder(ny, oy) != 0 || oy >= p.oh)
        continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t nx = ix + p.padLeft - j * p.dilationW;
        if (nx < 0)
          continue;
        const int64_t ox = d.strideW.divide(nx);
        if (d.strideW.remainder(nx, ox) != 0 || ox >= p.ow)
          continue;
        sum += col[((ci * p.kh + i) * p.kw + j) * c.row + image * c.image +
                   oy * p.ow + ox];
      }
    }
    storeFloat(dx + image * imageStride + ci * s.inPlane + iy * p.w + ix, sum,
               bf16);
  }
}

/// stage[k, j * pixels + q] = y[first + j, g * kg + k, q] (widened, or
/// the 16 bits as stored): group g of `count` images' output gradients as
/// one matrix. `y` points at image `first`, group g.
template <typename T, typename Out, bool Bf16>
__global__ void gatherKernel(Conv2dParams p, ConvShape s, ConvDivisors d,
                             const T *y, int64_t count, Out *stage) {
  const int64_t ld = count * s.pixels;
  for (int64_t idx = cuda::threadIndex(); idx < s.kg * ld;
       idx += cuda::threadCount()) {
    const int64_t k = d.ld.divide(idx), column = d.ld.remainder(idx, k);
    const int64_t image = d.pixels.divide(column),
                  q = d.pixels.remainder(column, image);
    stage[idx] = loadAs<Out>(y[(image * p.k + k) * s.pixels + q], Bf16);
  }
}

/// The inverse of gather: y[first + j, g * kg + k, q] = stage[k, j *
/// pixels + q], `y` pointing at image `first`, group g; a 16-bit y takes
/// the values rounded (bfloat16 when `bf16`).
template <typename Y>
__global__ void scatterKernel(Conv2dParams p, ConvShape s, ConvDivisors d,
                              const float *stage, int64_t count, Y *y,
                              bool bf16) {
  const int64_t ld = count * s.pixels;
  for (int64_t idx = cuda::threadIndex(); idx < s.kg * ld;
       idx += cuda::threadCount()) {
    const int64_t k = d.ld.divide(idx), column = d.ld.remainder(idx, k);
    const int64_t image = d.pixels.divide(column),
                  q = d.pixels.remainder(column, image);
    storeFloat(y + (image * p.k + k) * s.pixels + q, stage[idx], bf16);
  }
}

/// y[n, k, :] += bias[k]: `pixels` and `k` as Divisors of the element
/// and plane indices.
__global__ void addBiasKernel(int64_t planes, Divisor k, Divisor pixels,
                              const float *bias, float *y) {
  for (int64_t idx = cuda::threadIndex(); idx < planes * pixels.value;
       idx += cuda::threadCount()) {
    const int64_t plane = pixels.divide(idx);
    y[idx] += bias[k.remainder(plane, k.divide(plane))];
  }
}

/// flipped[g, ci, ko, i, j] = w[g, ko, ci, kh - 1 - i, kw - 1 - j] (the
/// groups' blocks of cg by kg by `taps` values): the weight of the forward
/// that computes backward data (convTransposedAsForward).
__global__ void flipWeightKernel(int64_t count, Divisor taps, Divisor kg,
                                 Divisor cg, const uint16_t *w,
                                 uint16_t *flipped) {
  for (int64_t idx = cuda::threadIndex(); idx < count;
       idx += cuda::threadCount()) {
    const int64_t rows = taps.divide(idx), t = taps.remainder(idx, rows);
    const int64_t pairs = kg.divide(rows), ko = kg.remainder(rows, pairs);
    const int64_t g = cg.divide(pairs), ci = cg.remainder(pairs, g);
    flipped[idx] = w[((g * kg.value + ko) * cg.value + ci) * taps.value +
                     taps.value - 1 - t];
  }
}

/// padded[r, q] = w[r, q] for q < cols, 0 up to the padded rows' length
/// (`padded` as a Divisor): r < rows.
__global__ void padRowsKernel(int64_t rows, int64_t cols, Divisor padded,
                              const uint16_t *w, uint16_t *out) {
  for (int64_t idx = cuda::threadIndex(); idx < rows * padded.value;
       idx += cuda::threadCount()) {
    const int64_t r = padded.divide(idx), q = padded.remainder(idx, r);
    out[idx] = q < cols ? w[r * cols + q] : uint16_t(0);
  }
}

/// The divisors of the depthwise kernels' flat indices (no 64-bit
/// division per element or tap on the GPU).
struct DepthwiseDivisors {
  Divisor plane;  ///< pixels (forward, filter) or inPlane (data)
  Divisor cols;   ///< ow (forward, filter) or w (data)
  Divisor planes; ///< k (forward) or c (data) planes an image
  Divisor kg;     ///< output channels per input channel
  Divisor strideH, strideW;
};

/// For the forward (`data` false: outputs numbered over [n, k, oh, ow])
/// or the backward data (`data`: inputs over [n, c, h, w]); the backward
/// filter numbers [n, oh, ow] of one channel, within both bounds.
DepthwiseDivisors depthwiseDivisors(const Conv2dParams &p, const ConvShape &s,
                                    bool data) {
  const int64_t bound = data ? p.n * p.c * s.inPlane : p.n * p.k * s.pixels;
  DepthwiseDivisors d;
  d.plane = makeDivisor(data ? s.inPlane : s.pixels, bound);
  d.cols = makeDivisor(data ? p.w : p.ow, bound);
  d.planes = makeDivisor(data ? p.c : p.k, bound);
  d.kg = makeDivisor(s.kg, bound);
  // The backward data divides offsets below h + padTop (w + padLeft).
  d.strideH = makeDivisor(p.strideH, p.h + p.padTop);
  d.strideW = makeDivisor(p.strideW, p.w + p.padLeft);
  return d;
}

/// Depthwise forward, one thread per output: y[n, k, oy, ox] = the taps
/// of x[n, k / kg] under w[k], added in (i, j) order.
template <typename T, bool Bf16>
__global__ void depthwiseForwardKernel(Conv2dParams p, ConvShape s,
                                       DepthwiseDivisors d, const T *x,
                                       const T *w, float *y) {
  for (int64_t idx = cuda::threadIndex(); idx < p.n * p.k * s.pixels;
       idx += cuda::threadCount()) {
    const int64_t plane = d.plane.divide(idx),
                  pixel = d.plane.remainder(idx, plane);
    const int64_t n = d.planes.divide(plane), k = d.planes.remainder(plane, n);
    const int64_t oy = d.cols.divide(pixel), ox = d.cols.remainder(pixel, oy);
    const T *in = x + (n * p.c + d.kg.divide(k)) * s.inPlane;
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
/// its channel's kg output gradients that read it, stored as DX (a 16-bit
/// dx only with 16-bit T).
template <typename T, bool Bf16, typename DX>
__global__ void depthwiseBackwardDataKernel(Conv2dParams p, ConvShape s,
                                            DepthwiseDivisors d, const T *dy,
                                            const T *w, DX *dx) {
  for (int64_t idx = cuda::threadIndex(); idx < p.n * p.c * s.inPlane;
       idx += cuda::threadCount()) {
    const int64_t plane = d.plane.divide(idx),
                  at = d.plane.remainder(idx, plane);
    const int64_t n = d.planes.divide(plane), c = d.planes.remainder(plane, n);
    const int64_t iy = d.cols.divide(at), ix = d.cols.remainder(at, iy);
    float sum = 0.0f;
    for (int64_t k = c * s.kg; k < (c + 1) * s.kg; ++k) {
      const T *out = dy + (n * p.k + k) * s.pixels;
      for (int64_t i = 0; i < p.kh; ++i) {
        const int64_t ny = iy + p.padTop - i * p.dilationH;
        if (ny < 0)
          continue;
        const int64_t oy = d.strideH.divide(ny);
        if (d.strideH.remainder(ny, oy) != 0 || oy >= p.oh)
          continue;
        for (int64_t j = 0; j < p.kw; ++j) {
          const int64_t nx = ix + p.padLeft - j * p.dilationW;
          if (nx < 0)
            continue;
          const int64_t ox = d.strideW.divide(nx);
          if (d.strideW.remainder(nx, ox) != 0 || ox >= p.ow)
            continue;
          sum += storedToFloat(w[(k * p.kh + i) * p.kw + j], Bf16) *
                 storedToFloat(out[oy * p.ow + ox], Bf16);
        }
      }
    }
    storeFloat(dx + idx, sum, Bf16);
  }
}

/// Depthwise backward filter, one block per weight (k, i, j): its threads
/// sum dy * x over images and output pixels in double, then the block by a
/// fixed tree (cuda::blockSum).
template <typename T, bool Bf16>
__global__ void depthwiseBackwardFilterKernel(Conv2dParams p, ConvShape s,
                                              DepthwiseDivisors d, const T *x,
                                              const T *dy, float *dw) {
  __shared__ double scratch[cuda::kBlock / 32];
  const int64_t taps = p.kh * p.kw;
  for (int64_t weight = blockIdx.x; weight < p.k * taps;
       weight += gridDim.x) {
    const int64_t k = weight / taps, i = weight % taps / p.kw,
                  j = weight % p.kw;
    const T *in = x + d.kg.divide(k) * s.inPlane;
    double sum = 0.0;
    for (int64_t e = threadIdx.x; e < p.n * s.pixels; e += blockDim.x) {
      const int64_t n = d.plane.divide(e), pixel = d.plane.remainder(e, n);
      const int64_t oy = d.cols.divide(pixel), ox = d.cols.remainder(pixel, oy);
      const int64_t iy = oy * p.strideH + i * p.dilationH - p.padTop;
      const int64_t ix = ox * p.strideW + j * p.dilationW - p.padLeft;
      if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
        continue;
      sum += double(storedToFloat(dy[(n * p.k + k) * s.pixels + oy * p.ow + ox],
                                  Bf16)) *
             storedToFloat(in[n * p.c * s.inPlane + iy * p.w + ix], Bf16);
    }
    sum = cuda::blockSum(sum, scratch);
    if (threadIdx.x == 0)
      dw[weight] = static_cast<float>(sum);
  }
}

/// The im2col matrix of `count` images of group g from image `first`, in
/// `layout`: float32, or (Out = uint16_t, x stored in 16 bits) 16-bit; its
/// rows from patch to `rows` (0: none) are zeros.
template <typename Out>
void im2colAs(Context &ctx, const Conv2dParams &p, const ConvShape &s,
              const Operand &x, int64_t first, int64_t count, int64_t g,
              ColLayout layout, Out *col, int64_t rows = 0) {
  rows = std::max(rows, s.patch);
  int64_t offset = (first * p.c + g * s.cg) * s.inPlane;
  withStorage(x, [&](auto t, auto bf16) {
    using T = decltype(t);
    const int64_t runs =
        rows * count * p.oh * ((p.ow + kIm2colRun - 1) / kIm2colRun);
    // Vectors of a run's bytes: col aligned to one, and rows and images
    // whole runs apart (runs at multiples of kIm2colRun then start on one).
    const bool vectors =
        reinterpret_cast<uintptr_t>(col) % (kIm2colRun * sizeof(Out)) == 0 &&
        layout.row % kIm2colRun == 0 && layout.image % kIm2colRun == 0;
    if constexpr (std::is_same_v<Out, float> || !std::is_same_v<T, float>)
      im2colKernel<T, Out, bf16()>
          <<<cuda::gridFor(runs), cuda::kBlock, 0, ctx.stream>>>(
              p, s, convDivisors(p, s, count, runs),
              static_cast<const T *>(x.data) + offset, count, p.c * s.inPlane,
              layout, rows, vectors, col);
  });
  checkLaunch(ctx, "im2colKernel");
}

/// The im2col matrix of one GEMM over `count` images (side by side), as
/// ConvGemms.inc wants it.
template <typename Out>
void im2col(Context &ctx, const Conv2dParams &p, const ConvShape &s,
            const Operand &x, int64_t first, int64_t count, int64_t g,
            Out *col) {
  im2colAs(ctx, p, s, x, first, count, g, sideBySide(s, count), col);
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
      gatherKernel<T, Out, bf16()><<<cuda::gridFor(s.kg * s.pixels * count),
                                     cuda::kBlock, 0, ctx.stream>>>(
          p, s, convDivisors(p, s, count, s.kg * s.pixels * count),
          static_cast<const T *>(dy.data) + offset, count, stage);
  });
  checkLaunch(ctx, "gatherKernel");
}

void gemmOf(Context &ctx, Storage16, bool transA, bool transB, int64_t m,
            int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
            int64_t ldb, float beta, float *c, int64_t ldc) {
  gemm(ctx, transA, transB, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/// A GEMM of 16-bit operands into a float32 or 16-bit C.
template <typename C>
void gemmOf(Context &ctx, Storage16 storage, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
            const uint16_t *b, int64_t ldb, float beta, C *c, int64_t ldc) {
  gemm16(ctx, storage, transA, transB, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
         ldc);
}

template <typename Y>
void scatterGroup(Context &ctx, Storage16 storage, const Conv2dParams &p,
                  const ConvShape &s, const float *stage, int64_t count, Y *y) {
  if (s.kg * count * s.pixels == 0)
    return;
  scatterKernel<<<cuda::gridFor(s.kg * count * s.pixels), cuda::kBlock, 0,
                  ctx.stream>>>(
      p, s, convDivisors(p, s, count, s.kg * count * s.pixels), stage, count, y,
      storage == Storage16::Bf16);
  checkLaunch(ctx, "scatterKernel");
}

/// col2im of `count` images' im2col matrices in `layout` into the input
/// planes of their group at dx (overwritten; a 16-bit dx in `storage`).
template <typename DX>
void col2imAs(Context &ctx, Storage16 storage, const Conv2dParams &p,
              const ConvShape &s, const float *col, ColLayout layout,
              int64_t count, DX *dx) {
  if (count * s.cg * s.inPlane == 0)
    return;
  col2imKernel<<<cuda::gridFor(count * s.cg * s.inPlane), cuda::kBlock, 0,
                 ctx.stream>>>(
      p, s, convDivisors(p, s, count, count * s.cg * s.inPlane), col, layout,
      count, p.c * s.inPlane, dx, storage == Storage16::Bf16);
  checkLaunch(ctx, "col2imKernel");
}

template <typename DX>
void col2imGroup(Context &ctx, Storage16 storage, const Conv2dParams &p,
                 const ConvShape &s, const float *col, int64_t count, DX *dx) {
  col2imAs(ctx, storage, p, s, col, sideBySide(s, count), count, dx);
}

#include "ConvGemms.inc"

/// patch elements padded to a multiple of 8: the rows of the native
/// forward's GEMM operands and of the backward filter's partial sums
/// (16-byte rows: cuBLAS takes much slower kernels for others, and
/// ResNet's stem has 147).
int64_t paddedPatch(const ConvShape &s) { return (s.patch + 7) / 8 * 8; }

/// The images a native 16-bit forward or backward data takes per
/// strided-batched GEMM (convNativeBatched): all of them when the convolution
/// is pointwise (no im2col matrix), else as many as the workspace's matrix
/// holds.
int64_t nativeImages(const Conv2dParams &p, const ConvShape &s) {
  return convIsPointwise(p) ? std::max<int64_t>(p.n, 1) : s.images;
}

/// Calls f(first, count, g) for each group g of each chunk of the images
/// nativeImages takes at once, `count` of them from image `first`.
template <typename F>
void forEachNativeGemm(const Conv2dParams &p, const ConvShape &s, F &&f) {
  const int64_t chunk = nativeImages(p, s);
  for (int64_t first = 0; first < p.n; first += chunk)
    for (int64_t g = 0; g < p.groups; ++g)
      f(first, std::min(chunk, p.n - first), g);
}

/// The forward with 16-bit operands multiplied as stored: for each chunk
/// of images and group, one strided-batched GEMM writes every image's
/// output planes in place, y_j = w_g * col_j, col_j the image's own im2col
/// matrix (image-major in the workspace) or, for a pointwise convolution,
/// its input planes themselves. No staging matrix, no scatter, and no
/// im2col copy of a 1x1 convolution's input.
template <typename Y>
void nativeForward(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                   const Operand &x, const uint16_t *w, uint16_t *col, Y *y) {
  const bool pointwise = convIsPointwise(p);
  // The GEMM's K: the im2col matrix's rows, padded to a multiple of 8 with
  // zero rows, the weight's copy in the workspace with zero columns
  // (conv2dWorkspaceBytes).
  const int64_t rows = pointwise ? s.patch : paddedPatch(s);
  if (rows != s.patch) {
    const int64_t colBytes =
        (rows * s.pixels * nativeImages(p, s) * 2 + 255) / 256 * 256;
    auto *padded = reinterpret_cast<uint16_t *>(
        reinterpret_cast<unsigned char *>(col) + colBytes);
    padRowsKernel<<<cuda::gridFor(p.k * rows), cuda::kBlock, 0, ctx.stream>>>(
        p.k, s.patch, makeDivisor(rows, p.k * rows), w, padded);
    checkLaunch(ctx, "padRowsKernel");
    w = padded;
  }
  forEachNativeGemm(p, s, [&](int64_t first, int64_t count, int64_t g) {
    const uint16_t *b = static_cast<const uint16_t *>(x.data) +
                        (first * p.c + g * s.cg) * s.inPlane;
    int64_t strideB = p.c * s.inPlane;
    if (!pointwise) {
      im2colAs(ctx, p, s, x, first, count, g, imageMajor(s, rows), col, rows);
      b = col;
      strideB = rows * s.pixels;
    }
    gemm16StridedBatched(ctx, x.storage, false, false, s.kg, s.pixels, rows,
                         1.0f, w + g * s.kg * rows, rows, 0, b, s.pixels,
                         strideB, 0.0f, y + (first * p.k + g * s.kg) * s.pixels,
                         s.pixels, p.k * s.pixels, count);
  });
}

/// The backward data with 16-bit operands multiplied as stored: for each
/// chunk of images and group, one strided-batched GEMM reads every image's
/// output gradient planes in place, col_j = w_g^T * dy_j, then col2im
/// (image-major); a pointwise convolution's products are dx itself (a
/// 16-bit dx: each sum rounded once).
template <typename DX>
void nativeBackwardData(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                        const Operand &dy, const uint16_t *w, float *col,
                        DX *dx) {
  const bool pointwise = convIsPointwise(p);
  forEachNativeGemm(p, s, [&](int64_t first, int64_t count, int64_t g) {
    DX *planes = dx + (first * p.c + g * s.cg) * s.inPlane;
    // Image j's products at c + j * strideC.
    auto products = [&](auto *c, int64_t strideC) {
      gemm16StridedBatched(ctx, dy.storage, true, false, s.patch, s.pixels,
                           s.kg, 1.0f, w + g * s.kg * s.patch, s.patch, 0,
                           static_cast<const uint16_t *>(dy.data) +
                               (first * p.k + g * s.kg) * s.pixels,
                           s.pixels, p.k * s.pixels, 0.0f, c, s.pixels, strideC,
                           count);
    };
    if (pointwise) {
      products(planes, p.c * s.inPlane);
    } else {
      products(col, s.patch * s.pixels);
      col2imAs(ctx, dy.storage, p, s, col, imageMajor(s, s.patch), count,
               planes);
    }
  });
}

/// Whether the native backward filter takes a slice an image
/// (pointwiseBackwardFilter): a pointwise convolution whose planes are
/// 16-byte rows of at least 512 pixels.
bool pointwiseByImage(const Conv2dParams &p, const ConvShape &s) {
  return convIsPointwise(p) && convNativeBatched(p) && s.pixels >= 512;
}

/// The backward filter's GEMMs (native 16-bit) are dw_g [kg, patch] =
/// dy_g [kg, columns] * col^T: a small result over a long K (ResNet-50's
/// 64 x 576 over 31360 columns a GEMM), which a GEMM covers with a few
/// tiles on a few SMs (1.4 ms for such a 14.8 GFLOP convolution on an
/// H200). Split into this many slices of K instead, one strided-batched
/// GEMM runs the slices side by side into float32 partial sums that a
/// small kernel adds in slice order afterwards: slices of the columns, or
/// for pointwiseByImage images (then without copies of the operands).
int64_t filterSlices(Context &ctx, const Conv2dParams &p, const ConvShape &s) {
  // Slices of at least this many columns; about four tiles of 128 x 128
  // a SM in all.
  constexpr int64_t kMinSliceColumns = 512, kTile = 128, kTilesPerSm = 4;
  const int64_t columns = s.images * s.pixels; // the widest GEMM's
  const int64_t tiles =
      ((s.kg + kTile - 1) / kTile) * ((s.patch + kTile - 1) / kTile);
  const int64_t wanted =
      (kTilesPerSm * std::max(ctx.smCount, 1) + tiles - 1) / tiles;
  const int64_t bytesPerSlice = p.k * paddedPatch(s) * int64_t(sizeof(float));
  const int64_t held =
      ctx.ltWorkspace ? int64_t(ctx.ltWorkspaceBytes) / bytesPerSlice : 0;
  if (pointwiseByImage(p, s))
    return std::max<int64_t>(1, std::min({wanted, p.n, held}));
  return std::max<int64_t>(
      1, std::min({wanted, columns / kMinSliceColumns, held}));
}

/// dw[r, q] = sum over the slices of partial[slice][r, q] (rows of
/// `ldp`), in slice order.
__global__ void sumSlicesKernel(int64_t rows, Divisor patch, int64_t ldp,
                                int64_t slices, const float *partial,
                                float *dw) {
  const int64_t perSlice = rows * ldp;
  for (int64_t idx = cuda::threadIndex(); idx < rows * patch.value;
       idx += cuda::threadCount()) {
    const int64_t r = patch.divide(idx), q = patch.remainder(idx, r);
    float sum = 0.0f;
    for (int64_t slice = 0; slice < slices; ++slice)
      sum += partial[slice * perSlice + r * ldp + q];
    dw[idx] = sum;
  }
}

/// Group g of the output gradients of `count` images from `first` as one
/// [kg, count * pixels] matrix of Elem: in place (one float32 image, or one
/// 16-bit image multiplied as stored), widened into `scratch` (one 16-bit
/// image, all its groups when g = 0) or gathered into `stage`.
template <typename Elem>
const Elem *outputGradient(Context &ctx, const Conv2dParams &p,
                           const ConvShape &s, const Operand &dy,
                           int64_t first, int64_t count, int64_t g,
                           Elem *stage, float *scratch) {
  if (s.images > 1) {
    gather(ctx, p, s, dy, first, count, g, stage);
    return stage;
  }
  const int64_t offset = (first * p.k + g * s.kg) * s.pixels;
  if constexpr (std::is_same_v<Elem, uint16_t>) {
    return static_cast<const uint16_t *>(dy.data) + offset;
  } else {
    if (!dy.low)
      return static_cast<const float *>(dy.data) + offset;
    if (g == 0)
      asFloat(ctx, dy, first * p.k * s.pixels, p.k * s.pixels, scratch);
    return scratch + g * s.kg * s.pixels;
  }
}

/// Zeroes `slices` partial sums of a weight (filterSlices) in the library
/// workspace; null (reported) if the memset cannot be queued.
float *zeroPartialSums(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                       int64_t slices) {
  auto *partial = static_cast<float *>(ctx.ltWorkspace);
  if (const cudaError_t error = cudaMemsetAsync(
          partial, 0, sizeof(float) * slices * p.k * paddedPatch(s),
          ctx.stream);
      error != cudaSuccess) {
    (void)cudaGetLastError(); // reported here, not by the next launch
    reportError(ctx, std::string("conv2dBackwardFilterNative16: ") +
                         cudaGetErrorString(error));
    return nullptr;
  }
  return partial;
}

/// dw = the sum of the partial sums in slice order.
void sumPartialSums(Context &ctx, const Conv2dParams &p, const ConvShape &s,
                    int64_t slices, const float *partial, float *dw) {
  sumSlicesKernel<<<cuda::gridFor(p.k * s.patch), cuda::kBlock, 0,
                    ctx.stream>>>(p.k, makeDivisor(s.patch, p.k * s.patch),
                                  paddedPatch(s), slices, partial, dw);
  checkLaunch(ctx, "sumSlicesKernel");
}

/// The native backward filter with its K split into `slices`
/// (filterSlices): for each chunk of images and group, the output
/// gradients (gathered as gemmBackwardFilter gathers them) and the im2col
/// matrix, then one strided-batched GEMM over the slices of their columns
/// (the last, shorter slice in a GEMM of its own) adding into partial sums
/// in the library workspace, [slices, k, patch] with rows padded to 8
/// elements (16 bytes); dw is their sum in slice order.
void slicedBackwardFilter(Context &ctx, const Conv2dParams &p,
                          const ConvShape &s, const Operand &x,
                          const Operand &dy, uint16_t *col, uint16_t *stage,
                          int64_t slices, float *dw) {
  const int64_t ldp = paddedPatch(s), perSlice = p.k * ldp;
  float *partial = zeroPartialSums(ctx, p, s, slices);
  if (!partial)
    return;
  for (int64_t first = 0; first < p.n; first += s.images) {
    const int64_t count = std::min(s.images, p.n - first),
                  ld = count * s.pixels;
    // Slices of a multiple of 8 columns keep every slice's first column on
    // 16 bytes; `full` of them, then the rest.
    const int64_t length = ((ld + slices - 1) / slices + 7) / 8 * 8;
    const int64_t full = ld / length, rest = ld - full * length;
    for (int64_t g = 0; g < p.groups; ++g) {
      const uint16_t *dyg =
          outputGradient(ctx, p, s, dy, first, count, g, stage, nullptr);
      im2col(ctx, p, s, x, first, count, g, col);
      float *sums = partial + g * s.kg * ldp;
      if (full > 0)
        gemm16StridedBatched(ctx, dy.storage, false, true, s.kg, s.patch,
                             length, 1.0f, dyg, ld, length, col, ld, length,
                             1.0f, sums, ldp, perSlice, full);
      if (rest > 0)
        gemm16(ctx, dy.storage, false, true, s.kg, s.patch, rest, 1.0f,
               dyg + full * length, ld, col + full * length, ld, 1.0f,
               sums + full * perSlice, ldp);
    }
  }
  sumPartialSums(ctx, p, s, slices, partial, dw);
}

/// The native backward filter of a pointwise convolution whose planes are
/// 16-byte rows (convNativeBatched), a slice an image: each image's output
/// gradient and input planes, read where they are (no gather, no im2col
/// copy), are one GEMM of a strided-batched one over `slices` images at a
/// time, image j adding into partial sum j % slices.
void pointwiseBackwardFilter(Context &ctx, const Conv2dParams &p,
                             const ConvShape &s, const Operand &x,
                             const Operand &dy, int64_t slices, float *dw) {
  const int64_t ldp = paddedPatch(s), perSlice = p.k * ldp;
  float *partial = zeroPartialSums(ctx, p, s, slices);
  if (!partial)
    return;
  const auto *xs = static_cast<const uint16_t *>(x.data);
  const auto *dys = static_cast<const uint16_t *>(dy.data);
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t first = 0; first < p.n; first += slices)
      gemm16StridedBatched(ctx, dy.storage, false, true, s.kg, s.cg, s.pixels,
                           1.0f, dys + (first * p.k + g * s.kg) * s.pixels,
                           s.pixels, p.k * s.pixels,
                           xs + (first * p.c + g * s.cg) * s.pixels, s.pixels,
                           p.c * s.pixels, 1.0f, partial + g * s.kg * ldp, ldp,
                           perSlice, std::min(slices, p.n - first));
  sumPartialSums(ctx, p, s, slices, partial, dw);
}

/// Where a kernel's matrices go in its workspace (conv2dWorkspaceBytes):
/// `first` bytes of one, then the other from the next multiple of 256
/// bytes (native) or right after (widened).
template <typename First, typename Second>
std::pair<First *, Second *> split(void *workspace, int64_t firstElems,
                                   bool native) {
  auto *first = static_cast<First *>(workspace);
  int64_t bytes = firstElems * int64_t(sizeof(First));
  if (native)
    bytes = (bytes + 255) / 256 * 256;
  return {first, reinterpret_cast<Second *>(static_cast<char *>(workspace) +
                                            bytes)};
}

/// y stored as Y: float, or (with 16-bit Elem) uint16_t in x's format,
/// which takes neither a depthwise convolution nor a bias.
template <typename Elem, typename Y>
void convForward(Context &ctx, const Conv2dParams &p, const Operand &x,
                 const Operand &w, const float *bias, Y *y, void *workspace) {
  ConvShape s = convShapeOf(p);
  if constexpr (std::is_same_v<Y, uint16_t>) {
    if (convIsDepthwise(p) || bias) {
      reportError(ctx, "conv2dForwardNative16: a 16-bit result takes neither "
                       "a depthwise convolution nor a bias");
      return;
    }
  }
  if (p.n * p.k * s.pixels == 0)
    return;
  if (convIsDepthwise(p)) {
    if constexpr (std::is_same_v<Y, float>) {
      withStorage(x, [&](auto t, auto bf16) {
        using T = decltype(t);
        depthwiseForwardKernel<T, bf16()><<<cuda::gridFor(p.n * p.k * s.pixels),
                                            cuda::kBlock, 0, ctx.stream>>>(
            p, s, depthwiseDivisors(p, s, false),
            static_cast<const T *>(x.data), static_cast<const T *>(w.data), y);
      });
      checkLaunch(ctx, "depthwiseForwardKernel");
    }
  } else if (std::is_same_v<Elem, uint16_t> && convNativeBatched(p)) {
    nativeForward(ctx, p, s, x, static_cast<const uint16_t *>(w.data),
                  static_cast<uint16_t *>(workspace), y);
  } else {
    constexpr bool native = std::is_same_v<Elem, uint16_t>;
    auto [col, stage] =
        split<Elem, float>(workspace, s.patch * s.pixels * s.images, native);
    const Elem *wm;
    if constexpr (native)
      wm = static_cast<const uint16_t *>(w.data);
    else
      wm = asFloat(ctx, w, 0, p.k * s.patch,
                   s.images > 1 ? stage + s.kg * s.pixels * s.images : stage);
    gemmForward(ctx, p, s, x.storage, x, wm, col, stage, y);
  }
  if constexpr (std::is_same_v<Y, float>) {
    if (!bias)
      return;
    addBiasKernel<<<cuda::gridFor(p.n * p.k * s.pixels), cuda::kBlock, 0,
                    ctx.stream>>>(p.n * p.k, makeDivisor(p.k, p.n * p.k),
                                  makeDivisor(s.pixels, p.n * p.k * s.pixels),
                                  bias, y);
    checkLaunch(ctx, "addBiasKernel");
  }
}

/// dx stored as DX: float, or (with 16-bit Elem) uint16_t in dy's format.
template <typename Elem, typename DX>
void convBackwardData(Context &ctx, const Conv2dParams &p, const Operand &dy,
                      const Operand &w, DX *dx, void *workspace) {
  ConvShape s = convShapeOf(p);
  if (convIsDepthwise(p)) {
    if (p.n * p.c * s.inPlane == 0)
      return;
    withStorage(dy, [&](auto t, auto bf16) {
      using T = decltype(t);
      if constexpr (std::is_same_v<DX, float> || !std::is_same_v<T, float>)
        depthwiseBackwardDataKernel<T, bf16(), DX>
            <<<cuda::gridFor(p.n * p.c * s.inPlane), cuda::kBlock, 0,
               ctx.stream>>>(p, s, depthwiseDivisors(p, s, true),
                             static_cast<const T *>(dy.data),
                             static_cast<const T *>(w.data), dx);
    });
    checkLaunch(ctx, "depthwiseBackwardDataKernel");
    return;
  }
  constexpr bool native = std::is_same_v<Elem, uint16_t>;
  if (native && convBackwardDataAsForward(p)) {
    // dx = the forward of dy by the flipped weight, which sits first in the
    // workspace (conv2dWorkspaceBytes); that forward's matrices follow.
    const Conv2dParams f = convTransposedAsForward(p);
    const int64_t count = p.k * s.patch;
    auto [flipped, col] = split<uint16_t, uint16_t>(workspace, count, true);
    flipWeightKernel<<<cuda::gridFor(count), cuda::kBlock, 0, ctx.stream>>>(
        count, makeDivisor(p.kh * p.kw, count),
        makeDivisor(s.kg, count / (p.kh * p.kw)), makeDivisor(s.cg, p.c),
        static_cast<const uint16_t *>(w.data), flipped);
    checkLaunch(ctx, "flipWeightKernel");
    convForward<uint16_t, DX>(ctx, f, dy, operand(dy.storage, flipped), nullptr,
                              dx, col);
    return;
  }
  if (native && convNativeBatched(p)) {
    nativeBackwardData(ctx, p, s, dy, static_cast<const uint16_t *>(w.data),
                       static_cast<float *>(workspace), dx);
    return;
  }
  std::pair<float *, Elem *> parts =
      split<float, Elem>(workspace, s.patch * s.pixels * s.images, native);
  float *col = parts.first;
  Elem *stage = parts.second;
  const Elem *wm;
  float *scratch = nullptr;
  if constexpr (native) {
    wm = static_cast<const uint16_t *>(w.data);
  } else {
    scratch = s.images > 1 ? stage + s.kg * s.pixels * s.images : stage;
    wm = asFloat(ctx, w, 0, p.k * s.patch, scratch);
    if (w.low)
      scratch += p.k * s.patch;
  }
  gemmBackwardData(
      ctx, p, s, dy.storage, wm,
      [&](int64_t first, int64_t count, int64_t g) {
        return outputGradient(ctx, p, s, dy, first, count, g, stage, scratch);
      },
      col, dx);
}

template <typename Elem>
void convBackwardFilter(Context &ctx, const Conv2dParams &p, const Operand &x,
                        const Operand &dy, float *dw, void *workspace) {
  ConvShape s = convShapeOf(p);
  if (p.n == 0) {
    if (p.k * s.patch > 0)
      cudaMemsetAsync(dw, 0, sizeof(float) * p.k * s.patch, ctx.stream);
    return;
  }
  if (convIsDepthwise(p)) {
    const int64_t weights = p.k * p.kh * p.kw;
    if (weights == 0)
      return;
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseBackwardFilterKernel<T, bf16()>
          <<<unsigned(std::min<int64_t>(weights, 1 << 20)), cuda::kBlock, 0,
             ctx.stream>>>(p, s, depthwiseDivisors(p, s, false),
                           static_cast<const T *>(x.data),
                           static_cast<const T *>(dy.data), dw);
    });
    checkLaunch(ctx, "depthwiseBackwardFilterKernel");
    return;
  }
  constexpr bool native = std::is_same_v<Elem, uint16_t>;
  std::pair<Elem *, Elem *> parts =
      split<Elem, Elem>(workspace, s.patch * s.pixels * s.images, native);
  Elem *col = parts.first, *stage = parts.second;
  if constexpr (native) {
    if (const int64_t slices = filterSlices(ctx, p, s); slices > 1) {
      if (pointwiseByImage(p, s))
        pointwiseBackwardFilter(ctx, p, s, x, dy, slices, dw);
      else
        slicedBackwardFilter(ctx, p, s, x, dy, col, stage, slices, dw);
      return;
    }
  }
  // Widened: one 16-bit image's output gradient goes where a stage would.
  float *scratch = native ? nullptr : reinterpret_cast<float *>(stage);
  gemmBackwardFilter(
      ctx, p, s, dy.storage, x,
      [&](int64_t first, int64_t count, int64_t g) {
        return outputGradient(ctx, p, s, dy, first, count, g, stage, scratch);
      },
      col, dw);
}

void forward(Context &ctx, const Conv2dParams &p, const Operand &x,
             const Operand &w, const float *bias, float *y, float *workspace) {
  if (validConvParams(ctx, p, "conv2dForward"))
    convForward<float, float>(ctx, p, x, w, bias, y, workspace);
}

void backwardData(Context &ctx, const Conv2dParams &p, const Operand &dy,
                  const Operand &w, float *dx, float *workspace) {
  if (validConvParams(ctx, p, "conv2dBackwardData"))
    convBackwardData<float, float>(ctx, p, dy, w, dx, workspace);
}

void backwardFilter(Context &ctx, const Conv2dParams &p, const Operand &x,
                    const Operand &dy, float *dw, float *workspace) {
  if (validConvParams(ctx, p, "conv2dBackwardFilter"))
    convBackwardFilter<float>(ctx, p, x, dy, dw, workspace);
}

} // namespace

#include "ConvEntryPoints.inc"

void conv2dForwardNative16(Context &ctx, Storage16 storage,
                           const Conv2dParams &p, const uint16_t *x,
                           const uint16_t *w, const float *bias, float *y,
                           void *workspace) {
  if (validConvParams(ctx, p, "conv2dForwardNative16"))
    convForward<uint16_t, float>(ctx, p, operand(storage, x),
                                 operand(storage, w), bias, y, workspace);
}

void conv2dForwardNative16(Context &ctx, Storage16 storage,
                           const Conv2dParams &p, const uint16_t *x,
                           const uint16_t *w, const float *bias, uint16_t *y,
                           void *workspace) {
  if (validConvParams(ctx, p, "conv2dForwardNative16"))
    convForward<uint16_t, uint16_t>(ctx, p, operand(storage, x),
                                    operand(storage, w), bias, y, workspace);
}

void conv2dBackwardDataNative16(Context &ctx, Storage16 storage,
                                const Conv2dParams &p, const uint16_t *dy,
                                const uint16_t *w, float *dx,
                                void *workspace) {
  if (validConvParams(ctx, p, "conv2dBackwardDataNative16"))
    convBackwardData<uint16_t, float>(ctx, p, operand(storage, dy),
                                      operand(storage, w), dx, workspace);
}

void conv2dBackwardDataNative16(Context &ctx, Storage16 storage,
                                const Conv2dParams &p, const uint16_t *dy,
                                const uint16_t *w, uint16_t *dx,
                                void *workspace) {
  if (validConvParams(ctx, p, "conv2dBackwardDataNative16"))
    convBackwardData<uint16_t, uint16_t>(ctx, p, operand(storage, dy),
                                         operand(storage, w), dx, workspace);
}

void conv2dBackwardFilterNative16(Context &ctx, Storage16 storage,
                                  const Conv2dParams &p, const uint16_t *x,
                                  const uint16_t *dy, float *dw,
                                  void *workspace) {
  if (validConvParams(ctx, p, "conv2dBackwardFilterNative16"))
    convBackwardFilter<uint16_t>(ctx, p, operand(storage, x),
                                 operand(storage, dy), dw, workspace);
}

} // namespace mtc::rt
