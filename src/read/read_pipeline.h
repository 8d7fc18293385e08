#pragma once
// ReadPipeline: turns a read of (object version, offset, length) into cache
// unit lookups and backend fetches (DESIGN.md sec. 3).
//
//  - The range is split into units of `unit_size` bytes (the last one short).
//  - Each unit is first looked up in the BlockStore (a verified hit copies
//    just the requested bytes).
//  - A missing unit of a file that `sub_units` names (igt: a file read at
//    random) is looked up and fetched as sub-units instead: only the
//    aligned pieces the read covers (block_store.h, SubUnitIndex). A whole
//    unit already being fetched (readahead, fill) is waited for instead.
//    A unit with sub-units cached or in flight is never fetched whole: a
//    reader, and Fetch (prefetch), fetch its missing sub-units instead,
//    whatever the file's label is now. Each byte is fetched once. Each side's check and the registration of its own
//    flights are one step under mu_, so a reader and a prefetch arriving at
//    the same unit together cannot both fetch it.
//  - Misses are single-flight: a unit already being fetched by another thread
//    is waited for, not fetched again. A reader whose wait ends in a failed
//    prefetch fetches the unit itself, once (the retries were the prefetch's).
//  - A reader's read that failed for the backend (unavailable, timed out,
//    I/O error: its retry budget spent) is remembered for a few seconds:
//    that reader's next read of a missing unit in the same range fails at
//    once with the same error, once. The kernel reads a page of a failed
//    readahead again by itself, at once; without this, a read during an
//    outage waited out the retry budget twice (docs/SEMANTICS.md).
//  - The units this call must fetch itself are grouped into runs of adjacent
//    units, each run one ranged GET of at most `max_request_bytes`, checked
//    against the object's ETag; each fetched unit is inserted into the store.
//    A reader's runs are fetched at once (a GET each, in parallel).
//
// Never returns bytes that were not verified against the object's version: a
// backend that answers with another ETag or a short body gives an error, and
// nothing is cached.
// Thread-safety: Read() is safe from many threads.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "igtcache/backend.h"
#include "igtcache/block_store.h"
#include "igtcache/metrics.h"
#include "igtcache/status.h"

namespace igt {

struct FileVersion {
  std::string key;  // the object's key: its units in the cache, the engine's name for it
  std::string etag;
  uint64_t size = 0;
  // The key its bytes are fetched by when not `key`: a file:// link's name
  // (its target's key is `key`). Fetched by the name, a link turned to
  // another file is seen as a change (another ETag) at the next fetch, as
  // before 2026-11-30; fetched by the target, the old target's bytes were
  // served until the listing's TTL (a review's finding).
  std::string fetch_key;
  const std::string& FetchKey() const { return fetch_key.empty() ? key : fetch_key; }
};

class ReadPipeline {
 public:
  struct Options {
    uint64_t unit_size = 1 << 20;          // Default: 1 MiB (cache.unit_size_bytes)
    uint64_t max_request_bytes = 8 << 20;  // Default: 8 MiB (backend.max_request_bytes)
    // Size of the pieces a miss fetches in a file that `sub_units` names: a
    // power of two below unit_size (cache.sub_unit_bytes), or 0: whole
    // units always.
    uint64_t sub_unit_size = 0;
    // Whether a miss in `file` fetches sub-units now (igt: a file read at
    // random). Asked only when a unit misses; empty: never. Whatever it
    // answers, a unit some of whose sub-units are cached or in flight is
    // completed in sub-units (the answer changes with the file's label).
    std::function<bool(const FileVersion& file)> sub_units = {};
    // Whether what is fetched for `file` is stored in the cache (a policy's
    // never-cache prefix answers false: its reads are served from the
    // backend, and prefetches of it do nothing). Empty: always.
    std::function<bool(const FileVersion& file)> admit = {};
    // How long a reader's failed read is remembered (see above); 0: never.
    uint32_t failure_memo_ms = 3000;
  };

  // `store` may be null (no caching). Not owned.
  ReadPipeline(Backend* backend, BlockStore* store, Metrics* metrics, Options opts);

  // Reads [offset, offset+length) of `file`, clamped at its end, into `out`.
  // Returns the number of bytes (0 at or past EOF). `looked_up`, when given,
  // runs once per call after the cache lookups, with the read's misses in
  // the flight table but not fetched yet: the point where the simulator
  // issues a read's prefetch plan (a plan submitted there joins the read's
  // own fetches instead of fetching them again, and overlaps their wait).
  // `reader` names who reads (the FUSE request's thread id, for a read the
  // kernel retries when it fails; 0: unknown, no failure memo).
  // `repeated`, if given, is set when the read failed at once from that
  // memo (the kernel asking again for a range that just failed).
  Result<size_t> Read(const FileVersion& file, uint64_t offset, size_t length, char* out,
                      const std::function<void()>& looked_up = {}, uint64_t reader = 0, bool* repeated = nullptr);

  // Fetches units [first, last] into the cache without returning data
  // (used by warm-up and prefetching). Already cached units are skipped; a
  // unit with sub-units cached or in flight gets its missing sub-units.
  Status Fetch(const FileVersion& file, uint64_t first_unit, uint64_t last_unit);

  uint64_t unit_size() const { return opts_.unit_size; }

  // A reader's runs of misses fetched at once, at most.
  static constexpr size_t kMaxParallelRuns = 4;

 private:
  struct Flight;
  struct Need;
  class LeadGuard;
  // A reader's read that failed for the backend (the failure memo above).
  struct RecentFailure {
    uint64_t reader;
    std::string key, etag;
    uint64_t off, end;  // the read's range
    Status status;
    std::chrono::steady_clock::time_point when;
  };

  Result<size_t> ReadOnce(const FileVersion& file, uint64_t offset, size_t length, char* out,
                          const std::function<void()>& looked_up, uint64_t reader, bool& from_memo);
  // Remembers that `reader`'s read of [off, end) of `file` failed with `st`.
  void RememberFailure(uint64_t reader, const FileVersion& file, uint64_t off, uint64_t end, const Status& st);
  // The failure remembered for `reader` over a range holding [off, end) of
  // `file`, taken out (it answers once); nothing if none or expired.
  std::optional<Status> TakeFailure(uint64_t reader, const FileVersion& file, uint64_t off, uint64_t end);

  // Ends every flight of `needs` this call leads and has not completed, with
  // an error: run when an exception leaves Read or Fetch between registering
  // a flight and completing it (an allocation failure, a throwing
  // `looked_up`), whose followers would otherwise wait forever. noexcept.
  void Abandon(const FileVersion& file, std::vector<Need>& needs) noexcept;

  // Fetches the pieces of `lead` this call leads, inserts them and ends their
  // flights. `demand`: a reader waits for them (the runs' GETs issued at
  // once); else a prefetch (one GET per run, in turn).
  Status FetchRuns(const FileVersion& file, std::vector<Need>& lead, bool demand);
  // Whether what is fetched for `file` goes to the store: it has a version
  // (ETag) and Options::admit agrees.
  bool Keep(const FileVersion& file) const;
  std::string FlightKey(const FileVersion& f, uint64_t index) const;
  // Takes store unit `index`'s flight out of the table, before it is marked
  // done: whoever looks after that starts a new one (a reader retrying a
  // failed prefetch must not join the failed flight again).
  void Unlist(const FileVersion& file, uint64_t index);
  // Joins the flight of store unit `index` (bytes [off, off+len) of `file`)
  // or starts one; takes mu_ (AddNeedLocked: the caller holds it).
  void AddNeed(const FileVersion& file, uint64_t index, uint64_t off, uint64_t len,
               std::vector<Need>& needs);
  void AddNeedLocked(const FileVersion& file, uint64_t index, uint64_t off, uint64_t len,
                     std::vector<Need>& needs);
  // AddNeed for sub-unit `index` of unit `unit`, unless that whole unit is
  // in flight, or cached and `kept` (the file's cached units are served):
  // then false, nothing added (the caller needs the whole unit instead).
  // One step under mu_, against Fetch's check.
  bool AddSubNeed(const FileVersion& file, uint64_t unit, uint64_t index, uint64_t off,
                  uint64_t len, bool kept, std::vector<Need>& needs);
  // AddNeed for whole unit `unit`, unless none of it is in flight and some of
  // its sub-units are cached or in flight: then false, nothing added (the
  // caller fetches the missing sub-units instead). One step under mu_.
  // `cached_now`: set (and nothing added) when the unit is not in flight
  // and the store has it: inserted since the reader's own look found it
  // missing (a prefetch of a unit just dropped as corrupt, fetched and put
  // meanwhile). Registering a flight then fetched it a second time.
  bool AddWholeNeed(const FileVersion& file, uint64_t unit, std::vector<Need>& needs, bool* cached_now = nullptr);
  // AddNeed joining whole unit `unit` if it is in flight; false (nothing
  // added) if not. One step under mu_.
  bool JoinWholeNeed(const FileVersion& file, uint64_t unit, std::vector<Need>& needs);
  // Whether piece `index` has a flight in the table not abandoned; the
  // caller holds mu_.
  bool InFlightLocked(const FileVersion& file, uint64_t index) const;
  // InFlightLocked, taking mu_.
  bool InFlight(const FileVersion& file, uint64_t index);
  // Whether piece `index` (a unit or sub-unit) is in flight or cached; the
  // caller holds mu_.
  bool TakenLocked(const FileVersion& file, uint64_t index) const;
  // Whether a sub-unit of `unit` is in flight or cached; the caller holds mu_.
  bool SubUnitTakenLocked(const FileVersion& file, uint64_t unit) const;

  Backend* backend_;
  BlockStore* store_;
  Metrics* metrics_;
  Options opts_;

  std::mutex mu_;  // guards flights_; never held across I/O (store lookups only)
  std::unordered_map<std::string, std::shared_ptr<Flight>> flights_;

  std::mutex failures_mu_;  // guards failures_
  std::deque<RecentFailure> failures_;  // oldest first, at most kMaxFailures
  std::atomic<size_t> failures_size_{0};  // failures_.size(), read without the lock
  static constexpr size_t kMaxFailures = 256;
};

}  // namespace igt
