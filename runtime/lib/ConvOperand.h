//===- ConvOperand.h - A convolution operand as stored ----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Shared by cpu/Conv.cpp and cuda/Conv.cu: the convolution kernels read
// their input, weight and output-gradient operands either as float32 or as
// 16-bit values widened on the fly.
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

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_CONVOPERAND_H
