// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// A layer norm input kept in bfloat16 for the backward pass: the layer
// norm backward reads the 16-bit values as stored, and the widening
// conversion goes unless another op reads it.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[XH:[^:]+]]: tensor<4x8xbf16>
// CHECK: mtc.layer_norm_grad %{{.+}}, %[[XH]], {{.*}} : (tensor<4x8xf32>, tensor<4x8xbf16>,
// CHECK: %[[W:.+]] = mtc.convert %[[XH]] {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK: mtc.layer_norm_grad %{{.+}}, %[[XH]], {{.*}} : (tensor<4x8xf32>, tensor<4x8xbf16>,
// CHECK: return {{.*}}%[[W]]
func.func @train_step(%dy: tensor<4x8xf32> {mtc.role = "input"}, %xh: tensor<4x8xbf16> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.role = "input"}, %s: tensor<4x1xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %x = mtc.convert %xh {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %x2 = mtc.convert %xh {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
  %dx2, %dg2, %db2 = mtc.layer_norm_grad %dx, %x2, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %dx, %dx2, %x2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// The input gradient goes on in float32 (returned here, as it flows down
// the residual path) and in bfloat16 for a GEMM: the layer norm backward
// stores the 16-bit copy as it writes the gradient; no conversion is left.
// A float16 copy of a bfloat16-stored input's gradient is not folded.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DX:.+]], %{{.+}}, %{{.+}}, %[[DXH:.+]] = mtc.layer_norm_grad {{.*}} -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x8xbf16>)
// CHECK-NEXT: mtc.matmul %[[DXH]]
// CHECK-NOT: mtc.convert
// CHECK: return %[[DX]]
func.func @train_step(%dy: tensor<4x8xf32> {mtc.role = "input"}, %xh: tensor<4x8xbf16> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.role = "input"}, %s: tensor<4x1xf32> {mtc.role = "input"}, %w: tensor<8x3xbf16> {mtc.role = "param"}) -> (tensor<4x8xf32>, tensor<4x3xf32>) {
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %xh, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %h = mtc.convert %dx {mtc.backward} : tensor<4x8xf32> to tensor<4x8xbf16>
  %y = mtc.matmul %h, %w {mtc.backward} : (tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xf32>
  return %dx, %y : tensor<4x8xf32>, tensor<4x3xf32>
}

// -----

// CHECK-LABEL: func.func @train_step
// CHECK: mtc.layer_norm_grad {{.*}} -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK: mtc.convert
func.func @train_step(%dy: tensor<4x8xf32> {mtc.role = "input"}, %xh: tensor<4x8xbf16> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.role = "input"}, %s: tensor<4x1xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf16>) {
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %xh, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %h = mtc.convert %dx {mtc.backward} : tensor<4x8xf32> to tensor<4x8xf16>
  return %dx, %h : tensor<4x8xf32>, tensor<4x8xf16>
}

// -----

// An output gradient stored in bfloat16 (the input gradient a 16-bit GEMM
// rounded), widened for a layer norm backward whose saved input is stored
// alike: the backward reads both as stored, with the GEMM storing its
// result in bfloat16 and no conversion left. The second backward's input
// is float32, so its output gradient stays widened.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[XH:[^:]+]]: tensor<4x8xbf16>
// CHECK: %[[DYH:.+]] = mtc.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK-NEXT: mtc.layer_norm_grad %[[DYH]], %[[XH]], {{.*}} : (tensor<4x8xbf16>, tensor<4x8xbf16>,
// CHECK-NEXT: %[[W:.+]] = mtc.convert %[[DYH]] {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT: mtc.layer_norm_grad %[[W]], %{{.+}}, {{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>,
func.func @train_step(%g3: tensor<4x3xbf16> {mtc.role = "input"}, %w: tensor<8x3xbf16> {mtc.role = "param"}, %xh: tensor<4x8xbf16> {mtc.role = "input"}, %x32: tensor<4x8xf32> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.role = "input"}, %s: tensor<4x1xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %d = mtc.matmul %g3, %w {mtc.backward, transpose_b = true} : (tensor<4x3xbf16>, tensor<8x3xbf16>) -> tensor<4x8xf32>
  %dh = mtc.convert %d {mtc.backward} : tensor<4x8xf32> to tensor<4x8xbf16>
  %dy = mtc.convert %dh {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
  %x = mtc.convert %xh {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %dy2 = mtc.convert %dh {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
  %dx2, %dg2, %db2 = mtc.layer_norm_grad %dy2, %x32, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %dx, %dx2 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A float16 output gradient of a layer norm whose input is stored in
// bfloat16 is not read as stored.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT: mtc.layer_norm_grad %[[W]], %{{.+}}, {{.*}} : (tensor<4x8xf32>, tensor<4x8xbf16>,
func.func @train_step(%dh: tensor<4x8xf16> {mtc.role = "input"}, %xh: tensor<4x8xbf16> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.role = "input"}, %s: tensor<4x1xf32> {mtc.role = "input"}) -> tensor<4x8xf32> {
  %dy = mtc.convert %dh {mtc.backward} : tensor<4x8xf16> to tensor<4x8xf32>
  %x = mtc.convert %xh {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %s {axis = 1 : i64, mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %dx : tensor<4x8xf32>
}
