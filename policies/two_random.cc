// 2random: JuiceFS's default eviction. Sample two cached units uniformly at
// random and evict the one used less recently. O(1) per hook: units live in a
// vector (swap-remove) indexed by a hash map. The chosen victim is remembered
// until it is removed or touched, so PickVictim is stable between calls.
// Seeded (params.seed) so runs are reproducible. Thread-safety: none.

#include <random>
#include <unordered_map>
#include <vector>

#include "policies/builtin.h"

namespace igt::policies {
namespace {

class TwoRandomPolicy final : public EvictionPolicy {
 public:
  explicit TwoRandomPolicy(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "2random"; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    OnRemove(id);
    map_.emplace(id, Slot{ids_.size(), last_access_us ? last_access_us : ++clock_});
    if (last_access_us > clock_) clock_ = last_access_us;
    ids_.push_back(id);
  }
  void OnAccess(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    it->second.last = ++clock_;
    if (pending_ && *pending_ == id) pending_.reset();
  }
  void OnRemove(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    size_t i = it->second.index;
    if (i + 1 != ids_.size()) {
      ids_[i] = std::move(ids_.back());
      map_[ids_[i]].index = i;
    }
    ids_.pop_back();
    map_.erase(id);
    if (pending_ && *pending_ == id) pending_.reset();
  }
  std::optional<std::string> PickVictim() override {
    if (ids_.empty()) return std::nullopt;
    if (!pending_) {
      // Two distinct units (with one cached, that one).
      const size_t n = ids_.size();
      const size_t i = std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
      size_t j = i;
      if (n > 1) {
        j = std::uniform_int_distribution<size_t>(0, n - 2)(rng_);
        if (j >= i) ++j;
      }
      const std::string& a = ids_[i];
      const std::string& b = ids_[j];
      pending_ = map_[a].last <= map_[b].last ? a : b;
    }
    return pending_;
  }
  size_t size() const override { return ids_.size(); }

 private:
  struct Slot {
    size_t index;
    uint64_t last;  // recency stamp
  };
  std::mt19937_64 rng_;
  std::vector<std::string> ids_;
  std::unordered_map<std::string, Slot> map_;
  std::optional<std::string> pending_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeTwoRandomPolicy(uint64_t seed) {
  return std::make_unique<TwoRandomPolicy>(seed);
}

}  // namespace igt::policies
