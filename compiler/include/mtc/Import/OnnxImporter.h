//===- OnnxImporter.h - ONNX ModelProto to the mtc dialect ------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_IMPORT_ONNXIMPORTER_H
#define MTC_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mtc {

struct ImportOptions {
  /// Values for symbolic dims (`--dim batch=32`).
  llvm::StringMap<int64_t> dims;
  /// Appends a loss to a model whose first output is logits
  /// ("cross-entropy") or predictions ("mse"); empty keeps the model's.
  std::string appendLoss;
  /// Name of the graph input added for the labels of `appendLoss`.
  std::string labelsName = "labels";
  /// Import for evaluation: Dropout is the identity and BatchNormalization
  /// uses the running statistics (and does not update them).
  bool evalMode = false;
};

/// What `mtc inspect` prints about a model.
struct OnnxSummary {
  struct Tensor {
    std::string name;
    std::string type; ///< e.g. "float32[batch, 784]"
  };
  std::vector<Tensor> inputs, outputs;
  int64_t opset = 0;
  int64_t parameterCount = 0, parameterBytes = 0;
  int64_t initializerCount = 0;
  /// op type -> number of nodes, sorted by op type.
  std::vector<std::pair<std::string, int64_t>> histogram;
  /// (op type, node name) of nodes the importer does not support.
  std::vector<std::pair<std::string, std::string>> unsupported;
};

/// An inference ONNX model the trainer fills with its trained weights.
struct InferenceTemplate {
  /// The serialized model; the weights' raw bytes are zero.
  std::string bytes;
  struct Weight {
    std::string name;
    uint64_t offset = 0; ///< of the raw float32 data in `bytes`
    uint64_t size = 0;
  };
  std::vector<Weight> weights;
};

/// Builds the inference model of `path` for `trainer --export`: dropout
/// becomes Identity, BatchNormalization uses its running statistics, and
/// the loss output (the first, unless `options.appendLoss` added it) and
/// the nodes and inputs only it needed are removed. The float initializers
/// named in `weights` get placeholder data whose offsets are recorded.
llvm::Expected<InferenceTemplate>
buildInferenceTemplate(llvm::StringRef path, const ImportOptions &options,
                       const std::vector<std::string> &weights);

/// Reads and checks a model and summarizes it without importing it.
llvm::Expected<OnnxSummary> summarizeOnnxFile(llvm::StringRef path,
                                              const ImportOptions &options);

/// Reads, checks (onnx::checker, shape inference) and imports an ONNX model
/// into a module holding `func.func @forward`: graph inputs then
/// initializers as arguments (`mtc.role` "input" / "param" with `mtc.init`),
/// graph outputs as results, all named by their ONNX names.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(mlir::MLIRContext &context, llvm::StringRef path,
               const ImportOptions &options);

/// The ONNX op types the importer accepts, sorted.
std::vector<std::string> getSupportedOnnxOps();

} // namespace mtc

#endif // MTC_IMPORT_ONNXIMPORTER_H
