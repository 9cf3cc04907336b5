//===- NpyTest.cpp - Tests of the .npy reader -----------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The images are built byte by byte from the format description in
// numpy.lib.format, so the tests do not depend on NumPy being installed.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace mtc::rt;

namespace {

/// A .npy image of format version `major`.0 with header dict `dict`,
/// padded as np.save pads it (total prefix a multiple of 64, ending '\n').
std::vector<unsigned char> npyImage(int major, const std::string &dict,
                                    const void *data, size_t bytes) {
  std::vector<unsigned char> out = {
      0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  uint32_t len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < prefix - 8; ++i)
    out.push_back(static_cast<unsigned char>(len >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  const unsigned char *p = static_cast<const unsigned char *>(data);
  out.insert(out.end(), p, p + bytes);
  return out;
}

TEST(Npy, ReadsVersion1Float32) {
  const float values[6] = {0.5f, -1.0f, 2.0f, 3.25f, 4.0f, -5.5f};
  auto image =
      npyImage(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
               values, sizeof(values));
  NpyArray a;
  Status s = a.parse(image.data(), image.size(), "x.npy");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.dataBytes(), sizeof(values));
  EXPECT_EQ(std::memcmp(a.data(), values, sizeof(values)), 0);
}

TEST(Npy, ReadsVersion2Int64AndWidensInt32) {
  const int64_t labels[4] = {0, 7, -1, 1LL << 40};
  auto image =
      npyImage(2, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }",
               labels, sizeof(labels));
  NpyArray a;
  Status s = a.parse(image.data(), image.size(), "y.npy");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.dtype(), DType::I64);
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(std::memcmp(a.data(), labels, sizeof(labels)), 0);

  const int32_t small[3] = {3, -2, 9};
  image =
      npyImage(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
               small, sizeof(small));
  s = a.parse(image.data(), image.size(), "y.npy");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.dtype(), DType::I64);
  EXPECT_EQ(a.descr(), "<i4");
  ASSERT_EQ(a.dataBytes(), 3 * sizeof(int64_t));
  int64_t wide[3];
  std::memcpy(wide, a.data(), sizeof(wide));
  EXPECT_EQ(wide[0], 3);
  EXPECT_EQ(wide[1], -2);
  EXPECT_EQ(wide[2], 9);
}

TEST(Npy, RejectsFortranOrder) {
  const float values[4] = {1, 2, 3, 4};
  auto image =
      npyImage(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
               values, sizeof(values));
  NpyArray a;
  Status s = a.parse(image.data(), image.size(), "x.npy");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Fortran"), std::string::npos) << s.message();
}

TEST(Npy, RejectsBadMagicTruncationAndOtherDtypes) {
  const float values[4] = {1, 2, 3, 4};
  auto good =
      npyImage(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
               values, sizeof(values));
  NpyArray a;

  auto badMagic = good;
  badMagic[1] = 'X';
  Status s = a.parse(badMagic.data(), badMagic.size(), "x.npy");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();

  s = a.parse(good.data(), good.size() - 1, "x.npy");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();

  s = a.parse(good.data(), 20, "x.npy"); // cut inside the header
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();

  const double wide[2] = {1, 2};
  auto f8 =
      npyImage(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
               wide, sizeof(wide));
  s = a.parse(f8.data(), f8.size(), "x.npy");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'<f8'"), std::string::npos) << s.message();
}

TEST(Npy, OpensFilesAndNamesMissingOnes) {
  const float values[2] = {1.5f, 2.5f};
  auto image =
      npyImage(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
               values, sizeof(values));
  std::string path = ::testing::TempDir() + "/mtc_npy_test.npy";
  std::FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(image.data(), 1, image.size(), f);
  std::fclose(f);

  NpyArray a;
  Status s = a.open(path);
  ASSERT_TRUE(s.ok()) << s.message();
  NpyArray moved = std::move(a);
  ASSERT_EQ(moved.dataBytes(), sizeof(values));
  EXPECT_EQ(std::memcmp(moved.data(), values, sizeof(values)), 0);
  std::remove(path.c_str());

  s = a.open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

} // namespace
