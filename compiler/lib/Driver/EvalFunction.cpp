//===- EvalFunction.cpp - The evaluation function of a trainer ------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// `trainer --eval` runs the model forward with dropout off and BatchNorm on
// its running statistics. The driver imports the model a second time in
// evaluation mode and keeps, from that import, a function computing the loss
// and (for a softmax cross-entropy loss) the number of correct predictions.
// Its arguments are matched by name with the training step's, so the memory
// plan gives them the same bytes.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcAttrNames.h"
#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Driver/Driver.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace mtc;

llvm::Error mtc::addEvalFunction(ModuleOp module, ModuleOp evalModule) {
  auto eval = evalModule.lookupSymbol<func::FuncOp>("forward");
  if (!eval)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the evaluation import has no @forward");
  Block &body = eval.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() == 0 ||
      cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() != 0)
    return llvm::Error::success(); // the training pipeline reports this

  OpBuilder b(ret);
  Value loss = ret.getOperand(0);
  SmallVector<Value> results{loss};
  SmallVector<DictionaryAttr> resultAttrs{b.getDictionaryAttr(
      {b.getNamedAttr(attr::kRole, b.getStringAttr(attr::role::kEvalLoss)),
       b.getNamedAttr(attr::kName, b.getStringAttr("loss"))})};
  if (auto xent = loss.getDefiningOp<SoftmaxCrossEntropyOp>()) {
    auto pair = RankedTensorType::get({2}, b.getF32Type());
    Value correct = b.create<CountCorrectOp>(
        xent.getLoc(), pair, xent.getLogits(), xent.getLabels(),
        xent.getIgnoreIndexAttr());
    results.push_back(correct);
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(attr::kRole,
                        b.getStringAttr(attr::role::kEvalCorrect)),
         b.getNamedAttr(attr::kName, b.getStringAttr("correct"))}));
  }
  b.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  eval.setType(b.getFunctionType(eval.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  eval.setAllResultAttrs(resultAttrs);
  eval.setSymName(attr::kEvalFunction);

  // The initial values belong to the training step.
  for (unsigned i = 0; i < eval.getNumArguments(); ++i)
    eval.removeArgAttr(i, attr::kInit);
  eraseDeadPureOps(body);

  eval->remove();
  module.push_back(eval);
  return llvm::Error::success();
}
