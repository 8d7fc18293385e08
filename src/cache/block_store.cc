// DiskBlockStore: the SSD tier (DESIGN.md sec. 4; contract in
// igtcache/block_store.h, specifics in src/cache/disk_block_store.h).
//
// State and its invariants (all guarded by mu_):
//   index_     id -> Entry for every unit whose file is in place and whose
//              index record is written (an inline unit: whose record, with
//              its bytes, is written). INVARIANT: the policy tracks exactly
//              the ids of index_; used_bytes_ = sum of their disk_bytes
//              (UnitDiskBytes: header + data in whole file system blocks;
//              InlineRecordDiskBytes for an inline unit).
//   busy_      ids whose file is being written (Put) or deleted (evict,
//              remove, drop). An id is never in index_ and busy_ at once, so
//              no two threads touch the same unit file concurrently.
//   reserved_bytes_  disk bytes of Puts in flight; used + reserved <= max.
//   dirty_     ids in index_ whose access state is not yet persisted.
// File and RocksDB I/O happen outside mu_; only map/policy updates inside.

#include <fcntl.h>
#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <list>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "igtcache/metrics.h"
#include "igtcache/policy.h"
#include "src/cache/cache_dir.h"
#include "src/cache/disk_block_store.h"
#include "src/cache/index_record.h"
#include "src/cache/unit_file.h"

namespace igt {
namespace cache {
namespace {

// RocksDB sizing: the index holds one small record per unit (~100 bytes) plus
// metadata; a 10 GiB cache of 1 MiB units is ~1 MB of index. Keep RocksDB's
// footprint small next to the page cache the data files want.
constexpr size_t kIndexBlockCacheBytes = 8 << 20;   // 8 MiB
constexpr size_t kIndexWriteBufferBytes = 4 << 20;  // 4 MiB memtable (~40k records)
constexpr size_t kIndexManifestPreallocBytes = 1 << 20;
// What the index takes on the volume beyond its records: the log (1.1x
// the write buffer, preallocated), the MANIFEST, and a flush's table.
constexpr uint64_t kIndexReserveBytes =
    kIndexWriteBufferBytes * 11 / 10 + kIndexManifestPreallocBytes + kIndexWriteBufferBytes;
constexpr int kIndexMaxOpenFiles = 256;
// Verified unit headers kept in memory (Entry::header), by their size in
// memory (~2.3 KiB for a 1 MiB unit of format version 2): at most 16 MiB.
constexpr size_t kMaxCachedHeaderBytes = 16 << 20;
size_t HeaderMemBytes(const UnitHeader& h) { return sizeof(UnitHeader) + h.etag.size() + 8 * h.chunk_sums.size(); }
// Unit files kept open after their write or a read (Entry::file), least
// recently used closed first: a read skips the path lookup (three directory
// levels, each a disk read once the kernel has dropped its dentries) and the
// open. At most this many (~1 KiB of kernel memory each), and at most a
// quarter of RLIMIT_NOFILE (`igtcache mount` raises its soft limit to the
// hard one at start-up).
constexpr size_t kMaxOpenUnitFiles = 4096;
// Unit file reads failing with an I/O error, in a row, that pause writing
// unit files, and for how long (DiskBlockStore::NoteReadError).
constexpr uint32_t kReadErrorsFailing = 8;
constexpr uint64_t kReadFailingPauseUs = 60'000'000;
// Unit files whose header cannot be read at start-up (I/O errors) that are
// left in place and the rest served; more than this, and more than a
// quarter of the units, fail the start-up (a failing disk).
constexpr size_t kMaxUnreadableAtStart = 16;
// Access-state records built per hold of the store's lock (WriteAccessState).
constexpr size_t kFlushChunk = 1024;
// Threads for disk work over many unit files at once: the start-up's header
// checks and listing, and a large batch of unlinks. One small random I/O per
// unit on a cold disk: a million header checks took 71 s on one thread
// (docs/BENCHMARKS.md, "Many small files (1,000,000), restart").
constexpr unsigned kIoThreads = 16;
// Unit files without a record that start-up deletes with only an info line:
// a crash leaves at most the writes then in flight (prefetch and FUSE
// threads); more is a warning (Reconcile).
constexpr size_t kStrayWarnFiles = 64;

// Runs fn(i) for every i in [0, n) on up to `threads` threads. If a thread
// cannot be started, the ones running (and the caller) do its share. The
// first exception `fn` throws (bad_alloc) stops the other calls and is
// rethrown here once every thread is joined, never on a worker (terminate).
template <class Fn>
void ParallelFor(size_t n, unsigned threads, const Fn& fn) {
  constexpr size_t kBatch = 64;
  std::atomic<size_t> next{0};
  std::mutex error_mu;
  std::exception_ptr error;  // guarded by error_mu
  auto work = [&] {
    try {
      for (size_t b; (b = next.fetch_add(kBatch)) < n;)
        for (size_t i = b; i < std::min(n, b + kBatch); ++i) fn(i);
    } catch (...) {
      next = n;  // the others stop at their next batch
      std::lock_guard lk(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  {
    std::vector<std::thread> pool;
    struct Join {
      std::vector<std::thread>& pool;
      ~Join() {
        for (auto& t : pool) t.join();
      }
    } join{pool};
    const size_t extra = std::min<size_t>(threads, (n + kBatch - 1) / kBatch);
    try {
      pool.reserve(extra);
      for (size_t t = 1; t < extra; ++t) pool.emplace_back(work);
    } catch (...) {
      // EAGAIN under a thread limit, or no memory: fewer threads.
    }
    work();
  }
  if (error) std::rethrow_exception(error);
}

// An open unit file; closed when the last holder lets go (an evicted
// unit's file is closed once the reads using it are done).
struct OpenUnitFile {
  explicit OpenUnitFile(int f) : fd(f) {}
  ~OpenUnitFile() { ::close(fd); }
  OpenUnitFile(const OpenUnitFile&) = delete;
  OpenUnitFile& operator=(const OpenUnitFile&) = delete;
  const int fd;
};

uint64_t SystemNowUs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

Result<VolumeSpace> StatVolume(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) {
    return Err(Status::IoError(fmt::format("statvfs {}: {}", dir, ErrnoText(errno))));
  }
  return VolumeSpace{uint64_t(v.f_bavail) * v.f_frsize, uint64_t(v.f_blocks) * v.f_frsize, uint64_t(v.f_favail),
                     uint64_t(v.f_files)};
}

Code CodeForErrno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return Code::kNoSpace;
    case EROFS: return Code::kReadOnly;
    case EACCES:
    case EPERM: return Code::kPermissionDenied;
    default: return Code::kIoError;
  }
}

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  Code c = s.IsCorruption() ? Code::kCorruption : s.IsNoSpace() ? Code::kNoSpace : Code::kIoError;
  return Status(c, fmt::format("{}: {}", what, s.ToString()));
}

std::string RandomHex() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}", rng());
}

// A RocksDB error that says the volume refused space: full, or over a disk
// quota (RocksDB reports EDQUOT as a plain IOError).
bool IsSpaceError(const rocksdb::Status& s) {
  if (s.IsNoSpace()) return true;
  const std::string t = s.ToString();
  return t.find("No space left") != std::string::npos || t.find("Disk quota exceeded") != std::string::npos;
}

class DiskBlockStore final : public BlockStore {
 public:
  DiskBlockStore(const BlockStoreOptions& opts, Metrics* metrics, BlockStoreHooks hooks, int lock_fd,
                 std::unique_ptr<rocksdb::DB> db, std::unique_ptr<EvictionPolicy> policy)
      : opts_(opts),
        metrics_(metrics ? metrics : &own_metrics_),
        hooks_(std::move(hooks)),
        lock_fd_(lock_fd),
        db_(std::move(db)),
        policy_(std::move(policy)) {
    last_flush_us_ = hooks_.now_us();
    limit_now_.store(opts_.max_bytes, std::memory_order_relaxed);
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
      max_open_files_ = std::min<size_t>(max_open_files_, nofile.rlim_cur / 4);
  }

  ~DiskBlockStore() override {
    if (!db_broken_.load() || TryResume(/*force=*/true)) FlushAccessState();
    if (db_ && db_broken_.load()) {
      // Closing would write to the failed WAL (an assertion in RocksDB):
      // leave the index as it is; the next start-up reconciles it.
      spdlog::warn("igtcache: cache index in {} was not writable; left as is for the next start", opts_.dir);
      (void)db_.release();
    }
    if (db_) {
      auto s = db_->Close();
      if (!s.ok()) spdlog::warn("igtcache: closing cache index in {}: {}", opts_.dir, s.ToString());
      db_.reset();
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  }

  Status Reconcile();
  // Hands the cache dir's lock back to the caller (closed by it, not by the
  // destructor).
  int TakeLockFd() { return std::exchange(lock_fd_, -1); }

  // Every index write goes through here. After a failed write (volume
  // read-only, I/O error) RocksDB must not be written again until it has
  // recovered: its WAL writer asserts on a write after an error (Debian's
  // build keeps assertions), which would abort the daemon. Until Resume()
  // succeeds (tried at most every kResumeIntervalUs), writes fail cleanly
  // and inserts degrade to misses.
  rocksdb::Status DbWrite(const std::function<rocksdb::Status()>& write) {
    // Its files were deleted with the dir: writes would only fill an
    // unlinked log (listings, access state) until the daemon exits.
    if (dir_gone_.load(std::memory_order_relaxed))
      return rocksdb::Status::IOError("cache dir deleted while mounted");
    if (db_broken_.load() && !TryResume(false))
      return rocksdb::Status::IOError("cache index not writable since an earlier error");
    const rocksdb::Status s =
        hooks_.index_write_full && hooks_.index_write_full() ? rocksdb::Status::IOError("Disk quota exceeded") : write();
    if (!s.ok()) {
      if (IsSpaceError(s)) index_space_error_.store(true);
      if (!db_broken_.exchange(true)) {
        metrics_->cache_index_broken.store(1, std::memory_order_relaxed);
        room_given_.store(false);
        broken_since_us_.store(hooks_.now_us());
        WarnOnce("index-broken", fmt::format("igtcache: cache index {}/index: write failed ({}); caching paused "
                                             "until the index recovers", opts_.dir, s.ToString()));
      }
    }
    return s;
  }
  bool TryResume(bool force) {
    const uint64_t now = hooks_.now_us();
    uint64_t last = last_resume_us_.load();
    if (!force && now - last < kResumeIntervalUs) return false;
    if (!last_resume_us_.compare_exchange_strong(last, now) && !force) return false;
    const rocksdb::Status s = hooks_.index_resume_fails && hooks_.index_resume_fails()
                                  ? rocksdb::Status::IOError("Resume refused (test)")
                                  : db_->Resume();
    if (!s.ok()) {
      // Said once, after a minute of tries: "caching paused until the index
      // recovers" read as if it would, and a tester's index (a WAL write
      // refused by a quota) never did while mounted.
      if (now - broken_since_us_.load() >= kResumeWarnAfterUs)
        WarnOnce("index-no-resume",
               fmt::format("igtcache: cache index {}/index: cannot recover from the failed write yet ({}); tried "
                           "again every {} s; if it stays so, remounting recovers it (unit files cached so far are "
                           "still served)",
                           opts_.dir, s.ToString(), kResumeIntervalUs / 1'000'000));
      return false;
    }
    index_space_error_.store(false);  // first: a write failing after the next line sets it again
    db_broken_.store(false);
    metrics_->cache_index_broken.store(0, std::memory_order_relaxed);
    spdlog::info("igtcache: cache index {}/index writable again", opts_.dir);
    return true;
  }
  // An index broken by a write refused for space (a disk quota the cache
  // filled refused its log before any unit file: no ceiling was set and
  // nothing evicted, a tester's btrfs qgroup): once per such failure, after
  // kRoomAfterUs of failed recoveries, the cache gives room back as for a
  // refused unit file (NoteVolumeFullLocked) and tries Resume() again.
  // RocksDB recovers from some such failures (a table), not from a refused
  // write-ahead-log write: that one stays until a remount (closing the
  // index then asserts inside RocksDB), which makes room itself if it must
  // (OpenChecked). Called by Maintain (not under mu_).
  void RecoverIndex() {
    if (!db_broken_.load() || !index_space_error_.load() || dir_gone_.load(std::memory_order_relaxed)) return;
    const uint64_t now = hooks_.now_us();
    if (room_given_.load() || now - broken_since_us_.load() < kRoomAfterUs) return;
    room_given_.store(true);
    std::vector<Victim> victims;
    {
      std::lock_guard lk(mu_);
      const auto space = hooks_.volume_space(opts_.dir);
      NoteVolumeFullLocked(space ? space->avail_bytes : 0, now, "an index write");
      const uint64_t limit = LimitLocked();
      // Few inline units: they free nothing until a compaction.
      EvictLocked([&](uint64_t) { return used_bytes_ + reserved_bytes_ <= limit; }, victims, [] { return true; });
    }
    // The files go; their records stay until the index takes writes again
    // (a record whose file is gone is dropped at start-up).
    DeleteDetached(victims, /*count_as_eviction=*/true);
    if (db_broken_.load()) (void)TryResume(/*force=*/true);
  }
  static constexpr uint64_t kRoomAfterUs = 10'000'000;
  std::atomic<bool> room_given_{false};  // RecoverIndex, for this failure
  std::atomic<bool> index_space_error_{false};  // the failed index write was refused for space
  static constexpr uint64_t kResumeIntervalUs = 5'000'000;  // 5 s: a cheap probe, not a busy loop
  static constexpr uint64_t kResumeWarnAfterUs = 60'000'000;
  std::atomic<uint64_t> broken_since_us_{0};  // when db_broken_ was last set
  // Why an insert met the volume's free-space floor.
  // `inodes`: of its inodes (df -i), not of its space.
  std::string VolumeFloorText(bool inodes = false) const {
    if (opts_.min_free_ratio <= 0) return inodes ? "cache volume has no free inodes" : "cache volume is full";
    return fmt::format("cache volume has less than {:.3g}% {} (cache.min_free_ratio)", opts_.min_free_ratio * 100,
                       inodes ? "of its inodes free" : "free");
  }

  std::optional<size_t> Read(const UnitKey& key, uint64_t offset, size_t len, char* out,
                             bool hit = true) override;
  Status Put(const UnitKey& key, std::string_view data, bool prefetched = false) override;
  bool Contains(const UnitKey& key) override {
    const std::string id = UnitId(key);
    std::lock_guard lk(mu_);
    return index_.contains(id);
  }
  void Remove(const UnitKey& key) override;

  uint64_t used_bytes() const override {
    std::lock_guard lk(mu_);
    return used_bytes_;
  }
  // max_bytes, or less while a volume refuses writes (NoteVolumeFullLocked).
  uint64_t limit_bytes() const override { return limit_now_.load(std::memory_order_relaxed); }
  uint64_t unit_count() const override {
    std::lock_guard lk(mu_);
    return index_.size();
  }
  uint64_t inline_unit_count() const override {
    std::lock_guard lk(mu_);
    return inline_units_;
  }
  uint64_t inline_max_bytes() const override { return opts_.inline_max_bytes; }
  uint64_t open_unit_files() const override {
    std::lock_guard lk(mu_);
    return open_lru_.size();
  }

  Status PutMeta(std::string_view key, std::string_view value) override {
    const std::string k = std::string(kMetaKeyPrefix) + std::string(key);
    return FromRocks(DbWrite([&] { return db_->Put(rocksdb::WriteOptions(), k, rocksdb::Slice(value.data(), value.size())); }),
                     fmt::format("cache index {}/index: put meta", opts_.dir));
  }
  std::optional<std::string> GetMeta(std::string_view key) override {
    auto v = LookupMeta(key);
    if (v) return *v;
    WarnOnce("meta-get", v.error().message());
    return std::nullopt;
  }
  Result<std::optional<std::string>> LookupMeta(std::string_view key) override {
    const std::string k = std::string(kMetaKeyPrefix) + std::string(key);
    std::string v;
    auto s = db_->Get(rocksdb::ReadOptions(), k, &v);
    if (s.ok()) return std::optional<std::string>(std::move(v));
    if (s.IsNotFound()) return std::optional<std::string>();
    return Err(FromRocks(s, fmt::format("cache index {}/index: get meta", opts_.dir)));
  }
  Result<uint64_t> DeleteMetaPrefix(std::string_view prefix) override {
    const std::string first = std::string(kMetaKeyPrefix) + std::string(prefix);
    rocksdb::WriteBatch batch;
    uint64_t n = 0;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(first); it->Valid() && it->key().starts_with(first); it->Next()) {
      batch.Delete(it->key());
      ++n;
    }
    if (auto s = FromRocks(it->status(), fmt::format("cache index {}/index: list meta", opts_.dir)); !s.ok())
      return Err(s);
    if (n == 0) return n;
    if (auto s = FromRocks(DbWrite([&] { return db_->Write(rocksdb::WriteOptions(), &batch); }),
                           fmt::format("cache index {}/index: delete meta", opts_.dir));
        !s.ok())
      return Err(s);
    return n;
  }
  void DeleteMeta(std::string_view key) override {
    const std::string k = std::string(kMetaKeyPrefix) + std::string(key);
    auto s = DbWrite([&] { return db_->Delete(rocksdb::WriteOptions(), k); });
    if (!s.ok()) WarnOnce("meta-del", fmt::format("cache index {}/index: delete meta: {}", opts_.dir, s.ToString()));
  }

 private:
  // No copy of the unit's object key and ETag (the record on disk has
  // them; the flush writes the access state under its own key): they were
  // about 150 bytes of every cached unit's memory.
  struct Entry {
    uint64_t data_len = 0;
    uint64_t disk_bytes = 0;  // UnitDiskBytes: what the file takes on the volume
    uint64_t last_access_us = 0;
    uint64_t access_count = 0;
    uint64_t gen : 63 = 0;  // distinguishes re-inserts of the same id
    // Its bytes are in its index record, not a unit file (no header, no
    // open file). A bit of gen's word: an Entry per unit, a million units.
    uint64_t is_inline : 1 = 0;
    // The unit file's header once a read verified it (kMaxCachedHeaderBytes at
    // most): later reads skip reading and parsing it again. A header never
    // changes for a gen; the chunk checksums it holds still verify the data.
    std::shared_ptr<const UnitHeader> header = {};
    // Kept open after a read (kMaxOpenUnitFiles), with its place in open_lru_.
    std::shared_ptr<OpenUnitFile> file = {};
    std::list<std::string>::iterator lru_pos = {};
  };
  struct Busy {
    bool deleting = false;   // false: a Put is writing it
    bool cancelled = false;  // Remove() arrived while a Put was writing it
  };
  struct Victim {
    std::string id;
    uint64_t bytes;       // data (the evicted_bytes metric)
    uint64_t disk_bytes;  // freed on the volume
    bool is_inline;       // no unit file to delete
  };

  std::string PathOf(std::string_view id) const { return opts_.dir + "/" + UnitRelPath(id); }
  // A unit's index keys go together: its record and its access state.
  static void DeleteUnitKeys(rocksdb::WriteBatch& batch, std::string_view id) {
    batch.Delete(std::string(kUnitKeyPrefix) + std::string(id));
    batch.Delete(std::string(kAccessKeyPrefix) + std::string(id));
  }

  // Drops what an entry holds in memory (its header, its open file). Requires mu_.
  void ForgetLocked(Entry& e) {
    if (e.header) cached_header_bytes_ -= HeaderMemBytes(*e.header);
    e.header.reset();
    if (e.file) open_lru_.erase(e.lru_pos);
    e.file.reset();
  }
  // Removes `id` from index_/policy and marks it busy-deleting. Requires mu_.
  Victim DetachLocked(const std::string& id) {
    auto it = index_.find(id);
    Victim v{id, it->second.data_len, it->second.disk_bytes, bool(it->second.is_inline)};
    used_bytes_ -= it->second.disk_bytes;
    if (it->second.is_inline) {
      --inline_units_;
      inline_bytes_ -= it->second.disk_bytes;
    }
    ForgetLocked(it->second);
    index_.erase(it);
    policy_->OnRemove(id);
    dirty_.erase(UnitIdBitsOf(id));
    busy_[id] = Busy{.deleting = true};
    return v;
  }
  // Evicts policy victims until `fits()` holds or nothing is left. Requires mu_.
  // `fits(freed)` gets the volume space detached so far: the disk bytes of
  // the unit files among the victims (an inline unit's record gives its
  // space back only at RocksDB's next compaction). Returns that sum.
  // Inline victims go too when only the volume's floor asks for room (they
  // free nothing there until a compaction): stopping at one, as until
  // 2026-11-29, stopped every insert while the policy's next victim was
  // inline, and a cache larger than its volume froze once the volume was
  // full (a black-box test: 64 MiB tmpfs, --cache-size 1G, 2,649 write
  // errors and a 40 MiB file fetched whole on every read). The caller
  // checks first that the unit files alone can free what the floor needs.
  // At most kMaxInlineForFloor of them per insert, though: a cache of many
  // small units ahead of its files would be drained at once, under mu_,
  // for space that comes back only later.
  // `only_volume()`: true once nothing but the floor asks for room.
  template <class Fits, class OnlyVolume>
  uint64_t EvictLocked(Fits fits, std::vector<Victim>& out, OnlyVolume only_volume) {
    uint64_t freed = 0;
    size_t strays = 0;  // victims the index does not hold
    size_t inline_for_floor = 0;
    while (!fits(freed)) {
      auto v = policy_->PickVictim();
      if (!v) break;
      auto e = index_.find(*v);
      if (e != index_.end() && e->second.is_inline && only_volume() && ++inline_for_floor > kMaxInlineForFloor) break;
      if (e == index_.end()) {
        // Cannot happen (INVARIANT). If a policy kept naming ids it does not
        // drop, this loop would spin holding mu_ and block every read: give
        // up after as many as the index holds (plus a few), and say so.
        policy_->OnRemove(*v);
        if (++strays > index_.size() + 16) {
          WarnOnce("evict-stray", fmt::format("igtcache: cache {}: the eviction policy names units the index "
                                              "does not hold ({}); evicting nothing more this time",
                                              opts_.dir, *v));
          break;
        }
        continue;
      }
      out.push_back(DetachLocked(*v));
      if (!out.back().is_inline) freed += out.back().disk_bytes;
    }
    return freed;
  }
  // Deletes files + index records of detached units, then clears busy_.
  void DeleteDetached(const std::vector<Victim>& victims, bool count_as_eviction);
  // Drops a unit found corrupt or missing, if it is still generation `gen`.
  void Drop(const std::string& id, uint64_t gen);
  // `read_bytes`: bytes served by a read hit (0: not a read, e.g. a racing Put).
  void Touch(const std::string& id, Entry& e, uint64_t read_bytes = 0) {
    if (read_bytes)
      policy_->OnAccessBytes(id, read_bytes);
    else
      policy_->OnAccess(id);
    e.last_access_us = hooks_.now_us();
    ++e.access_count;
    dirty_.insert(UnitIdBitsOf(id));
  }
  // Persists dirty access state if the flush interval has passed (or `force`).
  void FlushAccessState(bool force = true);
  // Takes the dirty ids into `ids` if a flush is due (or `force`); true if
  // it did. Requires mu_.
  using IdSet = std::unordered_set<UnitIdBits, UnitIdBitsHash, UnitIdBitsEq>;
  bool TakeDirtyLocked(IdSet& ids, bool force);
  // Persists the access state of `ids`, taking mu_ for kFlushChunk of them
  // at a time: tens of thousands of units touched since the last flush held
  // every hit and insert back for the whole batch. Not under mu_.
  void WriteAccessState(const IdSet& ids);
  // Reads bytes of an inline unit from its record, checked against the
  // record's key and checksum. NotFound: no record; Corruption; IoError.
  Result<size_t> ReadInline(const std::string& id, const UnitKey& key, uint64_t offset, size_t len, char* out);
  // After a read of `n` bytes of generation `gen` of `id`: the policy and
  // access state see it; a header read and verified, a file opened, are
  // kept for the next read (if not null). Returns n.
  size_t Touched(const std::string& id, uint64_t gen, size_t n, bool hit, std::shared_ptr<const UnitHeader> header,
                 std::shared_ptr<OpenUnitFile> file);
  // Writes the unit file (temp file + rename) and returns it open for reading.
  Result<std::shared_ptr<OpenUnitFile>> WriteUnit(const std::string& id, std::string_view header,
                                                  std::string_view data);
  // Keeps `file` open for `e` (Entry::file), closing the least recently used
  // one beyond max_open_files_. A file just read is most recently used; a
  // file just written (perhaps a prefetch never read) least, so a stream of
  // writes does not close the files readers use. Requires mu_.
  void KeepOpenLocked(const std::string& id, Entry& e, std::shared_ptr<OpenUnitFile> file, bool read) {
    if (e.file || !file || max_open_files_ == 0) return;
    if (open_lru_.size() >= max_open_files_) {
      auto old = index_.find(open_lru_.front());
      if (old != index_.end()) old->second.file.reset();
      open_lru_.pop_front();
    }
    e.lru_pos = open_lru_.insert(read ? open_lru_.end() : open_lru_.begin(), id);  // may throw: first
    e.file = std::move(file);
  }
  // Keeps a verified (or just written) header for `e`. Requires mu_.
  void KeepHeaderLocked(Entry& e, std::shared_ptr<const UnitHeader> header) {
    if (e.header || !header || cached_header_bytes_ + HeaderMemBytes(*header) > kMaxCachedHeaderBytes) return;
    cached_header_bytes_ += HeaderMemBytes(*header);
    e.header = std::move(header);
  }
  // Whether a file can be created and written in tmp/ now: a probe taken
  // before an insert evicts anything while writes have been failing.
  Status ProbeTmp() {
    const std::string path = opts_.dir + "/tmp/probe-" + RandomHex();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kFileMode);
    if (fd < 0 && errno == ENOENT) {  // tmp/ deleted (a tmp cleaner): made again
      if (auto s = EnsurePrivateSubdir(opts_.dir + "/tmp"); !s.ok()) return s;
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kFileMode);
    }
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      if (::write(fd, "p", 1) != 1) err = errno ? errno : EIO;
      if (::close(fd) != 0 && err == 0) err = errno;
      ::unlink(path.c_str());
    }
    if (err == 0) return Status::Ok();
    return Status(CodeForErrno(err), fmt::format("cannot write a temp file in {}/tmp: {}", opts_.dir, ErrnoText(err)));
  }
  bool inserts_failing() const override {
    return inserts_failing_.load(std::memory_order_relaxed) || dir_gone_.load(std::memory_order_relaxed) ||
           ReadFailing();
  }
  // A disk failing reads: a unit read that fails with an I/O error drops the
  // unit (one bad sector), and the next miss writes it again. On a dying
  // disk every read then failed, dropped, fetched from the bucket and wrote
  // a new file to the same disk, with prefetching going on (a review's
  // LD_PRELOAD test: 3 passes over 16 MiB, each as many failed reads and
  // new files as units). After kReadErrorsFailing such errors with no good
  // read between, unit files are not written for kReadFailingPauseUs (the
  // cache taking no inserts: misses fetch only what is read, prefetching
  // stops; small units kept in the index go on), then tried again.
  bool ReadFailing() const {
    const uint64_t until = read_failing_until_us_.load(std::memory_order_relaxed);
    return until != 0 && InWindow(hooks_.now_us(), until, kReadFailingPauseUs);
  }
  // now < until, and no further from it than the window is long: a wall
  // clock stepped back would otherwise stretch a pause by the step (a
  // reviewer: an hour back, an hour without unit files written).
  static bool InWindow(uint64_t now, uint64_t until, uint64_t window) { return now < until && until - now <= window; }
  void NoteReadError() {
    if (read_errors_in_row_.fetch_add(1, std::memory_order_relaxed) + 1 < kReadErrorsFailing) return;
    read_errors_in_row_.store(0, std::memory_order_relaxed);
    read_failing_until_us_.store(hooks_.now_us() + kReadFailingPauseUs, std::memory_order_relaxed);
    spdlog::warn("igtcache: {} reads of cache unit files in {}/units failed with I/O errors in a row: the disk may "
                 "be failing; not writing unit files for {} s (reads go to the backend)",
                 kReadErrorsFailing, opts_.dir, kReadFailingPauseUs / 1'000'000);
  }
  // A unit file write refused for space that the free-space check did not
  // foresee (a disk quota: statvfs does not count it; btrfs out of metadata
  // space): the cache keeps within what it holds now for kFullCeilingUs,
  // then tries to grow again. Without it no insert evicted (the volume
  // looked free, the cache under max_bytes), every one failed, and nothing
  // was cached again (a reviewer's finding). Requires mu_.
  // `what` the volume refused ("a unit file", "an index write").
  void NoteVolumeFullLocked(uint64_t avail_bytes, uint64_t now_us, std::string_view what = "a unit file") {
    auto Mib = [](uint64_t b) {
      return b < (1 << 20) ? fmt::format("{} bytes", b) : fmt::format("{:.1f} MiB", double(b) / double(1 << 20));
    };
    const uint64_t held = used_bytes_ + reserved_bytes_;
    if (held == 0) return;  // nothing to give back: the volume is full of others' files
    // Less some room for the index (its log and tables are written in the
    // same directory, under the same quota) and for space freed but not yet
    // credited back (btrfs qgroups: at the next commit): kept at exactly what
    // it held, a tester's btrfs qgroup refused the index's log a second
    // later, and the index stopped taking writes for the mount's life.
    const uint64_t room = std::min(held / 4, kIndexRoomBytes);  // < held: the ceiling is at least 1
    const uint64_t ceiling = std::min(held - room, opts_.max_bytes);
    // Said once at warning level; later ones at info level, when set again
    // after a lift or at most once a minute (each refused write lowers it):
    // a tester saw the limit fall 44.4 -> 32.4 MiB and lift without a word.
    if (warned_full_ceiling_ && (full_ceiling_until_us_ == 0 || now_us - last_ceiling_log_us_ >= kCeilingLogUs)) {
      last_ceiling_log_us_ = now_us;
      spdlog::info("igtcache: the volume of {} refused a write with {} free by statvfs again: the cache keeps within "
                   "{} for {} s",
                   opts_.dir, Mib(avail_bytes), Mib(ceiling), kFullCeilingUs / 1'000'000);
    }
    if (!warned_full_ceiling_) last_ceiling_log_us_ = now_us;
    warned_full_ceiling_ = true;
    full_ceiling_until_us_ = now_us + kFullCeilingUs;
    limit_now_.store(ceiling, std::memory_order_relaxed);
    WarnOnce("full-ceiling",
             fmt::format("igtcache: the volume of {} refused {} with {} free by statvfs (a disk quota?): the "
                         "cache keeps within {} for {} s at a time, evicting as it would at its limit",
                         opts_.dir, what, Mib(avail_bytes), Mib(ceiling), kFullCeilingUs / 1'000'000));
  }
  // The cache's limit now: max_bytes, or less after NoteVolumeFullLocked.
  // Requires mu_.
  uint64_t LimitLocked() {
    if (full_ceiling_until_us_ == 0) return opts_.max_bytes;
    if (!InWindow(hooks_.now_us(), full_ceiling_until_us_, kFullCeilingUs)) {
      full_ceiling_until_us_ = 0;
      limit_now_.store(opts_.max_bytes, std::memory_order_relaxed);
      spdlog::info("igtcache: cache {}: trying its whole limit again after a volume refused writes", opts_.dir);
      return opts_.max_bytes;
    }
    return limit_now_.load(std::memory_order_relaxed);
  }
  static constexpr uint64_t kFullCeilingUs = 300'000'000;  // 5 minutes
  static constexpr uint64_t kIndexRoomBytes = 16 << 20;      // NoteVolumeFullLocked
  uint64_t full_ceiling_until_us_ = 0;  // 0: no ceiling (guarded by mu_)
  bool warned_full_ceiling_ = false;    // NoteVolumeFullLocked (guarded by mu_)
  uint64_t last_ceiling_log_us_ = 0;    // NoteVolumeFullLocked (guarded by mu_)
  static constexpr uint64_t kCeilingLogUs = 60'000'000;
  // limit_bytes(): max_bytes (set in the constructor), or the ceiling while
  // there is one; written under mu_.
  std::atomic<uint64_t> limit_now_{0};
  Status WriteError(Status s) {
    inserts_failing_.store(true, std::memory_order_relaxed);
    Add(metrics_->cache_write_errors);
    if (DirGone()) {
      NoteDirGone();
      return s;
    }
    // Once per kind of error (its code and the errno text that ends its
    // message), not per path (a deleted directory made one line per
    // units/xx).
    const std::string& m = s.message();
    const size_t colon = m.rfind(": ");
    WarnOnce("write:" + std::to_string(static_cast<int>(s.code())) + ":" +
                 (colon == std::string::npos ? std::string() : m.substr(colon + 2)),
             fmt::format("igtcache: cannot write to the cache in {}: {} (serving from the backend; will retry)",
                         opts_.dir, s.ToString()));
    return s;
  }
  void Maintain() override {
    if (!dir_gone_.load(std::memory_order_relaxed) && DirGone()) NoteDirGone();
    // Here, not on the read that finds the interval passed: a busy cache's
    // flush (a million units read in 30 s: a 54 MB batch, ~0.7 s) stalled
    // that read, and index writes of inserts queued behind it (a review).
    FlushAccessState(/*force=*/false);
    RecoverIndex();
  }
  // The cache dir, or its index, no longer exists.
  bool DirGone() const {
    struct stat st;
    return (::stat(opts_.dir.c_str(), &st) != 0 && errno == ENOENT) ||
           (::stat((opts_.dir + "/index").c_str(), &st) != 0 && errno == ENOENT);
  }
  void NoteDirGone() {
    // Not made again: its index and unit files went with it.
    WarnOnce("dir-gone", fmt::format("igtcache: cache dir {} was deleted while mounted: nothing is cached any "
                                     "more and what was cached is gone; reads are served from the backend. "
                                     "Unmount and mount again to start a new cache there",
                                     opts_.dir));
    ForgetAll();
  }
  // The cache dir is gone (WriteError, Maintain): its units are no longer counted,
  // held open or planned with (the policy is told each one went), and no
  // insert is tried again (Put). Before (2026-11-28) the stats went on
  // counting the gone units, and every miss's insert failed and counted a
  // write error.
  // One pass under mu_ (a one-time event). The index is emptied before the
  // policy is told: an exception there (out of memory) leaves the policy
  // naming units the index does not hold, which eviction skips (EvictLocked).
  void ForgetAll() {
    if (dir_gone_.exchange(true)) return;
    metrics_->cache_dir_gone.store(1, std::memory_order_relaxed);
    std::lock_guard lk(mu_);
    std::vector<UnitIdBits> gone;
    gone.reserve(index_.size());
    for (auto& [bits, e] : index_) {
      ForgetLocked(e);
      gone.push_back(bits);
    }
    decltype(index_)().swap(index_);
    dirty_.clear();
    used_bytes_ = 0;
    inline_units_ = 0;
    inline_bytes_ = 0;
    for (const auto& bits : gone) try {
        policy_->OnRemove(UnitIdOf(bits));
      } catch (...) {
      }
  }
  void WarnOnce(const std::string& kind, const std::string& msg) {
    std::lock_guard lk(warn_mu_);
    if (warned_.insert(kind).second) spdlog::warn("{}", msg);
  }

  // Constant after construction.
  const BlockStoreOptions opts_;
  Metrics own_metrics_;  // used when the caller passes none
  Metrics* const metrics_;
  const BlockStoreHooks hooks_;
  int lock_fd_;  // -1 once handed back (TakeLockFd)
  std::unique_ptr<rocksdb::DB> db_;  // thread-safe itself

  // Lock order: mu_ before warn_mu_ (NoteVolumeFullLocked calls WarnOnce under mu_).
  mutable std::mutex mu_;
  // Keyed by the ids' bits, found with the ids themselves (UnitIdBitsHash).
  std::unordered_map<UnitIdBits, Entry, UnitIdBitsHash, UnitIdBitsEq> index_;  // guarded by mu_
  std::unique_ptr<EvictionPolicy> policy_;            // guarded by mu_
  std::unordered_map<std::string, Busy> busy_;        // guarded by mu_
  IdSet dirty_;                                       // guarded by mu_
  uint64_t used_bytes_ = 0;                           // guarded by mu_
  uint64_t reserved_bytes_ = 0;                       // guarded by mu_
  uint64_t reserved_files_ = 0;                       // unit files of Puts in flight; mu_
  uint64_t inline_units_ = 0;                         // entries of index_ with is_inline; mu_
  uint64_t inline_bytes_ = 0;                         // their part of used_bytes_; mu_
  uint64_t next_gen_ = 1;                             // guarded by mu_
  size_t cached_header_bytes_ = 0;                    // HeaderMemBytes of Entry::headers; mu_
  std::list<std::string> open_lru_;                   // ids with Entry::file, oldest first; mu_
  size_t max_open_files_ = kMaxOpenUnitFiles;         // set in the constructor from RLIMIT_NOFILE
  uint64_t last_flush_us_ = 0;                        // guarded by mu_

  std::mutex warn_mu_;
  std::set<std::string> warned_;  // guarded by warn_mu_: kinds already logged

  std::atomic<bool> db_broken_{false};       // an index write failed; see DbWrite
  std::atomic<bool> write_failing_{false};   // the last unit write failed (not for lack of space); see Put
  std::atomic<bool> inserts_failing_{false}; // the last Put failed, for any reason (inserts_failing())
  std::atomic<bool> dir_gone_{false};         // the cache dir was deleted under the mount (ForgetAll)
  // Reads of unit files that failed with an I/O error since the last one
  // that worked, and until when unit files are not written after
  // kReadErrorsFailing of them (ReadFailing, NoteReadError).
  std::atomic<uint32_t> read_errors_in_row_{0};
  std::atomic<uint64_t> read_failing_until_us_{0};
  static constexpr size_t kMaxInlineForFloor = 64;  // EvictLocked
  std::atomic<uint64_t> last_resume_us_{0};  // last Resume() attempt
};

void DiskBlockStore::DeleteDetached(const std::vector<Victim>& victims, bool count_as_eviction) {
  if (victims.empty()) return;
  // Whatever happens below, the ids leave busy_: a unit left "deleting"
  // would turn every later Put of it into a no-op.
  struct Unbusy {
    DiskBlockStore* store;
    const std::vector<Victim>& victims;
    ~Unbusy() {
      std::lock_guard lk(store->mu_);
      for (const auto& v : victims) store->busy_.erase(v.id);
    }
  } unbusy{this, victims};
  // Many victims (a start-up over a smaller limit evicts all the excess at
  // once: 98k unlinks took 7.4 s on one thread) are unlinked on several
  // threads; up to 64 on this one.
  ParallelFor(victims.size(), kIoThreads, [&](size_t i) {
    if (victims[i].is_inline) return;  // its record goes below
    const std::string path = PathOf(victims[i].id);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      WarnOnce("unlink", fmt::format("igtcache: cannot delete cache unit {}: {}", path, ErrnoText(err)));
    }
    // Its fan-out directory stays (256 at most, docs/ARCHITECTURE.md "Disk
    // use"): removing it when empty, as the two-level layout of before
    // 2026-11-29 did (256 x 256 directories), only made it again later.
  });
  rocksdb::WriteBatch batch;
  for (const auto& v : victims) {
    DeleteUnitKeys(batch, v.id);
    if (count_as_eviction) {
      Add(metrics_->evictions);
      Add(metrics_->evicted_bytes, v.bytes);
    }
  }
  auto s = DbWrite([&] { return db_->Write(rocksdb::WriteOptions(), &batch); });
  if (!s.ok()) {
    // A stale record whose file is gone is dropped by the next start-up.
    // An inline unit's record is whole: the next start-up loads it again
    // (its bytes still checked), the store did not count it meanwhile.
    WarnOnce("index-delete", fmt::format("igtcache: cache index {}/index: delete: {}", opts_.dir, s.ToString()));
  }
}

void DiskBlockStore::Drop(const std::string& id, uint64_t gen) {
  std::vector<Victim> v;
  {
    std::lock_guard lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end() || it->second.gen != gen) return;
    v.push_back(DetachLocked(id));
  }
  DeleteDetached(v, /*count_as_eviction=*/false);
}

void DiskBlockStore::Remove(const UnitKey& key) {
  const std::string id = UnitId(key);
  std::vector<Victim> v;
  {
    std::lock_guard lk(mu_);
    if (index_.contains(id)) {
      v.push_back(DetachLocked(id));
    } else if (auto b = busy_.find(id); b != busy_.end() && !b->second.deleting) {
      b->second.cancelled = true;  // the writing Put deletes its unit when done
    }
  }
  DeleteDetached(v, /*count_as_eviction=*/false);
}

bool DiskBlockStore::TakeDirtyLocked(IdSet& ids, bool force) {
  const uint64_t now = hooks_.now_us();
  if (dirty_.empty() || (!force && now - last_flush_us_ < hooks_.access_flush_interval_us)) return false;
  last_flush_us_ = now;
  ids.clear();
  ids.swap(dirty_);
  return true;
}

void DiskBlockStore::FlushAccessState(bool force) {
  IdSet ids;
  {
    std::lock_guard lk(mu_);
    if (!TakeDirtyLocked(ids, force)) return;
  }
  WriteAccessState(ids);
}

void DiskBlockStore::WriteAccessState(const IdSet& ids) {
  // In batches of kFlushChunk records: one write of them all held the index's
  // write queue (inserts' records) for as long as it took.
  rocksdb::WriteBatch batch;
  std::vector<std::pair<const UnitIdBits*, AccessState>> recs;
  rocksdb::Status s;
  for (auto it = ids.begin(); it != ids.end() && s.ok();) {
    recs.clear();
    {
      std::lock_guard lk(mu_);
      for (size_t n = 0; n < kFlushChunk && it != ids.end(); ++n, ++it)
        if (auto e = index_.find(*it); e != index_.end())
          recs.emplace_back(&*it, AccessState{e->second.last_access_us, e->second.access_count});
    }
    batch.Clear();
    for (const auto& [id, a] : recs) batch.Put(std::string(kAccessKeyPrefix) + UnitIdOf(*id), EncodeAccessState(a));
    // Outside mu_: if a unit is evicted meanwhile, this may write its access
    // state after the delete; the next start-up drops one without a record.
    if (batch.Count() > 0) s = DbWrite([&] { return db_->Write(rocksdb::WriteOptions(), &batch); });
  }
  if (!s.ok()) {
    WarnOnce("index-access", fmt::format("igtcache: cache index {}/index: saving access state: {}", opts_.dir,
                                         s.ToString()));
    // Not saved: the units still cached stay dirty for the next flush.
    std::lock_guard lk(mu_);
    for (const auto& id : ids)
      if (index_.contains(id)) dirty_.insert(id);
  }
}

Result<size_t> DiskBlockStore::ReadInline(const std::string& id, const UnitKey& key, uint64_t offset, size_t len,
                                          char* out) {
  rocksdb::PinnableSlice v;
  auto s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), std::string(kUnitKeyPrefix) + id, &v);
  if (s.IsNotFound()) return Err(Status::NotFound("its index record is gone"));
  if (s.IsCorruption()) return Err(Status::Corruption(s.ToString()));
  if (!s.ok()) return Err(Status::IoError(s.ToString()));
  std::string_view bytes(v.data(), v.size());
  std::string damaged;  // the test hook's copy
  if (hooks_.inline_record_read) {
    damaged.assign(bytes);
    hooks_.inline_record_read(damaged);
    bytes = damaged;
  }
  auto rec = DecodeUnitRecord(bytes);
  if (!rec || !rec->is_inline || rec->key.object != key.object || rec->key.etag != key.etag ||
      rec->key.index != key.index)
    return Err(Status::Corruption("its index record is not an inline record of this unit"));
  if (!rec->inline_data_ok) return Err(Status::Corruption("checksum mismatch"));
  const std::string& data = rec->inline_data;
  if (offset >= data.size() || len == 0) return size_t{0};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, data.size() - offset));
  std::memcpy(out, data.data() + offset, n);
  return n;
}

std::optional<size_t> DiskBlockStore::Read(const UnitKey& key, uint64_t offset, size_t len, char* out, bool hit) {
  const std::string id = UnitId(key);
  uint64_t gen;
  bool is_inline;
  std::shared_ptr<const UnitHeader> header;
  std::shared_ptr<OpenUnitFile> file;
  {
    std::lock_guard lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    gen = it->second.gen;
    is_inline = it->second.is_inline;
    header = it->second.header;
    file = it->second.file;
    if (file) open_lru_.splice(open_lru_.end(), open_lru_, it->second.lru_pos);
  }
  // Still this unit, this generation (not evicted or replaced since the
  // lookup above).
  auto still_indexed = [&] {
    std::lock_guard lk(mu_);
    auto it = index_.find(id);
    return it != index_.end() && it->second.gen == gen;
  };
  if (is_inline) {
    Result<size_t> n = ReadInline(id, key, offset, len, out);
    if (!n) {
      // Evicted since the lookup (the entry leaves the index before its
      // record is deleted): a plain miss. A record missing under a live
      // entry is as good as corrupt.
      if (n.error().code() == Code::kNotFound && !still_indexed()) return std::nullopt;
      const std::string what = fmt::format("inline cache unit {} in {}/index", id, opts_.dir);
      if (n.error().code() == Code::kIoError) {
        Add(metrics_->cache_read_errors);
        WarnOnce("read:" + n.error().ToString(),
                 fmt::format("igtcache: cannot read {}: {} (served from the backend)", what, n.error().message()));
      } else {
        Add(metrics_->cache_corruptions);
        WarnOnce("corrupt", fmt::format("igtcache: corrupt {} dropped ({}); further ones are only counted", what,
                                        n.error().message()));
      }
      Drop(id, gen);
      return std::nullopt;
    }
    return Touched(id, gen, *n, hit, nullptr, nullptr);
  }
  const std::string path = PathOf(id);
  const bool new_file = !file;
  if (new_file) {
    const int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f >= 0) {
      try {
        file = std::make_shared<OpenUnitFile>(f);
      } catch (...) {  // out of memory: the descriptor must not leak
        ::close(f);
        throw;
      }
    }
  }
  const int fd = file ? file->fd : -1;
  if (fd < 0) {
    const int err = errno;
    // Evicted or removed since the lookup above (the entry leaves the index
    // before its file is deleted): a plain miss, not an error.
    if (err == ENOENT && !still_indexed()) return std::nullopt;
    Add(metrics_->cache_read_errors);
    if (err == EIO) NoteReadError();
    WarnOnce("read-open:" + ErrnoText(err),
             fmt::format("igtcache: cannot open cache unit {}: {} (served from the backend)", path, ErrnoText(err)));
    if (err == ENOENT) Drop(id, gen);  // the file is gone: the entry is useless
    return std::nullopt;
  }
  bool new_header = false;
  Result<size_t> n = [&]() -> Result<size_t> {
    if (hooks_.unit_read_error && hooks_.unit_read_error(path))
      return Err(Status::IoError("unit file read: Input/output error"));
    if (!header) {
      auto h = ReadUnitHeader(fd);
      if (!h) return Err(h.error());
      if (auto s = CheckUnitHeaderMatches(*h, key); !s.ok()) return Err(s);
      header = std::make_shared<const UnitHeader>(std::move(*h));
      new_header = true;
    }
    return ReadUnitRange(fd, *header, offset, len, out);
  }();
  if (!n) {
    if (n.error().code() == Code::kCorruption) {
      Add(metrics_->cache_corruptions);
      WarnOnce("corrupt", fmt::format("igtcache: corrupt cache unit {} dropped ({}); further ones are only counted",
                                      path, n.error().message()));
      Drop(id, gen);
    } else {
      Add(metrics_->cache_read_errors);
      WarnOnce("read:" + n.error().ToString(),
               fmt::format("igtcache: cannot read cache unit {}: {} (served from the backend)", path,
                           n.error().ToString()));
      // An I/O error (a bad sector) would repeat on every read of the unit,
      // each paying for it before the backend: drop it; a refetch writes a
      // new file (unless such errors repeat: NoteReadError).
      if (n.error().code() == Code::kIoError) {
        Drop(id, gen);
        NoteReadError();
      }
    }
    return std::nullopt;
  }
  if (read_errors_in_row_.load(std::memory_order_relaxed) != 0) read_errors_in_row_.store(0, std::memory_order_relaxed);
  return Touched(id, gen, *n, hit, new_header ? std::move(header) : nullptr, new_file ? std::move(file) : nullptr);
}

size_t DiskBlockStore::Touched(const std::string& id, uint64_t gen, size_t n, bool hit,
                               std::shared_ptr<const UnitHeader> header, std::shared_ptr<OpenUnitFile> file) {
  std::lock_guard lk(mu_);
  auto it = index_.find(id);
  if (it != index_.end() && it->second.gen == gen) {
    Touch(id, it->second, hit ? n : 0);
    if (header) KeepHeaderLocked(it->second, std::move(header));
    if (file) KeepOpenLocked(id, it->second, std::move(file), /*read=*/true);
  }
  return n;
}

Result<std::shared_ptr<OpenUnitFile>> DiskBlockStore::WriteUnit(const std::string& id, std::string_view header,
                                                                std::string_view data) {
  // No fsync: after a crash a torn or empty unit file fails its header or
  // chunk checksums and is dropped (at start-up or on first read), and the
  // index record is only written after the rename. Syncing every unit would
  // cost far more than refetching the few units a crash can lose.
  if (hooks_.unit_write_full && hooks_.unit_write_full())
    return Err(Status(CodeForErrno(EDQUOT), fmt::format("cannot write a unit file in {}/tmp: {}", opts_.dir,
                                                        ErrnoText(EDQUOT))));
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
    tmp = opts_.dir + "/tmp/" + RandomHex();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kFileMode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const int err = errno;
    return Err(Status(CodeForErrno(err), fmt::format("cannot create a temp file in {}/tmp: {}", opts_.dir, ErrnoText(err))));
  }
  // Whatever happens below, out of memory included (an error message, a
  // directory name), the descriptor is closed and the temp file removed
  // unless it became the unit file (which is then Put's to remove).
  struct TmpFile {
    int fd;
    const std::string& path;
    bool renamed = false;
    ~TmpFile() {
      if (fd >= 0) ::close(fd);
      if (!renamed) ::unlink(path.c_str());
    }
  } guard{fd, tmp};
  Status s;
  if (::fchmod(fd, kFileMode) != 0) {
    s = Status(CodeForErrno(errno), fmt::format("chmod temp file in {}/tmp: {}", opts_.dir, ErrnoText(errno)));
  }
  if (s.ok()) s = WriteUnitFile(fd, header, data);
  guard.fd = -1;
  if (::close(fd) != 0 && s.ok()) {
    s = Status(CodeForErrno(errno), fmt::format("closing temp file in {}/tmp: {}", opts_.dir, ErrnoText(errno)));
  }
  if (s.ok()) {
    const std::string dst = PathOf(id);
    int err = ::rename(tmp.c_str(), dst.c_str()) == 0 ? 0 : errno;
    // Fan-out directories are made on first use, and again if something
    // removed one (a tmp cleaner) between the mkdir and the rename; so is
    // units/ itself (deleted while mounted: before, every insert failed
    // until a remount).
    for (int attempt = 0; attempt < 4 && err == ENOENT; ++attempt) {
      s = MakeDirIfMissing(opts_.dir + "/units");
      if (s.ok()) s = MakeDirIfMissing(opts_.dir + "/units/" + id.substr(0, 2));
      if (s.ok()) err = ::rename(tmp.c_str(), dst.c_str()) == 0 ? 0 : errno;
    }
    guard.renamed = s.ok() && err == 0;
    if (s.ok() && err != 0) {
      s = Status(CodeForErrno(err), fmt::format("cannot move a unit into {}/units: {}", opts_.dir, ErrnoText(err)));
    }
  }
  if (!s.ok()) return Err(s);
  // Opened again for reading while its dentry is hot (the write fd is closed
  // so that close() can report a delayed write error above). Failing here
  // costs only the open on the first read.
  const int rfd = ::open(PathOf(id).c_str(), O_RDONLY | O_CLOEXEC);
  if (rfd < 0) return nullptr;
  try {
    return std::make_shared<OpenUnitFile>(rfd);
  } catch (...) {
    ::close(rfd);
    throw;
  }
}

Status DiskBlockStore::Put(const UnitKey& key, std::string_view data, bool prefetched) {
  if (dir_gone_.load(std::memory_order_relaxed))
    return Status::Unavailable(fmt::format("cache dir {} was deleted while mounted; not cached", opts_.dir));
  const uint64_t n = data.size();
  if (n > opts_.max_bytes) {
    return Status::NoSpace(fmt::format("unit of {} bytes is larger than the cache limit ({} bytes); not cached", n,
                                       opts_.max_bytes));
  }
  const std::string id = UnitId(key);
  // A small unit goes inline: `encoded` is its index record, bytes and
  // all. Otherwise `encoded` is its file's header.
  const bool is_inline = opts_.inline_max_bytes > 0 && n <= opts_.inline_max_bytes;
  std::string encoded;
  // What the unit takes on the volume, counted against max_bytes.
  uint64_t disk;
  if (is_inline) {
    if (key.etag.size() > kMaxEtagBytes)  // as a unit file's header refuses it
      return Status::InvalidArgument(fmt::format("etag of '{}' is {} bytes, over the {} byte limit", key.object,
                                                 key.etag.size(), kMaxEtagBytes));
    encoded = EncodeUnitRecord(InlineUnitRecord(key, data, hooks_.now_us()));
    disk = InlineRecordDiskBytes(encoded.size());
  } else {
    auto header = EncodeUnitHeader(key, data);
    if (!header) return header.error();
    encoded = std::move(*header);
    disk = UnitDiskBytes(encoded.size(), n);
  }
  if (disk > opts_.max_bytes) {
    return Status::NoSpace(fmt::format("unit of {} bytes takes {} bytes on disk, more than the cache limit ({} bytes); "
                                       "not cached", n, disk, opts_.max_bytes));
  }

  // Nothing is evicted for an insert that cannot succeed: while the index is
  // not writable, or while writes into tmp/ fail (a read-only volume, tmp/
  // gone), each miss would otherwise evict a unit and then fail, draining the
  // cache one unit per miss.
  if (db_broken_.load() && !TryResume(false))
    return WriteError(Status::IoError(fmt::format("cache index {}/index not writable since an earlier error",
                                                  opts_.dir)));
  if (!is_inline && ReadFailing())
    return Status::IoError(fmt::format("not writing unit files in {}/units for a while: reads of them failed", opts_.dir));
  if (write_failing_.load() && !is_inline) {
    // A full volume is no reason to skip eviction (it makes room).
    if (auto s = ProbeTmp(); !s.ok() && s.code() != Code::kNoSpace) return WriteError(s);
  }

  // Free space on the volume, measured before taking the lock. If statvfs
  // fails the free-space rule is skipped (max_bytes still holds).
  auto space = hooks_.volume_space(opts_.dir);
  if (!space) WarnOnce("statvfs", fmt::format("igtcache: {}; not checking free space", space.error().ToString()));

  // From the reservation below to the index entry, the id is busy and `disk`
  // bytes are reserved. If anything in between throws (out of memory: a
  // path, the index record, the policy's records), both are given back and
  // the unit file removed if it was written: else every later Put of this
  // unit would be a no-op, and the reservation lost for good.
  const std::string unit_path = PathOf(id);
  struct Reservation {
    DiskBlockStore* store;
    const std::string& id;
    const std::string& path;
    uint64_t disk;
    bool is_inline;
    bool held = false;
    ~Reservation() {
      if (!held) return;
      if (is_inline) {
        // Its record may be written: complete on its own, a start-up would
        // load it back, uncounted until then. Best effort (a destructor).
        try {
          rocksdb::WriteBatch b;
          DeleteUnitKeys(b, id);
          (void)store->DbWrite([&] { return store->db_->Write(rocksdb::WriteOptions(), &b); });
        } catch (...) {
        }
      } else {
        ::unlink(path.c_str());
      }
      std::lock_guard lk(store->mu_);
      store->reserved_bytes_ -= disk;
      if (!is_inline) --store->reserved_files_;
      store->busy_.erase(id);
    }
  } reservation{this, id, unit_path, disk, is_inline};
  std::vector<Victim> victims;
  Status fail;
  // Other Puts in flight hold the room: this insert is skipped, but the
  // cache still takes inserts (not a write error, and prefetching goes on).
  bool contended = false;
  bool declined = false;  // not admitted by the policy
  {
    std::lock_guard lk(mu_);
    if (auto it = index_.find(id); it != index_.end()) {
      // Cached meanwhile by another insert. A reader's miss read it (its
      // recency counts); a prefetch did not.
      if (!prefetched) Touch(id, it->second);
      return Status::Ok();
    }
    if (busy_.contains(id)) return Status::Ok();  // another thread is writing (or deleting) it
    const uint64_t limit = LimitLocked();

    // Bytes that must be freed so that, after this write and the writes in
    // flight, the volume keeps min_free_ratio of its size free.
    uint64_t need_free = 0;
    if (space && space->total_bytes > 0) {
      const double want = opts_.min_free_ratio * double(space->total_bytes) + double(disk + reserved_bytes_);
      if (want > double(space->avail_bytes)) need_free = uint64_t(want - double(space->avail_bytes)) + 1;
    }
    // Unit files to delete so that the volume keeps min_free_ratio of its
    // inodes free too, with one for this unit's file and one for its
    // directory: a volume of many small files ran out of inodes with space
    // to spare, and every insert failed with nothing evicted (a tester's
    // tmpfs with nr_inodes=200: 2,478 write errors, 0 evictions).
    uint64_t need_files = 0;
    if (space && space->total_inodes > 0 && !is_inline) {
      // The inserts in flight count as they do for space: without them,
      // concurrent Puts all saw the same free count and went past the floor.
      const double want = opts_.min_free_ratio * double(space->total_inodes) + 2 + double(reserved_files_);
      if (want > double(space->avail_inodes)) need_files = uint64_t(std::ceil(want - double(space->avail_inodes)));
    }
    if (need_free > used_bytes_ - inline_bytes_) {
      // Even an empty cache would not leave enough free space: do not evict
      // everything for nothing. Only unit files count: evicting inline
      // units frees no volume space until RocksDB compacts (a volume filled
      // by others would otherwise drain them one insert at a time).
      fail = Status::NoSpace(VolumeFloorText());
    } else if (need_files > index_.size() - inline_units_) {
      fail = Status::NoSpace(VolumeFloorText(/*inodes=*/true));
    } else if (reserved_bytes_ + disk > limit) {
      // Nor when the inserts in flight hold so much that evicting every
      // cached unit would not make room.
      fail = Status::NoSpace("cache space is held by inserts in flight");
      contended = true;
    } else if (used_bytes_ + reserved_bytes_ + disk > limit && need_free == 0 && need_files == 0 &&
               !policy_->AdmitUnit(id, n,
                                   UnitMeta{.prefetched = prefetched, .now_us = hooks_.now_us(), .object = key.object,
                                            .unit_index = key.index, .disk_bytes = disk, .etag = key.etag})) {
      // The policy would evict this unit first: evicting another for it
      // only churns (EvictionPolicy::AdmitUnit). Not asked when the volume's
      // free-space floor needs room: that is given back whatever the policy.
      declined = true;
    } else {
      auto within_limit = [&] { return used_bytes_ + reserved_bytes_ + disk <= limit; };
      size_t files_freed = 0, files_seen = 0;  // unit files among the victims (each an inode)
      auto enough_files = [&] {
        for (; files_freed < need_files && files_seen < victims.size(); ++files_seen)
          if (!victims[files_seen].is_inline) ++files_freed;
        return files_freed >= need_files;
      };
      const uint64_t freed = EvictLocked(
          [&](uint64_t freed) { return within_limit() && freed >= need_free && enough_files(); }, victims,
          within_limit);
      if (!within_limit() || freed < need_free || !enough_files()) {
        // Other Puts in flight hold the space, or the volume's floor needs
        // room (or inodes) that only inline units (freeing nothing now)
        // stand before.
        contended = freed >= need_free && enough_files();  // not the volume's floor
        fail = contended ? Status::NoSpace("cache space is held by inserts in flight")
                         : Status::NoSpace(VolumeFloorText(!enough_files()));
      } else {
        busy_[id] = Busy{};
        reserved_bytes_ += disk;
        if (!is_inline) ++reserved_files_;
        reservation.held = true;
      }
    }
  }
  DeleteDetached(victims, /*count_as_eviction=*/true);
  if (declined) {
    Add(metrics_->cache_insert_declined);
    return Status::Ok();
  }
  if (!fail.ok()) {
    if (!contended) return WriteError(fail);
    Add(metrics_->cache_insert_skipped);
    return fail;
  }
  if (hooks_.reserved) hooks_.reserved(key);

  // An inline unit has no file: its record below is its write.
  Result<std::shared_ptr<OpenUnitFile>> written =
      is_inline ? std::shared_ptr<OpenUnitFile>() : WriteUnit(id, encoded, data);
  Status s = written ? Status::Ok() : written.error();
  // A full volume is not a reason to stop evicting (that makes room); any
  // other write failure is probed for before the next insert evicts.
  if (!is_inline) write_failing_.store(!s.ok() && s.code() != Code::kNoSpace);
  std::shared_ptr<const UnitHeader> written_header;  // decoded outside mu_
  if (written && !is_inline) {
    if (auto h = DecodeUnitHeader(encoded)) written_header = std::make_shared<const UnitHeader>(std::move(*h));
  }
  const uint64_t now = hooks_.now_us();
  if (s.ok()) {
    // With the record, no access state of an earlier life of this id (a
    // flush that wrote one after its eviction deleted it) stays to be
    // taken for this one's.
    rocksdb::WriteBatch batch;
    batch.Put(std::string(kUnitKeyPrefix) + id,
              is_inline ? encoded : EncodeUnitRecord(FileUnitRecord(key, n, UnitRelPath(id), now)));
    batch.Delete(std::string(kAccessKeyPrefix) + id);
    s = FromRocks(DbWrite([&] { return db_->Write(rocksdb::WriteOptions(), &batch); }),
                  fmt::format("cache index {}/index: put", opts_.dir));
    if (!s.ok() && !is_inline) ::unlink(unit_path.c_str());
  }
  bool cancelled = false;
  // Made before the reservation is handed over below: once it is, nothing
  // may throw before the unit is in the index or on its way out.
  std::vector<Victim> cancelled_victims{Victim{id, n, disk, is_inline}};
  {
    std::lock_guard lk(mu_);
    auto b = busy_.find(id);
    // The dir deleted meanwhile (ForgetAll): the unit is not indexed.
    cancelled = b->second.cancelled || dir_gone_.load(std::memory_order_relaxed);
    if (s.ok() && !cancelled) {
      // What may throw first (the entry, the policy's records), then what
      // cannot: an exception leaves the index as it was.
      if (auto old = index_.find(id); old != index_.end()) ForgetLocked(old->second);
      auto it = index_.insert_or_assign(UnitIdBitsOf(id), Entry{n, disk, now, 0, next_gen_, is_inline}).first;
      try {
        policy_->OnInsertUnit(id, n, 0,
                              UnitMeta{.prefetched = prefetched, .now_us = now, .object = key.object,
                                       .unit_index = key.index, .disk_bytes = disk, .etag = key.etag});
      } catch (...) {
        try {
          policy_->OnRemove(id);  // whatever it took in before throwing
        } catch (...) {
        }
        index_.erase(it);
        throw;
      }
      ++next_gen_;
      Entry& e = it->second;
      // The header just encoded (its checksums are of the bytes written) and
      // the file: the first read needs neither a path lookup nor a header read.
      KeepHeaderLocked(e, std::move(written_header));
      try {
        KeepOpenLocked(id, e, std::move(*written), /*read=*/false);
      } catch (const std::bad_alloc&) {  // opened again on its first read
      }
      used_bytes_ += disk;
      if (is_inline) {
        ++inline_units_;
        inline_bytes_ += disk;
      }
      busy_.erase(b);
    } else if (!s.ok()) {
      busy_.erase(b);
    } else {
      b->second.deleting = true;
    }
    reserved_bytes_ -= disk;
    if (!is_inline) --reserved_files_;
    reservation.held = false;
    // Refused for space while the volume still shows room past its floor:
    // a limit statvfs does not show (if it shows the volume full, others
    // filled it meanwhile, and the floor makes room at the next insert).
    if (s.code() == Code::kNoSpace && !is_inline)
      if (auto now = hooks_.volume_space(opts_.dir);
          now && double(now->avail_bytes) > opts_.min_free_ratio * double(now->total_bytes) + double(disk))
        NoteVolumeFullLocked(now->avail_bytes, hooks_.now_us());
  }
  if (!s.ok()) return WriteError(s);
  if (cancelled) {
    DeleteDetached(cancelled_victims, /*count_as_eviction=*/false);
    return Status::Ok();
  }
  inserts_failing_.store(false, std::memory_order_relaxed);
  Add(metrics_->cache_insert_units);
  Add(metrics_->cache_insert_bytes, n);
  return Status::Ok();
}

Status DiskBlockStore::Reconcile() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  struct Survivor {
    std::string id;
    UnitRecord rec;
    uint64_t disk_bytes = 0;
    bool good = false;
    bool legacy = false;  // its record names the two-level path of before 2026-11-29
    // Its header read failed with an I/O error, twice: left in place with
    // its record, not used this run.
    bool unreadable = false;
  };
  std::vector<Survivor> survivors;
  rocksdb::WriteBatch drop;
  size_t dropped = 0;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(kUnitKeyPrefix); it->Valid() && it->key().starts_with(kUnitKeyPrefix); it->Next()) {
      std::string id = it->key().ToString().substr(kUnitKeyPrefix.size());
      auto rec = DecodeUnitRecord(std::string_view(it->value().data(), it->value().size()));
      const bool legacy = rec && !rec->is_inline && id.size() == 32 && rec->rel_path == LegacyUnitRelPath(id);
      if (rec && id.size() == 32 && UnitId(rec->key) == id &&
          (rec->is_inline ? rec->inline_data_ok : rec->rel_path == UnitRelPath(id) || legacy)) {
        std::string().swap(rec->rel_path);  // checked; PathOf(id) rebuilds it
        // An inline unit is checked whole here (its bytes came with the
        // record, read in key order): it needs no file.
        Survivor sv{std::move(id), std::move(*rec)};
        sv.legacy = legacy;
        if (sv.rec.is_inline) {
          sv.good = true;
          sv.disk_bytes = InlineRecordDiskBytes(it->value().size());
          std::string().swap(sv.rec.inline_data);
        }
        survivors.push_back(std::move(sv));
      } else {
        drop.Delete(it->key());
        ++dropped;
      }
    }
    if (auto s = FromRocks(it->status(), fmt::format("reading cache index {}/index", opts_.dir)); !s.ok()) return s;
    // The access states written since each insert. Both key ranges are in
    // id order, as the survivors are: one merge, no map of the ids. One
    // without a record (its unit evicted while a flush wrote it) goes. The
    // later of record and state wins: a build of before access states had
    // keys went on writing them into the records, and a state of an earlier
    // life of the id may survive such a build's eviction.
    size_t at = 0;
    for (it->Seek(kAccessKeyPrefix); it->Valid() && it->key().starts_with(kAccessKeyPrefix); it->Next()) {
      const std::string_view id(it->key().data() + kAccessKeyPrefix.size(), it->key().size() - kAccessKeyPrefix.size());
      while (at < survivors.size() && survivors[at].id < id) ++at;
      auto a = DecodeAccessState(std::string_view(it->value().data(), it->value().size()));
      if (at < survivors.size() && survivors[at].id == id && a) {
        UnitRecord& rec = survivors[at].rec;
        if (a->last_access_us >= rec.last_access_us) {
          rec.last_access_us = a->last_access_us;
          rec.access_count = a->access_count;
        }
      } else {
        drop.Delete(it->key());
      }
    }
    if (auto s = FromRocks(it->status(), fmt::format("reading cache index {}/index", opts_.dir)); !s.ok()) return s;
  }
  // Header check only (the data is verified chunk by chunk on read): one
  // small read per unit, so on several threads. A unit whose file is gone,
  // is not a regular file, or has a wrong header or size is dropped. Any
  // other failure to open a unit file (EACCES, EMFILE, ...) fails the
  // start-up instead: it says nothing about the unit, and dropping it would
  // also delete its file below.
  std::vector<int> open_errno(survivors.size(), 0);
  // Only real directories are gone through: a unit under a units/ab that
  // is a symlink (or anything but a directory) counts as missing, so no
  // file outside the cache dir is opened, moved or deleted as a unit; the
  // stray pass removes the link. (O_NOFOLLOW guards the last component.)
  auto real_dir = [](const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  };
  std::array<bool, 256> top_ok{};
  for (int t = 0; t < 256; ++t) top_ok[t] = real_dir(fmt::format("{}/units/{:02x}", opts_.dir, t));
  // The id's first hex pair: the top byte of its bits.
  auto top_of = [](const std::string& id) { return static_cast<size_t>(UnitIdBitsOf(id).hi >> 56); };
  // A unit of the two-level layout is moved to its place first (a rename
  // within units/ab/), once: its record is rewritten below.
  std::atomic<size_t> moved{0};
  ParallelFor(survivors.size(), kIoThreads, [&](size_t i) {
    Survivor& sv = survivors[i];
    if (sv.rec.is_inline || !top_ok[top_of(sv.id)]) return;
    const std::string path = PathOf(sv.id);
    if (sv.legacy) {
      // ENOENT: moved by an earlier start that stopped before rewriting its
      // record, or gone (the open below tells). Any other failure fails
      // the start-up, as an open's does: the stray pass would delete it.
      // Not through an old directory that is a link (or gone): the open
      // below then finds no file.
      const std::string old = opts_.dir + "/" + LegacyUnitRelPath(sv.id);
      const int err = !real_dir(old.substr(0, old.rfind('/'))) ? ENOENT
                      : ::rename(old.c_str(), path.c_str()) == 0 ? 0
                                                                  : errno;
      if (err == 0) ++moved;
      if (err != 0 && err != ENOENT) {
        open_errno[i] = err;
        return;
      }
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno != ENOENT && errno != ELOOP) open_errno[i] = errno;
      return;
    }
    struct stat st {};
    auto read_header = [&] {
      return hooks_.unit_read_error && hooks_.unit_read_error(path)
                 ? Result<UnitHeader>(Err(Status::IoError("unit file read: Input/output error")))
                 : ReadUnitHeader(fd);
    };
    auto h = read_header();
    if (!h && h.error().code() == Code::kIoError) h = read_header();  // once more: a transient error
    if (!h && h.error().code() == Code::kIoError) {
      // Not a bad header: the disk did not answer (a bad sector). Taken for
      // a bad header, the unit was deleted, and a disk hiccup at start-up
      // emptied the whole cache (a review's finding). Left in place, with
      // its record, for a later start; many such fail the start-up (below).
      sv.unreadable = true;
      ::close(fd);
      return;
    }
    sv.good = h && CheckUnitHeaderMatches(*h, sv.rec.key).ok() && h->data_len == sv.rec.data_len &&
              ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) == h->header_len + h->data_len;
    if (sv.good) sv.disk_bytes = UnitDiskBytes(h->header_len, h->data_len);
    ::close(fd);
    if (!sv.good) ::unlink(path.c_str());
  });
  for (size_t i = 0; i < survivors.size(); ++i) {
    if (open_errno[i] != 0) {
      return Status(CodeForErrno(open_errno[i]),
                    fmt::format("cannot {} cache unit {}: {}", survivors[i].legacy ? "move or open" : "open",
                                PathOf(survivors[i].id), ErrnoText(open_errno[i])));
    }
  }
  const size_t unreadable = static_cast<size_t>(
      std::count_if(survivors.begin(), survivors.end(), [](const Survivor& sv) { return sv.unreadable; }));
  if (unreadable > 0) {
    const auto first = std::find_if(survivors.begin(), survivors.end(), [](const Survivor& sv) { return sv.unreadable; });
    // A few: bad sectors, and the rest of the cache is served. Many: the
    // disk is failing, and the mount says so rather than run on it.
    if (unreadable > kMaxUnreadableAtStart && unreadable * 4 > survivors.size())
      return Status::IoError(fmt::format("{} of {} cache unit files in {}/units could not be read (I/O errors, e.g. "
                                         "{}): the cache's disk is failing? Check it, or mount with another "
                                         "--cache-dir (nothing was deleted)",
                                         unreadable, survivors.size(), opts_.dir, PathOf(first->id)));
    spdlog::warn("igtcache: {} cache unit file(s) could not be read (I/O error), e.g. {}: left in place and not "
                 "used this run (the disk may have bad sectors)",
                 unreadable, PathOf(first->id));
  }
  if (moved > 0)
    spdlog::info("igtcache: moved {} unit files in {}/units to the one-level layout (units/xx/<id>)", moved.load(),
                 opts_.dir);
  const size_t checked = survivors.size() + dropped;  // records read
  std::vector<std::string> unread_ids;  // their files are not strays
  std::erase_if(survivors, [&](const Survivor& sv) {
    if (sv.unreadable) {
      unread_ids.push_back(sv.id);
    } else if (!sv.good) {
      DeleteUnitKeys(drop, sv.id);
      ++dropped;
    } else if (sv.legacy) {  // its record names where its file is now
      UnitRecord r = FileUnitRecord(sv.rec.key, sv.rec.data_len, UnitRelPath(sv.id), sv.rec.last_access_us);
      r.access_count = sv.rec.access_count;
      drop.Put(std::string(kUnitKeyPrefix) + sv.id, EncodeUnitRecord(r));
    }
    return !sv.good;
  });
  if (dropped > 0)
    spdlog::warn("igtcache: dropped {} cache index entries without a valid unit file or inline record in {}", dropped, opts_.dir);
  if (drop.Count() > 0) {
    // Not fatal (a full volume): the records stay stale on disk, are not
    // loaded, and the next start-up drops them again.
    // Through DbWrite: a failed write marks the index broken, so that later
    // writes and the close leave it alone (RocksDB aborts on a write after a
    // failed WAL write: docs/RELIABILITY.md).
    if (auto s = FromRocks(DbWrite([&] { return db_->Write(rocksdb::WriteOptions(), &drop); }), "cache index: drop");
        !s.ok())
      spdlog::warn("igtcache: cache index {}/index: cannot delete the dropped entries: {}", opts_.dir, s.ToString());
  }

  const auto t1 = Clock::now();
  // Delete unit files nobody indexes, or in the wrong place: a kept file is
  // units/ab/<id> with <id> a survivor starting "ab" and not inline; any
  // directory below units/ab (the two-level layout's, emptied by the moves
  // above) goes with what it still holds.
  // (`kept` views the survivors' ids: it must not outlive this block's
  // order of them.)
  std::atomic<size_t> strays{0};
  {
    std::unordered_set<std::string_view> kept;
    kept.reserve(survivors.size());
    for (const auto& sv : survivors)
      if (!sv.rec.is_inline) kept.insert(sv.id);
    for (const auto& id : unread_ids) kept.insert(id);
    const std::filesystem::path units = opts_.dir + "/units";
    std::vector<std::filesystem::path> tops;  // units/ab, listed on several threads
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(units, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      std::error_code tec;
      // A symlink is a stray: the link is removed, never what it points to.
      if (it->symlink_status(tec).type() == std::filesystem::file_type::directory) {
        tops.push_back(it->path());
      } else {
        std::filesystem::remove(it->path(), tec);
        ++strays;
      }
    }
    if (ec) return Status::IoError(fmt::format("cannot list {}: {}", units.string(), ec.message()));
    std::vector<std::string> list_errors(tops.size());
    ParallelFor(tops.size(), kIoThreads, [&](size_t i) {
      const std::string ab = tops[i].filename().string();
      std::error_code lec;
      for (auto it = std::filesystem::directory_iterator(tops[i], lec);
           !lec && it != std::filesystem::directory_iterator(); it.increment(lec)) {
        std::error_code tec;
        const auto type = it->symlink_status(tec).type();  // a symlink is never followed
        if (type == std::filesystem::file_type::directory) {
          const auto n = std::filesystem::remove_all(it->path(), tec);  // links in it removed, not followed
          if (n != static_cast<std::uintmax_t>(-1) && n > 1) strays += n - 1;
          continue;
        }
        const std::string name = it->path().filename().string();
        const bool ok = type == std::filesystem::file_type::regular && name.size() == 32 &&
                        name.compare(0, 2, ab) == 0 && kept.contains(name);
        if (!ok) {
          std::filesystem::remove(it->path(), tec);
          ++strays;
        }
      }
      if (lec) list_errors[i] = fmt::format("cannot list {}: {}", tops[i].string(), lec.message());
    });
    for (const auto& e : list_errors)
      if (!e.empty()) return Status::IoError(e);
  }
  // A crash between a unit's rename and its record leaves a few (said at
  // info level); many mean records were lost (an index deleted, reset or
  // cut short): the user is told.
  if (strays > kStrayWarnFiles)
    spdlog::warn("igtcache: deleted {} unit files in {} that its index has no record of (the index was lost or cut "
                 "short, or the cache dir deleted while mounted?): they are fetched again when read", strays.load(), opts_.dir);
  else if (strays > 0)
    spdlog::info("igtcache: deleted {} unindexed unit files in {}", strays.load(), opts_.dir);

  const auto t2 = Clock::now();
  // Oldest first, so the policy sees them in access order (O(1) inserts).
  // An order of indices: sorting the records themselves took a second copy
  // of them (stable_sort's buffer), ~200 MB at a million units.
  std::vector<std::pair<uint64_t, uint32_t>> order;  // (last access, survivor)
  order.reserve(survivors.size());
  for (size_t i = 0; i < survivors.size(); ++i) order.emplace_back(survivors[i].rec.last_access_us, uint32_t(i));
  std::sort(order.begin(), order.end());
  std::vector<Victim> victims;
  {
    std::lock_guard lk(mu_);
    index_.reserve(survivors.size());
    for (auto [_, i] : order) {
      Survivor& s = survivors[i];
      policy_->OnInsertUnit(s.id, s.rec.data_len, std::max<uint64_t>(1, s.rec.last_access_us),
                            UnitMeta{.object = s.rec.key.object, .unit_index = s.rec.key.index,
                                     .disk_bytes = s.disk_bytes, .etag = s.rec.key.etag});
      used_bytes_ += s.disk_bytes;
      if (s.rec.is_inline) {
        ++inline_units_;
        inline_bytes_ += s.disk_bytes;
      }
      index_[UnitIdBitsOf(s.id)] = Entry{s.rec.data_len, s.disk_bytes, s.rec.last_access_us, s.rec.access_count,
                                      next_gen_++, s.rec.is_inline};
    }
    // A smaller max_bytes than last time: evict down now.
    EvictLocked([&](uint64_t) { return used_bytes_ <= opts_.max_bytes; }, victims, [] { return false; });
  }
  DeleteDetached(victims, /*count_as_eviction=*/true);
  const auto t3 = Clock::now();
  spdlog::info("igtcache: cache {}: {} units checked in {:.1f} s ({} kept), unit files listed in {:.1f} s, loaded in "
               "{:.1f} s ({} evicted to fit the limit)",
               opts_.dir, checked, secs(t0, t1), survivors.size(), secs(t1, t2), secs(t2, t3), victims.size());
  return Status::Ok();
}

// Moves a corrupt index to index.corrupt (replacing an older one): the next
// open starts an empty index, and start-up deletes the unit files it no
// longer names.
Status MoveIndexAside(const std::string& dir, const std::string& why) {
  const std::string path = dir + "/index", aside = dir + "/index.corrupt";
  spdlog::warn("igtcache: cache index {} is corrupt ({}); moving it to {} and starting with an empty cache", path, why,
               aside);
  std::error_code ec;
  std::filesystem::remove_all(aside, ec);
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    return Status::Corruption(fmt::format("cache index {} is corrupt and cannot be moved aside ({}); remove the "
                                          "cache dir {} and retry",
                                          path, ErrnoText(errno), dir));
  }
  return Status::Ok();
}

// RocksDB's own messages go to the mount's log (warnings and errors only),
// not to a LOG file in the index dir: disk the cache limit does not count,
// and on a full cache volume its failed write aborted the process in
// DB::Open's recovery (an assertion in RocksDB's file writer) instead of
// failing the open with "No space left on device".
class IndexLogger final : public rocksdb::Logger {
 public:
  IndexLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    char buf[4096];  // longer messages are cut
    std::vsnprintf(buf, sizeof buf, format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) spdlog::warn("igtcache: cache index (RocksDB): {}", buf);
    else spdlog::info("igtcache: cache index (RocksDB): {}", buf);
  }
};

// Opens (or creates) the RocksDB index; a corrupt one is moved aside.
Result<std::unique_ptr<rocksdb::DB>> OpenIndex(const std::string& dir) {
  const std::string path = dir + "/index";
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = kIndexMaxOpenFiles;
  o.write_buffer_size = kIndexWriteBufferBytes;
  // RocksDB preallocates its log (1.1x the write buffer) and MANIFEST: room
  // that keeps the index writable when the volume fills up (test_disk_full),
  // kept small since it is disk the cache limit does not count (~5.5 MiB,
  // was ~13 MiB with the defaults).
  o.manifest_preallocation_size = kIndexManifestPreallocBytes;
  o.info_log = std::make_shared<IndexLogger>();
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(kIndexBlockCacheBytes);
  // A read of an inline unit is a point lookup: without a filter it
  // searches every level's file whose key range covers the id, which for
  // random ids is all of them.
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));

  auto open = [&]() -> std::pair<rocksdb::Status, std::unique_ptr<rocksdb::DB>> {
    if (auto s = EnsurePrivateSubdir(path); !s.ok()) return {rocksdb::Status::IOError(s.message()), nullptr};
    // The LOG files RocksDB wrote itself before IndexLogger (up to a few
    // MiB the cache limit does not count): nothing reads them.
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(path, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code rec;
      if (name == "LOG" || name.starts_with("LOG.old.")) std::filesystem::remove(it->path(), rec);
    }
    rocksdb::DB* raw = nullptr;
    try {
      auto s = rocksdb::DB::Open(o, path, &raw);
      return {s, std::unique_ptr<rocksdb::DB>(raw)};
    } catch (const std::exception& e) {
      return {rocksdb::Status::IOError(e.what()), nullptr};
    }
  };
  auto [s, db] = open();
  // A MANIFEST that CURRENT names and that is gone is a damaged index too:
  // moved aside, as a corrupt one is. Before, it refused the mount ("removing
  // the cache dir resets the cache"; a tester's finding: the other damaged
  // index files were moved aside).
  const bool manifest_gone = s.IsIOError() && s.ToString().find("No such file or directory") != std::string::npos &&
                             s.ToString().find(path + "/MANIFEST-") != std::string::npos;
  if (s.IsCorruption() || manifest_gone) {
    if (auto st = MoveIndexAside(dir, s.ToString()); !st.ok()) return Err(st);
    std::tie(s, db) = open();
  }
  if (!s.ok()) {
    // A full volume: no advice to remove the dir (the cache is whole).
    const std::string text = s.ToString();
    if (IsSpaceError(s)) {
      // Say whose files fill it: a small volume the cache itself filled
      // (its index, with many small files kept inline) has nothing else
      // the user could free.
      // Blocks, not sizes: RocksDB preallocates its log and MANIFEST past
      // their sizes. A directory it cannot enter (a root-owned lost+found)
      // is passed over.
      uint64_t ours = 0;
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(
               dir, std::filesystem::directory_options::skip_permission_denied, ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        struct stat fst {};
        if (::lstat(it->path().c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) ours += uint64_t(fst.st_blocks) * 512;
      }
      struct statvfs vs {};
      const bool have_vs = ::statvfs(dir.c_str(), &vs) == 0;
      const uint64_t total = have_vs ? uint64_t(vs.f_blocks) * vs.f_frsize : 0;
      // Out of inodes with space to spare (a small tmpfs's nr_inodes): "free
      // some space" sent a tester after space that was not the problem.
      if (have_vs && vs.f_files > 0 && vs.f_favail == 0 && vs.f_bavail > vs.f_blocks / 20)
        return Err(Status::NoSpace(fmt::format(
            "cannot open cache index {}: the cache volume has no free inodes ({}; df -i shows them): remove files "
            "from it (the cache dir {} is a copy of the source: removing it empties the cache) or give it a volume "
            "with more inodes",
            path, text, dir)));
      const std::string whose =
          total > 0 && ours >= total / 2
              ? fmt::format("the cache's own files take {} of its {} MiB: remove the cache dir {} (a copy of the "
                            "source; igtcache makes it anew) or give it a larger volume",
                            ours >> 20, total >> 20, dir)
              : "free some space on it and mount again";
      return Err(Status::NoSpace(fmt::format("cannot open cache index {}: the cache volume is full ({}); {}", path,
                                             text, whose)));
    }
    // RocksDB's own lock on the index: another process has it open (the
    // dir's LOCK file was taken, so that one was deleted under it), or this
    // one ("lock hold by current process"). A lock conflict only, not any
    // error naming the LOCK file (a root-owned one, a read-only volume).
    if (text.find("lock hold by current process") != std::string::npos ||
        (text.find("While lock file") != std::string::npos &&
         (text.find("Resource temporarily unavailable") != std::string::npos ||
          text.find("Permission denied") != std::string::npos)))
      return Err(Status::Busy(fmt::format(
          "cache dir {} is in use by another process: its index {} is locked ({})", dir, path, text)));
    // Out of threads or memory (a pids limit: EAGAIN): nothing wrong with
    // the cache, which removing would lose (a tester's finding).
    if (text.find("Resource temporarily unavailable") != std::string::npos ||
        text.find("Cannot allocate memory") != std::string::npos)
      return Err(FromRocks(s, fmt::format("cannot open cache index {} (a limit on threads, processes or memory? the "
                                          "cache itself may be fine)",
                                          path)));
    return Err(FromRocks(s, fmt::format("cannot open cache index {} (removing the cache dir {} resets the cache)",
                                        path, dir)));
  }
  return std::move(db);
}

// The unit files of cache dir `dir`, least recently written first, and
// their bytes (in blocks).
struct UnitFileList {
  struct File {
    int64_t mtime;
    uint64_t bytes;
    std::string path;
  };
  std::vector<File> files;
  uint64_t bytes = 0;
};
UnitFileList ListUnitFiles(const std::string& dir) {
  UnitFileList l;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir + "/units", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      l.files.push_back({int64_t(st.st_mtime), uint64_t(st.st_blocks) * 512, it->path().string()});
      l.bytes += l.files.back().bytes;
    }
  }
  std::sort(l.files.begin(), l.files.end(), [](const auto& a, const auto& b) { return a.mtime < b.mtime; });
  return l;
}

// Opens a store whose options were checked: takes the dir's lock, opens the
// index and reconciles it with the unit files.
Result<std::unique_ptr<BlockStore>> OpenChecked(const BlockStoreOptions& opts, Metrics* metrics,
                                                const BlockStoreHooks& hooks) {
  // Before the lock file is made: a user's directory stays as it was.
  if (auto s = ClaimCacheDir(opts.dir); !s.ok()) return Err(s);
  auto lock_fd = LockCacheDir(opts.dir);
  if (!lock_fd) return Err(lock_fd.error());
  auto fail = [&](Status s) {
    ::close(*lock_fd);
    return Err(std::move(s));
  };
  for (const char* sub : {"/units", "/tmp"}) {
    if (auto s = EnsurePrivateSubdir(opts.dir + sub); !s.ok()) return fail(s);
  }
  for (int attempt = 0;; ++attempt) {
    Result<std::unique_ptr<EvictionPolicy>> policy =
        opts.make_policy ? Result<std::unique_ptr<EvictionPolicy>>(opts.make_policy()) : MakeEvictionPolicy(opts.eviction);
    if (!policy) return fail(policy.error());
    if (!*policy) return fail(Status::InvalidArgument("make_policy returned no policy"));
    auto open_index = [&] {
      return hooks.index_write_full && hooks.index_write_full()
                 ? Result<std::unique_ptr<rocksdb::DB>>(Err(Status::NoSpace("Disk quota exceeded (test)")))
                 : OpenIndex(opts.dir);
    };
    auto db = open_index();
    // A disk quota, or a volume, the cache itself filled (a quota lowered
    // under it): "remounting recovers it" did not hold, the index had no
    // room for its new log. Cached units (least recently written first;
    // the index drops their records at Reconcile) make room: the index's
    // reserve, then twice as much at each try, up to 8 tries. Not for a
    // volume others' files fill: the cache would be drained at every
    // restart for room others take.
    if (!db && db.error().code() == Code::kNoSpace && attempt == 0) {
      const bool quota = db.error().message().find("Disk quota exceeded") != std::string::npos;
      UnitFileList units = ListUnitFiles(opts.dir);
      struct statvfs vs {};
      const bool ours = quota || (::statvfs(opts.dir.c_str(), &vs) == 0 &&
                                  units.bytes >= uint64_t(vs.f_blocks) * vs.f_frsize / 2);
      size_t next = 0, freed_files = 0;
      uint64_t freed_bytes = 0, want = kIndexReserveBytes;
      for (int room = 0; ours && !db && db.error().code() == Code::kNoSpace && room < 8 && next < units.files.size();
           ++room, want *= 2) {
        uint64_t freed = 0;
        for (; next < units.files.size() && freed < want; ++next)
          if (::unlink(units.files[next].path.c_str()) == 0) {
            ++freed_files;
            freed += units.files[next].bytes;
          }
        freed_bytes += freed;
        // A btrfs qgroup credits freed space at its next commit.
        if (const int dfd = ::open(opts.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
          (void)::syncfs(dfd);
          ::close(dfd);
        }
        db = open_index();
      }
      if (freed_files > 0)
        spdlog::warn("igtcache: cache index {}/index: no room to open it (the volume full or over a disk quota); "
                     "deleted {} cached unit files ({} MiB) to make room{}",
                     opts.dir, freed_files, freed_bytes >> 20, db ? "" : ", and still none");
    }
    if (!db) return fail(db.error());
    // Emptied once the index is open: RocksDB's lock on it is held too (a
    // LOCK file deleted under a running daemon let a second one this far).
    if (attempt == 0)
      if (auto s = ClearDir(opts.dir + "/tmp"); !s.ok()) return fail(s);
    auto store = std::make_unique<DiskBlockStore>(opts, metrics, hooks, *lock_fd, std::move(*db), std::move(*policy));
    // From here the store owns the lock fd and the db.
    auto s = store->Reconcile();
    if (s.ok()) return std::unique_ptr<BlockStore>(std::move(store));
    if (s.code() != Code::kCorruption || attempt > 0) return Err(s);
    // A corrupt table shows only when start-up reads it (DB::Open reads no
    // data blocks): the index is closed, moved aside, and opened again,
    // empty, as for an index that does not open. The dir stays locked.
    store->TakeLockFd();
    store.reset();
    if (auto m = MoveIndexAside(opts.dir, s.message()); !m.ok()) return fail(m);
  }
}

}  // namespace

// A volume size below which OpenDiskBlockStore does not lower max_bytes.
constexpr uint64_t kMinVolumeCap = 1 << 20;

Result<std::unique_ptr<BlockStore>> OpenDiskBlockStore(const BlockStoreOptions& opts_in, Metrics* metrics,
                                                       BlockStoreHooks hooks) {
  BlockStoreOptions opts = opts_in;
  while (opts.dir.size() > 1 && opts.dir.back() == '/') opts.dir.pop_back();
  if (opts.dir.empty()) return Err(Status::InvalidArgument("cache.dir is empty"));
  if (!(opts.min_free_ratio >= 0 && opts.min_free_ratio < 1)) {
    return Err(Status::InvalidArgument(
        fmt::format("cache.min_free_ratio is {}; it must be in [0, 1)", opts.min_free_ratio)));
  }
  if (!hooks.volume_space) hooks.volume_space = StatVolume;
  if (!hooks.now_us) hooks.now_us = SystemNowUs;
  if (auto s = EnsureCacheDir(opts.dir); !s.ok()) return Err(s);
  // No more than the volume holds with min_free_ratio of it kept free
  // (limit_bytes() says what was kept; the mount warns). A cache.max_bytes
  // over it left the limit unreached: the engine planned for space the
  // volume did not have, and every insert met the volume's floor instead.
  if (auto space = hooks.volume_space(opts.dir); space && space->total_bytes > 0) {
    // Less what the index takes beside the records the limit counts: its
    // preallocated log and MANIFEST, and a memtable's worth of table being
    // flushed. On a 20 MiB volume, 4,000 files of 3 KB kept inline filled
    // it at 11.8 MB counted (a black-box tester's finding).
    const double floor = double(space->total_bytes) * (1 - opts.min_free_ratio);
    const auto reserve = double(kIndexReserveBytes);
    const auto cap = uint64_t(std::max(floor - reserve, floor / 2)) & ~uint64_t(4095);
    // Not for a volume that reports a size too small to be one (the floor,
    // checked at every insert, still holds).
    if (cap >= kMinVolumeCap) opts.max_bytes = std::min(opts.max_bytes, cap);
  }
  return OpenChecked(opts, metrics, hooks);
}

}  // namespace cache

Result<std::unique_ptr<BlockStore>> BlockStore::Open(const BlockStoreOptions& opts, Metrics* metrics) {
  return cache::OpenDiskBlockStore(opts, metrics, {});
}

Status CheckUnitSize(BlockStore& store, uint64_t unit_size_bytes) {
  constexpr std::string_view kKey = "c/unit_size_bytes";
  const std::string unit = std::to_string(unit_size_bytes);
  auto read = store.LookupMeta(kKey);
  if (!read) {
    return Status(read.error().code(), fmt::format("cannot read the unit size recorded in its index: {}",
                                                   read.error().message()));
  }
  const std::optional<std::string>& have = *read;
  if (have && *have == unit) return Status::Ok();
  if (have) {
    return Status::InvalidArgument(fmt::format("holds units of {} bytes", *have));
  }
  if (store.unit_count() > 0) {
    return Status::Corruption(fmt::format("it holds {} units but no record of their unit size, so they cannot be "
                                          "read safely", store.unit_count()));
  }
  if (auto s = store.PutMeta(kKey, unit); !s.ok()) {
    return Status(s.code(), fmt::format("cannot record the unit size in its index: {}", s.message()));
  }
  return Status::Ok();
}

namespace {
constexpr std::string_view kSourceKey = "c/source";
}  // namespace

Result<std::optional<std::string>> RecordedSource(BlockStore& store) {
  auto read = store.LookupMeta(kSourceKey);
  if (!read) {
    return Err(Status(read.error().code(),
                      fmt::format("cannot read the source recorded in its index: {}", read.error().message())));
  }
  return *read;
}

Result<std::optional<std::string>> CheckSource(BlockStore& store, const std::string& source) {
  auto read = RecordedSource(store);
  if (!read) return Err(read.error());
  const std::optional<std::string>& have = *read;
  if (have && *have == source) return std::optional<std::string>();
  // Listings first: if recording the new source then fails, the next mount
  // drops them again, never trusts them.
  if (auto n = store.DeleteMetaPrefix("l/"); !n)
    return Err(Status(n.error().code(), fmt::format("cannot drop the saved listings: {}", n.error().message())));
  if (auto s = store.PutMeta(kSourceKey, source); !s.ok())
    return Err(Status(s.code(), fmt::format("cannot record the source in its index: {}", s.message())));
  return have;
}

}  // namespace igt
