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
// the others, furthest along first (the slowest reader reaches them last):
// Belady's order for readers that go forward. The unit a reader is at is
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
    if (!consumed_.empty()) {
      // The furthest along behind the slowest reader, if any.
      uint64_t slowest = UINT64_MAX;
      for (const Cursor& c : cursors_)
        if (c.moved) slowest = std::min(slowest, c.pos);
      if (slowest < UINT64_MAX) {
        static const std::string kLeast;
        // The first one at it or past it; behind it, not one a reader that
        // has not moved yet is at (one starting a pass, or after a jump).
        auto it = std::make_reverse_iterator(consumed_.lower_bound({slowest, &kLeast}));
        for (size_t looked = 0; it != consumed_.rend() && looked++ <= cursors_.size(); ++it)
          if (!AtCursor(it->first)) return *it->second;
      }
      // Then the furthest along that no reader is at.
      size_t looked = 0;
      for (auto it = consumed_.rbegin(); it != consumed_.rend() && looked++ <= cursors_.size(); ++it)
        if (!AtCursor(it->first)) return *it->second;
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
  // A reader is at `pos`: one that read there within kAtCursorReads reads
  // of the stream. A cursor a pass left at the end of a file (a later pass
  // advances the cursor furthest along at or behind its read, which may be
  // the old one) otherwise held its unit ahead of the live reader's
  // readahead until it expired.
  bool AtCursor(uint64_t pos) const {
    for (const Cursor& c : cursors_)
      if (c.pos == pos && reads_ - c.seen <= std::max<uint64_t>(kAtCursorReads, 2 * cursors_.size())) return true;
    return false;
  }
  // A read at `pos`: advances the cursor furthest along at or behind it, or
  // starts one.
  void NoteRead(uint64_t pos) {
    ++reads_;
    std::erase_if(cursors_, [&](const Cursor& c) { return reads_ - c.seen > kCursorIdleReads; });
    size_t best = cursors_.size();
    for (size_t i = 0; i < cursors_.size(); ++i)
      if (cursors_[i].pos <= pos && (best == cursors_.size() || cursors_[i].pos > cursors_[best].pos)) best = i;
    if (best == cursors_.size()) {
      if (cursors_.size() >= kMaxCursors)
        cursors_.erase(std::min_element(cursors_.begin(), cursors_.end(),
                                        [](const Cursor& a, const Cursor& b) { return a.seen < b.seen; }));
      cursors_.push_back({pos, reads_, false});
      return;
    }
    cursors_[best] = {pos, reads_, cursors_[best].moved || pos > cursors_[best].pos};
    // Two readers at one position are one cursor from here on.
    for (size_t i = 0; i < cursors_.size(); ++i)
      if (i != best && cursors_[i].pos == pos) {
        cursors_[best].moved = cursors_[best].moved || cursors_[i].moved;
        cursors_.erase(cursors_.begin() + static_cast<std::ptrdiff_t>(i));
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
  struct Cursor {
    uint64_t pos;   // position of the reader's last read
    uint64_t seen;  // reads_ then
    bool moved;     // went forward at least once: a reader, not a lone read
  };
  // Readers of one stream told apart: 8 ranks of a multi-GPU job loading
  // one checkpoint, their loader threads (each a reader to FUSE). A new
  // cursor beyond them replaces the one seen least recently, and the units
  // of readers not told apart are taken as behind everyone: with 8 cursors,
  // 40 readers 1 MiB apart in a 128 MiB file with a 64 MiB cache fetched
  // 1,385 MiB in `igtcache sim`.
  static constexpr size_t kMaxCursors = 256;
  static constexpr uint64_t kCursorIdleReads = 1024;
  static constexpr uint64_t kAtCursorReads = 64;
  std::vector<Cursor> cursors_;
  uint64_t reads_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeEvictBehindPolicy() { return std::make_unique<EvictBehindPolicy>(); }

}  // namespace igt::policies
