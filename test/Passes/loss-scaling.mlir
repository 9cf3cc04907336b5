// Dynamic loss scaling in the IR: autodiff seeds the backward pass with a
// loss_scale argument instead of the constant 1; the optimizer pass checks
// every gradient once (mtc.grad_check, also a result of the step for the
// trainer) and every update reads that status, so no update runs before the
// last gradient exists.
// RUN: mtc-opt %s --mtc-autodiff="loss-scaling=true" --mtc-optimizer="optimizer=adamw lr=0.001 loss-scale-init=1024 loss-scale-interval=100" | FileCheck %s
// RUN: mtc-opt %s --mtc-autodiff="loss-scaling=true" --mtc-optimizer="optimizer=sgd lr=0.1 momentum=0.9 accumulate=2" | FileCheck %s --check-prefix=ACC
// RUN: mtc-opt %s --mtc-autodiff --mtc-optimizer="optimizer=sgd lr=0.1" | FileCheck %s --check-prefix=OFF
// RUN: not mtc-opt %s --mtc-autodiff="loss-scaling=true" --mtc-optimizer="loss-scale-backoff=2" 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W1:[^:]+]]: tensor<8x4xf32> {mtc.name = "w1", mtc.role = "param"}
// CHECK-SAME: %[[W2:[^:]+]]: tensor<3x8xf32> {mtc.name = "w2", mtc.role = "param"}
// CHECK-SAME: %[[S:[^:]+]]: tensor<f32> {mtc.name = "loss_scale", mtc.role = "loss_scale"}
// CHECK-SAME: -> (tensor<f32> {mtc.name = "loss", mtc.role = "loss"}, tensor<2xf32> {mtc.role = "grad_status"}
// CHECK-SAME: mtc.loss_scaling = {backoff = 5.000000e-01 : f64, growth = 2.000000e+00 : f64, init = 1.024000e+03 : f64, interval = 100 : i64}
// The seed is the scale: the loss's gradient rule reads it.
// CHECK-NOT: mtc.constant {mtc.backward} dense<1.000000e+00> : tensor<f32>
// CHECK: mtc.softmax_cross_entropy_grad %[[S]], %{{.+}}, %{{.+}}
// CHECK: %[[G2:.+]] = mtc.matmul {{.+}}mtc.backward, transpose_a = true{{.+}} -> tensor<3x8xf32>
// CHECK: %[[G1:.+]] = mtc.matmul {{.+}}mtc.backward, transpose_a = true{{.+}} -> tensor<8x4xf32>
// CHECK-NOT: adamw_update
// CHECK: %[[ST:.+]] = mtc.grad_check %[[S]], %[[G1]], %[[G2]] {mtc.backward} : tensor<f32>, tensor<8x4xf32>, tensor<3x8xf32>
// CHECK-NEXT: mtc.adamw_update %[[W1]], %[[G1]], %{{.+}}, %{{.+}} status %[[ST]]
// CHECK-NEXT: mtc.adamw_update %[[W2]], %[[G2]], %{{.+}}, %{{.+}} status %[[ST]]
// CHECK: return %{{.+}}, %[[ST]],

// Under accumulation the check reads the accumulated gradients and runs on
// the last micro-batch, with the updates.
// ACC: %[[A1:.+]] = mtc.accumulate_grad
// ACC: %[[A2:.+]] = mtc.accumulate_grad
// ACC: %[[ST:.+]] = mtc.grad_check %{{.+}}, %[[A1]], %[[A2]] {mtc.backward, mtc.last_micro_batch}
// ACC: mtc.sgd_momentum_update %{{.+}}, %[[A1]], %{{.+}} status %[[ST]] {{.+}}mtc.last_micro_batch

// Without loss scaling: a constant seed, no check, no status.
// OFF: %[[ONE:.+]] = mtc.constant {mtc.backward} dense<1.000000e+00> : tensor<f32>
// OFF-NEXT: mtc.softmax_cross_entropy_grad %[[ONE]],
// OFF-NOT: grad_check
// OFF-NOT: status

// BAD: loss scaling needs an initial scale > 0, growth >= 1, backoff in (0, 1] and an interval of at least 1 step

func.func @forward(%x: tensor<2x4xf32> {mtc.name = "x", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "t", mtc.role = "input"},
                   %w1: tensor<8x4xf32> {mtc.name = "w1", mtc.role = "param"},
                   %w2: tensor<3x8xf32> {mtc.name = "w2", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %h = mtc.matmul %x, %w1 {transpose_b = true} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  %r = mtc.relu %h : tensor<2x8xf32>
  %y = mtc.matmul %r, %w2 {transpose_b = true} : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<2x3xf32>
  %l, %lp = mtc.softmax_cross_entropy %y, %t : (tensor<2x3xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x3xf32>)
  return %l : tensor<f32>
}
