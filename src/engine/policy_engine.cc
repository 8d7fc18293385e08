// PolicyEngine implementation. See policy_engine.h for the contract and
// docs/POLICIES.md for the value formulas used by Value().

#include "src/engine/policy_engine.h"
#include "src/engine/stream_judge.h"

#include "igtcache/block_store.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_set>

namespace igt::engine {

namespace {

constexpr int kUnknown = 0, kSequential = 1, kRandom = 2, kSkewed = 3;
// Reader continuation table cap (entries of ~80 B). Reached, the older half
// (by last read) goes: readers part-way through a file read recently. It
// was cleared whole: every such reader's next read was a new visit, and in
// a random stream past half its epoch a new epoch (a black-box test: 70,000
// files of 2 MiB read in 1 MiB pieces by 8 workers, 2 epochs, cache 75%:
// an epoch too many counted, 13.5 GiB of prefetch wasted in `igtcache
// sim`; now none wasted).
constexpr size_t kMaxReaders = 65536;
// A reader's cursor in a file not read for this long is forgotten: its next
// read there starts a new visit, as a jump would.
constexpr uint64_t kReaderIdleUs = 600'000'000;
// A read starting within this many units of where the reader's last read
// ended still continues it (reordered readahead requests).
constexpr uint64_t kReorderUnits = 4;
// A reader reading backwards (OnRead): its window below starts after this
// many reads in a row each ending where the last began, and doubles up to
// kMaxBackUnits.
constexpr uint32_t kBackRunReads = 3;
// Runs ahead planned for a reader whose runs start at a steady stride
// (PolicyEngine::JumpRuns).
constexpr uint64_t kJumpRunsAhead = 2;
constexpr uint64_t kMaxBackUnits = 16;
// A unit a reader stopped part-way through is its next read's for this long
// even if its latest read is in another file (PartReadActive).
constexpr uint64_t kPartReadRecentUs = 1'000'000;
// A file no other reader read for this long has one reader (SoleReader):
// the windows planned in it are that reader's.
constexpr uint64_t kSoleReaderUs = 2'000'000;
// A file another reader read in the last minute is no stride's
// (PolicyEngine::JumpRuns): a thread pool's threads each jump at a steady
// stride over the others' chunks, and one left alone in the file a moment
// (the others waiting for their misses) had the file's window cut to its
// own chunks (a review: 3 threads taking 4 MiB chunks in turn, 256 MiB
// cache, 11.1 -> 15.5 s modeled). Nor is the stride of such a file kept
// for the reader's next file, where it is alone a moment before the others
// come (8 MiB chunks: 16.0 -> 21.8 s).
constexpr uint64_t kStrideSoleUs = 60'000'000;
// Another reader's extents count in PoolSkips while that reader read in
// the file this recently.
constexpr uint64_t kPoolActiveUs = 500'000;
// A jump's LeaveWindow looks at most at this many of the file's newest units.
constexpr size_t kLeaveWindowScan = 512;
// One file scanned by one reader while others read it at random (a
// scanner looping over an embedding table that inference threads look up;
// docs/POLICIES.md, "One file scanned and read at random at once"): the
// scanner's units go to the (scan) stream, the first to give space
// (kScanValue), and the others' stay in the file's stream. A reader scans
// once its run of continuing reads spans kScanRunUnits units, in a file
// not labelled sequential; others read at random beside it while the
// file's jumps (reads that continue nothing, other than a reader's first
// read of the file or a read at its start), counted with a half-life of
// kJumpHalfLifeUs, come to kScanBesideJumps and the latest was another
// reader's: sustained random reads, not the few jumps of loaders starting
// (8 ranks reading a zip-format checkpoint's tail, then its start). A unit
// is the scanner's if it is within kReorderUnits units behind its latest
// read, or in it, and that read is at most kScanFreshUs old.
constexpr uint64_t kScanRunUnits = 8;
constexpr uint64_t kJumpHalfLifeUs = 2'000'000;
constexpr double kScanBesideJumps = 16;
constexpr uint64_t kScanFreshUs = 2'000'000;
// A repeated visit starts a new epoch once at least this fraction of the
// stream's known items were read in the current one; fewer repeats mean
// sampling with replacement (not epochs).
constexpr double kEpochFullRatio = 0.5;
// Items the previous epoch did not read, read while the new epoch has read
// fewer than this share of the items, are the previous epoch's stragglers
// (NewVisit).
constexpr double kStragglerShare = 0.25;

// A unit's place in its stream's scan order (UnitMeta::position): its
// file's first-seen rank (FileRec::rank), then the unit index.
uint64_t ScanPosition(uint64_t rank, uint64_t unit_index) { return (rank << 32) | unit_index; }
// Epoch prefetching proposes at most the first this many units of an item
// (PrefetchContext::item_max_units): a larger item's readahead carries on
// once it is read. Larger items were not proposed at all (at 4 units then):
// a reviewer's trace of 2,000 files read whole at random in 1 MiB reads,
// cache 50%, went from 0.744 byte hit with 4 MiB files to 0.518 with files
// of 4.1 MiB. The warm-up still takes only files of at most this size.
constexpr uint64_t kEpochItemMaxUnits = 16;
// A visit of an item that begins this close to its start reads it from the
// start (a sample, a header at 4 KiB): its depth is an epoch plan's
// (Group::item_depth). A parquet reader's visits begin at the footer.
constexpr uint64_t kItemStartBytes = 64 << 10;
// Warm-up of a directory read at random or skewed whose files all fit in the
// cache's free space (the first epoch of a small data set, the item files of
// an inference server): files proposed per read, and at most this many
// passes over the listing. A prefetch is dropped when the connections or the
// prefetch budget are busy (a scan or a fill running at the same time), so a
// pass retries the files still not cached; the warm-up ends with the first
// pass that finds none to propose.
constexpr size_t kWarmPerRead = 8;
constexpr size_t kWarmLookPerRead = 4096;
constexpr uint32_t kWarmPasses = 16;
// A warm-up that proposed nothing for this long gives up the space it holds
// (Allocate).
constexpr uint64_t kWarmStallUs = 10'000'000;
// "Protected" value of a sequential stream holding only its readahead
// window (prefetched, unread units): it gives space only when nothing else can.
constexpr double kWindowValue = 1e30;
// The (scan) stream's value (ByteValue): below every stream read, even idle
// (0), above never_cache (-1) and stale windows (-0.5).
constexpr double kScanValue = -0.25;
// A readahead unit nobody has read this long after its insert belongs to a
// reader that stopped or jumped: the (readahead) stream gives space while
// its oldest unit is that stale (a live black-box test: a scan stopped after
// 10 MiB left 13 MiB of windows, 20% of the cache, for good beside a
// training job short of space).
constexpr uint64_t kWindowStaleUs = 30'000'000;
// A directory with fewer children than this is not a retention stream of its
// own (two subtrees read in turn look "random" over 2 children): the
// streams below it are used instead.
constexpr uint64_t kMinRetentionChildren = 16;
// An override stream whose prefix has no label of its own takes the label of
// the paths read: a new one after this many reads in a row found it, and at
// most this often (GroupFor).
constexpr uint64_t kPathRelabelReads = 16;
constexpr uint64_t kPathRelabelUs = 10'000'000;
// Stream keys: a directory's ("dir/"), an override's prefix, or the
// engine's own, which start with '/' as no path and no override prefix
// does (both are relative): before 2026-11-30 they were "(readahead)",
// "?dir/", "=" and an override of a file or directory of that name (a
// real name: prefixes are literal) shared the engine's stream, so a pin of
// "?x/" held the unlabelled reads of "x/" (a tester's finding). Stats show
// them without the '/' (DisplayKey).
// The stream that holds readahead units until they are read.
constexpr std::string_view kWindowStream = "/(readahead)";
// Units fetched by `igtcache warm`, until read (PolicyEngine::NoteWarm).
constexpr std::string_view kWarmStream = "/(warm)";
// The units a file's scanning reader read while others read the file at
// random (kScanRunUnits above).
constexpr std::string_view kScanStream = "/(scan)";
// The stream of the files at the mount's root (GroupFor).
constexpr std::string_view kRootStream = "/";
// The one stream of the baseline policies (lru, lfu, ...).
constexpr std::string_view kAllStream = "/*";
// The stream of the files read in directory `dir` while nothing above
// them is labelled ("/?" alone: the root's).
std::string UnlabelledKey(std::string_view dir) { return "/?" + std::string(dir); }
bool IsUnlabelledKey(std::string_view k) { return k.starts_with("/?"); }
// The stream of override `o`'s prefix ("/=": the whole mount's, prefix "").
std::string OverrideKey(const PathOverride& o) { return o.prefix.empty() ? std::string("/=") : o.prefix; }
// reader_end_'s key: the reader's pid, a NUL, the file's path.
std::string ReaderKey(uint32_t pid, std::string_view path) {
  std::string k = std::to_string(pid);
  k += '\0';
  k += path;
  return k;
}
std::string_view DisplayKey(std::string_view k) { return k.size() > 1 && k[0] == '/' ? k.substr(1) : k; }
// A file read at random (its block stream labelled random or skewed) of at
// least this many units, whose missing units fit in the cache's free space,
// is fetched whole in the background (a fill): free space and idle
// connections cost nothing, a loader faulting through a weights file at
// random reads most of it, and every unit of a skewed embedding file holds
// rows that will be asked for. A larger file is filled in part (its limit
// recomputed on every read): a file read uniformly at random as far as the
// free space and the space of idle streams go (every unit is worth the same
// to it); a skewed one as far as the free space goes only, since its cold
// units are worth less than what any stream holds. A fill unit enters the
// skewed stream's LFU with count 1, as a demand miss does, and the older
// ones go first (it was said to be count 0: tried on 2026-11-24, it evicted
// fill units before their rows were asked for, and the mix at 50% went
// from 128.9 to 199.5 s in scripts/eval.sh). Smaller files are left to
// demand reads.
constexpr uint64_t kFillMinUnits = 16;
// A whole fill not done after this long is proposed again (the prefetcher's
// retry wait after a failed fill GET is as long: Prefetcher::fill_retry_after).
constexpr uint64_t kWholeFillRecheckUs = 10'000'000;
// A stream that read at least this many times per allocation period and
// then not once in a whole period has stopped (the job ended or paused):
// it is idle, worth nothing, until its next read. Its rate would take
// several periods to decay while the space it holds could serve a stream
// still running.
constexpr double kBusyReads = 8;
// Prefetched units not yet read may take at most this share of the cache:
// prefetching never crowds out what is being kept (the readahead windows
// shrink instead).
constexpr double kMaxPrefetchShare = 0.25;
// Readahead outcomes are judged every this many units of them (hits and
// units evicted unread, the older ones halved at each judgement); when more
// than half were evicted unread, readahead stops for kReadaheadOffUs. A
// black-box test: 96 threads each scanning its slice of a 512 MiB file with
// a 128 MiB cache fetched 3.9-4.5 GB live (lru 0.6 GB), about 2 GB of it
// readahead evicted unread: 96 readers' units and windows do not fit. It
// stopped at two in three until 2026-11-29: the tester's trace of those
// threads fetched 878 MiB in sim (lru 658), at more than half 772, modeled
// 2.0 s both (lru 2.2); at 256 MiB 681 -> 622 MiB (lru 591); a stricter
// 1 in 3 cost a detection trace 5.1 -> 6.3 s.
constexpr uint64_t kReadaheadJudgeUnits = 64;
constexpr uint64_t kReadaheadOffUs = 5'000'000;
// A skewed stream's marginal value is also measured on its most recent
// victims (a shadow of its boundary, ShadowBytes): the span is at most this
// share of the cache's capacity. See ByteValue.
constexpr double kShadowShare = 1.0 / 16;
// FileRec::version of a file the source no longer has (NoteGone): even, so
// no ETag's hash (always odd) is it, and every unit of it is of another
// version.
constexpr uint64_t kGoneVersion = 2;

// |a - b| (a run's gaps and jumps are alike within half a unit: OnRead).
uint64_t AbsDiff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

std::string ParentDir(std::string_view path) {
  auto p = path.rfind('/');
  return p == std::string_view::npos ? std::string() : std::string(path.substr(0, p + 1));
}

}  // namespace

std::vector<std::string> EnginePolicyNames() {
  return {"igt", "lru", "lfu", "fifo", "2random", "lru-readahead"};
}

struct PolicyEngine::FileRec {
  // 8-byte fields first, then the narrower ones: no padding between them
  // (one record per file of the data set).
  uint64_t size = 0;
  uint64_t version = 0;       // hash of the current ETag (NewVersion, else the first known)
  uint64_t rank = 0;          // first-seen order: the scan position of its units
  Group* group = nullptr;     // retention stream at the last read
  size_t item_pos = 0;        // its place in group->items
  Unit* units = nullptr;      // its cached units (Unit::file_next), for NewVersion
  uint64_t epoch_read = 0;    // group->epoch + 1 when read in that epoch
  uint64_t cached_bytes = 0;
  uint64_t fill_whole_us = 0;  // when a whole fill was last proposed (0: never)
  // fill_planned and warm_planned are never cleared, so a prefetched unit
  // of a file once filled or warmed is taken for one of those, unless it is
  // in the file's latest readahead range below. Measured with the simulator
  // told each insert's true plan kind (scripts/eval.sh traces): 0 bytes
  // taken wrongly in the mix, 15 of 233 MB in (d) at 10%; with the true
  // kind the byte hit ratios moved by at most 0.003.
  //
  // The units the latest readahead plan for this file proposed (ra_last <
  // ra_first: none; cleared whenever a fill is proposed). A prefetched unit
  // among them is a readahead unit whatever fill_planned or warm_planned
  // say. Before (2026-11-24), a file filled in part while read at random
  // and then read through (a loader that faulted at random, then a dd) had
  // its readahead units taken for fill units: they entered the file's
  // skewed or random stream as its first victims and each was evicted
  // before its read and fetched again. A black-box test, 320 MiB file,
  // 64 MiB cache: the dd read 5.8 GiB from the backend in 4.1 s; now
  // 0.4 GiB in 0.7 s (a fresh cache: 0.32 GiB, 0.4 s).
  uint64_t ra_first = 1, ra_last = 0;
  uint32_t cached_units = 0;  // units and sub-units
  // Its recent jumps (reads that continue nothing: kScanRunUnits), a count
  // halving every kJumpHalfLifeUs, as of jump_us; and the latest jumper.
  float jump_score = 0;
  uint64_t jump_us = 0;
  // Its scanner's latest read (ScannerAt): where it began and ended, when.
  uint64_t scan_off = 0, scan_end = 0, scan_us = 0;
  // 1 + the unit its last read stopped part-way through, in a file not read
  // at random, before its end (the reader reads the rest next); 0: none.
  // Kept per file, not per engine: live, a miss is inserted after its GET,
  // and other reads come in between.
  uint64_t part_unit = 0;
  uint64_t part_unit_alt = 0;  // the same reader's other run's (PolicyEngine::OnRead)
  uint64_t part_us = 0;   // when (PartReadActive)
  uint32_t part_pid = 0;  // the reader of that read (PartReadActive)
  // When a reader other than the latest read it (SoleReader); 0: never.
  uint64_t shared_us = 0;
  uint32_t jump_pid = 0;
  // The reader scanning it while others read it at random (its units go to
  // the (scan) stream: ScannerAt), or 0.
  uint32_t scan_pid = 0;
  int block_label = 0;        // the file's own (block stream) label at its last read
  // Proposed by epoch prefetching: its units are certain to be read this
  // epoch and take only space freed by items already read, so they do not
  // count against the readahead share (kMaxPrefetchShare).
  bool epoch_planned = false;
  // A fill was planned: whole (a random-access file fitting in free space)
  // or partial (a file read uniformly at random, into free and idle space).
  bool fill_planned = false;
  // Proposed by a directory warm-up (Warm): takes free space only.
  bool warm_planned = false;
  // Fetched by `igtcache warm` (NoteWarm) since its last read: its units
  // wait in the (warm) stream. Cleared by a read.
  bool user_warm = false;
  // The source no longer has it (NoteGone): in no stream, its units of
  // old versions; the record goes with its last unit. A read clears it.
  bool gone = false;
};

struct PolicyEngine::Unit {
  // 8-byte fields first, then the flags (one record per cached unit).
  Group* g = nullptr;
  const std::string* path = nullptr;  // key in files_
  uint64_t index = 0;
  uint64_t bytes = 0;
  uint64_t disk_bytes = 0;  // against capacity_bytes (OnInsert)
  uint64_t read_stamp = 0;     // g->epoch + 1 when read in that epoch
  uint64_t inserted_us = 0;    // engine time of the insert
  uint64_t version = 0;        // hash of the unit's ETag (0: not known)
  Unit* file_prev = nullptr;   // the file's other cached units (FileRec::units)
  Unit* file_next = nullptr;
  Unit* group_prev = nullptr;  // its stream's other units (Group::first_unit)
  Unit* group_next = nullptr;
  const std::string* id = nullptr;  // its key in units_
  bool prefetched_unread = false;
  bool in_share = false;       // counted in prefetched_unread_bytes_
  bool left = false;           // a readahead unit its reader left behind (LeaveWindow): not in the share
  bool consumed = false;       // read at least once since insert
  bool old_version = false;    // not of the file's current version (FileRec::etag)
  bool queued_old = false;     // in old_units_ (NewVersion)
};

// The sums over the SiblingUniform streams of one parent directory (an
// image folder's class directories) that UnreadItems plans against: kept as
// the members change, so a plan costs the same with 10 or 1,000 class
// directories (a walk over every stream on each read took a quarter of the
// daemon's samples on a warm epoch over 1,000 directories: docs/BENCHMARKS.md,
// "small-files-siblings").
struct PolicyEngine::SiblingPool {
  uint64_t read_cached_bytes = 0, epoch_inflight_bytes = 0;
  size_t members = 0;
  std::vector<Group*> list;  // its members (SyncPool)
  // VictimGroup's scratch: its members' values summed in its round
  // `value_round` (no map built per victim).
  uint64_t value_round = 0;
  double value_sum = 0;
  size_t value_count = 0;
};

struct PolicyEngine::Group {
  std::string key;
  int label = kUnknown;
  uint64_t label_us = 0;  // when the label last changed (SetLabel)
  // Path labels (override streams, GroupFor): the other label the latest
  // reads found, and how many in a row.
  int relabel_to = kUnknown;
  uint64_t relabel_streak = 0;
  bool forced = false;
  bool window = false;  // the (readahead) stream
  bool user_warm = false;  // the (warm) stream
  bool scan = false;       // the (scan) stream (ScanGroup)
  const PathOverride* ov = nullptr;
  std::unique_ptr<EvictionPolicy> module;
  std::string module_name;
  uint64_t bytes = 0, units = 0;
  // Its units (nodes of units_, whose addresses are stable; Unit::
  // group_next): a relabel or a reload hands them to a new module without
  // a walk over every unit. A list through the units, not a set of them:
  // the set took ~90 bytes a unit (LinkUnit).
  Unit* first_unit = nullptr;
  // Demand: bytes read through this stream; rate is their EWMA per second.
  uint64_t read_bytes = 0, hit_bytes = 0, period_read_bytes = 0;
  uint64_t touched_bytes = 0;  // bytes of the units the reads touched
  uint64_t reads = 0;          // reads (requests)
  uint64_t period_reads = 0;   // reads in this allocation period
  double rate = 0;
  double read_rate = 0;        // EWMA of reads per second
  bool idle = false;           // busy, then silent for a whole period (kBusyReads)
  double half_life_ms = 0;     // lfu ageing, for the skewed value
  // The shadow check of an lfu stream (StreamJudge, Judged): whether lru
  // stands in for lfu, and then whether its files read at random or skewed
  // fetch whole units on a miss (SubUnitBytesOf). Made at its first such
  // read, again when its label's module changes (judged_spec: the module
  // it shadows).
  std::unique_ptr<StreamJudge> judge;
  ModuleSpec judged_spec;
  uint64_t judge_fed_us = 0;  // its judge's latest read (a slot for another: PolicyEngine::kJudgeIdleUs)
  ModuleSpec module_spec;  // its module's: the label's, or lru standing in
  uint64_t module_us = 0;      // the latest clock the module was given (its weights' "now")
  // Known items (files) and their bytes: the stream's working set.
  uint64_t ws_bytes = 0;
  // Null where a file left (JoinGroup): a removal is O(1) and positions do
  // not move; compacted when most are null.
  std::vector<const std::string*> items;
  size_t dead_items = 0;
  size_t item_cursor = 0;
  // Passes of item_cursor over the items in this epoch (UnreadItems), and
  // items proposed in the current one.
  uint32_t item_passes = 0;
  uint64_t item_pass_proposed = 0;
  void RestartItemPasses() {
    item_cursor = 0;
    item_passes = 0;
    item_pass_proposed = 0;
  }
  size_t live_items() const { return items.size() - dead_items; }
  // The items an epoch goes round: those in directories the stream has read
  // from (read_dirs), or every item once it has read from more directories
  // than it keeps. A job reading 12 class directories of 48 had its epochs
  // counted against all 48's files, never half of them read: no epoch was
  // ever counted, and the epoch-aware eviction and prefetch never began.
  size_t epoch_items() const { return AllDirsRead() ? live_items() : read_dir_items; }
  // Epochs (random streams).
  uint64_t epoch = 0, epoch_read_count = 0, repeats_in_epoch = 0;
  uint64_t prev_epoch_read_count = 0;  // items read in the previous epoch (stragglers included)
  bool stragglers = false;             // the previous epoch read nearly every item (NewVisit)
  bool epoch_ok = true;
  // An epoch read items again beyond chance (NewVisit): several jobs
  // reading the items at once, each in its own order, or sampling with
  // replacement. Units read this epoch are then no less likely to be read
  // than the others: no read-first victims, no epoch plans. Cleared by an
  // epoch that ends without such repeats (the other jobs ended).
  bool multi_pass = false;
  // Both set through SetReadCached / SetInflight only: they are summed
  // into `pool`.
  uint64_t read_cached_bytes = 0;      // cached units read this epoch
  // Epoch items planned but not inserted yet: they will take space that is
  // already promised. Reset every allocation period, so a plan the executor
  // dropped does not hold prefetching back for long.
  uint64_t epoch_inflight_bytes = 0;
  // Its siblings' sums, while SiblingUniform (SyncPool); else null.
  SiblingPool* pool = nullptr;
  size_t holding_at = SIZE_MAX;  // its place in PolicyEngine::holding_ while it holds units
  uint64_t holding_seq = 0;      // when it began holding units (NoteHolding's count): ties in VictimGroup
  uint64_t consumed_cached_bytes = 0;  // cached units read since insert
  // Warm-up (Warm): position in the directory's listing, passes done, files
  // proposed in this pass, whether it began (the whole directory fitted in
  // free space).
  size_t warm_cursor = 0;
  uint32_t warm_passes = 0;
  uint64_t warm_pass_proposed = 0;
  bool warming = false;
  // Its file or directory is gone from the source (NoteGone): dropped once
  // it holds no unit (Allocate), unless a read finds it again (GetGroup).
  bool gone = false;
  uint64_t warm_progress_us = 0;  // when the warm-up began or last proposed a file
  std::string parent;             // the parent directory of a directory stream (WarmPromised)
  // SubtreeFiles of the directory when the stream was created (its items,
  // by path in files_, with their listed sizes), and their bytes.
  struct SubtreeFile {
    const std::string* path;  // key in files_ (NoteGone takes it out before the record goes)
    uint64_t size;
  };
  std::vector<SubtreeFile> subtree;
  uint64_t subtree_bytes = 0;
  // The subtree in runs of files of one parent directory (its order is by
  // path, so a directory's files are one run or a few): the warm-up passes
  // over a directory not read from in one step. Each run ends at `end`.
  struct DirRun {
    std::string dir;
    size_t end;
  };
  std::vector<DirRun> subtree_runs;
  // The subtree's bytes per parent directory, and their sum over the
  // directories read from.
  std::unordered_map<std::string, uint64_t> subtree_dir_bytes;
  uint64_t read_subtree_bytes = 0;
  void AddSubtreeFile(const std::string* path, uint64_t size) {
    subtree.push_back({path, size});
    subtree_bytes += size;
    std::string dir = ParentDir(*path);
    if (InReadDirKey(dir)) read_subtree_bytes += size;
    ExtendRuns(dir, subtree.size());
    subtree_dir_bytes[std::move(dir)] += size;
  }
  // subtree[end - 1] is in `dir`.
  void ExtendRuns(const std::string& dir, size_t end) {
    if (subtree_runs.empty() || subtree_runs.back().dir != dir) subtree_runs.push_back({dir, 0});
    subtree_runs.back().end = end;
  }
  void DropSubtreeBytes(const SubtreeFile& sf) {
    subtree_bytes -= std::min(subtree_bytes, sf.size);
    const std::string dir = ParentDir(*sf.path);
    if (InReadDirKey(dir)) read_subtree_bytes -= std::min(read_subtree_bytes, sf.size);
    if (auto it = subtree_dir_bytes.find(dir); it != subtree_dir_bytes.end())
      it->second -= std::min(it->second, sf.size);
  }
  // After files left `subtree` (NoteGone).
  void RebuildRuns() {
    subtree_runs.clear();
    for (size_t i = 0; i < subtree.size(); ++i) ExtendRuns(ParentDir(*subtree[i].path), i + 1);
  }
  // All directories count as read from: none read yet, or more than kept.
  bool AllDirsRead() const { return active_read_dirs == 0 || active_read_dirs >= PolicyEngine::kMaxReadDirs; }
  // What a directory warm-up would fetch: the subtree's files in directories
  // read from (all of it before the first read, or past kMaxReadDirs). A job
  // reading 12 class directories of 48 whose 12 fit in the cache and 48 did
  // not got no warm-up once the mount's walk had listed the 48.
  uint64_t warm_set_bytes() const { return AllDirsRead() ? subtree_bytes : read_subtree_bytes; }
  // Of those, what is not cached, measured by a pass over the subtree
  // (Warm), and what the warm-up under way has still to propose.
  uint64_t warm_need = 0;
  uint64_t warm_judged_us = 0;  // when the last measure was taken (0: due at the next read)
  // The last measure's answer, and the stream's bytes then (UINT64_MAX:
  // none): while they stand and it did not fit, it is not taken again.
  uint64_t warm_measured_need = 0, warm_measured_bytes = UINT64_MAX, warm_measured_us = 0;
  // Directories it has read files from: only their unread files are
  // proposed (a job may read a few classes of a data set), up to
  // kMaxReadDirs of them. Each with `visits` at the latest visit of one of
  // its files; a directory not read for long is no longer read from
  // (ForgetStaleReadDirs) until it is read again, kept here meanwhile.
  struct ReadDir {
    uint64_t last_visit;
    bool active;
  };
  std::unordered_map<std::string, ReadDir> read_dirs;
  size_t active_read_dirs = 0;
  uint64_t visits = 0;  // new visits of its files (OnRead)
  // Live items per parent directory, and their sum over the directories
  // read from.
  std::unordered_map<std::string, size_t> dir_items;
  size_t read_dir_items = 0;
  void CountItem(const std::string& key, bool join) {
    const std::string dir = ParentDir(key);
    const bool read = InReadDirKey(dir);
    if (join) {
      ++dir_items[dir];
      read_dir_items += read;
    } else if (auto it = dir_items.find(dir); it != dir_items.end()) {
      if (--it->second == 0) dir_items.erase(it);
      read_dir_items -= read && read_dir_items > 0;
    }
  }
  bool InReadDirKey(const std::string& dir) const {
    auto it = read_dirs.find(dir);
    return it != read_dirs.end() && it->second.active;
  }
  // Whether the file at `path` is in a directory the stream has read from
  // (or the stream has read from more than it keeps): only such files are
  // proposed by epoch prefetching and the warm-up.
  bool InReadDir(std::string_view path) const {
    return active_read_dirs >= PolicyEngine::kMaxReadDirs || InReadDirKey(ParentDir(path));
  }
  // A file of the stream read (a new visit, or read before it joined): its
  // directory is read from. True if that is the first read from it (not
  // for a directory read again after it was forgotten: the plans' passes
  // restarted at each such read cost a pass over the subtree).
  bool NoteReadFile(std::string_view path) {
    std::string dir = ParentDir(path);
    auto it = read_dirs.find(dir);
    if (it != read_dirs.end() && it->second.active) {
      it->second.last_visit = visits;
      return false;
    }
    if (active_read_dirs >= PolicyEngine::kMaxReadDirs) return false;
    if (auto d = dir_items.find(dir); d != dir_items.end()) read_dir_items += d->second;
    if (auto b = subtree_dir_bytes.find(dir); b != subtree_dir_bytes.end()) read_subtree_bytes += b->second;
    ++active_read_dirs;
    if (it != read_dirs.end()) {  // forgotten, read again
      it->second = {visits, true};
      return false;
    }
    if (read_dirs.size() >= 2 * PolicyEngine::kMaxReadDirs)  // bounded: the forgotten ones go
      std::erase_if(read_dirs, [](const auto& kv) { return !kv.second.active; });
    read_dirs.emplace(std::move(dir), ReadDir{visits, true});
    return true;
  }
  // Directories not read from for kForgetReadDirGaps times the visits
  // that go, on average, between two visits of one of their items were it
  // read with the others (epoch_items / its items, at least an eighth of
  // epoch_items: a directory of which a job reads a few files, or the large
  // half of a data set while the small one is read) are no longer read
  // from: a later job on the mount reading other classes of the data set
  // was held to both jobs' items (no epoch counted if its own were under
  // half). One read at random among N items misses a directory still read
  // for that long with a probability under e^-kForgetReadDirGaps; it is read
  // from again at its next visit.
  void ForgetStaleReadDirs() {
    const double n = double(std::max<size_t>(1, epoch_items()));
    for (auto& [dir, rd] : read_dirs) {
      if (!rd.active) continue;
      auto items = dir_items.find(dir);
      const double k = items == dir_items.end() ? 1.0 : double(std::max<size_t>(1, items->second));
      if (double(visits - rd.last_visit) <= std::max(PolicyEngine::kForgetReadDirGaps * n / k, n / 8)) continue;
      if (items != dir_items.end()) read_dir_items -= std::min(read_dir_items, items->second);
      if (auto b = subtree_dir_bytes.find(dir); b != subtree_dir_bytes.end())
        read_subtree_bytes -= std::min(read_subtree_bytes, b->second);
      rd.active = false;
      --active_read_dirs;
    }
  }
  bool repeats = false;                // data re-read (scan repeats, several readers)
  // The deepest unit (+1) a reader's run of reads from a file's start has
  // reached: epoch plans propose items that deep (EpochItemUnits), and
  // none while no read starts at an item's start. Items read 64 KiB deep
  // (headers) had 16 units each proposed: a review's sim of 3 shuffled
  // epochs of 64 KiB header reads over 1,000 files of 8 MiB, 2 GiB cache,
  // fetched 4,130 MiB at 0.303 byte hit (lru 1,000 MiB, 0.667). Runs from
  // elsewhere do not count: a parquet reader's footer, then column chunks
  // in the middle, had whole files proposed for 40% of each read (sim of
  // a tester's trace, 256 MiB: 1,456 MiB fetched; now 1,239, lru 1,246).
  uint64_t item_depth = 0;
  // The lengths of the latest runs of reads in its files read at random
  // (PolicyEngine::NoteRun), and at each allocation their 90th percentile
  // once kMinRuns are known (0: not known): readahead in such a file stays
  // within a run that long (PrefetchContext::run_bytes_left). Their median
  // too: a run of two units or more reads the units it touches whole, and
  // its misses fetch whole units, not pieces (SubUnitBytesOf).
  static constexpr size_t kRunRing = 128, kMinRuns = 32;
  std::array<uint64_t, kRunRing> run_ring{};
  uint64_t runs_noted = 0;
  uint64_t run_p90 = 0, run_p50 = 0;
  // Ghost of recent victims (ids), bounded by the cache capacity in bytes.
  // Each eviction noted: (id, bytes, ghost_noted_bytes after it). An id
  // evicted again is noted again; its older entries stay until they leave
  // the front and no longer speak for it.
  struct GhostEntry {
    std::string id;
    uint64_t bytes, pos;
  };
  std::deque<GhostEntry> ghost;
  // id -> its latest eviction: ghost_noted_bytes after it (how many
  // victims' bytes came after it, its distance from the stream's boundary),
  // its bytes, and its module's weight then (WeightOf: lfu's aged count,
  // given back to it if the unit comes back; BoundaryRate) and when.
  struct GhostMark {
    uint64_t pos = 0, bytes = 0;
    double weight = 0;
    uint64_t us = 0;
    uint32_t module_gen = 0;  // Group::module_gen then: another module's weights mean nothing
  };
  std::unordered_map<std::string, GhostMark> ghost_set;
  uint64_t ghost_bytes = 0;
  uint64_t ghost_noted_bytes = 0;        // bytes of every victim noted so far
  // Demand misses within the shadow this period, each as its bytes over the
  // shadow's span then (a value per byte); shadow_rate is their EWMA per second.
  double period_shadow = 0;
  double shadow_rate = 0;
  double boundary_rate = -1;  // BoundaryRate at the last allocation (skewed)
  uint32_t module_gen = 0;    // bumped when the module is replaced (SetLabel): its units' weights start over
  // Stats.
  uint64_t prefetch_bytes = 0, prefetch_hit_bytes = 0, wasted_bytes = 0, evicted_bytes = 0;
  double value = 0;  // at the last allocation
};

PolicyEngine::PolicyEngine(EngineOptions opts, stream::AccessStreamTree* tree, ListingFn listing)
    : opts_(std::move(opts)), tree_(tree), listing_(std::move(listing)) {}
PolicyEngine::~PolicyEngine() = default;

Result<std::unique_ptr<PolicyEngine>> PolicyEngine::Create(EngineOptions opts, stream::AccessStreamTree* tree,
                                                           ListingFn listing) {
  std::unique_ptr<PolicyEngine> e(new PolicyEngine(std::move(opts), tree, std::move(listing)));
  if (auto s = e->Init(); !s.ok()) return Err(s);
  return e;
}

void PolicyEngine::NoteQuotas() {
  override_index_.Build(opts_.policy_file.overrides);
  has_quota_ = has_never_cache_ = has_pin_ = false;
  for (const auto& o : opts_.policy_file.overrides) {
    has_quota_ |= o.quota_bytes > 0;
    has_pin_ |= o.pin;
    has_never_cache_ |= o.never_cache;
  }
}

Status PolicyEngine::Init() {
  if (opts_.unit_bytes == 0) return Status::InvalidArgument("unit size must be > 0");
  NoteQuotas();
  const std::string& p = opts_.policy;
  if (p == "igt") {
    if (!tree_) return Status::InvalidArgument("policy igt needs an access stream tree");
    mode_igt_ = true;
    if (auto s = opts_.policy_file.Validate("policy"); !s.ok()) return s;
    for (size_t i = 0; i < 4; ++i) {
      auto m = MakePrefetchPolicy(opts_.policy_file.patterns[i].prefetch.name,
                                  opts_.policy_file.patterns[i].prefetch.params);
      if (!m) return m.error();
      prefetch_[i] = std::move(*m);
    }
    return Status::Ok();
  }
  PolicyParams params;
  std::string module = p;
  if (p == "lru-readahead") {
    module = "lru";
    auto m = MakePrefetchPolicy("readahead", {{"units", double(opts_.baseline_readahead_units)},
                                              {"max_units", double(opts_.baseline_readahead_max_units)}});
    if (!m) return m.error();
    baseline_prefetch_ = std::move(*m);
  } else if (p == "2random") {
    params["seed"] = double(opts_.seed);
  } else if (p != "lru" && p != "lfu" && p != "fifo") {
    std::string known;
    for (const auto& n : EnginePolicyNames()) known += (known.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("unknown policy '" + p + "' (known: " + known + ")");
  }
  auto m = MakeEvictionPolicy(module, params);
  if (!m) return m.error();
  auto g = std::make_unique<Group>();
  g->key = kAllStream;
  g->module = std::move(*m);
  g->module_name = module;
  g->module_spec = {module, params};
  groups_[std::string(kAllStream)] = std::move(g);
  return Status::Ok();
}

const PathOverride* PolicyEngine::OverrideFor(std::string_view path) const { return override_index_.Find(path); }

int PolicyEngine::ForcedLabel(std::string_view path) const { return ForcedFileLabel(OverrideFor(path), path); }

int PolicyEngine::ForcedFileLabel(const PathOverride* ov, std::string_view path) {
  // How a file's own blocks are read: an override's pattern says so for the
  // file it names, and sequential (whole units) for every file under it. A
  // prefix read "random" is one whose items are visited at random, each
  // read whole: taken for its files' blocks, 300 files of 4 MiB read whole
  // were fetched in sub-units with no continuation (sim: 24.5 -> 53.7 s, a
  // review of the change that first made a forced label the file's).
  if (!ov || ov->pattern < 0) return -1;
  return ov->prefix == path || ov->pattern == kSequential ? ov->pattern : -1;
}

bool PolicyEngine::Admit(std::string_view path) const {
  if (!mode_igt_) return true;
  const PathOverride* o = OverrideFor(path);
  return !(o && o->never_cache);
}

PolicyEngine::Group* PolicyEngine::GetGroup(const std::string& key, int label, const PathOverride* ov) {
  auto it = groups_.find(key);
  if (it != groups_.end()) {
    Group* g = it->second.get();
    if (!g->forced && g->label != label) SetLabel(g, label);
    return g;
  }
  auto g = std::make_unique<Group>();
  g->key = key;
  if (!key.empty() && key.back() == '/') g->parent = ParentDir(std::string_view(key).substr(0, key.size() - 1));
  g->ov = ov;
  g->forced = ov && ov->pattern >= 0;
  Group* raw = g.get();
  groups_[key] = std::move(g);
  SetLabel(raw, label);
  // A labelled directory: its files and those of its subdirectories (the
  // class directories of an image-folder data set) are the items of the
  // working set; deeper ones join as they are read.
  if (listing_ && !key.empty() && key.back() == '/' && !IsUnlabelledKey(key)) {
    // Files read while nothing above them was labelled sit in unlabelled
    // streams ("?dir/") with their units: they join this one now, units
    // and all. Before, a job's first files stayed in a stale LRU stream
    // worth nothing once the job moved on, and were the first victims: a
    // warm of 1,250 files into a nearly full cache evicted 31 of its own.
    std::unordered_set<Group*> left;
    for (const auto& lf : key == kRootStream ? RootFiles() : SubtreeFiles(key)) {
      auto [fit, fresh] = files_.try_emplace(lf.path);
      if (fit->second.gone) continue;  // listed before the source dropped it
      raw->AddSubtreeFile(&fit->first, lf.size);
      if (fresh) {
        fit->second.size = lf.size;
        fit->second.rank = files_seen_++;
      }
      Group* was = fit->second.group;
      if (!was || (was != raw && IsUnlabelledKey(was->key))) {
        FileRec& f = fit->second;
        if (f.size == 0) f.size = lf.size;
        const bool read = was && f.epoch_read != 0;
        JoinGroup(f, &fit->first, raw);
        if (was) left.insert(was);
        // Read already: read in this stream's first epoch too (not an unread
        // item for epoch prefetching to propose again), and its directory is
        // one the stream has read from.
        if (read) {
          MarkReadThisEpoch(f, raw);
          raw->NoteReadFile(fit->first);
        }
      }
    }
    // In scan order: the sets' own order follows addresses, and the new
    // module's order (its victims) would differ from run to run (sim gave
    // byte hit ratios 0.53 to 0.63 for one trace, with the length of the
    // config file's path changing the heap's layout).
    std::vector<std::pair<uint64_t, const std::string*>> moving;
    for (Group* old : left)
      for (const Unit* u = old->first_unit; u; u = u->group_next) {
        const FileRec& f = files_.find(*u->path)->second;
        if (f.group == raw) moving.emplace_back(ScanPosition(f.rank, u->index), u->id);
      }
    std::sort(moving.begin(), moving.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : *a.second < *b.second;
    });
    for (const auto& [pos, id] : moving) {
      Unit& u = units_.find(*id)->second;
      MoveUnit(*id, u, files_.find(*u.path)->second, nullptr, /*read=*/u.consumed);
    }
  }
  return raw;
}

std::vector<ListedFile> PolicyEngine::RootFiles() const {
  std::vector<ListedFile> out;
  if (const auto* l = listing_(""))
    for (const auto& lf : *l)
      if (!lf.is_dir && out.size() < kMaxSubtreeFiles) out.push_back(lf);
  std::sort(out.begin(), out.end(), [](const ListedFile& a, const ListedFile& b) { return a.path < b.path; });
  return out;
}

std::vector<ListedFile> PolicyEngine::SubtreeFiles(const std::string& dir) const {
  std::vector<ListedFile> out;
  std::vector<std::string> subdirs;
  if (const auto* l = listing_(dir)) {
    // Capped here too: a flat directory of millions of files made every
    // new stream over it copy, sort and enter all of them.
    for (const auto& lf : *l) {
      if (lf.is_dir) {
        if (subdirs.size() < kMaxSubtreeFiles) subdirs.push_back(lf.path);
      } else if (out.size() < kMaxSubtreeFiles) {
        out.push_back(lf);
      }
    }
  }
  // Each call may reuse the buffer the previous one returned: copy first.
  for (const auto& d : subdirs) {
    if (out.size() >= kMaxSubtreeFiles) break;
    if (const auto* l = listing_(d))
      for (const auto& lf : *l)
        if (!lf.is_dir && out.size() < kMaxSubtreeFiles) out.push_back(lf);
  }
  std::sort(out.begin(), out.end(), [](const ListedFile& a, const ListedFile& b) { return a.path < b.path; });
  return out;
}

bool PolicyEngine::Judged(const Group* g) const {
  // lfu only (StreamJudge), not when an override forces the pattern. The
  // other modules follow epochs or readers, which a ghost does not see:
  // keep declines misses once full, so whole units bring it no later hits;
  // judged by lru ghosts anyway, a recorded trace of random 4 KiB windows
  // in a 300 MiB file (150 MiB) went 796 -> 1,628 MiB, 104 -> 113 s.
  return mode_igt_ && !g->forced && opts_.policy_file.patterns[g->label].eviction.name == "lfu";
}

void PolicyEngine::MakeJudge(Group* g) {
  const ModuleSpec& spec = opts_.policy_file.patterns[g->label].eviction;
  StreamJudge::ModuleFn own = [spec] {
    auto m = MakeEvictionPolicy(spec.name, spec.params);
    return m ? std::move(*m) : std::move(*MakeEvictionPolicy("lru"));
  };
  g->judge = std::make_unique<StreamJudge>(StreamJudge::Model{.unit_bytes = opts_.unit_bytes,
                                                              .piece_bytes = PieceBytes(),
                                                              .latency_us = opts_.miss_latency_us,
                                                              .bandwidth_bytes_per_s = opts_.bandwidth_bytes_per_s},
                                           std::move(own), judges_);
  g->judged_spec = spec;
}

void PolicyEngine::SetLabel(Group* g, int label, bool rebuild) {
  const ModuleSpec& conf = opts_.policy_file.patterns[label].eviction;
  if (g->label != label) g->label_us = now_us_;
  g->label = label;
  SyncPool(g);
  // A judge shadows its label's module: another module, a new judge (made
  // at the next read).
  if (g->judge && (rebuild || conf.name != g->judged_spec.name || conf.params != g->judged_spec.params))
    g->judge.reset();
  static const ModuleSpec kLruSpec{"lru", {}};
  const ModuleSpec& spec = g->judge && g->judge->PreferLru() ? kLruSpec : conf;
  const bool same = !rebuild && g->module && spec.name == g->module_spec.name && spec.params == g->module_spec.params;
  if (same) return;  // the same module: it keeps its state (counts, order)
  auto m = MakeEvictionPolicy(spec.name, spec.params);
  if (!m) m = MakeEvictionPolicy("lru");  // specs were validated at Init
  g->module = std::move(*m);
  ++g->module_gen;
  g->module_name = spec.name;
  g->module_spec = spec;
  auto hl = spec.params.find("half_life_ms");
  g->half_life_ms = hl == spec.params.end() ? 0 : hl->second;
  if (g->units == 0) return;
  // Hand the stream's units to the new module (a rare event: labels change
  // with hysteresis).
  // In scan order (the set's own order follows addresses: runs would differ).
  std::vector<std::pair<uint64_t, const std::string*>> order;
  order.reserve(g->units);
  for (const Unit* u = g->first_unit; u; u = u->group_next)
    order.emplace_back(ScanPosition(files_.at(*u->path).rank, u->index), u->id);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : *a.second < *b.second;
  });
  for (const auto& [pos, idp] : order) {
    const std::string& id = *idp;
    const Unit& u = units_.at(id);
    const bool unread = NotReadYet(u, g);
    g->module->OnInsertUnit(id, u.bytes, 0, UnitMeta{.position = pos, .prefetched = unread,
                                                     .now_us = now_us_, .replay = true});
    if (u.consumed && !unread) g->module->OnAccessAt(id, now_us_);
  }
  g->module_us = now_us_;
}

PolicyEngine::Group* PolicyEngine::GroupFor(std::string_view path, uint64_t now_us, int* prefetch_label,
                                            int* file_label, int* dir_label) {
  *prefetch_label = *file_label = *dir_label = kUnknown;
  const PathOverride* ov = OverrideFor(path);
  const uint32_t min_samples = tree_->config().min_samples;
  uint64_t n_children = 0;
  auto labelled = [&](std::string_view node) -> int {
    auto info = tree_->Find(node);
    n_children = info ? info->n_children : 0;
    if (!info || info->samples < min_samples) return kUnknown;
    return static_cast<int>(info->label);
  };
  // Nodes below the root on the path: "a/", "a/b/", ..., then the file.
  std::string top_key;
  int top_label = kUnknown;
  int lowest = kUnknown;
  size_t pos = 0;
  while (true) {
    size_t slash = path.find('/', pos);
    std::string_view node = slash == std::string_view::npos ? path : path.substr(0, slash + 1);
    int l = labelled(node);
    if (slash == std::string_view::npos) *file_label = l;
    else if (path.find('/', slash + 1) == std::string_view::npos) *dir_label = l;
    if (l != kUnknown) {
      if (top_key.empty() && n_children >= kMinRetentionChildren) {
        top_key = std::string(node);
        top_label = l;
      }
      lowest = l;
    }
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  // A file at the mount's root (a mounted prefix's dataset): its directory
  // is the root, which also governs its prefetching until the file has a
  // label of its own. Before, a listing-order scan of the root's files had
  // the root labelled sequential but planned by the unknown module (two
  // units ahead in each file, never the next files), as a scan one
  // directory down was not (sim, 200 files of 1-8 MiB read in listing
  // order at the root: byte hit 0.000, 7.8 s modeled; one directory down
  // 0.46, 3.6 s).
  if (path.find('/') == std::string_view::npos) {
    *dir_label = labelled("/");
    if (lowest == kUnknown) lowest = *dir_label;
  }
  *prefetch_label = lowest;
  if (ov) {
    const std::string key = OverrideKey(*ov);
    int l = ov->pattern;
    if (ov->pattern >= 0) {
      // The file's own label too where the pattern is its (ForcedFileLabel):
      // it sets whether misses fetch sub-units and how far a reader's
      // reordered requests still continue its read (a forced sequential
      // prefix read at random was fetched in sub-units as the detector's
      // random said: a review's finding).
      *prefetch_label = ov->pattern;
      if (const int fl = ForcedFileLabel(ov, path); fl >= 0) *file_label = fl;
    } else {
      // One stream for the whole prefix: the prefix's own label when the
      // tree has one, else the path's; a read of a path not labelled yet
      // keeps the label the stream has (each change rebuilds its module).
      // Taken from the path, a new label needs kPathRelabelReads reads in a
      // row and kPathRelabelUs since the last change: two subtrees of
      // different labels read in turn (under "", which has no node)
      // switched it, and rebuilt the module over all the stream's units, on
      // every read.
      l = ov->prefix.empty() ? kUnknown : labelled(ov->prefix);
      if (l == kUnknown && !ov->prefix.empty() && ov->prefix.back() != '/') l = labelled(ov->prefix + "/");  // a dir
      if (l == kUnknown) {
        auto it = groups_.find(key);
        Group* cur = it != groups_.end() ? it->second.get() : nullptr;
        l = top_label;
        if (cur && cur->label != kUnknown && l != cur->label) {
          // A label other than the stream's: taken only after
          // kPathRelabelReads reads in a row found it, and at most once per
          // kPathRelabelUs (a stray read must not flip the stream).
          cur->relabel_streak = l == kUnknown ? 0 : (l == cur->relabel_to ? cur->relabel_streak + 1 : 1);
          cur->relabel_to = l;
          if (l == kUnknown || cur->relabel_streak < kPathRelabelReads || now_us < cur->label_us + kPathRelabelUs)
            l = cur->label;
        } else if (cur) {
          cur->relabel_streak = 0;
          if (l == kUnknown) l = cur->label;
        }
      }
    }
    return GetGroup(key, l, ov);
  }
  if (top_key.empty() && path.find('/') == std::string_view::npos) {
    // A file at the mount's root (a flat data set mounted as it is: s3://b/
    // train/ on /mnt/train): the root is its stream once labelled, for the
    // files at the root only (reads under a subdirectory keep theirs, so jobs
    // sharing a mount are not mixed). Without it a flat data set at the root
    // stayed unlabelled, LRU, no epoch prefetch: 0.94x the data fetched per
    // epoch against 0.70x for the same files in a subdirectory (a verifier's
    // DataLoader run).
    const int rl = labelled("/");
    if (rl != kUnknown && n_children >= kMinRetentionChildren) return GetGroup(std::string(kRootStream), rl, nullptr);
  }
  if (top_key.empty()) return GetGroup(UnlabelledKey(ParentDir(path)), kUnknown, nullptr);
  return GetGroup(top_key, top_label, nullptr);
}

void PolicyEngine::JoinGroup(FileRec& f, const std::string* key, Group* g) {
  if (f.group == g) return;
  LeaveGroup(f, key);
  f.group = g;
  f.item_pos = g->items.size();
  g->items.push_back(key);
  g->CountItem(*key, true);
  g->ws_bytes += f.size;
}

void PolicyEngine::LeaveGroup(FileRec& f, const std::string* key) {
  if (Group* old = f.group) {
    // Before, a file whose stream changed stayed an item of the old one and
    // joined the new one again on every switch back (duplicate items and a
    // working set counted twice).
    // A find and an erase here cost O(items) per move: a reload moving a
    // million files out of one stream took O(items^2).
    auto& v = old->items;
    if (f.item_pos < v.size() && v[f.item_pos] == key) {
      v[f.item_pos] = nullptr;
      ++old->dead_items;
      old->CountItem(*key, false);
      old->ws_bytes -= std::min(old->ws_bytes, f.size);
      if (old->dead_items > 64 && 2 * old->dead_items > v.size()) CompactItems(old);
    }
    // Its read in the old stream's epoch is not a read in the new one's
    // (with equal epoch numbers it would count as read without being
    // counted, and never be planned this epoch).
    if (f.epoch_read == old->epoch + 1 && old->epoch_read_count > 0) --old->epoch_read_count;
    if (f.epoch_read == old->epoch && old->prev_epoch_read_count > 0) --old->prev_epoch_read_count;
  }
  f.epoch_read = 0;
  f.group = nullptr;
}

bool UnderDirs(std::string_view key, const std::unordered_set<std::string_view>& dirs) {
  if (dirs.empty()) return false;
  for (size_t i = key.find('/'); i != std::string_view::npos; i = key.find('/', i + 1))
    if (dirs.contains(key.substr(0, i + 1))) return true;
  return false;
}

void PolicyEngine::NoteGone(const std::vector<std::string>& paths) {
  std::unordered_set<std::string_view> gone_files, gone_dirs;
  for (const std::string& p : paths)
    (!p.empty() && p.back() == '/' ? gone_dirs : gone_files).insert(p);
  // Costs: files x depth for gone directories (one pass), and only the
  // streams above a gone file scan their file lists; a recursive delete of
  // many directories at once must not be quadratic under the engine's lock.
  std::unordered_set<const std::string*> gone;  // keys in files_
  if (!gone_dirs.empty())
    for (const auto& [k, f] : files_)
      if (UnderDirs(k, gone_dirs)) gone.insert(&k);
  for (std::string_view p : gone_files)
    if (auto it = files_.find(std::string(p)); it != files_.end()) gone.insert(&it->first);
  gone_files_ += gone.size();
  // Streams of the files and directories gone go once empty (Allocate),
  // the unlabelled one of a gone directory ("?dir/") too; not the engine's
  // own ("/(readahead)", "/*", the root's).
  for (auto& [k, g] : groups_) {
    if (k.empty() || (k[0] == '/' && !IsUnlabelledKey(k))) continue;
    const std::string_view path = IsUnlabelledKey(k) ? std::string_view(k).substr(2) : std::string_view(k);
    if (gone_files.contains(path) || UnderDirs(path, gone_dirs)) g->gone = true;
  }
  if (gone.empty()) return;
  // Out of the directory streams' file lists (a stream over a directory
  // lists its files and its subdirectories' files; the root stream, the
  // files at the root), whose warm-up cursor counts only the files before
  // it that stay.
  std::unordered_set<std::string_view> above;
  for (const std::string* k : gone) {
    if (k->find('/') == std::string::npos) above.insert(kRootStream);
    for (size_t i = k->find('/'); i != std::string::npos; i = k->find('/', i + 1))
      above.insert(std::string_view(*k).substr(0, i + 1));
  }
  for (auto& [key, g] : groups_) {
    if (g->subtree.empty() || !above.contains(key)) continue;
    size_t out = 0, cursor = g->warm_cursor;
    for (size_t i = 0; i < g->subtree.size(); ++i) {
      if (gone.contains(g->subtree[i].path)) {
        g->DropSubtreeBytes(g->subtree[i]);
        if (i < g->warm_cursor) --cursor;
        continue;
      }
      g->subtree[out++] = g->subtree[i];
    }
    g->subtree.resize(out);
    g->RebuildRuns();
    g->warm_cursor = std::min(cursor, out);
  }
  for (const std::string* k : gone) {
    FileRec& f = files_.find(*k)->second;
    LeaveGroup(f, k);
    f.gone = true;
    f.version = kGoneVersion;
    f.cached_units = 0;
    f.cached_bytes = 0;
    f.epoch_planned = f.fill_planned = f.warm_planned = f.user_warm = false;
    for (Unit* u = f.units; u; u = u->file_next) {
      u->old_version = true;
      if (!u->queued_old && mode_igt_) {
        u->queued_old = true;
        old_units_.push_back(*u->id);
      }
    }
    if (!f.units) EraseFile(*k);
  }
}

void PolicyEngine::TrimReaders() {
  std::vector<uint64_t> seen;
  seen.reserve(reader_end_.size());
  for (const auto& r : reader_end_) seen.push_back(r.second.last_us);
  const auto mid = seen.begin() + static_cast<std::ptrdiff_t>(seen.size() / 2);
  std::nth_element(seen.begin(), mid, seen.end());
  const uint64_t cut = *mid;
  std::erase_if(reader_end_, [&](const auto& r) { return r.second.last_us < cut; });
  // Many read at one instant (a replay's timestamps): those go too.
  if (reader_end_.size() > 3 * kMaxReaders / 4)
    std::erase_if(reader_end_, [&](const auto& r) { return r.second.last_us <= cut; });
}

void PolicyEngine::EraseFile(const std::string& key) {
  auto it = files_.find(key);
  if (it == files_.end()) return;
  if (cur_path_ == &it->first) cur_path_ = nullptr;
  if (gone_names_.insert(it->first).second) {
    gone_order_.push_back(it->first);
    if (gone_order_.size() > kMaxGoneNames) {
      gone_names_.erase(gone_order_.front());
      gone_order_.pop_front();
    }
  }
  // Its reader's entry would point at a freed record (another could be
  // made at its address).
  if (ReaderIn(it->second.part_pid, it->second)) reader_file_.erase(it->second.part_pid);
  files_.erase(it);
}

void PolicyEngine::CompactItems(Group* g) {
  size_t out = 0, cursor = 0;
  for (size_t i = 0; i < g->items.size(); ++i) {
    if (i == g->item_cursor) cursor = out;
    const std::string* k = g->items[i];
    if (!k) continue;
    files_.find(*k)->second.item_pos = out;
    g->items[out++] = k;
  }
  g->item_cursor = g->item_cursor >= g->items.size() ? out : cursor;
  g->items.resize(out);
  g->dead_items = 0;
}

void PolicyEngine::MarkReadThisEpoch(FileRec& f, Group* g) {
  f.epoch_read = g->epoch + 1;
  ++g->epoch_read_count;
}

void PolicyEngine::NewVisit(Group* g, FileRec* f, const std::string* fkey, bool same_file) {
  // Epochs are rounds over a set of items: a stream of one file (the block
  // stream of a weights file faulted at random) has none, and counting each
  // revisit as a new epoch would only churn the eviction module.
  if (g->label != kRandom || g->live_items() < 2) {
    // Not (yet) rounds over items, but a stream's first reads come before
    // its label (min_samples): each item's first read is counted in epoch 0
    // all the same. Else the first epoch of an image folder counted ~31
    // reads short, and with a little reader overlap it fell under the
    // straggler rule's three quarters: every later epoch was counted as
    // half of one and half of the next (sim, 500 images: 4 epochs for 3,
    // byte hit ratio 0.632 -> 0.565). Files joining a directory stream
    // from an unlabelled one bring this count with them (GetGroup).
    if (g->epoch == 0 && f->epoch_read == 0) MarkReadThisEpoch(*f, g);
    return;
  }
  // The same reader again in the item it read last (a parquet reader's
  // footer, then its column chunks; a seek back): one visit in pieces, not
  // a repeat. Counted, each such item after half of them started a new
  // epoch, and their repeats made the stream one of several jobs.
  if (same_file && f->epoch_read == g->epoch + 1) return;
  if (f->epoch_read == g->epoch + 1) {
    if (g->epoch_read_count >= kEpochFullRatio * std::max<size_t>(1, g->epoch_items())) {
      // Most items were read and one comes round again: a new epoch.
      if (g->repeats_in_epoch <= EpochRepeatsAllowed(g)) g->multi_pass = false;
      ++g->epoch;
      // Stragglers only after an epoch that read nearly all items: one
      // that reads a random subset (DistributedSampler on a node of a
      // multi-node job) leaves half the items to the next, whose reads of
      // them are its own.
      g->stragglers = double(g->epoch_read_count) >= (1 - kStragglerShare) * double(g->epoch_items());
      g->prev_epoch_read_count = g->epoch_read_count;
      g->epoch_read_count = 0;
      g->repeats_in_epoch = 0;
      SetReadCached(g, 0);
      g->RestartItemPasses();
      g->module->OnEpoch();
    } else {
      ++g->repeats_in_epoch;
    }
  }
  if (f->epoch_read != g->epoch + 1) {
    // A straggler of the previous epoch: an item it did not read, read
    // early in this one (a loader worker still finishing its last batches
    // while the others started the next epoch) is the previous epoch's.
    // Counted in this one, it came round again within this epoch, and the
    // first such repeat past kEpochFullRatio started a spurious epoch half
    // way through the real one: from then on each counted epoch was half of
    // one and half of the next (3-epoch image traces counted 5).
    const size_t live = g->epoch_items();
    if (g->stragglers && f->epoch_read != g->epoch && g->prev_epoch_read_count < live &&
        g->epoch_read_count < kStragglerShare * double(live)) {
      f->epoch_read = g->epoch;
      ++g->prev_epoch_read_count;
    } else {
      MarkReadThisEpoch(*f, g);
    }
  }
  // Epoch shuffling has no repeats within an epoch; sampling with
  // replacement, or jobs reading the items at once, many (allow a few:
  // several readers overlap at the boundary).
  const bool within = g->repeats_in_epoch <= EpochRepeatsAllowed(g);
  if (!within && !g->multi_pass) {
    // Two DataLoader jobs on one mount, each shuffling the items: an item
    // one job read this epoch the other reads later. Taken as read, it was
    // the first victim, and every miss replaced one; the spurious epochs
    // (a repeat after half the items) proposed "unread" items over them:
    // a black-box tester's two jobs fetched 0.95x the bytes they read with
    // a cache of half the data set, lru 0.72x (sim of such a trace: 576
    // MiB, lru 560). Now the stream keeps what it has, as for uniform
    // reads: a miss that would be its own victim is not admitted.
    g->multi_pass = true;
    g->module->OnEpoch();  // every unit "not read yet"
  }
  g->epoch_ok = within && !g->multi_pass;
}

uint64_t PolicyEngine::EpochRepeatsAllowed(const Group* g) { return 4 + g->epoch_read_count / 20; }

std::vector<ListedFile> PolicyEngine::UnreadItems(Group* g, size_t n) {
  std::vector<ListedFile> out;
  // Also in the first epoch: the items then come from the listing (GetGroup).
  if (!g || g->label != kRandom || !g->epoch_ok || EpochItemUnits(g) == 0) return out;
  const uint64_t free_bytes = FreeBytes();
  // Room for items not read yet: free space and the space of items already
  // read this epoch, less what earlier plans still in flight will take
  // (planning beyond it would evict prefetched items before they are read).
  // Sibling streams (an image folder's class directories) share it: victims
  // are chosen across streams, so a sibling's inserts take this stream's
  // read items and this one's take theirs; each planning against its own
  // let them all plan the same room, and once it was gone their prefetched
  // items were evicted newest first, unread (a live DataLoader over 10 class
  // directories: ~55 MiB an epoch wasted, 0.9x the data fetched per epoch
  // against 0.67x for the same files in one directory).
  uint64_t avail = free_bytes + (g->pool ? g->pool->read_cached_bytes : g->read_cached_bytes);
  const uint64_t inflight = g->pool ? g->pool->epoch_inflight_bytes : g->epoch_inflight_bytes;
  avail -= std::min(avail, inflight);
  // Passes over the items, as the warm-up's: the executor drops a plan when
  // connections or the budget are busy, and an item proposed and dropped
  // was not proposed again this epoch (scripts/eval.sh at 75%: (a) 0.770 ->
  // 0.855 by bytes, 14.7 -> 9.7 s; (g) 0.765 -> 0.856, 99.6 -> 63.3 s;
  // nothing wasted). A pass that proposes nothing ends them: every item not
  // read is cached.
  if (g->item_cursor >= g->items.size() && g->item_pass_proposed > 0 && g->item_passes + 1 < kItemPasses) {
    g->item_cursor = 0;
    g->item_pass_proposed = 0;
    ++g->item_passes;
  }
  // Items looked at per call, as the warm-up's: after a restart most items
  // may be read already, and one call went through them all.
  size_t looked = 0;
  while (out.size() < n && g->item_cursor < g->items.size() && looked++ < kWarmLookPerRead) {
    const std::string* key = g->items[g->item_cursor];
    if (!key) {  // left the stream
      ++g->item_cursor;
      continue;
    }
    const FileRec& f = files_[*key];
    const bool eligible = f.group == g && f.epoch_read != g->epoch + 1 && f.cached_units == 0 &&
                          g->InReadDir(*key);
    const uint64_t want = std::min(f.size, EpochItemUnits(g) * opts_.unit_bytes);  // what the plan fetches
    if (eligible && want > avail) break;  // no room now; retry later
    ++g->item_cursor;
    if (!eligible) continue;
    files_[*key].epoch_planned = true;
    ++g->item_pass_proposed;
    out.push_back({*key, f.size});
    avail -= want;
    SetInflight(g, g->epoch_inflight_bytes + want);
  }
  return out;
}

std::vector<ListedFile> PolicyEngine::NextFiles(std::string_view path, size_t n) {
  if (opts_.next_files) return opts_.next_files(path, n);
  std::vector<ListedFile> out;
  if (!listing_) return out;
  const auto* l = listing_(ParentDir(path));
  if (!l) return out;
  auto it = std::upper_bound(l->begin(), l->end(), path,
                             [](std::string_view p, const ListedFile& f) { return p < f.path; });
  for (; it != l->end() && out.size() < n; ++it)
    if (!it->is_dir) out.push_back(*it);
  return out;
}

std::vector<PrefetchRange> PolicyEngine::OnRead(uint64_t now_us, uint32_t pid, std::string_view path,
                                                uint64_t offset, uint64_t length, uint64_t file_size) {
  now_us_ = std::max(now_us_, now_us);
  MaybeAllocate(now_us_);
  auto [fit, fresh] = files_.try_emplace(std::string(path));
  FileRec& f = fit->second;
  if (fresh) f.rank = files_seen_++;
  // A file that grew or was rewritten at another size: its stream's working
  // set follows (LeaveGroup takes off the size it has then; the clamp there
  // took other files' bytes, or left stale ones, skewing ByteValue for
  // good: a review).
  if (f.group && f.size != file_size && f.item_pos < f.group->items.size() && f.group->items[f.item_pos] == &fit->first)
    f.group->ws_bytes = f.group->ws_bytes - std::min(f.group->ws_bytes, f.size) + file_size;
  f.size = file_size;
  if (fresh && WasGone(path)) {
    f.gone = true;
    f.version = kGoneVersion;
  }
  if (f.gone) {
    // A handle still open on an object the source no longer has: its reads
    // are served (cached units, else EIO), but nothing is planned (every GET
    // of it fails) and it joins no stream. A new object of the name is
    // current again through NewVersion first.
    cur_path_ = nullptr;
    return {};
  }

  if (reader_end_.size() >= kMaxReaders) TrimReaders();
  auto [rit, rfresh] = reader_end_.try_emplace(ReaderKey(pid, path));
  if (rfresh && mode_igt_)
    if (auto st = reader_stride_.find(pid); st != reader_stride_.end())
      std::tie(rit->second.jump_len, rit->second.jump_period, rit->second.jump_head) = st->second,
          rit->second.jump_seeded = true;
  // Continues the reader's previous read: starts where it ended, or close to
  // it (the kernel's readahead requests of one reader are served by several
  // FUSE threads and may arrive out of order). In a file read at random or
  // skewed, only an exact continuation counts: a jump that happens to land
  // near the last read must not start a readahead window.
  // The baselines have no labels: for them a read near the last one
  // continues only a run of at least two reads (a random reader's runs are
  // single reads but by chance), as the kernel's readahead starts on
  // sequential reads only. Before 2026-11-30 any read within the slack of a
  // random reader's last one ramped lru-readahead's window (a review: 9,231
  // of 16,000 Zipf reads of 16 MiB files "continued", about 330 exactly; in
  // a model of this rule 1,814). A rule counting exact against near reads
  // cut that to 583 but broke scans whose requests FUSE threads deliver out of order (shuffled
  // in fours: no run of 8 units left; a review of the first version).
  ReaderEnd& re = rit->second;
  const bool had_run = !rfresh && re.run_reads >= 2;
  // A run in a file read at random ends with its first read too: its
  // run-ahead went on from there (LeaveWindow).
  const bool left_run = had_run || (!rfresh && re.run_reads >= 1 && (f.block_label == kRandom || f.block_label == kSkewed));
  const uint64_t prev_end = re.end;
  auto near = [&](uint64_t run_end, uint32_t run_reads) {
    const bool jumpy = f.block_label == kRandom || f.block_label == kSkewed || (!mode_igt_ && run_reads < 2);
    const uint64_t slack = jumpy ? 0 : kReorderUnits * opts_.unit_bytes;
    return offset != 0 && offset + slack >= run_end && offset <= run_end + slack;
  };
  bool continues = !rfresh && near(re.end, re.run_reads);
  const bool same_run = continues;
  // Gaps its run skips (a parquet reader's next column chunk, 4 MiB past
  // the last: within the slack, the run goes on), a unit or longer (FUSE
  // threads deliver a scan's 128 KiB requests out of order: a smaller gap
  // is one of those, filled next). A gap is confirmed when the next one
  // opens and the reader has not read it since: its window's units there
  // then leave the readahead share (LeaveWindow); at a steady stride the
  // next gaps are not fetched (StrideSkips). A read in a unit a gap holds
  // whole, one before (a late request filling it) or where the next would
  // begin (the reader stopped skipping: a review, a strided prefix then a
  // scan had every other unit of the scan left out of its window), ends
  // the stride. Late reads elsewhere do not: a tester's second epoch of
  // parquet-like visits, each 4 MiB chunk read in 128 KiB pieces a few out
  // of order, lost the stride in most files.
  const uint64_t ub = opts_.unit_bytes;
  if (!same_run) {
    re.skip_at = re.skip_gap = re.skip_period = re.skip_back = 0;
    re.skip_steady = 0;
    re.skip_slack_lo = re.skip_slack_hi = 0;
  } else if (offset >= prev_end + ub) {
    if (re.skip_gap > 0) LeaveWindow(f, re.skip_at, re.skip_at + re.skip_gap, re.run_start, /*passed=*/true);
    // Alike within half a unit (StrideGrid): the kernel's readahead runs
    // 0-2 pieces of 128 KiB into each gap, and a chunk's first piece
    // arriving after its second opens the gap 128 KiB long; compared to
    // the byte, neither run kept a stride (scripts/bench_rows.sh
    // parquet-ragged, parquet-late). The gap is where the one before
    // foretold, its start and its end (where the reader came back) each
    // within half a unit; by how much they missed narrows the gaps
    // foretold from then on.
    const uint64_t period = re.skip_gap > 0 ? offset - re.skip_back : 0;
    const uint64_t ds = AbsDiff(prev_end, re.skip_at + re.skip_period);  // at its start
    const uint64_t de = AbsDiff(offset, re.skip_back + re.skip_period);    // at its end
    const bool same = period > 0 && re.skip_period > 0 && ds < ub / 2 && de < ub / 2;
    re.skip_steady = same ? std::min(re.skip_steady + 1, 1u << 30) : 0;
    re.skip_slack_lo = same ? static_cast<uint32_t>(std::max<uint64_t>(re.skip_slack_lo, ds)) : 0;
    re.skip_slack_hi = same ? static_cast<uint32_t>(std::max<uint64_t>(re.skip_slack_hi, de)) : 0;
    const uint64_t gap = offset - prev_end;
    re.skip_back = offset;
    re.skip_period = period;
    re.skip_gap = gap;
    re.skip_at = prev_end;
  } else if (re.skip_gap > 0) {
    // A read in a unit the grid skips ends the stride, but for two:
    // - a late piece at the end of the latest gap (a chunk's first piece
    //   after its second): the gap ends there;
    // - a read running on from the run's end less than half a unit into
    //   the next gap (the kernel's readahead past the chunk): the gaps
    //   are narrowed by as much.
    const uint64_t last_end = re.skip_at + re.skip_gap;
    const StrideGrid grid = Grid(re, true);
    const uint64_t first = offset / ub, last = (offset + std::max<uint64_t>(length, 1) - 1) / ub;
    bool hit = false;
    for (uint64_t i = first; i <= last && !hit; ++i) {
      hit = grid.Skips(i, ub);
      if (i > first + (grid.period + ub) / ub) break;  // (a read longer than a period hits if any does)
    }
    const uint64_t next = re.skip_at + re.skip_period;  // the next gap's foretold start
    if (offset > re.skip_at && offset < last_end && offset + length >= last_end && offset - re.skip_at >= ub) {
      re.skip_gap = offset - re.skip_at;
    } else if (hit && re.skip_period > 0 && offset <= prev_end && offset + length > next &&
               offset + length - next < ub / 2) {
      re.skip_slack_lo = static_cast<uint32_t>(std::max<uint64_t>(re.skip_slack_lo, offset + length - next));
    } else if (hit) {
      re.skip_at = re.skip_gap = re.skip_period = re.skip_back = 0;
      re.skip_steady = 0;
      re.skip_slack_lo = re.skip_slack_hi = 0;
    }
  }
  const StrideGrid stride = Grid(re, mode_igt_ && re.skip_steady >= 1);
  // The run's first read and lowest offset, before a jump or a resume.
  const uint64_t left_start = re.run_start, left_low = std::min(re.run_low, re.run_start);
  bool resumed_run = false;
  if (!continues && !rfresh && mode_igt_) {
    // Back at a run it jumped away from (one reader reading regions of a
    // file in lockstep: an HDF5 file's x[i] then y[i]): that run goes on,
    // the one it left is kept in its place, first. (Not for the baselines:
    // lru-readahead keeps one run per reader and file, as the kernel's
    // readahead does per open file.)
    ReaderEnd::Run cur{re.end, re.run_start, re.visit_bytes, re.run_reads, re.tag, re.resumed};
    size_t back = re.runs.size();
    // Only the run left last is resumed near its end (a read's slack, as
    // the run it is on); the others at it exactly, as in the stream tree (a
    // model loader's next tensor starts within 8 units of one of three kept
    // runs' ends often), and only after a short visit, a unit or less (a
    // lockstep reader's row): a model loader's tensor starting where one it
    // read before ended went on in that run, its window planned whole at
    // once at the run's size, the readahead share filled, and the next
    // tensors got none (sim test "tensors read out of offset order ...":
    // 10.9 -> 15.9 s). Or after a longer visit exactly as long as the
    // reader's last visit of that run (rows of one length in three regions
    // or more: docs/POLICIES.md), not in a file read at random (rows of one
    // length start where another ended by chance), and while a row of each
    // run fits in the readahead share: 3 regions of 6 MiB rows read whole
    // with a 64 MiB cache had their windows cut to pieces, 290 GETs against
    // 168 (a review: 5.6 -> 7.9 s).
    const bool short_visit = re.visit_bytes <= opts_.unit_bytes;
    size_t kept = 1;  // the runs, the one left included
    for (const auto& r : re.runs) kept += r.reads > 0;
    const bool alike_visits = f.block_label != kRandom && f.block_label != kSkewed &&
                              double(re.visit_bytes * kept) <= kMaxPrefetchShare * double(opts_.capacity_bytes);
    for (size_t i = 0; i < re.runs.size() && back == re.runs.size(); ++i)
      if (re.runs[i].reads > 0 &&
          (i == 0 ? near(re.runs[i].end, re.runs[i].reads)
                  : offset == re.runs[i].end && (short_visit || (alike_visits && re.visit_bytes == re.runs[i].visit))))
        back = i;
    size_t slot = back;
    if (back < re.runs.size()) {
      // The run left ends (LeaveWindow) unless it was itself come back to:
      // a lockstep reader's runs are resumed in turn, their windows live
      // (each switch releasing the window, eight such readers read ahead
      // far past the share: a review, 10,144 MiB fetched where the start
      // binary fetched 2,131). A model loader's tensor, read once and
      // overshot by its window, goes on in another tensor read before when
      // their offsets meet; its window counted against the share until it
      // aged out (sim test "tensors read out of offset order ...": 11.6 ->
      // 15.2 s with four runs kept per reader).
      if (left_run && cur.resumed == 0) LeaveWindow(f, prev_end, offset, cur.start, /*passed=*/false);
      const ReaderEnd::Run r = re.runs[back];
      re.end = r.end;
      re.run_start = r.start;
      re.run_low = r.start;
      re.run_reads = r.reads;
      re.tag = r.tag;
      re.resumed = static_cast<uint8_t>(std::min(r.resumed + 1, 255));
      continues = true;
      resumed_run = true;
    } else {
      // A jump: the run left ends (LeaveWindow), kept to be resumed; the
      // new run takes the place and tag of the run left longest ago, else a
      // tag none of its runs has. (Not the place of the run it goes on from
      // in its region, as the stream tree's runs do: each tensor of a model
      // loader then took the tag of the one below it, and evict-behind held
      // that reader's part-read unit: tensors out of offset order, 10.0 ->
      // 11.5 s in `igtcache sim`, lru-readahead 7.6.)
      if (left_run) LeaveWindow(f, prev_end, offset, cur.start, /*passed=*/false);
      slot = re.runs.size() - 1;
      re.resumed = 0;
      uint32_t used = 1u << re.tag;
      for (const auto& r : re.runs)
        if (r.reads > 0) used |= 1u << r.tag;
      uint8_t tag = 0;
      if (re.runs[slot].reads > 0) tag = re.runs[slot].tag;
      else
        while (used & (1u << tag)) ++tag;
      re.tag = tag;
    }
    // The run left goes first, the others keep their order.
    for (size_t i = slot; i > 0; --i) re.runs[i] = re.runs[i - 1];
    re.runs[0] = cur;
  }
  // Runs that start at a steady stride, each a jump from the one before (a
  // parquet reader reading 1 column chunk of 4 in each row group: read 4
  // MiB, skip 12): the length of the run left and the distance between
  // run starts, alike within half a unit, and how many jumps in a row
  // kept both (JumpRuns). Forward jumps past the run's end only, to a new
  // run: one come back to is a lockstep reader's (an HDF5 file's x[i],
  // y[i]), whose runs of one length each went on where a first version
  // foretold a gap (a review: 14x slower); it clears them.
  if (resumed_run) {
    re.jump_len = re.jump_period = re.jump_head = 0;
    re.jump_steady = 0;
    re.jump_seeded = false;
  } else if (!same_run && !rfresh && offset > prev_end && prev_end > left_low) {
    // (A jump back leaves them as they were: a parquet reader's footer,
    // then its first column chunk, in each file.) The run's extent is from
    // its lowest offset, its first read `head` above that (a chunk read in
    // pieces top first).
    const uint64_t len = prev_end - left_low, period = offset - left_start, head = left_start - left_low;
    const bool same = AbsDiff(period, re.jump_period) < ub / 2 && AbsDiff(len, re.jump_len) < ub / 2 &&
                      AbsDiff(head, re.jump_head) < ub / 2;
    re.jump_head = head;
    re.jump_steady = same ? std::min(re.jump_steady + 1, 1u << 30) : 0;
    re.jump_seeded = re.jump_seeded && same;
    re.jump_period = period;
    re.jump_len = len;
    if (same && re.jump_steady == 1 && mode_igt_ && StrideSole(f)) {
      if (reader_stride_.size() >= kMaxReaders) reader_stride_.clear();
      reader_stride_[pid] = {len, period, head};
    }
    // (Tried: the gaps jumped over leaving the readahead share, as a run's
    // skipped gaps do. With the window's overshoot in the first runs of
    // each file it freed, 4x the bytes for chunks read top first at a
    // stride; and a reader of 4 regions in lockstep, its regions' windows
    // in the "gaps" of its first round, 14.1 -> 20.8 s: a review.)
  }
  const uint32_t jumps_alike = mode_igt_ ? re.jump_steady : 0;
  const bool jump_seeded = re.jump_seeded;
  const uint64_t jump_period = re.jump_period, jump_len = re.jump_len, jump_head = re.jump_head;
  re.visit_bytes = same_run ? re.visit_bytes + length : length;
  // (Of one length: an mmap's readahead window comes in pieces going down,
  // each ending where the last began, of sizes that differ: counted, its
  // window below was units read already, which took the readahead share.)
  // Only while it goes below all its run read: an mmap's windows going up,
  // each in pieces top first, read nothing below that after the first
  // (planning the units below re-fetched units read a window ago, evicted
  // behind the reader: 2 MiB windows of 128 KiB pieces, 4 files of 256
  // MiB, 256 MiB cache, 7.4 s modeled; lru-readahead 37.7).
  const bool below = !continues || offset < re.run_low;
  re.back_reads = !rfresh && below && length > 0 && offset + length == re.last_off && length == re.last_len
                      ? std::min(re.back_reads + 1, 1u << 30)
                      : 0;
  re.run_low = continues ? std::min(re.run_low, offset) : offset;
  re.last_off = offset;
  re.last_len = length;
  const uint32_t back_reads = re.back_reads;
  re.end = continues ? std::max(re.end, offset + length) : offset + length;
  if (!continues) re.run_start = offset;
  re.run_reads = continues ? std::min<uint32_t>(re.run_reads + 1, 1u << 30) : 1;
  const bool long_run = continues && re.end - re.run_start >= kScanRunUnits * opts_.unit_bytes;
  // The reader's visit of the file begins here unless its previous read
  // was in this file too (a parquet reader's column chunks after the
  // footer are the visit the footer began).
  if (rfresh || !ReaderIn(pid, f)) re.visit_start = offset;
  re.last_us = now_us_;
  // The read is in a visit begun in the item's first unit (Group::item_depth).
  const bool from_start = re.visit_start < std::min<uint64_t>(opts_.unit_bytes, kItemStartBytes);
  // A whole file in one read (a DataLoader's sample) has nothing left to
  // continue: no cursor kept (they were ~370 B each, one per worker and file).
  // The run, by name, for the stream's module (evict-behind keeps the unit
  // each reader is at): a lockstep reader's two runs are two readers, else
  // each switch left the other run's part-read unit behind the reader, its
  // first victim, fetched again for each piece (a review: 8 files each read
  // x[i], y[i] by one reader, 64 MiB cache: 3.4x lru-readahead's bytes).
  const uint32_t run_reader = pid ^ (uint32_t{re.tag} << kRunTagShift);
  const uint64_t run_bytes = re.end - std::min(re.end, re.run_start);
  const uint64_t run_start = re.run_start;  // (`re` is gone below after a whole-file read)
  const uint64_t run_end = re.end;
  if (offset == 0 && length >= file_size) reader_end_.erase(rit);
  cur_path_ = &fit->first;
  cur_pid_ = pid;
  cur_new_visit_ = !continues;

  PrefetchContext ctx;
  ctx.now_us = now_us_;
  ctx.pid = pid;
  ctx.path = path;
  ctx.file_size = file_size;
  ctx.offset = offset;
  ctx.length = length;
  ctx.unit_bytes = opts_.unit_bytes;
  ctx.continues = continues;
  std::vector<PrefetchRange> plan;

  if (!mode_igt_) {
    Group* g = groups_[std::string(kAllStream)].get();
    g->read_bytes += length;
    g->period_read_bytes += length;
    if (baseline_prefetch_) baseline_prefetch_->Plan(ctx, plan);
    TrimPlan(plan);
    return plan;
  }

  int pl, fl, dl;
  const std::string* fkey = &fit->first;  // GroupFor may add files: fit may not survive a rehash
  Group* g = GroupFor(path, now_us_, &pl, &fl, &dl);
  g->gone = false;  // read: its path is live (again)
  f.block_label = fl;
  // Read at random: the file, or its stream while the file has too few reads
  // for a label of its own (an audio file's header and one crop per visit).
  const bool random_file = fl == kRandom || fl == kSkewed || (fl == kUnknown && (g->label == kRandom || g->label == kSkewed));
  NoteRun(pid, path, g, random_file, continues, run_bytes);
  // A scan now: no fill is proposed for it, and its prefetched units are
  // readahead (fill_planned took them for fill units outside the latest
  // readahead range, a single range: with 96 threads each scanning its
  // slice of a file labelled random for its first reads, the others'
  // readahead went into the file's stream, outside the readahead share, and
  // 2.9 GB of it was evicted unread live, with a 128 MiB cache).
  if (fl == kSequential) f.fill_planned = false;
  const uint64_t end = offset + length;
  // The read stopped part-way through a unit, before the file's end.
  const bool ends_inside = end < file_size && end % opts_.unit_bytes != 0;
  // The reader's other run keeps its part-read unit too (a lockstep
  // reader's x[i] and y[i]: each switch left the other run's unit to be
  // taken between its pieces, fetched again for each; a review's trace of 8
  // files each read so by one reader, 64 MiB cache).
  if (!mode_igt_ || f.part_pid != pid) f.part_unit_alt = 0;
  else if (!same_run) f.part_unit_alt = f.part_unit;
  // In a file read at random only while half its stream's runs are a unit
  // long or more (Group::run_p50): rows of 4 MiB read at random in 128 KiB
  // pieces had each row's first unit declined (keep) and fetched again for
  // each of its 8 pieces.
  // Runs of two units at least: a single unaligned read of a unit's length
  // overlaps two units, not read on (Group::run_p50).
  const bool reads_on = (fl != kRandom && fl != kSkewed) || g->run_p50 >= 2 * opts_.unit_bytes;
  f.part_unit = ends_inside && reads_on ? (end - 1) / opts_.unit_bytes + 1 : 0;
  // Another reader read it last and is still there (its latest read is in
  // it, and recent): the file is shared for now (SoleReader). Not a reader
  // of the epoch before that went on to other files a moment ago.
  if (f.part_pid != 0 && f.part_pid != pid && ReaderIn(f.part_pid, f) && now_us_ < f.part_us + kSoleReaderUs)
    f.shared_us = std::max<uint64_t>(now_us_, 1);
  if (length > 0 && file_size > 2 * opts_.unit_bytes) NotePoolExtent(*fkey, pid, offset, end);
  f.part_pid = pid;
  f.part_us = now_us_;
  if (reader_file_.size() >= kMaxReaders) reader_file_.clear(), interleaving_us_.clear();
  const bool same_file = ReaderIn(pid, f);  // the reader's previous read was in this file
  if (continues && !same_file) {
    if (interleaving_us_.size() >= kMaxReaders) interleaving_us_.clear();
    interleaving_us_[pid] = now_us_;
  }
  reader_file_[pid] = {&f, f.rank};
  JoinGroup(f, fkey, g);
  // A scan beside random readers (kScanRunUnits): its reads are the (scan)
  // stream's, as its units are (ScannerAt).
  if (length > 0 && !continues && !rfresh && offset != 0) {
    f.jump_score = float(JumpScore(f) + 1);
    f.jump_us = now_us_;
    f.jump_pid = pid;
  }
  const bool beside = f.jump_pid != pid && Jumpy(f);
  // The scanner split off goes on being one while its reads continue its
  // run or start the file again (a looping scanner's next pass): else each
  // pass read its first kScanRunUnits units in the file's stream.
  const bool scanner_goes_on = f.scan_pid == pid && (continues || (offset == 0 && ScanFresh(f)));
  Group* rg = g;  // the stream the read counts in
  if ((long_run || scanner_goes_on) && length > 0 && beside && g->label != kSequential && fl != kSequential &&
      !g->ov) {
    f.scan_pid = pid;
    f.scan_off = offset;
    f.scan_end = end;
    f.scan_us = now_us_;
    rg = ScanGroup();
  } else if (f.scan_pid == pid) {
    f.scan_pid = 0;
  }
  // The reader, by name (evict-behind keeps the unit it is at).
  if (length > 0)
    rg->module->OnReaderAt(ReaderRead{.reader = run_reader,
                                      .first = ScanPosition(f.rank, offset / opts_.unit_bytes),
                                      .last = ScanPosition(f.rank, (end - 1) / opts_.unit_bytes),
                                      .first_part = offset % opts_.unit_bytes != 0,
                                      .last_part = ends_inside});
  rg->read_bytes += length;
  rg->period_read_bytes += length;
  ++rg->reads;
  ++rg->period_reads;
  rg->idle = false;
  if (rg == g && length > 0 && (fl == kRandom || fl == kSkewed || g->label == kSkewed) && Judged(g)) {
    if (!g->judge && *judges_ < kMaxJudges) MakeJudge(g);
    if (!g->judge) judge_wanted_ = true;  // Allocate may free one
    if (g->judge) {
      g->judge_fed_us = now_us_;
      const bool lru_before = g->judge->PreferLru();
      g->judge->OnRead(now_us_, f.rank, offset, length, file_size, g->bytes + FreeBytes());
      if (g->judge->PreferLru() != lru_before) SetLabel(g, g->label);
    }
  }
  if (length > 0) {
    // The bytes a miss would fetch: the units the read touches, or its
    // sub-units in a file read at random.
    const uint64_t sub = SubUnitBytesOf(f);
    const uint64_t piece = sub ? sub : opts_.unit_bytes;
    const uint64_t first = offset / piece, last = (offset + length - 1) / piece;
    rg->touched_bytes += std::min<uint64_t>((last - first + 1) * piece, std::max(file_size, length));
  }
  if (!continues) {
    // A directory read for the first time: its files, passed over until
    // now by epoch plans and the warm-up, may be proposed (the item cursor
    // and the warm-up's passes start again). In every epoch, not only the
    // first: a job reading 12 class directories of 48 had the other 36's
    // files prefetched, never read, once its epochs were counted (a live
    // DataLoader, scripts/bench_e2e.sh case 1 at 0.5x: 600 GETs for 456
    // files in about one run of three); and a warm-up pass with nothing
    // else to propose had ended it for good (a stream of model directories
    // warmed the first one read only). Past kMaxReadDirs directories every
    // listed file may be proposed.
    // A warm-up under way is judged again (Warm): begun when the files of
    // the directories read so far fitted in free space, it stops once they
    // no longer do.
    ++g->visits;
    if (g->NoteReadFile(path)) {
      g->RestartItemPasses();
      g->warm_cursor = 0;
      g->warm_passes = 0;
      g->warm_pass_proposed = 0;
      g->warm_judged_us = 0;
      g->warm_measured_bytes = UINT64_MAX;
      if (g->warming) {
        g->warming = false;
        StopWarm(g);
      }
    }
    NewVisit(g, &f, fkey, same_file);
    f.epoch_planned = false;
    f.user_warm = false;
  }

  ctx.file_label = fl;
  ctx.dir_label = dl;
  // A late read of the run (FUSE threads deliver a scan's requests out of
  // order) plans from where the run got to: from its own end, the window
  // proposed units read already, evicted behind the reader since, and
  // fetched again, never read (a review's scan of 1 MiB reads each up to 3
  // places late, 4 files of 512 MiB, 256 MiB cache: 11.5 s modeled,
  // lru-readahead 4.7).
  if (continues) ctx.run_end = run_end;
  int module = pl;
  const PathOverride* ov = g->ov;
  if (!(ov && ov->pattern >= 0) && (continues || fl == kSequential)) module = kSequential;
  ctx.next_files = [this](std::string_view p, size_t n) { return NextFiles(p, n); };
  ctx.unread_items = [this, g](size_t n) { return UnreadItems(g, n); };
  if (length > 0 && from_start) g->item_depth = std::max(g->item_depth, (end - 1) / opts_.unit_bytes + 1);
  ctx.item_max_units = std::max<uint64_t>(1, EpochItemUnits(g));
  // (A run already longer than that, a scanner's beside random readers, is
  // not held to it.)
  if (random_file && g->run_p90 > 0 && run_bytes <= g->run_p90) ctx.run_bytes_left = g->run_p90 - run_bytes;
  prefetch_[module]->Plan(ctx, plan);
  // A run's reads in a file read at random in runs of two units or more
  // (Group::run_p50): the units up to where the median run ends, at once,
  // from the run's first read (readahead begins with a run's second read:
  // each row of 4 MiB read at random in 1 MiB reads waited for its first
  // two units, modeled 106.2 s where lru-readahead took 105.3 with a 1 GiB
  // cache for 2 GiB); a run past the median, up to where the 90th
  // percentile run ends (a model's tensors of 1-7 MiB in shuffled order:
  // the longer half waited for each unit past the median). A GET per unit:
  // one ranged GET of the run delivered its last unit a run's transfer time
  // after the first, GETs side by side on idle connections about when the
  // first (scripts/bench_rows.sh, 4 MiB rows at 256 MiB: 174.6 -> 120.4 s
  // modeled, byte hit 0.340 -> 0.741; lru-readahead 254.4).
  if (random_file && length > 0 && g->run_p50 >= 2 * opts_.unit_bytes && !(ov && ov->never_cache)) {
    const uint64_t reach = run_bytes < g->run_p50 ? g->run_p50 : std::max(g->run_p90, run_bytes);
    const uint64_t last_read = (end - 1) / opts_.unit_bytes;
    const uint64_t last = std::min((file_size - 1) / opts_.unit_bytes, (run_start + reach - 1) / opts_.unit_bytes);
    for (uint64_t u = last_read + 1; u <= last; ++u)
      plan.push_back(PrefetchRange{.path = std::string(path), .file_size = file_size, .first_unit = u, .last_unit = u});
  }
  // A reader going backwards, each read ending where its last began (a
  // file read from its end in chunks): the units below, a window doubling
  // from 1 to kMaxBackUnits while it goes on. No label says so (its steps
  // go down: random), and each chunk was a GET of its own pieces where
  // lru's whole unit served the next seven (a review's trace, 512 MiB read
  // once backwards in 128 KiB chunks: modeled 73.2 s, lru 27.0).
  if (back_reads >= kBackRunReads && offset >= opts_.unit_bytes && !(ov && ov->never_cache)) {
    const uint64_t u = offset / opts_.unit_bytes;
    const uint64_t w = std::min<uint64_t>({kMaxBackUnits, uint64_t{1} << std::min<uint32_t>(back_reads - kBackRunReads, 6), u});
    plan.push_back(PrefetchRange{.path = std::string(path), .file_size = file_size, .first_unit = u - w, .last_unit = u - 1});
  }
  // (One reader's: a thread pool's threads each skip the others' chunks,
  // and the file's window is theirs together; a review: 2 threads taking
  // 1 MiB chunks in turn, 6.6x the GETs.)
  if (stride.gap > 0 && stride.period > stride.gap && SoleReader(f)) StrideSkips(plan, path, stride);
  // Runs that jump at a steady stride (JumpRuns): once two jumps in a row
  // were alike (three in a file read at random: two, by chance, made 128
  // KiB reads at random offsets prefetch units no read wanted; sim test
  // "one file read uniformly at random keeps what is cached ..."), or from
  // the start of a file with the stride the reader kept in its last file
  // (bounded only, until a jump here confirms it; not in a file read at
  // random, whose runs vary: Group::run_p50 says how). A run bounded after
  // any one jump was tried: a lockstep reader's first row in its second
  // region was held to the first's, 4.8 -> 6.1 s (a review), and rows-zipf
  // at 1 GiB 31.2 -> 33.8 s.
  const bool jump_steady = jumps_alike >= (random_file ? 2u : 1u);
  if (jump_period > 0 && (jump_steady || (jump_seeded && !random_file)) && mode_igt_ && length > 0 &&
      StrideSole(f) && !(ov && ov->never_cache))
    JumpRuns(plan, path, file_size, run_start - std::min(run_start, jump_head), run_end, jump_len, jump_period,
             jump_steady);
  if (file_size > 2 * opts_.unit_bytes) PoolSkips(plan, *fkey, pid, offset + length, run_bytes);  // (NotePoolExtent)
  TrimPlan(plan);
  uint64_t ra_lo = UINT64_MAX, ra_hi = 0;  // this read's readahead in its own file
  for (const auto& r : plan)
    if (!r.fill && r.path == path) {
      ra_lo = std::min(ra_lo, r.first_unit);
      ra_hi = std::max(ra_hi, r.last_unit);
    }
  if (ra_lo <= ra_hi) {
    f.ra_first = ra_lo;
    f.ra_last = ra_hi;
  }
  // A whole fill is proposed once, then again every kWholeFillRecheckUs
  // while the file is not all cached: the executor may have refused it (too
  // many fills under way) or given up on a failed GET.
  const bool whole_pending = f.fill_whole_us != 0 && now_us_ - f.fill_whole_us < kWholeFillRecheckUs;
  if ((fl == kRandom || fl == kSkewed) && !whole_pending && !(ov && (ov->never_cache || ov->pattern >= 0))) {
    const uint64_t n = UnitsOf(file_size);
    const uint64_t missing = file_size - std::min(file_size, f.cached_bytes);
    const uint64_t free_bytes = FreeBytes();
    std::optional<uint64_t> limit;  // 0: the whole file
    if (n >= kFillMinUnits && missing > 0 && missing <= free_bytes) {
      f.fill_whole_us = std::max<uint64_t>(1, now_us_);
      limit = 0;
    } else if (n >= kFillMinUnits && missing > 0) {
      // Idle streams' space is worth 0 (Idle): a skewed file's cold units
      // are worth more there too. (Free space only, before 2026-12-01: a
      // Zipf job's fill stopped once a scan and a loader had taken the free
      // space, and never took the loader's idle space; the rest came back a
      // 64 KiB piece at a time: a tester's mix in sim 83.1 -> 63.9 s.)
      const uint64_t room = free_bytes + IdleBytes(g);
      if (room >= kFillMinUnits * opts_.unit_bytes) limit = std::min(room, missing);
    }
    if (limit) {
      f.fill_planned = true;
      // While fills are proposed, prefetched units of the file are taken
      // for fill units (as before ra_first/ra_last), also those of an older
      // readahead range (from before the file was labelled).
      f.ra_first = 1;
      f.ra_last = 0;
      PrefetchRange r;
      r.path = std::string(path);
      r.file_size = file_size;
      r.first_unit = 0;
      r.last_unit = n - 1;
      r.fill = true;
      r.fill_bytes = *limit;
      plan.push_back(std::move(r));
    }
  }
  if ((g->label == kRandom || g->label == kSkewed) && !(ov && ov->never_cache)) Warm(g, plan);
  return plan;
}

uint64_t PolicyEngine::WarmPromised(const Group* g) const {
  uint64_t n = 0;
  for (const Group* w : warming_)
    if (w != g && w->parent == g->parent) n += w->warm_need;
  return n;
}

void PolicyEngine::StopWarm(Group* g) {
  warming_.erase(std::remove(warming_.begin(), warming_.end(), g), warming_.end());
}

void PolicyEngine::Warm(Group* g, std::vector<PrefetchRange>& plan) {
  if (!listing_ || g->key.empty() || g->key.back() != '/' || g->warm_passes >= kWarmPasses) return;
  const auto* l = &g->subtree;  // the files of the directory and its subdirectories
  // Empty, or capped (kMaxSubtreeFiles): then the files it knows are not the
  // whole directory, and "the directory fits in free space" cannot be told.
  if (l->empty() || l->size() >= kMaxSubtreeFiles) return;
  // Free space less what warm-ups of sibling directories still need: each
  // directory of a data set larger than the cache fitted in free space on
  // its own, so all of them warmed at once and evicted each other's files
  // before they were read (30 directories of 1,000 small files, cache a
  // third of them: 2.9x the GETs of lru and fewer hits than with no warm-up
  // at all). Only siblings: warm-ups of other data sets do not compete
  // (counting them too lengthened scripts/eval.sh's mix by 9-14%).
  uint64_t free_bytes = FreeBytes();
  free_bytes -= std::min(free_bytes, WarmPromised(g));
  if (!g->warming) {
    // Begin only if the files to warm not cached yet fit in the free space
    // now: then prefetching them evicts nothing. At least the set less all
    // the stream's cached bytes is not cached (more, if some of those are
    // files of directories not read from); at most the whole set. In
    // between it is measured, at most once a period (a pass over the
    // subtree): the set less the stream's bytes said "fits" for a stream
    // holding another job's classes, whatever the free space.
    // A subtree of more than kWarmMeasureMaxFiles files is not measured
    // (a pass under the engine's lock): the whole set must fit.
    const uint64_t set = g->warm_set_bytes();
    if (set - std::min(set, g->bytes) > free_bytes) return;
    uint64_t need = set;
    if (g->subtree.size() <= kWarmMeasureMaxFiles) {
      if (g->warm_judged_us != 0 && now_us_ < g->warm_judged_us + kWarmJudgeUs) return;
      g->warm_judged_us = std::max<uint64_t>(1, now_us_);
      // The stream's bytes as at the last measure, which did not fit, and
      // no more room since: the same answer, without a pass under the
      // engine's lock. Every sibling of 1,000 class directories that did
      // not fit beside the others passed over its files each second: 16%
      // of the simulator's time over 200,000 reads of 1,000,000 files.
      // Measured again every kWarmRemeasureUs all the same: directories
      // forgotten (ForgetStaleReadDirs), files gone, or files cached through
      // another stream lower the need without changing the stream's bytes.
      if (g->bytes == g->warm_measured_bytes && g->warm_measured_need > free_bytes &&
          now_us_ < g->warm_measured_us + kWarmRemeasureUs)
        return;
      need = UncachedWarmBytes(g);  // also what siblings are promised (WarmPromised)
      g->warm_measured_need = need;
      g->warm_measured_bytes = g->bytes;
      g->warm_measured_us = now_us_;
    }
    if (need > free_bytes) return;
    g->warming = true;
    g->warm_need = need;
    g->warm_progress_us = now_us_;
    warming_.push_back(g);
  }
  uint64_t room = free_bytes;
  size_t n = 0, looked = 0;
  // Files looked at per read, proposed or passed over (a directory not read
  // from counts one): a subtree of many files is not gone through at every read.
  auto run = std::upper_bound(g->subtree_runs.begin(), g->subtree_runs.end(), g->warm_cursor,
                              [](size_t c, const Group::DirRun& r) { return c < r.end; });
  while (n < kWarmPerRead && looked++ < kWarmLookPerRead) {
    if (g->warm_cursor >= l->size()) {
      g->warm_cursor = 0;
      // A pass with nothing to propose: every file is cached (or too large).
      if (++g->warm_passes >= kWarmPasses || g->warm_pass_proposed == 0) {
        g->warm_passes = kWarmPasses;
        g->warm_need = 0;
        StopWarm(g);
      }
      g->warm_pass_proposed = 0;
      break;
    }
    while (run != g->subtree_runs.end() && run->end <= g->warm_cursor) ++run;
    // A directory the stream has not read from: passed over whole. A
    // DataLoader reading 12 class directories of 48 (scripts/bench_e2e.sh
    // case 1 at 0.5x, the 12 fit in the cache) had files of the other 36
    // warmed, never read, in about one run of three (604 GETs for 456 files).
    if (run != g->subtree_runs.end() && !g->AllDirsRead() && !g->InReadDirKey(run->dir)) {
      g->warm_cursor = run->end;
      continue;
    }
    const auto& lf = (*l)[g->warm_cursor];
    FileRec& f = files_.find(*lf.path)->second;  // entered when the stream was created
    // Skipped first: a cached or large file (a directory's index) must not
    // hold the cursor for lack of room it will never take.
    if (f.cached_units > 0 || lf.size == 0 || lf.size > kEpochItemMaxUnits * opts_.unit_bytes) {
      ++g->warm_cursor;
      continue;
    }
    if (lf.size > room) return;  // no room now: stop here, retry on a later read
    ++g->warm_cursor;
    f.warm_planned = true;
    PrefetchRange r{*lf.path, lf.size, 0, UnitsOf(lf.size) - 1};
    r.background = true;
    plan.push_back(std::move(r));
    room -= lf.size;
    g->warm_need -= std::min(g->warm_need, lf.size);
    ++n;
    ++g->warm_pass_proposed;
    g->warm_progress_us = now_us_;
  }
}

uint64_t PolicyEngine::EpochItemUnits(const Group* g) const {
  return std::min<uint64_t>(kEpochItemMaxUnits, g->item_depth);
}

uint64_t PolicyEngine::UncachedWarmBytes(const Group* g) const {
  uint64_t n = 0;
  size_t begin = 0;
  for (const auto& run : g->subtree_runs) {
    if (g->AllDirsRead() || g->InReadDirKey(run.dir))
      for (size_t i = begin; i < run.end; ++i) {
        const auto& sf = g->subtree[i];
        auto it = files_.find(*sf.path);
        const uint64_t cached = it == files_.end() ? 0 : it->second.cached_bytes;
        n += sf.size - std::min(sf.size, cached);
      }
    begin = run.end;
  }
  return n;
}

void PolicyEngine::NoteReadaheadOutcome(uint64_t hit, uint64_t wasted) {
  if (!mode_igt_) return;
  ra_recent_hit_ += hit;
  ra_recent_wasted_ += wasted;
  if (ra_recent_hit_ + ra_recent_wasted_ < kReadaheadJudgeUnits * opts_.unit_bytes) return;
  if (ra_recent_wasted_ > ra_recent_hit_) ra_off_until_us_ = now_us_ + kReadaheadOffUs;
  ra_recent_hit_ /= 2;  // the recent outcomes weigh most
  ra_recent_wasted_ /= 2;
}

void PolicyEngine::TrimPlan(std::vector<PrefetchRange>& plan) {
  // The share is of the space readahead can take: not the units a recent
  // `igtcache warm` holds, nor pinned ones. Of the whole cache, a scan's
  // window in a cache mostly held planned more than the little left, and
  // its units were evicted unread (a tester: 512M cache, 496 MiB warmed, a
  // 700 MiB file read thrice: the source gave 1.13x the bytes read, 272 MB
  // of readahead wasted). Nothing is held without warm-ups or pins.
  uint64_t held = 0;
  if (now_us_ < last_user_warm_us_ + kUserWarmHoldUs)
    if (auto w = groups_.find(std::string(kWarmStream)); w != groups_.end()) held += w->second->bytes;
  if (has_pin_)
    for (const Group* g : holding_)
      if (g->ov && g->ov->pin) held += g->bytes;
  const double cap = kMaxPrefetchShare * double(opts_.capacity_bytes - std::min(held, opts_.capacity_bytes));
  double room = cap - double(prefetched_unread_bytes_);
  size_t keep = 0;
  std::vector<PrefetchRange> epoch_items;
  std::erase_if(plan, [&](const PrefetchRange& r) {
    auto it = files_.find(r.path);
    if (it == files_.end() || !it->second.epoch_planned) return false;
    epoch_items.push_back(r);
    epoch_items.back().background = true;
    return true;
  });
  // Readahead that is mostly evicted unread (many readers' windows in a
  // cache too small for them) is stopped for a while; fills, warm-ups and
  // epoch plans are not readahead. (The epoch plans are taken out first:
  // erased here before, their items were counted as proposed by
  // UnreadItems, a pass of kItemPasses spent on nothing; a review.)
  if (mode_igt_ && now_us_ < ra_off_until_us_)
    std::erase_if(plan, [](const PrefetchRange& r) { return !r.fill && !r.background; });
  // A range's units already cached count against the room too, though the
  // executor skips them (a window is proposed again on every read, so its
  // cached unread units are in prefetched_unread_bytes_ as well). That is
  // on purpose: the engine does not see units in flight, and this count is
  // their margin. Counting only units not cached (tried: a per-file set of
  // cached unit indices) let cached plus in-flight readahead exceed the
  // window stream's space, whose FIFO then evicted the units next in line,
  // unread, and the plan fetched them again: in scripts/eval.sh at 10%,
  // model loading 0.616 -> 0.421 byte hit with 5.6 GB of prefetch wasted
  // (6 MB before), shard training 0.592 -> 0.349; a share of 0.125 instead
  // of 0.25 was worse still (0.373, 0.327).
  for (; keep < plan.size() && room > 0; ++keep) {
    PrefetchRange& r = plan[keep];
    const uint64_t n = r.last_unit - r.first_unit + 1;
    const uint64_t fits = uint64_t(room / double(opts_.unit_bytes)) + 1;
    if (fits < n) r.last_unit = r.first_unit + fits - 1;
    room -= double(std::min(n, fits) * std::min(opts_.unit_bytes, std::max<uint64_t>(r.file_size, 1)));
  }
  plan.resize(keep);
  plan.insert(plan.end(), epoch_items.begin(), epoch_items.end());
}

uint64_t PolicyEngine::SubUnitBytes(std::string_view path) const {
  auto it = files_.find(std::string(path));
  return it == files_.end() ? 0 : SubUnitBytesOf(it->second);
}

uint64_t PolicyEngine::CachedBytes(std::string_view path) const {
  auto it = files_.find(std::string(path));
  return it == files_.end() ? 0 : it->second.cached_bytes;
}

double PolicyEngine::JumpScore(const FileRec& f) const {
  return f.jump_score * std::exp2(-double(now_us_ - std::min(now_us_, f.jump_us)) / double(kJumpHalfLifeUs));
}

bool PolicyEngine::Jumpy(const FileRec& f) const { return JumpScore(f) >= kScanBesideJumps; }

uint64_t PolicyEngine::PieceBytes() const {
  return mode_igt_ && opts_.sub_unit_bytes > 0 && opts_.sub_unit_bytes < opts_.unit_bytes ? opts_.sub_unit_bytes : 0;
}

uint64_t PolicyEngine::SubUnitBytesOf(const FileRec& f) const {
  if (PieceBytes() == 0) return 0;
  if (f.size <= opts_.unit_bytes) return 0;
  // Not labelled yet, but scanned beside random readers (kScanRunUnits):
  // the scanner's samples keep the file unlabelled for a while, and a whole
  // unit for each small read of the others cost more than the scan saved.
  const bool scan_beside = f.block_label == kUnknown && ScanFresh(f) && Jumpy(f);
  if (f.block_label != kRandom && f.block_label != kSkewed && !scan_beside) return 0;
  // Whole units while its stream's reads come back to a unit's other
  // pieces soon enough that one GET costs less than a GET per piece.
  if (f.group && f.group->judge && f.group->judge->WholeUnits()) return 0;
  // Or while half its readers' runs are a unit long or more: a run reads
  // the units it passes whole, and a GET per piece waited once per read
  // (rows of 4 MiB read at random in 128 KiB reads, 256 MiB cache: modeled
  // 464 s; 172 with whole units and each row's part-read unit kept).
  // Two units at least: single 1 MiB reads at random offsets, each a run
  // a unit long, fetched the two units each overlaps whole (2 MiB a read,
  // as lru; a review; the test "single 1 MiB reads at random offsets").
  if (f.group && f.group->run_p50 >= 2 * opts_.unit_bytes) return 0;
  return opts_.sub_unit_bytes;
}

uint64_t PolicyEngine::FreeBytes() const {
  // Free disk space, in the data bytes it holds at the cached units' ratio
  // of data to disk use (the plans that check it are in data bytes).
  if (opts_.capacity_bytes <= cached_disk_bytes_) return 0;
  const uint64_t free_disk = opts_.capacity_bytes - cached_disk_bytes_;
  if (cached_disk_bytes_ == 0 || cached_disk_bytes_ == cached_bytes_) return free_disk;
  return uint64_t(double(free_disk) * double(cached_bytes_) / double(cached_disk_bytes_));
}

bool PolicyEngine::Idle(const Group* g) const {
  // Random and skewed streams only. A sequential stream that moved on to
  // the next file of a data set has a value of its own (0 for a single pass,
  // its kept prefix's if scans repeat); an unknown one ("?dir/") holds the
  // first units of files not labelled yet, which follow them to their
  // stream when read again (in the simulator's shard training, the heads of
  // the shards, read again next epoch).
  return g->idle && (g->label == kRandom || g->label == kSkewed);
}

uint64_t PolicyEngine::IdleBytes(const Group* except) const {
  // A stream turns idle only at an allocation: the streams idle then are the
  // only candidates (a read since may have woken one up).
  uint64_t n = 0;
  for (const Group* g : idle_groups_)
    if (Idle(g) && g != except && !(g->ov && g->ov->pin)) n += g->bytes;
  return n;
}

uint64_t PolicyEngine::ShadowBytes(const Group* g) const {
  // Near the boundary: a Zipf stream's curve is steepest where it was cut,
  // and a span much wider than the stream averages that away (a stream
  // squeezed to 1 MiB measured over 10 MiB looked worth no more than a
  // uniform one beside it, and stayed squeezed: live black-box test).
  const uint64_t hi = std::max<uint64_t>(4 * opts_.unit_bytes, uint64_t(kShadowShare * double(opts_.capacity_bytes)));
  return std::clamp<uint64_t>(g->bytes / 2, 4 * opts_.unit_bytes, hi);
}

uint64_t PolicyEngine::UnitsOf(uint64_t size) const { return (size + opts_.unit_bytes - 1) / opts_.unit_bytes; }

void PolicyEngine::NoteGhost(Group* g, const std::string& id, uint64_t bytes, double weight) {
  // Noted at every eviction, so a unit that keeps coming back is measured
  // from its latest one (before, only its first counted: once every id of a
  // small hot set had been noted, the shadow stopped moving).
  g->ghost_bytes += bytes;
  g->ghost_noted_bytes += bytes;
  g->ghost.push_back({id, bytes, g->ghost_noted_bytes});
  ++ghost_entries_;
  // The weight is aged to the module's clock (WeightOf), which stops with
  // the stream's reads and inserts: stamped with it, not now (a review: a
  // stream drained long after its last read kept counts overstated).
  g->ghost_set.insert_or_assign(id, Group::GhostMark{g->ghost_noted_bytes, bytes, std::max(0.0, weight),
                                                     std::min(g->module_us, now_us_), g->module_gen});
  // Bounded in bytes (the cache's capacity) and in ids (as many as full
  // units fit in it): with small units the capacity alone let one stream
  // remember millions of ids.
  while ((g->ghost_bytes > std::max<uint64_t>(opts_.capacity_bytes, opts_.unit_bytes) ||
          g->ghost.size() > std::max<uint64_t>(kMinGhostIds, opts_.capacity_bytes / opts_.unit_bytes)) &&
         !g->ghost.empty()) {
    PopGhost(g);
  }
  if (ghost_entries_ > GhostBudget()) TrimGhosts();
}

double PolicyEngine::AgedWeight(const Group* g, double weight, uint64_t us) const {
  if (g->half_life_ms <= 0 || now_us_ <= us) return weight;
  return weight * std::exp2(-double(now_us_ - us) / 1000.0 / g->half_life_ms);
}

double PolicyEngine::BoundaryRate(const Group* g) const {
  if (g->half_life_ms <= 0 || g->ghost_set.empty()) return -1;
  std::vector<std::pair<double, uint64_t>> w;  // aged weight, bytes
  w.reserve(g->ghost_set.size());
  for (const auto& [id, m] : g->ghost_set)
    if (m.weight > 0 && m.module_gen == g->module_gen) w.push_back({AgedWeight(g, m.weight, m.us), m.bytes});
  const uint64_t span = ShadowBytes(g);
  double hits = 0;  // aged count x bytes, summed
  uint64_t bytes = 0;
  // The heaviest first, until the span is covered. One sort: partial sorts
  // of a growing head cost ghosts x span / 64 (a review: 2 s a call with
  // 200,000 ghosts of 16 KiB units and an 8 GiB span).
  std::sort(w.begin(), w.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto top = w.begin(); top != w.end() && bytes < span; ++top) {
    hits += top->first * double(top->second);
    bytes += top->second;
  }
  if (bytes == 0) return -1;
  return hits / double(bytes) * std::log(2.0) / (g->half_life_ms / 1000.0);
}

void PolicyEngine::PopGhost(Group* g) {
  const auto& e = g->ghost.front();
  g->ghost_bytes -= e.bytes;
  if (auto it = g->ghost_set.find(e.id); it != g->ghost_set.end() && it->second.pos == e.pos) g->ghost_set.erase(it);
  g->ghost.pop_front();
  --ghost_entries_;
}

uint64_t PolicyEngine::GhostBudget() const {
  return std::max<uint64_t>(kMinGhostIds, kGhostBudgetUnits * (opts_.capacity_bytes / opts_.unit_bytes));
}

// Every stream's ghosts together within GhostBudget(): bounded per stream
// only (the cache's capacity each), a data set of 2,000 directories, each
// a stream, remembered up to 2,000 caches' worth of victims (a tester's
// 50,000 files in 500 directories with 64 MiB: about 4.6 MB more heap
// each epoch, ~95 B an eviction, no end in sight). Down to 7/8 of the
// budget at a time (so trims are at least budget/8 evictions apart): each
// stream keeps at least the ghosts its shadow measures (ShadowBytes of the
// newest), up to an equal share of the budget, and the others are cut to
// one level, longest first (water-filling): a stream with few keeps them
// all. (A first version kept the shadow's ghosts whatever they came to: 400
// streams of 5 KB units each kept ~900, over the budget, and every eviction
// trimmed again: half the daemon's CPU.)
void PolicyEngine::TrimGhosts() {
  const uint64_t target = GhostBudget() / 8 * 7;
  struct Cut {
    Group* g;
    uint64_t floor, size;
  };
  std::vector<Cut> cuts;
  size_t with_ghosts = 0;
  for (const auto& [k, gp] : groups_) with_ghosts += gp->ghost.empty() ? 0 : 1;
  const uint64_t share = target / std::max<size_t>(1, with_ghosts);
  for (const auto& [k, gp] : groups_) {
    Group* g = gp.get();
    if (g->ghost.empty()) continue;
    // The newest ghosts within the shadow's span, at most an equal share.
    const uint64_t span = ShadowBytes(g);
    uint64_t floor = 0, bytes = 0;
    for (auto it = g->ghost.rbegin(); it != g->ghost.rend() && bytes < span && floor < share; ++it, ++floor)
      bytes += it->bytes;
    cuts.push_back({g, floor, g->ghost.size()});
  }
  // The highest level whose total is within the target.
  auto total_at = [&](uint64_t level) {
    uint64_t n = 0;
    for (const Cut& c : cuts) n += std::max(c.floor, std::min(c.size, level));
    return n;
  };
  // The floors come to at most the target (each at most an equal share).
  uint64_t lo = 0, hi = 0;
  for (const Cut& c : cuts) hi = std::max(hi, c.size);
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (total_at(mid) <= target) lo = mid;
    else hi = mid - 1;
  }
  for (const Cut& c : cuts) {
    const uint64_t keep = std::max(c.floor, std::min(c.size, lo));
    while (c.g->ghost.size() > keep) PopGhost(c.g);
  }
}

void PolicyEngine::OnInsert(const std::string& id, std::string_view path, uint64_t unit_index, uint64_t bytes,
                            bool prefetched, uint64_t now_us, uint64_t disk_bytes, std::string_view etag,
                            bool restored) {
  now_us_ = std::max(now_us_, now_us);
  bool was_gone = false;  // replacing the last unit of a gone file (whose record goes with it)
  if (auto it = units_.find(id); it != units_.end()) {
    auto fit = files_.find(*it->second.path);
    was_gone = fit != files_.end() && fit->second.gone;
    OnRemove(id);
  }
  if (IsSubUnit(unit_index)) unit_index = SubUnitOffset(unit_index) / opts_.unit_bytes;
  auto [fit, fresh] = files_.try_emplace(std::string(path));
  FileRec& f = fit->second;
  const std::string* fkey = &fit->first;  // GroupFor may add files: fit may not survive a rehash
  if (fresh) f.rank = files_seen_++;
  if (fresh && (was_gone || WasGone(path))) {
    f.gone = true;
    f.version = kGoneVersion;
  }
  Group* g = nullptr;
  // A user's warm-up (NoteWarm) waits in the (warm) stream until read, as
  // readahead does in the window stream: the file's own stream, if it has
  // one, may be idle or give space first, and it was not read yet.
  const bool user_warm = mode_igt_ && prefetched && f.user_warm;
  if (!mode_igt_) {
    g = groups_[std::string(kAllStream)].get();
  } else if (user_warm) {
    g = WarmGroup();
  } else if (f.group) {
    g = f.group;
  } else {
    int pl, fl, dl;
    g = GroupFor(path, now_us_, &pl, &fl, &dl);
    if (!f.gone) JoinGroup(f, fkey, g);
    // A gone file's unit (a fetch under way) is a first victim; a stream
    // made (or left empty) just for it goes once empty.
    else if (g->units == 0 && g->live_items() == 0) g->gone = true;
  }
  // A miss of a scanner beside random readers (kScanRunUnits).
  if (!prefetched && !restored && g == f.group && ScannerAt(f, unit_index, kReorderUnits)) g = ScanGroup();
  double prior_weight = 0;  // a returning victim's module weight (GhostMark)
  if (auto gh = g->ghost_set.find(id); gh != g->ghost_set.end()) {
    g->repeats = true;  // fetched again after eviction
    // A demand miss on a recent victim: a hit with a little more space.
    if (const uint64_t span = ShadowBytes(g); !prefetched && g->ghost_noted_bytes - gh->second.pos < span)
      g->period_shadow += double(bytes) / double(span);
    if (!prefetched && gh->second.module_gen == g->module_gen)
      prior_weight = AgedWeight(g, gh->second.weight, gh->second.us);
    // Used: back in the cache, it is no ghost until evicted again (a unit
    // replaced by a new insert of itself found its mark again, a review).
    // PopGhost erases a mark only if it is its entry's.
    g->ghost_set.erase(gh);
  }
  // Readahead units wait in the window stream until read: whatever the
  // file's stream is (its label may be skewed or random by now, whose
  // modules would take a never-read unit first), a window is not given up
  // while other streams hold space; on its first read the unit moves to the
  // file's stream (OnHit).
  const bool readahead = mode_igt_ && prefetched && !user_warm &&
                         ((unit_index >= f.ra_first && unit_index <= f.ra_last) ||
                          (!f.epoch_planned && !f.fill_planned && !f.warm_planned));
  if (readahead) g = WindowGroup();
  Unit u;
  u.g = g;
  u.path = fkey;
  u.index = unit_index;
  u.bytes = bytes;
  u.inserted_us = now_us_;
  u.disk_bytes = disk_bytes ? disk_bytes : bytes;
  u.version = etag.empty() ? 0 : std::hash<std::string_view>{}(etag) | 1;
  if (u.version && !f.version) f.version = u.version;
  u.old_version = f.gone || (u.version && u.version != f.version);
  u.prefetched_unread = prefetched;
  const bool prev_epoch = PrevEpochRead(f, g);
  // A miss its reader stopped part-way through (a file read in pieces, the
  // kernel's 128 KiB requests), outside scans (evict-behind keeps the unit a
  // reader is at): not read yet until its next piece. As read, keep took it
  // first (newest read first), before its next piece, which fetched it
  // again: a reviewer's trace of 3,000 files of 256 KiB read in 2 pieces,
  // one shuffled epoch, cache 50%: 960 MiB fetched of 750 (sim).
  const bool part_read =
      !prefetched && !restored && PartReadActive(f) && f.part_unit == unit_index + 1 && g->label != kSequential;
  if (!prefetched) {
    u.consumed = true;
    if (!prev_epoch && !part_read) {
      u.read_stamp = g->epoch + 1;
      SetReadCached(g, g->read_cached_bytes + bytes);
    }
    g->consumed_cached_bytes += bytes;
  }
  auto uit = units_.emplace(id, u).first;
  Unit& nu = uit->second;  // a node of units_: its address is stable
  nu.id = &uit->first;
  LinkUnit(g, nu);
  if (f.gone && mode_igt_) {
    nu.queued_old = true;
    old_units_.push_back(id);
  }
  nu.file_next = f.units;
  if (f.units) f.units->file_prev = &nu;
  f.units = &nu;
  // A read for the previous epoch (a straggler's) enters as not read in
  // this one: the item is still to be read this epoch (keep: not a first
  // victim); so does a part-read miss (above).
  g->module->OnInsertUnit(id, bytes, 0, UnitMeta{.position = ScanPosition(f.rank, unit_index), .prefetched = prefetched || prev_epoch || part_read, .now_us = now_us_,
                                              .replay = restored, .prior_weight = prior_weight});
  g->module_us = now_us_;
  g->bytes += bytes;
  ++g->units;
  NoteHolding(g);
  cached_bytes_ += bytes;
  cached_disk_bytes_ += u.disk_bytes;
  if (!u.old_version) {
    ++f.cached_units;
    f.cached_bytes += bytes;
  }
  if (prefetched) {
    if (readahead || (!mode_igt_ && !f.fill_planned && !f.warm_planned && !f.epoch_planned)) {
      prefetched_unread_bytes_ += bytes;
      nu.in_share = true;
    } else if (f.fill_planned || f.warm_planned) {
      // A fill or warm-up takes free space only: not held against the readahead share.
    } else {
      SetInflight(g, g->epoch_inflight_bytes - std::min(g->epoch_inflight_bytes, bytes));
    }
    prefetch_bytes_ += bytes;
    g->prefetch_bytes += bytes;
  }
}

void PolicyEngine::OnHit(const std::string& id, uint64_t bytes, uint64_t now_us, bool hit) {
  now_us_ = std::max(now_us_, now_us);
  auto it = units_.find(id);
  if (it == units_.end()) return;
  Unit& u = it->second;
  // A unit cached before its file joined its current stream (e.g. while the
  // file was still unlabelled) moves to that stream when it is read, so its
  // hits, space and eviction follow the stream that reads it.
  auto fit = files_.find(*u.path);
  // The windows' pace, readahead read per second (ByteValue): their rate,
  // kept apart from read_bytes (they serve no read themselves: the unit
  // moves to its file's stream, which counts the read and the hit).
  if (u.g->window && u.prefetched_unread) u.g->period_read_bytes += u.bytes;
  // A unit of its readahead a scanner beside random readers reads goes to
  // the (scan) stream, and from there to its file's stream once another
  // reader reads it (kScanRunUnits). (A fill's unit stays: it was fetched
  // for the random readers.) The reader is the one of the latest read when
  // that was in this file (the simulator's order; live, reads of other
  // threads may come between), else told by position.
  if (fit != files_.end() && fit->second.group) {
    Group* to = fit->second.group;
    const FileRec& fr = fit->second;
    const bool by_scanner = cur_path_ != &fit->first || cur_pid_ == fr.scan_pid;
    if ((u.g->scan || u.g->window) && by_scanner && ScannerAt(fr, u.index, kReorderUnits)) to = ScanGroup();
    if (to != u.g) MoveUnit(it->first, u, fit->second, to);  // the key in units_: Unit::id holds its address
  }
  Group* g = u.g;
  if (bytes == 0) bytes = u.bytes;  // the whole unit
  // At most the stream's read bytes: a read counted in the stream its file
  // was in, whose hit comes once the file moved to another (a shard gaining
  // a stream of its own while a loader worker reads it), showed a hit
  // ratio over 100% there (a tester's `igtcache stats`: 103%).
  if (hit) g->hit_bytes = std::min(g->hit_bytes + bytes, g->read_bytes);
  if (u.prefetched_unread) {
    u.prefetched_unread = false;
    if (u.in_share) {
      prefetched_unread_bytes_ -= std::min(prefetched_unread_bytes_, u.bytes);
      NoteReadaheadOutcome(u.bytes, 0);
    }
    u.in_share = false;
    u.left = false;
    prefetch_hit_bytes_ += u.bytes;
    g->prefetch_hit_bytes += u.bytes;
  }
  // A new visit of a file finding units already read: the data is re-read
  // (a repeated scan, or several readers).
  if (u.consumed && cur_new_visit_ && cur_path_ && *cur_path_ == *u.path) g->repeats = true;
  if (!u.consumed) {
    u.consumed = true;
    g->consumed_cached_bytes += u.bytes;
  }
  // A read for the previous epoch leaves the unit unread in this one.
  if (fit != files_.end() && PrevEpochRead(fit->second, g)) return;
  if (u.read_stamp != g->epoch + 1) {
    u.read_stamp = g->epoch + 1;
    SetReadCached(g, g->read_cached_bytes + u.bytes);
  }
  g->module->OnAccessAt(id, now_us_);
  g->module_us = now_us_;
}

bool PolicyEngine::PrevEpochRead(const FileRec& f, const Group* g) const {
  return mode_igt_ && g->label == kRandom && g->epoch > 0 && f.group == g && f.epoch_read == g->epoch;
}

// A stream labelled skewed for a while counts no epoch (NewVisit): reads
// then keep the epoch's stamp, and a flip back to random that crosses an
// epoch's end hands the units read in the ending epoch over as read until
// the next repeat starts the new one (a few reads).
bool PolicyEngine::ReadThisEpoch(const Group* g) { return g->read_cached_bytes > 0 && !g->multi_pass; }

bool PolicyEngine::NotReadYet(const Unit& u, const Group* g) const {
  return u.prefetched_unread || (g->label == kRandom && u.read_stamp != g->epoch + 1);
}

void PolicyEngine::LinkUnit(Group* g, Unit& u) {
  u.group_prev = nullptr;
  u.group_next = g->first_unit;
  if (g->first_unit) g->first_unit->group_prev = &u;
  g->first_unit = &u;
}

void PolicyEngine::UnlinkUnit(Group* g, Unit& u) {
  if (u.group_prev) u.group_prev->group_next = u.group_next;
  else g->first_unit = u.group_next;
  if (u.group_next) u.group_next->group_prev = u.group_prev;
  u.group_prev = u.group_next = nullptr;
}

void PolicyEngine::MoveUnit(const std::string& id, Unit& u, const FileRec& f, Group* dest, bool read, bool passed) {
  Group* from = u.g;
  Group* to = dest ? dest : f.group;
  from->module->OnRemove(id);
  from->bytes -= u.bytes;
  --from->units;
  NoteHolding(from);
  if (u.read_stamp == from->epoch + 1)
    SetReadCached(from, from->read_cached_bytes - std::min(from->read_cached_bytes, u.bytes));
  if (u.consumed) {
    from->consumed_cached_bytes -= std::min(from->consumed_cached_bytes, u.bytes);
    to->consumed_cached_bytes += u.bytes;
  }
  u.read_stamp = 0;  // not read in the new stream's epoch yet, unless `read`
  if (read) {
    u.read_stamp = to->epoch + 1;
    SetReadCached(to, to->read_cached_bytes + u.bytes);
  }
  // A unit fetched ahead and not read yet counts as the new stream's
  // prefetch (a readahead unit moves to its file's stream on its first
  // read: its hit is counted there, and so is its fetch).
  if (u.prefetched_unread) {
    from->prefetch_bytes -= std::min(from->prefetch_bytes, u.bytes);
    to->prefetch_bytes += u.bytes;
  }
  UnlinkUnit(from, u);
  u.g = to;
  LinkUnit(to, u);
  to->module->OnInsertUnit(id, u.bytes, 0,
                          UnitMeta{.position = ScanPosition(f.rank, u.index), .prefetched = !passed && NotReadYet(u, to),
                                   .now_us = now_us_, .object = *u.path, .unit_index = u.index, .replay = true});
  to->module_us = now_us_;
  to->bytes += u.bytes;
  ++to->units;
  NoteHolding(to);
}

void PolicyEngine::OnRemove(const std::string& id) {
  auto it = units_.find(id);
  if (it == units_.end()) return;
  Unit& u = it->second;
  Group* g = u.g;
  const double weight = g->module->WeightOf(id);  // for its ghost (NoteGhost)
  g->module->OnRemove(id);
  g->bytes -= u.bytes;
  --g->units;
  NoteHolding(g);
  cached_bytes_ -= u.bytes;
  cached_disk_bytes_ -= u.disk_bytes;
  g->evicted_bytes += u.bytes;
  auto fit = files_.find(*u.path);
  if (fit != files_.end() && !u.old_version) {
    if (fit->second.cached_units > 0) --fit->second.cached_units;
    fit->second.cached_bytes -= std::min(fit->second.cached_bytes, u.bytes);
  }
  if (u.file_prev) u.file_prev->file_next = u.file_next;
  else if (fit != files_.end() && fit->second.units == &u) fit->second.units = u.file_next;
  if (u.file_next) u.file_next->file_prev = u.file_prev;
  if (u.prefetched_unread) {
    if (u.in_share) prefetched_unread_bytes_ -= std::min(prefetched_unread_bytes_, u.bytes);
    prefetch_wasted_bytes_ += u.bytes;
    g->wasted_bytes += u.bytes;
    // Only readahead shrinks windows: an unread unit of a fill, warm-up or
    // epoch plan says nothing about a scan (a skewed stream's unread fill
    // units are evicted in their turn: each would halve every scan's
    // window). A window its reader left counts too (LeaveWindow): its
    // overshoot is the window's waste.
    if (u.in_share || u.left) {
      for (auto& p : prefetch_)
        if (p) p->OnWasted(*u.path);
      if (baseline_prefetch_) baseline_prefetch_->OnWasted(*u.path);
      if (u.in_share) NoteReadaheadOutcome(0, u.bytes);
    }
  }
  if (u.read_stamp == g->epoch + 1) SetReadCached(g, g->read_cached_bytes - std::min(g->read_cached_bytes, u.bytes));
  if (u.consumed) g->consumed_cached_bytes -= std::min(g->consumed_cached_bytes, u.bytes);
  // Evictions only: a unit dropped (its object changed, its file corrupt) or
  // replaced by a new insert of itself is not a victim, and its next fetch
  // is not a miss more space would have saved.
  if (mode_igt_ && id == last_victim_) {
    NoteGhost(g, id, u.bytes, weight);
    last_victim_.clear();
  }
  UnlinkUnit(g, it->second);
  units_.erase(it);
  if (fit != files_.end() && fit->second.gone && !fit->second.units) EraseFile(fit->first);
}

// Its inputs (label, ov, window, user_warm, key) change only where SyncPool
// follows (SetLabel, SetPolicyFile); Allocate checks the invariant.
bool PolicyEngine::SiblingUniform(const Group* g) {
  return g->label == kRandom && !g->ov && !g->window && !g->user_warm && !g->key.empty() && g->key.back() == '/' &&
         g->key.front() != '/';
}

void PolicyEngine::SetReadCached(Group* g, uint64_t v) {
  if (g->pool) g->pool->read_cached_bytes += v - g->read_cached_bytes;  // modulo 2^64: either way
  g->read_cached_bytes = v;
}

void PolicyEngine::SetInflight(Group* g, uint64_t v) {
  if (g->pool) g->pool->epoch_inflight_bytes += v - g->epoch_inflight_bytes;
  g->epoch_inflight_bytes = v;
}

void PolicyEngine::SyncPool(Group* g, bool leave) {
  const bool want = !leave && SiblingUniform(g);
  if (want == (g->pool != nullptr)) return;
  if (!want) {
    SiblingPool* p = g->pool;
    p->read_cached_bytes -= g->read_cached_bytes;
    p->epoch_inflight_bytes -= g->epoch_inflight_bytes;
    g->pool = nullptr;
    std::erase(p->list, g);
    if (--p->members == 0) pools_.erase(g->parent);
    return;
  }
  auto& slot = pools_[g->parent];
  if (!slot) slot = std::make_unique<SiblingPool>();
  g->pool = slot.get();
  g->pool->read_cached_bytes += g->read_cached_bytes;
  g->pool->epoch_inflight_bytes += g->epoch_inflight_bytes;
  ++g->pool->members;
  g->pool->list.push_back(g);
}

void PolicyEngine::NoteRun(uint32_t pid, std::string_view path, Group* g, bool random, bool continues,
                           uint64_t run_bytes) {
  if (pid_runs_.size() >= kMaxPidRuns && !pid_runs_.contains(pid)) pid_runs_.clear();
  PidRun& r = pid_runs_[pid];
  const size_t h = std::hash<std::string_view>{}(path);
  if (continues && r.path_hash == h) {
    r.bytes = std::max(r.bytes, run_bytes);
    return;
  }
  // A new run of this reader (elsewhere in the file, or in another file):
  // its last one has ended.
  if (r.group && r.random && r.bytes > 0) r.group->run_ring[r.group->runs_noted++ % Group::kRunRing] = r.bytes;
  std::string prev;
  if (mode_igt_ && r.path_hash != h) {
    prev = std::move(r.path);
    r.path.assign(path);
  }
  r.path_hash = h;
  r.group = g;
  r.bytes = run_bytes;
  r.random = random;
  if (!prev.empty()) LeaveFile(pid, prev);
}

void PolicyEngine::LeaveFile(uint32_t pid, const std::string& path) {
  // A file opened, read once at its start and left (a header read; also
  // the first visit of a reader taking one record of each shard in turn,
  // whose window is planned again when it comes back): its first read's
  // readahead (a stream not labelled yet reads ahead a few units at a
  // file's start) is not what the reader reads next. A scan reading each file's 16 KiB
  // header beside a shard scan left units 1-2 of its first 31 files so,
  // read before its directory had a label: 62 of the share's 64 units at
  // 256 MiB, held for good, and every later plan of both scans was cut to
  // a unit (sim test "a header reader beside a shard scan ..."). Only after
  // one read: a reader that read on in the file (a scanner reading 3 units
  // of each file) is judged by its window's waste (OnWasted); released at
  // every file it left, its overshoot flooded a 300-unit cache beside an
  // epoch's items (engine test "epoch plans go on while readahead is
  // stopped for waste": hit ratio 0.90 -> 0.00).
  auto fit = files_.find(path);
  if (fit == files_.end() || !SoleReader(fit->second)) return;
  auto rit = reader_end_.find(ReaderKey(pid, path));
  if (rit == reader_end_.end()) return;
  const ReaderEnd& re = rit->second;
  if (re.run_reads != 1 || re.run_start != 0 || re.visit_start != 0 || re.end == 0) return;
  const uint64_t last = (re.end - 1) / opts_.unit_bytes;
  size_t n = 0;
  for (Unit* u = fit->second.units; u && n < kLeaveWindowScan; u = u->file_next, ++n) {
    if (!u->in_share || u->index <= last) continue;
    prefetched_unread_bytes_ -= std::min(prefetched_unread_bytes_, u->bytes);
    u->in_share = false;
    u->left = true;
  }
}

void PolicyEngine::NoteHolding(Group* g) {
  const bool holds = g->units > 0;
  if (holds == (g->holding_at != SIZE_MAX)) return;
  if (holds) {
    g->holding_at = holding_.size();
    g->holding_seq = ++holding_count_;
    holding_.push_back(g);
    return;
  }
  Group* last = holding_.back();
  holding_[g->holding_at] = last;
  last->holding_at = g->holding_at;
  holding_.pop_back();
  g->holding_at = SIZE_MAX;
}

double PolicyEngine::Value(const Group* g) const {
  const double v = ByteValue(g);
  if (v <= 0 || v >= kWindowValue || g->read_bytes == 0) return v;
  // Seconds a byte hit saves. A miss of a stream read at random or skewed
  // waits for its GET: the latency once per read plus the transfer of the
  // units it touches (the backend model of EngineOptions); so does an
  // unknown stream's (not labelled yet: a `?dir/` of files read at random
  // beside other streams waited 63 -> 449 s counted as a scan's, a review).
  // A sequential stream's misses are fetched ahead by readahead, whose
  // latency overlaps the reader's: the transfer only. (Counted per read for
  // every label, a scan of 128 KiB reads of 1 MiB units looked worth about
  // 25x a hit of its bytes, and random and skewed streams were weighted by
  // latency a second time to make up for it: the weight then counted the
  // latency twice between two random streams. A loss hunter's trace of 16
  // KiB files read at random beside 4 MiB rows of a 512 MiB file, 600 MiB:
  // 291 s against lru's 232; now 231.)
  const bool waits = g->label != kSequential;
  const double miss_s = waits ? double(g->reads) * opts_.miss_latency_us / 1e6 +
                                    double(g->touched_bytes) / opts_.bandwidth_bytes_per_s
                              : double(g->read_bytes) / opts_.bandwidth_bytes_per_s;
  return v * miss_s / double(g->read_bytes);
}

PolicyEngine::Group* PolicyEngine::HoldingGroup(std::string_view key, int label, bool Group::*kind) {
  auto& slot = groups_[std::string(key)];
  if (!slot) {
    slot = std::make_unique<Group>();
    slot->key = std::string(key);
    slot->label = label;
    slot->forced = true;
    (*slot).*kind = true;
    // Oldest first: a window nobody reads any more (the reader stopped or
    // jumped) is older than the windows of readers still going; an older
    // warm-up than a newer one.
    slot->module = *MakeEvictionPolicy("fifo");
    slot->module_name = "fifo";
    slot->module_spec = {"fifo", {}};
  }
  return slot.get();
}

PolicyEngine::Group* PolicyEngine::WarmGroup() { return HoldingGroup(kWarmStream, kUnknown, &Group::user_warm); }

void PolicyEngine::NoteWarm(std::string_view path, uint64_t now_us) {
  if (!mode_igt_) return;
  now_us_ = std::max(now_us_, now_us);
  auto [fit, fresh] = files_.try_emplace(std::string(path));
  if (fresh) fit->second.rank = files_seen_++;
  FileRec& f = fit->second;
  // A pinned prefix keeps its units in its own stream, held there for good,
  // not for the (warm) stream's while: inserted like a directory warm-up's.
  // So does a prefix with a quota, which its own stream keeps (held in
  // (warm), a warm-up of it took what the quota denies its reads: a
  // tester's 9.5 MiB warmed under a 4 MiB quota, 2026-11-30).
  if (const PathOverride* ov = OverrideFor(path); ov && (ov->pin || ov->quota_bytes > 0)) {
    f.warm_planned = true;
    return;
  }
  f.user_warm = true;
  last_user_warm_us_ = now_us_;
  // Units of it cached already (a finished scan's, worth nothing where they
  // are) are held as well, until read: Fetch skips them.
  Group* warm = WarmGroup();
  for (Unit* u = f.units; u; u = u->file_next)
    if (u->g != warm && !u->old_version && !(u->g->ov && u->g->ov->pin)) MoveUnit(*u->id, *u, f, warm);
}

PolicyEngine::Group* PolicyEngine::WindowGroup() { return HoldingGroup(kWindowStream, kSequential, &Group::window); }

PolicyEngine::Group* PolicyEngine::ScanGroup() {
  auto& slot = groups_[std::string(kScanStream)];
  if (!slot) {
    slot = std::make_unique<Group>();
    slot->key = std::string(kScanStream);
    slot->scan = true;
    SetLabel(slot.get(), kSequential, /*rebuild=*/true);  // the policy file's sequential module
  }
  return slot.get();
}

bool PolicyEngine::ScanFresh(const FileRec& f) const {
  return f.scan_pid != 0 && f.scan_end > 0 && f.scan_us + kScanFreshUs >= now_us_;
}

bool PolicyEngine::ScannerAt(const FileRec& f, uint64_t index, uint64_t behind) const {
  if (!mode_igt_ || !ScanFresh(f) || !f.group || f.group->ov || f.group->label == kSequential) return false;
  const uint64_t last = (f.scan_end - 1) / opts_.unit_bytes;
  if (behind == 0) return index == last && f.scan_end % opts_.unit_bytes != 0;
  return index + behind >= f.scan_off / opts_.unit_bytes && index <= last;
}

bool PolicyEngine::WindowStale(const Group* g) const {
  // fifo: its victim is the oldest insert (units only leave the window).
  auto v = g->module->PickVictim();
  if (!v) return false;
  auto it = units_.find(*v);
  return it != units_.end() && now_us_ > it->second.inserted_us + kWindowStaleUs;
}

double PolicyEngine::ByteValue(const Group* g) const {
  if (g->ov && g->ov->never_cache) return -1;
  if (g->window) {
    // Windows whose reader stopped go first, before streams merely idle
    // (worth 0), after never_cache (-1); the others are protected until
    // near the readahead share, then valued as a stream read at their pace
    // (a whole unit a read: the Value of a stream with those reads), the
    // oldest going first. They were worth 0 there, which made them the
    // first givers as soon as prefetches in flight took them past the
    // share: each reader's next unit was evicted unread. Sim of a tester's
    // trace of 8 loader workers streaming shards in 128 KiB requests, a
    // 128 MiB cache for 512 MiB: 1,379 -> 1,217 MiB fetched, 4.7 -> 4.3 s
    // (lru 1,036 MiB, 7.2 s).
    if (WindowStale(g)) return -0.5;
    if (double(g->bytes) < 0.9 * kMaxPrefetchShare * double(opts_.capacity_bytes)) return kWindowValue;
    const double miss_s_per_byte = opts_.miss_latency_us / 1e6 / double(std::max<uint64_t>(opts_.unit_bytes, 1)) +
                                   1.0 / opts_.bandwidth_bytes_per_s;
    return g->rate / std::max(1.0, double(g->bytes)) * miss_s_per_byte;
  }
  // A scan beside random readers: what it passed is not read again before
  // its next pass, and the file's readers keep what they read again in the
  // file's stream. It was valued as a sequential stream's, which keeps a
  // prefix of a repeated scan (rate / file size): above the random
  // readers' unlabelled stream, valued as if uniform over the same file, so
  // their hot rows gave way to the prefix (bench_scan_beside_random.sh).
  if (g->scan) return kScanValue;
  if (g->user_warm)  // held for the job to come, for a while after the last warm-up
    return now_us_ < last_user_warm_us_ + kUserWarmHoldUs ? kWindowValue : 0.0;
  if (Idle(g)) return 0;
  const double avg = g->rate / std::max<double>({1.0, double(g->ws_bytes), double(g->bytes)});
  switch (g->label) {
    case kRandom:
      // Constant marginal value rate/D; units already read this epoch are
      // not read again before the next one: worth about half.
      return ReadThisEpoch(g) ? 0.5 * avg : avg;
    case kSequential:
      if (g->consumed_cached_bytes == 0) return g->bytes > 0 ? kWindowValue : avg;
      return g->repeats ? avg : 0.0;  // a single pass: consumed bytes are worth nothing
    case kSkewed: {
      // shadow: byte hits per second per byte that the last ShadowBytes() of
      // space would give (misses on units evicted within them). The victim's
      // count below undervalues a stream whose misses keep inserting one-off
      // units (a count of 1 is always its victim): squeezed to a few units,
      // it never saw its evicted hot items come back (a live black-box test:
      // 1 MiB of a 75 MiB Zipf set beside a training job). Both count whole
      // units: times the fraction of a unit a read takes.
      const double frac = std::min(1.0, g->touched_bytes == 0 ? 1.0 : double(g->read_bytes) / double(g->touched_bytes));
      const double shadow = g->shadow_rate * frac;
      const double w = g->module->VictimWeight();
      if (w < 0 || g->half_life_ms <= 0) return std::max(avg, shadow);
      // Aged count w with half-life H is ~ rate * H / ln 2: per second w ln2 / H.
      // w is aged to the module's clock, which stops with the stream's
      // reads and inserts: age it on to now (a stream that stopped loses
      // value at the same half-life, idle or not).
      const double since_ms = double(now_us_ - std::min(now_us_, g->module_us)) / 1000.0;
      const double per_s = w * std::exp2(-since_ms / g->half_life_ms) * std::log(2.0) / (g->half_life_ms / 1000.0);
      // The victim is often a one-off just read (a count of 1, whatever the
      // items just outside are worth): the boundary rate is what the evicted
      // items of highest count would give (BoundaryRate), the marginal value
      // lfu's own order implies.
      return std::max({per_s * frac, g->boundary_rate * frac, shadow});
    }
    default:
      return avg;
  }
}

void PolicyEngine::MaybeAllocate(uint64_t now_us) {
  if (last_alloc_us_ == 0 && allocations_ == 0) {
    last_alloc_us_ = now_us;
    Allocate(now_us);
    return;
  }
  if (now_us >= last_alloc_us_ + opts_.policy_file.allocation_period_ms * 1000) Allocate(now_us);
}

void PolicyEngine::Allocate(uint64_t now_us) {
  const double dt = std::max(1e-3, double(now_us - std::min(now_us, last_alloc_us_)) / 1e6);
  std::erase_if(reader_end_, [&](const auto& r) { return r.second.last_us + kReaderIdleUs < now_us; });
  // A warm-up holds its space only while it goes on: its stream still
  // random or skewed and admitted, read in this period, and proposing files
  // within kWarmStallUs (two sibling warm-ups could each wait for room the
  // other holds). It begins again, if it still fits, on a later read.
  for (Group* g : std::vector<Group*>(warming_)) {
    if ((g->label != kRandom && g->label != kSkewed) || (g->ov && g->ov->never_cache) || g->period_reads == 0 ||
        now_us > g->warm_progress_us + kWarmStallUs) {
      g->warming = false;
      StopWarm(g);
    }
  }
  for (auto& [k, g] : groups_) {
    if (!g->read_dirs.empty()) g->ForgetStaleReadDirs();
    const double inst = double(g->period_read_bytes) / dt;
    g->rate = allocations_ == 0 ? inst : 0.5 * g->rate + 0.5 * inst;
    g->period_read_bytes = 0;
    if (g->period_reads == 0 && g->read_rate * dt >= kBusyReads) g->idle = true;
    const double inst_reads = double(g->period_reads) / dt;
    g->read_rate = allocations_ == 0 ? inst_reads : 0.5 * g->read_rate + 0.5 * inst_reads;
    g->period_reads = 0;
    const double inst_shadow = g->period_shadow / dt;
    g->shadow_rate = allocations_ == 0 ? inst_shadow : 0.5 * g->shadow_rate + 0.5 * inst_shadow;
    g->period_shadow = 0;
    g->boundary_rate = g->label == kSkewed ? BoundaryRate(g.get()) : -1;
    if (g->runs_noted >= Group::kMinRuns) {
      const size_t n = std::min<size_t>(g->runs_noted, Group::kRunRing);
      std::array<uint64_t, Group::kRunRing> v = g->run_ring;
      std::nth_element(v.begin(), v.begin() + n * 9 / 10, v.begin() + n);
      g->run_p90 = v[n * 9 / 10];
      std::nth_element(v.begin(), v.begin() + n / 2, v.begin() + n * 9 / 10);
      g->run_p50 = v[n / 2];
    }
    SetInflight(g.get(), 0);
    g->value = Value(g.get());
  }
  // A stream wanted a judge and all are taken: the one read least recently
  // goes if its stream has not been read for kJudgeIdleUs, and the label's
  // own module comes back to it. Not on a short pause: each change of
  // module replays the stream's units, and a new judge takes two halvings
  // to choose again (a review's finding: freed at every idle period, a
  // bursty stream would flip lfu and lru at every gap).
  if (judge_wanted_) {
    judge_wanted_ = false;
    Group* oldest = nullptr;
    for (auto& [k, g] : groups_)
      if (g->judge && (!oldest || g->judge_fed_us < oldest->judge_fed_us)) oldest = g.get();
    if (oldest && now_us_ >= oldest->judge_fed_us + kJudgeIdleUs) {
      oldest->judge.reset();
      SetLabel(oldest, oldest->label);
    }
  }
  // Drop empty, idle unlabelled streams (their files re-home on next read),
  // and empty streams of files and directories the source no longer has.
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group* g = it->second.get();
    // Idle: a rate of 0, which the halving each period without reads
    // reaches after ~1,000 periods (about 18 minutes). Sooner (under a byte
    // a second: 20 periods) moved scripts/eval.sh's mix at 10% from 0.934 to
    // 0.931 by bytes: files re-homed lose their stream's state. The streams
    // of directories gone go without waiting (NoteGone).
    const bool unlabelled_idle = g->rate == 0 && IsUnlabelledKey(g->key);
    if (g->units == 0 && (unlabelled_idle || g->gone) && g != victim_group_) {
      for (const std::string* k : g->items) {
        if (!k) continue;
        auto f = files_.find(*k);
        if (f != files_.end() && f->second.group == g) f->second.group = nullptr;
      }
      StopWarm(g);
      SyncPool(g, /*leave=*/true);
      ghost_entries_ -= g->ghost.size();
      std::erase_if(pid_runs_, [g](const auto& e) { return e.second.group == g; });
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
  idle_groups_.clear();
  for (const auto& [k, g] : groups_) {
    if (Idle(g.get())) idle_groups_.push_back(g.get());
    // A stream is in a pool exactly while SiblingUniform: a change of its
    // inputs without SyncPool would be a bug (asserted in debug and
    // sanitizer builds; mended here otherwise, once a period).
    assert((g->pool != nullptr) == SiblingUniform(g.get()));
    SyncPool(g.get());
  }
  last_alloc_us_ = now_us;
  ++allocations_;
}

PolicyEngine::Group* PolicyEngine::VictimGroup(std::span<Group* const> skip) {
  auto skipped = [&](const Group* g) { return std::find(skip.begin(), skip.end(), g) != skip.end(); };
  // 1. Units under a never_cache prefix (cached before a reload made it so)
  // go first, then a prefix over its quota (no walk without overrides).
  Group* best = nullptr;
  uint64_t worst_over = 0;
  // Only streams holding units are looked at (holding_): every directory
  // read while unlabelled has a stream of its own, kept ~18 idle minutes,
  // and each eviction walked them all, twice (a review's sim: 16,000 files
  // in 8,000 directories, 0.58 ms of engine time per read, 82% of it here).
  // Ties go to the stream that began holding units last (the older
  // holdings are kept prefixes and working sets; a newcomer of equal value
  // gives first), whatever the order of holding_. They went by the hash
  // order of groups_ before. Measured against other rules: the stream
  // holding more bytes first fetched 189 MiB where hash order fetched 159
  // (two shards of 64 MiB read twice with 96 MiB, scripts/bench_e2e.sh case
  // 2 at --quick; live 184-188 against 160-162); fewer bytes first cut an
  // engine test's epoch plans (class directories: 0.82 -> 0.79 hit ratio).
  auto before = [](const Group* a, const Group* b) { return !b || a->holding_seq > b->holding_seq; };
  if (has_quota_ || has_never_cache_) {
    Group* never = nullptr;
    for (Group* g : holding_) {
      if (!g->ov || skipped(g)) continue;
      if (g->ov->never_cache) {
        if (before(g, never)) never = g;
        continue;
      }
      if (g->ov->quota_bytes == 0 || g->bytes <= g->ov->quota_bytes) continue;
      const uint64_t over = g->bytes - g->ov->quota_bytes;
      if (over > worst_over || (over == worst_over && before(g, best))) {
        worst_over = over;
        best = g;
      }
    }
    if (never) return never;
  }
  if (best) return best;
  // 2. The lowest marginal value, with hysteresis; pinned prefixes last.
  // Sibling uniform streams are valued alike: the mean of their values, each
  // then halved while it holds items read this epoch (ByteValue). Their rates
  // are estimates of one epoch's pace and drift apart by chance: valued
  // apart, the sibling with the lowest estimate gave its unread (just
  // prefetched) items while others still held read ones.
  // (A stream is in a pool exactly while SiblingUniform: SyncPool.)
  // A pool's mean is taken over all its members, in its first use this round.
  const uint64_t round = ++victim_rounds_;
  auto value = [&](const Group* g) {
    if (g->pool && !Idle(g)) {
      SiblingPool* p = g->pool;
      if (p->value_round != round) {
        p->value_round = round;
        p->value_sum = 0;
        p->value_count = 0;
        for (const Group* m : p->list)
          if (!Idle(m)) {
            p->value_sum += ReadThisEpoch(m) ? 2 * Value(m) : Value(m);
            ++p->value_count;
          }
      }
      if (p->value_count >= 2) {
        const double mean = p->value_sum / double(p->value_count);
        // No rate measured yet (the first allocation period): the one holding
        // read items still goes first.
        if (mean <= 0) return ReadThisEpoch(g) ? 0.0 : std::numeric_limits<double>::min();
        return ReadThisEpoch(g) ? 0.5 * mean : mean;
      }
    }
    return Value(g);
  };
  double best_v = std::numeric_limits<double>::infinity();
  bool best_pinned = true;
  for (Group* g : holding_) {
    if (skipped(g)) continue;
    const bool pinned = g->ov && g->ov->pin;
    const double v = value(g);
    if ((best_pinned && !pinned) || (pinned == best_pinned && (v < best_v || (v == best_v && before(g, best))))) {
      best = g;
      best_v = v;
      best_pinned = pinned;
    }
  }
  if (best && victim_group_ && victim_group_ != best && victim_group_->units > 0 && !skipped(victim_group_) &&
      !(victim_group_->ov && victim_group_->ov->pin && !best_pinned)) {
    const double cur = value(victim_group_);
    const double h = opts_.policy_file.hysteresis;
    // Keep taking from the current giver unless the new one is cheaper by
    // more than the hysteresis margin.
    if (cur <= best_v * (1 + h)) best = victim_group_;
  }
  return best;
}

const std::string* PolicyEngine::FrontOldUnit() {
  while (!old_units_.empty()) {
    auto it = units_.find(old_units_.front());
    if (it != units_.end() && it->second.old_version) return &it->first;
    if (it != units_.end()) it->second.queued_old = false;  // current again (a version back)
    old_units_.pop_front();                                 // or gone
  }
  return nullptr;
}

bool PolicyEngine::PartRead(const std::string& id) const {
  auto it = units_.find(id);
  if (it == units_.end()) return false;
  auto f = files_.find(*it->second.path);
  if (f == files_.end()) return false;
  if (PartReadActive(f->second) &&
      (f->second.part_unit == it->second.index + 1 || f->second.part_unit_alt == it->second.index + 1))
    return true;
  // The unit a scanner beside random readers is at (its stream gives first).
  return it->second.g->scan && ScannerAt(f->second, it->second.index, /*behind=*/0);
}

bool PolicyEngine::ReaderIn(uint32_t pid, const FileRec& f) const {
  auto r = reader_file_.find(pid);
  return r != reader_file_.end() && r->second.first == &f && r->second.second == f.rank;
}

void PolicyEngine::LeaveWindow(FileRec& f, uint64_t prev_end, uint64_t offset, uint64_t run_start, bool passed) {
  // The readahead planned past where a run ended, and not where the reader
  // went on, no longer counts against the readahead share (TrimPlan): it
  // stays cached (read later, or evicted unread, which still counts as its
  // window's waste) but no longer holds off the reader's next windows.
  // A model loader reading tensors out of offset order overshoots each one
  // by up to a window: those units filled the share within a few tensors,
  // and readahead stopped for every later one until they aged out (30 s) or
  // were read (a tester's safetensors trace, 4 files of 1 GiB, tensors in
  // shuffled order, 512 MiB: modeled 52.6 s, lru-readahead 28.0 s).
  // Only in a file labelled sequential (one scan): beside other readers of
  // the file (a scanner and random readers reading records in two pieces)
  // each random reader's two-piece run released the scanner's live window,
  // and readahead ran past its share (a review: 48.7 GiB fetched where 6
  // were read; lru-readahead 18.7).
  // Looked for among the file's newest units (FileRec::units is newest
  // first): a window's units are recent inserts.
  // And in a file read at random in runs of two units or more, the units
  // its run-ahead planned past where the run ended, up to where the 90th
  // percentile run would end, and no further (a scanner's window beside it
  // is its own): a model's tensors of 1-7 MiB in shuffled order, each
  // planned to the median's end at its first read, kept the share full and
  // every later plan was cut to nothing (scripts/bench_rows.sh, tensors at
  // 256 MiB: modeled 201 s, lru-readahead 180).
  // Units the reader `passed` (a gap its run skipped, confirmed when the
  // next opened: OnRead) leave it whatever the file's label, while no other
  // reader reads the file (in a thread pool's file they are the other
  // threads' next units: a review, 3-7x the waste). Also before a label: a
  // file's first 32 samples are read with the windows of unknown streams,
  // and the skipped units filled the share within one file; readahead
  // planned nothing for the files after it (scripts/bench_rows.sh, parquet
  // at 256 MiB: 67.6 s modeled, lru-readahead 57.5). But not at a jump in
  // an unlabelled file: rows read at random before their file's label then
  // read ahead past each row's end unbraked (rows-zipf at 1 GiB: 31.2 ->
  // 34.1 s).
  if (prev_end == 0) return;
  uint64_t upto = UINT64_MAX;
  if (passed) {
    if (!mode_igt_ || !SoleReader(f)) return;
  } else if (f.block_label != kSequential) {
    if (!mode_igt_ || (f.block_label != kRandom && f.block_label != kSkewed) || !f.group ||
        f.group->run_p50 < 2 * opts_.unit_bytes)
      return;
    upto = (run_start + std::max(f.group->run_p50, f.group->run_p90) - 1) / opts_.unit_bytes;
  }
  const uint64_t last = (prev_end - 1) / opts_.unit_bytes, at = offset / opts_.unit_bytes;
  size_t n = 0;
  for (Unit* u = f.units; u && n < kLeaveWindowScan; u = u->file_next, ++n) {
    if (!u->in_share || u->index <= last || u->index > upto || (at > last && u->index >= at)) continue;
    prefetched_unread_bytes_ -= std::min(prefetched_unread_bytes_, u->bytes);
    u->in_share = false;
    // (A gap's unit evicted unread says nothing of the window's size: the
    // gap was the reader's; its window is not halved for it.)
    u->left = !passed;
    // In a file read at random, a unit as good as any other of the file:
    // into its stream, whose module weighs it with the rest. Left in the
    // window stream, such units took 185-194 MiB of a 256 MiB cache unread
    // while the file's stream held 61-69 (live, 4 MiB rows of a 1 GiB
    // object at random, runs measured longer than the rows, perhaps the
    // kernel's readahead after each row: not verified).
    // So do the units of a gap a reader skipped, as units it is done with:
    // left in the window stream, which gives space last, they took 212-254
    // MiB of a 256 MiB cache by the end of a live run of parquet-like
    // visits, and the files' read units were evicted instead (a tester).
    if ((upto != UINT64_MAX || passed) && u->g->window && f.group)
      MoveUnit(*u->id, *u, f, nullptr, /*read=*/false, /*passed=*/passed);
  }
}

PolicyEngine::StrideGrid PolicyEngine::Grid(const ReaderEnd& re, bool known) const {
  StrideGrid g;
  if (!known || re.skip_gap == 0) return g;
  g.period = re.skip_period;
  g.at = re.skip_at + re.skip_slack_lo;
  const uint64_t slack = uint64_t{re.skip_slack_lo} + re.skip_slack_hi;
  g.gap = re.skip_gap > slack ? re.skip_gap - slack : 0;
  return g;
}

bool PolicyEngine::StrideGrid::Skips(uint64_t i, uint64_t unit) const {
  if (gap < unit) return false;
  const uint64_t b = i * unit;
  uint64_t g0;  // the start of the last gap at or before b
  if (period <= gap) {
    if (b < at) return false;
    g0 = at;
  } else {
    g0 = b >= at ? at + (b - at) / period * period : at - (at - b + period - 1) / period * period;
  }
  return b >= g0 && b + unit <= g0 + gap;
}

// Takes the units `skips` says out of `plan`'s readahead in `path` (not
// fills, warm-ups or epoch plans), splitting its ranges around them.
template <class Skips>
void SkipUnits(std::vector<PrefetchRange>& plan, std::string_view path, const Skips& skips) {
  std::vector<PrefetchRange> out;
  for (PrefetchRange& r : plan) {
    if (r.fill || r.background || r.path != path) {
      out.push_back(std::move(r));
      continue;
    }
    for (uint64_t i = r.first_unit; i <= r.last_unit;) {
      if (skips(i)) {
        ++i;
        continue;
      }
      uint64_t j = i;
      while (j < r.last_unit && !skips(j + 1)) ++j;
      PrefetchRange part = r;
      part.first_unit = i;
      part.last_unit = j;
      out.push_back(std::move(part));
      i = j + 1;
    }
  }
  plan = std::move(out);
}

void PolicyEngine::StrideSkips(std::vector<PrefetchRange>& plan, std::string_view path, const StrideGrid& grid) const {
  // A reader whose run skips a gap of one length at one distance, three
  // times in a row (a parquet reader reading 2 of a row group's 4 column
  // chunks; a strided slice of an array): the units inside the gaps still
  // to come are not its reads. Its readahead fetched them all: every
  // byte of the files for half of them read (scripts/bench_rows.sh,
  // parquet at 256 MiB: 4,096 MiB fetched, lru-readahead 2,792).
  SkipUnits(plan, path, [&](uint64_t i) { return grid.Skips(i, opts_.unit_bytes); });
}

void PolicyEngine::JumpRuns(std::vector<PrefetchRange>& plan, std::string_view path, uint64_t file_size,
                            uint64_t run_start, uint64_t run_end, uint64_t len, uint64_t period, bool steady) const {
  // A reader whose runs start at a steady stride, each a jump from the one
  // before (ReaderEnd::jump_*): its window restarted at every run, each
  // run's first unit a miss, and the window past the run's end into the
  // gap was fetched for nothing; in a file not yet labelled, those units
  // stayed counted against the readahead share, which was full within 4
  // files (a parquet reader reading 1 column chunk of 4: slower than
  // lru-readahead). Nothing wholly inside the gaps or below the run is
  // planned, and if `steady` the next kJumpRunsAhead runs are planned
  // whole; not once the run goes on past its length (the reader stopped
  // jumping). `run_start`: where the run's extent is foretold to begin.
  const uint64_t u = opts_.unit_bytes;
  if (run_end > run_start + len + u / 2 || file_size == 0 || period <= len) return;
  StrideSkips(plan, path, StrideGrid{.at = run_start + len, .gap = period - len, .period = period});
  // Nor the runs behind it, read already (a chunk read in pieces top first
  // is a reader going backwards, and its window below went on into the
  // chunk before: a review, 4x the bytes).
  const uint64_t below = run_start / u;  // units wholly below the run
  std::erase_if(plan, [&](PrefetchRange& r) {
    if (r.fill || r.background || r.path != path || r.first_unit >= below) return false;
    if (r.last_unit < below) return true;
    r.first_unit = below;
    return false;
  });
  for (uint64_t k = 1; steady && k <= kJumpRunsAhead; ++k) {
    const uint64_t first = run_start + k * period;
    if (first >= file_size) break;
    plan.push_back(PrefetchRange{.path = std::string(path), .file_size = file_size, .first_unit = first / u,
                                 .last_unit = (std::min(file_size, first + len) - 1) / u});
  }
}

void PolicyEngine::NotePoolExtent(const std::string& path, uint32_t pid, uint64_t offset, uint64_t end) {
  auto it = pool_extents_.find(path);
  if (it == pool_extents_.end()) {
    // Every file read lately, not only one read by two readers at once: a
    // pool thread may go through chunks before the next thread comes.
    if (pool_extents_.size() >= kMaxPoolFiles) pool_extents_.clear();
    it = pool_extents_.try_emplace(path).first;
  }
  // The reader's extent this read starts in or at the end of, else the
  // extent read longest ago: what was read, not the reader's run, which
  // goes on over small skips (threads taking 1 MiB chunks in turn in 128
  // KiB pieces each went on in one run over the others' chunks, and
  // marked them read: a review, up to 3.2x slower). A thread that went
  // through chunks before another came to its first keeps marks of them.
  ReadExtent* oldest = &it->second[0];
  for (ReadExtent& m : it->second) {
    if (m.pid == pid && m.start <= offset && offset <= m.end) {
      m.end = std::max(m.end, end);
      m.us = now_us_;
      return;
    }
    if (m.us < oldest->us) oldest = &m;
  }
  *oldest = {pid, offset, end, now_us_};
}

void PolicyEngine::PoolSkips(std::vector<PrefetchRange>& plan, const std::string& path, uint32_t pid,
                             uint64_t end, uint64_t run_bytes) const {
  // Threads of a pool (a downloader's, each reading its chunk in turn; a
  // work-stealing one's, each taking the next chunk when done): a thread
  // coming to its chunk planned its window over the chunks after it, read
  // a moment before by the others and evicted behind them. Each such unit
  // was fetched again and never read; held in the readahead share, they
  // filled it and readahead stopped (scripts/bench_rows.sh pool-3x8m at
  // 256 MiB: 16.4 s, lru-readahead 10.4). Only extents begun above this
  // read: a scanner behind another reads what the one ahead read.
  // Only extents of readers reading the file still (their latest read in
  // it under kPoolActiveUs ago): a download's second pass, new threads
  // right after the first, skipped what the first's threads read, evicted
  // since, and read it as misses (a review: +5-14%, a file twice the
  // cache). Only while this read's run is at most twice as long as the
  // extent: a scanner beside random readers of rows reads the rows above
  // it too (a review: the scanner up to 1.5x slower). Only extents of two
  // units or more: batches of one unit read in turn by a DataLoader's
  // workers in 128 KiB pieces swung 0.6-3.2x either way (a review).
  auto it = pool_extents_.find(path);
  if (it == pool_extents_.end()) return;
  const auto& marks = it->second;
  std::array<std::pair<uint64_t, uint64_t>, kPoolExtents> read;
  size_t n = 0;
  for (const ReadExtent& m : marks) {
    if (m.pid == 0 || m.pid == pid || m.start < end || now_us_ >= m.us + kSoleReaderUs ||
        run_bytes > 2 * (m.end - m.start) || m.end - m.start < 2 * opts_.unit_bytes)
      continue;
    uint64_t latest = 0;  // the reader's latest read in the file
    for (const ReadExtent& o : marks)
      if (o.pid == m.pid) latest = std::max(latest, o.us);
    if (now_us_ < latest + kPoolActiveUs) read[n++] = {m.start, m.end};
  }
  if (n == 0) return;
  const uint64_t unit = opts_.unit_bytes;
  SkipUnits(plan, path, [&](uint64_t i) {
    for (size_t k = 0; k < n; ++k)
      if (i * unit >= read[k].first && (i + 1) * unit <= read[k].second) return true;
    return false;
  });
}

bool PolicyEngine::SoleReader(const FileRec& f) const {
  return f.shared_us == 0 || now_us_ >= f.shared_us + kSoleReaderUs;
}

bool PolicyEngine::StrideSole(const FileRec& f) const {
  return f.shared_us == 0 || now_us_ >= f.shared_us + kStrideSoleUs;
}

bool PolicyEngine::PartReadActive(const FileRec& f) const {
  // While its reader's latest read is still in that file: a header reader
  // (a tar index, a parquet footer) that moved on does not come back, and
  // its units were held for it for good (a review's sim: a header reader
  // beside a shard scan).
  // Or, for a reader going round several files (tf.data's interleave, one
  // thread reading 8 TFRecord shards in turn in 256 KiB records: it comes
  // back to each within moments, its latest read always in another), while
  // that read is recent: each shard's part-read unit was evicted between
  // its pieces and fetched again for each (a reviewer's trace, 48 shards
  // of 64 MiB, 256 MiB cache: 11,125 MiB fetched, lru-readahead 6,144).
  // Not for a reader that never goes back (a parquet reader's last chunk
  // of each file: held a second, they crowded out the epoch's plans).
  if (f.part_unit == 0 && f.part_unit_alt == 0) return false;
  if (ReaderIn(f.part_pid, f)) return true;
  if (now_us_ > f.part_us + kPartReadRecentUs) return false;
  auto it = interleaving_us_.find(f.part_pid);
  return it != interleaving_us_.end() && now_us_ <= it->second + kPartReadRecentUs;
}

std::optional<std::string> PolicyEngine::PickVictim(uint64_t now_us) {
  now_us_ = std::max(now_us_, now_us);
  if (!mode_igt_) return groups_[std::string(kAllStream)]->module->PickVictim();
  MaybeAllocate(now_us_);
  if (const std::string* dead = FrontOldUnit()) {
    last_victim_.clear();  // no ghost: a dead version is not read again
    return *dead;
  }
  Group* best = VictimGroup();
  if (!best) return std::nullopt;
  if (best != victim_group_) {
    ++switches_;
    victim_group_ = best;
  }
  auto v = best->module->PickVictim();
  // A unit its reader stopped part-way through (FileRec::part_unit: the
  // kernel's 128 KiB requests of a scan) is read again next: the streams
  // that give space next are asked first, a few. A scan's stream gives
  // consumed units first, down to the one its reader is at: with eight
  // loader workers each streaming a shard in 128 KiB requests, a 128 MiB
  // cache for 512 MiB of shards, each worker's unit was taken between its
  // pieces and fetched again for each (sim of a black-box tester's trace:
  // 2,042 MiB fetched, lru 1,036).
  if (v && PartRead(*v)) {
    Group* tried[kPartReadTries] = {best};
    bool found = false;
    for (size_t n = 1; n < kPartReadTries; ++n) {
      Group* next = VictimGroup(std::span<Group* const>(tried, n));
      // Not a pinned prefix's unit for it (pinned: never evicted while
      // anything else can be, and the part-read unit can).
      if (!next || (next->ov && next->ov->pin && !(best->ov && best->ov->pin))) break;
      // Nor a protected stream's (readahead windows, a warm-up's units held
      // for their job): those are readers' next units, evicted unread for
      // another reader's part-read unit, and the waste stopped readahead
      // (NoteReadaheadOutcome). A tester's trace of 2 loader workers
      // streaming 48 shards of 64 MiB in 128 KiB pieces, 2 epochs, 256 MiB:
      // 38.9 s modeled, 307 MiB of windows evicted unread, now 15.7 s and
      // none (lru-readahead 15.9 s). Passed over, not the end of the search:
      // a stream over its quota comes first whatever its value.
      tried[n] = next;
      if (ByteValue(next) >= kWindowValue) continue;
      if (auto w = next->module->PickVictim(); w && !PartRead(*w)) {
        v = std::move(w);
        best = next;
        found = true;
        break;
      }
    }
    // No other stream gives: the stream's next victim but it, if its module
    // can say (keep). At an epoch's start keep holds only units not read
    // yet, and the part-read miss, the newest of them, was its victim at
    // once, fetched again for each piece: zip-format items read tail first,
    // then in 128 KiB pieces (a review's trace, 100 MiB: up to 9 fetches of
    // one unit in an epoch).
    // Nor its next but one: every unit a reader is part-way through is
    // passed over (one thread reading 8 TFRecord shards in turn in 256 KiB
    // records: the shard directory's keep stream held the epoch plan's
    // unread units, its read ones were the 8 readers' current units, each
    // evicted between its pieces; a reviewer's trace, 48 shards of 64 MiB,
    // 256 MiB cache: 11,125 MiB fetched, lru-readahead 6,144).
    if (!found)
      if (auto w = best->module->PickVictimSkipping([&](const std::string& id) { return PartRead(id); })) v = std::move(w);
  }
  // A module that lost track of its units: fall back to any stream.
  for (auto it = groups_.begin(); !v && it != groups_.end(); ++it) v = it->second->module->PickVictim();
  if (v) last_victim_ = *v;  // OnRemove notes a ghost for it
  return v;
}

bool PolicyEngine::AdmitInsert(std::string_view path, bool prefetched, uint64_t now_us) {
  // Prefetched units are admitted: the plans that fetch them hold room for
  // them (and their waste is counted when they leave).
  if (prefetched) return true;
  now_us_ = std::max(now_us_, now_us);
  if (!mode_igt_) return !groups_[std::string(kAllStream)]->module->InsertIsFirstVictim(UnitMeta{.prefetched = false, .now_us = now_us_});
  MaybeAllocate(now_us_);
  // A dead version would go first (PickVictim), not this unit.
  if (FrontOldUnit()) return true;
  auto it = files_.find(std::string(path));
  // A file a reader is part-way through a unit of (read in pieces: the
  // kernel's 128 KiB requests): its next piece reads the rest. Declined
  // (keep: a miss is its own first victim), each piece fetched the unit
  // again: a reviewer's trace of 3,000 files of 256 KiB read in 2 pieces,
  // one epoch, cache 50%, fetched 960 MiB of 750.
  if (it != files_.end() && PartReadActive(it->second)) return true;
  if (it == files_.end() || !it->second.group) return true;
  Group* g = it->second.group;  // a miss's unit joins its file's stream (OnInsert)
  if (g->units == 0 || VictimGroup() != g) return true;
  // Items read again within an epoch (several jobs), or one file read
  // uniformly at random (no items, no visits: NewVisit): every cached unit
  // is as likely to be read as the miss, which is not admitted in place of
  // one. A one-file stream's misses were: keep spares its 16 newest read
  // units (a visit's), so each miss was written and the 17th newest
  // deleted (a tester's memmap of 3,000 random 4 KiB windows of a 300 MiB
  // file, 64 MiB cache: about 2 unit files written and 2 deleted per read,
  // evicted bytes = fetched bytes, 0 declined).
  if (g->label == kRandom && (g->multi_pass || g->live_items() < 2)) return false;
  // As OnInsert tells the module: a straggler's read for the previous epoch
  // leaves the unit not read in this one (kept, not the first victim).
  return !g->module->InsertIsFirstVictim(
      UnitMeta{.prefetched = PrevEpochRead(it->second, g), .now_us = now_us_});
}

Status PolicyEngine::SetPolicyFile(PolicyFile pf) {
  if (!mode_igt_) return Status::InvalidArgument("the policy file applies to policy igt only");
  if (auto s = pf.Validate("policy"); !s.ok()) return s;
  // A prefetch module whose name and parameters are unchanged is kept, with
  // its state (every reader's readahead window: rebuilt, each scan went
  // back to its initial window at every reload; a review's finding).
  std::array<std::unique_ptr<PrefetchPolicy>, 4> pre;
  for (size_t i = 0; i < 4; ++i) {
    const ModuleSpec& was = opts_.policy_file.patterns[i].prefetch;
    const ModuleSpec& now = pf.patterns[i].prefetch;
    if (prefetch_[i] && was.name == now.name && was.params == now.params) continue;
    auto m = MakePrefetchPolicy(now.name, now.params);
    if (!m) return m.error();
    pre[i] = std::move(*m);
  }
  const PolicyFile old = std::move(opts_.policy_file);  // old overrides stay valid in the loop
  opts_.policy_file = std::move(pf);
  NoteQuotas();
  for (size_t i = 0; i < 4; ++i)
    if (pre[i]) prefetch_[i] = std::move(pre[i]);
  for (auto& [key, g] : groups_) {
    if (g->window || g->user_warm) continue;  // its own module (fifo), not the file's
    // Overrides point into the new file (a stream keyed by a prefix that is
    // no longer overridden becomes an ordinary stream until re-read).
    g->ov = nullptr;
    for (const auto& o : opts_.policy_file.overrides)
      if (OverrideKey(o) == key) g->ov = &o;
    g->forced = g->ov && g->ov->pattern >= 0;
    SyncPool(g.get());
    const int label = g->forced ? g->ov->pattern : g->label;
    // A stream whose module is unchanged keeps it, and with it its state
    // (LFU counts, LRU order, what keep saw read this epoch).
    const ModuleSpec& was = old.patterns[g->label].eviction;
    const ModuleSpec& now = opts_.policy_file.patterns[label].eviction;
    if (label == g->label && was.name == now.name && was.params == now.params) continue;
    SetLabel(g.get(), label, /*rebuild=*/true);
  }
  // Files under an override (one this file adds or widens) join its stream
  // now, and their cached units with them: a new pin or quota applies to
  // what is cached, not only to what is read again. (Readahead units not read
  // yet stay in the window stream, as on an insert, unless never_cache.)
  // The overrides' streams are made first: a new one may add the files of
  // its listing to files_, which must not happen while walking it.
  struct Joining {
    FileRec* f;
    const std::string* path;
    const PathOverride* ov;
  };
  std::vector<Joining> joining;
  std::map<const PathOverride*, Group*> ov_groups;  // the policy file's order (one vector)
  for (auto& [path, f] : files_) {
    const PathOverride* ov = OverrideFor(path);
    if (!ov || f.gone || (f.group && f.group->ov == ov)) continue;
    joining.push_back({&f, &path, ov});
    ov_groups.emplace(ov, nullptr);
  }
  for (auto& [ov, g] : ov_groups) {
    const std::string key = OverrideKey(*ov);
    auto it = groups_.find(key);
    g = it != groups_.end() ? it->second.get() : GetGroup(key, ov->pattern >= 0 ? ov->pattern : kUnknown, ov);
  }
  // In scan order (files_ is a hash map): the new streams' items, and so
  // what their epoch prefetching proposes first, do not follow its buckets.
  std::sort(joining.begin(), joining.end(), [](const Joining& a, const Joining& b) { return a.f->rank < b.f->rank; });
  for (const auto& j : joining) {
    Group* to = ov_groups.at(j.ov);
    // Read in its old stream's epoch: read in the new one's too, as when
    // files join a new directory stream (GetGroup). Else a reload half way
    // through an epoch left the new stream's count short by every read so
    // far, the case of the straggler rule's misfire.
    const bool read = j.f->group && j.f->group != to && j.f->epoch_read != 0 &&
                      j.f->epoch_read == j.f->group->epoch + 1;
    JoinGroup(*j.f, j.path, to);
    if (read && j.f->group == to) {
      MarkReadThisEpoch(*j.f, to);
      to->NoteReadFile(*j.path);
    }
  }
  const bool moved = !joining.empty();
  if (moved)
    for (auto& [id, u] : units_) {
      const FileRec& f = files_.at(*u.path);
      // Held units (readahead, warm-up) stay where they wait, but not under
      // a never_cache prefix: those go to its stream, the first victims.
      const bool held = u.g->window || u.g->user_warm;
      // A unit read in its old stream's epoch is read in the new one's (as
      // its file, above): keep's first victims, not kept ahead of the items
      // this epoch has still to read.
      if (f.group && f.group != u.g && f.group->ov && (!held || f.group->ov->never_cache))
        MoveUnit(id, u, f, nullptr, /*read=*/u.consumed && u.read_stamp == u.g->epoch + 1);
    }
  ++reloads_;
  return Status::Ok();
}

void PolicyEngine::NewVersion(std::string_view path, std::string_view etag) {
  if (etag.empty()) return;
  // Listed again. Its gone_order_ entry stays: reaching the front, it takes
  // the name out again (early, if it is gone again by then).
  if (WasGone(path)) gone_names_.erase(std::string(path));
  auto fit = files_.find(std::string(path));
  if (fit == files_.end()) return;
  FileRec& f = fit->second;
  const uint64_t v = std::hash<std::string_view>{}(etag) | 1;
  f.gone = false;  // listed again: a new object of the name (f.version is kGoneVersion, never v)
  if (f.version == v) {
    // Already current: units of other versions not queued yet (inserted as
    // such, or restored at start-up after a unit of this one) are queued now.
    if (mode_igt_)
      for (Unit* u = f.units; u; u = u->file_next)
        if (u->old_version && !u->queued_old) {
          u->queued_old = true;
          old_units_.push_back(*u->id);
        }
    return;
  }
  const bool unknown = f.version == 0;
  f.version = v;
  // No version known yet and nothing cached: no unit to mark (the common
  // case, a file a plan named before its first insert; a walk here would
  // make a scan of N new files cost N x units).
  if (unknown && f.cached_units == 0) return;
  f.cached_units = 0;
  f.cached_bytes = 0;
  f.fill_whole_us = 0;  // the new version may be filled at once
  // Only this file's units (a walk of every cached unit here made a
  // re-uploaded data set cost files x units).
  for (Unit* u = f.units; u; u = u->file_next) {
    u->old_version = u->version != v;
    if (u->old_version) {
      if (!u->queued_old && mode_igt_) {
        u->queued_old = true;
        old_units_.push_back(*u->id);
      }
      continue;
    }
    ++f.cached_units;
    f.cached_bytes += u->bytes;
  }
}

bool PolicyEngine::Contains(const std::string& id) const { return units_.count(id) != 0; }
uint64_t PolicyEngine::cached_units() const { return units_.size(); }

EngineStats PolicyEngine::Stats() const {
  EngineStats s;
  s.cached_bytes = cached_bytes_;
  s.cached_units = units_.size();
  s.prefetch_bytes = prefetch_bytes_;
  s.prefetch_hit_bytes = prefetch_hit_bytes_;
  s.prefetch_wasted_bytes = prefetch_wasted_bytes_;
  s.allocations = allocations_;
  s.victim_stream_switches = switches_;
  s.policy_reloads = reloads_;
  if (mode_igt_) s.profile = opts_.policy_file.profile;
  s.readers = reader_end_.size();
  s.files = files_.size();
  s.ghosts = ghost_entries_;
  s.gone_files = gone_files_;
  for (const auto& [k, g] : groups_) {
    StreamStats st;
    st.key = DisplayKey(g->key);
    st.label = kPatternNames[g->label];
    st.eviction = g->module_name;
    st.cached_bytes = g->bytes;
    st.cached_units = g->units;
    st.read_bytes = g->read_bytes;
    st.hit_bytes = g->hit_bytes;
    st.prefetch_bytes = g->prefetch_bytes;
    st.prefetch_hit_bytes = g->prefetch_hit_bytes;
    st.prefetch_wasted_bytes = g->wasted_bytes;
    st.evicted_bytes = g->evicted_bytes;
    st.epoch = g->epoch;
    st.items = g->live_items();
    st.warming = std::find(warming_.begin(), warming_.end(), g.get()) != warming_.end();
    st.multi_pass = g->multi_pass;
    st.item_bytes = g->ws_bytes;
    st.value = g->value;
    if (g->ov) st.override_prefix = g->ov->prefix;
    s.streams.push_back(std::move(st));
  }
  for (const auto& o : opts_.policy_file.overrides) {
    OverrideStats os{o.prefix, o.pattern >= 0 ? kPatternNames[o.pattern] : "", o.pin, o.never_cache,
                     o.quota_bytes, 0};
    for (const auto& [k, g] : groups_)
      if (g->ov && g->ov->prefix == o.prefix) os.cached_bytes += g->bytes;
    s.overrides.push_back(std::move(os));
  }
  std::sort(s.streams.begin(), s.streams.end(), [](const StreamStats& a, const StreamStats& b) {
    return a.cached_bytes != b.cached_bytes ? a.cached_bytes > b.cached_bytes : a.key < b.key;
  });
  return s;
}

nlohmann::json ToJson(const EngineStats& s) {
  nlohmann::json j;
  j["cached_bytes"] = s.cached_bytes;
  j["cached_units"] = s.cached_units;
  j["prefetch_bytes"] = s.prefetch_bytes;
  j["prefetch_hit_bytes"] = s.prefetch_hit_bytes;
  j["prefetch_wasted_bytes"] = s.prefetch_wasted_bytes;
  j["allocations"] = s.allocations;
  j["victim_stream_switches"] = s.victim_stream_switches;
  j["policy_reloads"] = s.policy_reloads;
  j["profile"] = s.profile;
  j["readers"] = s.readers;
  j["files"] = s.files;
  j["ghosts"] = s.ghosts;
  j["gone_files"] = s.gone_files;
  auto& arr = j["streams"] = nlohmann::json::array();
  for (const auto& st : s.streams) {
    arr.push_back({{"stream", st.key}, {"pattern", st.label}, {"eviction", st.eviction},
                   {"cached_bytes", st.cached_bytes}, {"cached_units", st.cached_units},
                   {"read_bytes", st.read_bytes}, {"hit_bytes", st.hit_bytes},
                   {"prefetch_bytes", st.prefetch_bytes}, {"prefetch_hit_bytes", st.prefetch_hit_bytes},
                   {"prefetch_wasted_bytes", st.prefetch_wasted_bytes}, {"evicted_bytes", st.evicted_bytes},
                   {"epoch", st.epoch}, {"items", st.items}, {"item_bytes", st.item_bytes},
                   {"value", st.value}, {"warming", st.warming}, {"multi_pass", st.multi_pass}});
    if (st.override_prefix) arr.back()["override"] = *st.override_prefix;
  }
  auto& ovs = j["overrides"] = nlohmann::json::array();
  for (const auto& o : s.overrides) {
    ovs.push_back({{"prefix", o.prefix}, {"pin", o.pin}, {"never_cache", o.never_cache},
                   {"quota_bytes", o.quota_bytes}, {"cached_bytes", o.cached_bytes}});
    if (!o.pattern.empty()) ovs.back()["pattern"] = o.pattern;
  }
  return j;
}

}  // namespace igt::engine
