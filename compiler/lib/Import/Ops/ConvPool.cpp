//===- ConvPool.cpp - Import of Conv and pooling ops ----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "../ImportContext.h"

using namespace mlir;
using namespace mtc;
using namespace mtc::import;

namespace {

/// The 2-D window attributes shared by Conv and the pooling ops, with
/// auto_pad resolved to explicit pads [top, left, bottom, right].
struct Window {
  SmallVector<int64_t> kernel, strides, pads, dilations;
};

FailureOr<Window> readWindow(ImportContext &ctx, ArrayRef<int64_t> input,
                             std::vector<int64_t> kernel) {
  if (input.size() != 4)
    return ctx.fail("only 2-D (NCHW) inputs are supported, got rank " +
                    Twine(input.size()));
  Window w;
  w.kernel.assign(kernel.begin(), kernel.end());
  auto strides = ctx.intsAttr("strides", {1, 1});
  auto dilations = ctx.intsAttr("dilations", {1, 1});
  auto pads = ctx.intsAttr("pads", {0, 0, 0, 0});
  if (w.kernel.size() != 2 || strides.size() != 2 || dilations.size() != 2 ||
      pads.size() != 4)
    return ctx.fail("expects 2-D kernel_shape, strides, dilations and 4 pads");
  w.strides.assign(strides.begin(), strides.end());
  w.dilations.assign(dilations.begin(), dilations.end());
  std::string autoPad = ctx.stringAttr("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    w.pads.assign(pads.begin(), pads.end());
  } else if (autoPad == "VALID") {
    w.pads.assign(4, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    w.pads.assign(4, 0);
    for (int i = 0; i < 2; ++i) {
      int64_t in = input[2 + i], s = w.strides[i];
      int64_t out = (in + s - 1) / s;
      int64_t total = std::max<int64_t>(
          0, (out - 1) * s + (w.kernel[i] - 1) * w.dilations[i] + 1 - in);
      int64_t small = total / 2, large = total - small;
      w.pads[i] = autoPad == "SAME_UPPER" ? small : large;
      w.pads[i + 2] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else {
    return ctx.fail("unknown auto_pad '" + autoPad + "'");
  }
  for (int i = 0; i < 2; ++i)
    if (w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0)
      return ctx.fail("kernel, strides and dilations must be positive");
  if (llvm::any_of(w.pads, [](int64_t p) { return p < 0; }))
    return ctx.fail("negative pads are not supported");
  return w;
}

LogicalResult importConv(ImportContext &ctx) {
  auto x = ctx.input(0), w = ctx.input(1);
  if (failed(x) || failed(w))
    return failure();
  Value bias;
  if (ctx.hasInput(2)) {
    auto b = ctx.input(2);
    if (failed(b))
      return failure();
    bias = *b;
  }
  ArrayRef<int64_t> ws = shapeOf(*w);
  if (ws.size() != 4)
    return ctx.fail("only 2-D convolutions are supported (weight rank " +
                    Twine(ws.size()) + ")");
  auto window = readWindow(ctx, shapeOf(*x),
                           ctx.intsAttr("kernel_shape", {ws[2], ws[3]}));
  if (failed(window))
    return failure();
  if (window->kernel[0] != ws[2] || window->kernel[1] != ws[3])
    return ctx.fail("kernel_shape does not match the weight");
  int64_t group = ctx.intAttr("group", 1);
  int64_t channels = shapeOf(*x)[1];
  if (group <= 0 || channels % group || ws[0] % group ||
      ws[1] * group != channels)
    return ctx.fail("group " + Twine(group) +
                    " does not match the input and weight channels");
  OpBuilder &b = ctx.builder;
  auto conv = b.create<ConvOp>(
      ctx.loc(), *x, *w, bias, b.getDenseI64ArrayAttr(window->strides),
      b.getDenseI64ArrayAttr(window->pads),
      b.getDenseI64ArrayAttr(window->dilations), b.getI64IntegerAttr(group));
  if (shapeOf(conv)[2] <= 0 || shapeOf(conv)[3] <= 0)
    return ctx.fail("the kernel does not fit the padded input");
  ctx.bind(0, conv);
  return success();
}

template <typename Op> LogicalResult importPool(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  auto window = readWindow(ctx, shapeOf(*x), ctx.intsAttr("kernel_shape", {}));
  if (failed(window))
    return failure();
  if (ctx.hasOutput(1))
    return ctx.fail("the Indices output is not supported");
  if (ctx.intAttr("storage_order", 0) != 0)
    return ctx.fail("storage_order 1 (column-major) is not supported");
  for (int i = 0; i < 2; ++i)
    if (window->pads[i] >= window->kernel[i] ||
        window->pads[i + 2] >= window->kernel[i])
      return ctx.fail("pads must be smaller than the kernel");
  OpBuilder &b = ctx.builder;
  bool ceil = ctx.intAttr("ceil_mode", 0);
  Value y;
  if constexpr (std::is_same_v<Op, AvgPoolOp>) {
    if (window->dilations[0] != 1 || window->dilations[1] != 1)
      return ctx.fail("dilated average pooling is not supported");
    y = b.create<AvgPoolOp>(
        ctx.loc(), *x, b.getDenseI64ArrayAttr(window->kernel),
        b.getDenseI64ArrayAttr(window->strides),
        b.getDenseI64ArrayAttr(window->pads),
        b.getDenseI64ArrayAttr(window->dilations), b.getBoolAttr(ceil),
        b.getBoolAttr(ctx.intAttr("count_include_pad", 0)));
  } else {
    y = b.create<MaxPoolOp>(ctx.loc(), *x,
                            b.getDenseI64ArrayAttr(window->kernel),
                            b.getDenseI64ArrayAttr(window->strides),
                            b.getDenseI64ArrayAttr(window->pads),
                            b.getDenseI64ArrayAttr(window->dilations),
                            b.getBoolAttr(ceil));
  }
  if (shapeOf(y)[2] <= 0 || shapeOf(y)[3] <= 0)
    return ctx.fail("the window does not fit the padded input");
  ctx.bind(0, y);
  return success();
}

LogicalResult importGlobalAveragePool(ImportContext &ctx) {
  auto x = ctx.input(0);
  if (failed(x))
    return failure();
  if (shapeOf(*x).size() < 3)
    return ctx.fail("expects an input of rank >= 3");
  ctx.bind(0, ctx.builder.create<GlobalAvgPoolOp>(ctx.loc(), *x));
  return success();
}

} // namespace

void mtc::import::registerConvPoolImporters(
    llvm::StringMap<OpImporter> &table) {
  table["AveragePool"] = importPool<AvgPoolOp>;
  table["Conv"] = importConv;
  table["GlobalAveragePool"] = importGlobalAveragePool;
  table["MaxPool"] = importPool<MaxPoolOp>;
}
