// Unit tests of the command line's pure parts: the stats table and the
// mount(8) helper's parser (the commands themselves run in tests/mount).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <ctime>

#include "src/cli/ops_cmds.h"

using namespace igt;

namespace {

// A stats object with `n` labelled streams "s<i>/" holding i MiB each, and
// an unlabelled "?dir/" one holding `unlabelled` bytes.
nlohmann::json Stats(int n, uint64_t unlabelled) {
  nlohmann::json j = {{"version", "t"}, {"source", "file:///x"}, {"pid", 1}, {"uptime_s", 5}};
  j["streams"] = nlohmann::json::array();
  j["engine"] = {{"streams", nlohmann::json::array()}};
  for (int i = 0; i < n; ++i) {
    const std::string p = "s" + std::to_string(i) + "/";
    j["streams"].push_back({{"path", p}, {"label", "sequential"}, {"granularity", "file"}, {"samples", 40}});
    j["engine"]["streams"].push_back({{"stream", p}, {"cached_bytes", uint64_t(i) << 20}, {"hit_ratio", 0.5}});
  }
  j["engine"]["streams"].push_back({{"stream", "?dir/"}, {"label", "unknown"}, {"cached_bytes", unlabelled}});
  return j;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("stats table: unlabelled streams holding nothing are left out", "[cli]") {
  const auto empty = StatsTable(Stats(2, 0), nullptr, 0);
  CHECK(Count(empty, "?dir/") == 0);
  CHECK(Count(empty, "s1/") == 1);
  const auto holding = StatsTable(Stats(2, 4096), nullptr, 0);
  CHECK(Count(holding, "?dir/") == 1);
}

TEST_CASE("stats table: the engine's holding streams are left out once empty", "[cli]") {
  for (uint64_t held : {uint64_t{0}, uint64_t{4096}}) {
    auto j = Stats(1, 0);
    for (const char* k : {"(warm)", "(readahead)", "(scan)"})
      j["engine"]["streams"].push_back({{"stream", k}, {"label", "unknown"}, {"cached_bytes", held}});
    const auto t = StatsTable(j, nullptr, 0);
    for (const char* k : {"(warm)", "(readahead)", "(scan)"}) CHECK(Count(t, k) == (held ? 1u : 0u));
  }
}

TEST_CASE("stats table: the cache line counts units kept inline when there are any", "[cli]") {
  auto j = Stats(1, 0);
  j["cache_units"] = 12;
  CHECK(Count(StatsTable(j, nullptr, 0), "12 units\n") == 1);
  j["cache_inline_units"] = 7;
  CHECK(Count(StatsTable(j, nullptr, 0), "12 units (7 inline)\n") == 1);
}

TEST_CASE("stats table: the root stream, unused without files at the root, is left out", "[cli]") {
  auto j = Stats(1, 0);
  j["streams"].push_back({{"path", "/"}, {"label", "skewed"}, {"granularity", "file"}, {"samples", 99}});
  const auto t = StatsTable(j, nullptr, 0);
  CHECK(Count(t, "skewed") == 0);
  CHECK(Count(t, "s0/") == 1);
  // Only the root (a flat bucket): said, not "none detected yet".
  nlohmann::json flat = {{"streams", nlohmann::json::array({{{"path", "/"}, {"label", "random"}}})}};
  const auto f = StatsTable(flat, nullptr, 0);
  CHECK(Count(f, "only the mount's root") == 1);
  CHECK(Count(f, "none detected") == 0);
}

TEST_CASE("stats table: files at the mount's root form the stream /, shown with the root's samples", "[cli]") {
  auto j = Stats(0, 0);
  j["streams"].push_back({{"path", "/"}, {"label", "random"}, {"granularity", "file"}, {"samples", 200}});
  j["engine"]["streams"].push_back({{"stream", "/"}, {"label", "random"}, {"cached_bytes", 7 << 20}});
  const auto t = StatsTable(j, nullptr, 0);
  CHECK(Count(t, "\n/ ") == 1);  // one row, not the tree's and the engine's apart
  CHECK(Count(t, "200") == 1);
  CHECK(Count(t, "7.0 MiB") == 1);
  CHECK(Count(t, "only the mount's root") == 0);
}

TEST_CASE("stats table: the streams holding the most are kept, in their order, the rest counted", "[cli]") {
  const auto t = StatsTable(Stats(10, 0), nullptr, 0, 3);
  CHECK(Count(t, "s9/") == 1);
  CHECK(Count(t, "s8/") == 1);
  CHECK(Count(t, "s7/") == 1);
  CHECK(Count(t, "s6/") == 0);
  CHECK(t.find("s7/") < t.find("s8/"));
  CHECK(Count(t, "... and 7 more streams") == 1);
  const auto none = StatsTable(Stats(10, 0), nullptr, 0, 0);  // no room for a row
  CHECK(Count(none, "... and 10 more streams") == 1);
  CHECK(Count(none, "none detected") == 0);
  CHECK(Count(StatsTable(Stats(0, 0), nullptr, 0, 0), "none detected") == 1);
}

TEST_CASE("stats table: rows fit the columns given, long paths cut at their start", "[cli]") {
  auto j = Stats(1, 0);
  const std::string longp(100, 'a');
  j["streams"].push_back({{"path", longp + "/end/"}, {"label", "random"}, {"granularity", "block"}});
  auto fits = [](const std::string& t, size_t cols) {
    for (size_t p = 0; p < t.size();) {
      size_t e = t.find('\n', p);
      if (e == std::string::npos) e = t.size();
      if (e - p > cols) return false;
      p = e + 1;
    }
    return true;
  };
  const auto t = StatsTable(j, nullptr, 0, SIZE_MAX, 80);
  // Every line, the summary's too (a wrapped one scrolled --watch's screen).
  CHECK(fits(t, 80));
  CHECK(Count(t, "STREAM") == 1);
  CHECK(Count(t, "/end/") == 1);
  CHECK(Count(t, "...") >= 1);
  const auto wide = StatsTable(j, nullptr, 0);  // 60 characters of path at most
  CHECK(Count(wide, std::string(57, 'a') + "/end/") == 0);
  CHECK(Count(wide, std::string(52, 'a') + "/end/") == 1);
  CHECK(!fits(wide, 80));  // not cut without a terminal's width (stats without --watch)
  // A narrow terminal; a multi-byte character is not split.
  j["streams"].push_back({{"path", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9/"}, {"label", "random"}, {"granularity", "file"}});
  std::string src = "file:///x";
  for (int i = 0; i < 20; ++i) src += "\xc3\xa9";
  j["source"] = src;  // the header line's byte 30 is inside a character
  std::string deep = "dd";
  for (int i = 0; i < 40; ++i) deep += "\xc3\xa9";
  j["streams"].push_back({{"path", deep + "/"}, {"label", "random"}, {"granularity", "file"}});
  const auto narrow = StatsTable(j, nullptr, 0, SIZE_MAX, 30);
  CHECK(fits(narrow, 30));
  CHECK(Count(narrow, "\ncache ") == 1);
  // No line ends inside a character, and a path cut at its start starts at one.
  for (size_t p = 0; (p = narrow.find('\n', p)) != std::string::npos; ++p)
    CHECK((p == 0 || (static_cast<unsigned char>(narrow[p - 1]) & 0xC0) != 0xC0));
  for (size_t p = 0; (p = narrow.find("...", p)) != std::string::npos; p += 3)
    CHECK((static_cast<unsigned char>(narrow[p + 3]) & 0xC0) != 0x80);
}

TEST_CASE("stats table: the policy file's overrides are shown as in effect", "[cli]") {
  auto j = Stats(1, 0);
  j["engine"]["overrides"] = nlohmann::json::array(
      {{{"prefix", "ds/train/"}, {"pin", true}, {"never_cache", false}, {"quota_bytes", 0}, {"cached_bytes", 2 << 20}},
       {{"prefix", "tmp/"}, {"pin", false}, {"never_cache", true}, {"quota_bytes", 0}, {"cached_bytes", 0}},
       {{"prefix", "logs/"}, {"pin", false}, {"never_cache", false}, {"quota_bytes", 1 << 30}, {"cached_bytes", 0},
        {"pattern", "sequential"}}});
  const auto t = StatsTable(j, nullptr, 0);
  CHECK(Count(t, "ds/train/: pinned (2.0 MiB cached)") == 1);
  CHECK(Count(t, "tmp/: never cached\n") == 1);
  CHECK(Count(t, "logs/: quota 1.0 GiB, forced sequential (0 B cached)") == 1);
}

TEST_CASE("stats table: control characters of names are escaped", "[cli]") {
  // A key holding a newline or an escape sequence must not forge a row or
  // drive the terminal (a tester's finding: rows were split, escapes passed).
  auto j = Stats(0, 0);
  const std::string bad = "s\x1b[7mINV\nline2/";
  j["streams"].push_back({{"path", bad}, {"label", "sequential"}, {"granularity", "file"}, {"samples", 40}});
  j["engine"]["overrides"] = nlohmann::json::array(
      {{{"prefix", "a\rb/"}, {"pin", true}, {"never_cache", false}, {"quota_bytes", 0}, {"cached_bytes", 0}}});
  const auto t = StatsTable(j, nullptr, 0);
  CHECK(t.find('\x1b') == std::string::npos);
  CHECK(t.find('\r') == std::string::npos);
  CHECK(Count(t, "s\\x1b[7mINV\\x0aline2/") == 1);
  CHECK(Count(t, "a\\x0db/: pinned") == 1);
}

TEST_CASE("stats table: a failed policy reload is said, until one succeeds", "[cli]") {
  auto j = Stats(1, 0);
  j["engine"]["policy_reload_failures"] = 2;
  j["engine"]["policy_reload_error"] = "p.yaml: overrides[0].quota: must be more than 0";
  CHECK(Count(StatsTable(j, nullptr, 0),
              "the last reload failed (2 failed in all), the old policy is in use: p.yaml: overrides[0].quota") == 1);
  j["engine"]["policy_reload_error"] = "";
  CHECK(Count(StatsTable(j, nullptr, 0), "reload failed") == 0);
}

TEST_CASE("stats table: a cache dir deleted under the mount is said", "[cli]") {
  auto j = Stats(1, 0);
  CHECK(Count(StatsTable(j, nullptr, 0), "DIR DELETED") == 0);
  j["cache_dir_gone"] = 1;
  CHECK(Count(StatsTable(j, nullptr, 0), "DIR DELETED under the mount: nothing is cached") == 1);
}

TEST_CASE("stats table: hidden keys are said", "[cli]") {
  auto j = Stats(1, 0);
  CHECK(Count(StatsTable(j, nullptr, 0), "hidden") == 0);
  j["hidden_names"] = 3;
  CHECK(Count(StatsTable(j, nullptr, 0), "3 hidden: names unsafe for a file system, taken by a directory, or listed outside their directory") == 1);
}

TEST_CASE("stats table: prefetched bytes neither read nor evicted are said", "[cli]") {
  // A checkpoint read at scattered offsets: most of what was fetched ahead
  // sits in the cache unread, which "0 B wasted" alone did not tell.
  auto j = Stats(1, 0);
  j["prefetch_bytes"] = 1000 << 20;
  j["prefetch_hit_bytes"] = 200 << 20;
  j["prefetch_wasted_bytes"] = 0;
  CHECK(Count(StatsTable(j, nullptr, 0),
              "1000.0 MiB fetched ahead, 200.0 MiB used, 0 B removed unread (wasted), 800.0 MiB cached not read yet") == 1);
}

TEST_CASE("stats table: temporary credentials, when they expire, failed renewals", "[cli]") {
  auto j = Stats(1, 0);
  CHECK(Count(StatsTable(j, nullptr, 0), "credentials") == 0);  // keys that do not expire: nothing to say
  const auto now = static_cast<uint64_t>(std::time(nullptr));
  j["credentials_expiry_unix_s"] = now + 3000;
  const std::string t = StatsTable(j, nullptr, 0);
  CHECK((Count(t, "temporary, expire in 50m00s, renewed 5 min ahead") == 1 ||
         Count(t, "temporary, expire in 49m5") == 1));  // a second may pass
  CHECK(Count(t, "renewals failed") == 0);
  j["credentials_renew_failures"] = 3;
  CHECK(Count(StatsTable(j, nullptr, 0), ", 3 renewals failed since the mount (the log says why)") == 1);
  j["credentials_expiry_unix_s"] = now - 120;
  CHECK(Count(StatsTable(j, nullptr, 0), "EXPIRED 2m0") == 1);
  CHECK(Count(StatsTable(j, nullptr, 0), "not renewed, 3 renewals failed since the mount (the log says why): S3 refuses") == 1);
  j["credentials_expiry_unix_s"] = 0;  // keys that do not expire, refused and read again in vain
  CHECK(Count(StatsTable(j, nullptr, 0), "S3 refused them and 3 reading them again failed") == 1);
}

TEST_CASE("stats table: backend bytes are set against the bytes read", "[cli]") {
  auto j = Stats(1, 0);
  j["read_bytes"] = 1000;
  j["backend_get_bytes"] = 620;
  j["backend_get_requests"] = 3;
  CHECK(Count(StatsTable(j, nullptr, 0), "3 GETs 620 B (0.62x the bytes read)") == 1);
}

TEST_CASE("mount helper: flags it does not know are named", "[cli]") {
  auto call = [](std::vector<std::string> argv) { return ParseMountHelper(argv); };
  auto r = call({"/sbin/mount.fuse.igtcache", "file:///d", "/mnt", "--foo"});
  REQUIRE(r.has_value());
  REQUIRE_FALSE(r->has_value());
  CHECK_THAT(r->error().message(), Catch::Contains("unknown mount flag '--foo' (mount.fuse.igtcache takes"));
  r = call({"/sbin/mount.igtcache", "file:///d", "/mnt", "--foo"});  // named as it was called
  REQUIRE(r.has_value());
  REQUIRE_FALSE(r->has_value());
  CHECK_THAT(r->error().message(), Catch::Contains("(mount.igtcache takes"));
  r = call({"mount.fuse.igtcache", "file:///d", "/mnt", "-nx"});
  REQUIRE(r.has_value());
  REQUIRE_FALSE(r->has_value());
  CHECK_THAT(r->error().message(), Catch::Contains("unknown mount flag -x in '-nx'"));
  r = call({"mount.fuse.igtcache", "file:///d", "/mnt", "-nsv", "-o", "cache_dir=/c,allow_other,noauto"});
  REQUIRE(r.has_value());
  REQUIRE(r->has_value());
  CHECK((*r)->mount.cache_dir == "/c");
  CHECK((*r)->mount.fuse_opts == std::vector<std::string>{"allow_other"});
  CHECK_FALSE((*r)->mount.requester_pays);
  r = call({"mount.fuse.igtcache", "s3://b", "/mnt", "-o", "requester_pays,expected_bucket_owner=111122223333"});
  REQUIRE(r.has_value());
  REQUIRE(r->has_value());
  CHECK((*r)->mount.requester_pays);
  CHECK((*r)->mount.expected_bucket_owner == "111122223333");
  CHECK((*r)->mount.fuse_opts.empty());
  r = call({"mount.fuse.igtcache", "s3://b", "/mnt", "-o", "requester_pays=yes"});
  REQUIRE(r.has_value());
  REQUIRE_FALSE(r->has_value());
  CHECK_THAT(r->error().message(), Catch::Contains("'requester_pays' takes no value"));
  // Given twice (mount(8) joins fstab's options and the command line's):
  // the last wins, as it did, but said (it was silent).
  r = call({"mount.fuse.igtcache", "file:///d", "/mnt", "-o", "cache_dir=/a,cache_size=1G", "-o", "cache_dir=/b"});
  REQUIRE(r.has_value());
  REQUIRE(r->has_value());
  CHECK((*r)->mount.cache_dir == "/b");
  REQUIRE((*r)->warnings.size() == 1);
  CHECK((*r)->warnings[0] == "mount option 'cache_dir' given twice: '/b' is used, not '/a'");
  CHECK_FALSE(call({"igtcache", "stats", "/mnt"}).has_value());  // not a helper call
}
