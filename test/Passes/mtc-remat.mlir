// RUN: mtc-opt %s --mtc-remat="budget=400 alignment=64" | FileCheck %s
// RUN: mtc-opt %s --mtc-remat="budget=100000 alignment=64" | FileCheck %s --check-prefix=FITS
// RUN: mtc-opt %s --mtc-remat="budget=300 alignment=64" | FileCheck %s --check-prefix=FLOOR

// Every tensor takes 64 bytes. Without recomputation seven are live at the
// backward's first mul (x, w, a0, a1, l, dy, t1): 448 bytes. %a1 is live
// there only for the last op, so it is dropped after its forward use and its
// cheap relu recomputed just before that op, which brings the peak to 384.
// The GEMM result %a0 is never chosen while a cheaper choice exists.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: mtc.recompute_flops = 16 : i64, mtc.remat_peak = 384 : i64
// CHECK: %[[A0:.+]] = mtc.matmul
// CHECK: %[[A1:.+]] = mtc.relu %[[X:[^ ]+]] :
// CHECK: mtc.add %[[A0]], %[[A1]]
// CHECK: %[[T2:.+]] = mtc.mul %{{.+}}, %{{.+}} {mtc.backward} : (tensor<4x4xf32>, tensor<f32>)
// CHECK-NEXT: %[[R:.+]] = mtc.relu %[[X]] {mtc.backward, mtc.recompute}
// CHECK-NEXT: mtc.mul %[[R]], %[[T2]]

// FITS: mtc.recompute_flops = 0 : i64, mtc.remat_peak = 448 : i64
// FITS-NOT: mtc.recompute}

// Below what recomputation can reach, the pass stops at its floor and says
// so through mtc.remat_peak; the driver turns that into an error.
// FLOOR: mtc.remat_peak = 384 : i64

func.func @train_step(%x: tensor<4x4xf32> {mtc.name = "x", mtc.role = "input"}, %w: tensor<4x4xf32> {mtc.name = "w", mtc.role = "param"})
    -> (tensor<f32> {mtc.role = "loss"}, tensor<4x4xf32> {mtc.role = "grad", mtc.owner = 1 : i64}) {
  %a0 = mtc.matmul %x, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %a1 = mtc.relu %x : tensor<4x4xf32>
  %s = mtc.add %a0, %a1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %l = mtc.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x4xf32>) -> tensor<f32>
  %dy = mtc.neg %l {mtc.backward} : tensor<f32>
  %t1 = mtc.mul %a0, %a0 {mtc.backward} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %t2 = mtc.mul %t1, %dy {mtc.backward} : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %g = mtc.mul %a1, %t2 {mtc.backward} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %l, %g : tensor<f32>, tensor<4x4xf32>
}
