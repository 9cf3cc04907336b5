// RUN: mtc-opt %s --split-input-file --mtc-memory-plan="alignment=64" --verify-diagnostics | FileCheck %s

// Every tensor is 64 bytes after alignment. The parameter persists, the
// input %x lives to its last reader (op 3); %0 lives over ops 0-3, %1 over
// 1-2, the loss %2 and the gradient %3 to the end. At most five tensors are
// live at once, so the lower bound is 320 bytes, and %3 reuses the slot %1
// freed. The update writes in place of its parameter.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: mtc.offset = 0 : i64
// CHECK-SAME: mtc.offset = 64 : i64
// CHECK-SAME: attributes {mtc.arena_size = 320 : i64, mtc.lower_bound = 320 : i64}
// CHECK: mtc.mul {{.*}}mtc.offsets = array<i64: 128>
// CHECK: mtc.relu {{.*}}mtc.offsets = array<i64: 192>
// CHECK: mtc.reduce_sum {{.*}}mtc.offsets = array<i64: 256>
// CHECK: mtc.relu_grad {{.*}}mtc.offsets = array<i64: 192>
// CHECK: mtc.sgd_update {{.*}}mtc.offsets = array<i64: 0>
func.func @train_step(%p: tensor<16xf32> {mtc.name = "p", mtc.role = "param"}, %x: tensor<16xf32> {mtc.name = "x", mtc.role = "input"})
    -> (tensor<f32> {mtc.role = "loss"}, tensor<16xf32> {mtc.role = "grad", mtc.owner = 0 : i64}, tensor<16xf32> {mtc.role = "update", mtc.tied = 0 : i64}) {
  %0 = mtc.mul %p, %x : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %1 = mtc.relu %0 : tensor<16xf32>
  %2 = mtc.reduce_sum %1 {axes = array<i64: 0>, keepdims = false} : (tensor<16xf32>) -> tensor<f32>
  %3 = mtc.relu_grad %x, %0 : tensor<16xf32>
  %4 = mtc.sgd_update %p, %3 {lr = 0.1 : f64} : tensor<16xf32>
  return %2, %3, %4 : tensor<f32>, tensor<16xf32>, tensor<16xf32>
}

// -----

// Convolution scratch (the im2col of one image: 2*3*3 x 4*4 floats = 1152
// bytes) is planned for the op alone: placed first (largest), its bytes are
// reused by the loss once the convolution is done.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: mtc.arena_size = 1472 : i64, mtc.lower_bound = 1472 : i64
// CHECK: mtc.conv {{.*}}mtc.offsets = array<i64: 1408>, mtc.workspace = array<i64: 0, 1152>
// CHECK: mtc.reduce_sum {{.*}}mtc.offsets = array<i64: 0>
func.func @train_step(%x: tensor<1x2x4x4xf32> {mtc.name = "x", mtc.role = "input"}, %w: tensor<1x2x3x3xf32> {mtc.name = "w", mtc.role = "param"})
    -> (tensor<f32> {mtc.role = "loss"}) {
  %0 = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x3x3xf32>) -> tensor<1x1x4x4xf32>
  %1 = mtc.reduce_sum %0 {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x1x4x4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// An in-place update must be the last reader of what it overwrites.
func.func @train_step(%p: tensor<16xf32> {mtc.name = "p", mtc.role = "param"})
    -> (tensor<f32> {mtc.role = "loss"}, tensor<16xf32> {mtc.role = "update", mtc.tied = 0 : i64}) {
  // expected-error@+1 {{overwrites argument 0 that is read after it}}
  %0 = mtc.sgd_update %p, %p {lr = 0.1 : f64} : tensor<16xf32>
  %1 = mtc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : (tensor<16xf32>) -> tensor<f32>
  return %1, %0 : tensor<f32>, tensor<16xf32>
}

// -----

// A reshape of a temporary is a view: it has its input's offset (one buffer,
// live until the last reader of either). A reshape of an argument is a copy
// of its own, here in the bytes %0 and its view no longer need. The input
// %x, which the trainer writes before every step, is dead once that copy
// has read it: the sum takes its bytes.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: mtc.offset = 0 : i64
// CHECK-SAME: mtc.arena_size = 192 : i64, mtc.lower_bound = 192 : i64
// CHECK: %[[A:.+]] = mtc.mul {{.*}}mtc.offsets = array<i64: 64>
// CHECK-NEXT: mtc.reshape %[[A]] {mtc.offsets = array<i64: 64>}
// CHECK-NEXT: mtc.relu {{.*}}mtc.offsets = array<i64: 128>
// CHECK-NEXT: mtc.reshape %arg0 {mtc.offsets = array<i64: 64>}
// CHECK-NEXT: mtc.add {{.*}}mtc.offsets = array<i64: 0>
func.func @train_step(%x: tensor<16xf32> {mtc.name = "x", mtc.role = "input"})
    -> (tensor<f32> {mtc.role = "loss"}, tensor<4x4xf32> {mtc.role = "grad", mtc.owner = 0 : i64}) {
  %0 = mtc.mul %x, %x : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %1 = mtc.reshape %0 : (tensor<16xf32>) -> tensor<4x4xf32>
  %2 = mtc.relu %1 : tensor<4x4xf32>
  %3 = mtc.reshape %x : (tensor<16xf32>) -> tensor<4x4xf32>
  %4 = mtc.add %2, %3 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %5 = mtc.reduce_sum %4 {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x4xf32>) -> tensor<f32>
  return %5, %4 : tensor<f32>, tensor<4x4xf32>
}

// -----

// The log-probabilities are written over logits no later op reads, and the
// gradient over the log-probabilities (their last reader); logits read
// after the loss keep their own bytes.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.+]] = mtc.mul {{.*}}mtc.offsets = array<i64: [[L:[0-9]+]]>
// CHECK-NEXT: mtc.softmax_cross_entropy %[[Y]], {{.*}}mtc.offsets = array<i64: {{[0-9]+}}, [[L]]>
// CHECK: mtc.softmax_cross_entropy_grad {{.*}}mtc.offsets = array<i64: [[L]]>
// CHECK: %[[Z:.+]] = mtc.mul {{.*}}mtc.offsets = array<i64: [[M:[0-9]+]]>
// CHECK-NOT: mtc.softmax_cross_entropy %[[Z]], {{.*}}mtc.offsets = array<i64: {{[0-9]+}}, [[M]]>
// CHECK: mtc.relu %[[Z]]
func.func @train_step(%x: tensor<4x8xf32> {mtc.name = "x", mtc.role = "input"}, %t: tensor<4xi64> {mtc.name = "t", mtc.role = "input"})
    -> (tensor<4x8xf32> {mtc.role = "grad", mtc.owner = 0 : i64}, tensor<f32> {mtc.role = "loss"}, tensor<4x8xf32> {mtc.role = "grad", mtc.owner = 0 : i64}) {
  %y = mtc.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l, %p = mtc.softmax_cross_entropy %y, %t : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x8xf32>)
  %one = mtc.constant dense<1.0> : tensor<f32>
  %g = mtc.softmax_cross_entropy_grad %one, %p, %t : (tensor<f32>, tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  %z = mtc.mul %x, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l2, %p2 = mtc.softmax_cross_entropy %z, %t : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x8xf32>)
  %r = mtc.relu %z : tensor<4x8xf32>
  %s = mtc.add %r, %p2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s, %l2, %g : tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>
}

// -----

// A layer norm run as the row epilogue of the fused op before it is one
// kernel with it: the inputs %a and %b that die at the fused op stay live
// through the layer norm, whose output (the size of each) takes neither's
// bytes. The same step without the mark (next case) reuses them: %b takes
// the bytes of the input %x, dead once %a's exponential has read it, and
// the layer norm's output %b's.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[A:[0-9]+]]>
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[B:[0-9]+]]>
// CHECK: mtc.fused
// CHECK: mtc.layer_norm
// CHECK-NOT: array<i64: [[A]],
// CHECK-NOT: array<i64: [[B]],
// CHECK-SAME: mtc.row_epilogue
func.func @train_step(%x: tensor<4x16xf32> {mtc.name = "x", mtc.role = "input"}, %g: tensor<16xf32> {mtc.name = "g", mtc.role = "param"})
    -> (tensor<4x16xf32> {mtc.role = "loss"}, tensor<4x16xf32> {mtc.role = "loss"}) {
  %a = mtc.exp %x : tensor<4x16xf32>
  %b = mtc.exp %a : tensor<4x16xf32>
  %s = mtc.fused %a, %b : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32> {
  ^bb0(%p: tensor<4x16xf32>, %q: tensor<4x16xf32>):
    %t = mtc.add %p, %q : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    mtc.yield %t : tensor<4x16xf32>
  }
  %y, %m, %r = mtc.layer_norm %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f32, mtc.row_epilogue} : (tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %s, %y : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @train_step
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[A:[0-9]+]]>
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[B:[0-9]+]]>
// CHECK: mtc.layer_norm {{.*}}mtc.offsets = array<i64: [[B]],
func.func @train_step(%x: tensor<4x16xf32> {mtc.name = "x", mtc.role = "input"}, %g: tensor<16xf32> {mtc.name = "g", mtc.role = "param"})
    -> (tensor<4x16xf32> {mtc.role = "loss"}, tensor<4x16xf32> {mtc.role = "loss"}) {
  %a = mtc.exp %x : tensor<4x16xf32>
  %b = mtc.exp %a : tensor<4x16xf32>
  %s = mtc.fused %a, %b : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32> {
  ^bb0(%p: tensor<4x16xf32>, %q: tensor<4x16xf32>):
    %t = mtc.add %p, %q : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    mtc.yield %t : tensor<4x16xf32>
  }
  %y, %m, %r = mtc.layer_norm %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f32} : (tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  return %s, %y : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// A layer norm backward's input gradient writes over the gradient it
// accumulates onto (%r) when that dies there; %keep, read after it, keeps
// its own bytes.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[R:[0-9]+]]>
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[K:[0-9]+]]>
// CHECK: mtc.layer_norm_grad {{.*}} accumulate {{.*}}mtc.offsets = array<i64: [[R]],
// CHECK: mtc.layer_norm_grad {{.*}} accumulate
// CHECK-NOT: array<i64: [[K]],
// CHECK-SAME: :
func.func @train_step(%dy: tensor<4x16xf32> {mtc.name = "dy", mtc.role = "input"}, %x: tensor<4x16xf32> {mtc.name = "x", mtc.role = "input"}, %g: tensor<16xf32> {mtc.name = "g", mtc.role = "param"}, %m: tensor<4x1xf32> {mtc.name = "m", mtc.role = "input"})
    -> (tensor<4x16xf32> {mtc.role = "loss"}, tensor<4x16xf32> {mtc.role = "loss"}, tensor<4x16xf32> {mtc.role = "loss"}) {
  %r = mtc.exp %dy : tensor<4x16xf32>
  %keep = mtc.exp %x : tensor<4x16xf32>
  %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %m accumulate %r {axis = 1 : i64} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %dx2, %dg2, %db2 = mtc.layer_norm_grad %dy, %x, %g, %m, %m accumulate %keep {axis = 1 : i64} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return %dx, %dx2, %keep : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// A gather backward accumulating onto a gradient that dies there writes over
// it, with scratch for the first position naming each of the 10 rows, each
// position's (6) and a row of 4 sums per position, each part 256-byte
// aligned: 3 x 256 bytes.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.exp {{.*}}mtc.offsets = array<i64: [[W:[0-9]+]]>
// CHECK: mtc.gather_grad {{.*}} accumulate {{.*}}mtc.offsets = array<i64: [[W]]>, mtc.workspace = array<i64: {{[0-9]+}}, 768>
func.func @train_step(%dy: tensor<2x3x4xf32> {mtc.name = "dy", mtc.role = "input"}, %ids: tensor<2x3xi64> {mtc.name = "ids", mtc.role = "input"}, %x: tensor<10x4xf32> {mtc.name = "x", mtc.role = "input"})
    -> (tensor<10x4xf32> {mtc.role = "loss"}) {
  %w = mtc.exp %x : tensor<10x4xf32>
  %t = mtc.gather_grad %dy, %ids accumulate %w {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>, tensor<10x4xf32>) -> tensor<10x4xf32>
  return %t : tensor<10x4xf32>
}

// -----

// A backward-pass conversion to 16 bits whose float32 input dies at it, read
// only by GEMMs that multiply 16-bit operands as stored, writes over the
// input (the code generator converts in phases). Its own bytes otherwise:
// when a GEMM widens it (into a scratch as large) or when it is a forward
// value.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[A:.+]] = mtc.exp %{{.+}} {mtc.backward, mtc.offsets = array<i64: [[AT:[0-9]+]]>}
// CHECK-NEXT: mtc.convert %[[A]] {mtc.backward, mtc.offsets = array<i64: [[AT]]>} : tensor<8x8xf32> to tensor<8x8xbf16>
// CHECK: %[[B:.+]] = mtc.exp %{{.+}} {mtc.backward, mtc.offsets = array<i64: [[BT:[0-9]+]]>}
// CHECK-NEXT: mtc.convert %[[B]] {mtc.backward, mtc.offsets = array<i64: [[B16:[0-9]+]]>}
// CHECK-NOT: array<i64: [[BT]]>} : tensor<8x8xf32> to
// CHECK: %[[C:.+]] = mtc.exp %{{.+}} {mtc.offsets = array<i64: [[CT:[0-9]+]]>}
// CHECK-NEXT: mtc.convert %[[C]] {mtc.offsets = array<i64: [[C16:[0-9]+]]>}
// CHECK-NOT: array<i64: [[CT]]>} : tensor<8x8xf32> to
func.func @train_step(%x: tensor<8x8xf32> {mtc.name = "x", mtc.role = "input"}, %w: tensor<8x8xbf16> {mtc.name = "w", mtc.role = "input"})
    -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %a = mtc.exp %x {mtc.backward} : tensor<8x8xf32>
  %a16 = mtc.convert %a {mtc.backward} : tensor<8x8xf32> to tensor<8x8xbf16>
  %ga = mtc.matmul %a16, %w {mtc.backward, mtc.native_16bit_gemm} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xf32>
  %b = mtc.exp %x {mtc.backward} : tensor<8x8xf32>
  %b16 = mtc.convert %b {mtc.backward} : tensor<8x8xf32> to tensor<8x8xbf16>
  %gb = mtc.matmul %b16, %w {mtc.backward} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xf32>
  %c = mtc.exp %x : tensor<8x8xf32>
  %c16 = mtc.convert %c : tensor<8x8xf32> to tensor<8x8xbf16>
  %gc = mtc.matmul %c16, %w {mtc.native_16bit_gemm} : (tensor<8x8xbf16>, tensor<8x8xbf16>) -> tensor<8x8xf32>
  return %ga, %gb, %gc : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Compiled-in buffers (a causal mask the attention now takes as a flag): one
// that neither function reads gets no offset and no bytes; one the
// evaluation function still reads, and one the step reads, keep theirs.
// The arena holds the parameter, the two read buffers, the product and the
// loss: five slots of 64 bytes, not six.
// CHECK: %{{.+}}: tensor<16xf32> {mtc.compiled_in, mtc.name = "unread", mtc.not_in_arena, mtc.role = "buffer"}
// CHECK-SAME: %{{.+}}: tensor<16xf32> {mtc.compiled_in, mtc.name = "eval_reads", mtc.offset = {{[0-9]+}} : i64, mtc.role = "buffer"}
// CHECK-SAME: %{{.+}}: tensor<16xf32> {mtc.compiled_in, mtc.name = "step_reads", mtc.offset = {{[0-9]+}} : i64, mtc.role = "buffer"}
// CHECK-SAME: mtc.arena_size = 320 : i64
// CHECK: func.func @eval_step
// CHECK-SAME: %{{.+}}: tensor<16xf32> {mtc.name = "unread", mtc.role = "param"}
// CHECK-SAME: %{{.+}}: tensor<16xf32> {mtc.name = "eval_reads", mtc.offset = {{[0-9]+}} : i64, mtc.role = "param"}
func.func @train_step(%p: tensor<16xf32> {mtc.name = "p", mtc.role = "param"},
    %a: tensor<16xf32> {mtc.compiled_in, mtc.name = "unread", mtc.role = "buffer"},
    %b: tensor<16xf32> {mtc.compiled_in, mtc.name = "eval_reads", mtc.role = "buffer"},
    %c: tensor<16xf32> {mtc.compiled_in, mtc.name = "step_reads", mtc.role = "buffer"})
    -> (tensor<f32> {mtc.role = "loss"}) {
  %0 = mtc.mul %p, %c : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %1 = mtc.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : (tensor<16xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
func.func @eval_step(%p: tensor<16xf32> {mtc.name = "p", mtc.role = "param"},
    %a: tensor<16xf32> {mtc.name = "unread", mtc.role = "param"},
    %b: tensor<16xf32> {mtc.name = "eval_reads", mtc.role = "param"},
    %c: tensor<16xf32> {mtc.name = "step_reads", mtc.role = "param"})
    -> (tensor<f32> {mtc.role = "eval_loss"}) {
  %0 = mtc.mul %p, %b : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %1 = mtc.reduce_sum %0 {axes = array<i64: 0>, keepdims = false} : (tensor<16xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
