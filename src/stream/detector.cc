#include "src/stream/detector.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/poisson.hpp>

namespace igt::stream {
namespace {

// Boost.Math must never throw on the read path: report errors as NaN/inf and
// let the callers treat a non-finite p-value as "no evidence" (p = 1).
using NoThrow = boost::math::policies::policy<
    boost::math::policies::domain_error<boost::math::policies::ignore_error>,
    boost::math::policies::overflow_error<boost::math::policies::ignore_error>,
    boost::math::policies::underflow_error<boost::math::policies::ignore_error>,
    boost::math::policies::pole_error<boost::math::policies::ignore_error>,
    boost::math::policies::evaluation_error<boost::math::policies::ignore_error>,
    boost::math::policies::promote_double<false>>;

double Clean(double p) { return std::isfinite(p) ? std::clamp(p, 0.0, 1.0) : 1.0; }

// Readers tracked separately by the sequential test. A node rarely sees more
// than a few dozen distinct pids in one window, but a file read by a job's
// ranks and their loader threads may (FUSE names the calling thread): at 64,
// 96 readers of one file in turn had their steps lost and the file was
// labelled skewed. Beyond kMaxPids the oldest slot is reused (that reader's
// next step is then not counted). The search is linear: with few readers,
// as almost always, it is short.
constexpr size_t kMaxPids = 256;
// A thread pool's threads step by the pool's size: up to this many blocks (view (c)).
constexpr uint32_t kMaxStrideBlocks = 64;
// Short runs (Detect): jumps in the window at least, and the runs' mean
// length in blocks at most (also how far back a jump goes to count).
constexpr uint32_t kShortRunMinJumps = 12;
constexpr uint32_t kShortRunSeenJumps = 4;  // DetectResult::short_runs_seen
constexpr uint64_t kShortRunBlocks = 12;
constexpr uint32_t kRestartBlocks = 2;  // a jump to a block below: back to the file's start

// Var[D] at or above this uses the normal approximation for the distinct
// count (3 standard deviations are >= 9 children wide, where the continuity
// corrected normal tail is accurate). Below it D is near one of its ends and
// the rarer event is counted with a Poisson tail instead: repeats when n << N
// (sparse), empty children when n is a few times N (dense).
constexpr double kNormalMinVariance = 9.0;

// Pearson chi-square is used when every child expects at least this many
// samples; below it, the collision test. Under the null every child expects
// the same count, and for equal expected counts the chi-square law holds down
// to about 1-2 per cell (Roscoe and Byars 1971, Koehler and Larntz 1980); the
// textbook 5 is for unequal ones. At 5, Zipf(0.6) over 60 children (n/N =
// 4.3) fell to the collision test and was found in 85 of 200 windows; at 2,
// the accuracy classes' Zipf streams are all labelled at 256 samples, and
// uniform ones are called skewed at the rate alpha/2 allows
// (docs/DETECTION.md).
constexpr double kChiSquareMinExpected = 2.0;

// Uniform over a subset: when uniformity over all N children is rejected, a
// window whose D distinct children each expect at least kSubsetMinExpected
// samples (then a child of the subset is missing from the window with
// probability e^-5 < 1%: the subset is seen whole) and that are at least
// kSubsetMinChildren, or at least 4/5 of the N, is tested again over those D
// alone. Reads spread evenly
// over part of a directory (a training split listed in a manifest, some of
// the classes of an image folder) are random, not skewed: no child is
// hotter than another.
constexpr uint64_t kSubsetMinChildren = 8;
constexpr double kSubsetMinExpected = 5.0;

// H(N, s) = sum_{i=1..N} i^-s: exact for the first kExactTerms terms, then
// the midpoint integral, whose error per term is about s(s+1) i^(-s-2) / 24:
// summed beyond i = 64 it is below 1e-4 of H for s in [0, 8].
constexpr uint64_t kExactTerms = 64;
double Harmonic(uint64_t n, double s) {
  static const std::array<double, kExactTerms + 1> kLog = [] {
    std::array<double, kExactTerms + 1> a{};
    for (size_t i = 1; i <= kExactTerms; ++i) a[i] = std::log(static_cast<double>(i));
    return a;
  }();
  double h = 0;
  uint64_t m = std::min(n, kExactTerms);
  for (uint64_t i = 1; i <= m; ++i) h += std::exp(-s * kLog[i]);
  if (n > m) {
    double a = m + 0.5, b = n + 0.5;
    if (std::abs(s - 1.0) < 1e-9) h += std::log(b / a);
    else h += (std::pow(b, 1 - s) - std::pow(a, 1 - s)) / (1 - s);
  }
  return h;
}

// The samples' children sorted: how many times each was read (`counts`),
// and sum c(c-1) over them (ordered pairs of samples on the same child).
double CountChildren(const std::vector<uint32_t>& sorted, std::vector<uint32_t>& counts) {
  counts.clear();
  double pairs = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    const uint32_t c = static_cast<uint32_t>(j - i);
    counts.push_back(c);
    pairs += static_cast<double>(c) * (c - 1);
    i = j;
  }
  return pairs;
}

// The uniformity test of n samples over big_n children, `counts` those of
// the children read (r.uniform_*).
void UniformTest(const std::vector<uint32_t>& counts, uint64_t big_n, size_t n, DetectResult& r) {
  if (big_n < 2 || n < 2) return;
  const uint64_t distinct = counts.size();
  const double nd = static_cast<double>(n), bn = static_cast<double>(big_n);
  const double expected = nd / bn;
  if (expected >= kChiSquareMinExpected) {
    double x2 = static_cast<double>(big_n - distinct) * expected;
    for (uint32_t c : counts) x2 += (c - expected) * (c - expected) / expected;
    boost::math::chi_squared_distribution<double, NoThrow> chi(bn - 1);
    r.uniform_test = TestKind::kChiSquare;
    r.uniform_stat = x2;
    r.uniform_p = Clean(boost::math::cdf(boost::math::complement(chi, x2)));
    return;
  }
  const double q1 = std::exp(nd * std::log1p(-1.0 / bn));
  const double mean_d = bn * (1 - q1);
  const double var_d = DistinctVariance(nd, bn);
  const double d = static_cast<double>(distinct);
  r.uniform_test = TestKind::kCollision;
  r.uniform_stat = var_d > 0 ? (d - mean_d) / std::sqrt(var_d) : 0.0;
  if (var_d >= kNormalMinVariance) {
    boost::math::normal_distribution<double, NoThrow> z;
    r.uniform_p = Clean(boost::math::cdf(z, (d + 0.5 - mean_d) / std::sqrt(var_d)));
  } else if (nd - mean_d <= bn - mean_d) {
    // Sparse (n << N): repeats R = n - D are nearly Poisson(n - E[D]).
    const double repeats = nd - d, lambda = std::max(nd - mean_d, 1e-12);
    if (repeats < 0.5) {
      r.uniform_p = 1;
    } else {
      boost::math::poisson_distribution<double, NoThrow> po(lambda);
      r.uniform_p = Clean(boost::math::cdf(boost::math::complement(po, repeats - 1)));
    }
  } else {
    // Dense (n a few times N): the empty children U = N - D are nearly
    // Poisson(N (1-1/N)^n); skew leaves more of them empty.
    const double empty = bn - d, lambda = std::max(bn * q1, 1e-12);
    if (empty < 0.5) {
      r.uniform_p = 1;
    } else {
      boost::math::poisson_distribution<double, NoThrow> po(lambda);
      r.uniform_p = Clean(boost::math::cdf(boost::math::complement(po, empty - 1)));
    }
  }
}

bool IndexSucc(const void*, uint32_t a, uint32_t b, uint32_t gap) { return b > a && b - a <= gap; }

}  // namespace

std::string_view LabelName(Label l) {
  switch (l) {
    case Label::kSequential: return "sequential";
    case Label::kRandom: return "random";
    case Label::kSkewed: return "skewed";
    case Label::kUnknown: break;
  }
  return "unknown";
}

std::string_view TestKindName(TestKind k) {
  switch (k) {
    case TestKind::kBinomial: return "binomial";
    case TestKind::kChiSquare: return "chi_square";
    case TestKind::kCollision: return "collision";
    case TestKind::kChiSquareSubset: return "chi_square_subset";
    case TestKind::kNone: break;
  }
  return "none";
}

SuccessorFn IndexSuccessor() { return SuccessorFn{nullptr, &IndexSucc}; }

double FitZipfByCollisions(double collision_prob, uint64_t n_items) {
  if (n_items < 2 || !(collision_prob > 1.0 / static_cast<double>(n_items))) return 0.0;
  auto cp = [&](double s) {
    double h = Harmonic(n_items, s);
    return Harmonic(n_items, 2 * s) / (h * h);
  };
  double lo = 0, hi = 4;  // exponents beyond 4 put > 92% of the mass on one item
  if (cp(hi) <= collision_prob) return hi;
  for (int i = 0; i < 24; ++i) {  // 4 / 2^24 < 1e-6: far below any useful precision
    double mid = 0.5 * (lo + hi);
    (cp(mid) < collision_prob ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double DistinctVariance(double n, double big_n) {
  const double q1 = std::exp(n * std::log1p(-1.0 / big_n));
  if (big_n <= 2) return std::max(0.0, big_n * q1 * (1 - big_n * q1));  // q2 = 0
  const double q2 = std::exp(n * std::log1p(-2.0 / big_n));
  // N q1 (1 - q1) - N (N-1) (q1^2 - q2), with 1 - q1 and q1^2 - q2 taken by
  // expm1: (1-1/N)^2 / (1-2/N) = 1 + 1/(N(N-2)).
  const double one_minus_q1 = -std::expm1(n * std::log1p(-1.0 / big_n));
  const double q1sq_minus_q2 = q2 * std::expm1(n * std::log1p(1.0 / (big_n * (big_n - 2))));
  return std::max(0.0, big_n * q1 * one_minus_q1 - big_n * (big_n - 1) * q1sq_minus_q2);
}

DetectResult Detect(const DetectInput& in, const StreamConfig& cfg) {
  DetectResult r;
  const size_t n = in.children.size();
  const double alpha_each = cfg.alpha / 2;  // Bonferroni over the two tests

  // --- Uniformity statistics (also gives D for N). ---
  std::vector<uint32_t> sorted;
  sorted.assign(in.children.begin(), in.children.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> counts;
  double pairs = CountChildren(sorted, counts);  // sum c(c-1): ordered pairs of samples on the same child
  uint64_t distinct = counts.size();
  r.distinct = static_cast<uint32_t>(distinct);
  const uint64_t big_n = std::max<uint64_t>(in.n_children, distinct);
  const double nd = static_cast<double>(n), bn = static_cast<double>(big_n);
  const uint64_t span = n > 0 ? uint64_t{sorted.back()} - sorted.front() + 1 : 0;  // of blocks (children: unused)

  // --- Sequential: per-reader "next" steps. ---
  // Of a file's blocks: the samples that begin a run, in each reader's
  // steps and in the merged order; those of the view tested, and its runs
  // per step (Short runs).
  std::vector<uint32_t> own_starts, merged_starts, run_starts;
  double run_fraction = 1;
  {
    // Readers with one sample in the window (a process per file): the
    // window's pids sorted once, and only when a new reader asks (long-lived
    // readers ask a handful of times per window).
    std::vector<uint32_t> by_pid;
    bool sorted_pids = false;
    auto once = [&](uint32_t p) {
      if (!sorted_pids) {
        by_pid.assign(in.pids.begin(), in.pids.begin() + static_cast<std::ptrdiff_t>(n));
        std::sort(by_pid.begin(), by_pid.end());
        sorted_pids = true;
      }
      const auto [lo, hi] = std::equal_range(by_pid.begin(), by_pid.end(), p);
      return hi - lo == 1;
    };
    std::array<uint32_t, kMaxPids> pid;  // read below `used` only: not cleared (2 KiB a test)
    std::array<uint32_t, kMaxPids> last;
    std::array<uint32_t, kMaxPids> stride;  // the reader's last step forward past "next" (0: none)
    size_t used = 0, victim = 0;
    uint32_t steps = 0, next = 0, own = 0, own_next = 0, merged_next = 0, own_stride = 0, stride_max = 0;
    // Runs (blocks; Short runs below), in each reader's own steps and in the
    // merged order: steps back far and back to the start, and "next" steps
    // in runs of at most 2 kShortRunBlocks samples.
    struct Runs {
      uint32_t back = 0, restart = 0, short_next = 0;
      void Step(uint32_t from, uint32_t to, bool is_next, uint32_t& run) {
        if (is_next) {
          ++run;
          return;
        }
        if (to < kRestartBlocks) ++restart;  // a small file read whole again and again
        else if (uint64_t{to} + kShortRunBlocks < from) ++back;  // not a scan's reads out of order
        End(run);
        run = 1;
      }
      void End(uint32_t run) {
        if (run <= 2 * kShortRunBlocks) short_next += run - 1;
      }
    } own_runs, merged_runs;
    std::array<uint32_t, kMaxPids> run;  // samples in the reader's current run
    uint32_t merged_run = 1;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) {
        const bool is_next = in.successor(in.children[i - 1], in.children[i], cfg.sequential_gap);
        merged_next += is_next;
        if (in.blocks) merged_runs.Step(in.children[i - 1], in.children[i], is_next, merged_run);
      }
      size_t k = 0;
      while (k < used && pid[k] != in.pids[i]) ++k;
      // The sample of a reader with one sample in the window steps from
      // the sample before it, whoever read that: a scan by one process per
      // file (a shell loop, `find -exec`, `xargs -n1`) is a chain of such
      // readers, and had no step at all (labelled random). Under no pattern
      // such a step is "next" with the same p0 as any other. Readers with
      // more samples are left to their own steps (a cross-reader step of
      // each of many interleaved scanners would dilute k/m).
      const bool known = k < used;
      if (known || (i > 0 && once(in.pids[i]))) {
        ++steps;
        own += known;
        if (in.successor(known ? last[k] : in.children[i - 1], in.children[i], cfg.sequential_gap)) {
          ++next;
          own_next += known;
        }
      }
      if (in.blocks && known) {
        const uint32_t step = in.children[i] > last[k] ? in.children[i] - last[k] : 0;
        const bool strided = step > cfg.sequential_gap && step <= kMaxStrideBlocks;
        if (strided && step == stride[k]) ++own_stride, stride_max = std::max(stride_max, step);
        stride[k] = strided ? step : 0;
        const bool is_next = in.successor(last[k], in.children[i], cfg.sequential_gap);
        own_runs.Step(last[k], in.children[i], is_next, run[k]);
        if (!is_next) own_starts.push_back(in.children[i]);
      } else if (in.blocks) {
        own_starts.push_back(in.children[i]);
      }
      if (in.blocks && !(i > 0 && in.successor(in.children[i - 1], in.children[i], cfg.sequential_gap)))
        merged_starts.push_back(in.children[i]);
      if (!known) {
        if (used < kMaxPids) {
          k = used++;
        } else {
          k = victim;
          victim = (victim + 1) % kMaxPids;
          own_runs.End(run[k]);  // the reader it held: its run ends here
        }
        pid[k] = in.pids[i];
        run[k] = 1;
        stride[k] = 0;
      }
      last[k] = in.children[i];
    }
    for (size_t k = 0; k < used; ++k) own_runs.End(run[k]);
    merged_runs.End(merged_run);
    // Runs of a few blocks, whichever way they go: samples that begin a run
    // (a reader's first in the window, or not "next" from its own last),
    // kShortRunBlocks apart on average at most. Rows of 8 blocks, each
    // taken by a reader's new tag (AccessStreamTree), show 3 jumps in 64
    // samples but 8 starts; a scan by a reader or a few shows a start each.
    r.runs_short = in.blocks && own_starts.size() >= kShortRunSeenJumps && own_starts.size() * kShortRunBlocks >= n;
    // A file's blocks: once readers show steps of their own, those alone
    // (see the decision below: readers' first samples, each stepped to from
    // another reader's, kept 96 threads scanning their own slices below the
    // ratio until every one had its second block).
    // Unless the samples in the order they came go on from each other
    // more often than each reader's do: a thread pool reading a file in
    // chunks, each thread taking the next one (each thread's own steps
    // are as long as the pool is large: 4 threads reading 1 MiB chunks
    // stepped 4 blocks each, labelled random, the file fetched in sub-units
    // with no readahead; a reviewer's trace, 64 MiB cache: modeled 10.5 s
    // against lru-readahead's 9.5, now 9.6; chunks in any order within each
    // round of the pool: 4.9 s, lru-readahead 9.6, with the sweep below). Both tested
    // then (Bonferroni: the p-value used is multiplied by the number of
    // tests tried, `tests` below, whichever is used).
    int tests = 1;
    if (in.blocks && 2 * own >= cfg.min_samples) {
      steps = own;
      next = own_next;
      bool merged = false;
      if (used > 1 && n > 1) {
        ++tests;
        if (static_cast<double>(merged_next) * own > static_cast<double>(own_next) * static_cast<double>(n - 1)) {
          steps = static_cast<uint32_t>(n - 1);
          next = merged_next;
          merged = true;
        }
      }
      // (c) Each reader's steps alike, longer than "next", in most of its
      // steps: a thread pool's threads taking chunks of one block in turn
      // (DataLoader workers taking 1 MiB batches of a file), each thread
      // stepping by the pool's size. Neither its own steps nor the merged
      // order (threads drifting apart) are "next", and a file under ~1 GiB
      // is no sweep (below): it was labelled random a third of the time or
      // more, each 128 KiB piece a GET of its own. With several readers,
      // only steps no longer than the readers are many (the pool reads
      // every block): two readers stepping 4 or 6 blocks read a third or half of the file, and
      // a scan's readahead fetched the rest (a review: 2 readers stepping 4
      // blocks of a 1 GiB file, 1 GiB cache, 1.4 -> 6.0 s). Only when its
      // share would say scan (min_sequential_ratio): a work-stealing pool's
      // threads step by about the pool's size, half the time exactly, and
      // taken below the ratio that view left the file random where the
      // merged order said scan (a review: 4 threads stealing 1 MiB chunks,
      // two passes, 256 MiB cache, 2.9 -> 8.2 s).
      if ((used == 1 || stride_max <= used) && own_stride >= cfg.min_sequential_ratio * own &&
          own_stride * static_cast<double>(steps) > next * static_cast<double>(own)) {
        ++tests;
        steps = own;
        next = own_stride;
        merged = false;
      }
      // Short runs: each reader's "next" steps come in runs of a few blocks
      // (kShortRunBlocks on average at most, kShortRunMinJumps jumps at
      // least; returns to the file's start are not jumps), and its jumps
      // between them go far back now and then (an eighth of them at least;
      // random offsets go back half the time), and half the "next" steps
      // at least are in runs of 2 kShortRunBlocks or fewer (a scan, then
      // faults of one block each: the mean says short, but its steps are
      // the scan's). A scan with a random jump in 20 steps (the accuracy
      // test's) is far from it. Rows of a
      // few units read at random, each in unit-sized pieces (4 MiB rows in
      // the 1 MiB reads the kernel sends), are 3 in 4 steps "next": labelled
      // sequential, the file was read ahead past each row and evict-behind
      // evicted rows read again (a tester's live run, 4 MiB rows beside a
      // burst of small files, 600 MiB cache: 2.2 GB fetched against
      // lru-readahead's 0.55). Not a scan: the sequential test's verdict is
      // not used (the uniformity test decides), and the engine reads ahead
      // within a run only (docs/POLICIES.md, "Readahead within a run").
      // A scan's jumps go on (a thread pool's chunks, a strided reader), and
      // a model loader's tensors out of offset order are longer runs (4-40
      // MiB: about 22 blocks on average).
      // The far jumps back are looked for in the merged order too: the tree
      // gives a reader's new run the tag of its run nearest below
      // (AccessStreamTree), so each tag mostly jumps on (8 MiB rows read at
      // random by two readers: 2 jumps back in 23).
      const Runs& runs = merged ? merged_runs : own_runs;
      const uint32_t jumps = steps - next - runs.restart;
      const uint32_t merged_jumps = n > 1 ? static_cast<uint32_t>(n - 1) - merged_next - merged_runs.restart : 0;
      const bool back = 8 * runs.back >= jumps || (merged_jumps > 0 && 8 * merged_runs.back >= merged_jumps);
      // A tiling is no rows: the window's blocks read once each and covering
      // two thirds of their span at least (a thread pool reading a file in
      // chunks of a few blocks taken in turn, each read in pieces: runs a
      // chunk long, the merged order jumping back a pool's width at each
      // round; files under ~1 GiB, where the sweep test below is not tried,
      // were labelled random and fetched in sub-units; a review). The span
      // holds the pool's partial rounds at both ends: (threads - 1) x chunk
      // blocks missing, 120 of 376 for 16 threads of 8 MiB chunks. Rows at
      // random are read again (drawn with replacement) or spread over a file
      // much larger than the window.
      const bool tiling = 10 * distinct >= 9 * n && 3 * distinct >= 2 * span;
      r.short_runs_seen = jumps >= kShortRunSeenJumps && uint64_t{jumps} * kShortRunBlocks >= steps && back &&
                          2 * runs.short_next >= next && !tiling;
      r.short_runs = r.short_runs_seen && jumps >= kShortRunMinJumps;
      if (r.short_runs) {
        run_starts = std::move(merged ? merged_starts : own_starts);
        run_fraction = static_cast<double>(jumps) / steps;
      }
    }
    r.steps = steps;
    r.next_steps = next;
    r.own_steps = own;
    // Under no pattern, over the D children read: a step goes to one of the
    // D-1 others (a reader's repeats in a row are rare: the tree pushes no
    // sample for a reader staying in a subdirectory or a block), and is
    // "next" for min(gap, D-1-a) of them from the a-th; summed, g(g+1)/2 +
    // g(D-1-g) over D(D-1) steps (~gap/D). Over the N listed it was gap/N:
    // "next" is found among the children read (a directory's successor
    // walks the children it has seen), and a hot set of 4 files in a
    // directory of 10,000 read in turn looked 75% "next" against 0.02%.
    const double dg = std::min<double>(cfg.sequential_gap, static_cast<double>(distinct) - 1);
    const double dd = static_cast<double>(distinct);
    const double p0 = distinct >= 2 ? (dg * (dg + 1) / 2 + dg * (dd - 1 - dg)) / (dd * (dd - 1)) : 1.0;
    r.seq_tested = steps > 0 && p0 < 0.5;
    if (r.seq_tested) {
      if (next == 0) {
        r.seq_p = 1;
      } else {
        boost::math::binomial_distribution<double, NoThrow> b(steps, p0);
        r.seq_p = Clean(boost::math::cdf(boost::math::complement(b, next - 1)));
      }
    }
    // A sweep whatever the order: a file's blocks read once each, all
    // within a span little more than their number, in a file much larger
    // (a thread pool whose chunks reach the daemon in any order: no step
    // is "next" in the merged order nor in a thread's own). Under no
    // pattern, D distinct blocks of N fall within some S consecutive ones
    // with probability at most (N - S + 1) C(S, D) / C(N, D). Tested beside
    // the steps (Bonferroni, as above); its statistic is the share of the
    // span read (D / S), held to the same ratio as "next" steps, and it is
    // used when significant with a higher ratio than the steps' (8 threads
    // whose neighbours' chunks arrive swapped now and then: 0.698 of merged
    // steps "next", below min_sequential_ratio 0.7). A test of density, not
    // of order: a small region of a large file read once each block in any
    // order passes too (read as a scan of it: readahead of whole units, no
    // sub-units). Blocks read again (a hot region) or a span near the
    // file's size say nothing of a sweep: not tested.
    if (in.blocks && r.seq_tested && distinct >= 2 && 10 * distinct >= 9 * n) {
      if (big_n >= 4 * span) {
        auto lchoose = [](double a, double b) { return std::lgamma(a + 1) - std::lgamma(b + 1) - std::lgamma(a - b + 1); };
        const double ls = std::log(bn - static_cast<double>(span) + 1) + lchoose(static_cast<double>(span), dd) -
                          lchoose(bn, dd);
        const double sweep_p = Clean(std::min(1.0, std::exp(ls)));
        ++tests;
        if (tests * sweep_p < std::max(tests * r.seq_p, alpha_each) && distinct * steps > next * span) {
          r.seq_p = sweep_p;
          r.steps = static_cast<uint32_t>(span);
          r.next_steps = static_cast<uint32_t>(distinct);
          r.short_runs = r.short_runs_seen = false;  // a sweep of a region, its runs in any order
        }
      }
    }
    r.seq_p = std::min(1.0, tests * r.seq_p);
    // Runs only where the steps would say scan: with fewer "next" steps
    // (runs of a block or two on average) the tests disagree as before
    // (unknown), and reads at random with no runs keep their own tests.
    if (r.seq_p >= alpha_each ||
        static_cast<double>(r.next_steps) < cfg.min_sequential_ratio * static_cast<double>(r.steps))
      r.short_runs = r.short_runs_seen = false;
  }

  // --- Uniformity test. ---
  // Of short runs, over the runs' first blocks alone, among about N / L
  // places a run can begin (L the mean run length): a row read again brings
  // L repeats at once, and rows read uniformly at random looked skewed.
  // (Their own counts: `counts` stays the window's, for the subset test.)
  uint64_t big_n_tested = big_n;
  size_t n_tested = n;
  std::vector<uint32_t> start_counts;
  const std::vector<uint32_t>* tested = &counts;
  if (r.short_runs) {
    std::sort(run_starts.begin(), run_starts.end());
    pairs = CountChildren(run_starts, start_counts);
    tested = &start_counts;
    n_tested = run_starts.size();
    big_n_tested =
        std::max<uint64_t>(start_counts.size(), static_cast<uint64_t>(static_cast<double>(big_n) * run_fraction));
  }
  UniformTest(*tested, big_n_tested, n_tested, r);

  r.collision_prob = n_tested >= 2 ? pairs / (static_cast<double>(n_tested) * static_cast<double>(n_tested - 1)) : 0.0;
  r.n_children = big_n;

  // --- Uniform over the children read (a subset of the N). ---
  // Over 8 children read at least (fewer, out of many, are a handful of hot
  // files), or fewer when they are nearly all (4 in 5 at least: an image
  // folder of 4 classes beside a labels file it never reads).
  const bool subset_large = distinct >= kSubsetMinChildren || 4 * (big_n - distinct) <= distinct;
  if (in.subset_uniform && r.uniform_test != TestKind::kNone && r.uniform_p < alpha_each && distinct < big_n &&
      subset_large && nd >= kSubsetMinExpected * static_cast<double>(distinct)) {
    const double dd = static_cast<double>(distinct), expected = nd / dd;
    double x2 = 0;
    for (uint32_t c : counts) x2 += (c - expected) * (c - expected) / expected;
    boost::math::chi_squared_distribution<double, NoThrow> chi(dd - 1);
    const double p = Clean(boost::math::cdf(boost::math::complement(chi, x2)));
    if (p >= alpha_each) {
      r.uniform_test = TestKind::kChiSquareSubset;
      r.uniform_stat = x2;
      r.uniform_p = p;
      r.n_children = distinct;
    }
  }

  // --- Decision. ---
  const double frac = r.steps > 0 ? static_cast<double>(r.next_steps) / r.steps : 0.0;
  const bool seq_sig = r.seq_p < alpha_each;
  auto use_seq = [&] {
    r.test = TestKind::kBinomial;
    r.statistic = frac;
    r.p_value = r.seq_p;
  };
  auto use_uni = [&] {
    r.test = r.uniform_test;
    r.statistic = r.uniform_stat;
    r.p_value = r.uniform_p;
  };
  if (n < cfg.min_samples || big_n < 2) {
    use_uni();
    r.label = Label::kUnknown;
  } else if (seq_sig && frac >= cfg.min_sequential_ratio && !r.short_runs) {
    use_seq();
    r.label = Label::kSequential;
  } else if (seq_sig && frac >= cfg.mixed_sequential_ratio && !r.short_runs) {
    // (Short runs: the uniformity test over their first blocks decides.)
    use_seq();
    r.label = Label::kUnknown;  // part scan, part not: the tests disagree
  } else if (r.uniform_test != TestKind::kNone && r.uniform_p < alpha_each) {
    use_uni();
    r.label = Label::kSkewed;
    if (in.fit_zipf) r.zipf_s = FitZipfByCollisions(r.collision_prob, big_n_tested);  // over the samples tested
  } else if (in.blocks && !r.seq_tested) {
    // (After skewed: a hot block or two of a large file stay skewed.)
    // A file of 2 or 3 blocks read front to back every epoch spreads its
    // reads evenly: random by the uniformity test alone, and fetched in
    // sub-units, its readahead cut (a review: 2-block files read whole 40
    // times, 4 MiB cache: 581 MiB fetched against lru's 320, modeled 45.3 s
    // against 12.0). Too few blocks read to tell a scan: unknown.
    use_uni();
    r.label = Label::kUnknown;
  } else if (r.uniform_test != TestKind::kNone && in.blocks && in.first_window && 2 * r.own_steps < cfg.min_samples) {
    // Blocks stepped to mostly by readers with one sample each (a reader's
    // first): their steps from the sample before, another reader's, show
    // readers starting at different places, not how each goes on. Many
    // threads each scanning its own slice of a file start so: labelled
    // random, the file was fetched in sub-units with no readahead until
    // each thread's second block (96 threads, 512 MiB: 1.3 of 3 modeled
    // seconds in `igtcache sim`). Unknown until readers show steps of
    // their own; "next" steps, a scan by a process per block, still count.
    // In a stream's first window only: random reads by a pid per lookup
    // (1,000 pids in turn) never show steps of their own, and were unknown
    // for good, then skewed (14,249 MiB fetched where random fetched 1,004:
    // a review of this rule's first version).
    use_uni();
    r.label = Label::kUnknown;
  } else if (r.uniform_test != TestKind::kNone) {
    use_uni();
    r.label = Label::kRandom;
  } else {
    use_uni();
    r.label = Label::kUnknown;
  }
  return r;
}

}  // namespace igt::stream
