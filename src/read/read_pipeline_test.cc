#include "src/read/read_pipeline.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <filesystem>
#include <fstream>
#include <random>
#include <future>
#include <thread>

#include "backends/fault_backend.h"
#include "backends/memory_backend.h"
#include "igtcache/block_store.h"

using namespace igt;

namespace {

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

struct Fixture {
  std::shared_ptr<MemoryBackend> mem = std::make_shared<MemoryBackend>();
  std::shared_ptr<FaultInjectingBackend> fb = std::make_shared<FaultInjectingBackend>(mem);
  Metrics metrics;
  std::filesystem::path dir;
  std::unique_ptr<BlockStore> store;
  std::unique_ptr<ReadPipeline> pipe;

  explicit Fixture(bool with_store, uint64_t unit = 64 << 10, uint64_t max_req = 256 << 10,
                   std::function<std::unique_ptr<EvictionPolicy>()> make_policy = {}) {
    if (with_store) {
      dir = std::filesystem::temp_directory_path() /
            ("igt-read-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
      std::filesystem::remove_all(dir);
      BlockStoreOptions o;
      o.dir = dir.string();
      o.max_bytes = 64 << 20;
      o.min_free_ratio = 0;
      o.make_policy = std::move(make_policy);
      auto s = BlockStore::Open(o, &metrics);
      REQUIRE(s.has_value());
      store = std::move(*s);
    }
    pipe = std::make_unique<ReadPipeline>(fb.get(), store.get(), &metrics,
                                          ReadPipeline::Options{.unit_size = unit, .max_request_bytes = max_req});
  }
  ~Fixture() {
    store.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  FileVersion Version(const std::string& key) {
    return FileVersion{key, mem->EtagOf(key), mem->Get(key).size(), {}};
  }
  static inline int counter = 0;
};

// LRU that records, per unit index inserted, whether the store said it was
// prefetched (UnitMeta::prefetched). Called under the store's lock.
struct RecordingPolicy final : EvictionPolicy {
  std::unique_ptr<EvictionPolicy> lru = *MakeEvictionPolicy("lru");
  std::shared_ptr<std::map<uint64_t, bool>> prefetched;
  explicit RecordingPolicy(std::shared_ptr<std::map<uint64_t, bool>> p) : prefetched(std::move(p)) {}
  std::string_view name() const override { return "recording"; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t t) override { lru->OnInsert(id, bytes, t); }
  void OnInsertUnit(const std::string& id, uint64_t bytes, uint64_t t, const UnitMeta& m) override {
    (*prefetched)[m.unit_index] = m.prefetched;
    lru->OnInsert(id, bytes, t);
  }
  void OnAccess(const std::string& id) override { lru->OnAccess(id); }
  void OnRemove(const std::string& id) override { lru->OnRemove(id); }
  std::optional<std::string> PickVictim() override { return lru->PickVictim(); }
  size_t size() const override { return lru->size(); }
};

}  // namespace

TEST_CASE("reads return exactly the object's bytes, at and past EOF") {
  Fixture f(false);
  const std::string data = Pattern(300 * 1024 + 17, 1);
  f.mem->Put("a", data);
  auto v = f.Version("a");
  std::mt19937 rng(7);
  std::vector<char> out(1 << 20);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % (data.size() + 1000);
    size_t len = rng() % (200 * 1024) + 1;
    auto n = f.pipe->Read(v, off, len, out.data());
    REQUIRE(n.has_value());
    size_t expect = off >= data.size() ? 0 : std::min<size_t>(len, data.size() - off);
    REQUIRE(*n == expect);
    REQUIRE(std::equal(out.begin(), out.begin() + expect, data.begin() + std::min<size_t>(off, data.size())));
  }
  FileVersion empty{"none", "x", 0, {}};
  CHECK(*f.pipe->Read(empty, 0, 10, out.data()) == 0);
}

TEST_CASE("adjacent misses are coalesced into one ranged GET, capped by max_request_bytes") {
  Fixture f(true, 64 << 10, 256 << 10);
  const std::string data = Pattern(1 << 20, 2);  // 16 units
  f.mem->Put("big", data);
  std::vector<char> out(1 << 20);
  auto n = f.pipe->Read(f.Version("big"), 0, 1 << 20, out.data());
  REQUIRE(n.has_value());
  CHECK(*n == data.size());
  CHECK(f.fb->counts().reads == 4);  // 16 units / 4 units per request
  CHECK(f.metrics.backend_get_bytes == data.size());
  // Warm: no backend reads at all.
  f.fb->ResetCounts();
  n = f.pipe->Read(f.Version("big"), 1000, 500000, out.data());
  REQUIRE(n.has_value());
  CHECK(f.fb->counts().reads == 0);
  CHECK(std::equal(out.begin(), out.begin() + 500000, data.begin() + 1000));
  CHECK(f.metrics.cache_hit_bytes == 500000);
}

TEST_CASE("concurrent readers fetch each unit once (single-flight)") {
  Fixture f(true, 64 << 10, 256 << 10);
  const std::string data = Pattern(2 << 20, 3);
  f.mem->Put("shared", data);
  f.fb->SetLatency(std::chrono::microseconds(2000));  // widen the race window
  auto v = f.Version("shared");
  std::atomic<bool> bad{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 16; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<char> out(300 << 10);
      for (int i = 0; i < 40; ++i) {
        uint64_t off = rng() % data.size();
        size_t len = rng() % out.size() + 1;
        auto n = f.pipe->Read(v, off, len, out.data());
        size_t expect = std::min<size_t>(len, data.size() - off);
        if (!n || *n != expect || !std::equal(out.begin(), out.begin() + expect, data.begin() + off))
          bad = true;
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK_FALSE(bad);
  CHECK(f.fb->counts().read_bytes <= data.size());  // no unit fetched twice
}

TEST_CASE("a changed or short backend answer is an error and is not cached") {
  Fixture f(true);
  const std::string v1 = Pattern(200 << 10, 4);
  f.mem->Put("obj", v1);
  auto old = f.Version("obj");
  f.mem->Put("obj", Pattern(200 << 10, 5));  // overwritten in the bucket
  std::vector<char> out(200 << 10);
  auto n = f.pipe->Read(old, 0, out.size(), out.data());
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().code() == Code::kChanged);
  CHECK(f.store->unit_count() == 0);

  f.fb->SetReadFault(FaultInjectingBackend::ReadFault::kTruncate);
  n = f.pipe->Read(f.Version("obj"), 0, out.size(), out.data());
  REQUIRE_FALSE(n.has_value());
  CHECK(f.store->unit_count() == 0);
  f.fb->SetReadFault(FaultInjectingBackend::ReadFault::kNone);
  n = f.pipe->Read(f.Version("obj"), 0, out.size(), out.data());
  REQUIRE(n.has_value());
  CHECK(std::equal(out.begin(), out.end(), f.mem->Get("obj").begin()));
}

TEST_CASE("backend failures reach the reader, a later read succeeds") {
  Fixture f(false);
  f.mem->Put("x", Pattern(1000, 6));
  f.fb->FailNext(1, Code::kUnavailable, FaultInjectingBackend::kRead);
  std::vector<char> out(1000);
  auto n = f.pipe->Read(f.Version("x"), 0, 1000, out.data());
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().code() == Code::kUnavailable);
  // The failed read counts in neither hit nor miss bytes (it returned
  // none); the one that succeeded counts its miss.
  CHECK(f.metrics.cache_miss_bytes == 0);
  CHECK(f.metrics.cache_miss_units == 0);
  n = f.pipe->Read(f.Version("x"), 0, 1000, out.data());
  REQUIRE(n.has_value());
  CHECK(*n == 1000);
  CHECK(f.metrics.cache_miss_bytes == 1000);
  CHECK(f.metrics.cache_miss_units == 1);
}

TEST_CASE("Fetch warms units without returning data") {
  Fixture f(true);
  f.mem->Put("w", Pattern(500 << 10, 7));
  REQUIRE(f.pipe->Fetch(f.Version("w"), 0, 100).ok());
  f.fb->ResetCounts();
  std::vector<char> out(500 << 10);
  REQUIRE(f.pipe->Read(f.Version("w"), 0, out.size(), out.data()).has_value());
  CHECK(f.fb->counts().reads == 0);
}

TEST_CASE("a file not admitted is read through: served, never stored, never prefetched") {
  Fixture f(true);
  f.mem->Put("tmp/x", Pattern(300 << 10, 3));
  f.mem->Put("keep/y", Pattern(100 << 10, 4));
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = 64 << 10, .max_request_bytes = 256 << 10,
                            .admit = [](const FileVersion& v) { return !v.key.starts_with("tmp/"); }});
  std::vector<char> out(300 << 10);
  for (int i = 0; i < 2; ++i) {  // each read goes to the backend
    auto n = f.pipe->Read(f.Version("tmp/x"), 0, out.size(), out.data());
    REQUIRE(n.has_value());
    CHECK(std::string(out.data(), *n) == f.mem->Get("tmp/x"));
  }
  CHECK(f.store->unit_count() == 0);
  f.fb->ResetCounts();
  REQUIRE(f.pipe->Fetch(f.Version("tmp/x"), 0, 4).ok());
  CHECK(f.fb->counts().reads == 0);
  CHECK(f.store->unit_count() == 0);
  REQUIRE(f.pipe->Read(f.Version("keep/y"), 0, out.size(), out.data()).has_value());
  CHECK(f.store->unit_count() == 2);  // the others are kept
  // An object listed without an ETag has no version to key its units by.
  f.mem->Put("keep/z", Pattern(100 << 10, 5));
  FileVersion no_etag = f.Version("keep/z");
  no_etag.etag = "";
  auto n = f.pipe->Read(no_etag, 0, 100 << 10, out.data());
  REQUIRE(n.has_value());
  CHECK(std::string(out.data(), *n) == f.mem->Get("keep/z"));
  CHECK(f.store->unit_count() == 2);
}

TEST_CASE("a file not admitted of one unit or less is read through in sub-units and not a unit per read") {
  // A tester's never_cache file of 1 MiB read in O_DIRECT 4 KiB pages: 256
  // GETs of the whole unit, 256 MiB. Now each read fetches the sub-units it
  // covers.
  constexpr uint64_t kUnit = 1 << 20, kSub = 64 << 10;
  Fixture f(true, kUnit, 8 << 20);
  f.mem->Put("tmp/one", Pattern(kUnit, 7));
  f.mem->Put("tmp/small", Pattern(10'000, 8));
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 8 << 20, .sub_unit_size = kSub,
                            .admit = [](const FileVersion& v) { return !v.key.starts_with("tmp/"); }});
  const std::string want = f.mem->Get("tmp/one");
  std::vector<char> out(4096);
  for (uint64_t off = 0; off < 64 * 4096; off += 4096) {
    auto n = f.pipe->Read(f.Version("tmp/one"), off, 4096, out.data());
    REQUIRE(n.has_value());
    CHECK(std::string(out.data(), *n) == want.substr(off, 4096));
  }
  INFO(f.fb->counts().read_bytes << " bytes in " << f.fb->counts().reads << " GETs");
  CHECK(f.fb->counts().read_bytes == 64 * kSub);  // 64 reads of 4 KiB, each one sub-unit (was 64 MiB)
  f.fb->ResetCounts();
  auto n = f.pipe->Read(f.Version("tmp/small"), 100, 200, out.data());
  REQUIRE(n.has_value());
  CHECK(std::string(out.data(), *n) == f.mem->Get("tmp/small").substr(100, 200));
  CHECK(f.fb->counts().read_bytes == 10'000);  // a file smaller than a sub-unit: whole
  CHECK(f.store->unit_count() == 0);
}

TEST_CASE("units cached before their file stopped being admitted are not served (a never_cache reload)") {
  Fixture f(true);
  f.mem->Put("data/x", Pattern(128 << 10, 6));
  auto admitted = std::make_shared<std::atomic<bool>>(true);
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = 64 << 10, .max_request_bytes = 256 << 10,
                            .admit = [admitted](const FileVersion&) { return admitted->load(); }});
  std::vector<char> out(128 << 10);
  REQUIRE(f.pipe->Read(f.Version("data/x"), 0, out.size(), out.data()).has_value());
  CHECK(f.store->unit_count() == 2);
  f.fb->ResetCounts();
  REQUIRE(f.pipe->Read(f.Version("data/x"), 0, out.size(), out.data()).has_value());
  CHECK(f.fb->counts().reads == 0);  // a hit while admitted
  admitted->store(false);
  auto n = f.pipe->Read(f.Version("data/x"), 0, out.size(), out.data());
  REQUIRE(n.has_value());
  CHECK(std::string(out.data(), *n) == f.mem->Get("data/x"));
  CHECK(f.fb->counts().reads > 0);  // read through, not from the cached units
}

TEST_CASE("looked_up runs once per read, with the read's misses in flight: a plan run there joins them") {
  Fixture f(true, 64 << 10, 256 << 10);
  const std::string data = Pattern(256 << 10, 12);  // 4 units
  f.mem->Put("p", data);
  const auto v = f.Version("p");
  std::vector<char> out(256 << 10);
  int calls = 0;
  // The live mount's prefetch plan runs here: a Fetch of the whole file
  // (run inline) skips the reader's units 0-1, already in flight, and
  // fetches units 2-3 only.
  auto plan = [&] {
    ++calls;
    REQUIRE(f.pipe->Fetch(v, 0, 3).ok());
  };
  auto n = f.pipe->Read(v, 0, 128 << 10, out.data(), plan);
  REQUIRE(n.has_value());
  CHECK(*n == 128 << 10);
  CHECK(std::equal(out.begin(), out.begin() + *n, data.begin()));
  CHECK(calls == 1);
  CHECK(f.fb->counts().read_bytes == data.size());  // each byte fetched once
  // A read all cached, and one past the end, run it once too.
  f.fb->ResetCounts();
  n = f.pipe->Read(v, 100, 200 << 10, out.data(), [&] { ++calls; });
  REQUIRE(n.has_value());
  CHECK(std::equal(out.begin(), out.begin() + *n, data.begin() + 100));
  CHECK(f.pipe->Read(v, data.size(), 10, out.data(), [&] { ++calls; }).value() == 0);
  CHECK(calls == 3);
  CHECK(f.fb->counts().reads == 0);
}

TEST_CASE("an exception between registering a read's misses and fetching them ends their flights") {
  // The live mount's looked_up runs the policy engine, which may throw (out
  // of memory). The read's misses were already in the flight table: another
  // reader of those units joined them and waited forever.
  Fixture f(true, 64 << 10, 256 << 10);
  const std::string data = Pattern(256 << 10, 21);
  f.mem->Put("x", data);
  const auto v = f.Version("x");
  std::vector<char> out(data.size());
  CHECK_THROWS_AS(f.pipe->Read(v, 0, data.size(), out.data(), [] { throw std::bad_alloc(); }),
                  std::bad_alloc);
  CHECK(f.fb->counts().reads == 0);  // thrown before any GET
  // The same units again, on this thread: it would wait forever on the
  // abandoned flights. Also through Fetch (a prefetch skips units in flight).
  REQUIRE(f.pipe->Fetch(v, 0, 1).ok());
  auto n = f.pipe->Read(v, 0, data.size(), out.data());
  REQUIRE(n.has_value());
  CHECK(std::string(out.data(), *n) == data);
  CHECK(f.fb->counts().read_bytes == data.size());  // each byte fetched once
}

TEST_CASE("a reader waiting on flights whose leader threw is woken, and fetches them itself") {
  Fixture f(true, 64 << 10, 256 << 10);
  const std::string data = Pattern(256 << 10, 22);  // 4 units
  f.mem->Put("x", data);
  const auto v = f.Version("x");
  std::vector<char> a_out(data.size()), b_out(data.size());
  std::future<Result<size_t>> b;
  // A registers the 4 misses, then (in looked_up) lets B join them and throws.
  auto a_hook = [&] {
    b = std::async(std::launch::async, [&] { return f.pipe->Read(v, 0, data.size(), b_out.data()); });
    for (int i = 0; i < 30000 && f.metrics.singleflight_waits.load() < 4; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(f.metrics.singleflight_waits.load() == 4);  // B waits on A's flights
    throw std::runtime_error("engine failed");
  };
  CHECK_THROWS_AS(f.pipe->Read(v, 0, data.size(), a_out.data(), a_hook), std::runtime_error);
  // B was woken by the abandoned flights and read the units itself, not EIO.
  auto n = b.get();
  REQUIRE(n.has_value());
  CHECK(std::string(b_out.data(), *n) == data);
  CHECK(f.fb->counts().read_bytes == data.size());
}

TEST_CASE("the store learns which inserts a prefetch made: a reader's misses are reads, Fetch's units prefetches") {
  // The live engine counts an insert as a prefetch from UnitMeta::prefetched
  // (readahead share, window stream, waste). Before, it looked the unit up in
  // the prefetch jobs under way by whole-unit number: a reader's own miss in
  // a job's range counted as a prefetch, and a job's sub-units did not.
  constexpr uint64_t kUnit = 256 << 10, kSub = 64 << 10;
  auto seen = std::make_shared<std::map<uint64_t, bool>>();
  Fixture f(true, kUnit, 1 << 20, [seen] { return std::make_unique<RecordingPolicy>(seen); });
  const std::string data = Pattern(4 * kUnit, 13);
  f.mem->Put("w", data);
  const auto v = f.Version("w");
  std::vector<char> out(2 * kUnit);
  // Whole units: the reader leads units 0-1; a Fetch of units 0-3, run while
  // they are in flight, inserts 2-3.
  REQUIRE(f.pipe->Read(v, 0, 2 * kUnit, out.data(), [&] { REQUIRE(f.pipe->Fetch(v, 0, 3).ok()); }).has_value());
  CHECK(*seen == std::map<uint64_t, bool>{{0, false}, {1, false}, {2, true}, {3, true}});
  // Sub-units: a reader's miss of one, then a Fetch completing the unit.
  f.mem->Put("e", data);
  const auto e = f.Version("e");
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 1 << 20,
                            .sub_unit_size = kSub, .sub_units = [](const FileVersion&) { return true; }});
  seen->clear();
  REQUIRE(f.pipe->Read(e, 100, 100, out.data()).has_value());
  REQUIRE(f.pipe->Fetch(e, 0, 0).ok());
  REQUIRE(seen->size() == 4);
  for (const auto& [idx, prefetched] : *seen) CHECK(prefetched == (idx != SubUnitIndex(0, 16)));
}

TEST_CASE("a miss in a file read at random fetches and caches only the sub-units it covers") {
  constexpr uint64_t kUnit = 256 << 10, kSub = 64 << 10;
  Fixture f(true, kUnit, 1 << 20);
  std::atomic<bool> subs{true};
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 1 << 20,
                            .sub_unit_size = kSub,
                            .sub_units = [&](const FileVersion&) { return subs.load(); }});
  const std::string data = Pattern(4 * kUnit + 1000, 11);
  f.mem->Put("emb", data);
  auto v = f.Version("emb");
  std::vector<char> out(kUnit);
  auto read = [&](uint64_t off, size_t len) {
    auto n = f.pipe->Read(v, off, len, out.data());
    REQUIRE(n.has_value());
    REQUIRE(*n == len);
    REQUIRE(std::equal(out.begin(), out.begin() + len, data.begin() + off));
  };
  // 4 KiB inside the second sub-unit of unit 1: one 64 KiB GET.
  read(kUnit + kSub + 100, 4096);
  CHECK(f.metrics.backend_get_bytes.load() == kSub);
  CHECK(f.store->Contains(UnitKey{"emb", v.etag, SubUnitIndex(kUnit + kSub, 16)}));
  CHECK_FALSE(f.store->Contains(UnitKey{"emb", v.etag, 1}));
  // Again: a hit, no GET.
  read(kUnit + kSub, kSub);
  CHECK(f.metrics.backend_get_bytes.load() == kSub);
  // A read across two sub-units, one cached: only the other is fetched.
  read(kUnit + kSub + 10, kSub);
  CHECK(f.metrics.backend_get_bytes.load() == 2 * kSub);
  // Across a unit boundary: two adjacent sub-units, one GET.
  const uint64_t gets = f.metrics.backend_get_requests.load();
  read(2 * kUnit - 100, 200);
  CHECK(f.metrics.backend_get_requests.load() == gets + 1);
  CHECK(f.metrics.backend_get_bytes.load() == 4 * kSub);
  // The short last sub-unit of the file.
  read(4 * kUnit + 10, 990);
  CHECK(f.metrics.backend_get_bytes.load() == 4 * kSub + 1000);
  // Sequential again (whole units): unit 0, with no sub-unit cached, is
  // fetched whole and then served whole, also once read at random again.
  subs = false;
  read(0, kUnit);
  CHECK(f.store->Contains(UnitKey{"emb", v.etag, 0}));
  CHECK(f.metrics.backend_get_bytes.load() == 4 * kSub + 1000 + kUnit);
  subs = true;
  read(3 * kSub, 100);
  CHECK(f.metrics.backend_get_bytes.load() == 4 * kSub + 1000 + kUnit);
  // Unit 1 has sub-units 1-3 cached: a whole read fetches only sub-unit 0,
  // whatever the file's label now (fetched whole, those bytes would come twice).
  subs = false;
  read(kUnit, kUnit);
  CHECK(f.metrics.backend_get_bytes.load() == 5 * kSub + 1000 + kUnit);
  CHECK_FALSE(f.store->Contains(UnitKey{"emb", v.etag, 1}));
  // Nor does a prefetch fetch it whole.
  REQUIRE(f.pipe->Fetch(v, 1, 1).ok());
  CHECK(f.metrics.backend_get_bytes.load() == 5 * kSub + 1000 + kUnit);
  CHECK_FALSE(f.store->Contains(UnitKey{"emb", v.etag, 1}));
}

TEST_CASE("Fetch completes a unit with sub-units cached in sub-units: each byte is fetched once") {
  constexpr uint64_t kUnit = 256 << 10, kSub = 64 << 10;
  Fixture f(true, kUnit, 1 << 20);
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 1 << 20,
                            .sub_unit_size = kSub, .sub_units = [](const FileVersion&) { return true; }});
  const std::string data = Pattern(4 * kUnit, 12);
  f.mem->Put("emb", data);
  auto v = f.Version("emb");
  std::vector<char> out(kSub);
  REQUIRE(f.pipe->Read(v, kUnit + 100, 100, out.data()).has_value());  // one sub-unit of unit 1
  CHECK(f.metrics.backend_get_bytes.load() == kSub);
  // A fill of the whole file: units 0, 2 and 3 whole, unit 1's three other sub-units.
  REQUIRE(f.pipe->Fetch(v, 0, 3).ok());
  CHECK(f.metrics.backend_get_bytes.load() == 4 * kUnit);
  CHECK_FALSE(f.store->Contains(UnitKey{"emb", v.etag, 1}));
  for (uint64_t u : {0, 2, 3}) CHECK(f.store->Contains(UnitKey{"emb", v.etag, u}));
  for (uint64_t p = kUnit; p < 2 * kUnit; p += kSub) CHECK(f.store->Contains(UnitKey{"emb", v.etag, SubUnitIndex(p, 16)}));
  // Unit 1 is served from its sub-units: no byte twice.
  std::vector<char> all(kUnit);
  REQUIRE(f.pipe->Read(v, kUnit, kUnit, all.data()).has_value());
  CHECK(std::equal(all.begin(), all.end(), data.begin() + kUnit));
  CHECK(f.metrics.backend_get_bytes.load() == 4 * kUnit);
}

TEST_CASE("a changed object fails a sub-unit fetch and caches nothing") {
  constexpr uint64_t kUnit = 256 << 10, kSub = 64 << 10;
  Fixture f(true, kUnit, 1 << 20);
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 1 << 20,
                            .sub_unit_size = kSub, .sub_units = [](const FileVersion&) { return true; }});
  f.mem->Put("emb", Pattern(2 * kUnit, 12));
  auto v = f.Version("emb");
  f.mem->Put("emb", Pattern(2 * kUnit, 13));  // a new version behind the mount's back
  std::vector<char> out(kSub);
  auto n = f.pipe->Read(v, kSub, kSub, out.data());
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().code() == Code::kChanged);
  CHECK_FALSE(f.store->Contains(UnitKey{"emb", v.etag, SubUnitIndex(kSub, 16)}));
}

namespace {
// lru that counts the reads the store reports.
class CountingLru final : public EvictionPolicy {
 public:
  explicit CountingLru(std::atomic<int>* reads) : inner_(*MakeEvictionPolicy("lru")), reads_(reads) {}
  std::string_view name() const override { return "counting-lru"; }
  void OnInsert(const std::string& id, uint64_t b, uint64_t t) override { inner_->OnInsert(id, b, t); }
  void OnAccess(const std::string& id) override {
    ++*reads_;
    inner_->OnAccess(id);
  }
  void OnRemove(const std::string& id) override { inner_->OnRemove(id); }
  std::optional<std::string> PickVictim() override { return inner_->PickVictim(); }
  size_t size() const override { return inner_->size(); }

 private:
  std::unique_ptr<EvictionPolicy> inner_;
  std::atomic<int>* reads_;
};
}  // namespace

namespace {
// A prefetch of unit 1 of `v` (64 KiB units) whose GET waits at a gate
// until a reader of out.size() bytes in that unit has joined its flight;
// then `before_release` runs and the gate opens. Catch2's assertions are
// not thread-safe: the threads only keep their results, returned here.
struct JoinedRead {
  bool fetched;
  Result<size_t> n;
};
JoinedRead ReadJoiningPrefetch(ReadPipeline& pipe, FaultInjectingBackend& fb, const Metrics& metrics,
                               const FileVersion& v, std::vector<char>& out,
                               const std::function<void()>& before_release) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, entered = false;
  fb.SetBeforeCall([&](auto, const std::string&) {
    std::unique_lock lk(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lk, [&] { return release; });
  });
  bool fetched = false;
  std::thread prefetch([&] { fetched = pipe.Fetch(v, 1, 1).ok(); });
  {
    std::unique_lock lk(mu);  // the prefetch leads the flight before the reader comes
    cv.wait(lk, [&] { return entered; });
  }
  Result<size_t> n = size_t{0};
  std::thread reader([&] { n = pipe.Read(v, (64 << 10) + 100, out.size(), out.data()); });
  // Bounded: a reader that never joins lets the gate open anyway, and the
  // caller's checks on the counts fail instead of the test hanging.
  for (int i = 0; i < 30000 && metrics.singleflight_waits.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  before_release();
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  prefetch.join();
  reader.join();
  fb.SetBeforeCall({});  // the hook refers to this frame
  return {fetched, std::move(n)};
}
}  // namespace

namespace {
// Holds the first backend call (a prefetch's GET) until Release, for tests
// of what other readers do meanwhile. Later calls pass.
struct HoldFirstCall {
  FaultInjectingBackend& fb;
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, released = false;
  explicit HoldFirstCall(FaultInjectingBackend& b) : fb(b) {
    fb.SetBeforeCall([this](auto, const std::string&) {
      std::unique_lock lk(mu);
      if (held) return;
      held = true;
      cv.notify_all();
      cv.wait(lk, [&] { return released; });
    });
  }
  void WaitHeld() {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return held; });
  }
  void Release() {
    {
      std::lock_guard lk(mu);
      released = true;
    }
    cv.notify_all();
  }
  ~HoldFirstCall() { fb.SetBeforeCall({}); }  // the hook refers to this object
};
}  // namespace

TEST_CASE("a reader whose own fetch fails returns at once, not after a prefetch it joined") {
  // During an outage a joined prefetch may take the whole retry budget; the
  // read has failed already and must not wait for it.
  Fixture f(true);
  const std::string data = Pattern(256 << 10, 43);
  f.mem->Put("w", data);
  auto v = f.Version("w");
  HoldFirstCall hold(*f.fb);  // the prefetch's GET
  std::thread prefetch([&] { (void)f.pipe->Fetch(v, 1, 1); });
  hold.WaitHeld();
  f.fb->FailNext(1, Code::kPermissionDenied, FaultInjectingBackend::kRead);  // the reader's own GET
  std::vector<char> out(128 << 10);
  auto reader = std::async(std::launch::async, [&] {  // units 1 (joined) and 2 (its own)
    return f.pipe->Read(v, (64 << 10) + 100, out.size(), out.data());
  });
  const bool early = reader.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  hold.Release();
  prefetch.join();
  CHECK(early);
  auto n = reader.get();
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().code() == Code::kPermissionDenied);
}

TEST_CASE("a reader that joins a prefetch in flight is seen by the store as a read") {
  // Else the policy engine never learns that a prefetched unit was read: it
  // stays "unread", holds readahead room and ends up counted as waste.
  Fixture f(false);
  std::atomic<int> reads{0};
  BlockStoreOptions o;
  o.dir = (std::filesystem::temp_directory_path() / ("igt-read-follow-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(o.dir);
  o.min_free_ratio = 0;
  o.make_policy = [&] { return std::make_unique<CountingLru>(&reads); };
  auto store = BlockStore::Open(o, &f.metrics);
  REQUIRE(store.has_value());
  ReadPipeline pipe(f.fb.get(), store->get(), &f.metrics, ReadPipeline::Options{.unit_size = 64 << 10});
  const std::string data = Pattern(256 << 10, 21);
  f.mem->Put("w", data);
  auto v = f.Version("w");
  // The reader joins the fetch of unit 1 (single-flight), then it completes.
  std::vector<char> out(4096);
  auto [fetched, n] = ReadJoiningPrefetch(pipe, *f.fb, f.metrics, v, out, [] {});
  CHECK(fetched);
  REQUIRE(n.has_value());
  CHECK(*n == out.size());
  CHECK(std::equal(out.begin(), out.end(), data.begin() + (64 << 10) + 100));
  CHECK(reads.load() == 1);
  f.fb->Reset();
  store->reset();
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("a reader's runs of misses are fetched at once, each one GET") {
  Fixture f(true, 64 << 10, 8 << 20);
  f.fb->SetLatency(std::chrono::milliseconds(5));
  const std::string data = Pattern(1 << 20, 9);  // 16 units
  f.mem->Put("w", data);
  std::vector<char> out(1 << 20);
  // Units 3 and 9 cached: a whole read has three runs of misses.
  REQUIRE(f.pipe->Read(f.Version("w"), 3 << 16, 1 << 16, out.data()) == size_t{1} << 16);
  REQUIRE(f.pipe->Read(f.Version("w"), 9 << 16, 1 << 16, out.data()) == size_t{1} << 16);
  f.fb->ResetCounts();
  REQUIRE(f.pipe->Read(f.Version("w"), 0, 1 << 20, out.data()) == size_t{1} << 20);
  CHECK(std::equal(out.begin(), out.end(), data.begin()));
  CHECK(f.fb->counts().reads == 3);
  f.fb->ResetCounts();
  REQUIRE(f.pipe->Read(f.Version("w"), 4096, 500000, out.data()) == size_t{500000});
  CHECK(f.fb->counts().reads == 0);  // all cached
  CHECK(std::equal(out.begin(), out.begin() + 500000, data.begin() + 4096));

  SECTION("a failed run fails the read and caches none of its units") {
    f.mem->Put("v", data);
    REQUIRE(f.pipe->Read(f.Version("v"), 5 << 16, 1 << 16, out.data()) == size_t{1} << 16);
    f.fb->FailNext(1, Code::kIoError, FaultInjectingBackend::kRead);
    CHECK_FALSE(f.pipe->Read(f.Version("v"), 0, 1 << 20, out.data()).has_value());
    int cached = 0;
    for (uint64_t u = 0; u < 16; ++u) cached += f.store->Contains(UnitKey{"v", f.mem->EtagOf("v"), u});
    CHECK(cached >= 1);   // unit 5, and the run that did not fail
    CHECK(cached <= 11);  // the failed run (5 or 10 units) is not cached
    REQUIRE(f.pipe->Read(f.Version("v"), 0, 1 << 20, out.data()) == size_t{1} << 20);
    CHECK(std::equal(out.begin(), out.end(), data.begin()));
  }
}

TEST_CASE("a read with more runs than kMaxParallelRuns fetches them all, in batches") {
  Fixture f(true, 64 << 10, 8 << 20);
  const std::string data = Pattern(1 << 20, 11);  // 16 units
  f.mem->Put("s", data);
  std::vector<char> out(1 << 20);
  for (uint64_t u = 1; u < 16; u += 2)  // every other unit cached: 8 runs of misses
    REQUIRE(f.pipe->Read(f.Version("s"), u << 16, 1 << 16, out.data()) == size_t{1} << 16);
  f.fb->ResetCounts();
  REQUIRE(f.pipe->Read(f.Version("s"), 0, 1 << 20, out.data()) == size_t{1} << 20);
  CHECK(std::equal(out.begin(), out.end(), data.begin()));
  CHECK(f.fb->counts().reads == 8);
  STATIC_REQUIRE(ReadPipeline::kMaxParallelRuns < 8);
}

TEST_CASE("a sub-unit miss racing a whole-unit prefetch of its unit: each byte is fetched once") {
  // The reader's check for a whole flight and the registration of its
  // sub-unit flights are one step, and so are the prefetch's check for
  // sub-units (cached or in flight) and the registration of its whole
  // flight: whichever comes first, the other waits for it or leaves the
  // unit alone. Many rounds, the two started together on a fresh unit.
  constexpr uint64_t kUnit = 16 << 10, kSub = 4 << 10;
  constexpr int kRounds = 400;
  Fixture f(true, kUnit, 1 << 20);
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = kUnit, .max_request_bytes = 1 << 20,
                            .sub_unit_size = kSub, .sub_units = [](const FileVersion&) { return true; }});
  const std::string data = Pattern(kRounds * kUnit, 31);
  f.mem->Put("race", data);
  auto v = f.Version("race");
  int twice = 0;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t before = f.metrics.backend_get_bytes.load();
    const uint64_t off = r * kUnit + (r % 4) * kSub + 10;
    std::atomic<int> ready{0};
    std::vector<char> out(100);
    Result<size_t> n = size_t{0};
    std::thread reader([&] {  // no Catch2 assertion here: not thread-safe
      ready.fetch_add(1);
      while (ready.load() < 2) {}
      n = f.pipe->Read(v, off, out.size(), out.data());
    });
    ready.fetch_add(1);
    while (ready.load() < 2) {}
    CHECK(f.pipe->Fetch(v, r, r).ok());
    reader.join();
    REQUIRE(n.has_value());
    CHECK(*n == out.size());
    CHECK(std::equal(out.begin(), out.end(), data.begin() + off));
    const uint64_t got = f.metrics.backend_get_bytes.load() - before;
    if (got != kSub && got != kUnit) ++twice;
  }
  CHECK(twice == 0);
}

TEST_CASE("a reader that waited on a prefetch that failed fetches the unit itself, once") {
  // The backend's retries were the prefetch's: the reader, which never asked
  // the backend, gets its own attempt before an error reaches it.
  Fixture f(true);
  const std::string data = Pattern(256 << 10, 41);
  f.mem->Put("w", data);
  auto v = f.Version("w");
  std::vector<char> out(4096);
  auto [fetched, n] = ReadJoiningPrefetch(*f.pipe, *f.fb, f.metrics, v, out, [&] {
    f.fb->FailNext(1, Code::kIoError, FaultInjectingBackend::kRead);  // the prefetch's GET, once released
  });
  CHECK_FALSE(fetched);
  REQUIRE(n.has_value());
  CHECK(*n == out.size());
  CHECK(std::equal(out.begin(), out.end(), data.begin() + (64 << 10) + 100));
  CHECK(f.fb->counts().reads == 2);

  SECTION("a reader's own failed fetch is not tried again by the pipeline (the backend retried it)") {
    f.fb->Reset();
    f.fb->ResetCounts();
    f.mem->Put("x", data);
    auto x = f.Version("x");
    f.fb->FailNext(1, Code::kIoError, FaultInjectingBackend::kRead);
    CHECK_FALSE(f.pipe->Read(x, 0, 100, out.data()).has_value());
    CHECK(f.fb->counts().reads == 1);
  }
}

TEST_CASE("what cannot be kept is fetched by the part read, not by the whole unit") {
  // A file read through, or any file while the cache takes no inserts (a
  // full volume): a whole unit fetched for a part of it is thrown away, and
  // the next read of the unit's next part fetched it all again.
  Fixture f(true);
  f.mem->Put("tmp/x", Pattern(1 << 20, 7));
  f.mem->Put("data/y", Pattern(1 << 20, 8));
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = 256 << 10, .max_request_bytes = 256 << 10, .sub_unit_size = 64 << 10,
                            .admit = [](const FileVersion& v) { return !v.key.starts_with("tmp/"); }});
  std::vector<char> out(64 << 10);
  auto read_4 = [&](const std::string& key) {  // four 64 KiB reads through the first unit
    const uint64_t before = f.metrics.backend_get_bytes;
    for (uint64_t off = 0; off < (256 << 10); off += 64 << 10) {
      auto n = f.pipe->Read(f.Version(key), off, out.size(), out.data());
      REQUIRE(n.has_value());
      CHECK(std::string(out.data(), *n) == f.mem->Get(key).substr(off, 64 << 10));
    }
    return f.metrics.backend_get_bytes - before;
  };
  CHECK(read_4("tmp/x") == 256 << 10);  // was 1 MiB
  const std::string tmp = f.dir.string() + "/tmp";
  std::filesystem::rename(tmp, tmp + ".away");
  { std::ofstream(tmp) << "not a dir"; }  // every insert fails
  REQUIRE_FALSE(f.store->Put(UnitKey{"data/y", "e", 9}, {"x", 1}, false).ok());
  REQUIRE(f.store->inserts_failing());
  CHECK(read_4("data/y") == 256 << 10);
  std::filesystem::remove(tmp);
  std::filesystem::rename(tmp + ".away", tmp);
  // The first insert that succeeds (of a part: the cache was failing until
  // then) clears the flag; then a read of a part of a unit fetches the whole
  // unit, once.
  REQUIRE(f.pipe->Read(f.Version("data/y"), 256 << 10, 64 << 10, out.data()).has_value());
  CHECK_FALSE(f.store->inserts_failing());
  uint64_t before = f.metrics.backend_get_bytes;
  REQUIRE(f.pipe->Read(f.Version("data/y"), 512 << 10, 64 << 10, out.data()).has_value());
  CHECK(f.metrics.backend_get_bytes - before == 256 << 10);
  before = f.metrics.backend_get_bytes;
  REQUIRE(f.pipe->Read(f.Version("data/y"), 576 << 10, 64 << 10, out.data()).has_value());
  CHECK(f.metrics.backend_get_bytes == before);
}

TEST_CASE("a reader's read that failed for the backend fails again at once for that reader, once") {
  Fixture f(true);  // 64 KiB units
  // A memo that outlives a slow machine's test (the default 3 s could
  // expire between the failure and its repeat; "expired" below tests that).
  f.pipe = std::make_unique<ReadPipeline>(
      f.fb.get(), f.store.get(), &f.metrics,
      ReadPipeline::Options{.unit_size = 64 << 10, .max_request_bytes = 256 << 10, .failure_memo_ms = 600000});
  const std::string data = Pattern(300 << 10, 9);
  f.mem->Put("x", data);
  auto x = f.Version("x");
  std::vector<char> out(200 << 10);
  // Unit 0 cached before the outage.
  REQUIRE(f.pipe->Read(x, 0, 4096, out.data(), {}, /*reader=*/7).has_value());
  f.fb->ResetCounts();
  f.fb->FailNext(1, Code::kUnavailable, FaultInjectingBackend::kRead);
  auto n = f.pipe->Read(x, 0, 200 << 10, out.data(), {}, 7);  // a readahead: units 1-3 fetched, fail
  REQUIRE_FALSE(n.has_value());
  CHECK(f.fb->counts().reads == 1);
  // A page of it in the cached unit is served as ever.
  n = f.pipe->Read(x, 4096, 4096, out.data(), {}, 7);
  REQUIRE(n.has_value());
  CHECK(std::equal(out.begin(), out.begin() + 4096, data.begin() + 4096));
  // The kernel's retry of a missing page: the same error at once, no GET.
  n = f.pipe->Read(x, 70 << 10, 4096, out.data(), {}, 7);
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().code() == Code::kUnavailable);
  CHECK(n.error().message().find("failed") != std::string::npos);
  CHECK(f.fb->counts().reads == 1);
  CHECK(f.metrics.read_failures_repeated == 1);

  SECTION("once: the reader's next read asks the backend") {
    n = f.pipe->Read(x, 70 << 10, 4096, out.data(), {}, 7);
    REQUIRE(n.has_value());
    CHECK(std::equal(out.begin(), out.begin() + 4096, data.begin() + (70 << 10)));
    CHECK(f.fb->counts().reads == 2);
  }
  SECTION("another reader asks the backend") {
    n = f.pipe->Read(x, 70 << 10, 4096, out.data(), {}, 8);
    REQUIRE(n.has_value());
    CHECK(f.fb->counts().reads == 2);
  }
  SECTION("a reader with no name is never answered from memory") {
    f.fb->FailNext(1, Code::kUnavailable, FaultInjectingBackend::kRead);
    CHECK_FALSE(f.pipe->Read(x, 140 << 10, 4096, out.data()).has_value());
    CHECK(f.pipe->Read(x, 140 << 10, 4096, out.data()).has_value());
    CHECK(f.metrics.read_failures_repeated == 1);
  }
}

TEST_CASE("the failure memo keeps no answer about the object, and forgets after failure_memo_ms") {
  Fixture f(true);
  f.mem->Put("x", Pattern(300 << 10, 10));
  auto x = f.Version("x");
  std::vector<char> out(4096);
  SECTION("not found, changed, refused credentials: asked again") {
    for (Code c : {Code::kNotFound, Code::kChanged, Code::kPermissionDenied}) {
      f.fb->FailNext(1, c, FaultInjectingBackend::kRead);
      CHECK_FALSE(f.pipe->Read(x, 0, 4096, out.data(), {}, 7).has_value());
      CHECK(f.pipe->Read(x, 0, 4096, out.data(), {}, 7).has_value());
      f.store->Remove(UnitKey{"x", x.etag, 0});
    }
    CHECK(f.metrics.read_failures_repeated == 0);
  }
  SECTION("expired") {
    ReadPipeline pipe(f.fb.get(), f.store.get(), &f.metrics,
                      ReadPipeline::Options{.unit_size = 64 << 10, .failure_memo_ms = 1});
    f.fb->FailNext(1, Code::kTimeout, FaultInjectingBackend::kRead);
    CHECK_FALSE(pipe.Read(x, 0, 4096, out.data(), {}, 7).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(pipe.Read(x, 0, 4096, out.data(), {}, 7).has_value());
    CHECK(f.metrics.read_failures_repeated == 0);
  }
}

TEST_CASE("a prefetch registers one run at a time: a reader of a later run leads its own GET") {
  // Before, Fetch registered every piece of its range, then fetched the runs
  // in turn: a reader of the last run waited behind every GET before it.
  Fixture f(true, 64 << 10, 64 << 10);  // one unit per GET
  const std::string data = Pattern(256 << 10, 47);
  f.mem->Put("w", data);
  auto v = f.Version("w");
  HoldFirstCall hold(*f.fb);  // the prefetch's GET of unit 0
  std::thread prefetch([&] { (void)f.pipe->Fetch(v, 0, 3); });
  hold.WaitHeld();
  std::vector<char> out(4096);
  auto reader = std::async(std::launch::async, [&] { return f.pipe->Read(v, (3 << 16) + 10, out.size(), out.data()); });
  const bool early = reader.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  hold.Release();
  prefetch.join();
  CHECK(early);
  auto n = reader.get();
  REQUIRE(n.has_value());
  CHECK(std::equal(out.begin(), out.end(), data.begin() + (3 << 16) + 10));
  for (uint64_t u = 0; u < 4; ++u) CHECK(f.store->Contains(UnitKey{"w", v.etag, u}));
}

TEST_CASE("a prefetch stops at its first failed run") {
  // The rest of its range is left to readers: each further run would spend
  // a GET and its retries on a backend that just failed.
  Fixture f(true, 64 << 10, 64 << 10);
  f.mem->Put("w", Pattern(256 << 10, 48));
  auto v = f.Version("w");
  f.fb->FailNext(1, Code::kIoError, FaultInjectingBackend::kRead);
  f.fb->ResetCounts();
  CHECK_FALSE(f.pipe->Fetch(v, 0, 3).ok());
  CHECK(f.fb->counts().reads == 1);
  for (uint64_t u = 0; u < 4; ++u) CHECK_FALSE(f.store->Contains(UnitKey{"w", v.etag, u}));
  CHECK(f.pipe->Fetch(v, 0, 3).ok());  // a later prefetch fetches them all
  for (uint64_t u = 0; u < 4; ++u) CHECK(f.store->Contains(UnitKey{"w", v.etag, u}));
}

TEST_CASE("a reader joined to one run of another read waits for that run's GET only") {
  // Before, a read's runs ended together once the slowest GET was back.
  Fixture f(true, 64 << 10, 8 << 20);
  const std::string data = Pattern(1 << 20, 49);  // 16 units
  f.mem->Put("w", data);
  auto v = f.Version("w");
  std::vector<char> out(1 << 20);
  // Units 3 and 9 cached: a whole read has three runs, [0, 2] on the reader's thread.
  REQUIRE(f.pipe->Read(v, 3 << 16, 1 << 16, out.data()) == size_t{1} << 16);
  REQUIRE(f.pipe->Read(v, 9 << 16, 1 << 16, out.data()) == size_t{1} << 16);
  std::mutex mu;
  std::condition_variable cv;
  std::thread::id first_reader, second_reader;
  int held_first = 0;
  bool release_first = false, release_rest = false;
  f.fb->SetBeforeCall([&](auto, const std::string&) {
    std::unique_lock lk(mu);
    const auto me = std::this_thread::get_id();
    if (me == second_reader) return;
    if (me == first_reader) {
      ++held_first;
      cv.notify_all();
      cv.wait(lk, [&] { return release_first; });
    } else {
      cv.wait(lk, [&] { return release_rest; });  // the read's other runs
    }
  });
  auto whole = std::async(std::launch::async, [&] {
    {
      std::lock_guard lk(mu);
      first_reader = std::this_thread::get_id();
    }
    return f.pipe->Read(v, 0, 1 << 20, out.data());
  });
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return held_first == 1; });
  }
  const uint64_t waits = f.metrics.singleflight_waits.load();
  std::vector<char> small(4096);
  auto joined = std::async(std::launch::async, [&] {
    {
      std::lock_guard lk(mu);
      second_reader = std::this_thread::get_id();
    }
    return f.pipe->Read(v, (1 << 16) + 5, small.size(), small.data());  // unit 1: run [0, 2]
  });
  while (f.metrics.singleflight_waits.load() == waits) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    std::lock_guard lk(mu);
    release_first = true;
  }
  cv.notify_all();
  const bool early = joined.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  {
    std::lock_guard lk(mu);
    release_rest = true;
  }
  cv.notify_all();
  auto n = whole.get();
  f.fb->SetBeforeCall({});
  CHECK(early);
  REQUIRE(n.has_value());
  CHECK(std::equal(out.begin(), out.end(), data.begin()));
  auto m = joined.get();
  REQUIRE(m.has_value());
  CHECK(std::equal(small.begin(), small.end(), data.begin() + (1 << 16) + 5));
}
