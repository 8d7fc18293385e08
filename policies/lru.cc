// lru: evict the least recently used unit. O(1) per hook (list + hash map,
// see ordered_list.h). Units restored at start-up are ordered by their
// persisted last-access time, so the LRU order survives a restart.

#include "policies/builtin.h"
#include "policies/ordered_list.h"

namespace igt::policies {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    list_.Insert(id, bytes, last_access_us);
  }
  void OnAccess(const std::string& id) override { list_.MoveToBack(id); }
  void OnRemove(const std::string& id) override { list_.Erase(id); }
  std::optional<std::string> PickVictim() override { return list_.Front(); }
  size_t size() const override { return list_.size(); }

 private:
  OrderedUnitList list_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace igt::policies
