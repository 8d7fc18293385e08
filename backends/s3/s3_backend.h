#pragma once
// Internals of the S3 backend exposed for unit tests: endpoint/addressing
// resolution and the mapping of one HTTP outcome to a Status + retry verdict.
// Everything else lives behind igt::MakeS3Backend (igtcache/backends.h).
// Thread-safety: pure functions; S3Endpoint is an immutable value.

#include <string>
#include <string_view>

#include "backends/s3/http_pool.h"
#include "backends/s3/sigv4.h"
#include "igtcache/backends.h"

namespace igt::s3 {

struct S3Endpoint {
  std::string endpoint;   // as configured or defaulted, for messages: "http://127.0.0.1:9000"
  std::string scheme;     // "http" | "https"
  std::string host;       // the Host header: "127.0.0.1:9000", "bucket.s3.us-east-1.amazonaws.com"
  std::string base_path;  // "" or "/base" when the endpoint URL has a path
  std::string bucket;
  bool path_style = false;

  // Raw (unencoded) request path for a full bucket key ("" = bucket root).
  std::string RawPath(std::string_view full_key) const;
  // Fully encoded URL; the query is encoded exactly as SigV4 canonicalises it.
  std::string Url(std::string_view full_key, const QueryList& query) const;
};

// Endpoint "" -> https://s3.<region>.amazonaws.com (.com.cn for cn-
// regions). Addressing "auto" picks path-style for an endpoint URL that is
// not AWS's (*.amazonaws.com, *.amazonaws.com.cn), as the AWS CLI does, for
// IP-literal hosts and host names without a dot ("localhost", a compose
// service such as "minio": "bucket.minio" would not resolve) and for
// buckets with dots (TLS wildcard certificates do not cover them), else
// virtual-hosted.
Result<S3Endpoint> ResolveEndpoint(const S3Options& opts);

// S3 bucket naming rules (3-63 chars, [a-z0-9.-], starts/ends alnum, no "..",
// not an IPv4 address, no "xn--" prefix / "-s3alias" suffix). Empty = valid,
// else the reason. Such a name is also a host name (virtual-hosted addressing).
std::string BucketNameProblem(std::string_view bucket);
// The legacy rules, which buckets made in us-east-1 before March 2018 (and
// some S3-compatible stores) still follow: 3-255 chars, [A-Za-z0-9._-],
// starts/ends alnum, no "..", not an IPv4 address. Empty = valid. Reached
// with path-style addressing only.
std::string LegacyBucketNameProblem(std::string_view bucket);

struct Outcome {
  Status status;       // ok -> success
  bool retry = false;  // worth another attempt
  // S3 refused the credentials as expired or unknown: worth one attempt
  // with refreshed ones (S3Options::refresh_credentials), if they changed.
  bool credentials_refused = false;
};

// Maps a failed exchange (transport error or a non-success status) to a
// Status. `what` names the object or operation ("key 'a/b'", "listing").
// `hint_403` ends the message of a 403 that is not about the credentials.
Outcome ClassifyFailure(const HttpResponse& r, const S3Endpoint& ep, std::string_view what,
                        std::string_view hint_403 = {});

}  // namespace igt::s3
