//===- EmitTrainer.h - Trainer source from a planned step -------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_CODEGEN_EMITTRAINER_H
#define MTC_CODEGEN_EMITTRAINER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mtc {

enum class Target { Cpu, Cuda };

/// A tensor whose initial value the trainer embeds (parameters, buffers,
/// constants), in the order of the trainer's tensor table.
struct InitTensor {
  std::string name;
  bool isFloat = true;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  bool isBool = false;
};

/// Where the trained weights go in the exported inference model
/// (`trainer --export`): initializer name -> byte offset.
struct ExportLayout {
  std::vector<std::pair<std::string, uint64_t>> weights;
};

/// Emits the trainer's source (C++ for the CPU, CUDA C++ for the GPU) for the
/// planned `@train_step` of `module`, and collects the initial values the
/// trainer needs. `modelName` appears in the banner and comments.
llvm::Error emitTrainerSource(mlir::ModuleOp module, Target target,
                              llvm::StringRef modelName, llvm::raw_ostream &os,
                              std::vector<InitTensor> &inits,
                              const ExportLayout *exportLayout = nullptr);

} // namespace mtc

#endif // MTC_CODEGEN_EMITTRAINER_H
