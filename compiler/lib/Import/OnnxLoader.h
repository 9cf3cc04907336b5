//===- OnnxLoader.h - Reading and checking ONNX files -----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The only part of mtc that talks to libonnx's checker and shape inference,
// which report errors by throwing; OnnxLoader.cpp is built with exceptions and
// turns them into llvm::Error.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_IMPORT_ONNXLOADER_H
#define MTC_IMPORT_ONNXLOADER_H

#include "mtc/Import/OnnxImporter.h"

#include <onnx/onnx_pb.h>

#include <memory>

namespace mtc {

/// Parses `path`, inlines external data (only from inside the model's
/// folder), binds symbolic input dims, runs the checker and shape inference.
llvm::Expected<std::unique_ptr<onnx::ModelProto>>
loadOnnxModel(llvm::StringRef path, const ImportOptions &options,
              bool bindAllDims = true);

} // namespace mtc

#endif // MTC_IMPORT_ONNXLOADER_H
