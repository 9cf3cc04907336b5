// RUN: mtc-opt %s --split-input-file --mtc-memory-plan="alignment=64" | FileCheck %s

// Logits over an odd vocabulary (50 bf16 = 100 bytes a row) that only
// GEMMs and the cross-entropy kernel read and write get rows padded to 16
// bytes: 56 elements, through the reshapes (views) and the gradient the
// loss writes over them, which still takes the logits' bytes.

// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.matmul {{.*}}mtc.offsets = array<i64: [[AT:[0-9]+]]>, mtc.row_pitch = array<i64: 56>{{.*}} -> tensor<2x8x50xbf16>
// CHECK-NEXT: mtc.reshape %[[Y]] {mtc.offsets = array<i64: [[AT]]>, mtc.row_pitch = array<i64: 56>}
// CHECK-NEXT: mtc.softmax_cross_entropy_with_grad {{.*}}mtc.offsets = array<i64: {{[0-9]+}}, [[AT]]>, mtc.row_pitch = array<i64: 0, 56>
// CHECK-NEXT: mtc.reshape {{.*}}mtc.row_pitch = array<i64: 56>
// CHECK-NEXT: mtc.matmul
// CHECK-NOT: mtc.row_pitch
// CHECK: return
func.func @train_step(%x: tensor<2x8x32xbf16> {mtc.name = "x", mtc.role = "input"}, %x2: tensor<16x32xbf16> {mtc.name = "x2", mtc.role = "input"}, %w: tensor<50x32xbf16> {mtc.name = "w", mtc.role = "input"}, %y: tensor<16xi64> {mtc.name = "y", mtc.role = "input"}, %one: tensor<f32> {mtc.name = "one", mtc.role = "input"})
    -> (tensor<f32>, tensor<2x8x32xf32>, tensor<50x32xf32>) {
  %0 = mtc.matmul %x, %w {mtc.native_16bit_gemm, transpose_b = true} : (tensor<2x8x32xbf16>, tensor<50x32xbf16>) -> tensor<2x8x50xbf16>
  %1 = mtc.reshape %0 : (tensor<2x8x50xbf16>) -> tensor<16x50xbf16>
  %loss, %d = mtc.softmax_cross_entropy_with_grad %1, %y, %one {mtc.backward} : (tensor<16x50xbf16>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x50xbf16>)
  %2 = mtc.reshape %d {mtc.backward} : (tensor<16x50xbf16>) -> tensor<2x8x50xbf16>
  %dx = mtc.matmul %2, %w {mtc.backward, mtc.native_16bit_gemm} : (tensor<2x8x50xbf16>, tensor<50x32xbf16>) -> tensor<2x8x32xf32>
  %dw = mtc.matmul %d, %x2 {mtc.backward, mtc.native_16bit_gemm, transpose_a = true} : (tensor<16x50xbf16>, tensor<16x32xbf16>) -> tensor<50x32xf32>
  return %loss, %dx, %dw : tensor<f32>, tensor<2x8x32xf32>, tensor<50x32xf32>
}

// -----

// The same float32 logits (50 x 4 = 200 bytes a row) would be padded to 52
// elements, but an elementwise kernel reads them too (it indexes them
// densely): no padding anywhere in the group.

// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.row_pitch
// CHECK: return
func.func @train_step(%x: tensor<16x32xf32> {mtc.name = "x", mtc.role = "input"}, %w: tensor<50x32xf32> {mtc.name = "w", mtc.role = "input"}, %y: tensor<16xi64> {mtc.name = "y", mtc.role = "input"}, %one: tensor<f32> {mtc.name = "one", mtc.role = "input"})
    -> (tensor<f32>, tensor<50x32xf32>, tensor<16x50xf32>) {
  %0 = mtc.matmul %x, %w {transpose_b = true} : (tensor<16x32xf32>, tensor<50x32xf32>) -> tensor<16x50xf32>
  %r = mtc.relu %0 : tensor<16x50xf32>
  %loss, %d = mtc.softmax_cross_entropy_with_grad %0, %y, %one {mtc.backward} : (tensor<16x50xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x50xf32>)
  %dw = mtc.matmul %d, %x {mtc.backward, transpose_a = true} : (tensor<16x50xf32>, tensor<16x32xf32>) -> tensor<50x32xf32>
  return %loss, %dw, %r : tensor<f32>, tensor<50x32xf32>, tensor<16x50xf32>
}

// -----

// Float32 logits without other readers: 52 elements a row. Rows already a
// multiple of 16 bytes (48 bf16), a result of the step (read by the
// trainer densely) and a matmul the code generator loops over (a batch
// broadcast both ways) are left dense.

// CHECK-LABEL: func.func @train_step
// CHECK: mtc.matmul {{.*}}mtc.row_pitch = array<i64: 52>{{.*}} -> tensor<16x50xf32>
// CHECK-NEXT: mtc.softmax_cross_entropy_with_grad {{.*}}mtc.row_pitch = array<i64: 0, 52>
// CHECK-NEXT: mtc.matmul
// CHECK-NOT: mtc.row_pitch
// CHECK: return
func.func @train_step(%x: tensor<16x32xf32> {mtc.name = "x", mtc.role = "input"}, %w: tensor<50x32xf32> {mtc.name = "w", mtc.role = "input"}, %y: tensor<16xi64> {mtc.name = "y", mtc.role = "input"}, %one: tensor<f32> {mtc.name = "one", mtc.role = "input"},
                      %x16: tensor<16x32xbf16> {mtc.name = "x16", mtc.role = "input"}, %w48: tensor<48x32xbf16> {mtc.name = "w48", mtc.role = "input"},
                      %a: tensor<2x1x4x8xf32> {mtc.name = "a", mtc.role = "input"}, %b: tensor<1x3x8x5xf32> {mtc.name = "b", mtc.role = "input"}, %v: tensor<5x4xf32> {mtc.name = "v", mtc.role = "input"})
    -> (tensor<f32>, tensor<50x32xf32>, tensor<16x48xbf16>, tensor<16x50xf32>, tensor<24x4xf32>) {
  %0 = mtc.matmul %x, %w {transpose_b = true} : (tensor<16x32xf32>, tensor<50x32xf32>) -> tensor<16x50xf32>
  %loss, %d = mtc.softmax_cross_entropy_with_grad %0, %y, %one {mtc.backward} : (tensor<16x50xf32>, tensor<16xi64>, tensor<f32>) -> (tensor<f32>, tensor<16x50xf32>)
  %dw = mtc.matmul %d, %x {mtc.backward, transpose_a = true} : (tensor<16x50xf32>, tensor<16x32xf32>) -> tensor<50x32xf32>
  %even = mtc.matmul %x16, %w48 {mtc.native_16bit_gemm, transpose_b = true} : (tensor<16x32xbf16>, tensor<48x32xbf16>) -> tensor<16x48xbf16>
  %out = mtc.matmul %x, %w {transpose_b = true} : (tensor<16x32xf32>, tensor<50x32xf32>) -> tensor<16x50xf32>
  %loop = mtc.matmul %a, %b : (tensor<2x1x4x8xf32>, tensor<1x3x8x5xf32>) -> tensor<2x3x4x5xf32>
  %rows = mtc.reshape %loop : (tensor<2x3x4x5xf32>) -> tensor<24x5xf32>
  %p = mtc.matmul %rows, %v : (tensor<24x5xf32>, tensor<5x4xf32>) -> tensor<24x4xf32>
  return %loss, %dw, %even, %out, %p : tensor<f32>, tensor<50x32xf32>, tensor<16x48xbf16>, tensor<16x50xf32>, tensor<24x4xf32>
}
