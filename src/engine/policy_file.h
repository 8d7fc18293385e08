#pragma once
// PolicyFile: the policy YAML (config key `policy.file`, docs/POLICIES.md):
// which prefetch and eviction module each access pattern uses, with
// parameters; the space allocator's period and hysteresis; per-path
// overrides (force a pattern, pin a prefix, never cache a prefix, a quota
// for a prefix); and named profiles to start from.
//
//   profile: training             # optional; the other keys refine it
//   patterns:
//     sequential: {prefetch: {name: adaptive-readahead, params: {max_units: 64}},
//                  eviction: {name: evict-behind}}
//     random:     {prefetch: {name: epoch}, eviction: {name: keep}}
//     skewed:     {prefetch: {name: none}, eviction: {name: lfu, params: {half_life_ms: 60000}}}
//     unknown:    {prefetch: {name: readahead, params: {units: 2}}, eviction: {name: lru}}
//   allocation: {period_ms: 1000, hysteresis: 0.1}
//   overrides:
//     - {prefix: "models/", pattern: sequential, pin: true, quota: 20G}
//     - {prefix: "tmp/", never_cache: true}
//
// Errors are InvalidArgument "<origin>: <key>: <what is wrong>", naming the
// key (e.g. "overrides[1].quota"). Plain values; thread-safety: copy them.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "igtcache/policy.h"
#include "igtcache/status.h"

namespace igt::engine {

struct ModuleSpec {
  std::string name;
  PolicyParams params;
};

struct PatternPolicy {
  ModuleSpec prefetch;
  ModuleSpec eviction;
};

// Index into PolicyFile::patterns: the stream::Label values.
enum PatternIndex : size_t { kUnknownIdx = 0, kSequentialIdx = 1, kRandomIdx = 2, kSkewedIdx = 3 };
inline constexpr std::array<const char*, 4> kPatternNames = {"unknown", "sequential", "random", "skewed"};

struct PathOverride {
  // A path relative to the mount root ("models/"; "" = everything), matched
  // by whole components (Covers).
  std::string prefix;
  int pattern = -1;            // forced label (PatternIndex), -1 = detected
  bool pin = false;            // never evicted while anything else can be
  bool never_cache = false;    // units under it are not admitted
  uint64_t quota_bytes = 0;    // 0 = no quota; above it the prefix is evicted first
  bool had_leading_slash = false;  // written "/x" in the file: taken as "x" (PolicyWarnings)

  // Whether `path` (relative to the mount root) is under the prefix: "data/"
  // and "data" cover "data/x", never "database/x" or "data.csv"; "data" also
  // covers a file named "data". A plain string prefix would pin or refuse
  // those others too.
  bool Covers(std::string_view path) const {
    if (prefix.empty()) return true;
    if (!path.starts_with(prefix)) return false;
    return prefix.back() == '/' || path.size() == prefix.size() || path[prefix.size()] == '/';
  }
};

// The override that applies to `path`: the longest prefix covering it (the
// first listed of equal ones), or none. The engine's and `igtcache warm`'s.
inline const PathOverride* OverrideFor(const std::vector<PathOverride>& overrides, std::string_view path) {
  const PathOverride* best = nullptr;
  for (const auto& o : overrides)
    if (o.Covers(path) && (!best || o.prefix.size() > best->prefix.size())) best = &o;
  return best;
}

// OverrideFor over many overrides: a lookup of each prefix a path could
// have (its ancestors, with and without the '/', and itself) instead of a
// scan of them all, for every read (a tester's 20,000 overrides made every
// read ~1.7x slower, 2,000 ~1.2x). Same answer as OverrideFor. Points into
// the vector it was built from: rebuild when that changes.
class OverrideIndex {
 public:
  OverrideIndex() = default;
  OverrideIndex(const OverrideIndex&) = delete;  // its keys point into the vector it was built from
  OverrideIndex& operator=(const OverrideIndex&) = delete;
  void Build(const std::vector<PathOverride>& overrides) {
    all_ = &overrides;
    by_prefix_.clear();
    if (overrides.size() <= kScanUpTo) return;
    by_prefix_.reserve(overrides.size());
    for (const auto& o : overrides) by_prefix_.try_emplace(o.prefix, &o);  // the first of equal ones
  }
  const PathOverride* Find(std::string_view path) const {
    if (!all_) return nullptr;
    if (all_->size() <= kScanUpTo) return OverrideFor(*all_, path);
    const PathOverride* best = nullptr;  // candidates come shortest first: the last found is the longest
    auto probe = [&](std::string_view p) {
      if (auto it = by_prefix_.find(p); it != by_prefix_.end() && it->second->Covers(path)) best = it->second;
    };
    probe({});
    for (size_t i = path.find('/'); i != std::string_view::npos; i = path.find('/', i + 1)) {
      probe(path.substr(0, i));
      probe(path.substr(0, i + 1));
    }
    probe(path);
    return best;
  }

 private:
  static constexpr size_t kScanUpTo = 16;
  const std::vector<PathOverride>* all_ = nullptr;
  std::unordered_map<std::string_view, const PathOverride*> by_prefix_;
};

inline constexpr uint64_t kMaxAllocationPeriodMs = 3'600'000;  // an hour

struct PolicyFile {
  std::string profile = "training";
  std::array<PatternPolicy, 4> patterns;
  // Space allocation: stream values are recomputed every period_ms (of the
  // caller's clock); the stream giving up space changes only when another
  // one's marginal value is lower by more than `hysteresis` (relative).
  // Default: 1000 ms, 0.1
  uint64_t allocation_period_ms = 1000;
  double hysteresis = 0.1;
  std::vector<PathOverride> overrides;
  // A pattern's module named as the profile's, given without some of the
  // profile's parameters (they fall back to the module's defaults): the
  // warnings PolicyWarnings gives.
  std::vector<std::string> dropped_params;

  // Creates every module once to validate names and params.
  Status Validate(const std::string& origin) const;
};

// "training" (default), "serving", "preprocessing", "checkpoint-loading".
Result<PolicyFile> PolicyProfile(const std::string& name);
std::vector<std::string> PolicyProfileNames();

// Parses YAML text; `origin` names the file in errors. An empty document
// (nothing but comments) is the "training" profile, or an error if not
// `empty_ok` (a SIGHUP reload: PolicyFileUse).
Result<PolicyFile> ParsePolicyFile(const std::string& yaml_text, const std::string& origin, bool empty_ok = true);
// Who reads a policy file: a mount at its start or on a SIGHUP (a regular
// file only; on a SIGHUP an empty one is refused: a file being rewritten
// reads empty for a moment, and would drop every pin and never_cache), or a
// one-shot reader (`config --check`, `sim`: a pipe too).
enum class PolicyFileUse { kMount, kReload, kOnce };
// Reads and parses a file; "" gives the "training" profile.
Result<PolicyFile> LoadPolicyFile(const std::string& path, PolicyFileUse use);
// Warnings for `pf` (read from `origin`): a profile's parameters a pattern's
// module of the same name drops (PolicyFile::dropped_params); for overrides: a quota at or above
// `capacity_bytes` (the cache's size), which never applies; a prefix written
// with a leading '/', taken relative to the mount root (an absolute path of
// the mount point would match nothing).
std::vector<std::string> PolicyWarnings(const PolicyFile& pf, const std::string& origin, uint64_t capacity_bytes);

}  // namespace igt::engine
