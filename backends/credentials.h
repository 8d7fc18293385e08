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

}  // namespace igt
