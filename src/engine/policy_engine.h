#pragma once
// PolicyEngine (DESIGN.md sec. 3 steps 5-6 and sec. 6): turns the access
// stream labels into cache decisions, independent of any store. It tracks the
// cached units (id, object key, unit index, bytes, the stream that governs
// them) and, from the labels of an AccessStreamTree, decides
//   (a) prefetch plans after each read (OnRead),
//   (b) eviction victims (PickVictim): the stream giving up space is the one
//       whose next victim has the lowest marginal value (byte hits per
//       second per cached byte, docs/POLICIES.md), recomputed every
//       allocation period with hysteresis; inside it, that stream's
//       eviction module picks the unit,
//   (c) admission for never-cache prefixes (Admit), pins and quotas.
// The same engine runs the baselines (`lru`, `lfu`, `fifo`, `2random`,
// `lru-readahead`): one stream holding every unit, one module, no tree.
// The simulator (src/sim) and the live mount (src/engine/live_engine.h)
// drive the very same object.
//
// Streams ("groups"). A unit belongs to the retention stream of its file at
// insert time: the highest confidently labelled node below the root on the
// file's path (a dataset directory, a shard directory, a skewed embedding
// file), or, while nothing is labelled yet, "?<parent dir>" (unknown, LRU).
// The root is skipped: on a shared mount it mixes every job.
//
// Ownership: the engine owns its modules and unit table; the tree and the
// listing callback are borrowed and must outlive it.
// Thread-safety: none. The caller serialises every call (the live adapter
// holds one mutex; the simulator is single-threaded).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "igtcache/policy.h"
#include "igtcache/status.h"
#include "src/engine/policy_file.h"
#include "src/stream/access_stream_tree.h"

namespace igt::engine {

// Whether `key` ("a/b/c", or "a/b/" for a directory) is under one of `dirs`
// ("a/", "a/b/"; a directory is under itself).
bool UnderDirs(std::string_view key, const std::unordered_set<std::string_view>& dirs);

// The names --policy accepts: "igt" and the baselines (belady lives in the
// simulator: it needs the future).
std::vector<std::string> EnginePolicyNames();

struct EngineOptions {
  std::string policy = "igt";       // igt | lru | lfu | fifo | 2random | lru-readahead
  uint64_t unit_bytes = 1 << 20;    // the cache unit (cache.unit_size_bytes)
  // igt: a miss in a file whose block stream is labelled random or skewed
  // fetches pieces of this size (cache.sub_unit_bytes; 0 = whole units).
  uint64_t sub_unit_bytes = 64 << 10;
  uint64_t capacity_bytes = 0;      // the cache size, for space checks
  PolicyFile policy_file;           // igt only; profile "training" by default
  uint64_t seed = 1;                // 2random
  // lru-readahead's fixed window. Default: 8 units (8 MiB at 1 MiB units)
  uint64_t baseline_readahead_units = 8;
  // ... ramping, as mountpoint-s3's and the kernel's windows do, up to this
  // many units (doubling at each read that continues); 0 = fixed.
  uint64_t baseline_readahead_max_units = 64;
  // Backend model used to weigh a hit by the time it saves (space
  // allocation): a miss costs miss_latency_us per read plus the units it
  // touches at bandwidth_bytes_per_s. Defaults: 25 ms, 90 MB/s (S3 Standard,
  // DESIGN.md sec. 8; the simulator passes its own model).
  double miss_latency_us = 25000;
  double bandwidth_bytes_per_s = 90e6;
  // Optional: up to `n` files after `path` in its directory's listing order,
  // found without the whole listing (the mount: a binary search in the
  // namespace's listing). Unset: taken from the ListingFn's listing. The
  // mount's ListingFn converts a whole listing when it is not among those
  // kept: with more directories scanned at once than kept (3 of 282,000
  // entries in all), that was every first read of a file of a scan, ~10 ms
  // each under the engine's lock (a reviewer's measure).
  std::function<std::vector<ListedFile>(std::string_view path, size_t n)> next_files;
};

// Entries directly in directory `dir` ("" root, "a/b/" otherwise) in listing
// order: files, and subdirectories (ListedFile::is_dir, path "a/b/c/"); null
// if unknown. The pointer must stay valid until the next call.
using ListingFn = std::function<const std::vector<ListedFile>*(std::string_view dir)>;

struct StreamStats {
  std::string key;        // stream path ("a/b/", "a/f.bin"), "?dir/" unlabelled, "*" baselines
  std::string label;      // "sequential" | "random" | "skewed" | "unknown"
  std::string eviction;   // module name
  uint64_t cached_bytes = 0, cached_units = 0;
  uint64_t read_bytes = 0, hit_bytes = 0;
  uint64_t prefetch_bytes = 0, prefetch_hit_bytes = 0, prefetch_wasted_bytes = 0;
  uint64_t evicted_bytes = 0;
  uint64_t epoch = 0;     // random streams: epochs seen
  uint64_t items = 0, item_bytes = 0;  // files of the stream (its working set) and their size
  double value = 0;       // marginal byte hits / s / cached byte at the last allocation
  bool warming = false;   // a directory warm-up holds free space for it (POLICIES.md)
  bool multi_pass = false;  // read in several passes at once (jobs sharing the items: POLICIES.md)
  // The policy file's override this stream is made for (its prefix), if any.
  std::optional<std::string> override_prefix;
};

// An override of the policy file, as in effect (stats: a user can see that
// a pin, quota or never_cache took).
struct OverrideStats {
  std::string prefix;
  std::string pattern;  // forced label, "" = detected
  bool pin = false, never_cache = false;
  uint64_t quota_bytes = 0;
  uint64_t cached_bytes = 0;  // of its streams
};

struct EngineStats {
  uint64_t cached_bytes = 0, cached_units = 0;
  uint64_t prefetch_bytes = 0, prefetch_hit_bytes = 0, prefetch_wasted_bytes = 0;
  uint64_t allocations = 0;         // allocation periods run
  uint64_t victim_stream_switches = 0;
  uint64_t policy_reloads = 0;      // SetPolicyFile calls that succeeded
  std::string profile;              // the policy file's profile (igt), "" for a baseline
  uint64_t readers = 0;             // (pid, file) read cursors tracked
  uint64_t files = 0;               // file records (PolicyEngine::file_records)
  uint64_t ghosts = 0;              // every stream's ghosts (PolicyEngine::GhostBudget)
  uint64_t gone_files = 0;          // files with a record NoteGone found gone, since start
  std::vector<StreamStats> streams;  // by cached bytes, largest first
  std::vector<OverrideStats> overrides;  // in the policy file's order
};
nlohmann::json ToJson(const EngineStats& s);

class PolicyEngine {
 public:
  // `tree` may be null for the baselines (igt requires it). `listing` may be
  // empty (no next-file prefetching).
  static Result<std::unique_ptr<PolicyEngine>> Create(EngineOptions opts, stream::AccessStreamTree* tree,
                                                      ListingFn listing);
  ~PolicyEngine();

  // One read, already recorded in the tree by the caller. Returns the ranges
  // to prefetch (the caller skips cached and in-flight units and applies its
  // bandwidth and memory budget).
  std::vector<PrefetchRange> OnRead(uint64_t now_us, uint32_t pid, std::string_view path,
                                    uint64_t offset, uint64_t length, uint64_t file_size);

  // The piece size a demand miss in `path` fetches: sub_unit_bytes (igt,
  // a file of several units whose block stream was labelled random or
  // skewed at its last read), else 0 (whole units).
  uint64_t SubUnitBytes(std::string_view path) const;
  // Bytes of `path` cached now (units and sub-units); 0 if never seen.
  uint64_t CachedBytes(std::string_view path) const;
  // `etag` is the current version of `path` (the mount read it, and it is
  // the one listed). Only units of that version count as the file's cached
  // bytes: fills, warm-ups and epoch plans see an overwritten file's old
  // units as not its own (they stay, and are evicted as any unit). Units
  // inserted with another version than the current one do not count either.
  void NewVersion(std::string_view path, std::string_view etag);

  // Objects the source no longer has (a relisting found them gone):
  // `paths` are files, or directories ("a/b/", everything below). Each
  // file leaves its stream's items and working set, its cached units are
  // queued as the first victims (as a dead version's), and its record is
  // dropped once it holds no unit. Without this, every name ever read
  // kept a record for good: a bucket whose names roll (a checkpoint or
  // shard per hour, the old ones deleted) grew the daemon without bound.
  // Reads of such a file later (a handle still open on it) plan nothing and
  // join no stream; a new object of the name is a file again once
  // NewVersion names it (the mount calls it when a read sees the listed
  // version).
  void NoteGone(const std::vector<std::string>& paths);
  // Files the engine keeps a record of (read, listed beside a stream, or
  // holding cached units).
  size_t file_records() const { return files_.size(); }

  // False for units under a never-cache prefix (do not insert them).
  bool Admit(std::string_view path) const;
  // The label an override forces on `path`'s own blocks (a stream::Label
  // value), or -1: its pattern for the file it names, sequential for every
  // file under it (ForcedFileLabel).
  int ForcedLabel(std::string_view path) const;

  // A unit entered the cache (demand fetch or prefetch). Re-inserting a
  // tracked id replaces it. `unit_index` may be a sub-unit's store index
  // (block_store.h): the unit holding it gives its scan position.
  // `disk_bytes`: what it takes against capacity_bytes (the BlockStore counts
  // header and whole blocks); 0 = `bytes`. Only the free-space checks use it.
  // `etag`: the unit's object version, if known; units of a version other
  // than the file's current one (NewVersion) do not count as its cached bytes.
  // `restored`: found in the cache at start-up, not fetched now.
  void OnInsert(const std::string& id, std::string_view path, uint64_t unit_index, uint64_t bytes,
                bool prefetched, uint64_t now_us, uint64_t disk_bytes = 0, std::string_view etag = {},
                bool restored = false);
  // A cached unit was read (`bytes` of it; 0 = the whole unit). `hit`
  // false: read, but not served from the cache (a miss whose own fetch found
  // the unit inserted meanwhile): not counted in the stream's hit bytes.
  void OnHit(const std::string& id, uint64_t bytes, uint64_t now_us, bool hit = true);
  // A unit left the cache for any reason.
  void OnRemove(const std::string& id);
  // The next unit to evict (not removed; call OnRemove once it is gone).
  std::optional<std::string> PickVictim(uint64_t now_us);
  // Before an insert that must evict: false if a unit of `path` just read
  // by a miss (not `prefetched`) would be the first victim once inserted,
  // so caching it would only churn (EvictionPolicy::AdmitUnit). The store
  // and the simulator both ask it, then evict, then insert.
  bool AdmitInsert(std::string_view path, bool prefetched, uint64_t now_us);
  // `igtcache warm` is about to fetch units of `path`: its units cached
  // already, and prefetched units of it inserted before its next read, wait
  // in the "(warm)" stream, held (worth as much as a readahead window) for
  // kUserWarmHoldUs after the latest warm-up, and move to the file's stream
  // on their first read.
  void NoteWarm(std::string_view path, uint64_t now_us);
  static constexpr uint64_t kUserWarmHoldUs = 30ull * 60 * 1000 * 1000;  // 30 minutes

  bool Contains(const std::string& id) const;
  uint64_t cached_units() const;
  uint64_t cached_bytes() const { return cached_bytes_; }
  uint64_t capacity_bytes() const { return opts_.capacity_bytes; }
  void set_capacity_bytes(uint64_t b) { opts_.capacity_bytes = b; }
  const EngineOptions& options() const { return opts_; }

  // Replaces the policy file (SIGHUP reload): new prefetch modules, each
  // stream's eviction module rebuilt from the new spec with its units kept,
  // overrides re-resolved. igt only; the cache is not touched.
  Status SetPolicyFile(PolicyFile pf);
  uint64_t policy_reloads() const { return reloads_; }

  // Recomputes the stream values now (else done every allocation period).
  void Allocate(uint64_t now_us);
  EngineStats Stats() const;

 private:
  struct Group;
  struct SiblingPool;
  struct Unit;
  struct FileRec;

  PolicyEngine(EngineOptions opts, stream::AccessStreamTree* tree, ListingFn listing);
  Status Init();
  bool igt() const { return mode_igt_; }
  Group* GroupFor(std::string_view path, uint64_t now_us, int* prefetch_label, int* file_label,
                  int* dir_label);
  Group* GetGroup(const std::string& key, int label, const PathOverride* ov);
  // Relabels `g`; its eviction module is rebuilt (its units handed over)
  // only if the label's module differs, or `rebuild` (a reload).
  void SetLabel(Group* g, int label, bool rebuild = false);
  void MakeJudge(Group* g);  // g->judge, for its label's module
  bool Judged(const Group* g) const;  // its label's module is one a judge checks
  // Judges alive (Group::judge), at most kMaxJudges: the streams read first
  // get one; when all are taken and another stream wants one, the judge of
  // a stream not read for kJudgeIdleUs goes (Allocate). Up to ~3 MiB each,
  // measured with its ghosts full (StreamJudge::kMaxEntries).
  std::shared_ptr<size_t> judges_ = std::make_shared<size_t>(0);
  static constexpr size_t kMaxJudges = 16;
  static constexpr uint64_t kJudgeIdleUs = 30'000'000;
  bool judge_wanted_ = false;  // a stream found no judge free since the last Allocate
  const PathOverride* OverrideFor(std::string_view path) const;
  double Value(const Group* g) const;      // seconds saved / s / cached byte
  double ByteValue(const Group* g) const;  // byte hits / s / cached byte
  // `same_file`: the reader's previous read was in this file.
  void NewVisit(Group* g, FileRec* f, const std::string* fkey, bool same_file);
  // `f` was read in `g`'s current epoch (counted once: callers check).
  void MarkReadThisEpoch(FileRec& f, Group* g);
  // The file's current read belongs to its stream's previous epoch (a
  // straggler's, or a visit begun before the epoch turned).
  bool PrevEpochRead(const FileRec& f, const Group* g) const;
  // Makes `g` the stream of file `key`: it leaves its old stream's items and
  // working set (a file is an item of one stream at a time).
  void JoinGroup(FileRec& f, const std::string* key, Group* g);
  void LeaveGroup(FileRec& f, const std::string* key);  // f.group becomes null
  // Drops the record of file `key` (NoteGone: gone, no unit left).
  void EraseFile(const std::string& key);
  void CompactItems(Group* g);  // drops the null items, keeping order and the cursor
  std::vector<ListedFile> UnreadItems(Group* g, size_t n);
  // Files of `dir` and of its direct subdirectories, by path, at most
  // kMaxSubtreeFiles (from listing_, which may not know some directories).
  // The files at the mount's root (the root stream's items), not below.
  std::vector<ListedFile> RootFiles() const;
  std::vector<ListedFile> SubtreeFiles(const std::string& dir) const;
  static constexpr size_t kMaxSubtreeFiles = 1 << 17;
  static constexpr size_t kMaxReadDirs = 1 << 12;
  static constexpr double kForgetReadDirGaps = 8;  // Group::ForgetStaleReadDirs
  static constexpr uint32_t kItemPasses = 16;       // per epoch (UnreadItems)
  static constexpr size_t kMinGhostIds = 1 << 16;  // per stream, at least (NoteGhost); all streams' (GhostBudget)
  // All streams' ghosts together: this many times the units the cache holds
  // (at least kMinGhostIds).
  static constexpr uint64_t kGhostBudgetUnits = 2;
  std::vector<ListedFile> NextFiles(std::string_view path, size_t n);
  // Directory warm-up: a stream over a directory read at random or skewed
  // whose files all fit in free space proposes its uncached files, a few per
  // read, in listing order.
  void Warm(Group* g, std::vector<PrefetchRange>& plan);
  // Uncached bytes of the other streams warming up (warming_) over
  // directories beside g's (the same parent): space promised to them.
  uint64_t WarmPromised(const Group* g) const;
  // Bytes of the files a warm-up of `g` would fetch that are not cached (a
  // pass over its subtree).
  uint64_t UncachedWarmBytes(const Group* g) const;
  static constexpr uint64_t kWarmJudgeUs = 1'000'000;  // between two UncachedWarmBytes of a stream
  static constexpr uint64_t kWarmRemeasureUs = 30'000'000;  // a measure that did not fit, repeated at least
  static constexpr size_t kWarmMeasureMaxFiles = 1 << 14;  // larger subtrees are not measured
  void StopWarm(Group* g);  // no longer holds space (done, idle or dropped)
  void NoteQuotas();        // override_index_, has_quota_, has_pin_ and has_never_cache_ from the policy file
  // The stream the next victim comes from (quota, then lowest value with
  // hysteresis), not made the current one.
  // The stream to give space next; `skip`: streams not to ask (their
  // victim is a unit being read, PickVictim).
  Group* VictimGroup(std::span<Group* const> skip = {});
  // A cached unit its file's last read stopped part-way through.
  bool PartRead(const std::string& id) const;
  static constexpr size_t kPartReadTries = 4;
  // A directory stream labelled random (no override, not a holding stream):
  // its siblings of this kind under the same parent (an image folder's class
  // directories) share room and value (UnreadItems, VictimGroup).
  static bool SiblingUniform(const Group* g);
  // g's read_cached_bytes / epoch_inflight_bytes become `v`, its pool's
  // sums with them.
  static void SetReadCached(Group* g, uint64_t v);
  static void SetInflight(Group* g, uint64_t v);
  // g joins or leaves its parent's pool as SiblingUniform(g) says now: after
  // a change of its label or override, and before it goes (leave = true).
  void SyncPool(Group* g, bool leave = false);
  Group* WarmGroup();  // the (warm) stream, made on first use
  // A stream that holds units until read (fifo, forced `label`, `kind` set):
  // the (readahead) and (warm) streams.
  Group* HoldingGroup(std::string_view key, int label, bool Group::*kind);
  uint64_t SubUnitBytesOf(const FileRec& f) const;
  // The sub-unit size misses may fetch (igt, sub-units configured smaller
  // than a unit), else 0.
  uint64_t PieceBytes() const;
  // f's jump count aged to now (FileRec::jump_score), and whether it is at
  // least kScanBesideJumps.
  double JumpScore(const FileRec& f) const;
  bool Jumpy(const FileRec& f) const;
  uint64_t FreeBytes() const;                 // capacity not taken by cached units (data bytes, estimated)
  // The span of a stream's latest victims whose misses its shadow value
  // counts: about half its size, within [4 units, 1/16 of the capacity].
  uint64_t ShadowBytes(const Group* g) const;
  uint64_t UnitsOf(uint64_t size) const;      // units a file of `size` bytes spans
  bool Idle(const Group* g) const;  // stopped (kBusyReads), worth 0 until its next read
  uint64_t IdleBytes(const Group* except) const;  // cached bytes of idle streams other than `except`
  void NoteGhost(Group* g, const std::string& id, uint64_t bytes, double weight);
  // A weight noted at us (GhostMark), aged at g's lfu half-life to now.
  double AgedWeight(const Group* g, double weight, uint64_t us) const;
  // Hits per second a unit of the ShadowBytes() of space would get if given
  // to the evicted units of highest aged weight (lfu's counts), or -1.
  double BoundaryRate(const Group* g) const;
  void PopGhost(Group* g);  // its oldest ghost
  uint64_t GhostBudget() const;
  void TrimGhosts();
  uint64_t ghost_entries_ = 0;  // every stream's ghosts
  // Moves a cached unit to `dest`, or to its file's stream (f.group); with
  // `read`, the unit counts as read in that stream's current epoch; with
  // `passed`, its module takes it for one its reader is done with (a gap a
  // strided reader skipped), not one about to be read.
  void MoveUnit(const std::string& id, Unit& u, const FileRec& f, Group* dest = nullptr, bool read = false,
                bool passed = false);
  // Group::first_unit's list: `u` joins or leaves `g`'s units.
  static void LinkUnit(Group* g, Unit& u);
  static void UnlinkUnit(Group* g, Unit& u);
  // What `g`'s module is told of a unit it is handed: not read yet if
  // prefetched and unread, or, in a stream read in epochs (random), not read
  // in its current epoch (keep's order; a module rebuilt by a label flip
  // must not take every unit read in an earlier epoch for a first victim).
  bool NotReadYet(const Unit& u, const Group* g) const;
  Group* WindowGroup();  // the stream of readahead units not read yet
  // The stream of units scanned by a reader while others read their file at
  // random (kScanRunUnits in policy_engine.cc): a sequential stream of its
  // own, made on first use.
  Group* ScanGroup();
  // Whether unit `index` of file `f` is where f's scanner (FileRec::
  // scan_pid) is reading now: in its latest read or up to `behind` units
  // before it; with `behind` 0, the unit its latest read ended part-way
  // through.
  bool ScannerAt(const FileRec& f, uint64_t index, uint64_t behind) const;
  // f has a scanner split off (kScanRunUnits) that read within kScanFreshUs.
  bool ScanFresh(const FileRec& f) const;
  // Whether the window stream's oldest unit has waited kWindowStaleUs unread.
  bool WindowStale(const Group* g) const;
  // Units of an item an epoch plan proposes: as deep as the stream's reads
  // go (Group::item_depth), kEpochItemMaxUnits at most.
  uint64_t EpochItemUnits(const Group* g) const;
  void MaybeAllocate(uint64_t now_us);
  void TrimPlan(std::vector<PrefetchRange>& plan);

  EngineOptions opts_;
  stream::AccessStreamTree* tree_;
  ListingFn listing_;
  bool mode_igt_ = false;
  uint64_t now_us_ = 0;

  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;
  // The streams holding units (Group::holding_at), the ones VictimGroup
  // looks at; NoteHolding after each change of a stream's units.
  std::vector<Group*> holding_;
  uint64_t holding_count_ = 0;  // streams that began holding units so far (Group::holding_seq)
  void NoteHolding(Group* g);
  // Each reader's latest file (FileRec nodes do not move): a file's part-read
  // unit counts while its reader is still there (PartReadActive), and a
  // reader's next read in it is the same visit (OnRead, NewVisit).
  // With the record's rank (unique per record made): a record erased and
  // another made at its address is not taken for it.
  std::unordered_map<uint32_t, std::pair<const FileRec*, uint64_t>> reader_file_;
  // Readers that went on in a file other than their latest one (reading
  // several files in turn: tf.data's interleave), and when they last did
  // (PartReadActive). Cleared with reader_file_, or at kMaxReaders entries.
  std::unordered_map<uint32_t, uint64_t> interleaving_us_;
  // Each reader's latest stride of runs made steady in a file (ReaderEnd::
  // jump_len, jump_period): its next file starts with it, unconfirmed
  // (JumpRuns). Cleared at kMaxReaders entries.
  std::unordered_map<uint32_t, std::tuple<uint64_t, uint64_t, uint64_t>> reader_stride_;
  // Files of more than two units read lately, for those read by several
  // readers at a time (a download pool's threads, each on its own chunk):
  // the extents their readers read lately, each read on from where the last
  // ended, and when each was last read (PoolSkips). Up to kPoolExtents extents
  // a file, the one read longest ago replaced; cleared at kMaxPoolFiles
  // files (about 0.6 MB).
  struct ReadExtent {
    uint32_t pid = 0;
    uint64_t start = 0, end = 0, us = 0;
  };
  static constexpr size_t kPoolExtents = 16;
  static constexpr size_t kMaxPoolFiles = 1024;
  std::unordered_map<std::string, std::array<ReadExtent, kPoolExtents>> pool_extents_;
  void NotePoolExtent(const std::string& path, uint32_t pid, uint64_t offset, uint64_t end);
  // Takes out of `plan` the readahead in `path` that other readers' recent
  // runs begun above the read's end `end` already read (`run_bytes`: the
  // length of the read's run so far).
  void PoolSkips(std::vector<PrefetchRange>& plan, const std::string& path, uint32_t pid, uint64_t end,
                 uint64_t run_bytes) const;
  // Whether reader `pid`'s latest read was in `f` (reader_file_).
  bool ReaderIn(uint32_t pid, const FileRec& f) const;
  bool PartReadActive(const FileRec& f) const;
  // A reader's run in `f` ended at byte `prev_end` and it read on at
  // `offset` (`passed`: in the same run, past the units between): the
  // readahead it leaves (OnRead).
  void LeaveWindow(FileRec& f, uint64_t prev_end, uint64_t offset, uint64_t run_start, bool passed);
  // Takes out of `plan`'s ranges in `path` the units inside the gaps a run
  // that skips at a steady stride (ReaderEnd::skip_*) will skip next.
  struct ReaderEnd;
  // The gaps a run skips (ReaderEnd::skip_*): from `at`, `gap` bytes,
  // again every `period` bytes (0: only that one known). Narrowed by how
  // much the gaps were seen to vary.
  struct StrideGrid {
    uint64_t at = 0, gap = 0, period = 0;
    // Unit i (of `unit` bytes) lies wholly inside one of the gaps.
    bool Skips(uint64_t i, uint64_t unit) const;
  };
  // `re`'s grid if `known`, else an empty one.
  StrideGrid Grid(const ReaderEnd& re, bool known) const;
  void StrideSkips(std::vector<PrefetchRange>& plan, std::string_view path, const StrideGrid& grid) const;
  // Adds to `plan` the next runs of a reader whose runs start every
  // `period` bytes, `len` long, and takes the gaps out (ReaderEnd::jump_*).
  void JumpRuns(std::vector<PrefetchRange>& plan, std::string_view path, uint64_t file_size, uint64_t run_start,
                uint64_t run_end, uint64_t len, uint64_t period, bool steady) const;
  // No other reader read `f` in the last kSoleReaderUs (LeaveWindow).
  bool SoleReader(const FileRec& f) const;
  // No other reader read `f` in the last kStrideSoleUs (JumpRuns).
  bool StrideSole(const FileRec& f) const;
  // By parent directory (SiblingPool); node-based: members point in.
  std::unordered_map<std::string, std::unique_ptr<SiblingPool>> pools_;
  std::unordered_map<std::string, Unit> units_;
  std::unordered_map<std::string, FileRec> files_;
  uint64_t files_seen_ = 0;
  // Per (pid, file): where the reader's last read ended, and when. Entries
  // not read for kReaderIdleUs (10 min) are swept at each allocation (a DataLoader's
  // workers are new pids every epoch: kept, they grew the daemon by about
  // 1 MB an epoch on 3,000 files); cleared at kMaxReaders entries.
  // Runs one reader keeps in a file (ReaderEnd::runs and the one it is on),
  // each its own reader for the stream's module, tagged pid ^ tag << kRunTagShift.
  static constexpr size_t kRunsPerReader = 4;
  static constexpr uint32_t kRunTagShift = 30;
  struct ReaderEnd {
    uint64_t end = 0, last_us = 0;
    uint64_t visit_start = 0;  // where its visit of the file began (PolicyEngine::OnRead)
    uint64_t run_start = 0;    // where its run of continuing reads began
    uint64_t run_low = 0;      // the lowest offset that run read (back_reads)
    uint32_t run_reads = 0;    // reads in that run (saturating; PolicyEngine::OnRead)
    uint8_t tag = 0;  // the run's reader tag (pid ^ tag << kRunTagShift, OnReaderAt)
    uint8_t resumed = 0;  // times the run was come back to (saturating)
    uint64_t visit_bytes = 0;  // read since the reader came to the run (a jump or a resume)
    // Reading backwards: where its last read began and its length, and how
    // many reads in a row of that length ended exactly there
    // (PolicyEngine::OnRead; igt only).
    uint64_t last_off = 0, last_len = 0;
    uint32_t back_reads = 0;
    // Gaps its run skipped (a parquet reader's column chunks of a row group
    // read, the others passed): where the latest began, its length, where
    // the reader came back after it (its end, but for a late piece at its
    // end), the distance from where it came back after the one before, how
    // many gaps in a row came where the one before foretold (within half a
    // unit), and by how much their starts and ends missed (StrideGrid; igt
    // only).
    uint64_t skip_at = 0, skip_gap = 0, skip_back = 0, skip_period = 0;
    uint32_t skip_steady = 0;
    uint32_t skip_slack_lo = 0, skip_slack_hi = 0;
    // Its runs, each begun by a jump: the length of the latest left (from
    // its lowest offset), the distance between the first reads of the
    // latest two, how far above its lowest offset the run left began, and
    // how many jumps in a row kept all three (JumpRuns; igt only).
    uint64_t jump_len = 0, jump_period = 0, jump_head = 0;
    uint32_t jump_steady = 0;
    bool jump_seeded = false;  // taken from its previous file (reader_stride_), none since unlike
    // The runs the reader jumped away from, the latest left first, resumed
    // if it comes back there (OnRead; igt only): an HDF5 file's x[i], y[i],
    // z[i] read in lockstep. reads 0: none.
    struct Run {
      uint64_t end = 0, start = 0;
      uint64_t visit = 0;  // the bytes of the reader's last visit there
      uint32_t reads = 0;
      uint8_t tag = 0, resumed = 0;
    };
    std::array<Run, kRunsPerReader - 1> runs;
  };

  std::unordered_map<std::string, ReaderEnd> reader_end_;
  // Each reader's latest run of reads (NoteRun): in a file read at random,
  // its length goes to its stream's ring (Group::run_ring) when the reader
  // starts another run. At kMaxPidRuns readers, cleared.
  struct PidRun {
    size_t path_hash = 0;
    std::string path;  // the file of its latest run (igt only: LeaveFile)
    Group* group = nullptr;
    uint64_t bytes = 0;
    bool random = false;
  };
  std::unordered_map<uint32_t, PidRun> pid_runs_;
  static constexpr size_t kMaxPidRuns = 4096;
  void NoteRun(uint32_t pid, std::string_view path, Group* g, bool random, bool continues, uint64_t run_bytes);
  // Reader `pid` went from file `path` to another after one read at its
  // start: the readahead units planned past that read leave the readahead
  // share (as LeaveWindow's).
  void LeaveFile(uint32_t pid, const std::string& path);
  // At kMaxReaders: the older half of reader_end_ goes (by last read).
  void TrimReaders();
  static int ForcedFileLabel(const PathOverride* ov, std::string_view path);
  // Repeats an epoch may have before it is taken for several passes at
  // once (Group::multi_pass).
  static uint64_t EpochRepeatsAllowed(const Group* g);
  // The stream holds units read this epoch, which are not read again before
  // the next (worth about half), unless it is read in several passes.
  static bool ReadThisEpoch(const Group* g);
  // A readahead unit read (hit) or evicted unread (wasted): readahead stops
  // for a while when most are wasted (TrimPlan).
  void NoteReadaheadOutcome(uint64_t hit, uint64_t wasted);
  uint64_t ra_recent_hit_ = 0, ra_recent_wasted_ = 0, ra_off_until_us_ = 0;
  std::array<std::unique_ptr<PrefetchPolicy>, 4> prefetch_;  // by pattern
  std::unique_ptr<PrefetchPolicy> baseline_prefetch_;        // lru-readahead

  // The read being handled (OnRead sets, OnHit reads): its file and whether
  // it is a new visit rather than a continuation.
  const std::string* cur_path_ = nullptr;
  uint32_t cur_pid_ = 0;
  bool cur_new_visit_ = false;


  uint64_t cached_bytes_ = 0;
  uint64_t cached_disk_bytes_ = 0;  // Unit::disk_bytes summed: what FreeBytes subtracts
  uint64_t prefetched_unread_bytes_ = 0;
  uint64_t prefetch_bytes_ = 0, prefetch_hit_bytes_ = 0, prefetch_wasted_bytes_ = 0;
  uint64_t last_alloc_us_ = 0;
  // The id PickVictim returned last: OnRemove notes a ghost for evictions only.
  std::string last_victim_;
  // Units of versions of files that are no longer current (as NewVersion
  // found them), oldest first: the first victims of igt, before any
  // stream's. Only a handle opened before the change still reads them (a
  // unit is keyed by its ETag), but each sat in its stream's order like a
  // live unit: a data set rewritten in
  // place filled the cache with dead versions and evicted live units first
  // (a soak test: 9,082 of 10,082 units dead). Entries that left already are
  // skipped when met.
  std::deque<std::string> old_units_;
  // The id of the first unit of old_units_ still cached and still old, or
  // null; drops the entries before it.
  const std::string* FrontOldUnit();
  uint64_t allocations_ = 0, switches_ = 0, reloads_ = 0;
  uint64_t victim_rounds_ = 0;  // VictimGroup calls (SiblingPool::value_round)
  uint64_t gone_files_ = 0;  // NoteGone's files, in all
  // Names of gone files whose record went with their last unit, so that a
  // handle still open on one (its reads come later) does not make a live
  // record of it again, with readahead whose GETs all fail. Oldest first,
  // at most kMaxGoneNames; NewVersion (the name listed again) takes a name
  // out.
  std::unordered_set<std::string> gone_names_;
  std::deque<std::string> gone_order_;
  static constexpr size_t kMaxGoneNames = 16384;
  bool WasGone(std::string_view path) const { return !gone_names_.empty() && gone_names_.contains(std::string(path)); }
  Group* victim_group_ = nullptr;  // current giver of space (hysteresis)
  OverrideIndex override_index_;  // over opts_.policy_file.overrides (NoteQuotas)
  bool has_quota_ = false;  // an override sets a quota (NoteQuotas, at Init and reload)
  bool has_pin_ = false;    // an override pins (NoteQuotas)
  bool has_never_cache_ = false;  // an override is never_cache (NoteQuotas)
  uint64_t last_user_warm_us_ = 0;  // the latest NoteWarm
  std::vector<const Group*> idle_groups_;  // Idle at the last Allocate (IdleBytes)
  std::vector<Group*> warming_;            // warm-ups under way (Warm)
};

}  // namespace igt::engine
