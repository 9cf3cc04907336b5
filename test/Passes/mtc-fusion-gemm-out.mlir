// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// Under --precision bf16 attention's query, key and value are sliced out of
// one projection and transposed to heads by copies that store bfloat16: the
// GEMM stores bfloat16 itself, the slices and reshapes carry bfloat16 and
// the transposes copy 16-bit values.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.matmul {{.*}} -> tensor<2x8x48xbf16>
// CHECK-NEXT: %[[Q:.+]] = mtc.slice %[[Y]] {{.*}} : (tensor<2x8x48xbf16>) -> tensor<2x8x16xbf16>
// CHECK-NEXT: %[[K:.+]] = mtc.slice %[[Y]] {{.*}} : (tensor<2x8x48xbf16>) -> tensor<2x8x16xbf16>
// CHECK: mtc.reshape %[[Q]] : (tensor<2x8x16xbf16>) -> tensor<2x8x2x8xbf16>
// CHECK: mtc.transpose {{.*}} : (tensor<2x8x2x8xbf16>) -> tensor<2x2x8x8xbf16>
// CHECK-NOT: mtc.convert
// CHECK: return
func.func @train_step(%x: tensor<2x8x16xbf16> {mtc.role = "input"}, %w: tensor<16x48xbf16> {mtc.role = "input"}, %b: tensor<48xf32> {mtc.role = "input"}) -> (tensor<2x2x8x8xbf16>, tensor<2x8x16xbf16>) {
  %y = mtc.matmul %x, %w, %b : (tensor<2x8x16xbf16>, tensor<16x48xbf16>, tensor<48xf32>) -> tensor<2x8x48xf32>
  %q = mtc.slice %y {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %k = mtc.slice %y {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %r = mtc.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
  %t = mtc.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xbf16>
  %c = mtc.convert %k : tensor<2x8x16xf32> to tensor<2x8x16xbf16>
  return %t, %c : tensor<2x2x8x8xbf16>, tensor<2x8x16xbf16>
}

// -----

// A float32 reader of one slice (here the step's result): the GEMM stays
// float32.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.matmul {{.*}} -> tensor<2x8x48xf32>
// CHECK: mtc.transpose {{.*}} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xbf16>
func.func @train_step(%x: tensor<2x8x16xbf16> {mtc.role = "input"}, %w: tensor<16x48xbf16> {mtc.role = "input"}) -> (tensor<2x2x8x8xbf16>, tensor<2x8x16xf32>) {
  %y = mtc.matmul %x, %w : (tensor<2x8x16xbf16>, tensor<16x48xbf16>) -> tensor<2x8x48xf32>
  %q = mtc.slice %y {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %k = mtc.slice %y {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %r = mtc.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
  %t = mtc.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xbf16>
  return %t, %k : tensor<2x2x8x8xbf16>, tensor<2x8x16xf32>
}

// -----

// A batched GEMM (no 2-D weight) keeps its float32 result and the
// conversion.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.matmul {{.*}} -> tensor<2x8x8xf32>
// CHECK: mtc.convert
func.func @train_step(%a: tensor<2x8x16xbf16> {mtc.role = "input"}, %b: tensor<2x16x8xbf16> {mtc.role = "input"}) -> tensor<2x8x8xbf16> {
  %y = mtc.matmul %a, %b : (tensor<2x8x16xbf16>, tensor<2x16x8xbf16>) -> tensor<2x8x8xf32>
  %c = mtc.convert %y : tensor<2x8x8xf32> to tensor<2x8x8xbf16>
  return %c : tensor<2x8x8xbf16>
}
