//===- MtcOps.cpp - mtc op verifiers and shape inference ------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mtc;

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

int64_t mtc::getNumElements(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements();
}

int64_t mtc::getTensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * ((bits + 7) / 8);
}

bool mtc::staysOffArena(BlockArgument arg) {
  auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!func || !arg.use_empty())
    return false;
  unsigned i = arg.getArgNumber();
  auto role = func.getArgAttrOfType<StringAttr>(i, attr::kRole);
  if (!role || (role.getValue() != attr::role::kParam &&
                role.getValue() != attr::role::kBuffer))
    return false;
  auto eval = dyn_cast_or_null<FunctionOpInterface>(
      SymbolTable::lookupNearestSymbolFrom(
          func, StringAttr::get(func->getContext(), attr::kEvalFunction)));
  if (!eval || eval.isExternal())
    return true;
  Attribute name = func.getArgAttr(i, attr::kName);
  return llvm::none_of(eval.getArguments(), [&](BlockArgument e) {
    return eval.getArgAttr(e.getArgNumber(), attr::kName) == name &&
           !e.use_empty();
  });
}

bool mtc::isBatchInput(BlockArgument arg) {
  auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!func)
    return false;
  auto role =
      func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr::kRole);
  return role && role.getValue() == attr::role::kInput;
}

void mtc::eraseDeadPureOps(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (op->use_empty() && isPure(op))
      op->erase();
}

FailureOr<SmallVector<int64_t>> mtc::broadcastShapes(ArrayRef<int64_t> a,
                                                     ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

static RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type element) {
  return RankedTensorType::get(shape, element);
}

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

static Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult ConvertOp::verify() {
  if (getInput().getType().getShape() != getOutput().getType().getShape())
    return emitOpError("changes the shape: ")
           << getInput().getType() << " to " << getOutput().getType();
  return success();
}

OpFoldResult ConvertOp::fold(FoldAdaptor) {
  Value x = getInput();
  if (x.getType() == getType())
    return x;
  // Through a wider type and back: exact.
  if (auto inner = x.getDefiningOp<ConvertOp>()) {
    Value source = inner.getInput();
    auto width = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getElementTypeBitWidth();
    };
    if (source.getType() == getType() && width(x) > width(source))
      return source;
  }
  return {};
}

//===----------------------------------------------------------------------===//
// Elementwise binary ops
//===----------------------------------------------------------------------===//

template <typename Adaptor>
static LogicalResult inferBinary(std::optional<Location> loc, Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  auto shape = broadcastShapes(shapeOf(adaptor.getLhs()),
                               shapeOf(adaptor.getRhs()));
  if (failed(shape))
    return emitOptionalError(loc, "operand shapes do not broadcast");
  if (elementOf(adaptor.getLhs()) != elementOf(adaptor.getRhs()))
    return emitOptionalError(loc, "operand element types differ");
  types.push_back(tensorOf(*shape, elementOf(adaptor.getLhs())));
  return success();
}

#define MTC_BINARY_INFER(OP)                                                   \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                            \
                                     std::optional<Location> loc,              \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    return inferBinary(loc, adaptor, types);                                   \
  }
MTC_BINARY_INFER(AddOp)
MTC_BINARY_INFER(SubOp)
MTC_BINARY_INFER(MulOp)
MTC_BINARY_INFER(DivOp)
#undef MTC_BINARY_INFER

//===----------------------------------------------------------------------===//
// MatMulOp
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> a = shapeOf(adaptor.getA()), b = shapeOf(adaptor.getB());
  if (a.size() < 2 || b.size() < 2)
    return emitOptionalError(loc, "matmul operands must have rank >= 2");
  bool ta = adaptor.getTransposeA(), tb = adaptor.getTransposeB();
  int64_t m = a[a.size() - (ta ? 1 : 2)], ka = a[a.size() - (ta ? 2 : 1)];
  int64_t kb = b[b.size() - (tb ? 1 : 2)], n = b[b.size() - (tb ? 2 : 1)];
  if (ka != kb)
    return emitOptionalError(loc, "matmul inner dimensions differ: " +
                                      Twine(ka) + " vs " + Twine(kb));
  auto batch = broadcastShapes(a.drop_back(2), b.drop_back(2));
  if (failed(batch))
    return emitOptionalError(loc, "matmul batch dimensions do not broadcast");
  if (elementOf(adaptor.getA()) != elementOf(adaptor.getB()))
    return emitOptionalError(loc, "matmul operands are stored in different "
                                  "precisions");
  if (Value bias = adaptor.getBias()) {
    if (b.size() != 2 || ta)
      return emitOptionalError(loc, "a matmul bias needs a 2-D b and a "
                                    "non-transposed a");
    if (shapeOf(bias) != ArrayRef<int64_t>{n})
      return emitOptionalError(loc, "a matmul bias must have shape [" +
                                        Twine(n) + "]");
  }
  SmallVector<int64_t> shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  types.push_back(
      tensorOf(shape, Float32Type::get(adaptor.getA().getContext())));
  return success();
}

LogicalResult MatMulOp::verify() {
  Type out = elementOf(getOutput());
  if (out.isF32())
    return success();
  if (out != elementOf(getA()))
    return emitOpError("a 16-bit result must be stored as the operands are");
  if (shapeOf(getB()).size() != 2 || getTransposeA())
    return emitOpError("a 16-bit result needs a 2-D b and a non-transposed a");
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (shapeOf(getInput()) != shapeOf(getGrad()) ||
      shapeOf(getInputGrad()) != shapeOf(getGrad()))
    return emitOpError("input, grad and input_grad must have one shape");
  if (Type g = elementOf(getGrad()); !g.isF32() && g != elementOf(getInput()))
    return emitOpError("a 16-bit grad needs the input stored alike");
  if (Value acc = getAccumulate();
      acc && acc.getType() != getInputGrad().getType())
    return emitOpError("accumulate must have the input gradient's type");
  if (Value copy = getInputGrad16();
      copy && (shapeOf(copy) != shapeOf(getInputGrad()) ||
               elementOf(copy).isF32() ||
               elementOf(copy) != elementOf(getInput())))
    return emitOpError("input_grad16 must be the input gradient stored as "
                       "the input is");
  return success();
}

LogicalResult AdamWUpdateOp::verify() {
  Value copy = getParam16(), updated = getNewParam16();
  if (!copy != !updated)
    return emitOpError("param16 and new_param16 go together");
  if (copy && (copy.getType() != updated.getType() ||
               shapeOf(copy) != shapeOf(getParam()) || elementOf(copy).isF32()))
    return emitOpError("param16 must be the parameter stored in 16 bits");
  return success();
}

LogicalResult GatherGradOp::verify() {
  if (Value acc = getAccumulate(); acc && acc.getType() != getType())
    return emitOpError("accumulate must have the result's type");
  return success();
}

LogicalResult MatMulBiasGradOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getA()), b = shapeOf(getB());
  if (a.size() != 2 || b.size() != 2)
    return emitOpError("operands must be 2-D");
  if (elementOf(getA()) != elementOf(getB()))
    return emitOpError("operands are stored in different precisions");
  bool ta = getTransposeA(), tb = getTransposeB();
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t n = tb ? b[0] : b[1];
  if ((tb ? b[1] : b[0]) != k)
    return emitOpError("inner dimensions differ");
  if (shapeOf(getOutput()) != ArrayRef<int64_t>{m, n})
    return emitOpError("output must have shape [") << m << ", " << n << "]";
  if (getSumA() ? !ta : tb)
    return emitOpError("the summed operand must be stored [K, ...]: a "
                       "transposed, or b not transposed");
  int64_t sums = getSumA() ? m : n;
  if (shapeOf(getBiasGrad()) != ArrayRef<int64_t>{sums})
    return emitOpError("bias_grad must have shape [") << sums << "]";
  return success();
}

/// Checks a GELU epilogue's GEMM: `a` of rank >= 2 whose rows fold
/// together, a 2-D `b` with the same inner dimension, every one of
/// `stored` (operands and results) of one element type, and `results` of
/// the product's shape.
static LogicalResult verifyGeluGemm(Operation *op, Value a, Value b,
                                    bool transposeB, ArrayRef<Value> stored,
                                    ArrayRef<Value> results) {
  ArrayRef<int64_t> as = shapeOf(a), bs = shapeOf(b);
  if (as.size() < 2 || bs.size() != 2)
    return op->emitOpError("a must have rank >= 2 and b be 2-D");
  int64_t k = transposeB ? bs[1] : bs[0], n = transposeB ? bs[0] : bs[1];
  if (as.back() != k)
    return op->emitOpError("inner dimensions differ");
  for (Value v : stored)
    if (elementOf(v) != elementOf(a))
      return op->emitOpError(
          "operands and results must be stored in one precision");
  SmallVector<int64_t> shape(as.drop_back());
  shape.push_back(n);
  for (Value v : results)
    if (shapeOf(v) != ArrayRef(shape))
      return op->emitOpError("results must have the product's shape");
  return success();
}

LogicalResult MatMulGeluOp::verify() {
  if (Value bias = getBias();
      bias && (!elementOf(bias).isF32() ||
               shapeOf(bias) != ArrayRef<int64_t>{shapeOf(getOutput()).back()}))
    return emitOpError("bias must be float32 with one element per column");
  return verifyGeluGemm(*this, getA(), getB(), getTransposeB(),
                        {getB(), getOutput(), getPre()},
                        {getOutput(), getPre()});
}

LogicalResult MatMulGeluGradOp::verify() {
  return verifyGeluGemm(*this, getA(), getB(), getTransposeB(),
                        {getB(), getPre(), getOutput()},
                        {getPre(), getOutput()});
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

/// Checks the 2-D window attributes shared by conv and pooling ops.
static LogicalResult verifyWindowAttrs(function_ref<InFlightDiagnostic()> err,
                                       ArrayRef<int64_t> strides,
                                       ArrayRef<int64_t> pads,
                                       ArrayRef<int64_t> dilations) {
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4)
    return err() << "expects 2 strides, 2 dilations and 4 pads";
  if (llvm::any_of(strides, [](int64_t s) { return s <= 0; }) ||
      llvm::any_of(dilations, [](int64_t d) { return d <= 0; }) ||
      llvm::any_of(pads, [](int64_t p) { return p < 0; }))
    return err() << "strides and dilations must be positive, pads >= 0";
  return success();
}

static int64_t windowOutput(int64_t in, int64_t kernel, int64_t stride,
                            int64_t padBegin, int64_t padEnd,
                            int64_t dilation, bool ceilMode) {
  int64_t span = in + padBegin + padEnd - dilation * (kernel - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // As PyTorch: the last window must start inside the input or the begin
  // padding.
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> w = shapeOf(adaptor.getWeight());
  ArrayRef<int64_t> s = adaptor.getStrides(), p = adaptor.getPads(),
                    d = adaptor.getDilations();
  if (x.size() != 4 || w.size() != 4 || s.size() != 2 || p.size() != 4 ||
      d.size() != 2)
    return emitOptionalError(loc, "conv expects 4-D input and weight");
  int64_t oh = windowOutput(x[2], w[2], s[0], p[0], p[2], d[0], false);
  int64_t ow = windowOutput(x[3], w[3], s[1], p[1], p[3], d[1], false);
  // 16-bit operands multiply exactly and accumulate in float32.
  types.push_back(tensorOf({x[0], w[0], oh, ow},
                           Float32Type::get(adaptor.getInput().getContext())));
  return success();
}

/// The two tensor operands of a convolution op are stored alike.
static LogicalResult verifyConvStorage(Operation *op) {
  if (elementOf(op->getOperand(0)) != elementOf(op->getOperand(1)))
    return op->emitOpError("operands are stored in different precisions: ")
           << op->getOperand(0).getType() << " and "
           << op->getOperand(1).getType();
  return success();
}

static LogicalResult verifyConvShapes(Operation *op, ArrayRef<int64_t> x,
                                      ArrayRef<int64_t> w,
                                      ArrayRef<int64_t> y,
                                      ArrayRef<int64_t> strides,
                                      ArrayRef<int64_t> pads,
                                      ArrayRef<int64_t> dilations,
                                      int64_t group) {
  auto err = [&] { return op->emitOpError(); };
  if (failed(verifyConvStorage(op)) ||
      failed(verifyWindowAttrs(err, strides, pads, dilations)))
    return failure();
  if (x.size() != 4 || w.size() != 4 || y.size() != 4)
    return op->emitOpError("expects 4-D input, weight and output");
  if (group <= 0 || x[1] % group != 0 || w[0] % group != 0)
    return op->emitOpError("group ")
           << group << " must divide the input and output channels";
  if (w[1] * group != x[1])
    return op->emitOpError("weight has ")
           << w[1] << " input channels per group, expected " << x[1] / group;
  int64_t oh = windowOutput(x[2], w[2], strides[0], pads[0], pads[2],
                            dilations[0], false);
  int64_t ow = windowOutput(x[3], w[3], strides[1], pads[1], pads[3],
                            dilations[1], false);
  if (y[0] != x[0] || y[1] != w[0] || y[2] != oh || y[3] != ow || oh <= 0 ||
      ow <= 0)
    return op->emitOpError("output shape does not match the convolution");
  return success();
}

LogicalResult ConvOp::verify() {
  if (Value b = getBias())
    if (shapeOf(b).size() != 1 || shapeOf(b)[0] != shapeOf(getWeight())[0])
      return emitOpError("bias must have one element per output channel");
  if (Type out = elementOf(getOutput()); !out.isF32()) {
    if (out != elementOf(getInput()) ||
        !(*this)->hasAttr(attr::kNative16BitGemm))
      return emitOpError("a 16-bit result must be stored as the operands "
                         "are, which the convolution multiplies as stored");
    if (getBias() || static_cast<int64_t>(getGroup()) == shapeOf(getInput())[1])
      return emitOpError("a 16-bit result takes neither a bias nor a "
                         "depthwise convolution");
  }
  return verifyConvShapes(*this, shapeOf(getInput()), shapeOf(getWeight()),
                          shapeOf(getOutput()), getStrides(), getPads(),
                          getDilations(), getGroup());
}

LogicalResult ConvBackwardDataOp::verify() {
  if (Type out = elementOf(getOutput());
      !out.isF32() && (out != elementOf(getGrad()) ||
                       !(*this)->hasAttr(attr::kNative16BitGemm)))
    return emitOpError("a 16-bit result must be stored as the operands "
                       "are, which the convolution multiplies as stored");
  return verifyConvShapes(*this, shapeOf(getOutput()), shapeOf(getWeight()),
                          shapeOf(getGrad()), getStrides(), getPads(),
                          getDilations(), getGroup());
}

LogicalResult ConvBackwardFilterOp::verify() {
  return verifyConvShapes(*this, shapeOf(getInput()), shapeOf(getOutput()),
                          shapeOf(getGrad()), getStrides(), getPads(),
                          getDilations(), getGroup());
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

static FailureOr<SmallVector<int64_t>>
inferPoolShape(std::optional<Location> loc, ArrayRef<int64_t> x,
               ArrayRef<int64_t> k, ArrayRef<int64_t> s, ArrayRef<int64_t> p,
               ArrayRef<int64_t> d, bool ceilMode) {
  if (x.size() != 4 || k.size() != 2 || s.size() != 2 || p.size() != 4 ||
      d.size() != 2) {
    (void)emitOptionalError(loc, "pooling expects a 4-D input, 2 kernel "
                                 "dims, 2 strides, 2 dilations and 4 pads");
    return failure();
  }
  return SmallVector<int64_t>{
      x[0], x[1], windowOutput(x[2], k[0], s[0], p[0], p[2], d[0], ceilMode),
      windowOutput(x[3], k[1], s[1], p[1], p[3], d[1], ceilMode)};
}

template <typename Adaptor>
static LogicalResult inferPool(std::optional<Location> loc, Adaptor adaptor,
                               SmallVectorImpl<Type> &types) {
  auto shape = inferPoolShape(loc, shapeOf(adaptor.getInput()),
                              adaptor.getKernelShape(), adaptor.getStrides(),
                              adaptor.getPads(), adaptor.getDilations(),
                              adaptor.getCeilMode());
  if (failed(shape))
    return failure();
  types.push_back(tensorOf(*shape, elementOf(adaptor.getInput())));
  return success();
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferPool(loc, adaptor, types);
}

LogicalResult AvgPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferPool(loc, adaptor, types);
}

template <typename Op> static LogicalResult verifyPool(Op op) {
  auto err = [&] { return op.emitOpError(); };
  if (failed(verifyWindowAttrs(err, op.getStrides(), op.getPads(),
                               op.getDilations())))
    return failure();
  ArrayRef<int64_t> k = op.getKernelShape();
  if (k.size() != 2 || k[0] <= 0 || k[1] <= 0)
    return op.emitOpError("expects a positive 2-D kernel_shape");
  ArrayRef<int64_t> p = op.getPads();
  if (p[0] >= k[0] || p[2] >= k[0] || p[1] >= k[1] || p[3] >= k[1])
    return op.emitOpError("pads must be smaller than the kernel");
  ArrayRef<int64_t> y = shapeOf(op.getOutput());
  if (y.size() != 4 || y[2] <= 0 || y[3] <= 0)
    return op.emitOpError("window does not fit the input");
  return success();
}

LogicalResult MaxPoolOp::verify() { return verifyPool(*this); }
LogicalResult AvgPoolOp::verify() { return verifyPool(*this); }

LogicalResult GlobalAvgPoolOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  if (x.size() < 3)
    return emitOptionalError(loc, "global_avg_pool expects rank >= 3");
  SmallVector<int64_t> shape(x.begin(), x.end());
  std::fill(shape.begin() + 2, shape.end(), 1);
  types.push_back(tensorOf(shape, elementOf(adaptor.getInput())));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  if (getNumElements(getInput().getType()) !=
      getNumElements(getOutput().getType()))
    return emitOpError("element count changes from ")
           << getNumElements(getInput().getType()) << " to "
           << getNumElements(getOutput().getType());
  if (elementOf(getInput()) != elementOf(getOutput()))
    return emitOpError("element type changes");
  return success();
}

LogicalResult ExpandOp::verify() {
  auto shape = broadcastShapes(shapeOf(getInput()), shapeOf(getOutput()));
  if (failed(shape) || ArrayRef<int64_t>(*shape) != shapeOf(getOutput()))
    return emitOpError("input does not broadcast to the result shape");
  if (elementOf(getInput()) != elementOf(getOutput()))
    return emitOpError("element type changes");
  return success();
}

static bool isPermutation(ArrayRef<int64_t> perm) {
  SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
      return false;
    seen[p] = true;
  }
  return true;
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (perm.size() != x.size() || !isPermutation(perm))
    return emitOptionalError(loc, "perm is not a permutation of the dims");
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(x[p]);
  types.push_back(tensorOf(shape, elementOf(adaptor.getInput())));
  return success();
}

LogicalResult TransposeOp::verify() {
  if (!isPermutation(getPerm()) || getPerm().size() != shapeOf(getInput()).size())
    return emitOpError("perm is not a permutation of the dims");
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> pads = adaptor.getPads();
  if (pads.size() != 2 * x.size())
    return emitOptionalError(loc, "pad expects 2 pads per dimension");
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < x.size(); ++i)
    shape.push_back(x[i] + pads[i] + pads[i + x.size()]);
  types.push_back(tensorOf(shape, elementOf(adaptor.getInput())));
  return success();
}

LogicalResult PadOp::verify() {
  if (llvm::any_of(getPads(), [](int64_t p) { return p < 0; }))
    return emitOpError("pads must be non-negative");
  return success();
}

LogicalResult SliceOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput()), y = shapeOf(getOutput());
  if (getStarts().size() != x.size() || getSteps().size() != x.size() ||
      y.size() != x.size())
    return emitOpError("expects one start and step per dimension");
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t start = getStarts()[i], step = getSteps()[i];
    if (step <= 0)
      return emitOpError("steps must be positive");
    if (start < 0 || (y[i] > 0 && start + (y[i] - 1) * step >= x[i]))
      return emitOpError("window leaves the input in dimension ") << i;
  }
  if (elementOf(getInput()) != elementOf(getOutput()))
    return emitOpError("element type changes");
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

static bool validAxes(ArrayRef<int64_t> axes, size_t rank) {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(rank) ||
        (i > 0 && axes[i] <= axes[i - 1]))
      return false;
  return true;
}

template <typename Adaptor>
static LogicalResult inferReduce(std::optional<Location> loc, Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> axes = adaptor.getAxes();
  if (!validAxes(axes, x.size()))
    return emitOptionalError(loc, "axes must be sorted, unique and in range");
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!llvm::is_contained(axes, static_cast<int64_t>(i)))
      shape.push_back(x[i]);
    else if (adaptor.getKeepdims())
      shape.push_back(1);
  }
  types.push_back(tensorOf(shape, elementOf(adaptor.getInput())));
  return success();
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferReduce(loc, adaptor, types);
}
LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferReduce(loc, adaptor, types);
}
template <typename Op> static LogicalResult verifyReduce(Op op) {
  if (!validAxes(op.getAxes(), shapeOf(op.getInput()).size()))
    return op.emitOpError("axes must be sorted, unique and in range");
  return success();
}
LogicalResult ReduceSumOp::verify() { return verifyReduce(*this); }
LogicalResult ReduceMeanOp::verify() { return verifyReduce(*this); }

LogicalResult SoftmaxOp::verify() {
  // The attribute is unsigned: only the upper bound can fail.
  if (getAxis() >= shapeOf(getInput()).size())
    return emitOpError("axis out of range");
  return success();
}
LogicalResult LogSoftmaxOp::verify() {
  // The attribute is unsigned: only the upper bound can fail.
  if (getAxis() >= shapeOf(getInput()).size())
    return emitOpError("axis out of range");
  return success();
}

//===----------------------------------------------------------------------===//
// Compare and select
//===----------------------------------------------------------------------===//

LogicalResult CompareOp::inferReturnTypes(MLIRContext *context,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto shape = broadcastShapes(shapeOf(adaptor.getLhs()),
                               shapeOf(adaptor.getRhs()));
  if (failed(shape))
    return emitOptionalError(loc, "operand shapes do not broadcast");
  types.push_back(tensorOf(*shape, IntegerType::get(context, 1)));
  return success();
}

LogicalResult CompareOp::verify() {
  StringRef p = getPredicate();
  if (p != "eq" && p != "lt" && p != "gt")
    return emitOpError("predicate must be eq, lt or gt, got '") << p << "'";
  if (elementOf(getLhs()) != elementOf(getRhs()))
    return emitOpError("operand element types differ");
  return success();
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto ab = broadcastShapes(shapeOf(adaptor.getTrueValue()),
                            shapeOf(adaptor.getFalseValue()));
  if (failed(ab))
    return emitOptionalError(loc, "operand shapes do not broadcast");
  auto all = broadcastShapes(shapeOf(adaptor.getCondition()), *ab);
  if (failed(all))
    return emitOptionalError(loc, "operand shapes do not broadcast");
  types.push_back(tensorOf(*all, elementOf(adaptor.getTrueValue())));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Whether the 16-bit ones among `values` share one format.
static LogicalResult verifyStoredAlike(Operation *op, ArrayRef<Value> values) {
  Type low;
  for (Value v : values) {
    Type element = elementOf(v);
    if (element.isF32())
      continue;
    if (low && element != low)
      return op->emitOpError("16-bit operands and results must share one "
                             "format");
    low = element;
  }
  return success();
}

LogicalResult MaxPoolGradOp::verify() {
  return verifyStoredAlike(*this, {getInput(), getGrad(), getOutput()});
}

/// The activation attributes of a batch normalization (forward or
/// backward): none, "relu", or "clip" with both bounds.
static LogicalResult verifyNormActivation(Operation *op,
                                          std::optional<StringRef> kind,
                                          bool hasMin, bool hasMax) {
  if (!kind)
    return hasMin || hasMax ? op->emitOpError("clip bounds need activation")
                            : success();
  if (*kind == "relu" && !hasMin && !hasMax)
    return success();
  if (*kind == "clip" && hasMin && hasMax)
    return success();
  return op->emitOpError("activation must be \"relu\", or \"clip\" with "
                         "clip_min and clip_max");
}

LogicalResult BatchNormTrainOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  if (x.size() < 2)
    return emitOpError("input must be [N, C, ...]");
  if (shapeOf(getScale()) != ArrayRef<int64_t>{x[1]})
    return emitOpError("scale, bias and statistics must have C = ")
           << x[1] << " elements";
  if (failed(verifyStoredAlike(*this, {getInput(), getOutput()})))
    return failure();
  if (Value copy = getInput16();
      copy && (shapeOf(copy) != x || elementOf(copy).isF32() ||
               !elementOf(getInput()).isF32() ||
               failed(verifyStoredAlike(*this, {copy, getOutput()}))))
    return emitOpError("input16 must be a float32 input's 16-bit copy");
  if (Value residual = getResidual();
      residual && residual.getType() != getOutput().getType())
    return emitOpError("residual must have the output's type");
  return verifyNormActivation(*this, getActivation(), getClipMinAttr() != nullptr,
                              getClipMaxAttr() != nullptr);
}

LogicalResult BatchNormTrainGradOp::verify() {
  if (getActivation().has_value() != (getActivationOutput() != nullptr))
    return emitOpError("activation and activation_output go together");
  if (Value out = getActivationOutput();
      out && (shapeOf(out) != shapeOf(getGrad()) ||
              elementOf(out) != elementOf(getInput())))
    return emitOpError("activation_output must have the gradient's shape "
                       "and be stored as the input is");
  if (failed(verifyStoredAlike(*this, {getInput(), getInputGrad()})))
    return failure();
  if (!elementOf(getGrad()).isF32() &&
      elementOf(getGrad()) != elementOf(getInput()))
    return emitOpError("a 16-bit grad must be stored as the input is");
  return verifyNormActivation(*this, getActivation(),
                              getClipMinAttr() != nullptr,
                              getClipMaxAttr() != nullptr);
}

static SmallVector<int64_t> rowStatShape(ArrayRef<int64_t> x, int64_t axis) {
  SmallVector<int64_t> shape(x.begin(), x.end());
  for (size_t i = axis; i < shape.size(); ++i)
    shape[i] = 1;
  return shape;
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getInput());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()))
    return emitOptionalError(loc, "axis out of range");
  Type element = elementOf(adaptor.getInput());
  types.push_back(adaptor.getInput().getType());
  types.push_back(tensorOf(rowStatShape(x, axis), element));
  types.push_back(tensorOf(rowStatShape(x, axis), element));
  return success();
}

LogicalResult LayerNormOp::verify() {
  ArrayRef<int64_t> x = shapeOf(getInput());
  ArrayRef<int64_t> normalized = x.drop_front(getAxis());
  if (shapeOf(getScale()) != normalized)
    return emitOpError("scale must have the normalized dims' shape");
  if (getBias() && shapeOf(getBias()) != normalized)
    return emitOpError("bias must have the normalized dims' shape");
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

AttentionShape mtc::attentionShape(ArrayRef<int64_t> shape, bool seqMajor) {
  AttentionShape a;
  int64_t rank = shape.size();
  if (rank < (seqMajor ? 3 : 2))
    return a;
  a.width = shape.back();
  if (seqMajor) {
    a.batch.assign(shape.begin(), shape.end() - 3);
    a.batch.push_back(shape[rank - 2]);
    a.seq = shape[rank - 3];
  } else {
    a.batch.assign(shape.begin(), shape.end() - 2);
    a.seq = shape[rank - 2];
  }
  return a;
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> q = shapeOf(adaptor.getQuery()),
                    v = shapeOf(adaptor.getValue());
  bool seqMajor = adaptor.getSeqMajor();
  if (q.size() < (seqMajor ? 3u : 2u) || v.size() != q.size())
    return emitOptionalError(loc, "attention operands must have one rank "
                                  ">= ",
                             seqMajor ? 3 : 2);
  SmallVector<int64_t> out(q.begin(), q.end());
  out.back() = v.back();
  AttentionShape rows = attentionShape(q, seqMajor);
  SmallVector<int64_t> lse(rows.batch);
  lse.push_back(rows.seq);
  Type f32 = Float32Type::get(adaptor.getQuery().getContext());
  types.push_back(tensorOf(out, f32));
  types.push_back(tensorOf(lse, f32));
  return success();
}

/// The checks forward and backward share: shapes of query, key, value and
/// mask (the output's are the forward's result).
template <typename AttentionLike>
static LogicalResult verifyAttentionOperands(AttentionLike op) {
  bool seqMajor = op.getSeqMajor();
  ArrayRef<int64_t> qs = shapeOf(op.getQuery());
  if (qs.size() < (seqMajor ? 3u : 2u))
    return op.emitOpError("operands must have rank >= ") << (seqMajor ? 3 : 2);
  AttentionShape q = attentionShape(qs, seqMajor),
                 k = attentionShape(shapeOf(op.getKey()), seqMajor),
                 v = attentionShape(shapeOf(op.getValue()), seqMajor);
  if (shapeOf(op.getKey()).size() != qs.size() ||
      shapeOf(op.getValue()).size() != qs.size() || k.batch != q.batch ||
      v.batch != q.batch)
    return op.emitOpError("query, key and value must share their leading dims");
  if (k.width != q.width)
    return op.emitOpError("query and key must have the same head dim");
  if (v.seq != k.seq)
    return op.emitOpError("key and value must have the same sequence length");
  if (q.width > kMaxAttentionHeadDim || v.width > kMaxAttentionHeadDim)
    return op.emitOpError("head dims above ")
           << kMaxAttentionHeadDim << " are not supported";
  if (op.getCausal() && op.getMask())
    return op.emitOpError("takes a mask or causal, not both");
  if (Value mask = op.getMask()) {
    SmallVector<int64_t> scores(q.batch);
    scores.push_back(q.seq);
    scores.push_back(k.seq);
    auto shape = broadcastShapes(shapeOf(mask), scores);
    if (failed(shape) || *shape != ArrayRef<int64_t>(scores))
      return op.emitOpError("mask must broadcast to the scores' shape");
  }
  float ratio = op.getDropoutRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return op.emitOpError("dropout_ratio must lie in [0, 1)");
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionOperands(*this)))
    return failure();
  if (elementOf(getKey()) != elementOf(getQuery()) ||
      elementOf(getValue()) != elementOf(getQuery()))
    return emitOpError("query, key and value must be stored alike");
  if (Type out = elementOf(getOutput());
      !out.isF32() && out != elementOf(getQuery()))
    return emitOpError("a 16-bit output must be stored as the operands are");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionOperands(*this)))
    return failure();
  for (auto [operand, grad] :
       llvm::zip(ValueRange{getQuery(), getKey(), getValue()},
                 ValueRange{getQueryGrad(), getKeyGrad(), getValueGrad()}))
    if (shapeOf(operand) != shapeOf(grad))
      return emitOpError("each gradient must have its operand's shape");
  if (shapeOf(getGrad()) != shapeOf(getOutput()))
    return emitOpError("grad must have the output's shape");
  Type element = elementOf(getQuery());
  for (Value v : {getGrad(), getKey(), getValue()})
    if (elementOf(v) != element)
      return emitOpError("grad, query, key and value must be stored alike");
  if (Type out = elementOf(getOutput()); !out.isF32() && out != element)
    return emitOpError("a 16-bit output must be stored as the operands are");
  Type grads = elementOf(getQueryGrad());
  if (elementOf(getKeyGrad()) != grads || elementOf(getValueGrad()) != grads)
    return emitOpError("the three gradients must be stored alike");
  if (!grads.isF32() && grads != element)
    return emitOpError("16-bit gradients must be stored as the operands are");
  return success();
}

//===----------------------------------------------------------------------===//
// Indexing and concatenation
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> data = shapeOf(adaptor.getData());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(data.size()))
    return emitOptionalError(loc, "axis out of range");
  SmallVector<int64_t> shape(data.begin(), data.begin() + axis);
  llvm::append_range(shape, shapeOf(adaptor.getIndices()));
  shape.append(data.begin() + axis + 1, data.end());
  types.push_back(tensorOf(shape, elementOf(adaptor.getData())));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "concat needs at least one operand");
  SmallVector<int64_t> shape(shapeOf(adaptor.getInputs()[0]));
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
    return emitOptionalError(loc, "axis out of range");
  Type element = elementOf(adaptor.getInputs()[0]);
  for (Value v : adaptor.getInputs().drop_front()) {
    ArrayRef<int64_t> other = shapeOf(v);
    if (other.size() != shape.size() || elementOf(v) != element)
      return emitOptionalError(loc, "operands differ in rank or type");
    for (size_t i = 0; i < shape.size(); ++i)
      if (static_cast<int64_t>(i) != axis && other[i] != shape[i])
        return emitOptionalError(loc, "operands differ outside the axis");
    shape[axis] += other[axis];
  }
  types.push_back(tensorOf(shape, element));
  return success();
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

LogicalResult
SoftmaxCrossEntropyOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  ArrayRef<int64_t> x = shapeOf(adaptor.getLogits());
  if (x.size() < 2)
    return emitOptionalError(loc, "logits must be [N, C, ...]");
  Type element = elementOf(adaptor.getLogits());
  if (adaptor.getReduction() == "none") {
    SmallVector<int64_t> shape{x[0]};
    shape.append(x.begin() + 2, x.end());
    types.push_back(tensorOf(shape, element));
  } else {
    types.push_back(tensorOf({}, element));
  }
  types.push_back(adaptor.getLogits().getType());
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::verify() {
  StringRef r = getReduction();
  if (r != "mean" && r != "sum" && r != "none")
    return emitOpError("reduction must be mean, sum or none, got '")
           << r << "'";
  ArrayRef<int64_t> x = shapeOf(getLogits()), l = shapeOf(getLabels());
  SmallVector<int64_t> expected{x[0]};
  expected.append(x.begin() + 2, x.end());
  if (l != ArrayRef<int64_t>(expected))
    return emitOpError("labels must have the shape of logits without C");
  return success();
}

#define GET_OP_CLASSES
bool mtc::sameOr16BitFirst(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != actual.size() ||
      inferred.drop_front() != actual.drop_front())
    return false;
  auto want = cast<RankedTensorType>(inferred.front());
  auto got = dyn_cast<RankedTensorType>(actual.front());
  return got && got.getShape() == want.getShape() &&
         (got.getElementType() == want.getElementType() ||
          (want.getElementType().isF32() &&
           isa<BFloat16Type, Float16Type>(got.getElementType())));
}

/// The checks of the fused losses over [N, C] rows: a mean or sum of the
/// rows' terms.
template <typename RowLoss> static LogicalResult verifyRowLoss(RowLoss op) {
  StringRef r = op.getReduction();
  if (r != "mean" && r != "sum")
    return op.emitOpError("reduction must be mean or sum, got '") << r << "'";
  ArrayRef<int64_t> x = shapeOf(op.getLogits());
  if (x.size() != 2 || shapeOf(op.getLabels()) != ArrayRef<int64_t>{x[0]})
    return op.emitOpError("needs logits [N, C] and labels [N]");
  if (!shapeOf(op.getLoss()).empty())
    return op.emitOpError("the loss must be a scalar");
  return success();
}

LogicalResult SoftmaxCrossEntropyWithGradOp::verify() {
  if (failed(verifyRowLoss(*this)))
    return failure();
  ArrayRef<int64_t> x = shapeOf(getLogits());
  if (shapeOf(getDlogits()) != x)
    return emitOpError("dlogits must have the shape of logits");
  if (!shapeOf(getDloss()).empty())
    return emitOpError("dloss must be a scalar");
  if (Type in = elementOf(getLogits());
      !in.isF32() && elementOf(getDlogits()) != in)
    return emitOpError("16-bit logits need dlogits stored alike");
  return success();
}

LogicalResult SoftmaxCrossEntropyLossOp::verify() {
  return verifyRowLoss(*this);
}

bool mtc::isFusableElementwise(Operation *op) {
  if (!isa<ReluOp, TanhOp, SigmoidOp, ExpOp, LogOp, NegOp, SqrtOp, ErfOp,
           ConvertOp, AddOp, SubOp, MulOp, DivOp, ReluGradOp, ExpandOp,
           ClipOp, ClipGradOp, SelectOp, DropoutOp, DropoutGradOp>(op))
    return false;
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  return isa<FloatType>(type.getElementType());
}

Value mtc::inPlaceSource(OpResult r) {
  if (auto convert = dyn_cast<ConvertOp>(r.getOwner())) {
    auto from = cast<ShapedType>(convert.getInput().getType());
    auto to = cast<ShapedType>(convert.getOutput().getType());
    bool narrowing = from.getElementType().isF32() &&
                     isa<BFloat16Type, Float16Type>(to.getElementType());
    return narrowing ? convert.getInput() : nullptr;
  }
  if (auto loss = dyn_cast<SoftmaxCrossEntropyOp>(r.getOwner()))
    return r == loss.getLogProb() ? loss.getLogits() : nullptr;
  if (auto grad = dyn_cast<SoftmaxCrossEntropyGradOp>(r.getOwner()))
    return grad.getLogProb();
  // A float32 gradient row by row over the logits; a 16-bit one in phases
  // of rows, as narrowInPlace does.
  if (auto fused = dyn_cast<SoftmaxCrossEntropyWithGradOp>(r.getOwner()))
    return r == fused.getDlogits() ? fused.getLogits() : nullptr;
  if (auto grad = dyn_cast<LayerNormGradOp>(r.getOwner()))
    return r == grad.getInputGrad() ? grad.getAccumulate() : nullptr;
  if (auto grad = dyn_cast<GatherGradOp>(r.getOwner()))
    return grad.getAccumulate();
  return nullptr;
}

Value mtc::viewSource(Operation *op) {
  if (!isa<ReshapeOp>(op) && !(isa<SliceOp, TransposeOp>(op) &&
                               op->hasAttr(attr::kStridedView)))
    return nullptr;
  Value input = op->getOperand(0);
  Operation *def = input.getDefiningOp();
  return def && !isa<ConstantOp>(def) ? input : nullptr;
}

MatMulForm mtc::matMulForm(MatMulOp op) {
  ArrayRef<int64_t> a = op.getA().getType().getShape(),
                    b = op.getB().getType().getShape(),
                    y = op.getOutput().getType().getShape();
  if (b.size() == 2 && !op.getTransposeA())
    return MatMulForm::FoldedRows;
  int64_t batch = 1;
  for (int64_t d : y.drop_back(2))
    batch *= d;
  int64_t aBatch =
      getNumElements(op.getA().getType()) / (a[a.size() - 2] * a[a.size() - 1]);
  int64_t bBatch =
      getNumElements(op.getB().getType()) / (b[b.size() - 2] * b[b.size() - 1]);
  auto strided = [&](int64_t count) { return count == 1 || count == batch; };
  if (strided(aBatch) && strided(bBatch))
    return MatMulForm::StridedBatched;
  return MatMulForm::Loop;
}

int64_t mtc::rowPitch(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t last = type.getRank() ? type.getShape().back() : 1;
  auto r = dyn_cast<OpResult>(v);
  if (!r)
    return last;
  auto pitches =
      r.getOwner()->getAttrOfType<DenseI64ArrayAttr>(attr::kRowPitch);
  if (!pitches || pitches[r.getResultNumber()] == 0)
    return last;
  return pitches[r.getResultNumber()];
}

int64_t mtc::storageBytes(Value v) {
  int64_t bytes = getTensorBytes(v.getType());
  int64_t pitch = rowPitch(v);
  auto type = cast<RankedTensorType>(v.getType());
  if (!type.getRank() || pitch == type.getShape().back())
    return bytes;
  return bytes / type.getShape().back() * pitch;
}

/// Whether a reshape keeps the last dim (then its rows are its input's).
static bool keepsRows(ReshapeOp op) {
  ArrayRef<int64_t> in = op.getInput().getType().getShape(),
                    out = op.getOutput().getType().getShape();
  return !in.empty() && !out.empty() && in.back() == out.back();
}

static bool is16Bit(Value v) {
  return getElementTypeOrSelf(v.getType()).getIntOrFloatBitWidth() == 16;
}

/// Whether a matmul's GEMM reads its operands as stored (float32, or 16
/// bits without a widened copy).
static bool readsAsStored(MatMulOp op) {
  return !is16Bit(op.getA()) || op->hasAttr(attr::kNative16BitGemm);
}

bool mtc::rowPitchUse(OpOperand &use) {
  Operation *op = use.getOwner();
  Value v = use.get();
  if (auto reshape = dyn_cast<ReshapeOp>(op))
    return viewSource(op) == v && keepsRows(reshape);
  if (auto mm = dyn_cast<MatMulOp>(op))
    return (v == mm.getA() || v == mm.getB()) && v != mm.getBias() &&
           matMulForm(mm) != MatMulForm::Loop && readsAsStored(mm);
  if (auto ce = dyn_cast<SoftmaxCrossEntropyWithGradOp>(op))
    return v == ce.getLogits() &&
           getElementTypeOrSelf(ce.getLogits().getType()) ==
               getElementTypeOrSelf(ce.getDlogits().getType());
  if (auto ce = dyn_cast<SoftmaxCrossEntropyLossOp>(op))
    return v == ce.getLogits();
  if (auto cc = dyn_cast<CountCorrectOp>(op))
    return v == cc.getLogits() && cc.getLogits().getType().getRank() == 2;
  return false;
}

bool mtc::rowPitchResult(OpResult result) {
  Operation *op = result.getOwner();
  if (auto reshape = dyn_cast<ReshapeOp>(op))
    return viewSource(op) && keepsRows(reshape);
  if (auto mm = dyn_cast<MatMulOp>(op))
    // A 16-bit result of float32 sums is rounded by a copy from scratch.
    return matMulForm(mm) != MatMulForm::Loop &&
           (!is16Bit(result) || (is16Bit(mm.getA()) && readsAsStored(mm)));
  if (auto ce = dyn_cast<SoftmaxCrossEntropyWithGradOp>(op))
    return result == ce.getDlogits() &&
           getElementTypeOrSelf(ce.getLogits().getType()) ==
               getElementTypeOrSelf(ce.getDlogits().getType());
  return false;
}

SmallVector<int64_t> mtc::contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

static StridedLayout rowMajor(Value v, ArrayRef<int64_t> shape) {
  StridedLayout layout{v, 0, {}};
  for (auto [size, stride] : llvm::zip(shape, contiguousStrides(shape)))
    layout.dims.push_back({{size, stride}});
  return layout;
}

static FailureOr<StridedLayout> reshaped(const StridedLayout &in,
                                         ArrayRef<int64_t> to);

ConcatPart mtc::concatPart(Value v) {
  Value at = v;
  while (at.hasOneUse()) {
    Operation *user = *at.getUsers().begin();
    if (isa<ReshapeOp>(user)) {
      at = user->getResult(0);
      continue;
    }
    auto concat = dyn_cast<ConcatOp>(user);
    if (!concat || !concat->hasAttr(attr::kWrittenInPlace))
      break;
    int64_t axis = concat.getAxis(), before = 0;
    for (Value input : concat.getInputs()) {
      if (input == at)
        break;
      before += cast<ShapedType>(input.getType()).getShape()[axis];
    }
    return {concat, at,
            before * contiguousStrides(shapeOf(concat.getOutput()))[axis]};
  }
  return {};
}

FailureOr<StridedLayout> mtc::stridedLayout(Value v) {
  Operation *def = v.getDefiningOp();
  if (def && viewSource(def))
    return layoutThrough(def);
  if (ConcatPart part = concatPart(v); part.concat) {
    // The input's place in the result: the result's dims, the concat
    // axis cut to the input's size; then read as `v`'s shape.
    auto concat = cast<ConcatOp>(part.concat);
    ArrayRef<int64_t> shape = shapeOf(concat.getOutput());
    StridedLayout layout = rowMajor(concat.getOutput(), shape);
    layout.offset = part.offset;
    int64_t axis = concat.getAxis();
    layout.dims[axis].front().size = shapeOf(part.input)[axis];
    return reshaped(layout, shapeOf(v));
  }
  return rowMajor(v, cast<ShapedType>(v.getType()).getShape());
}

/// `in` read as `to`, row-major: its strided dims in order (dims of one
/// element left out, neighbours contiguous in memory merged), dealt out to
/// the dims of `to` from the outermost on, a strided dim split where a dim
/// of `to` ends inside it.
static FailureOr<StridedLayout> reshaped(const StridedLayout &in,
                                         ArrayRef<int64_t> to) {
  SmallVector<StridedDim> flat;
  for (const auto &dim : in.dims)
    for (StridedDim d : dim) {
      if (d.size == 0)
        return rowMajor(in.base, to); // no element is ever read
      if (d.size == 1)
        continue;
      if (!flat.empty() && flat.back().stride == d.size * d.stride)
        flat.back() = {flat.back().size * d.size, d.stride};
      else
        flat.push_back(d);
    }
  StridedLayout out{in.base, in.offset, {}};
  size_t next = 0;
  for (int64_t size : to) {
    SmallVector<StridedDim, 1> dim;
    for (int64_t need = size; need > 1;) {
      if (next == flat.size())
        return failure();
      StridedDim &d = flat[next];
      if (need % d.size == 0) {
        dim.push_back(d);
        need /= d.size;
        ++next;
      } else if (d.size % need == 0) {
        d.size /= need;
        dim.push_back({need, d.stride * d.size});
        need = 1;
      } else {
        return failure();
      }
    }
    if (dim.empty())
      dim.push_back({1, 1});
    out.dims.push_back(std::move(dim));
  }
  if (next != flat.size())
    return failure();
  return out;
}

FailureOr<StridedLayout> mtc::layoutThrough(Operation *op) {
  Value source = op->getOperand(0);
  FailureOr<StridedLayout> layout = stridedLayout(source);
  if (failed(layout))
    return failure();
  auto &dims = layout->dims;
  if (auto transpose = dyn_cast<TransposeOp>(op)) {
    SmallVector<SmallVector<StridedDim, 1>> permuted;
    for (int64_t p : transpose.getPerm())
      permuted.push_back(dims[p]);
    dims = std::move(permuted);
    return layout;
  }
  if (auto slice = dyn_cast<SliceOp>(op)) {
    ArrayRef<int64_t> shape = slice.getOutput().getType().getShape();
    for (size_t d = 0; d < dims.size(); ++d) {
      int64_t start = slice.getStarts()[d], step = slice.getSteps()[d];
      if (shape[d] == 0)
        return rowMajor(layout->base, shape);
      // A dim of several strided dims is cut along its outermost one,
      // whole rows of the inner ones.
      int64_t inner = 1;
      for (StridedDim piece : ArrayRef(dims[d]).drop_front())
        inner *= piece.size;
      if (inner > 1 && (step != 1 || start % inner || shape[d] % inner))
        return failure();
      StridedDim &outer = dims[d].front();
      layout->offset += start / inner * outer.stride;
      outer.stride *= step;
      outer.size = shape[d] / inner;
    }
    return layout;
  }
  return reshaped(*layout,
                  cast<ShapedType>(op->getResult(0).getType()).getShape());
}

StridedCopyDims mtc::copyDims(const StridedLayout &src,
                              ArrayRef<int64_t> dstStrides) {
  StridedCopyDims copy;
  for (const auto &dim : src.dims)
    for (StridedDim d : dim)
      if (d.size == 0)
        return {{0}, {1}, {1}};
  for (auto [dim, dstStride] : llvm::zip(src.dims, dstStrides)) {
    int64_t inner = 1;
    for (StridedDim d : llvm::reverse(dim))
      inner *= d.size;
    for (StridedDim d : dim) {
      inner /= d.size;
      if (d.size == 1)
        continue;
      int64_t to = dstStride * inner;
      size_t last = copy.shape.size() - 1;
      if (!copy.shape.empty() &&
          copy.srcStrides[last] == d.size * d.stride &&
          copy.dstStrides[last] == d.size * to) {
        copy.shape[last] *= d.size;
        copy.srcStrides[last] = d.stride;
        copy.dstStrides[last] = to;
        continue;
      }
      copy.shape.push_back(d.size);
      copy.srcStrides.push_back(d.stride);
      copy.dstStrides.push_back(to);
    }
  }
  if (copy.shape.empty()) {
    copy.shape.push_back(1);
    copy.srcStrides.push_back(1);
    copy.dstStrides.push_back(1);
  }
  return copy;
}

bool mtc::copiesThroughStrides(OpOperand &use) {
  Operation *op = use.getOwner();
  if (isa<AttentionOp>(op))
    return use.getOperandNumber() < 3;
  if (isa<AttentionGradOp>(op))
    return use.getOperandNumber() < 5;
  return isa<TransposeOp, SliceOp, PadOp, ConcatOp, SliceGradOp>(op);
}

FailureOr<AttentionRows> mtc::attentionRows(const StridedLayout &layout,
                                            ArrayRef<int64_t> shape,
                                            bool seqMajor) {
  int64_t rank = shape.size();
  if (rank < (seqMajor ? 3 : 2) ||
      layout.dims.size() != static_cast<size_t>(rank))
    return failure();
  // The stride of each dim; a dim of one element has none that matters.
  SmallVector<int64_t> strides;
  for (int64_t d = 0; d < rank; ++d) {
    const auto &nest = layout.dims[d];
    if (shape[d] == 1) {
      strides.push_back(0);
      continue;
    }
    if (nest.size() != 1)
      return failure();
    strides.push_back(nest.front().stride);
  }
  if (shape[rank - 1] > 1 && strides[rank - 1] != 1)
    return failure();
  AttentionRows rows;
  rows.offset = layout.offset;
  int64_t seqDim = seqMajor ? rank - 3 : rank - 2;
  // The heads; -1 without batch dims. The outer batch dims precede it.
  int64_t headDim = seqMajor ? rank - 2 : rank - 3;
  rows.rowStride = strides[seqDim];
  if (headDim >= 0) {
    rows.heads = shape[headDim];
    rows.headStride = strides[headDim];
  }
  // The outer batch dims, innermost first, must nest like one dim.
  int64_t extent = 1;
  bool first = true;
  for (int64_t d = rank - 4; d >= 0; --d) {
    if (shape[d] == 1)
      continue;
    if (first)
      rows.batchStride = strides[d];
    else if (strides[d] != rows.batchStride * extent)
      return failure();
    extent *= shape[d];
    first = false;
  }
  return rows;
}

int64_t mtc::numberKernels(Block &body, DenseMap<Operation *, int64_t> &index,
                           bool withTerminator) {
  int64_t count = 0;
  for (Operation &op : body) {
    if (!withTerminator && &op == body.getTerminator())
      break;
    bool shared = count > 0 && op.hasAttr(attr::kRowEpilogue);
    index[&op] = shared ? count - 1 : count++;
  }
  return count;
}

LogicalResult FusedOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but its body "
                               << body.getNumArguments() << " arguments";
  for (auto [input, arg] : llvm::zip(getInputs(), body.getArguments()))
    if (input.getType() != arg.getType())
      return emitOpError("input of type ")
             << input.getType() << " binds a body argument of type "
             << arg.getType();
  if (getOutputs().empty())
    return emitOpError("has no result");
  if (getYielded().getTypes() != getOutputs().getTypes())
    return emitOpError("yields values of other types than its results");
  ArrayRef<int64_t> shape =
      cast<ShapedType>(getOutputs()[0].getType()).getShape();
  for (Operation &op : body.without_terminator())
    for (Value r : op.getResults())
      if (cast<ShapedType>(r.getType()).getShape() != shape)
        return op.emitOpError("inside mtc.fused must produce the fused "
                              "results' shape");
  return success();
}

#include "mtc/Dialect/Mtc/IR/MtcOps.cpp.inc"
