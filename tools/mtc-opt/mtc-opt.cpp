//===- mtc-opt.cpp - Runs mtc passes on MLIR files -------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcDialect.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerTransformsPasses();
  mtc::registerMtcPassesAndPipelines();
  mlir::DialectRegistry registry;
  registry.insert<mtc::MtcDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mtc optimizer driver\n", registry));
}
