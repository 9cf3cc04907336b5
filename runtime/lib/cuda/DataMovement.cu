//===- DataMovement.cu - fill, copies, strided copies ---------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <string>

namespace mtc::rt {

namespace {

/// Passed by value so that the kernel needs no device copy of the shape.
struct StridedCopyArgs {
  int rank;
  int64_t shape[kMaxRank];
  int64_t srcStrides[kMaxRank];
  int64_t dstStrides[kMaxRank];
};

__global__ void fillKernel(float *y, int64_t n, float value) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    y[i] = value;
}

/// One thread per element of `shape`, consecutive threads along the last
/// dim so that at least one side of a transpose is coalesced.
/// The identity conversion of a plain copy, and the roundings to 16 bits.
struct Same {
  template <typename T> __device__ T operator()(T v) const { return v; }
};
struct ToBf16 {
  __device__ uint16_t operator()(float v) const { return floatToBf16(v); }
};
struct ToHalf {
  __device__ uint16_t operator()(float v) const { return floatToHalf(v); }
};

template <typename S, typename T, typename Convert = Same>
__global__ void stridedCopyKernel(StridedCopyArgs args, int64_t total,
                                  const S *src, T *dst, Convert convert = {}) {
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    int64_t rest = idx, srcAt = 0, dstAt = 0;
    for (int d = args.rank - 1; d >= 0; --d) {
      int64_t i = rest % args.shape[d];
      rest /= args.shape[d];
      srcAt += i * args.srcStrides[d];
      dstAt += i * args.dstStrides[d];
    }
    dst[dstAt] = convert(src[srcAt]);
  }
}

template <bool Bf16>
__global__ void widen16Kernel(const uint16_t *x, int64_t n, float *y) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    y[i] = Bf16 ? bf16ToFloat(x[i]) : halfToFloat(x[i]);
}

} // namespace

void widen16(Context &ctx, Storage16 storage, const uint16_t *x, int64_t n,
             float *y) {
  if (n <= 0)
    return;
  if (storage == Storage16::Bf16)
    widen16Kernel<true><<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(
        x, n, y);
  else
    widen16Kernel<false><<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(
        x, n, y);
  checkLaunch(ctx, "widen16Kernel");
}

void fill(Context &ctx, float *y, int64_t n, float value) {
  if (n <= 0)
    return;
  fillKernel<<<cuda::gridFor(n), cuda::kBlock, 0, ctx.stream>>>(y, n, value);
  checkLaunch(ctx, "fillKernel");
}

void copyBytes(Context &ctx, void *dst, const void *src, uint64_t bytes) {
  if (bytes == 0)
    return;
  cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream);
  if (error != cudaSuccess)
    reportError(ctx, std::string("copyBytes: ") + cudaGetErrorString(error));
}

namespace {

/// The kernel's arguments and element count for `shape`; false (after
/// reporting an unsupported rank to `ctx` as `name`'s error) when there is
/// nothing to launch.
bool stridedArgs(Context &ctx, const char *name, int rank,
                 const int64_t *shape, const int64_t *srcStrides,
                 const int64_t *dstStrides, StridedCopyArgs &args,
                 int64_t &total) {
  if (rank < 0 || rank > kMaxRank) {
    reportError(ctx, std::string(name) + ": unsupported rank " +
                         std::to_string(rank));
    return false;
  }
  args = {};
  args.rank = rank;
  total = 1;
  for (int i = 0; i < rank; ++i) {
    args.shape[i] = shape[i];
    args.srcStrides[i] = srcStrides[i];
    args.dstStrides[i] = dstStrides[i];
    total *= shape[i];
  }
  return total > 0;
}

} // namespace

void stridedCopy(Context &ctx, int rank, const int64_t *shape, const void *src,
                 int64_t srcOffset, const int64_t *srcStrides, void *dst,
                 int64_t dstOffset, const int64_t *dstStrides, int elemBytes) {
  if (elemBytes != 1 && elemBytes != 2 && elemBytes != 4 && elemBytes != 8) {
    reportError(ctx, "stridedCopy: unsupported element size " +
                         std::to_string(elemBytes));
    return;
  }
  StridedCopyArgs args;
  int64_t total;
  if (!stridedArgs(ctx, "stridedCopy", rank, shape, srcStrides, dstStrides,
                   args, total))
    return;
  if (elemBytes == 1)
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, static_cast<const uint8_t *>(src) + srcOffset,
        static_cast<uint8_t *>(dst) + dstOffset);
  else if (elemBytes == 2)
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, static_cast<const uint16_t *>(src) + srcOffset,
        static_cast<uint16_t *>(dst) + dstOffset);
  else if (elemBytes == 4)
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, static_cast<const uint32_t *>(src) + srcOffset,
        static_cast<uint32_t *>(dst) + dstOffset);
  else
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, static_cast<const uint64_t *>(src) + srcOffset,
        static_cast<uint64_t *>(dst) + dstOffset);
  checkLaunch(ctx, "stridedCopyKernel");
}

void stridedCopyTo16(Context &ctx, Storage16 storage, int rank,
                     const int64_t *shape, const float *src,
                     int64_t srcOffset, const int64_t *srcStrides,
                     uint16_t *dst, int64_t dstOffset,
                     const int64_t *dstStrides) {
  StridedCopyArgs args;
  int64_t total;
  if (!stridedArgs(ctx, "stridedCopyTo16", rank, shape, srcStrides,
                   dstStrides, args, total))
    return;
  if (storage == Storage16::Bf16)
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, src + srcOffset, dst + dstOffset, ToBf16());
  else
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, src + srcOffset, dst + dstOffset, ToHalf());
  checkLaunch(ctx, "stridedCopyKernel");
}

} // namespace mtc::rt
