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
// the rest of the workspace. The GEMM loops are ConvGemms.inc, shared
// with CUDA. Depthwise convolutions run directly, without workspace.
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

/// col[r, j * pixels + oy * ow + ox] = x[j, ci, iy, ix] for the `count`
/// images j of `x` (which points at the group's first channel of the first
/// image), with r = (ci * kh + i) * kw + j, iy = oy * strideH - padTop +
/// i * dilationH (likewise ix), or 0 where the tap falls into padding;
/// col's rows are `ld` apart. T is float or uint16_t (bfloat16 when Bf16,
/// else float16). Threads take rows of col, each over every image: small
/// feature maps (a few pixels an image) still make long rows.
template <typename T, bool Bf16>
void im2colOf(const Conv2dParams &p, const ConvShape &s, const T *x,
              int64_t count, float *col, int64_t ld) {
  const bool parallel = s.patch * count * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.patch, parallel, [&](int64_t r) {
    int64_t ci = r / (p.kh * p.kw);
    int64_t i = (r / p.kw) % p.kh;
    int64_t j = r % p.kw;
    // The outputs whose tap lands inside the input: [ox0, ox1) of the rows
    // [oy0, oy1); the others read padding.
    int64_t oy0, oy1, ox0, ox1;
    const int64_t offY = i * p.dilationH - p.padTop,
                  offX = j * p.dilationW - p.padLeft;
    tapRange(p.oh, p.h, p.strideH, offY, &oy0, &oy1);
    tapRange(p.ow, p.w, p.strideW, offX, &ox0, &ox1);
    for (int64_t image = 0; image < count; ++image) {
      const T *plane = x + (image * p.c + ci) * s.inPlane;
      float *dst = col + r * ld + image * s.pixels;
      std::fill(dst, dst + oy0 * p.ow, 0.0f);
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        float *row = dst + oy * p.ow;
        const T *src = plane + (oy * p.strideH + offY) * p.w + offX;
        std::fill(row, row + ox0, 0.0f);
        for (int64_t ox = ox0; ox < ox1; ++ox)
          row[ox] = storedToFloat(src[ox * p.strideW], Bf16);
        std::fill(row + ox1, row + p.ow, 0.0f);
      }
      std::fill(dst + oy1 * p.ow, dst + s.pixels, 0.0f);
    }
  });
}

void im2col(Context &, const Conv2dParams &p, const ConvShape &s,
            const Operand &x, int64_t first, int64_t count, int64_t g,
            float *col) {
  int64_t offset = (first * p.c + g * s.cg) * s.inPlane;
  withStorage(x, [&](auto t, auto bf16) {
    using T = decltype(t);
    im2colOf<T, bf16()>(p, s, static_cast<const T *>(x.data) + offset, count,
                        col, count * s.pixels);
  });
}

void gemmOf(Context &ctx, Storage16, bool transA, bool transB, int64_t m,
            int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
            int64_t ldb, float beta, float *c, int64_t ldc) {
  gemm(ctx, transA, transB, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/// stage[k, j * pixels + q] = y[first + j, g * kg + k, q] (widened) for the
/// `count` images from `first`: group g of their output gradients as one
/// matrix, rows count * pixels apart.
void gather(const Conv2dParams &p, const ConvShape &s, const Operand &y,
            int64_t first, int64_t count, int64_t g, float *stage) {
  const int64_t ld = count * s.pixels;
  const bool parallel = s.kg * ld >= cpu::kParallelGrain;
  withStorage(y, [&](auto t, auto bf16) {
    using T = decltype(t);
    cpu::parallelFor(0, s.kg, parallel, [&](int64_t k) {
      for (int64_t j = 0; j < count; ++j) {
        const T *src = static_cast<const T *>(y.data) +
                       ((first + j) * p.k + g * s.kg + k) * s.pixels;
        float *dst = stage + k * ld + j * s.pixels;
        for (int64_t q = 0; q < s.pixels; ++q)
          dst[q] = storedToFloat(src[q], bf16());
      }
    });
  });
}

/// The inverse of gather: image j's planes of the group (from `y`) take
/// stage[k, j * pixels + q].
void scatterGroup(Context &, Storage16, const Conv2dParams &p,
                  const ConvShape &s, const float *stage, int64_t count,
                  float *y) {
  const int64_t ld = count * s.pixels;
  const bool parallel = s.kg * ld >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.kg, parallel, [&](int64_t k) {
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(y + (j * p.k + k) * s.pixels, stage + k * ld + j * s.pixels,
                  sizeof(float) * s.pixels);
  });
}

/// The outputs [lo, hi) along one dim that kernel index t reaches, and its
/// offset t * dilation - pad into the input.
struct TapSpan {
  int64_t lo, hi, off;
};

TapSpan tapSpan(int64_t t, int64_t dilation, int64_t pad, int64_t out,
                int64_t in, int64_t stride) {
  TapSpan s;
  s.off = t * dilation - pad;
  tapRange(out, in, stride, s.off, &s.lo, &s.hi);
  return s;
}

/// The spans of a convolution's kernel rows and columns, and the output
/// rows each tap reaches, worked out once per call: their divisions and
/// loops would otherwise run for every plane, which on small feature maps
/// costs more than the arithmetic. What does not fit the fixed tables
/// (kernels wider than kMaxSide, more than kMaxRows rows: large maps, where
/// a plane's arithmetic dwarfs this) is worked out as it goes.
class TapSpans {
public:
  explicit TapSpans(const Conv2dParams &p)
      : p(p), spansCached(p.kh <= kMaxSide && p.kw <= kMaxSide) {
    if (!spansCached)
      return;
    for (int64_t i = 0; i < p.kh; ++i)
      spanRows[i] = rowSpan(i);
    for (int64_t j = 0; j < p.kw; ++j)
      spanCols[j] = colSpan(j);
    rowCount = 0;
    walkRows([&](const TapRow &r) {
      if (rowCount < kMaxRows)
        rows[rowCount] = r;
      ++rowCount;
    });
  }

  /// f(tap, y, x) for every tap (i * kw + j) in order, with the spans of
  /// its kernel row and column.
  template <typename F> void forEachTap(F &&f) const {
    for (int64_t i = 0; i < p.kh; ++i) {
      const TapSpan y = spansCached ? spanRows[i] : rowSpan(i);
      for (int64_t j = 0; j < p.kw; ++j)
        f(i * p.kw + j, y, spansCached ? spanCols[j] : colSpan(j));
    }
  }

  /// Where output row oy of a tap with spans y and x reads: its outputs
  /// [x.lo, x.hi) read input element at + ox * strideW of their channel's
  /// plane.
  int64_t rowAt(int64_t oy, const TapSpan &y, const TapSpan &x) const {
    return (oy * p.strideH + y.off) * p.w + x.off;
  }

  /// f(tap, oy, at, ox0, ox1) for every tap and output row oy it reaches
  /// (ox0 < ox1), in tap order (see rowAt).
  template <typename F> void forEachRow(F &&f) const {
    if (spansCached && rowCount <= kMaxRows) {
      for (int64_t r = 0; r < rowCount; ++r)
        f(rows[r].tap, rows[r].oy, rows[r].at, rows[r].ox0, rows[r].ox1);
      return;
    }
    walkRows([&](const TapRow &r) { f(r.tap, r.oy, r.at, r.ox0, r.ox1); });
  }

private:
  static constexpr int64_t kMaxSide = 16;
  static constexpr int64_t kMaxRows = 256;

  struct TapRow {
    int64_t tap, oy, at, ox0, ox1;
  };

  TapSpan rowSpan(int64_t i) const {
    return tapSpan(i, p.dilationH, p.padTop, p.oh, p.h, p.strideH);
  }
  TapSpan colSpan(int64_t j) const {
    return tapSpan(j, p.dilationW, p.padLeft, p.ow, p.w, p.strideW);
  }

  template <typename F> void walkRows(F &&f) const {
    forEachTap([&](int64_t tap, const TapSpan &y, const TapSpan &x) {
      if (x.lo == x.hi)
        return;
      for (int64_t oy = y.lo; oy < y.hi; ++oy)
        f(TapRow{tap, oy, rowAt(oy, y, x), x.lo, x.hi});
    });
  }

  const Conv2dParams &p;
  const bool spansCached;
  TapSpan spanRows[kMaxSide], spanCols[kMaxSide];
  int64_t rowCount = 0;
  TapRow rows[kMaxRows];
};

/// The adjoint of im2col for `count` images: dx[j, ci, iy, ix] is the sum
/// of col[r, j * pixels + pixel] over the taps that read (ci, iy, ix).
/// Threads own whole channels and add in a fixed order.
void col2imGroup(Context &, Storage16, const Conv2dParams &p,
                 const ConvShape &s, const float *col, int64_t count,
                 float *dx) {
  const int64_t ld = count * s.pixels;
  const bool parallel = s.patch * ld >= cpu::kParallelGrain;
  const TapSpans spans(p);
  cpu::parallelFor(0, count * s.cg, parallel, [&](int64_t item) {
    const int64_t image = item / s.cg, ci = item % s.cg;
    float *plane = dx + image * p.c * s.inPlane + ci * s.inPlane;
    std::fill(plane, plane + s.inPlane, 0.0f);
    spans.forEachRow([&](int64_t tap, int64_t oy, int64_t at, int64_t ox0,
                         int64_t ox1) {
      const float *src =
          col + (ci * p.kh * p.kw + tap) * ld + image * s.pixels + oy * p.ow;
      for (int64_t ox = ox0; ox < ox1; ++ox)
        plane[at + ox * p.strideW] += src[ox];
    });
  });
}

#include "ConvGemms.inc"

//===----------------------------------------------------------------------===//
// Depthwise convolutions (one input channel per group), run directly
//===----------------------------------------------------------------------===//

/// The shortest row of a depthwise tap worth a vector loop: below it, the
/// loop's set-up costs more than it saves.
constexpr int64_t kVectorRow = 8;

/// y[n, k] = sum over taps of w[k, tap] * x[n, k / kg] shifted: threads own
/// output planes and add the taps in a fixed order.
template <typename T, bool Bf16>
void depthwiseForward(const Conv2dParams &p, const ConvShape &s, const T *x,
                      const T *w, float *y) {
  const int64_t taps = p.kh * p.kw;
  const bool parallel = p.n * p.k * s.pixels * taps >= cpu::kParallelGrain;
  const TapSpans spans(p);
  cpu::parallelFor(0, p.n * p.k, parallel, [&](int64_t plane) {
    const int64_t n = plane / p.k, k = plane % p.k;
    const T *in = x + (n * p.c + k / s.kg) * s.inPlane;
    float *out = y + plane * s.pixels;
    std::fill(out, out + s.pixels, 0.0f);
    spans.forEachRow(
        [&](int64_t tap, int64_t oy, int64_t at, int64_t ox0, int64_t ox1) {
          const float weight = storedToFloat(w[k * taps + tap], Bf16);
          float *o = out + oy * p.ow;
          const T *src = in + at;
          // Rows of unit stride and some length vectorize (each element on
          // its own, the same arithmetic); strided or short ones stay
          // scalar.
          if (p.strideW == 1 && ox1 - ox0 >= kVectorRow) {
#pragma omp simd
            for (int64_t ox = ox0; ox < ox1; ++ox)
              o[ox] += weight * storedToFloat(src[ox], Bf16);
            return;
          }
          for (int64_t ox = ox0; ox < ox1; ++ox)
            o[ox] += weight * storedToFloat(src[ox * p.strideW], Bf16);
        });
  });
}

/// dx[n, c] = sum over c's kg output channels k and taps of w[k, tap] *
/// dy[n, k] shifted back: threads own input planes.
template <typename T, bool Bf16>
void depthwiseBackwardData(const Conv2dParams &p, const ConvShape &s,
                           const T *dy, const T *w, float *dx) {
  const int64_t taps = p.kh * p.kw;
  const bool parallel = p.n * p.k * s.pixels * taps >= cpu::kParallelGrain;
  const TapSpans spans(p);
  cpu::parallelFor(0, p.n * p.c, parallel, [&](int64_t plane) {
    const int64_t n = plane / p.c, c = plane % p.c;
    float *in = dx + plane * s.inPlane;
    std::fill(in, in + s.inPlane, 0.0f);
    for (int64_t k = c * s.kg; k < (c + 1) * s.kg; ++k) {
      const T *out = dy + (n * p.k + k) * s.pixels;
      spans.forEachRow(
          [&](int64_t tap, int64_t oy, int64_t at, int64_t ox0, int64_t ox1) {
            const float weight = storedToFloat(w[k * taps + tap], Bf16);
            const T *g = out + oy * p.ow;
            float *dst = in + at;
            if (p.strideW == 1 && ox1 - ox0 >= kVectorRow) {
#pragma omp simd
              for (int64_t ox = ox0; ox < ox1; ++ox)
                dst[ox] += weight * storedToFloat(g[ox], Bf16);
              return;
            }
            for (int64_t ox = ox0; ox < ox1; ++ox)
              dst[ox * p.strideW] += weight * storedToFloat(g[ox], Bf16);
          });
    }
  });
}

/// dw[k, tap] = sum over images and output pixels of dy[n, k] * x[n, k /
/// kg] shifted, row sums in float added in double, image by image: threads
/// own output channels.
template <typename T, bool Bf16>
void depthwiseBackwardFilter(const Conv2dParams &p, const ConvShape &s,
                             const T *x, const T *dy, float *dw) {
  const int64_t taps = p.kh * p.kw;
  const bool parallel = p.n * p.k * s.pixels * taps >= cpu::kParallelGrain;
  const TapSpans spans(p);
  cpu::parallelFor(0, p.k, parallel, [&](int64_t k) {
    spans.forEachTap([&](int64_t tap, const TapSpan &ys, const TapSpan &xs) {
      double sum = 0.0;
      for (int64_t n = 0; n < p.n; ++n) {
        const T *in = x + (n * p.c + k / s.kg) * s.inPlane;
        const T *out = dy + (n * p.k + k) * s.pixels;
        for (int64_t oy = ys.lo; oy < ys.hi; ++oy) {
          const T *g = out + oy * p.ow, *src = in + spans.rowAt(oy, ys, xs);
          float partial = 0.0f;
          for (int64_t ox = xs.lo; ox < xs.hi; ++ox)
            partial += storedToFloat(g[ox], Bf16) *
                       storedToFloat(src[ox * p.strideW], Bf16);
          sum += partial;
        }
      }
      dw[k * taps + tap] = static_cast<float>(sum);
    });
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
// The kernels
//===----------------------------------------------------------------------===//

void forward(Context &ctx, const Conv2dParams &p, const Operand &x,
             const Operand &w, const float *bias, float *y, float *workspace) {
  if (!validConvParams(ctx, p, "conv2dForward"))
    return;
  ConvShape s = convShapeOf(p);
  if (convIsDepthwise(p)) {
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseForward<T, bf16()>(p, s, static_cast<const T *>(x.data),
                                  static_cast<const T *>(w.data), y);
    });
  } else {
    float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
    float *scratch = s.images > 1 ? stage + s.kg * s.pixels * s.images : stage;
    gemmForward(ctx, p, s, x.storage, x,
                asFloat(ctx, w, 0, p.k * s.patch, scratch), col, stage, y);
  }
  if (bias)
    addBias(p, s, bias, y);
}

/// Group g of the output gradients of `count` images from `first` as one
/// [kg, count * pixels] float32 matrix: read in place (one float32 image),
/// widened into `scratch` (one 16-bit image, all its groups when g = 0) or
/// gathered into `stage` (several images).
const float *outputGradient(Context &ctx, const Conv2dParams &p,
                            const ConvShape &s, const Operand &dy,
                            int64_t first, int64_t count, int64_t g,
                            float *stage, float *scratch) {
  if (s.images > 1) {
    gather(p, s, dy, first, count, g, stage);
    return stage;
  }
  if (dy.low && g > 0)
    return scratch + g * s.kg * s.pixels;
  return asFloat(ctx, dy, first * p.k * s.pixels, p.k * s.pixels, scratch) +
         (dy.low ? 0 : g * s.kg * s.pixels);
}

void backwardData(Context &ctx, const Conv2dParams &p, const Operand &dy,
                  const Operand &w, float *dx, float *workspace) {
  if (!validConvParams(ctx, p, "conv2dBackwardData"))
    return;
  ConvShape s = convShapeOf(p);
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
  gemmBackwardData(
      ctx, p, s, dy.storage, wf,
      [&](int64_t first, int64_t count, int64_t g) {
        return outputGradient(ctx, p, s, dy, first, count, g, stage, scratch);
      },
      col, dx);
}

void backwardFilter(Context &ctx, const Conv2dParams &p, const Operand &x,
                    const Operand &dy, float *dw, float *workspace) {
  if (!validConvParams(ctx, p, "conv2dBackwardFilter"))
    return;
  ConvShape s = convShapeOf(p);
  if (p.n == 0) {
    if (p.k * s.patch > 0)
      std::memset(dw, 0, sizeof(float) * p.k * s.patch);
    return;
  }
  if (convIsDepthwise(p)) {
    withStorage(x, [&](auto t, auto bf16) {
      using T = decltype(t);
      depthwiseBackwardFilter<T, bf16()>(p, s, static_cast<const T *>(x.data),
                                         static_cast<const T *>(dy.data), dw);
    });
    return;
  }
  float *col = workspace, *stage = col + s.patch * s.pixels * s.images;
  gemmBackwardFilter(
      ctx, p, s, dy.storage, x,
      [&](int64_t first, int64_t count, int64_t g) {
        return outputGradient(ctx, p, s, dy, first, count, g, stage, stage);
      },
      col, dw);
}

} // namespace

#include "ConvEntryPoints.inc"

} // namespace mtc::rt
