//===- MtcOps.h - mtc dialect ops ---------------------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DIALECT_MTC_IR_MTCOPS_H
#define MTC_DIALECT_MTC_IR_MTCOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mtc/Dialect/Mtc/IR/MtcDialect.h"

namespace mtc {

/// Bytes of a statically shaped tensor type (0 for anything else).
int64_t getTensorBytes(mlir::Type type);

/// Elements of a statically shaped tensor type.
int64_t getNumElements(mlir::Type type);

/// Erases the side-effect free ops of `block` whose results are unused,
/// last to first so that chains of dead ops go too.
void eraseDeadPureOps(mlir::Block &block);

/// Whether `arg`, an argument of the training step, needs no bytes of the
/// arena: neither the step nor the evaluation function (its argument of the
/// same name) reads it, and it is a parameter or a buffer, whose values
/// the trainer then keeps on the host: a buffer whose values the step has
/// built in (mtc.compiled_in, an attention's causal mask), or a frozen
/// weight whose GEMMs read its 16-bit copy.
bool staysOffArena(mlir::BlockArgument arg);

/// Whether `arg`, an argument of a planned function, is a batch of a model
/// input (role "input"): the trainer writes it into the arena before every
/// run of the function, so its bytes are needed only from the start of the
/// run to its last reader, and later values of the run may take them
/// (ResNet-50 in bf16: the float32 images, read once by their conversion).
bool isBatchInput(mlir::BlockArgument arg);

/// NumPy broadcast of two shapes; failure when they are incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// The value whose bytes `op`'s result is, or null: a reshape is a view of
/// its input (same bytes, no copy) when that input is a temporary of the
/// step (an op's result, not a constant), and so is a slice or transpose
/// marked attr::kStridedView. The memory plan gives both one buffer, live
/// until the last reader of either.
mlir::Value viewSource(mlir::Operation *op);

/// `size` elements `stride` elements apart.
struct StridedDim {
  int64_t size, stride;
};

/// Where a value's elements are: in `base`'s buffer from element `offset`
/// on, dim d of the value being the row-major nest of `dims[d]`: one
/// strided dim, or several where a reshape merged dims that are not
/// adjacent in memory (attention heads transposed next to the sequence and
/// merged with the head dim).
struct StridedLayout {
  mlir::Value base;
  int64_t offset = 0;
  llvm::SmallVector<llvm::SmallVector<StridedDim, 1>> dims;
};

/// The most dims a strided copy takes (mtc::rt::kMaxRank).
constexpr int kMaxCopyRank = 8;

/// The output columns the convolution GEMMs of `op`'s module take at most:
/// its attr::kConvGemmColumns, else the default of the device its
/// attr::kTarget names (the CPU's when absent).
int64_t convGemmColumns(mlir::Operation *op);

/// Row-major strides of `shape`.
llvm::SmallVector<int64_t> contiguousStrides(llvm::ArrayRef<int64_t> shape);

/// The layout of `v` through the views that define it: strided-view slices
/// and transposes, and reshapes of those. A value written into a concat's
/// result (see concatPart) is that part of the result, reshaped to `v`'s
/// shape. A value computed by any other op is its own base, row-major.
/// Failure when a view has no such layout (see layoutThrough).
mlir::FailureOr<StridedLayout> stridedLayout(mlir::Value v);

/// Where `v` is written when it is an input of a concat marked
/// attr::kWrittenInPlace, directly or through reshapes that only it reads:
/// that concat's result, `offset` elements in (the start of `input`, the
/// concat's operand, along the concat axis). Null concat otherwise.
struct ConcatPart {
  mlir::Operation *concat = nullptr;
  mlir::Value input;
  int64_t offset = 0;
};
ConcatPart concatPart(mlir::Value v);

/// The layout of the result of `op` (a reshape, slice or transpose, view or
/// not) read from its input's elements: what a copy of it reads. Failure
/// when a reshape splits or a slice cuts a dim between elements that are
/// not evenly strided.
mlir::FailureOr<StridedLayout> layoutThrough(mlir::Operation *op);

/// The dims of a copy reading `src` and writing dim d of the value at
/// `dstStrides[d]`: the value's dims split as src's are, dims of one
/// element dropped and dims contiguous on both sides merged.
struct StridedCopyDims {
  llvm::SmallVector<int64_t> shape, srcStrides, dstStrides;
};
StridedCopyDims copyDims(const StridedLayout &src,
                         llvm::ArrayRef<int64_t> dstStrides);

/// Whether `use`'s op reads the operand through strides, so that it can
/// read a strided view: the input of a transpose, slice or pad, an input of
/// a concat, the gradient of a slice_grad (copies), or a tensor whose rows
/// attention reads (query, key, value; the backward's output gradient and
/// output), where the view's layout has attention rows (attentionRows).
bool copiesThroughStrides(mlir::OpOperand &use);

/// Numbers the ops of `body` (with its terminator when `withTerminator`)
/// by the kernel they run in, for lifetimes: an op that runs in the kernel
/// of the op before it (attr::kRowEpilogue) shares that op's number, so the
/// values the kernel reads live until it ends and its results never take
/// their bytes. Returns how many numbers there are.
int64_t numberKernels(mlir::Block &body,
                      llvm::DenseMap<mlir::Operation *, int64_t> &index,
                      bool withTerminator = true);

/// The operand whose bytes result `r` may take over when that operand's
/// last reader is `r`'s op (the kernel reads each element before writing
/// it there), or null: softmax_cross_entropy's log-probabilities overwrite
/// its logits, its gradient overwrites the log-probabilities, a layer
/// norm backward's input gradient the gradient it accumulates onto (and a
/// gather backward's result the one it accumulates onto), and a
/// conversion from float32 to 16 bits its input (in half the bytes; the
/// code generator converts in phases, each writing only bytes an earlier
/// phase has read).
mlir::Value inPlaceSource(mlir::OpResult r);

/// Whether `op` is an elementwise op with one floating-point result whose
/// operands broadcast to it: what the code generator composes into one
/// fused loop (a conversion included, so a fused kernel reads 16-bit
/// values as stored).
bool isFusableElementwise(mlir::Operation *op);

/// Whether result types `actual` are the inferred ones, except that the
/// first may store float32 in 16 bits (bf16 / f16): for ops into which the
/// fusion pass folds the 16-bit conversion of their result.
bool sameOr16BitFirst(mlir::TypeRange inferred, mlir::TypeRange actual);

/// The largest head dims (D and Dv) mtc.attention admits: what the kernels
/// take (mtc::rt::kMaxAttentionHeadDim, asserted equal in Costs.cpp).
constexpr int64_t kMaxAttentionHeadDim = 256;

/// An attention operand ([..., S, W], or with `seqMajor` [..., S, H, W]) as
/// the kernels see it: `batch` independent heads (the leading dims, the
/// heads H last), each `seq` rows of `width` elements.
struct AttentionShape {
  llvm::SmallVector<int64_t> batch;
  int64_t seq = 0, width = 0;
};
/// The AttentionShape of a tensor type of rank >= 2 (>= 3 with seqMajor).
AttentionShape attentionShape(llvm::ArrayRef<int64_t> shape, bool seqMajor);

/// Where the attention kernels find the rows of an operand or result: row
/// i of head h (the flattened batch index, h = outer * heads + head) starts
/// at element offset + outer * batchStride + head * headStride +
/// i * rowStride, its elements contiguous. `heads` is the innermost batch
/// dim (the heads; 1 without batch dims).
struct AttentionRows {
  int64_t offset = 0, heads = 1, batchStride = 0, headStride = 0,
          rowStride = 0;
};
/// The rows of a [..., S, W] (seqMajor: [..., S, H, W]) tensor of `shape`
/// laid out as `layout` says; failure when the layout has no such form (a
/// dim merged from non-adjacent ones, elements of a row not contiguous,
/// outer batch dims that do not collapse into one stride).
mlir::FailureOr<AttentionRows> attentionRows(const StridedLayout &layout,
                                             llvm::ArrayRef<int64_t> shape,
                                             bool seqMajor);

} // namespace mtc

#include "mtc/Dialect/Mtc/IR/MtcInterfaces.h.inc"

#define GET_OP_CLASSES
#include "mtc/Dialect/Mtc/IR/MtcOps.h.inc"

namespace mtc {

/// How the code generator multiplies a mtc.matmul: one GEMM with the batch
/// folded into the rows (a 2-D `b`, `a` not transposed), one
/// strided-batched GEMM (no batch, or a full or fully broadcast one), or a
/// loop of GEMMs over the output's batch.
enum class MatMulForm { FoldedRows, StridedBatched, Loop };
MatMulForm matMulForm(MatMulOp op);

/// Elements from one row (one step of the second-to-last dim) of `v` to
/// the next as stored: its last dim, or more where the memory plan padded
/// its rows (attr::kRowPitch, see rowPitchUse).
int64_t rowPitch(mlir::Value v);

/// Bytes `v` takes as stored: getTensorBytes with its rows padded to
/// rowPitch.
int64_t storageBytes(mlir::Value v);

/// Whether the kernel of `use`'s op reads that operand, or (for a result)
/// writes `result`, with rows any number of elements apart: GEMM operands
/// and results as their leading dimension (matmuls the code generator
/// does not loop over, 16-bit ones only when their GEMM reads 16 bits as
/// stored), the logits of the cross-entropy kernels and the gradient they
/// write, the logits of count_correct (rank 2), and reshapes that keep the
/// last dim (views). The memory plan pads the rows of a tensor to 16 bytes
/// only when everything that reads or writes it (and its views) is so.
bool rowPitchUse(mlir::OpOperand &use);
bool rowPitchResult(mlir::OpResult result);

} // namespace mtc

#endif // MTC_DIALECT_MTC_IR_MTCOPS_H
