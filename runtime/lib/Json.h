//===- Json.h - A small JSON reader for safetensors headers -----*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Safetensors headers are small JSON objects; this reader covers the full
// JSON grammar (so that valid files written by other tools parse) but keeps
// numbers as text, since headers only hold integers that must not lose
// precision through a double.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_RUNTIME_LIB_JSON_H
#define MTC_RUNTIME_LIB_JSON_H

#include "mtc/runtime/Status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mtc::rt::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  /// The decoded string, or the number's text.
  std::string text;
  std::vector<Value> items;
  /// Members in document order; duplicate keys are rejected by the parser.
  std::vector<std::pair<std::string, Value>> members;

  /// The value as a non-negative integer that fits in int64 (no sign,
  /// fraction or exponent); false otherwise.
  bool asIndex(int64_t &out) const;
};

/// Parses exactly one JSON value from text (surrounding whitespace allowed).
Status parse(const char *text, uint64_t size, Value &out);

/// `s` as a JSON string literal, quotes included.
std::string quote(const std::string &s);

} // namespace mtc::rt::json

#endif // MTC_RUNTIME_LIB_JSON_H
