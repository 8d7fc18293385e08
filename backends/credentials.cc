// ResolveCredentials: environment, then the shared credentials file.

#include "backends/credentials.h"

#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

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

std::string Home() {
  std::string home = Env("HOME");
  if (home.empty()) {
    if (passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) home = pw->pw_dir;
  }
  return home;
}

std::string CredentialsPath() {
  if (std::string p = Env("AWS_SHARED_CREDENTIALS_FILE"); !p.empty()) return ExpandAwsPath(p);
  return Home() + "/.aws/credentials";
}

std::string ConfigPath() {
  if (std::string p = Env("AWS_CONFIG_FILE"); !p.empty()) return ExpandAwsPath(p);
  return Home() + "/.aws/config";
}

}  // namespace

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::map<std::string, std::string>> IniSection(std::string_view text, const std::string& profile) {
  std::map<std::string, std::string> keys;
  bool in_section = false, found = false;
  // In a nested block: a key with no value, then indented `key = value`
  // lines (`s3 =` then `  endpoint_url = ...`): the service's own settings,
  // not the profile's (read as the profile's, a nested endpoint_url won over
  // the profile's own: a review).
  bool nested = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    const std::string_view raw = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    std::string_view line = Trim(raw);
    const bool indented = !raw.empty() && (raw.front() == ' ' || raw.front() == '\t');
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
      nested = false;
      found = found || in_section;
      continue;
    }
    if (!in_section) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    if (nested && indented) continue;
    const std::string_view value = Trim(line.substr(eq + 1));
    nested = value.empty();
    keys[Lower(Trim(line.substr(0, eq)))] = std::string(value);
  }
  if (!found) return std::nullopt;
  return keys;
}

namespace {

struct ProfileFiles {
  std::string path, config;  // the credentials file, the config file
  std::optional<std::string> cred_text, config_text;
};

ProfileFiles ReadProfileFiles() {
  ProfileFiles f{CredentialsPath(), ConfigPath(), std::nullopt, std::nullopt};
  f.cred_text = ReadText(f.path);
  f.config_text = ReadText(f.config);
  return f;
}

// A profile's SSO settings, with those of its [sso-session NAME] section
// of the config file (which win; the same key in both must agree), checked
// as the AWS CLI checks them, then SsoCredentials.
template <typename Setting>
Result<Credentials> SsoProfileCredentials(const ProfileFiles& f, const std::string& profile, const Setting& setting) {
  SsoSettings s{profile, setting("sso_session"), "", "", setting("sso_account_id"), setting("sso_role_name"),
                Home() + "/.aws/sso/cache"};
  const std::string what = fmt::format("profile [{}] signs in through SSO", profile);
  std::optional<std::map<std::string, std::string>> sec;
  if (!s.session.empty()) {
    if (f.config_text) sec = IniSection(*f.config_text, "sso-session " + s.session);
    if (!sec)
      return Err(Status::InvalidArgument(fmt::format("{}: its sso_session {} has no [sso-session {}] section in {}",
                                                     what, s.session, s.session, f.config)));
  }
  std::vector<std::string> missing;
  for (const auto& [k, field] : {std::pair{"sso_start_url", &s.start_url}, std::pair{"sso_region", &s.region}}) {
    std::string v = setting(k);
    if (sec) {
      const auto it = sec->find(k);
      const std::string in_session = it == sec->end() ? std::string() : it->second;
      if (!v.empty() && !in_session.empty() && v != in_session)
        return Err(Status::InvalidArgument(fmt::format("{}: its {} is not its [sso-session {}]'s", what, k, s.session)));
      if (!in_session.empty()) v = in_session;
    }
    if (v.empty()) missing.push_back(k);
    *field = v;
  }
  for (const char* k : {"sso_account_id", "sso_role_name"})
    if (setting(k).empty()) missing.push_back(k);
  if (!missing.empty())
    return Err(Status::InvalidArgument(fmt::format("{}, but it has no {}{}", what, fmt::join(missing, ", "),
                                                   s.session.empty() ? "" : " (in the profile or its sso-session)")));
  return SsoCredentials(s);
}

constexpr int kMaxRoleChain = 5;  // source_profile hops (a loop is an error)

// Profile `profile` from the files, in the AWS CLI's order: a role to assume
// (role_arn, from source_profile or credential_source), its keys in the
// credentials file, its credential_process, its keys in the config file.
// `*absent`: it has none of these (the message says why; the chain may go
// on); otherwise an error is a broken or failing profile.
Result<Credentials> ProfileCredentials(const ProfileFiles& f, const std::string& profile, const std::string& region,
                                       int depth, bool* absent) {
  *absent = false;
  std::optional<std::map<std::string, std::string>> in_cred, in_config;
  if (f.cred_text) in_cred = IniSection(*f.cred_text, profile);
  if (f.config_text) in_config = IniSection(*f.config_text, profile);
  auto key_of = [](const std::optional<std::map<std::string, std::string>>& sec, const char* k) {
    if (!sec) return std::string();
    auto it = sec->find(k);
    return it == sec->end() ? std::string() : it->second;
  };
  // A key of the credentials file's profile, else of the config file's
  // (the credentials file overrides, as in the AWS CLI).
  auto setting = [&](const char* k) {
    std::string v = key_of(in_cred, k);
    return v.empty() ? key_of(in_config, k) : v;
  };
  auto keys_of = [&](const std::optional<std::map<std::string, std::string>>& sec, const std::string& where)
      -> std::optional<Credentials> {
    const std::string id = key_of(sec, "aws_access_key_id"), secret = key_of(sec, "aws_secret_access_key");
    if (id.empty() || secret.empty()) return std::nullopt;
    // aws_security_token: the older name the AWS CLI still reads.
    std::string token = key_of(sec, "aws_session_token");
    if (token.empty()) token = key_of(sec, "aws_security_token");
    return Credentials{id, secret, token, 0, fmt::format("profile [{}] of {}", profile, where)};
  };
  // One key of the pair without the other is a broken profile, not an
  // absent one: the chain does not go on to sign as another identity (the
  // AWS CLI's PartialCredentialsError).
  for (const auto& [sec, where] : {std::pair{&in_cred, &f.path}, std::pair{&in_config, &f.config}}) {
    const bool id = !key_of(*sec, "aws_access_key_id").empty(), secret = !key_of(*sec, "aws_secret_access_key").empty();
    if (id != secret)
      return Err(Status::NotFound(
          fmt::format("profile [{}] in {} has no {}", profile, *where, id ? "aws_secret_access_key" : "aws_access_key_id")));
  }
  // IAM Identity Center (`aws sso login`): a profile with sso_account_id
  // or sso_role_name, as the AWS CLI decides (a profile with only
  // sso_session or sso_start_url holds a token for other tools).
  const bool sso = !setting("sso_account_id").empty() || !setting("sso_role_name").empty();
  // A source profile's own keys come before its role (the AWS CLI's rule
  // for the profiles of a chain), and its SSO sign-in before its keys.
  if (depth > 0) {
    auto keys = keys_of(in_cred, f.path);
    if (!keys) keys = keys_of(in_config, f.config);
    if (sso && (keys || setting("role_arn").empty())) return SsoProfileCredentials(f, profile, setting);
    if (keys) return *keys;
  }
  if (const std::string role = setting("role_arn"); !role.empty()) {
    const std::string what = fmt::format("profile [{}] (role {})", profile, role);
    if (!setting("mfa_serial").empty())
      return Err(Status::InvalidArgument(what + ": mfa_serial needs a code typed at each renewal; a mount cannot "
                                                "ask for one (use a credential_process)"));
    const std::string src = setting("source_profile"), cs = setting("credential_source");
    std::string session = setting("role_session_name");
    if (const std::string wit = setting("web_identity_token_file"); !wit.empty()) {
      auto c = WebIdentityCredentials(wit, "web_identity_token_file", role, session, region);
      if (!c) return Err(Status(c.error().code(), fmt::format("profile [{}]: {}", profile, c.error().message())));
      return c;
    }
    Result<Credentials> base = Err(Status::InvalidArgument(
        what + ": neither source_profile, credential_source nor web_identity_token_file"));
    if (!src.empty() && !cs.empty()) {
      return Err(Status::InvalidArgument(what + ": both source_profile and credential_source"));
    } else if (!src.empty()) {
      if (depth >= kMaxRoleChain)
        return Err(Status::InvalidArgument(fmt::format("{}: more than {} source_profile hops (a loop?)", what,
                                                       kMaxRoleChain)));
      bool src_absent = false;
      // A source profile that names itself holds the keys (the AWS CLI's rule).
      base = src == profile ? [&]() -> Result<Credentials> {
        if (auto k = keys_of(in_cred, f.path)) return *k;
        if (auto k = keys_of(in_config, f.config)) return *k;
        return Err(Status::NotFound(what + ": source_profile names itself and it has no keys"));
      }()
                            : ProfileCredentials(f, src, region, depth + 1, &src_absent);
      if (!base) return Err(Status(base.error().code(), what + ": source_profile " + src + ": " + base.error().message()));
    } else if (cs == "Environment") {
      const std::string id = Env("AWS_ACCESS_KEY_ID"), secret = Env("AWS_SECRET_ACCESS_KEY");
      if (id.empty() || secret.empty())
        return Err(Status::NotFound(what + ": credential_source Environment, but AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                                           "are not set"));
      base = Credentials{id, secret, Env("AWS_SESSION_TOKEN"), 0, "environment"};
    } else if (cs == "Ec2InstanceMetadata") {
      base = InstanceMetadataCredentials(in_config ? &*in_config : nullptr);
      if (!base) return Err(Status(base.error().code(), what + ": " + base.error().message()));
    } else if (cs == "EcsContainer") {
      base = ContainerCredentials();
      if (!base) return Err(Status(base.error().code(), what + ": " + base.error().message()));
    } else if (!cs.empty()) {
      return Err(Status::InvalidArgument(what + ": credential_source " + cs +
                                         " (Environment, Ec2InstanceMetadata or EcsContainer)"));
    }
    if (!base) return Err(Status(base.error().code(), base.error().message()));
    if (auto checked = CheckedCredentials(std::move(*base)); checked) base = std::move(*checked);
    else return Err(checked.error());
    if (session.empty())
      session = fmt::format("igtcache-{}", std::chrono::duration_cast<std::chrono::seconds>(
                                               std::chrono::system_clock::now().time_since_epoch()).count());
    int64_t duration = 0;
    if (const std::string d = setting("duration_seconds"); !d.empty()) {
      char* e = nullptr;
      duration = std::strtoll(d.c_str(), &e, 10);
      if (!e || *e || duration < 900 || duration > 43200)
        return Err(Status::InvalidArgument(what + ": duration_seconds " + d + " (900 to 43200)"));
    }
    // STS of the mount's region, as for a web identity (the AWS CLI uses
    // its session's region for both).
    return AssumeRoleCredentials(role, *base, session, setting("external_id"), duration, region,
                                 fmt::format("profile [{}]", profile));
  }
  // SSO before the profile's keys, as in the AWS CLI's chain.
  if (sso) return SsoProfileCredentials(f, profile, setting);
  if (auto c = keys_of(in_cred, f.path)) return *c;
  for (const auto& [sec, where] : {std::pair{&in_cred, &f.path}, std::pair{&in_config, &f.config}}) {
    const std::string command = key_of(*sec, "credential_process");
    if (command.empty()) continue;
    return ProcessCredentials(command, fmt::format("credential_process of profile [{}] in {}", profile, *where));
  }
  if (auto c = keys_of(in_config, f.config)) return *c;
  *absent = true;
  if (!f.cred_text && !in_config)
    return Err(Status::NotFound("credentials file " + f.path + " cannot be read (profile [" + profile + "])"));
  if (!in_cred && !in_config)
    return Err(Status::NotFound("profile [" + profile + "] not found in " +
                                (f.cred_text && f.config_text ? f.path + " nor in " + f.config
                                 : f.cred_text                ? f.path + " (" + f.config + " cannot be read)"
                                                              : f.config + " (" + f.path + " cannot be read)")));
  return Err(Status::NotFound("profile [" + profile + "] in " + (in_cred ? f.path : f.config) +
                              " has no aws_access_key_id (nor a credential_process or role_arn)"));
}

}  // namespace

Result<Credentials> CheckedCredentials(Credentials c) {
  for (auto [field, name] : {std::pair{&c.access_key, "access key id"}, std::pair{&c.secret_key, "secret key"},
                             std::pair{&c.session_token, "session token"}}) {
    *field = std::string(Trim(*field));
    for (unsigned char ch : *field)
      if (ch < 0x20 || ch == 0x7f)
        return Err(Status::InvalidArgument(fmt::format("the {} from {} holds a control character (a line break?)",
                                                       name, c.source.empty() ? "its source" : c.source)));
  }
  return c;
}

namespace {
Result<Credentials> ResolveChain(const std::string& profile_arg, const std::string& region);
}  // namespace

bool IgnoreConfiguredEndpoints() { return Lower(Env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")) == "true"; }

std::string ExpandAwsPath(const std::string& p) {
  // $NAME and ${NAME} first, then a leading ~ or ~user (the AWS CLI's
  // expandvars, then expanduser); an unset variable, or ~ without a home
  // directory, stays as written.
  std::string s;
  for (size_t i = 0; i < p.size();) {
    if (p[i] == '$' && i + 1 < p.size()) {
      const bool braced = p[i + 1] == '{';
      size_t b = i + (braced ? 2 : 1), e = b;
      while (e < p.size() && (std::isalnum(static_cast<unsigned char>(p[e])) || p[e] == '_')) ++e;
      if (e > b && (!braced || (e < p.size() && p[e] == '}'))) {
        if (const char* v = std::getenv(p.substr(b, e - b).c_str())) {
          s += v;
          i = e + (braced ? 1 : 0);
          continue;
        }
      }
    }
    s.push_back(p[i++]);
  }
  if (!s.starts_with("~")) return s;
  const size_t slash = s.find('/');
  const std::string user = s.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  std::string home;
  if (user.empty()) {
    home = Home();
  } else if (passwd* pw = getpwnam(user.c_str()); pw && pw->pw_dir) {
    home = pw->pw_dir;
  }
  if (home.empty()) return s;
  return home + (slash == std::string::npos ? "" : s.substr(slash));
}

std::string ProfileConfigSetting(const std::string& profile_arg, const char* key, std::string* where) {
  std::string profile = profile_arg;
  if (profile.empty()) profile = Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string path = ConfigPath();
  auto text = ReadText(path);
  if (!text) return {};
  auto sec = IniSection(*text, profile);
  if (!sec) return {};
  auto it = sec->find(key);
  if (it == sec->end() || it->second.empty()) return {};
  if (where) *where = fmt::format("{} of profile [{}] in {}", key, profile, path);
  return it->second;
}

Result<Credentials> ResolveCredentials(const std::string& profile_arg, const std::string& region) {
  auto c = ResolveChain(profile_arg, region);
  if (!c) return c;
  auto checked = CheckedCredentials(std::move(*c));
  if (!checked) return Err(Status(checked.error().code(), "no AWS credentials: " + checked.error().message()));
  return checked;
}

namespace {
Result<Credentials> ResolveChain(const std::string& profile_arg, const std::string& region) {
  // A profile named by the caller (--profile, backend.profile) is read from
  // the file even when AWS_* keys are set, as the AWS CLI does: asking for a
  // profile and silently signing with other keys would act under the wrong
  // identity. Otherwise the chain of the AWS CLI (backends.h).
  if (profile_arg.empty()) {
    std::string id = Env("AWS_ACCESS_KEY_ID"), secret = Env("AWS_SECRET_ACCESS_KEY");
    if (!id.empty() && !secret.empty()) return Credentials{id, secret, Env("AWS_SESSION_TOKEN"), 0, "environment"};
    // One of the two set: refused, as the AWS CLI does (partial credentials),
    // rather than signing with the file's keys under another identity.
    if (!id.empty() || !secret.empty())
      return Err(Status::NotFound(fmt::format(
          "no AWS credentials: {} is set but {} is not (set both, or neither to use the credentials file)",
          id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID",
          id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY")));
    // Configured but failing: an error, not the next link (signing under
    // another identity than the one set up would be worse than failing).
    auto configured = [](Result<Credentials> c) -> Result<Credentials> {
      if (c) return c;
      return Err(Status(c.error().code(), "no AWS credentials: " + c.error().message()));
    };
    if (!Env("AWS_WEB_IDENTITY_TOKEN_FILE").empty()) return configured(WebIdentityCredentials(region));
  }
  const bool named = !profile_arg.empty() || !Env("AWS_PROFILE").empty();
  std::string profile = profile_arg;
  if (profile.empty()) profile = Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  // Ends in " and " (cut off where it ends a message).
  const std::string why_not_env = profile_arg.empty()
                                      ? "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set and "
                                      : "profile [" + profile_arg + "] was asked for" +
                                            (Env("AWS_ACCESS_KEY_ID").empty() && Env("AWS_SECRET_ACCESS_KEY").empty()
                                                 ? ""
                                                 : " (the AWS_* keys set are not used)") +
                                            " and ";
  // 3. The profile, from the files.
  const ProfileFiles files = ReadProfileFiles();
  bool absent = false;
  auto c = ProfileCredentials(files, profile, region, 0, &absent);
  if (c) return c;
  if (!absent) return Err(Status(c.error().code(), "no AWS credentials: " + c.error().message()));
  // None: an error if the profile was named, else the chain goes on.
  const std::string file_why = c.error().message();
  if (named) {
    if (!files.cred_text && !files.config_text) return Err(Status::NotFound("no AWS credentials: " + why_not_env + file_why));
    return Err(Status::NotFound("no AWS credentials: " + file_why + "; " + why_not_env.substr(0, why_not_env.size() - 5)));
  }
  if (!Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").empty() || !Env("AWS_CONTAINER_CREDENTIALS_FULL_URI").empty()) {
    auto c = ContainerCredentials();
    if (c) return c;
    return Err(Status(c.error().code(), "no AWS credentials: " + c.error().message()));
  }
  std::string imds_why = "instance metadata is off (AWS_EC2_METADATA_DISABLED)";
  if (Lower(Env("AWS_EC2_METADATA_DISABLED")) != "true") {
    std::optional<ProfileSettings> settings;
    if (files.config_text) settings = IniSection(*files.config_text, profile);
    auto c = InstanceMetadataCredentials(settings ? &*settings : nullptr);
    if (c) return c;
    imds_why = c.error().message();
  }
  return Err(Status::NotFound("no AWS credentials: " + why_not_env + file_why + ", no web identity or container "
                              "credentials are configured, and " + imds_why));
}

}  // namespace

}  // namespace igt
