#pragma once
// LiveEngine: the PolicyEngine of a running mount (DESIGN.md sec. 3 steps
// 5-6). It wraps one PolicyEngine behind a mutex and connects it to the live
// pieces:
//  - the BlockStore takes its victims from it: MakeEvictionAdapter() returns
//    the EvictionPolicy the store is opened with (BlockStoreOptions::make_policy);
//  - every read is reported with OnRead() before the cache is looked up (as
//    in the simulator); the returned plan (units to fetch ahead, with the
//    object's version) goes to the Prefetcher once the read's misses are in
//    flight (ReadPipeline::Read's `looked_up`), src/read/prefetcher.h; the
//    units it fetches reach the store marked as prefetches
//    (BlockStore::Put's `prefetched`, UnitMeta::prefetched);
//  - StatsJson() is the "engine" object of `igtcache stats` (per-stream
//    cached bytes, hits, prefetch hits and waste).
// Ownership: borrows the AccessStreamTree (must outlive it). The adapter keeps
// the LiveEngine alive (shared_ptr).
// Thread-safety: every method is safe from any thread. Lock order: the
// BlockStore's lock -> LiveEngine::mu_ (the adapter is called under the
// store's lock); LiveEngine never calls the store or the backend.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "igtcache/policy.h"
#include "src/engine/policy_engine.h"

namespace igt::engine {

struct LivePrefetch {
  std::string key;    // object key
  std::string etag;   // version the read saw
  uint64_t size = 0;  // object size
  uint64_t first_unit = 0, last_unit = 0;
  bool fill = false;  // PrefetchRange::fill: Prefetcher::Fill, not Submit
  uint64_t fill_bytes = 0;  // PrefetchRange::fill_bytes
  bool background = false;  // PrefetchRange::background
};

class LiveEngine : public std::enable_shared_from_this<LiveEngine> {
 public:
  // Version (ETag, size) of an object from the mount's metadata, without
  // I/O; nullopt if unknown. Lets plans name files not read yet (next files
  // of a scan, unread items of an epoch).
  using VersionFn = std::function<std::optional<std::pair<std::string, uint64_t>>(const std::string& key)>;
  // `listing` (may be empty): files of a directory in listing order, for
  // next-file prefetching; called under the engine's lock.
  static Result<std::shared_ptr<LiveEngine>> Create(EngineOptions opts, stream::AccessStreamTree* tree,
                                                    ListingFn listing = {}, VersionFn version = {});

  // An EvictionPolicy that forwards the store's hooks to the engine.
  std::unique_ptr<EvictionPolicy> MakeEvictionAdapter();

  // A read the mount served (after the tree recorded it). Returns the
  // prefetch plan; files of the plan whose version is not known yet (never
  // read through this mount) are left out.
  std::vector<LivePrefetch> OnRead(uint64_t now_us, uint32_t pid, const std::string& key,
                                   const std::string& etag, uint64_t offset, uint64_t length,
                                   uint64_t size);

  // PolicyEngine::SubUnitBytes: the piece size a miss in `key` fetches
  // (ReadPipeline::Options::sub_unit_bytes), 0 for whole units.
  uint64_t SubUnitBytes(const std::string& key) const;
  // PolicyEngine::CachedBytes.
  uint64_t CachedBytes(const std::string& key) const;
  // PolicyEngine::ForcedLabel: the label an override forces on `key`, or -1.
  int ForcedLabel(const std::string& key) const;
  // The cache's size, when the store holds less than cache.max_bytes (a
  // volume smaller than it: BlockStore::limit_bytes).
  void SetCapacity(uint64_t bytes);
  // PolicyEngine::Admit: false under a never-cache prefix
  // (ReadPipeline::Options::admit).
  bool Admit(const std::string& key) const;

  // PolicyEngine::NoteGone: objects (or "dir/" prefixes) the source no
  // longer has; the versions reads saw of them are dropped too.
  void NoteGone(const std::vector<std::string>& paths);

  // PolicyEngine::NoteWarm (`igtcache warm` fetches units of `key`).
  void NoteWarm(const std::string& key);

  // SIGHUP: swap in a new policy file; the cache and its units stay. A
  // failure is recorded (stats: policy_reload_failures, policy_reload_error)
  // and the old policy kept; a success clears the error.
  Status Reload(PolicyFile pf);
  // A reload that failed before Reload (the file did not load or validate).
  void NoteReloadFailure(const std::string& message);

  nlohmann::json StatsJson() const;
  std::string_view policy() const { return policy_; }

 private:
  class Adapter;
  LiveEngine(std::unique_ptr<PolicyEngine> e, std::string policy, VersionFn version)
      : engine_(std::move(e)), policy_(std::move(policy)), version_(std::move(version)) {
    NoteNeverCache();
  }
  uint64_t NowUs() const;
  void NoteReloadFailureLocked(const std::string& message);  // requires mu_
  // never_cache_ from the engine's policy file (at creation and each reload). Requires mu_ or construction.
  void NoteNeverCache();

  // Whether any override says never_cache: Admit, asked on every cache hit,
  // takes mu_ only then.
  std::atomic<bool> never_cache_{false};

  mutable std::mutex mu_;  // guards everything below
  std::unique_ptr<PolicyEngine> engine_;
  const std::string policy_;
  const VersionFn version_;
  uint64_t reload_failures_ = 0;
  std::string reload_error_;  // of the latest reload, if it failed
  // Object versions seen by reads (for prefetching files of the plan),
  // bounded: cleared at kMaxVersions entries.
  struct Seen {
    std::string etag;  // the version the last read saw
    uint64_t size = 0;
  };
  std::unordered_map<std::string, Seen> versions_;
};

}  // namespace igt::engine
