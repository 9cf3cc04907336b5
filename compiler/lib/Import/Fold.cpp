//===- Fold.cpp - Import-time evaluation of shape computations ------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Exported graphs compute shapes, pads and masks at run time (Shape, Gather,
// Concat, ConstantOfShape, ...). With static shapes these are constants, so
// the importer evaluates them on KnownTensors and the dialect stays static.
// A node is folded only when none of its inputs is a run-time value; Shape
// needs only its input's static shape.
//
//===----------------------------------------------------------------------===//

#include "ImportContext.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Input `i` as a KnownTensor; null when it is absent or not known.
const KnownTensor *in(ImportContext &ctx, int i) { return ctx.known(i); }

std::optional<KnownTensor> foldShape(ImportContext &ctx) {
  auto shape = ctx.inputShape(0);
  if (!shape)
    return std::nullopt;
  int64_t rank = shape->size();
  int64_t start = ctx.intAttr("start", 0), end = ctx.intAttr("end", rank);
  if (start < 0)
    start += rank;
  if (end < 0)
    end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  KnownTensor t;
  for (int64_t i = start; i < end; ++i)
    t.values.push_back(static_cast<double>((*shape)[i]));
  t.shape = {end - start};
  return t;
}

std::optional<KnownTensor> foldBinary(ImportContext &ctx,
                                      std::function<double(double, double)> f,
                                      bool boolResult = false) {
  const KnownTensor *a = in(ctx, 0), *b = in(ctx, 1);
  if (!a || !b)
    return std::nullopt;
  auto shape = broadcastShapes(a->shape, b->shape);
  if (failed(shape))
    return std::nullopt;
  KnownTensor t;
  t.shape.assign(shape->begin(), shape->end());
  t.isFloat = !boolResult && (a->isFloat || b->isFloat);
  t.isBool = boolResult;
  int64_t n = count(t.shape), rank = t.shape.size();
  auto index = [&](const KnownTensor &x, int64_t flat) {
    int64_t offset = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t c = flat % t.shape[d];
      flat /= t.shape[d];
      int64_t xd = d - (rank - static_cast<int64_t>(x.shape.size()));
      if (xd >= 0) {
        if (x.shape[xd] != 1)
          offset += c * stride;
        stride *= x.shape[xd];
      }
    }
    return x.values[offset];
  };
  for (int64_t i = 0; i < n; ++i) {
    double v = f(index(*a, i), index(*b, i));
    if (!t.isFloat && !boolResult)
      v = std::trunc(v);
    t.values.push_back(v);
  }
  return t;
}

std::optional<KnownTensor> foldGather(ImportContext &ctx) {
  const KnownTensor *data = in(ctx, 0), *indices = in(ctx, 1);
  if (!data || !indices || data->shape.empty())
    return std::nullopt;
  int64_t rank = data->shape.size();
  int64_t axis = ctx.intAttr("axis", 0);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  int64_t outer = 1, inner = 1, dim = data->shape[axis];
  for (int64_t i = 0; i < axis; ++i)
    outer *= data->shape[i];
  for (int64_t i = axis + 1; i < rank; ++i)
    inner *= data->shape[i];
  KnownTensor t;
  t.isFloat = data->isFloat;
  t.isBool = data->isBool;
  t.shape.assign(data->shape.begin(), data->shape.begin() + axis);
  t.shape.insert(t.shape.end(), indices->shape.begin(), indices->shape.end());
  t.shape.insert(t.shape.end(), data->shape.begin() + axis + 1,
                 data->shape.end());
  for (int64_t o = 0; o < outer; ++o)
    for (double idx : indices->values) {
      int64_t k = static_cast<int64_t>(idx);
      if (k < 0)
        k += dim;
      if (k < 0 || k >= dim)
        return std::nullopt;
      for (int64_t i = 0; i < inner; ++i)
        t.values.push_back(data->values[(o * dim + k) * inner + i]);
    }
  return t;
}

std::optional<KnownTensor> foldCast(ImportContext &ctx) {
  const KnownTensor *x = in(ctx, 0);
  if (!x)
    return std::nullopt;
  KnownTensor t = *x;
  int64_t to = ctx.intAttr("to", onnx::TensorProto::FLOAT);
  switch (to) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::DOUBLE:
    t.isFloat = true;
    t.isBool = false;
    break;
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL:
    t.isFloat = false;
    t.isBool = to == onnx::TensorProto::BOOL;
    for (double &v : t.values)
      v = t.isBool ? (v != 0) : std::trunc(v);
    break;
  default:
    return std::nullopt;
  }
  return t;
}

std::optional<KnownTensor> foldConstantOfShape(ImportContext &ctx) {
  auto shape = ctx.constInts(0);
  if (!shape)
    return std::nullopt;
  for (int64_t d : *shape)
    if (d < 0)
      return std::nullopt;
  KnownTensor t;
  t.shape = *shape;
  double value = 0;
  if (const auto *a = ctx.attr("value")) {
    const onnx::TensorProto &v = a->t();
    t.isFloat = v.data_type() == onnx::TensorProto::FLOAT;
    if (v.float_data_size())
      value = v.float_data(0);
    else if (v.int64_data_size())
      value = static_cast<double>(v.int64_data(0));
    else if (v.raw_data().size() == 4 && t.isFloat) {
      float f;
      std::memcpy(&f, v.raw_data().data(), 4);
      value = f;
    } else if (v.raw_data().size() == 8) {
      int64_t i;
      std::memcpy(&i, v.raw_data().data(), 8);
      value = static_cast<double>(i);
    }
  } else {
    t.isFloat = true;
  }
  t.values.assign(count(t.shape), value);
  return t;
}

std::optional<KnownTensor> foldConcat(ImportContext &ctx) {
  std::vector<const KnownTensor *> parts;
  for (int i = 0; i < ctx.node->input_size(); ++i) {
    const KnownTensor *p = in(ctx, i);
    if (!p || p->shape.empty())
      return std::nullopt;
    parts.push_back(p);
  }
  if (parts.empty())
    return std::nullopt;
  int64_t rank = parts[0]->shape.size();
  int64_t axis = ctx.intAttr("axis", 0);
  if (axis < 0)
    axis += rank;
  // Malformed nodes are left to the importer, which reports them.
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  for (const KnownTensor *p : parts) {
    if (static_cast<int64_t>(p->shape.size()) != rank)
      return std::nullopt;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && p->shape[d] != parts[0]->shape[d])
        return std::nullopt;
  }
  KnownTensor t;
  t.isFloat = parts[0]->isFloat;
  t.isBool = parts[0]->isBool;
  t.shape = parts[0]->shape;
  t.shape[axis] = 0;
  for (const KnownTensor *p : parts)
    t.shape[axis] += p->shape[axis];
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= t.shape[i];
  for (int64_t o = 0; o < outer; ++o)
    for (const KnownTensor *p : parts) {
      int64_t chunk = count(p->shape) / outer;
      t.values.insert(t.values.end(), p->values.begin() + o * chunk,
                      p->values.begin() + (o + 1) * chunk);
    }
  return t;
}

std::optional<KnownTensor> foldSlice(ImportContext &ctx) {
  const KnownTensor *data = in(ctx, 0);
  auto starts = ctx.constInts(1), ends = ctx.constInts(2);
  if (!data || !starts || !ends)
    return std::nullopt;
  int64_t rank = data->shape.size();
  std::vector<int64_t> axes, steps(starts->size(), 1);
  for (int64_t i = 0; i < static_cast<int64_t>(starts->size()); ++i)
    axes.push_back(i);
  if (ctx.hasInput(3)) {
    auto a = ctx.constInts(3);
    if (!a)
      return std::nullopt;
    axes = *a;
  }
  if (ctx.hasInput(4)) {
    auto s = ctx.constInts(4);
    if (!s)
      return std::nullopt;
    steps = *s;
  }
  if (axes.size() != starts->size() || ends->size() != starts->size() ||
      steps.size() != starts->size())
    return std::nullopt;
  std::vector<int64_t> begin(rank, 0), step(rank, 1), size = data->shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (axis < 0 || axis >= rank || steps[i] == 0)
      return std::nullopt;
    int64_t dim = data->shape[axis], s = steps[i];
    int64_t b = (*starts)[i], e = (*ends)[i];
    if (b < 0)
      b += dim;
    if (e < 0)
      e += dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      size[axis] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      size[axis] = b > e ? (b - e + (-s) - 1) / (-s) : 0;
    }
    begin[axis] = b;
    step[axis] = s;
  }
  KnownTensor t;
  t.isFloat = data->isFloat;
  t.isBool = data->isBool;
  t.shape = size;
  std::vector<int64_t> strides = stridesOf(data->shape);
  int64_t n = count(size);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, offset = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t c = rest % size[d];
      rest /= size[d];
      offset += (begin[d] + c * step[d]) * strides[d];
    }
    t.values.push_back(data->values[offset]);
  }
  return t;
}

std::optional<KnownTensor> foldReshape(ImportContext &ctx) {
  const KnownTensor *data = in(ctx, 0);
  auto target = ctx.constInts(1);
  if (!data || !target)
    return std::nullopt;
  auto shape = resolveReshape(ctx, data->shape, *target,
                              ctx.intAttr("allowzero", 0));
  if (failed(shape))
    return std::nullopt;
  KnownTensor t = *data;
  t.shape = *shape;
  return t;
}

std::optional<KnownTensor> foldTranspose(ImportContext &ctx) {
  const KnownTensor *data = in(ctx, 0);
  if (!data)
    return std::nullopt;
  int64_t rank = data->shape.size();
  std::vector<int64_t> reversed;
  for (int64_t i = rank - 1; i >= 0; --i)
    reversed.push_back(i);
  auto perm = ctx.intsAttr("perm", reversed);
  if (static_cast<int64_t>(perm.size()) != rank)
    return std::nullopt;
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return std::nullopt;
    seen[p] = true;
  }
  KnownTensor t;
  t.isFloat = data->isFloat;
  t.isBool = data->isBool;
  for (int64_t p : perm)
    t.shape.push_back(data->shape[p]);
  std::vector<int64_t> strides = stridesOf(data->shape);
  int64_t n = count(t.shape);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, offset = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      int64_t c = rest % t.shape[d];
      rest /= t.shape[d];
      offset += c * strides[perm[d]];
    }
    t.values.push_back(data->values[offset]);
  }
  return t;
}

/// Unsqueeze and Squeeze: axes from the input (opset 13+) or the attribute.
std::optional<std::vector<int64_t>> axesOf(ImportContext &ctx) {
  if (ctx.opset >= 13) {
    if (!ctx.hasInput(1))
      return std::vector<int64_t>{};
    return ctx.constInts(1);
  }
  return ctx.intsAttr("axes", {});
}

std::optional<KnownTensor> foldUnsqueeze(ImportContext &ctx) {
  const KnownTensor *data = in(ctx, 0);
  auto axes = axesOf(ctx);
  if (!data || !axes)
    return std::nullopt;
  int64_t rank = data->shape.size() + axes->size();
  std::vector<bool> added(rank, false);
  for (int64_t a : *axes) {
    if (a < 0)
      a += rank;
    if (a < 0 || a >= rank || added[a])
      return std::nullopt;
    added[a] = true;
  }
  KnownTensor t = *data;
  t.shape.clear();
  size_t j = 0;
  for (int64_t i = 0; i < rank; ++i)
    t.shape.push_back(added[i] ? 1 : data->shape[j++]);
  return t;
}

std::optional<KnownTensor> foldSqueeze(ImportContext &ctx) {
  const KnownTensor *data = in(ctx, 0);
  auto axes = axesOf(ctx);
  if (!data || !axes)
    return std::nullopt;
  int64_t rank = data->shape.size();
  std::vector<bool> drop(rank, axes->empty());
  for (int64_t a : *axes) {
    if (a < 0)
      a += rank;
    if (a < 0 || a >= rank)
      return std::nullopt;
    drop[a] = true;
  }
  KnownTensor t = *data;
  t.shape.clear();
  for (int64_t i = 0; i < rank; ++i)
    if (!drop[i] || data->shape[i] != 1)
      t.shape.push_back(data->shape[i]);
  return t;
}

std::optional<KnownTensor> foldRange(ImportContext &ctx) {
  const KnownTensor *start = in(ctx, 0), *limit = in(ctx, 1),
                    *delta = in(ctx, 2);
  if (!start || !limit || !delta || start->values.size() != 1 ||
      limit->values.size() != 1 || delta->values.size() != 1 ||
      delta->values[0] == 0)
    return std::nullopt;
  KnownTensor t;
  t.isFloat = start->isFloat;
  double s = start->values[0], l = limit->values[0], d = delta->values[0];
  const double steps = std::ceil((l - s) / d);
  if (!std::isfinite(steps) || steps > double(1 << 30))
    return std::nullopt;
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(steps));
  for (int64_t i = 0; i < n; ++i)
    t.values.push_back(s + i * d);
  t.shape = {n};
  return t;
}

std::optional<KnownTensor> foldWhere(ImportContext &ctx) {
  const KnownTensor *c = in(ctx, 0), *a = in(ctx, 1), *b = in(ctx, 2);
  if (!c || !a || !b)
    return std::nullopt;
  // Where(c, a, b) = c ? a : b, as two broadcasts through foldBinary's rule.
  auto shape = broadcastShapes(c->shape, a->shape);
  if (failed(shape) || failed(broadcastShapes(*shape, b->shape)) ||
      c->shape != a->shape || a->shape != b->shape)
    return std::nullopt;
  KnownTensor t = *a;
  for (size_t i = 0; i < t.values.size(); ++i)
    t.values[i] = c->values[i] != 0 ? a->values[i] : b->values[i];
  return t;
}

std::optional<KnownTensor> foldTrilu(ImportContext &ctx) {
  const KnownTensor *x = in(ctx, 0);
  if (!x || x->shape.size() < 2)
    return std::nullopt;
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    auto kv = ctx.constInts(1);
    if (!kv || kv->size() != 1)
      return std::nullopt;
    k = (*kv)[0];
  }
  bool upper = ctx.intAttr("upper", 1);
  KnownTensor t = *x;
  int64_t rows = x->shape[x->shape.size() - 2], cols = x->shape.back();
  for (size_t flat = 0; flat < t.values.size(); ++flat) {
    int64_t j = flat % cols, i = (flat / cols) % rows;
    bool keep = upper ? j - i >= k : j - i <= k;
    if (!keep)
      t.values[flat] = 0;
  }
  return t;
}

std::optional<KnownTensor> foldNot(ImportContext &ctx) {
  const KnownTensor *x = in(ctx, 0);
  if (!x)
    return std::nullopt;
  KnownTensor t = *x;
  t.isBool = true;
  t.isFloat = false;
  for (double &v : t.values)
    v = v == 0;
  return t;
}

using Folder = std::optional<KnownTensor> (*)(ImportContext &);

const llvm::StringMap<Folder> &folders() {
  static const llvm::StringMap<Folder> table = [] {
    llvm::StringMap<Folder> t;
    t["Add"] = [](ImportContext &c) {
      return foldBinary(c, [](double a, double b) { return a + b; });
    };
    t["Cast"] = foldCast;
    t["Concat"] = foldConcat;
    t["ConstantOfShape"] = foldConstantOfShape;
    t["Div"] = [](ImportContext &c) {
      return foldBinary(c, [](double a, double b) { return a / b; });
    };
    t["Equal"] = [](ImportContext &c) {
      return foldBinary(
          c, [](double a, double b) { return double(a == b); }, true);
    };
    t["Gather"] = foldGather;
    t["Identity"] = [](ImportContext &c) -> std::optional<KnownTensor> {
      if (const KnownTensor *x = in(c, 0))
        return *x;
      return std::nullopt;
    };
    t["Mod"] = [](ImportContext &c) -> std::optional<KnownTensor> {
      // fmod 0 (integers only): the remainder takes the divisor's sign, as
      // Python's %; fmod 1: the dividend's, as C's fmod. Not folded by zero.
      const KnownTensor *divisor = in(c, 1);
      if (!divisor || llvm::is_contained(divisor->values, 0.0))
        return std::nullopt;
      bool cStyle = c.intAttr("fmod", 0) != 0;
      return foldBinary(c, [cStyle](double a, double b) {
        double r = std::fmod(a, b);
        if (!cStyle && r != 0 && (r < 0) != (b < 0))
          r += b;
        return r;
      });
    };
    t["Mul"] = [](ImportContext &c) {
      return foldBinary(c, [](double a, double b) { return a * b; });
    };
    t["Pow"] = [](ImportContext &c) -> std::optional<KnownTensor> {
      // The result has the base's type (an integer base truncates).
      const KnownTensor *base = in(c, 0);
      auto t = foldBinary(c, [](double a, double b) { return std::pow(a, b); });
      if (t && base && !base->isFloat) {
        t->isFloat = false;
        for (double &v : t->values)
          v = std::trunc(v);
      }
      return t;
    };
    t["Range"] = foldRange;
    t["Reshape"] = foldReshape;
    t["Shape"] = foldShape;
    t["Slice"] = foldSlice;
    t["Squeeze"] = foldSqueeze;
    t["Sub"] = [](ImportContext &c) {
      return foldBinary(c, [](double a, double b) { return a - b; });
    };
    t["Transpose"] = foldTranspose;
    t["Trilu"] = foldTrilu;
    t["Not"] = foldNot;
    t["Unsqueeze"] = foldUnsqueeze;
    t["Where"] = foldWhere;
    return t;
  }();
  return table;
}

/// Ops that only exist in mtc as import-time computations.
LogicalResult importFoldOnly(ImportContext &ctx) {
  return ctx.fail("is only supported on compile-time constants (shape "
                  "computations); here an input is computed at run time");
}

} // namespace

bool mtc::import::tryFoldNode(ImportContext &ctx) {
  Folder folder = folders().lookup(ctx.node->op_type());
  if (!folder)
    return false;
  // Shape reads only the static shape; everything else needs known inputs.
  if (ctx.node->op_type() != "Shape")
    for (int i = 0; i < ctx.node->input_size(); ++i)
      if (ctx.hasInput(i) && (ctx.isRuntimeValue(i) || !ctx.known(i)))
        return false;
  std::optional<KnownTensor> result = folder(ctx);
  if (!result)
    return false;
  ctx.bindKnown(0, std::move(*result));
  return true;
}

FailureOr<std::vector<int64_t>>
mtc::import::resolveReshape(ImportContext &ctx, ArrayRef<int64_t> input,
                            ArrayRef<int64_t> target, bool allowZero) {
  std::vector<int64_t> shape;
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (d == 0 && !allowZero) {
      if (i >= input.size())
        return ctx.fail("shape copies dim " + Twine(i) +
                        " that the input does not have");
      d = input[i];
    }
    if (d == -1) {
      if (inferred >= 0)
        return ctx.fail("shape has more than one -1");
      inferred = i;
    } else if (d < 0) {
      return ctx.fail("invalid dim " + Twine(d) + " in shape");
    } else {
      known *= d;
    }
    shape.push_back(d);
  }
  int64_t total = 1;
  for (int64_t d : input)
    total *= d;
  if (inferred >= 0) {
    if (known == 0 || total % known)
      return ctx.fail("cannot infer the -1 dim");
    shape[inferred] = total / known;
  } else if (known != total) {
    return ctx.fail("shape has " + Twine(known) + " elements, input " +
                    Twine(total));
  }
  return shape;
}

void mtc::import::registerFoldOnlyImporters(
    llvm::StringMap<OpImporter> &table) {
  for (const char *op :
       {"ConstantOfShape", "Mod", "Range", "Shape", "Trilu"})
    table[op] = importFoldOnly;
}
