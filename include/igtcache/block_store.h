#pragma once
// BlockStore: the SSD tier (DESIGN.md sec. 4).
//
// One file per cache unit under <dir>/units/, fanned out by hash, each with a
// versioned, checksummed header; RocksDB index under <dir>/index/. A unit is
// identified by (object key, ETag, unit index): a changed object gets new
// units and the old ones can never be served, they just age out.
//
// The cache is advisory: every cache-side failure (missing file, bad
// checksum, I/O error, disk full) is counted in Metrics and reported as a
// miss / a skipped insert, never as an error to the reader.
//
// Ownership: the store owns the RocksDB instance and the lock on <dir>/LOCK;
// a second process opening the same dir gets Code::kBusy.
// Thread-safety: every public method is safe to call from many threads.

#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "igtcache/policy.h"
#include "igtcache/status.h"

namespace igt {

struct Metrics;

struct UnitKey {
  std::string object;   // object key relative to the source root
  std::string etag;     // object version; part of the identity
  uint64_t index = 0;   // unit number: bytes [index*unit_size, ...), or a sub-unit (below)
};

// Sub-units (DESIGN.md sec. 4): on a miss in a file read at random, igt
// fetches and caches only the 2^shift-byte pieces the read covers instead of
// the whole unit. A sub-unit's index names its size and byte offset, so it
// never depends on the unit size a cache dir was filled with:
//   bit 63 set | shift << 56 | offset >> shift.
constexpr uint64_t kSubUnitBit = 1ull << 63;
inline uint64_t SubUnitIndex(uint64_t offset, unsigned shift) {
  return kSubUnitBit | (uint64_t(shift) << 56) | (offset >> shift);
}
inline bool IsSubUnit(uint64_t index) { return (index & kSubUnitBit) != 0; }
inline unsigned SubUnitShift(uint64_t index) { return unsigned(index >> 56) & 0x7f; }
inline uint64_t SubUnitOffset(uint64_t index) {
  return (index & ((1ull << 56) - 1)) << SubUnitShift(index);
}
// Calls fn(index, offset) for each sub-unit of `sub` bytes (a power of two)
// that covers part of the object's bytes [from, to).
template <class Fn>
void ForEachSubUnit(uint64_t from, uint64_t to, uint64_t sub, Fn&& fn) {
  const unsigned shift = static_cast<unsigned>(std::countr_zero(sub));
  for (uint64_t p = from & ~(sub - 1); p < to; p += sub) fn(SubUnitIndex(p, shift), p);
}

struct BlockStoreOptions {
  std::string dir;                  // created 0700 if absent
  // Default: 10 GiB. Disk use of the unit files kept: header + data of each,
  // in whole 4 KiB blocks (a 110,000-byte file counts 112 KiB); of an inline
  // unit, its record's key and value. The rest of the index and the
  // directories are not counted (docs/ARCHITECTURE.md, "Disk use").
  uint64_t max_bytes = 10ull << 30;
  double min_free_ratio = 0.05;     // Default: 0.05. Free space kept on the volume.
  // Units of at most this many bytes are kept inline in the index (one
  // RocksDB record with their bytes and a checksum) instead of a unit file
  // of whole 4 KiB blocks, an inode and a temp file renamed into place
  // (docs/ARCHITECTURE.md, "Small units inline"). 0: every unit is a file.
  // Default here: 0 (the config default, cache.inline_max_bytes, is not).
  uint64_t inline_max_bytes = 0;
  std::string eviction = "lru";     // Default here: lru (the config default, cache.eviction, is igt). See MakeEvictionPolicy.
  // If set, the eviction policy comes from here instead of `eviction` (the
  // live mount's policy engine, src/engine/live_engine.h). Called once, in Open.
  std::function<std::unique_ptr<EvictionPolicy>()> make_policy;
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // Opens (creating if needed) the cache dir, takes its lock, reconciles the
  // index with the unit files (no data scan). `metrics` may be null.
  static Result<std::unique_ptr<BlockStore>> Open(const BlockStoreOptions& opts, Metrics* metrics);

  // Copies bytes [offset, offset+len) of a cached unit into `out` after
  // verifying the checksums that cover them. Returns the bytes copied, or
  // nullopt on a miss (absent, corrupt -> dropped, I/O error). `hit` false:
  // the reader missed and waited for a fetch that has inserted the unit
  // since; the policy sees a read (OnAccess), not a hit of these bytes.
  virtual std::optional<size_t> Read(const UnitKey& key, uint64_t offset, size_t len, char* out,
                                     bool hit = true) = 0;

  // Stores a complete unit (temp file + rename, then the index entry),
  // evicting as needed. Failures are counted and returned, never fatal.
  // `prefetched`: fetched ahead of any read (UnitMeta::prefetched for the
  // eviction policy), not for a reader's miss.
  virtual Status Put(const UnitKey& key, std::string_view data, bool prefetched = false) = 0;

  virtual bool Contains(const UnitKey& key) = 0;
  // Drops a unit if present (e.g. the object changed).
  virtual void Remove(const UnitKey& key) = 0;

  // Disk use of the units held, as counted against limit_bytes().
  virtual uint64_t used_bytes() const = 0;
  virtual uint64_t limit_bytes() const = 0;
  virtual uint64_t unit_count() const = 0;
  // Of those, the units kept inline in the index (no unit file), and the
  // largest unit it keeps so (BlockStoreOptions::inline_max_bytes).
  virtual uint64_t inline_unit_count() const { return 0; }
  virtual uint64_t inline_max_bytes() const { return 0; }
  // Unit files kept open for later reads (an fd each; bounded).
  virtual uint64_t open_unit_files() const { return 0; }
  // The last insert failed (cache volume full, write errors, index not
  // writable); cleared by the next that succeeds. Prefetching stops meanwhile:
  // its units could only be fetched and thrown away.
  virtual bool inserts_failing() const { return false; }
  // Called about once a second, off the read path (the mount's maintenance
  // thread). Looks whether the cache dir (or its index) was deleted under
  // the store; if so, forgets every unit (as a failed insert finds out):
  // with every read a hit, nothing else would notice. Saves the access
  // state (last access, count) of units read since the last save, once the
  // flush interval has passed.
  virtual void Maintain() {}

  // Small metadata records (directory listings, attributes) kept in the same
  // RocksDB under their own key space, so a remount starts warm.
  virtual Status PutMeta(std::string_view key, std::string_view value) = 0;
  // nullopt when absent, or when it cannot be read (logged once).
  virtual std::optional<std::string> GetMeta(std::string_view key) = 0;
  // The same, telling the two apart: nullopt when absent, an error when it
  // cannot be read.
  virtual Result<std::optional<std::string>> LookupMeta(std::string_view key) = 0;
  virtual void DeleteMeta(std::string_view key) = 0;
  // Deletes every metadata record whose key starts with `prefix`; the count.
  virtual Result<uint64_t> DeleteMetaPrefix(std::string_view prefix) = 0;
};

// A unit's index means bytes [index*unit_size, ...): a cache filled with
// one unit size would serve wrong bytes under another. The size is recorded
// (meta record "c/unit_size_bytes") on first use. InvalidArgument if the
// store records another size; Corruption if it holds units but no readable
// record (a lost or unreadable record must not be taken for a fresh cache);
// the read's or the write's error if reading or recording fails.
Status CheckUnitSize(BlockStore& store, uint64_t unit_size_bytes);

// Saved directory listings name the objects, sizes and versions of one
// source: a cache dir mounted again with another source (another bucket,
// prefix, endpoint or local directory) would list and serve the old
// source's objects until each listing's TTL ran out. The source is recorded
// (meta record "c/source", BlockStore's Describe()); when it differs, every
// saved listing ("l/...") is dropped and the previous source returned (the
// caller warns). Units stay: they are keyed by object key and version, and
// a version (ETag, or a local file's size, mtime, inode and birth time)
// does not repeat across sources with other bytes. nullopt when the source
// is the recorded one or none was recorded.
Result<std::optional<std::string>> CheckSource(BlockStore& store, const std::string& source);
// The source CheckSource recorded last, if any; changes nothing.
Result<std::optional<std::string>> RecordedSource(BlockStore& store);

}  // namespace igt
