//===- Precision.cpp - GEMMs on 16-bit operands ---------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs after autodiff and the optimizer, so the gradient rules never see
// 16-bit values and every GEMM of the step, forward and backward, gets the
// same treatment: its operands are converted (mtc.convert, round to nearest
// even) to bfloat16 or float16, the product accumulates in float32 and the
// result stays float32. A value is converted once, right before its first
// GEMM; later GEMMs read the same copy. So a parameter is converted once per
// step (before its update overwrites it), and an activation that a backward
// GEMM needs is kept in 16 bits while its float32 original can die after
// its last forward use.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mtc {
#define GEN_PASS_DEF_PRECISIONPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

class PrecisionPass : public mtc::impl::PrecisionPassBase<PrecisionPass> {
public:
  using PrecisionPassBase::PrecisionPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    Type low;
    if (precision == "bf16")
      low = b.getBF16Type();
    else if (precision == "fp16")
      low = b.getF16Type();
    else if (precision != "fp32") {
      module.emitError() << "unknown precision '" << precision
                         << "' (expected fp32, bf16 or fp16)";
      return signalPassFailure();
    }
    if (!low)
      return;
    for (StringRef name : {"train_step", attr::kEvalFunction.data()})
      if (auto func = module.lookupSymbol<func::FuncOp>(name))
        convertGemmOperands(func, low);
  }

private:
  void convertGemmOperands(func::FuncOp func, Type low);
};

void PrecisionPass::convertGemmOperands(func::FuncOp func, Type low) {
  DenseMap<Value, Value> copies;
  auto narrow = [&](Operation *user, OpOperand &operand) {
    Value v = operand.get();
    auto type = cast<RankedTensorType>(v.getType());
    if (!type.getElementType().isF32())
      return;
    Value &copy = copies[v];
    if (!copy) {
      OpBuilder b(user);
      auto convert = b.create<ConvertOp>(user->getLoc(), type.clone(low), v);
      if (user->hasAttr(attr::kBackward))
        convert->setAttr(attr::kBackward, b.getUnitAttr());
      copy = convert;
    }
    operand.set(copy);
  };
  func.walk([&](Operation *op) {
    if (isa<GemmOp, MatMulOp>(op)) {
      narrow(op, op->getOpOperand(0));
      narrow(op, op->getOpOperand(1));
    }
  });
}

} // namespace
