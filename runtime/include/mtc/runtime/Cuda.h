//===- Cuda.h - CUDA specifics for generated kernels ------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Generated CUDA trainers launch their own elementwise kernels on the stream
// the runtime owns, so the whole step stays ordered on one stream.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_CUDA_H
#define MTC_RUNTIME_CUDA_H

#include "mtc/runtime/Kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::rt {
struct Context;
struct StepCounters; // Random.h
enum class Storage16 : int; // Kernels.h
struct Conv2dParams;        // Kernels.h
/// gemm() and gemmStridedBatched() (Kernels.h) on operands A and B both
/// stored in 16 bits (`storage`): cuBLAS multiplies them on the tensor cores
/// with float32 accumulation into the float32 C. Strides and leading
/// dimensions count elements.
void gemm16(Context &ctx, Storage16 storage, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
            int64_t lda, const uint16_t *b, int64_t ldb, float beta, float *c,
            int64_t ldc);
void gemm16StridedBatched(Context &ctx, Storage16 storage, bool transA,
                          bool transB, int64_t m, int64_t n, int64_t k,
                          float alpha, const uint16_t *a, int64_t lda,
                          int64_t strideA, const uint16_t *b, int64_t ldb,
                          int64_t strideB, float beta, float *c, int64_t ldc,
                          int64_t strideC, int64_t batch);
/// gemm16() and gemm16StridedBatched() with C stored in the operands'
/// 16-bit format: each sum (in float32) rounded as a conversion rounds it.
void gemm16(Context &ctx, Storage16 storage, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
            int64_t lda, const uint16_t *b, int64_t ldb, float beta,
            uint16_t *c, int64_t ldc);
void gemm16StridedBatched(Context &ctx, Storage16 storage, bool transA,
                          bool transB, int64_t m, int64_t n, int64_t k,
                          float alpha, const uint16_t *a, int64_t lda,
                          int64_t strideA, const uint16_t *b, int64_t ldb,
                          int64_t strideB, float beta, uint16_t *c, int64_t ldc,
                          int64_t strideC, int64_t batch);
/// gemmBias() and gemmBiasGrad() (Kernels.h) on 16-bit A and B; the bias,
/// C and the bias gradient are float32, the sums those of the 16-bit
/// values.
void gemm16Bias(Context &ctx, Storage16 storage, bool transA, bool transB,
                int64_t m, int64_t n, int64_t k, const uint16_t *a,
                int64_t lda, const uint16_t *b, int64_t ldb,
                const float *bias, float *c, int64_t ldc);
/// gemm16Bias() with C stored in the operands' 16-bit format: the float32
/// sum plus the bias, rounded (cuBLASLt's bias epilogue; where it offers no
/// algorithm, C starts as the bias rounded to 16 bits and the GEMM rounds
/// the sum onto it, rounding twice).
void gemm16Bias(Context &ctx, Storage16 storage, bool transA, bool transB,
                int64_t m, int64_t n, int64_t k, const uint16_t *a,
                int64_t lda, const uint16_t *b, int64_t ldb,
                const float *bias, uint16_t *c, int64_t ldc);
void gemm16BiasGrad(Context &ctx, Storage16 storage, bool transA,
                    bool transB, int64_t m, int64_t n, int64_t k,
                    const uint16_t *a, int64_t lda, const uint16_t *b,
                    int64_t ldb, float *c, int64_t ldc, bool sumA,
                    float *biasGrad);
/// mtc.matmul_gelu and mtc.matmul_gelu_grad: C[M,N] = GELU(A op(B) + bias)
/// with `pre` (when not null) the sums before GELU, and C = (A op(B)) *
/// GELU'(pre), A stored [M,K] (rows folded), ldc = N. A, B, C and pre are
/// all float32 or all 16-bit (`storage`). The forward is a GEMM (with
/// cuBLASLt's bias epilogue) into float32 sums, with 16-bit operands as
/// many rows at a time as the library workspace holds, that geluEpilogue
/// (Kernels.h) finishes; the gradient is cuBLASLt's DGELU epilogue, or
/// where it offers no algorithm the same with geluGradEpilogue. A 16-bit
/// result is rounded once either way.
void gemmGelu(Context &ctx, Storage16 storage, bool transB, int64_t m,
              int64_t n, int64_t k, StoredIn a, int64_t lda, StoredIn b,
              int64_t ldb, const float *bias, StoredOut c, StoredOut pre);
void gemmGeluGrad(Context &ctx, Storage16 storage, bool transB, int64_t m,
                  int64_t n, int64_t k, StoredIn a, int64_t lda, StoredIn b,
                  int64_t ldb, StoredIn pre, StoredOut c);
/// conv2d*16 (Kernels.h) with the 16-bit operands multiplied as they are
/// stored (gemm16: the tensor cores) instead of widened: the im2col matrix
/// and gathered output gradients stay 16-bit, the results float32. The
/// workspace is conv2dWorkspaceBytes(p, kernel, true, true) bytes.
void conv2dForwardNative16(Context &ctx, Storage16 storage,
                           const Conv2dParams &p, const uint16_t *x,
                           const uint16_t *w, const float *bias, float *y,
                           void *workspace);
/// The same with y stored in the operands' 16-bit format, each sum rounded
/// once as a conversion of the float32 y would round it; for convolutions
/// that are not depthwise, without a bias.
void conv2dForwardNative16(Context &ctx, Storage16 storage,
                           const Conv2dParams &p, const uint16_t *x,
                           const uint16_t *w, const float *bias, uint16_t *y,
                           void *workspace);
void conv2dBackwardDataNative16(Context &ctx, Storage16 storage,
                                const Conv2dParams &p, const uint16_t *dy,
                                const uint16_t *w, float *dx,
                                void *workspace);
/// The same with dx stored in the operands' 16-bit format, each sum
/// rounded once as a conversion of the float32 dx would round it: the
/// gradient torch.autocast's convolution backward returns.
void conv2dBackwardDataNative16(Context &ctx, Storage16 storage,
                                const Conv2dParams &p, const uint16_t *dy,
                                const uint16_t *w, uint16_t *dx,
                                void *workspace);
void conv2dBackwardFilterNative16(Context &ctx, Storage16 storage,
                                  const Conv2dParams &p, const uint16_t *x,
                                  const uint16_t *dy, float *dw,
                                  void *workspace);
/// Whether the last gemm*Bias* call ran as a cuBLASLt epilogue (false: the
/// library offered no algorithm for it, and a plain GEMM and a kernel of
/// ours did the same work). For tests and the GPU check's report.
bool lastGemmUsedEpilogue(Context &ctx);
/// The stream every kernel of the step runs on.
cudaStream_t cudaStreamOf(Context &ctx);
/// Reports a failed launch (cudaGetLastError) with the kernel's name; the
/// trainer stops with a clear error after the step.
void checkLaunch(Context &ctx, const char *kernelName);
#if defined(__CUDACC__) || defined(MTC_CUDA_EMULATION)
/// Element `lane` (0..3) of a vector a generated kernel loaded or stores
/// whole (with the lane loop unrolled, a register).
template <typename V> __device__ inline auto laneOf(const V &v, int lane) {
  return lane == 0 ? v.x : lane == 1 ? v.y : lane == 2 ? v.z : v.w;
}
template <typename V, typename T>
__device__ inline void setLane(V &v, int lane, T value) {
  (lane == 0 ? v.x : lane == 1 ? v.y : lane == 2 ? v.z : v.w) = value;
}
#endif

/// The step counters in device memory, which kernels read instead of
/// taking the step as an argument (a replayed CUDA graph keeps arguments).
const StepCounters *deviceStepCounters(Context &ctx);
} // namespace mtc::rt

#endif // MTC_RUNTIME_CUDA_H
