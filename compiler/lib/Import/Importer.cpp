//===- Importer.cpp - ONNX graph to @forward ------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "ImportContext.h"
#include "OnnxLoader.h"

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Import/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

//===----------------------------------------------------------------------===//
// ImportContext
//===----------------------------------------------------------------------===//

Location ImportContext::loc() const {
  MLIRContext *context = builder.getContext();
  std::string name = node->name().empty() ? node->op_type() : node->name();
  return NameLoc::get(StringAttr::get(context, name));
}

LogicalResult ImportContext::fail(const Twine &message) const {
  return emitError(loc()) << node->op_type() << " node '" << node->name()
                          << "': " << message;
}

bool ImportContext::hasInput(int i) const {
  return i < node->input_size() && !node->input(i).empty();
}

bool ImportContext::hasOutput(int i) const {
  return i < node->output_size() && !node->output(i).empty();
}

FailureOr<Value> ImportContext::lookup(const std::string &name) {
  auto it = values.find(name);
  if (it != values.end())
    return it->second;
  auto k = knownTensors.find(name);
  if (k == knownTensors.end())
    return failure();
  // Materialize the constant once.
  const KnownTensor &t = k->second;
  Type element = t.isFloat  ? Type(builder.getF32Type())
                 : t.isBool ? Type(builder.getI1Type())
                            : Type(builder.getI64Type());
  auto type = RankedTensorType::get(t.shape, element);
  DenseElementsAttr attr;
  if (t.isBool) {
    SmallVector<bool> data;
    for (double v : t.values)
      data.push_back(v != 0);
    attr = DenseElementsAttr::get(type, ArrayRef<bool>(data));
  } else if (t.isFloat) {
    SmallVector<float> data(t.values.begin(), t.values.end());
    attr = DenseElementsAttr::get(type, ArrayRef<float>(data));
  } else {
    SmallVector<int64_t> data;
    for (double v : t.values)
      data.push_back(static_cast<int64_t>(v));
    attr = DenseElementsAttr::get(type, ArrayRef<int64_t>(data));
  }
  Value v = builder.create<ConstantOp>(
      NameLoc::get(builder.getStringAttr(name)), attr);
  values[name] = v;
  return v;
}

FailureOr<Value> ImportContext::input(int i) {
  if (!hasInput(i)) {
    (void)fail("missing input " + Twine(i));
    return failure();
  }
  auto v = lookup(node->input(i));
  if (failed(v))
    (void)fail("input '" + node->input(i) + "' is not defined before use");
  return v;
}

std::optional<std::vector<int64_t>> ImportContext::constInts(int i) const {
  if (!hasInput(i))
    return std::nullopt;
  auto k = knownTensors.find(node->input(i));
  if (k == knownTensors.end() || k->second.isFloat)
    return std::nullopt;
  // Known values are doubles: INT64_MAX (Slice's "to the end") reads back
  // as 2^63, which must saturate rather than overflow.
  std::vector<int64_t> out;
  for (double v : k->second.values)
    out.push_back(v >= 0x1p63    ? std::numeric_limits<int64_t>::max()
                  : v <= -0x1p63 ? std::numeric_limits<int64_t>::min()
                                 : static_cast<int64_t>(v));
  return out;
}

std::optional<std::vector<double>> ImportContext::constFloats(int i) const {
  if (!hasInput(i))
    return std::nullopt;
  auto k = knownTensors.find(node->input(i));
  if (k == knownTensors.end())
    return std::nullopt;
  return k->second.values;
}

const KnownTensor *ImportContext::known(int i) const {
  if (!hasInput(i))
    return nullptr;
  auto k = knownTensors.find(node->input(i));
  return k == knownTensors.end() ? nullptr : &k->second;
}

std::optional<std::vector<int64_t>> ImportContext::inputShape(int i) const {
  if (!hasInput(i))
    return std::nullopt;
  auto v = values.find(node->input(i));
  if (v != values.end()) {
    ArrayRef<int64_t> shape = shapeOf(v->second);
    return std::vector<int64_t>(shape.begin(), shape.end());
  }
  if (const KnownTensor *k = known(i))
    return k->shape;
  return std::nullopt;
}

const onnx::AttributeProto *ImportContext::attr(StringRef name) const {
  for (const auto &a : node->attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t ImportContext::intAttr(StringRef name, int64_t fallback) const {
  const auto *a = attr(name);
  return a ? a->i() : fallback;
}

float ImportContext::floatAttr(StringRef name, float fallback) const {
  const auto *a = attr(name);
  return a ? a->f() : fallback;
}

std::string ImportContext::stringAttr(StringRef name,
                                      StringRef fallback) const {
  const auto *a = attr(name);
  return a ? a->s() : fallback.str();
}

std::vector<int64_t> ImportContext::intsAttr(StringRef name,
                                             std::vector<int64_t> fallback)
    const {
  const auto *a = attr(name);
  if (!a)
    return fallback;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

void ImportContext::bind(int i, Value value) {
  if (hasOutput(i))
    values[node->output(i)] = value;
}

void ImportContext::bindKnown(int i, KnownTensor tensor) {
  if (hasOutput(i))
    knownTensors[node->output(i)] = std::move(tensor);
}

ArrayRef<int64_t> mtc::import::shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

FailureOr<int64_t> mtc::import::normalizeAxis(ImportContext &ctx, int64_t axis,
                                              int64_t rank) {
  if (axis < -rank || axis >= rank) {
    (void)ctx.fail("axis " + Twine(axis) + " is out of range for rank " +
                   Twine(rank));
    return failure();
  }
  return axis < 0 ? axis + rank : axis;
}

const llvm::StringMap<OpImporter> &mtc::import::getOpImporters() {
  static const llvm::StringMap<OpImporter> table = [] {
    llvm::StringMap<OpImporter> t;
    registerElementwiseImporters(t);
    registerLinalgImporters(t);
    registerConvPoolImporters(t);
    registerShapeImporters(t);
    registerReduceImporters(t);
    registerLossImporters(t);
    registerFoldOnlyImporters(t);
    registerNormImporters(t);
    return t;
  }();
  return table;
}

std::vector<std::string> mtc::getSupportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &entry : import::getOpImporters())
    ops.push_back(entry.getKey().str());
  llvm::sort(ops);
  return ops;
}

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

namespace {

llvm::Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string dtypeName(int32_t dtype) {
  return onnx::TensorProto::DataType_Name(
      static_cast<onnx::TensorProto::DataType>(dtype));
}

/// The element type mtc uses for an ONNX dtype, or null when unsupported.
Type elementTypeOf(Builder &b, int32_t dtype) {
  switch (dtype) {
  case onnx::TensorProto::FLOAT:
    return b.getF32Type();
  case onnx::TensorProto::INT64:
    return b.getI64Type();
  case onnx::TensorProto::BOOL:
    return b.getI1Type();
  default:
    return nullptr;
  }
}

/// Decodes an initializer or Constant tensor into doubles.
llvm::Expected<KnownTensor> decodeTensor(const onnx::TensorProto &t) {
  KnownTensor out;
  out.shape.assign(t.dims().begin(), t.dims().end());
  int64_t count = 1;
  for (int64_t d : out.shape)
    count *= d;
  const std::string &raw = t.raw_data();
  auto bad = [&] {
    return makeError("tensor '" + t.name() + "' holds the wrong number of " +
                     "elements for its shape");
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT: {
    out.isFloat = true;
    if (t.has_raw_data()) {
      if (raw.size() != static_cast<size_t>(count) * 4)
        return bad();
      for (int64_t i = 0; i < count; ++i) {
        float v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        out.values.push_back(v);
      }
    } else {
      if (t.float_data_size() != count)
        return bad();
      out.values.assign(t.float_data().begin(), t.float_data().end());
    }
    return out;
  }
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::INT32: {
    size_t width = t.data_type() == onnx::TensorProto::INT64 ? 8 : 4;
    if (t.has_raw_data()) {
      if (raw.size() != static_cast<size_t>(count) * width)
        return bad();
      for (int64_t i = 0; i < count; ++i) {
        int64_t v = 0;
        if (width == 8) {
          std::memcpy(&v, raw.data() + 8 * i, 8);
        } else {
          int32_t v32;
          std::memcpy(&v32, raw.data() + 4 * i, 4);
          v = v32;
        }
        out.values.push_back(static_cast<double>(v));
      }
    } else if (width == 8) {
      if (t.int64_data_size() != count)
        return bad();
      for (int64_t v : t.int64_data())
        out.values.push_back(static_cast<double>(v));
    } else {
      if (t.int32_data_size() != count)
        return bad();
      for (int32_t v : t.int32_data())
        out.values.push_back(v);
    }
    return out;
  }
  default:
    return makeError("tensor '" + t.name() + "' has element type " +
                     dtypeName(t.data_type()) +
                     "; mtc supports FLOAT and INT64 tensors");
  }
}

/// An f32 initializer as a resource blob (not printed inline: models are
/// large), copied straight from the protobuf's bytes.
llvm::Expected<DenseResourceElementsAttr>
floatResource(Builder &b, const onnx::TensorProto &t) {
  SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  ArrayRef<char> bytes;
  if (t.has_raw_data())
    bytes = ArrayRef<char>(t.raw_data().data(), t.raw_data().size());
  else
    bytes = ArrayRef<char>(
        reinterpret_cast<const char *>(t.float_data().data()),
        t.float_data_size() * sizeof(float));
  if (bytes.size() != static_cast<size_t>(count) * sizeof(float))
    return makeError("tensor '" + t.name() + "' holds the wrong number of " +
                     "elements for its shape");
  auto type = RankedTensorType::get(shape, b.getF32Type());
  return DenseResourceElementsAttr::get(
      type, t.name(),
      HeapAsmResourceBlob::allocateAndCopyWithAlign(bytes, alignof(float)));
}

/// The ranked tensor type of a graph input, with every dim bound.
llvm::Expected<RankedTensorType> inputType(Builder &b,
                                           const onnx::ValueInfoProto &info) {
  if (!info.type().has_tensor_type())
    return makeError("input '" + info.name() + "' is not a tensor");
  const auto &tensor = info.type().tensor_type();
  Type element = elementTypeOf(b, tensor.elem_type());
  if (!element)
    return makeError("input '" + info.name() + "' has element type " +
                     dtypeName(tensor.elem_type()) +
                     "; mtc supports FLOAT, INT64 and BOOL inputs");
  if (!tensor.has_shape())
    return makeError("input '" + info.name() + "' has no shape");
  SmallVector<int64_t> shape;
  for (const auto &dim : tensor.shape().dim()) {
    if (!dim.has_dim_value())
      return makeError("input '" + info.name() + "' has an unbound dim");
    shape.push_back(dim.dim_value());
  }
  return RankedTensorType::get(shape, element);
}

/// Checks that a graph output keeps the element type the model declares.
/// mtc computes only f32, i64 and i1 tensors; import-time folding of, e.g.,
/// an INT32 or DOUBLE computation would otherwise silently change the
/// output's type.
llvm::Error checkOutputType(const onnx::ValueInfoProto &info, Value value) {
  if (!info.type().has_tensor_type() ||
      info.type().tensor_type().elem_type() == onnx::TensorProto::UNDEFINED)
    return llvm::Error::success();
  int32_t declared = info.type().tensor_type().elem_type();
  Type element = cast<RankedTensorType>(value.getType()).getElementType();
  bool same;
  switch (declared) {
  case onnx::TensorProto::FLOAT:
    same = element.isF32();
    break;
  case onnx::TensorProto::INT64:
    same = element.isInteger(64);
    break;
  case onnx::TensorProto::BOOL:
    same = element.isInteger(1);
    break;
  default:
    return makeError("graph output '" + info.name() + "' has element type " +
                     dtypeName(declared) +
                     "; mtc supports FLOAT, INT64 and BOOL outputs");
  }
  if (!same) {
    std::string computed;
    llvm::raw_string_ostream os(computed);
    os << element;
    return makeError("graph output '" + info.name() + "' is declared " +
                     dtypeName(declared) + " but mtc computes it as " +
                     computed);
  }
  return llvm::Error::success();
}

int64_t defaultOpset(const onnx::ModelProto &model) {
  for (const auto &op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx")
      return op.version();
  return -1;
}

std::string supportedList() {
  std::string list;
  for (const std::string &op : getSupportedOnnxOps())
    list += (list.empty() ? "" : ", ") + op;
  return list;
}

} // namespace

//===----------------------------------------------------------------------===//
// Appended losses
//===----------------------------------------------------------------------===//

/// Adds the labels input and the loss on `output` (`--loss`).
static llvm::Expected<Value> appendLoss(OpBuilder &b, func::FuncOp func,
                                        Value output,
                                        const ImportOptions &options) {
  auto type = cast<RankedTensorType>(output.getType());
  ArrayRef<int64_t> shape = type.getShape();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto name = func.getArgAttrOfType<StringAttr>(i, attr::kName))
      if (name.getValue() == options.labelsName)
        return makeError("--labels '" + options.labelsName +
                         "' is already a graph input or initializer");
  Type labelsType;
  if (options.appendLoss == "cross-entropy") {
    if (shape.size() < 2)
      return makeError("--loss cross-entropy needs logits [N, C, ...] as the "
                       "first output");
    SmallVector<int64_t> labels{shape[0]};
    labels.append(shape.begin() + 2, shape.end());
    labelsType = RankedTensorType::get(labels, b.getI64Type());
  } else if (options.appendLoss == "mse") {
    labelsType = type;
  } else {
    return makeError("unknown --loss '" + options.appendLoss +
                     "' (expected cross-entropy or mse)");
  }
  unsigned index = func.getNumArguments();
  NamedAttribute attrs[] = {
      b.getNamedAttr(attr::kRole, b.getStringAttr(attr::role::kInput)),
      b.getNamedAttr(attr::kName, b.getStringAttr(options.labelsName))};
  (void)func.insertArgument(index, labelsType, b.getDictionaryAttr(attrs),
                            func.getLoc());
  Value labels = func.getArgument(index);
  Location loc = NameLoc::get(b.getStringAttr("loss"));
  if (options.appendLoss == "cross-entropy")
    return Value(b.create<SoftmaxCrossEntropyOp>(
                      loc, output, labels, b.getStringAttr("mean"),
                      IntegerAttr())
                     .getLoss());
  Value diff = b.create<SubOp>(loc, output, labels);
  Value sq = b.create<MulOp>(loc, diff, diff);
  SmallVector<int64_t> axes;
  for (size_t i = 0; i < shape.size(); ++i)
    axes.push_back(i);
  return Value(b.create<ReduceMeanOp>(loc, sq, b.getDenseI64ArrayAttr(axes),
                                      b.getBoolAttr(false)));
}

//===----------------------------------------------------------------------===//
// Graph import
//===----------------------------------------------------------------------===//

llvm::Expected<OwningOpRef<ModuleOp>>
mtc::importOnnxFile(MLIRContext &context, StringRef path,
                    const ImportOptions &options) {
  context.loadDialect<MtcDialect, func::FuncDialect>();
  auto loaded = loadOnnxModel(path, options);
  if (!loaded)
    return loaded.takeError();
  const onnx::ModelProto &model = **loaded;
  const onnx::GraphProto &graph = model.graph();
  int64_t opset = defaultOpset(model);
  if (opset < 11)
    return makeError("'" + path + "' imports ONNX opset " + Twine(opset) +
                     "; mtc supports opsets 11 to 17");

  // Fail early on unsupported ops, listing all of them at once.
  std::string unsupported;
  for (const auto &node : graph.node())
    if (!import::getOpImporters().count(node.op_type()) ||
        !(node.domain().empty() || node.domain() == "ai.onnx"))
      unsupported += "\n  " + node.op_type() + " (node '" + node.name() +
                     "', domain '" +
                     (node.domain().empty() ? "ai.onnx" : node.domain()) +
                     "', opset " + std::to_string(opset) + ")";
  if (!unsupported.empty())
    return makeError("unsupported ONNX ops in '" + path + "':" + unsupported +
                     "\nsupported ops: " + supportedList());

  OpBuilder b(&context);
  Location fileLoc = FileLineColLoc::get(&context, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);

  // Arguments: graph inputs that are not initializers, then initializers.
  llvm::StringMap<const onnx::TensorProto *> initializers;
  for (const auto &t : graph.initializer())
    initializers[t.name()] = &t;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<std::string> argNames;
  auto named = [&](StringRef role, StringRef name,
                   std::optional<NamedAttribute> extra = std::nullopt) {
    SmallVector<NamedAttribute> attrs{
        b.getNamedAttr(attr::kRole, b.getStringAttr(role)),
        b.getNamedAttr(attr::kName, b.getStringAttr(name))};
    if (extra)
      attrs.push_back(*extra);
    return b.getDictionaryAttr(attrs);
  };
  for (const auto &input : graph.input()) {
    if (initializers.count(input.name()))
      continue;
    auto type = inputType(b, input);
    if (!type)
      return type.takeError();
    argTypes.push_back(*type);
    argAttrs.push_back(named(attr::role::kInput, input.name()));
    argNames.push_back(input.name());
  }
  // Float initializers are trainable candidates (autodiff demotes those no
  // gradient reaches to buffers); integer ones are compile-time constants.
  llvm::StringMap<KnownTensor> knownInits;
  for (const auto &t : graph.initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT) {
      auto decoded = decodeTensor(t);
      if (!decoded)
        return decoded.takeError();
      knownInits[t.name()] = std::move(*decoded);
      continue;
    }
    auto resource = floatResource(b, t);
    if (!resource)
      return resource.takeError();
    argTypes.push_back(resource->getType());
    argAttrs.push_back(named(attr::role::kParam, t.name(),
                             b.getNamedAttr(attr::kInit, *resource)));
    argNames.push_back(t.name());
    // Small float initializers may also feed shape-like inputs.
    if (resource->getType().getNumElements() <= 16) {
      auto decoded = decodeTensor(t);
      if (!decoded)
        return decoded.takeError();
      knownInits[t.name()] = std::move(*decoded);
    }
  }

  auto func = func::FuncOp::create(fileLoc, "forward",
                                   b.getFunctionType(argTypes, {}));
  module->push_back(func);
  Block *body = func.addEntryBlock();
  for (unsigned i = 0; i < argAttrs.size(); ++i)
    func.setArgAttrs(i, argAttrs[i]);
  b.setInsertionPointToStart(body);

  ImportContext ctx(b, opset, options.evalMode);
  for (const auto &node : graph.node())
    for (const std::string &in : node.input())
      ctx.readNames.insert(in);
  for (const auto &output : graph.output())
    ctx.readNames.insert(output.name());
  for (unsigned i = 0; i < argNames.size(); ++i)
    ctx.bindName(argNames[i], body->getArgument(i));
  for (auto &entry : knownInits)
    ctx.bindKnownName(entry.getKey().str(), entry.getValue());

  // Capture diagnostics so they become the returned error.
  std::string diagnostics;
  // The verifier's messages name the op, not the ONNX node it came from:
  // its name is the op's location.
  bool verifying = false;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    if (!diagnostics.empty())
      os << "\n";
    if (auto name = dyn_cast<NameLoc>(diag.getLocation()); verifying && name)
      os << "node '" << name.getName().getValue() << "': ";
    os << diag;
    return success();
  });

  for (const auto &node : graph.node()) {
    ctx.node = &node;
    if (tryFoldNode(ctx))
      continue;
    OpImporter importer = import::getOpImporters().lookup(node.op_type());
    if (failed(importer(ctx)))
      return makeError("cannot import '" + path + "': " +
                       (diagnostics.empty() ? "failed to import " +
                                                  node.op_type() + " node '" +
                                                  node.name() + "'"
                                            : diagnostics));
  }

  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  if (!options.appendLoss.empty()) {
    if (graph.output_size() == 0)
      return makeError("--loss needs a model output to apply the loss to");
    auto first = ctx.lookup(graph.output(0).name());
    if (failed(first))
      return makeError("graph output '" + graph.output(0).name() +
                       "' is not produced by any node");
    auto loss = appendLoss(b, func, *first, options);
    if (!loss)
      return loss.takeError();
    results.push_back(*loss);
    resultAttrs.push_back(
        b.getDictionaryAttr(b.getNamedAttr(attr::kName,
                                           b.getStringAttr("loss"))));
  }
  for (const auto &output : graph.output()) {
    auto v = ctx.lookup(output.name());
    if (failed(v))
      return makeError("graph output '" + output.name() +
                       "' is not produced by any node");
    if (llvm::Error err = checkOutputType(output, *v))
      return err;
    results.push_back(*v);
    resultAttrs.push_back(
        b.getDictionaryAttr(b.getNamedAttr(attr::kName,
                                           b.getStringAttr(output.name()))));
  }
  // Running statistics and other buffers the step updates in place.
  for (auto [buffer, newValue] : ctx.bufferUpdates) {
    results.push_back(newValue);
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attr::kRole, b.getStringAttr(attr::role::kUpdate)),
         b.getNamedAttr(attr::kTied,
                        b.getI64IntegerAttr(
                            cast<BlockArgument>(buffer).getArgNumber()))}));
  }
  b.create<func::ReturnOp>(fileLoc, results);
  func.setType(b.getFunctionType(func.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);

  verifying = true;
  if (failed(verify(*module)))
    return makeError("the imported model does not verify:\n" + diagnostics);
  return std::move(module);
}

//===----------------------------------------------------------------------===//
// mtc inspect
//===----------------------------------------------------------------------===//

static std::string describeType(const onnx::TypeProto &type) {
  if (!type.has_tensor_type())
    return "non-tensor";
  const auto &tensor = type.tensor_type();
  std::string out = onnx::TensorProto::DataType_Name(
      static_cast<onnx::TensorProto::DataType>(tensor.elem_type()));
  std::transform(out.begin(), out.end(), out.begin(), ::tolower);
  if (out == "float")
    out = "float32";
  out += "[";
  if (tensor.has_shape())
    for (int i = 0; i < tensor.shape().dim_size(); ++i) {
      const auto &dim = tensor.shape().dim(i);
      out += (i ? ", " : "") + (dim.has_dim_value()
                                    ? std::to_string(dim.dim_value())
                                    : dim.dim_param().empty() ? "?"
                                                              : dim.dim_param());
    }
  return out + "]";
}

llvm::Expected<OnnxSummary>
mtc::summarizeOnnxFile(StringRef path, const ImportOptions &options) {
  // Symbolic dims stay symbolic here: inspection needs no bindings.
  ImportOptions relaxed = options;
  auto loaded = loadOnnxModel(path, relaxed, /*bindAllDims=*/false);
  if (!loaded)
    return loaded.takeError();
  const onnx::GraphProto &graph = (*loaded)->graph();
  OnnxSummary summary;
  summary.opset = defaultOpset(**loaded);
  llvm::StringSet<> initializers;
  for (const auto &t : graph.initializer()) {
    initializers.insert(t.name());
    ++summary.initializerCount;
    int64_t count = 1;
    for (int64_t d : t.dims())
      count *= d;
    if (t.data_type() == onnx::TensorProto::FLOAT) {
      summary.parameterCount += count;
      summary.parameterBytes += 4 * count;
    }
  }
  for (const auto &input : graph.input())
    if (!initializers.contains(input.name()))
      summary.inputs.push_back({input.name(), describeType(input.type())});
  for (const auto &output : graph.output())
    summary.outputs.push_back({output.name(), describeType(output.type())});
  std::map<std::string, int64_t> histogram;
  for (const auto &node : graph.node()) {
    ++histogram[node.op_type()];
    if (!import::getOpImporters().count(node.op_type()) ||
        !(node.domain().empty() || node.domain() == "ai.onnx"))
      summary.unsupported.push_back({node.op_type(), node.name()});
  }
  summary.histogram.assign(histogram.begin(), histogram.end());
  return summary;
}
