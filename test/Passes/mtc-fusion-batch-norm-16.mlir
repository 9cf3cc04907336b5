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
