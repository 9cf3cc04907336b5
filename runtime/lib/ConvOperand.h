//===- ConvOperand.h - A convolution operand as stored ----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Shared by cpu/Conv.cpp and cuda/Conv.cu: the convolution kernels read
// their input, weight and output-gradient operands either as float32 or as
// 16-bit values widened on the fly (into the op's planned workspace).
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_CONVOPERAND_H
#define MTC_RUNTIME_LIB_CONVOPERAND_H

#include "mtc/runtime/Kernels.h"

#include <cstdint>

namespace mtc::rt {

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

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_CONVOPERAND_H
