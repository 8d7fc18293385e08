#pragma once
// `igtcache sim` (DESIGN.md sec. 7): replays a read trace through the real
// AccessStreamTree, PolicyEngine and policy modules over a simulated store
// and clock, and reports hit ratios, backend traffic, prefetch waste and a
// modeled job time.
//
// Model (docs/EVALUATION.md, "Simulator model"):
//  - Cache: `cache_bytes` of units (`unit_bytes`, the last unit of a file
//    short; a small file is one unit). A unit inserted by a fetch is in the
//    cache from the moment the fetch is issued (its space is taken) but its
//    bytes are there only when they arrive: a read before that is a MISS
//    (it waits for the fetch in flight, single-flight, no second GET).
//  - Backend: `connections` connections; a GET of b bytes on a connection
//    that is free at time s delivers byte k at s + latency + k / bandwidth
//    (defaults 25 ms to first byte, 90 MB/s per connection, 16 connections,
//    at most max_request_bytes per GET; a prefetch range's GETs are of
//    (its bytes + prefetch bytes in flight) / (connections - 2), at least a
//    unit, as the live Prefetcher spreads a batch over its threads). Demand
//    GETs queue for the earliest free connection; prefetch GETs are issued
//    only on a connection idle at that moment while another one stays idle
//    for demand, and only while the prefetch bytes in flight are under
//    `prefetch_budget_bytes` (the rest of the plan is dropped); a fill
//    (PrefetchRange::fill) is queued and pumped after every read while
//    three connections are idle. Demand misses fetch whole units, or the
//    sub-units a read covers where the engine says so
//    (PolicyEngine::SubUnitBytes).
//  - details.no_stall_time_s: the makespan if every read were a hit, the
//    bound of any policy's modeled_time_s.
//  - Clock: each reader (pid) is closed-loop: its next read is issued when
//    its previous read completed plus the gap between the two reads in the
//    trace (the job's compute time). Hits cost nothing. modeled_time_s is
//    the time the last reader finishes.
//  - Listings: the objects of each directory are those of `listing_path`
//    (every object of the bucket, read or not) plus those of the trace; with
//    no listing, those of the trace only. The engine's directory plans
//    (warm-ups, an epoch's unread items, the next files of a scan) see
//    these listings: a trace alone lists only files that will be read,
//    which flatters those plans wherever files go unread.
//  - belady: Belady's MIN with bypass over whole units, demand fetches only,
//    same clock and backend model: evict the unit whose next use is furthest,
//    do not admit one used later than everything cached. A unit's next use
//    is its first touch, in trace order, not replayed yet. MIN minimises the
//    count of misses for a fixed order of equal-size items; here units differ
//    in size and a closed-loop replay's order shifts with the stalls, so it
//    is a strong reference, not a bound on bytes or time (igt's 64 KiB
//    sub-unit misses can beat it by bytes).
// Thread-safety: RunSim is reentrant.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "igtcache/status.h"
#include "src/engine/policy_file.h"

namespace igt::sim {

struct SimOptions {
  std::string trace_path;
  // CSV `path,size` of every object (docs/TRACES.md, "Listings"); empty:
  // the trace's files are the listing.
  std::string listing_path;
  uint64_t cache_bytes = 0;
  std::string policy = "igt";   // igt | lru | lfu | fifo | 2random | lru-readahead | belady
  std::string config_path;      // igtcache YAML: stream.*, cache.unit_size_bytes, policy.file
  // --unit-size (checked as cache.unit_size_bytes is) if unit_bytes_set,
  // else cache.unit_size_bytes of the config (default 1 MiB).
  uint64_t unit_bytes = 0;
  bool unit_bytes_set = false;
  // Overrides the config's policy.file (tests).
  std::optional<engine::PolicyFile> policy_file;
  // If set, given the policy file's warnings for --policy igt (a quota not
  // below --cache-size, a prefix written with a leading '/'), as a mount
  // and `config --check` tell them.
  std::function<void(const std::string&)> warn;

  // Backend model. Defaults: S3 Standard as DESIGN.md sec. 8 models it.
  double latency_ms = 25;                  // to first byte
  double bandwidth_bytes_per_s = 90e6;     // per connection
  uint32_t connections = 16;               // bounded connection pool
  uint64_t max_request_bytes = 8 << 20;    // largest ranged GET (backend.max_request_bytes)
  // Prefetch bytes in flight at most. RunSim sets it from the config
  // (cache.prefetch_budget_bytes, as a mount with it would have).
  uint64_t prefetch_budget_bytes = 128ull << 20;
  uint64_t seed = 1;                       // 2random
};

// All the names --policy accepts.
std::vector<std::string> SimPolicyNames();

// {"policy", "cache_size", "requests", "hit_ratio", "byte_hit_ratio",
//  "backend_bytes", "backend_requests", "prefetch_bytes",
//  "prefetch_wasted_bytes", "modeled_time_s"} plus "details" (engine
// streams, unit size, model parameters). Errors: a bad trace (naming the
// line), an unknown policy, a bad config or policy file.
Result<nlohmann::json> RunSim(const SimOptions& opts);

}  // namespace igt::sim
