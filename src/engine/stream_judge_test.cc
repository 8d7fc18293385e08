// StreamJudge: the piece size and lfu-or-lru choices on reads with known
// answers.

#include <catch2/catch.hpp>

#include <random>

#include "src/engine/stream_judge.h"

namespace igt::engine {
namespace {

constexpr uint64_t kMiB = 1 << 20, kPiece = 64 << 10;

StreamJudge::ModuleFn Lfu(double half_life_ms) {
  return [half_life_ms] { return std::move(*MakeEvictionPolicy("lfu", {{"half_life_ms", half_life_ms}})); };
}

TEST_CASE("StreamJudge of an lru stream: sparse random reads keep pieces, dense ones take whole units", "[judge]") {
  std::mt19937_64 rng(1);
  SECTION("4 KiB reads over 4 GiB, a 64 MiB share: a unit's other pieces are not read while cached") {
    StreamJudge j({}, {});
    for (int i = 0; i < 20000; ++i) j.OnRead(i * 1000, 0, (rng() % (1 << 20)) * 4096, 4096, 4ull << 30, 64 * kMiB);
    CHECK_FALSE(j.WholeUnits());
    CHECK(j.cost_us(true, false) < j.cost_us(true, true));
  }
  SECTION("64 KiB reads in a 32 MiB file, a 64 MiB share: whole units") {
    StreamJudge j({}, {});
    for (int i = 0; i < 2000; ++i) j.OnRead(i * 1000, 0, (rng() % 512) * kPiece, kPiece, 32 * kMiB, 64 * kMiB);
    CHECK(j.WholeUnits());
  }
  SECTION("a share far above kMaxEntries pieces is sampled, and judged the same") {
    StreamJudge j({}, {});
    for (int i = 0; i < 200000; ++i)
      j.OnRead(i * 1000, 0, (rng() % (1 << 14)) * kPiece, kPiece, 1ull << 30, 4ull << 30);
    CHECK(j.WholeUnits());
  }
  SECTION("no sub-units configured: whole units, nothing to judge") {
    StreamJudge j({.piece_bytes = 0}, {});
    for (int i = 0; i < 100; ++i) j.OnRead(i * 1000, 0, (rng() % (1 << 20)) * 4096, 4096, 4ull << 30, 64 * kMiB);
    CHECK(j.WholeUnits());
  }
}

TEST_CASE("StreamJudge: lru stands in for lfu when the hot set moves, not when it stays", "[judge]") {
  std::mt19937_64 rng(2);
  SECTION("random reads in a 16 MiB region moving along a 256 MiB file, 32 MiB share") {
    StreamJudge j({}, Lfu(60000));
    CHECK_FALSE(j.PreferLru());
    uint64_t t = 0;
    for (uint64_t region = 0; region < 16; ++region)
      for (int i = 0; i < 1000; ++i)
        j.OnRead(t += 500, 0, region * 16 * kMiB + (rng() % 256) * kPiece, kPiece, 256 * kMiB, 32 * kMiB);
    CHECK(j.PreferLru());
  }
  SECTION("Zipf-like popularity over 1,000 one-unit files, a 100 MiB share: lfu stays") {
    StreamJudge j({}, Lfu(60000));
    std::vector<double> w(1000);
    for (size_t k = 0; k < w.size(); ++k) w[k] = 1.0 / double(k + 1);
    std::discrete_distribution<int> pick(w.begin(), w.end());
    uint64_t t = 0;
    for (int i = 0; i < 30000; ++i) j.OnRead(t += 500, pick(rng), 0, kMiB, kMiB, 100 * kMiB);
    CHECK_FALSE(j.PreferLru());
    CHECK(j.cost_us(false, true) < j.cost_us(true, true));
  }
  SECTION("under its own module, pieces always, even where whole units look cheaper") {
    StreamJudge j({}, Lfu(60000));
    for (int i = 0; i < 2000; ++i) j.OnRead(i * 1000, 0, (rng() % 512) * kPiece, kPiece, 32 * kMiB, 64 * kMiB);
    CHECK(j.cost_us(false, true) < j.cost_us(false, false));
    CHECK_FALSE(j.PreferLru());
    CHECK_FALSE(j.WholeUnits());
  }
  SECTION("in the moving region, lru with whole units") {
    StreamJudge j({}, Lfu(60000));
    uint64_t t = 0;
    for (uint64_t region = 0; region < 16; ++region)
      for (int i = 0; i < 1000; ++i)
        j.OnRead(t += 500, 0, region * 16 * kMiB + (rng() % 256) * kPiece, kPiece, 256 * kMiB, 32 * kMiB);
    CHECK(j.PreferLru());
    CHECK(j.WholeUnits());
  }
}

}  // namespace
}  // namespace igt::engine
