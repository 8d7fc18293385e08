#pragma once
// Namespace: path <-> inode, object attributes and directory listings.
//
// Directories are key prefixes. A directory's listing is fetched with one
// paginated LIST (delimiter '/') and cached in memory and in the BlockStore's
// metadata space for `ttl_ms`, so `ls -lR` costs one LIST per directory (no
// HEAD per file) and a remount within the TTL costs none. Attributes of a
// file come from its parent's listing.
//
// Directory walks (ls -R, os.walk, an ImageFolder scan) read sibling
// directories one after the other, each a LIST the walker waits for. When
// ReadDir() reads a second child of the same parent in a row, the listings
// of the directories the walk reaches next are fetched in the background,
// `prefetch_threads` at once: the subdirectories of the directory just read,
// then the next `prefetch_dirs` siblings (in listing order), and, as each of
// these listings arrives fresh, its own subdirectories, depth first as
// walkers descend. At most kWalkAhead listings are ahead of the walkers
// (queued, or listed and not read by a ReadDir since; one not read within
// kWalkAheadIdleMs no longer counts): the descent follows the walk and stops
// with it, at most kWalkAhead listings beyond. Only a ReadDir that finds a
// walk starts this, and not while the bucket is unreachable (within
// kSlowBucketMs of a failed listing): stale listings are not descended.
//
// When the bucket cannot be reached (Unavailable, IoError, Timeout) and a
// listing is stale, the stale listing (memory, else the persisted one) is
// served instead of an error, so cached data stays reachable during an
// outage; the bucket is asked again at most once per kStaleRetryMs per dir,
// in the background (callers get the stale listing without waiting).
//
// A file inode is one version (ETag) of its object: when a lookup finds a
// new version, the name gets a new inode and the old one keeps its
// attributes for the handles still open on it, so their size never changes
// under them (SEMANTICS.md). A directory keeps its inode.
//
// Inodes follow the FUSE lookup-count contract: Lookup() adds one, Forget()
// subtracts; an inode whose count reaches zero is erased (root never is).
// Underflow is a bug and aborts.
//
// Thread-safety: all methods are safe from many threads. Lock order:
// mu_ (inode tables) and listings_mu_ are never held together, and never
// across a backend call.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "igtcache/backend.h"
#include "igtcache/block_store.h"
#include "igtcache/metrics.h"
#include "igtcache/status.h"

namespace igt {

struct DirEntry {
  std::string name;  // one path component
  bool is_dir = false;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string etag;
  std::string data_key;  // ObjectInfo::data_key: "" unless another key holds its bytes
};

struct DirListing {
  std::vector<DirEntry> entries;  // sorted by name, unique
  int64_t fetched_ms = 0;         // wall clock, ms since the epoch
  int64_t list_ms = 0;            // how long its LIST took (Namespace::Fresh)
  // Fetch order in this process (0: loaded from disk): which of two
  // listings is newer, also when the wall clock steps back.
  uint64_t seq = 0;
  // When the namespace last served it from memory (its use order): idle
  // listings past the memory cap are dropped least recently used first.
  mutable std::atomic<uint64_t> used{0};
  const DirEntry* Find(std::string_view name) const;
};

struct InodeAttr {
  uint64_t ino = 0;
  bool is_dir = false;
  std::string key;  // object key ("a/b.jpg"), or dir path without '/' ("" = root)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string etag;
  // A file whose bytes are another key's (DirEntry::data_key), else "": the
  // key reads and the cache use (DataKey()).
  std::string data_key;
  const std::string& DataKey() const { return data_key.empty() ? key : data_key; }
  // Taken from a listing past its TTL (served while a refresh runs or the
  // bucket is down) or one a read found out of date. The kernel should keep
  // such an entry briefly, not for the TTL.
  bool stale = false;
  // fetched_ms of the listing these came from (0: none, the root): the
  // kernel may keep them for what is left of that listing's TTL, not for a
  // whole TTL from now.
  int64_t listing_ms = 0;
};

// Whether two attributes of one file name the same version: the ETag, or
// for a server that lists none, the size and the modification time.
bool SameVersion(const InodeAttr& a, const InodeAttr& b);

class Namespace {
 public:
  static constexpr uint64_t kRootIno = 1;
  // Inode numbers are below this (InoOf); the FUSE layer's stats file has it.
  static constexpr uint64_t kInoLimit = uint64_t{1} << 62;

  struct Options {
    uint64_t ttl_ms = 60000;  // Default: 60 s. Listing/attribute freshness.
    uint64_t prefetch_dirs = 8;     // Default: 8 (metadata.prefetch_dirs); 0: off
    uint64_t prefetch_threads = 4;  // Listings fetched at once by the walk prefetch
    // How long a lookup waits for the refresh of a stale listing before it
    // is served the stale one (the refresh goes on in the background).
    uint64_t stale_wait_ms = 1000;
    // Entries of the listings kept in memory, all directories together. Past
    // it, listings nobody holds (no open directory handle, not among the
    // engine's recent ones) are dropped, oldest first, down to 3/4 of it: a
    // walk over a bucket of 10^8 keys kept every listing for good. A dropped
    // listing comes back from the index (persisted) or the bucket. Default:
    // 2M entries (~300 MB).
    size_t max_listed_entries = size_t{1} << 21;
    // The clock listings are stamped and aged by, in ms. Null: the wall
    // clock (NowMs), which the FUSE layer's entry timeouts also use. Tests
    // set a fake one so that "stale" does not depend on the machine's speed.
    std::function<int64_t()> clock_ms{};
  };

  // `store` may be null (no persistent metadata). Not owned.
  Namespace(Backend* backend, BlockStore* store, Metrics* metrics, Options opts);
  // Stops the walk prefetch (queued listings are dropped, running ones end).
  ~Namespace();
  // The mount is going away (called with the backend's Cancel): a listing in
  // progress ends at its next page, and its failure is not an outage.
  void BeginShutdown() { stopping_.store(true); }
  Namespace(const Namespace&) = delete;
  Namespace& operator=(const Namespace&) = delete;

  // Child `name` of directory `parent`; adds one lookup reference.
  Result<InodeAttr> Lookup(uint64_t parent, std::string_view name);
  // readdirplus: entry `e` of `l`, the listing of directory inode `parent`
  // that a directory handle holds, as Lookup(parent, e.name) would give it
  // from that listing (one lookup reference added), without asking for the
  // listing again. The handle's listing may be older than the namespace's:
  // it then never moves the name back to an older version (as Lookup).
  Result<InodeAttr> LookupListed(uint64_t parent, const DirListing& l, const DirEntry& e);
  // True once the inode's count reached 0 (or it was not known): the
  // kernel has dropped it.
  bool Forget(uint64_t ino, uint64_t nlookup);
  // Current attributes; refreshed from the parent's listing once stale.
  Result<InodeAttr> GetAttr(uint64_t ino);
  // The listing of a directory inode (fresh within the TTL).
  Result<std::shared_ptr<const DirListing>> ReadDir(uint64_t ino);

  // Validates a name from the bucket: not "", ".", "..", no '/' or NUL,
  // at most 255 bytes. Unsafe names are hidden from the mount.
  static bool SafeName(std::string_view name);

  // The inode number a name gets at lookup: XXH3-64 of its key ("/"-ended
  // for a directory) and `version` (the ETag; size and mtime for a server
  // that lists none; "" for a directory), in [2, 2^62) (the stats file's is
  // 2^62). The same in every mount of the bucket; taken by a live inode (a
  // hash collision, or an older inode of the same version), the next free
  // number is used instead.
  static uint64_t InoOf(std::string_view key_slash, std::string_view version);
  // What readdir reports as d_ino for entry `e` of directory inode `dir`:
  // the inode a lookup of it gives (its live inode if that is of the
  // listed version, else InoOf), so `ls -i` and os.scandir agree with stat.
  uint64_t EntryIno(uint64_t dir, const DirEntry& e) const;
  // The parent of directory inode `ino` (".." in readdir); the root for the root.
  uint64_t ParentOf(uint64_t ino) const;

  size_t inode_count() const;
  size_t listed_entries() const;  // entries of the listings kept in memory
  // Keys hidden from the mount (names unsafe for a file system: "a/../b",
  // over 255 bytes, ...) in the latest listing of each directory, summed
  // over the first 4,096 directories that had any. The log names them.
  uint64_t hidden_names() const;

  // The listing of directory `dir_key` ("" root, "a/b" otherwise) if it is in
  // memory (fresh or not), without asking the backend; null otherwise. For
  // the policy engine's next-file and epoch prefetching, whose fetches check
  // the ETag anyway.
  std::shared_ptr<const DirListing> CachedListing(const std::string& dir_key);
  // The entry of object `key` from its parent's in-memory listing, if any.
  std::optional<DirEntry> CachedEntry(const std::string& key);

  // A read of version `etag` of `key` found that the bucket no
  // longer has that version (changed or deleted). If the directory's listing
  // still lists it, the listing is marked out of date and listed again at
  // once in the background: lookups in the directory wait for it (no stale
  // listing served, no TTL waited out); later notes of the same version do
  // not mark it again. The kernel's entry for the name should be dropped
  // either way: the listing still names this version (marked), or the name
  // leads to another inode or nowhere. (It returned that as a flag, false
  // while a relisting had replaced the listing but no lookup had yet given
  // the name its new inode: a race a CI run hit.)
  void NoteChanged(const std::string& key, const std::string& etag);
  // The parent inode and name of inode `ino` (for the kernel's entry cache).
  std::optional<std::pair<uint64_t, std::string>> EntryOf(uint64_t ino) const;

  // Called after a listing is fetched or loaded, with the directory key and
  // its number of entries (the access stream tree's N). Set before use.
  void set_listing_hook(std::function<void(const std::string&, size_t)> h) { listing_hook_ = std::move(h); }
  // What a fetched listing changed against the one it replaced: entries the
  // new one no longer has (or has as the other kind, file <-> directory),
  // and files it lists with another version (ETag; size and mtime without).
  struct ListingDiff {
    std::vector<DirEntry> gone;     // as the old listing had them
    std::vector<DirEntry> changed;  // as the new listing has them
    std::vector<DirEntry> added;    // names the old listing did not have
    bool empty() const { return gone.empty() && changed.empty() && added.empty(); }
  };
  static ListingDiff DiffListings(const DirListing& old, const DirListing& now);
  // Called after a fetched listing of `dir_key` replaced one in memory that
  // differs from it, outside the namespace's locks. The mount drops the
  // kernel's entries of the names gone or changed, so that `stat` agrees
  // with `readdir` from then on (the kernel could otherwise keep an entry
  // for what is left of its TTL, e.g. after a relisting a failed read
  // asked for) and forgets the inodes of the names gone; the policy engine
  // and the stream tree forget the names gone. A bucket whose names roll (a
  // checkpoint or shard per hour, the old ones deleted) grew the daemon for
  // good before. Not called for a listing that was not in memory (dropped
  // for room, or fresh from an earlier mount's index): its changes are not
  // seen.
  using RelistHook = std::function<void(const std::string& dir_key, const ListingDiff& diff)>;
  void set_relist_hook(RelistHook h) { relist_hook_ = std::move(h); }
  // Of `entries` (of directory `dir_key`), those the namespace has a live
  // inode for, as (parent inode, name): the kernel entries to drop.
  std::vector<std::pair<uint64_t, std::string>> LiveEntries(const std::string& dir_key,
                                                            const std::vector<DirEntry>& entries) const;
  // The inode of directory `dir_key` if the namespace has one (the parent
  // of the kernel's entries below it, negative ones included).
  std::optional<uint64_t> DirIno(const std::string& dir_key) const;

  // The walk prefetch's descent: listings ahead of the walkers at most, and
  // how long one nobody reads counts.
  static constexpr size_t kWalkAhead = 64;
  static constexpr int64_t kWalkAheadIdleMs = 30000;

 private:
  std::optional<uint64_t> DirInoLocked(const std::string& dir_key) const;  // DirIno; mu_ held
  // One per name the kernel holds (a million for a data set of a million
  // files it looked up): no copy of what attr has (its name is the last
  // component of attr.key), and by_key_ points at it rather than holding
  // the key again. Both cost ~130 bytes a file until 2026-11-28.
  struct Inode {
    uint64_t ino;
    uint64_t parent;
    InodeAttr attr;
    int64_t attr_ms;   // fetched_ms of the listing attr came from (its freshness)
    uint64_t nlookup;
    uint64_t listing_seq = 0;  // DirListing::seq of that listing
    // A file inode whose name now leads to another version (another inode):
    // its attributes stay those of its own version.
    bool superseded = false;
  };
  struct Fetch;  // an in-flight listing fetch (single-flight)

  // `background`: a walk prefetch or an outage retry (never served the
  // stale listing of a failed refresh without asking the bucket).
  Result<std::shared_ptr<const DirListing>> Listing(const std::string& dir_key, bool background = false);
  Result<std::shared_ptr<const DirListing>> FetchListing(const std::string& dir_key);
  // The work of the leader of `fetch`: fetch (or fall back to the stale
  // listing), publish, wake the waiters (CompleteFetch); an exception ends
  // the fetch, failed, and goes on.
  Result<std::shared_ptr<const DirListing>> Complete(const std::string& dir_key,
                                                     const std::shared_ptr<Fetch>& fetch);
  Result<std::shared_ptr<const DirListing>> CompleteFetch(const std::string& dir_key,
                                                          const std::shared_ptr<Fetch>& fetch);
  void AbandonFetch(const std::string& dir_key, const std::shared_ptr<Fetch>& fetch) noexcept;
  bool Fresh(int64_t fetched_ms) const;
  // A listing is fresh for the TTL, or for twice its LIST's time if that
  // is longer: a directory whose LIST outlasts the TTL was stale the moment
  // it arrived, and was listed again back to back for as long as lookups
  // came (a flat directory of a million keys: ~100 s a LIST, TTL 60 s).
  bool Fresh(const DirListing& l) const;
  int64_t Now() const;  // opts_.clock_ms, else NowMs()
  // Child `name` of `dir_key` from its listing, whose seq goes to *listing_seq.
  Result<InodeAttr> Child(const std::string& dir_key, std::string_view name, uint64_t* listing_seq);
  // The attributes of entry `e` of listing `l` of `dir_key`.
  InodeAttr EntryAttr(const std::string& dir_key, const DirListing& l, const DirEntry& e);
  // The inode of `child` (named `name` in directory inode `parent`, from a
  // listing of sequence `listing_seq`): the name's live inode if of the same
  // version, else a new one. Adds one lookup reference. Takes mu_.
  InodeAttr AddLookup(uint64_t parent, const InodeAttr& child, uint64_t listing_seq);
  // The key of directory inode `ino` ("" root); NotFound if not known, InvalidArgument if not a directory.
  Result<std::string> DirKeyOf(uint64_t ino) const;
  // After ReadDir of `dir_key`: detects a walk over its parent's children and
  // queues the next siblings' listings.
  void NoteWalk(const std::string& dir_key);
  void WalkWorker();
  // Queues listings of `dirs` for the background threads (started on first
  // use); takes walk_mu_ only.
  // `descend`: walk items, whose subdirectories are queued in turn.
  void QueueBackground(std::vector<std::string> dirs, bool descend = false, bool front = false);
  // Up to `limit` subdirectories of `l` (of `dir_key`) from entry `from` on,
  // whose listings are not fresh nor being fetched; takes listings_mu_.
  std::vector<std::string> UnlistedSubdirs(const std::string& dir_key, const DirListing& l, size_t from,
                                           size_t limit);
  // Queues the refresh `fetch` of `dir_key` for the background threads,
  // ahead of walk listings; false if none runs, or none is idle and the
  // bucket is not `bucket_slow` (then the caller does it).
  bool QueueRefresh(const std::string& dir_key, std::shared_ptr<Fetch> fetch, bool bucket_slow);
  // Under walk_mu_: at least one background thread runs (false if none can).
  bool StartWalkThreads();

  Backend* backend_;
  BlockStore* store_;
  Metrics* metrics_;
  Options opts_;
  // A directory's mtime: when the mount started (S3 prefixes have none; the
  // time of the listing that named it would change every TTL for nothing).
  int64_t dir_mtime_ns_ = 0;
  // When a listing last failed for an unreachable bucket (0: never); under
  // listings_mu_. Within kSlowBucketMs of it the bucket counts as slow
  // (Listing: refreshes are queued, not made by the lookups themselves).
  int64_t last_unreachable_ms_ = 0;
  static constexpr int64_t kSlowBucketMs = 10000;
  std::function<void(const std::string&, size_t)> listing_hook_;
  RelistHook relist_hook_;
  std::mutex relist_mu_;  // one relist_hook_ call at a time (taken alone)
  // After a fetched listing of `dir_key` replaced one that differs: drops the
  // listings of directories gone (memory and index), then calls relist_hook_.
  void Relisted(const std::string& dir_key, const ListingDiff& diff);

  mutable std::mutex mu_;  // guards inodes_, by_key_
  std::unordered_map<uint64_t, Inode> inodes_;
  // The inode a name leads to (a superseded one is not here), found by its
  // key and kind (KeyRef; KeyOf turns "a/b/" into a directory's). Nodes of
  // inodes_, whose addresses are stable; an inode's key and kind never
  // change.
  struct KeyRef {
    std::string_view key;
    bool dir = false;
  };
  static KeyRef KeyOf(std::string_view key_slash) {
    const bool dir = !key_slash.empty() && key_slash.back() == '/';
    return {dir ? key_slash.substr(0, key_slash.size() - 1) : key_slash, dir};
  }
  static KeyRef KeyOf(const Inode* n) { return {n->attr.key, n->attr.is_dir}; }
  struct ByKeyHash {
    using is_transparent = void;
    size_t operator()(KeyRef r) const noexcept;
    size_t operator()(const Inode* n) const noexcept { return (*this)(KeyOf(n)); }
  };
  struct ByKeyEq {
    using is_transparent = void;
    static KeyRef Ref(KeyRef r) { return r; }
    static KeyRef Ref(const Inode* n) { return KeyOf(n); }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
      const KeyRef x = Ref(a), y = Ref(b);
      return x.dir == y.dir && x.key == y.key;
    }
  };
  std::unordered_set<Inode*, ByKeyHash, ByKeyEq> by_key_;
  // Points `key`'s entry of by_key_ at `n`. Requires mu_.
  void OwnKey(Inode* n);

  mutable std::mutex listings_mu_;  // guards listings_, fetches_, loading_, retry_after_ms_, refresh_due_, changed_*, unpersisted_
  std::unordered_map<std::string, std::shared_ptr<const DirListing>> listings_;
  size_t listed_entries_ = 0;  // entries of listings_ summed (guarded by listings_mu_)
  uint64_t use_clock_ = 0;     // DirListing::used stamps (guarded by listings_mu_)
  // Sets listings_[dir_key], then trims (Options::max_listed_entries). Requires listings_mu_.
  void KeepListingLocked(const std::string& dir_key, std::shared_ptr<const DirListing> l);
  std::unordered_map<std::string, std::shared_ptr<Fetch>> fetches_;
  // Directories whose persisted listing a caller is reading (Listing), and
  // the wait for it (with listings_mu_).
  std::unordered_set<std::string> loading_;
  std::condition_variable loaded_cv_;
  // Directories whose refresh failed (bucket unreachable): their stale
  // listing is served without asking the bucket again until this time.
  std::unordered_map<std::string, int64_t> retry_after_ms_;
  // Directories whose retry is queued for the background threads.
  std::unordered_set<std::string> refresh_due_;
  // Directories a read found out of date (NoteChanged), with the note's
  // number: cleared by a listing fetched after the latest note.
  std::unordered_map<std::string, uint64_t> changed_;
  // Directories whose latest listing could not be saved (a full or
  // read-only cache volume), with its fetched_ms: the index's copy is older
  // and is not loaded (LoadPersisted) until a listing is saved again.
  std::unordered_map<std::string, int64_t> unpersisted_;
  // The index's copy of dir_key's listing, unless a newer one of this mount
  // was not saved over it (nullptr then, or if there is none).
  std::shared_ptr<DirListing> LoadPersisted(const std::string& dir_key);
  // Keys NoteChanged marked a directory for: the version and when (bounded).
  // A relisting that still names that version is not repeated for a failed
  // read within kRelistConfirmedMs.
  static constexpr int64_t kRelistConfirmedMs = 5000;
  struct Noted {
    std::string etag;
    int64_t ms = 0;        // when first noted
    bool renewed = false;  // the mark renewed for it once already (NoteChanged)
  };
  std::unordered_map<std::string, Noted> noted_;
  // Directories whose hidden keys were warned about (FetchListing), and
  // how many keys each one's latest listing hid (kMaxHiddenDirs at most).
  mutable std::mutex hidden_mu_;
  std::unordered_set<std::string> hidden_warned_;
  std::unordered_set<std::string> slow_warned_;  // directories whose LIST outlasted the TTL (FetchListing)
  static constexpr size_t kMaxHiddenDirs = 4096;
  std::unordered_map<std::string, uint64_t> hidden_;
  uint64_t hidden_total_ = 0;
  void NoteHidden(const std::string& dir_key, uint64_t n);
  uint64_t changed_seq_ = 0;
  std::atomic<bool> serving_stale_{false};  // for one warning per outage
  std::atomic<uint64_t> listing_seq_{0};    // the last DirListing::seq given

  // Walk prefetch. walk_mu_ is never held together with mu_ or listings_mu_.
  std::mutex walk_mu_;
  std::condition_variable walk_cv_;
  std::unordered_map<std::string, std::string> walk_last_;  // parent -> child last read (bounded)
  struct WalkItem {
    std::string key;
    bool descend = false;  // a walk's: its subdirectories are queued once listed
  };
  std::deque<WalkItem> walk_queue_;                          // dir keys to list
  std::deque<std::pair<std::string, std::shared_ptr<Fetch>>> refresh_queue_;  // stale refreshes, first
  std::unordered_set<std::string> walk_queued_;             // queued or being listed
  // Descent listings ahead of the walkers: queued, or listed and not read by
  // a ReadDir yet, with when they were queued (kWalkAhead at most).
  std::unordered_map<std::string, int64_t> walk_ahead_;
  std::vector<std::thread> walk_threads_;                   // started on first use
  bool walk_stop_ = false;
  size_t walk_busy_ = 0;  // background threads working on an item
  std::atomic<bool> stopping_{false};  // set by the destructor: FetchListing stops between pages
};

int64_t NowMs();

// Whether `store` holds a saved listing of directory `dir_key` ("": the
// mount's root), fresh or not: an earlier mount of the source listed it.
bool HasSavedListing(BlockStore& store, const std::string& dir_key);

}  // namespace igt
