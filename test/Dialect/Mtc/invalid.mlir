// RUN: mtc-opt %s --split-input-file --verify-diagnostics

func.func @add_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error@+2 {{operand shapes do not broadcast}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mtc.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @add_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error@+2 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x4xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mtc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_inner(%a: tensor<4x3xf32>, %b: tensor<5x4xf32>) {
  // expected-error@+2 {{matmul inner dimensions differ: 3 vs 5}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mtc.matmul %a, %b : (tensor<4x3xf32>, tensor<5x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @matmul_rank(%a: tensor<4xf32>, %b: tensor<4x5xf32>) {
  // expected-error@+2 {{matmul operands must have rank >= 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mtc.matmul %a, %b : (tensor<4xf32>, tensor<4x5xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @matmul_bias_shape(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<4xf32>) {
  // expected-error@+2 {{a matmul bias must have shape [5]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mtc.matmul %a, %b, %c : (tensor<3x4xf32>, tensor<4x5xf32>, tensor<4xf32>) -> tensor<3x5xf32>
  return
}

// -----

func.func @layer_norm_grad_accumulate(%dy: tensor<4x16xf32>, %g: tensor<16xf32>, %m: tensor<4x1xf32>, %r: tensor<4x8xf32>) {
  // expected-error@+1 {{accumulate must have the input gradient's type}}
  %0:3 = mtc.layer_norm_grad %dy, %dy, %g, %m, %m accumulate %r {axis = 1 : i64} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @layer_norm_grad_input(%dy: tensor<4x16xf32>, %x: tensor<4x8xbf16>, %g: tensor<16xf32>, %m: tensor<4x1xf32>) {
  // expected-error@+1 {{input, grad and input_grad must have one shape}}
  %0:3 = mtc.layer_norm_grad %dy, %x, %g, %m, %m {axis = 1 : i64} : (tensor<4x16xf32>, tensor<4x8xbf16>, tensor<16xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @matmul_bias_grad_summed(%a: tensor<6x4xf32>, %g: tensor<4x5xf32>) {
  // expected-error@+1 {{the summed operand must be stored [K, ...]}}
  %0:2 = mtc.matmul_bias_grad %a, %g {sum_a = true} : (tensor<6x4xf32>, tensor<4x5xf32>) -> (tensor<6x5xf32>, tensor<6xf32>)
  return
}

// -----

func.func @matmul_gelu_storage(%x: tensor<6x4xbf16>, %w: tensor<4x8xbf16>) {
  // expected-error@+1 {{operands and results must be stored in one precision}}
  %0:2 = mtc.matmul_gelu %x, %w : (tensor<6x4xbf16>, tensor<4x8xbf16>) -> (tensor<6x8xbf16>, tensor<6x8xf32>)
  return
}

// -----

func.func @matmul_gelu_grad_shape(%dy: tensor<6x4xf32>, %w: tensor<4x8xf32>, %pre: tensor<6x7xf32>) {
  // expected-error@+1 {{results must have the product's shape}}
  %0 = mtc.matmul_gelu_grad %dy, %w, %pre : (tensor<6x4xf32>, tensor<4x8xf32>, tensor<6x7xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @conv_group(%x: tensor<1x4x8x8xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error@+1 {{weight has 4 input channels per group, expected 2}}
  %0 = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<1x6x6x6xf32>
  return
}

// -----

func.func @conv_bias(%x: tensor<1x4x8x8xf32>, %w: tensor<6x4x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{bias must have one element per output channel}}
  %0 = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<4xf32>) -> tensor<1x6x6x6xf32>
  return
}

// -----

func.func @conv_backward_shape(%dy: tensor<1x6x6x6xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error@+1 {{output shape does not match the convolution}}
  %0 = mtc.conv_backward_data %dy, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x6x6x6xf32>, tensor<6x4x3x3xf32>) -> tensor<1x4x9x9xf32>
  return
}

// -----

func.func @pool_pads(%x: tensor<1x1x8x8xf32>) {
  // expected-error@+1 {{pads must be smaller than the kernel}}
  %0 = mtc.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 2, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x5x4xf32>
  return
}

// -----

func.func @pool_strides(%x: tensor<1x1x8x8xf32>) {
  // expected-error@+1 {{strides and dilations must be positive, pads >= 0}}
  %0 = mtc.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 0, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x8x8xf32>) -> tensor<1x1x7x4xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{element count changes from 6 to 8}}
  %0 = mtc.reshape %x : (tensor<2x3xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @expand_shape(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{input does not broadcast to the result shape}}
  %0 = mtc.expand %x : (tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{perm is not a permutation of the dims}}
  %0 = mtc.transpose %x {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @pad_negative(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{pads must be non-negative}}
  %0 = mtc.pad %x {pads = array<i64: 0, -1, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @slice_bounds(%x: tensor<2x5xf32>) {
  // expected-error@+1 {{window leaves the input in dimension 1}}
  %0 = mtc.slice %x {starts = array<i64: 0, 3>, steps = array<i64: 1, 1>} : (tensor<2x5xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @reduce_axes(%x: tensor<2x5xf32>) {
  // expected-error@+1 {{axes must be sorted, unique and in range}}
  %0 = mtc.reduce_sum %x {axes = array<i64: 1, 0>} : (tensor<2x5xf32>) -> tensor<1x1xf32>
  return
}

// -----

func.func @softmax_axis(%x: tensor<2x5xf32>) {
  // expected-error@+1 {{axis out of range}}
  %0 = mtc.softmax %x {axis = 2 : i64} : tensor<2x5xf32>
  return
}

// -----

func.func @sce_reduction(%x: tensor<4x10xf32>, %l: tensor<4xi64>) {
  // expected-error@+1 {{reduction must be mean, sum or none, got 'avg'}}
  %0:2 = mtc.softmax_cross_entropy %x, %l {reduction = "avg"} : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}

// -----

func.func @sce_labels(%x: tensor<4x10xf32>, %l: tensor<5xi64>) {
  // expected-error@+1 {{labels must have the shape of logits without C}}
  %0:2 = mtc.softmax_cross_entropy %x, %l : (tensor<4x10xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}

// -----

func.func @labels_float(%x: tensor<4x10xf32>, %l: tensor<4xf32>) {
  // expected-error@+1 {{operand #1 must be statically shaped tensor of 64-bit signless integer values}}
  %0:2 = mtc.softmax_cross_entropy %x, %l : (tensor<4x10xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}

// -----

func.func @dynamic(%x: tensor<?x10xf32>) {
  // expected-error@+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %0 = mtc.relu %x : tensor<?x10xf32>
  return
}

// -----

func.func @batch_norm_channels(%x: tensor<2x8x4x4xf32>, %g: tensor<4xf32>) {
  // expected-error@+1 {{scale, bias and statistics must have C = 8 elements}}
  %y:5 = mtc.batch_norm_train %x, %g, %g, %g, %g {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x8x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @batch_norm_formats(%x: tensor<2x8x4x4xbf16>, %g: tensor<8xf32>) {
  // expected-error@+1 {{16-bit operands and results must share one format}}
  %y:5 = mtc.batch_norm_train %x, %g, %g, %g, %g {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @batch_norm_residual_stored_unlike_output(%x: tensor<2x8x4x4xbf16>, %r: tensor<2x8x4x4xf32>, %g: tensor<8xf32>) {
  // expected-error@+1 {{residual must have the output's type}}
  %y:5 = mtc.batch_norm_train %x, %g, %g, %g, %g residual %r {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x8x4x4xf32>) -> (tensor<2x8x4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @batch_norm_copy_of_16_bit_input(%x: tensor<2x8x4x4xbf16>, %g: tensor<8xf32>) {
  // expected-error@+1 {{input16 must be a float32 input's 16-bit copy}}
  %y:6 = mtc.batch_norm_train %x, %g, %g, %g, %g {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x8x4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x8x4x4xbf16>)
  return
}

// -----

func.func @conv_backward_data_result_format(%dy: tensor<1x3x4x4xbf16>, %w: tensor<3x2x3x3xbf16>) {
  // expected-error@+1 {{a 16-bit result must be stored as the operands are, which the convolution multiplies as stored}}
  %dx = mtc.conv_backward_data %dy, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64, mtc.native_16bit_gemm} : (tensor<1x3x4x4xbf16>, tensor<3x2x3x3xbf16>) -> tensor<1x2x4x4xf16>
  return
}

// -----

func.func @batch_norm_grad_16_bit_grad_float_input(%dy: tensor<2x8x4x4xbf16>, %x: tensor<2x8x4x4xf32>, %g: tensor<8xf32>) {
  // expected-error@+1 {{a 16-bit grad must be stored as the input is}}
  %r:3 = mtc.batch_norm_train_grad %dy, %x, %g, %g, %g : (tensor<2x8x4x4xbf16>, tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @batch_norm_grad_activation_stored_otherwise(%dy: tensor<2x8x4x4xf32>, %x: tensor<2x8x4x4xbf16>, %g: tensor<8xf32>) {
  // expected-error@+1 {{activation_output must have the gradient's shape and be stored as the input is}}
  %r:3 = mtc.batch_norm_train_grad %dy, %x, %g, %g, %g activation %dy {activation = "relu"} : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x8x4x4xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_scale(%x: tensor<2x8x32xf32>, %g: tensor<8xf32>) {
  // expected-error@+1 {{scale must have the normalized dims' shape}}
  %y:3 = mtc.layer_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x8x32xf32>, tensor<8xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>, tensor<2x8x1xf32>)
  return
}

// -----

func.func @gather_axis(%t: tensor<50x32xf32>, %i: tensor<4xi64>) {
  // expected-error@+2 {{axis out of range}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = mtc.gather %t, %i {axis = 2 : i64} : (tensor<50x32xf32>, tensor<4xi64>) -> tensor<4x32xf32>
  return
}

// -----

func.func @concat_shapes(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error@+2 {{operands differ outside the axis}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = mtc.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @select_condition(%c: tensor<4xf32>, %a: tensor<4xf32>) {
  // expected-error@+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %y = mtc.select %c, %a, %a : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @convert_shape(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{changes the shape: 'tensor<4x8xf32>' to 'tensor<32xbf16>'}}
  %y = mtc.convert %x : tensor<4x8xf32> to tensor<32xbf16>
  return
}

// -----

func.func @low_precision_compute(%x: tensor<4xbf16>) {
  // expected-error@+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %y = mtc.relu %x : tensor<4xbf16>
  return
}

// -----

func.func @matmul_mixed_precision(%a: tensor<2x3xbf16>, %b: tensor<3x4xf32>) {
  // expected-error@+2 {{matmul operands are stored in different precisions}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = mtc.matmul %a, %b : (tensor<2x3xbf16>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @conv_mixed_precision(%x: tensor<1x2x4x4xbf16>, %w: tensor<3x2x3x3xf16>) {
  // expected-error@+1 {{operands are stored in different precisions: 'tensor<1x2x4x4xbf16>' and 'tensor<3x2x3x3xf16>'}}
  %y = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x4x4xbf16>, tensor<3x2x3x3xf16>) -> tensor<1x3x4x4xf32>
  return
}

// -----

func.func @conv_filter_mixed_precision(%x: tensor<1x2x4x4xf32>, %dy: tensor<1x3x4x4xbf16>) {
  // expected-error@+1 {{operands are stored in different precisions}}
  %dw = mtc.conv_backward_filter %x, %dy {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<1x3x4x4xbf16>) -> tensor<3x2x3x3xf32>
  return
}

// -----

func.func @conv_backward_data_16bit_result_widened(%dy: tensor<1x3x4x4xbf16>, %w: tensor<3x2x3x3xbf16>) {
  // expected-error@+1 {{a 16-bit result must be stored as the operands are, which the convolution multiplies as stored}}
  %dx = mtc.conv_backward_data %dy, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x3x4x4xbf16>, tensor<3x2x3x3xbf16>) -> tensor<1x2x4x4xbf16>
  return
}

// -----

func.func @conv_16bit_bias(%x: tensor<1x2x4x4xbf16>, %w: tensor<3x2x3x3xbf16>, %b: tensor<3xbf16>) {
  // expected-error@+1 {{operand #2 must be statically shaped tensor of 32-bit float values}}
  %y = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x4x4xbf16>, tensor<3x2x3x3xbf16>, tensor<3xbf16>) -> tensor<1x3x4x4xf32>
  return
}

// -----

func.func @attention_output_format(%q: tensor<2x8x16xbf16>) {
  // expected-error@+1 {{a 16-bit output must be stored as the operands are}}
  %o, %lse = mtc.attention %q, %q, %q {scale = 2.5e-01 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> (tensor<2x8x16xf16>, tensor<2x8xf32>)
  return
}

// -----

func.func @attention_grad_output_format(%q: tensor<2x8x16xbf16>, %o: tensor<2x8x16xf16>, %lse: tensor<2x8xf32>) {
  // expected-error@+1 {{a 16-bit output must be stored as the operands are}}
  %dq, %dk, %dv = mtc.attention_grad %q, %q, %q, %q, %o, %lse {scale = 2.5e-01 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xf16>, tensor<2x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return
}

// -----

func.func @attention_grad_gradients_alike(%q: tensor<2x8x16xbf16>, %lse: tensor<2x8xf32>) {
  // expected-error@+1 {{the three gradients must be stored alike}}
  %dq, %dk, %dv = mtc.attention_grad %q, %q, %q, %q, %q, %lse {scale = 2.5e-01 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8xf32>) -> (tensor<2x8x16xbf16>, tensor<2x8x16xf32>, tensor<2x8x16xbf16>)
  return
}

// -----

func.func @attention_grad_gradient_format(%q: tensor<2x8x16xbf16>, %lse: tensor<2x8xf32>) {
  // expected-error@+1 {{16-bit gradients must be stored as the operands are}}
  %dq, %dk, %dv = mtc.attention_grad %q, %q, %q, %q, %q, %lse {scale = 2.5e-01 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8xf32>) -> (tensor<2x8x16xf16>, tensor<2x8x16xf16>, tensor<2x8x16xf16>)
  return
}

// -----

func.func @concat_mixed_storage(%a: tensor<2x3xbf16>, %b: tensor<2x3xf32>) {
  // expected-error@+2 {{operands differ in rank or type}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = mtc.concat %a, %b {axis = 1 : i64} : (tensor<2x3xbf16>, tensor<2x3xf32>) -> tensor<2x6xbf16>
  return
}

// -----

func.func @concat_16bit_widened(%a: tensor<2x3xbf16>) {
  // expected-error@+2 {{inferred type(s) 'tensor<2x6xbf16>' are incompatible with return type(s) of operation 'tensor<2x6xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = mtc.concat %a, %a {axis = 1 : i64} : (tensor<2x3xbf16>, tensor<2x3xbf16>) -> tensor<2x6xf32>
  return
}

// -----

func.func @matmul_result_format(%a: tensor<4x8xbf16>, %b: tensor<8x3xbf16>) {
  // expected-error@+1 {{a 16-bit result must be stored as the operands are}}
  %y = mtc.matmul %a, %b : (tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xf16>
  return
}

// -----

func.func @matmul_16bit_batched(%a: tensor<2x4x8xbf16>, %b: tensor<2x8x3xbf16>) {
  // expected-error@+1 {{a 16-bit result needs a 2-D b and a non-transposed a}}
  %y = mtc.matmul %a, %b : (tensor<2x4x8xbf16>, tensor<2x8x3xbf16>) -> tensor<2x4x3xbf16>
  return
}

// -----

func.func @attention_seq_major_rank(%q: tensor<8x16xf32>) {
  // expected-error@+1 {{operands must have rank >= 3}}
  %o, %lse = mtc.attention %q, %q, %q {scale = 2.5e-01 : f32, seq_major} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8xf32>)
  return
}

// -----

func.func @attention_seq_major_heads(%q: tensor<2x8x3x16xf32>, %k: tensor<2x8x4x16xf32>) {
  // expected-error@+1 {{query, key and value must share their leading dims}}
  %o, %lse = mtc.attention %q, %k, %k {scale = 2.5e-01 : f32, seq_major} : (tensor<2x8x3x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x3x16xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @attention_grad_gradient_shapes(%q: tensor<2x8x16xf32>, %lse: tensor<2x8xf32>) {
  // expected-error@+1 {{each gradient must have its operand's shape}}
  %dq, %dk, %dv = mtc.attention_grad %q, %q, %q, %q, %q, %lse {scale = 2.5e-01 : f32} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x8xf32>)
  return
}

// -----

func.func @loss_16bit_logits(%x: tensor<8x10xbf16>, %y: tensor<8xi64>, %d: tensor<f32>) {
  // expected-error@+1 {{16-bit logits need dlogits stored alike}}
  %loss, %g = mtc.softmax_cross_entropy_with_grad %x, %y, %d : (tensor<8x10xbf16>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x10xf32>)
  return
}

// -----

func.func @loss_alone_rank(%x: tensor<8x10x2xf32>, %y: tensor<8x2xi64>) {
  // expected-error@+1 {{needs logits [N, C] and labels [N]}}
  %loss = mtc.softmax_cross_entropy_loss %x, %y : (tensor<8x10x2xf32>, tensor<8x2xi64>) -> tensor<f32>
  return
}

// -----

func.func @layer_norm_grad_copy_format(%dy: tensor<4x8xf32>, %x: tensor<4x8xbf16>, %g: tensor<8xf32>, %m: tensor<4x1xf32>) {
  // expected-error@+1 {{input_grad16 must be the input gradient stored as the input is}}
  %dx, %dg, %db, %h = mtc.layer_norm_grad %dy, %x, %g, %m, %m {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x8xf16>)
  return
}

// -----

func.func @layer_norm_grad_16bit_grad(%dy: tensor<4x8xbf16>, %x: tensor<4x8xf32>, %g: tensor<8xf32>, %m: tensor<4x1xf32>) {
  // expected-error@+1 {{a 16-bit grad needs the input stored alike}}
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %m {axis = 1 : i64} : (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @layer_norm_grad_16bit_formats(%dy: tensor<4x8xf16>, %x: tensor<4x8xbf16>, %g: tensor<8xf32>, %m: tensor<4x1xf32>) {
  // expected-error@+1 {{a 16-bit grad needs the input stored alike}}
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %m {axis = 1 : i64} : (tensor<4x8xf16>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @gather_grad_accumulate_type(%dy: tensor<2x3x8xf32>, %ids: tensor<2x3xi64>, %w: tensor<10x4xf32>) -> tensor<10x8xf32> {
  // expected-error @+1 {{accumulate must have the result's type}}
  %g = mtc.gather_grad %dy, %ids accumulate %w {axis = 0 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi64>, tensor<10x4xf32>) -> tensor<10x8xf32>
  return %g : tensor<10x8xf32>
}

// -----

func.func @attention_causal_and_mask(%q: tensor<2x8x16xf32>, %m: tensor<8x8xi1>) {
  // expected-error @+1 {{takes a mask or causal, not both}}
  %o, %lse = mtc.attention %q, %q, %q, %m {causal, scale = 2.5e-01 : f32} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x8xi1>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  return
}

// -----

func.func @conv_16_bit_result_with_bias(%x: tensor<2x3x4x4xbf16>, %w: tensor<8x3x3x3xbf16>, %b: tensor<8xf32>) {
  // expected-error@+1 {{a 16-bit result takes neither a bias nor a depthwise convolution}}
  %y = mtc.conv %x, %w, %b {mtc.native_16bit_gemm, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<8x3x3x3xbf16>, tensor<8xf32>) -> tensor<2x8x4x4xbf16>
  return
}

// -----

func.func @conv_16_bit_result_widened(%x: tensor<2x3x4x4xbf16>, %w: tensor<8x3x3x3xbf16>) {
  // expected-error@+1 {{a 16-bit result must be stored as the operands are, which the convolution multiplies as stored}}
  %y = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x3x4x4xbf16>, tensor<8x3x3x3xbf16>) -> tensor<2x8x4x4xbf16>
  return
}

// -----

func.func @max_pool_grad_formats(%x: tensor<2x8x8x8xbf16>, %dy: tensor<2x8x4x4xf16>) {
  // expected-error@+1 {{16-bit operands and results must share one format}}
  %dx = mtc.max_pool_grad %x, %dy {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x8x8x8xbf16>, tensor<2x8x4x4xf16>) -> tensor<2x8x8x8xf32>
  return
}
