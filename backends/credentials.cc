// ResolveCredentials: environment, then the shared credentials file.

#include "backends/credentials.h"

#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

namespace igt {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string CredentialsPath() {
  if (std::string p = Env("AWS_SHARED_CREDENTIALS_FILE"); !p.empty()) return p;
  std::string home = Env("HOME");
  if (home.empty()) {
    if (passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) home = pw->pw_dir;
  }
  return home + "/.aws/credentials";
}

}  // namespace

Result<Credentials> ParseCredentialsIni(std::string_view text, const std::string& profile,
                                        const std::string& source) {
  Credentials c;
  bool in_section = false, found = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = Trim(text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos));
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      auto close = line.find(']');
      if (close == std::string_view::npos) {
        in_section = false;
        continue;
      }
      std::string_view name = Trim(line.substr(1, close - 1));
      if (name.starts_with("profile ")) name = Trim(name.substr(8));
      in_section = name == profile;
      found = found || in_section;
      continue;
    }
    if (!in_section) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key = Lower(Trim(line.substr(0, eq)));
    std::string value(Trim(line.substr(eq + 1)));
    if (key == "aws_access_key_id") c.access_key = value;
    else if (key == "aws_secret_access_key") c.secret_key = value;
    else if (key == "aws_session_token") c.session_token = value;
  }
  if (!found) {
    return Err(Status::NotFound("no AWS credentials: profile [" + profile + "] not found in " + source));
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    std::string missing = c.access_key.empty() ? "aws_access_key_id" : "aws_secret_access_key";
    return Err(Status::NotFound("no AWS credentials: profile [" + profile + "] in " + source +
                                " has no " + missing));
  }
  return c;
}

Result<Credentials> ResolveCredentials(const std::string& profile_arg) {
  // A profile named by the caller (--profile, backend.profile) is read from
  // the file even when AWS_* keys are set, as the AWS CLI does: asking for a
  // profile and silently signing with other keys would act under the wrong
  // identity. Otherwise the environment comes first (both variables must be
  // set), then the file ($AWS_PROFILE, else "default").
  if (profile_arg.empty()) {
    std::string id = Env("AWS_ACCESS_KEY_ID"), secret = Env("AWS_SECRET_ACCESS_KEY");
    if (!id.empty() && !secret.empty()) return Credentials{id, secret, Env("AWS_SESSION_TOKEN")};
    // One of the two set: refused, as the AWS CLI does (partial credentials),
    // rather than signing with the file's keys under another identity.
    if (!id.empty() || !secret.empty())
      return Err(Status::NotFound(fmt::format(
          "no AWS credentials: {} is set but {} is not (set both, or neither to use the credentials file)",
          id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
          id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY")));
  }
  std::string profile = profile_arg;
  if (profile.empty()) profile = Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  // Ends in " and " (cut off where it ends a message).
  const std::string why_not_env = profile_arg.empty()
                                      ? "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set and "
                                      : "profile [" + profile_arg + "] was asked for (the AWS_* keys are not used) and ";
  std::string path = CredentialsPath();
  std::ifstream in(path);
  if (!in) {
    return Err(Status::NotFound(
        "no AWS credentials: " + why_not_env + "credentials file " + path + " cannot be read (profile [" +
        profile + "])"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = ParseCredentialsIni(ss.str(), profile, path);
  if (!c) {
    return Err(Status(c.error().code(), c.error().message() + "; " + why_not_env.substr(0, why_not_env.size() - 5)));
  }
  return c;
}

}  // namespace igt
