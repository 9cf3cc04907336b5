//===- Shape.cpp - Import of constants and shape ops ----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

#include <cstring>

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

Value reshape(ImportContext &ctx, Value x, ArrayRef<int64_t> shape) {
  if (shapeOf(x) == shape)
    return x;
  return ctx.builder.create<ReshapeOp>(
      ctx.loc(), RankedTensorType::get(shape, elementOf(x)), x);
}

LogicalResult importConstant(ImportContext &ctx) {
  KnownTensor t;
  if (const auto *value = ctx.attr("value")) {
    const onnx::TensorProto &proto = value->t();
    t.shape.assign(proto.dims().begin(), proto.dims().end());
    int64_t count = 1;
    for (int64_t d : t.shape)
      count *= d;
    const std::string &raw = proto.raw_data();
    if (proto.data_type() == onnx::TensorProto::FLOAT) {
      t.isFloat = true;
      if (proto.has_raw_data() && raw.size() == size_t(count) * 4) {
        for (int64_t i = 0; i < count; ++i) {
          float v;
          std::memcpy(&v, raw.data() + 4 * i, 4);
          t.values.push_back(v);
        }
      } else if (proto.float_data_size() == count) {
        t.values.assign(proto.float_data().begin(), proto.float_data().end());
      } else {
        return ctx.fail("malformed float tensor value");
      }
    } else if (proto.data_type() == onnx::TensorProto::INT64) {
      if (proto.has_raw_data() && raw.size() == size_t(count) * 8) {
        for (int64_t i = 0; i < count; ++i) {
          int64_t v;
          std::memcpy(&v, raw.data() + 8 * i, 8);
          t.values.push_back(static_cast<double>(v));
        }
      } else if (proto.int64_data_size() == count) {
        for (int64_t v : proto.int64_data())
          t.values.push_back(static_cast<double>(v));
      } else {
        return ctx.fail("malformed int64 tensor value");
      }
    } else {
      return ctx.fail("constants of element type " +
                      onnx::TensorProto::DataType_Name(
                          static_cast<onnx::TensorProto::DataType>(
                              proto.data_type())) +
                      " are not supported");
    }
  } else if (const auto *f = ctx.attr("value_float")) {
    t.isFloat = true;
    t.values = {f->f()};
  } else if (const auto *fs = ctx.attr("value_floats")) {
    t.isFloat = true;
    t.shape = {fs->floats_size()};
    t.values.assign(fs->floats().begin(), fs->floats().end());
  } else if (const auto *i = ctx.attr("value_int")) {
    t.values = {static_cast<double>(i->i())};
  } else if (const auto *is = ctx.attr("value_ints")) {
    t.shape = {is->ints_size()};
    for (int64_t v : is->ints())
      t.values.push_back(static_cast<double>(v));
  } else {
    return ctx.fail("unsupported Constant attribute (value, value_float(s) "
                    "and value_int(s) are supported)");
  }
  ctx.bindKnown(0, std::move(t));
  return success();
}

LogicalResult importIdentity(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ctx.bind(0, *x);
  return success();
}

LogicalResult importFlatten(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  int64_t rank = shape.size();
  int64_t axis = ctx.intAttr("axis", 1);
  if (axis < -rank || axis > rank)
    return ctx.fail("axis " + Twine(axis) + " is out of range");
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= shape[i];
  ctx.bind(0, reshape(ctx, *x, {outer, inner}));
  return success();
}

LogicalResult importReshape(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  auto target = ctx.constInts(1);
  if (!target)
    return ctx.fail("the shape input must be a compile-time constant");
  auto shape = resolveReshape(ctx, shapeOf(*x), *target,
                              ctx.intAttr("allowzero", 0));
  if (failed(shape))
    return failure();
  SmallVector<int64_t> dims(shape->begin(), shape->end());
  ctx.bind(0, reshape(ctx, *x, dims));
  return success();
}

LogicalResult importTranspose(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = shapeOf(*x).size();
  std::vector<int64_t> reversed;
  for (int64_t i = rank - 1; i >= 0; --i)
    reversed.push_back(i);
  auto perm = ctx.intsAttr("perm", reversed);
  if (static_cast<int64_t>(perm.size()) != rank)
    return ctx.fail("perm has " + Twine(perm.size()) + " entries for rank " +
                    Twine(rank));
  SmallVector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return ctx.fail("perm is not a permutation");
    seen[p] = true;
  }
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<TransposeOp>(ctx.loc(), *x,
                                    b.getDenseI64ArrayAttr(perm)));
  return success();
}

LogicalResult importPad(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  std::string mode = ctx.stringAttr("mode", "constant");
  if (mode != "constant")
    return ctx.fail("mode '" + mode + "' is not supported (only constant)");
  int64_t rank = shapeOf(*x).size();
  std::vector<int64_t> pads;
  if (ctx.opset < 11) {
    pads = ctx.intsAttr("pads", {});
  } else {
    auto constPads = ctx.constInts(1);
    if (!constPads)
      return ctx.fail("pads must be a compile-time constant");
    pads = *constPads;
  }
  if (ctx.hasInput(3)) {
    auto axes = ctx.constInts(3);
    if (!axes)
      return ctx.fail("axes must be a compile-time constant");
    std::vector<int64_t> full(2 * rank, 0);
    for (size_t i = 0; i < axes->size(); ++i) {
      auto axis = normalizeAxis(ctx, (*axes)[i], rank);
      if (failed(axis))
        return failure();
      full[*axis] = pads[i];
      full[*axis + rank] = pads[i + axes->size()];
    }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return ctx.fail("expects " + Twine(2 * rank) + " pads, got " +
                    Twine(pads.size()));
  if (llvm::any_of(pads, [](int64_t p) { return p < 0; }))
    return ctx.fail("negative pads (cropping) are not supported");
  float value = 0.0f;
  if (ctx.hasInput(2)) {
    auto v = ctx.constFloats(2);
    if (!v || v->size() != 1)
      return ctx.fail("constant_value must be a compile-time scalar");
    value = (*v)[0];
  }
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<PadOp>(ctx.loc(), *x, b.getDenseI64ArrayAttr(pads),
                              b.getF32FloatAttr(value)));
  return success();
}

} // namespace

void mtc::import::registerShapeImporters(llvm::StringMap<OpImporter> &table) {
  table["Constant"] = importConstant;
  table["Flatten"] = importFlatten;
  table["Identity"] = importIdentity;
  table["Pad"] = importPad;
  table["Reshape"] = importReshape;
  table["Transpose"] = importTranspose;
}
