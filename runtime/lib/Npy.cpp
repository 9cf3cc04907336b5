//===- Npy.cpp - Reading NumPy .npy files ---------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The format (numpy.lib.format): the magic "\x93NUMPY", a major and minor
// version byte, a little-endian header length (2 bytes in version 1, 4 bytes
// in versions 2 and 3), then a Python dict literal with the keys 'descr',
// 'fortran_order' and 'shape', padded with spaces and ended by '\n'. The
// data follows immediately.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mtc::rt {

namespace {

/// Parses the header dict. Only the subset np.save writes is accepted:
/// string, bool and tuple-of-int values.
class HeaderParser {
public:
  HeaderParser(const std::string &text) : s(text) {}

  Status parse(std::string &descr, bool &fortranOrder,
               std::vector<int64_t> &shape) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    skipSpace();
    if (!consume('{'))
      return fail("expected '{'");
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (!parseString(key))
        return fail("expected a quoted key");
      skipSpace();
      if (!consume(':'))
        return fail("expected ':' after '" + key + "'");
      skipSpace();
      if (key == "descr") {
        if (pos < s.size() && s[pos] == '[')
          return Status::error("structured dtypes are not supported");
        if (!parseString(descr))
          return fail("'descr' must be a string");
        haveDescr = true;
      } else if (key == "fortran_order") {
        if (consumeWord("True"))
          fortranOrder = true;
        else if (consumeWord("False"))
          fortranOrder = false;
        else
          return fail("'fortran_order' must be True or False");
        haveOrder = true;
      } else if (key == "shape") {
        if (Status st = parseShape(shape); !st.ok())
          return st;
        haveShape = true;
      } else {
        return fail("unexpected key '" + key + "'");
      }
      skipSpace();
      if (consume(','))
        continue;
      if (consume('}'))
        break;
      return fail("expected ',' or '}'");
    }
    skipSpace();
    if (pos != s.size())
      return fail("unexpected text after the dict");
    if (!haveDescr || !haveOrder || !haveShape)
      return fail("the header must have 'descr', 'fortran_order' and 'shape'");
    return Status::success();
  }

private:
  Status fail(const std::string &what) const {
    return Status::error("malformed header: " + what + " at header offset " +
                         std::to_string(pos));
  }

  void skipSpace() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' ||
                              s[pos] == '\t' || s[pos] == '\r'))
      ++pos;
  }
  bool consume(char c) {
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool consumeWord(const char *word) {
    size_t n = std::strlen(word);
    if (s.compare(pos, n, word) != 0)
      return false;
    pos += n;
    return true;
  }
  bool parseString(std::string &out) {
    if (pos >= s.size() || (s[pos] != '\'' && s[pos] != '"'))
      return false;
    char quote = s[pos++];
    size_t close = s.find(quote, pos);
    if (close == std::string::npos)
      return false;
    out = s.substr(pos, close - pos);
    pos = close + 1;
    return true;
  }
  Status parseShape(std::vector<int64_t> &shape) {
    shape.clear();
    if (!consume('('))
      return fail("'shape' must be a tuple");
    while (true) {
      skipSpace();
      if (consume(')'))
        return Status::success();
      size_t first = pos;
      int64_t v = 0;
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
        int digit = s[pos] - '0';
        if (v > (INT64_MAX - digit) / 10)
          return fail("dimension too large");
        v = v * 10 + digit;
        ++pos;
      }
      if (pos == first)
        return fail("expected a non-negative integer dimension");
      consume('L'); // Python 2 long literals, e.g. (3L, 4L)
      shape.push_back(v);
      skipSpace();
      if (consume(','))
        continue;
      if (consume(')'))
        return Status::success();
      return fail("expected ',' or ')' in 'shape'");
    }
  }

  const std::string &s;
  size_t pos = 0;
};

uint32_t readLittleEndian(const unsigned char *p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

} // namespace

NpyArray::NpyArray(NpyArray &&other) noexcept { *this = std::move(other); }

NpyArray &NpyArray::operator=(NpyArray &&other) noexcept {
  if (this == &other)
    return *this;
  reset();
  elementType = other.elementType;
  fileDescr = std::move(other.fileDescr);
  dims = std::move(other.dims);
  // A vector's buffer survives the move, so the payload pointer stays valid.
  bool ownsPayload =
      !other.converted.empty() && other.payload == other.converted.data();
  converted = std::move(other.converted);
  payload = ownsPayload ? converted.data() : other.payload;
  payloadBytes = other.payloadBytes;
  mapping = other.mapping;
  mappingBytes = other.mappingBytes;
  other.mapping = nullptr;
  other.mappingBytes = 0;
  other.payload = nullptr;
  other.payloadBytes = 0;
  return *this;
}

NpyArray::~NpyArray() { reset(); }

void NpyArray::reset() {
  if (mapping)
    munmap(mapping, mappingBytes);
  mapping = nullptr;
  mappingBytes = 0;
  payload = nullptr;
  payloadBytes = 0;
  converted.clear();
  dims.clear();
  fileDescr.clear();
}

int64_t NpyArray::numElements() const {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

Status NpyArray::open(const std::string &path) {
  reset();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("'" + path + "' is not a regular file");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status::error("'" + path + "' is empty, not a .npy file");
  }
  void *map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (map == MAP_FAILED)
    return Status::error("cannot map '" + path +
                         "': " + std::strerror(mapErrno));
  Status s = parse(static_cast<const unsigned char *>(map), size, path);
  // parse() resets the object first, so take ownership of the map after.
  mapping = map;
  mappingBytes = size;
  if (!s.ok())
    reset();
  return s;
}

Status NpyArray::parse(const unsigned char *bytes, uint64_t size,
                       const std::string &what) {
  reset();
  auto fail = [&](const std::string &msg) {
    return Status::error("'" + what + "': " + msg);
  };
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(bytes, magic, 6) != 0)
    return fail("not a .npy file (missing the \\x93NUMPY magic)");
  int major = bytes[6], minor = bytes[7];
  uint64_t headerStart, headerLen;
  if (major == 1) {
    headerStart = 10;
    headerLen = readLittleEndian(bytes + 8, 2);
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return fail("truncated .npy header");
    headerStart = 12;
    headerLen = readLittleEndian(bytes + 8, 4);
  } else {
    return fail("unsupported .npy format version " + std::to_string(major) +
                "." + std::to_string(minor) + " (1.0, 2.0 and 3.0 are)");
  }
  if (headerLen > size - headerStart)
    return fail("truncated .npy header (header length " +
                std::to_string(headerLen) + " exceeds the file)");
  std::string header(reinterpret_cast<const char *>(bytes + headerStart),
                     headerLen);
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  if (Status s = HeaderParser(header).parse(descr, fortranOrder, shape);
      !s.ok())
    return fail(s.message());
  if (fortranOrder)
    return fail("Fortran-order arrays are not supported; save a C-order "
                "array (np.ascontiguousarray)");

  uint64_t itemSize;
  bool widen = false;
  if (descr == "<f4") {
    elementType = DType::F32;
    itemSize = 4;
  } else if (descr == "<i8") {
    elementType = DType::I64;
    itemSize = 8;
  } else if (descr == "<i4") {
    elementType = DType::I64;
    itemSize = 4;
    widen = true;
  } else if (descr == "|b1") {
    elementType = DType::Bool;
    itemSize = 1;
  } else {
    return fail("dtype '" + descr +
                "' is not supported (use '<f4' float32, '<i8' int64 or "
                "'|b1' bool)");
  }

  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > UINT64_MAX / itemSize / static_cast<uint64_t>(d))
      return fail("shape is too large");
    count *= static_cast<uint64_t>(d);
  }
  uint64_t dataStart = headerStart + headerLen;
  uint64_t dataBytes = count * itemSize;
  uint64_t available = size - dataStart;
  if (available < dataBytes)
    return fail("truncated: the shape needs " + std::to_string(dataBytes) +
                " data bytes but the file has " + std::to_string(available));
  if (available > dataBytes)
    return fail("has " + std::to_string(available - dataBytes) +
                " unexpected bytes after the data");

  fileDescr = descr;
  dims = shape;
  const unsigned char *data = bytes + dataStart;
  if (!widen) {
    payload = data;
    payloadBytes = dataBytes;
    return Status::success();
  }
  converted.resize(count * sizeof(int64_t));
  for (uint64_t i = 0; i < count; ++i) {
    int32_t v;
    std::memcpy(&v, data + i * 4, 4);
    int64_t wide = v;
    std::memcpy(converted.data() + i * 8, &wide, 8);
  }
  payload = converted.data();
  payloadBytes = converted.size();
  return Status::success();
}

Status writeNpy(const std::string &path, DType dtype,
                const std::vector<int64_t> &shape, const void *data,
                uint64_t bytes) {
  std::string descr = dtype == DType::F32   ? "<f4"
                      : dtype == DType::I64 ? "<i8"
                                            : "|b1";
  std::string dims;
  for (int64_t d : shape)
    dims += std::to_string(d) + ", ";
  if (shape.size() > 1)
    dims.erase(dims.size() - 2); // (2, 3) but (2,) for one dim
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': (" + dims +
                       "), }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded to 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string image = std::string("\x93NUMPY\x01\x00", 8);
  image += static_cast<char>(header.size() & 0xff);
  image += static_cast<char>((header.size() >> 8) & 0xff);
  image += header;
  image.append(static_cast<const char *>(data), bytes);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + path + "': " +
                         std::strerror(errno));
  bool ok = std::fwrite(image.data(), 1, image.size(), f) == image.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error("cannot write '" + path + "': " +
                         std::strerror(errno));
  }
  return Status::success();
}

} // namespace mtc::rt
