//===- DeviceErrors.cu - Data errors found by kernels ---------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Kernels cannot call reportError, so the first bad label or index of a step
// is written to one small record in device memory, which
// device::synchronize() reads with the step's other results (the trainer
// waits there once anyway, for the loss). The record is a module global of a
// few bytes, not arena memory: the kernels still allocate nothing.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include <string>

namespace mtc::rt::cuda {

namespace {

__device__ DeviceErrorRecord gDeviceError;

/// The message (and batch row) the CPU library reports for the same error.
void reportRecord(Context &ctx, const DeviceErrorRecord &record) {
  if (record.kind == static_cast<int>(DeviceErrorKind::GatherIndex)) {
    reportError(ctx, badGatherIndexMessage(record.value, record.position,
                                           record.bound));
    return;
  }
  int64_t d = record.inner > 0 ? record.inner : 1;
  reportError(ctx,
              "label " + std::to_string(record.value) + " at batch position " +
                  std::to_string(record.position / d) +
                  (d > 1 ? ", element " + std::to_string(record.position % d)
                         : std::string()) +
                  " is outside the " + std::to_string(record.bound) +
                  " classes [0, " + std::to_string(record.bound) + ")",
              record.position / d);
}

} // namespace

DeviceErrorRecord *deviceErrorRecord(Context &ctx) {
  if (ctx.errorRecord)
    return static_cast<DeviceErrorRecord *>(ctx.errorRecord);
  void *address = nullptr;
  cudaError_t error = cudaGetSymbolAddress(&address, gDeviceError);
  if (error != cudaSuccess) {
    reportError(ctx, std::string("cannot find the device error record: ") +
                         cudaGetErrorString(error));
    return nullptr;
  }
  ctx.errorRecord = address;
  return static_cast<DeviceErrorRecord *>(address);
}

Status queueDeviceErrorsRead(Context &ctx, DeviceErrorRecord &record) {
  cudaError_t error =
      cudaMemcpyFromSymbolAsync(&record, gDeviceError, sizeof(record), 0,
                                cudaMemcpyDeviceToHost, ctx.stream);
  if (error != cudaSuccess)
    return Status::error(std::string("cannot read the device error record: ") +
                         cudaGetErrorString(error));
  return Status::success();
}

Status foldDeviceErrors(Context &ctx, const DeviceErrorRecord &record) {
  if (!record.failed)
    return Status::success();
  reportRecord(ctx, record);
  DeviceErrorRecord clean = {};
  cudaError_t error =
      cudaMemcpyToSymbolAsync(gDeviceError, &clean, sizeof(clean), 0,
                              cudaMemcpyHostToDevice, ctx.stream);
  if (error == cudaSuccess)
    error = cudaStreamSynchronize(ctx.stream);
  if (error != cudaSuccess)
    return Status::error(std::string("cannot reset the device error record: ") +
                         cudaGetErrorString(error));
  return Status::success();
}

} // namespace mtc::rt::cuda
