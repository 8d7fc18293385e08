#include "src/stream/stream_config.h"

#include <fmt/format.h>

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
  if (c.heat_half_life_ms < 1) return bad("heat_half_life_ms", "must be >= 1");
  return Status::Ok();
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
       "maintenance also re-tests streams with new samples whose last test is older (0 = never)"},
      {"stream.hysteresis_tests", "uint32", s(d.hysteresis_tests), "tests",
       "consecutive agreeing tests needed to change a label"},
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
