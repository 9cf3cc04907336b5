//===- ConvOperand.h - A convolution operand as stored ----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Shared by cpu/Conv.cpp and cuda/Conv.cu: a convolution's shape, and its
// operands as stored: the kernels read their input, weight and
// output-gradient operands either as float32 or as 16-bit values, widened
// on the fly (into the op's planned workspace) or, on CUDA, multiplied as
// they are.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_CONVOPERAND_H
#define MTC_RUNTIME_LIB_CONVOPERAND_H

#include "Context.h"

#include "mtc/runtime/Half.h" // MTC_HOST_DEVICE
#include "mtc/runtime/Kernels.h"

#include <cstdint>
#include <string>
#include <type_traits>

namespace mtc::rt {

/// The GEMM view of a convolution.
struct ConvShape {
  int64_t cg, kg;  // input / output channels per group
  int64_t patch;   // cg * kh * kw: rows of the im2col matrix
  int64_t pixels;  // oh * ow: columns of one image in the im2col matrix
  int64_t inPlane; // h * w
  int64_t images;  // images per GEMM (convImagesPerGemm)
};

inline ConvShape convShapeOf(const Conv2dParams &p) {
  ConvShape s;
  s.cg = p.c / p.groups;
  s.kg = p.k / p.groups;
  s.patch = s.cg * p.kh * p.kw;
  s.pixels = p.oh * p.ow;
  s.inPlane = p.h * p.w;
  s.images = convImagesPerGemm(p);
  return s;
}

/// Reports (as `what`) parameters no convolution has.
inline bool validConvParams(Context &ctx, const Conv2dParams &p,
                            const char *what) {
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

/// A read-only operand as stored: float32, or 16 bits in `storage`.
struct Operand {
  const void *data;
  bool low;
  Storage16 storage;
};

inline Operand operand(const float *x) { return {x, false, Storage16::Bf16}; }
inline Operand operand(Storage16 storage, const uint16_t *x) {
  return {x, true, storage};
}

/// Elements [offset, offset + n) of `x` as float32: in place, or widened
/// into `scratch` (widen16 on the device the kernels run on).
inline const float *asFloat(Context &ctx, const Operand &x, int64_t offset,
                            int64_t n, float *scratch) {
  if (!x.low)
    return static_cast<const float *>(x.data) + offset;
  widen16(ctx, x.storage, static_cast<const uint16_t *>(x.data) + offset, n,
          scratch);
  return scratch;
}

/// Calls f(T(), std::bool_constant<Bf16>()) for the type operand `x` is
/// stored in: float, or uint16_t holding bfloat16 (Bf16) or float16.
template <typename F> void withStorage(const Operand &x, F &&f) {
  if (!x.low)
    f(float(), std::false_type());
  else if (x.storage == Storage16::Bf16)
    f(uint16_t(), std::true_type());
  else
    f(uint16_t(), std::false_type());
}

/// The outputs [*lo, *hi) of a convolution's `out` along one dim whose tap
/// at offset `off` (tap index * dilation - padding) falls inside the input:
/// 0 <= o * stride + off < in.
MTC_HOST_DEVICE inline void tapRange(int64_t out, int64_t in, int64_t stride,
                                     int64_t off, int64_t *lo, int64_t *hi) {
  *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  *hi = in - 1 - off >= 0 ? (in - 1 - off) / stride + 1 : 0;
  if (*hi > out)
    *hi = out;
  if (*lo > *hi)
    *lo = *hi;
}

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_CONVOPERAND_H
