// Name -> factory registry of the eviction policies (igtcache/policy.h).
// A fixed table rather than static self-registration: objects in a static
// library that nothing references would be dropped by the linker.

#include <array>
#include <string_view>

#include "policies/builtin.h"

namespace igt {
namespace {

struct Entry {
  std::string_view name;
  std::unique_ptr<EvictionPolicy> (*make)();
};

// The first entry is the default (BlockStoreOptions::eviction).
constexpr std::array kPolicies{
    Entry{"lru", &policies::MakeLruPolicy},
    Entry{"fifo", &policies::MakeFifoPolicy},
};

}  // namespace

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string& name) {
  for (const auto& e : kPolicies) {
    if (e.name == name) return e.make();
  }
  std::string known;
  for (const auto& e : kPolicies) {
    if (!known.empty()) known += ", ";
    known += e.name;
  }
  return Err(Status::InvalidArgument("unknown eviction policy '" + name + "' (known: " + known + ")"));
}

std::vector<std::string> EvictionPolicyNames() {
  std::vector<std::string> names;
  for (const auto& e : kPolicies) names.emplace_back(e.name);
  return names;
}

}  // namespace igt
