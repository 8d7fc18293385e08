// SigV4 against AWS's published examples: the S3 "Signature Calculations for
// the Authorization Header" examples (examplebucket, 20130524) and the
// generic SigV4 test suite (get-vanilla*, 20150830).

#include <catch2/catch.hpp>

#include "backends/s3/sigv4.h"

using namespace igt::s3;

namespace {

const igt::Credentials kS3Creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", 0, ""};
const igt::Credentials kSuiteCreds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "", 0, ""};

SignInput S3Example() {
  SignInput in;
  in.host = "examplebucket.s3.amazonaws.com";
  in.amz_date = "20130524T000000Z";
  in.region = "us-east-1";
  in.service = "s3";
  return in;
}

std::string Header(const HeaderList& h, const std::string& name) {
  for (const auto& [n, v] : h)
    if (n == name) return v;
  return "";
}

}  // namespace

TEST_CASE("SigV4: S3 GET Object example with Range", "[sigv4]") {
  SignInput in = S3Example();
  in.path = "/test.txt";
  in.headers = {{"Range", "bytes=0-9"}};
  CHECK(CanonicalRequest(in, kS3Creds) ==
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex(CanonicalRequest(in, kS3Creds)) ==
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  HeaderList h = SignRequest(in, kS3Creds);
  CHECK(Header(h, "Authorization") ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(Header(h, "x-amz-date") == "20130524T000000Z");
  CHECK(Header(h, "x-amz-content-sha256") == kEmptySha256);
  CHECK(Header(h, "Range") == "bytes=0-9");
  CHECK(Header(h, "x-amz-security-token").empty());
}

TEST_CASE("SigV4: S3 list objects example (query sorted and encoded)", "[sigv4]") {
  SignInput in = S3Example();
  in.path = "/";
  in.query = {{"prefix", "J"}, {"max-keys", "2"}};  // deliberately unsorted
  CHECK(Signature(in, kS3Creds) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST_CASE("SigV4: S3 GET bucket lifecycle example (empty-valued parameter)", "[sigv4]") {
  SignInput in = S3Example();
  in.path = "/";
  in.query = {{"lifecycle", ""}};
  CHECK(Signature(in, kS3Creds) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST_CASE("SigV4: test suite get-vanilla and get-vanilla-query-order-key-case", "[sigv4]") {
  SignInput in;
  in.host = "example.amazonaws.com";
  in.path = "/";
  in.amz_date = "20150830T123600Z";
  in.region = "us-east-1";
  in.service = "service";
  in.add_content_sha256 = false;
  CHECK(Signature(in, kSuiteCreds) == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  in.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  CHECK(CanonicalRequest(in, kSuiteCreds).starts_with("GET\n/\nParam1=value1&Param2=value2\n"));
  CHECK(Signature(in, kSuiteCreds) == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST_CASE("SigV4: session token is sent and signed", "[sigv4]") {
  SignInput in = S3Example();
  in.path = "/test.txt";
  igt::Credentials c = kS3Creds;
  c.session_token = "FQoGZXIvYXdzEXAMPLE";
  HeaderList h = SignRequest(in, c);
  CHECK(Header(h, "x-amz-security-token") == "FQoGZXIvYXdzEXAMPLE");
  CHECK_THAT(Header(h, "Authorization"), Catch::Contains("x-amz-security-token"));
  CHECK_THAT(Header(h, "Authorization"), !Catch::Contains(c.secret_key));
  CHECK(Signature(in, c) != Signature(in, kS3Creds));
}

TEST_CASE("SigV4: URI encoding", "[sigv4]") {
  CHECK(UriEncode("a b/c+d~e_f-g.h", true) == "a%20b/c%2Bd~e_f-g.h");
  CHECK(UriEncode("a b/c", false) == "a%20b%2Fc");
  CHECK(UriEncode("\xc3\xa9*=&", false) == "%C3%A9%2A%3D%26");
  CHECK(CanonicalQuery({{"b", "x y"}, {"a", ""}, {"continuation-token", "1/2+3="}}) ==
        "a=&b=x%20y&continuation-token=1%2F2%2B3%3D");
  SignInput in = S3Example();
  in.path = "/dir/a b+c.txt";
  CHECK(CanonicalRequest(in, kS3Creds).starts_with("GET\n/dir/a%20b%2Bc.txt\n\n"));
}

TEST_CASE("SigV4: amz date formatting", "[sigv4]") {
  auto t = std::chrono::system_clock::from_time_t(1369353600);  // 2013-05-24 00:00:00 UTC
  CHECK(FormatAmzDate(t) == "20130524T000000Z");
}
