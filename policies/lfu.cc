// lfu: evict the unit with the smallest access count, ties by least recent
// use. With half_life_ms > 0 the counts age: a count decays by half every
// half-life of the caller's clock (OnAccessAt / UnitMeta::now_us), so items
// that were popular long ago give way ("frequency with ageing", the skewed
// stream module of DESIGN.md sec. 6). half_life_ms = 0 is plain LFU, the
// baseline.
//
// Ordering with ageing without touching every unit: the decayed count at
// time T of a unit last updated at t with count c is c * 2^-((T-t)/H), so
// comparing units at any common T is comparing log2(c) + t/H. That key is
// fixed between accesses and kept in an ordered set: O(log n) per hook.
// Thread-safety: none (the caller's lock).

#include <cmath>
#include <set>
#include <unordered_map>

#include "policies/builtin.h"

namespace igt::policies {
namespace {

class LfuPolicy final : public EvictionPolicy {
 public:
  explicit LfuPolicy(double half_life_ms) : half_life_us_(half_life_ms * 1000.0) {}
  std::string_view name() const override { return "lfu"; }

  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    Insert(id, last_access_us, 0);
  }
  void OnInsertUnit(const std::string& id, uint64_t bytes, uint64_t last_access_us,
                    const UnitMeta& meta) override {
    Insert(id, last_access_us, meta.now_us, meta.prior_weight);
  }
  void OnAccess(const std::string& id) override { OnAccessAt(id, 0); }
  void OnAccessAt(const std::string& id, uint64_t now_us) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    Node& n = it->second;
    set_.erase({n.key, n.seq, &it->first});
    now_us = Now(now_us);
    n.count = Decayed(n, now_us) + 1;
    n.t_us = now_us;
    n.seq = ++seq_;
    n.key = Key(n);
    set_.insert({n.key, n.seq, &it->first});
  }
  void OnRemove(const std::string& id) override {
    auto it = map_.find(id);
    if (it == map_.end()) return;
    set_.erase({it->second.key, it->second.seq, &it->first});
    map_.erase(it);
  }
  std::optional<std::string> PickVictim() override {
    if (set_.empty()) return std::nullopt;
    return *std::get<2>(*set_.begin());
  }
  size_t size() const override { return map_.size(); }
  double VictimWeight() const override {
    if (set_.empty()) return -1;
    const Node& n = map_.at(*std::get<2>(*set_.begin()));
    return Decayed(n, now_us_);
  }
  double WeightOf(const std::string& id) const override {
    auto it = map_.find(id);
    return it == map_.end() ? -1 : Decayed(it->second, now_us_);
  }

 private:
  struct Node {
    double count = 1;   // decayed count as of t_us
    uint64_t t_us = 0;  // time of the last update
    uint64_t seq = 0;   // recency for ties
    double key = 0;
  };
  using Entry = std::tuple<double, uint64_t, const std::string*>;

  uint64_t Now(uint64_t now_us) {
    if (now_us > now_us_) now_us_ = now_us;
    return now_us_;
  }
  double Decayed(const Node& n, uint64_t now_us) const {
    if (half_life_us_ <= 0 || now_us <= n.t_us) return n.count;
    return n.count * std::exp2(-static_cast<double>(now_us - n.t_us) / half_life_us_);
  }
  double Key(const Node& n) const {
    if (half_life_us_ <= 0) return n.count;
    return std::log2(n.count) + static_cast<double>(n.t_us) / half_life_us_;
  }
  void Insert(const std::string& id, uint64_t last_access_us, uint64_t now_us, double prior = 0) {
    OnRemove(id);
    Node n;
    n.count += std::max(0.0, prior);
    n.t_us = Now(now_us ? now_us : last_access_us);
    n.seq = ++seq_;
    n.key = Key(n);
    auto [it, ok] = map_.emplace(id, n);
    set_.insert({n.key, n.seq, &it->first});
  }

  const double half_life_us_;
  std::unordered_map<std::string, Node> map_;  // node-based: key addresses are stable
  std::set<Entry> set_;                         // begin() = victim
  uint64_t seq_ = 0;
  uint64_t now_us_ = 0;  // largest clock seen
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeLfuPolicy(double half_life_ms) {
  return std::make_unique<LfuPolicy>(half_life_ms);
}

}  // namespace igt::policies
