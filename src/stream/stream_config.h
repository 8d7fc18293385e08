#pragma once
// StreamConfig: every tunable of the AccessStreamTree and its detectors
// (DESIGN.md sec. 5). The config module maps YAML keys `stream.<field>` onto
// these fields one to one; StreamParamDocs() lists key, unit, default and help
// for each so that defaults, --help and docs come from one place.
// Ownership: plain value. Thread-safety: plain value, copy it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "igtcache/status.h"

namespace igt::stream {

struct StreamConfig {
  // Significance level of the detection tests. The two tests run on a node
  // (sequential, uniformity) each use alpha/2 (Bonferroni), so a stream with
  // no pattern gets a false label with probability at most alpha per test.
  // Default: 0.05
  double alpha = 0.05;

  // A node is tested (and reported) only once it has this many samples.
  // Default: 32
  uint32_t min_samples = 32;

  // Window: the ring of the last W child accesses each node keeps; the tests
  // run on this window. 16 bytes per entry. Default: 256
  uint32_t window = 256;

  // Re-test a node every K new samples once it has min_samples. Default: 16
  uint32_t retest_every_samples = 16;

  // Maintain() also re-tests a node with new samples whose last test is older
  // than this (streams that went quiet still get a final label); a labelled
  // stream that is still being read, once its last test is 8 times older.
  // 0 = never.
  // Default: 1000
  uint32_t retest_period_ms = 1000;

  // Hysteresis: a label changes only after this many consecutive tests agree
  // on the new label (the first label out of "unknown" is taken at once).
  // Between random, skewed and unknown a test votes only once half the
  // window is new since the previous vote (overlapping windows are not
  // independent evidence).
  // Default: 2
  uint32_t hysteresis_tests = 2;

  // Sequential: a step counts as "next" if it moves forward by at most this
  // many children (next block, next file in listing order, allowing a small
  // gap). Default: 2
  uint32_t sequential_gap = 2;

  // Sequential: besides beating chance, at least this fraction of a reader's
  // steps must be "next". Default: 0.7
  double min_sequential_ratio = 0.7;

  // Mixed: when the "next" steps beat chance significantly and make up at
  // least this fraction but less than min_sequential_ratio, the stream is
  // part scan, part something else: the tests disagree and the label is
  // unknown. Default: 0.25
  double mixed_sequential_ratio = 0.25;

  // Cache unit: files larger than this are tracked at block granularity
  // (block i = bytes [i*unit, (i+1)*unit)). Default: 1048576 (1 MiB)
  uint64_t unit_bytes = 1 << 20;

  // Hard cap on the tree's accounted memory (nodes, names, rings). When a new
  // node or ring growth would exceed it, the least recently used leaves are
  // pruned down to 90% of the cap; if that is not possible the access is
  // counted as dropped. Default: 67108864 (64 MiB)
  uint64_t memory_cap_bytes = 64ull << 20;

  // Maintain() prunes nodes not accessed for this long. 0 = never.
  // Default: 600000 (10 min)
  uint64_t idle_prune_ms = 600000;

  // Per-node access counters ("heat") halve every this many ms. Default: 60000
  uint64_t heat_half_life_ms = 60000;
};

// Checks ranges; the message names the field (`stream.<field>`) and what is
// allowed.
Status Validate(const StreamConfig& c);

// Sets the field named by `key` ("stream.alpha" or "alpha") from text; the
// message names the key. Ranges are checked by Validate().
Status SetParam(StreamConfig& c, std::string_view key, const std::string& value);

struct ParamDoc {
  std::string key;            // YAML key, e.g. "stream.alpha"
  std::string type;           // "double" | "uint32" | "uint64"
  std::string default_value;  // as text
  std::string unit;           // "", "samples", "ms", "bytes", "ratio", "children", "tests"
  std::string help;
};

// One entry per StreamConfig field, in declaration order.
std::vector<ParamDoc> StreamParamDocs();

}  // namespace igt::stream
