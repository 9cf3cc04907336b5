// RUN: mtc-opt %s | mtc-opt | FileCheck %s
// Round trip of every mtc op through the printer and the parser.

// CHECK-LABEL: func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  // CHECK: mtc.relu %{{.*}} : tensor<2x3xf32>
  %0 = mtc.relu %a : tensor<2x3xf32>
  // CHECK: mtc.tanh
  %1 = mtc.tanh %0 : tensor<2x3xf32>
  // CHECK: mtc.sigmoid
  %2 = mtc.sigmoid %1 : tensor<2x3xf32>
  // CHECK: mtc.exp
  %3 = mtc.exp %2 : tensor<2x3xf32>
  // CHECK: mtc.log
  %4 = mtc.log %3 : tensor<2x3xf32>
  // CHECK: mtc.neg
  %5 = mtc.neg %4 : tensor<2x3xf32>
  // CHECK: mtc.sqrt
  %6 = mtc.sqrt %5 : tensor<2x3xf32>
  // CHECK: mtc.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %7 = mtc.add %6, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: mtc.sub
  %8 = mtc.sub %7, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: mtc.mul
  %9 = mtc.mul %8, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: mtc.div
  %10 = mtc.div %9, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: mtc.relu_grad
  %11 = mtc.relu_grad %10, %a : tensor<2x3xf32>
  return %11 : tensor<2x3xf32>
}

// CHECK-LABEL: func @linalg
func.func @linalg(%a: tensor<16x64xf32>, %w: tensor<128x64xf32>, %c: tensor<128xf32>, %x: tensor<2x3x4xf32>, %y: tensor<4x5xf32>) -> (tensor<16x128xf32>, tensor<2x3x5xf32>, tensor<2x4x5xf32>) {
  // CHECK: mtc.matmul %{{.*}}, %{{.*}}, %{{.*}} {transpose_b = true}
  %0 = mtc.matmul %a, %w, %c {transpose_b = true} : (tensor<16x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<16x128xf32>
  // CHECK: mtc.matmul %{{.*}}, %{{.*}} : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %1 = mtc.matmul %x, %y : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  // CHECK: mtc.matmul {{.*}} {transpose_a = true}
  %2 = mtc.matmul %x, %1 {transpose_a = true} : (tensor<2x3x4xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  return %0, %1, %2 : tensor<16x128xf32>, tensor<2x3x5xf32>, tensor<2x4x5xf32>
}

// CHECK-LABEL: func @gemm_epilogues
func.func @gemm_epilogues(%x: tensor<2x3x4xf32>, %y: tensor<4x5xf32>, %b: tensor<5xf32>, %g: tensor<6x5xf32>, %a: tensor<6x4xf32>) -> (tensor<2x3x5xf32>, tensor<4x5xf32>, tensor<5xf32>, tensor<5x4xf32>, tensor<5xf32>) {
  // CHECK: mtc.matmul %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %0 = mtc.matmul %x, %y, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  // CHECK: mtc.matmul_bias_grad {{.*}} {transpose_a = true} : (tensor<6x4xf32>, tensor<6x5xf32>) -> (tensor<4x5xf32>, tensor<5xf32>)
  %1:2 = mtc.matmul_bias_grad %a, %g {transpose_a = true} : (tensor<6x4xf32>, tensor<6x5xf32>) -> (tensor<4x5xf32>, tensor<5xf32>)
  // CHECK: mtc.matmul_bias_grad {{.*}} {sum_a = true, transpose_a = true} : (tensor<6x5xf32>, tensor<6x4xf32>) -> (tensor<5x4xf32>, tensor<5xf32>)
  %2:2 = mtc.matmul_bias_grad %g, %a {sum_a = true, transpose_a = true} : (tensor<6x5xf32>, tensor<6x4xf32>) -> (tensor<5x4xf32>, tensor<5xf32>)
  return %0, %1#0, %1#1, %2#0, %2#1 : tensor<2x3x5xf32>, tensor<4x5xf32>, tensor<5xf32>, tensor<5x4xf32>, tensor<5xf32>
}

// CHECK-LABEL: func @gelu_epilogues
func.func @gelu_epilogues(%x: tensor<2x3x4xbf16>, %w: tensor<8x4xbf16>, %b: tensor<8xf32>, %dy: tensor<2x3x4xbf16>) -> (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>) {
  // CHECK: mtc.matmul_gelu %{{.*}}, %{{.*}}, %{{.*}} {transpose_b = true} : (tensor<2x3x4xbf16>, tensor<8x4xbf16>, tensor<8xf32>) -> (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>)
  %y, %pre = mtc.matmul_gelu %x, %w, %b {transpose_b = true} : (tensor<2x3x4xbf16>, tensor<8x4xbf16>, tensor<8xf32>) -> (tensor<2x3x8xbf16>, tensor<2x3x8xbf16>)
  // CHECK: mtc.matmul_gelu_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x3x4xbf16>, tensor<4x8xbf16>, tensor<2x3x8xbf16>) -> tensor<2x3x8xbf16>
  %wt = mtc.transpose %w {perm = array<i64: 1, 0>} : (tensor<8x4xbf16>) -> tensor<4x8xbf16>
  %d = mtc.matmul_gelu_grad %dy, %wt, %pre : (tensor<2x3x4xbf16>, tensor<4x8xbf16>, tensor<2x3x8xbf16>) -> tensor<2x3x8xbf16>
  return %y, %d : tensor<2x3x8xbf16>, tensor<2x3x8xbf16>
}

// CHECK-LABEL: func @conv_pool
func.func @conv_pool(%x: tensor<8x4x16x16xf32>, %w: tensor<8x2x3x3xf32>, %b: tensor<8xf32>) -> (tensor<8x4x16x16xf32>, tensor<8x2x3x3xf32>, tensor<8x8x1x1xf32>) {
  // CHECK: mtc.conv {{.*}} group = 2 : i64
  %0 = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<8x4x16x16xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<8x8x16x16xf32>
  // CHECK: mtc.conv_backward_data
  %1 = mtc.conv_backward_data %0, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<8x8x16x16xf32>, tensor<8x2x3x3xf32>) -> tensor<8x4x16x16xf32>
  // CHECK: mtc.conv_backward_filter
  %2 = mtc.conv_backward_filter %x, %0 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<8x4x16x16xf32>, tensor<8x8x16x16xf32>) -> tensor<8x2x3x3xf32>
  // CHECK: mtc.max_pool {{.*}} -> tensor<8x8x8x8xf32>
  %3 = mtc.max_pool %0 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<8x8x16x16xf32>) -> tensor<8x8x8x8xf32>
  // CHECK: mtc.max_pool_grad
  %4 = mtc.max_pool_grad %0, %3 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<8x8x16x16xf32>, tensor<8x8x8x8xf32>) -> tensor<8x8x16x16xf32>
  // CHECK: mtc.avg_pool {{.*}}ceil_mode = true, count_include_pad = true
  %5 = mtc.avg_pool %4 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = true, count_include_pad = true} : (tensor<8x8x16x16xf32>) -> tensor<8x8x9x9xf32>
  // CHECK: mtc.avg_pool_grad
  %6 = mtc.avg_pool_grad %5 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = true, count_include_pad = true} : (tensor<8x8x9x9xf32>) -> tensor<8x8x16x16xf32>
  // CHECK: mtc.global_avg_pool
  %7 = mtc.global_avg_pool %6 : (tensor<8x8x16x16xf32>) -> tensor<8x8x1x1xf32>
  return %1, %2, %7 : tensor<8x4x16x16xf32>, tensor<8x2x3x3xf32>, tensor<8x8x1x1xf32>
}

// CHECK-LABEL: func @shapes
func.func @shapes(%x: tensor<2x3xf32>, %i: tensor<4x1xi64>) -> (tensor<3x2xf32>, tensor<2x3xf32>, tensor<4x6xi64>, tensor<6xf32>) {
  // CHECK: mtc.constant dense<1.000000e+00> : tensor<2xf32>
  %c = mtc.constant dense<1.0> : tensor<2xf32>
  // CHECK: mtc.transpose {{.*}}perm = array<i64: 1, 0>
  %0 = mtc.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  // CHECK: mtc.pad {{.*}}value = 2.500000e+00 : f32
  %1 = mtc.pad %x {pads = array<i64: 0, 1, 0, 1>, value = 2.5 : f32} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  // CHECK: mtc.slice
  %2 = mtc.slice %1 {starts = array<i64: 0, 1>, steps = array<i64: 1, 1>} : (tensor<2x5xf32>) -> tensor<2x3xf32>
  // CHECK: mtc.expand {{.*}} : (tensor<4x1xi64>) -> tensor<4x6xi64>
  %3 = mtc.expand %i : (tensor<4x1xi64>) -> tensor<4x6xi64>
  // CHECK: mtc.reshape {{.*}} : (tensor<2x3xf32>) -> tensor<6xf32>
  %4 = mtc.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0, %2, %3, %4 : tensor<3x2xf32>, tensor<2x3xf32>, tensor<4x6xi64>, tensor<6xf32>
}

// CHECK-LABEL: func @reductions
func.func @reductions(%x: tensor<4x10xf32>, %l: tensor<4xi64>) -> (tensor<4x1xf32>, tensor<10xf32>, tensor<f32>, tensor<4x10xf32>) {
  // CHECK: mtc.reduce_sum {{.*}}axes = array<i64: 1>
  %0 = mtc.reduce_sum %x {axes = array<i64: 1>, keepdims = true} : (tensor<4x10xf32>) -> tensor<4x1xf32>
  // CHECK: mtc.reduce_mean {{.*}}keepdims = false
  %1 = mtc.reduce_mean %x {axes = array<i64: 0>, keepdims = false} : (tensor<4x10xf32>) -> tensor<10xf32>
  // CHECK: mtc.softmax {{.*}}axis = 1
  %2 = mtc.softmax %x {axis = 1 : i64} : tensor<4x10xf32>
  // CHECK: mtc.log_softmax
  %3 = mtc.log_softmax %2 {axis = 1 : i64} : tensor<4x10xf32>
  // CHECK: mtc.softmax_grad {{.*}}log = true
  %4 = mtc.softmax_grad %3, %x {axis = 1 : i64, log = true} : tensor<4x10xf32>
  // CHECK: mtc.softmax_cross_entropy {{.*}}ignore_index = -100 : i64, reduction = "sum"
  %loss, %logp = mtc.softmax_cross_entropy %4, %l {reduction = "sum", ignore_index = -100 : i64} : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  // CHECK: mtc.softmax_cross_entropy_grad
  %5 = mtc.softmax_cross_entropy_grad %loss, %logp, %l {reduction = "sum"} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  return %0, %1, %loss, %5 : tensor<4x1xf32>, tensor<10xf32>, tensor<f32>, tensor<4x10xf32>
}

// CHECK-LABEL: func @updates
func.func @updates(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  // CHECK: mtc.sgd_update {{.*}}lr = 1.000000e-01 : f64
  %0 = mtc.sgd_update %p, %g {lr = 0.1 : f64} : tensor<8xf32>
  // CHECK: mtc.sgd_momentum_update {{.*}}nesterov = true
  %1:2 = mtc.sgd_momentum_update %0, %g, %m {lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = true} : tensor<8xf32>
  // CHECK: mtc.adamw_update
  %2:3 = mtc.adamw_update %1#0, %g, %m, %v {lr = 0.001 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64} : tensor<8xf32>
  return %2#0, %2#1, %2#2 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// CHECK-LABEL: func @real_model_ops
func.func @real_model_ops(%x: tensor<2x8x4x4xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %t: tensor<50x32xf32>, %ids: tensor<2x8xi64>, %c: tensor<4x4xi1>, %s32: tensor<32xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<2x8x32xf32>, tensor<2x8x4x4xf32>, tensor<50x32xf32>) {
  // CHECK: mtc.batch_norm_train {{.*}}epsilon = 9.99999974E-6 : f32, momentum = 0.899999976 : f32
  %y, %rm, %rv, %sm, %si = mtc.batch_norm_train %x, %g, %g, %m, %m {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: mtc.batch_norm_train_grad
  %dx, %dg, %db = mtc.batch_norm_train_grad %y, %x, %g, %sm, %si : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: mtc.gather {{.*}}axis = 0
  %e = mtc.gather %t, %ids {axis = 0 : i64} : (tensor<50x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  // CHECK: mtc.gather_grad
  %de = mtc.gather_grad %e, %ids {axis = 0 : i64} : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<50x32xf32>
  // CHECK: mtc.gather_grad {{.*}} accumulate
  %dt = mtc.gather_grad %e, %ids accumulate %de {axis = 0 : i64} : (tensor<2x8x32xf32>, tensor<2x8xi64>, tensor<50x32xf32>) -> tensor<50x32xf32>
  // CHECK: mtc.layer_norm {{.*}} -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>, tensor<2x8x1xf32>)
  %ln, %lm, %li = mtc.layer_norm %e, %s32, %s32 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>, tensor<2x8x1xf32>)
  // CHECK: mtc.dropout {{.*}}stream = 3
  %d = mtc.dropout %ln {ratio = 0.1 : f32, stream = 3 : i64} : tensor<2x8x32xf32>
  // CHECK: mtc.dropout_grad
  %dd = mtc.dropout_grad %d {ratio = 0.1 : f32, stream = 3 : i64} : tensor<2x8x32xf32>
  // CHECK: mtc.concat {{.*}}axis = 1
  %cat = mtc.concat %dd, %dd {axis = 1 : i64} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x16x32xf32>
  // CHECK: mtc.select
  %s = mtc.select %c, %x, %dx : (tensor<4x4xi1>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  // CHECK: mtc.clip {{.*}}max = 6.000000e+00 : f32, min = 0.000000e+00 : f32
  %cl = mtc.clip %s {min = 0.0 : f32, max = 6.0 : f32} : tensor<2x8x4x4xf32>
  // CHECK: mtc.clip_grad
  %cg = mtc.clip_grad %cl, %s {min = 0.0 : f32, max = 6.0 : f32} : tensor<2x8x4x4xf32>
  // CHECK: mtc.erf
  %er = mtc.erf %cg : tensor<2x8x4x4xf32>
  // CHECK: mtc.slice_grad
  %sg = mtc.slice_grad %dg {starts = array<i64: 1>, steps = array<i64: 2>} : (tensor<8xf32>) -> tensor<17xf32>
  return %er, %rm, %e, %dx, %de : tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<2x8x32xf32>, tensor<2x8x4x4xf32>, tensor<50x32xf32>
}

// 16-bit convolution operands (--precision); results and the bias are f32.
// CHECK-LABEL: func @conv_16bit
// CHECK: mtc.conv {{.*}} : (tensor<2x4x8x8xbf16>, tensor<8x4x3x3xbf16>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
// CHECK: mtc.conv_backward_data {{.*}} : (tensor<2x8x8x8xf16>, tensor<8x4x3x3xf16>) -> tensor<2x4x8x8xf32>
// CHECK: mtc.conv_backward_filter {{.*}} : (tensor<2x4x8x8xbf16>, tensor<2x8x8x8xbf16>) -> tensor<8x4x3x3xf32>
func.func @conv_16bit(%x: tensor<2x4x8x8xbf16>, %w: tensor<8x4x3x3xbf16>, %b: tensor<8xf32>, %dyh: tensor<2x8x8x8xf16>, %wh: tensor<8x4x3x3xf16>, %dy: tensor<2x8x8x8xbf16>) -> (tensor<2x8x8x8xf32>, tensor<2x4x8x8xf32>, tensor<8x4x3x3xf32>) {
  %0 = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x8x8xbf16>, tensor<8x4x3x3xbf16>, tensor<8xf32>) -> tensor<2x8x8x8xf32>
  %1 = mtc.conv_backward_data %dyh, %wh {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf16>, tensor<8x4x3x3xf16>) -> tensor<2x4x8x8xf32>
  %2 = mtc.conv_backward_filter %x, %dy {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x8x8xbf16>, tensor<2x8x8x8xbf16>) -> tensor<8x4x3x3xf32>
  return %0, %1, %2 : tensor<2x8x8x8xf32>, tensor<2x4x8x8xf32>, tensor<8x4x3x3xf32>
}

// CHECK-LABEL: func @convert
// CHECK: mtc.convert %{{.+}} : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: mtc.convert %{{.+}} : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK: mtc.convert %{{.+}} : tensor<4x8xf32> to tensor<4x8xf16>
func.func @convert(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf16>) {
  %h = mtc.convert %x : tensor<4x8xf32> to tensor<4x8xbf16>
  %f = mtc.convert %h : tensor<4x8xbf16> to tensor<4x8xf32>
  %g = mtc.convert %x : tensor<4x8xf32> to tensor<4x8xf16>
  return %f, %g : tensor<4x8xf32>, tensor<4x8xf16>
}
