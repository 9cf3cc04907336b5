//===- Elementwise.cpp - Import of elementwise ONNX ops -------------------===//
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

LogicalResult importClip(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  float lo = -std::numeric_limits<float>::infinity();
  float hi = std::numeric_limits<float>::infinity();
  if (ctx.opset < 11) {
    lo = ctx.floatAttr("min", lo);
    hi = ctx.floatAttr("max", hi);
  } else {
    for (int i : {1, 2}) {
      if (!ctx.hasInput(i))
        continue;
      auto v = ctx.constFloats(i);
      if (!v || v->size() != 1)
        return ctx.fail("min and max must be compile-time scalars");
      (i == 1 ? lo : hi) = static_cast<float>((*v)[0]);
    }
  }
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<ClipOp>(ctx.loc(), x->getType(), *x,
                               b.getF32FloatAttr(lo), b.getF32FloatAttr(hi)));
  return success();
}

LogicalResult importWhere(ImportContext &ctx) {
  auto c = ctx.input(0), a = ctx.input(1), b = ctx.input(2);
  if (failed(c) || failed(a) || failed(b))
    return failure();
  if (!cast<RankedTensorType>(c->getType()).getElementType().isInteger(1))
    return ctx.fail("the condition must be a bool tensor");
  for (Value v : {*a, *b})
    if (!isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
      return ctx.fail("choosing between integer tensors at run time is not "
                      "supported");
  auto ab = broadcastShapes(shapeOf(*a), shapeOf(*b));
  if (failed(ab) || failed(broadcastShapes(shapeOf(*c), *ab)))
    return ctx.fail("operand shapes do not broadcast");
  ctx.bind(0, ctx.builder.create<SelectOp>(ctx.loc(), *c, *a, *b));
  return success();
}

LogicalResult importCast(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t to = ctx.intAttr("to", onnx::TensorProto::FLOAT);
  auto type = cast<RankedTensorType>(x->getType());
  Type from = type.getElementType();
  // Between float32 and the 16-bit float formats: a rounding conversion.
  Type target = to == onnx::TensorProto::FLOAT16    ? ctx.builder.getF16Type()
                : to == onnx::TensorProto::BFLOAT16 ? ctx.builder.getBF16Type()
                : to == onnx::TensorProto::FLOAT    ? ctx.builder.getF32Type()
                                                    : Type();
  if (target && isa<FloatType>(from) && from != target) {
    ctx.bind(0, ctx.builder.create<ConvertOp>(ctx.loc(), type.clone(target),
                                              *x));
    return success();
  }
  bool same = (to == onnx::TensorProto::FLOAT && from.isF32()) ||
              (to == onnx::TensorProto::INT64 && from.isInteger(64)) ||
              (to == onnx::TensorProto::BOOL && from.isInteger(1));
  if (!same)
    return ctx.fail("casting tensors computed at run time to " +
                    onnx::TensorProto::DataType_Name(
                        static_cast<onnx::TensorProto::DataType>(to)) +
                    " is not supported");
  ctx.bind(0, *x);
  return success();
}

template <const char *Predicate>
LogicalResult importCompare(ImportContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  if (cast<RankedTensorType>(a->getType()).getElementType() !=
      cast<RankedTensorType>(b->getType()).getElementType())
    return ctx.fail("operands have different element types");
  if (failed(broadcastShapes(shapeOf(*a), shapeOf(*b))))
    return ctx.fail("operand shapes do not broadcast");
  OpBuilder &bld = ctx.builder;
  ctx.bind(0, bld.create<CompareOp>(ctx.loc(), *a, *b,
                                    bld.getStringAttr(Predicate)));
  return success();
}

constexpr char kEq[] = "eq", kLt[] = "lt", kGt[] = "gt";

LogicalResult importNot(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ctx.bind(0, ctx.builder.create<NotOp>(ctx.loc(), x->getType(), *x));
  return success();
}

} // namespace

void mtc::import::registerElementwiseImporters(
    llvm::StringMap<OpImporter> &table) {
  table["Add"] = importBinary<AddOp>;
  table["Div"] = importBinary<DivOp>;
  table["Cast"] = importCast;
  table["Clip"] = importClip;
  table["Erf"] = importUnary<ErfOp>;
  table["Equal"] = importCompare<kEq>;
  table["Exp"] = importUnary<ExpOp>;
  table["Greater"] = importCompare<kGt>;
  table["Less"] = importCompare<kLt>;
  table["Not"] = importNot;
  table["Log"] = importUnary<LogOp>;
  table["Mul"] = importBinary<MulOp>;
  table["Neg"] = importUnary<NegOp>;
  table["Relu"] = importUnary<ReluOp>;
  table["Sigmoid"] = importUnary<SigmoidOp>;
  table["Sqrt"] = importUnary<SqrtOp>;
  table["Sub"] = importBinary<SubOp>;
  table["Tanh"] = importUnary<TanhOp>;
  table["Where"] = importWhere;
}
