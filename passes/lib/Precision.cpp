//===- Precision.cpp - GEMMs and convolutions on 16-bit operands ----------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs after autodiff and the optimizer, so the gradient rules never see
// 16-bit values and every GEMM and convolution of the step, forward and
// backward (mtc.gemm, mtc.matmul, mtc.conv, mtc.conv_backward_data,
// mtc.conv_backward_filter), gets the same treatment: its two tensor
// operands (input and weight, incoming gradient and weight, saved input and
// incoming gradient) are converted (mtc.convert, round to nearest even) to
// bfloat16 or float16, the products accumulate in float32 and the result
// stays float32, as does a bias. A value is converted once, right before its
// first such op; later ones read the same copy. So a parameter is converted
// once per step (before its update overwrites it), an incoming gradient once
// for both of its backward ops, and an activation that a backward GEMM or
// convolution needs is kept in 16 bits while its float32 original can die
// after its last forward use. Fused attention (mtc.attention and its
// gradient) gets 16-bit Q, K, V and output gradient the same way. Everything
// else (normalization, pooling, softmax, losses, elementwise ops) computes
// in float32; of the forward values it saves for the backward pass, those
// of 4096 or more elements are stored in 16 bits between the passes.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <functional>

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
        convertOperands(func, low);
    if (auto step = module.lookupSymbol<func::FuncOp>("train_step")) {
      roundLogits(step, low);
      roundConvOutputs(step, low);
      roundNormOutputs(step, low);
      roundResidualSums(step, low);
      storeSavedActivations(step, low);
      roundLinearOutputs(step, low);
      roundInputGradients(step, low);
      roundResidualGradients(step, low);
      // Last: the steps above find parameters through their conversions.
      if (parameterCopies || frozenCopies)
        keepParameterCopies(
            step, module.lookupSymbol<func::FuncOp>(attr::kEvalFunction), low,
            /*onlyLeavingArena=*/!parameterCopies);
    }
  }

private:
  void convertOperands(func::FuncOp func, Type low);
  void roundLogits(func::FuncOp func, Type low);
  void roundInputGradients(func::FuncOp func, Type low);
  void roundLinearOutputs(func::FuncOp func, Type low);
  void roundConvOutputs(func::FuncOp func, Type low);
  void roundNormOutputs(func::FuncOp func, Type low);
  void roundResidualSums(func::FuncOp func, Type low);
  void roundResidualGradients(func::FuncOp func, Type low);
  void storeSavedActivations(func::FuncOp func, Type low);
  void keepParameterCopies(func::FuncOp func, func::FuncOp eval, Type low,
                           bool onlyLeavingArena);
};

/// `v` through the reshapes that make it a view of another value.
Value throughReshapes(Value v) {
  while (auto reshape = v.getDefiningOp<ReshapeOp>())
    v = reshape.getInput();
  return v;
}

/// Whether `v` is a linear layer's output: a GEMM of `low` operands, or
/// such a GEMM's one result plus a bias vector (which the fusion pass makes
/// the GEMM's epilogue), or a reshape of either (Hugging Face's Conv1D
/// multiplies the flattened rows and reshapes the product back).
bool isLinearOutput(Value v, Type low) {
  v = throughReshapes(v);
  auto gemm = [&](Value x) {
    Operation *def = x.getDefiningOp();
    return def && isa<MatMulOp>(def) &&
           getElementTypeOrSelf(def->getOperand(0)) == low;
  };
  if (gemm(v))
    return true;
  auto add = v.getDefiningOp<AddOp>();
  if (!add)
    return false;
  for (auto [product, bias] : {std::pair(add.getLhs(), add.getRhs()),
                               std::pair(add.getRhs(), add.getLhs())})
    if (gemm(product) && product.hasOneUse() &&
        cast<ShapedType>(bias.getType()).getRank() == 1)
      return true;
  return false;
}

/// Whether `v` is a parameter, or a view or 16-bit copy of one.
bool isParameterCopy(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ConvertOp, ReshapeOp, TransposeOp>(def))
      return false;
    v = def->getOperand(0);
  }
  auto arg = cast<BlockArgument>(v);
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  auto role = func ? func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        attr::kRole)
                   : nullptr;
  return role && role.getValue() == "param";
}

/// Whether `mm` multiplies 16-bit operands by a weight (a parameter's
/// 16-bit copy, 2-D) in the form whose result the fusion pass can store in
/// 16 bits (see MatMulOp::verify).
bool isWeightMatMul(MatMulOp mm, Type low) {
  return mm && getElementTypeOrSelf(mm.getA()) == low && !mm.getTransposeA() &&
         cast<ShapedType>(mm.getB().getType()).getRank() == 2 &&
         isParameterCopy(mm.getB());
}

/// Rounds `v` to `low` right after its op and lets its readers read the
/// widening, made right before the first of them (so it can join that
/// reader's kernel); a reader converting to `low` reads the rounded values.
/// Both conversions carry `phase` (attr::kBackward or none).
void roundForReaders(Value v, Type low, StringRef phase) {
  Operation *first = nullptr;
  for (Operation *user : v.getUsers())
    if (!first || user->isBeforeInBlock(first))
      first = user;
  if (!first)
    return;
  auto type = cast<RankedTensorType>(v.getType());
  OpBuilder b(v.getContext());
  b.setInsertionPointAfter(v.getDefiningOp());
  auto rounded = b.create<ConvertOp>(v.getLoc(), type.clone(low), v);
  b.setInsertionPoint(first);
  auto widened = b.create<ConvertOp>(v.getLoc(), type, rounded);
  if (!phase.empty())
    for (Operation *made : {rounded, widened})
      made->setAttr(phase, b.getUnitAttr());
  for (OpOperand &use : llvm::make_early_inc_range(v.getUses())) {
    Operation *user = use.getOwner();
    if (user == rounded)
      continue;
    if (auto narrow = dyn_cast<ConvertOp>(user);
        narrow && narrow.getType() == rounded.getType()) {
      narrow.replaceAllUsesWith(rounded.getOutput());
      narrow.erase();
      continue;
    }
    use.set(widened);
  }
  if (widened.use_empty())
    widened.erase();
}

/// Rounds `v` to `low` right after its op and gives each reader a
/// widening of its own, made right before it: a reader that reads 16-bit
/// values as stored folds its widening, and one that does not (a fused
/// kernel) widens as it reads, so no float32 copy is ever stored (one
/// widening made for all, right after the op, would join the op's own
/// kernel and store one); a reader converting to `low` reads the rounded
/// values. All conversions carry attr::kBackward.
void roundForEachBackwardReader(Value v, Type low) {
  auto type = cast<RankedTensorType>(v.getType());
  OpBuilder b(v.getContext());
  b.setInsertionPointAfter(v.getDefiningOp());
  auto rounded = b.create<ConvertOp>(v.getLoc(), type.clone(low), v);
  rounded->setAttr(attr::kBackward, b.getUnitAttr());
  for (Operation *user : llvm::make_early_inc_range(v.getUsers())) {
    if (user == rounded)
      continue;
    if (auto narrow = dyn_cast<ConvertOp>(user);
        narrow && narrow.getType() == rounded.getType()) {
      narrow.replaceAllUsesWith(rounded.getOutput());
      narrow.erase();
      continue;
    }
    b.setInsertionPoint(user);
    auto widened = b.create<ConvertOp>(v.getLoc(), type, rounded);
    widened->setAttr(attr::kBackward, b.getUnitAttr());
    user->replaceUsesOfWith(v, widened);
  }
}

/// Whether `v` is a float32 widening of a `low` value (one kept in 16
/// bits and widened for its reader).
bool isWidenedFrom(Type low, Value v) {
  auto c = v.getDefiningOp<ConvertOp>();
  return c && getElementTypeOrSelf(c.getInput()) == low &&
         getElementTypeOrSelf(v).isF32();
}

bool isBackwardOp(Operation *op) {
  return op->hasAttr(attr::kBackward) || op->hasAttr(attr::kOptimizer) ||
         isa<func::ReturnOp>(op);
}

/// Rounds `v` to `low` right after its op: its forward readers read a
/// widening made right before the first of them, its backward readers one
/// made right before the first of them (the function's return reads `v`
/// itself), so that the float32 value dies at once and the backward pass
/// keeps the 16-bit copy; a reader converting to `low` reads the rounded
/// values.
void roundInBothPasses(Value v, Type low) {
  auto type = cast<RankedTensorType>(v.getType());
  OpBuilder b(v.getContext());
  b.setInsertionPointAfter(v.getDefiningOp());
  auto rounded = b.create<ConvertOp>(v.getLoc(), type.clone(low), v);
  for (Operation *user : llvm::make_early_inc_range(v.getUsers()))
    if (auto narrow = dyn_cast<ConvertOp>(user);
        narrow && narrow != rounded && narrow.getType() == rounded.getType()) {
      narrow.replaceAllUsesWith(rounded.getOutput());
      narrow.erase();
    }
  Operation *first = nullptr, *firstBackward = nullptr;
  for (Operation *user : v.getUsers()) {
    if (user == rounded || isa<func::ReturnOp>(user))
      continue;
    Operation *&at = isBackwardOp(user) ? firstBackward : first;
    if (!at || user->isBeforeInBlock(at))
      at = user;
  }
  for (auto [at, backward] :
       {std::pair(first, false), std::pair(firstBackward, true)}) {
    if (!at)
      continue;
    b.setInsertionPoint(at);
    auto widened = b.create<ConvertOp>(v.getLoc(), type, rounded);
    if (backward)
      widened->setAttr(attr::kBackward, b.getUnitAttr());
    v.replaceUsesWithIf(widened, [&](OpOperand &use) {
      Operation *user = use.getOwner();
      return user != rounded && !isa<func::ReturnOp>(user) &&
             isBackwardOp(user) == backward;
    });
  }
}

/// Activations smaller than this stay float32 (statistics, scalars).
constexpr int64_t kMinStoredElements = 4096;

void PrecisionPass::convertOperands(func::FuncOp func, Type low) {
  DenseMap<Value, Value> copies;
  // The 16-bit copy of `v`, made before `user` unless there is one. A
  // reshaped value's copy is the reshaped copy of its source, so a backward
  // GEMM reading a reshape of an activation reuses the copy the forward GEMM
  // made (the float32 activation need not live until the backward pass).
  std::function<Value(Operation *, Value)> lowCopy = [&](Operation *user,
                                                         Value v) -> Value {
    auto type = cast<RankedTensorType>(v.getType());
    if (!type.getElementType().isF32())
      return nullptr;
    if (Value copy = copies.lookup(v))
      return copy;
    OpBuilder b(user);
    Operation *made;
    if (auto reshape = v.getDefiningOp<ReshapeOp>())
      made = b.create<ReshapeOp>(user->getLoc(), type.clone(low),
                                 lowCopy(reshape, reshape.getInput()));
    else
      made = b.create<ConvertOp>(user->getLoc(), type.clone(low), v);
    if (user->hasAttr(attr::kBackward))
      made->setAttr(attr::kBackward, b.getUnitAttr());
    copies[v] = made->getResult(0);
    return made->getResult(0);
  };
  auto narrow = [&](Operation *user, OpOperand &operand) {
    Value v = operand.get();
    Value copy = lowCopy(user, v);
    if (!copy)
      return;
    operand.set(copy);
    // A float32 reshape (of a reshape...) nothing reads any more would keep
    // its source alive.
    while (auto reshape = v.getDefiningOp<ReshapeOp>()) {
      if (!v.use_empty())
        break;
      copies.erase(v);
      v = reshape.getInput();
      reshape.erase();
    }
  };
  func.walk([&](Operation *op) {
    // Operands 0 and 1 are the multiplied tensors of each of these ops.
    if (isa<MatMulOp, ConvOp, ConvBackwardDataOp, ConvBackwardFilterOp>(op)) {
      narrow(op, op->getOpOperand(0));
      narrow(op, op->getOpOperand(1));
      if (nativeGemm)
        op->setAttr(attr::kNative16BitGemm, UnitAttr::get(op->getContext()));
    }
    // Attention's products: Q, K, V and, backward, the output gradient.
    if (isa<AttentionOp>(op))
      for (unsigned i = 0; i < 3; ++i)
        narrow(op, op->getOpOperand(i));
    if (isa<AttentionGradOp>(op))
      for (unsigned i = 0; i < 4; ++i)
        narrow(op, op->getOpOperand(i));
  });
}

/// The logits of a softmax cross-entropy that a linear layer of 16-bit
/// operands computes (plus its bias, through reshapes: a language model's
/// head, a classifier) are rounded to 16 bits before the loss, which
/// computes in float32 on their widening: what torch.autocast does (the
/// linear layer's output is 16-bit, the loss upcasts it). The fusion pass then
/// stores the GEMM's result in 16 bits and lets the loss read them as stored:
/// the largest activation of a language model, [tokens, vocabulary], is written
/// and read at half the bytes.
void PrecisionPass::roundLogits(func::FuncOp func, Type low) {
  func.walk([&](SoftmaxCrossEntropyOp loss) {
    Value logits = loss.getLogits();
    if (!isLinearOutput(logits, low))
      return;
    auto type = cast<RankedTensorType>(logits.getType());
    OpBuilder b(loss);
    Value rounded = b.create<ConvertOp>(loss.getLoc(), type.clone(low), logits);
    Value widened = b.create<ConvertOp>(loss.getLoc(), type, rounded);
    loss.getLogitsMutable().assign(widened);
  });
}

/// The gradient a backward GEMM of 16-bit operands computes from an output
/// gradient and a parameter's 16-bit copy (a linear layer's input gradient:
/// dX = dY W^T) is rounded to 16 bits, and its readers read the widening:
/// what torch.autocast's matmul backward returns. A reader that narrows it
/// anyway (an attention backward's output gradient) reads the rounded
/// values. The fusion pass then stores the GEMM's result in 16 bits and
/// lets the kernels after it read it as stored: the gradient between a
/// linear layer and its activation or norm is written and read at half the
/// bytes. So that no kernel moves more bytes for it, only gradients whose
/// every reader takes 16-bit values as they are stored are rounded: an
/// elementwise kernel (it widens them as it reads), a layer norm backward
/// whose saved input is stored in the same format, a conversion to it. A
/// transpose, say, would need a widening kernel of its own. Weight
/// gradients stay float32 (autocast rounds them as well, but the
/// optimizer's parameters are float32 and lose nothing here). A
/// convolution's input gradient from 16-bit operands is rounded alike (a
/// batch norm backward whose saved input is 16-bit reads it as stored
/// too), which the fusion pass lets a convolution backward that multiplies
/// them as stored store in 16 bits itself, and so is a max pooling's input
/// gradient whose saved input is 16-bit (the kernel stores it rounded).
void PrecisionPass::roundInputGradients(func::FuncOp func, Type low) {
  auto readsStored = [&](OpOperand &use) {
    Operation *user = use.getOwner();
    if (isFusableElementwise(user))
      return true;
    if (auto norm = dyn_cast<LayerNormGradOp>(user))
      return use.get() == norm.getGrad() && isWidenedFrom(low, norm.getInput());
    if (auto norm = dyn_cast<BatchNormTrainGradOp>(user))
      return use.get() == norm.getGrad() && isWidenedFrom(low, norm.getInput());
    return false;
  };
  SmallVector<Value> gradients;
  func.walk([&](Operation *op) {
    if (!op->hasAttr(attr::kBackward) || op->hasAttr(attr::kRecompute))
      return;
    auto mm = dyn_cast<MatMulOp>(op);
    auto conv = dyn_cast<ConvBackwardDataOp>(op);
    auto pool = dyn_cast<MaxPoolGradOp>(op);
    if (((mm && isWeightMatMul(mm, low)) ||
         (conv && getElementTypeOrSelf(conv.getGrad()) == low) ||
         (pool && isWidenedFrom(low, pool.getInput()))) &&
        llvm::all_of(op->getResult(0).getUses(), readsStored))
      gradients.push_back(op->getResult(0));
  });
  for (Value v : gradients)
    roundForReaders(v, low, attr::kBackward);
}

/// A linear layer's output (a matmul of 16-bit operands, plus its bias) that
/// only elementwise ops read in the forward pass (a residual connection's
/// add), and the backward pass not at all, is rounded to 16 bits right
/// after the GEMM and widened right before its first reader, as
/// torch.autocast's linear layer returns it. The fusion pass then stores
/// the GEMM's result in 16 bits and the fused kernel reading it widens it
/// as it reads: written and read at half the bytes. (Outputs the backward
/// pass reads are rounded alike by storeSavedActivations.)
void PrecisionPass::roundLinearOutputs(func::FuncOp func, Type low) {
  SmallVector<Value> outputs;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (isBackwardOp(&op) || op.getNumResults() != 1)
      continue;
    Value v = op.getResult(0);
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !type.getElementType().isF32() || v.use_empty() ||
        !isLinearOutput(v, low))
      continue;
    // A matmul by a weight, plus its bias, or a view of that.
    Value product = throughReshapes(v);
    if (auto add = product.getDefiningOp<AddOp>())
      product = add.getLhs().getDefiningOp<MatMulOp>() ? add.getLhs()
                                                       : add.getRhs();
    if (!isWeightMatMul(product.getDefiningOp<MatMulOp>(), low))
      continue;
    // Not a GEMM's product that its bias add reads: the output is the sum.
    if (llvm::all_of(v.getUsers(), [&](Operation *user) {
          return !isBackwardOp(user) && !isa<ConvertOp>(user) &&
                 isFusableElementwise(user) &&
                 !(isa<AddOp>(user) && isLinearOutput(user->getResult(0), low));
        }))
      outputs.push_back(v);
  }
  for (Value v : outputs)
    roundForReaders(v, low, /*phase=*/"");
}

/// A convolution's result (16-bit operands) whose forward readers all take
/// 16-bit values as they are stored (a batch normalization's input, an
/// elementwise kernel, which widens them as it reads) is rounded to 16
/// bits right after the convolution, and those readers read the widening,
/// made right before the first of them: what torch.autocast's convolution
/// returns. The backward pass's readers (a batch norm backward's saved
/// input) read the same rounded values, widened right before the first of
/// them: the float32 result dies right away. The fusion pass then lets
/// a convolution that multiplies 16-bit operands as stored store its
/// result in 16 bits, and the batch norm read it as stored: written once
/// at half the bytes, read at half the bytes.
void PrecisionPass::roundConvOutputs(func::FuncOp func, Type low) {
  auto readsStored = [](OpOperand &use) {
    Operation *user = use.getOwner();
    if (auto norm = dyn_cast<BatchNormTrainOp>(user))
      return use.get() == norm.getInput();
    return isFusableElementwise(user) && !isa<ConvertOp>(user);
  };
  SmallVector<ConvOp> convs;
  func.walk([&](ConvOp conv) {
    if (isBackwardOp(conv) || getElementTypeOrSelf(conv.getInput()) != low ||
        !getElementTypeOrSelf(conv.getOutput()).isF32())
      return;
    bool forwardReader = false;
    for (OpOperand &use : conv.getOutput().getUses()) {
      if (isBackwardOp(use.getOwner()))
        continue;
      if (!readsStored(use))
        return;
      forwardReader = true;
    }
    if (forwardReader)
      convs.push_back(conv);
  });
  for (ConvOp conv : convs)
    roundInBothPasses(conv.getOutput(), low);
}

/// A batch normalization of 16-bit values (a convolution's rounded result,
/// see roundConvOutputs) returns 16-bit values under torch.autocast too: its
/// output, where only elementwise ops read it in the forward pass (a
/// residual connection's add, a GELU), is rounded right after it, for the
/// readers of both passes (roundInBothPasses): the forward ones' fused
/// kernel widens it as it reads, and the fusion pass lets the batch norm
/// store it in 16 bits. An output that a
/// ReLU or ReLU6 alone reads is left alone: the fusion pass folds the
/// activation into the batch norm, which then stores its 16-bit result
/// where only 16-bit copies read it (the same values: rounding commutes
/// with ReLU and clip).
void PrecisionPass::roundNormOutputs(func::FuncOp func, Type low) {
  SmallVector<Value> outputs;
  func.walk([&](BatchNormTrainOp bn) {
    auto widened = bn.getInput().getDefiningOp<ConvertOp>();
    Value y = bn.getOutput();
    if (isBackwardOp(bn) || !widened ||
        getElementTypeOrSelf(widened.getInput()) != low ||
        !getElementTypeOrSelf(y).isF32() || y.use_empty())
      return;
    if (y.hasOneUse() && isa<ReluOp, ClipOp>(*y.user_begin()))
      return;
    bool forwardReader = false, stored = true;
    for (Operation *user : y.getUsers()) {
      if (isBackwardOp(user))
        continue;
      forwardReader = true;
      stored &= isFusableElementwise(user) && !isa<ConvertOp>(user);
    }
    if (forwardReader && stored)
      outputs.push_back(y);
  });
  for (Value y : outputs)
    roundInBothPasses(y, low);
}

/// A residual connection's sum of two 16-bit values (widened: two batch
/// norms' rounded outputs, or one and the previous block's rounded output)
/// is 16-bit under torch.autocast too: in the forward pass, such a sum, or
/// the ReLU that alone reads it (rounding commutes with ReLU), is rounded in
/// both passes when its forward readers take 16-bit values as stored
/// (elementwise ops, the next convolution's conversion). In program order,
/// so that a block's rounded output lets the next block's sum qualify. The
/// fused kernel of the add then writes 16 bits only, and the next one
/// reads them.
void PrecisionPass::roundResidualSums(func::FuncOp func, Type low) {
  SmallVector<AddOp> adds;
  func.walk([&](AddOp add) {
    if (!isBackwardOp(add))
      adds.push_back(add);
  });
  for (AddOp add : adds) {
    Value v = add.getOutput();
    if (!isWidenedFrom(low, add.getLhs()) ||
        !isWidenedFrom(low, add.getRhs()) ||
        add.getLhs().getType() != v.getType() ||
        add.getRhs().getType() != v.getType())
      continue;
    if (v.hasOneUse())
      if (auto relu = dyn_cast<ReluOp>(*v.user_begin()))
        v = relu.getOutput();
    bool forwardReader = false, stored = true;
    for (Operation *user : v.getUsers()) {
      if (isBackwardOp(user))
        continue;
      forwardReader = true;
      stored &= isFusableElementwise(user);
    }
    if (forwardReader && stored)
      roundInBothPasses(v, low);
  }
}

/// The backward of roundResidualSums: under torch.autocast the gradient of
/// a 16-bit value is 16-bit too, and so is the sum of two 16-bit gradients.
/// In the backward pass, in program order (so that one rounded gradient
/// lets the next qualify): the gradient of a ReLU whose output is 16-bit
/// (widened: a residual connection's rounded sum), and the sum of two
/// 16-bit gradients (widened: the rounded input gradients of convolutions,
/// or one and a block's rounded gradient), are rounded where their readers
/// all take 16-bit values as stored: elementwise ops, a batch norm
/// backward or max pooling backward whose saved input is 16-bit. The fused
/// kernel that forms such a gradient writes 16 bits only, which the next
/// kernels read as stored. A ReLU's gradient that a batch norm backward
/// alone reads is left alone: the fusion pass folds it into that batch
/// norm backward, which reads the incoming gradient and the ReLU's output
/// as stored.
void PrecisionPass::roundResidualGradients(func::FuncOp func, Type low) {
  auto readsStored = [&](OpOperand &use) {
    Operation *user = use.getOwner();
    if (isFusableElementwise(user))
      return true;
    if (auto norm = dyn_cast<BatchNormTrainGradOp>(user))
      return use.get() == norm.getGrad() && isWidenedFrom(low, norm.getInput());
    if (auto pool = dyn_cast<MaxPoolGradOp>(user))
      return use.get() == pool.getGrad() && isWidenedFrom(low, pool.getInput());
    return false;
  };
  SmallVector<Operation *> candidates;
  func.walk([&](Operation *op) {
    if (isa<ReluGradOp, AddOp>(op) && isBackwardOp(op))
      candidates.push_back(op);
  });
  for (Operation *op : candidates) {
    Value v = op->getResult(0);
    if (auto grad = dyn_cast<ReluGradOp>(op)) {
      if (!isWidenedFrom(low, grad.getInput()) ||
          (v.hasOneUse() && isa<BatchNormTrainGradOp>(*v.user_begin())))
        continue;
    } else if (!llvm::all_of(op->getOperands(), [&](Value operand) {
                 return isWidenedFrom(low, operand) &&
                        operand.getType() == v.getType();
               })) {
      continue;
    }
    if (!v.use_empty() && llvm::all_of(v.getUses(), readsStored))
      roundForEachBackwardReader(v, low);
  }
}

/// A forward value the backward pass reads (outside GEMMs and convolutions,
/// which already read 16-bit copies) is kept in 16 bits between its last
/// forward use and its first backward use: rounded after the last forward
/// use, widened back to float32 right before the first backward use. The
/// float32 original dies after the forward pass; the window in between holds
/// half the bytes. A GEMM's result (a linear layer's output that its
/// activation's gradient reads) is rounded right after the GEMM instead,
/// and its forward readers read the rounded values as well.
void PrecisionPass::storeSavedActivations(func::FuncOp func, Type low) {
  Block &body = func.getBody().front();
  DenseMap<Operation *, int64_t> index;
  for (auto [i, op] : llvm::enumerate(body))
    index[&op] = i;
  SmallVector<Value> saved;
  for (Operation &op : body.without_terminator()) {
    if (isBackwardOp(&op) || isa<ConstantOp, ConvertOp>(op) ||
        op.getNumResults() == 0)
      continue;
    // Only primary results: auxiliary ones (statistics, log-probabilities)
    // stay float32.
    Value v = op.getResult(0);
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !type.getElementType().isF32() ||
        type.getNumElements() < kMinStoredElements)
      continue;
    bool forwardUse = false, backwardUse = false, returned = false;
    for (Operation *user : v.getUsers()) {
      returned |= isa<func::ReturnOp>(user);
      (isBackwardOp(user) ? backwardUse : forwardUse) = true;
    }
    if (backwardUse && !returned)
      saved.push_back(v);
  }
  for (Value v : saved) {
    Operation *lastForward = v.getDefiningOp(), *firstBackward = nullptr;
    for (Operation *user : v.getUsers()) {
      if (isBackwardOp(user)) {
        if (!firstBackward || index[user] < index[firstBackward])
          firstBackward = user;
      } else if (index[user] > index[lastForward]) {
        lastForward = user;
      }
    }
    auto type = cast<RankedTensorType>(v.getType());
    OpBuilder b(lastForward->getContext());
    // The 16-bit copy a forward GEMM or convolution already reads serves;
    // else round after the last forward use.
    Value stored;
    for (Operation *user : v.getUsers())
      if (auto convert = dyn_cast<ConvertOp>(user))
        if (!isBackwardOp(convert) && convert.getType() == type.clone(low))
          stored = convert;
    // A GEMM's result is rounded right away, and its forward readers read
    // the rounded values too (torch.autocast's linear layer returns them):
    // the GEMM can store 16 bits only (the fusion pass folds the rounding
    // into it), and no float32 copy lives while they run.
    Operation *def = v.getDefiningOp();
    if (!stored && isLinearOutput(v, low)) {
      b.setInsertionPointAfter(def);
      stored = b.create<ConvertOp>(v.getLoc(), type.clone(low), v);
      auto forward = b.create<ConvertOp>(v.getLoc(), type, stored);
      v.replaceUsesWithIf(forward, [&](OpOperand &use) {
        Operation *user = use.getOwner();
        return user != stored.getDefiningOp() && user != forward &&
               !isBackwardOp(user);
      });
    }
    if (!stored) {
      b.setInsertionPointAfter(lastForward);
      stored = b.create<ConvertOp>(v.getLoc(), type.clone(low), v);
    }
    b.setInsertionPoint(firstBackward);
    auto widened = b.create<ConvertOp>(v.getLoc(), type, stored);
    widened->setAttr(attr::kBackward, b.getUnitAttr());
    v.replaceUsesWithIf(widened, [&](OpOperand &use) {
      return use.getOwner() != stored.getDefiningOp() &&
             use.getOwner() != widened && isBackwardOp(use.getOwner());
    });
  }
}

/// Replaces the conversions of a parameter by its 16-bit copy `copy`.
void replaceConversions(ArrayRef<ConvertOp> converts, Value copy) {
  for (ConvertOp convert : converts) {
    convert.replaceAllUsesWith(copy);
    convert.erase();
  }
}

/// The conversions to `low` of `param`.
SmallVector<ConvertOp> conversionsTo(Value param, Type low) {
  SmallVector<ConvertOp> converts;
  for (Operation *user : param.getUsers())
    if (auto convert = dyn_cast<ConvertOp>(user);
        convert && getElementTypeOrSelf(convert.getType()) == low)
      converts.push_back(convert);
  return converts;
}

/// Whether the evaluation function reads its parameter named `name` only
/// through conversions to `low` (or not at all).
bool onlyConvertedInEval(func::FuncOp eval, StringAttr name, Type low) {
  for (BlockArgument param : eval.getArguments())
    if (name && eval.getArgAttr(param.getArgNumber(), attr::kName) == name)
      return conversionsTo(param, low).size() ==
             static_cast<size_t>(llvm::range_size(param.getUsers()));
  return true;
}

/// Makes the evaluation function read the 16-bit copy of its parameter named
/// `name` (described by `attrs`, whose owner becomes the evaluation
/// function's parameter) instead of converting the parameter.
void readCopyInEval(func::FuncOp eval, StringAttr name, Type low,
                    ArrayRef<NamedAttribute> attrs) {
  for (BlockArgument param : eval.getArguments()) {
    unsigned i = param.getArgNumber();
    if (!name || eval.getArgAttr(i, attr::kName) != name)
      continue;
    SmallVector<ConvertOp> converts = conversionsTo(param, low);
    if (converts.empty())
      return;
    OpBuilder b(eval.getContext());
    NamedAttrList copyAttrs(attrs);
    copyAttrs.set(attr::kOwner, b.getI64IntegerAttr(i));
    unsigned index = eval.getNumArguments();
    (void)eval.insertArgument(
        index, cast<RankedTensorType>(param.getType()).clone(low),
        copyAttrs.getDictionary(eval.getContext()), param.getLoc());
    replaceConversions(converts, eval.getArgument(index));
    return;
  }
}

/// A parameter that the step converts to `low` (for its GEMMs) gets a
/// 16-bit copy beside it, an argument of its own (role param_copy) that the
/// GEMMs read instead of a conversion made every step: its AdamW update
/// writes the new parameter rounded into it (new_param16, tied to the copy,
/// after the copy's last reader), a frozen parameter's copy is formed once
/// by the trainer at start-up. The numbers do not change: the copy holds
/// what the conversion computed. Each step then reads 4 and writes 2 bytes
/// less per such parameter element (the conversion's pass; the update
/// writes 2 more), and runs one kernel less per parameter; the copies live
/// through the whole step instead of from their first forward use to their
/// last backward use. Parameters updated by SGD keep their conversions.
/// The evaluation function `eval` (if any) reads the copies too, through
/// arguments of their names: a frozen parameter that only GEMMs read is then
/// read by neither function, and stays out of the arena (staysOffArena).
/// With `onlyLeavingArena` (frozen-copies without parameter-copies), only
/// such weights get copies: the copy then saves half of what the weight
/// took, where other copies would add to the arena.
void PrecisionPass::keepParameterCopies(func::FuncOp func, func::FuncOp eval,
                                        Type low, bool onlyLeavingArena) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  const unsigned numArgs = func.getNumArguments();
  DenseSet<int64_t> written; // buffers the step updates (running statistics)
  for (unsigned r = 0; r < func.getNumResults(); ++r)
    if (auto tied = func.getResultAttrOfType<IntegerAttr>(r, attr::kTied))
      written.insert(tied.getInt());
  for (unsigned i = 0; i < numArgs; ++i) {
    BlockArgument param = func.getArgument(i);
    auto role = func.getArgAttrOfType<StringAttr>(i, attr::kRole);
    // Parameters, and frozen weights (buffers no update writes).
    if (!role ||
        !(role.getValue() == attr::role::kParam ||
          (role.getValue() == attr::role::kBuffer && !written.contains(i))))
      continue;
    SmallVector<ConvertOp> converts;
    AdamWUpdateOp update;
    bool otherUpdate = false;
    for (Operation *user : param.getUsers()) {
      if (auto convert = dyn_cast<ConvertOp>(user);
          convert && getElementTypeOrSelf(convert.getType()) == low)
        converts.push_back(convert);
      else if (auto adamw = dyn_cast<AdamWUpdateOp>(user);
               adamw && adamw.getParam() == param && !adamw.getParam16())
        update = adamw;
      else if (user->hasAttr(attr::kOptimizer))
        otherUpdate = true;
    }
    if (converts.empty() || otherUpdate)
      continue;
    auto name = func.getArgAttrOfType<StringAttr>(i, attr::kName);
    if (onlyLeavingArena &&
        (role.getValue() != attr::role::kBuffer ||
         converts.size() !=
             static_cast<size_t>(llvm::range_size(param.getUsers())) ||
         (eval && !onlyConvertedInEval(eval, name, low))))
      continue;

    OpBuilder b(func.getContext());
    auto type = cast<RankedTensorType>(param.getType()).clone(low);
    NamedAttribute attrs[] = {
        b.getNamedAttr(attr::kRole, b.getStringAttr(attr::role::kParamCopy)),
        b.getNamedAttr(attr::kOwner, b.getI64IntegerAttr(i)),
        b.getNamedAttr(attr::kName,
                       b.getStringAttr((name ? name.getValue() : StringRef()) +
                                       (low.isBF16() ? ".bf16" : ".f16")))};
    unsigned index = func.getNumArguments();
    (void)func.insertArgument(index, type, b.getDictionaryAttr(attrs),
                              param.getLoc());
    BlockArgument copy = func.getArgument(index);
    replaceConversions(converts, copy);
    if (eval)
      readCopyInEval(eval, name, low, attrs);
    if (!update)
      continue;

    b.setInsertionPoint(update);
    auto rewritten = b.create<AdamWUpdateOp>(
        update.getLoc(),
        TypeRange{param.getType(), param.getType(), param.getType(), type},
        param, update.getGrad(), update.getExpAvg(), update.getExpAvgSq(),
        update.getGradStatus(), copy, update.getLrAttr(), update.getBeta1Attr(),
        update.getBeta2Attr(), update.getEpsAttr(),
        update.getWeightDecayAttr());
    for (NamedAttribute a : update->getDiscardableAttrs())
      rewritten->setAttr(a.getName(), a.getValue());
    for (unsigned r = 0; r < 3; ++r)
      update->getResult(r).replaceAllUsesWith(rewritten->getResult(r));
    update.erase();
    // It overwrites the copy: after the copy's last reader (the input
    // gradient's GEMM may come after the weight gradient's).
    for (Operation *user : copy.getUsers())
      if (user != rewritten && user->getBlock() == &body &&
          rewritten->isBeforeInBlock(user))
        rewritten->moveAfter(user);
    unsigned result = func.getNumResults();
    ret->insertOperands(ret.getNumOperands(), rewritten.getNewParam16());
    func.insertResult(
        result, type,
        b.getDictionaryAttr(
            {b.getNamedAttr(attr::kRole, b.getStringAttr(attr::role::kUpdate)),
             b.getNamedAttr(attr::kTied, b.getI64IntegerAttr(index))}));
  }
}

} // namespace
