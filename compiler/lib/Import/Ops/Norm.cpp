//===- Norm.cpp - Import of normalization and dropout ---------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

#include <limits>

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// `[C]` reshaped to `[C, 1, ..., 1]` so that it broadcasts against
/// `[N, C, spatial...]` of rank `rank`.
Value perChannel(ImportContext &ctx, Value v, int64_t rank) {
  SmallVector<int64_t> shape{shapeOf(v)[0]};
  shape.append(rank - 2, 1);
  return ctx.builder.create<ReshapeOp>(
      ctx.loc(), RankedTensorType::get(shape, elementOf(v)), v);
}

LogicalResult importBatchNormalization(ImportContext &ctx) {
  SmallVector<Value> in;
  for (int i = 0; i < 5; ++i) {
    auto v = ctx.input(i);
    if (failed(v))
      return failure();
    in.push_back(*v);
  }
  ArrayRef<int64_t> x = shapeOf(in[0]);
  if (x.size() < 2)
    return ctx.fail("input must be [N, C, ...]");
  for (int i = 1; i < 5; ++i)
    if (shapeOf(in[i]) != ArrayRef<int64_t>{x[1]})
      return ctx.fail("scale, bias, mean and var must have C = " +
                      Twine(x[1]) + " elements");
  OpBuilder &b = ctx.builder;
  Location loc = ctx.loc();
  float eps = ctx.floatAttr("epsilon", 1e-5f);
  // Before opset 14 training was implied by the extra outputs.
  bool training = ctx.opset >= 14 ? ctx.intAttr("training_mode", 0) != 0
                                  : ctx.node->output_size() > 1;
  if (ctx.evalMode)
    training = false;
  if (training) {
    auto op = b.create<BatchNormTrainOp>(
        loc,
        TypeRange{in[0].getType(), in[1].getType(), in[1].getType(),
                  in[1].getType(), in[1].getType()},
        in[0], in[1], in[2], in[3], in[4], /*residual=*/Value(),
        b.getF32FloatAttr(eps),
        b.getF32FloatAttr(ctx.floatAttr("momentum", 0.9f)),
        /*activation=*/nullptr, /*clip_min=*/nullptr, /*clip_max=*/nullptr);
    ctx.bind(0, op.getOutput());
    ctx.bind(1, op.getNewRunningMean());
    ctx.bind(2, op.getNewRunningVar());
    ctx.addBufferUpdate(in[3], op.getNewRunningMean());
    ctx.addBufferUpdate(in[4], op.getNewRunningVar());
    return success();
  }
  // Inference: y = (x - mean) * (scale / sqrt(var + eps)) + bias, in core
  // ops so that fine-tuning through frozen statistics differentiates.
  int64_t rank = x.size();
  Value epsilon = b.create<ConstantOp>(
      loc, DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                  eps));
  Value std = b.create<SqrtOp>(loc, in[4].getType(),
                               b.create<AddOp>(loc, in[4], epsilon));
  Value factor = b.create<DivOp>(loc, in[1], std);
  Value centered = b.create<SubOp>(loc, in[0], perChannel(ctx, in[3], rank));
  Value scaled =
      b.create<MulOp>(loc, centered, perChannel(ctx, factor, rank));
  ctx.bind(0, b.create<AddOp>(loc, scaled, perChannel(ctx, in[2], rank)));
  if (!ctx.evalMode && (ctx.hasOutput(1) || ctx.hasOutput(2)))
    return ctx.fail("running statistics outputs need training_mode = 1");
  // Evaluation leaves the statistics as they are.
  ctx.bind(1, in[3]);
  ctx.bind(2, in[4]);
  return success();
}

LogicalResult importLayerNormalization(ImportContext &ctx) {
  auto x = ctx.input(0), scale = ctx.input(1);
  if (failed(x) || failed(scale))
    return failure();
  Value bias;
  if (ctx.hasInput(2)) {
    auto v = ctx.input(2);
    if (failed(v))
      return failure();
    bias = *v;
  }
  int64_t rank = shapeOf(*x).size();
  auto axis = normalizeAxis(ctx, ctx.intAttr("axis", -1), rank);
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = shapeOf(*x).drop_front(*axis);
  // Scale and bias broadcast to the normalized dims; materialize them at
  // that shape when the model stores them smaller.
  auto fit = [&](Value v) -> FailureOr<Value> {
    if (shapeOf(v) == normalized)
      return v;
    auto shape = broadcastShapes(shapeOf(v), normalized);
    if (failed(shape) || ArrayRef<int64_t>(*shape) != normalized)
      return ctx.fail("scale and bias must broadcast to the normalized dims");
    return Value(ctx.builder.create<ExpandOp>(
        ctx.loc(), RankedTensorType::get(normalized, elementOf(v)), v));
  };
  auto s = fit(*scale);
  if (failed(s))
    return failure();
  if (bias) {
    auto fitted = fit(bias);
    if (failed(fitted))
      return failure();
    bias = *fitted;
  }
  OpBuilder &b = ctx.builder;
  auto op = b.create<LayerNormOp>(ctx.loc(), *x, *s, bias,
                                  b.getI64IntegerAttr(*axis),
                                  b.getF32FloatAttr(ctx.floatAttr("epsilon",
                                                                  1e-5f)));
  ctx.bind(0, op.getOutput());
  ctx.bind(1, op.getMean());
  ctx.bind(2, op.getInvstd());
  return success();
}

LogicalResult importDropout(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  float ratio = 0.5f;
  bool training = false;
  if (ctx.opset >= 12) {
    if (ctx.hasInput(1)) {
      auto r = ctx.constFloats(1);
      if (!r || r->size() != 1)
        return ctx.fail("ratio must be a compile-time scalar");
      ratio = (*r)[0];
    }
    if (ctx.hasInput(2)) {
      auto t = ctx.constFloats(2);
      if (!t || t->size() != 1)
        return ctx.fail("training_mode must be a compile-time scalar");
      training = (*t)[0] != 0;
    }
  } else {
    ratio = ctx.floatAttr("ratio", 0.5f);
    training = !ctx.intAttr("is_test", 0);
  }
  if (ctx.isOutputRead(1))
    return ctx.fail("reading the mask output is not supported");
  if (ratio < 0.0f || ratio >= 1.0f)
    return ctx.fail("ratio must lie in [0, 1), got " + std::to_string(ratio));
  if (!training || ratio == 0.0f || ctx.evalMode) {
    ctx.bind(0, *x);
    return success();
  }
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<DropoutOp>(ctx.loc(), x->getType(), *x,
                                  b.getF32FloatAttr(ratio),
                                  b.getI64IntegerAttr(ctx.nextStream())));
  return success();
}

} // namespace

void mtc::import::registerNormImporters(llvm::StringMap<OpImporter> &table) {
  table["BatchNormalization"] = importBatchNormalization;
  table["Dropout"] = importDropout;
  table["LayerNormalization"] = importLayerNormalization;
}
