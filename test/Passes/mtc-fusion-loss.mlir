// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// The loss, its gradient and the gradient's 16-bit conversion: one op
// where the loss was, storing the 16-bit gradient; the seed constant moves
// before it.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[^:]+]]: tensor<8x10xf32>{{.*}}, %[[Y:[^:]+]]: tensor<8xi64>
// CHECK-NEXT: %[[ONE:.+]] = mtc.constant {mtc.backward} dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[L:.+]], %[[D:.+]] = mtc.softmax_cross_entropy_with_grad %[[X]], %[[Y]], %[[ONE]] {ignore_index = -100 : i64, mtc.backward} : (tensor<8x10xf32>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x10xbf16>)
// CHECK-NEXT: return %[[L]], %[[D]]
func.func @train_step(%x: tensor<8x10xf32> {mtc.role = "input"}, %y: tensor<8xi64> {mtc.role = "input"}) -> (tensor<f32>, tensor<8x10xbf16>) {
  %loss, %logp = mtc.softmax_cross_entropy %x, %y {ignore_index = -100 : i64, reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  %one = mtc.constant {mtc.backward} dense<1.0> : tensor<f32>
  %d = mtc.softmax_cross_entropy_grad %one, %logp, %y {ignore_index = -100 : i64, mtc.backward, reduction = "mean"} : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %h = mtc.convert %d {mtc.backward} : tensor<8x10xf32> to tensor<8x10xbf16>
  return %loss, %h : tensor<f32>, tensor<8x10xbf16>
}

// -----

// A float32 gradient read by two ops stays float32; the incoming gradient
// may be an argument (the loss scale); sum reduction.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: %[[L:.+]], %[[D:.+]] = mtc.softmax_cross_entropy_with_grad %{{.+}}, %{{.+}}, %{{.+}} {mtc.backward, reduction = "sum"} : (tensor<8x10xf32>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x10xf32>)
// CHECK-NEXT: %[[H:.+]] = mtc.convert %[[D]]
// CHECK-NEXT: return %[[L]], %[[H]], %[[D]]
func.func @train_step(%x: tensor<8x10xf32> {mtc.role = "input"}, %y: tensor<8xi64> {mtc.role = "input"}, %scale: tensor<f32> {mtc.role = "loss_scale"}) -> (tensor<f32>, tensor<8x10xbf16>, tensor<8x10xf32>) {
  %loss, %logp = mtc.softmax_cross_entropy %x, %y {reduction = "sum"} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  %d = mtc.softmax_cross_entropy_grad %scale, %logp, %y {mtc.backward, reduction = "sum"} : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %h = mtc.convert %d {mtc.backward} : tensor<8x10xf32> to tensor<8x10xbf16>
  return %loss, %h, %d : tensor<f32>, tensor<8x10xbf16>, tensor<8x10xf32>
}

// -----

// Not fused: log-probabilities read elsewhere, per-position losses
// (reduction none), logits with a spatial dim, an incoming gradient
// computed by another op.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: softmax_cross_entropy_with_grad
// CHECK-COUNT-4: mtc.softmax_cross_entropy_grad
// CHECK-NOT: softmax_cross_entropy_with_grad
func.func @train_step(%x: tensor<8x10xf32> {mtc.role = "input"}, %y: tensor<8xi64> {mtc.role = "input"}, %x3: tensor<8x10x3xf32> {mtc.role = "input"}, %y3: tensor<8x3xi64> {mtc.role = "input"}, %s: tensor<f32> {mtc.role = "input"}) -> (tensor<8x10xf32>, tensor<8x10xf32>, tensor<8x10xf32>, tensor<8x10x3xf32>, tensor<8x10xf32>) {
  %one = mtc.constant {mtc.backward} dense<1.0> : tensor<f32>
  %l1, %p1 = mtc.softmax_cross_entropy %x, %y : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  %d1 = mtc.softmax_cross_entropy_grad %one, %p1, %y {mtc.backward} : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %l2, %p2 = mtc.softmax_cross_entropy %x, %y {reduction = "none"} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<8xf32>, tensor<8x10xf32>)
  %ones = mtc.constant {mtc.backward} dense<1.0> : tensor<8xf32>
  %d2 = mtc.softmax_cross_entropy_grad %ones, %p2, %y {mtc.backward, reduction = "none"} : (tensor<8xf32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %l3, %p3 = mtc.softmax_cross_entropy %x3, %y3 : (tensor<8x10x3xf32>, tensor<8x3xi64>) -> (tensor<f32>, tensor<8x10x3xf32>)
  %d3 = mtc.softmax_cross_entropy_grad %one, %p3, %y3 {mtc.backward} : (tensor<f32>, tensor<8x10x3xf32>, tensor<8x3xi64>) -> tensor<8x10x3xf32>
  %l4, %p4 = mtc.softmax_cross_entropy %x, %y : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  %seed = mtc.mul %s, %l4 {mtc.backward} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %d4 = mtc.softmax_cross_entropy_grad %seed, %p4, %y {mtc.backward} : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  return %d1, %p1, %d2, %d3, %d4 : tensor<8x10xf32>, tensor<8x10xf32>, tensor<8x10xf32>, tensor<8x10x3xf32>, tensor<8x10xf32>
}

// -----

// Evaluation's loss, whose log-probabilities nothing reads: the loss alone,
// no [N, C] result.
// CHECK-LABEL: func.func @eval_step
// CHECK-NEXT: %[[L:.+]] = mtc.softmax_cross_entropy_loss %{{.+}}, %{{.+}} {ignore_index = -100 : i64} : (tensor<8x10xf32>, tensor<8xi64>) -> tensor<f32>
// CHECK-NEXT: return %[[L]]
func.func @eval_step(%x: tensor<8x10xf32> {mtc.role = "input"}, %y: tensor<8xi64> {mtc.role = "input"}) -> tensor<f32> {
  %loss, %logp = mtc.softmax_cross_entropy %x, %y {ignore_index = -100 : i64, reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  return %loss : tensor<f32>
}

// -----

// Logits a bf16 GEMM computes, rounded for the loss (the precision pass):
// the GEMM stores them in bfloat16, the loss reads them as stored and
// writes the bfloat16 gradient; no conversion is left.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.matmul {{.*}} -> tensor<2x4x10xbf16>
// CHECK-NEXT: %[[R:.+]] = mtc.reshape %[[Y]] : (tensor<2x4x10xbf16>) -> tensor<8x10xbf16>
// CHECK: mtc.softmax_cross_entropy_with_grad %[[R]], {{.*}} : (tensor<8x10xbf16>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x10xbf16>)
// CHECK-NOT: mtc.convert
// CHECK: return
func.func @train_step(%x: tensor<2x4x3xbf16> {mtc.role = "input"}, %w: tensor<3x10xbf16> {mtc.role = "input"}, %y: tensor<8xi64> {mtc.role = "input"}) -> (tensor<f32>, tensor<8x10xbf16>) {
  %m = mtc.matmul %x, %w : (tensor<2x4x3xbf16>, tensor<3x10xbf16>) -> tensor<2x4x10xf32>
  %r = mtc.reshape %m : (tensor<2x4x10xf32>) -> tensor<8x10xf32>
  %n = mtc.convert %r : tensor<8x10xf32> to tensor<8x10xbf16>
  %logits = mtc.convert %n : tensor<8x10xbf16> to tensor<8x10xf32>
  %loss, %logp = mtc.softmax_cross_entropy %logits, %y {reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x10xf32>)
  %one = mtc.constant {mtc.backward} dense<1.0> : tensor<f32>
  %d = mtc.softmax_cross_entropy_grad %one, %logp, %y {mtc.backward, reduction = "mean"} : (tensor<f32>, tensor<8x10xf32>, tensor<8xi64>) -> tensor<8x10xf32>
  %h = mtc.convert %d {mtc.backward} : tensor<8x10xf32> to tensor<8x10xbf16>
  return %loss, %h : tensor<f32>, tensor<8x10xbf16>
}
