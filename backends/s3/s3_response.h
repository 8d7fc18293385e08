#pragma once
// Validation of ranged-GET replies and HTTP header parsing, as pure functions:
// which status / Content-Range / Content-Length combinations prove that the
// bytes received are exactly the bytes asked for. Thread-safety: pure.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "igtcache/status.h"

namespace igt::s3 {

struct ContentRange {
  bool unsatisfied = false;  // "bytes */total" (sent with 416)
  uint64_t start = 0;        // first byte, inclusive
  uint64_t end = 0;          // last byte, inclusive
  std::optional<uint64_t> total;  // nullopt for "bytes a-b/*"
};

// Parses "bytes 0-9/100", "bytes 0-9/*", "bytes */100". nullopt if malformed.
std::optional<ContentRange> ParseContentRange(std::string_view v);

// "bytes=<offset>-<offset+length-1>" (length > 0).
std::string RangeHeader(uint64_t offset, uint64_t length);

// What a GET reply looked like, header-wise and body-wise.
struct GetReply {
  long status = 0;
  std::optional<std::string> content_range;   // raw header value
  std::optional<uint64_t> content_length;     // parsed header value
  uint64_t body_bytes = 0;                     // bytes actually received
};

enum class RangeVerdict {
  kOk,          // `bytes` are exactly [offset, offset + bytes) of the object
  kEof,         // 416 at or after the end of the object: 0 bytes
  kMalformed,   // inconsistent reply (retryable: it may be a broken transfer)
  kIgnoredRange // 200 with more than we asked for: the server ignored Range
};

struct RangeCheck {
  RangeVerdict verdict = RangeVerdict::kMalformed;
  uint64_t bytes = 0;
  std::string why;  // for kMalformed / kIgnoredRange
};

// Checks a reply to `Range: bytes=offset-(offset+length-1)` (length > 0):
//  206: Content-Range start == offset, end == min(offset+length, total) - 1,
//       body == end - start + 1 == Content-Length (if sent).
//  200: only if offset == 0 and the body is the whole object (Content-Length
//       == body) and fits in `length`.
//  416: at/after EOF -> kEof (Content-Range "*/total" with total <= offset, or absent).
// Other statuses are not range replies: kMalformed.
RangeCheck CheckRangeReply(const GetReply& r, uint64_t offset, uint64_t length);

// "Wed, 12 Oct 2009 17:50:00 GMT" (RFC 7231 IMF-fixdate) -> ns since epoch.
std::optional<int64_t> ParseHttpDateNs(std::string_view s);

// Decimal uint64 header value; nullopt if not a plain number.
std::optional<uint64_t> ParseU64(std::string_view s);

// Whether `body` is empty, not XML, or an XML document that ends with its
// root element's end tag (or is that element, self-closed): a reply kept in
// memory that ends before its XML does had a short Content-Length, and the
// rest of it is still on the connection.
bool XmlBodyComplete(std::string_view body);

}  // namespace igt::s3
