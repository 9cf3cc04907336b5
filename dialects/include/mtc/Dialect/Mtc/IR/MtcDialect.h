//===- MtcDialect.h - mtc dialect ---------------------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DIALECT_MTC_IR_MTCDIALECT_H
#define MTC_DIALECT_MTC_IR_MTCDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Dialect.h"

#include "mtc/Dialect/Mtc/IR/MtcOpsDialect.h.inc"

#endif // MTC_DIALECT_MTC_IR_MTCDIALECT_H
