//===- Conv.cpp - 2-D convolution as im2col + GEMM ------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Each (image, group) pair is lowered to one GEMM over an im2col matrix of
// shape [cg * kh * kw, oh * ow] held in the workspace, which is exactly
// conv2dWorkspaceBytes(p, kernel, storage16) bytes: the plan reserves no
// more. 16-bit operands meet float32 GEMMs: the im2col widens the input as
// it copies it, the weight is widened once per call and the output
// gradient once per image into the rest of the workspace.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "ConvOperand.h"
#include "mtc/runtime/Parallel.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <cstring>

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

/// col[r, oy * ow + ox] = x[ci, iy, ix] with r = (ci * kh + i) * kw + j,
/// iy = oy * strideH - padTop + i * dilationH (likewise ix), or 0 where the
/// tap falls into padding. `x` points at the group's first channel; T is
/// float or uint16_t (bfloat16 when Bf16, else float16).
template <typename T, bool Bf16>
void im2colOf(const Conv2dParams &p, const ConvShape &s, const T *x,
              float *col) {
  const bool parallel = s.patch * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.patch, parallel, [&](int64_t r) {
    int64_t ci = r / (p.kh * p.kw);
    int64_t i = (r / p.kw) % p.kh;
    int64_t j = r % p.kw;
    const T *plane = x + ci * s.inPlane;
    float *dst = col + r * s.pixels;
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
            int64_t offset, float *col) {
  if (!x.low)
    im2colOf<float, false>(p, s, static_cast<const float *>(x.data) + offset,
                           col);
  else if (x.storage == Storage16::Bf16)
    im2colOf<uint16_t, true>(
        p, s, static_cast<const uint16_t *>(x.data) + offset, col);
  else
    im2colOf<uint16_t, false>(
        p, s, static_cast<const uint16_t *>(x.data) + offset, col);
}

/// The adjoint of im2col: dx[ci, iy, ix] += col[r, pixel] for every tap
/// that read (ci, iy, ix). Threads own whole channels, so each dx element
/// is accumulated by one thread in a fixed order.
void col2imAccumulate(const Conv2dParams &p, const ConvShape &s,
                      const float *col, float *dx) {
  const bool parallel = s.patch * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, s.cg, parallel, [&](int64_t ci) {
    float *plane = dx + ci * s.inPlane;
    for (int64_t i = 0; i < p.kh; ++i) {
      for (int64_t j = 0; j < p.kw; ++j) {
        const float *src = col + ((ci * p.kh + i) * p.kw + j) * s.pixels;
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

void forward(Context &ctx, const Conv2dParams &p, const Operand &x,
             const Operand &w, const float *bias, float *y, float *workspace) {
  if (!validParams(ctx, p, "conv2dForward"))
    return;
  ConvShape s = shapeOf(p);
  float *col = workspace;
  const float *wf = asFloat(ctx, w, 0, p.k * s.patch, col + s.patch * s.pixels);
  for (int64_t img = 0; img < p.n; ++img) {
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(p, s, x, (img * p.c + g * s.cg) * s.inPlane, col);
      // y[kg, pixels] = w_g[kg, patch] * col[patch, pixels]
      gemm(ctx, false, false, s.kg, s.pixels, s.patch, 1.0f,
           wf + g * s.kg * s.patch, s.patch, col, s.pixels, 0.0f,
           y + (img * p.k + g * s.kg) * s.pixels, s.pixels);
    }
  }
  if (!bias)
    return;
  const bool parallel = p.n * p.k * s.pixels >= cpu::kParallelGrain;
  cpu::parallelFor(0, p.n * p.k, parallel, [&](int64_t plane) {
    float b = bias[plane % p.k];
    float *dst = y + plane * s.pixels;
    for (int64_t i = 0; i < s.pixels; ++i)
      dst[i] += b;
  });
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
  if (p.n * p.c * s.inPlane > 0)
    std::memset(dx, 0, sizeof(float) * p.n * p.c * s.inPlane);
  for (int64_t img = 0; img < p.n; ++img) {
    const float *dyf =
        asFloat(ctx, dy, img * p.k * s.pixels, p.k * s.pixels, scratch);
    for (int64_t g = 0; g < p.groups; ++g) {
      // col[patch, pixels] = w_g^T[patch, kg] * dy_g[kg, pixels]
      gemm(ctx, true, false, s.patch, s.pixels, s.kg, 1.0f,
           wf + g * s.kg * s.patch, s.patch, dyf + g * s.kg * s.pixels,
           s.pixels, 0.0f, col, s.pixels);
      col2imAccumulate(p, s, col, dx + (img * p.c + g * s.cg) * s.inPlane);
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
      std::memset(dw, 0, sizeof(float) * p.k * s.patch);
    return;
  }
  float *col = workspace, *scratch = col + s.patch * s.pixels;
  for (int64_t img = 0; img < p.n; ++img) {
    const float *dyf =
        asFloat(ctx, dy, img * p.k * s.pixels, p.k * s.pixels, scratch);
    for (int64_t g = 0; g < p.groups; ++g) {
      im2col(p, s, x, (img * p.c + g * s.cg) * s.inPlane, col);
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
