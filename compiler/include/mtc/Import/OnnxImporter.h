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
};

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
