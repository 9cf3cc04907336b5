// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// A residual block's end: the sum of a batch normalization's output and the
// block's input, then a ReLU. The batch normalization adds the residual and
// applies the ReLU itself; no add, relu or fused kernel is left.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x3x3xf32>{{.*}}, %[[R:[^:]+]]: tensor<2x4x3x3xf32>
// CHECK-NOT: mtc.add
// CHECK: %[[Y:[^,]+]], {{.+}} = mtc.batch_norm_train %[[X]], %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} residual %[[R]] {activation = "relu"
// CHECK-NOT: mtc.add
// CHECK-NOT: mtc.relu
// CHECK-NOT: mtc.fused
// CHECK: return %[[Y]]
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %r: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> tensor<2x4x3x3xf32> {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %sum = mtc.add %y, %r : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %out = mtc.relu %sum : tensor<2x4x3x3xf32>
  return %out : tensor<2x4x3x3xf32>
}

// -----

// Under bf16: the stored output widened, the block's 16-bit input widened,
// added, ReLU, rounded. The batch normalization stores the rounded result
// (bf16, as its output already was) and reads the residual as stored. With
// two batch normalizations (a downsampling block) the later one takes the
// sum; the earlier one's output is its residual.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x3x3xbf16>{{.*}}, %[[X2:[^:]+]]: tensor<2x4x3x3xbf16>
// CHECK: %[[D:[^,]+]], {{.+}} = mtc.batch_norm_train %[[X2]], %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} {epsilon
// CHECK: %[[Y:[^,]+]], {{.+}} = mtc.batch_norm_train %[[X]], %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} residual %[[D]] {activation = "relu"{{.+}} -> (tensor<2x4x3x3xbf16>
// CHECK-NOT: mtc.fused
// CHECK: return %[[Y]]
func.func @train_step(%x: tensor<2x4x3x3xbf16> {mtc.role = "input"}, %x2: tensor<2x4x3x3xbf16> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> tensor<2x4x3x3xbf16> {
  %d, %dnm, %dnv, %dm, %ds = mtc.batch_norm_train %x2, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %wd = mtc.convert %d : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %wy = mtc.convert %y : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %sum = mtc.add %wy, %wd : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %act = mtc.relu %sum : tensor<2x4x3x3xf32>
  %out = mtc.convert %act : tensor<2x4x3x3xf32> to tensor<2x4x3x3xbf16>
  return %out : tensor<2x4x3x3xbf16>
}

// -----

// Not folded: an output something else reads too.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: residual
// CHECK: mtc.fused
// CHECK-NOT: residual
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %r: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %sum = mtc.add %y, %r : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %out = mtc.relu %sum : tensor<2x4x3x3xf32>
  return %y, %out : tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>
}

// -----

// Not folded: a float32 sum of a 16-bit output (the output would change
// type).
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: residual
// CHECK: mtc.fused
// CHECK-NOT: residual
func.func @train_step(%x16: tensor<2x4x3x3xbf16> {mtc.role = "input"}, %r: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> tensor<2x4x3x3xf32> {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x16, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %w = mtc.convert %y : tensor<2x4x3x3xbf16> to tensor<2x4x3x3xf32>
  %sum = mtc.add %w, %r : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %out = mtc.relu %sum : tensor<2x4x3x3xf32>
  return %out : tensor<2x4x3x3xf32>
}

// -----

// Not folded: a residual computed after the batch normalization.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: residual
// CHECK: mtc.add
// CHECK-NOT: residual
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %r: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> tensor<2x4x3x3xf32> {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %late = mtc.matmul %r, %r : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  %sum = mtc.add %y, %late : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  return %sum : tensor<2x4x3x3xf32>
}
