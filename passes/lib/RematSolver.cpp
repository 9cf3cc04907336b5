//===- RematSolver.cpp - Choose what to recompute -------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The solver works on the abstract model of Remat.h, never on the IR, so one
// problem can be solved at many budgets (the budget-vs-compute curve of
// `mtc plan`) and compared with the exact optimum of the test-only ILP.
//
// Greedy: while the peak exceeds the budget, take the candidate live across
// the peak that frees the most bytes there per recomputed FLOP, together
// with the chain of inputs its clone needs (inputs already dead are
// recomputed too, at the same point; clones that would run too late are
// moved earlier). Each candidate is tried at its next use and as late
// before it as all its inputs are still there. Then prune: undo
// recomputations, most expensive first, wherever the budget still holds.
//
// Two scoring rules (bytes freed at the peak; excess removed over every op
// above the budget) each run with a local search: forbid one recomputation
// of the best choice and solve again, start the greedy from one
// recomputation it lacks, or forbid two of the best choice's most
// expensive recomputations at once. The cheapest result that fits wins. The number of
// greedy runs is fixed, so the result does not depend on the machine.
//
//===----------------------------------------------------------------------===//

#include "mtc/Passes/Remat.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <chrono>
#include <optional>

using namespace mtc;

int64_t RematProblem::peak() const {
  return live.empty() ? 0 : *std::max_element(live.begin(), live.end());
}

int64_t RematCandidate::usedBefore(int64_t t) const {
  auto it = std::lower_bound(uses.begin(), uses.end(), t);
  return it == uses.begin() ? def : *std::prev(it);
}

namespace {

/// Greedy solves each local search may run per scoring rule.
constexpr int64_t kRematImprovementTries = 200;

/// Above this many ops over the budget, the spread score is not capped by
/// each op's excess (which would cost a pass over them per choice).
constexpr size_t kExactSpread = 64;

/// `Solver::pending` when a candidate has no tentative change.
constexpr int64_t kNone = -2;

/// The candidates reading each candidate.
std::vector<std::vector<int64_t>> consumersOf(const RematProblem &problem) {
  std::vector<std::vector<int64_t>> consumers(problem.candidates.size());
  for (auto [v, c] : llvm::enumerate(problem.candidates))
    for (const RematInput &in : c.inputs)
      if (in.candidate >= 0 &&
          (consumers[in.candidate].empty() ||
           consumers[in.candidate].back() != int64_t(v)))
        consumers[in.candidate].push_back(v);
  return consumers;
}

/// The ops [first, end) where candidate `u`, recomputed at `at(u)`, frees
/// its bytes: after its original's last read (its own last use before the
/// clone, or a consumer's clone reading it earlier) up to the clone.
/// Clones run in a slot before their op; the model counts ops only.
template <typename At>
std::pair<int64_t, int64_t>
freedRange(const RematProblem &problem,
           const std::vector<std::vector<int64_t>> &consumers, int64_t u,
           At at) {
  const RematCandidate &c = problem.candidates[u];
  int64_t t = at(u);
  if (t < 0)
    return {0, 0};
  // A consumer's clone reads it in the slot before op tv: it is dead at tv.
  int64_t first = c.usedBefore(t) + 1;
  for (int64_t v : consumers[u]) {
    int64_t tv = at(v);
    if (tv >= 0 && tv < t)
      first = std::max(first, tv);
  }
  return {first, std::min(t, c.lastUse() + 1)};
}

/// One tentative change of a clone's position: from `from` to `to` (-1: not
/// recomputed).
struct Change {
  int64_t candidate;
  int64_t from;
  int64_t to;
};

/// A change of the live bytes: `bytes` at every op of [first, end).
struct Delta {
  int64_t first, end, bytes;
};

class Solver {
public:
  /// `spread`: score a choice by the excess bytes it removes over every op
  /// above the budget, not only at the peak.
  Solver(const RematProblem &problem,
         const std::vector<std::vector<int64_t>> &consumers, int64_t budget,
         const std::vector<bool> &banned, bool spread)
      : problem(problem), consumers(consumers), budget(budget),
        spread(spread), banned(banned), mem(problem.live),
        cloneAt(problem.candidates.size(), -1),
        pending(problem.candidates.size(), kNone) {}

  /// Starts from `v` recomputed at `t` (with what its clone needs).
  bool force(int64_t v, int64_t t, bool move) {
    std::vector<Change> changes;
    bool ok = plan(v, t, changes, move);
    if (ok)
      apply(changes);
    else
      clearPending(changes);
    return ok;
  }

  RematSolution run() {
    while (peak() > budget)
      if (!recomputeBest())
        break;
    if (peak() <= budget)
      prune();
    RematSolution s;
    s.cloneAt = cloneAt;
    s.peak = peak();
    for (auto [v, at] : llvm::enumerate(cloneAt))
      if (at >= 0) {
        s.flops += problem.candidates[v].flops;
        ++s.recomputed;
      }
    return s;
  }

private:
  int64_t peakIndex() const {
    return std::max_element(mem.begin(), mem.end()) - mem.begin();
  }
  int64_t peak() const { return mem.empty() ? 0 : mem[peakIndex()]; }

  /// Where candidate `v`'s clone runs, counting tentative changes.
  int64_t at(int64_t v) const {
    return pending[v] != kNone ? pending[v] : cloneAt[v];
  }

  /// Plans `v` to be available from op `t` on, recomputing or moving the
  /// clones it needs. False when some input cannot be had there. With
  /// `move`, an input recomputed later than `t` has its clone moved to `t`
  /// even when its original could still be read (which keeps the original
  /// live until `t`).
  bool plan(int64_t v, int64_t t, std::vector<Change> &changes,
            bool move = false) {
    int64_t current = at(v);
    if (current >= 0 && current <= t)
      return true;
    if ((current < 0 && banned[v]) || t <= problem.candidates[v].lastForward)
      return false;
    changes.push_back({v, current, t});
    pending[v] = t;
    for (const RematInput &in : problem.candidates[v].inputs) {
      int64_t c = in.candidate;
      // Its clone, if it runs first, or its original, still there.
      if (c >= 0 && at(c) >= 0 && at(c) <= t)
        continue;
      if (in.availableUntil >= t && !(move && c >= 0 && at(c) >= 0))
        continue;
      if (c < 0 || !plan(c, t, changes, move))
        return false;
    }
    return true;
  }

  void clearPending(const std::vector<Change> &changes) {
    for (const Change &c : changes)
      pending[c.candidate] = kNone;
  }

  /// How the live bytes change when the pending `changes` are applied: the
  /// freed ranges of the changed candidates and of their inputs (whose
  /// originals may now be read later or no more).
  void deltas(const std::vector<Change> &changes, std::vector<Delta> &out) {
    out.clear();
    llvm::SmallVector<int64_t, 16> affected;
    for (const Change &ch : changes) {
      affected.push_back(ch.candidate);
      for (const RematInput &in : problem.candidates[ch.candidate].inputs)
        if (in.candidate >= 0)
          affected.push_back(in.candidate);
    }
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()),
                   affected.end());
    auto now = [&](int64_t v) { return at(v); };
    auto before = [&](int64_t v) { return cloneAt[v]; };
    for (int64_t u : affected) {
      int64_t bytes = problem.candidates[u].bytes;
      auto [oldFirst, oldEnd] = freedRange(problem, consumers, u, before);
      auto [first, end] = freedRange(problem, consumers, u, now);
      if (oldFirst == first && oldEnd == end)
        continue;
      if (oldFirst < oldEnd)
        out.push_back({oldFirst, oldEnd, bytes});
      if (first < end)
        out.push_back({first, end, -bytes});
    }
  }

  static int64_t deltaAt(const std::vector<Delta> &ds, int64_t k) {
    int64_t d = 0;
    for (const Delta &x : ds)
      if (x.first <= k && k < x.end)
        d += x.bytes;
    return d;
  }

  /// Applies the pending `changes` (and clears them).
  void apply(const std::vector<Change> &changes) {
    deltas(changes, scratch);
    for (const Delta &d : scratch)
      for (int64_t k = d.first; k < d.end; ++k)
        mem[k] += d.bytes;
    for (const Change &ch : changes)
      cloneAt[ch.candidate] = pending[ch.candidate];
    clearPending(changes);
  }

  bool recomputeBest() {
    int64_t p = peakIndex();
    // Ops above the budget, and how many there are before each op.
    std::vector<int64_t> over, overBefore;
    if (spread) {
      overBefore.assign(mem.size() + 1, 0);
      for (auto [k, bytes] : llvm::enumerate(mem)) {
        overBefore[k + 1] = overBefore[k] + (bytes > budget);
        if (bytes > budget)
          over.push_back(k);
      }
    }
    std::vector<Change> &best = bestChanges, &changes = trialChanges;
    best.clear();
    double bestScore = 0;
    int64_t bestFreed = 0;
    for (auto [v, c] : llvm::enumerate(problem.candidates)) {
      // Live across the peak, not used there, no forward use after it.
      if (cloneAt[v] >= 0 || !(c.lastForward < p && p < c.lastUse()))
        continue;
      auto next = std::upper_bound(c.uses.begin(), c.uses.end(), p);
      if (next != c.uses.begin() && *std::prev(next) == p)
        continue;
      // At its next use, or as late before it as its inputs are all still
      // there (no chain needed).
      int64_t ready = *next;
      for (const RematInput &in : c.inputs)
        if (in.candidate < 0 || cloneAt[in.candidate] < 0)
          ready = std::min(ready, in.availableUntil);
      llvm::SmallVector<std::pair<int64_t, bool>, 5> options = {
          {*next, false}, {*next, true}};
      if (p < ready && ready < *next)
        options.push_back({ready, false});
      // Or in time for the clones of its consumers, which then need not
      // keep its original.
      int64_t soonest = *next;
      for (int64_t w : consumers[v])
        if (cloneAt[w] > p)
          soonest = std::min(soonest, cloneAt[w]);
      if (soonest < *next) {
        options.push_back({soonest, false});
        options.push_back({soonest, true});
      }
      for (auto [t, move] : options) {
        changes.clear();
        bool ok = plan(v, t, changes, move);
        if (ok)
          deltas(changes, scratch);
        clearPending(changes);
        if (!ok)
          continue;
        int64_t freed = -deltaAt(scratch, p);
        if (freed <= 0)
          continue;
        if (spread && over.size() <= kExactSpread) {
          freed = 0;
          for (int64_t k : over)
            freed += std::min(-deltaAt(scratch, k), mem[k] - budget);
        } else if (spread) {
          // Many ops over: bytes freed summed over them, uncapped.
          freed = 0;
          for (const Delta &d : scratch)
            freed -= d.bytes * (overBefore[d.end] - overBefore[d.first]);
        }
        int64_t flops = 0;
        for (const Change &ch : changes)
          if (ch.from < 0)
            flops += problem.candidates[ch.candidate].flops;
        double score = double(freed) / double(flops + 1);
        if (score > bestScore || (score == bestScore && freed > bestFreed)) {
          bestScore = score;
          bestFreed = freed;
          best.swap(changes);
        }
      }
    }
    if (best.empty())
      return false;
    for (const Change &ch : best)
      pending[ch.candidate] = ch.to;
    apply(best);
    return true;
  }

  /// Undoes recomputations the budget does not need, most FLOPs first.
  void prune() {
    std::vector<int64_t> order;
    for (auto [v, at] : llvm::enumerate(cloneAt))
      if (at >= 0)
        order.push_back(v);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return problem.candidates[a].flops > problem.candidates[b].flops;
    });
    std::vector<Change> undo(1);
    for (int64_t u : order) {
      // Recomputed consumers reading its clone would read the original.
      bool needed = llvm::any_of(consumers[u], [&](int64_t v) {
        if (cloneAt[v] < cloneAt[u])
          return false;
        for (const RematInput &in : problem.candidates[v].inputs)
          if (in.candidate == u && in.availableUntil < cloneAt[v])
            return true;
        return false;
      });
      if (needed)
        continue;
      undo[0] = {u, cloneAt[u], -1};
      pending[u] = -1;
      deltas(undo, scratch);
      bool fits = true;
      for (const Delta &d : scratch)
        for (int64_t k = d.first; k < d.end && fits; ++k)
          fits = mem[k] + deltaAt(scratch, k) <= budget;
      if (fits)
        apply(undo);
      else
        clearPending(undo);
    }
  }

  const RematProblem &problem;
  const std::vector<std::vector<int64_t>> &consumers;
  int64_t budget;
  bool spread;
  const std::vector<bool> &banned;
  std::vector<int64_t> mem;
  std::vector<int64_t> cloneAt;
  std::vector<int64_t> pending;
  std::vector<Delta> scratch;
  std::vector<Change> bestChanges, trialChanges;
};

/// True when `a` is a better result than `b` for `budget`.
bool better(const RematSolution &a, const RematSolution &b, int64_t budget) {
  bool fits = a.peak <= budget, otherFits = b.peak <= budget;
  if (fits != otherFits)
    return fits;
  return fits ? a.flops < b.flops : a.peak < b.peak;
}

/// The greedy and its local search with one scoring rule.
RematSolution solveWith(const RematProblem &problem,
                        const std::vector<std::vector<int64_t>> &consumers,
                        int64_t budget, bool spread) {
  std::vector<bool> banned(problem.candidates.size(), false);
  RematSolution best =
      Solver(problem, consumers, budget, banned, spread).run();
  if (best.peak > budget)
    return best;
  // (1) Forbid one recomputation of the best choice (most FLOPs first) and
  // solve again; keep the ban when that is better.
  int64_t tries = kRematImprovementTries;
  bool improved = true;
  while (improved && tries > 0) {
    improved = false;
    std::vector<int64_t> order;
    for (auto [v, at] : llvm::enumerate(best.cloneAt))
      if (at >= 0)
        order.push_back(v);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return problem.candidates[a].flops > problem.candidates[b].flops;
    });
    for (int64_t u : order) {
      if (tries-- <= 0 || problem.candidates[u].flops == 0)
        break;
      banned[u] = true;
      RematSolution s =
          Solver(problem, consumers, budget, banned, spread).run();
      if (better(s, best, budget)) {
        best = std::move(s);
        improved = true;
        break;
      }
      banned[u] = false;
    }
  }
  // (2) Start the greedy from one recomputation the best choice lacks, at
  // each point its clone could run: its uses after the forward pass and,
  // through chains, those of its consumers. This finds chains the greedy
  // does not build by itself.
  std::vector<std::vector<int64_t>> points(problem.candidates.size());
  for (int64_t u = int64_t(points.size()) - 1; u >= 0; --u) {
    const RematCandidate &c = problem.candidates[u];
    for (int64_t t : c.uses)
      if (t > c.lastForward)
        points[u].push_back(t);
    for (int64_t v : consumers[u])
      for (int64_t t : points[v])
        if (t > c.lastForward)
          points[u].push_back(t);
    llvm::sort(points[u]);
    points[u].erase(std::unique(points[u].begin(), points[u].end()),
                    points[u].end());
  }
  // The greedy run from a forced recomputation of `v` at `t`.
  auto forced = [&](int64_t v, int64_t t) -> std::optional<RematSolution> {
    Solver solver(problem, consumers, budget, banned, spread);
    if (!solver.force(v, t, /*move=*/false))
      return std::nullopt;
    return solver.run();
  };
  tries = kRematImprovementTries;
  improved = true;
  while (improved && tries > 0) {
    improved = false;
    for (auto [v, c] : llvm::enumerate(problem.candidates)) {
      if (best.cloneAt[v] >= 0 || banned[v])
        continue;
      for (int64_t t : points[v]) {
        if (tries-- <= 0)
          break;
        if (auto s = forced(v, t); s && better(*s, best, budget)) {
          best = std::move(*s);
          improved = true;
        }
      }
      if (tries <= 0)
        break;
    }
  }
  // (3) Forbid two recomputations of the best choice at once (among its
  // most expensive ones): moves a recomputation from one place of the step
  // to an equivalent one elsewhere (another layer's copy of the same
  // chain), which one ban alone does not find when the greedy takes the
  // second copy back.
  constexpr size_t kPairBanCandidates = 8;
  tries = kRematImprovementTries;
  improved = true;
  while (improved && tries > 0) {
    improved = false;
    std::vector<int64_t> chosen;
    for (auto [u, at] : llvm::enumerate(best.cloneAt))
      if (at >= 0 && problem.candidates[u].flops > 0)
        chosen.push_back(u);
    std::stable_sort(chosen.begin(), chosen.end(), [&](int64_t a, int64_t b) {
      return problem.candidates[a].flops > problem.candidates[b].flops;
    });
    if (chosen.size() > kPairBanCandidates)
      chosen.resize(kPairBanCandidates);
    for (size_t i = 0; i < chosen.size() && !improved && tries > 0; ++i)
      for (size_t j = i + 1; j < chosen.size() && !improved && tries-- > 0;
           ++j) {
        banned[chosen[i]] = banned[chosen[j]] = true;
        RematSolution s =
            Solver(problem, consumers, budget, banned, spread).run();
        if (better(s, best, budget)) {
          best = std::move(s);
          improved = true;
        } else {
          banned[chosen[i]] = banned[chosen[j]] = false;
        }
      }
  }
  return best;
}

} // namespace

RematSolution mtc::solveRemat(const RematProblem &problem, int64_t budget) {
  auto start = std::chrono::steady_clock::now();
  auto consumers = consumersOf(problem);
  RematSolution best = solveWith(problem, consumers, budget, false);
  RematSolution other = solveWith(problem, consumers, budget, true);
  if (better(other, best, budget))
    best = std::move(other);
  best.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return best;
}

std::vector<int64_t> mtc::evaluateRemat(const RematProblem &problem,
                                        const std::vector<int64_t> &cloneAt) {
  auto consumers = consumersOf(problem);
  std::vector<int64_t> mem = problem.live;
  auto at = [&](int64_t v) { return cloneAt[v]; };
  for (auto [v, c] : llvm::enumerate(problem.candidates)) {
    int64_t t = cloneAt[v];
    if (t < 0)
      continue;
    if (t <= c.lastForward)
      return {};
    for (const RematInput &in : c.inputs) {
      int64_t u = in.candidate;
      bool ok = (u >= 0 && cloneAt[u] >= 0 && cloneAt[u] <= t) ||
                in.availableUntil >= t;
      if (!ok)
        return {};
    }
    auto [first, end] = freedRange(problem, consumers, v, at);
    for (int64_t k = first; k < end; ++k)
      mem[k] -= c.bytes;
  }
  return mem;
}

void mtc::writeRematJson(
    const RematProblem &problem,
    const std::vector<std::pair<int64_t, RematSolution>> &solved,
    llvm::raw_ostream &os, int64_t compiled) {
  auto list = [&](const std::vector<int64_t> &values) {
    os << "[";
    for (auto [i, v] : llvm::enumerate(values))
      os << (i ? ", " : "") << v;
    os << "]";
  };
  os << "{\n  \"forward_flops\": " << problem.forwardFlops
     << ",\n  \"live\": ";
  list(problem.live);
  os << ",\n  \"candidates\": [";
  for (auto [i, c] : llvm::enumerate(problem.candidates)) {
    os << (i ? ",\n" : "\n") << "    {\"name\": \"" << c.name
       << "\", \"bytes\": " << c.bytes << ", \"def\": " << c.def
       << ", \"last_forward\": " << c.lastForward
       << ", \"flops\": " << c.flops << ", \"uses\": ";
    list(c.uses);
    os << ", \"inputs\": [";
    for (auto [j, in] : llvm::enumerate(c.inputs))
      os << (j ? ", " : "") << "[" << in.candidate << ", "
         << in.availableUntil << "]";
    os << "]}";
  }
  os << "\n  ],\n  \"solutions\": [";
  for (auto [i, entry] : llvm::enumerate(solved)) {
    const RematSolution &s = entry.second;
    os << (i ? ",\n" : "\n") << "    {\"budget\": " << entry.first
       << ", \"compiled\": " << (int64_t(i) == compiled ? "true" : "false")
       << ", \"peak\": " << s.peak << ", \"flops\": " << s.flops
       << ", \"recomputed\": " << s.recomputed << ", \"seconds\": "
       << llvm::format("%.6f", s.seconds) << ", \"clone_at\": ";
    list(s.cloneAt);
    os << "}";
  }
  os << "\n  ]\n}\n";
}
