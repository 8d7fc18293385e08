#pragma once
// Pattern detectors of DESIGN.md sec. 5: pure functions over one node's window
// of child accesses. The AccessStreamTree calls Detect() on every re-test;
// tests and benchmarks call it directly. See docs/DETECTION.md for the
// statistics and why each threshold is what it is.
//
// Tests, in order (each at alpha/2, Bonferroni, so that a stream with no
// pattern is falsely labelled with probability <= alpha):
//   1. sequential: per reader (pid), the fraction of steps that go to a "next"
//      child (forward by 1..gap), one-sided binomial test against chance
//      p0 = gap/N, plus a floor on the fraction;
//   2. uniformity: Pearson chi-square when n/N >= 2, else a one-sided
//      collision test on the number of distinct children (normal
//      approximation with continuity correction when Var[D] >= 9, else a
//      Poisson tail on the number of repeats). Rejected => tested again
//      over the D children read, for a directory, if each of them expects
//      >= 5 samples and D >= 8 (uniform over a subset: random); rejected
//      there too => skewed,
//      with a Zipf exponent fitted by matching the observed collision rate.
//   3. unknown: too few samples, too few children, or "next" steps that beat
//      chance but are below the floor (a mix of scan and something else).
// Thread-safety: pure functions. Their scratch buffers are locals, not
// thread_local: they run on FUSE worker threads, which come and go, and a
// thread_local with a destructor makes glibc abort the process when it
// cannot allocate to register that destructor (`ulimit -v`); a local's
// failed allocation is a bad_alloc the caller's guard takes.

#include <cstdint>
#include <span>
#include <string_view>

#include "src/stream/stream_config.h"

namespace igt::stream {

enum class Label : uint8_t { kUnknown = 0, kSequential, kRandom, kSkewed };
// "unknown" | "sequential" | "random" | "skewed" (the JSON "pattern" values).
std::string_view LabelName(Label l);

// Which test produced `statistic` / `p_value`.
// kChiSquareSubset: chi-square over the D children read, after the test over
// all N rejected (uniform over a subset).
enum class TestKind : uint8_t { kNone = 0, kBinomial, kChiSquare, kCollision, kChiSquareSubset };
std::string_view TestKindName(TestKind k);

// Successor oracle: is child `b` within `gap` children after child `a` in the
// node's child order (block index, or directory listing order)?
struct SuccessorFn {
  const void* ctx = nullptr;
  bool (*fn)(const void* ctx, uint32_t a, uint32_t b, uint32_t gap) = nullptr;
  bool operator()(uint32_t a, uint32_t b, uint32_t gap) const { return fn(ctx, a, b, gap); }
};
// For children numbered in order (blocks): 0 < b - a <= gap.
SuccessorFn IndexSuccessor();

struct DetectInput {
  std::span<const uint32_t> children;  // child id per sample, oldest first
  std::span<const uint32_t> pids;      // reader per sample (same length)
  uint64_t n_children = 0;             // N: children the node has (listing size)
  SuccessorFn successor;
  // Fit the Zipf exponent of a skewed stream here (~tens of microseconds).
  // The tree passes false and fits lazily when the stream is reported.
  bool fit_zipf = true;
  // Test uniformity again over the children read when it is rejected over
  // all N (Detect). The tree sets it for directories: a training split is
  // a subset of a directory's files read evenly. Not for the blocks of a
  // file: a hot region read evenly is still a hot region (a random label
  // would value its cold units as much as the hot ones).
  bool subset_uniform = false;
  // The blocks of a file: when too few are read for the sequential test
  // (3 or fewer), the stream is unknown, not random by the uniformity test
  // alone (Detect).
  bool blocks = false;
  // The stream's samples so far fit in one window (a new stream): a file's
  // blocks stepped to mostly by readers' first samples are then unknown,
  // not random (Detect). Past it, many short-lived readers reading at
  // random (a process per lookup) are random as before.
  bool first_window = false;
};

struct DetectResult {
  Label label = Label::kUnknown;
  TestKind test = TestKind::kNone;  // test behind statistic/p_value
  double statistic = 0;   // binomial: fraction of "next" steps; chi-square: X^2;
                          // collision: z score of distinct count (negative = repeats)
  double p_value = 1;
  double zipf_s = 0;      // skewed only: fitted Zipf exponent (if fit_zipf)
  double collision_prob = 0;  // sum c(c-1) / n(n-1): unbiased estimate of sum p_i^2
  uint64_t n_children = 0;    // N the tests used
  // Both tests, for diagnostics.
  uint32_t steps = 0, next_steps = 0;
  uint32_t own_steps = 0;  // of steps, those from the reader's own previous sample
  // A file's blocks read in short runs at scattered offsets (rows of a few
  // blocks each, read at random): its "next" steps are the runs' insides,
  // not a scan (Detect, "Short runs").
  bool short_runs = false;
  // The same with fewer jumps (a window of a few dozen samples): enough to
  // hold off a cut to "sequential" (AccessStreamTree), not to make one.
  bool short_runs_seen = false;
  // Runs of a few blocks in the window, whichever way the jumps between
  // them go: a chance "scan" of rows among the newest samples has them, a
  // scan has a run per reader (AccessStreamTree).
  bool runs_short = false;
  double seq_p = 1;
  bool seq_tested = false;  // enough children read for the sequential test (p0 < 0.5)
  double uniform_stat = 0, uniform_p = 1;
  TestKind uniform_test = TestKind::kNone;
  uint32_t distinct = 0;
};

DetectResult Detect(const DetectInput& in, const StreamConfig& cfg);

// Var[D], D the distinct children among n uniform draws from N >= 2, in a
// form that keeps its precision for N up to 2^64 (the textbook
// N(N-1)q2 + Nq1 - N^2 q1^2 cancels terms of ~N^2 and lost it all past
// N ~ 1e8 blocks, a 700 GB file at 4 KiB units).
double DistinctVariance(double n, double big_n);

// Zipf exponent s such that a Zipf(s) law over N items has collision
// probability sum p_i^2 == `collision_prob`; in [0, 4].
double FitZipfByCollisions(double collision_prob, uint64_t n_items);

}  // namespace igt::stream
