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

TEST_CASE("registry knows lru and fifo, lru first", "[policy]") {
  auto names = EvictionPolicyNames();
  REQUIRE(names.size() >= 2);
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

}  // namespace
}  // namespace igt
