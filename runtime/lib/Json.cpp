//===- Json.cpp - A small JSON reader for safetensors headers -------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "Json.h"

#include <cstdint>
#include <cstdio>

namespace mtc::rt::json {

namespace {

/// Nesting limit: safetensors headers are two levels deep, and recursion on
/// untrusted input must not be able to exhaust the stack.
constexpr int kMaxDepth = 64;

class Parser {
public:
  Parser(const char *text, uint64_t size) : cur(text), end(text + size) {}

  Status parseDocument(Value &out) {
    skipSpace();
    if (Status s = parseValue(out, 0); !s.ok())
      return s;
    skipSpace();
    if (cur != end)
      return fail("unexpected text after the JSON value");
    return Status::success();
  }

private:
  Status fail(const std::string &what) const {
    return Status::error("invalid JSON at offset " + std::to_string(offset()) +
                         ": " + what);
  }
  uint64_t offset() const { return static_cast<uint64_t>(cur - start); }

  void skipSpace() {
    while (cur != end &&
           (*cur == ' ' || *cur == '\t' || *cur == '\n' || *cur == '\r'))
      ++cur;
  }

  bool consumeWord(const char *word) {
    const char *p = cur;
    for (; *word; ++word, ++p)
      if (p == end || *p != *word)
        return false;
    cur = p;
    return true;
  }

  Status parseValue(Value &out, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (cur == end)
      return fail("unexpected end of input");
    switch (*cur) {
    case '{':
      return parseObject(out, depth);
    case '[':
      return parseArray(out, depth);
    case '"':
      out.kind = Value::Kind::String;
      return parseString(out.text);
    case 't':
    case 'f':
    case 'n':
      if (consumeWord("true")) {
        out.kind = Value::Kind::Bool;
        out.boolean = true;
      } else if (consumeWord("false")) {
        out.kind = Value::Kind::Bool;
        out.boolean = false;
      } else if (consumeWord("null")) {
        out.kind = Value::Kind::Null;
      } else {
        return fail("unknown literal");
      }
      return Status::success();
    default:
      return parseNumber(out);
    }
  }

  Status parseObject(Value &out, int depth) {
    out.kind = Value::Kind::Object;
    ++cur; // '{'
    skipSpace();
    if (cur != end && *cur == '}') {
      ++cur;
      return Status::success();
    }
    while (true) {
      skipSpace();
      if (cur == end || *cur != '"')
        return fail("expected a string key");
      std::string key;
      if (Status s = parseString(key); !s.ok())
        return s;
      for (const auto &member : out.members)
        if (member.first == key)
          return fail("duplicate key " + quote(key));
      skipSpace();
      if (cur == end || *cur != ':')
        return fail("expected ':' after key " + quote(key));
      ++cur;
      skipSpace();
      out.members.emplace_back(std::move(key), Value());
      if (Status s = parseValue(out.members.back().second, depth + 1); !s.ok())
        return s;
      skipSpace();
      if (cur != end && *cur == ',') {
        ++cur;
        continue;
      }
      if (cur != end && *cur == '}') {
        ++cur;
        return Status::success();
      }
      return fail("expected ',' or '}' in object");
    }
  }

  Status parseArray(Value &out, int depth) {
    out.kind = Value::Kind::Array;
    ++cur; // '['
    skipSpace();
    if (cur != end && *cur == ']') {
      ++cur;
      return Status::success();
    }
    while (true) {
      skipSpace();
      out.items.emplace_back();
      if (Status s = parseValue(out.items.back(), depth + 1); !s.ok())
        return s;
      skipSpace();
      if (cur != end && *cur == ',') {
        ++cur;
        continue;
      }
      if (cur != end && *cur == ']') {
        ++cur;
        return Status::success();
      }
      return fail("expected ',' or ']' in array");
    }
  }

  Status parseNumber(Value &out) {
    const char *first = cur;
    auto digits = [&]() {
      const char *d = cur;
      while (cur != end && *cur >= '0' && *cur <= '9')
        ++cur;
      return cur != d;
    };
    if (cur != end && *cur == '-')
      ++cur;
    if (cur != end && *cur == '0')
      ++cur;
    else if (!digits())
      return fail("unexpected character");
    if (cur != end && *cur == '.') {
      ++cur;
      if (!digits())
        return fail("expected digits after '.'");
    }
    if (cur != end && (*cur == 'e' || *cur == 'E')) {
      ++cur;
      if (cur != end && (*cur == '+' || *cur == '-'))
        ++cur;
      if (!digits())
        return fail("expected digits in exponent");
    }
    out.kind = Value::Kind::Number;
    out.text.assign(first, cur);
    return Status::success();
  }

  static void appendUtf8(std::string &s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool parseHex4(uint32_t &out) {
    out = 0;
    for (int i = 0; i < 4; ++i, ++cur) {
      if (cur == end)
        return false;
      char c = *cur;
      uint32_t v;
      if (c >= '0' && c <= '9')
        v = c - '0';
      else if (c >= 'a' && c <= 'f')
        v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v = c - 'A' + 10;
      else
        return false;
      out = out * 16 + v;
    }
    return true;
  }

  Status parseString(std::string &out) {
    ++cur; // '"'
    out.clear();
    while (true) {
      if (cur == end)
        return fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(*cur);
      if (c == '"') {
        ++cur;
        return Status::success();
      }
      if (c < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++cur;
        continue;
      }
      ++cur;
      if (cur == end)
        return fail("unterminated escape");
      char e = *cur++;
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp;
        if (!parseHex4(cp))
          return fail("bad \\u escape");
        if (cp >= 0xD800 && cp < 0xDC00) {
          uint32_t low;
          if (!consumeWord("\\u") || !parseHex4(low) || low < 0xDC00 ||
              low >= 0xE000)
            return fail("unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return fail("unpaired surrogate in \\u escape");
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return fail("unknown escape");
      }
    }
  }

  const char *cur;
  const char *end;
  const char *start = cur;
};

} // namespace

bool Value::asIndex(int64_t &out) const {
  if (kind != Kind::Number || text.empty())
    return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    if (v > (INT64_MAX - (c - '0')) / 10)
      return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

Status parse(const char *text, uint64_t size, Value &out) {
  out = Value();
  return Parser(text, size).parseDocument(out);
}

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

} // namespace mtc::rt::json
