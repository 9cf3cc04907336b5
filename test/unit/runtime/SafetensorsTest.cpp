//===- SafetensorsTest.cpp - Tests of checkpoint files --------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace mtc::rt;

namespace {

/// A fresh, empty directory for one test.
std::string makeTempDir(const char *name) {
  std::string dir =
      ::testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
        names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

std::vector<unsigned char> fileBytes(const std::string &path) {
  std::vector<unsigned char> bytes;
  if (std::FILE *f = std::fopen(path.c_str(), "rb")) {
    int c;
    while ((c = std::fgetc(f)) != EOF)
      bytes.push_back(static_cast<unsigned char>(c));
    std::fclose(f);
  }
  return bytes;
}

/// A safetensors image with the given JSON header and data section.
std::vector<unsigned char> image(const std::string &header, size_t dataBytes) {
  std::vector<unsigned char> out;
  for (int i = 0; i < 8; ++i)
    out.push_back(
        static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i)));
  for (char c : header)
    out.push_back(static_cast<unsigned char>(c));
  out.resize(out.size() + dataBytes, 0);
  return out;
}

TEST(Safetensors, RoundTrip) {
  std::string dir = makeTempDir("mtc_st_roundtrip");
  std::string path = dir + "/ckpt.safetensors";
  const float weight[4] = {1.0f, -2.0f, 3.5f, 0.25f};
  const int64_t counts[3] = {5, -6, 1LL << 50};
  std::vector<SafetensorsEntry> tensors = {
      {"fc.weight", DType::F32, {2, 2}, weight, sizeof(weight)},
      {"bn.num_batches", DType::I64, {3}, counts, sizeof(counts)},
  };
  Status s =
      writeSafetensors(path, tensors, {{"step", "7"}, {"format", "mtc"}});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(listDir(dir), std::vector<std::string>{"ckpt.safetensors"});

  auto bytes = fileBytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | bytes[i];
  EXPECT_EQ((8 + headerLen) % 8, 0u) << "data must start 8-byte aligned";

  SafetensorsReader r;
  s = r.open(path);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(r.tensors().size(), 2u);
  // Sorted by name.
  EXPECT_EQ(r.tensors()[0].name, "bn.num_batches");
  EXPECT_EQ(r.tensors()[1].name, "fc.weight");
  const SafetensorsTensor *w = r.find("fc.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::memcmp(r.data(*w), weight, sizeof(weight)), 0);
  const SafetensorsTensor *c = r.find("bn.num_batches");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, "I64");
  EXPECT_EQ(std::memcmp(r.data(*c), counts, sizeof(counts)), 0);
  EXPECT_EQ(r.metadata().at("step"), "7");
  EXPECT_EQ(r.metadata().at("format"), "mtc");

  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(Safetensors, FailedWriteKeepsTheOldFile) {
  std::string dir = makeTempDir("mtc_st_atomic");
  std::string path = dir + "/ckpt.safetensors";
  const float small[1] = {42.0f};
  Status s = writeSafetensors(path, {{"w", DType::F32, {1}, small, 4}}, {});
  ASSERT_TRUE(s.ok()) << s.message();
  auto before = fileBytes(path);

  // Make the second write fail halfway through with EFBIG.
  std::vector<float> big(1 << 16, 1.0f);
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit tight = old;
  tight.rlim_cur = 4096;
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tight), 0);
  s = writeSafetensors(path,
                       {{"w",
                         DType::F32,
                         {int64_t(big.size())},
                         big.data(),
                         big.size() * sizeof(float)}},
                       {});
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();

  EXPECT_EQ(fileBytes(path), before);
  EXPECT_EQ(listDir(dir), std::vector<std::string>{"ckpt.safetensors"})
      << "the temporary file must be removed";

  // A rename onto a directory fails too, also without leftovers.
  std::string sub = dir + "/sub";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  s = writeSafetensors(sub, {{"w", DType::F32, {1}, small, 4}}, {});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(listDir(dir).size(), 2u);

  ::rmdir(sub.c_str());
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(Safetensors, RejectsMalformedHeaders) {
  const std::string good =
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  SafetensorsReader r;
  auto check = [&](const std::vector<unsigned char> &bytes,
                   const char *expected) {
    Status s = r.parse(bytes.data(), bytes.size(), "t.safetensors");
    ASSERT_FALSE(s.ok()) << "accepted; expected: " << expected;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  };

  auto ok = image(good, 8);
  Status s = r.parse(ok.data(), ok.size(), "t.safetensors");
  ASSERT_TRUE(s.ok()) << s.message();

  check({1, 2, 3}, "shorter than");
  auto tooLong = ok;
  tooLong[0] = 0xff;
  check(tooLong, "exceeds the file size");
  check(image("[1,2]", 0), "JSON object");
  check(image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8),
        "invalid JSON");
  check(image(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8),
        "unknown dtype");
  check(image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
        "need 12");
  check(image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              8),
        "must not overlap");
  check(image(good, 12), "data section has 12");
  check(image(R"({"__metadata__":{"step":3},)"
              R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
              8),
        "not a string");
  check(image(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
        "non-negative");
}

} // namespace
