// keep: "keep what is cached", the eviction module of uniform (random)
// streams, epoch-aware (DESIGN.md sec. 6, docs/POLICIES.md).
//
// Under uniform access every cached unit is equally likely to be read next,
// so replacing one by another gains nothing and churn only costs writes: the
// newest unit is the victim (a miss that finds the stream at its share is in
// effect not admitted), and the cached set stays put: hit ratio c/D instead of
// LRU's lower figure under epoch shuffling.
// Epochs: a unit read in the current epoch will not be read again before the
// next one, so units already read this epoch are the first victims (newest
// first); units not yet read this epoch come after. A unit inserted by a
// demand miss counts as read (it is being read); a prefetched one as not
// yet read. OnEpoch() makes every unit "not yet read".
// The newest read units are spared while there are older ones
// (kRecentUnits): a visit of an item often reads a unit twice (a parquet
// footer, then a column chunk in the same unit; a chunk's pieces), and the
// newest read unit, the victim, was the one its next read needed: a
// tester's trace of parquet-like reads (footer, then three chunks of each
// of 200 files, twice, 4 threads) with a 256 MiB cache fetched 1,479 MiB
// at 0.382 byte hit against lru's 1,222 MiB at 0.438; with 16 units
// spared, 1,313 MiB at 0.487. Those units go in their turn, oldest first,
// so the kept set stays what it was.
// Thread-safety: none (the caller's lock).

#include <iterator>
#include <list>
#include <unordered_map>

#include "policies/builtin.h"

namespace igt::policies {
namespace {

class KeepPolicy final : public EvictionPolicy {
 public:
  KeepPolicy() = default;
  // The lists point at map_'s keys: a copy would point at another map's.
  KeepPolicy(const KeepPolicy&) = delete;
  KeepPolicy& operator=(const KeepPolicy&) = delete;

  std::string_view name() const override { return "keep"; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    Put(id, /*read=*/true);
  }
  void OnInsertUnit(const std::string& id, uint64_t bytes, uint64_t last_access_us,
                    const UnitMeta& meta) override {
    Put(id, !meta.prefetched);
  }
  void OnAccess(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end() || it->second.read) return;
    read_.splice(read_.end(), unread_, it->second.pos);  // the node moves; pos stays valid
    it->second.read = true;
  }
  void OnRemove(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    (it->second.read ? read_ : unread_).erase(it->second.pos);
    map_.erase(it);
  }
  std::optional<std::string> PickVictim() override {
    return Victim([](const std::string*) { return false; });
  }
  std::optional<std::string> PickVictimSkipping(const std::function<bool(const std::string&)>& skip) override {
    return Victim([&](const std::string* u) { return skip(*u); });
  }
  size_t size() const override { return map_.size(); }
  // A demand miss counts as read: among the recent ones, spared, unless no
  // unit is read (then it is the only one). A prefetched unit is the newest
  // unread one: first only when none is read.
  bool InsertIsFirstVictim(const UnitMeta& meta) const override { return read_.empty(); }
  void OnEpoch() override {
    // Read units join the unread ones, older than any unit prefetched so far
    // this epoch (they stay cached; the prefetched ones are newest).
    // O(units read this epoch): splice keeps the moved nodes' iterators.
    for (const std::string* id : read_) map_.find(*id)->second.read = false;
    unread_.splice(unread_.begin(), read_);
  }
  // Units already read this epoch (for stats and the engine's planning).
  size_t read_count() const { return read_.size(); }

 private:
  // The lists hold the map's keys (stable addresses), not copies: each id is
  // stored once in the module (~80 B less per unit).
  using List = std::list<const std::string*>;
  struct Slot {
    bool read;
    List::iterator pos;
  };
  // PickVictim's order, passing over the units `skip` names.
  template <typename Skip>
  std::optional<std::string> Victim(const Skip& skip) const {
    auto other = [&](const std::string* id) { return !skip(id); };
    if (read_.size() > kRecentUnits)  // the newest read but kRecentUnits, then older ones
      for (auto it = std::make_reverse_iterator(std::prev(read_.end(), kRecentUnits)); it != read_.rend(); ++it)
        if (other(*it)) return **it;
    for (auto it = read_.begin(); it != read_.end(); ++it)  // the recent ones, oldest first
      if (other(*it)) return **it;
    for (auto it = unread_.rbegin(); it != unread_.rend(); ++it)
      if (other(*it)) return **it;
    return std::nullopt;
  }
  void Put(const std::string& id, bool read) {
    OnRemove(id);
    auto& l = read ? read_ : unread_;
    auto it = map_.try_emplace(id).first;
    try {
      it->second = {read, l.insert(l.end(), &it->first)};
    } catch (...) {
      map_.erase(it);  // no entry without its node
      throw;
    }
  }
  // Read units spared as the newest (the victim is the one before them).
  static constexpr size_t kRecentUnits = 16;
  List read_;    // back = newest; the victim is the newest but kRecentUnits
  List unread_;  // back = newest
  std::unordered_map<std::string, Slot> map_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeKeepPolicy() { return std::make_unique<KeepPolicy>(); }

}  // namespace igt::policies
