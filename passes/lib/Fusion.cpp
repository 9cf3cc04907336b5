//===- Fusion.cpp - Elementwise chains as single kernels ------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs after recomputation is decided and before the memory plan. A run is
// a sequence of consecutive elementwise ops of one phase (forward, backward,
// recomputation, optimizer) whose results all have one shape (ops that do
// not read each other included). A run of two or more ops becomes one
// mtc.fused op whose results are the run's values read outside it (its last
// value, and e.g. an activation the backward pass reads), at the last op's
// place: one
// loop that loads the inputs once per element, keeps the other
// intermediates in registers and stores only the results, so those need
// no memory and no extra pass over it.
//
// Consecutive ops only: the fused op runs where the run's last op ran, so
// no input is read later than before (no lifetime grows, and an input an
// in-place update overwrites later is still read before it), and every
// reader of a result comes after the run. An op derived from the step's
// arguments alone (a constant, a weight's transpose or 16-bit copy) that
// stands between two parts of a run moves before it.
//
// Forward values the backward kernels can compute again from what they read
// anyway are recomputed there instead of stored (see recomputeSaved).
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
#include "mtc/runtime/Random.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/CSE.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <array>
#include <cmath>
#include <functional>
#include <map>

namespace mtc {
#define GEN_PASS_DEF_FUSIONPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<ShapedType>(v.getType()).getShape();
}

/// The longest run fused into one kernel: enough for any chain the models
/// produce, short enough to keep a kernel's registers in check.
constexpr size_t kMaxRunOps = 48;

/// The most ops a consumer kernel recomputes to avoid reading one saved
/// value.
constexpr size_t kMaxRecomputedOps = 12;

/// Whether `op` may run before a run instead of in its middle: it derives
/// from the step's arguments alone (a constant, a weight's transpose or
/// 16-bit copy; `aside` holds the ops already moved) and writes nothing in
/// place, so no read moves across a write (every op in between belongs to
/// the run).
bool canStepAside(Operation *op, ArrayRef<Operation *> aside) {
  if (op->getNumRegions() ||
      isa<SgdUpdateOp, SgdMomentumUpdateOp, AdamWUpdateOp, AccumulateGradOp>(
          op))
    return false;
  return llvm::all_of(op->getOperands(), [&](Value v) {
    Operation *def = v.getDefiningOp();
    return !def || isa<ConstantOp>(def) || llvm::is_contained(aside, def);
  });
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
  FusedOp build(ArrayRef<Operation *> group);
  /// Lets backward kernels recompute the forward values they read instead
  /// of keeping them (see recomputeSaved's comment).
  void recomputeSaved(func::FuncOp func);
  /// Folds a linear layer's bias add into its GEMM, and the sum of its
  /// bias gradient into its weight-gradient GEMM (see formEpilogues).
  void formEpilogues(func::FuncOp func);
  /// Folds the fused kernels computing GELU and its gradient into the
  /// GEMMs computing their inputs (see formGeluEpilogues).
  void formGeluEpilogues(func::FuncOp func);
  /// Folds the 16-bit conversions of a layer norm's, transpose's,
  /// concat's or attention's result into the op, widenings of a 16-bit
  /// value into the layer norm or attention backward reading it, and the
  /// narrowing of attention gradients into the attention backward.
  void foldConversions(func::FuncOp func);
  /// Marks runs of consecutive optimizer updates alike (kUpdateGroup),
  /// which the code generator emits as one multi-tensor update.
  void groupUpdates(func::FuncOp func);
  /// Marks layer norms that run in the kernel of the fused op computing
  /// their input (kRowEpilogue).
  void markRowEpilogues(func::FuncOp func);
  /// Turns sums of zero pads that place their inputs side by side into
  /// concats (see formConcats).
  void formConcats(func::FuncOp func);
  /// Marks slices and transposes whose readers can read them through
  /// strides (kStridedView; see formStridedViews).
  void formStridedViews(func::FuncOp func);
  /// Marks concats of attention gradients that the attention backward
  /// writes into the concat's result (kWrittenInPlace; see
  /// writeConcatsInPlace).
  void writeConcatsInPlace(func::FuncOp func);
  /// Computes a softmax cross-entropy and its gradient in one op (see
  /// formLossWithGrad).
  void formLossWithGrad(func::FuncOp func);
  /// Computes a softmax cross-entropy whose log-probabilities nothing reads
  /// without them (see formLossOnly).
  void formLossOnly(func::FuncOp func);
  /// Folds ReLU / clip into the batch normalization before them, and their
  /// gradients into the batch normalization backward after them.
  void foldNormActivations(func::FuncOp func);
  /// Folds a residual block's sum and ReLU into the batch normalization
  /// computing one term (see foldNormResiduals).
  void foldNormResiduals(func::FuncOp func);
};

/// Whether `op` reads a result of an op of `run`.
bool readsRun(Operation *op, ArrayRef<Operation *> run) {
  return llvm::any_of(op->getOperands(), [&](Value v) {
    return v.getDefiningOp() && llvm::is_contained(run, v.getDefiningOp());
  });
}

bool FusionPass::continuesRun(ArrayRef<Operation *> run, Operation *op) {
  return run.size() < kMaxRunOps &&
         shapeOf(op->getResult(0)) == shapeOf(run.back()->getResult(0)) &&
         samePhase(run.front(), op);
}

FusedOp FusionPass::build(ArrayRef<Operation *> group) {
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
  return fused;
}

void FusionPass::fuse(func::FuncOp func) {
  formLossWithGrad(func);
  formLossOnly(func);
  foldNormActivations(func);
  formConcats(func);
  formEpilogues(func);
  foldConversions(func);
  SmallVector<SmallVector<Operation *>> runs;
  SmallVector<Operation *> run;
  auto close = [&] {
    if (run.size() >= 2)
      runs.push_back(run);
    run.clear();
  };
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  auto continues = [&](Operation *op) {
    return !run.empty() && isFusableElementwise(op) && continuesRun(run, op);
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    // Ops between two parts of a run that do not read it step aside
    // (before it) so that it goes on: a constant, or a weight's transpose
    // and 16-bit copy between a chain and the conversion of its result.
    size_t next = i;
    while (!run.empty() && next < ops.size() && !continues(ops[next]) &&
           canStepAside(ops[next], ArrayRef(ops).slice(i, next - i)))
      ++next;
    if (next > i && next < ops.size() && continues(ops[next])) {
      for (; i < next; ++i)
        ops[i]->moveBefore(run.front());
    }
    // An op that ends the run but one reading the run's values right after
    // it, and not its results, would continue it (the 16-bit copy of a
    // residual sum that a layer norm, or a pooling, reads in float32): that
    // reader moves before it, into the run, rather than run as a kernel of
    // its own reading the value back.
    if (!continues(ops[i]) && i + 1 < ops.size() && continues(ops[i + 1]) &&
        readsRun(ops[i + 1], run) &&
        llvm::none_of(ops[i + 1]->getOperands(),
                      [&](Value v) { return v.getDefiningOp() == ops[i]; })) {
      ops[i + 1]->moveBefore(ops[i]);
      std::swap(ops[i], ops[i + 1]);
    }
    if (continues(ops[i])) {
      run.push_back(ops[i]);
      continue;
    }
    close();
    if (isFusableElementwise(ops[i]))
      run.push_back(ops[i]);
  }
  close();
  for (ArrayRef<Operation *> group : runs)
    build(group);
  recomputeSaved(func);
  formGeluEpilogues(func);
  foldNormResiduals(func);
  groupUpdates(func);
  markRowEpilogues(func);
  formStridedViews(func);
  writeConcatsInPlace(func);
}

/// softmax_cross_entropy over [N, C] logits (mean or sum) whose
/// log-probabilities only its softmax_cross_entropy_grad reads, with the
/// gradient's 16-bit conversion when that is the gradient's one reader,
/// becomes one softmax_cross_entropy_with_grad where the loss was: the
/// log-probabilities (and the float32 gradient) are never stored, and the
/// logits are read twice instead of five times. Its incoming gradient must
/// be an argument or a constant (then moved before the loss).
void FusionPass::formLossWithGrad(func::FuncOp func) {
  SmallVector<SoftmaxCrossEntropyOp> losses;
  func.walk([&](SoftmaxCrossEntropyOp op) { losses.push_back(op); });
  for (SoftmaxCrossEntropyOp loss : losses) {
    Value logProb = loss.getLogProb();
    if (shapeOf(loss.getLogits()).size() != 2 || loss.getReduction() == "none" ||
        !logProb.hasOneUse())
      continue;
    auto grad = dyn_cast<SoftmaxCrossEntropyGradOp>(*logProb.user_begin());
    if (!grad || grad.getLabels() != loss.getLabels() ||
        grad.getReduction() != loss.getReduction() ||
        grad.getIgnoreIndexAttr() != loss.getIgnoreIndexAttr())
      continue;
    Value dloss = grad.getGrad();
    Operation *seed = dloss.getDefiningOp();
    if (seed && !isa<ConstantOp>(seed))
      continue;
    Value dlogits = grad.getOutput();
    auto convert = dlogits.hasOneUse()
                       ? dyn_cast<ConvertOp>(*dlogits.user_begin())
                       : ConvertOp();
    if (convert && !isa<BFloat16Type, Float16Type>(
                       getElementTypeOrSelf(convert.getOutput().getType())))
      convert = ConvertOp();
    if (seed && !seed->isBeforeInBlock(loss))
      seed->moveBefore(loss);
    OpBuilder b(loss);
    Type dlogitsType = convert ? convert.getType() : dlogits.getType();
    auto fused = b.create<SoftmaxCrossEntropyWithGradOp>(
        loss.getLoc(), TypeRange{loss.getLoss().getType(), dlogitsType},
        loss.getLogits(), loss.getLabels(), dloss, loss.getReductionAttr(),
        loss.getIgnoreIndexAttr());
    // It starts the backward pass: its gradient is the big result.
    fused->setAttr(attr::kBackward, b.getUnitAttr());
    loss.getLoss().replaceAllUsesWith(fused.getLoss());
    if (convert) {
      convert.getOutput().replaceAllUsesWith(fused.getDlogits());
      convert.erase();
    } else {
      dlogits.replaceAllUsesWith(fused.getDlogits());
    }
    grad.erase();
    loss.erase();
    ++numLossWithGrad;
  }
}

/// softmax_cross_entropy over [N, C] logits (mean or sum) whose
/// log-probabilities nothing reads (evaluation) becomes
/// softmax_cross_entropy_loss: the [N, C] log-probabilities, as large as
/// the logits, are neither written nor planned.
void FusionPass::formLossOnly(func::FuncOp func) {
  SmallVector<SoftmaxCrossEntropyOp> losses;
  func.walk([&](SoftmaxCrossEntropyOp op) { losses.push_back(op); });
  for (SoftmaxCrossEntropyOp loss : losses) {
    if (shapeOf(loss.getLogits()).size() != 2 ||
        loss.getReduction() == "none" || !loss.getLogProb().use_empty())
      continue;
    OpBuilder b(loss);
    auto alone = b.create<SoftmaxCrossEntropyLossOp>(
        loss.getLoc(), loss.getLoss().getType(), loss.getLogits(),
        loss.getLabels(), loss.getReductionAttr(), loss.getIgnoreIndexAttr());
    for (StringRef name : kPhaseAttrs)
      if (Attribute a = loss->getAttr(name))
        alone->setAttr(name, a);
    loss.getLoss().replaceAllUsesWith(alone.getLoss());
    loss.erase();
    ++numLossOnly;
  }
}

/// A batch normalization whose output only a relu or clip reads computes the
/// activation itself (`activation`): the normalized values are never
/// stored, and the activation's pass over them disappears. A relu_grad or
/// clip_grad whose result only a batch normalization backward reads as its
/// incoming gradient folds into that backward (`activation_output`, the
/// operand the gradient tested): the kernel applies it as it reads the
/// gradient, in both of its passes. Either way the numbers are the separate
/// kernels'.
void FusionPass::foldNormActivations(func::FuncOp func) {
  auto activationOf = [](Operation *op, StringAttr &kind, FloatAttr &lo,
                         FloatAttr &hi) {
    Builder b(op->getContext());
    if (isa<ReluOp, ReluGradOp>(op)) {
      kind = b.getStringAttr("relu");
      return true;
    }
    if (auto clip = dyn_cast<ClipOp>(op)) {
      kind = b.getStringAttr("clip");
      lo = clip.getMinAttr(), hi = clip.getMaxAttr();
      return true;
    }
    if (auto clip = dyn_cast<ClipGradOp>(op)) {
      kind = b.getStringAttr("clip");
      lo = clip.getMinAttr(), hi = clip.getMaxAttr();
      return true;
    }
    return false;
  };
  SmallVector<BatchNormTrainOp> norms;
  SmallVector<BatchNormTrainGradOp> grads;
  func.walk([&](Operation *op) {
    if (auto bn = dyn_cast<BatchNormTrainOp>(op))
      norms.push_back(bn);
    if (auto bg = dyn_cast<BatchNormTrainGradOp>(op))
      grads.push_back(bg);
  });
  for (BatchNormTrainOp bn : norms) {
    Value y = bn.getOutput();
    if (bn.getActivation() || !y.hasOneUse())
      continue;
    Operation *act = *y.user_begin();
    StringAttr kind;
    FloatAttr lo, hi;
    if (!isa<ReluOp, ClipOp>(act) || !samePhase(bn, act) ||
        !activationOf(act, kind, lo, hi))
      continue;
    bn.setActivationAttr(kind);
    bn.setClipMinAttr(lo);
    bn.setClipMaxAttr(hi);
    act->getResult(0).replaceAllUsesWith(y);
    act->erase();
    ++numNormActivations;
  }
  for (BatchNormTrainGradOp bg : grads) {
    Operation *act = bg.getGrad().getDefiningOp();
    StringAttr kind;
    FloatAttr lo, hi;
    if (bg.getActivation() || !act || !isa<ReluGradOp, ClipGradOp>(act) ||
        !act->getResult(0).hasOneUse() || !samePhase(bg, act) ||
        !activationOf(act, kind, lo, hi))
      continue;
    bg.getGradMutable().assign(act->getOperand(0));
    bg.getActivationOutputMutable().assign(act->getOperand(1));
    bg.setActivationAttr(kind);
    bg.setClipMinAttr(lo);
    bg.setClipMaxAttr(hi);
    act->erase();
    ++numNormActivations;
  }
}

/// The axis a zero pad pads along and its begin pad, or failure when it
/// pads along more than one axis, none, or with another value.
static FailureOr<std::pair<int64_t, int64_t>> padAxis(PadOp pad) {
  if (!pad.getValue().isZero())
    return failure();
  ArrayRef<int64_t> pads = pad.getPads();
  int64_t rank = pads.size() / 2, axis = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (pads[d] == 0 && pads[rank + d] == 0)
      continue;
    if (axis >= 0)
      return failure();
    axis = d;
  }
  if (axis < 0)
    return failure();
  return std::make_pair(axis, pads[axis]);
}

/// The gradient of slices that split a value along one axis (attention's
/// query, key and value out of one projection) arrives as a sum of zero
/// pads, each placing one slice's gradient at its place: every pad writes
/// the whole tensor and every add reads two of them. When the pads' inputs
/// tile the axis exactly, the sum is their concat: one copy of each input.
/// The adds in between must have no other reader, and all of the ops one
/// phase.
void FusionPass::formConcats(func::FuncOp func) {
  SmallVector<AddOp> adds;
  for (Operation &op : func.getBody().front())
    if (auto add = dyn_cast<AddOp>(op))
      adds.push_back(add);
  DenseSet<Operation *> erased;
  // Outermost sums first: an inner one never tiles the axis by itself.
  for (AddOp root : llvm::reverse(adds)) {
    if (erased.contains(root))
      continue;
    Type type = root.getType();
    SmallVector<PadOp> pads;
    SmallVector<AddOp> inner;
    std::function<bool(Value)> collect = [&](Value v) {
      Operation *def = v.getDefiningOp();
      if (!def || !v.hasOneUse() || v.getType() != type ||
          !samePhase(def, root))
        return false;
      if (auto add = dyn_cast<AddOp>(def)) {
        inner.push_back(add);
        return collect(add.getLhs()) && collect(add.getRhs());
      }
      auto pad = dyn_cast<PadOp>(def);
      if (!pad || getElementTypeOrSelf(pad.getInput()) !=
                      getElementTypeOrSelf(type))
        return false;
      pads.push_back(pad);
      return true;
    };
    if (!collect(root.getLhs()) || !collect(root.getRhs()))
      continue;
    // Sort by begin pad; the inputs must follow each other from 0 to the
    // end of the axis.
    SmallVector<std::pair<int64_t, PadOp>> placed;
    int64_t axis = -1;
    bool tiles = true;
    for (PadOp pad : pads) {
      FailureOr<std::pair<int64_t, int64_t>> at = padAxis(pad);
      if (failed(at) || (axis >= 0 && at->first != axis)) {
        tiles = false;
        break;
      }
      axis = at->first;
      placed.push_back({at->second, pad});
    }
    if (!tiles)
      continue;
    llvm::sort(placed, [](auto &a, auto &b) { return a.first < b.first; });
    int64_t end = 0;
    SmallVector<Value> inputs;
    for (auto [begin, pad] : placed) {
      if (begin != end)
        tiles = false;
      end += shapeOf(pad.getInput())[axis];
      inputs.push_back(pad.getInput());
    }
    if (!tiles || end != shapeOf(root.getOutput())[axis])
      continue;
    OpBuilder b(root);
    auto concat = b.create<ConcatOp>(root.getLoc(), type, inputs,
                                     b.getI64IntegerAttr(axis));
    for (StringRef name : kPhaseAttrs)
      if (Attribute a = root->getAttr(name))
        concat->setAttr(name, a);
    root.getOutput().replaceAllUsesWith(concat.getOutput());
    root.erase();
    for (AddOp add : inner) {
      erased.insert(add);
      add.erase();
    }
    for (PadOp pad : pads)
      pad.erase();
    ++numConcats;
  }
}

/// Whether every reader of `v` copies it through strides: directly, or
/// through reshapes and strided views.
static bool readByStridedCopies(Value v) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (copiesThroughStrides(use))
      continue;
    if ((isa<ReshapeOp>(user) || user->hasAttr(attr::kStridedView)) &&
        viewSource(user) == v && readByStridedCopies(user->getResult(0)))
      continue;
    return false;
  }
  return true;
}

/// Whether a copy can read `layout`: it has no more strided dims than a
/// copy takes.
static bool copyable(FailureOr<StridedLayout> layout) {
  if (failed(layout))
    return false;
  int rank = 0;
  for (const auto &dim : layout->dims)
    rank += dim.size();
  return rank <= kMaxCopyRank;
}

/// Whether the attention kernels can find the rows of `v` where they are.
static bool attentionReadable(Value v, bool seqMajor) {
  FailureOr<StridedLayout> layout = stridedLayout(v);
  return succeeded(layout) &&
         succeeded(attentionRows(*layout, shapeOf(v), seqMajor));
}

/// Whether every copy reading through `v` (a reader of v, or of a reshape
/// or view of it) can read its elements where they are, and every
/// attention reading it its rows.
static bool layoutsResolve(Value v) {
  if (!copyable(stridedLayout(v)))
    return false;
  for (Operation *user : v.getUsers()) {
    if (viewSource(user) == v) {
      if (!layoutsResolve(user->getResult(0)))
        return false;
    } else if (isa<SliceOp, TransposeOp>(user) && !copyable(layoutThrough(user))) {
      return false;
    } else if (auto a = dyn_cast<AttentionOp>(user);
               a && !attentionReadable(v, a.getSeqMajor())) {
      return false;
    } else if (auto g = dyn_cast<AttentionGradOp>(user);
               g && !attentionReadable(v, g.getSeqMajor())) {
      return false;
    }
  }
  return true;
}

/// Copies that only feed other copies are not made: a slice or transpose
/// whose readers all copy through strides (a transpose, slice, pad, concat
/// or slice_grad, directly or through reshapes) becomes a strided view of
/// its input, and those readers compose its strides into theirs. So
/// attention's query, key and value, sliced out of one projection and
/// transposed to heads, are copied once, and their gradients, transposed
/// back and concatenated, are copied once. The attention kernels read rows
/// through strides as well: sliced out of the projection and split into
/// heads where it is ([..., S, H, D], seq_major), or transposed to heads,
/// query, key and value are not copied at all. The view's input must be a
/// temporary of the step (its bytes stay as they are while
/// the view is read: the memory plan keeps them until its last reader; not
/// a result tied to an argument, which lives in the argument's buffer) and
/// of the view's element type (not a transpose storing 16 bits).
void FusionPass::formStridedViews(func::FuncOp func) {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  // A result tied to an argument is written into the argument's buffer.
  auto tied = [&](Value v) {
    for (auto [i, result] : llvm::enumerate(ret->getOperands()))
      if (result == v && func.getResultAttr(i, attr::kTied))
        return true;
    return false;
  };
  SmallVector<Operation *> candidates;
  for (Operation &op : body.without_terminator())
    if (isa<SliceOp, TransposeOp>(op))
      candidates.push_back(&op);
  // Readers first, so that a chain of copies becomes a chain of views.
  for (Operation *op : llvm::reverse(candidates)) {
    Value input = op->getOperand(0), result = op->getResult(0);
    Operation *def = input.getDefiningOp();
    if (!def || isa<ConstantOp>(def) || getNumElements(result.getType()) == 0 ||
        getElementTypeOrSelf(input) != getElementTypeOrSelf(result) ||
        !readByStridedCopies(result))
      continue;
    bool inArgument = false;
    for (Value v = input; v && !inArgument;
         v = v.getDefiningOp() ? viewSource(v.getDefiningOp()) : Value())
      inArgument = tied(v);
    if (inArgument)
      continue;
    op->setAttr(attr::kStridedView, UnitAttr::get(op->getContext()));
    if (!layoutsResolve(result)) {
      op->removeAttr(attr::kStridedView);
      continue;
    }
    ++numStridedViews;
  }
}

/// A concat of attention gradients (dQ, dK, dV back into the gradient of
/// the projection they were sliced from), each read by nothing else, through
/// reshapes only it reads: the attention backward writes them straight into
/// the concat's result through row strides, and the concat copies nothing.
/// The memory plan places each input inside the result (see
/// mtc::concatPart), whose buffer then lives from the first of them on.
/// Every input must be written by an attention backward whose rows the
/// result's layout holds (contiguous rows, one stride per dim).
void FusionPass::writeConcatsInPlace(func::FuncOp func) {
  func.walk([&](ConcatOp concat) {
    SmallVector<std::pair<Value, bool>> written; // value, seq_major
    for (Value input : concat.getInputs()) {
      Value v = input;
      while (v.hasOneUse())
        if (auto reshape = v.getDefiningOp<ReshapeOp>())
          v = reshape.getInput();
        else
          break;
      auto grad = v.getDefiningOp<AttentionGradOp>();
      if (!grad || !v.hasOneUse())
        return;
      written.push_back({v, grad.getSeqMajor()});
    }
    concat->setAttr(attr::kWrittenInPlace, UnitAttr::get(concat.getContext()));
    for (auto [v, seqMajor] : written)
      if (!attentionReadable(v, seqMajor)) {
        concat->removeAttr(attr::kWrittenInPlace);
        return;
      }
    ++numConcatsInPlace;
  });
}

/// A layer norm right after the fused op that computes its input (a
/// residual add, with a dropout, a bias or the 16-bit copies beside it)
/// runs in that op's kernel: each row is normalized as soon as it is
/// computed, from the cache, instead of read again from memory by a kernel
/// of its own. The memory plan treats the two as one kernel (see
/// mtc::numberKernels). Rows must hold whole groups of four elements (a
/// dropout draws its mask per group; CUDA threads take a group each).
void FusionPass::markRowEpilogues(func::FuncOp func) {
  SmallVector<LayerNormOp> norms;
  for (Operation &op : func.getBody().front())
    if (auto ln = dyn_cast<LayerNormOp>(op))
      norms.push_back(ln);
  for (LayerNormOp ln : norms) {
    Operation *prev = ln->getPrevNode();
    int64_t dim = cast<ShapedType>(ln.getScale().getType()).getNumElements();
    if (!prev || ln.getInput().getDefiningOp() != prev ||
        !samePhase(prev, ln) ||
        !cast<ShapedType>(ln.getInput().getType()).getElementType().isF32() ||
        dim <= 0 || dim % mtc::rt::kDropoutGroup)
      continue;
    // A lone elementwise op (a residual add) becomes a fused op of one.
    if (!isa<FusedOp>(prev)) {
      if (!isFusableElementwise(prev))
        continue;
      build({prev});
    }
    ln->setAttr(attr::kRowEpilogue, UnitAttr::get(ln->getContext()));
    ++numRowEpilogues;
  }
}

//===----------------------------------------------------------------------===//
// Recomputing saved values in the backward kernels that read them
//===----------------------------------------------------------------------===//
//
// A forward kernel stores every value the backward pass reads. When such a
// value is a cheap elementwise function of values its backward readers
// have at hand anyway (values a reader already reads or that stay alive
// past it for other readers, constants), each reader computes it again in
// registers: it is no longer stored, and its memory is free from the
// forward kernel to the backward one. GELU written out is the typical case:
// its forward kernel stored the pre-activation and three intermediates of
// the formula for the backward; it now stores the pre-activation alone, as
// PyTorch's GELU saves its input alone.
//
// A value is dropped only when every reader is a backward elementwise
// kernel that can recompute it from at most one full-size tensor it did not
// read before, so no kernel moves more bytes than it did. Dropouts are not
// recomputed. The recomputed ops are clones of the stored ones (16-bit
// values rounded alike), so the reader sees the same numbers. In 16-bit
// training the float32 original of a value may be gone while the backward
// pass reads its 16-bit copy: the reader then starts from that copy, as
// PyTorch autocast's GELU backward starts from its 16-bit input, and gets
// the stored numbers up to that rounding.

Type elementType(Value v) {
  return cast<ShapedType>(v.getType()).getElementType();
}

bool is16Bit(Value v) { return isa<BFloat16Type, Float16Type>(elementType(v)); }

/// The element type `v` is stored in: its own, or the 16-bit one it is the
/// widening of.
static Type storedType(Value v) {
  if (auto widen = v.getDefiningOp<ConvertOp>(); widen && !is16Bit(v))
    if (is16Bit(widen.getInput()))
      return elementType(widen.getInput());
  return elementType(v);
}

/// Whether `v` has a reader at `at` or after it: reading it at `at` keeps
/// it alive no longer than it is already.
static bool aliveAt(Value v, Operation *at) {
  return llvm::any_of(v.getUsers(), [&](Operation *user) {
    return user == at || at->isBeforeInBlock(user);
  });
}

/// How one reader computes a saved value again: the steps, in order (ops of
/// the function body or of fused bodies to clone, and widenings of 16-bit
/// copies), and the values of the function body they start from.
class RecomputePlan {
public:
  RecomputePlan(Operation *reader, Value saved)
      : reader(reader), saved(saved), shape(shapeOf(reader->getResult(0))) {
    feasible = add(saved);
  }

  bool isFeasible() const { return feasible && newFullSizeInputs() <= 1; }

  /// Clones the ops into `fused` (the reader, now a fused op), reading the
  /// leaves as inputs, and replaces its input `saved` by the clone.
  void apply(FusedOp fused) const;

private:
  /// One step: clone `op`, or (without one) compute `value` by widening
  /// its 16-bit copy `copy`.
  struct Step {
    Operation *op;
    Value value, copy;
  };

  bool add(Value v);
  bool addOp(Operation *op);
  /// A 16-bit copy of `v` (its conversion, or the fused op's result that
  /// yields it) alive at the reader, or null.
  Value aliveCopy(Value v) const;
  /// The value that computes `v` in the reader's body, through fused ops'
  /// results and body arguments.
  Value resolve(Value v, IRMapping &map) const;
  /// Leaves of the reader's shape the reader does not read yet.
  size_t newFullSizeInputs() const {
    return llvm::count_if(leaves, [&](Value leaf) {
      return shapeOf(leaf) == shape &&
             !llvm::is_contained(reader->getOperands(), leaf);
    });
  }

  Operation *reader;
  Value saved;
  ArrayRef<int64_t> shape;
  SmallVector<Step> steps;
  llvm::SetVector<Value> leaves;
  DenseSet<Value> seen;
  /// Body values read through their fused op's result (a leaf).
  DenseMap<Value, Value> readAs;
  bool feasible;
};

bool RecomputePlan::add(Value v) {
  if (!seen.insert(v).second)
    return true;
  Block *function = reader->getBlock();
  if (v.getParentBlock() != function) {
    // A value of a fused op's body: its input, a value it yields that is
    // alive at the reader anyway, or an op to clone.
    auto fused = cast<FusedOp>(v.getParentBlock()->getParentOp());
    if (auto arg = dyn_cast<BlockArgument>(v))
      return add(fused.getInputs()[arg.getArgNumber()]);
    for (auto [yielded, result] :
         llvm::zip(fused.getYielded(), fused.getOutputs()))
      if (yielded == v && result != saved && aliveAt(result, reader)) {
        readAs[v] = result;
        return add(result);
      }
  } else {
    Operation *def = v.getDefiningOp();
    if (v != saved &&
        ((def && isa<ConstantOp>(def)) || aliveAt(v, reader))) {
      leaves.insert(v);
      return true;
    }
  }
  if (Value copy = aliveCopy(v)) {
    if (steps.size() >= kMaxRecomputedOps || !add(copy))
      return false;
    steps.push_back({nullptr, v, copy});
    return true;
  }
  if (v.getParentBlock() != function)
    return addOp(v.getDefiningOp());
  Operation *def = v.getDefiningOp();
  if (auto fused = dyn_cast_or_null<FusedOp>(def))
    return add(fused.getYielded()[cast<OpResult>(v).getResultNumber()]);
  return def && isFusableElementwise(def) && addOp(def);
}

bool RecomputePlan::addOp(Operation *op) {
  if (isa<DropoutOp, DropoutGradOp>(op) ||
      shapeOf(op->getResult(0)) != shape || steps.size() >= kMaxRecomputedOps)
    return false;
  for (Value operand : op->getOperands())
    if (!add(operand))
      return false;
  steps.push_back({op, op->getResult(0), nullptr});
  return true;
}

Value RecomputePlan::aliveCopy(Value v) const {
  // Only where the reader reads a 16-bit value already (so it takes that
  // rounding), and for float32 values.
  if (!is16Bit(saved) || !cast<ShapedType>(v.getType()).getElementType().isF32())
    return nullptr;
  // The conversion reads `v`, or `v` as the body argument of a fused op.
  SmallVector<Operation *> users(v.getUsers());
  for (Operation *user : v.getUsers())
    if (auto fused = dyn_cast<FusedOp>(user))
      for (auto [input, arg] : llvm::zip(fused.getInputs(),
                                         fused.getBody().getArguments()))
        if (input == v)
          llvm::append_range(users, arg.getUsers());
  for (Operation *user : users) {
    auto convert = dyn_cast<ConvertOp>(user);
    if (!convert || !is16Bit(convert.getOutput()))
      continue;
    Value copy = convert.getOutput();
    if (auto fused = dyn_cast<FusedOp>(convert->getParentOp())) {
      // Inside a fused body: the copy is there when the op yields it.
      copy = nullptr;
      for (auto [yielded, result] :
           llvm::zip(fused.getYielded(), fused.getOutputs()))
        if (yielded == convert.getOutput())
          copy = result;
    }
    if (copy && copy != saved && aliveAt(copy, reader))
      return copy;
  }
  return nullptr;
}

Value RecomputePlan::resolve(Value v, IRMapping &map) const {
  if (Value mapped = map.lookupOrNull(v))
    return mapped;
  if (Value result = readAs.lookup(v))
    return resolve(result, map);
  if (auto arg = dyn_cast<BlockArgument>(v))
    return resolve(
        cast<FusedOp>(arg.getOwner()->getParentOp()).getInputs()
            [arg.getArgNumber()],
        map);
  auto fused = cast<FusedOp>(v.getDefiningOp());
  return resolve(fused.getYielded()[cast<OpResult>(v).getResultNumber()],
                 map);
}

void RecomputePlan::apply(FusedOp fused) const {
  Block &body = fused.getBody().front();
  IRMapping map;
  for (Value leaf : leaves) {
    auto inputs = fused.getInputs();
    if (auto it = llvm::find(inputs, leaf); it != inputs.end()) {
      map.map(leaf, body.getArgument(it - inputs.begin()));
      continue;
    }
    fused->insertOperands(fused->getNumOperands(), leaf);
    map.map(leaf, body.addArgument(leaf.getType(), leaf.getLoc()));
  }
  auto b = OpBuilder::atBlockBegin(&body);
  for (const Step &step : steps) {
    if (!step.op) {
      map.map(step.value,
              b.create<ConvertOp>(step.value.getLoc(), step.value.getType(),
                                  resolve(step.copy, map)));
      continue;
    }
    for (Value operand : step.op->getOperands())
      map.map(operand, resolve(operand, map));
    Operation *clone = b.clone(*step.op, map);
    for (StringRef name : kPhaseAttrs)
      clone->removeAttr(name);
  }
  Value recomputed = resolve(saved, map);
  for (unsigned i = fused->getNumOperands(); i-- > 0;)
    if (fused->getOperand(i) == saved) {
      body.getArgument(i).replaceAllUsesWith(recomputed);
      body.eraseArgument(i);
      fused->eraseOperand(i);
    }
}

/// Drops what no longer has a reader: a fused op's unused results, the
/// body ops only they needed and the inputs nothing reads; a fused or
/// elementwise op with no reader at all.
static void prune(Operation *op) {
  auto fused = dyn_cast<FusedOp>(op);
  if (op->use_empty() || !fused) {
    if (op->use_empty())
      op->erase();
    return;
  }
  SmallVector<Value> kept;
  SmallVector<Value> yielded;
  for (auto [result, value] : llvm::zip(fused.getOutputs(), fused.getYielded()))
    if (!result.use_empty()) {
      kept.push_back(result);
      yielded.push_back(value);
    }
  if (kept.size() == fused.getNumResults())
    return;
  Block &body = fused.getBody().front();
  Operation *yield = body.getTerminator();
  yield->setOperands(yielded);
  for (Operation *inner = yield->getPrevNode(); inner;) {
    Operation *prev = inner->getPrevNode();
    if (inner->use_empty())
      inner->erase();
    inner = prev;
  }
  for (unsigned i = body.getNumArguments(); i-- > 0;)
    if (body.getArgument(i).use_empty()) {
      body.eraseArgument(i);
      fused->eraseOperand(i);
    }
  OpBuilder b(fused);
  auto pruned = b.create<FusedOp>(fused.getLoc(), ValueRange(kept).getTypes(),
                                  fused.getInputs());
  pruned->setAttrs(fused->getAttrDictionary());
  pruned.getBody().takeBody(fused.getBody());
  for (auto [from, to] : llvm::zip(kept, pruned.getOutputs()))
    from.replaceAllUsesWith(to);
  fused->erase();
}

void FusionPass::recomputeSaved(func::FuncOp func) {
  Block &block = func.getBody().front();
  auto isKernel = [](Operation *op) {
    return isa<FusedOp>(op) || isFusableElementwise(op);
  };
  SmallVector<Operation *> producers;
  for (Operation &op : block.without_terminator())
    if (!op.hasAttr(attr::kBackward) && isKernel(&op))
      producers.push_back(&op);
  bool changed = false;
  for (Operation *producer : producers)
    for (Value saved : producer->getResults()) {
      llvm::SetVector<Operation *> readers(saved.getUsers().begin(),
                                           saved.getUsers().end());
      bool recomputable =
          !readers.empty() && llvm::all_of(readers, [&](Operation *reader) {
            return reader->hasAttr(attr::kBackward) && isKernel(reader) &&
                   shapeOf(reader->getResult(0)) == shapeOf(saved) &&
                   RecomputePlan(reader, saved).isFeasible();
          });
      if (!recomputable)
        continue;
      for (Operation *reader : readers) {
        FusedOp fused = dyn_cast<FusedOp>(reader);
        if (!fused)
          fused = build({reader});
        // Planned again on the fused reader (the same ops and leaves).
        RecomputePlan plan(fused, saved);
        if (plan.isFeasible())
          plan.apply(fused);
      }
      ++numRecomputed;
      changed = true;
    }
  if (!changed)
    return;
  SmallVector<Operation *> kernels;
  for (Operation &op : block.without_terminator())
    if (isKernel(&op))
      kernels.push_back(&op);
  // A reader that recomputes several saved values of one forward chain
  // (the tanh GELU's tanh and its square) holds a clone of the chain for
  // each: computed once.
  IRRewriter rewriter(func.getContext());
  DominanceInfo dominance;
  for (Operation *op : kernels)
    if (isa<FusedOp>(op))
      eliminateCommonSubExpressions(rewriter, dominance, op);
  for (Operation *op : llvm::reverse(kernels))
    prune(op);
}

//===----------------------------------------------------------------------===//
// GEMM epilogues
//===----------------------------------------------------------------------===//
//
// A linear layer is a GEMM and a bias add; its gradient a GEMM for the
// weight and a column sum of the output gradient for the bias. cuBLASLt
// adds the bias as the GEMM writes its result, and sums the gradient as
// the weight-gradient GEMM reads it, so neither needs a pass over memory
// of its own. The CPU target runs the same ops (the bias as the GEMM's
// starting value, the sums in the same entry point).

/// Whether `v` is defined before `op` (block arguments always are).
static bool definedBefore(Value v, Operation *op) {
  Operation *def = v.getDefiningOp();
  return !def || (def->getBlock() == op->getBlock() && def->isBeforeInBlock(op));
}

/// Moves the readers of `v` that run before `op` (and, in turn, their
/// readers before it) to right after `op`, in order, so that `v` can be
/// computed at `op`. Every op of the step is pure; an optimizer update that
/// writes its parameter in place only moves later, after more readers of
/// the old value, never before one.
static LogicalResult moveReadersAfter(Value v, Operation *op) {
  Block *block = op->getBlock();
  llvm::SetVector<Operation *> moved;
  SmallVector<Value> pending{v};
  while (!pending.empty()) {
    for (Operation *user : pending.pop_back_val().getUsers()) {
      if (user->getBlock() != block)
        return failure();
      if (op->isBeforeInBlock(user) || !moved.insert(user))
        continue;
      llvm::append_range(pending, user->getResults());
    }
  }
  SmallVector<Operation *> order(moved.begin(), moved.end());
  llvm::sort(order, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  Operation *after = op;
  for (Operation *m : order) {
    m->moveAfter(after);
    after = m;
  }
  return success();
}

/// Whether `v` holds the values of `t` as a GEMM reads them: `t` itself,
/// a reshape (a view), its 16-bit copy, or a chain of those.
static bool holdsValuesOf(Value v, Value t) {
  while (v != t) {
    Operation *def = v.getDefiningOp();
    if (!isa_and_nonnull<ReshapeOp, ConvertOp>(def))
      return false;
    v = def->getOperand(0);
  }
  return true;
}

void FusionPass::formEpilogues(func::FuncOp func) {
  SmallVector<MatMulOp> matmuls;
  SmallVector<ReduceSumOp> sums;
  for (Operation &op : func.getBody().front()) {
    if (auto mm = dyn_cast<MatMulOp>(op))
      matmuls.push_back(mm);
    if (auto sum = dyn_cast<ReduceSumOp>(op))
      sums.push_back(sum);
  }
  // Forward: matmul(x, W) + bias, the matmul read by the add alone.
  for (MatMulOp mm : matmuls) {
    Value y = mm.getOutput();
    if (mm.getBias() || mm.getTransposeA() || shapeOf(mm.getB()).size() != 2 ||
        !y.hasOneUse())
      continue;
    auto add = dyn_cast<AddOp>(*y.user_begin());
    if (!add || add.getLhs() == add.getRhs() || !samePhase(mm, add) ||
        add.getType() != y.getType())
      continue;
    Value bias = add.getLhs() == y ? add.getRhs() : add.getLhs();
    auto biasType = cast<RankedTensorType>(bias.getType());
    if (biasType.getShape() != ArrayRef<int64_t>{shapeOf(y).back()} ||
        !biasType.getElementType().isF32() || !definedBefore(bias, mm))
      continue;
    mm.getBiasMutable().assign(bias);
    add.replaceAllUsesWith(y);
    add.erase();
    ++numBiasEpilogues;
  }
  // A layer norm's input gradient plus the residual connection's other
  // gradient: the layer norm backward adds it as it writes (accumulate).
  // Likewise a gather's gradient plus another gradient of the same table
  // (a tied embedding's output projection): the gather backward sums its
  // rows and adds them to it, in place, instead of scattering into a
  // zeroed table that the add then reads with it. Both compute what the
  // add did, bit for bit (float32 addition commutes).
  SmallVector<AddOp> adds;
  for (Operation &op : func.getBody().front())
    if (auto add = dyn_cast<AddOp>(op))
      adds.push_back(add);
  for (AddOp add : adds) {
    for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                               std::pair(add.getRhs(), add.getLhs())}) {
      Operation *grad = mine.getDefiningOp();
      auto norm = dyn_cast_or_null<LayerNormGradOp>(grad);
      auto gather = dyn_cast_or_null<GatherGradOp>(grad);
      if ((!norm || mine != norm.getInputGrad() || norm.getAccumulate()) &&
          (!gather || gather.getAccumulate()))
        continue;
      if (!mine.hasOneUse() || other.getType() != mine.getType() ||
          add.getType() != mine.getType() || !samePhase(grad, add) ||
          !definedBefore(other, grad))
        continue;
      if (norm)
        norm.getAccumulateMutable().assign(other);
      else
        gather.getAccumulateMutable().assign(other);
      add.replaceAllUsesWith(mine);
      add.erase();
      ++numAccumulateEpilogues;
      break;
    }
  }
  // Backward: the sum of dY over every axis but the last, next to a 2-D
  // GEMM that reads dY (or its view or 16-bit copy) with the summed axes
  // as its inner dimension: the weight gradient.
  for (ReduceSumOp sum : sums) {
    Value dy = sum.getInput();
    ArrayRef<int64_t> shape = shapeOf(dy);
    int64_t rank = shape.size();
    if (rank < 2 || sum.getAxes() != ArrayRef(llvm::to_vector(
                                          llvm::seq<int64_t>(0, rank - 1))))
      continue;
    int64_t n = shape.back(),
            k = cast<ShapedType>(dy.getType()).getNumElements() / n;
    // The GEMM may read another reshape of the value the sum reads (a 3-D
    // gradient flattened once for the sum and once for its 16-bit copy):
    // both keep the elements in order and the last dim, so its rows are
    // the ones summed.
    Value values = dy;
    while (auto reshape = values.getDefiningOp<ReshapeOp>())
      values = reshape.getInput();
    MatMulOp gemm;
    bool sumA = false;
    for (MatMulOp mm : matmuls) {
      if (!mm || mm.getBias() || shapeOf(mm.getA()).size() != 2 ||
          shapeOf(mm.getB()).size() != 2 || !samePhase(mm, sum))
        continue;
      if (!mm.getTransposeB() &&
          shapeOf(mm.getB()) == ArrayRef<int64_t>{k, n} &&
          holdsValuesOf(mm.getB(), values)) {
        gemm = mm;
        sumA = false;
        break;
      }
      if (mm.getTransposeA() && shapeOf(mm.getA()) == ArrayRef<int64_t>{k, n} &&
          holdsValuesOf(mm.getA(), values)) {
        gemm = mm;
        sumA = true;
        break;
      }
    }
    if (!gemm || failed(moveReadersAfter(sum.getOutput(), gemm)))
      continue;
    OpBuilder b(gemm);
    auto gradType = RankedTensorType::get({n}, b.getF32Type());
    auto fused = b.create<MatMulBiasGradOp>(
        gemm.getLoc(), TypeRange{gemm.getType(), gradType}, gemm.getA(),
        gemm.getB(), gemm.getTransposeAAttr(), gemm.getTransposeBAttr(),
        b.getBoolAttr(sumA));
    for (NamedAttribute attr : gemm->getDiscardableAttrs())
      fused->setAttr(attr.getName(), attr.getValue());
    Value grad = fused.getBiasGrad();
    if (sum.getType() != gradType)
      grad = b.create<ReshapeOp>(gemm.getLoc(), sum.getType(), grad);
    if (Operation *reshape = grad.getDefiningOp<ReshapeOp>())
      for (StringRef name : kPhaseAttrs)
        if (Attribute value = gemm->getAttr(name))
          reshape->setAttr(name, value);
    sum.replaceAllUsesWith(grad);
    gemm.replaceAllUsesWith(fused.getOutput());
    *llvm::find(matmuls, gemm) = MatMulOp();
    sum.erase();
    gemm.erase();
    // The views only the sum read go too: the gradient's other readers may
    // then be its narrowing alone, which its producer stores itself (see
    // foldConversions).
    for (Value v = dy; v.use_empty();) {
      auto reshape = v.getDefiningOp<ReshapeOp>();
      if (!reshape)
        break;
      v = reshape.getInput();
      reshape.erase();
    }
    ++numBiasGradEpilogues;
  }
}

//===----------------------------------------------------------------------===//
// GELU epilogues
//===----------------------------------------------------------------------===//
//
// GELU's tanh form, 0.5 x (1 + tanh(c1 x + c3 x^3)) with c1 = sqrt(2/pi)
// and c3 = 0.044715 c1, reaches the fusion pass in as many spellings as
// there are models (the factors in any order, x^3 as a product, its
// derivative as autodiff's chain of products). A fused kernel's body is
// read as a polynomial in x (the GEMM's result), g (the incoming gradient)
// and t = tanh(c1 x + c3 x^3); the kernel is GELU when the polynomial is
// 0.5 x + 0.5 x t, and GELU's gradient when it is g times
//   0.5 + 0.5 t + 0.5 c1 x + 1.5 c3 x^3 - 0.5 c1 x t^2 - 1.5 c3 x^3 t^2.
// cuBLASLt computes both as the GEMM writes its result (its GELU_AUX and
// DGELU epilogues), so GELU's input and output are written once and its
// gradient is never stored before the multiply.

namespace {

/// Exponents of x, g and t.
using Monomial = std::array<int, 3>;
using Polynomial = std::map<Monomial, double>;

/// Terms a body may build up before it is no GELU of interest.
constexpr size_t kMaxTerms = 32;

Polynomial polyConstant(double c) { return {{Monomial{0, 0, 0}, c}}; }

Polynomial polyAdd(const Polynomial &a, const Polynomial &b, double sign) {
  Polynomial r = a;
  for (auto [m, c] : b)
    r[m] += sign * c;
  return r;
}

Polynomial polyMul(const Polynomial &a, const Polynomial &b) {
  Polynomial r;
  for (auto [ma, ca] : a)
    for (auto [mb, cb] : b)
      r[{ma[0] + mb[0], ma[1] + mb[1], ma[2] + mb[2]}] += ca * cb;
  return r;
}

/// Whether a and b agree to float32's precision, coefficient by
/// coefficient (the model's constants are float32).
bool polyEqual(const Polynomial &a, const Polynomial &b) {
  Polynomial d = polyAdd(a, b, -1.0);
  for (auto [m, c] : d) {
    double scale = std::max(std::abs(a.count(m) ? a.at(m) : 0.0),
                            std::abs(b.count(m) ? b.at(m) : 0.0));
    if (std::abs(c) > 1e-5 * scale + 1e-12)
      return false;
  }
  return true;
}

/// Reads the values of a fused kernel's body as polynomials (see above).
class GeluReader {
public:
  GeluReader(FusedOp fused, int xArg, int gArg)
      : fused(fused), xArg(xArg), gArg(gArg) {}

  std::optional<Polynomial> read(Value v) {
    auto it = memo.find(v);
    if (it != memo.end())
      return it->second;
    std::optional<Polynomial> p = compute(v);
    if (p && p->size() > kMaxTerms)
      p.reset();
    memo[v] = p;
    return p;
  }

  /// c1 and c3 of the tanh read, if any.
  double c1 = 0.0, c3 = 0.0;

private:
  std::optional<Polynomial> compute(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      int i = arg.getArgNumber();
      if (i == xArg)
        return Polynomial{{Monomial{1, 0, 0}, 1.0}};
      if (i == gArg)
        return Polynomial{{Monomial{0, 1, 0}, 1.0}};
      auto constant = fused.getInputs()[i].getDefiningOp<ConstantOp>();
      auto dense =
          constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
      if (!dense || !dense.isSplat() || !dense.getElementType().isF32() ||
          cast<ShapedType>(dense.getType()).getNumElements() != 1)
        return std::nullopt;
      return polyConstant(dense.getSplatValue<APFloat>().convertToDouble());
    }
    Operation *op = v.getDefiningOp();
    auto binary =
        [&](Value lhs,
            Value rhs) -> std::optional<std::pair<Polynomial, Polynomial>> {
      std::optional<Polynomial> a = read(lhs), b = read(rhs);
      if (!a || !b)
        return std::nullopt;
      return std::pair(*a, *b);
    };
    if (auto add = dyn_cast<AddOp>(op)) {
      if (auto ab = binary(add.getLhs(), add.getRhs()))
        return polyAdd(ab->first, ab->second, 1.0);
      return std::nullopt;
    }
    if (auto sub = dyn_cast<SubOp>(op)) {
      if (auto ab = binary(sub.getLhs(), sub.getRhs()))
        return polyAdd(ab->first, ab->second, -1.0);
      return std::nullopt;
    }
    if (auto mul = dyn_cast<MulOp>(op)) {
      if (auto ab = binary(mul.getLhs(), mul.getRhs()))
        return polyMul(ab->first, ab->second);
      return std::nullopt;
    }
    if (auto div = dyn_cast<DivOp>(op)) {
      auto ab = binary(div.getLhs(), div.getRhs());
      if (!ab || ab->second.size() != 1 ||
          ab->second.begin()->first != Monomial{0, 0, 0} ||
          ab->second.begin()->second == 0.0)
        return std::nullopt;
      return polyMul(ab->first, polyConstant(1.0 / ab->second.begin()->second));
    }
    if (auto neg = dyn_cast<NegOp>(op)) {
      if (std::optional<Polynomial> a = read(neg.getInput()))
        return polyMul(*a, polyConstant(-1.0));
      return std::nullopt;
    }
    // Widening a 16-bit value is exact. A narrowing in the middle is
    // autocast rounding each op of a GELU written out op by op (Hugging
    // Face's gelu_new under bf16): the epilogue computes GELU in float32
    // throughout and rounds once, as PyTorch's own GELU kernel does.
    if (auto convert = dyn_cast<ConvertOp>(op))
      return read(convert.getInput());
    if (auto tanh = dyn_cast<TanhOp>(op)) {
      std::optional<Polynomial> u = read(tanh.getInput());
      if (!u || u->size() != 2 || !u->count({1, 0, 0}) || !u->count({3, 0, 0}))
        return std::nullopt;
      double a = u->at({1, 0, 0}), b = u->at({3, 0, 0});
      // sqrt(2/pi) and 0.044715 as float32 constants give them.
      if (std::abs(a / 0.7978845608028654 - 1.0) > 1e-5 ||
          std::abs(b / a / 0.044715 - 1.0) > 1e-5)
        return std::nullopt;
      if (c1 != 0.0 && (a != c1 || b != c3))
        return std::nullopt;
      c1 = a;
      c3 = b;
      return Polynomial{{Monomial{0, 0, 1}, 1.0}};
    }
    return std::nullopt;
  }

  FusedOp fused;
  int xArg, gArg;
  llvm::DenseMap<Value, std::optional<Polynomial>> memo;
};

/// The value a fused kernel yields, without the narrowing to its result's
/// type that the epilogue does as it stores.
Value yieldedValue(FusedOp fused) {
  if (fused.getNumResults() != 1)
    return nullptr;
  auto yield = cast<YieldOp>(fused.getBody().front().getTerminator());
  Value v = yield.getOperand(0);
  if (auto convert = v.getDefiningOp<ConvertOp>();
      convert && getElementTypeOrSelf(convert.getInput().getType()).isF32())
    v = convert.getInput();
  return v;
}

/// `v` without the reshapes (views) that produce it.
Value throughReshapes(Value v) {
  while (auto reshape = v.getDefiningOp<ReshapeOp>())
    v = reshape.getInput();
  return v;
}

/// A GEMM an epilogue can join: rows of `a` times a 2-D weight, as stored
/// (`element`), float32 sums.
bool geluGemm(MatMulOp mm, Type element) {
  return mm && !mm.getTransposeA() && shapeOf(mm.getB()).size() == 2 &&
         getElementTypeOrSelf(mm.getA().getType()) == element &&
         getElementTypeOrSelf(mm.getB().getType()) == element &&
         (getElementTypeOrSelf(mm.getType()).isF32() ||
          getElementTypeOrSelf(mm.getType()) == element);
}

/// Whether every reader of `v` but `except` (through views) runs in the
/// backward pass: those may read the GELU input as stored, as autocast's
/// backward reads the 16-bit input it saved.
bool readLaterOnly(Value v, Operation *except) {
  for (Operation *user : v.getUsers()) {
    if (user == except || user->hasAttr(attr::kBackward) ||
        user->hasAttr(attr::kRecompute))
      continue;
    auto reshape = dyn_cast<ReshapeOp>(user);
    if (!reshape || !readLaterOnly(reshape.getOutput(), except))
      return false;
  }
  return true;
}

/// `v` as `type` (same elements): itself or a reshape at the builder's
/// place, with `phase`'s placement attributes.
Value reshapedTo(OpBuilder &b, Value v, Type type, Operation *phase) {
  if (v.getType() == type)
    return v;
  auto reshape = b.create<ReshapeOp>(v.getLoc(), type, v);
  for (StringRef name : kPhaseAttrs)
    if (Attribute value = phase->getAttr(name))
      reshape->setAttr(name, value);
  return reshape;
}

/// Whether `v`, and each view it is of, has one reader: a kernel reading
/// it is the only one that reads what it is a view of.
bool readOnlyHere(Value v) {
  for (;;) {
    if (!v.hasOneUse())
      return false;
    auto reshape = v.getDefiningOp<ReshapeOp>();
    if (!reshape)
      return true;
    v = reshape.getInput();
  }
}

/// Erases the producers of `values` that nothing reads any more (views,
/// conversions and constants), and in turn those of what they read.
void eraseDeadProducers(ArrayRef<Value> values) {
  SmallVector<Operation *> work;
  for (Value v : values)
    if (Operation *def = v.getDefiningOp())
      work.push_back(def);
  llvm::DenseSet<Operation *> erased;
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (erased.contains(op) || !isa<ReshapeOp, ConvertOp, ConstantOp>(op) ||
        !op->use_empty())
      continue;
    Operation *input =
        op->getNumOperands() ? op->getOperand(0).getDefiningOp() : nullptr;
    erased.insert(op);
    op->erase();
    if (input)
      work.push_back(input);
  }
}

} // namespace

void FusionPass::formGeluEpilogues(func::FuncOp func) {
  SmallVector<FusedOp> kernels;
  for (Operation &op : func.getBody().front())
    if (auto fused = dyn_cast<FusedOp>(op))
      kernels.push_back(fused);
  Polynomial gelu = {{Monomial{1, 0, 0}, 0.5}, {Monomial{1, 0, 1}, 0.5}};
  // Forward: GELU of a linear layer's result (or a view of it), every other
  // input a constant.
  for (FusedOp &fused : kernels) {
    Value yielded = yieldedValue(fused);
    if (!yielded)
      continue;
    Type element = getElementTypeOrSelf(fused.getResult(0).getType());
    SmallVector<Value> inputs(fused.getInputs());
    for (auto [i, input] : llvm::enumerate(inputs)) {
      auto mm = throughReshapes(input).getDefiningOp<MatMulOp>();
      // A GEMM storing float32 sums keeps them for its other forward
      // readers; the epilogue would store them in 16 bits.
      // GELU of each element of the result (a kernel's input may also be
      // broadcast to its shape).
      if (!geluGemm(mm, element) || !samePhase(mm, fused) ||
          shapeOf(input) != shapeOf(fused.getResult(0)) ||
          (mm.getType() !=
               RankedTensorType::get(shapeOf(mm.getOutput()), element) &&
           !readLaterOnly(mm.getOutput(), fused)))
        continue;
      GeluReader reader(fused, i, -1);
      std::optional<Polynomial> p = reader.read(yielded);
      if (!p || !polyEqual(*p, gelu))
        continue;
      OpBuilder b(mm);
      auto type = RankedTensorType::get(shapeOf(mm.getOutput()), element);
      auto epilogue = b.create<MatMulGeluOp>(mm.getLoc(), TypeRange{type, type},
                                             mm.getA(), mm.getB(), mm.getBias(),
                                             mm.getTransposeBAttr());
      for (NamedAttribute attr : mm->getDiscardableAttrs())
        epilogue->setAttr(attr.getName(), attr.getValue());
      // What else reads the sums (the backward pass) reads the stored
      // GELU input, widened when the GEMM stored float32 sums. (A GEMM
      // that rounded its sums to 16 bits gave GELU the rounded values; the
      // epilogue gives it the float32 sums and stores them rounded.)
      Value pre = epilogue.getPre();
      if (pre.getType() != mm.getType()) {
        auto widen = b.create<ConvertOp>(mm.getLoc(), mm.getType(), pre);
        for (StringRef name : kPhaseAttrs)
          if (Attribute value = mm->getAttr(name))
            widen->setAttr(name, value);
        pre = widen;
      }
      b.setInsertionPoint(fused);
      fused.getResult(0).replaceAllUsesWith(reshapedTo(
          b, epilogue.getOutput(), fused.getResult(0).getType(), fused));
      fused.erase();
      fused = FusedOp();
      eraseDeadProducers(inputs);
      mm.getOutput().replaceAllUsesWith(pre);
      mm.erase();
      eraseDeadProducers(pre);
      ++numGeluEpilogues;
      break;
    }
  }
  // Backward: the gradient of GELU's output, computed by a GEMM that
  // nothing else reads, times GELU's derivative at a stored GELU input.
  for (FusedOp fused : kernels) {
    if (!fused)
      continue;
    Value yielded = yieldedValue(fused);
    if (!yielded)
      continue;
    Type element = getElementTypeOrSelf(fused.getResult(0).getType());
    ValueRange inputs = fused.getInputs();
    int gArg = -1, xArg = -1;
    MatMulOp dmm;
    MatMulGeluOp forward;
    for (auto [i, input] : llvm::enumerate(inputs)) {
      Value source = throughReshapes(input);
      auto mm = source.getDefiningOp<MatMulOp>();
      if (gArg < 0 && geluGemm(mm, element) && !mm.getBias() &&
          samePhase(mm, fused) && readOnlyHere(input)) {
        gArg = i;
        dmm = mm;
        continue;
      }
      while (auto convert = source.getDefiningOp<ConvertOp>())
        source = throughReshapes(convert.getInput());
      auto gemm = source.getDefiningOp<MatMulGeluOp>();
      if (xArg < 0 && gemm && source == gemm.getPre() &&
          getElementTypeOrSelf(source.getType()) == element) {
        xArg = i;
        forward = gemm;
      }
    }
    if (gArg < 0 || xArg < 0 || !forward->isBeforeInBlock(dmm) ||
        shapeOf(inputs[gArg]) != shapeOf(fused.getResult(0)) ||
        shapeOf(inputs[xArg]) != shapeOf(fused.getResult(0)) ||
        cast<ShapedType>(dmm.getType()).getNumElements() !=
            cast<ShapedType>(forward.getPre().getType()).getNumElements() ||
        shapeOf(dmm.getOutput()).back() != shapeOf(forward.getPre()).back())
      continue;
    GeluReader reader(fused, xArg, gArg);
    std::optional<Polynomial> p = reader.read(yielded);
    if (!p || reader.c1 == 0.0)
      continue;
    double c1 = reader.c1, c3 = reader.c3;
    Polynomial derivative = {
        {Monomial{0, 1, 0}, 0.5},       {Monomial{0, 1, 1}, 0.5},
        {Monomial{1, 1, 0}, 0.5 * c1},  {Monomial{3, 1, 0}, 1.5 * c3},
        {Monomial{1, 1, 2}, -0.5 * c1}, {Monomial{3, 1, 2}, -1.5 * c3}};
    if (!polyEqual(*p, derivative))
      continue;
    // At the GEMM's place: an optimizer update may overwrite its weight
    // in place before the kernel.
    OpBuilder b(dmm);
    auto type = RankedTensorType::get(shapeOf(dmm.getOutput()), element);
    Value pre = reshapedTo(b, forward.getPre(), type, fused);
    auto epilogue =
        b.create<MatMulGeluGradOp>(dmm.getLoc(), type, dmm.getA(), dmm.getB(),
                                   pre, dmm.getTransposeBAttr());
    for (NamedAttribute attr : dmm->getDiscardableAttrs())
      epilogue->setAttr(attr.getName(), attr.getValue());
    fused.getResult(0).replaceAllUsesWith(reshapedTo(
        b, epilogue.getOutput(), fused.getResult(0).getType(), fused));
    SmallVector<Value> read(inputs);
    fused.erase();
    eraseDeadProducers(read);
    if (dmm.getOutput().use_empty())
      dmm.erase();
    ++numGeluGradEpilogues;
  }
}

/// The 16-bit type every reader of `result` narrows it to (a conversion,
/// or a transpose storing its copy in 16 bits), or null.
static Type narrowedByEveryReader(Value result) {
  Type to;
  for (Operation *user : result.getUsers()) {
    if (!isa<ConvertOp, TransposeOp>(user) || !is16Bit(user->getResult(0)))
      return {};
    Type element = elementType(user->getResult(0));
    if (to && element != to)
      return {};
    to = element;
  }
  return to;
}

/// Whether every reader of `v` narrows it to `to`, directly (a conversion,
/// a transpose or concat storing its copy in `to`) or through reshapes,
/// slices and same-type transposes whose readers all do: those values are
/// appended to `through`, the narrowing readers to `narrowing`.
static bool narrowedThroughCopies(Value v, Type to,
                                  SmallVectorImpl<Value> &through,
                                  SmallVectorImpl<Operation *> &narrowing) {
  for (Operation *user : v.getUsers()) {
    Value result = user->getResult(0);
    if (!isa<ConvertOp, TransposeOp, ConcatOp, ReshapeOp, SliceOp>(user))
      return false;
    if (elementType(result) == to && !isa<ReshapeOp, SliceOp>(user)) {
      if (!llvm::is_contained(narrowing, user))
        narrowing.push_back(user);
      continue;
    }
    if (isa<ConvertOp, ConcatOp>(user) || elementType(result) != elementType(v))
      return false;
    through.push_back(result);
    if (!narrowedThroughCopies(result, to, through, narrowing))
      return false;
  }
  return true;
}

/// Stores `results` (float32) in the 16-bit format `to` when every reader
/// only narrows them to it, through copies (see narrowedThroughCopies): the
/// values are written and read at half the bytes, rounded where the
/// narrowing reader rounded them. Every operand of a narrowing concat must
/// be among the values retyped. Whether it did.
static bool storeNarrowed(ValueRange results, Type to) {
  SmallVector<Value> retyped(results);
  SmallVector<Operation *> narrowing;
  for (Value r : results)
    if (!elementType(r).isF32() ||
        !narrowedThroughCopies(r, to, retyped, narrowing))
      return false;
  if (narrowing.empty())
    return false;
  for (Operation *op : narrowing)
    if (isa<ConcatOp>(op) &&
        !llvm::all_of(op->getOperands(), [&](Value v) {
          return llvm::is_contained(retyped, v);
        }))
      return false;
  for (Value v : retyped)
    v.setType(cast<RankedTensorType>(v.getType()).clone(to));
  // Conversions are now copies of their input; transposes and concats copy
  // 16-bit values.
  for (Operation *op : narrowing)
    if (auto convert = dyn_cast<ConvertOp>(op)) {
      convert.getOutput().replaceAllUsesWith(convert.getInput());
      convert.erase();
    }
  return true;
}

/// An attention backward with 16-bit operands whose float32 gradients are
/// only narrowed to the operands' format (for the projection's backward
/// GEMM: transposed back from heads, concatenated, rounded) stores the
/// gradients in 16 bits itself.
static bool foldAttentionGradNarrowing(AttentionGradOp grad) {
  Type to = elementType(grad.getQuery());
  return isa<BFloat16Type, Float16Type>(to) &&
         storeNarrowed(grad->getResults(), to);
}

/// A GEMM of 16-bit operands (a 2-D weight, `a` not transposed) whose
/// float32 result is only narrowed to their format, through views (the
/// query, key and value sliced out of one projection and transposed to
/// heads by narrowing copies; an output gradient transposed to heads for
/// the attention backward) stores the result in 16 bits itself.
static bool foldMatMulNarrowing(MatMulOp matmul) {
  Type to = elementType(matmul.getA());
  return isa<BFloat16Type, Float16Type>(to) &&
         shapeOf(matmul.getB()).size() == 2 && !matmul.getTransposeA() &&
         storeNarrowed(matmul->getResults(), to);
}

/// A convolution that multiplies 16-bit operands as stored, not depthwise
/// and without a bias, whose float32 result is only narrowed to their
/// format (the rounding torch.autocast's convolution returns, which the
/// batch norm after it reads) stores the result in 16 bits itself.
static bool foldConvNarrowing(ConvOp conv) {
  Type to = elementType(conv.getInput());
  return isa<BFloat16Type, Float16Type>(to) &&
         conv->hasAttr(attr::kNative16BitGemm) && !conv.getBias() &&
         static_cast<int64_t>(conv.getGroup()) != shapeOf(conv.getInput())[1] &&
         storeNarrowed(conv->getResults(), to);
}

/// A convolution backward that multiplies 16-bit operands as stored, whose
/// float32 input gradient is only narrowed to their format (the rounding
/// torch.autocast's convolution backward returns, which a batch norm
/// backward or a fused kernel reads) stores the gradient in 16 bits itself.
static bool foldConvBackwardDataNarrowing(ConvBackwardDataOp conv) {
  Type to = elementType(conv.getGrad());
  return isa<BFloat16Type, Float16Type>(to) &&
         conv->hasAttr(attr::kNative16BitGemm) &&
         storeNarrowed(conv->getResults(), to);
}

/// A max pooling whose float32 result its readers only narrow to a 16-bit
/// format, of an input that has a copy in that format (the one the
/// backward pass keeps), pools the copy instead and stores its result in
/// 16 bits: rounding is monotonic, so the max of the rounded values is the
/// rounded max, bit for bit. The float32 input may then have no other
/// reader than its copy, which the producer stores itself (a batch norm).
/// Returns how many it folded.
static int64_t foldMaxPoolNarrowing(func::FuncOp func) {
  int64_t folded = 0;
  SmallVector<MaxPoolOp> pools;
  func.walk([&](MaxPoolOp pool) {
    if (elementType(pool.getInput()).isF32())
      pools.push_back(pool);
  });
  for (MaxPoolOp pool : pools) {
    Type to = narrowedByEveryReader(pool.getOutput());
    if (!to || !llvm::all_of(pool.getOutput().getUsers(),
                             [](Operation *op) { return isa<ConvertOp>(op); }))
      continue;
    ConvertOp copy;
    for (Operation *user : pool.getInput().getUsers())
      if (auto c = dyn_cast<ConvertOp>(user);
          c && elementType(c.getOutput()) == to && samePhase(pool, c))
        copy = c;
    if (!copy)
      continue;
    if (pool->isBeforeInBlock(copy))
      copy->moveBefore(pool);
    OpBuilder b(pool);
    OperationState state(
        pool.getLoc(), pool->getName(), ValueRange{copy.getOutput()},
        TypeRange{cast<RankedTensorType>(pool.getOutput().getType()).clone(to)},
        pool->getAttrs());
    Operation *pooled = b.create(state);
    for (Operation *user :
         llvm::make_early_inc_range(pool.getOutput().getUsers())) {
      auto convert = cast<ConvertOp>(user);
      convert.getOutput().replaceAllUsesWith(pooled->getResult(0));
      convert.erase();
    }
    pool.erase();
    ++folded;
  }
  return folded;
}

/// A layer norm, transpose, concat or attention whose float32 result its
/// readers only narrow to one 16-bit format (conversions for a GEMM or
/// attention operand under --precision bf16 / fp16, or for the backward's
/// saved copy; transposes storing 16 bits) stores the 16-bit values
/// itself, rounded as a conversion rounds them: the float32 result is never
/// stored, the conversions disappear and the transposes copy 16-bit
/// values. A layer norm or attention backward reads its 16-bit saved
/// input or output as stored instead of through a widening conversion, and
/// an attention backward stores gradients that are only narrowed in 16 bits
/// (see foldAttentionGradNarrowing).
void FusionPass::foldConversions(func::FuncOp func) {
  // A 16-bit saved value widened for a layer norm or attention backward,
  // or 16-bit logits widened for the loss: the kernel reads the 16-bit
  // values (layerNormBackward16, the attentionBackward16 taking a 16-bit
  // output, softmaxCrossEntropyWithGrad16 when the gradient is stored
  // alike).
  SmallVector<ConvertOp> widenings;
  func.walk([&](ConvertOp c) {
    if (is16Bit(c.getInput()) && !is16Bit(c.getOutput()))
      widenings.push_back(c);
  });
  for (ConvertOp widen : widenings) {
    widen.getOutput().replaceUsesWithIf(widen.getInput(), [&](OpOperand &use) {
      // A layer norm backward reads a 16-bit output gradient as stored when
      // its saved input is (or will be, once its widening is folded) in
      // the same format.
      if (auto grad = dyn_cast<LayerNormGradOp>(use.getOwner()))
        return use.get() == grad.getInput() ||
               (use.get() == grad.getGrad() &&
                elementType(widen.getInput()) == storedType(grad.getInput()));
      if (auto grad = dyn_cast<AttentionGradOp>(use.getOwner()))
        return use.get() == grad.getOutput() &&
               elementType(widen.getInput()) == elementType(grad.getQuery());
      if (auto loss = dyn_cast<SoftmaxCrossEntropyWithGradOp>(use.getOwner()))
        return use.get() == loss.getLogits() &&
               elementType(widen.getInput()) == elementType(loss.getDlogits());
      // A batch norm (forward or backward) reads a 16-bit input as stored,
      // the backward its activation's 16-bit output and its output
      // gradient too when its input is (or will be) stored alike.
      if (auto norm = dyn_cast<BatchNormTrainOp>(use.getOwner()))
        return use.get() == norm.getInput();
      if (auto grad = dyn_cast<BatchNormTrainGradOp>(use.getOwner())) {
        Value act = grad.getActivationOutput();
        Type low = elementType(widen.getInput());
        return (use.get() == grad.getInput() || use.get() == act ||
                use.get() == grad.getGrad()) &&
               storedType(grad.getInput()) == low &&
               (!act || storedType(act) == low);
      }
      // A max pooling backward reads its saved input and its output
      // gradient as stored (each 16-bit one in one format).
      if (auto grad = dyn_cast<MaxPoolGradOp>(use.getOwner())) {
        Type low = elementType(widen.getInput());
        return llvm::all_of(
            ValueRange{grad.getInput(), grad.getGrad(), grad.getOutput()},
            [&](Value v) {
              Type t = storedType(v);
              return t.isF32() || t == low;
            });
      }
      return false;
    });
    if (widen.getOutput().use_empty()) {
      widen.erase();
      ++numFoldedConversions;
    }
  }
  numFoldedConversions += foldMaxPoolNarrowing(func);
  SmallVector<Operation *> candidates;
  for (Operation &op : func.getBody().front())
    if (isa<LayerNormOp, TransposeOp, ConcatOp, BatchNormTrainOp,
            BatchNormTrainGradOp, MaxPoolGradOp>(op) &&
        cast<ShapedType>(op.getResult(0).getType()).getElementType().isF32())
      candidates.push_back(&op);
    else if (auto attention = dyn_cast<AttentionOp>(op);
             attention && is16Bit(attention.getQuery()))
      candidates.push_back(&op);
  // Last first: a transpose reading a candidate narrows once it is folded.
  for (Operation *op : llvm::reverse(candidates)) {
    Value result = op->getResult(0);
    Type to = narrowedByEveryReader(result);
    if (!to || !elementType(result).isF32())
      continue;
    if (auto attention = dyn_cast<AttentionOp>(op);
        attention && to != elementType(attention.getQuery()))
      continue;
    // A batch norm's or max pooling backward's 16-bit operands share one
    // format.
    if (isa<BatchNormTrainOp, BatchNormTrainGradOp, MaxPoolGradOp>(op) &&
        llvm::any_of(op->getOperands(), [&](Value v) {
          return is16Bit(v) && elementType(v) != to;
        }))
      continue;
    SmallVector<Type> types(op->getResultTypes());
    types.front() = cast<RankedTensorType>(result.getType()).clone(to);
    OpBuilder b(op);
    OperationState state(op->getLoc(), op->getName(), op->getOperands(), types,
                         op->getAttrs());
    Operation *folded = b.create(state);
    for (Operation *user : llvm::make_early_inc_range(result.getUsers()))
      if (auto convert = dyn_cast<ConvertOp>(user)) {
        convert.getOutput().replaceAllUsesWith(folded->getResult(0));
        convert.erase();
      }
    // What is left are transposes, which now copy 16-bit values.
    for (auto [from, into] : llvm::zip(op->getResults(), folded->getResults()))
      from.replaceAllUsesWith(into);
    op->erase();
    ++numFoldedConversions;
  }
  // A layer norm backward's input gradient goes on down the residual path in
  // float32 and is converted for the next GEMMs: the backward kernel stores
  // the 16-bit copy as it writes the gradient (input_grad16), instead of a
  // conversion reading it again.
  SmallVector<ConvertOp> copies;
  func.walk([&](ConvertOp c) {
    auto grad = c.getInput().getDefiningOp<LayerNormGradOp>();
    if (grad && c.getInput() == grad.getInputGrad() &&
        !grad.getInputGrad16() && is16Bit(c.getOutput()) &&
        elementType(c.getOutput()) == elementType(grad.getInput()) &&
        samePhase(grad, c))
      copies.push_back(c);
  });
  for (ConvertOp c : copies) {
    auto grad = c.getInput().getDefiningOp<LayerNormGradOp>();
    if (grad.getInputGrad16())
      continue; // a second conversion of the same gradient
    SmallVector<Type> types(grad->getResultTypes());
    types.push_back(c.getType());
    OpBuilder b(grad);
    OperationState state(grad.getLoc(), grad->getName(), grad->getOperands(),
                         types, grad->getAttrs());
    Operation *both = b.create(state);
    for (auto [from, into] : llvm::zip(grad->getResults(), both->getResults()))
      from.replaceAllUsesWith(into);
    c.getOutput().replaceAllUsesWith(both->getResult(3));
    c.erase();
    grad.erase();
    ++numFoldedConversions;
  }
  // A batch norm's float32 input (a convolution's result) whose 16-bit
  // copy the backward pass keeps: the forward kernel writes the copy as it
  // reads the input (input16), instead of a conversion reading it again.
  SmallVector<std::pair<BatchNormTrainOp, ConvertOp>> savedInputs;
  func.walk([&](BatchNormTrainOp bn) {
    if (bn.getInput16() || !elementType(bn.getInput()).isF32())
      return;
    Type out = elementType(bn.getOutput());
    for (Operation *user : bn.getInput().getUsers())
      if (auto c = dyn_cast<ConvertOp>(user);
          c && is16Bit(c.getOutput()) && samePhase(bn, c) &&
          (out.isF32() || elementType(c.getOutput()) == out)) {
        savedInputs.push_back({bn, c});
        return;
      }
  });
  for (auto [bn, c] : savedInputs) {
    SmallVector<Type> types(bn->getResultTypes());
    types.push_back(c.getType());
    OpBuilder b(bn);
    // Before the conversion's readers: where the conversion is, when that
    // is earlier than the batch norm.
    if (c->isBeforeInBlock(bn) && failed(moveReadersAfter(c.getOutput(), bn)))
      continue;
    OperationState state(bn.getLoc(), bn->getName(), bn->getOperands(), types,
                         bn->getAttrs());
    Operation *both = b.create(state);
    for (auto [from, into] : llvm::zip(bn->getResults(), both->getResults()))
      from.replaceAllUsesWith(into);
    c.getOutput().replaceAllUsesWith(both->getResult(5));
    c.erase();
    bn.erase();
    ++numFoldedConversions;
  }
  // After the transposes and concats, which narrow by now.
  SmallVector<Operation *> producers;
  func.walk([&](Operation *op) {
    if (isa<AttentionGradOp, MatMulOp, ConvOp, ConvBackwardDataOp>(op))
      producers.push_back(op);
  });
  for (Operation *op : producers) {
    bool folded = false;
    if (auto grad = dyn_cast<AttentionGradOp>(op))
      folded = foldAttentionGradNarrowing(grad);
    else if (auto conv = dyn_cast<ConvOp>(op))
      folded = foldConvNarrowing(conv);
    else if (auto data = dyn_cast<ConvBackwardDataOp>(op))
      folded = foldConvBackwardDataNarrowing(data);
    else
      folded = foldMatMulNarrowing(cast<MatMulOp>(op));
    if (folded)
      ++numFoldedConversions;
  }
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
  // Hyperparameters and marks; not which optional operands each has (an
  // AdamW update writing a 16-bit copy joins one that does not).
  auto attrs = [](Operation *op) {
    NamedAttrList list(op->getAttrDictionary());
    list.erase("operandSegmentSizes");
    return list.getDictionary(op->getContext());
  };
  return a->getName() == b->getName() && attrs(a) == attrs(b) &&
         *updateStatus(a) == *updateStatus(b);
}

namespace {
/// A residual block's sum: an add of two tensors of one type, then
/// optionally a relu, as one op.
struct ResidualSum {
  Operation *op;
  Value terms[2];
  bool relu;
};
} // namespace

/// `op` as a residual sum: an add of two different float32 tensors of its
/// shape, or a fused op of two inputs and one result whose body is exactly
/// the widenings of its 16-bit inputs, one float32 add of the two, an
/// optional relu and an optional narrowing of the result.
static std::optional<ResidualSum> residualSumOf(Operation *op) {
  if (auto add = dyn_cast<AddOp>(op)) {
    if (add.getLhs() == add.getRhs() ||
        add.getLhs().getType() != add.getType() ||
        add.getRhs().getType() != add.getType() ||
        !elementType(add.getResult()).isF32())
      return std::nullopt;
    return ResidualSum{op, {add.getLhs(), add.getRhs()}, false};
  }
  auto fused = dyn_cast<FusedOp>(op);
  if (!fused || fused.getInputs().size() != 2 || fused.getOutputs().size() != 1)
    return std::nullopt;
  Block &body = fused.getBody().front();
  Value v = body.getTerminator()->getOperand(0);
  int64_t ops = 0;
  if (auto narrow = v.getDefiningOp<ConvertOp>()) {
    if (!is16Bit(narrow.getOutput()) || is16Bit(narrow.getInput()))
      return std::nullopt;
    v = narrow.getInput(), ++ops;
  }
  auto relu = v.getDefiningOp<ReluOp>();
  if (relu)
    v = relu.getInput(), ++ops;
  auto add = v.getDefiningOp<AddOp>();
  if (!add || !elementType(add.getResult()).isF32())
    return std::nullopt;
  ++ops;
  SmallVector<BlockArgument> args;
  for (Value term : {add.getLhs(), add.getRhs()}) {
    if (auto widen = term.getDefiningOp<ConvertOp>()) {
      if (!is16Bit(widen.getInput()))
        return std::nullopt;
      term = widen.getInput(), ++ops;
    }
    auto arg = dyn_cast<BlockArgument>(term);
    if (!arg || !term.hasOneUse())
      return std::nullopt;
    args.push_back(arg);
  }
  if (args[0] == args[1] ||
      static_cast<int64_t>(body.getOperations().size()) != ops + 1)
    return std::nullopt;
  return ResidualSum{op,
                     {fused.getInputs()[args[0].getArgNumber()],
                      fused.getInputs()[args[1].getArgNumber()]},
                     static_cast<bool>(relu)};
}

/// A residual block's sum (an add of two tensors of its type, or the fused
/// add and relu, 16-bit values widened) whose one term is a batch
/// normalization's output that nothing else reads becomes that batch
/// normalization's `residual` (the other term) and activation: the
/// normalized values, rounded as they were stored, are added as they are
/// computed, so they are neither stored nor read again. The other term must
/// be computed before the normalization (the later of two normalizations
/// takes the sum), and both stored as the sum is, as the normalization's
/// output then is.
void FusionPass::foldNormResiduals(func::FuncOp func) {
  // Matched as they come: folding one sum replaces the value a later one
  // reads.
  SmallVector<Operation *> candidates;
  for (Operation &op : func.getBody().front())
    if (residualSumOf(&op))
      candidates.push_back(&op);
  for (Operation *op : candidates) {
    ResidualSum sum = *residualSumOf(op);
    Value out = sum.op->getResult(0);
    BatchNormTrainOp bn;
    Value residual;
    for (int t = 0; t < 2; ++t) {
      Value term = sum.terms[t], other = sum.terms[1 - t];
      auto norm = term.getDefiningOp<BatchNormTrainOp>();
      if (!norm || term != norm.getOutput() || !term.hasOneUse() ||
          norm.getActivation() || norm.getResidual() ||
          !samePhase(norm, sum.op) || term.getType() != out.getType() ||
          other.getType() != out.getType())
        continue;
      Operation *def = other.getDefiningOp();
      if ((def && !def->isBeforeInBlock(norm)) ||
          (bn && !bn->isBeforeInBlock(norm)))
        continue;
      bn = norm, residual = other;
    }
    if (!bn)
      continue;
    SmallVector<Value> operands(bn->getOperands());
    operands.push_back(residual);
    OperationState state(bn.getLoc(), bn->getName(), operands,
                         bn->getResultTypes(), bn->getAttrs());
    OpBuilder b(bn);
    auto with = cast<BatchNormTrainOp>(b.create(state));
    if (sum.relu)
      with.setActivationAttr(b.getStringAttr("relu"));
    out.replaceAllUsesWith(with.getOutput());
    for (auto [from, into] : llvm::zip(bn->getResults().drop_front(),
                                       with->getResults().drop_front()))
      from.replaceAllUsesWith(into);
    sum.op->erase();
    bn.erase();
    ++numNormResiduals;
  }
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
