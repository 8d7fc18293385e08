// evict-behind: the eviction module of sequential streams (DESIGN.md sec. 6).
//
// A scan reads each unit once per pass, so a consumed unit is worth nothing
// until the scan repeats, and a prefetched unit not yet read is about to be
// used. Victims: consumed units first, the one furthest along the scan
// (highest UnitMeta::position) first; then not-yet-read units, furthest ahead
// first. Taking consumed units from the far end keeps a prefix of the scan:
// when a scan larger than the cache repeats, the prefix (c bytes of D) hits on
// every pass, c/D, where LRU gets 0. A single pass loses nothing by it.
// Thread-safety: none (the caller's lock).

#include <set>
#include <unordered_map>

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
  }
  void OnAccess(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end() || it->second.consumed) return;
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
    if (!consumed_.empty()) return *consumed_.rbegin()->second;
    if (!unread_.empty()) return *unread_.rbegin()->second;
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
  void Put(const std::string& id, uint64_t position, bool consumed) {
    OnRemove(id);
    auto [it, ok] = map_.emplace(id, Slot{position, consumed});
    (consumed ? consumed_ : unread_).insert({position, &it->first});
  }
  std::unordered_map<std::string, Slot> map_;
  std::set<Entry, Less> consumed_;  // rbegin() = first victim
  std::set<Entry, Less> unread_;
  uint64_t arrivals_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeEvictBehindPolicy() { return std::make_unique<EvictBehindPolicy>(); }

}  // namespace igt::policies
