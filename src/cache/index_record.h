#pragma once
// The RocksDB index of the SSD tier: key layout and the per-unit record.
//
// Keys:  "u/" + unit id  -> UnitRecord (below)
//        "a/" + unit id  -> AccessState: the unit's access state since its
//                           insert (the record's own fields are those of the
//                           insert; a cache dir of before 2026-11-28 has
//                           none, and its records' fields are the state)
//        "m/" + caller's key -> caller's bytes (BlockStore::PutMeta)
// A record is small, versioned, little-endian:
//   u8 version (1) | u32 len + object | u32 len + etag | u64 index |
//   u64 data_len | u32 len + rel_path | u64 last_access_us | u64 access_count
// A unit kept inline (its bytes in the record, no unit file: units of at
// most cache.inline_max_bytes, docs/ARCHITECTURE.md "Small units inline"):
//   u8 version (2) | the same fields, rel_path empty | u64 XXH3-64 of the
//   data | u32 len + data
// A build of before 2026-11-29 reads no version 2: its start-up drops those
// records (a refetch each), never serves them.
// An access state: u8 version (1) | u64 last_access_us | u64 access_count.
// Pure functions; thread-safety: reentrant.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "igtcache/block_store.h"

namespace igt::cache {

inline constexpr std::string_view kUnitKeyPrefix = "u/";
inline constexpr std::string_view kAccessKeyPrefix = "a/";
inline constexpr std::string_view kMetaKeyPrefix = "m/";

struct UnitRecord {
  UnitKey key;
  uint64_t data_len = 0;
  // "units/xx/<id>" relative to the cache dir (UnitRelPath; a cache dir of
  // before 2026-11-29 has "units/xx/yy/<id>"); empty for an inline unit.
  std::string rel_path;
  uint64_t last_access_us = 0;  // wall clock, us since the epoch
  uint64_t access_count = 0;    // reads served (not counting the insert)
  // An inline unit (version 2): its bytes, and whether they match the
  // record's checksum (false: corrupt, never served). Empty rel_path.
  bool is_inline = false;
  std::string inline_data;
  bool inline_data_ok = false;
};

// What the periodic flush persists of a cached unit. Kept apart from the
// record so that the index in memory needs no copy of the unit's object key
// and ETag to write it (about 150 bytes a unit).
struct AccessState {
  uint64_t last_access_us = 0;
  uint64_t access_count = 0;
};

std::string EncodeUnitRecord(const UnitRecord& r);
std::string EncodeAccessState(const AccessState& a);
std::optional<AccessState> DecodeAccessState(std::string_view bytes);
// nullopt if the bytes are not a well-formed record of a known version.
// An inline record's data is checked against its checksum
// (UnitRecord::inline_data_ok), not refused: the caller counts the corruption.
std::optional<UnitRecord> DecodeUnitRecord(std::string_view bytes);
// The record of a unit kept inline: its bytes, no file.
UnitRecord InlineUnitRecord(const UnitKey& key, std::string_view data, uint64_t last_access_us);
// The record of a unit file at `rel_path`.
UnitRecord FileUnitRecord(const UnitKey& key, uint64_t data_len, std::string rel_path, uint64_t last_access_us);
// What an inline unit's record takes in the index, counted against the
// cache limit like a unit file's blocks: its key and value.
uint64_t InlineRecordDiskBytes(size_t value_bytes);
// At most what an inline unit of `data_len` bytes of an object whose key
// has at most `object_key_bytes` takes (any etag the store accepts), for
// planning what fits (igtcache warm).
uint64_t InlineDiskBytesAtMost(uint64_t data_len, size_t object_key_bytes);
// At most what an object of `size` bytes takes cached as whole units of
// `unit` bytes, each of at most `inline_max` bytes inline (0: none), the
// others unit files (ObjectDiskBytesAtMost): a large object's last unit
// may be small enough to go inline.
uint64_t CachedObjectDiskBytesAtMost(uint64_t size, uint64_t unit, uint64_t inline_max, size_t object_key_bytes);

}  // namespace igt::cache
