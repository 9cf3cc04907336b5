//===- Passes.h - mtc passes and pipelines ----------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_PASSES_PASSES_H
#define MTC_PASSES_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <string>

namespace mtc {

#define GEN_PASS_DECL
#include "mtc/Passes/Passes.h.inc"

/// Options of the training pipeline (`mtc compile` flags map onto these).
struct TrainPipelineOptions {
  AutodiffPassOptions autodiff;
  OptimizerPassOptions optimizer;
  PrecisionPassOptions precision;
  RematPassOptions remat;
  /// Elementwise fusion (`mtc compile --no-fusion` turns it off).
  bool fusion = true;
  /// Fused attention (`mtc compile --no-flash-attention` turns it off).
  bool flashAttention = true;
  MemoryPlanPassOptions memoryPlan;
};

/// import output -> attention fusion -> autodiff -> cse -> optimizer ->
/// precision -> remat -> elementwise fusion -> memory plan.
void buildTrainPipeline(mlir::OpPassManager &pm,
                        const TrainPipelineOptions &options);

/// Its first half: attention fusion -> autodiff -> cse -> optimizer ->
/// precision.
void buildDifferentiatePipeline(mlir::OpPassManager &pm,
                                const TrainPipelineOptions &options);

/// Its second half: remat -> fusion -> memory plan (run once per budget
/// tried).
void buildPlacePipeline(mlir::OpPassManager &pm,
                        const TrainPipelineOptions &options);

/// Registers the passes and the `mtc-train-pipeline` pipeline.
void registerMtcPassesAndPipelines();

#define GEN_PASS_REGISTRATION
#include "mtc/Passes/Passes.h.inc"

} // namespace mtc

#endif // MTC_PASSES_PASSES_H
