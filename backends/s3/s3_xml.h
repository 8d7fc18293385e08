#pragma once
// Parsers for S3's XML replies (pugixml), as pure functions so they can be
// unit-tested on canned pages: ListObjectsV2 results and <Error> bodies.
// Thread-safety: pure functions. Malformed input -> Code::kCorruption.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "igtcache/status.h"
#include "igtcache/types.h"

namespace igt::s3 {

struct ListObjectsResult {
  std::vector<ObjectInfo> objects;    // full bucket keys (not relative to a prefix)
  std::vector<std::string> prefixes;  // full common prefixes
  bool is_truncated = false;
  std::string next_token;             // NextContinuationToken; set iff is_truncated
};

// Parses a ListObjectsV2 reply. When <EncodingType>url</EncodingType> is
// present, Key / Prefix values are percent-decoded ('+' is a space, as S3
// encodes them form-style). ETags lose their quotes; LastModified becomes ns.
Result<ListObjectsResult> ParseListObjectsV2(std::string_view xml);

struct S3Error {
  std::string code;      // "NoSuchBucket", "AccessDenied", "SlowDown", ...
  std::string message;   // human text from the server
  std::string endpoint;  // <Endpoint> of a PermanentRedirect, if any
};

// Best effort: an empty S3Error if the body is not an S3 <Error> document.
S3Error ParseErrorXml(std::string_view xml);

// "2009-10-12T17:50:30.000Z" (fraction optional, 'Z' or +hh:mm) -> ns since epoch.
Result<int64_t> ParseIso8601Ns(std::string_view s);

// Percent-decoding; plus_is_space turns '+' into ' '. Bad escapes ('%' not
// followed by two hex digits) -> Corruption, or with keep_bad_escapes kept
// as they are (a file:// path written plainly).
Result<std::string> UrlDecode(std::string_view s, bool plus_is_space, bool keep_bad_escapes = false);

// Strips one pair of surrounding double quotes ("\"abc\"" -> "abc").
std::string StripQuotes(std::string_view s);

}  // namespace igt::s3
