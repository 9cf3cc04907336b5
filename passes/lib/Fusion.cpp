//===- Fusion.cpp - Elementwise chains as single kernels ------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs after recomputation is decided and before the memory plan. A run is
// a sequence of consecutive elementwise ops of one phase (forward, backward,
// recomputation, optimizer) whose results all have one shape, each reading
// a value of the run. A run of two or more ops becomes one mtc.fused op
// whose results are the run's values read outside it (its last value, and
// e.g. an activation the backward pass reads), at the last op's place: one
// loop that loads the inputs once per element, keeps the other
// intermediates in registers and stores only the results, so those need
// no memory and no extra pass over it.
//
// Consecutive ops only: the fused op runs where the run's last op ran, so
// no input is read later than before (no lifetime grows, and an input an
// in-place update overwrites later is still read before it), and every
// reader of a result comes after the run.
//
// Consecutive optimizer updates of one kind with the same hyperparameters
// (all of them at the end of the step under loss scaling, --keep-grads or
// accumulation; runs of them otherwise) are marked as one multi-tensor
// update: one kernel over all their tensors instead of one per parameter.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mtc {
#define GEN_PASS_DEF_FUSIONPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

/// Elementwise ops with one floating-point result whose operands broadcast
/// to it: what the code generator can compose into one loop.
bool isFusable(Operation *op) {
  if (!isa<ReluOp, TanhOp, SigmoidOp, ExpOp, LogOp, NegOp, SqrtOp, ErfOp,
           ConvertOp, AddOp, SubOp, MulOp, DivOp, ReluGradOp, ExpandOp,
           ClipOp, ClipGradOp, SelectOp, DropoutOp, DropoutGradOp>(op))
    return false;
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  return isa<FloatType>(type.getElementType());
}

/// Attributes that place an op in the step; a group shares them.
constexpr llvm::StringLiteral kPhaseAttrs[] = {
    attr::kBackward, attr::kRecompute, attr::kOptimizer,
    attr::kLastMicroBatch};

bool samePhase(Operation *a, Operation *b) {
  for (StringRef name : kPhaseAttrs)
    if (a->hasAttr(name) != b->hasAttr(name))
      return false;
  return true;
}

class FusionPass : public mtc::impl::FusionPassBase<FusionPass> {
public:
  using FusionPassBase::FusionPassBase;

  void runOnOperation() override {
    for (StringRef name : {"train_step", attr::kEvalFunction.data(),
                           "forward"})
      if (auto func = getOperation().lookupSymbol<func::FuncOp>(name))
        fuse(func);
  }

private:
  void fuse(func::FuncOp func);
  /// Whether `op` continues `run` (consecutive ops ending right before it):
  /// same shape and phase, and it reads a value of the run.
  bool continuesRun(ArrayRef<Operation *> run, Operation *op);
  /// Replaces a run by one mtc.fused op.
  void build(ArrayRef<Operation *> group);
  /// Marks runs of consecutive optimizer updates alike (kUpdateGroup),
  /// which the code generator emits as one multi-tensor update.
  void groupUpdates(func::FuncOp func);
};

bool FusionPass::continuesRun(ArrayRef<Operation *> run, Operation *op) {
  if (cast<ShapedType>(op->getResult(0).getType()).getShape() !=
          cast<ShapedType>(run.back()->getResult(0).getType()).getShape() ||
      !samePhase(run.front(), op))
    return false;
  return llvm::any_of(op->getOperands(), [&](Value v) {
    return v.getDefiningOp() && llvm::is_contained(run, v.getDefiningOp());
  });
}

void FusionPass::build(ArrayRef<Operation *> group) {
  Operation *last = group.back();
  llvm::SetVector<Value> inputs;
  for (Operation *member : group)
    for (Value v : member->getOperands())
      if (!v.getDefiningOp() || !llvm::is_contained(group, v.getDefiningOp()))
        inputs.insert(v);
  // Results: every value read outside the group, in op order.
  SmallVector<Value> outputs;
  for (Operation *member : group)
    if (llvm::any_of(member->getResult(0).getUsers(), [&](Operation *u) {
          return !llvm::is_contained(group, u);
        }))
      outputs.push_back(member->getResult(0));

  OpBuilder b(last);
  auto fused = b.create<FusedOp>(last->getLoc(),
                                 ValueRange(outputs).getTypes(),
                                 inputs.getArrayRef());
  for (StringRef name : kPhaseAttrs)
    if (Attribute a = last->getAttr(name))
      fused->setAttr(name, a);
  Block *body = b.createBlock(&fused.getBody());
  IRMapping map;
  for (Value v : inputs)
    map.map(v, body->addArgument(v.getType(), v.getLoc()));
  for (Operation *member : group) {
    Operation *clone = b.clone(*member, map);
    // Placement attributes belong to the fused op.
    for (StringRef name : kPhaseAttrs)
      clone->removeAttr(name);
  }
  SmallVector<Value> yielded;
  for (Value v : outputs)
    yielded.push_back(map.lookup(v));
  b.create<YieldOp>(last->getLoc(), yielded);
  for (auto [v, r] : llvm::zip(outputs, fused.getOutputs()))
    v.replaceAllUsesWith(r);
  for (Operation *member : llvm::reverse(group))
    member->erase();
  ++numFused;
  numFusedOps += group.size();
}

void FusionPass::fuse(func::FuncOp func) {
  SmallVector<SmallVector<Operation *>> runs;
  SmallVector<Operation *> run;
  auto close = [&] {
    if (run.size() >= 2)
      runs.push_back(run);
    run.clear();
  };
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (isFusable(&op) && !run.empty() && continuesRun(run, &op)) {
      run.push_back(&op);
      continue;
    }
    close();
    if (isFusable(&op))
      run.push_back(&op);
  }
  close();
  for (ArrayRef<Operation *> group : runs)
    build(group);
  groupUpdates(func);
}

/// The loss-scaling status an optimizer update reads (null without one),
/// or failure for other ops.
static FailureOr<Value> updateStatus(Operation *op) {
  return llvm::TypeSwitch<Operation *, FailureOr<Value>>(op)
      .Case<SgdUpdateOp, SgdMomentumUpdateOp, AdamWUpdateOp>(
          [](auto u) -> FailureOr<Value> { return u.getGradStatus(); })
      .Default([](Operation *) { return failure(); });
}

/// Whether two updates can share one multi-tensor update: the same kind,
/// hyperparameters, loss-scaling status and place in the step.
static bool sameUpdate(Operation *a, Operation *b) {
  return a->getName() == b->getName() &&
         a->getAttrDictionary() == b->getAttrDictionary() &&
         *updateStatus(a) == *updateStatus(b);
}

void FusionPass::groupUpdates(func::FuncOp func) {
  SmallVector<Operation *> run;
  auto close = [&] {
    if (run.size() >= 2) {
      run.front()->setAttr(
          attr::kUpdateGroup,
          IntegerAttr::get(IntegerType::get(func.getContext(), 64),
                           run.size()));
      ++numUpdateGroups;
    }
    run.clear();
  };
  for (Operation &op : func.getBody().front().without_terminator()) {
    bool update = succeeded(updateStatus(&op));
    if (!update || (!run.empty() && !sameUpdate(run.front(), &op)))
      close();
    if (update)
      run.push_back(&op);
  }
  close();
}

} // namespace
