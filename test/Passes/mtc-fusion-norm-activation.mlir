// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// A ReLU that alone reads a batch normalization's output runs in it; the
// ReLU's gradient that alone feeds the batch normalization backward runs in
// that, testing the operand relu_grad tested.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x3x3xf32>{{.*}}, %[[DY:[^:]+]]: tensor<2x4x3x3xf32>
// CHECK-NOT: mtc.relu
// CHECK: %[[Y:[^,]+]], %{{.+}}, %{{.+}}, %[[M:[^,]+]], %[[S:[^ ]+]] = mtc.batch_norm_train %[[X]], {{.+}}activation = "relu"
// CHECK-NOT: mtc.relu
// CHECK: mtc.batch_norm_train_grad %[[DY]], %[[X]], %{{[^ ]+}}, %[[M]], %[[S]] activation %[[Y]] {activation = "relu", mtc.backward}
// CHECK-NOT: mtc.relu
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %dy: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r = mtc.relu %y : tensor<2x4x3x3xf32>
  %d = mtc.relu_grad %dy, %r {mtc.backward} : tensor<2x4x3x3xf32>
  %dx, %dg, %db = mtc.batch_norm_train_grad %d, %x, %g, %m, %s {mtc.backward} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  return %r, %dx : tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>
}

// -----

// ReLU6 (clip) folds with its bounds. Not folded: an activation of an
// output something else reads too, and a gradient something else reads.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.batch_norm_train {{.+}}activation = "clip", clip_max = 6.000000e+00 : f32, clip_min = 0.000000e+00 : f32
// CHECK: mtc.batch_norm_train %{{.+}} {epsilon
// CHECK-NOT: activation
// CHECK: mtc.relu
// CHECK: mtc.clip_grad
// CHECK: mtc.batch_norm_train_grad %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} {mtc.backward}
func.func @train_step(%x: tensor<2x4x3x3xf32> {mtc.role = "input"}, %dy: tensor<2x4x3x3xf32> {mtc.role = "input"}, %g: tensor<4xf32> {mtc.role = "param"}, %b: tensor<4xf32> {mtc.role = "param"}, %rm: tensor<4xf32> {mtc.role = "buffer"}, %rv: tensor<4xf32> {mtc.role = "buffer"}) -> (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>) {
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %c6 = mtc.clip %y {min = 0.0 : f32, max = 6.0 : f32} : tensor<2x4x3x3xf32>
  %y2, %nm2, %nv2, %m2, %s2 = mtc.batch_norm_train %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r2 = mtc.relu %y2 : tensor<2x4x3x3xf32>
  %d = mtc.clip_grad %dy, %c6 {min = 0.0 : f32, max = 6.0 : f32, mtc.backward} : tensor<2x4x3x3xf32>
  %dx, %dg, %db = mtc.batch_norm_train_grad %d, %x, %g, %m, %s {mtc.backward} : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  return %c6, %r2, %y2, %dx, %d : tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>
}
