#pragma once
// The concrete BlockStore (unit files + RocksDB index) and its test seams.
// BlockStore::Open(opts, metrics) is OpenDiskBlockStore(opts, metrics, {}).
//
// Behaviour worth knowing (the rest is in igtcache/block_store.h):
// - Corrupt index: if RocksDB reports the index under <dir>/index as corrupt,
//   it is moved aside to <dir>/index.corrupt (replacing an older one), a
//   warning is logged and the store starts empty; the now index-less unit
//   files are deleted by the start-up reconcile. The cache is disposable:
//   losing it costs refetches, never data. Other open failures (permissions,
//   I/O) are returned as errors naming the path.
// - Concurrent Put of the same unit: the first writer wins, the others return
//   Ok without writing (the bytes are identical: same key, etag and index).
// - Access state (last access, count) is kept in memory and persisted lazily:
//   at most every `access_flush_interval_us` (on a later Read/Put) and when the
//   store is destroyed. A crash loses only recency, never units.
// - RocksDB creates its own files with the process umask; they live in
//   <dir>/index, which is 0700, so no other user can reach them.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "igtcache/block_store.h"

namespace igt::cache {

struct VolumeSpace {
  uint64_t avail_bytes = 0;  // free to an unprivileged user (statvfs f_bavail)
  uint64_t total_bytes = 0;
  // Inodes (statvfs f_favail, f_files): a unit file takes one. 0 total: not
  // known (btrfs reports none), not checked.
  uint64_t avail_inodes = 0;
  uint64_t total_inodes = 0;
};

struct BlockStoreHooks {
  // Free/total space of the volume holding the cache dir. Default: statvfs.
  std::function<Result<VolumeSpace>(const std::string& dir)> volume_space;
  // Wall clock, us since the epoch (persisted last-access times). Must be > 0.
  // Default: std::chrono::system_clock.
  std::function<uint64_t()> now_us;
  // Default: 30 s. Longer loses more recency on a crash; shorter writes more.
  uint64_t access_flush_interval_us = 30'000'000;
  // Called by Put once the unit's room is reserved, before its file is
  // written (tests hold an insert in flight). Default: none.
  std::function<void(const UnitKey&)> reserved;
  // Called with an inline unit's record as read from the index, before it
  // is checked (tests damage it). Default: none.
  std::function<void(std::string& record)> inline_record_read;
  // Called with a unit file's path before it is read (a header or a range,
  // on a Read and at start-up); true makes the read fail with EIO (tests:
  // a failing disk). Default: none.
  std::function<bool(const std::string& path)> unit_read_error;
  // Called before a unit file is written; true makes the write fail as a
  // full disk quota does (EDQUOT; tests: a limit statvfs does not show).
  // Default: none.
  std::function<bool()> unit_write_full;
  // Called before an index write, and before the index is opened at
  // start-up; true makes it fail as a full disk quota does. Default: none.
  std::function<bool()> index_write_full;
  // True makes RocksDB's Resume() after a failed index write count as
  // failed (as RocksDB's own does after a refused write-ahead-log write).
  // Default: none.
  std::function<bool()> index_resume_fails;
};

Result<std::unique_ptr<BlockStore>> OpenDiskBlockStore(const BlockStoreOptions& opts, Metrics* metrics,
                                                       BlockStoreHooks hooks);

}  // namespace igt::cache
