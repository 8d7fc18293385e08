#pragma once
// OrderedUnitList: the container shared by the list-based eviction policies
// (lru, fifo). A doubly linked list of (id, bytes, order stamp) plus a hash map
// id -> list position, so insert/move/remove/victim are O(1).
//
// The front of the list is the next victim, the back the most recently
// inserted (or, for LRU, used) unit. Each node carries an order stamp: units
// restored at start-up arrive with their persisted last-access time and are
// placed among the others by it (oldest first to evict); a fresh insert or a
// move-to-back gets the largest stamp seen so far, so it sorts after every
// restored unit. When restored units arrive in ascending time order (what the
// BlockStore does) each insert is O(1); out-of-order stamps cost a walk from
// the front.
//
// Ownership: owns its nodes. Thread-safety: none (the caller's lock).

#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

namespace igt::policies {

class OrderedUnitList {
 public:
  OrderedUnitList() = default;
  // The list points at map_'s keys: a copy would point at another map's.
  OrderedUnitList(const OrderedUnitList&) = delete;
  OrderedUnitList& operator=(const OrderedUnitList&) = delete;

  // Inserts `id` (or re-inserts it, replacing size and position). A zero
  // `stamp` means "now": after every unit tracked so far.
  void Insert(const std::string& id, uint64_t bytes, uint64_t stamp) {
    Erase(id);
    auto m = map_.try_emplace(id).first;
    try {
      if (stamp == 0 || list_.empty() || stamp >= list_.back().stamp) {
        if (stamp == 0) stamp = max_stamp_;
        max_stamp_ = std::max(max_stamp_, stamp);
        m->second = list_.insert(list_.end(), Node{&m->first, bytes, stamp});
        return;
      }
      // Out of order: find the first node with a larger stamp (ties keep
      // arrival order) and insert before it.
      auto it = list_.begin();
      while (it != list_.end() && it->stamp <= stamp) ++it;
      m->second = list_.insert(it, Node{&m->first, bytes, stamp});
    } catch (...) {
      map_.erase(m);  // no entry without its node
      throw;
    }
  }

  // Moves `id` to the back (most recently used); no-op if unknown.
  void MoveToBack(const std::string& id) {
    auto m = map_.find(id);
    if (m == map_.end()) return;
    m->second->stamp = max_stamp_;
    list_.splice(list_.end(), list_, m->second);
  }

  void Erase(const std::string& id) {
    auto m = map_.find(id);
    if (m == map_.end()) return;
    list_.erase(m->second);
    map_.erase(m);
  }

  std::optional<std::string> Front() const {
    if (list_.empty()) return std::nullopt;
    return *list_.front().id;
  }

  size_t size() const { return map_.size(); }

 private:
  struct Node {
    const std::string* id;  // the key in map_ (stable): one copy of each id
    uint64_t bytes;
    uint64_t stamp;  // persisted last-access time (us) or max_stamp_ at insert
  };
  std::list<Node> list_;  // front = next victim
  std::unordered_map<std::string, std::list<Node>::iterator> map_;
  // Largest stamp seen; what "now" means for units without a time of their own.
  uint64_t max_stamp_ = 0;
};

}  // namespace igt::policies
