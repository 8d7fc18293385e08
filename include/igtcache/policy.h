#pragma once
// Eviction policy interface used by the BlockStore to pick victims.
//
// A policy tracks cache units by an opaque id (the unit's index key) and their
// size. The BlockStore calls the hooks under its own lock, so a policy need
// not be thread-safe. The adaptive, stream-aware policies of DESIGN.md sec. 6
// plug in behind the same interface; `lru` is the foundation's default.
// Policies are created by name (MakeEvictionPolicy), like RocksDB plug-ins.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "igtcache/status.h"

namespace igt {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  // A unit entered the cache (or was found in the index at start-up; then
  // `last_access_us` orders it among the others, 0 for a fresh insert).
  virtual void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) = 0;
  // A cached unit was read.
  virtual void OnAccess(const std::string& id) = 0;
  // A unit left the cache for any reason (eviction, corruption, invalidation).
  virtual void OnRemove(const std::string& id) = 0;
  // The next unit to evict, without removing it (the store calls OnRemove once
  // it is gone). nullopt when the policy tracks nothing.
  virtual std::optional<std::string> PickVictim() = 0;
  virtual size_t size() const = 0;
};

// "lru" (default), "fifo". Unknown names give InvalidArgument listing the known ones.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string& name);
std::vector<std::string> EvictionPolicyNames();

}  // namespace igt
