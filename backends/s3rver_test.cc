// The S3 backend against a real s3rver (npm) on 127.0.0.1: listing
// pagination, Stat, ranged reads at EOF, ETag changes, NotFound, no such
// bucket and an unreachable endpoint. Skipped with a warning if node or
// s3rver is missing. s3rver does not check signatures; we sign anyway.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "backends/s3/http_pool.h"
#include "backends/s3/sigv4.h"
#include "igtcache/backends.h"
#include "igtcache/metrics.h"

namespace fs = std::filesystem;
using igt::Code;

namespace {

const fs::path kS3rverJs =
    fs::path(__FILE__).parent_path().parent_path() / ".deps/s3rver/node_modules/s3rver/bin/s3rver.js";

std::string FindNode() {
  for (const char* p : {"/usr/bin/node", "/usr/local/bin/node"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// A loopback port held bound (not listening) for its lifetime: connecting
// to it is refused, and no other process can take it meanwhile (a port
// probed free and closed again could be bound by a test running beside).
class DeadPort {
 public:
  DeadPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~DeadPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  DeadPort(const DeadPort&) = delete;
  DeadPort& operator=(const DeadPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

bool CanConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// One s3rver process with bucket "testbucket"; killed by pid on destruction.
class S3rver {
 public:
  bool Start() {
    node_ = FindNode();
    if (node_.empty() || !fs::exists(kS3rverJs)) return false;
    char tmpl[] = "/tmp/igt-s3rver-XXXXXX";
    if (!::mkdtemp(tmpl)) return false;
    dir_ = tmpl;
    std::string data = (dir_ / "data").string(), log = (dir_ / "log").string(), js = kS3rverJs.string();
    fs::create_directories(data);
    // Port 0: the kernel picks a free one, which s3rver prints once it
    // listens (a port probed free here could be taken before node binds it).
    std::vector<std::string> args = {node_, "--openssl-legacy-provider", js, "-d", data, "-a",
                                     "127.0.0.1", "-p", "0", "--silent", "--configure-bucket", "testbucket"};
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      // The server dies with the test process, even if the test crashes.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Wait until it says where it listens and accepts connections (a
    // start-up bound, not a timing assumption).
    for (int i = 0; i < 1200; ++i) {  // 60 s: node starts slowly on a loaded machine
      if (port_ == 0) port_ = ListeningPort(log);
      if (port_ != 0 && CanConnect(port_)) return true;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The port of "S3rver listening on 127.0.0.1:PORT" in its log, 0 if not
  // there yet.
  static int ListeningPort(const std::string& log) {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string tag = "S3rver listening on 127.0.0.1:";
    const size_t p = text.find(tag);
    // Only a whole line: a port read while node is still writing it is cut.
    if (p == std::string::npos || text.find('\n', p) == std::string::npos) return 0;
    return std::atoi(text.c_str() + p + tag.size());
  }

  ~S3rver() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status;
      for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (::waitpid(pid_, &status, WNOHANG) == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Plain (signed) HTTP PUT of an object into testbucket.
  void Put(const std::string& key, const std::string& bytes) {
    igt::s3::HttpPool pool({});
    igt::s3::SignInput in;
    in.method = "PUT";
    in.host = "127.0.0.1:" + std::to_string(port_);
    in.path = "/testbucket/" + key;
    in.payload_hash = igt::s3::Sha256Hex(bytes);
    in.amz_date = igt::s3::FormatAmzDate(std::chrono::system_clock::now());
    igt::s3::HttpRequest req;
    req.method = "PUT";
    req.url = endpoint() + igt::s3::UriEncode(in.path, true);
    req.headers = igt::s3::SignRequest(in, {"S3RVER", "S3RVER", "", 0, ""});
    req.upload = bytes;
    auto r = pool.Perform(req);
    REQUIRE(r.curl_code == 0);
    REQUIRE(r.status == 200);
  }

 private:
  std::string node_;
  fs::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

igt::S3Options Opts(const std::string& endpoint, const std::string& prefix = "") {
  igt::S3Options o;
  o.bucket = "testbucket";
  o.prefix = prefix;
  o.endpoint = endpoint;
  o.credentials = {"S3RVER", "S3RVER", "", 0, ""};
  o.connect_timeout_ms = 2000;
  o.request_timeout_ms = 10000;
  o.max_retries = 2;
  o.retry_base_ms = 10;
  o.retry_deadline_ms = 5000;
  o.max_connections = 4;
  return o;
}

std::vector<std::string> ListAll(igt::Backend& b, igt::ListRequest req, int* pages) {
  std::vector<std::string> all;
  *pages = 0;
  for (;;) {
    auto p = b.List(req);
    REQUIRE(p);
    ++*pages;
    // Real S3 counts objects + prefixes against max-keys; s3rver 3.7 counts
    // only objects, so the page bound is checked on objects alone.
    REQUIRE(p->objects.size() <= static_cast<size_t>(req.max_keys));
    for (auto& o : p->objects) all.push_back(o.key);
    for (auto& x : p->prefixes) all.push_back(x);
    if (p->next_token.empty()) break;
    req.continuation_token = p->next_token;
    REQUIRE(*pages < 100);
  }
  std::sort(all.begin(), all.end());
  return all;
}

// One server for the whole binary (Catch2 re-runs a test case per SECTION);
// it is killed by pid at exit, and by PDEATHSIG if the binary dies.
S3rver* SharedServer() {
  static std::unique_ptr<S3rver> server = [] {
    auto s = std::make_unique<S3rver>();
    if (!s->Start()) return std::unique_ptr<S3rver>();
    return s;
  }();
  return server.get();
}

const std::string kBig(100000, 'b');

}  // namespace

TEST_CASE("S3 backend against s3rver", "[s3rver]") {
  S3rver* srv = SharedServer();
  if (!srv) {
    WARN("s3rver or node not available (" << kS3rverJs.string() << "): S3 integration test skipped");
    return;
  }
  S3rver& server = *srv;
  static bool seeded = false;
  if (!seeded) {
    server.Put("data/a.txt", "hello world");
    server.Put("data/b.bin", kBig);
    server.Put("data/sub/c.txt", "c");
    server.Put("data/sub/d.txt", "dd");
    server.Put("data/e f+g.txt", "spaces and plus");
    server.Put("data/mut.txt", "version one");
    server.Put("other/x", "x");
    seeded = true;
  }
  const std::string& big = kBig;

  auto made = igt::MakeS3Backend(Opts(server.endpoint(), "data"));
  REQUIRE(made);
  igt::Backend& b = **made;
  CHECK(b.Describe() == "s3://testbucket/data/ (" + server.endpoint() + ")");
  CHECK(b.Probe().ok());

  SECTION("list with delimiter, paginated by 2") {
    igt::ListRequest req;
    req.max_keys = 2;
    int pages = 0;
    auto all = ListAll(b, req, &pages);
    CHECK(all == std::vector<std::string>{"a.txt", "b.bin", "e f+g.txt", "mut.txt", "sub/"});
    CHECK(pages >= 2);
    auto p = b.List({});
    REQUIRE(p);
    REQUIRE(p->objects.size() == 4);
    CHECK(p->objects[0].key == "a.txt");
    CHECK(p->objects[0].size == 11);
    CHECK(p->objects[0].etag == "5eb63bbbe01eeed093cb22bb8f5acdc3");  // md5("hello world")
    CHECK(p->objects[0].mtime_ns > 0);
    CHECK(p->prefixes == std::vector<std::string>{"sub/"});
  }
  SECTION("recursive and sub-prefix listing") {
    igt::ListRequest req;
    req.delimiter = "";
    req.max_keys = 2;
    int pages = 0;
    CHECK(ListAll(b, req, &pages) ==
          std::vector<std::string>{"a.txt", "b.bin", "e f+g.txt", "mut.txt", "sub/c.txt", "sub/d.txt"});
    req.prefix = "sub/";
    req.delimiter = "/";
    CHECK(ListAll(b, req, &pages) == std::vector<std::string>{"sub/c.txt", "sub/d.txt"});
    req.prefix = "nothing/";
    CHECK(ListAll(b, req, &pages).empty());
  }
  SECTION("stat") {
    auto s = b.Stat("a.txt");
    REQUIRE(s);
    CHECK(s->key == "a.txt");
    CHECK(s->size == 11);
    CHECK(s->etag == "5eb63bbbe01eeed093cb22bb8f5acdc3");
    CHECK(s->mtime_ns > 0);
    CHECK(b.Stat("e f+g.txt")->size == 15);
    auto missing = b.Stat("nope.txt");
    REQUIRE(!missing);
    CHECK(missing.error().code() == Code::kNotFound);
    CHECK(b.Stat("sub").error().code() == Code::kNotFound);
  }
  SECTION("ranged reads, EOF and ETag checks") {
    auto s = b.Stat("b.bin");
    REQUIRE(s);
    std::vector<char> buf(200000);
    auto n = b.Read("b.bin", 1000, 4096, s->etag, buf.data());
    REQUIRE(n);
    CHECK(*n == 4096);
    n = b.Read("b.bin", 99000, 4096, s->etag, buf.data());  // clamped at EOF
    REQUIRE(n);
    CHECK(*n == 1000);
    n = b.Read("b.bin", 0, 200000, "", buf.data());  // whole object, larger buffer
    REQUIRE(n);
    CHECK(*n == 100000);
    CHECK(std::string(buf.data(), *n) == big);
    n = b.Read("b.bin", 100000, 10, s->etag, buf.data());  // exactly at EOF (416)
    REQUIRE(n);
    CHECK(*n == 0);
    n = b.Read("b.bin", 500000, 10, "", buf.data());  // past EOF
    REQUIRE(n);
    CHECK(*n == 0);
    n = b.Read("a.txt", 6, 5, "", buf.data());
    REQUIRE(n);
    CHECK(std::string(buf.data(), *n) == "world");
    n = b.Read("e f+g.txt", 0, 6, "", buf.data());
    REQUIRE(n);
    CHECK(std::string(buf.data(), *n) == "spaces");

    auto changed = b.Read("b.bin", 0, 10, "0123456789abcdef", buf.data());
    REQUIRE(!changed);
    CHECK(changed.error().code() == Code::kChanged);
    changed = b.Read("b.bin", 100000, 10, "0123456789abcdef", buf.data());  // at EOF too
    REQUIRE(!changed);
    CHECK(changed.error().code() == Code::kChanged);

    auto before = b.Stat("mut.txt");
    REQUIRE(before);
    server.Put("data/mut.txt", "version two");
    auto stale = b.Read("mut.txt", 0, 5, before->etag, buf.data());
    REQUIRE(!stale);
    CHECK(stale.error().code() == Code::kChanged);

    auto missing = b.Read("nope.txt", 0, 10, "", buf.data());
    REQUIRE(!missing);
    CHECK(missing.error().code() == Code::kNotFound);
  }
  SECTION("concurrent reads share a small pool") {
    std::atomic<int> good{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        std::vector<char> buf(1000);
        for (int i = 0; i < 10; ++i) {
          auto n = b.Read("b.bin", static_cast<uint64_t>((t * 10 + i) * 1000), 1000, "", buf.data());
          if (n && *n == 1000 && buf[0] == 'b') ++good;
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(good == 80);
  }
}

TEST_CASE("HttpPool reuses keep-alive connections", "[s3rver]") {
  S3rver* srv = SharedServer();
  if (!srv) {
    WARN("s3rver or node not available (" << kS3rverJs.string() << "): S3 integration test skipped");
    return;
  }
  igt::s3::HttpPoolOptions po;
  po.max_connections = 1;
  igt::s3::HttpPool pool(po);
  igt::s3::HttpRequest req;
  req.url = srv->endpoint() + "/testbucket?list-type=2&max-keys=1";
  auto first = pool.Perform(req);
  REQUIRE(first.curl_code == 0);
  CHECK(first.status == 200);
  CHECK(first.new_connections == 1);
  // The next request reuses that connection. node closes one idle for 5 s,
  // so a test thread stalled that long sees a new one: a few tries.
  uint64_t reused = 0;
  for (int i = 0; i < 5 && reused == 0; ++i) {
    auto next = pool.Perform(req);
    REQUIRE(next.curl_code == 0);
    CHECK(next.status == 200);
    if (next.new_connections == 0) ++reused;
  }
  CHECK(reused == 1);
}

TEST_CASE("S3 backend errors: no such bucket, unreachable endpoint", "[s3rver]") {
  S3rver* srv = SharedServer();
  if (!srv) {
    WARN("s3rver or node not available (" << kS3rverJs.string() << "): S3 integration test skipped");
    return;
  }
  igt::Metrics metrics;
  SECTION("no such bucket") {
    auto o = Opts(srv->endpoint());
    o.bucket = "nosuchbucket";
    o.metrics = &metrics;
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    igt::Status s = (*b)->Probe();
    CHECK(s.code() == Code::kNotFound);
    CHECK_THAT(s.message(), Catch::Contains("nosuchbucket"));
    CHECK_THAT(s.message(), Catch::Contains("does not exist"));
    CHECK(metrics.backend_retries.load() == 0);  // 4xx are not retried
    auto l = (*b)->List({});
    REQUIRE(!l);
    CHECK(l.error().code() == Code::kNotFound);
  }
  SECTION("unreachable endpoint -> Unavailable, after bounded retries") {
    DeadPort dead;  // nothing listens here
    const int dead_port = dead.port();
    REQUIRE(dead_port != 0);
    auto o = Opts("http://127.0.0.1:" + std::to_string(dead_port));
    o.connect_timeout_ms = 500;
    o.max_retries = 2;
    o.retry_base_ms = 1;
    o.metrics = &metrics;
    auto b = igt::MakeS3Backend(o);
    REQUIRE(b);
    igt::Status s = (*b)->Probe();
    CHECK(s.code() == Code::kUnavailable);
    CHECK_THAT(s.message(), Catch::Contains(std::to_string(dead_port)));
    CHECK(metrics.backend_retries.load() == 2);
    CHECK(metrics.backend_errors.load() == 1);
    char buf[8];
    CHECK((*b)->Read("k", 0, 8, "", buf).error().code() == Code::kUnavailable);
  }
}
