//===- Remat.cpp - Recompute activations to fit a memory budget -----------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Builds the recomputation model of `@train_step` (Remat.h), lets the solver
// choose what to recompute, and rewrites the IR: each chosen forward value
// gets a clone of its producer (marked `mtc.recompute`) right before the op
// the solver placed it at; every later use reads the clone. Clones of a
// chain are inserted in forward order, each reading the clones before it.
//
// Recomputation is numerically invisible: the clone runs the same kernel on
// the same inputs (dropout regenerates its mask from the seed, the step and
// its stream).
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"
#include "mtc/Passes/Remat.h"

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
  // Arguments count as live throughout, batch inputs too (the memory plan
  // frees those after their last reader): a recomputation may read one in
  // the backward pass, and this model need not follow how far that moves
  // its last reader; the peak it finds is then at or above the plan's.
  for (BlockArgument arg : body.getArguments())
    if (!staysOffArena(arg)) // the memory plan leaves those out
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

bool isBackward(Operation *op) {
  return op->hasAttr(attr::kBackward) || op->hasAttr(attr::kOptimizer) ||
         isa<func::ReturnOp>(op);
}

} // namespace

RematProblem mtc::buildRematProblem(func::FuncOp func, int64_t alignment) {
  Liveness l = analyze(func, alignment);
  RematProblem problem;
  problem.live = l.live;
  Block &body = func.getBody().front();
  // Arguments overwritten in place (parameters, optimizer state) hold their
  // old value only until their update runs.
  DenseMap<Value, int64_t> overwrittenAt;
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (auto tied = func.getResultAttrOfType<IntegerAttr>(i, attr::kTied))
      if (Operation *def = v.getDefiningOp())
        overwrittenAt[func.getArgument(tied.getInt())] = l.index.lookup(def);
  DenseMap<Value, int64_t> candidateOf;
  for (Operation &op : body.without_terminator()) {
    auto cost = dyn_cast<CostOpInterface>(op);
    if (cost && !isBackward(&op))
      problem.forwardFlops += cost.getFlops();
    if (!cost || op.getNumResults() != 1 || isa<ConstantOp>(op) ||
        isBackward(&op))
      continue;
    Value v = op.getResult(0);
    int64_t def = l.index.lookup(&op);
    RematCandidate c;
    c.lastForward = def;
    bool returned = false;
    for (Operation *user : v.getUsers()) {
      int64_t u = l.index.lookup(user);
      returned |= isa<func::ReturnOp>(user);
      c.uses.push_back(u);
      if (!isBackward(user))
        c.lastForward = std::max(c.lastForward, u);
    }
    if (returned)
      continue; // a result of the step is never dropped
    llvm::sort(c.uses);
    c.uses.erase(std::unique(c.uses.begin(), c.uses.end()), c.uses.end());
    c.name = op.getName().stripDialect().str();
    c.bytes = alignTo(getTensorBytes(v.getType()), alignment);
    c.def = def;
    c.flops = cost.getFlops();
    for (Value o : op.getOperands()) {
      RematInput in;
      if (isa<BlockArgument>(o)) {
        auto it = overwrittenAt.find(o);
        in.availableUntil = it == overwrittenAt.end()
                                ? int64_t(l.live.size())
                                : it->second;
      } else {
        in.availableUntil = l.lastUse.lookup(o);
        auto it = candidateOf.find(o);
        if (it != candidateOf.end())
          in.candidate = it->second;
      }
      c.inputs.push_back(in);
    }
    candidateOf[v] = problem.candidates.size();
    problem.candidates.push_back(std::move(c));
  }
  return problem;
}

namespace {

class RematPass : public mtc::impl::RematPassBase<RematPass> {
public:
  using RematPassBase::RematPassBase;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!func || budget <= 0)
      return;
    RematProblem problem = buildRematProblem(func, alignment);
    int64_t flops = 0;
    if (problem.peak() > budget) {
      RematSolution solution = solveRemat(problem, budget);
      flops = solution.flops;
      rewrite(func, problem, solution);
    }
    OpBuilder b(func);
    func->setAttr(attr::kRematPeak,
                  b.getI64IntegerAttr(analyze(func, alignment).peak));
    func->setAttr(attr::kRecomputeFlops, b.getI64IntegerAttr(flops));
  }

private:
  void rewrite(func::FuncOp func, const RematProblem &problem,
               const RematSolution &solution);
};

void RematPass::rewrite(func::FuncOp func, const RematProblem &problem,
                        const RematSolution &solution) {
  Block &body = func.getBody().front();
  std::vector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  DenseMap<Operation *, int64_t> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  // Candidates are numbered in op order, as buildRematProblem found them.
  std::vector<Operation *> producers;
  for (Operation *op : ops) {
    if (!isa<CostOpInterface>(op) || op->getNumResults() != 1 ||
        isa<ConstantOp>(op) || isBackward(op))
      continue;
    producers.push_back(op);
  }
  // Each recomputed value's clone and the op index it runs before. A clone
  // reads the clones of its inputs that run no later, else the originals.
  DenseMap<Value, std::pair<Value, int64_t>> clones;
  std::vector<std::pair<Value, int64_t>> replaced;
  size_t next = 0;
  for (auto [v, at] : llvm::enumerate(solution.cloneAt)) {
    // Find the producer of candidate v (candidates are a subsequence).
    const RematCandidate &c = problem.candidates[v];
    while (index[producers[next]] != c.def)
      ++next;
    if (at < 0)
      continue;
    Operation *original = producers[next];
    IRMapping operands;
    for (Value o : original->getOperands()) {
      auto it = clones.find(o);
      if (it != clones.end() && it->second.second <= at)
        operands.map(o, it->second.first);
    }
    OpBuilder b(ops[at]);
    Operation *clone = b.clone(*original, operands);
    clone->setAttr(attr::kRecompute, b.getUnitAttr());
    clone->setAttr(attr::kBackward, b.getUnitAttr());
    clones[original->getResult(0)] = {clone->getResult(0), at};
    replaced.push_back({original->getResult(0), at});
  }
  for (auto [value, at] : replaced) {
    Value clone = clones.lookup(value).first;
    value.replaceUsesWithIf(clone, [&](OpOperand &use) {
      auto it = index.find(use.getOwner());
      return it != index.end() && it->second >= at;
    });
  }
}

} // namespace
