#include <catch2/catch.hpp>

#include <curl/curl.h>

#include "backends/s3/s3_backend.h"
#include "backends/s3/s3_response.h"

using namespace igt::s3;
using igt::Code;

TEST_CASE("ParseContentRange", "[range]") {
  auto c = ParseContentRange("bytes 0-9/100");
  REQUIRE(c);
  CHECK(c->start == 0);
  CHECK(c->end == 9);
  CHECK(c->total == 100u);
  CHECK(!c->unsatisfied);
  c = ParseContentRange("bytes 5-9/*");
  REQUIRE(c);
  CHECK(!c->total);
  c = ParseContentRange("bytes */42");
  REQUIRE(c);
  CHECK(c->unsatisfied);
  CHECK(c->total == 42u);
  for (const char* bad : {"", "bytes", "bytes 9-5/100", "bytes 0-100/100", "items 0-1/2", "bytes 0-1",
                          "bytes a-b/c", "bytes */*", "bytes -1-2/3"}) {
    INFO(bad);
    CHECK(!ParseContentRange(bad));
  }
  CHECK(RangeHeader(10, 5) == "bytes=10-14");
}

namespace {
GetReply Reply(long status, const char* range, std::optional<uint64_t> len, uint64_t body) {
  GetReply g;
  g.status = status;
  if (range) g.content_range = range;
  g.content_length = len;
  g.body_bytes = body;
  return g;
}
}  // namespace

TEST_CASE("CheckRangeReply: 206", "[range]") {
  // Inside the object.
  auto c = CheckRangeReply(Reply(206, "bytes 100-199/1000", 100, 100), 100, 100);
  CHECK(c.verdict == RangeVerdict::kOk);
  CHECK(c.bytes == 100);
  // Clamped at EOF.
  c = CheckRangeReply(Reply(206, "bytes 900-999/1000", 100, 100), 900, 4096);
  CHECK(c.verdict == RangeVerdict::kOk);
  CHECK(c.bytes == 100);
  // Wrong start, wrong end, short body, Content-Length mismatch, missing header.
  CHECK(CheckRangeReply(Reply(206, "bytes 0-99/1000", 100, 100), 100, 100).verdict == RangeVerdict::kMalformed);
  CHECK(CheckRangeReply(Reply(206, "bytes 100-149/1000", 50, 50), 100, 100).verdict == RangeVerdict::kMalformed);
  CHECK(CheckRangeReply(Reply(206, "bytes 100-199/1000", std::nullopt, 60), 100, 100).verdict ==
        RangeVerdict::kMalformed);
  CHECK(CheckRangeReply(Reply(206, "bytes 100-199/1000", 100, 60), 100, 100).verdict == RangeVerdict::kMalformed);
  CHECK(CheckRangeReply(Reply(206, nullptr, 100, 100), 100, 100).verdict == RangeVerdict::kMalformed);
  // Unknown total: must be exactly what was asked.
  CHECK(CheckRangeReply(Reply(206, "bytes 0-9/*", 10, 10), 0, 10).verdict == RangeVerdict::kOk);
}

TEST_CASE("CheckRangeReply: 200, 416 and others", "[range]") {
  // 200 for a whole small object read from 0.
  auto c = CheckRangeReply(Reply(200, nullptr, 50, 50), 0, 100);
  CHECK(c.verdict == RangeVerdict::kOk);
  CHECK(c.bytes == 50);
  // 200 but not from offset 0, or bigger than asked: Range was ignored.
  CHECK(CheckRangeReply(Reply(200, nullptr, 50, 50), 10, 100).verdict == RangeVerdict::kIgnoredRange);
  CHECK(CheckRangeReply(Reply(200, nullptr, 500, 100), 0, 100).verdict == RangeVerdict::kMalformed);
  CHECK(CheckRangeReply(Reply(200, nullptr, 500, 500), 0, 100).verdict == RangeVerdict::kIgnoredRange);
  CHECK(CheckRangeReply(Reply(200, nullptr, std::nullopt, 50), 0, 100).verdict == RangeVerdict::kMalformed);
  // 416 at/after EOF.
  c = CheckRangeReply(Reply(416, "bytes */100", 200, 0), 100, 10);
  CHECK(c.verdict == RangeVerdict::kEof);
  CHECK(c.bytes == 0);
  CHECK(CheckRangeReply(Reply(416, nullptr, std::nullopt, 0), 5000, 10).verdict == RangeVerdict::kEof);
  // 416 for an offset inside the object is nonsense.
  CHECK(CheckRangeReply(Reply(416, "bytes */100", std::nullopt, 0), 50, 10).verdict == RangeVerdict::kMalformed);
  CHECK(CheckRangeReply(Reply(204, nullptr, 0, 0), 0, 10).verdict == RangeVerdict::kMalformed);
}

TEST_CASE("XmlBodyComplete: a reply cut short by its Content-Length is told from a whole one", "[range]") {
  using igt::s3::XmlBodyComplete;
  const std::string list = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"x\">"
                           "<Name>b</Name><KeyCount>0</KeyCount></ListBucketResult>\n";
  CHECK(XmlBodyComplete(list));
  for (size_t cut : {1, 2, 7, 19, 20, 40})  // 1: the newline only, still whole
    CHECK(XmlBodyComplete(list.substr(0, list.size() - cut)) == (cut == 1));
  CHECK(XmlBodyComplete(""));
  CHECK(XmlBodyComplete("not xml"));
  CHECK(XmlBodyComplete("<Error><Code>NoSuchKey</Code></Error>"));
  CHECK_FALSE(XmlBodyComplete("<Error><Code>NoSuchKey</Code></Err"));
  CHECK(XmlBodyComplete("<!-- c --><ListAllMyBucketsResult/>"));
  CHECK_FALSE(XmlBodyComplete("<ListBucketResult><Contents><Key>a</Key></Contents>"));
  CHECK(XmlBodyComplete("<!-- a < b --><Error><Code>X</Code></Error >\n"));
  CHECK_FALSE(XmlBodyComplete("<!-- cut"));
}

TEST_CASE("ParseHttpDateNs", "[range]") {
  CHECK(ParseHttpDateNs("Thu, 01 Jan 1970 00:00:01 GMT").value() == 1000000000);
  CHECK(ParseHttpDateNs("Mon, 12 Oct 2009 17:50:00 GMT").value() == 1255369800LL * 1000000000LL);
  CHECK(!ParseHttpDateNs("yesterday"));
  CHECK(ParseU64(" 42 ") == 42u);
  CHECK(!ParseU64("4x2"));
  CHECK(!ParseU64(""));
}

TEST_CASE("ResolveEndpoint: addressing styles", "[endpoint]") {
  igt::S3Options o;
  o.bucket = "data";
  o.region = "eu-west-1";
  auto e = ResolveEndpoint(o);
  REQUIRE(e);
  CHECK(e->endpoint == "https://s3.eu-west-1.amazonaws.com");
  CHECK(!e->path_style);
  CHECK(e->host == "data.s3.eu-west-1.amazonaws.com");
  CHECK(e->Url("a b/c.txt", {}) == "https://data.s3.eu-west-1.amazonaws.com/a%20b/c.txt");
  {  // China's partition
    igt::S3Options cn = o;
    cn.region = "cn-north-1";
    CHECK(ResolveEndpoint(cn)->endpoint == "https://s3.cn-north-1.amazonaws.com.cn");
    CHECK(ResolveEndpoint(cn)->host == "data.s3.cn-north-1.amazonaws.com.cn");
  }
  CHECK(e->Url("", {{"prefix", "x/"}, {"list-type", "2"}}) ==
        "https://data.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=x%2F");

  o.endpoint = "http://127.0.0.1:9000/";
  e = ResolveEndpoint(o);
  REQUIRE(e);
  CHECK(e->path_style);
  CHECK(e->host == "127.0.0.1:9000");
  CHECK(e->RawPath("k") == "/data/k");
  CHECK(e->RawPath("") == "/data");
  CHECK(e->Url("k+1", {}) == "http://127.0.0.1:9000/data/k%2B1");

  o.endpoint = "http://LOCALHOST:4568";
  CHECK(ResolveEndpoint(o)->path_style);
  o.endpoint = "http://[::1]:4568";
  CHECK(ResolveEndpoint(o)->path_style);

  // A host name without a dot (a compose service) has no bucket subdomains.
  o.endpoint = "http://minio:9000";
  CHECK(ResolveEndpoint(o)->path_style);
  CHECK(ResolveEndpoint(o)->host == "minio:9000");

  // Another store's endpoint URL: path-style, as the AWS CLI sends it
  // (bucket subdomains need wildcard DNS); AWS's own: virtual-hosted.
  o.endpoint = "https://storage.example.com";
  CHECK(ResolveEndpoint(o)->path_style);
  o.endpoint = "https://s3.us-west-2.amazonaws.com";
  CHECK(!ResolveEndpoint(o)->path_style);
  CHECK(ResolveEndpoint(o)->host == "data.s3.us-west-2.amazonaws.com");
  o.endpoint = "https://s3.cn-north-1.amazonaws.com.cn";
  CHECK(!ResolveEndpoint(o)->path_style);
  // Stores that refuse path-style requests stay virtual-hosted.
  o.endpoint = "https://oss-cn-hangzhou.aliyuncs.com";
  CHECK(!ResolveEndpoint(o)->path_style);
  CHECK(igt::IsAwsS3Endpoint(""));
  CHECK(igt::IsAwsS3Endpoint("https://S3.eu-west-1.amazonaws.com/"));
  CHECK(igt::IsAwsS3Endpoint("https://bucket.vpce-1a2b.s3.us-east-1.vpce.amazonaws.com:443"));
  CHECK(!igt::IsAwsS3Endpoint("http://127.0.0.1:9000"));
  CHECK(!igt::IsAwsS3Endpoint("https://amazonaws.com.evil.example/x"));
  o.endpoint = "https://storage.example.com";
  o.addressing = "virtual";
  CHECK(!ResolveEndpoint(o)->path_style);
  CHECK(ResolveEndpoint(o)->host == "data.storage.example.com");
  o.addressing = "path";
  CHECK(ResolveEndpoint(o)->path_style);
  o.addressing = "auto";
  o.bucket = "with.dots";
  CHECK(ResolveEndpoint(o)->path_style);
  o.addressing = "virtual";
  CHECK(!ResolveEndpoint(o)->path_style);
  o.endpoint = "http://127.0.0.1:1";
  CHECK(!ResolveEndpoint(o));
  // A legacy bucket name is no host name: path-style, whatever the host.
  o.endpoint = "https://storage.example.com";
  o.bucket = "Old_Bucket";
  CHECK(!ResolveEndpoint(o));  // virtual
  CHECK_THAT(ResolveEndpoint(o).error().message(), Catch::Contains("--addressing path"));
  o.addressing = "auto";
  CHECK(ResolveEndpoint(o)->path_style);
  CHECK(ResolveEndpoint(o)->RawPath("k") == "/Old_Bucket/k");
  o.bucket = "with.dots";
  o.addressing = "virtual";
  o.addressing = "sideways";
  CHECK(ResolveEndpoint(o).error().code() == Code::kInvalidArgument);
  o.addressing = "auto";
  o.endpoint = "127.0.0.1:9000";
  CHECK(ResolveEndpoint(o).error().code() == Code::kInvalidArgument);
  o.endpoint = "ftp://x";
  CHECK(ResolveEndpoint(o).error().code() == Code::kInvalidArgument);
  for (const char* spaced : {"http://127.0.0.1:9000 ", " http://127.0.0.1:9000", "http://a b:1", "http://h\t:1"}) {
    o.endpoint = spaced;
    auto r = ResolveEndpoint(o);
    REQUIRE(!r);
    CHECK_THAT(r.error().message(), Catch::Contains("space or control character"));
  }
  // A port that is no port, a user name and password, a bad region: said
  // as such (curl's "URL using bad/illegal format" said nothing of which).
  for (const char* bad_port : {"http://127.0.0.1:99999", "http://127.0.0.1:abc", "http://h:0", "http://[::1]:x"}) {
    o.endpoint = bad_port;
    auto r = ResolveEndpoint(o);
    REQUIRE(!r);
    CHECK_THAT(r.error().message(), Catch::Contains("not a port number"));
  }
  for (const char* bad_form : {"http://[::1", "http://h:", "http://[::1]9000", "http://[::1]:"}) {
    o.endpoint = bad_form;
    auto r = ResolveEndpoint(o);
    REQUIRE(!r);
    CHECK_THAT(r.error().message(), Catch::Contains("must look like scheme://host"));
  }
  o.endpoint = "http://[::1]:9000";
  CHECK(ResolveEndpoint(o));
  o.endpoint = "http://usr:hunter2pw@127.0.0.1:4598";
  auto userinfo = ResolveEndpoint(o);
  REQUIRE(!userinfo);
  CHECK_THAT(userinfo.error().message(),
             Catch::Contains("user name or password") && !Catch::Contains("hunter2pw") && Catch::Contains("127.0.0.1:4598"));
  o.endpoint = "http://127.0.0.1:9000";
  for (const char* bad_region : {"us\r\nX-Evil: 1", "us east", "eu/west"}) {
    o.region = bad_region;
    auto r = ResolveEndpoint(o);
    REQUIRE(!r);
    CHECK_THAT(r.error().message(), Catch::Contains("is not a region name"));
  }
  o.region = "us-east-1";
  // No host is said as such (trailing slashes once made it "http:", "needs a scheme").
  for (const char* no_host : {"http://", "http:///", "https://", "http://:80"}) {
    o.endpoint = no_host;
    auto r = ResolveEndpoint(o);
    REQUIRE(!r);
    CHECK_THAT(r.error().message(), Catch::Contains("has no host"));
  }
}

TEST_CASE("ClassifyFailure maps replies to codes and retry verdicts", "[endpoint]") {
  igt::S3Options o;
  o.bucket = "bkt";
  o.endpoint = "http://127.0.0.1:1";
  S3Endpoint ep = *ResolveEndpoint(o);
  HttpResponse r;
  r.curl_code = CURLE_COULDNT_CONNECT;
  r.curl_error = "Connection refused";
  auto out = ClassifyFailure(r, ep, "key 'a'");
  CHECK(out.status.code() == Code::kUnavailable);
  CHECK(out.retry);
  CHECK_THAT(out.status.message(), Catch::Contains("http://127.0.0.1:1"));

  r = HttpResponse{};
  r.status = 503;
  r.body = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
  out = ClassifyFailure(r, ep, "key 'a'");
  CHECK(out.retry);
  CHECK_THAT(out.status.message(), Catch::Contains("SlowDown"));

  r.status = 429;
  CHECK(ClassifyFailure(r, ep, "x").retry);
  r.status = 500;
  CHECK(ClassifyFailure(r, ep, "x").retry);
  // Transient as the AWS SDKs take them: a proxy's 408, S3's idle-socket
  // timeout; another 400 is final.
  r = HttpResponse{};
  r.status = 408;
  CHECK(ClassifyFailure(r, ep, "x").retry);
  r.status = 400;
  CHECK(!ClassifyFailure(r, ep, "x").retry);
  r.body = "<Error><Code>RequestTimeout</Code><Message>Your socket connection to the server was not read from or "
           "written to within the timeout period.</Message></Error>";
  CHECK(ClassifyFailure(r, ep, "x").retry);
  // A HEAD's region mismatch: a bare 400 with the bucket's region in a
  // header, said as such (was a generic "HTTP 400").
  r = HttpResponse{};
  r.status = 400;
  r.headers["x-amz-bucket-region"] = "ap-south-1";
  out = ClassifyFailure(r, ep, "key 'a'");
  CHECK(!out.retry);
  CHECK_THAT(out.status.message(), Catch::Contains("region ap-south-1"));
  // Another 400 that carries the header is not taken for one.
  r.body = "<Error><Code>InvalidArgument</Code><Message>bad</Message></Error>";
  CHECK_THAT(ClassifyFailure(r, ep, "key 'a'").status.message(), !Catch::Contains("region ap-south-1"));
  // A store that wants virtual-hosted requests says so; the hint follows.
  r = HttpResponse{};
  r.status = 403;
  r.body = "<Error><Code>SecondLevelDomainForbidden</Code><Message>Please use virtual hosted style to access."
           "</Message></Error>";
  CHECK_THAT(ClassifyFailure(r, ep, "listing").status.message(), Catch::Contains("--addressing virtual"));
  // A skewed clock is named, not taken for refused credentials.
  r.status = 403;
  r.body = "<Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time and the "
           "current time is too large.</Message></Error>";
  out = ClassifyFailure(r, ep, "listing");
  CHECK(out.status.code() == Code::kPermissionDenied);
  CHECK(!out.retry);
  CHECK(!out.credentials_refused);
  CHECK_THAT(out.status.message(), Catch::Contains("clock"));
  CHECK_THAT(out.status.message(), !Catch::Contains("bucket policy"));
  // A bucket subdomain that does not resolve hints path-style addressing.
  {
    igt::S3Options v;
    v.bucket = "bkt";
    v.endpoint = "https://store.example.com";
    v.addressing = "virtual";
    const S3Endpoint vep = *ResolveEndpoint(v);
    HttpResponse dns;
    dns.curl_code = CURLE_COULDNT_RESOLVE_HOST;
    dns.curl_error = "Could not resolve host: bkt.store.example.com";
    CHECK_THAT(ClassifyFailure(dns, vep, "x").status.message(), Catch::Contains("--addressing path"));
    CHECK_THAT(ClassifyFailure(dns, ep, "x").status.message(), !Catch::Contains("--addressing"));
  }

  r = HttpResponse{};
  r.status = 403;
  r.body = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
  out = ClassifyFailure(r, ep, "listing");
  CHECK(out.status.code() == Code::kPermissionDenied);
  CHECK(!out.retry);
  CHECK_THAT(out.status.message(), Catch::Contains("bkt"));

  // An archived object: said so, not "check the credentials" (black-box test).
  r.body = "<Error><Code>InvalidObjectState</Code><Message>The operation is not valid for the object's storage "
           "class</Message></Error>";
  out = ClassifyFailure(r, ep, "key 'cold/a.bin'");
  CHECK(out.status.code() == Code::kPermissionDenied);
  CHECK(!out.retry);
  CHECK(!out.credentials_refused);
  CHECK_THAT(out.status.message(), Catch::Contains("key 'cold/a.bin' in bucket 'bkt' is archived") &&
                                       Catch::Contains("restore") && !Catch::Contains("credentials"));

  r.status = 404;
  r.body = "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
  out = ClassifyFailure(r, ep, "listing");
  CHECK(out.status.code() == Code::kNotFound);
  CHECK_THAT(out.status.message(), Catch::Contains("does not exist"));
  CHECK(!out.retry);

  r.body.clear();
  out = ClassifyFailure(r, ep, "key 'a/b'");
  CHECK(out.status.code() == Code::kNotFound);
  CHECK_THAT(out.status.message(), Catch::Contains("a/b"));

  r.status = 400;
  out = ClassifyFailure(r, ep, "x");
  CHECK(out.status.code() == Code::kIoError);
  CHECK(!out.retry);
}
