//===- Linalg.cpp - Import of Gemm and MatMul -----------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

LogicalResult importGemm(ImportContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  Value c;
  if (ctx.hasInput(2)) {
    auto cv = ctx.input(2);
    if (failed(cv))
      return failure();
    c = *cv;
  }
  if (shapeOf(*a).size() != 2 || shapeOf(*b).size() != 2)
    return ctx.fail("A and B must be 2-D");
  OpBuilder &bld = ctx.builder;
  Location loc = ctx.loc();
  bool transA = ctx.intAttr("transA", 0), transB = ctx.intAttr("transB", 0);
  int64_t ka = shapeOf(*a)[transA ? 0 : 1], kb = shapeOf(*b)[transB ? 1 : 0];
  if (ka != kb)
    return ctx.fail("inner dimensions differ (" + Twine(ka) + " vs " +
                    Twine(kb) + ")");
  // alpha * op(A) op(B) + beta * C as a matmul, a scale and an add: the
  // fusion pass folds the usual form (alpha = beta = 1, a bias of N
  // elements: a linear layer, Hugging Face's Conv1D) into the GEMM's bias
  // epilogue and its gradient's sum into the weight-gradient GEMM, as for
  // MatMul + Add, and the product may be stored in 16 bits.
  Value y = bld.create<MatMulOp>(loc, *a, *b, Value(), bld.getBoolAttr(transA),
                                 bld.getBoolAttr(transB));
  auto scaled = [&](Value v, double factor) -> Value {
    if (factor == 1.0)
      return v;
    Type elem = getElementTypeOrSelf(v.getType());
    Value s = bld.create<ConstantOp>(
        loc, DenseElementsAttr::get(
                 RankedTensorType::get({}, elem),
                 ArrayRef<Attribute>{bld.getFloatAttr(elem, factor)}));
    return bld.create<MulOp>(loc, v, s);
  };
  y = scaled(y, ctx.floatAttr("alpha", 1));
  double beta = ctx.floatAttr("beta", 1);
  if (c && beta != 0.0) {
    // A [1, N] bias is read as the [N] one it is (a view).
    auto cType = cast<RankedTensorType>(c.getType());
    if (cType.getRank() == 2 && cType.getDimSize(0) == 1)
      c = bld.create<ReshapeOp>(
          loc,
          RankedTensorType::get({cType.getDimSize(1)}, cType.getElementType()),
          c);
    auto shape = broadcastShapes(shapeOf(c), shapeOf(y));
    if (failed(shape) || ArrayRef<int64_t>(*shape) != shapeOf(y))
      return ctx.fail("C does not broadcast to the product's shape");
    y = bld.create<AddOp>(loc, y, scaled(c, beta));
  }
  ctx.bind(0, y);
  return success();
}

LogicalResult importMatMul(ImportContext &ctx) {
  auto a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  OpBuilder &bld = ctx.builder;
  Location loc = ctx.loc();
  // NumPy promotes 1-D operands to matrices and drops the added dim after.
  auto promote = [&](Value v, bool row) -> Value {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape = row ? SmallVector<int64_t>{1, type.getDimSize(0)}
                                     : SmallVector<int64_t>{type.getDimSize(0), 1};
    return bld.create<ReshapeOp>(
        loc, RankedTensorType::get(shape, type.getElementType()), v);
  };
  if (shapeOf(*a).empty() || shapeOf(*b).empty())
    return ctx.fail("A and B must have at least one dimension (A has " +
                    Twine(shapeOf(*a).size()) + ", B " +
                    Twine(shapeOf(*b).size()) + ")");
  bool aVector = shapeOf(*a).size() == 1, bVector = shapeOf(*b).size() == 1;
  Value lhs = aVector ? promote(*a, true) : *a;
  Value rhs = bVector ? promote(*b, false) : *b;
  ArrayRef<int64_t> ls = shapeOf(lhs), rs = shapeOf(rhs);
  if (ls.back() != rs[rs.size() - 2])
    return ctx.fail("inner dimensions differ (" + Twine(ls.back()) + " vs " +
                    Twine(rs[rs.size() - 2]) + ")");
  if (failed(broadcastShapes(ls.drop_back(2), rs.drop_back(2))))
    return ctx.fail("batch dimensions do not broadcast");
  // A 2-D operand that is a transpose (exporters write Linear as
  // MatMul(x, Transpose(W))) is read through the GEMM's transpose flag: no
  // copy of the weight in the forward pass, and its gradient comes out in
  // the weight's own layout.
  auto transposed = [](Value &v) {
    auto t = v.getDefiningOp<TransposeOp>();
    if (!t || shapeOf(v).size() != 2 || t.getPerm() != ArrayRef<int64_t>{1, 0})
      return false;
    v = t.getInput();
    return true;
  };
  bool ta = transposed(lhs), tb = transposed(rhs);
  Value y = bld.create<MatMulOp>(loc, lhs, rhs, Value(), bld.getBoolAttr(ta),
                                 bld.getBoolAttr(tb));
  if (aVector || bVector) {
    SmallVector<int64_t> shape(shapeOf(y));
    if (bVector)
      shape.pop_back();
    if (aVector)
      shape.erase(shape.end() - (bVector ? 1 : 2));
    y = bld.create<ReshapeOp>(
        loc,
        RankedTensorType::get(shape,
                              cast<RankedTensorType>(y.getType()).getElementType()),
        y);
  }
  ctx.bind(0, y);
  return success();
}

} // namespace

void mtc::import::registerLinalgImporters(llvm::StringMap<OpImporter> &table) {
  table["Gemm"] = importGemm;
  table["MatMul"] = importMatMul;
}
