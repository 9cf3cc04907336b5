//===- KernelTestFixture.h - Device buffers for kernel tests ----*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The fixture every kernel test uses. Tensors go through the device layer,
// so the same test files test the CPU library (mtc-runtime-tests) and the
// CUDA library (mtc-runtime-cuda-tests), where the fixture skips the test
// when no GPU is present. It lives in a named namespace so that all the
// test files share one fixture type (GoogleTest requires that of a suite).
//
//===----------------------------------------------------------------------===//

#ifndef MTC_TEST_UNIT_RUNTIME_KERNELTESTFIXTURE_H
#define MTC_TEST_UNIT_RUNTIME_KERNELTESTFIXTURE_H

#include "Context.h"
#include "Device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mtc::rt::unittest {

class Kernels : public ::testing::Test {
protected:
  void SetUp() override {
    Status s = device::initialize(ctx);
    if (!s.ok())
      GTEST_SKIP() << "no usable device: " << s.message();
    ready = true;
  }
  void TearDown() override {
    for (unsigned char *p : allocations)
      device::release(p);
    if (ready)
      device::shutdown(ctx);
  }

  /// Device copy of `values` plus `guard` trailing elements set to a
  /// sentinel, so that tests can check a kernel writes nothing past the end.
  template <typename T>
  T *upload(const std::vector<T> &values, size_t guard = 0) {
    std::vector<T> padded = values;
    padded.resize(values.size() + guard, static_cast<T>(kSentinel));
    unsigned char *p = nullptr;
    Status s = device::allocate(padded.size() * sizeof(T) + 1, &p);
    EXPECT_TRUE(s.ok()) << s.message();
    allocations.push_back(p);
    EXPECT_TRUE(
        device::copyToDevice(ctx, p, padded.data(), padded.size() * sizeof(T))
            .ok());
    return reinterpret_cast<T *>(p);
  }

  template <typename T> std::vector<T> download(const T *p, size_t n) {
    std::vector<T> out(n);
    EXPECT_TRUE(device::copyToHost(ctx, out.data(), p, n * sizeof(T)).ok());
    EXPECT_TRUE(device::synchronize(ctx).ok());
    return out;
  }

  static constexpr float kSentinel = 12345.0f;
  Context ctx;
  bool ready = false;
  std::vector<unsigned char *> allocations;
};

inline void expectNear(const std::vector<float> &actual,
                       const std::vector<float> &expected, float tol = 1e-6f) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tol) << "at index " << i;
}

/// |actual - expected| <= rel * |expected| + abs for every element; abs
/// covers the expected values that are (nearly) zero.
inline void expectRelNear(const std::vector<float> &actual,
                          const std::vector<double> &expected, double rel,
                          double abs) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_LE(std::fabs(actual[i] - expected[i]),
              rel * std::fabs(expected[i]) + abs)
        << "at index " << i << ": " << actual[i] << " vs " << expected[i];
}

} // namespace mtc::rt::unittest

#endif // MTC_TEST_UNIT_RUNTIME_KERNELTESTFIXTURE_H
