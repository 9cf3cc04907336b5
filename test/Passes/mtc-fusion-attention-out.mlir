// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// Under --precision bf16 every reader of the attention output narrows it:
// the transpose feeding the output projection and the conversion saving it
// for the backward. The attention stores bfloat16 itself, the transpose
// copies 16-bit values, and the attention backward reads the saved 16 bits
// instead of their widening.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[O:.+]], %[[LSE:.+]] = mtc.attention {{.*}} -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
// CHECK-NEXT: mtc.transpose %[[O]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xbf16>) -> tensor<2x8x4x16xbf16>
// CHECK-NOT: mtc.convert
// CHECK: mtc.attention_grad %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %[[O]], %[[LSE]] {{.*}} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
func.func @train_step(%q: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %k: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %v: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %dout: tensor<2x4x8x16xbf16> {mtc.role = "input"}) -> (tensor<2x8x4x16xbf16>, tensor<2x4x8x16xf32>) {
  %o, %lse = mtc.attention %q, %k, %v {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  %t = mtc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xbf16>
  %saved = mtc.convert %o : tensor<2x4x8x16xf32> to tensor<2x4x8x16xbf16>
  %wide = mtc.convert %saved {mtc.backward} : tensor<2x4x8x16xbf16> to tensor<2x4x8x16xf32>
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %wide, %lse {mtc.backward, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  return %t, %dq : tensor<2x8x4x16xbf16>, tensor<2x4x8x16xf32>
}

// -----

// A float32 reader of the output (here the step's result) keeps it float32;
// the backward still reads the saved 16 bits.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.attention {{.*}} -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
// CHECK: %[[SAVED:.+]] = mtc.convert %{{.+}} : tensor<2x4x8x16xf32> to tensor<2x4x8x16xbf16>
// CHECK-NOT: mtc.convert
// CHECK: mtc.attention_grad %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %[[SAVED]],
func.func @train_step(%q: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %k: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %v: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %dout: tensor<2x4x8x16xbf16> {mtc.role = "input"}) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  %o, %lse = mtc.attention %q, %k, %v {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  %saved = mtc.convert %o : tensor<2x4x8x16xf32> to tensor<2x4x8x16xbf16>
  %wide = mtc.convert %saved {mtc.backward} : tensor<2x4x8x16xbf16> to tensor<2x4x8x16xf32>
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %wide, %lse {mtc.backward, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  return %o, %dq : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}

// -----

// Readers narrowing to float16 while the operands are bfloat16: the output
// stays float32 (a 16-bit output is stored as the operands are), and so
// does the backward's operand, widened from another format.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.attention {{.*}} -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
// CHECK: mtc.convert %{{.+}} : tensor<2x4x8x16xf32> to tensor<2x4x8x16xf16>
// CHECK: %[[WIDE:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<2x4x8x16xf16> to tensor<2x4x8x16xf32>
// CHECK: mtc.attention_grad %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %[[WIDE]],
func.func @train_step(%q: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %k: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %v: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %dout: tensor<2x4x8x16xbf16> {mtc.role = "input"}) -> (tensor<2x4x8x16xf16>, tensor<2x4x8x16xf32>) {
  %o, %lse = mtc.attention %q, %k, %v {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  %saved = mtc.convert %o : tensor<2x4x8x16xf32> to tensor<2x4x8x16xf16>
  %wide = mtc.convert %saved {mtc.backward} : tensor<2x4x8x16xf16> to tensor<2x4x8x16xf32>
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %wide, %lse {mtc.backward, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  return %saved, %dq : tensor<2x4x8x16xf16>, tensor<2x4x8x16xf32>
}

// -----

// The gradients transposed back from heads and concatenated into one
// bfloat16 gradient of the packed projection (the backward of the slices
// that split it): the attention backward stores them in bfloat16, the
// transposes and the concat copy 16-bit values.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = mtc.attention_grad {{.*}} -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>)
// CHECK: mtc.transpose %[[DQ]] {{.*}} : (tensor<2x4x8x16xbf16>) -> tensor<2x8x4x16xbf16>
// CHECK: mtc.concat {{.*}} : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x192xbf16>
func.func @train_step(%q: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %k: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %v: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %o: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %lse: tensor<2x4x8xf32> {mtc.role = "input"}, %dout: tensor<2x4x8x16xbf16> {mtc.role = "input"}) -> tensor<2x8x192xbf16> {
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %o, %lse {mtc.backward, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %tq = mtc.transpose %dq {mtc.backward, perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %tk = mtc.transpose %dk {mtc.backward, perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %tv = mtc.transpose %dv {mtc.backward, perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %rq = mtc.reshape %tq {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %rk = mtc.reshape %tk {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %rv = mtc.reshape %tv {mtc.backward} : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %c = mtc.concat %rq, %rk, %rv {axis = 2 : i64, mtc.backward} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x192xf32>
  %n = mtc.convert %c {mtc.backward} : tensor<2x8x192xf32> to tensor<2x8x192xbf16>
  return %n : tensor<2x8x192xbf16>
}

// -----

// One gradient also read in float32 (here the step's result): all three
// stay float32.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.attention_grad {{.*}} -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
func.func @train_step(%q: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %k: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %v: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %o: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %lse: tensor<2x4x8xf32> {mtc.role = "input"}, %dout: tensor<2x4x8x16xbf16> {mtc.role = "input"}) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xf32>) {
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %o, %lse {mtc.backward, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %nq = mtc.convert %dq {mtc.backward} : tensor<2x4x8x16xf32> to tensor<2x4x8x16xbf16>
  %nk = mtc.convert %dk {mtc.backward} : tensor<2x4x8x16xf32> to tensor<2x4x8x16xbf16>
  return %nq, %nk, %dv : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xf32>
}

// -----

// A concat that also takes a float32 value from elsewhere: the gradients
// stay float32 (the concat's operands must be stored alike).
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.attention_grad {{.*}} -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
func.func @train_step(%q: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %k: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %v: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %o: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %lse: tensor<2x4x8xf32> {mtc.role = "input"}, %dout: tensor<2x4x8x16xbf16> {mtc.role = "input"}, %x: tensor<2x4x8x16xf32> {mtc.role = "input"}) -> tensor<8x4x8x16xbf16> {
  %dq, %dk, %dv = mtc.attention_grad %dout, %q, %k, %v, %o, %lse {mtc.backward, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %c = mtc.concat %dq, %dk, %dv, %x {axis = 0 : i64, mtc.backward} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<8x4x8x16xf32>
  %n = mtc.convert %c {mtc.backward} : tensor<8x4x8x16xf32> to tensor<8x4x8x16xbf16>
  return %n : tensor<8x4x8x16xbf16>
}

// -----

// Heads transposed out of a computed [B, S, H, D] value for an attention
// that keeps the [B, H, S, D] layout: the kernels read the rows through
// the transpose's strides, so it copies nothing. A transpose another op
// also reads as a tensor stays a copy.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[T:.+]] = mtc.transpose {{.*}}mtc.strided_view, perm = array<i64: 0, 2, 1, 3>}
// CHECK: %[[U:.+]] = mtc.transpose %{{[^ ]+}} {perm = array<i64: 0, 2, 1, 3>}
// CHECK: mtc.attention %[[T]], %[[T]], %[[U]]
func.func @train_step(%a: tensor<2x8x4x16xf32> {mtc.role = "input"}, %b: tensor<2x8x4x16xf32> {mtc.role = "input"}) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  %x = mtc.add %a, %b : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  %y = mtc.sub %a, %b : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  %t = mtc.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %u = mtc.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %o, %lse = mtc.attention %t, %t, %u {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  return %o, %u : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}
