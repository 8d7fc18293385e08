#pragma once
// Internal: the pieces of ResolveCredentials (backends.h), as functions for
// unit tests: the INI reader of the credentials and config files, the remote
// links, their reply parsers. Secrets: messages name files, profiles,
// endpoints and missing keys, never values.

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "igtcache/backends.h"

namespace igt {

// $name, or "" when unset.
std::string Env(const char* name);
// The whole file, or nullopt when it cannot be read.
std::optional<std::string> ReadText(const std::string& path);

// The keys of section [profile] (also "[profile <name>]", the config-file
// spelling) of an AWS credentials or config file: names lower-cased, values
// trimmed, '#'/';' comment lines skipped. nullopt if there is no such section.
std::optional<std::map<std::string, std::string>> IniSection(std::string_view text, const std::string& profile);

// The remote links of the chain (backends/credential_providers.cc): each
// NotFound when it is not configured here, another error naming the
// endpoint when it is and fails.
Result<Credentials> WebIdentityCredentials(const std::string& region);
// The same with explicit settings (a profile's web_identity_token_file and
// role_arn); `token_what` names the token file's setting in messages.
Result<Credentials> WebIdentityCredentials(const std::string& token_file, const char* token_what,
                                           const std::string& role, const std::string& session_name,
                                           const std::string& region);
// Trims the three fields and refuses control characters in them (they go
// into HTTP headers): `c`, or InvalidArgument naming the field and source.
Result<Credentials> CheckedCredentials(Credentials c);
Result<Credentials> ContainerCredentials();
// `profile`: the config file's section of the profile in use (its
// ec2_metadata_service_endpoint[_mode] settings), if any.
using ProfileSettings = std::map<std::string, std::string>;
Result<Credentials> InstanceMetadataCredentials(const ProfileSettings* profile = nullptr);
// Where InstanceMetadataCredentials asks, as the AWS SDKs: the endpoint
// ($AWS_EC2_METADATA_SERVICE_ENDPOINT, else the profile's
// ec2_metadata_service_endpoint), else by the mode
// ($AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE, else the profile's
// ec2_metadata_service_endpoint_mode): IPv4, the default,
// http://169.254.169.254; IPv6, http://[fd00:ec2::254]. Without a trailing
// '/'. InvalidArgument for another mode.
Result<std::string> InstanceMetadataEndpoint(const ProfileSettings* profile = nullptr);
// STS AssumeRole of `role_arn`, signed with `base` (a profile's role_arn
// with source_profile or credential_source); `what` names the profile in
// messages. duration_s 0: STS's default.
Result<Credentials> AssumeRoleCredentials(const std::string& role_arn, const Credentials& base,
                                          const std::string& session, const std::string& external_id,
                                          int64_t duration_s, const std::string& region, const std::string& what);
// A profile's credential_process: `command` run through /bin/sh, its stdout
// {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken",
// "Expiration"}; a failure names its exit status and stderr's tail. At
// most 60 s.
Result<Credentials> ProcessCredentials(const std::string& command, const std::string& source);
// A service's endpoint as the AWS SDKs find it: $<env> (the service's own,
// e.g. AWS_ENDPOINT_URL_STS), else, with `global`, $AWS_ENDPOINT_URL (every
// service's), else https://<host>.<region>.amazonaws.com (.cn in China; ""
// region: us-east-1). No trailing '/'. The SSO calls pass global = false:
// they send the token, the refresh token and the client secret themselves
// (not a signature), and $AWS_ENDPOINT_URL is often the S3-compatible store
// being mounted.
std::string ServiceEndpoint(const char* env, std::string_view host, const std::string& region, bool global = true);

// A profile that signs in through IAM Identity Center, as the AWS CLI reads
// it after `aws sso login`: the token cached in
// <cache_dir>/<sha1 of the sso-session's name, or of start_url when there is
// no session>.json, refreshed at SSO-OIDC (CreateToken, at
// $AWS_ENDPOINT_URL_SSO_OIDC, else the sso_region's) within 15
// minutes of its expiry when it belongs to an sso-session (the cache file
// is rewritten), then exchanged for the role's credentials
// (GetRoleCredentials, at $AWS_ENDPOINT_URL_SSO, else the sso_region's
// portal). Not signed in, or a token expired or refused:
// PermissionDenied naming the `aws sso login` command to run.
struct SsoSettings {
  std::string profile;  // the profile, for messages
  std::string session;  // sso_session's name; empty: the legacy form
  std::string start_url, region, account_id, role_name;
  std::string cache_dir;  // ~/.aws/sso/cache
};
Result<Credentials> SsoCredentials(const SsoSettings& s);
// Their replies, as pure functions: the container / instance metadata JSON
// ({"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}) and STS's
// AssumeRoleWithWebIdentity / AssumeRole XML; `source` names the provider in messages
// and becomes Credentials::source.
Result<Credentials> ParseCredentialsJson(std::string_view body, const std::string& source);
Result<Credentials> ParseStsResponse(std::string_view xml, const std::string& source);
// 2026-11-28T17:00:00Z (fraction and +hh:mm allowed) -> unix seconds.
Result<int64_t> ParseIso8601(std::string_view s);
// Unix seconds -> 2026-11-28T17:00:00Z (UTC).
std::string FormatIso8601(int64_t unix_s);

}  // namespace igt
