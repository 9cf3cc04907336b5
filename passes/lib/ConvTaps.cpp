//===- ConvTaps.cpp - Convolutions without the taps that read only padding -===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Runs on the imported model, before autodiff. A kernel tap whose every
// output position reads padding multiplies zeros: a 3x3 convolution with
// padding 1 on a 1x1 map (ImageNet networks on small images) has one live
// tap of nine, yet its GEMMs run over all nine. Such a convolution becomes
// one over the live taps: the weight sliced to the smallest window holding
// them, the padding shrunk by the taps dropped on each side. Same outputs
// (the dropped products were exact zeros), a ninth of the FLOPs there, and
// the autodiff gives the dropped taps a zero weight gradient (the slice's
// gradient), as PyTorch's convolution does.
//
//===----------------------------------------------------------------------===//

#include "mtc/Dialect/Mtc/IR/MtcOps.h"
#include "mtc/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mtc {
#define GEN_PASS_DEF_CONVTAPSPASS
#include "mtc/Passes/Passes.h.inc"
} // namespace mtc

using namespace mlir;
using namespace mtc;

namespace {

/// The taps [lo, hi) of one spatial dim that some output position reads
/// inside the input: tap t reads rows t * dilation - padBegin + o * stride
/// for outputs o in [0, out).
std::pair<int64_t, int64_t> liveTaps(int64_t in, int64_t out, int64_t taps,
                                     int64_t stride, int64_t padBegin,
                                     int64_t dilation) {
  auto live = [&](int64_t t) {
    int64_t first = t * dilation - padBegin; // the row output 0 reads
    // The least o >= 0 with first + o * stride >= 0.
    int64_t o = first >= 0 ? 0 : (-first + stride - 1) / stride;
    return o < out && first + o * stride < in;
  };
  int64_t lo = 0, hi = taps;
  while (lo < taps && !live(lo))
    ++lo;
  while (hi > lo && !live(hi - 1))
    --hi;
  return {lo, hi};
}

class ConvTapsPass : public mtc::impl::ConvTapsPassBase<ConvTapsPass> {
public:
  using ConvTapsPassBase::ConvTapsPassBase;

  void runOnOperation() override {
    SmallVector<ConvOp> convs;
    getOperation().walk([&](ConvOp op) { convs.push_back(op); });
    for (ConvOp conv : convs)
      trim(conv);
  }

private:
  void trim(ConvOp conv) {
    auto in = cast<RankedTensorType>(conv.getInput().getType()).getShape();
    auto out = cast<RankedTensorType>(conv.getType()).getShape();
    auto weightType = cast<RankedTensorType>(conv.getWeight().getType());
    ArrayRef<int64_t> w = weightType.getShape();
    ArrayRef<int64_t> strides = conv.getStrides(), pads = conv.getPads(),
                      dilations = conv.getDilations();
    if (in.size() != 4 || w.size() != 4)
      return;
    SmallVector<int64_t> starts{0, 0, 0, 0}, shape(w), newPads(pads);
    bool trimmed = false;
    for (int d = 0; d < 2; ++d) {
      auto [lo, hi] = liveTaps(in[2 + d], out[2 + d], w[2 + d], strides[d],
                               pads[d], dilations[d]);
      if (lo >= hi || (lo == 0 && hi == w[2 + d]))
        continue;
      // Dropped taps read padding only, so the padding shrinks by them.
      int64_t begin = pads[d] - lo * dilations[d];
      int64_t end = pads[2 + d] - (w[2 + d] - hi) * dilations[d];
      if (begin < 0 || end < 0)
        continue;
      starts[2 + d] = lo;
      shape[2 + d] = hi - lo;
      newPads[d] = begin;
      newPads[2 + d] = end;
      trimmed = true;
    }
    if (!trimmed)
      return;
    OpBuilder b(conv);
    Value weight = b.create<SliceOp>(
        conv.getLoc(), weightType.clone(shape), conv.getWeight(),
        b.getDenseI64ArrayAttr(starts),
        b.getDenseI64ArrayAttr(SmallVector<int64_t>(4, 1)));
    auto trimmedConv = b.create<ConvOp>(
        conv.getLoc(), conv.getType(), conv.getInput(), weight,
        conv.getBias(), conv.getStridesAttr(),
        b.getDenseI64ArrayAttr(newPads), conv.getDilationsAttr(),
        conv.getGroupAttr());
    conv.replaceAllUsesWith(trimmedConv.getResult());
    conv.erase();
    ++numTrimmed;
  }
};

} // namespace
