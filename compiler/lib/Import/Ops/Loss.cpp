//===- Loss.cpp - Import of loss ops --------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

LogicalResult importSoftmaxCrossEntropyLoss(ImportContext &ctx) {
  auto scores = ctx.input(0), labels = ctx.input(1);
  if (failed(scores) || failed(labels))
    return failure();
  if (ctx.hasInput(2))
    return ctx.fail("class weights are not supported");
  auto labelType = cast<RankedTensorType>(labels->getType());
  if (!labelType.getElementType().isInteger(64))
    return ctx.fail("labels must be int64");
  ArrayRef<int64_t> s = shapeOf(*scores), l = shapeOf(*labels);
  if (s.size() < 2)
    return ctx.fail("scores must be [N, C, ...]");
  SmallVector<int64_t> expected{s[0]};
  expected.append(s.begin() + 2, s.end());
  if (l != ArrayRef<int64_t>(expected))
    return ctx.fail("labels must have the shape of the scores without C");
  std::string reduction = ctx.stringAttr("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return ctx.fail("unknown reduction '" + reduction + "'");
  OpBuilder &b = ctx.builder;
  IntegerAttr ignore;
  if (ctx.attr("ignore_index"))
    ignore = b.getI64IntegerAttr(ctx.intAttr("ignore_index", 0));
  auto op = b.create<SoftmaxCrossEntropyOp>(
      ctx.loc(), *scores, *labels, b.getStringAttr(reduction), ignore);
  ctx.bind(0, op.getLoss());
  ctx.bind(1, op.getLogProb());
  return success();
}

} // namespace

void mtc::import::registerLossImporters(llvm::StringMap<OpImporter> &table) {
  table["SoftmaxCrossEntropyLoss"] = importSoftmaxCrossEntropyLoss;
}
