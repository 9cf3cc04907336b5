//===- AttentionTest.cpp - Fused attention forward and backward -----------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Random inputs against a double-precision reference that materializes the
// whole score matrix and differentiates the plain softmax by the chain rule,
// so it shares nothing with the kernels' online softmax and recomputation
// but the dropout generator (whose mask the contract defines). Shapes are
// chosen to be multiples of no tile size; masks are stored in broadcast
// layouts and expanded independently for the reference.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "KernelTestFixture.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace mtc::rt;
using mtc::rt::unittest::expectRelNear;
using mtc::rt::unittest::Kernels;

namespace {

/// float32 kernels against the double reference.
constexpr double kRel = 1e-4, kAbs = 1e-5;

std::vector<float> randomNormal(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// Unmasked, undropped attention over one batch dim.
AttentionDims attentionDims(int64_t batch, int64_t sq, int64_t sk, int64_t d,
                            int64_t dv, float scale) {
  AttentionDims a{};
  a.batch = batch;
  a.sq = sq;
  a.sk = sk;
  a.d = d;
  a.dv = dv;
  a.scale = scale;
  a.dropout = 0.0f;
  a.stream = 0;
  a.batchRank = 1;
  a.batchDims[0] = batch;
  a.maskStrides[0] = 0;
  a.maskRowStride = 0;
  a.maskColStride = 0;
  // Every tensor contiguous, [batch, rows, width].
  a.heads = std::max<int64_t>(batch, 1);
  a.rows.q = a.rows.dq = contiguousAttentionLayout(a.heads, sq, d);
  a.rows.k = a.rows.dk = contiguousAttentionLayout(a.heads, sk, d);
  a.rows.v = a.rows.dv = contiguousAttentionLayout(a.heads, sk, dv);
  a.rows.o = a.rows.dout = contiguousAttentionLayout(a.heads, sq, dv);
  return a;
}

std::string describe(const AttentionDims &a) {
  return "batch=" + std::to_string(a.batch) + " sq=" + std::to_string(a.sq) +
         " sk=" + std::to_string(a.sk) + " d=" + std::to_string(a.d) +
         " dv=" + std::to_string(a.dv);
}

struct Inputs {
  std::vector<float> q, k, v, dout;
  /// The mask as the kernel reads it (empty: no mask) ...
  std::vector<unsigned char> mask;
  /// ... and, for the reference, what it means: [batch, sq, sk].
  std::vector<unsigned char> fullMask;
};

Inputs randomInputs(const AttentionDims &a, unsigned seed) {
  Inputs in;
  in.q = randomNormal(a.batch * a.sq * a.d, seed);
  in.k = randomNormal(a.batch * a.sk * a.d, seed + 1);
  in.v = randomNormal(a.batch * a.sk * a.dv, seed + 2);
  in.dout = randomNormal(a.batch * a.sq * a.dv, seed + 3);
  return in;
}

/// fullMask from the meaning of a mask, `masked(h, i, j)`.
std::vector<unsigned char>
expandMask(const AttentionDims &a,
           const std::function<bool(int64_t, int64_t, int64_t)> &masked) {
  std::vector<unsigned char> full(a.batch * a.sq * a.sk);
  for (int64_t h = 0; h < a.batch; ++h)
    for (int64_t i = 0; i < a.sq; ++i)
      for (int64_t j = 0; j < a.sk; ++j)
        full[(h * a.sq + i) * a.sk + j] = masked(h, i, j) ? 1 : 0;
  return full;
}

/// A [sq, sk] causal mask (query i sees keys j <= i) broadcast over the
/// heads, as `a`'s strides describe it (maskRowStride = sk, maskColStride =
/// 1), and its expansion for the reference.
void causalMask(const AttentionDims &a, Inputs &in) {
  in.mask.resize(a.sq * a.sk);
  for (int64_t i = 0; i < a.sq; ++i)
    for (int64_t j = 0; j < a.sk; ++j)
      in.mask[i * a.sk + j] = j > i ? 1 : 0;
  in.fullMask =
      expandMask(a, [](int64_t, int64_t i, int64_t j) { return j > i; });
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

/// The definition, score matrix and all, in double. Dropout draws its mask
/// with the shared generator at (seed, step, a.stream).
Reference attentionReference(const AttentionDims &a, const Inputs &in,
                             uint64_t seed, int64_t step) {
  const int64_t sq = a.sq, sk = a.sk, d = a.d, dv = a.dv;
  const double scale = a.scale;
  const double ratio = a.dropout;
  const DropoutParams dropout = dropoutParams(seed, step, a.stream, a.dropout);
  Reference r;
  r.out.assign(a.batch * sq * dv, 0.0);
  r.lse.assign(a.batch * sq, 0.0);
  r.dq.assign(a.batch * sq * d, 0.0);
  r.dk.assign(a.batch * sk * d, 0.0);
  r.dv.assign(a.batch * sk * dv, 0.0);
  for (int64_t h = 0; h < a.batch; ++h) {
    const float *q = in.q.data() + h * sq * d;
    const float *k = in.k.data() + h * sk * d;
    const float *v = in.v.data() + h * sk * dv;
    const float *dout = in.dout.data() + h * sq * dv;
    // Scores, probabilities and the dropout factor of every (i, j).
    std::vector<double> s(sq * sk), p(sq * sk, 0.0), factor(sq * sk, 1.0);
    for (int64_t i = 0; i < sq; ++i) {
      double rowMax = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += static_cast<double>(q[i * d + c]) * k[j * d + c];
        bool masked =
            !in.fullMask.empty() && in.fullMask[(h * sq + i) * sk + j] != 0;
        s[i * sk + j] =
            masked ? -std::numeric_limits<double>::infinity() : scale * dot;
        rowMax = std::max(rowMax, s[i * sk + j]);
        if (ratio > 0)
          factor[i * sk + j] =
              attentionKeep(dropout, a, h, i, j) ? 1.0 / (1.0 - ratio) : 0.0;
      }
      if (std::isinf(rowMax)) {
        // Every key masked: p stays 0, so out stays 0.
        r.lse[h * sq + i] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < sk; ++j)
        sum += std::exp(s[i * sk + j] - rowMax);
      for (int64_t j = 0; j < sk; ++j)
        p[i * sk + j] = std::exp(s[i * sk + j] - rowMax) / sum;
      r.lse[h * sq + i] = rowMax + std::log(sum);
    }
    // out = (p * factor) v.
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t c = 0; c < dv; ++c)
          r.out[(h * sq + i) * dv + c] +=
              p[i * sk + j] * factor[i * sk + j] * v[j * dv + c];

    // Backward through out = pd v, pd = p * factor, p = softmax(s),
    // s = scale q k^T.
    for (int64_t i = 0; i < sq; ++i) {
      std::vector<double> dp(sk);
      double rowDot = 0; // sum_k p_ik dP_ik
      for (int64_t j = 0; j < sk; ++j) {
        double pd = p[i * sk + j] * factor[i * sk + j];
        double dpd = 0;
        for (int64_t c = 0; c < dv; ++c) {
          r.dv[(h * sk + j) * dv + c] += pd * dout[i * dv + c];
          dpd += static_cast<double>(dout[i * dv + c]) * v[j * dv + c];
        }
        dp[j] = dpd * factor[i * sk + j];
        rowDot += p[i * sk + j] * dp[j];
      }
      for (int64_t j = 0; j < sk; ++j) {
        double ds = p[i * sk + j] * (dp[j] - rowDot);
        for (int64_t c = 0; c < d; ++c) {
          r.dq[(h * sq + i) * d + c] += scale * ds * k[j * d + c];
          r.dk[(h * sk + j) * d + c] += scale * ds * q[i * d + c];
        }
      }
    }
  }
  return r;
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

/// Keys [first, sk) of head h, which no query sees, get exactly zero dK and
/// dV.
void expectNoKeyGradient(const Result &r, const AttentionDims &a, int64_t h,
                         int64_t first) {
  for (int64_t j = first; j < a.sk; ++j) {
    for (int64_t c = 0; c < a.d; ++c)
      EXPECT_EQ(r.dk[(h * a.sk + j) * a.d + c], 0.0f);
    for (int64_t c = 0; c < a.dv; ++c)
      EXPECT_EQ(r.dv[(h * a.sk + j) * a.dv + c], 0.0f);
  }
}

/// lse entries of fully masked rows must be exactly -inf, the others near.
void expectLseMatches(const std::vector<float> &lse,
                      const std::vector<double> &ref, double rel, double abs) {
  SCOPED_TRACE("lse");
  ASSERT_EQ(lse.size(), ref.size());
  std::vector<float> finite;
  std::vector<double> finiteRef;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      EXPECT_EQ(lse[i], -std::numeric_limits<float>::infinity())
          << "at index " << i;
      continue;
    }
    finite.push_back(lse[i]);
    finiteRef.push_back(ref[i]);
  }
  expectRelNear(finite, finiteRef, rel, abs);
}

/// Compares the result with the reference.
void expectMatches(const Result &r, const Reference &ref, double rel = kRel,
                   double abs = kAbs, double gradAbs = kAbs) {
  {
    SCOPED_TRACE("out");
    expectRelNear(r.out, ref.out, rel, abs);
  }
  expectLseMatches(r.lse, ref.lse, rel, abs);
  {
    SCOPED_TRACE("dq");
    expectRelNear(r.dq, ref.dq, rel, gradAbs);
  }
  {
    SCOPED_TRACE("dk");
    expectRelNear(r.dk, ref.dk, rel, gradAbs);
  }
  {
    SCOPED_TRACE("dv");
    expectRelNear(r.dv, ref.dv, rel, gradAbs);
  }
}

bool bitwiseEqual(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

//===----------------------------------------------------------------------===//
// 16-bit operands
//===----------------------------------------------------------------------===//

const char *storageName(Storage16 storage) {
  return storage == Storage16::Bf16 ? "bf16" : "fp16";
}

/// The 16-bit formats the device's attention takes: on CUDA, bfloat16
/// needs sm_80 or newer (device::name() ends in "(sm_XY)"). The emulation
/// reports sm_75 under MTC_CUDAEMU_SM=75, where the forward runs its WMMA
/// register kernel instead of the mma.sync one (ctest's
/// cudaemu.sm75-attention).
std::vector<Storage16> storages16() {
  const std::string name = device::name();
  const size_t at = name.rfind("(sm_");
  if (at != std::string::npos && std::atoi(name.c_str() + at + 4) < 80)
    return {Storage16::F16};
  return {Storage16::Bf16, Storage16::F16};
}

/// Q, K, V and dO as a 16-bit trainer stores them.
struct Inputs16 {
  std::vector<uint16_t> q, k, v, dout;
};

/// Rounds the inputs to `storage` in place, so that the reference computes
/// with exactly the values the kernels read, and returns their 16 bits.
Inputs16 roundInputs(Inputs &in, Storage16 storage) {
  auto round = [&](std::vector<float> &values) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      bits[i] = storage == Storage16::Bf16 ? floatToBf16(values[i])
                                           : floatToHalf(values[i]);
      values[i] = storedToFloat(bits[i], storage == Storage16::Bf16);
    }
    return bits;
  };
  Inputs16 bits;
  bits.q = round(in.q);
  bits.k = round(in.k);
  bits.v = round(in.v);
  bits.dout = round(in.dout);
  return bits;
}

/// The 16-bit kernels against the double reference on the same (rounded)
/// inputs. The reference keeps the probabilities and dS exact; the kernels
/// round each dropped probability and each scale * dS to 16 bits before it
/// multiplies V, dO, K or Q, a relative error of up to u = 2^-8 (bfloat16)
/// or 2^-11 (float16) in every term of those sums. So the relative
/// tolerance is 2e-2, and elements that are sums of cancelling terms, which
/// are small next to the terms, get an absolute term of 2u times the
/// largest reference element of the tensor: independent roundings of terms
/// no larger than that (weighted by probabilities that sum to at most the
/// dropout scale) stay below it. The log-sum-exp involves no rounding to 16
/// bits and keeps the float32 tolerance.
void expectMatches16(const Result &r, const Reference &ref, Storage16 storage) {
  const double u = storage == Storage16::Bf16 ? 0x1p-8 : 0x1p-11;
  constexpr double kRel16 = 2e-2;
  auto check = [&](const char *what, const std::vector<float> &actual,
                   const std::vector<double> &expected) {
    SCOPED_TRACE(what);
    double largest = 0.0;
    for (double x : expected)
      largest = std::max(largest, std::fabs(x));
    expectRelNear(actual, expected, kRel16, 2 * u * largest);
  };
  check("out", r.out, ref.out);
  expectLseMatches(r.lse, ref.lse, kRel, kAbs);
  check("dq", r.dq, ref.dq);
  check("dk", r.dk, ref.dk);
  check("dv", r.dv, ref.dv);
}

/// The kernel fixture plus a forward-then-backward driver.
class Attention : public Kernels {
protected:
  static constexpr size_t kGuard = 3;

  /// The fixture's float sentinel does not fit a byte, so the mask is
  /// copied without a guard.
  const unsigned char *uploadMask(const std::vector<unsigned char> &bytes) {
    unsigned char *p = nullptr;
    Status s = device::allocate(bytes.size() + 1, &p);
    EXPECT_TRUE(s.ok()) << s.message();
    allocations.push_back(p);
    EXPECT_TRUE(device::copyToDevice(ctx, p, bytes.data(), bytes.size()).ok());
    return p;
  }

  /// Output buffer of n elements filled with garbage, plus the guard.
  float *output(size_t n) {
    return upload(std::vector<float>(n, 9.0f), kGuard);
  }

  /// The first n elements of `p`, after checking that its guard is intact.
  std::vector<float> take(const float *p, size_t n, const char *what) {
    std::vector<float> all = download(p, n + kGuard);
    for (size_t i = n; i < n + kGuard; ++i)
      EXPECT_EQ(all[i], kSentinel) << what << " written past its end at " << i;
    all.resize(n);
    return all;
  }

  /// The guarded output buffers of one forward and backward.
  struct Outputs {
    size_t outSize, lseSize, dqSize, dkSize, dvSize;
    float *out, *lse, *dq, *dk, *dv;
  };

  Outputs outputs(const AttentionDims &a) {
    Outputs o;
    o.outSize = a.batch * a.sq * a.dv;
    o.lseSize = a.batch * a.sq;
    o.dqSize = a.batch * a.sq * a.d;
    o.dkSize = a.batch * a.sk * a.d;
    o.dvSize = a.batch * a.sk * a.dv;
    o.out = output(o.outSize);
    o.lse = output(o.lseSize);
    o.dq = output(o.dqSize);
    o.dk = output(o.dkSize);
    o.dv = output(o.dvSize);
    return o;
  }

  /// The outputs' values, after checking that nothing was written past them.
  Result collect(const Outputs &o) {
    Result r;
    r.out = take(o.out, o.outSize, "out");
    r.lse = take(o.lse, o.lseSize, "lse");
    r.dq = take(o.dq, o.dqSize, "dq");
    r.dk = take(o.dk, o.dkSize, "dk");
    r.dv = take(o.dv, o.dvSize, "dv");
    return r;
  }

  const unsigned char *maskOf(const Inputs &in) {
    return in.mask.empty() ? nullptr : uploadMask(in.mask);
  }

  /// attentionForward, then attentionBackward on the forward's out and lse,
  /// at the context's seed and step.
  Result run(const AttentionDims &a, const Inputs &in) {
    float *q = upload(in.q), *k = upload(in.k), *v = upload(in.v);
    float *dout = upload(in.dout);
    const unsigned char *mask = maskOf(in);
    Outputs o = outputs(a);
    attentionForward(ctx, a, q, k, v, mask, o.out, o.lse);
    attentionBackward(ctx, a, q, k, v, mask, o.out, o.lse, dout, o.dq, o.dk,
                      o.dv);
    EXPECT_FALSE(hasError(ctx));
    return collect(o);
  }

  /// attentionForward16, then attentionBackward16 on its out and lse; `in`
  /// gives the mask.
  Result run16(const AttentionDims &a, Storage16 storage, const Inputs &in,
               const Inputs16 &bits) {
    const uint16_t *q = upload(bits.q), *k = upload(bits.k);
    const uint16_t *v = upload(bits.v), *dout = upload(bits.dout);
    const unsigned char *mask = maskOf(in);
    Outputs o = outputs(a);
    attentionForward16(ctx, storage, a, q, k, v, mask, o.out, o.lse);
    attentionBackward16(ctx, storage, a, q, k, v, mask, o.out, o.lse, dout,
                        o.dq, o.dk, o.dv);
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    return collect(o);
  }
};

TEST_F(Attention, UnmaskedMatchesReference) {
  struct Case {
    int64_t batch, sq, sk, d, dv;
    float scale;
  } cases[] = {
      {3, 37, 37, 16, 16, 0.25f}, // 37: a multiple of no tile size
      {2, 5, 70, 8, 12, 0.4f},    // sq != sk, d != dv, scale != 1/sqrt(d)
      {2, 70, 5, 12, 8, 0.3f},
      {1, 1, 1, 4, 4, 0.5f}, // one key: p = 1, no gradient reaches q or k
  };
  unsigned seed = 1;
  for (const Case &c : cases) {
    AttentionDims a = attentionDims(c.batch, c.sq, c.sk, c.d, c.dv, c.scale);
    SCOPED_TRACE(describe(a));
    Inputs in = randomInputs(a, seed);
    seed += 10;
    expectMatches(run(a, in), attentionReference(a, in, ctx.seed, ctx.batch));
  }
}

TEST_F(Attention, CausalMaskBroadcastOverHeads) {
  // A [1, 1, S, S] causal mask over batch dims {2, 3}.
  const int64_t s = 65;
  AttentionDims a = attentionDims(6, s, s, 32, 32, 1.0f / std::sqrt(32.0f));
  a.batchRank = 2;
  a.batchDims[0] = 2;
  a.batchDims[1] = 3;
  a.maskStrides[0] = 0;
  a.maskStrides[1] = 0;
  a.maskRowStride = s;
  a.maskColStride = 1;
  Inputs in = randomInputs(a, 100);
  causalMask(a, in);
  Result r = run(a, in);
  expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch));
  // Query 0 sees only key 0, so its output is v's row 0.
  for (int64_t c = 0; c < a.dv; ++c)
    EXPECT_NEAR(r.out[c], in.v[c], 1e-6f) << "channel " << c;
}

/// The reference's mask for AttentionDims::causal (no mask for the kernel:
/// it decides by position).
void causalFlag(AttentionDims &a, Inputs &in) {
  a.causal = true;
  in.mask.clear();
  in.fullMask =
      expandMask(a, [](int64_t, int64_t i, int64_t j) { return j > i; });
}

TEST_F(Attention, CausalFlagMatchesReference) {
  // AttentionDims::causal instead of a mask: as long as, shorter than and
  // longer than the keys, over two batch dims, and with dropout.
  const std::pair<int64_t, int64_t> cases[] = {{65, 65}, {37, 70}, {70, 37}};
  unsigned seed = 1300;
  for (auto [sq, sk] : cases)
    for (float ratio : {0.0f, 0.2f}) {
      AttentionDims a = attentionDims(6, sq, sk, 32, 24, 0.2f);
      a.batchRank = 2;
      a.batchDims[0] = 2;
      a.batchDims[1] = 3;
      a.dropout = ratio;
      a.stream = 5;
      SCOPED_TRACE(describe(a) + " dropout=" + std::to_string(ratio));
      Inputs in = randomInputs(a, seed);
      seed += 10;
      causalFlag(a, in);
      Result r = run(a, in);
      expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch));
      if (sk > sq)
        for (int64_t h = 0; h < a.batch; ++h)
          expectNoKeyGradient(r, a, h, sq);
    }
}

TEST_F(Attention, SixteenBitCausalFlag) {
  // AttentionDims::causal in the 16-bit kernels: the register and mma.sync
  // kernels (d = 64 and 80) and the general ones (d = 144), queries as many
  // as, fewer and more than the keys, one side past a window of steps (the
  // register kernels classify 32 steps at a time), with dropout.
  ctx.seed = 77;
  ctx.batch = 3;
  struct Case {
    int64_t sq, sk, d;
  };
  const Case cases[] = {{200, 200, 64}, {200, 200, 80}, {200, 200, 144},
                        {37, 70, 40},   {130, 75, 64},  {64, 2240, 64},
                        {2240, 64, 64}};
  unsigned seed = 1400;
  for (const Case &c : cases)
    for (Storage16 storage : storages16()) {
      AttentionDims a = attentionDims(2, c.sq, c.sk, c.d, c.d, 0.125f);
      a.dropout = 0.1f;
      a.stream = 9;
      SCOPED_TRACE(std::string(storageName(storage)) + " " + describe(a));
      Inputs in = randomInputs(a, seed);
      seed += 10;
      causalFlag(a, in);
      Inputs16 bits = roundInputs(in, storage);
      Result r = run16(a, storage, in, bits);
      expectMatches16(r, attentionReference(a, in, ctx.seed, ctx.batch),
                      storage);
      if (c.sk > c.sq)
        for (int64_t h = 0; h < a.batch; ++h)
          expectNoKeyGradient(r, a, h, c.sq);
    }
}

TEST_F(Attention, PaddingMask) {
  // A [2, 1, 1, S] key padding mask over batch dims {2, 3}: batch entry b
  // attends to its first length[b] keys.
  const int64_t sq = 17, sk = 33;
  const int64_t length[2] = {28, 9};
  AttentionDims a = attentionDims(6, sq, sk, 16, 16, 0.25f);
  a.batchRank = 2;
  a.batchDims[0] = 2;
  a.batchDims[1] = 3;
  a.maskStrides[0] = sk;
  a.maskStrides[1] = 0;
  a.maskRowStride = 0;
  a.maskColStride = 1;
  Inputs in = randomInputs(a, 200);
  in.mask.resize(2 * sk);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < sk; ++j)
      in.mask[b * sk + j] = j >= length[b] ? 1 : 0;
  in.fullMask = expandMask(
      a, [&](int64_t h, int64_t, int64_t j) { return j >= length[h / 3]; });
  Result r = run(a, in);
  expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch));
  // Padded keys get no gradient at all.
  for (int64_t h = 0; h < a.batch; ++h)
    expectNoKeyGradient(r, a, h, length[h / 3]);
}

TEST_F(Attention, LeftPaddingMask) {
  // Keys before pad[b] masked, with pad 70: the rows of batch entry 0 see
  // none of their first 70 keys, so a running maximum starts late.
  const int64_t sq = 20, sk = 100;
  const int64_t pad[2] = {70, 3};
  AttentionDims a = attentionDims(2, sq, sk, 16, 24, 0.25f);
  a.maskStrides[0] = sk;
  a.maskColStride = 1;
  Inputs in = randomInputs(a, 250);
  in.mask.resize(2 * sk);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < sk; ++j)
      in.mask[b * sk + j] = j < pad[b] ? 1 : 0;
  in.fullMask =
      expandMask(a, [&](int64_t h, int64_t, int64_t j) { return j < pad[h]; });
  expectMatches(run(a, in), attentionReference(a, in, ctx.seed, ctx.batch));
}

TEST_F(Attention, PerHeadMaskWithFullyMaskedRow) {
  // A random [1, 3, sq, sk] mask over batch dims {2, 3} (broadcast over the
  // first, not the second), where head 1's query 2 sees no key.
  const int64_t sq = 11, sk = 19;
  AttentionDims a = attentionDims(6, sq, sk, 8, 8, 0.35f);
  a.batchRank = 2;
  a.batchDims[0] = 2;
  a.batchDims[1] = 3;
  a.maskStrides[0] = 0;
  a.maskStrides[1] = sq * sk;
  a.maskRowStride = sk;
  a.maskColStride = 1;
  Inputs in = randomInputs(a, 300);
  std::mt19937 gen(301);
  std::bernoulli_distribution bit(0.3);
  in.mask.resize(3 * sq * sk);
  for (unsigned char &m : in.mask)
    m = bit(gen) ? 1 : 0;
  for (int64_t j = 0; j < sk; ++j)
    in.mask[(1 * sq + 2) * sk + j] = 7; // any nonzero byte masks
  in.fullMask = expandMask(a, [&](int64_t h, int64_t i, int64_t j) {
    return in.mask[((h % 3) * sq + i) * sk + j] != 0;
  });
  Result r = run(a, in);
  expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch));
  for (int64_t h : {1, 4}) {
    EXPECT_EQ(r.lse[h * sq + 2], -std::numeric_limits<float>::infinity());
    for (int64_t c = 0; c < a.dv; ++c)
      EXPECT_EQ(r.out[(h * sq + 2) * a.dv + c], 0.0f);
    for (int64_t c = 0; c < a.d; ++c)
      EXPECT_EQ(r.dq[(h * sq + 2) * a.d + c], 0.0f);
  }
}

TEST_F(Attention, FullyMaskedRow) {
  // A [sq, sk] mask whose row 1 masks every key: that row's output is 0,
  // its lse -inf, its dq 0, and nothing anywhere is NaN.
  const int64_t sq = 3, sk = 4;
  AttentionDims a = attentionDims(1, sq, sk, 4, 5, 0.5f);
  a.maskRowStride = sk;
  a.maskColStride = 1;
  Inputs in = randomInputs(a, 400);
  in.mask = {0, 1, 0, 0, //
             1, 1, 1, 1, //
             0, 0, 0, 1};
  in.fullMask = in.mask;
  Result r = run(a, in);
  expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch));
  EXPECT_EQ(r.lse[1], -std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < a.dv; ++c)
    EXPECT_EQ(r.out[a.dv + c], 0.0f);
  for (int64_t c = 0; c < a.d; ++c)
    EXPECT_EQ(r.dq[a.d + c], 0.0f);
  for (const std::vector<float> *v : {&r.out, &r.dq, &r.dk, &r.dv})
    for (float x : *v)
      EXPECT_TRUE(std::isfinite(x));
}

TEST_F(Attention, DropoutMatchesReference) {
  // sq != sk, so a kernel that indexes the mask by anything but
  // (h * sq + i) * sk + j draws different bits.
  AttentionDims a = attentionDims(2, 19, 23, 16, 8, 0.25f);
  a.dropout = 0.25f;
  a.stream = 7;
  ctx.seed = 20240611;
  ctx.batch = 3;
  Inputs in = randomInputs(a, 500);
  Result r = run(a, in);
  expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch));

  // With a causal mask as well.
  AttentionDims masked = attentionDims(2, 23, 23, 16, 8, 0.25f);
  masked.dropout = 0.25f;
  masked.stream = 7;
  masked.maskRowStride = 23;
  masked.maskColStride = 1;
  Inputs maskedIn = randomInputs(masked, 510);
  maskedIn.mask.resize(23 * 23);
  for (int64_t i = 0; i < 23; ++i)
    for (int64_t j = 0; j < 23; ++j)
      maskedIn.mask[i * 23 + j] = j > i ? 1 : 0;
  maskedIn.fullMask =
      expandMask(masked, [](int64_t, int64_t i, int64_t j) { return j > i; });
  expectMatches(run(masked, maskedIn),
                attentionReference(masked, maskedIn, ctx.seed, ctx.batch));

  // Another step, or another stream, draws another mask: nearly every output
  // row mixes 23 keep decisions, so nearly every element changes.
  auto differing = [&](const std::vector<float> &other) {
    int64_t count = 0;
    for (size_t i = 0; i < r.out.size(); ++i)
      count += r.out[i] != other[i] ? 1 : 0;
    return count;
  };
  const int64_t outSize = static_cast<int64_t>(r.out.size());
  ctx.batch = 4;
  EXPECT_GT(differing(run(a, in).out), outSize * 9 / 10);
  ctx.batch = 3;
  a.stream = 8;
  EXPECT_GT(differing(run(a, in).out), outSize * 9 / 10);
  a.stream = 7;
  EXPECT_TRUE(bitwiseEqual(run(a, in).out, r.out));
}

TEST_F(Attention, Deterministic) {
  // Large enough to be split over threads (and blocks), with a mask and
  // dropout on.
  const int64_t s = 130;
  AttentionDims a = attentionDims(4, s, s, 64, 64, 0.125f);
  a.dropout = 0.1f;
  a.stream = 2;
  a.maskRowStride = s;
  a.maskColStride = 1;
  ctx.seed = 99;
  ctx.batch = 5;
  Inputs in = randomInputs(a, 600);
  in.mask.resize(s * s);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < s; ++j)
      in.mask[i * s + j] = j > i ? 1 : 0;
  Result first = run(a, in);
  Result second = run(a, in);
  EXPECT_TRUE(bitwiseEqual(first.out, second.out));
  EXPECT_TRUE(bitwiseEqual(first.lse, second.lse));
  EXPECT_TRUE(bitwiseEqual(first.dq, second.dq));
  EXPECT_TRUE(bitwiseEqual(first.dk, second.dk));
  EXPECT_TRUE(bitwiseEqual(first.dv, second.dv));
}

TEST_F(Attention, LargestHeadDims) {
  unsigned seed = 700;
  for (int64_t d : {128, 256}) {
    AttentionDims a =
        attentionDims(2, 9, 13, d, d, 1.0f / std::sqrt(static_cast<float>(d)));
    SCOPED_TRACE(describe(a));
    Inputs in = randomInputs(a, seed);
    seed += 10;
    expectMatches(run(a, in), attentionReference(a, in, ctx.seed, ctx.batch));
  }
}

TEST_F(Attention, LargeScoresDoNotOverflow) {
  // Scores of a few hundred: exp of them overflows float, so this needs the
  // running maximum. A score of ~300 formed in float is off by ~3e-5 (the
  // rounding of its products and sums), which moves its probability by as
  // much relative; outputs that are differences of such terms have that
  // absolute error, and the gradients of q and k, which the scale of 20
  // multiplies, a few times more.
  AttentionDims a = attentionDims(2, 21, 21, 16, 16, 20.0f);
  Inputs in = randomInputs(a, 800);
  Result r = run(a, in);
  expectMatches(r, attentionReference(a, in, ctx.seed, ctx.batch), kRel,
                /*abs=*/1e-4, /*gradAbs=*/2e-4);
  for (float x : r.lse)
    EXPECT_GT(x, 50.0f);
}

TEST_F(Attention, SixteenBitMatchesReference) {
  // sq = 37 and sk = 70 are multiples of no tile size; d = 40 and dv = 24
  // are not multiples of 16, the tensor-core tile edge. On CUDA, head dims
  // up to 64 and up to 128 take the two instances of the kernels that keep
  // their accumulators in registers where the side a block owns (queries
  // for the forward and dQ, keys for dK/dV) has 64 rows or more, the
  // general kernels elsewhere and for larger dims; 130 x 200 walks several
  // tiles and steps; 100 x 70 at d = 128 has the register dQ and dK/dV
  // kernels walk their steps through one buffer (two do not fit their
  // shared memory there).
  struct Case {
    int64_t sq, sk, d, dv;
  } cases[] = {{37, 70, 64, 64},   {37, 70, 40, 24},   {70, 37, 40, 64},
               {130, 200, 64, 48}, {37, 70, 128, 128}, {200, 130, 96, 40},
               {70, 37, 160, 144}, {100, 70, 128, 128}};
  unsigned seed = 900;
  for (Storage16 storage : storages16())
    for (const Case &c : cases) {
      AttentionDims a = attentionDims(
          2, c.sq, c.sk, c.d, c.dv, 1.0f / std::sqrt(static_cast<float>(c.d)));
      SCOPED_TRACE(std::string(storageName(storage)) + " " + describe(a));
      Inputs in = randomInputs(a, seed);
      seed += 10;
      Inputs16 bits = roundInputs(in, storage);
      expectMatches16(run16(a, storage, in, bits),
                      attentionReference(a, in, ctx.seed, ctx.batch), storage);
    }
}

TEST_F(Attention, SixteenBitCausalMaskAndDropout) {
  // A [sq, sk] causal mask (query i sees keys j <= i) and dropout, d = 40.
  const int64_t sq = 37, sk = 70;
  AttentionDims a = attentionDims(2, sq, sk, 40, 40, 0.15f);
  a.dropout = 0.2f;
  a.stream = 11;
  a.maskRowStride = sk;
  a.maskColStride = 1;
  ctx.seed = 4321;
  ctx.batch = 6;
  unsigned seed = 950;
  for (Storage16 storage : storages16()) {
    SCOPED_TRACE(storageName(storage));
    Inputs in = randomInputs(a, seed);
    seed += 10;
    causalMask(a, in);
    Inputs16 bits = roundInputs(in, storage);
    Result r = run16(a, storage, in, bits);
    expectMatches16(r, attentionReference(a, in, ctx.seed, ctx.batch), storage);
    // Keys no query sees get no gradient at all.
    for (int64_t h = 0; h < a.batch; ++h)
      expectNoKeyGradient(r, a, h, sq);
  }
}

TEST_F(Attention, SixteenBitLongCausalSequences) {
  // 200 queries and keys under a causal mask, with dropout: blocks whose
  // every step is live, partly masked and skipped, in both instances of the
  // register kernels (d = 64 and 80) and in the general ones (d = 144); and
  // 192, whose mask rows are whole 16-byte vectors: the register kernels
  // then read no mask in the chunks it leaves whole; and 199, whose odd
  // rows put two consecutive keys of a row in different dropout groups
  // (the mma.sync forward draws groups per pair of keys).
  ctx.seed = 99;
  ctx.batch = 4;
  unsigned seed = 960;
  const std::pair<int64_t, int64_t> cases[] = {
      {200, 64}, {200, 80}, {200, 144}, {192, 64}, {199, 64}};
  for (auto [s, d] : cases)
    for (Storage16 storage : storages16()) {
      AttentionDims a = attentionDims(2, s, s, d, d, 0.125f);
      a.dropout = 0.1f;
      a.stream = 7;
      a.maskRowStride = s;
      a.maskColStride = 1;
      SCOPED_TRACE(std::string(storageName(storage)) + " " + describe(a));
      Inputs in = randomInputs(a, seed);
      seed += 10;
      causalMask(a, in);
      Inputs16 bits = roundInputs(in, storage);
      expectMatches16(run16(a, storage, in, bits),
                      attentionReference(a, in, ctx.seed, ctx.batch), storage);
    }
}

TEST_F(Attention, SparseMaskSkipsOnlyDeadChunks) {
  // A 256 x 256 mask with live scores in one row of each 64 x 64 chunk but
  // those whose index is a multiple of 5 (fully masked), at two keys 16
  // apart whose place in their 16-byte vectors of the mask row runs over
  // all 16 (j % 16 = chunk index): a kernel that skipped a chunk holding
  // live scores would lose those keys from their query's output and
  // gradients. (Two keys, not one: a lone key's dq is 0 in exact
  // arithmetic, which 16-bit products only approach.)
  const int64_t s = 256;
  AttentionDims a = attentionDims(2, s, s, 64, 64, 0.125f);
  a.maskRowStride = s;
  a.maskColStride = 1;
  Inputs in = randomInputs(a, 970);
  in.mask.assign(s * s, 1);
  for (int c = 0; c < 16; ++c) {
    if (c % 5 == 0)
      continue;
    const int64_t i = c / 4 * 64 + c * 13 % 64;
    const int64_t j = c % 4 * 64 + c * 3 / 16 * 16 + c;
    in.mask[i * s + j] = 0;
    in.mask[i * s + j + 16] = 0;
  }
  in.fullMask = expandMask(a, [&](int64_t, int64_t i, int64_t j) {
    return in.mask[i * s + j] != 0;
  });
  const Reference ref = attentionReference(a, in, ctx.seed, ctx.batch);
  {
    SCOPED_TRACE("float32");
    expectMatches(run(a, in), ref);
  }
  for (Storage16 storage : storages16()) {
    SCOPED_TRACE(storageName(storage));
    Inputs rounded = in;
    const Inputs16 bits = roundInputs(rounded, storage);
    expectMatches16(run16(a, storage, rounded, bits),
                    attentionReference(a, rounded, ctx.seed, ctx.batch),
                    storage);
  }
}

TEST_F(Attention, SixteenBitWalksPastOneWindowOfSteps) {
  // The register kernels classify the mask's chunks 32 steps (2048 rows) at
  // a time. 64 queries against 2240 or 2200 keys (the forward and dQ walk 35
  // steps of keys), and the transpose (dK/dV walks 35 steps of queries),
  // with steps along the long side dead (c % 3 == 0), whole (1) and partly
  // masked (2), on both sides of the windows' boundary. 2240-long mask rows
  // are whole 16-byte vectors, so both windows are read that way; 2200-long
  // ones are not, and every step is classified on its own.
  unsigned seed = 990;
  for (int64_t length : {2240, 2200})
    for (bool longKeys : {true, false}) {
      const int64_t sq = longKeys ? 64 : length, sk = longKeys ? length : 64;
      AttentionDims a = attentionDims(1, sq, sk, 64, 64, 0.125f);
      a.maskRowStride = sk;
      a.maskColStride = 1;
      Inputs in = randomInputs(a, seed);
      seed += 10;
      in.mask.assign(sq * sk, 0);
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j) {
          const int64_t step = (longKeys ? j : i) / 64;
          in.mask[i * sk + j] =
              step % 3 == 0 || (step % 3 == 2 && (i + j) % 3 == 0);
        }
      in.fullMask = expandMask(a, [&](int64_t, int64_t i, int64_t j) {
        return in.mask[i * sk + j] != 0;
      });
      for (Storage16 storage : storages16()) {
        SCOPED_TRACE(std::string(storageName(storage)) + " " + describe(a));
        Inputs rounded = in;
        const Inputs16 bits = roundInputs(rounded, storage);
        expectMatches16(run16(a, storage, rounded, bits),
                        attentionReference(a, rounded, ctx.seed, ctx.batch),
                        storage);
      }
    }
}

TEST_F(Attention, SixteenBitFullyMaskedHead) {
  // A [2, 1, sk] key padding mask: head 0 sees its first 50 keys, head 1
  // none, so every row of head 1 gets lse = -inf and zeros everywhere.
  const int64_t sq = 37, sk = 70;
  AttentionDims a = attentionDims(2, sq, sk, 64, 64, 0.125f);
  a.maskStrides[0] = sk;
  a.maskColStride = 1;
  unsigned seed = 980;
  for (Storage16 storage : storages16()) {
    SCOPED_TRACE(storageName(storage));
    Inputs in = randomInputs(a, seed);
    seed += 10;
    in.mask.resize(2 * sk);
    for (int64_t j = 0; j < sk; ++j) {
      in.mask[j] = j >= 50 ? 1 : 0;
      in.mask[sk + j] = 1;
    }
    in.fullMask = expandMask(
        a, [](int64_t h, int64_t, int64_t j) { return h == 1 || j >= 50; });
    Inputs16 bits = roundInputs(in, storage);
    Result r = run16(a, storage, in, bits);
    expectMatches16(r, attentionReference(a, in, ctx.seed, ctx.batch), storage);
    for (int64_t i = 0; i < sq; ++i) {
      EXPECT_EQ(r.lse[sq + i], -std::numeric_limits<float>::infinity());
      for (int64_t c = 0; c < a.dv; ++c)
        EXPECT_EQ(r.out[(sq + i) * a.dv + c], 0.0f);
      for (int64_t c = 0; c < a.d; ++c)
        EXPECT_EQ(r.dq[(sq + i) * a.d + c], 0.0f);
    }
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t c = 0; c < a.d; ++c)
        EXPECT_EQ(r.dk[(sk + j) * a.d + c], 0.0f);
  }
}

TEST_F(Attention, SixteenBitStoredOutputIsTheRoundedOutput) {
  // The overloads storing O in 16 bits: the forward's O is the float32
  // kernel's rounded as a conversion rounds it (same lse), and the backward
  // reading those 16 bits gives bitwise the gradients of the float32-output
  // backward reading their widened values, under a causal mask and dropout,
  // with dv = 24 (not a multiple of the tensor-core tile edge).
  const int64_t sq = 37, sk = 70;
  AttentionDims a = attentionDims(2, sq, sk, 40, 24, 0.15f);
  a.dropout = 0.2f;
  a.stream = 5;
  a.maskRowStride = sk;
  a.maskColStride = 1;
  ctx.seed = 77;
  ctx.batch = 3;
  unsigned seed = 1010;
  for (Storage16 storage : storages16()) {
    SCOPED_TRACE(storageName(storage));
    const bool bf16 = storage == Storage16::Bf16;
    Inputs in = randomInputs(a, seed);
    seed += 10;
    causalMask(a, in);
    Inputs16 bits = roundInputs(in, storage);
    const uint16_t *q = upload(bits.q), *k = upload(bits.k);
    const uint16_t *v = upload(bits.v), *dout = upload(bits.dout);
    const unsigned char *mask = maskOf(in);

    Outputs wide = outputs(a);
    attentionForward16(ctx, storage, a, q, k, v, mask, wide.out, wide.lse);
    const size_t n = wide.outSize;
    uint16_t *narrow = upload(std::vector<uint16_t>(n, 0x7777), kGuard);
    float *lse = output(wide.lseSize);
    attentionForward16(ctx, storage, a, q, k, v, mask, narrow, lse);
    std::vector<float> outF = take(wide.out, n, "out");
    std::vector<uint16_t> out16 = download(narrow, n + kGuard);
    for (size_t i = n; i < n + kGuard; ++i)
      EXPECT_EQ(out16[i], static_cast<uint16_t>(kSentinel))
          << "16-bit out written past its end at " << i;
    out16.resize(n);
    std::vector<uint16_t> rounded(n);
    std::vector<float> widened(n);
    for (size_t i = 0; i < n; ++i) {
      rounded[i] = bf16 ? floatToBf16(outF[i]) : floatToHalf(outF[i]);
      widened[i] = storedToFloat(out16[i], bf16);
    }
    EXPECT_EQ(out16, rounded);
    EXPECT_EQ(take(lse, wide.lseSize, "lse"),
              take(wide.lse, wide.lseSize, "lse"));

    // The backward on the widened float32 copy (what a conversion feeds the
    // float32-output kernel) and on the 16 bits themselves.
    const float *outWide = upload(widened);
    attentionBackward16(ctx, storage, a, q, k, v, mask, outWide, wide.lse,
                        dout, wide.dq, wide.dk, wide.dv);
    Outputs own = outputs(a);
    attentionBackward16(ctx, storage, a, q, k, v, mask, narrow, wide.lse, dout,
                        own.dq, own.dk, own.dv);
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    EXPECT_EQ(take(own.dq, own.dqSize, "dq"), take(wide.dq, own.dqSize, "dq"));
    EXPECT_EQ(take(own.dk, own.dkSize, "dk"), take(wide.dk, own.dkSize, "dk"));
    EXPECT_EQ(take(own.dv, own.dvSize, "dv"), take(wide.dv, own.dvSize, "dv"));
  }
}

TEST_F(Attention, SixteenBitGradientsAreTheRoundedGradients) {
  // The overloads storing dQ, dK and dV in 16 bits: each is the float32
  // gradient the other overload writes, rounded as a conversion rounds it,
  // nothing is written past the arrays, with the output read as float32 and
  // as 16 bits, under a causal mask and dropout, dv = 24.
  const int64_t sq = 45, sk = 66;
  AttentionDims a = attentionDims(3, sq, sk, 32, 24, 0.2f);
  a.dropout = 0.1f;
  a.stream = 9;
  a.maskRowStride = sk;
  a.maskColStride = 1;
  ctx.seed = 41;
  ctx.batch = 2;
  unsigned seed = 2020;
  for (Storage16 storage : storages16()) {
    SCOPED_TRACE(storageName(storage));
    const bool bf16 = storage == Storage16::Bf16;
    Inputs in = randomInputs(a, seed);
    seed += 10;
    causalMask(a, in);
    Inputs16 bits = roundInputs(in, storage);
    const uint16_t *q = upload(bits.q), *k = upload(bits.k);
    const uint16_t *v = upload(bits.v), *dout = upload(bits.dout);
    const unsigned char *mask = maskOf(in);
    Outputs fwd = outputs(a);
    attentionForward16(ctx, storage, a, q, k, v, mask, fwd.out, fwd.lse);
    std::vector<float> outF = take(fwd.out, fwd.outSize, "out");
    std::vector<uint16_t> out16(outF.size());
    for (size_t i = 0; i < outF.size(); ++i)
      out16[i] = bf16 ? floatToBf16(outF[i]) : floatToHalf(outF[i]);
    const uint16_t *outNarrow = upload(out16);

    for (bool narrowOut : {false, true}) {
      SCOPED_TRACE(narrowOut ? "16-bit output" : "float32 output");
      Outputs wide = outputs(a);
      uint16_t *dq = upload(std::vector<uint16_t>(wide.dqSize, 0x7777), kGuard);
      uint16_t *dk = upload(std::vector<uint16_t>(wide.dkSize, 0x7777), kGuard);
      uint16_t *dv = upload(std::vector<uint16_t>(wide.dvSize, 0x7777), kGuard);
      if (narrowOut) {
        attentionBackward16(ctx, storage, a, q, k, v, mask, outNarrow, fwd.lse,
                            dout, wide.dq, wide.dk, wide.dv);
        attentionBackward16(ctx, storage, a, q, k, v, mask, outNarrow, fwd.lse,
                            dout, dq, dk, dv);
      } else {
        attentionBackward16(ctx, storage, a, q, k, v, mask, fwd.out, fwd.lse,
                            dout, wide.dq, wide.dk, wide.dv);
        attentionBackward16(ctx, storage, a, q, k, v, mask, fwd.out, fwd.lse,
                            dout, dq, dk, dv);
      }
      EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
      auto expectRounded = [&](const float *f, const uint16_t *g, size_t n,
                               const char *name) {
        SCOPED_TRACE(name);
        std::vector<float> full = take(f, n, name);
        std::vector<uint16_t> got = download(g, n + kGuard);
        for (size_t i = n; i < n + kGuard; ++i)
          EXPECT_EQ(got[i], static_cast<uint16_t>(kSentinel))
              << "written past the end at " << i;
        got.resize(n);
        std::vector<uint16_t> rounded(n);
        for (size_t i = 0; i < n; ++i)
          rounded[i] = bf16 ? floatToBf16(full[i]) : floatToHalf(full[i]);
        EXPECT_EQ(got, rounded);
        // Not all zeros: the rounding compared real gradients.
        EXPECT_TRUE(std::any_of(full.begin(), full.end(),
                                [](float x) { return x != 0.0f; }));
      };
      expectRounded(wide.dq, dq, wide.dqSize, "dq");
      expectRounded(wide.dk, dk, wide.dkSize, "dk");
      expectRounded(wide.dv, dv, wide.dvSize, "dv");
    }
  }
}

TEST_F(Attention, StridedLayoutsMatchContiguous) {
  // Query, key and value read where one projection writes them ([B, S, 3,
  // H, D]: sliced apart, heads interleaved with the sequence); the output,
  // its gradient and the three gradients [B, S, H, D] (seq_major). The
  // results are bitwise the contiguous layouts', in float32 and in bf16,
  // under a causal mask and dropout.
  const int64_t B = 2, H = 3, S = 45, D = 24;
  AttentionDims flat = attentionDims(B * H, S, S, D, D, 0.2f);
  flat.dropout = 0.1f;
  flat.stream = 3;
  flat.maskRowStride = S;
  flat.maskColStride = 1;
  ctx.seed = 5;
  ctx.batch = 1;
  const AttentionLayout packed{S * 3 * H * D, D, 3 * H * D};
  const AttentionLayout seqMajor{S * H * D, D, H * D};
  AttentionDims strided = flat;
  strided.heads = H;
  strided.rows = {packed,   packed,   packed,   seqMajor,
                  seqMajor, seqMajor, seqMajor, seqMajor};
  const size_t n = B * H * S * D;
  auto place = [&](const AttentionLayout &l, int64_t h, int64_t i) {
    return (h / H) * l.batch + (h % H) * l.head + i * l.row;
  };
  // Contiguous [B * H, S, D] values to their places in `to`, from `at`.
  auto scatter = [&](const auto &from, const AttentionLayout &l, auto &to,
                     int64_t at) {
    for (int64_t h = 0; h < B * H; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t c = 0; c < D; ++c)
          to[at + place(l, h, i) + c] = from[(h * S + i) * D + c];
  };
  // Query, key and value packed as the projection writes them, and the
  // output gradient [B, S, H, D] (float32 or 16-bit inputs).
  auto pack = [&](const auto &values) {
    using T = std::decay_t<decltype(values.q[0])>;
    std::vector<T> qkv(3 * n), dout(n);
    scatter(values.q, packed, qkv, 0);
    scatter(values.k, packed, qkv, H * D);
    scatter(values.v, packed, qkv, 2 * H * D);
    scatter(values.dout, seqMajor, dout, 0);
    return std::pair(std::move(qkv), std::move(dout));
  };
  auto gather = [&](const std::vector<float> &from) {
    std::vector<float> to(n);
    for (int64_t h = 0; h < B * H; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t c = 0; c < D; ++c)
          to[(h * S + i) * D + c] = from[place(seqMajor, h, i) + c];
    return to;
  };
  auto expectSame = [&](const Result &got, const Result &want) {
    EXPECT_EQ(gather(got.out), want.out);
    EXPECT_EQ(got.lse, want.lse);
    EXPECT_EQ(gather(got.dq), want.dq);
    EXPECT_EQ(gather(got.dk), want.dk);
    EXPECT_EQ(gather(got.dv), want.dv);
  };

  Inputs in = randomInputs(flat, 77);
  causalMask(flat, in);
  const unsigned char *mask = maskOf(in);
  {
    SCOPED_TRACE("float32");
    Result want = run(flat, in);
    auto [qkv, dout] = pack(in);
    const float *p = upload(qkv);
    Outputs o = outputs(flat);
    attentionForward(ctx, strided, p, p + H * D, p + 2 * H * D, mask, o.out,
                     o.lse);
    attentionBackward(ctx, strided, p, p + H * D, p + 2 * H * D, mask, o.out,
                      o.lse, upload(dout), o.dq, o.dk, o.dv);
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    expectSame(collect(o), want);
  }
  {
    SCOPED_TRACE("bf16");
    Inputs16 bits = roundInputs(in, Storage16::Bf16);
    Result want = run16(flat, Storage16::Bf16, in, bits);
    auto [qkv, dout] = pack(bits);
    const uint16_t *p = upload(qkv);
    Outputs o = outputs(flat);
    attentionForward16(ctx, Storage16::Bf16, strided, p, p + H * D,
                       p + 2 * H * D, mask, o.out, o.lse);
    attentionBackward16(ctx, Storage16::Bf16, strided, p, p + H * D,
                        p + 2 * H * D, mask, o.out, o.lse, upload(dout), o.dq,
                        o.dk, o.dv);
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    expectSame(collect(o), want);
  }
  // The three gradients written straight into one packed [B, S, 3, H, D]
  // buffer, where a concat would put them (the packed projection's
  // gradient): float32, and 16-bit gradients of 16-bit operands. Each is
  // the contiguous gradient (rounded as a conversion rounds it), and
  // together they fill the buffer.
  AttentionDims intoPacked = strided;
  intoPacked.rows.dq = intoPacked.rows.dk = intoPacked.rows.dv = packed;
  auto unpack = [&](const auto &from, int64_t at) {
    std::vector<std::decay_t<decltype(from[0])>> to(n);
    for (int64_t h = 0; h < B * H; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t c = 0; c < D; ++c)
          to[(h * S + i) * D + c] = from[at + place(packed, h, i) + c];
    return to;
  };
  {
    SCOPED_TRACE("float32 gradients packed");
    Result want = run(flat, in);
    auto [qkv, dout] = pack(in);
    const float *p = upload(qkv);
    Outputs o = outputs(flat);
    attentionForward(ctx, strided, p, p + H * D, p + 2 * H * D, mask, o.out,
                     o.lse);
    float *grads = upload(std::vector<float>(3 * n, kSentinel), kGuard);
    attentionBackward(ctx, intoPacked, p, p + H * D, p + 2 * H * D, mask,
                      o.out, o.lse, upload(dout), grads, grads + H * D,
                      grads + 2 * H * D);
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    std::vector<float> all = take(grads, 3 * n, "packed gradients");
    EXPECT_EQ(unpack(all, 0), want.dq);
    EXPECT_EQ(unpack(all, H * D), want.dk);
    EXPECT_EQ(unpack(all, 2 * H * D), want.dv);
    EXPECT_EQ(std::count(all.begin(), all.end(), kSentinel), 0);
  }
  {
    SCOPED_TRACE("bf16 gradients packed");
    Inputs16 bits = roundInputs(in, Storage16::Bf16);
    Result want = run16(flat, Storage16::Bf16, in, bits);
    auto [qkv, dout] = pack(bits);
    const uint16_t *p = upload(qkv);
    Outputs o = outputs(flat);
    attentionForward16(ctx, Storage16::Bf16, strided, p, p + H * D,
                       p + 2 * H * D, mask, o.out, o.lse);
    uint16_t *grads = upload(std::vector<uint16_t>(3 * n, 0x7777), kGuard);
    attentionBackward16(ctx, Storage16::Bf16, intoPacked, p, p + H * D,
                        p + 2 * H * D, mask, o.out, o.lse, upload(dout), grads,
                        grads + H * D, grads + 2 * H * D);
    EXPECT_FALSE(hasError(ctx)) << ctx.firstError;
    std::vector<uint16_t> all = download(grads, 3 * n + kGuard);
    for (size_t i = 3 * n; i < 3 * n + kGuard; ++i)
      EXPECT_EQ(all[i], static_cast<uint16_t>(kSentinel))
          << "written past the end at " << i;
    all.resize(3 * n);
    auto rounded = [](const std::vector<float> &f) {
      std::vector<uint16_t> r(f.size());
      for (size_t i = 0; i < f.size(); ++i)
        r[i] = floatToBf16(f[i]);
      return r;
    };
    EXPECT_EQ(unpack(all, 0), rounded(want.dq));
    EXPECT_EQ(unpack(all, H * D), rounded(want.dk));
    EXPECT_EQ(unpack(all, 2 * H * D), rounded(want.dv));
    EXPECT_EQ(std::count(all.begin(), all.end(), uint16_t{0x7777}), 0);
  }
}

// The CUDA launches' tile order (KernelCommon.h), checked on the host: every
// tile of every head exactly once, heads in groups, and within a group the
// tiles a causal mask gives the most live chunks first.
TEST(AttentionTileOrder, PlacesEveryTileOnceHeaviestFirst) {
  for (int64_t heads : {1, 3, 8, 13})
    for (int64_t perHead : {1, 5, 16})
      for (int64_t groupHeads : {int64_t{1}, int64_t{2}, int64_t{4}, heads})
        for (bool lastFirst : {true, false}) {
          SCOPED_TRACE("heads " + std::to_string(heads) + ", tiles " +
                       std::to_string(perHead) + ", group " +
                       std::to_string(groupHeads) +
                       (lastFirst ? ", last first" : ", first first"));
          AttentionTileOrder order;
          order.groupHeads = groupHeads;
          order.lastFirst = lastFirst;
          std::vector<int> seen(heads * perHead, 0);
          int64_t lastGroup = 0, lastWork = perHead + 1;
          for (int64_t tile = 0; tile < heads * perHead; ++tile) {
            int64_t head = -1, index = -1;
            attentionTilePlace(tile, heads, perHead, order, head, index);
            ASSERT_TRUE(head >= 0 && head < heads && index >= 0 &&
                        index < perHead)
                << "tile " << tile << " -> " << head << ", " << index;
            ++seen[head * perHead + index];
            // A causal mask's live chunks: the tile's position from the
            // sequence's start (queries) or end (keys).
            const int64_t work = lastFirst ? index + 1 : perHead - index;
            const int64_t group = head / groupHeads;
            ASSERT_GE(group, lastGroup) << "tile " << tile;
            if (group == lastGroup) {
              EXPECT_LE(work, lastWork) << "tile " << tile;
            }
            lastGroup = group;
            lastWork = work;
          }
          EXPECT_EQ(std::count(seen.begin(), seen.end(), 1),
                    static_cast<std::ptrdiff_t>(heads * perHead));
        }
}

TEST(AttentionTileOrder, GroupsAsManyHeadsAsHalfTheL2Holds) {
  // GPT-2 small at batch 8: 96 heads, K and V rows of 1024 x (64 + 64)
  // bf16 (256 KiB a head), on a 60 MiB L2: all heads in one group.
  EXPECT_EQ(attentionTileOrder(96, 1024 * 128 * 2, 60 << 20, true).groupHeads,
            96);
  // 4 MiB a head on a 50 MiB L2: 6 heads.
  EXPECT_EQ(attentionTileOrder(256, 4 << 20, 50 << 20, true).groupHeads, 6);
  // Nothing known of the L2, or one head larger than it: head by head.
  EXPECT_EQ(attentionTileOrder(96, 1024 * 128 * 2, 0, true).groupHeads, 1);
  EXPECT_EQ(attentionTileOrder(8, 64 << 20, 50 << 20, false).groupHeads, 1);
  EXPECT_TRUE(attentionTileOrder(8, 1, 1, true).lastFirst);
  EXPECT_FALSE(attentionTileOrder(8, 1, 1, false).lastFirst);
}

} // namespace
