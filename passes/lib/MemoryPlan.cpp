//===- MemoryPlan.cpp - One static arena for the whole step ---------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Every tensor of the step gets a fixed byte range in a single arena.
// Arguments (parameters, buffers, optimizer state) and constants persist
// across steps; a batch of an input, which the trainer writes before every
// step, lives from the step's start to its last reader (isBatchInput);
// values produced by ops live from their definition to their last use; results
// of the step live to its end; update results share the storage of the argument
// they are tied to; a reshape of a temporary is a view (one buffer for both,
// live until the last reader of either); a result its kernel can write over an
// operand (mtc::inPlaceSource) takes that operand's buffer when the operand
// dies at its op; kernel scratch lives only during its op. Placement is best
// fit against the already placed buffers whose lifetimes overlap, under several
// orders (by size, by lifetime, by both, by start); the smallest arena wins.
//
// Rows are padded to 16 bytes where a GEMM writes or reads them and their
// width is not a multiple of it (the logits over an odd vocabulary): GEMM
// kernels load 16-byte aligned rows (Hopper's tensor memory accelerator
// only takes strides that are multiples of 16 bytes), and cuBLAS runs
// slower kernels on other leading dimensions. A tensor is padded only when
// every op that reads or writes it, or a view of it, takes rows any number
// of elements apart (mtc::rowPitchUse); the padding is never read.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

#include <functional>

namespace mtc {
#define GEN_PASS_DEF_MEMORYPLANPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

/// A buffer to place: bytes and the op-index interval [start, end] it lives.
struct Buffer {
  int64_t bytes;
  int64_t start, end;
  int64_t offset = -1;
};

/// Whether a float32 -> 16-bit conversion's result `r` should take over its
/// input's bytes when the input dies there: only a backward-pass copy that
/// GEMMs multiplying 16-bit operands as stored read (the logits gradient's
/// copy for the output layer's GEMMs). Those need no scratch, so the peak
/// around them is at the conversion, where both copies would be live;
/// later the copy dies with its GEMMs. A forward value kept in 16 bits for
/// the backward pass, or a copy that a GEMM widens into a float32 scratch
/// (the CPU), would hold twice its bytes where the peak is.
bool narrowsInPlace(Value r) {
  if (!r.getDefiningOp()->hasAttr(attr::kBackward))
    return false;
  for (Operation *user : r.getUsers()) {
    if (isa<ReshapeOp>(user) && viewSource(user) == r) {
      if (!narrowsInPlace(user->getResult(0)))
        return false;
      continue;
    }
    if (!user->hasAttr(attr::kNative16BitGemm))
      return false;
  }
  return true;
}

int64_t alignTo(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// The row alignment GEMM kernels want (see the file comment).
constexpr int64_t kRowAlignment = 16;

/// Sets attr::kRowPitch on the ops of `body` whose results (with their
/// views, and a cross-entropy gradient with its logits, which it may
/// overwrite) are read and written only by kernels that take padded rows,
/// and whose rows are not a multiple of kRowAlignment bytes.
void assignRowPitches(Block &body) {
  for (Operation &op : body)
    op.removeAttr(attr::kRowPitch);
  // Tensors that must share one layout (a view and its source, a
  // cross-entropy gradient and the logits it may overwrite), as a
  // union-find over values.
  DenseMap<Value, Value> parent;
  std::function<Value(Value)> find = [&](Value v) -> Value {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v)
      return v;
    return it->second = find(it->second);
  };
  SmallVector<Value> candidates;
  SmallVector<std::pair<Value, Value>> joined;
  for (Operation &op : body.without_terminator())
    for (OpResult r : op.getResults()) {
      if (!rowPitchResult(r))
        continue;
      candidates.push_back(r);
      if (isa<ReshapeOp>(op))
        joined.push_back({r, viewSource(&op)});
      else if (auto ce = dyn_cast<SoftmaxCrossEntropyWithGradOp>(op))
        joined.push_back({r, ce.getLogits()});
    }
  for (auto [a, b] : joined)
    parent[find(a)] = find(b);
  // A group is padded when each of its tensors is written by a kernel that
  // takes padded rows and read only by such kernels.
  DenseMap<Value, bool> padded;
  for (Value v : candidates) {
    bool ok = llvm::all_of(v.getUses(),
                           [](OpOperand &use) { return rowPitchUse(use); });
    auto [it, inserted] = padded.try_emplace(find(v), ok);
    it->second = it->second && ok;
  }
  for (auto [a, b] : joined)
    if (!isa<OpResult>(b) || !rowPitchResult(cast<OpResult>(b)))
      padded[find(a)] = false;
  OpBuilder b(body.getParentOp());
  for (Value v : candidates) {
    if (!padded.lookup(find(v)))
      continue;
    auto type = cast<RankedTensorType>(v.getType());
    int64_t width = type.getShape().back();
    int64_t bytes = type.getElementType().getIntOrFloatBitWidth() / 8;
    int64_t pitch = alignTo(width * bytes, kRowAlignment) / bytes;
    if (type.getRank() < 2 || pitch == width)
      continue;
    Operation *def = v.getDefiningOp();
    SmallVector<int64_t> pitches(def->getNumResults(), 0);
    if (auto old = def->getAttrOfType<DenseI64ArrayAttr>(attr::kRowPitch))
      pitches.assign(old.asArrayRef().begin(), old.asArrayRef().end());
    pitches[cast<OpResult>(v).getResultNumber()] = pitch;
    def->setAttr(attr::kRowPitch, b.getDenseI64ArrayAttr(pitches));
  }
}

class MemoryPlanPass : public mtc::impl::MemoryPlanPassBase<MemoryPlanPass> {
public:
  using MemoryPlanPassBase::MemoryPlanPassBase;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>(function);
    if (!func) {
      getOperation().emitError() << "no @" << function
                                 << " to plan (run --mtc-autodiff first?)";
      return signalPassFailure();
    }
    if (alignment <= 0 || (alignment & (alignment - 1))) {
      func.emitError("alignment must be a positive power of two");
      return signalPassFailure();
    }
    if (failed(plan(func)))
      return signalPassFailure();
    if (auto eval =
            getOperation().lookupSymbol<func::FuncOp>(attr::kEvalFunction))
      if (failed(planEval(func, eval)))
        signalPassFailure();
  }

private:
  LogicalResult plan(func::FuncOp func);
  /// Places the evaluation function in the same arena: its arguments at the
  /// training step's offsets (by name), its constants clear of every buffer
  /// of the step, its temporaries clear of what persists across steps.
  LogicalResult planEval(func::FuncOp train, func::FuncOp eval);
};

/// A byte range that is taken during the whole function being placed.
using Region = std::pair<int64_t, int64_t>;

/// Places the buffers in `order`, each in the smallest gap that holds it
/// between the `fixed` regions and the buffers already placed that are
/// live at the same time (else above them all). Returns the end of the
/// highest placed buffer.
int64_t placeBestFit(MutableArrayRef<Buffer> buffers, ArrayRef<Region> fixed,
                     ArrayRef<unsigned> order) {
  int64_t arena = 0;
  SmallVector<unsigned> placed;
  SmallVector<Region> taken;
  for (unsigned i : order) {
    Buffer &buf = buffers[i];
    taken.assign(fixed.begin(), fixed.end());
    for (unsigned j : placed) {
      const Buffer &other = buffers[j];
      if (other.start <= buf.end && buf.start <= other.end)
        taken.push_back({other.offset, other.offset + other.bytes});
    }
    llvm::sort(taken);
    int64_t bestOffset = -1, bestGap = INT64_MAX, cursor = 0;
    for (auto [begin, end] : taken) {
      if (begin > cursor && begin - cursor >= buf.bytes &&
          begin - cursor < bestGap) {
        bestGap = begin - cursor;
        bestOffset = cursor;
      }
      cursor = std::max(cursor, end);
    }
    buf.offset = bestOffset >= 0 ? bestOffset : cursor;
    arena = std::max(arena, buf.offset + buf.bytes);
    placed.push_back(i);
  }
  return arena;
}

/// Best fit under several orders (largest first; longest-lived first;
/// largest size x lifetime first; by start, as a linear scan would): the
/// smallest arena wins, ties to the earlier order.
int64_t placeBuffers(MutableArrayRef<Buffer> buffers,
                     ArrayRef<Region> fixed = {}) {
  auto life = [&](unsigned i) {
    return buffers[i].end - buffers[i].start + 1;
  };
  using Key = std::function<bool(unsigned, unsigned)>;
  Key keys[] = {
      [&](unsigned a, unsigned b) { return buffers[a].bytes > buffers[b].bytes; },
      [&](unsigned a, unsigned b) { return life(a) > life(b); },
      [&](unsigned a, unsigned b) {
        return double(buffers[a].bytes) * life(a) >
               double(buffers[b].bytes) * life(b);
      },
      [&](unsigned a, unsigned b) {
        return buffers[a].start < buffers[b].start;
      },
  };
  SmallVector<int64_t> bestOffsets;
  int64_t best = INT64_MAX;
  for (const Key &key : keys) {
    SmallVector<unsigned> order(buffers.size());
    for (unsigned i = 0; i < order.size(); ++i)
      order[i] = i;
    // Ties: larger first, then earlier.
    llvm::stable_sort(order, [&](unsigned a, unsigned b) {
      if (key(a, b) != key(b, a))
        return key(a, b);
      if (buffers[a].bytes != buffers[b].bytes)
        return buffers[a].bytes > buffers[b].bytes;
      return buffers[a].start < buffers[b].start;
    });
    int64_t arena = placeBestFit(buffers, fixed, order);
    if (arena < best) {
      best = arena;
      bestOffsets.clear();
      for (const Buffer &buf : buffers)
        bestOffsets.push_back(buf.offset);
    }
  }
  for (auto [buf, offset] : llvm::zip(buffers, bestOffsets))
    buf.offset = offset;
  return best;
}

LogicalResult MemoryPlanPass::plan(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(func);
  assignRowPitches(body);

  DenseMap<Operation *, int64_t> index;
  int64_t numOps = numberKernels(body, index);
  int64_t last = numOps - 1;

  SmallVector<Buffer> buffers;
  DenseMap<Value, unsigned> bufferOf;
  SmallVector<std::pair<Operation *, unsigned>> workspaces;

  // The last op reading `v` (at least `end`); results of the step are read
  // by the trainer after it.
  auto lastUse = [&](Value v, int64_t end) {
    for (Operation *user : v.getUsers())
      end = std::max(end, index.lookup(user));
    return llvm::is_contained(ret.getOperands(), v) ? last : end;
  };
  auto addValue = [&](Value v, int64_t start, bool persistent) {
    int64_t end = persistent ? last : lastUse(v, start);
    if (persistent)
      start = 0;
    bufferOf[v] = buffers.size();
    buffers.push_back({alignTo(storageBytes(v), alignment), start, end});
  };

  // What neither the step nor the evaluation function reads and the trainer
  // keeps on the host (a built-in causal mask, a frozen parameter whose
  // GEMMs read its 16-bit copy) takes no bytes.
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    func.removeArgAttr(i, attr::kNotInArena);
    if (staysOffArena(arg)) {
      func.setArgAttr(i, attr::kNotInArena, b.getUnitAttr());
      continue;
    }
    addValue(arg, 0, /*persistent=*/!isBatchInput(arg));
  }

  // Update results overwrite their tied argument in place, which is only
  // sound when the update is the argument's last reader.
  DenseMap<Value, unsigned> tiedTo;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto tied = func.getResultAttrOfType<IntegerAttr>(i, attr::kTied);
    if (!tied)
      continue;
    BlockArgument arg = func.getArgument(tied.getInt());
    Operation *def = v.getDefiningOp();
    if (!def)
      return func.emitError("tied result ") << i << " has no defining op";
    for (Operation *user : arg.getUsers())
      if (user != ret && index.lookup(user) > index.lookup(def))
        return def->emitOpError("overwrites argument ")
               << arg.getArgNumber() << " that is read after it";
    tiedTo[v] = bufferOf[arg];
  }

  // Bytes into its buffer where a value starts: an input written into a
  // concat's result (see mtc::concatPart) and views of it.
  DenseMap<Value, int64_t> within;
  for (Operation &op : body.without_terminator()) {
    bool constant = isa<ConstantOp>(op);
    for (Value r : op.getResults()) {
      auto it = tiedTo.find(r);
      if (it != tiedTo.end()) {
        bufferOf[r] = it->second;
        continue;
      }
      // A view shares its source's buffer, which lives as long as either.
      if (Value source = viewSource(&op); source && !tiedTo.count(source)) {
        unsigned shared = bufferOf[source];
        bufferOf[r] = shared;
        buffers[shared].end = lastUse(r, buffers[shared].end);
        if (within.count(source))
          within[r] = within[source];
        continue;
      }
      // An input of a concat written in place lives in the concat's
      // result, whose buffer starts with the first input computed.
      if (ConcatPart part = concatPart(r); part.concat) {
        Value whole = part.concat->getResult(0);
        if (!bufferOf.count(whole))
          addValue(whole, index[&op], /*persistent=*/false);
        bufferOf[r] = bufferOf[whole];
        within[r] =
            part.offset *
            getElementTypeOrSelf(whole.getType()).getIntOrFloatBitWidth() / 8;
        continue;
      }
      if (op.hasAttr(attr::kWrittenInPlace) && bufferOf.count(r))
        continue; // placed with its first input
      // A result written over an operand whose buffer dies here.
      if (Value source = inPlaceSource(cast<OpResult>(r));
          source && source.getDefiningOp() &&
          !isa<ConstantOp>(source.getDefiningOp()) && !tiedTo.count(source)) {
        unsigned shared = bufferOf[source];
        Buffer &buf = buffers[shared];
        // A narrowing conversion's result fits in its input's bytes, but
        // keeps all of them as long as it lives (see narrowsInPlace).
        int64_t bytes = alignTo(storageBytes(r), alignment);
        bool narrowing = isa<ConvertOp, SoftmaxCrossEntropyWithGradOp>(op) &&
                         narrowsInPlace(r);
        if (buf.end == index[&op] && rowPitch(r) == rowPitch(source) &&
            (buf.bytes == bytes || (narrowing && buf.bytes > bytes))) {
          bufferOf[r] = shared;
          buf.end = lastUse(r, buf.end);
          continue;
        }
      }
      addValue(r, index[&op], /*persistent=*/constant);
    }
    if (auto cost = dyn_cast<CostOpInterface>(op))
      if (int64_t scratch = cost.getWorkspaceBytes()) {
        workspaces.push_back({&op, buffers.size()});
        buffers.push_back({alignTo(scratch, alignment), index[&op],
                           index[&op]});
      }
  }

  // Lower bound: the most bytes live at any one op.
  SmallVector<int64_t> live(numOps + 1, 0);
  for (const Buffer &buf : buffers) {
    live[buf.start] += buf.bytes;
    live[buf.end + 1] -= buf.bytes;
  }
  int64_t lowerBound = 0, running = 0;
  for (int64_t i = 0; i < numOps; ++i) {
    running += live[i];
    lowerBound = std::max(lowerBound, running);
  }

  int64_t arena = placeBuffers(buffers);

  for (BlockArgument arg : body.getArguments()) {
    func.removeArgAttr(arg.getArgNumber(), attr::kOffset);
    if (bufferOf.count(arg))
      func.setArgAttr(arg.getArgNumber(), attr::kOffset,
                      b.getI64IntegerAttr(buffers[bufferOf[arg]].offset));
  }
  for (Operation &op : body.without_terminator()) {
    if (op.getNumResults() == 0)
      continue;
    SmallVector<int64_t> offsets;
    for (Value r : op.getResults())
      offsets.push_back(buffers[bufferOf[r]].offset + within.lookup(r));
    op.setAttr(attr::kOffsets, b.getDenseI64ArrayAttr(offsets));
  }
  for (auto [op, i] : workspaces)
    op->setAttr(attr::kWorkspace,
                b.getDenseI64ArrayAttr({buffers[i].offset, buffers[i].bytes}));
  func->setAttr(attr::kArenaSize, b.getI64IntegerAttr(arena));
  func->setAttr(attr::kLowerBound, b.getI64IntegerAttr(lowerBound));
  return success();
}

LogicalResult MemoryPlanPass::planEval(func::FuncOp train,
                                       func::FuncOp eval) {
  Block &trainBody = train.getBody().front();
  Block &body = eval.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(eval);
  assignRowPitches(body);

  // What the training step occupies: persistent regions and every region.
  SmallVector<Region> persistent, everything;
  llvm::StringMap<int64_t> argOffsets;
  llvm::StringSet<> notInArena; // read by neither function
  for (BlockArgument arg : trainBody.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (train.getArgAttr(i, attr::kNotInArena)) {
      if (auto name = train.getArgAttrOfType<StringAttr>(i, attr::kName))
        notInArena.insert(name.getValue());
      continue;
    }
    int64_t offset =
        train.getArgAttrOfType<IntegerAttr>(i, attr::kOffset).getInt();
    int64_t bytes = alignTo(getTensorBytes(arg.getType()), alignment);
    persistent.push_back({offset, offset + bytes});
    if (auto name = train.getArgAttrOfType<StringAttr>(i, attr::kName))
      argOffsets[name.getValue()] = offset;
  }
  everything = persistent;
  for (Operation &op : trainBody.without_terminator()) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(attr::kOffsets);
    for (auto [r, offset] : llvm::zip(op.getResults(), offsets.asArrayRef())) {
      Region region{offset, offset + alignTo(storageBytes(r), alignment)};
      everything.push_back(region);
      if (isa<ConstantOp>(op))
        persistent.push_back(region);
    }
    if (auto ws = op.getAttrOfType<DenseI64ArrayAttr>(attr::kWorkspace))
      everything.push_back({ws[0], ws[0] + ws[1]});
  }

  for (BlockArgument arg : body.getArguments()) {
    auto name = eval.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  attr::kName);
    auto it = name ? argOffsets.find(name.getValue()) : argOffsets.end();
    if (name && notInArena.contains(name.getValue()))
      continue; // unread here too (staysOffArena)
    if (it == argOffsets.end())
      return eval.emitError("evaluation argument ")
             << arg.getArgNumber() << " has no counterpart in @train_step";
    eval.setArgAttr(arg.getArgNumber(), attr::kOffset,
                    b.getI64IntegerAttr(it->second));
  }

  DenseMap<Operation *, int64_t> index;
  int64_t numOps = numberKernels(body, index);
  int64_t last = numOps - 1;

  // Constants first: they are written once at start-up, so nothing of the
  // training step may share their bytes.
  SmallVector<Buffer> constants;
  SmallVector<Operation *> constantOps;
  for (Operation &op : body.without_terminator())
    if (isa<ConstantOp>(op)) {
      constants.push_back({alignTo(getTensorBytes(op.getResult(0).getType()),
                                   alignment),
                           0, last});
      constantOps.push_back(&op);
    }
  int64_t extent = placeBuffers(constants, everything);
  for (const Buffer &c : constants)
    persistent.push_back({c.offset, c.offset + c.bytes});

  SmallVector<Buffer> buffers;
  DenseMap<Value, unsigned> bufferOf;
  SmallVector<std::pair<Operation *, unsigned>> workspaces;
  for (Operation &op : body.without_terminator()) {
    if (isa<ConstantOp>(op))
      continue;
    for (Value r : op.getResults()) {
      int64_t start = index[&op], end = start;
      for (Operation *user : r.getUsers())
        end = std::max(end, index.lookup(user));
      if (llvm::is_contained(ret.getOperands(), r))
        end = last;
      if (Value source = viewSource(&op)) {
        unsigned shared = bufferOf[source];
        bufferOf[r] = shared;
        buffers[shared].end = std::max(buffers[shared].end, end);
        continue;
      }
      bufferOf[r] = buffers.size();
      buffers.push_back({alignTo(storageBytes(r), alignment), start, end});
    }
    if (auto cost = dyn_cast<CostOpInterface>(op))
      if (int64_t scratch = cost.getWorkspaceBytes()) {
        workspaces.push_back({&op, buffers.size()});
        buffers.push_back(
            {alignTo(scratch, alignment), index[&op], index[&op]});
      }
  }
  extent = std::max(extent, placeBuffers(buffers, persistent));

  for (auto [op, c] : llvm::zip(constantOps, constants))
    op->setAttr(attr::kOffsets, b.getDenseI64ArrayAttr({c.offset}));
  for (Operation &op : body.without_terminator()) {
    if (isa<ConstantOp>(op) || op.getNumResults() == 0)
      continue;
    SmallVector<int64_t> offsets;
    for (Value r : op.getResults())
      offsets.push_back(buffers[bufferOf[r]].offset);
    op.setAttr(attr::kOffsets, b.getDenseI64ArrayAttr(offsets));
  }
  for (auto [op, i] : workspaces)
    op->setAttr(attr::kWorkspace,
                b.getDenseI64ArrayAttr({buffers[i].offset, buffers[i].bytes}));
  int64_t arena = std::max(
      extent, train->getAttrOfType<IntegerAttr>(attr::kArenaSize).getInt());
  train->setAttr(attr::kArenaSize, b.getI64IntegerAttr(arena));
  eval->setAttr(attr::kArenaSize, b.getI64IntegerAttr(extent));
  return success();
}

} // namespace
