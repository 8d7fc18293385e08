#pragma once
// Live counters of one mount, counted since it started. Every field is a
// relaxed atomic: writers on any thread, readers (stats) take a snapshot.
// Who counts what:
//   cache_*        BlockStore (hits/misses are counted by the ReadPipeline)
//   backend_*      requests and bytes: the layer that calls the Backend
//                  (Namespace, ReadPipeline); backend_retries and
//                  backend_errors (final failures other than NotFound and
//                  Changed): the S3 backend itself
// Names double as JSON keys in `igtcache stats`.

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace igt {

struct Metrics {
  using C = std::atomic<uint64_t>;
  // Read path (units are cache units: a 1 MiB block or a whole small object).
  C read_requests{0};
  C read_bytes{0};
  C read_errors{0};
  C opens{0};
  C lookups{0};              // FUSE lookups of a name (not the ones readdirplus makes unneeded)
  C readdirplus_entries{0};  // directory entries handed over with their inode and attributes
  C cache_hit_units{0};
  C cache_hit_bytes{0};
  C cache_miss_units{0};
  C cache_miss_bytes{0};
  // Backend traffic.
  C backend_get_requests{0};
  C backend_get_bytes{0};
  C backend_list_requests{0};
  C backend_head_requests{0};
  C backend_retries{0};
  C backend_errors{0};
  C read_failures_repeated{0};  // reads failed at once: the same reader's read of it had just failed
  // SSD tier.
  C cache_insert_units{0};
  C cache_insert_bytes{0};
  C evictions{0};
  C evicted_bytes{0};
  C cache_write_errors{0};     // failed inserts (disk full, I/O error): served from backend
  C cache_insert_skipped{0};   // inserts skipped: other inserts in flight held the room
  C cache_insert_declined{0};  // misses not kept: the policy would evict them first
  C cache_read_errors{0};      // failed unit reads: degraded to a miss
  C cache_corruptions{0};      // unit files that failed their checksum: dropped
  C singleflight_waits{0};     // misses that joined another thread's fetch
  // A gauge, not a counter: 1 while the S3 source is in outage mode (it did
  // not answer for a whole retry budget: one short attempt per request).
  C backend_outage{0};
  // A gauge: 1 once the cache dir was found deleted under the mount (its
  // units went with it; nothing is cached until a remount).
  C cache_dir_gone{0};
  // A gauge: 1 while the cache index takes no writes after a failed one
  // (a full or read-only volume, a disk quota): nothing new is cached.
  C cache_index_broken{0};
  // S3 credentials. A gauge: when the ones in use expire (unix seconds; 0:
  // they do not, or none); and a counter: renewals that failed (in the
  // background before the expiry, or after S3 refused them).
  C credentials_expiry_unix_s{0};
  C credentials_renew_failures{0};

  // Snapshot of every counter by name (for JSON / Prometheus).
  std::map<std::string, uint64_t> Snapshot() const {
    std::map<std::string, uint64_t> m;
#define IGT_M(f) m[#f] = f.load(std::memory_order_relaxed)
    IGT_M(read_requests); IGT_M(read_bytes); IGT_M(read_errors); IGT_M(opens);
    IGT_M(lookups); IGT_M(readdirplus_entries);
    IGT_M(cache_hit_units); IGT_M(cache_hit_bytes); IGT_M(cache_miss_units);
    IGT_M(cache_miss_bytes); IGT_M(backend_get_requests); IGT_M(backend_get_bytes);
    IGT_M(backend_list_requests); IGT_M(backend_head_requests); IGT_M(backend_retries);
    IGT_M(backend_errors); IGT_M(read_failures_repeated); IGT_M(cache_insert_units); IGT_M(cache_insert_bytes);
    IGT_M(evictions); IGT_M(evicted_bytes); IGT_M(cache_write_errors);
    IGT_M(cache_insert_skipped); IGT_M(cache_insert_declined); IGT_M(cache_read_errors); IGT_M(cache_corruptions); IGT_M(singleflight_waits);
    IGT_M(backend_outage); IGT_M(cache_dir_gone); IGT_M(cache_index_broken);
    IGT_M(credentials_expiry_unix_s); IGT_M(credentials_renew_failures);
#undef IGT_M
    return m;
  }
};

inline void Add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

}  // namespace igt
