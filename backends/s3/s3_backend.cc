// The S3 backend: ListObjectsV2 / HEAD / ranged GET over a pooled libcurl
// client, signed with our SigV4, with bounded retries (full-jitter backoff).
// See s3_backend.h for the pure helpers and http_pool.h for connections.

#include "backends/s3/s3_backend.h"

#include <arpa/inet.h>
#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

#include "backends/s3/s3_response.h"
#include "backends/s3/s3_xml.h"
#include "igtcache/metrics.h"
#include "igtcache/s3_names.h"

namespace igt::s3 {

std::string S3Endpoint::RawPath(std::string_view full_key) const {
  std::string p = base_path;
  if (path_style) {
    p += "/";
    p += bucket;
    if (!full_key.empty()) {
      p += "/";
      p += full_key;
    }
  } else {
    p += "/";
    p += full_key;
  }
  return p;
}

std::string S3Endpoint::Url(std::string_view full_key, const QueryList& query) const {
  std::string url = scheme + "://" + host + UriEncode(RawPath(full_key), /*keep_slash=*/true);
  if (!query.empty()) url += "?" + CanonicalQuery(query);
  return url;
}

namespace {
// What both rules ask: a letter or digit at each end, no "..", not an IP address.
std::string CommonBucketNameProblem(std::string_view b) {
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(b.front()) || !alnum(b.back())) return "must begin and end with a letter or digit";
  if (b.find("..") != std::string_view::npos) return "must not contain two adjacent periods";
  in_addr addr{};
  if (inet_pton(AF_INET, std::string(b).c_str(), &addr) == 1) return "must not be an IP address";
  return "";
}
}  // namespace

std::string BucketNameProblem(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return "must be 3 to 63 characters long";
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) {
      return "may contain only lowercase letters, digits, '.' and '-'";
    }
  }
  if (std::string why = CommonBucketNameProblem(b); !why.empty()) return why;
  if (b.starts_with("xn--")) return "must not start with 'xn--'";
  if (b.ends_with("-s3alias")) return "must not end with '-s3alias'";
  return "";
}

std::string LegacyBucketNameProblem(std::string_view b) {
  if (b.size() < 3 || b.size() > 255) return "must be 3 to 255 characters long";
  for (char c : b) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return "may contain only letters, digits, '.', '-' and '_' (uppercase letters, '_' and more than 63 "
             "characters only in buckets made before March 2018)";
    }
  }
  return CommonBucketNameProblem(b);
}

Result<S3Endpoint> ResolveEndpoint(const S3Options& opts) {
  S3Endpoint ep;
  ep.bucket = opts.bucket;
  std::string region = opts.region.empty() ? "us-east-1" : opts.region;
  // The same checks as the config's (igtcache/s3_names.h): here they also
  // cover $AWS_REGION and $AWS_ENDPOINT_URL.
  if (std::string why = RegionNameProblem(region); !why.empty())
    return Err(Status::InvalidArgument("region '" + region + "' " + why +
                                       " (from --region, backend.region, $AWS_REGION or $AWS_DEFAULT_REGION)"));
  // China's regions are in their own partition (as the STS and SSO
  // endpoints: credential_providers.cc).
  ep.endpoint = opts.endpoint.empty()
                    ? "https://s3." + region + ".amazonaws.com" + (region.starts_with("cn-") ? ".cn" : "")
                    : opts.endpoint;
  if (std::string why = EndpointProblem(ep.endpoint); !why.empty())
    return Err(Status::InvalidArgument("endpoint '" + EndpointForMessage(ep.endpoint) + "' " + why));
  // Trailing slashes go, but not into the "://".
  const size_t sep = ep.endpoint.find("://");
  while (ep.endpoint.size() > sep + 3 && ep.endpoint.back() == '/') ep.endpoint.pop_back();
  const std::string_view e = ep.endpoint;
  ep.scheme = std::string(e.substr(0, sep));
  for (char& c : ep.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = e.substr(sep + 3);
  auto slash = rest.find('/');
  std::string authority(rest.substr(0, slash));
  if (slash != std::string_view::npos) ep.base_path = std::string(rest.substr(slash));
  for (char& c : authority) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // Host name without the port, to decide addressing.
  std::string hostname = authority;
  if (!hostname.empty() && hostname.front() == '[') {
    hostname = hostname.substr(0, hostname.find(']') + 1);
  } else if (auto colon = hostname.rfind(':'); colon != std::string::npos) {
    hostname = hostname.substr(0, colon);
  }
  in_addr a4{};
  bool ip_or_local = hostname == "localhost" || (!hostname.empty() && hostname.front() == '[') ||
                     inet_pton(AF_INET, hostname.c_str(), &a4) == 1;
  // A name without a dot (a compose service, a host-file alias) has no
  // subdomains for virtual-hosted buckets.
  const bool single_label = hostname.find('.') == std::string::npos;
  // A legacy bucket name (uppercase, '_', over 63 characters) is no host
  // name: path-style only.
  const bool dns_bucket = BucketNameProblem(opts.bucket).empty();
  if (opts.addressing == "path") {
    ep.path_style = true;
  } else if (opts.addressing == "virtual") {
    if (ip_or_local) {
      return Err(Status::InvalidArgument("virtual-hosted addressing needs a DNS name, not '" +
                                         hostname + "'; use path-style addressing (--addressing path, backend.addressing: path)"));
    }
    if (!dns_bucket) {
      return Err(Status::InvalidArgument("bucket '" + opts.bucket + "' is not a DNS name (" +
                                         BucketNameProblem(opts.bucket) +
                                         "): virtual-hosted addressing cannot reach it; use path-style addressing (--addressing path, backend.addressing: path)"));
    }
    ep.path_style = false;
  } else if (opts.addressing == "auto" || opts.addressing.empty()) {
    // An endpoint URL of another store than AWS's (MinIO, Ceph RGW, a
    // gateway) takes path-style requests, as the AWS CLI sends them: bucket
    // subdomains need wildcard DNS (and certificates) such stores seldom
    // have. Before 2026-11-30, "https://minio.example.com" was sent
    // "data.minio.example.com", which did not resolve (a review).
    // Stores that refuse path-style requests for new buckets (Alibaba OSS:
    // SecondLevelDomainForbidden; Tencent COS) stay virtual-hosted.
    const bool virtual_store = hostname.ends_with(".amazonaws.com") || hostname.ends_with(".amazonaws.com.cn") ||
                               hostname.ends_with(".aliyuncs.com") || hostname.ends_with(".myqcloud.com");
    ep.path_style = ip_or_local || single_label || !dns_bucket || opts.bucket.find('.') != std::string::npos ||
                    (!opts.endpoint.empty() && !virtual_store);
  } else {
    return Err(Status::InvalidArgument("addressing '" + opts.addressing +
                                       "' is not one of auto, path, virtual"));
  }
  ep.host = ep.path_style ? authority : opts.bucket + "." + authority;
  return ep;
}

namespace {

bool RetryableCurl(int code) {
  switch (static_cast<CURLcode>(code)) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_READ_ERROR:
      return true;
    default:
      return false;
  }
}

}  // namespace

Outcome ClassifyFailure(const HttpResponse& r, const S3Endpoint& ep, std::string_view what,
                        std::string_view hint_403) {
  const std::string bucket = "bucket '" + ep.bucket + "'";
  if (r.curl_code != 0) {
    // A bucket subdomain that does not resolve: the store may not serve
    // virtual-hosted requests (no wildcard DNS).
    const std::string hint = !ep.path_style && r.curl_code == CURLE_COULDNT_RESOLVE_HOST
                                 ? " (virtual-hosted addressing asks for the host " + ep.host +
                                       "; if the store has no bucket subdomains, use --addressing path)"
                                 : "";
    return {Status::Unavailable("cannot reach S3 endpoint " + ep.endpoint + " (" + std::string(what) +
                                "): " + r.curl_error + hint),
            // "Received HTTP/0.9 when not allowed" on a reused connection:
            // stray bytes of an earlier reply (the connection is closed
            // after the error; the retry gets a fresh one). On a fresh one
            // the endpoint does not speak HTTP there (an http:// URL of a
            // TLS port): not retried.
            RetryableCurl(r.curl_code) || (r.curl_code == CURLE_UNSUPPORTED_PROTOCOL && r.new_connections == 0)};
  }
  S3Error e = ParseErrorXml(r.body);
  std::string detail = e.code.empty() ? "HTTP " + std::to_string(r.status)
                                      : "HTTP " + std::to_string(r.status) + " " + e.code;
  if (!e.message.empty()) detail += ": " + e.message;
  const long s = r.status;
  // 408 (a proxy or load balancer in front of the store) and S3's own
  // idle-socket timeout (400 RequestTimeout) are transient too, as the AWS
  // SDKs take them.
  if (s >= 500 || s == 429 || s == 408 || e.code == "RequestTimeout" || e.code == "RequestTimeoutException") {
    return {Status::IoError("S3 " + std::string(what) + " failed at " + ep.endpoint + " (" + detail + ")"),
            true};
  }
  // Temporary credentials that ran out, or keys since rotated away: the
  // caller may read the credentials again (S3Options::refresh_credentials).
  if (e.code == "ExpiredToken" || e.code == "InvalidToken" || e.code == "TokenRefreshRequired" ||
      e.code == "InvalidAccessKeyId") {
    const char* why = e.code == "InvalidAccessKeyId"
                          ? "the access key is not known there (mistyped, deleted, or meant for another endpoint)"
                          : "they expired or were revoked";
    return {Status::PermissionDenied("S3 refused the credentials for " + bucket + " at " + ep.endpoint + " (" +
                                     detail + "): " + why + ". A mount asks for them again when this happens (the "
                                     "credentials file, a credential_process, instance metadata, the container "
                                     "endpoint, STS); credentials "
                                     "from the environment need a new mount"),
            false, true};
  }
  if (e.code == "RequestTimeTooSkewed") {
    // Not the credentials nor the bucket policy, as the generic 403 said.
    return {Status::PermissionDenied("S3 refused a request for " + bucket + " at " + ep.endpoint +
                                     " because this machine's clock is off by more than 15 minutes (" + detail +
                                     "): set the system clock (timedatectl, chrony or ntpd), then mount again"),
            false, false};
  }
  if (e.code == "SecondLevelDomainForbidden") {
    return {Status::PermissionDenied("the store at " + ep.endpoint + " refuses path-style requests for " + bucket +
                                     " (" + detail + "): use virtual-hosted addressing (--addressing virtual, "
                                     "backend.addressing: virtual)"),
            false, false};
  }
  if (s == 403 && e.code == "InvalidObjectState") {
    // An archived object (S3 Glacier Flexible Retrieval, Deep Archive): not
    // a credentials problem, as the generic message said.
    return {Status::PermissionDenied(std::string(what) + " in " + bucket + " is archived (" + detail +
                                     "): it cannot be read until it is restored (aws s3api restore-object)"),
            false, false};
  }
  if (s == 403) {
    return {Status::PermissionDenied("access denied to " + bucket + " at " + ep.endpoint + " for " +
                                     std::string(what) + " (" + detail +
                                     "); check the credentials and the bucket policy" +
                                     // Access denied as such (a HEAD's 403 has no code): not a bad
                                     // signature or a skewed clock, which say so.
                                     (e.code.empty() || e.code == "AccessDenied" ? std::string(hint_403) : "")),
            false, /*credentials_refused=*/e.code.empty()};  // a HEAD's 403 has no body to tell why
  }
  if (s == 404) {
    if (e.code == "NoSuchBucket") {
      return {Status::NotFound(bucket + " does not exist at " + ep.endpoint), false};
    }
    return {Status::NotFound("no such object: " + std::string(what) + " in " + bucket), false};
  }
  const std::string* region = r.Header("x-amz-bucket-region");
  // A HEAD's reply has no body: a region mismatch is a bare 400 (or 301)
  // with the bucket's region in a header.
  if (s == 301 || s == 307 || e.code == "PermanentRedirect" || e.code == "AuthorizationHeaderMalformed" ||
      (s == 400 && region && e.code.empty())) {
    std::string where = region ? " (the bucket is in region " + *region + ")"
                        : e.endpoint.empty() ? ""
                                             : " (server says: use " + e.endpoint + ")";
    return {Status::IoError(bucket + " is not served by " + ep.endpoint + where +
                            "; check the region / endpoint (" + detail + ")"),
            false};
  }
  if (s == 412) return {Status::Changed(std::string(what) + " changed (" + detail + ")"), false};
  return {Status::IoError("S3 " + std::string(what) + " failed at " + ep.endpoint + " (" + detail + ")"),
          false};
}

namespace {

std::string Quote(std::string_view k) { return "'" + std::string(k) + "'"; }

class S3Backend final : public Backend {
 public:
  S3Backend(S3Options opts, S3Endpoint ep, HttpPoolOptions pool_opts)
      : opts_(std::move(opts)), ep_(std::move(ep)), pool_(std::move(pool_opts)) {
    anonymous_ = opts_.no_sign_request || opts_.credentials.access_key.empty();
    credentials_ = opts_.credentials;
    std::lock_guard lk(cred_mu_);
    NoteCredentialsLocked();
    StartRenewerLocked();
  }
  ~S3Backend() override {
    StopRenewer();
    // A provider call under way ends within its own timeout (STS 5 s,
    // instance metadata 1 s a request, a credential_process 60 s).
    if (renewer_.joinable()) renewer_.join();
  }

  Result<ListPage> List(const ListRequest& req) override {
    QueryList q{{"list-type", "2"}, {"encoding-type", "url"}};
    std::string full_prefix = opts_.prefix + req.prefix;
    if (!full_prefix.empty()) q.emplace_back("prefix", full_prefix);
    if (!req.delimiter.empty()) q.emplace_back("delimiter", req.delimiter);
    if (!req.continuation_token.empty()) q.emplace_back("continuation-token", req.continuation_token);
    q.emplace_back("max-keys", std::to_string(std::clamp(req.max_keys, 1, 1000)));
    auto r = ListRaw(q, "listing of " + Quote(full_prefix));
    if (!r) return Err(r.error());
    ListPage page;
    for (auto& o : r->objects) {
      if (!o.key.starts_with(opts_.prefix)) continue;
      o.key.erase(0, opts_.prefix.size());
      // "dir/" marker objects (made by consoles) are directories, not files.
      // One with content is passed on: the namespace says its bytes are
      // hidden (they were, without a word: a tester's finding).
      if (o.key.empty() || (o.key.back() == '/' && o.size == 0)) continue;
      page.objects.push_back(std::move(o));
    }
    for (auto& p : r->prefixes) {
      if (!p.starts_with(opts_.prefix) || p.size() == opts_.prefix.size()) continue;
      page.prefixes.push_back(p.substr(opts_.prefix.size()));
    }
    // A server handing back the token it was given would have the caller
    // list the same page forever.
    if (!r->next_token.empty() && r->next_token == req.continuation_token) {
      return Err(Status::Corruption("listing of " + Quote(full_prefix) + " at " + ep_.endpoint +
                                    ": the server returned the continuation token it was sent (a listing that "
                                    "would never end)"));
    }
    page.next_token = std::move(r->next_token);
    return page;
  }

  Result<ObjectInfo> Stat(const std::string& key) override {
    if (auto s = CheckKey(key); !s.ok()) return Err(s);
    std::string full = opts_.prefix + key;
    ObjectInfo info;
    Status st = WithRetries([&]() -> Outcome {
      HttpRequest req = Build("HEAD", full, {}, {});
      HttpResponse r = Send(req);
      if (r.curl_code != 0 || r.status != 200) return ClassifyFailure(r, ep_, "key " + Quote(key), hint_403_);
      const std::string* len = r.Header("content-length");
      auto size = len ? ParseU64(*len) : std::nullopt;
      if (!size) return {Status::IoError("HEAD " + Quote(key) + ": reply without a valid Content-Length"), true};
      info.key = key;
      info.size = *size;
      info.mtime_ns = 0;
      if (const std::string* lm = r.Header("last-modified")) info.mtime_ns = ParseHttpDateNs(*lm).value_or(0);
      if (const std::string* et = r.Header("etag")) info.etag = StripQuotes(*et);
      return {};
    });
    if (!st.ok()) return Err(st);
    return info;
  }

  Result<size_t> Read(const std::string& key, uint64_t offset, size_t length, std::string_view etag,
                      char* out) override {
    if (auto s = CheckKey(key); !s.ok()) return Err(s);
    if (length == 0) return size_t{0};
    std::string full = opts_.prefix + key;
    size_t got = 0;
    bool eof_unverified = false;
    Status st = WithRetries([&]() -> Outcome {
      eof_unverified = false;
      // If-Match makes the store refuse (412) a range of any other version
      // instead of sending it; the ETag check below stays for servers that
      // ignore the header (s3rver does).
      HeaderList headers = {{"Range", RangeHeader(offset, length)}};
      // Not for a weak ETag (W/"..."; If-Match needs a strong match, every
      // GET would be refused) nor one with a quote in it (a bad header).
      if (!etag.empty() && !etag.starts_with("W/") && etag.find('"') == std::string_view::npos)
        headers.emplace_back("If-Match", "\"" + std::string(etag) + "\"");
      HttpRequest req = Build("GET", full, {}, headers);
      req.sink = out;
      req.sink_capacity = length;
      // An error document cut short by its length leaves the rest on the
      // connection as a listing would (Send).
      req.keep_connection = [](const HttpResponse& r) {
        return !MisframedBody(r) && (r.curl_code != 0 || r.status == 200 || r.status == 206 || XmlBodyComplete(r.body));
      };
      HttpResponse r = Send(req);
      if ((r.curl_code == 0 || r.overflow) && r.status == 200 && LooksLikeErrorDocument(r, out)) {
        // S3 documents 200 replies carrying an <Error> body (e.g. an internal
        // error after the status was sent); such a body is never data.
        return {Status::IoError("GET " + Quote(key) + " at " + ep_.endpoint +
                                ": an S3 error document came with status 200"),
                true};
      }
      if (r.overflow && (r.status == 200 || r.status == 206)) {
        return {Status::IoError("GET " + Quote(key) + " at " + ep_.endpoint +
                                ": server sent more bytes than the " + std::to_string(length) +
                                " requested (Range ignored?)"),
                false};
      }
      if (r.curl_code != 0 || (r.status != 200 && r.status != 206 && r.status != 416)) {
        return ClassifyFailure(r, ep_, "key " + Quote(key), hint_403_);
      }
      const std::string* et = r.Header("etag");
      if (!etag.empty()) {
        if (et && StripQuotes(*et) != etag) {
          return {Status::Changed("object " + Quote(key) + " changed: ETag is now " + StripQuotes(*et) +
                                  ", expected " + std::string(etag)),
                  false};
        }
        // Not retried: a proxy or server that strips the header strips it
        // again (each read spent the whole retry budget, up to a minute).
        if (!et && r.status != 416) {
          return {Status::IoError("GET " + Quote(key) + " at " + ep_.endpoint +
                                  ": reply without an ETag (a proxy that strips headers?); the "
                                  "listing's ETag cannot be checked"),
                  false};
        }
        eof_unverified = r.status == 416 && !et;
      }
      GetReply g;
      g.status = r.status;
      if (const std::string* cr = r.Header("content-range")) g.content_range = *cr;
      if (const std::string* cl = r.Header("content-length")) {
        g.content_length = ParseU64(*cl);
        if (!g.content_length) return {Status::IoError("GET " + Quote(key) + ": bad Content-Length"), true};
      }
      g.body_bytes = r.sink_bytes;
      RangeCheck c = CheckRangeReply(g, offset, length);
      switch (c.verdict) {
        case RangeVerdict::kOk:
        case RangeVerdict::kEof:
          got = c.bytes;
          return {};
        case RangeVerdict::kIgnoredRange:
          return {Status::IoError("GET " + Quote(key) + ": " + c.why), false};
        case RangeVerdict::kMalformed:
          break;
      }
      return {Status::IoError("GET " + Quote(key) + " at " + ep_.endpoint + ": " + c.why), true};
    });
    if (!st.ok()) return Err(st);
    if (eof_unverified) {  // 416 carried no ETag: make sure EOF is of the version asked for
      auto info = Stat(key);
      if (!info) return Err(info.error());
      if (info->etag != etag) {
        return Err(Status::Changed("object " + Quote(key) + " changed: ETag is now " + info->etag +
                                   ", expected " + std::string(etag)));
      }
    }
    return got;
  }

  Status Probe() override { return ProbeWith(opts_.max_retries, 0); }
  Status QuickProbe() override {
    return ProbeWith(0, std::min(opts_.request_timeout_ms, Backend::kQuickProbeMs));
  }

  void NoteUnreachable() override {
    std::lock_guard lk(outage_mu_);
    SetOutageLocked(std::chrono::steady_clock::now());
  }

  void Cancel() override {
    pool_.Cancel();
    { std::lock_guard lk(cancel_mu_); }  // a waiter has either seen the flag or is waiting
    cancel_cv_.notify_all();
    StopRenewer();  // the mount is going: no renewal starts any more
  }

  std::string Describe() const override {
    return "s3://" + opts_.bucket + "/" + opts_.prefix + " (" + ep_.endpoint + ")";
  }

 private:
  // A 200/206 body whose length disagrees with its own framing: the
  // connection may carry stray bytes and must not be reused.
  static bool MisframedBody(const HttpResponse& r) {
    if (r.curl_code != 0 || (r.status != 200 && r.status != 206)) return false;
    if (r.overflow) return true;
    if (const std::string* cl = r.Header("content-length")) {
      auto n = ParseU64(*cl);
      if (!n || *n != r.sink_bytes) return true;
    }
    if (r.status == 206) {
      const std::string* cr = r.Header("content-range");
      auto p = cr ? ParseContentRange(*cr) : std::nullopt;
      if (!p || p->unsatisfied || p->end - p->start + 1 != r.sink_bytes) return true;
    }
    return false;
  }

  // An XML <Error> document where object bytes were expected (status 200).
  static bool LooksLikeErrorDocument(const HttpResponse& r, const char* sink) {
    const std::string* ct = r.Header("content-type");
    if (!ct || ct->find("xml") == std::string::npos) return false;
    // Longer than the range asked for: only its start was kept; an XML body
    // overflowing a ranged GET is treated as an error document too.
    if (r.overflow) return true;
    std::string_view head(sink, std::min<size_t>(r.sink_bytes, 512));
    return head.find("<Error>") != std::string_view::npos;
  }

  static Status CheckKey(const std::string& key) {
    if (key.empty()) return Status::InvalidArgument("empty object key");
    if (key.find('\0') != std::string::npos) return Status::InvalidArgument("object key contains NUL");
    return Status::Ok();
  }

  HttpRequest Build(std::string method, const std::string& full_key, const QueryList& query,
                    HeaderList extra) {
    HttpRequest req;
    req.method = method;
    req.url = ep_.Url(full_key, query);
    req.headers = std::move(extra);
    // Signed with the rest (x-amz-* headers are part of the signature).
    if (opts_.requester_pays) req.headers.emplace_back("x-amz-request-payer", "requester");
    if (!opts_.expected_bucket_owner.empty())
      req.headers.emplace_back("x-amz-expected-bucket-owner", opts_.expected_bucket_owner);
    if (!anonymous_) {
      SignInput in;
      in.method = method;
      in.host = ep_.host;
      in.path = ep_.RawPath(full_key);
      in.query = query;
      in.headers = req.headers;
      in.region = opts_.region.empty() ? "us-east-1" : opts_.region;
      in.amz_date = FormatAmzDate(std::chrono::system_clock::now());
      std::lock_guard lk(cred_mu_);
      req.headers = SignRequest(in, credentials_);
      t_signed_gen_ = cred_gen_;
    }
    req.headers.emplace_back("Host", ep_.host);
    return req;
  }

  // A listing of one key: the source exists and answers. `timeout_ms` > 0
  // replaces the request timeout.
  Status ProbeWith(int max_retries, int timeout_ms) {
    QueryList q{{"list-type", "2"}, {"encoding-type", "url"}, {"delimiter", "/"}, {"max-keys", "1"}};
    if (!opts_.prefix.empty()) q.emplace_back("prefix", opts_.prefix);
    auto r = ListRaw(q, "probe listing of " + Describe(), max_retries, timeout_ms);
    return r ? Status::Ok() : r.error();
  }

  Result<ListObjectsResult> ListRaw(const QueryList& q, const std::string& what, int max_retries = kDefaultBudget,
                                    int timeout_ms = 0) {
    ListObjectsResult out;
    Status st = WithRetries(max_retries, [&]() -> Outcome {
      HttpRequest req = Build("GET", "", q, {});
      if (timeout_ms > 0) req.request_timeout_ms = timeout_ms;
      HttpResponse r = Send(req);
      if (r.curl_code != 0 || r.status != 200) {
        if (r.overflow) return {Status::IoError(what + ": listing reply too large"), false};
        // S3 answers a listing of a missing bucket with NoSuchBucket; a bare
        // 404 is another kind of server (a web server, a proxy's error page).
        if (r.curl_code == 0 && r.status == 404 && ParseErrorXml(r.body).code.empty()) {
          return {Status::IoError(what + ": " + ep_.endpoint + " answered HTTP 404 with no S3 error: is it an S3 "
                                  "endpoint? (check --endpoint)"),
                  false};
        }
        return ClassifyFailure(r, ep_, what, hint_403_);
      }
      auto parsed = ParseListObjectsV2(r.body);
      if (!parsed)
        return {Status(parsed.error().code(), what + ": " + parsed.error().message()),
                parsed.error().code() != Code::kNotSupported};
      out = std::move(*parsed);
      return {};
    });
    if (!st.ok()) return Err(st);
    return out;
  }

  // Runs `attempt` until it succeeds, fails for good, or the retry budget
  // (max_retries, retry_deadline_ms) is spent. Backoff: full jitter over
  // [0, retry_base_ms * 2^n].
  template <class F>
  Status WithRetries(F&& attempt) {
    return WithRetries(kDefaultBudget, std::forward<F>(attempt));
  }
  // kDefaultBudget: opts_.max_retries, or one short attempt in outage mode.
  static constexpr int kDefaultBudget = -1;
  template <class F>
  Status WithRetries(int max_retries, F&& attempt) {
    const bool default_budget = max_retries == kDefaultBudget;
    bool short_attempts = default_budget && outage_.load(std::memory_order_relaxed);
    if (default_budget) max_retries = short_attempts ? 0 : opts_.max_retries;
    bool answered = false;  // a whole reply came back for some attempt of this call
    struct ShortScope {  // Send shortens this thread's requests meanwhile
      bool prev = t_short_attempt_;
      explicit ShortScope(bool on) { t_short_attempt_ = on; }
      ~ShortScope() { t_short_attempt_ = prev; }
    } short_scope(short_attempts);
    const auto start = std::chrono::steady_clock::now();
    bool refreshed = false;
    for (int n = 0;; ++n) {
      if (pool_.cancelled())
        return Status::Unavailable(std::string(HttpPool::kCancelledMessage) + " (S3 endpoint " + ep_.endpoint + ")");
      t_signed_gen_ = CredentialsGeneration();
      t_last_answered_ = false;
      Outcome o = attempt();
      const uint64_t gen = t_signed_gen_;  // what the attempt was signed with (Build)
      // Answered (a whole reply came back: data, NotFound, a 4xx, a 5xx that
      // is retried; not a body cut short or stalled): the source is there.
      // In outage mode this call then gets the whole budget from here on.
      if (t_last_answered_ || o.status.ok()) {
        answered = true;
        EndOutage();
        if (short_attempts) {
          short_attempts = false;
          t_short_attempt_ = short_scope.prev;
          max_retries = opts_.max_retries;
        }
      }
      if (o.status.ok()) return Status::Ok();
      if (o.credentials_refused && !refreshed && !anonymous_) {
        refreshed = true;
        if (RefreshCredentials(gen)) {
          --n;  // not a retry of a failure of the backend
          continue;
        }
      }
      bool give_up = !o.retry || n >= max_retries || pool_.cancelled();
      int64_t sleep_ms = 0;
      if (!give_up) {
        // 2^20 * base is already beyond any sane deadline; cap the shift.
        int64_t cap = static_cast<int64_t>(std::max(opts_.retry_base_ms, 1)) << std::min(n, 20);
        sleep_ms = Jitter(cap);
        auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start).count();
        // >=: a zero deadline allows no retry, even when the attempt took
        // under a millisecond and the jitter drew 0.
        give_up = elapsed + sleep_ms >= opts_.retry_deadline_ms;
      }
      if (give_up) {
        Status s = o.status;
        if (n > 0) s = Status(s.code(), s.message() + " (after " + std::to_string(n) + " retries)");
        // NotFound and Changed are answers, not backend failures.
        if (opts_.metrics && s.code() != Code::kNotFound && s.code() != Code::kChanged && !pool_.cancelled()) {
          Add(opts_.metrics->backend_errors);
        }
        // The whole default budget spent with no answer at all: an outage.
        if (default_budget && !answered && s.code() == Code::kUnavailable && o.retry && !short_attempts &&
            !pool_.cancelled())
          BeginOutage(s);
        return s;
      }
      if (opts_.metrics) Add(opts_.metrics->backend_retries);
      spdlog::debug("s3: retry {} in {} ms after: {}", n + 1, sleep_ms, o.status.ToString());
      std::unique_lock lk(cancel_mu_);
      cancel_cv_.wait_for(lk, std::chrono::milliseconds(sleep_ms), [&] { return pool_.cancelled(); });
    }
  }

  uint64_t CredentialsGeneration() {
    std::lock_guard lk(cred_mu_);
    return cred_gen_;
  }
  // After S3 refused the credentials a request was signed with (generation
  // `gen`): true if newer ones are in place, because another request
  // already read them or because opts_.refresh_credentials gives new ones
  // now. One reader at a time (renew_mu_), the others wait for it and then
  // see the new generation; the provider may wait on the network (STS,
  // instance metadata, a credential_process), so cred_mu_ is not held
  // meanwhile: requests with good credentials go on signing.
  bool RefreshCredentials(uint64_t gen) {
    if (CredentialsGeneration() != gen) return true;
    if (!opts_.refresh_credentials) return false;
    std::lock_guard renewing(renew_mu_);
    const int64_t now = NowUnixS();
    {
      std::lock_guard lk(cred_mu_);
      if (cred_gen_ != gen) return true;  // renewed while this one waited
      // The provider just gave these same keys again: refusals meanwhile do
      // not ask it once each (a burst of refused reads was a burst of STS or
      // instance metadata calls).
      if (now < same_keys_until_s_) return false;
    }
    auto c = CallProvider();
    std::lock_guard lk(cred_mu_);
    if (cred_gen_ != gen) return true;
    // The back-off runs from the provider's answer (it may have taken a
    // minute: from before the call it would be over already).
    if (!c) {
      spdlog::warn("s3: credentials refused by {} and cannot be read again: {}", ep_.endpoint, c.error().message());
      same_keys_until_s_ = NowUnixS() + kSameKeysBackoffS;
      if (opts_.metrics) Add(opts_.metrics->credentials_renew_failures);
      return false;
    }
    if (SameKeys(*c, credentials_)) {
      credentials_.expires_unix_s = c->expires_unix_s;
      NoteCredentialsLocked();
      same_keys_until_s_ = NowUnixS() + kSameKeysBackoffS;
      StartRenewerLocked();  // an expiry they did not carry before
      return false;
    }
    credentials_ = std::move(*c);
    NoteCredentialsLocked();
    ++cred_gen_;
    same_keys_until_s_ = 0;  // new keys: a refusal of them asks again
    StartRenewerLocked();    // they may be the first to carry an expiry
    spdlog::info("s3: credentials refused by {}; read them again and retrying with the new ones", ep_.endpoint);
    return true;
  }
  static constexpr int64_t kSameKeysBackoffS = 5;
  static int64_t NowUnixS() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  // opts_.refresh_credentials, an exception (a bug, out of memory) as an error.
  Result<Credentials> CallProvider() {
    try {
      return opts_.refresh_credentials();
    } catch (const std::exception& e) {
      return Err(Status::Internal(std::string("reading the credentials: ") + e.what()));
    }
  }
  static bool SameKeys(const Credentials& a, const Credentials& b) {
    return a.access_key == b.access_key && a.secret_key == b.secret_key && a.session_token == b.session_token;
  }

  // Temporary credentials (instance metadata, container, web identity, a
  // credential_process, an assumed role) are renewed within kRenewAheadS of
  // their expiry by a thread of their own (RenewLoop), so no request waits
  // for the provider (up to 5 s for STS or instance metadata, 60 s for a
  // credential_process): they go on signing with the current ones. A failed
  // renewal is tried again kRenewRetryS later (and said at most every
  // kRenewWarnS). Past the expiry S3 refuses them and RefreshCredentials
  // asks again, for the request that was refused.
  static constexpr int64_t kRenewAheadS = 300, kRenewRetryS = 10, kRenewWarnS = 60;
  // The renewer sleeps at most this long at a time: the expiry is wall-clock
  // time, and the wall clock may jump (a suspended VM resumed).
  static constexpr int64_t kRenewPollS = 30;
  // Under cred_mu_: the renewer runs once credentials carry an expiry.
  void StartRenewerLocked() {
    if (anonymous_ || !opts_.refresh_credentials || credentials_.expires_unix_s == 0 || renewer_.joinable() ||
        stop_renewer_)
      return;
    try {
      renewer_ = std::thread([this] { RenewLoop(); });
    } catch (const std::exception& e) {
      // Without it the credentials are still read again when S3 refuses them.
      spdlog::warn("s3: cannot start the thread that renews the credentials before they expire ({}): they are "
                   "read again when S3 refuses them",
                   e.what());
    }
  }
  void StopRenewer() {
    {
      std::lock_guard lk(cred_mu_);
      stop_renewer_ = true;
    }
    renew_cv_.notify_all();
  }
  void RenewLoop() {
    std::unique_lock lk(cred_mu_);
    while (!stop_renewer_) {
      const int64_t now = NowUnixS();
      const int64_t due = credentials_.expires_unix_s == 0
                              ? now + kRenewPollS
                              : std::max(credentials_.expires_unix_s - kRenewAheadS, next_renew_s_);
      if (credentials_.expires_unix_s == 0 || now < due) {
        renew_cv_.wait_for(lk, std::chrono::seconds(std::clamp<int64_t>(due - now, 1, kRenewPollS)));
        continue;
      }
      next_renew_s_ = now + kRenewRetryS;
      const uint64_t gen = cred_gen_;
      lk.unlock();
      try {
        Renew(gen);
      } catch (const std::exception& e) {  // out of memory: tried again kRenewRetryS later
        spdlog::warn("s3: renewing the credentials: {}", e.what());
      }
      lk.lock();
    }
  }
  // One renewal of the credentials of generation `gen` (the renewer's).
  // What it learns holds back a refusal's refresh waiting on renew_mu_
  // meanwhile (same_keys_until_s_): it would ask the provider again at once
  // and wait as long again.
  void Renew(uint64_t gen) {
    std::lock_guard renewing(renew_mu_);
    {
      std::lock_guard lk(cred_mu_);
      if (cred_gen_ != gen || stop_renewer_) return;  // renewed meanwhile (a refusal's refresh)
    }
    auto c = CallProvider();
    const int64_t now = NowUnixS();  // the provider may have taken a minute
    std::lock_guard lk(cred_mu_);
    if (cred_gen_ != gen) return;
    if (!c) {
      same_keys_until_s_ = now + kSameKeysBackoffS;
      if (opts_.metrics) Add(opts_.metrics->credentials_renew_failures);
      if (now >= next_renew_warn_s_) {
        next_renew_warn_s_ = now + kRenewWarnS;
        const int64_t left = credentials_.expires_unix_s - now;
        spdlog::warn("s3: credentials from {} {} and cannot be renewed: {}", credentials_.source,
                     left > 0 ? fmt::format("expire in {} s", left) : fmt::format("expired {} s ago", -left),
                     c.error().message());
      }
      return;
    }
    if (SameKeys(*c, credentials_)) {
      // The provider still hands out the same ones (IMDS does until shortly
      // before they expire): their expiry may have moved.
      credentials_.expires_unix_s = c->expires_unix_s;
      NoteCredentialsLocked();
      same_keys_until_s_ = now + kSameKeysBackoffS;
      return;
    }
    credentials_ = std::move(*c);
    NoteCredentialsLocked();
    ++cred_gen_;
    same_keys_until_s_ = 0;  // new keys: a refusal of them asks again
    next_renew_warn_s_ = 0;
    spdlog::info("s3: credentials from {} renewed; they expire in {} s", credentials_.source,
                 credentials_.expires_unix_s ? credentials_.expires_unix_s - now : 0);
  }

  // The credentials' expiry as the metrics show it (stats, /metrics).
  // Requires cred_mu_.
  void NoteCredentialsLocked() {
    if (opts_.metrics && !anonymous_)
      opts_.metrics->credentials_expiry_unix_s.store(
          static_cast<uint64_t>(std::max<int64_t>(0, credentials_.expires_unix_s)), std::memory_order_relaxed);
  }

  static int64_t Jitter(int64_t cap) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return std::uniform_int_distribution<int64_t>(0, cap)(rng);
  }

  const S3Options opts_;
  const S3Endpoint ep_;
  bool anonymous_ = false;
  // What an access-denied 403 names besides the credentials and the bucket
  // policy: the bucket's owner when one is expected, and Requester Pays
  // when it is not asked for.
  const std::string hint_403_ =
      (opts_.expected_bucket_owner.empty()
           ? std::string()
           : "; or the bucket does not belong to account " + opts_.expected_bucket_owner +
                 " (backend.expected_bucket_owner)") +
      (opts_.requester_pays || opts_.no_sign_request
           ? std::string()
           : "; a Requester Pays bucket also needs backend.requester_pays (--requester-pays)");
  std::mutex cred_mu_;  // guards credentials_, cred_gen_, next_renew_s_, next_renew_warn_s_, same_keys_until_s_,
                       // stop_renewer_, renewer_
  Credentials credentials_;   // what requests are signed with (RefreshCredentials)
  uint64_t cred_gen_ = 0;
  int64_t next_renew_s_ = 0;  // RenewLoop: not before (unix s)
  int64_t next_renew_warn_s_ = 0;  // its warning: not before (unix s)
  int64_t same_keys_until_s_ = 0;  // RefreshCredentials: the provider is not asked again before (unix s)
  std::mutex renew_mu_;       // one renewal or refresh at a time (taken before cred_mu_, never inside it)
  std::condition_variable renew_cv_;  // wakes the renewer to stop (with cred_mu_)
  bool stop_renewer_ = false;
  std::thread renewer_;  // RenewLoop; joined by the destructor
  HttpPool pool_;
  std::mutex cancel_mu_;  // only for the wait between retries

  // Outage mode: the source did not answer for a whole retry budget (its
  // connections refused or timed out), or a mount came up on its cache dir
  // because it did not answer (NoteUnreachable). Until it answers again,
  // requests on the default budget get one attempt, a GET's aborted after
  // kQuickProbeMs without progress: an uncached read fails in seconds, not
  // after the retry budget again and again (as the AWS SDKs stop retrying
  // once failures have drained their retry quota). The first answer, to any
  // request (a listing refreshed in the background), ends it.
  std::atomic<bool> outage_{false};
  std::mutex outage_mu_;  // BeginOutage / EndOutage / NoteUnreachable
  static thread_local bool t_short_attempt_;  // set by WithRetries for Send
  static thread_local bool t_last_answered_;  // this thread's last Send got a whole reply
  static thread_local uint64_t t_signed_gen_;  // the credentials generation this thread's last Build signed with

  HttpResponse Send(HttpRequest& req) {
    // Without a sink (LIST, HEAD) the timeout caps the whole request, and a
    // slow listing must still be able to end outage mode: only its stall
    // limit is shortened. Before, each lookup of a directory never listed
    // took a whole request_timeout_ms in an outage of a stalled source (a
    // tester: 30 s each).
    if (t_short_attempt_) {
      const int quick = std::min(opts_.request_timeout_ms, Backend::kQuickProbeMs);
      if (req.sink)
        req.request_timeout_ms = req.request_timeout_ms > 0 ? std::min(req.request_timeout_ms, quick) : quick;
      else
        req.stall_ms = quick;
    }
    // A reply kept in memory (a listing, an error document) that ends
    // before its XML does: its Content-Length was short and the rest of it
    // is still on the connection, which is closed, not reused. Reused, the
    // next request on it (the listing's retry, any GET) read those bytes as
    // its reply and failed at once ("Received HTTP/0.9"): a tester's proxy
    // that shortened one LIST reply's length made unrelated reads fail.
    if (!req.sink && !req.keep_connection)
      req.keep_connection = [](const HttpResponse& r) { return r.curl_code != 0 || XmlBodyComplete(r.body); };
    HttpResponse r = pool_.Perform(req);
    t_last_answered_ = r.curl_code == 0 && r.status != 0;
    return r;
  }
  // The log says when outage mode begins and ends, at most once a minute
  // each for a source that flaps (the next line counts the ones left out).
  void BeginOutage(const Status& why) {
    const auto now = std::chrono::steady_clock::now();
    uint64_t quiet = 0;
    {
      std::lock_guard lk(outage_mu_);
      if (!SetOutageLocked(now)) return;
      ++outages_;
      if (logged_outage_ != std::chrono::steady_clock::time_point{} && now - logged_outage_ < kOutageLogEvery) return;
      logged_outage_ = now;
      quiet = outages_ - 1 - logged_outages_;
      logged_outages_ = outages_;
    }
    spdlog::warn("s3: {} did not answer for a whole retry budget ({}); until it answers again, each request gets "
                 "one attempt, a read or listing cut off after {} ms without data (reads of uncached data fail fast with "
                 "EIO){}",
                 ep_.endpoint, why.message(), std::min(opts_.request_timeout_ms, Backend::kQuickProbeMs),
                 quiet ? fmt::format(" [{} more outages since the last such line]", quiet) : "");
  }
  // Under outage_mu_ (flag and gauge change together): false if it was on.
  bool SetOutageLocked(std::chrono::steady_clock::time_point now) {
    if (outage_.exchange(true)) return false;
    if (opts_.metrics) opts_.metrics->backend_outage.store(1, std::memory_order_relaxed);
    outage_since_ = now;
    return true;
  }
  void EndOutage() {
    if (!outage_.load(std::memory_order_relaxed)) return;
    double secs = 0;
    {
      std::lock_guard lk(outage_mu_);
      if (!outage_.exchange(false)) return;
      if (opts_.metrics) opts_.metrics->backend_outage.store(0, std::memory_order_relaxed);
      const auto now = std::chrono::steady_clock::now();
      if (logged_answer_ != std::chrono::steady_clock::time_point{} && now - logged_answer_ < kOutageLogEvery) return;
      logged_answer_ = now;
      secs = std::chrono::duration<double>(now - outage_since_).count();
    }
    spdlog::info("s3: {} answers again after {:.1f} s; requests get the whole retry budget again", ep_.endpoint, secs);
  }
  static constexpr std::chrono::seconds kOutageLogEvery{60};
  // Under outage_mu_.
  std::chrono::steady_clock::time_point outage_since_{}, logged_outage_{}, logged_answer_{};
  uint64_t outages_ = 0, logged_outages_ = 0;
  std::condition_variable cancel_cv_;
};

thread_local bool S3Backend::t_short_attempt_ = false;
thread_local bool S3Backend::t_last_answered_ = false;
thread_local uint64_t S3Backend::t_signed_gen_ = 0;

}  // namespace
}  // namespace igt::s3

namespace igt {

std::string RegionFromEnv() {
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "us-east-1";
}

bool IsAwsS3Endpoint(std::string_view endpoint) {
  if (endpoint.empty()) return true;
  const size_t sep = endpoint.find("://");
  std::string_view rest = sep == std::string_view::npos ? endpoint : endpoint.substr(sep + 3);
  rest = rest.substr(0, rest.find_first_of("/:?#"));
  std::string host(rest);
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn");
}

std::string DiscoverBucketRegion(const S3Options& in, int timeout_ms) {
  S3Options opts = in;
  if (opts.region.empty()) opts.region = "us-east-1";
  auto ep = s3::ResolveEndpoint(opts);
  if (!ep) return "";
  s3::HttpPoolOptions po;
  po.max_connections = 1;
  po.connect_timeout_ms = std::min(opts.connect_timeout_ms > 0 ? opts.connect_timeout_ms : timeout_ms, timeout_ms);
  po.request_timeout_ms = timeout_ms;
  if (const char* ca = std::getenv("AWS_CA_BUNDLE"); ca && *ca) po.ca_bundle = ca;
  s3::HttpPool pool(std::move(po));
  s3::HttpRequest req;
  req.method = "HEAD";
  req.url = ep->Url("", {});
  const s3::HttpResponse r = pool.Perform(req);
  if (r.curl_code != 0) return "";
  const std::string* region = r.Header("x-amz-bucket-region");
  if (!region || !RegionNameProblem(*region).empty()) return "";
  return *region;
}

Result<std::unique_ptr<Backend>> MakeS3Backend(const S3Options& in) {
  S3Options opts = in;
  if (opts.bucket.empty()) return Err(Status::InvalidArgument("S3 bucket name is empty"));
  // Buckets predating the naming rules (or on other stores) may break them;
  // the server is the judge here, ParseSourceUrl applies the strict rules.
  // As given: a leading '/' is part of the keys (s3://b//data: ParseSourceUrl).
  if (!opts.prefix.empty() && opts.prefix.back() != '/') opts.prefix += '/';
  if (opts.region.empty()) opts.region = "us-east-1";
  if (opts.max_retries < 0) opts.max_retries = 0;
  auto ep = s3::ResolveEndpoint(opts);
  if (!ep) return Err(ep.error());
  s3::HttpPoolOptions po;
  po.max_connections = opts.max_connections;
  po.connect_timeout_ms = opts.connect_timeout_ms;
  po.request_timeout_ms = opts.request_timeout_ms;
  if (const char* ca = std::getenv("AWS_CA_BUNDLE"); ca && *ca) po.ca_bundle = ca;
  return std::unique_ptr<Backend>(new s3::S3Backend(std::move(opts), std::move(*ep), std::move(po)));
}

}  // namespace igt
