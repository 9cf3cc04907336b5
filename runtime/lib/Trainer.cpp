//===- Trainer.cpp - The trainer's main program ---------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Everything a generated trainer does besides the step itself: the command
// line, the single arena allocation, initial values, checkpoints, data
// batches, logging and metrics. The same source serves the CPU and the CUDA
// runtime through the device layer (Device.h).
//
// Every failure is reported as "error: ..." on stderr with a non-zero exit
// code (2 for command-line mistakes, 1 for everything else); nothing here
// throws or aborts.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Trainer.h"

#include "Context.h"
#include "Device.h"
#include "LossScaler.h"
#include "Metrics.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Npy.h"
#include "mtc/runtime/Safetensors.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace mtc::rt {

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

//===----------------------------------------------------------------------===//
// Formatting helpers
//===----------------------------------------------------------------------===//

uint64_t dtypeBytes(DType dtype) {
  return dtype == DType::I64                           ? 8
         : dtype == DType::Bool                        ? 1
         : dtype == DType::BF16 || dtype == DType::F16 ? 2
                                                       : 4;
}

const char *dtypeDescription(DType dtype) {
  return dtype == DType::I64    ? "int64 ('<i8')"
         : dtype == DType::Bool ? "bool ('|b1')"
                                : "float32 ('<f4')";
}

std::string humanBytes(uint64_t bytes) {
  static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[unit]);
  return buf;
}

std::string shapeString(const int64_t *dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string shapeString(const std::vector<int64_t> &dims) {
  return shapeString(dims.data(), static_cast<int>(dims.size()));
}

/// An input's expected shape with the sample axis written as N.
std::string inputShapeString(const TensorDesc &t) {
  std::string s = "[N";
  for (int i = 1; i < t.rank; ++i)
    s += ", " + std::to_string(t.shape[i]);
  return s + "]";
}

void printError(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
}

void printWarning(const std::string &message) {
  std::fprintf(stderr, "warning: %s\n", message.c_str());
}

//===----------------------------------------------------------------------===//
// Command line
//===----------------------------------------------------------------------===//

struct Options {
  std::string dataDir;
  int64_t steps = -1;
  uint64_t seed = 0;
  std::string savePath;
  std::string loadPath;
  std::string metricsPath;
  int64_t logEvery = 1;
  std::string dumpGradsPath;
  bool eval = false;
  bool cudaGraphs = true;
  bool ltGelu = false;
  bool profile = false;
  std::string exportPath;
};

const char *programName(int argc, char **argv) {
  return argc > 0 && argv[0] && argv[0][0] ? argv[0] : "trainer";
}

void printUsage(const char *prog, const ModelDesc &desc) {
  std::printf(
      "usage: %s --steps N [--data DIR] [options]\n"
      "\n"
      "Trains model '%s' (target %s, optimizer: %s) with a device memory\n"
      "plan fixed at compile time.\n"
      "\n"
      "options:\n"
      "  --data DIR          directory with one <input>.npy per model input\n"
      "                      (first axis = samples; see below); not needed\n"
      "                      when the model has no inputs\n"
      "  --steps N           number of optimizer steps to run (required; 0\n"
      "                      runs none, e.g. to --save the initial values)\n"
      "  --seed S            seed of random operators such as dropout\n"
      "                      (default 0); same data and seed give the same\n"
      "                      losses\n"
      "  --load F            start from checkpoint F (a .safetensors file\n"
      "                      written by --save): restores every parameter and\n"
      "                      buffer, the optimizer state it holds and the "
      "step\n"
      "                      counter\n"
      "  --save F            after the last step, write parameters, buffers\n"
      "                      and optimizer state to F (safetensors, written\n"
      "                      atomically)\n"
      "  --metrics F         write one JSON line per step to F:\n"
      "                      {\"step\":K,\"loss\":L,\"time_ms\":T}\n"
      "  --log-every K       print the loss every K steps (default 1); the\n"
      "                      last step is always printed\n"
      "  --dump-grads F      after the last step, write that step's gradients\n"
      "                      to F (safetensors, named like the parameters);\n"
      "                      needs --steps >= 1\n"
      "  --export F.onnx     after the last step, write an inference ONNX\n"
      "                      model with the trained weights (dropout\n"
      "                      removed, BatchNorm on its running statistics,\n"
      "                      the loss dropped); with --steps 0, the initial\n"
      "                      weights\n"
      "  --eval              evaluate instead of training: run the model\n"
      "                      forward (dropout off, BatchNorm on its running\n"
      "                      statistics) over every full batch of --data and\n"
      "                      print the mean loss and the accuracy; use --load\n"
      "                      for trained weights\n"
      "  --profile           time every op of the step and print, after the\n"
      "                      run, each op's share and the bytes per second\n"
      "                      of the elementwise kernels (the first two\n"
      "                      steps warm up; cuda: no CUDA graph)\n"
      "  --no-cuda-graphs    cuda: launch the step's kernels one by one\n"
      "                      instead of replaying it as one CUDA graph\n"
      "                      (captured on the second step); the results\n"
      "                      are the same (no effect on the cpu)\n"
      "  --cublaslt-gelu     cuda: run the GEMMs before a tanh GELU with\n"
      "                      cuBLASLt's GELU epilogue instead of the GEMM\n"
      "                      and mtc's GELU kernel, to compare their times\n"
      "                      (--profile); results differ in rounding only\n"
      "                      (no effect on the cpu)\n"
      "  --help              show this help and exit\n"
      "\n"
      "Flags also accept the --flag=value form.\n",
      prog, desc.modelName ? desc.modelName : "?",
      desc.target ? desc.target : "?", desc.optimizer ? desc.optimizer : "?");
  bool anyInput = false;
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if (t.role != Role::Input)
      continue;
    if (!anyInput)
      std::printf("\nmodel inputs (files in --data DIR; batches of %" PRId64
                  " samples):\n",
                  desc.batchSize);
    anyInput = true;
    std::printf("  %s.npy  %s, shape %s\n", t.name, dtypeDescription(t.dtype),
                inputShapeString(t).c_str());
  }
  if (!anyInput)
    std::printf("\nThe model has no inputs; --data is not needed.\n");
}

bool parseSigned(const std::string &text, int64_t &out) {
  if (text.empty() || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')))
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

bool parseUnsigned(const std::string &text, uint64_t &out) {
  if (text.empty() || text[0] < '0' || text[0] > '9')
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

enum class ParseOutcome { Run, Help, Error };

ParseOutcome parseCommandLine(int argc, char **argv, Options &opts,
                              std::string &error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--help" || arg == "-h")
      return ParseOutcome::Help;
    if (arg == "--eval") {
      opts.eval = true;
      continue;
    }
    if (arg == "--no-cuda-graphs") {
      opts.cudaGraphs = false;
      continue;
    }
    if (arg == "--cublaslt-gelu") {
      opts.ltGelu = true;
      continue;
    }
    if (arg == "--profile") {
      opts.profile = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      error = "unexpected argument '" + arg + "'";
      return ParseOutcome::Error;
    }
    std::string flag = arg, value;
    bool inlineValue = false;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inlineValue = true;
    }
    static const char *known[] = {"--data",       "--steps",     "--seed",
                                  "--save",       "--load",      "--metrics",
                                  "--log-every",  "--dump-grads", "--export"};
    bool isKnown = false;
    for (const char *k : known)
      isKnown = isKnown || flag == k;
    if (!isKnown) {
      error = "unknown flag '" + flag + "'";
      return ParseOutcome::Error;
    }
    if (!inlineValue) {
      // "--data --steps 5" is a forgotten value, not a directory named
      // "--steps".
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
        error = flag + " needs a value";
        return ParseOutcome::Error;
      }
      value = argv[++i];
    }
    if (value.empty()) {
      error = flag + " needs a non-empty value";
      return ParseOutcome::Error;
    }

    if (flag == "--data") {
      opts.dataDir = value;
    } else if (flag == "--steps") {
      if (!parseSigned(value, opts.steps) || opts.steps < 0) {
        error = "--steps expects a non-negative integer, got '" + value + "'";
        return ParseOutcome::Error;
      }
    } else if (flag == "--seed") {
      if (!parseUnsigned(value, opts.seed)) {
        error =
            "--seed expects a non-negative 64-bit integer, got '" + value + "'";
        return ParseOutcome::Error;
      }
    } else if (flag == "--save") {
      opts.savePath = value;
    } else if (flag == "--load") {
      opts.loadPath = value;
    } else if (flag == "--metrics") {
      opts.metricsPath = value;
    } else if (flag == "--log-every") {
      if (!parseSigned(value, opts.logEvery) || opts.logEvery < 1) {
        error = "--log-every expects a positive integer, got '" + value + "'";
        return ParseOutcome::Error;
      }
    } else if (flag == "--dump-grads") {
      opts.dumpGradsPath = value;
    } else if (flag == "--export") {
      opts.exportPath = value;
    }
  }
  if (opts.eval) {
    if (opts.steps >= 0 || !opts.savePath.empty() ||
        !opts.dumpGradsPath.empty() || !opts.metricsPath.empty()) {
      error = "--eval evaluates only: it takes --data, --load and --seed, "
              "not --steps, --save, --metrics or --dump-grads";
      return ParseOutcome::Error;
    }
    opts.steps = 0;
  }
  if (opts.steps < 0) {
    error = "--steps is required";
    return ParseOutcome::Error;
  }
  if (!opts.dumpGradsPath.empty() && opts.steps == 0) {
    error = "--dump-grads needs --steps of at least 1 (no gradient is "
            "computed before the first step)";
    return ParseOutcome::Error;
  }
  return ParseOutcome::Run;
}

/// Fails early, before any training, when an output file could not be
/// created at the end of the run.
Status checkOutputPath(const char *flag, const std::string &path) {
  std::string dir = ".";
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos)
    dir = slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) == 0)
    return Status::success();
  int err = errno;
  return Status::error(
      std::string(flag) + " " + path + ": directory '" + dir + "' " +
      (err == ENOENT ? std::string("does not exist")
                     : "is not writable: " + std::string(std::strerror(err))));
}

//===----------------------------------------------------------------------===//
// Model description
//===----------------------------------------------------------------------===//

/// Checks what the generated code promises, so that a compiler bug shows up
/// as a clear message rather than memory corruption.
Status validateModel(const ModelDesc &desc, int &lossIndex) {
  auto bug = [](const std::string &msg) {
    return Status::error("invalid model description (a compiler bug): " + msg);
  };
  if (!desc.modelName || !desc.target || !desc.optimizer)
    return bug("missing model name, target or optimizer");
  if (!desc.step)
    return bug("no step function");
  if (desc.numTensors < 0 || (desc.numTensors > 0 && !desc.tensors))
    return bug("bad tensor table");
  if (desc.initSize > 0 && !desc.initData)
    return bug("initSize is set but initData is null");
  lossIndex = -1;
  int lossScales = 0, gradStatuses = 0;
  std::map<std::string, int> checkpointNames, inputNames;
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if (!t.name || !t.name[0])
      return bug("tensor #" + std::to_string(i) + " has no name");
    std::string name = t.name;
    std::string what = "tensor '" + name + "': ";
    if (t.rank < 0 || t.rank > 8)
      return bug(what + "rank " + std::to_string(t.rank));
    const bool dtype16 = t.dtype == DType::BF16 || t.dtype == DType::F16;
    if (t.dtype != DType::F32 && t.dtype != DType::I64 &&
        t.dtype != DType::Bool && !dtype16)
      return bug(what + "unknown dtype");
    if (dtype16 != (t.role == Role::ParamCopy))
      return bug(what + "only parameter copies are stored in 16 bits");
    uint64_t bytes = dtypeBytes(t.dtype);
    for (int d = 0; d < t.rank; ++d) {
      if (t.shape[d] < 0)
        return bug(what + "negative dimension");
      bytes *= static_cast<uint64_t>(t.shape[d]);
    }
    if (bytes != t.bytes)
      return bug(what + "size " + std::to_string(t.bytes) +
                 " does not match its shape " + shapeString(t.shape, t.rank));
    if (!t.inArena && t.role != Role::Param && t.role != Role::Buffer)
      return bug(what + "only a parameter or a buffer may lie outside the "
                        "arena");
    if (t.inArena &&
        (t.offset > desc.arenaBytes || t.bytes > desc.arenaBytes - t.offset))
      return bug(what + "bytes [" + std::to_string(t.offset) + ", " +
                 std::to_string(t.offset + t.bytes) +
                 ") lie outside the arena of " +
                 std::to_string(desc.arenaBytes) + " bytes");
    switch (t.role) {
    case Role::Param:
    case Role::Buffer:
    case Role::State:
      if (!checkpointNames.emplace(name, i).second)
        return bug("two checkpointed tensors are named '" + name + "'");
      break;
    case Role::Input:
      if (!desc.inference && (t.rank < 1 || t.shape[0] != desc.batchSize))
        return bug(what + "an input's first dim must be the batch size " +
                   std::to_string(desc.batchSize));
      if (!inputNames.emplace(name, i).second)
        return bug("two inputs are named '" + name + "'");
      break;
    case Role::Grad:
    case Role::Constant:
      break;
    case Role::Output:
      break;
    case Role::Accumulator:
      if (t.owner < 0 || t.owner >= desc.numTensors ||
          desc.tensors[t.owner].role != Role::Param)
        return bug(what + "an accumulator must belong to a parameter");
      break;
    case Role::ParamCopy: {
      if (t.owner < 0 || t.owner >= desc.numTensors ||
          (desc.tensors[t.owner].role != Role::Param &&
           desc.tensors[t.owner].role != Role::Buffer) ||
          desc.tensors[t.owner].dtype != DType::F32)
        return bug(what + "a parameter copy must belong to a float32 "
                          "parameter or buffer");
      const TensorDesc &p = desc.tensors[t.owner];
      if (p.rank != t.rank ||
          std::memcmp(p.shape, t.shape, sizeof(int64_t) * t.rank) != 0)
        return bug(what + "shape differs from its parameter");
      break;
    }
    case Role::EvalLoss:
      if (t.dtype != DType::F32 || t.bytes != 4)
        return bug(what + "the evaluation loss must be a float32 scalar");
      break;
    case Role::EvalCorrect:
      if (t.dtype != DType::F32 || t.bytes != 8)
        return bug(what + "the evaluation counts must be 2 float32 values");
      break;
    case Role::LossScale:
      if (t.dtype != DType::F32 || t.bytes != 4)
        return bug(what + "the loss scale must be a float32 scalar");
      ++lossScales;
      break;
    case Role::GradStatus:
      if (t.dtype != DType::F32 || t.bytes != 8)
        return bug(what + "the gradient status must be 2 float32 values");
      ++gradStatuses;
      break;
    case Role::Loss:
      if (lossIndex >= 0)
        return bug("more than one loss tensor");
      if (t.dtype != DType::F32 || t.bytes != 4)
        return bug(what + "the loss must be a float32 scalar");
      lossIndex = i;
      break;
    default:
      return bug(what + "unknown role");
    }
    if (t.role == Role::Grad || t.role == Role::State) {
      if (t.owner < 0 || t.owner >= desc.numTensors ||
          desc.tensors[t.owner].role != Role::Param)
        return bug(what + "owner is not a parameter");
    }
    if (t.role == Role::Grad) {
      const TensorDesc &p = desc.tensors[t.owner];
      if (p.rank != t.rank || p.bytes != t.bytes || t.dtype != DType::F32 ||
          std::memcmp(p.shape, t.shape, sizeof(int64_t) * t.rank) != 0)
        return bug(what + "shape or dtype differs from its parameter");
    }
  }
  // What lives through the whole step has bytes of its own: the memory
  // plan places each argument of the step apart from every other.
  std::vector<std::pair<uint64_t, int>> persistent; // (offset, tensor)
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    const bool lasting = t.role == Role::Param || t.role == Role::Buffer ||
                         t.role == Role::State || t.role == Role::ParamCopy ||
                         t.role == Role::Accumulator;
    if (lasting && t.inArena && t.bytes > 0)
      persistent.emplace_back(t.offset, i);
  }
  std::sort(persistent.begin(), persistent.end());
  for (size_t k = 1; k < persistent.size(); ++k) {
    const TensorDesc &a = desc.tensors[persistent[k - 1].second];
    const TensorDesc &b = desc.tensors[persistent[k].second];
    if (a.offset + a.bytes > b.offset)
      return bug("tensors '" + std::string(a.name) + "' and '" + b.name +
                 "' overlap in the arena");
  }
  if (lossIndex < 0 && !desc.inference)
    return bug("no loss tensor");
  const int scaled = desc.lossScaling.enabled ? 1 : 0;
  if (lossScales != scaled || gradStatuses != scaled)
    return bug("loss scaling needs exactly one loss scale and one gradient "
               "status tensor, and they need loss scaling");
  if (scaled && !(desc.lossScaling.init > 0 && desc.lossScaling.growth >= 1 &&
                  desc.lossScaling.backoff > 0 &&
                  desc.lossScaling.backoff <= 1 &&
                  desc.lossScaling.interval >= 1))
    return bug("invalid loss scaling policy");
  return Status::success();
}

/// Copies tensor `t` of `file` into the arena after checking dtype and shape.
/// Refuses a file entry of another dtype or shape than tensor t's.
Status checkEntryMatches(const TensorDesc &t, const SafetensorsTensor &entry,
                         const std::string &where) {
  std::vector<int64_t> expected(t.shape, t.shape + t.rank);
  const char *dtype = safetensorsDTypeName(t.dtype);
  if (entry.dtype != dtype || entry.shape != expected)
    return Status::error(where + ": tensor '" + t.name + "' is " + entry.dtype +
                         " " + shapeString(entry.shape) +
                         " but the model expects " + dtype + " " +
                         shapeString(expected));
  return Status::success();
}

Status copyTensorIn(Context &ctx, unsigned char *arena, const TensorDesc &t,
                    const SafetensorsReader &file,
                    const SafetensorsTensor &entry, const std::string &where) {
  if (Status s = checkEntryMatches(t, entry, where); !s.ok())
    return s;
  return device::copyToDevice(ctx, arena + t.offset, file.data(entry), t.bytes);
}

/// The initial value of tensor t embedded in the program (t.bytes bytes).
Status embeddedValue(const ModelDesc &desc, const TensorDesc &t,
                     const unsigned char *&data) {
  SafetensorsReader init;
  if (Status s = init.parse(desc.initData, desc.initSize,
                            "initial values embedded in the program");
      !s.ok())
    return s;
  const SafetensorsTensor *entry = init.find(t.name);
  if (!entry || entry->end - entry->begin != t.bytes)
    return Status::error("invalid model description (a compiler bug): no "
                         "initial value of its size for '" +
                         std::string(t.name) + "'");
  data = init.data(*entry); // in desc.initData, which outlives the reader
  return Status::success();
}

/// Refuses a checkpoint entry (of t's dtype and shape) that gives a
/// compiled-in buffer other values than the ones the program was compiled
/// with: the step would not read them.
Status checkCompiledIn(const ModelDesc &desc, const TensorDesc &t,
                       const SafetensorsReader &file,
                       const SafetensorsTensor &entry,
                       const std::string &where) {
  if (!t.compiledIn)
    return Status::success();
  if (Status s = checkEntryMatches(t, entry, where); !s.ok())
    return s;
  const unsigned char *compiled = nullptr;
  if (Status s = embeddedValue(desc, t, compiled); !s.ok())
    return s;
  if (std::memcmp(file.data(entry), compiled, t.bytes) != 0)
    return Status::error(
        where + ": buffer '" + t.name +
        "' differs from the values the trainer was compiled with: the "
        "compiler built them into the step (as an attention's causal "
        "mask), which does not read this buffer; compile the model again "
        "with these values");
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

/// A batch-sized host buffer of device::allocateStaging.
class StagingBuffer {
public:
  StagingBuffer() = default;
  StagingBuffer(const StagingBuffer &) = delete;
  StagingBuffer &operator=(const StagingBuffer &) = delete;
  StagingBuffer(StagingBuffer &&other) noexcept
      : data_(std::exchange(other.data_, nullptr)) {}
  StagingBuffer &operator=(StagingBuffer &&other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~StagingBuffer() { device::releaseStaging(data_); }
  bool allocate(uint64_t bytes) {
    device::releaseStaging(data_);
    data_ = device::allocateStaging(bytes);
    return data_ != nullptr;
  }
  unsigned char *data() const { return data_; }

private:
  unsigned char *data_ = nullptr;
};

struct InputFeed {
  const TensorDesc *tensor = nullptr;
  std::string path;
  NpyArray array;
  uint64_t sampleBytes = 0;
  /// Two buffers: while the device copies one batch in (the copy may read
  /// page-locked memory after it is queued), the next is gathered in the
  /// other.
  StagingBuffer staging[2];
};

Status openInputs(const ModelDesc &desc, const std::string &dir,
                  std::vector<InputFeed> &feeds, int64_t &numSamples) {
  std::string allFiles;
  for (int i = 0; i < desc.numTensors; ++i)
    if (desc.tensors[i].role == Role::Input)
      allFiles += (allFiles.empty() ? "" : ", ") +
                  std::string(desc.tensors[i].name) + ".npy";
  numSamples = -1;
  // Reserve so that pointers into `feeds` stay valid while it grows.
  int count = 0;
  for (int i = 0; i < desc.numTensors; ++i)
    count += desc.tensors[i].role == Role::Input ? 1 : 0;
  feeds.reserve(count);
  const InputFeed *first = nullptr;
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if (t.role != Role::Input)
      continue;
    feeds.emplace_back();
    InputFeed &feed = feeds.back();
    feed.tensor = &t;
    feed.path = dir + "/" + t.name + ".npy";
    std::string what = "input '" + std::string(t.name) + "'";
    if (Status s = feed.array.open(feed.path); !s.ok())
      return Status::error(what + ": " + s.message() +
                           " (the data directory must hold " + allFiles + ")");
    const std::vector<int64_t> &shape = feed.array.shape();
    bool shapeOk = static_cast<int>(shape.size()) == t.rank;
    for (int d = 1; shapeOk && d < t.rank; ++d)
      shapeOk = shape[d] == t.shape[d];
    if (feed.array.dtype() != t.dtype || !shapeOk)
      return Status::error(what + ": '" + feed.path + "' has dtype '" +
                           feed.array.descr() + "' and shape " +
                           shapeString(shape) + " but the model expects " +
                           dtypeDescription(t.dtype) + " with shape " +
                           inputShapeString(t) + " (N samples, any N >= 1)");
    if (shape[0] < 1)
      return Status::error(what + ": '" + feed.path + "' has no samples");
    feed.sampleBytes = t.bytes / static_cast<uint64_t>(t.shape[0]);
    for (StagingBuffer &buffer : feed.staging)
      if (!buffer.allocate(t.bytes))
        return Status::error(what + ": cannot allocate " +
                             std::to_string(t.bytes) +
                             " bytes to stage its batches in");
    if (!first) {
      first = &feed;
      numSamples = shape[0];
    } else if (shape[0] != numSamples) {
      return Status::error("inputs have different sample counts: '" +
                           first->path + "' has " + std::to_string(numSamples) +
                           ", '" + feed.path + "' has " +
                           std::to_string(shape[0]));
    }
  }
  return Status::success();
}

/// Sample index of batch row `row` for the 0-based global step `stepIndex`:
/// (stepIndex * B + row) mod numSamples, without overflowing.
int64_t sampleIndex(int64_t stepIndex, int64_t batch, int64_t row,
                    int64_t numSamples) {
  uint64_t n = static_cast<uint64_t>(numSamples);
  uint64_t a = static_cast<uint64_t>(stepIndex) % n;
  uint64_t b = static_cast<uint64_t>(batch) % n;
  unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<int64_t>(
      (static_cast<uint64_t>(product % n) + static_cast<uint64_t>(row)) % n);
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

/// Owns the device state so that every exit path releases it.
struct DeviceSession {
  Context &ctx;
  bool initialized = false;
  unsigned char *arena = nullptr;
  uint64_t arenaBytes = 0;

  explicit DeviceSession(Context &c) : ctx(c) {}
  ~DeviceSession() {
    if (arena)
      device::releaseZeroed(arena, arenaBytes);
    if (initialized)
      device::shutdown(ctx);
  }
};

/// Allocates the one arena, zeroed.
Status allocateArena(Context &ctx, const ModelDesc &desc,
                     DeviceSession &session) {
  session.arenaBytes = desc.arenaBytes;
  return device::allocateZeroed(ctx, desc.arenaBytes, &session.arena);
}

/// Drops the pages wholly inside [data, data + bytes) from the process: the
/// initial values embedded in the program are read once, and their pages
/// (file-backed, read-only) would otherwise stay resident beside the arena's
/// copy. Reading them again faults them back in from the file.
void dropReadOnlyPages(const void *data, uint64_t bytes) {
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0)
    return;
  const uintptr_t size = static_cast<uintptr_t>(page);
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (at + size - 1) / size * size;
  const uintptr_t end = (at + bytes) / size * size;
  if (end > begin)
    madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
}

/// The values of the tensors that lie outside the arena: compiled-in
/// buffers, and parameters the step does not read (frozen ones whose GEMMs
/// read their 16-bit copies). They are the embedded initial values until a
/// checkpoint gives a parameter others; --save, --export and the parameter
/// copies take them from here.
class HostValues {
public:
  Status init(const ModelDesc &desc) {
    views_.assign(desc.numTensors, nullptr);
    owned_.resize(desc.numTensors);
    for (int i = 0; i < desc.numTensors; ++i)
      if (!desc.tensors[i].inArena)
        if (Status s = embeddedValue(desc, desc.tensors[i], views_[i]); !s.ok())
          return s;
    return Status::success();
  }
  /// The t.bytes bytes of tensor `i` (one outside the arena).
  const unsigned char *data(int i) const { return views_[i]; }
  /// Whether tensor `i`'s values are the embedded ones (read-only pages of
  /// the program, which the kernel may drop and read again).
  bool embedded(int i) const { return owned_[i].empty(); }
  /// Takes parameter `i`'s values from a checkpoint entry.
  Status load(const ModelDesc &desc, int i, const SafetensorsReader &file,
              const SafetensorsTensor &entry, const std::string &where) {
    const TensorDesc &t = desc.tensors[i];
    if (Status s = checkEntryMatches(t, entry, where); !s.ok())
      return s;
    const unsigned char *data = file.data(entry);
    owned_[i].assign(data, data + t.bytes);
    views_[i] = owned_[i].data();
    return Status::success();
  }

private:
  std::vector<const unsigned char *> views_;
  std::vector<std::vector<unsigned char>> owned_;
};

/// Copies the embedded initial values of parameters, buffers and constants
/// into the arena.
Status loadInitialValues(Context &ctx, const ModelDesc &desc,
                         unsigned char *arena) {
  const char *what = "initial values embedded in the program";
  SafetensorsReader init;
  if (desc.initSize > 0)
    if (Status s = init.parse(desc.initData, desc.initSize, what); !s.ok())
      return s;
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if ((t.role != Role::Param && t.role != Role::Buffer &&
         t.role != Role::Constant) ||
        !t.inArena)
      continue;
    const SafetensorsTensor *entry = init.find(t.name);
    if (!entry)
      return Status::error("invalid model description (a compiler bug): no "
                           "initial value for '" +
                           std::string(t.name) + "'");
    if (Status s = copyTensorIn(ctx, arena, t, init, *entry, what); !s.ok())
      return s;
    dropReadOnlyPages(init.data(*entry), t.bytes);
  }
  return Status::success();
}

/// Forms each 16-bit parameter copy from its parameter (after the
/// parameters were loaded), rounded as the step's conversions round: on
/// the device, or on the host for a parameter outside the arena.
Status refreshParameterCopies(Context &ctx, const ModelDesc &desc,
                              unsigned char *arena, const HostValues &host) {
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if (t.role != Role::ParamCopy)
      continue;
    const TensorDesc &p = desc.tensors[t.owner];
    const int64_t n = static_cast<int64_t>(t.bytes / 2), one = 1;
    if (!p.inArena) {
      const unsigned char *values = host.data(t.owner);
      std::vector<uint16_t> rounded(n);
      const bool bf16 = t.dtype == DType::BF16;
      for (int64_t k = 0; k < n; ++k) {
        float v;
        std::memcpy(&v, values + k * sizeof(float), sizeof(float));
        rounded[k] = bf16 ? floatToBf16(v) : floatToHalf(v);
      }
      if (Status s = device::copyToDevice(ctx, arena + t.offset, rounded.data(),
                                          t.bytes);
          !s.ok())
        return s;
      if (host.embedded(t.owner))
        dropReadOnlyPages(values, p.bytes); // read again by --save, if ever
      continue;
    }
    stridedCopyTo16(
        ctx, t.dtype == DType::BF16 ? Storage16::Bf16 : Storage16::F16, 1, &n,
        reinterpret_cast<const float *>(arena + p.offset), 0, &one,
        reinterpret_cast<uint16_t *>(arena + t.offset), 0, &one);
  }
  if (hasError(ctx))
    return Status::error("parameter copies: " + takeError(ctx).message);
  return Status::success();
}

/// Reads what a checkpoint says about the step counters and the loss scale
/// (written by --save) beyond the training step.
Status restoreStepState(const SafetensorsReader &checkpoint,
                        const std::string &where, int64_t startStep,
                        int64_t &optimizerSteps, const ModelDesc &desc,
                        LossScaler &scaler) {
  const auto &meta = checkpoint.metadata();
  optimizerSteps = startStep;
  if (auto it = meta.find("optimizer_step"); it != meta.end())
    if (!parseSigned(it->second, optimizerSteps) || optimizerSteps < 0 ||
        optimizerSteps > startStep)
      return Status::error(where + ": metadata \"optimizer_step\" is not a "
                           "step count up to \"step\": '" + it->second + "'");
  if (!desc.lossScaling.enabled)
    return Status::success();
  auto scale = meta.find("loss_scale");
  auto clean = meta.find("loss_scale_clean_steps");
  if (scale == meta.end() || clean == meta.end()) {
    printWarning(where + " has no loss scale; starting from " +
                 formatFloatExact(scaler.scale()));
    return Status::success();
  }
  char *end = nullptr;
  double value = std::strtod(scale->second.c_str(), &end);
  int64_t cleanSteps = 0;
  if (end == scale->second.c_str() || *end != '\0' || !(value > 0) ||
      !std::isfinite(static_cast<float>(value)) ||
      !parseSigned(clean->second, cleanSteps) || cleanSteps < 0)
    return Status::error(where + ": invalid loss scale metadata ('" +
                         scale->second + "', '" + clean->second + "')");
  scaler.restore(static_cast<float>(value), cleanSteps);
  return Status::success();
}

/// Copies the tensors with the given roles to host buffers and writes them.
Status writeTensors(Context &ctx, const ModelDesc &desc, unsigned char *arena,
                    const HostValues &host, const std::string &path, bool grads,
                    const std::map<std::string, std::string> &metadata,
                    int &count, float gradUnscale = 1.0f) {
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<SafetensorsEntry> entries;
  buffers.reserve(desc.numTensors);
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    bool wanted = grads ? t.role == Role::Grad
                        : (t.role == Role::Param || t.role == Role::Buffer ||
                           t.role == Role::State);
    if (!wanted)
      continue;
    buffers.emplace_back(t.bytes);
    if (!t.inArena) {
      std::memcpy(buffers.back().data(), host.data(i), t.bytes);
    } else if (Status s = device::copyToHost(ctx, buffers.back().data(),
                                             arena + t.offset, t.bytes);
               !s.ok()) {
      return s;
    }
    if (grads && gradUnscale != 1.0f) {
      // Loss-scaled gradients, reported as the gradients of the loss.
      if (Status s = device::synchronize(ctx); !s.ok())
        return s;
      float *g = reinterpret_cast<float *>(buffers.back().data());
      for (uint64_t k = 0; k < t.bytes / sizeof(float); ++k)
        g[k] *= gradUnscale;
    }
    SafetensorsEntry e;
    // Gradients are stored under their parameter's name so that the file
    // lines up with the parameters (and with PyTorch's named_parameters).
    e.name = grads ? desc.tensors[t.owner].name : t.name;
    e.dtype = t.dtype;
    e.shape.assign(t.shape, t.shape + t.rank);
    e.data = buffers.back().data();
    e.bytes = t.bytes;
    entries.push_back(std::move(e));
  }
  count = static_cast<int>(entries.size());
  return writeSafetensors(path, entries, metadata);
}

/// Writes `bytes` to `path` through a temporary file and a rename.
Status writeFileAtomically(const std::string &path, const std::string &bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + path + "': " +
                         std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error("cannot write '" + path + "': " +
                         std::strerror(errno));
  }
  return Status::success();
}

/// Gathers batch `batchIndex` (samples (batchIndex * B + row) mod N) of
/// every input into staging buffer `slot`: host work only, which the
/// training loop does while the device runs the step before.
void gatherBatch(const ModelDesc &desc, std::vector<InputFeed> &feeds,
                 int64_t batchIndex, int64_t numSamples, int slot) {
  for (InputFeed &feed : feeds)
    for (int64_t row = 0; row < desc.batchSize; ++row) {
      int64_t sample = sampleIndex(batchIndex, desc.batchSize, row, numSamples);
      std::memcpy(feed.staging[slot].data() + row * feed.sampleBytes,
                  feed.array.data() + sample * feed.sampleBytes,
                  feed.sampleBytes);
    }
}

/// Queues the copies of the batch gathered in staging buffer `slot` into
/// the inputs' places in the arena. The buffer must not be gathered into
/// again before the device has run the copies (a synchronize() between).
Status uploadBatch(Context &ctx, unsigned char *arena,
                   std::vector<InputFeed> &feeds, int slot) {
  for (InputFeed &feed : feeds)
    if (Status s =
            device::copyToDevice(ctx, arena + feed.tensor->offset,
                                 feed.staging[slot].data(), feed.tensor->bytes);
        !s.ok())
      return s;
  return Status::success();
}

/// Both: batch `batchIndex` into the arena through staging buffer 0.
Status loadBatch(Context &ctx, const ModelDesc &desc, unsigned char *arena,
                 std::vector<InputFeed> &feeds, int64_t batchIndex,
                 int64_t numSamples) {
  gatherBatch(desc, feeds, batchIndex, numSamples, 0);
  return uploadBatch(ctx, arena, feeds, 0);
}

/// `--eval`: every full batch of the data once, in order.
int evaluate(Context &ctx, const ModelDesc &desc, unsigned char *arena,
             std::vector<InputFeed> &feeds, int64_t numSamples,
             const InputFeed *labelFeed) {
  if (!desc.evalStep) {
    printError("this trainer was compiled without an evaluation function");
    return kExitFailure;
  }
  const TensorDesc *lossTensor = nullptr, *correctTensor = nullptr;
  for (int i = 0; i < desc.numTensors; ++i) {
    if (desc.tensors[i].role == Role::EvalLoss)
      lossTensor = &desc.tensors[i];
    if (desc.tensors[i].role == Role::EvalCorrect)
      correctTensor = &desc.tensors[i];
  }
  if (!lossTensor) {
    printError("invalid model description (a compiler bug): no evaluation "
               "loss");
    return kExitFailure;
  }
  int64_t batches = feeds.empty() ? 1 : numSamples / desc.batchSize;
  if (batches == 0) {
    printError("--eval needs at least one full batch: the data has " +
               std::to_string(numSamples) + " samples, the batch is " +
               std::to_string(desc.batchSize));
    return kExitFailure;
  }
  Clock::time_point start = Clock::now();
  double lossSum = 0.0, correct = 0.0, counted = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    // Full batches only, so batch b is samples [b*B, (b+1)*B).
    if (Status s = loadBatch(ctx, desc, arena, feeds, b, numSamples);
        !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    desc.evalStep(ctx, arena);
    float batchLoss = 0.0f, batchCorrect[2] = {0.0f, 0.0f};
    Status s = device::copyToHostLater(
        ctx, &batchLoss, arena + lossTensor->offset, sizeof(float));
    if (s.ok() && correctTensor)
      s = device::copyToHostLater(ctx, batchCorrect,
                                  arena + correctTensor->offset,
                                  sizeof(batchCorrect));
    if (s.ok())
      s = device::synchronize(ctx);
    if (!s.ok()) {
      printError("eval batch " + std::to_string(b) + ": " + s.message());
      return kExitFailure;
    }
    if (hasError(ctx)) {
      ContextError err = takeError(ctx);
      std::string where;
      if (err.batchRow >= 0 && labelFeed)
        where = " (sample " + std::to_string(b * desc.batchSize + err.batchRow) +
                " of '" + labelFeed->path + "')";
      printError("eval batch " + std::to_string(b) + ": " + err.message +
                 where);
      return kExitFailure;
    }
    lossSum += batchLoss;
    correct += batchCorrect[0];
    counted += batchCorrect[1];
  }
  int64_t evaluated = feeds.empty() ? desc.batchSize : batches * desc.batchSize;
  std::printf("eval: %" PRId64 " samples in %" PRId64 " batches", evaluated,
              batches);
  if (!feeds.empty() && numSamples > evaluated)
    std::printf(" (the last %" PRId64 " samples do not fill a batch)",
                numSamples - evaluated);
  std::printf("\neval loss %.7g\n", lossSum / static_cast<double>(batches));
  if (correctTensor)
    std::printf("eval accuracy %.4f (%.0f of %.0f)\n",
                counted > 0 ? correct / counted : 0.0, correct, counted);
  std::printf("mtc trainer: evaluated in %.3f s\n", secondsSince(start));
  std::fflush(stdout);
  return 0;
}

/// --profile skips this many steps (caches, allocators, first launches).
int64_t profileWarmup(int64_t steps) { return steps > 3 ? 2 : 0; }

/// The --profile report: each op's time per step, largest first, and what
/// the generated elementwise kernels (and, apart, the fused kernels ending
/// in a layer norm) move per second.
void printProfile(const Context &ctx, const ModelDesc &desc, int64_t steps) {
  const int64_t profiled = steps - profileWarmup(steps);
  const int n = static_cast<int>(ctx.profileMs.size());
  std::vector<int> order(n);
  double totalMs = 0.0;
  struct Kernels {
    int count = 0;
    double ms = 0.0, bytes = 0.0;
  } elementwise, rows;
  for (int i = 0; i < n; ++i) {
    order[i] = i;
    const double ms = ctx.profileMs[i] / static_cast<double>(profiled);
    totalMs += ms;
    const ProfileOp &op = desc.profileOps[i];
    if (Kernels *k = op.elementwise ? &elementwise
                     : op.rowKernel ? &rows
                                    : nullptr) {
      ++k->count;
      k->ms += ms;
      k->bytes += static_cast<double>(op.bytes);
    }
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return ctx.profileMs[a] > ctx.profileMs[b];
  });
  auto perSecond = [](double amount, double ms) {
    return ms > 0.0 ? amount / (ms * 1e6) : 0.0; // G per second
  };
  std::printf("mtc trainer: profile of the last %" PRId64
              " steps, per step: %d ops, %.3f ms\n",
              profiled, n, totalMs);
  std::printf("mtc trainer: elementwise kernels: %d, %.3f ms, %.3f GB moved, "
              "%.1f GB/s\n",
              elementwise.count, elementwise.ms, elementwise.bytes / 1e9,
              perSecond(elementwise.bytes, elementwise.ms));
  if (rows.count > 0)
    std::printf("mtc trainer: fused kernels ending in a layer norm: %d, "
                "%.3f ms, %.3f GB moved, %.1f GB/s\n",
                rows.count, rows.ms, rows.bytes / 1e9,
                perSecond(rows.bytes, rows.ms));
  // Per kind of op (all convolutions, all optimizer updates...), then the
  // single ops that take the most time.
  // A generated kernel's name follows its op's ("mtc.fused k3_fused_...").
  struct Kind {
    std::string name;
    double ms = 0.0, bytes = 0.0, flops = 0.0;
    int ops = 0;
  };
  std::vector<Kind> kinds;
  for (int i = 0; i < n; ++i) {
    const ProfileOp &op = desc.profileOps[i];
    std::string name = op.name;
    name = name.substr(0, name.find(' '));
    auto it = std::find_if(kinds.begin(), kinds.end(),
                           [&](const Kind &k) { return k.name == name; });
    if (it == kinds.end())
      it = kinds.insert(kinds.end(), Kind{name});
    it->ms += ctx.profileMs[i] / static_cast<double>(profiled);
    it->bytes += static_cast<double>(op.bytes);
    it->flops += static_cast<double>(op.flops);
    ++it->ops;
  }
  std::sort(kinds.begin(), kinds.end(),
            [](const Kind &a, const Kind &b) { return a.ms > b.ms; });
  std::printf("   ms/step      %%    ops     GB/s  GFLOP/s  kind\n");
  for (const Kind &k : kinds)
    std::printf("  %8.3f %5.1f%% %6d %8.1f %8.1f  %s\n", k.ms,
                totalMs > 0.0 ? 100.0 * k.ms / totalMs : 0.0, k.ops,
                perSecond(k.bytes, k.ms), perSecond(k.flops, k.ms),
                k.name.c_str());
  std::printf("   ms/step      %%     GB/s  GFLOP/s  op\n");
  for (int rank = 0; rank < n && rank < 25; ++rank) {
    const ProfileOp &op = desc.profileOps[order[rank]];
    const double ms = ctx.profileMs[order[rank]] / static_cast<double>(profiled);
    std::printf("  %8.3f %5.1f%% %8.1f %8.1f  %s%s%s%s\n", ms,
                totalMs > 0.0 ? 100.0 * ms / totalMs : 0.0,
                perSecond(static_cast<double>(op.bytes), ms),
                perSecond(static_cast<double>(op.flops), ms), op.name,
                op.node[0] ? " (ONNX node '" : "", op.node,
                op.node[0] ? "')" : "");
  }
}

int run(const Options &opts, const ModelDesc &desc, int lossIndex) {
  Context ctx;
  ctx.seed = opts.seed;
  ctx.cudaGraphs = opts.cudaGraphs;
  ctx.ltGelu = opts.ltGelu;
  const TensorDesc &lossTensor = desc.tensors[lossIndex];
  const TensorDesc *lossScaleTensor = nullptr, *gradStatusTensor = nullptr;
  for (int i = 0; i < desc.numTensors; ++i) {
    if (desc.tensors[i].role == Role::LossScale)
      lossScaleTensor = &desc.tensors[i];
    if (desc.tensors[i].role == Role::GradStatus)
      gradStatusTensor = &desc.tensors[i];
  }
  LossScaler scaler(desc.lossScaling);

  const struct {
    const char *flag;
    const std::string &path;
  } outputs[] = {{"--save", opts.savePath},
                 {"--metrics", opts.metricsPath},
                 {"--dump-grads", opts.dumpGradsPath},
                 {"--export", opts.exportPath}};
  bool hasGrads = false;
  for (int i = 0; i < desc.numTensors; ++i)
    hasGrads = hasGrads || desc.tensors[i].role == Role::Grad;
  if (!opts.dumpGradsPath.empty() && !hasGrads) {
    printError("--dump-grads needs a trainer compiled with --keep-grads (by "
               "default each gradient is released once its update ran)");
    return kExitFailure;
  }
  if (!opts.exportPath.empty() && !desc.exportData) {
    printError("this trainer was compiled without an export model");
    return kExitFailure;
  }
  for (const auto &output : outputs) {
    if (output.path.empty())
      continue;
    if (Status s = checkOutputPath(output.flag, output.path); !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
  }

  std::printf("mtc trainer: model %s, target %s, optimizer %s\n",
              desc.modelName, desc.target, desc.optimizer);
  std::printf("mtc trainer: device %s\n", device::name().c_str());
  std::printf("mtc trainer: arena %s (%" PRIu64
              " bytes), planned at compile time\n",
              humanBytes(desc.arenaBytes).c_str(), desc.arenaBytes);
  uint64_t hostWeightBytes = 0;
  for (int i = 0; i < desc.numTensors; ++i)
    if (!desc.tensors[i].inArena && !desc.tensors[i].compiledIn)
      hostWeightBytes += desc.tensors[i].bytes;
  if (hostWeightBytes > 0)
    std::printf("mtc trainer: frozen weights on the host %s (%" PRIu64
                " bytes; the step reads their 16-bit copies)\n",
                humanBytes(hostWeightBytes).c_str(), hostWeightBytes);
  std::fflush(stdout);

  // Data first: a wrong file should fail before the device is touched.
  std::vector<InputFeed> feeds;
  int64_t numSamples = 0;
  if (!opts.dataDir.empty()) {
    if (Status s = openInputs(desc, opts.dataDir, feeds, numSamples); !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    if (feeds.empty())
      printWarning("--data is ignored: the model has no inputs");
    else
      std::printf("mtc trainer: data %s, %" PRId64 " samples, batch %" PRId64
                  " (%" PRId64 " steps per epoch)\n",
                  opts.dataDir.c_str(), numSamples, desc.batchSize,
                  (numSamples + desc.batchSize - 1) /
                      (desc.batchSize > 0 ? desc.batchSize : 1));
    if (desc.accumulateSteps > 1)
      std::printf("mtc trainer: %" PRId64 " micro-batches of %" PRId64
                  " per optimizer step (gradient accumulation)\n",
                  desc.accumulateSteps, desc.batchSize);
  }

  DeviceSession session(ctx);
  if (Status s = device::initialize(ctx); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  session.initialized = true;
  if (std::string(device::kind()) == "cuda") {
    uint64_t freeBytes = 0, totalBytes = 0;
    if (device::memoryInfo(freeBytes, totalBytes)) {
      const uint64_t workspace = device::workspaceBytes(ctx);
      std::printf("mtc trainer: device memory %s free of %s; the plan needs "
                  "%s (%" PRIu64 " bytes) beside the %s (%" PRIu64
                  " bytes) of library workspace\n",
                  humanBytes(freeBytes).c_str(), humanBytes(totalBytes).c_str(),
                  humanBytes(desc.arenaBytes).c_str(), desc.arenaBytes,
                  humanBytes(workspace).c_str(), workspace);
      if (desc.arenaBytes > freeBytes) {
        printError("the planned arena (" + humanBytes(desc.arenaBytes) +
                   ") does not fit in the " + humanBytes(freeBytes) +
                   " of free device memory; compile with a smaller "
                   "--mem-budget");
        return kExitFailure;
      }
    }
  }
  if (Status s = allocateArena(ctx, desc, session); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  unsigned char *arena = session.arena;
  if (Status s = loadInitialValues(ctx, desc, arena); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  HostValues host;
  if (Status s = host.init(desc); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }

  int64_t startStep = 0;
  // Optimizer steps taken: the training steps minus the skipped ones.
  int64_t optimizerSteps = 0;
  if (!opts.loadPath.empty()) {
    SafetensorsReader checkpoint;
    if (Status s = checkpoint.open(opts.loadPath); !s.ok()) {
      printError("--load: " + s.message());
      return kExitFailure;
    }
    std::string where = "checkpoint '" + opts.loadPath + "'";
    int used = 0;
    for (int i = 0; i < desc.numTensors; ++i) {
      const TensorDesc &t = desc.tensors[i];
      if (t.role != Role::Param && t.role != Role::Buffer &&
          t.role != Role::State)
        continue;
      const SafetensorsTensor *entry = checkpoint.find(t.name);
      if (!entry) {
        if (t.role == Role::State)
          continue; // optimizer state starts from zero, as in a fresh run
        printError(where + " has no tensor '" + t.name + "' (a " +
                   (t.role == Role::Param ? "parameter" : "buffer") +
                   " of the model)");
        return kExitFailure;
      }
      if (Status s =
              t.inArena ? copyTensorIn(ctx, arena, t, checkpoint, *entry, where)
              : t.compiledIn ? Status::success()
                             : host.load(desc, i, checkpoint, *entry, where);
          !s.ok()) {
        printError(s.message());
        return kExitFailure;
      }
      if (Status s = checkCompiledIn(desc, t, checkpoint, *entry, where);
          !s.ok()) {
        printError(s.message());
        return kExitFailure;
      }
      ++used;
    }
    int unused = static_cast<int>(checkpoint.tensors().size()) - used;
    if (unused > 0) {
      std::string example;
      for (const SafetensorsTensor &t : checkpoint.tensors()) {
        bool known = false;
        for (int i = 0; i < desc.numTensors && !known; ++i)
          known = (desc.tensors[i].role == Role::Param ||
                   desc.tensors[i].role == Role::Buffer ||
                   desc.tensors[i].role == Role::State) &&
                  t.name == desc.tensors[i].name;
        if (!known) {
          example = t.name;
          break;
        }
      }
      printWarning(where + " has " + std::to_string(unused) +
                   " tensor(s) this model does not use, e.g. '" + example +
                   "'");
    }
    auto step = checkpoint.metadata().find("step");
    if (step != checkpoint.metadata().end()) {
      if (!parseSigned(step->second, startStep) || startStep < 0) {
        printError(where + ": metadata \"step\" is not a step count: '" +
                   step->second + "'");
        return kExitFailure;
      }
    } else {
      printWarning(where + " has no \"step\" metadata; counting steps from 0");
    }
    optimizerSteps = startStep;
    if (Status s = restoreStepState(checkpoint, where, startStep,
                                    optimizerSteps, desc, scaler);
        !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    std::printf("mtc trainer: loaded %s (step %" PRId64 ")\n",
                opts.loadPath.c_str(), startStep);
  }
  if (Status s = refreshParameterCopies(ctx, desc, arena, host); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }

  MetricsWriter metrics;
  if (!opts.metricsPath.empty()) {
    if (Status s = metrics.open(opts.metricsPath); !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
  }

  // Name the labels file in data errors when it is unambiguous.
  const InputFeed *labelFeed = nullptr;
  int labelInputs = 0;
  for (const InputFeed &feed : feeds)
    if (feed.tensor->dtype == DType::I64) {
      labelFeed = &feed;
      ++labelInputs;
    }
  if (labelInputs != 1)
    labelFeed = nullptr;

  if (opts.eval)
    return evaluate(ctx, desc, arena, feeds, numSamples, labelFeed);

  if (opts.profile) {
    if (Status s = device::profileSetup(ctx, desc.numProfileOps); !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
  }
  float loss = std::numeric_limits<float>::quiet_NaN();
  Clock::time_point loopStart = Clock::now();
  const int64_t micro = desc.accumulateSteps > 0 ? desc.accumulateSteps : 1;
  int64_t skipped = 0;
  float stepScale = scaler.scale();
  if (lossScaleTensor)
    std::printf("mtc trainer: dynamic loss scaling from %g (x%g after %" PRId64
                " clean steps, x%g and the step skipped on overflow)\n",
                static_cast<double>(scaler.scale()), desc.lossScaling.growth,
                desc.lossScaling.interval, desc.lossScaling.backoff);
  // Each batch is gathered on the host while the device runs the step
  // before it, into the staging buffer its predecessor's copy is not
  // reading.
  int slot = 0;
  if (opts.steps > 0)
    gatherBatch(desc, feeds, startStep * micro, numSamples, slot);
  for (int64_t i = 0; i < opts.steps; ++i) {
    Clock::time_point stepStart = Clock::now();
    ctx.step = startStep + i + 1;
    ctx.optimizerStep = optimizerSteps + 1;
    stepScale = scaler.scale();
    if (lossScaleTensor) {
      if (Status s = device::copyToDevice(ctx, arena + lossScaleTensor->offset,
                                          &stepScale, sizeof(float));
          !s.ok()) {
        printError("step " + std::to_string(ctx.step) + ": " + s.message());
        return kExitFailure;
      }
    }
    float status[2] = {0.0f, 0.0f};
    // With gradient accumulation one optimizer step consumes `micro`
    // consecutive batches; the loss reported is their mean, the loss of
    // the whole step.
    double stepLoss = 0.0;
    for (int64_t m = 0; m < micro; ++m) {
      ctx.microBatch = m;
      // Batches follow the global step so that a resumed run sees the same
      // samples as one that was never interrupted.
      int64_t stepIndex = (ctx.step - 1) * micro + m;
      ctx.batch = stepIndex + 1;
      if (Status s = uploadBatch(ctx, arena, feeds, slot); !s.ok()) {
        printError(s.message());
        return kExitFailure;
      }

      // The loss, the gradients' status and the device's error record come
      // back together: the host waits for the device once a step.
      Status s = device::runStep(ctx, desc.step, arena, micro);
      if (s.ok())
        s = device::copyToHostLater(ctx, &loss, arena + lossTensor.offset,
                                    sizeof(float));
      if (s.ok() && gradStatusTensor && m + 1 == micro)
        s = device::copyToHostLater(
            ctx, status, arena + gradStatusTensor->offset, sizeof(status));
      slot ^= 1;
      if (s.ok() && (i + 1 < opts.steps || m + 1 < micro))
        gatherBatch(desc, feeds, stepIndex + 1, numSamples, slot);
      if (s.ok())
        s = device::synchronize(ctx);
      if (s.ok() && ctx.profiling)
        s = device::profileCollect(ctx);
      if (!s.ok()) {
        printError("step " + std::to_string(ctx.step) + ": " + s.message());
        return kExitFailure;
      }
      if (hasError(ctx)) {
        ContextError err = takeError(ctx);
        std::string where;
        if (err.batchRow >= 0 && err.batchRow < desc.batchSize && labelFeed)
          where = " (sample " +
                  std::to_string(sampleIndex(stepIndex, desc.batchSize,
                                             err.batchRow, numSamples)) +
                  " of '" + labelFeed->path + "')";
        printError("step " + std::to_string(ctx.step) + ": " + err.message +
                   where);
        return kExitFailure;
      }
      stepLoss += loss;
    }
    if (micro > 1)
      loss = static_cast<float>(stepLoss / static_cast<double>(micro));
    if (ctx.profiling && i + 1 == profileWarmup(opts.steps))
      std::fill(ctx.profileMs.begin(), ctx.profileMs.end(), 0.0);
    const bool overflow = status[1] != 0.0f;
    if (overflow)
      ++skipped;
    else
      ++optimizerSteps;
    if (lossScaleTensor)
      scaler.update(overflow);
    double stepMs = secondsSince(stepStart) * 1000.0;
    Status ms = lossScaleTensor
                    ? metrics.write(ctx.step, loss, stepMs, stepScale, overflow)
                    : metrics.write(ctx.step, loss, stepMs);
    if (!ms.ok()) {
      printError(ms.message());
      return kExitFailure;
    }
    if (ctx.step % opts.logEvery == 0 || i + 1 == opts.steps) {
      std::printf("step %" PRId64 " loss %.7g (%.3f s)", ctx.step,
                  static_cast<double>(loss), secondsSince(loopStart));
      if (lossScaleTensor)
        std::printf(" loss scale %g, %" PRId64 " skipped",
                    static_cast<double>(scaler.scale()), skipped);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (lossScaleTensor && opts.steps > 0)
    std::printf("mtc trainer: %" PRId64 " of %" PRId64
                " steps skipped on inf/NaN gradients; loss scale now %g\n",
                skipped, opts.steps, static_cast<double>(scaler.scale()));
  if (opts.steps > 0) {
    double total = secondsSince(loopStart);
    std::printf("mtc trainer: %" PRId64 " steps in %.3f s (%.2f steps/s)\n",
                opts.steps, total,
                total > 0 ? static_cast<double>(opts.steps) / total : 0.0);
  }
  if (ctx.profiling && opts.steps > 0)
    printProfile(ctx, desc, opts.steps);
  if (Status s = metrics.close(); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }

  int64_t finalStep = startStep + opts.steps;
  if (!opts.savePath.empty()) {
    int count = 0;
    std::map<std::string, std::string> meta{
        {"format", "mtc"},
        {"step", std::to_string(finalStep)},
        {"optimizer_step", std::to_string(optimizerSteps)}};
    if (lossScaleTensor) {
      meta["loss_scale"] = formatFloatExact(scaler.scale());
      meta["loss_scale_clean_steps"] = std::to_string(scaler.cleanSteps());
    }
    if (Status s = writeTensors(ctx, desc, arena, host, opts.savePath,
                                /*grads=*/false, meta, count);
        !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    std::printf("mtc trainer: saved %d tensors to %s (step %" PRId64 ")\n",
                count, opts.savePath.c_str(), finalStep);
  }
  if (!opts.exportPath.empty()) {
    std::string image(reinterpret_cast<const char *>(desc.exportData),
                      desc.exportSize);
    for (int i = 0; i < desc.numExportWeights; ++i) {
      const ExportWeight &w = desc.exportWeights[i];
      const TensorDesc &t = desc.tensors[w.tensor];
      if (w.offset + t.bytes > image.size()) {
        printError("invalid export table (a compiler bug)");
        return kExitFailure;
      }
      Status s = Status::success();
      if (t.inArena) {
        s = device::copyToHost(ctx, &image[w.offset], arena + t.offset,
                               t.bytes);
      } else {
        std::memcpy(&image[w.offset], host.data(w.tensor), t.bytes);
      }
      if (!s.ok()) {
        printError(s.message());
        return kExitFailure;
      }
    }
    if (Status s = device::synchronize(ctx); !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    if (Status s = writeFileAtomically(opts.exportPath, image); !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    std::printf("mtc trainer: exported the inference model to %s\n",
                opts.exportPath.c_str());
  }
  if (!opts.dumpGradsPath.empty()) {
    int count = 0;
    std::map<std::string, std::string> meta{
        {"loss", formatFloatExact(loss)}, {"step", std::to_string(finalStep)}};
    float unscale = 1.0f;
    if (lossScaleTensor) {
      meta["loss_scale"] = formatFloatExact(stepScale);
      unscale = static_cast<float>(1.0 / static_cast<double>(stepScale));
    }
    if (Status s = writeTensors(ctx, desc, arena, host, opts.dumpGradsPath,
                                /*grads=*/true, meta, count, unscale);
        !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    std::printf("mtc trainer: wrote %d gradients to %s\n", count,
                opts.dumpGradsPath.c_str());
  }
  std::fflush(stdout);
  return 0;
}

} // namespace

/// `--forward-only` programs: PROGRAM --inputs DIR --outputs DIR.
int inferenceMain(int argc, char **argv, const ModelDesc &desc) {
  const char *prog = programName(argc, argv);
  std::string inputs, outputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s --inputs DIR --outputs DIR\n\nRuns model '%s' "
                  "forward once: reads <input>.npy for every model input\n"
                  "(whole arrays of the compiled shapes) and writes "
                  "<output>.npy for every\noutput.\n",
                  prog, desc.modelName);
      return 0;
    }
    if ((arg == "--inputs" || arg == "--outputs") && i + 1 < argc) {
      (arg == "--inputs" ? inputs : outputs) = argv[++i];
      continue;
    }
    printError("unknown or incomplete argument '" + arg + "'");
    std::fprintf(stderr, "run '%s --help' for usage\n", prog);
    return kExitUsage;
  }
  if (outputs.empty()) {
    printError("--outputs DIR is required");
    return kExitUsage;
  }
  int ignored = -1;
  if (Status s = validateModel(desc, ignored); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  Context ctx;
  DeviceSession session(ctx);
  if (Status s = device::initialize(ctx); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  session.initialized = true;
  if (Status s = allocateArena(ctx, desc, session); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  unsigned char *arena = session.arena;
  if (Status s = loadInitialValues(ctx, desc, arena); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if (t.role == Role::Input) {
      NpyArray array;
      std::string path = inputs + "/" + t.name + ".npy";
      if (Status s = array.open(path); !s.ok()) {
        printError("input '" + std::string(t.name) + "': " + s.message());
        return kExitFailure;
      }
      std::vector<int64_t> want(t.shape, t.shape + t.rank);
      if (array.dtype() != t.dtype || array.shape() != want) {
        printError("input '" + std::string(t.name) + "': '" + path +
                   "' has dtype '" + array.descr() + "' and shape " +
                   shapeString(array.shape()) + " but the model expects " +
                   dtypeDescription(t.dtype) + " with shape " +
                   shapeString(want));
        return kExitFailure;
      }
      if (Status s = device::copyToDevice(ctx, arena + t.offset, array.data(),
                                          t.bytes);
          !s.ok()) {
        printError(s.message());
        return kExitFailure;
      }
    }
  }
  ctx.step = ctx.batch = 1;
  Status ran = device::runStep(ctx, desc.step, arena, 1);
  if (Status s = ran.ok() ? device::synchronize(ctx) : ran; !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  if (hasError(ctx)) {
    printError(takeError(ctx).message);
    return kExitFailure;
  }
  for (int i = 0; i < desc.numTensors; ++i) {
    const TensorDesc &t = desc.tensors[i];
    if (t.role != Role::Output)
      continue;
    std::vector<unsigned char> host(t.bytes);
    if (Status s = device::copyToHost(ctx, host.data(), arena + t.offset,
                                      t.bytes);
        !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
    std::string path = outputs + "/" + t.name + ".npy";
    if (Status s = writeNpy(path, t.dtype,
                            std::vector<int64_t>(t.shape, t.shape + t.rank),
                            host.data(), t.bytes);
        !s.ok()) {
      printError(s.message());
      return kExitFailure;
    }
  }
  return 0;
}

int trainerMain(int argc, char **argv, const ModelDesc &desc) {
  if (desc.inference)
    return inferenceMain(argc, argv, desc);
  const char *prog = programName(argc, argv);
  int lossIndex = -1;
  Options opts;
  std::string error;
  switch (parseCommandLine(argc, argv, opts, error)) {
  case ParseOutcome::Help:
    printUsage(prog, desc);
    return 0;
  case ParseOutcome::Error:
    printError(error);
    std::fprintf(stderr, "run '%s --help' for usage\n", prog);
    return kExitUsage;
  case ParseOutcome::Run:
    break;
  }

  if (Status s = validateModel(desc, lossIndex); !s.ok()) {
    printError(s.message());
    return kExitFailure;
  }
  if (std::string(desc.target) != device::kind()) {
    printError("this trainer was generated for target '" +
               std::string(desc.target) + "' but linked with the " +
               device::kind() + " runtime");
    return kExitFailure;
  }
  if (opts.dataDir.empty()) {
    std::string names;
    for (int i = 0; i < desc.numTensors; ++i)
      if (desc.tensors[i].role == Role::Input)
        names += (names.empty() ? "" : ", ") +
                 std::string(desc.tensors[i].name) + ".npy";
    if (!names.empty()) {
      printError("--data DIR is required: the model reads " + names);
      std::fprintf(stderr, "run '%s --help' for usage\n", prog);
      return kExitUsage;
    }
  }
  return run(opts, desc, lossIndex);
}

} // namespace mtc::rt
