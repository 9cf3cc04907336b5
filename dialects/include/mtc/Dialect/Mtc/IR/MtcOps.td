//===- MtcOps.td - mtc dialect ops -------------------------*- tablegen -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DIALECT_MTC_IR_MTCOPS_TD
#define MTC_DIALECT_MTC_IR_MTCOPS_TD

include "mtc/Dialect/Mtc/IR/MtcBase.td"
include "mtc/Dialect/Mtc/IR/MtcInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

/// A side-effect free op with a cost.
class Mtc_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Mtc_Op<mnemonic, !listconcat([Pure,
          DeclareOpInterfaceMethods<Mtc_CostOpInterface>], traits)>;

/// A differentiable compute op.
class Mtc_DiffOp<string mnemonic, list<Trait> traits = []>
    : Mtc_ComputeOp<mnemonic, !listconcat([
          DeclareOpInterfaceMethods<Mtc_GradientOpInterface>], traits)>;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Mtc_ConstantOp : Mtc_ComputeOp<"constant",
    [ConstantLike, AllTypesMatch<["value", "output"]>]> {
  let summary = "A constant tensor";
  let description = [{
    A tensor known at compile time: ONNX `Constant` nodes and initializers
    that are neither trained nor buffers, and constants created by gradient
    rules.

    Example:

    ```mlir
    %0 = mtc.constant dense<1.0> : tensor<4xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Mtc_AnyTensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Mtc_UnaryOp<string mnemonic, string formula>
    : Mtc_DiffOp<mnemonic, [SameOperandsAndResultType]> {
  let summary = "Elementwise " # formula;
  let description = [{
    Computes `}] # formula # [{` for every element.

    Example:

    ```mlir
    %y = mtc.}] # mnemonic # [{ %x : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def Mtc_ReluOp : Mtc_UnaryOp<"relu", "y = max(x, 0)">;
def Mtc_TanhOp : Mtc_UnaryOp<"tanh", "y = tanh(x)">;
def Mtc_SigmoidOp : Mtc_UnaryOp<"sigmoid", "y = 1 / (1 + exp(-x))">;
def Mtc_ExpOp : Mtc_UnaryOp<"exp", "y = exp(x)">;
def Mtc_LogOp : Mtc_UnaryOp<"log", "y = log(x)">;
def Mtc_NegOp : Mtc_UnaryOp<"neg", "y = -x">;
def Mtc_SqrtOp : Mtc_UnaryOp<"sqrt", "y = sqrt(x)">;
def Mtc_ErfOp : Mtc_UnaryOp<"erf", "y = erf(x)">;

def Mtc_ConvertOp : Mtc_DiffOp<"convert"> {
  let summary = "Converts a float tensor between float32, bfloat16 and float16";
  let description = [{
    The same values in another storage precision: narrowing rounds to
    nearest, ties to even (float16 overflows to infinity and keeps
    subnormals), widening is exact. The gradient is converted back to the
    input's precision, as PyTorch's autograd does for `.to(dtype)`.
    `convert(convert(x))` back to `x`'s type folds to `x` when the middle
    type is wider (exact round trip).

    Example:

    ```mlir
    %h = mtc.convert %x : tensor<4x8xf32> to tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$input);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($output)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Mtc_ClipOp : Mtc_DiffOp<"clip", [SameOperandsAndResultType]> {
  let summary = "Elementwise clamp to [min, max] (ONNX Clip)";
  let description = [{
    `y = min(max(x, min), max)`; ReLU6 is `clip` to [0, 6].

    Example:

    ```mlir
    %y = mtc.clip %x {min = 0.0 : f32, max = 6.0 : f32} : tensor<4xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input, F32Attr:$min, F32Attr:$max);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def Mtc_ClipGradOp : Mtc_ComputeOp<"clip_grad", [SameOperandsAndResultType]> {
  let summary = "Gradient of clip";
  let description = [{
    `dx = min < y < max ? dy : 0`, where `y` is the clip's output: the
    gradient is zero where the clip saturated. This is PyTorch's convention
    for ReLU6 and hardtanh (exported as ONNX Clip), and reading the output
    lets the clip's input die in the forward pass. It differs from
    `torch.clamp`'s gradient only at inputs exactly equal to a bound.

    Example:

    ```mlir
    %dx = mtc.clip_grad %dy, %y {min = 0.0 : f32, max = 6.0 : f32}
            : tensor<4xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$grad, Mtc_FloatTensor:$output_value,
                   F32Attr:$min, F32Attr:$max);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$grad `,` $output_value attr-dict `:` type($output)";
}

def Mtc_CompareOp : Mtc_ComputeOp<"compare", [InferTypeOpAdaptor]> {
  let summary = "Elementwise comparison with broadcasting";
  let description = [{
    `y = a <predicate> b` as booleans; `predicate` is `eq`, `lt` or `gt`
    (ONNX Equal, Less, Greater). Not differentiable.

    Example:

    ```mlir
    %m = mtc.compare %a, %b {predicate = "eq"} : (tensor<1x1x8x8xf32>,
           tensor<f32>) -> tensor<1x1x8x8xi1>
    ```
  }];
  let arguments = (ins Mtc_AnyTensor:$lhs, Mtc_AnyTensor:$rhs,
                   StrAttr:$predicate);
  let results = (outs Mtc_BoolTensor:$output);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_NotOp : Mtc_ComputeOp<"not", [SameOperandsAndResultType]> {
  let summary = "Elementwise logical not";
  let description = [{
    Example:

    ```mlir
    %n = mtc.not %m : tensor<8x8xi1>
    ```
  }];
  let arguments = (ins Mtc_BoolTensor:$input);
  let results = (outs Mtc_BoolTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def Mtc_SelectOp : Mtc_DiffOp<"select", [InferTypeOpAdaptor]> {
  let summary = "Elementwise choice with broadcasting (ONNX Where)";
  let description = [{
    `y = cond ? a : b`, the three operands broadcast together.

    Example:

    ```mlir
    %y = mtc.select %c, %a, %b : (tensor<4x4xi1>, tensor<2x4x4xf32>,
           tensor<f32>) -> tensor<2x4x4xf32>
    ```
  }];
  let arguments = (ins Mtc_BoolTensor:$condition, Mtc_FloatTensor:$true_value,
                   Mtc_FloatTensor:$false_value);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$condition `,` $true_value `,` $false_value attr-dict "
                       "`:` functional-type(operands, results)";
}

class Mtc_BinaryOp<string mnemonic, string formula>
    : Mtc_DiffOp<mnemonic, [InferTypeOpAdaptor]> {
  let summary = "Elementwise " # formula # " with broadcasting";
  let description = [{
    Computes `}] # formula # [{` with multidirectional (NumPy) broadcasting
    of the operands, as ONNX does.

    Example:

    ```mlir
    %y = mtc.}] # mnemonic # [{ %a, %b : (tensor<2x3xf32>, tensor<3xf32>)
           -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$lhs, Mtc_FloatTensor:$rhs);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Mtc_AddOp : Mtc_BinaryOp<"add", "y = a + b">;
def Mtc_SubOp : Mtc_BinaryOp<"sub", "y = a - b">;
def Mtc_MulOp : Mtc_BinaryOp<"mul", "y = a * b">;
def Mtc_DivOp : Mtc_BinaryOp<"div", "y = a / b">;

def Mtc_ReluGradOp : Mtc_ComputeOp<"relu_grad", [SameOperandsAndResultType]> {
  let summary = "Gradient of relu";
  let description = [{
    `dx = y > 0 ? dy : 0`, the VJP of `mtc.relu` (PyTorch's convention: the
    gradient at 0 is 0). `y` may be the relu's input or its output: both
    are positive at the same elements. The autodiff passes the output, which
    the backward pass usually keeps anyway.

    Example:

    ```mlir
    %dx = mtc.relu_grad %dy, %y : tensor<4xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$grad, Mtc_FloatTensor:$input);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($output)";
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Mtc_MatMulOp : Mtc_DiffOp<"matmul", [InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Mtc_CostOpInterface, ["getWorkspaceBytes"]>]> {
  let summary = "Batched matrix product with broadcasting (ONNX MatMul)";
  let description = [{
    NumPy `matmul`: the last two dims are multiplied, leading dims broadcast;
    1-D operands are not accepted here (the importer reshapes them).
    `transpose_a`/`transpose_b` transpose the last two dims of an operand
    first, which gradient rules use to avoid materialized transposes.

    The optional float32 `bias` of N elements is added to every row of the
    result (a GEMM epilogue: cuBLASLt's bias epilogue on CUDA). The fusion
    pass forms it from `matmul` + `add` when `b` is a 2-D weight and `a` is
    not transposed; autodiff never sees it.

    The result is float32 or, with 16-bit `a` and `b`, a 2-D `b` and `a`
    not transposed, stored in their format: the float32 sums (plus the
    bias) rounded as a conversion rounds them. The fusion pass stores it so
    when its readers only narrow it (attention's query, key and value
    sliced out of one projection).

    Example:

    ```mlir
    %y = mtc.matmul %a, %b : (tensor<2x3x4xf32>, tensor<4x5xf32>)
           -> tensor<2x3x5xf32>
    %z = mtc.matmul %a, %b, %bias : (tensor<2x3x4xf32>, tensor<4x5xf32>,
           tensor<5xf32>) -> tensor<2x3x5xf32>
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$a, Mtc_StorageFloatTensor:$b,
                   Optional<Mtc_FloatTensor>:$bias,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_a,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat = "$a `,` $b (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The result may be stored in 16 bits (see the description).
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return ::mtc::sameOr16BitFirst(inferred, actual);
    }
  }];
}

def Mtc_MatMulBiasGradOp : Mtc_ComputeOp<"matmul_bias_grad", [
    DeclareOpInterfaceMethods<Mtc_CostOpInterface, ["getWorkspaceBytes"]>]> {
  let summary = "Weight-gradient GEMM that also sums its output-gradient "
                "operand (the bias gradient)";
  let description = [{
    `output` is the 2-D product of `mtc.matmul` (same operands and transpose
    flags, no bias). `bias_grad` sums, over the product's inner dimension K,
    the operand that holds the layer's output gradient: `b` (not transposed,
    stored [K, N]) giving N sums, or `a` (transposed, stored [K, M]) giving
    M sums, as `sum_a` says. With 16-bit operands the sums are of the
    16-bit values (what the GEMM reads), accumulated in float32.

    The fusion pass forms it from a linear layer's weight gradient and the
    `reduce_sum` of its bias gradient, so the output gradient is read once
    (cuBLASLt's bias-gradient epilogue on CUDA).

    Example:

    ```mlir
    %dw, %db = mtc.matmul_bias_grad %x, %dy {transpose_a = true}
        : (tensor<16x32xf32>, tensor<16x96xf32>)
        -> (tensor<32x96xf32>, tensor<96xf32>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$a, Mtc_StorageFloatTensor:$b,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_a,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_b,
                   DefaultValuedAttr<BoolAttr, "false">:$sum_a);
  let results = (outs Mtc_FloatTensor:$output, Mtc_FloatTensor:$bias_grad);
  let assemblyFormat =
      "$a `,` $b attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_MatMulGeluOp : Mtc_ComputeOp<"matmul_gelu", [
    DeclareOpInterfaceMethods<Mtc_CostOpInterface, ["getWorkspaceBytes"]>]> {
  let summary = "Linear layer followed by GELU's tanh form (a GEMM epilogue)";
  let description = [{
    `pre` is `a` times the 2-D `b` (transposed when `transpose_b`), plus
    the optional float32 `bias` of N elements, the rows of `a` folded
    together; `output` is GELU of it in its tanh form,
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, computed from the
    float32 sums. Both results are stored as `a` and `b` are: float32, or
    the sums and their GELU each rounded to 16 bits.

    The fusion pass forms it from a linear layer and the fused kernel that
    applies GELU to its result; `pre` is what the backward pass reads
    (`mtc.matmul_gelu_grad`). cuBLASLt's GELU epilogue with its auxiliary
    output on CUDA.

    Example:

    ```mlir
    %y, %pre = mtc.matmul_gelu %x, %w, %bias {transpose_b = true}
        : (tensor<8x16xbf16>, tensor<64x16xbf16>, tensor<64xf32>)
        -> (tensor<8x64xbf16>, tensor<8x64xbf16>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$a, Mtc_StorageFloatTensor:$b,
                   Optional<Mtc_FloatTensor>:$bias,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs Mtc_StorageFloatTensor:$output,
                      Mtc_StorageFloatTensor:$pre);
  let assemblyFormat = "$a `,` $b (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_MatMulGeluGradOp : Mtc_ComputeOp<"matmul_gelu_grad", [
    DeclareOpInterfaceMethods<Mtc_CostOpInterface, ["getWorkspaceBytes"]>]> {
  let summary = "GEMM of a GELU's output gradient times GELU's derivative "
                "(a GEMM epilogue)";
  let description = [{
    `output` is `a` times the 2-D `b` (transposed when `transpose_b`), the
    rows of `a` folded together, each float32 sum multiplied by the
    derivative of GELU's tanh form at `pre` (what `mtc.matmul_gelu` stored).
    `a`, `b`, `pre` and `output` are all float32 or all stored in one
    16-bit format; a 16-bit output is the float32 product rounded once.

    The fusion pass forms it from the GEMM that computes a GELU's output
    gradient and the fused kernel that multiplies it by GELU's derivative.
    cuBLASLt's GELU-gradient epilogue on CUDA.

    Example:

    ```mlir
    %dpre = mtc.matmul_gelu_grad %dy, %w, %pre
        : (tensor<8x16xbf16>, tensor<16x64xbf16>, tensor<8x64xbf16>)
        -> tensor<8x64xbf16>
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$a, Mtc_StorageFloatTensor:$b,
                   Mtc_StorageFloatTensor:$pre,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_b);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat =
      "$a `,` $b `,` $pre attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling (2-D, NCHW)
//===----------------------------------------------------------------------===//

def Mtc_ConvOp : Mtc_DiffOp<"conv", [InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<Mtc_CostOpInterface,
                              ["getBytesMoved", "getWorkspaceBytes"]>]> {
  let summary = "2-D convolution (ONNX Conv)";
  let description = [{
    NCHW input, OIHW weight (`I = C / group`), optional bias of `O`
    elements. `pads` is `[top, left, bottom, right]`. Input and weight may
    be stored in bfloat16 or float16 (both the same): the products are
    exact and accumulate in float32; the bias is float32, and so is the
    result, except that the fusion pass stores in the operands' format the
    result of a convolution multiplying them as stored
    (`mtc.native_16bit_gemm`), not depthwise and without a bias, that only
    16-bit copies read (each sum rounded once, as the copy would round it).

    Example:

    ```mlir
    %y = mtc.conv %x, %w, %b {strides = array<i64: 1, 1>,
           pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>,
           group = 1 : i64} : (tensor<8x3x16x16xf32>, tensor<8x3x3x3xf32>,
           tensor<8xf32>) -> tensor<8x8x16x16xf32>
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$input,
                   Mtc_StorageFloatTensor:$weight,
                   Optional<Mtc_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The result may be stored in 16 bits (see the description).
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return ::mtc::sameOr16BitFirst(inferred, actual);
    }
  }];
}

def Mtc_ConvBackwardDataOp : Mtc_ComputeOp<"conv_backward_data", [
    DeclareOpInterfaceMethods<Mtc_CostOpInterface,
                              ["getBytesMoved", "getWorkspaceBytes"]>]> {
  let summary = "Gradient of a convolution with respect to its input";
  let description = [{
    The transposed convolution of `grad` (dY) with `weight`; the result has
    the shape of the forward input. Attributes are the forward op's. As for
    `mtc.conv`, both operands may be stored in 16 bits (the same format);
    the result is float32, except that the fusion pass stores in the
    operands' format the result of a backward that multiplies them as
    stored (`mtc.native_16bit_gemm`) and that only 16-bit copies read (each
    sum rounded once, as the copy would round it: the gradient
    torch.autocast's convolution backward returns).

    Example:

    ```mlir
    %dx = mtc.conv_backward_data %dy, %w {strides = array<i64: 1, 1>,
            pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>,
            group = 1 : i64} : (tensor<8x8x16x16xf32>, tensor<8x3x3x3xf32>)
            -> tensor<8x3x16x16xf32>
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$grad,
                   Mtc_StorageFloatTensor:$weight,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat = "$grad `,` $weight attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_ConvBackwardFilterOp : Mtc_ComputeOp<"conv_backward_filter", [
    DeclareOpInterfaceMethods<Mtc_CostOpInterface,
                              ["getBytesMoved", "getWorkspaceBytes"]>]> {
  let summary = "Gradient of a convolution with respect to its weight";
  let description = [{
    Correlates the forward `input` with `grad` (dY); the result has the
    weight's shape. Attributes are the forward op's. As for `mtc.conv`,
    both operands may be stored in 16 bits (the same format); the result
    is float32.

    Example:

    ```mlir
    %dw = mtc.conv_backward_filter %x, %dy {strides = array<i64: 1, 1>,
            pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>,
            group = 1 : i64} : (tensor<8x3x16x16xf32>, tensor<8x8x16x16xf32>)
            -> tensor<8x3x3x3xf32>
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$input,
                   Mtc_StorageFloatTensor:$grad,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$input `,` $grad attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

class Mtc_PoolAttrs {
  dag poolAttrs = (ins DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
}

def Mtc_MaxPoolOp : Mtc_DiffOp<"max_pool", [InferTypeOpAdaptor]>,
                    Mtc_PoolAttrs {
  let summary = "2-D max pooling (ONNX MaxPool)";
  let description = [{
    Max over each window; padded cells never win. `pads` is
    `[top, left, bottom, right]`. The input may be stored in 16 bits; the
    result is then stored alike (the max is one of the inputs). Rounding
    is monotonic, so the max of rounded values is the rounded max: the
    fusion pass pools the 16-bit copy of an input when only 16-bit copies
    of the result are read.

    Example:

    ```mlir
    %y = mtc.max_pool %x {kernel_shape = array<i64: 2, 2>,
           strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>,
           dilations = array<i64: 1, 1>} : (tensor<8x8x16x16xf32>)
           -> tensor<8x8x8x8xf32>
    ```
  }];
  let arguments = !con((ins Mtc_StorageFloatTensor:$input), poolAttrs);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_MaxPoolGradOp : Mtc_ComputeOp<"max_pool_grad",
    [AllShapesMatch<["input", "output"]>]>, Mtc_PoolAttrs {
  let summary = "Gradient of max pooling";
  let description = [{
    Routes each element of `grad` to the position that won its window in the
    forward pass (recomputed from `input`, first maximum in window order).
    Each of `input`, `grad` and the result may be stored in 16 bits, in one
    format (the fusion pass folds a saved input's widening, and a gradient
    rounded as under torch.autocast is read and written as stored; each
    sum rounded once).

    Example:

    ```mlir
    %dx = mtc.max_pool_grad %x, %dy {kernel_shape = array<i64: 2, 2>,
            strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>,
            dilations = array<i64: 1, 1>} : (tensor<8x8x16x16xf32>,
            tensor<8x8x8x8xf32>) -> tensor<8x8x16x16xf32>
    ```
  }];
  let arguments = !con((ins Mtc_StorageFloatTensor:$input,
                            Mtc_StorageFloatTensor:$grad),
                       poolAttrs);
  let results = (outs Mtc_StorageFloatTensor:$output);
  let assemblyFormat =
      "$input `,` $grad attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_AvgPoolOp : Mtc_DiffOp<"avg_pool", [InferTypeOpAdaptor]>,
                    Mtc_PoolAttrs {
  let summary = "2-D average pooling (ONNX AveragePool)";
  let description = [{
    Mean over each window. With `count_include_pad` padded cells count in the
    divisor, otherwise only cells inside the input do.

    Example:

    ```mlir
    %y = mtc.avg_pool %x {kernel_shape = array<i64: 2, 2>,
           strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>,
           dilations = array<i64: 1, 1>} : (tensor<8x8x16x16xf32>)
           -> tensor<8x8x8x8xf32>
    ```
  }];
  let arguments = !con((ins Mtc_FloatTensor:$input), poolAttrs,
      (ins DefaultValuedAttr<BoolAttr, "false">:$count_include_pad));
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_AvgPoolGradOp : Mtc_ComputeOp<"avg_pool_grad">, Mtc_PoolAttrs {
  let summary = "Gradient of average pooling";
  let description = [{
    Spreads each element of `grad` evenly over its window; the result has
    the forward input's shape.

    Example:

    ```mlir
    %dx = mtc.avg_pool_grad %dy {kernel_shape = array<i64: 2, 2>,
            strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>,
            dilations = array<i64: 1, 1>} : (tensor<8x8x8x8xf32>)
            -> tensor<8x8x16x16xf32>
    ```
  }];
  let arguments = !con((ins Mtc_FloatTensor:$grad), poolAttrs,
      (ins DefaultValuedAttr<BoolAttr, "false">:$count_include_pad));
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$grad attr-dict `:` functional-type(operands, results)";
}

def Mtc_GlobalAvgPoolOp : Mtc_DiffOp<"global_avg_pool", [InferTypeOpAdaptor]> {
  let summary = "Mean over all spatial positions (ONNX GlobalAveragePool)";
  let description = [{
    `[N, C, H, W] -> [N, C, 1, 1]`.

    Example:

    ```mlir
    %y = mtc.global_avg_pool %x : (tensor<8x16x4x4xf32>)
           -> tensor<8x16x1x1xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Mtc_ReshapeOp : Mtc_DiffOp<"reshape"> {
  let summary = "Reinterpret a tensor with another static shape";
  let description = [{
    The element count is preserved; the data order (row-major) is unchanged.
    ONNX Reshape and Flatten import to it once their shapes are known.

    Example:

    ```mlir
    %y = mtc.reshape %x : (tensor<8x16x2x2xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Mtc_AnyStorageTensor:$input);
  let results = (outs Mtc_AnyStorageTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_ExpandOp : Mtc_DiffOp<"expand"> {
  let summary = "Broadcast a tensor to a larger shape";
  let description = [{
    NumPy broadcasting of `input` to the result shape, which must be
    exactly the broadcast shape.

    Example:

    ```mlir
    %y = mtc.expand %x : (tensor<8x1xf32>) -> tensor<8x16xf32>
    ```
  }];
  let arguments = (ins Mtc_AnyTensor:$input);
  let results = (outs Mtc_AnyTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_TransposeOp : Mtc_DiffOp<"transpose", [InferTypeOpAdaptor]> {
  let summary = "Permute the dimensions of a tensor";
  let description = [{
    Result dim `i` is input dim `perm[i]`. A float32 input's result may be
    stored in bf16 or f16 (the fusion pass folds a conversion of the result
    into the op, which then rounds each element as the conversion would). A
    16-bit input (the fusion pass folds narrowing into the op computing it)
    keeps its format.

    Example:

    ```mlir
    %y = mtc.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>)
           -> tensor<3x2xf32>
    ```
  }];
  let arguments = (ins Mtc_AnyStorageTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Mtc_AnyStorageTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return ::mtc::sameOr16BitFirst(inferred, actual);
    }
  }];
}

def Mtc_PadOp : Mtc_DiffOp<"pad", [InferTypeOpAdaptor]> {
  let summary = "Constant padding (ONNX Pad, mode constant)";
  let description = [{
    `pads` holds the begin pads of every dim followed by the end pads, all
    non-negative; new cells hold `value`.

    Example:

    ```mlir
    %y = mtc.pad %x {pads = array<i64: 0, 1, 0, 1>, value = 0.0 : f32}
           : (tensor<2x3xf32>) -> tensor<2x5xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input, DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<F32Attr, "0.0f">:$value);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_SliceOp : Mtc_DiffOp<"slice"> {
  let summary = "Strided window of a tensor";
  let description = [{
    Result element `i` (a multi-index) is `input[starts + i * steps]`; the
    result shape gives the window's extent. Steps are positive. The input
    may be stored in 16 bits (a GEMM result the fusion pass stores so); the
    result is stored alike.

    Example:

    ```mlir
    %y = mtc.slice %x {starts = array<i64: 0, 1>, steps = array<i64: 1, 1>}
           : (tensor<2x5xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins Mtc_AnyStorageTensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$steps);
  let results = (outs Mtc_AnyStorageTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_SliceGradOp : Mtc_ComputeOp<"slice_grad"> {
  let summary = "Gradient of a strided slice";
  let description = [{
    A zero tensor of the sliced input's shape with `grad` written at the
    positions the slice read (`starts + i * steps`).

    Example:

    ```mlir
    %dx = mtc.slice_grad %dy {starts = array<i64: 0, 1>,
            steps = array<i64: 1, 2>} : (tensor<2x2xf32>) -> tensor<2x5xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$grad, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$steps);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$grad attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

class Mtc_ReduceOp<string mnemonic, string what>
    : Mtc_DiffOp<mnemonic, [InferTypeOpAdaptor]> {
  let summary = "The " # what # " over some axes";
  let description = [{
    Reduces `input` over `axes` (sorted, non-negative, unique; empty means
    none). With `keepdims` the reduced dims stay as 1.

    Example:

    ```mlir
    %y = mtc.}] # mnemonic # [{ %x {axes = array<i64: 1>, keepdims = true}
           : (tensor<4x8xf32>) -> tensor<4x1xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input, DenseI64ArrayAttr:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_ReduceSumOp : Mtc_ReduceOp<"reduce_sum", "sum">;
def Mtc_ReduceMeanOp : Mtc_ReduceOp<"reduce_mean", "mean">;

class Mtc_SoftmaxLikeOp<string mnemonic, string formula>
    : Mtc_DiffOp<mnemonic, [SameOperandsAndResultType]> {
  let summary = formula # " along one axis";
  let description = [{
    Computes `}] # formula # [{` along `axis` (non-negative), numerically
    stable.

    Example:

    ```mlir
    %y = mtc.}] # mnemonic # [{ %x {axis = 1 : i64} : tensor<4x10xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Mtc_SoftmaxOp : Mtc_SoftmaxLikeOp<"softmax", "softmax">;
def Mtc_LogSoftmaxOp : Mtc_SoftmaxLikeOp<"log_softmax", "log(softmax)">;

def Mtc_SoftmaxGradOp : Mtc_ComputeOp<"softmax_grad",
    [SameOperandsAndResultType]> {
  let summary = "Gradient of softmax or log-softmax from its output";
  let description = [{
    Softmax: `dx = y * (dy - sum(dy * y))`; with `log`, `y` is the
    log-softmax output and `dx = dy - exp(y) * sum(dy)`; sums run along
    `axis`.

    Example:

    ```mlir
    %dx = mtc.softmax_grad %y, %dy {axis = 1 : i64, log = false}
            : tensor<4x10xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$output_value, Mtc_FloatTensor:$grad,
                   I64Attr:$axis, DefaultValuedAttr<BoolAttr, "false">:$log);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat =
      "$output_value `,` $grad attr-dict `:` type($output)";
}

def Mtc_BatchNormTrainOp : Mtc_DiffOp<"batch_norm_train",
    [AllShapesMatch<["input", "output"]>,
     AllTypesMatch<["scale", "bias", "running_mean", "running_var",
                    "new_running_mean", "new_running_var", "saved_mean",
                    "saved_invstd"]>]> {
  let summary = "Batch normalization in training mode";
  let description = [{
    Normalizes `input` ([N, C, ...]) with the batch statistics of each
    channel, then scales and shifts. Also returns the updated running
    statistics (`momentum * running + (1 - momentum) * batch`, the variance
    unbiased as PyTorch keeps it) and the batch mean and inverse standard
    deviation for the gradient. The importer ties the new running statistics
    to their buffers, so the trainer writes them back in place. With
    `activation` ("relu", or "clip" to [`clip_min`, `clip_max`]) the output
    is that activation of the normalized values: the fusion pass folds a
    `mtc.relu` or `mtc.clip` that alone reads the output. Under 16-bit
    precision the fusion pass lets the op read a 16-bit `input` as stored
    and store `output` in 16 bits (in one format), rounded as a conversion
    rounds it, where only 16-bit copies of it are read; and return
    `input16`, a float32 input's 16-bit copy (the backward pass's saved
    input), written as the input is read. With `residual` (of the output's
    type), the activation applies to the normalized values, rounded as the
    output is stored, plus the residual: the fusion pass folds the sum (and
    ReLU) of a residual block that alone reads the output, so the
    normalized values are never stored.

    Example:

    ```mlir
    %y, %rm, %rv, %m, %is = mtc.batch_norm_train %x, %g, %b, %mean, %var
        {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32}
        : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>,
           tensor<8xf32>) -> (tensor<2x8x4x4xf32>, tensor<8xf32>,
           tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$input, Mtc_FloatTensor:$scale,
                   Mtc_FloatTensor:$bias, Mtc_FloatTensor:$running_mean,
                   Mtc_FloatTensor:$running_var,
                   Optional<Mtc_StorageFloatTensor>:$residual,
                   F32Attr:$epsilon, F32Attr:$momentum,
                   OptionalAttr<StrAttr>:$activation,
                   OptionalAttr<F32Attr>:$clip_min,
                   OptionalAttr<F32Attr>:$clip_max);
  let results = (outs Mtc_StorageFloatTensor:$output,
                      Mtc_FloatTensor:$new_running_mean,
                      Mtc_FloatTensor:$new_running_var,
                      Mtc_FloatTensor:$saved_mean,
                      Mtc_FloatTensor:$saved_invstd,
                      Optional<Mtc_StorageFloatTensor>:$input16);
  let assemblyFormat = "$input `,` $scale `,` $bias `,` $running_mean `,` "
                       "$running_var (`residual` $residual^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isDifferentiableOperand(unsigned index) { return index < 3; }
  }];
}

def Mtc_BatchNormTrainGradOp : Mtc_ComputeOp<"batch_norm_train_grad",
    [AllShapesMatch<["grad", "input", "input_grad"]>,
     AllTypesMatch<["scale", "saved_mean", "saved_invstd", "scale_grad",
                    "bias_grad"]>]> {
  let summary = "Gradient of batch normalization in training mode";
  let description = [{
    Returns the gradients of the input, the scale and the bias from the
    saved batch statistics. With `activation_output` (and the forward op's
    `activation`, `clip_min`, `clip_max`), `grad` is first taken through
    that activation's gradient, as `mtc.relu_grad` / `mtc.clip_grad` of
    `grad` and `activation_output` compute it (the fusion pass folds
    them). `input` and `activation_output` may be stored in 16 bits, in one
    format (the fusion pass folds their widening), `grad` in that format
    too when `input` is (a convolution backward's rounded gradient), and
    `input_grad` as well, rounded as a conversion rounds it (where only
    16-bit copies of it are read).

    Example:

    ```mlir
    %dx, %dg, %db = mtc.batch_norm_train_grad %dy, %x, %g, %m, %is
        : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<8xf32>,
           tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8x4x4xf32>,
           tensor<8xf32>, tensor<8xf32>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$grad,
                   Mtc_StorageFloatTensor:$input,
                   Mtc_FloatTensor:$scale, Mtc_FloatTensor:$saved_mean,
                   Mtc_FloatTensor:$saved_invstd,
                   Optional<Mtc_StorageFloatTensor>:$activation_output,
                   OptionalAttr<StrAttr>:$activation,
                   OptionalAttr<F32Attr>:$clip_min,
                   OptionalAttr<F32Attr>:$clip_max);
  let results = (outs Mtc_StorageFloatTensor:$input_grad,
                      Mtc_FloatTensor:$scale_grad, Mtc_FloatTensor:$bias_grad);
  let assemblyFormat = "$grad `,` $input `,` $scale `,` $saved_mean `,` "
                       "$saved_invstd (`activation` $activation_output^)? "
                       "attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_LayerNormOp : Mtc_DiffOp<"layer_norm", [InferTypeOpAdaptor]> {
  let summary = "Layer normalization over the trailing dims";
  let description = [{
    Normalizes `input` over the dims from `axis` on, then scales (and
    shifts, when `bias` is given) with tensors of those trailing dims.
    Returns the mean and inverse standard deviation of each normalized row
    (shaped like the input with the normalized dims set to 1) for the
    gradient. The output may be stored in bf16 or f16 (the fusion pass folds
    a conversion of the output into the op; statistics stay f32).

    Example:

    ```mlir
    %y, %m, %is = mtc.layer_norm %x, %g, %b {axis = 2 : i64,
        epsilon = 1.0e-05 : f32} : (tensor<2x8x32xf32>, tensor<32xf32>,
        tensor<32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x1xf32>,
        tensor<2x8x1xf32>)
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input, Mtc_FloatTensor:$scale,
                   Optional<Mtc_FloatTensor>:$bias, I64Attr:$axis,
                   F32Attr:$epsilon);
  let results = (outs Mtc_StorageFloatTensor:$output, Mtc_FloatTensor:$mean,
                      Mtc_FloatTensor:$invstd);
  let assemblyFormat = "$input `,` $scale (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The output may be stored in 16 bits (bf16 / f16): the fusion pass
    /// folds a conversion of the output into the op, which then rounds each
    /// normalized value as the conversion would.
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return ::mtc::sameOr16BitFirst(inferred, actual);
    }
  }];
}

def Mtc_LayerNormGradOp : Mtc_ComputeOp<"layer_norm_grad"> {
  let summary = "Gradient of layer normalization";
  let description = [{
    Returns the gradients of the input, the scale and the bias (unused when
    the forward had none) from the saved statistics. With `accumulate`, the
    input gradient is that plus `accumulate` (the other gradient of a
    residual connection's sum, which the fusion pass folds in). `input` may
    be stored in 16 bits (the fusion pass folds its widening conversion);
    then the op may also return `input_grad16`, the input gradient rounded
    to that format as a conversion rounds it (the fusion pass folds the
    conversion that makes the next GEMMs' 16-bit operand, while the float32
    gradient goes on down the residual path). `grad` may be stored in 16
    bits as well when `input` is, in the same format (the input gradient a
    16-bit GEMM rounds; the fusion pass folds its widening).

    Example:

    ```mlir
    %dx, %dg, %db = mtc.layer_norm_grad %dy, %x, %g, %m, %is
        {axis = 2 : i64} : (tensor<2x8x32xf32>,
        tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x8x1xf32>,
        tensor<2x8x1xf32>) -> (tensor<2x8x32xf32>, tensor<32xf32>,
        tensor<32xf32>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$grad,
                   Mtc_StorageFloatTensor:$input,
                   Mtc_FloatTensor:$scale, Mtc_FloatTensor:$mean,
                   Mtc_FloatTensor:$invstd,
                   Optional<Mtc_FloatTensor>:$accumulate, I64Attr:$axis);
  let results = (outs Mtc_FloatTensor:$input_grad, Mtc_FloatTensor:$scale_grad,
                      Mtc_FloatTensor:$bias_grad,
                      Optional<Mtc_StorageFloatTensor>:$input_grad16);
  let assemblyFormat = "$grad `,` $input `,` $scale `,` $mean `,` $invstd "
                       "(`accumulate` $accumulate^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Mtc_AttentionOp : Mtc_DiffOp<"attention", [InferTypeOpAdaptor]> {
  let summary = "Fused scaled dot-product attention";
  let description = [{
    `softmax(scale * query @ key^T, masked) @ value` with inverted dropout
    on the probabilities when `dropout_ratio` > 0, computed without storing
    the score matrix (FlashAttention: online softmax). `query` is
    `[..., Sq, D]`, `key` `[..., Sk, D]`, `value` `[..., Sk, Dv]`, all with
    the same leading (batch, head) dims. Where the optional boolean `mask`,
    broadcast to `[..., Sq, Sk]`, is true the score is -inf. With `causal`
    (and no `mask`) query i sees keys j <= i only: the score is -inf where
    j > i, in every head. The fusion pass sets it for a mask whose values it
    knows when it compiles (a constant or an initializer nothing updates)
    and that is exactly that pattern; the kernels then read no mask and skip
    the chunks of keys it hides without looking. The dropout
    mask is the one a `mtc.dropout` with `dropout_stream` would draw on the
    `[..., Sq, Sk]` probabilities. Returns the output `[..., Sq, Dv]` and the
    log-sum-exp of each row of scores `[..., Sq]`, which the gradient uses
    to recompute the probabilities. The fusion pass `mtc-fuse-attention`
    forms it from the unfused pattern. With 16-bit `query`, `key` and
    `value` (the precision pass) the products multiply 16-bit operands, the
    probabilities rounded to 16 bits for `P @ value`; the log-sum-exp is
    float32, the output float32 or stored in the operands' 16-bit format
    (the fusion pass folds its narrowing conversions into the op, which then
    rounds each value as they would).

    With `seq_major` the operands and the output are `[..., S, H, D]`
    instead of `[..., H, S, D]`: the sequence before the heads, as the
    projections write them (the fusion pass absorbs the transposes that
    split and merge the heads). The log-sum-exp stays `[..., H, Sq]` and
    the mask broadcasts to `[..., H, Sq, Sk]`; only where rows are read and
    written changes.

    Example:

    ```mlir
    %o, %lse = mtc.attention %q, %k, %v, %mask {scale = 0.125 : f32}
        : (tensor<2x4x64x64xf32>, tensor<2x4x64x64xf32>,
           tensor<2x4x64x64xf32>, tensor<1x1x64x64xi1>)
        -> (tensor<2x4x64x64xf32>, tensor<2x4x64xf32>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$query,
                   Mtc_StorageFloatTensor:$key, Mtc_StorageFloatTensor:$value,
                   Optional<Mtc_BoolTensor>:$mask,
                   F32Attr:$scale,
                   DefaultValuedAttr<F32Attr, "0.0f">:$dropout_ratio,
                   DefaultValuedAttr<I64Attr, "0">:$dropout_stream,
                   UnitAttr:$seq_major, UnitAttr:$causal);
  let results = (outs Mtc_StorageFloatTensor:$output,
                      Mtc_FloatTensor:$logsumexp);
  let assemblyFormat = "$query `,` $key `,` $value (`,` $mask^)? attr-dict "
                       "`:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The output may be stored in 16 bits (see the description).
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return ::mtc::sameOr16BitFirst(inferred, actual);
    }
  }];
}

def Mtc_AttentionGradOp : Mtc_ComputeOp<"attention_grad"> {
  let summary = "Gradient of fused attention";
  let description = [{
    The gradients of `query`, `key` and `value` from the output gradient,
    the forward's operands, its output and its log-sum-exp; the
    probabilities are recomputed tile by tile, never stored. `grad`,
    `query`, `key` and `value` are float32 or all in one 16-bit format
    (then the products round P and dS to it). `output` is float32 or, with
    16-bit operands, stored in their format (the fusion pass folds its
    widening conversion into the op). `seq_major` is the forward's: every
    tensor but the log-sum-exp is then `[..., S, H, D]`, and `causal` is the
    forward's too. The gradients are float32 or, with
    16-bit operands, all three stored in their format: summed in float32,
    then rounded as a conversion rounds them (the fusion pass folds the
    narrowing of readers that only narrow them).

    Example:

    ```mlir
    %dq, %dk, %dv = mtc.attention_grad %do, %q, %k, %v, %o, %lse
        {scale = 0.125 : f32} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>,
        tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>,
        tensor<8x64xf32>) -> (tensor<8x64x64xf32>, tensor<8x64x64xf32>,
        tensor<8x64x64xf32>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$grad,
                   Mtc_StorageFloatTensor:$query, Mtc_StorageFloatTensor:$key,
                   Mtc_StorageFloatTensor:$value,
                   Mtc_StorageFloatTensor:$output, Mtc_FloatTensor:$logsumexp,
                   Optional<Mtc_BoolTensor>:$mask, F32Attr:$scale,
                   DefaultValuedAttr<F32Attr, "0.0f">:$dropout_ratio,
                   DefaultValuedAttr<I64Attr, "0">:$dropout_stream,
                   UnitAttr:$seq_major, UnitAttr:$causal);
  let results = (outs Mtc_StorageFloatTensor:$query_grad,
                      Mtc_StorageFloatTensor:$key_grad,
                      Mtc_StorageFloatTensor:$value_grad);
  let assemblyFormat = "$grad `,` $query `,` $key `,` $value `,` $output `,` "
                       "$logsumexp (`,` $mask^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Dropout and indexing
//===----------------------------------------------------------------------===//

def Mtc_DropoutOp : Mtc_DiffOp<"dropout", [SameOperandsAndResultType]> {
  let summary = "Inverted dropout with a regenerable mask";
  let description = [{
    Zeroes each element with probability `ratio` and scales the others by
    `1 / (1 - ratio)`. The mask is a pure function of the trainer's seed,
    the step and `stream` (unique per dropout op), so the gradient and any
    recomputation regenerate it instead of storing it.

    Example:

    ```mlir
    %y = mtc.dropout %x {ratio = 1.0e-01 : f32, stream = 3 : i64}
           : tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$input, F32Attr:$ratio, I64Attr:$stream);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def Mtc_DropoutGradOp : Mtc_ComputeOp<"dropout_grad",
    [SameOperandsAndResultType]> {
  let summary = "Gradient of dropout";
  let description = [{
    Applies the forward's mask (regenerated from `stream`) and scale to the
    gradient.

    Example:

    ```mlir
    %dx = mtc.dropout_grad %dy {ratio = 1.0e-01 : f32, stream = 3 : i64}
            : tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$grad, F32Attr:$ratio, I64Attr:$stream);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$grad attr-dict `:` type($output)";
}

def Mtc_GatherOp : Mtc_DiffOp<"gather", [InferTypeOpAdaptor]> {
  let summary = "Gather slices along an axis (ONNX Gather, embeddings)";
  let description = [{
    The result shape is `data.shape[:axis] + indices.shape +
    data.shape[axis+1:]`; negative indices count from the end.

    Example:

    ```mlir
    %y = mtc.gather %table, %ids {axis = 0 : i64} : (tensor<50x32xf32>,
           tensor<2x8xi64>) -> tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$data, Mtc_IntTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$data `,` $indices attr-dict `:` "
                       "functional-type(operands, results)";
}

def Mtc_GatherGradOp : Mtc_ComputeOp<"gather_grad", [
    DeclareOpInterfaceMethods<Mtc_CostOpInterface, ["getWorkspaceBytes"]>]> {
  let summary = "Gradient of gather: scatter-add into a zero tensor";
  let description = [{
    Adds each slice of `grad` into the row of the result its index names;
    the result has the gathered data's shape. With `accumulate` (which the
    fusion pass folds in from an add of another gradient of the same table,
    e.g. a tied embedding's output projection) the result is `accumulate`
    plus that scatter-add, each row's slices summed in index order before
    the one addition, as the separate add computes it; the result may be
    written over `accumulate`, and the op needs scratch for a row of sums
    per index.

    Example:

    ```mlir
    %d = mtc.gather_grad %dy, %ids {axis = 0 : i64} : (tensor<2x8x32xf32>,
           tensor<2x8xi64>) -> tensor<50x32xf32>
    %t = mtc.gather_grad %dy, %ids accumulate %dw {axis = 0 : i64}
           : (tensor<2x8x32xf32>, tensor<2x8xi64>, tensor<50x32xf32>)
           -> tensor<50x32xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$grad, Mtc_IntTensor:$indices,
                   Optional<Mtc_FloatTensor>:$accumulate, I64Attr:$axis);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$grad `,` $indices (`accumulate` $accumulate^)? "
                       "attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_ConcatOp : Mtc_DiffOp<"concat", [InferTypeOpAdaptor]> {
  let summary = "Concatenate tensors along an axis";
  let description = [{
    All operands have the same rank and agree on every dim but `axis`. A
    float32 concat's result may be stored in bf16 or f16 (the fusion pass
    folds a conversion of the result into the op, which then rounds each
    element as the conversion would); operands stored in 16 bits, all in
    one format, are copied as they are into a result of that format.

    Example:

    ```mlir
    %y = mtc.concat %a, %b {axis = 1 : i64} : (tensor<2x1x32xf32>,
           tensor<2x16x32xf32>) -> tensor<2x17x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Mtc_AnyStorageTensor>:$inputs, I64Attr:$axis);
  let results = (outs Mtc_AnyStorageTensor:$output);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual) {
      return ::mtc::sameOr16BitFirst(inferred, actual);
    }
  }];
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def Mtc_SoftmaxCrossEntropyOp : Mtc_DiffOp<"softmax_cross_entropy",
    [InferTypeOpAdaptor]> {
  let summary = "Softmax cross-entropy (ONNX SoftmaxCrossEntropyLoss)";
  let description = [{
    `logits` are `[N, C]` or `[N, C, D...]`, `labels` `[N]` or `[N, D...]`.
    Returns the loss (a scalar for `mean`/`sum`, `[N, D...]` for `none`) and
    `log_softmax(logits)` along `C`, which the gradient reuses. `mean`
    divides by the number of labels that are not `ignore_index`.

    Example:

    ```mlir
    %loss, %logp = mtc.softmax_cross_entropy %logits, %labels
        {reduction = "mean"} : (tensor<16x10xf32>, tensor<16xi64>)
        -> (tensor<f32>, tensor<16x10xf32>)
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$logits, Mtc_IntTensor:$labels,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Mtc_FloatTensor:$loss, Mtc_FloatTensor:$log_prob);
  let assemblyFormat =
      "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_SoftmaxCrossEntropyGradOp : Mtc_ComputeOp<
    "softmax_cross_entropy_grad", [AllTypesMatch<["log_prob", "output"]>]> {
  let summary = "Gradient of softmax cross-entropy with respect to logits";
  let description = [{
    `dlogits = dloss * (softmax - onehot(labels))` with the forward op's
    reduction and `ignore_index` (ignored positions get 0).

    Example:

    ```mlir
    %d = mtc.softmax_cross_entropy_grad %dloss, %logp, %labels
        {reduction = "mean"} : (tensor<f32>, tensor<16x10xf32>,
        tensor<16xi64>) -> tensor<16x10xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$grad, Mtc_FloatTensor:$log_prob,
                   Mtc_IntTensor:$labels,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$grad `,` $log_prob `,` $labels attr-dict `:` "
                       "functional-type(operands, results)";
}

def Mtc_SoftmaxCrossEntropyWithGradOp : Mtc_ComputeOp<
    "softmax_cross_entropy_with_grad", [DeclareOpInterfaceMethods<
        Mtc_CostOpInterface, ["getBytesMoved", "getWorkspaceBytes"]>]> {
  let summary = "Softmax cross-entropy and its logits gradient in one pass";
  let description = [{
    `softmax_cross_entropy` over `logits` [N, C] and `labels` [N] (reduction
    `mean` or `sum`), and the gradient `softmax_cross_entropy_grad` computes
    from it for the incoming gradient `dloss`, without storing the
    log-probabilities: each row is read for its maximum and its sum of
    exponentials, then once more to write the gradient. The fusion pass
    forms it where the log-probabilities have no other reader. `dlogits`
    may be stored in 16 bits, rounded as a conversion of the float32
    gradient rounds it (its one reader was such a conversion). `logits`
    may be stored in 16 bits too (a GEMM's output the precision pass
    rounds, as torch.autocast does), with `dlogits` in the same format:
    they are widened as they are read (the fusion pass folds their widening
    conversion into the op). The numbers are those of the two ops.

    Example:

    ```mlir
    %loss, %d = mtc.softmax_cross_entropy_with_grad %logits, %labels, %dloss
        {reduction = "mean"} : (tensor<16x10xf32>, tensor<16xi64>,
        tensor<f32>) -> (tensor<f32>, tensor<16x10xbf16>)
    ```
  }];
  let arguments = (ins Mtc_StorageFloatTensor:$logits, Mtc_IntTensor:$labels,
                   Mtc_FloatTensor:$dloss,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Mtc_FloatTensor:$loss, Mtc_StorageFloatTensor:$dlogits);
  let assemblyFormat = "$logits `,` $labels `,` $dloss attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_SoftmaxCrossEntropyLossOp : Mtc_ComputeOp<
    "softmax_cross_entropy_loss", [DeclareOpInterfaceMethods<
        Mtc_CostOpInterface, ["getBytesMoved", "getWorkspaceBytes"]>]> {
  let summary = "Softmax cross-entropy loss alone";
  let description = [{
    The loss of `softmax_cross_entropy` over `logits` [N, C] and `labels`
    [N] (reduction `mean` or `sum`) without the log-probabilities: the
    fusion pass forms it where nothing reads them (evaluation), so no
    [N, C] result is planned. Each row is read for its maximum and its sum
    of exponentials; the number is the op's.

    Example:

    ```mlir
    %loss = mtc.softmax_cross_entropy_loss %logits, %labels
        {reduction = "mean"} : (tensor<16x10xf32>, tensor<16xi64>)
        -> tensor<f32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$logits, Mtc_IntTensor:$labels,
                   DefaultValuedAttr<StrAttr, "\"mean\"">:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Mtc_FloatTensor:$loss);
  let assemblyFormat =
      "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mtc_CountCorrectOp : Mtc_ComputeOp<"count_correct"> {
  let summary = "Number of positions whose argmax over classes is the label";
  let description = [{
    For logits `[N, C, D...]` and labels `[N, D...]`, returns `[correct,
    counted]`: the positions where the first maximum over C equals the
    label, and the positions counted at all (labels equal to `ignore_index`
    are not). Evaluation uses it for accuracy.

    Example:

    ```mlir
    %n = mtc.count_correct %logits, %labels : (tensor<16x10xf32>,
           tensor<16xi64>) -> tensor<2xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$logits, Mtc_IntTensor:$labels,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs StaticShapeTensorOf<[F32]>:$output);
  let assemblyFormat =
      "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//
//
// Hyperparameters are f64, as PyTorch's are Python floats: factors such as
// 1 - beta2 must be formed from the exact values before meeting f32 data.
//
// Under loss scaling the gradients are those of `loss * scale`: the updates
// then take the step's `mtc.grad_check` status, multiply each gradient by
// its 1 / scale, and leave parameter and state untouched when the status
// flags an inf or NaN gradient (the step is skipped).

def Mtc_GradCheckOp : Mtc_ComputeOp<"grad_check"> {
  let summary = "Overflow check of loss-scaled gradients";
  let description = [{
    `status = [1 / loss_scale, any gradient not finite ? 1 : 0]`, the
    inverse computed in double and rounded to float32 (as PyTorch's
    GradScaler does). `loss_scale` is the scale the backward pass was seeded
    with; the optimizer updates read `status` to unscale the gradients and
    to skip the step on overflow, and the trainer reads it to adjust the
    scale.

    Example:

    ```mlir
    %s = mtc.grad_check %scale, %g0, %g1
           : tensor<f32>, tensor<10x64xf32>, tensor<10xf32>
    ```
  }];
  let arguments = (ins 0DTensorOf<[F32]>:$loss_scale,
                   Variadic<Mtc_FloatTensor>:$grads);
  let results = (outs Mtc_GradStatusTensor:$status);
  let assemblyFormat = "$loss_scale `,` $grads attr-dict `:` type($loss_scale) "
                       "`,` type($grads)";
  let builders = [
    OpBuilder<(ins "::mlir::Value":$lossScale, "::mlir::ValueRange":$grads), [{
      build($_builder, $_state,
            ::mlir::RankedTensorType::get({2}, $_builder.getF32Type()),
            lossScale, grads);
    }]>
  ];
}

def Mtc_AccumulateGradOp : Mtc_ComputeOp<"accumulate_grad",
    [AllTypesMatch<["accumulator", "grad", "output"]>]> {
  let summary = "Gradient accumulation over micro-batches";
  let description = [{
    With `count` micro-batches per optimizer step: the first micro-batch
    sets the accumulator to `grad`, later ones add `grad`, and the last one
    also divides by `count`, so that the optimizer sees the gradient of the
    mean loss over all micro-batches. The result is written in place of the
    accumulator.

    Example:

    ```mlir
    %acc1 = mtc.accumulate_grad %acc, %g {count = 4 : i64} : tensor<10x64xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$accumulator, Mtc_FloatTensor:$grad,
                   I64Attr:$count);
  let results = (outs Mtc_FloatTensor:$output);
  let assemblyFormat = "$accumulator `,` $grad attr-dict `:` type($output)";
}

def Mtc_SgdUpdateOp : Mtc_ComputeOp<"sgd_update",
    [AllTypesMatch<["param", "grad", "new_param"]>]> {
  let summary = "SGD step without momentum";
  let description = [{
    `p' = p - lr * (g + weight_decay * p)`. The result is written in place
    of `param` by the memory plan.

    Example:

    ```mlir
    %p1 = mtc.sgd_update %p, %g {lr = 0.1 : f64, weight_decay = 0.0 : f64}
            : tensor<10x64xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$param, Mtc_FloatTensor:$grad,
                   Optional<Mtc_GradStatusTensor>:$grad_status,
                   F64Attr:$lr, DefaultValuedAttr<F64Attr, "0.0">:$weight_decay);
  let results = (outs Mtc_FloatTensor:$new_param);
  let assemblyFormat = "$param `,` $grad (`status` $grad_status^)? attr-dict "
                       "`:` type($param)";
}

def Mtc_SgdMomentumUpdateOp : Mtc_ComputeOp<"sgd_momentum_update",
    [AllTypesMatch<["param", "grad", "momentum_buffer", "new_param",
                    "new_momentum_buffer"]>]> {
  let summary = "SGD step with (Nesterov) momentum, PyTorch semantics";
  let description = [{
    `d = g + wd * p; buf' = momentum * buf + d; d = nesterov ? d + momentum *
    buf' : buf'; p' = p - lr * d`. Results are written in place of `param`
    and `momentum_buffer`.

    Example:

    ```mlir
    %p1, %b1 = mtc.sgd_momentum_update %p, %g, %b {lr = 0.1 : f64,
                 momentum = 0.9 : f64} : tensor<10x64xf32>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$param, Mtc_FloatTensor:$grad,
                   Mtc_FloatTensor:$momentum_buffer,
                   Optional<Mtc_GradStatusTensor>:$grad_status, F64Attr:$lr,
                   F64Attr:$momentum,
                   DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
                   DefaultValuedAttr<BoolAttr, "false">:$nesterov);
  let results = (outs Mtc_FloatTensor:$new_param,
                      Mtc_FloatTensor:$new_momentum_buffer);
  let assemblyFormat = "$param `,` $grad `,` $momentum_buffer "
                       "(`status` $grad_status^)? attr-dict `:` type($param)";
}

def Mtc_AdamWUpdateOp : Mtc_ComputeOp<"adamw_update",
    [AttrSizedOperandSegments,
     DeclareOpInterfaceMethods<Mtc_CostOpInterface, ["getBytesMoved"]>,
     AllTypesMatch<["param", "grad", "exp_avg", "exp_avg_sq", "new_param",
                    "new_exp_avg", "new_exp_avg_sq"]>]> {
  let summary = "AdamW step with bias correction, PyTorch semantics";
  let description = [{
    Decoupled weight decay `p *= 1 - lr * wd`, then the Adam update with
    bias corrections for the trainer's step counter `t` (1 on the first
    step). Results are written in place of the operands. With `param16`
    (the parameter's 16-bit copy that the step's GEMMs read, kept beside it
    by the precision pass) the update also writes the new parameter rounded
    to that format (`new_param16`, in place of the copy), as a conversion
    of it would round it.

    Example:

    ```mlir
    %p1, %m1, %v1 = mtc.adamw_update %p, %g, %m, %v {lr = 0.001 : f64,
        beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64,
        weight_decay = 0.01 : f64} : tensor<10x64xf32>
    %p2, %m2, %v2, %c2 = mtc.adamw_update %p, %g, %m, %v copy %c
        {lr = 0.001 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64,
        eps = 1.0e-08 : f64} : tensor<10x64xf32>, tensor<10x64xbf16>
    ```
  }];
  let arguments = (ins Mtc_FloatTensor:$param, Mtc_FloatTensor:$grad,
                   Mtc_FloatTensor:$exp_avg, Mtc_FloatTensor:$exp_avg_sq,
                   Optional<Mtc_GradStatusTensor>:$grad_status,
                   Optional<Mtc_StorageFloatTensor>:$param16,
                   F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                   DefaultValuedAttr<F64Attr, "0.0">:$weight_decay);
  let results = (outs Mtc_FloatTensor:$new_param, Mtc_FloatTensor:$new_exp_avg,
                      Mtc_FloatTensor:$new_exp_avg_sq,
                      Optional<Mtc_StorageFloatTensor>:$new_param16);
  let assemblyFormat = "$param `,` $grad `,` $exp_avg `,` $exp_avg_sq "
                       "(`status` $grad_status^)? (`copy` $param16^)? "
                       "attr-dict `:` type($param) "
                       "(`,` type($param16)^ `->` type($new_param16))?";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Mtc_FusedOp : Mtc_Op<"fused", [Pure, IsolatedFromAbove,
    SingleBlock,
    DeclareOpInterfaceMethods<Mtc_CostOpInterface>]> {
  let summary = "A chain of elementwise ops run as one kernel";
  let description = [{
    The body computes the results from the inputs (its block arguments)
    with elementwise ops whose results all have one shape; inputs may
    broadcast to it. It yields the values the rest of the step reads (the
    last one's, and those of earlier ops that are read later, such as an
    activation the backward pass needs). Code generation emits one loop (one
    CUDA kernel) that loads each input once per element, keeps the other
    intermediates in registers and stores only the results, so those
    intermediates take no memory. Created by `mtc-fuse-elementwise` after
    recomputation is decided.

    Example:

    ```mlir
    %y = mtc.fused %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
    ^bb0(%a: tensor<4x8xf32>, %c: tensor<8xf32>):
      %s = mtc.add %a, %c : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      %r = mtc.relu %s : tensor<4x8xf32>
      mtc.yield %r : tensor<4x8xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Mtc_StorageOrMaskTensor>:$inputs);
  let results = (outs Variadic<Mtc_StorageFloatTensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "$inputs attr-dict `:` functional-type($inputs, $outputs) $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The values the body yields, one per result.
    ::mlir::OperandRange getYielded() {
      return getBody().front().getTerminator()->getOperands();
    }
  }];
}

def Mtc_YieldOp : Mtc_Op<"yield", [Pure, Terminator,
                                   HasParent<"FusedOp">]> {
  let summary = "The results of an mtc.fused body";
  let arguments = (ins Variadic<Mtc_StorageFloatTensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

#endif // MTC_DIALECT_MTC_IR_MTCOPS_TD
