//===- Driver.h - Pieces of the mtc command-line driver ---------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DRIVER_DRIVER_H
#define MTC_DRIVER_DRIVER_H

#include "mtc/Codegen/EmitTrainer.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mtc {

/// Parses a memory size: plain bytes or a number with a unit, decimal (KB,
/// MB, GB, TB; K, M, G, T alike) or binary (KiB, MiB, GiB, TiB).
llvm::Expected<uint64_t> parseMemorySize(llvm::StringRef text);

/// "1.50 GiB (1610612736 bytes)" style rendering.
std::string formatBytes(uint64_t bytes);

/// What the planned step needs, read off the planned IR.
struct MemoryReport {
  uint64_t totalBytes = 0;
  uint64_t arenaBytes = 0;
  uint64_t lowerBoundBytes = 0;
  uint64_t parameterBytes = 0;
  /// 16-bit copies of parameters kept beside them (--precision bf16/fp16).
  uint64_t parameterCopyBytes = 0;
  uint64_t bufferBytes = 0;
  /// Compiled-in initializers the step reads no more: not in the arena
  /// (the program's initial-value data holds them).
  uint64_t compiledInOnlyBytes = 0;
  /// Frozen weights that the step and the evaluation read only through
  /// their 16-bit copies: not in the arena (the trainer keeps them on the
  /// host, for --load, --save and --export).
  uint64_t hostWeightBytes = 0;
  uint64_t inputBytes = 0;
  uint64_t gradientBytes = 0;
  uint64_t optimizerStateBytes = 0;
  uint64_t activationPeakBytes = 0;
  uint64_t workspacePeakBytes = 0;
  uint64_t constantBytes = 0;
  uint64_t forwardFlops = 0;
  uint64_t backwardFlops = 0;
  uint64_t optimizerFlops = 0;
  uint64_t recomputeFlops = 0;
  std::optional<uint64_t> budgetBytes;
  int64_t numParameters = 0;
  int64_t parameterElements = 0;
  /// Fused attention ops of the forward pass, and those whose mask the
  /// compiler made their causal flag.
  int64_t fusedAttentions = 0, causalAttentions = 0;
  /// Initializers whose values the step depends on (mtc.compiled_in: the
  /// buffers of causal masks; parameters in a --forward-only program).
  std::vector<std::string> compiledInBuffers;

  /// Bytes live at each op of the step, by what they hold.
  struct TimelinePoint {
    std::string op; ///< op name and ONNX node, for the reader
    bool backward = false;
    uint64_t parameters = 0, gradients = 0, optimizerState = 0,
             activations = 0, temporaries = 0, other = 0;
    uint64_t total() const {
      return parameters + gradients + optimizerState + activations +
             temporaries + other;
    }
  };
  std::vector<TimelinePoint> timeline;
};

/// Computes the report of the planned @train_step in `module`.
llvm::Expected<MemoryReport>
computeMemoryReport(mlir::ModuleOp module,
                    llvm::StringRef function = "train_step");

void writeReportJson(const MemoryReport &report, llvm::raw_ostream &os);
/// Memory over the schedule as a stacked area chart (SVG).
void writeTimelineSvg(const MemoryReport &report, llvm::raw_ostream &os);
void printReportTable(const MemoryReport &report, llvm::raw_ostream &os);

/// Adds `@eval_step` to `module`, made from `evalModule` (the same model
/// imported in evaluation mode): the loss and, for a cross-entropy loss, the
/// number of correct predictions of a batch.
llvm::Error addEvalFunction(mlir::ModuleOp module, mlir::ModuleOp evalModule);

/// How `mtc compile` builds the generated source into an executable.
struct BuildOptions {
  Target target = Target::Cpu;
  std::string arch = "sm_80";
  /// Output executable; the sources are written beside it.
  std::string output;
  bool verbose = false;
};

/// Whether the toolchain for `target` is available; the reason otherwise.
llvm::Error checkToolchain(Target target);

/// Writes the generated source and initial values beside the output and
/// runs the host (or CUDA) compiler to produce the trainer.
llvm::Error buildTrainer(const std::string &source,
                         const std::vector<InitTensor> &inits,
                         const BuildOptions &options,
                         const std::string *exportModel = nullptr);

} // namespace mtc

#endif // MTC_DRIVER_DRIVER_H
