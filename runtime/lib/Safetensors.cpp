//===- Safetensors.cpp - Checkpoint files ---------------------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// Validation follows the reference implementation (huggingface/safetensors):
// header at most 100 MB, known dtypes, byte ranges that match the shapes and
// tile the data section with no gap, overlap or trailing bytes.
//
//===----------------------------------------------------------------------===//

#include "mtc/runtime/Safetensors.h"

#include "Json.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mtc::rt {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;

/// Element size of a safetensors dtype, 0 when unknown.
uint64_t dtypeSize(const std::string &dtype) {
  static const struct {
    const char *name;
    uint64_t size;
  } table[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1},
               {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
               {"BF16", 2},    {"I32", 4}, {"U32", 4}, {"F32", 4},
               {"F64", 8},     {"I64", 8}, {"U64", 8}};
  for (const auto &entry : table)
    if (dtype == entry.name)
      return entry.size;
  return 0;
}

uint64_t dtypeSize(DType dtype) {
  return dtype == DType::I64 ? 8 : dtype == DType::Bool ? 1 : 4;
}

Status parseTensorEntry(const std::string &name, const json::Value &v,
                        SafetensorsTensor &out) {
  auto fail = [&](const std::string &msg) {
    return Status::error("tensor " + json::quote(name) + ": " + msg);
  };
  if (v.kind != json::Value::Kind::Object)
    return fail("expected an object with dtype, shape and data_offsets");
  bool haveDtype = false, haveShape = false, haveOffsets = false;
  out.name = name;
  for (const auto &[key, value] : v.members) {
    if (key == "dtype") {
      if (value.kind != json::Value::Kind::String || dtypeSize(value.text) == 0)
        return fail("unknown dtype " + (value.kind == json::Value::Kind::String
                                            ? json::quote(value.text)
                                            : std::string("(not a string)")));
      out.dtype = value.text;
      haveDtype = true;
    } else if (key == "shape") {
      if (value.kind != json::Value::Kind::Array)
        return fail("shape must be an array of integers");
      out.shape.clear();
      for (const json::Value &dim : value.items) {
        int64_t d;
        if (!dim.asIndex(d))
          return fail("shape must be an array of non-negative integers");
        out.shape.push_back(d);
      }
      haveShape = true;
    } else if (key == "data_offsets") {
      int64_t begin, end;
      if (value.kind != json::Value::Kind::Array || value.items.size() != 2 ||
          !value.items[0].asIndex(begin) || !value.items[1].asIndex(end) ||
          begin > end)
        return fail("data_offsets must be [begin, end] with begin <= end");
      out.begin = static_cast<uint64_t>(begin);
      out.end = static_cast<uint64_t>(end);
      haveOffsets = true;
    } else {
      return fail("unexpected key " + json::quote(key));
    }
  }
  if (!haveDtype || !haveShape || !haveOffsets)
    return fail("needs dtype, shape and data_offsets");
  uint64_t bytes = dtypeSize(out.dtype);
  for (int64_t d : out.shape) {
    if (d != 0 && bytes > UINT64_MAX / static_cast<uint64_t>(d))
      return fail("shape is too large");
    bytes *= static_cast<uint64_t>(d);
  }
  if (out.end - out.begin != bytes)
    return fail("data_offsets cover " + std::to_string(out.end - out.begin) +
                " bytes but dtype and shape need " + std::to_string(bytes));
  return Status::success();
}

std::string buildHeader(const std::vector<const SafetensorsEntry *> &sorted,
                        const std::map<std::string, std::string> &metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto &[key, value] : metadata) {
      if (!first)
        h += ",";
      first = false;
      h += json::quote(key) + ":" + json::quote(value);
    }
    h += "}";
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry *t : sorted) {
    if (h.size() > 1)
      h += ",";
    h += json::quote(t->name) + ":{\"dtype\":\"" +
         safetensorsDTypeName(t->dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < t->shape.size(); ++i)
      h += (i ? "," : "") + std::to_string(t->shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," +
         std::to_string(offset + t->bytes) + "]}";
    offset += t->bytes;
  }
  h += "}";
  // Pad with spaces so that the data section starts 8-byte aligned, which
  // lets readers map tensors in place.
  while (h.size() % 8 != 0)
    h += ' ';
  return h;
}

/// Checks the entries and returns them sorted by name.
Status checkEntries(const std::vector<SafetensorsEntry> &tensors,
                    std::vector<const SafetensorsEntry *> &sorted) {
  sorted.clear();
  for (const SafetensorsEntry &t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return Status::error("invalid tensor name " + json::quote(t.name));
    uint64_t bytes = dtypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0)
        return Status::error("tensor " + json::quote(t.name) +
                             " has a negative dimension");
      bytes *= static_cast<uint64_t>(d);
    }
    if (bytes != t.bytes || (bytes && !t.data))
      return Status::error(
          "tensor " + json::quote(t.name) + " has " + std::to_string(t.bytes) +
          " bytes of data but its shape needs " + std::to_string(bytes));
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const SafetensorsEntry *a, const SafetensorsEntry *b) {
              return a->name < b->name;
            });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->name == sorted[i - 1]->name)
      return Status::error("tensor name " + json::quote(sorted[i]->name) +
                           " is used twice");
  return Status::success();
}

void appendLength(std::string &out, uint64_t n) {
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>((n >> (8 * i)) & 0xFF);
}

bool writeAll(int fd, const void *data, uint64_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    // Linux caps one write() at about 2 GiB.
    size_t chunk = bytes > (1u << 30) ? (1u << 30) : static_cast<size_t>(bytes);
    ssize_t n = ::write(fd, p, chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      return false;
    }
    p += n;
    bytes -= static_cast<uint64_t>(n);
  }
  return true;
}

} // namespace

const char *safetensorsDTypeName(DType dtype) {
  return dtype == DType::I64 ? "I64" : dtype == DType::Bool ? "BOOL" : "F32";
}

const SafetensorsTensor *
SafetensorsReader::find(const std::string &name) const {
  for (const SafetensorsTensor &t : entries)
    if (t.name == name)
      return &t;
  return nullptr;
}

Status SafetensorsReader::open(const std::string &path) {
  owned.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("'" + path + "' is not a regular file");
  }
  std::vector<unsigned char> bytes(static_cast<size_t>(st.st_size));
  uint64_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      return Status::error("cannot read '" + path + "': " + std::strerror(err));
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  // The image is parsed from `owned`, whose buffer does not move afterwards.
  owned = std::move(bytes);
  return parse(owned.data(), owned.size(), path);
}

Status SafetensorsReader::parse(const unsigned char *bytes, uint64_t size,
                                const std::string &what) {
  entries.clear();
  meta.clear();
  dataSection = nullptr;
  auto fail = [&](const std::string &msg) {
    entries.clear();
    meta.clear();
    return Status::error("'" + what +
                         "' is not a valid safetensors file: " + msg);
  };
  if (size < 8)
    return fail("shorter than the 8-byte header length");
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | bytes[i];
  if (headerLen > kMaxHeaderBytes)
    return fail("header length " + std::to_string(headerLen) +
                " exceeds the 100 MB limit");
  if (headerLen > size - 8)
    return fail("header length " + std::to_string(headerLen) +
                " exceeds the file size " + std::to_string(size));
  const char *header = reinterpret_cast<const char *>(bytes + 8);
  if (headerLen == 0 || header[0] != '{')
    return fail("the header must be a JSON object");
  json::Value root;
  if (Status s = json::parse(header, headerLen, root); !s.ok())
    return fail("header: " + s.message());
  if (root.kind != json::Value::Kind::Object)
    return fail("the header must be a JSON object");

  uint64_t dataSize = size - 8 - headerLen;
  for (const auto &[name, value] : root.members) {
    if (name == "__metadata__") {
      if (value.kind == json::Value::Kind::Null)
        continue;
      if (value.kind != json::Value::Kind::Object)
        return fail("__metadata__ must be an object of strings");
      for (const auto &[key, item] : value.members) {
        if (item.kind != json::Value::Kind::String)
          return fail("__metadata__ value of " + json::quote(key) +
                      " is not a string");
        meta[key] = item.text;
      }
      continue;
    }
    SafetensorsTensor t;
    if (Status s = parseTensorEntry(name, value, t); !s.ok())
      return fail(s.message());
    entries.push_back(std::move(t));
  }

  std::vector<const SafetensorsTensor *> byOffset;
  for (const SafetensorsTensor &t : entries)
    byOffset.push_back(&t);
  std::sort(byOffset.begin(), byOffset.end(),
            [](const SafetensorsTensor *a, const SafetensorsTensor *b) {
              return a->begin != b->begin ? a->begin < b->begin
                                          : a->end < b->end;
            });
  uint64_t expected = 0;
  for (const SafetensorsTensor *t : byOffset) {
    if (t->begin != expected)
      return fail("tensor " + json::quote(t->name) + " starts at byte " +
                  std::to_string(t->begin) + " of the data but byte " +
                  std::to_string(expected) +
                  " was expected (tensors must not overlap or leave gaps)");
    expected = t->end;
  }
  if (expected != dataSize)
    return fail("the tensors cover " + std::to_string(expected) +
                " bytes but the data section has " + std::to_string(dataSize));
  dataSection = bytes + 8 + headerLen;
  return Status::success();
}

Status encodeSafetensors(const std::vector<SafetensorsEntry> &tensors,
                         const std::map<std::string, std::string> &metadata,
                         std::vector<unsigned char> &out) {
  std::vector<const SafetensorsEntry *> sorted;
  if (Status s = checkEntries(tensors, sorted); !s.ok())
    return s;
  std::string header = buildHeader(sorted, metadata);
  std::string prefix;
  appendLength(prefix, header.size());
  out.assign(prefix.begin(), prefix.end());
  out.insert(out.end(), header.begin(), header.end());
  for (const SafetensorsEntry *t : sorted) {
    const unsigned char *p = static_cast<const unsigned char *>(t->data);
    out.insert(out.end(), p, p + t->bytes);
  }
  return Status::success();
}

Status writeSafetensors(const std::string &path,
                        const std::vector<SafetensorsEntry> &tensors,
                        const std::map<std::string, std::string> &metadata) {
  std::vector<const SafetensorsEntry *> sorted;
  if (Status s = checkEntries(tensors, sorted); !s.ok())
    return Status::error("cannot write '" + path + "': " + s.message());
  std::string header = buildHeader(sorted, metadata);
  std::string prefix;
  appendLength(prefix, header.size());

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char *step, int err) {
    ::unlink(tmp.c_str());
    return Status::error("cannot write '" + path + "' (" + step +
                         "): " + std::strerror(err));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::error("cannot write '" + path + "': cannot create '" + tmp +
                         "': " + std::strerror(errno));
  bool ok = writeAll(fd, prefix.data(), prefix.size()) &&
            writeAll(fd, header.data(), header.size());
  for (const SafetensorsEntry *t : sorted)
    ok = ok && writeAll(fd, t->data, t->bytes);
  if (!ok) {
    int err = errno;
    ::close(fd);
    return fail("write", err);
  }
  // The data must be on disk before the rename makes it visible; otherwise
  // a crash could leave an empty file under the final name.
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return fail("fsync", err);
  }
  if (::close(fd) != 0)
    return fail("close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail("rename", errno);
  // Persist the rename itself; failing to is not worth failing the save.
  std::string dir = ".";
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos)
    dir = slash == 0 ? "/" : path.substr(0, slash);
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return Status::success();
}

} // namespace mtc::rt
