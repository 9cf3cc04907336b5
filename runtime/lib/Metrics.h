//===- Metrics.h - Per-step metrics as JSON lines ---------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_METRICS_H
#define MTC_RUNTIME_LIB_METRICS_H

#include "mtc/runtime/Status.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace mtc::rt {

/// `value` with 9 significant digits, which round-trips any float. JSON has
/// no NaN or infinity, so those are written as Python's json module writes
/// and reads them (NaN, Infinity, -Infinity).
std::string formatFloatExact(float value);

/// Writes {"step":K,"loss":L,"time_ms":T} per line, and under loss scaling
/// also "loss_scale" (the scale the step ran with) and "skipped" (whether
/// its gradients overflowed, so that it changed nothing). Each line is
/// flushed so that a run that is killed keeps the metrics of the steps it
/// finished.
class MetricsWriter {
public:
  MetricsWriter() = default;
  MetricsWriter(const MetricsWriter &) = delete;
  MetricsWriter &operator=(const MetricsWriter &) = delete;
  ~MetricsWriter();

  /// Creates (truncates) the file.
  Status open(const std::string &path);
  Status write(int64_t step, float loss, double timeMs);
  Status write(int64_t step, float loss, double timeMs, float lossScale,
               bool skipped);
  Status close();
  bool isOpen() const { return file != nullptr; }

private:
  Status finishLine(int written);

  std::FILE *file = nullptr;
  std::string filePath;
};

} // namespace mtc::rt

#endif // MTC_RUNTIME_LIB_METRICS_H
