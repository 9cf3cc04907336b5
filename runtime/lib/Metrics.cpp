//===- Metrics.cpp - Per-step metrics as JSON lines -----------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Metrics.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>

namespace mtc::rt {

std::string formatFloatExact(float value) {
  if (std::isnan(value))
    return "NaN";
  if (std::isinf(value))
    return value > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(value));
  return buf;
}

MetricsWriter::~MetricsWriter() {
  if (file)
    std::fclose(file);
}

Status MetricsWriter::open(const std::string &path) {
  filePath = path;
  file = std::fopen(path.c_str(), "w");
  if (!file)
    return Status::error("cannot create metrics file '" + path +
                         "': " + std::strerror(errno));
  return Status::success();
}

// Written with fprintf into the stream: the step loop allocates nothing.
Status MetricsWriter::finishLine(int written) {
  if (written < 0 || std::fflush(file) != 0)
    return Status::error("cannot write metrics file '" + filePath +
                         "': " + std::strerror(errno));
  return Status::success();
}

Status MetricsWriter::write(int64_t step, float loss, double timeMs) {
  if (!file)
    return Status::success();
  return finishLine(std::fprintf(
      file, "{\"step\":%" PRId64 ",\"loss\":%s,\"time_ms\":%.3f}\n", step,
      formatFloatExact(loss).c_str(), timeMs));
}

Status MetricsWriter::write(int64_t step, float loss, double timeMs,
                            float lossScale, bool skipped) {
  if (!file)
    return Status::success();
  return finishLine(std::fprintf(
      file,
      "{\"step\":%" PRId64 ",\"loss\":%s,\"time_ms\":%.3f,"
      "\"loss_scale\":%s,\"skipped\":%s}\n",
      step, formatFloatExact(loss).c_str(), timeMs,
      formatFloatExact(lossScale).c_str(), skipped ? "true" : "false"));
}

Status MetricsWriter::close() {
  if (!file)
    return Status::success();
  int rc = std::fclose(file);
  file = nullptr;
  if (rc != 0)
    return Status::error("cannot write metrics file '" + filePath +
                         "': " + std::strerror(errno));
  return Status::success();
}

} // namespace mtc::rt
