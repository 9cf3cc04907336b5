//===- Report.cpp - The memory report -------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Driver/Driver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <functional>

using namespace mlir;
using namespace mtc;

/// The planned arena offset of `v` (-1 when it has none).
static int64_t offsetOf(func::FuncOp func, Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto offset =
        func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), attr::kOffset);
    return offset ? offset.getInt() : -1;
  }
  auto result = cast<OpResult>(v);
  auto offsets =
      result.getOwner()->getAttrOfType<DenseI64ArrayAttr>(attr::kOffsets);
  return offsets ? offsets[result.getResultNumber()] : -1;
}

/// Fills `r.timeline`: at each op, the bytes of every value live there
/// (arguments throughout but batch inputs to their last reader, op results
/// from their op to their last use, results of the step to its end,
/// scratch during its op), by category.
static void computeTimeline(func::FuncOp func, MemoryReport &r) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  DenseMap<Operation *, int64_t> index;
  int64_t n = numberKernels(body, index, /*withTerminator=*/false);
  r.timeline.assign(n, {});
  auto add = [&](int64_t from, int64_t to, uint64_t bytes,
                 uint64_t MemoryReport::TimelinePoint::*field) {
    for (int64_t i = from; i <= to && i < n; ++i)
      r.timeline[i].*field += bytes;
  };
  using P = MemoryReport::TimelinePoint;
  DenseSet<Value> grads, tied;
  for (Operation &op : body)
    if (isa<SgdUpdateOp, SgdMomentumUpdateOp, AdamWUpdateOp>(op))
      grads.insert(op.getOperand(1));
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto role = func.getResultAttrOfType<StringAttr>(i, attr::kRole);
    if (role && role.getValue() == attr::role::kGrad)
      grads.insert(v);
    if (func.getResultAttr(i, attr::kTied))
      tied.insert(v);
  }
  // The last op reading `v` or a view of it.
  std::function<int64_t(Value, int64_t)> lastUse = [&](Value v, int64_t end) {
    for (Operation *user : v.getUsers()) {
      if (user == ret) {
        end = n - 1;
        continue;
      }
      end = std::max(end, index.lookup(user));
      if (viewSource(user) == v)
        end = lastUse(user->getResult(0), end);
    }
    return end;
  };
  for (BlockArgument arg : body.getArguments()) {
    if (func.getArgAttr(arg.getArgNumber(), attr::kNotInArena))
      continue;
    auto role =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr::kRole);
    StringRef rv = role ? role.getValue() : "";
    uint64_t bytes = getTensorBytes(arg.getType());
    add(0, isBatchInput(arg) ? lastUse(arg, 0) : n - 1, bytes,
        rv == attr::role::kParam || rv == attr::role::kParamCopy
            ? &P::parameters
        : rv == attr::role::kState       ? &P::optimizerState
        : rv == attr::role::kAccumulator ? &P::gradients
                                         : &P::other);
  }
  for (Operation &op : body.without_terminator()) {
    int64_t i = index[&op];
    P &point = r.timeline[i];
    llvm::raw_string_ostream name(point.op);
    if (!point.op.empty()) // an op run in the kernel of the one before
      name << " + ";
    name << op.getName().getStringRef();
    if (auto loc = dyn_cast<NameLoc>(op.getLoc()))
      name << " " << loc.getName().getValue();
    // Constants created by autodiff may be hoisted; the backward pass
    // starts at its first computation.
    point.backward = op.hasAttr(attr::kBackward) && !isa<ConstantOp>(op);
    if (auto cost = dyn_cast<CostOpInterface>(op))
      point.temporaries += cost.getWorkspaceBytes();
    if (viewSource(&op))
      continue; // a view: counted with its source
    for (Value v : op.getResults()) {
      if (tied.contains(v))
        continue; // shares its argument's bytes
      int64_t start = isa<ConstantOp>(op) ? 0 : i;
      uint64_t bytes = storageBytes(v);
      // Written over an operand that dies here: counted from the next op,
      // in the operand's bytes (a 16-bit conversion keeps all of its
      // float32 input's).
      if (Value source = inPlaceSource(cast<OpResult>(v));
          source && offsetOf(func, source) == offsetOf(func, v)) {
        start = i + 1;
        bytes = std::max<uint64_t>(bytes, storageBytes(source));
      }
      int64_t end = lastUse(v, i);
      if (llvm::is_contained(ret.getOperands(), v) || isa<ConstantOp>(op))
        end = n - 1;
      uint64_t P::*field = grads.contains(v)       ? &P::gradients
                           : isa<ConstantOp>(op)    ? &P::other
                           : op.hasAttr(attr::kBackward) ||
                                   op.hasAttr(attr::kOptimizer)
                               ? &P::temporaries
                               : &P::activations;
      add(start, end, bytes, field);
    }
  }
}

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
    unsigned i = arg.getArgNumber();
    if (func.getArgAttr(i, attr::kCompiledIn))
      r.compiledInBuffers.push_back(
          func.getArgAttrOfType<StringAttr>(i, attr::kName).str());
    if (func.getArgAttr(i, attr::kNotInArena)) {
      (func.getArgAttr(i, attr::kCompiledIn) ? r.compiledInOnlyBytes
                                             : r.hostWeightBytes) += bytes;
      continue;
    }
    if (role == attr::role::kParam) {
      r.parameterBytes += bytes;
      r.numParameters++;
      r.parameterElements += getNumElements(arg.getType());
    } else if (role == attr::role::kParamCopy) {
      r.parameterCopyBytes += bytes;
    } else if (role == attr::role::kBuffer) {
      r.bufferBytes += bytes;
    } else if (role == attr::role::kState) {
      r.optimizerStateBytes += bytes;
    } else if (role == attr::role::kInput) {
      r.inputBytes += bytes;
    }
  }
  // Gradients: what the optimizer updates consume (they need not outlive
  // their update), or the gradients the step returns.
  DenseSet<Value> gradients;
  for (Operation &op : body)
    if (isa<SgdUpdateOp, SgdMomentumUpdateOp, AdamWUpdateOp>(op))
      gradients.insert(op.getOperand(1));
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto role = func.getResultAttrOfType<StringAttr>(i, attr::kRole);
    if (role && role.getValue() == attr::role::kGrad)
      gradients.insert(v);
  }
  for (Value v : gradients)
    r.gradientBytes += getTensorBytes(v.getType());

  // Live bytes of forward activations and of kernel scratch at each op.
  DenseMap<Operation *, int64_t> index;
  int64_t n = numberKernels(body, index);
  std::vector<int64_t> activations(n + 1, 0);
  for (Operation &op : body.without_terminator()) {
    bool forward = !op.hasAttr(attr::kBackward) &&
                   !op.hasAttr(attr::kOptimizer) && !isa<ConstantOp>(op);
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      uint64_t flops = cost.getFlops();
      if (op.hasAttr(attr::kOptimizer))
        r.optimizerFlops += flops;
      else if (op.hasAttr(attr::kRecompute))
        r.recomputeFlops += flops;
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
    if (auto attention = dyn_cast<AttentionOp>(op);
        attention && !op.hasAttr(attr::kRecompute)) {
      ++r.fusedAttentions;
      r.causalAttentions += attention.getCausal() ? 1 : 0;
    }
    if (!forward)
      continue;
    for (Value v : op.getResults()) {
      int64_t start = index[&op], end = start;
      for (Operation *user : v.getUsers())
        end = std::max(end, index[user]);
      activations[start] += storageBytes(v);
      activations[end + 1] -= storageBytes(v);
    }
  }
  int64_t running = 0;
  for (int64_t i = 0; i < n; ++i) {
    running += activations[i];
    r.activationPeakBytes =
        std::max<uint64_t>(r.activationPeakBytes, running);
  }
  computeTimeline(func, r);
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
  field("parameter_copy_bytes", r.parameterCopyBytes);
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
  field("fused_attentions", r.fusedAttentions);
  field("causal_attentions", r.causalAttentions);
  field("compiled_in_bytes", r.compiledInOnlyBytes);
  os << "  \"compiled_in_buffers\": [";
  for (auto [i, name] : llvm::enumerate(r.compiledInBuffers)) {
    os << (i ? ", " : "") << '"';
    for (char c : name)
      if (c != '"' && c != '\\')
        os << c;
    os << '"';
  }
  os << "],\n";
  field("host_weight_bytes", r.hostWeightBytes);
  if (r.budgetBytes)
    os << "  \"budget_bytes\": " << *r.budgetBytes << ",\n";
  else
    os << "  \"budget_bytes\": null,\n";
  // One entry per op of the step: bytes live there, by category (not
  // padded to the arena's alignment).
  os << "  \"timeline\": [";
  for (auto [i, p] : llvm::enumerate(r.timeline)) {
    std::string op;
    for (char c : p.op)
      if (c != '"' && c != '\\')
        op += c;
    os << (i ? ",\n" : "\n") << "    {\"op\": \"" << op
       << "\", \"backward\": " << (p.backward ? "true" : "false")
       << ", \"parameters\": " << p.parameters
       << ", \"gradients\": " << p.gradients
       << ", \"optimizer_state\": " << p.optimizerState
       << ", \"activations\": " << p.activations
       << ", \"temporaries\": " << p.temporaries
       << ", \"other\": " << p.other << "}";
  }
  os << "\n  ]\n}\n";
}

void mtc::printReportTable(const MemoryReport &r, llvm::raw_ostream &os) {
  auto row = [&](StringRef label, uint64_t bytes) {
    os << llvm::format("  %-24s %14s  %14llu B\n", label.str().c_str(),
                       formatBytes(bytes).c_str(),
                       static_cast<unsigned long long>(bytes));
  };
  os << "memory plan (one arena, planned at compile time):\n";
  row("parameters", r.parameterBytes);
  if (r.parameterCopyBytes)
    row("parameter copies (16-bit)", r.parameterCopyBytes);
  row("gradients", r.gradientBytes);
  row("optimizer state", r.optimizerStateBytes);
  row("buffers", r.bufferBytes);
  if (r.compiledInOnlyBytes)
    row("buffers compiled in", r.compiledInOnlyBytes);
  if (r.hostWeightBytes)
    row("frozen weights on host", r.hostWeightBytes);
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
                     "GFLOP, optimizer %.3g GFLOP, recompute %.3g GFLOP\n",
                     r.forwardFlops * 1e-9, r.backwardFlops * 1e-9,
                     r.optimizerFlops * 1e-9, r.recomputeFlops * 1e-9);
  if (r.fusedAttentions)
    os << "attention: " << r.fusedAttentions << " fused, " << r.causalAttentions
       << " causal"
       << (r.compiledInBuffers.empty()
               ? std::string()
               : " (" + std::to_string(r.compiledInBuffers.size()) +
                     " mask buffer(s) compiled in; a checkpoint that "
                     "changes them is refused)")
       << "\n";
}

void mtc::writeTimelineSvg(const MemoryReport &r, llvm::raw_ostream &os) {
  const int width = 960, height = 420, left = 80, right = 230, top = 30,
            bottom = 50;
  int plotW = width - left - right, plotH = height - top - bottom;
  uint64_t peak = r.arenaBytes;
  if (r.budgetBytes)
    peak = std::max(peak, *r.budgetBytes);
  for (const auto &p : r.timeline)
    peak = std::max(peak, p.total());
  peak = std::max<uint64_t>(peak, 1);
  size_t n = std::max<size_t>(r.timeline.size(), 1);
  auto x = [&](double i) { return left + plotW * i / double(n); };
  auto y = [&](double bytes) {
    return top + plotH - plotH * bytes / double(peak);
  };
  using P = MemoryReport::TimelinePoint;
  struct Layer {
    const char *name, *color;
    uint64_t P::*field;
  } layers[] = {{"parameters", "#4e79a7", &P::parameters},
                {"optimizer state", "#f28e2b", &P::optimizerState},
                {"gradients", "#e15759", &P::gradients},
                {"activations", "#59a14f", &P::activations},
                {"temporaries", "#edc948", &P::temporaries},
                {"inputs, buffers, constants", "#bab0ac", &P::other}};
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
     << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << left << "\" y=\"18\" font-size=\"14\">Memory over the "
        "training step (one arena of "
     << formatBytes(r.arenaBytes) << ")</text>\n";
  std::vector<uint64_t> base(r.timeline.size(), 0);
  for (const Layer &layer : layers) {
    // One step per op: the polygon's top edge, then its bottom edge back.
    std::string points;
    llvm::raw_string_ostream pts(points);
    for (size_t i = 0; i < r.timeline.size(); ++i) {
      double topY = y(base[i] + r.timeline[i].*layer.field);
      pts << x(i) << "," << topY << " " << x(i + 1) << "," << topY << " ";
    }
    for (size_t i = r.timeline.size(); i-- > 0;) {
      double bottomY = y(base[i]);
      pts << x(i + 1) << "," << bottomY << " " << x(i) << "," << bottomY
          << " ";
      base[i] += r.timeline[i].*layer.field;
    }
    os << "<polygon fill=\"" << layer.color << "\" points=\"" << points
       << "\"><title>" << layer.name << "</title></polygon>\n";
  }
  auto hline = [&](uint64_t bytes, const char *color, const std::string &label) {
    os << "<line x1=\"" << left << "\" x2=\"" << left + plotW << "\" y1=\""
       << y(bytes) << "\" y2=\"" << y(bytes) << "\" stroke=\"" << color
       << "\" stroke-dasharray=\"6,3\"/>\n<text x=\"" << left + plotW + 4
       << "\" y=\"" << y(bytes) + 4 << "\" fill=\"" << color << "\">" << label
       << "</text>\n";
  };
  hline(r.arenaBytes, "black", "arena " + formatBytes(r.arenaBytes));
  if (r.budgetBytes)
    hline(*r.budgetBytes, "#b00", "budget " + formatBytes(*r.budgetBytes));
  // Where the backward pass starts.
  for (size_t i = 0; i < r.timeline.size(); ++i)
    if (r.timeline[i].backward) {
      os << "<line x1=\"" << x(i) << "\" x2=\"" << x(i) << "\" y1=\"" << top
         << "\" y2=\"" << top + plotH
         << "\" stroke=\"#555\" stroke-dasharray=\"2,2\"/>\n<text x=\""
         << x(i) + 3 << "\" y=\"" << top + 12 << "\" fill=\"#555\">backward"
         << "</text>\n";
      break;
    }
  os << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top
     << "\" y2=\"" << top + plotH << "\" stroke=\"black\"/>\n<line x1=\""
     << left << "\" x2=\"" << left + plotW << "\" y1=\"" << top + plotH
     << "\" y2=\"" << top + plotH << "\" stroke=\"black\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    uint64_t bytes = peak * t / 4;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y(bytes) + 4
       << "\" text-anchor=\"end\">" << formatBytes(bytes) << "</text>\n";
  }
  os << "<text x=\"" << left + plotW / 2 << "\" y=\"" << height - 15
     << "\" text-anchor=\"middle\">ops of the step, in schedule order ("
     << r.timeline.size() << ")</text>\n";
  int ly = top + 60;
  for (const Layer &layer : layers) {
    os << "<rect x=\"" << left + plotW + 8 << "\" y=\"" << ly - 10
       << "\" width=\"12\" height=\"12\" fill=\"" << layer.color
       << "\"/>\n<text x=\"" << left + plotW + 24 << "\" y=\"" << ly << "\">"
       << layer.name << "</text>\n";
    ly += 18;
  }
  os << "</svg>\n";
}
