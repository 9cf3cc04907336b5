// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// The forward: a batch norm whose output only 16-bit copies read (the next
// convolution's operand) stores it in bfloat16, and the 16-bit copy of its
// float32 input that the backward pass keeps is written by the batch norm
// as it reads the input (input16). The backward reads that copy and the
// stored activation output as they are, and stores its input gradient,
// which only 16-bit copies read, in bfloat16. No conversion is left.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.convert
// CHECK: %[[Y:[^,]+]], %{{[^,]+}}, %{{[^,]+}}, %[[M:[^,]+]], %[[S:[^,]+]], %[[XH:[^ ]+]] = mtc.batch_norm_train %[[X:[^,]+]], {{.+}} -> (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x3x3xbf16>)
// CHECK-NOT: mtc.convert
// CHECK: %[[DX:[^,]+]], {{.+}} = mtc.batch_norm_train_grad %{{[^,]+}}, %[[XH]], %{{[^,]+}}, %[[M]], %[[S]] activation %[[Y]] {{.+}} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x3x3xbf16>) -> (tensor<2x4x3x3xbf16>,
// CHECK-NOT: mtc.convert
// CHECK: return %[[Y]], %[[DX]]
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %dy: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> (tensor<2x4x3x3xbf16>, tensor<2x4x3x3xbf16>) {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {activation = "relu", epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %xh = mtc.convert %x : tensor<2x4x3x3xf32> to tensor<2x4x3x3xbf16>
  %yh = mtc.convert %y : tensor<2x4x3x3xf32> to tensor<2x4x3x3xbf16>
  %xw = mtc.convert %xh {mtc.backward} : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %yw = mtc.convert %yh {mtc.backward} : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %dx, %dg, %db = mtc.batch_norm_train_grad %dy, %xw, %g, %m, %s activation %yw {activation = "relu", mtc.backward} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x3x3xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  %dxh = mtc.convert %dx {mtc.backward} : tensor<2x4x3x3xf32> to tensor<2x4x3x3xbf16>
  return %yh, %dxh : tensor<2x4x3x3xbf16>, tensor<2x4x3x3xbf16>
}

// -----

// Not folded: an output a float32 op reads too (the residual add) stays
// float32 (its input's copy is still written by the batch norm); a backward
// whose activation output is float32 keeps its input widened (one format
// for both), and an input gradient narrowed to another format than its
// input's stays float32.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:[^,]+]], {{.+}} = mtc.batch_norm_train {{.+}} -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x3x3xbf16>)
// CHECK: mtc.fused %[[Y]]
// CHECK: %[[XW:.+]] = mtc.convert {{.+}} to tensor<2x4x3x3xf32>
// CHECK: mtc.batch_norm_train_grad %{{[^,]+}}, %[[XW]], {{.+}} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x3x3xf32>) -> (tensor<2x4x3x3xf32>,
// CHECK: mtc.batch_norm_train_grad {{.+}} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>,
// CHECK: mtc.convert {{.+}} to tensor<2x4x3x3xf16>
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %dy: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> (tensor<2x4x3x3xf32>, tensor<2x4x3x3xbf16>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf16>) {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %xh = mtc.convert %x : tensor<2x4x3x3xf32> to tensor<2x4x3x3xbf16>
  %sum = mtc.add %y, %x : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %yh = mtc.convert %y : tensor<2x4x3x3xf32> to tensor<2x4x3x3xbf16>
  %xw = mtc.convert %xh {mtc.backward} : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %dx, %dg, %db = mtc.batch_norm_train_grad %dy, %xw, %g, %m, %s activation %sum {activation = "relu", mtc.backward} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x4x3x3xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  %xw2 = mtc.convert %xh {mtc.backward} : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %dx2, %dg2, %db2 = mtc.batch_norm_train_grad %dy, %xw2, %g, %m, %s {mtc.backward} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  %dxh = mtc.convert %dx2 {mtc.backward} : tensor<2x4x3x3xf32> to tensor<2x4x3x3xf16>
  return %sum, %yh, %dx, %dxh : tensor<2x4x3x3xf32>, tensor<2x4x3x3xbf16>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf16>
}

// -----

// A convolution's result rounded to bfloat16 for its batch norm (see the
// precision pass): a convolution that multiplies the 16-bit operands as
// stored stores the rounded result itself, which the batch norm reads as
// stored. Not: a convolution with a bias, or one that widens its operands
// (the CPU's), which keep the conversion.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.convert
// CHECK: %[[Y:.+]] = mtc.conv {{.+}} -> tensor<2x8x4x4xbf16>
// CHECK-NEXT: mtc.batch_norm_train %[[Y]], {{.+}} : (tensor<2x8x4x4xbf16>,
// CHECK: %[[B:.+]] = mtc.conv {{.+}} -> tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[BH:.+]] = mtc.convert %[[B]] : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
// CHECK-NEXT: mtc.batch_norm_train %[[BH]],
// CHECK: %[[C:.+]] = mtc.conv {{.+}} -> tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[CH:.+]] = mtc.convert %[[C]] : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
// CHECK-NEXT: mtc.batch_norm_train %[[CH]],
func.func @train_step(%x: tensor<2x3x4x4xbf16> {mtc.role = "input"}, %w: tensor<8x3x3x3xbf16> {mtc.role = "param"}, %cb: tensor<8xf32> {mtc.role = "param"}, %g: tensor<8xf32> {mtc.role = "param"}, %b: tensor<8xf32> {mtc.role = "param"}, %rm: tensor<8xf32> {mtc.role = "buffer"}, %rv: tensor<8xf32> {mtc.role = "buffer"}) -> (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) {
  %y = mtc.conv %x, %w {mtc.native_16bit_gemm, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<8x3x3x3xbf16>) -> tensor<2x8x4x4xf32>
  %yh = mtc.convert %y : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
  %yw = mtc.convert %yh : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %n1:5 = mtc.batch_norm_train %yw, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %z = mtc.conv %x, %w, %cb {mtc.native_16bit_gemm, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<8x3x3x3xbf16>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  %zh = mtc.convert %z : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
  %zw = mtc.convert %zh : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %n2:5 = mtc.batch_norm_train %zw, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %u = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<8x3x3x3xbf16>) -> tensor<2x8x4x4xf32>
  %uh = mtc.convert %u : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
  %uw = mtc.convert %uh : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %n3:5 = mtc.batch_norm_train %uw, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %n1#0, %n2#0, %n3#0 : tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>
}

// -----

// A convolution backward's input gradient rounded to bfloat16 (see the
// precision pass): one that multiplies the 16-bit operands as stored
// stores the rounded gradient itself, and a batch norm backward whose
// saved input is 16-bit reads it as stored. One that widens its operands
// (the CPU's) keeps the conversion, whose result the batch norm backward
// reads as stored all the same.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.convert
// CHECK: %[[D:.+]] = mtc.conv_backward_data {{.+}} -> tensor<2x8x4x4xbf16>
// CHECK-NOT: mtc.convert
// CHECK: mtc.batch_norm_train_grad %[[D]], %{{[^,]+}}, {{.+}} : (tensor<2x8x4x4xbf16>, tensor<2x8x4x4xbf16>,
// CHECK: %[[E:.+]] = mtc.conv_backward_data {{.+}} -> tensor<2x8x4x4xf32>
// CHECK-NEXT: %[[EH:.+]] = mtc.convert %[[E]] {mtc.backward} : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
// CHECK-NEXT: mtc.batch_norm_train_grad %[[EH]], %{{[^,]+}}, {{.+}} : (tensor<2x8x4x4xbf16>, tensor<2x8x4x4xbf16>,
func.func @train_step(%xh: tensor<2x8x4x4xbf16> {mtc.role = "input"}, %dy: tensor<2x3x4x4xbf16> {mtc.role = "input"}, %w: tensor<3x8x3x3xbf16> {mtc.role = "param"}, %g: tensor<8xf32> {mtc.role = "param"}, %m: tensor<8xf32> {mtc.role = "input"}, %s: tensor<8xf32> {mtc.role = "input"}) -> (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) {
  %d = mtc.conv_backward_data %dy, %w {mtc.backward, mtc.native_16bit_gemm, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<3x8x3x3xbf16>) -> tensor<2x8x4x4xf32>
  %dh = mtc.convert %d {mtc.backward} : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
  %xw = mtc.convert %xh {mtc.backward} : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %dw = mtc.convert %dh {mtc.backward} : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %dx, %dg, %db = mtc.batch_norm_train_grad %dw, %xw, %g, %m, %s {mtc.backward} : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>)
  %e = mtc.conv_backward_data %dy, %w {mtc.backward, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<3x8x3x3xbf16>) -> tensor<2x8x4x4xf32>
  %eh = mtc.convert %e {mtc.backward} : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
  %xw2 = mtc.convert %xh {mtc.backward} : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %ew = mtc.convert %eh {mtc.backward} : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %ex, %eg, %eb = mtc.batch_norm_train_grad %ew, %xw2, %g, %m, %s {mtc.backward} : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>)
  return %dx, %ex : tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>
}

// -----

// A max pooling whose result only 16-bit copies read pools the 16-bit copy
// of its input that the backward pass keeps (moved before it): the max of
// the rounded values is the rounded max. The batch norm then stores its
// output, which only that copy reads, in 16 bits. The max pooling backward
// reads the saved input and the rounded gradient as stored and stores its
// rounded input gradient, which the batch norm backward reads as stored.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.convert
// CHECK: %[[Y:[^,]+]], {{.+}} = mtc.batch_norm_train {{.+}} -> (tensor<2x8x8x8xbf16>,
// CHECK-NEXT: %[[P:.+]] = mtc.max_pool %[[Y]] {{.+}} : (tensor<2x8x8x8xbf16>) -> tensor<2x8x4x4xbf16>
// CHECK: %[[DX:.+]] = mtc.max_pool_grad %[[Y]], %{{.+}} : (tensor<2x8x8x8xbf16>, tensor<2x8x4x4xbf16>) -> tensor<2x8x8x8xbf16>
// CHECK-NEXT: mtc.batch_norm_train_grad %[[DX]], {{.+}} activation %[[Y]]
// CHECK-NOT: mtc.convert
// CHECK: return
func.func @train_step(%x: tensor<2x8x8x8xbf16> {mtc.role = "input"}, %dyh: tensor<2x8x4x4xbf16> {mtc.role = "input"}, %g: tensor<8xf32> {mtc.role = "param"}, %b: tensor<8xf32> {mtc.role = "param"}, %rm: tensor<8xf32> {mtc.role = "buffer"}, %rv: tensor<8xf32> {mtc.role = "buffer"}) -> (tensor<2x8x4x4xbf16>, tensor<2x8x8x8xf32>) {
  %xw = mtc.convert %x : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %xw, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %r = mtc.relu %y : tensor<2x8x8x8xf32>
  %p = mtc.max_pool %r {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x4x4xf32>
  %rh = mtc.convert %r : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
  %ph = mtc.convert %p : tensor<2x8x4x4xf32> to tensor<2x8x4x4xbf16>
  %rw = mtc.convert %rh {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
  %dyw = mtc.convert %dyh {mtc.backward} : tensor<2x8x4x4xbf16> to tensor<2x8x4x4xf32>
  %dp = mtc.max_pool_grad %rw, %dyw {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, mtc.backward} : (tensor<2x8x8x8xf32>, tensor<2x8x4x4xf32>) -> tensor<2x8x8x8xf32>
  %dph = mtc.convert %dp {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
  %dpw = mtc.convert %dph {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
  %dr = mtc.relu_grad %dpw, %rw {mtc.backward} : tensor<2x8x8x8xf32>
  %xw2 = mtc.convert %x {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
  %dx, %dg, %db = mtc.batch_norm_train_grad %dr, %xw2, %g, %m, %s {mtc.backward} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %ph, %dx : tensor<2x8x4x4xbf16>, tensor<2x8x8x8xf32>
}
