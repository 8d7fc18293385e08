#pragma once
// Internal: the AWS shared-credentials (INI) parser behind ResolveCredentials,
// as a pure function for unit tests. Thread-safety: pure.
// Secrets: messages name the file, the profile and missing keys, never values.

#include <string>
#include <string_view>

#include "igtcache/backends.h"

namespace igt {

// Reads section [profile] (also accepts "[profile <name>]", the config-file
// spelling) of an AWS credentials file. Keys: aws_access_key_id,
// aws_secret_access_key, aws_session_token (names case-insensitive, values
// trimmed, '#'/';' comment lines). NotFound if the section is missing or
// lacks a key id / secret; `source` names the file in messages.
Result<Credentials> ParseCredentialsIni(std::string_view text, const std::string& profile,
                                        const std::string& source);

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
Result<Credentials> InstanceMetadataCredentials();
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
// Their replies, as pure functions: the container / instance metadata JSON
// ({"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}) and STS's
// AssumeRoleWithWebIdentity / AssumeRole XML; `source` names the provider in messages
// and becomes Credentials::source.
Result<Credentials> ParseCredentialsJson(std::string_view body, const std::string& source);
Result<Credentials> ParseStsResponse(std::string_view xml, const std::string& source);
// 2026-11-28T17:00:00Z (fraction and +hh:mm allowed) -> unix seconds.
Result<int64_t> ParseIso8601(std::string_view s);

}  // namespace igt
