//===- Optimizer.cpp - In-place optimizer updates -------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace mtc {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

class OptimizerPass : public mtc::impl::OptimizerPassBase<OptimizerPass> {
public:
  using OptimizerPassBase::OptimizerPassBase;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!func) {
      getOperation().emitError("no @train_step: run --mtc-autodiff first");
      return signalPassFailure();
    }
    if (failed(verifyOptions(func)) || failed(addUpdates(func)))
      return signalPassFailure();
  }

private:
  LogicalResult verifyOptions(func::FuncOp func);
  LogicalResult addUpdates(func::FuncOp func);
  /// Moves each update right after the last op that defines or reads one of
  /// its operands (other than itself).
  void scheduleEarly(func::FuncOp func);
  /// Appends a zero-initialized state argument `<param>.<slot>`.
  BlockArgument addState(func::FuncOp func, unsigned param, StringRef slot,
                         StringRef role = attr::role::kState);
};

/// The `loss_scale` argument autodiff seeds the backward pass with, if any.
BlockArgument lossScaleArgument(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (auto role = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      attr::kRole);
        role && role.getValue() == attr::role::kLossScale)
      return arg;
  return nullptr;
}

LogicalResult OptimizerPass::verifyOptions(func::FuncOp func) {
  if (optimizer != "sgd" && optimizer != "adamw")
    return func.emitError() << "unknown optimizer '" << optimizer
                            << "' (expected sgd or adamw)";
  if (lr < 0 || momentum < 0 || weightDecay < 0 || eps < 0)
    return func.emitError("lr, momentum, weight decay and eps must be >= 0");
  if (optimizer == "sgd" && nesterov && momentum <= 0)
    return func.emitError("Nesterov momentum requires momentum > 0");
  if (optimizer == "adamw" &&
      (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1))
    return func.emitError("AdamW betas must lie in [0, 1)");
  if (accumulate < 1)
    return func.emitError("accumulate must be at least 1");
  if (!(lossScaleInit > 0) || !std::isfinite(double(lossScaleInit)) ||
      !(lossScaleGrowth >= 1) || !(lossScaleBackoff > 0) ||
      !(lossScaleBackoff <= 1) || lossScaleInterval < 1)
    return func.emitError(
        "loss scaling needs an initial scale > 0, growth >= 1, backoff in "
        "(0, 1] and an interval of at least 1 step");
  return success();
}

BlockArgument OptimizerPass::addState(func::FuncOp func, unsigned param,
                                      StringRef slot, StringRef role) {
  OpBuilder b(func);
  unsigned index = func.getNumArguments();
  auto name = func.getArgAttrOfType<StringAttr>(param, attr::kName);
  NamedAttribute attrs[] = {
      b.getNamedAttr(attr::kRole, b.getStringAttr(role)),
      b.getNamedAttr(attr::kOwner, b.getI64IntegerAttr(param)),
      b.getNamedAttr(attr::kName,
                     b.getStringAttr((name ? name.getValue() : StringRef()) +
                                     "." + slot))};
  Type type = func.getArgument(param).getType();
  (void)func.insertArgument(index, type, b.getDictionaryAttr(attrs),
                            func.getArgument(param).getLoc());
  return func.getArgument(index);
}

LogicalResult OptimizerPass::addUpdates(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  SmallVector<Value> results(ret.getOperands());
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    resultAttrs.push_back(func.getResultAttrDict(i)
                              ? func.getResultAttrDict(i)
                              : b.getDictionaryAttr({}));
  auto tied = [&](Value v, unsigned arg) {
    results.push_back(v);
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attr::kRole, b.getStringAttr(attr::role::kUpdate)),
         b.getNamedAttr(attr::kTied, b.getI64IntegerAttr(arg))}));
  };

  // The gradient each update consumes (the accumulated mean under
  // accumulation), by parameter argument.
  SmallVector<std::pair<unsigned, Value>> consumed;
  unsigned numGrads = func.getNumResults();
  for (unsigned i = 0; i < numGrads; ++i) {
    auto role = func.getResultAttrOfType<StringAttr>(i, attr::kRole);
    if (!role || role.getValue() != attr::role::kGrad)
      continue;
    auto owner = func.getResultAttrOfType<IntegerAttr>(i, attr::kOwner);
    unsigned p = owner.getInt();
    Value grad = ret.getOperand(i);
    if (accumulate > 1) {
      BlockArgument acc =
          addState(func, p, "grad_accum", attr::role::kAccumulator);
      auto accumulated = b.create<AccumulateGradOp>(
          func.getArgument(p).getLoc(), grad.getType(), acc, grad,
          b.getI64IntegerAttr(accumulate));
      accumulated->setAttr(attr::kOptimizer, b.getUnitAttr());
      grad = accumulated;
      // The reported gradient is the accumulated mean.
      results[i] = grad;
      tied(grad, acc.getArgNumber());
    }
    consumed.push_back({p, grad});
  }

  // Loss scaling: one check of every gradient before any update.
  Value status;
  if (BlockArgument scale = lossScaleArgument(func)) {
    SmallVector<Value> grads;
    for (auto [p, grad] : consumed)
      grads.push_back(grad);
    auto check = b.create<GradCheckOp>(scale.getLoc(), scale, grads);
    check->setAttr(attr::kBackward, b.getUnitAttr());
    if (accumulate > 1)
      check->setAttr(attr::kLastMicroBatch, b.getUnitAttr());
    status = check;
    results.push_back(status);
    resultAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr(
        attr::kRole, b.getStringAttr(attr::role::kGradStatus))}));
    func->setAttr(
        attr::kLossScaling,
        b.getDictionaryAttr(
            {b.getNamedAttr("init", b.getF64FloatAttr(lossScaleInit)),
             b.getNamedAttr("growth", b.getF64FloatAttr(lossScaleGrowth)),
             b.getNamedAttr("backoff", b.getF64FloatAttr(lossScaleBackoff)),
             b.getNamedAttr("interval",
                            b.getI64IntegerAttr(lossScaleInterval))}));
  }

  FloatAttr lrAttr = b.getF64FloatAttr(lr);
  FloatAttr wdAttr = b.getF64FloatAttr(weightDecay);
  for (auto [p, grad] : consumed) {
    Value param = func.getArgument(p);
    Location loc = param.getLoc();
    Operation *update;
    if (optimizer == "adamw") {
      BlockArgument m = addState(func, p, "exp_avg");
      BlockArgument v = addState(func, p, "exp_avg_sq");
      update = b.create<AdamWUpdateOp>(
          loc, TypeRange{param.getType(), param.getType(), param.getType()},
          param, grad, m, v, status, /*param16=*/Value(), lrAttr,
          b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
          b.getF64FloatAttr(eps), wdAttr);
      tied(update->getResult(0), p);
      tied(update->getResult(1), m.getArgNumber());
      tied(update->getResult(2), v.getArgNumber());
    } else if (momentum > 0) {
      BlockArgument buf = addState(func, p, "momentum");
      update = b.create<SgdMomentumUpdateOp>(
          loc, TypeRange{param.getType(), param.getType()}, param, grad, buf,
          status, lrAttr, b.getF64FloatAttr(momentum), wdAttr,
          b.getBoolAttr(nesterov));
      tied(update->getResult(0), p);
      tied(update->getResult(1), buf.getArgNumber());
    } else {
      update = b.create<SgdUpdateOp>(loc, param.getType(), param, grad, status,
                                     lrAttr, wdAttr);
      tied(update->getResult(0), p);
    }
    update->setAttr(attr::kOptimizer, b.getUnitAttr());
    if (accumulate > 1)
      update->setAttr(attr::kLastMicroBatch, b.getUnitAttr());
  }
  if (accumulate > 1)
    func->setAttr(attr::kAccumulate, b.getI64IntegerAttr(accumulate));
  if (accumulate == 1 && !keepGrads) {
    // Release gradients early: they stop being results, and each update
    // moves up to just after the last op its operands need.
    SmallVector<Value> kept;
    SmallVector<DictionaryAttr> keptAttrs;
    for (auto [v, attrs] : llvm::zip(results, resultAttrs)) {
      auto role = attrs.getAs<StringAttr>(attr::kRole);
      if (role && role.getValue() == attr::role::kGrad)
        continue;
      kept.push_back(v);
      keptAttrs.push_back(attrs);
    }
    results = std::move(kept);
    resultAttrs = std::move(keptAttrs);
  }
  b.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  func.setType(b.getFunctionType(func.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  func.setAllResultAttrs(resultAttrs);
  if (accumulate == 1 && !keepGrads)
    scheduleEarly(func);

  std::string summary;
  llvm::raw_string_ostream os(summary);
  if (optimizer == "adamw")
    os << llvm::format("AdamW(lr=%g, betas=(%g, %g), eps=%g, weight_decay=%g)",
                       double(lr), double(beta1), double(beta2), double(eps),
                       double(weightDecay));
  else
    os << llvm::format("SGD(lr=%g, momentum=%g, nesterov=%s, "
                       "weight_decay=%g)",
                       double(lr), double(momentum),
                       nesterov ? "true" : "false", double(weightDecay));
  func->setAttr(attr::kOptimizerSummary, b.getStringAttr(summary));
  return success();
}

void OptimizerPass::scheduleEarly(func::FuncOp func) {
  Block &body = func.getBody().front();
  SmallVector<Operation *> updates;
  for (Operation &op : body)
    if (op.hasAttr(attr::kOptimizer))
      updates.push_back(&op);
  for (Operation *update : updates) {
    // The latest op (in block order) the update must follow.
    Operation *after = nullptr;
    auto later = [&](Operation *op) {
      if (op && op != update && op->getBlock() == &body &&
          !isa<func::ReturnOp>(op) &&
          (!after || after->isBeforeInBlock(op)))
        after = op;
    };
    for (Value operand : update->getOperands()) {
      later(operand.getDefiningOp());
      for (Operation *user : operand.getUsers())
        later(user);
    }
    if (after)
      update->moveAfter(after);
    else
      update->moveBefore(&body.front());
  }
}

} // namespace
