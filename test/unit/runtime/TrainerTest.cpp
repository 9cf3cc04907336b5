//===- TrainerTest.cpp - Tests of the trainer's main program --------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// A hand-written "generated" trainer for loss = sum(w * w) with plain SGD
// (so w shrinks by 1 - 2 lr per step), enough to exercise the command line,
// checkpoints and exit codes without a compiler.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Trainer.h"
#include "mtc/runtime/Kernels.h"
#include "mtc/runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace mtc::rt;

namespace {

// Arena layout: w [2] at 0, w.grad [2] at 8, loss at 16.
constexpr float kLearningRate = 0.25f;

void squareStep(Context &ctx, unsigned char *arena) {
  float *w = reinterpret_cast<float *>(arena);
  float *grad = reinterpret_cast<float *>(arena + 8);
  float *loss = reinterpret_cast<float *>(arena + 16);
  *loss = w[0] * w[0] + w[1] * w[1];
  grad[0] = 2 * w[0];
  grad[1] = 2 * w[1];
  sgdUpdate(ctx, 2, w, grad, nullptr, kLearningRate, 0.0f, 0.0f, false,
            nullptr);
}

const TensorDesc kTensors[] = {
    {"w", Role::Param, DType::F32, 1, {2}, 0, 8, -1},
    {"w.grad", Role::Grad, DType::F32, 1, {2}, 8, 8, 0},
    {"loss", Role::Loss, DType::F32, 0, {}, 16, 4, -1},
};

class Trainer : public ::testing::Test {
protected:
  void SetUp() override {
    const float w[2] = {1.0f, -2.0f};
    Status s =
        encodeSafetensors({{"w", DType::F32, {2}, w, sizeof(w)}}, {}, init);
    ASSERT_TRUE(s.ok()) << s.message();
    desc = {"square", "cpu", "sgd(lr=0.25)", 20,          kTensors,
            3,        1,     init.data(),    init.size(), squareStep};
    dir = ::testing::TempDir() + "/mtc_trainer_test." +
          std::to_string(::getpid());
    ::mkdir(dir.c_str(), 0755);
  }
  void TearDown() override {
    for (const char *f :
         {"a.safetensors", "b.safetensors", "g.safetensors", "m.jsonl"})
      std::remove((dir + "/" + f).c_str());
    ::rmdir(dir.c_str());
  }

  int runTrainer(std::vector<std::string> args) {
    args.insert(args.begin(), "trainer");
    std::vector<char *> argv;
    for (std::string &a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    return trainerMain(static_cast<int>(args.size()), argv.data(), desc);
  }

  std::vector<float> readW(const std::string &path, std::string *step) {
    SafetensorsReader r;
    Status s = r.open(path);
    EXPECT_TRUE(s.ok()) << s.message();
    const SafetensorsTensor *t = r.find("w");
    if (!t)
      return {};
    if (step)
      *step = r.metadata().count("step") ? r.metadata().at("step") : "";
    const float *p = reinterpret_cast<const float *>(r.data(*t));
    return {p[0], p[1]};
  }

  std::vector<unsigned char> init;
  ModelDesc desc;
  std::string dir;
};

TEST_F(Trainer, CommandLineErrorsExitWithTwo) {
  EXPECT_EQ(runTrainer({"--help"}), 0);
  EXPECT_EQ(runTrainer({"--steps", "1", "--bogus"}), 2);
  EXPECT_EQ(runTrainer({}), 2) << "--steps is required";
  EXPECT_EQ(runTrainer({"--steps"}), 2);
  EXPECT_EQ(runTrainer({"--save", "--steps", "1"}), 2);
  EXPECT_EQ(runTrainer({"--steps", "ten"}), 2);
  EXPECT_EQ(runTrainer({"--steps", "-1"}), 2);
  EXPECT_EQ(runTrainer({"--steps", "1", "--log-every", "0"}), 2);
  EXPECT_EQ(
      runTrainer({"--steps", "0", "--dump-grads", dir + "/g.safetensors"}), 2);
}

TEST_F(Trainer, SaveLoadAndDumpGrads) {
  std::string a = dir + "/a.safetensors", b = dir + "/b.safetensors";
  std::string g = dir + "/g.safetensors";
  ASSERT_EQ(runTrainer({"--steps", "2", "--save", a, "--dump-grads", g,
                        "--metrics", dir + "/m.jsonl"}),
            0);
  // Each step multiplies w by 1 - 2 * lr = 0.5.
  std::string step;
  EXPECT_EQ(readW(a, &step), (std::vector<float>{0.25f, -0.5f}));
  EXPECT_EQ(step, "2");
  // The gradient of step 2 (taken at w = [0.5, -1]) under the parameter's name.
  EXPECT_EQ(readW(g, &step), (std::vector<float>{1.0f, -2.0f}));

  // Resuming continues from the checkpoint and its step counter.
  ASSERT_EQ(runTrainer({"--steps", "1", "--load", a, "--save", b}), 0);
  EXPECT_EQ(readW(b, &step), (std::vector<float>{0.125f, -0.25f}));
  EXPECT_EQ(step, "3");

  // --steps 0 saves the initial values (here: those loaded).
  ASSERT_EQ(runTrainer({"--steps", "0", "--save", b}), 0);
  EXPECT_EQ(readW(b, &step), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(step, "0");
}

TEST_F(Trainer, LoadRequiresEveryParameter) {
  std::string a = dir + "/a.safetensors";
  const float other[2] = {0, 0};
  ASSERT_TRUE(writeSafetensors(a, {{"v", DType::F32, {2}, other, 8}}, {}).ok());
  EXPECT_EQ(runTrainer({"--steps", "1", "--load", a}), 1);
  // Right name, wrong shape.
  ASSERT_TRUE(
      writeSafetensors(a, {{"w", DType::F32, {1, 2}, other, 8}}, {}).ok());
  EXPECT_EQ(runTrainer({"--steps", "1", "--load", a}), 1);
  EXPECT_EQ(runTrainer({"--steps", "1", "--load", dir + "/missing"}), 1);
}

} // namespace
