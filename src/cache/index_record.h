#pragma once
// The RocksDB index of the SSD tier: key layout and the per-unit record.
//
// Keys:  "u/" + unit id  -> UnitRecord (below)
//        "m/" + caller's key -> caller's bytes (BlockStore::PutMeta)
// A record is small, versioned, little-endian:
//   u8 version (1) | u32 len + object | u32 len + etag | u64 index |
//   u64 data_len | u32 len + rel_path | u64 last_access_us | u64 access_count
// Pure functions; thread-safety: reentrant.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "igtcache/block_store.h"

namespace igt::cache {

inline constexpr std::string_view kUnitKeyPrefix = "u/";
inline constexpr std::string_view kMetaKeyPrefix = "m/";

struct UnitRecord {
  UnitKey key;
  uint64_t data_len = 0;
  std::string rel_path;         // "units/xx/yy/<id>", relative to the cache dir
  uint64_t last_access_us = 0;  // wall clock, us since the epoch
  uint64_t access_count = 0;    // reads served (not counting the insert)
};

std::string EncodeUnitRecord(const UnitRecord& r);
// nullopt if the bytes are not a well-formed record of a known version.
std::optional<UnitRecord> DecodeUnitRecord(std::string_view bytes);

}  // namespace igt::cache
