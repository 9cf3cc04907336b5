//===- AttentionFusion.cpp - Softmax attention as one fused op ------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs on the imported model, before autodiff. Attention as exporters write
// it is a chain over the [..., Sq, Sk] score matrix:
//
//   s = matmul(Q, K^T) (* or / a scalar constant)
//   s = select(mask, -inf, s)                        (optional)
//   p = softmax(s, last axis)
//   p = dropout(p)                                   (optional)
//   o = matmul(p, V)
//
// Unfused, the forward stores the scores and the probabilities, and the
// backward holds as many: Sq x Sk per head, which at sequence 1024 is most
// of a transformer's activation memory. The chain becomes one mtc.attention
// (output and per-row log-sum-exp, linear in the sequence length) whose
// gradient recomputes the probabilities tile by tile.
//
// A scale that divides or multiplies Q instead of the scores folds in as
// well. K^T may be a transpose of K (composed with K's own transpose when
// it has one), a transpose_b matmul, or any tensor (then transposed once).
// Every value of the chain must have no other reader: a model that returns
// its attention weights keeps them.
//
// Exporters split the heads out of projections laid out [..., S, H*D] with
// a reshape and a transpose to [..., H, S, D], and merge them back the same
// way. When query, key and value all come from such transposes and the
// output's one reader transposes it back, the attention takes the
// [..., S, H, D] values as they are (`seq_major`): the four copies
// disappear, and the kernels read and write rows where the projections put
// them.
//
// A mask whose values are fixed when compiling is evaluated here. When it
// hides exactly the keys after each query, as GPT's tril buffer does, the
// op becomes `causal` and takes no mask: the kernels read none and skip
// the chunks it hides by their position. A causal mask may also fill with
// a finite value of -1e30 or below (Hugging Face's GPT-2 uses the lowest
// float): every query keeps its own key, so those scores' probabilities
// are 0 as with -inf. The buffer's values are then part
// of the program; the trainer checks a loaded checkpoint against them.
//
//===----------------------------------------------------------------------===//

#include "ScalarConstant.h"
#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Matchers.h"

#include <cmath>
#include <cstring>

namespace mtc {
#define GEN_PASS_DEF_ATTENTIONFUSIONPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

bool hasOneUse(Value v) { return v.hasOneUse(); }

/// `v` = x * c, c * x or x / c with c a scalar constant and x of v's shape:
/// x and the factor c (or 1 / c).
std::optional<std::pair<Value, float>> scaledBy(Value v) {
  Operation *op = v.getDefiningOp();
  if (!op || !isa<MulOp, DivOp>(op))
    return std::nullopt;
  Value a = op->getOperand(0), b = op->getOperand(1);
  if (isa<MulOp>(op) && scalarConstant(a) && shapeOf(b) == shapeOf(v))
    std::swap(a, b);
  std::optional<float> c = scalarConstant(b);
  if (!c || shapeOf(a) != shapeOf(v))
    return std::nullopt;
  return std::make_pair(a, isa<DivOp>(op) ? 1.0f / *c : *c);
}

/// The swap of the last two dims of a rank-`rank` tensor.
SmallVector<int64_t> swapLastTwo(int64_t rank) {
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i)
    perm.push_back(i);
  std::swap(perm[rank - 2], perm[rank - 1]);
  return perm;
}

/// K ([..., Sk, D]) from the right operand of the score matmul, built at
/// `b`'s insertion point: the operand itself under transpose_b, else its
/// transpose, composed with the transpose that made it if there is one.
Value keyFrom(OpBuilder &b, MatMulOp scores) {
  Value rhs = scores.getB();
  if (scores.getTransposeB())
    return rhs;
  int64_t rank = shapeOf(rhs).size();
  SmallVector<int64_t> perm = swapLastTwo(rank);
  Value source = rhs;
  if (auto t = rhs.getDefiningOp<TransposeOp>()) {
    // out.shape[i] = in.shape[perm[i]]: transposing twice composes.
    ArrayRef<int64_t> inner = t.getPerm();
    SmallVector<int64_t> composed;
    for (int64_t i : perm)
      composed.push_back(inner[i]);
    perm = composed;
    source = t.getInput();
  }
  if (llvm::equal(perm, llvm::seq<int64_t>(0, rank)))
    return source;
  return b.create<TransposeOp>(scores.getLoc(), source,
                               b.getDenseI64ArrayAttr(perm));
}

/// Whether `perm` swaps the last-but-one and last-but-two dims of a tensor
/// of rank >= 3 ([..., S, H, D] <-> [..., H, S, D]) and keeps the others.
bool swapsSeqAndHeads(ArrayRef<int64_t> perm) {
  int64_t rank = perm.size();
  if (rank < 3)
    return false;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t want = i == rank - 3 ? rank - 2 : i == rank - 2 ? rank - 3 : i;
    if (perm[i] != want)
      return false;
  }
  return true;
}

/// The [..., S, H, D] value a head split transposed into `v`, or null.
Value seqMajorSource(Value v) {
  auto t = v.getDefiningOp<TransposeOp>();
  return t && swapsSeqAndHeads(t.getPerm()) ? t.getInput() : Value();
}

//===----------------------------------------------------------------------===//
// Masks known when compiling
//===----------------------------------------------------------------------===//

/// A tensor whose values are fixed when compiling, row-major.
struct KnownTensor {
  SmallVector<int64_t> shape;
  std::vector<double> values;
};

/// Fills at or below this mask like -inf where every query keeps a key
/// (Hugging Face's GPT-2 fills with the lowest float): exp(fill - m) is 0
/// in float32 for any score m above -1e30 + 104, as exp(-inf) is.
constexpr float kFiniteFill = -1e30f;

/// The most elements a mask evaluated when compiling may have (a causal
/// mask over 4096 positions).
constexpr int64_t kMaxKnownElements = int64_t(1) << 24;

/// Whether every value derived from `v` is a comparison's boolean result:
/// each use compares it, or views it (slice, reshape, expand) for uses that
/// do. No gradient reaches such a value, so no optimizer changes it.
bool onlyFeedsComparisons(Value v) {
  for (Operation *user : v.getUsers()) {
    if (isa<CompareOp>(user))
      continue;
    if (isa<SliceOp, ReshapeOp, ExpandOp>(user) &&
        onlyFeedsComparisons(user->getResult(0)))
      continue;
    return false;
  }
  return true;
}

/// The values of a float, integer or boolean elements attribute.
std::optional<std::vector<double>> elementValues(ElementsAttr attr) {
  Type element = attr.getElementType();
  int64_t count = attr.getNumElements();
  std::vector<double> out;
  out.reserve(count);
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(attr)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob || !element.isF32())
      return std::nullopt;
    ArrayRef<char> data = blob->getData();
    if (static_cast<int64_t>(data.size()) != count * 4)
      return std::nullopt;
    for (int64_t n = 0; n < count; ++n) {
      float x;
      std::memcpy(&x, data.data() + 4 * n, 4);
      out.push_back(x);
    }
    return out;
  }
  auto dense = dyn_cast<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  if (isa<FloatType>(element)) {
    for (APFloat x : dense.getValues<APFloat>())
      out.push_back(x.convertToDouble());
  } else if (element.isInteger(1)) {
    for (bool x : dense.getValues<bool>())
      out.push_back(x ? 1.0 : 0.0);
  } else if (isa<IntegerType>(element)) {
    for (APInt x : dense.getValues<APInt>())
      out.push_back(static_cast<double>(x.getSExtValue()));
  } else {
    return std::nullopt;
  }
  return out;
}

/// `t`'s values broadcast (NumPy rules) to `shape`.
std::vector<double> broadcastTo(KnownTensor t, ArrayRef<int64_t> shape) {
  int64_t rank = shape.size(), offset = rank - t.shape.size();
  // t's stride along each dim of `shape` (0 where it is broadcast).
  SmallVector<int64_t> strides(rank, 0);
  for (int64_t d = rank - 1, stride = 1; d >= offset; --d) {
    int64_t extent = t.shape[d - offset];
    strides[d] = extent == 1 ? 0 : stride;
    stride *= extent;
  }
  int64_t total = 1;
  for (int64_t extent : shape)
    total *= extent;
  // The common cases, without index arithmetic: as many elements (only
  // leading 1s differ) or one.
  if (static_cast<int64_t>(t.values.size()) == total)
    return std::move(t.values);
  if (t.values.size() == 1)
    return std::vector<double>(total, t.values.front());
  std::vector<double> out(total);
  for (int64_t n = 0; n < total; ++n) {
    int64_t rest = n, at = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      at += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    out[n] = t.values[at];
  }
  return out;
}

/// The argument that holds `arg`'s initial value: `arg` itself, or for an
/// argument of the evaluation function (whose initial values the driver
/// moves to the training step) the training function's argument of the
/// same name.
std::optional<BlockArgument> initializerArgument(BlockArgument arg) {
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  if (!func)
    return std::nullopt;
  if (func.getSymName() != attr::kEvalFunction)
    return arg;
  auto name =
      func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr::kName);
  auto module = func->getParentOfType<ModuleOp>();
  auto train =
      module ? module.lookupSymbol<func::FuncOp>("forward") : func::FuncOp();
  if (!name || !train)
    return std::nullopt;
  for (BlockArgument candidate : train.getArguments())
    if (train.getArgAttr(candidate.getArgNumber(), attr::kName) == name)
      return candidate;
  return std::nullopt;
}

/// The values of `v` if they are fixed when compiling: constants, and
/// float initializers that only feed comparisons and that no result of the
/// function overwrites, through comparisons, not, slices, reshapes and
/// expands. Appends the initializers read to `read`.
std::optional<KnownTensor> knownValue(Value v,
                                      SmallVectorImpl<BlockArgument> &read) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape() ||
      type.getNumElements() > kMaxKnownElements)
    return std::nullopt;
  KnownTensor out;
  out.shape.assign(type.getShape().begin(), type.getShape().end());
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto source = initializerArgument(arg);
    if (!source || !onlyFeedsComparisons(arg))
      return std::nullopt;
    auto func = cast<func::FuncOp>(source->getOwner()->getParentOp());
    unsigned index = source->getArgNumber();
    auto init = func.getArgAttrOfType<ElementsAttr>(index, attr::kInit);
    if (!init || !onlyFeedsComparisons(*source))
      return std::nullopt;
    for (unsigned r = 0; r < func.getNumResults(); ++r)
      if (auto tied = func.getResultAttrOfType<IntegerAttr>(r, attr::kTied);
          tied && tied.getInt() == index)
        return std::nullopt;
    auto values = elementValues(init);
    if (!values)
      return std::nullopt;
    out.values = std::move(*values);
    read.push_back(*source);
    return out;
  }
  Operation *op = v.getDefiningOp();
  if (auto constant = dyn_cast_or_null<ConstantOp>(op)) {
    auto values = elementValues(constant.getValue());
    if (!values)
      return std::nullopt;
    out.values = std::move(*values);
    return out;
  }
  if (auto negation = dyn_cast_or_null<NotOp>(op)) {
    auto input = knownValue(negation.getInput(), read);
    if (!input)
      return std::nullopt;
    for (double x : input->values)
      out.values.push_back(x != 0.0 ? 0.0 : 1.0);
    return out;
  }
  if (auto compare = dyn_cast_or_null<CompareOp>(op)) {
    auto lhs = knownValue(compare.getLhs(), read);
    auto rhs = lhs ? knownValue(compare.getRhs(), read) : std::nullopt;
    StringRef predicate = compare.getPredicate();
    if (!rhs || (predicate != "eq" && predicate != "lt" && predicate != "gt"))
      return std::nullopt;
    std::vector<double> a = broadcastTo(std::move(*lhs), out.shape),
                        b = broadcastTo(std::move(*rhs), out.shape);
    const bool eq = predicate == "eq", lt = predicate == "lt";
    for (size_t n = 0; n < a.size(); ++n) // in place: a holds the result
      a[n] = (eq ? a[n] == b[n] : lt ? a[n] < b[n] : a[n] > b[n]) ? 1.0 : 0.0;
    out.values = std::move(a);
    return out;
  }
  if (auto slice = dyn_cast_or_null<SliceOp>(op)) {
    auto input = knownValue(slice.getInput(), read);
    if (!input)
      return std::nullopt;
    ArrayRef<int64_t> starts = slice.getStarts(), steps = slice.getSteps(),
                      from = input->shape;
    int64_t rank = out.shape.size();
    for (int64_t n = 0, total = type.getNumElements(); n < total; ++n) {
      int64_t rest = n, at = 0, stride = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        at += (starts[d] + (rest % out.shape[d]) * steps[d]) * stride;
        rest /= out.shape[d];
        stride *= from[d];
      }
      out.values.push_back(input->values[at]);
    }
    return out;
  }
  if (isa_and_nonnull<ReshapeOp, ExpandOp>(op)) {
    auto input = knownValue(op->getOperand(0), read);
    if (!input)
      return std::nullopt;
    out.values = isa<ReshapeOp>(op) ? std::move(input->values)
                                    : broadcastTo(std::move(*input), out.shape);
    return out;
  }
  return std::nullopt;
}

/// Whether the mask `m` of [..., sq, sk] scores hides exactly the keys
/// after each query: score (i, j) of every head where j > i.
bool isCausal(const KnownTensor &m, int64_t sq, int64_t sk) {
  int64_t rank = m.shape.size();
  if (rank < 2 || m.shape[rank - 2] != sq || m.shape[rank - 1] != sk)
    return false;
  const double *at = m.values.data();
  for (int64_t head = 0, heads = m.values.size() / (sq * sk); head < heads;
       ++head)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j)
        if ((*at++ != 0.0) != (j > i))
          return false;
  return true;
}

class AttentionFusionPass
    : public mtc::impl::AttentionFusionPassBase<AttentionFusionPass> {
public:
  using AttentionFusionPassBase::AttentionFusionPassBase;

  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    bool changed = false;
    for (SoftmaxOp softmax : softmaxes)
      if (succeeded(fuse(softmax))) {
        ++numFused;
        changed = true;
      }
    // The -inf and scale constants the chains read.
    if (changed)
      getOperation().walk([](func::FuncOp f) {
        eraseDeadPureOps(f.getBody().front());
      });
  }

private:
  LogicalResult fuse(SoftmaxOp softmax);
};

LogicalResult AttentionFusionPass::fuse(SoftmaxOp softmax) {
  ArrayRef<int64_t> scoreShape = shapeOf(softmax.getOutput());
  int64_t rank = scoreShape.size();
  if (rank < 2 || static_cast<int64_t>(softmax.getAxis()) != rank - 1 ||
      !hasOneUse(softmax.getOutput()))
    return failure();
  // The ops to erase, each after its readers.
  SmallVector<Operation *> chain;

  // Forward from the probabilities: optional dropout, then P @ V.
  Operation *user = *softmax->getUsers().begin();
  float ratio = 0.0f;
  int64_t stream = 0;
  if (auto dropout = dyn_cast<DropoutOp>(user)) {
    if (!hasOneUse(dropout.getOutput()))
      return failure();
    ratio = dropout.getRatio().convertToFloat();
    stream = dropout.getStream();
    chain.push_back(dropout);
    user = *dropout->getUsers().begin();
  }
  chain.push_back(softmax);
  auto values = dyn_cast<MatMulOp>(user);
  if (!values || values.getA() != chain.front()->getResult(0) ||
      values.getTransposeA() || values.getTransposeB())
    return failure();
  Value v = values.getB();
  ArrayRef<int64_t> batch = scoreShape.drop_back(2);
  if (shapeOf(v).size() != static_cast<size_t>(rank) ||
      shapeOf(v).drop_back(2) != batch)
    return failure();

  // Backward from the scores: optional mask, optional scale, Q @ K^T.
  Value scores = softmax.getInput();
  Value mask;
  bool maskKeeps = false, finiteFill = false;
  if (auto select = scores.getDefiningOp<SelectOp>()) {
    auto fills = [&](Value v) {
      std::optional<float> c = scalarConstant(v);
      if (!c || *c > kFiniteFill)
        return false;
      finiteFill = !std::isinf(*c);
      return true;
    };
    Value rest;
    if (fills(select.getTrueValue()))
      rest = select.getFalseValue();
    else if (fills(select.getFalseValue()))
      rest = select.getTrueValue(), maskKeeps = true;
    if (!rest || shapeOf(rest) != scoreShape || !hasOneUse(scores))
      return failure();
    mask = select.getCondition();
    chain.push_back(select);
    scores = rest;
  }
  float scale = 1.0f;
  if (auto scaled = scaledBy(scores)) {
    if (!hasOneUse(scores))
      return failure();
    chain.push_back(scores.getDefiningOp());
    scale = scaled->second;
    scores = scaled->first;
  }
  auto product = scores.getDefiningOp<MatMulOp>();
  if (!product || product.getTransposeA() || !hasOneUse(scores))
    return failure();
  chain.push_back(product);
  Value q = product.getA();
  if (shapeOf(q).size() != static_cast<size_t>(rank) ||
      shapeOf(q).drop_back(2) != batch ||
      shapeOf(product.getB()).drop_back(2) != batch)
    return failure();
  if (shapeOf(q).back() > kMaxAttentionHeadDim ||
      shapeOf(v).back() > kMaxAttentionHeadDim)
    return failure();
  if (auto scaled = scaledBy(q); scaled && hasOneUse(q)) {
    chain.push_back(q.getDefiningOp());
    scale *= scaled->second;
    q = scaled->first;
  }

  // A mask fixed when compiling that hides the keys after each query.
  bool causal = false;
  SmallVector<BlockArgument> read;
  if (mask)
    if (auto known = knownValue(mask, read)) {
      if (maskKeeps)
        for (double &hidden : known->values)
          hidden = hidden == 0.0;
      causal = isCausal(*known, scoreShape[rank - 2], scoreShape[rank - 1]);
    }
  // A finite fill is -inf only where every query keeps a key.
  if (finiteFill && !causal)
    return failure();

  OpBuilder b(values);
  Value k = keyFrom(b, product);
  if (causal) {
    mask = Value(); // the comparisons are dead now
    for (BlockArgument arg : read)
      cast<func::FuncOp>(arg.getOwner()->getParentOp())
          .setArgAttr(arg.getArgNumber(), attr::kCompiledIn, b.getUnitAttr());
  } else if (maskKeeps) {
    mask = b.create<NotOp>(softmax.getLoc(), mask.getType(), mask);
  }
  // Heads split from, and merged back into, [..., S, H, D] values.
  Value output = values.getOutput();
  auto merge = output.hasOneUse()
                   ? dyn_cast<TransposeOp>(*output.getUsers().begin())
                   : TransposeOp();
  Value q0 = seqMajorSource(q), k0 = seqMajorSource(k),
        v0 = seqMajorSource(v);
  bool seqMajor = q0 && k0 && v0 && merge && swapsSeqAndHeads(merge.getPerm());
  auto attention = b.create<AttentionOp>(
      softmax.getLoc(), seqMajor ? q0 : q, seqMajor ? k0 : k, seqMajor ? v0 : v,
      mask, b.getF32FloatAttr(scale), b.getF32FloatAttr(ratio),
      b.getI64IntegerAttr(stream), seqMajor ? b.getUnitAttr() : UnitAttr(),
      causal ? b.getUnitAttr() : UnitAttr());
  numCausal += causal;
  if (seqMajor) {
    merge.getOutput().replaceAllUsesWith(attention.getOutput());
    merge.erase();
  } else {
    output.replaceAllUsesWith(attention.getOutput());
  }
  values.erase();
  Operation *keyTranspose = product.getB().getDefiningOp<TransposeOp>();
  for (Operation *op : chain)
    op->erase();
  if (keyTranspose && keyTranspose->use_empty())
    keyTranspose->erase();
  // With seq_major the head transposes (and the key transpose keyFrom
  // made) are dead now: runOnOperation erases them.
  return success();
}

} // namespace
