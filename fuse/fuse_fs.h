#pragma once
// FuseFs: the libfuse3 low-level adapter (read-only). Thin by design: each
// handler translates one request into a Namespace / ReadPipeline call and
// replies exactly once; errors map through errno_map.h. All capability
// choices are made in Init(), with the reason beside each.
//
// Besides the bucket's files, the root holds one hidden virtual file,
// `.igtcache.stats` (not listed by readdir): reading it returns the live stats
// JSON. `igtcache stats MOUNTPOINT` reads it.
//
// Lifetime: the caller owns Namespace, ReadPipeline and the stats provider;
// they must outlive Run(). Thread-safety: handlers run on libfuse's worker
// threads; FuseFs state is guarded as noted on each member.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "igtcache/config.h"
#include "igtcache/metrics.h"
#include "igtcache/status.h"
#include "src/fs/namespace.h"
#include "src/read/read_pipeline.h"

#include <sys/ioctl.h>

struct fuse_session;
struct fuse_file_info;

namespace igt {

inline constexpr const char* kStatsFileName = ".igtcache.stats";

// Called for every read the kernel sends, as it arrives (before it is
// served; the length clamped to the file): for the access stream tree and
// the trace. May be empty.
using AccessHook = std::function<void(uint64_t pid, const std::string& key, uint64_t offset,
                                      uint64_t length, uint64_t file_size)>;
// Called for every read of a file, after the AccessHook and before the
// cache is looked up, with the object's version (the policy engine's prefetch
// plans need the ETag) and the length clamped to the file. What it returns
// (may be empty) runs once the read's misses are in the read pipeline's
// flight table (ReadPipeline::Read's `looked_up`): where the simulator issues
// a read's prefetch plan. May be empty.
using ReadHook = std::function<std::function<void()>(uint64_t pid, const FileVersion& file, uint64_t offset,
                                                     uint64_t length)>;
// Called when a file is opened (page-cache hits never reach read()).
using OpenHook = std::function<void(uint64_t pid, const std::string& key, uint64_t file_size)>;
// Called when a file is opened: the kernel readahead (bytes) that file should
// get, e.g. small for a file read at random through mmap (each page fault
// reads this much around it). 0 leaves it as is. May be empty.
using ReadaheadHook = std::function<uint64_t(const std::string& key, uint64_t file_size)>;

// `igtcache warm`: an ioctl on a file open on the mount that fetches
// [offset, offset + length) of it into the cache as a warm-up, not as reads:
// nothing is returned to the caller, the stream tree does not see it, and
// the policy engine holds the units for a coming job (docs/POLICIES.md,
// "igtcache warm"). 0 or -1 with errno (EIO: the fetch failed; ENOTTY: not
// an igtcache file or an older daemon: read the file instead).
struct WarmRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};
inline constexpr unsigned long kWarmIoctl = _IOW('i', 0x57, WarmRange);
inline constexpr uint64_t kMaxWarmBytes = 64ull << 20;  // per call (EINVAL above)
// Fetches a range of a file into the cache as a warm-up (the ioctl above).
using WarmHook = std::function<Status(const FileVersion& file, uint64_t offset, uint64_t length)>;
// The last handle on a version of a file closed (the prefetcher drops the
// readahead it queued for it). Must not throw; called on a FUSE thread.
using ReleaseHook = std::function<void(const FileVersion& file)>;

class FuseFs {
 public:
  struct Options {
    std::string mountpoint;
    std::string fsname;                   // shown in /proc/mounts (the source URL)
    std::vector<std::string> extra_opts;  // user -o options, passed to libfuse
    Config config;
    // Installed for SIGHUP right after libfuse's handlers, before the mount
    // (libfuse's own ends the session on SIGHUP). Null: libfuse's.
    void (*on_sighup)(int) = nullptr;
    // Called once when the session ends (unmounted, SIGINT/SIGTERM), before
    // Run() waits for the requests still in progress: the place to cancel
    // backend calls that would otherwise wait out their retries. Any thread.
    std::function<void()> on_session_end;
  };

  FuseFs(Namespace* ns, ReadPipeline* pipeline, Metrics* metrics,
         std::function<std::string()> stats_json, Options opts);
  ~FuseFs();

  // Creates the session and mounts. On error nothing stays mounted.
  Status Mount();
  // Serves requests until unmounted or SIGINT/SIGTERM; then unmounts.
  Status Run();

  void set_access_hook(AccessHook h) { access_hook_ = std::move(h); }
  void set_read_hook(ReadHook h) { read_hook_ = std::move(h); }
  void set_open_hook(OpenHook h) { open_hook_ = std::move(h); }
  void set_readahead_hook(ReadaheadHook h) { readahead_hook_ = std::move(h); }
  void set_warm_hook(WarmHook h) { warm_hook_ = std::move(h); }
  void set_release_hook(ReleaseHook h) { release_hook_ = std::move(h); }
  // Names a relisting found gone or changed (Namespace::set_relist_hook):
  // their kernel entries, as (parent inode, name), are dropped, so that the
  // next stat or open looks them up again, and the kernel forgets the
  // inodes of the gone ones (and the namespace its records of them) instead
  // of keeping them until memory pressure. Queued for the notifier thread
  // of Run(); returns at once. Safe from any thread.
  void DropEntries(std::vector<std::pair<uint64_t, std::string>> entries);
  // Names a relisting found new in directory inode `parent`: the kernel's
  // negative entries of those a lookup answered "no such file" to within
  // metadata.negative_ttl_ms are dropped (DropEntries), so that `open` and
  // `stat` agree with `readdir` at once. Safe from any thread.
  // `added` is sorted by name (a listing's order).
  void DropNegatives(uint64_t parent, const std::vector<DirEntry>& added);

  // Request handlers (called from the C trampolines in fuse_fs.cc).
  struct Impl;

 private:
  friend struct Impl;
  void RaiseReadahead();
  void SetReadahead(uint64_t bytes);
  // A read found the object of inode `ino` changed or deleted in the bucket:
  // the namespace relists its directory, and the kernel's entry for its name
  // is dropped, so that the next open looks it up again instead of reaching
  // this inode until the entry's TTL. Sent by the watcher thread of Run()
  // (libfuse: notifications from a request handler risk a deadlock).
  // Waits (at most 1 s) until the invalidation is sent.
  void NoteChanged(uint64_t ino, const std::string& key, const std::string& etag);
  // The two helper threads of Run().
  void WatchSession();
  void SendInvalidations();
  Namespace* ns_;
  ReadPipeline* pipeline_;
  Metrics* metrics_;
  std::function<std::string()> stats_json_;
  Options opts_;
  FileAttrs attrs_;  // owner and modes shown (fuse.uid, fuse.gid, fuse.file_mode, fuse.dir_mode)
  AccessHook access_hook_;
  ReadHook read_hook_;
  OpenHook open_hook_;
  ReadaheadHook readahead_hook_;
  WarmHook warm_hook_;
  ReleaseHook release_hook_;
  // The mount's /sys/class/bdi/<dev>/read_ahead_kb if we could write it
  // (root), and the value written last; set at Mount(), then under ra_mu_.
  std::mutex ra_mu_;
  std::string ra_path_;
  uint64_t ra_kb_ = 0;
  fuse_session* se_ = nullptr;
  // Answers requests after the loop ended until the notifier is back,
  // reading them into `buf` (as large as libfuse's request buffer).
  void DrainWhileNotifying(std::vector<char>& buf);
  std::mutex watch_mu_;  // guards the five below
  std::condition_variable watch_cv_;
  bool loop_done_ = false, session_ended_ = false;
  // (parent ino, name) to drop: NoteChanged's first (a reader waits for
  // each), then DropEntries' (a relisting's, maybe thousands).
  std::deque<std::pair<uint64_t, std::string>> urgent_entries_;
  std::deque<std::pair<uint64_t, std::string>> inval_entries_;
  // Of urgent_entries_: queued and sent (or dropped at the session's end)
  // so far; the n-th queued is sent once urgent_sent_ >= n (FIFO).
  uint64_t urgent_queued_ = 0, urgent_sent_ = 0;
  // Inodes already queued (bounded), each with its number in that count:
  // a second reader of the inode waits for the same one.
  std::unordered_map<uint64_t, uint64_t> invalidated_;
  bool mounted_ = false;
  bool handlers_set_ = false;
  // Negative entries given to the kernel: parent ino -> name -> when
  // (steady ms), those within negative_ttl_ms (DropNegatives). At most
  // kMaxNegatives: past it the expired go, and all of them unless that
  // freed half (a name among those then waits out its negative TTL, as
  // before).
  void NoteNegative(uint64_t parent, std::string_view name);
  std::mutex neg_mu_;
  std::unordered_map<uint64_t, std::unordered_map<std::string, int64_t>> negatives_;  // guarded by neg_mu_
  size_t negatives_count_ = 0;                                                       // guarded by neg_mu_
  static constexpr size_t kMaxNegatives = 1 << 16;
  // Bumped by every DropNegatives before it looks: a lookup that saw no
  // such name, and finds it bumped once it noted its negative entry, gives
  // the kernel none (the relisting may have listed the name meanwhile,
  // after its drop had looked).
  std::atomic<uint64_t> relist_gen_{0};
  // SendInvalidations has returned (DrainWhileNotifying).
  std::atomic<bool> notifier_done_{false};
  std::atomic<bool> stats_name_warned_{false};  // an object named as the stats file was seen

  // The kernel keeps one page cache per inode, shared by every handle open
  // on it. `etag` is the version whose pages it may hold; `open` counts the
  // handles open per version. A handle of another version opened while
  // handles of `etag` are still open bypasses the page cache (direct_io):
  // else both versions' pages would mix. Dropped when the kernel forgets
  // the inode (its page cache goes with it).
  //
  // Versions are kept as 64-bit hashes of their ETags (VersionHash), not
  // the ETags: an entry lives as long as the kernel keeps the inode, one per
  // file read, so a data set of a million files held a million ETag copies
  // and as many hash tables (about 200 bytes a file). Two versions of one
  // file with the same hash (2^-64) would share a page cache.
  struct PageCache {
    uint64_t version = 0;  // VersionHash of the ETag whose pages the kernel may hold
    // Handles open, per version hash; freed when the last one closes.
    std::vector<std::pair<uint64_t, uint32_t>> open;
    // The kernel forgot the inode while handles were open (it sends
    // RELEASE in the background, so a FORGET can come first): the last
    // close erases the record (it stayed for the mount's life).
    bool forgotten = false;
    auto OpenOn(uint64_t v) {
      return std::find_if(open.begin(), open.end(), [v](const auto& o) { return o.first == v; });
    }
  };
  // 0 for no ETag (no telling versions apart: never keep_cache).
  static uint64_t VersionHash(std::string_view etag);
  // fi->keep_cache / fi->direct_io for an open of version `etag` of `ino`,
  // counting the handle; CloseVersion uncounts it; ForgetVersion drops the
  // inode's entry (the kernel dropped the inode and its pages).
  void OpenVersion(uint64_t ino, const std::string& etag, fuse_file_info* fi);
  // True when it was the version's last open handle.
  bool CloseVersion(uint64_t ino, const std::string& etag);
  void ForgetVersion(uint64_t ino);
  std::mutex etag_mu_;  // guards page_cache_
  std::unordered_map<uint64_t, PageCache> page_cache_;  // by ino
};

}  // namespace igt
