#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backends/local_backend.h"
#include "igtcache/backends.h"

namespace fs = std::filesystem;
using igt::Code;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/igt-local-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path / "locked", fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  void Write(const std::string& rel, const std::string& bytes) const {
    fs::create_directories((path / rel).parent_path());
    std::ofstream(path / rel, std::ios::binary) << bytes;
  }
};

std::vector<std::string> Keys(const igt::ListPage& p) {
  std::vector<std::string> k;
  for (const auto& o : p.objects) k.push_back(o.key);
  return k;
}

// All keys (objects + prefixes) of a listing, page by page.
std::vector<std::string> ListAll(igt::Backend& b, igt::ListRequest req, int* pages = nullptr) {
  std::vector<std::string> all;
  int n = 0;
  for (;;) {
    auto p = b.List(req);
    REQUIRE(p);
    ++n;
    REQUIRE(p->objects.size() + p->prefixes.size() <= static_cast<size_t>(req.max_keys));
    std::vector<std::string> page;
    for (auto& o : p->objects) page.push_back(o.key);
    for (auto& x : p->prefixes) page.push_back(x);
    std::sort(page.begin(), page.end());
    all.insert(all.end(), page.begin(), page.end());
    if (p->next_token.empty()) break;
    req.continuation_token = p->next_token;
    REQUIRE(n < 1000);
  }
  if (pages) *pages = n;
  return all;
}

}  // namespace

TEST_CASE("local: ValidateKey", "[local]") {
  using igt::local::ValidateKey;
  CHECK(ValidateKey("a/b.txt").ok());
  CHECK(ValidateKey("a..b/..c").ok());
  CHECK(ValidateKey("..").code() == Code::kInvalidArgument);
  CHECK(ValidateKey("a/../b").code() == Code::kInvalidArgument);
  CHECK(ValidateKey("a/..").code() == Code::kInvalidArgument);
  CHECK(ValidateKey("/etc/passwd").code() == Code::kInvalidArgument);
  CHECK(ValidateKey(std::string("a\0b", 3)).code() == Code::kInvalidArgument);
  CHECK(ValidateKey("").code() == Code::kInvalidArgument);
}

TEST_CASE("local: list, stat and read", "[local]") {
  TempDir t;
  t.Write("b.txt", "hello world");
  t.Write("a.bin", std::string(10000, 'x'));
  t.Write("sub/one", "1");
  t.Write("sub/two", "22");
  t.Write("sub/deeper/three", "333");
  t.Write("sub.txt", "dot sorts before slash");
  fs::create_directories(t.path / "emptydir");
  ::mkfifo((t.path / "fifo").c_str(), 0600);  // special files are invisible

  auto b = igt::MakeLocalBackend(t.path.string());
  REQUIRE(b);
  CHECK((*b)->Describe() == "file://" + fs::canonical(t.path).string());
  CHECK((*b)->Probe().ok());

  SECTION("root listing with delimiter") {
    auto p = (*b)->List({});
    REQUIRE(p);
    CHECK(Keys(*p) == std::vector<std::string>{"a.bin", "b.txt", "sub.txt"});
    CHECK(p->prefixes == std::vector<std::string>{"emptydir/", "sub/"});
    CHECK(p->next_token.empty());
    CHECK(p->objects[0].size == 10000);
  }
  SECTION("sub-directory listing and name prefixes") {
    igt::ListRequest req;
    req.prefix = "sub/";
    auto p = (*b)->List(req);
    REQUIRE(p);
    CHECK(Keys(*p) == std::vector<std::string>{"sub/one", "sub/two"});
    CHECK(p->prefixes == std::vector<std::string>{"sub/deeper/"});
    req.prefix = "sub/t";
    p = (*b)->List(req);
    REQUIRE(p);
    CHECK(Keys(*p) == std::vector<std::string>{"sub/two"});
    CHECK(p->prefixes.empty());
    req.prefix = "nope/";
    p = (*b)->List(req);
    REQUIRE(p);  // empty prefix: empty page, not NotFound
    CHECK(p->objects.empty());
    req.prefix = "../";
    CHECK((*b)->List(req).error().code() == Code::kInvalidArgument);
  }
  SECTION("pagination with delimiter, in S3 key order") {
    igt::ListRequest req;
    req.max_keys = 2;
    int pages = 0;
    auto all = ListAll(**b, req, &pages);
    CHECK(all == std::vector<std::string>{"a.bin", "b.txt", "emptydir/", "sub.txt", "sub/"});
    CHECK(pages == 3);
  }
  SECTION("recursive listing, paginated") {
    igt::ListRequest req;
    req.delimiter = "";
    req.max_keys = 2;
    auto all = ListAll(**b, req);
    CHECK(all == std::vector<std::string>{"a.bin", "b.txt", "sub.txt", "sub/deeper/three", "sub/one",
                                          "sub/two"});
    req.prefix = "sub/";
    req.max_keys = 1000;
    CHECK(ListAll(**b, req) == std::vector<std::string>{"sub/deeper/three", "sub/one", "sub/two"});
  }
  SECTION("stat") {
    auto s = (*b)->Stat("sub/two");
    REQUIRE(s);
    CHECK(s->key == "sub/two");
    CHECK(s->size == 2);
    CHECK(s->mtime_ns > 0);
    CHECK(!s->etag.empty());
    CHECK((*b)->Stat("nope").error().code() == Code::kNotFound);
    CHECK((*b)->Stat("sub").error().code() == Code::kNotFound);  // a directory is not an object
    CHECK((*b)->Stat("fifo").error().code() == Code::kNotFound);
    CHECK((*b)->Stat("../x").error().code() == Code::kInvalidArgument);
    CHECK((*b)->Stat("/etc/passwd").error().code() == Code::kInvalidArgument);
  }
  SECTION("read, short read at EOF, read past EOF") {
    auto s = (*b)->Stat("b.txt");
    REQUIRE(s);
    char buf[64];
    auto n = (*b)->Read("b.txt", 0, 5, s->etag, buf);
    REQUIRE(n);
    CHECK(*n == 5);
    CHECK(std::string(buf, 5) == "hello");
    n = (*b)->Read("b.txt", 6, 64, s->etag, buf);
    REQUIRE(n);
    CHECK(*n == 5);
    CHECK(std::string(buf, 5) == "world");
    n = (*b)->Read("b.txt", 11, 10, "", buf);
    REQUIRE(n);
    CHECK(*n == 0);
    n = (*b)->Read("b.txt", 1000, 10, s->etag, buf);
    REQUIRE(n);
    CHECK(*n == 0);
    CHECK((*b)->Read("missing", 0, 10, "", buf).error().code() == Code::kNotFound);
  }
  SECTION("a changed file gives kChanged") {
    auto s = (*b)->Stat("b.txt");
    REQUIRE(s);
    // Same size, new inode (replace by rename): the ETag must change.
    t.Write("b2.tmp", "HELLO WORLD");
    fs::rename(t.path / "b2.tmp", t.path / "b.txt");
    char buf[16];
    auto n = (*b)->Read("b.txt", 0, 5, s->etag, buf);
    REQUIRE(!n);
    CHECK(n.error().code() == Code::kChanged);
    auto s2 = (*b)->Stat("b.txt");
    REQUIRE(s2);
    CHECK(s2->etag != s->etag);
    n = (*b)->Read("b.txt", 0, 5, s2->etag, buf);
    REQUIRE(n);
    CHECK(std::string(buf, 5) == "HELLO");
  }
}

TEST_CASE("local: symlinks stay inside the root", "[local]") {
  TempDir outside;
  outside.Write("secret.txt", "secret");
  TempDir t;
  t.Write("real/data.txt", "data");
  fs::create_symlink(t.path / "real/data.txt", t.path / "abs_inside");
  fs::create_symlink("real/data.txt", t.path / "rel_inside");
  fs::create_symlink("real", t.path / "dirlink");
  fs::create_symlink(outside.path / "secret.txt", t.path / "escape");
  fs::create_symlink("../" + outside.path.filename().string(), t.path / "escape_dir");
  fs::create_symlink("nowhere", t.path / "dangling");
  fs::create_symlink(".", t.path / "loop");  // cycles: not listed
  fs::create_symlink("..", t.path / "real/up");
  fs::create_symlink("../real", t.path / "real/self");
  fs::create_directories(t.path / "other");
  fs::create_symlink("../real", t.path / "other/r");  // other/r/o/r/o/...: a cycle over two dirs
  fs::create_symlink("../other", t.path / "real/o");
  auto b = igt::MakeLocalBackend(t.path.string());
  REQUIRE(b);
  auto p = (*b)->List({});
  REQUIRE(p);
  CHECK(Keys(*p) == std::vector<std::string>{"abs_inside", "rel_inside"});
  CHECK(p->prefixes == std::vector<std::string>{"dirlink/", "other/", "real/"});
  igt::ListRequest sub;
  sub.prefix = "real/";
  auto in_real = (*b)->List(sub);
  REQUIRE(in_real);
  CHECK(Keys(*in_real) == std::vector<std::string>{"real/data.txt"});
  // "up -> .." and "self -> ../real" hidden; "o -> ../other" shown, but in
  // it "r -> ../real" leads back up the listed path: hidden.
  CHECK(in_real->prefixes == std::vector<std::string>{"real/o/"});
  sub.prefix = "real/o/";
  auto in_o = (*b)->List(sub);
  REQUIRE(in_o);
  CHECK(in_o->prefixes.empty());
  char buf[16];
  auto n = (*b)->Read("rel_inside", 0, 16, "", buf);
  REQUIRE(n);
  CHECK(std::string(buf, *n) == "data");
  CHECK((*b)->Read("dirlink/data.txt", 0, 16, "", buf).value() == 4);
  // A file reached through a link names the key holding its bytes (one
  // cached copy for all its names); a plain file names none.
  for (const auto& o : p->objects) CHECK(o.data_key == "real/data.txt");
  CHECK(in_real->objects.front().data_key.empty());
  sub.prefix = "dirlink/";
  auto in_link = (*b)->List(sub);
  REQUIRE(in_link);
  REQUIRE(Keys(*in_link) == std::vector<std::string>{"dirlink/data.txt"});
  CHECK(in_link->objects.front().data_key == "real/data.txt");
  CHECK((*b)->Stat("dirlink/data.txt")->data_key == "real/data.txt");
  CHECK((*b)->Stat("real/data.txt")->data_key.empty());
  CHECK((*b)->Stat("rel_inside")->etag == (*b)->Stat("real/data.txt")->etag);
  CHECK((*b)->Stat("escape").error().code() == Code::kNotFound);
  CHECK((*b)->Read("escape", 0, 16, "", buf).error().code() == Code::kNotFound);
  CHECK((*b)->Stat("escape_dir/secret.txt").error().code() == Code::kNotFound);
  igt::ListRequest req;
  req.prefix = "escape_dir/";
  auto esc = (*b)->List(req);
  REQUIRE(esc);
  CHECK(esc->objects.empty());

  // Recursive listing terminates despite the "loop -> ." link.
  req.prefix = "";
  req.delimiter = "";
  auto all = ListAll(**b, req);
  CHECK(std::count(all.begin(), all.end(), "real/data.txt") == 1);
  CHECK(all.size() < 20);
}

TEST_CASE("local: Probe and factory errors", "[local]") {
  auto b = igt::MakeLocalBackend("/nonexistent/igt/dir");
  REQUIRE(!b);
  CHECK(b.error().code() == Code::kNotFound);
  CHECK_THAT(b.error().message(), Catch::Contains("/nonexistent/igt/dir"));
  CHECK(igt::MakeLocalBackend("relative/dir").error().code() == Code::kInvalidArgument);
  TempDir t;
  t.Write("file", "x");
  CHECK(igt::MakeLocalBackend((t.path / "file").string()).error().code() == Code::kInvalidArgument);
  if (::geteuid() != 0) {  // root reads through any permission bits
    fs::create_directories(t.path / "locked");
    fs::permissions(t.path / "locked", fs::perms::none);
    auto l = igt::MakeLocalBackend((t.path / "locked").string());
    REQUIRE(!l);
    CHECK(l.error().code() == Code::kPermissionDenied);
  }
}

TEST_CASE("local: a source directory gone while mounted is an outage, not an empty bucket", "[local]") {
  TempDir t;
  t.Write("src/a/f", "x");
  auto b = igt::MakeLocalBackend((t.path / "src").string());
  REQUIRE(b);
  REQUIRE((*b)->List({}).has_value());
  fs::rename(t.path / "src", t.path / "moved");
  for (const char* prefix : {"", "a/"}) {
    igt::ListRequest r;
    r.prefix = prefix;
    auto l = (*b)->List(r);
    REQUIRE(!l);
    CHECK(l.error().code() == Code::kUnavailable);
    CHECK_THAT(l.error().message(), Catch::Contains("is gone"));
  }
  // A read of one of its files too: not a missing (changed) object.
  char buf[1];
  auto r = (*b)->Read("a/f", 0, 1, "", buf);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kUnavailable);
  CHECK((*b)->Stat("a/f").error().code() == Code::kUnavailable);
  fs::rename(t.path / "moved", t.path / "src");
  CHECK((*b)->List({}).has_value());
}

TEST_CASE("local: the pages of one listing come from one read of the directory", "[local]") {
  // Each page read the whole directory again (with a stat of every entry):
  // quadratic, 8 minutes for 200,000 files. Now the later pages of a
  // listing are of the directory as its first page found it, as S3's are.
  TempDir t;
  for (int i = 0; i < 2500; ++i) t.Write(fmt::format("big/f{:05}", i), "x");
  auto b = igt::MakeLocalBackend(t.path.string());
  REQUIRE(b);
  igt::ListRequest req;
  req.prefix = "big/";
  req.max_keys = 1000;
  auto p1 = (*b)->List(req);
  REQUIRE(p1);
  REQUIRE(p1->objects.size() == 1000);
  REQUIRE(!p1->next_token.empty());
  t.Write("big/f99999", "late");  // after the first page: not in this listing
  std::vector<std::string> all = Keys(*p1);
  req.continuation_token = p1->next_token;
  for (;;) {
    auto p = (*b)->List(req);
    REQUIRE(p);
    auto k = Keys(*p);
    all.insert(all.end(), k.begin(), k.end());
    if (p->next_token.empty()) break;
    req.continuation_token = p->next_token;
  }
  REQUIRE(all.size() == 2500);
  CHECK(std::is_sorted(all.begin(), all.end()));
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  CHECK(all.back() == "big/f02499");
  // A new listing reads the directory again.
  req.continuation_token.clear();
  CHECK(ListAll(**b, req).size() == 2501);
}
