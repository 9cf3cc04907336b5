//===- MtcBase.td - mtc dialect definition -----------------*- tablegen -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DIALECT_MTC_IR_MTCBASE_TD
#define MTC_DIALECT_MTC_IR_MTCBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Mtc_Dialect : Dialect {
  let name = "mtc";
  let cppNamespace = "::mtc";
  let summary = "Tensor-level training IR of the mtc compiler";
  let description = [{
    The `mtc` dialect holds a training step at the tensor level: a small core
    set of ops on statically shaped builtin ranked tensors, each carrying its
    own gradient rule (`GradientOpInterface`) and cost (`CostOpInterface`).
    ONNX models are imported into it; autodiff, the optimizer, memory
    planning and code generation all work on it.

    Example:

    ```mlir
    %0 = mtc.gemm %x, %w, %b {transB = true} : (tensor<16x64xf32>,
           tensor<128x64xf32>, tensor<128xf32>) -> tensor<16x128xf32>
    %1 = mtc.relu %0 : tensor<16x128xf32>
    ```
  }];
  let hasConstantMaterializer = 1;
}

class Mtc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mtc_Dialect, mnemonic, traits>;

/// Floating-point tensors with a fully static shape.
def Mtc_FloatTensor : StaticShapeTensorOf<[F32]>;
/// Integer tensors (labels, indices) with a fully static shape.
def Mtc_IntTensor : StaticShapeTensorOf<[I64]>;
/// Boolean tensors (masks, conditions).
def Mtc_BoolTensor : StaticShapeTensorOf<[I1]>;
def Mtc_AnyTensor : StaticShapeTensorOf<[F32, I64, I1]>;
/// Any of those, or a float tensor stored in 16 bits (what a reshape, a
/// view of its input, may carry).
def Mtc_AnyStorageTensor : StaticShapeTensorOf<[F32, BF16, F16, I64, I1]>;
/// Floating-point tensors in any storage precision mtc supports: float32,
/// and bfloat16 / float16 (stored in 16 bits, computed in float32).
def Mtc_StorageFloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
/// Inputs of fused elementwise kernels: floats in any storage precision and
/// masks.
def Mtc_StorageOrMaskTensor : StaticShapeTensorOf<[F32, BF16, F16, I1]>;
/// The gradient status of a loss-scaled step (mtc.grad_check):
/// [1 / loss scale, 1 if a gradient is inf or NaN else 0].
def Mtc_GradStatusTensor : Type<
    And<[TensorOf<[F32]>.predicate,
         CPred<"::llvm::cast<::mlir::ShapedType>($_self).hasStaticShape()">,
         CPred<"::llvm::cast<::mlir::ShapedType>($_self).getShape() == "
               "::llvm::ArrayRef<int64_t>{2}">]>,
    "tensor<2xf32>", "::mlir::TensorType">,
  BuildableType<"::mlir::RankedTensorType::get({2}, $_builder.getF32Type())">;

#endif // MTC_DIALECT_MTC_IR_MTCBASE_TD
