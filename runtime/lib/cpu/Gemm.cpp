//===- Gemm.cpp - GEMM through OpenBLAS -----------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "KernelCommon.h"

#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Parallel.h"
#include "mtc/runtime/VecMath.h"

#include <algorithm>
#include <cblas.h>
#include <climits>
#include <initializer_list>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

/// GEMMs with fewer multiply-adds run on one thread.
constexpr int64_t kGemmGrain = int64_t(1) << 18;

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

/// sums[j] = the sum over the rows of column j of a [rows, cols] matrix
/// with leading dimension ld.
void columnSums(const float *x, int64_t rows, int64_t cols, int64_t ld,
                float *sums) {
  // Each thread sums a band of columns over every row, in double and in
  // row order, so the result does not depend on the thread count.
  constexpr int64_t kBand = 64;
  int64_t bands = (cols + kBand - 1) / kBand;
  cpu::parallelFor(0, bands, rows * cols >= cpu::kParallelGrain,
                   [&](int64_t band) {
                     int64_t first = band * kBand;
                     int64_t count = std::min(kBand, cols - first);
                     double acc[kBand] = {};
                     for (int64_t r = 0; r < rows; ++r) {
                       const float *row = x + r * ld + first;
                       for (int64_t j = 0; j < count; ++j)
                         acc[j] += row[j];
                     }
                     for (int64_t j = 0; j < count; ++j)
                       sums[first + j] = static_cast<float>(acc[j]);
                   });
}

/// gemm(), then epilogue(row, rows, col, cols) on each block of C once its
/// thread has computed it (still in that thread's cache).
template <typename Epilogue>
void gemmBlocks(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
                int64_t k, float alpha, const float *a, int64_t lda,
                const float *b, int64_t ldb, float beta, float *c,
                int64_t ldc, Epilogue epilogue) {
  if (!fitsBlasInt(ctx, "gemm", {m, n, k, lda, ldb, ldc}))
    return;
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    scaleMatrix(m, n, beta, c, ldc);
    epilogue(0, m, 0, n);
    return;
  }
  auto call = [&](int64_t rows, int64_t cols, const float *ablock,
                  const float *bblock, float *cblock) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(cols), static_cast<int>(k), alpha, ablock,
                static_cast<int>(lda), bblock, static_cast<int>(ldb), beta,
                cblock, static_cast<int>(ldc));
  };
  // Split C into one block of rows (or columns, when it is wider) per
  // thread; each block is an independent GEMM with the same reduction over
  // k, so the result does not depend on the thread count.
  int64_t threads = 1;
#ifdef _OPENMP
  if (m * n * k >= kGemmGrain)
    threads = std::min<int64_t>(omp_get_max_threads(), std::max(m, n) / 16);
#endif
  if (threads <= 1) {
    call(m, n, a, b, c);
    epilogue(0, m, 0, n);
    return;
  }
  bool byRows = m >= n;
  int64_t extent = byRows ? m : n;
  int64_t chunk = (extent + threads - 1) / threads;
  cpu::parallelFor(0, threads, true, [&](int64_t t) {
    int64_t first = t * chunk, count = std::min(chunk, extent - first);
    if (count <= 0)
      return;
    if (byRows) {
      call(count, n, transA ? a + first : a + first * lda, b,
           c + first * ldc);
      epilogue(first, count, 0, n);
    } else {
      call(m, count, a, transB ? b + first * ldb : b + first, c + first);
      epilogue(0, m, first, count);
    }
  });
}

} // namespace

void gemm(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
          int64_t ldb, float beta, float *c, int64_t ldc) {
  gemmBlocks(ctx, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c,
             ldc, [](int64_t, int64_t, int64_t, int64_t) {});
}

void gemmStridedBatched(Context &ctx, bool transA, bool transB, int64_t m,
                        int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, int64_t strideA, const float *b,
                        int64_t ldb, int64_t strideB, float beta, float *c,
                        int64_t ldc, int64_t strideC, int64_t batch) {
  // Each GEMM is split over the threads, so the batch loop stays serial
  // rather than nesting parallel regions.
  for (int64_t i = 0; i < batch; ++i)
    gemm(ctx, transA, transB, m, n, k, alpha, a + i * strideA, lda,
         b + i * strideB, ldb, beta, c + i * strideC, ldc);
}

void gemmBias(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
              int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, const float *bias, float *c, int64_t ldc) {
  // Each block of C gets the bias as soon as it is computed: the product
  // rounded, then the bias added, as a separate add rounds it.
  gemmBlocks(ctx, transA, transB, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc,
             [&](int64_t row, int64_t rows, int64_t col, int64_t cols) {
               for (int64_t i = row; i < row + rows; ++i)
                 for (int64_t j = col; j < col + cols; ++j)
                   c[i * ldc + j] += bias[j];
             });
}

void gemmBiasGrad(Context &ctx, bool transA, bool transB, int64_t m,
                  int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc,
                  bool sumA, float *biasGrad) {
  if (sumA ? !transA : transB) {
    reportError(ctx, "gemmBiasGrad: the summed operand must be stored "
                     "[K, ...]");
    return;
  }
  gemm(ctx, transA, transB, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  if (sumA)
    columnSums(a, k, m, lda, biasGrad);
  else
    columnSums(b, k, n, ldb, biasGrad);
}

//===----------------------------------------------------------------------===//
// GELU epilogues
//===----------------------------------------------------------------------===//

namespace {

/// Elements per parallel chunk of an epilogue.
constexpr int64_t kEpilogueChunk = 4096;

/// Runs body(begin, end) over [0, count) in chunks, in parallel when there
/// is enough work.
template <typename Body> void overChunks(int64_t count, Body &&body) {
  int64_t chunks = (count + kEpilogueChunk - 1) / kEpilogueChunk;
  cpu::parallelFor(0, chunks, count >= cpu::kParallelGrain, [&](int64_t c) {
    body(c * kEpilogueChunk, std::min(count, (c + 1) * kEpilogueChunk));
  });
}

} // namespace

void geluEpilogue(Context &, Storage16 storage, int64_t count, StoredIn acc,
                  StoredOut y, StoredOut pre) {
  bool bf16 = storage == Storage16::Bf16;
  withStoredIn(acc, [&](auto a) {
    withStoredOut(y, [&](auto out) {
      using Y = std::remove_pointer_t<decltype(out)>;
      auto *saved = static_cast<Y *>(pre.data);
      overChunks(count, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float x = storedToFloat(a[i], bf16);
          float t = cpu::vecTanh(geluTanhArgument(x));
          if (saved)
            storeFloat(saved + i, x, bf16);
          storeFloat(out + i, geluFromTanh(x, t), bf16);
        }
      });
    });
  });
}

void geluGradEpilogue(Context &, Storage16 storage, int64_t count, StoredIn acc,
                      StoredIn pre, StoredOut dx) {
  bool bf16 = storage == Storage16::Bf16;
  withStoredIn(acc, [&](auto a) {
    withStoredIn(pre, [&](auto p) {
      withStoredOut(dx, [&](auto out) {
        overChunks(count, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            float x = storedToFloat(p[i], bf16);
            float t = cpu::vecTanh(geluTanhArgument(x));
            storeFloat(out + i,
                       storedToFloat(a[i], bf16) * geluGradFromTanh(x, t),
                       bf16);
          }
        });
      });
    });
  });
}

} // namespace mtc::rt
