//===- LayerNormFusion.cpp - Layer norms written out as one op ------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs on the imported model, before autodiff. Exporters older than ONNX
// opset 17 (PyTorch's default before 2.x, so Hugging Face models exported
// that way) write a layer norm out over its trailing dims A:
//
//   d = x - reduce_mean(x, A)
//   y = d / sqrt(reduce_mean(d * d, A) + eps)       (d * d may be Pow(d, 2))
//   y = y * scale (+ bias)
//
// Left so, the forward stores d and the reciprocal's operand for the
// backward, and the backward is a dozen elementwise ops and three
// reductions. As one mtc.layer_norm it is the layer-norm kernels (one pass
// forward, the statistics saved per row) and their gradient, as when the
// model carries a LayerNormalization node. The values differ by rounding
// only (x - mean times 1 / sqrt(var + eps) instead of divided by
// sqrt(var + eps)), as PyTorch's own layer norm, which the exported graph
// stands for, computes.
//
// Each intermediate must have no other reader; the scale must have the
// normalized dims' shape (the bias too, when its add follows).
//
//===----------------------------------------------------------------------===//

#include "ScalarConstant.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mtc {
#define GEN_PASS_DEF_LAYERNORMFUSIONPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// The first normalized dim when `mean` averages `x` over its trailing dims
/// from there on, keeping them as 1.
std::optional<int64_t> trailingMean(ReduceMeanOp mean, Value x) {
  if (!mean || mean.getInput() != x || !mean.getKeepdims())
    return std::nullopt;
  auto rank = static_cast<int64_t>(shapeOf(x).size());
  ArrayRef<int64_t> axes = mean.getAxes();
  if (axes.empty())
    return std::nullopt;
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis != rank - static_cast<int64_t>(axes.size() - i))
      return std::nullopt;
  return axes.front();
}

/// The operand of the binary `op` that is not `v` (nullptr when neither or
/// both are).
template <typename Op> Value otherOperand(Op op, Value v) {
  if (op.getLhs() == v && op.getRhs() != v)
    return op.getRhs();
  if (op.getRhs() == v && op.getLhs() != v)
    return op.getLhs();
  return Value();
}

/// The single user of `v` if it is an `Op`.
template <typename Op> Op soleUser(Value v) {
  if (!v.hasOneUse())
    return Op();
  return dyn_cast<Op>(*v.getUsers().begin());
}

class LayerNormFusionPass
    : public mtc::impl::LayerNormFusionPassBase<LayerNormFusionPass> {
public:
  using LayerNormFusionPassBase::LayerNormFusionPassBase;

  void runOnOperation() override {
    SmallVector<DivOp> divisions;
    getOperation().walk([&](DivOp op) { divisions.push_back(op); });
    for (DivOp div : divisions)
      if (succeeded(fuse(div)))
        ++numFused;
  }

private:
  LogicalResult fuse(DivOp div);
};

/// From the division d / sqrt(var + eps) back to x and forward to the
/// scale and bias.
LogicalResult LayerNormFusionPass::fuse(DivOp div) {
  Value d = div.getLhs();
  auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
  auto center = d.getDefiningOp<SubOp>();
  if (!sqrt || !center || !sqrt.getOutput().hasOneUse())
    return failure();
  Value x = center.getLhs();
  auto mean = center.getRhs().getDefiningOp<ReduceMeanOp>();
  std::optional<int64_t> axis = trailingMean(mean, x);
  if (!axis || !mean.getOutput().hasOneUse() || shapeOf(d) != shapeOf(x))
    return failure();
  // var + eps, either order.
  auto shift = sqrt.getInput().getDefiningOp<AddOp>();
  if (!shift || !shift.getOutput().hasOneUse())
    return failure();
  Value variance = shift.getLhs(), epsilonValue = shift.getRhs();
  std::optional<float> epsilon = scalarConstant(epsilonValue);
  if (!epsilon) {
    std::swap(variance, epsilonValue);
    epsilon = scalarConstant(epsilonValue);
  }
  auto meanSquare = variance.getDefiningOp<ReduceMeanOp>();
  if (!epsilon || !(*epsilon >= 0.0f) || !meanSquare || !variance.hasOneUse())
    return failure();
  auto square = meanSquare.getInput().getDefiningOp<MulOp>();
  if (!square || square.getLhs() != d || square.getRhs() != d ||
      !square.getOutput().hasOneUse() ||
      trailingMean(meanSquare, square.getOutput()) != axis)
    return failure();
  // d is read by the square (twice) and the division alone.
  for (Operation *user : d.getUsers())
    if (user != square && user != div)
      return failure();

  // Scale, then bias, of the normalized dims' shape.
  ArrayRef<int64_t> normalized = shapeOf(x).drop_front(*axis);
  auto scaled = soleUser<MulOp>(div.getOutput());
  Value scale = scaled ? otherOperand(scaled, div.getOutput()) : Value();
  if (!scale || shapeOf(scale) != normalized ||
      scaled.getOutput().getType() != x.getType())
    return failure();
  Value output = scaled.getOutput(), bias;
  if (auto shifted = soleUser<AddOp>(output)) {
    Value b = otherOperand(shifted, output);
    if (b && shapeOf(b) == normalized &&
        shifted.getOutput().getType() == x.getType()) {
      bias = b;
      output = shifted.getOutput();
    }
  }

  // The scale and bias may be defined after the division (an initializer
  // is a block argument; a computed one is not): the op goes where the
  // last of its operands is available, which is before `output`'s op.
  Operation *last = output.getDefiningOp();
  OpBuilder b(last);
  auto norm = b.create<LayerNormOp>(last->getLoc(), x, scale, bias,
                                    b.getI64IntegerAttr(*axis),
                                    b.getF32FloatAttr(*epsilon));
  output.replaceAllUsesWith(norm.getOutput());
  SmallVector<Operation *> chain = {last};
  if (last != scaled)
    chain.push_back(scaled);
  chain.append({div, sqrt, shift, meanSquare, square, center, mean});
  for (Operation *op : chain)
    op->erase();
  if (Operation *constant = epsilonValue.getDefiningOp(); constant->use_empty())
    constant->erase();
  return success();
}

} // namespace
