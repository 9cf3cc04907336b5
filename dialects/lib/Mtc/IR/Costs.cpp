//===- Costs.cpp - FLOP and scratch estimates of the mtc ops --------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// FLOPs count a multiply-add as two operations and every other arithmetic
// operation (including exp, log, tanh) as one, the convention of the usual
// model FLOP counters. Pure data movement costs 0 FLOPs; its price shows up
// in getBytesMoved().
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/runtime/Kernels.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mtc;

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

static int64_t numel(Value v) { return getNumElements(v.getType()); }

/// Whether `v` is stored in bfloat16 or float16.
static bool isStorage16(Value v) {
  Type e = cast<RankedTensorType>(v.getType()).getElementType();
  return e.isBF16() || e.isF16();
}

int64_t ConstantOp::getFlops() { return 0; }

#define MTC_ELEMENTWISE_FLOPS(OP, PER_ELEMENT)                                 \
  int64_t OP::getFlops() { return PER_ELEMENT * numel(getOutput()); }
MTC_ELEMENTWISE_FLOPS(ReluOp, 1)
MTC_ELEMENTWISE_FLOPS(TanhOp, 1)
MTC_ELEMENTWISE_FLOPS(SigmoidOp, 3)
MTC_ELEMENTWISE_FLOPS(ExpOp, 1)
MTC_ELEMENTWISE_FLOPS(LogOp, 1)
MTC_ELEMENTWISE_FLOPS(NegOp, 1)
MTC_ELEMENTWISE_FLOPS(ConvertOp, 1)
MTC_ELEMENTWISE_FLOPS(SqrtOp, 1)
MTC_ELEMENTWISE_FLOPS(ErfOp, 1)
MTC_ELEMENTWISE_FLOPS(ClipOp, 1)
MTC_ELEMENTWISE_FLOPS(ClipGradOp, 1)
MTC_ELEMENTWISE_FLOPS(SelectOp, 1)
MTC_ELEMENTWISE_FLOPS(CompareOp, 1)
MTC_ELEMENTWISE_FLOPS(NotOp, 1)
MTC_ELEMENTWISE_FLOPS(DropoutOp, 2)
MTC_ELEMENTWISE_FLOPS(DropoutGradOp, 2)
MTC_ELEMENTWISE_FLOPS(GatherOp, 0)
MTC_ELEMENTWISE_FLOPS(ConcatOp, 0)
MTC_ELEMENTWISE_FLOPS(SliceGradOp, 0)
MTC_ELEMENTWISE_FLOPS(AddOp, 1)
MTC_ELEMENTWISE_FLOPS(SubOp, 1)
MTC_ELEMENTWISE_FLOPS(MulOp, 1)
MTC_ELEMENTWISE_FLOPS(DivOp, 1)
MTC_ELEMENTWISE_FLOPS(ReluGradOp, 1)
MTC_ELEMENTWISE_FLOPS(SoftmaxOp, 5)
MTC_ELEMENTWISE_FLOPS(LogSoftmaxOp, 5)
MTC_ELEMENTWISE_FLOPS(SoftmaxGradOp, 4)
MTC_ELEMENTWISE_FLOPS(SoftmaxCrossEntropyGradOp, 3)
MTC_ELEMENTWISE_FLOPS(ReshapeOp, 0)
MTC_ELEMENTWISE_FLOPS(ExpandOp, 0)
MTC_ELEMENTWISE_FLOPS(TransposeOp, 0)
MTC_ELEMENTWISE_FLOPS(PadOp, 0)
MTC_ELEMENTWISE_FLOPS(SliceOp, 0)
#undef MTC_ELEMENTWISE_FLOPS

int64_t SgdUpdateOp::getFlops() { return 4 * numel(getParam()); }
int64_t SgdMomentumUpdateOp::getFlops() { return 7 * numel(getParam()); }
int64_t AdamWUpdateOp::getFlops() { return 14 * numel(getParam()); }
// Parameter, moments and gradient read, the first three written; a 16-bit
// copy is written, not read.
int64_t AdamWUpdateOp::getBytesMoved() {
  int64_t bytes = 7 * getTensorBytes(getParam().getType());
  if (Value status = getGradStatus())
    bytes += getTensorBytes(status.getType());
  if (Value copy = getParam16())
    bytes += getTensorBytes(copy.getType());
  return bytes;
}
int64_t FusedOp::getFlops() {
  int64_t flops = 0;
  for (Operation &op : getBody().front().without_terminator())
    if (auto cost = dyn_cast<CostOpInterface>(op))
      flops += cost.getFlops();
  return flops;
}
int64_t GradCheckOp::getFlops() {
  int64_t n = 0;
  for (Value g : getGrads())
    n += numel(g);
  return n;
}

int64_t MatMulOp::getFlops() {
  ArrayRef<int64_t> a = shapeOf(getA());
  int64_t k = a[a.size() - (getTransposeA() ? 2 : 1)];
  return 2 * numel(getOutput()) * k + (getBias() ? numel(getOutput()) : 0);
}

int64_t MatMulBiasGradOp::getFlops() {
  ArrayRef<int64_t> a = shapeOf(getA());
  int64_t k = a[getTransposeA() ? 0 : 1];
  return 2 * numel(getOutput()) * k + k * numel(getBiasGrad());
}

/// A GELU epilogue's GEMM folds the rows of `a` together.
static int64_t geluGemmFlops(Value a, Value output) {
  return 2 * numel(output) * shapeOf(a).back();
}

// GELU's tanh form: about 10 operations an element, its derivative 14.
int64_t MatMulGeluOp::getFlops() {
  return geluGemmFlops(getA(), getOutput()) +
         (getBias() ? 11 : 10) * numel(getOutput());
}

int64_t MatMulGeluGradOp::getFlops() {
  return geluGemmFlops(getA(), getOutput()) + 14 * numel(getOutput());
}

/// Multiply-adds of the convolution whose input, weight and output shapes
/// are given.
static int64_t convMacs(ArrayRef<int64_t> w, ArrayRef<int64_t> y) {
  return y[0] * y[1] * y[2] * y[3] * w[1] * w[2] * w[3];
}

/// The runtime's parameters of convolution `op` as its module plans it
/// (mtc::convGemmColumns).
static rt::Conv2dParams convParams(Operation *op, ArrayRef<int64_t> x,
                                   ArrayRef<int64_t> w, ArrayRef<int64_t> y,
                                   ArrayRef<int64_t> strides,
                                   ArrayRef<int64_t> pads,
                                   ArrayRef<int64_t> dilations,
                                   int64_t group) {
  rt::Conv2dParams p;
  p.gemmColumns = convGemmColumns(op);
  p.n = x[0], p.c = x[1], p.h = x[2], p.w = x[3];
  p.k = w[0], p.kh = w[2], p.kw = w[3];
  p.oh = y[2], p.ow = y[3];
  p.strideH = strides[0], p.strideW = strides[1];
  p.padTop = pads[0], p.padLeft = pads[1];
  p.dilationH = dilations[0], p.dilationW = dilations[1];
  p.groups = group;
  return p;
}

int64_t ConvOp::getFlops() {
  int64_t bias = getBias() ? numel(getOutput()) : 0;
  return 2 * convMacs(shapeOf(getWeight()), shapeOf(getOutput())) + bias;
}
/// 16-bit GEMM operands are widened to float32 before the multiply (the
/// CPU's BLAS), unless the target multiplies them directly (cuBLAS).
static int64_t widenedBytes(Operation *op, Value a, Value b) {
  if (!isStorage16(a) || op->hasAttr(attr::kNative16BitGemm))
    return 0;
  return 4 * (numel(a) + numel(b));
}

int64_t MatMulOp::getWorkspaceBytes() {
  // A 16-bit result of widened operands is summed in float32 first.
  int64_t sums = isStorage16(getOutput()) &&
                         !(*this)->hasAttr(attr::kNative16BitGemm)
                     ? 4 * numel(getOutput())
                     : 0;
  return widenedBytes(*this, getA(), getB()) + sums;
}

int64_t MatMulBiasGradOp::getWorkspaceBytes() {
  return widenedBytes(*this, getA(), getB());
}

/// Without a 16-bit GEMM (the CPU), the float32 sums of a 16-bit result go
/// to the workspace before its epilogue.
static int64_t geluSumsBytes(Operation *op, Value output) {
  return isStorage16(output) && !op->hasAttr(attr::kNative16BitGemm)
             ? 4 * numel(output)
             : 0;
}

int64_t MatMulGeluOp::getWorkspaceBytes() {
  return widenedBytes(*this, getA(), getB()) +
         geluSumsBytes(*this, getOutput());
}

int64_t MatMulGeluGradOp::getWorkspaceBytes() {
  return widenedBytes(*this, getA(), getB()) +
         geluSumsBytes(*this, getOutput());
}

/// A convolution kernel as the runtime plans it: its parameters, which of
/// the three kernels, and how its operands are stored.
struct ConvKernelPlan {
  rt::Conv2dParams params;
  rt::ConvKernel kernel;
  bool storage16, native16;

  int64_t workspaceBytes() const {
    return rt::conv2dWorkspaceBytes(params, kernel, storage16, native16);
  }
  int64_t scratchTraffic() const {
    return rt::conv2dScratchTraffic(params, kernel, storage16, native16);
  }
};

/// The plan of convolution kernel `op`: `x` the forward's input (or
/// backward data's result), `w` the weight (or backward filter's result),
/// `y` the forward's output (or the output gradient), `stored` the operand
/// whose storage the kernel's entry point follows.
template <typename Op>
static ConvKernelPlan planOf(Op op, rt::ConvKernel kernel, Value x, Value w,
                             Value y, Value stored) {
  return {convParams(op, shapeOf(x), shapeOf(w), shapeOf(y), op.getStrides(),
                     op.getPads(), op.getDilations(), op.getGroup()),
          kernel, isStorage16(stored), op->hasAttr(attr::kNative16BitGemm)};
}
static ConvKernelPlan planOf(ConvOp op) {
  return planOf(op, rt::ConvKernel::Forward, op.getInput(), op.getWeight(),
                op.getOutput(), op.getInput());
}
static ConvKernelPlan planOf(ConvBackwardDataOp op) {
  return planOf(op, rt::ConvKernel::BackwardData, op.getOutput(),
                op.getWeight(), op.getGrad(), op.getGrad());
}
static ConvKernelPlan planOf(ConvBackwardFilterOp op) {
  return planOf(op, rt::ConvKernel::BackwardFilter, op.getInput(),
                op.getOutput(), op.getGrad(), op.getGrad());
}

/// What every op moves by default: its operands read and results written
/// once.
static int64_t operandAndResultBytes(Operation *op) {
  int64_t bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += getTensorBytes(t);
  for (Type t : op->getResultTypes())
    bytes += getTensorBytes(t);
  return bytes;
}

// A convolution's im2col and staging matrices are written and read back on
// top of its operands (rt::conv2dScratchTraffic): with 3x3 taps, nine
// times the input twice.
int64_t ConvOp::getWorkspaceBytes() { return planOf(*this).workspaceBytes(); }
int64_t ConvOp::getBytesMoved() {
  return operandAndResultBytes(*this) + planOf(*this).scratchTraffic();
}

int64_t ConvBackwardDataOp::getFlops() {
  return 2 * convMacs(shapeOf(getWeight()), shapeOf(getGrad()));
}
int64_t ConvBackwardDataOp::getWorkspaceBytes() {
  return planOf(*this).workspaceBytes();
}
int64_t ConvBackwardDataOp::getBytesMoved() {
  return operandAndResultBytes(*this) + planOf(*this).scratchTraffic();
}

int64_t ConvBackwardFilterOp::getFlops() {
  return 2 * convMacs(shapeOf(getOutput()), shapeOf(getGrad()));
}
int64_t ConvBackwardFilterOp::getWorkspaceBytes() {
  return planOf(*this).workspaceBytes();
}
int64_t ConvBackwardFilterOp::getBytesMoved() {
  return operandAndResultBytes(*this) + planOf(*this).scratchTraffic();
}

int64_t mtc::convGemmColumns(Operation *op) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op)
                                  : op->getParentOfType<ModuleOp>();
  if (!module)
    return rt::kConvGemmColumnsCpu;
  if (auto columns = module->getAttrOfType<IntegerAttr>(attr::kConvGemmColumns))
    return columns.getInt();
  auto target = module->getAttrOfType<StringAttr>(attr::kTarget);
  return target && target.getValue() == "cuda" ? rt::kConvGemmColumnsCuda
                                               : rt::kConvGemmColumnsCpu;
}

static int64_t window(ArrayRef<int64_t> kernel) { return kernel[0] * kernel[1]; }

int64_t MaxPoolOp::getFlops() {
  return numel(getOutput()) * window(getKernelShape());
}
int64_t MaxPoolGradOp::getFlops() {
  return numel(getGrad()) * window(getKernelShape());
}
int64_t AvgPoolOp::getFlops() {
  return numel(getOutput()) * window(getKernelShape());
}
int64_t AvgPoolGradOp::getFlops() {
  return numel(getGrad()) * window(getKernelShape());
}
int64_t GlobalAvgPoolOp::getFlops() { return numel(getInput()); }
int64_t ReduceSumOp::getFlops() { return numel(getInput()); }
int64_t ReduceMeanOp::getFlops() { return numel(getInput()); }
int64_t SoftmaxCrossEntropyOp::getFlops() { return 5 * numel(getLogits()); }
int64_t SoftmaxCrossEntropyWithGradOp::getFlops() {
  return 8 * numel(getLogits());
}
// The logits are read twice (maximum and sum from the cache, then the
// gradient); on CUDA once when a row fits the shared memory every sm_80 or
// newer block may opt into (163 KiB, less the reduction scratch), where
// the kernel stages it.
int64_t SoftmaxCrossEntropyWithGradOp::getBytesMoved() {
  constexpr int64_t kStagedRowBytes = (163 << 10) - 2048;
  auto module = (*this)->getParentOfType<ModuleOp>();
  auto target =
      module ? module->getAttrOfType<StringAttr>(attr::kTarget) : nullptr;
  ArrayRef<int64_t> shape = shapeOf(getLogits());
  int64_t rowBytes = getTensorBytes(getLogits().getType()) /
                     std::max<int64_t>(1, shape[0]);
  int64_t reads =
      target && target.getValue() == "cuda" && rowBytes <= kStagedRowBytes ? 1
                                                                           : 2;
  return reads * getTensorBytes(getLogits().getType()) +
         getTensorBytes(getLabels().getType()) +
         getTensorBytes(getDlogits().getType());
}
int64_t SoftmaxCrossEntropyWithGradOp::getWorkspaceBytes() {
  return static_cast<int64_t>(
      rt::softmaxCrossEntropyWithGradWorkspaceBytes(shapeOf(getLogits())[0]));
}
int64_t SoftmaxCrossEntropyLossOp::getFlops() {
  return 4 * numel(getLogits());
}
// The logits are read once (maximum and sum of a row in the cache).
int64_t SoftmaxCrossEntropyLossOp::getBytesMoved() {
  return getTensorBytes(getLogits().getType()) +
         getTensorBytes(getLabels().getType());
}
int64_t SoftmaxCrossEntropyLossOp::getWorkspaceBytes() {
  return static_cast<int64_t>(
      rt::softmaxCrossEntropyWithGradWorkspaceBytes(shapeOf(getLogits())[0]));
}
int64_t AccumulateGradOp::getFlops() { return numel(getGrad()); }
int64_t CountCorrectOp::getFlops() { return numel(getLogits()); }

int64_t BatchNormTrainOp::getFlops() { return 8 * numel(getInput()); }
int64_t BatchNormTrainGradOp::getFlops() { return 10 * numel(getInput()); }
int64_t LayerNormOp::getFlops() { return 8 * numel(getInput()); }
int64_t LayerNormGradOp::getFlops() { return 10 * numel(getInput()); }
int64_t GatherGradOp::getFlops() {
  return numel(getGrad()) + (getAccumulate() ? numel(getOutput()) : 0);
}
int64_t GatherGradOp::getWorkspaceBytes() {
  if (!getAccumulate())
    return 0;
  ArrayRef<int64_t> shape = shapeOf(getOutput());
  int64_t axis = getAxis(), outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
  return static_cast<int64_t>(rt::gatherBackwardAccumulateWorkspaceBytes(
      outer, shape[axis], inner, numel(getIndices())));
}

static_assert(kMaxAttentionHeadDim == rt::kMaxAttentionHeadDim,
              "the verifier and the fusion pass admit what the kernels take");

/// Attention's scores (B x Sq x Sk, or under `causal` the B x sum over i of
/// min(i + 1, Sk) that query i sees: the kernels skip the rest) and its two
/// products: Q K^T (2 D flops per score), P V (2 Dv) and the softmax (5).
static int64_t attentionScores(Value query, Value key, bool seqMajor,
                               bool causal) {
  AttentionShape q = attentionShape(shapeOf(query), seqMajor);
  int64_t sq = q.seq, sk = attentionShape(shapeOf(key), seqMajor).seq;
  int64_t perHead = sq * sk;
  if (causal) {
    int64_t ramp = std::min(sq, sk); // queries 0 .. ramp-1 see i + 1 keys
    perHead = ramp * (ramp + 1) / 2 + (sq - ramp) * sk;
  }
  return numel(query) / (sq * shapeOf(query).back()) * perHead;
}
int64_t AttentionOp::getFlops() {
  int64_t d = shapeOf(getQuery()).back(), dv = shapeOf(getValue()).back();
  return attentionScores(getQuery(), getKey(), getSeqMajor(), getCausal()) *
         (2 * d + 2 * dv + 5);
}
/// The backward as the kernels run it: the scores, probabilities and dO V^T
/// twice (once for dQ, once for dK and dV), then dQ, dK (2 D each) and dV
/// (2 Dv).
int64_t AttentionGradOp::getFlops() {
  int64_t d = shapeOf(getQuery()).back(), dv = shapeOf(getValue()).back();
  return attentionScores(getQuery(), getKey(), getSeqMajor(), getCausal()) *
         (2 * (2 * d + 2 * dv + 5) + 4 * d + 2 * dv);
}
