#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <vector>

#include "backends/fault_backend.h"
#include "backends/memory_backend.h"

using igt::Code;
using igt::FaultInjectingBackend;
using igt::MemoryBackend;

TEST_CASE("MemoryBackend: put, stat, read, etag, delete", "[memory]") {
  MemoryBackend m;
  m.Put("a/x", "hello");
  auto s = m.Stat("a/x");
  REQUIRE(s);
  CHECK(s->size == 5);
  CHECK(s->etag == MemoryBackend::ContentEtag("hello"));
  char buf[8];
  CHECK(m.Read("a/x", 1, 8, s->etag, buf).value() == 4);
  CHECK(std::string(buf, 4) == "ello");
  CHECK(m.Read("a/x", 5, 8, s->etag, buf).value() == 0);
  m.Put("a/x", "HELLO");
  CHECK(m.Read("a/x", 0, 8, s->etag, buf).error().code() == Code::kChanged);
  CHECK(m.Stat("a/x")->etag != s->etag);
  CHECK(m.Stat("a/x")->mtime_ns > s->mtime_ns);
  CHECK(m.Delete("a/x"));
  CHECK(!m.Delete("a/x"));
  CHECK(m.Stat("a/x").error().code() == Code::kNotFound);
  CHECK(m.Probe().ok());
  m.SetProbeStatus(igt::Status::Unavailable("down"));
  CHECK(m.Probe().code() == Code::kUnavailable);
}

TEST_CASE("MemoryBackend: S3-like listing", "[memory]") {
  MemoryBackend m;
  for (const char* k : {"a.txt", "d/1", "d/2", "d/e/3", "d.txt", "z"}) m.Put(k, "x");
  auto p = m.List({});
  REQUIRE(p);
  std::vector<std::string> objs;
  for (auto& o : p->objects) objs.push_back(o.key);
  CHECK(objs == std::vector<std::string>{"a.txt", "d.txt", "z"});
  CHECK(p->prefixes == std::vector<std::string>{"d/"});

  igt::ListRequest req;
  req.max_keys = 2;
  std::vector<std::string> all;
  for (;;) {
    auto pg = m.List(req);
    REQUIRE(pg);
    CHECK(pg->objects.size() + pg->prefixes.size() <= 2);
    for (auto& o : pg->objects) all.push_back(o.key);
    for (auto& x : pg->prefixes) all.push_back(x);
    if (pg->next_token.empty()) break;
    req.continuation_token = pg->next_token;
  }
  std::sort(all.begin(), all.end());
  CHECK(all == std::vector<std::string>{"a.txt", "d.txt", "d/", "z"});

  req = {};
  req.prefix = "d/";
  req.delimiter = "";
  p = m.List(req);
  REQUIRE(p);
  CHECK(p->objects.size() == 3);
  CHECK(p->prefixes.empty());
}

TEST_CASE("FaultInjectingBackend: counters and scheduled failures", "[fault]") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("k", "0123456789");
  FaultInjectingBackend fb(mem);
  char buf[16];
  CHECK(fb.Read("k", 0, 16, "", buf).value() == 10);
  CHECK(fb.Stat("k"));
  CHECK(fb.List({}));
  CHECK(fb.Probe().ok());
  auto c = fb.counts();
  CHECK(c.reads == 1);
  CHECK(c.read_bytes == 10);
  CHECK(c.stats == 1);
  CHECK(c.lists == 1);
  CHECK(c.probes == 1);

  fb.FailNext(2, Code::kUnavailable, FaultInjectingBackend::kRead);
  CHECK(fb.Stat("k"));  // not a read: unaffected
  CHECK(fb.Read("k", 0, 4, "", buf).error().code() == Code::kUnavailable);
  CHECK(fb.Read("k", 0, 4, "", buf).error().code() == Code::kUnavailable);
  CHECK(fb.Read("k", 0, 4, "", buf).value() == 4);
  CHECK(fb.counts().injected_failures == 2);
  CHECK(fb.counts().reads == 4);

  fb.FailNext(1, Code::kIoError);
  CHECK(fb.List({}).error().code() == Code::kIoError);
  CHECK(fb.List({}));
  CHECK(fb.Describe() == "fault(memory://)");
  fb.ResetCounts();
  CHECK(fb.counts().reads == 0);
}

TEST_CASE("FaultInjectingBackend: random failures are seeded", "[fault]") {
  auto run = [](uint64_t seed) {
    auto mem = std::make_shared<MemoryBackend>();
    mem->Put("k", "x");
    FaultInjectingBackend fb(mem);
    fb.SetFailureProbability(0.5, Code::kIoError, seed);
    std::string pattern;
    for (int i = 0; i < 64; ++i) pattern += fb.Stat("k") ? '.' : 'X';
    return pattern;
  };
  std::string a = run(7), b = run(7);
  CHECK(a == b);
  CHECK(a.find('X') != std::string::npos);
  CHECK(a.find('.') != std::string::npos);
}

TEST_CASE("FaultInjectingBackend: corrupt and truncate reads, hook", "[fault]") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("k", "0123456789");
  FaultInjectingBackend fb(mem);
  std::vector<std::string> seen;
  fb.SetBeforeCall([&](FaultInjectingBackend::Op op, const std::string& key) {
    if (op == FaultInjectingBackend::kRead) seen.push_back(key);
  });
  char buf[16];
  fb.SetReadFault(FaultInjectingBackend::ReadFault::kCorrupt);
  auto n = fb.Read("k", 0, 10, "", buf);
  REQUIRE(n);
  CHECK(*n == 10);
  CHECK(std::string(buf, 10) != "0123456789");
  fb.SetReadFault(FaultInjectingBackend::ReadFault::kTruncate);
  n = fb.Read("k", 0, 10, "", buf);
  REQUIRE(n);
  CHECK(*n == 5);
  CHECK(std::string(buf, 5) == "01234");
  CHECK(seen == std::vector<std::string>{"k", "k"});
  fb.Reset();
  CHECK(fb.Read("k", 0, 10, "", buf).value() == 10);
  CHECK(std::string(buf, 10) == "0123456789");
  CHECK(seen.size() == 2);  // hook cleared by Reset
}
