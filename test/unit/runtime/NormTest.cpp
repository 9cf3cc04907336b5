//===- NormTest.cpp - Batch and layer normalization kernels ---------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Hand-checkable cases (inputs whose mean and variance are small integers),
// then random inputs against a plain double-precision transcription of the
// formulas in Kernels.h. The latter is what ties the CUDA library to the
// CPU one: both must land within 1e-5 of the same reference.
//
//===----------------------------------------------------------------------===//

#include "KernelTestFixture.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace mtc::rt;
using mtc::rt::unittest::expectNear;
using mtc::rt::unittest::expectRelNear;
using mtc::rt::unittest::Kernels;

namespace {

std::vector<float> randomVector(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

TEST_F(Kernels, BatchNormTrainHandChecked) {
  // [n=2, c=1, inner=2] = {1, 3, 1, 3}: mean 2, biased variance 1, so with
  // eps 0 xhat = {-1, 1, -1, 1}; the unbiased variance is 4/3.
  float *x = upload<float>({1, 3, 1, 3});
  float *scale = upload<float>({2});
  float *bias = upload<float>({0.5f});
  float *runningMean = upload<float>({0});
  float *runningVar = upload<float>({1});
  float *y = upload<float>(std::vector<float>(4, 9.0f), 2);
  float *savedMean = upload<float>({9});
  float *savedInvstd = upload<float>({9});
  batchNormTrainForward(ctx, 2, 1, 2, x, scale, bias, runningMean, runningVar,
                        0.0f, 0.9f, y, savedMean, savedInvstd);
  expectNear(download(y, 6), {-1.5f, 2.5f, -1.5f, 2.5f, kSentinel, kSentinel});
  expectNear(download(savedMean, 1), {2});
  expectNear(download(savedInvstd, 1), {1});
  // ONNX momentum: running = 0.9 running + 0.1 batch, with the unbiased
  // batch variance.
  expectNear(download(runningMean, 1), {0.2f});
  expectNear(download(runningVar, 1), {0.9f + 0.1f * 4.0f / 3.0f});
  // A second step moves them again by the same rule.
  batchNormTrainForward(ctx, 2, 1, 2, x, scale, bias, runningMean, runningVar,
                        0.0f, 0.9f, y, savedMean, savedInvstd);
  expectNear(download(runningMean, 1), {0.9f * 0.2f + 0.2f});
  expectNear(download(runningVar, 1),
             {0.9f * (0.9f + 0.4f / 3.0f) + 0.4f / 3.0f});

  // dy = {1, 0, 0, 0}: dbias = 1, dscale = sum(dy * xhat) = -1, and
  // dx = scale * invstd / m * (m dy - dbias - xhat dscale)
  //    = 0.5 * (4 dy - 1 + xhat) = {1, 0, -1, 0}.
  float *dy = upload<float>({1, 0, 0, 0});
  float *dx = upload<float>(std::vector<float>(4, 9.0f), 2);
  float *dscale = upload<float>({9});
  float *dbias = upload<float>({9});
  batchNormTrainBackward(ctx, 2, 1, 2, dy, x, scale, savedMean, savedInvstd, dx,
                         dscale, dbias);
  expectNear(download(dx, 6), {1, 0, -1, 0, kSentinel, kSentinel});
  expectNear(download(dscale, 1), {-1});
  expectNear(download(dbias, 1), {1});
}

TEST_F(Kernels, BatchNormChannelsAndInference) {
  // [n=2, c=2, inner=1]: channel 0 holds {1, 3} (mean 2, variance 1),
  // channel 1 holds {10, 30} (mean 20, variance 100).
  float *x = upload<float>({1, 10, 3, 30});
  float *scale = upload<float>({1, 1});
  float *bias = upload<float>({0, 0});
  float *runningMean = upload<float>({5, 5});
  float *runningVar = upload<float>({5, 5});
  float *y = upload<float>(std::vector<float>(4, 9.0f));
  float *savedMean = upload<float>({9, 9});
  float *savedInvstd = upload<float>({9, 9});
  // Momentum 0 replaces the running statistics by the batch's; with m = 2
  // the unbiased variance is twice the biased one.
  batchNormTrainForward(ctx, 2, 2, 1, x, scale, bias, runningMean, runningVar,
                        0.0f, 0.0f, y, savedMean, savedInvstd);
  expectNear(download(y, 4), {-1, -1, 1, 1});
  expectNear(download(savedMean, 2), {2, 20});
  expectNear(download(savedInvstd, 2), {1, 0.1f});
  expectNear(download(runningMean, 2), {2, 20});
  expectNear(download(runningVar, 2), {2, 200}, 1e-4f);

  // Inference with the batch's own statistics gives the same output.
  float *mean = upload<float>({2, 20});
  float *var = upload<float>({1, 100});
  float *y2 = upload<float>(std::vector<float>(4, 9.0f));
  batchNormInferenceForward(ctx, 2, 2, 1, x, scale, bias, mean, var, 0.0f, y2);
  expectNear(download(y2, 4), {-1, -1, 1, 1});
  // eps enters under the square root: channel 0 with variance 2 and eps 2
  // has invstd 1/2.
  batchNormInferenceForward(ctx, 2, 2, 1, x, scale, bias, mean, mean, 2.0f, y2);
  expectNear(download(y2, 4), {-0.5f, -10.0f / std::sqrt(22.0f), 0.5f,
                               10.0f / std::sqrt(22.0f)});
}

TEST_F(Kernels, LayerNormHandChecked) {
  // Rows {1, 3, 1, 3} (mean 2, variance 1) and {0, 0, 4, 4} (mean 2,
  // variance 4, invstd 1/2): xhat = {-1, 1, -1, 1} and {-1, -1, 1, 1}.
  float *x = upload<float>({1, 3, 1, 3, 0, 0, 4, 4});
  float *scale = upload<float>({2, 3, 4, 5});
  float *bias = upload<float>({0.5f, 0.5f, 0.5f, 0.5f});
  float *y = upload<float>(std::vector<float>(8, 9.0f), 2);
  float *mean = upload<float>({9, 9});
  float *invstd = upload<float>({9, 9});
  layerNormForward(ctx, 2, 4, x, scale, bias, 0.0f, y, mean, invstd);
  expectNear(download(y, 10), {-1.5f, 3.5f, -3.5f, 5.5f, -1.5f, -2.5f, 4.5f,
                               5.5f, kSentinel, kSentinel});
  expectNear(download(mean, 2), {2, 2});
  expectNear(download(invstd, 2), {1, 0.5f});

  // dy = {1, 0, 0, 0} in each row, so g = dy * scale = {2, 0, 0, 0} and
  // dx = invstd / 4 * (4 g - sum(g) - xhat sum(g xhat)):
  // row 0: 1/4 * ({8, 0, 0, 0} - 2 + 2 xhat) = {1, 0, -1, 0};
  // row 1: 1/8 * ({8, 0, 0, 0} - 2 + 2 xhat) = {0.5, -0.5, 0, 0}.
  // dscale = sum over rows of dy * xhat, dbias = sum of dy.
  float *dy = upload<float>({1, 0, 0, 0, 1, 0, 0, 0});
  float *dx = upload<float>(std::vector<float>(8, 9.0f));
  float *dscale = upload<float>(std::vector<float>(4, 9.0f));
  float *dbias = upload<float>(std::vector<float>(4, 9.0f));
  layerNormBackward(ctx, 2, 4, dy, x, scale, mean, invstd, dx, dscale, dbias);
  expectNear(download(dx, 8), {1, 0, -1, 0, 0.5f, -0.5f, 0, 0});
  expectNear(download(dscale, 4), {-2, 0, 0, 0});
  expectNear(download(dbias, 4), {2, 0, 0, 0});
  // A residual connection's other gradient added as dx is written, also
  // in place of it.
  float *acc = upload<float>({10, 20, 30, 40, 50, 60, 70, 80});
  layerNormBackward(ctx, 2, 4, dy, x, scale, mean, invstd, dx, dscale, dbias,
                    acc);
  expectNear(download(dx, 8), {11, 20, 29, 40, 50.5f, 59.5f, 70, 80});
  layerNormBackward(ctx, 2, 4, dy, x, scale, mean, invstd, acc, dscale, dbias,
                    acc);
  expectNear(download(acc, 8), {11, 20, 29, 40, 50.5f, 59.5f, 70, 80});

  // Without bias, and without a bias gradient.
  layerNormForward(ctx, 2, 4, x, scale, nullptr, 0.0f, y, mean, invstd);
  expectNear(download(y, 4), {-2, 3, -4, 5});
  fill(ctx, dscale, 4, 9.0f);
  layerNormBackward(ctx, 2, 4, dy, x, scale, mean, invstd, dx, dscale, nullptr);
  expectNear(download(dscale, 4), {-2, 0, 0, 0});
}

/// BatchNorm training forward and backward in double, straight from the
/// formulas in Kernels.h.
struct BatchNormReference {
  std::vector<double> y, mean, invstd, runningMean, runningVar;
  std::vector<double> dx, dscale, dbias;
};

BatchNormReference batchNormReference(
    int64_t n, int64_t c, int64_t inner, const std::vector<float> &x,
    const std::vector<float> &scale, const std::vector<float> &bias,
    const std::vector<float> &runningMean, const std::vector<float> &runningVar,
    const std::vector<float> &dy, double eps, double momentum) {
  BatchNormReference r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  const double m = static_cast<double>(n * inner);
  auto at = [&](int64_t img, int64_t ch, int64_t j) {
    return (img * c + ch) * inner + j;
  };
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t img = 0; img < n; ++img)
      for (int64_t j = 0; j < inner; ++j)
        sum += x[at(img, ch, j)];
    double mean = sum / m;
    for (int64_t img = 0; img < n; ++img)
      for (int64_t j = 0; j < inner; ++j)
        sq += (x[at(img, ch, j)] - mean) * (x[at(img, ch, j)] - mean);
    double invstd = 1.0 / std::sqrt(sq / m + eps);
    r.mean.push_back(mean);
    r.invstd.push_back(invstd);
    r.runningMean.push_back(momentum * runningMean[ch] + (1 - momentum) * mean);
    r.runningVar.push_back(momentum * runningVar[ch] +
                           (1 - momentum) * sq / (m - 1));
    double dbias = 0, dscale = 0;
    for (int64_t img = 0; img < n; ++img)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t i = at(img, ch, j);
        double xhat = (x[i] - mean) * invstd;
        r.y[i] = xhat * scale[ch] + bias[ch];
        dbias += dy[i];
        dscale += dy[i] * xhat;
      }
    r.dbias.push_back(dbias);
    r.dscale.push_back(dscale);
    for (int64_t img = 0; img < n; ++img)
      for (int64_t j = 0; j < inner; ++j) {
        int64_t i = at(img, ch, j);
        double xhat = (x[i] - mean) * invstd;
        r.dx[i] = scale[ch] * invstd / m * (m * dy[i] - dbias - xhat * dscale);
      }
  }
  return r;
}

TEST_F(Kernels, BatchNormMatchesReference) {
  // inner below and above a CUDA block (two ways of walking a channel); an
  // offset mean checks that the variance does not cancel. The last three
  // have small rows, which the CPU takes in blocks of channels (150: two
  // full blocks and a part) and in runs of rows that start mid-image; rows
  // of one element (1x1 maps, BatchNorm1d) as vector loops over channels,
  // in runs that also end mid-image (5000 channels). CUDA splits the
  // reductions of few channels into parts whose sums a second kernel adds
  // (3 x 300 and 64 x 49: parts of flat runs, 32 x 600: of whole images).
  // CUDA moves vectors of 8 elements where inner allows (600, 4104), of 4
  // (300, 2052), else single elements; 4104 and 2052 are 513 vectors, a
  // reduction block's walk of an image (512 threads) and one vector more.
  const int64_t shapes[][3] = {
      {4, 3, 37},    {3, 5, 300}, {64, 2, 1},   {8, 150, 3},  {50, 100, 1},
      {16, 5000, 1}, {64, 4, 49}, {32, 2, 600}, {2, 3, 4104}, {3, 2, 2052}};
  unsigned seed = 1;
  for (const auto &shape : shapes) {
    const int64_t n = shape[0], c = shape[1], inner = shape[2];
    const size_t size = n * c * inner;
    SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c) +
                 " inner=" + std::to_string(inner));
    std::vector<float> xv = randomVector(size, 2.0f, 6.0f, seed++);
    std::vector<float> dyv = randomVector(size, -1.0f, 1.0f, seed++);
    std::vector<float> scalev = randomVector(c, 0.5f, 1.5f, seed++);
    std::vector<float> biasv = randomVector(c, -1.0f, 1.0f, seed++);
    std::vector<float> rmv = randomVector(c, -1.0f, 1.0f, seed++);
    std::vector<float> rvv = randomVector(c, 0.5f, 1.5f, seed++);
    const float eps = 1e-5f, momentum = 0.9f;
    BatchNormReference ref = batchNormReference(n, c, inner, xv, scalev, biasv,
                                                rmv, rvv, dyv, eps, momentum);

    float *x = upload(xv), *dy = upload(dyv);
    float *scale = upload(scalev), *bias = upload(biasv);
    float *runningMean = upload(rmv), *runningVar = upload(rvv);
    float *y = upload(std::vector<float>(size));
    float *savedMean = upload(std::vector<float>(c));
    float *savedInvstd = upload(std::vector<float>(c));
    batchNormTrainForward(ctx, n, c, inner, x, scale, bias, runningMean,
                          runningVar, eps, momentum, y, savedMean, savedInvstd);
    expectRelNear(download(y, size), ref.y, 1e-5, 2e-6);
    expectRelNear(download(savedMean, c), ref.mean, 1e-5, 1e-6);
    expectRelNear(download(savedInvstd, c), ref.invstd, 1e-5, 0);
    expectRelNear(download(runningMean, c), ref.runningMean, 1e-5, 1e-6);
    expectRelNear(download(runningVar, c), ref.runningVar, 1e-5, 0);

    float *dx = upload(std::vector<float>(size));
    float *dscale = upload(std::vector<float>(c));
    float *dbias = upload(std::vector<float>(c));
    batchNormTrainBackward(ctx, n, c, inner, dy, x, scale, savedMean,
                           savedInvstd, dx, dscale, dbias);
    expectRelNear(download(dx, size), ref.dx, 1e-5, 2e-6);
    expectRelNear(download(dscale, c), ref.dscale, 1e-5, 1e-5);
    expectRelNear(download(dbias, c), ref.dbias, 1e-5, 1e-5);

    // Inference with the batch statistics reproduces the training output.
    std::vector<float> meanv(c), varv(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      meanv[ch] = static_cast<float>(ref.mean[ch]);
      varv[ch] =
          static_cast<float>(1.0 / (ref.invstd[ch] * ref.invstd[ch]) - eps);
    }
    float *y2 = upload(std::vector<float>(size));
    batchNormInferenceForward(ctx, n, c, inner, x, scale, bias, upload(meanv),
                              upload(varv), eps, y2);
    expectRelNear(download(y2, size), ref.y, 1e-5, 2e-6);
  }
}

TEST_F(Kernels, BatchNormStatisticsOfOffsetChannels) {
  // Channels far from zero against their spread (about 3e4 +- 0.02: a
  // mean 2.6e6 standard deviations away). The variance from E[x^2] -
  // mean^2 would cancel (in double, 3e-5 to 4e-4 of it off here); the CPU's
  // two passes and CUDA's one pass of sums shifted by a channel element
  // keep the reference's statistics. CUDA splits the first shape's
  // channels into parts, the second's not.
  const int64_t shapes[][3] = {{64, 4, 49}, {4, 600, 37}};
  unsigned seed = 300;
  for (const auto &shape : shapes) {
    const int64_t n = shape[0], c = shape[1], inner = shape[2];
    const size_t size = n * c * inner;
    SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c) +
                 " inner=" + std::to_string(inner));
    std::vector<float> xv = randomVector(size, -0.02f, 0.02f, seed++);
    for (size_t i = 0; i < size; ++i)
      xv[i] += 30000.0f + float(i / inner % c);
    std::vector<float> ones(c, 1.0f), zeros(c, 0.0f);
    BatchNormReference ref =
        batchNormReference(n, c, inner, xv, ones, zeros, zeros, ones,
                           std::vector<float>(size, 0.0f), 1e-5, 0.9);
    float *runningMean = upload(zeros), *runningVar = upload(ones);
    float *savedMean = upload(std::vector<float>(c));
    float *savedInvstd = upload(std::vector<float>(c));
    batchNormTrainForward(ctx, n, c, inner, upload(xv), upload(ones),
                          upload(zeros), runningMean, runningVar, 1e-5f, 0.9f,
                          upload(std::vector<float>(size)), savedMean,
                          savedInvstd);
    expectRelNear(download(savedMean, c), ref.mean, 1e-7, 0);
    expectRelNear(download(savedInvstd, c), ref.invstd, 1e-5, 0);
    expectRelNear(download(runningVar, c), ref.runningVar, 1e-5, 0);
  }
}

TEST_F(Kernels, BatchNormOfTensorsOffTheVectorAlignment) {
  // Rows of 4104 elements, which CUDA moves as vectors of 8 when every
  // tensor is aligned to one, here with x, dy and then y and dx an element
  // off it: the kernels fall back to single elements and still match the
  // reference.
  const int64_t n = 2, c = 3, inner = 4104, size = n * c * inner;
  std::vector<float> xv = randomVector(size, 2.0f, 6.0f, 400);
  std::vector<float> dyv = randomVector(size, -1.0f, 1.0f, 401);
  std::vector<float> scalev = randomVector(c, 0.5f, 1.5f, 402);
  std::vector<float> biasv = randomVector(c, -1.0f, 1.0f, 403);
  std::vector<float> zeros(c, 0.0f), ones(c, 1.0f);
  BatchNormReference ref = batchNormReference(n, c, inner, xv, scalev, biasv,
                                              zeros, ones, dyv, 1e-5, 0.9);
  auto offset = [&](const std::vector<float> &v) {
    std::vector<float> shifted(v.size() + 1, 0.0f);
    std::copy(v.begin(), v.end(), shifted.begin() + 1);
    return upload(shifted) + 1;
  };
  for (int misaligned = 0; misaligned < 2; ++misaligned) {
    SCOPED_TRACE(misaligned ? "y and dx off" : "x and dy off");
    float *x = misaligned ? upload(xv) : offset(xv);
    float *dy = misaligned ? upload(dyv) : offset(dyv);
    std::vector<float> zerosOut(size, 0.0f);
    float *y = misaligned ? offset(zerosOut) : upload(zerosOut);
    float *dx = misaligned ? offset(zerosOut) : upload(zerosOut);
    float *mean = upload(std::vector<float>(c)),
          *inv = upload(std::vector<float>(c));
    float *scale = upload(scalev), *bias = upload(biasv);
    batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr, nullptr,
                          1e-5f, 0.9f, y, mean, inv);
    expectRelNear(download(y, size), ref.y, 1e-5, 2e-6);
    expectRelNear(download(mean, c), ref.mean, 1e-5, 1e-6);
    float *ds = upload(std::vector<float>(c)),
          *db = upload(std::vector<float>(c));
    batchNormTrainBackward(ctx, n, c, inner, dy, x, scale, mean, inv, dx, ds,
                           db);
    expectRelNear(download(dx, size), ref.dx, 1e-5, 2e-6);
    expectRelNear(download(ds, c), ref.dscale, 1e-5, 1e-5);
    expectRelNear(download(db, c), ref.dbias, 1e-5, 1e-5);
  }
}

/// A layer norm backward by its definition in double: dx, dscale and dbias
/// of [outer, dim] rows x with gradient dy, given each row's mean and
/// invstd.
struct LayerNormGrads {
  std::vector<double> dx, dscale, dbias;
};
static LayerNormGrads layerNormBackwardInDouble(
    int64_t outer, int64_t dim, const std::vector<float> &x,
    const std::vector<float> &dy, const std::vector<float> &scale,
    const std::vector<double> &mean, const std::vector<double> &invstd) {
  LayerNormGrads g{std::vector<double>(outer * dim),
                   std::vector<double>(dim, 0.0),
                   std::vector<double>(dim, 0.0)};
  for (int64_t r = 0; r < outer; ++r) {
    double sumG = 0, sumGXhat = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t i = r * dim + j;
      const double xhat = (x[i] - mean[r]) * invstd[r];
      sumG += double(dy[i]) * scale[j];
      sumGXhat += double(dy[i]) * scale[j] * xhat;
      g.dscale[j] += dy[i] * xhat;
      g.dbias[j] += dy[i];
    }
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t i = r * dim + j;
      const double xhat = (x[i] - mean[r]) * invstd[r];
      g.dx[i] = invstd[r] / dim *
                (dim * double(dy[i]) * scale[j] - sumG - xhat * sumGXhat);
    }
  }
  return g;
}

TEST_F(Kernels, LayerNormMatchesReference) {
  // CUDA keeps a row in registers when its length is a multiple of 4 up to
  // 4096 (768: one vector of 4 a thread; 4096: two), and reads it again in
  // each pass otherwise (777, 10, 1, 4100, 42). Rows of one vector a thread
  // form the column sums (dscale, dbias) in the same pass as dx, each block
  // over the rows it walks (its grid: the blocks the GPU holds at once, in
  // the emulation 132 SMs x 8 blocks of 256 threads for 768 columns, x 32
  // blocks of 32 threads for 64 or 96): {1500, 768} and {4500, 64} give
  // some blocks two rows. The blocks' sums are added by blocks of 8
  // columns: {1300, 36} ends in half a block. Other rows sum the columns in
  // a kernel of their own, which splits many rows of few columns ({701,
  // 42}) into chunks whose sums are added afterwards.
  const int64_t shapes[][2] = {{5, 777},    {33, 10},   {3, 1},    {2000, 96},
                               {701, 42},   {6, 768},   {3, 4096}, {2, 4100},
                               {1500, 768}, {4500, 64}, {1300, 36}};
  unsigned seed = 100;
  for (const auto &shape : shapes) {
    const int64_t outer = shape[0], dim = shape[1];
    const size_t size = outer * dim;
    SCOPED_TRACE("outer=" + std::to_string(outer) +
                 " dim=" + std::to_string(dim));
    std::vector<float> xv = randomVector(size, -3.0f, 5.0f, seed++);
    std::vector<float> dyv = randomVector(size, -1.0f, 1.0f, seed++);
    std::vector<float> scalev = randomVector(dim, 0.5f, 1.5f, seed++);
    std::vector<float> biasv = randomVector(dim, -1.0f, 1.0f, seed++);
    const float eps = 1e-5f;

    std::vector<double> y(size), mean(outer), invstd(outer);
    for (int64_t r = 0; r < outer; ++r) {
      double sum = 0, sq = 0;
      for (int64_t j = 0; j < dim; ++j)
        sum += xv[r * dim + j];
      mean[r] = sum / dim;
      for (int64_t j = 0; j < dim; ++j)
        sq += (xv[r * dim + j] - mean[r]) * (xv[r * dim + j] - mean[r]);
      invstd[r] = 1.0 / std::sqrt(sq / dim + eps);
      for (int64_t j = 0; j < dim; ++j) {
        size_t i = r * dim + j;
        y[i] = (xv[i] - mean[r]) * invstd[r] * scalev[j] + biasv[j];
      }
    }
    const LayerNormGrads want =
        layerNormBackwardInDouble(outer, dim, xv, dyv, scalev, mean, invstd);

    float *x = upload(xv), *dyd = upload(dyv);
    float *scale = upload(scalev), *bias = upload(biasv);
    float *yd = upload(std::vector<float>(size));
    float *meand = upload(std::vector<float>(outer));
    float *invstdd = upload(std::vector<float>(outer));
    layerNormForward(ctx, outer, dim, x, scale, bias, eps, yd, meand, invstdd);
    expectRelNear(download(yd, size), y, 1e-5, 2e-6);
    expectRelNear(download(meand, outer), mean, 1e-5, 1e-6);
    // A row of one element has variance 0: invstd is 1/sqrt(eps).
    expectRelNear(download(invstdd, outer), invstd, 1e-5, 0);

    float *dxd = upload(std::vector<float>(size));
    float *dscaled = upload(std::vector<float>(dim));
    float *dbiasd = upload(std::vector<float>(dim));
    layerNormBackward(ctx, outer, dim, dyd, x, scale, meand, invstdd, dxd,
                      dscaled, dbiasd);
    // With one element per row dx is 0 up to rounding, amplified by
    // invstd = 1/sqrt(eps).
    expectRelNear(download(dxd, size), want.dx, 1e-5, dim == 1 ? 1e-3 : 2e-6);
    expectRelNear(download(dscaled, dim), want.dscale, 1e-5, 1e-5);
    expectRelNear(download(dbiasd, dim), want.dbias, 1e-5, 1e-5);
  }
}

TEST_F(Kernels, LayerNormBackwardWithResidualMatchesReference) {
  // GPT-2's layer norm backward: x stored in bf16, the residual stream's
  // gradient added, a bf16 copy of dx; against the definition in double.
  // On CUDA a block walks rows a grid apart and loads each row's dy, x and
  // residual gradient while it reduces the row before: with one SM (8
  // blocks of 256 threads in the emulation) every block walks 20 rows,
  // with 132 SMs (1056 blocks) one each.
  const int64_t outer = 160, dim = 768;
  std::vector<float> xv = randomVector(outer * dim, -3.0f, 5.0f, 41);
  std::vector<float> dyv = randomVector(outer * dim, -1.0f, 1.0f, 42);
  std::vector<float> accv = randomVector(outer * dim, -1.0f, 1.0f, 43);
  std::vector<float> scalev = randomVector(dim, 0.5f, 1.5f, 44);
  std::vector<uint16_t> x16(outer * dim);
  std::vector<float> widened(outer * dim);
  for (int64_t i = 0; i < outer * dim; ++i) {
    x16[i] = floatToBf16(xv[i]);
    widened[i] = bf16ToFloat(x16[i]);
  }
  float *scale = upload(scalev), *dy = upload(dyv), *acc = upload(accv);
  float *mean = upload(std::vector<float>(outer));
  float *invstd = upload(std::vector<float>(outer));
  layerNormForward(ctx, outer, dim, upload(widened), scale, nullptr, 1e-5f,
                   upload(std::vector<float>(outer * dim)), mean, invstd);
  const std::vector<float> meanv = download(mean, outer);
  const std::vector<float> invstdv = download(invstd, outer);
  LayerNormGrads want = layerNormBackwardInDouble(
      outer, dim, widened, dyv, scalev,
      std::vector<double>(meanv.begin(), meanv.end()),
      std::vector<double>(invstdv.begin(), invstdv.end()));
  for (int64_t i = 0; i < outer * dim; ++i)
    want.dx[i] += accv[i];
  for (bool oneSm : {true, false}) {
    SCOPED_TRACE(oneSm ? "one SM" : "all SMs");
#ifdef MTC_RUNTIME_CUDA
    const int saved = ctx.smCount;
    if (oneSm)
      ctx.smCount = 1;
#endif
    float *dxd = upload(std::vector<float>(outer * dim));
    float *dscaled = upload(std::vector<float>(dim));
    float *dbiasd = upload(std::vector<float>(dim));
    uint16_t *copy = upload(std::vector<uint16_t>(outer * dim));
    layerNormBackward16(ctx, Storage16::Bf16, outer, dim, dy, upload(x16),
                        scale, mean, invstd, dxd, dscaled, dbiasd, acc, copy);
#ifdef MTC_RUNTIME_CUDA
    ctx.smCount = saved;
#endif
    EXPECT_FALSE(hasError(ctx));
    const std::vector<float> got = download(dxd, outer * dim);
    expectRelNear(got, want.dx, 1e-5, 2e-6);
    expectRelNear(download(dscaled, dim), want.dscale, 1e-5, 1e-5);
    expectRelNear(download(dbiasd, dim), want.dbias, 1e-5, 1e-5);
    const std::vector<uint16_t> copied = download(copy, outer * dim);
    for (int64_t i = 0; i < outer * dim; ++i)
      ASSERT_EQ(copied[i], floatToBf16(got[i])) << "at " << i;
  }
}

TEST_F(Kernels, LayerNorm16RoundsTheFloat32Result) {
  // A 16-bit y is the float32 kernel's y rounded (as a conversion rounds
  // it), bit for bit, and so within half a 16-bit step of the reference;
  // the statistics are the float32 kernel's.
  const int64_t outer = 7, dim = 300;
  std::vector<float> xv = randomVector(outer * dim, -3.0f, 5.0f, 7);
  std::vector<float> scalev = randomVector(dim, 0.5f, 1.5f, 8);
  std::vector<float> biasv = randomVector(dim, -1.0f, 1.0f, 9);
  float *x = upload(xv), *scale = upload(scalev), *bias = upload(biasv);
  float *y = upload(std::vector<float>(outer * dim));
  float *mean = upload(std::vector<float>(outer));
  float *invstd = upload(std::vector<float>(outer));
  layerNormForward(ctx, outer, dim, x, scale, bias, 1e-5f, y, mean, invstd);
  const std::vector<float> y32 = download(y, outer * dim);
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    SCOPED_TRACE(bf16 ? "bf16" : "fp16");
    uint16_t *y16 = upload(std::vector<uint16_t>(outer * dim, 0x7e00), 2);
    float *mean16 = upload(std::vector<float>(outer));
    float *invstd16 = upload(std::vector<float>(outer));
    layerNormForward16(ctx, storage, outer, dim, x, scale, bias, 1e-5f, y16,
                       mean16, invstd16);
    const std::vector<uint16_t> got = download(y16, outer * dim + 2);
    for (int64_t i = 0; i < outer * dim; ++i) {
      const uint16_t want = bf16 ? floatToBf16(y32[i]) : floatToHalf(y32[i]);
      ASSERT_EQ(got[i], want) << "at " << i;
      // Half a step: at most 2^-8 (bf16) or 2^-11 (fp16) of the magnitude.
      EXPECT_NEAR(storedToFloat(got[i], bf16), y32[i],
                  std::abs(y32[i]) * (bf16 ? 1.0 / 256 : 1.0 / 2048) + 1e-7);
    }
    // Nothing past the output.
    EXPECT_EQ(got[outer * dim], static_cast<uint16_t>(kSentinel));
    EXPECT_EQ(got[outer * dim + 1], static_cast<uint16_t>(kSentinel));
    expectNear(download(mean16, outer), download(mean, outer));
    expectNear(download(invstd16, outer), download(invstd, outer));
  }
}

TEST_F(Kernels, LayerNormBackward16ReadsTheStoredValues) {
  // x stored in 16 bits: the gradients are the float32 kernel's on the
  // widened values, bit for bit (with and without the residual gradient).
  const int64_t outer = 9, dim = 300;
  std::vector<float> xv = randomVector(outer * dim, -3.0f, 5.0f, 11);
  std::vector<float> dyv = randomVector(outer * dim, -1.0f, 1.0f, 12);
  std::vector<float> accv = randomVector(outer * dim, -1.0f, 1.0f, 13);
  std::vector<float> scalev = randomVector(dim, 0.5f, 1.5f, 14);
  float *scale = upload(scalev), *dy = upload(dyv), *acc = upload(accv);
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    SCOPED_TRACE(bf16 ? "bf16" : "fp16");
    std::vector<uint16_t> x16(outer * dim);
    std::vector<float> widened(outer * dim);
    for (int64_t i = 0; i < outer * dim; ++i) {
      x16[i] = bf16 ? floatToBf16(xv[i]) : floatToHalf(xv[i]);
      widened[i] = storedToFloat(x16[i], bf16);
    }
    float *x = upload(widened);
    float *mean = upload(std::vector<float>(outer));
    float *invstd = upload(std::vector<float>(outer));
    float *y = upload(std::vector<float>(outer * dim));
    layerNormForward(ctx, outer, dim, x, scale, nullptr, 1e-5f, y, mean,
                     invstd);
    for (bool withAcc : {false, true}) {
      float *dx = upload(std::vector<float>(outer * dim));
      float *dscale = upload(std::vector<float>(dim));
      float *dbias = upload(std::vector<float>(dim));
      layerNormBackward(ctx, outer, dim, dy, x, scale, mean, invstd, dx,
                        dscale, dbias, withAcc ? acc : nullptr);
      float *dx16 = upload(std::vector<float>(outer * dim));
      float *dscale16 = upload(std::vector<float>(dim));
      float *dbias16 = upload(std::vector<float>(dim));
      layerNormBackward16(ctx, storage, outer, dim, dy, upload(x16), scale,
                          mean, invstd, dx16, dscale16, dbias16,
                          withAcc ? acc : nullptr);
      EXPECT_EQ(download(dx16, outer * dim), download(dx, outer * dim));
      EXPECT_EQ(download(dscale16, dim), download(dscale, dim));
      EXPECT_EQ(download(dbias16, dim), download(dbias, dim));
      // With the input gradient's 16-bit copy: the same dx, and the copy is
      // dx rounded to x's format, nothing written past it.
      float *dxAgain = upload(std::vector<float>(outer * dim));
      uint16_t *copy =
          upload(std::vector<uint16_t>(outer * dim, 0x7777), 2);
      layerNormBackward16(ctx, storage, outer, dim, dy, upload(x16), scale,
                          mean, invstd, dxAgain, dscale16, dbias16,
                          withAcc ? acc : nullptr, copy);
      const std::vector<float> want = download(dx, outer * dim);
      EXPECT_EQ(download(dxAgain, outer * dim), want);
      std::vector<uint16_t> got = download(copy, outer * dim + 2);
      EXPECT_EQ(got[outer * dim], static_cast<uint16_t>(kSentinel));
      EXPECT_EQ(got[outer * dim + 1], static_cast<uint16_t>(kSentinel));
      got.resize(outer * dim);
      std::vector<uint16_t> rounded(outer * dim);
      for (int64_t i = 0; i < outer * dim; ++i)
        rounded[i] = bf16 ? floatToBf16(want[i]) : floatToHalf(want[i]);
      EXPECT_EQ(got, rounded);
    }
  }
}

TEST_F(Kernels, LayerNormBackward16ReadsAStoredGradient) {
  // dy stored in 16 bits as well (x's format): every result is the
  // kernel's on the widened dy, bit for bit, with and without the residual
  // gradient and the 16-bit copy. Values of dy that bfloat16 and float16
  // round differently make a kernel reading the wrong format fail.
  const int64_t outer = 7, dim = 260;
  std::vector<float> xv = randomVector(outer * dim, -3.0f, 5.0f, 31);
  std::vector<float> dyv = randomVector(outer * dim, -1.0f, 1.0f, 32);
  std::vector<float> accv = randomVector(outer * dim, -1.0f, 1.0f, 33);
  std::vector<float> scalev = randomVector(dim, 0.5f, 1.5f, 34);
  float *scale = upload(scalev), *acc = upload(accv);
  for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
    const bool bf16 = storage == Storage16::Bf16;
    SCOPED_TRACE(bf16 ? "bf16" : "fp16");
    std::vector<uint16_t> x16(outer * dim), dy16(outer * dim);
    std::vector<float> x(outer * dim), dyWidened(outer * dim);
    for (int64_t i = 0; i < outer * dim; ++i) {
      x16[i] = bf16 ? floatToBf16(xv[i]) : floatToHalf(xv[i]);
      x[i] = storedToFloat(x16[i], bf16);
      dy16[i] = bf16 ? floatToBf16(dyv[i]) : floatToHalf(dyv[i]);
      dyWidened[i] = storedToFloat(dy16[i], bf16);
    }
    float *mean = upload(std::vector<float>(outer));
    float *invstd = upload(std::vector<float>(outer));
    float *y = upload(std::vector<float>(outer * dim));
    layerNormForward(ctx, outer, dim, upload(x), scale, nullptr, 1e-5f, y,
                     mean, invstd);
    for (bool withAcc : {false, true}) {
      const float *residual = withAcc ? acc : nullptr;
      float *dx = upload(std::vector<float>(outer * dim));
      float *dscale = upload(std::vector<float>(dim));
      float *dbias = upload(std::vector<float>(dim));
      uint16_t *copy = upload(std::vector<uint16_t>(outer * dim));
      layerNormBackward16(ctx, storage, outer, dim, upload(dyWidened),
                          upload(x16), scale, mean, invstd, dx, dscale, dbias,
                          residual, copy);
      float *dx2 = upload(std::vector<float>(outer * dim));
      float *dscale2 = upload(std::vector<float>(dim));
      float *dbias2 = upload(std::vector<float>(dim));
      uint16_t *copy2 = upload(std::vector<uint16_t>(outer * dim));
      layerNormBackward16(ctx, storage, outer, dim, upload(dy16), upload(x16),
                          scale, mean, invstd, dx2, dscale2, dbias2, residual,
                          copy2);
      EXPECT_EQ(download(dx2, outer * dim), download(dx, outer * dim));
      EXPECT_EQ(download(dscale2, dim), download(dscale, dim));
      EXPECT_EQ(download(dbias2, dim), download(dbias, dim));
      EXPECT_EQ(download(copy2, outer * dim), download(copy, outer * dim));
      // And the gradient did reach the results: dbias is the column sum
      // of the widened dy.
      std::vector<float> bias = download(dbias2, dim);
      for (int64_t j = 0; j < dim; j += 37) {
        double sum = 0.0;
        for (int64_t row = 0; row < outer; ++row)
          sum += dyWidened[row * dim + j];
        EXPECT_NEAR(bias[j], sum, 1e-5) << "column " << j;
      }
    }
  }
}

TEST_F(Kernels, BatchNormActivationIsTheSeparateKernels) {
  // A fused ReLU or clip: y is the activation of the plain kernel's y, and
  // the backward with the activation's output is the plain backward of the
  // activation's gradient (relu_grad / clip_grad), bit for bit, on values
  // on both sides of the bounds and exactly at them. 70 channels make two
  // of the CPU's channel blocks; rows of 37 elements, and of one (the
  // CPU's vector loops over channels); rows of 600, which CUDA moves as
  // vectors of 8.
  for (const int64_t inner : {37, 1, 600}) {
    SCOPED_TRACE("inner=" + std::to_string(inner));
    const int64_t n = 3, c = 70, size = n * c * inner;
    std::vector<float> xv = randomVector(size, -2.0f, 6.0f, 21);
    std::vector<float> dyv = randomVector(size, -1.0f, 1.0f, 22);
    std::vector<float> scalev = randomVector(c, 0.5f, 3.0f, 23);
    std::vector<float> biasv = randomVector(c, -1.0f, 4.0f, 24);
    float *x = upload(xv), *scale = upload(scalev), *bias = upload(biasv);
    float *dy = upload(dyv);
    float *plain = upload(std::vector<float>(size));
    float *mean = upload(std::vector<float>(c)),
          *inv = upload(std::vector<float>(c));
    batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr, nullptr,
                          1e-5f, 0.9f, plain, mean, inv);
    std::vector<float> yPlain = download(plain, size);
    for (NormActivation act :
         {NormActivation{NormActivationKind::Relu, 0.0f, 0.0f},
          NormActivation{NormActivationKind::Clip, 0.0f, 6.0f},
          NormActivation{NormActivationKind::Clip, -0.5f, 0.5f}}) {
      SCOPED_TRACE(act.kind == NormActivationKind::Relu ? "relu" : "clip");
      // The separate kernels' expressions (the generated relu, clip,
      // relu_grad and clip_grad loops).
      std::vector<float> yWant(size), gWant(size);
      for (int64_t i = 0; i < size; ++i) {
        const float v = yPlain[i];
        yWant[i] = act.kind == NormActivationKind::Relu
                       ? (v > 0.0f ? v : 0.0f)
                       : (v < act.lo ? act.lo : (v > act.hi ? act.hi : v));
        const float y = yWant[i];
        gWant[i] = act.kind == NormActivationKind::Relu
                       ? (y > 0.0f ? dyv[i] : 0.0f)
                       : ((y > act.lo && y < act.hi) ? dyv[i] : 0.0f);
      }
      float *y = upload(std::vector<float>(size));
      batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr, nullptr,
                            1e-5f, 0.9f, y, mean, inv, act);
      EXPECT_EQ(download(y, size), yWant);
      float *dx = upload(std::vector<float>(size)),
            *ds = upload(std::vector<float>(c)),
            *db = upload(std::vector<float>(c));
      batchNormTrainBackward(ctx, n, c, inner, dy, x, scale, mean, inv, dx, ds,
                             db, y, act);
      float *dx2 = upload(std::vector<float>(size)),
            *ds2 = upload(std::vector<float>(c)),
            *db2 = upload(std::vector<float>(c));
      batchNormTrainBackward(ctx, n, c, inner, upload(gWant), x, scale, mean,
                             inv, dx2, ds2, db2);
      EXPECT_EQ(download(dx, size), download(dx2, size));
      EXPECT_EQ(download(ds, c), download(ds2, c));
      EXPECT_EQ(download(db, c), download(db2, c));
    }
  }
}

TEST_F(Kernels, BatchNormResidualIsTheSeparateKernels) {
  // A residual block's sum folded in: y is the activation of the plain
  // kernel's stored y, widened, plus the residual (the generated add and
  // relu loops), rounded as y is stored, bit for bit; in float32 and both
  // 16-bit formats, written over the residual itself too. The shapes walk
  // the CPU's row and channel-vector loops and the CUDA statistics' one-
  // and multi-part paths, with single elements, vectors of 4 (196) and of
  // 8 (4104).
  const int64_t shapes[][3] = {
      {3, 70, 37}, {16, 70, 1}, {64, 4, 49}, {6, 4, 196}, {2, 3, 4104}};
  unsigned seed = 80;
  for (const auto &shape : shapes) {
    const int64_t n = shape[0], c = shape[1], inner = shape[2];
    const int64_t size = n * c * inner;
    std::vector<float> xv = randomVector(size, -2.0f, 6.0f, seed++);
    std::vector<float> resv = randomVector(size, -3.0f, 3.0f, seed++);
    std::vector<float> scalev = randomVector(c, 0.5f, 3.0f, seed++);
    std::vector<float> biasv = randomVector(c, -1.0f, 1.0f, seed++);
    float *x = upload(xv), *scale = upload(scalev), *bias = upload(biasv);
    float *mean = upload(std::vector<float>(c)),
          *inv = upload(std::vector<float>(c));
    for (NormActivation act :
         {NormActivation{}, NormActivation{NormActivationKind::Relu}}) {
      const bool relu = act.kind == NormActivationKind::Relu;
      auto activate = [&](float v) { return relu && !(v > 0.0f) ? 0.0f : v; };
      SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c) +
                   " inner=" + std::to_string(inner) + (relu ? " relu" : ""));
      // float32.
      float *plain = upload(std::vector<float>(size));
      batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr, nullptr,
                            1e-5f, 0.9f, plain, mean, inv);
      const std::vector<float> yPlain = download(plain, size);
      std::vector<float> want(size);
      for (int64_t i = 0; i < size; ++i)
        want[i] = activate(yPlain[i] + resv[i]);
      float *res = upload(resv), *y = upload(std::vector<float>(size));
      batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr, nullptr,
                            1e-5f, 0.9f, y, mean, inv, act, res);
      EXPECT_EQ(download(y, size), want);
      batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr, nullptr,
                            1e-5f, 0.9f, res, mean, inv, act, res);
      EXPECT_EQ(download(res, size), want);
      // 16-bit x, y and residual.
      for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
        SCOPED_TRACE(storage == Storage16::Bf16 ? "bf16" : "fp16");
        const bool bf16 = storage == Storage16::Bf16;
        auto round = [&](float v) {
          return bf16 ? floatToBf16(v) : floatToHalf(v);
        };
        std::vector<uint16_t> x16v(size), res16v(size);
        for (int64_t i = 0; i < size; ++i)
          x16v[i] = round(xv[i]), res16v[i] = round(resv[i]);
        uint16_t *x16 = upload(x16v);
        uint16_t *plain16 = upload(std::vector<uint16_t>(size));
        batchNormTrainForward16(ctx, storage, n, c, inner, x16, scale, bias,
                                nullptr, nullptr, 1e-5f, 0.9f, plain16, mean,
                                inv);
        const std::vector<uint16_t> stored = download(plain16, size);
        std::vector<uint16_t> want16(size);
        for (int64_t i = 0; i < size; ++i)
          want16[i] = round(activate(storedToFloat(stored[i], bf16) +
                                     storedToFloat(res16v[i], bf16)));
        uint16_t *res16 = upload(res16v);
        uint16_t *y16 = upload(std::vector<uint16_t>(size), 2);
        batchNormTrainForward16(ctx, storage, n, c, inner, x16, scale, bias,
                                nullptr, nullptr, 1e-5f, 0.9f, y16, mean, inv,
                                act, nullptr, res16);
        std::vector<uint16_t> got = download(y16, size + 2);
        EXPECT_EQ(got[size], static_cast<uint16_t>(kSentinel));
        got.resize(size);
        EXPECT_EQ(got, want16);
        batchNormTrainForward16(ctx, storage, n, c, inner, x16, scale, bias,
                                nullptr, nullptr, 1e-5f, 0.9f, res16, mean, inv,
                                act, nullptr, res16);
        EXPECT_EQ(download(res16, size), want16);
      }
    }
  }
}

TEST_F(Kernels, BatchNormResidualStoredUnlikeTheOutputIsAnError) {
  float *x = upload(std::vector<float>(8, 1.0f));
  float *scale = upload(std::vector<float>(2, 1.0f)),
        *bias = upload(std::vector<float>(2));
  float *mean = upload(std::vector<float>(2)),
        *inv = upload(std::vector<float>(2));
  uint16_t *res16 = upload(std::vector<uint16_t>(8));
  float *y = upload(std::vector<float>(8));
  batchNormTrainForward16(ctx, Storage16::Bf16, 2, 2, 2, x, scale, bias,
                          nullptr, nullptr, 1e-5f, 0.9f, y, mean, inv, {},
                          nullptr, res16);
  ASSERT_TRUE(hasError(ctx));
  const ContextError err = takeError(ctx);
  EXPECT_NE(err.message.find("the residual must be stored like the output"),
            std::string::npos)
      << err.message;
}

TEST_F(Kernels, BatchNorm16IsTheFloatKernelOnStoredValues) {
  // x, the activation output and dy read as 16-bit values, y and dx
  // written as 16-bit values: bit for bit the float32 kernels on the widened
  // values, each result rounded as a conversion rounds it; the statistics
  // and parameter gradients unchanged. The shapes walk each way the
  // kernels split channels (see BatchNormMatchesReference).
  const int64_t shapes[][3] = {{4, 3, 37},   {64, 4, 49}, {16, 70, 1},
                               {32, 2, 600}, {6, 4, 196}, {2, 3, 4104},
                               {3, 2, 2052}};
  unsigned seed = 40;
  for (const auto &shape : shapes) {
    const int64_t n = shape[0], c = shape[1], inner = shape[2];
    const int64_t size = n * c * inner;
    std::vector<float> xv = randomVector(size, -2.0f, 6.0f, seed++);
    std::vector<float> dyv = randomVector(size, -1.0f, 1.0f, seed++);
    std::vector<float> scalev = randomVector(c, 0.5f, 1.5f, seed++);
    std::vector<float> biasv = randomVector(c, -1.0f, 1.0f, seed++);
    std::vector<float> rmv = randomVector(c, -1.0f, 1.0f, seed++);
    std::vector<float> rvv = randomVector(c, 0.5f, 1.5f, seed++);
    float *scale = upload(scalev), *bias = upload(biasv), *dy = upload(dyv);
    for (Storage16 storage : {Storage16::Bf16, Storage16::F16}) {
      const bool bf16 = storage == Storage16::Bf16;
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
      const std::vector<uint16_t> x16v = round(xv);
      const std::vector<float> widened = widen(x16v);
      for (NormActivation act :
           {NormActivation{}, NormActivation{NormActivationKind::Relu}}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c) +
                     " inner=" + std::to_string(inner) +
                     (bf16 ? " bf16" : " fp16") +
                     (act.kind == NormActivationKind::None ? "" : " relu"));
        // The float32 kernels on the widened x.
        float *x = upload(widened), *y = upload(std::vector<float>(size));
        float *mean = upload(std::vector<float>(c)),
              *inv = upload(std::vector<float>(c));
        float *rm = upload(rmv), *rv = upload(rvv);
        batchNormTrainForward(ctx, n, c, inner, x, scale, bias, rm, rv, 1e-5f,
                              0.9f, y, mean, inv, act);
        const std::vector<float> y32 = download(y, size);

        // 16-bit x and y, nothing written past y.
        uint16_t *x16 = upload(x16v);
        uint16_t *y16 = upload(std::vector<uint16_t>(size), 2);
        float *mean16 = upload(std::vector<float>(c)),
              *inv16 = upload(std::vector<float>(c));
        float *rm16 = upload(rmv), *rv16 = upload(rvv);
        batchNormTrainForward16(ctx, storage, n, c, inner, x16, scale, bias,
                                rm16, rv16, 1e-5f, 0.9f, y16, mean16, inv16,
                                act);
        std::vector<uint16_t> got = download(y16, size + 2);
        EXPECT_EQ(got[size], static_cast<uint16_t>(kSentinel));
        EXPECT_EQ(got[size + 1], static_cast<uint16_t>(kSentinel));
        got.resize(size);
        EXPECT_EQ(got, round(y32));
        EXPECT_EQ(download(mean16, c), download(mean, c));
        EXPECT_EQ(download(inv16, c), download(inv, c));
        EXPECT_EQ(download(rm16, c), download(rm, c));
        EXPECT_EQ(download(rv16, c), download(rv, c));

        // float32 x in, its 16-bit copy written as it is read, float32 y.
        float *xf = upload(xv), *yf = upload(std::vector<float>(size));
        uint16_t *copy = upload(std::vector<uint16_t>(size), 2);
        batchNormTrainForward16(ctx, storage, n, c, inner, xf, scale, bias,
                                nullptr, nullptr, 1e-5f, 0.9f, yf, mean16,
                                inv16, act, copy);
        std::vector<uint16_t> copied = download(copy, size + 2);
        EXPECT_EQ(copied[size], static_cast<uint16_t>(kSentinel));
        copied.resize(size);
        EXPECT_EQ(copied, x16v);
        float *yWant = upload(std::vector<float>(size));
        batchNormTrainForward(ctx, n, c, inner, xf, scale, bias, nullptr,
                              nullptr, 1e-5f, 0.9f, yWant, mean, inv, act);
        EXPECT_EQ(download(yf, size), download(yWant, size));

        // Backward from the stored x and activation output, and dy as
        // given or rounded: the float32 kernel on their widened values.
        const bool withAct = act.kind != NormActivationKind::None;
        batchNormTrainForward(ctx, n, c, inner, x, scale, bias, nullptr,
                              nullptr, 1e-5f, 0.9f, y, mean, inv, act);
        float *actWide = upload(widen(round(y32)));
        const std::vector<uint16_t> dy16v = round(dyv);
        for (auto [narrowDy, narrowDx] :
             {std::pair(false, false), std::pair(false, true),
              std::pair(true, false), std::pair(true, true)}) {
          SCOPED_TRACE(std::string(narrowDy ? "16-bit dy, " : "float32 dy, ") +
                       (narrowDx ? "16-bit dx" : "float32 dx"));
          float *dx = upload(std::vector<float>(size)),
                *ds = upload(std::vector<float>(c)),
                *db = upload(std::vector<float>(c));
          batchNormTrainBackward(
              ctx, n, c, inner, narrowDy ? upload(widen(dy16v)) : dy, x, scale,
              mean, inv, dx, ds, db, withAct ? actWide : nullptr, act);
          const std::vector<float> dx32 = download(dx, size);
          StoredIn dyIn = dy;
          if (narrowDy)
            dyIn = upload(dy16v);
          float *ds16 = upload(std::vector<float>(c)),
                *db16 = upload(std::vector<float>(c));
          uint16_t *act16 = withAct ? upload(round(y32)) : nullptr;
          if (narrowDx) {
            uint16_t *dx16 = upload(std::vector<uint16_t>(size), 2);
            batchNormTrainBackward16(ctx, storage, n, c, inner, dyIn, x16,
                                     scale, mean, inv, dx16, ds16, db16, act16,
                                     act);
            std::vector<uint16_t> gotDx = download(dx16, size + 2);
            EXPECT_EQ(gotDx[size], static_cast<uint16_t>(kSentinel));
            gotDx.resize(size);
            EXPECT_EQ(gotDx, round(dx32));
          } else {
            float *dxf = upload(std::vector<float>(size));
            batchNormTrainBackward16(ctx, storage, n, c, inner, dyIn, x16,
                                     scale, mean, inv, dxf, ds16, db16, act16,
                                     act);
            EXPECT_EQ(download(dxf, size), dx32);
          }
          EXPECT_EQ(download(ds16, c), download(ds, c));
          EXPECT_EQ(download(db16, c), download(db, c));
        }
      }
    }
  }
}

} // namespace
