// One flat JSON object, printed on one line (the CLI's --json output).
#pragma once

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace kattn {
namespace cli {

class Json {
 public:
  Json& add(const std::string& key, double v) { return raw(key, number(v)); }
  Json& add(const std::string& key, long long v) { return raw(key, std::to_string(v)); }
  Json& add(const std::string& key, int v) { return raw(key, std::to_string(v)); }
  Json& add(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
  Json& add(const std::string& key, const char* v) { return add(key, std::string(v)); }
  Json& add(const std::string& key, const std::string& v) { return raw(key, quote(v)); }
  Json& add(const std::string& key, const std::vector<long long>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return raw(key, s + "]");
  }
  Json& add(const std::string& key, const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + number(v[i]);
    return raw(key, s + "]");
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  // JSON has no inf or NaN: they become null (e.g. an error over rows that saw no key).
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  Json& raw(const std::string& key, const std::string& v) {
    body_ += (body_.empty() ? "" : ",") + quote(key) + ":" + v;
    return *this;
  }
  std::string body_;
};

}  // namespace cli
}  // namespace kattn
