//===- EmitTrainer.cpp - Trainer source from a planned step ---------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Walks the planned @train_step once and prints, for each op, either a named
// elementwise kernel (a loop on the CPU, a __global__ function on CUDA) or a
// call into the runtime kernel library, every pointer being a constant
// offset into the one arena. The tensor table and `main` follow.
//
//===----------------------------------------------------------------------===//

#include "mtc/Codegen/EmitTrainer.h"
#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Random.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstring>

using namespace mlir;
using namespace mtc;

namespace {

llvm::Error makeError(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

int64_t numel(Value v) { return getNumElements(v.getType()); }

bool isFloat(Value v) {
  return isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
}

bool isBool(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType().isInteger(1);
}

/// Whether `v` is stored in 16 bits (bfloat16 or float16) and computed in
/// float32.
bool isLowPrecision(Value v) {
  Type e = cast<RankedTensorType>(v.getType()).getElementType();
  return e.isBF16() || e.isF16();
}

/// The C++ type of one element in the arena.
StringRef cType(Value v) {
  if (isLowPrecision(v))
    return "uint16_t";
  return isFloat(v) ? "float" : isBool(v) ? "unsigned char" : "int64_t";
}

/// The runtime's Storage16 enumerator for a 16-bit `v`.
StringRef storage16(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType().isBF16()
             ? "Storage16::Bf16"
             : "Storage16::F16";
}

/// "16" for the runtime's 16-bit entry point when `v` is stored in 16 bits.
StringRef suffix16(Value v) { return isLowPrecision(v) ? "16" : ""; }

/// The Storage16 argument (and its comma) of a 16-bit entry point.
std::string storageArg(Value v) {
  return isLowPrecision(v) ? (storage16(v) + ", ").str() : "";
}

/// The opening of a call to the runtime kernel `name` whose 16-bit operands
/// or result are stored like `v`: the 16-bit entry point takes their format.
std::string storageCall(StringRef name, Value v) {
  if (!isLowPrecision(v))
    return (name + "(ctx, ").str();
  return (name + "16(ctx, " + storage16(v) + ", ").str();
}

/// The first 16-bit value among `values` (null ones skipped), or the first
/// value: what storageCall names the entry point of a kernel by whose
/// operands and results may each be float32 or 16-bit (in one format).
Value storedLow(ArrayRef<Value> values) {
  for (Value v : values)
    if (v && isLowPrecision(v))
      return v;
  return values.front();
}

/// `expr` wrapped in the conversion `v`'s storage needs (none for float32):
/// one of Half.h's bfloat16 / float16 functions.
std::string throughStorage(Value v, StringRef bf16Fn, StringRef f16Fn,
                           StringRef expr) {
  Type e = cast<RankedTensorType>(v.getType()).getElementType();
  StringRef fn = e.isBF16() ? bf16Fn : e.isF16() ? f16Fn : StringRef();
  return fn.empty() ? expr.str() : ("mtc::rt::" + fn + "(" + expr + ")").str();
}

/// `raw` (an element of `v` as stored) as a float32 expression.
std::string loadAsFloat(Value v, StringRef raw) {
  return throughStorage(v, "bf16ToFloat", "halfToFloat", raw);
}

/// The float32 expression `value` rounded to `v`'s storage.
std::string storeAs(Value v, StringRef value) {
  return throughStorage(v, "floatToBf16", "floatToHalf", value);
}

std::string list(ArrayRef<int64_t> values) {
  std::string s;
  for (int64_t v : values)
    s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

/// A loss's ignore_index as a C literal (INT64_MIN: none).
std::string ignoreIndexLiteral(IntegerAttr ignore) {
  return ignore ? std::to_string(ignore.getInt()) + "LL" : "INT64_MIN";
}

/// The runtime's Reduction for a mean / sum loss.
StringRef reductionLiteral(StringRef reduction) {
  return reduction == "mean" ? "Reduction::Mean" : "Reduction::Sum";
}

/// The body of a C string literal holding `text`.
std::string cString(StringRef text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char octal[8];
      std::snprintf(octal, sizeof(octal), "\\%03o", c);
      out += octal;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

/// Exact decimal form of a float literal.
std::string floatLiteral(float value) {
  if (std::isinf(value))
    return value > 0 ? "INFINITY" : "(-INFINITY)";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9gf", value);
  std::string s = buffer;
  if (s.find_first_of(".en") == std::string::npos)
    s.insert(s.size() - 1, ".0");
  return s;
}

/// The NormActivation argument (and its comma) of a batch normalization
/// with a fused activation; empty without one.
std::string normActivationArg(std::optional<StringRef> kind, FloatAttr lo,
                              FloatAttr hi) {
  if (!kind)
    return "";
  if (*kind == "relu")
    return ", NormActivation{NormActivationKind::Relu, 0.0f, 0.0f}";
  return ", NormActivation{NormActivationKind::Clip, " +
         floatLiteral(lo.getValueAsDouble()) + ", " +
         floatLiteral(hi.getValueAsDouble()) + "}";
}

/// A double literal that reads back to exactly `value`.
std::string doubleLiteral(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  std::string s = buffer;
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s;
}

/// The ONNX node an op came from, for comments.
std::string nodeName(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (auto name = dyn_cast<NameLoc>(inner))
        return name.getName().str();
  return "";
}

class Emitter {
public:
  Emitter(func::FuncOp func, Target target, StringRef modelName,
          const ExportLayout *exportLayout)
      : func(func), target(target), modelName(modelName),
        exportLayout(exportLayout) {}

  llvm::Error emit(llvm::raw_ostream &os, std::vector<InitTensor> &inits);

private:
  mutable func::FuncOp func;
  Target target;
  StringRef modelName;
  const ExportLayout *exportLayout;
  std::string kernels, body;
  llvm::raw_string_ostream k{kernels}, s{body};
  int opIndex = 0;
  /// The kernel the last elementwise op became (for the profile table).
  std::string lastKernel;
  /// Updates still to come that a multi-tensor update already covered.
  int64_t groupedUpdates = 0;
  /// An optimizer update: one runtime call, or with mtc.update_group one
  /// multi-tensor call for it and the updates that follow in its group.
  void emitUpdate(Operation *op);
  std::string error;

  bool cuda() const { return target == Target::Cuda; }

  /// Byte offset of a value in the arena.
  int64_t offsetOf(Value v) const;
  /// A typed pointer expression into the arena.
  std::string ptr(Value v) const;
  std::string ptrAt(int64_t offset, StringRef type) const;
  /// The loss-scaling status an update reads, or "nullptr" without one.
  std::string statusPtr(Value status) const {
    return status ? ptr(status) : "nullptr";
  }

  void emitOp(Operation *op);
  void emitOpBody(Operation *op);

  /// An elementwise kernel over `out`: `expr` reads operand j as `in<j>`
  /// (already indexed with broadcasting).
  void emitElementwise(Operation *op, StringRef name, ValueRange operands,
                       Value out, StringRef expr, StringRef statements = "");
  /// The same with several results of one shape, result j stored from
  /// exprs[j] (computed by `statements`).
  void emitElementwise(Operation *op, StringRef name, ValueRange operands,
                       ValueRange outs, ArrayRef<std::string> exprs,
                       StringRef statements,
                       ArrayRef<Operation *> dropouts = {},
                       LayerNormOp rowEpilogue = {});
  /// The scalar expression of an elementwise op over its operands' values
  /// `in0`, `in1`, ... (float32 for floats whatever their storage), and a
  /// name for its kernel; none for other ops. A dropout (or its gradient)
  /// is elementwise only inside a fused kernel, as its `dropoutSlot`-th
  /// dropout: its mask is drawn per group of four elements (keep<K>[lane]).
  struct ElementwiseExpr {
    std::string name, expr;
  };
  std::optional<ElementwiseExpr>
  elementwiseExpr(Operation *op, int dropoutSlot = -1) const;
  /// A fused chain as one loop / kernel.
  void emitFused(FusedOp op);
  void emitCall(const Twine &call) { s << "  " << call << ";\n"; }

  void emitMatMul(MatMulOp op);
  void emitMatMulBiasGrad(MatMulBiasGradOp op);
  void emitGeluGemm(Operation *op, Value a, Value b, bool transposeB,
                    Value bias, Value pre, Value output, bool grad);
  /// Where `v`'s elements are: in its own buffer, row-major, or, read
  /// through strided views, in another value's.
  StridedLayout layoutOf(Value v) { return orFail(stridedLayout(v), v); }
  StridedLayout orFail(FailureOr<StridedLayout> layout, Value v);
  /// Copies the elements `src` lays out to dst's buffer, dim d of the value
  /// at dstStrides[d] from dstOffset.
  void emitStridedCopy(const StridedLayout &src, Value dst, int64_t dstOffset,
                       ArrayRef<int64_t> dstStrides);
  /// The start of a call of convolution kernel `name` for `op`, whose
  /// operands are stored as `v` is: float32, widened 16-bit ("16"), or
  /// 16-bit multiplied as stored on CUDA ("Native16").
  std::string convCall(StringRef name, Operation *op, Value v);
  std::string convParams(ArrayRef<int64_t> x, ArrayRef<int64_t> w,
                         ArrayRef<int64_t> y, ArrayRef<int64_t> strides,
                         ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations,
                         int64_t group);
  template <typename PoolOp>
  std::string poolParams(PoolOp op, Value in, Value out, bool includePad);
  std::string workspace(Operation *op) const;
  /// How a GEMM is called: the runtime function family ("gemm", or
  /// "gemm16" for 16-bit operands the target reads directly, then with
  /// `storage` as its first argument after ctx) and the A and B pointers
  /// (the operands themselves, or 16-bit operands widened into the op's
  /// workspace).
  struct GemmCall {
    std::string function, storage, a, b;
  };
  GemmCall gemmOperands(Operation *op, Value a, Value b);
  void emitSoftmaxLike(Value in, Value aux, Value out, int64_t axis, bool log,
                       bool backward);
  /// Where the attention kernels find the rows of `v`, read through the
  /// views that define it: a pointer expression and the strides.
  struct AttentionTensor {
    std::string ptr;
    AttentionRows rows;
  };
  AttentionTensor attentionTensor(Value v, bool seqMajor);
  /// The runtime's AttentionDims of a mtc.attention or mtc.attention_grad,
  /// as an initializer list: `tensors` holds where query, key, value,
  /// output, output gradient and the three gradients are (the forward's
  /// last four default-constructed).
  template <typename AttentionLike>
  std::string attentionDims(AttentionLike op,
                            ArrayRef<AttentionTensor> tensors) const;
  /// `call` with a constexpr `dims` in scope.
  void emitAttentionCall(const std::string &dims, const Twine &call);
};

int64_t Emitter::offsetOf(Value v) const {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                              attr::kOffset)
        .getInt();
  Operation *def = v.getDefiningOp();
  auto offsets = def->getAttrOfType<DenseI64ArrayAttr>(attr::kOffsets);
  return offsets[cast<OpResult>(v).getResultNumber()];
}

std::string Emitter::ptrAt(int64_t offset, StringRef type) const {
  return ("reinterpret_cast<" + type + " *>(arena + " + Twine(offset) + ")")
      .str();
}

std::string Emitter::ptr(Value v) const {
  return ptrAt(offsetOf(v), cType(v));
}

std::string Emitter::workspace(Operation *op) const {
  auto ws = op->getAttrOfType<DenseI64ArrayAttr>(attr::kWorkspace);
  return ws ? ptrAt(ws[0], "float") : "nullptr";
}

void Emitter::emitElementwise(Operation *op, StringRef name,
                              ValueRange operands, Value out, StringRef expr,
                              StringRef statements) {
  emitElementwise(op, name, operands, ValueRange(out),
                  ArrayRef<std::string>{expr.str()}, statements);
}

void Emitter::emitElementwise(Operation *op, StringRef name,
                              ValueRange operands, ValueRange outs,
                              ArrayRef<std::string> exprs,
                              StringRef statements,
                              ArrayRef<Operation *> dropouts,
                              LayerNormOp rowEpilogue) {
  std::string kernel = ("k" + Twine(opIndex) + "_" + name).str();
  if (rowEpilogue)
    kernel += "_layer_norm";
  lastKernel = kernel;
  Value out = outs.front();
  ArrayRef<int64_t> outShape = shapeOf(out);
  int64_t n = numel(out);

  // Signature and the index math for broadcast operands.
  std::string params, index, loads;
  for (auto [j, v] : llvm::enumerate(operands)) {
    StringRef type = cType(v);
    params += ("const " + type + " *__restrict in" + Twine(j) + "p, ").str();
  }
  for (auto [j, v] : llvm::enumerate(outs))
    params += ((j ? ", " : "") + cType(v) + " *__restrict out" +
               (j ? Twine(j) : Twine()))
                  .str();
  for (size_t d = 0; d < dropouts.size(); ++d)
    params += ", DropoutParams drop" + std::to_string(d);
  if (!dropouts.empty() && cuda())
    params += ", const StepCounters *counters";
  if (rowEpilogue)
    params += ", const float *__restrict lnScale, const float *__restrict "
              "lnBias, " +
              cType(rowEpilogue.getOutput()).str() +
              " *__restrict lnY, float *__restrict lnMean, "
              "float *__restrict lnInvstd";
  bool needIndex = false;
  for (Value v : operands)
    needIndex |= shapeOf(v) != outShape && numel(v) != 1;
  if (needIndex) {
    index += "    int64_t rest = i;\n";
    for (auto [j, v] : llvm::enumerate(operands))
      if (shapeOf(v) != outShape && numel(v) != 1)
        index += ("    int64_t i" + Twine(j) + " = 0;\n").str();
    SmallVector<int64_t> outStrides = contiguousStrides(outShape);
    for (int64_t d = outShape.size() - 1; d >= 0; --d) {
      std::string update;
      for (auto [j, v] : llvm::enumerate(operands)) {
        ArrayRef<int64_t> shape = shapeOf(v);
        if (shape == outShape || numel(v) == 1)
          continue; // indexed by i, or a scalar
        int64_t lead = outShape.size() - shape.size();
        if (d < lead || shape[d - lead] == 1)
          continue;
        int64_t stride = contiguousStrides(shape)[d - lead];
        update += (" i" + Twine(j) + " += c * " + Twine(stride) + ";").str();
      }
      if (update.empty() && outShape[d] == 1)
        continue;
      if (update.empty()) // no operand strides this dim
        index += ("    rest /= " + Twine(outShape[d]) + ";\n").str();
      else
        index += ("    { int64_t c = rest % " + Twine(outShape[d]) +
                  "; rest /= " + Twine(outShape[d]) + ";" + update + " }\n")
                     .str();
    }
  }
  // CUDA threads take groups of four consecutive elements when the size
  // allows (and always with dropouts: one generator call's elements);
  // operands and results of the output's shape then move as one 16-, 8- or
  // 4-byte vector a group (arena offsets are 256-byte aligned).
  constexpr int64_t kGroup = mtc::rt::kDropoutGroup;
  // Items (groups or elements) a thread of a CUDA elementwise kernel takes.
  constexpr int64_t kCudaItems = 2;
  // Elements per chunk of a parallel CPU loop.
  constexpr int64_t kCpuChunk = 4096;
  const bool grouped = !dropouts.empty() || (cuda() && n % kGroup == 0);
  // CPU loops that call VecMath.h's vecExp, vecErf or vecTanh (tens of
  // operations an element) are compiled per instruction set: AVX-512 runs
  // such a loop about four times as fast as the SSE2 baseline.
  const bool clones = !cuda() && !grouped && !rowEpilogue &&
                      (StringRef(statements).contains("cpu::vec") ||
                       llvm::any_of(exprs, [](const std::string &e) {
                         return StringRef(e).contains("cpu::vec");
                       }));
  const bool vectors = cuda() && n % kGroup == 0;
  std::string groupLoads;
  auto vectorType = [&](Value v) -> StringRef {
    StringRef type = cType(v);
    return type == "float"      ? "float4"
           : type == "uint16_t" ? "ushort4"
           : type == "unsigned char" ? "uchar4"
                                     : "";
  };
  auto vectorized = [&](Value v) {
    return vectors && shapeOf(v) == outShape && !vectorType(v).empty();
  };
  for (auto [j, v] : llvm::enumerate(operands)) {
    StringRef type = cType(v);
    std::string at = numel(v) == 1          ? "0"
                     : shapeOf(v) == outShape ? "i"
                                              : ("i" + Twine(j)).str();
    std::string raw = ("in" + Twine(j) + "p[" + at + "]").str();
    if (numel(v) != 1 && vectorized(v)) {
      std::string vec = ("in" + Twine(j) + "v").str();
      groupLoads += ("    const " + vectorType(v) + " " + vec +
                     " = reinterpret_cast<const " + vectorType(v) + " *>(in" +
                     Twine(j) + "p)[g];\n")
                        .str();
      raw = "laneOf(" + vec + ", lane)";
    }
    loads += ("    const " +
              (isLowPrecision(v) ? StringRef("float") : type) + " in" +
              Twine(j) + " = " + loadAsFloat(v, raw) + ";\n")
                 .str();
  }

  std::string node = nodeName(op->getLoc());
  k << "// " << op->getName() << (node.empty() ? "" : " from ONNX node '")
    << node << (node.empty() ? "" : "'") << "\n";
  // Threads pay from 32768 elements, or from 8192 for loops of such math.
  const bool parallel = !cuda() && n >= (clones ? 8192 : 32768);
  const int64_t items = grouped ? (n + kGroup - 1) / kGroup : n;
  const char *item = grouped ? "g" : "i";
  // A layer norm as the row epilogue: a loop over rows (a block per row on
  // CUDA) computes each row's elements, then normalizes the row.
  int64_t dim = rowEpilogue ? numel(rowEpilogue.getScale()) : 0;
  int64_t rows = rowEpilogue ? n / dim : 0;
  int64_t perRow = grouped ? dim / kGroup : dim;
  // On CUDA the threads keep the vectors of the row they compute for the
  // normalization (cuda::normalizeHeldRow), which then neither waits for
  // the block's stores nor reads the row back: where a thread's vectors of
  // four elements are the row's in forEachHeld's places (the row's input a
  // float32 result moved as vectors; the row, scale, bias and output on 16
  // bytes, as arena offsets are) and the launch's normRowThreads(dim)
  // threads cover the row with up to kHeldVectors (2) each: up to 2 x 4 x
  // 512 = 4096 elements. The kernel's loop takes the vectors a thread
  // needs (one for rows up to 2048: no registers for a second), and
  // asserts that they are enough.
  int64_t lnInput =
      rowEpilogue ? cast<OpResult>(rowEpilogue.getInput()).getResultNumber()
                  : 0;
  auto onVectors = [&](Value v) { return !v || offsetOf(v) % 16 == 0; };
  const bool heldRow =
      rowEpilogue && cuda() && grouped && kGroup == 4 && dim % kGroup == 0 &&
      dim <= 4096 && vectorized(outs[lnInput]) &&
      cType(outs[lnInput]) == "float" && onVectors(outs[lnInput]) &&
      onVectors(rowEpilogue.getScale()) && onVectors(rowEpilogue.getBias()) &&
      onVectors(rowEpilogue.getOutput());
  // Rows of up to 1024 elements (32 lanes x cuda::kWarpRowVectors vectors,
  // LayerNormRow.h) that the threads hold take a warp each, eight a block:
  // the statistics are warp shuffles, with no barrier and no shared memory,
  // so each warp's row proceeds on its own (a block's row of 768 elements
  // kept 256 threads, a quarter of them idle, at four barriers).
  constexpr int64_t kWarpRowMaxVectors = 32 * 8;
  const bool warpRow = heldRow && perRow <= kWarpRowMaxVectors;
  if (warpRow) {
    k << "__global__ void __launch_bounds__(mtc::rt::cuda::kWarpRowsPerBlock "
         "* 32) "
      << kernel << "(" << params << ") {\n"
      << "  constexpr int kLnVectors = (" << perRow << " + 31) / 32;\n"
      << "  static_assert(mtc::rt::cuda::kRowVector == " << kGroup
      << " && kLnVectors <= mtc::rt::cuda::kWarpRowVectors, "
         "\"the lanes hold the row\");\n"
      << "  const int warpLane = threadIdx.x % 32;\n"
      << "  for (int64_t row = int64_t(blockIdx.x) * "
         "mtc::rt::cuda::kWarpRowsPerBlock + threadIdx.x / 32; row < "
      << rows
      << "; row += int64_t(gridDim.x) * mtc::rt::cuda::kWarpRowsPerBlock) "
         "{\n"
      << "  float lnRow[kLnVectors][" << kGroup << "] = {};\n#pragma unroll\n"
      << "  for (int h = 0; h < kLnVectors; ++h) {\n"
      << "    const int64_t g = row * " << perRow << " + h * 32 + warpLane;\n"
      << "    if (g >= (row + 1) * " << perRow << ")\n      break;\n";
  } else if (rowEpilogue && cuda()) {
    // Launched with up to kNormRowThreads threads: the bound keeps the
    // compiler's register use within what such a block may have.
    k << "__global__ void __launch_bounds__(mtc::rt::cuda::kNormRowThreads) "
      << kernel << "(" << params << ") {\n"
      << "  __shared__ double "
         "lnScratch[mtc::rt::cuda::kNormRowThreads / 32];\n";
    if (heldRow)
      k << "  constexpr int kLnVectors = (" << perRow
        << " + mtc::rt::cuda::normRowThreads(" << dim
        << ") - 1) / mtc::rt::cuda::normRowThreads(" << dim << ");\n"
        << "  static_assert(mtc::rt::cuda::kRowVector == " << kGroup
        << " && kLnVectors <= mtc::rt::cuda::kHeldVectors, "
           "\"the threads hold the row\");\n";
    k << "  for (int64_t row = blockIdx.x; row < " << rows
      << "; row += gridDim.x) {\n";
    if (heldRow)
      k << "  float lnRow[kLnVectors][" << kGroup << "] = {};\n#pragma unroll\n"
        << "  for (int h = 0; h < kLnVectors; ++h) {\n"
        << "    const int64_t g = row * " << perRow
        << " + h * blockDim.x + threadIdx.x;\n"
        << "    if (g >= (row + 1) * " << perRow << ")\n      break;\n";
    else
      k << "  for (int64_t " << item << " = row * " << perRow
        << " + threadIdx.x; " << item << " < (row + 1) * " << perRow << "; "
        << item << " += blockDim.x) {\n";
  } else if (rowEpilogue) {
    k << "static void " << kernel << "(" << params << ") {\n"
      << "  mtc::rt::cpu::parallelFor(0, " << rows << ", "
      << (parallel ? "true" : "false") << ", [&](int64_t row) {\n"
      << (grouped ? "" : "#pragma omp simd\n")
      << "  for (int64_t " << item << " = row * " << perRow << "; " << item
      << " < (row + 1) * " << perRow << "; ++" << item << ") {\n";
  } else if (cuda()) {
    // A thread takes kCudaItems items (groups or elements) blockDim.x apart
    // (a warp's accesses stay contiguous): where a block's are all in
    // range, as straight-line code, so that ptxas issues every item's loads
    // before the first item's stores (the pointers are __restrict) and
    // each thread has twice the bytes in flight; the block holding the
    // end checks each item.
    k << "__global__ void " << kernel << "(" << params << ") {\n"
      << "  auto body = [&](const int64_t " << item << ") {\n";
  } else if (clones) {
    // The loop over elements [first, last) in a function of its own,
    // compiled per instruction set; the kernel calls it per chunk.
    k << "MTC_SIMD_CLONES static void " << kernel
      << "_part(int64_t first, int64_t last, " << params << ") {\n"
      << "#pragma omp simd\n"
      << "  for (int64_t i = first; i < last; ++i) {\n";
  } else {
    k << "static void " << kernel << "(" << params << ") {\n";
    // Large loops are split over the OpenMP threads (parallelFor never
    // enters OpenMP for one thread, which would allocate) in chunks. The
    // elements of a chunk are independent: `omp simd` lets the compiler
    // vectorize them at -O2 (selects become blends instead of branches,
    // which mispredict on data like a ReLU's), each element computed as
    // before.
    const char *simd = grouped ? "" : "#pragma omp simd\n";
    if (parallel && !grouped)
      k << "  mtc::rt::cpu::parallelFor(0, "
        << (items + kCpuChunk - 1) / kCpuChunk
        << ", true, [&](int64_t chunk) {\n"
        << "  const int64_t last = chunk * " << kCpuChunk << " + "
        << kCpuChunk << " < " << items << " ? chunk * " << kCpuChunk << " + "
        << kCpuChunk << " : " << items << ";\n"
        << simd << "  for (int64_t i = chunk * " << kCpuChunk
        << "; i < last; ++i) {\n";
    else if (parallel)
      k << "  mtc::rt::cpu::parallelFor(0, " << items << ", true, [&](int64_t "
        << item << ") {\n";
    else
      k << simd << "  for (int64_t " << item << " = 0; " << item << " < "
        << items << "; ++" << item << ") {\n";
  }
  if (grouped) {
    for (size_t d = 0; d < dropouts.size(); ++d) {
      std::string id = std::to_string(d);
      if (cuda()) // a replayed CUDA graph keeps the step of its capture
        k << "    drop" << id
          << ".step = static_cast<uint64_t>(counters->batch);\n";
      k << "    bool keep" << id << "[" << kGroup << "];\n"
        << "    dropoutGroupKeep(drop" << id
        << ", static_cast<uint64_t>(g), keep" << id << ");\n";
    }
    k << groupLoads;
    for (auto [j, v] : llvm::enumerate(outs))
      if (vectorized(v))
        k << "    " << vectorType(v) << " out" << j << "v;\n";
    k << (cuda() ? "#pragma unroll\n" : "") << "    for (int lane = 0; lane < "
      << kGroup << "; ++lane) {\n";
    // The flat index, unless every access is a vector lane.
    bool scalarOut = false;
    for (Value v : outs)
      scalarOut |= !vectorized(v);
    if (n % kGroup || !index.empty() || scalarOut ||
        StringRef(loads).contains("[i]"))
      k << "    const int64_t i = g * " << kGroup << " + lane;\n";
    if (n % kGroup)
      k << "    if (i >= " << n << ")\n      break;\n";
  }
  k << index << loads << statements;
  for (auto [j, v] : llvm::enumerate(outs)) {
    std::string value = storeAs(v, exprs[j]);
    if (grouped && vectorized(v))
      k << "    setLane(out" << j << "v, lane, " << value << ");\n";
    else
      k << "    out" << (j ? std::to_string(j) : std::string())
        << "[i] = " << value << ";\n";
  }
  if (grouped) {
    k << "    }\n";
    for (auto [j, v] : llvm::enumerate(outs))
      if (vectorized(v))
        k << "    reinterpret_cast<" << vectorType(v) << " *>(out"
          << (j ? std::to_string(j) : std::string()) << ")[g] = out" << j
          << "v;\n";
  }
  if (rowEpilogue) {
    // The fused result it normalizes (out, out1, ...), just stored.
    std::string x = "out" +
                    (lnInput ? std::to_string(lnInput) : std::string()) +
                    " + row * " + std::to_string(dim);
    std::string eps =
        floatLiteral(rowEpilogue.getEpsilon().convertToFloat());
    std::string lnArgs =
        "lnScale, lnBias, " + eps + ", lnY + row * " + std::to_string(dim) +
        ", lnMean + row, lnInvstd + row, " +
        (storage16(rowEpilogue.getOutput()) == "Storage16::Bf16" ? "true"
                                                                 : "false") +
        (warpRow ? "" : ", lnScratch") + ");\n  }\n}\n\n";
    if (heldRow)
      k << "#pragma unroll\n    for (int e = 0; e < " << kGroup
        << "; ++e)\n      lnRow[h][e] = laneOf(out" << lnInput << "v, e);\n";
    k << "  }\n";
    if (warpRow)
      k << "    mtc::rt::cuda::normalizeWarpRow(" << dim << ", lnRow, "
        << lnArgs;
    else if (heldRow)
      k << "    mtc::rt::cuda::normalizeHeldRow(" << dim << ", lnRow, "
        << lnArgs;
    else if (cuda())
      k << "    __syncthreads();\n    mtc::rt::cuda::layerNormRow(" << dim
        << ", " << x << ", " << lnArgs;
    else
      k << "    mtc::rt::cpu::layerNormRow(" << dim << ", " << x
        << ", lnScale, lnBias, " << eps
        << ", [&](int64_t j, float v) { lnY[row * " << dim
        << " + j] = " << storeAs(rowEpilogue.getOutput(), "v")
        << "; }, lnMean + row, lnInvstd + row);\n  });\n}\n\n";
  } else if (clones) {
    std::string names;
    for (size_t j = 0; j < operands.size(); ++j)
      names += ", in" + std::to_string(j) + "p";
    for (size_t j = 0; j < outs.size(); ++j)
      names += ", out" + (j ? std::to_string(j) : std::string());
    k << "  }\n}\n\nstatic void " << kernel << "(" << params << ") {\n";
    if (parallel)
      k << "  mtc::rt::cpu::parallelFor(0, " << (n + kCpuChunk - 1) / kCpuChunk
        << ", true, [&](int64_t chunk) {\n"
        << "    const int64_t first = chunk * " << kCpuChunk << ";\n"
        << "    " << kernel << "_part(first, first + " << kCpuChunk << " < "
        << n << " ? first + " << kCpuChunk << " : " << n << names
        << ");\n  });\n";
    else
      k << "  " << kernel << "_part(0, " << n << names << ");\n";
    k << "}\n\n";
  } else if (cuda()) {
    k << "  };\n  const int64_t first = int64_t(blockIdx.x) * " << kCudaItems
      << " * blockDim.x + threadIdx.x;\n"
      << "  if ((int64_t(blockIdx.x) + 1) * " << kCudaItems
      << " * blockDim.x <= " << items << ") {\n#pragma unroll\n"
      << "    for (int u = 0; u < " << kCudaItems << "; ++u)\n"
      << "      body(first + u * blockDim.x);\n"
      << "    return;\n  }\n"
      << "  for (int u = 0; u < " << kCudaItems << "; ++u)\n"
      << "    if (first + u * blockDim.x < " << items << ")\n"
      << "      body(first + u * blockDim.x);\n}\n\n";
  } else {
    k << (parallel && !grouped ? "  }\n  });\n"
          : parallel           ? "  });\n"
                               : "  }\n")
      << "}\n\n";
  }

  std::string args;
  for (Value v : operands)
    args += ptr(v) + ", ";
  for (auto [j, v] : llvm::enumerate(outs))
    args += (j ? ", " : "") + ptr(v);
  for (Operation *d : dropouts) {
    auto ratio = d->getAttrOfType<FloatAttr>("ratio");
    auto stream = d->getAttrOfType<IntegerAttr>("stream");
    args += llvm::formatv(", dropoutParams(trainingSeed(ctx), {0}, {1}u, {2})",
                          cuda() ? "0" : "batchCounter(ctx)", stream.getInt(),
                          floatLiteral(ratio.getValueAsDouble()))
                .str();
  }
  if (!dropouts.empty() && cuda())
    args += ", deviceStepCounters(ctx)";
  if (rowEpilogue) {
    Value bias = rowEpilogue.getBias();
    args += ", " + ptr(rowEpilogue.getScale()) + ", " +
            (bias ? ptr(bias) : "nullptr") + ", " +
            ptr(rowEpilogue.getOutput()) + ", " + ptr(rowEpilogue.getMean()) +
            ", " + ptr(rowEpilogue.getInvstd());
  }
  if (warpRow) {
    s << "  " << kernel << "<<<(" << std::min<int64_t>(rows, 1 << 20)
      << " + mtc::rt::cuda::kWarpRowsPerBlock - 1) / "
         "mtc::rt::cuda::kWarpRowsPerBlock, "
         "mtc::rt::cuda::kWarpRowsPerBlock * 32, 0, cudaStreamOf(ctx)>>>("
      << args << ");\n"
      << "  checkLaunch(ctx, \"" << kernel << "\");\n";
  } else if (rowEpilogue && cuda()) {
    s << "  " << kernel << "<<<" << std::min<int64_t>(rows, 1 << 20)
      << ", mtc::rt::cuda::normRowThreads(" << dim
      << "), 0, cudaStreamOf(ctx)>>>(" << args << ");\n"
      << "  checkLaunch(ctx, \"" << kernel << "\");\n";
  } else if (cuda()) {
    int64_t blocks = (items + 256 * kCudaItems - 1) / (256 * kCudaItems);
    s << "  " << kernel << "<<<" << std::max<int64_t>(blocks, 1)
      << ", 256, 0, cudaStreamOf(ctx)>>>(" << args << ");\n"
      << "  checkLaunch(ctx, \"" << kernel << "\");\n";
  } else {
    s << "  " << kernel << "(" << args << ");\n";
  }
}

StridedLayout Emitter::orFail(FailureOr<StridedLayout> layout, Value v) {
  if (succeeded(layout))
    return *layout;
  if (error.empty())
    error = "a copy reads a strided view without strides (the fusion pass "
            "makes only views that have them)";
  return StridedLayout{v, 0, {}};
}

void Emitter::emitStridedCopy(const StridedLayout &from, Value dst,
                              int64_t dstOffset,
                              ArrayRef<int64_t> logicalDstStrides) {
  StridedCopyDims dims = copyDims(from, logicalDstStrides);
  Value src = from.base;
  int64_t srcOffset = from.offset;
  ArrayRef<int64_t> shape = dims.shape, srcStrides = dims.srcStrides,
                    dstStrides = dims.dstStrides;
  int rank = shape.size();
  s << "  {\n    const int64_t shape[] = {" << list(shape) << "};\n"
    << "    const int64_t srcStrides[] = {" << list(srcStrides) << "};\n"
    << "    const int64_t dstStrides[] = {" << list(dstStrides) << "};\n";
  // A float32 source stored in 16 bits: the copy rounds each element.
  if (isLowPrecision(dst) && !isLowPrecision(src)) {
    s << "    stridedCopyTo16(ctx, " << storage16(dst) << ", " << rank
      << ", shape, " << ptr(src) << ", " << srcOffset << ", srcStrides, "
      << ptr(dst) << ", " << dstOffset << ", dstStrides);\n  }\n";
    return;
  }
  s << "    stridedCopy(ctx, " << rank << ", shape, " << ptr(src) << ", "
    << srcOffset << ", srcStrides, " << ptr(dst) << ", " << dstOffset
    << ", dstStrides, "
    << (cast<RankedTensorType>(src.getType()).getElementTypeBitWidth() + 7) / 8
    << ");\n  }\n";
}

std::string Emitter::convCall(StringRef name, Operation *op, Value v) {
  if (!isLowPrecision(v) || !op->hasAttr(attr::kNative16BitGemm))
    return storageCall(name, v);
  if (!cuda() && error.empty())
    error = "16-bit convolution operands without widening need the cuda "
            "target";
  return (name + "Native16(ctx, " + storage16(v) + ", ").str();
}

std::string Emitter::convParams(ArrayRef<int64_t> x, ArrayRef<int64_t> w,
                                ArrayRef<int64_t> y, ArrayRef<int64_t> strides,
                                ArrayRef<int64_t> pads,
                                ArrayRef<int64_t> dilations, int64_t group) {
  return llvm::formatv("Conv2dParams{{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, "
                       "{8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}}",
                       x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
                       strides[0], strides[1], pads[0], pads[1], dilations[0],
                       dilations[1], group, convGemmColumns(func))
      .str();
}

template <typename PoolOp>
std::string Emitter::poolParams(PoolOp op, Value in, Value out,
                                bool includePad) {
  ArrayRef<int64_t> x = shapeOf(in), y = shapeOf(out);
  ArrayRef<int64_t> kernel = op.getKernelShape(), strides = op.getStrides(),
                    pads = op.getPads(), dilations = op.getDilations();
  return llvm::formatv("Pool2dParams{{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, "
                       "{8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}}",
                       x[0], x[1], x[2], x[3], kernel[0], kernel[1], y[2],
                       y[3], strides[0], strides[1], pads[0], pads[1],
                       dilations[0], dilations[1],
                       includePad ? "true" : "false", pads[2], pads[3])
      .str();
}

void Emitter::emitSoftmaxLike(Value in, Value aux, Value out, int64_t axis,
                              bool log, bool backward) {
  ArrayRef<int64_t> shape = shapeOf(out);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
  std::string dims = llvm::formatv("{0}, {1}, {2}", outer, shape[axis], inner);
  if (backward)
    emitCall("softmaxBackward(ctx, " + dims + ", " + ptr(in) + ", " +
             ptr(aux) + ", " + ptr(out) + ", " + (log ? "true" : "false") +
             ")");
  else
    emitCall("softmaxForward(ctx, " + dims + ", " + ptr(in) + ", " + ptr(out) +
             ", " + (log ? "true" : "false") + ")");
}

void Emitter::emitUpdate(Operation *op) {
  if (groupedUpdates > 0) {
    --groupedUpdates;
    s << "  // (in the multi-tensor update above)\n";
    return;
  }
  auto group = op->getAttrOfType<IntegerAttr>(attr::kUpdateGroup);
  const int64_t count = group ? group.getInt() : 1;
  auto d = [](FloatAttr a) { return doubleLiteral(a.getValueAsDouble()); };
  // Per tensor: its size and pointers; then the shared hyperparameters.
  std::string tensors, function, hyper;
  // A 16-bit copy of a parameter written by its update goes through the
  // multi-tensor entry point, whose tensors carry it.
  bool copies = false;
  Operation *member = op;
  for (int64_t i = 0; i < count; ++i, member = member->getNextNode()) {
    if (i)
      tensors += "},\n        {";
    llvm::TypeSwitch<Operation *>(member)
        .Case([&](SgdUpdateOp u) {
          tensors += llvm::formatv("{0}, {1}, {2}, nullptr", numel(u.getParam()),
                                   ptr(u.getParam()), ptr(u.getGrad()));
          function = "sgdUpdate";
          hyper = d(u.getLrAttr()) + ", 0.0, " + d(u.getWeightDecayAttr()) +
                  ", false, " + statusPtr(u.getGradStatus());
        })
        .Case([&](SgdMomentumUpdateOp u) {
          tensors += llvm::formatv("{0}, {1}, {2}, {3}", numel(u.getParam()),
                                   ptr(u.getParam()), ptr(u.getGrad()),
                                   ptr(u.getMomentumBuffer()));
          function = "sgdUpdate";
          hyper = d(u.getLrAttr()) + ", " + d(u.getMomentumAttr()) + ", " +
                  d(u.getWeightDecayAttr()) + ", " +
                  (u.getNesterov() ? "true" : "false") + ", " +
                  statusPtr(u.getGradStatus());
        })
        .Case([&](AdamWUpdateOp u) {
          tensors += llvm::formatv("{0}, {1}, {2}, {3}, {4}",
                                   numel(u.getParam()), ptr(u.getParam()),
                                   ptr(u.getGrad()), ptr(u.getExpAvg()),
                                   ptr(u.getExpAvgSq()));
          if (Value copy = u.getParam16()) {
            tensors += ", " + ptr(copy) + ", " + storage16(copy).str();
            copies = true;
          }
          function = "adamwUpdate";
          hyper = d(u.getLrAttr()) + ", " + d(u.getBeta1Attr()) + ", " +
                  d(u.getBeta2Attr()) + ", " + d(u.getEpsAttr()) + ", " +
                  d(u.getWeightDecayAttr()) + ", " +
                  statusPtr(u.getGradStatus());
        })
        .Default([&](Operation *) {});
  }
  if (count == 1 && !copies) {
    emitCall(function + "(ctx, " + tensors + ", " + hyper + ")");
    return;
  }
  s << "  {\n    const " << (function == "adamwUpdate" ? "Adamw" : "Sgd")
    << "Tensor tensors[] = {\n        {" << tensors << "},\n    };\n    "
    << function << "Multi(ctx, tensors, " << count << ", " << hyper
    << ");\n  }\n";
  groupedUpdates = count - 1;
}

Emitter::AttentionTensor Emitter::attentionTensor(Value v, bool seqMajor) {
  StridedLayout layout = layoutOf(v);
  FailureOr<AttentionRows> rows = attentionRows(layout, shapeOf(v), seqMajor);
  if (failed(rows)) {
    if (error.empty())
      error = "attention reads a view whose rows are not evenly strided (the "
              "fusion pass makes only views that are)";
    return {ptr(v), AttentionRows()};
  }
  std::string at = ptr(layout.base);
  if (rows->offset)
    at = "(" + at + " + " + std::to_string(rows->offset) + ")";
  return {at, *rows};
}

template <typename AttentionLike>
std::string Emitter::attentionDims(AttentionLike op,
                                   ArrayRef<AttentionTensor> tensors) const {
  bool seqMajor = op.getSeqMajor();
  AttentionShape q = attentionShape(shapeOf(op.getQuery()), seqMajor);
  AttentionShape k = attentionShape(shapeOf(op.getKey()), seqMajor);
  int64_t batchRank = q.batch.size(), batch = 1;
  for (int64_t d : q.batch)
    batch *= d;
  SmallVector<int64_t> maskStrides(batchRank + 2, 0);
  if (Value mask = op.getMask()) {
    // Right-aligned broadcast to [batch..., sq, sk]: stride 0 where the
    // mask has no dim or a dim of 1.
    ArrayRef<int64_t> m = shapeOf(mask);
    SmallVector<int64_t> strides = contiguousStrides(m);
    int64_t rank = batchRank + 2;
    int64_t lead = rank - static_cast<int64_t>(m.size());
    for (int64_t d = lead; d < rank; ++d)
      if (m[d - lead] != 1)
        maskStrides[d] = strides[d - lead];
  }
  std::string layouts;
  for (size_t i = 0; i < 8; ++i) {
    AttentionRows r = i < tensors.size() ? tensors[i].rows : AttentionRows();
    layouts += llvm::formatv("{0}{{{1}, {2}, {3}}", i ? ", " : "",
                             r.batchStride, r.headStride, r.rowStride)
                   .str();
  }
  return llvm::formatv("{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}u, {8}, {{{9}}, "
                       "{{{10}}, {11}, {12}, {13}, {{{14}}, {15}",
                       batch, q.seq, k.seq, q.width,
                       attentionShape(shapeOf(op.getValue()), seqMajor).width,
                       floatLiteral(op.getScale().convertToFloat()),
                       floatLiteral(op.getDropoutRatio().convertToFloat()),
                       op.getDropoutStream(), batchRank, list(q.batch),
                       list(ArrayRef<int64_t>(maskStrides).drop_back(2)),
                       maskStrides[batchRank], maskStrides[batchRank + 1],
                       tensors.front().rows.heads, layouts,
                       op.getCausal() ? "true" : "false")
      .str();
}

void Emitter::emitAttentionCall(const std::string &dims, const Twine &call) {
  s << "  {\n    static constexpr AttentionDims dims = {" << dims << "};\n"
    << "    " << call << ";\n  }\n";
}

Emitter::GemmCall Emitter::gemmOperands(Operation *op, Value a, Value b) {
  if (!isLowPrecision(a))
    return {"gemm", "", ptr(a), ptr(b)};
  std::string storage = storage16(a).str();
  if (op->hasAttr(attr::kNative16BitGemm)) {
    if (!cuda() && error.empty())
      error = "16-bit GEMM operands without widening need the cuda target";
    return {"gemm16", storage + ", ", ptr(a), ptr(b)};
  }
  std::string ws = workspace(op);
  std::string wa = ws, wb = "(" + ws + " + " + std::to_string(numel(a)) + ")";
  emitCall("widen16(ctx, " + storage + ", " + ptr(a) + ", " +
           std::to_string(numel(a)) + ", " + wa + ")");
  emitCall("widen16(ctx, " + storage + ", " + ptr(b) + ", " +
           std::to_string(numel(b)) + ", " + wb + ")");
  return {"gemm", "", wa, wb};
}

void Emitter::emitMatMul(MatMulOp op) {
  ArrayRef<int64_t> a = shapeOf(op.getA()), b = shapeOf(op.getB()),
                    y = shapeOf(op.getOutput());
  bool ta = op.getTransposeA(), tb = op.getTransposeB();
  int64_t ar = a.size(), br = b.size(), yr = y.size();
  int64_t m = y[yr - 2], n = y[yr - 1];
  int64_t kk = ta ? a[ar - 2] : a[ar - 1];
  // Leading dimensions: the rows as stored (the memory plan may pad them).
  int64_t lda = rowPitch(op.getA()), ldb = rowPitch(op.getB()),
          ldc = rowPitch(op.getOutput());
  ArrayRef<int64_t> yBatch = y.drop_back(2);
  int64_t batch = 1;
  for (int64_t d : yBatch)
    batch *= d;
  int64_t aMat = a[ar - 2] * a[ar - 1], bMat = b[br - 2] * b[br - 1];
  int64_t aBatch = getNumElements(op.getA().getType()) / aMat;
  int64_t bBatch = getNumElements(op.getB().getType()) / bMat;
  auto batchStride = [&](int64_t count, int64_t rows,
                         int64_t ld) -> std::optional<int64_t> {
    if (count == 1)
      return 0;
    if (count == batch)
      return rows * ld;
    return std::nullopt;
  };
  auto sa = batchStride(aBatch, a[ar - 2], lda),
       sb = batchStride(bBatch, b[br - 2], ldb);
  GemmCall g = gemmOperands(op, op.getA(), op.getB());
  MatMulForm form = matMulForm(op);
  if (form == MatMulForm::FoldedRows) {
    // A 2-D weight and a batch of row-major inputs: one GEMM with the batch
    // folded into the rows (the output's batch is contiguous alike).
    std::string function = g.function;
    std::string bias;
    if (Value v = op.getBias()) {
      function += "Bias";
      bias = ptr(v) + ", ";
    }
    // A 16-bit result of widened operands: the float32 sums go to the
    // workspace after the operands, then are rounded into the result.
    std::string out = ptr(op.getOutput());
    bool roundAfter =
        isLowPrecision(op.getOutput()) && g.function == "gemm";
    if (roundAfter)
      out = "(" + workspace(op) + " + " +
            std::to_string(numel(op.getA()) + numel(op.getB())) + ")";
    emitCall(llvm::formatv("{0}(ctx, {1}false, {2}, {3}, {4}, {5}, {6}{7}, "
                           "{8}, {9}, {10}, {11}{12}, {13})",
                           function, g.storage, tb ? "true" : "false",
                           batch * m, n, kk, op.getBias() ? "" : "1.0f, ", g.a,
                           lda, g.b, ldb, op.getBias() ? bias : "0.0f, ", out,
                           roundAfter ? n : ldc)
                 .str());
    if (roundAfter)
      s << "  {\n    const int64_t count[] = {" << numel(op.getOutput())
        << "}, unit[] = {1};\n    stridedCopyTo16(ctx, "
        << storage16(op.getOutput()) << ", 1, count, " << out
        << ", 0, unit, " << ptr(op.getOutput()) << ", 0, unit);\n  }\n";
    return;
  }
  // A full or fully broadcast batch is one strided-batched call; anything
  // else (e.g. [2,1,..] x [1,3,..]) loops over the output batch.
  if (form == MatMulForm::StridedBatched) {
    emitCall(llvm::formatv(
                 "{15}StridedBatched(ctx, {16}{0}, {1}, {2}, {3}, {4}, 1.0f, "
                 "{5}, {6}, {7}, {8}, {9}, {10}, 0.0f, {11}, {12}, {13}, {14})",
                 ta ? "true" : "false", tb ? "true" : "false", m, n, kk, g.a,
                 lda, *sa, g.b, ldb, *sb, ptr(op.getOutput()), ldc, m * ldc,
                 batch, g.function, g.storage)
                 .str());
    return;
  }
  SmallVector<int64_t> aStrides, bStrides;
  int64_t lead = yBatch.size();
  auto batchStrides = [&](ArrayRef<int64_t> shape, int64_t mat) {
    SmallVector<int64_t> out(lead, 0);
    ArrayRef<int64_t> bs = shape.drop_back(2);
    int64_t stride = mat;
    for (int64_t d = bs.size() - 1; d >= 0; --d) {
      int64_t od = d + (lead - bs.size());
      out[od] = bs[d] == 1 ? 0 : stride;
      stride *= bs[d];
    }
    return out;
  };
  aStrides = batchStrides(a, aMat);
  bStrides = batchStrides(b, bMat);
  s << "  for (int64_t bi = 0; bi < " << batch << "; ++bi) {\n"
    << "    int64_t rest = bi, ao = 0, bo = 0;\n";
  for (int64_t d = lead - 1; d >= 0; --d)
    s << "    { int64_t c = rest % " << yBatch[d] << "; rest /= " << yBatch[d]
      << "; ao += c * " << aStrides[d] << "; bo += c * " << bStrides[d]
      << "; }\n";
  s << llvm::formatv("    {11}(ctx, {12}{0}, {1}, {2}, {3}, {4}, 1.0f, {5} + "
                     "ao, {6}, {7} + bo, {8}, 0.0f, {9} + bi * {10}, {3});\n",
                     ta ? "true" : "false", tb ? "true" : "false", m, n, kk,
                     g.a, lda, g.b, ldb, ptr(op.getOutput()), m * n,
                     g.function, g.storage)
    << "  }\n";
}

void Emitter::emitMatMulBiasGrad(MatMulBiasGradOp op) {
  ArrayRef<int64_t> a = shapeOf(op.getA()), b = shapeOf(op.getB()),
                    y = shapeOf(op.getOutput());
  bool ta = op.getTransposeA(), tb = op.getTransposeB();
  GemmCall g = gemmOperands(op, op.getA(), op.getB());
  emitCall(llvm::formatv("{0}BiasGrad(ctx, {1}{2}, {3}, {4}, {5}, {6}, {7}, "
                         "{8}, {9}, {10}, {11}, {5}, {12}, {13})",
                         g.function, g.storage, ta ? "true" : "false",
                         tb ? "true" : "false", y[0], y[1], ta ? a[0] : a[1],
                         g.a, a[1], g.b, b[1], ptr(op.getOutput()),
                         op.getSumA() ? "true" : "false",
                         ptr(op.getBiasGrad()))
               .str());
}

/// mtc.matmul_gelu (`grad` false: `pre` is written, unless nothing reads
/// it) and mtc.matmul_gelu_grad (`pre` is read). On CUDA, one cuBLASLt call
/// with the GELU epilogue; otherwise (the CPU, or operands widened first)
/// the GEMM writes float32 sums (into `pre` or the output when those are
/// float32, else the workspace) and the epilogue kernel finishes them.
void Emitter::emitGeluGemm(Operation *op, Value a, Value b, bool transposeB,
                           Value bias, Value pre, Value output, bool grad) {
  ArrayRef<int64_t> bs = shapeOf(b);
  int64_t n = transposeB ? bs[0] : bs[1], k = transposeB ? bs[1] : bs[0];
  // The rows of A folded (also when K is 0): the result's leading dims.
  int64_t m = 1;
  for (int64_t d : shapeOf(output).drop_back())
    m *= d;
  std::string storage =
      isLowPrecision(output) ? storage16(output).str() : "Storage16::Bf16";
  std::string biasArg = bias ? ptr(bias) : "nullptr";
  std::string preArg = grad || !pre.use_empty() ? ptr(pre) : "nullptr";
  const char *tb = transposeB ? "true" : "false";
  GemmCall g = gemmOperands(op, a, b);
  if (cuda() && (g.function == "gemm16" || !isLowPrecision(output))) {
    emitCall(llvm::formatv("{0}(ctx, {1}, {2}, {3}, {4}, {5}, {6}, {7}, "
                           "{8}, {9}, {10}{11}, {12})",
                           grad ? "gemmGeluGrad" : "gemmGelu", storage, tb, m,
                           n, k, g.a, k, g.b, bs[1], grad ? "" : biasArg + ", ",
                           grad ? preArg : ptr(output),
                           grad ? ptr(output) : preArg)
                 .str());
    return;
  }
  std::string sums;
  if (isLowPrecision(output))
    sums = "(" + workspace(op) + " + " +
           std::to_string(g.function == "gemm" && isLowPrecision(a)
                              ? numel(a) + numel(b)
                              : 0) +
           ")";
  else
    sums = grad || pre.use_empty() ? ptr(output) : ptr(pre);
  if (bias)
    emitCall(llvm::formatv("gemmBias(ctx, false, {0}, {1}, {2}, {3}, {4}, "
                           "{3}, {5}, {6}, {7}, {8}, {2})",
                           tb, m, n, k, g.a, g.b, bs[1], biasArg, sums)
                 .str());
  else
    emitCall(llvm::formatv("gemm(ctx, false, {0}, {1}, {2}, {3}, 1.0f, {4}, "
                           "{3}, {5}, {6}, 0.0f, {7}, {2})",
                           tb, m, n, k, g.a, g.b, bs[1], sums)
                 .str());
  std::string acc = "static_cast<const float *>(" + sums + ")";
  if (grad)
    emitCall(llvm::formatv("geluGradEpilogue(ctx, {0}, {1}, {2}, {3}, {4})",
                           storage, m * n, acc, preArg, ptr(output))
                 .str());
  else
    emitCall(llvm::formatv("geluEpilogue(ctx, {0}, {1}, {2}, {3}, {4})",
                           storage, m * n, acc, ptr(output),
                           sums == preArg ? "nullptr" : preArg)
                 .str());
}

void Emitter::emitOp(Operation *op) {
  // Padded rows (the memory plan's mtc::rowPitch) reach only the kernels
  // that take them.
  auto padded = [](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.getRank() && rowPitch(v) != type.getShape().back();
  };
  for (OpOperand &use : op->getOpOperands())
    if (padded(use.get()) && !rowPitchUse(use) && error.empty())
      error = "padded rows reach '" + op->getName().getStringRef().str() +
              "', whose kernel cannot read them";
  for (OpResult r : op->getResults())
    if (padded(r) && !rowPitchResult(r) && error.empty())
      error = "padded rows for '" + op->getName().getStringRef().str() +
              "', whose kernel cannot write them";
  // Optimizer updates under gradient accumulation run on the last
  // micro-batch of each step only.
  if (op->hasAttr(attr::kLastMicroBatch)) {
    auto count = func->getAttrOfType<IntegerAttr>(attr::kAccumulate);
    s << "  if (microBatch(ctx) == " << (count ? count.getInt() : 1) - 1
      << ") {\n";
  }
  emitOpBody(op);
  if (op->hasAttr(attr::kLastMicroBatch))
    s << "  }\n";
}

std::optional<Emitter::ElementwiseExpr>
Emitter::elementwiseExpr(Operation *op, int dropoutSlot) const {
  auto math = [&](StringRef name, StringRef cpuExpr, StringRef cudaExpr) {
    return ElementwiseExpr{name.str(), (cuda() ? cudaExpr : cpuExpr).str()};
  };
  auto same = [&](StringRef name, StringRef expr) {
    return ElementwiseExpr{name.str(), expr.str()};
  };
  return llvm::TypeSwitch<Operation *, std::optional<ElementwiseExpr>>(op)
      .Case([&](ReluOp) { return same("relu", "in0 > 0.0f ? in0 : 0.0f"); })
      .Case([&](TanhOp) {
        return math("tanh", "cpu::vecTanh(in0)", "tanhf(in0)");
      })
      .Case([&](SigmoidOp) {
        return math("sigmoid", "1.0f / (1.0f + cpu::vecExp(-in0))",
                    "1.0f / (1.0f + expf(-in0))");
      })
      .Case([&](ExpOp) { return math("exp", "cpu::vecExp(in0)", "expf(in0)"); })
      .Case([&](LogOp) { return math("log", "std::log(in0)", "logf(in0)"); })
      .Case([&](NegOp) { return same("neg", "-in0"); })
      .Case([&](ConvertOp) { return same("convert", "in0"); })
      .Case(
          [&](SqrtOp) { return math("sqrt", "std::sqrt(in0)", "sqrtf(in0)"); })
      .Case([&](ErfOp) { return math("erf", "cpu::vecErf(in0)", "erff(in0)"); })
      .Case([&](AddOp) { return same("add", "in0 + in1"); })
      .Case([&](SubOp) { return same("sub", "in0 - in1"); })
      .Case([&](MulOp) { return same("mul", "in0 * in1"); })
      .Case([&](DivOp) { return same("div", "in0 / in1"); })
      .Case([&](ReluGradOp) {
        return same("relu_grad", "in1 > 0.0f ? in0 : 0.0f");
      })
      .Case([&](ExpandOp) { return same("expand", "in0"); })
      .Case([&](ClipOp c) {
        std::string lo = floatLiteral(c.getMin().convertToFloat());
        std::string hi = floatLiteral(c.getMax().convertToFloat());
        return same("clip", "in0 < " + lo + " ? " + lo + " : (in0 > " + hi +
                                " ? " + hi + " : in0)");
      })
      .Case([&](ClipGradOp c) {
        std::string lo = floatLiteral(c.getMin().convertToFloat());
        std::string hi = floatLiteral(c.getMax().convertToFloat());
        return same("clip_grad",
                    "(in1 > " + lo + " && in1 < " + hi + ") ? in0 : 0.0f");
      })
      .Case([&](SelectOp) { return same("select", "in0 ? in1 : in2"); })
      .Case([&](CompareOp c) {
        StringRef p = c.getPredicate();
        std::string symbol = p == "eq" ? "==" : p == "lt" ? "<" : ">";
        return same("compare", "(in0 " + symbol + " in1) ? 1 : 0");
      })
      .Case([&](NotOp) { return same("not", "in0 ? 0 : 1"); })
      .Case<DropoutOp, DropoutGradOp>(
          [&](auto d) -> std::optional<ElementwiseExpr> {
            if (dropoutSlot < 0)
              return std::nullopt; // a runtime call on its own
            // dropoutElement's formula on the mask the runtime draws.
            std::string k = std::to_string(dropoutSlot);
            return same(isa<DropoutOp>(d) ? "dropout" : "dropout_grad",
                        "keep" + k + "[lane] ? in0 * drop" + k +
                            ".scale : 0.0f");
          })
      .Default([](Operation *) { return std::nullopt; });
}

void Emitter::emitFused(FusedOp op) {
  // One loop: each op of the body becomes a lambda over its operands'
  // values (loaded inputs in<j>, or earlier temporaries t<k>), so its
  // expression keeps its own in<j> names.
  Block &body = op.getBody().front();
  DenseMap<Value, std::string> names;
  for (BlockArgument arg : body.getArguments())
    names[arg] = "in" + std::to_string(arg.getArgNumber());
  std::string statements, kernel = "fused";
  int temps = 0;
  SmallVector<Operation *> dropouts;
  for (Operation &inner : body.without_terminator()) {
    bool dropout = isa<DropoutOp, DropoutGradOp>(inner);
    std::optional<ElementwiseExpr> e =
        elementwiseExpr(&inner, dropout ? dropouts.size() : -1);
    if (dropout)
      dropouts.push_back(&inner);
    if (!e) {
      if (error.empty())
        error = ("mtc.fused holds a non-elementwise op " +
                 inner.getName().getStringRef())
                    .str();
      return;
    }
    std::string params, args;
    for (auto [j, operand] : llvm::enumerate(inner.getOperands())) {
      params += (j ? ", auto in" : "auto in") + std::to_string(j);
      args += (j ? ", " : "") + names[operand];
    }
    Value result = inner.getResult(0);
    // Always inlined on the CPU: the compiler merges identical lambdas of
    // different kernels into one function, and a call in the loop (exp, erf,
    // tanh) keeps the loop scalar.
    std::string value = "[&](" + params + ")" +
                        (cuda() ? "" : " __attribute__((always_inline))") +
                        " { return " + e->expr + "; }(" + args + ")";
    // A 16-bit value is rounded as storing it rounds it.
    if (isLowPrecision(result))
      value = loadAsFloat(result, storeAs(result, value));
    std::string temp = "t" + std::to_string(temps++);
    statements += "    const float " + temp + " = " + value + ";\n";
    names[result] = temp;
    kernel += "_" + e->name;
  }
  SmallVector<std::string> values;
  for (Value v : op.getYielded())
    values.push_back(names[v]);
  auto ln = dyn_cast_or_null<LayerNormOp>(op->getNextNode());
  emitElementwise(op, kernel, op.getInputs(), op.getOutputs(), values,
                  statements, dropouts,
                  ln && ln->hasAttr(attr::kRowEpilogue) ? ln : LayerNormOp());
}

void Emitter::emitOpBody(Operation *op) {
  std::string node = nodeName(op->getLoc());
  s << "  // " << op->getName();
  if (!node.empty())
    s << " (ONNX node '" << node << "')";
  if (op->hasAttr(attr::kRecompute))
    s << " [recompute]";
  else if (op->hasAttr(attr::kBackward))
    s << " [backward]";
  s << "\n";

  // A float32 -> 16-bit conversion written over its input (the memory
  // plan's mtc::inPlaceSource) runs in phases (narrowInPlace).
  if (auto convert = dyn_cast<ConvertOp>(op);
      convert && offsetOf(convert.getInput()) == offsetOf(convert.getOutput())) {
    emitCall("narrowInPlace(ctx, " + storage16(convert.getOutput()).str() +
             ", " + ptr(convert.getInput()) + ", " +
             std::to_string(numel(convert.getOutput())) + ")");
    return;
  }

  if (std::optional<ElementwiseExpr> e = elementwiseExpr(op)) {
    emitElementwise(op, e->name, op->getOperands(), op->getResult(0),
                    e->expr);
    return;
  }

  llvm::TypeSwitch<Operation *>(op)
      .Case([&](ConstantOp) { s << "  // (initialized at start-up)\n"; })
      .Case([&](FusedOp f) { emitFused(f); })
      .Case([&](MatMulOp m) { emitMatMul(m); })
      .Case([&](MatMulBiasGradOp m) { emitMatMulBiasGrad(m); })
      .Case([&](MatMulGeluOp m) {
        emitGeluGemm(m, m.getA(), m.getB(), m.getTransposeB(), m.getBias(),
                     m.getPre(), m.getOutput(), false);
      })
      .Case([&](MatMulGeluGradOp m) {
        emitGeluGemm(m, m.getA(), m.getB(), m.getTransposeB(), Value(),
                     m.getPre(), m.getOutput(), true);
      })
      .Case([&](ConvOp c) {
        emitCall(convCall("conv2dForward", op, c.getInput()) +
                 convParams(shapeOf(c.getInput()), shapeOf(c.getWeight()),
                            shapeOf(c.getOutput()), c.getStrides(),
                            c.getPads(), c.getDilations(), c.getGroup()) +
                 ", " + ptr(c.getInput()) + ", " + ptr(c.getWeight()) + ", " +
                 (c.getBias() ? ptr(c.getBias()) : "nullptr") + ", " +
                 ptr(c.getOutput()) + ", " + workspace(op) + ")");
      })
      .Case([&](ConvBackwardDataOp c) {
        emitCall(convCall("conv2dBackwardData", op, c.getGrad()) +
                 convParams(shapeOf(c.getOutput()), shapeOf(c.getWeight()),
                            shapeOf(c.getGrad()), c.getStrides(), c.getPads(),
                            c.getDilations(), c.getGroup()) +
                 ", " + ptr(c.getGrad()) + ", " + ptr(c.getWeight()) + ", " +
                 ptr(c.getOutput()) + ", " + workspace(op) + ")");
      })
      .Case([&](ConvBackwardFilterOp c) {
        emitCall(convCall("conv2dBackwardFilter", op, c.getGrad()) +
                 convParams(shapeOf(c.getInput()), shapeOf(c.getOutput()),
                            shapeOf(c.getGrad()), c.getStrides(), c.getPads(),
                            c.getDilations(), c.getGroup()) +
                 ", " + ptr(c.getInput()) + ", " + ptr(c.getGrad()) + ", " +
                 ptr(c.getOutput()) + ", " + workspace(op) + ")");
      })
      .Case([&](MaxPoolOp p) {
        emitCall(storageCall("maxPool2dForward", p.getInput()) +
                 poolParams(p, p.getInput(), p.getOutput(), false) + ", " +
                 ptr(p.getInput()) + ", " + ptr(p.getOutput()) + ")");
      })
      .Case([&](MaxPoolGradOp p) {
        // 16-bit operands: the entry point that reads and writes them as
        // stored, in the format of the 16-bit ones (one, by the verifier).
        Value low = storedLow({p.getInput(), p.getGrad(), p.getOutput()});
        emitCall(storageCall("maxPool2dBackward", low) +
                 poolParams(p, p.getInput(), p.getGrad(), false) + ", " +
                 ptr(p.getInput()) + ", " + ptr(p.getGrad()) + ", " +
                 ptr(p.getOutput()) + ")");
      })
      .Case([&](AvgPoolOp p) {
        emitCall("avgPool2dForward(ctx, " +
                 poolParams(p, p.getInput(), p.getOutput(),
                            p.getCountIncludePad()) +
                 ", " + ptr(p.getInput()) + ", " + ptr(p.getOutput()) + ")");
      })
      .Case([&](AvgPoolGradOp p) {
        emitCall("avgPool2dBackward(ctx, " +
                 poolParams(p, p.getOutput(), p.getGrad(),
                            p.getCountIncludePad()) +
                 ", " + ptr(p.getGrad()) + ", " + ptr(p.getOutput()) + ")");
      })
      .Case([&](GlobalAvgPoolOp p) {
        ArrayRef<int64_t> in = shapeOf(p.getInput());
        float scale = float(getNumElements(p.getOutput().getType())) /
                      float(getNumElements(p.getInput().getType()));
        s << "  {\n    const int64_t in[] = {" << list(in) << "};\n"
          << "    const int64_t out[] = {" << list(shapeOf(p.getOutput()))
          << "};\n    reduceSum(ctx, " << in.size() << ", in, out, "
          << ptr(p.getInput()) << ", " << ptr(p.getOutput()) << ", "
          << floatLiteral(scale) << ");\n  }\n";
      })
      .Case([&](ReshapeOp r) {
        if (ptr(r.getOutput()) == ptr(r.getInput())) {
          s << "  // a view of its input: no copy\n";
          return;
        }
        emitCall("copyBytes(ctx, " + ptr(r.getOutput()) + ", " +
                 ptr(r.getInput()) + ", " +
                 std::to_string(getTensorBytes(r.getInput().getType())) + ")");
      })
      .Case<TransposeOp, SliceOp>([&](auto view) {
        // A strided view copies nothing: its readers read through it.
        if (view->hasAttr(attr::kStridedView)) {
          s << "  // a strided view of its input: no copy\n";
          return;
        }
        emitStridedCopy(orFail(layoutThrough(view), view.getOutput()),
                        view.getOutput(), 0,
                        contiguousStrides(shapeOf(view.getOutput())));
      })
      .Case([&](PadOp p) {
        ArrayRef<int64_t> in = shapeOf(p.getInput());
        SmallVector<int64_t> outStrides = contiguousStrides(shapeOf(p.getOutput()));
        int64_t offset = 0;
        for (size_t d = 0; d < in.size(); ++d)
          offset += p.getPads()[d] * outStrides[d];
        emitCall("fill(ctx, " + ptr(p.getOutput()) + ", " +
                 std::to_string(numel(p.getOutput())) + ", " +
                 floatLiteral(p.getValue().convertToFloat()) + ")");
        emitStridedCopy(layoutOf(p.getInput()), p.getOutput(), offset,
                        outStrides);
      })
      .Case([&](SliceGradOp sl) {
        SmallVector<int64_t> outStrides = contiguousStrides(shapeOf(sl.getOutput()));
        SmallVector<int64_t> dstStrides;
        int64_t offset = 0;
        for (size_t d = 0; d < outStrides.size(); ++d) {
          offset += sl.getStarts()[d] * outStrides[d];
          dstStrides.push_back(outStrides[d] * sl.getSteps()[d]);
        }
        emitCall("fill(ctx, " + ptr(sl.getOutput()) + ", " +
                 std::to_string(numel(sl.getOutput())) + ", 0.0f)");
        emitStridedCopy(layoutOf(sl.getGrad()), sl.getOutput(), offset,
                        dstStrides);
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](auto r) {
        ArrayRef<int64_t> in = shapeOf(r.getInput());
        SmallVector<int64_t> kept(in);
        int64_t count = 1;
        for (int64_t axis : r.getAxes()) {
          count *= in[axis];
          kept[axis] = 1;
        }
        float scale =
            isa<ReduceMeanOp>(op) ? 1.0f / static_cast<float>(count) : 1.0f;
        s << "  {\n    const int64_t in[] = {" << list(in) << "};\n"
          << "    const int64_t out[] = {" << list(kept) << "};\n"
          << "    reduceSum(ctx, " << in.size() << ", in, out, "
          << ptr(r.getInput()) << ", " << ptr(r.getOutput()) << ", "
          << floatLiteral(scale) << ");\n  }\n";
      })
      .Case([&](SoftmaxOp o) {
        emitSoftmaxLike(o.getInput(), Value(), o.getOutput(), o.getAxis(),
                        false, false);
      })
      .Case([&](LogSoftmaxOp o) {
        emitSoftmaxLike(o.getInput(), Value(), o.getOutput(), o.getAxis(),
                        true, false);
      })
      .Case([&](SoftmaxGradOp o) {
        emitSoftmaxLike(o.getOutputValue(), o.getGrad(), o.getOutput(),
                        o.getAxis(), o.getLog(), true);
      })
      .Case<SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp>([&](auto o) {
        ArrayRef<int64_t> x = shapeOf(o.getLogProb());
        int64_t d = 1;
        for (size_t i = 2; i < x.size(); ++i)
          d *= x[i];
        StringRef reduction = o.getReduction();
        std::string red = reduction == "mean" ? "Reduction::Mean"
                          : reduction == "sum" ? "Reduction::Sum"
                                               : "Reduction::None";
        // INT64_MIN never matches a label: no ignore_index.
        std::string ignore = ignoreIndexLiteral(o.getIgnoreIndexAttr());
        std::string dims = llvm::formatv("{0}, {1}, {2}", x[0], x[1], d);
        if constexpr (std::is_same_v<decltype(o), SoftmaxCrossEntropyOp>)
          emitCall("softmaxCrossEntropyForward(ctx, " + dims + ", " +
                   ptr(o.getLogits()) + ", " + ptr(o.getLabels()) + ", " +
                   red + ", " + ignore + ", " + ptr(o.getLoss()) + ", " +
                   ptr(o.getLogProb()) + ")");
        else
          emitCall("softmaxCrossEntropyBackward(ctx, " + dims + ", " +
                   ptr(o.getGrad()) + ", " + ptr(o.getLogProb()) + ", " +
                   ptr(o.getLabels()) + ", " + red + ", " + ignore + ", " +
                   ptr(o.getOutput()) + ")");
      })
      .Case([&](SoftmaxCrossEntropyLossOp o) {
        ArrayRef<int64_t> x = shapeOf(o.getLogits());
        std::string ignore = ignoreIndexLiteral(o.getIgnoreIndexAttr());
        emitCall(llvm::formatv(
                     "softmaxCrossEntropyLoss(ctx, {0}, {1}, {8}, "
                     "{2}, {3}, {4}, {5}, {6}, {7})",
                     x[0], x[1], ptr(o.getLogits()), ptr(o.getLabels()),
                     reductionLiteral(o.getReduction()), ignore,
                     ptr(o.getLoss()), workspace(op), rowPitch(o.getLogits()))
                     .str());
      })
      .Case([&](SoftmaxCrossEntropyWithGradOp o) {
        ArrayRef<int64_t> x = shapeOf(o.getLogits());
        std::string ignore = ignoreIndexLiteral(o.getIgnoreIndexAttr());
        bool narrow = isLowPrecision(o.getDlogits());
        if (isLowPrecision(o.getLogits())) {
          emitCall(llvm::formatv(
                       "softmaxCrossEntropyWithGrad16(ctx, {0}, {1}, {2}, "
                       "{11}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10})",
                       storage16(o.getLogits()), x[0], x[1], ptr(o.getLogits()),
                       ptr(o.getLabels()), ptr(o.getDloss()),
                       reductionLiteral(o.getReduction()), ignore,
                       ptr(o.getLoss()), ptr(o.getDlogits()), workspace(op),
                       rowPitch(o.getLogits()))
                       .str());
          return;
        }
        emitCall(llvm::formatv(
                     "softmaxCrossEntropyWithGrad(ctx, {0}, {1}, {12}, {2}, "
                     "{3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11})",
                     x[0], x[1], ptr(o.getLogits()), ptr(o.getLabels()),
                     ptr(o.getDloss()), reductionLiteral(o.getReduction()),
                     ignore, ptr(o.getLoss()), ptr(o.getDlogits()),
                     narrow ? "true" : "false",
                     narrow ? storage16(o.getDlogits()) : "Storage16::Bf16",
                     workspace(op), rowPitch(o.getLogits()))
                     .str());
      })
      .Case([&](CountCorrectOp cc) {
        ArrayRef<int64_t> x = shapeOf(cc.getLogits());
        int64_t d = numel(cc.getLogits()) / (x[0] * x[1]);
        std::string ignore = ignoreIndexLiteral(cc.getIgnoreIndexAttr());
        // Rank-2 logits may have padded rows (mtc::rowPitch).
        int64_t stride = x.size() == 2 ? rowPitch(cc.getLogits()) : x[1] * d;
        emitCall(llvm::formatv("countCorrect(ctx, {0}, {1}, {2}, {7}, {3}, "
                               "{4}, {5}, {6})",
                               x[0], x[1], d, ptr(cc.getLogits()),
                               ptr(cc.getLabels()), ignore, ptr(cc.getOutput()),
                               stride)
                     .str());
      })
      .Case([&](AccumulateGradOp a) {
        emitCall("accumulateGradient(ctx, " +
                 std::to_string(numel(a.getGrad())) + ", " + ptr(a.getOutput()) +
                 ", " + ptr(a.getGrad()) + ", " +
                 std::to_string(a.getCount()) + ")");
      })
      .Case([&](GradCheckOp c) {
        emitCall("gradCheckBegin(ctx, " + ptr(c.getLossScale()) + ", " +
                 ptr(c.getStatus()) + ")");
        for (Value g : c.getGrads())
          emitCall("gradCheck(ctx, " + std::to_string(numel(g)) + ", " +
                   ptr(g) + ", " + ptr(c.getStatus()) + ")");
      })
      .Case<SgdUpdateOp, SgdMomentumUpdateOp, AdamWUpdateOp>(
          [&](Operation *u) { emitUpdate(u); })
      .Case([&](BatchNormTrainOp bn) {
        ArrayRef<int64_t> x = shapeOf(bn.getInput());
        int64_t inner = numel(bn.getInput()) / (x[0] * x[1]);
        // The running statistics are updated in place; they are tied to
        // their buffers, so this copy only runs when they are not.
        for (auto [from, to] :
             {std::pair(bn.getRunningMean(), bn.getNewRunningMean()),
              std::pair(bn.getRunningVar(), bn.getNewRunningVar())})
          if (offsetOf(from) != offsetOf(to))
            emitCall("copyBytes(ctx, " + ptr(to) + ", " + ptr(from) + ", " +
                     std::to_string(getTensorBytes(from.getType())) + ")");
        // 16-bit operands: the entry point that reads and writes them as
        // stored, in the format of the 16-bit ones (one, by the verifier).
        Value low = storedLow(
            {bn.getInput(), bn.getOutput(), bn.getInput16(), bn.getResidual()});
        std::string activation = normActivationArg(
            bn.getActivation(), bn.getClipMinAttr(), bn.getClipMaxAttr());
        if (bn.getInput16() || bn.getResidual())
          activation = activation.empty() ? ", NormActivation{}" : activation;
        // The 16-bit entry point takes x's copy before the residual.
        if (bn.getInput16())
          activation += ", " + ptr(bn.getInput16());
        else if (bn.getResidual() && isLowPrecision(low))
          activation += ", nullptr";
        if (bn.getResidual())
          activation += ", " + ptr(bn.getResidual());
        emitCall(llvm::formatv("{13}{0}, {1}, {2}, {3}, {4}, "
                               "{5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}",
                               x[0], x[1], inner, ptr(bn.getInput()),
                               ptr(bn.getScale()), ptr(bn.getBias()),
                               ptr(bn.getNewRunningMean()),
                               ptr(bn.getNewRunningVar()),
                               floatLiteral(bn.getEpsilon().convertToFloat()),
                               floatLiteral(bn.getMomentum().convertToFloat()),
                               ptr(bn.getOutput()), ptr(bn.getSavedMean()),
                               ptr(bn.getSavedInvstd()),
                               storageCall("batchNormTrainForward", low))
                     .str() +
                 activation + ")");
      })
      .Case([&](BatchNormTrainGradOp g) {
        ArrayRef<int64_t> x = shapeOf(g.getInput());
        int64_t inner = numel(g.getInput()) / (x[0] * x[1]);
        Value mask = g.getActivationOutput();
        Value low =
            storedLow({g.getInput(), g.getInputGrad(), g.getGrad(), mask});
        emitCall(
            llvm::formatv("{11}{0}, {1}, {2}, {3}, {4}, "
                          "{5}, {6}, {7}, {8}, {9}, {10}",
                          x[0], x[1], inner, ptr(g.getGrad()),
                          ptr(g.getInput()), ptr(g.getScale()),
                          ptr(g.getSavedMean()), ptr(g.getSavedInvstd()),
                          ptr(g.getInputGrad()), ptr(g.getScaleGrad()),
                          ptr(g.getBiasGrad()),
                          storageCall("batchNormTrainBackward", low))
                .str() +
            (mask ? ", " + ptr(mask) +
                        normActivationArg(g.getActivation(), g.getClipMinAttr(),
                                          g.getClipMaxAttr())
                  : std::string()) +
            ")");
      })
      .Case([&](LayerNormOp ln) {
        if (ln->hasAttr(attr::kRowEpilogue)) {
          s << "  // runs in the kernel above, row by row\n";
          return;
        }
        int64_t dim = numel(ln.getScale());
        int64_t outer = numel(ln.getInput()) / dim;
        // A 16-bit output: the variant that rounds each value as storing
        // it rounds it.
        std::string function = storageCall("layerNormForward", ln.getOutput());
        emitCall(llvm::formatv(
                     "{9}{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8})",
                     outer, dim, ptr(ln.getInput()), ptr(ln.getScale()),
                     ln.getBias() ? ptr(ln.getBias()) : "nullptr",
                     floatLiteral(ln.getEpsilon().convertToFloat()),
                     ptr(ln.getOutput()), ptr(ln.getMean()),
                     ptr(ln.getInvstd()), function)
                     .str());
      })
      .Case([&](LayerNormGradOp g) {
        int64_t dim = numel(g.getScale());
        int64_t outer = numel(g.getInput()) / dim;
        // The input gradient's 16-bit copy, when the op makes one.
        std::string copy =
            g.getInputGrad16() ? ", " + ptr(g.getInputGrad16()) : "";
        emitCall(llvm::formatv(
                     "{11}{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, "
                     "{10}{12})",
                     outer, dim, ptr(g.getGrad()), ptr(g.getInput()),
                     ptr(g.getScale()), ptr(g.getMean()), ptr(g.getInvstd()),
                     ptr(g.getInputGrad()), ptr(g.getScaleGrad()),
                     ptr(g.getBiasGrad()),
                     g.getAccumulate() ? ptr(g.getAccumulate()) : "nullptr",
                     storageCall("layerNormBackward", g.getInput()), copy)
                     .str());
      })
      .Case([&](AttentionOp a) {
        SmallVector<AttentionTensor> t;
        for (Value v : {a.getQuery(), a.getKey(), a.getValue(), a.getOutput()})
          t.push_back(attentionTensor(v, a.getSeqMajor()));
        emitAttentionCall(
            attentionDims(a, t),
            llvm::formatv("attentionForward{6}(ctx, {7}dims, {0}, {1}, {2}, "
                          "{3}, {4}, {5})",
                          t[0].ptr, t[1].ptr, t[2].ptr,
                          a.getMask() ? ptr(a.getMask()) : "nullptr",
                          t[3].ptr, ptr(a.getLogsumexp()),
                          suffix16(a.getQuery()), storageArg(a.getQuery())));
      })
      .Case([&](AttentionGradOp g) {
        SmallVector<AttentionTensor> t;
        for (Value v : {g.getQuery(), g.getKey(), g.getValue(), g.getOutput(),
                        g.getGrad(), g.getQueryGrad(), g.getKeyGrad(),
                        g.getValueGrad()})
          t.push_back(attentionTensor(v, g.getSeqMajor()));
        emitAttentionCall(
            attentionDims(g, t),
            llvm::formatv("attentionBackward{10}(ctx, {11}dims, {0}, {1}, "
                          "{2}, {3}, {4}, {5}, {6}, {7}, {8}, {9})",
                          t[0].ptr, t[1].ptr, t[2].ptr,
                          g.getMask() ? ptr(g.getMask()) : "nullptr",
                          t[3].ptr, ptr(g.getLogsumexp()), t[4].ptr,
                          t[5].ptr, t[6].ptr, t[7].ptr,
                          suffix16(g.getQuery()), storageArg(g.getQuery())));
      })
      .Case([&](DropoutOp d) {
        emitCall(llvm::formatv("dropoutForward(ctx, {0}, {1}, {2}, {3}, {4}u)",
                               numel(d.getInput()), ptr(d.getInput()),
                               ptr(d.getOutput()),
                               floatLiteral(d.getRatio().convertToFloat()),
                               d.getStream())
                     .str());
      })
      .Case([&](DropoutGradOp d) {
        emitCall(llvm::formatv("dropoutBackward(ctx, {0}, {1}, {2}, {3}, {4}u)",
                               numel(d.getGrad()), ptr(d.getGrad()),
                               ptr(d.getOutput()),
                               floatLiteral(d.getRatio().convertToFloat()),
                               d.getStream())
                     .str());
      })
      .Case<GatherOp, GatherGradOp>([&](auto g) {
        bool forward = std::is_same_v<decltype(g), GatherOp>;
        Value data = forward ? g->getOperand(0) : g->getResult(0);
        Value other = forward ? g->getResult(0) : g->getOperand(0);
        ArrayRef<int64_t> shape = shapeOf(data);
        int64_t axis = g.getAxis(), outer = 1, inner = 1;
        for (int64_t i = 0; i < axis; ++i)
          outer *= shape[i];
        for (size_t i = axis + 1; i < shape.size(); ++i)
          inner *= shape[i];
        std::string call =
            llvm::formatv("(ctx, {0}, {1}, {2}, {3}, {4}, {5}", outer,
                          shape[axis], inner, ptr(forward ? data : other),
                          ptr(g.getIndices()), numel(g.getIndices()))
                .str();
        Value accumulate;
        if constexpr (!std::is_same_v<decltype(g), GatherOp>)
          accumulate = g.getAccumulate();
        if (accumulate)
          emitCall("gatherBackwardAccumulate" + call + ", " + ptr(accumulate) +
                   ", " + ptr(data) + ", " + workspace(op) + ")");
        else
          emitCall((forward ? "gatherForward" : "gatherBackward") + call +
                   ", " + ptr(forward ? other : data) + ")");
      })
      .Case([&](ConcatOp c) {
        // Its inputs were written into its result (mtc::concatPart) by
        // attention backwards, the only kernels that write through strides.
        if (c->hasAttr(attr::kWrittenInPlace)) {
          for (Value input : c.getInputs()) {
            Value v = input;
            while (auto reshape = v.getDefiningOp<ReshapeOp>())
              v = reshape.getInput();
            if (!v.getDefiningOp<AttentionGradOp>() || !concatPart(v).concat)
              if (error.empty())
                error = "a concat written in place must have attention "
                        "gradients as inputs, each read only by it";
          }
          s << "  // its inputs were written into it: no copy\n";
          return;
        }
        int64_t axis = c.getAxis();
        SmallVector<int64_t> outStrides = contiguousStrides(shapeOf(c.getOutput()));
        int64_t offset = 0;
        for (Value input : c.getInputs()) {
          emitStridedCopy(layoutOf(input), c.getOutput(),
                          offset * outStrides[axis], outStrides);
          offset += shapeOf(input)[axis];
        }
      })
      .Default([&](Operation *other) {
        if (error.empty())
          error = ("no code generation for '" + other->getName().getStringRef() +
                   "'")
                      .str();
      });
}

/// The raw bytes of a dense or dense_resource elements attribute.
std::vector<char> rawBytes(ElementsAttr attr) {
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return {};
    ArrayRef<char> data = blob->getData();
    return std::vector<char>(data.begin(), data.end());
  }
  std::vector<char> out;
  auto dense = cast<DenseElementsAttr>(attr);
  int64_t count = getNumElements(dense.getType());
  if (dense.getElementType().isInteger(1)) {
    for (bool v : dense.getValues<bool>())
      out.push_back(v ? 1 : 0);
  } else if (dense.getElementType().isF32()) {
    out.resize(count * 4);
    int64_t i = 0;
    for (float v : dense.getValues<float>())
      std::memcpy(out.data() + 4 * i++, &v, 4);
  } else {
    out.resize(count * 8);
    int64_t i = 0;
    for (int64_t v : dense.getValues<int64_t>())
      std::memcpy(out.data() + 8 * i++, &v, 8);
  }
  return out;
}

const char *roleEnum(StringRef role) {
  if (role == attr::role::kParam)
    return "Role::Param";
  if (role == attr::role::kBuffer)
    return "Role::Buffer";
  if (role == attr::role::kState)
    return "Role::State";
  if (role == attr::role::kAccumulator)
    return "Role::Accumulator";
  if (role == attr::role::kLossScale)
    return "Role::LossScale";
  if (role == attr::role::kParamCopy)
    return "Role::ParamCopy";
  return "Role::Input";
}

llvm::Error Emitter::emit(llvm::raw_ostream &os,
                          std::vector<InitTensor> &inits) {
  Block &block = func.getBody().front();
  auto arena = func->getAttrOfType<IntegerAttr>(attr::kArenaSize);
  if (!arena)
    return makeError("@" + func.getSymName() +
                     " has no memory plan (run --mtc-memory-plan)");
  bool inference = func.getSymName() == "forward";

  // The training step's ops are bracketed for the trainer's --profile.
  std::string profileTable;
  int profiled = 0;
  for (Operation &op : block.without_terminator()) {
    bool timed = !inference && !isa<ConstantOp>(op);
    if (timed)
      s << "  profileBegin(ctx, " << profiled << ");\n";
    lastKernel.clear();
    emitOp(&op);
    if (timed) {
      s << "  profileEnd(ctx, " << profiled++ << ");\n";
      auto cost = dyn_cast<CostOpInterface>(&op);
      uint64_t bytes = cost ? cost.getBytesMoved() : 0;
      uint64_t flops = cost ? cost.getFlops() : 0;
      // A layer norm run in the kernel before it (a row epilogue) is that
      // kernel's work: its bytes (but the input it normalizes from cache)
      // and FLOPs count there, and that kernel is not elementwise only.
      auto ln = dyn_cast_or_null<LayerNormOp>(op.getNextNode());
      bool rowEpilogue = isa<FusedOp>(op) && ln &&
                         ln->hasAttr(attr::kRowEpilogue);
      if (rowEpilogue) {
        auto lnCost = cast<CostOpInterface>(ln.getOperation());
        bytes += lnCost.getBytesMoved() -
                 getTensorBytes(ln.getInput().getType());
        flops += lnCost.getFlops();
      }
      if (op.hasAttr(attr::kRowEpilogue) || viewSource(&op) ||
          op.hasAttr(attr::kWrittenInPlace))
        bytes = flops = 0;
      bool elementwise =
          (isa<FusedOp>(op) || elementwiseExpr(&op)) && !rowEpilogue;
      std::string name = op.getName().getStringRef().str();
      if ((elementwise || rowEpilogue) && !lastKernel.empty())
        name += " " + lastKernel;
      profileTable += llvm::formatv(
          "    {{\"{0}\", \"{1}\", {2}ull, {3}ull, {4}, {5}},\n", cString(name),
          cString(nodeName(op.getLoc())), bytes, flops,
          elementwise ? "true" : "false", rowEpilogue ? "true" : "false");
    }
    ++opIndex;
  }
  // The evaluation function, if any, goes to its own body.
  func::FuncOp train = func;
  auto eval = func->getParentOfType<ModuleOp>().lookupSymbol<func::FuncOp>(
      attr::kEvalFunction);
  std::string trainBody = std::move(body), evalBody;
  body.clear();
  if (eval) {
    func = eval;
    for (Operation &op : eval.getBody().front().without_terminator()) {
      emitOp(&op);
      ++opIndex;
    }
    evalBody = std::move(body);
    body.clear();
    func = train;
  }
  if (!error.empty())
    return makeError(error);

  // The tensor table: arguments, then constants, then the step's results.
  std::string table;
  llvm::raw_string_ostream t(table);
  int numTensors = 0;
  DenseMap<unsigned, int> tableIndexOfArg;
  llvm::StringMap<int> weightIndex;
  auto entry = [&](StringRef name, StringRef role, Value v, int64_t offset,
                   int owner, bool compiledIn = false, bool inArena = true) {
    ArrayRef<int64_t> shape = shapeOf(v);
    SmallVector<int64_t> padded(shape);
    padded.resize(8, 0);
    t << "    {\"" << cString(name) << "\", " << role << ", "
      << (isLowPrecision(v) ? (getElementTypeOrSelf(v).isBF16() ? "DType::BF16"
                                                                : "DType::F16")
          : isFloat(v)      ? "DType::F32"
          : isBool(v)       ? "DType::Bool"
                            : "DType::I64")
      << ", " << shape.size() << ", {" << list(padded) << "}, " << offset
      << "ull, " << getTensorBytes(v.getType()) << "ull, " << owner;
    // The fields are positional: inArena comes after compiledIn.
    if (compiledIn || !inArena)
      t << (compiledIn ? ", true" : ", false");
    if (!inArena)
      t << ", false";
    t << "},\n";
    return numTensors++;
  };
  int64_t batch = 0;
  for (BlockArgument arg : block.getArguments()) {
    unsigned i = arg.getArgNumber();
    StringRef role =
        func.getArgAttrOfType<StringAttr>(i, attr::kRole).getValue();
    StringRef name =
        func.getArgAttrOfType<StringAttr>(i, attr::kName).getValue();
    int owner = -1;
    if (auto o = func.getArgAttrOfType<IntegerAttr>(i, attr::kOwner))
      owner = tableIndexOfArg.lookup(o.getInt());
    bool inArena = !func.getArgAttr(i, attr::kNotInArena);
    tableIndexOfArg[i] =
        entry(name, roleEnum(role), arg, inArena ? offsetOf(arg) : 0, owner,
              func.getArgAttr(i, attr::kCompiledIn) != nullptr, inArena);
    if (role == attr::role::kParam || role == attr::role::kBuffer)
      weightIndex[name] = tableIndexOfArg[i];
    if (role == attr::role::kInput && !inference) {
      if (shapeOf(arg).empty())
        return makeError("graph input '" + name +
                         "' is a scalar; inputs need a leading batch axis");
      if (batch && batch != shapeOf(arg)[0])
        return makeError("graph inputs disagree on the batch size (" +
                         Twine(batch) + " vs " + Twine(shapeOf(arg)[0]) +
                         " for '" + name + "')");
      batch = shapeOf(arg)[0];
    }
    if (auto init = func.getArgAttrOfType<ElementsAttr>(i, attr::kInit))
      inits.push_back({name.str(), true, shapeOf(arg).vec(),
                       rawBytes(init)});
  }
  int constants = 0;
  for (Operation &op : block.without_terminator())
    if (auto c = dyn_cast<ConstantOp>(op)) {
      std::string name = "mtc.const." + std::to_string(constants++);
      entry(name, "Role::Constant", c, offsetOf(c), -1);
      inits.push_back({name, isFloat(c), shapeOf(c).vec(),
                       rawBytes(c.getValue()), isBool(c)});
    }
  if (eval) {
    Block &evalBlock = eval.getBody().front();
    func = eval;
    for (Operation &op : evalBlock.without_terminator())
      if (auto c = dyn_cast<ConstantOp>(op)) {
        std::string name = "mtc.const." + std::to_string(constants++);
        entry(name, "Role::Constant", c, offsetOf(c), -1);
        inits.push_back({name, isFloat(c), shapeOf(c).vec(),
                         rawBytes(c.getValue()), isBool(c)});
      }
    auto evalRet = cast<func::ReturnOp>(evalBlock.getTerminator());
    for (auto [i, v] : llvm::enumerate(evalRet.getOperands())) {
      auto role = eval.getResultAttrOfType<StringAttr>(i, attr::kRole);
      if (role && role.getValue() == attr::role::kEvalLoss)
        entry("eval.loss", "Role::EvalLoss", v, offsetOf(v), -1);
      else if (role && role.getValue() == attr::role::kEvalCorrect)
        entry("eval.correct", "Role::EvalCorrect", v, offsetOf(v), -1);
    }
    func = train;
  }
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto role = func.getResultAttrOfType<StringAttr>(i, attr::kRole);
    auto name = func.getResultAttrOfType<StringAttr>(i, attr::kName);
    if (inference) {
      entry(name ? name.getValue() : "output" + std::to_string(i),
            "Role::Output", v, offsetOf(v), -1);
      continue;
    }
    if (role.getValue() == attr::role::kLoss)
      entry(name ? name.getValue() : "loss", "Role::Loss", v, offsetOf(v), -1);
    else if (role.getValue() == attr::role::kGrad)
      entry(name.getValue(), "Role::Grad", v, offsetOf(v),
            tableIndexOfArg.lookup(
                func.getResultAttrOfType<IntegerAttr>(i, attr::kOwner)
                    .getInt()));
    else if (role.getValue() == attr::role::kGradStatus)
      entry("grad_status", "Role::GradStatus", v, offsetOf(v), -1);
  }
  std::string lossScaling;
  if (auto policy = func->getAttrOfType<DictionaryAttr>(attr::kLossScaling)) {
    auto factor = [&](StringRef key) {
      return doubleLiteral(policy.getAs<FloatAttr>(key).getValueAsDouble());
    };
    lossScaling = "  desc.lossScaling.enabled = true;\n"
                  "  desc.lossScaling.init = " + factor("init") + ";\n"
                  "  desc.lossScaling.growth = " + factor("growth") + ";\n"
                  "  desc.lossScaling.backoff = " + factor("backoff") + ";\n"
                  "  desc.lossScaling.interval = " +
                  std::to_string(
                      policy.getAs<IntegerAttr>("interval").getInt()) +
                  ";\n";
  }

  std::string exportTable;
  if (exportLayout) {
    llvm::raw_string_ostream e(exportTable);
    for (const auto &[name, offset] : exportLayout->weights) {
      auto it = weightIndex.find(name);
      if (it == weightIndex.end())
        return makeError("the export model's initializer '" + name +
                         "' is not a weight of the trainer");
      e << "    {" << it->second << ", " << offset << "ull}, // " << name
        << "\n";
    }
  }

  auto summary = func->getAttrOfType<StringAttr>(attr::kOptimizerSummary);
  os << "// Trainer generated by mtc from '" << modelName << "'.\n"
     << "// Target: " << (cuda() ? "cuda" : "cpu") << ". One arena of "
     << arena.getInt() << " bytes, planned at compile time.\n"
     << "// Every pointer below is a fixed offset into that arena.\n\n"
     << "#include \"mtc/runtime/Half.h\"\n"
     << "#include \"mtc/runtime/Kernels.h\"\n"
     << "#include \"mtc/runtime/LayerNormRow.h\"\n"
     << "#include \"mtc/runtime/Parallel.h\"\n"
     << "#include \"mtc/runtime/Random.h\"\n"
     << "#include \"mtc/runtime/Trainer.h\"\n";
  if (cuda())
    os << "#include \"mtc/runtime/Cuda.h\"\n";
  else
    os << "#include \"mtc/runtime/VecMath.h\"\n";
  os << "\n#include <climits>\n#include <cmath>\n#include <cstdint>\n\n"
     << "using namespace mtc::rt;\n\n"
     << "extern \"C\" const unsigned char mtc_init_data[];\n"
     << "extern \"C\" const unsigned char mtc_init_data_end[];\n"
     << (exportLayout
             ? "extern \"C\" const unsigned char mtc_export_data[];\n"
               "extern \"C\" const unsigned char mtc_export_data_end[];\n"
             : "")
     << "\n"
     << "namespace {\n\n"
     << kernels
     << "/// One training step: forward, backward, optimizer update.\n"
     << "void step(Context &ctx, unsigned char *arena) {\n"
     << trainBody << "}\n\n";
  if (eval)
    os << "/// Evaluation of one batch: dropout off, BatchNorm on its running\n"
       << "/// statistics; the loss and the number of correct predictions.\n"
       << "void evalStep(Context &ctx, unsigned char *arena) {\n"
       << evalBody << "}\n\n";
  os
     << "const TensorDesc kTensors[] = {\n"
     << table << "};\n\n";
  if (profiled)
    os << "/// The step's ops as --profile reports them.\n"
       << "const ProfileOp kProfileOps[] = {\n"
       << profileTable << "};\n\n";
  if (exportLayout)
    os << "/// Where --export writes each weight in the inference model.\n"
       << "const ExportWeight kExportWeights[] = {\n"
       << exportTable << "};\n\n";
  os
     << "} // namespace\n\n"
     << "int main(int argc, char **argv) {\n"
     << "  ModelDesc desc;\n"
     << "  desc.modelName = \"" << modelName << "\";\n"
     << "  desc.target = \"" << (cuda() ? "cuda" : "cpu") << "\";\n"
     << "  desc.optimizer = \"" << (summary ? summary.getValue() : "") << "\";\n"
     << "  desc.arenaBytes = " << arena.getInt() << "ull;\n"
     << "  desc.tensors = kTensors;\n"
     << "  desc.numTensors = " << numTensors << ";\n"
     << "  desc.batchSize = " << batch << ";\n"
     << "  desc.initData = mtc_init_data;\n"
     << "  desc.initSize = static_cast<uint64_t>(mtc_init_data_end - "
        "mtc_init_data);\n"
     << "  desc.step = step;\n"
     << (inference ? "  desc.inference = true;\n" : "")
     << (exportLayout
             ? "  desc.exportData = mtc_export_data;\n"
               "  desc.exportSize = static_cast<uint64_t>(mtc_export_data_end "
               "- mtc_export_data);\n"
               "  desc.exportWeights = kExportWeights;\n"
               "  desc.numExportWeights = " +
                   std::to_string(exportLayout->weights.size()) + ";\n"
             : std::string())
     << (func->getAttrOfType<IntegerAttr>(attr::kAccumulate)
             ? "  desc.accumulateSteps = " +
                   std::to_string(func->getAttrOfType<IntegerAttr>(
                                         attr::kAccumulate)
                                      .getInt()) +
                   ";\n"
             : std::string())
     << (eval ? "  desc.evalStep = evalStep;\n" : "") << lossScaling
     << (profiled ? "  desc.profileOps = kProfileOps;\n  desc.numProfileOps = " +
                        std::to_string(profiled) + ";\n"
                  : std::string())
     << "  return trainerMain(argc, argv, desc);\n"
     << "}\n";
  return llvm::Error::success();
}

} // namespace

llvm::Error mtc::emitTrainerSource(ModuleOp module, Target target,
                                   StringRef modelName, llvm::raw_ostream &os,
                                   std::vector<InitTensor> &inits,
                                   const ExportLayout *exportLayout) {
  // A training step, or else a planned forward function (an inference
  // program, `mtc compile --forward-only`).
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func)
    func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func)
    return makeError("no @train_step or @forward to generate code for");
  Emitter emitter(func, target, modelName, exportLayout);
  return emitter.emit(os, inits);
}
