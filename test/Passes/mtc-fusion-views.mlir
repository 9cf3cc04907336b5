// RUN: mtc-opt %s --split-input-file --mtc-fuse-elementwise | FileCheck %s

// Zero pads placing three [2, 4] blocks side by side along axis 1, summed
// in any order: one concat of the blocks in their places' order.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[A:.+]]: tensor<2x4xf32>{{.*}}, %[[B:.+]]: tensor<2x4xf32>{{.*}}, %[[C:.+]]: tensor<2x4xf32>
// CHECK-NEXT: %[[R:.+]] = mtc.concat %[[B]], %[[C]], %[[A]] {axis = 1 : i64, mtc.backward} : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x12xf32>
// CHECK-NEXT: return %[[R]]
func.func @train_step(%a: tensor<2x4xf32> {mtc.role = "input"}, %b: tensor<2x4xf32> {mtc.role = "input"}, %c: tensor<2x4xf32> {mtc.role = "input"}) -> tensor<2x12xf32> {
  %pa = mtc.pad %a {mtc.backward, pads = array<i64: 0, 8, 0, 0>} : (tensor<2x4xf32>) -> tensor<2x12xf32>
  %pb = mtc.pad %b {mtc.backward, pads = array<i64: 0, 0, 0, 8>} : (tensor<2x4xf32>) -> tensor<2x12xf32>
  %s = mtc.add %pa, %pb {mtc.backward} : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  %pc = mtc.pad %c {mtc.backward, pads = array<i64: 0, 4, 0, 4>} : (tensor<2x4xf32>) -> tensor<2x12xf32>
  %r = mtc.add %pc, %s {mtc.backward} : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  return %r : tensor<2x12xf32>
}

// -----

// No concat when the blocks leave a gap, when they overlap, or when a
// partial sum has another reader.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: mtc.concat
// CHECK-COUNT-6: mtc.pad
// CHECK-NOT: mtc.concat
func.func @train_step(%a: tensor<2x4xf32> {mtc.role = "input"}, %b: tensor<2x4xf32> {mtc.role = "input"}) -> (tensor<2x9xf32>, tensor<2x6xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %ga = mtc.pad %a {pads = array<i64: 0, 0, 0, 5>} : (tensor<2x4xf32>) -> tensor<2x9xf32>
  %gb = mtc.pad %b {pads = array<i64: 0, 5, 0, 0>} : (tensor<2x4xf32>) -> tensor<2x9xf32>
  %gap = mtc.add %ga, %gb : (tensor<2x9xf32>, tensor<2x9xf32>) -> tensor<2x9xf32>
  %oa = mtc.pad %a {pads = array<i64: 0, 0, 0, 2>} : (tensor<2x4xf32>) -> tensor<2x6xf32>
  %ob = mtc.pad %b {pads = array<i64: 0, 2, 0, 0>} : (tensor<2x4xf32>) -> tensor<2x6xf32>
  %overlap = mtc.add %oa, %ob : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %ra = mtc.pad %a {pads = array<i64: 0, 0, 0, 4>} : (tensor<2x4xf32>) -> tensor<2x8xf32>
  %rb = mtc.pad %b {pads = array<i64: 0, 4, 0, 0>} : (tensor<2x4xf32>) -> tensor<2x8xf32>
  %read = mtc.add %ra, %rb : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %gap, %overlap, %ra, %read : tensor<2x9xf32>, tensor<2x6xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Heads out of one projection: the slice is a strided view (its reader,
// through a reshape, is a transpose); a slice an elementwise op reads, a
// slice of an argument and a slice of a result tied to an argument (an
// update written into the argument's buffer) are copies.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[P:.+]] = mtc.tanh
// CHECK: %[[U:.+]] = mtc.sgd_update
// CHECK-NEXT: mtc.slice %[[P]] {mtc.strided_view, starts = array<i64: 0, 0, 4>
// CHECK-NEXT: mtc.slice %[[P]] {starts = array<i64: 0, 0, 0>
// CHECK-NEXT: mtc.slice %arg0 {starts
// CHECK-NEXT: mtc.slice %[[U]] {starts = array<i64: 0, 0, 8>
// CHECK-NOT: strided_view
func.func @train_step(%x: tensor<2x3x12xf32> {mtc.role = "input"}, %w: tensor<2x3x12xf32> {mtc.role = "param"}) -> (tensor<2x2x3x2xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x12xf32> {mtc.tied = 1 : i64}) {
  %p = mtc.tanh %x : tensor<2x3x12xf32>
  %u = mtc.sgd_update %w, %p {lr = 1.0e-01 : f64} : tensor<2x3x12xf32>
  %k = mtc.slice %p {starts = array<i64: 0, 0, 4>, steps = array<i64: 1, 1, 1>} : (tensor<2x3x12xf32>) -> tensor<2x3x4xf32>
  %q = mtc.slice %p {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x3x12xf32>) -> tensor<2x3x4xf32>
  %a = mtc.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : (tensor<2x3x12xf32>) -> tensor<2x3x4xf32>
  %v = mtc.slice %u {starts = array<i64: 0, 0, 8>, steps = array<i64: 1, 1, 1>} : (tensor<2x3x12xf32>) -> tensor<2x3x4xf32>
  %k4 = mtc.reshape %k : (tensor<2x3x4xf32>) -> tensor<2x3x2x2xf32>
  %kt = mtc.transpose %k4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x2x2xf32>) -> tensor<2x2x3x2xf32>
  %e = mtc.exp %q : tensor<2x3x4xf32>
  %ea = mtc.transpose %a {perm = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %ev = mtc.transpose %v {perm = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %kt, %e, %ea, %ev, %u : tensor<2x2x3x2xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x12xf32>
}

// -----

// A transpose is a view only where its readers can follow its strides:
// not when a slice cuts the dim a reshape merged it into between rows
// (from element 1 of [6, 4] transposed and flattened); a slice cutting
// whole rows (from element 4) can.
// CHECK-LABEL: func.func @train_step
// CHECK: mtc.transpose %{{.+}} {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
// CHECK: mtc.transpose %{{.+}} {mtc.strided_view, perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
func.func @train_step(%x: tensor<4x6xf32> {mtc.role = "input"}) -> (tensor<5xf32>, tensor<8xf32>) {
  %p = mtc.tanh %x : tensor<4x6xf32>
  %t = mtc.transpose %p {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r = mtc.reshape %t : (tensor<6x4xf32>) -> tensor<24xf32>
  %s = mtc.slice %r {starts = array<i64: 1>, steps = array<i64: 1>} : (tensor<24xf32>) -> tensor<5xf32>
  %t2 = mtc.transpose %p {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r2 = mtc.reshape %t2 : (tensor<6x4xf32>) -> tensor<24xf32>
  %s2 = mtc.slice %r2 {starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<24xf32>) -> tensor<8xf32>
  %e = mtc.exp %s : tensor<5xf32>
  %e2 = mtc.exp %s2 : tensor<8xf32>
  return %e, %e2 : tensor<5xf32>, tensor<8xf32>
}
