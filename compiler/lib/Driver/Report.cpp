//===- Report.cpp - The memory report -------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Driver/Driver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace mtc;

llvm::Expected<MemoryReport> mtc::computeMemoryReport(ModuleOp module,
                                                     StringRef function) {
  auto func = module.lookupSymbol<func::FuncOp>(function);
  auto arena = func ? func->getAttrOfType<IntegerAttr>(attr::kArenaSize)
                    : IntegerAttr();
  auto lower = func ? func->getAttrOfType<IntegerAttr>(attr::kLowerBound)
                    : IntegerAttr();
  if (!arena || !lower)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the module has no planned function");
  MemoryReport r;
  r.arenaBytes = arena.getInt();
  r.lowerBoundBytes = lower.getInt();
  // The arena is the trainer's only device allocation.
  r.totalBytes = r.arenaBytes;

  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments()) {
    StringRef role =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr::kRole)
            .getValue();
    uint64_t bytes = getTensorBytes(arg.getType());
    if (role == attr::role::kParam) {
      r.parameterBytes += bytes;
      r.numParameters++;
      r.parameterElements += getNumElements(arg.getType());
    } else if (role == attr::role::kBuffer) {
      r.bufferBytes += bytes;
    } else if (role == attr::role::kState) {
      r.optimizerStateBytes += bytes;
    } else if (role == attr::role::kInput) {
      r.inputBytes += bytes;
    }
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto role = func.getResultAttrOfType<StringAttr>(i, attr::kRole);
    if (role && role.getValue() == attr::role::kGrad)
      r.gradientBytes += getTensorBytes(v.getType());
  }

  // Live bytes of forward activations and of kernel scratch at each op.
  DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : body)
    index[&op] = n++;
  std::vector<int64_t> activations(n + 1, 0);
  for (Operation &op : body.without_terminator()) {
    bool forward = !op.hasAttr(attr::kBackward) &&
                   !op.hasAttr(attr::kOptimizer) && !isa<ConstantOp>(op);
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      uint64_t flops = cost.getFlops();
      if (op.hasAttr(attr::kOptimizer))
        r.optimizerFlops += flops;
      else if (op.hasAttr(attr::kBackward))
        r.backwardFlops += flops;
      else
        r.forwardFlops += flops;
      r.workspacePeakBytes = std::max<uint64_t>(r.workspacePeakBytes,
                                                cost.getWorkspaceBytes());
    }
    if (isa<ConstantOp>(op))
      for (Value v : op.getResults())
        r.constantBytes += getTensorBytes(v.getType());
    if (!forward)
      continue;
    for (Value v : op.getResults()) {
      int64_t start = index[&op], end = start;
      for (Operation *user : v.getUsers())
        end = std::max(end, index[user]);
      activations[start] += getTensorBytes(v.getType());
      activations[end + 1] -= getTensorBytes(v.getType());
    }
  }
  int64_t running = 0;
  for (int64_t i = 0; i < n; ++i) {
    running += activations[i];
    r.activationPeakBytes =
        std::max<uint64_t>(r.activationPeakBytes, running);
  }
  return r;
}

void mtc::writeReportJson(const MemoryReport &r, llvm::raw_ostream &os) {
  os << "{\n";
  auto field = [&](StringRef key, uint64_t value, bool last = false) {
    os << "  \"" << key << "\": " << value << (last ? "\n" : ",\n");
  };
  field("total_bytes", r.totalBytes);
  field("arena_bytes", r.arenaBytes);
  field("lower_bound_bytes", r.lowerBoundBytes);
  field("parameter_bytes", r.parameterBytes);
  field("buffer_bytes", r.bufferBytes);
  field("input_bytes", r.inputBytes);
  field("gradient_bytes", r.gradientBytes);
  field("optimizer_state_bytes", r.optimizerStateBytes);
  field("activation_peak_bytes", r.activationPeakBytes);
  field("workspace_peak_bytes", r.workspacePeakBytes);
  field("constant_bytes", r.constantBytes);
  field("parameter_count", r.parameterElements);
  field("forward_flops", r.forwardFlops);
  field("backward_flops", r.backwardFlops);
  field("optimizer_flops", r.optimizerFlops);
  field("recompute_flops", r.recomputeFlops);
  if (r.budgetBytes)
    os << "  \"budget_bytes\": " << *r.budgetBytes << "\n";
  else
    os << "  \"budget_bytes\": null\n";
  os << "}\n";
}

void mtc::printReportTable(const MemoryReport &r, llvm::raw_ostream &os) {
  auto row = [&](StringRef label, uint64_t bytes) {
    os << llvm::format("  %-24s %14s  %14llu B\n", label.str().c_str(),
                       formatBytes(bytes).c_str(),
                       static_cast<unsigned long long>(bytes));
  };
  os << "memory plan (one arena, planned at compile time):\n";
  row("parameters", r.parameterBytes);
  row("gradients", r.gradientBytes);
  row("optimizer state", r.optimizerStateBytes);
  row("buffers", r.bufferBytes);
  row("inputs (one batch)", r.inputBytes);
  row("activations (peak)", r.activationPeakBytes);
  row("kernel scratch (peak)", r.workspacePeakBytes);
  row("lower bound (max live)", r.lowerBoundBytes);
  row("arena (planned peak)", r.arenaBytes);
  row("total device memory", r.totalBytes);
  if (r.budgetBytes)
    row("budget", *r.budgetBytes);
  double gap = r.lowerBoundBytes
                   ? 100.0 * (double(r.arenaBytes) - double(r.lowerBoundBytes)) /
                         double(r.lowerBoundBytes)
                   : 0.0;
  os << llvm::format("  arena vs lower bound: +%.2f%%\n", gap);
  os << llvm::format("compute per step: forward %.3g GFLOP, backward %.3g "
                     "GFLOP, optimizer %.3g GFLOP, recompute 0\n",
                     r.forwardFlops * 1e-9, r.backwardFlops * 1e-9,
                     r.optimizerFlops * 1e-9);
}
