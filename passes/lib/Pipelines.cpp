//===- Pipelines.cpp - The training pipeline ------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mtc::buildDifferentiatePipeline(OpPassManager &pm,
                                     const TrainPipelineOptions &options) {
  pm.addPass(createConvTapsPass());
  pm.addPass(createLayerNormFusionPass());
  if (options.flashAttention)
    pm.addPass(createAttentionFusionPass());
  pm.addPass(createAutodiffPass(options.autodiff));
  // Gradient rules create many identical scalar constants.
  pm.addPass(createCSEPass());
  pm.addPass(createOptimizerPass(options.optimizer));
  pm.addPass(createPrecisionPass(options.precision));
}

void mtc::buildPlacePipeline(OpPassManager &pm,
                             const TrainPipelineOptions &options) {
  pm.addPass(createRematPass(options.remat));
  if (options.fusion)
    pm.addPass(createFusionPass());
  pm.addPass(createMemoryPlanPass(options.memoryPlan));
}

void mtc::buildTrainPipeline(OpPassManager &pm,
                             const TrainPipelineOptions &options) {
  buildDifferentiatePipeline(pm, options);
  buildPlacePipeline(pm, options);
}

void mtc::registerMtcPassesAndPipelines() {
  registerMtcPasses();
  PassPipelineRegistration<>(
      "mtc-train-pipeline",
      "Autodiff, CSE, SGD updates and the memory plan with default options",
      [](OpPassManager &pm) { buildTrainPipeline(pm, {}); });
}
