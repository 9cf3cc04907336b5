//===- Autodiff.cpp - Reverse-mode differentiation of @forward ------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/GlobPattern.h"

namespace mtc {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

/// Operands through which a gradient may flow. Ops without a rule count as
/// differentiable so that a missing rule is reported, not silently skipped.
bool flowsThrough(Operation *op, unsigned index) {
  if (!isFloatTensor(op->getOperand(index)))
    return false;
  if (auto grad = dyn_cast<GradientOpInterface>(op))
    return grad.isDifferentiableOperand(index);
  return true;
}

class AutodiffPass : public mtc::impl::AutodiffPassBase<AutodiffPass> {
public:
  using AutodiffPassBase::AutodiffPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func) {
      module.emitError() << "no function @" << function << " to differentiate";
      return signalPassFailure();
    }
    if (failed(applyFreezing(func)) || failed(differentiate(func)))
      return signalPassFailure();
  }

private:
  LogicalResult differentiate(func::FuncOp func);
  /// Turns the parameters `freeze`/`train` exclude into buffers.
  LogicalResult applyFreezing(func::FuncOp func);
};

LogicalResult AutodiffPass::applyFreezing(func::FuncOp func) {
  auto compile = [&](ArrayRef<std::string> patterns, StringRef flag,
                     SmallVectorImpl<llvm::GlobPattern> &out) -> LogicalResult {
    for (const std::string &p : patterns) {
      auto glob = llvm::GlobPattern::create(p);
      if (!glob) {
        llvm::consumeError(glob.takeError());
        return func.emitError() << "invalid " << flag << " pattern '" << p
                                << "'";
      }
      out.push_back(std::move(*glob));
    }
    return success();
  };
  SmallVector<llvm::GlobPattern> frozen, trained;
  if (failed(compile(freeze, "--freeze", frozen)) ||
      failed(compile(train, "--train", trained)))
    return failure();
  SmallVector<bool> frozenUsed(frozen.size()), trainedUsed(trained.size());
  Builder b(func.getContext());
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto role = func.getArgAttrOfType<StringAttr>(i, attr::kRole);
    auto name = func.getArgAttrOfType<StringAttr>(i, attr::kName);
    if (!role || role.getValue() != attr::role::kParam || !name)
      continue;
    bool keep = trained.empty();
    for (auto [j, glob] : llvm::enumerate(trained))
      if (glob.match(name.getValue()))
        keep = trainedUsed[j] = true;
    for (auto [j, glob] : llvm::enumerate(frozen))
      if (glob.match(name.getValue())) {
        keep = false;
        frozenUsed[j] = true;
      }
    if (!keep)
      func.setArgAttr(i, attr::kRole, b.getStringAttr(attr::role::kBuffer));
  }
  for (auto [j, used] : llvm::enumerate(frozenUsed))
    if (!used)
      return func.emitError() << "--freeze '" << freeze[j]
                              << "' matches no parameter";
  for (auto [j, used] : llvm::enumerate(trainedUsed))
    if (!used)
      return func.emitError() << "--train '" << train[j]
                              << "' matches no parameter";
  return success();
}

LogicalResult AutodiffPass::differentiate(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() == 0)
    return func.emitError("the model has no outputs; its first output must "
                          "be the scalar loss");
  Value loss = ret.getOperand(0);
  auto lossType = cast<RankedTensorType>(loss.getType());
  if (lossType.getRank() != 0 || !isa<FloatType>(lossType.getElementType())) {
    auto name = func.getResultAttrOfType<StringAttr>(0, attr::kName);
    return func.emitError()
           << "the first output '" << (name ? name.getValue() : "")
           << "' must be the scalar float loss, but it is " << lossType
           << "; export the model with the loss as its first output, or "
              "append one with --loss";
  }

  // Active ops: reachable from a parameter and reaching the loss, both
  // through differentiable operands only.
  DenseSet<Value> varied;
  for (BlockArgument arg : body.getArguments()) {
    auto role = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  attr::kRole);
    if (role && role.getValue() == attr::role::kParam && isFloatTensor(arg))
      varied.insert(arg);
  }
  for (Operation &op : body.without_terminator())
    for (OpOperand &use : op.getOpOperands())
      if (varied.contains(use.get()) &&
          flowsThrough(&op, use.getOperandNumber())) {
        for (Value result : op.getResults())
          if (isFloatTensor(result))
            varied.insert(result);
        break;
      }
  DenseSet<Value> useful{loss};
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (llvm::none_of(op.getResults(),
                      [&](Value r) { return useful.contains(r); }))
      continue;
    for (OpOperand &use : op.getOpOperands())
      if (flowsThrough(&op, use.getOperandNumber()))
        useful.insert(use.get());
  }
  auto active = [&](Value v) {
    return varied.contains(v) && useful.contains(v);
  };

  // Reverse sweep. The backward ops go before the return, in reverse order of
  // their forward ops.
  OpBuilder builder(ret);
  DenseMap<Value, Value> grads;
  auto accumulate = [&](Value target, Value grad, Location loc) {
    auto [it, inserted] = grads.try_emplace(target, grad);
    if (inserted)
      return;
    auto type = cast<RankedTensorType>(grad.getType());
    if (type.getElementType().isF32()) {
      it->second = builder.create<AddOp>(loc, it->second, grad);
      return;
    }
    // Low-precision gradients add in float32 and round once, as PyTorch's
    // half-precision add does.
    auto wide = type.clone(builder.getF32Type());
    Value sum = builder.create<AddOp>(
        loc, builder.create<ConvertOp>(loc, wide, it->second),
        builder.create<ConvertOp>(loc, wide, grad));
    it->second = builder.create<ConvertOp>(loc, type, sum);
  };
  Operation *lastForward = ret->getPrevNode();
  auto seedType = RankedTensorType::get({}, lossType.getElementType());
  if (lossScaling) {
    // The trainer writes the scale before each step.
    unsigned index = func.getNumArguments();
    NamedAttribute attrs[] = {
        builder.getNamedAttr(attr::kRole,
                             builder.getStringAttr(attr::role::kLossScale)),
        builder.getNamedAttr(attr::kName, builder.getStringAttr("loss_scale"))};
    (void)func.insertArgument(index, seedType,
                              builder.getDictionaryAttr(attrs), loss.getLoc());
    grads[loss] = func.getArgument(index);
  } else {
    grads[loss] = builder.create<ConstantOp>(
        loss.getLoc(), DenseElementsAttr::get(seedType, 1.0f));
  }

  SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator())
    forwardOps.push_back(&op);
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (llvm::none_of(op->getResults(), active))
      continue;
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(grads.lookup(r));
      any |= static_cast<bool>(resultGrads.back());
    }
    if (!any)
      continue;
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (!rule)
      return op->emitOpError("has no gradient rule but lies between a "
                             "parameter and the loss");
    SmallVector<Value> operandGrads;
    if (failed(rule.buildGradient(builder, resultGrads, operandGrads)))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError("gradient rule returned ")
             << operandGrads.size() << " gradients for "
             << op->getNumOperands() << " operands";
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad && active(operand))
        accumulate(operand, grad, op->getLoc());
  }
  for (Operation *op = lastForward ? lastForward->getNextNode()
                                   : &body.front();
       op != ret; op = op->getNextNode())
    op->setAttr(attr::kBackward, builder.getUnitAttr());

  // New signature: (loss, grad of each trained parameter).
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs;
  resultAttrs.push_back(builder.getDictionaryAttr(
      {builder.getNamedAttr(attr::kRole,
                            builder.getStringAttr(attr::role::kLoss)),
       builder.getNamedAttr(attr::kName,
                            func.getResultAttr(0, attr::kName)
                                ? func.getResultAttr(0, attr::kName)
                                : builder.getStringAttr("loss"))}));
  for (BlockArgument arg : body.getArguments()) {
    unsigned index = arg.getArgNumber();
    auto role = func.getArgAttrOfType<StringAttr>(index, attr::kRole);
    if (!role || role.getValue() != attr::role::kParam)
      continue;
    Value grad = grads.lookup(arg);
    if (!grad) {
      // Nothing differentiable reaches the loss from it: a buffer.
      func.setArgAttr(index, attr::kRole,
                      builder.getStringAttr(attr::role::kBuffer));
      continue;
    }
    auto name = func.getArgAttrOfType<StringAttr>(index, attr::kName);
    results.push_back(grad);
    resultAttrs.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr(attr::kRole,
                              builder.getStringAttr(attr::role::kGrad)),
         builder.getNamedAttr(attr::kOwner, builder.getI64IntegerAttr(index)),
         builder.getNamedAttr(
             attr::kName,
             builder.getStringAttr(
                 (name ? name.getValue() : StringRef("")) + ".grad"))}));
  }
  // Buffers the forward updates in place (BatchNorm running statistics)
  // stay results of the step, tied to their arguments.
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    auto role = func.getResultAttrOfType<StringAttr>(i, attr::kRole);
    if (!role || role.getValue() != attr::role::kUpdate)
      continue;
    results.push_back(ret.getOperand(i));
    resultAttrs.push_back(func.getResultAttrDict(i));
  }
  builder.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                       ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
  func.setSymName("train_step");

  // Drop forward computations that only fed the discarded outputs.
  eraseDeadPureOps(body);
  return success();
}

} // namespace
