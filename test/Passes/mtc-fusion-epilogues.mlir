// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// A linear layer's bias add becomes the GEMM's bias epilogue; the GELU-like
// chain after it fuses without the add.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x8xf32>{{.*}}, %[[W:.+]]: tensor<16x8xf32>{{.*}}, %[[B:.+]]: tensor<16xf32>
// CHECK: %[[Y:.+]] = mtc.matmul %[[X]], %[[W]], %[[B]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: mtc.add
// CHECK: mtc.fused %[[Y]]
// CHECK-NOT: mtc.add
// CHECK: mtc.yield
func.func @train_step(%x: tensor<2x4x8xf32> {mtc.role = "input"}, %w: tensor<16x8xf32> {mtc.role = "param"}, %b: tensor<16xf32> {mtc.role = "param"}) -> tensor<2x4x16xf32> {
  %y = mtc.matmul %x, %w {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %z = mtc.add %b, %y : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %t = mtc.tanh %z : tensor<2x4x16xf32>
  %r = mtc.mul %t, %z : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %r : tensor<2x4x16xf32>
}

// -----

// No epilogue when the GEMM's own result has another reader, when the
// added tensor is not a bias of N values, or for a batch of matrices (b
// not 2-D): each matmul keeps two operands.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.matmul %{{[a-z0-9]+}}, %{{[a-z0-9]+}} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK: mtc.matmul %{{[a-z0-9]+}}, %{{[a-z0-9]+}} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK: mtc.add
// CHECK: mtc.add
// CHECK: mtc.matmul %{{[a-z0-9]+}}, %{{[a-z0-9]+}} : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
// CHECK: mtc.add
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %w: tensor<8x16xf32> {mtc.role = "param"}, %b: tensor<16xf32> {mtc.role = "param"}, %r: tensor<4x16xf32> {mtc.role = "input"}, %xs: tensor<2x4x8xf32> {mtc.role = "input"}, %ws: tensor<2x8x16xf32> {mtc.role = "param"}) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>) {
  %y = mtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z = mtc.add %b, %y : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y2 = mtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z2 = mtc.add %r, %y2 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y3 = mtc.matmul %xs, %ws : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %z3 = mtc.add %b, %y3 : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %z, %y, %z2, %z3 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>
}

// -----

// The bias gradient (the sum of dY over every axis but the last) joins the
// weight-gradient GEMM that reads dY's 16-bit copy through a view: one
// matmul_bias_grad summing its transposed A. The early update of the bias,
// which ran before the GEMM, moves right after it.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.reduce_sum
// CHECK: %[[C:.+]] = mtc.convert %[[DY:.+]] {mtc.backward}
// CHECK: %[[V:.+]] = mtc.reshape %[[C]]
// CHECK: %[[DW:.+]], %[[DB:.+]] = mtc.matmul_bias_grad %[[V]], %{{.+}} {mtc.backward, sum_a = true, transpose_a = true} : (tensor<8x16xbf16>, tensor<8x8xbf16>) -> (tensor<16x8xf32>, tensor<16xf32>)
// CHECK-NEXT: mtc.sgd_update %{{.+}}, %[[DB]]
// CHECK-NEXT: mtc.sgd_update %{{.+}}, %[[DW]]
func.func @train_step(%dy: tensor<2x4x16xf32> {mtc.role = "input"}, %x: tensor<8x8xbf16> {mtc.role = "input"}, %w: tensor<16x8xf32> {mtc.role = "param"}, %b: tensor<16xf32> {mtc.role = "param"}) -> (tensor<16xf32>, tensor<16x8xf32>) {
  %s = mtc.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = false, mtc.backward} : (tensor<2x4x16xf32>) -> tensor<16xf32>
  %nb = mtc.sgd_update %b, %s {lr = 0.1 : f64, mtc.optimizer} : tensor<16xf32>
  %c = mtc.convert %dy {mtc.backward} : tensor<2x4x16xf32> to tensor<2x4x16xbf16>
  %v = mtc.reshape %c {mtc.backward} : (tensor<2x4x16xbf16>) -> tensor<8x16xbf16>
  %dw = mtc.matmul %v, %x {mtc.backward, transpose_a = true} : (tensor<8x16xbf16>, tensor<8x8xbf16>) -> tensor<16x8xf32>
  %nw = mtc.sgd_update %w, %dw {lr = 0.1 : f64, mtc.optimizer} : tensor<16x8xf32>
  return %nb, %nw : tensor<16xf32>, tensor<16x8xf32>
}

// -----

// B holds dY (stored [K, N], not transposed): the sums of B, kept as the
// reduction's [1, N] shape through a view.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DW:.+]], %[[DB:.+]] = mtc.matmul_bias_grad %{{.+}}, %{{.+}} {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>)
// CHECK-NEXT: %[[R:.+]] = mtc.reshape %[[DB]] : (tensor<16xf32>) -> tensor<1x16xf32>
// CHECK: return %[[R]], %[[DW]]
func.func @train_step(%dy: tensor<8x16xf32> {mtc.role = "input"}, %x: tensor<8x8xf32> {mtc.role = "input"}) -> (tensor<1x16xf32>, tensor<8x16xf32>) {
  %s = mtc.reduce_sum %dy {axes = array<i64: 0>} : (tensor<8x16xf32>) -> tensor<1x16xf32>
  %dw = mtc.matmul %x, %dy {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %s, %dw : tensor<1x16xf32>, tensor<8x16xf32>
}

// -----

// The sum reads one reshape of a 3-D dY and the GEMM the 16-bit copy of
// another (Hugging Face's Conv1D, an ONNX Gemm on the flattened rows): both
// keep dY's elements in order, so the GEMM's B is the summed rows. The
// reshape only the sum read goes with it.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.reduce_sum
// CHECK-NOT: mtc.reshape %{{.+}} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[V:.+]] = mtc.reshape %{{.+}} {mtc.backward} : (tensor<2x4x16xbf16>) -> tensor<8x16xbf16>
// CHECK: %[[DW:.+]], %[[DB:.+]] = mtc.matmul_bias_grad %{{.+}}, %[[V]] {mtc.backward, transpose_a = true} : (tensor<8x8xbf16>, tensor<8x16xbf16>) -> (tensor<8x16xf32>, tensor<16xf32>)
// CHECK-NEXT: %[[R:.+]] = mtc.reshape %[[DB]] {mtc.backward} : (tensor<16xf32>) -> tensor<1x16xf32>
// CHECK: return %[[R]], %[[DW]]
func.func @train_step(%dy: tensor<2x4x16xf32> {mtc.role = "input"}, %x: tensor<8x8xbf16> {mtc.role = "input"}) -> (tensor<1x16xf32>, tensor<8x16xf32>) {
  %r = mtc.reshape %dy {mtc.backward} : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %c = mtc.convert %dy {mtc.backward} : tensor<2x4x16xf32> to tensor<2x4x16xbf16>
  %v = mtc.reshape %c {mtc.backward} : (tensor<2x4x16xbf16>) -> tensor<8x16xbf16>
  %dw = mtc.matmul %x, %v {mtc.backward, transpose_a = true} : (tensor<8x8xbf16>, tensor<8x16xbf16>) -> tensor<8x16xf32>
  %s = mtc.reduce_sum %r {axes = array<i64: 0>, mtc.backward} : (tensor<8x16xf32>) -> tensor<1x16xf32>
  return %s, %dw : tensor<1x16xf32>, tensor<8x16xf32>
}

// -----

// Sums over other axes, or of a tensor the GEMM does not read, stay.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.matmul_bias_grad
// CHECK: mtc.reduce_sum %{{.+}} {axes = array<i64: 0>
// CHECK: mtc.reduce_sum %{{.+}} {axes = array<i64: 0, 1>
// CHECK: mtc.matmul
// CHECK-NOT: mtc.matmul_bias_grad
func.func @train_step(%dy: tensor<2x4x16xf32> {mtc.role = "input"}, %other: tensor<8x16xf32> {mtc.role = "input"}, %x: tensor<8x8xf32> {mtc.role = "input"}) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<8x16xf32>) {
  %s = mtc.reduce_sum %dy {axes = array<i64: 0>, keepdims = false} : (tensor<2x4x16xf32>) -> tensor<4x16xf32>
  %s2 = mtc.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4x16xf32>) -> tensor<16xf32>
  %v = mtc.reshape %dy : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %dw = mtc.matmul %x, %other {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %s, %s2, %dw : tensor<4x16xf32>, tensor<16xf32>, tensor<8x16xf32>
}

// -----

// A layer norm right after the op computing its input (a lone residual add
// becomes a fused op of one) runs in that kernel as its row epilogue; one
// with an op between, or with rows that are not whole groups of four
// elements, runs on its own.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[S:.+]] = mtc.fused
// CHECK: mtc.add
// CHECK: mtc.layer_norm %[[S]], {{.*}}mtc.row_epilogue
// CHECK: mtc.layer_norm
// CHECK-NOT: mtc.row_epilogue
// CHECK: mtc.layer_norm
// CHECK-NOT: mtc.row_epilogue
// CHECK: return
func.func @train_step(%x: tensor<4x16xf32> {mtc.role = "input"}, %r: tensor<4x16xf32> {mtc.role = "input"}, %g: tensor<16xf32> {mtc.role = "param"}, %u: tensor<4x6xf32> {mtc.role = "input"}, %h: tensor<6xf32> {mtc.role = "param"}) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x6xf32>) {
  %s = mtc.add %x, %r : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y, %m, %v = mtc.layer_norm %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %e = mtc.exp %x : tensor<4x16xf32>
  %c = mtc.matmul %x, %u {transpose_a = true} : (tensor<4x16xf32>, tensor<4x6xf32>) -> tensor<16x6xf32>
  %y2, %m2, %v2 = mtc.layer_norm %e, %g {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %w = mtc.exp %u : tensor<4x6xf32>
  %y3, %m3, %v3 = mtc.layer_norm %w, %h {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x6xf32>, tensor<6xf32>) -> (tensor<4x6xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %s, %y, %y2, %e, %y3 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x6xf32>
}

// -----

// The gradient reaching a residual sum's input is the layer norm's input
// gradient plus the other branch's: the layer norm backward adds it as it
// writes (accumulate), whichever side of the add it is on.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DX:.+]], %{{.+}}, %{{.+}} = mtc.layer_norm_grad %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} accumulate %[[R:[a-z0-9]+]]
// CHECK-NOT: mtc.add
// CHECK: return %[[DX]]
func.func @train_step(%dy: tensor<4x16xf32> {mtc.role = "input"}, %x: tensor<4x16xf32> {mtc.role = "input"}, %g: tensor<16xf32> {mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.role = "input"}, %v: tensor<4x1xf32> {mtc.role = "input"}, %r: tensor<4x16xf32> {mtc.role = "input"}) -> (tensor<4x16xf32>, tensor<16xf32>) {
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %v {axis = 1 : i64, mtc.backward} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %s = mtc.add %r, %dx {mtc.backward} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %s, %dg : tensor<4x16xf32>, tensor<16xf32>
}

// -----

// A tied embedding: the output projection's weight gradient plus the
// gather's gradient. The gather backward sums its rows and adds them to the
// projection's gradient (accumulate), whichever side of the add it is on;
// the scattered table between them is gone.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[T:.+]] = mtc.gather_grad %{{.+}}, %{{.+}} accumulate %[[W:[a-z0-9]+]] {axis = 0 : i64, mtc.backward}
// CHECK-NOT: mtc.add
// CHECK: return %[[T]]
func.func @train_step(%dy: tensor<2x3x8xf32> {mtc.role = "input"}, %ids: tensor<2x3xi64> {mtc.role = "input"}, %a: tensor<6x8xf32> {mtc.role = "input"}, %b: tensor<6x10xf32> {mtc.role = "input"}) -> tensor<10x8xf32> {
  %w = mtc.matmul %b, %a {mtc.backward, transpose_a = true} : (tensor<6x10xf32>, tensor<6x8xf32>) -> tensor<10x8xf32>
  %g = mtc.gather_grad %dy, %ids {axis = 0 : i64, mtc.backward} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x8xf32>
  %s = mtc.add %g, %w {mtc.backward} : (tensor<10x8xf32>, tensor<10x8xf32>) -> tensor<10x8xf32>
  return %s : tensor<10x8xf32>
}

// -----

// Not when the scattered table has another reader.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.gather_grad %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {axis
// CHECK: mtc.add
func.func @train_step(%dy: tensor<2x3x8xf32> {mtc.role = "input"}, %ids: tensor<2x3xi64> {mtc.role = "input"}, %w: tensor<10x8xf32> {mtc.role = "input"}) -> (tensor<10x8xf32>, tensor<10x8xf32>) {
  %g = mtc.gather_grad %dy, %ids {axis = 0 : i64, mtc.backward} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x8xf32>
  %s = mtc.add %w, %g {mtc.backward} : (tensor<10x8xf32>, tensor<10x8xf32>) -> tensor<10x8xf32>
  return %s, %g : tensor<10x8xf32>, tensor<10x8xf32>
}
