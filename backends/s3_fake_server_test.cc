// The S3 backend against a scripted in-process HTTP server: retries on 503 /
// 500 / truncated bodies / bad Content-Range, no retry on 4xx, error bodies
// never returned as data, metrics, and what the requests look like on the wire.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/fake_http_server_test.h"
#include "igtcache/backends.h"
#include "igtcache/metrics.h"

using igt::Code;
using igt::testing::FakeServer;

namespace {

igt::S3Options Opts(const FakeServer& s, igt::Metrics* m) {
  igt::S3Options o;
  o.bucket = "bkt";
  o.prefix = "pre/";
  o.endpoint = s.endpoint();
  o.credentials = {"AKIDTEST", "secret-never-shown", "", 0, ""};
  o.max_retries = 3;
  o.retry_base_ms = 1;
  o.retry_deadline_ms = 10000;
  o.connect_timeout_ms = 2000;
  o.request_timeout_ms = 5000;
  o.metrics = m;
  return o;
}

const std::string kTen = "0123456789";
const std::vector<std::string> kOkHeaders = {"Content-Range: bytes 0-9/10", "ETag: \"e1\""};

std::string Head(const std::string& req, const std::string& lower_name) {
  std::string lower = req;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto p = lower.find("\r\n" + lower_name + ":");
  if (p == std::string::npos) return "";
  auto start = p + 3 + lower_name.size();
  auto end = req.find("\r\n", start);
  std::string v = req.substr(start, end - start);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  return v;
}

}  // namespace

TEST_CASE("S3 fake: a ranged GET looks right on the wire", "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto o = Opts(s, &m);
  o.credentials.session_token = "TOKEN123";
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  char buf[10];
  auto n = (*b)->Read("dir/a b.txt", 0, 10, "e1", buf);
  REQUIRE(n);
  CHECK(*n == 10);
  CHECK(std::string(buf, 10) == kTen);
  auto reqs = s.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].starts_with("GET /bkt/pre/dir/a%20b.txt HTTP/1.1"));
  CHECK(Head(reqs[0], "range") == "bytes=0-9");
  CHECK(Head(reqs[0], "if-match") == "\"e1\"");  // another version is refused, not sent
  CHECK(Head(reqs[0], "host") == "127.0.0.1:" + s.endpoint().substr(s.endpoint().rfind(':') + 1));
  CHECK(Head(reqs[0], "x-amz-content-sha256") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Head(reqs[0], "x-amz-security-token") == "TOKEN123");
  CHECK(Head(reqs[0], "authorization").starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/"));
  CHECK_THAT(Head(reqs[0], "authorization"), Catch::Contains("/us-east-1/s3/aws4_request"));
  CHECK(reqs[0].find("secret-never-shown") == std::string::npos);
  CHECK(m.backend_retries == 0);
}

TEST_CASE("S3 fake: anonymous requests are unsigned", "[s3fake]") {
  FakeServer s;
  auto o = Opts(s, nullptr);
  o.no_sign_request = true;
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  char buf[10];
  REQUIRE((*b)->Read("k", 0, 10, "", buf));
  CHECK(Head(s.requests()[0], "authorization").empty());
}

TEST_CASE("S3 fake: a Requester Pays bucket and an expected owner: two headers on every request, signed",
          "[s3fake]") {
  FakeServer s;
  auto o = Opts(s, nullptr);
  o.requester_pays = true;
  o.expected_bucket_owner = "111122223333";
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  char buf[10];
  REQUIRE((*b)->Read("k", 0, 10, "e1", buf));
  s.Push("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\nETag: \"e1\"\r\n\r\n");
  REQUIRE((*b)->Stat("k"));
  s.Push(FakeServer::Reply(200, {}, "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>"));
  igt::ListRequest req;
  REQUIRE((*b)->List(req));
  const auto reqs = s.requests();
  REQUIRE(reqs.size() == 3);
  for (const auto& r : reqs) {
    INFO(r.substr(0, r.find("\r\n")));
    CHECK(Head(r, "x-amz-request-payer") == "requester");
    CHECK(Head(r, "x-amz-expected-bucket-owner") == "111122223333");
    // Signed: both are among the signature's headers.
    const std::string auth = Head(r, "authorization");
    const auto sh = auth.find("SignedHeaders=");
    REQUIRE(sh != std::string::npos);
    CHECK_THAT(auth.substr(sh, auth.find(',', sh) - sh),
               Catch::EndsWith(";x-amz-date;x-amz-expected-bucket-owner;x-amz-request-payer"));
  }
  // Without them: neither header, and a 403 says a Requester Pays bucket needs the option.
  auto plain = igt::MakeS3Backend(Opts(s, nullptr));
  REQUIRE(plain);
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"));
  auto denied = (*plain)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!denied);
  CHECK(Head(s.requests().back(), "x-amz-request-payer").empty());
  CHECK(Head(s.requests().back(), "x-amz-expected-bucket-owner").empty());
  CHECK(denied.error().code() == Code::kPermissionDenied);
  CHECK_THAT(denied.error().message(), Catch::Contains("Requester Pays bucket also needs backend.requester_pays"));
  // Not for a 403 that says another cause.
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>SignatureDoesNotMatch</Code><Message>x</Message></Error>"));
  auto badsig = (*plain)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!badsig);
  CHECK_THAT(badsig.error().message(), !Catch::Contains("Requester Pays"));
  // With them: not Requester Pays, but maybe the owner.
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"));
  auto denied_rp = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!denied_rp);
  CHECK_THAT(denied_rp.error().message(), !Catch::Contains("Requester Pays"));
  CHECK_THAT(denied_rp.error().message(), Catch::Contains("or the bucket does not belong to account 111122223333"));
}

TEST_CASE("S3 fake: retries 503 SlowDown, 500, truncated bodies and bad ranges", "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto b = igt::MakeS3Backend(Opts(s, &m));
  REQUIRE(b);
  s.Push(FakeServer::Reply(503, {}, "<Error><Code>SlowDown</Code><Message>Reduce</Message></Error>"));
  s.Push(FakeServer::Reply(206, {"Content-Range: bytes 0-9/10", "ETag: \"e1\"", "Content-Length: 10"},
                           "01234", /*auto_length=*/false));  // truncated
  s.Push(FakeServer::Reply(206, {"Content-Range: bytes 1-10/11", "ETag: \"e1\""}, kTen));  // wrong range
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  char buf[10];
  auto n = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(n);
  CHECK(*n == 10);
  CHECK(std::string(buf, 10) == kTen);
  CHECK(m.backend_retries == 3);
  CHECK(m.backend_errors == 0);
  CHECK(s.requests().size() == 4);
}

TEST_CASE("S3 fake: retry budget is bounded and error bodies are never data", "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto b = igt::MakeS3Backend(Opts(s, &m));
  REQUIRE(b);
  for (int i = 0; i < 4; ++i) {
    s.Push(FakeServer::Reply(500, {}, "<Error><Code>InternalError</Code><Message>boom</Message></Error>"));
  }
  char buf[64];
  std::memset(buf, '#', sizeof buf);
  auto n = (*b)->Read("k", 0, 64, "", buf);
  REQUIRE(!n);
  CHECK(n.error().code() == Code::kIoError);
  CHECK_THAT(n.error().message(), Catch::Contains("InternalError"));
  CHECK_THAT(n.error().message(), Catch::Contains("3 retries"));
  CHECK(std::string(buf, 64) == std::string(64, '#'));
  CHECK(m.backend_retries == 3);
  CHECK(m.backend_errors == 1);
  CHECK(s.requests().size() == 4);

  // A zero deadline allows no retry at all.
  FakeServer s2;
  igt::Metrics m2;
  auto o = Opts(s2, &m2);
  o.retry_deadline_ms = 0;
  o.retry_base_ms = 1000;
  auto b2 = igt::MakeS3Backend(o);
  REQUIRE(b2);
  CHECK(!(*b2)->Read("k", 0, 64, "", buf));
  CHECK(m2.backend_retries == 0);
  CHECK(s2.requests().size() == 1);
}

TEST_CASE("S3 fake: 4xx are final, ETag mismatch is kChanged, oversize is an error", "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto b = igt::MakeS3Backend(Opts(s, &m));
  REQUIRE(b);
  char buf[10];
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"));
  auto n = (*b)->Read("k", 0, 10, "", buf);
  REQUIRE(!n);
  CHECK(n.error().code() == Code::kPermissionDenied);
  CHECK_THAT(n.error().message(), Catch::Contains("bkt"));
  CHECK_THAT(n.error().message(), Catch::Contains("AccessDenied"));
  CHECK_THAT(n.error().message(), !Catch::Contains("secret-never-shown"));

  s.Push(FakeServer::Reply(404, {}, "<Error><Code>NoSuchKey</Code><Message>nope</Message></Error>"));
  CHECK((*b)->Read("k", 0, 10, "", buf).error().code() == Code::kNotFound);

  s.Push(FakeServer::Reply(206, {"Content-Range: bytes 0-9/10", "ETag: \"other\""}, kTen));
  CHECK((*b)->Read("k", 0, 10, "e1", buf).error().code() == Code::kChanged);
  // A store honouring If-Match refuses another version's range: changed, not retried.
  s.Push(FakeServer::Reply(412, {}, "<Error><Code>PreconditionFailed</Code><Message>At least one of the "
                                    "pre-conditions you specified did not hold</Message></Error>"));
  auto refused = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!refused);
  CHECK(refused.error().code() == Code::kChanged);
  CHECK_THAT(refused.error().message(), Catch::Contains("'k'"));

  // Range ignored: 200 with a 20-byte object for a 10-byte read.
  s.Push(FakeServer::Reply(200, {"ETag: \"e1\""}, kTen + kTen));
  auto big = (*b)->Read("k", 0, 10, "", buf);
  REQUIRE(!big);
  CHECK(big.error().code() == Code::kIoError);

  // 200 for a whole small object is fine.
  s.Push(FakeServer::Reply(200, {"ETag: \"e1\""}, "abc"));
  CHECK((*b)->Read("k", 0, 10, "e1", buf).value() == 3);

  // 416 at EOF: zero bytes.
  s.Push(FakeServer::Reply(416, {"Content-Range: bytes */10", "ETag: \"e1\""}, "<Error><Code>InvalidRange</Code></Error>"));
  CHECK((*b)->Read("k", 10, 10, "e1", buf).value() == 0);

  // A reply without an ETag for a versioned read (a proxy stripping it):
  // an error at once, not after the retry budget (it would be stripped again).
  s.Push(FakeServer::Reply(206, {"Content-Range: bytes 0-9/10"}, kTen));
  auto noetag = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!noetag);
  CHECK(noetag.error().code() == Code::kIoError);
  CHECK_THAT(noetag.error().message(), Catch::Contains("without an ETag"));

  CHECK(m.backend_retries == 0);
  CHECK(s.requests().size() == 8);
  CHECK(Head(s.requests()[1], "if-match").empty());  // an unversioned read asks for any version
  // A weak ETag (some gateways): no If-Match (it needs a strong match; every
  // GET would be refused); the reply's ETag is still compared.
  s.Push(FakeServer::Reply(206, {"Content-Range: bytes 0-9/10", "ETag: W/\"w1\""}, kTen));
  CHECK((*b)->Read("k", 0, 10, "W/\"w1\"", buf).value() == 10);
  CHECK(Head(s.requests().back(), "if-match").empty());
}

TEST_CASE("S3 fake: a prefix starting with '/' is listed as given", "[s3fake]") {
  // s3://b//data: keys under "/data/" (it was stripped to "data/").
  FakeServer s;
  auto o = Opts(s, nullptr);
  o.prefix = "/lead";
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  s.Push(FakeServer::Reply(200, {}, "<ListBucketResult><Contents><Key>/lead/x</Key><Size>1</Size></Contents>"
                                    "</ListBucketResult>"));
  auto p = (*b)->List({});
  REQUIRE(p);
  REQUIRE(p->objects.size() == 1);
  CHECK(p->objects[0].key == "x");
  CHECK(s.requests()[0].find("prefix=%2Flead%2F") != std::string::npos);
}

TEST_CASE("S3 fake: Stat and List", "[s3fake]") {
  FakeServer s;
  auto b = igt::MakeS3Backend(Opts(s, nullptr));
  REQUIRE(b);
  s.Push("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1234\r\nETag: \"abc\"\r\n"
         "Last-Modified: Thu, 01 Jan 1970 00:00:10 GMT\r\n\r\n");
  auto st = (*b)->Stat("x/y");
  REQUIRE(st);
  CHECK(st->key == "x/y");
  CHECK(st->size == 1234);
  CHECK(st->etag == "abc");
  CHECK(st->mtime_ns == 10'000'000'000LL);
  CHECK(s.requests()[0].starts_with("HEAD /bkt/pre/x/y HTTP/1.1"));

  s.Push("HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  CHECK((*b)->Stat("gone").error().code() == Code::kNotFound);

  s.Push(FakeServer::Reply(200, {}, R"(<ListBucketResult><EncodingType>url</EncodingType>
    <IsTruncated>true</IsTruncated><NextContinuationToken>tok/+=</NextContinuationToken>
    <Contents><Key>pre/d/</Key><Size>0</Size></Contents>
    <Contents><Key>pre/d/a%20b</Key><Size>3</Size><ETag>"q"</ETag></Contents>
    <CommonPrefixes><Prefix>pre/d/sub/</Prefix></CommonPrefixes></ListBucketResult>)"));
  igt::ListRequest req;
  req.prefix = "d/";
  req.max_keys = 5;
  req.continuation_token = "prev token";
  auto p = (*b)->List(req);
  REQUIRE(p);
  REQUIRE(p->objects.size() == 1);  // the "d/" marker object is skipped
  CHECK(p->objects[0].key == "d/a b");
  CHECK(p->objects[0].etag == "q");
  CHECK(p->prefixes == std::vector<std::string>{"d/sub/"});
  CHECK(p->next_token == "tok/+=");
  std::string line = s.requests()[2].substr(0, s.requests()[2].find("\r\n"));
  CHECK(line == "GET /bkt?continuation-token=prev%20token&delimiter=%2F&encoding-type=url&"
                "list-type=2&max-keys=5&prefix=pre%2Fd%2F HTTP/1.1");

  // A server that hands back the token it was sent would be listed forever.
  s.Push(FakeServer::Reply(200, {}, R"(<ListBucketResult><IsTruncated>true</IsTruncated>
    <NextContinuationToken>same</NextContinuationToken></ListBucketResult>)"));
  igt::ListRequest again;
  again.continuation_token = "same";
  auto loop = (*b)->List(again);
  REQUIRE(!loop);
  CHECK(loop.error().code() == Code::kCorruption);
  CHECK_THAT(loop.error().message(), Catch::Contains("continuation token"));

  s.Push(FakeServer::Reply(200, {}, "<ListBucketResult><Contents>"));  // malformed, then fixed
  s.Push(FakeServer::Reply(200, {}, "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>"));
  p = (*b)->List({});
  REQUIRE(p);
  CHECK(p->objects.empty());
  CHECK(p->next_token.empty());

  // A listing's bare 404 is no S3 server's answer (S3 says NoSuchBucket).
  s.Push("HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 9\r\n\r\nnot found");
  p = (*b)->List({});
  REQUIRE(!p);
  CHECK(p.error().code() == Code::kIoError);
  CHECK_THAT(p.error().message(), Catch::Contains("is it an S3 endpoint"));
  s.Push(FakeServer::Reply(404, {}, "<Error><Code>NoSuchBucket</Code><Message>no</Message></Error>"));
  p = (*b)->List({});
  REQUIRE(!p);
  CHECK(p.error().code() == Code::kNotFound);
  CHECK_THAT(p.error().message(), Catch::Contains("does not exist"));
}

// A read of `n` bytes from a server that sends `sent` (the head and the
// start of the body), then nothing: request_timeout_ms 1 s, no retry.
struct StalledRead {
  FakeServer s;
  igt::Metrics m;
  igt::Result<size_t> got = 0;
  StalledRead(const std::string& sent, size_t n) {
    auto o = Opts(s, &m);
    o.request_timeout_ms = 1000;
    o.max_retries = 0;
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    s.Push("STALL:" + sent);
    std::vector<char> buf(n);
    got = (*b)->Read("k", 0, n, "", buf.data());
  }
};

TEST_CASE("S3 fake: a stalled transfer fails instead of hanging", "[s3fake]") {
  StalledRead r("HTTP/1.1 206 X\r\nContent-Range: bytes 0-9/10\r\nContent-Length: 10\r\n\r\n01234", 10);
  REQUIRE(!r.got);
  CHECK(r.got.error().code() == Code::kUnavailable);
  CHECK_THAT(r.got.error().message(), Catch::Contains(r.s.endpoint()));
  CHECK(r.m.backend_errors == 1);
}

TEST_CASE("S3 fake: a transfer that stops dead after a fast start is aborted as stalled", "[s3fake]") {
  // libcurl's low-speed check averages over its last seconds: 256 KB at
  // once kept that average above 1 KiB/s for seconds after the body stopped
  // (a tester: 8.5-9 s to abort with request_timeout_ms 2000). The abort is
  // now igtcache's own check, which names the stall.
  const size_t n = 1 << 20, sent = 256 << 10;
  StalledRead r("HTTP/1.1 206 X\r\nContent-Range: bytes 0-" + std::to_string(n - 1) + "/" + std::to_string(n) +
                    "\r\nContent-Length: " + std::to_string(n) + "\r\n\r\n" + std::string(sent, 'x'),
                n);
  REQUIRE(!r.got);
  CHECK(r.got.error().code() == Code::kUnavailable);
  CHECK_THAT(r.got.error().message(), Catch::Contains("stalled"));
  CHECK(r.m.backend_errors == 1);
}

TEST_CASE("S3 fake: Cancel ends a stalled transfer and the wait between retries", "[s3fake]") {
  // The unmount case: without Cancel each read below would wait a minute
  // (the stall limit, the backoff); the message shows which path ended it.
  // One server, backend and reader per case: the server answers one
  // connection at a time.
  for (const bool stall : {true, false}) {
    FakeServer s;
    igt::Metrics m;
    auto o = Opts(s, &m);
    o.request_timeout_ms = 60000;
    o.retry_base_ms = 60000;
    o.retry_deadline_ms = 600000;
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    if (stall)
      s.Push("STALL:HTTP/1.1 206 X\r\nContent-Range: bytes 0-9/10\r\nContent-Length: 10\r\n\r\n01234");
    else
      s.Push(FakeServer::Reply(503, {}, "<Error><Code>SlowDown</Code></Error>"));
    char buf[10];
    igt::Result<size_t> got = 0;
    std::thread reader([&] { got = (*b)->Read("k", 0, 10, "", buf); });
    // Then the reader is stalled, or sleeps before its first retry.
    while (s.requests().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*b)->Cancel();
    reader.join();
    INFO((stall ? "stalled transfer" : "wait between retries"));
    REQUIRE(!got);
    CHECK(got.error().code() == Code::kUnavailable);
    CHECK_THAT(got.error().message(), Catch::Contains("the mount is shutting down"));
    // Later calls fail at once, without a request. (The backoff is random:
    // the 503 case may have retried before the Cancel.)
    const size_t before = s.requests().size();
    auto later = (*b)->Stat("k2");
    REQUIRE(!later);
    CHECK_THAT(later.error().message(), Catch::Contains("the mount is shutting down"));
    CHECK(s.requests().size() == before);
    CHECK(m.backend_errors == 0);  // shutting down is not a backend failure
  }
}

TEST_CASE("S3 fake: a slow transfer that makes progress is not cut off", "[s3fake]") {
  // 700 KB at 100 KB/s: 3.5 times request_timeout_ms, never stalled. Before,
  // request_timeout_ms capped the whole transfer: every attempt was aborted.
  // (The stall limit is request_timeout_ms too: 2 s, so that a server thread
  // descheduled for a second on a loaded machine is not taken for a stall.)
  FakeServer s;
  igt::Metrics m;
  auto o = Opts(s, &m);
  o.request_timeout_ms = 2000;
  o.max_retries = 0;
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  const size_t n = 700'000;
  std::string body(n, 'x');
  for (size_t i = 0; i < n; ++i) body[i] = static_cast<char>('a' + i % 26);
  s.Push("SLOW:" + FakeServer::Reply(206, {"ETag: \"e1\"", "Content-Range: bytes 0-" + std::to_string(n - 1) + "/" +
                                           std::to_string(n)}, body));
  std::vector<char> buf(n);
  auto got = (*b)->Read("k", 0, n, "e1", buf.data());
  REQUIRE(got);
  CHECK(*got == n);
  CHECK(std::string(buf.data(), n) == body);
}

TEST_CASE("S3 fake: an S3 error document with status 200 is retried, never data", "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto b = igt::MakeS3Backend(Opts(s, &m));
  REQUIRE(b);
  const std::string err = "<?xml version=\"1.0\"?><Error><Code>InternalError</Code></Error>";
  // Shorter and longer than the range asked for: both must be retried.
  s.Push(FakeServer::Reply(200, {"Content-Type: application/xml", "ETag: \"e1\""}, err.substr(0, 40) + "</Error>"));
  s.Push(FakeServer::Reply(200, {"Content-Type: application/xml", "ETag: \"e1\""}, err));
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  char buf[10];
  auto n = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(n);
  CHECK(*n == 10);
  CHECK(std::string(buf, 10) == kTen);
  CHECK(m.backend_retries == 2);
}

TEST_CASE("S3 fake: expired credentials are read again once, and used if they changed", "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto o = Opts(s, &m);
  int reads = 0;
  igt::Credentials next = {"AKIDNEW", "secret-new", "token-new", 0, ""};
  o.refresh_credentials = [&]() -> igt::Result<igt::Credentials> {
    ++reads;
    return next;
  };
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  char buf[10];
  const std::string expired = "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>";

  // Refused, read again, retried with the new ones: the read succeeds.
  s.Push(FakeServer::Reply(400, {}, expired));
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  auto n = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(n);
  CHECK(*n == 10);
  CHECK(reads == 1);
  auto reqs = s.requests();
  REQUIRE(reqs.size() == 2);
  CHECK_THAT(Head(reqs[0], "authorization"), Catch::Contains("Credential=AKIDTEST/"));
  CHECK_THAT(Head(reqs[1], "authorization"), Catch::Contains("Credential=AKIDNEW/"));
  CHECK(Head(reqs[1], "x-amz-security-token") == "token-new");
  CHECK(m.backend_retries == 0);

  // Refused again, and reading them again gives the same ones: a clear
  // error, one request, no loop.
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>InvalidAccessKeyId</Code><Message>no such key</Message></Error>"));
  auto same = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!same);
  CHECK(same.error().code() == Code::kPermissionDenied);
  CHECK_THAT(same.error().message(), Catch::Contains("the access key is not known there"));
  CHECK_THAT(same.error().message(), !Catch::Contains("secret-new"));
  CHECK(reads == 2);
  CHECK(s.requests().size() == 3);
  // Refused again within 5 s of the provider giving the same keys: it is not
  // asked once per refused request (a burst of refusals was a burst of STS
  // or instance metadata calls).
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>InvalidAccessKeyId</Code><Message>no such key</Message></Error>"));
  CHECK((*b)->Read("k", 0, 10, "e1", buf).error().code() == Code::kPermissionDenied);
  CHECK(reads == 2);

  // Reading them fails: the refusal is the error.
  o.refresh_credentials = [&]() -> igt::Result<igt::Credentials> {
    ++reads;
    return igt::Err(igt::Status::NotFound("no AWS credentials: gone"));
  };
  auto b2 = igt::MakeS3Backend(o);
  REQUIRE(b2);
  s.Push(FakeServer::Reply(400, {}, expired));
  auto fail = (*b2)->Read("k", 0, 10, "e1", buf);
  REQUIRE(!fail);
  CHECK(fail.error().code() == Code::kPermissionDenied);
  CHECK(reads == 3);

  // Other 4xx never read the credentials again.
  s.Push(FakeServer::Reply(403, {}, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"));
  CHECK((*b)->Read("k", 0, 10, "e1", buf).error().code() == Code::kPermissionDenied);
  CHECK(reads == 3);

  // A HEAD's 403 has no body to say why: the credentials are read again too.
  next = {"AKIDTHIRD", "secret-third", "", 0, ""};
  o.refresh_credentials = [&]() -> igt::Result<igt::Credentials> {
    ++reads;
    return next;
  };
  auto b3 = igt::MakeS3Backend(o);
  REQUIRE(b3);
  s.Push("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  s.Push("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\nETag: \"e1\"\r\n\r\n");
  auto st = (*b3)->Stat("k");
  REQUIRE(st);
  CHECK(st->size == 10);
  CHECK(reads == 4);
  CHECK_THAT(Head(s.requests().back(), "authorization"), Catch::Contains("Credential=AKIDTHIRD/"));
}

// Polls `done` for up to 30 s (the renewer runs on a thread of its own).
template <class F>
bool Eventually(F&& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST_CASE("S3 fake: temporary credentials are renewed before they expire, in the background", "[s3fake]") {
  // Instance metadata, container and web identity credentials carry their
  // expiry: within 5 minutes of it a thread of the backend renews them; a
  // renewal that fails or gives the same ones is tried again 10 s later
  // (the old ones still sign meanwhile). No request waits for the provider.
  FakeServer s;
  igt::Metrics m;
  auto o = Opts(s, &m);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  o.credentials = {"AKIDOLD", "secret-old", "token-old", now + 120, "test provider"};
  std::atomic<int> reads{0};
  std::mutex next_mu;
  igt::Result<igt::Credentials> next = igt::Credentials{"AKIDRENEWED", "secret-renewed", "token-renewed", now + 3600,
                                                        "test provider"};
  o.refresh_credentials = [&]() -> igt::Result<igt::Credentials> {
    std::lock_guard lk(next_mu);
    ++reads;
    return next;
  };
  char buf[10];
  SECTION("renewed once, and the new ones sign") {
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    // The expiry in use is a metric (stats, /metrics): the old ones', then
    // the renewed ones'.
    CHECK((m.credentials_expiry_unix_s.load() == uint64_t(now + 120) ||
           m.credentials_expiry_unix_s.load() == uint64_t(now + 3600)));
    // Reads go on, signed with the old ones until the renewer has stored
    // the new ones.
    const auto renewed_signs = [&] {
      s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
      return (*b)->Read("k", 0, 10, "e1", buf) &&
             Head(s.requests().back(), "authorization").find("Credential=AKIDRENEWED/") != std::string::npos;
    };
    REQUIRE(Eventually(renewed_signs));
    CHECK(renewed_signs());
    CHECK(reads == 1);  // renewed once: the new ones expire in an hour
    CHECK(m.credentials_expiry_unix_s.load() == uint64_t(now + 3600));
    CHECK(m.credentials_renew_failures.load() == 0);
    const std::string last = s.requests().back();
    CHECK(Head(last, "x-amz-security-token") == "token-renewed");
  }
  SECTION("credentials far from their expiry are not renewed") {
    o.credentials.expires_unix_s = now + 3600;
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
    REQUIRE((*b)->Read("k", 0, 10, "e1", buf));
    CHECK(reads == 0);
    CHECK(m.credentials_expiry_unix_s.load() == uint64_t(now + 3600));  // set at the start
    CHECK_THAT(Head(s.requests().back(), "authorization"), Catch::Contains("Credential=AKIDOLD/"));
  }
  SECTION("a renewal that fails: the old ones go on signing") {
    next = igt::Err(igt::Status::Unavailable("instance metadata at http://x: timed out"));
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    REQUIRE(Eventually([&] { return reads.load() >= 1; }));
    REQUIRE(Eventually([&] { return m.credentials_renew_failures.load() >= 1; }));  // counted, after the call
    CHECK(m.credentials_renew_failures.load() == uint64_t(reads.load()));  // once a failed call
    CHECK(m.credentials_expiry_unix_s.load() == uint64_t(now + 120));  // the old ones still
    for (int i = 0; i < 3; ++i) {
      s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
      REQUIRE((*b)->Read("k", 0, 10, "e1", buf));
      CHECK_THAT(Head(s.requests().back(), "authorization"), Catch::Contains("Credential=AKIDOLD/"));
    }
  }
  SECTION("a provider that hangs holds up no request") {
    // Before 2026-11-28 the request that found the credentials expiring
    // called the provider itself: it waited for as long as the provider
    // took (here until the release below, signed with the new ones).
    std::atomic<bool> entered{false}, released{false};
    o.refresh_credentials = [&]() -> igt::Result<igt::Credentials> {
      entered = true;
      // Bounded: a failing check below must not leave the destructor
      // joining a renewer that waits for ever. Long: the reads below must
      // not outlast it on a loaded machine (they would be signed with the
      // new keys and fail the test wrongly).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(300);
      while (!released && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ++reads;
      return igt::Credentials{"AKIDRENEWED", "secret-renewed", "token-renewed", now + 3600, "test provider"};
    };
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    REQUIRE(Eventually([&] { return entered.load(); }));
    for (int i = 0; i < 3; ++i) {
      s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
      REQUIRE((*b)->Read("k", 0, 10, "e1", buf));
      CHECK_THAT(Head(s.requests().back(), "authorization"), Catch::Contains("Credential=AKIDOLD/"));
    }
    CHECK(reads == 0);
    released = true;
    REQUIRE(Eventually([&] { return reads.load() == 1; }));
    // The destructor joins the renewer, which has returned by now.
  }
}

TEST_CASE("S3 fake: after a whole retry budget without an answer requests get one attempt until one is answered",
          "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto b = igt::MakeS3Backend(Opts(s, &m));  // max_retries 3
  REQUIRE(b);
  char buf[10];
  auto no_answer = [&](int n) {
    for (int i = 0; i < n; ++i) s.Push("");  // the connection closes with no reply
  };
  no_answer(4);
  auto r = (*b)->Read("k", 0, 10, "", buf);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kUnavailable);
  CHECK(m.backend_retries == 3);
  CHECK(m.backend_outage == 1);
  CHECK(s.requests().size() == 4);

  // Outage mode: one attempt per request, whatever the request.
  no_answer(2);
  CHECK(!(*b)->Read("k", 0, 10, "", buf));
  CHECK(!(*b)->List(igt::ListRequest{}));
  CHECK(m.backend_retries == 3);
  CHECK(s.requests().size() == 6);

  // An answer ends it, even an error (the source is there): a 404 here.
  s.Push(FakeServer::Reply(404, {}, "<Error><Code>NoSuchKey</Code><Message>no</Message></Error>"));
  auto st = (*b)->Stat("gone");
  REQUIRE(!st);
  CHECK(st.error().code() == Code::kNotFound);
  CHECK(m.backend_outage == 0);
  no_answer(1);
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  auto ok = (*b)->Read("k", 0, 10, "e1", buf);  // the whole budget again: one retry, then data
  REQUIRE(ok);
  CHECK(*ok == 10);
  CHECK(m.backend_retries == 4);

  // A budget in which the source answered once (a 503) is no outage.
  s.Push(FakeServer::Reply(503, {}, "<Error><Code>SlowDown</Code><Message>slow</Message></Error>"));
  no_answer(3);
  CHECK(!(*b)->Read("k", 0, 10, "e1", buf));
  CHECK(m.backend_outage == 0);
  CHECK(m.backend_retries == 7);

  // The call whose attempt ends outage mode gets the whole budget: a 503
  // answer, then data.
  no_answer(4);
  CHECK(!(*b)->Read("k", 0, 10, "e1", buf));
  CHECK(m.backend_outage == 1);
  s.Push(FakeServer::Reply(503, {}, "<Error><Code>SlowDown</Code><Message>slow</Message></Error>"));
  s.Push(FakeServer::Reply(206, kOkHeaders, kTen));
  auto back = (*b)->Read("k", 0, 10, "e1", buf);
  REQUIRE(back);
  CHECK(m.backend_outage == 0);
}

TEST_CASE("S3 fake: a mount on a source that did not answer starts in outage mode with short attempts",
          "[s3fake]") {
  FakeServer s;
  igt::Metrics m;
  auto o = Opts(s, &m);
  o.request_timeout_ms = 120000;  // a stalled attempt would wait this long, but for outage mode
  auto b = igt::MakeS3Backend(o);
  REQUIRE(b);
  (*b)->NoteUnreachable();
  CHECK(m.backend_outage == 1);
  s.Push("STALL:HTTP/1.1 206 X\r\nContent-Range: bytes 0-9/10\r\nContent-Length: 10\r\n\r\n01234");
  char buf[10];
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*b)->Read("k", 0, 10, "", buf);
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kUnavailable);
  CHECK(s.requests().size() == 1);
  CHECK(m.backend_retries == 0);
  // Cut off after kQuickProbeMs without progress, not request_timeout_ms
  // (a bound far above the 5 s, not a timing measurement).
  CHECK(waited < std::chrono::seconds(60));
  // A listing stalled in outage mode is cut off too, as a stall (before, it
  // waited out request_timeout_ms: 30 s per lookup of a directory never
  // listed, a tester's finding).
  s.Push("STALL:HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: 4000\r\n\r\n<?xml");
  const auto t1 = std::chrono::steady_clock::now();
  auto l = (*b)->List({});
  const auto list_waited = std::chrono::steady_clock::now() - t1;
  REQUIRE(!l);
  CHECK(l.error().code() == Code::kUnavailable);
  CHECK_THAT(l.error().message(), Catch::Contains("stalled"));
  CHECK(list_waited < std::chrono::seconds(60));
  // The full Probe (a mount with nothing saved) keeps the whole budget.
  for (int i = 0; i < 4; ++i) s.Push("");
  CHECK(!(*b)->Probe().ok());
  CHECK(m.backend_retries == 3);
}

TEST_CASE("S3 fake: the bucket's region is asked with one unsigned HEAD", "[s3fake]") {
  FakeServer s;
  auto o = Opts(s, nullptr);
  // AWS answers another region's bucket 301, with the region in a header.
  s.Push(FakeServer::Reply(301, {"x-amz-bucket-region: eu-west-1"}, ""));
  CHECK(igt::DiscoverBucketRegion(o, 2000) == "eu-west-1");
  REQUIRE(s.requests().size() == 1);
  CHECK(s.requests()[0].starts_with("HEAD /bkt HTTP/1.1"));
  CHECK(Head(s.requests()[0], "authorization").empty());
  // A store that does not say, or says something that is no region: "".
  s.Push(FakeServer::Reply(200, {}, ""));
  CHECK(igt::DiscoverBucketRegion(o, 2000).empty());
  s.Push(FakeServer::Reply(403, {"x-amz-bucket-region: ../evil"}, ""));
  CHECK(igt::DiscoverBucketRegion(o, 2000).empty());
  // Nothing listening: "", within the time given.
  o.endpoint = "http://127.0.0.1:1";
  CHECK(igt::DiscoverBucketRegion(o, 500).empty());
}

TEST_CASE("S3 fake: a server without ListObjectsV2 fails a listing at once, saying so", "[s3fake]") {
  FakeServer s;
  auto b = igt::MakeS3Backend(Opts(s, nullptr));
  REQUIRE(b);
  // A version 1 page: truncated, NextMarker, no continuation token. Before,
  // retried for the whole budget with the same reply each time.
  for (int i = 0; i < 4; ++i)
    s.Push(FakeServer::Reply(200, {}, "<ListBucketResult><NextMarker>pre/k1</NextMarker><IsTruncated>true"
                                      "</IsTruncated><Contents><Key>pre/k1</Key><Size>1</Size></Contents>"
                                      "</ListBucketResult>"));
  auto p = (*b)->List(igt::ListRequest{.prefix = "", .delimiter = "/", .continuation_token = {}, .max_keys = 1000});
  REQUIRE(!p);
  CHECK(p.error().code() == Code::kNotSupported);
  CHECK_THAT(p.error().message(), Catch::Contains("ListObjectsV2"));
  CHECK(s.requests().size() == 1);
}
