// RUN: mtc-opt %s --split-input-file --mtc-autodiff --verify-diagnostics | FileCheck %s

// A linear layer, tanh and cross-entropy: gradients for the weight and bias,
// none for the inputs; the extra "logits" output is dropped.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x3xf32> {mtc.name = "input", mtc.role = "input"}
// CHECK-SAME: %[[T:[^:]+]]: tensor<4xi64>
// CHECK-SAME: %[[W:[^:]+]]: tensor<5x3xf32> {mtc.name = "fc.weight", mtc.role = "param"}
// CHECK-SAME: %[[B:[^:]+]]: tensor<5xf32> {mtc.name = "fc.bias", mtc.role = "param"}
// CHECK-SAME: %[[R:[^:]+]]: tensor<5xf32> {mtc.name = "running", mtc.role = "buffer"}
// CHECK-SAME: -> (tensor<f32> {mtc.name = "loss", mtc.role = "loss"}, tensor<5x3xf32> {mtc.name = "fc.weight.grad", mtc.owner = 2 : i64, mtc.role = "grad"}, tensor<5xf32> {mtc.name = "fc.bias.grad", mtc.owner = 3 : i64, mtc.role = "grad"})
// CHECK: %[[P:.+]] = mtc.matmul %[[X]], %[[W]] {transpose_b = true}
// CHECK: %[[Y:.+]] = mtc.add %[[P]], %[[B]]
// CHECK: %[[H:.+]] = mtc.tanh %[[Y]]
// CHECK: %[[LOSS:.+]], %[[LOGP:.+]] = mtc.softmax_cross_entropy %[[H]], %[[T]]
// CHECK: %[[ONE:.+]] = mtc.constant {mtc.backward} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DH:.+]] = mtc.softmax_cross_entropy_grad %[[ONE]], %[[LOGP]], %[[T]] {mtc.backward
// CHECK: %[[SQ:.+]] = mtc.mul %[[H]], %[[H]] {mtc.backward}
// CHECK: %[[ONEMINUS:.+]] = mtc.sub %{{.+}}, %[[SQ]] {mtc.backward}
// CHECK: %[[DY:.+]] = mtc.mul %[[DH]], %[[ONEMINUS]] {mtc.backward}
// CHECK: %[[DBSUM:.+]] = mtc.reduce_sum %[[DY]] {axes = array<i64: 0>
// CHECK: %[[DB:.+]] = mtc.reshape %[[DBSUM]] {mtc.backward} : (tensor<1x5xf32>) -> tensor<5xf32>
// The weight is used transposed, so its gradient is dY^T X.
// CHECK-NOT: mtc.matmul %[[DY]], %[[W]]
// CHECK: %[[DW:.+]] = mtc.matmul %[[DY]], %[[X]] {mtc.backward, transpose_a = true}
// CHECK-NOT: mtc.matmul %[[DY]], %[[W]]
// CHECK: return %[[LOSS]], %[[DW]], %[[DB]]
func.func @forward(%x: tensor<4x3xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<4xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<5x3xf32> {mtc.name = "fc.weight", mtc.role = "param"},
                   %b: tensor<5xf32> {mtc.name = "fc.bias", mtc.role = "param"},
                   %r: tensor<5xf32> {mtc.name = "running", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}, tensor<5xf32> {mtc.name = "stat"}) {
  %mm0 = mtc.matmul %x, %w {transpose_b = true} : (tensor<4x3xf32>, tensor<5x3xf32>) -> tensor<4x5xf32>
  %0 = mtc.add %mm0, %b : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %1 = mtc.tanh %0 : tensor<4x5xf32>
  %l, %p = mtc.softmax_cross_entropy %1, %t : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  %s = mtc.add %r, %r : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>
  return %l, %s : tensor<f32>, tensor<5xf32>
}

// -----

// A value used twice gets the sum of both gradients.

// CHECK-LABEL: func.func @train_step
// CHECK: %[[SQ:.+]] = mtc.mul %[[P:[^,]+]], %[[P]] : (tensor<3xf32>, tensor<3xf32>)
// CHECK: %[[G1:.+]] = mtc.mul %{{.+}}, %[[P]] {mtc.backward}
// CHECK: %[[G2:.+]] = mtc.mul %{{.+}}, %[[P]] {mtc.backward}
// CHECK: %[[SUM:.+]] = mtc.add %[[G1]], %[[G2]] {mtc.backward}
// CHECK: return %{{.+}}, %[[SUM]]
func.func @forward(%p: tensor<3xf32> {mtc.name = "p", mtc.role = "param"}) -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.mul %p, %p : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = mtc.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Broadcast operands get gradients summed back to their own shape.

// CHECK-LABEL: func.func @train_step
// CHECK: mtc.reduce_sum %{{.+}} {axes = array<i64: 0, 2>, mtc.backward} : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
// CHECK: mtc.reshape %{{.+}} {mtc.backward} : (tensor<1x3x1xf32>) -> tensor<3x1xf32>
func.func @forward(%a: tensor<2x3x4xf32> {mtc.name = "a", mtc.role = "input"}, %b: tensor<3x1xf32> {mtc.name = "b", mtc.role = "param"}) -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.mul %a, %b : (tensor<2x3x4xf32>, tensor<3x1xf32>) -> tensor<2x3x4xf32>
  %1 = mtc.reduce_sum %0 {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// expected-error@+1 {{the first output 'logits' must be the scalar float loss, but it is 'tensor<4x5xf32>'}}
func.func @forward(%p: tensor<4x5xf32> {mtc.name = "p", mtc.role = "param"}) -> (tensor<4x5xf32> {mtc.name = "logits"}) {
  %0 = mtc.relu %p : tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// BatchNorm's new running statistics stay results of the step, tied to their
// buffers; the running statistics get no gradient.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[RM:[^:]+]]: tensor<3xf32> {mtc.name = "bn.running_mean", mtc.role = "buffer"}
// CHECK-SAME: -> (tensor<f32> {mtc.name = "loss", mtc.role = "loss"}, tensor<2x3x4xf32> {{.*}}mtc.role = "grad"}, tensor<3xf32> {mtc.name = "bn.weight.grad", {{.*}}}, tensor<3xf32> {mtc.name = "bn.bias.grad", {{.*}}}, tensor<3xf32> {mtc.role = "update", mtc.tied = 3 : i64}, tensor<3xf32> {mtc.role = "update", mtc.tied = 4 : i64})
// CHECK: %[[Y:.+]], %[[NM:.+]], %[[NV:.+]], %[[SM:.+]], %[[SI:.+]] = mtc.batch_norm_train
// CHECK: %[[DX:.+]], %[[DG:.+]], %[[DB:.+]] = mtc.batch_norm_train_grad %{{.+}}, %{{.+}}, %{{.+}}, %[[SM]], %[[SI]] {mtc.backward}
// CHECK: return %{{.+}}, %[[DX]], %[[DG]], %[[DB]], %[[NM]], %[[NV]]
func.func @forward(%x: tensor<2x3x4xf32> {mtc.name = "x", mtc.role = "param"},
                   %g: tensor<3xf32> {mtc.name = "bn.weight", mtc.role = "param"},
                   %b: tensor<3xf32> {mtc.name = "bn.bias", mtc.role = "param"},
                   %m: tensor<3xf32> {mtc.name = "bn.running_mean", mtc.role = "param"},
                   %v: tensor<3xf32> {mtc.name = "bn.running_var", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}, tensor<3xf32> {mtc.role = "update", mtc.tied = 3 : i64}, tensor<3xf32> {mtc.role = "update", mtc.tied = 4 : i64}) {
  %y, %nm, %nv, %sm, %si = mtc.batch_norm_train %x, %g, %b, %m, %v {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  %l = mtc.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  return %l, %nm, %nv : tensor<f32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// A value stored in bfloat16: its gradient is rounded to bfloat16 on the
// way back (convert back to the input's type), and two bfloat16 gradients
// add in float32 with one rounding.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.+]] = mtc.convert %{{.+}} : tensor<4xf32> to tensor<4xbf16>
// CHECK: %[[A:.+]] = mtc.convert %[[H]] : tensor<4xbf16> to tensor<4xf32>
// CHECK: %[[B:.+]] = mtc.convert %[[H]] : tensor<4xbf16> to tensor<4xf32>
// CHECK-DAG: %[[GA:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<4xf32> to tensor<4xbf16>
// CHECK-DAG: %[[GB:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<4xf32> to tensor<4xbf16>
// CHECK-DAG: %[[WA:.+]] = mtc.convert %[[GA]] {mtc.backward} : tensor<4xbf16> to tensor<4xf32>
// CHECK-DAG: %[[WB:.+]] = mtc.convert %[[GB]] {mtc.backward} : tensor<4xbf16> to tensor<4xf32>
// CHECK: %[[SUM:.+]] = mtc.add %{{.+}}, %{{.+}} {mtc.backward}
// CHECK: %[[G:.+]] = mtc.convert %[[SUM]] {mtc.backward} : tensor<4xf32> to tensor<4xbf16>
// CHECK: mtc.convert %[[G]] {mtc.backward} : tensor<4xbf16> to tensor<4xf32>
func.func @forward(%w: tensor<4xf32> {mtc.name = "w", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %h = mtc.convert %w : tensor<4xf32> to tensor<4xbf16>
  %a = mtc.convert %h : tensor<4xbf16> to tensor<4xf32>
  %b = mtc.convert %h : tensor<4xbf16> to tensor<4xf32>
  %p = mtc.mul %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = mtc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A weight shared by a batch of rows (a linear layer on [batch, seq,
// features]): its gradient is one product over the batch folded into the
// rows, dY^T X on reshapes, with no batched product summed afterwards.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3x4xf32>
// CHECK-SAME: %[[W:[^:]+]]: tensor<5x4xf32>
// CHECK: mtc.matmul %[[X]], %[[W]] {transpose_b = true}
// CHECK: %[[X2:.+]] = mtc.reshape %[[X]] {mtc.backward} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT: %[[DY2:.+]] = mtc.reshape %{{.+}} {mtc.backward} : (tensor<2x3x5xf32>) -> tensor<6x5xf32>
// CHECK-NEXT: %[[DW:.+]] = mtc.matmul %[[DY2]], %[[X2]] {mtc.backward, transpose_a = true} : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
// CHECK-NOT: mtc.reduce_sum
// CHECK: return %{{.+}}, %[[DW]]
func.func @forward(%x: tensor<2x3x4xf32> {mtc.name = "input", mtc.role = "input"},
                   %w: tensor<5x4xf32> {mtc.name = "fc.weight", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.matmul %x, %w {transpose_b = true} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %1 = mtc.mul %0, %0 : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %l = mtc.reduce_sum %1 {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x5xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
