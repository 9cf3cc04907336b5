//===- Npy.h - Reading NumPy .npy files -------------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Training data is a directory of .npy files, one per graph input. Only what
// a trainer can feed is accepted: format versions 1.0, 2.0 and 3.0, C order,
// little-endian float32 ('<f4') and int64 ('<i8'). Labels saved as int32
// ('<i4', NumPy's default integer on some platforms) are widened to int64 on
// load so that users do not have to convert them by hand.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_NPY_H
#define MTC_RUNTIME_NPY_H

#include "mtc/runtime/Status.h"
#include "mtc/runtime/Trainer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mtc::rt {

/// A parsed .npy array. Files are memory-mapped so that large data sets are
/// paged in on demand instead of being copied up front.
class NpyArray {
public:
  NpyArray() = default;
  NpyArray(const NpyArray &) = delete;
  NpyArray &operator=(const NpyArray &) = delete;
  NpyArray(NpyArray &&other) noexcept;
  NpyArray &operator=(NpyArray &&other) noexcept;
  ~NpyArray();

  /// Maps and parses the file at `path`.
  Status open(const std::string &path);

  /// Parses an in-memory .npy image. Unless a conversion is needed, the
  /// array refers to `bytes`, which must outlive it. `what` names the image
  /// in error messages.
  Status parse(const unsigned char *bytes, uint64_t size,
               const std::string &what);

  /// Element type after conversion ('<i4' reads as I64).
  DType dtype() const { return elementType; }
  /// The dtype string as stored in the file, e.g. "<f4".
  const std::string &descr() const { return fileDescr; }
  const std::vector<int64_t> &shape() const { return dims; }
  /// Number of elements (1 for a 0-d array).
  int64_t numElements() const;
  /// Row-major element data after conversion.
  const unsigned char *data() const { return payload; }
  uint64_t dataBytes() const { return payloadBytes; }

private:
  void reset();

  DType elementType = DType::F32;
  std::string fileDescr;
  std::vector<int64_t> dims;
  const unsigned char *payload = nullptr;
  uint64_t payloadBytes = 0;
  /// Holds converted data when the file's dtype is widened.
  std::vector<unsigned char> converted;
  void *mapping = nullptr;
  uint64_t mappingBytes = 0;
};

/// Writes a C-order .npy (format 1.0) file of `dtype` and `shape`
/// atomically (temporary file + rename).
Status writeNpy(const std::string &path, DType dtype,
                const std::vector<int64_t> &shape, const void *data,
                uint64_t bytes);

} // namespace mtc::rt

#endif // MTC_RUNTIME_NPY_H
