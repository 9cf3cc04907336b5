//===- MtcAttrNames.h - Attribute names shared by the passes ----*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The training step is a func.func whose arguments and results carry these
// discardable attributes; they are the contract between import, autodiff,
// the optimizer, memory planning and code generation.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DIALECT_MTC_IR_MTCATTRNAMES_H
#define MTC_DIALECT_MTC_IR_MTCATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace mtc::attr {

/// Argument/result: the ONNX name (initializer, input, output) or a derived
/// one ("<param>.grad", "<param>.momentum").
constexpr llvm::StringLiteral kName = "mtc.name";
/// Argument: "param", "buffer", "state" or "input". Result: "loss", "grad"
/// or "update".
constexpr llvm::StringLiteral kRole = "mtc.role";
/// Argument: initial value of a param or buffer (dense or dense_resource).
constexpr llvm::StringLiteral kInit = "mtc.init";
/// Result "grad" / argument "state": index of the parameter argument.
constexpr llvm::StringLiteral kOwner = "mtc.owner";
/// Result "update": index of the argument it overwrites in place.
constexpr llvm::StringLiteral kTied = "mtc.tied";
/// Argument (a buffer): the compiler read its initial value and compiled
/// code that depends on it (an attention's causal mask), so the trainer
/// refuses a checkpoint that gives it other values.
constexpr llvm::StringLiteral kCompiledIn = "mtc.compiled_in";
/// Argument (a compiled-in buffer): no op of the step or of the evaluation
/// function reads it, so the memory plan gives it no bytes of the arena; the
/// trainer keeps its values in the program's initial-value data.
constexpr llvm::StringLiteral kNotInArena = "mtc.not_in_arena";
/// Op: created by autodiff (part of the backward pass).
constexpr llvm::StringLiteral kBackward = "mtc.backward";
/// Op: runs only on the last micro-batch of an optimizer step.
constexpr llvm::StringLiteral kLastMicroBatch = "mtc.last_micro_batch";
/// Function: micro-batches per optimizer step (gradient accumulation).
constexpr llvm::StringLiteral kAccumulate = "mtc.accumulate";
/// Op: a clone that recomputes a forward value for the backward pass.
constexpr llvm::StringLiteral kRecompute = "mtc.recompute";
/// Function: the peak the recomputation reached, and the FLOPs it adds.
constexpr llvm::StringLiteral kRematPeak = "mtc.remat_peak";
constexpr llvm::StringLiteral kRecomputeFlops = "mtc.recompute_flops";
/// Op: a GEMM or convolution with 16-bit operands that the target
/// multiplies directly (cuBLAS on the tensor cores), so it needs no scratch
/// to widen them (a convolution's im2col stays 16-bit).
constexpr llvm::StringLiteral kNative16BitGemm = "mtc.native_16bit_gemm";
/// Op: the first of this many consecutive optimizer updates of one kind
/// with the same hyperparameters that run as one multi-tensor update (the
/// fusion pass).
constexpr llvm::StringLiteral kUpdateGroup = "mtc.update_group";
/// Op: a layer norm that runs in the kernel of the mtc.fused op right
/// before it, which computes its input (the fusion pass's row epilogue):
/// each row is normalized as soon as the fused op has computed it.
constexpr llvm::StringLiteral kRowEpilogue = "mtc.row_epilogue";
/// Op: a slice or transpose that computes nothing: its result is its
/// input's bytes read through other strides, by readers that copy through
/// strides anyway (transpose, slice, concat, pad, slice_grad; the fusion
/// pass marks it, see mtc::stridedLayout).
constexpr llvm::StringLiteral kStridedView = "mtc.strided_view";
/// Op: a concat whose inputs are written straight into its result's
/// buffer by the ops computing them (attention gradients written through
/// row strides; the fusion pass marks it, see mtc::concatPart): it copies
/// nothing, and the memory plan places each input inside its result.
constexpr llvm::StringLiteral kWrittenInPlace = "mtc.written_in_place";
/// Module: the device the step is compiled for, "cpu" or "cuda" (absent:
/// cpu); the costs that differ per device read it (a convolution's
/// scratch, see rt::Conv2dParams::gemmColumns).
constexpr llvm::StringLiteral kTarget = "mtc.target";
/// Module: the output columns a convolution's GEMMs take at most
/// (rt::Conv2dParams::gemmColumns), overriding the target's default; 0
/// takes one image per GEMM, the least scratch (the driver sets it when a
/// budget is tight).
constexpr llvm::StringLiteral kConvGemmColumns = "mtc.conv_gemm_columns";
/// Op: created by the optimizer pass.
constexpr llvm::StringLiteral kOptimizer = "mtc.optimizer";
/// Memory plan: argument byte offset; op result byte offsets; op scratch
/// [offset, bytes]; function arena size and max-live lower bound.
constexpr llvm::StringLiteral kOffset = "mtc.offset";
constexpr llvm::StringLiteral kOffsets = "mtc.offsets";
constexpr llvm::StringLiteral kWorkspace = "mtc.workspace";
constexpr llvm::StringLiteral kArenaSize = "mtc.arena_size";
constexpr llvm::StringLiteral kLowerBound = "mtc.lower_bound";
/// Memory plan, op: per result, the elements from one row of the result
/// to the next where its rows are padded (0: dense); see mtc::rowPitch.
constexpr llvm::StringLiteral kRowPitch = "mtc.row_pitch";
/// Name of the evaluation function the driver adds beside @forward.
constexpr llvm::StringLiteral kEvalFunction = "eval_step";
/// Function: summary of the optimizer, for the trainer's banner.
constexpr llvm::StringLiteral kOptimizerSummary = "mtc.optimizer_summary";
/// Function: the dynamic loss scaling policy of the trainer, a dictionary
/// {init, growth, backoff : f64, interval : i64}.
constexpr llvm::StringLiteral kLossScaling = "mtc.loss_scaling";

namespace role {
constexpr llvm::StringLiteral kParam = "param";
constexpr llvm::StringLiteral kBuffer = "buffer";
constexpr llvm::StringLiteral kState = "state";
/// Argument: gradient accumulator of a parameter (not checkpointed).
constexpr llvm::StringLiteral kAccumulator = "accumulator";
/// Argument: the 16-bit copy of a parameter (owner) that the step's GEMMs
/// read and its update rewrites (not checkpointed: the trainer forms it from
/// the parameter).
constexpr llvm::StringLiteral kParamCopy = "param_copy";
constexpr llvm::StringLiteral kInput = "input";
constexpr llvm::StringLiteral kLoss = "loss";
constexpr llvm::StringLiteral kGrad = "grad";
constexpr llvm::StringLiteral kUpdate = "update";
/// Argument: the loss scale the backward pass is seeded with (a float32
/// scalar the trainer writes before each step).
constexpr llvm::StringLiteral kLossScale = "loss_scale";
/// Result: the mtc.grad_check status of the step, [1 / scale, overflow].
constexpr llvm::StringLiteral kGradStatus = "grad_status";
/// Results of the evaluation function: the loss and the number of correct
/// predictions of the batch.
constexpr llvm::StringLiteral kEvalLoss = "eval_loss";
constexpr llvm::StringLiteral kEvalCorrect = "eval_correct";
} // namespace role

} // namespace mtc::attr

#endif // MTC_DIALECT_MTC_IR_MTCATTRNAMES_H
