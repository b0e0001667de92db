// A minimal JSON reader for the NVML stand-in's config file (test-only code; the
// stand-in must not depend on anything the real libnvidia-ml would not).
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nvmlstandin {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double num = 0;
  bool b = false;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json* get(const std::string& k) const {
    if (kind != Object) return nullptr;
    auto it = obj.find(k);
    return it == obj.end() ? nullptr : &it->second;
  }
  bool isNull() const { return kind == Null; }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Json parse() {
    Json v = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const char* what) { throw std::runtime_error(std::string(what) + " at offset " + std::to_string(i_)); }
  void ws() { while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) i_++; }
  bool eat(char c) { ws(); if (i_ < s_.size() && s_[i_] == c) { i_++; return true; } return false; }
  void expect(char c) { if (!eat(c)) fail("unexpected character"); }
  bool word(const char* w) {
    const std::string ww(w);
    if (s_.compare(i_, ww.size(), ww) == 0) { i_ += ww.size(); return true; }
    return false;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        c = s_[i_++];
        if (c == 'n') c = '\n'; else if (c == 't') c = '\t';
        else if (c == 'u') { i_ += 4; c = '?'; }  // non-ASCII is never needed here
      }
      out += c;
    }
    expect('"');
    return out;
  }
  Json value() {
    ws();
    Json v;
    if (i_ >= s_.size()) fail("unexpected end");
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Object;
      i_++;
      if (eat('}')) return v;
      do { std::string k = string(); expect(':'); v.obj[k] = value(); } while (eat(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Json::Array;
      i_++;
      if (eat(']')) return v;
      do v.arr.push_back(value()); while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::String;
      v.str = string();
    } else if (word("true") || word("false")) {
      v.kind = Json::Bool;
      v.b = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
    } else if (word("null")) {
      v.kind = Json::Null;
    } else {
      char* end = nullptr;
      v.kind = Json::Number;
      v.num = std::strtod(s_.c_str() + i_, &end);
      if (end == s_.c_str() + i_) fail("bad value");
      i_ = end - s_.c_str();
    }
    return v;
  }
};

}  // namespace nvmlstandin
