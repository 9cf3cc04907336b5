//===- Remat.h - The recomputation problem and its solver -------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Recomputation is decided on an abstract model of the training step, built
// from `@train_step` in op order:
//
//  - `live[k]`: the bytes live at op k with nothing recomputed;
//  - candidates: values of forward ops. A candidate u recomputed at op t
//    (its producer cloned right before op t, the clone serving every use
//    from t on) is dropped after its last use before t, so it frees `bytes`
//    at every op k with prev(t) < k < t where its original was live
//    (prev(t): its last use before t, or its definition). t comes after
//    every forward use; it is one of u's own uses, or earlier when a
//    recomputed consumer needs u sooner.
//  - a clone at t needs each input there: a block argument not yet
//    overwritten (`availableUntil >= t`), an original value still live
//    (`availableUntil >= t`), or another candidate recomputed at t' <= t.
//
// The cost of recomputing u is its producer's FLOPs. The solver minimizes
// the added FLOPs subject to max_k live'[k] <= budget. The model and its
// JSON form are what the test-only exact solver (an ILP) reads.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_PASSES_REMAT_H
#define MTC_PASSES_REMAT_H

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace mtc {

struct RematInput {
  /// Index of the candidate producing this input, or -1.
  int64_t candidate = -1;
  /// Last op index at which the original value is available.
  int64_t availableUntil = 0;
};

struct RematCandidate {
  std::string name; // the producing op, for reports
  int64_t bytes = 0;
  int64_t def = 0;
  int64_t lastForward = 0;
  /// Op indices of all uses, ascending (the last is where it dies).
  std::vector<int64_t> uses;
  int64_t flops = 0;

  int64_t lastUse() const { return uses.empty() ? def : uses.back(); }
  /// The last use before op t, or the definition.
  int64_t usedBefore(int64_t t) const;
  std::vector<RematInput> inputs;
};

struct RematProblem {
  std::vector<int64_t> live;
  std::vector<RematCandidate> candidates;
  int64_t forwardFlops = 0;

  int64_t peak() const;
};

struct RematSolution {
  /// Per candidate: the op index its clone runs before, or -1.
  std::vector<int64_t> cloneAt;
  int64_t peak = 0;
  int64_t flops = 0;
  int64_t recomputed = 0;
  double seconds = 0;
};

/// Builds the model of `func` (tensors aligned to `alignment` bytes).
RematProblem buildRematProblem(mlir::func::FuncOp func, int64_t alignment);

/// Recomputes until the peak fits `budget` or nothing is left to recompute:
/// a greedy pass (bytes freed at the peak per FLOP, recomputing the inputs a
/// clone needs along with it) followed by a pruning pass that undoes the
/// most expensive recomputations the budget does not need.
RematSolution solveRemat(const RematProblem &problem, int64_t budget);

/// The live bytes per op under `cloneAt`; empty when it is infeasible.
std::vector<int64_t> evaluateRemat(const RematProblem &problem,
                                   const std::vector<int64_t> &cloneAt);

/// Writes the model and the solutions (one per budget) as JSON; the one at
/// `compiled` (if any) is marked as the choice the compiled plan uses.
void writeRematJson(const RematProblem &problem,
                    const std::vector<std::pair<int64_t, RematSolution>> &solved,
                    llvm::raw_ostream &os, int64_t compiled = -1);

} // namespace mtc

#endif // MTC_PASSES_REMAT_H
