//===- Status.h - Error reporting without exceptions ------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The runtime is built without exceptions and must never abort on bad input,
// so every fallible host operation (file I/O, parsing, device calls) returns
// a Status that carries a message meant for the user.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_STATUS_H
#define MTC_RUNTIME_STATUS_H

#include <string>
#include <utility>

namespace mtc::rt {

/// Success, or failure with a human-readable message (no "error:" prefix;
/// the caller decides how to present it).
class [[nodiscard]] Status {
public:
  Status() = default;

  static Status success() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed = true;
    s.text = std::move(message);
    return s;
  }

  bool ok() const { return !failed; }
  const std::string &message() const { return text; }

private:
  bool failed = false;
  std::string text;
};

} // namespace mtc::rt

#endif // MTC_RUNTIME_STATUS_H
