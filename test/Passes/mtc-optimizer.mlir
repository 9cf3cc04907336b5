// RUN: mtc-opt %s --split-input-file --mtc-optimizer="optimizer=sgd lr=0.1 keep-grads=true" --verify-diagnostics | FileCheck %s --check-prefix=SGD
// RUN: mtc-opt %s --split-input-file --mtc-optimizer="optimizer=sgd lr=0.1 momentum=0.9 nesterov=true weight-decay=0.0001 keep-grads=true" --verify-diagnostics | FileCheck %s --check-prefix=MOM
// RUN: mtc-opt %s --split-input-file --mtc-optimizer="optimizer=adamw lr=0.001 weight-decay=0.01 keep-grads=true" --verify-diagnostics | FileCheck %s --check-prefix=ADAMW
// RUN: mtc-opt %s --split-input-file --mtc-optimizer="optimizer=sgd lr=0.1" --verify-diagnostics | FileCheck %s --check-prefix=EARLY
// RUN: not mtc-opt %s --split-input-file --mtc-optimizer="optimizer=sgd nesterov=true" 2>&1 | FileCheck %s --check-prefix=NESTEROV
// RUN: not mtc-opt %s --split-input-file --mtc-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// SGD-LABEL: func.func @train_step
// SGD-SAME: (%[[P:[^:]+]]: tensor<5x3xf32> {mtc.name = "w", mtc.role = "param"}, %[[I:[^:]+]]: tensor<4x3xf32>
// SGD-SAME: -> (tensor<f32> {mtc.role = "loss"}, tensor<5x3xf32> {mtc.owner = 0 : i64, mtc.role = "grad"}, tensor<5x3xf32> {mtc.role = "update", mtc.tied = 0 : i64})
// SGD: %[[G:.+]] = mtc.relu
// SGD: %[[NEW:.+]] = mtc.sgd_update %[[P]], %[[G]] {lr = 1.000000e-01 : f64, mtc.optimizer}
// SGD: return %{{.+}}, %[[G]], %[[NEW]]

// MOM-LABEL: func.func @train_step
// MOM-SAME: %[[P:[^:]+]]: tensor<5x3xf32> {mtc.name = "w", mtc.role = "param"}
// MOM-SAME: %[[BUF:[^:]+]]: tensor<5x3xf32> {mtc.name = "w.momentum", mtc.owner = 0 : i64, mtc.role = "state"}
// MOM-SAME: tensor<5x3xf32> {mtc.role = "update", mtc.tied = 0 : i64}, tensor<5x3xf32> {mtc.role = "update", mtc.tied = 2 : i64}
// MOM: mtc.sgd_momentum_update %[[P]], %{{.+}}, %[[BUF]] {lr = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, mtc.optimizer, nesterov = true, weight_decay = 1.000000e-04 : f64}

// ADAMW-LABEL: func.func @train_step
// ADAMW-SAME: %[[M:[^:]+]]: tensor<5x3xf32> {mtc.name = "w.exp_avg", mtc.owner = 0 : i64, mtc.role = "state"}
// ADAMW-SAME: %[[V:[^:]+]]: tensor<5x3xf32> {mtc.name = "w.exp_avg_sq", mtc.owner = 0 : i64, mtc.role = "state"}
// ADAMW-SAME: mtc.optimizer_summary = "AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01)"
// ADAMW: mtc.adamw_update %{{.+}}, %{{.+}}, %[[M]], %[[V]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, mtc.optimizer, weight_decay = 1.000000e-02 : f64}

// By default the gradient is no result: the update runs right after the last
// op its operands need (here the relu producing the gradient, before the
// later reader of the input), which releases the gradient there.
// EARLY-LABEL: func.func @train_step
// EARLY-SAME: -> (tensor<f32> {mtc.role = "loss"}, tensor<5x3xf32> {mtc.role = "update", mtc.tied = 0 : i64})
// EARLY: %[[G:.+]] = mtc.relu
// EARLY-NEXT: %[[NEW:.+]] = mtc.sgd_update %{{.+}}, %[[G]]
// EARLY-NEXT: mtc.neg
// EARLY: return %{{.+}}, %[[NEW]]

// NESTEROV: Nesterov momentum requires momentum > 0
// UNKNOWN: unknown optimizer 'lion' (expected sgd or adamw)

func.func @train_step(%w: tensor<5x3xf32> {mtc.name = "w", mtc.role = "param"}, %i: tensor<4x3xf32> {mtc.name = "i", mtc.role = "input"}) -> (tensor<f32> {mtc.role = "loss"}, tensor<5x3xf32> {mtc.role = "grad", mtc.owner = 0 : i64}) {
  %l = mtc.constant dense<0.0> : tensor<f32>
  %g = mtc.relu %w : tensor<5x3xf32>
  %unrelated = mtc.neg %i : tensor<4x3xf32>
  return %l, %g : tensor<f32>, tensor<5x3xf32>
}
