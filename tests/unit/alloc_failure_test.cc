// Out of memory in a prefetch worker: one allocation made by the worker
// thread outside its fetches fails (std::bad_alloc), at each point in turn
// (the 1st, the 2nd, ... allocation after arming), until a round runs with
// no failure left to inject. Whatever fails, the daemon must live on (an exception escaping the
// worker thread calls std::terminate), the prefetch budget must come back,
// and the units must still be prefetched and read byte-exact afterwards (no
// tag left behind that marks a unit queued for good, no half-written unit
// served).
//
// This file replaces the global operator new/delete of its own binary
// (test_alloc_failure, nothing else runs there): every variant but the
// aligned ones (left to the runtime as a pair) goes to malloc/free, so a
// sanitizer sees matching calls. It behaves as the default unless a test
// arms it, and only on threads that armed themselves.

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "backends/memory_backend.h"
#include "igtcache/block_store.h"
#include "igtcache/metrics.h"
#include "src/read/prefetcher.h"

namespace {
std::atomic<long> g_fail_at{0};      // > 0: the g_fail_at-th allocation of an armed thread throws
std::atomic<long> g_failures{0};     // allocations made to fail so far
thread_local bool t_armed = false;  // this thread's allocations may fail
}  // namespace

namespace {
void* Allocate(std::size_t n) {
  if (t_armed && g_fail_at.load(std::memory_order_relaxed) > 0 && g_fail_at.fetch_sub(1) == 1) {
    g_failures.fetch_add(1);
    return nullptr;
  }
  return std::malloc(n ? n : 1);
}
}  // namespace

void* operator new(std::size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

using namespace igt;

TEST_CASE("prefetcher: out of memory at any allocation of a worker fails that job alone", "[prefetch][oom]") {
  constexpr uint64_t kUnit = 64 << 10;
  auto mem = std::make_shared<MemoryBackend>();
  Metrics metrics;
  const auto dir = std::filesystem::temp_directory_path() / ("igt-oom-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  BlockStoreOptions so;
  so.dir = dir.string();
  so.max_bytes = 256 << 20;
  so.min_free_ratio = 0;
  auto store = BlockStore::Open(so, &metrics);
  REQUIRE(store.has_value());
  {
  ReadPipeline pipe(mem.get(), store->get(), &metrics,
                    ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 2 * kUnit});
  std::mt19937 rng(3);
  std::string data(4 * kUnit + 1000, '\0');  // 5 units, the last one short
  for (auto& c : data) c = static_cast<char>(rng());
  auto version = [&](const std::string& key) { return FileVersion{key, mem->EtagOf(key), data.size(), {}}; };

  Prefetcher::Options po;
  po.threads = 1;
  po.budget_bytes = 16 * kUnit;
  po.max_job_units = 2;
  po.fill_retry_after = std::chrono::milliseconds(0);
  po.fill_share_hold = std::chrono::milliseconds(0);
  // The worker's own code: choosing a job and the bookkeeping after it. The
  // fetch (between the begin and end hooks) is left out: RocksDB is not
  // exception-safe (a write that throws leaves its write queue waiting for
  // good), and the pipeline and store have their own tests.
  Prefetcher p(
      &pipe, store->get(), po, [](const std::string&, uint64_t, uint64_t) { t_armed = false; },
      [](const std::string&, uint64_t, uint64_t) { t_armed = true; });
  auto settle = [&] {
    for (int i = 0; i < 20000; ++i) {
      auto st = p.stats();
      if (st.held_bytes == 0 && st.filling == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  };
  mem->Put("arm", data);
  REQUIRE(p.Submit(version("arm"), 0, 0) == 1);
  REQUIRE(settle());

  using P = Prefetcher::Priority;
  // Which job the worker picks first, and so how many allocations a round
  // makes, depends on timing: the loop ends after 5 rounds in a row with no
  // allocation left to fail, not at the first.
  long rounds_failed = 0, clean_in_a_row = 0;
  bool clean_round = false;
  for (long k = 1; k <= 2000 && clean_in_a_row < 5; ++k) {
    // A fresh file per round: readahead, background work and a fill of it.
    const std::string key = "r/" + std::to_string(k);
    mem->Put(key, data);
    const auto v = version(key);
    const long before = g_failures.load();
    g_fail_at = k;
    p.Submit(v, 0, 1);
    p.Submit(v, 2, 2, P::kBackground);
    p.Fill(v);
    INFO("allocation " << k);
    REQUIRE(settle());  // the budget comes back and the fill ends
    g_fail_at = 0;      // disarmed, if the round did not reach its k-th allocation
    clean_round = g_failures.load() == before;
    rounds_failed += !clean_round;
    clean_in_a_row = clean_round ? clean_in_a_row + 1 : 0;
    // Afterwards every unit can still be prefetched (no tag left marking it
    // queued) and reads back byte-exact.
    const size_t again = p.Submit(v, 0, 4);
    INFO("queued again " << again << " failed jobs " << p.stats().failed_jobs);
    REQUIRE(settle());
    for (uint64_t u = 0; u < 5; ++u) {
      INFO("unit " << u);
      CHECK(store->get()->Contains(UnitKey{key, v.etag, u}));
    }
    std::string out(data.size(), '\0');
    auto n = pipe.Read(v, 0, out.size(), out.data());
    REQUIRE(n.has_value());
    CHECK(*n == data.size());
    CHECK(out == data);
  }
  CHECK(clean_in_a_row == 5);  // every allocation point of a round was tried
  CHECK(rounds_failed >= 10);  // and there were some
  }
  store->reset();
  std::filesystem::remove_all(dir);
}
