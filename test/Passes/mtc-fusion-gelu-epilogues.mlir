// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// GELU's tanh form after a linear layer, written as Hugging Face's GPT-2
// writes it (gelu_new), joins the GEMM, which also stores its input; the
// backward kernel that multiplies the GEMM-computed gradient of GELU's
// output by GELU's derivative (written another way, as a hand-written
// backward would) joins that GEMM. Nothing elementwise is left.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x8xf32>{{.*}}, %[[W:[^:]+]]: tensor<16x8xf32>{{.*}}, %[[B:[^:]+]]: tensor<16xf32>{{.*}}, %[[W2:[^:]+]]: tensor<4x16xf32>{{.*}}, %[[DO:[^:]+]]: tensor<2x4x4xf32>
// CHECK: %[[H:.+]], %[[PRE:.+]] = mtc.matmul_gelu %[[X]], %[[W]], %[[B]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
// CHECK: %[[O:.+]] = mtc.matmul %[[H]], %[[W2]] {transpose_b = true}
// CHECK: %[[DZ:.+]] = mtc.matmul_gelu_grad %[[DO]], %[[W2]], %[[PRE]] {mtc.backward} : (tensor<2x4x4xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NOT: mtc.fused
// CHECK: return %[[O]], %[[DZ]]
func.func @train_step(%x: tensor<2x4x8xf32> {mtc.role = "input"}, %w: tensor<16x8xf32> {mtc.role = "param"}, %b: tensor<16xf32> {mtc.role = "param"}, %w2: tensor<4x16xf32> {mtc.role = "param"}, %do: tensor<2x4x4xf32> {mtc.role = "input"}) -> (tensor<2x4x4xf32>, tensor<2x4x16xf32>) {
  %half = mtc.constant dense<5.000000e-01> : tensor<f32>
  %one = mtc.constant dense<1.000000e+00> : tensor<f32>
  %c1 = mtc.constant dense<0.797884583> : tensor<f32>
  %k = mtc.constant dense<4.471500e-02> : tensor<f32>
  %three_k = mtc.constant dense<1.341450e-01> : tensor<f32>
  %y = mtc.matmul %x, %w {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %z = mtc.add %y, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // 0.5 * z * (1 + tanh(c1 * (z + 0.044715 * z^3)))
  %hz = mtc.mul %half, %z : (tensor<f32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %z2 = mtc.mul %z, %z : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %z3 = mtc.mul %z2, %z : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %kz3 = mtc.mul %k, %z3 : (tensor<f32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %s = mtc.add %z, %kz3 : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %u = mtc.mul %s, %c1 : (tensor<2x4x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
  %t = mtc.tanh %u : tensor<2x4x16xf32>
  %t1 = mtc.add %one, %t : (tensor<f32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %h = mtc.mul %hz, %t1 : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %o = mtc.matmul %h, %w2 {transpose_b = true} : (tensor<2x4x16xf32>, tensor<4x16xf32>) -> tensor<2x4x4xf32>
  // dz = dh * (0.5 (1 + t) + 0.5 z (1 - t^2) c1 (1 + 3 * 0.044715 z^2))
  %dh = mtc.matmul %do, %w2 {mtc.backward} : (tensor<2x4x4xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32>
  %bt1 = mtc.add %t, %one {mtc.backward} : (tensor<2x4x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
  %a = mtc.mul %bt1, %half {mtc.backward} : (tensor<2x4x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
  %tt = mtc.mul %t, %t {mtc.backward} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %sech = mtc.sub %one, %tt {mtc.backward} : (tensor<f32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %zz = mtc.mul %z, %z {mtc.backward} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %kzz = mtc.mul %zz, %three_k {mtc.backward} : (tensor<2x4x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
  %du0 = mtc.add %kzz, %one {mtc.backward} : (tensor<2x4x16xf32>, tensor<f32>) -> tensor<2x4x16xf32>
  %du = mtc.mul %c1, %du0 {mtc.backward} : (tensor<f32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %bz = mtc.mul %hz, %sech {mtc.backward} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %bzd = mtc.mul %bz, %du {mtc.backward} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %grad = mtc.add %a, %bzd {mtc.backward} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %dz = mtc.mul %dh, %grad {mtc.backward} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %o, %dz : tensor<2x4x4xf32>, tensor<2x4x16xf32>
}

// -----

// 0.6 z (1 + tanh(c1 (z + 0.044715 z^3))) is not GELU: the GEMM and the kernel stay apart.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.matmul_gelu
// CHECK: mtc.matmul %
// CHECK: mtc.fused
// CHECK-NOT: mtc.matmul_gelu
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %w: tensor<8x16xf32> {mtc.role = "param"}, %r: tensor<4x16xf32> {mtc.role = "input"}) -> tensor<4x16xf32> {
  %half = mtc.constant dense<5.000000e-01> : tensor<f32>
  %other = mtc.constant dense<6.000000e-01> : tensor<f32>
  %one = mtc.constant dense<1.000000e+00> : tensor<f32>
  %c1 = mtc.constant dense<0.797884583> : tensor<f32>
  %k = mtc.constant dense<4.471500e-02> : tensor<f32>
  %k2 = mtc.constant dense<5.000000e-02> : tensor<f32>
  %y = mtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z2 = mtc.mul %y, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %z3 = mtc.mul %z2, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %kz3 = mtc.mul %k, %z3 : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = mtc.add %y, %kz3 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = mtc.mul %s, %c1 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %t = mtc.tanh %u : tensor<4x16xf32>
  %t1 = mtc.add %one, %t : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %hz = mtc.mul %other, %y : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = mtc.mul %hz, %t1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %h : tensor<4x16xf32>
}
// -----

// 0.5 z (1 + tanh(c1 (z + 0.05 z^3))): another tanh argument: the GEMM and the kernel stay apart.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.matmul_gelu
// CHECK: mtc.matmul %
// CHECK: mtc.fused
// CHECK-NOT: mtc.matmul_gelu
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %w: tensor<8x16xf32> {mtc.role = "param"}, %r: tensor<4x16xf32> {mtc.role = "input"}) -> tensor<4x16xf32> {
  %half = mtc.constant dense<5.000000e-01> : tensor<f32>
  %other = mtc.constant dense<6.000000e-01> : tensor<f32>
  %one = mtc.constant dense<1.000000e+00> : tensor<f32>
  %c1 = mtc.constant dense<0.797884583> : tensor<f32>
  %k = mtc.constant dense<4.471500e-02> : tensor<f32>
  %k2 = mtc.constant dense<5.000000e-02> : tensor<f32>
  %y = mtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z2 = mtc.mul %y, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %z3 = mtc.mul %z2, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %kz3 = mtc.mul %k2, %z3 : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = mtc.add %y, %kz3 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = mtc.mul %s, %c1 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %t = mtc.tanh %u : tensor<4x16xf32>
  %t1 = mtc.add %one, %t : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %hz = mtc.mul %half, %y : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = mtc.mul %hz, %t1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %h : tensor<4x16xf32>
}
// -----

// GELU times a tensor that is no constant: the GEMM and the kernel stay apart.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.matmul_gelu
// CHECK: mtc.matmul %
// CHECK: mtc.fused
// CHECK-NOT: mtc.matmul_gelu
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %w: tensor<8x16xf32> {mtc.role = "param"}, %r: tensor<4x16xf32> {mtc.role = "input"}) -> tensor<4x16xf32> {
  %half = mtc.constant dense<5.000000e-01> : tensor<f32>
  %other = mtc.constant dense<6.000000e-01> : tensor<f32>
  %one = mtc.constant dense<1.000000e+00> : tensor<f32>
  %c1 = mtc.constant dense<0.797884583> : tensor<f32>
  %k = mtc.constant dense<4.471500e-02> : tensor<f32>
  %k2 = mtc.constant dense<5.000000e-02> : tensor<f32>
  %y = mtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z2 = mtc.mul %y, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %z3 = mtc.mul %z2, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %kz3 = mtc.mul %k, %z3 : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = mtc.add %y, %kz3 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = mtc.mul %s, %c1 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %t = mtc.tanh %u : tensor<4x16xf32>
  %t1 = mtc.add %one, %t : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %hz = mtc.mul %half, %y : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = mtc.mul %hz, %t1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %hr = mtc.mul %h, %r : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %hr : tensor<4x16xf32>
}

// -----

// 16-bit operands, float32 sums and a 16-bit GELU: the epilogue would keep
// the sums in 16 bits only, so a forward reader of the float32 sums (here
// the step's result) keeps the GEMM and the kernel apart.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.matmul_gelu
// CHECK: mtc.matmul %
// CHECK: mtc.fused
// CHECK-NOT: mtc.matmul_gelu
func.func @train_step(%x: tensor<4x8xbf16> {mtc.role = "input"}, %w: tensor<8x16xbf16> {mtc.role = "param"}) -> (tensor<4x16xbf16>, tensor<4x16xf32>) {
  %half = mtc.constant dense<5.000000e-01> : tensor<f32>
  %one = mtc.constant dense<1.000000e+00> : tensor<f32>
  %c1 = mtc.constant dense<0.797884583> : tensor<f32>
  %k = mtc.constant dense<4.471500e-02> : tensor<f32>
  %y = mtc.matmul %x, %w : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  %z2 = mtc.mul %y, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %z3 = mtc.mul %z2, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %kz3 = mtc.mul %k, %z3 : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = mtc.add %y, %kz3 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = mtc.mul %s, %c1 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %t = mtc.tanh %u : tensor<4x16xf32>
  %t1 = mtc.add %one, %t : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %hz = mtc.mul %half, %y : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = mtc.mul %hz, %t1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h16 = mtc.convert %h : tensor<4x16xf32> to tensor<4x16xbf16>
  return %h16, %y : tensor<4x16xbf16>, tensor<4x16xf32>
}
