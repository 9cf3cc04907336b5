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
// with another op between them whose result the later one reads, nor ops
// of different shapes; a value used twice inside a group stays a
// register.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[F:.+]]:2 = mtc.fused %{{.+}} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK: %[[E:.+]] = mtc.exp
// CHECK-NEXT: %[[T:.+]] = mtc.tanh %[[E]]
// CHECK-NEXT: %[[N:.+]] = mtc.neg %[[T]]
// CHECK-NEXT: mtc.yield %[[T]], %[[N]]
// CHECK: %[[R:.+]] = mtc.reduce_sum %[[F]]#1
// CHECK-NEXT: %[[Q:.+]] = mtc.sub %[[F]]#1, %[[R]]
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
  %q = mtc.sub %n, %r : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %g0 = mtc.relu %q {mtc.backward} : tensor<4x8xf32>
  %g1 = mtc.mul %t, %g0 {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g2 = mtc.sub %g1, %g0 {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %g2, %q, %r : tensor<4x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>
}

// -----

// The run's end read by an op that ends the run (a pooling, a layer norm)
// and, right after it, by an elementwise op that does not read that op's
// result (the 16-bit copy of a residual sum): the second moves before the
// first, into the run, which then writes the copy too.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[F:.+]]:2 = mtc.fused %{{.+}}, %{{.+}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xbf16>) {
// CHECK: mtc.add
// CHECK-NEXT: %[[R:.+]] = mtc.relu
// CHECK-NEXT: %[[C:.+]] = mtc.convert %[[R]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK-NEXT: mtc.yield %[[R]], %[[C]]
// CHECK: %[[P:.+]] = mtc.reduce_sum %[[F]]#0
// CHECK-NEXT: return %[[P]], %[[F]]#1
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %y: tensor<4x8xf32> {mtc.role = "input"}) -> (tensor<1x8xf32>, tensor<4x8xbf16>) {
  %s = mtc.add %x, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = mtc.relu %s : tensor<4x8xf32>
  %p = mtc.reduce_sum %r {axes = array<i64: 0>, keepdims = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %c = mtc.convert %r : tensor<4x8xf32> to tensor<4x8xbf16>
  return %p, %c : tensor<1x8xf32>, tensor<4x8xbf16>
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

// -----

// Ops of one phase and shape that stand next to each other fuse even when
// neither reads the other (here the two halves of a backward chain), and a
// constant between them moves out of the way instead of splitting the run.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.constant
// CHECK-NEXT: %[[F:.+]] = mtc.fused
// CHECK-NEXT: ^bb0
// CHECK-NEXT: mtc.exp
// CHECK-NEXT: mtc.tanh
// CHECK-NEXT: mtc.mul
// CHECK-NEXT: mtc.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %y: tensor<4x8xf32> {mtc.role = "input"}) -> tensor<4x8xf32> {
  %e = mtc.exp %x : tensor<4x8xf32>
  %c = mtc.constant dense<2.0> : tensor<f32>
  %t = mtc.tanh %y : tensor<4x8xf32>
  %m = mtc.mul %e, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}

// -----

// GELU written out: the forward kernel stores the pre-activation %h (the
// backward reads it) and the result, but not x / sqrt2 nor erf + 1: the
// backward kernel computes them again from %h, which it reads anyway, and
// x / sqrt2 once, though both recomputed values start from it.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[FW:.+]]:2 = mtc.fused %{{.+}} : (tensor<4x8xf32>, tensor<8xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
// CHECK: mtc.yield %{{.+}}, %{{.+}} : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK: mtc.fused %[[DY:[^,]+]], %{{.+}}, %[[FW]]#0, %{{.+}} {mtc.backward} : (tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>, tensor<f32>, tensor<f32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<4x8xf32>, %{{.+}}: tensor<f32>, %[[H:.+]]: tensor<4x8xf32>, %[[S:[^:]+]]: tensor<f32>, %[[ONE:[^:]+]]: tensor<f32>):
// CHECK-NEXT: %[[U:.+]] = mtc.div %[[H]], %[[S]]
// CHECK-NEXT: %[[E:.+]] = mtc.erf %[[U]]
// CHECK-NEXT: mtc.add %[[E]], %[[ONE]]
// CHECK-NOT: mtc.div
// CHECK: mtc.mul %[[U]], %[[U]]
// CHECK-NOT: mtc.div
// CHECK: mtc.yield
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %b: tensor<8xf32> {mtc.role = "param"}, %dy: tensor<4x8xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %sqrt2 = mtc.constant dense<1.41421354> : tensor<f32>
  %one = mtc.constant dense<1.0> : tensor<f32>
  %half = mtc.constant dense<0.5> : tensor<f32>
  %h = mtc.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %u = mtc.div %h, %sqrt2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = mtc.erf %u : tensor<4x8xf32>
  %p = mtc.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = mtc.mul %h, %p : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = mtc.mul %m, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %g = mtc.mul %dy, %half {mtc.backward} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %g1 = mtc.mul %g, %p {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g2 = mtc.mul %g, %h {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %sq = mtc.mul %u, %u {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ex = mtc.exp %sq {mtc.backward} : tensor<4x8xf32>
  %g3 = mtc.mul %g2, %ex {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dx = mtc.add %g1, %g3 {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %dx : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// What stays stored: a value a non-elementwise backward op reads (%t, read
// by the reduction), one whose recomputation needs a dropout (%d), and one
// that needs two full-size tensors the backward kernel does not read (%s,
// from %x and %z, which stay alive for other readers).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[FW:.+]]:3 = mtc.fused
// CHECK: mtc.yield %{{.+}}, %{{.+}}, %{{.+}} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
// CHECK: mtc.reduce_sum %[[FW]]#0
// CHECK: mtc.fused {{.*}}%[[FW]]#1{{.*}}%[[FW]]#2{{.*}} {mtc.backward}
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %z: tensor<4x8xf32> {mtc.role = "input"}, %dy: tensor<4x8xf32> {mtc.role = "input"}) -> (tensor<4x8xf32>, tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %t = mtc.tanh %x : tensor<4x8xf32>
  %d = mtc.dropout %t {ratio = 1.000000e-01 : f32, stream = 0 : i64} : tensor<4x8xf32>
  %s = mtc.add %x, %z : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = mtc.reduce_sum %t {axes = array<i64: 0>, keepdims = true, mtc.backward} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %g = mtc.mul %dy, %d {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %g1 = mtc.mul %g, %s {mtc.backward} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %g1, %r, %x, %z : tensor<4x8xf32>, tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A layer norm or a transpose whose float32 result only a 16-bit
// conversion reads stores the 16-bit values itself; a layer norm whose
// output something else reads too keeps its float32 output and the
// conversion (here fused with the other reader).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]], %{{.+}}, %{{.+}} = mtc.layer_norm {{.+}} -> (tensor<4x8xbf16>, tensor<4x1xf32>, tensor<4x1xf32>)
// CHECK-NOT: mtc.convert %[[Y]]
// CHECK: %[[Z:.+]], %{{.+}}, %{{.+}} = mtc.layer_norm {{.+}} -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
// CHECK: mtc.fused %[[Z]] : (tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>)
// CHECK: mtc.convert {{.+}} : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: %[[T:.+]] = mtc.transpose %{{.+}} : (tensor<4x8xf32>) -> tensor<8x4xbf16>
// CHECK-NOT: mtc.convert
// CHECK: return %[[Y]], {{.+}}, %[[T]]
func.func @train_step(%x: tensor<4x8xf32> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}) -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<8x4xbf16>) {
  %y, %m, %s = mtc.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %yh = mtc.convert %y : tensor<4x8xf32> to tensor<4x8xbf16>
  %z, %m2, %s2 = mtc.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %zh = mtc.convert %z : tensor<4x8xf32> to tensor<4x8xbf16>
  %r = mtc.relu %z : tensor<4x8xf32>
  %t = mtc.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %th = mtc.convert %t : tensor<8x4xf32> to tensor<8x4xbf16>
  return %yh, %zh, %r, %m, %th : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<8x4xbf16>
}
