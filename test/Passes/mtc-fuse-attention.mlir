// RUN: mtc-opt %s --split-input-file --mtc-fuse-attention | FileCheck %s

// GPT's causal attention as PyTorch exports it: K^T a transpose of the
// [B, S, H, D] keys (the two transposes compose into one), the scores scaled
// by a constant, masked with select(mask, -inf, s), dropout on the
// probabilities. One mtc.attention replaces the chain; the -inf and scale
// constants go with it.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[Q:.+]]: tensor<2x4x8x16xf32>, %[[K:.+]]: tensor<2x8x4x16xf32>, %[[V:.+]]: tensor<2x4x8x16xf32>, %[[M:.+]]: tensor<1x1x8x8xi1>)
// CHECK-NEXT: %[[KT:.+]] = mtc.transpose %[[K]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: %[[O:.+]], %{{.+}} = mtc.attention %[[Q]], %[[KT]], %[[V]], %[[M]] {dropout_ratio = 1.000000e-01 : f32, dropout_stream = 3 : i64, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<1x1x8x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT: return %[[O]]
// CHECK-NOT: mtc.softmax
func.func @forward(%q: tensor<2x4x8x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x4x8x16xf32>, %mask: tensor<1x1x8x8xi1>) -> tensor<2x4x8x16xf32> {
  %kt = mtc.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x16x8xf32>
  %s = mtc.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = mtc.constant dense<0.25> : tensor<f32>
  %scaled = mtc.mul %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %masked = mtc.select %mask, %ninf, %scaled : (tensor<1x1x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = mtc.softmax %masked {axis = 3 : i64} : tensor<2x4x8x8xf32>
  %d = mtc.dropout %p {ratio = 1.000000e-01 : f32, stream = 3 : i64} : tensor<2x4x8x8xf32>
  %o = mtc.matmul %d, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// nn.MultiheadAttention's export: Q divided by sqrt(D) before the product
// (folded into the scale, 1 / 2), K^T a [S, H, D] -> [H, D, S] transpose of
// K, which composes to [H, S, D]; no mask, no dropout (evaluation).
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[Q:.+]]: tensor<8x17x4xf32>, %[[K:.+]]: tensor<17x8x4xf32>, %[[V:.+]]: tensor<8x17x4xf32>)
// CHECK-NEXT: %[[KT:.+]] = mtc.transpose %[[K]] {perm = array<i64: 1, 0, 2>}
// CHECK-NEXT: %[[O:.+]], %{{.+}} = mtc.attention %[[Q]], %[[KT]], %[[V]] {scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @forward(%q: tensor<8x17x4xf32>, %k: tensor<17x8x4xf32>, %v: tensor<8x17x4xf32>) -> tensor<8x17x4xf32> {
  %c = mtc.constant dense<2.0> : tensor<f32>
  %qs = mtc.div %q, %c : (tensor<8x17x4xf32>, tensor<f32>) -> tensor<8x17x4xf32>
  %kt = mtc.transpose %k {perm = array<i64: 1, 2, 0>} : (tensor<17x8x4xf32>) -> tensor<8x4x17xf32>
  %s = mtc.matmul %qs, %kt : (tensor<8x17x4xf32>, tensor<8x4x17xf32>) -> tensor<8x17x17xf32>
  %p = mtc.softmax %s {axis = 2 : i64} : tensor<8x17x17xf32>
  %o = mtc.matmul %p, %v : (tensor<8x17x17xf32>, tensor<8x17x4xf32>) -> tensor<8x17x4xf32>
  return %o : tensor<8x17x4xf32>
}

// -----

// A transpose_b product reads K as it is; a select keeping the scores where
// the mask is true masks its negation; a scale of 1 when there is none. The
// keys' transpose has another reader, so it stays.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[Q:.+]]: tensor<3x5x8xf32>, %[[K:.+]]: tensor<3x6x8xf32>, %[[V:.+]]: tensor<3x6x2xf32>, %[[KEEP:.+]]: tensor<3x1x6xi1>)
// CHECK: %[[M:.+]] = mtc.not %[[KEEP]]
// CHECK-NEXT: %[[O:.+]], %{{.+}} = mtc.attention %[[Q]], %[[K]], %[[V]], %[[M]] {scale = 1.000000e+00 : f32}
func.func @forward(%q: tensor<3x5x8xf32>, %k: tensor<3x6x8xf32>, %v: tensor<3x6x2xf32>, %keep: tensor<3x1x6xi1>) -> (tensor<3x5x2xf32>, tensor<3x8x6xf32>) {
  %kt = mtc.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<3x6x8xf32>) -> tensor<3x8x6xf32>
  %s = mtc.matmul %q, %k {transpose_b = true} : (tensor<3x5x8xf32>, tensor<3x6x8xf32>) -> tensor<3x5x6xf32>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %masked = mtc.select %keep, %s, %ninf : (tensor<3x1x6xi1>, tensor<3x5x6xf32>, tensor<f32>) -> tensor<3x5x6xf32>
  %p = mtc.softmax %masked {axis = 2 : i64} : tensor<3x5x6xf32>
  %o = mtc.matmul %p, %v : (tensor<3x5x6xf32>, tensor<3x6x2xf32>) -> tensor<3x5x2xf32>
  return %o, %kt : tensor<3x5x2xf32>, tensor<3x8x6xf32>
}

// -----

// Not fused: the probabilities are also returned (a model exporting its
// attention weights needs them stored); a softmax over another axis; a
// scale that is not a constant; a select whose other value is not -inf.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.attention
// CHECK: return
func.func @forward(%q: tensor<2x4x8xf32>, %k: tensor<2x8x4xf32>, %v: tensor<2x4x8xf32>, %t: tensor<f32>, %mask: tensor<4x4xi1>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %s0 = mtc.matmul %q, %k : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %p0 = mtc.softmax %s0 {axis = 2 : i64} : tensor<2x4x4xf32>
  %o0 = mtc.matmul %p0, %q : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s1 = mtc.matmul %q, %k : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %p1 = mtc.softmax %s1 {axis = 1 : i64} : tensor<2x4x4xf32>
  %o1 = mtc.matmul %p1, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s2 = mtc.matmul %q, %k : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %scaled = mtc.mul %s2, %t : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
  %p2 = mtc.softmax %scaled {axis = 2 : i64} : tensor<2x4x4xf32>
  %o2 = mtc.matmul %p2, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s3 = mtc.matmul %q, %k : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %zero = mtc.constant dense<0.0> : tensor<f32>
  %masked = mtc.select %mask, %zero, %s3 : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p3 = mtc.softmax %masked {axis = 2 : i64} : tensor<2x4x4xf32>
  %o3 = mtc.matmul %p3, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %o0, %p0, %o1, %o2, %o3 : tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// Not fused: a head dim above what the kernels take (256).
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.attention
// CHECK: mtc.softmax
func.func @forward(%q: tensor<4x320xf32>, %k: tensor<320x4xf32>, %v: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = mtc.matmul %q, %k : (tensor<4x320xf32>, tensor<320x4xf32>) -> tensor<4x4xf32>
  %p = mtc.softmax %s {axis = 1 : i64} : tensor<4x4xf32>
  %o = mtc.matmul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

// -----

// Heads split out of [B, S, H, D] query, key and value by transposes and
// merged back by one: the attention takes the [B, S, H, D] values as they
// are (seq_major) and its output replaces the merged one; no transpose is
// left. The log-sum-exp stays [B, H, S] and the mask [.., H, Sq, Sk].
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[Q:.+]]: tensor<2x8x4x16xf32>, %[[K:.+]]: tensor<2x8x4x16xf32>, %[[V:.+]]: tensor<2x8x4x16xf32>, %[[M:.+]]: tensor<1x1x8x8xi1>)
// CHECK-NEXT: %[[O:.+]], %{{.+}} = mtc.attention %[[Q]], %[[K]], %[[V]], %[[M]] {scale = 2.500000e-01 : f32, seq_major} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<1x1x8x8xi1>) -> (tensor<2x8x4x16xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT: return %[[O]]
func.func @forward(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>, %mask: tensor<1x1x8x8xi1>) -> tensor<2x8x4x16xf32> {
  %qt = mtc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %kt = mtc.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x16x8xf32>
  %vt = mtc.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %s = mtc.matmul %qt, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = mtc.constant dense<0.25> : tensor<f32>
  %scaled = mtc.mul %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %ninf = mtc.constant dense<0xFF800000> : tensor<f32>
  %masked = mtc.select %mask, %ninf, %scaled : (tensor<1x1x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = mtc.softmax %masked {axis = 3 : i64} : tensor<2x4x8x8xf32>
  %o = mtc.matmul %p, %vt : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %ot = mtc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  return %ot : tensor<2x8x4x16xf32>
}

// -----

// The same with the output read as [B, H, S, D] (no merging transpose): the
// attention keeps the [B, H, S, D] layout and the head transposes stay.
// CHECK-LABEL: func.func @forward
// CHECK: mtc.transpose
// CHECK: mtc.attention
// CHECK-NOT: seq_major
// CHECK: return
func.func @forward(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32> {
  %qt = mtc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %kt = mtc.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x16x8xf32>
  %vt = mtc.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %s = mtc.matmul %qt, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %p = mtc.softmax %s {axis = 3 : i64} : tensor<2x4x8x8xf32>
  %o = mtc.matmul %p, %vt : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}
