//===- ImportContext.h - State shared by the per-op importers ---*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Each ONNX op is imported by a small function registered under its op type
// (one file per family in Ops/). They read operands and attributes through
// ImportContext and bind their outputs back into it.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_IMPORT_IMPORTCONTEXT_H
#define MTC_IMPORT_IMPORTCONTEXT_H

#include "mtc/Dialect/Mtc/IR/MtcOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <vector>

namespace mtc::import {

/// A tensor whose value is known at import time (Constant nodes, integer
/// initializers, folded shape computations).
struct KnownTensor {
  std::vector<int64_t> shape;
  bool isFloat = false;
  bool isBool = false;
  std::vector<double> values; ///< row-major, as double for both kinds
};

class ImportContext {
public:
  ImportContext(mlir::OpBuilder &builder, int64_t opset, bool evalMode)
      : builder(builder), opset(opset), evalMode(evalMode) {}

  mlir::OpBuilder &builder;
  /// Version of the default ONNX domain the model imports.
  int64_t opset;
  /// Importing for evaluation (see ImportOptions::evalMode).
  bool evalMode;

  /// The node being imported, for locations and error messages.
  const onnx::NodeProto *node = nullptr;
  mlir::Location loc() const;

  /// Emits "<op> node '<name>': <message>" and returns failure.
  mlir::LogicalResult fail(const llvm::Twine &message) const;

  // Operands -------------------------------------------------------------

  /// Whether input `i` is present (ONNX allows empty names for omitted
  /// optional inputs).
  bool hasInput(int i) const;
  /// The tensor value of input `i` (materializing known constants).
  mlir::FailureOr<mlir::Value> input(int i);
  /// Input `i` as known integers, if it is a compile-time constant.
  std::optional<std::vector<int64_t>> constInts(int i) const;
  /// Input `i` as known floats, if it is a compile-time constant.
  std::optional<std::vector<double>> constFloats(int i) const;
  /// Input `i` as a known tensor, if it is a compile-time constant.
  const KnownTensor *known(int i) const;
  /// Whether input `i` is a value computed or fed at run time (including
  /// trainable initializers), which folding must leave alone.
  bool isRuntimeValue(int i) const {
    return hasInput(i) && values.count(node->input(i));
  }
  /// The static shape of input `i` (known constant or imported value).
  std::optional<std::vector<int64_t>> inputShape(int i) const;

  // Attributes -----------------------------------------------------------

  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t intAttr(llvm::StringRef name, int64_t fallback) const;
  float floatAttr(llvm::StringRef name, float fallback) const;
  std::string stringAttr(llvm::StringRef name, llvm::StringRef fallback) const;
  std::vector<int64_t> intsAttr(llvm::StringRef name,
                                std::vector<int64_t> fallback) const;

  // Results --------------------------------------------------------------

  /// Binds output `i` of the current node.
  void bind(int i, mlir::Value value);
  /// Records output `i` as a compile-time constant.
  void bindKnown(int i, KnownTensor tensor);
  /// Whether output `i` is used (non-empty name).
  bool hasOutput(int i) const;
  /// Whether output `i` is read by another node or is a graph output.
  bool isOutputRead(int i) const {
    return hasOutput(i) && readNames.count(node->output(i));
  }
  /// Names read by some node or produced as graph outputs.
  llvm::StringSet<> readNames;

  // Graph-level state -------------------------------------------------------

  void bindName(const std::string &name, mlir::Value value) {
    values[name] = value;
  }
  void bindKnownName(const std::string &name, KnownTensor tensor) {
    knownTensors[name] = std::move(tensor);
  }
  mlir::FailureOr<mlir::Value> lookup(const std::string &name);

  /// Records that `newValue` is the next value of the initializer argument
  /// `buffer` (BatchNorm running statistics); the step writes it back.
  void addBufferUpdate(mlir::Value buffer, mlir::Value newValue) {
    if (mlir::isa<mlir::BlockArgument>(buffer))
      bufferUpdates.push_back({buffer, newValue});
  }
  llvm::SmallVector<std::pair<mlir::Value, mlir::Value>> bufferUpdates;

  /// A fresh id for an op that needs one (dropout mask streams).
  int64_t nextStream() { return streams++; }

private:
  llvm::StringMap<mlir::Value> values;
  llvm::StringMap<KnownTensor> knownTensors;
  int64_t streams = 0;
};

/// Imports the current node of the context.
using OpImporter = mlir::LogicalResult (*)(ImportContext &ctx);

/// Evaluates the current node at import time when all its inputs are known
/// (shape computations of exported graphs). Returns true when it did.
bool tryFoldNode(ImportContext &ctx);

/// ONNX Reshape's target shape: 0 copies the input dim (unless allowZero),
/// one -1 is inferred. Fails with a message naming the problem.
mlir::FailureOr<std::vector<int64_t>>
resolveReshape(ImportContext &ctx, llvm::ArrayRef<int64_t> input,
               llvm::ArrayRef<int64_t> target, bool allowZero);

/// op type -> importer; filled once by the per-family register functions.
const llvm::StringMap<OpImporter> &getOpImporters();

void registerElementwiseImporters(llvm::StringMap<OpImporter> &table);
void registerLinalgImporters(llvm::StringMap<OpImporter> &table);
void registerConvPoolImporters(llvm::StringMap<OpImporter> &table);
void registerShapeImporters(llvm::StringMap<OpImporter> &table);
void registerReduceImporters(llvm::StringMap<OpImporter> &table);
void registerLossImporters(llvm::StringMap<OpImporter> &table);
void registerFoldOnlyImporters(llvm::StringMap<OpImporter> &table);
void registerNormImporters(llvm::StringMap<OpImporter> &table);

/// Shape of a value of ranked tensor type.
llvm::ArrayRef<int64_t> shapeOf(mlir::Value v);

/// Normalizes a possibly negative axis; fails for out-of-range axes.
mlir::FailureOr<int64_t> normalizeAxis(ImportContext &ctx, int64_t axis,
                                       int64_t rank);

} // namespace mtc::import

#endif // MTC_IMPORT_IMPORTCONTEXT_H
