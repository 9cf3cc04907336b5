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
