//===- Safetensors.h - Checkpoint files -------------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Checkpoints, initial parameter values and gradient dumps use the
// safetensors format (an 8-byte little-endian header length, a JSON header,
// then the raw tensor bytes) because PyTorch, JAX and NumPy users can read it
// without mtc. Files are written atomically: a killed run never leaves a torn
// checkpoint behind.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_SAFETENSORS_H
#define MTC_RUNTIME_SAFETENSORS_H

#include "mtc/runtime/Status.h"
#include "mtc/runtime/Trainer.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mtc::rt {

/// One tensor of a parsed safetensors image.
struct SafetensorsTensor {
  std::string name;
  /// The safetensors dtype name ("F32", "I64", "BF16", ...).
  std::string dtype;
  std::vector<int64_t> shape;
  /// Byte range in the data section (after the header).
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// A parsed and validated safetensors image: every tensor's byte range lies
/// in the file, matches its dtype and shape, and the ranges tile the data
/// section exactly, as the reference implementation requires.
class SafetensorsReader {
public:
  /// Reads the whole file at `path` and parses it.
  Status open(const std::string &path);
  /// Parses an image in memory; `bytes` must outlive the reader. `what`
  /// names the image in error messages.
  Status parse(const unsigned char *bytes, uint64_t size,
               const std::string &what);

  /// Tensors in header order.
  const std::vector<SafetensorsTensor> &tensors() const { return entries; }
  /// The tensor called `name`, or null.
  const SafetensorsTensor *find(const std::string &name) const;
  /// First byte of `tensor`'s data.
  const unsigned char *data(const SafetensorsTensor &tensor) const {
    return dataSection + tensor.begin;
  }
  /// The "__metadata__" string map (empty when absent).
  const std::map<std::string, std::string> &metadata() const { return meta; }

private:
  std::vector<unsigned char> owned;
  const unsigned char *dataSection = nullptr;
  std::vector<SafetensorsTensor> entries;
  std::map<std::string, std::string> meta;
};

/// A tensor to write; `data` holds `bytes` bytes, row-major.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void *data = nullptr;
  uint64_t bytes = 0;
};

/// Serializes `tensors` (sorted by name in the output) and `metadata` to a
/// safetensors image in memory.
Status encodeSafetensors(const std::vector<SafetensorsEntry> &tensors,
                         const std::map<std::string, std::string> &metadata,
                         std::vector<unsigned char> &out);

/// Writes a safetensors file atomically: the bytes go to "<path>.tmp.<pid>",
/// which is fsync'ed and renamed over `path`. On failure the temporary file
/// is removed and any previous file at `path` is left untouched.
Status writeSafetensors(const std::string &path,
                        const std::vector<SafetensorsEntry> &tensors,
                        const std::map<std::string, std::string> &metadata);

/// The safetensors dtype name of `dtype`.
const char *safetensorsDTypeName(DType dtype);

} // namespace mtc::rt

#endif // MTC_RUNTIME_SAFETENSORS_H
