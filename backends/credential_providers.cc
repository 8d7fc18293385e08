// The links of the AWS credential chain (ResolveCredentials) that ask
// someone else: a web identity token exchanged at STS (EKS service
// accounts), a profile's role assumed at STS (AssumeRole, SigV4-signed), a
// profile's credential_process, a profile's IAM Identity Center sign-in
// (`aws sso login`'s token, refreshed at SSO-OIDC, exchanged by
// GetRoleCredentials), the container endpoint (ECS tasks, EKS Pod
// Identity) and the EC2 instance metadata service (IMDSv2, falling back to
// v1). Each answers with temporary credentials and their expiry; the S3
// backend renews them before that (S3Options::refresh_credentials).
// Secrets and tokens never enter a message.

#include <curl/curl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <pugixml.hpp>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include "backends/credentials.h"
#include "backends/s3/sigv4.h"

namespace igt {
namespace {

struct HttpReply {
  long status = 0;    // 0: no HTTP answer (see error)
  std::string body;
  std::string error;  // curl's reason when status is 0
  CURLcode code = CURLE_OK;
};

size_t Collect(char* p, size_t size, size_t n, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (s->size() + size * n > (1u << 20)) return 0;  // a credentials reply is small: 1 MiB is no reply
  s->append(p, size * n);
  return size * n;
}

// One request, no retries. `direct`: never through a proxy (link-local and
// loopback endpoints: a proxy would be asked for the instance's identity).
HttpReply Call(const char* method, const std::string& url, const std::vector<std::string>& headers,
               const std::string* body, long timeout_ms, bool direct) {
  HttpReply r;
  CURL* c = curl_easy_init();
  if (!c) {
    r.error = "cannot create an HTTP handle";
    return r;
  }
  curl_slist* hs = nullptr;
  for (const auto& h : headers) hs = curl_slist_append(hs, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body->size()));
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");  // the URLs come from the environment
  if (direct) curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  r.code = curl_easy_perform(c);
  if (r.code == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  else r.error = curl_easy_strerror(r.code);
  curl_slist_free_all(hs);
  curl_easy_cleanup(c);
  return r;
}

std::string Why(const HttpReply& r) {
  return r.status ? fmt::format("HTTP {}", r.status) : r.error;
}

// obj[key] if `obj` is an object and it is a string there, else "" (the
// replies and caches read here are not trusted to have the right types: no
// get<> that can throw).
std::string JsonString(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A token file's content, without its line end; `what` names its setting.
Result<std::string> ReadFile(const std::string& path, const char* what) {
  auto s = ReadText(path);
  if (!s) return Err(Status::NotFound(fmt::format("{} {} cannot be read", what, path)));
  while (!s->empty() && (s->back() == '\n' || s->back() == '\r' || s->back() == ' ')) s->pop_back();
  return *s;
}

// Form fields are percent-encoded as SigV4 encodes query values.
std::string FormEncode(std::string_view s) { return s3::UriEncode(s, /*keep_slash=*/false); }

// A URL's parts as curl reads them (nullopt: not a URL). `port` is empty when
// the URL names none or the scheme's default: as curl sends Host.
struct UrlParts {
  std::string scheme, host, port, path;
  bool user_info = false;
};
std::optional<UrlParts> ParseUrl(const std::string& url) {
  CURLU* u = curl_url();
  if (!u) return std::nullopt;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    curl_url_cleanup(u);
    return std::nullopt;
  }
  auto part = [&](CURLUPart what, unsigned flags = 0) {
    char* v = nullptr;
    std::string out;
    if (curl_url_get(u, what, &v, flags) == CURLUE_OK && v) out = v;
    curl_free(v);
    return out;
  };
  UrlParts p{part(CURLUPART_SCHEME), part(CURLUPART_HOST), part(CURLUPART_PORT, CURLU_NO_DEFAULT_PORT),
             part(CURLUPART_PATH), !part(CURLUPART_USER).empty() || !part(CURLUPART_PASSWORD).empty()};
  curl_url_cleanup(u);
  return p;
}

// A container endpoint URL, checked as the AWS SDKs do: http or https, no
// user info, and plain http only to a loopback address, the ECS agent
// (169.254.170.2) or EKS Pod Identity (169.254.170.23, fd00:ec2::23),
// the host compared whole. `shown` is the URL without its query (for logs).
Status CheckContainerUrl(const std::string& url, std::string* shown) {
  const auto bad = [](const std::string& why) {
    return Status::InvalidArgument(fmt::format("container credentials endpoint: {}", why));
  };
  const auto parts = ParseUrl(url);
  if (!parts) return bad("not a URL");
  const auto& [scheme, host, port, path, user_info] = *parts;
  if (user_info) return bad("user info in the URL");
  if (scheme != "http" && scheme != "https") return bad("scheme " + scheme + " (http or https)");
  if (scheme == "http") {
    std::string h = host;
    if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    in_addr a4{};
    in6_addr a6{};
    bool ok = h == "localhost" || h == "169.254.170.2" || h == "169.254.170.23";
    if (!ok && inet_pton(AF_INET, h.c_str(), &a4) == 1) ok = (ntohl(a4.s_addr) >> 24) == 127;
    if (!ok && inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
      in6_addr eks{};
      inet_pton(AF_INET6, "fd00:ec2::23", &eks);
      ok = IN6_IS_ADDR_LOOPBACK(&a6) || std::memcmp(&a6, &eks, sizeof a6) == 0;
    }
    if (!ok)
      return bad("plain http to " + host +
                 ": only to loopback, 169.254.170.2, 169.254.170.23 or fd00:ec2::23 (use https)");
  }
  *shown = scheme + "://" + host + (port.empty() ? "" : ":" + port) + path;
  return Status::Ok();
}

}  // namespace

std::string ServiceEndpoint(const char* env, std::string_view host, const std::string& region, bool global) {
  // AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true drops every configured
  // endpoint, as for S3 (BuildBackend): credentials and requests from one place.
  const bool ignore = IgnoreConfiguredEndpoints();
  std::string endpoint = ignore ? std::string() : Env(env);
  if (endpoint.empty() && global && !ignore) endpoint = Env("AWS_ENDPOINT_URL");
  if (endpoint.empty()) {
    const std::string r = region.empty() ? "us-east-1" : region;
    endpoint = fmt::format("https://{}.{}.amazonaws.com{}", host, r, r.starts_with("cn-") ? ".cn" : "");
  }
  while (endpoint.ends_with('/')) endpoint.pop_back();
  return endpoint;
}

namespace {

std::string StsEndpoint(const std::string& region) { return ServiceEndpoint("AWS_ENDPOINT_URL_STS", "sts", region); }

// STS's answer: its credentials, its error (a 5xx or a throttle: try again
// later, not access denied), or no answer at all.
Result<Credentials> StsReply(const HttpReply& r, const std::string& source) {
  if (r.status == 0) return Err(Status::Unavailable(fmt::format("{}: {}", source, r.error)));
  auto c = ParseStsResponse(r.body, source);
  if (!c && r.status >= 500 && c.error().code() == Code::kPermissionDenied)
    return Err(Status::Unavailable(c.error().message()));
  if (!c && r.status != 200 && c.error().code() != Code::kPermissionDenied && c.error().code() != Code::kUnavailable)
    return Err(Status::Unavailable(fmt::format("{}: HTTP {}", source, r.status)));
  return c;
}
}  // namespace

std::string FormatIso8601(int64_t unix_s) {
  const time_t t = static_cast<time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<int64_t> ParseIso8601(std::string_view s) {
  // 2026-11-28T17:00:00Z, with optional fractional seconds; Z (or z),
  // +hh:mm or +hhmm.
  std::tm tm{};
  std::string str(s);
  const auto bad = [&] { return Err(Status::InvalidArgument(fmt::format("not an ISO 8601 time: '{}'", str))); };
  const char* end = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return bad();
  if (*end == '.')
    for (++end; std::isdigit(static_cast<unsigned char>(*end));) ++end;
  int64_t offset_s = 0;
  if (*end == '+' || *end == '-') {
    int hh = 0, mm = 0, n = 0;
    if (std::sscanf(end + 1, "%2d:%2d%n", &hh, &mm, &n) != 2 && std::sscanf(end + 1, "%2d%2d%n", &hh, &mm, &n) != 2)
      return bad();
    offset_s = (*end == '+' ? 1 : -1) * (hh * 3600 + mm * 60);
    end += 1 + n;
  } else if (*end == 'Z' || *end == 'z') {
    ++end;
  } else {
    return bad();
  }
  if (*end != '\0') return bad();
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return bad();
  return static_cast<int64_t>(t) - offset_s;
}

Result<Credentials> ParseCredentialsJson(std::string_view body, const std::string& source) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Err(Status::InvalidArgument(source + ": the reply is not a JSON object"));
  auto str = [&](const char* k) { return JsonString(j, k); };
  if (auto code = j.find("Code"); code != j.end() && code->is_string() && *code != "Success") {
    const std::string msg = str("Message");
    return Err(Status::PermissionDenied(fmt::format("{}: {}{}", source, str("Code"), msg.empty() ? "" : ": " + msg)));
  }
  Credentials c;
  c.access_key = str("AccessKeyId");
  c.secret_key = str("SecretAccessKey");
  c.session_token = str("Token");
  if (c.session_token.empty()) c.session_token = str("SessionToken");  // credential_process's spelling
  if (c.access_key.empty() || c.secret_key.empty())
    return Err(Status::InvalidArgument(fmt::format("{}: the reply has no {} (a string)", source,
                                                   c.access_key.empty() ? "AccessKeyId" : "SecretAccessKey")));
  if (auto e = j.find("Expiration"); e != j.end() && !e->is_null()) {
    if (!e->is_string()) return Err(Status::InvalidArgument(source + ": Expiration is not a string"));
    auto t = ParseIso8601(e->get<std::string>());
    if (!t) return Err(Status::InvalidArgument(source + ": Expiration: " + t.error().message()));
    c.expires_unix_s = *t;
  }
  c.source = source;
  return c;
}

Result<Credentials> ParseStsResponse(std::string_view xml, const std::string& source) {
  pugi::xml_document doc;
  if (!doc.load_buffer(xml.data(), xml.size()))
    return Err(Status::InvalidArgument(source + ": the reply is not XML"));
  if (auto err = doc.select_node("//Error"); err) {
    const std::string_view code = err.node().child_value("Code");
    const std::string msg = fmt::format("{}: {}: {}", source, code, err.node().child_value("Message"));
    // Throttled or down: try again later, not "access denied".
    if (code == "Throttling" || code == "ServiceUnavailable" || code == "InternalFailure" || code == "RequestLimitExceeded")
      return Err(Status::Unavailable(msg));
    return Err(Status::PermissionDenied(msg));
  }
  // AssumeRoleWithWebIdentityResult or AssumeRoleResult.
  auto cr = doc.select_node("/*/*[substring(name(), string-length(name()) - 5) = 'Result']/Credentials").node();
  Credentials c;
  c.access_key = cr.child_value("AccessKeyId");
  c.secret_key = cr.child_value("SecretAccessKey");
  c.session_token = cr.child_value("SessionToken");
  if (c.access_key.empty() || c.secret_key.empty())
    return Err(Status::InvalidArgument(source + ": the reply has no credentials"));
  if (std::string_view exp = cr.child_value("Expiration"); !exp.empty()) {
    auto t = ParseIso8601(exp);
    if (!t) return Err(Status::InvalidArgument(source + ": Expiration: " + t.error().message()));
    c.expires_unix_s = *t;
  }
  c.source = source;
  return c;
}

Result<std::string> InstanceMetadataEndpoint(const ProfileSettings* profile) {
  const auto setting = [profile](const char* env, const char* key) {
    std::string v = Env(env);
    if (v.empty() && profile)
      if (auto it = profile->find(key); it != profile->end()) v = it->second;
    return v;
  };
  std::string base = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint");
  if (base.empty()) {
    const std::string given =
        setting("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ec2_metadata_service_endpoint_mode");
    std::string mode = given;
    for (char& ch : mode) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (mode.empty() || mode == "ipv4") base = "http://169.254.169.254";
    else if (mode == "ipv6") base = "http://[fd00:ec2::254]";
    else
      return Err(Status::InvalidArgument(
          fmt::format("the instance metadata endpoint mode ($AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE or "
                      "ec2_metadata_service_endpoint_mode) is '{}': it must be IPv4 or IPv6",
                      given)));
  }
  while (base.ends_with('/')) base.pop_back();
  return base;
}

Result<Credentials> InstanceMetadataCredentials(const ProfileSettings* profile) {
  auto endpoint = InstanceMetadataEndpoint(profile);
  if (!endpoint) return Err(endpoint.error());
  const std::string base = *endpoint;
  const std::string where = "instance metadata at " + base;
  constexpr long kTimeoutMs = 1000;  // as the AWS SDKs: the service answers in ms where there is one
  // IMDSv2: a session token first. An endpoint that refuses the PUT (or an
  // older service) is asked without one (v1), as the SDKs do.
  // A token PUT that times out is asked without a token too: in a container
  // on an instance with a hop limit of 1 the PUT's reply never arrives, and
  // v1 may still answer. Nothing listening (or no such host) ends it here.
  std::vector<std::string> auth;
  HttpReply tok = Call("PUT", base + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}, nullptr,
                       kTimeoutMs, true);
  if (tok.status == 0 && (tok.code == CURLE_COULDNT_CONNECT || tok.code == CURLE_COULDNT_RESOLVE_HOST ||
                          tok.code == CURLE_URL_MALFORMAT || tok.code == CURLE_UNSUPPORTED_PROTOCOL))
    return Err(Status::Unavailable(fmt::format("{}: {}", where, tok.error)));
  if (tok.status == 200 && !tok.body.empty()) {
    if (tok.body.find_first_of("\r\n") != std::string::npos)
      return Err(Status::InvalidArgument(where + ": the IMDSv2 token has a line break"));
    auth.push_back("X-aws-ec2-metadata-token: " + tok.body);
  }
  HttpReply role = Call("GET", base + "/latest/meta-data/iam/security-credentials/", auth, nullptr, kTimeoutMs, true);
  if (role.status != 200) {
    const std::string v2 = auth.empty() ? fmt::format("the IMDSv2 token request failed ({}), and v1: ", Why(tok)) : "";
    if (role.status == 0) return Err(Status::Unavailable(fmt::format("{}: {}{}", where, v2, role.error)));
    return Err(Status::NotFound(fmt::format("{}: {}no instance role ({})", where, v2, Why(role))));
  }
  std::string name = role.body.substr(0, role.body.find('\n'));
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) return Err(Status::NotFound(where + ": no instance role (empty list)"));
  HttpReply cr = Call("GET", base + "/latest/meta-data/iam/security-credentials/" + name, auth, nullptr, kTimeoutMs,
                      true);
  const std::string source = fmt::format("instance metadata (role {})", name);
  if (cr.status != 200) return Err(Status::Unavailable(fmt::format("{}: {}", source, Why(cr))));
  return ParseCredentialsJson(cr.body, source);
}

Result<Credentials> ContainerCredentials() {
  std::string url;
  if (std::string rel = Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); !rel.empty()) {
    url = "http://169.254.170.2" + (rel.starts_with('/') ? rel : "/" + rel);
  } else {
    url = Env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    if (url.empty()) return Err(Status::NotFound("no container credentials endpoint"));
  }
  std::string shown;
  if (auto st = CheckContainerUrl(url, &shown); !st.ok())
    return Err(Status(st.code(), "AWS_CONTAINER_CREDENTIALS_" +
                                     std::string(Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").empty() ? "FULL" : "RELATIVE") +
                                     "_URI: " + st.message()));
  std::vector<std::string> headers;
  std::string token;
  if (std::string f = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); !f.empty()) {
    auto t = ReadFile(f, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    if (!t) return Err(t.error());
    token = *t;
  } else {
    token = Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  }
  if (token.find_first_of("\r\n") != std::string::npos)
    return Err(Status::InvalidArgument("the container authorization token has a line break"));
  if (!token.empty()) headers.push_back("Authorization: " + token);
  const bool direct = !url.starts_with("https://");
  HttpReply r = Call("GET", url, headers, nullptr, 2000, direct);
  const std::string source = "container credentials at " + shown;
  if (r.status != 200) {
    // The body of a refusal says why (ECS: {"code":..., "message":...}); no secret in it.
    return Err(Status::Unavailable(fmt::format("{}: {}{}", source, Why(r), r.status ? ": " + r.body.substr(0, 200) : "")));
  }
  return ParseCredentialsJson(r.body, source);
}

Result<Credentials> WebIdentityCredentials(const std::string& region) {
  const std::string token_file = Env("AWS_WEB_IDENTITY_TOKEN_FILE"), role = Env("AWS_ROLE_ARN");
  if (token_file.empty()) return Err(Status::NotFound("no web identity (AWS_WEB_IDENTITY_TOKEN_FILE)"));
  if (role.empty())
    return Err(Status::InvalidArgument("web identity: AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not"));
  return WebIdentityCredentials(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE", role, Env("AWS_ROLE_SESSION_NAME"), region);
}

Result<Credentials> WebIdentityCredentials(const std::string& token_file, const char* token_what,
                                           const std::string& role, const std::string& session_name,
                                           const std::string& region) {
  auto token = ReadFile(token_file, token_what);
  if (!token) return Err(token.error());
  if (token->empty()) return Err(Status::InvalidArgument(fmt::format("{} {} is empty", token_what, token_file)));
  std::string session = session_name;
  if (session.empty())
    session = fmt::format("igtcache-{}", std::chrono::duration_cast<std::chrono::seconds>(
                                             std::chrono::system_clock::now().time_since_epoch()).count());
  const std::string endpoint = StsEndpoint(region);
  const std::string body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + FormEncode(role) +
                           "&RoleSessionName=" + FormEncode(session) + "&WebIdentityToken=" + FormEncode(*token);
  HttpReply r = Call("POST", endpoint + "/",
                     {"Content-Type: application/x-www-form-urlencoded", "Accept: application/xml", "Expect:"}, &body,
                     5000, false);
  const std::string source = fmt::format("web identity (role {}, STS at {})", role, endpoint);
  return StsReply(r, source);
}

Result<Credentials> AssumeRoleCredentials(const std::string& role_arn, const Credentials& base,
                                          const std::string& session, const std::string& external_id,
                                          int64_t duration_s, const std::string& region, const std::string& what) {
  const std::string endpoint = StsEndpoint(region);
  const std::string source = fmt::format("assumed role {} ({}, STS at {})", role_arn, what, endpoint);
  std::string body = "Action=AssumeRole&Version=2011-06-15&RoleArn=" + FormEncode(role_arn) +
                     "&RoleSessionName=" + FormEncode(session);
  if (!external_id.empty()) body += "&ExternalId=" + FormEncode(external_id);
  if (duration_s > 0) body += fmt::format("&DurationSeconds={}", duration_s);
  // Signed (SigV4, service sts) with the source profile's credentials.
  const auto url = ParseUrl(endpoint + "/");
  if (!url || url->host.empty()) return Err(Status::InvalidArgument(source + ": not a URL"));
  const std::string host = url->host + (url->port.empty() ? "" : ":" + url->port), path = url->path;
  s3::SignInput in;
  in.method = "POST";
  in.host = host;
  in.path = path.empty() ? "/" : path;
  in.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  in.payload_hash = s3::Sha256Hex(body);
  in.region = region.empty() ? "us-east-1" : region;
  in.service = "sts";
  in.amz_date = s3::FormatAmzDate(std::chrono::system_clock::now());
  in.add_content_sha256 = false;
  std::vector<std::string> headers = {"Accept: application/xml", "Expect:"};
  for (const auto& [k, v] : s3::SignRequest(in, base)) headers.push_back(k + ": " + v);
  HttpReply r = Call("POST", endpoint + "/", headers, &body, 5000, false);
  return StsReply(r, source);
}

namespace {

std::string Sha1Hex(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha1(), nullptr);
  return s3::ToHex(std::string_view(reinterpret_cast<const char*>(md), n));
}

// The token cache's times: ISO 8601, also with the "UTC" suffix older AWS
// CLI v2 releases wrote.
Result<int64_t> ParseCacheTime(std::string s) {
  if (s.ends_with("UTC")) s.replace(s.size() - 3, 3, "Z");
  return ParseIso8601(s);
}

// Writes `text` to `fd` and closes it: 0, or the errno of the failure.
int WriteAndClose(int fd, const std::string& text) {
  size_t off = 0;
  int err = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// Rewrites the token cache file. A plain file of this user is replaced at
// once (a temp file beside it with its mode, then a rename): a full disk
// leaves the old token, not half a file the AWS CLI cannot read. Another
// user's file (a mount run under sudo with the user's $HOME) or a symlink
// is rewritten in place, as the CLI does (mode 0600 if it is created): its
// owner, mode and link stay as they are.
Status RewriteFile(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
    const std::string tmp = fmt::format("{}.igtcache-{}.tmp", path, ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
    if (fd >= 0) {
      int err = WriteAndClose(fd, text);
      if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
      if (err == 0) return Status::Ok();
      ::unlink(tmp.c_str());
      return Status::Internal(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
    // No file can be made beside it: in place, below.
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  if (const int err = WriteAndClose(fd, text); err != 0)
    return Status::Internal(fmt::format("cannot write {}: {}", path, std::strerror(err)));
  return Status::Ok();
}

// SSO-OIDC CreateToken with the cached refresh token: the cache's JSON with
// a new access token (and refresh token, if given), or why not.
Result<nlohmann::json> RefreshSsoToken(const nlohmann::json& token, const SsoSettings& s, int64_t now) {
  auto str = [&](const char* k) { return JsonString(token, k); };
  for (const char* k : {"refreshToken", "clientId", "clientSecret", "registrationExpiresAt"})
    if (str(k).empty()) return Err(Status::NotFound(fmt::format("the cache has no {}", k)));
  auto reg = ParseCacheTime(str("registrationExpiresAt"));
  if (!reg) return Err(Status::InvalidArgument("registrationExpiresAt: " + reg.error().message()));
  if (*reg <= now)
    return Err(Status::PermissionDenied("its client registration expired at " + FormatIso8601(*reg)));
  const std::string endpoint = ServiceEndpoint("AWS_ENDPOINT_URL_SSO_OIDC", "oidc", s.region, /*global=*/false);
  const std::string body = nlohmann::json{{"clientId", str("clientId")},
                                          {"clientSecret", str("clientSecret")},
                                          {"grantType", "refresh_token"},
                                          {"refreshToken", str("refreshToken")}}
                               .dump();
  HttpReply r = Call("POST", endpoint + "/token", {"Content-Type: application/json", "Expect:"}, &body, 5000, false);
  if (r.status != 200) {
    // The error's code (invalid_grant, ...) says why; it names no secret.
    const std::string code = JsonString(nlohmann::json::parse(r.body, nullptr, false), "error");
    return Err(Status::Unavailable(fmt::format("SSO OIDC at {}: {}{}", endpoint, Why(r), code.empty() ? "" : ": " + code)));
  }
  auto reply = nlohmann::json::parse(r.body, nullptr, false);
  const auto at = reply.is_object() ? reply.find("accessToken") : reply.end();
  const auto in = reply.is_object() ? reply.find("expiresIn") : reply.end();
  if (at == reply.end() || !at->is_string() || at->get<std::string>().empty() || in == reply.end() ||
      !in->is_number())
    return Err(Status::InvalidArgument(
        fmt::format("SSO OIDC at {}: the reply has no accessToken and expiresIn", endpoint)));
  nlohmann::json fresh = token;
  fresh["accessToken"] = *at;
  fresh["expiresAt"] = FormatIso8601(now + in->get<int64_t>());
  if (auto rt = reply.find("refreshToken"); rt != reply.end() && rt->is_string()) fresh["refreshToken"] = *rt;
  return fresh;
}

}  // namespace

Result<Credentials> SsoCredentials(const SsoSettings& s) {
  // The token `aws sso login` left: ~/.aws/sso/cache/<sha1 of the
  // sso-session's name, or of the start URL in the legacy form>.json.
  const std::string file = s.cache_dir + "/" + Sha1Hex(s.session.empty() ? s.start_url : s.session) + ".json";
  const std::string login = s.session.empty() ? fmt::format("aws sso login --profile {}", s.profile)
                                              : fmt::format("aws sso login --sso-session {}", s.session);
  const std::string what = s.session.empty() ? fmt::format("SSO of profile [{}] ({})", s.profile, s.start_url)
                                             : fmt::format("SSO of profile [{}] (sso-session {})", s.profile, s.session);
  auto text = ReadText(file);
  if (!text)
    return Err(Status::PermissionDenied(
        fmt::format("{}: no token at {} (not signed in): run '{}'", what, file, login)));
  auto token = nlohmann::json::parse(*text, nullptr, false);
  auto str = [&](const char* k) { return JsonString(token, k); };
  if (str("accessToken").empty() || str("expiresAt").empty())
    return Err(Status::PermissionDenied(
        fmt::format("{}: the token cache {} has no accessToken and expiresAt: run '{}'", what, file, login)));
  auto expires = ParseCacheTime(str("expiresAt"));
  if (!expires) return Err(Status::InvalidArgument(fmt::format("{}: {}: expiresAt: {}", what, file, expires.error().message())));
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  // As the AWS CLI: a token of an sso-session is refreshed within 15
  // minutes of its expiry, if the cache holds a refresh token and a live
  // client registration; a refresh that fails leaves the old token while
  // it lasts. The legacy form cannot be refreshed.
  std::string refresh_why;
  if (!s.session.empty() && *expires - now < 15 * 60) {
    auto fresh = RefreshSsoToken(token, s, now);
    if (fresh) {
      token = std::move(*fresh);
      expires = ParseCacheTime(str("expiresAt"));
      if (auto st = RewriteFile(file, token.dump()); !st.ok())
        spdlog::warn("{}: the refreshed token is used but not saved: {}", what, st.message());
    } else {
      refresh_why = fresh.error().message();
      spdlog::debug("{}: the token in {} was not refreshed: {}", what, file, refresh_why);
    }
  }
  if (*expires <= now)
    return Err(Status::PermissionDenied(fmt::format(
        "{}: the token in {} expired at {}{}: run '{}'", what, file, FormatIso8601(*expires),
        refresh_why.empty() ? "" : " and was not refreshed (" + refresh_why + ")", login)));
  const std::string access_token = str("accessToken");
  if (access_token.find_first_of("\r\n") != std::string::npos)
    return Err(Status::InvalidArgument(fmt::format("{}: the token in {} has a line break", what, file)));
  // GetRoleCredentials: the role's temporary credentials for the token.
  const std::string endpoint = ServiceEndpoint("AWS_ENDPOINT_URL_SSO", "portal.sso", s.region, /*global=*/false);
  const std::string source = fmt::format("SSO role {} in account {} (profile [{}], portal at {})", s.role_name,
                                         s.account_id, s.profile, endpoint);
  HttpReply r = Call("GET",
                     endpoint + "/federation/credentials?account_id=" + FormEncode(s.account_id) +
                         "&role_name=" + FormEncode(s.role_name),
                     {"x-amz-sso_bearer_token: " + access_token, "Accept: application/json"}, nullptr, 5000, false);
  if (r.status != 200) {
    std::string msg = JsonString(nlohmann::json::parse(r.body, nullptr, false), "message").substr(0, 200);
    if (!msg.empty()) msg = ": " + msg;
    if (r.status == 401)
      return Err(Status::PermissionDenied(
          fmt::format("{}: the SSO session's token was refused (HTTP 401{}): run '{}'", source, msg, login)));
    // 403: the role is not granted to the user; 404: no such account or
    // role; 400: a request it refuses. None goes away by itself.
    if (r.status == 403 || r.status == 404 || r.status == 400)
      return Err(Status::PermissionDenied(fmt::format("{}: HTTP {}{}", source, r.status, msg)));
    return Err(Status::Unavailable(fmt::format("{}: {}{}", source, Why(r), msg)));
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  const auto rc = j.is_object() ? j.find("roleCredentials") : j.end();
  if (rc == j.end() || !rc->is_object())
    return Err(Status::InvalidArgument(source + ": the reply has no roleCredentials"));
  Credentials c{JsonString(*rc, "accessKeyId"), JsonString(*rc, "secretAccessKey"), JsonString(*rc, "sessionToken"), 0,
                source};
  if (c.access_key.empty() || c.secret_key.empty())
    return Err(Status::InvalidArgument(source + ": the reply has no accessKeyId and secretAccessKey"));
  // Milliseconds since the epoch; without it the mount could not renew
  // them before they run out (the AWS CLI refuses such a reply too).
  const auto ex = rc->find("expiration");
  if (ex == rc->end() || !ex->is_number() || ex->get<double>() <= 0)
    return Err(Status::InvalidArgument(source + ": the reply has no expiration (a number)"));
  c.expires_unix_s = static_cast<int64_t>(ex->get<double>() / 1000);
  return c;
}

Result<Credentials> ProcessCredentials(const std::string& command, const std::string& source) {
  // As the Go and Java SDKs: the command line through the shell, its stdout one JSON
  // object ({"Version": 1, ...}), its stderr the reason of a failure. The
  // SDKs wait without a limit; a helper that waits for a login nobody gives
  // would hold the mount for good, so it gets kTimeoutS.
  constexpr int kTimeoutS = 60;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Err(Status::Internal(source + ": pipe: " + std::strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Err(Status::Internal(source + ": pipe: " + std::strerror(errno)));
  }
  // The child starts with default signal handling and nothing blocked (a
  // FUSE worker thread blocks TERM, INT, HUP and QUIT, and the daemon ignores
  // PIPE: both would survive exec), in a process group of its own.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return Err(Status::Internal(fmt::format("{}: cannot run /bin/sh: {}", source, std::strerror(rc))));
  }
  std::string so, se;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutS);
  bool timed_out = false, exited = false;
  int status = 0;
  // Reads until both pipes close; once the shell has exited, at most 1 s
  // more (a background child it left may hold the pipes for good).
  auto until = deadline;
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) {
      timed_out = !exited;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
    if (::poll(p, 2, static_cast<int>(std::min<int64_t>(left, 200))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n > 0 && (i == 0 ? so : se).size() < (1u << 20)) (i == 0 ? so : se).append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        ::close(p[i].fd);
        p[i].fd = -1;
      }
    }
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      until = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
  }
  for (auto& q : p)
    if (q.fd >= 0) ::close(q.fd);
  // Its output closed: it is exiting, or runs on without output until the
  // limit. Past the limit, the group we started is killed, by its id.
  while (!exited && !timed_out) {
    if (::waitpid(pid, &status, WNOHANG) == pid) exited = true;
    else if (std::chrono::steady_clock::now() >= deadline) timed_out = true;
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (timed_out) return Err(Status::Unavailable(fmt::format("{}: no answer within {} s", source, kTimeoutS)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!se.empty() && (se.back() == '\n' || se.back() == ' ')) se.pop_back();
    // A helper that printed its credentials to stderr: not into a message.
    std::string lower = se;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* word : {"secret", "token", "accesskeyid", "access_key"})
      if (lower.find(word) != std::string::npos) se = "(its stderr names credentials: not shown)";
    if (se.size() > 300) se = "..." + se.substr(se.size() - 300);
    return Err(Status::PermissionDenied(fmt::format(
        "{}: {} {}{}", source, WIFEXITED(status) ? "exited with" : "killed by signal",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), se.empty() ? "" : ": " + se)));
  }
  auto j = nlohmann::json::parse(so, nullptr, false);
  const auto v = j.is_object() ? j.find("Version") : j.end();
  if (!j.is_object() || v == j.end() || !v->is_number() || v->get<double>() != 1.0)  // 1 or 1.0, as the AWS CLI
    return Err(Status::InvalidArgument(source + ": its output is not a JSON object with \"Version\": 1"));
  return ParseCredentialsJson(so, source);
}

}  // namespace igt
