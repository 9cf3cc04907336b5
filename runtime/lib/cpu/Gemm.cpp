//===- Gemm.cpp - GEMM through OpenBLAS -----------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"

#include "mtc/runtime/Kernels.h"

#include <cblas.h>
#include <climits>
#include <initializer_list>
#include <string>

namespace mtc::rt {

namespace {

/// CBLAS takes int (blasint) sizes; larger problems are a compiler bug, not
/// something to truncate silently.
bool fitsBlasInt(Context &ctx, const char *what,
                 std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (v < 0 || v > INT_MAX) {
      reportError(ctx, std::string(what) + ": dimension " + std::to_string(v) +
                           " is outside the range BLAS supports");
      return false;
    }
  }
  return true;
}

/// C = beta * C for an [m, n] block, used when k == 0 (BLAS rejects the
/// leading dimensions such a call would need).
void scaleMatrix(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

} // namespace

void gemm(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!fitsBlasInt(ctx, "gemm", {m, n, k, lda, ldb, ldc}))
    return;
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    scaleMatrix(m, n, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void gemmStridedBatched(Context &ctx, bool transA, bool transB, int64_t m,
                        int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, int64_t strideA, const float *b,
                        int64_t ldb, int64_t strideB, float beta, float *c,
                        int64_t ldc, int64_t strideC, int64_t batch) {
  // OpenBLAS parallelizes each GEMM internally, so the batch loop stays
  // serial rather than nesting thread pools.
  for (int64_t i = 0; i < batch; ++i)
    gemm(ctx, transA, transB, m, n, k, alpha, a + i * strideA, lda,
         b + i * strideB, ldb, beta, c + i * strideC, ldc);
}

} // namespace mtc::rt
