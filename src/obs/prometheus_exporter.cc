#include "src/obs/prometheus_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <civetweb.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace igt::obs {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<std::pair<std::string, std::string>>;

// A counter of the stats JSON with a fixed Prometheus name (and labels, for
// keys that are one series of a labelled family).
struct KnownCounter {
  const char* json_key;
  const char* family;
  const char* label_name;   // nullptr: no label
  const char* label_value;
};

// The counters of include/igtcache/metrics.h, by JSON key. Families with
// several series (errors by operation, evictions by reason) are listed once
// per series. Keys not listed here, added to Metrics later, are still
// exported generically as igtcache_<key> (untyped).
constexpr KnownCounter kCounters[] = {
    {"read_requests", "igtcache_read_requests_total", nullptr, nullptr},
    {"read_bytes", "igtcache_read_bytes_total", nullptr, nullptr},
    {"opens", "igtcache_opens_total", nullptr, nullptr},
    {"lookups", "igtcache_lookups_total", nullptr, nullptr},
    {"readdirplus_entries", "igtcache_readdirplus_entries_total", nullptr, nullptr},
    {"cache_hit_units", "igtcache_cache_hit_units_total", nullptr, nullptr},
    {"cache_hit_bytes", "igtcache_cache_hit_bytes_total", nullptr, nullptr},
    {"cache_miss_units", "igtcache_cache_miss_units_total", nullptr, nullptr},
    {"cache_miss_bytes", "igtcache_cache_miss_bytes_total", nullptr, nullptr},
    {"backend_get_bytes", "igtcache_fetched_bytes_total", nullptr, nullptr},
    {"backend_get_requests", "igtcache_backend_layer_requests_total", "op", "get"},
    {"backend_list_requests", "igtcache_backend_layer_requests_total", "op", "list"},
    {"backend_head_requests", "igtcache_backend_layer_requests_total", "op", "head"},
    {"backend_retries", "igtcache_backend_retries_total", nullptr, nullptr},
    {"read_failures_repeated", "igtcache_read_failures_repeated_total", nullptr, nullptr},
    {"cache_insert_units", "igtcache_cache_insert_units_total", nullptr, nullptr},
    {"cache_insert_bytes", "igtcache_cache_insert_bytes_total", nullptr, nullptr},
    {"cache_insert_skipped", "igtcache_cache_insert_skipped_total", nullptr, nullptr},
    {"cache_insert_declined", "igtcache_cache_insert_declined_total", nullptr, nullptr},
    {"evictions", "igtcache_evictions_total", "reason", "capacity"},
    {"evicted_bytes", "igtcache_evicted_bytes_total", "reason", "capacity"},
    {"cache_corruptions", "igtcache_evictions_total", "reason", "corrupt"},
    {"read_errors", "igtcache_errors_total", "op", "read"},
    {"backend_errors", "igtcache_errors_total", "op", "backend"},
    {"cache_write_errors", "igtcache_errors_total", "op", "cache_write"},
    {"cache_read_errors", "igtcache_errors_total", "op", "cache_read"},
    {"cache_corruptions", "igtcache_errors_total", "op", "cache_verify"},
    {"singleflight_waits", "igtcache_singleflight_waits_total", nullptr, nullptr},
    {"credentials_renew_failures", "igtcache_credentials_renew_failures_total", nullptr, nullptr},
    // Prefetcher (issue 4); looked up at the top level and under "engine".
    {"prefetch_bytes", "igtcache_prefetched_bytes_total", nullptr, nullptr},
    {"prefetch_hit_bytes", "igtcache_prefetch_hit_bytes_total", nullptr, nullptr},
    {"prefetch_wasted_bytes", "igtcache_prefetch_wasted_bytes_total", nullptr, nullptr},
};

struct KnownGauge {
  const char* json_key;
  const char* family;
};
constexpr KnownGauge kGauges[] = {
    {"cache_used_bytes", "igtcache_cache_used_bytes"},
    {"cache_limit_bytes", "igtcache_cache_limit_bytes"},
    {"cache_units", "igtcache_cache_units"},
    {"cache_inline_units", "igtcache_cache_inline_units"},
    {"open_unit_files", "igtcache_open_unit_files"},
    {"inodes", "igtcache_inodes"},
    {"hidden_names", "igtcache_hidden_names"},
    {"uptime_s", "igtcache_uptime_seconds"},
    {"backend_outage", "igtcache_backend_outage"},
    {"cache_dir_gone", "igtcache_cache_dir_gone"},
    {"cache_index_broken", "igtcache_cache_index_broken"},
    {"credentials_expiry_unix_s", "igtcache_credentials_expiry_timestamp_seconds"},
    {"stream_tree_nodes", "igtcache_stream_tree_nodes"},
    {"stream_tree_bytes", "igtcache_stream_tree_bytes"},
};

// Top-level keys that are not metrics.
const std::set<std::string> kNotMetrics = {"pid", "source", "version", "streams", "engine"};

const std::map<std::string, std::string>& Help() {
  static const std::map<std::string, std::string> h = {
      {"igtcache_read_requests_total", "FUSE read requests served by the daemon (page-cache hits never reach it)."},
      {"igtcache_read_bytes_total", "Bytes returned by FUSE reads."},
      {"igtcache_opens_total", "Files opened through the mount."},
      {"igtcache_lookups_total", "Names looked up by the kernel (one FUSE lookup each)."},
      {"igtcache_readdirplus_entries_total", "Directory entries handed to the kernel with their attributes (no lookup needed)."},
      {"igtcache_cache_hit_units_total", "Cache units served from the SSD cache."},
      {"igtcache_cache_hit_bytes_total", "Bytes of reads served from the SSD cache."},
      {"igtcache_cache_miss_units_total", "Cache units that had to be fetched for a read."},
      {"igtcache_cache_miss_bytes_total", "Bytes of reads that missed the SSD cache."},
      {"igtcache_fetched_bytes_total", "Bytes fetched from the backend (demand fetches and prefetches)."},
      {"igtcache_backend_layer_requests_total", "Backend requests issued by the file system layers, by type (see igtcache_backend_requests_total for outcomes)."},
      {"igtcache_backend_retries_total", "Backend request retries (5xx, SlowDown, timeouts, dropped connections)."},
      {"igtcache_read_failures_repeated_total", "Reads failed at once because the same reader's read of that range had failed for the backend within 3 s (the kernel reads a page of a failed readahead again at once)."},
      {"igtcache_cache_insert_units_total", "Units written to the SSD cache."},
      {"igtcache_cache_insert_bytes_total", "Bytes written to the SSD cache."},
      {"igtcache_evictions_total", "Units removed from the SSD cache, by reason (capacity: size limit or free-space floor; corrupt: failed checksum)."},
      {"igtcache_evicted_bytes_total", "Bytes evicted from the SSD cache, by reason."},
      {"igtcache_errors_total", "Errors by operation (read: returned to a reader; others degraded to a miss or a skipped insert)."},
      {"igtcache_singleflight_waits_total", "Misses that joined another thread's fetch of the same unit."},
      {"igtcache_prefetched_bytes_total", "Bytes fetched ahead of reads by the prefetcher."},
      {"igtcache_prefetch_hit_bytes_total", "Prefetched bytes that were later read."},
      {"igtcache_prefetch_wasted_bytes_total", "Prefetched bytes evicted before any read (prefetch waste)."},
      {"igtcache_cache_used_bytes", "Disk use of the SSD cache: unit files (header and data in whole 4 KiB blocks) and the index records of units kept inline, what cache.max_bytes bounds."},
      {"igtcache_cache_limit_bytes", "Cache size limit (cache.max_bytes, less while the volume cannot hold it)."},
      {"igtcache_cache_units", "Units in the SSD cache."},
      {"igtcache_cache_inline_units", "Units in the SSD cache kept inline in its index (small objects, no unit file)."},
      {"igtcache_open_unit_files", "Unit files kept open for later reads (at most 4096)."},
      {"igtcache_inodes", "Inodes known to the mount."},
      {"igtcache_hidden_names", "Keys hidden from the mount because their names are unsafe for a file system (in the latest listing of each directory; the log names them)."},
      {"igtcache_uptime_seconds", "Seconds since the mount started."},
      {"igtcache_backend_outage", "1 while the source has not answered for a whole retry budget (or since a mount that came up without it): requests get one short attempt until it answers."},
      {"igtcache_cache_dir_gone", "1 once the cache dir was found deleted under the mount: nothing is cached until a remount."},
      {"igtcache_cache_index_broken", "1 while the cache index takes no writes after a failed one (a full or read-only volume, a disk quota): cached units are still served, nothing new is cached; the log says why, a remount recovers it."},
      {"igtcache_credentials_expiry_timestamp_seconds", "When the S3 credentials in use expire (unix time; 0: they do not expire, or none are used). They are renewed 5 minutes ahead: alert when it is above 0 and less than a few minutes away."},
      {"igtcache_credentials_renew_failures_total", "Failed renewals of the S3 credentials (the log says why: an expired SSO session, a failing credential_process, STS refusing)."},
      {"igtcache_stream_tree_nodes", "Nodes in the access stream tree."},
      {"igtcache_stream_tree_bytes", "Memory accounted to the access stream tree."},
      {"igtcache_streams", "Access streams by detected pattern label."},
      {"igtcache_cache_stream_bytes", "Cached bytes by the label of the stream that governs them."},
      {"igtcache_backend_requests_total", "Backend calls by request type and outcome."},
      {"igtcache_backend_request_duration_seconds", "Backend call latency by request type (including retries)."},
      {"igtcache_info", "Constant 1, labelled with the version and the source."},
  };
  return h;
}

std::string SanitizeName(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return o;
}

// Families in insertion order, series appended by name.
class Families {
 public:
  MetricFamily& Get(const std::string& name, MetricType type) {
    auto it = index_.find(name);
    if (it != index_.end()) return out_[it->second];
    index_[name] = out_.size();
    MetricFamily f;
    f.name = name;
    auto h = Help().find(name);
    f.help = h != Help().end() ? h->second : "igtcache stats key (see docs/METRICS.md).";
    f.type = type;
    out_.push_back(std::move(f));
    return out_.back();
  }
  void Add(const std::string& name, MetricType type, const Labels& labels, double v) {
    ClientMetric m;
    for (const auto& [k, val] : labels) m.label.push_back({k, val});
    switch (type) {
      case MetricType::Counter: m.counter.value = v; break;
      case MetricType::Gauge: m.gauge.value = v; break;
      default: m.untyped.value = v; break;
    }
    Get(name, type).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(out_); }

 private:
  std::vector<MetricFamily> out_;
  std::map<std::string, size_t> index_;
};

double Num(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  return 0;
}

// The value of a counter key: top level first, then under "engine".
const nlohmann::json* FindKey(const nlohmann::json& stats, const char* key) {
  if (auto it = stats.find(key); it != stats.end() && it->is_number()) return &*it;
  if (auto e = stats.find("engine"); e != stats.end() && e->is_object())
    if (auto it = e->find(key); it != e->end() && it->is_number()) return &*it;
  return nullptr;
}

std::string StreamLabel(const nlohmann::json& s) {
  for (const char* k : {"label", "pattern"})
    if (auto it = s.find(k); it != s.end() && it->is_string()) return it->get<std::string>();
  return "unknown";
}

void AddStreams(const nlohmann::json& stats, Families& f) {
  // Streams per label, from the access stream tree (always present) — every
  // label appears so the series exist before anything is classified.
  std::map<std::string, double> count = {{"sequential", 0}, {"random", 0}, {"skewed", 0}, {"unknown", 0}};
  if (auto it = stats.find("streams"); it != stats.end() && it->is_array())
    for (const auto& s : *it)
      if (s.is_object()) count[StreamLabel(s)] += 1;
  for (const auto& [label, n] : count) f.Add("igtcache_streams", MetricType::Gauge, {{"label", label}}, n);

  // Cached bytes by label: from whichever stream list carries cached_bytes
  // (the policy engine's streams, when present).
  std::map<std::string, double> bytes = {{"sequential", 0}, {"random", 0}, {"skewed", 0}, {"unknown", 0}};
  auto sum = [&](const nlohmann::json& arr) {
    bool any = false;
    if (!arr.is_array()) return false;
    for (const auto& s : arr) {
      if (!s.is_object()) continue;
      auto cb = s.find("cached_bytes");
      if (cb == s.end() || !cb->is_number()) continue;
      bytes[StreamLabel(s)] += cb->get<double>();
      any = true;
    }
    return any;
  };
  bool found = false;
  if (auto e = stats.find("engine"); e != stats.end() && e->is_object())
    if (auto s = e->find("streams"); s != e->end()) found = sum(*s);
  if (!found)
    if (auto s = stats.find("streams"); s != stats.end()) sum(*s);
  for (const auto& [label, n] : bytes)
    f.Add("igtcache_cache_stream_bytes", MetricType::Gauge, {{"label", label}}, n);
}

void AddBackend(const BackendStats& bs, Families& f) {
  for (int o = 0; o < kBackendOpCount; ++o) {
    const auto op = static_cast<BackendOp>(o);
    const std::string opname(BackendOpName(op));
    const OpCounters& c = bs.op(op);
    for (int k = 0; k < kCodeCount; ++k) {
      const uint64_t n = c.by_code[k].load(std::memory_order_relaxed);
      if (n == 0 && k != 0) continue;  // "ok" always; failures once they happen
      f.Add("igtcache_backend_requests_total", MetricType::Counter,
            {{"op", opname}, {"status", std::string(CodeLabel(static_cast<Code>(k)))}},
            static_cast<double>(n));
    }
    ClientMetric m;
    m.label.push_back({"op", opname});
    uint64_t cum = 0;
    for (size_t b = 0; b < c.buckets.size(); ++b) {
      cum += c.buckets[b].load(std::memory_order_relaxed);
      ClientMetric::Bucket bk;
      bk.cumulative_count = cum;
      bk.upper_bound = b < kLatencyBucketsS.size() ? kLatencyBucketsS[b]
                                                   : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back(bk);
    }
    m.histogram.sample_count = cum;
    m.histogram.sample_sum = static_cast<double>(c.latency_sum_ns.load(std::memory_order_relaxed)) * 1e-9;
    f.Get("igtcache_backend_request_duration_seconds", MetricType::Histogram).metric.push_back(std::move(m));
  }
}

std::vector<MetricFamily> BuildFamilies(const nlohmann::json& stats, const BackendStats* backend) {
  Families f;
  std::set<std::string> used = kNotMetrics;
  for (const auto& c : kCounters) {
    used.insert(c.json_key);
    const nlohmann::json* v = FindKey(stats, c.json_key);
    Labels l;
    if (c.label_name) l.push_back({c.label_name, c.label_value});
    f.Add(c.family, MetricType::Counter, l, v ? Num(*v) : 0.0);
  }
  for (const auto& g : kGauges) {
    used.insert(g.json_key);
    if (auto it = stats.find(g.json_key); it != stats.end())
      f.Add(g.family, MetricType::Gauge, {}, Num(*it));
  }
  Labels info = {{"version", stats.value("version", std::string())},
                 {"source", stats.value("source", std::string())}};
  f.Add("igtcache_info", MetricType::Gauge, info, 1);
  AddStreams(stats, f);
  if (backend) AddBackend(*backend, f);
  // Everything else numeric, so counters added later are never invisible.
  for (auto it = stats.begin(); it != stats.end(); ++it)
    if (!used.count(it.key()) && (it->is_number() || it->is_boolean()))
      f.Add("igtcache_" + SanitizeName(it.key()), MetricType::Untyped, {}, Num(*it));
  if (auto e = stats.find("engine"); e != stats.end() && e->is_object()) {
    for (auto it = e->begin(); it != e->end(); ++it)
      if (!used.count(it.key()) && it->is_number())
        f.Add("igtcache_engine_" + SanitizeName(it.key()), MetricType::Untyped, {}, Num(*it));
    // The prefetcher's queue and budget (dropped plans are backpressure at
    // work), nested in the engine's section: they were in `igtcache stats`
    // only.
    if (auto p = e->find("prefetcher"); p != e->end() && p->is_object())
      for (auto it = p->begin(); it != p->end(); ++it)
        if (it->is_number())
          f.Add("igtcache_prefetcher_" + SanitizeName(it.key()), MetricType::Untyped, {}, Num(*it));
  }
  return f.Take();
}

// Scrape-time bridge: prometheus-cpp calls Collect() on its server threads.
class StatsCollectable final : public prometheus::Collectable {
 public:
  StatsCollectable(StatsSource src, const BackendStats* backend) : src_(std::move(src)), backend_(backend) {}
  std::vector<MetricFamily> Collect() const override {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(src_());
    } catch (const std::exception& e) {
      // No snapshot: serve no series at all this time. Zeros would read as
      // counter resets (rate() spikes); missing series are just a gap.
      spdlog::warn("metrics: cannot read the stats snapshot: {}", e.what());
      return {};
    }
    if (!j.is_object()) return {};
    return BuildFamilies(j, backend_);
  }

 private:
  const StatsSource src_;
  const BackendStats* const backend_;
};

constexpr unsigned kCivetwebIpv6 = 8;  // mg_check_feature(): "IPv6 support"

// Why `addr` (valid: ValidateMetricsAddr) cannot be bound, from a bind() of
// our own: the HTTP server's error says only "null context when constructing
// CivetServer". Empty if the probe binds (the cause was something else).
std::string BindFailure(const std::string& addr) {
  const auto colon = addr.rfind(':');
  std::string host = addr.substr(0, colon);
  const auto port = static_cast<uint16_t>(std::stoul(addr.substr(colon + 1)));
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (host.front() == '[') {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a->sin6_addr) != 1) return {};
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    if (inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1) return {};
    len = sizeof *a;
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as the server does
  std::string why;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int err = errno;
    why = std::strerror(err);
    if (err == EADDRINUSE) why += " (another process listens there: pick another port, or :0 for any free one)";
    if (err == EADDRNOTAVAIL) why += " (not an address of this machine)";
  }
  ::close(fd);
  return why;
}

}  // namespace

bool MetricsServerHasIpv6() { return mg_check_feature(kCivetwebIpv6) != 0; }

Status ValidateMetricsAddr(const std::string& addr) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(
        fmt::format("metrics address '{}': {} (expected HOST:PORT, e.g. 127.0.0.1:9100)", addr, why));
  };
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host");
  const std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535)
    return bad("port must be a number in 0-65535");
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string::npos)
    return bad("IPv6 hosts go in brackets");
  // An address literal only: the HTTP server takes no host names, and reads
  // a comma as a list (',9101' would also bind port 9101 on every address).
  in_addr a4{};
  in6_addr a6{};
  const bool literal = host.front() == '['
                           ? inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6) == 1
                           : inet_pton(AF_INET, host.c_str(), &a4) == 1;
  if (!literal)
    return bad(MetricsServerHasIpv6() ? "the host must be an IPv4 address or a bracketed IPv6 address"
                                      : "the host must be an IPv4 address (0.0.0.0 for every interface)");
  // The server binds an IPv6 address only when built with IPv6 (Debian's
  // civetweb 1.15 is not): refused here, not with its "null context" later.
  if (host.front() == '[' && !MetricsServerHasIpv6())
    return bad("IPv6 addresses are not supported: the HTTP server this igtcache was built with (civetweb) has no "
               "IPv6; use an IPv4 address (0.0.0.0 for every interface)");
  return Status::Ok();
}

std::string RenderPrometheusText(const nlohmann::json& stats, const BackendStats* backend) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, BuildFamilies(stats, backend));
  return out.str();
}

struct MetricsServer::Impl {
  std::shared_ptr<StatsCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;  // destroyed first: stops serving
  ~Impl() { exposer.reset(); }
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}
MetricsServer::~MetricsServer() = default;

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& addr, StatsSource source,
                                                           const BackendStats* backend) {
  if (auto s = ValidateMetricsAddr(addr); !s.ok()) return Err(s);
  auto impl = std::make_unique<Impl>();
  impl->collectable = std::make_shared<StatsCollectable>(std::move(source), backend);
  int port = 0;
  try {
    // Scrapes are rare and cheap (one JSON snapshot), but each connection
    // holds a server thread until its request comes: with the two threads
    // of before, four idle connections (a port scan, a stuck client) left
    // every scrape unanswered for a minute. More threads, and a connection
    // that sends no request within 5 s is closed.
    impl->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", addr, "num_threads", "16", "request_timeout_ms", "5000"});
    impl->exposer->RegisterCollectable(impl->collectable, "/metrics");
    auto ports = impl->exposer->GetListeningPorts();
    if (!ports.empty()) port = ports.front();
  } catch (const std::exception& e) {
    impl->exposer.reset();  // frees the port before the probe binds it
    const std::string why = BindFailure(addr);
    return Err(Status::Unavailable(fmt::format("cannot serve metrics on {}: {}", addr, why.empty() ? e.what() : why)));
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), port));
}

}  // namespace igt::obs
