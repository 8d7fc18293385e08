#pragma once
// Factories for the built-in backends and the SOURCE URL syntax.
//   file:///abs/dir          local directory (the embedded default)
//   s3://bucket[/prefix]     S3 or any S3-compatible store
// Implementations live in backends/; callers see only Backend.

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "igtcache/backend.h"

namespace igt {

struct Metrics;

struct SourceUrl {
  enum class Kind { kFile, kS3 };
  Kind kind = Kind::kFile;
  std::string path;    // kFile: absolute directory path
  std::string bucket;  // kS3
  std::string prefix;  // kS3: "" or "a/b/" (always ends with '/' when set)
};

// InvalidArgument naming what is wrong ("unknown scheme 'gs'", "relative path").
Result<SourceUrl> ParseSourceUrl(std::string_view url);

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // optional
};

// A non-empty `profile`: section [profile] of ~/.aws/credentials (or
// $AWS_SHARED_CREDENTIALS_FILE), whatever the environment holds (as the AWS
// CLI's --profile). Else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
// AWS_SESSION_TOKEN, else that file's section [$AWS_PROFILE or "default"].
// NotFound with a message saying where it looked. Never logs the secret.
Result<Credentials> ResolveCredentials(const std::string& profile);

struct S3Options {
  std::string bucket;
  std::string prefix;                 // "" or ends with '/'
  std::string endpoint;               // Default: "" -> https://s3.<region>.amazonaws.com; else $AWS_ENDPOINT_URL
  std::string region = "us-east-1";   // "" = us-east-1 (the mount resolves $AWS_REGION first: RegionFromEnv)
  std::string addressing = "auto";    // auto | path | virtual (ResolveEndpoint in backends/s3/s3_backend.h)
  Credentials credentials;            // empty access_key + no_sign_request -> anonymous
  // Called when S3 refuses the credentials as expired or unknown
  // (ExpiredToken, InvalidToken, TokenRefreshRequired, InvalidAccessKeyId):
  // temporary credentials (STS, SSO) run out during a long mount, and a tool
  // such as `aws sso login` writes new ones. New credentials are used from
  // then on and the request is retried once; the same ones, an error, or no
  // callback: the request fails (PermissionDenied). May be empty.
  std::function<Result<Credentials>()> refresh_credentials;
  bool no_sign_request = false;
  int connect_timeout_ms = 3000;      // Default: 3 s
  int request_timeout_ms = 30000;     // Default: 30 s; a stalled transfer (no bytes for this long) fails too
  int max_retries = 5;                // Default: 5 retries after the first attempt
  int retry_base_ms = 100;            // Default: 100 ms, doubled each retry, full jitter
  int retry_deadline_ms = 60000;      // Default: 60 s total across retries
  int max_connections = 32;           // Default: 32 pooled connections
  Metrics* metrics = nullptr;         // backend_retries / backend_errors; may be null
};

Result<std::unique_ptr<Backend>> MakeLocalBackend(const std::string& root_dir);
Result<std::unique_ptr<Backend>> MakeS3Backend(const S3Options& opts);

// The region to sign for when none is configured: $AWS_REGION, else
// $AWS_DEFAULT_REGION, else "us-east-1" (the AWS CLI's order).
std::string RegionFromEnv();

}  // namespace igt
