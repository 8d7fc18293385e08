#include "backends/s3/s3_response.h"

#include <cctype>
#include <charconv>
#include <cstring>
#include <ctime>

namespace igt::s3 {

std::optional<uint64_t> ParseU64(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<ContentRange> ParseContentRange(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
  constexpr std::string_view kUnit = "bytes ";
  if (!v.starts_with(kUnit)) return std::nullopt;
  v.remove_prefix(kUnit.size());
  auto slash = v.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string_view range = v.substr(0, slash), total = v.substr(slash + 1);
  ContentRange cr;
  if (total != "*") {
    cr.total = ParseU64(total);
    if (!cr.total) return std::nullopt;
  }
  if (range == "*") {
    if (!cr.total) return std::nullopt;
    cr.unsatisfied = true;
    return cr;
  }
  auto dash = range.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto a = ParseU64(range.substr(0, dash)), b = ParseU64(range.substr(dash + 1));
  if (!a || !b || *b < *a) return std::nullopt;
  if (cr.total && *b >= *cr.total) return std::nullopt;
  cr.start = *a;
  cr.end = *b;
  return cr;
}

std::string RangeHeader(uint64_t offset, uint64_t length) {
  return "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
}

RangeCheck CheckRangeReply(const GetReply& r, uint64_t offset, uint64_t length) {
  RangeCheck c;
  auto malformed = [&](std::string why) {
    c.verdict = RangeVerdict::kMalformed;
    c.why = std::move(why);
    return c;
  };
  if (r.content_length && *r.content_length != r.body_bytes && r.status != 416) {
    return malformed("Content-Length " + std::to_string(*r.content_length) + " but " +
                     std::to_string(r.body_bytes) + " bytes received");
  }
  if (r.status == 206) {
    if (!r.content_range) return malformed("206 without Content-Range");
    auto cr = ParseContentRange(*r.content_range);
    if (!cr || cr->unsatisfied) return malformed("bad Content-Range '" + *r.content_range + "'");
    uint64_t want_end = offset + length - 1;
    if (cr->total) want_end = std::min(want_end, *cr->total - 1);
    if (cr->start != offset || cr->end != want_end) {
      return malformed("Content-Range '" + *r.content_range + "' does not match bytes=" +
                       std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    }
    if (r.body_bytes != cr->end - cr->start + 1) {
      return malformed("Content-Range '" + *r.content_range + "' but " +
                       std::to_string(r.body_bytes) + " bytes received");
    }
    c.verdict = RangeVerdict::kOk;
    c.bytes = r.body_bytes;
    return c;
  }
  if (r.status == 200) {
    if (!r.content_length) return malformed("200 without Content-Length");
    if (offset != 0 || *r.content_length > length) {
      c.verdict = RangeVerdict::kIgnoredRange;
      c.why = "server ignored the Range header (200 with the whole object)";
      return c;
    }
    c.verdict = RangeVerdict::kOk;
    c.bytes = r.body_bytes;
    return c;
  }
  if (r.status == 416) {
    if (r.content_range) {
      auto cr = ParseContentRange(*r.content_range);
      if (cr && cr->total && *cr->total > offset) {
        return malformed("416 for offset " + std::to_string(offset) + " inside an object of " +
                         std::to_string(*cr->total) + " bytes");
      }
    }
    c.verdict = RangeVerdict::kEof;
    c.bytes = 0;
    return c;
  }
  return malformed("unexpected HTTP status " + std::to_string(r.status) + " for a ranged GET");
}

std::optional<int64_t> ParseHttpDateNs(std::string_view s) {
  std::string str(s);
  std::tm tm{};
  const char* end = strptime(str.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (!end) return std::nullopt;
  std::string_view rest = end;
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest != "GMT" && rest != "UTC" && rest != "+0000" && !rest.empty()) return std::nullopt;
  return static_cast<int64_t>(timegm(&tm)) * 1000000000LL;
}

bool XmlBodyComplete(std::string_view body) {
  size_t i = 0;
  while (true) {  // the root: the first element after <?xml ...?>, <!-- --> and <!DOCTYPE>
    i = body.find('<', i);
    if (i == std::string_view::npos) return true;  // no element: not XML
    if (body.substr(i, 4) == "<!--") {
      const size_t end = body.find("-->", i + 4);
      if (end == std::string_view::npos) return false;
      i = end + 3;
      continue;
    }
    if (i + 1 < body.size() && (body[i + 1] == '?' || body[i + 1] == '!')) {
      ++i;
      continue;
    }
    break;
  }
  size_t e = i + 1;
  while (e < body.size() && body[e] != '>' && body[e] != '/' && !std::isspace(static_cast<unsigned char>(body[e]))) ++e;
  const std::string_view name = body.substr(i + 1, e - i - 1);
  if (name.empty()) return true;
  auto rtrim = [](std::string_view v) {
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    return v;
  };
  const std::string_view tail = rtrim(body);
  const size_t close = body.find('>', e);
  if (close != std::string_view::npos && close > 0 && body[close - 1] == '/' && close + 1 >= tail.size())
    return true;  // <Root/>
  if (!tail.ends_with('>')) return false;
  const std::string_view before = rtrim(tail.substr(0, tail.size() - 1));  // `</Root >` too
  return before.size() >= name.size() + 2 && before.ends_with(name) &&
         before.substr(before.size() - name.size() - 2, 2) == "</";
}

}  // namespace igt::s3
