//===- ScalarConstant.h - The value of a one-element constant ---*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_PASSES_LIB_SCALARCONSTANT_H
#define MTC_PASSES_LIB_SCALARCONSTANT_H

#include "mtc/Dialect/Mtc/IR/MtcOps.h"

#include <optional>

namespace mtc {

/// The value of a one-element float constant (a scale, an epsilon, a mask
/// fill), or nothing.
inline std::optional<float> scalarConstant(mlir::Value v) {
  auto constant = v.getDefiningOp<ConstantOp>();
  if (!constant || getNumElements(v.getType()) != 1)
    return std::nullopt;
  auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(constant.getValue());
  if (!dense || !mlir::isa<mlir::FloatType>(dense.getElementType()))
    return std::nullopt;
  return (*dense.getValues<mlir::APFloat>().begin()).convertToFloat();
}

} // namespace mtc

#endif // MTC_PASSES_LIB_SCALARCONSTANT_H
