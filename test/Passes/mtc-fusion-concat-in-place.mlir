// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s
// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise --mtc-memory-plan="alignment=64" | FileCheck %s --check-prefix=PLAN

// The attention backward's three gradients ([B, S, H, D], seq_major),
// merged to [B, S, C] and concatenated into the gradient of the packed
// projection they were sliced from: the concat is written in place, the
// backward writing each gradient into its columns of the result (row
// stride 3C). The memory plan puts dQ, dK and dV at the result's offset
// plus 0, C and 2C floats.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.concat {{.*}}mtc.written_in_place
// PLAN-LABEL: func.func @train_step
// PLAN: mtc.attention_grad {{.*}}mtc.offsets = array<i64: [[#DQ:]],
// PLAN-NEXT: mtc.reshape %query_grad {{.*}}mtc.offsets = array<i64: [[#DQ]]>
// PLAN-NEXT: mtc.reshape %key_grad {{.*}}mtc.offsets = array<i64: [[#DQ+256]]>
// PLAN-NEXT: mtc.reshape %value_grad {{.*}}mtc.offsets = array<i64: [[#DQ+512]]>
// PLAN-NEXT: mtc.concat {{.*}}mtc.offsets = array<i64: [[#DQ]]>
func.func @train_step(%q: tensor<2x8x4x16xf32> {mtc.role = "input"}, %k: tensor<2x8x4x16xf32> {mtc.role = "input"}, %v: tensor<2x8x4x16xf32> {mtc.role = "input"}, %o: tensor<2x8x4x16xf32> {mtc.role = "input"}, %lse: tensor<2x4x8xf32> {mtc.role = "input"}, %dout: tensor<2x8x4x16xf32> {mtc.role = "input"}) -> tensor<2x8x192xf32> {
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %o, %lse {mtc.backward, scale = 2.500000e-01 : f32, seq_major} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  %rq = mtc.reshape %dq {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %rk = mtc.reshape %dk {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %rv = mtc.reshape %dv {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %c = mtc.concat %rq, %rk, %rv {axis = 2 : i64, mtc.backward} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x192xf32>
  return %c : tensor<2x8x192xf32>
}

// -----

// A gradient something else reads too must exist on its own: the concat
// copies.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.concat
// CHECK-NOT: mtc.written_in_place
// CHECK: return
func.func @train_step(%q: tensor<2x8x4x16xf32> {mtc.role = "input"}, %k: tensor<2x8x4x16xf32> {mtc.role = "input"}, %v: tensor<2x8x4x16xf32> {mtc.role = "input"}, %o: tensor<2x8x4x16xf32> {mtc.role = "input"}, %lse: tensor<2x4x8xf32> {mtc.role = "input"}, %dout: tensor<2x8x4x16xf32> {mtc.role = "input"}) -> (tensor<2x8x192xf32>, tensor<2x8x4x16xf32>) {
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %o, %lse {mtc.backward, scale = 2.500000e-01 : f32, seq_major} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  %rq = mtc.reshape %dq {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %rk = mtc.reshape %dk {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %rv = mtc.reshape %dv {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %c = mtc.concat %rq, %rk, %rv {axis = 2 : i64, mtc.backward} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x192xf32>
  return %c, %dk : tensor<2x8x192xf32>, tensor<2x8x4x16xf32>
}

// -----

// An input no attention backward writes: the concat copies.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.concat
// CHECK-NOT: mtc.written_in_place
// CHECK: return
func.func @train_step(%a: tensor<2x8x64xf32> {mtc.role = "input"}, %b: tensor<2x8x64xf32> {mtc.role = "input"}) -> tensor<2x8x128xf32> {
  %t = mtc.tanh %a {mtc.backward} : tensor<2x8x64xf32>
  %c = mtc.concat %t, %b {axis = 2 : i64, mtc.backward} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x128xf32>
  return %c : tensor<2x8x128xf32>
}
