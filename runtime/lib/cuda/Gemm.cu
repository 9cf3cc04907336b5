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
// GEMMs with an epilogue (a linear layer's bias; the sums of its output
// gradient for the bias gradient) go through cuBLASLt. In its column-major
// terms C^T has n rows, so the bias (n values) is its BIAS epilogue; the
// sums of our B (its A) are BGRADA, those of our A (its B) BGRADB. When
// cuBLASLt offers no algorithm for a case, a plain GEMM and a kernel of
// ours do the same work.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Cuda.h"
#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/LayerNormRow.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <type_traits>

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
template <typename T>
__global__ void gemmScaleKernel(int64_t m, int64_t n, float beta, T *c,
                                int64_t ldc, bool bf16) {
  for (int64_t i = cuda::threadIndex(); i < m * n; i += cuda::threadCount()) {
    T *p = c + (i / n) * ldc + i % n;
    storeFloat(p, beta == 0.0f ? 0.0f : beta * storedToFloat(*p, bf16), bf16);
  }
}

cublasOperation_t opOf(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

cudaDataType_t dataTypeOf(Storage16 storage) {
  return storage == Storage16::Bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

/// The k == 0 case of every GEMM entry point: C = beta * C.
template <typename T>
void scaleOnly(Context &ctx, int64_t m, int64_t n, float beta, T *c,
               int64_t ldc, bool bf16 = false) {
  gemmScaleKernel<<<cuda::gridFor(m * n), cuda::kBlock, 0, ctx.stream>>>(
      m, n, beta, c, ldc, bf16);
  checkLaunch(ctx, "gemmScaleKernel");
}

/// Every row of the [m, n] C starts as bias (stored as C is).
template <typename T>
__global__ void broadcastRowsKernel(int64_t m, int64_t n, const float *bias,
                                    T *c, int64_t ldc, bool bf16) {
  for (int64_t i = cuda::threadIndex(); i < m * n; i += cuda::threadCount())
    storeFloat(c + (i / n) * ldc + i % n, bias[i % n], bf16);
}

constexpr int kSumColumns = 32, kSumRowGroups = 8;

/// sums[j] = the sum over rows of column j of a [rows, cols] matrix: a
/// block per 32 columns, 8 row groups per block reduced in shared memory.
template <typename T>
__global__ void columnSumsKernel(const T *x, int64_t rows, int64_t cols,
                                 int64_t ld, bool bf16, float *sums) {
  __shared__ float partial[kSumRowGroups][kSumColumns];
  int64_t col = int64_t(blockIdx.x) * kSumColumns + threadIdx.x;
  float acc = 0.0f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kSumRowGroups)
      acc += storedToFloat(x[r * ld + col], bf16);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int g = 0; g < kSumRowGroups; ++g)
      total += partial[g][threadIdx.x];
    sums[col] = total;
  }
}

template <typename T>
void columnSums(Context &ctx, const T *x, int64_t rows, int64_t cols,
                int64_t ld, bool bf16, float *sums) {
  if (cols == 0)
    return;
  dim3 block(kSumColumns, kSumRowGroups);
  unsigned grid = static_cast<unsigned>((cols + kSumColumns - 1) / kSumColumns);
  columnSumsKernel<T><<<grid, block, 0, ctx.stream>>>(x, rows, cols, ld, bf16,
                                                     sums);
  checkLaunch(ctx, "columnSumsKernel");
}

/// One cuBLASLt GEMM C = op(A) op(B) (alpha 1, beta 0) of A and B stored as
/// `type`, C as `cType` (float32, or A's 16-bit type), with `epilogue`
/// writing or reading the float32 `vector` (the bias, or the bias
/// gradient) and, when `aux` is given, writing or reading the auxiliary
/// matrix of C's type and shape (a GELU epilogue's input, leading
/// dimension `auxLd`). It may use `workspaceBytes` of workspace at
/// `workspaceAt` (by default the whole library workspace). False when
/// cuBLASLt has no algorithm for it. The heuristic's answer is kept per
/// shape, epilogue and workspace (it costs more host time than the launch,
/// which matters without CUDA graphs).
bool ltGemm(Context &ctx, cudaDataType_t type, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
            const void *b, int64_t ldb, void *c, cudaDataType_t cType,
            int64_t ldc, cublasLtEpilogue_t epilogue, const void *vector,
            const void *aux = nullptr, int64_t auxLd = 0,
            void *workspaceAt = nullptr, size_t workspaceBytes = 0) {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  // Column-major: cuBLASLt's A is our B ([n, k] after its op), its B our A.
  cublasOperation_t opA = opOf(transB), opB = opOf(transA);
  cudaDataType_t f32 = CUDA_R_32F;
  if (!workspaceAt) {
    workspaceAt = ctx.ltWorkspace;
    workspaceBytes = ctx.ltWorkspaceBytes;
  }
  size_t workspace = workspaceBytes;
  float one = 1.0f, zero = 0.0f;
  bool ok =
      !cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) &&
      !cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                      sizeof(opA)) &&
      !cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                      sizeof(opB)) &&
      !cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                      &epilogue, sizeof(epilogue)) &&
      // The vector's attributes only for the epilogues that have one; the
      // auxiliary matrix keeps its default type, D's (setting it is for
      // FP8 outputs).
      (!vector ||
       (!cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                        &vector, sizeof(vector)) &&
        !cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof(f32)))) &&
      (!aux || (!cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                    sizeof(aux)) &&
                !cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd,
                    sizeof(auxLd)))) &&
      !cublasLtMatrixLayoutCreate(&la, type, transB ? k : n, transB ? n : k,
                                  ldb) &&
      !cublasLtMatrixLayoutCreate(&lb, type, transA ? m : k, transA ? k : m,
                                  lda) &&
      !cublasLtMatrixLayoutCreate(&lc, cType, n, m, ldc);
  // The heuristic may pick an algorithm that assumes 256-byte aligned
  // operands unless told otherwise: it is told each pointer's alignment,
  // which is part of the key.
  auto alignment = [](const void *p) {
    uint32_t bytes = 256;
    while (bytes > 1 && reinterpret_cast<uintptr_t>(p) % bytes != 0)
      bytes /= 2;
    return bytes;
  };
  const uint32_t alignA = alignment(b), alignB = alignment(a),
                 alignC = alignment(c);
  const int64_t key[] = {int64_t(type),
                         int64_t(cType),
                         transA,
                         transB,
                         m,
                         n,
                         k,
                         lda,
                         ldb,
                         ldc,
                         int64_t(epilogue),
                         alignA,
                         alignB,
                         alignC,
                         vector ? alignment(vector) : 0,
                         aux ? alignment(aux) : 0,
                         auxLd,
                         int64_t(workspace)};
  static_assert(sizeof(key) == sizeof(Context::LtAlgo::key));
  auto cached = std::find_if(
      ctx.ltAlgos.begin(), ctx.ltAlgos.end(), [&](const Context::LtAlgo &e) {
        return std::equal(std::begin(key), std::end(key), e.key);
      });
  if (ok && cached == ctx.ltAlgos.end()) {
    Context::LtAlgo entry;
    std::copy(std::begin(key), std::end(key), entry.key);
    cublasLtMatmulHeuristicResult_t heuristic = {};
    int found = 0;
    entry.found =
        !cublasLtMatmulPreferenceCreate(&pref) &&
        !cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
            sizeof(workspace)) &&
        !cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignA,
            sizeof(alignA)) &&
        !cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignB,
            sizeof(alignB)) &&
        !cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignC,
            sizeof(alignC)) &&
        !cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignC,
            sizeof(alignC)) &&
        !cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc, la, lb, lc, lc, pref, 1,
                                        &heuristic, &found) &&
        found > 0;
    entry.algo = heuristic.algo;
    ctx.ltAlgos.push_back(entry);
    cached = std::prev(ctx.ltAlgos.end());
  }
  ok = ok && cached->found;
  if (ok) {
    cublasStatus_t status =
        cublasLtMatmul(ctx.lt, desc, &one, b, la, a, lb, &zero, c, lc, c, lc,
                       &cached->algo, workspaceAt, workspace, ctx.stream);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED ||
        status == CUBLAS_STATUS_INVALID_VALUE) {
      // Refused before anything ran: the caller's plain GEMM runs instead,
      // now and for every later call of this shape.
      cached->found = false;
      ok = false;
    } else {
      cuda::checkBlas(ctx, status, "cublasLtMatmul");
    }
  }
  if (pref)
    cublasLtMatmulPreferenceDestroy(pref);
  if (lc)
    cublasLtMatrixLayoutDestroy(lc);
  if (lb)
    cublasLtMatrixLayoutDestroy(lb);
  if (la)
    cublasLtMatrixLayoutDestroy(la);
  if (desc)
    cublasLtMatmulDescDestroy(desc);
  ctx.lastGemmEpilogue = ok;
  return ok;
}

} // namespace

bool lastGemmUsedEpilogue(Context &ctx) { return ctx.lastGemmEpilogue; }

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

// 16-bit operands, float32 or 16-bit results: cublasGemmEx with float32
// compute (no reduced-precision accumulation), which runs on the tensor
// cores.
namespace {
/// c (rows x n, ldc apart) = the float32 sums (n apart), rounded once.
__global__ void roundSumsKernel(int64_t rows, int64_t n, const float *sums,
                                uint16_t *c, int64_t ldc, bool bf16) {
  for (int64_t i = cuda::threadIndex(); i < rows * n; i += cuda::threadCount())
    storeFloat(c + (i / n) * ldc + i % n, sums[i], bf16);
}

template <typename C>
void gemm16Into(Context &ctx, Storage16 storage, bool transA, bool transB,
                int64_t m, int64_t n, int64_t k, float alpha,
                const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                float beta, C *c, int64_t ldc) {
  if (!fitsBlasInt(ctx, "gemm16", {m, n, k, lda, ldb, ldc}))
    return;
  if (m == 0 || n == 0)
    return;
  if (k == 0)
    return scaleOnly(ctx, m, n, beta, c, ldc, storage == Storage16::Bf16);
  // A K that is not a multiple of 8 slows cuBLAS as much (GPT-2's logits
  // gradient times the embedding, K = 50257: 132 TFLOP/s on an H200). The
  // products up to the last multiple of 8 go in one call, the few left in a
  // second that adds onto the float32 sums: into C when it is float32, else
  // into the library workspace (free between GEMMs), a chunk of rows at a
  // time, rounded into C once at the end, as one call rounds.
  const int64_t kAligned = k - k % 8;
  if (kAligned > 0 && kAligned < k) {
    const uint16_t *aRest = a + (transA ? kAligned * lda : kAligned);
    const uint16_t *bRest = b + (transB ? kAligned : kAligned * ldb);
    if constexpr (std::is_same_v<C, float>) {
      gemm16Into(ctx, storage, transA, transB, m, n, kAligned, alpha, a, lda, b,
                 ldb, beta, c, ldc);
      gemm16Into(ctx, storage, transA, transB, m, n, k - kAligned, alpha, aRest,
                 lda, bRest, ldb, 1.0f, c, ldc);
      return;
    } else {
      const int64_t rowsHeld =
          ctx.ltWorkspace ? static_cast<int64_t>(ctx.ltWorkspaceBytes) / (4 * n)
                          : 0;
      if (beta == 0.0f && rowsHeld > 0) {
        auto *sums = static_cast<float *>(ctx.ltWorkspace);
        for (int64_t first = 0; first < m; first += rowsHeld) {
          const int64_t rows = std::min(rowsHeld, m - first);
          const int64_t rowOffset = transA ? first : first * lda;
          gemm16Into(ctx, storage, transA, transB, rows, n, kAligned, alpha,
                     a + rowOffset, lda, b, ldb, 0.0f, sums, n);
          gemm16Into(ctx, storage, transA, transB, rows, n, k - kAligned, alpha,
                     aRest + rowOffset, lda, bRest, ldb, 1.0f, sums, n);
          roundSumsKernel<<<cuda::gridFor(rows * n), cuda::kBlock, 0,
                            ctx.stream>>>(rows, n, sums, c + first * ldc, ldc,
                                          storage == Storage16::Bf16);
          checkLaunch(ctx, "roundSumsKernel");
        }
        return;
      }
    }
  }
  cudaDataType_t type = dataTypeOf(storage);
  cudaDataType_t cType =
      std::is_same_v<C, uint16_t> ? type : CUDA_R_32F;
  auto columns = [&](int64_t first, int64_t count) {
    const uint16_t *bCols = b + (transB ? first * ldb : first);
    cuda::checkBlas(ctx,
                    cublasGemmEx(ctx.blas, opOf(transB), opOf(transA),
                                 static_cast<int>(count), static_cast<int>(m),
                                 static_cast<int>(k), &alpha, bCols, type,
                                 static_cast<int>(ldb), a, type,
                                 static_cast<int>(lda), &beta, c + first, cType,
                                 static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    "gemm16");
  };
  // Rows of C that are not a multiple of 8 elements (cuBLAS's column-major
  // m) send cuBLAS to much slower kernels: GPT-2's logits (50257 a row) ran
  // at 96 TFLOP/s on an H200, where the GEMMs that read them reached 500.
  // The columns up to the last multiple of 8 go in one call (their first
  // elements stay 16-byte aligned), the few left in a second, narrow one.
  const int64_t aligned = n - n % 8;
  if (aligned > 0 && aligned < n) {
    columns(0, aligned);
    columns(aligned, n - aligned);
    return;
  }
  columns(0, n);
}
} // namespace

void gemm16(Context &ctx, Storage16 storage, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
            int64_t lda, const uint16_t *b, int64_t ldb, float beta, float *c,
            int64_t ldc) {
  gemm16Into(ctx, storage, transA, transB, m, n, k, alpha, a, lda, b, ldb,
             beta, c, ldc);
}

void gemm16(Context &ctx, Storage16 storage, bool transA, bool transB,
            int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
            int64_t lda, const uint16_t *b, int64_t ldb, float beta,
            uint16_t *c, int64_t ldc) {
  gemm16Into(ctx, storage, transA, transB, m, n, k, alpha, a, lda, b, ldb,
             beta, c, ldc);
}

namespace {
template <typename C>
void gemm16StridedBatchedInto(Context &ctx, Storage16 storage, bool transA,
                              bool transB, int64_t m, int64_t n, int64_t k,
                              float alpha, const uint16_t *a, int64_t lda,
                              int64_t strideA, const uint16_t *b, int64_t ldb,
                              int64_t strideB, float beta, C *c, int64_t ldc,
                              int64_t strideC, int64_t batch) {
  if (!fitsBlasInt(ctx, "gemm16StridedBatched",
                   {m, n, k, lda, ldb, ldc, batch}))
    return;
  if (m == 0 || n == 0 || batch == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < batch; ++i)
      scaleOnly(ctx, m, n, beta, c + i * strideC, ldc,
                storage == Storage16::Bf16);
    return;
  }
  cudaDataType_t type = dataTypeOf(storage);
  cudaDataType_t cType = std::is_same_v<C, uint16_t> ? type : CUDA_R_32F;
  cuda::checkBlas(ctx,
                  cublasGemmStridedBatchedEx(
                      ctx.blas, opOf(transB), opOf(transA), static_cast<int>(n),
                      static_cast<int>(m), static_cast<int>(k), &alpha, b, type,
                      static_cast<int>(ldb), strideB, a, type,
                      static_cast<int>(lda), strideA, &beta, c, cType,
                      static_cast<int>(ldc), strideC, static_cast<int>(batch),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "gemm16StridedBatched");
}
} // namespace

void gemm16StridedBatched(Context &ctx, Storage16 storage, bool transA,
                          bool transB, int64_t m, int64_t n, int64_t k,
                          float alpha, const uint16_t *a, int64_t lda,
                          int64_t strideA, const uint16_t *b, int64_t ldb,
                          int64_t strideB, float beta, float *c, int64_t ldc,
                          int64_t strideC, int64_t batch) {
  gemm16StridedBatchedInto(ctx, storage, transA, transB, m, n, k, alpha, a, lda,
                           strideA, b, ldb, strideB, beta, c, ldc, strideC,
                           batch);
}

void gemm16StridedBatched(Context &ctx, Storage16 storage, bool transA,
                          bool transB, int64_t m, int64_t n, int64_t k,
                          float alpha, const uint16_t *a, int64_t lda,
                          int64_t strideA, const uint16_t *b, int64_t ldb,
                          int64_t strideB, float beta, uint16_t *c, int64_t ldc,
                          int64_t strideC, int64_t batch) {
  gemm16StridedBatchedInto(ctx, storage, transA, transB, m, n, k, alpha, a, lda,
                           strideA, b, ldb, strideB, beta, c, ldc, strideC,
                           batch);
}

namespace {

/// The f32 and 16-bit entry points alike: `plain` runs the GEMM without
/// epilogue (the fallback).
template <typename T, typename C, typename PlainGemm>
void biasGemm(Context &ctx, cudaDataType_t type, bool transA, bool transB,
              int64_t m, int64_t n, int64_t k, const T *a, int64_t lda,
              const T *b, int64_t ldb, const float *bias, C *c,
              int64_t ldc, PlainGemm plain) {
  ctx.lastGemmEpilogue = false;
  if (!fitsBlasInt(ctx, "gemmBias", {m, n, k, lda, ldb, ldc}) || m == 0 ||
      n == 0)
    return;
  constexpr bool kNarrowC = std::is_same_v<C, uint16_t>;
  if (k > 0 && ltGemm(ctx, type, transA, transB, m, n, k, a, lda, b, ldb, c,
                      kNarrowC ? type : CUDA_R_32F, ldc,
                      CUBLASLT_EPILOGUE_BIAS, bias))
    return;
  // A 16-bit C holds the bias rounded to 16 bits, then the rounded sum.
  broadcastRowsKernel<<<cuda::gridFor(m * n), cuda::kBlock, 0, ctx.stream>>>(
      m, n, bias, c, ldc, type == CUDA_R_16BF);
  checkLaunch(ctx, "broadcastRowsKernel");
  plain(1.0f);
}

template <typename T, typename PlainGemm>
void biasGradGemm(Context &ctx, cudaDataType_t type, bool bf16, bool transA,
                  bool transB, int64_t m, int64_t n, int64_t k, const T *a,
                  int64_t lda, const T *b, int64_t ldb, float *c,
                  int64_t ldc, bool sumA, float *biasGrad, PlainGemm plain) {
  ctx.lastGemmEpilogue = false;
  if (sumA ? !transA : transB) {
    reportError(ctx, "gemmBiasGrad: the summed operand must be stored "
                     "[K, ...]");
    return;
  }
  if (!fitsBlasInt(ctx, "gemmBiasGrad", {m, n, k, lda, ldb, ldc}))
    return;
  if (k > 0 && m > 0 && n > 0 &&
      ltGemm(ctx, type, transA, transB, m, n, k, a, lda, b, ldb, c,
             CUDA_R_32F, ldc,
             sumA ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA,
             biasGrad))
    return;
  plain(0.0f);
  if (sumA)
    columnSums(ctx, a, k, m, lda, bf16, biasGrad);
  else
    columnSums(ctx, b, k, n, ldb, bf16, biasGrad);
}

} // namespace

void gemmBias(Context &ctx, bool transA, bool transB, int64_t m, int64_t n,
              int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, const float *bias, float *c, int64_t ldc) {
  biasGemm(ctx, CUDA_R_32F, transA, transB, m, n, k, a, lda, b, ldb, bias, c,
           ldc, [&](float beta) {
             gemm(ctx, transA, transB, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                  ldc);
           });
}

void gemm16Bias(Context &ctx, Storage16 storage, bool transA, bool transB,
                int64_t m, int64_t n, int64_t k, const uint16_t *a,
                int64_t lda, const uint16_t *b, int64_t ldb,
                const float *bias, float *c, int64_t ldc) {
  biasGemm(ctx, dataTypeOf(storage), transA, transB, m, n, k, a, lda, b, ldb,
           bias, c, ldc, [&](float beta) {
             gemm16(ctx, storage, transA, transB, m, n, k, 1.0f, a, lda, b,
                    ldb, beta, c, ldc);
           });
}

void gemm16Bias(Context &ctx, Storage16 storage, bool transA, bool transB,
                int64_t m, int64_t n, int64_t k, const uint16_t *a,
                int64_t lda, const uint16_t *b, int64_t ldb,
                const float *bias, uint16_t *c, int64_t ldc) {
  biasGemm(ctx, dataTypeOf(storage), transA, transB, m, n, k, a, lda, b, ldb,
           bias, c, ldc, [&](float beta) {
             gemm16(ctx, storage, transA, transB, m, n, k, 1.0f, a, lda, b,
                    ldb, beta, c, ldc);
           });
}

void gemmBiasGrad(Context &ctx, bool transA, bool transB, int64_t m,
                  int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb, float *c, int64_t ldc,
                  bool sumA, float *biasGrad) {
  biasGradGemm(ctx, CUDA_R_32F, false, transA, transB, m, n, k, a, lda, b,
               ldb, c, ldc, sumA, biasGrad, [&](float beta) {
                 gemm(ctx, transA, transB, m, n, k, 1.0f, a, lda, b, ldb,
                      beta, c, ldc);
               });
}

void gemm16BiasGrad(Context &ctx, Storage16 storage, bool transA,
                    bool transB, int64_t m, int64_t n, int64_t k,
                    const uint16_t *a, int64_t lda, const uint16_t *b,
                    int64_t ldb, float *c, int64_t ldc, bool sumA,
                    float *biasGrad) {
  biasGradGemm(ctx, dataTypeOf(storage), storage == Storage16::Bf16, transA,
               transB, m, n, k, a, lda, b, ldb, c, ldc, sumA, biasGrad,
               [&](float beta) {
                 gemm16(ctx, storage, transA, transB, m, n, k, 1.0f, a, lda,
                        b, ldb, beta, c, ldc);
               });
}

//===----------------------------------------------------------------------===//
// GELU epilogues
//===----------------------------------------------------------------------===//

namespace {

template <typename A, typename Y>
__global__ void geluEpilogueKernel(int64_t count, const A *acc, Y *y, Y *pre,
                                   bool bf16) {
  for (int64_t i = cuda::threadIndex(); i < count; i += cuda::threadCount()) {
    float x = storedToFloat(acc[i], bf16);
    float t = tanhf(geluTanhArgument(x));
    if (pre)
      storeFloat(pre + i, x, bf16);
    storeFloat(y + i, geluFromTanh(x, t), bf16);
  }
}

/// geluEpilogueKernel four elements a thread at a time (count a multiple
/// of 4, every pointer aligned to four of its elements): one 16-byte load
/// of float32 sums, 8-byte stores of 16-bit results.
template <typename A, typename Y>
__global__ void geluEpilogueVectorKernel(int64_t count, const A *acc, Y *y,
                                         Y *pre, bool bf16) {
  for (int64_t i = 4 * cuda::threadIndex(); i < count;
       i += 4 * cuda::threadCount()) {
    float x[4], out[4];
    cuda::loadValues<4>(acc + i, bf16, x);
    for (int e = 0; e < 4; ++e)
      out[e] = geluFromTanh(x[e], tanhf(geluTanhArgument(x[e])));
    if (pre)
      cuda::storeValues<4>(pre + i, bf16, x);
    cuda::storeValues<4>(y + i, bf16, out);
  }
}

/// Whether p is aligned to four of its elements.
template <typename T> bool alignedToFour(const T *p) {
  return reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T)) == 0;
}

template <typename A, typename P, typename Y>
__global__ void geluGradEpilogueKernel(int64_t count, const A *acc,
                                       const P *pre, Y *dx, bool bf16) {
  for (int64_t i = cuda::threadIndex(); i < count; i += cuda::threadCount()) {
    float x = storedToFloat(pre[i], bf16);
    float t = tanhf(geluTanhArgument(x));
    storeFloat(dx + i, storedToFloat(acc[i], bf16) * geluGradFromTanh(x, t),
               bf16);
  }
}

/// The float32 GEMM of a GELU epilogue without the epilogue (cuBLASLt
/// offered no algorithm): C = A op(B) (+ bias).
void plainGeluGemm(Context &ctx, bool transB, int64_t m, int64_t n, int64_t k,
                   StoredIn a, int64_t lda, StoredIn b, int64_t ldb,
                   const float *bias, StoredOut c) {
  auto *a32 = static_cast<const float *>(a.data),
       *b32 = static_cast<const float *>(b.data);
  auto *c32 = static_cast<float *>(c.data);
  if (bias)
    gemmBias(ctx, false, transB, m, n, k, a32, lda, b32, ldb, bias, c32, n);
  else
    gemm(ctx, false, transB, m, n, k, 1.0f, a32, lda, b32, ldb, 0.0f, c32, n);
}

/// Whether every tensor of a GELU epilogue is stored alike (cuBLASLt's
/// auxiliary matrix has D's type); reports the error otherwise.
bool storedAlike(Context &ctx, const char *what, bool low,
                 std::initializer_list<bool> others) {
  for (bool other : others) {
    if (other != low) {
      reportError(ctx, std::string(what) +
                           ": operands, result and the GELU input must be "
                           "stored alike");
      return false;
    }
  }
  return true;
}

/// cuBLASLt's auxiliary matrix needs a leading dimension divisible by 8;
/// the results here are dense, so N is it.
bool auxLdFits(int64_t n) { return n % 8 == 0; }

} // namespace

void geluEpilogue(Context &ctx, Storage16 storage, int64_t count, StoredIn acc,
                  StoredOut y, StoredOut pre) {
  if (count <= 0)
    return;
  bool bf16 = storage == Storage16::Bf16;
  withStoredIn(acc, [&](auto a) {
    withStoredOut(y, [&](auto out) {
      using Y = std::remove_pointer_t<decltype(out)>;
      Y *keep = static_cast<Y *>(pre.data);
      if (count % 4 == 0 && alignedToFour(a) && alignedToFour(out) &&
          (!keep || alignedToFour(keep)))
        geluEpilogueVectorKernel<<<cuda::gridFor(count / 4), cuda::kBlock, 0,
                                   ctx.stream>>>(count, a, out, keep, bf16);
      else
        geluEpilogueKernel<<<cuda::gridFor(count), cuda::kBlock, 0,
                             ctx.stream>>>(count, a, out, keep, bf16);
    });
  });
  checkLaunch(ctx, "geluEpilogueKernel");
}

void geluGradEpilogue(Context &ctx, Storage16 storage, int64_t count,
                      StoredIn acc, StoredIn pre, StoredOut dx) {
  if (count <= 0)
    return;
  bool bf16 = storage == Storage16::Bf16;
  withStoredIn(acc, [&](auto a) {
    withStoredIn(pre, [&](auto p) {
      withStoredOut(dx, [&](auto out) {
        geluGradEpilogueKernel<<<cuda::gridFor(count), cuda::kBlock, 0,
                                 ctx.stream>>>(count, a, p, out, bf16);
      });
    });
  });
  checkLaunch(ctx, "geluGradEpilogueKernel");
}

namespace {
/// `p` moved on by `elements` elements of its type.
StoredOut offsetRows(StoredOut p, int64_t elements) {
  if (p.low)
    return StoredOut(static_cast<uint16_t *>(p.data) + elements);
  return StoredOut(static_cast<float *>(p.data) + elements);
}

/// The 16-bit GELU GEMMs without cuBLASLt's GELU epilogues, rounding once
/// as those and the CPU do: the float32 sums (+ bias) of as many rows of C
/// at a time as the library workspace holds, then finish(first row, rows,
/// sums) on them. The rows go in chunks of equal size, a multiple of 8
/// where the workspace allows (no sliver of a GEMM at the end), so that a
/// chunk of sums (up to 28 MiB) mostly stays in L2 until the kernel
/// finishing it reads it. The bias is cuBLASLt's bias epilogue, which may
/// use the workspace's last eighth (the sums take the rest from its
/// start); where it offers no algorithm, the sums start as the bias and a
/// plain GEMM (cuBLAS's own workspace) adds onto them.
template <typename Finish>
void forEachSumsChunk(Context &ctx, Storage16 storage, bool transB, int64_t m,
                      int64_t n, int64_t k, StoredIn a, int64_t lda, StoredIn b,
                      int64_t ldb, const float *bias, Finish finish) {
  const size_t whole = ctx.ltWorkspace ? ctx.ltWorkspaceBytes : 0;
  const size_t forSums = bias ? (whole - whole / 8) / 256 * 256 : whole;
  const size_t reserve = whole - forSums;
  const int64_t rowsHeld = static_cast<int64_t>(forSums) / (4 * n);
  if (rowsHeld == 0) {
    reportError(ctx, "gemmGelu: the library workspace cannot hold a row of "
                     "float32 sums");
    return;
  }
  const int64_t chunks = (m + rowsHeld - 1) / rowsHeld;
  int64_t chunk = (m + chunks - 1) / chunks;
  if (chunk % 8 != 0 && chunk + 8 - chunk % 8 <= rowsHeld)
    chunk += 8 - chunk % 8;
  auto *sums = static_cast<float *>(ctx.ltWorkspace);
  void *ltOwn = static_cast<unsigned char *>(ctx.ltWorkspace) + forSums;
  auto *a16 = static_cast<const uint16_t *>(a.data);
  auto *b16 = static_cast<const uint16_t *>(b.data);
  for (int64_t first = 0; first < m; first += chunk) {
    const int64_t rows = std::min(chunk, m - first);
    const uint16_t *aRows = a16 + first * lda;
    if (!bias) {
      gemm16(ctx, storage, false, transB, rows, n, k, 1.0f, aRows, lda, b16,
             ldb, 0.0f, sums, n);
    } else if (!reserve || k == 0 ||
               !ltGemm(ctx, dataTypeOf(storage), false, transB, rows, n, k,
                       aRows, lda, b16, ldb, sums, CUDA_R_32F, n,
                       CUBLASLT_EPILOGUE_BIAS, bias, nullptr, 0, ltOwn,
                       reserve)) {
      broadcastRowsKernel<<<cuda::gridFor(rows * n), cuda::kBlock, 0,
                            ctx.stream>>>(rows, n, bias, sums, n, false);
      checkLaunch(ctx, "broadcastRowsKernel");
      gemm16(ctx, storage, false, transB, rows, n, k, 1.0f, aRows, lda, b16,
             ldb, 1.0f, sums, n);
    }
    finish(first, rows, sums);
  }
  ctx.lastGemmEpilogue = false;
}
} // namespace

// cuBLASLt's GELU epilogues only with ctx.ltGelu (--cublaslt-gelu):
// GELU_AUX_BIAS ran GPT-2 small's bf16 GEMMs before GELU at 122 TFLOP/s on
// an H200 (3.8 ms a step at batch 8 x 1024), where its other GEMMs on
// operands of the same sizes reached about 500. The GEMM with the bias
// epilogue alone and a GELU kernel of ours over its sums do the same work,
// the sums (float32) mostly read back from L2. The gradient's DGELU
// epilogue (387 TFLOP/s there) stays.
void gemmGelu(Context &ctx, Storage16 storage, bool transB, int64_t m,
              int64_t n, int64_t k, StoredIn a, int64_t lda, StoredIn b,
              int64_t ldb, const float *bias, StoredOut c, StoredOut pre) {
  ctx.lastGemmEpilogue = false;
  if (!storedAlike(ctx, "gemmGelu", c.low,
                   {a.low, b.low, pre.data ? pre.low : c.low}) ||
      !fitsBlasInt(ctx, "gemmGelu", {m, n, k, lda, ldb}) || m == 0 || n == 0)
    return;
  if (ctx.ltGelu && k > 0 && (!pre.data || auxLdFits(n))) {
    const cudaDataType_t type = a.low ? dataTypeOf(storage) : CUDA_R_32F;
    const cublasLtEpilogue_t epilogue =
        pre.data
            ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                    : CUBLASLT_EPILOGUE_GELU_AUX)
            : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    if (ltGemm(ctx, type, false, transB, m, n, k, a.data, lda, b.data, ldb,
               c.data, type, n, epilogue, bias, pre.data, n))
      return;
  }
  if (a.low) {
    forEachSumsChunk(ctx, storage, transB, m, n, k, a, lda, b, ldb, bias,
                     [&](int64_t first, int64_t rows, const float *sums) {
                       geluEpilogue(ctx, storage, rows * n, sums,
                                    offsetRows(c, first * n),
                                    pre.data ? offsetRows(pre, first * n)
                                             : StoredOut(nullptr));
                     });
    return;
  }
  // Float32: the sums go where they are kept (the GELU input), else to C,
  // and GELU is applied to them there.
  StoredOut sums = pre.data ? pre : c;
  plainGeluGemm(ctx, transB, m, n, k, a, lda, b, ldb, bias, sums);
  geluEpilogue(ctx, storage, m * n, static_cast<const float *>(sums.data), c,
               nullptr);
  ctx.lastGemmEpilogue = false;
}

void gemmGeluGrad(Context &ctx, Storage16 storage, bool transB, int64_t m,
                  int64_t n, int64_t k, StoredIn a, int64_t lda, StoredIn b,
                  int64_t ldb, StoredIn pre, StoredOut c) {
  ctx.lastGemmEpilogue = false;
  if (!storedAlike(ctx, "gemmGeluGrad", c.low, {a.low, b.low, pre.low}) ||
      !fitsBlasInt(ctx, "gemmGeluGrad", {m, n, k, lda, ldb}) || m == 0 ||
      n == 0)
    return;
  cudaDataType_t type = a.low ? dataTypeOf(storage) : CUDA_R_32F;
  if (k > 0 && auxLdFits(n) &&
      ltGemm(ctx, type, false, transB, m, n, k, a.data, lda, b.data, ldb,
             c.data, type, n, CUBLASLT_EPILOGUE_DGELU, nullptr, pre.data, n))
    return;
  if (a.low) {
    forEachSumsChunk(ctx, storage, transB, m, n, k, a, lda, b, ldb, nullptr,
                     [&](int64_t first, int64_t rows, const float *sums) {
                       geluGradEpilogue(
                           ctx, storage, rows * n, sums,
                           static_cast<const uint16_t *>(pre.data) + first * n,
                           offsetRows(c, first * n));
                     });
    return;
  }
  plainGeluGemm(ctx, transB, m, n, k, a, lda, b, ldb, nullptr, c);
  geluGradEpilogue(ctx, storage, m * n, static_cast<const float *>(c.data), pre,
                   c);
  ctx.lastGemmEpilogue = false;
}

} // namespace mtc::rt
