#pragma once
// AWS Signature Version 4 for S3 requests, as pure functions (no clock, no
// I/O) so they can be checked against AWS's published example signatures.
// Hashing and HMAC come from OpenSSL. Thread-safety: all functions are pure.
// Secrets: the secret key is only fed to HMAC; nothing here logs or returns it.

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "igtcache/backends.h"

namespace igt::s3 {

using HeaderList = std::vector<std::pair<std::string, std::string>>;
using QueryList = std::vector<std::pair<std::string, std::string>>;  // raw (not encoded)

// SHA-256 of the empty string: the payload hash of every GET/HEAD we send.
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// RFC 3986 percent-encoding as SigV4 wants it: everything except
// A-Z a-z 0-9 - _ . ~ is encoded (uppercase hex); '/' is kept if keep_slash.
std::string UriEncode(std::string_view s, bool keep_slash);

std::string Sha256Hex(std::string_view data);
std::string HmacSha256(std::string_view key, std::string_view data);  // raw 32 bytes
std::string ToHex(std::string_view raw);

// "20130524T000000Z" for a UTC time point.
std::string FormatAmzDate(std::chrono::system_clock::time_point t);

// Canonical query string: every name and value URI-encoded, sorted by encoded
// name then value, joined "a=1&b=" (an empty value keeps its '=').
std::string CanonicalQuery(const QueryList& query);

struct SignInput {
  std::string method = "GET";
  std::string host;            // exactly the Host header that will be sent
  std::string path = "/";      // raw (unencoded) path; each segment is encoded, '/' kept
  QueryList query;             // raw names/values
  HeaderList headers;          // extra headers to sign (e.g. {"Range", "bytes=0-9"})
  std::string payload_hash = std::string(kEmptySha256);
  std::string region = "us-east-1";
  std::string service = "s3";
  std::string amz_date;        // "20130524T000000Z"
  // S3 requires x-amz-content-sha256; the generic SigV4 test suite does not
  // use it. When true the header is added (and signed) with payload_hash.
  bool add_content_sha256 = true;
};

// The canonical request (task 1 of SigV4), exposed for tests and debugging.
std::string CanonicalRequest(const SignInput& in, const Credentials& creds);

// Returns the headers to send: `in.headers`, x-amz-date, x-amz-content-sha256
// (if asked), x-amz-security-token (if creds has a session token) and
// Authorization. Host is signed but not returned (the caller sends in.host).
HeaderList SignRequest(const SignInput& in, const Credentials& creds);

// Just the hex signature of the Authorization header SignRequest would build.
std::string Signature(const SignInput& in, const Credentials& creds);

}  // namespace igt::s3
