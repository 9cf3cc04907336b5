// RUN: mtc-opt %s --mtc-autodiff --mtc-optimizer="optimizer=adamw lr=0.01" --mtc-precision="precision=bf16" | FileCheck %s
// RUN: mtc-opt %s --mtc-autodiff --mtc-precision="precision=bf16" | FileCheck %s --check-prefix=FROZEN
// RUN: mtc-opt %s --mtc-autodiff --mtc-optimizer="optimizer=sgd lr=0.01" --mtc-precision="precision=bf16" | FileCheck %s --check-prefix=SGD
// RUN: mtc-opt %s --mtc-autodiff --mtc-optimizer="optimizer=adamw lr=0.01" --mtc-precision="precision=fp16 parameter-copies=false" | FileCheck %s --check-prefix=OFF

// The weights' 16-bit copies are arguments of their own (role param_copy,
// owner: the weight) that the GEMMs read; no conversion of a weight is
// left. Each AdamW update writes its copy too (new_param16, a result tied to
// the copy's argument), after the copy's last reader: fc2's update follows
// its input gradient's GEMM. The biases, which no GEMM multiplies, have no
// copy.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W1:[^:]+]]: tensor<5x3xf32> {mtc.name = "fc1.weight", mtc.role = "param"}
// CHECK-SAME: %[[W2:[^:]+]]: tensor<2x5xf32> {mtc.name = "fc2.weight", mtc.role = "param"}
// CHECK-SAME: %[[W1H:[^:]+]]: tensor<5x3xbf16> {mtc.name = "fc1.weight.bf16", mtc.owner = 2 : i64, mtc.role = "param_copy"}
// CHECK-SAME: %[[W2H:[^:]+]]: tensor<2x5xbf16> {mtc.name = "fc2.weight.bf16", mtc.owner = 4 : i64, mtc.role = "param_copy"}
// CHECK-SAME: tensor<5x3xbf16> {mtc.role = "update", mtc.tied = [[#W1ARG:]] : i64}
// CHECK-NOT: mtc.convert %[[W1]]
// CHECK-NOT: mtc.convert %[[W2]]
// CHECK: mtc.matmul %{{.+}}, %[[W1H]] {transpose_b = true}
// CHECK: mtc.matmul %{{.+}}, %[[W2H]] {transpose_b = true}
// CHECK: mtc.matmul %{{.+}}, %[[W2H]] {mtc.backward}
// CHECK: %{{.+}}, %{{.+}}, %{{.+}}, %[[NEW2:.+]] = mtc.adamw_update %[[W2]], %{{.+}}, %{{.+}}, %{{.+}} copy %[[W2H]] {{{.*}}} : tensor<2x5xf32>, tensor<2x5xbf16> -> tensor<2x5xbf16>
// CHECK: %{{.+}}, %{{.+}}, %{{.+}}, %[[NEW1:.+]] = mtc.adamw_update %[[W1]], %{{.+}}, %{{.+}}, %{{.+}} copy %[[W1H]] {{{.*}}} : tensor<5x3xf32>, tensor<5x3xbf16> -> tensor<5x3xbf16>
// CHECK: return {{.*}}, %[[NEW1]], %[[NEW2]] :

// Frozen weights (no update) read copies the trainer forms at start-up.
// FROZEN-LABEL: func.func @train_step
// FROZEN-SAME: %[[W1H:[^:]+]]: tensor<5x3xbf16> {mtc.name = "fc1.weight.bf16", mtc.owner = 2 : i64, mtc.role = "param_copy"}
// FROZEN-NOT: mtc.convert %arg2
// FROZEN: mtc.matmul %{{.+}}, %[[W1H]] {transpose_b = true}
// FROZEN-NOT: {mtc.role = "update"

// SGD cannot write a copy: the weights are converted as before.
// SGD-LABEL: func.func @train_step
// SGD-NOT: param_copy
// SGD: mtc.convert %arg2 : tensor<5x3xf32> to tensor<5x3xbf16>

// OFF-LABEL: func.func @train_step
// OFF-NOT: param_copy
// OFF: mtc.convert %arg2 : tensor<5x3xf32> to tensor<5x3xf16>
func.func @forward(%x: tensor<4x3xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<4xi64> {mtc.name = "target", mtc.role = "input"},
                   %w1: tensor<5x3xf32> {mtc.name = "fc1.weight", mtc.role = "param"},
                   %b1: tensor<5xf32> {mtc.name = "fc1.bias", mtc.role = "param"},
                   %w2: tensor<2x5xf32> {mtc.name = "fc2.weight", mtc.role = "param"},
                   %b2: tensor<2xf32> {mtc.name = "fc2.bias", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %mm0 = mtc.matmul %x, %w1 {transpose_b = true} : (tensor<4x3xf32>, tensor<5x3xf32>) -> tensor<4x5xf32>
  %0 = mtc.add %mm0, %b1 : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %1 = mtc.tanh %0 : tensor<4x5xf32>
  %mm2 = mtc.matmul %1, %w2 {transpose_b = true} : (tensor<4x5xf32>, tensor<2x5xf32>) -> tensor<4x2xf32>
  %2 = mtc.add %mm2, %b2 : (tensor<4x2xf32>, tensor<2xf32>) -> tensor<4x2xf32>
  %l, %p = mtc.softmax_cross_entropy %2, %t : (tensor<4x2xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x2xf32>)
  return %l : tensor<f32>
}
