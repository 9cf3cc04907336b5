//===- VecMath.h - exp, erf and tanh that vectorize on the CPU --*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// float exp, erf and tanh written as straight-line arithmetic (selects
// instead of branches, bit operations instead of ldexp), so a loop that
// calls them vectorizes: libm's expf, erff and tanhf are calls the compiler
// cannot vectorize, which left every loop with a GELU, a softmax, a sigmoid
// or an attention tile scalar. The CPU runtime and the generated CPU
// kernels use these for every float exp, erf and tanh, so a fused kernel
// and the ops it replaces still
// compute the same bits (the element-wise arithmetic is the same in a vector
// lane and in a scalar tail: the trainer is built without contracting
// a * b + c).
//
// Accuracy (test/unit/runtime/VecMathTest.cpp checks it against libm's
// double exp, erf and tanh): exp and tanh within 1 ulp, erf within 1.02 ulp
// (a sweep of all 2^32 floats gave 0.957, 0.856 and 1.010; libm's erff is
// within 1 ulp, CUDA's within 2), with the IEEE special values: exp(-inf)
// = 0, exp(+inf) and overflow = +inf, gradual underflow to subnormals;
// erf(+-inf) = tanh(+-inf) = +-1, erf(-0) = tanh(-0) = -0; NaN in, NaN out.
//
// The polynomials were fitted for mtc (near-minimax, relative error):
// exp(r) = 1 + r + r^2 P(r) on |r| <= ln(2) / 2, P of degree 5;
// erf(x) = x + x Q(x^2) on |x| < 0.78125, Q of degree 5;
// erf(x) = c + M(s), s = x - 1.390625, c = erf(1.390625) rounded to float,
// on 0.78125 <= x < 2, M of degree 10;
// erf(x) = 1 - exp(-x^2) R(1 / x - 0.375) on 2 <= x < 4 (R approximates the
// scaled complementary error function exp(x^2) erfc(x)), R of degree 5;
// erf(x) rounds to 1 from x = 3.92 on;
// tanh(x) = x + x t Q(t), t = x^2, on |x| < 0.6875, Q of degree 5;
// tanh(x) = c + M(s), s = x - c', on 0.6875 <= x < 1.5 (c' = 1.09375) and
// 1.5 <= x < 3 (c' = 2.25), M of degree 10, c = tanh(c') rounded;
// tanh(x) = 1 - 2z / (1 + z), z = exp(-2x), from 3 on. In each piece the terms
// after the first are small next to the result, so their rounding errors are
// too.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_VECMATH_H
#define MTC_RUNTIME_VECMATH_H

#include <cstdint>
#include <cstring>

// Always inlined: a call left in a loop keeps the loop scalar.
#define MTC_VECMATH_INLINE inline __attribute__((always_inline))

// A function compiled for AVX-512 and AVX2 besides the baseline; the loader
// picks the widest the CPU has (GCC function multiversioning). For the
// loops that compute much per element: the attention tiles and the
// generated kernels that call these functions. In the generated kernels
// (built without contracting a * b + c) the instruction set changes no
// result: every element is computed alone, by the same operations.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MTC_SIMD_CLONES                                                        \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MTC_SIMD_CLONES
#endif

namespace mtc::rt::cpu {

namespace vecmath {

MTC_VECMATH_INLINE uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

MTC_VECMATH_INLINE float floatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// 2^n for -126 <= n <= 127.
MTC_VECMATH_INLINE float powerOfTwo(int32_t n) {
  return floatOf(static_cast<uint32_t>(n + 127) << 23);
}

} // namespace vecmath

/// e^x in float (within 1 ulp).
MTC_VECMATH_INLINE float vecExp(float x) {
  using namespace vecmath;
  // e^x is +inf from 88.73 on and rounds to 0 below -103.98; the clamp
  // keeps n within [-150, 129] (NaN passes: both comparisons are false).
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  // n = round(x / ln 2) by the 1.5 * 2^23 shifter (round to nearest even),
  // r = x - n ln 2 in two parts (the first has 9 significant bits, so
  // n * kLn2Hi is exact).
  constexpr float kLog2e = 1.44269502f;
  constexpr float kShifter = 12582912.0f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  const float shifted = xc * kLog2e + kShifter;
  const float nf = shifted - kShifter;
  const int32_t n = static_cast<int32_t>(bitsOf(shifted) - bitsOf(kShifter));
  const float r = (xc - nf * kLn2Hi) - nf * kLn2Lo;
  float p = 1.98577909e-4f;
  p = p * r + 1.39336230e-3f;
  p = p * r + 8.33336078e-3f;
  p = p * r + 4.16664667e-2f;
  p = p * r + 1.66666672e-1f;
  p = p * r + 0.5f;
  const float y = (p * (r * r) + r) + 1.0f;
  // y * 2^n in two exact steps of 2^(n/2): each factor is a normal float
  // for every n in range, and only the last product rounds (into a
  // subnormal or +inf where the result is one).
  const int32_t half = n >> 1;
  return (y * powerOfTwo(half)) * powerOfTwo(n - half);
}

/// The error function in float (within 1.02 ulp).
MTC_VECMATH_INLINE float vecErf(float x) {
  using namespace vecmath;
  const uint32_t sign = bitsOf(x) & 0x80000000u;
  const float ax = floatOf(bitsOf(x) & 0x7fffffffu);
  // |x| < 0.78125: x + x Q(x^2).
  const float t = x * x;
  float q = -6.61633327e-04f;
  q = q * t + 5.09663438e-03f;
  q = q * t - 2.68264618e-02f;
  q = q * t + 1.12832248e-01f;
  q = q * t - 3.76126081e-01f;
  q = q * t + 1.28379166e-01f;
  const float small = x + x * q;
  // 0.78125 <= |x| < 2: erf(1.390625) (rounded) + M(s), s = |x| - 1.390625
  // (exact).
  const float s = ax - 1.390625f;
  float m = 3.12241056e-04f;
  m = m * s + 1.30850659e-03f;
  m = m * s - 4.06129472e-03f;
  m = m * s - 1.82326196e-03f;
  m = m * s + 2.19839476e-02f;
  m = m * s - 2.85549518e-02f;
  m = m * s - 3.28115076e-02f;
  m = m * s + 1.55959606e-01f;
  m = m * s - 2.26887152e-01f;
  m = m * s + 1.63154811e-01f;
  m = m * s - 2.88845978e-08f;
  const float middle = floatOf(bitsOf(9.50775385e-1f + m) | sign);
  // 2 <= |x|: 1 - e^(-x^2) R(1 / |x| - 0.375), from |x| clamped to [2, 4]
  // (NaN passes both clamps).
  float a = ax < 2.0f ? 2.0f : ax;
  a = a > 4.0f ? 4.0f : a;
  const float w = 1.0f / a - 0.375f;
  float r = -1.27754271e-1f;
  r = r * w + 1.34410501e-1f;
  r = r * w - 2.55841352e-2f;
  r = r * w - 1.86104715e-1f;
  r = r * w + 4.74015802e-1f;
  r = r * w + 1.99072629e-1f;
  const float large = floatOf(bitsOf(1.0f - vecExp(-(a * a)) * r) | sign);
  return ax < 0.78125f ? small : (ax < 2.0f ? middle : large);
}

/// The hyperbolic tangent in float (within 1 ulp).
/// The hyperbolic tangent in float (within 1 ulp).
MTC_VECMATH_INLINE float vecTanh(float x) {
  using namespace vecmath;
  const uint32_t sign = bitsOf(x) & 0x80000000u;
  const float ax = floatOf(bitsOf(x) & 0x7fffffffu);
  // |x| < 0.6875: |x| + |x| t Q(t), t = x^2.
  const float t = x * x;
  float q = 1.93621265e-03f;
  q = q * t - 7.93617219e-03f;
  q = q * t + 2.15965025e-02f;
  q = q * t - 5.39264604e-02f;
  q = q * t + 1.33330345e-01f;
  q = q * t - 3.33333254e-01f;
  const float small = floatOf(bitsOf(ax + ax * (q * t)) | sign);
  // 0.6875 <= |x| < 3: tanh(c) (rounded) + M(s), s = |x| - c (exact), with
  // c = 1.09375 below 1.5 and 2.25 from there: one polynomial evaluation,
  // its coefficients picked per element.
  const bool low = ax < 1.5f;
  const float s = ax - (low ? 1.09375f : 2.25f);
  float m = low ? -3.81709659e-04f : 2.59464796e-05f;
  m = m * s + (low ? 2.75516626e-03f : -8.82628447e-05f);
  m = m * s + (low ? -4.24929196e-03f : 1.59050149e-04f);
  m = m * s + (low ? -1.66005013e-03f : -9.41956241e-05f);
  m = m * s + (low ? 1.90612003e-02f : -7.38280185e-04f);
  m = m * s + (low ? -3.55016738e-02f : 3.98739008e-03f);
  m = m * s + (low ? 8.53602309e-03f : -1.23221911e-02f);
  m = m * s + (low ? 1.10242404e-01f : 2.70874947e-02f);
  m = m * s + (low ? -2.89609253e-01f : -4.25098278e-02f);
  m = m * s + (low ? 3.62808496e-01f : 4.34649177e-02f);
  m = m * s + (low ? 6.74302081e-09f : 2.27168648e-08f);
  const float middle =
      floatOf(bitsOf((low ? 7.98242748e-1f : 9.78026092e-1f) + m) | sign);
  // 3 <= |x|: 1 - 2z / (1 + z), z = e^(-2|x|), from |x| clamped to [3, 9.5]
  // (tanh rounds to 1 from 9.01 on; NaN passes both clamps).
  float a = ax < 3.0f ? 3.0f : ax;
  a = a > 9.5f ? 9.5f : a;
  const float z = vecExp(-2.0f * a);
  const float large = floatOf(bitsOf(1.0f - 2.0f * z / (1.0f + z)) | sign);
  return ax < 0.6875f ? small : (ax < 3.0f ? middle : large);
}

} // namespace mtc::rt::cpu

#endif // MTC_RUNTIME_VECMATH_H
