// fifo: evict in insertion order; reads do not change the order. Units
// restored at start-up are ordered by their persisted last-access time (the
// only time the index keeps; for a unit never read it is its insert time).

#include "policies/builtin.h"
#include "policies/ordered_list.h"

namespace igt::policies {
namespace {

class FifoPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "fifo"; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    list_.Insert(id, bytes, last_access_us);
  }
  void OnAccess(const std::string&) override {}
  void OnRemove(const std::string& id) override { list_.Erase(id); }
  std::optional<std::string> PickVictim() override { return list_.Front(); }
  size_t size() const override { return list_.size(); }

 private:
  OrderedUnitList list_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeFifoPolicy() { return std::make_unique<FifoPolicy>(); }

}  // namespace igt::policies
