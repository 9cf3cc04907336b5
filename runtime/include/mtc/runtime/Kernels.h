//===- Kernels.h - Kernel library called by generated trainers --*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The kernel library that generated trainers call. The same declarations are
// implemented twice: runtime/lib/cpu (OpenBLAS, plain loops) and
// runtime/lib/cuda (cuBLAS, CUDA kernels). Every pointer is a device pointer
// into the one arena; no function here allocates memory. Tensors are dense,
// row-major (C order), float32 unless the name says otherwise.
//
// Elementwise operations are not here: the code generator emits them as
// named loops (CPU) or kernels (CUDA) so that later fusion can merge them.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_KERNELS_H
#define MTC_RUNTIME_KERNELS_H

#include <cstddef>
#include <cstdint>

namespace mtc::rt {

struct Context;

/// Maximum tensor rank the strided kernels accept.
constexpr int kMaxRank = 8;

/// How a 16-bit float tensor is stored.
enum class Storage16 : int { Bf16 = 0, F16 = 1 };

/// A tensor a kernel reads as it is stored: float32, or 16 bits in the
/// format its call names (Storage16). Either pointer (or nullptr, for an
/// optional one) converts to it.
struct StoredIn {
  const void *data = nullptr;
  bool low = false;
  StoredIn(std::nullptr_t) {}
  StoredIn(const float *p) : data(p) {}
  StoredIn(const uint16_t *p) : data(p), low(true) {}
};
/// A tensor a kernel writes as it is stored: float32, or 16 bits rounded
/// as a conversion rounds them.
struct StoredOut {
  void *data = nullptr;
  bool low = false;
  StoredOut(std::nullptr_t) {}
  StoredOut(float *p) : data(p) {}
  StoredOut(uint16_t *p) : data(p), low(true) {}
};

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

/// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major. op(A) is [M,K]:
/// A is stored [M,K] (lda >= K) or, when transA, [K,M] (lda >= M). Same for B
/// with [K,N] / [N,K]. beta == 0 ignores the previous contents of C.
void gemm(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc);

/// `batch` independent GEMMs; matrix i of X starts at x + i * strideX. A
/// stride of 0 broadcasts one matrix to every batch entry.
void gemmStridedBatched(Context &ctx, bool transA, bool transB, int64_t m,
                        int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, int64_t strideA, const float *b,
                        int64_t ldb, int64_t strideB, float beta, float *c,
                        int64_t ldc, int64_t strideC, int64_t batch);

/// gemm() with alpha = 1 and bias[n] added to every row of C: a linear
/// layer. On CUDA, cuBLASLt adds the bias as it writes C (its bias
/// epilogue); C is not read.
void gemmBias(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
              int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, const float *bias, float *c, int64_t ldc);

/// gemm() with alpha = 1, beta = 0, which also sums over k the operand
/// stored [K, ...]: B (not transposed) into biasGrad[n], or with sumA, A
/// (transposed) into biasGrad[m]. A linear layer's weight gradient and bias
/// gradient from one read of its output gradient (cuBLASLt's bias-gradient
/// epilogue on CUDA).
void gemmBiasGrad(Context &ctx, bool transA, bool transB, int64_t m,
                  int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc,
                  bool sumA, float *biasGrad);

/// The elementwise halves of the GELU epilogues (mtc.matmul_gelu,
/// mtc.matmul_gelu_grad), GELU in its tanh form as cuBLASLt's GELU
/// epilogues compute it: y = GELU(acc) and, when `pre` is given, acc
/// itself, each as stored; dx = acc * GELU'(pre). `count` elements, in
/// float32. The output may be the input (in place). On CUDA, gemmGelu and
/// gemmGeluGrad (Cuda.h) run them as the GEMM writes its result.
void geluEpilogue(Context &ctx, Storage16 storage, int64_t count, StoredIn acc,
                  StoredOut y, StoredOut pre);
void geluGradEpilogue(Context &ctx, Storage16 storage, int64_t count,
                      StoredIn acc, StoredIn pre, StoredOut dx);

//===----------------------------------------------------------------------===//
// Convolution (2-D, NCHW, OIHW weights, groups)
//===----------------------------------------------------------------------===//

struct Conv2dParams {
  int64_t n, c, h, w;        // input
  int64_t k, kh, kw;         // output channels, kernel size
  int64_t oh, ow;            // output spatial size
  int64_t strideH, strideW;
  int64_t padTop, padLeft;   // bottom/right padding is implied by oh/ow
  int64_t dilationH, dilationW;
  int64_t groups;
  /// The output columns one GEMM takes at most: images whose output maps
  /// are smaller go several to a GEMM (convImagesPerGemm). The compiler
  /// sets it per device (kConvGemmColumnsCpu / kConvGemmColumnsCuda); 0
  /// takes one image per GEMM.
  int64_t gemmColumns;
};

/// Which of the three convolution kernels a workspace is for.
enum class ConvKernel : int { Forward, BackwardData, BackwardFilter };

/// The columns a convolution's GEMMs aim at, per device: images whose
/// feature maps are smaller are taken together, so that a GEMM reads the
/// weight once for several images instead of once per image (on a 1x1
/// map, once per output column: a matrix-vector product per image). The
/// CPU's BLAS is efficient from about a thousand columns on; a GPU wants
/// far more per launch.
constexpr int64_t kConvGemmColumnsCpu = 1024;
constexpr int64_t kConvGemmColumnsCuda = 32768;

/// Whether a convolution reads one input channel per group (depthwise, as
/// in MobileNets): it then runs directly, output by output, without im2col
/// or GEMM (whose products would have one row per channel) and without
/// workspace.
inline bool convIsDepthwise(const Conv2dParams &p) {
  return p.groups > 0 && p.c == p.groups;
}

/// Whether a convolution's im2col matrix is its input itself: 1x1 taps,
/// stride 1, no padding (pointwise, as most of ResNet-50's and
/// MobileNetV2's convolutions are).
inline bool convIsPointwise(const Conv2dParams &p) {
  return p.kh == 1 && p.kw == 1 && p.strideH == 1 && p.strideW == 1 &&
         p.padTop == 0 && p.padLeft == 0 && p.oh == p.h && p.ow == p.w;
}

/// Whether CUDA's native 16-bit forward and backward data run one
/// strided-batched GEMM over the images (a matrix an image, read and
/// written in place) rather than one GEMM over the images side by side
/// through a staging matrix: when an image's rows of output pixels keep
/// the 16-byte alignment the tensor cores' fastest GEMMs need (oh * ow a
/// multiple of 8). ResNet-50's 14x14 and 7x7 maps (196 and 49 pixels)
/// keep the side-by-side GEMM, whose rows of several images' pixels are
/// aligned at the usual batches.
inline bool convNativeBatched(const Conv2dParams &p) {
  return p.oh * p.ow % 8 == 0;
}

/// The forward convolution that computes a stride-1, undilated
/// convolution's backward data: the output gradient convolved with the
/// weight flipped in both spatial dims, its channel roles swapped (per
/// group: [c, k / groups, kh, kw]), padded by kh - 1 - padTop (likewise
/// left), onto the input's map.
inline Conv2dParams convTransposedAsForward(const Conv2dParams &p) {
  Conv2dParams f = p;
  f.c = p.k, f.k = p.c;
  f.h = p.oh, f.w = p.ow, f.oh = p.h, f.ow = p.w;
  f.padTop = p.kh - 1 - p.padTop, f.padLeft = p.kw - 1 - p.padLeft;
  return f;
}

/// Whether CUDA's native 16-bit backward data runs as that forward
/// (convTransposedAsForward): a 16-bit im2col matrix of the output
/// gradient and GEMMs into dx (one strided-batched GEMM over the images
/// writing dx in place where the input map has a multiple of 8 pixels,
/// that forward's convNativeBatched; else several images side by side
/// through a float32 staging matrix of dx), instead of a GEMM into a
/// float32 matrix of the taps' products that col2im sums (twice the bytes
/// where c = k, written and read, and kh * kw times dx's size in the
/// workspace). For stride 1 without dilation and padding under the taps;
/// not for a pointwise convolution (its GEMM writes dx in place already)
/// nor a depthwise one (which runs directly).
inline bool convBackwardDataAsForward(const Conv2dParams &p) {
  return p.strideH == 1 && p.strideW == 1 && p.dilationH == 1 &&
         p.dilationW == 1 && p.padTop < p.kh && p.padLeft < p.kw &&
         !convIsPointwise(p) && !(p.groups > 0 && p.c == p.groups);
}

/// Images per GEMM: as many as fit p.gemmColumns output pixels, at least
/// one, at most n.
inline int64_t convImagesPerGemm(const Conv2dParams &p) {
  int64_t pixels = p.oh * p.ow;
  if (pixels <= 0 || p.n <= 1)
    return 1;
  int64_t images = p.gemmColumns / pixels;
  return images < 1 ? 1 : images > p.n ? p.n : images;
}

/// Bytes of scratch a convolution kernel needs (float32 throughout). With
/// one image per GEMM: the im2col matrix of one image, [cg * kh * kw,
/// oh * ow]; with 16-bit operands (the *16 entry points) the im2col widens
/// the input as it reads it, and float32 copies of the other operands
/// follow the matrix: the whole weight (forward, backward data), then one
/// image's output gradient (backward data, backward filter). With several
/// images per GEMM (convImagesPerGemm): the im2col matrix of that many
/// images side by side, then one group's output (forward) or output
/// gradient (backward) of those images, [k / groups, images * oh * ow],
/// then the widened weight as before. With `native16` (16-bit operands
/// multiplied as they are stored: the CUDA conv2d*Native16 entry points,
/// Cuda.h) nothing is widened: the forward and backward filter keep the
/// im2col matrix in 16 bits, the backward data keeps its float32 product
/// for col2im, and the staging matrix holds float32 outputs (forward) or
/// 16-bit output gradients (backward), from the next multiple of 256
/// bytes. A forward or backward data that runs one strided-batched GEMM
/// over the images (convNativeBatched) needs no staging matrix, and a
/// pointwise one (convIsPointwise) no im2col matrix either; such a forward
/// pads its im2col matrix's rows to a multiple of 8 (the GEMM's K: 16-byte
/// rows of the weight, which cuBLAS's fast kernels need), and where that
/// pads, the weight's padded copy follows from the next multiple of 256
/// bytes. A backward
/// data run as a forward (convBackwardDataAsForward) keeps the flipped
/// 16-bit weight, then that forward's matrices. The compiler plans exactly
/// this many bytes as the op's temporary; none for a depthwise
/// convolution.
inline uint64_t conv2dWorkspaceBytes(const Conv2dParams &p,
                                     ConvKernel kernel = ConvKernel::Forward,
                                     bool storage16 = false,
                                     bool native16 = false) {
  if (convIsDepthwise(p))
    return 0;
  if (storage16 && native16) {
    if (kernel == ConvKernel::BackwardData && convBackwardDataAsForward(p)) {
      // The flipped weight, then that forward's 16-bit im2col matrix.
      const int64_t flipped = p.k * (p.c / p.groups) * p.kh * p.kw * 2;
      return static_cast<uint64_t>((flipped + 255) / 256 * 256) +
             conv2dWorkspaceBytes(convTransposedAsForward(p),
                                  ConvKernel::Forward, true, true);
    }
    const int64_t patch = p.c / p.groups * p.kh * p.kw,
                  columns = p.oh * p.ow * convImagesPerGemm(p);
    const int64_t col =
        patch * columns * (kernel == ConvKernel::BackwardData ? 4 : 2);
    if (kernel == ConvKernel::Forward && convNativeBatched(p) &&
        !convIsPointwise(p)) {
      // The im2col matrix's rows (the GEMM's K) padded to a multiple of 8,
      // and then the weight's rows too (ResNet's stem: 147 to 152).
      const int64_t rows = (patch + 7) / 8 * 8, padded = rows * columns * 2;
      return static_cast<uint64_t>(
          rows == patch ? padded : (padded + 255) / 256 * 256 + p.k * rows * 2);
    }
    if (kernel != ConvKernel::BackwardFilter && convNativeBatched(p))
      return convIsPointwise(p) ? 0 : static_cast<uint64_t>(col);
    const int64_t stage =
        convImagesPerGemm(p) > 1
            ? p.k / p.groups * columns * (kernel == ConvKernel::Forward ? 4 : 2)
            : 0;
    return static_cast<uint64_t>((col + 255) / 256 * 256 + stage);
  }
  int64_t patch = p.c / p.groups * p.kh * p.kw, pixels = p.oh * p.ow;
  int64_t images = convImagesPerGemm(p);
  int64_t floats = patch * pixels * images;
  if (images > 1)
    floats += p.k / p.groups * pixels * images;
  if (storage16 && kernel != ConvKernel::BackwardFilter)
    floats += p.k * patch;
  if (storage16 && kernel != ConvKernel::Forward && images == 1)
    floats += p.k * pixels;
  return static_cast<uint64_t>(floats) * sizeof(float);
}

/// Bytes a convolution kernel moves on top of reading its operands and
/// writing its result once, over the whole batch, by the plan of
/// conv2dWorkspaceBytes: every matrix it fills in the workspace is written
/// once and read once (the im2col matrix, or backward data's product that
/// col2im reads; the staging matrix; the float32 copies of 16-bit
/// operands), and the backward filter reads and rewrites its float32
/// weight gradient for every GEMM after the first. The GEMMs' re-reads of
/// the weight, one per GEMM, are left out (it is small and stays in
/// cache). None for a depthwise convolution, and none for a pointwise one
/// whose native GEMMs read and write the images in place. The cost model
/// adds this to the operands' bytes (the trainer's --profile).
inline uint64_t conv2dScratchTraffic(const Conv2dParams &p,
                                     ConvKernel kernel = ConvKernel::Forward,
                                     bool storage16 = false,
                                     bool native16 = false) {
  if (convIsDepthwise(p))
    return 0;
  const int64_t images = convImagesPerGemm(p);
  const int64_t chunks = (p.n + images - 1) / images; // GEMMs a group
  // All groups' rows, all images' columns: what the GEMMs' workspace
  // matrices hold in turn.
  const int64_t taps = p.c * p.kh * p.kw, columns = p.n * p.oh * p.ow;
  const int64_t weight = p.k * (p.c / p.groups) * p.kh * p.kw;
  int64_t bytes = 0;
  if (storage16 && native16) {
    if (kernel == ConvKernel::BackwardData && convBackwardDataAsForward(p))
      return 2 * weight * 2 + conv2dScratchTraffic(convTransposedAsForward(p),
                                                   ConvKernel::Forward, true,
                                                   true);
    const bool batched =
        kernel != ConvKernel::BackwardFilter && convNativeBatched(p);
    if (!(batched && convIsPointwise(p)))
      bytes += taps * columns * (kernel == ConvKernel::BackwardData ? 4 : 2);
    if (!batched && images > 1)
      bytes += p.k * columns * (kernel == ConvKernel::Forward ? 4 : 2);
  } else {
    bytes += taps * columns * 4;
    if (images > 1)
      bytes += p.k * columns * 4;
    if (storage16 && kernel != ConvKernel::BackwardFilter)
      bytes += weight * 4;
    if (storage16 && kernel != ConvKernel::Forward && images == 1)
      bytes += p.k * columns * 4;
  }
  if (kernel == ConvKernel::BackwardFilter)
    bytes += (chunks - 1) * weight * 4;
  return static_cast<uint64_t>(2 * bytes);
}

/// y = conv(x, w) (+ bias[k] when bias is non-null).
void conv2dForward(Context &ctx, const Conv2dParams &p, const float *x,
                   const float *w, const float *bias, float *y,
                   float *workspace);
/// dx = conv_transpose(dy, w); dx is overwritten.
void conv2dBackwardData(Context &ctx, const Conv2dParams &p, const float *dy,
                        const float *w, float *dx, float *workspace);
/// dw = sum_n dy (x) im2col(x); dw is overwritten.
void conv2dBackwardFilter(Context &ctx, const Conv2dParams &p, const float *x,
                          const float *dy, float *dw, float *workspace);

/// The same with x, w and dy stored in 16 bits (all in `storage`): they are
/// widened to float32 (exact), the products accumulate in float32, and the
/// bias and results are float32, as for the GEMMs of --precision bf16/fp16.
void conv2dForward16(Context &ctx, Storage16 storage, const Conv2dParams &p,
                     const uint16_t *x, const uint16_t *w, const float *bias,
                     float *y, float *workspace);
void conv2dBackwardData16(Context &ctx, Storage16 storage,
                          const Conv2dParams &p, const uint16_t *dy,
                          const uint16_t *w, float *dx, float *workspace);
void conv2dBackwardFilter16(Context &ctx, Storage16 storage,
                            const Conv2dParams &p, const uint16_t *x,
                            const uint16_t *dy, float *dw, float *workspace);

//===----------------------------------------------------------------------===//
// Pooling (2-D, NCHW)
//===----------------------------------------------------------------------===//

struct Pool2dParams {
  int64_t n, c, h, w;
  int64_t kh, kw;
  int64_t oh, ow;
  int64_t strideH, strideW;
  int64_t padTop, padLeft;
  int64_t dilationH, dilationW;
  /// AveragePool: divide by the full window (true) or by the number of
  /// in-bounds elements (false). Ignored by max pooling.
  bool countIncludePad;
  /// Bottom/right padding, which only AveragePool with countIncludePad needs:
  /// a window is clipped to the padded input [-padTop, h + padBottom) (as
  /// PyTorch and ONNX do when ceil mode lets it run further). -1 means the
  /// same as padTop/padLeft (symmetric padding, PyTorch's only kind).
  int64_t padBottom = -1, padRight = -1;
};

/// Max pooling; padded positions never win. Ties go to the first element in
/// row-major window order, as PyTorch does.
void maxPool2dForward(Context &ctx, const Pool2dParams &p, const float *x,
                      float *y);
/// dx = scatter of dy to the argmax of each window (recomputed from x).
/// dx is overwritten.
void maxPool2dBackward(Context &ctx, const Pool2dParams &p, const float *x,
                       const float *dy, float *dx);
/// The same with each tensor read or written as it is stored (16-bit ones
/// in `storage`): the max of 16-bit values is one of them, stored exactly;
/// a 16-bit dx takes each sum rounded as a conversion of the float32 dx
/// would round it.
void maxPool2dForward16(Context &ctx, Storage16 storage, const Pool2dParams &p,
                        StoredIn x, StoredOut y);
void maxPool2dBackward16(Context &ctx, Storage16 storage, const Pool2dParams &p,
                         StoredIn x, StoredIn dy, StoredOut dx);
void avgPool2dForward(Context &ctx, const Pool2dParams &p, const float *x,
                      float *y);
/// dx is overwritten.
void avgPool2dBackward(Context &ctx, const Pool2dParams &p, const float *dy,
                       float *dx);

//===----------------------------------------------------------------------===//
// Reductions, softmax, losses
//===----------------------------------------------------------------------===//

/// y = scale * sum of x over the axes where outShape[i] == 1 and
/// inShape[i] != 1. Both shapes have the same rank; y has outShape.
void reduceSum(Context &ctx, int rank, const int64_t *inShape,
               const int64_t *outShape, const float *x, float *y, float scale);

/// Softmax (or log-softmax) of x viewed as [outer, dim, inner] along dim.
/// y may be x (each element is read before it is written).
void softmaxForward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                    const float *x, float *y, bool log);
/// dx from the forward output y and dy; dx is overwritten.
void softmaxBackward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                     const float *y, const float *dy, float *dx, bool log);

enum class Reduction : int { None = 0, Sum = 1, Mean = 2 };

/// ONNX SoftmaxCrossEntropyLoss without weights. logits are [n, c, d] with
/// d the product of the trailing dims (1 when absent); labels are int64
/// [n, d]. logProb receives log_softmax(logits) ([n, c, d]). loss is a
/// scalar (Sum, Mean) or [n, d] (None). Mean divides by the number of
/// labels != ignoreIndex. Labels outside [0, c) that are not ignoreIndex are
/// a data error: the kernel reports it through the context and treats them
/// as ignored. logProb may be logits (the memory plan writes the
/// log-probabilities over logits that no later op reads).
void softmaxCrossEntropyForward(Context &ctx, int64_t n, int64_t c,
                                int64_t d, const float *logits,
                                const int64_t *labels, Reduction reduction,
                                int64_t ignoreIndex, float *loss,
                                float *logProb);
/// dlogits from the saved logProb; dloss is a scalar (Sum, Mean) or [n, d].
/// dlogits is overwritten; it may be logProb (each element is read before
/// it is written).
void softmaxCrossEntropyBackward(Context &ctx, int64_t n, int64_t c,
                                 int64_t d, const float *dloss,
                                 const float *logProb, const int64_t *labels,
                                 Reduction reduction, int64_t ignoreIndex,
                                 float *dlogits);

/// Scratch of softmaxCrossEntropyWithGrad for n rows: two floats a row.
inline uint64_t softmaxCrossEntropyWithGradWorkspaceBytes(int64_t n) {
  return n > 0 ? 2 * sizeof(float) * static_cast<uint64_t>(n) : 0;
}

/// softmaxCrossEntropyForward, then softmaxCrossEntropyBackward from its
/// log-probabilities, for logits [n, c] (d = 1) and reduction Sum or Mean,
/// without storing the log-probabilities: each row is read for its maximum
/// and its sum of exponentials, and once more to write dlogits. loss and
/// dlogits are what the two kernels give (bad labels are reported alike).
/// dlogits is float32, or 16-bit when `narrow` (`storage`), rounded as a
/// conversion rounds the float32 gradient. dlogits may be logits: a float32
/// gradient is written row by row over it, a 16-bit one in phases of rows
/// as narrowInPlace does. `workspace` holds
/// softmaxCrossEntropyWithGradWorkspaceBytes(n) bytes. Rows are `ld`
/// elements apart (>= c) in logits and dlogits: the memory plan pads the
/// rows of logits a GEMM writes to 16 bytes (mtc::rowPitch); the padding is
/// neither read nor written. A 16-bit dlogits written in place over float32
/// logits needs ld == c.
void softmaxCrossEntropyWithGrad(Context &ctx, int64_t n, int64_t c, int64_t ld,
                                 const float *logits, const int64_t *labels,
                                 const float *dloss, Reduction reduction,
                                 int64_t ignoreIndex, float *loss,
                                 void *dlogits, bool narrow, Storage16 storage,
                                 void *workspace);
/// The loss of softmaxCrossEntropyWithGrad alone (no dloss, no dlogits):
/// evaluation's loss, with the same workspace.
void softmaxCrossEntropyLoss(Context &ctx, int64_t n, int64_t c, int64_t ld,
                             const float *logits, const int64_t *labels,
                             Reduction reduction, int64_t ignoreIndex,
                             float *loss, void *workspace);
/// The same on logits stored in 16 bits (`storage`; a GEMM's output rounded
/// as torch.autocast stores it), widened exactly as they are read, with
/// dlogits in the same format. dlogits may be logits (each row is read
/// before it is written over).
void softmaxCrossEntropyWithGrad16(Context &ctx, Storage16 storage, int64_t n,
                                   int64_t c, int64_t ld,
                                   const uint16_t *logits,
                                   const int64_t *labels, const float *dloss,
                                   Reduction reduction, int64_t ignoreIndex,
                                   float *loss, uint16_t *dlogits,
                                   void *workspace);

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Where the rows of one tensor of an attention op are: row i of head h
/// (the flattened batch index; head h % heads of outer index h / heads)
/// starts at element (h / heads) * batch + (h % heads) * head + i * row,
/// and its elements are contiguous. So a tensor need not be [batch, rows,
/// width]: heads may be interleaved with the sequence ([B, S, H, D], as a
/// projection writes them) or be a strided slice of a wider tensor.
struct AttentionLayout {
  int64_t batch, head, row;
};

/// The layouts of query, key, value, output, the output's gradient and the
/// gradients of query, key and value (the forward reads only the first
/// four).
struct AttentionLayouts {
  AttentionLayout q, k, v, o, dout, dq, dk, dv;
};

/// The layout of a contiguous [outer, heads, rows, width] tensor.
constexpr AttentionLayout contiguousAttentionLayout(int64_t heads,
                                                    int64_t rows,
                                                    int64_t width) {
  return {heads * rows * width, rows * width, width};
}

/// One fused attention op: softmax(scale * Q K^T, masked) (dropped out) V
/// over `batch` independent heads, the flattened leading dims. Q is
/// [batch, sq, d], K [batch, sk, d], V [batch, sk, dv], the output
/// [batch, sq, dv] and the log-sum-exp of each row of scores [batch, sq]
/// (contiguous); where the rows of each but the log-sum-exp are is their
/// AttentionLayout. The score matrix is never stored: the forward keeps a
/// running maximum and sum per row (online softmax), the backward
/// recomputes the probabilities from the saved log-sum-exp.
struct AttentionDims {
  int64_t batch, sq, sk, d, dv;
  float scale;
  /// Dropout on the probabilities (0: none). The mask is the one a dropout
  /// op with this `stream` would draw over the [batch, sq, sk] probabilities:
  /// element (h, i, j) is flat index (h * sq + i) * sk + j (see
  /// dropoutForward), so fused and unfused attention drop the same weights.
  float dropout;
  uint64_t stream;
  /// The optional mask (a nonzero byte replaces the score by -inf) is
  /// broadcast to [batchDims..., sq, sk]: maskStrides[r] is its element
  /// stride along batch dim r and maskRowStride / maskColStride along the
  /// query and key dims, 0 where it is broadcast.
  int batchRank;
  int64_t batchDims[kMaxRank];
  int64_t maskStrides[kMaxRank];
  int64_t maskRowStride, maskColStride;
  /// The innermost batch dim (the heads; 1 without batch dims), which the
  /// layouts split the flattened batch index by.
  int64_t heads;
  /// Where the rows of each tensor are.
  AttentionLayouts rows;
  /// Query i sees keys j <= i only (score (i, j) is -inf where j > i, in
  /// every head). The mask pointer is then null: the kernels classify the
  /// chunks of keys by position and read no mask.
  bool causal = false;
};

/// The largest head dims (d and dv) the attention kernels take: a tile of
/// that width lives in one thread's (CPU) or one block's (CUDA) fast memory.
constexpr int64_t kMaxAttentionHeadDim = 256;

/// out and lse from q, k, v (and mask, or null). A row whose scores are all
/// masked gets a zero output and lse = -inf.
void attentionForward(Context &ctx, const AttentionDims &dims, const float *q,
                      const float *k, const float *v,
                      const unsigned char *mask, float *out, float *lse);
/// dq, dk, dv (overwritten) from the forward's inputs, its output and lse,
/// and the output gradient dout. Deterministic: no atomics, the same sums in
/// the same order at any thread count.
void attentionBackward(Context &ctx, const AttentionDims &dims,
                       const float *q, const float *k, const float *v,
                       const unsigned char *mask, const float *out,
                       const float *lse, const float *dout, float *dq,
                       float *dk, float *dv);

/// The same with Q, K, V (and, backward, dO) stored in 16 bits (`storage`),
/// as --precision bf16 / fp16 leaves them: every product multiplies 16-bit
/// operands and accumulates in float32 (the tensor cores on CUDA). Scores
/// are Q K^T; the (dropped) probabilities are rounded to 16 bits for
/// P V and P^T dO, and dS for dS K and dS^T Q; dP = dO V^T. The softmax,
/// the log-sum-exp, delta_i = dO_i . O_i and the outputs dQ, dK, dV are
/// float32. The output O is float32 or, in the overloads taking uint16_t,
/// stored in `storage` too: the forward rounds each value as a conversion
/// rounds it, the backward widens what is stored (so both are bitwise the
/// float32 kernels followed by, and reading, a conversion). The backward's
/// dQ, dK and dV are float32 or, where they are uint16_t, summed in float32
/// and then rounded to `storage` as a conversion rounds them.
void attentionForward16(Context &ctx, Storage16 storage,
                        const AttentionDims &dims, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const unsigned char *mask, float *out, float *lse);
void attentionForward16(Context &ctx, Storage16 storage,
                        const AttentionDims &dims, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v,
                        const unsigned char *mask, uint16_t *out, float *lse);
void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &dims, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const float *out,
                         const float *lse, const uint16_t *dout, float *dq,
                         float *dk, float *dv);
void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &dims, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const uint16_t *out,
                         const float *lse, const uint16_t *dout, float *dq,
                         float *dk, float *dv);
void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &dims, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const float *out,
                         const float *lse, const uint16_t *dout, uint16_t *dq,
                         uint16_t *dk, uint16_t *dv);
void attentionBackward16(Context &ctx, Storage16 storage,
                         const AttentionDims &dims, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v,
                         const unsigned char *mask, const uint16_t *out,
                         const float *lse, const uint16_t *dout, uint16_t *dq,
                         uint16_t *dk, uint16_t *dv);

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// An activation a batch normalization kernel applies to its result, and
/// whose gradient its backward applies to the incoming gradient first, as
/// the separate elementwise kernels do: ReLU y = v > 0 ? v : 0 (gradient
/// where the output is > 0), or clip to [lo, hi] y = v < lo ? lo : (v > hi
/// ? hi : v) (gradient where lo < output < hi; ReLU6 is [0, 6]).
enum class NormActivationKind : int { None = 0, Relu = 1, Clip = 2 };
struct NormActivation {
  NormActivationKind kind = NormActivationKind::None;
  float lo = 0.0f, hi = 0.0f;
};

/// BatchNormalization in training mode, x viewed as [n, c, inner] (inner =
/// product of the spatial dims). Per channel: batch mean and biased variance
/// over n*inner elements; y = (x - mean) * invstd * scale + bias with invstd =
/// 1 / sqrt(var + eps). savedMean/savedInvstd ([c]) keep mean and invstd for
/// the backward. runningMean/runningVar ([c]) are updated in place, as
/// PyTorch does: running = momentum * running + (1 - momentum) * batch, where
/// the batch variance is the unbiased one (times m / (m - 1), m = n*inner).
/// `momentum` is ONNX's (PyTorch's 1 - momentum). Either running pointer may
/// be null to skip its update. With m == 1 the unbiased variance is 0/0; the
/// running variance then takes the biased one (0) instead of NaN. With m == 0
/// the running statistics are left alone. y may share storage with x. With
/// `act`, y is the activation of that; with `residual` ([n, c, inner]), of
/// that plus the residual (a residual block's sum and ReLU), y may then
/// share storage with the residual too.
void batchNormTrainForward(Context &ctx, int64_t n, int64_t c, int64_t inner,
                           const float *x, const float *scale,
                           const float *bias, float *runningMean,
                           float *runningVar, float eps, float momentum,
                           float *y, float *savedMean, float *savedInvstd,
                           NormActivation act = {},
                           const float *residual = nullptr);
/// The same with x read and y written as they are stored (either may be
/// 16-bit, in `storage`; y rounded as a conversion of the float32 result
/// would round it). With `x16` non-null, x's 16-bit copy (x rounded, for
/// the backward pass) is also written there as x is read. y may share
/// storage with x only when both are stored alike. A residual is stored
/// like y; the normalized values are rounded as y is stored before it is
/// added (as if stored, then added by a separate kernel).
void batchNormTrainForward16(Context &ctx, Storage16 storage, int64_t n,
                             int64_t c, int64_t inner, StoredIn x,
                             const float *scale, const float *bias,
                             float *runningMean, float *runningVar, float eps,
                             float momentum, StoredOut y, float *savedMean,
                             float *savedInvstd, NormActivation act = {},
                             uint16_t *x16 = nullptr,
                             StoredIn residual = nullptr);
/// Gradients of batchNormTrainForward: dx, dscale, dbias (all overwritten).
/// With xhat = (x - mean) * invstd and sums over n and inner:
/// dbias = sum(dy), dscale = sum(dy * xhat),
/// dx = scale * invstd / m * (m * dy - dbias - xhat * dscale).
/// dx may share storage with dy. With `act`, dy is first the activation's
/// gradient from the incoming dy and the activation's output `actOut`
/// ([n, c, inner]), as relu_grad / clip_grad compute it.
void batchNormTrainBackward(Context &ctx, int64_t n, int64_t c, int64_t inner,
                            const float *dy, const float *x,
                            const float *scale, const float *savedMean,
                            const float *savedInvstd, float *dx,
                            float *dscale, float *dbias,
                            const float *actOut = nullptr,
                            NormActivation act = {});
/// The same with dy, x and actOut read and dx written as they are stored
/// (16-bit ones in `storage`; actOut, when given, and a 16-bit dy stored
/// like x; dx rounded as a conversion of the float32 gradient would round
/// it): the saved input and activation output a 16-bit backward pass
/// keeps, the rounded gradient a 16-bit convolution's backward returns,
/// the gradient only 16-bit convolutions read. dx shares storage with dy
/// only when both are float32.
void batchNormTrainBackward16(Context &ctx, Storage16 storage, int64_t n,
                              int64_t c, int64_t inner, StoredIn dy, StoredIn x,
                              const float *scale, const float *savedMean,
                              const float *savedInvstd, StoredOut dx,
                              float *dscale, float *dbias,
                              StoredIn actOut = nullptr,
                              NormActivation act = {});
/// BatchNormalization with given statistics (inference, or frozen stats):
/// y = (x - mean) / sqrt(var + eps) * scale + bias.
void batchNormInferenceForward(Context &ctx, int64_t n, int64_t c,
                               int64_t inner, const float *x,
                               const float *scale, const float *bias,
                               const float *mean, const float *var, float eps,
                               float *y);

/// LayerNormalization of x viewed as [outer, dim], normalizing each row with
/// its mean and biased variance (invstd = 1 / sqrt(var + eps)); scale and
/// bias have dim elements (bias may be null). mean/invstd ([outer]) are saved
/// for the backward; they may be null when no backward needs them.
void layerNormForward(Context &ctx, int64_t outer, int64_t dim, const float *x,
                      const float *scale, const float *bias, float eps,
                      float *y, float *mean, float *invstd);
/// The same with y stored in 16 bits (`storage`): each normalized value is
/// rounded as converting layerNormForward's result would round it, and no
/// float32 result is written (a layer norm whose output only a 16-bit GEMM
/// reads, under --precision bf16 / fp16).
void layerNormForward16(Context &ctx, Storage16 storage, int64_t outer,
                        int64_t dim, const float *x, const float *scale,
                        const float *bias, float eps, uint16_t *y, float *mean,
                        float *invstd);
/// dx ([outer, dim]), dscale and dbias ([dim]; dbias may be null); all
/// overwritten. Per row, with g = dy * scale:
/// dx = invstd / dim * (dim * g - sum(g) - xhat * sum(g * xhat));
/// dscale = sum over rows of dy * xhat, dbias = sum over rows of dy.
/// With `acc` non-null, dx is that plus acc ([outer, dim]): a residual
/// connection's other gradient, added as dx is written. dx may share
/// storage with dy or acc.
void layerNormBackward(Context &ctx, int64_t outer, int64_t dim,
                       const float *dy, const float *x, const float *scale,
                       const float *mean, const float *invstd, float *dx,
                       float *dscale, float *dbias,
                       const float *acc = nullptr);
/// The same with x stored in 16 bits (`storage`): a layer norm input the
/// backward pass keeps in 16 bits, read as it is stored instead of widened
/// by a conversion first. With `dx16` non-null, dx is also stored there in
/// that format, rounded as a conversion rounds it (the next GEMMs' operand).
void layerNormBackward16(Context &ctx, Storage16 storage, int64_t outer,
                         int64_t dim, const float *dy, const uint16_t *x,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc = nullptr,
                         uint16_t *dx16 = nullptr);
/// The same with dy stored in 16 bits as well, in x's format (the input
/// gradient a 16-bit GEMM rounds, as torch.autocast's does), read as stored.
void layerNormBackward16(Context &ctx, Storage16 storage, int64_t outer,
                         int64_t dim, const uint16_t *dy, const uint16_t *x,
                         const float *scale, const float *mean,
                         const float *invstd, float *dx, float *dscale,
                         float *dbias, const float *acc = nullptr,
                         uint16_t *dx16 = nullptr);

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// Inverted dropout: y = keep ? x * s : 0 with s = 1.0f / (1.0f - ratio)
/// formed in float (the value PyTorch's mask holds). Whether element i is
/// kept is a pure function of (trainingSeed(ctx), batchCounter(ctx), stream,
/// i) through a counter-based generator, identical on CPU and CUDA, so the
/// backward (and any recomputation) regenerates the same mask without
/// storing it. `stream` tells apart the dropout ops of one model.
/// The generator is Philox-4x32-10 keyed by a hash of (seed, stream), with
/// counter (i / 4, step); element i is kept iff the top 24 bits of word
/// i % 4, as a float in [0, 1), are >= ratio. ratio 0 copies x; ratio 1
/// gives zeros; a ratio outside [0, 1] is reported as an error through the
/// context (and y zeroed). y may share storage with x.
void dropoutForward(Context &ctx, int64_t n, const float *x, float *y,
                    float ratio, uint64_t stream);
/// dx = keep ? dy / (1 - ratio) : 0 with the forward's mask.
void dropoutBackward(Context &ctx, int64_t n, const float *dy, float *dx,
                     float ratio, uint64_t stream);

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

/// Gather along an axis, data viewed as [outer, dim, inner]: for each outer
/// index o, each of the `count` indices k and each inner index i,
/// y[o, k, i] = data[o, idx[k], i]. Negative indices count from the end; an
/// index outside [-dim, dim) is a data error (reported through the context,
/// the row is zero-filled).
void gatherForward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                   const float *data, const int64_t *indices, int64_t count,
                   float *y);
/// The transpose: ddata (overwritten) = scatter-add of dy rows to their
/// indices. Deterministic: each output row sums its contributions in index
/// order, in float (so CPU and CUDA agree bit for bit). Bad indices are
/// reported as in the forward and contribute nothing.
void gatherBackward(Context &ctx, int64_t outer, int64_t dim, int64_t inner,
                    const float *dy, const int64_t *indices, int64_t count,
                    float *ddata);

/// Scratch of gatherBackwardAccumulate: the first position naming each row
/// ([dim]), each position's first position ([count]), and a row of sums per
/// position ([outer, count, inner] floats), each part 256-byte aligned.
inline uint64_t gatherBackwardAccumulateWorkspaceBytes(int64_t outer,
                                                       int64_t dim,
                                                       int64_t inner,
                                                       int64_t count) {
  auto aligned = [](uint64_t bytes) { return (bytes + 255) / 256 * 256; };
  return aligned(sizeof(int64_t) * static_cast<uint64_t>(dim)) +
         aligned(sizeof(int64_t) * static_cast<uint64_t>(count)) +
         aligned(sizeof(float) * static_cast<uint64_t>(outer * count * inner));
}
/// ddata = base + the scatter-add gatherBackward would write, with the same
/// bits as gatherBackward into a zeroed tensor followed by that addition
/// (each row's contributions are summed in index order first, then added to
/// base once): a tied embedding's two gradients without a [outer, dim,
/// inner] tensor in between. ddata may be base; then only the elements
/// whose bits change are written (the rows the indices name, and -0 in the
/// others, which becomes +0 as base + 0 gives). Bad indices are reported
/// as by gatherBackward and contribute nothing. `workspace` holds
/// gatherBackwardAccumulateWorkspaceBytes(outer, dim, inner, count) bytes.
void gatherBackwardAccumulate(Context &ctx, int64_t outer, int64_t dim,
                              int64_t inner, const float *dy,
                              const int64_t *indices, int64_t count,
                              const float *base, float *ddata, void *workspace);

/// Stores in count[0] the number of positions whose first maximum over the
/// c classes equals the label and in count[1] the number of positions
/// counted (labels equal to ignoreIndex are not); logits [n, c, d], labels
/// [n, d]. Used by evaluation for accuracy. Consecutive n are `stride`
/// elements apart in logits (c * d when dense; more for padded rows of
/// [n, c] logits, see softmaxCrossEntropyWithGrad).
void countCorrect(Context &ctx, int64_t n, int64_t c, int64_t d, int64_t stride,
                  const float *logits, const int64_t *labels,
                  int64_t ignoreIndex, float *count);

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void fill(Context &ctx, float *y, int64_t n, float value);

/// y[i] = x[i] widened to float32 (exact), for `n` 16-bit values: the
/// operands of a GEMM whose inputs are stored in 16 bits, which then
/// multiplies exactly and accumulates in float32.
void widen16(Context &ctx, Storage16 storage, const uint16_t *x, int64_t n,
             float *y);
/// Copies `bytes` bytes (any dtype).
void copyBytes(Context &ctx, void *dst, const void *src, uint64_t bytes);

/// dst[dstOffset + sum_i idx_i * dstStrides[i]] =
///     src[srcOffset + sum_i idx_i * srcStrides[i]] for every index of
/// `shape` (strides in elements). Covers transpose, slice and the interior of
/// pad. elemBytes is 1, 2, 4 or 8.
void stridedCopy(Context &ctx, int rank, const int64_t *shape,
                 const void *src, int64_t srcOffset, const int64_t *srcStrides,
                 void *dst, int64_t dstOffset, const int64_t *dstStrides,
                 int elemBytes);
/// The same from float32 to 16-bit storage (`storage`), offsets and strides
/// in elements: each element rounded as a conversion rounds it (a transpose
/// whose result only a 16-bit GEMM or attention reads).
void stridedCopyTo16(Context &ctx, Storage16 storage, int rank,
                     const int64_t *shape, const float *src,
                     int64_t srcOffset, const int64_t *srcStrides,
                     uint16_t *dst, int64_t dstOffset,
                     const int64_t *dstStrides);

/// Converts the n float32 values at x to 16 bits in place: value i ends as
/// element i of a uint16_t array at x, rounded as a conversion rounds it.
/// Element i's bits overwrite half of value i / 2, so the values go in
/// phases [0, 1), [1, 2), [2, 4), [4, 8)...: each phase writes only bytes
/// earlier phases have read, and reads none it writes (about log2(n)
/// copies). A conversion whose input dies at it runs so (the memory plan
/// gives both one buffer).
inline void narrowInPlace(Context &ctx, Storage16 storage, float *x,
                          int64_t n) {
  for (int64_t start = 0; start < n;) {
    const int64_t one = 1;
    const int64_t len = n - start < start ? n - start : start > 1 ? start : 1;
    stridedCopyTo16(ctx, storage, 1, &len, x, start, &one,
                    reinterpret_cast<uint16_t *>(x), start, &one);
    start += len;
  }
}

//===----------------------------------------------------------------------===//
// Optimizers (in place on parameter and state buffers)
//===----------------------------------------------------------------------===//

/// Gradient accumulation: on micro-batch 0 acc = g, later acc += g, and on
/// the last of `count` micro-batches acc is then divided by count (the mean
/// gradient). The micro-batch comes from the context.
void accumulateGradient(Context &ctx, int64_t n, float *acc, const float *g,
                        int64_t count);

// The hyperparameters are doubles, as in PyTorch where they are Python
// floats: scalar factors such as 1 - beta2 are formed in double before they
// meet float32 data.

// Loss scaling: `gradStatus` is the step's gradCheck status (null without
// loss scaling). The updates then use g * gradStatus[0] as the gradient, and
// change nothing at all when gradStatus[1] is set (an inf or NaN gradient:
// the step is skipped). Steps count optimizer steps actually taken.

/// PyTorch SGD: d = g + wd * p; with momentum, buf = momentum * buf + d
/// (buf = d on the first optimizer step); nesterov: d = d + momentum * buf,
/// else d = buf; p -= lr * d. momentumBuf is null when momentum == 0.
void sgdUpdate(Context &ctx, int64_t n, float *p, const float *g,
               float *momentumBuf, double lr, double momentum,
               double weightDecay, bool nesterov, const float *gradStatus);

/// One tensor of a multi-tensor SGD update (momentum null without momentum).
struct SgdTensor {
  int64_t n;
  float *param;
  const float *grad;
  float *momentum;
};
/// sgdUpdate on `count` tensors with one set of hyperparameters: one kernel
/// launch (CUDA) for all of them, the same results as one call per tensor.
void sgdUpdateMulti(Context &ctx, const SgdTensor *tensors, int count,
                    double lr, double momentum, double weightDecay,
                    bool nesterov, const float *gradStatus);

/// PyTorch AdamW: p *= 1 - lr * wd; m = b1 m + (1-b1) g;
/// v = b2 v + (1-b2) g^2; p -= lr / (1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) +
/// eps), t being the optimizer step of the context (1 on the first).
void adamwUpdate(Context &ctx, int64_t n, float *p, const float *g, float *m,
                 float *v, double lr, double beta1, double beta2, double eps,
                 double weightDecay, const float *gradStatus);

/// One tensor of a multi-tensor AdamW update. With `param16`, the update
/// also writes the new parameter there rounded to 16 bits (`storage`), as
/// a conversion would round it: the copy the step's GEMMs read.
struct AdamwTensor {
  int64_t n;
  float *param;
  const float *grad;
  float *expAvg, *expAvgSq;
  uint16_t *param16 = nullptr;
  Storage16 storage = Storage16::Bf16;
};
/// adamwUpdate on `count` tensors with one set of hyperparameters: one
/// kernel launch (CUDA) for all of them, the same results as one call per
/// tensor.
void adamwUpdateMulti(Context &ctx, const AdamwTensor *tensors, int count,
                      double lr, double beta1, double beta2, double eps,
                      double weightDecay, const float *gradStatus);

/// Starts the gradient check of a loss-scaled step: status = [1 / scale
/// (in double, rounded to float), 0]. `lossScale` is the float32 scalar the
/// backward pass was seeded with.
void gradCheckBegin(Context &ctx, const float *lossScale, float *status);
/// Sets status[1] to 1 when some element of g is inf or NaN.
void gradCheck(Context &ctx, int64_t n, const float *g, float *status);

} // namespace mtc::rt

#endif // MTC_RUNTIME_KERNELS_H
