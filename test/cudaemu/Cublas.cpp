//===- Cublas.cpp - cuBLAS and cuBLASLt on the host -----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The cuBLAS and cuBLASLt entry points the CUDA runtime library calls
// (runtime/lib/cuda/Gemm.cu and Device.cu), with the signatures of the
// CUDA 13 headers, computed on the CPU so that the library links against
// this file instead of libcublas and libcublasLt. Device pointers are host
// pointers.
//
// Each call validates its arguments at once and returns the status cuBLAS
// documents for them; the arithmetic is enqueued on the call's stream (the
// handle's for cuBLAS, the argument for cublasLtMatmul), since the stream
// may be being captured into a graph. The enqueued work holds everything by
// value: alpha and beta are read at the call, as the default host pointer
// mode does, while the matrices are read when the work runs.
//
// Numerics: every element of A and B is widened to float (exact for the
// 16-bit formats) and each dot product is accumulated in double, in order
// of increasing k, then rounded to float. Products of two floats are exact
// in double, so the float sum is within a few ulps of the exact one
// whatever k is, and it does not depend on how the loops are tiled. The
// epilogue runs in float as a GPU's does: alpha * sum + beta * C (+ bias),
// then GELU or its derivative where the epilogue asks for them, then one
// round-to-nearest-even conversion to D's type. When beta is 0, C
// is not read (it may hold NaN), as cuBLAS documents; when alpha or k is 0,
// A and B are not read either, as in the reference BLAS. Every float32
// compute type (pedantic, and the fast TF32 / 16-bit ones, which only
// permit less precision) computes the same full-precision result.
//
//===----------------------------------------------------------------------===//

#include "Emulation.h"

#include "mtc/runtime/Half.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

/// A cuBLAS handle: the stream its calls run on (cublasSetStream) and the
/// workspace it was given (cublasSetWorkspace; cublasSetStream resets it
/// to the library's own pool, as cuBLAS does).
struct cublasContext {
  cudaStream_t stream = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
};

/// A cuBLASLt handle holds nothing: cublasLtMatmul takes its stream.
struct cublasLtContext {};

namespace {

using mtc::cudaemu::complain;
using mtc::cudaemu::enqueue;

//===----------------------------------------------------------------------===//
// Elements
//===----------------------------------------------------------------------===//

/// The element formats the emulation multiplies.
enum class Format { F32, F16, BF16 };

/// The format of `type`, or false when the emulation has none for it.
bool formatOf(cudaDataType_t type, Format &format) {
  switch (type) {
  case CUDA_R_32F:
    format = Format::F32;
    return true;
  case CUDA_R_16F:
    format = Format::F16;
    return true;
  case CUDA_R_16BF:
    format = Format::BF16;
    return true;
  default:
    return false;
  }
}

float load(const void *base, Format format, int64_t index) {
  switch (format) {
  case Format::F32:
    return static_cast<const float *>(base)[index];
  case Format::F16:
    return mtc::rt::halfToFloat(static_cast<const uint16_t *>(base)[index]);
  case Format::BF16:
    return mtc::rt::bf16ToFloat(static_cast<const uint16_t *>(base)[index]);
  }
  return 0.0f;
}

/// Stores `value` rounded to nearest even in `format`.
void store(void *base, Format format, int64_t index, float value) {
  switch (format) {
  case Format::F32:
    static_cast<float *>(base)[index] = value;
    return;
  case Format::F16:
    static_cast<uint16_t *>(base)[index] = mtc::rt::floatToHalf(value);
    return;
  case Format::BF16:
    static_cast<uint16_t *>(base)[index] = mtc::rt::floatToBf16(value);
    return;
  }
}

bool isTransposed(cublasOperation_t op) { return op != CUBLAS_OP_N; }

/// N, T and (for real types, the same as T) C; CONJG is a placeholder
/// that cuBLAS rejects.
bool validOperation(int op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

/// The float32 compute types; the emulation computes all of them in full
/// precision.
bool isFloatCompute(cublasComputeType_t type) {
  switch (type) {
  case CUBLAS_COMPUTE_32F:
  case CUBLAS_COMPUTE_32F_PEDANTIC:
  case CUBLAS_COMPUTE_32F_FAST_16F:
  case CUBLAS_COMPUTE_32F_FAST_16BF:
  case CUBLAS_COMPUTE_32F_FAST_TF32:
    return true;
  default:
    return false;
  }
}

/// The (A and B, C) type pairs of cuBLAS's table for a float32 compute
/// type: all float32, or 16-bit A and B with C float32 or of their type.
/// The fast compute types only take float32.
bool supportedTypes(cublasComputeType_t compute, cudaDataType_t abType,
                    cudaDataType_t cType) {
  if (!isFloatCompute(compute))
    return false;
  bool plain =
      compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  if (abType == CUDA_R_32F)
    return cType == CUDA_R_32F;
  if (!plain || (abType != CUDA_R_16F && abType != CUDA_R_16BF))
    return false;
  return cType == CUDA_R_32F || cType == abType;
}

//===----------------------------------------------------------------------===//
// The GEMM
//===----------------------------------------------------------------------===//

/// What an epilogue does with its vector besides D = alpha op(A) op(B) +
/// beta C, in cuBLASLt's column-major terms (cublasLt.h,
/// cublasLtEpilogue_t): CUBLASLT_EPILOGUE_BIAS (and GELU_BIAS,
/// GELU_AUX_BIAS) adds a vector as long as D has rows, broadcast over D's
/// columns, before any activation and before D is rounded;
/// CUBLASLT_EPILOGUE_BGRADA and BGRADB write the sums over the GEMM's k
/// dimension of op(A) (one per row of D) and of op(B) (one per column of
/// D), of the values as stored (not scaled by alpha), accumulated as the
/// dot products are.
enum class Extra {
  None,
  Bias,    // D[i, j] += vector[i]
  SumsOfA, // vector[i] = sum over l of op(A)[i, l]
  SumsOfB, // vector[j] = sum over l of op(B)[l, j]
};

/// The point-wise function an epilogue applies after the bias, on the
/// float value x (alpha op(A) op(B) + beta C, plus the bias if any).
/// CUBLASLT_EPILOGUE_GELU and GELU_BIAS store GELU(x) in D; GELU_AUX and
/// GELU_AUX_BIAS also store x, rounded to the auxiliary matrix's type, in
/// that matrix (D's shape, column-major, leading dimension
/// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), for the backward pass;
/// CUBLASLT_EPILOGUE_DGELU reads that matrix and stores x * GELU'(aux) in
/// D. GELU is the tanh approximation cuBLASLt computes (geluOf).
enum class Activation {
  None,
  Gelu,         // D = GELU(x), aux = x when the gemm has an aux matrix
  GeluGradient, // D = x * GELU'(aux)
};

/// A column-major matrix operand.
struct Operand {
  const void *data = nullptr;
  Format format = Format::F32;
  int64_t ld = 0;
  bool transposed = false;
};

/// One GEMM of a batch: D (m x n) = alpha op(A) op(B) + beta C, op(A) being
/// m x k and op(B) k x n, plus the epilogue's extra.
struct Gemm {
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  Operand a, b;
  const void *c = nullptr;
  int64_t ldc = 0;
  void *d = nullptr;
  int64_t ldd = 0;
  Format cFormat = Format::F32; // C's and D's
  Extra extra = Extra::None;
  void *vector = nullptr;
  Format vectorFormat = Format::F32;
  Activation activation = Activation::None;
  /// The epilogue has an auxiliary matrix (m x n), `aux`: the GELU writes
  /// it, the GELU gradient reads it.
  bool hasAux = false;
  void *aux = nullptr;
  int64_t ldAux = 0;
  Format auxFormat = Format::F32;
};

/// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of
/// GELU (Hendrycks and Gimpel), which cuBLASLt's GELU epilogues compute.
constexpr float kGeluScale = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;

/// GELU(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in float as
/// the GPU's epilogue computes it.
float geluOf(float x) {
  float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

/// The derivative of geluOf: (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi)
/// (1 + 3 0.044715 x^2), t as in geluOf.
float geluGradientOf(float x) {
  float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluScale *
                                 (1.0f + 3.0f * kGeluCubic * x * x);
}

/// The tile the inner loop computes: kRows rows of op(A) times kCols
/// columns of op(B), small enough for its 32 double accumulators to stay in
/// vector registers.
constexpr int64_t kRows = 8;
constexpr int64_t kCols = 4;

int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// Copies op(X) (rows x depth) into float panels of `width` rows, each
/// panel depth x width with its `width` values for one l contiguous.
/// Element (i, l) lands at (i / width) * depth * width + l * width +
/// i % width; the buffer holds `allocatedRows` (at least `rows`, a multiple
/// of `width`) rows, those past `rows` zero. The loop order reads X
/// contiguously.
std::vector<float> pack(const Operand &x, int64_t rows, int64_t depth,
                        int64_t width, int64_t allocatedRows) {
  std::vector<float> packed(allocatedRows * depth, 0.0f);
  auto at = [&](int64_t i, int64_t l) -> float & {
    return packed[(i / width) * depth * width + l * width + i % width];
  };
  if (x.transposed) {
    // op(X)[i, l] = X[l, i]: column i of X holds row i of op(X).
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t l = 0; l < depth; ++l)
        at(i, l) = load(x.data, x.format, l + i * x.ld);
  } else {
    for (int64_t l = 0; l < depth; ++l)
      for (int64_t i = 0; i < rows; ++i)
        at(i, l) = load(x.data, x.format, i + l * x.ld);
  }
  return packed;
}

/// acc[c][r] = sum over l < k of panel[l * kRows + r] * columns[c * k + l],
/// in double, l increasing.
void multiplyTile(const float *panel, const float *columns, int64_t k,
                  double (&acc)[kCols][kRows]) {
  for (auto &column : acc)
    std::fill(std::begin(column), std::end(column), 0.0);
  for (int64_t l = 0; l < k; ++l) {
    const float *a = panel + l * kRows;
    for (int64_t c = 0; c < kCols; ++c) {
      double b = columns[c * k + l];
      for (int64_t r = 0; r < kRows; ++r)
        acc[c][r] += static_cast<double>(a[r]) * b;
    }
  }
}

/// Runs one GEMM (the enqueued work of every entry point).
void runGemm(const Gemm &g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  const bool product = g.alpha != 0.0f && k > 0;
  // op(A) in panels of kRows rows; op(B) as columns of k contiguous values
  // (op(B)^T in panels of one row), padded to a multiple of kCols.
  std::vector<float> panels, columns;
  if (product || g.extra == Extra::SumsOfA)
    panels = pack(g.a, m, k, kRows, roundUp(m, kRows));
  if (product || g.extra == Extra::SumsOfB) {
    Operand bt = g.b;
    bt.transposed = !bt.transposed;
    columns = pack(bt, n, k, 1, roundUp(n, kCols));
  }

  if (g.extra == Extra::SumsOfA) {
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const float *panel = panels.data() + i0 * k;
      double sums[kRows] = {};
      for (int64_t l = 0; l < k; ++l)
        for (int64_t r = 0; r < kRows; ++r)
          sums[r] += panel[l * kRows + r];
      for (int64_t r = 0; r < kRows && i0 + r < m; ++r)
        store(g.vector, g.vectorFormat, i0 + r, static_cast<float>(sums[r]));
    }
  } else if (g.extra == Extra::SumsOfB) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l)
        sum += columns[j * k + l];
      store(g.vector, g.vectorFormat, j, static_cast<float>(sum));
    }
  }

  double acc[kCols][kRows] = {};
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int64_t rows = std::min(kRows, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kCols) {
      const int64_t cols = std::min(kCols, n - j0);
      if (product)
        multiplyTile(panels.data() + i0 * k, columns.data() + j0 * k, k, acc);
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t j = j0 + c;
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          float value =
              product ? g.alpha * static_cast<float>(acc[c][r]) : 0.0f;
          if (g.beta != 0.0f)
            value += g.beta * load(g.c, g.cFormat, i + j * g.ldc);
          if (g.extra == Extra::Bias)
            value += load(g.vector, g.vectorFormat, i);
          if (g.activation == Activation::Gelu) {
            if (g.hasAux)
              store(g.aux, g.auxFormat, i + j * g.ldAux, value);
            value = geluOf(value);
          } else if (g.activation == Activation::GeluGradient) {
            value *= geluGradientOf(load(g.aux, g.auxFormat, i + j * g.ldAux));
          }
          store(g.d, g.cFormat, i + j * g.ldd, value);
        }
      }
    }
  }
}

/// `p` advanced by `elements` elements of `format`. Null stays null: A and
/// B may be null when alpha is 0, C when beta is 0.
template <typename T> T *advance(T *p, int64_t elements, Format format) {
  if (!p)
    return p;
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<Byte *>(p) +
         elements * (format == Format::F32 ? 4 : 2);
}

/// Enqueues `batch` GEMMs, the i-th with A, B and C (and D) advanced by i
/// times their stride in elements. The vector and the auxiliary matrix are
/// cuBLASLt's, whose matmuls are never batched here: they stay put.
cublasStatus_t enqueueGemms(cudaStream_t stream, const Gemm &gemm,
                            int64_t batch, int64_t strideA, int64_t strideB,
                            int64_t strideC) {
  cudaError_t error = enqueue(stream, [=] {
    Gemm g = gemm;
    for (int64_t i = 0; i < batch; ++i) {
      g.a.data = advance(gemm.a.data, i * strideA, gemm.a.format);
      g.b.data = advance(gemm.b.data, i * strideB, gemm.b.format);
      g.c = advance(gemm.c, i * strideC, gemm.cFormat);
      g.d = advance(gemm.d, i * strideC, gemm.cFormat);
      runGemm(g);
    }
  });
  // A stream that is not one of the emulation's: the GEMM never ran.
  return error == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                              : CUBLAS_STATUS_EXECUTION_FAILED;
}

//===----------------------------------------------------------------------===//
// cuBLAS
//===----------------------------------------------------------------------===//

/// Which algorithm a GEMM runs makes no difference here, but one that the
/// enumeration does not name is refused.
bool knownAlgo(cublasGemmAlgo_t algo) {
  return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP &&
          algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) ||
         algo == CUBLAS_GEMM_AUTOTUNE;
}

/// Validates a (strided batched) cuBLAS GEMM as cuBLAS does and enqueues
/// it on the handle's stream. alpha and beta are float32 for every compute
/// type the emulation supports.
cublasStatus_t blasGemm(cublasHandle_t handle, cublasOperation_t transa,
                        cublasOperation_t transb, int m, int n, int k,
                        const void *alpha, const void *a, cudaDataType_t aType,
                        int lda, long long strideA, const void *b,
                        cudaDataType_t bType, int ldb, long long strideB,
                        const void *beta, void *c, cudaDataType_t cType,
                        int ldc, long long strideC, int batch,
                        cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !validOperation(transa) ||
      !validOperation(transb) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool transA = isTransposed(transa), transB = isTransposed(transb);
  if (lda < std::max(1, transA ? k : m) || ldb < std::max(1, transB ? n : k) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (aType != bType || !supportedTypes(compute, aType, cType) ||
      !knownAlgo(algo))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // Nothing to compute: cuBLAS returns without launching anything.
  if (m == 0 || n == 0 || batch == 0)
    return CUBLAS_STATUS_SUCCESS;

  Gemm gemm;
  gemm.m = m;
  gemm.n = n;
  gemm.k = k;
  gemm.alpha = *static_cast<const float *>(alpha);
  gemm.beta = *static_cast<const float *>(beta);
  gemm.a.data = a;
  gemm.a.ld = lda;
  gemm.a.transposed = transA;
  formatOf(aType, gemm.a.format);
  gemm.b.data = b;
  gemm.b.ld = ldb;
  gemm.b.transposed = transB;
  formatOf(bType, gemm.b.format);
  gemm.c = c;
  gemm.ldc = ldc;
  gemm.d = c;
  gemm.ldd = ldc;
  formatOf(cType, gemm.cFormat);
  if (!c || (gemm.alpha != 0.0f && k > 0 && (!a || !b))) {
    complain("cuBLAS GEMM: a null matrix pointer");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return enqueueGemms(handle->stream, gemm, batch, strideA, strideB, strideC);
}

//===----------------------------------------------------------------------===//
// cuBLASLt descriptors
//===----------------------------------------------------------------------===//

/// The header gives each descriptor a fixed-size opaque storage (so that
/// callers may also allocate it themselves); the emulation's fields live
/// inside that storage.
template <typename Fields, typename Opaque> Fields &fieldsOf(Opaque *opaque) {
  static_assert(sizeof(Fields) <= sizeof(Opaque::data) &&
                    alignof(Fields) <= alignof(Opaque),
                "the fields must fit the header's opaque storage");
  return *std::launder(reinterpret_cast<Fields *>(opaque->data));
}

template <typename Opaque, typename Fields>
cublasStatus_t createOpaque(Opaque **result, const Fields &fields) {
  static_assert(std::is_trivially_destructible_v<Fields>,
                "the storage is freed without destroying the fields");
  if (!result)
    return CUBLAS_STATUS_INVALID_VALUE;
  *result = new (std::nothrow) Opaque();
  if (!*result)
    return CUBLAS_STATUS_ALLOC_FAILED;
  new ((*result)->data) Fields(fields);
  return CUBLAS_STATUS_SUCCESS;
}

/// A matmul descriptor's attributes (the defaults are the header's).
struct MatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int32_t scaleType = CUDA_R_32F;
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N, transC = CUBLAS_OP_N;
  int32_t fillMode = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void *bias = nullptr;
  int32_t biasType = -1; // D's type
  void *aux = nullptr;
  int64_t auxLd = 0;
  int32_t auxType = -1; // D's type
  /// An attribute was set that the emulation does not model (scaling
  /// factors, amax outputs, ...): no algorithm is offered.
  bool unmodelled = false;
};

/// A column-major matrix layout: CUBLASLT_MATRIX_LAYOUT_ORDER and the batch
/// attributes keep their defaults (the emulation has no
/// cublasLtMatrixLayoutSetAttribute).
struct MatrixLayout {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

/// Indices of the byte alignments an algorithm may assume: the
/// preference's for A, B, C and D, and the bias and auxiliary pointers'.
enum { kAlignA, kAlignB, kAlignC, kAlignD, kAlignBias, kAlignAux, kAlignCount };

struct Preference {
  uint32_t searchMode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t maxWorkspace = 0;
  uint32_t alignment[kAlignD + 1] = {256, 256, 256, 256};
};

/// What the heuristic's algorithm records: the alignments it may assume
/// (the preference's for the matrices, the bias and auxiliary pointers'
/// at the heuristic, which the header says the heuristic looks at).
struct AlgoFields {
  uint64_t tag = 0;
  uint32_t alignment[kAlignCount] = {};
};
constexpr uint64_t kAlgoTag = 0x6d74632d656d75ull; // "mtc-emu"
static_assert(sizeof(AlgoFields) <= sizeof(cublasLtMatmulAlgo_t::data),
              "the algorithm must fit the header's storage");

/// Copies an attribute of exactly `sizeof(T)` bytes, as the setters of
/// cuBLASLt require.
template <typename T>
bool readAttribute(const void *buf, size_t size, T &value) {
  if (!buf || size != sizeof(T))
    return false;
  std::memcpy(&value, buf, sizeof(T));
  return true;
}

/// The largest power of two up to 256 that divides the address (256 for
/// null, which the heuristic treats as fully aligned).
uint32_t alignmentOf(const void *p) {
  uint32_t bytes = 256;
  while (bytes > 1 && reinterpret_cast<uintptr_t>(p) % bytes != 0)
    bytes /= 2;
  return bytes;
}

/// The checks cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul share;
/// fills in `gemm`'s shape, types and epilogue on success.
cublasStatus_t checkMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                           cublasLtMatrixLayout_t aDesc,
                           cublasLtMatrixLayout_t bDesc,
                           cublasLtMatrixLayout_t cDesc,
                           cublasLtMatrixLayout_t dDesc, Gemm &gemm) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !aDesc || !bDesc || !cDesc || !dDesc)
    return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc &op = fieldsOf<MatmulDesc>(desc);
  const MatrixLayout &la = fieldsOf<MatrixLayout>(aDesc),
                     &lb = fieldsOf<MatrixLayout>(bDesc),
                     &lc = fieldsOf<MatrixLayout>(cDesc),
                     &ld = fieldsOf<MatrixLayout>(dDesc);
  if (!validOperation(op.transA) || !validOperation(op.transB))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const MatrixLayout *l : {&la, &lb, &lc, &ld}) {
    // Sizes past 2^62 are no matrix anyone can store.
    if (l->rows > (uint64_t(1) << 62) || l->cols > (uint64_t(1) << 62) ||
        l->ld < std::max<int64_t>(1, static_cast<int64_t>(l->rows)))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool transA = isTransposed(cublasOperation_t(op.transA)),
             transB = isTransposed(cublasOperation_t(op.transB));
  const int64_t m = static_cast<int64_t>(transA ? la.cols : la.rows),
                k = static_cast<int64_t>(transA ? la.rows : la.cols),
                n = static_cast<int64_t>(ld.cols);
  if (static_cast<int64_t>(ld.rows) != m ||
      static_cast<int64_t>(transB ? lb.cols : lb.rows) != k ||
      static_cast<int64_t>(transB ? lb.rows : lb.cols) != n ||
      lc.rows != ld.rows || lc.cols != ld.cols)
    return CUBLAS_STATUS_INVALID_VALUE;

  if (op.unmodelled || op.scaleType != CUDA_R_32F ||
      op.pointerMode != CUBLASLT_POINTER_MODE_HOST ||
      op.transC != CUBLAS_OP_N || op.fillMode != CUBLAS_FILL_MODE_FULL ||
      la.type != lb.type || lc.type != ld.type ||
      !supportedTypes(op.compute, la.type, ld.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  switch (op.epilogue) {
  case CUBLASLT_EPILOGUE_DEFAULT:
    gemm.extra = Extra::None;
    break;
  case CUBLASLT_EPILOGUE_BIAS:
    gemm.extra = Extra::Bias;
    break;
  case CUBLASLT_EPILOGUE_BGRADA:
    gemm.extra = Extra::SumsOfA;
    break;
  case CUBLASLT_EPILOGUE_BGRADB:
    gemm.extra = Extra::SumsOfB;
    break;
  case CUBLASLT_EPILOGUE_GELU:
  case CUBLASLT_EPILOGUE_GELU_BIAS:
  case CUBLASLT_EPILOGUE_GELU_AUX:
  case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    gemm.extra = op.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                         op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                     ? Extra::Bias
                     : Extra::None;
    gemm.activation = Activation::Gelu;
    gemm.hasAux = op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                  op.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    break;
  case CUBLASLT_EPILOGUE_DGELU:
    gemm.extra = Extra::None;
    gemm.activation = Activation::GeluGradient;
    gemm.hasAux = true;
    break;
  default:
    // DGELU_BGRAD and the ReLU family among them.
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // The bias (gradient) is D's type by default; float32 is also taken
  // with a 16-bit D.
  cudaDataType_t biasType =
      op.biasType == -1 ? ld.type : cudaDataType_t(op.biasType);
  if (gemm.extra != Extra::None && biasType != ld.type &&
      biasType != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The auxiliary matrix's leading dimension must be set, at least D's
  // rows and a multiple of 8 (cublasLt.h, EPILOGUE_AUX_LD; 0, the default,
  // is refused even for an empty D). Its type is D's: the header's
  // exceptions are for fp8 outputs, which the emulation has none of, and
  // it says another type is CUBLAS_STATUS_INVALID_VALUE. Both are checked
  // by the heuristic too, as the layouts are: no algorithm fits them. The
  // pointer, which the heuristic does not dereference, is only required
  // by cublasLtMatmul, as the bias's is.
  cudaDataType_t auxType =
      op.auxType == -1 ? ld.type : cudaDataType_t(op.auxType);
  if (gemm.hasAux &&
      (op.auxLd <= 0 || op.auxLd % 8 != 0 ||
       op.auxLd < static_cast<int64_t>(ld.rows) || auxType != ld.type))
    return CUBLAS_STATUS_INVALID_VALUE;

  gemm.m = m;
  gemm.n = n;
  gemm.k = k;
  formatOf(la.type, gemm.a.format);
  gemm.a.ld = la.ld;
  gemm.a.transposed = transA;
  formatOf(lb.type, gemm.b.format);
  gemm.b.ld = lb.ld;
  gemm.b.transposed = transB;
  formatOf(ld.type, gemm.cFormat);
  gemm.ldc = lc.ld;
  gemm.ldd = ld.ld;
  gemm.vector = op.bias;
  formatOf(biasType, gemm.vectorFormat);
  if (gemm.hasAux) {
    gemm.aux = op.aux;
    gemm.ldAux = op.auxLd;
    formatOf(auxType, gemm.auxFormat);
  }
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

//===----------------------------------------------------------------------===//
// cuBLAS entry points
//===----------------------------------------------------------------------===//

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext();
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle,
                                               cudaStream_t streamId) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  handle->workspace = nullptr;
  handle->workspaceBytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

/// The workspace must be aligned to 256 bytes (cuBLAS's documentation of
/// cublasSetWorkspace); the emulated GEMMs need none of it.
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle,
                                                  void *workspace,
                                                  size_t workspaceSizeInBytes) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspaceSizeInBytes > 0 &&
      (!workspace || reinterpret_cast<uintptr_t>(workspace) % 256 != 0)) {
    complain("cublasSetWorkspace: the workspace must be a non-null pointer "
             "aligned to 256 bytes");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->workspace = workspace;
  handle->workspaceBytes = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "the operation completed successfully";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid numeric value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "an error was detected when checking the current licensing";
  }
  return "unknown error";
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const float *alpha, const float *A, int lda,
    const float *B, int ldb, const float *beta, float *C, int ldc) {
  return blasGemm(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, 0,
                  B, CUDA_R_32F, ldb, 0, beta, C, CUDA_R_32F, ldc, 0, 1,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const float *alpha, const float *A, int lda,
    long long int strideA, const float *B, int ldb, long long int strideB,
    const float *beta, float *C, int ldc, long long int strideC,
    int batchCount) {
  return blasGemm(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda,
                  strideA, B, CUDA_R_32F, ldb, strideB, beta, C, CUDA_R_32F,
                  ldc, strideC, batchCount, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
    void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo) {
  return blasGemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                  Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
    long long int strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return blasGemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                  strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC,
                  batchCount, computeType, algo);
}

//===----------------------------------------------------------------------===//
// cuBLASLt entry points
//===----------------------------------------------------------------------===//

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle)
    return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new (std::nothrow) cublasLtContext();
  return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(
    cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
    cudaDataType_t scaleType) {
  MatmulDesc fields;
  fields.compute = computeType;
  fields.scaleType = scaleType;
  return createOpaque(matmulDesc, fields);
}

cublasStatus_t CUBLASWINAPI
cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
    const void *buf, size_t sizeInBytes) {
  if (!matmulDesc)
    return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc &desc = fieldsOf<MatmulDesc>(matmulDesc);
  bool ok = false;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: {
    int32_t value;
    ok = readAttribute(buf, sizeInBytes, value);
    if (ok)
      desc.compute = cublasComputeType_t(value);
    break;
  }
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    ok = readAttribute(buf, sizeInBytes, desc.scaleType);
    break;
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    ok = readAttribute(buf, sizeInBytes, desc.pointerMode);
    break;
  case CUBLASLT_MATMUL_DESC_TRANSA:
    ok = readAttribute(buf, sizeInBytes, desc.transA);
    break;
  case CUBLASLT_MATMUL_DESC_TRANSB:
    ok = readAttribute(buf, sizeInBytes, desc.transB);
    break;
  case CUBLASLT_MATMUL_DESC_TRANSC:
    ok = readAttribute(buf, sizeInBytes, desc.transC);
    break;
  case CUBLASLT_MATMUL_DESC_FILL_MODE:
    ok = readAttribute(buf, sizeInBytes, desc.fillMode);
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    ok = readAttribute(buf, sizeInBytes, desc.epilogue);
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    ok = readAttribute(buf, sizeInBytes, desc.bias);
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    ok = readAttribute(buf, sizeInBytes, desc.biasType);
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: {
    // Meaningless without batches, which the layouts never have here.
    int64_t stride;
    ok = readAttribute(buf, sizeInBytes, stride);
    break;
  }
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    ok = readAttribute(buf, sizeInBytes, desc.aux);
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    ok = readAttribute(buf, sizeInBytes, desc.auxLd);
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
    ok = readAttribute(buf, sizeInBytes, desc.auxType);
    break;
  default:
    ok = buf && sizeInBytes > 0;
    desc.unmodelled = desc.unmodelled || ok;
    break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t CUBLASWINAPI
cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                           uint64_t rows, uint64_t cols, int64_t ld) {
  MatrixLayout fields;
  fields.type = type;
  fields.rows = rows;
  fields.cols = cols;
  fields.ld = ld;
  return createOpaque(matLayout, fields);
}

cublasStatus_t CUBLASWINAPI
cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  return createOpaque(pref, Preference());
}

cublasStatus_t CUBLASWINAPI
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
    const void *buf, size_t sizeInBytes) {
  if (!pref)
    return CUBLAS_STATUS_INVALID_VALUE;
  Preference &p = fieldsOf<Preference>(pref);
  bool ok = false;
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
    ok = readAttribute(buf, sizeInBytes, p.searchMode);
    break;
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    ok = readAttribute(buf, sizeInBytes, p.maxWorkspace);
    break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    ok = readAttribute(buf, sizeInBytes, p.alignment[kAlignA]);
    break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    ok = readAttribute(buf, sizeInBytes, p.alignment[kAlignB]);
    break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    ok = readAttribute(buf, sizeInBytes, p.alignment[kAlignC]);
    break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    ok = readAttribute(buf, sizeInBytes, p.alignment[kAlignD]);
    break;
  // Filters the one algorithm here always passes: it uses no workspace, no
  // split-k reduction, and plain float arithmetic.
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: {
    uint32_t mask;
    ok = readAttribute(buf, sizeInBytes, mask);
    break;
  }
  case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: {
    float waves;
    ok = readAttribute(buf, sizeInBytes, waves);
    break;
  }
  case CUBLASLT_MATMUL_PREF_IMPL_MASK: {
    uint64_t mask;
    ok = readAttribute(buf, sizeInBytes, mask);
    break;
  }
  default:
    break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount) {
  if (!lightHandle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount ||
      !preference)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  Gemm gemm;
  cublasStatus_t status =
      checkMatmul(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, gemm);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  // MTC_CUDAEMU_LT_EPILOGUES=0 offers no algorithm for an epilogue, as a
  // cuBLASLt may, so that the runtime's fallback (a plain GEMM and its own
  // bias kernels) runs.
  static const bool noEpilogues = [] {
    const char *v = std::getenv("MTC_CUDAEMU_LT_EPILOGUES");
    return v && std::string(v) == "0";
  }();
  if (noEpilogues &&
      fieldsOf<MatmulDesc>(operationDesc).epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const Preference &pref = fieldsOf<Preference>(preference);
  if (pref.searchMode != CUBLASLT_SEARCH_BEST_FIT)
    return CUBLAS_STATUS_NOT_SUPPORTED;

  AlgoFields fields;
  fields.tag = kAlgoTag;
  std::copy(std::begin(pref.alignment), std::end(pref.alignment),
            fields.alignment);
  fields.alignment[kAlignBias] =
      alignmentOf(fieldsOf<MatmulDesc>(operationDesc).bias);
  fields.alignment[kAlignAux] =
      alignmentOf(fieldsOf<MatmulDesc>(operationDesc).aux);
  cublasLtMatmulHeuristicResult_t &result = heuristicResultsArray[0];
  result = cublasLtMatmulHeuristicResult_t();
  std::memcpy(result.algo.data, &fields, sizeof(fields));
  result.workspaceSize = 0;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI
cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
               const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
               const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
               const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
               cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
               void * /*workspace: the algorithm needs none*/,
               size_t /*workspaceSizeInBytes*/, cudaStream_t stream) {
  Gemm gemm;
  cublasStatus_t status =
      checkMatmul(lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, gemm);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  if (!alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  gemm.alpha = *static_cast<const float *>(alpha);
  gemm.beta = *static_cast<const float *>(beta);
  gemm.a.data = A;
  gemm.b.data = B;
  gemm.c = C;
  gemm.d = D;
  // In place, C and D are one matrix and must be described alike.
  if (C == D && gemm.ldc != gemm.ldd)
    return CUBLAS_STATUS_INVALID_VALUE;

  const bool empty = gemm.m == 0 || gemm.n == 0;
  const bool readsAB = gemm.alpha != 0.0f && gemm.k > 0;
  if ((!empty &&
       (!D || (gemm.beta != 0.0f && !C) || (readsAB && (!A || !B)))) ||
      (gemm.extra != Extra::None && !gemm.vector) ||
      (gemm.hasAux && !gemm.aux)) {
    complain("cublasLtMatmul: a null matrix, bias or auxiliary pointer");
    return CUBLAS_STATUS_INVALID_VALUE;
  }

  if (algo) {
    AlgoFields fields;
    std::memcpy(&fields, algo->data, sizeof(fields));
    if (fields.tag != kAlgoTag)
      return CUBLAS_STATUS_INVALID_VALUE;
    // The algorithm may assume the alignments the heuristic was given. A
    // GPU kernel needs at most 16 bytes (one vector access), so that much
    // is checked: a pointer less aligned than promised is a bug that only
    // some algorithms, on some GPUs, would show.
    const void *pointers[kAlignCount] = {A, B, C, D, gemm.vector, gemm.aux};
    for (int i = 0; i < kAlignCount; ++i) {
      if (!pointers[i] || (i == kAlignC && gemm.beta == 0.0f) ||
          (i == kAlignBias && gemm.extra == Extra::None))
        continue;
      if (alignmentOf(pointers[i]) <
          std::min<uint32_t>(fields.alignment[i], 16)) {
        complain("cublasLtMatmul: a pointer is less aligned than the "
                 "heuristic that chose the algorithm was told");
        return CUBLAS_STATUS_INVALID_VALUE;
      }
    }
  }
  return enqueueGemms(stream, gemm, 1, 0, 0, 0);
}
