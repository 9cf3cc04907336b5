//===- Context.cpp - Per-run state shared by the kernels ------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Context.h"

#include "mtc/runtime/Trainer.h"

namespace mtc::rt {

void reportError(Context &ctx, const std::string &message, int64_t batchRow) {
  std::lock_guard<std::mutex> lock(ctx.errorMutex);
  if (ctx.failed.load(std::memory_order_relaxed))
    return;
  ctx.firstError = message;
  ctx.firstErrorBatchRow = batchRow;
  ctx.failed.store(true, std::memory_order_release);
}

ContextError takeError(Context &ctx) {
  std::lock_guard<std::mutex> lock(ctx.errorMutex);
  ContextError error{std::move(ctx.firstError), ctx.firstErrorBatchRow};
  ctx.firstError.clear();
  ctx.firstErrorBatchRow = -1;
  ctx.failed.store(false, std::memory_order_release);
  return error;
}

int64_t stepCounter(const Context &ctx) { return ctx.step; }

int64_t batchCounter(const Context &ctx) { return ctx.batch; }

int64_t microBatch(const Context &ctx) { return ctx.microBatch; }

uint64_t trainingSeed(const Context &ctx) { return ctx.seed; }

void reportDataError(Context &ctx, const char *message) {
  reportError(ctx, message ? message : "unknown data error");
}

} // namespace mtc::rt
