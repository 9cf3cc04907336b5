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
#include "mtc/Dialect/Mtc/IR/MtcDialect.h"
#include "mtc/Driver/Driver.h"
#include "mtc/Import/OnnxImporter.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Timer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

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
    dims("dim", cl::desc("Bind a symbolic input dim: --dim NAME=VALUE "
                         "(repeatable)"),
         cl::value_desc("NAME=VALUE"), cl::sub(compileCmd), cl::sub(planCmd), cl::sub(importCmd),
         cl::sub(inspectCmd), cl::cat(modelCat));
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
                         "frozen: no gradient, no optimizer state "
                         "(repeatable)"),
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
    arch("arch", cl::desc("CUDA architecture for --target cuda: sm_80 or "
                          "sm_90"),
         cl::value_desc("sm_80|sm_90"), cl::init("sm_80"), cl::sub(compileCmd),
         cl::cat(buildCat));
static cl::opt<std::string>
    memBudget("mem-budget",
              cl::desc("Device memory the step may use, e.g. 24GB, 24GiB, "
                       "1.5G, 800MB or bytes (GB = 10^9, GiB = 2^30); a plan "
                       "over it recomputes activations to fit, and is an "
                       "error stating the smallest reachable budget when "
                       "that is not enough"),
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
  if (target == Target::Cuda && arch != "sm_80" && arch != "sm_90")
    return fail("unsupported --arch '" + arch + "' (expected sm_80 or sm_90)");
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

  // Imports the model (and its evaluation function) and runs the passes,
  // recomputing activations down to `rematBudget` bytes (0: none).
  auto planModule =
      [&](int64_t rematBudget) -> FailureOr<OwningOpRef<ModuleOp>> {
    auto imported = importOnnxFile(context, inputPath, *options);
    if (!imported) {
      fail(imported.takeError());
      return failure();
    }
    OwningOpRef<ModuleOp> module = std::move(*imported);
    if (!forwardOnly) {
      ImportOptions evalOptions = *options;
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
    }
    PassManager pm(&context);
    if (forwardOnly) {
      pm.addPass(createCSEPass());
      MemoryPlanPassOptions plan;
      plan.function = "forward";
      pm.addPass(createMemoryPlanPass(plan));
    } else {
      TrainPipelineOptions withRemat = pipeline;
      withRemat.remat.budget = rematBudget;
      buildTrainPipeline(pm, withRemat);
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

  auto planned = planModule(0);
  if (failed(planned))
    return 1;
  OwningOpRef<ModuleOp> module = std::move(*planned);
  llvm::errs() << llvm::format("mtc: imported and planned %s in %.2fs\n",
                               inputPath.c_str(), secondsSince(start));
  // Recompute only when the plan does not fit, aiming a little under the
  // budget: the arena's placement adds a few percent over the max-live
  // bytes recomputation works with.
  if (budget && !forwardOnly && arenaOf(*module) > *budget) {
    for (double factor : {0.97, 0.93, 0.88}) {
      auto smaller = planModule(static_cast<int64_t>(*budget * factor));
      if (failed(smaller))
        return 1;
      module = std::move(*smaller);
      if (arenaOf(*module) <= *budget)
        break;
    }
    llvm::errs() << llvm::format("mtc: recomputation planned in %.2fs\n",
                                 secondsSince(start));
  }
  if (!printIr.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(printIr, ec);
    if (ec)
      return fail("cannot write '" + printIr + "': " + ec.message());
    OpPrintingFlags flags;
    flags.elideLargeResourceString(64);
    module->print(os, flags);
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
  printReportTable(*report, planCmd ? llvm::outs() : llvm::errs());
  if (budget && report->totalBytes > *budget) {
    std::string recomputed =
        report->recomputeFlops
            ? " after recomputing activations (" +
                  std::to_string(report->recomputeFlops) + " extra FLOPs)"
            : "";
    return fail("the plan needs " + formatBytes(report->totalBytes) + " (" +
                Twine(report->totalBytes) + " bytes)" + recomputed +
                " but --mem-budget is " + formatBytes(*budget) + " (" +
                Twine(*budget) + " bytes); the smallest budget mtc can meet "
                "for this model and batch is about " +
                formatBytes(report->totalBytes) +
                ": raise the budget or lower the batch size (micro-batching "
                "and more recomputation choices are not implemented yet)");
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
    std::error_code ec;
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
