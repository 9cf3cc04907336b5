//===- Trainer.h - What a generated trainer tells the runtime ---*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// A generated trainer consists of a table of tensors (where each lives in the
// arena), the step function, and the initial parameter values. Its `main`
// hands these to trainerMain(), which owns everything else: the command line,
// the single arena allocation, data loading, checkpoints and metrics.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_TRAINER_H
#define MTC_RUNTIME_TRAINER_H

#include <cstddef>
#include <cstdint>

namespace mtc::rt {

struct Context;

/// Element types; Bool is one byte per element (0 or 1). BF16 and F16 are
/// only the 16-bit parameter copies (Role::ParamCopy).
enum class DType : int { F32 = 0, I64 = 1, Bool = 2, BF16 = 3, F16 = 4 };

/// What a tensor of the table is to the trainer.
enum class Role : int {
  Param = 0,  ///< trainable parameter; initial value in the init data
  Buffer = 1, ///< non-trainable initializer; initial value in the init data
  State = 2,  ///< optimizer state "<param>.<slot>", zero-initialized
  Input = 3,  ///< graph input fed from <name>.npy, one batch per step
  Grad = 4,   ///< gradient of param `owner`, valid after a step
  Loss = 5,   ///< the scalar loss, valid after a step
  /// compile-time constant; initial value in the init data under its name,
  /// never saved or loaded from a checkpoint
  Constant = 6,
  /// the evaluation loss of a batch (f32 scalar), valid after evalStep
  EvalLoss = 7,
  /// [correct predictions, positions counted] of the batch (2 x f32),
  /// valid after evalStep
  EvalCorrect = 8,
  /// gradient accumulator of param `owner` (--accumulate); zero at start,
  /// never checkpointed
  Accumulator = 9,
  /// a graph output of an inference program (ModelDesc::inference)
  Output = 10,
  /// the loss scale (f32 scalar) the backward pass is seeded with; the
  /// trainer writes it before each step (ModelDesc::lossScaling)
  LossScale = 11,
  /// [1 / loss scale, 1 if a gradient overflowed] (2 x f32), valid after a
  /// loss-scaled step; the updates skipped the step when [1] is set
  GradStatus = 12,
  /// the 16-bit copy (BF16 or F16) of param `owner` that the step's GEMMs
  /// read and its optimizer update rewrites, or of a frozen weight (a
  /// Buffer `owner`) that no update changes; the trainer forms it from its
  /// owner after loading the parameters, never checkpointed
  ParamCopy = 13,
};

struct TensorDesc {
  const char *name;
  Role role;
  DType dtype;
  int rank;
  int64_t shape[8];
  uint64_t offset; ///< byte offset in the arena
  uint64_t bytes;
  int owner; ///< Grad/State/ParamCopy: index in the table of the
             ///< parameter, else -1
  /// Buffer: the program depends on its initial value (an attention's
  /// causal mask), so --load refuses a checkpoint with other values.
  bool compiledIn = false;
  /// False for a parameter or buffer that neither the step nor the
  /// evaluation reads: a compiled-in buffer, or a frozen weight whose GEMMs
  /// read its 16-bit copy. It has no bytes in the arena (offset is
  /// meaningless); the trainer keeps its values on the host (the embedded
  /// ones, or a checkpoint's for a tensor not compiled in), saves and
  /// exports them from there and forms the copy from them.
  bool inArena = true;
};

/// Where the data of tensor `tensor` (an index in the table) goes in the
/// exported ONNX model.
struct ExportWeight {
  int tensor;
  uint64_t offset;
};

/// Dynamic loss scaling: the scale starts at `init`, is multiplied by
/// `backoff` after a step whose gradients overflowed (that step changes no
/// parameter and no optimizer state), and by `growth` after `interval`
/// consecutive clean steps, as PyTorch's GradScaler does.
struct LossScaling {
  bool enabled = false;
  double init = 65536.0;
  double growth = 2.0;
  double backoff = 0.5;
  int64_t interval = 2000;
};

/// One op of the training step as the trainer's --profile reports it.
struct ProfileOp {
  const char *name; ///< the op and, for generated kernels, the kernel name
  const char *node; ///< the ONNX node it comes from ("" if none)
  uint64_t bytes;   ///< bytes its operands and results take (read + written)
  uint64_t flops;
  bool elementwise; ///< a generated elementwise or fused kernel
  /// a generated fused kernel that ends in a layer norm of its rows (a
  /// residual add + layer norm): elementwise work and a row reduction
  bool rowKernel = false;
};

struct ModelDesc {
  const char *modelName;
  const char *target;    ///< "cpu" or "cuda"
  const char *optimizer; ///< human-readable summary of the update rule
  uint64_t arenaBytes;
  const TensorDesc *tensors;
  int numTensors;
  int64_t batchSize; ///< first dim shared by every Input tensor
  /// Initial values of Param and Buffer tensors, a safetensors image.
  const unsigned char *initData;
  uint64_t initSize;
  /// Runs one training step on the arena (a device pointer).
  void (*step)(Context &ctx, unsigned char *arena);
  /// Evaluates one batch (forward only, dropout off, BatchNorm on running
  /// statistics), writing the EvalLoss and EvalCorrect tensors; null when
  /// the trainer has no evaluation.
  void (*evalStep)(Context &ctx, unsigned char *arena) = nullptr;
  /// Micro-batches per optimizer step: `step` runs this many times per step
  /// (each on the next batch), and the optimizer updates on the last one.
  int64_t accumulateSteps = 1;
  /// Loss scaling of the step (with a LossScale and a GradStatus tensor).
  LossScaling lossScaling;
  /// An inference program (`mtc compile --forward-only`): `step` runs the
  /// model forward once on whole input arrays and the Output tensors are
  /// written as .npy files; no training.
  bool inference = false;
  /// The inference ONNX model `--export` writes: serialized by the compiler
  /// with zeroed weights, filled from the arena at the given offsets.
  const unsigned char *exportData = nullptr;
  uint64_t exportSize = 0;
  const ExportWeight *exportWeights = nullptr;
  int numExportWeights = 0;
  /// The step's ops in order, which `step` brackets with profileBegin /
  /// profileEnd.
  const ProfileOp *profileOps = nullptr;
  int numProfileOps = 0;
};

/// Parses the trainer command line and runs it; returns the process exit
/// code. Never throws and never aborts on bad input.
int trainerMain(int argc, char **argv, const ModelDesc &desc);

/// The current optimizer step, 1 on the first step.
int64_t stepCounter(const Context &ctx);

/// Batches run including the current one, 1 on the first: stepCounter(ctx)
/// without gradient accumulation, (step - 1) * K + microBatch(ctx) + 1 with
/// K micro-batches per optimizer step. It keys the dropout masks.
int64_t batchCounter(const Context &ctx);

/// The micro-batch of the current optimizer step, from 0 to
/// ModelDesc::accumulateSteps - 1 (always 0 without accumulation).
int64_t microBatch(const Context &ctx);

/// The --seed of the run (0 by default), for random operators such as
/// dropout that derive their masks from (seed, step, op) so that runs and
/// recomputation are reproducible.
uint64_t trainingSeed(const Context &ctx);

/// Bracket op `op` (an index in ModelDesc::profileOps) of the step; they
/// do nothing unless the trainer runs with --profile, which times every op
/// (CUDA: with events, the step's kernels launched one by one).
void profileBegin(Context &ctx, int op);
void profileEnd(Context &ctx, int op);

/// Records a data error found by generated host code (e.g. a gather index
/// out of range). The first message wins; the trainer stops with it after
/// the step. Safe to call from several threads.
void reportDataError(Context &ctx, const char *message);

} // namespace mtc::rt

#endif // MTC_RUNTIME_TRAINER_H
