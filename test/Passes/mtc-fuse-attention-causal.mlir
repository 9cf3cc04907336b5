// RUN: mtc-opt %s --split-input-file --mtc-fuse-attention | FileCheck %s

// GPT's causal-mask buffer as PyTorch exports it: a float tril initializer
// larger than the sequence, sliced to it and compared with 0. Its values are
// known and nothing else reads it, so the attention becomes causal, takes no
// mask, and the buffer is marked as compiled in; the slice and the
// comparison are gone.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %{{.+}}: tensor<1x6x6xf32> {mtc.compiled_in, mtc.init
// CHECK-NOT: mtc.compare
// CHECK-NOT: mtc.slice
// CHECK: mtc.attention %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}} {causal, scale = 5.000000e-01 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) ->
// CHECK-NOT: mtc.compare
func.func @forward(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>,
    %bias: tensor<1x6x6xf32> {mtc.init = dense<[[[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]]> : tensor<1x6x6xf32>, mtc.name = "attn.bias", mtc.role = "param"}) -> tensor<2x4x8xf32> {
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %c = mtc.constant dense<0.5> : tensor<f32>
  %scaled = mtc.mul %s, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
  %window = mtc.slice %bias {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<1x6x6xf32>) -> tensor<1x4x4xf32>
  %zero = mtc.constant dense<0.0> : tensor<f32>
  %mask = mtc.compare %window, %zero {predicate = "eq"} : (tensor<1x4x4xf32>, tensor<f32>) -> tensor<1x4x4xi1>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %masked = mtc.select %mask, %ninf, %scaled : (tensor<1x4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p = mtc.softmax %masked {axis = 2 : i64} : tensor<2x4x4xf32>
  %o = mtc.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// A constant boolean mask of the keys each query keeps (select(keep, s,
// -inf)), 5 queries against 3 keys: the queries past the last key see every
// key, which is still the causal pattern (key j after query i is hidden).
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.not
// CHECK: mtc.attention %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}} {causal, scale = 1.000000e+00 : f32} : (tensor<5x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) ->
func.func @forward(%q: tensor<5x8xf32>, %k: tensor<3x8xf32>, %v: tensor<3x8xf32>) -> tensor<5x8xf32> {
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<5x8xf32>, tensor<3x8xf32>) -> tensor<5x3xf32>
  %keep = mtc.constant dense<[[true, false, false], [true, true, false], [true, true, true], [true, true, true], [true, true, true]]> : tensor<5x3xi1>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %masked = mtc.select %keep, %s, %ninf : (tensor<5x3xi1>, tensor<5x3xf32>, tensor<f32>) -> tensor<5x3xf32>
  %p = mtc.softmax %masked {axis = 1 : i64} : tensor<5x3xf32>
  %o = mtc.matmul %p, %v : (tensor<5x3xf32>, tensor<3x8xf32>) -> tensor<5x8xf32>
  return %o : tensor<5x8xf32>
}

// -----

// Masks that stay masks: a tril shifted by one key (query i sees j <= i + 1);
// per-head masks where one head differs; a causal buffer that the step
// overwrites (a result is tied to it); one that also feeds arithmetic (a
// gradient could reach it); a mask computed from an input. No buffer is
// marked as compiled in.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.compiled_in
// CHECK-NOT: causal
// CHECK-COUNT-5: mtc.attention %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^ ]+}} {scale
// CHECK-NOT: causal
func.func @forward(%q: tensor<2x3x4xf32>, %k: tensor<2x3x4xf32>, %v: tensor<2x3x4xf32>,
    %updated: tensor<3x3xf32> {mtc.init = dense<[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]> : tensor<3x3xf32>, mtc.name = "updated", mtc.role = "param"},
    %shared: tensor<3x3xf32> {mtc.init = dense<[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]> : tensor<3x3xf32>, mtc.name = "shared", mtc.role = "param"},
    %input: tensor<3x3xf32>)
    -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3x3xf32> {mtc.role = "update", mtc.tied = 3 : i64}, tensor<3x3xf32>) {
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %zero = mtc.constant dense<0.0> : tensor<f32>
  %shifted = mtc.constant dense<[[false, false, true], [false, false, false], [false, false, false]]> : tensor<3x3xi1>
  %s0 = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  %m0 = mtc.select %shifted, %ninf, %s0 : (tensor<3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p0 = mtc.softmax %m0 {axis = 2 : i64} : tensor<2x3x3xf32>
  %o0 = mtc.matmul %p0, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %heads = mtc.constant dense<[[[false, true, true], [false, false, true], [false, false, false]], [[false, true, true], [false, false, false], [false, false, false]]]> : tensor<2x3x3xi1>
  %s1 = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  %m1 = mtc.select %heads, %ninf, %s1 : (tensor<2x3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p1 = mtc.softmax %m1 {axis = 2 : i64} : tensor<2x3x3xf32>
  %o1 = mtc.matmul %p1, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %c2 = mtc.compare %updated, %zero {predicate = "eq"} : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xi1>
  %s2 = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  %m2 = mtc.select %c2, %ninf, %s2 : (tensor<3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p2 = mtc.softmax %m2 {axis = 2 : i64} : tensor<2x3x3xf32>
  %o2 = mtc.matmul %p2, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %next = mtc.add %updated, %updated : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %c3 = mtc.compare %shared, %zero {predicate = "eq"} : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xi1>
  %s3 = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  %m3 = mtc.select %c3, %ninf, %s3 : (tensor<3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p3 = mtc.softmax %m3 {axis = 2 : i64} : tensor<2x3x3xf32>
  %o3 = mtc.matmul %p3, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %scaled = mtc.mul %shared, %shared : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %c4 = mtc.compare %input, %zero {predicate = "eq"} : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xi1>
  %s4 = mtc.matmul %q, %k {transpose_b = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x3xf32>
  %m4 = mtc.select %c4, %ninf, %s4 : (tensor<3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p4 = mtc.softmax %m4 {axis = 2 : i64} : tensor<2x3x3xf32>
  %o4 = mtc.matmul %p4, %v : (tensor<2x3x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %o0, %o1, %o2, %o3, %o4, %next, %scaled : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<3x3xf32>, tensor<3x3xf32>
}

// -----

// The evaluation function's arguments carry no initial values (the driver
// moves them to the training step): its buffer is read through the
// training function's argument of the same name, and both attentions
// become causal. Only the training function's argument is marked.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: {mtc.compiled_in, mtc.init
// CHECK: mtc.attention %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}} {causal
// CHECK-LABEL: func.func @eval_step
// CHECK-NOT: mtc.compiled_in
// CHECK: mtc.attention %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}} {causal
func.func @forward(%q: tensor<3x4xf32>, %k: tensor<3x4xf32>, %v: tensor<3x4xf32>,
    %bias: tensor<3x3xf32> {mtc.init = dense<[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]> : tensor<3x3xf32>, mtc.name = "attn.bias", mtc.role = "param"}) -> tensor<3x4xf32> {
  %zero = mtc.constant dense<0.0> : tensor<f32>
  %mask = mtc.compare %bias, %zero {predicate = "eq"} : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xi1>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
  %m = mtc.select %mask, %ninf, %s : (tensor<3x3xi1>, tensor<f32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %p = mtc.softmax %m {axis = 1 : i64} : tensor<3x3xf32>
  %o = mtc.matmul %p, %v : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %o : tensor<3x4xf32>
}
func.func @eval_step(%q: tensor<3x4xf32>, %k: tensor<3x4xf32>, %v: tensor<3x4xf32>,
    %bias: tensor<3x3xf32> {mtc.name = "attn.bias", mtc.role = "param"}) -> tensor<3x4xf32> {
  %zero = mtc.constant dense<0.0> : tensor<f32>
  %mask = mtc.compare %bias, %zero {predicate = "eq"} : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xi1>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
  %m = mtc.select %mask, %ninf, %s : (tensor<3x3xi1>, tensor<f32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %p = mtc.softmax %m {axis = 1 : i64} : tensor<3x3xf32>
  %o = mtc.matmul %p, %v : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %o : tensor<3x4xf32>
}

// -----

// Hugging Face's GPT-2: where(tril keep-mask, s / 2, the lowest float). The
// mask is causal, so every query keeps its own key and the finite fill
// hides the rest as -inf would: a causal attention.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.select
// CHECK: mtc.attention %{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}} {causal, scale = 5.000000e-01 : f32} : (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) ->
// CHECK-NOT: mtc.softmax
func.func @forward(%q: tensor<3x4xf32>, %k: tensor<3x4xf32>, %v: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %keep = mtc.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %lowest = mtc.constant dense<0xFF7FFFFF> : tensor<f32>
  %two = mtc.constant dense<2.0> : tensor<f32>
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
  %d = mtc.div %s, %two : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  %m = mtc.select %keep, %d, %lowest : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  %p = mtc.softmax %m {axis = 1 : i64} : tensor<3x3xf32>
  %o = mtc.matmul %p, %v : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %o : tensor<3x4xf32>
}

// -----

// A finite fill stays a select where a query may keep no key (a mask that is
// not causal: its first query's row is all hidden, which the lowest float
// turns into a uniform row and -inf would not), and -1e4 is no fill at all.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.attention
// CHECK-COUNT-2: mtc.softmax
// CHECK-NOT: mtc.attention
func.func @forward(%q: tensor<3x4xf32>, %k: tensor<3x4xf32>, %v: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
  %keep = mtc.constant dense<[[false, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %causal = mtc.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %lowest = mtc.constant dense<0xFF7FFFFF> : tensor<f32>
  %small = mtc.constant dense<-1.0e4> : tensor<f32>
  %s0 = mtc.matmul %q, %k {transpose_b = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
  %m0 = mtc.select %keep, %s0, %lowest : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  %p0 = mtc.softmax %m0 {axis = 1 : i64} : tensor<3x3xf32>
  %o0 = mtc.matmul %p0, %v : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %s1 = mtc.matmul %q, %k {transpose_b = true} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x3xf32>
  %m1 = mtc.select %causal, %s1, %small : (tensor<3x3xi1>, tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xf32>
  %p1 = mtc.softmax %m1 {axis = 1 : i64} : tensor<3x3xf32>
  %o1 = mtc.matmul %p1, %v : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %o0, %o1 : tensor<3x4xf32>, tensor<3x4xf32>
}
