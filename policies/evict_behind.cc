// evict-behind: the eviction module of sequential streams (DESIGN.md sec. 6).
//
// A scan reads each unit once per pass, so a consumed unit is worth nothing
// until the scan repeats, and a prefetched unit not yet read is about to be
// used. Victims: consumed units first, the one furthest along the scan
// (highest UnitMeta::position) first; then not-yet-read units, furthest ahead
// first. Taking consumed units from the far end keeps a prefix of the scan:
// when a scan larger than the cache repeats, the prefix (c bytes of D) hits on
// every pass, c/D, where LRU gets 0. A single pass loses nothing by it.
//
// Several readers of one stream (model loaders started a few seconds apart):
// a consumed unit ahead of a slower reader will be read again in this pass,
// one behind every reader only in a later pass. So consumed units at or
// behind the slowest reader go first (furthest along first, as above), then
// the others, the one furthest ahead of the reader behind it first (that
// reader reaches it last): Belady's order for readers going forward at one
// pace. It was the furthest along the file first, which is the same for
// readers that all started at the front, but threads each scanning their
// own slice of a file lost the units the later slices' readers had just
// fetched, and the finished slices near the front stayed: 96 threads, 512
// MiB, a 256 MiB cache, 858 MiB fetched in `igtcache sim` (lru 607), now
// 599 (with the detector's own-steps rule, docs/DETECTION.md). The unit a reader is at is
// kept until no other unit can go, unread ones included: a reader part-way
// through it reads it next. Read in pieces smaller than a unit (the
// kernel's 128 KiB readahead requests, a dd of 64 KiB blocks), a unit taken
// as soon as its first piece was read was fetched again for each piece: a
// black-box test saw 3 passes over a 48 MiB file fetch 191 MiB live, more
// than lru's 144, and one pass over 64 MiB with 64 KiB reads fetch 302 MiB
// in `igtcache sim`. Readers are not named here: a
// reader is a cursor over positions, advanced by each read (a hit, or a
// demand insert) at or past it; a read behind every cursor starts a new one,
// which counts only once it has moved forward (a header re-read at offset 0
// is not a reader). Cursors idle for kCursorIdleReads reads of the stream
// are dropped; units handed over or restored (UnitMeta::replay) are not
// reads. Before, the kept prefix was what three model loaders had all
// passed: (c) in docs/EVALUATION.md at 10 / 25% cache 0.619 / 0.817 of its
// bytes from the cache, now 0.640 / 0.853.
// Named readers: the policy engine names each read's reader (OnReaderAt);
// once two or more read the stream, cursors are theirs, each moved by its
// own reads (Active()). Told apart by position, a reader starting ahead of
// another took that one's cursor (the nearest at or behind its read), and
// the other's unit lost its cursor between its pieces: 32 threads each
// scanning a slice of 64 MiB with a 16 MiB cache fetched 105 MiB in
// `igtcache sim` (lru 64), now 77.
// One reader going forward: a victim taken when it inserts is the unit
// before the one it is at. A victim taken while it re-reads the kept prefix
// (another stream needs space) is the prefix unit behind it, not the
// prefix's far end, which it reads sooner; the kept set then shifts, with
// about as many hits per pass.
// Thread-safety: none (the caller's lock).

#include <algorithm>
#include <set>
#include <unordered_map>
#include <vector>

#include "policies/builtin.h"

namespace igt::policies {
namespace {

class EvictBehindPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "evict-behind"; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    // Without metadata, order by arrival.
    Put(id, ++arrivals_, true);
  }
  void OnInsertUnit(const std::string& id, uint64_t bytes, uint64_t last_access_us,
                    const UnitMeta& meta) override {
    ++arrivals_;
    Put(id, meta.position, !meta.prefetched);
    if (!meta.prefetched && !meta.replay) NoteRead(meta.position);  // a reader's miss
  }
  void OnReaderAt(const ReaderRead& r) override {
    Cursors& cs = named_;
    ++cs.reads;
    cs.Expire();
    Cursor* c = nullptr;
    for (Cursor& x : cs.v)
      if (x.reader == r.reader) c = &x;
    if (!c) {
      cs.Add({.pos = r.last, .seen = cs.reads, .moved = false, .reader = r.reader, .top = r.last, .top_part = r.last_part});
      c = &cs.v.back();
    }
    // Going forward it is at the read's last unit, going back (an mmap
    // window's pieces, top first) at its first; it is kept only part-read
    // (a reader that ended on a unit's end is done with it: a thread that
    // finished its slice held its last unit until the cursor expired).
    const bool forward = r.last >= c->pos;
    const uint64_t position = forward ? r.last : r.first;
    c->moved = c->moved || position > c->pos;
    // A jump forward past its furthest unit (an mmap's next readahead
    // window, sent top first) leaves that unit part-read: its rest comes
    // last in the new window. Kept as where the reader is, until then.
    if (position > c->top) {
      // (A step of one unit is a scan's, not a jump: holding the unit
      // behind on every such step, readers of 64 KiB pieces each kept two
      // units: 96 readers 64 KiB apart, 1,430 -> 2,042 MiB in sim.)
      c->held = position - c->top > 1 && c->top_part ? c->top : kNone;
      c->top = position;
      c->top_part = r.last_part;
    }
    if (position == c->held) c->held = kNone;
    c->pos = position;
    c->part = forward ? r.last_part : r.first_part;
    c->seen = cs.reads;
  }
  void OnAccess(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    NoteRead(it->second.position);
    if (it->second.consumed) return;
    unread_.erase({it->second.position, &it->first});
    it->second.consumed = true;
    consumed_.insert({it->second.position, &it->first});
  }
  void OnRemove(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    (it->second.consumed ? consumed_ : unread_).erase({it->second.position, &it->first});
    map_.erase(it);
  }
  std::optional<std::string> PickVictim() override {
    const Cursors& cs = Active();
    if (!consumed_.empty()) {
      // Where readers are (moved cursors), in order.
      std::vector<uint64_t> at;
      for (const Cursor& c : cs.v)
        if (c.moved) at.push_back(c.pos);
      std::sort(at.begin(), at.end());
      at.erase(std::unique(at.begin(), at.end()), at.end());
      static const std::string kLeast;
      // The highest consumed unit at or above `lo` and below `hi` that no
      // reader is at (looking at a few: the ones readers are at are few).
      auto top_below = [&](uint64_t lo, uint64_t hi) -> const Entry* {
        auto it = std::make_reverse_iterator(consumed_.lower_bound({hi, &kLeast}));
        for (size_t looked = 0; it != consumed_.rend() && it->first >= lo && looked++ <= kLookPerGap; ++it)
          if (!cs.At(it->first)) return &*it;
        return nullptr;
      };
      if (!at.empty()) {
        // Behind every reader, furthest along first.
        if (const Entry* e = top_below(0, at.front())) return *e->second;
        // Then the one furthest ahead of the reader behind it.
        const Entry* best = nullptr;
        uint64_t best_d = 0;
        for (size_t i = 0; i < at.size(); ++i) {
          const Entry* e = top_below(at[i], i + 1 < at.size() ? at[i + 1] : UINT64_MAX);
          if (e && (!best || e->first - at[i] > best_d)) {
            best = e;
            best_d = e->first - at[i];
          }
        }
        if (best) return *best->second;
      }
      // Then the furthest along that no reader is at.
      size_t looked = 0;
      for (auto it = consumed_.rbegin(); it != consumed_.rend() && looked++ <= cs.v.size(); ++it)
        if (!cs.At(it->first)) return *it->second;
    }
    if (!unread_.empty()) return *unread_.rbegin()->second;
    // Last, the units readers are at.
    if (!consumed_.empty()) return *consumed_.rbegin()->second;
    return std::nullopt;
  }
  size_t size() const override { return map_.size(); }

 private:
  struct Slot {
    uint64_t position;
    bool consumed;
  };
  // (position, id); the id pointer breaks ties and addresses the map key.
  using Entry = std::pair<uint64_t, const std::string*>;
  struct Less {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.first != b.first) return a.first < b.first;
      return *a.second < *b.second;
    }
  };
  // A read at `pos`, readers told apart by position: advances the cursor
  // furthest along at or behind it, or starts one.
  void NoteRead(uint64_t pos) {
    Cursors& cs = anon_;
    ++cs.reads;
    cs.Expire();
    size_t best = cs.v.size();
    for (size_t i = 0; i < cs.v.size(); ++i)
      if (cs.v[i].pos <= pos && (best == cs.v.size() || cs.v[i].pos > cs.v[best].pos)) best = i;
    if (best == cs.v.size()) {
      cs.Add({pos, cs.reads, false});
      return;
    }
    cs.v[best] = {pos, cs.reads, cs.v[best].moved || pos > cs.v[best].pos};
    // Two readers at one position are one cursor from here on.
    for (size_t i = 0; i < cs.v.size(); ++i)
      if (i != best && cs.v[i].pos == pos) {
        cs.v[best].moved = cs.v[best].moved || cs.v[i].moved;
        cs.v.erase(cs.v.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  void Put(const std::string& id, uint64_t position, bool consumed) {
    OnRemove(id);
    auto [it, ok] = map_.emplace(id, Slot{position, consumed});
    (consumed ? consumed_ : unread_).insert({position, &it->first});
  }
  std::unordered_map<std::string, Slot> map_;
  std::set<Entry, Less> consumed_;  // rbegin() = first victim
  std::set<Entry, Less> unread_;
  uint64_t arrivals_ = 0;
  static constexpr uint64_t kNone = UINT64_MAX;
  struct Cursor {
    uint64_t pos;   // position of the reader's last read
    uint64_t seen;  // Cursors::reads then
    bool moved;     // went forward at least once: a reader, not a lone read
    uint64_t reader = 0;    // named: its name (OnReaderAt)
    uint64_t top = 0;       // named: the furthest position it read
    uint64_t held = kNone;  // named: a part-read unit it jumped past
    bool part = true;       // named: `pos` is part-read (else no unit is kept for it)
    bool top_part = false;  // named: `top` was left part-read
  };
  struct Cursors {
    std::vector<Cursor> v;
    uint64_t reads = 0;  // reads noted
    void Expire() {
      std::erase_if(v, [&](const Cursor& c) { return reads - c.seen > kCursorIdleReads; });
    }
    void Add(const Cursor& c) {
      if (v.size() >= kMaxCursors)
        v.erase(std::min_element(v.begin(), v.end(), [](const Cursor& a, const Cursor& b) { return a.seen < b.seen; }));
      v.push_back(c);
    }
    // A reader is at `pos`: one that read there within kAtCursorReads reads
    // of the stream. A cursor a pass left at the end of a file (a later
    // pass advances the cursor furthest along at or behind its read, which
    // may be the old one) otherwise held its unit ahead of the live
    // reader's readahead until it expired.
    bool At(uint64_t pos) const {
      for (const Cursor& c : v)
        if (((c.pos == pos && c.part) || c.held == pos) && Recent(c)) return true;
      return false;
    }
    bool Recent(const Cursor& c) const { return reads - c.seen <= std::max<uint64_t>(kAtCursorReads, 2 * v.size()); }
  };
  // Readers by name once two or more are (OnReaderAt): told apart by
  // position, a reader starting ahead of another took that one's cursor
  // (the nearest at or behind its read). One reader alone is followed by
  // position, which also follows an mmap's windows (read top first) well.
  const Cursors& Active() const { return named_.v.size() >= 2 ? named_ : anon_; }
  // Readers of one stream told apart: 8 ranks of a multi-GPU job loading
  // one checkpoint, their loader threads (each a reader to FUSE). A new
  // cursor beyond them replaces the one seen least recently, and the units
  // of readers not told apart are taken as behind everyone: with 8 cursors,
  // 40 readers 1 MiB apart in a 128 MiB file with a 64 MiB cache fetched
  // 1,385 MiB in `igtcache sim`.
  static constexpr size_t kMaxCursors = 256;
  static constexpr uint64_t kCursorIdleReads = 1024;
  static constexpr uint64_t kAtCursorReads = 64;
  static constexpr size_t kLookPerGap = 4;
  Cursors anon_;   // told apart by position (NoteRead)
  Cursors named_;  // by name (OnReaderAt)
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeEvictBehindPolicy() { return std::make_unique<EvictBehindPolicy>(); }

}  // namespace igt::policies
