// Detector accuracy over seeded synthetic streams (DESIGN.md sec. 5; figures in
// docs/DETECTION.md). 250 streams per class, half at block and half at file
// granularity, N log-uniform in [16, 4096] children, 1-4 interleaved readers,
// all through the real AccessStreamTree with the default StreamConfig.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>

#include "src/stream/synthetic_streams.h"

using namespace igt::stream;
using namespace igt::stream::synth;

namespace {

constexpr int kStreamsPerClass = 250;
constexpr size_t kSamples = 256;

struct ClassResult {
  int correct = 0;
  int total = 0;
  std::map<Label, int> labels;
};

ClassResult RunClass(Kind kind, uint64_t seed_base) {
  ClassResult cr;
  for (int i = 0; i < kStreamsPerClass; ++i) {
    Stream s = Make(kind, seed_base + i, kSamples);
    AccessStreamTree tree;
    Driver d(s, tree);
    for (size_t k = 0; k < s.accesses.size(); ++k) d.Step(k);
    auto info = tree.Find(d.node_path());
    REQUIRE(info.has_value());
    REQUIRE(info->samples == kSamples);
    ++cr.total;
    ++cr.labels[info->label];
    if (info->label == Expected(kind)) ++cr.correct;
  }
  return cr;
}

std::string Describe(const ClassResult& cr) {
  std::string s;
  for (auto [l, n] : cr.labels) s += std::string(LabelName(l)) + "=" + std::to_string(n) + " ";
  return s;
}

}  // namespace

TEST_CASE("accuracy: >= 95% correct labels at 256 samples for every class", "[accuracy]") {
  const std::pair<Kind, uint64_t> classes[] = {
      {Kind::kSequential, 1'000'000}, {Kind::kUniform, 2'000'000}, {Kind::kEpoch, 3'000'000},
      {Kind::kZipf, 4'000'000},       {Kind::kMixed, 5'000'000},
  };
  for (auto [kind, seed] : classes) {
    ClassResult cr = RunClass(kind, seed);
    INFO(KindName(kind) << ": " << cr.correct << "/" << cr.total << " correct; " << Describe(cr));
    CHECK(cr.correct * 100 >= 95 * cr.total);
    if (kind == Kind::kMixed || kind == Kind::kUniform || kind == Kind::kEpoch) {
      // No-pattern streams: at most 5% get a pattern label they do not have.
      CHECK((cr.total - cr.correct) * 100 <= 5 * cr.total);
    }
  }
}

TEST_CASE("detector: the Zipf fit recovers the exponent from collision rates", "[accuracy]") {
  for (double s : {0.6, 0.8, 1.0, 1.2}) {
    for (uint64_t n : {100ull, 5000ull, 2000000ull}) {
      double h1 = 0, h2 = 0;
      for (uint64_t i = 1; i <= n; ++i) {
        h1 += std::pow(double(i), -s);
        h2 += std::pow(double(i), -2 * s);
      }
      CHECK(FitZipfByCollisions(h2 / (h1 * h1), n) == Approx(s).margin(0.01));
    }
  }
  CHECK(FitZipfByCollisions(0.001, 1000) == 0.0);  // exactly uniform
}

TEST_CASE("detector: epoch shuffling without repeats is uniform, not skewed", "[accuracy]") {
  // Window fully covering 3 epochs of 50 children: the counts are perfectly
  // even, so the chi-square statistic is 0 and p = 1.
  std::vector<uint32_t> children, pids;
  std::mt19937 rng(7);
  for (int e = 0; e < 5; ++e) {
    std::vector<uint32_t> p(50);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng);
    for (uint32_t c : p) {
      children.push_back(c);
      pids.push_back(1);
    }
  }
  DetectInput in;
  in.children = children;
  in.pids = pids;
  in.n_children = 50;
  in.successor = IndexSuccessor();
  DetectResult r = Detect(in, StreamConfig{});
  CHECK(r.label == Label::kRandom);
  CHECK(r.test == TestKind::kChiSquare);
  CHECK(r.statistic == Approx(0.0));
  CHECK(r.p_value == Approx(1.0));
}

TEST_CASE("detector: too few samples or children is unknown", "[accuracy]") {
  std::vector<uint32_t> children(10, 0), pids(10, 1);
  DetectInput in;
  in.children = children;
  in.pids = pids;
  in.n_children = 1;
  in.successor = IndexSuccessor();
  CHECK(Detect(in, StreamConfig{}).label == Label::kUnknown);
  children.assign(100, 0);
  pids.assign(100, 1);
  in.children = children;
  in.pids = pids;
  CHECK(Detect(in, StreamConfig{}).label == Label::kUnknown);  // one child: nothing to test
}
