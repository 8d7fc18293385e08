#pragma once
// Factories of the built-in eviction policies, wired into the name registry
// (registry.cc). Internal to the policies module; callers use
// MakeEvictionPolicy(name) from igtcache/policy.h.

#include <memory>

#include "igtcache/policy.h"

namespace igt::policies {

std::unique_ptr<EvictionPolicy> MakeLruPolicy();
std::unique_ptr<EvictionPolicy> MakeFifoPolicy();

}  // namespace igt::policies
