// Conformance suite run over every registered eviction policy, plus the
// policy-specific order tests (LRU order, FIFO ignores reads).

#include <algorithm>
#include <catch2/catch.hpp>
#include <list>
#include <random>
#include <set>

#include "igtcache/policy.h"

namespace igt {
namespace {

std::unique_ptr<EvictionPolicy> Make(const std::string& name) {
  auto p = MakeEvictionPolicy(name);
  REQUIRE(p.has_value());
  REQUIRE(*p != nullptr);
  return std::move(*p);
}

TEST_CASE("registry knows every built-in module, lru first", "[policy]") {
  auto names = EvictionPolicyNames();
  REQUIRE(names.size() >= 6);
  for (const char* n : {"lfu", "2random", "keep", "evict-behind"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  CHECK(names.front() == "lru");
  CHECK(std::find(names.begin(), names.end(), "fifo") != names.end());
  for (const auto& n : names) CHECK(Make(n)->name() == n);
}

TEST_CASE("unknown policy name lists the known ones", "[policy]") {
  auto p = MakeEvictionPolicy("nope");
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().code() == Code::kInvalidArgument);
  CHECK(p.error().message().find("lru") != std::string::npos);
  CHECK(p.error().message().find("nope") != std::string::npos);
}

TEST_CASE("conformance: basic invariants", "[policy][conformance]") {
  const std::string name = GENERATE(from_range(EvictionPolicyNames()));
  INFO("policy " << name);
  auto p = Make(name);
  CHECK(p->size() == 0);
  CHECK_FALSE(p->PickVictim().has_value());
  // Hooks on unknown ids are harmless.
  p->OnAccess("ghost");
  p->OnRemove("ghost");
  CHECK(p->size() == 0);

  p->OnInsert("a", 10, 0);
  p->OnInsert("b", 20, 0);
  CHECK(p->size() == 2);
  // Re-inserting a tracked id does not duplicate it.
  p->OnInsert("a", 10, 0);
  CHECK(p->size() == 2);
  auto v = p->PickVictim();
  REQUIRE(v.has_value());
  CHECK((*v == "a" || *v == "b"));
  // PickVictim does not remove.
  CHECK(p->size() == 2);
  p->OnRemove(*v);
  CHECK(p->size() == 1);
  auto w = p->PickVictim();
  REQUIRE(w.has_value());
  CHECK(*w != *v);
  p->OnRemove(*w);
  CHECK(p->size() == 0);
  CHECK_FALSE(p->PickVictim().has_value());
}

TEST_CASE("conformance: draining returns every unit exactly once", "[policy][conformance]") {
  const std::string name = GENERATE(from_range(EvictionPolicyNames()));
  INFO("policy " << name);
  auto p = Make(name);
  std::set<std::string> want;
  for (int i = 0; i < 100; ++i) {
    want.insert("u" + std::to_string(i));
    p->OnInsert("u" + std::to_string(i), 1 + i, 0);
  }
  std::set<std::string> got;
  while (auto v = p->PickVictim()) {
    CHECK(got.insert(*v).second);
    p->OnRemove(*v);
  }
  CHECK(got == want);
}

TEST_CASE("conformance: seeded random ops against a set model", "[policy][conformance]") {
  const std::string name = GENERATE(from_range(EvictionPolicyNames()));
  const uint32_t seed = GENERATE(1u, 2u, 3u, 42u);
  INFO("policy " << name << " seed " << seed);
  auto p = Make(name);
  std::mt19937 rng(seed);
  std::set<std::string> model;
  for (int step = 0; step < 5000; ++step) {
    std::string id = "k" + std::to_string(rng() % 64);
    switch (rng() % 5) {
      case 0:
      case 1:
        p->OnInsert(id, 1 + rng() % 1000, (rng() % 4 == 0) ? 1 + rng() % 100000 : 0);
        model.insert(id);
        break;
      case 2:
        p->OnAccess(id);
        break;
      case 3:
        p->OnRemove(id);
        model.erase(id);
        break;
      case 4:
        if (auto v = p->PickVictim()) {
          REQUIRE(model.count(*v) == 1);
          p->OnRemove(*v);
          model.erase(*v);
        } else {
          REQUIRE(model.empty());
        }
        break;
    }
    REQUIRE(p->size() == model.size());
    REQUIRE(p->PickVictim().has_value() == !model.empty());
  }
}

// Reference model of the list policies: front = victim.
struct ListModel {
  std::list<std::string> order;
  void Insert(const std::string& id) { Remove(id); order.push_back(id); }
  void Touch(const std::string& id) {
    auto it = std::find(order.begin(), order.end(), id);
    if (it != order.end()) order.splice(order.end(), order, it);
  }
  void Remove(const std::string& id) { order.remove(id); }
};

TEST_CASE("lru and fifo match their reference order under random ops", "[policy]") {
  const std::string name = GENERATE(as<std::string>{}, "lru", "fifo");
  const uint32_t seed = GENERATE(7u, 99u);
  INFO("policy " << name << " seed " << seed);
  auto p = Make(name);
  ListModel m;
  std::mt19937 rng(seed);
  for (int step = 0; step < 3000; ++step) {
    std::string id = "k" + std::to_string(rng() % 32);
    switch (rng() % 4) {
      case 0: p->OnInsert(id, 1, 0); m.Insert(id); break;
      case 1: p->OnAccess(id); if (name == "lru") m.Touch(id); break;
      case 2: p->OnRemove(id); m.Remove(id); break;
      case 3:
        if (!m.order.empty()) {
          auto v = p->PickVictim();
          REQUIRE(v.has_value());
          REQUIRE(*v == m.order.front());
          p->OnRemove(*v);
          m.Remove(*v);
        }
        break;
    }
  }
}

TEST_CASE("lru evicts the least recently used", "[policy][lru]") {
  auto p = Make("lru");
  p->OnInsert("a", 1, 0);
  p->OnInsert("b", 1, 0);
  p->OnInsert("c", 1, 0);
  p->OnAccess("a");
  CHECK(*p->PickVictim() == "b");
  p->OnRemove("b");
  CHECK(*p->PickVictim() == "c");
  p->OnAccess("c");
  CHECK(*p->PickVictim() == "a");
}

TEST_CASE("lru orders units restored at start-up by last access", "[policy][lru]") {
  auto p = Make("lru");
  // Arrive out of order, as if read from an index sorted by key.
  p->OnInsert("t300", 1, 300);
  p->OnInsert("t100", 1, 100);
  p->OnInsert("t200", 1, 200);
  p->OnInsert("t100b", 1, 100);  // tie: arrival order
  // A fresh insert is newer than everything restored.
  p->OnInsert("fresh", 1, 0);
  std::vector<std::string> order;
  while (auto v = p->PickVictim()) {
    order.push_back(*v);
    p->OnRemove(*v);
  }
  CHECK(order == std::vector<std::string>{"t100", "t100b", "t200", "t300", "fresh"});
}

TEST_CASE("lru: an accessed restored unit moves behind the others", "[policy][lru]") {
  auto p = Make("lru");
  p->OnInsert("old", 1, 10);
  p->OnInsert("new", 1, 20);
  p->OnAccess("old");
  p->OnInsert("x", 1, 0);
  CHECK(*p->PickVictim() == "new");
  p->OnRemove("new");
  CHECK(*p->PickVictim() == "old");
}

TEST_CASE("module params: unknown key and out-of-range value name the key", "[policy]") {
  auto a = MakeEvictionPolicy("lfu", {{"half_lfe_ms", 5}});
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().message().find("lfu.params.half_lfe_ms") != std::string::npos);
  auto b = MakeEvictionPolicy("lfu", {{"half_life_ms", -1}});
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error().message().find("lfu.params.half_life_ms") != std::string::npos);
  auto c = MakeEvictionPolicy("lru", {{"x", 1}});
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().message().find("lru.params.x") != std::string::npos);
  auto d = MakePrefetchPolicy("adaptive-readahead", {{"max_units", 1}, {"initial_units", 4}});
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().message().find("max_units") != std::string::npos);
  auto e = MakePrefetchPolicy("warp");
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().message().find("adaptive-readahead") != std::string::npos);
}

TEST_CASE("conformance: metadata hooks keep the invariants", "[policy][conformance]") {
  const std::string name = GENERATE(from_range(EvictionPolicyNames()));
  const uint32_t seed = GENERATE(5u, 6u);
  INFO("policy " << name << " seed " << seed);
  auto p = Make(name);
  std::mt19937 rng(seed);
  std::set<std::string> model;
  uint64_t now = 1;
  for (int step = 0; step < 4000; ++step) {
    now += rng() % 1000;
    std::string id = "k" + std::to_string(rng() % 48);
    switch (rng() % 6) {
      case 0:
      case 1:
        p->OnInsertUnit(id, 1 + rng() % 100, 0, UnitMeta{rng() % 64, rng() % 2 == 0, now});
        model.insert(id);
        break;
      case 2: p->OnAccessAt(id, now); break;
      case 3: p->OnRemove(id); model.erase(id); break;
      case 4:
        if (rng() % 50 == 0) p->OnEpoch();
        (void)p->VictimWeight();
        break;
      case 5:
        if (auto v = p->PickVictim()) {
          REQUIRE(model.count(*v) == 1);
          // Stable between calls until something changes.
          REQUIRE(*p->PickVictim() == *v);
          p->OnRemove(*v);
          model.erase(*v);
        } else {
          REQUIRE(model.empty());
        }
        break;
    }
    REQUIRE(p->size() == model.size());
  }
}

TEST_CASE("lfu: least frequent first, ties by recency, ageing lets old heat go", "[policy][lfu]") {
  auto p = Make("lfu");
  p->OnInsert("a", 1, 0);
  p->OnInsert("b", 1, 0);
  p->OnInsert("c", 1, 0);
  p->OnAccess("a");
  p->OnAccess("a");
  p->OnAccess("c");
  CHECK(*p->PickVictim() == "b");
  p->OnRemove("b");
  CHECK(*p->PickVictim() == "c");

  auto aged = MakeEvictionPolicy("lfu", {{"half_life_ms", 1}});  // 1 ms half-life
  REQUIRE(aged.has_value());
  auto& q = *aged;
  q->OnInsertUnit("old", 1, 0, UnitMeta{0, false, 1000});
  for (int i = 0; i < 10; ++i) q->OnAccessAt("old", 1000 + i);  // hot long ago
  q->OnInsertUnit("new", 1, 0, UnitMeta{0, false, 100000});
  q->OnAccessAt("new", 100000);
  // 99 half-lives later "old" is worth ~0; "new" has count 2.
  CHECK(*q->PickVictim() == "old");
  CHECK(q->VictimWeight() < 1e-6);
}

TEST_CASE("lfu: a unit inserted with its weight from its last eviction is not a one-off's equal", "[policy][lfu]") {
  auto made = MakeEvictionPolicy("lfu", {{"half_life_ms", 60000}});
  REQUIRE(made.has_value());
  auto& p = *made;
  p->OnInsertUnit("hot", 1, 0, UnitMeta{.now_us = 1000});
  for (int i = 0; i < 5; ++i) p->OnAccessAt("hot", 1000 + i);
  const double w = p->WeightOf("hot");
  CHECK(w == Approx(6).epsilon(0.01));
  CHECK(p->WeightOf("absent") < 0);
  p->OnRemove("hot");  // evicted; the caller keeps w
  // Back after a one-off came in, and another after it: with its weight it
  // outlives both (without it, count 1, it would be the victim right after
  // the first one-off).
  p->OnInsertUnit("one-off-1", 1, 0, UnitMeta{.now_us = 2000});
  p->OnInsertUnit("hot", 1, 0, UnitMeta{.now_us = 3000, .prior_weight = w});
  p->OnInsertUnit("one-off-2", 1, 0, UnitMeta{.now_us = 4000});
  CHECK(p->WeightOf("hot") == Approx(w + 1).epsilon(0.01));
  CHECK(*p->PickVictim() == "one-off-1");
  p->OnRemove("one-off-1");
  CHECK(*p->PickVictim() == "one-off-2");
  // The plain baseline takes the hint too, but nothing gives it one: only
  // the policy engine's ghosts of a stream do (igt mode).
}

TEST_CASE("readahead in a file read at random stays within the reader's expected run", "[policy][prefetch]") {
  // A crop of 1 MiB read in 256 KiB pieces from 5.25 MiB (units of 1 MiB):
  // with 512 KiB of it read and 512 KiB left, the window (doubling to 8)
  // goes no further than the unit the crop ends in.
  for (const char* name : {"adaptive-readahead", "epoch"}) {
    INFO(name);
    auto made = MakePrefetchPolicy(name, {});
    REQUIRE(made.has_value());
    auto& ra = *made;
    PrefetchContext c;
    c.path = "clip";
    c.file_size = 64 << 20;
    c.unit_bytes = 1 << 20;
    c.length = 256 << 10;
    std::vector<PrefetchRange> out;
    uint64_t last = 0;
    for (int i = 0; i < 3; ++i) {
      c.offset = (21 << 18) + uint64_t(i) * (256 << 10);  // 5.25 MiB + i pieces
      c.continues = i > 0;
      c.run_bytes_left = (1 << 20) - uint64_t(i + 1) * (256 << 10);
      out.clear();
      ra->Plan(c, out);
      for (const auto& r : out) last = std::max(last, r.last_unit);
    }
    CHECK(last == 6);  // the crop ends in unit 6 (at 6.25 MiB)
    // Unknown (no run length): as before, further ahead.
    c.offset += 256 << 10;
    c.run_bytes_left = UINT64_MAX;
    out.clear();
    ra->Plan(c, out);
    REQUIRE_FALSE(out.empty());
    CHECK(out.back().last_unit > 6);
  }
}

TEST_CASE("keep: read-this-epoch units first (the newest but the 16 newest), then unread", "[policy][keep]") {
  auto p = Make("keep");
  p->OnInsertUnit("p1", 1, 0, UnitMeta{0, true, 0});  // prefetched, unread
  p->OnInsertUnit("d1", 1, 0, UnitMeta{0, false, 0}); // demand: read
  p->OnInsertUnit("d2", 1, 0, UnitMeta{0, false, 0});
  CHECK(*p->PickVictim() == "d1");  // all read units are recent: the oldest of them
  p->OnAccess("p1");                                    // p1 read now
  CHECK(*p->PickVictim() == "d1");
  p->OnEpoch();                                         // nothing read yet
  p->OnInsertUnit("p2", 1, 0, UnitMeta{0, true, 0});
  CHECK(*p->PickVictim() == "p2");
  p->OnAccess("d1");
  CHECK(*p->PickVictim() == "d1");
  // More read units than the 16 spared: the newest of the others goes, and
  // the kept set (the older ones) stays.
  for (int i = 0; i < 20; ++i) p->OnInsertUnit("r" + std::to_string(i), 1, 0, UnitMeta{0, false, 0});
  CHECK(*p->PickVictim() == "r3");  // d1, r0..r19: r4..r19 spared
  p->OnRemove("r3");
  p->OnInsertUnit("r20", 1, 0, UnitMeta{0, false, 0});
  CHECK(*p->PickVictim() == "r4");
}

TEST_CASE("keep: the next victim but a given unit, in the same order", "[policy][keep]") {
  auto p = Make("keep");
  for (int i = 0; i < 3; ++i) p->OnInsertUnit("k" + std::to_string(i), 1, 0, UnitMeta{0, true, 0});
  // An epoch's start: only unread units; a part-read miss enters as the
  // newest of them, and is the victim, but not the victim but itself.
  p->OnInsertUnit("part", 1, 0, UnitMeta{0, true, 0});
  CHECK(*p->PickVictim() == "part");
  CHECK(*p->PickVictimBut("part") == "k2");
  CHECK(*p->PickVictimBut("k2") == "part");
  // Read units go first, in PickVictim's order, passing over the one named.
  p->OnInsertUnit("d1", 1, 0, UnitMeta{0, false, 0});
  p->OnInsertUnit("d2", 1, 0, UnitMeta{0, false, 0});
  CHECK(*p->PickVictim() == "d1");
  CHECK(*p->PickVictimBut("d1") == "d2");
  for (int i = 0; i < 20; ++i) p->OnInsertUnit("r" + std::to_string(i), 1, 0, UnitMeta{0, false, 0});
  CHECK(*p->PickVictim() == "r3");  // d1, d2, r0..r19: r4..r19 spared
  CHECK(*p->PickVictimBut("r3") == "r2");
  // Modules without it say none.
  CHECK_FALSE(Make("lru")->PickVictimBut("x"));
}

TEST_CASE("keep: the next victim passing over every unit named, in the same order", "[policy][keep]") {
  auto p = Make("keep");
  for (int i = 0; i < 3; ++i) p->OnInsertUnit("u" + std::to_string(i), 1, 0, UnitMeta{0, true, 0});
  for (int i = 0; i < 3; ++i) p->OnInsertUnit("part" + std::to_string(i), 1, 0, UnitMeta{0, false, 0});
  // The read units (three readers' current ones) go first; passed over,
  // the newest unread unit is next.
  const auto part = [](const std::string& id) { return id.rfind("part", 0) == 0; };
  CHECK(*p->PickVictim() == "part0");
  CHECK(*p->PickVictimSkipping(part) == "u2");
  CHECK_FALSE(p->PickVictimSkipping([](const std::string&) { return true; }));
  CHECK_FALSE(Make("lru")->PickVictimSkipping(part));
}

TEST_CASE("keep: a miss is admitted only when a read unit can give way", "[policy][keep]") {
  auto p = Make("keep");
  const UnitMeta demand{0, false, 0}, prefetched{0, true, 0};
  p->OnInsertUnit("p1", 1, 0, prefetched);
  // Only unread units: a miss (read) or a prefetched unit would go first.
  CHECK_FALSE(p->AdmitUnit("d1", 1, demand));
  CHECK_FALSE(p->AdmitUnit("p2", 1, prefetched));
  p->OnAccess("p1");  // a read unit now goes first, before a new miss or prefetched one
  CHECK(p->AdmitUnit("d1", 1, demand));
  CHECK(p->AdmitUnit("p2", 1, prefetched));
  // Modules that put a new unit last admit it.
  for (const char* name : {"lru", "fifo"}) CHECK(Make(name)->AdmitUnit("x", 1, demand));
}

TEST_CASE("evict-behind: consumed furthest-along first, then unread furthest ahead", "[policy][evict-behind]") {
  auto p = Make("evict-behind");
  for (uint64_t i = 0; i < 4; ++i) p->OnInsertUnit("c" + std::to_string(i), 1, 0, UnitMeta{i, false, 0});
  for (uint64_t i = 4; i < 6; ++i) p->OnInsertUnit("u" + std::to_string(i), 1, 0, UnitMeta{i, true, 0});
  std::vector<std::string> order;
  while (auto v = p->PickVictim()) {
    order.push_back(*v);
    p->OnRemove(*v);
  }
  // The reader is at c3 (its misses 0-3): behind it first, then the unread,
  // then c3 (a reader part-way through a unit reads it next).
  CHECK(order == std::vector<std::string>{"c2", "c1", "c0", "u5", "u4", "c3"});
}

TEST_CASE("evict-behind with two readers: what both passed goes first, then what the slower reaches last",
          "[policy][evict-behind]") {
  auto p = Make("evict-behind");
  auto id = [](uint64_t i) { return "u" + std::to_string(i); };
  // The leader reads units 0-9 (misses), the follower then hits 0-3.
  for (uint64_t i = 0; i < 10; ++i) p->OnInsertUnit(id(i), 1, 0, UnitMeta{i, false, 0});
  for (uint64_t i = 0; i < 4; ++i) p->OnAccess(id(i));
  std::vector<std::string> order;
  while (auto v = p->PickVictim()) {
    order.push_back(*v);
    p->OnRemove(*v);
  }
  // 0-2: both readers passed them (furthest first); 4-8: the follower's
  // next reads, the one it reaches last first; then the units the readers
  // are at (9, 3). (One reader: 8 first, the kept prefix 0-3 last, which
  // the follower does not need again.)
  CHECK(order == std::vector<std::string>{"u2", "u1", "u0", "u8", "u7", "u6", "u5", "u4", "u9", "u3"});
}

TEST_CASE("evict-behind with one reader repeating a scan: behind it first, what it reads next in this pass kept",
          "[policy][evict-behind]") {
  auto p = Make("evict-behind");
  auto id = [](uint64_t i) { return "u" + std::to_string(i); };
  // Pass 1 read units 0-9 (0-4 still cached); pass 2 has hit 0-2.
  for (uint64_t i = 0; i < 5; ++i) p->OnInsertUnit(id(i), 1, 0, UnitMeta{i, false, 0});
  for (uint64_t i = 5; i < 10; ++i) {
    p->OnInsertUnit(id(i), 1, 0, UnitMeta{i, false, 0});
    p->OnRemove(id(i));
  }
  for (uint64_t i = 0; i < 3; ++i) p->OnAccess(id(i));
  // 3-4 are ahead of the reader (read next in this pass): kept; behind it,
  // the furthest along goes first, not u2, which it is at. (Before reader
  // cursors: u4, the far end of the prefix, which this pass reads sooner
  // than u1's next pass.)
  CHECK(*p->PickVictim() == "u1");
}

TEST_CASE("evict-behind: a lone read behind the reader (a header re-read) is not a reader, and replays are not reads",
          "[policy][evict-behind]") {
  auto p = Make("evict-behind");
  auto id = [](uint64_t i) { return "u" + std::to_string(i); };
  for (uint64_t i = 0; i < 10; ++i) p->OnInsertUnit(id(i), 1, 0, UnitMeta{i, false, 0});
  p->OnAccess(id(0));  // the header again: a cursor at 0 that never moves
  CHECK(*p->PickVictim() == "u8");  // as with the reader alone (at u9)
  // Units handed over from another module, in any order, make no cursor.
  auto q = Make("evict-behind");
  for (uint64_t i : {7, 2, 9, 4}) q->OnInsertUnit(id(i), 1, 0, UnitMeta{.position = i, .replay = true});
  q->OnInsertUnit(id(5), 1, 0, UnitMeta{.position = 5});
  q->OnInsertUnit(id(6), 1, 0, UnitMeta{.position = 6});  // a reader at 5, 6
  CHECK(*q->PickVictim() == "u5");  // behind it, furthest first; 7 and 9 ahead of it, 6 where it is
}

TEST_CASE("evict-behind with named readers: one starting ahead does not take another's unit", "[policy][evict-behind]") {
  // Two threads each scan their own slice of one file in pieces smaller
  // than a unit. Told apart by position, the second's first read (unit 10)
  // took the cursor of the first (part-way through unit 5), whose unit then
  // went before its next piece.
  auto p = Make("evict-behind");
  auto id = [](uint64_t i) { return "u" + std::to_string(i); };
  auto read = [&](uint64_t reader, uint64_t unit, bool part) {
    p->OnReaderAt(ReaderRead{.reader = reader, .first = unit, .last = unit, .first_part = true, .last_part = part});
  };
  for (uint64_t i : {3, 4, 5}) {
    p->OnInsertUnit(id(i), 1, 0, UnitMeta{.position = i});
    read(1, i, i == 5);
  }
  p->OnInsertUnit(id(10), 1, 0, UnitMeta{.position = 10});
  read(2, 10, true);
  std::vector<std::string> order;
  while (auto v = p->PickVictim()) {
    order.push_back(*v);
    p->OnRemove(*v);
  }
  // Behind the slower reader first (4, 3), then the units readers are in the
  // middle of, last.
  REQUIRE(order.size() == 4);
  CHECK(order[0] == "u4");
  CHECK(order[1] == "u3");
  CHECK((order[2] == "u10" || order[2] == "u5"));

  SECTION("a reader done with its unit (a read ending on the unit's end) keeps nothing") {
    auto q = Make("evict-behind");
    for (uint64_t i : {5, 10}) q->OnInsertUnit(id(i), 1, 0, UnitMeta{.position = i});
    q->OnReaderAt(ReaderRead{.reader = 1, .first = 5, .last = 5, .last_part = false});  // finished its slice
    q->OnReaderAt(ReaderRead{.reader = 2, .first = 10, .last = 10, .last_part = true});
    CHECK(*q->PickVictim() == "u5");
  }
  SECTION("an mmap window's top unit, left part-read by the jump to the next window, is kept") {
    auto q = Make("evict-behind");
    for (uint64_t i = 0; i < 12; ++i) q->OnInsertUnit(id(i), 1, 0, UnitMeta{.position = i});
    // Window 1: top read of units 3-4 (ends part-way through 4), pieces down to 0.
    q->OnReaderAt(ReaderRead{.reader = 7, .first = 3, .last = 4, .first_part = true, .last_part = true});
    for (uint64_t u = 3; u-- > 0;)
      q->OnReaderAt(ReaderRead{.reader = 7, .first = u, .last = u + 1, .first_part = true, .last_part = true});
    q->OnReaderAt(ReaderRead{.reader = 9, .first = 11, .last = 11, .last_part = true});  // another reader
    // Window 2: its top read (units 8-9); unit 4's rest is read last.
    q->OnReaderAt(ReaderRead{.reader = 7, .first = 8, .last = 9, .first_part = true, .last_part = true});
    std::vector<std::string> taken;
    for (int k = 0; k < 6; ++k) {
      auto v = q->PickVictim();
      REQUIRE(v);
      taken.push_back(*v);
      q->OnRemove(*v);
    }
    CHECK(std::find(taken.begin(), taken.end(), "u4") == taken.end());
  }
}

TEST_CASE("readahead: fixed by default, ramping to max_units while reads continue, reset by a jump", "[policy][prefetch]") {
  PrefetchContext c;
  c.path = "big";
  c.file_size = 1000 << 20;
  c.unit_bytes = 1 << 20;
  c.length = 1 << 20;
  auto window = [&](PrefetchPolicy& p, uint64_t unit, bool continues) {
    std::vector<PrefetchRange> out;
    c.offset = unit << 20;
    c.continues = continues;
    p.Plan(c, out);
    REQUIRE(out.size() == 1);
    CHECK(out[0].first_unit == unit + 1);
    return out[0].last_unit - unit;
  };
  auto fixed = *MakePrefetchPolicy("readahead", {{"units", 8}});
  CHECK(window(*fixed, 0, false) == 8);
  for (uint64_t u = 1; u < 6; ++u) CHECK(window(*fixed, u, true) == 8);
  auto ramp = *MakePrefetchPolicy("readahead", {{"units", 8}, {"max_units", 64}});
  CHECK(window(*ramp, 0, false) == 8);  // a file's start
  CHECK(window(*ramp, 1, true) == 16);
  CHECK(window(*ramp, 2, true) == 32);
  CHECK(window(*ramp, 3, true) == 64);
  CHECK(window(*ramp, 4, true) == 64);  // capped
  std::vector<PrefetchRange> out;
  c.offset = uint64_t(500) << 20;  // a jump: nothing proposed, and the window starts over
  c.continues = false;
  ramp->Plan(c, out);
  CHECK(out.empty());
  CHECK(window(*ramp, 501, true) == 16);  // 8 at the jump, doubled by this continuing read
  CHECK_FALSE(MakePrefetchPolicy("readahead", {{"units", 8}, {"max_units", 4}}).has_value());
}

TEST_CASE("prefetch modules: registry and plans", "[policy][prefetch]") {
  auto names = PrefetchPolicyNames();
  for (const auto& n : names) {
    auto p = MakePrefetchPolicy(n);
    REQUIRE(p.has_value());
    CHECK((*p)->name() == n);
    // Every module is harmless on a read of a one-unit file with no callbacks.
    PrefetchContext c;
    c.path = "f";
    c.file_size = 100;
    c.length = 100;
    std::vector<PrefetchRange> out;
    (*p)->Plan(c, out);
    CHECK(out.empty());
  }
  auto ra = *MakePrefetchPolicy("adaptive-readahead", {{"initial_units", 2}, {"max_units", 8}});
  PrefetchContext c;
  c.path = "big";
  c.file_size = 100 << 20;
  c.unit_bytes = 1 << 20;
  c.length = 1 << 20;
  std::vector<PrefetchRange> out;
  ra->Plan(c, out);  // offset 0: window 2
  REQUIRE(out.size() == 1);
  CHECK(out[0].first_unit == 1);
  CHECK(out[0].last_unit == 2);
  // Stays sequential: the window doubles to 8, and the plan extends only
  // when less than half of it is left ahead of the reader, each time to the
  // full window after the read (so the extensions cover every unit, in runs
  // of at least half a window once it is full); in between, a read proposes
  // again just what is planned ahead of it (retrying dropped units).
  uint64_t covered_to = 2;  // units planned so far: 1..2
  std::vector<uint64_t> batch_sizes;
  for (int i = 1; i < 40; ++i) {
    out.clear();
    c.offset = uint64_t(i) << 20;
    c.continues = true;
    ra->Plan(c, out);
    REQUIRE(out.size() == 1);
    CHECK(out[0].first_unit == uint64_t(i) + 1);  // starts after the read
    CHECK(out[0].last_unit <= uint64_t(i) + 8);
    if (out[0].last_unit <= covered_to) {
      CHECK(out[0].last_unit == covered_to);  // a re-proposal of what is planned
      continue;
    }
    batch_sizes.push_back(out[0].last_unit - covered_to);  // new units
    covered_to = out[0].last_unit;
  }
  CHECK(covered_to >= 39 + 4);  // at least half a window ahead
  REQUIRE(batch_sizes.size() >= 4);
  for (size_t k = 3; k < batch_sizes.size(); ++k) CHECK(batch_sizes[k] >= 4);
  ra->OnWasted("big");  // shrinks to 4, and holds there for its next batch
  out.clear();
  c.offset = 44 << 20;  // read 44: at most 2 units left ahead: a batch
  ra->Plan(c, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].last_unit - out[0].first_unit + 1 == 4);  // not doubled back at once
  out.clear();
  c.offset = 47 << 20;  // the next batch: growing again
  ra->Plan(c, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].last_unit - out[0].first_unit + 1 == 8);
  ra->OnWasted("big");
  ra->OnWasted("big");
  out.clear();
  c.offset = 60 << 20;  // a jump: back to the initial window
  c.continues = false;
  ra->Plan(c, out);
  CHECK(out.empty());  // a jump mid-file is not sequential evidence
  out.clear();
  c.offset = 0;  // a new pass from the start plans afresh
  ra->Plan(c, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].first_unit == 1);
  // The file is labelled sequential. A read of another thread of the scan
  // (not continuing its own last read) inside the planned window goes along
  // the scan; a fault far from it (a loader now reading at random, the label
  // not caught up yet) plans nothing.
  c.file_label = 1;
  c.continues = false;
  out.clear();
  c.offset = 2 << 20;  // inside [1, 2]
  ra->Plan(c, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].first_unit == 3);
  for (uint64_t u : {70, 20, 90, 55}) {
    out.clear();
    c.offset = u << 20;
    ra->Plan(c, out);
    CHECK(out.empty());
  }
}

TEST_CASE("fifo ignores reads", "[policy][fifo]") {
  auto p = Make("fifo");
  p->OnInsert("a", 1, 0);
  p->OnInsert("b", 1, 0);
  p->OnAccess("a");
  p->OnAccess("a");
  CHECK(*p->PickVictim() == "a");
  p->OnRemove("a");
  CHECK(*p->PickVictim() == "b");
}


TEST_CASE("adaptive-readahead: two readers of one file never get more than a window proposed", "[policy][prefetch]") {
  auto ra = *MakePrefetchPolicy("adaptive-readahead", {{"initial_units", 2}, {"max_units", 8}});
  PrefetchContext a, b;
  for (auto* c : {&a, &b}) {
    c->path = "big";
    c->file_size = 1000ull << 20;
    c->unit_bytes = 1 << 20;
    c->length = 1 << 20;
    c->continues = true;
  }
  std::vector<PrefetchRange> out;
  for (int i = 0; i < 20; ++i) {
    for (auto [c, at] : {std::pair{&a, 10 + i}, std::pair{&b, 500 + i}}) {
      out.clear();
      c->offset = uint64_t(at) << 20;
      ra->Plan(*c, out);
      for (const auto& r : out) CHECK(r.last_unit - r.first_unit + 1 <= 8);
    }
  }
}

}  // namespace
}  // namespace igt
