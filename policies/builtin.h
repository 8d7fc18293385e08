#pragma once
// Factories of the built-in policy modules, wired into the name registries
// (registry.cc), plus the parameter helper they share. Internal to the
// policies module; callers use MakeEvictionPolicy / MakePrefetchPolicy from
// igtcache/policy.h.

#include <memory>
#include <string>
#include <vector>

#include "igtcache/policy.h"

namespace igt::policies {

// One accepted parameter: name, default, allowed range (inclusive).
struct ParamSpec {
  const char* key;
  double default_value;
  double min, max;
  bool integer = true;  // a count or a seed: 2.5 is refused, not cut to 2
};

// Resolves `given` against `specs` (defaults for absent keys). An unknown key
// or a value out of range gives InvalidArgument naming `<module>.params.<key>`.
Result<std::vector<double>> ResolveParams(std::string_view module, const PolicyParams& given,
                                          std::initializer_list<ParamSpec> specs);

std::unique_ptr<EvictionPolicy> MakeLruPolicy();
std::unique_ptr<EvictionPolicy> MakeFifoPolicy();
// Least frequently used; ties by least recent. half_life_ms > 0 ages counts
// (halved every half-life of the caller's clock): frequency with ageing.
std::unique_ptr<EvictionPolicy> MakeLfuPolicy(double half_life_ms);
// JuiceFS-like: sample two random units, evict the less recently used one.
std::unique_ptr<EvictionPolicy> MakeTwoRandomPolicy(uint64_t seed);
// Keep what is cached (uniform streams), epoch-aware.
std::unique_ptr<EvictionPolicy> MakeKeepPolicy();
// Evict-behind with a kept prefix (sequential streams).
std::unique_ptr<EvictionPolicy> MakeEvictBehindPolicy();

std::unique_ptr<PrefetchPolicy> MakeNoPrefetch();
std::unique_ptr<PrefetchPolicy> MakeFixedReadahead(uint64_t units, uint64_t max_units);
std::unique_ptr<PrefetchPolicy> MakeAdaptiveReadahead(uint64_t initial_units, uint64_t max_units,
                                                      uint64_t max_next_files);
std::unique_ptr<PrefetchPolicy> MakeEpochPrefetch(uint64_t per_read, uint64_t readahead_units);

}  // namespace igt::policies
