//===- GatherTest.cpp - Gather and its transpose --------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Repeated and negative indices by hand, bad indices, and random cases
// whose scatter-add is compared bit for bit with a sum in index order (the
// order the contract fixes, so the CPU and CUDA libraries agree exactly).
//
//===----------------------------------------------------------------------===//

#include "KernelTestFixture.h"

#include "mtc/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mtc::rt;
using mtc::rt::unittest::expectNear;
using mtc::rt::unittest::Kernels;

namespace {

std::string shapeTrace(int64_t outer, int64_t dim, int64_t inner,
                       int64_t count) {
  return "outer=" + std::to_string(outer) + " dim=" + std::to_string(dim) +
         " inner=" + std::to_string(inner) + " count=" + std::to_string(count);
}

/// The scatter-add of dy [outer, count, inner] into a zeroed [outer, dim,
/// inner] table, each element summing its contributions in index order.
std::vector<float> indexOrderScatter(int64_t outer, int64_t dim, int64_t inner,
                                     const std::vector<int64_t> &idx,
                                     const std::vector<float> &dy) {
  const int64_t count = static_cast<int64_t>(idx.size());
  std::vector<float> sum(outer * dim * inner, 0.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      int64_t row = idx[k] < 0 ? idx[k] + dim : idx[k];
      for (int64_t i = 0; i < inner; ++i)
        sum[(o * dim + row) * inner + i] += dy[(o * count + k) * inner + i];
    }
  return sum;
}

TEST_F(Kernels, GatherRepeatedAndNegativeIndices) {
  // data [outer=2, dim=3, inner=2]; indices 2 and -1 both name row 2.
  float *data =
      upload<float>({0, 1, 10, 11, 20, 21, 100, 101, 110, 111, 120, 121});
  int64_t *indices = upload<int64_t>({2, -1, 0, -3});
  float *y = upload<float>(std::vector<float>(16, 9.0f), 2);
  gatherForward(ctx, 2, 3, 2, data, indices, 4, y);
  expectNear(download(y, 18), {20, 21, 20, 21, 0, 1, 0, 1, 120, 121, 120, 121,
                               100, 101, 100, 101, kSentinel, kSentinel});

  // Row 2 receives dy rows 0 and 1, row 0 rows 2 and 3, row 1 nothing.
  float *dy = upload<float>(
      {1, 2, 4, 8, 16, 32, 64, 128, -1, -2, -4, -8, -16, -32, -64, -128});
  float *ddata = upload<float>(std::vector<float>(12, 9.0f), 2);
  gatherBackward(ctx, 2, 3, 2, dy, indices, 4, ddata);
  expectNear(download(ddata, 14), {80, 160, 0, 0, 5, 10, -80, -160, 0, 0, -5,
                                   -10, kSentinel, kSentinel});
  EXPECT_FALSE(hasError(ctx));
}

TEST_F(Kernels, GatherBadIndexIsADataError) {
  float *data = upload<float>({1, 2, 3});
  int64_t *indices = upload<int64_t>({0, 3, -4, 2});
  float *y = upload<float>(std::vector<float>(4, 9.0f));
  gatherForward(ctx, 1, 3, 1, data, indices, 4, y);
  // The bad rows are zero-filled.
  expectNear(download(y, 4), {1, 0, 0, 3});
  ASSERT_TRUE(hasError(ctx));
  std::string message = takeError(ctx).message;
  // The CPU names the first bad index; CUDA any one of them.
  EXPECT_TRUE(
      message.find("gather index 3 at position 1") != std::string::npos ||
      message.find("gather index -4 at position 2") != std::string::npos)
      << message;

  // The backward skips them.
  float *dy = upload<float>({1, 10, 100, 1000});
  float *ddata = upload<float>(std::vector<float>(3, 9.0f));
  gatherBackward(ctx, 1, 3, 1, dy, indices, 4, ddata);
  expectNear(download(ddata, 3), {1, 0, 1000});
  EXPECT_TRUE(hasError(ctx));
  takeError(ctx);
}

TEST_F(Kernels, GatherMatchesIndexOrderSum) {
  // A large table with few indices, and a small one where every row repeats
  // many times (also within one chunk of the CUDA kernel).
  // The last: a token embedding's shape (few rows, many indices, each
  // repeated; on CUDA the rows are split into parts).
  const int64_t shapes[][4] = {
      {3, 50, 33, 200}, {1, 7, 5, 1000}, {2, 4, 1, 9}, {1, 300, 96, 4096}};
  unsigned seed = 7;
  for (const auto &shape : shapes) {
    const int64_t outer = shape[0], dim = shape[1], inner = shape[2],
                  count = shape[3];
    SCOPED_TRACE(shapeTrace(outer, dim, inner, count));
    std::mt19937 gen(seed++);
    std::uniform_int_distribution<int64_t> pick(-dim, dim - 1);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<int64_t> idx(count);
    for (int64_t &i : idx)
      i = pick(gen);
    std::vector<float> datav(outer * dim * inner), dyv(outer * count * inner);
    for (float &v : datav)
      v = value(gen);
    for (float &v : dyv)
      v = value(gen);

    std::vector<float> y(outer * count * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < count; ++k) {
        int64_t row = idx[k] < 0 ? idx[k] + dim : idx[k];
        for (int64_t i = 0; i < inner; ++i)
          y[(o * count + k) * inner + i] = datav[(o * dim + row) * inner + i];
      }
    std::vector<float> ddata = indexOrderScatter(outer, dim, inner, idx, dyv);

    float *data = upload(datav), *dy = upload(dyv);
    int64_t *indices = upload(idx);
    float *yd = upload(std::vector<float>(y.size(), 9.0f));
    gatherForward(ctx, outer, dim, inner, data, indices, count, yd);
    EXPECT_EQ(download(yd, y.size()), y);
    auto checkBackward = [&](const char *how) {
      SCOPED_TRACE(how);
      float *ddatad = upload(std::vector<float>(ddata.size(), 9.0f));
      gatherBackward(ctx, outer, dim, inner, dy, indices, count, ddatad);
      EXPECT_EQ(download(ddatad, ddata.size()), ddata);
      EXPECT_FALSE(hasError(ctx));
    };
    checkBackward("as the library runs it");
#ifdef MTC_RUNTIME_CUDA
    // CUDA lists each part's positions in the library workspace first;
    // without one its threads scan every index. The same bits either way.
    const size_t libraryWorkspace = ctx.ltWorkspaceBytes;
    ctx.ltWorkspaceBytes = 0;
    checkBackward("without the library workspace");
    ctx.ltWorkspaceBytes = libraryWorkspace;
#endif
  }
}

TEST_F(Kernels, GatherBackwardAccumulateIsScatterThenAdd) {
  // What gatherBackward into a zeroed table and an add give, bit for bit,
  // written beside base and over it. Base holds -0 and +0 in rows no index
  // names (base + 0 turns -0 into +0) and values of every size in the
  // others; the scratch starts as garbage. Shapes: a tied embedding's (few
  // rows, many repeated indices), outer > 1 with negative indices, and no
  // index at all.
  const int64_t shapes[][4] = {
      {1, 300, 96, 4096}, {3, 50, 33, 200}, {2, 4, 1, 9}, {1, 6, 5, 0}};
  unsigned seed = 11;
  for (const auto &shape : shapes) {
    const int64_t outer = shape[0], dim = shape[1], inner = shape[2],
                  count = shape[3];
    SCOPED_TRACE(shapeTrace(outer, dim, inner, count));
    std::mt19937 gen(seed++);
    // Indices in the first two thirds of the rows: the rest are named by
    // none.
    std::uniform_int_distribution<int64_t> pick(-dim, 2 * dim / 3 - dim - 1);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<int64_t> idx(count);
    for (int64_t &i : idx)
      i = pick(gen) + (gen() % 2 ? dim : 0);
    std::vector<float> basev(outer * dim * inner), dyv(outer * count * inner);
    for (size_t i = 0; i < basev.size(); ++i)
      basev[i] = i % 3 == 0 ? (i % 2 ? -0.0f : 0.0f)
                            : value(gen) * std::ldexp(1.0f, int(i % 40) - 20);
    for (float &v : dyv)
      v = value(gen);

    std::vector<float> sum = indexOrderScatter(outer, dim, inner, idx, dyv),
                       expected(basev.size());
    for (size_t i = 0; i < basev.size(); ++i)
      expected[i] = basev[i] + sum[i];

    const uint64_t wsBytes =
        gatherBackwardAccumulateWorkspaceBytes(outer, dim, inner, count);
    auto *workspace = upload(std::vector<unsigned char>(wsBytes, 0x7f));
    float *dy = upload(dyv.empty() ? std::vector<float>{0.0f} : dyv);
    int64_t *indices = upload(idx.empty() ? std::vector<int64_t>{0} : idx);
    float *base = upload(basev);
    float *ddata = upload(std::vector<float>(basev.size(), 9.0f), 2);
    gatherBackwardAccumulate(ctx, outer, dim, inner, dy, indices, count, base,
                             ddata, workspace);
    std::vector<float> beside = download(ddata, basev.size() + 2);
    EXPECT_EQ(beside[basev.size()], kSentinel);
    beside.resize(basev.size());
    gatherBackwardAccumulate(ctx, outer, dim, inner, dy, indices, count, base,
                             base, workspace);
    std::vector<float> over = download(base, basev.size());
    // Bits, so that -0 and +0 differ.
    auto bits = [](const std::vector<float> &v) {
      std::vector<uint32_t> b(v.size());
      std::memcpy(b.data(), v.data(), sizeof(float) * v.size());
      return b;
    };
    EXPECT_EQ(bits(beside), bits(expected));
    EXPECT_EQ(bits(over), bits(expected));
    EXPECT_FALSE(hasError(ctx));
  }
}

TEST_F(Kernels, GatherBackwardAccumulateSkipsBadIndices) {
  float *dy = upload<float>({1, 10, 100, 1000});
  int64_t *indices = upload<int64_t>({0, 3, -4, 2});
  float *base = upload<float>({0.5f, -0.0f, 0.25f});
  auto *workspace = upload(std::vector<unsigned char>(
      gatherBackwardAccumulateWorkspaceBytes(1, 3, 1, 4), 0));
  gatherBackwardAccumulate(ctx, 1, 3, 1, dy, indices, 4, base, base, workspace);
  std::vector<float> out = download(base, 3);
  expectNear(out, {1.5f, 0.0f, 1000.25f});
  EXPECT_FALSE(std::signbit(out[1]));
  ASSERT_TRUE(hasError(ctx));
  std::string message = takeError(ctx).message;
  EXPECT_TRUE(
      message.find("gather index 3 at position 1") != std::string::npos ||
      message.find("gather index -4 at position 2") != std::string::npos)
      << message;
}

} // namespace
