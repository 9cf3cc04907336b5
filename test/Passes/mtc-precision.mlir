// RUN: mtc-opt %s --split-input-file --mtc-autodiff --mtc-precision="precision=bf16 parameter-copies=false" | FileCheck %s
// RUN: mtc-opt %s --split-input-file --mtc-autodiff --mtc-precision="precision=fp32" | FileCheck %s --check-prefix=FP32

// Both operands of every GEMM, forward and backward, go to bfloat16; each
// value is converted once, before its first GEMM: the weight once per step
// (its copy serves the backward GEMM too), the input once (the weight
// gradient's GEMM reads the same 16-bit copy), the upstream gradient once
// for both backward GEMMs. Results, the bias and everything else stay f32.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:[^:]+]]: tensor<4x3xf32>
// CHECK-SAME: %[[W:[^:]+]]: tensor<5x3xf32>
// CHECK-SAME: %[[B:[^:]+]]: tensor<5xf32>
// CHECK: %[[XH:.+]] = mtc.convert %[[X]] : tensor<4x3xf32> to tensor<4x3xbf16>
// CHECK-NEXT: %[[WH:.+]] = mtc.convert %[[W]] : tensor<5x3xf32> to tensor<5x3xbf16>
// CHECK-NEXT: %[[P:.+]] = mtc.matmul %[[XH]], %[[WH]] {transpose_b = true} : (tensor<4x3xbf16>, tensor<5x3xbf16>) -> tensor<4x5xf32>
// CHECK-NEXT: %[[Y:.+]] = mtc.add %[[P]], %[[B]] : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
// The linear layer's output is rounded as autocast stores it.
// CHECK-NEXT: %[[YH:.+]] = mtc.convert %[[Y]] : tensor<4x5xf32> to tensor<4x5xbf16>
// CHECK-NEXT: %[[YR:.+]] = mtc.convert %[[YH]] : tensor<4x5xbf16> to tensor<4x5xf32>
// CHECK: %[[H:.+]] = mtc.tanh %[[YR]] : tensor<4x5xf32>
// CHECK: %[[DYH:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<4x5xf32> to tensor<4x5xbf16>
// CHECK-NEXT: %[[DW:.+]] = mtc.matmul %[[DYH]], %[[XH]] {mtc.backward, transpose_a = true} : (tensor<4x5xbf16>, tensor<4x3xbf16>) -> tensor<5x3xf32>
// CHECK-NOT: mtc.convert %[[W]]
// CHECK-NOT: mtc.convert %[[X]]
// CHECK: return
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<4x3xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<4xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<5x3xf32> {mtc.name = "fc.weight", mtc.role = "param"},
                   %b: tensor<5xf32> {mtc.name = "fc.bias", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %mm0 = mtc.matmul %x, %w {transpose_b = true} : (tensor<4x3xf32>, tensor<5x3xf32>) -> tensor<4x5xf32>
  %0 = mtc.add %mm0, %b : (tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  %1 = mtc.tanh %0 : tensor<4x5xf32>
  %l, %p = mtc.softmax_cross_entropy %1, %t : (tensor<4x5xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>)
  return %l : tensor<f32>
}

// -----

// Batched matmul (attention scores): both operands converted, result f32;
// the backward matmuls reuse the forward copies.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x4x8xf32>
// CHECK-SAME: %[[K:[^:]+]]: tensor<2x4x8xf32>
// CHECK: %[[QH:.+]] = mtc.convert %[[Q]] : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
// CHECK-NEXT: %[[KH:.+]] = mtc.convert %[[K]] : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
// CHECK-NEXT: mtc.matmul %[[QH]], %[[KH]] {transpose_b = true} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> tensor<2x4x4xf32>
// CHECK: mtc.matmul %{{.+}}, %[[KH]] {mtc.backward}
// CHECK: mtc.matmul %{{.+}}, %[[QH]] {mtc.backward
func.func @forward(%q: tensor<2x4x8xf32> {mtc.name = "q", mtc.role = "param"},
                   %k: tensor<2x4x8xf32> {mtc.name = "k", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %l = mtc.reduce_sum %s {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A saved activation (tanh's output, read by its gradient) of 4096 or more
// elements is kept in 16 bits between the passes: rounded after its last
// forward use, widened right before its first backward use. Smaller ones
// stay float32.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.+]] = mtc.tanh %{{.+}} : tensor<64x64xf32>
// CHECK-NEXT: %[[L:.+]] = mtc.reduce_sum %[[H]]
// CHECK-NEXT: %[[S:.+]] = mtc.convert %[[H]] : tensor<64x64xf32> to tensor<64x64xbf16>
// CHECK-NEXT: %[[HS:.+]] = mtc.tanh %{{.+}} : tensor<8x8xf32>
// CHECK-NOT: mtc.convert %[[HS]]
// CHECK: %[[W:.+]] = mtc.convert %[[S]] {mtc.backward} : tensor<64x64xbf16> to tensor<64x64xf32>
// CHECK-NEXT: mtc.mul %[[W]], %[[W]] {mtc.backward}
// CHECK-NOT: mtc.mul %[[H]]
// CHECK: return
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<64x64xf32> {mtc.name = "x", mtc.role = "param"},
                   %y: tensor<8x8xf32> {mtc.name = "y", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %h = mtc.tanh %x : tensor<64x64xf32>
  %l = mtc.reduce_sum %h {axes = array<i64: 0, 1>, keepdims = false} : (tensor<64x64xf32>) -> tensor<f32>
  %hs = mtc.tanh %y : tensor<8x8xf32>
  %ls = mtc.reduce_sum %hs {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x8xf32>) -> tensor<f32>
  %sum = mtc.add %l, %ls : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %sum : tensor<f32>
}

// -----

// Convolutions are treated like the GEMMs: input and weight of the forward
// convs, incoming gradient and weight of conv_backward_data, saved input and
// incoming gradient of conv_backward_filter go to bfloat16, each value once.
// The weight copies and the 16-bit activations of the forward convs serve
// their backward convs; one 16-bit copy of each incoming gradient feeds both
// of its backward convs. Results and the bias stay f32, except that a
// forward conv's result that only elementwise ops read (the ReLU) is
// rounded to bfloat16 and widened for them, as torch.autocast's conv
// returns it (the second conv's result goes on through a reshape and
// stays f32). The ReLU computes in f32: its gradient reads the f32 ReLU
// output, too small (under 4096 elements) to be kept in 16 bits between
// the passes.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3x8x8xf32>
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x3x3x3xf32>
// CHECK-SAME: %[[B:[^:]+]]: tensor<4xf32>
// CHECK-SAME: %[[W2:[^:]+]]: tensor<5x4x3x3xf32>
// CHECK: %[[XH:.+]] = mtc.convert %[[X]] : tensor<2x3x8x8xf32> to tensor<2x3x8x8xbf16>
// CHECK-NEXT: %[[WH:.+]] = mtc.convert %[[W]] : tensor<4x3x3x3xf32> to tensor<4x3x3x3xbf16>
// CHECK-NEXT: %[[Y:.+]] = mtc.conv %[[XH]], %[[WH]], %[[B]] {{.+}} : (tensor<2x3x8x8xbf16>, tensor<4x3x3x3xbf16>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[YH:.+]] = mtc.convert %[[Y]] : tensor<2x4x8x8xf32> to tensor<2x4x8x8xbf16>
// CHECK-NEXT: %[[YW:.+]] = mtc.convert %[[YH]] : tensor<2x4x8x8xbf16> to tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[A:.+]] = mtc.relu %[[YW]] : tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[AH:.+]] = mtc.convert %[[A]] : tensor<2x4x8x8xf32> to tensor<2x4x8x8xbf16>
// CHECK-NEXT: %[[W2H:.+]] = mtc.convert %[[W2]] : tensor<5x4x3x3xf32> to tensor<5x4x3x3xbf16>
// CHECK-NEXT: %[[Y2:.+]] = mtc.conv %[[AH]], %[[W2H]] {{.+}} -> tensor<2x5x1x1xf32>
// CHECK-NEXT: mtc.reshape %[[Y2]]
// The incoming gradient is a reshape: its 16-bit copy is the reshape of
// the copy (a view).
// CHECK: %[[DYH0:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<2x5xf32> to tensor<2x5xbf16>
// CHECK-NEXT: %[[DYH:.+]] = mtc.reshape %[[DYH0]] {mtc.backward} : (tensor<2x5xbf16>) -> tensor<2x5x1x1xbf16>
// The input gradient of the second conv, which only the ReLU's gradient
// reads, is rounded as autocast's conv backward returns it and widened
// for that reader.
// CHECK-NEXT: %[[DA:.+]] = mtc.conv_backward_data %[[DYH]], %[[W2H]] {{.+}} : (tensor<2x5x1x1xbf16>, tensor<5x4x3x3xbf16>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[DAH:.+]] = mtc.convert %[[DA]] {mtc.backward} : tensor<2x4x8x8xf32> to tensor<2x4x8x8xbf16>
// CHECK-NEXT: mtc.conv_backward_filter %[[AH]], %[[DYH]] {{.+}} : (tensor<2x4x8x8xbf16>, tensor<2x5x1x1xbf16>) -> tensor<5x4x3x3xf32>
// CHECK-NEXT: %[[DAW:.+]] = mtc.convert %[[DAH]] {mtc.backward} : tensor<2x4x8x8xbf16> to tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[DY:.+]] = mtc.relu_grad %[[DAW]], %[[A]] {mtc.backward} : tensor<2x4x8x8xf32>
// CHECK-NEXT: %[[DYH1:.+]] = mtc.convert %[[DY]] {mtc.backward} : tensor<2x4x8x8xf32> to tensor<2x4x8x8xbf16>
// CHECK-NEXT: mtc.conv_backward_filter %[[XH]], %[[DYH1]] {{.+}} : (tensor<2x3x8x8xbf16>, tensor<2x4x8x8xbf16>) -> tensor<4x3x3x3xf32>
// CHECK-NEXT: mtc.reduce_sum %[[DY]]
// CHECK-NOT: mtc.convert
// CHECK: return
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<2x3x8x8xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<4x3x3x3xf32> {mtc.name = "conv.weight", mtc.role = "param"},
                   %b: tensor<4xf32> {mtc.name = "conv.bias", mtc.role = "param"},
                   %w2: tensor<5x4x3x3xf32> {mtc.name = "conv2.weight", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %1 = mtc.relu %0 : tensor<2x4x8x8xf32>
  %2 = mtc.conv %1, %w2 {strides = array<i64: 8, 8>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x8x8xf32>, tensor<5x4x3x3xf32>) -> tensor<2x5x1x1xf32>
  %3 = mtc.reshape %2 : (tensor<2x5x1x1xf32>) -> tensor<2x5xf32>
  %l, %p = mtc.softmax_cross_entropy %3, %t : (tensor<2x5xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x5xf32>)
  return %l : tensor<f32>
}

// -----

// A language model's head: the logits a 16-bit GEMM computes are rounded to
// bfloat16 before the loss (as torch.autocast stores a linear layer's
// output), which computes in float32 on their widening; through the
// reshape to [tokens, vocabulary]. Only in the training step.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.matmul {{.*}} -> tensor<2x3x7xf32>
// CHECK-NEXT: %[[R:.+]] = mtc.reshape %[[Y]] : (tensor<2x3x7xf32>) -> tensor<6x7xf32>
// CHECK-NEXT: %[[N:.+]] = mtc.convert %[[R]] : tensor<6x7xf32> to tensor<6x7xbf16>
// CHECK-NEXT: %[[W:.+]] = mtc.convert %[[N]] : tensor<6x7xbf16> to tensor<6x7xf32>
// CHECK-NEXT: mtc.softmax_cross_entropy %[[W]]
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<2x3x4xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<6xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<4x7xf32> {mtc.name = "head.weight", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.matmul %x, %w : (tensor<2x3x4xf32>, tensor<4x7xf32>) -> tensor<2x3x7xf32>
  %1 = mtc.reshape %0 : (tensor<2x3x7xf32>) -> tensor<6x7xf32>
  %l, %p = mtc.softmax_cross_entropy %1, %t : (tensor<6x7xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x7xf32>)
  return %l : tensor<f32>
}

// -----

// A classifier's head with a bias: the logits (the GEMM plus the bias) are
// rounded alike.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[P:.+]] = mtc.matmul {{.*}} -> tensor<6x7xf32>
// CHECK-NEXT: %[[Y:.+]] = mtc.add %[[P]], %{{.+}} : (tensor<6x7xf32>, tensor<7xf32>) -> tensor<6x7xf32>
// CHECK-NEXT: %[[N:.+]] = mtc.convert %[[Y]] : tensor<6x7xf32> to tensor<6x7xbf16>
// CHECK-NEXT: %[[W:.+]] = mtc.convert %[[N]] : tensor<6x7xbf16> to tensor<6x7xf32>
// CHECK-NEXT: mtc.softmax_cross_entropy %[[W]]
func.func @forward(%x: tensor<6x4xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<6xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<7x4xf32> {mtc.name = "head.weight", mtc.role = "param"},
                   %b: tensor<7xf32> {mtc.name = "head.bias", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.matmul %x, %w {transpose_b = true} : (tensor<6x4xf32>, tensor<7x4xf32>) -> tensor<6x7xf32>
  %1 = mtc.add %0, %b : (tensor<6x7xf32>, tensor<7xf32>) -> tensor<6x7xf32>
  %l, %p = mtc.softmax_cross_entropy %1, %t : (tensor<6x7xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x7xf32>)
  return %l : tensor<f32>
}

// -----

// A linear layer's input gradient (a backward GEMM of the output gradient
// and the weight's 16-bit copy) is rounded to bfloat16 right after the
// GEMM, as autocast's matmul backward returns it, and widened right before
// its reader when every reader takes 16-bit values as stored (tanh's
// gradient, elementwise). One read by a transpose stays float32 (it would
// need a widening kernel of its own), and so do the weight gradients.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[^:]+]]: tensor<8x6xf32>
// CHECK: %[[WH:.+]] = mtc.convert %[[W]] : tensor<8x6xf32> to tensor<8x6xbf16>
// CHECK: %[[DTT:.+]] = mtc.matmul %{{.+}}, %[[WH]] {mtc.backward, transpose_b = true} : (tensor<4x6xbf16>, tensor<8x6xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[DW1:.+]] = mtc.matmul {{.*}} -> tensor<8x6xf32>
// CHECK-NEXT: mtc.transpose %[[DTT]] {mtc.backward
// CHECK: %[[DH:.+]] = mtc.matmul %{{.+}}, %[[WH]] {mtc.backward, transpose_b = true} : (tensor<4x6xbf16>, tensor<8x6xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[DHH:.+]] = mtc.convert %[[DH]] {mtc.backward} : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK-NEXT: %[[DW2:.+]] = mtc.matmul {{.*}} -> tensor<8x6xf32>
// CHECK-NEXT: %[[DW:.+]] = mtc.add %[[DW1]], %[[DW2]] {mtc.backward} : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
// CHECK: %[[WIDE:.+]] = mtc.convert %[[DHH]] {mtc.backward} : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT: %[[DX:.+]] = mtc.mul %[[WIDE]], %{{.+}} {mtc.backward}
// CHECK: return %{{.+}}, %[[DX]], %{{.+}}, %[[DW]]
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<4x8xf32> {mtc.name = "x", mtc.role = "param"},
                   %v: tensor<8x4xf32> {mtc.name = "v", mtc.role = "param"},
                   %w: tensor<8x6xf32> {mtc.name = "w", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %h = mtc.tanh %x : tensor<4x8xf32>
  %z = mtc.matmul %h, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %t = mtc.tanh %v : tensor<8x4xf32>
  %tt = mtc.transpose %t {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %z2 = mtc.matmul %tt, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %s = mtc.add %z, %z2 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %l = mtc.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x6xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A linear layer's output (GEMM plus bias) that only a residual add reads
// is rounded to bfloat16 after the bias, as autocast's linear layer returns
// it, and widened for the add; the GEMM's product itself is not rounded.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[P:.+]] = mtc.matmul {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: %[[Y:.+]] = mtc.add %[[P]], %{{.+}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[YH:.+]] = mtc.convert %[[Y]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK-NEXT: %[[YW:.+]] = mtc.convert %[[YH]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT: mtc.add %{{.+}}, %[[YW]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// FP32-LABEL: func.func @train_step
// FP32-NOT: mtc.convert
func.func @forward(%x: tensor<4x8xf32> {mtc.name = "x", mtc.role = "input"},
                   %w: tensor<8x8xf32> {mtc.name = "w", mtc.role = "param"},
                   %b: tensor<8xf32> {mtc.name = "b", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %h = mtc.tanh %x : tensor<4x8xf32>
  %p = mtc.matmul %h, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %y = mtc.add %p, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = mtc.add %h, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = mtc.reduce_sum %r {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A conv followed by a batch normalization: the conv's result is rounded to
// bfloat16 right after it (torch.autocast's conv returns it so), the batch
// norm normalizes the widening, and the batch norm backward reads the same
// 16-bit copy, widened, as its saved input: no float32 result lives past
// the batch norm.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.conv {{.+}} -> tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[YH:.+]] = mtc.convert %[[Y]] : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK-NEXT: %[[YW:.+]] = mtc.convert %[[YH]] : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: mtc.batch_norm_train %[[YW]],
// CHECK: %[[YB:.+]] = mtc.convert %[[YH]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK: mtc.batch_norm_train_grad %{{[^,]+}}, %[[YB]],
// CHECK-NOT: %[[Y]]
// CHECK: return
func.func @forward(%x: tensor<2x3x8x8xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "target", mtc.role = "input"},
                   %w: tensor<8x3x3x3xf32> {mtc.name = "conv.weight", mtc.role = "param"},
                   %g: tensor<8xf32> {mtc.name = "bn.weight", mtc.role = "param"},
                   %b: tensor<8xf32> {mtc.name = "bn.bias", mtc.role = "param"},
                   %rm: tensor<8xf32> {mtc.name = "bn.running_mean", mtc.role = "buffer"},
                   %rv: tensor<8xf32> {mtc.name = "bn.running_var", mtc.role = "buffer"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %0, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %1 = mtc.reduce_mean %y {axes = array<i64: 2, 3>, keepdims = false} : (tensor<2x8x8x8xf32>) -> tensor<2x8xf32>
  %l, %p = mtc.softmax_cross_entropy %1, %t : (tensor<2x8xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x8xf32>)
  return %l : tensor<f32>
}

// -----

// A residual block's end: each batch norm of a rounded conv result has
// its output rounded (the add reads the widenings), and the sum of the two
// 16-bit values, through the ReLU that alone reads it, is rounded as well:
// the next conv and the ReLU's gradient read that one 16-bit copy.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y1:[^,]+]], {{.+}} = mtc.batch_norm_train
// CHECK-NEXT: %[[Y1H:.+]] = mtc.convert %[[Y1]] : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK: %[[Y2:[^,]+]], {{.+}} = mtc.batch_norm_train
// CHECK-NEXT: %[[Y2H:.+]] = mtc.convert %[[Y2]] : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK-NEXT: %[[Y1W:.+]] = mtc.convert %[[Y1H]] : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[Y2W:.+]] = mtc.convert %[[Y2H]] : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[S:.+]] = mtc.add %[[Y1W]], %[[Y2W]]
// CHECK-NEXT: %[[R:.+]] = mtc.relu %[[S]]
// CHECK-NEXT: %[[RH:.+]] = mtc.convert %[[R]] : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK-NOT: mtc.convert %[[R]]
// CHECK: mtc.conv %[[RH]],
// CHECK: %[[RW:.+]] = mtc.convert %[[RH]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[DW:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: mtc.relu_grad %[[DW]], %[[RW]]
func.func @forward(%x: tensor<2x3x8x8xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "target", mtc.role = "input"},
                   %w1: tensor<8x3x3x3xf32> {mtc.name = "c1.weight", mtc.role = "param"},
                   %w2: tensor<8x3x1x1xf32> {mtc.name = "c2.weight", mtc.role = "param"},
                   %w3: tensor<4x8x8x8xf32> {mtc.name = "c3.weight", mtc.role = "param"},
                   %g: tensor<8xf32> {mtc.name = "bn.weight", mtc.role = "param"},
                   %b: tensor<8xf32> {mtc.name = "bn.bias", mtc.role = "param"},
                   %rm: tensor<8xf32> {mtc.name = "bn.running_mean", mtc.role = "buffer"},
                   %rv: tensor<8xf32> {mtc.name = "bn.running_var", mtc.role = "buffer"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %y1, %nm1, %nv1, %m1, %s1 = mtc.batch_norm_train %0, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %1 = mtc.conv %x, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<8x3x1x1xf32>) -> tensor<2x8x8x8xf32>
  %y2, %nm2, %nv2, %m2, %s2 = mtc.batch_norm_train %1, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %2 = mtc.add %y1, %y2 : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %3 = mtc.relu %2 : tensor<2x8x8x8xf32>
  %4 = mtc.conv %3, %w3 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<4x8x8x8xf32>) -> tensor<2x4x1x1xf32>
  %5 = mtc.reshape %4 : (tensor<2x4x1x1xf32>) -> tensor<2x4xf32>
  %l, %p = mtc.softmax_cross_entropy %5, %t : (tensor<2x4xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x4xf32>)
  return %l : tensor<f32>
}

// -----

// A batch norm read by a convolution alone: the gradient that convolution's
// backward returns is rounded, and the batch norm backward, whose saved
// input is 16-bit too, reads its widening.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.conv %{{.+}} -> tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[YH:.+]] = mtc.convert %[[Y]] : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK: %[[DN:.+]] = mtc.conv_backward_data {{.+}} -> tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[DNH:.+]] = mtc.convert %[[DN]] {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK: %[[YB:.+]] = mtc.convert %[[YH]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK: %[[DNW:.+]] = mtc.convert %[[DNH]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: mtc.batch_norm_train_grad %[[DNW]], %[[YB]],
func.func @forward(%x: tensor<2x3x8x8xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "target", mtc.role = "input"},
                   %w1: tensor<8x3x3x3xf32> {mtc.name = "c1.weight", mtc.role = "param"},
                   %w2: tensor<4x8x8x8xf32> {mtc.name = "c2.weight", mtc.role = "param"},
                   %g: tensor<8xf32> {mtc.name = "bn.weight", mtc.role = "param"},
                   %b: tensor<8xf32> {mtc.name = "bn.bias", mtc.role = "param"},
                   %rm: tensor<8xf32> {mtc.name = "bn.running_mean", mtc.role = "buffer"},
                   %rv: tensor<8xf32> {mtc.name = "bn.running_var", mtc.role = "buffer"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %0, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %1 = mtc.conv %y, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<4x8x8x8xf32>) -> tensor<2x4x1x1xf32>
  %2 = mtc.reshape %1 : (tensor<2x4x1x1xf32>) -> tensor<2x4xf32>
  %l, %p = mtc.softmax_cross_entropy %2, %t : (tensor<2x4xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x4xf32>)
  return %l : tensor<f32>
}

// -----

// Two residual blocks: the gradient of each block's ReLU of a rounded sum,
// which batch norm backwards and the sum with the gradient coming back
// through the convolutions read, is rounded as autocast's is. The second
// block's comes from the rounded input gradient of the last convolution;
// the first block's from the sum of the second block's and the rounded
// input gradient of the second block's convolution, a sum of two 16-bit
// gradients that is rounded as well.
// CHECK-LABEL: func.func @train_step
// Each reader reads a widening of its own, made right before it (the
// fusion pass folds the batch norm backwards' ones).
// CHECK: %[[G2:.+]] = mtc.relu_grad %{{.+}} {mtc.backward} : tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[G2H:.+]] = mtc.convert %[[G2]] {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK-NOT: %[[G2]]
// CHECK: %[[G2B:.+]] = mtc.convert %[[G2H]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: mtc.batch_norm_train_grad %[[G2B]],
// CHECK: %[[D3:.+]] = mtc.conv_backward_data
// CHECK-NEXT: %[[D3H:.+]] = mtc.convert %[[D3]] {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK: %[[D3W:.+]] = mtc.convert %[[D3H]] {mtc.backward}
// CHECK-NEXT: %[[G2A:.+]] = mtc.convert %[[G2H]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[S:.+]] = mtc.add %[[G2A]], %[[D3W]] {mtc.backward}
// CHECK-NEXT: %[[SH:.+]] = mtc.convert %[[S]] {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK: %[[SW:.+]] = mtc.convert %[[SH]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[G1:.+]] = mtc.relu_grad %[[SW]], %{{.+}} {mtc.backward} : tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[G1H:.+]] = mtc.convert %[[G1]] {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK-NOT: %[[G1]]
// CHECK: %[[G1B:.+]] = mtc.convert %[[G1H]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: mtc.batch_norm_train_grad %[[G1B]],
// CHECK: %[[G1C:.+]] = mtc.convert %[[G1H]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: mtc.batch_norm_train_grad %[[G1C]],
// CHECK: return
func.func @forward(%x: tensor<2x3x8x8xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "target", mtc.role = "input"},
                   %w1: tensor<8x3x3x3xf32> {mtc.name = "c1.weight", mtc.role = "param"},
                   %w2: tensor<8x3x1x1xf32> {mtc.name = "c2.weight", mtc.role = "param"},
                   %w3: tensor<8x8x3x3xf32> {mtc.name = "c3.weight", mtc.role = "param"},
                   %w4: tensor<4x8x8x8xf32> {mtc.name = "c4.weight", mtc.role = "param"},
                   %g: tensor<8xf32> {mtc.name = "bn.weight", mtc.role = "param"},
                   %b: tensor<8xf32> {mtc.name = "bn.bias", mtc.role = "param"},
                   %rm: tensor<8xf32> {mtc.name = "bn.running_mean", mtc.role = "buffer"},
                   %rv: tensor<8xf32> {mtc.name = "bn.running_var", mtc.role = "buffer"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x8x8xf32>
  %y1, %nm1, %nv1, %m1, %s1 = mtc.batch_norm_train %0, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %1 = mtc.conv %x, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<8x3x1x1xf32>) -> tensor<2x8x8x8xf32>
  %y2, %nm2, %nv2, %m2, %s2 = mtc.batch_norm_train %1, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %2 = mtc.add %y1, %y2 : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %a = mtc.relu %2 : tensor<2x8x8x8xf32>
  %3 = mtc.conv %a, %w3 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<2x8x8x8xf32>
  %y3, %nm3, %nv3, %m3, %s3 = mtc.batch_norm_train %3, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %4 = mtc.add %y3, %a : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %c = mtc.relu %4 : tensor<2x8x8x8xf32>
  %5 = mtc.conv %c, %w4 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<4x8x8x8xf32>) -> tensor<2x4x1x1xf32>
  %6 = mtc.reshape %5 : (tensor<2x4x1x1xf32>) -> tensor<2x4xf32>
  %l, %p = mtc.softmax_cross_entropy %6, %t : (tensor<2x4xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x4xf32>)
  return %l : tensor<f32>
}

// -----

// A max pooling (ResNet's stem): the sum of the two 16-bit input gradients
// of the convolutions reading its result is rounded, and so is the max
// pooling's input gradient, whose saved input is 16-bit; the max pooling
// backward reads the widenings.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[S:.+]] = mtc.add %{{.+}}, %{{.+}} {mtc.backward} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[SH:.+]] = mtc.convert %[[S]] {mtc.backward} : tensor<2x8x8x8xf32> to tensor<2x8x8x8xbf16>
// CHECK-NEXT: %[[RW:.+]] = mtc.convert %{{.+}} {mtc.backward} : tensor<2x8x16x16xbf16> to tensor<2x8x16x16xf32>
// CHECK-NEXT: %[[SW:.+]] = mtc.convert %[[SH]] {mtc.backward} : tensor<2x8x8x8xbf16> to tensor<2x8x8x8xf32>
// CHECK-NEXT: %[[DX:.+]] = mtc.max_pool_grad %[[RW]], %[[SW]]
// CHECK-NEXT: %[[DXH:.+]] = mtc.convert %[[DX]] {mtc.backward} : tensor<2x8x16x16xf32> to tensor<2x8x16x16xbf16>
// CHECK-NEXT: %[[DXW:.+]] = mtc.convert %[[DXH]] {mtc.backward} : tensor<2x8x16x16xbf16> to tensor<2x8x16x16xf32>
// CHECK-NEXT: mtc.relu_grad %[[DXW]], %[[RW]]
func.func @forward(%x: tensor<2x3x16x16xf32> {mtc.name = "input", mtc.role = "input"},
                   %t: tensor<2xi64> {mtc.name = "target", mtc.role = "input"},
                   %w1: tensor<8x3x3x3xf32> {mtc.name = "c1.weight", mtc.role = "param"},
                   %w2: tensor<4x8x8x8xf32> {mtc.name = "c2.weight", mtc.role = "param"},
                   %w3: tensor<4x8x8x8xf32> {mtc.name = "c3.weight", mtc.role = "param"},
                   %g: tensor<8xf32> {mtc.name = "bn.weight", mtc.role = "param"},
                   %b: tensor<8xf32> {mtc.name = "bn.bias", mtc.role = "param"},
                   %rm: tensor<8xf32> {mtc.name = "bn.running_mean", mtc.role = "buffer"},
                   %rv: tensor<8xf32> {mtc.name = "bn.running_var", mtc.role = "buffer"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %0 = mtc.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x16x16xf32>, tensor<8x3x3x3xf32>) -> tensor<2x8x16x16xf32>
  %y, %nm, %nv, %m, %s = mtc.batch_norm_train %0, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x16x16xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x16x16xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  %r = mtc.relu %y : tensor<2x8x16x16xf32>
  %p = mtc.max_pool %r {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x8x16x16xf32>) -> tensor<2x8x8x8xf32>
  %1 = mtc.conv %p, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<4x8x8x8xf32>) -> tensor<2x4x1x1xf32>
  %2 = mtc.conv %p, %w3 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x8x8x8xf32>, tensor<4x8x8x8xf32>) -> tensor<2x4x1x1xf32>
  %3 = mtc.add %1, %2 : (tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>) -> tensor<2x4x1x1xf32>
  %4 = mtc.reshape %3 : (tensor<2x4x1x1xf32>) -> tensor<2x4xf32>
  %l, %lp = mtc.softmax_cross_entropy %4, %t : (tensor<2x4xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x4xf32>)
  return %l : tensor<f32>
}

// -----

// A linear layer's output reshaped after its bias (Hugging Face's Conv1D:
// the GEMM of the flattened rows, reshaped back) that the backward pass
// reads is rounded right after the reshape, and its forward reader reads the
// rounded values, as the unreshaped output would be: the GEMM then stores
// 16 bits only.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.add
// CHECK-NEXT: %[[R:.+]] = mtc.reshape %[[Y]] : (tensor<128x64xf32>) -> tensor<2x64x64xf32>
// CHECK-NEXT: %[[RH:.+]] = mtc.convert %[[R]] : tensor<2x64x64xf32> to tensor<2x64x64xbf16>
// CHECK-NEXT: %[[RW:.+]] = mtc.convert %[[RH]] : tensor<2x64x64xbf16> to tensor<2x64x64xf32>
// CHECK-NEXT: mtc.mul %[[RW]], %[[RW]]
// CHECK: mtc.convert %[[RH]] {mtc.backward} : tensor<2x64x64xbf16> to tensor<2x64x64xf32>
// CHECK-NOT: mtc.mul %[[R]]
// CHECK: return
func.func @forward(%x: tensor<128x32xf32> {mtc.name = "x", mtc.role = "input"},
                   %w: tensor<32x64xf32> {mtc.name = "w", mtc.role = "param"},
                   %b: tensor<64xf32> {mtc.name = "b", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %p = mtc.matmul %x, %w : (tensor<128x32xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
  %y = mtc.add %p, %b : (tensor<128x64xf32>, tensor<64xf32>) -> tensor<128x64xf32>
  %r = mtc.reshape %y : (tensor<128x64xf32>) -> tensor<2x64x64xf32>
  %h = mtc.mul %r, %r : (tensor<2x64x64xf32>, tensor<2x64x64xf32>) -> tensor<2x64x64xf32>
  %l = mtc.reduce_sum %h {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x64x64xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The same output that only the forward pass reads (tanh's gradient reads
// tanh's result) is rounded right after the reshape as well.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[R:.+]] = mtc.reshape %{{.+}} : (tensor<128x64xf32>) -> tensor<2x64x64xf32>
// CHECK-NEXT: %[[RH:.+]] = mtc.convert %[[R]] : tensor<2x64x64xf32> to tensor<2x64x64xbf16>
// CHECK-NEXT: %[[RW:.+]] = mtc.convert %[[RH]] : tensor<2x64x64xbf16> to tensor<2x64x64xf32>
// CHECK-NEXT: mtc.tanh %[[RW]]
func.func @forward(%x: tensor<128x32xf32> {mtc.name = "x", mtc.role = "input"},
                   %w: tensor<32x64xf32> {mtc.name = "w", mtc.role = "param"},
                   %b: tensor<64xf32> {mtc.name = "b", mtc.role = "param"})
    -> (tensor<f32> {mtc.name = "loss"}) {
  %p = mtc.matmul %x, %w : (tensor<128x32xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
  %y = mtc.add %p, %b : (tensor<128x64xf32>, tensor<64xf32>) -> tensor<128x64xf32>
  %r = mtc.reshape %y : (tensor<128x64xf32>) -> tensor<2x64x64xf32>
  %h = mtc.tanh %r : tensor<2x64x64xf32>
  %l = mtc.reduce_sum %h {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x64x64xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
