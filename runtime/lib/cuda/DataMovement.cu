//===- DataMovement.cu - fill, copies, strided copies ---------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "KernelCommon.h"
#include "Launch.h"

#include "mtc/runtime/Half.h"
#include "mtc/runtime/Kernels.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace mtc::rt {

namespace {

/// Passed by value so that the kernel needs no device copy of the shape.
/// `Index` is int32_t when every index and offset of the copy fits (32-bit
/// division is several times cheaper than 64-bit on the GPU), else
/// int64_t.
template <typename Index> struct StridedCopyArgs {
  int rank;
  Index shape[kMaxRank];
  Index srcStrides[kMaxRank];
  Index dstStrides[kMaxRank];
};

__global__ void fillKernel(float *y, int64_t n, float value) {
  for (int64_t i = cuda::threadIndex(); i < n; i += cuda::threadCount())
    y[i] = value;
}

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

/// One thread per element of `shape`, consecutive threads along the last
/// dim so that at least one side of a transpose is coalesced.
template <typename Index, typename S, typename T, typename Convert>
__global__ void stridedCopyKernel(StridedCopyArgs<Index> args, int64_t total,
                                  const S *src, T *dst, Convert convert) {
  for (int64_t idx = cuda::threadIndex(); idx < total;
       idx += cuda::threadCount()) {
    Index rest = static_cast<Index>(idx), srcAt = 0, dstAt = 0;
    // Unrolled over every possible dim so that args is indexed by
    // constants (a runtime index would copy it to local memory).
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d >= args.rank)
        continue;
      Index i = rest % args.shape[d];
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
                 const int64_t *dstStrides, StridedCopyArgs<int64_t> &args,
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

/// Launches the copy with 32-bit index math when every element index and
/// every offset it reaches fits in 31 bits.
template <typename S, typename T, typename Convert = Same>
void launchStridedCopy(Context &ctx, const StridedCopyArgs<int64_t> &args,
                       int64_t total, const S *src, T *dst,
                       Convert convert = {}) {
  int64_t srcReach = 0, dstReach = 0;
  for (int d = 0; d < args.rank; ++d) {
    srcReach += (args.shape[d] - 1) * std::abs(args.srcStrides[d]);
    dstReach += (args.shape[d] - 1) * std::abs(args.dstStrides[d]);
  }
  if (std::max({total, srcReach, dstReach}) <= INT32_MAX) {
    StridedCopyArgs<int32_t> narrow = {};
    narrow.rank = args.rank;
    for (int d = 0; d < args.rank; ++d) {
      narrow.shape[d] = static_cast<int32_t>(args.shape[d]);
      narrow.srcStrides[d] = static_cast<int32_t>(args.srcStrides[d]);
      narrow.dstStrides[d] = static_cast<int32_t>(args.dstStrides[d]);
    }
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        narrow, total, src, dst, convert);
  } else {
    stridedCopyKernel<<<cuda::gridFor(total), cuda::kBlock, 0, ctx.stream>>>(
        args, total, src, dst, convert);
  }
  checkLaunch(ctx, "stridedCopyKernel");
}

} // namespace

void stridedCopy(Context &ctx, int rank, const int64_t *shape, const void *src,
                 int64_t srcOffset, const int64_t *srcStrides, void *dst,
                 int64_t dstOffset, const int64_t *dstStrides, int elemBytes) {
  bool known = withElementWord(elemBytes, [&](auto *word) {
    using Word = std::remove_pointer_t<decltype(word)>;
    StridedCopyArgs<int64_t> args;
    int64_t total;
    if (stridedArgs(ctx, "stridedCopy", rank, shape, srcStrides, dstStrides,
                    args, total))
      launchStridedCopy(ctx, args, total,
                        static_cast<const Word *>(src) + srcOffset,
                        static_cast<Word *>(dst) + dstOffset);
  });
  if (!known)
    reportError(ctx, badElementSizeMessage("stridedCopy", elemBytes));
}

void stridedCopyTo16(Context &ctx, Storage16 storage, int rank,
                     const int64_t *shape, const float *src,
                     int64_t srcOffset, const int64_t *srcStrides,
                     uint16_t *dst, int64_t dstOffset,
                     const int64_t *dstStrides) {
  StridedCopyArgs<int64_t> args;
  int64_t total;
  if (!stridedArgs(ctx, "stridedCopyTo16", rank, shape, srcStrides,
                   dstStrides, args, total))
    return;
  if (storage == Storage16::Bf16)
    launchStridedCopy(ctx, args, total, src + srcOffset, dst + dstOffset,
                      ToBf16());
  else
    launchStridedCopy(ctx, args, total, src + srcOffset, dst + dstOffset,
                      ToHalf());
}

} // namespace mtc::rt
