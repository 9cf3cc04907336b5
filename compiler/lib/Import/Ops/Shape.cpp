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
    } else if (proto.data_type() == onnx::TensorProto::BOOL ||
               proto.data_type() == onnx::TensorProto::INT32) {
      bool isBool = proto.data_type() == onnx::TensorProto::BOOL;
      t.isBool = isBool;
      size_t width = isBool ? 1 : 4;
      if (proto.has_raw_data() && raw.size() == size_t(count) * width) {
        for (int64_t i = 0; i < count; ++i) {
          int32_t v = 0;
          if (isBool)
            v = static_cast<unsigned char>(raw[i]) != 0;
          else
            std::memcpy(&v, raw.data() + 4 * i, 4);
          t.values.push_back(v);
        }
      } else if (proto.int32_data_size() == count) {
        for (int32_t v : proto.int32_data())
          t.values.push_back(isBool ? v != 0 : v);
      } else {
        return ctx.fail("malformed tensor value");
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

LogicalResult importGather(ImportContext &ctx) {
  auto data = ctx.input(0), indices = ctx.input(1);
  if (failed(data) || failed(indices))
    return failure();
  if (!isa<FloatType>(elementOf(*data)))
    return ctx.fail("gathering from integer tensors computed at run time is "
                    "not supported");
  if (!elementOf(*indices).isInteger(64))
    return ctx.fail("indices must be int64");
  auto axis =
      normalizeAxis(ctx, ctx.intAttr("axis", 0), shapeOf(*data).size());
  if (failed(axis))
    return failure();
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<GatherOp>(ctx.loc(), *data, *indices,
                                 b.getI64IntegerAttr(*axis)));
  return success();
}

LogicalResult importConcat(ImportContext &ctx) {
  SmallVector<Value> inputs;
  for (int i = 0; i < ctx.node->input_size(); ++i) {
    auto v = ctx.input(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  if (inputs.empty())
    return ctx.fail("needs at least one input");
  int64_t rank = shapeOf(inputs[0]).size();
  auto axis = normalizeAxis(ctx, ctx.intAttr("axis", 0), rank);
  if (failed(axis))
    return failure();
  for (Value v : inputs) {
    if (elementOf(v) != elementOf(inputs[0]) ||
        static_cast<int64_t>(shapeOf(v).size()) != rank)
      return ctx.fail("inputs differ in rank or element type");
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis && shapeOf(v)[d] != shapeOf(inputs[0])[d])
        return ctx.fail("inputs differ outside the concatenation axis");
  }
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<ConcatOp>(ctx.loc(), inputs,
                                 b.getI64IntegerAttr(*axis)));
  return success();
}

LogicalResult importSlice(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  int64_t rank = shape.size();
  auto starts = ctx.constInts(1), ends = ctx.constInts(2);
  if (!starts || !ends || starts->size() != ends->size())
    return ctx.fail("starts and ends must be compile-time constants of one "
                    "length");
  std::vector<int64_t> axes, steps(starts->size(), 1);
  for (int64_t i = 0; i < static_cast<int64_t>(starts->size()); ++i)
    axes.push_back(i);
  if (ctx.hasInput(3)) {
    auto a = ctx.constInts(3);
    if (!a)
      return ctx.fail("axes must be a compile-time constant");
    axes = *a;
  }
  if (ctx.hasInput(4)) {
    auto st = ctx.constInts(4);
    if (!st)
      return ctx.fail("steps must be a compile-time constant");
    steps = *st;
  }
  SmallVector<int64_t> begin(rank, 0), step(rank, 1), size(shape);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = normalizeAxis(ctx, axes[i], rank);
    if (failed(axis))
      return failure();
    if (steps[i] <= 0)
      return ctx.fail("negative or zero steps on run-time tensors are not "
                      "supported");
    int64_t dim = shape[*axis];
    int64_t b0 = (*starts)[i], e0 = (*ends)[i];
    if (b0 < 0)
      b0 += dim;
    if (e0 < 0)
      e0 += dim;
    b0 = std::clamp<int64_t>(b0, 0, dim);
    e0 = std::clamp<int64_t>(e0, 0, dim);
    begin[*axis] = b0;
    step[*axis] = steps[i];
    size[*axis] = e0 > b0 ? (e0 - b0 + steps[i] - 1) / steps[i] : 0;
  }
  // A slice of everything (GPT's causal mask cut to the full block size)
  // is its input: no copy.
  if (ArrayRef<int64_t>(size) == shape &&
      llvm::all_of(begin, [](int64_t v) { return v == 0; })) {
    ctx.bind(0, *x);
    return success();
  }
  OpBuilder &b = ctx.builder;
  ctx.bind(0, b.create<SliceOp>(
                  ctx.loc(), RankedTensorType::get(size, elementOf(*x)), *x,
                  b.getDenseI64ArrayAttr(begin), b.getDenseI64ArrayAttr(step)));
  return success();
}

/// Unsqueeze/Squeeze axes: an input from opset 13, an attribute before.
FailureOr<std::vector<int64_t>> squeezeAxes(ImportContext &ctx) {
  if (ctx.opset < 13)
    return ctx.intsAttr("axes", {});
  if (!ctx.hasInput(1))
    return std::vector<int64_t>{};
  auto axes = ctx.constInts(1);
  if (!axes)
    return ctx.fail("axes must be a compile-time constant");
  return *axes;
}

LogicalResult importUnsqueeze(ImportContext &ctx) {
  auto x = ctx.input(0);
  auto axes = squeezeAxes(ctx);
  if (failed(x) || failed(axes))
    return failure();
  int64_t rank = shapeOf(*x).size() + axes->size();
  SmallVector<bool> added(rank, false);
  for (int64_t a : *axes) {
    auto axis = normalizeAxis(ctx, a, rank);
    if (failed(axis))
      return failure();
    if (added[*axis])
      return ctx.fail("repeated axis");
    added[*axis] = true;
  }
  SmallVector<int64_t> shape;
  size_t j = 0;
  for (int64_t i = 0; i < rank; ++i)
    shape.push_back(added[i] ? 1 : shapeOf(*x)[j++]);
  ctx.bind(0, reshape(ctx, *x, shape));
  return success();
}

LogicalResult importSqueeze(ImportContext &ctx) {
  auto x = ctx.input(0);
  auto axes = squeezeAxes(ctx);
  if (failed(x) || failed(axes))
    return failure();
  ArrayRef<int64_t> in = shapeOf(*x);
  SmallVector<bool> drop(in.size(), axes->empty());
  for (int64_t a : *axes) {
    auto axis = normalizeAxis(ctx, a, in.size());
    if (failed(axis))
      return failure();
    if (in[*axis] != 1)
      return ctx.fail("cannot squeeze dim " + Twine(*axis) + " of size " +
                      Twine(in[*axis]));
    drop[*axis] = true;
  }
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i] || in[i] != 1)
      shape.push_back(in[i]);
  ctx.bind(0, reshape(ctx, *x, shape));
  return success();
}

LogicalResult importExpand(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  auto target = ctx.constInts(1);
  if (!target)
    return ctx.fail("the shape input must be a compile-time constant");
  auto shape = broadcastShapes(shapeOf(*x), *target);
  if (failed(shape))
    return ctx.fail("the shape does not broadcast with the input");
  if (ArrayRef<int64_t>(*shape) == shapeOf(*x)) {
    ctx.bind(0, *x);
    return success();
  }
  ctx.bind(0, ctx.builder.create<ExpandOp>(
                  ctx.loc(), RankedTensorType::get(*shape, elementOf(*x)),
                  *x));
  return success();
}

LogicalResult importSplit(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  int64_t rank = shape.size();
  auto axis = normalizeAxis(ctx, ctx.intAttr("axis", 0), rank);
  if (failed(axis))
    return failure();
  int outputs = ctx.node->output_size();
  std::vector<int64_t> sizes;
  if (ctx.opset >= 13 && ctx.hasInput(1)) {
    auto split = ctx.constInts(1);
    if (!split)
      return ctx.fail("split sizes must be a compile-time constant");
    sizes = *split;
  } else if (ctx.attr("split")) {
    sizes = ctx.intsAttr("split", {});
  } else {
    int64_t parts = ctx.intAttr("num_outputs", outputs);
    int64_t chunk = (shape[*axis] + parts - 1) / parts;
    for (int64_t i = 0, left = shape[*axis]; i < parts; ++i, left -= chunk)
      sizes.push_back(std::min(chunk, left));
  }
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (static_cast<int>(sizes.size()) != outputs || total != shape[*axis])
    return ctx.fail("split sizes do not add up to dim " + Twine(*axis));
  OpBuilder &b = ctx.builder;
  int64_t start = 0;
  for (int i = 0; i < outputs; ++i) {
    SmallVector<int64_t> starts(rank, 0), steps(rank, 1), size(shape);
    starts[*axis] = start;
    size[*axis] = sizes[i];
    ctx.bind(i, b.create<SliceOp>(
                    ctx.loc(), RankedTensorType::get(size, elementOf(*x)), *x,
                    b.getDenseI64ArrayAttr(starts),
                    b.getDenseI64ArrayAttr(steps)));
    start += sizes[i];
  }
  return success();
}

} // namespace

void mtc::import::registerShapeImporters(llvm::StringMap<OpImporter> &table) {
  table["Concat"] = importConcat;
  table["Constant"] = importConstant;
  table["Expand"] = importExpand;
  table["Gather"] = importGather;
  table["Slice"] = importSlice;
  table["Split"] = importSplit;
  table["Squeeze"] = importSqueeze;
  table["Unsqueeze"] = importUnsqueeze;
  table["Flatten"] = importFlatten;
  table["Identity"] = importIdentity;
  table["Pad"] = importPad;
  table["Reshape"] = importReshape;
  table["Transpose"] = importTranspose;
}
