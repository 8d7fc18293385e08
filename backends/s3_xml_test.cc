#include <catch2/catch.hpp>

#include <limits>

#include "backends/s3/s3_xml.h"

using namespace igt::s3;
using igt::Code;

TEST_CASE("ParseListObjectsV2: a truncated page with objects and prefixes", "[xml]") {
  const char* xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>data/</Prefix><KeyCount>3</KeyCount><MaxKeys>3</MaxKeys>
  <Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents><Key>data/a.jpg</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>
    <ETag>"fba9dede5f27731c9771645a39863328"</ETag><Size>434234</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>data/b &amp; c.jpg</Key><LastModified>2009-10-12T17:50:30.5Z</LastModified>
    <ETag>&quot;abc-2&quot;</ETag><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>data/sub/</Prefix></CommonPrefixes>
</ListBucketResult>)";
  auto r = ParseListObjectsV2(xml);
  REQUIRE(r);
  REQUIRE(r->objects.size() == 2);
  CHECK(r->objects[0].key == "data/a.jpg");
  CHECK(r->objects[0].size == 434234);
  CHECK(r->objects[0].etag == "fba9dede5f27731c9771645a39863328");
  CHECK(r->objects[0].mtime_ns == 1255369830LL * 1000000000LL);
  CHECK(r->objects[1].key == "data/b & c.jpg");
  CHECK(r->objects[1].etag == "abc-2");
  CHECK(r->objects[1].size == 0);
  CHECK(r->objects[1].mtime_ns == 1255369830LL * 1000000000LL + 500000000LL);
  REQUIRE(r->prefixes.size() == 1);
  CHECK(r->prefixes[0] == "data/sub/");
  CHECK(r->is_truncated);
  CHECK(r->next_token == "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST_CASE("ParseListObjectsV2: url-encoded keys are decoded", "[xml]") {
  const char* xml = R"(<ListBucketResult><EncodingType>url</EncodingType>
  <Prefix>d%2F</Prefix><IsTruncated>false</IsTruncated>
  <Contents><Key>d/a+b%2Bc%20d%C3%A9%0A</Key><Size>5</Size><ETag>"e"</ETag></Contents>
  <CommonPrefixes><Prefix>d/x%26y/</Prefix></CommonPrefixes>
  <CommonPrefixes><Prefix>d/z/</Prefix></CommonPrefixes>
</ListBucketResult>)";
  auto r = ParseListObjectsV2(xml);
  REQUIRE(r);
  REQUIRE(r->objects.size() == 1);
  CHECK(r->objects[0].key == "d/a b+c d\xc3\xa9\n");
  CHECK(r->objects[0].mtime_ns == 0);
  REQUIRE(r->prefixes.size() == 2);
  CHECK(r->prefixes[0] == "d/x&y/");
  CHECK(r->prefixes[1] == "d/z/");
  CHECK(!r->is_truncated);
  CHECK(r->next_token.empty());
}

TEST_CASE("ParseListObjectsV2: without EncodingType '+' and '%' are literal", "[xml]") {
  auto r = ParseListObjectsV2(
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a+b%20</Key><Size>1</Size>"
      "</Contents></ListBucketResult>");
  REQUIRE(r);
  CHECK(r->objects[0].key == "a+b%20");
}

TEST_CASE("ParseListObjectsV2: raw keys keep a carriage return, and a key of spaces", "[xml]") {
  // A server that ignores encoding-type=url (s3rver) sends control bytes
  // raw; XML's end-of-line rule would make "\r" and "\r\n" a "\n", and the
  // file would be shown under a name no GET finds.
  const std::string xml = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                          "<Contents><Key>d/cr\rx</Key><Size>1</Size></Contents>"
                          "<Contents><Key>d/crlf\r\nx</Key><Size>1</Size></Contents>"
                          "<Contents><Key> </Key><Size>1</Size></Contents>"
                          "<CommonPrefixes><Prefix>p\r/</Prefix></CommonPrefixes></ListBucketResult>";
  auto r = ParseListObjectsV2(xml);
  REQUIRE(r);
  REQUIRE(r->objects.size() == 3);
  CHECK(r->objects[0].key == "d/cr\rx");
  CHECK(r->objects[1].key == "d/crlf\r\nx");
  CHECK(r->objects[2].key == " ");
  REQUIRE(r->prefixes.size() == 1);
  CHECK(r->prefixes[0] == "p\r/");
}

TEST_CASE("ParseListObjectsV2: empty result", "[xml]") {
  auto r = ParseListObjectsV2(R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>nothing/</Prefix>
<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>)");
  REQUIRE(r);
  CHECK(r->objects.empty());
  CHECK(r->prefixes.empty());
  CHECK(!r->is_truncated);
}

TEST_CASE("ParseListObjectsV2: malformed replies are Corruption", "[xml]") {
  for (const char* bad : {
           "",
           "not xml at all",
           "<ListBucketResult><Contents><Key>a</Key><Size>1</Size>",  // cut off
           "<Error><Code>AccessDenied</Code></Error>",
           "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>a</Key><Size>12x</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>a</Key><Size>1</Size><LastModified>yesterday</LastModified>"
           "</Contents></ListBucketResult>",
           "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
           "<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%zz</Key><Size>1</Size>"
           "</Contents></ListBucketResult>",
       }) {
    INFO(bad);
    auto r = ParseListObjectsV2(bad);
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
  }
}

TEST_CASE("ParseListObjectsV2: a truncated page without a continuation token is a server without ListObjectsV2",
          "[xml]") {
  // Not retried (kNotSupported): a version 1 reply stays one.
  auto r = ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>");
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kNotSupported);
  r = ParseListObjectsV2(
      "<ListBucketResult><Marker></Marker><NextMarker>k999</NextMarker><IsTruncated>true</IsTruncated>"
      "<Contents><Key>k999</Key><Size>1</Size></Contents></ListBucketResult>");
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kNotSupported);
  CHECK_THAT(r.error().message(), Catch::Contains("version 1") && Catch::Contains("ListObjectsV2"));
}

TEST_CASE("ParseErrorXml", "[xml]") {
  auto e = ParseErrorXml(R"(<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>
<BucketName>nope</BucketName><RequestId>x</RequestId></Error>)");
  CHECK(e.code == "NoSuchBucket");
  CHECK(e.message == "The specified bucket does not exist");
  auto r = ParseErrorXml("<Error><Code>PermanentRedirect</Code><Endpoint>b.s3.eu-west-1.amazonaws.com</Endpoint></Error>");
  CHECK(r.endpoint == "b.s3.eu-west-1.amazonaws.com");
  CHECK(ParseErrorXml("").code.empty());
  CHECK(ParseErrorXml("<html>502 Bad Gateway</html>").code.empty());
}

TEST_CASE("ParseIso8601Ns", "[xml]") {
  CHECK(ParseIso8601Ns("1970-01-01T00:00:00Z").value() == 0);
  CHECK(ParseIso8601Ns("1970-01-01T00:00:01.000000001Z").value() == 1000000001);
  CHECK(ParseIso8601Ns("1970-01-01T01:00:00+01:00").value() == 0);
  CHECK(ParseIso8601Ns("2023-02-28T23:59:59.123Z").value() == 1677628799123000000LL);
  CHECK(!ParseIso8601Ns("2023-13-01T00:00:00Z"));
  CHECK(!ParseIso8601Ns("2023-01-01"));
  CHECK(!ParseIso8601Ns("2023-01-01T00:00:00Zjunk"));
  // Beyond what int64 nanoseconds hold: the nearest end, not an error (one
  // such object failed its whole directory).
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max() / 1000000000 * 1000000000;  // whole seconds
  CHECK(ParseIso8601Ns("2300-01-01T00:00:00.000Z").value() == kEnd);
  CHECK(ParseIso8601Ns("0000-01-01T00:00:00Z").value() == -kEnd);
}
