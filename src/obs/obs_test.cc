// Unit tests of the observability module: the backend decorator's counts and
// histogram, the Prometheus rendering of a stats snapshot, and a real scrape
// of the HTTP endpoint over a socket.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "backends/memory_backend.h"
#include "src/obs/instrumented_backend.h"
#include "src/obs/prometheus_exporter.h"

using namespace igt;

namespace {

// Forwards to a shared MemoryBackend (Instrument takes ownership).
class Fwd : public Backend {
 public:
  explicit Fwd(std::shared_ptr<MemoryBackend> m) : m_(std::move(m)) {}
  Result<ListPage> List(const ListRequest& r) override { return m_->List(r); }
  Result<ObjectInfo> Stat(const std::string& k) override { return m_->Stat(k); }
  Result<size_t> Read(const std::string& k, uint64_t o, size_t l, std::string_view e, char* out) override {
    return m_->Read(k, o, l, e, out);
  }
  Status Probe() override { return m_->Probe(); }
  std::string Describe() const override { return m_->Describe(); }

 private:
  std::shared_ptr<MemoryBackend> m_;
};

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  REQUIRE(write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

bool Has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

}  // namespace

TEST_CASE("InstrumentedBackend counts calls by op and outcome and passes results through") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a/b.bin", std::string(1000, 'x'));
  obs::BackendStats st;
  auto b = obs::Instrument(std::make_unique<Fwd>(mem), &st);
  char buf[2000];
  auto r = b->Read("a/b.bin", 100, 2000, "", buf);
  REQUIRE(r);
  CHECK(*r == 900);
  CHECK(!b->Stat("missing"));
  CHECK(b->Stat("a/b.bin"));
  CHECK(b->List(ListRequest{}));
  CHECK(b->Probe().ok());
  CHECK(b->Describe() == "memory://");

  CHECK(st.calls(obs::BackendOp::kRead) == 1);
  CHECK(st.op(obs::BackendOp::kRead).bytes == 900);
  CHECK(st.calls(obs::BackendOp::kStat) == 2);
  CHECK(st.op(obs::BackendOp::kStat).by_code[static_cast<int>(Code::kNotFound)] == 1);
  CHECK(st.op(obs::BackendOp::kStat).by_code[static_cast<int>(Code::kOk)] == 1);
  CHECK(st.calls(obs::BackendOp::kList) == 1);
  CHECK(st.calls(obs::BackendOp::kProbe) == 1);
  uint64_t in_buckets = 0;
  for (const auto& x : st.op(obs::BackendOp::kStat).buckets) in_buckets += x;
  CHECK(in_buckets == 2);
}

TEST_CASE("BackendStats puts latencies in the right bucket") {
  obs::BackendStats st;
  st.Record(obs::BackendOp::kRead, Code::kOk, 50'000, 0);          // 50 us -> first bucket (<= 100 us)
  st.Record(obs::BackendOp::kRead, Code::kOk, 30'000'000, 0);      // 30 ms -> (25 ms, 50 ms]
  st.Record(obs::BackendOp::kRead, Code::kUnavailable, 20'000'000'000ull, 0);  // 20 s -> +Inf
  const auto& c = st.op(obs::BackendOp::kRead);
  CHECK(c.buckets[0] == 1);
  CHECK(c.buckets[8] == 1);  // kLatencyBucketsS[8] == 0.05
  CHECK(c.buckets[obs::kLatencyBucketsS.size()] == 1);
  CHECK(c.by_code[static_cast<int>(Code::kUnavailable)] == 1);
}

TEST_CASE("Prometheus rendering maps the stats snapshot to documented families") {
  nlohmann::json j = {{"cache_hit_bytes", 4096}, {"cache_miss_units", 3}, {"evictions", 2},
                      {"cache_corruptions", 1}, {"read_errors", 5}, {"cache_used_bytes", 777},
                      {"cache_limit_bytes", 1000}, {"pid", 42}, {"source", "file:///d"},
                      {"version", "0.1.0"}, {"some_new_counter", 9},
                      {"streams", {{{"path", "train/"}, {"pattern", "random"}},
                                   {{"path", "ckpt/m.bin"}, {"pattern", "sequential"}},
                                   {{"path", "x/"}, {"pattern", "random"}}}},
                      {"engine", {{"prefetch_bytes", 1234},
                                  {"streams", {{{"key", "train/"}, {"label", "random"}, {"cached_bytes", 500}},
                                               {{"key", "ckpt/"}, {"label", "sequential"}, {"cached_bytes", 200}}}}}}};
  obs::BackendStats st;
  st.Record(obs::BackendOp::kRead, Code::kOk, 1'000'000, 10);
  st.Record(obs::BackendOp::kStat, Code::kNotFound, 1'000'000, 0);
  const std::string t = obs::RenderPrometheusText(j, &st);
  CHECK(Has(t, "# TYPE igtcache_cache_hit_bytes_total counter"));
  CHECK(Has(t, "igtcache_cache_hit_bytes_total 4096"));
  CHECK(Has(t, "igtcache_cache_miss_units_total 3"));
  CHECK(Has(t, "igtcache_evictions_total{reason=\"capacity\"} 2"));
  CHECK(Has(t, "igtcache_evictions_total{reason=\"corrupt\"} 1"));
  CHECK(Has(t, "igtcache_errors_total{op=\"read\"} 5"));
  CHECK(Has(t, "igtcache_cache_used_bytes 777"));
  CHECK(Has(t, "igtcache_prefetched_bytes_total 1234"));
  CHECK(Has(t, "igtcache_prefetch_wasted_bytes_total 0"));
  CHECK(Has(t, "igtcache_streams{label=\"random\"} 2"));
  CHECK(Has(t, "igtcache_streams{label=\"skewed\"} 0"));
  CHECK(Has(t, "igtcache_cache_stream_bytes{label=\"random\"} 500"));
  CHECK(Has(t, "igtcache_cache_stream_bytes{label=\"sequential\"} 200"));
  CHECK(Has(t, "igtcache_some_new_counter 9"));
  CHECK(!Has(t, "igtcache_pid"));
  CHECK(Has(t, "igtcache_info{version=\"0.1.0\",source=\"file:///d\"} 1"));
  CHECK(Has(t, "igtcache_backend_requests_total{op=\"get\",status=\"ok\"} 1"));
  CHECK(Has(t, "igtcache_backend_requests_total{op=\"head\",status=\"not_found\"} 1"));
  CHECK(Has(t, "# TYPE igtcache_backend_request_duration_seconds histogram"));
  CHECK(Has(t, "igtcache_backend_request_duration_seconds_bucket{op=\"get\",le=\"0.0025\"} 1"));
  CHECK(Has(t, "igtcache_backend_request_duration_seconds_count{op=\"get\"} 1"));
}

TEST_CASE("Metrics addresses are validated") {
  CHECK(obs::ValidateMetricsAddr("127.0.0.1:9100").ok());
  // Only when the HTTP server was built with IPv6 (Debian's civetweb is not):
  // else refused up front, saying why (it failed at start with "null context").
  const Status v6 = obs::ValidateMetricsAddr("[::1]:9100");
  CHECK(v6.ok() == obs::MetricsServerHasIpv6());
  if (!v6.ok()) CHECK(v6.message().find("IPv6 addresses are not supported") != std::string::npos);
  CHECK(obs::ValidateMetricsAddr("0.0.0.0:0").ok());
  CHECK(!obs::ValidateMetricsAddr("9100").ok());
  CHECK(!obs::ValidateMetricsAddr(":9100").ok());
  CHECK(!obs::ValidateMetricsAddr("127.0.0.1:").ok());
  CHECK(!obs::ValidateMetricsAddr("127.0.0.1:99999").ok());
  CHECK(!obs::ValidateMetricsAddr("::1:9100").ok());
  CHECK(!obs::ValidateMetricsAddr("9101,127.0.0.1:9100").ok());  // a list to the HTTP server
  CHECK(!obs::ValidateMetricsAddr("localhost:9100").ok());
  CHECK(!obs::ValidateMetricsAddr("256.1.1.1:9100").ok());
  CHECK(!obs::ValidateMetricsAddr("[fe80::zz]:9100").ok());
  auto s = obs::ValidateMetricsAddr("localhost:http");
  CHECK(s.message().find("localhost:http") != std::string::npos);
}

TEST_CASE("MetricsServer serves /metrics over HTTP and reads the snapshot at scrape time") {
  std::atomic<int> hits{0};
  obs::BackendStats st;
  auto srv = obs::MetricsServer::Start(
      "127.0.0.1:0",
      [&] { return nlohmann::json{{"cache_hit_units", ++hits}}.dump(); }, &st);
  REQUIRE(srv);
  REQUIRE((*srv)->port() > 0);
  std::string a = HttpGet((*srv)->port(), "/metrics");
  CHECK(Has(a, "200 OK"));
  CHECK(Has(a, "igtcache_cache_hit_units_total 1"));
  std::string b = HttpGet((*srv)->port(), "/metrics");
  CHECK(Has(b, "igtcache_cache_hit_units_total 2"));

  // A second server on the same port is refused with a clear error.
  auto dup = obs::MetricsServer::Start("127.0.0.1:" + std::to_string((*srv)->port()), [] { return "{}"; }, nullptr);
  REQUIRE(!dup);
  CHECK(dup.error().code() == Code::kUnavailable);
  // Why, in words (the HTTP server's own error said "null context when
  // constructing CivetServer").
  CHECK_THAT(dup.error().message(), Catch::Contains("Address already in use"));
  // An address not of this machine (TEST-NET-1), unless the host allows
  // binding those (net.ipv4.ip_nonlocal_bind, keepalived hosts).
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9100);
  ::inet_pton(AF_INET, "192.0.2.1", &sa.sin_addr);
  const bool nonlocal_bind = ::bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(probe);
  if (!nonlocal_bind) {
    auto foreign = obs::MetricsServer::Start("192.0.2.1:9100", [] { return "{}"; }, nullptr);
    REQUIRE(!foreign);
    CHECK_THAT(foreign.error().message(), Catch::Contains("not an address of this machine"));
  }
}

TEST_CASE("A stats source that returns garbage yields a valid scrape without series, not zeros") {
  auto srv = obs::MetricsServer::Start("127.0.0.1:0", [] { return std::string("not json"); }, nullptr);
  REQUIRE(srv);
  std::string a = HttpGet((*srv)->port(), "/metrics");
  CHECK(Has(a, "200 OK"));
  // Zeros would read as counter resets; a gap is what Prometheus expects.
  CHECK_FALSE(Has(a, "igtcache_cache_hit_units_total"));
}
