//===- Context.h - Per-run state shared by the kernels ----------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The definition behind the opaque mtc::rt::Context of the public headers.
// Generated code only ever holds a reference to it; the trainer owns it. The
// CPU and CUDA libraries each define it once (they are never linked
// together), the CUDA one adding the stream and the cuBLAS handle.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_CONTEXT_H
#define MTC_RUNTIME_LIB_CONTEXT_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#ifdef MTC_RUNTIME_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace mtc::rt {

struct Context {
  /// Training step, 1 on the first step (0 before training starts).
  int64_t step = 0;
  /// Optimizer steps taken including this one: the step's count for AdamW's
  /// bias corrections and SGD's first momentum step. Equal to `step` except
  /// under loss scaling, whose skipped steps are not optimizer steps.
  int64_t optimizerStep = 0;
  /// Micro-batch within the optimizer step (gradient accumulation).
  int64_t microBatch = 0;
  /// Batches run, this one included: 1 on the first; `step` without
  /// gradient accumulation, (step - 1) * K + m + 1 for micro-batch m of K.
  /// Dropout masks are keyed by it, so each micro-batch draws its own.
  int64_t batch = 0;
  uint64_t seed = 0;
  /// CUDA: run the training step as a captured CUDA graph (the trainer's
  /// --no-cuda-graphs clears it). Ignored on the CPU.
  bool cudaGraphs = true;
  /// CUDA: the GEMMs before a tanh GELU (gemmGelu) run with cuBLASLt's
  /// GELU epilogue instead of a GEMM into float32 sums and a GELU kernel of
  /// ours (the trainer's --cublaslt-gelu, for comparison: bench/gpu_bench.py
  /// times both). Ignored on the CPU.
  bool ltGelu = false;
  /// --profile: each op's time over the profiled steps (ms), and the
  /// device's per-op timers (CPU: start times; CUDA: event pairs).
  bool profiling = false;
  std::vector<double> profileMs;
  std::vector<double> profileStart;
#ifdef MTC_RUNTIME_CUDA
  std::vector<cudaEvent_t> profileEvents;
#endif

  /// Data errors found during a step. Kernels keep going (treating the bad
  /// element as ignored) so that a step never crashes; the trainer checks
  /// the flag after the step and stops with the first message.
  std::atomic<bool> failed{false};
  std::mutex errorMutex;
  std::string firstError;
  /// Row of the batch (first axis of the inputs) the error is about, or -1;
  /// lets the trainer name the offending sample of the data file.
  int64_t firstErrorBatchRow = -1;

#ifdef MTC_RUNTIME_CUDA
  cudaStream_t stream = nullptr;
  /// The device's streaming multiprocessors (kernels that size their grid
  /// to what the GPU holds at once).
  int smCount = 1;
  cublasHandle_t blas = nullptr;
  /// cuBLAS's workspace, ours (cublasSetWorkspace): a GEMM captured into a
  /// CUDA graph then allocates nothing, and the device memory the trainer
  /// reports beside its arena counts it.
  void *blasWorkspace = nullptr;
  size_t blasWorkspaceBytes = 0;
  /// cuBLASLt, for the GEMMs with epilogues (bias, bias gradient), and its
  /// fixed workspace (allocated with the handle, like cuBLAS's own). Kernels
  /// between GEMMs may use the workspace as scratch too (stream order keeps
  /// them apart): the layer norm backward's partial column sums.
  cublasLtHandle_t lt = nullptr;
  void *ltWorkspace = nullptr;
  size_t ltWorkspaceBytes = 0;
  /// Whether the last epilogue GEMM ran as one (lastGemmUsedEpilogue).
  bool lastGemmEpilogue = false;
  /// cuBLASLt's answer per GEMM (data type, transposes, sizes, leading
  /// dimensions, epilogue, the pointers' alignments, the workspace it may
  /// use): whether it has an algorithm, and which.
  struct LtAlgo {
    int64_t key[18];
    bool found;
    cublasLtMatmulAlgo_t algo;
  };
  std::vector<LtAlgo> ltAlgos;
  /// The step counters kernels read (cuda::stepCounters), in device memory
  /// so that a replayed CUDA graph sees each step's values, and the values
  /// last uploaded there.
  void *deviceCounters = nullptr;
  int64_t uploadedBatch = -1, uploadedOptimizerStep = -1;
  /// The device error record's address, found once at start-up.
  void *errorRecord = nullptr;
  /// The training step captured as a CUDA graph, one per micro-batch
  /// position (the step's host-side branches depend on whether the
  /// micro-batch is the first and the last of its optimizer step).
  struct StepGraph {
    bool warm = false;   ///< ran once eagerly (modules loaded, cuBLAS ready)
    bool failed = false; ///< capture failed: launch eagerly
    cudaGraphExec_t exec = nullptr;
  };
  StepGraph graphs[4];
#endif
};

/// Records `message` unless an earlier error was recorded.
void reportError(Context &ctx, const std::string &message,
                 int64_t batchRow = -1);

/// Whether an error was recorded; cheap enough to call per element.
inline bool hasError(const Context &ctx) {
  return ctx.failed.load(std::memory_order_relaxed);
}

struct ContextError {
  std::string message;
  int64_t batchRow = -1;
};

/// The first recorded error; clears it.
ContextError takeError(Context &ctx);

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_CONTEXT_H
