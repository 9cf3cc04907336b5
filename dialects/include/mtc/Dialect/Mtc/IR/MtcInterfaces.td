//===- MtcInterfaces.td - mtc op interfaces ----------------*- tablegen -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_DIALECT_MTC_IR_MTCINTERFACES_TD
#define MTC_DIALECT_MTC_IR_MTCINTERFACES_TD

include "mlir/IR/OpBase.td"

def Mtc_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mtc";
  let description = [{
    The reverse-mode rule of an op. Given the gradients flowing into its
    results, the op emits, with the builder, `mtc` ops computing the
    vector-Jacobian product for each of its operands. Autodiff only walks
    this interface, so adding a differentiable op is local to that op.
  }];
  let methods = [
    InterfaceMethod<[{
        Emits the VJP. `resultGrads[i]` is the gradient of result `i`, or a
        null value when no gradient reaches that result. `operandGrads` must
        be filled with one value per operand: its gradient, or a null value
        for operands that are not differentiable.
      }],
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
    InterfaceMethod<[{
        Whether a gradient can flow to operand `index`. Autodiff uses it to
        decide which initializers are trainable.
      }],
      "bool", "isDifferentiableOperand", (ins "unsigned":$index), [{}],
      [{ return ::llvm::isa<::mlir::FloatType>(
             ::mlir::getElementTypeOrSelf($_op->getOperand(index).getType())); }]>,
  ];
}

def Mtc_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mtc";
  let description = [{
    What an op costs: floating-point operations, bytes it moves, and the
    scratch memory its kernel needs while it runs. Used by the memory plan,
    the report and, later, rematerialization.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
      "int64_t", "getFlops", (ins)>,
    InterfaceMethod<"Bytes read and written by one execution.",
      "int64_t", "getBytesMoved", (ins), [{}],
      [{ int64_t bytes = 0;
         for (::mlir::Type t : $_op->getOperandTypes())
           bytes += ::mtc::getTensorBytes(t);
         for (::mlir::Type t : $_op->getResultTypes())
           bytes += ::mtc::getTensorBytes(t);
         return bytes; }]>,
    InterfaceMethod<"Scratch bytes the kernel needs while it runs.",
      "int64_t", "getWorkspaceBytes", (ins), [{}], [{ return 0; }]>,
  ];
}

#endif // MTC_DIALECT_MTC_IR_MTCINTERFACES_TD
