// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// A chain with a broadcast input becomes one op at the chain's end; the
// broadcast bias stays an input.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>{{.*}}, %[[B:.+]]: tensor<8xf32>
// CHECK: %[[F:.+]] = mtc.fused %[[X]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[A0:.+]]: tensor<4x8xf32>, %[[A1:.+]]: tensor<8xf32>):
// CHECK-NEXT: %[[S:.+]] = mtc.add %[[A0]], %[[A1]]
// CHECK-NEXT: %[[T:.+]] = mtc.tanh %[[S]]
// CHECK-NEXT: %[[R:.+]] = mtc.relu %[[T]]
// CHECK-NEXT: mtc.yield %[[R]]
// CHECK: return %[[F]]
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %b: tensor<8xf32> {mtc.role = "param"}) -> tensor<4x8xf32> {
  %s = mtc.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %t = mtc.tanh %s : tensor<4x8xf32>
  %r = mtc.relu %t : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// Values the rest of the step reads (here %t, read by the backward pass,
// and the chain's end %n) are results of the fused op; %e stays a
// register. Forward and backward ops are never fused together, nor are ops
// with another op between them, nor ops of different shapes; a value used
// twice inside a group stays a register.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[F:.+]]:2 = mtc.fused %{{.+}} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK: %[[E:.+]] = mtc.exp
// CHECK-NEXT: %[[T:.+]] = mtc.tanh %[[E]]
// CHECK-NEXT: %[[N:.+]] = mtc.neg %[[T]]
// CHECK-NEXT: mtc.yield %[[T]], %[[N]]
// CHECK: mtc.reduce_sum %[[F]]#1
// CHECK-NEXT: %[[Q:.+]] = mtc.sqrt %[[F]]#1
// CHECK-NEXT: %[[G:.+]] = mtc.fused %[[Q]], %[[F]]#0 {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[AQ:.+]]: tensor<4x8xf32>, %[[AT:.+]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[G0:.+]] = mtc.relu %[[AQ]]
// CHECK-NEXT: %[[G1:.+]] = mtc.mul %[[AT]], %[[G0]]
// CHECK-NEXT: mtc.sub %[[G1]], %[[G0]]
// CHECK-NEXT: mtc.yield
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>) {
  %e = mtc.exp %x : tensor<4x8xf32>
  %t = mtc.tanh %e : tensor<4x8xf32>
  %n = mtc.neg %t : tensor<4x8xf32>
  %r = mtc.reduce_sum %n {axes = array<i64: 0>, keepdims = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %q = mtc.sqrt %n : tensor<4x8xf32>
  %g0 = mtc.relu %q {mtc.backward} : tensor<4x8xf32>
  %g1 = mtc.mul %t, %g0 {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g2 = mtc.sub %g1, %g0 {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %g2, %q, %r : tensor<4x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>
}

// -----

// A 16-bit value inside a chain stays in the body (the kernel rounds it as
// a store would).
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.fused %{{.+}} : (tensor<16xf32>) -> tensor<16xf32> {
// CHECK: mtc.convert {{.+}} to tensor<16xbf16>
// CHECK-NEXT: mtc.convert {{.+}} to tensor<16xf32>
// CHECK-NEXT: mtc.sigmoid
func.func @train_step(%x: tensor<16xf32> {mtc.role = "input"}) -> tensor<16xf32> {
  %h = mtc.convert %x : tensor<16xf32> to tensor<16xbf16>
  %w = mtc.convert %h : tensor<16xbf16> to tensor<16xf32>
  %s = mtc.sigmoid %w : tensor<16xf32>
  return %s : tensor<16xf32>
}

// -----

// Dropout and its gradient fuse like elementwise ops (the kernel draws each
// group of four elements' mask once): the residual bias, dropout and add of
// a transformer block is one kernel, as is the backward's dropout gradient
// with its neighbours.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.fused %{{.+}}, %{{.+}}, %{{.+}} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: mtc.add
// CHECK-NEXT: mtc.dropout {{.+}} {ratio = 1.000000e-01 : f32, stream = 2 : i64}
// CHECK-NEXT: mtc.add
// CHECK: mtc.fused %{{.+}}, %{{.+}} {mtc.backward}
// CHECK: mtc.dropout_grad {{.+}} {ratio = 1.000000e-01 : f32, stream = 2 : i64}
// CHECK-NEXT: mtc.mul
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %b: tensor<8xf32> {mtc.role = "param"}, %res: tensor<4x8xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = mtc.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %d = mtc.dropout %a {ratio = 1.000000e-01 : f32, stream = 2 : i64} : tensor<4x8xf32>
  %y = mtc.add %d, %res : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g = mtc.dropout_grad %y {mtc.backward, ratio = 1.000000e-01 : f32, stream = 2 : i64} : tensor<4x8xf32>
  %m = mtc.mul %g, %x {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %m : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Consecutive AdamW updates with the same hyperparameters are marked as one
// multi-tensor update (the first carries the group's length); an update
// with another learning rate starts a group of its own, and a lone update
// is not marked.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.adamw_update {{.+}}mtc.update_group = 2 : i64
// CHECK-NEXT: mtc.adamw_update
// CHECK-NOT: mtc.update_group
// CHECK-NEXT: mtc.adamw_update
// CHECK-NOT: mtc.update_group
// CHECK: return
func.func @train_step(%p0: tensor<4xf32> {mtc.role = "param"}, %p1: tensor<8xf32> {mtc.role = "param"}, %p2: tensor<8xf32> {mtc.role = "param"}, %g0: tensor<4xf32> {mtc.role = "input"}, %g1: tensor<8xf32> {mtc.role = "input"}, %m0: tensor<4xf32> {mtc.role = "state"}, %v0: tensor<4xf32> {mtc.role = "state"}, %m1: tensor<8xf32> {mtc.role = "state"}, %v1: tensor<8xf32> {mtc.role = "state"}, %m2: tensor<8xf32> {mtc.role = "state"}, %v2: tensor<8xf32> {mtc.role = "state"}) -> (tensor<4xf32>, tensor<8xf32>, tensor<8xf32>) {
  %a:3 = mtc.adamw_update %p0, %g0, %m0, %v0 {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, mtc.optimizer} : tensor<4xf32>
  %b:3 = mtc.adamw_update %p1, %g1, %m1, %v1 {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, mtc.optimizer} : tensor<8xf32>
  %c:3 = mtc.adamw_update %p2, %g1, %m2, %v2 {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, lr = 2.000000e-02 : f64, mtc.optimizer} : tensor<8xf32>
  return %a#0, %b#0, %c#0 : tensor<4xf32>, tensor<8xf32>, tensor<8xf32>
}
