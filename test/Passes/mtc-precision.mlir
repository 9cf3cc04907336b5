// RUN: mtc-opt %s --split-input-file --mtc-autodiff --mtc-precision="precision=bf16" | FileCheck %s
// RUN: mtc-opt %s --split-input-file --mtc-autodiff --mtc-precision="precision=fp32" | FileCheck %s --check-prefix=FP32

// Both operands of every GEMM, forward and backward, go to bfloat16; each
// value is converted once, before its first GEMM: the weight once per step
// (its copy serves the backward GEMM too), the input once (the weight
// gradient's GEMM reads the same 16-bit copy), the upstream gradient once
// for both backward GEMMs. Results, the bias and everything else stay f32.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x3xf32>
// CHECK-SAME: %[[W:[^:]+]]: tensor<5x3xf32>
// CHECK-SAME: %[[B:[^:]+]]: tensor<5xf32>
// CHECK: %[[XH:.+]] = mtc.convert %[[X]] : tensor<4x3xf32> to tensor<4x3xbf16>
// CHECK-NEXT: %[[WH:.+]] = mtc.convert %[[W]] : tensor<5x3xf32> to tensor<5x3xbf16>
// CHECK-NEXT: %[[Y:.+]] = mtc.gemm %[[XH]], %[[WH]], %[[B]] {transB = true} : (tensor<4x3xbf16>, tensor<5x3xbf16>, tensor<5xf32>) -> tensor<4x5xf32>
// CHECK: %[[H:.+]] = mtc.tanh %[[Y]] : tensor<4x5xf32>
// CHECK: %[[DYH:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<4x5xf32> to tensor<4x5xbf16>
// CHECK-NEXT: %[[DW:.+]] = mtc.gemm %[[DYH]], %[[XH]] {mtc.backward, transA = true} : (tensor<4x5xbf16>, tensor<4x3xbf16>) -> tensor<5x3xf32>
// CHECK-NOT: mtc.convert %[[W]]
// CHECK-NOT: mtc.convert %[[X]]
// CHECK: return
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<4x3xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<4xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<5x3xf32> {mtc.name = "fc.weight", mtc.role = "param"},
                   %b: tensor<5xf32> {mtc.name = "fc.bias", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.gemm %x, %w, %b {transB = true} : (tensor<4x3xf32>, tensor<5x3xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %1 = mtc.tanh %0 : tensor<4x5xf32>
  %l, %p = mtc.softmax_cross_entropy %1, %t : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  return %l : tensor<f32>
}

// -----

// Batched matmul (attention scores): both operands converted, result f32;
// the backward matmuls reuse the forward copies.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x4x8xf32>
// CHECK-SAME: %[[K:[^:]+]]: tensor<2x4x8xf32>
// CHECK: %[[QH:.+]] = mtc.convert %[[Q]] : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
// CHECK-NEXT: %[[KH:.+]] = mtc.convert %[[K]] : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
// CHECK-NEXT: mtc.matmul %[[QH]], %[[KH]] {transpose_b = true} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> tensor<2x4x4xf32>
// CHECK: mtc.matmul %{{.+}}, %[[KH]] {mtc.backward}
// CHECK: mtc.matmul %{{.+}}, %[[QH]] {mtc.backward
func.func @forward(%q: tensor<2x4x8xf32> {mtc.name = "q", mtc.role = "param"},
                   %k: tensor<2x4x8xf32> {mtc.name = "k", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %l = mtc.reduce_sum %s {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A saved activation (tanh's output, read by its gradient) of 4096 or more
// elements is kept in 16 bits between the passes: rounded after its last
// forward use, widened right before its first backward use. Smaller ones
// stay float32.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.+]] = mtc.tanh %{{.+}} : tensor<64x64xf32>
// CHECK-NEXT: %[[L:.+]] = mtc.reduce_sum %[[H]]
// CHECK-NEXT: %[[S:.+]] = mtc.convert %[[H]] : tensor<64x64xf32> to tensor<64x64xbf16>
// CHECK-NEXT: %[[HS:.+]] = mtc.tanh %{{.+}} : tensor<8x8xf32>
// CHECK-NOT: mtc.convert %[[HS]]
// CHECK: %[[W:.+]] = mtc.convert %[[S]] {mtc.backward} : tensor<64x64xbf16> to tensor<64x64xf32>
// CHECK-NEXT: mtc.mul %[[W]], %[[W]] {mtc.backward}
// CHECK-NOT: mtc.mul %[[H]]
// CHECK: return
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<64x64xf32> {mtc.name = "x", mtc.role = "param"},
                   %y: tensor<8x8xf32> {mtc.name = "y", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %h = mtc.tanh %x : tensor<64x64xf32>
  %l = mtc.reduce_sum %h {axes = array<i64: 0, 1>, keepdims = false} : (tensor<64x64xf32>) -> tensor<f32>
  %hs = mtc.tanh %y : tensor<8x8xf32>
  %ls = mtc.reduce_sum %hs {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x8xf32>) -> tensor<f32>
  %sum = mtc.add %l, %ls : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %sum : tensor<f32>
}
