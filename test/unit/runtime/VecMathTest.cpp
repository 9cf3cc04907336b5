//===- VecMathTest.cpp - The CPU's vectorizable exp, erf and tanh ---------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// vecExp, vecErf and vecTanh against libm's double-precision exp, erf and
// tanh: the error
// in units in the last place of the float result, over a sample of every
// 31st float plus every float of the ranges where the approximations
// change pieces or the result turns subnormal or infinite, and the IEEE
// special values. (A sweep of all 2^32 floats gave at most 0.957 ulp for
// exp, 1.010 for erf and 0.856 for tanh; the bounds below are what
// VecMath.h states.)
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/VecMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

using namespace mtc::rt::cpu;

namespace {

float floatBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// The spacing of floats at the float nearest `ref` (the subnormal spacing
/// below the smallest normal).
double ulpAt(double ref) {
  float f = static_cast<float>(ref);
  if (std::isinf(f))
    f = std::numeric_limits<float>::max();
  const float a = std::fabs(f);
  if (a < std::numeric_limits<float>::min())
    return std::ldexp(1.0, -149);
  int e;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

struct Sweep {
  double worst = 0.0;
  float worstAt = 0.0f;
  int64_t count = 0;
  int64_t specialMismatches = 0;
};

/// The largest error of f against ref (double) over the floats whose bit
/// patterns are first, first + step, ... up to last.
template <typename F, typename R>
void sweep(Sweep &s, F f, R ref, uint64_t first, uint64_t last, uint64_t step) {
  for (uint64_t b = first; b <= last; b += step) {
    const float x = floatBits(static_cast<uint32_t>(b));
    const float got = f(x);
    ++s.count;
    if (std::isnan(x)) {
      s.specialMismatches += !std::isnan(got);
      continue;
    }
    const double want = ref(static_cast<double>(x));
    const float wantF = static_cast<float>(want);
    if (std::isinf(wantF) || std::isinf(got) || std::isnan(got)) {
      s.specialMismatches += got != wantF;
      continue;
    }
    const double err = std::fabs(static_cast<double>(got) - want) / ulpAt(want);
    if (err > s.worst) {
      s.worst = err;
      s.worstAt = x;
    }
  }
}

double libmExp(double x) { return std::exp(x); }
double libmErf(double x) { return std::erf(x); }
double libmTanh(double x) { return std::tanh(x); }

/// An odd function f against ref: every 31st float, every float of the
/// `dense` ranges (and their negatives), within `bound` ulp.
template <typename F, typename R>
void expectOddWithin(F f, R ref,
                     std::initializer_list<std::pair<float, float>> dense,
                     double bound) {
  Sweep s;
  sweep(s, f, ref, 0, 0xffffffffu, 31);
  for (float sign : {1.0f, -1.0f})
    for (auto [from, to] : dense)
      sweep(s, f, ref, bitsOf(sign * from), bitsOf(sign * to), 1);
  EXPECT_GT(s.count, int64_t(130'000'000));
  EXPECT_EQ(s.specialMismatches, 0);
  EXPECT_LE(s.worst, bound) << "at x = " << s.worstAt;
}

/// f(-x) is -f(x) bit for bit, on a sample of the finite floats.
template <typename F> void expectOddBitwise(F f) {
  for (uint32_t b = 0; b < 0x7f800000u; b += 4099) {
    const float x = floatBits(b);
    EXPECT_EQ(bitsOf(f(-x)), bitsOf(f(x)) ^ 0x80000000u) << x;
  }
}

TEST(VecMath, ExpWithinOneUlp) {
  Sweep s;
  // Every 31st float (both signs, NaNs and infinities included).
  sweep(s, vecExp, libmExp, 0, 0xffffffffu, 31);
  // Every float whose exp is subnormal or rounds to 0 (-87.34 .. -104),
  // and every float near the overflow threshold.
  sweep(s, vecExp, libmExp, bitsOf(-87.0f), bitsOf(-105.0f), 1);
  sweep(s, vecExp, libmExp, bitsOf(88.0f), bitsOf(89.0f), 1);
  // Around 0, where r = x and n = 0.
  sweep(s, vecExp, libmExp, bitsOf(0.0f), bitsOf(0.5f), 1009);
  sweep(s, vecExp, libmExp, bitsOf(-0.0f), bitsOf(-0.5f), 1009);
  EXPECT_GT(s.count, int64_t(130'000'000));
  EXPECT_EQ(s.specialMismatches, 0);
  EXPECT_LE(s.worst, 1.0) << "at x = " << s.worstAt;
}

TEST(VecMath, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vecExp(0.0f), 1.0f);
  EXPECT_EQ(vecExp(-0.0f), 1.0f);
  EXPECT_EQ(vecExp(1.0f), static_cast<float>(std::exp(1.0)));
  EXPECT_EQ(vecExp(inf), inf);
  EXPECT_EQ(vecExp(-inf), 0.0f);
  EXPECT_FALSE(std::signbit(vecExp(-inf)));
  EXPECT_TRUE(std::isnan(vecExp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(vecExp(-std::numeric_limits<float>::quiet_NaN())));
  // The largest float whose exp is finite, and the next one.
  EXPECT_EQ(vecExp(88.7228317f),
            static_cast<float>(std::exp(static_cast<double>(88.7228317f))));
  EXPECT_TRUE(std::isfinite(vecExp(88.7228317f)));
  EXPECT_EQ(vecExp(88.7228394f), inf);
  EXPECT_EQ(vecExp(1e30f), inf);
  // Gradual underflow: the smallest subnormal and below it 0.
  EXPECT_EQ(vecExp(-103.27893f), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(vecExp(-104.0f), 0.0f);
  EXPECT_EQ(vecExp(-1e30f), 0.0f);
}

TEST(VecMath, ErfWithinStatedUlp) {
  // Dense where the pieces meet (0.78125 and 2) and where erf turns 1.
  expectOddWithin(vecErf, libmErf, {{0.70f, 1.1f}, {1.9f, 2.1f}, {3.8f, 4.1f}},
                  1.02);
}

TEST(VecMath, ErfSpecialValuesAndSymmetry) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bitsOf(vecErf(0.0f)), bitsOf(0.0f));
  EXPECT_EQ(bitsOf(vecErf(-0.0f)), bitsOf(-0.0f));
  EXPECT_EQ(vecErf(inf), 1.0f);
  EXPECT_EQ(vecErf(-inf), -1.0f);
  EXPECT_EQ(vecErf(4.0f), 1.0f);
  EXPECT_EQ(vecErf(1e30f), 1.0f);
  EXPECT_TRUE(std::isnan(vecErf(std::numeric_limits<float>::quiet_NaN())));
  // Tiny arguments: erf(x) = 2x / sqrt(pi) rounded, down to subnormals.
  for (float x : {1e-20f, 1e-38f, 1e-44f})
    EXPECT_EQ(vecErf(x), static_cast<float>(std::erf(static_cast<double>(x))))
        << x;
  expectOddBitwise(vecErf);
}

TEST(VecMath, TanhWithinOneUlp) {
  // Dense where the pieces meet (0.6875, 1.5 and 3) and where tanh turns 1.
  expectOddWithin(vecTanh, libmTanh,
                  {{0.6f, 0.8f}, {1.4f, 1.6f}, {2.9f, 3.1f}, {8.9f, 9.6f}},
                  1.0);
}

TEST(VecMath, TanhSpecialValuesAndSymmetry) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bitsOf(vecTanh(0.0f)), bitsOf(0.0f));
  EXPECT_EQ(bitsOf(vecTanh(-0.0f)), bitsOf(-0.0f));
  EXPECT_EQ(vecTanh(inf), 1.0f);
  EXPECT_EQ(vecTanh(-inf), -1.0f);
  EXPECT_EQ(vecTanh(9.5f), 1.0f);
  EXPECT_EQ(vecTanh(-1e30f), -1.0f);
  EXPECT_TRUE(std::isnan(vecTanh(std::numeric_limits<float>::quiet_NaN())));
  // Tiny arguments: tanh(x) = x, down to subnormals.
  for (float x : {1e-20f, 1e-38f, 1e-44f})
    EXPECT_EQ(vecTanh(x), x) << x;
  expectOddBitwise(vecTanh);
}

} // namespace
