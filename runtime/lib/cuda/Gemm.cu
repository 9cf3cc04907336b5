//===- Gemm.cu - GEMM through cuBLAS --------------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// cuBLAS is column-major. A row-major [M, N] matrix with leading dimension
// ld is the column-major [N, M] matrix (its transpose) with the same ld, so
// row-major C = op(A) op(B) is computed as column-major
// C^T = op(B)^T op(A)^T: the operands swap places and keep their
// transpose flags.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "mtc/runtime/Cuda.h"
#include "mtc/runtime/Kernels.h"

#include <climits>
#include <initializer_list>
#include <string>

namespace mtc::rt {

namespace {

/// cuBLAS takes int sizes; larger problems are a compiler bug, not
/// something to truncate silently.
bool fitsBlasInt(Context &ctx, const char *what,
                 std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (v < 0 || v > INT_MAX) {
      reportError(ctx, std::string(what) + ": dimension " + std::to_string(v) +
                           " is outside the range cuBLAS supports");
      return false;
    }
  }
  return true;
}

/// C = beta * C, used when k == 0 (cuBLAS rejects the leading dimensions
/// such a call would need).
__global__ void gemmScaleKernel(int64_t m, int64_t n, float beta, float *c,
                                int64_t ldc) {
  for (int64_t i = cuda::threadIndex(); i < m * n; i += cuda::threadCount()) {
    float *p = c + (i / n) * ldc + i % n;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

cublasOperation_t opOf(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

cudaDataType_t dataTypeOf(Storage16 storage) {
  return storage == Storage16::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

/// The k == 0 case of every GEMM entry point: C = beta * C.
void scaleOnly(Context &ctx, int64_t m, int64_t n, float beta, float *c,
               int64_t ldc) {
  gemmScaleKernel<<<cuda::gridFor(m * n), cuda::kBlock, 0, ctx.stream>>>(
      m, n, beta, c, ldc);
  checkLaunch(ctx, "gemmScaleKernel");
}

} // namespace

void gemm(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!fitsBlasInt(ctx, "gemm", {m, n, k, lda, ldb, ldc}))
    return;
  if (m == 0 || n == 0)
    return;
  if (k == 0)
    return scaleOnly(ctx, m, n, beta, c, ldc);
  cuda::checkBlas(ctx,
                  cublasSgemm(ctx.blas, opOf(transB), opOf(transA),
                              static_cast<int>(n), static_cast<int>(m),
                              static_cast<int>(k), &alpha, b,
                              static_cast<int>(ldb), a, static_cast<int>(lda),
                              &beta, c, static_cast<int>(ldc)),
                  "gemm");
}

void gemmStridedBatched(Context &ctx, bool transA, bool transB, int64_t m,
                        int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, int64_t strideA, const float *b,
                        int64_t ldb, int64_t strideB, float beta, float *c,
                        int64_t ldc, int64_t strideC, int64_t batch) {
  if (!fitsBlasInt(ctx, "gemmStridedBatched", {m, n, k, lda, ldb, ldc, batch}))
    return;
  if (m == 0 || n == 0 || batch == 0)
    return;
  if (k == 0) {
    // Rare enough that one launch per matrix is fine.
    for (int64_t i = 0; i < batch; ++i)
      gemm(ctx, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta,
           c + i * strideC, ldc);
    return;
  }
  cuda::checkBlas(ctx,
                  cublasSgemmStridedBatched(
                      ctx.blas, opOf(transB), opOf(transA), static_cast<int>(n),
                      static_cast<int>(m), static_cast<int>(k), &alpha, b,
                      static_cast<int>(ldb), strideB, a, static_cast<int>(lda),
                      strideA, &beta, c, static_cast<int>(ldc), strideC,
                      static_cast<int>(batch)),
                  "gemmStridedBatched");
}

// 16-bit operands, float32 results: cublasGemmEx with float32 compute (no
// reduced-precision accumulation), which runs on the tensor cores.

void gemm16(Context &ctx, Storage16 storage, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
            int64_t lda, const uint16_t *b, int64_t ldb, float beta, float *c,
            int64_t ldc) {
  if (!fitsBlasInt(ctx, "gemm16", {m, n, k, lda, ldb, ldc}))
    return;
  if (m == 0 || n == 0)
    return;
  if (k == 0)
    return scaleOnly(ctx, m, n, beta, c, ldc);
  cudaDataType_t type = dataTypeOf(storage);
  cuda::checkBlas(
      ctx,
      cublasGemmEx(ctx.blas, opOf(transB), opOf(transA), static_cast<int>(n),
                   static_cast<int>(m), static_cast<int>(k), &alpha, b, type,
                   static_cast<int>(ldb), a, type, static_cast<int>(lda),
                   &beta, c, CUDA_R_32F, static_cast<int>(ldc),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "gemm16");
}

void gemm16StridedBatched(Context &ctx, Storage16 storage, bool transA,
                          bool transB, int64_t m, int64_t n, int64_t k,
                          float alpha, const uint16_t *a, int64_t lda,
                          int64_t strideA, const uint16_t *b, int64_t ldb,
                          int64_t strideB, float beta, float *c, int64_t ldc,
                          int64_t strideC, int64_t batch) {
  if (!fitsBlasInt(ctx, "gemm16StridedBatched",
                   {m, n, k, lda, ldb, ldc, batch}))
    return;
  if (m == 0 || n == 0 || batch == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < batch; ++i)
      scaleOnly(ctx, m, n, beta, c + i * strideC, ldc);
    return;
  }
  cudaDataType_t type = dataTypeOf(storage);
  cuda::checkBlas(
      ctx,
      cublasGemmStridedBatchedEx(
          ctx.blas, opOf(transB), opOf(transA), static_cast<int>(n),
          static_cast<int>(m), static_cast<int>(k), &alpha, b, type,
          static_cast<int>(ldb), strideB, a, type, static_cast<int>(lda),
          strideA, &beta, c, CUDA_R_32F, static_cast<int>(ldc), strideC,
          static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "gemm16StridedBatched");
}

} // namespace mtc::rt
