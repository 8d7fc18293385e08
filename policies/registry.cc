// Name -> factory registries of the policy modules (igtcache/policy.h).
// Fixed tables rather than static self-registration: objects in a static
// library that nothing references would be dropped by the linker.

#include <array>
#include <cmath>

#include <fmt/format.h>
#include <string_view>

#include "policies/builtin.h"

namespace igt {
namespace policies {

Result<std::vector<double>> ResolveParams(std::string_view module, const PolicyParams& given,
                                          std::initializer_list<ParamSpec> specs) {
  std::vector<double> out;
  for (const auto& s : specs) out.push_back(s.default_value);
  for (const auto& [k, v] : given) {
    size_t i = 0;
    bool found = false;
    for (const auto& s : specs) {
      if (k == s.key) {
        if (!std::isfinite(v) || v < s.min || v > s.max)
          return Err(Status::InvalidArgument(fmt::format("{}.params.{}: {} is out of range: must be in [{}, {}]",
                                                         module, k, v, s.min, s.max)));
        if (s.integer && v != std::floor(v))
          return Err(Status::InvalidArgument(fmt::format("{}.params.{}: {} is not a whole number", module, k, v)));
        out[i] = v;
        found = true;
      }
      ++i;
    }
    if (!found) {
      std::string known;
      for (const auto& s : specs) known += std::string(known.empty() ? "" : ", ") + s.key;
      return Err(Status::InvalidArgument(std::string(module) + ".params." + k + ": unknown parameter" +
                                         (known.empty() ? " (this module takes none)" : " (known: " + known + ")")));
    }
  }
  return out;
}

}  // namespace policies

namespace {

using EvictionFactory = Result<std::unique_ptr<EvictionPolicy>> (*)(const PolicyParams&);
using PrefetchFactory = Result<std::unique_ptr<PrefetchPolicy>> (*)(const PolicyParams&);

struct EvictionEntry {
  std::string_view name;
  EvictionFactory make;
};
struct PrefetchEntry {
  std::string_view name;
  PrefetchFactory make;
};

// The first entry is the default (BlockStoreOptions::eviction).
constexpr std::array kEviction{
    EvictionEntry{"lru", [](const PolicyParams& p) -> Result<std::unique_ptr<EvictionPolicy>> {
      if (auto r = policies::ResolveParams("lru", p, {}); !r) return Err(r.error());
      return policies::MakeLruPolicy();
    }},
    EvictionEntry{"fifo", [](const PolicyParams& p) -> Result<std::unique_ptr<EvictionPolicy>> {
      if (auto r = policies::ResolveParams("fifo", p, {}); !r) return Err(r.error());
      return policies::MakeFifoPolicy();
    }},
    EvictionEntry{"lfu", [](const PolicyParams& p) -> Result<std::unique_ptr<EvictionPolicy>> {
      // half_life_ms: 0 = plain LFU (the baseline); > 0 = frequency with ageing.
      auto r = policies::ResolveParams("lfu", p, {{"half_life_ms", 0, 0, 1e12, /*integer=*/false}});
      if (!r) return Err(r.error());
      return policies::MakeLfuPolicy((*r)[0]);
    }},
    EvictionEntry{"2random", [](const PolicyParams& p) -> Result<std::unique_ptr<EvictionPolicy>> {
      auto r = policies::ResolveParams("2random", p, {{"seed", 1, 0, 1e15}});
      if (!r) return Err(r.error());
      return policies::MakeTwoRandomPolicy(static_cast<uint64_t>((*r)[0]));
    }},
    EvictionEntry{"keep", [](const PolicyParams& p) -> Result<std::unique_ptr<EvictionPolicy>> {
      if (auto r = policies::ResolveParams("keep", p, {}); !r) return Err(r.error());
      return policies::MakeKeepPolicy();
    }},
    EvictionEntry{"evict-behind", [](const PolicyParams& p) -> Result<std::unique_ptr<EvictionPolicy>> {
      if (auto r = policies::ResolveParams("evict-behind", p, {}); !r) return Err(r.error());
      return policies::MakeEvictBehindPolicy();
    }},
};

constexpr std::array kPrefetch{
    PrefetchEntry{"none", [](const PolicyParams& p) -> Result<std::unique_ptr<PrefetchPolicy>> {
      if (auto r = policies::ResolveParams("none", p, {}); !r) return Err(r.error());
      return policies::MakeNoPrefetch();
    }},
    PrefetchEntry{"readahead", [](const PolicyParams& p) -> Result<std::unique_ptr<PrefetchPolicy>> {
      // units: the window (8). max_units: where it ramps to, doubling at
      // each read that continues (0 = no ramp: fixed at `units`).
      auto r = policies::ResolveParams("readahead", p, {{"units", 8, 0, 4096}, {"max_units", 0, 0, 4096}});
      if (!r) return Err(r.error());
      if ((*r)[1] != 0 && (*r)[1] < (*r)[0])
        return Err(Status::InvalidArgument("readahead.params.max_units: must be 0 or >= units"));
      return policies::MakeFixedReadahead(static_cast<uint64_t>((*r)[0]), static_cast<uint64_t>((*r)[1]));
    }},
    PrefetchEntry{"adaptive-readahead", [](const PolicyParams& p) -> Result<std::unique_ptr<PrefetchPolicy>> {
      // initial_units: window of a fresh sequential reader (2). max_units: the
      // cap the window doubles up to (64 units = 64 MiB: planned in batches
      // of half a window, that keeps 4-8 ranged GETs of up to 8 MiB in
      // flight; a cold 1 GiB read through the emulated cloud of DESIGN.md
      // sec. 8 ran at 257 MB/s with 64, 189 MB/s with 32). next_files: how many
      // following files of a listing-order scan may be fetched ahead (16).
      auto r = policies::ResolveParams("adaptive-readahead", p,
                                       {{"initial_units", 2, 1, 4096},
                                        {"max_units", 64, 1, 65536},
                                        {"next_files", 16, 0, 4096}});
      if (!r) return Err(r.error());
      if ((*r)[1] < (*r)[0])
        return Err(Status::InvalidArgument("adaptive-readahead.params.max_units: must be >= initial_units"));
      return policies::MakeAdaptiveReadahead(static_cast<uint64_t>((*r)[0]),
                                             static_cast<uint64_t>((*r)[1]),
                                             static_cast<uint64_t>((*r)[2]));
    }},
    PrefetchEntry{"epoch", [](const PolicyParams& p) -> Result<std::unique_ptr<PrefetchPolicy>> {
      // per_read: items not yet read this epoch proposed after each read (2:
      // one replaces the item just consumed, one builds a margin).
      // readahead_units: window for a read that continues within a file (2).
      auto r = policies::ResolveParams("epoch", p, {{"per_read", 2, 0, 1024}, {"readahead_units", 2, 0, 4096}});
      if (!r) return Err(r.error());
      return policies::MakeEpochPrefetch(static_cast<uint64_t>((*r)[0]), static_cast<uint64_t>((*r)[1]));
    }},
};

template <class Table>
std::string KnownNames(const Table& t) {
  std::string known;
  for (const auto& e : t) known += std::string(known.empty() ? "" : ", ") + std::string(e.name);
  return known;
}

}  // namespace

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string& name,
                                                           const PolicyParams& params) {
  for (const auto& e : kEviction)
    if (e.name == name) return e.make(params);
  return Err(Status::InvalidArgument("unknown eviction policy '" + name + "' (known: " +
                                     KnownNames(kEviction) + ")"));
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string& name) {
  return MakeEvictionPolicy(name, PolicyParams{});
}

std::vector<std::string> EvictionPolicyNames() {
  std::vector<std::string> names;
  for (const auto& e : kEviction) names.emplace_back(e.name);
  return names;
}

Result<std::unique_ptr<PrefetchPolicy>> MakePrefetchPolicy(const std::string& name,
                                                           const PolicyParams& params) {
  for (const auto& e : kPrefetch)
    if (e.name == name) return e.make(params);
  return Err(Status::InvalidArgument("unknown prefetch policy '" + name + "' (known: " +
                                     KnownNames(kPrefetch) + ")"));
}

std::vector<std::string> PrefetchPolicyNames() {
  std::vector<std::string> names;
  for (const auto& e : kPrefetch) names.emplace_back(e.name);
  return names;
}

}  // namespace igt
