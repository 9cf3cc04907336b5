//===- MemorySize.cpp - Parsing and printing byte counts ------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "mtc/Driver/Driver.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <cmath>
#include <cstdlib>

using namespace mtc;

llvm::Expected<uint64_t> mtc::parseMemorySize(llvm::StringRef text) {
  llvm::StringRef trimmed = text.trim();
  size_t split = 0;
  while (split < trimmed.size() &&
         (llvm::isDigit(trimmed[split]) || trimmed[split] == '.'))
    ++split;
  llvm::StringRef number = trimmed.take_front(split);
  std::string unit = trimmed.drop_front(split).trim().lower();
  auto bad = [&] {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "invalid memory size '" + text +
            "' (expected e.g. 24GB, 24GiB, 1.5G, 800MB or a byte count)");
  };
  if (number.empty() || number.count('.') > 1)
    return bad();
  double value = std::strtod(number.str().c_str(), nullptr);
  double scale;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kb")
    scale = 1e3;
  else if (unit == "m" || unit == "mb")
    scale = 1e6;
  else if (unit == "g" || unit == "gb")
    scale = 1e9;
  else if (unit == "t" || unit == "tb")
    scale = 1e12;
  else if (unit == "kib")
    scale = 1024.0;
  else if (unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    return bad();
  double bytes = value * scale;
  if (bytes < 1 || bytes > 1.8e19)
    return bad();
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string mtc::formatBytes(uint64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = bytes;
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  if (unit == 0)
    os << bytes << " B";
  else
    os << llvm::format("%.2f %s", value, units[unit]);
  return out;
}
