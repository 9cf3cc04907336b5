// RUN: mtc-opt %s --split-input-file --mtc-fuse-layer-norm | FileCheck %s

// A layer norm as exporters before opset 17 write it (the square a product,
// as Pow(d, 2) imports), over the last dim, with scale and bias: one op;
// the epsilon constant is the op's attribute.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[Y:.+]], %{{.+}}, %{{.+}} = mtc.layer_norm %arg0, %arg1, %arg2 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
// CHECK-NEXT: return %[[Y]]
func.func @forward(%x: tensor<2x3x4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<2x3x4xf32> {
  %mean = mtc.reduce_mean %x {axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %d = mtc.sub %x, %mean : (tensor<2x3x4xf32>, tensor<2x3x1xf32>) -> tensor<2x3x4xf32>
  %sq = mtc.mul %d, %d : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %var = mtc.reduce_mean %sq {axes = array<i64: 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %eps = mtc.constant dense<9.99999974E-6> : tensor<f32>
  %shift = mtc.add %var, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %std = mtc.sqrt %shift : tensor<2x3x1xf32>
  %n = mtc.div %d, %std : (tensor<2x3x4xf32>, tensor<2x3x1xf32>) -> tensor<2x3x4xf32>
  %s = mtc.mul %n, %g : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %y = mtc.add %s, %b : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// Over the last two dims, the scale first in its product, eps first in its
// sum, and no bias (what reads the scaled value is not a bias add).
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[Y:.+]], %{{.+}}, %{{.+}} = mtc.layer_norm %arg0, %arg1 {axis = 1 : i64, epsilon = 1.000000e-03 : f32} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>)
// CHECK-NEXT: mtc.tanh %[[Y]]
func.func @forward(%x: tensor<2x3x4xf32>, %g: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  %mean = mtc.reduce_mean %x {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %d = mtc.sub %x, %mean : (tensor<2x3x4xf32>, tensor<2x1x1xf32>) -> tensor<2x3x4xf32>
  %sq = mtc.mul %d, %d : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %var = mtc.reduce_mean %sq {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %eps = mtc.constant dense<1.0e-3> : tensor<f32>
  %shift = mtc.add %eps, %var : (tensor<f32>, tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %std = mtc.sqrt %shift : tensor<2x1x1xf32>
  %n = mtc.div %d, %std : (tensor<2x3x4xf32>, tensor<2x1x1xf32>) -> tensor<2x3x4xf32>
  %s = mtc.mul %g, %n : (tensor<3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y = mtc.tanh %s : tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// Not a layer norm of the trailing dims, or not one op's worth: the mean
// over a leading dim; x - mean read by something else too; a scale of
// another shape; the variance returned as well. All stay as they are.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.layer_norm
// CHECK-COUNT-4: mtc.sqrt
// CHECK-NOT: mtc.layer_norm
func.func @forward(%x: tensor<3x4xf32>, %g: tensor<4xf32>, %g2: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x1xf32>) {
  %eps = mtc.constant dense<1.0e-5> : tensor<f32>
  %m0 = mtc.reduce_mean %x {axes = array<i64: 0>} : (tensor<3x4xf32>) -> tensor<1x4xf32>
  %d0 = mtc.sub %x, %m0 : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  %q0 = mtc.mul %d0, %d0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %v0 = mtc.reduce_mean %q0 {axes = array<i64: 0>} : (tensor<3x4xf32>) -> tensor<1x4xf32>
  %e0 = mtc.add %v0, %eps : (tensor<1x4xf32>, tensor<f32>) -> tensor<1x4xf32>
  %s0 = mtc.sqrt %e0 : tensor<1x4xf32>
  %n0 = mtc.div %d0, %s0 : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
  %y0 = mtc.mul %n0, %g : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %m1 = mtc.reduce_mean %x {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %d1 = mtc.sub %x, %m1 : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %q1 = mtc.mul %d1, %d1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %v1 = mtc.reduce_mean %q1 {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %e1 = mtc.add %v1, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s1 = mtc.sqrt %e1 : tensor<3x1xf32>
  %n1 = mtc.div %d1, %s1 : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %y1 = mtc.mul %n1, %g : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %m2 = mtc.reduce_mean %x {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %d2 = mtc.sub %x, %m2 : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %q2 = mtc.mul %d2, %d2 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %v2 = mtc.reduce_mean %q2 {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %e2 = mtc.add %v2, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s2 = mtc.sqrt %e2 : tensor<3x1xf32>
  %n2 = mtc.div %d2, %s2 : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %y2 = mtc.mul %n2, %g2 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %m3 = mtc.reduce_mean %x {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %d3 = mtc.sub %x, %m3 : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %q3 = mtc.mul %d3, %d3 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %v3 = mtc.reduce_mean %q3 {axes = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x1xf32>
  %e3 = mtc.add %v3, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s3 = mtc.sqrt %e3 : tensor<3x1xf32>
  %n3 = mtc.div %d3, %s3 : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %y3 = mtc.mul %n3, %g : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  return %y0, %y1, %d1, %y2, %y3, %v3 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x1xf32>
}
