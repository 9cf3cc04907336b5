//===- Reduce.cpp - Import of reductions and softmax ----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

template <typename Op> LogicalResult importReduce(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = shapeOf(*x).size();
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  bool axesInput = std::is_same_v<Op, ReduceSumOp> ? ctx.opset >= 13
                                                    : ctx.opset >= 18;
  std::vector<int64_t> axes;
  if (axesInput) {
    if (ctx.hasInput(1)) {
      auto known = ctx.constInts(1);
      if (!known)
        return ctx.fail("axes must be a compile-time constant");
      axes = *known;
    }
  } else {
    axes = ctx.intsAttr("axes", {});
  }
  if (axes.empty()) {
    if (ctx.intAttr("noop_with_empty_axes", 0)) {
      ctx.bind(0, *x);
      return success();
    }
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  SmallVector<int64_t> normalized;
  for (int64_t axis : axes) {
    auto n = normalizeAxis(ctx, axis, rank);
    if (failed(n))
      return failure();
    normalized.push_back(*n);
  }
  llvm::sort(normalized);
  normalized.erase(std::unique(normalized.begin(), normalized.end()),
                   normalized.end());
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<Op>(ctx.loc(), *x, b.getDenseI64ArrayAttr(normalized),
                           b.getBoolAttr(ctx.intAttr("keepdims", 1))));
  return success();
}

template <typename Op> LogicalResult importSoftmax(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  int64_t rank = shape.size();
  auto axis = normalizeAxis(ctx, ctx.intAttr("axis", ctx.opset >= 13 ? -1 : 1),
                            rank);
  if (failed(axis))
    return failure();
  OpBuilder &b = ctx.builder;
  Location loc = ctx.loc();
  if (ctx.opset >= 13 || *axis == rank - 1) {
    ctx.bind(0, b.create<Op>(loc, x->getType(), *x,
                             b.getI64IntegerAttr(*axis)));
    return success();
  }
  // Before opset 13 the input is coerced to 2-D at `axis`.
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < *axis ? outer : inner) *= shape[i];
  auto element = cast<RankedTensorType>(x->getType()).getElementType();
  auto flatType = RankedTensorType::get({outer, inner}, element);
  Value flat = b.create<ReshapeOp>(loc, flatType, *x);
  Value y = b.create<Op>(loc, flatType, flat, b.getI64IntegerAttr(1));
  ctx.bind(0, b.create<ReshapeOp>(loc, x->getType(), y));
  return success();
}

} // namespace

void mtc::import::registerReduceImporters(llvm::StringMap<OpImporter> &table) {
  table["LogSoftmax"] = importSoftmax<LogSoftmaxOp>;
  table["ReduceMean"] = importReduce<ReduceMeanOp>;
  table["ReduceSum"] = importReduce<ReduceSumOp>;
  table["Softmax"] = importSoftmax<SoftmaxOp>;
}
