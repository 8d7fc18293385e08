#pragma once
// Factories for the built-in backends and the SOURCE URL syntax.
//   file:///abs/dir          local directory (the embedded default)
//   s3://bucket[/prefix]     S3 or any S3-compatible store
// Implementations live in backends/; callers see only Backend.

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

// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else
// ~/.aws/credentials (or $AWS_SHARED_CREDENTIALS_FILE) section [profile]
// (profile from the argument, else $AWS_PROFILE, else "default").
// NotFound with a message saying where it looked. Never logs the secret.
Result<Credentials> ResolveCredentials(const std::string& profile);

struct S3Options {
  std::string bucket;
  std::string prefix;                 // "" or ends with '/'
  std::string endpoint;               // Default: "" -> https://s3.<region>.amazonaws.com; else $AWS_ENDPOINT_URL
  std::string region = "us-east-1";   // Default: us-east-1 (or $AWS_REGION)
  std::string addressing = "auto";    // auto | path | virtual. auto: path-style for IP/localhost endpoints
  Credentials credentials;            // empty access_key + no_sign_request -> anonymous
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

}  // namespace igt
