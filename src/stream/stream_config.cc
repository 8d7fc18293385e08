#include "src/stream/stream_config.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>

namespace igt::stream {

Status Validate(const StreamConfig& c) {
  auto bad = [](const char* key, const std::string& what) {
    return Status::InvalidArgument(fmt::format("stream.{}: {}", key, what));
  };
  if (!(c.alpha > 0.0 && c.alpha < 0.5))
    return bad("alpha", fmt::format("must be in (0, 0.5), got {}", c.alpha));
  if (c.min_samples < 8) return bad("min_samples", fmt::format("must be >= 8, got {}", c.min_samples));
  if (c.window < 16 || c.window > (1u << 20))
    return bad("window", fmt::format("must be in [16, 1048576], got {}", c.window));
  if (c.min_samples > c.window)
    return bad("min_samples", fmt::format("must be <= stream.window ({}), got {}", c.window, c.min_samples));
  if (c.retest_every_samples < 1)
    return bad("retest_every_samples", "must be >= 1");
  if (c.hysteresis_tests < 1) return bad("hysteresis_tests", "must be >= 1");
  if (c.sequential_gap < 1 || c.sequential_gap > 64)
    return bad("sequential_gap", fmt::format("must be in [1, 64], got {}", c.sequential_gap));
  if (!(c.min_sequential_ratio > 0.0 && c.min_sequential_ratio <= 1.0))
    return bad("min_sequential_ratio", fmt::format("must be in (0, 1], got {}", c.min_sequential_ratio));
  if (!(c.mixed_sequential_ratio > 0.0 && c.mixed_sequential_ratio <= c.min_sequential_ratio))
    return bad("mixed_sequential_ratio",
               fmt::format("must be in (0, stream.min_sequential_ratio], got {}", c.mixed_sequential_ratio));
  if (c.unit_bytes < 4096) return bad("unit_bytes", fmt::format("must be >= 4096, got {}", c.unit_bytes));
  if (c.memory_cap_bytes < (64u << 10))
    return bad("memory_cap_bytes", fmt::format("must be >= 65536, got {}", c.memory_cap_bytes));
  // Both are multiplied by 1000 (us) where they are used: bounded so that
  // cannot wrap (a zero half-life in us divided by zero).
  constexpr uint64_t kMaxMs = uint64_t{1} << 40;  // ~35 years
  if (c.heat_half_life_ms < 1 || c.heat_half_life_ms > kMaxMs)
    return bad("heat_half_life_ms", fmt::format("must be in [1, {}], got {}", kMaxMs, c.heat_half_life_ms));
  if (c.idle_prune_ms > kMaxMs)
    return bad("idle_prune_ms", fmt::format("must be at most {}, got {}", kMaxMs, c.idle_prune_ms));
  return Status::Ok();
}

Status SetParam(StreamConfig& c, std::string_view key, const std::string& value) {
  std::string_view f = key;
  if (f.starts_with("stream.")) f.remove_prefix(7);
  auto bad = [&](const char* what) {
    return Status::InvalidArgument(fmt::format("stream.{}: '{}' {}", f, value, what));
  };
  char* end = nullptr;
  struct U32 { std::string_view name; uint32_t StreamConfig::*m; };
  struct U64 { std::string_view name; uint64_t StreamConfig::*m; };
  struct Dbl { std::string_view name; double StreamConfig::*m; };
  static constexpr U32 kU32[] = {{"min_samples", &StreamConfig::min_samples},
                                 {"window", &StreamConfig::window},
                                 {"retest_every_samples", &StreamConfig::retest_every_samples},
                                 {"retest_period_ms", &StreamConfig::retest_period_ms},
                                 {"hysteresis_tests", &StreamConfig::hysteresis_tests},
                                 {"sequential_gap", &StreamConfig::sequential_gap}};
  static constexpr U64 kU64[] = {{"unit_bytes", &StreamConfig::unit_bytes},
                                 {"memory_cap_bytes", &StreamConfig::memory_cap_bytes},
                                 {"idle_prune_ms", &StreamConfig::idle_prune_ms},
                                 {"heat_half_life_ms", &StreamConfig::heat_half_life_ms}};
  static constexpr Dbl kDbl[] = {{"alpha", &StreamConfig::alpha},
                                 {"min_sequential_ratio", &StreamConfig::min_sequential_ratio},
                                 {"mixed_sequential_ratio", &StreamConfig::mixed_sequential_ratio}};
  auto uint = [&]() -> std::optional<uint64_t> {
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    errno = 0;
    uint64_t v = std::strtoull(value.c_str(), &end, 10);
    if (errno == ERANGE) return std::nullopt;
    return v;
  };
  for (const auto& p : kU32)
    if (f == p.name) {
      auto v = uint();
      if (!v || *v > UINT32_MAX) return bad("is not an integer in [0, 4294967295]");
      c.*p.m = static_cast<uint32_t>(*v);
      return Status::Ok();
    }
  for (const auto& p : kU64)
    if (f == p.name) {
      auto v = uint();
      if (!v) return bad("is not a non-negative integer");
      c.*p.m = *v;
      return Status::Ok();
    }
  for (const auto& p : kDbl)
    if (f == p.name) {
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') return bad("is not a number");
      c.*p.m = v;
      return Status::Ok();
    }
  return Status::InvalidArgument(fmt::format("unknown key 'stream.{}'", f));
}

std::vector<ParamDoc> StreamParamDocs() {
  StreamConfig d;
  auto s = [](auto v) { return fmt::format("{}", v); };
  return {
      {"stream.alpha", "double", s(d.alpha), "ratio",
       "significance level of the detection tests (each of the two tests uses alpha/2)"},
      {"stream.min_samples", "uint32", s(d.min_samples), "samples",
       "a stream is tested and reported once it has this many samples"},
      {"stream.window", "uint32", s(d.window), "samples",
       "ring of the last W child accesses per node; tests run on it (16 bytes per entry)"},
      {"stream.retest_every_samples", "uint32", s(d.retest_every_samples), "samples",
       "re-test a stream every K new samples"},
      {"stream.retest_period_ms", "uint32", s(d.retest_period_ms), "ms",
       "maintenance also re-tests streams with new samples whose last test is older; a labelled "
       "stream still being read, once it is 8 times older (0 = never)"},
      {"stream.hysteresis_tests", "uint32", s(d.hysteresis_tests), "tests",
       "consecutive agreeing tests needed to change a label (between random, skewed and unknown, "
       "each at least half a window of samples after the previous one)"},
      {"stream.sequential_gap", "uint32", s(d.sequential_gap), "children",
       "a step forward by at most this many children counts as 'next'"},
      {"stream.min_sequential_ratio", "double", s(d.min_sequential_ratio), "ratio",
       "minimum fraction of 'next' steps for the sequential label"},
      {"stream.mixed_sequential_ratio", "double", s(d.mixed_sequential_ratio), "ratio",
       "significant 'next' fraction at least this but below min_sequential_ratio: unknown (mixed)"},
      {"stream.unit_bytes", "uint64", s(d.unit_bytes), "bytes",
       "files larger than this are tracked at block granularity"},
      {"stream.memory_cap_bytes", "uint64", s(d.memory_cap_bytes), "bytes",
       "hard cap on the tree's memory; least recently used leaves are pruned"},
      {"stream.idle_prune_ms", "uint64", s(d.idle_prune_ms), "ms",
       "maintenance prunes nodes idle for this long (0 = never)"},
      {"stream.heat_half_life_ms", "uint64", s(d.heat_half_life_ms), "ms",
       "per-node access counters halve every this many ms"},
  };
}

}  // namespace igt::stream
