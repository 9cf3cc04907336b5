//===- DropoutTest.cpp - Dropout kernels and their generator --------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The generator is checked against Random123's published known answers;
// the kernels against the generator evaluated on the host, element for
// element (which is what makes the CPU and CUDA masks identical), and for
// the statistics and determinism a training run relies on.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "KernelTestFixture.h"

#include "mtc/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace mtc::rt;
using mtc::rt::unittest::Kernels;

namespace {

/// The philox4x32 rounds-10 lines of Random123's tests/kat_vectors
/// (github.com/DEShawResearch/random123): counter, key, expected output.
TEST(Philox, KnownAnswers) {
  struct Case {
    uint32_t ctr[4], key[2], expected[4];
  } cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case &c : cases) {
    uint32_t out[4];
    philox4x32(c.ctr, c.key[0], c.key[1], out);
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(out[j], c.expected[j]) << "word " << j;
  }
}

std::vector<float> randomNonzero(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.5f, 2.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = (i % 2 ? -1.0f : 1.0f) * dist(gen);
  return v;
}

/// The mask the contract defines, from the shared generator on the host.
std::vector<bool> hostMask(uint64_t seed, int64_t step, uint64_t stream,
                           float ratio, int64_t n) {
  DropoutParams p = dropoutParams(seed, step, stream, ratio);
  std::vector<bool> mask(n);
  for (int64_t g = 0; g * kDropoutGroup < n; ++g) {
    bool keep[kDropoutGroup];
    dropoutGroupKeep(p, static_cast<uint64_t>(g), keep);
    for (int j = 0; j < kDropoutGroup && g * kDropoutGroup + j < n; ++j)
      mask[g * kDropoutGroup + j] = keep[j];
  }
  return mask;
}

TEST_F(Kernels, DropoutMaskAndScale) {
  const int64_t n = 100000;
  const float ratio = 0.3f;
  const float scale = 1.0f / (1.0f - ratio);
  ctx.seed = 42;
  ctx.batch = 7;
  std::vector<float> xv = randomNonzero(n, 1);
  float *x = upload(xv);
  float *y = upload(std::vector<float>(n, 9.0f), 3);
  dropoutForward(ctx, n, x, y, ratio, /*stream=*/3);
  std::vector<float> out = download(y, n + 3);

  // Exactly the generator's mask, and kept values scaled in float.
  std::vector<bool> mask = hostMask(42, 7, 3, ratio, n);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], mask[i] ? xv[i] * scale : 0.0f) << "at " << i;
    kept += mask[i] ? 1 : 0;
  }
  for (int64_t i = n; i < n + 3; ++i)
    EXPECT_EQ(out[i], kSentinel);
  // 1 - ratio of the elements survive; the binomial's standard deviation
  // is 0.0015 here, so 0.01 is a wide margin.
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - ratio, 0.01);

  // The backward applies the same mask: dx = dy * y / x.
  std::vector<float> dyv = randomNonzero(n, 2);
  float *dy = upload(dyv);
  float *dx = upload(std::vector<float>(n, 9.0f));
  dropoutBackward(ctx, n, dy, dx, ratio, 3);
  std::vector<float> grad = download(dx, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(grad[i], dyv[i] * (out[i] / xv[i]), 1e-5f) << "at " << i;
}

TEST_F(Kernels, DropoutIsAFunctionOfSeedStepStream) {
  const int64_t n = 4099; // not a multiple of the generator's group of 4
  const float ratio = 0.5f;
  float *x = upload(std::vector<float>(n, 1.0f));
  auto run = [&](uint64_t seed, int64_t step, uint64_t stream) {
    ctx.seed = seed;
    ctx.batch = step;
    float *y = upload(std::vector<float>(n, 9.0f));
    dropoutForward(ctx, n, x, y, ratio, stream);
    return download(y, n);
  };
  auto differing = [](const std::vector<float> &a,
                      const std::vector<float> &b) {
    int64_t count = 0;
    for (size_t i = 0; i < a.size(); ++i)
      count += a[i] != b[i] ? 1 : 0;
    return count;
  };
  std::vector<float> base = run(5, 2, 0);
  EXPECT_EQ(differing(base, run(5, 2, 0)), 0);
  // Independent masks with ratio 1/2 differ in half the elements.
  for (const std::vector<float> &other :
       {run(5, 2, 1), run(5, 3, 0), run(6, 2, 0)}) {
    int64_t d = differing(base, other);
    EXPECT_GT(d, n * 4 / 10);
    EXPECT_LT(d, n * 6 / 10);
  }
}

TEST_F(Kernels, DropoutEdgeRatios) {
  float *x = upload<float>({1, -2, 3, -4, 5});
  float *y = upload<float>(std::vector<float>(5, 9.0f));
  dropoutForward(ctx, 5, x, y, 0.0f, 0);
  EXPECT_EQ(download(y, 5), (std::vector<float>{1, -2, 3, -4, 5}));
  dropoutForward(ctx, 5, x, y, 1.0f, 0);
  EXPECT_EQ(download(y, 5), std::vector<float>(5, 0.0f));
  EXPECT_FALSE(hasError(ctx));

  // A ratio outside [0, 1] is a usage error; the output is zeroed.
  fill(ctx, y, 5, 9.0f);
  dropoutBackward(ctx, 5, x, y, 1.5f, 0);
  EXPECT_EQ(download(y, 5), std::vector<float>(5, 0.0f));
  ASSERT_TRUE(hasError(ctx));
  EXPECT_NE(takeError(ctx).message.find("ratio"), std::string::npos);
}

} // namespace
