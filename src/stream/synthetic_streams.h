#pragma once
// Seeded synthetic access streams for the detector accuracy tests and the
// detection benchmark (header-only; used by *_test.cc only). Each stream is
// one node of a fresh AccessStreamTree: either a file of N blocks (block
// granularity) or a directory of N small files with a listing of N (file
// granularity), read by 1-4 interleaved readers (pids).
//
//   kSequential  each reader scans forward: next child with p = 0.95
//                (of which 1 in 10 skips one child), else a random jump
//   kUniform     children drawn uniformly with replacement
//   kEpoch       a new permutation of all children per epoch (no repeats),
//                dealt round-robin to the readers (DataLoader workers)
//   kZipf        Zipf(s) popularity, s uniform in [0.6, 1.2], ranks mapped to
//                children by a random permutation
//   kMixed       no pattern: each step is "next" with p = 0.5, else a
//                random jump (half scan, half random) -> expected unknown
// Thread-safety: plain values.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "src/stream/access_stream_tree.h"

namespace igt::stream::synth {

enum class Kind { kSequential, kUniform, kEpoch, kZipf, kMixed };
inline const char* KindName(Kind k) {
  switch (k) {
    case Kind::kSequential: return "sequential";
    case Kind::kUniform: return "uniform (with replacement)";
    case Kind::kEpoch: return "epoch-shuffled";
    case Kind::kZipf: return "zipf 0.6-1.2";
    case Kind::kMixed: return "mixed (no pattern)";
  }
  return "?";
}
inline Label Expected(Kind k) {
  switch (k) {
    case Kind::kSequential: return Label::kSequential;
    case Kind::kUniform:
    case Kind::kEpoch: return Label::kRandom;
    case Kind::kZipf: return Label::kSkewed;
    case Kind::kMixed: return Label::kUnknown;
  }
  return Label::kUnknown;
}

struct Access {
  uint32_t pid;
  uint32_t child;
};

struct Stream {
  Kind kind;
  bool block_level;  // file of N blocks, else directory of N files
  uint32_t n_children;
  double zipf_s = 0;
  std::vector<Access> accesses;
};

// N is log-uniform in [min_children, max_children].
inline Stream Make(Kind kind, uint64_t seed, size_t samples, uint32_t min_children = 16,
                   uint32_t max_children = 4096) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0, 1);
  Stream s;
  s.kind = kind;
  s.block_level = (rng() & 1) != 0;
  s.n_children = static_cast<uint32_t>(
      std::lround(std::exp(std::log(min_children) + u01(rng) * (std::log(max_children) - std::log(min_children)))));
  const uint32_t n = s.n_children;
  const uint32_t readers = 1 + static_cast<uint32_t>(rng() % 4);
  std::uniform_int_distribution<uint32_t> any(0, n - 1);
  std::vector<uint32_t> pos(readers);
  for (auto& p : pos) p = any(rng);

  std::vector<uint32_t> perm;
  std::vector<double> cdf;
  if (kind == Kind::kZipf) {
    s.zipf_s = 0.6 + 0.6 * u01(rng);
    perm.resize(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    cdf.resize(n);
    double acc = 0;
    for (uint32_t i = 0; i < n; ++i) cdf[i] = acc += std::pow(i + 1.0, -s.zipf_s);
    for (auto& c : cdf) c /= acc;
  }
  size_t epoch_pos = n;  // force a shuffle at the start
  for (size_t i = 0; i < samples; ++i) {
    const uint32_t r = kind == Kind::kEpoch ? static_cast<uint32_t>(i % readers)
                                            : static_cast<uint32_t>(rng() % readers);
    uint32_t child = 0;
    switch (kind) {
      case Kind::kSequential: {
        double x = u01(rng);
        if (x < 0.95) pos[r] = (pos[r] + (x < 0.095 ? 2 : 1)) % n;
        else pos[r] = any(rng);
        child = pos[r];
        break;
      }
      case Kind::kMixed:
        if (u01(rng) < 0.5) pos[r] = (pos[r] + 1) % n;
        else pos[r] = any(rng);
        child = pos[r];
        break;
      case Kind::kUniform: child = any(rng); break;
      case Kind::kEpoch:
        if (epoch_pos == n) {
          if (perm.size() != n) {
            perm.resize(n);
            std::iota(perm.begin(), perm.end(), 0);
          }
          std::shuffle(perm.begin(), perm.end(), rng);
          epoch_pos = 0;
        }
        child = perm[epoch_pos++];
        break;
      case Kind::kZipf: {
        double x = u01(rng);
        size_t rank = std::lower_bound(cdf.begin(), cdf.end(), x) - cdf.begin();
        child = perm[std::min<size_t>(rank, n - 1)];
        break;
      }
    }
    s.accesses.push_back({1000 + r, child});
  }
  return s;
}

// Drives a stream into `tree` one access at a time. Block level: file
// "s/data.bin" of N units, each access one whole unit. File level: directory
// "s/" of N files of 64 KiB ("s/f000123"), each access a whole file.
// node_path() is the path whose label is checked.
struct Driver {
  const Stream& s;
  AccessStreamTree& tree;
  uint64_t t = 0;
  uint64_t unit;
  explicit Driver(const Stream& st, AccessStreamTree& tr) : s(st), tree(tr), unit(tr.config().unit_bytes) {
    if (!s.block_level) tree.NoteListing("s/", s.n_children);
  }
  std::string node_path() const { return s.block_level ? "s/data.bin" : "s/"; }
  void Step(size_t i) {
    const Access& a = s.accesses[i];
    t += 100;
    if (s.block_level) {
      tree.Record(t, a.pid, "s/data.bin", uint64_t{a.child} * unit, unit, uint64_t{s.n_children} * unit);
    } else {
      char name[32];
      std::snprintf(name, sizeof name, "s/f%07u", a.child);
      tree.Record(t, a.pid, name, 0, 65536, 65536);
    }
  }
};

}  // namespace igt::stream::synth
