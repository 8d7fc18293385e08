#pragma once
// Eviction policy interface used by the BlockStore to pick victims.
//
// A policy tracks cache units by an opaque id (the unit's index key) and their
// size. The BlockStore calls the hooks under its own lock, so a policy need
// not be thread-safe. The adaptive, stream-aware policies of DESIGN.md sec. 6
// plug in behind the same interface; `lru` is the foundation's default.
// Policies are created by name (MakeEvictionPolicy), like RocksDB plug-ins.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "igtcache/status.h"

namespace igt {

// Per-unit facts a stream-aware eviction module may use (DESIGN.md sec. 6).
// Modules that do not need them ignore them (the default OnInsertUnit
// forwards to OnInsert).
struct UnitMeta {
  // Position of the unit in its stream's scan order (listing rank of the file
  // times 2^32 plus the unit index): evict-behind keeps the lowest positions.
  uint64_t position = 0;
  // Inserted by a prefetch and not read yet (a readahead window unit).
  bool prefetched = false;
  uint64_t now_us = 0;  // the caller's clock at the insert (0 = unknown)
  // The unit's object key and unit number, when the caller knows them (the
  // BlockStore passes them; the policy engine needs them to find the stream).
  std::string_view object = {};
  uint64_t unit_index = 0;
  // What the unit takes on disk, as counted against the cache limit (the
  // BlockStore: header and data in whole blocks); 0 = `bytes`.
  uint64_t disk_bytes = 0;
  // The object version (ETag) the unit is of, when the caller knows it.
  std::string_view etag = {};
  // Not a read: a unit handed from one module to another (a relabel, a
  // reload) or restored at start-up. Modules that learn from reads
  // (evict-behind's reader cursors) skip it.
  bool replay = false;
  // The unit's aged weight when it was last evicted (WeightOf then, aged to
  // now_us), when the caller remembers it: `lfu` starts its count there
  // rather than at 0, so an item that keeps coming back is not a first
  // victim like a one-off (0 = none).
  double prior_weight = 0;
};

// One read of one reader, in unit positions (UnitMeta::position).
struct ReaderRead {
  uint64_t reader = 0;            // a pid or thread id
  uint64_t first = 0, last = 0;   // the units it read, [first, last]
  bool first_part = false;        // it began part-way into `first`
  bool last_part = false;         // it ended part-way through `last`, before the file's end
};

// Module parameters from the policy YAML (`{name: lfu, params: {...}}`),
// numbers only. A factory rejects a key it does not know, naming it.
using PolicyParams = std::map<std::string, double>;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  // A unit entered the cache (or was found in the index at start-up; then
  // `last_access_us` orders it among the others, 0 for a fresh insert).
  virtual void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) = 0;
  // A cached unit was read.
  virtual void OnAccess(const std::string& id) = 0;
  // A unit left the cache for any reason (eviction, corruption, invalidation).
  virtual void OnRemove(const std::string& id) = 0;
  // The next unit to evict, without removing it (the store calls OnRemove once
  // it is gone). nullopt when the policy tracks nothing.
  virtual std::optional<std::string> PickVictim() = 0;
  virtual size_t size() const = 0;

  // --- Optional hooks of stream-aware modules (defaults keep the flat
  // behaviour above, so the BlockStore may keep calling only the above). ---

  // OnInsert with the unit's metadata.
  virtual void OnInsertUnit(const std::string& id, uint64_t bytes, uint64_t last_access_us,
                            const UnitMeta& meta) {
    OnInsert(id, bytes, last_access_us);
  }
  // A read hit that served `bytes` of the unit (per-stream hit accounting).
  virtual void OnAccessBytes(const std::string& id, uint64_t bytes) { OnAccess(id); }
  // OnAccess with the caller's clock (frequency ageing).
  virtual void OnAccessAt(const std::string& id, uint64_t now_us) { OnAccess(id); }
  // A new epoch of the stream began (every cached unit becomes "not yet read
  // this epoch"). Epoch-aware modules only.
  virtual void OnEpoch() {}
  // A module-defined weight of the next victim, comparable across streams of
  // the same module: `lfu` returns the victim's aged access count. Negative
  // when the module has no such notion.
  virtual double VictimWeight() const { return -1; }
  // The same weight for a unit the module holds (`lfu`: its aged count), as
  // of the latest clock it saw; negative when unknown or not held.
  virtual double WeightOf(const std::string& id) const { return -1; }
  // A read by a named reader (ReaderRead). The policy engine calls it for
  // each read, before or after the read's hits and inserts; modules that
  // follow readers (evict-behind) then tell them apart by name.
  virtual void OnReaderAt(const ReaderRead& read) {}
  // Asked by the BlockStore before an insert that must evict to make room:
  // false if the unit would be its own first victim once inserted (`keep`: a
  // demand miss in a full stream read uniformly at random). The store then
  // caches nothing and evicts nothing for it (the simulator asks too). The
  // store, and the simulator, evict before they insert: `keep` would
  // otherwise give up the newest unit not yet read this epoch, a prefetched
  // one, for a unit it would evict first.
  virtual bool AdmitUnit(const std::string& id, uint64_t bytes, const UnitMeta& meta) {
    return !InsertIsFirstVictim(meta);
  }
  // Would a unit inserted now with `meta` be this module's next victim?
  // (The policy engine's AdmitUnit asks the module of the unit's stream,
  // when that stream is the one giving space.)
  virtual bool InsertIsFirstVictim(const UnitMeta& meta) const { return false; }
  // The next victim for which `skip` is false, in PickVictim's order (the
  // policy engine's, passing over every unit a reader is part-way through);
  // nullopt: none, or not supported (the default).
  virtual std::optional<std::string> PickVictimSkipping(const std::function<bool(const std::string&)>& skip) {
    return std::nullopt;
  }
  // The next victim other than `id` (PickVictimSkipping of that one unit).
  std::optional<std::string> PickVictimBut(const std::string& id) {
    return PickVictimSkipping([&](const std::string& u) { return u == id; });
  }
};

// Built-in modules (policies/registry.cc): "lru" (default), "fifo", "lfu",
// "2random", "keep", "evict-behind". Unknown names give InvalidArgument
// listing the known ones; unknown or out-of-range params name the key.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string& name);
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string& name,
                                                           const PolicyParams& params);
std::vector<std::string> EvictionPolicyNames();

// ---------------------------------------------------------------------------
// Prefetch modules (DESIGN.md sec. 6): after each read, a module proposes
// ranges of units to fetch ahead. Modules keep their own bounded per-file
// state; the engine calls them under its own lock (no thread-safety needed).

struct PrefetchRange {
  std::string path;        // object key relative to the mount root
  uint64_t file_size = 0;  // bytes
  uint64_t first_unit = 0, last_unit = 0;  // inclusive
  // Fetch the range in the background as threads and budget allow, waiting
  // for room rather than being dropped (a whole-file fill).
  bool fill = false;
  // A fill that fetches at most this many bytes of the range's missing
  // units (0: all of them). Proposed again for a file being filled, it
  // replaces the limit of the fill already under way (less what it has in
  // flight): the room it may take is recomputed on every read.
  uint64_t fill_bytes = 0;
  // Speculative (an epoch's unread items, a directory's warm-up): no reader
  // is about to ask for it, so the live prefetcher runs it after readahead.
  bool background = false;
};

// A file in a directory listing (listing order = byte order of the key).
struct ListedFile {
  std::string path;     // a directory's ends in '/'
  uint64_t size = 0;
  bool is_dir = false;  // a subdirectory (listings only)
};

struct PrefetchContext {
  uint64_t now_us = 0;
  uint32_t pid = 0;
  std::string_view path;   // the file just read
  uint64_t file_size = 0;
  uint64_t offset = 0, length = 0;
  uint64_t unit_bytes = 1 << 20;
  // The read starts where this reader's previous read of the file ended
  // (the engine tracks it per (pid, file)).
  bool continues = false;
  // Labels of the governing streams (igt::stream::Label values: 0 unknown,
  // 1 sequential, 2 random, 3 skewed): the file at block granularity and its
  // directory at file granularity.
  int file_label = 0;
  int dir_label = 0;
  // Up to `n` files after `path` in its directory's listing order.
  std::function<std::vector<ListedFile>(std::string_view path, size_t n)> next_files;
  // Up to `n` files of the governing uniform stream not yet read in its
  // current epoch and not cached (epoch-aware prefetching); empty if none.
  std::function<std::vector<ListedFile>(size_t n)> unread_items;
  // Of each unread item, at most its first this many units may be proposed
  // (0: all); a reader's readahead carries on from there. Binding: the
  // engine counts an item's planned bytes as this much (room, in flight).
  uint64_t item_max_units = 0;
  // In a file read at random: the bytes this reader's run of reads is still
  // expected to read (its stream's usual run length, less this run's so far;
  // a crop of an audio file, a clip of a video); readahead in the file stays
  // within it. UINT64_MAX: not known.
  uint64_t run_bytes_left = UINT64_MAX;
  // The furthest byte the reader's run has read, when the read continues a
  // run (0: not known): readahead goes on from there, not from a late read
  // behind it.
  uint64_t run_end = 0;
};

class PrefetchPolicy {
 public:
  virtual ~PrefetchPolicy() = default;
  virtual std::string_view name() const = 0;
  // Appends the ranges to fetch ahead (possibly already cached: the caller
  // skips those).
  virtual void Plan(const PrefetchContext& ctx, std::vector<PrefetchRange>& out) = 0;
  // A unit this module prefetched for `path` was evicted before it was read:
  // shrink that file's window.
  virtual void OnWasted(std::string_view path) {}
};

// "none", "readahead" (fixed window), "adaptive-readahead", "epoch".
Result<std::unique_ptr<PrefetchPolicy>> MakePrefetchPolicy(const std::string& name,
                                                           const PolicyParams& params = {});
std::vector<std::string> PrefetchPolicyNames();

}  // namespace igt
