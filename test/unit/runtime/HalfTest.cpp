//===- HalfTest.cpp - bfloat16 / float16 conversions ----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Checks the conversions against the IEEE definition: every 16-bit value
// converts to float32 exactly and back to itself; a float exactly halfway
// between two neighbours rounds to the even one, and one ulp of float32
// either side rounds to the nearer. Against PyTorch and NumPy on random
// and special values: test/Trainer/half-conversions.test.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace mtc::rt;

namespace {

bool isNan16(uint16_t h, bool bf16) {
  return bf16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f)
              : (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

template <bool Bf16> struct Format {
  static float toFloat(uint16_t h) {
    return Bf16 ? bf16ToFloat(h) : halfToFloat(h);
  }
  static uint16_t fromFloat(float f) {
    return Bf16 ? floatToBf16(f) : floatToHalf(f);
  }
  static constexpr uint16_t kInf = Bf16 ? 0x7f80 : 0x7c00;
};

template <bool Bf16> void roundTripsEveryValue() {
  using F = Format<Bf16>;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = F::toFloat(static_cast<uint16_t>(h));
    uint16_t back = F::fromFloat(f);
    if (isNan16(static_cast<uint16_t>(h), Bf16)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(isNan16(back, Bf16)) << h;
    } else {
      EXPECT_EQ(back, h) << "value " << f;
    }
  }
}

template <bool Bf16> void roundsToNearestEven() {
  using F = Format<Bf16>;
  // Positive finite neighbours h, h + 1 (the sign is symmetric).
  for (uint32_t h = 0; h + 1 < F::kInf; ++h) {
    float lo = F::toFloat(static_cast<uint16_t>(h));
    float hi = F::toFloat(static_cast<uint16_t>(h + 1));
    // Halfway is exact in float32: both have at most 11 significant bits.
    float mid = lo + (hi - lo) / 2;
    uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1)
                            : static_cast<uint16_t>(h);
    ASSERT_EQ(F::fromFloat(mid), even) << "halfway " << mid;
    ASSERT_EQ(F::fromFloat(std::nextafter(mid, 0.0f)), h) << mid;
    ASSERT_EQ(F::fromFloat(std::nextafter(mid, hi)), h + 1) << mid;
    ASSERT_EQ(F::fromFloat(-mid), even | 0x8000) << "halfway " << -mid;
  }
}

TEST(Half, Bf16RoundTripsEveryValue) { roundTripsEveryValue<true>(); }
TEST(Half, Fp16RoundTripsEveryValue) { roundTripsEveryValue<false>(); }
TEST(Half, Bf16RoundsToNearestEven) { roundsToNearestEven<true>(); }
TEST(Half, Fp16RoundsToNearestEven) { roundsToNearestEven<false>(); }

TEST(Half, Fp16Limits) {
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);       // the largest half
  EXPECT_EQ(floatToHalf(65519.99f), 0x7bff);      // below the halfway point
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);       // halfway to 2^16: inf
  EXPECT_EQ(floatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e9f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001); // smallest
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000); // ties to even
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(isNan16(floatToHalf(std::nanf("")), false));
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
}

TEST(Half, Bf16Limits) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80); // inf
  EXPECT_EQ(floatToBf16(3.3895314e38f), 0x7f7f); // the largest bf16
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  EXPECT_TRUE(isNan16(floatToBf16(std::nanf("")), true));
  // A signalling NaN whose payload sits in the low bits stays a NaN.
  EXPECT_TRUE(isNan16(floatToBf16(bitsToFloat(0x7f800001u)), true));
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
}

} // namespace
