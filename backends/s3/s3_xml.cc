#include "backends/s3/s3_xml.h"

#include <pugixml.hpp>

#include <charconv>
#include <cstring>
#include <ctime>
#include <limits>

namespace igt::s3 {
namespace {

// Element name without a namespace prefix ("s3:Key" -> "Key").
std::string_view LocalName(const pugi::xml_node& n) {
  std::string_view name = n.name();
  auto colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

pugi::xml_node Child(const pugi::xml_node& parent, std::string_view name) {
  for (pugi::xml_node c = parent.first_child(); c; c = c.next_sibling()) {
    if (c.type() == pugi::node_element && LocalName(c) == name) return c;
  }
  return {};
}

std::string ChildText(const pugi::xml_node& parent, std::string_view name) {
  pugi::xml_node c = Child(parent, name);
  return c ? std::string(c.text().get()) : std::string();
}

bool ParseDigits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  return true;
}

}  // namespace

std::string StripQuotes(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

Result<std::string> UrlDecode(std::string_view s, bool plus_is_space, bool keep_bad_escapes) {
  std::string out;
  out.reserve(s.size());
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size() || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) {
        if (!keep_bad_escapes) return Err(Status::Corruption("bad percent-escape in '" + std::string(s) + "'"));
        out.push_back(c);
        continue;
      }
      out.push_back(static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2])));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<int64_t> ParseIso8601Ns(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.fff...](Z|+hh:mm|-hh:mm)
  std::tm tm{};
  int year, mon, day, hour, min, sec;
  auto bad = [&] { return Err(Status::Corruption("bad timestamp '" + std::string(s) + "'")); };
  if (s.size() < 19 || !ParseDigits(s, 0, 4, year) || s[4] != '-' || !ParseDigits(s, 5, 2, mon) ||
      s[7] != '-' || !ParseDigits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !ParseDigits(s, 11, 2, hour) || s[13] != ':' || !ParseDigits(s, 14, 2, min) || s[16] != ':' ||
      !ParseDigits(s, 17, 2, sec)) {
    return bad();
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) return bad();
  size_t pos = 19;
  int64_t frac_ns = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int64_t scale = 100000000;  // first fractional digit is 1e8 ns
    size_t start = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      frac_ns += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad();
  }
  int64_t offset_s = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!ParseDigits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !ParseDigits(s, pos + 4, 2, om)) {
      return bad();
    }
    offset_s = (oh * 3600 + om * 60) * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  }
  if (pos != s.size()) return bad();
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  int64_t secs = static_cast<int64_t>(timegm(&tm)) - offset_s;
  // Nanoseconds since the epoch fit int64 only for years ~1678..2262
  // (found by fuzzing: year 0000 overflowed). A time outside is taken as the
  // nearest end: one such object in a listing made the whole directory fail
  // (EIO for every name in it; a black-box test's year 2300).
  int64_t ns = 0;
  if (__builtin_mul_overflow(secs, int64_t{1000000000}, &ns) || __builtin_add_overflow(ns, frac_ns, &ns)) {
    // Whole seconds, so that a floor division to a timespec cannot overflow.
    constexpr int64_t kEnd = std::numeric_limits<int64_t>::max() / 1000000000 * 1000000000;
    return secs < 0 ? -kEnd : kEnd;
  }
  return ns;
}

// pugixml's defaults, less the end-of-line normalization (a "\r" in a key
// became "\n": a server that ignores encoding-type=url, s3rver among them,
// sends keys raw, and the file was shown under another name, every read of
// it failing), and with a text that is only whitespace kept (a key " ").
constexpr unsigned kXmlParse = (pugi::parse_default | pugi::parse_ws_pcdata_single) & ~pugi::parse_eol;

Result<ListObjectsResult> ParseListObjectsV2(std::string_view xml) {
  pugi::xml_document doc;
  pugi::xml_parse_result pr = doc.load_buffer(xml.data(), xml.size(), kXmlParse);
  if (!pr) {
    return Err(Status::Corruption(std::string("malformed ListObjectsV2 XML: ") + pr.description() +
                                  " at offset " + std::to_string(pr.offset)));
  }
  pugi::xml_node root = doc.document_element();
  if (!root || LocalName(root) != "ListBucketResult") {
    std::string got = root ? std::string(LocalName(root)) : "nothing";
    return Err(Status::Corruption("expected <ListBucketResult>, got <" + got + ">"));
  }
  bool url_encoded = ChildText(root, "EncodingType") == "url";
  auto decode = [&](const std::string& v) -> Result<std::string> {
    if (!url_encoded) return v;
    return UrlDecode(v, /*plus_is_space=*/true);
  };

  ListObjectsResult out;
  for (pugi::xml_node c = root.first_child(); c; c = c.next_sibling()) {
    if (c.type() != pugi::node_element) continue;
    std::string_view name = LocalName(c);
    if (name == "Contents") {
      pugi::xml_node key = Child(c, "Key");
      if (!key) return Err(Status::Corruption("<Contents> without <Key>"));
      ObjectInfo info;
      auto k = decode(key.text().get());
      if (!k) return Err(k.error());
      info.key = std::move(*k);
      std::string size = ChildText(c, "Size");
      auto [p, ec] = std::from_chars(size.data(), size.data() + size.size(), info.size);
      if (size.empty() || ec != std::errc() || p != size.data() + size.size()) {
        return Err(Status::Corruption("bad <Size> '" + size + "' for key '" + info.key + "'"));
      }
      std::string lm = ChildText(c, "LastModified");
      // Spaces around it (a proxy's pretty-printing) are not part of it.
      lm.erase(0, std::min(lm.size(), lm.find_first_not_of(" \t\r\n")));
      lm.erase(lm.find_last_not_of(" \t\r\n") + 1);
      if (!lm.empty()) {
        auto t = ParseIso8601Ns(lm);
        if (!t) return Err(t.error());
        info.mtime_ns = *t;
      }
      info.etag = StripQuotes(ChildText(c, "ETag"));
      out.objects.push_back(std::move(info));
    } else if (name == "CommonPrefixes") {
      for (pugi::xml_node pnode = c.first_child(); pnode; pnode = pnode.next_sibling()) {
        if (pnode.type() != pugi::node_element || LocalName(pnode) != "Prefix") continue;
        auto pfx = decode(pnode.text().get());
        if (!pfx) return Err(pfx.error());
        out.prefixes.push_back(std::move(*pfx));
      }
    } else if (name == "IsTruncated") {
      std::string_view v = c.text().get();
      if (v == "true") {
        out.is_truncated = true;
      } else if (v != "false") {
        return Err(Status::Corruption("bad <IsTruncated> '" + std::string(v) + "'"));
      }
    } else if (name == "NextContinuationToken") {
      out.next_token = c.text().get();
    }
  }
  if (out.is_truncated && out.next_token.empty()) {
    // A version 1 listing (NextMarker, or nothing) for a version 2 request:
    // the server does not support ListObjectsV2. Not retried (kNotSupported):
    // every retry got the same, and a directory of over 1,000 keys failed
    // after the whole retry budget (a review).
    return Err(Status::NotSupported(
        std::string("truncated listing without <NextContinuationToken>") +
        (Child(root, "NextMarker") || Child(root, "Marker") ? " (a ListObjects version 1 reply)" : "") +
        ": the server does not seem to support ListObjectsV2 (list-type=2), which igtcache needs to list more "
        "than one page"));
  }
  if (!out.is_truncated) out.next_token.clear();
  return out;
}

S3Error ParseErrorXml(std::string_view xml) {
  S3Error e;
  if (xml.empty()) return e;
  pugi::xml_document doc;
  if (!doc.load_buffer(xml.data(), xml.size(), kXmlParse)) return e;
  pugi::xml_node root = doc.document_element();
  if (!root || LocalName(root) != "Error") return e;
  e.code = ChildText(root, "Code");
  e.message = ChildText(root, "Message");
  e.endpoint = ChildText(root, "Endpoint");
  return e;
}

}  // namespace igt::s3
