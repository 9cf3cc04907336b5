// RUN: mtc-opt %s --split-input-file --mtc-trim-conv-taps | FileCheck %s

// A 3x3 convolution with padding 1 on a 1x1 map reads padding with all but
// its center tap: a 1x1 convolution on the center of the weight, no padding.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x1x1xf32>, %[[W:[^:]+]]: tensor<8x4x3x3xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[C:.+]] = mtc.slice %[[W]] {starts = array<i64: 0, 0, 1, 1>, steps = array<i64: 1, 1, 1, 1>} : (tensor<8x4x3x3xf32>) -> tensor<8x4x1x1xf32>
// CHECK-NEXT: %[[Y:.+]] = mtc.conv %[[X]], %[[C]], %[[B]] {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<2x4x1x1xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<2x8x1x1xf32>
// CHECK-NEXT: return %[[Y]]
func.func @forward(%x: tensor<2x4x1x1xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<2x8x1x1xf32> {
  %y = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x1x1xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<2x8x1x1xf32>
  return %y : tensor<2x8x1x1xf32>
}

// -----

// A 1x3 map: only the rows are trimmed; a grouped (depthwise) weight too.
// A 2x2 map with stride 2 (one output reading rows -1..1): the top taps
// read padding (the padding after the map stays, though no tap reads it).
// CHECK-LABEL: func.func @forward
// CHECK: mtc.slice %{{.+}} {starts = array<i64: 0, 0, 1, 0>, steps = array<i64: 1, 1, 1, 1>} : (tensor<4x1x3x3xf32>) -> tensor<4x1x1x3xf32>
// CHECK: mtc.conv {{.+}}group = 4 : i64, pads = array<i64: 0, 1, 0, 1>{{.+}} : (tensor<2x4x1x3xf32>, tensor<4x1x1x3xf32>) -> tensor<2x4x1x3xf32>
// CHECK: mtc.slice %{{.+}} {starts = array<i64: 0, 0, 1, 1>, steps = array<i64: 1, 1, 1, 1>} : (tensor<8x4x3x3xf32>) -> tensor<8x4x2x2xf32>
// CHECK: mtc.conv {{.+}}pads = array<i64: 0, 0, 1, 1>, strides = array<i64: 2, 2>{{.+}} -> tensor<2x8x1x1xf32>
func.func @forward(%x: tensor<2x4x1x3xf32>, %w: tensor<4x1x3x3xf32>, %x2: tensor<2x4x2x2xf32>, %w2: tensor<8x4x3x3xf32>) -> (tensor<2x4x1x3xf32>, tensor<2x8x1x1xf32>) {
  %y = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 4 : i64} : (tensor<2x4x1x3xf32>, tensor<4x1x3x3xf32>) -> tensor<2x4x1x3xf32>
  %y2 = mtc.conv %x2, %w2 {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x2x2xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x1x1xf32>
  return %y, %y2 : tensor<2x4x1x3xf32>, tensor<2x8x1x1xf32>
}

// -----

// Every tap reads the input somewhere (a 2x2 map, stride 1, padding 1):
// unchanged.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: mtc.slice
// CHECK: mtc.conv {{.+}}pads = array<i64: 1, 1, 1, 1>
func.func @forward(%x: tensor<2x4x2x2xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<2x8x2x2xf32> {
  %y = mtc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64} : (tensor<2x4x2x2xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x2x2xf32>
  return %y : tensor<2x8x2x2xf32>
}
