//===- mtc.cpp - The mtc command-line driver ------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
//   mtc compile MODEL.onnx [--target cpu|cuda] [-o PATH] [--mem-budget SIZE]
//   mtc import MODEL.onnx          (prints the imported mtc IR)
//
// `compile` runs the same passes as `mtc-opt --mtc-train-pipeline` and then
// generates and builds the trainer.
//
//===----------------------------------------------------------------------===//

#include "mtc/Codegen/EmitTrainer.h"
#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcDialect.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Driver/Driver.h"
#include "mtc/Import/OnnxImporter.h"
#include "mtc/Passes/Passes.h"
#include "mtc/Passes/Remat.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Timer.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <thread>
#include <map>

using namespace mlir;
using namespace mtc;
namespace cl = llvm::cl;

//===----------------------------------------------------------------------===//
// Command line
//===----------------------------------------------------------------------===//

static cl::SubCommand compileCmd(
    "compile", "Compile an ONNX model (loss as first output) into a trainer "
               "executable");
static cl::SubCommand importCmd(
    "import", "Import an ONNX model and print it in the mtc dialect");
static cl::SubCommand planCmd(
    "plan", "Plan the training step's memory without building a trainer: "
            "the breakdown, the timeline and whether --mem-budget holds");
static cl::SubCommand inspectCmd(
    "inspect", "Summarize an ONNX model: inputs, outputs, parameters, op "
               "histogram and the ops mtc does not support");

static cl::OptionCategory modelCat("Model options");
static cl::OptionCategory trainCat("Optimizer options");
static cl::OptionCategory buildCat("Output options");

static cl::opt<std::string> inputPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"),
                                      cl::sub(compileCmd), cl::sub(planCmd), cl::sub(importCmd),
                                      cl::sub(inspectCmd));
static cl::list<std::string>
    dims("dim",
         cl::desc("Bind a symbolic input dim: --dim NAME=VALUE "
                  "(repeatable; NAME must be a symbolic dim of an "
                  "input)"),
         cl::value_desc("NAME=VALUE"), cl::sub(compileCmd), cl::sub(planCmd),
         cl::sub(importCmd), cl::sub(inspectCmd), cl::cat(modelCat));
static cl::opt<std::string>
    lossKind("loss",
             cl::desc("Append a loss to a model whose first output is logits "
                      "(cross-entropy) or predictions (mse); the labels "
                      "become a new graph input (see --labels)"),
             cl::value_desc("cross-entropy|mse"), cl::sub(compileCmd), cl::sub(planCmd),
             cl::sub(importCmd), cl::cat(modelCat));
static cl::opt<std::string>
    labelsName("labels",
               cl::desc("Name of the labels input --loss adds (default "
                        "labels)"),
               cl::value_desc("NAME"), cl::init("labels"), cl::sub(compileCmd), cl::sub(planCmd),
               cl::sub(importCmd), cl::cat(modelCat));
static cl::list<std::string>
    freezeGlobs("freeze",
                cl::desc("Keep the parameters whose ONNX name matches GLOB "
                         "frozen: no gradient, no optimizer state; under "
                         "--precision bf16 / fp16, a frozen weight that only "
                         "GEMMs read takes only its 16-bit copy in device "
                         "memory (the trainer keeps its float32 values on "
                         "the host) (repeatable)"),
                cl::value_desc("GLOB"), cl::sub(compileCmd), cl::sub(planCmd),
                cl::cat(trainCat));
static cl::list<std::string>
    trainGlobs("train",
               cl::desc("Train only the parameters whose ONNX name matches "
                        "GLOB (repeatable); --freeze still applies"),
               cl::value_desc("GLOB"), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));

static cl::opt<std::string>
    outputPath("o", cl::desc("Path of the trainer executable (default: "
                             "trainer); generated sources are written beside "
                             "it"),
               cl::value_desc("PATH"), cl::init("trainer"), cl::sub(compileCmd),
               cl::cat(buildCat));
static cl::opt<std::string>
    targetName("target", cl::desc("Device the trainer runs on: cpu or cuda"),
               cl::value_desc("cpu|cuda"), cl::init("cpu"),
               cl::sub(compileCmd), cl::cat(buildCat));
static cl::opt<std::string>
    arch("arch", cl::desc("CUDA architecture for --target cuda: sm_75 "
                          "(T4; no bfloat16), sm_80 or sm_90 (the CUDA 13 "
                          "toolkit no longer builds for sm_70)"),
         cl::value_desc("sm_75|sm_80|sm_90"), cl::init("sm_80"),
         cl::sub(compileCmd),
         cl::cat(buildCat));
static cl::opt<std::string>
    memBudget("mem-budget",
              cl::desc("Device memory the step may use, e.g. 24GB, 24GiB, "
                       "1.5G, 800MB or bytes (GB = 10^9, GiB = 2^30); a plan "
                       "over it plans convolutions one image per GEMM (the "
                       "least scratch), then recomputes activations to fit, "
                       "and is an error stating the smallest reachable "
                       "budget when that is not enough"),
              cl::value_desc("SIZE"), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<std::string>
    timelinePath("timeline",
                 cl::desc("Draw the step's memory over the schedule, by "
                          "category, as an SVG file"),
                 cl::value_desc("FILE.svg"), cl::sub(compileCmd),
                 cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<std::string>
    reportPath("report", cl::desc("Write the memory report as JSON to FILE"),
               cl::value_desc("FILE.json"), cl::sub(compileCmd), cl::sub(planCmd),
               cl::cat(buildCat));
static cl::opt<std::string> precisionName(
    "precision",
    cl::desc("Precision of GEMM and convolution operands: fp32, or bf16 / "
             "fp16 (operands rounded to 16 bits, products accumulated in "
             "float32, activations saved for the backward pass in 16 bits, "
             "the logits a GEMM computes for a loss, the outputs of linear "
             "layers that the backward or elementwise ops read and the "
             "input gradients of linear layers stored in 16 bits as "
             "torch.autocast stores them; parameters, optimizer state, "
             "weight gradients, "
             "softmax, norms, reductions and losses compute in float32). "
             "auto (default): bf16 for --target cuda on sm_80 and newer, "
             "fp32 otherwise"),
    cl::value_desc("auto|fp32|bf16|fp16"), cl::init("auto"),
    cl::sub(compileCmd),
    cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<std::string> lossScale(
    "loss-scale",
    cl::desc("Dynamic loss scaling: the backward pass runs on loss * scale, "
             "a step whose gradients overflow (inf/NaN) is skipped and "
             "halves the scale, 2000 clean steps double it. auto (default): "
             "on with --precision fp16, off otherwise"),
    cl::value_desc("auto|dynamic|off"), cl::init("auto"), cl::sub(compileCmd),
    cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<double> lossScaleInit(
    "loss-scale-init", cl::desc("Initial loss scale (default 65536)"),
    cl::init(65536.0), cl::sub(compileCmd), cl::sub(planCmd),
    cl::cat(trainCat));
static cl::opt<double> lossScaleGrowth(
    "loss-scale-growth",
    cl::desc("Factor the loss scale grows by after --loss-scale-interval "
             "clean steps in a row (default 2)"),
    cl::init(2.0), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<double> lossScaleBackoff(
    "loss-scale-backoff",
    cl::desc("Factor the loss scale shrinks by on an overflowing, skipped "
             "step (default 0.5)"),
    cl::init(0.5), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<int64_t> lossScaleInterval(
    "loss-scale-interval",
    cl::desc("Clean steps in a row before the loss scale grows (default "
             "2000)"),
    cl::init(2000), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<std::string> microBatch(
    "micro-batch",
    cl::desc("Split each batch into micro-batches of N samples and "
             "accumulate their gradients (one optimizer step per batch); "
             "'auto' picks the micro-batch that fits --mem-budget at the "
             "least estimated step time. Splits the dim named by "
             "--batch-dim, which --dim must bind"),
    cl::value_desc("auto|N"), cl::sub(compileCmd), cl::sub(planCmd),
    cl::cat(buildCat));
static cl::opt<std::string>
    batchDim("batch-dim",
             cl::desc("Name of the symbolic batch dimension --micro-batch "
                      "splits (default batch)"),
             cl::value_desc("NAME"), cl::init("batch"), cl::sub(compileCmd),
             cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<std::string> rematJson(
    "remat-json",
    cl::desc("Write the recomputation model of the step and the solver's "
             "choices along the budget curve as JSON (read by the exact "
             "reference solver of the tests and the bench)"),
    cl::value_desc("FILE.json"), cl::sub(compileCmd), cl::sub(planCmd),
    cl::cat(buildCat));
static cl::opt<bool>
    noBuild("no-build", cl::desc("Write the generated sources but do not run "
                                 "the host or CUDA compiler"),
            cl::sub(compileCmd), cl::cat(buildCat));
static cl::opt<std::string>
    printIr("print-ir", cl::desc("Print the planned IR to FILE ('-' for "
                                 "stdout)"),
            cl::value_desc("FILE"), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<bool> forwardOnly(
    "forward-only",
    cl::desc("Build an inference program instead of a trainer: it runs the "
             "model forward once on <input>.npy files and writes "
             "<output>.npy files (no autodiff, no optimizer)"),
    cl::sub(compileCmd), cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<bool> noFusion(
    "no-fusion",
    cl::desc("Run every op as its own kernel: no fused elementwise chains, "
             "GEMM bias epilogues, layer norms in the kernel before them, "
             "strided views instead of copies, concats instead of padded "
             "sums or the loss computed with its gradient (for comparisons; "
             "on the CPU in fp32 fusion changes no bit of the results)"),
    cl::sub(compileCmd), cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<bool> noFlashAttention(
    "no-flash-attention",
    cl::desc("Keep attention (matmul, scale, mask, softmax, dropout, matmul) "
             "as separate ops that store the Sq x Sk scores, instead of one "
             "fused op whose memory is linear in the sequence length (for "
             "comparisons)"),
    cl::sub(compileCmd), cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<bool> noParameterCopies(
    "no-param-copies",
    cl::desc("With --precision bf16 / fp16, convert each weight to 16 bits "
             "every step where the step first reads it, instead of keeping a "
             "16-bit copy beside it that its AdamW update rewrites, or in "
             "place of it for a frozen weight only GEMMs read (for "
             "comparisons: the numbers are the same). A --mem-budget plan "
             "converts the trained weights, so that recomputation can free "
             "the converted copies"),
    cl::sub(compileCmd), cl::sub(planCmd), cl::cat(buildCat));
static cl::opt<bool> verbose("v", cl::desc("Print the build commands"),
                             cl::sub(compileCmd), cl::cat(buildCat));

static cl::opt<std::string>
    optimizer("optimizer", cl::desc("Update rule: sgd or adamw"),
              cl::value_desc("sgd|adamw"), cl::init("sgd"),
              cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<double> lr("lr", cl::desc("Learning rate (default 0.01)"),
                          cl::init(0.01), cl::sub(compileCmd), cl::sub(planCmd),
                          cl::cat(trainCat));
static cl::opt<double> momentum("momentum",
                                cl::desc("SGD momentum (default 0)"),
                                cl::init(0.0), cl::sub(compileCmd), cl::sub(planCmd),
                                cl::cat(trainCat));
static cl::opt<bool> nesterov("nesterov",
                              cl::desc("SGD Nesterov momentum (needs "
                                       "--momentum > 0)"),
                              cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<double>
    weightDecay("weight-decay",
                cl::desc("Weight decay: L2 for SGD, decoupled for AdamW "
                         "(default 0)"),
                cl::init(0.0), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<int64_t> accumulate(
    "accumulate",
    cl::desc("Gradient accumulation: K micro-batches of the compiled batch "
             "per optimizer step, updating with the mean gradient (default "
             "1)"),
    cl::value_desc("K"), cl::init(1), cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<bool> keepGrads(
    "keep-grads",
    cl::desc("Keep every gradient until the end of the step, for the "
             "trainer's --dump-grads (by default each parameter is updated "
             "as soon as its gradient is complete and the gradient's memory "
             "is released)"),
    cl::sub(compileCmd), cl::sub(planCmd), cl::cat(trainCat));
static cl::opt<double> beta1("beta1",
                             cl::desc("AdamW first-moment decay (default "
                                      "0.9)"),
                             cl::init(0.9), cl::sub(compileCmd), cl::sub(planCmd),
                             cl::cat(trainCat));
static cl::opt<double> beta2("beta2",
                             cl::desc("AdamW second-moment decay (default "
                                      "0.999)"),
                             cl::init(0.999), cl::sub(compileCmd), cl::sub(planCmd),
                             cl::cat(trainCat));
static cl::opt<double> eps("eps",
                           cl::desc("AdamW denominator epsilon (default "
                                    "1e-8)"),
                           cl::init(1e-8), cl::sub(compileCmd), cl::sub(planCmd),
                           cl::cat(trainCat));

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

namespace {

/// Plans with recomputation tried per micro-batch before a budget is given
/// up on.
constexpr int kFitAttempts = 8;

int fail(const Twine &message) {
  llvm::errs() << "mtc: error: " << message << "\n";
  return 1;
}

int fail(llvm::Error err) {
  std::string message = llvm::toString(std::move(err));
  return fail(message);
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

/// Lists the recomputed tensors of the planned step by op kind.
void printRecomputed(ModuleOp module, const MemoryReport &report,
                     llvm::raw_ostream &os) {
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  struct Kind {
    int64_t count = 0, bytes = 0, flops = 0;
  };
  std::map<std::string, Kind> kinds;
  Kind all;
  step.walk([&](Operation *op) {
    if (!op->hasAttr(attr::kRecompute))
      return;
    Kind &k = kinds[op->getName().stripDialect().str()];
    int64_t bytes = 0;
    for (Value v : op->getResults())
      bytes += getTensorBytes(v.getType());
    int64_t flops = 0;
    if (auto cost = dyn_cast<CostOpInterface>(op))
      flops = cost.getFlops();
    for (Kind *x : {&k, &all}) {
      ++x->count;
      x->bytes += bytes;
      x->flops += flops;
    }
  });
  os << llvm::format("recomputed in the backward pass: %lld tensors, %s, "
                     "%.4g GFLOP (+%.1f%% of the forward)\n",
                     static_cast<long long>(all.count),
                     formatBytes(all.bytes).c_str(), all.flops * 1e-9,
                     report.forwardFlops ? 100.0 * all.flops /
                                               report.forwardFlops
                                         : 0.0);
  for (const auto &[name, k] : kinds)
    os << llvm::format("  %-22s %5lld tensors %12s %12.4g GFLOP\n",
                       name.c_str(), static_cast<long long>(k.count),
                       formatBytes(k.bytes).c_str(), k.flops * 1e-9);
}

/// Prints the solver's extra FLOPs at budgets down to the floor.
void printCurve(const std::vector<std::pair<int64_t, RematSolution>> &curve,
                const RematProblem &problem, llvm::raw_ostream &os) {
  os << "budget vs extra compute (peak of the live tensors the "
        "recomputation model counts, on the unfused step; fusion and the "
        "arena's placement move the arena from it):\n";
  int64_t peak = problem.peak();
  for (auto [i, entry] : llvm::enumerate(curve)) {
    const auto &[b, s] = entry;
    std::string label =
        i + 1 == curve.size()
            ? std::string("floor")
            : llvm::formatv("{0:F0}%", 100.0 * b / std::max<int64_t>(peak, 1))
                  .str();
    os << llvm::format("  %-6s %12s  +%.4g GFLOP (+%.1f%% of the forward), "
                       "%lld tensors recomputed, solved in %.3f s\n",
                       label.c_str(), formatBytes(s.peak).c_str(),
                       s.flops * 1e-9,
                       problem.forwardFlops
                           ? 100.0 * s.flops / problem.forwardFlops
                           : 0.0,
                       static_cast<long long>(s.recomputed), s.seconds);
  }
}

/// What the live tensors are at the op where the most bytes are live.
std::string describePeak(const MemoryReport &report) {
  const MemoryReport::TimelinePoint *top = nullptr;
  for (const auto &p : report.timeline)
    if (!top || p.total() > top->total())
      top = &p;
  if (!top)
    return "the step has no ops";
  return "at its peak (" + top->op + ") the live tensors are parameters " +
         formatBytes(top->parameters) + ", gradients " +
         formatBytes(top->gradients) + ", optimizer state " +
         formatBytes(top->optimizerState) + ", activations " +
         formatBytes(top->activations) + ", temporaries " +
         formatBytes(top->temporaries) + ", inputs, buffers and constants " +
         formatBytes(top->other) + " (tensor sizes before alignment padding)";
}

llvm::Expected<ImportOptions> importOptions() {
  ImportOptions options;
  for (const std::string &binding : dims) {
    auto [name, value] = StringRef(binding).split('=');
    int64_t v;
    if (name.empty() || value.getAsInteger(10, v) || v <= 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "invalid --dim '" + binding + "' (expected NAME=POSITIVE_INTEGER)");
    options.dims[name] = v;
  }
  if (lossKind.getNumOccurrences()) {
    options.appendLoss = lossKind;
    options.labelsName = labelsName;
  } else if (labelsName.getNumOccurrences()) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--labels needs --loss");
  }
  return options;
}

int runImport(MLIRContext &context) {
  auto options = importOptions();
  if (!options)
    return fail(options.takeError());
  auto module = importOnnxFile(context, inputPath, *options);
  if (!module)
    return fail(module.takeError());
  OpPrintingFlags flags;
  flags.elideLargeResourceString(64);
  (*module)->print(llvm::outs(), flags);
  return 0;
}

int runInspect() {
  auto options = importOptions();
  if (!options)
    return fail(options.takeError());
  auto summary = summarizeOnnxFile(inputPath, *options);
  if (!summary)
    return fail(summary.takeError());
  llvm::raw_ostream &os = llvm::outs();
  os << "model: " << inputPath << " (opset " << summary->opset << ")\n";
  os << "inputs:\n";
  for (const auto &t : summary->inputs)
    os << "  " << t.name << ": " << t.type << "\n";
  os << "outputs:\n";
  for (const auto &t : summary->outputs)
    os << "  " << t.name << ": " << t.type << "\n";
  os << "parameters: " << summary->parameterCount << " floats in "
     << summary->initializerCount << " initializers, "
     << formatBytes(summary->parameterBytes) << "\n";
  os << "ops:\n";
  for (const auto &[op, count] : summary->histogram)
    os << llvm::format("  %-28s %6lld\n", op.c_str(),
                       static_cast<long long>(count));
  if (summary->unsupported.empty()) {
    os << "unsupported ops: none\n";
  } else {
    os << "unsupported ops (" << summary->unsupported.size() << " nodes):\n";
    for (const auto &[op, node] : summary->unsupported)
      os << "  " << op << " (node '" << node << "')\n";
  }
  return summary->unsupported.empty() ? 0 : 3;
}

int runCompile(MLIRContext &context) {
  auto start = std::chrono::steady_clock::now();
  Target target;
  if (targetName == "cpu")
    target = Target::Cpu;
  else if (targetName == "cuda")
    target = Target::Cuda;
  else
    return fail("unknown --target '" + targetName + "' (expected cpu or cuda)");
  if (target == Target::Cuda && arch == "sm_70")
    return fail("--arch sm_70 is not supported: the CUDA 13 toolkit no "
                "longer builds for Volta (use sm_75 or newer)");
  if (target == Target::Cuda && arch != "sm_75" && arch != "sm_80" &&
      arch != "sm_90")
    return fail("unsupported --arch '" + arch +
                "' (expected sm_75, sm_80 or sm_90)");
  // Tensor cores with bfloat16 from Ampere on; fp32 elsewhere.
  std::string precision = precisionName;
  if (precision == "auto")
    precision = target == Target::Cuda && arch != "sm_75" ? "bf16" : "fp32";
  if (target == Target::Cuda && arch == "sm_75" && precision == "bf16")
    return fail("--precision bf16 needs sm_80 or newer (sm_75 has no "
                "bfloat16 arithmetic); use --precision fp16 on sm_75");
  std::optional<uint64_t> budget;
  if (!memBudget.empty()) {
    auto parsed = parseMemorySize(memBudget);
    if (!parsed)
      return fail(parsed.takeError());
    budget = *parsed;
  }
  if (!noBuild && !planCmd)
    if (llvm::Error err = checkToolchain(target))
      return fail(std::move(err));

  auto options = importOptions();
  if (!options)
    return fail(options.takeError());
  TrainPipelineOptions pipeline;
  pipeline.autodiff.freeze = freezeGlobs;
  pipeline.autodiff.train = trainGlobs;
  pipeline.optimizer.optimizer = optimizer;
  pipeline.optimizer.lr = lr;
  pipeline.optimizer.momentum = momentum;
  pipeline.optimizer.nesterov = nesterov;
  pipeline.optimizer.weightDecay = weightDecay;
  pipeline.optimizer.beta1 = beta1;
  pipeline.optimizer.beta2 = beta2;
  pipeline.optimizer.eps = eps;
  pipeline.optimizer.accumulate = accumulate;
  pipeline.optimizer.keepGrads = keepGrads;
  pipeline.fusion = !noFusion;
  pipeline.flashAttention = !noFlashAttention;
  if (precision != "fp32" && precision != "bf16" && precision != "fp16")
    return fail("unknown --precision '" + precisionName +
                "' (expected auto, fp32, bf16 or fp16)");
  pipeline.precision.precision = precision;
  // cuBLAS multiplies 16-bit operands on the tensor cores; the CPU's BLAS
  // needs them widened.
  pipeline.precision.nativeGemm = target == Target::Cuda;
  // Under a budget the conversions stay: recomputation may free them.
  pipeline.precision.parameterCopies = !noParameterCopies && memBudget.empty();
  // A frozen weight only GEMMs read is smaller as its copy alone.
  pipeline.precision.frozenCopies = !noParameterCopies;
  if (lossScale != "auto" && lossScale != "dynamic" && lossScale != "off")
    return fail("unknown --loss-scale '" + lossScale +
                "' (expected auto, dynamic or off)");
  bool scaling = lossScale == "dynamic" ||
                 (lossScale == "auto" && precision == "fp16");
  if (!scaling || forwardOnly)
    for (const cl::Option *o :
         std::initializer_list<const cl::Option *>{
             &lossScaleInit, &lossScaleGrowth, &lossScaleBackoff,
             &lossScaleInterval})
      if (o->getNumOccurrences())
        return fail("--" + o->ArgStr.str() +
                    " needs loss scaling (--precision fp16, or --loss-scale "
                    "dynamic)");
  if (!(lossScaleInit > 0) || !std::isfinite(float(lossScaleInit)))
    return fail("--loss-scale-init must be a positive float32 value");
  if (!(lossScaleGrowth >= 1))
    return fail("--loss-scale-growth must be at least 1");
  if (!(lossScaleBackoff > 0 && lossScaleBackoff <= 1))
    return fail("--loss-scale-backoff must lie in (0, 1]");
  if (lossScaleInterval < 1)
    return fail("--loss-scale-interval must be at least 1");
  pipeline.autodiff.lossScaling = scaling;
  pipeline.optimizer.lossScaleInit = lossScaleInit;
  pipeline.optimizer.lossScaleGrowth = lossScaleGrowth;
  pipeline.optimizer.lossScaleBackoff = lossScaleBackoff;
  pipeline.optimizer.lossScaleInterval = lossScaleInterval;

  // Micro-batching rebinds the batch dim and accumulates over the batch.
  std::optional<int64_t> fullBatch;
  int64_t fixedMicro = 0;
  if (!microBatch.empty()) {
    if (forwardOnly)
      return fail("--micro-batch applies to training, not --forward-only");
    auto it = options->dims.find(batchDim);
    if (it == options->dims.end())
      return fail("--micro-batch splits the batch dimension '" + batchDim +
                  "', which must be bound: pass --dim " + batchDim +
                  "=SIZE (the model's inputs need a symbolic batch "
                  "dimension; --batch-dim names it when it is not '" +
                  batchDim + "')");
    fullBatch = it->second;
    if (microBatch == "auto" && !budget)
      return fail("--micro-batch auto needs --mem-budget (it picks the "
                  "micro-batch that fits the budget)");
    if (microBatch != "auto") {
      if (StringRef(microBatch).getAsInteger(10, fixedMicro) ||
          fixedMicro <= 0)
        return fail("invalid --micro-batch '" + microBatch +
                    "' (expected auto or a positive integer)");
      if (*fullBatch % fixedMicro)
        return fail("--micro-batch " + microBatch + " does not divide the "
                    "batch (" + batchDim + "=" + Twine(*fullBatch) + ")");
    }
  }

  // Diagnostics name the failing op; print them as "mtc: error: ...".
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diag) {
    llvm::errs() << "mtc: "
                 << (diag.getSeverity() == DiagnosticSeverity::Error
                         ? "error: "
                         : "note: ")
                 << diag << "\n";
    return success();
  });
  auto pipelineFor = [&](int64_t micro) {
    TrainPipelineOptions p = pipeline;
    if (micro)
      p.optimizer.accumulate = accumulate * (*fullBatch / micro);
    return p;
  };

  // Imports the model (and its evaluation function) at micro-batch `micro`
  // (0: the batch as bound) and builds the backward pass and the optimizer.
  auto differentiate =
      [&](int64_t micro) -> FailureOr<OwningOpRef<ModuleOp>> {
    ImportOptions trainOptions = *options;
    if (micro)
      trainOptions.dims[batchDim] = micro;
    auto imported = importOnnxFile(context, inputPath, trainOptions);
    if (!imported) {
      fail(imported.takeError());
      return failure();
    }
    OwningOpRef<ModuleOp> module = std::move(*imported);
    (*module)->setAttr(attr::kTarget,
                       StringAttr::get(&context, target == Target::Cuda
                                                     ? "cuda"
                                                     : "cpu"));
    if (micro && micro != *fullBatch) {
      auto step = module->lookupSymbol<func::FuncOp>("forward");
      for (unsigned i = 0; step && i < step.getNumArguments(); ++i) {
        auto role = step.getArgAttrOfType<StringAttr>(i, "mtc.role");
        auto type = dyn_cast<RankedTensorType>(step.getArgument(i).getType());
        if (role && role.getValue() == "input" &&
            (!type || type.getRank() == 0 || type.getDimSize(0) != micro)) {
          fail("--micro-batch: input '" +
               step.getArgAttrOfType<StringAttr>(i, "mtc.name").getValue() +
               "' has no leading symbolic dimension '" + batchDim +
               "' to split (export the model with a dynamic batch axis, "
               "or name it with --batch-dim)");
          return failure();
        }
      }
    }
    PassManager pm(&context);
    if (forwardOnly) {
      pm.addPass(createConvTapsPass());
      pm.addPass(createLayerNormFusionPass());
      if (pipeline.flashAttention)
        pm.addPass(createAttentionFusionPass());
      pm.addPass(createCSEPass());
    } else {
      ImportOptions evalOptions = trainOptions;
      evalOptions.evalMode = true;
      auto evalModule = importOnnxFile(context, inputPath, evalOptions);
      if (!evalModule) {
        fail(evalModule.takeError());
        return failure();
      }
      if (llvm::Error err = addEvalFunction(*module, **evalModule)) {
        fail(std::move(err));
        return failure();
      }
      buildDifferentiatePipeline(pm, pipelineFor(micro));
    }
    if (failed(pm.run(*module)))
      return failure();
    return module;
  };

  // Plans a copy of a differentiated module, recomputing activations down
  // to `rematBudget` bytes (0: none), fusing elementwise chains if `fuse`.
  auto placeWith = [&](ModuleOp differentiated, int64_t rematBudget,
                       int64_t micro,
                       bool fuse) -> FailureOr<OwningOpRef<ModuleOp>> {
    OwningOpRef<ModuleOp> module = differentiated.clone();
    PassManager pm(&context);
    if (forwardOnly) {
      MemoryPlanPassOptions plan;
      plan.function = "forward";
      if (fuse)
        pm.addPass(createFusionPass());
      pm.addPass(createMemoryPlanPass(plan));
    } else {
      TrainPipelineOptions withRemat = pipelineFor(micro);
      withRemat.remat.budget = rematBudget;
      withRemat.fusion = fuse;
      buildPlacePipeline(pm, withRemat);
    }
    if (failed(pm.run(*module)))
      return failure();
    return module;
  };
  auto arenaOf = [](ModuleOp module) -> uint64_t {
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    auto size =
        step ? step->getAttrOfType<IntegerAttr>("mtc.arena_size") : nullptr;
    return size ? size.getInt() : 0;
  };
  // The fused plan, unless it breaks a budget the unfused one meets: a
  // fused kernel holds all its inputs and results at once, which can raise
  // a peak that recomputation aimed at op by op.
  auto place = [&](ModuleOp differentiated, int64_t rematBudget,
                   int64_t micro) -> FailureOr<OwningOpRef<ModuleOp>> {
    auto fused = placeWith(differentiated, rematBudget, micro,
                           pipeline.fusion);
    if (failed(fused) || !pipeline.fusion || forwardOnly || !budget ||
        arenaOf(**fused) <= *budget)
      return fused;
    auto plain = placeWith(differentiated, rematBudget, micro, false);
    if (failed(plain) || arenaOf(**plain) >= arenaOf(**fused))
      return fused;
    return plain;
  };

  // Convolutions on small feature maps take several images per GEMM, a
  // larger scratch for speed. Where memory is short they take one image
  // per GEMM (attr::kConvGemmColumns = 0), the least scratch. Returns
  // whether `module` has convolutions.
  auto leanConvolutions = [&](ModuleOp module) {
    bool convolutions = false;
    module.walk([&](Operation *op) {
      convolutions |=
          isa<ConvOp, ConvBackwardDataOp, ConvBackwardFilterOp>(op);
    });
    if (convolutions)
      module->setAttr(attr::kConvGemmColumns,
                      IntegerAttr::get(IntegerType::get(&context, 64), 0));
    return convolutions;
  };

  // Plans at one micro-batch and, when that exceeds the budget, recomputes
  // (see the aim below).
  struct Fitted {
    OwningOpRef<ModuleOp> differentiated; // before recomputation and plan
    OwningOpRef<ModuleOp> module;
    int64_t micro = 0;
    bool fits = true;
    RematProblem problem; // of the plan without recomputation
    int64_t floor = 0;    // the least peak recomputation reaches
    int64_t target = 0;   // the budget recomputation was given (0: none)
  };
  auto fit = [&](int64_t micro) -> FailureOr<Fitted> {
    Fitted f;
    f.micro = micro;
    auto differentiated = differentiate(micro);
    if (failed(differentiated))
      return failure();
    f.differentiated = std::move(*differentiated);
    auto planned = place(*f.differentiated, 0, micro);
    if (failed(planned))
      return failure();
    f.module = std::move(*planned);
    if (budget && arenaOf(*f.module) > *budget &&
        leanConvolutions(*f.differentiated)) {
      auto lean = place(*f.differentiated, 0, micro);
      if (failed(lean))
        return failure();
      f.module = std::move(*lean);
    }
    if (forwardOnly)
      return f;
    // Recomputation works on the unfused step.
    OwningOpRef<ModuleOp> unfused;
    if (pipeline.fusion) {
      auto plain = placeWith(*f.differentiated, 0, micro, false);
      if (failed(plain))
        return failure();
      unfused = std::move(*plain);
    }
    f.problem = buildRematProblem(
        (unfused ? *unfused : *f.module)
            .lookupSymbol<func::FuncOp>("train_step"),
        pipeline.memoryPlan.alignment);
    if (!budget || arenaOf(*f.module) <= *budget)
      return f;
    f.fits = false;
    f.floor = solveRemat(f.problem, 0).peak;
    // The model counts the unfused step's live bytes; fusion, views and
    // in-place kernels end below them (by a third on GPT-2), the arena's
    // placement a little above. Aim the model at the budget scaled by that
    // ratio as measured without recomputation, then lower the aim by what
    // the arena overshoots (at least 1%) until it fits. The floor is
    // planned at most once, even when it is over the budget. A fused plan
    // that fits wins; the unfused plan of the first aim at which it alone
    // fits is kept in case none does.
    double aim = double(*budget) * double(f.problem.peak()) /
                 double(std::max<uint64_t>(arenaOf(*f.module), 1));
    OwningOpRef<ModuleOp> unfusedFit;
    int64_t unfusedTarget = 0;
    for (int attempt = 0; attempt < kFitAttempts; ++attempt) {
      int64_t target = std::max<int64_t>(f.floor, static_cast<int64_t>(aim));
      if (target == f.target)
        break; // the floor again
      auto smaller =
          placeWith(*f.differentiated, target, micro, pipeline.fusion);
      if (failed(smaller))
        return failure();
      f.module = std::move(*smaller);
      f.target = target;
      uint64_t arena = arenaOf(*f.module);
      if (arena <= *budget) {
        f.fits = true;
        return f;
      }
      if (pipeline.fusion && !unfusedFit) {
        auto plain = placeWith(*f.differentiated, target, micro, false);
        if (failed(plain))
          return failure();
        if (arenaOf(**plain) <= *budget) {
          unfusedFit = std::move(*plain);
          unfusedTarget = target;
        }
      }
      aim = std::min(aim * 0.99, aim * double(*budget) / double(arena));
    }
    if (unfusedFit) {
      f.module = std::move(unfusedFit);
      f.target = unfusedTarget;
      f.fits = true;
    }
    return f;
  };

  // A rough step time for ranking micro-batch sizes: FLOPs at a nominal
  // rate plus a fixed cost per op, for each of the accumulated steps.
  auto estimateSeconds = [&](Fitted &f) {
    auto report = computeMemoryReport(*f.module);
    if (!report) {
      llvm::consumeError(report.takeError());
      return 0.0;
    }
    auto step = f.module->lookupSymbol<func::FuncOp>("train_step");
    double ops = std::distance(step.getBody().front().begin(),
                               step.getBody().front().end());
    double flops = report->forwardFlops + report->backwardFlops +
                   report->recomputeFlops + report->optimizerFlops;
    bool cuda = target == Target::Cuda;
    double rate = cuda ? 5e13 : 5e10, perOp = cuda ? 5e-6 : 2e-6;
    double steps = f.micro ? double(*fullBatch / f.micro) : 1.0;
    return steps * (flops / rate + ops * perOp);
  };

  Fitted chosen;
  if (microBatch == "auto" && budget) {
    std::optional<Fitted> best;
    double bestSeconds = 0;
    int64_t tried = 0;
    for (int64_t m = *fullBatch; m >= 1; --m) {
      if (*fullBatch % m)
        continue;
      auto f = fit(m);
      if (failed(f))
        return 1;
      tried = m;
      if (!f->fits) {
        llvm::errs() << "mtc: micro-batch " << m << ": does not fit\n";
        continue;
      }
      double seconds = estimateSeconds(*f);
      auto flops = f->module->lookupSymbol<func::FuncOp>("train_step")
                       ->getAttrOfType<IntegerAttr>(attr::kRecomputeFlops);
      bool recomputes = flops && flops.getInt() > 0;
      llvm::errs() << llvm::format(
          "mtc: micro-batch %lld: arena %s%s, estimated step %.3g ms\n",
          static_cast<long long>(m),
          formatBytes(arenaOf(*f->module)).c_str(),
          recomputes ? " with recomputation" : "", seconds * 1e3);
      if (!best || seconds < bestSeconds) {
        bestSeconds = seconds;
        best = std::move(*f);
      }
      // Smaller micro-batches only add per-step costs.
      if (!recomputes)
        break;
    }
    if (best) {
      chosen = std::move(*best);
    } else {
      auto f = fit(tried);
      if (failed(f))
        return 1;
      chosen = std::move(*f);
    }
  } else {
    auto f = fit(fixedMicro ? fixedMicro : (fullBatch ? *fullBatch : 0));
    if (failed(f))
      return 1;
    chosen = std::move(*f);
  }
  OwningOpRef<ModuleOp> module = std::move(chosen.module);
  llvm::errs() << llvm::format("mtc: imported and planned %s in %.2fs\n",
                               inputPath.c_str(), secondsSince(start));
  if (chosen.micro && chosen.micro != *fullBatch)
    llvm::errs() << "mtc: micro-batch " << chosen.micro << " of "
                 << *fullBatch << ": " << (*fullBatch / chosen.micro) *
                                             accumulate
                 << " micro-batches accumulated per optimizer step\n";
  if (!printIr.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(printIr, ec);
    if (ec)
      return fail("cannot write '" + printIr + "': " + ec.message());
    OpPrintingFlags flags;
    flags.elideLargeResourceString(64);
    module->print(os, flags);
  }

  // The budget-vs-extra-compute curve, on the plan without recomputation.
  std::vector<std::pair<int64_t, RematSolution>> curve;
  if (!forwardOnly && (planCmd || !rematJson.empty())) {
    if (!chosen.floor)
      chosen.floor = solveRemat(chosen.problem, 0).peak;
    int64_t peak = chosen.problem.peak();
    for (double f : {1.0, 0.9, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.35, 0.3,
                     0.25, 0.2}) {
      int64_t b = static_cast<int64_t>(peak * f);
      if (b < chosen.floor)
        break;
      curve.push_back({b, {}});
    }
    curve.push_back({chosen.floor, {}});
    // The points are independent: solve them on all cores.
    std::atomic<size_t> nextPoint{0};
    auto worker = [&] {
      for (size_t i; (i = nextPoint++) < curve.size();)
        curve[i].second = solveRemat(chosen.problem, curve[i].first);
    };
    std::vector<std::thread> threads;
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 1; i < std::min<size_t>(cores, curve.size()); ++i)
      threads.emplace_back(worker);
    worker();
    for (std::thread &t : threads)
      t.join();
  }
  if (!rematJson.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(rematJson, ec);
    if (ec)
      return fail("cannot write '" + rematJson + "': " + ec.message());
    // With the choice of the compiled plan, re-solved (deterministic).
    auto points = curve;
    int64_t compiled = -1;
    if (chosen.target) {
      compiled = points.size();
      points.push_back(
          {chosen.target, solveRemat(chosen.problem, chosen.target)});
    }
    writeRematJson(chosen.problem, points, os, compiled);
  }

  auto report = forwardOnly ? computeMemoryReport(*module, "forward")
                            : computeMemoryReport(*module);
  if (!report)
    return fail(report.takeError());
  report->budgetBytes = budget;
  if (!reportPath.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(reportPath, ec);
    if (ec)
      return fail("cannot write '" + reportPath + "': " + ec.message());
    writeReportJson(*report, os);
  }
  if (!timelinePath.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(timelinePath, ec);
    if (ec)
      return fail("cannot write '" + timelinePath + "': " + ec.message());
    writeTimelineSvg(*report, os);
  }
  llvm::raw_ostream &out = planCmd ? llvm::outs() : llvm::errs();
  printReportTable(*report, out);
  if (!forwardOnly && report->recomputeFlops)
    printRecomputed(*module, *report, out);
  // The smallest budget mtc can meet: the arena planned with recomputation
  // aimed at the solver's floor (the least peak of live tensors it
  // reaches), which adds the arena's placement and fusion's effects to it.
  auto leastPlan = [&]() -> FailureOr<OwningOpRef<ModuleOp>> {
    // Convolutions at their least scratch; the recomputation model of
    // that step then has a floor of its own.
    if (!(*chosen.differentiated)->hasAttr(attr::kConvGemmColumns) &&
        leanConvolutions(*chosen.differentiated) && !forwardOnly) {
      auto plain = placeWith(*chosen.differentiated, 0, chosen.micro, false);
      if (failed(plain))
        return failure();
      chosen.problem = buildRematProblem(
          (*plain)->lookupSymbol<func::FuncOp>("train_step"),
          pipeline.memoryPlan.alignment);
      chosen.floor = 0;
    }
    if (!chosen.floor)
      chosen.floor = solveRemat(chosen.problem, 0).peak;
    return place(*chosen.differentiated, std::max<int64_t>(chosen.floor, 1),
                 chosen.micro);
  };
  if (planCmd && !curve.empty()) {
    printCurve(curve, chosen.problem, out);
    auto least = leastPlan();
    if (failed(least))
      return 1;
    uint64_t bytes = arenaOf(**least);
    out << llvm::format("smallest budget mtc can meet: %s (%llu B), the "
                        "arena planned at the floor\n",
                        formatBytes(bytes).c_str(),
                        static_cast<unsigned long long>(bytes));
  }
  if (budget && report->totalBytes > *budget) {
    auto floorPlan = leastPlan();
    if (failed(floorPlan))
      return 1;
    auto least = computeMemoryReport(**floorPlan);
    if (!least)
      return fail(least.takeError());
    std::string hint =
        microBatch.empty()
            ? "raise the budget, lower the batch size, or split the batch "
              "with --micro-batch auto (the batch dimension must be "
              "symbolic and bound with --dim)"
        : microBatch == "auto"
            ? "even micro-batches of " + std::to_string(chosen.micro) +
                  " sample(s) do not fit: raise the budget"
            : "raise the budget or use a smaller --micro-batch";
    return fail("the plan needs " + formatBytes(report->totalBytes) + " (" +
                Twine(report->totalBytes) + " bytes) but --mem-budget is " +
                formatBytes(*budget) + " (" + Twine(*budget) +
                " bytes); the smallest budget mtc can meet for this model "
                "and batch is " + formatBytes(least->totalBytes) + " (" +
                Twine(least->totalBytes) + " bytes), with the recomputation " +
                "that reaches the least peak; " + describePeak(*least) + "; " +
                hint);
  }
  if (planCmd) {
    if (budget)
      llvm::outs() << "the plan fits --mem-budget " << formatBytes(*budget)
                   << (report->recomputeFlops
                           ? "; recomputation adds " +
                                 std::to_string(report->recomputeFlops) +
                                 " FLOPs per step"
                           : std::string("; no recomputation needed"))
                   << "\n";
    return 0;
  }

  // The inference model --export writes, with the trainer's weights.
  std::optional<InferenceTemplate> exportModel;
  ExportLayout exportLayout;
  if (!forwardOnly) {
    std::vector<std::string> weights;
    auto step = module->lookupSymbol<func::FuncOp>("train_step");
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto role = step.getArgAttrOfType<StringAttr>(i, "mtc.role");
      auto name = step.getArgAttrOfType<StringAttr>(i, "mtc.name");
      if (role && name &&
          (role.getValue() == "param" || role.getValue() == "buffer"))
        weights.push_back(name.getValue().str());
    }
    auto built = buildInferenceTemplate(inputPath, *options, weights);
    if (!built)
      return fail(built.takeError());
    exportModel = std::move(*built);
    for (const auto &w : exportModel->weights)
      exportLayout.weights.push_back({w.name, w.offset});
  }

  std::string source;
  llvm::raw_string_ostream os(source);
  std::vector<InitTensor> inits;
  if (llvm::Error err = emitTrainerSource(
          *module, target, llvm::sys::path::filename(inputPath), os, inits,
          exportModel ? &exportLayout : nullptr))
    return fail(std::move(err));

  if (noBuild) {
    std::string path =
        outputPath + (target == Target::Cuda ? ".cu" : ".cpp");
    // As a build does, create the output's directory.
    llvm::StringRef dir = llvm::sys::path::parent_path(outputPath);
    std::error_code ec;
    if (!dir.empty())
      ec = llvm::sys::fs::create_directories(dir);
    if (ec)
      return fail("cannot create '" + dir + "': " + ec.message());
    llvm::raw_fd_ostream src(path, ec);
    if (ec)
      return fail("cannot write '" + path + "': " + ec.message());
    src << source;
    llvm::errs() << "mtc: wrote " << path << " (not built: --no-build)\n";
    return 0;
  }
  BuildOptions build;
  build.target = target;
  build.arch = arch;
  build.output = outputPath;
  build.verbose = verbose;
  auto buildStart = std::chrono::steady_clock::now();
  if (llvm::Error err = buildTrainer(
          source, inits, build, exportModel ? &exportModel->bytes : nullptr))
    return fail(std::move(err));
  llvm::errs() << llvm::format("mtc: built %s (%s) in %.2fs; total %.2fs\n",
                               outputPath.c_str(), targetName.c_str(),
                               secondsSince(buildStart), secondsSince(start));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions({&modelCat, &trainCat, &buildCat});
  cl::ParseCommandLineOptions(
      argc, argv,
      "mtc: a training compiler. It imports an ONNX model whose first output "
      "is the loss, builds the backward pass and optimizer, plans one static "
      "memory arena and emits a trainer executable.\n\n"
      "  mtc compile MODEL.onnx --mem-budget 24GB -o trainer\n"
      "  mtc plan MODEL.onnx --mem-budget 24GB --timeline plan.svg\n"
      "  mtc inspect MODEL.onnx\n"
      "  mtc import MODEL.onnx\n");
  MLIRContext context;
  context.loadDialect<MtcDialect, func::FuncDialect>();
  if (compileCmd || planCmd)
    return runCompile(context);
  if (importCmd)
    return runImport(context);
  if (inspectCmd)
    return runInspect();
  llvm::errs() << "mtc: error: expected a command (compile, plan, import "
                  "or inspect); see mtc --help\n";
  return 2;
}
