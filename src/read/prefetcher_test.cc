// Prefetcher: fetches into the store, respects its budget (drops beyond it,
// never queues without bound), skips cached and already-queued units. Workers
// are held in the begin hook where a test needs a deterministic queue.

#include "src/read/prefetcher.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "backends/fault_backend.h"
#include "backends/memory_backend.h"
#include "igtcache/block_store.h"
#include "igtcache/metrics.h"

using namespace igt;

namespace {

constexpr uint64_t kUnit = 64 << 10;

struct Fx {
  std::shared_ptr<MemoryBackend> mem = std::make_shared<MemoryBackend>();
  Metrics metrics;
  std::filesystem::path dir;
  std::unique_ptr<BlockStore> store;
  std::unique_ptr<ReadPipeline> pipe;
  Fx() {
    dir = std::filesystem::temp_directory_path() / ("igt-prefetch-test-" + std::to_string(getpid()) + "-" +
                                                    std::to_string(counter++));
    std::filesystem::remove_all(dir);
    BlockStoreOptions o;
    o.dir = dir.string();
    o.max_bytes = 64 << 20;
    o.min_free_ratio = 0;
    auto s = BlockStore::Open(o, &metrics);
    REQUIRE(s.has_value());
    store = std::move(*s);
    pipe = std::make_unique<ReadPipeline>(mem.get(), store.get(), &metrics, ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 4 * kUnit});
    std::mt19937 rng(1);
    std::string data(16 * kUnit, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    mem->Put("a/big", data);
  }
  ~Fx() {
    pipe.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }
  FileVersion Version() { return FileVersion{"a/big", mem->EtagOf("a/big"), 16 * kUnit, {}}; }
  static inline int counter = 0;
};

// Waits (bounded) until the prefetcher holds nothing: all jobs ran.
void Drain(const Prefetcher& p) {
  for (int i = 0; i < 30000 && p.stats().held_bytes != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(p.stats().held_bytes == 0);
}

// A gate the workers wait on in the begin hook.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait() {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return open; });
  }
  void Open() {
    {
      std::lock_guard lk(mu);
      open = true;
    }
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("prefetcher fetches units into the store and skips cached ones", "[prefetch]") {
  Fx fx;
  {
    Prefetcher p(fx.pipe.get(), fx.store.get(), Prefetcher::Options{2, 16 * kUnit, 4});
    CHECK(p.Submit(fx.Version(), 2, 5) == 4);
    Drain(p);
    for (uint64_t u = 2; u <= 5; ++u) CHECK(fx.store->Contains(UnitKey{"a/big", fx.mem->EtagOf("a/big"), u}));
    // Cached units are not queued again; the range is clamped at EOF.
    CHECK(p.Submit(fx.Version(), 2, 5) == 0);
    CHECK(p.Submit(fx.Version(), 14, 40) == 2);
    Drain(p);
    CHECK(p.stats().fetched_units == 6);
  }
}

TEST_CASE("prefetcher: jobs of tiny files hold a floor of the budget, so their number is bounded", "[prefetch]") {
  // Files of 100 bytes: each job counted 100 bytes, and a budget of 1 MiB
  // queued 10,485 of them (their bookkeeping, not their data, is the
  // memory). Now each holds kMinJobHeldBytes: 256 of them.
  Fx fx;
  for (int i = 0; i < 400; ++i) fx.mem->Put("tiny/" + std::to_string(i), std::string(100, 'x'));
  Gate gate;
  Prefetcher::Options o{1, 1 << 20, 8};
  Prefetcher p(fx.pipe.get(), fx.store.get(), o, [&](const std::string&, uint64_t, uint64_t) { gate.Wait(); });
  size_t queued = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string k = "tiny/" + std::to_string(i);
    queued += p.Submit(FileVersion{k, fx.mem->EtagOf(k), 100, {}}, 0, 0, Prefetcher::Priority::kReadahead);
  }
  CHECK(queued == (1 << 20) / Prefetcher::kMinJobHeldBytes);
  CHECK(p.stats().held_bytes == queued * Prefetcher::kMinJobHeldBytes);
  CHECK(p.stats().dropped_units == 400 - queued);
  gate.Open();
  Drain(p);
  CHECK(p.stats().fetched_units == queued);
}

TEST_CASE("prefetcher: budget bounds queued + running bytes, overflow is dropped", "[prefetch]") {
  Fx fx;
  Gate gate;
  Prefetcher::Options o{1, 4 * kUnit, 2};  // 4 units at most, jobs of 2 units
  Prefetcher p(fx.pipe.get(), fx.store.get(), o, [&](const std::string&, uint64_t, uint64_t) { gate.Wait(); });
  // The worker is held: jobs pile up against the budget.
  CHECK(p.Submit(fx.Version(), 0, 1) == 2);
  CHECK(p.Submit(fx.Version(), 2, 3) == 2);
  CHECK(p.Submit(fx.Version(), 4, 9) == 0);  // over budget: dropped, not queued
  // Already queued units are not queued twice.
  CHECK(p.Submit(fx.Version(), 0, 3) == 0);
  auto st = p.stats();
  CHECK(st.held_bytes == 4 * kUnit);
  CHECK(st.peak_held_bytes == 4 * kUnit);
  CHECK(st.dropped_units == 6);
  gate.Open();
  Drain(p);
  CHECK(p.stats().fetched_units == 4);
  CHECK(p.stats().peak_held_bytes <= o.budget_bytes);
  // Budget freed: new work is accepted again.
  CHECK(p.Submit(fx.Version(), 4, 5) == 2);
  Drain(p);
}

TEST_CASE("prefetcher: a file's last close drops its queued readahead, not running jobs or background work", "[prefetch]") {
  Fx fx;
  fx.mem->Put("a/other", std::string(4 * kUnit, 'o'));
  const FileVersion other{"a/other", fx.mem->EtagOf("a/other"), 4 * kUnit, {}};
  Gate gate;
  Prefetcher::Options o{1, 16 * kUnit, 2};
  std::atomic<int> started{0};
  Prefetcher p(fx.pipe.get(), fx.store.get(), o, [&](const std::string&, uint64_t, uint64_t) {
    ++started;
    gate.Wait();
  });
  using P = Prefetcher::Priority;
  CHECK(p.Submit(fx.Version(), 0, 1) == 2);  // taken by the worker, held
  for (int i = 0; i < 3000 && started.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(started.load() == 1);
  CHECK(p.Submit(fx.Version(), 2, 5) == 4);                 // queued readahead of the file
  CHECK(p.Submit(fx.Version(), 10, 11, P::kBackground) == 2);  // background work of it
  CHECK(p.Submit(other, 0, 1) == 2);                        // another file's readahead
  const uint64_t held = p.stats().held_bytes;
  CHECK(p.DropReadahead(fx.Version()) == 4);
  CHECK(p.stats().held_bytes == held - 4 * kUnit);
  CHECK(p.DropReadahead(fx.Version()) == 0);  // nothing left to drop
  gate.Open();
  Drain(p);
  const std::string etag = fx.mem->EtagOf("a/big");
  for (uint64_t u : {0, 1, 10, 11}) CHECK(fx.store->Contains(UnitKey{"a/big", etag, u}));
  for (uint64_t u : {2, 3, 4, 5}) CHECK_FALSE(fx.store->Contains(UnitKey{"a/big", etag, u}));
  CHECK(fx.store->Contains(UnitKey{"a/other", other.etag, 1}));
  CHECK(p.stats().held_bytes == 0);
  // Queued again after the drop: fetched.
  CHECK(p.Submit(fx.Version(), 2, 3) == 2);
  Drain(p);
  CHECK(fx.store->Contains(UnitKey{"a/big", etag, 2}));
}

TEST_CASE("prefetcher: a job that throws fails alone: the worker lives on and its budget is given back", "[prefetch]") {
  Fx fx;
  std::atomic<int> throws{1};
  Prefetcher p(fx.pipe.get(), fx.store.get(), Prefetcher::Options{1, 4 * kUnit, 2},
               [&](const std::string&, uint64_t, uint64_t) {
                 if (throws.fetch_sub(1) > 0) throw std::bad_alloc();
               });
  CHECK(p.Submit(fx.Version(), 0, 1) == 2);
  Drain(p);
  CHECK(p.stats().failed_jobs == 1);
  // The one worker still runs jobs.
  CHECK(p.Submit(fx.Version(), 0, 1) == 2);
  Drain(p);
  CHECK(p.stats().fetched_units == 2);
  CHECK(fx.store->Contains(UnitKey{"a/big", fx.mem->EtagOf("a/big"), 1}));
}

TEST_CASE("prefetcher: readahead runs before background work and is never dropped for it", "[prefetch]") {
  Fx fx;
  // Jobs wait in the begin hook for a pass; the test hands out passes one at
  // a time, so exactly one thread is free whenever the next job is chosen.
  std::mutex mu;
  std::condition_variable cv;
  int passes = 0;
  std::vector<uint64_t> order;  // first unit of each job, in the order jobs start
  auto started = [&](size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(30), [&] { return order.size() >= n; });
  };
  auto allow = [&](int n) {
    {
      std::lock_guard lk(mu);
      passes += n;
    }
    cv.notify_all();
  };
  // 3 threads: background work may use at most 1 (two stay for readahead).
  Prefetcher::Options o{3, 8 * kUnit, 1};
  Prefetcher p(fx.pipe.get(), fx.store.get(), o, [&](const std::string&, uint64_t first, uint64_t) {
    std::unique_lock lk(mu);
    order.push_back(first);
    cv.notify_all();
    cv.wait(lk, [&] { return passes > 0; });
    --passes;
  });
  using P = Prefetcher::Priority;
  // Background holds at most half the budget: 4 of 8 units; the rest is dropped.
  CHECK(p.Submit(fx.Version(), 8, 15, P::kBackground) == 4);
  CHECK(p.stats().dropped_units == 4);
  REQUIRE(started(1));  // one background job runs: its whole share of the threads
  // Readahead still finds room in the budget.
  CHECK(p.Submit(fx.Version(), 0, 3) == 4);
  CHECK(p.stats().held_bytes == 8 * kUnit);
  REQUIRE(started(3));  // the two other threads take readahead, not background
  {
    std::lock_guard lk(mu);
    // Two threads took jobs 0 and 1 at once; which one logs first is the
    // scheduler's choice.
    REQUIRE(order.size() == 3);
    CHECK(order[0] == 8);
    CHECK(std::min(order[1], order[2]) == 0);
    CHECK(std::max(order[1], order[2]) == 1);
  }
  // Each thread freed takes the next readahead job while there is one.
  allow(1);
  REQUIRE(started(4));
  allow(1);
  REQUIRE(started(5));
  {
    std::lock_guard lk(mu);
    CHECK(order[3] == 2);
    CHECK(order[4] == 3);
  }
  allow(100);
  Drain(p);
  std::lock_guard lk(mu);
  CHECK(order.size() == 8);
  CHECK(p.stats().fetched_units == 8);
}

TEST_CASE("prefetcher: fills take a quarter of the budget, so readahead and speculative plans are not dropped for them", "[prefetch]") {
  Fx fx;
  Gate gate;  // every job waits: the fill's jobs hold their bytes
  // 8 threads (6 for background work), budget 8 units, 1-unit jobs: six fill
  // jobs could run, but with background work about fills hold at most 2
  // units (a quarter of the budget).
  Prefetcher::Options o{8, 8 * kUnit, 1};
  o.fill_share_hold = std::chrono::hours(1);  // the Submit below counts for the whole test
  Prefetcher p(fx.pipe.get(), fx.store.get(), o,
               [&](const std::string&, uint64_t, uint64_t) { gate.Wait(); });
  CHECK(p.Submit(fx.Version(), 8, 8, Prefetcher::Priority::kBackground) == 1);  // background work came
  for (int i = 0; i < 30000 && p.stats().held_bytes < 1 * kUnit; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(p.Fill(fx.Version()));
  for (int i = 0; i < 30000 && p.stats().held_bytes < 3 * kUnit; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(p.stats().held_bytes == 3 * kUnit);  // the plan's unit and the fill's two
  // A speculative plan gets the rest of background's half, readahead the
  // other half.
  CHECK(p.Submit(fx.Version(), 9, 9, Prefetcher::Priority::kBackground) == 1);
  CHECK(p.Submit(fx.Version(), 12, 15) == 4);
  CHECK(p.stats().dropped_units == 0);
  CHECK(p.stats().held_bytes == 8 * kUnit);
  gate.Open();
  Drain(p);
}

TEST_CASE("prefetcher: a fill with no background work about takes background's whole half", "[prefetch]") {
  Fx fx;
  Gate gate;
  Prefetcher::Options o{8, 8 * kUnit, 1};
  o.fill_share_hold = std::chrono::milliseconds(0);  // no background Submit counts
  Prefetcher p(fx.pipe.get(), fx.store.get(), o, [&](const std::string&, uint64_t, uint64_t) { gate.Wait(); });
  REQUIRE(p.Fill(fx.Version()));
  for (int i = 0; i < 30000 && p.stats().held_bytes < 4 * kUnit; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(p.stats().held_bytes == 4 * kUnit);  // half the budget, not a quarter
  // Readahead still has the other half.
  CHECK(p.Submit(fx.Version(), 12, 15) == 4);
  CHECK(p.stats().dropped_units == 0);
  gate.Open();
  Drain(p);
}

TEST_CASE("prefetcher: destruction with queued work does not hang", "[prefetch]") {
  Fx fx;
  Gate gate;
  auto p = std::make_unique<Prefetcher>(fx.pipe.get(), fx.store.get(), Prefetcher::Options{1, 64 * kUnit, 1},
                                        [&](const std::string&, uint64_t, uint64_t) { gate.Wait(); });
  CHECK(p->Submit(fx.Version(), 0, 7) == 8);
  std::thread opener([&] { gate.Open(); });
  p.reset();  // drops queued jobs, lets the running one finish
  opener.join();
  SUCCEED();
}

TEST_CASE("prefetcher: a fill fetches every missing unit within the budget, never dropping", "[prefetch]") {
  Fx fx;
  // GETs wait at a gate until the fill is set up: the "already filling"
  // check below must not race with the fill finishing.
  auto fb = std::make_shared<FaultInjectingBackend>(fx.mem);
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false;
  fb->SetBeforeCall([&](FaultInjectingBackend::Op, const std::string&) {
    std::unique_lock lk(gate_mu);
    gate_cv.wait(lk, [&] { return open; });
  });
  ReadPipeline pipe(fb.get(), fx.store.get(), &fx.metrics, ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 4 * kUnit});
  Prefetcher::Options o{3, 4 * kUnit, 2};  // budget of 4 units, far below the 16-unit file
  Prefetcher p(&pipe, fx.store.get(), o);
  const auto v = fx.Version();
  CHECK(p.Submit(v, 5, 6) == 2);  // some units cached or queued already: skipped by the fill
  CHECK(p.Fill(v));
  CHECK_FALSE(p.Fill(v));  // already filling
  {
    std::lock_guard lk(gate_mu);
    open = true;
  }
  gate_cv.notify_all();
  for (int i = 0; i < 30000 && (p.stats().filling != 0 || p.stats().held_bytes != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto st = p.stats();
  CHECK(st.filling == 0);
  CHECK(st.held_bytes == 0);
  CHECK(st.dropped_units == 0);
  CHECK(st.peak_held_bytes <= o.budget_bytes);
  CHECK(st.fetched_units == 16);  // each unit once: 2 by Submit, 14 by the fill
  CHECK(st.fills == 1);
  for (uint64_t u = 0; u < 16; ++u) CHECK(fx.store->Contains(UnitKey{"a/big", v.etag, u}));
  // Nothing left to fetch: a new fill finishes at once.
  CHECK(p.Fill(v));
  for (int i = 0; i < 30000 && p.stats().filling != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(p.stats().fetched_units == 16);
}

TEST_CASE("prefetcher: a partial fill fetches no more than its limit, and a new limit goes on from there", "[prefetch]") {
  Fx fx;
  Prefetcher::Options o{3, 4 * kUnit, 2};
  Prefetcher p(fx.pipe.get(), fx.store.get(), o);
  const auto v = fx.Version();
  auto wait_idle = [&] {  // and the budget is all given back (also after a failed job)
    for (int i = 0; i < 30000 && (p.stats().filling != 0 || p.stats().held_bytes != 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(p.stats().held_bytes == 0);
  };
  CHECK(p.Fill(v, 5 * kUnit));
  wait_idle();
  CHECK(p.stats().fetched_units == 5);
  CHECK(p.stats().filling == 0);  // out of its limit, nothing in flight: forgotten
  CHECK(p.Fill(v, 3 * kUnit));    // starts again: the 5 cached units are skipped
  wait_idle();
  CHECK(p.stats().fetched_units == 8);
  uint64_t cached = 0;
  for (uint64_t u = 0; u < 16; ++u) cached += fx.store->Contains(UnitKey{"a/big", v.etag, u});
  CHECK(cached == 8);
  CHECK(p.Fill(v));  // no limit: the rest
  wait_idle();
  CHECK(p.stats().fetched_units == 16);
}

TEST_CASE("prefetcher: after a fill's GET fails, the file is not filled again for a while", "[prefetch]") {
  Fx fx;
  auto fb = std::make_shared<FaultInjectingBackend>(fx.mem);
  ReadPipeline pipe(fb.get(), fx.store.get(), &fx.metrics, ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 4 * kUnit});
  Prefetcher::Options o{3, 4 * kUnit, 2};
  o.fill_retry_after = std::chrono::milliseconds(5000);  // room for a stalled test thread
  Prefetcher p(&pipe, fx.store.get(), o);
  const auto v = fx.Version();
  fb->SetFailureProbability(1.0, Code::kUnavailable, 1);
  auto wait_idle = [&] {  // and the budget is all given back (also after a failed job)
    for (int i = 0; i < 30000 && (p.stats().filling != 0 || p.stats().held_bytes != 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(p.stats().held_bytes == 0);
  };
  REQUIRE(p.Fill(v, 8 * kUnit));
  wait_idle();
  CHECK(p.stats().failed_jobs >= 1);
  CHECK(p.stats().filling == 0);  // the failed fill stopped
  // A partial fill is proposed again on every read: refused while cooling down.
  CHECK_FALSE(p.Fill(v, 8 * kUnit));
  CHECK_FALSE(p.Fill(v));
  fb->SetFailureProbability(0, Code::kUnavailable, 1);
  bool again = false;  // the backend is back: filled again once the cool-down ends
  for (int i = 0; i < 600 && !(again = p.Fill(v, 8 * kUnit)); ++i)  // 30 s at most
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(again);
  wait_idle();
  uint64_t cached = 0;
  for (uint64_t u = 0; u < 16; ++u) cached += fx.store->Contains(UnitKey{"a/big", v.etag, u});
  CHECK(cached == 8);
}

TEST_CASE("prefetcher: nothing is prefetched while the cache takes no inserts", "[prefetch]") {
  // A full cache volume (or failing writes): every prefetched unit was
  // fetched and thrown away, and fetched again by the next plan (5x to 29x
  // the bytes read from the backend in a black-box test).
  Fx fx;
  Prefetcher p(fx.pipe.get(), fx.store.get(), Prefetcher::Options{1, 16 * kUnit, 4});
  const std::string tmp = fx.dir.string() + "/tmp";
  std::filesystem::rename(tmp, tmp + ".away");
  { std::ofstream(tmp) << "not a dir"; }  // every insert fails
  std::string buf(kUnit, '\0');
  REQUIRE(fx.pipe->Read(fx.Version(), 0, kUnit, buf.data()).has_value());  // served, not cached
  CHECK(fx.store->inserts_failing());
  CHECK(p.Submit(fx.Version(), 1, 4) == 0);
  CHECK_FALSE(p.Fill(fx.Version()));
  std::filesystem::remove(tmp);
  std::filesystem::rename(tmp + ".away", tmp);
  REQUIRE(fx.pipe->Read(fx.Version(), 5 * kUnit, kUnit, buf.data()).has_value());  // cached again
  CHECK_FALSE(fx.store->inserts_failing());
  CHECK(p.Submit(fx.Version(), 1, 4) == 4);
  Drain(p);
}

TEST_CASE("prefetcher: a fill running when the cache stops taking inserts waits, and queued jobs are dropped", "[prefetch]") {
  // A fill started before the volume filled up went on to the end of the
  // file, every unit fetched and thrown away (review of 865980b).
  Fx fx;
  const std::string tmp = fx.dir.string() + "/tmp";
  std::atomic<int> begun{0};
  Gate first_job;
  auto begin = [&](const std::string&, uint64_t, uint64_t) {
    if (begun++ == 0) first_job.Wait();
  };
  Prefetcher p(fx.pipe.get(), fx.store.get(), Prefetcher::Options{1, 16 * kUnit, 1}, begin);
  const auto v = fx.Version();
  REQUIRE(p.Fill(v));
  for (int i = 0; i < 30000 && begun == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(begun == 1);  // the fill's first job holds the only thread
  CHECK(p.Submit(v, 10, 12, Prefetcher::Priority::kReadahead) == 3);  // queued behind it
  std::filesystem::rename(tmp, tmp + ".away");
  { std::ofstream(tmp) << "not a dir"; }  // every insert fails from now on
  first_job.Open();  // its Put fails: the cache takes no inserts
  for (int i = 0; i < 30000 && !fx.store->inserts_failing(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(fx.store->inserts_failing());
  Drain(p);  // the queued readahead was dropped, its budget given back
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(begun == 1);  // and the fill took no job since
  CHECK(p.stats().filling == 1);
  const uint64_t gets = fx.metrics.backend_get_requests;
  CHECK(gets == 1);
  std::filesystem::remove(tmp);
  std::filesystem::rename(tmp + ".away", tmp);
  std::string buf(kUnit, '\0');
  REQUIRE(fx.pipe->Read(v, 15 * kUnit, kUnit, buf.data()).has_value());  // an insert succeeds
  CHECK_FALSE(fx.store->inserts_failing());
  for (int i = 0; i < 30000 && p.stats().filling != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(p.stats().filling == 0);  // the fill went on (woken by the poll: nothing notified it)
  uint64_t cached = 0;
  for (uint64_t u = 0; u < 16; ++u) cached += fx.store->Contains(UnitKey{"a/big", v.etag, u});
  CHECK(cached == 15);  // all but the first job's unit, thrown away
}
