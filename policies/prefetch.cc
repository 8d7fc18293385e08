// Prefetch modules (igtcache/policy.h PrefetchPolicy):
//   none                no prefetching (random and skewed streams)
//   readahead           window of `units` after a read that continues the
//                       reader's previous read or starts a file, ramping up
//                       to `max_units` while reads continue (the
//                       lru-readahead baseline; small readahead for unknown)
//   adaptive-readahead  sequential streams: a per-file window that doubles
//                       while reads stay sequential (initial_units ..
//                       max_units), is reset by a jump, and halves when a
//                       unit it prefetched is evicted unread; planned in
//                       batches (when less than half the window is left
//                       ahead of the reader); at the end of a
//                       file whose directory is scanned in listing order it
//                       runs on into the next files
//   epoch               uniform streams over a known item set: propose items
//                       not yet read this epoch (they will all be read before
//                       the epoch ends; at most the first item_max_units of
//                       each), plus a small readahead inside a file
// Per-file state is bounded: at kMaxTracked files the table is cleared (a
// stream that is still active rebuilds its window in a few reads).
// Thread-safety: none (the engine's lock).

#include <algorithm>
#include <string>
#include <unordered_map>

#include "policies/builtin.h"

namespace igt::policies {
namespace {

constexpr size_t kMaxTracked = 16384;  // per-file windows kept (~64 B each)
constexpr int kSequential = 1;          // igt::stream::Label::kSequential

uint64_t UnitsOf(uint64_t size, uint64_t unit) { return size == 0 ? 1 : (size + unit - 1) / unit; }

// One past the last byte read: of this read, or of the reader's run if it
// got further (a late read of a scan whose requests came out of order).
uint64_t ReadEnd(const PrefetchContext& c) { return std::max(c.offset + std::max<uint64_t>(c.length, 1), c.run_end); }

// Units [end_unit+1, end_unit+window] of the file just read, clipped at EOF.
// Returns the window not covered because the file ended.
uint64_t AheadInFile(const PrefetchContext& c, uint64_t window, std::vector<PrefetchRange>& out) {
  const uint64_t n = UnitsOf(c.file_size, c.unit_bytes);
  const uint64_t end = ReadEnd(c);
  const uint64_t last_read = std::min(n - 1, (end - 1) / c.unit_bytes);
  if (window == 0) return 0;
  const uint64_t first = last_read + 1;
  if (first >= n) return window;
  const uint64_t last = std::min(n - 1, last_read + window);
  out.push_back({std::string(c.path), c.file_size, first, last});
  return window - (last - first + 1);
}

// At most `window` units, and none past the unit where the reader's run is
// expected to end (PrefetchContext::run_bytes_left).
uint64_t WithinRun(const PrefetchContext& c, uint64_t window) {
  if (c.run_bytes_left == UINT64_MAX) return window;
  if (c.run_bytes_left == 0) return 0;
  const uint64_t end = ReadEnd(c);
  const uint64_t last_read = (end - 1) / c.unit_bytes;
  const uint64_t last_run = (end - 1 + std::min(c.run_bytes_left, UINT64_MAX - end)) / c.unit_bytes;
  return std::min(window, last_run - last_read);
}

class NoPrefetch final : public PrefetchPolicy {
 public:
  std::string_view name() const override { return "none"; }
  void Plan(const PrefetchContext&, std::vector<PrefetchRange>&) override {}
};

class FixedReadahead final : public PrefetchPolicy {
 public:
  FixedReadahead(uint64_t units, uint64_t max_units) : units_(units), max_(std::max(units, max_units)) {}
  std::string_view name() const override { return "readahead"; }
  // The next `units` after every read that continues: each read exposes
  // about one new unit, which the executor fetches as its own GET, on
  // connections of their own. Planning whole windows in batches instead (a
  // few multi-unit GETs) was tried on 2026-11-24 and made this baseline
  // weaker in scripts/eval.sh (shards at 10%: byte hit ratio 0.465 -> 0.335,
  // model loading 0.558 -> 0.448): with bandwidth per connection, one
  // multi-unit GET delivers its last unit later than as many 1-unit GETs in
  // parallel. Kept as it is.
  // With max_units above units the window ramps as mountpoint-s3's and the
  // kernel's do: it doubles at each read that continues, up to max_units,
  // and a jump (or a new file) starts it over at `units`.
  void Plan(const PrefetchContext& c, std::vector<PrefetchRange>& out) override {
    uint64_t w = units_;
    if (max_ > units_) {
      if (windows_.size() >= kMaxTracked) windows_.clear();
      // Per reader and file: a second loader starting the file must not
      // reset the window of one far into it.
      uint64_t& cur = windows_[std::to_string(c.pid) + ':' + std::string(c.path)];
      cur = c.continues && cur ? std::min(max_, cur * 2) : units_;
      w = cur;
    }
    if (c.continues || c.offset == 0) AheadInFile(c, w, out);
  }

 private:
  const uint64_t units_, max_;
  std::unordered_map<std::string, uint64_t> windows_;  // "pid:path" -> window (ramping only)
};

class AdaptiveReadahead final : public PrefetchPolicy {
 public:
  AdaptiveReadahead(uint64_t initial, uint64_t max, uint64_t next_files)
      : initial_(initial), max_(max), next_files_(next_files) {}
  std::string_view name() const override { return "adaptive-readahead"; }
  void Plan(const PrefetchContext& c, std::vector<PrefetchRange>& out) override {
    if (windows_.size() >= kMaxTracked) windows_.clear();
    const bool dir_scan = c.dir_label == kSequential;
    std::string key(c.path);
    auto it = windows_.find(key);
    const uint64_t last_read = (ReadEnd(c) - 1) / c.unit_bytes;
    if (dir_scan) NoteScanDepth(c, last_read);
    // A read that does not continue its reader's last one still goes along
    // the scan if the file is labelled sequential and the read falls inside
    // the window planned last (several threads of one scan). Anywhere else
    // it is a jump, even in a file labelled sequential: a loader that
    // switches to faulting at random must not get a full window per fault
    // while the label catches up.
    bool inside = false;
    if (it != windows_.end()) {
      const Window& p = it->second;
      inside = p.planned_end > last_read && last_read + 1 + p.units >= p.planned_end;
    }
    const bool along = c.continues || (c.file_label == kSequential && inside);
    Window w;
    uint64_t ahead_cap = UINT64_MAX;  // units ahead in this file at most
    if (dir_scan && (it == windows_.end() || (!along && c.offset == 0))) {
      // The next file of a listing-order scan (a first visit, or a new one
      // of a file read before): the scan goes on, so its window grows, as
      // a file's does while its reads go on. Before, a file inherited the
      // scan's window as it was, which grew only inside files: a scan of
      // one-unit files stayed 2 files ahead, each a cold GET behind the
      // reader (scripts/bench_process_scan.sh: 300 files of 64 KiB on the
      // emulated cloud took 3.5 s labelled sequential against 2.2 s
      // labelled random), and a new visit started over at initial_units.
      // Not right after a readahead unit was evicted unread (OnWasted): the
      // halved window holds for that file.
      w.units = std::min(max_, std::max(initial_, scan_hold_ ? scan_window_ : scan_window_ * 2));
      scan_hold_ = false;
      // Ahead in this file only as deep as the scan reads its files (below).
      const uint64_t depth = ScanDepth(c.pid, false);
      ahead_cap = depth > last_read + 1 ? depth - (last_read + 1) : 0;
    } else if (it == windows_.end()) {
      w.units = initial_;
    } else if (along) {
      w = it->second;
      // Grows while the reads go on, unless a unit it prefetched was evicted
      // unread since its last batch (OnWasted): the halved window then holds
      // for a batch instead of doubling back at the next read.
      if (!w.hold) w.units = std::min(max_, w.units * 2);
    } else {
      w.units = initial_;  // a jump: start over
    }
    if (!c.continues && !along) w.planned_end = 0;  // a new visit or a jump: plan afresh
    if (!(along || c.offset == 0)) {
      windows_[key] = w;
      return;
    }
    // Plan in batches, like the kernel's async readahead marker: only when
    // less than half the window is still planned ahead of the reader. Each
    // batch then exposes at least half a window of new units at once, which
    // the prefetcher turns into a few large ranged GETs in parallel instead
    // of one 1-unit GET per read. Between batches a read proposes again
    // what is planned ahead of it (the executor skips units cached or
    // queued), so units it dropped under its budget are retried.
    // Never more than a window ahead: the window is per file, and another
    // reader of the file far ahead of this one may have set planned_end.
    // In a file read at random, not past where the reader's run is expected
    // to end (a crop of an audio file read in 256 KiB pieces: its window
    // doubled at each piece, and 0.7 MiB a crop was prefetched past its end
    // and never read: a loss hunter's trace, 30 epochs of 1,000 crops,
    // 21 GiB of 40 prefetched wasted).
    const uint64_t in_run = WithinRun(c, UINT64_MAX);
    if (w.planned_end > last_read + 1 + w.units / 2) {
      windows_[key] = w;
      AheadInFile(c, std::min({w.planned_end - 1 - last_read, w.units, in_run}), out);
      return;
    }
    w.planned_end = last_read + 1 + std::min(w.units, ahead_cap);
    w.hold = false;
    windows_[key] = w;
    uint64_t left = w.units;
    if (in_run < w.units) {
      AheadInFile(c, in_run, out);
      left = 0;
    } else if (ahead_cap >= w.units) {
      left = AheadInFile(c, w.units, out);
    } else {
      if (ahead_cap > 0) AheadInFile(c, ahead_cap, out);
      left -= ahead_cap;
    }
    if (dir_scan) {
      scan_window_ = w.units;
      if (left > 0 && next_files_ > 0 && c.next_files) {
        const uint64_t depth = ScanDepth(c.pid, true);
        for (const auto& f : c.next_files(c.path, next_files_)) {
          if (left == 0) break;
          const uint64_t n = std::min({left, UnitsOf(f.size, c.unit_bytes), std::max<uint64_t>(1, depth)});
          out.push_back({f.path, f.size, 0, n - 1});
          left -= n;
        }
      }
    }
  }
  // How deep a listing-order scan reads its files, per reader: the units it
  // had read of the file it left for the next one (all of them if it read
  // to the end); a scan's next files are proposed that deep, and a next
  // file read ahead only that deep. A scan that reads each file's header
  // only (open, read 16 KiB, close: a tool reading a dataset's schemas)
  // had whole next files prefetched: 200 files of 1-8 MiB at a mount's
  // root, 712 MiB fetched in `igtcache sim`, lru 200. Per reader: one depth
  // for the module let a shard scan beside the header scan (each shard
  // read whole) set it back to whole files at each shard it left, and each
  // header's file was read ahead 2 units at its first read, never read:
  // 62 of the readahead share's 64 units at 256 MiB, held for good, every
  // later plan cut to a unit (sim test "a header reader beside a shard
  // scan ...": 14.8 s modeled).
  void NoteScanDepth(const PrefetchContext& c, uint64_t last_read) {
    if (readers_.size() >= kMaxTracked) readers_.clear();
    ScanReader& r = readers_[c.pid];
    if (r.path != c.path) {
      if (!r.path.empty()) r.depth = r.to_end ? UINT64_MAX : r.max_unit + 1;
      r.path.assign(c.path);
      r.max_unit = 0;
      r.to_end = false;
    }
    r.max_unit = std::max(r.max_unit, last_read);
    r.to_end = r.to_end || c.offset + c.length >= c.file_size;
  }
  // The reader's depth (UINT64_MAX: whole files) once it left a file; before
  // that, whole files, or with `provisional` as deep as it has read the
  // file it is in (so far the only hint).
  uint64_t ScanDepth(uint32_t pid, bool provisional) const {
    auto it = readers_.find(pid);
    if (it == readers_.end()) return UINT64_MAX;
    const ScanReader& r = it->second;
    if (r.depth != 0 || !provisional || r.to_end) return r.depth ? r.depth : UINT64_MAX;
    return r.max_unit + 1;
  }
  void OnWasted(std::string_view path) override {
    auto it = windows_.find(std::string(path));
    if (it != windows_.end()) {
      it->second.units = std::max(initial_, it->second.units / 2);
      it->second.hold = true;
    }
    scan_window_ = std::max(initial_, scan_window_ / 2);
    scan_hold_ = true;
  }

 private:
  struct Window {
    bool hold = false;         // wasted since the last batch: no growth until the next one
    uint64_t units = 0;        // current window
    uint64_t planned_end = 0;  // one past the last unit of the last batch
  };
  const uint64_t initial_, max_, next_files_;
  std::unordered_map<std::string, Window> windows_;  // path -> window
  uint64_t scan_window_ = 0;  // window of the current listing-order scan
  bool scan_hold_ = false;    // wasted since: the next file does not grow it
  struct ScanReader {
    std::string path;       // the file it reads
    uint64_t max_unit = 0;  // the furthest unit it read of it
    bool to_end = false;    // it read the file's last byte
    uint64_t depth = 0;     // units it read of the last file it left (UINT64_MAX: all); 0: none left yet
  };
  std::unordered_map<uint32_t, ScanReader> readers_;  // by pid (NoteScanDepth)
};

class EpochPrefetch final : public PrefetchPolicy {
 public:
  EpochPrefetch(uint64_t per_read, uint64_t readahead) : per_read_(per_read), readahead_(readahead) {}
  std::string_view name() const override { return "epoch"; }
  void Plan(const PrefetchContext& c, std::vector<PrefetchRange>& out) override {
    if (c.continues) AheadInFile(c, WithinRun(c, readahead_), out);
    if (per_read_ == 0 || !c.unread_items) return;
    for (const auto& f : c.unread_items(per_read_)) {
      uint64_t units = UnitsOf(f.size, c.unit_bytes);
      if (c.item_max_units > 0) units = std::min(units, c.item_max_units);
      out.push_back({f.path, f.size, 0, units - 1});
    }
  }

 private:
  const uint64_t per_read_, readahead_;
};

}  // namespace

std::unique_ptr<PrefetchPolicy> MakeNoPrefetch() { return std::make_unique<NoPrefetch>(); }
std::unique_ptr<PrefetchPolicy> MakeFixedReadahead(uint64_t units, uint64_t max_units) {
  return std::make_unique<FixedReadahead>(units, max_units);
}
std::unique_ptr<PrefetchPolicy> MakeAdaptiveReadahead(uint64_t initial_units, uint64_t max_units,
                                                      uint64_t max_next_files) {
  return std::make_unique<AdaptiveReadahead>(initial_units, max_units, max_next_files);
}
std::unique_ptr<PrefetchPolicy> MakeEpochPrefetch(uint64_t per_read, uint64_t readahead_units) {
  return std::make_unique<EpochPrefetch>(per_read, readahead_units);
}

}  // namespace igt::policies
