//===- CublasTest.cpp - The host cuBLAS and cuBLASLt against references ---===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Checks Cublas.cpp against plain double-precision GEMMs written here, on
// random column-major matrices whose leading dimensions leave padding that
// must stay untouched. 16-bit values are made and read with CUDA's own
// conversions (cuda_bf16.h, cuda_fp16.h), so the references share no code
// with the emulation. Tolerances: a float32 result within 1e-5 of the scale
// of its terms (|alpha| sum |a b| + |beta c| + |bias|), a 16-bit one within
// half an ulp of its format more; the GELU epilogues' scales grow by what
// GELU and its derivative can make of that error.
//
// Links with CublasTestSupport.cpp, whose streams run work at once.
//
//===----------------------------------------------------------------------===//

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace mtc::cudaemu::testsupport {
extern cudaStream_t lastStream;
extern int enqueued;
extern int complaints;
extern bool deferWork;
extern std::vector<std::function<void()>> deferred;
} // namespace mtc::cudaemu::testsupport

namespace {

namespace support = mtc::cudaemu::testsupport;

constexpr double kRelTol = 1e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
/// What padding between columns holds; it must come back unchanged.
constexpr float kSentinel = -1536.0f; // exact in every format

//===----------------------------------------------------------------------===//
// Storage formats, through CUDA's conversions
//===----------------------------------------------------------------------===//

enum class Fmt { F32, F16, BF16 };

cudaDataType_t typeOf(Fmt f) {
  return f == Fmt::F32 ? CUDA_R_32F : f == Fmt::F16 ? CUDA_R_16F : CUDA_R_16BF;
}

size_t bytesOf(Fmt f) { return f == Fmt::F32 ? 4 : 2; }

const char *nameOf(Fmt f) {
  return f == Fmt::F32 ? "f32" : f == Fmt::F16 ? "f16" : "bf16";
}

/// Half an ulp of `x` in `f` (0 for float32, whose results are checked by
/// the relative tolerance alone).
double halfUlp(Fmt f, double x) {
  if (f == Fmt::F32)
    return 0.0;
  int exponent;
  std::frexp(std::fabs(x), &exponent); // |x| = m 2^exponent, m in [0.5, 1)
  // 8 significant bits for bfloat16, 11 for float16 (whose subnormals are
  // spaced 2^-24).
  int bits = f == Fmt::BF16 ? 8 : 11;
  int lowest = f == Fmt::BF16 ? -133 : -24;
  return std::ldexp(1.0, std::max(exponent - bits, lowest) - 1);
}

/// A column-major matrix of `rows` x `cols` stored with leading dimension
/// `ld`, in format `fmt`; padding rows hold kSentinel.
struct Matrix {
  Fmt fmt = Fmt::F32;
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<uint8_t> bytes;

  Matrix(Fmt fmt, int64_t rows, int64_t cols, int64_t ld)
      : fmt(fmt), rows(rows), cols(cols), ld(ld),
        bytes(bytesOf(fmt) *
              static_cast<size_t>(ld * std::max<int64_t>(cols, 1))) {
    for (int64_t i = 0; i < ld * std::max<int64_t>(cols, 1); ++i)
      setRaw(i, kSentinel);
  }

  void *data() { return bytes.data(); }

  /// Stores `v` rounded to the format (round to nearest even).
  void setRaw(int64_t index, float v) {
    uint8_t *p = bytes.data() + index * bytesOf(fmt);
    if (fmt == Fmt::F32) {
      std::memcpy(p, &v, 4);
    } else if (fmt == Fmt::F16) {
      __half_raw raw = __half(__float2half_rn(v));
      std::memcpy(p, &raw.x, 2);
    } else {
      __nv_bfloat16_raw raw = __float2bfloat16_rn(v);
      std::memcpy(p, &raw.x, 2);
    }
  }

  float getRaw(int64_t index) const {
    const uint8_t *p = bytes.data() + index * bytesOf(fmt);
    if (fmt == Fmt::F32) {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    if (fmt == Fmt::F16) {
      __half_raw raw;
      std::memcpy(&raw.x, p, 2);
      return __half2float(__half(raw));
    }
    __nv_bfloat16_raw raw;
    std::memcpy(&raw.x, p, 2);
    return __bfloat162float(__nv_bfloat16(raw));
  }

  void set(int64_t i, int64_t j, float v) { setRaw(i + j * ld, v); }
  double at(int64_t i, int64_t j) const { return getRaw(i + j * ld); }

  void fillRandom(std::mt19937 &rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < rows; ++i)
        set(i, j, dist(rng));
  }

  void fill(float v) {
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < rows; ++i)
        set(i, j, v);
  }
};

/// Element (i, l) of op(X).
double opAt(const Matrix &x, bool trans, int64_t i, int64_t l) {
  return trans ? x.at(l, i) : x.at(i, l);
}

/// The expected D of alpha op(A) op(B) + beta C (+ bias[i]), and the scale
/// of each element's terms.
struct Reference {
  std::vector<double> value, scale;
};

Reference reference(int64_t m, int64_t n, int64_t k, double alpha,
                    const Matrix &a, bool transA, const Matrix &b, bool transB,
                    double beta, const Matrix &c,
                    const std::vector<double> &bias = {}) {
  Reference ref;
  ref.value.assign(m * n, 0.0);
  ref.scale.assign(m * n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        double p = opAt(a, transA, i, l) * opAt(b, transB, l, j);
        sum += p;
        magnitude += std::fabs(p);
      }
      double v = alpha * sum, s = std::fabs(alpha) * magnitude;
      if (beta != 0.0) {
        v += beta * c.at(i, j);
        s += std::fabs(beta * c.at(i, j));
      }
      if (!bias.empty()) {
        v += bias[i];
        s += std::fabs(bias[i]);
      }
      ref.value[i + j * m] = v;
      ref.scale[i + j * m] = s;
    }
  }
  return ref;
}

/// Checks D against the reference, and that D's padding is untouched.
void expectMatches(const Matrix &d, const Reference &ref,
                   const std::string &what) {
  int failures = 0;
  for (int64_t j = 0; j < d.cols; ++j) {
    for (int64_t i = 0; i < d.ld; ++i) {
      double got = d.getRaw(i + j * d.ld);
      if (i >= d.rows) {
        EXPECT_EQ(got, kSentinel)
            << what << ": padding (" << i << ", " << j << ") was written";
        continue;
      }
      double want = ref.value[i + j * d.rows];
      // The float result is within kRelTol * scale of `want`; rounding it
      // to 16 bits adds half an ulp at its magnitude.
      double floatError = kRelTol * ref.scale[i + j * d.rows];
      double tol =
          floatError + halfUlp(d.fmt, std::fabs(want) + floatError) + 1e-30;
      if (!(std::fabs(got - want) <= tol) && ++failures <= 5)
        ADD_FAILURE() << what << ": D(" << i << ", " << j << ") = " << got
                      << ", want " << want << " +- " << tol;
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

/// The rows and columns of X for op(X) to be rows x cols.
Matrix operand(Fmt fmt, bool trans, int64_t rows, int64_t cols, int64_t pad,
               std::mt19937 &rng) {
  int64_t r = trans ? cols : rows, c = trans ? rows : cols;
  Matrix x(fmt, r, c, r + pad);
  x.fillRandom(rng);
  return x;
}

class Cublas : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
    support::deferWork = false;
    support::deferred.clear();
  }
  void TearDown() override {
    EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
  }
  cublasHandle_t handle = nullptr;
  std::mt19937 rng{20240611};
};

//===----------------------------------------------------------------------===//
// cuBLAS
//===----------------------------------------------------------------------===//

struct Shape {
  int m, n, k;
};
const Shape kShapes[] = {
    {37, 29, 53}, {3, 2, 5}, {8, 4, 1}, {1, 17, 64}, {70, 1, 9}};

TEST_F(Cublas, SgemmEveryTransposeMatchesReference) {
  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
  for (const Shape &s : kShapes) {
    for (cublasOperation_t opA : ops) {
      for (cublasOperation_t opB : ops) {
        bool ta = opA != CUBLAS_OP_N, tb = opB != CUBLAS_OP_N;
        Matrix a = operand(Fmt::F32, ta, s.m, s.k, 3, rng);
        Matrix b = operand(Fmt::F32, tb, s.k, s.n, 5, rng);
        Matrix c(Fmt::F32, s.m, s.n, s.m + 2);
        c.fillRandom(rng);
        float alpha = 1.25f, beta = -0.75f;
        Reference ref = reference(s.m, s.n, s.k, alpha, a, ta, b, tb, beta, c);
        ASSERT_EQ(cublasSgemm(handle, opA, opB, s.m, s.n, s.k, &alpha,
                              static_cast<float *>(a.data()), a.ld,
                              static_cast<float *>(b.data()), b.ld, &beta,
                              static_cast<float *>(c.data()), c.ld),
                  CUBLAS_STATUS_SUCCESS);
        expectMatches(c, ref,
                      "Sgemm " + std::to_string(opA) + std::to_string(opB) +
                          " " + std::to_string(s.m) + "x" +
                          std::to_string(s.n) + "x" + std::to_string(s.k));
      }
    }
  }
}

// cublasSetWorkspace takes a buffer aligned to 256 bytes (or none) and
// refuses another.
TEST_F(Cublas, SetWorkspaceNeeds256ByteAlignment) {
  alignas(256) static unsigned char buffer[1024];
  EXPECT_EQ(cublasSetWorkspace(handle, buffer, sizeof(buffer)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetWorkspace(handle, buffer + 128, 512),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSetWorkspace(handle, nullptr, 0), CUBLAS_STATUS_SUCCESS);
}

TEST_F(Cublas, SgemmBetaZeroDoesNotReadC) {
  for (bool ta : {false, true}) {
    Matrix a = operand(Fmt::F32, ta, 21, 13, 1, rng);
    Matrix b = operand(Fmt::F32, true, 13, 11, 2, rng);
    Matrix c(Fmt::F32, 21, 11, 24);
    c.fill(kNaN);
    float alpha = -0.5f, beta = 0.0f;
    Reference ref = reference(21, 11, 13, alpha, a, ta, b, true, 0.0, c);
    ASSERT_EQ(cublasSgemm(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_T,
                          21, 11, 13, &alpha, static_cast<float *>(a.data()),
                          a.ld, static_cast<float *>(b.data()), b.ld, &beta,
                          static_cast<float *>(c.data()), c.ld),
              CUBLAS_STATUS_SUCCESS);
    expectMatches(c, ref, "Sgemm with beta 0 over NaN");
  }
}

TEST_F(Cublas, SgemmWithoutProductScalesC) {
  // k == 0, and alpha == 0 over NaN operands: C = beta C, A and B unread.
  Matrix a(Fmt::F32, 6, 4, 6), b(Fmt::F32, 4, 5, 4);
  a.fill(kNaN);
  b.fill(kNaN);
  Matrix c(Fmt::F32, 6, 5, 7);
  c.fillRandom(rng);
  Reference ref = reference(6, 5, 0, 0.0, a, false, b, false, 2.0, c);
  float alpha = 3.0f, beta = 2.0f;
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 0, &alpha,
                        static_cast<float *>(a.data()), a.ld,
                        static_cast<float *>(b.data()), b.ld, &beta,
                        static_cast<float *>(c.data()), c.ld),
            CUBLAS_STATUS_SUCCESS);
  expectMatches(c, ref, "Sgemm with k 0");
  alpha = 0.0f;
  ref = reference(6, 5, 0, 0.0, a, false, b, false, 2.0, c);
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 4, &alpha,
                        static_cast<float *>(a.data()), a.ld,
                        static_cast<float *>(b.data()), b.ld, &beta,
                        static_cast<float *>(c.data()), c.ld),
            CUBLAS_STATUS_SUCCESS);
  expectMatches(c, ref, "Sgemm with alpha 0");
}

/// `batch` matrices of one shape at `stride` elements from each other (0:
/// one matrix for all), in one buffer.
struct Batch {
  std::vector<Matrix> items;
  std::vector<uint8_t> bytes;
  int64_t stride;

  Batch(std::vector<Matrix> matrices, int64_t stride)
      : items(std::move(matrices)), stride(stride) {
    const Matrix &first = items.front();
    size_t size = first.bytes.size();
    bytes.assign(size + stride * bytesOf(first.fmt) * (items.size() - 1), 0);
    for (size_t i = 0; i < items.size(); ++i)
      std::memcpy(bytes.data() + i * stride * bytesOf(first.fmt),
                  items[i].bytes.data(), size);
  }
  /// Reads the matrices back after a GEMM wrote them.
  void readBack() {
    for (size_t i = 0; i < items.size(); ++i)
      std::memcpy(items[i].bytes.data(),
                  bytes.data() + i * stride * bytesOf(items[i].fmt),
                  items[i].bytes.size());
  }
};

TEST_F(Cublas, SgemmStridedBatchedMatchesReference) {
  const int m = 19, n = 14, k = 23, count = 3;
  for (bool broadcastA : {false, true}) {
    std::vector<Matrix> as, bs, cs;
    for (int i = 0; i < count; ++i) {
      as.push_back(broadcastA && i > 0 ? as.front()
                                       : operand(Fmt::F32, true, m, k, 2, rng));
      bs.push_back(operand(Fmt::F32, false, k, n, 1, rng));
      Matrix c(Fmt::F32, m, n, m + 3);
      c.fillRandom(rng);
      cs.push_back(c);
    }
    const int64_t sizeA = as[0].ld * as[0].cols, sizeB = bs[0].ld * bs[0].cols,
                  sizeC = cs[0].ld * cs[0].cols;
    Batch a(as, broadcastA ? 0 : sizeA + 7), b(bs, sizeB + 1), c(cs, sizeC + 5);
    float alpha = 0.75f, beta = 1.5f;
    std::vector<Reference> refs;
    for (int i = 0; i < count; ++i)
      refs.push_back(
          reference(m, n, k, alpha, as[i], true, bs[i], false, beta, cs[i]));
    ASSERT_EQ(cublasSgemmStridedBatched(
                  handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                  reinterpret_cast<float *>(a.bytes.data()), as[0].ld, a.stride,
                  reinterpret_cast<float *>(b.bytes.data()), bs[0].ld, b.stride,
                  &beta, reinterpret_cast<float *>(c.bytes.data()), cs[0].ld,
                  c.stride, count),
              CUBLAS_STATUS_SUCCESS);
    c.readBack();
    for (int i = 0; i < count; ++i)
      expectMatches(c.items[i], refs[i],
                    "strided batch " + std::to_string(i) +
                        (broadcastA ? " (A broadcast)" : ""));
  }
}

TEST_F(Cublas, GemmExSixteenBitInputs) {
  for (Fmt in : {Fmt::BF16, Fmt::F16}) {
    for (Fmt out : {Fmt::F32, in}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const int m = 33, n = 18, k = 40;
          Matrix a = operand(in, ta, m, k, 3, rng);
          Matrix b = operand(in, tb, k, n, 1, rng);
          Matrix c(out, m, n, m + 1);
          c.fillRandom(rng);
          float alpha = 1.0f, beta = out == Fmt::F32 ? 0.5f : -1.0f;
          Reference ref = reference(m, n, k, alpha, a, ta, b, tb, beta, c);
          ASSERT_EQ(cublasGemmEx(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                 &alpha, a.data(), typeOf(in), a.ld, b.data(),
                                 typeOf(in), b.ld, &beta, c.data(), typeOf(out),
                                 c.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
          expectMatches(c, ref,
                        std::string("GemmEx ") + nameOf(in) + " -> " +
                            nameOf(out) + (ta ? " T" : " N") +
                            (tb ? "T" : "N"));
        }
      }
    }
  }
}

TEST_F(Cublas, GemmExBetaZeroSixteenBitC) {
  Matrix a = operand(Fmt::BF16, false, 10, 7, 0, rng);
  Matrix b = operand(Fmt::BF16, false, 7, 9, 0, rng);
  Matrix c(Fmt::BF16, 10, 9, 12);
  c.fill(kNaN);
  float alpha = 2.0f, beta = 0.0f;
  Reference ref = reference(10, 9, 7, alpha, a, false, b, false, 0.0, c);
  ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 10, 9, 7, &alpha,
                         a.data(), CUDA_R_16BF, a.ld, b.data(), CUDA_R_16BF,
                         b.ld, &beta, c.data(), CUDA_R_16BF, c.ld,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  expectMatches(c, ref, "GemmEx bf16 with beta 0 over NaN");
}

TEST_F(Cublas, GemmExRoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between the bfloat16 values 1 and 1 + 2^-7, and
  // 1 + 3 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6: ties go to the even
  // mantissa, 1 and 1 + 2^-6. Likewise 1 + 2^-11 for float16.
  struct Case {
    Fmt fmt;
    float tail, want;
  };
  const Case cases[] = {{Fmt::BF16, 0x1p-8f, 1.0f},
                        {Fmt::BF16, 0x3p-8f, 1.0f + 0x1p-6f},
                        {Fmt::BF16, -0x1p-8f, 1.0f - 0x1p-8f},
                        {Fmt::F16, 0x1p-11f, 1.0f},
                        {Fmt::F16, 0x3p-11f, 1.0f + 0x1p-9f}};
  for (const Case &t : cases) {
    // [1, tail] . [1, 1], k = 2.
    Matrix a(t.fmt, 1, 2, 1), b(t.fmt, 2, 1, 2), c(t.fmt, 1, 1, 1);
    a.set(0, 0, 1.0f);
    a.set(0, 1, t.tail);
    b.fill(1.0f);
    ASSERT_EQ(a.at(0, 1), t.tail) << "the tail must be exact in the format";
    float alpha = 1.0f, beta = 0.0f;
    ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &alpha,
                           a.data(), typeOf(t.fmt), 1, b.data(), typeOf(t.fmt),
                           2, &beta, c.data(), typeOf(t.fmt), 1,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(c.at(0, 0), t.want) << nameOf(t.fmt) << " 1 + " << t.tail;
  }
}

TEST_F(Cublas, GemmStridedBatchedExMatchesReference) {
  const int m = 12, n = 20, k = 17, count = 4;
  for (Fmt in : {Fmt::BF16, Fmt::F16}) {
    std::vector<Matrix> as, bs, cs;
    for (int i = 0; i < count; ++i) {
      as.push_back(operand(in, false, m, k, 2, rng));
      bs.push_back(operand(in, true, k, n, 0, rng));
      Matrix c(Fmt::F32, m, n, m);
      c.fill(kNaN);
      cs.push_back(c);
    }
    Batch a(as, as[0].ld * k + 3), b(bs, bs[0].ld * k), c(cs, cs[0].ld * n + 8);
    float alpha = 1.0f, beta = 0.0f;
    std::vector<Reference> refs;
    for (int i = 0; i < count; ++i)
      refs.push_back(
          reference(m, n, k, alpha, as[i], false, bs[i], true, 0.0, cs[i]));
    ASSERT_EQ(cublasGemmStridedBatchedEx(
                  handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha,
                  a.bytes.data(), typeOf(in), as[0].ld, a.stride,
                  b.bytes.data(), typeOf(in), bs[0].ld, b.stride, &beta,
                  c.bytes.data(), CUDA_R_32F, cs[0].ld, c.stride, count,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    c.readBack();
    for (int i = 0; i < count; ++i)
      expectMatches(c.items[i], refs[i],
                    std::string("GemmStridedBatchedEx ") + nameOf(in) + " " +
                        std::to_string(i));
  }
}

TEST_F(Cublas, InvalidArguments) {
  std::vector<float> x(64, 1.0f);
  float one = 1.0f;
  auto sgemm = [&](cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                   int m, int n, int k, int lda, int ldb, int ldc,
                   const float *alpha = nullptr) {
    return cublasSgemm(h, ta, tb, m, n, k, alpha ? alpha : &one, x.data(), lda,
                       x.data(), ldb, &one, x.data(), ldc);
  };
  const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  EXPECT_EQ(sgemm(nullptr, N, N, 2, 2, 2, 2, 2, 2),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(sgemm(handle, N, N, -1, 2, 2, 2, 2, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(sgemm(handle, N, N, 2, -1, 2, 2, 2, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(sgemm(handle, N, N, 2, 2, -1, 2, 2, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(sgemm(handle, N, N, 4, 2, 3, 3, 3, 4),
            CUBLAS_STATUS_INVALID_VALUE); // lda < m
  EXPECT_EQ(sgemm(handle, T, N, 4, 2, 3, 2, 3, 4),
            CUBLAS_STATUS_INVALID_VALUE); // lda < k
  EXPECT_EQ(sgemm(handle, N, N, 4, 2, 3, 4, 2, 4),
            CUBLAS_STATUS_INVALID_VALUE); // ldb < k
  EXPECT_EQ(sgemm(handle, N, T, 4, 2, 3, 4, 1, 4),
            CUBLAS_STATUS_INVALID_VALUE); // ldb < n
  EXPECT_EQ(sgemm(handle, N, N, 4, 2, 3, 4, 3, 3),
            CUBLAS_STATUS_INVALID_VALUE); // ldc < m
  EXPECT_EQ(sgemm(handle, CUBLAS_OP_CONJG, N, 2, 2, 2, 2, 2, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle, N, N, 2, 2, 2, nullptr, x.data(), 2, x.data(),
                        2, &one, x.data(), 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemmStridedBatched(handle, N, N, 2, 2, 2, &one, x.data(), 2,
                                      4, x.data(), 2, 4, &one, x.data(), 2, 4,
                                      -1),
            CUBLAS_STATUS_INVALID_VALUE);
  // Leading dimensions are at least 1 even for empty matrices.
  EXPECT_EQ(sgemm(handle, N, N, 0, 2, 2, 0, 2, 1), CUBLAS_STATUS_INVALID_VALUE);
  // Empty problems succeed without any work.
  int before = support::enqueued;
  EXPECT_EQ(sgemm(handle, N, N, 0, 2, 2, 1, 2, 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(sgemm(handle, N, N, 2, 0, 2, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(support::enqueued, before);

  auto gemmEx = [&](cudaDataType_t ta, cudaDataType_t tb, cudaDataType_t tc,
                    cublasComputeType_t compute,
                    cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT) {
    return cublasGemmEx(handle, N, N, 2, 2, 2, &one, x.data(), ta, 2, x.data(),
                        tb, 2, &one, x.data(), tc, 2, compute, algo);
  };
  EXPECT_EQ(gemmEx(CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemmEx(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemmEx(CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemmEx(CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(
      gemmEx(CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
      CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemmEx(CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemmEx(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F,
                   cublasGemmAlgo_t(42)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(
      gemmEx(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(
      gemmEx(CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F_PEDANTIC),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), nullptr);
  EXPECT_NE(std::string(cublasGetStatusString(CUBLAS_STATUS_SUCCESS)),
            std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)));
}

TEST_F(Cublas, WorkRunsOnTheHandlesStreamAndKeepsCallTimeScalars) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t(0x5000));
  ASSERT_EQ(cublasSetStream(handle, stream), CUBLAS_STATUS_SUCCESS);
  Matrix a = operand(Fmt::F32, false, 5, 3, 0, rng);
  Matrix b = operand(Fmt::F32, false, 3, 4, 0, rng);
  Matrix c(Fmt::F32, 5, 4, 5);
  c.fillRandom(rng);
  float alpha = 2.0f, beta = 0.5f;
  support::deferWork = true;
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, &alpha,
                        static_cast<float *>(a.data()), a.ld,
                        static_cast<float *>(b.data()), b.ld, &beta,
                        static_cast<float *>(c.data()), c.ld),
            CUBLAS_STATUS_SUCCESS);
  support::deferWork = false;
  EXPECT_EQ(support::lastStream, stream);
  ASSERT_EQ(support::deferred.size(), 1u);
  // As in a graph: the scalars are the call's, the matrices the launch's.
  alpha = 100.0f;
  beta = 100.0f;
  a.fillRandom(rng);
  c.fillRandom(rng);
  Reference ref = reference(5, 4, 3, 2.0, a, false, b, false, 0.5, c);
  support::deferred.front()();
  support::deferred.clear();
  expectMatches(c, ref, "deferred Sgemm");
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

/// The auxiliary matrix of a GELU epilogue, as the descriptor's
/// EPILOGUE_AUX attributes give it; a type of -1 is left unset (D's).
struct AuxSpec {
  void *data = nullptr;
  int64_t ld = 0;
  int32_t type = -1;
};

/// One cuBLASLt matmul set up as Gemm.cu sets it up: descriptor,
/// layouts, preference with the pointers' alignments, heuristic, matmul.
struct LtCall {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;

  LtCall() { EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS); }
  ~LtCall() {
    EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(lc), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(lb), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(la), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
  }

  /// Describes D = op(A) op(B) with `epilogue` on `vector` (float32) and
  /// `aux`, if given, and asks the heuristic; returns its status.
  cublasStatus_t plan(bool ta, bool tb, Matrix &a, Matrix &b, Matrix &d,
                      cublasLtEpilogue_t epilogue, void *vector,
                      cudaDataType_t vectorType = CUDA_R_32F,
                      const AuxSpec *aux = nullptr) {
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    size_t workspace = 1 << 20;
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                             &opA, sizeof(opA)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                             &opB, sizeof(opB)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc,
                                             CUBLASLT_MATMUL_DESC_EPILOGUE,
                                             &epilogue, sizeof(epilogue)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc,
                                             CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                             &vector, sizeof(vector)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                  desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vectorType,
                  sizeof(vectorType)),
              CUBLAS_STATUS_SUCCESS);
    if (aux) {
      EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux->data,
                    sizeof(aux->data)),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                    desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux->ld,
                    sizeof(aux->ld)),
                CUBLAS_STATUS_SUCCESS);
      if (aux->type != -1) {
        EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                      desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                      &aux->type, sizeof(aux->type)),
                  CUBLAS_STATUS_SUCCESS);
      }
    }
    EXPECT_EQ(
        cublasLtMatrixLayoutCreate(&la, typeOf(a.fmt), a.rows, a.cols, a.ld),
        CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(
        cublasLtMatrixLayoutCreate(&lb, typeOf(b.fmt), b.rows, b.cols, b.ld),
        CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(
        cublasLtMatrixLayoutCreate(&lc, typeOf(d.fmt), d.rows, d.cols, d.ld),
        CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                  sizeof(workspace)),
              CUBLAS_STATUS_SUCCESS);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void *>
        alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a.data()},
                        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b.data()},
                        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d.data()},
                        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d.data()}};
    for (const auto &[attr, p] : alignments) {
      uint32_t bytes = 256;
      while (bytes > 1 && reinterpret_cast<uintptr_t>(p) % bytes != 0)
        bytes /= 2;
      EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes,
                                                     sizeof(bytes)),
                CUBLAS_STATUS_SUCCESS);
    }
    return cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1,
                                          &result, &found);
  }

  cublasStatus_t run(const Matrix &a, const Matrix &b, Matrix &d,
                     float alpha = 1.0f, float beta = 0.0f,
                     cudaStream_t stream = nullptr) {
    return cublasLtMatmul(lt, desc, &alpha, a.bytes.data(), la, b.bytes.data(),
                          lb, &beta, d.data(), lc, d.data(), lc, &result.algo,
                          nullptr, 0, stream);
  }
};

TEST(CublasLt, DefaultEpilogueIsAGemm) {
  std::mt19937 rng(7);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int m = 26, n = 15, k = 31;
      Matrix a = operand(Fmt::F32, ta, m, k, 2, rng);
      Matrix b = operand(Fmt::F32, tb, k, n, 3, rng);
      Matrix d(Fmt::F32, m, n, m + 1);
      d.fillRandom(rng);
      LtCall call;
      ASSERT_EQ(call.plan(ta, tb, a, b, d, CUBLASLT_EPILOGUE_DEFAULT, nullptr),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(call.found, 1);
      EXPECT_EQ(call.result.state, CUBLAS_STATUS_SUCCESS);
      Reference ref = reference(m, n, k, 0.5, a, ta, b, tb, -2.0, d);
      cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t(0x7000));
      ASSERT_EQ(call.run(a, b, d, 0.5f, -2.0f, stream), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(support::lastStream, stream);
      expectMatches(d, ref, "Lt default");
    }
  }
}

TEST(CublasLt, BiasRunsAlongTheRowsOfD) {
  // BIAS adds bias[i] to row i of D (length: D's rows), in float, rounded
  // once to D's type.
  std::mt19937 rng(11);
  for (Fmt in : {Fmt::F32, Fmt::BF16, Fmt::F16}) {
    for (Fmt out : {Fmt::F32, in}) {
      const int m = 21, n = 9, k = 27;
      // As Gemm.cu calls it: A transposed, B not.
      Matrix a = operand(in, true, m, k, 0, rng);
      Matrix b = operand(in, false, k, n, 0, rng);
      Matrix d(out, m, n, m + 2);
      d.fill(kNaN);
      std::vector<float> bias(m);
      std::vector<double> biasRef(m);
      std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
      for (int i = 0; i < m; ++i)
        biasRef[i] = bias[i] = dist(rng);
      LtCall call;
      ASSERT_EQ(
          call.plan(true, false, a, b, d, CUBLASLT_EPILOGUE_BIAS, bias.data()),
          CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(call.found, 1);
      Reference ref =
          reference(m, n, k, 1.0, a, true, b, false, 0.0, d, biasRef);
      ASSERT_EQ(call.run(a, b, d), CUBLAS_STATUS_SUCCESS);
      expectMatches(
          d, ref, std::string("Lt bias ") + nameOf(in) + " -> " + nameOf(out));
    }
  }
}

TEST(CublasLt, BiasGradientsSumOverK) {
  // BGRADA: vector[i] = sum over l of op(A)[i, l] (D's rows); BGRADB:
  // vector[j] = sum over l of op(B)[l, j] (D's columns). D is the plain
  // product.
  std::mt19937 rng(13);
  for (Fmt in : {Fmt::F32, Fmt::BF16, Fmt::F16}) {
    for (bool sumA : {true, false}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const int m = 19, n = 11, k = 45;
          Matrix a = operand(in, ta, m, k, 1, rng);
          Matrix b = operand(in, tb, k, n, 2, rng);
          Matrix d(Fmt::F32, m, n, m);
          d.fill(kNaN);
          const int length = sumA ? m : n;
          std::vector<float> sums(length + 1, kSentinel);
          LtCall call;
          ASSERT_EQ(call.plan(ta, tb, a, b, d,
                              sumA ? CUBLASLT_EPILOGUE_BGRADA
                                   : CUBLASLT_EPILOGUE_BGRADB,
                              sums.data()),
                    CUBLAS_STATUS_SUCCESS);
          Reference ref = reference(m, n, k, 1.0, a, ta, b, tb, 0.0, d);
          ASSERT_EQ(call.run(a, b, d), CUBLAS_STATUS_SUCCESS);
          std::string what = std::string(sumA ? "BGRADA " : "BGRADB ") +
                             nameOf(in) + (ta ? " T" : " N") + (tb ? "T" : "N");
          expectMatches(d, ref, what);
          for (int v = 0; v < length; ++v) {
            double want = 0.0, scale = 0.0;
            for (int l = 0; l < k; ++l) {
              double x = sumA ? opAt(a, ta, v, l) : opAt(b, tb, l, v);
              want += x;
              scale += std::fabs(x);
            }
            EXPECT_NEAR(sums[v], want, kRelTol * scale) << what << " " << v;
          }
          EXPECT_EQ(sums[length], kSentinel) << what << ": wrote past the end";
        }
      }
    }
  }
}

/// GELU's tanh form, as cuBLASLt's GELU epilogues define it, and its
/// derivative, in double.
double geluRef(double x) {
  const double s = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

double geluGradientRef(double x) {
  const double s = std::sqrt(2.0 / std::acos(-1.0));
  double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

/// GELU(x) of a reference x. |GELU'| < 1.13, so the float x's error grows
/// at most that much; the float GELU adds a few ulps of |x| <= scale.
Reference geluOf(const Reference &x) {
  Reference ref = x;
  for (size_t e = 0; e < ref.value.size(); ++e) {
    ref.value[e] = geluRef(x.value[e]);
    ref.scale[e] = 1.2 * x.scale[e];
  }
  return ref;
}

/// A matrix of D's shape for the auxiliary output or input, with a leading
/// dimension that is a multiple of 8 and leaves padding.
Matrix auxMatrix(Fmt fmt, int64_t rows, int64_t cols) {
  return Matrix(fmt, rows, cols, (rows + 8) / 8 * 8);
}

TEST(CublasLt, GeluAuxStoresTheGeluInput) {
  // GELU_AUX(_BIAS): x = alpha op(A) op(B) + beta C (+ bias[i]) in float;
  // D = GELU(x) and aux = x, each rounded once to its type (aux: D's).
  std::mt19937 rng(29);
  struct Case {
    Fmt in, out;
  };
  const Case cases[] = {{Fmt::F32, Fmt::F32},
                        {Fmt::BF16, Fmt::BF16},
                        {Fmt::F16, Fmt::F16},
                        {Fmt::BF16, Fmt::F32}};
  for (const Case &t : cases) {
    for (bool withBias : {true, false}) {
      for (bool ta : {true, false}) {
        const int m = 21, n = 10, k = 27;
        Matrix a = operand(t.in, ta, m, k, 1, rng);
        Matrix b = operand(t.in, false, k, n, 2, rng);
        Matrix d(t.out, m, n, m + 3);
        float alpha = 0.75f, beta = t.out == Fmt::F32 ? 0.5f : 0.0f;
        if (beta != 0.0f)
          d.fillRandom(rng);
        else
          d.fill(kNaN);
        Matrix aux = auxMatrix(t.out, m, n);
        aux.fill(kNaN);
        std::vector<float> bias(m);
        std::vector<double> biasRef;
        std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
        for (int i = 0; withBias && i < m; ++i)
          biasRef.push_back(bias[i] = dist(rng));
        // The 16-bit cases name the aux type; float32 takes the default.
        AuxSpec spec{aux.data(), aux.ld,
                     t.out == Fmt::F32 ? -1 : int32_t(typeOf(t.out))};
        LtCall call;
        ASSERT_EQ(call.plan(ta, false, a, b, d,
                            withBias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                     : CUBLASLT_EPILOGUE_GELU_AUX,
                            withBias ? bias.data() : nullptr, CUDA_R_32F,
                            &spec),
                  CUBLAS_STATUS_SUCCESS);
        ASSERT_EQ(call.found, 1);
        Reference x =
            reference(m, n, k, alpha, a, ta, b, false, beta, d, biasRef);
        ASSERT_EQ(call.run(a, b, d, alpha, beta), CUBLAS_STATUS_SUCCESS);
        std::string what =
            std::string(withBias ? "GELU_AUX_BIAS " : "GELU_AUX ") +
            nameOf(t.in) + " -> " + nameOf(t.out) + (ta ? " T" : " N");
        expectMatches(d, geluOf(x), what + " D");
        expectMatches(aux, x, what + " aux");
      }
    }
  }
}

TEST(CublasLt, GeluWithoutAuxMatrix) {
  // GELU and GELU_BIAS need no auxiliary attributes and write no aux.
  std::mt19937 rng(31);
  for (Fmt fmt : {Fmt::F32, Fmt::BF16}) {
    for (bool withBias : {false, true}) {
      const int m = 13, n = 7, k = 33;
      Matrix a = operand(fmt, true, m, k, 0, rng);
      Matrix b = operand(fmt, false, k, n, 1, rng);
      Matrix d(fmt, m, n, m + 1);
      d.fillRandom(rng);
      std::vector<float> bias(m);
      std::vector<double> biasRef;
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      for (int i = 0; withBias && i < m; ++i)
        biasRef.push_back(bias[i] = dist(rng));
      LtCall call;
      ASSERT_EQ(call.plan(true, false, a, b, d,
                          withBias ? CUBLASLT_EPILOGUE_GELU_BIAS
                                   : CUBLASLT_EPILOGUE_GELU,
                          withBias ? bias.data() : nullptr),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(call.found, 1);
      Reference x =
          reference(m, n, k, 1.5, a, true, b, false, -1.0, d, biasRef);
      ASSERT_EQ(call.run(a, b, d, 1.5f, -1.0f), CUBLAS_STATUS_SUCCESS);
      expectMatches(d, geluOf(x),
                    std::string(withBias ? "GELU_BIAS " : "GELU ") +
                        nameOf(fmt));
    }
  }
}

TEST(CublasLt, DgeluScalesByTheGeluDerivative) {
  // DGELU: D = (alpha op(A) op(B) + beta C) * GELU'(aux), aux (D's type
  // and shape, leading dimension AUX_LD) holding the forward's GELU input.
  std::mt19937 rng(37);
  for (Fmt fmt : {Fmt::F32, Fmt::BF16}) {
    for (bool tb : {false, true}) {
      const int m = 19, n = 12, k = 25;
      Matrix a = operand(fmt, false, m, k, 2, rng);
      Matrix b = operand(fmt, tb, k, n, 1, rng);
      Matrix d(fmt, m, n, m + 2);
      float alpha = fmt == Fmt::F32 ? 1.25f : 1.0f,
            beta = fmt == Fmt::F32 ? -0.5f : 0.0f;
      if (beta != 0.0f)
        d.fillRandom(rng);
      else
        d.fill(kNaN);
      // GELU inputs over the curve's bend, where GELU' goes negative.
      Matrix aux = auxMatrix(fmt, m, n);
      std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i)
          aux.set(i, j, dist(rng));
      const std::vector<uint8_t> auxBefore = aux.bytes;
      AuxSpec spec{aux.data(), aux.ld, int32_t(typeOf(fmt))};
      LtCall call;
      ASSERT_EQ(call.plan(false, tb, a, b, d, CUBLASLT_EPILOGUE_DGELU, nullptr,
                          CUDA_R_32F, &spec),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(call.found, 1);
      Reference ref = reference(m, n, k, alpha, a, false, b, tb, beta, d);
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          double g = geluGradientRef(aux.at(i, j));
          // The float GELU' is within about 1e-6 of g.
          ref.value[i + j * m] *= g;
          ref.scale[i + j * m] *= std::fabs(g) + 0.2;
        }
      }
      ASSERT_EQ(call.run(a, b, d, alpha, beta), CUBLAS_STATUS_SUCCESS);
      std::string what =
          std::string("DGELU ") + nameOf(fmt) + (tb ? " NT" : " NN");
      expectMatches(d, ref, what);
      EXPECT_TRUE(aux.bytes == auxBefore) << what << ": aux was written";
    }
  }
}

TEST(CublasLt, GeluAuxConstraints) {
  std::mt19937 rng(41);
  const int m = 21, n = 6, k = 8;
  Matrix a = operand(Fmt::F32, false, m, k, 0, rng);
  Matrix b = operand(Fmt::F32, false, k, n, 0, rng);
  Matrix d(Fmt::F32, m, n, m);
  Matrix aux = auxMatrix(Fmt::F32, m, n); // ld 24
  float bias[m] = {};
  for (cublasLtEpilogue_t epilogue :
       {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
        CUBLASLT_EPILOGUE_DGELU}) {
    std::string what = "epilogue " + std::to_string(epilogue);
    {
      // No aux pointer: the heuristic, which does not dereference it,
      // offers an algorithm; the matmul refuses the null pointer.
      AuxSpec spec{nullptr, aux.ld};
      LtCall call;
      ASSERT_EQ(
          call.plan(false, false, a, b, d, epilogue, bias, CUDA_R_32F, &spec),
          CUBLAS_STATUS_SUCCESS)
          << what;
      int before = support::complaints;
      EXPECT_EQ(call.run(a, b, d), CUBLAS_STATUS_INVALID_VALUE) << what;
      EXPECT_EQ(support::complaints, before + 1) << what;
    }
    {
      // The aux attributes left unset: AUX_LD 0.
      LtCall call;
      EXPECT_EQ(call.plan(false, false, a, b, d, epilogue, bias),
                CUBLAS_STATUS_INVALID_VALUE)
          << what;
      EXPECT_EQ(call.found, 0) << what;
    }
    // AUX_LD under D's rows, or not a multiple of 8.
    for (int64_t ld : {16, 22, 25}) {
      AuxSpec spec{aux.data(), ld};
      LtCall call;
      EXPECT_EQ(
          call.plan(false, false, a, b, d, epilogue, bias, CUDA_R_32F, &spec),
          CUBLAS_STATUS_INVALID_VALUE)
          << what << " ld " << ld;
      EXPECT_EQ(call.found, 0) << what;
    }
    // An aux type other than D's.
    for (cudaDataType_t type : {CUDA_R_16BF, CUDA_R_16F, CUDA_R_8I}) {
      AuxSpec spec{aux.data(), aux.ld, type};
      LtCall call;
      EXPECT_EQ(
          call.plan(false, false, a, b, d, epilogue, bias, CUDA_R_32F, &spec),
          CUBLAS_STATUS_INVALID_VALUE)
          << what << " type " << type;
    }
    {
      // cublasLtMatmul checks them too, after a heuristic that passed.
      AuxSpec spec{aux.data(), aux.ld};
      LtCall call;
      ASSERT_EQ(
          call.plan(false, false, a, b, d, epilogue, bias, CUDA_R_32F, &spec),
          CUBLAS_STATUS_SUCCESS)
          << what;
      int64_t badLd = 20;
      ASSERT_EQ(cublasLtMatmulDescSetAttribute(
                    call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &badLd,
                    sizeof(badLd)),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(call.run(a, b, d), CUBLAS_STATUS_INVALID_VALUE) << what;
      ASSERT_EQ(cublasLtMatmulDescSetAttribute(
                    call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux.ld,
                    sizeof(aux.ld)),
                CUBLAS_STATUS_SUCCESS);
      int32_t bf16 = CUDA_R_16BF;
      ASSERT_EQ(cublasLtMatmulDescSetAttribute(
                    call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                    &bf16, sizeof(bf16)),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(call.run(a, b, d), CUBLAS_STATUS_INVALID_VALUE) << what;
    }
  }
  {
    // The aux pointer's alignment is the heuristic's, like the bias's.
    AuxSpec spec{aux.data(), aux.ld};
    LtCall call;
    ASSERT_EQ(call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_GELU_AUX,
                        nullptr, CUDA_R_32F, &spec),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(aux.data()) % 16, 0u);
    std::vector<float> shifted(aux.ld * n + 1);
    void *unaligned = shifted.data() + 1;
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(
                  call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                  &unaligned, sizeof(unaligned)),
              CUBLAS_STATUS_SUCCESS);
    int before = support::complaints;
    EXPECT_EQ(call.run(a, b, d), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(support::complaints, before + 1);
  }
  {
    // AUX_BATCH_STRIDE is read and ignored (no batches here); the aux
    // scaling factor stays unmodelled.
    AuxSpec spec{aux.data(), aux.ld};
    LtCall call;
    ASSERT_EQ(call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_GELU_AUX,
                        nullptr, CUDA_R_32F, &spec),
              CUBLAS_STATUS_SUCCESS);
    int64_t stride = aux.ld * n;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                  call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                  &stride, sizeof(stride)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(
                  call.lt, call.desc, call.la, call.lb, call.lc, call.lc,
                  call.pref, 1, &call.result, &call.found),
              CUBLAS_STATUS_SUCCESS);
    const float *scale = bias;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                  call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER,
                  &scale, sizeof(scale)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(
                  call.lt, call.desc, call.la, call.lb, call.lc, call.lc,
                  call.pref, 1, &call.result, &call.found),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    // The GELU gradient with the bias gradient is not modelled.
    AuxSpec spec{aux.data(), aux.ld};
    LtCall call;
    EXPECT_EQ(call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                        bias, CUDA_R_32F, &spec),
              CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(call.found, 0);
  }
}

TEST(CublasLt, UnsupportedCasesGetNoAlgorithm) {
  std::mt19937 rng(17);
  Matrix a = operand(Fmt::F32, false, 8, 8, 0, rng);
  Matrix b = operand(Fmt::F32, false, 8, 8, 0, rng);
  Matrix d(Fmt::F32, 8, 8, 8);
  float bias[8] = {};
  {
    LtCall call;
    EXPECT_EQ(
        call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_RELU_BIAS, bias),
        CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(call.found, 0);
  }
  {
    // A 16-bit bias with a float32 D.
    LtCall call;
    EXPECT_EQ(call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_BIAS, bias,
                        CUDA_R_16BF),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    // An attribute the emulation does not model.
    LtCall call;
    ASSERT_EQ(
        call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_DEFAULT, nullptr),
        CUBLAS_STATUS_SUCCESS);
    const float *scale = bias;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                  call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale,
                  sizeof(scale)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(
                  call.lt, call.desc, call.la, call.lb, call.lc, call.lc,
                  call.pref, 1, &call.result, &call.found),
              CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(call.run(a, b, d), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    // Attributes of the wrong size are refused when set.
    LtCall call;
    ASSERT_EQ(
        call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_DEFAULT, nullptr),
        CUBLAS_STATUS_SUCCESS);
    uint64_t wide = CUBLAS_OP_T;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                  call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide)),
              CUBLAS_STATUS_INVALID_VALUE);
    uint32_t narrow = 1;
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                  call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &narrow,
                  sizeof(narrow)),
              CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(
                  call.lt, call.desc, call.la, call.lb, call.lc, call.lc,
                  call.pref, 0, &call.result, &call.found),
              CUBLAS_STATUS_INVALID_VALUE);
  }
}

TEST(CublasLt, InconsistentLayoutsAreInvalid) {
  std::mt19937 rng(19);
  Matrix a = operand(Fmt::F32, false, 6, 5, 0, rng);
  Matrix b = operand(Fmt::F32, false, 4, 7, 0, rng); // k 4 != 5
  Matrix d(Fmt::F32, 6, 7, 6);
  LtCall call;
  EXPECT_EQ(
      call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_DEFAULT, nullptr),
      CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(call.found, 0);

  Matrix b2 = operand(Fmt::F32, false, 5, 7, 0, rng);
  Matrix tight(Fmt::F32, 6, 7, 6);
  tight.ld = 5; // ld < rows
  LtCall call2;
  EXPECT_EQ(call2.plan(false, false, a, b2, tight, CUBLASLT_EPILOGUE_DEFAULT,
                       nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST(CublasLt, PointersLessAlignedThanPromisedAreRefused) {
  std::mt19937 rng(23);
  Matrix a = operand(Fmt::F32, false, 8, 8, 0, rng);
  Matrix b = operand(Fmt::F32, false, 8, 8, 0, rng);
  Matrix d(Fmt::F32, 8, 8, 8);
  LtCall call;
  ASSERT_EQ(
      call.plan(false, false, a, b, d, CUBLASLT_EPILOGUE_DEFAULT, nullptr),
      CUBLAS_STATUS_SUCCESS);
  // The heuristic was told A is 16-byte aligned (a vector's data is);
  // 4 bytes further it is not.
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a.bytes.data()) % 16, 0u);
  std::vector<float> shifted(8 * 8 + 1, 0.0f);
  float alpha = 1.0f, beta = 0.0f;
  int before = support::complaints;
  EXPECT_EQ(cublasLtMatmul(call.lt, call.desc, &alpha, shifted.data() + 1,
                           call.la, b.data(), call.lb, &beta, d.data(), call.lc,
                           d.data(), call.lc, &call.result.algo, nullptr, 0,
                           nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(support::complaints, before + 1);
}

} // namespace
