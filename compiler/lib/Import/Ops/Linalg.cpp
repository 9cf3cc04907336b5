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
  bool transA = ctx.intAttr("transA", 0), transB = ctx.intAttr("transB", 0);
  int64_t ka = shapeOf(*a)[transA ? 0 : 1], kb = shapeOf(*b)[transB ? 1 : 0];
  if (ka != kb)
    return ctx.fail("inner dimensions differ (" + Twine(ka) + " vs " +
                    Twine(kb) + ")");
  auto op = bld.create<GemmOp>(ctx.loc(), *a, *b, c, bld.getBoolAttr(transA),
                               bld.getBoolAttr(transB),
                               bld.getF32FloatAttr(ctx.floatAttr("alpha", 1)),
                               bld.getF32FloatAttr(ctx.floatAttr("beta", 1)));
  ctx.bind(0, op);
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
