//===- Half.h - bfloat16 and float16 storage ---------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Conversions between float32 and the two 16-bit storage formats, bit-exact
// with the hardware's: round to nearest, ties to even; NaN stays NaN (made
// quiet); float16 keeps subnormals and overflows to infinity past 65504.
// The CPU target stores low-precision tensors through these, so the CPU
// trainer rounds exactly where a GPU would. Header-only, usable from CUDA
// device code.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_HALF_H
#define MTC_RUNTIME_HALF_H

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define MTC_HOST_DEVICE __host__ __device__
#else
#define MTC_HOST_DEVICE
#endif

namespace mtc::rt {

MTC_HOST_DEVICE inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

MTC_HOST_DEVICE inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// float32 -> bfloat16 (the top 16 bits, rounded to nearest even).
MTC_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

MTC_HOST_DEVICE inline float bf16ToFloat(uint16_t h) {
  return bitsToFloat(static_cast<uint32_t>(h) << 16);
}

/// float32 -> IEEE binary16, rounded to nearest even.
MTC_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) // NaN: keep the top of the payload, quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) // 65520 and above round to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t exponent = abs >> 23;
  uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  // Normal halves keep 10 of the 23 mantissa bits; below 2^-14 the value
  // is a multiple of 2^-24 and more bits go.
  uint32_t shift = exponent >= 113 ? 13 : 126 - exponent;
  if (shift > 24) // below 2^-25: rounds to zero
    return static_cast<uint16_t>(sign);
  uint32_t kept = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u)))
    ++kept; // a carry into the exponent field is the right result
  uint32_t bits = exponent >= 113 ? ((exponent - 112) << 10) + (kept - 0x400u)
                                  : kept;
  return static_cast<uint16_t>(sign | bits);
}

MTC_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) // infinity or NaN
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa x 2^-24, exact in float32.
  float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return bitsToFloat(sign | floatBits(magnitude));
}

/// A stored element as float32, for kernels instantiated per storage type:
/// float32 as is, a 16-bit value widened from bfloat16 when `bf16` (else
/// from float16).
MTC_HOST_DEVICE inline float storedToFloat(float v, bool) { return v; }
MTC_HOST_DEVICE inline float storedToFloat(uint16_t h, bool bf16) {
  return bf16 ? bf16ToFloat(h) : halfToFloat(h);
}

/// Stores float32 v as `*p` holds it: as is, or rounded to 16 bits
/// (bfloat16 when `bf16`, else float16) as a conversion rounds it.
MTC_HOST_DEVICE inline void storeFloat(float *p, float v, bool) { *p = v; }
MTC_HOST_DEVICE inline void storeFloat(uint16_t *p, float v, bool bf16) {
  *p = bf16 ? floatToBf16(v) : floatToHalf(v);
}

} // namespace mtc::rt

#endif // MTC_RUNTIME_HALF_H
