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
  int64_t expires_unix_s = 0;  // temporary credentials: when they expire (0: they do not)
  std::string source;          // where they came from, for logs ("environment", "instance metadata (role r)")
};

// The AWS credential chain, as the AWS CLI and SDKs walk it. A non-empty
// `profile`: that profile (as 3. below) whatever the environment holds (as
// the AWS CLI's --profile). Else, first found:
//   1. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN;
//   2. a web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, exchanged
//      at STS (AssumeRoleWithWebIdentity; AWS_ENDPOINT_URL_STS, else STS of
//      `region`): EKS service accounts;
//   3. the profile $AWS_PROFILE or "default": a role to assume (role_arn
//      with source_profile or credential_source, STS AssumeRole), else its
//      IAM Identity Center sign-in (sso_session or sso_start_url: the token
//      `aws sso login` cached, SSO GetRoleCredentials), else its
//      keys in the credentials file, else its credential_process (config or
//      credentials file),
//      else its keys in the config file (~/.aws/config, $AWS_CONFIG_FILE);
//   4. the container endpoint (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or
//      _FULL_URI, with AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]): ECS tasks,
//      EKS Pod Identity;
//   5. the EC2 instance metadata service (IMDSv2, else v1;
//      AWS_EC2_METADATA_SERVICE_ENDPOINT; off with
//      AWS_EC2_METADATA_DISABLED=true).
// A link configured but failing (2, 4, a named $AWS_PROFILE) is an error, not
// skipped. NotFound with a message saying where it looked. Never logs the
// secret. Temporary credentials carry their expiry (S3 renews them before it
// through S3Options::refresh_credentials).
Result<Credentials> ResolveCredentials(const std::string& profile, const std::string& region = "us-east-1");

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
  // Sent with every request, signed: x-amz-request-payer: requester (a
  // Requester Pays bucket), x-amz-expected-bucket-owner (when not empty).
  bool requester_pays = false;
  std::string expected_bucket_owner;
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

// The region S3 says the bucket of `opts` is in: the x-amz-bucket-region
// header of one unsigned HEAD of the bucket at its endpoint (AWS sends it
// whatever the status: 200, 301 or 403), within `timeout_ms`. "" when the
// store does not say, the name is not a region, or it does not answer.
// The mount asks when no region is configured (BuildBackend).
std::string DiscoverBucketRegion(const S3Options& opts, int timeout_ms);
// The endpoint is AWS's S3: "" (the default) or a host under
// amazonaws.com or amazonaws.com.cn.
bool IsAwsS3Endpoint(std::string_view endpoint);

// The region to sign for when none is configured: $AWS_REGION, else
// $AWS_DEFAULT_REGION, else "us-east-1" (the AWS CLI's order; the mount
// takes the profile's `region` before the last: BuildBackend).
std::string RegionFromEnv();

// A setting (`region`, `endpoint_url`) of a profile's section in the AWS
// config file ($AWS_CONFIG_FILE, else ~/.aws/config): the profile named,
// else $AWS_PROFILE, else `default`. "" when unset or unreadable; `*where`
// says where it was found (for messages).
std::string ProfileConfigSetting(const std::string& profile, const char* key, std::string* where = nullptr);

// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is "true" (any case): no endpoint
// from the environment or the config file, for S3, STS and SSO alike.
bool IgnoreConfiguredEndpoints();

// A path from $AWS_SHARED_CREDENTIALS_FILE or $AWS_CONFIG_FILE as the AWS CLI
// reads it: $NAME and ${NAME} expanded, then a leading ~ or ~user (no shell
// expands a systemd Environment= line or a container's env).
std::string ExpandAwsPath(const std::string& path);

}  // namespace igt
