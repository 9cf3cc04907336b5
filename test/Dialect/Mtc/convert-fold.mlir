// RUN: mtc-opt %s --canonicalize | FileCheck %s
// Conversions fold only when exact: to the same type, or narrow -> wide ->
// narrow back (the wide type holds every narrow value). Rounding through a
// narrower type, or between the two 16-bit formats, stays.

// CHECK-LABEL: func @fold
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>, %[[H:.+]]: tensor<4xf16>)
// CHECK: %[[R:.+]] = mtc.convert %[[X]] : tensor<4xf32> to tensor<4xbf16>
// CHECK: %[[B:.+]] = mtc.convert %[[R]] : tensor<4xbf16> to tensor<4xf32>
// CHECK: %[[HB:.+]] = mtc.convert %[[H]] : tensor<4xf16> to tensor<4xbf16>
// CHECK: %[[HH:.+]] = mtc.convert %[[HB]] : tensor<4xbf16> to tensor<4xf16>
// CHECK: return %[[X]], %[[B]], %[[H]], %[[HH]]
func.func @fold(%x: tensor<4xf32>, %h: tensor<4xf16>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<4xf16>) {
  %same = mtc.convert %x : tensor<4xf32> to tensor<4xf32>
  %r = mtc.convert %x : tensor<4xf32> to tensor<4xbf16>
  %back = mtc.convert %r : tensor<4xbf16> to tensor<4xf32>
  %w = mtc.convert %h : tensor<4xf16> to tensor<4xf32>
  %exact = mtc.convert %w : tensor<4xf32> to tensor<4xf16>
  %hb = mtc.convert %h : tensor<4xf16> to tensor<4xbf16>
  %hh = mtc.convert %hb : tensor<4xbf16> to tensor<4xf16>
  return %same, %back, %exact, %hh : tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<4xf16>
}
