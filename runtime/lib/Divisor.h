//===- Divisor.h - Division by a value fixed for a launch -------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// On the GPU, '/' and '%' of 64-bit integers by a value known only at run
// time are software routines of dozens of instructions; a kernel that
// splits a flat element index into coordinates that way (the
// convolutions' im2col: five divisions an element) spends more on them
// than on moving the element. A Divisor divides dividends below 2^31 by a
// multiplication and a shift instead (Granlund and Montgomery's method):
// with l = ceil(log2 d), k = 31 + l and m = ceil(2^k / d),
//
//   floor(n / d) = floor(n * m / 2^k)   for every 0 <= n < 2^31.
//
// Write m * d = 2^k + e with 0 <= e < d <= 2^l, and n = q * d + r with
// 0 <= r < d: then n * m / 2^k = q + r / d + n * e / (d * 2^k), and
// n * e < 2^31 * 2^l = 2^k keeps the last two terms below 1. Since
// d > 2^(l - 1), m < 2^32, so n * m < 2^63 fits 64 bits. Larger dividends
// or divisors fall back to the plain division.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_DIVISOR_H
#define MTC_RUNTIME_LIB_DIVISOR_H

#include "mtc/runtime/Half.h" // MTC_HOST_DEVICE

#include <cstdint>

namespace mtc::rt {

/// A divisor d >= 1 for dividends 0 <= n < the bound it was made for.
struct Divisor {
  int64_t value = 1;
  /// m, or 0 to divide with '/'.
  uint64_t multiplier = 0;
  int shift = 0;

  MTC_HOST_DEVICE int64_t divide(int64_t n) const {
    if (multiplier == 0)
      return n / value;
    return static_cast<int64_t>((static_cast<uint64_t>(n) * multiplier) >>
                                shift);
  }
  /// n mod d, from its quotient q = divide(n).
  MTC_HOST_DEVICE int64_t remainder(int64_t n, int64_t q) const {
    return n - q * value;
  }
};

/// The divisor d (>= 1) for dividends in [0, bound).
inline Divisor makeDivisor(int64_t d, int64_t bound) {
  Divisor v;
  v.value = d;
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (d < 1 || d >= kLimit || bound > kLimit)
    return v;
  int l = 0;
  while ((int64_t(1) << l) < d)
    ++l;
  v.shift = 31 + l;
  v.multiplier = ((uint64_t(1) << v.shift) + static_cast<uint64_t>(d) - 1) /
                 static_cast<uint64_t>(d);
  return v;
}

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_DIVISOR_H
