//===- KernelsTest.cpp - Kernel tests on cases checkable by hand ----------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Each case is small enough that the expected values are obvious (a one-hot
// convolution kernel copies a shifted image, equal logits give a uniform
// softmax, ...). Tensors go through the device layer, so the same file
// tests the CUDA library (built as mtc-runtime-cuda-tests), where it skips
// itself when no GPU is present. Normalization, dropout and gather have
// their own files.
//
//===----------------------------------------------------------------------===//

#include "Divisor.h"
#include "KernelTestFixture.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Trainer.h"
#ifdef MTC_RUNTIME_CUDA
#include "mtc/runtime/Cuda.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

using namespace mtc::rt;
using mtc::rt::unittest::expectNear;
using mtc::rt::unittest::expectRelNear;
using mtc::rt::unittest::Kernels;

namespace {

TEST_F(Kernels, Gemm2x2) {
  float *a = upload<float>({1, 2, 3, 4});
  float *b = upload<float>({5, 6, 7, 8});
  float nan = std::nanf("");
  float *c = upload<float>({nan, nan, nan, nan});
  // beta == 0 must ignore the NaNs already in C.
  gemm(ctx, false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  expectNear(download(c, 4), {19, 22, 43, 50});
  // A^T * B and accumulation into C.
  gemm(ctx, true, false, 2, 2, 2, 1.0f, a, 2, b, 2, 1.0f, c, 2);
  expectNear(download(c, 4), {19 + 26, 22 + 30, 43 + 38, 50 + 44});
  // A * B^T scaled.
  gemm(ctx, false, true, 2, 2, 2, 2.0f, a, 2, b, 2, 0.0f, c, 2);
  expectNear(download(c, 4), {34, 46, 78, 106});
}

TEST_F(Kernels, GemmBiasAndBiasGrad) {
  float *a = upload<float>({1, 2, 3, 4});
  float *b = upload<float>({5, 6, 7, 8});
  float *bias = upload<float>({10, 20});
  float nan = std::nanf("");
  float *c = upload<float>({nan, nan, nan, nan});
  // The bias epilogue writes C without reading it.
  gemmBias(ctx, false, false, 2, 2, 2, a, 2, b, 2, bias, c, 2);
  expectNear(download(c, 4), {29, 42, 53, 70});
  // A^T B with the column sums of B ([K, N], not transposed) ...
  float *sums = upload<float>({nan, nan});
  gemmBiasGrad(ctx, true, false, 2, 2, 2, a, 2, b, 2, c, 2, false, sums);
  expectNear(download(c, 4), {26, 30, 38, 44});
  expectNear(download(sums, 2), {12, 14});
  // ... or of A ([K, M], transposed).
  gemmBiasGrad(ctx, true, false, 2, 2, 2, a, 2, b, 2, c, 2, true, sums);
  expectNear(download(sums, 2), {4, 6});
}

/// C = op(A) op(B) (+ bias) and the sums over k of the [K, ...] operand, in
/// double, for the random cases below.
struct GemmReference {
  std::vector<double> c, sums;
};
GemmReference gemmReference(const std::vector<float> &a,
                            const std::vector<float> &b,
                            const std::vector<float> &bias, bool transA,
                            bool transB, int64_t m, int64_t n, int64_t k,
                            bool sumA) {
  GemmReference r{std::vector<double>(m * n), {}};
  auto at = [&](int64_t i, int64_t p) {
    return double(transA ? a[p * m + i] : a[i * k + p]);
  };
  auto bt = [&](int64_t p, int64_t j) {
    return double(transB ? b[j * k + p] : b[p * n + j]);
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias.empty() ? 0.0 : double(bias[j]);
      for (int64_t p = 0; p < k; ++p)
        acc += at(i, p) * bt(p, j);
      r.c[i * n + j] = acc;
    }
  r.sums.assign(sumA ? m : n, 0.0);
  for (int64_t p = 0; p < k; ++p)
    for (size_t j = 0; j < r.sums.size(); ++j)
      r.sums[j] += sumA ? at(j, p) : bt(p, j);
  return r;
}

/// Deterministic GEMM operands: A ([m, k] or [k, m]) of sines, B of cosines.
void sinCosOperands(int64_t m, int64_t n, int64_t k, std::vector<float> &a,
                    std::vector<float> &b) {
  a.resize(m * k);
  b.resize(k * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = std::cos(0.11f * float(i));
}

#ifdef MTC_RUNTIME_CUDA
/// sinCosOperands rounded to `storage`: the 16-bit values in a16 and b16,
/// a and b their exact widenings; and a bias of n values.
void sinCosOperands16(Storage16 storage, int64_t m, int64_t n, int64_t k,
                      std::vector<float> &a, std::vector<float> &b,
                      std::vector<uint16_t> &a16, std::vector<uint16_t> &b16,
                      std::vector<float> &bias) {
  const bool bf16 = storage == Storage16::Bf16;
  sinCosOperands(m, n, k, a, b);
  auto round = [&](std::vector<float> &wide, std::vector<uint16_t> &bits) {
    bits.resize(wide.size());
    for (size_t i = 0; i < wide.size(); ++i) {
      bits[i] = bf16 ? floatToBf16(wide[i]) : floatToHalf(wide[i]);
      wide[i] = storedToFloat(bits[i], bf16);
    }
  };
  round(a, a16);
  round(b, b16);
  bias.resize(n);
  for (int64_t j = 0; j < n; ++j)
    bias[j] = 0.25f * float(j) - 3.0f;
}
#endif

TEST_F(Kernels, GemmEpiloguesOnRandomMatrices) {
  // Sizes no tile divides; k large enough for split reductions.
  const int64_t m = 37, n = 29, k = 300;
  std::vector<float> a, b, bias(n);
  sinCosOperands(m, n, k, a, b);
  for (int64_t j = 0; j < n; ++j)
    bias[j] = 0.25f * float(j) - 3.0f;
  const float *da = upload<float>(a), *db = upload<float>(b),
              *dbias = upload<float>(bias);
  for (bool transB : {false, true}) {
    float *c = upload<float>(std::vector<float>(m * n, 7.0f));
    gemmBias(ctx, false, transB, m, n, k, da, k, db, transB ? k : n, dbias, c,
             n);
    GemmReference want =
        gemmReference(a, b, bias, false, transB, m, n, k, false);
    expectNear(download(c, m * n),
               std::vector<float>(want.c.begin(), want.c.end()), 1e-3f);
  }
  // Weight gradients: A stored [K, M] read transposed, B stored [K, N].
  for (bool sumA : {false, true}) {
    float *c = upload<float>(std::vector<float>(m * n, 7.0f));
    float *sums = upload<float>(std::vector<float>(sumA ? m : n, 7.0f));
    gemmBiasGrad(ctx, true, false, m, n, k, da, m, db, n, c, n, sumA, sums);
    GemmReference want = gemmReference(a, b, {}, true, false, m, n, k, sumA);
    expectNear(download(c, m * n),
               std::vector<float>(want.c.begin(), want.c.end()), 1e-3f);
    expectNear(download(sums, want.sums.size()),
               std::vector<float>(want.sums.begin(), want.sums.end()), 1e-3f);
#ifdef MTC_RUNTIME_CUDA
    std::printf("gemmBiasGrad (%s): %s\n", sumA ? "BGRADB" : "BGRADA",
                lastGemmUsedEpilogue(ctx) ? "cuBLASLt epilogue"
                                          : "fallback: GEMM + column sums");
#endif
  }
}

#ifndef MTC_RUNTIME_CUDA
// On the CPU the bias epilogue rounds as a separate add after the GEMM does
// (what --no-fusion runs), even when BLAS splits k into several passes.
TEST_F(Kernels, GemmBiasRoundsAsASeparateAdd) {
  const int64_t m = 70, n = 50, k = 1500;
  std::vector<float> a, b, bias(n);
  sinCosOperands(m, n, k, a, b);
  for (int64_t j = 0; j < n; ++j)
    bias[j] = 100.0f / float(j + 3);
  float *fused = upload<float>(std::vector<float>(m * n));
  float *plain = upload<float>(std::vector<float>(m * n));
  gemmBias(ctx, false, false, m, n, k, a.data(), k, b.data(), n, bias.data(),
           fused, n);
  gemm(ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
       plain, n);
  std::vector<float> want = download(plain, m * n);
  for (int64_t i = 0; i < m * n; ++i)
    want[i] = bias[i % n] + want[i];
  std::vector<float> got = download(fused, m * n);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
}
#endif

TEST_F(Kernels, GemmStridedBatchedBroadcastsStrideZero) {
  // Two A matrices (identity and 2 * identity) times one shared B.
  float *a = upload<float>({1, 0, 0, 1, 2, 0, 0, 2});
  float *b = upload<float>({1, 2, 3, 4});
  float *c = upload<float>(std::vector<float>(8, 0.0f));
  gemmStridedBatched(ctx, false, false, 2, 2, 2, 1.0f, a, 2, 4, b, 2, 0, 0.0f,
                     c, 2, 4, 2);
  expectNear(download(c, 8), {1, 2, 3, 4, 2, 4, 6, 8});
}

/// x[r][c] = 4r + c on a 4x4 image, a 3x3 kernel that is one-hot at (2, 1),
/// no padding: y[oy][ox] = x[oy + 2][ox + 1].
Conv2dParams oneHotConv() {
  Conv2dParams p{};
  p.n = 1, p.c = 1, p.h = 4, p.w = 4;
  p.k = 1, p.kh = 3, p.kw = 3;
  p.oh = 2, p.ow = 2;
  p.strideH = p.strideW = 1;
  p.padTop = p.padLeft = 0;
  p.dilationH = p.dilationW = 1;
  p.groups = 1;
  return p;
}

TEST_F(Kernels, Conv2dOneHotKernel) {
  Conv2dParams p = oneHotConv();
  std::vector<float> image(16);
  for (int i = 0; i < 16; ++i)
    image[i] = static_cast<float>(i);
  std::vector<float> kernel(9, 0.0f);
  kernel[2 * 3 + 1] = 1.0f;
  size_t wsFloats = conv2dWorkspaceBytes(p) / sizeof(float);
  const size_t guard = 4;
  float *x = upload(image);
  float *w = upload(kernel);
  float *bias = upload<float>({0.5f});
  float *y = upload<float>(std::vector<float>(4, 0.0f));
  float *ws = upload<float>(std::vector<float>(wsFloats, 0.0f), guard);

  conv2dForward(ctx, p, x, w, bias, y, ws);
  expectNear(download(y, 4), {9.5f, 10.5f, 13.5f, 14.5f});

  // Backward data scatters dy to the cells the one-hot tap read.
  float *dy = upload<float>({1, 1, 1, 1});
  float *dx = upload<float>(std::vector<float>(16, 7.0f));
  conv2dBackwardData(ctx, p, dy, w, dx, ws);
  expectNear(download(dx, 16),
             {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0});

  // With dy = 1, dw[i][j] is the sum of the 2x2 window of x at (i, j):
  // 16 i + 4 j + 10.
  float *dw = upload<float>(std::vector<float>(9, 7.0f));
  conv2dBackwardFilter(ctx, p, x, dy, dw, ws);
  expectNear(download(dw, 9), {10, 14, 18, 26, 30, 34, 42, 46, 50});

  // The kernels used exactly conv2dWorkspaceBytes and not a byte more.
  auto tail = download(ws + wsFloats, guard);
  for (float v : tail)
    EXPECT_EQ(v, kSentinel);
}

/// `n` images of two 2x2 channels, two groups of one channel, 3x3 kernels
/// with padding 1: every output sees its whole channel.
Conv2dParams twoGroups3x3(int64_t n) {
  Conv2dParams p{};
  p.n = n, p.c = 2, p.h = 2, p.w = 2;
  p.k = 2, p.kh = 3, p.kw = 3;
  p.oh = 2, p.ow = 2;
  p.strideH = p.strideW = 1;
  p.padTop = p.padLeft = 1;
  p.dilationH = p.dilationW = 1;
  p.groups = 2;
  return p;
}

TEST_F(Kernels, Conv2dPaddingAndGroups) {
  // Two groups of one channel each, 3x3 all-ones kernels with padding 1:
  // each output is the sum of the 3x3 neighbourhood inside the image.
  Conv2dParams p = twoGroups3x3(1);
  float *x = upload<float>({1, 2, 3, 4, 10, 20, 30, 40});
  float *w = upload<float>(std::vector<float>(18, 1.0f));
  float *y = upload<float>(std::vector<float>(8, 0.0f));
  float *ws = upload<float>(
      std::vector<float>(conv2dWorkspaceBytes(p) / sizeof(float), 0.0f));
  conv2dForward(ctx, p, x, w, nullptr, y, ws);
  expectNear(download(y, 8), {10, 10, 10, 10, 100, 100, 100, 100});
}

TEST_F(Kernels, Conv2d16BitOperands) {
  // Two images (the second is twice the first) of two 2x2 channels, two
  // groups, 3x3 kernels with padding 1 (all 1 in group 0, all 2 in group
  // 1): every output sees its whole channel. All values are exact in both
  // 16-bit formats, so the float32 results are exact.
  Conv2dParams p = twoGroups3x3(2);
  const float image[] = {1, 2, 3, 4, 10, 20, 30, 40};
  std::vector<float> x, w, dy;
  for (int img = 0; img < 2; ++img)
    for (float v : image)
      x.push_back(v * (img + 1));
  for (int i = 0; i < 18; ++i)
    w.push_back(i < 9 ? 1.0f : 2.0f);
  for (int i = 0; i < 16; ++i)
    dy.push_back(i < 8 ? 1.0f : 2.0f); // 1 for image 0, 2 for image 1
  // dw(i, j) of a [[a, b], [c, d]] channel with dy = 1: the cells that tap
  // (i, j) reads, rows {0}, {0, 1}, {1} for i = 0, 1, 2 (likewise columns).
  auto taps = [](float a, float b, float c, float d) {
    return std::vector<float>{a,     a + b, b,     a + c, a + b + c + d,
                              b + d, c,     c + d, d};
  };
  std::vector<float> dw0 = taps(1, 2, 3, 4), dw1 = taps(10, 20, 30, 40);
  std::vector<float> dwExpected;
  for (float v : dw0)
    dwExpected.push_back(5 * v); // image 0 with dy 1, image 1 (2x) with 2
  for (float v : dw1)
    dwExpected.push_back(5 * v);

  const size_t guard = 4;
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    SCOPED_TRACE(storage == Storage16::Bf16 ? "bf16" : "f16");
    auto narrow = [&](const std::vector<float> &v) {
      std::vector<uint16_t> h;
      for (float f : v)
        h.push_back(storage == Storage16::Bf16 ? floatToBf16(f)
                                               : floatToHalf(f));
      return upload(h);
    };
    uint16_t *xh = narrow(x), *wh = narrow(w), *dyh = narrow(dy);
    float *bias = upload<float>({0.5f, -0.5f});
    auto workspace = [&](ConvKernel kernel, size_t &floats) {
      floats = conv2dWorkspaceBytes(p, kernel, true) / sizeof(float);
      return upload(std::vector<float>(floats, kSentinel), guard);
    };
    // The kernels use exactly the planned bytes: the last float and not
    // one past it.
    auto checkGuard = [&](float *ws, size_t floats) {
      if (floats > 0) { // (a library may need no workspace)
        EXPECT_NE(download(ws + floats - 1, 1)[0], kSentinel);
      }
      for (float v : download(ws + floats, guard))
        EXPECT_EQ(v, kSentinel);
    };
    size_t floats = 0;

    float *y = upload<float>(std::vector<float>(16, 0.0f));
    float *ws = workspace(ConvKernel::Forward, floats);
    conv2dForward16(ctx, storage, p, xh, wh, bias, y, ws);
    expectNear(download(y, 16),
               {10.5f, 10.5f, 10.5f, 10.5f, 199.5f, 199.5f, 199.5f, 199.5f,
                20.5f, 20.5f, 20.5f, 20.5f, 399.5f, 399.5f, 399.5f, 399.5f});
    checkGuard(ws, floats);

    // Each input cell is read by all 4 outputs of its channel.
    float *dx = upload<float>(std::vector<float>(16, 7.0f));
    ws = workspace(ConvKernel::BackwardData, floats);
    conv2dBackwardData16(ctx, storage, p, dyh, wh, dx, ws);
    expectNear(download(dx, 16),
               {4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16});
    checkGuard(ws, floats);

    float *dw = upload<float>(std::vector<float>(18, 7.0f));
    ws = workspace(ConvKernel::BackwardFilter, floats);
    conv2dBackwardFilter16(ctx, storage, p, xh, dyh, dw, ws);
    expectNear(download(dw, 18), dwExpected);
    checkGuard(ws, floats);
  }
}

/// A deterministic value in [-1, 1) for element i of a tensor `salt`,
/// exact in bfloat16 (8 significant bits) so 16-bit operands are exact.
float convValue(int64_t i, int salt) {
  int64_t v = (i * 37 + salt * 101) % 256;
  return float(v - 128) / 128.0f;
}

/// The three convolutions by their definition, in double, for one NCHW
/// problem: y[n, k, oy, ox] = sum over the group's channels and taps of
/// w[k, ci, i, j] x[n, g * cg + ci, iy, ix].
struct ConvReference {
  std::vector<double> y, dx, dw;
};
ConvReference convReference(const Conv2dParams &p,
                            const std::vector<float> &x,
                            const std::vector<float> &w,
                            const std::vector<float> &dy) {
  int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  ConvReference r;
  r.y.assign(p.n * p.k * p.oh * p.ow, 0.0);
  r.dx.assign(p.n * p.c * p.h * p.w, 0.0);
  r.dw.assign(p.k * cg * p.kh * p.kw, 0.0);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t oy = 0; oy < p.oh; ++oy)
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          int64_t out = ((n * p.k + k) * p.oh + oy) * p.ow + ox;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < p.kh; ++i)
              for (int64_t j = 0; j < p.kw; ++j) {
                int64_t iy = oy * p.strideH - p.padTop + i * p.dilationH;
                int64_t ix = ox * p.strideW - p.padLeft + j * p.dilationW;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                  continue;
                int64_t in =
                    ((n * p.c + k / kg * cg + ci) * p.h + iy) * p.w + ix;
                int64_t tap = ((k * cg + ci) * p.kh + i) * p.kw + j;
                r.y[out] += double(w[tap]) * x[in];
                r.dx[in] += double(w[tap]) * dy[out];
                r.dw[tap] += double(dy[out]) * x[in];
              }
        }
  return r;
}

TEST_F(Kernels, Conv2dImagesPerGemm) {
  // Grouped, strided, padded convolutions over 5 images: 16x16 outputs
  // take 4 images per GEMM (a full batch, then one image); 1x1 outputs
  // take all 5 (a GEMM of 5 columns, not 5 matrix-vector products); 40x40
  // outputs one image each. Against the definition, float32 and 16-bit.
  // Depthwise ones (a channel per group, two output channels each; one
  // channel), strided and dilated, run directly. Pointwise ones (1x1,
  // stride 1, no padding; grouped or not, one or several images per
  // GEMM) and a strided 1x1 one. On CUDA also with the device's columns
  // per GEMM (all five images at once), and the native 16-bit kernels:
  // a strided-batched GEMM over the images where a map's pixels are a
  // multiple of 8 (then a pointwise forward and backward data need no
  // workspace), else the side-by-side GEMM (6x6, 5x5, 1x1 maps); a
  // stride-1 backward data runs as the forward of the output gradient by
  // the flipped weight, onto such a map (40x40 grouped; 16x16 unpadded
  // from a 14x14 map; 8x8 with 5x5 taps) and through the side-by-side GEMM
  // onto others (a 9x9 map; a grouped 3x3 one from a 1x1 output). The
  // native backward filter
  // splits the columns of GEMMs of at least 1024 of them into slices of a
  // multiple of 8 (16x16 outputs: 2 slices; 40x40: slices of 536 and a
  // shorter last one, in grouped convolutions too), or for pointwise ones
  // of at least 512 pixels a multiple of 8 (40x40, 24x24 grouped) takes a
  // slice an image.
  auto problem = [](int64_t h, int64_t kh, int64_t stride, int64_t pad,
                    int64_t c = 4, int64_t k = 6, int64_t groups = 2,
                    int64_t dilation = 1,
                    int64_t columns = kConvGemmColumnsCpu) {
    Conv2dParams p{};
    p.n = 5, p.c = c, p.h = h, p.w = h;
    p.k = k, p.kh = kh, p.kw = kh;
    p.oh = p.ow = (h + 2 * pad - dilation * (kh - 1) - 1) / stride + 1;
    p.strideH = p.strideW = stride;
    p.padTop = p.padLeft = pad;
    p.dilationH = p.dilationW = dilation;
    p.groups = groups;
    p.gemmColumns = columns;
    return p;
  };
  std::vector<Conv2dParams> problems = {problem(32, 3, 2, 1),
                                        problem(3, 3, 1, 0),
                                        problem(40, 3, 1, 1),
                                        problem(15, 3, 2, 1, 4, 8, 4),
                                        problem(12, 3, 1, 2, 4, 4, 4, 2),
                                        problem(9, 3, 1, 1, 1, 3, 1),
                                        problem(8, 1, 1, 0),
                                        problem(6, 1, 1, 0),
                                        problem(40, 1, 1, 0, 4, 6, 1),
                                        problem(9, 1, 2, 0, 4, 6, 1),
                                        problem(16, 3, 1, 0, 3, 5, 1),
                                        problem(8, 5, 1, 2, 2, 4, 1),
                                        problem(24, 1, 1, 0)};
#ifdef MTC_RUNTIME_CUDA
  for (size_t i = 0, n = problems.size(); i < n; ++i) {
    Conv2dParams p = problems[i];
    p.gemmColumns = kConvGemmColumnsCuda;
    problems.push_back(p);
  }
#endif
  for (const Conv2dParams &p : problems) {
    SCOPED_TRACE(
        "output " + std::to_string(p.oh) + "x" + std::to_string(p.ow) + ", " +
        std::to_string(p.kh) + "x" + std::to_string(p.kw) + " taps, " +
        (convIsDepthwise(p)
             ? std::string("depthwise")
             : std::to_string(convImagesPerGemm(p)) + " images per GEMM"));
    int64_t xs = p.n * p.c * p.h * p.w,
            ws = p.k * (p.c / p.groups) * p.kh * p.kw,
            planned = conv2dWorkspaceBytes(p, ConvKernel::Forward, true),
            ys = p.n * p.k * p.oh * p.ow;
    EXPECT_EQ(planned == 0, convIsDepthwise(p)); // depthwise: no scratch
    std::vector<float> x(xs), w(ws), dy(ys);
    for (int64_t i = 0; i < xs; ++i)
      x[i] = convValue(i, 1);
    for (int64_t i = 0; i < ws; ++i)
      w[i] = convValue(i, 2);
    for (int64_t i = 0; i < ys; ++i)
      dy[i] = convValue(i, 3);
    ConvReference want = convReference(p, x, w, dy);
    // Float32 sums of up to 8000 products below 1 in magnitude.
    auto check = [](const std::vector<float> &got,
                    const std::vector<double> &expected) {
      expectRelNear(got, expected, 1e-5, 1e-4);
    };
    // Every kernel writes over 7s: one that wrote nothing fails.
    auto checkThenPoison = [&](float *got, int64_t n,
                               const std::vector<double> &expected) {
      check(download(got, n), expected);
      fill(ctx, got, n, 7.0f);
    };
    auto workspace = [&](ConvKernel kernel, bool low) {
      return upload(std::vector<float>(
          conv2dWorkspaceBytes(p, kernel, low) / sizeof(float), 0.0f));
    };
    float *y = upload(std::vector<float>(ys, 7.0f));
    float *dx = upload(std::vector<float>(xs, 7.0f));
    float *dw = upload(std::vector<float>(ws, 7.0f));
    const float *dxF = upload(x), *dwF = upload(w), *dyF = upload(dy);
    conv2dForward(ctx, p, dxF, dwF, nullptr, y,
                  workspace(ConvKernel::Forward, false));
    checkThenPoison(y, ys, want.y);
    conv2dBackwardData(ctx, p, dyF, dwF, dx,
                       workspace(ConvKernel::BackwardData, false));
    checkThenPoison(dx, xs, want.dx);
    conv2dBackwardFilter(ctx, p, dxF, dyF, dw,
                         workspace(ConvKernel::BackwardFilter, false));
    checkThenPoison(dw, ws, want.dw);

    auto narrow = [&](const std::vector<float> &v) {
      std::vector<uint16_t> h;
      for (float f : v)
        h.push_back(floatToBf16(f));
      return upload(h);
    };
    const uint16_t *x16 = narrow(x), *w16 = narrow(w), *dy16 = narrow(dy);
    conv2dForward16(ctx, Storage16::Bf16, p, x16, w16, nullptr, y,
                    workspace(ConvKernel::Forward, true));
    checkThenPoison(y, ys, want.y);
    conv2dBackwardData16(ctx, Storage16::Bf16, p, dy16, w16, dx,
                         workspace(ConvKernel::BackwardData, true));
    checkThenPoison(dx, xs, want.dx);
    conv2dBackwardFilter16(ctx, Storage16::Bf16, p, x16, dy16, dw,
                           workspace(ConvKernel::BackwardFilter, true));
    checkThenPoison(dw, ws, want.dw);
#ifdef MTC_RUNTIME_CUDA
    // The 16-bit operands multiplied as stored (the tensor cores), in the
    // smaller workspace planned for them.
    auto native = [&](ConvKernel kernel) {
      return upload(std::vector<float>(
          (conv2dWorkspaceBytes(p, kernel, true, true) + 3) / sizeof(float),
          0.0f));
    };
    if (convIsPointwise(p) && convNativeBatched(p)) {
      EXPECT_EQ(conv2dWorkspaceBytes(p, ConvKernel::Forward, true, true), 0u);
      EXPECT_EQ(conv2dWorkspaceBytes(p, ConvKernel::BackwardData, true, true),
                0u);
    }
    conv2dForwardNative16(ctx, Storage16::Bf16, p, x16, w16, nullptr, y,
                          native(ConvKernel::Forward));
    checkThenPoison(y, ys, want.y);
    // A result stored in bfloat16: each sum rounded once, within half a
    // bf16 unit of the float32 result's tolerance; nothing written past it.
    auto checkRounded = [&](uint16_t *got16, int64_t n,
                            const std::vector<double> &expected) {
      EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
      std::vector<uint16_t> got = download(got16, n + 2);
      EXPECT_EQ(got[n], static_cast<uint16_t>(kSentinel));
      EXPECT_EQ(got[n + 1], static_cast<uint16_t>(kSentinel));
      for (int64_t i = 0; i < n; ++i) {
        const double w = expected[i], tol = 1e-5 * std::abs(w) + 1e-4;
        ASSERT_NEAR(bf16ToFloat(got[i]), w,
                    tol + std::ldexp(std::abs(w) + tol, -8))
            << "element " << i;
      }
    };
    if (!convIsDepthwise(p)) {
      uint16_t *y16 = upload(std::vector<uint16_t>(ys, 0x7e00), 2);
      conv2dForwardNative16(ctx, Storage16::Bf16, p, x16, w16, nullptr, y16,
                            native(ConvKernel::Forward));
      checkRounded(y16, ys, want.y);
    }
    conv2dBackwardDataNative16(ctx, Storage16::Bf16, p, dy16, w16, dx,
                               native(ConvKernel::BackwardData));
    checkThenPoison(dx, xs, want.dx);
    uint16_t *dx16 = upload(std::vector<uint16_t>(xs, 0x7e00), 2);
    conv2dBackwardDataNative16(ctx, Storage16::Bf16, p, dy16, w16, dx16,
                               native(ConvKernel::BackwardData));
    checkRounded(dx16, xs, want.dx);
    conv2dBackwardFilterNative16(ctx, Storage16::Bf16, p, x16, dy16, dw,
                                 native(ConvKernel::BackwardFilter));
    checkThenPoison(dw, ws, want.dw);
    // On a GPU of one SM the backward filter wants fewer slices (about
    // four tiles in all): pointwise ones of 512 pixels or more take 4
    // images at a time into 4 partial sums, the fifth image adding into
    // the first; others 4 slices of their columns.
    const int sms = ctx.smCount;
    ctx.smCount = 1;
    conv2dBackwardFilterNative16(ctx, Storage16::Bf16, p, x16, dy16, dw,
                                 native(ConvKernel::BackwardFilter));
    ctx.smCount = sms;
    checkThenPoison(dw, ws, want.dw);
#endif
  }
}

TEST(ConvCost, ScratchTrafficIsTheWorkspaceMatricesWrittenAndReadBack) {
  // ResNet-50's 3x3 convolution of its first stage at batch 64: 64 -> 64
  // channels on 56 x 56 maps, padding 1. Its im2col matrix holds, for each
  // of the 64 * 56 * 56 output pixels, the 64 * 9 input values its taps
  // read; the kernels write each matrix they fill once and read it once.
  Conv2dParams p{};
  p.n = 64, p.c = 64, p.h = 56, p.w = 56, p.k = 64, p.kh = 3, p.kw = 3;
  p.oh = 56, p.ow = 56, p.strideH = p.strideW = 1, p.padTop = p.padLeft = 1;
  p.dilationH = p.dilationW = 1, p.groups = 1;
  const uint64_t im2col = 64ull * 9 * 64 * 56 * 56; // values
  const uint64_t outputs = 64ull * 64 * 56 * 56;
  const uint64_t weight = 64ull * 64 * 9;

  // CUDA (GEMMs of 32768 columns: 10 images each, 7 GEMMs) multiplying
  // bfloat16 as stored. The forward runs one GEMM per image (3136 pixels,
  // a multiple of 8) on its 16-bit im2col matrix: no staging matrix.
  // Backward data is the forward of the output gradient by the flipped
  // weight (written once, read once): its im2col matrix is as large, 16-bit
  // too. Backward filter gathers the output gradients of 10 images side by
  // side (16-bit) and reads and rewrites its float32 sums in 6 GEMMs after
  // the first.
  p.gemmColumns = kConvGemmColumnsCuda;
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::Forward, true, true),
            2 * im2col * 2);
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardData, true, true),
            2 * (weight * 2 + im2col * 2));
  // With stride 2 it multiplies into a float32 matrix that col2im sums (a
  // 28x28 map's 784 pixels: still one GEMM per image).
  p.strideH = p.strideW = 2, p.oh = p.ow = 28;
  const uint64_t products = 64ull * 9 * 64 * 28 * 28;
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardData, true, true),
            2 * products * 4);
  // The last stage's 3x3 convolution (512 channels on 7 x 7 maps, 49
  // pixels: not a multiple of 8) runs its backward data as a forward too,
  // all 64 images in one GEMM: the flipped weight, the 16-bit im2col
  // matrix of the output gradient, and dx staged in float32 before it is
  // scattered to the images' planes.
  {
    Conv2dParams last = p;
    last.c = last.k = 512, last.h = last.w = last.oh = last.ow = 7;
    last.strideH = last.strideW = 1;
    const uint64_t lastWeight = 512ull * 512 * 9;
    const uint64_t lastIm2col = 512ull * 9 * 64 * 49;
    const uint64_t lastDx = 512ull * 64 * 49;
    EXPECT_EQ(conv2dScratchTraffic(last, ConvKernel::BackwardData, true, true),
              2 * (lastWeight * 2 + lastIm2col * 2 + lastDx * 4));
  }
  p.strideH = p.strideW = 1, p.oh = p.ow = 56;
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardFilter, true, true),
            2 * (im2col * 2 + outputs * 2 + 6 * weight * 4));

  // The CPU (GEMMs of 1024 columns: one image each, 64 of them) on float32:
  // the float32 im2col matrix alone, and backward filter's sums 63 times.
  p.gemmColumns = kConvGemmColumnsCpu;
  EXPECT_EQ(conv2dScratchTraffic(p), 2 * im2col * 4);
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardFilter),
            2 * (im2col * 4 + 63 * weight * 4));
  // 16-bit operands widened for it: the weight once, backward data's output
  // gradient image by image too.
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardData, true),
            2 * (im2col * 4 + weight * 4 + outputs * 4));

  // A pointwise convolution's native GEMMs read and write the images in
  // place; a depthwise convolution runs without workspace.
  p.kh = p.kw = 1, p.padTop = p.padLeft = 0;
  p.gemmColumns = kConvGemmColumnsCuda;
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::Forward, true, true), 0u);
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardData, true, true), 0u);
  p.kh = p.kw = 3, p.padTop = p.padLeft = 1, p.groups = 64;
  EXPECT_EQ(conv2dScratchTraffic(p, ConvKernel::BackwardFilter), 0u);
}

TEST_F(Kernels, NarrowInPlaceRoundsEachValue) {
  // Lengths around the phase boundaries (1, 2, 4, ...), both formats:
  // every value ends as its own rounding, none read after it was
  // overwritten.
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 1000, 4097}) {
    for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
      std::vector<float> values(n);
      for (int64_t i = 0; i < n; ++i)
        values[i] = float(i % 97) * 0.37f - 11.0f + 1.0f / float(i + 3);
      float *x = upload(values);
      narrowInPlace(ctx, storage, x, n);
      std::vector<uint16_t> got =
          download(reinterpret_cast<const uint16_t *>(x), size_t(n));
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], storage == Storage16::Bf16 ? floatToBf16(values[i])
                                                     : floatToHalf(values[i]))
            << "n " << n << ", element " << i;
    }
  }
}

TEST_F(Kernels, MaxPoolTiesAndPadding) {
  Pool2dParams p{};
  p.n = 1, p.c = 1, p.h = 2, p.w = 2;
  p.kh = p.kw = 2;
  p.oh = p.ow = 1;
  p.strideH = p.strideW = 2;
  p.dilationH = p.dilationW = 1;
  float *x = upload<float>({1, 1, 1, 1});
  float *y = upload<float>({0});
  maxPool2dForward(ctx, p, x, y);
  expectNear(download(y, 1), {1});
  // A tie sends the whole gradient to the first element.
  float *dy = upload<float>({5});
  float *dx = upload<float>({9, 9, 9, 9});
  maxPool2dBackward(ctx, p, x, dy, dx);
  expectNear(download(dx, 4), {5, 0, 0, 0});

  // Padding never wins, even over negative inputs: with pad 1 and stride 2
  // each window sees exactly one input cell.
  p.padTop = p.padLeft = 1;
  p.oh = p.ow = 2;
  float *neg = upload<float>({-1, -2, -3, -4});
  float *y2 = upload<float>({0, 0, 0, 0});
  maxPool2dForward(ctx, p, neg, y2);
  expectNear(download(y2, 4), {-1, -2, -3, -4});
}

// Against the definition written out: the max over the taps inside the
// input in row-major window order, the first of equal values, the first NaN
// over any number, -inf for a window in padding; the gradient to the winner,
// summed in output order. Rows wider than the kernel's span of outputs,
// ties, NaNs, strides, dilations, padding on both axes, and windows with
// no tap inside the input.
TEST_F(Kernels, MaxPoolMatchesTheDefinition) {
  struct Case {
    int64_t h, w, kh, kw, sh, sw, pt, pl, dh, dw;
  };
  // The last case's first and last rows of windows lie wholly in padding.
  // CUDA's backward takes bands of about 2048 input elements a block (600
  // columns: bands of 3 rows; a ResNet stem's 3x3 stride-2 pooling of
  // 40 x 60: of 34, whose windows overlap the next band's), unless one
  // row's windows would overflow 48 KiB of shared memory (5000 columns of
  // windows 3 rows high).
  for (const Case &c : {Case{5, 600, 3, 2, 1, 2, 1, 1, 1, 2},
                        Case{7, 9, 3, 3, 2, 2, 1, 1, 1, 1},
                        Case{4, 300, 2, 3, 2, 1, 0, 2, 2, 1},
                        Case{3, 8, 1, 2, 1, 1, 1, 0, 1, 1},
                        Case{40, 60, 3, 3, 2, 2, 1, 1, 1, 1},
                        Case{3, 5000, 3, 1, 1, 1, 1, 0, 1, 1}}) {
    Pool2dParams p{};
    p.n = 2, p.c = 3, p.h = c.h, p.w = c.w;
    p.kh = c.kh, p.kw = c.kw;
    p.strideH = c.sh, p.strideW = c.sw;
    p.padTop = c.pt, p.padLeft = c.pl;
    p.dilationH = c.dh, p.dilationW = c.dw;
    p.oh = (c.h + 2 * c.pt - c.dh * (c.kh - 1) - 1) / c.sh + 1;
    p.ow = (c.w + 2 * c.pl - c.dw * (c.kw - 1) - 1) / c.sw + 1;
    const int64_t in = p.n * p.c * p.h * p.w, out = p.n * p.c * p.oh * p.ow;
    std::vector<float> xv(in);
    for (int64_t i = 0; i < in; ++i) // few distinct values: many ties
      xv[i] = i % 53 == 7 ? std::nanf("") : float((i * 7919) % 5) - 2.0f;
    std::vector<float> dyv(out);
    for (int64_t i = 0; i < out; ++i)
      dyv[i] = 0.25f * float(i % 11) + 1.0f;
    std::vector<float> yRef(out), dxRef(in, 0.0f);
    for (int64_t plane = 0; plane < p.n * p.c; ++plane)
      for (int64_t oy = 0; oy < p.oh; ++oy)
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          int64_t best = -1;
          for (int64_t i = 0; i < p.kh; ++i)
            for (int64_t j = 0; j < p.kw; ++j) {
              int64_t iy = oy * p.strideH - p.padTop + i * p.dilationH;
              int64_t ix = ox * p.strideW - p.padLeft + j * p.dilationW;
              if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
                continue;
              int64_t at = (plane * p.h + iy) * p.w + ix;
              if (best < 0 || (!std::isnan(xv[best]) &&
                               (std::isnan(xv[at]) || xv[at] > xv[best])))
                best = at;
            }
          int64_t o = (plane * p.oh + oy) * p.ow + ox;
          yRef[o] = best < 0 ? -INFINITY : xv[best];
          if (best >= 0)
            dxRef[best] += dyv[o];
        }
    float *x = upload(xv), *y = upload(std::vector<float>(out));
    maxPool2dForward(ctx, p, x, y);
    std::vector<float> yGot = download(y, out);
    for (int64_t i = 0; i < out; ++i)
      if (std::isnan(yRef[i]))
        ASSERT_TRUE(std::isnan(yGot[i])) << "at " << i;
      else
        ASSERT_EQ(yGot[i], yRef[i]) << "at " << i;
    float *dx = upload(std::vector<float>(in, 9.0f));
    maxPool2dBackward(ctx, p, x, upload(dyv), dx);
    EXPECT_EQ(download(dx, in), dxRef);
  }
}

TEST_F(Kernels, MaxPool16IsTheFloatKernelOnStoredValues) {
  // x, dy read and y, dx written as 16-bit values, in each combination:
  // bit for bit the float32 kernels on the widened values, each result
  // rounded as a conversion rounds it (y is one of the inputs, exactly).
  // Overlapping windows (3x3, stride 2, padded): up to four gradients sum
  // into one input element; ties among the rounded values.
  Pool2dParams p{};
  p.n = 2, p.c = 3, p.h = 9, p.w = 11;
  p.kh = p.kw = 3;
  p.strideH = p.strideW = 2;
  p.padTop = p.padLeft = 1;
  p.dilationH = p.dilationW = 1;
  p.oh = 5, p.ow = 6;
  const int64_t in = p.n * p.c * p.h * p.w, out = p.n * p.c * p.oh * p.ow;
  std::vector<float> xv(in), dyv(out);
  for (int64_t i = 0; i < in; ++i)
    xv[i] = float((i * 7919) % 97) * 0.061f - 3.0f + 1.0f / float(i + 3);
  for (int64_t i = 0; i < out; ++i)
    dyv[i] = float((i * 104729) % 89) * 0.0221f - 1.0f + 1.0f / float(i + 7);
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    SCOPED_TRACE(bf16 ? "bf16" : "fp16");
    auto round = [&](const std::vector<float> &v) {
      std::vector<uint16_t> r(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        r[i] = bf16 ? floatToBf16(v[i]) : floatToHalf(v[i]);
      return r;
    };
    auto widen = [&](const std::vector<uint16_t> &v) {
      std::vector<float> w(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        w[i] = storedToFloat(v[i], bf16);
      return w;
    };
    const std::vector<uint16_t> x16v = round(xv), dy16v = round(dyv);
    float *xw = upload(widen(x16v));
    float *y = upload(std::vector<float>(out));
    maxPool2dForward(ctx, p, xw, y);
    const std::vector<float> y32 = download(y, out);
    uint16_t *x16 = upload(x16v);
    uint16_t *y16 = upload(std::vector<uint16_t>(out), 2);
    maxPool2dForward16(ctx, storage, p, x16, y16);
    std::vector<uint16_t> got = download(y16, out + 2);
    EXPECT_EQ(got[out], static_cast<uint16_t>(kSentinel));
    got.resize(out);
    EXPECT_EQ(got, round(y32));
    float *yf = upload(std::vector<float>(out));
    maxPool2dForward16(ctx, storage, p, x16, yf);
    EXPECT_EQ(download(yf, out), y32);
    for (bool narrowDy : {false, true}) {
      SCOPED_TRACE(narrowDy ? "16-bit dy" : "float32 dy");
      float *dx = upload(std::vector<float>(in));
      maxPool2dBackward(ctx, p, xw, upload(narrowDy ? widen(dy16v) : dyv), dx);
      const std::vector<float> dx32 = download(dx, in);
      StoredIn dyIn = upload(dyv);
      if (narrowDy)
        dyIn = upload(dy16v);
      uint16_t *dx16 = upload(std::vector<uint16_t>(in, 0x7e00), 2);
      maxPool2dBackward16(ctx, storage, p, x16, dyIn, dx16);
      std::vector<uint16_t> gotDx = download(dx16, in + 2);
      EXPECT_EQ(gotDx[in], static_cast<uint16_t>(kSentinel));
      gotDx.resize(in);
      EXPECT_EQ(gotDx, round(dx32));
      float *dxf = upload(std::vector<float>(in, 9.0f));
      maxPool2dBackward16(ctx, storage, p, x16, dyIn, dxf);
      EXPECT_EQ(download(dxf, in), dx32);
    }
  }
}

TEST_F(Kernels, AvgPoolCountIncludePad) {
  // 2x2 kernel, stride 1, pad 1 on [[1, 2], [3, 4]]: the corner window
  // holds one input cell and three padded ones, the centre all four.
  Pool2dParams p{};
  p.n = 1, p.c = 1, p.h = 2, p.w = 2;
  p.kh = p.kw = 2;
  p.oh = p.ow = 3;
  p.strideH = p.strideW = 1;
  p.padTop = p.padLeft = 1;
  p.dilationH = p.dilationW = 1;
  float *x = upload<float>({1, 2, 3, 4});
  float *y = upload<float>(std::vector<float>(9, 0.0f));
  p.countIncludePad = false;
  avgPool2dForward(ctx, p, x, y);
  expectNear(download(y, 9), {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4});
  p.countIncludePad = true;
  avgPool2dForward(ctx, p, x, y);
  expectNear(download(y, 9),
             {0.25f, 0.75f, 0.5f, 1, 2.5f, 1.5f, 0.75f, 1.75f, 1});

  // Backward with countIncludePad: every window passes 1/4 of its gradient
  // to each input cell it covers; each cell is covered by 4 windows.
  float *dy = upload<float>(std::vector<float>(9, 1.0f));
  float *dx = upload<float>({9, 9, 9, 9});
  avgPool2dBackward(ctx, p, dy, dx);
  expectNear(download(dx, 4), {1, 1, 1, 1});
}

TEST_F(Kernels, SoftmaxOfEqualValues) {
  float *x = upload<float>({3, 3, 3, 3, 1000, 1000, 1000, 1000});
  float *y = upload<float>(std::vector<float>(8, 0.0f));
  softmaxForward(ctx, 2, 4, 1, x, y, false);
  expectNear(download(y, 8), std::vector<float>(8, 0.25f));
  softmaxForward(ctx, 2, 4, 1, x, y, true);
  expectNear(download(y, 8), std::vector<float>(8, -std::log(4.0f)));

  // Along a middle axis: [outer=1, dim=2, inner=2].
  float *x2 = upload<float>({0, 5, 0, 5});
  float *y2 = upload<float>({0, 0, 0, 0});
  softmaxForward(ctx, 1, 2, 2, x2, y2, false);
  expectNear(download(y2, 4), {0.5f, 0.5f, 0.5f, 0.5f});

  // The softmax gradient of a constant dy is zero.
  float *yUniform = upload<float>(std::vector<float>(4, 0.25f));
  float *dy = upload<float>(std::vector<float>(4, 2.0f));
  float *dx = upload<float>(std::vector<float>(4, 9.0f));
  softmaxBackward(ctx, 1, 4, 1, yUniform, dy, dx, false);
  expectNear(download(dx, 4), std::vector<float>(4, 0.0f));
}

TEST_F(Kernels, SoftmaxCrossEntropy) {
  // Equal logits over 4 classes: loss log 4, gradient (1/4 - onehot) / n.
  float *logits = upload<float>(std::vector<float>(8, 0.0f));
  int64_t *labels = upload<int64_t>({1, 3});
  float *loss = upload<float>({0});
  float *logProb = upload<float>(std::vector<float>(8, 0.0f));
  softmaxCrossEntropyForward(ctx, 2, 4, 1, logits, labels, Reduction::Mean,
                             -100, loss, logProb);
  expectNear(download(loss, 1), {std::log(4.0f)});
  float *dloss = upload<float>({1});
  float *dlogits = upload<float>(std::vector<float>(8, 9.0f));
  softmaxCrossEntropyBackward(ctx, 2, 4, 1, dloss, logProb, labels,
                              Reduction::Mean, -100, dlogits);
  expectNear(download(dlogits, 8), {0.125f, -0.375f, 0.125f, 0.125f, 0.125f,
                                    0.125f, 0.125f, -0.375f});
  EXPECT_FALSE(hasError(ctx));

  // Every label ignored: the mean is 0/0 = NaN (as in PyTorch), the
  // gradient zero.
  int64_t *ignored = upload<int64_t>({-100, -100});
  softmaxCrossEntropyForward(ctx, 2, 4, 1, logits, ignored, Reduction::Mean,
                             -100, loss, logProb);
  EXPECT_TRUE(std::isnan(download(loss, 1)[0]));
  softmaxCrossEntropyBackward(ctx, 2, 4, 1, dloss, logProb, ignored,
                              Reduction::Mean, -100, dlogits);
  expectNear(download(dlogits, 8), std::vector<float>(8, 0.0f));
  EXPECT_FALSE(hasError(ctx));

  // A label outside [0, 4) is a data error naming the label and its row.
  int64_t *bad = upload<int64_t>({1, 7});
  softmaxCrossEntropyForward(ctx, 2, 4, 1, logits, bad, Reduction::Mean, -100,
                             loss, logProb);
  ASSERT_TRUE(device::synchronize(ctx).ok());
  ASSERT_TRUE(hasError(ctx));
  ContextError err = takeError(ctx);
  EXPECT_NE(err.message.find("label 7"), std::string::npos) << err.message;
  EXPECT_EQ(err.batchRow, 1);
  // The bad label counts as ignored.
  expectNear(download(loss, 1), {std::log(4.0f)});
}

// The fused loss and gradient against the two kernels it replaces (the
// same bits on the CPU, which share the row statistics; rounding on CUDA,
// whose sums run in another order) and against the definition in double:
// odd sizes, ignored labels, both reductions, float32 and 16-bit results,
// in place and not.
TEST_F(Kernels, SoftmaxCrossEntropyWithGradMatchesTheTwoKernels) {
  const int64_t n = 37, c = 1031;
  std::vector<float> x(n * c);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 4.0f * std::sin(0.37f * float(i)) + 0.01f * float(i % 97);
  std::vector<int64_t> y(n);
  for (int64_t r = 0; r < n; ++r)
    y[r] = r % 5 == 3 ? -100 : (r * 389) % c;
  const int64_t *labels = upload(y);
  const float *dloss = upload<float>({0.75f});
  // The definition in double.
  std::vector<double> expected(n * c, 0.0);
  double lossSum = 0.0;
  int64_t valid = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (y[r] < 0)
      continue;
    double m = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < c; ++i)
      m = std::max(m, double(x[r * c + i]));
    for (int64_t i = 0; i < c; ++i)
      sum += std::exp(double(x[r * c + i]) - m);
    lossSum += std::log(sum) + m - x[r * c + y[r]];
    ++valid;
    for (int64_t i = 0; i < c; ++i)
      expected[r * c + i] =
          std::exp(double(x[r * c + i]) - m) / sum - (i == y[r] ? 1.0 : 0.0);
  }
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
    const double scale = reduction == Reduction::Mean ? 0.75 / valid : 0.75;
    std::vector<double> grad(expected);
    for (double &g : grad)
      g *= scale;
    const double lossExpected =
        reduction == Reduction::Mean ? lossSum / valid : lossSum;
    // The two kernels.
    float *logits = upload(x);
    float *loss = upload<float>({0});
    float *logProb = upload(std::vector<float>(n * c, 0.0f));
    float *dlogits = upload(std::vector<float>(n * c, 0.0f));
    softmaxCrossEntropyForward(ctx, n, c, 1, logits, labels, reduction, -100,
                               loss, logProb);
    softmaxCrossEntropyBackward(ctx, n, c, 1, dloss, logProb, labels,
                                reduction, -100, dlogits);
    const float twoLoss = download(loss, 1)[0];
    const std::vector<float> twoGrad = download(dlogits, n * c);
    expectRelNear({twoLoss}, {lossExpected}, 1e-5, 0.0);
    expectRelNear(twoGrad, grad, 1e-4, 1e-9);
    for (int to : {32, int(Storage16::Bf16), int(Storage16::F16)}) {
      const bool narrow = to != 32;
      const Storage16 storage = narrow ? Storage16(to) : Storage16::Bf16;
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(std::string(reduction == Reduction::Mean ? "mean" : "sum") +
                     ", " + (narrow ? "16-bit" : "float32") +
                     (inPlace ? ", in place" : ""));
        float *in = upload(x);
        float *out = inPlace ? in : upload(std::vector<float>(n * c, 9.0f));
        float *fusedLoss = upload<float>({0});
        void *ws = upload(std::vector<float>(
            softmaxCrossEntropyWithGradWorkspaceBytes(n) / sizeof(float)));
        softmaxCrossEntropyWithGrad(ctx, n, c, c, in, labels, dloss, reduction,
                                    -100, fusedLoss, out, narrow, storage, ws);
        EXPECT_FALSE(hasError(ctx));
        const float l = download(fusedLoss, 1)[0];
        if (!inPlace) {
          // The loss alone (evaluation) is the same number.
          float *aloneLoss = upload<float>({0});
          softmaxCrossEntropyLoss(ctx, n, c, c, in, labels, reduction, -100,
                                  aloneLoss, ws);
          EXPECT_FALSE(hasError(ctx));
          EXPECT_EQ(download(aloneLoss, 1)[0], l);
        }
        std::vector<float> g(n * c);
        if (narrow) {
          std::vector<uint16_t> h =
              download(reinterpret_cast<uint16_t *>(out), n * c);
          for (int64_t i = 0; i < n * c; ++i)
            g[i] = storage == Storage16::Bf16 ? bf16ToFloat(h[i])
                                              : halfToFloat(h[i]);
        } else {
          g = download(out, n * c);
        }
#ifdef MTC_RUNTIME_CUDA
        expectRelNear({l}, {double(twoLoss)}, 1e-6, 0.0);
        // The two paths round the argument of exp apart: x - max - logSum
        // here, of magnitude up to 16, where half an ulp is 4.8e-7, which
        // exp turns into as much relative error; expf adds an ulp or two.
        for (int64_t i = 0; i < n * c; ++i) {
          const float want = twoGrad[i];
          if (!narrow)
            ASSERT_NEAR(g[i], want, 2e-6f * std::fabs(want) + 1e-12f)
                << "at " << i;
          else // one 16-bit step either way (float16: 2^-24 near 0)
            ASSERT_NEAR(g[i], want, 1e-2f * std::fabs(want) + 6e-8f)
                << "at " << i;
        }
#else
        EXPECT_EQ(l, twoLoss);
        for (int64_t i = 0; i < n * c; ++i) {
          const float want =
              !narrow ? twoGrad[i]
              : storage == Storage16::Bf16
                  ? bf16ToFloat(floatToBf16(twoGrad[i]))
                  : halfToFloat(floatToHalf(twoGrad[i]));
          ASSERT_EQ(g[i], want) << "at " << i;
        }
#endif
      }
    }
  }
}

TEST_F(Kernels, SoftmaxCrossEntropyWithGrad16ReadsTheStoredLogits) {
  // 16-bit logits (a GEMM's rounded output) give bitwise the loss and the
  // 16-bit gradient of the float32-logits kernel run on their widening,
  // with dlogits beside them or over them; labels include an ignored one.
  const int64_t n = 23, c = 1031;
  std::vector<int64_t> y(n);
  for (int64_t r = 0; r < n; ++r)
    y[r] = r % 7 == 5 ? -100 : (r * 389) % c;
  const int64_t *labels = upload(y);
  const float *dloss = upload<float>({0.5f});
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    std::vector<uint16_t> bits(n * c);
    std::vector<float> wide(n * c);
    for (int64_t i = 0; i < n * c; ++i) {
      const float x = 4.0f * std::sin(0.37f * float(i)) + 0.01f * float(i % 97);
      bits[i] = bf16 ? floatToBf16(x) : floatToHalf(x);
      wide[i] = storedToFloat(bits[i], bf16);
    }
    for (Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
      void *ws = upload(std::vector<float>(
          softmaxCrossEntropyWithGradWorkspaceBytes(n) / sizeof(float)));
      float *wantLoss = upload<float>({0});
      uint16_t *wantGrad = upload(std::vector<uint16_t>(n * c, 0));
      softmaxCrossEntropyWithGrad(ctx, n, c, c, upload(wide), labels, dloss,
                                  reduction, -100, wantLoss, wantGrad, true,
                                  storage, ws);
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp16") +
                     (reduction == Reduction::Mean ? ", mean" : ", sum") +
                     (inPlace ? ", in place" : ""));
        uint16_t *logits = upload(bits);
        uint16_t *grad =
            inPlace ? logits : upload(std::vector<uint16_t>(n * c, 0x7777));
        float *loss = upload<float>({0});
        softmaxCrossEntropyWithGrad16(ctx, storage, n, c, c, logits, labels,
                                      dloss, reduction, -100, loss, grad, ws);
        EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
        EXPECT_EQ(download(loss, 1)[0], download(wantLoss, 1)[0]);
        EXPECT_EQ(download(grad, n * c), download(wantGrad, n * c));
      }
    }
  }
}

/// The definition in double of the softmax cross-entropy of n rows of c
/// logits with labels y (none ignored): returns the sum of the rows'
/// losses and leaves in `grad` the gradient of their mean.
static double meanCrossEntropyInDouble(const std::vector<float> &x, int64_t n,
                                       int64_t c, const std::vector<int64_t> &y,
                                       std::vector<double> &grad) {
  grad.assign(n * c, 0.0);
  double lossSum = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const float *row = x.data() + r * c;
    double m = *std::max_element(row, row + c), sum = 0.0;
    for (int64_t i = 0; i < c; ++i)
      sum += std::exp(double(row[i]) - m);
    lossSum += std::log(sum) + m - row[y[r]];
    for (int64_t i = 0; i < c; ++i)
      grad[r * c + i] =
          (std::exp(double(row[i]) - m) / sum - (i == y[r] ? 1.0 : 0.0)) / n;
  }
  return lossSum;
}

TEST_F(Kernels, SoftmaxCrossEntropyWithGradLargeRows) {
  // Rows of 60000 classes: on CUDA a bf16 row (120 KB) is staged in shared
  // memory, a float32 one (240 KB) is more than any GPU lets a block have
  // and is read from memory on each pass. Rows of 12000 float32 or 24000
  // bf16 classes (48000 bytes) are staged too: under the 48 KiB a block
  // has without opting in, but not with the kernel's 2 KiB of static shared
  // memory on top, so the kernel must opt in. All match the definition in
  // double, as the rows of the tests above do.
  const int64_t n = 3;
  for (const auto &[c, sixteen] : {std::pair<int64_t, bool>{60000, false},
                                   {60000, true},
                                   {12000, false},
                                   {24000, true}}) {
    std::vector<int64_t> y = {17, c - 1, c / 2};
    const int64_t *labels = upload(y);
    const float *dloss = upload<float>({1.0f});
    std::vector<float> x(n * c);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = 6.0f * std::sin(0.011f * float(i)) + 0.001f * float(i % 89);
    SCOPED_TRACE(std::string(sixteen ? "bf16" : "float32") + ", " +
                 std::to_string(c) + " classes");
    std::vector<uint16_t> bits(n * c);
    std::vector<float> seen(x);
    if (sixteen)
      for (int64_t i = 0; i < n * c; ++i) {
        bits[i] = floatToBf16(x[i]);
        seen[i] = bf16ToFloat(bits[i]);
      }
    std::vector<double> want;
    const double lossSum = meanCrossEntropyInDouble(seen, n, c, y, want);
    void *ws = upload(std::vector<float>(
        softmaxCrossEntropyWithGradWorkspaceBytes(n) / sizeof(float)));
    float *loss = upload<float>({0});
    std::vector<float> got(n * c);
    if (sixteen) {
      uint16_t *grad = upload(std::vector<uint16_t>(n * c, 0x7777));
      softmaxCrossEntropyWithGrad16(ctx, Storage16::Bf16, n, c, c, upload(bits),
                                    labels, dloss, Reduction::Mean, -100, loss,
                                    grad, ws);
      std::vector<uint16_t> h = download(grad, n * c);
      for (int64_t i = 0; i < n * c; ++i)
        got[i] = bf16ToFloat(h[i]);
    } else {
      float *grad = upload(std::vector<float>(n * c, 9.0f));
      softmaxCrossEntropyWithGrad(ctx, n, c, c, upload(x), labels, dloss,
                                  Reduction::Mean, -100, loss, grad, false,
                                  Storage16::Bf16, ws);
      got = download(grad, n * c);
    }
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    expectRelNear({download(loss, 1)[0]}, {lossSum / n}, 1e-5, 0.0);
    // A bf16 gradient is one rounding off.
    expectRelNear(got, want, sixteen ? 8e-3 : 1e-4, 1e-10);
  }
}

TEST_F(Kernels, SoftmaxCrossEntropyWithGradMaskedLogits) {
  // Logits of -inf (masked classes) where a thread's first chunks, every
  // other chunk or whole warps' chunks hold nothing else: on CUDA a
  // thread's running maximum starts at -inf and its sum must stay 0 there
  // (exp(-inf - -inf) would be NaN), in the thread and when the block
  // combines threads. Rows of 9000 classes give a CUDA thread two or
  // three chunks of 8.
  const int64_t n = 4, c = 9000;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(n * c);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < c; ++i) {
      const bool masked = r == 0   ? i < 4096
                          : r == 1 ? (i / 8) % 2 == 0
                          : r == 2 ? i % 4096 < 2048
                                   : i != 8999;
      x[r * c + i] =
          masked ? -inf : 3.0f * std::sin(0.05f * float(i + r)) + 0.5f * r;
    }
  const std::vector<int64_t> y = {5000, 9, 3000, 8999};
  const int64_t *labels = upload(y);
  const float *dloss = upload<float>({1.0f});
  std::vector<double> want;
  const double lossSum = meanCrossEntropyInDouble(x, n, c, y, want);
  void *ws = upload(std::vector<float>(
      softmaxCrossEntropyWithGradWorkspaceBytes(n) / sizeof(float)));
  float *loss = upload<float>({0});
  float *grad = upload(std::vector<float>(n * c, 9.0f));
  softmaxCrossEntropyWithGrad(ctx, n, c, c, upload(x), labels, dloss,
                              Reduction::Mean, -100, loss, grad, false,
                              Storage16::Bf16, ws);
  EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
  expectRelNear({download(loss, 1)[0]}, {lossSum / n}, 1e-5, 0.0);
  expectRelNear(download(grad, n * c), want, 1e-4, 1e-10);
}

TEST_F(Kernels, SoftmaxCrossEntropyWithGradPaddedRows) {
  // Rows `ld` elements apart (the memory plan pads odd-width logits to 16
  // bytes): the loss, the evaluation loss and every gradient row are
  // bitwise those of the dense rows, in place or not, and the padding is
  // neither read (NaN there changes nothing) nor written.
  const int64_t n = 9, c = 1031, ld = 1032;
  std::vector<int64_t> y(n);
  for (int64_t r = 0; r < n; ++r)
    y[r] = r == 4 ? -100 : (r * 577) % c;
  const int64_t *labels = upload(y);
  const float *dloss = upload<float>({1.0f});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> dense(n * c), padded(n * ld, nan);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < c; ++i)
      dense[r * c + i] = padded[r * ld + i] =
          5.0f * std::sin(0.23f * float(r * c + i)) + 0.02f * float(i % 31);
  void *ws = upload(std::vector<float>(
      softmaxCrossEntropyWithGradWorkspaceBytes(n) / sizeof(float)));
  for (bool sixteen : {false, true}) {
    float *wantLoss = upload<float>({0}), *evalLoss = upload<float>({0});
    std::vector<float> want;
    std::vector<uint16_t> want16;
    std::vector<uint16_t> bits(n * c), bitsPadded(n * ld, 0x7fc1);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < c; ++i)
        bits[r * c + i] = bitsPadded[r * ld + i] =
            floatToBf16(dense[r * c + i]);
    if (sixteen) {
      uint16_t *g = upload(std::vector<uint16_t>(n * c, 0));
      softmaxCrossEntropyWithGrad16(ctx, Storage16::Bf16, n, c, c, upload(bits),
                                    labels, dloss, Reduction::Mean, -100,
                                    wantLoss, g, ws);
      want16 = download(g, n * c);
    } else {
      float *g = upload(std::vector<float>(n * c, 0.0f));
      softmaxCrossEntropyWithGrad(ctx, n, c, c, upload(dense), labels, dloss,
                                  Reduction::Mean, -100, wantLoss, g, false,
                                  Storage16::Bf16, ws);
      want = download(g, n * c);
      softmaxCrossEntropyLoss(ctx, n, c, ld, upload(padded), labels,
                              Reduction::Mean, -100, evalLoss, ws);
      EXPECT_EQ(download(evalLoss, 1)[0], download(wantLoss, 1)[0]);
    }
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    for (bool inPlace : {false, true}) {
      SCOPED_TRACE(std::string(sixteen ? "bf16" : "float32") +
                   (inPlace ? ", in place" : ""));
      float *loss = upload<float>({0});
      if (sixteen) {
        uint16_t *logits = upload(bitsPadded);
        uint16_t *grad =
            inPlace ? logits : upload(std::vector<uint16_t>(n * ld, 0x7fc1));
        softmaxCrossEntropyWithGrad16(ctx, Storage16::Bf16, n, c, ld, logits,
                                      labels, dloss, Reduction::Mean, -100,
                                      loss, grad, ws);
        std::vector<uint16_t> got = download(grad, n * ld);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < ld; ++i)
            ASSERT_EQ(got[r * ld + i],
                      i < c ? want16[r * c + i] : uint16_t(0x7fc1))
                << "row " << r << ", column " << i;
      } else {
        float *logits = upload(padded);
        float *grad =
            inPlace ? logits : upload(std::vector<float>(n * ld, nan));
        softmaxCrossEntropyWithGrad(ctx, n, c, ld, logits, labels, dloss,
                                    Reduction::Mean, -100, loss, grad, false,
                                    Storage16::Bf16, ws);
        std::vector<float> got = download(grad, n * ld);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < ld; ++i)
            if (i < c)
              ASSERT_EQ(got[r * ld + i], want[r * c + i])
                  << "row " << r << ", column " << i;
            else
              ASSERT_TRUE(std::isnan(got[r * ld + i]))
                  << "row " << r << ", column " << i;
      }
      EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
      EXPECT_EQ(download(loss, 1)[0], download(wantLoss, 1)[0]);
    }
  }
  // A 16-bit gradient in place of float32 logits needs dense rows: refused.
  float *loss = upload<float>({0});
  float *logits = upload(padded);
  softmaxCrossEntropyWithGrad(ctx, n, c, ld, logits, labels, dloss,
                              Reduction::Mean, -100, loss, logits, true,
                              Storage16::Bf16, ws);
  EXPECT_TRUE(hasError(ctx));
  EXPECT_NE(takeError(ctx).message.find("without padding"), std::string::npos);
}

TEST_F(Kernels, CountCorrectWithStrides) {
  // The first maximum of each position's classes against its label, with
  // ignored labels not counted; [n, c] logits with padded rows (stride
  // > c, the padding NaN) and dense [n, c, d] logits.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows of 3 classes, 4 apart: argmaxes 2, 0 (a tie: the first), 1, 1.
  float *rows = upload<float>({0.1f, 0.2f, 0.9f, nan,  //
                               0.5f, 0.1f, 0.5f, nan,  //
                               -1.0f, 3.0f, 2.0f, nan, //
                               0.0f, 1.0f, 0.0f, nan});
  float *count = upload<float>({nan, nan});
  countCorrect(ctx, 4, 3, 1, 4, rows, upload<int64_t>({2, 2, -100, 1}), -100,
               count);
  expectNear(download(count, 2), {2, 3});
  // [2, 3, 2]: position (n, d) reads classes n * 6 + c * 2 + d.
  float *spatial = upload<float>({1, 0, 2, 5, 3, 4, //
                                  0, 0, 7, 1, 0, 9});
  countCorrect(ctx, 2, 3, 2, 6, spatial, upload<int64_t>({2, 1, 1, 0}), -100,
               count);
  // Argmaxes: (0,0) 2, (0,1) 1, (1,0) 1, (1,1) 2.
  expectNear(download(count, 2), {3, 4});
  EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
}

TEST_F(Kernels, ReduceSum) {
  float *x = upload<float>({1, 2, 3, 4, 5, 6});
  float *y = upload<float>({0, 0, 0});
  int64_t in[2] = {2, 3}, cols[2] = {1, 3}, rows[2] = {2, 1}, all[2] = {1, 1};
  reduceSum(ctx, 2, in, cols, x, y, 1.0f);
  expectNear(download(y, 3), {5, 7, 9});
  reduceSum(ctx, 2, in, rows, x, y, 0.5f);
  expectNear(download(y, 2), {3, 7.5f});
  reduceSum(ctx, 2, in, all, x, y, 1.0f);
  expectNear(download(y, 1), {21});
  // The middle axis of [2, 2, 2].
  float *z = upload<float>({1, 2, 3, 4, 5, 6, 7, 8});
  int64_t in3[3] = {2, 2, 2}, mid[3] = {2, 1, 2};
  float *out = upload<float>({0, 0, 0, 0});
  reduceSum(ctx, 3, in3, mid, z, out, 1.0f);
  expectNear(download(out, 4), {4, 6, 12, 14});
}

TEST_F(Kernels, StridedCopyTransposes) {
  float *x = upload<float>({1, 2, 3, 4, 5, 6}); // [2, 3]
  float *y = upload<float>(std::vector<float>(6, 0.0f));
  int64_t shape[2] = {3, 2};
  int64_t src[2] = {1, 3}, dst[2] = {2, 1};
  stridedCopy(ctx, 2, shape, x, 0, src, y, 0, dst, 4);
  expectNear(download(y, 6), {1, 4, 2, 5, 3, 6});
  fill(ctx, y, 6, 2.5f);
  expectNear(download(y, 6), std::vector<float>(6, 2.5f));
}

// The GPU kernels' index divisor (multiply and shift for dividends below
// 2^31) against '/': small and large divisors, powers of two, dividends at
// and around multiples of them, the largest ones, and a spread between;
// and the plain division it falls back to for larger bounds.
TEST(Divisor, MatchesIntegerDivision) {
  const int64_t limit = int64_t(1) << 31;
  for (int64_t d :
       {int64_t(1), int64_t(2), int64_t(3), int64_t(7), int64_t(9), int64_t(49),
        int64_t(56), int64_t(64), int64_t(3136), int64_t(25088),
        int64_t(1 << 20) + 7, int64_t(1 << 30), limit - 1}) {
    const Divisor v = makeDivisor(d, limit);
    ASSERT_NE(v.multiplier, 0u) << d;
    std::vector<int64_t> dividends = {0, 1, limit - 1, limit - 2};
    for (int64_t q :
         {int64_t(1), int64_t(2), int64_t(1000), limit / d - 1, limit / d})
      for (int64_t off : {int64_t(-1), int64_t(0), int64_t(1)})
        dividends.push_back(q * d + off);
    for (int64_t k = 0; k < 20000; ++k)
      dividends.push_back((k * 2654435761ll) % limit);
    for (int64_t n : dividends) {
      if (n < 0 || n >= limit)
        continue;
      const int64_t q = v.divide(n);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(v.remainder(n, q), n % d) << n << " % " << d;
    }
  }
  const Divisor wide = makeDivisor(3, limit + 1);
  EXPECT_EQ(wide.multiplier, 0u);
  EXPECT_EQ(wide.divide(3 * limit + 2), limit);
}

// Copies whose rows are long enough to be split across threads: a [3,
// 40000] transpose, a rank-1 gather of every 9th element (a 3x3 kernel's
// centre taps) and its scatter back into a zero-filled gradient; and fills
// of zero (+0.0, cleared as bytes) and of -0.0 over more than one chunk.
TEST_F(Kernels, StridedCopySplitsLongRows) {
  const int64_t cols = 40000, taps = 50000;
  std::vector<float> xv(3 * cols);
  for (int64_t i = 0; i < 3 * cols; ++i)
    xv[i] = float(i % 1013) - 500.0f;
  float *x = upload(xv);
  float *t = upload(std::vector<float>(3 * cols, 0.0f), 1);
  const int64_t shape[2] = {cols, 3}, src[2] = {1, cols}, dst[2] = {3, 1};
  stridedCopy(ctx, 2, shape, x, 0, src, t, 0, dst, 4);
  const std::vector<float> tGot = download(t, 3 * cols + 1);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < 3; ++r)
      ASSERT_EQ(tGot[c * 3 + r], xv[r * cols + c]) << c << ", " << r;
  EXPECT_EQ(tGot[3 * cols], kSentinel);

  std::vector<float> kernel(9 * taps);
  for (int64_t i = 0; i < 9 * taps; ++i)
    kernel[i] = float(i);
  float *w = upload(kernel), *centre = upload(std::vector<float>(taps), 1);
  const int64_t one[1] = {taps}, every9[1] = {9}, unit[1] = {1};
  stridedCopy(ctx, 1, one, w, 4, every9, centre, 0, unit, 4);
  const std::vector<float> centreGot = download(centre, taps + 1);
  for (int64_t i = 0; i < taps; ++i)
    ASSERT_EQ(centreGot[i], float(9 * i + 4)) << "at " << i;
  EXPECT_EQ(centreGot[taps], kSentinel);

  float *grad = upload(std::vector<float>(9 * taps, 7.0f), 1);
  fill(ctx, grad, 9 * taps, 0.0f);
  stridedCopy(ctx, 1, one, centre, 0, unit, grad, 4, every9, 4);
  const std::vector<float> gradGot = download(grad, 9 * taps + 1);
  for (int64_t i = 0; i < 9 * taps; ++i) {
    ASSERT_EQ(gradGot[i], i % 9 == 4 ? float(i) : 0.0f) << "at " << i;
    ASSERT_FALSE(std::signbit(gradGot[i])) << "at " << i;
  }
  EXPECT_EQ(gradGot[9 * taps], kSentinel);
  fill(ctx, grad, 9 * taps, -0.0f);
  const std::vector<float> negZero = download(grad, 9 * taps + 1);
  for (int64_t i = 0; i < 9 * taps; ++i)
    ASSERT_TRUE(negZero[i] == 0.0f && std::signbit(negZero[i])) << i;
  EXPECT_EQ(negZero[9 * taps], kSentinel);
}

TEST_F(Kernels, StridedCopyTo16RoundsEachElement) {
  // A [2, 3] transpose with an offset into the source, stored in 16 bits:
  // bf16 rounds 1 + 2^-8 (a tie) to even (1) and 1 + 3 * 2^-8 up; fp16
  // keeps both (11-bit significands); 70000 overflows fp16 to infinity.
  const float tie = 1.0f + 1.0f / 256, up = 1.0f + 3.0f / 256;
  float *x = upload<float>({9, tie, up, -2.5f, 70000, 0.1f, -0.0f});
  const int64_t shape[2] = {3, 2}, src[2] = {1, 3}, dst[2] = {2, 1};
  const float values[6] = {tie, 70000, up, 0.1f, -2.5f, -0.0f};
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    SCOPED_TRACE(bf16 ? "bf16" : "fp16");
    uint16_t *y = upload(std::vector<uint16_t>(6, 0), 1);
    stridedCopyTo16(ctx, storage, 2, shape, x, 1, src, y, 0, dst);
    const std::vector<uint16_t> got = download(y, 7);
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(got[i], bf16 ? floatToBf16(values[i]) : floatToHalf(values[i]))
          << "at " << i;
    EXPECT_EQ(got[6], static_cast<uint16_t>(kSentinel));
    EXPECT_EQ(storedToFloat(got[0], bf16), bf16 ? 1.0f : tie);
    EXPECT_EQ(storedToFloat(got[2], bf16), bf16 ? 1.0f + 4.0f / 256 : up);
    EXPECT_EQ(std::isinf(storedToFloat(got[1], bf16)), !bf16);
    EXPECT_TRUE(std::signbit(storedToFloat(got[5], bf16)));
  }
}

TEST_F(Kernels, SgdMomentumAndAdamW) {
  float *p = upload<float>({1.0f});
  float *g = upload<float>({0.5f});
  float *buf = upload<float>({0.0f});
  ctx.optimizerStep = 1;
  sgdUpdate(ctx, 1, p, g, buf, 0.1f, 0.9f, 0.0f, false, nullptr);
  expectNear(download(p, 1), {0.95f});
  expectNear(download(buf, 1), {0.5f});
  ctx.optimizerStep = 2;
  sgdUpdate(ctx, 1, p, g, buf, 0.1f, 0.9f, 0.0f, false, nullptr);
  expectNear(download(buf, 1), {0.95f});
  expectNear(download(p, 1), {0.855f});

  // AdamW's first step moves every weight by lr * sign(g) (bias correction
  // makes m / sqrt(v) = g / |g|), after the decoupled weight decay.
  float *q = upload<float>({1.0f, 1.0f});
  float *gq = upload<float>({0.3f, -2.0f});
  float *m = upload<float>({0.0f, 0.0f});
  float *v = upload<float>({0.0f, 0.0f});
  ctx.optimizerStep = 1;
  adamwUpdate(ctx, 2, q, gq, m, v, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, nullptr);
  expectNear(download(q, 2), {0.999f - 0.01f, 0.999f + 0.01f}, 1e-6f);
}

// One multi-tensor AdamW update over tensors of different sizes (40 of
// them: two launches of the CUDA kernel) ends bitwise where one update per
// tensor does, at step 3 and on a skipped step. Every third tensor also has
// a 16-bit copy (bf16 and fp16 in turn), which then holds the new
// parameter rounded as a conversion rounds it, and nothing past its end.
TEST_F(Kernels, AdamwMultiMatchesOneUpdatePerTensor) {
  const int count = 40;
  std::vector<AdamwTensor> multi, single;
  std::vector<std::vector<float>> initial;
  for (int t = 0; t < count; ++t) {
    // Tensor 4 is empty; tensor 9 (with an fp16 copy) takes more blocks than
    // one tensor gets (16 an SM, 2112 on the emulated 132 SMs, of 256
    // threads taking two vectors of four elements each), which then stride,
    // the last stride with one vector a thread. Tensor 7's arrays (and its
    // fp16 copy) start one element into their allocations: too far off for
    // CUDA's 4-element vectors.
    const int64_t n = t == 4 ? 0 : t == 9 ? 4400001 : 1 + (t * 37) % 300;
    const int64_t skip = t == 7 ? 1 : 0;
    std::vector<float> p(n + skip), g(n + skip), m(n + skip), v(n + skip);
    for (int64_t i = 0; i < n; ++i) {
      p[i + skip] = std::sin(0.3f * float(t * 1000 + i));
      g[i + skip] = std::cos(0.7f * float(t * 1000 + i));
      m[i + skip] = 0.01f * g[i + skip];
      v[i + skip] = 0.001f * g[i + skip] * g[i + skip];
    }
    for (auto *set : {&multi, &single})
      set->push_back({n, upload(p) + skip, upload(g) + skip, upload(m) + skip,
                      upload(v) + skip});
    p.erase(p.begin(), p.begin() + skip);
    if (t % 3 == 0 || t == 7) {
      multi.back().param16 =
          upload(std::vector<uint16_t>(n + skip, 0x7fc1), 1) + skip;
      multi.back().storage = t % 2 ? Storage16::F16 : Storage16::Bf16;
    }
    initial.push_back(p);
  }
  ctx.optimizerStep = 3;
  adamwUpdateMulti(ctx, multi.data(), count, 0.01, 0.9, 0.999, 1e-8, 0.1,
                   nullptr);
  for (const AdamwTensor &t : multi) {
    if (!t.param16)
      continue;
    std::vector<float> p = download(t.param, t.n);
    std::vector<uint16_t> copy = download(t.param16, t.n + 1);
    for (int64_t i = 0; i < t.n; ++i)
      ASSERT_EQ(copy[i], t.storage == Storage16::Bf16 ? floatToBf16(p[i])
                                                      : floatToHalf(p[i]))
          << "element " << i << " of " << t.n;
    EXPECT_EQ(copy[t.n], static_cast<uint16_t>(kSentinel));
  }
  for (const AdamwTensor &t : single)
    adamwUpdate(ctx, t.n, t.param, t.grad, t.expAvg, t.expAvgSq, 0.01, 0.9,
                0.999, 1e-8, 0.1, nullptr);
  for (int t = 0; t < count; ++t) {
    const int64_t n = multi[t].n;
    EXPECT_EQ(download(multi[t].param, n), download(single[t].param, n));
    EXPECT_EQ(download(multi[t].expAvg, n), download(single[t].expAvg, n));
    EXPECT_EQ(download(multi[t].expAvgSq, n),
              download(single[t].expAvgSq, n));
    if (n > 0) {
      EXPECT_NE(download(multi[t].param, n), initial[t]);
    }
  }
  // A loss-scaling status flagging an overflow leaves everything alone.
  float *status = upload<float>({1.0f, 1.0f});
  std::vector<float> before = download(multi[5].param, multi[5].n);
  std::vector<uint16_t> copyBefore = download(multi[6].param16, multi[6].n);
  adamwUpdateMulti(ctx, multi.data(), count, 0.01, 0.9, 0.999, 1e-8, 0.1,
                   status);
  EXPECT_EQ(download(multi[5].param, multi[5].n), before);
  EXPECT_EQ(download(multi[6].param16, multi[6].n), copyBefore);
}

// The same for SGD with Nesterov momentum, over its first step (the
// buffer starts as the gradient) and a second, and plain SGD (no buffer).
TEST_F(Kernels, SgdMultiMatchesOneUpdatePerTensor) {
  const int count = 35;
  for (double momentum : {0.9, 0.0}) {
    std::vector<SgdTensor> multi, single;
    for (int t = 0; t < count; ++t) {
      const int64_t n = 1 + (t * 53) % 200;
      std::vector<float> p(n), g(n), buf(n, 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        p[i] = std::sin(0.2f * float(t * 1000 + i));
        g[i] = std::cos(0.9f * float(t * 1000 + i));
      }
      for (auto *set : {&multi, &single})
        set->push_back({n, upload(p), upload(g),
                        momentum != 0.0 ? upload(buf) : nullptr});
    }
    for (int64_t step : {1, 2}) {
      ctx.optimizerStep = step;
      sgdUpdateMulti(ctx, multi.data(), count, 0.05, momentum, 1e-4, true,
                     nullptr);
      for (const SgdTensor &t : single)
        sgdUpdate(ctx, t.n, t.param, t.grad, t.momentum, 0.05, momentum,
                  1e-4, true, nullptr);
    }
    for (int t = 0; t < count; ++t) {
      const int64_t n = multi[t].n;
      EXPECT_EQ(download(multi[t].param, n), download(single[t].param, n));
      if (momentum != 0.0) {
        EXPECT_EQ(download(multi[t].momentum, n),
                  download(single[t].momentum, n));
      }
    }
  }
}

// AdamW and SGD (Nesterov momentum, weight decay) over tensors long enough
// to be split across threads in chunks, with vector bodies and a scalar
// tail, against PyTorch's update rules written out in double: two steps,
// the gradients unscaled by a loss-scaling status. The bf16 copy holds
// each new parameter rounded as a conversion rounds it.
TEST_F(Kernels, OptimizerUpdatesMatchTheDefinition) {
  const int64_t n = 3 * 16384 + 37;
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.1,
               momentum = 0.9;
  std::vector<float> p0(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = std::sin(0.37f * float(i));
    g[i] = std::cos(0.11f * float(i)) * (i % 7 == 0 ? 1e-3f : 1.0f);
  }
  // The gradients as stored are twice the true ones; the status unscales.
  std::vector<float> g2(n);
  for (int64_t i = 0; i < n; ++i)
    g2[i] = 2.0f * g[i];
  float *status = upload<float>({0.5f, 0.0f});

  float *p = upload(p0), *grad = upload(g2);
  float *m = upload(std::vector<float>(n, 0.0f));
  float *v = upload(std::vector<float>(n, 0.0f));
  AdamwTensor t{n, p, grad, m, v};
  t.param16 = upload(std::vector<uint16_t>(n, 0), 1);
  t.storage = Storage16::Bf16;
  std::vector<double> pr(p0.begin(), p0.end()), mr(n, 0.0), vr(n, 0.0);
  for (int64_t step = 1; step <= 2; ++step) {
    ctx.optimizerStep = step;
    adamwUpdateMulti(ctx, &t, 1, lr, beta1, beta2, eps, wd, status);
    const double bc1 = 1.0 - std::pow(beta1, double(step)),
                 bc2 = 1.0 - std::pow(beta2, double(step));
    for (int64_t i = 0; i < n; ++i) {
      pr[i] *= 1.0 - lr * wd;
      mr[i] = beta1 * mr[i] + (1.0 - beta1) * g[i];
      vr[i] = beta2 * vr[i] + (1.0 - beta2) * double(g[i]) * g[i];
      pr[i] -= lr / bc1 * mr[i] / (std::sqrt(vr[i]) / std::sqrt(bc2) + eps);
    }
  }
  const std::vector<float> pGot = download(p, n);
  expectRelNear(pGot, pr, 1e-6, 1e-7);
  expectRelNear(download(m, n), mr, 1e-6, 1e-12);
  expectRelNear(download(v, n), vr, 1e-6, 1e-15);
  const std::vector<uint16_t> copy = download(t.param16, n + 1);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(copy[i], floatToBf16(pGot[i])) << "at " << i;
  EXPECT_EQ(copy[n], static_cast<uint16_t>(kSentinel));

  float *q = upload(p0), *gq = upload(g2);
  float *buf = upload(std::vector<float>(n, 0.0f));
  std::vector<double> qr(p0.begin(), p0.end()), br(n, 0.0);
  for (int64_t step = 1; step <= 2; ++step) {
    ctx.optimizerStep = step;
    sgdUpdate(ctx, n, q, gq, buf, lr, momentum, wd, true, status);
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + wd * qr[i];
      br[i] = step == 1 ? d : momentum * br[i] + d;
      qr[i] -= lr * (d + momentum * br[i]);
    }
  }
  expectRelNear(download(q, n), qr, 1e-6, 1e-7);
  expectRelNear(download(buf, n), br, 1e-6, 1e-7);
}

#ifdef MTC_RUNTIME_CUDA
// cuBLAS on 16-bit operands (tensor cores, float32 accumulation) against
// the exact products of the same 16-bit values summed in double.
TEST_F(Kernels, Gemm16MatchesWidenedOperands) {
  const int64_t m = 37, n = 29, k = 300, batch = 3;
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    auto narrow = [&](float v) {
      return storage == Storage16::Bf16 ? floatToBf16(v) : floatToHalf(v);
    };
    auto widen = [&](uint16_t h) {
      return storage == Storage16::Bf16 ? bf16ToFloat(h) : halfToFloat(h);
    };
    std::vector<uint16_t> a(batch * m * k), b(k * n);
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = narrow(std::sin(0.37f * float(i)));
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = narrow(std::cos(0.11f * float(i)));
    for (bool transB : {false, true}) {
      // B is [k, n], or [n, k] read transposed; shared by every batch
      // (stride 0) in the batched call.
      float *c = upload<float>(std::vector<float>(batch * m * n, 7.0f));
      float *c1 = upload<float>(std::vector<float>(m * n, 1.0f));
      const uint16_t *da = upload<uint16_t>(a), *db = upload<uint16_t>(b);
      int64_t ldb = transB ? k : n;
      gemm16StridedBatched(ctx, storage, false, transB, m, n, k, 1.0f, da, k,
                           m * k, db, ldb, 0, 0.0f, c, n, m * n, batch);
      gemm16(ctx, storage, false, transB, m, n, k, 0.5f, da, k, db, ldb, 2.0f,
             c1, n);
      std::vector<float> got = download(c, batch * m * n);
      std::vector<float> got1 = download(c1, m * n);
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = 0.0, magnitude = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              double term = double(widen(a[(bi * m + i) * k + p])) *
                            double(widen(b[transB ? j * k + p : p * n + j]));
              want += term;
              magnitude += std::abs(term);
            }
            // Float32 accumulation of k exact products, in any order:
            // within k * 2^-24 * sum |terms| (plus the final scaling).
            double tol = double(k) * std::ldexp(magnitude, -24) + 1e-6;
            EXPECT_NEAR(got[(bi * m + i) * n + j], want, tol);
            if (bi == 0) {
              EXPECT_NEAR(got1[i * n + j], 0.5 * want + 2.0, tol);
            }
          }
    }
  }
}
#endif

#ifdef MTC_RUNTIME_CUDA
// The epilogues on 16-bit operands: the bias added to float32 products and
// the sums of the 16-bit values, against double on the widened values.
TEST_F(Kernels, Gemm16Epilogues) {
  const int64_t m = 37, n = 29, k = 300;
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    std::vector<float> wa, wb, bias;
    std::vector<uint16_t> a, b;
    sinCosOperands16(storage, m, n, k, wa, wb, a, b, bias);
    const uint16_t *da = upload<uint16_t>(a), *db = upload<uint16_t>(b);
    float *c = upload<float>(std::vector<float>(m * n, 7.0f));
    gemm16Bias(ctx, storage, false, false, m, n, k, da, k, db, n,
               upload<float>(bias), c, n);
    GemmReference want =
        gemmReference(wa, wb, bias, false, false, m, n, k, false);
    // Float32 accumulation of k exact products of magnitude <= 1.
    float tol = float(k) * std::ldexp(float(k), -24) + 1e-5f;
    expectNear(download(c, m * n),
               std::vector<float>(want.c.begin(), want.c.end()), tol);
    for (bool sumA : {false, true}) {
      float *sums = upload<float>(std::vector<float>(sumA ? m : n, 7.0f));
      gemm16BiasGrad(ctx, storage, true, false, m, n, k, da, m, db, n, c, n,
                     sumA, sums);
      want = gemmReference(wa, wb, {}, true, false, m, n, k, sumA);
      expectNear(download(c, m * n),
                 std::vector<float>(want.c.begin(), want.c.end()), tol);
      expectNear(download(sums, want.sums.size()),
                 std::vector<float>(want.sums.begin(), want.sums.end()), tol);
      std::printf("gemm16BiasGrad (%s, %s): %s\n",
                  storage == Storage16::Bf16 ? "bf16" : "fp16",
                  sumA ? "BGRADB" : "BGRADA",
                  lastGemmUsedEpilogue(ctx) ? "cuBLASLt epilogue"
                                            : "fallback: GEMM + column sums");
    }
  }
}
#endif

#ifdef MTC_RUNTIME_CUDA
// gemm16 and gemm16Bias storing C in 16 bits: the float32 sums (plus the
// bias) rounded to the operands' format, against double on the widened
// values: within the float32 accumulation error plus the rounding (one
// rounding through the bias epilogue; the fallback rounds the bias first,
// then the sum).
TEST_F(Kernels, Gemm16StoresSixteenBitResults) {
  const int64_t m = 37, n = 29, k = 300;
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    auto widen = [&](uint16_t h) { return storedToFloat(h, bf16); };
    std::vector<float> wa, wb, bias;
    std::vector<uint16_t> a, b;
    sinCosOperands16(storage, m, n, k, wa, wb, a, b, bias);
    const uint16_t *da = upload<uint16_t>(a), *db = upload<uint16_t>(b);
    // Half a unit in the last place, relative, of the 16-bit format.
    const double halfUlp = std::ldexp(1.0, bf16 ? -8 : -11);
    const double accumulation = double(k) * std::ldexp(double(k), -24);
    for (bool withBias : {false, true}) {
      uint16_t *c = upload<uint16_t>(std::vector<uint16_t>(m * n, 0x7777));
      if (withBias)
        gemm16Bias(ctx, storage, false, false, m, n, k, da, k, db, n,
                   upload<float>(bias), c, n);
      else
        gemm16(ctx, storage, false, false, m, n, k, 1.0f, da, k, db, n, 0.0f,
               c, n);
      EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
      GemmReference want = gemmReference(
          wa, wb, withBias ? bias : std::vector<float>(), false, false, m, n,
          k, false);
      std::vector<uint16_t> got = download(c, m * n);
      for (int64_t i = 0; i < m * n; ++i) {
        const double w = want.c[i];
        const double biasRounding =
            withBias ? halfUlp * std::abs(bias[i % n]) : 0.0;
        const double tol = accumulation + biasRounding +
                           halfUlp * (std::abs(w) + accumulation +
                                      biasRounding) +
                           1e-6;
        EXPECT_NEAR(widen(got[i]), w, tol) << "element " << i;
      }
      if (withBias)
        std::printf("gemm16Bias to 16 bits (%s): %s\n",
                    bf16 ? "bf16" : "fp16",
                    lastGemmUsedEpilogue(ctx) ? "cuBLASLt epilogue"
                                              : "fallback: bias, then GEMM");
    }
    // K = 300 is no multiple of 8: gemm16 sums the first 296 products and
    // the last 4 in float32 in the library workspace before rounding. Here
    // it holds 5 rows (8 chunks of the 37), and C's rows are 32 apart;
    // the padding stays as it was.
    const size_t libraryWorkspace = ctx.ltWorkspaceBytes;
    ctx.ltWorkspaceBytes = 4 * n * 5;
    const int64_t ldc = 32;
    uint16_t *c = upload<uint16_t>(std::vector<uint16_t>(m * ldc, 0x7777));
    gemm16(ctx, storage, false, false, m, n, k, 1.0f, da, k, db, n, 0.0f, c,
           ldc);
    ctx.ltWorkspaceBytes = libraryWorkspace;
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    GemmReference want =
        gemmReference(wa, wb, {}, false, false, m, n, k, false);
    std::vector<uint16_t> got = download(c, m * ldc);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        if (j >= n) {
          EXPECT_EQ(got[i * ldc + j], 0x7777) << "padding " << i << ", " << j;
          continue;
        }
        const double w = want.c[i * n + j];
        EXPECT_NEAR(widen(got[i * ldc + j]), w,
                    accumulation + halfUlp * (std::abs(w) + accumulation) +
                        1e-6)
            << "chunked row " << i << ", column " << j;
      }
  }
}
#endif

/// GELU's tanh form and its derivative, in double, from their definition.
constexpr double kPi = 3.14159265358979323846;
double geluTanh(double x) {
  const double c = std::sqrt(2.0 / kPi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double geluTanhGrad(double x) {
  const double c = std::sqrt(2.0 / kPi);
  double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

// The GELU epilogues' elementwise halves against the definition, float32
// in place and 16-bit: y = GELU(acc) with acc kept, dx = acc * GELU'(pre).
TEST_F(Kernels, GeluEpilogues) {
  const int64_t count = 1000;
  std::vector<float> acc(count), pre(count);
  for (int64_t i = 0; i < count; ++i) {
    acc[i] = 12.0f * std::sin(0.37f * float(i)); // GELU's whole range
    pre[i] = 5.0f * std::cos(0.11f * float(i));
  }
  float *y = upload<float>(acc);
  float *saved = upload<float>(std::vector<float>(count, 7.0f));
  geluEpilogue(ctx, Storage16::Bf16, count, y, y, saved);
  float *dx = upload<float>(acc);
  geluGradEpilogue(ctx, Storage16::Bf16, count, dx, upload<float>(pre), dx);
  std::vector<float> gotY = download(y, count),
                     gotSaved = download(saved, count),
                     gotDx = download(dx, count);
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_EQ(gotSaved[i], acc[i]);
    EXPECT_NEAR(gotY[i], geluTanh(acc[i]), 1e-6 * (1.0 + std::abs(acc[i])));
    double want = double(acc[i]) * geluTanhGrad(pre[i]);
    EXPECT_NEAR(gotDx[i], want, 1e-5 * (1.0 + std::abs(want)));
  }
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    const double halfUlp = std::ldexp(1.0, bf16 ? -8 : -11);
    std::vector<uint16_t> pre16(count);
    for (int64_t i = 0; i < count; ++i)
      pre16[i] = bf16 ? floatToBf16(pre[i]) : floatToHalf(pre[i]);
    uint16_t *y16 = upload<uint16_t>(std::vector<uint16_t>(count, 0x7777));
    uint16_t *saved16 = upload<uint16_t>(std::vector<uint16_t>(count, 0x7777));
    geluEpilogue(ctx, storage, count, upload<float>(acc), y16, saved16);
    uint16_t *dx16 = upload<uint16_t>(std::vector<uint16_t>(count, 0x7777));
    geluGradEpilogue(ctx, storage, count, upload<float>(acc),
                     upload<uint16_t>(pre16), dx16);
    std::vector<uint16_t> gy = download(y16, count),
                          gs = download(saved16, count),
                          gd = download(dx16, count);
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(gs[i], bf16 ? floatToBf16(acc[i]) : floatToHalf(acc[i]));
      double want = geluTanh(acc[i]);
      EXPECT_NEAR(storedToFloat(gy[i], bf16), want,
                  halfUlp * std::abs(want) + 1e-6 * (1.0 + std::abs(want)));
      want = double(acc[i]) * geluTanhGrad(storedToFloat(pre16[i], bf16));
      EXPECT_NEAR(storedToFloat(gd[i], bf16), want,
                  halfUlp * std::abs(want) + 1e-5 * (1.0 + std::abs(want)));
    }
  }
}

#ifdef MTC_RUNTIME_CUDA
// gemmGelu (a GEMM into float32 sums and the GELU kernel, or with
// ctx.ltGelu cuBLASLt's GELU_AUX(_BIAS) epilogues) and gemmGeluGrad
// (cuBLASLt's DGELU epilogue, or the GEMM and geluGradEpilogue where N is
// no multiple of 8) against double on the stored operands: float32 and
// both 16-bit formats. A 16-bit result is within the float32 accumulation
// error and one rounding of the definition on every path. 16-bit sums go
// through the library workspace rows at a time: made to hold 5 rows of
// them here (2 with a bias, whose cuBLASLt epilogue gets the workspace's
// last part), the 37 rows take 8 GEMMs, the last of 2 rows (19, the last
// of 1 row).
TEST_F(Kernels, GemmGeluEpilogues) {
  const int64_t m = 37, k = 300;
  const size_t libraryWorkspace = ctx.ltWorkspaceBytes;
  for (int run = 0; run < 4; ++run) {
    const bool ltGelu = run >= 2;
    const int64_t n = run % 2 ? 29 : 32;
    ctx.ltGelu = ltGelu;
    ctx.ltWorkspaceBytes = n % 8 ? 4 * n * 5 : libraryWorkspace;
    for (int format = 0; format < 3; ++format) {
      const bool low = format > 0, bf16 = format != 2;
      Storage16 storage = format == 2 ? Storage16::F16 : Storage16::Bf16;
      std::vector<float> wa, wb, bias;
      std::vector<uint16_t> a16, b16;
      sinCosOperands16(storage, m, n, k, wa, wb, a16, b16, bias);
      if (!low)
        sinCosOperands(m, n, k, wa, wb);
      // Rows of A scaled down so that GELU sees its curved part.
      for (int64_t i = 0; i < m * k; ++i)
        wa[i] *= 0.05f;
      for (int64_t i = 0; i < m * k; ++i)
        a16[i] = bf16 ? floatToBf16(wa[i]) : floatToHalf(wa[i]);
      if (low)
        for (int64_t i = 0; i < m * k; ++i)
          wa[i] = storedToFloat(a16[i], bf16);
      const double halfUlp = low ? std::ldexp(1.0, bf16 ? -8 : -11) : 0.0;
      // The float32 sums' error bound (k + 1 additions of the products'
      // magnitudes), with and without the bias. A GPU's tensor cores
      // multiply 16-bit operands and add the products in float32 that is
      // truncated, not rounded to nearest (Fasi, Higham, Mikaitis and
      // Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021): a
      // unit of 2^-23 an addition, not 2^-24. An H200 exceeds the rounded
      // bound on sums that cancel (an error of 1.27e-4 on -8.2e-4, where
      // rounding allows 1.15e-4).
      std::vector<double> sumError(m * n), biasedSumError(m * n);
      const double unit = std::ldexp(1.0, low ? -23 : -24);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double magnitude = 0.0;
          for (int64_t p = 0; p < k; ++p)
            magnitude += std::abs(double(wa[i * k + p]) * wb[p * n + j]);
          const double gamma = double(k + 2) * unit;
          sumError[i * n + j] = gamma * magnitude;
          biasedSumError[i * n + j] =
              gamma * (magnitude + std::abs(double(bias[j])));
        }
      // One rounding of the result (a half unit in the last place of the
      // value, no more: two roundings exceed it), the sums' error through
      // a slope of at most `slope`, and float32's tanh.
      auto check = [&](const std::vector<double> &want,
                       const std::vector<float> &got, const char *what,
                       const std::vector<double> &error, double slope) {
        for (int64_t i = 0; i < m * n; ++i)
          EXPECT_NEAR(got[i], want[i],
                      halfUlp * std::abs(want[i]) + slope * error[i] +
                          1e-6 * (1.0 + std::abs(want[i])))
              << what << " element " << i << " n " << n << " format " << format;
      };
      auto widened = [&](const void *p) {
        std::vector<float> out(m * n);
        if (low) {
          std::vector<uint16_t> h =
              download(static_cast<const uint16_t *>(p), m * n);
          for (int64_t i = 0; i < m * n; ++i)
            out[i] = storedToFloat(h[i], bf16);
        } else {
          out = download(static_cast<const float *>(p), m * n);
        }
        return out;
      };
      auto buffer = [&]() -> void * {
        if (low)
          return upload<uint16_t>(std::vector<uint16_t>(m * n, 0x7777));
        return upload<float>(std::vector<float>(m * n, 7.0f));
      };
      auto in = [&](const void *p) {
        return low ? StoredIn(static_cast<const uint16_t *>(p))
                   : StoredIn(static_cast<const float *>(p));
      };
      auto out = [&](void *p) {
        return low ? StoredOut(static_cast<uint16_t *>(p))
                   : StoredOut(static_cast<float *>(p));
      };
      const void *da = low ? static_cast<const void *>(upload<uint16_t>(a16))
                           : upload<float>(wa);
      const void *db = low ? static_cast<const void *>(upload<uint16_t>(b16))
                           : upload<float>(wb);
      for (bool withBias : {false, true}) {
        void *c = buffer(), *pre = buffer();
        gemmGelu(ctx, storage, false, m, n, k, in(da), k, in(db), n,
                 withBias ? upload<float>(bias) : nullptr, out(c), out(pre));
        EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
        bool epilogue = lastGemmUsedEpilogue(ctx);
        GemmReference sums =
            gemmReference(wa, wb, withBias ? bias : std::vector<float>(), false,
                          false, m, n, k, false);
        std::vector<double> want(m * n);
        for (int64_t i = 0; i < m * n; ++i)
          want[i] = geluTanh(sums.c[i]);
        const std::vector<double> &error = withBias ? biasedSumError : sumError;
        check(sums.c, widened(pre), "pre", error, 1.0);
        if (n % 8 || !ltGelu) {
          EXPECT_FALSE(epilogue);
        }
        check(want, widened(c), "gelu", error, 1.2);
        std::printf("gemmGelu (n %lld, %s, %s): %s\n", (long long)n,
                    low ? (bf16 ? "bf16" : "fp16") : "f32",
                    withBias ? "bias" : "no bias",
                    epilogue ? "cuBLASLt epilogue" : "GEMM + GELU kernel");
        // The gradient GEMM reads the stored GELU input.
        std::vector<float> storedPre = widened(pre);
        void *dx = buffer();
        gemmGeluGrad(ctx, storage, false, m, n, k, in(da), k, in(db), n,
                     in(pre), out(dx));
        EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
        epilogue = lastGemmUsedEpilogue(ctx);
        sums = gemmReference(wa, wb, {}, false, false, m, n, k, false);
        for (int64_t i = 0; i < m * n; ++i)
          want[i] = sums.c[i] * geluTanhGrad(storedPre[i]);
        if (n % 8) {
          EXPECT_FALSE(epilogue);
        }
        check(want, widened(dx), "dgelu", sumError, 1.2);
      }
    }
  }
  ctx.ltWorkspaceBytes = libraryWorkspace;
  ctx.ltGelu = false;
}
#endif

TEST_F(Kernels, GradCheckFindsInfAndNaN) {
  float *scale = upload<float>({1024.0f});
  float *status = upload<float>({-1.0f, -1.0f});
  std::vector<float> big(100000, 3.0f);
  float *g = upload<float>(big);
  gradCheckBegin(ctx, scale, status);
  gradCheck(ctx, static_cast<int64_t>(big.size()), g, status);
  expectNear(download(status, 2), {1.0f / 1024.0f, 0.0f}, 0.0f);
  for (float bad : {std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    big[77777] = bad;
    float *h = upload<float>(big);
    gradCheckBegin(ctx, scale, status);
    gradCheck(ctx, static_cast<int64_t>(big.size()), g, status);
    gradCheck(ctx, static_cast<int64_t>(big.size()), h, status);
    gradCheck(ctx, static_cast<int64_t>(big.size()), g, status);
    expectNear(download(status, 2), {1.0f / 1024.0f, 1.0f}, 0.0f);
  }
}

TEST_F(Kernels, UpdatesUnscaleOrSkip) {
  // A clean status unscales: SGD with g * 2^-4.
  float *p = upload<float>({1.0f, 2.0f});
  float *g = upload<float>({16.0f, -32.0f});
  float *clean = upload<float>({0.0625f, 0.0f});
  ctx.optimizerStep = 1;
  sgdUpdate(ctx, 2, p, g, nullptr, 0.5, 0.0, 0.0, false, clean);
  expectNear(download(p, 2), {0.5f, 3.0f}, 0.0f);
  // An overflow status leaves parameter and state untouched.
  float *skip = upload<float>({0.0625f, 1.0f});
  float *buf = upload<float>({7.0f, 8.0f});
  sgdUpdate(ctx, 2, p, g, buf, 0.5, 0.9, 0.1, true, skip);
  expectNear(download(p, 2), {0.5f, 3.0f}, 0.0f);
  expectNear(download(buf, 2), {7.0f, 8.0f}, 0.0f);
  float *m = upload<float>({0.25f, 0.5f});
  float *v = upload<float>({0.125f, 1.0f});
  adamwUpdate(ctx, 2, p, g, m, v, 0.01, 0.9, 0.999, 1e-8, 0.1, skip);
  expectNear(download(p, 2), {0.5f, 3.0f}, 0.0f);
  expectNear(download(m, 2), {0.25f, 0.5f}, 0.0f);
  expectNear(download(v, 2), {0.125f, 1.0f}, 0.0f);
}

} // namespace
