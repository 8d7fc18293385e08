// Detection benchmark (hidden: run with `test_stream "[bench]"`, or
// scripts/bench_detection.sh, which writes docs/DETECTION.md). Reports
// figures; it never gates anything. Output: Markdown on stdout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "src/stream/synthetic_streams.h"

using namespace igt::stream;
using namespace igt::stream::synth;

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Cost of timing an empty region, subtracted from per-call figures.
double ClockOverheadNs() {
  std::vector<double> v;
  for (int i = 0; i < 100000; ++i) {
    auto a = Clock::now();
    auto b = Clock::now();
    v.push_back(std::chrono::duration<double, std::nano>(b - a).count());
  }
  return Percentile(v, 0.5);
}

}  // namespace

TEST_CASE("bench: accuracy and samples-to-label per class", "[.bench]") {
  constexpr int kStreams = 250;
  constexpr size_t kSamples = 1024;  // long enough for every class to settle
  std::printf("### Accuracy at 256 samples and samples to reach the label\n\n");
  std::printf("%d seeded streams per class (half block, half file granularity; N log-uniform in "
              "[16, 4096] children; 1-4 interleaved readers), default StreamConfig.\n\n", kStreams);
  std::printf("| class | expected | correct at 256 | other labels at 256 | samples to label: median | p95 | never |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (Kind kind : {Kind::kSequential, Kind::kUniform, Kind::kEpoch, Kind::kZipf, Kind::kMixed}) {
    int correct = 0, never = 0;
    std::map<Label, int> other;
    std::vector<double> to_label;
    for (int i = 0; i < kStreams; ++i) {
      Stream s = Make(kind, 9'000'000 + 100'000 * static_cast<int>(kind) + i, kSamples);
      AccessStreamTree tree;
      Driver d(s, tree);
      int reached = -1;
      for (size_t k = 0; k < s.accesses.size(); ++k) {
        d.Step(k);
        const bool test_point = k + 1 >= tree.config().min_samples;
        if (test_point && (reached < 0 || k + 1 == 256)) {
          auto info = tree.Find(d.node_path());
          if (reached < 0 && info->label == Expected(kind) && kind != Kind::kMixed) reached = static_cast<int>(k + 1);
          if (k + 1 == 256) {
            if (info->label == Expected(kind)) ++correct;
            else ++other[info->label];
          }
        }
      }
      if (kind != Kind::kMixed) {
        if (reached < 0) ++never;
        else to_label.push_back(reached);
      }
    }
    std::string others;
    for (auto [l, n] : other) others += std::string(LabelName(l)) + " " + std::to_string(n) + " ";
    if (others.empty()) others = "-";
    if (kind == Kind::kMixed) {
      std::printf("| %s | %s | %.1f%% | %s | n/a | n/a | n/a |\n", KindName(kind), std::string(LabelName(Expected(kind))).c_str(),
                  100.0 * correct / kStreams, others.c_str());
    } else {
      std::printf("| %s | %s | %.1f%% | %s | %.0f | %.0f | %d |\n", KindName(kind),
                  std::string(LabelName(Expected(kind))).c_str(), 100.0 * correct / kStreams, others.c_str(),
                  Percentile(to_label, 0.5), Percentile(to_label, 0.95), never);
    }
  }
  std::printf("\n");
}

TEST_CASE("bench: cost of Record, of one re-test, and memory per node", "[.bench]") {
  const double overhead = ClockOverheadNs();
  std::printf("### Overhead on this machine\n\n");
  std::printf("Timer overhead (steady_clock pair, median %.0f ns) is subtracted from per-call figures.\n\n", overhead);
  std::printf("| operation | median | p99 | notes |\n|---|---|---|---|\n");

  auto record_bench = [&](const char* what, auto&& op, size_t n) {
    std::vector<double> v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      auto a = Clock::now();
      op(i);
      auto b = Clock::now();
      v.push_back(std::max(0.0, std::chrono::duration<double, std::nano>(b - a).count() - overhead));
    }
    std::printf("| %s | %.0f ns | %.0f ns | %zu calls |\n", what, Percentile(v, 0.5), Percentile(v, 0.99), n);
  };

  {
    // Warm tree: 8 large files in a dataset directory, each read front to
    // back in 1 MiB reads, round-robin (every Record is a new block sample
    // for the file; includes the re-tests every 16 samples).
    AccessStreamTree tree;
    const uint64_t kMiB = 1 << 20, blocks = 4096;
    std::vector<std::string> paths;
    for (int f = 0; f < 8; ++f) paths.push_back("datasets/shards/train-0000" + std::to_string(f) + ".tar");
    uint64_t t = 0;
    for (int f = 0; f < 8; ++f) tree.Record(++t, 1, paths[f], 0, kMiB, blocks * kMiB);
    record_bench("Record: 1 MiB sequential read of a large file (depth 3, new block sample)", [&](size_t i) {
      const size_t f = i % 8, b = (i / 8 + 1) % blocks;
      tree.Record(++t, 100 + static_cast<uint32_t>(f), paths[f], b * kMiB, kMiB, blocks * kMiB);
    }, 200000);
    record_bench("Record: 128 KiB continuation read (no new sample)", [&](size_t i) {
      const uint64_t off = (i + 1) * (128 << 10);
      tree.Record(++t, 999, paths[0], off % (blocks * kMiB), 128 << 10, blocks * kMiB);
    }, 200000);
  }
  {
    // Small files: a directory of 10,000 existing files read uniformly at
    // random (every Record is a directory sample; the ring and N = 10,000).
    AccessStreamTree tree;
    tree.NoteListing("imagenet/train/", 10000);
    std::vector<std::string> paths;
    for (int i = 0; i < 10000; ++i) {
      char p[64];
      std::snprintf(p, sizeof p, "imagenet/train/n%08d.JPEG", i);
      paths.push_back(p);
    }
    uint64_t t = 0;
    for (auto& p : paths) tree.Record(++t, 1, p, 0, 110000, 110000);
    std::mt19937 rng(1);
    std::vector<uint32_t> order(400000);
    for (auto& o : order) o = rng() % 10000;
    record_bench("Record: whole small file, random in a 10k-file directory", [&](size_t i) {
      tree.Record(++t, 2000 + static_cast<uint32_t>(i % 4), paths[order[i]], 0, 110000, 110000);
    }, order.size());

    // One re-test of the directory node (window 256, N = 10,000).
    std::vector<double> v;
    for (int i = 0; i < 20000; ++i) {
      tree.Record(++t, 1, paths[order[i]], 0, 110000, 110000);
      auto a = Clock::now();
      REQUIRE(tree.Retest("imagenet/train/"));
      auto b = Clock::now();
      v.push_back(std::max(0.0, std::chrono::duration<double, std::nano>(b - a).count() - overhead));
    }
    std::printf("| re-test of a directory stream (window 256, N = 10,000, uniform) | %.0f ns | %.0f ns | "
                "20000 re-tests |\n", Percentile(v, 0.5), Percentile(v, 0.99));
    std::printf("| (the above directory is labelled) | %s | | |\n",
                std::string(LabelName(tree.Find("imagenet/train/")->label)).c_str());
  }
  {
    // Find on a skewed stream: the engine looks streams up on every read.
    // Zipf(1.1) reads over a directory of 10,000 files.
    AccessStreamTree tree;
    tree.NoteListing("emb/rows/", 10000);
    std::vector<double> cdf(10000);
    double sum = 0;
    for (int i = 0; i < 10000; ++i) cdf[i] = (sum += 1.0 / std::pow(i + 1, 1.1));
    std::mt19937 rng(2);
    std::uniform_real_distribution<double> u(0, sum);
    uint64_t t = 0;
    for (int i = 0; i < 20000; ++i) {
      const int k = int(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      char p[64];
      std::snprintf(p, sizeof p, "emb/rows/r%05d.bin", k);
      tree.Record(++t, 1, p, 0, 4096, 4096);
    }
    const auto info = tree.Find("emb/rows/");
    REQUIRE(info);
    record_bench("Find: a skewed directory stream (Zipf 1.1 over 10,000 files)", [&](size_t) {
      (void)tree.Find("emb/rows/");
    }, 100000);
    std::printf("| (the above directory is labelled) | %s | | |\n", std::string(LabelName(info->label)).c_str());
  }
  for (int n : {300000}) {
    // A flat directory larger than the cache of this machine: every Record
    // misses in memory. With the default 64 MiB cap not all leaves fit, so
    // some Records re-create pruned leaves (and some prune).
    for (bool capped : {false, true}) {
      StreamConfig cfg;
      if (!capped) cfg.memory_cap_bytes = 1ull << 30;
      AccessStreamTree tree(cfg);
      std::vector<std::string> paths;
      for (int i = 0; i < n; ++i) {
        char p[64];
        std::snprintf(p, sizeof p, "data/train/sample_%08d.jpg", i);
        paths.push_back(p);
      }
      tree.NoteListing("data/train/", n);
      uint64_t t = 0;
      for (auto& p : paths) tree.Record(++t, 1, p, 0, 100000, 100000);
      std::mt19937 rng(2);
      std::vector<uint32_t> order(300000);
      for (auto& o : order) o = rng() % n;
      char what[160];
      std::snprintf(what, sizeof what, "Record: whole small file, random in a %dk-file directory, cap %s", n / 1000,
                    capped ? "64 MiB (leaves pruned and re-created)" : "1 GiB (all leaves fit)");
      record_bench(what, [&](size_t i) {
        tree.Record(++t, 2000 + static_cast<uint32_t>(i % 4), paths[order[i]], 0, 100000, 100000);
      }, order.size());
    }
  }
  {
    // Detect() alone on a full window of a 4096-block file.
    Stream s = Make(Kind::kZipf, 42, 256);
    std::vector<uint32_t> children, pids;
    for (auto& a : s.accesses) {
      children.push_back(a.child);
      pids.push_back(a.pid);
    }
    DetectInput in;
    in.children = children;
    in.pids = pids;
    in.n_children = s.n_children;
    in.successor = IndexSuccessor();
    StreamConfig cfg;
    std::vector<double> v;
    for (int i = 0; i < 20000; ++i) {
      auto a = Clock::now();
      DetectResult r = Detect(in, cfg);
      auto b = Clock::now();
      REQUIRE(r.label != Label::kSequential);
      v.push_back(std::max(0.0, std::chrono::duration<double, std::nano>(b - a).count() - overhead));
    }
    std::printf("| Detect() alone, 256-sample Zipf window, N = %u (fit_zipf = true) | %.0f ns | %.0f ns | "
                "20000 calls |\n", s.n_children, Percentile(v, 0.5), Percentile(v, 0.99));
    in.fit_zipf = false;
    v.clear();
    for (int i = 0; i < 20000; ++i) {
      auto a = Clock::now();
      DetectResult r = Detect(in, cfg);
      auto b = Clock::now();
      REQUIRE(r.label != Label::kSequential);
      v.push_back(std::max(0.0, std::chrono::duration<double, std::nano>(b - a).count() - overhead));
    }
    std::printf("| Detect() alone, same window, without the Zipf fit (the tree fits skewed results only, once per test) | %.0f ns | %.0f ns | "
                "20000 calls |\n", Percentile(v, 0.5), Percentile(v, 0.99));
  }
  {
    // 8 threads recording at once (2 cores on this machine).
    AccessStreamTree tree;
    const uint64_t kMiB = 1 << 20;
    std::vector<std::vector<double>> per(8);
    std::vector<std::thread> ts;
    for (int th = 0; th < 8; ++th) {
      ts.emplace_back([&, th] {
        std::string p = "jobs/j" + std::to_string(th) + "/w.bin";
        for (int i = 0; i < 50000; ++i) {
          auto a = Clock::now();
          tree.Record(static_cast<uint64_t>(i), 10 + th, p, uint64_t(i % 4096) * kMiB, kMiB, 4096 * kMiB);
          auto b = Clock::now();
          per[th].push_back(std::max(0.0, std::chrono::duration<double, std::nano>(b - a).count() - overhead));
        }
      });
    }
    for (auto& t : ts) t.join();
    std::vector<double> all;
    for (auto& p : per) all.insert(all.end(), p.begin(), p.end());
    std::printf("| Record from 8 threads at once (2 cores), own file each | %.0f ns | %.0f ns | 400000 calls |\n",
                Percentile(all, 0.5), Percentile(all, 0.99));
  }
  std::printf("\n");

  // Memory per node.
  std::printf("### Memory per node\n\n| node kind | accounted bytes |\n|---|---|\n");
  {
    AccessStreamTree tree;
    const uint64_t base = tree.Memory().bytes;
    tree.Record(1, 1, "d/small.jpg", 0, 1000, 1000);
    const uint64_t with_dir_and_file = tree.Memory().bytes;
    tree.Record(2, 1, "d/small2.jpg", 0, 1000, 1000);
    const uint64_t leaf = tree.Memory().bytes - with_dir_and_file;
    std::printf("| empty tree (root) | %llu |\n", (unsigned long long)base);
    std::printf("| small-file leaf (name <= 15 chars) | %llu |\n", (unsigned long long)leaf);
    AccessStreamTree t2;
    const uint64_t kMiB = 1 << 20;
    for (int b = 0; b < 1024; ++b) t2.Record(b, 1, "big.bin", uint64_t(b) * kMiB, kMiB, 1024 * kMiB);
    auto info = t2.Find("big.bin");
    std::printf("| large file with a full window of 256 samples | %llu |\n", (unsigned long long)info->bytes);
    auto dinfo = t2.Find("/");
    std::printf("| directory (the root) with a full window | %llu |\n", (unsigned long long)dinfo->bytes);
    AccessStreamTree t3;
    for (int i = 0; i < 100000; ++i) {
      char p[64];
      std::snprintf(p, sizeof p, "train/c%03d/img_%07d.jpg", i % 100, i);
      t3.Record(i, 1 + i % 4, p, 0, 110000, 110000);
    }
    TreeMemoryStats m = t3.Memory();
    std::printf("| average over an ImageNet-like tree (100 dirs x 1000 files, all read) | %.0f (%llu nodes, %.1f MiB) |\n",
                m.bytes_per_node, (unsigned long long)m.nodes, m.bytes / 1048576.0);
  }
  std::printf("\n");
}

TEST_CASE("bench: label stability of stationary streams, and the cost of Maintain", "[.bench]") {
  std::printf("### Label stability and maintenance\n\n");
  std::printf("Stationary streams at file granularity over 1,000 children, 20,000 samples each, default "
              "StreamConfig: label changes after the first label (every one of them hands the stream's "
              "cached units to another eviction module).\n\n");
  std::printf("| class | streams | changes per 10,000 samples | streams that changed |\n|---|---|---|---|\n");
  constexpr int kStreams = 40;
  constexpr size_t kSamples = 20000;
  for (Kind kind : {Kind::kUniform, Kind::kEpoch, Kind::kZipf}) {
    long changes = 0;
    int changed = 0;
    for (int i = 0; i < kStreams; ++i) {
      Stream s = Make(kind, 7'000'000 + 100'000 * static_cast<int>(kind) + i, kSamples, 1000, 1000);
      s.block_level = false;
      AccessStreamTree tree;
      Driver d(s, tree);
      Label last = Label::kUnknown;
      bool labelled = false;
      long c = 0;
      for (size_t k = 0; k < s.accesses.size(); ++k) {
        d.Step(k);
        if ((k + 1) % 16 != 0) continue;  // a label can change only at a test
        const Label l = tree.Find(d.node_path())->label;
        if (l != last) {
          c += labelled;
          labelled = true;
          last = l;
        }
      }
      changes += c;
      changed += c > 0;
    }
    std::printf("| %s | %d | %.2f | %d |\n", KindName(kind), kStreams, 1e4 * changes / (double(kStreams) * kSamples),
                changed);
  }
  std::printf("\n");

  // Maintain() on an image-folder tree: 1,000 class directories of 200
  // files, every file read once (the default 64 MiB cap keeps ~154,000 of
  // the 201,000 nodes).
  AccessStreamTree tree;
  uint64_t t = tree.config().idle_prune_ms * 1000;
  std::vector<std::string> paths;
  for (int i = 0; i < 200'000; ++i) {
    char p[64];
    std::snprintf(p, sizeof p, "imagenet/train/n%05d/img_%07d.jpg", i % 1000, i);
    paths.push_back(p);
  }
  std::mt19937 rng(3);
  std::shuffle(paths.begin(), paths.end(), rng);
  for (const auto& p : paths) tree.Record(t += 100, 1, p, 0, 110'000, 110'000);
  auto time_ms = [](auto&& f) {
    auto a = Clock::now();
    f();
    return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
  };
  // The first call runs the idle walk over every node (then at most every
  // idle_prune_ms / 16); it prunes nothing: the clock started past
  // idle_prune_ms, and every node was read since.
  t += 1'000'000;
  const double walk = time_ms([&] { tree.Maintain(t); });
  std::vector<double> quiet, busy, going;
  for (int r = 0; r < 20; ++r) {
    t += 1'000'000;
    quiet.push_back(time_ms([&] { tree.Maintain(t); }));
    for (int i = 0; i < 2000; ++i) tree.Record(t += 500, 2, paths[rng() % paths.size()], 0, 110'000, 110'000);
    t += 1'000'000;
    busy.push_back(time_ms([&] { tree.Maintain(t); }));
  }
  // Reads that go on: a training job reading 2,000 files a second, one call
  // a second (the mount's maintenance thread), 20 calls measured after 10.
  for (int r = 0; r < 30; ++r) {
    for (int i = 0; i < 2000; ++i) tree.Record(t += 500, 2, paths[rng() % paths.size()], 0, 110'000, 110'000);
    const double ms = time_ms([&] { tree.Maintain(t); });
    if (r >= 10) going.push_back(ms);
  }
  std::printf("Maintain() on a tree of %llu nodes (1,000 directories of 200 files), median of 20 calls "
              "one simulated second apart:\n\n", (unsigned long long)tree.Memory().nodes);
  std::printf("| since the previous call | Maintain() |\n|---|---|\n");
  std::printf("| no read | %.3f ms |\n", Percentile(quiet, 0.5));
  std::printf("| 2,000 reads of files in random directories, then a second without | %.3f ms |\n", Percentile(busy, 0.5));
  double going_mean = 0;
  for (double v : going) going_mean += v / going.size();
  std::printf("| 2,000 reads of files in random directories during that second (reads go on) | %.3f ms "
              "(mean %.3f ms, max %.3f ms) |\n",
              Percentile(going, 0.5), going_mean, Percentile(going, 1.0));
  std::printf("| (the idle-prune walk over every node, at most every idle_prune_ms / 16) | %.3f ms |\n\n", walk);
}
