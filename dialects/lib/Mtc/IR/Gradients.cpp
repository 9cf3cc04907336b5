//===- Gradients.cpp - Reverse-mode rules of the mtc ops ------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Each differentiable op emits its vector-Jacobian product as mtc ops. The
// rules follow PyTorch's autograd formulas so that gradients agree with it to
// rounding: e.g. the division rule is -dy * a / b^2 through the quotient, the
// sqrt rule dy / (2 * y).
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcOps.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mtc;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// A scalar f32 constant (rank 0), broadcast by the binary ops.
Value scalar(OpBuilder &b, Location loc, float value) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, value));
}

/// Sums `grad` (the shape of a broadcast result) down to `target`'s shape:
/// over the leading dims `target` lacks and the dims where it has size 1.
Value reduceToShape(OpBuilder &b, Location loc, Value grad, Value target) {
  ArrayRef<int64_t> from = shapeOf(grad), to = shapeOf(target);
  if (from == to)
    return grad;
  size_t lead = from.size() - to.size();
  SmallVector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i)
    if (i < lead || (to[i - lead] == 1 && from[i] != 1))
      axes.push_back(i);
  Value sum = grad;
  if (!axes.empty())
    sum = b.create<ReduceSumOp>(loc, grad, b.getDenseI64ArrayAttr(axes),
                                b.getBoolAttr(true));
  if (shapeOf(sum) != to)
    sum = b.create<ReshapeOp>(loc, target.getType(), sum);
  return sum;
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// The gradients of relu and clip read the output, not the input: y > 0 iff
// x > 0, and min < y < max iff min < x < max. The output is usually saved
// anyway (the next conv's filter gradient reads it), so the input can die in
// the forward pass.
LogicalResult ReluOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<ReluGradOp>(getLoc(), getType(), dy[0], getOutput()));
  return success();
}

LogicalResult TanhOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  Value ySq = b.create<MulOp>(loc, getOutput(), getOutput());
  Value oneMinus = b.create<SubOp>(loc, scalar(b, loc, 1.0f), ySq);
  dx.push_back(b.create<MulOp>(loc, dy[0], oneMinus));
  return success();
}

LogicalResult SigmoidOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  Value oneMinus = b.create<SubOp>(loc, scalar(b, loc, 1.0f), getOutput());
  Value slope = b.create<MulOp>(loc, getOutput(), oneMinus);
  dx.push_back(b.create<MulOp>(loc, dy[0], slope));
  return success();
}

LogicalResult ExpOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<MulOp>(getLoc(), dy[0], getOutput()));
  return success();
}

LogicalResult LogOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<DivOp>(getLoc(), dy[0], getInput()));
  return success();
}

LogicalResult ConvertOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  dx.push_back(
      b.create<ConvertOp>(getLoc(), getInput().getType(), dy[0]));
  return success();
}

LogicalResult NegOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<NegOp>(getLoc(), getType(), dy[0]));
  return success();
}

LogicalResult SqrtOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  Value twice = b.create<MulOp>(loc, getOutput(), scalar(b, loc, 2.0f));
  dx.push_back(b.create<DivOp>(loc, dy[0], twice));
  return success();
}

LogicalResult AddOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  dx.push_back(reduceToShape(b, getLoc(), dy[0], getLhs()));
  dx.push_back(reduceToShape(b, getLoc(), dy[0], getRhs()));
  return success();
}

LogicalResult SubOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  dx.push_back(reduceToShape(b, loc, dy[0], getLhs()));
  Value neg = b.create<NegOp>(loc, dy[0].getType(), dy[0]);
  dx.push_back(reduceToShape(b, loc, neg, getRhs()));
  return success();
}

LogicalResult MulOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  dx.push_back(
      reduceToShape(b, loc, b.create<MulOp>(loc, dy[0], getRhs()), getLhs()));
  dx.push_back(
      reduceToShape(b, loc, b.create<MulOp>(loc, dy[0], getLhs()), getRhs()));
  return success();
}

LogicalResult DivOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  dx.push_back(
      reduceToShape(b, loc, b.create<DivOp>(loc, dy[0], getRhs()), getLhs()));
  // d/db (a / b) = -a / b^2 = -y / b.
  Value scaled = b.create<DivOp>(loc, b.create<MulOp>(loc, dy[0], getOutput()),
                                 getRhs());
  Value neg = b.create<NegOp>(loc, scaled.getType(), scaled);
  dx.push_back(reduceToShape(b, loc, neg, getRhs()));
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  if (getBias())
    return emitOpError("a matmul with a bias epilogue is formed after "
                       "autodiff and has no gradient rule");
  bool ta = getTransposeA(), tb = getTransposeB();
  Value g = dy[0];
  auto matmul = [&](Value x, Value y, bool tx, bool ty) -> Value {
    return b.create<MatMulOp>(loc, x, y, Value(), b.getBoolAttr(tx),
                              b.getBoolAttr(ty));
  };
  Value da = ta ? matmul(getB(), g, tb, true) : matmul(g, getB(), false, !tb);
  dx.push_back(reduceToShape(b, loc, da, getA()));
  ArrayRef<int64_t> a = shapeOf(getA());
  if (shapeOf(getB()).size() == 2 && a.size() > 2 && !ta) {
    // A weight shared by a batch of inputs: its gradient is one GEMM with
    // the batch folded into the rows (A and dY reshaped: views, no copies),
    // not a batched product summed afterwards.
    auto rows = [&](Value v) -> Value {
      auto type = cast<RankedTensorType>(v.getType());
      int64_t cols = type.getShape().back();
      return b.create<ReshapeOp>(
          loc, type.clone({type.getNumElements() / cols, cols}), v);
    };
    Value a2 = rows(getA()), g2 = rows(g);
    dx.push_back(tb ? matmul(g2, a2, true, false) : matmul(a2, g2, true, false));
    return success();
  }
  Value db = tb ? matmul(g, getA(), true, ta) : matmul(getA(), g, !ta, false);
  dx.push_back(reduceToShape(b, loc, db, getB()));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

LogicalResult ConvOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  dx.push_back(b.create<ConvBackwardDataOp>(
      loc, getInput().getType(), dy[0], getWeight(), getStridesAttr(),
      getPadsAttr(), getDilationsAttr(), getGroupAttr()));
  dx.push_back(b.create<ConvBackwardFilterOp>(
      loc, getWeight().getType(), getInput(), dy[0], getStridesAttr(),
      getPadsAttr(), getDilationsAttr(), getGroupAttr()));
  if (getBias())
    dx.push_back(b.create<ReduceSumOp>(loc, dy[0],
                                       b.getDenseI64ArrayAttr({0, 2, 3}),
                                       b.getBoolAttr(false)));
  return success();
}

LogicalResult MaxPoolOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<MaxPoolGradOp>(
      getLoc(), getInput().getType(), getInput(), dy[0], getKernelShapeAttr(),
      getStridesAttr(), getPadsAttr(), getDilationsAttr(), getCeilModeAttr()));
  return success();
}

LogicalResult AvgPoolOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<AvgPoolGradOp>(
      getLoc(), getInput().getType(), dy[0], getKernelShapeAttr(),
      getStridesAttr(), getPadsAttr(), getDilationsAttr(), getCeilModeAttr(),
      getCountIncludePadAttr()));
  return success();
}

LogicalResult GlobalAvgPoolOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                             SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  int64_t window = getNumElements(getInput().getType()) /
                   getNumElements(getOutput().getType());
  Value scaled = b.create<MulOp>(loc, dy[0], scalar(b, loc, 1.0f / window));
  dx.push_back(b.create<ExpandOp>(loc, getInput().getType(), scaled));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<ReshapeOp>(getLoc(), getInput().getType(), dy[0]));
  return success();
}

LogicalResult ExpandOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &dx) {
  dx.push_back(reduceToShape(b, getLoc(), dy[0], getInput()));
  return success();
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                         SmallVectorImpl<Value> &dx) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  dx.push_back(b.create<TransposeOp>(getLoc(), dy[0],
                                     b.getDenseI64ArrayAttr(inverse)));
  return success();
}

LogicalResult PadOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  size_t rank = shapeOf(getInput()).size();
  SmallVector<int64_t> starts(getPads().take_front(rank));
  SmallVector<int64_t> steps(rank, 1);
  dx.push_back(b.create<SliceOp>(getLoc(), getInput().getType(), dy[0],
                                 b.getDenseI64ArrayAttr(starts),
                                 b.getDenseI64ArrayAttr(steps)));
  return success();
}

LogicalResult SliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                     SmallVectorImpl<Value> &dx) {
  if (llvm::any_of(getSteps(), [](int64_t s) { return s != 1; })) {
    dx.push_back(b.create<SliceGradOp>(getLoc(), getInput().getType(), dy[0],
                                       getStartsAttr(), getStepsAttr()));
    return success();
  }
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getOutput());
  SmallVector<int64_t> pads(getStarts());
  for (size_t i = 0; i < in.size(); ++i)
    pads.push_back(in[i] - getStarts()[i] - out[i]);
  dx.push_back(b.create<PadOp>(getLoc(), dy[0], b.getDenseI64ArrayAttr(pads),
                               b.getF32FloatAttr(0.0f)));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

/// Broadcasts the gradient of a reduction back over the reduced axes.
static Value expandReduced(OpBuilder &b, Location loc, Value grad,
                           Value input, ArrayRef<int64_t> axes) {
  SmallVector<int64_t> kept(shapeOf(input));
  for (int64_t axis : axes)
    kept[axis] = 1;
  auto keptType = RankedTensorType::get(
      kept, cast<RankedTensorType>(grad.getType()).getElementType());
  if (shapeOf(grad) != ArrayRef<int64_t>(kept))
    grad = b.create<ReshapeOp>(loc, keptType, grad);
  if (shapeOf(grad) == shapeOf(input))
    return grad;
  return b.create<ExpandOp>(loc, input.getType(), grad);
}

LogicalResult ReduceSumOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                         SmallVectorImpl<Value> &dx) {
  dx.push_back(expandReduced(b, getLoc(), dy[0], getInput(), getAxes()));
  return success();
}

LogicalResult ReduceMeanOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  int64_t count = 1;
  for (int64_t axis : getAxes())
    count *= shapeOf(getInput())[axis];
  Value scaled = b.create<DivOp>(loc, dy[0], scalar(b, loc, float(count)));
  dx.push_back(expandReduced(b, loc, scaled, getInput(), getAxes()));
  return success();
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<SoftmaxGradOp>(getLoc(), getType(), getOutput(),
                                       dy[0], getAxisAttr(),
                                       b.getBoolAttr(false)));
  return success();
}

LogicalResult LogSoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                          SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<SoftmaxGradOp>(getLoc(), getType(), getOutput(),
                                       dy[0], getAxisAttr(),
                                       b.getBoolAttr(true)));
  return success();
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxCrossEntropyOp::buildGradient(OpBuilder &b,
                                                   ArrayRef<Value> dy,
                                                   SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  Value dlogits;
  if (dy[0])
    dlogits = b.create<SoftmaxCrossEntropyGradOp>(
        loc, getLogProb().getType(), dy[0], getLogProb(), getLabels(),
        getReductionAttr(), getIgnoreIndexAttr());
  if (dy[1]) {
    // The log-probabilities are a log-softmax of the logits along C.
    Value viaLogProb = b.create<SoftmaxGradOp>(
        loc, getLogProb().getType(), getLogProb(), dy[1],
        b.getI64IntegerAttr(1), b.getBoolAttr(true));
    dlogits = dlogits ? Value(b.create<AddOp>(loc, dlogits, viaLogProb))
                      : viaLogProb;
  }
  dx.push_back(dlogits);
  dx.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Ops of real models: erf, clip, select, normalization, dropout, gather,
// concat
//===----------------------------------------------------------------------===//

LogicalResult ErfOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                   SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  // d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2), computed as PyTorch does.
  Value sq = b.create<MulOp>(loc, getInput(), getInput());
  Value e = b.create<ExpOp>(loc, sq.getType(),
                            b.create<NegOp>(loc, sq.getType(), sq));
  Value slope =
      b.create<MulOp>(loc, e, scalar(b, loc, 1.12837916709551257390f));
  dx.push_back(b.create<MulOp>(loc, dy[0], slope));
  return success();
}

LogicalResult ClipOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                    SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<ClipGradOp>(getLoc(), getType(), dy[0], getOutput(),
                                    getMinAttr(), getMaxAttr()));
  return success();
}

LogicalResult SelectOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &dx) {
  Location loc = getLoc();
  Value zero = scalar(b, loc, 0.0f);
  Value toTrue = b.create<SelectOp>(loc, getCondition(), dy[0], zero);
  Value toFalse = b.create<SelectOp>(loc, getCondition(), zero, dy[0]);
  dx.push_back(Value());
  dx.push_back(reduceToShape(b, loc, toTrue, getTrueValue()));
  dx.push_back(reduceToShape(b, loc, toFalse, getFalseValue()));
  return success();
}

LogicalResult BatchNormTrainOp::buildGradient(OpBuilder &b,
                                              ArrayRef<Value> dy,
                                              SmallVectorImpl<Value> &dx) {
  if (!dy[0]) {
    dx.append(5, Value());
    return success();
  }
  // The fusion pass folds activations and residuals in after autodiff.
  if (getActivation() || getResidual())
    return emitOpError("has a fused activation or residual and no gradient "
                       "rule");
  auto grad = b.create<BatchNormTrainGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), getScale().getType(),
                getScale().getType()},
      dy[0], getInput(), getScale(), getSavedMean(), getSavedInvstd(),
      Value(), nullptr, nullptr, nullptr);
  dx.push_back(grad.getInputGrad());
  dx.push_back(grad.getScaleGrad());
  dx.push_back(grad.getBiasGrad());
  dx.push_back(Value());
  dx.push_back(Value());
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                         SmallVectorImpl<Value> &dx) {
  if (!dy[0]) {
    dx.append(getNumOperands(), Value());
    return success();
  }
  auto grad = b.create<LayerNormGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), getScale().getType(),
                getScale().getType()},
      dy[0], getInput(), getScale(), getMean(), getInvstd(), Value(),
      getAxisAttr());
  dx.push_back(grad.getInputGrad());
  dx.push_back(grad.getScaleGrad());
  if (getBias())
    dx.push_back(grad.getBiasGrad());
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                         SmallVectorImpl<Value> &dx) {
  if (!dy[0]) {
    dx.append(getNumOperands(), Value());
    return success();
  }
  auto grad = b.create<AttentionGradOp>(
      getLoc(),
      TypeRange{getQuery().getType(), getKey().getType(), getValue().getType()},
      dy[0], getQuery(), getKey(), getValue(), getOutput(), getLogsumexp(),
      getMask(), getScaleAttr(), getDropoutRatioAttr(), getDropoutStreamAttr(),
      getSeqMajorAttr(), getCausalAttr());
  dx.push_back(grad.getQueryGrad());
  dx.push_back(grad.getKeyGrad());
  dx.push_back(grad.getValueGrad());
  if (getMask())
    dx.push_back(Value());
  return success();
}

LogicalResult DropoutOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                       SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<DropoutGradOp>(getLoc(), getType(), dy[0],
                                       getRatioAttr(), getStreamAttr()));
  return success();
}

LogicalResult GatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &dx) {
  dx.push_back(b.create<GatherGradOp>(getLoc(), getData().getType(), dy[0],
                                      getIndices(), Value(), getAxisAttr()));
  dx.push_back(Value());
  return success();
}

LogicalResult ConcatOp::buildGradient(OpBuilder &b, ArrayRef<Value> dy,
                                      SmallVectorImpl<Value> &dx) {
  int64_t axis = getAxis();
  int64_t offset = 0;
  size_t rank = shapeOf(dy[0]).size();
  for (Value input : getInputs()) {
    auto type = cast<RankedTensorType>(input.getType());
    if (!isa<FloatType>(type.getElementType())) {
      dx.push_back(Value());
    } else {
      SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
      starts[axis] = offset;
      dx.push_back(b.create<SliceOp>(getLoc(), type, dy[0],
                                     b.getDenseI64ArrayAttr(starts),
                                     b.getDenseI64ArrayAttr(steps)));
    }
    offset += type.getDimSize(axis);
  }
  return success();
}
