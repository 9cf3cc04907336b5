//===- Elementwise.cpp - Import of elementwise ONNX ops -------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

template <typename Op> LogicalResult importUnary(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ctx.bind(0, ctx.builder.create<Op>(ctx.loc(), x->getType(), *x));
  return success();
}

template <typename Op> LogicalResult importBinary(ImportContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  if (a->getType() != b->getType() &&
      cast<RankedTensorType>(a->getType()).getElementType() !=
          cast<RankedTensorType>(b->getType()).getElementType())
    return ctx.fail("operands have different element types");
  if (!isa<FloatType>(cast<RankedTensorType>(a->getType()).getElementType()))
    return ctx.fail("integer arithmetic on tensors computed at run time is "
                    "not supported");
  if (failed(broadcastShapes(shapeOf(*a), shapeOf(*b))))
    return ctx.fail("operand shapes do not broadcast");
  ctx.bind(0, ctx.builder.create<Op>(ctx.loc(), *a, *b));
  return success();
}

} // namespace

void mtc::import::registerElementwiseImporters(
    llvm::StringMap<OpImporter> &table) {
  table["Add"] = importBinary<AddOp>;
  table["Div"] = importBinary<DivOp>;
  table["Exp"] = importUnary<ExpOp>;
  table["Log"] = importUnary<LogOp>;
  table["Mul"] = importBinary<MulOp>;
  table["Neg"] = importUnary<NegOp>;
  table["Relu"] = importUnary<ReluOp>;
  table["Sigmoid"] = importUnary<SigmoidOp>;
  table["Sqrt"] = importUnary<SqrtOp>;
  table["Sub"] = importBinary<SubOp>;
  table["Tanh"] = importUnary<TanhOp>;
}
