#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "backends/credentials.h"
#include "backends/fake_http_server_test.h"
#include "backends/s3/sigv4.h"
#include "igtcache/backends.h"

using igt::Code;
using igt::testing::FakeServer;

namespace {

// Sets (or unsets) an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The chain's remote links unset (and no instance metadata): a test
// machine must not ask 169.254.169.254 for an identity.
struct NoRemoteLinks {
  ScopedEnv a{"AWS_WEB_IDENTITY_TOKEN_FILE", std::nullopt}, b{"AWS_ROLE_ARN", std::nullopt},
      c{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", std::nullopt}, d{"AWS_CONTAINER_CREDENTIALS_FULL_URI", std::nullopt},
      e{"AWS_EC2_METADATA_DISABLED", std::string("true")}, f{"AWS_CONFIG_FILE", std::string("/nonexistent/igt/config")},
      g{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", std::nullopt}, h{"AWS_CONTAINER_AUTHORIZATION_TOKEN", std::nullopt},
      i{"AWS_ENDPOINT_URL_STS", std::nullopt}, j{"AWS_ENDPOINT_URL", std::nullopt},
      k{"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", std::nullopt}, l{"AWS_ENDPOINT_URL_SSO", std::nullopt},
      m{"AWS_ENDPOINT_URL_SSO_OIDC", std::nullopt};
  // The fakes are on loopback: never through a proxy the host may set.
  ScopedEnv np{"NO_PROXY", std::string("127.0.0.1,localhost")}, np2{"no_proxy", std::string("127.0.0.1,localhost")};
};

// No remote link, no AWS_* keys, no $AWS_PROFILE: a chain test starts from nothing.
struct NothingSet : NoRemoteLinks {
  ScopedEnv id{"AWS_ACCESS_KEY_ID", std::nullopt}, secret{"AWS_SECRET_ACCESS_KEY", std::nullopt},
      profile{"AWS_PROFILE", std::nullopt};
};

constexpr const char* kIni = R"(# comment
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = secretdefault

; another comment
[profile work]
AWS_ACCESS_KEY_ID=AKIDWORK
aws_secret_access_key=  secret/work+key  
aws_session_token = tok123

[broken]
aws_access_key_id = AKIDBROKEN
)";

}  // namespace

TEST_CASE("IniSection reads sections and keys", "[credentials]") {
  auto d = igt::IniSection(kIni, "default");
  REQUIRE(d);
  CHECK((*d)["aws_access_key_id"] == "AKIDDEFAULT");
  CHECK((*d)["aws_secret_access_key"] == "secretdefault");
  CHECK(!d->contains("aws_session_token"));

  auto w = igt::IniSection(kIni, "work");  // "[profile work]", upper-case key names
  REQUIRE(w);
  CHECK((*w)["aws_access_key_id"] == "AKIDWORK");
  CHECK((*w)["aws_secret_access_key"] == "secret/work+key");
  CHECK((*w)["aws_session_token"] == "tok123");

  CHECK(!igt::IniSection(kIni, "nope"));
  CHECK(igt::IniSection(kIni, "broken")->size() == 1);
}

TEST_CASE("ResolveCredentials: environment first, then the file", "[credentials]") {
  char tmpl[] = "/tmp/igt-creds-XXXXXX";
  int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(tmpl) << kIni;

  ScopedEnv file("AWS_SHARED_CREDENTIALS_FILE", std::string(tmpl));
  ScopedEnv token("AWS_SESSION_TOKEN", std::nullopt);
  ScopedEnv profile("AWS_PROFILE", std::nullopt);
  NoRemoteLinks no_remote;  // never the network: the chain's remote links are tested below

  SECTION("env vars win") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::string("AKIDENV"));
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::string("secretenv"));
    ScopedEnv tok("AWS_SESSION_TOKEN", std::string("envtok"));
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDENV");
    CHECK(c->secret_key == "secretenv");
    CHECK(c->session_token == "envtok");
  }
  SECTION("an explicit profile is read from the file even when the AWS_* keys are set") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::string("AKIDENV"));
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::string("secretenv"));
    auto c = igt::ResolveCredentials("work");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDWORK");
    CHECK(c->session_token == "tok123");
    auto missing = igt::ResolveCredentials("nope");
    REQUIRE(!missing);
    CHECK_THAT(missing.error().message(), Catch::Contains("profile [nope] was asked for"));
    // Both files searched are named (the config file too, not only the credentials file).
    CHECK_THAT(missing.error().message(), Catch::Contains("config"));
    CHECK_THAT(missing.error().message(), !Catch::Contains("secretenv"));
    // $AWS_PROFILE is not an explicit choice: the keys still win over it.
    ScopedEnv p("AWS_PROFILE", std::string("work"));
    CHECK(igt::ResolveCredentials("")->access_key == "AKIDENV");
  }
  SECTION("file, default profile") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::nullopt);
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::nullopt);
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDDEFAULT");
  }
  SECTION("file, $AWS_PROFILE") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::nullopt);
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::nullopt);
    ScopedEnv p("AWS_PROFILE", std::string("work"));
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDWORK");
  }
  SECTION("an explicit profile argument beats $AWS_PROFILE") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::nullopt);
    ScopedEnv p("AWS_PROFILE", std::string("default"));
    auto c = igt::ResolveCredentials("work");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDWORK");
  }
  SECTION("a profile the file lacks, and one with half a key pair") {
    auto missing = igt::ResolveCredentials("nope");
    REQUIRE(!missing);
    CHECK(missing.error().code() == Code::kNotFound);
    CHECK_THAT(missing.error().message(), Catch::Contains(tmpl));
    auto broken = igt::ResolveCredentials("broken");
    REQUIRE(!broken);
    CHECK_THAT(broken.error().message(), Catch::Contains("has no aws_secret_access_key"));
    CHECK_THAT(broken.error().message(), !Catch::Contains("AKIDBROKEN"));
  }
  SECTION("NotFound says where it looked and never shows a secret") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::nullopt);
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::string("only-secret-set"));
    auto c = igt::ResolveCredentials("missing");
    REQUIRE(!c);
    CHECK(c.error().code() == Code::kNotFound);
    CHECK_THAT(c.error().message(), Catch::Contains(tmpl));
    CHECK_THAT(c.error().message(), Catch::Contains("missing"));
    CHECK_THAT(c.error().message(), !Catch::Contains("secretdefault"));
    CHECK_THAT(c.error().message(), !Catch::Contains("only-secret-set"));
  }
  SECTION("missing file") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::nullopt);
    ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", std::string("/nonexistent/igt/credentials"));
    auto c = igt::ResolveCredentials("");
    REQUIRE(!c);
    CHECK(c.error().code() == Code::kNotFound);
    CHECK_THAT(c.error().message(), Catch::Contains("/nonexistent/igt/credentials"));
    CHECK_THAT(c.error().message(), Catch::Contains("AWS_ACCESS_KEY_ID"));
  }
  SECTION("one of the two keys set is refused, not replaced by the file's keys") {
    // The AWS CLI's PartialCredentialsError: signing with [default] instead
    // would act under another identity without a word.
    ScopedEnv id("AWS_ACCESS_KEY_ID", std::string("ENVKEY"));
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::nullopt);
    auto half = igt::ResolveCredentials("");
    REQUIRE(!half);
    CHECK_THAT(half.error().message(), Catch::Contains("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"));
    // An explicit profile still wins over the environment.
    CHECK(igt::ResolveCredentials("work")->access_key == "AKIDWORK");
  }
  ::unlink(tmpl);
}

TEST_CASE("RegionFromEnv: $AWS_REGION, else $AWS_DEFAULT_REGION, else us-east-1", "[credentials]") {
  ScopedEnv r("AWS_REGION", std::nullopt);
  ScopedEnv d("AWS_DEFAULT_REGION", std::nullopt);
  CHECK(igt::RegionFromEnv() == "us-east-1");
  {
    ScopedEnv d2("AWS_DEFAULT_REGION", std::string("ap-south-1"));
    CHECK(igt::RegionFromEnv() == "ap-south-1");
    ScopedEnv r2("AWS_REGION", std::string("eu-west-1"));
    CHECK(igt::RegionFromEnv() == "eu-west-1");
  }
  ScopedEnv empty("AWS_REGION", std::string(""));
  CHECK(igt::RegionFromEnv() == "us-east-1");
}

TEST_CASE("the files' paths expand ~ and $NAME, the older aws_security_token is read, profile settings",
          "[credentials]") {
  // No shell expands a systemd Environment= line or a container's env: the
  // AWS CLI expands them itself (a tester's ~/creds was read as ./~/creds).
  char tmpl[] = "/tmp/igt-home-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string home = tmpl;
  std::ofstream(home + "/creds") << "[default]\naws_access_key_id = AKIDOLD\naws_secret_access_key = s\n"
                                    "aws_security_token = oldname\n";
  std::ofstream(home + "/cfg") << "[default]\nregion = eu-west-3\n[profile lab]\nendpoint_url = http://127.0.0.1:9000\n";
  ScopedEnv h("HOME", home), sub("IGT_TEST_SUBDIR", std::string("."));
  NoRemoteLinks no_remote;
  ScopedEnv id("AWS_ACCESS_KEY_ID", std::nullopt), secret("AWS_SECRET_ACCESS_KEY", std::nullopt),
      profile("AWS_PROFILE", std::nullopt);
  for (const std::string& path : {std::string("~/creds"), std::string("$HOME/creds"),
                                  std::string("${HOME}/${IGT_TEST_SUBDIR}/creds")}) {
    ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", path);
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDOLD");
    CHECK(c->session_token == "oldname");
  }
  ScopedEnv cfg("AWS_CONFIG_FILE", std::string("~/cfg"));
  std::string where;
  CHECK(igt::ProfileConfigSetting("", "region", &where) == "eu-west-3");
  CHECK(where == "region of profile [default] in " + home + "/cfg");
  CHECK(igt::ProfileConfigSetting("", "endpoint_url").empty());
  CHECK(igt::ProfileConfigSetting("lab", "endpoint_url") == "http://127.0.0.1:9000");
  {
    ScopedEnv p("AWS_PROFILE", std::string("lab"));
    CHECK(igt::ProfileConfigSetting("", "endpoint_url") == "http://127.0.0.1:9000");
  }
  CHECK(igt::ProfileConfigSetting("nope", "region").empty());
  {
    ScopedEnv unset("AWS_CONFIG_FILE", std::string("$IGT_NO_SUCH_VAR/cfg"));  // an unset variable stays as written
    CHECK(igt::ProfileConfigSetting("", "region").empty());
  }
  // Variables first, then ~ (the AWS CLI's order); ~user; no home: as written.
  {
    ScopedEnv d("IGT_TEST_D", std::string("~/x"));
    CHECK(igt::ExpandAwsPath("$IGT_TEST_D/cfg") == home + "/x/cfg");
    CHECK(igt::ExpandAwsPath("~root/c") == "/root/c");
    CHECK(igt::ExpandAwsPath("a$") == "a$");
    CHECK(igt::ExpandAwsPath("${IGT_TEST_D") == "${IGT_TEST_D");
  }
  // A service's nested block is not the profile's own settings.
  std::ofstream(home + "/cfg2") << "[default]\nendpoint_url = http://top:1\ns3 =\n  endpoint_url = http://nested:2\n"
                                   "region = eu-north-1\n";
  ScopedEnv cfg2("AWS_CONFIG_FILE", home + "/cfg2");
  CHECK(igt::ProfileConfigSetting("", "endpoint_url") == "http://top:1");
  CHECK(igt::ProfileConfigSetting("", "region") == "eu-north-1");
  std::system(("rm -rf " + home).c_str());
}

TEST_CASE("ParseIso8601 reads the expiry of temporary credentials", "[credentials]") {
  CHECK(*igt::ParseIso8601("1970-01-01T00:01:40Z") == 100);
  CHECK(*igt::ParseIso8601("2026-11-28T17:00:00Z") == 1795885200);
  CHECK(*igt::ParseIso8601("2026-11-28T17:00:00.123Z") == 1795885200);
  CHECK(*igt::ParseIso8601("2026-11-28T18:00:00+01:00") == 1795885200);
  CHECK(*igt::ParseIso8601("2026-11-28T18:00:00+0100") == 1795885200);
  CHECK(*igt::ParseIso8601("2026-11-28T17:00:00z") == 1795885200);
  CHECK(!igt::ParseIso8601("2026-11-28T17:00:00Zjunk"));
  CHECK(!igt::ParseIso8601("tomorrow"));
  CHECK(!igt::ParseIso8601("2026-11-28T17:00:00 UTC"));
}

TEST_CASE("ParseCredentialsJson and ParseStsResponse", "[credentials]") {
  auto c = igt::ParseCredentialsJson(R"({"Code":"Success","AccessKeyId":"ASIA1","SecretAccessKey":"s3cr3t",
      "Token":"tok","Expiration":"2026-11-28T17:00:00Z"})", "src");
  REQUIRE(c);
  CHECK(c->access_key == "ASIA1");
  CHECK(c->secret_key == "s3cr3t");
  CHECK(c->session_token == "tok");
  CHECK(c->expires_unix_s == 1795885200);
  CHECK(c->source == "src");
  auto refused = igt::ParseCredentialsJson(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})", "src");
  REQUIRE(!refused);
  CHECK_THAT(refused.error().message(), Catch::Contains("AssumeRoleUnauthorizedAccess"));
  auto half = igt::ParseCredentialsJson(R"({"AccessKeyId":"ASIA1","Token":"tok"})", "src");
  REQUIRE(!half);
  CHECK_THAT(half.error().message(), Catch::Contains("SecretAccessKey"));
  CHECK_THAT(half.error().message(), !Catch::Contains("tok"));
  CHECK(!igt::ParseCredentialsJson("<html>", "src"));

  auto w = igt::ParseStsResponse(R"(<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIAW</AccessKeyId><SecretAccessKey>sw</SecretAccessKey>
  <SessionToken>tw</SessionToken><Expiration>2026-11-28T17:00:00Z</Expiration></Credentials>
  </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>)", "sts");
  REQUIRE(w);
  CHECK(w->access_key == "ASIAW");
  CHECK(w->session_token == "tw");
  CHECK(w->expires_unix_s == 1795885200);
  auto denied = igt::ParseStsResponse(
      "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>bad token</Message></Error></ErrorResponse>", "sts");
  REQUIRE(!denied);
  CHECK(denied.error().code() == Code::kPermissionDenied);
  CHECK_THAT(denied.error().message(), Catch::Contains("InvalidIdentityToken: bad token"));
}

namespace {
const std::string kCredsJson =
    R"({"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"ASIAIMDS","SecretAccessKey":"imds-secret",)"
    R"("Token":"imds-token","Expiration":"2026-11-28T17:00:00Z"})";

std::string Header(const std::string& head, const std::string& name) {
  std::string lower = head;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const size_t k = lower.find("\r\n" + name + ":");
  if (k == std::string::npos) return "";
  size_t v = k + 3 + name.size();
  while (v < head.size() && head[v] == ' ') ++v;
  return head.substr(v, head.find("\r\n", v) - v);
}

std::string TempFile(const std::string& text) {
  char tmpl[] = "/tmp/igt-cred-XXXXXX";
  int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(tmpl) << text;
  return tmpl;
}

// An instance metadata service's replies to one IMDSv2 exchange: the
// session token TOKEN123, the role my-role, then kCredsJson.
void PushInstanceMetadata(FakeServer& s) {
  s.Push(FakeServer::Reply(200, {}, "TOKEN123"));
  s.Push(FakeServer::Reply(200, {}, "my-role\n"));
  s.Push(FakeServer::Reply(200, {}, kCredsJson));
}

}  // namespace

TEST_CASE("instance metadata: the endpoint, by $AWS_EC2_METADATA_SERVICE_ENDPOINT or its mode", "[credentials]") {
  ScopedEnv ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", std::nullopt);
  {
    ScopedEnv mode("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", std::nullopt);
    CHECK(igt::InstanceMetadataEndpoint().value() == "http://169.254.169.254");
  }
  {
    ScopedEnv mode("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv6");
    CHECK(igt::InstanceMetadataEndpoint().value() == "http://[fd00:ec2::254]");
    ScopedEnv moved("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9/");  // an endpoint wins
    CHECK(igt::InstanceMetadataEndpoint().value() == "http://127.0.0.1:9");
  }
  {
    ScopedEnv mode("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ipv5");
    auto e = igt::InstanceMetadataEndpoint();
    REQUIRE_FALSE(e);
    CHECK_THAT(e.error().message(), Catch::Contains("ec2_metadata_service_endpoint_mode) is 'ipv5': it must be "
                                                    "IPv4 or IPv6"));
    CHECK_FALSE(igt::InstanceMetadataCredentials());  // refused before any request
  }
  {
    // The config file's profile settings, under the environment's.
    ScopedEnv mode("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", std::nullopt);
    igt::ProfileSettings p{{"ec2_metadata_service_endpoint_mode", "ipv6"}};
    CHECK(igt::InstanceMetadataEndpoint(&p).value() == "http://[fd00:ec2::254]");
    p["ec2_metadata_service_endpoint"] = "http://127.0.0.1:8/";
    CHECK(igt::InstanceMetadataEndpoint(&p).value() == "http://127.0.0.1:8");
    ScopedEnv moved("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9");
    CHECK(igt::InstanceMetadataEndpoint(&p).value() == "http://127.0.0.1:9");
  }
}

TEST_CASE("instance metadata: IMDSv2 token, the role, its credentials, and v1 when the token is refused",
          "[credentials]") {
  FakeServer s;
  NoRemoteLinks none;
  ScopedEnv ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", s.endpoint() + "/");
  SECTION("v2") {
    PushInstanceMetadata(s);
    auto c = igt::InstanceMetadataCredentials();
    REQUIRE(c);
    CHECK(c->access_key == "ASIAIMDS");
    CHECK(c->session_token == "imds-token");
    CHECK(c->expires_unix_s == 1795885200);
    CHECK(c->source == "instance metadata (role my-role)");
    auto r = s.requests();
    REQUIRE(r.size() == 3);
    CHECK(r[0].starts_with("PUT /latest/api/token "));
    CHECK(Header(r[0], "x-aws-ec2-metadata-token-ttl-seconds") == "21600");
    CHECK(r[1].starts_with("GET /latest/meta-data/iam/security-credentials/ "));
    CHECK(Header(r[1], "x-aws-ec2-metadata-token") == "TOKEN123");
    CHECK(r[2].starts_with("GET /latest/meta-data/iam/security-credentials/my-role "));
    CHECK(Header(r[2], "x-aws-ec2-metadata-token") == "TOKEN123");
  }
  SECTION("v1 fallback") {
    s.Push(FakeServer::Reply(403, {}, ""));
    s.Push(FakeServer::Reply(200, {}, "r1"));
    s.Push(FakeServer::Reply(200, {}, kCredsJson));
    auto c = igt::InstanceMetadataCredentials();
    REQUIRE(c);
    CHECK(c->access_key == "ASIAIMDS");
    auto r = s.requests();
    REQUIRE(r.size() == 3);
    CHECK(Header(r[1], "x-aws-ec2-metadata-token").empty());
  }
  SECTION("v1 when the token request times out (a container behind a hop limit of 1)") {
    s.Push("STALL:");  // the PUT: no reply within its 1 s
    s.Push(FakeServer::Reply(200, {}, "r1"));
    s.Push(FakeServer::Reply(200, {}, kCredsJson));
    auto c = igt::InstanceMetadataCredentials();
    REQUIRE(c);
    CHECK(c->access_key == "ASIAIMDS");
  }
  SECTION("no role") {
    s.Push(FakeServer::Reply(200, {}, "TOKEN123"));
    s.Push(FakeServer::Reply(404, {}, ""));
    auto c = igt::InstanceMetadataCredentials();
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("no instance role (HTTP 404)"));
  }
}

TEST_CASE("instance metadata: nothing listening is a quick error, not a hang", "[credentials]") {
  NoRemoteLinks none;
  // A port bound but not listening (held for the test: no other process
  // can take it meanwhile): connections are refused.
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(held >= 0);
  const std::string dead = "http://127.0.0.1:" + std::to_string(igt::testing::BindLoopback(held));
  ScopedEnv ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", dead);
  const auto t0 = std::chrono::steady_clock::now();
  auto c = igt::InstanceMetadataCredentials();
  REQUIRE(!c);
  CHECK(c.error().code() == Code::kUnavailable);
  CHECK_THAT(c.error().message(), Catch::Contains("instance metadata at " + dead));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  ::close(held);
}

TEST_CASE("container credentials: full URI with a token file, a refusal's reason, plain http refused elsewhere",
          "[credentials]") {
  FakeServer s;
  NoRemoteLinks none;
  ScopedEnv rel("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", std::nullopt);
  ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", s.endpoint() + "/v1/credentials");
  const std::string tok = TempFile("pod-token\n");
  ScopedEnv tf("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tok);
  s.Push(FakeServer::Reply(200, {}, kCredsJson));
  auto c = igt::ContainerCredentials();
  REQUIRE(c);
  CHECK(c->access_key == "ASIAIMDS");
  CHECK(c->source == "container credentials at " + s.endpoint() + "/v1/credentials");
  REQUIRE(s.requests().size() == 1);
  CHECK(s.requests()[0].starts_with("GET /v1/credentials "));
  CHECK(Header(s.requests()[0], "authorization") == "pod-token");
  // Refused by the agent: the reply's reason is in the message.
  s.Push(FakeServer::Reply(401, {}, R"({"code":"AccessDenied","message":"token mismatch"})"));
  auto refused = igt::ContainerCredentials();
  REQUIRE(!refused);
  CHECK_THAT(refused.error().message(), Catch::Contains("HTTP 401"));
  CHECK_THAT(refused.error().message(), Catch::Contains("token mismatch"));
  // Plain http elsewhere, however the host is dressed up (the token would go out in clear).
  for (const char* url : {"http://192.0.2.9/creds", "http://127.evil.example/c", "http://127.0.0.1@evil.example/c",
                          "http://169.254.170.234/c", "http://169.254.170.23.evil.example/c", "ftp://127.0.0.1/c"}) {
    INFO(url);
    ScopedEnv far("AWS_CONTAINER_CREDENTIALS_FULL_URI", std::string(url));
    auto bad = igt::ContainerCredentials();
    REQUIRE(!bad);
    CHECK(bad.error().code() == Code::kInvalidArgument);
    CHECK_THAT(bad.error().message(), Catch::Contains("AWS_CONTAINER_CREDENTIALS_FULL_URI"));
  }
  {
    ScopedEnv user("AWS_CONTAINER_CREDENTIALS_FULL_URI", "https://u:p@creds.example/c");
    CHECK_THAT(igt::ContainerCredentials().error().message(), Catch::Contains("user info"));
  }
  ScopedEnv crlf("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", std::nullopt);
  ScopedEnv inj("AWS_CONTAINER_AUTHORIZATION_TOKEN", std::string("tok\r\nX-Evil: 1"));
  CHECK_THAT(igt::ContainerCredentials().error().message(), Catch::Contains("line break"));
  ::unlink(tok.c_str());
}

TEST_CASE("web identity: the token file and role are exchanged at STS", "[credentials]") {
  FakeServer s;
  NoRemoteLinks none;
  const std::string tok = TempFile("eyJhbGciOi.payload.sig\n");
  ScopedEnv tf("AWS_WEB_IDENTITY_TOKEN_FILE", tok);
  ScopedEnv role("AWS_ROLE_ARN", std::string("arn:aws:iam::123456789012:role/reader"));
  ScopedEnv name("AWS_ROLE_SESSION_NAME", std::string("job 7"));
  ScopedEnv sts("AWS_ENDPOINT_URL_STS", s.endpoint());
  s.Push(FakeServer::Reply(200, {"Content-Type: text/xml"},
                           "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                           "<AccessKeyId>ASIAWEB</AccessKeyId><SecretAccessKey>web-secret</SecretAccessKey>"
                           "<SessionToken>web-token</SessionToken><Expiration>2026-11-28T17:00:00Z</Expiration>"
                           "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"));
  auto c = igt::WebIdentityCredentials("eu-west-1");
  REQUIRE(c);
  CHECK(c->access_key == "ASIAWEB");
  CHECK(c->session_token == "web-token");
  CHECK(c->expires_unix_s == 1795885200);
  CHECK_THAT(c->source, Catch::Contains("arn:aws:iam::123456789012:role/reader"));
  REQUIRE(s.requests().size() == 1);
  CHECK(s.requests()[0].starts_with("POST / "));
  const std::string body = s.bodies()[0];
  CHECK_THAT(body, Catch::Contains("Action=AssumeRoleWithWebIdentity"));
  CHECK_THAT(body, Catch::Contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Freader"));
  CHECK_THAT(body, Catch::Contains("RoleSessionName=job%207"));
  CHECK_THAT(body, Catch::Contains("WebIdentityToken=eyJhbGciOi.payload.sig"));
  // STS says no: its code and message, not the token.
  s.Push(FakeServer::Reply(400, {}, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                                    "<Message>Token expired</Message></Error></ErrorResponse>"));
  auto denied = igt::WebIdentityCredentials("eu-west-1");
  REQUIRE(!denied);
  CHECK(denied.error().code() == Code::kPermissionDenied);
  CHECK_THAT(denied.error().message(), Catch::Contains("InvalidIdentityToken: Token expired"));
  CHECK_THAT(denied.error().message(), !Catch::Contains("payload"));
  ::unlink(tok.c_str());
}

TEST_CASE("the chain: environment, web identity, file, container, instance metadata", "[credentials]") {
  FakeServer s;
  NothingSet none;
  ScopedEnv file("AWS_SHARED_CREDENTIALS_FILE", std::string("/nonexistent/igt/credentials"));
  SECTION("nothing anywhere: the message names every link") {
    auto c = igt::ResolveCredentials("");
    REQUIRE(!c);
    CHECK(c.error().code() == Code::kNotFound);
    CHECK_THAT(c.error().message(), Catch::Contains("AWS_ACCESS_KEY_ID"));
    CHECK_THAT(c.error().message(), Catch::Contains("/nonexistent/igt/credentials"));
    CHECK_THAT(c.error().message(), Catch::Contains("AWS_EC2_METADATA_DISABLED"));
  }
  SECTION("instance metadata when nothing else is set") {
    ScopedEnv on("AWS_EC2_METADATA_DISABLED", std::nullopt);
    ScopedEnv ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", s.endpoint());
    PushInstanceMetadata(s);
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->access_key == "ASIAIMDS");
  }
  SECTION("the container before instance metadata; a failing container is an error") {
    ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", s.endpoint() + "/c");
    s.Push(FakeServer::Reply(200, {}, kCredsJson));
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK_THAT(c->source, Catch::Contains("container credentials"));
    s.Push(FakeServer::Reply(500, {}, "down"));
    auto f = igt::ResolveCredentials("");
    REQUIRE(!f);
    CHECK_THAT(f.error().message(), Catch::StartsWith("no AWS credentials: container credentials at"));
  }
  SECTION("the file before the container; the environment before everything") {
    const std::string path = TempFile(kIni);
    ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", path);
    ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", s.endpoint() + "/c");
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->access_key == "AKIDDEFAULT");
    CHECK(c->source == "profile [default] of " + path);
    ScopedEnv i("AWS_ACCESS_KEY_ID", std::string("AKIDENV"));
    ScopedEnv k("AWS_SECRET_ACCESS_KEY", std::string("secretenv"));
    CHECK(igt::ResolveCredentials("")->source == "environment");
    CHECK(s.requests().empty());
    ::unlink(path.c_str());
  }
  SECTION("AWS_ROLE_ARN alone (exported for other tools) is no web identity: the file's keys") {
    const std::string path = TempFile(kIni);
    ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", path);
    ScopedEnv role("AWS_ROLE_ARN", std::string("arn:aws:iam::1:role/r"));
    CHECK(igt::ResolveCredentials("")->access_key == "AKIDDEFAULT");
    ::unlink(path.c_str());
  }
  SECTION("a [default] with one key of the pair is an error, not the next link") {
    const std::string path = TempFile("[default]\naws_access_key_id = AKIDHALF\n");
    ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", path);
    ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", s.endpoint() + "/c");
    auto c = igt::ResolveCredentials("");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("has no aws_secret_access_key"));
    CHECK(s.requests().empty());
    ::unlink(path.c_str());
  }
  SECTION("web identity before the file") {
    const std::string path = TempFile(kIni);
    ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", path);
    ScopedEnv role("AWS_ROLE_ARN", std::string("arn:aws:iam::1:role/r"));
    ScopedEnv tf("AWS_WEB_IDENTITY_TOKEN_FILE", std::string("/nonexistent/igt/token"));
    auto c = igt::ResolveCredentials("");
    REQUIRE(!c);  // configured, failing: not silently the file's identity
    CHECK_THAT(c.error().message(), Catch::Contains("AWS_WEB_IDENTITY_TOKEN_FILE /nonexistent/igt/token"));
    ::unlink(path.c_str());
  }
}

TEST_CASE("credential_process: its JSON, its failure's exit status and stderr", "[credentials]") {
  auto ok = igt::ProcessCredentials(
      R"(printf '{"Version": 1, "AccessKeyId": "ASIAPROC", "SecretAccessKey": "proc-secret", )"
      R"("SessionToken": "proc-token", "Expiration": "2026-11-28T17:00:00Z"}')",
      "proc");
  REQUIRE(ok);
  CHECK(ok->access_key == "ASIAPROC");
  CHECK(ok->session_token == "proc-token");
  CHECK(ok->expires_unix_s == 1795885200);
  auto failed = igt::ProcessCredentials("echo 'the SSO session expired: run aws sso login' >&2; exit 3", "proc");
  REQUIRE(!failed);
  CHECK(failed.error().code() == Code::kPermissionDenied);
  CHECK_THAT(failed.error().message(), Catch::Contains("exited with 3: the SSO session expired: run aws sso login"));
  auto bad = igt::ProcessCredentials("echo '{\"AccessKeyId\": \"A\"}'", "proc");
  REQUIRE(!bad);
  CHECK_THAT(bad.error().message(), Catch::Contains("\"Version\": 1"));
  // "Version": "1" (a string) aborted the daemon (nlohmann's type_error).
  auto str_version = igt::ProcessCredentials(R"(echo '{"Version": "1", "AccessKeyId": "A", "SecretAccessKey": "B"}')",
                                             "proc");
  REQUIRE(!str_version);
  CHECK_THAT(str_version.error().message(), Catch::Contains("\"Version\": 1"));
  auto odd = igt::ProcessCredentials(
      R"(echo '{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "B", "Expiration": 5, "Message": 3}')", "proc");
  REQUIRE(!odd);
  CHECK_THAT(odd.error().message(), Catch::Contains("Expiration is not a string"));
  // A helper that printed its credentials to stderr: they stay out of the message.
  auto leaky = igt::ProcessCredentials(
      R"(echo '{"Version": 1, "AccessKeyId": "AKIDLEAK", "SecretAccessKey": "leaked-secret"}' >&2; exit 3)", "proc");
  REQUIRE(!leaky);
  CHECK_THAT(leaky.error().message(), Catch::Contains("exited with 3"));
  CHECK_THAT(leaky.error().message(), !Catch::Contains("leaked-secret"));
  auto missing = igt::ProcessCredentials("/nonexistent/igt/helper", "proc");
  REQUIRE(!missing);
  CHECK_THAT(missing.error().message(), Catch::Contains("exited with 127"));
}

TEST_CASE("instance metadata at the config file's ec2_metadata_service_endpoint, at the chain's end",
          "[credentials]") {
  FakeServer s;
  NothingSet none;
  ScopedEnv on("AWS_EC2_METADATA_DISABLED", std::string("false"));
  ScopedEnv ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", std::nullopt);
  ScopedEnv nf("AWS_SHARED_CREDENTIALS_FILE", std::string("/nonexistent/igt/credentials"));
  const std::string config =
      TempFile("[default]\nregion = eu-west-1\nec2_metadata_service_endpoint = " + s.endpoint() + "\n");
  ScopedEnv cf("AWS_CONFIG_FILE", config);
  PushInstanceMetadata(s);
  auto c = igt::ResolveCredentials("");
  REQUIRE(c);
  CHECK(c->access_key == "ASIAIMDS");
  CHECK(s.requests().size() == 3);
  ::unlink(config.c_str());
}

TEST_CASE("the files: credentials file keys, then a credential_process, then the config file's keys", "[credentials]") {
  NothingSet none;
  ScopedEnv profile("AWS_PROFILE", std::string("work"));
  const std::string creds = TempFile("[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s\n");
  const std::string config = TempFile(
      "[default]\nregion = eu-west-1\n"
      "[profile work]\ncredential_process = printf '{\"Version\":1,\"AccessKeyId\":\"ASIAWORK\",\"SecretAccessKey\":\"w\"}'\n"
      "[profile keys]\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = c\n"
      "[profile broken]\nregion = us-east-1\n");
  ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", creds);
  ScopedEnv cf("AWS_CONFIG_FILE", config);
  auto work = igt::ResolveCredentials("");
  REQUIRE(work);
  CHECK(work->access_key == "ASIAWORK");
  CHECK_THAT(work->source, Catch::Contains("credential_process of profile [work] in " + config));
  CHECK(igt::ResolveCredentials("keys")->access_key == "AKIDCONFIG");
  CHECK(igt::ResolveCredentials("default")->access_key == "AKIDDEFAULT");  // the credentials file's keys
  auto broken = igt::ResolveCredentials("broken");
  REQUIRE(!broken);
  CHECK_THAT(broken.error().message(), Catch::Contains("profile [broken] in " + config + " has no aws_access_key_id"));
  ::unlink(creds.c_str());
  ::unlink(config.c_str());
}

TEST_CASE("profiles that assume a role: source_profile, credential_source, signed AssumeRole", "[credentials]") {
  FakeServer s;
  NothingSet none;
  ScopedEnv sts("AWS_ENDPOINT_URL_STS", s.endpoint());
  const std::string creds = TempFile("[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = base-secret\n"
                                     "[keyed]\naws_access_key_id = AKIDKEYED\naws_secret_access_key = k\n");
  const std::string config = TempFile(
      "[profile reader]\nrole_arn = arn:aws:iam::222:role/reader\nsource_profile = base\nexternal_id = ext-1\n"
      "duration_seconds = 3600\nrole_session_name = train\n"
      "[profile chained]\nrole_arn = arn:aws:iam::333:role/second\nsource_profile = reader\n"
      "[profile loop]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = loop2\n"
      "[profile loop2]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = loop\n"
      "[profile fromenv]\nrole_arn = arn:aws:iam::444:role/env\ncredential_source = Environment\n"
      "[profile mfa]\nrole_arn = arn:aws:iam::1:role/m\nsource_profile = base\nmfa_serial = arn:aws:iam::1:mfa/u\n"
      "[profile keyed]\nrole_arn = arn:aws:iam::1:role/never\nsource_profile = base\n"
      "[profile viakeyed]\nrole_arn = arn:aws:iam::555:role/v\nsource_profile = keyed\n");
  ScopedEnv f("AWS_SHARED_CREDENTIALS_FILE", creds);
  ScopedEnv cf("AWS_CONFIG_FILE", config);
  auto reply = [](const char* key) {
    return FakeServer::Reply(200, {}, fmt::format(
        "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleResult><Credentials>"
        "<AccessKeyId>{}</AccessKeyId><SecretAccessKey>sk</SecretAccessKey><SessionToken>st</SessionToken>"
        "<Expiration>2026-11-28T17:00:00Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>", key));
  };
  s.Push(reply("ASIAREADER"));
  auto c = igt::ResolveCredentials("reader", "eu-west-1");
  REQUIRE(c);
  CHECK(c->access_key == "ASIAREADER");
  CHECK(c->expires_unix_s == 1795885200);
  CHECK_THAT(c->source, Catch::Contains("assumed role arn:aws:iam::222:role/reader (profile [reader]"));
  REQUIRE(s.requests().size() == 1);
  CHECK(s.requests()[0].starts_with("POST / "));
  CHECK_THAT(Header(s.requests()[0], "authorization"), Catch::Contains("Credential=AKIDBASE/"));
  CHECK_THAT(Header(s.requests()[0], "authorization"), Catch::Contains("/eu-west-1/sts/aws4_request"));
  const std::string body = s.bodies()[0];
  CHECK_THAT(body, Catch::Contains("Action=AssumeRole&"));
  CHECK_THAT(body, Catch::Contains("RoleArn=arn%3Aaws%3Aiam%3A%3A222%3Arole%2Freader"));
  CHECK_THAT(body, Catch::Contains("ExternalId=ext-1"));
  CHECK_THAT(body, Catch::Contains("DurationSeconds=3600"));
  CHECK_THAT(body, Catch::Contains("RoleSessionName=train"));
  {
    // The signature itself, recomputed from what the server received: the
    // Host (with the port curl sent), the signed Content-Type, the body's hash.
    const std::string head = s.requests()[0];
    igt::s3::SignInput in;
    in.method = "POST";
    in.host = Header(head, "host");
    in.path = "/";
    in.headers = {{"Content-Type", Header(head, "content-type")}};
    in.payload_hash = igt::s3::Sha256Hex(body);
    in.region = "eu-west-1";
    in.service = "sts";
    in.amz_date = Header(head, "x-amz-date");
    in.add_content_sha256 = false;
    const std::string sig = igt::s3::Signature(in, {"AKIDBASE", "base-secret", "", 0, ""});
    CHECK_THAT(Header(head, "authorization"), Catch::EndsWith("Signature=" + sig));
  }
  // A chain: reader's temporary credentials sign the second AssumeRole.
  s.Push(reply("ASIAREADER2"));
  s.Push(reply("ASIASECOND"));
  auto chained = igt::ResolveCredentials("chained", "eu-west-1");
  REQUIRE(chained);
  CHECK(chained->access_key == "ASIASECOND");
  CHECK_THAT(Header(s.requests().back(), "authorization"), Catch::Contains("Credential=ASIAREADER2/"));
  CHECK(Header(s.requests().back(), "x-amz-security-token") == "st");
  // A source profile's own keys come before its own role: one AssumeRole.
  const size_t before = s.requests().size();
  s.Push(reply("ASIAVIA"));
  auto via = igt::ResolveCredentials("viakeyed", "eu-west-1");
  REQUIRE(via);
  CHECK(via->access_key == "ASIAVIA");
  CHECK(s.requests().size() == before + 1);
  CHECK_THAT(Header(s.requests().back(), "authorization"), Catch::Contains("Credential=AKIDKEYED/"));
  auto loop = igt::ResolveCredentials("loop", "eu-west-1");
  REQUIRE(!loop);
  CHECK_THAT(loop.error().message(), Catch::Contains("source_profile hops"));
  auto mfa = igt::ResolveCredentials("mfa", "eu-west-1");
  REQUIRE(!mfa);
  CHECK_THAT(mfa.error().message(), Catch::Contains("mfa_serial"));
  {
    ScopedEnv i("AWS_ACCESS_KEY_ID", std::string("AKIDENVSRC"));
    ScopedEnv k("AWS_SECRET_ACCESS_KEY", std::string("env-secret"));
    s.Push(reply("ASIAFROMENV"));
    auto e = igt::ResolveCredentials("fromenv", "eu-west-1");
    REQUIRE(e);
    CHECK(e->access_key == "ASIAFROMENV");
    CHECK_THAT(Header(s.requests().back(), "authorization"), Catch::Contains("Credential=AKIDENVSRC/"));
  }
  // STS refuses: its code and message.
  s.Push(FakeServer::Reply(403, {}, "<ErrorResponse><Error><Code>AccessDenied</Code><Message>not authorized to "
                                    "perform sts:AssumeRole</Message></Error></ErrorResponse>"));
  auto denied = igt::ResolveCredentials("reader", "eu-west-1");
  REQUIRE(!denied);
  CHECK_THAT(denied.error().message(), Catch::Contains("AccessDenied: not authorized to perform sts:AssumeRole"));
  CHECK_THAT(denied.error().message(), !Catch::Contains("base-secret"));
  ::unlink(creds.c_str());
  ::unlink(config.c_str());
}

TEST_CASE("credentials go into HTTP headers: trimmed, and control characters refused", "[credentials]") {
  NoRemoteLinks none;
  ScopedEnv profile("AWS_PROFILE", std::nullopt);
  ScopedEnv id("AWS_ACCESS_KEY_ID", std::string("AKIDENV"));
  ScopedEnv secret("AWS_SECRET_ACCESS_KEY", std::string("secretenv"));
  {
    ScopedEnv tok("AWS_SESSION_TOKEN", std::string("envtok\n"));  // echo'd into the variable
    auto c = igt::ResolveCredentials("");
    REQUIRE(c);
    CHECK(c->session_token == "envtok");
  }
  {
    ScopedEnv evil("AWS_ACCESS_KEY_ID", std::string("AKIDENV\r\nX-Evil: 1"));
    auto c = igt::ResolveCredentials("");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("access key id from environment holds a control character"));
  }
  CHECK(!igt::CheckedCredentials({"A", "B\x01", "", 0, "x"}));
  CHECK(igt::CheckedCredentials({" A ", "B", "", 0, "x"})->access_key == "A");
}

TEST_CASE("profiles signed in through SSO, or with a web identity, are not skipped", "[credentials]") {
  NothingSet none;
  FakeServer s;
  ScopedEnv file("AWS_SHARED_CREDENTIALS_FILE", std::string("/nonexistent/igt/credentials"));
  ScopedEnv sts("AWS_ENDPOINT_URL_STS", s.endpoint());
  const std::string token = TempFile("eyJ.sa.token\n");
  const std::string empty = TempFile("");
  const std::string config = TempFile("[default]\nsso_session = corp\nsso_account_id = 1\n"
                                      "[profile web]\nrole_arn = arn:aws:iam::1:role/w\nweb_identity_token_file = " +
                                      token + "\n[profile webempty]\nrole_arn = arn:aws:iam::1:role/w\n"
                                      "web_identity_token_file = " + empty + "\n");
  ScopedEnv cf("AWS_CONFIG_FILE", config);
  // The container endpoint is there: an SSO default must not fall through to it.
  ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", s.endpoint() + "/c");
  auto sso = igt::ResolveCredentials("");
  REQUIRE(!sso);
  CHECK_THAT(sso.error().message(), Catch::Contains("profile [default] signs in through SSO"));
  CHECK_THAT(sso.error().message(), Catch::Contains("no [sso-session corp] section"));
  CHECK(s.requests().empty());
  s.Push(FakeServer::Reply(200, {}, "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                                    "<Credentials><AccessKeyId>ASIAWEB</AccessKeyId><SecretAccessKey>w</SecretAccessKey>"
                                    "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"));
  auto web = igt::ResolveCredentials("web");
  REQUIRE(web);
  CHECK(web->access_key == "ASIAWEB");
  CHECK_THAT(s.bodies().back(), Catch::Contains("WebIdentityToken=eyJ.sa.token"));
  auto none_sent = igt::ResolveCredentials("webempty");
  REQUIRE(!none_sent);
  CHECK_THAT(none_sent.error().message(), Catch::Contains("is empty"));
  ::unlink(token.c_str());
  ::unlink(empty.c_str());
  ::unlink(config.c_str());
}

namespace {
// $HOME as a fresh directory with ~/.aws/sso/cache, for the scope of a test.
std::string TempDir() {
  char tmpl[] = "/tmp/igt-home-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

struct SsoHome {
  std::string dir = TempDir();
  std::string cache = dir + "/.aws/sso/cache";
  ScopedEnv home{"HOME", dir};
  SsoHome() { REQUIRE(std::system(("mkdir -p " + cache).c_str()) == 0); }
  ~SsoHome() { std::system(("rm -rf " + dir).c_str()); }
  void Token(const std::string& name, const std::string& json) const {
    std::ofstream(cache + "/" + name + ".json") << json;
  }
  std::string Read(const std::string& name) const { return igt::ReadText(cache + "/" + name + ".json").value_or(""); }
};

using igt::FormatIso8601;

// STS's AssumeRole reply with key id `key`.
std::string AssumeRoleReply(const char* key) {
  return FakeServer::Reply(200, {}, fmt::format("<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>{}"
                                                "</AccessKeyId><SecretAccessKey>t</SecretAccessKey></Credentials>"
                                                "</AssumeRoleResult></AssumeRoleResponse>",
                                                key));
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string RoleCredentials(const char* key) {
  return FakeServer::Reply(200, {"Content-Type: application/json"},
                           fmt::format(R"({{"roleCredentials":{{"accessKeyId":"{}","secretAccessKey":"sso-secret",)"
                                       R"("sessionToken":"sso-session-token","expiration":1795885200000}}}})",
                                       key));
}

// The cache file names: SHA-1 of the sso-session's name, of the start URL.
constexpr const char* kCorp = "ee0bfd2552fbd840c02cc48b6e823320543c450f";
constexpr const char* kLegacy = "e8be5486177c5b5392bd9aa76563515b29358e6e";
}  // namespace

TEST_CASE("SSO: aws sso login's cached token, refreshed near its expiry, exchanged for the role's credentials",
          "[credentials]") {
  NothingSet none;
  FakeServer s;
  SsoHome home;
  ScopedEnv file("AWS_SHARED_CREDENTIALS_FILE", std::string("/nonexistent/igt/credentials"));
  ScopedEnv portal("AWS_ENDPOINT_URL_SSO", s.endpoint());
  ScopedEnv oidc("AWS_ENDPOINT_URL_SSO_OIDC", s.endpoint());
  const std::string config = TempFile(
      "[profile dev]\nsso_session = corp\nsso_account_id = 111122223333\nsso_role_name = Reader\n"
      "[sso-session corp]\nsso_start_url = https://example.awsapps.com/start\nsso_region = eu-west-1\n"
      "sso_registration_scopes = sso:account:access\n"
      "[profile legacy]\nsso_start_url = https://example.awsapps.com/start\nsso_region = eu-west-1\n"
      "sso_account_id = 111122223333\nsso_role_name = Legacy\n"
      "[profile half]\nsso_start_url = https://example.awsapps.com/start\nsso_account_id = 1\n"
      "[profile tokenonly]\nsso_session = corp\n"
      "[profile keyedsource]\nsso_session = corp\nsso_account_id = 111122223333\nsso_role_name = Reader\n"
      "[profile viakeyedsource]\nrole_arn = arn:aws:iam::1:role/v\nsource_profile = keyedsource\n"
      "[profile nosection]\nsso_session = gone\nsso_account_id = 1\nsso_role_name = R\n"
      "[profile mismatch]\nsso_session = corp\nsso_region = us-east-1\nsso_account_id = 1\nsso_role_name = R\n"
      "[profile trainer]\nrole_arn = arn:aws:iam::1:role/trainer\nsource_profile = dev\n");
  ScopedEnv cf("AWS_CONFIG_FILE", config);
  auto token = [](const std::string& access, int64_t expires, const std::string& extra = "") {
    return fmt::format(R"({{"startUrl":"https://example.awsapps.com/start","region":"eu-west-1",)"
                       R"("accessToken":"{}","expiresAt":"{}"{}}})",
                       access, FormatIso8601(expires), extra);
  };
  const std::string registration = fmt::format(
      R"(,"refreshToken":"refresh-1","clientId":"client-1","clientSecret":"client-secret-1",)"
      R"("registrationExpiresAt":"{}")",
      FormatIso8601(Now() + 86400));

  SECTION("a live token: one GetRoleCredentials with it") {
    home.Token(kCorp, token("access-1", Now() + 3600, registration));
    s.Push(RoleCredentials("ASIASSO"));
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(c);
    CHECK(c->access_key == "ASIASSO");
    CHECK(c->secret_key == "sso-secret");
    CHECK(c->session_token == "sso-session-token");
    CHECK(c->expires_unix_s == 1795885200);
    CHECK_THAT(c->source, Catch::Contains("SSO role Reader in account 111122223333 (profile [dev], portal at " +
                                          s.endpoint()));
    REQUIRE(s.requests().size() == 1);
    CHECK(s.requests()[0].starts_with("GET /federation/credentials?account_id=111122223333&role_name=Reader "));
    CHECK(Header(s.requests()[0], "x-amz-sso_bearer_token") == "access-1");
    CHECK(Header(s.requests()[0], "authorization").empty());  // a bearer token, not a signature
  }
  SECTION("a token within 15 minutes of its expiry is refreshed first, and the cache rewritten") {
    home.Token(kCorp, token("access-old", Now() + 300, registration));
    s.Push(FakeServer::Reply(200, {"Content-Type: application/json"},
                             R"({"accessToken":"access-new","expiresIn":28800,"refreshToken":"refresh-2",)"
                             R"("tokenType":"Bearer"})"));
    s.Push(RoleCredentials("ASIAREFRESHED"));
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(c);
    CHECK(c->access_key == "ASIAREFRESHED");
    REQUIRE(s.requests().size() == 2);
    CHECK(s.requests()[0].starts_with("POST /token "));
    auto body = nlohmann::json::parse(s.bodies()[0]);
    CHECK(body["grantType"] == "refresh_token");
    CHECK(body["refreshToken"] == "refresh-1");
    CHECK(body["clientId"] == "client-1");
    CHECK(body["clientSecret"] == "client-secret-1");
    CHECK(Header(s.requests()[0], "content-type") == "application/json");
    CHECK(Header(s.requests()[1], "x-amz-sso_bearer_token") == "access-new");
    auto saved = nlohmann::json::parse(home.Read(kCorp));
    CHECK(saved["accessToken"] == "access-new");
    CHECK(saved["refreshToken"] == "refresh-2");
    CHECK(saved["clientId"] == "client-1");  // the registration is kept
    CHECK(saved["startUrl"] == "https://example.awsapps.com/start");
    auto expires = igt::ParseIso8601(saved["expiresAt"].get<std::string>());
    REQUIRE(expires);
    CHECK(*expires >= Now() + 28800 - 60);
  }
  SECTION("an expired token with a live registration is refreshed, and used") {
    home.Token(kCorp, token("access-old", Now() - 3600, registration));
    REQUIRE(::chmod((home.cache + "/" + kCorp + ".json").c_str(), 0600) == 0);  // as the CLI makes it
    s.Push(FakeServer::Reply(200, {}, R"({"accessToken":"access-new","expiresIn":3600})"));
    s.Push(RoleCredentials("ASIAAFTER"));
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(c);
    CHECK(c->access_key == "ASIAAFTER");
    CHECK(Header(s.requests()[1], "x-amz-sso_bearer_token") == "access-new");
    auto saved = nlohmann::json::parse(home.Read(kCorp));
    CHECK(saved["accessToken"] == "access-new");
    CHECK(saved["refreshToken"] == "refresh-1");  // not rotated: the old one is kept
    // Replaced whole (a temp file, then a rename), with its mode; none left.
    struct stat st {};
    REQUIRE(::stat((home.cache + "/" + kCorp + ".json").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(std::system(("test -z \"$(ls " + home.cache + " | grep tmp)\"").c_str()) == 0);
  }
  SECTION("a cache file that is a symlink is rewritten through it, the link kept") {
    const std::string target = home.dir + "/token-elsewhere.json";
    std::ofstream(target) << token("access-old", Now() - 3600, registration);
    REQUIRE(::symlink(target.c_str(), (home.cache + "/" + kCorp + ".json").c_str()) == 0);
    s.Push(FakeServer::Reply(200, {}, R"({"accessToken":"access-new","expiresIn":3600})"));
    s.Push(RoleCredentials("ASIALINKED"));
    REQUIRE(igt::ResolveCredentials("dev", "us-east-1"));
    struct stat st {};
    REQUIRE(::lstat((home.cache + "/" + kCorp + ".json").c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(nlohmann::json::parse(*igt::ReadText(target))["accessToken"] == "access-new");
  }
  SECTION("a cache file that is not the CLI's, a reply without an expiry") {
    home.Token(kCorp, "not json");
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("has no accessToken and expiresAt"));
    home.Token(kCorp, R"({"accessToken": 5, "expiresAt": "2099-01-01T00:00:00Z"})");
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("has no accessToken and expiresAt"));
    home.Token(kCorp, R"({"accessToken": "a", "expiresAt": "soon"})");
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("not an ISO 8601 time: 'soon'"));
    CHECK(s.requests().empty());
    // Fractional seconds and an offset, as other tools write them.
    home.Token(kCorp, R"({"accessToken": "a", "expiresAt": "2099-01-01T00:00:00.123+00:00"})");
    s.Push(FakeServer::Reply(200, {}, R"({"roleCredentials":{"accessKeyId":"A","secretAccessKey":"S"}})"));
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("the reply has no expiration"));
    s.Push(FakeServer::Reply(200, {}, R"({"roleCredentials":"none"})"));
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("the reply has no roleCredentials"));
  }
  SECTION("a refresh refused: the old token while it lasts, then an error naming aws sso login") {
    home.Token(kCorp, token("access-old", Now() + 300, registration));
    s.Push(FakeServer::Reply(400, {}, R"({"error":"invalid_grant","error_description":"expired"})"));
    s.Push(RoleCredentials("ASIAOLD"));
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(c);
    CHECK(c->access_key == "ASIAOLD");
    CHECK(Header(s.requests()[1], "x-amz-sso_bearer_token") == "access-old");
    CHECK(nlohmann::json::parse(home.Read(kCorp))["accessToken"] == "access-old");

    home.Token(kCorp, token("access-old", Now() - 10, registration));
    s.Push(FakeServer::Reply(400, {}, R"({"error":"invalid_grant"})"));
    auto expired = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!expired);
    CHECK(expired.error().code() == Code::kPermissionDenied);
    CHECK_THAT(expired.error().message(), Catch::Contains("expired at"));
    CHECK_THAT(expired.error().message(), Catch::Contains("invalid_grant"));
    CHECK_THAT(expired.error().message(), Catch::Contains("run 'aws sso login --sso-session corp'"));
    CHECK(s.requests().size() == 3);  // no GetRoleCredentials with an expired token
    CHECK_THAT(expired.error().message(), !Catch::Contains("refresh-1"));
    CHECK_THAT(expired.error().message(), !Catch::Contains("client-secret-1"));
  }
  SECTION("without a refresh token (or its registration expired) an expired token is an error at once") {
    home.Token(kCorp, token("access-old", Now() - 10,
                            fmt::format(R"(,"refreshToken":"r","clientId":"c","clientSecret":"x",)"
                                        R"("registrationExpiresAt":"{}")",
                                        FormatIso8601(Now() - 1))));
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("client registration expired"));
    home.Token(kCorp, token("access-old", Now() - 10));
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("no refreshToken"));
    CHECK(s.requests().empty());
  }
  SECTION("the legacy form: the token keyed by the start URL, never refreshed") {
    // Near its expiry and with refresh fields: still no CreateToken.
    home.Token(kLegacy, token("legacy-access", Now() + 300, registration));
    s.Push(RoleCredentials("ASIALEGACY"));
    auto c = igt::ResolveCredentials("legacy", "us-east-1");
    REQUIRE(c);
    CHECK(c->access_key == "ASIALEGACY");
    REQUIRE(s.requests().size() == 1);
    CHECK(s.requests()[0].starts_with("GET /federation/credentials?account_id=111122223333&role_name=Legacy "));
    CHECK(Header(s.requests()[0], "x-amz-sso_bearer_token") == "legacy-access");
    // The "UTC" suffix older CLI v2 releases wrote, expired.
    home.Token(kLegacy, R"({"accessToken":"legacy-access","expiresAt":"2020-01-01T00:00:00UTC"})");
    auto expired = igt::ResolveCredentials("legacy", "us-east-1");
    REQUIRE(!expired);
    CHECK_THAT(expired.error().message(), Catch::Contains("expired at 2020-01-01T00:00:00Z"));
    CHECK_THAT(expired.error().message(), Catch::Contains("run 'aws sso login --profile legacy'"));
    CHECK(s.requests().size() == 1);
  }
  SECTION("not signed in, a refused token, a role not granted") {
    auto c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("no token at " + home.cache + "/" + kCorp + ".json"));
    CHECK_THAT(c.error().message(), Catch::Contains("aws sso login --sso-session corp"));
    home.Token(kCorp, token("access-1", Now() + 3600));
    s.Push(FakeServer::Reply(401, {"x-amzn-ErrorType: UnauthorizedException"},
                             R"({"message":"Session token not found or invalid"})"));
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK(c.error().code() == Code::kPermissionDenied);
    CHECK_THAT(c.error().message(), Catch::Contains("HTTP 401: Session token not found or invalid"));
    CHECK_THAT(c.error().message(), Catch::Contains("aws sso login --sso-session corp"));
    s.Push(FakeServer::Reply(403, {"x-amzn-ErrorType: ForbiddenException"}, R"({"message":"No access"})"));
    c = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(!c);
    CHECK_THAT(c.error().message(), Catch::Contains("SSO role Reader in account 111122223333"));
    CHECK_THAT(c.error().message(), Catch::Contains("HTTP 403: No access"));
    CHECK_THAT(c.error().message(), !Catch::Contains("access-1"));
  }
  SECTION("settings checked as the AWS CLI checks them") {
    auto half = igt::ResolveCredentials("half", "us-east-1");
    REQUIRE(!half);
    CHECK_THAT(half.error().message(),
               Catch::Contains("profile [half] signs in through SSO, but it has no sso_region, sso_role_name"));
    // Only a session (a token for other tools, no account or role): not an
    // SSO sign-in, as in the AWS CLI; the profile's keys are used.
    const std::string creds = TempFile("[tokenonly]\naws_access_key_id = AKIDTOKENONLY\naws_secret_access_key = t\n");
    ScopedEnv f2("AWS_SHARED_CREDENTIALS_FILE", creds);
    auto tokenonly = igt::ResolveCredentials("tokenonly", "us-east-1");
    REQUIRE(tokenonly);
    CHECK(tokenonly->access_key == "AKIDTOKENONLY");
    ::unlink(creds.c_str());
    auto gone = igt::ResolveCredentials("nosection", "us-east-1");
    REQUIRE(!gone);
    CHECK_THAT(gone.error().message(), Catch::Contains("no [sso-session gone] section in " + config));
    auto mismatch = igt::ResolveCredentials("mismatch", "us-east-1");
    REQUIRE(!mismatch);
    CHECK_THAT(mismatch.error().message(), Catch::Contains("its sso_region is not its [sso-session corp]'s"));
    CHECK(s.requests().empty());
  }
  SECTION("an SSO profile as a role's source, and before the profile's keys") {
    home.Token(kCorp, token("access-1", Now() + 3600));
    ScopedEnv sts("AWS_ENDPOINT_URL_STS", s.endpoint());
    s.Push(RoleCredentials("ASIASSOBASE"));
    s.Push(AssumeRoleReply("ASIATRAINER"));
    auto c = igt::ResolveCredentials("trainer", "us-east-1");
    REQUIRE(c);
    CHECK(c->access_key == "ASIATRAINER");
    REQUIRE(s.requests().size() == 2);
    CHECK_THAT(Header(s.requests()[1], "authorization"), Catch::Contains("Credential=ASIASSOBASE/"));
    CHECK(Header(s.requests()[1], "x-amz-security-token") == "sso-session-token");
    // Keys of the same profile in the credentials file: SSO still wins, as in the AWS CLI.
    const std::string creds = TempFile("[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = d\n");
    ScopedEnv f2("AWS_SHARED_CREDENTIALS_FILE", creds);
    s.Push(RoleCredentials("ASIASSOFIRST"));
    auto first = igt::ResolveCredentials("dev", "us-east-1");
    REQUIRE(first);
    CHECK(first->access_key == "ASIASSOFIRST");
    // So too for a role's source profile with keys of its own.
    const std::string creds2 = TempFile("[keyedsource]\naws_access_key_id = AKIDKS\naws_secret_access_key = k\n");
    ScopedEnv f3("AWS_SHARED_CREDENTIALS_FILE", creds2);
    s.Push(RoleCredentials("ASIAKSSSO"));
    s.Push(AssumeRoleReply("ASIAV"));
    auto via = igt::ResolveCredentials("viakeyedsource", "us-east-1");
    REQUIRE(via);
    CHECK(via->access_key == "ASIAV");
    CHECK_THAT(Header(s.requests().back(), "authorization"), Catch::Contains("Credential=ASIAKSSSO/"));
    ::unlink(creds.c_str());
    ::unlink(creds2.c_str());
  }
  ::unlink(config.c_str());
}

TEST_CASE("ServiceEndpoint: the service's variable, $AWS_ENDPOINT_URL unless the call sends secrets, the region's",
          "[credentials]") {
  NothingSet none;
  ScopedEnv all("AWS_ENDPOINT_URL", std::string("http://minio.local:9000/"));
  CHECK(igt::ServiceEndpoint("AWS_ENDPOINT_URL_STS", "sts", "eu-west-1") == "http://minio.local:9000");
  CHECK(igt::ServiceEndpoint("AWS_ENDPOINT_URL_SSO", "portal.sso", "eu-west-1", false) ==
        "https://portal.sso.eu-west-1.amazonaws.com");
  CHECK(igt::ServiceEndpoint("AWS_ENDPOINT_URL_SSO_OIDC", "oidc", "cn-north-1", false) ==
        "https://oidc.cn-north-1.amazonaws.com.cn");
  CHECK(igt::ServiceEndpoint("AWS_ENDPOINT_URL_SSO", "portal.sso", "", false) ==
        "https://portal.sso.us-east-1.amazonaws.com");
  ScopedEnv sso("AWS_ENDPOINT_URL_SSO", std::string("http://127.0.0.1:1/"));
  CHECK(igt::ServiceEndpoint("AWS_ENDPOINT_URL_SSO", "portal.sso", "eu-west-1", false) == "http://127.0.0.1:1");
}
