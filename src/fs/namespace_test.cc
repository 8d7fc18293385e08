#include "src/fs/namespace.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

#include <chrono>
#include <filesystem>
#include <thread>

#include "backends/fault_backend.h"
#include "backends/memory_backend.h"

#include <nlohmann/json.hpp>

using namespace igt;

// A settable clock for Namespace::Options::clock_ms (starts at the wall
// clock, so listings persisted with wall-clock stamps compare sensibly).
class FakeClockMs {
 public:
  std::function<int64_t()> fn() {
    return [this] { return now_.load(); };
  }
  void advance(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_{igt::NowMs()};
};

TEST_CASE("lookup and readdir follow key prefixes, one LIST per directory") {
  auto mem = std::make_shared<MemoryBackend>();
  for (int i = 0; i < 2500; ++i) mem->Put("d/f" + std::to_string(i), "x");
  mem->Put("top.txt", "hello");
  mem->Put("d/sub/deep.bin", std::string(10, 'y'));
  mem->Put("d/sub/", "");         // a "directory marker" object: not a file
  mem->Put("weird/../escape", "");  // unsafe name: hidden
  FaultInjectingBackend fb(mem);
  Metrics m;
  Namespace ns(&fb, nullptr, &m, Namespace::Options{60000});

  auto root = ns.ReadDir(Namespace::kRootIno);
  REQUIRE(root.has_value());
  REQUIRE((*root)->entries.size() == 3);
  CHECK((*root)->entries[0].name == "d");
  CHECK((*root)->entries[0].is_dir);
  CHECK((*root)->entries[1].name == "top.txt");
  CHECK((*root)->entries[1].size == 5);

  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  CHECK(d->is_dir);
  auto dl = ns.ReadDir(d->ino);
  REQUIRE(dl.has_value());
  CHECK((*dl)->entries.size() == 2501);
  for (int i = 0; i < 2500; i += 97) {
    auto f = ns.Lookup(d->ino, "f" + std::to_string(i));
    REQUIRE(f.has_value());
    CHECK(f->key == "d/f" + std::to_string(i));
    CHECK(f->size == 1);
  }
  auto sub = ns.Lookup(d->ino, "sub");
  REQUIRE(sub.has_value());
  auto deep = ns.Lookup(sub->ino, "deep.bin");
  REQUIRE(deep.has_value());
  CHECK(deep->size == 10);
  CHECK(fb.counts().stats == 0);  // no HEAD per file
  // root, d (3 pages of 1000), d/sub, weird
  CHECK(fb.counts().lists <= 6);
  CHECK_FALSE(ns.Lookup(Namespace::kRootIno, "nope").has_value());
  CHECK_FALSE(ns.Lookup(Namespace::kRootIno, "..").has_value());
  // Hidden keys are counted (stats hidden_names), by each directory's latest
  // listing: "weird/../escape" is listed under "weird/".
  auto weird = ns.Lookup(Namespace::kRootIno, "weird");
  REQUIRE(weird.has_value());
  REQUIRE(ns.ReadDir(weird->ino).has_value());
  CHECK(ns.hidden_names() == 1);
}

TEST_CASE("an object named as a directory too is hidden and counted, the directory shown") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("both", "777");
  mem->Put("both/child.bin", "c");
  mem->Put("d/x", "1");
  mem->Put("d/x/y", "2");
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{});
  auto both = ns.Lookup(Namespace::kRootIno, "both");
  REQUIRE(both.has_value());
  CHECK(both->is_dir);
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto x = ns.Lookup(d->ino, "x");
  REQUIRE(x.has_value());
  CHECK(x->is_dir);
  CHECK(ns.hidden_names() == 2);
}

TEST_CASE("hidden keys are counted by each directory's latest listing") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a/ok", "1");
  mem->Put("a/../y", "2");
  mem->Put("a/" + std::string(300, 'z'), "3");
  mem->Put("b/./c", "4");
  mem->Put("x/../p", "5");
  FakeClockMs clock;
  FaultInjectingBackend fb(mem);
  // stale_wait_ms long: a ReadDir of a stale listing waits for its refresh.
  // No walk prefetch: ReadDir of a then b is a walk, which lists x/ in the
  // background, and a ReadDir of x/ after the clock's advance could join that
  // fetch, not yet retired, instead of listing (lists == 2, under load).
  Namespace ns(&fb, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .prefetch_dirs = 0, .stale_wait_ms = 60000, .clock_ms = clock.fn()});
  auto a = ns.Lookup(Namespace::kRootIno, "a");
  auto b = ns.Lookup(Namespace::kRootIno, "b");
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  auto x = ns.Lookup(Namespace::kRootIno, "x");
  REQUIRE(x.has_value());
  REQUIRE(ns.ReadDir(a->ino).has_value());
  REQUIRE(ns.ReadDir(b->ino).has_value());
  REQUIRE(ns.ReadDir(x->ino).has_value());
  CHECK(ns.hidden_names() == 4);
  // Relisted with the same keys: still 4, not 8. Counted from before the
  // listings go stale: a background refresh started in between was not
  // counted (TSan's slower run saw 2 lists).
  fb.ResetCounts();
  clock.advance(60001);
  REQUIRE(ns.ReadDir(a->ino).has_value());
  REQUIRE(ns.ReadDir(b->ino).has_value());
  REQUIRE(ns.ReadDir(x->ino).has_value());
  CHECK(fb.counts().lists >= 3);  // each listed again
  CHECK(ns.hidden_names() == 4);
  // x/ deleted whole: the root's relisting drops it, and its hidden key
  // with it (nothing lists x/ again).
  mem->Delete("x/../p");
  clock.advance(60001);
  REQUIRE(ns.ReadDir(Namespace::kRootIno).has_value());
  // Dropped by the relisting's hook, which runs after the lookups waiting
  // on the listing were let go (up to 60 s on a loaded machine).
  for (int i = 0; i < 6000 && ns.hidden_names() != 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(ns.hidden_names() == 3);
  // The odd keys deleted: the next listings count none.
  mem->Delete("a/../y");
  mem->Delete("a/" + std::string(300, 'z'));
  mem->Delete("b/./c");
  mem->Put("b/d", "5");
  clock.advance(60001);
  REQUIRE(ns.ReadDir(a->ino).has_value());
  REQUIRE(ns.ReadDir(b->ino).has_value());
  CHECK(ns.hidden_names() == 0);
}

TEST_CASE("keys outside the prefix asked for and directory markers with content are hidden and counted") {
  // A server that does not follow the S3 API answers a listing of d/ with
  // keys outside d/: they were cut at the prefix's length ("outside" listed
  // as "tside", "e/secret" as "secret"; a tester's fake server).
  struct Sloppy : MemoryBackend {
    Result<ListPage> List(const ListRequest& req) override {
      auto page = MemoryBackend::List(req);
      if (page && req.prefix == "d/") {
        ObjectInfo o;
        o.key = "outside";
        o.size = 1;
        page->objects.push_back(o);
        page->prefixes.push_back("e/");
      }
      return page;
    }
  };
  auto mem = std::make_shared<Sloppy>();
  mem->Put("d/ok", "1");
  mem->Put("e/secret", "2");
  mem->Put("m/", "marker bytes");  // a directory marker with content
  mem->Put("m/x", "3");
  mem->Put("n/", "");  // an empty marker: a directory, nothing hidden
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto listed = ns.ReadDir(d->ino);
  REQUIRE(listed.has_value());
  std::vector<std::string> names;
  for (const auto& e : (*listed)->entries) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{"ok"});
  CHECK_FALSE(ns.Lookup(d->ino, "tside").has_value());
  CHECK(ns.hidden_names() == 2);
  auto m = ns.Lookup(Namespace::kRootIno, "m");
  REQUIRE(m.has_value());
  CHECK(m->is_dir);
  REQUIRE(ns.ReadDir(m->ino).has_value());
  auto n = ns.Lookup(Namespace::kRootIno, "n");
  REQUIRE(n.has_value());
  REQUIRE(ns.ReadDir(n->ino).has_value());
  CHECK(ns.hidden_names() == 3);
}

TEST_CASE("lookup counts: forget erases, underflow is a bug") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a", "1");
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{60000});
  auto a1 = ns.Lookup(Namespace::kRootIno, "a");
  auto a2 = ns.Lookup(Namespace::kRootIno, "a");
  REQUIRE(a1.has_value());
  CHECK(a1->ino == a2->ino);
  CHECK(ns.inode_count() == 2);
  ns.Forget(a1->ino, 2);
  CHECK(ns.inode_count() == 1);
  CHECK_FALSE(ns.GetAttr(a1->ino).has_value());
}

TEST_CASE("inode numbers: readdir's d_ino is what lookup gives, the same in every mount, new per version") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.jpg", "1");
  mem->Put("d/sub/a.jpg", "2");  // the same name in another directory
  mem->Put("top", "3");
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{0});  // always stale: relisted
  Namespace other(mem.get(), nullptr, nullptr, Namespace::Options{0});  // another mount
  auto root = ns.ReadDir(Namespace::kRootIno);
  REQUIRE(root.has_value());
  // Before any lookup: the number a lookup will give.
  std::vector<uint64_t> before;
  for (const auto& e : (*root)->entries) before.push_back(ns.EntryIno(Namespace::kRootIno, e));
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  auto top = ns.Lookup(Namespace::kRootIno, "top");
  REQUIRE(d.has_value());
  REQUIRE(top.has_value());
  CHECK(before == std::vector<uint64_t>{d->ino, top->ino});
  CHECK(ns.ParentOf(d->ino) == Namespace::kRootIno);
  auto dl = ns.ReadDir(d->ino);
  REQUIRE(dl.has_value());
  REQUIRE((*dl)->entries.size() == 2);
  const uint64_t a_d_ino = ns.EntryIno(d->ino, (*dl)->entries[0]);
  auto a = ns.Lookup(d->ino, "a.jpg");
  auto sub = ns.Lookup(d->ino, "sub");
  REQUIRE(a.has_value());
  REQUIRE(sub.has_value());
  CHECK(a->ino == a_d_ino);
  CHECK(ns.EntryIno(d->ino, (*dl)->entries[0]) == a->ino);  // looked up: its live inode
  CHECK(ns.ParentOf(sub->ino) == d->ino);
  auto sub_a = ns.Lookup(sub->ino, "a.jpg");
  REQUIRE(sub_a.has_value());
  CHECK(sub_a->ino != a->ino);
  for (uint64_t i : {d->ino, top->ino, a->ino, sub->ino, sub_a->ino}) {
    CHECK(i >= 2);
    CHECK(i < (uint64_t{1} << 62));
  }
  // Another mount of the bucket gives the same numbers.
  auto d2 = other.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d2.has_value());
  CHECK(d2->ino == d->ino);
  CHECK(other.Lookup(d2->ino, "a.jpg")->ino == a->ino);
  // A new version: a new number, in readdir as in lookup; the old inode
  // (held by the lookup above) keeps its own.
  mem->Put("d/a.jpg", "changed");
  dl = ns.ReadDir(d->ino);
  REQUIRE(dl.has_value());
  const uint64_t listed = ns.EntryIno(d->ino, (*dl)->entries[0]);
  CHECK(listed != a->ino);
  auto a2 = ns.Lookup(d->ino, "a.jpg");
  REQUIRE(a2.has_value());
  CHECK(a2->ino == listed);
  CHECK(ns.GetAttr(a->ino)->size == 1);
  // Back to the first version while its old inode is still held: that
  // number is taken, so the name gets the next free one, in readdir too.
  mem->Put("d/a.jpg", "1");
  dl = ns.ReadDir(d->ino);
  REQUIRE(dl.has_value());
  auto a3 = ns.Lookup(d->ino, "a.jpg");
  REQUIRE(a3.has_value());
  CHECK(a3->etag == a->etag);
  CHECK(a3->ino != a->ino);
  CHECK(a3->ino == (a->ino + 1 < Namespace::kInoLimit ? a->ino + 1 : 2));
  CHECK(ns.EntryIno(d->ino, (*dl)->entries[0]) == a3->ino);  // looked up: its live inode
  // Once the old one is forgotten, the number is free again for that version.
  ns.Forget(a->ino, 1);
  ns.Forget(a3->ino, 1);
  CHECK(ns.Lookup(d->ino, "a.jpg")->ino == a->ino);
}

TEST_CASE("a new version of an object gets a new inode, the old one keeps its own") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a", "1");
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{0});  // always stale
  auto a = ns.Lookup(Namespace::kRootIno, "a");
  REQUIRE(a.has_value());
  mem->Put("a", "22");
  // The inode a handle may hold open keeps its version's size (the kernel
  // would cut its reads short at the new size).
  auto old = ns.GetAttr(a->ino);
  REQUIRE(old.has_value());
  CHECK(old->size == 1);
  CHECK(old->etag == a->etag);
  // The name leads to a new inode with the new version.
  auto b = ns.Lookup(Namespace::kRootIno, "a");
  REQUIRE(b.has_value());
  CHECK(b->ino != a->ino);
  CHECK(b->size == 2);
  CHECK(b->etag != a->etag);
  CHECK(ns.GetAttr(a->ino)->size == 1);
  CHECK(ns.inode_count() == 3);
  // Forgetting the old inode leaves the name to the new one.
  ns.Forget(a->ino, 1);
  CHECK(ns.inode_count() == 2);
  CHECK(ns.Lookup(Namespace::kRootIno, "a")->ino == b->ino);
  CHECK(ns.GetAttr(b->ino)->size == 2);
  // Deleted: a handle still open on it keeps its attributes (fstat, lseek
  // to the end), as on an unlinked file; the name is gone.
  mem->Delete("a");
  auto c = ns.GetAttr(b->ino);
  REQUIRE(c.has_value());
  CHECK(c->size == 2);
  auto gone = ns.Lookup(Namespace::kRootIno, "a");
  REQUIRE_FALSE(gone.has_value());
  CHECK(gone.error().code() == Code::kNotFound);
}

TEST_CASE("without ETags, a version is told by its size and modification time") {
  InodeAttr a;
  a.size = 5;
  a.mtime_ns = 100;
  InodeAttr b = a;
  CHECK(SameVersion(a, b));
  b.size = 4;
  CHECK_FALSE(SameVersion(a, b));
  b = a;
  b.mtime_ns = 200;
  CHECK_FALSE(SameVersion(a, b));
  a.etag = b.etag = "e";
  CHECK(SameVersion(a, b));  // the ETag decides when there is one
  b.etag = "f";
  b.mtime_ns = a.mtime_ns;
  CHECK_FALSE(SameVersion(a, b));
}

// Options of a BlockStore in an empty directory of its own.
static BlockStoreOptions FreshStore(const std::string& name) {
  BlockStoreOptions o;
  o.dir = (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(o.dir);
  o.min_free_ratio = 0;
  return o;
}

TEST_CASE("listings persist in the BlockStore: a new Namespace within the TTL does not relist") {
  const BlockStoreOptions o = FreshStore("igt-ns-test");
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("x/y", "1");
  FaultInjectingBackend fb(mem);
  {
    auto store = BlockStore::Open(o, nullptr);
    REQUIRE(store.has_value());
    Namespace ns(&fb, store->get(), nullptr, Namespace::Options{60000});
    auto x = ns.Lookup(Namespace::kRootIno, "x");
    REQUIRE(x.has_value());
    REQUIRE(ns.Lookup(x->ino, "y").has_value());
  }
  fb.ResetCounts();
  {
    auto store = BlockStore::Open(o, nullptr);
    REQUIRE(store.has_value());
    Namespace ns(&fb, store->get(), nullptr, Namespace::Options{60000});
    auto x = ns.Lookup(Namespace::kRootIno, "x");
    REQUIRE(x.has_value());
    REQUIRE(ns.Lookup(x->ino, "y").has_value());
    CHECK(fb.counts().lists == 0);
  }
  // A listing stamped in the future (the clock stepped back since) is stale,
  // not fresh for the size of the step plus the TTL.
  {
    auto store = BlockStore::Open(o, nullptr);
    REQUIRE(store.has_value());
    nlohmann::json j = {{"v", 1}, {"t", NowMs() + 3'600'000}, {"e", nlohmann::json::array({{"old", false, 1, 0, "e"}})}};
    const auto cbor = nlohmann::json::to_cbor(j);
    REQUIRE((*store)->PutMeta("l/", std::string(cbor.begin(), cbor.end())).ok());
    fb.ResetCounts();
    // stale_wait_ms long: the lookup waits for the refresh however late the
    // background thread runs it (the default 1 s would serve the stale one).
    Namespace ns(&fb, store->get(), nullptr, Namespace::Options{.ttl_ms = 60000, .stale_wait_ms = 60000});
    CHECK(ns.Lookup(Namespace::kRootIno, "x").has_value());
    CHECK_FALSE(ns.Lookup(Namespace::kRootIno, "old").has_value());
    CHECK(fb.counts().lists == 1);
  }
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("a read that finds its object changed makes the next lookup list again, TTL or not") {
  const BlockStoreOptions o = FreshStore("igt-ns-changed");
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "v1");
  FaultInjectingBackend fb(mem);
  auto store = BlockStore::Open(o, nullptr);
  REQUIRE(store.has_value());
  Namespace ns(&fb, store->get(), nullptr, Namespace::Options{.ttl_ms = 600000});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto v1 = ns.Lookup(d->ino, "a.bin");
  REQUIRE(v1.has_value());
  mem->Put("d/a.bin", "v2-longer");
  CHECK(ns.Lookup(d->ino, "a.bin")->etag == v1->etag);  // within the TTL: as listed
  fb.ResetCounts();
  ns.NoteChanged("d/a.bin", v1->etag);  // marked: listed again in the background
  ns.NoteChanged("d/a.bin", v1->etag);  // marked once (relisted or not yet): one relist
  auto v2 = ns.Lookup(d->ino, "a.bin");  // relisted (not from the persisted listing)
  REQUIRE(v2.has_value());
  CHECK(fb.counts().lists == 1);
  CHECK(v2->etag != v1->etag);
  CHECK(v2->size == 9);
  CHECK_FALSE(v2->stale);
  CHECK(v2->ino != v1->ino);  // a new version, a new inode
  // More failed reads of the old version: no relist (the listing names v2).
  ns.NoteChanged("d/a.bin", v1->etag);
  CHECK(ns.Lookup(d->ino, "a.bin")->ino == v2->ino);
  CHECK(fb.counts().lists == 1);
  auto e = ns.EntryOf(v1->ino);
  REQUIRE(e.has_value());
  CHECK(e->first == d->ino);
  CHECK(e->second == "a.bin");
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("a failed read of a version the relisting still names does not list again for 5 s") {
  // A store whose listings lag its GETs (or a GET failing for another
  // reason): the listing still names the version every read fails on.
  // Before, each failed read listed the directory again.
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "v1");
  FaultInjectingBackend fb(mem);
  FakeClockMs clock;
  Namespace ns(&fb, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .stale_wait_ms = 60000, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto a = ns.Lookup(d->ino, "a.bin");
  REQUIRE(a.has_value());
  fb.ResetCounts();
  ns.NoteChanged("d/a.bin", a->etag);  // listed again (the lookup waits for it)
  REQUIRE(ns.Lookup(d->ino, "a.bin").has_value());
  CHECK(fb.counts().lists == 1);
  for (int i = 0; i < 5; ++i) {  // more failed reads: that listing named it, no LIST
    ns.NoteChanged("d/a.bin", a->etag);
    REQUIRE(ns.Lookup(d->ino, "a.bin").has_value());
  }
  CHECK(fb.counts().lists == 1);
  // 5 s later a failed read lists again at once (a store catching up is
  // seen soon, with one LIST per 5 s at most).
  clock.advance(5001);
  ns.NoteChanged("d/a.bin", a->etag);
  REQUIRE(ns.Lookup(d->ino, "a.bin").has_value());
  CHECK(fb.counts().lists == 2);
}

namespace {
// A LIST that answers what the bucket held when it began, after a hold: the
// object changes while it is under way (LaggingList::Hold, then Release).
class LaggingList final : public Backend {
 public:
  explicit LaggingList(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}
  void Hold() {
    std::lock_guard lk(m_);
    hold_ = true;
  }
  bool WaitHeld() {
    std::unique_lock lk(m_);
    return cv_.wait_for(lk, std::chrono::seconds(30), [&] { return held_; });
  }
  void Release() {
    {
      std::lock_guard lk(m_);
      hold_ = false;
    }
    cv_.notify_all();
  }
  int lists() const { return lists_.load(); }
  // Called in each LIST after its answer is taken (a reader failing then).
  std::function<void(const std::string& prefix)> during;
  Result<ListPage> List(const ListRequest& req) override {
    ++lists_;
    auto page = inner_->List(req);  // the bucket as it is now
    if (during) during(req.prefix);
    std::unique_lock lk(m_);
    if (hold_) {
      held_ = true;
      cv_.notify_all();
      cv_.wait_for(lk, std::chrono::seconds(30), [&] { return !hold_; });
    }
    return page;
  }
  Result<ObjectInfo> Stat(const std::string& key) override { return inner_->Stat(key); }
  Result<size_t> Read(const std::string& key, uint64_t offset, size_t length, std::string_view etag,
                      char* out) override {
    return inner_->Read(key, offset, length, etag, out);
  }
  Status Probe() override { return inner_->Probe(); }
  std::string Describe() const override { return "lagging " + inner_->Describe(); }

 private:
  std::shared_ptr<Backend> inner_;
  std::mutex m_;
  std::condition_variable cv_;
  bool hold_ = false, held_ = false;
  std::atomic<int> lists_{0};
};
}  // namespace

TEST_CASE("a change noted while its directory is relisted is not answered by that relisting") {
  // A read fails (say a timeout) and its directory is relisted; while that
  // LIST is under way the object is replaced and a read of the old version
  // fails. The LIST began before the change: the reopening lookup waited
  // for it, got the old version's inode again, and the read failed again
  // (no further note: the directory was marked already).
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "v1");
  LaggingList lag(mem);
  FakeClockMs clock;
  Namespace ns(&lag, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 600000, .prefetch_threads = 1, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto v1 = ns.Lookup(d->ino, "a.bin");
  REQUIRE(v1.has_value());
  clock.advance(10);
  lag.Hold();
  ns.NoteChanged("d/a.bin", v1->etag);  // relisted in the background: that LIST is held
  REQUIRE(lag.WaitHeld());
  mem->Put("d/a.bin", "v2-longer");     // replaced after the LIST began
  ns.NoteChanged("d/a.bin", v1->etag);  // a read of v1 fails again
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    lag.Release();
  });
  auto again = ns.Lookup(d->ino, "a.bin");  // waits out the old LIST, then lists again
  release.join();
  REQUIRE(again.has_value());
  CHECK(again->etag != v1->etag);
  CHECK(again->size == 9);
  CHECK(again->ino != v1->ino);
  CHECK(lag.lists() == 4);  // the root, d, the held relist, the one after the note
}

TEST_CASE("a listing whose LIST outlasts the TTL is fresh for twice its LIST's time") {
  // A flat directory of a million keys takes ~100 s to list; with a 60 s
  // TTL it was stale the moment it arrived, and every lookup past it began
  // another LIST: the bucket listed back to back.
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "1");
  FaultInjectingBackend fb(mem);
  FakeClockMs clock;
  fb.SetBeforeCall([&](FaultInjectingBackend::Op op, const std::string& key) {
    if (op == FaultInjectingBackend::kList && key == "d/") clock.advance(100000);  // a 100 s LIST
  });
  Namespace ns(&fb, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .stale_wait_ms = 600000, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto a = ns.Lookup(d->ino, "a.bin");
  REQUIRE(a.has_value());
  CHECK_FALSE(a->stale);
  const uint64_t lists = fb.counts().lists;
  clock.advance(90000);  // 190 s after the LIST began: within 2 x 100 s
  a = ns.Lookup(d->ino, "a.bin");
  REQUIRE(a.has_value());
  CHECK_FALSE(a->stale);
  CHECK(fb.counts().lists == lists);
  clock.advance(20000);  // 210 s: listed again
  REQUIRE(ns.Lookup(d->ino, "a.bin").has_value());
  CHECK(fb.counts().lists == lists + 1);
  fb.SetBeforeCall({});
}

TEST_CASE("failed reads of a version the store lists but does not serve renew the mark once, not per read") {
  // A key the store lists but does not serve, read by workers that keep
  // retrying: a read fails during every relist. Each failure renewed the
  // directory's mark and its note's time, each relist then found a newer
  // note and queued another: the directory listed back to back (a review).
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "v1");
  LaggingList lag(mem);
  FakeClockMs clock;
  Namespace ns(&lag, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 600000, .prefetch_threads = 1, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto v1 = ns.Lookup(d->ino, "a.bin");
  REQUIRE(v1.has_value());
  // Held by the hook itself: the namespace's background thread may call it
  // while this scope's locals are destroyed (ThreadSanitizer saw v1's etag
  // read there as the test ended).
  auto failing = std::make_shared<std::atomic<bool>>(true);
  lag.during = [&ns, &clock, failing, etag = v1->etag](const std::string& prefix) {
    if (prefix != "d/" || !*failing) return;
    clock.advance(10);
    ns.NoteChanged("d/a.bin", etag);
  };
  clock.advance(10);
  ns.NoteChanged("d/a.bin", v1->etag);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the background relists run
  *failing = false;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(lag.lists() <= 5);  // the root, d, the relist, one renewal's (and a race's)
}

TEST_CASE("a stale listing is served while the bucket is unreachable") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a.bin", "1");
  FaultInjectingBackend fb(mem);
  Metrics m;
  // A fake clock: "stale" must not depend on the machine's speed (with a
  // 1 ms TTL and the wall clock, a CI run saw the first reply stale).
  FakeClockMs clock;
  // stale_wait_ms long: the lookup that finds the listing stale waits for
  // its (failing) refresh, however late the background thread runs it.
  Namespace ns(&fb, nullptr, &m, Namespace::Options{.ttl_ms = 60000, .stale_wait_ms = 60000, .clock_ms = clock.fn()});
  auto a = ns.Lookup(Namespace::kRootIno, "a.bin");
  REQUIRE(a.has_value());
  CHECK_FALSE(a->stale);
  clock.advance(60001);  // listing now stale
  mem->Put("b.bin", "2");
  fb.FailNext(100, Code::kUnavailable, FaultInjectingBackend::kList);
  auto again = ns.Lookup(Namespace::kRootIno, "a.bin");
  REQUIRE(again.has_value());  // stale listing, not EIO
  CHECK(again->stale);
  CHECK(ns.Lookup(Namespace::kRootIno, "b.bin").error().code() == Code::kNotFound);
  // No LIST per lookup while it is down: retried once a second.
  const uint64_t lists = fb.counts().lists;
  for (int i = 0; i < 20; ++i) REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
  CHECK(fb.counts().lists == lists);
  // A second later one lookup starts the retry, in the background; the
  // others keep getting the stale listing.
  clock.advance(1000);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fb.counts().lists == lists && std::chrono::steady_clock::now() < until) {
    REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < 20; ++i) REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
  CHECK(fb.counts().lists == lists + 1);
}

TEST_CASE("a bucket that answers NoSuchBucket is served as in an outage, not emptied") {
  // The S3 backend's NoSuchBucket is NotFound; a missing prefix lists empty.
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a.bin", "1");
  mem->Put("d/b.bin", "2");
  mem->Put("e/c.bin", "3");
  FaultInjectingBackend fb(mem);
  FakeClockMs clock;
  Namespace ns(&fb, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .prefetch_dirs = 0, .stale_wait_ms = 60000, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  REQUIRE(ns.Lookup(d->ino, "b.bin").has_value());
  clock.advance(60001);
  fb.FailNext(100, Code::kNotFound, FaultInjectingBackend::kList);
  auto a = ns.Lookup(Namespace::kRootIno, "a.bin");
  REQUIRE(a.has_value());
  CHECK(a->stale);
  REQUIRE(ns.Lookup(d->ino, "b.bin").has_value());
  // A directory the kept root listing names, never listed itself: an
  // outage's error (EIO), not ENOENT (a scanner would take it for missing).
  auto e = ns.Lookup(Namespace::kRootIno, "e");
  REQUIRE(e.has_value());
  auto c = ns.Lookup(e->ino, "c.bin");
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().code() == Code::kUnavailable);
  CHECK_THAT(c.error().message(), Catch::Contains("source is gone"));
}

TEST_CASE("listings served stale in an outage are trimmed again once the source answers") {
  // Directories served stale during an outage were never trimmed (kept past
  // max_listed_entries) until each was listed again: those not visited
  // after the outage stayed for the life of the mount.
  auto mem = std::make_shared<MemoryBackend>();
  for (int d = 0; d < 4; ++d)
    for (int f = 0; f < 10; ++f) mem->Put("d" + std::to_string(d) + "/f" + std::to_string(f), "x");
  FaultInjectingBackend fb(mem);
  FakeClockMs clock;
  Namespace ns(&fb, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .prefetch_dirs = 0, .stale_wait_ms = 60000,
                                  .max_listed_entries = 25, .clock_ms = clock.fn()});
  std::vector<uint64_t> dirs;
  for (int d = 0; d < 2; ++d) {
    auto dir = ns.Lookup(Namespace::kRootIno, "d" + std::to_string(d));
    REQUIRE(dir.has_value());
    REQUIRE(ns.Lookup(dir->ino, "f1").has_value());
    dirs.push_back(dir->ino);
  }
  clock.advance(60001);  // all stale
  fb.FailNext(1000, Code::kUnavailable, FaultInjectingBackend::kList);
  for (uint64_t ino : dirs) CHECK(ns.Lookup(ino, "f1")->stale);  // the outage: served stale
  fb.Reset();  // the source answers again
  clock.advance(1000);
  const uint64_t lists = fb.counts().lists;
  // d2's lookup lists it (and the root's retry, in the background, succeeds).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fb.counts().lists < lists + 2 && std::chrono::steady_clock::now() < until) {
    REQUIRE(ns.Lookup(Namespace::kRootIno, "d2").has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int d = 2; d < 4; ++d) {
    auto dir = ns.Lookup(Namespace::kRootIno, "d" + std::to_string(d));
    REQUIRE(dir.has_value());
    REQUIRE(ns.Lookup(dir->ino, "f1").has_value());
  }
  CHECK(ns.CachedListing("d0") == nullptr);  // idle, no longer held for the outage: trimmed
  CHECK(ns.listed_entries() <= 25 + 10);
}

// A directory in outage mode: "a.bin" listed, the listing stale, and its
// refresh failed (bucket unreachable), so the stale listing is being served.
struct Outage {
  static std::shared_ptr<MemoryBackend> OneFile() {
    auto m = std::make_shared<MemoryBackend>();
    m->Put("a.bin", "1");
    return m;
  }
  std::shared_ptr<MemoryBackend> mem = OneFile();
  FaultInjectingBackend fb{mem};
  FakeClockMs clock;
  Namespace ns{&fb, nullptr, nullptr, Namespace::Options{.ttl_ms = 60000, .stale_wait_ms = 60000, .clock_ms = clock.fn()}};
  Outage() {
    REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
    clock.advance(60001);  // listing now stale
    fb.FailNext(1, Code::kUnavailable, FaultInjectingBackend::kList);
    REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());  // the failed refresh: stale served
  }
};

// Holds the first LIST of `fb` until Release(). Bounded: a LIST nobody
// releases gives up after 30 s and records it (a lookup waited for it), so a
// bug fails the test instead of hanging it.
class ListGate {
 public:
  // `all`: every LIST is held until released, not only the first.
  explicit ListGate(FaultInjectingBackend& fb, bool all = false) : fb_(fb) {
    fb_.SetBeforeCall([this, all](FaultInjectingBackend::Op op, const std::string&) {
      if (op != FaultInjectingBackend::kList) return;
      std::unique_lock lk(m_);
      if (held_ && !all) return;  // only the first LIST is held
      held_ = true;
      cv_.notify_all();
      gave_up_ = !cv_.wait_for(lk, std::chrono::seconds(30), [&] { return release_; });
    });
  }
  ~ListGate() { Release(); }
  bool held() {
    std::lock_guard lk(m_);
    return held_;
  }
  bool WaitHeld(std::chrono::seconds s) {
    std::unique_lock lk(m_);
    return cv_.wait_for(lk, s, [&] { return held_; });
  }
  // Lets the LIST go and removes the hook; false if it had given up.
  bool Release() {
    bool ok;
    {
      std::lock_guard lk(m_);
      ok = !gave_up_;
      release_ = true;
    }
    cv_.notify_all();
    fb_.SetBeforeCall({});
    return ok;
  }

 private:
  FaultInjectingBackend& fb_;
  std::mutex m_;
  std::condition_variable cv_;
  bool held_ = false, release_ = false, gave_up_ = false;
};

// Looks `name` up in the root until it is found (true) or `until` passes.
static bool EventuallyFound(Namespace& ns, const char* name, std::chrono::steady_clock::time_point until) {
  while (!ns.Lookup(Namespace::kRootIno, name).has_value()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

TEST_CASE("during an outage a listing refresh never holds lookups: they get the stale listing") {
  // A bucket that accepts connections and never answers holds a LIST for
  // the whole retry budget (tens of seconds). Lookups must not wait for it.
  Outage o;
  auto& mem = o.mem;
  auto& fb = o.fb;
  auto& ns = o.ns;
  mem->Put("b.bin", "2");
  ListGate gate(fb);  // from now on the first LIST hangs until released
  o.clock.advance(1001);  // the retry (once a second) is due
  // Until the retry is made and while it hangs, lookups return at once.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
    if (gate.held() || std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(gate.held());  // the retry was made, in the background
  for (int i = 0; i < 10; ++i) REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
  CHECK(ns.Lookup(Namespace::kRootIno, "b.bin").error().code() == Code::kNotFound);  // still stale
  CHECK(gate.Release());  // no lookup waited for the LIST
  // The bucket answers again: the background retry brings the new listing.
  CHECK(EventuallyFound(ns, "b.bin", until + std::chrono::seconds(10)));
}

TEST_CASE("the first refresh of a stale listing holds a lookup for stale_wait_ms at most") {
  // The bucket stops answering (before any refresh failed): the lookup that
  // finds the listing stale gets it after stale_wait_ms, not after the
  // LIST's retry budget; the refresh goes on in the background.
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("a.bin", "1");
  FaultInjectingBackend fb(mem);
  FakeClockMs clock;
  Namespace ns(&fb, nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .stale_wait_ms = 50, .clock_ms = clock.fn()});
  REQUIRE(ns.Lookup(Namespace::kRootIno, "a.bin").has_value());
  clock.advance(60001);  // listing now stale
  mem->Put("b.bin", "2");
  ListGate gate(fb);
  auto a = ns.Lookup(Namespace::kRootIno, "a.bin");  // stale, while the LIST hangs
  REQUIRE(a.has_value());
  CHECK(a->stale);  // the kernel keeps it briefly
  CHECK(ns.Lookup(Namespace::kRootIno, "b.bin").error().code() == Code::kNotFound);
  CHECK(gate.WaitHeld(std::chrono::seconds(20)));  // the refresh, in the background
  CHECK(gate.Release());                           // the lookup did not wait for it
  // The refresh finished in the background.
  CHECK(EventuallyFound(ns, "b.bin", std::chrono::steady_clock::now() + std::chrono::seconds(20)));
}

TEST_CASE("after an outage a lasting error of the bucket reaches the lookups instead of the stale listing") {
  Outage o;
  auto& fb = o.fb;
  auto& ns = o.ns;
  // The bucket answers again, but refuses (credentials expired).
  fb.FailNext(1000, Code::kPermissionDenied, FaultInjectingBackend::kList);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  o.clock.advance(1001);  // the retry (once a second) is due
  Result<InodeAttr> r = ns.Lookup(Namespace::kRootIno, "a.bin");
  while (r.has_value() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    o.clock.advance(1001);
    r = ns.Lookup(Namespace::kRootIno, "a.bin");
  }
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Code::kPermissionDenied);
}

TEST_CASE("a walk over sibling directories prefetches the next ones' listings, once each") {
  auto mem = std::make_shared<MemoryBackend>();
  char name[16];
  for (int c = 0; c < 20; ++c) {
    std::snprintf(name, sizeof name, "c%02d", c);
    for (int i = 0; i < 3; ++i) mem->Put("train/" + std::string(name) + "/f" + std::to_string(i), "x");
  }
  mem->Put("train/c02/x/y.bin", "deeper");  // below a prefetched listing: prefetched too, once
  mem->Put("train/readme.txt", "files between directories are skipped");
  FaultInjectingBackend fb(mem);
  const uint64_t dirs = GENERATE(uint64_t{8}, uint64_t{0});
  Namespace ns(&fb, nullptr, nullptr, Namespace::Options{.ttl_ms = 60000, .prefetch_dirs = dirs});
  auto wait_lists = [&](uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (fb.counts().lists < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return fb.counts().lists;
  };
  auto train = ns.Lookup(Namespace::kRootIno, "train");  // LIST of the root
  REQUIRE(train.has_value());
  REQUIRE(ns.ReadDir(train->ino).has_value());  // LIST train
  auto dir = [&](int c) {
    std::snprintf(name, sizeof name, "c%02d", c);
    auto d = ns.Lookup(train->ino, name);
    REQUIRE(d.has_value());
    REQUIRE(ns.ReadDir(d->ino).has_value());
  };
  dir(0);
  CHECK(fb.counts().lists == 3);  // one child read: not a walk yet
  dir(1);  // a second sibling in a row: c02..c09 in the background, and c02/x below c02
  if (dirs == 0) {
    CHECK(fb.counts().lists == 4);
  } else {
    CHECK(wait_lists(13) == 13);
  }
  for (int c = 2; c < 20; ++c) dir(c);
  // Whatever ran in the background: every directory listed exactly once
  // (root, train, 20 classes; c02/x by the walk prefetch only).
  const uint64_t all = dirs == 0 ? 22 : 23;
  CHECK(wait_lists(all) == all);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(fb.counts().lists == all);
}

// Looks up `path` ("a/b/c") component by component and reads the directory,
// as a walker does.
void ReadDirAt(Namespace& ns, const std::string& path) {
  uint64_t ino = Namespace::kRootIno;
  for (size_t pos = 0; pos < path.size();) {
    const size_t slash = std::min(path.find('/', pos), path.size());
    auto e = ns.Lookup(ino, path.substr(pos, slash - pos));
    REQUIRE(e.has_value());
    ino = e->ino;
    pos = slash + 1;
  }
  REQUIRE(ns.ReadDir(ino).has_value());
}

TEST_CASE("a walk down a deep tree prefetches the listings below the directories it reaches next") {
  // t/ with 3 subdirectories a b c, each with 3, each with 3 (39 below t).
  // A depth-first walker (ls -R, os.walk, find) reads a directory's first
  // child before any sibling: sibling prefetch alone listed one directory
  // ahead of it in such a tree (a cold `ls -lR` of a 3-way tree of 364
  // directories took one LIST latency per directory).
  auto mem = std::make_shared<MemoryBackend>();
  const std::string abc = "abc";
  for (char x : abc)
    for (char y : abc)
      for (char z : abc) mem->Put(std::string("t/") + x + "/" + y + "/" + z + "/f", "x");
  FaultInjectingBackend fb(mem);
  Namespace ns(&fb, nullptr, nullptr, Namespace::Options{.ttl_ms = 60000});
  auto wait_lists = [&](uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (fb.counts().lists < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return fb.counts().lists;
  };
  auto read = [&](const std::string& path) { ReadDirAt(ns, path); };
  // Depth first: t, t/a, t/a/a, its leaves a b c, then t/a/b.
  for (const char* p : {"t", "t/a", "t/a/a", "t/a/a/a", "t/a/a/b", "t/a/a/c"}) read(p);
  const uint64_t before = wait_lists(fb.counts().lists);
  read("t/a/b");  // a second child of t/a: a walk
  // In the background, without the walker: t/a/b's 3 subdirectories, the
  // sibling t/a/c and its 3 (each once); nothing of t/b or t/c, which the
  // walker has not reached.
  CHECK(wait_lists(before + 1 + 7) == before + 1 + 7);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(fb.counts().lists == before + 1 + 7);
  CHECK(ns.CachedListing("t/a/c/b") != nullptr);
  CHECK(ns.CachedListing("t/b") == nullptr);
}

TEST_CASE("the walk prefetch's descent stops with the walk, kWalkAhead listings beyond it at most") {
  // A 4-way tree 5 levels deep below t/a/b (1364 directories): a walk that
  // stops right after it is seen must not list the subtrees it never reads
  // (the first version of the descent bounded only the queue, and crawled
  // whole subtrees).
  auto mem = std::make_shared<MemoryBackend>();
  std::vector<std::string> level{"t/a/b"};
  for (int d = 0; d < 5; ++d) {
    std::vector<std::string> next;
    for (const auto& p : level)
      for (char c : std::string("wxyz")) next.push_back(p + "/" + c);
    level = std::move(next);
  }
  for (const auto& p : level) mem->Put(p + "/f", "x");
  mem->Put("t/a/a/f", "x");
  FaultInjectingBackend fb(mem);
  Namespace ns(&fb, nullptr, nullptr, Namespace::Options{.ttl_ms = 60000});
  auto read = [&](const std::string& path) { ReadDirAt(ns, path); };
  for (const char* p : {"t", "t/a", "t/a/a"}) read(p);
  const uint64_t before = fb.counts().lists;
  read("t/a/b");  // a walk: t/a/b's subtree is what it reaches next
  // The walk's first listings (t/a/b's subdirectories), however late its
  // threads start, then until the background has nothing left to do (no
  // new LIST for 300 ms).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (fb.counts().lists < before + 1 + 4 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  uint64_t last = 0, now = fb.counts().lists;
  do {
    last = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    now = fb.counts().lists;
  } while (now != last && std::chrono::steady_clock::now() < until);
  INFO("listings after the walk stopped: " << now - before);
  CHECK(now - before <= 1 + Namespace::kWalkAhead);
  CHECK(now - before >= 1 + 4);  // t/a/b and at least its own subdirectories
}

TEST_CASE("listings nobody holds are dropped past max_listed_entries, and come back on use") {
  auto mem = std::make_shared<MemoryBackend>();
  for (int d = 0; d < 10; ++d)
    for (int f = 0; f < 10; ++f) mem->Put("d" + std::to_string(d) + "/f" + std::to_string(f), "x");
  Namespace ns(mem.get(), nullptr, nullptr,
               Namespace::Options{.ttl_ms = 60000, .prefetch_dirs = 0, .max_listed_entries = 40});
  std::shared_ptr<const DirListing> held;  // an open directory handle on d0
  for (int d = 0; d < 10; ++d) {
    auto dir = ns.Lookup(Namespace::kRootIno, "d" + std::to_string(d));
    REQUIRE(dir.has_value());
    auto l = ns.ReadDir(dir->ino);
    REQUIRE(l.has_value());
    if (d == 0) held = *l;
    CHECK(ns.listed_entries() <= 40 + 10);  // the root's 10, then at most one listing over
  }
  CHECK(ns.CachedListing("d0") == held);  // held by a handle: kept
  CHECK(ns.CachedListing("d1") == nullptr);  // oldest idle: dropped
  // A dropped listing is fetched again when used.
  auto d1 = ns.Lookup(Namespace::kRootIno, "d1");
  REQUIRE(d1.has_value());
  auto f = ns.Lookup(d1->ino, "f3");
  REQUIRE(f.has_value());
  CHECK(f->size == 1);
}

namespace {
// A BlockStore passing every call to a real one: the tests' stores below
// change one or two calls.
class WrappedStore : public BlockStore {
 public:
  explicit WrappedStore(BlockStore& inner) : in_(inner) {}
  std::optional<size_t> Read(const UnitKey& key, uint64_t offset, size_t len, char* out, bool hit) override {
    return in_.Read(key, offset, len, out, hit);
  }
  Status Put(const UnitKey& key, std::string_view data, bool prefetched) override {
    return in_.Put(key, data, prefetched);
  }
  bool Contains(const UnitKey& key) override { return in_.Contains(key); }
  void Remove(const UnitKey& key) override { in_.Remove(key); }
  uint64_t used_bytes() const override { return in_.used_bytes(); }
  uint64_t limit_bytes() const override { return in_.limit_bytes(); }
  uint64_t unit_count() const override { return in_.unit_count(); }
  Status PutMeta(std::string_view key, std::string_view value) override { return in_.PutMeta(key, value); }
  std::optional<std::string> GetMeta(std::string_view key) override { return in_.GetMeta(key); }
  Result<std::optional<std::string>> LookupMeta(std::string_view key) override { return in_.LookupMeta(key); }
  void DeleteMeta(std::string_view key) override { in_.DeleteMeta(key); }
  Result<uint64_t> DeleteMetaPrefix(std::string_view prefix) override { return in_.DeleteMetaPrefix(prefix); }

 private:
  BlockStore& in_;
};

// PutMeta (and DeleteMeta) fail while `fail_meta`: a full or read-only
// cache volume.
class MetaFailingStore final : public WrappedStore {
 public:
  using WrappedStore::WrappedStore;
  std::atomic<bool> fail_meta{false};
  Status PutMeta(std::string_view key, std::string_view value) override {
    if (fail_meta) return Status::IoError("No space left on device");
    return WrappedStore::PutMeta(key, value);
  }
  void DeleteMeta(std::string_view key) override {
    if (!fail_meta) WrappedStore::DeleteMeta(key);  // a full volume takes no delete either
  }
};
}  // namespace

namespace {
// Counts the reads of one meta key, each made slow (a large listing's decode).
class SlowMetaStore final : public WrappedStore {
 public:
  SlowMetaStore(BlockStore& inner, std::string key) : WrappedStore(inner), key_(std::move(key)) {}
  std::atomic<int> reads{0};
  std::optional<std::string> GetMeta(std::string_view key) override {
    if (key == key_) {
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return WrappedStore::GetMeta(key);
  }

 private:
  std::string key_;
};
}  // namespace

TEST_CASE("many lookups in a directory whose listing is only in the index read it once") {
  // After a remount, 16 loader workers looking up names in one large
  // directory each read and decoded its saved listing (its memory 16 times
  // over); one reads it now, the others wait for it.
  const BlockStoreOptions o = FreshStore("igt-ns-loadonce");
  auto mem = std::make_shared<MemoryBackend>();
  for (int f = 0; f < 50; ++f) mem->Put("d/f" + std::to_string(f), "x");
  FakeClockMs clock;
  auto real = BlockStore::Open(o, nullptr);
  REQUIRE(real.has_value());
  const Namespace::Options opts{.ttl_ms = 600000, .prefetch_dirs = 0, .clock_ms = clock.fn()};
  uint64_t d_ino = 0;
  {
    Namespace ns(mem.get(), real->get(), nullptr, opts);
    auto d = ns.Lookup(Namespace::kRootIno, "d");
    REQUIRE(d.has_value());
    REQUIRE(ns.Lookup(d->ino, "f1").has_value());  // d's listing saved
    d_ino = d->ino;
  }
  for (bool stale : {false, true}) {
    if (stale) clock.advance(600001);  // saved listings past the TTL: served stale while relisted
    SlowMetaStore store(**real, "l/d");
    Namespace ns(mem.get(), &store, nullptr, opts);
    auto d = ns.Lookup(Namespace::kRootIno, "d");
    REQUIRE(d.has_value());
    CHECK(d->ino == d_ino);
    std::vector<std::thread> workers;
    std::atomic<int> found{0};
    for (int w = 0; w < 16; ++w)
      workers.emplace_back([&, w] {
        if (ns.Lookup(d->ino, "f" + std::to_string(w)).has_value()) ++found;
      });
    for (auto& t : workers) t.join();
    CHECK(found == 16);
    CHECK(store.reads == 1);
  }
  real->reset();
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("a listing that could not be saved keeps the index's older copy from coming back") {
  // The cache volume is full: a relisting (a new version of d/a.bin) is not
  // saved. Dropped from memory for room and loaded again, the index's older
  // copy (still within its TTL) was served as the newest: the name went
  // back to the old version, every read of which fails.
  const BlockStoreOptions o = FreshStore("igt-ns-unsaved");
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "v1");
  for (int d = 0; d < 6; ++d)
    for (int f = 0; f < 10; ++f) mem->Put("e" + std::to_string(d) + "/f" + std::to_string(f), "x");
  auto real = BlockStore::Open(o, nullptr);
  REQUIRE(real.has_value());
  MetaFailingStore store(**real);
  FakeClockMs clock;
  Namespace ns(mem.get(), &store, nullptr,
               Namespace::Options{.ttl_ms = 60000, .prefetch_dirs = 0, .max_listed_entries = 30, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto v1 = ns.Lookup(d->ino, "a.bin");  // d's listing saved, naming v1
  REQUIRE(v1.has_value());
  clock.advance(10);
  store.fail_meta = true;
  mem->Put("d/a.bin", "v2-longer");
  ns.NoteChanged("d/a.bin", v1->etag);
  auto v2 = ns.Lookup(d->ino, "a.bin");  // relisted: v2, not saved
  REQUIRE(v2.has_value());
  CHECK(v2->size == 9);
  for (int e = 0; e < 6; ++e) {  // other directories push d's listing out of memory
    auto dir = ns.Lookup(Namespace::kRootIno, "e" + std::to_string(e));
    REQUIRE(dir.has_value());
    REQUIRE(ns.ReadDir(dir->ino).has_value());
  }
  REQUIRE(ns.CachedListing("d") == nullptr);
  auto again = ns.Lookup(d->ino, "a.bin");
  REQUIRE(again.has_value());
  CHECK(again->etag == v2->etag);
  CHECK(again->size == 9);
  real->reset();
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("a mount started on persisted listings serves a stale one while the bucket stalls") {
  // A restart after the TTL: the listings are in the index, not in memory.
  // A bucket that accepts connections and never answers must not hold the
  // lookups for the LIST's retry budget (it did: only listings kept in
  // memory were served stale).
  const BlockStoreOptions o = FreshStore("igt-ns-restart-stall");
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "1");
  FaultInjectingBackend fb(mem);
  FakeClockMs clock;
  auto store = BlockStore::Open(o, nullptr);
  REQUIRE(store.has_value());
  const Namespace::Options opts{.ttl_ms = 60000, .prefetch_threads = 1, .stale_wait_ms = 50, .clock_ms = clock.fn()};
  {
    Namespace ns(&fb, store->get(), nullptr, opts);
    auto d = ns.Lookup(Namespace::kRootIno, "d");
    REQUIRE(d.has_value());
    REQUIRE(ns.Lookup(d->ino, "a.bin").has_value());
  }
  clock.advance(60001);  // the persisted listings are stale now
  {
    ListGate gate(fb, /*all=*/true);  // before ns: ns (its threads) goes first
    Namespace ns(&fb, store->get(), nullptr, opts);
    auto d = ns.Lookup(Namespace::kRootIno, "d");  // after stale_wait_ms
    REQUIRE(d.has_value());
    CHECK(d->stale);
    for (int i = 0; i < 5; ++i) CHECK(ns.Lookup(Namespace::kRootIno, "d").has_value());  // at once: in memory
    clock.advance(100);
    // The background thread is held by the root's refresh; the bucket is
    // slow: d's refresh is queued, and the lookup gets d's stale listing.
    CHECK(ns.Lookup(d->ino, "a.bin").has_value());
    CHECK(gate.Release());  // no lookup waited for a LIST
  }
  store->reset();
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("a relisting tells its hook which names the bucket no longer has or has changed, and which have inodes") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/keep.bin", "k");
  mem->Put("d/old.bin", "o");
  mem->Put("d/unseen.bin", "u");
  mem->Put("d/sub/x.bin", "x");
  mem->Put("d/flip", "a file, then a directory");
  mem->Put("d/grown.bin", "g");
  FakeClockMs clock;
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{.ttl_ms = 0, .clock_ms = clock.fn()});
  // ttl 0: every lookup lists again, itself (a stale listing's refresh runs
  // on a background thread, and its hook after the lookup was released).
  std::vector<std::pair<std::string, Namespace::ListingDiff>> calls;
  ns.set_relist_hook([&](const std::string& dir, const Namespace::ListingDiff& diff) { calls.emplace_back(dir, diff); });
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  for (const char* n : {"old.bin", "sub", "flip", "grown.bin"}) REQUIRE(ns.Lookup(d->ino, n).has_value());
  CHECK(calls.empty());  // first listings replace nothing
  mem->Delete("d/old.bin");
  mem->Delete("d/unseen.bin");
  mem->Delete("d/sub/x.bin");
  mem->Delete("d/flip");
  mem->Put("d/flip/y.bin", "y");
  mem->Put("d/new.bin", "n");
  mem->Put("d/grown.bin", "grown");
  clock.advance(2000);  // past the TTL: the next lookup relists
  REQUIRE(ns.Lookup(d->ino, "keep.bin").has_value());
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].first == "d");
  auto names = [](const std::vector<DirEntry>& v) {
    std::vector<std::string> out;
    for (const auto& e : v) out.push_back(e.name + (e.is_dir ? "/" : ""));
    return out;
  };
  CHECK(names(calls[0].second.gone) == std::vector<std::string>{"flip", "old.bin", "sub/", "unseen.bin"});
  CHECK(names(calls[0].second.changed) == std::vector<std::string>{"grown.bin"});
  CHECK(calls[0].second.changed[0].size == 5);  // as listed now
  // The kernel entries to drop: names looked up (with an inode), not the unseen one.
  auto live = ns.LiveEntries("d", calls[0].second.gone);
  std::vector<std::string> live_names;
  for (const auto& [parent, name] : live) {
    CHECK(parent == d->ino);
    live_names.push_back(name);
  }
  CHECK(live_names == std::vector<std::string>{"flip", "old.bin", "sub"});
  // The same listing again: nothing more to tell.
  clock.advance(2000);
  REQUIRE(ns.Lookup(d->ino, "keep.bin").has_value());
  CHECK(calls.size() == 1);
  CHECK(Namespace::DiffListings(DirListing{}, DirListing{}).empty());
}

TEST_CASE("a relisting in the background of a listing not in memory tells its removals, from the index's copy") {
  // After a restart (or once a listing was dropped from memory for room)
  // the walk prefetch lists the next directories in the background: their
  // stale copies in the index were not in memory, and the names the bucket
  // no longer had went unreported (the engine then kept an earlier mount's
  // deleted files as live).
  const BlockStoreOptions o = FreshStore("igt-ns-relist-index");
  auto mem = std::make_shared<MemoryBackend>();
  for (const char* k : {"top/a/x.bin", "top/b/x.bin", "top/c/keep.bin", "top/c/old.bin", "top/d/x.bin"})
    mem->Put(k, "1");
  FakeClockMs clock;
  auto store = BlockStore::Open(o, nullptr);
  REQUIRE(store.has_value());
  const Namespace::Options opts{.ttl_ms = 60000, .prefetch_threads = 1, .clock_ms = clock.fn()};
  {
    Namespace ns(mem.get(), store->get(), nullptr, opts);
    auto top = ns.Lookup(Namespace::kRootIno, "top");
    REQUIRE(top.has_value());
    for (const char* d : {"a", "b", "c", "d"}) {
      auto e = ns.Lookup(top->ino, d);
      REQUIRE(e.has_value());
      REQUIRE(ns.ReadDir(e->ino).has_value());
    }
  }
  mem->Delete("top/c/old.bin");
  clock.advance(60001);  // the persisted listings are stale now
  Namespace ns(mem.get(), store->get(), nullptr, opts);
  std::mutex mu;
  std::vector<std::pair<std::string, std::vector<std::string>>> calls;
  ns.set_relist_hook([&](const std::string& dir, const Namespace::ListingDiff& diff) {
    std::lock_guard lk(mu);
    std::vector<std::string> gone;
    for (const auto& e : diff.gone) gone.push_back(e.name);
    calls.emplace_back(dir, gone);
  });
  auto top = ns.Lookup(Namespace::kRootIno, "top");
  REQUIRE(top.has_value());
  // A walk: a and b read in a row; c and d are listed in the background.
  for (const char* d : {"a", "b"}) {
    auto e = ns.Lookup(top->ino, d);
    REQUIRE(e.has_value());
    REQUIRE(ns.ReadDir(e->ino).has_value());
  }
  bool told = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!told && std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard lk(mu);
      for (const auto& [dir, gone] : calls) told = told || (dir == "top/c" && gone == std::vector<std::string>{"old.bin"});
    }
    if (!told) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(told);
  store->reset();
  std::filesystem::remove_all(o.dir);
}

TEST_CASE("readdirplus: an entry of a handle's listing is a lookup, never of an older version than the name's") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "v1");
  FakeClockMs clock;
  Namespace ns(mem.get(), nullptr, nullptr, Namespace::Options{.ttl_ms = 0, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  auto snap = ns.ReadDir(d->ino);  // what an open directory handle holds
  REQUIRE(snap.has_value());
  const DirEntry& e = (*snap)->entries.at(0);
  const size_t before = ns.inode_count();
  auto a1 = ns.LookupListed(d->ino, **snap, e);
  REQUIRE(a1.has_value());
  CHECK(a1->size == 2);
  CHECK(ns.inode_count() == before + 1);
  auto a1b = ns.Lookup(d->ino, "a.bin");  // the same inode, a second reference
  REQUIRE(a1b.has_value());
  CHECK(a1b->ino == a1->ino);
  ns.Forget(a1->ino, 2);
  CHECK(ns.inode_count() == before);
  // The object changes and a lookup relists: the name's inode is v2's. The
  // handle's older listing does not move it back to v1.
  mem->Put("d/a.bin", "v2-longer");
  clock.advance(2000);
  auto a2 = ns.Lookup(d->ino, "a.bin");
  REQUIRE(a2.has_value());
  CHECK(a2->size == 9);
  auto old = ns.LookupListed(d->ino, **snap, e);  // answered from the newer listing
  REQUIRE(old.has_value());
  CHECK(old->ino == a2->ino);
  CHECK(old->size == 9);
  ns.Forget(a2->ino, 2);
  CHECK(ns.inode_count() == before);
  // Deleted since the handle's listing, and relisted: no inode comes back
  // for it (every read of it would fail).
  mem->Delete("d/a.bin");
  mem->Put("d/other.bin", "o");
  clock.advance(2000);
  auto other = ns.Lookup(d->ino, "other.bin");  // relists d
  REQUIRE(other.has_value());
  CHECK_FALSE(ns.LookupListed(d->ino, **snap, e).has_value());
  ns.Forget(other->ino, 1);
  CHECK(ns.inode_count() == before);
  // A directory inode the kernel forgot: no entry given.
  ns.Forget(d->ino, 1);
  CHECK_FALSE(ns.LookupListed(d->ino, **snap, e).has_value());
}

TEST_CASE("a directory deleted from the bucket keeps its attributes for those holding its inode") {
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("d/a.bin", "a");
  mem->Put("keep.bin", "k");
  FakeClockMs clock;
  // stale_wait_ms long: a stale listing's refresh is waited for, however
  // late the background thread runs it.
  Namespace ns(mem.get(), nullptr, nullptr,
               Namespace::Options{.ttl_ms = 1000, .stale_wait_ms = 60000, .clock_ms = clock.fn()});
  auto d = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d.has_value());
  mem->Delete("d/a.bin");
  clock.advance(2000);
  auto a = ns.GetAttr(d->ino);  // fstat of an open directory, a working directory
  REQUIRE(a.has_value());
  CHECK(a->is_dir);
  CHECK_FALSE(ns.Lookup(Namespace::kRootIno, "d").has_value());  // the name is gone
  // Created again: the name leads to a directory again.
  mem->Put("d/b.bin", "b");
  clock.advance(2000);
  auto d2 = ns.Lookup(Namespace::kRootIno, "d");
  REQUIRE(d2.has_value());
  CHECK(d2->is_dir);
  CHECK(ns.Lookup(d2->ino, "b.bin").has_value());
}

TEST_CASE("listings of a directory gone from the bucket, and of those below it, are dropped from memory and index") {
  const BlockStoreOptions o = FreshStore("igt-ns-gone-dirs");
  auto mem = std::make_shared<MemoryBackend>();
  mem->Put("runs/step-1/a.bin", "a");
  mem->Put("runs/step-1/sub/b.bin", "b");
  mem->Put("runs/step-10/c.bin", "c");  // a sibling whose name starts the same
  auto store = BlockStore::Open(o, nullptr);
  REQUIRE(store.has_value());
  FakeClockMs clock;
  Namespace ns(mem.get(), store->get(), nullptr, Namespace::Options{.ttl_ms = 0, .clock_ms = clock.fn()});
  auto runs = ns.Lookup(Namespace::kRootIno, "runs");
  REQUIRE(runs.has_value());
  auto s1 = ns.Lookup(runs->ino, "step-1");
  REQUIRE(s1.has_value());
  auto sub = ns.Lookup(s1->ino, "sub");
  REQUIRE(sub.has_value());
  REQUIRE(ns.Lookup(sub->ino, "b.bin").has_value());
  auto s10 = ns.Lookup(runs->ino, "step-10");
  REQUIRE(s10.has_value());
  REQUIRE(ns.Lookup(s10->ino, "c.bin").has_value());
  for (const char* d : {"runs/step-1", "runs/step-1/sub", "runs/step-10"}) {
    REQUIRE(ns.CachedListing(d) != nullptr);
    REQUIRE((*store)->GetMeta(std::string("l/") + d).has_value());
  }
  mem->Delete("runs/step-1/a.bin");
  mem->Delete("runs/step-1/sub/b.bin");
  clock.advance(2000);
  CHECK_FALSE(ns.Lookup(runs->ino, "step-1").has_value());  // relists runs/: step-1/ is gone
  for (const char* d : {"runs/step-1", "runs/step-1/sub"}) {
    INFO(d);
    CHECK(ns.CachedListing(d) == nullptr);
    CHECK_FALSE((*store)->GetMeta(std::string("l/") + d).has_value());
  }
  CHECK(ns.CachedListing("runs/step-10") != nullptr);
  CHECK((*store)->GetMeta("l/runs/step-10").has_value());
  std::filesystem::remove_all(o.dir);
}
