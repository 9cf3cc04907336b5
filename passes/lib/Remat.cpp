//===- Remat.cpp - Recompute activations to fit a memory budget -----------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// When the most bytes live at one point of the step exceed the budget, some
// forward value that is live there only because the backward pass needs it
// later is dropped after its last forward use and recomputed (its producer
// cloned) just before its first backward use. Each round takes, among the
// values live at the current peak, the one that frees the most bytes per
// recomputed FLOP, GEMMs and convolutions last; rounds repeat until the peak
// fits or nothing is left to recompute.
//
// Recomputation is numerically invisible: the clone runs the same kernel on
// the same inputs (dropout regenerates its mask from the seed, the step and
// its stream). Only clones whose inputs are still live where they run are
// considered, so no other lifetime grows.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace mtc {
#define GEN_PASS_DEF_REMATPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

int64_t alignTo(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// Liveness of the step in op order: where each value is defined and last
/// used, and the bytes live at each op.
struct Liveness {
  DenseMap<Operation *, int64_t> index;
  DenseMap<Value, int64_t> lastUse;
  std::vector<int64_t> live;
  int64_t peakIndex = 0;
  int64_t peak = 0;
};

Liveness analyze(func::FuncOp func, int64_t alignment) {
  Liveness l;
  Block &body = func.getBody().front();
  int64_t n = 0;
  for (Operation &op : body)
    l.index[&op] = n++;
  int64_t last = n - 1;
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  DenseSet<Value> tied;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (func.getResultAttr(i, attr::kTied))
      tied.insert(v);
  std::vector<int64_t> delta(n + 1, 0);
  auto add = [&](int64_t from, int64_t to, int64_t bytes) {
    delta[from] += bytes;
    delta[to + 1] -= bytes;
  };
  for (BlockArgument arg : body.getArguments())
    add(0, last, alignTo(getTensorBytes(arg.getType()), alignment));
  for (Operation &op : body.without_terminator()) {
    int64_t i = l.index[&op];
    if (auto cost = dyn_cast<CostOpInterface>(op))
      if (int64_t scratch = cost.getWorkspaceBytes())
        add(i, i, alignTo(scratch, alignment));
    for (Value v : op.getResults()) {
      int64_t end = i;
      for (Operation *user : v.getUsers())
        end = std::max(end, l.index.lookup(user));
      l.lastUse[v] = end;
      if (tied.contains(v))
        continue;
      if (isa<ConstantOp>(op))
        add(0, last, alignTo(getTensorBytes(v.getType()), alignment));
      else
        add(i, end, alignTo(getTensorBytes(v.getType()), alignment));
    }
  }
  l.live.assign(n, 0);
  int64_t running = 0;
  for (int64_t i = 0; i < n; ++i) {
    running += delta[i];
    l.live[i] = running;
    if (running > l.peak) {
      l.peak = running;
      l.peakIndex = i;
    }
  }
  return l;
}

class RematPass : public mtc::impl::RematPassBase<RematPass> {
public:
  using RematPassBase::RematPassBase;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!func || budget <= 0)
      return;
    int64_t recomputed = 0, flops = 0;
    Liveness l = analyze(func, alignment);
    while (l.peak > budget) {
      if (!recomputeOne(func, l, flops))
        break;
      ++recomputed;
      l = analyze(func, alignment);
    }
    OpBuilder b(func);
    func->setAttr(attr::kRematPeak, b.getI64IntegerAttr(l.peak));
    func->setAttr(attr::kRecomputeFlops, b.getI64IntegerAttr(flops));
  }

private:
  /// Recomputes the best candidate live at the peak; false when none is.
  bool recomputeOne(func::FuncOp func, const Liveness &l, int64_t &flops);
};

bool RematPass::recomputeOne(func::FuncOp func, const Liveness &l,
                             int64_t &flops) {
  Block &body = func.getBody().front();
  int64_t p = l.peakIndex;
  // Arguments overwritten in place (parameters, optimizer state) hold their
  // old value only until their update runs.
  DenseMap<Value, int64_t> overwrittenAt;
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (auto tied = func.getResultAttrOfType<IntegerAttr>(i, attr::kTied))
      if (Operation *def = v.getDefiningOp())
        overwrittenAt[func.getArgument(tied.getInt())] = l.index.lookup(def);
  Operation *best = nullptr, *bestAt = nullptr;
  double bestScore = -1;
  for (Operation &op : body.without_terminator()) {
    int64_t d = l.index.lookup(&op);
    if (d >= p)
      break;
    if (op.getNumResults() != 1 || isa<ConstantOp>(op) ||
        op.hasAttr(attr::kBackward) || op.hasAttr(attr::kOptimizer) ||
        !isa<CostOpInterface>(op))
      continue;
    Value v = op.getResult(0);
    // Live at the peak only for uses after it.
    Operation *firstLate = nullptr;
    bool usedAtPeak = false;
    for (Operation *user : v.getUsers()) {
      int64_t u = l.index.lookup(user);
      if (u == p)
        usedAtPeak = true;
      if (u > p && (!firstLate || u < l.index.lookup(firstLate)))
        firstLate = user;
    }
    if (usedAtPeak || !firstLate || isa<func::ReturnOp>(firstLate))
      continue;
    // The clone's inputs must still be live where it runs.
    int64_t q = l.index.lookup(firstLate);
    bool available = llvm::all_of(op.getOperands(), [&](Value o) {
      if (isa<BlockArgument>(o)) {
        auto it = overwrittenAt.find(o);
        return it == overwrittenAt.end() || it->second > q;
      }
      return l.lastUse.lookup(o) >= q;
    });
    if (!available)
      continue;
    int64_t cost = cast<CostOpInterface>(op).getFlops();
    // GEMMs and convolutions only when cheaper choices ran out.
    if (isa<GemmOp, MatMulOp, ConvOp>(op))
      cost = cost * 1000 + (int64_t(1) << 40);
    double score = double(getTensorBytes(v.getType())) / double(cost + 1);
    if (score > bestScore) {
      bestScore = score;
      best = &op;
      bestAt = firstLate;
    }
  }
  if (!best)
    return false;
  OpBuilder b(bestAt);
  Operation *clone = b.clone(*best);
  clone->setAttr(attr::kRecompute, b.getUnitAttr());
  clone->setAttr(attr::kBackward, b.getUnitAttr());
  Value original = best->getResult(0);
  int64_t q = l.index.lookup(bestAt);
  original.replaceUsesWithIf(clone->getResult(0), [&](OpOperand &use) {
    Operation *user = use.getOwner();
    return user != clone && l.index.count(user) && l.index.lookup(user) >= q;
  });
  flops += cast<CostOpInterface>(best).getFlops();
  return true;
}

} // namespace
