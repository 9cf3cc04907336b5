//===- Conv.cpp - 2-D convolution as im2col + GEMM ------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Each group of a batch of images (convImagesPerGemm: one image, or
// several whose feature maps are small) is lowered to one GEMM over an
// im2col matrix of shape [cg * kh * kw, images * oh * ow] held in the
// workspace, which is exactly conv2dWorkspaceBytes(p, kernel, storage16)
// bytes: the plan reserves no more. With several images the GEMM's output
// (or the output gradient it reads) goes through a staging matrix [kg,
// images * oh * ow] in the workspace, scattered to (gathered from) the
// images' NCHW planes. 16-bit operands meet float32 GEMMs: the im2col and
// the gather widen them as they copy, the weight is widened once per call
// and, with one image per GEMM, the output gradient once per image into
// the rest of the workspace.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "ConvOperand.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <cstring>

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

/// col[r, oy * ow + ox] = x[ci, iy, ix] with r = (ci * kh + i) * kw + j,
/// iy = oy * strideH - padTop + i * dilationH (likewise ix), or 0 where the
/// tap falls into padding; col's rows are `ld` apart. `x` points at the
/// group's first channel; T is float or uint16_t (bfloat16 when Bf16, else
/// float16).
template <typename T, bool Bf16>
void im2colOf(const Conv2dParams &p, const ConvShape &s, const T *x,
              float *col, int64_t ld) {
  const bool parallel = s.patch * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.patch, parallel, [&](int64_t r) {
    int64_t ci = r / (p.kh * p.kw);
    int64_t i = (r / p.kw) % p.kh;
    int64_t j = r % p.kw;
    const T *plane = x + ci * s.inPlane;
    float *dst = col + r * ld;
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      int64_t iy = oy * p.strideH - p.padTop + i * p.dilationH;
      float *row = dst + oy * p.ow;
      if (iy < 0 || iy >= p.h) {
        for (int64_t ox = 0; ox < p.ow; ++ox)
          row[ox] = 0.0f;
        continue;
      }
      const T *src = plane + iy * p.w;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        int64_t ix = ox * p.strideW - p.padLeft + j * p.dilationW;
        row[ox] = (ix >= 0 && ix < p.w) ? storedToFloat(src[ix], Bf16) : 0.0f;
      }
    }
  });
}

/// im2col of the channels of `x` from element `offset` on.
void im2col(const Conv2dParams &p, const ConvShape &s, const Operand &x,
            int64_t offset, float *col, int64_t ld) {
  if (!x.low)
    im2colOf<float, false>(p, s, static_cast<const float *>(x.data) + offset,
                           col, ld);
  else if (x.storage == Storage16::Bf16)
    im2colOf<uint16_t, true>(
        p, s, static_cast<const uint16_t *>(x.data) + offset, col, ld);
  else
    im2colOf<uint16_t, false>(
        p, s, static_cast<const uint16_t *>(x.data) + offset, col, ld);
}

/// The im2col matrix of images [first, first + count) of group g, side by
/// side: image j's columns from j * pixels on, rows count * pixels apart.
void im2colImages(const Conv2dParams &p, const ConvShape &s, const Operand &x,
                  int64_t first, int64_t count, int64_t g, float *col) {
  for (int64_t j = 0; j < count; ++j)
    im2col(p, s, x, ((first + j) * p.c + g * s.cg) * s.inPlane,
           col + j * s.pixels, count * s.pixels);
}

/// stage[k, j * pixels + q] = y[first + j, g * kg + k, q] (widened) for the
/// `count` images from `first`: group g of their output gradients as one
/// matrix, rows count * pixels apart.
template <typename T, bool Bf16>
void gatherOf(const Conv2dParams &p, const ConvShape &s, const T *y,
              int64_t first, int64_t count, int64_t g, float *stage) {
  const int64_t ld = count * s.pixels;
  const bool parallel = s.kg * ld >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.kg, parallel, [&](int64_t k) {
    for (int64_t j = 0; j < count; ++j) {
      const T *src = y + ((first + j) * p.k + g * s.kg + k) * s.pixels;
      float *dst = stage + k * ld + j * s.pixels;
      for (int64_t q = 0; q < s.pixels; ++q)
        dst[q] = storedToFloat(src[q], Bf16);
    }
  });
}

void gather(const Conv2dParams &p, const ConvShape &s, const Operand &y,
            int64_t first, int64_t count, int64_t g, float *stage) {
  if (!y.low)
    gatherOf<float, false>(p, s, static_cast<const float *>(y.data), first,
                           count, g, stage);
  else if (y.storage == Storage16::Bf16)
    gatherOf<uint16_t, true>(p, s, static_cast<const uint16_t *>(y.data),
                             first, count, g, stage);
  else
    gatherOf<uint16_t, false>(p, s, static_cast<const uint16_t *>(y.data),
                              first, count, g, stage);
}

/// The inverse of gather: y[first + j, g * kg + k, q] = stage[k, j *
/// pixels + q].
void scatter(const Conv2dParams &p, const ConvShape &s, const float *stage,
             int64_t first, int64_t count, int64_t g, float *y) {
  const int64_t ld = count * s.pixels;
  const bool parallel = s.kg * ld >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.kg, parallel, [&](int64_t k) {
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(y + ((first + j) * p.k + g * s.kg + k) * s.pixels,
                  stage + k * ld + j * s.pixels, sizeof(float) * s.pixels);
  });
}

/// The adjoint of im2col: dx[ci, iy, ix] += col[r, pixel] for every tap
/// that read (ci, iy, ix), col's rows `ld` apart. Threads own whole
/// channels, so each dx element is accumulated by one thread in a fixed
/// order.
void col2imAccumulate(const Conv2dParams &p, const ConvShape &s,
                      const float *col, int64_t ld, float *dx) {
  const bool parallel = s.patch * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.cg, parallel, [&](int64_t ci) {
    float *plane = dx + ci * s.inPlane;
    for (int64_t i = 0; i < p.kh; ++i) {
      for (int64_t j = 0; j < p.kw; ++j) {
        const float *src = col + ((ci * p.kh + i) * p.kw + j) * ld;
        for (int64_t oy = 0; oy < p.oh; ++oy) {
          int64_t iy = oy * p.strideH - p.padTop + i * p.dilationH;
          if (iy < 0 || iy >= p.h)
            continue;
          for (int64_t ox = 0; ox < p.ow; ++ox) {
            int64_t ix = ox * p.strideW - p.padLeft + j * p.dilationW;
            if (ix >= 0 && ix < p.w)
              plane[iy * p.w + ix] += src[oy * p.ow + ox];
          }
        }
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// Depthwise convolutions (one input channel per group), run directly
//===----------------------------------------------------------------------===//

/// y[n, k] = sum over taps (i, j) of w[k, i, j] * x[n, k / kg] shifted:
/// threads own output planes and add the taps in a fixed order.
template <typename T, bool Bf16>
void depthwiseForward(const Conv2dParams &p, const ConvShape &s, const T *x,
                      const T *w, float *y) {
  const bool parallel =
      p.n * p.k * s.pixels * p.kh * p.kw >= cpu::kParallelGrain;
  cpu::parallelFor(0, p.n * p.k, parallel, [&](int64_t plane) {
    const int64_t n = plane / p.k, k = plane % p.k;
    const T *in = x + (n * p.c + k / s.kg) * s.inPlane;
    float *out = y + plane * s.pixels;
    std::fill(out, out + s.pixels, 0.0f);
    for (int64_t i = 0; i < p.kh; ++i) {
      int64_t oy0, oy1;
      const int64_t offY = i * p.dilationH - p.padTop;
      tapRange(p.oh, p.h, p.strideH, offY, &oy0, &oy1);
      for (int64_t j = 0; j < p.kw; ++j) {
        const float tap = storedToFloat(w[(k * p.kh + i) * p.kw + j], Bf16);
        int64_t ox0, ox1;
        const int64_t offX = j * p.dilationW - p.padLeft;
        tapRange(p.ow, p.w, p.strideW, offX, &ox0, &ox1);
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const T *row = in + (oy * p.strideH + offY) * p.w;
          float *o = out + oy * p.ow;
          for (int64_t ox = ox0; ox < ox1; ++ox)
            o[ox] += tap * storedToFloat(row[ox * p.strideW + offX], Bf16);
        }
      }
    }
  });
}

/// dx[n, c] = sum over c's kg output channels k and taps of w[k, i, j] *
/// dy[n, k] shifted back: threads own input planes.
template <typename T, bool Bf16>
void depthwiseBackwardData(const Conv2dParams &p, const ConvShape &s,
                           const T *dy, const T *w, float *dx) {
  const bool parallel =
      p.n * p.k * s.pixels * p.kh * p.kw >= cpu::kParallelGrain;
  cpu::parallelFor(0, p.n * p.c, parallel, [&](int64_t plane) {
    const int64_t n = plane / p.c, c = plane % p.c;
    float *in = dx + plane * s.inPlane;
    std::fill(in, in + s.inPlane, 0.0f);
    for (int64_t k = c * s.kg; k < (c + 1) * s.kg; ++k) {
      const T *out = dy + (n * p.k + k) * s.pixels;
      for (int64_t i = 0; i < p.kh; ++i) {
        int64_t oy0, oy1;
        const int64_t offY = i * p.dilationH - p.padTop;
        tapRange(p.oh, p.h, p.strideH, offY, &oy0, &oy1);
        for (int64_t j = 0; j < p.kw; ++j) {
          const float tap = storedToFloat(w[(k * p.kh + i) * p.kw + j], Bf16);
          int64_t ox0, ox1;
          const int64_t offX = j * p.dilationW - p.padLeft;
          tapRange(p.ow, p.w, p.strideW, offX, &ox0, &ox1);
          for (int64_t oy = oy0; oy < oy1; ++oy) {
            float *row = in + (oy * p.strideH + offY) * p.w;
            const T *g = out + oy * p.ow;
            for (int64_t ox = ox0; ox < ox1; ++ox)
              row[ox * p.strideW + offX] += tap * storedToFloat(g[ox], Bf16);
          }
        }
      }
    }
  });
}

/// dw[k, i, j] = sum over images and output pixels of dy[n, k] * x[n, k /
/// kg] shifted, in double: threads own weights.
template <typename T, bool Bf16>
void depthwiseBackwardFilter(const Conv2dParams &p, const ConvShape &s,
                             const T *x, const T *dy, float *dw) {
  const int64_t taps = p.kh * p.kw;
  const bool parallel = p.n * p.k * s.pixels * taps >= cpu::kParallelGrain;
  cpu::parallelFor(0, p.k * taps, parallel, [&](int64_t weight) {
    const int64_t k = weight / taps, i = weight % taps / p.kw,
                  j = weight % p.kw;
    int64_t oy0, oy1, ox0, ox1;
    const int64_t offY = i * p.dilationH - p.padTop,
                  offX = j * p.dilationW - p.padLeft;
    tapRange(p.oh, p.h, p.strideH, offY, &oy0, &oy1);
    tapRange(p.ow, p.w, p.strideW, offX, &ox0, &ox1);
    double sum = 0.0;
    for (int64_t n = 0; n < p.n; ++n) {
      const T *in = x + (n * p.c + k / s.kg) * s.inPlane;
      const T *out = dy + (n * p.k + k) * s.pixels;
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        const T *row = in + (oy * p.strideH + offY) * p.w;
        const T *g = out + oy * p.ow;
        float partial = 0.0f;
        for (int64_t ox = ox0; ox < ox1; ++ox)
          partial += storedToFloat(g[ox], Bf16) *
                     storedToFloat(row[ox * p.strideW + offX], Bf16);
        sum += partial;
      }
    }
    dw[weight] = static_cast<float>(sum);
  });
}

void addBias(const Conv2dParams &p, const ConvShape &s, const float *bias,
             float *y) {
  const bool parallel = p.n * p.k * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, p.n * p.k, parallel, [&](int64_t plane) {
    float b = bias[plane % p.k];
    float *dst = y + plane * s.pixels;
    for (int64_t i = 0; i < s.pixels; ++i)
      dst[i] += b;
  });
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

void forward(Context &ctx, const Conv2dParams &p, const Operand &x,
             const Operand &w, const float *bias, float *y, float *workspace) {
  if (!validParams(ctx, p, "conv2dForward"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p)) {
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseForward<T, bf16()>(p, s, static_cast<const T *>(x.data),
                                  static_cast<const T *>(w.data), y);
    });
    if (bias)
      addBias(p, s, bias, y);
    return;
  }
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  float *scratch = s.images > 1 ? stage + s.kg * s.pixels * s.images : stage;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, scratch);
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      im2colImages(p, s, x, first, count, g, col);
      // out[kg, count * pixels] = w_g[kg, patch] * col[patch, count * pixels]
      float *out = s.images > 1 ? stage : y + (first * p.k + g * s.kg) * s.pixels;
      gemm(ctx, false, false, s.kg, ld, s.patch, 1.0f,
           wf + g * s.kg * s.patch, s.patch, col, ld, 0.0f, out, ld);
      if (s.images > 1)
        scatter(p, s, stage, first, count, g, y);
    }
  }
  if (bias)
    addBias(p, s, bias, y);
}

/// Group g of the output gradients of `count` images from `first` as one
/// [kg, count * pixels] matrix: read in place (one float32 image), widened
/// into `scratch` (one 16-bit image) or gathered into `stage`.
const float *outputGradient(Context &ctx, const Conv2dParams &p,
                            const ConvShape &s, const Operand &dy,
                            int64_t first, int64_t count, int64_t g,
                            float *stage, float *scratch) {
  if (s.images > 1) {
    gather(p, s, dy, first, count, g, stage);
    return stage;
  }
  // One image: widen all its groups at once, with group 0.
  if (dy.low && g > 0)
    return scratch + g * s.kg * s.pixels;
  return asFloat(ctx, dy, first * p.k * s.pixels, p.k * s.pixels, scratch) +
         (dy.low ? 0 : g * s.kg * s.pixels);
}

void backwardData(Context &ctx, const Conv2dParams &p, const Operand &dy,
                  const Operand &w, float *dx, float *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardData"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p)) {
    withStorage(dy, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseBackwardData<T, bf16()>(p, s, static_cast<const T *>(dy.data),
                                       static_cast<const T *>(w.data), dx);
    });
    return;
  }
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  float *scratch = s.images > 1 ? stage + s.kg * s.pixels * s.images : stage;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, scratch);
  if (w.low)
    scratch += p.k * s.patch;
  if (p.n * p.c * s.inPlane > 0)
    std::memset(dx, 0, sizeof(float) * p.n * p.c * s.inPlane);
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      const float *dyg =
          outputGradient(ctx, p, s, dy, first, count, g, stage, scratch);
      // col[patch, count * pixels] = w_g^T[patch, kg] * dy_g[kg, ...]
      gemm(ctx, true, false, s.patch, ld, s.kg, 1.0f,
           wf + g * s.kg * s.patch, s.patch, dyg, ld, 0.0f, col, ld);
      for (int64_t j = 0; j < count; ++j)
        col2imAccumulate(p, s, col + j * s.pixels, ld,
                         dx + ((first + j) * p.c + g * s.cg) * s.inPlane);
    }
  }
}

void backwardFilter(Context &ctx, const Conv2dParams &p, const Operand &x,
                    const Operand &dy, float *dw, float *workspace) {
  if (!validParams(ctx, p, "conv2dBackwardFilter"))
    return;
  ConvShape s = shapeOf(p);
  if (convIsDepthwise(p)) {
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseBackwardFilter<T, bf16()>(p, s, static_cast<const T *>(x.data),
                                         static_cast<const T *>(dy.data), dw);
    });
    return;
  }
  if (p.n == 0) {
    if (p.k * s.patch > 0)
      std::memset(dw, 0, sizeof(float) * p.k * s.patch);
    return;
  }
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  for (int64_t first = 0; first < p.n; first += s.images) {
    int64_t count = std::min(s.images, p.n - first), ld = count * s.pixels;
    for (int64_t g = 0; g < p.groups; ++g) {
      const float *dyg =
          outputGradient(ctx, p, s, dy, first, count, g, stage, stage);
      im2colImages(p, s, x, first, count, g, col);
      // dw_g[kg, patch] (+)= dy_g[kg, count * pixels] * col^T
      gemm(ctx, false, true, s.kg, s.patch, ld, 1.0f, dyg, ld, col, ld,
           first == 0 ? 0.0f : 1.0f, dw + g * s.kg * s.patch, s.patch);
    }
  }
}

} // namespace

#include "ConvEntryPoints.inc"

} // namespace mtc::rt
