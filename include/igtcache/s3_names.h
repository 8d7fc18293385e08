// The form of an S3 region name and of an endpoint URL: checked where the
// user gives them (config Validate, naming the key; `config --check`) and
// where the S3 backend takes them (also from $AWS_REGION, $AWS_ENDPOINT_URL),
// by the same functions. Header-only: the config and the backends share no
// library.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace igt {

// Why `region` is not a region name ("" if it is): it goes into the
// signature's scope, a signed header and the default host name, so letters,
// digits, '-', '_' and '.' only, at most 64 (what AWS and S3-compatible
// stores use: us-east-1, auto, garage, default, oss-cn-hangzhou).
inline std::string RegionNameProblem(std::string_view region) {
  const bool ok = region.size() <= 64 && std::all_of(region.begin(), region.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                  });
  return ok ? "" : "is not a region name: letters, digits, '-', '_' and '.', at most 64 (e.g. us-east-1)";
}

// The endpoint as said in messages: a user name and password, if any, left out.
inline std::string EndpointForMessage(std::string_view e) {
  const size_t sep = e.find("://");
  if (sep == std::string_view::npos) return std::string(e);
  const std::string_view rest = e.substr(sep + 3);
  const size_t at = rest.substr(0, rest.find('/')).rfind('@');
  if (at == std::string_view::npos) return std::string(e);
  return std::string(e.substr(0, sep + 3)) + "...@" + std::string(rest.substr(at + 1));
}

// Why `e` is not scheme://host[:port][/path] with scheme http or https ("" if
// it is). Trailing slashes are allowed ("http://h:9000/").
inline std::string EndpointProblem(std::string_view e) {
  for (char c : e)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return "contains a space or control character";
  const size_t sep = e.find("://");
  if (sep == std::string_view::npos) return "needs a scheme: http://host[:port] or https://host[:port]";
  std::string scheme(e.substr(0, sep));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "http" && scheme != "https") return "has scheme '" + scheme + "', which is not supported (use http or https)";
  const std::string_view rest = e.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) return "must not have a query or fragment";
  const std::string_view authority = rest.substr(0, rest.find('/'));
  if (authority.find('@') != std::string_view::npos)
    return "has a user name or password in it: an endpoint is scheme://host[:port][/path], and the credentials "
           "come from the AWS chain (docs/CLI.md)";
  if (authority.empty() || authority.front() == ':') return "has no host, e.g. http://127.0.0.1:9000";
  std::string_view port;
  if (authority.front() == '[') {  // an IPv6 address
    const size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1 ||
        (close + 1 < authority.size() && (authority[close + 1] != ':' || close + 2 == authority.size())))
      return "must look like scheme://host[:port][/path] (an IPv6 host in brackets: http://[::1]:9000)";
    if (close + 1 < authority.size()) port = authority.substr(close + 2);
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    port = authority.substr(colon + 1);
    if (port.empty()) return "must look like scheme://host[:port][/path] (a ':' without a port)";
  }
  if (!port.empty()) {
    unsigned long n = 0;
    const bool digits = port.size() <= 5 && std::all_of(port.begin(), port.end(), [](char c) {
                          return c >= '0' && c <= '9';
                        });
    if (digits) n = std::stoul(std::string(port));
    if (!digits || n == 0 || n > 65535) return "has port '" + std::string(port) + "', which is not a port number (1-65535)";
  }
  return "";
}

}  // namespace igt
