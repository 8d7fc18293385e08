#include "backends/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>

namespace igt::s3 {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr char kHexUpper[] = "0123456789ABCDEF";

bool Unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trim both ends and collapse runs of spaces into one (SigV4 header values).
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// Lowercased name -> canonical value, sorted by name (std::map order is
// byte order, which is what SigV4 asks for).
std::map<std::string, std::string> AllSignedHeaders(const SignInput& in, const Credentials& creds) {
  std::map<std::string, std::string> h;
  for (const auto& [name, value] : in.headers) h[Lower(name)] = CanonicalHeaderValue(value);
  h["host"] = CanonicalHeaderValue(in.host);
  h["x-amz-date"] = in.amz_date;
  if (in.add_content_sha256) h["x-amz-content-sha256"] = in.payload_hash;
  if (!creds.session_token.empty()) h["x-amz-security-token"] = creds.session_token;
  return h;
}

std::string SignedHeaderNames(const std::map<std::string, std::string>& h) {
  std::string out;
  for (const auto& [name, value] : h) {
    if (!out.empty()) out.push_back(';');
    out += name;
  }
  return out;
}

std::string Scope(const SignInput& in) {
  return in.amz_date.substr(0, 8) + "/" + in.region + "/" + in.service + "/aws4_request";
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size() * 3 / 2);
  for (unsigned char c : s) {
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHexUpper[c >> 4]);
      out.push_back(kHexUpper[c & 15]);
    }
  }
  return out;
}

std::string ToHex(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return ToHex(std::string_view(reinterpret_cast<const char*>(md), sizeof md));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string FormatAmzDate(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQuery(const QueryList& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

std::string CanonicalRequest(const SignInput& in, const Credentials& creds) {
  auto headers = AllSignedHeaders(in, creds);
  std::string out;
  out += in.method;
  out += '\n';
  out += UriEncode(in.path.empty() ? "/" : in.path, /*keep_slash=*/true);
  out += '\n';
  out += CanonicalQuery(in.query);
  out += '\n';
  for (const auto& [name, value] : headers) {
    out += name;
    out += ':';
    out += value;
    out += '\n';
  }
  out += '\n';
  out += SignedHeaderNames(headers);
  out += '\n';
  out += in.payload_hash;
  return out;
}

std::string Signature(const SignInput& in, const Credentials& creds) {
  std::string string_to_sign = "AWS4-HMAC-SHA256\n" + in.amz_date + "\n" + Scope(in) + "\n" +
                               Sha256Hex(CanonicalRequest(in, creds));
  std::string k = HmacSha256("AWS4" + creds.secret_key, in.amz_date.substr(0, 8));
  k = HmacSha256(k, in.region);
  k = HmacSha256(k, in.service);
  k = HmacSha256(k, "aws4_request");
  return ToHex(HmacSha256(k, string_to_sign));
}

HeaderList SignRequest(const SignInput& in, const Credentials& creds) {
  HeaderList out = in.headers;
  out.emplace_back("x-amz-date", in.amz_date);
  if (in.add_content_sha256) out.emplace_back("x-amz-content-sha256", in.payload_hash);
  if (!creds.session_token.empty()) out.emplace_back("x-amz-security-token", creds.session_token);
  std::string auth = "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" + Scope(in) +
                     ",SignedHeaders=" + SignedHeaderNames(AllSignedHeaders(in, creds)) +
                     ",Signature=" + Signature(in, creds);
  out.emplace_back("Authorization", std::move(auth));
  return out;
}

}  // namespace igt::s3
