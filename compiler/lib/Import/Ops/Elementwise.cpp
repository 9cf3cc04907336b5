//===- Elementwise.cpp - Import of elementwise ONNX ops -------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

#include <cmath>
#include <cstdio>
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

/// Pow(x, c) of a float tensor x and a compile-time scalar c, in the ops
/// PyTorch's pow itself computes for such exponents: products for an
/// integer c (x * x * x for c = 3), a square root for +-0.5, a reciprocal
/// for a negative c. Their gradients are then the products' (c x^(c-1),
/// and 0 at x = 0 where c > 1, as PyTorch's): a general x^c as
/// exp(c log x) would differentiate to NaN at 0 and so is refused, as are
/// exponent tensors of more than one value.
LogicalResult importPow(ImportContext &ctx) {
  constexpr int64_t kMaxExponent = 16;
  auto refuse = [&](const Twine &got) {
    return ctx.fail("the exponent must be a compile-time scalar (an "
                    "integer from -" +
                    Twine(kMaxExponent) + " to " + Twine(kMaxExponent) +
                    ", or +-0.5), got " + got +
                    "; other powers are only supported on compile-time "
                    "constants");
  };
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(type.getElementType()))
    return ctx.fail("powers of integer tensors are only supported on "
                    "compile-time constants");
  auto exponent = ctx.constFloats(1);
  auto exponentShape = ctx.inputShape(1);
  if (!exponent || !exponentShape)
    return refuse("one computed at run time");
  if (exponent->size() != 1)
    return refuse("a tensor of " + Twine(exponent->size()) + " values");
  if (exponentShape->size() > static_cast<size_t>(type.getRank()))
    return refuse("one of higher rank than the base");
  double c = (*exponent)[0];
  double magnitude = std::fabs(c);
  bool half = magnitude == 0.5;
  if (!half &&
      (magnitude != std::floor(magnitude) || magnitude > kMaxExponent)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", c);
    return refuse(text);
  }
  OpBuilder &b = ctx.builder;
  Location loc = ctx.loc();
  auto splat = [&](ArrayRef<int64_t> shape, double v) -> Value {
    Type elem = type.getElementType();
    return b.create<ConstantOp>(
        loc,
        DenseElementsAttr::get(RankedTensorType::get(shape, elem),
                               ArrayRef<Attribute>{b.getFloatAttr(elem, v)}));
  };
  Value y;
  if (magnitude == 0) {
    // x^0 = 1 everywhere, NaN and infinity included.
    y = splat(type.getShape(), 1.0);
  } else if (half) {
    y = b.create<SqrtOp>(loc, type, *x);
  } else {
    // Left to right as PyTorch's x * x * x for 3; squaring above that.
    auto n = static_cast<int64_t>(magnitude);
    if (n <= 3) {
      y = *x;
      for (int64_t i = 1; i < n; ++i)
        y = b.create<MulOp>(loc, y, *x);
    } else {
      Value square = *x;
      for (; n; n >>= 1) {
        if (n & 1)
          y = y ? b.create<MulOp>(loc, y, square).getResult() : square;
        if (n > 1)
          square = b.create<MulOp>(loc, square, square);
      }
    }
  }
  if (c < 0)
    y = b.create<DivOp>(loc, splat({}, 1.0), y);
  ctx.bind(0, y);
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
  table["Pow"] = importPow;
  table["Relu"] = importUnary<ReluOp>;
  table["Sigmoid"] = importUnary<SigmoidOp>;
  table["Sqrt"] = importUnary<SqrtOp>;
  table["Sub"] = importBinary<SubOp>;
  table["Tanh"] = importUnary<TanhOp>;
  table["Where"] = importWhere;
}
