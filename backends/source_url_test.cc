#include <catch2/catch.hpp>

#include "igtcache/backends.h"

using igt::Code;
using igt::ParseSourceUrl;
using igt::SourceUrl;

TEST_CASE("ParseSourceUrl: file URLs", "[url]") {
  auto r = ParseSourceUrl("file:///data/set");
  REQUIRE(r);
  CHECK(r->kind == SourceUrl::Kind::kFile);
  CHECK(r->path == "/data/set");

  r = ParseSourceUrl("file:///data/set///");
  REQUIRE(r);
  CHECK(r->path == "/data/set");

  r = ParseSourceUrl("file:///");
  REQUIRE(r);
  CHECK(r->path == "/");

  r = ParseSourceUrl("FILE://localhost/x//y");
  REQUIRE(r);
  CHECK(r->path == "/x/y");

  // Percent-escapes decoded (Python's Path.as_uri() writes a space as %20);
  // a '%' without two hex digits after it stays as it is.
  r = ParseSourceUrl("file:///data/dir%20with%20spaces/%C3%A9t%c3%a9%25");
  REQUIRE(r);
  CHECK(r->path == "/data/dir with spaces/\xC3\xA9t\xC3\xA9%");
  r = ParseSourceUrl("file:///data/50%off/%2/%");
  REQUIRE(r);
  CHECK(r->path == "/data/50%off/%2/%");
  r = ParseSourceUrl("file:///data%2Fset%2F");
  REQUIRE(r);
  CHECK(r->path == "/data/set");
  auto nul = ParseSourceUrl("file:///data/a%00b");
  REQUIRE(!nul);
  CHECK_THAT(nul.error().message(), Catch::Contains("NUL"));

  auto bad = ParseSourceUrl("file://relative/dir");
  REQUIRE(!bad);
  CHECK(bad.error().code() == Code::kInvalidArgument);
  CHECK_THAT(bad.error().message(), Catch::Contains("absolute"));
  CHECK(!ParseSourceUrl("file://"));
  auto one_slash = ParseSourceUrl("s3:/demo");
  REQUIRE(!one_slash);
  CHECK_THAT(one_slash.error().message(), Catch::Contains("needs '://' after its scheme 's3'"));
  CHECK_THAT(ParseSourceUrl("just-a-name").error().message(), Catch::Contains("has no scheme"));
  CHECK_THAT(ParseSourceUrl("/data/set").error().message(), Catch::Contains("has no scheme"));
  CHECK_THAT(ParseSourceUrl("/data/set").error().message(), Catch::Contains("file:///data/set"));
}

TEST_CASE("ParseSourceUrl: s3 URLs", "[url]") {
  auto r = ParseSourceUrl("s3://my-bucket");
  REQUIRE(r);
  CHECK(r->kind == SourceUrl::Kind::kS3);
  CHECK(r->bucket == "my-bucket");
  CHECK(r->prefix.empty());

  r = ParseSourceUrl("s3://my-bucket/");
  REQUIRE(r);
  CHECK(r->prefix.empty());

  r = ParseSourceUrl("s3://my.bucket.1/imagenet/train");
  REQUIRE(r);
  CHECK(r->bucket == "my.bucket.1");
  CHECK(r->prefix == "imagenet/train/");

  // The prefix as written: keys may start with '/' (it was stripped).
  auto lead = ParseSourceUrl("s3://abc//data");
  REQUIRE(lead);
  CHECK(lead->prefix == "/data/");
  r = ParseSourceUrl("s3://abc/a/b/");
  REQUIRE(r);
  CHECK(r->prefix == "a/b/");

  // Legacy names (buckets made before March 2018): uppercase, '_', up to 255.
  for (const char* legacy : {"s3://Upper", "s3://under_score", "s3://My_Bucket/x",
                             "s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}) {
    INFO(legacy);
    CHECK(ParseSourceUrl(legacy).has_value());
  }
  const std::string too_long = "s3://" + std::string(256, 'a');
  for (const char* bad : {"s3://", "s3:///x", "s3://ab", "s3://-abc", "s3://abc-", "s3://_abc", "s3://a..b",
                          "s3://192.168.1.1", "s3://a b", "s3://a+b", too_long.c_str()}) {
    INFO(bad);
    auto e = ParseSourceUrl(bad);
    REQUIRE(!e);
    CHECK(e.error().code() == Code::kInvalidArgument);
  }
  auto e = ParseSourceUrl("s3://Bad Name/x");
  REQUIRE(!e);
  CHECK_THAT(e.error().message(), Catch::Contains("Bad Name"));
}

TEST_CASE("ParseSourceUrl: unknown schemes name the scheme and the supported ones", "[url]") {
  auto e = ParseSourceUrl("gs://bucket/x");
  REQUIRE(!e);
  CHECK(e.error().code() == Code::kInvalidArgument);
  CHECK_THAT(e.error().message(), Catch::Contains("'gs'"));
  CHECK_THAT(e.error().message(), Catch::Contains("s3://"));
  CHECK_THAT(e.error().message(), Catch::Contains("file://"));

  e = ParseSourceUrl("/just/a/path");
  REQUIRE(!e);
  CHECK_THAT(e.error().message(), Catch::Contains("scheme"));
}
