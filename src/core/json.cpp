// The JSON reader (json.hpp): recursive descent, no allocation beyond the result tree.

#include "json.hpp"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace ncclpool {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    Json value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the document");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw JsonError("JSON: " + what + " at byte " + std::to_string(pos_));
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }

  Json parse_value(int depth) {
    if (depth > 256) fail("nesting deeper than 256");
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end of input");
    const char c = text_[pos_];
    Json v;
    if (c == '{') {
      ++pos_;
      v.type = Json::Type::object;
      if (consume('}')) return v;
      do {
        skip_space();
        std::string key = parse_string();
        expect(':');
        v.object.insert_or_assign(std::move(key), parse_value(depth + 1));
      } while (consume(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.type = Json::Type::array;
      if (consume(']')) return v;
      do v.array.push_back(parse_value(depth + 1));
      while (consume(','));
      expect(']');
    } else if (c == '"') {
      v.type = Json::Type::string;
      v.string = parse_string();
    } else if (text_.substr(pos_, 4) == "true") {
      pos_ += 4;
      v.type = Json::Type::boolean;
      v.boolean = true;
    } else if (text_.substr(pos_, 5) == "false") {
      pos_ += 5;
      v.type = Json::Type::boolean;
    } else if (text_.substr(pos_, 4) == "null") {
      pos_ += 4;
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      parse_number(v);
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  void parse_number(Json& v) {
    const std::size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    bool integral = true;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        ++pos_;
      } else {
        break;
      }
    }
    const std::string token(text_.substr(start, pos_ - start));
    char* end = nullptr;
    v.type = Json::Type::number;
    v.number = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) fail("malformed number '" + token + "'");
    // Beyond int64 it stays a number but not an exact integer (strtoll saturated it silently).
    if (integral) v.is_integer = std::from_chars(token.data(), token.data() + token.size(), v.integer).ec == std::errc();
  }

  std::string parse_string() {
    if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > text_.size()) fail("short \\u escape");
          const unsigned code = static_cast<unsigned>(std::strtoul(std::string(text_.substr(pos_, 4)).c_str(), nullptr, 16));
          pos_ += 4;
          // Names in traces are ASCII; anything else is kept as '?' (never used for decisions).
          out += code < 0x80 ? static_cast<char>(code) : '?';
          break;
        }
        default: fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

const Json* Json::find(std::string_view key) const {
  if (type != Type::object) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

std::int64_t Json::as_int(std::string_view what) const {
  if (type != Type::number || !is_integer) throw JsonError("JSON: " + std::string(what) + " is not an integer");
  return integer;
}

Json parse_json(std::string_view text) { return Parser(text).document(); }

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace ncclpool
