#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <unistd.h>

#include "backends/credentials.h"
#include "igtcache/backends.h"

using igt::Code;

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

TEST_CASE("ParseCredentialsIni reads sections and keys", "[credentials]") {
  auto d = igt::ParseCredentialsIni(kIni, "default", "f");
  REQUIRE(d);
  CHECK(d->access_key == "AKIDDEFAULT");
  CHECK(d->secret_key == "secretdefault");
  CHECK(d->session_token.empty());

  auto w = igt::ParseCredentialsIni(kIni, "work", "f");
  REQUIRE(w);
  CHECK(w->access_key == "AKIDWORK");
  CHECK(w->secret_key == "secret/work+key");
  CHECK(w->session_token == "tok123");

  auto missing = igt::ParseCredentialsIni(kIni, "nope", "/x/credentials");
  REQUIRE(!missing);
  CHECK(missing.error().code() == Code::kNotFound);
  CHECK_THAT(missing.error().message(), Catch::Contains("/x/credentials"));
  CHECK_THAT(missing.error().message(), Catch::Contains("nope"));

  auto broken = igt::ParseCredentialsIni(kIni, "broken", "f");
  REQUIRE(!broken);
  CHECK_THAT(broken.error().message(), Catch::Contains("aws_secret_access_key"));
  CHECK_THAT(broken.error().message(), !Catch::Contains("AKIDBROKEN"));
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
