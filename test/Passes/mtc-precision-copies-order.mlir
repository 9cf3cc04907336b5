// RUN: mtc-opt %s --mtc-precision="precision=bf16" | FileCheck %s

// An update that overwrites the weight's 16-bit copy moves after the copy's
// last reader: here the input gradient's GEMM comes after the weight
// gradient's update (it read the weight before the update overwrote it,
// which the copy now stands for).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[WH:[^:]+]]: tensor<5x3xbf16> {mtc.name = "w.bf16", mtc.owner = 1 : i64, mtc.role = "param_copy"}
// CHECK: mtc.matmul %{{.+}}, %[[WH]] {mtc.backward}
// CHECK-NEXT: mtc.adamw_update {{.*}} copy %[[WH]]
// CHECK-NEXT: return
func.func @train_step(%x: tensor<4x3xf32> {mtc.name = "x", mtc.role = "input"},
                      %w: tensor<5x3xf32> {mtc.name = "w", mtc.role = "param"},
                      %dy: tensor<4x5xf32> {mtc.name = "dy", mtc.role = "input"},
                      %m: tensor<5x3xf32> {mtc.name = "w.exp_avg", mtc.owner = 1 : i64, mtc.role = "state"},
                      %v: tensor<5x3xf32> {mtc.name = "w.exp_avg_sq", mtc.owner = 1 : i64, mtc.role = "state"})
    -> (tensor<4x3xf32>, tensor<5x3xf32> {mtc.role = "update", mtc.tied = 1 : i64},
        tensor<5x3xf32> {mtc.role = "update", mtc.tied = 3 : i64},
        tensor<5x3xf32> {mtc.role = "update", mtc.tied = 4 : i64}) {
  %dw = mtc.matmul %dy, %x {mtc.backward, transpose_a = true} : (tensor<4x5xf32>, tensor<4x3xf32>) -> tensor<5x3xf32>
  %p, %m1, %v1 = mtc.adamw_update %w, %dw, %m, %v {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, mtc.optimizer} : tensor<5x3xf32>
  %dx = mtc.matmul %dy, %w {mtc.backward} : (tensor<4x5xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  return %dx, %p, %m1, %v1 : tensor<4x3xf32>, tensor<5x3xf32>, tensor<5x3xf32>, tensor<5x3xf32>
}
