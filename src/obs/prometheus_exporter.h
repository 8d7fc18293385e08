#pragma once
// The Prometheus endpoint of a mount (`--metrics-addr HOST:PORT`, config key
// metrics.addr; off by default). At every scrape it takes one snapshot of the
// same JSON that `igtcache stats` prints (the Metrics atomics, cache gauges,
// streams) plus the InstrumentedBackend's per-request counters and latency
// histogram, and renders them as Prometheus metric families — no second set
// of books. Metric names and meanings: docs/METRICS.md.
//
// Ownership: MetricsServer owns the HTTP server (prometheus-cpp's civetweb
// Exposer, its own threads). The stats source and BackendStats are borrowed:
// they must outlive the server (declare the server after them).
// Thread-safety: the stats source is called from the server's threads, so it
// must be thread-safe (the mount's stats lambda is). Start/destroy from one
// thread.

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "igtcache/status.h"
#include "src/obs/instrumented_backend.h"

namespace igt::obs {

// Returns the stats JSON text (one object), as served in MNT/.igtcache.stats.
using StatsSource = std::function<std::string()>;

// Checks "HOST:PORT" ("127.0.0.1:9100", "[::1]:9100", "0.0.0.0:9100"); port
// 0 picks a free one. Returns InvalidArgument naming what is wrong; an IPv6
// address too when the HTTP server has no IPv6 (MetricsServerHasIpv6).
Status ValidateMetricsAddr(const std::string& addr);
bool MetricsServerHasIpv6();

// Renders one snapshot in the Prometheus text exposition format (0.0.4).
// `backend` may be null (no backend families then).
std::string RenderPrometheusText(const nlohmann::json& stats, const BackendStats* backend);

class MetricsServer {
 public:
  // Binds `addr` and serves GET /metrics. Fails (kInvalidArgument for a bad
  // address, kUnavailable if it cannot bind) without side effects.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& addr, StatsSource source,
                                                      const BackendStats* backend);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }  // the bound port (useful with :0)

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace igt::obs
