//===- MtcDialect.cpp - mtc dialect registration --------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcDialect.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"

using namespace mlir;
using namespace mtc;

#include "mtc/Dialect/Mtc/IR/MtcOpsDialect.cpp.inc"
#include "mtc/Dialect/Mtc/IR/MtcInterfaces.cpp.inc"

void MtcDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mtc/Dialect/Mtc/IR/MtcOps.cpp.inc"
      >();
}

Operation *MtcDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}
