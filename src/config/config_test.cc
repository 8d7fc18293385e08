#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "igtcache/config.h"
#include "src/config/stream_settings.h"

using namespace igt;

TEST_CASE("sizes parse with binary suffixes") {
  CHECK(*ParseSize("10G") == 10ull << 30);
  CHECK(*ParseSize("512M") == 512ull << 20);
  CHECK(*ParseSize("4KiB") == 4096);
  CHECK(*ParseSize("1.5G") == 3ull << 29);
  CHECK_FALSE(ParseSize("1.5").has_value());  // a fraction of a byte, not 1 byte
  CHECK_FALSE(ParseSize("0.5B").has_value());
  CHECK(*ParseSize("123") == 123);
  CHECK_FALSE(ParseSize("ten").has_value());
  CHECK_FALSE(ParseSize("10X").has_value());
  CHECK_FALSE(ParseSize("").has_value());
  CHECK_FALSE(ParseSize("-1G").has_value());
  CHECK_FALSE(ParseSize(".").has_value());
  CHECK_FALSE(ParseSize(".K").has_value());
  CHECK(*ParseSize("4kib") == 4096);
  CHECK(*ParseSize("2MB") == 2ull << 20);
  CHECK(*ParseSize("7B") == 7);
  CHECK_FALSE(ParseSize("10i").has_value());  // a bare binary marker is not a unit
  CHECK_FALSE(ParseSize("500iB").has_value());
  CHECK_FALSE(ParseSize("1Ki2").has_value());
  // Whole numbers exactly, to the largest (a double rounded them).
  CHECK(*ParseSize("9223372036854775807") == 9223372036854775807ull);
  CHECK(*ParseSize("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(ParseSize("18446744073709551616").has_value());
  CHECK(*ParseSize("16777215T") == 16777215ull << 40);
  CHECK_FALSE(ParseSize("16777216T").has_value());
}

TEST_CASE("defaults are valid and the example yaml reproduces them") {
  Config d = Config::Defaults();
  REQUIRE(Validate(d).ok());
  CHECK(d.cache.max_bytes == 10ull << 30);
  CHECK(d.cache.unit_size_bytes == 1 << 20);
  auto c = ParseConfig(ConfigExampleYaml(), "example");
  REQUIRE(c.has_value());
  CHECK(c->cache.max_bytes == d.cache.max_bytes);
  CHECK(c->metadata.ttl_ms == d.metadata.ttl_ms);
  CHECK(c->backend.addressing == "auto");
}

TEST_CASE("yaml overrides defaults") {
  auto c = ParseConfig("cache:\n  max_bytes: 2G\n  dir: /tmp/x\nmetadata:\n  ttl_ms: 5\n", "t.yaml");
  REQUIRE(c.has_value());
  CHECK(c->cache.max_bytes == 2ull << 30);
  CHECK(c->cache.dir == "/tmp/x");
  CHECK(c->metadata.ttl_ms == 5);
}

TEST_CASE("errors name the bad key") {
  auto unknown = ParseConfig("cache:\n  max_bytez: 1G\n", "t.yaml");
  REQUIRE_FALSE(unknown.has_value());
  CHECK_THAT(unknown.error().message(), Catch::Contains("cache.max_bytez"));
  auto section = ParseConfig("cachee:\n  max_bytes: 1G\n", "t.yaml");
  REQUIRE_FALSE(section.has_value());
  CHECK_THAT(section.error().message(), Catch::Contains("cachee"));
  auto bad = ParseConfig("cache:\n  max_bytes: lots\n", "t.yaml");
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message(), Catch::Contains("cache.max_bytes"));
  auto en = ParseConfig("backend:\n  addressing: sideways\n", "t.yaml");
  REQUIRE_FALSE(en.has_value());
  CHECK_THAT(en.error().message(), Catch::Contains("backend.addressing"));
  // A key given twice (yaml-cpp keeps both; one silently won).
  auto owner = ParseConfig("backend:\n  expected_bucket_owner: '12345'\n", "t.yaml");
  REQUIRE_FALSE(owner.has_value());
  CHECK_THAT(owner.error().message(), Catch::Contains("backend.expected_bucket_owner"));
  CHECK_THAT(owner.error().message(), Catch::Contains("'12345' is not an AWS account id (12 digits)"));
  CHECK(ParseConfig("backend:\n  expected_bucket_owner: '111122223333'\n", "t.yaml").has_value());
  auto unsigned_rp = ParseConfig("backend:\n  requester_pays: true\n  no_sign_request: true\n", "t.yaml");
  REQUIRE_FALSE(unsigned_rp.has_value());
  CHECK_THAT(unsigned_rp.error().message(), Catch::Contains("backend.requester_pays"));
  CHECK_THAT(unsigned_rp.error().message(), Catch::Contains("needs signed requests"));
  auto dup = ParseConfig("cache:\n  max_bytes: 1G\n  max_bytes: 2G\n", "t.yaml");
  REQUIRE_FALSE(dup.has_value());
  CHECK_THAT(dup.error().message(), Catch::Contains("duplicate key 'cache.max_bytes'"));
  CHECK_THAT(dup.error().message(), Catch::Contains("line 3"));
  auto dup_section = ParseConfig("cache:\n  max_bytes: 1G\ncache:\n  dir: /x\n", "t.yaml");
  REQUIRE_FALSE(dup_section.has_value());
  CHECK_THAT(dup_section.error().message(), Catch::Contains("duplicate key 'cache'"));
  // A dotted key beside the nested one, either way round: the last won
  // without a word (black-box test).
  for (const char* text : {"cache.max_bytes: 200M\ncache:\n  max_bytes: 300M\n",
                           "cache:\n  max_bytes: 300M\ncache.max_bytes: 200M\n"}) {
    auto dotted = ParseConfig(text, "t.yaml");
    REQUIRE_FALSE(dotted.has_value());
    CHECK_THAT(dotted.error().message(), Catch::Contains("duplicate key 'cache.max_bytes'"));
  }
  // A second document was neither applied nor checked.
  auto docs = ParseConfig("cache:\n  max_bytes: 300M\n---\ncache:\n  max_bytes: 400M\n", "t.yaml");
  REQUIRE_FALSE(docs.has_value());
  CHECK_THAT(docs.error().message(), Catch::Contains("t.yaml: line 4: a second YAML document"));
  CHECK(ParseConfig("---\ncache:\n  max_bytes: 300M\n...\n", "t.yaml").has_value());  // one, marked
  CHECK(ParseConfig("%YAML 1.2\n---\ncache:\n  max_bytes: 300M\n", "t.yaml").has_value());  // a directive
  CHECK(ParseConfig("cache:\n  max_bytes: 300M\n---\n# nothing more\n", "t.yaml").has_value());
  auto inline_doc = ParseConfig("cache: {}\n--- {cache: {max_bytes: 1G}}\n", "t.yaml");
  REQUIRE_FALSE(inline_doc.has_value());
  CHECK_THAT(inline_doc.error().message(), Catch::Contains("line 2: a second YAML document"));
  // A second document after an empty first one, or after a "...": the
  // first (empty) was loaded, the settings neither applied nor checked.
  for (const char* text : {"---\n---\ncache:\n  max_bytes: notasize\n", "...\ncache:\n  max_bytes: notasize\n"}) {
    auto r = ParseConfig(text, "t.yaml");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("a second YAML document"));
  }
  // A BOM before a comment or a directive, then '---': one document.
  CHECK(ParseConfig("\xEF\xBB\xBF# my config\n---\ncache:\n  max_bytes: 1G\n", "t.yaml").has_value());
  CHECK(ParseConfig("\xEF\xBB\xBF%YAML 1.2\n---\ncache:\n  max_bytes: 1G\n", "t.yaml").has_value());
  // yaml-cpp's LoadAll looped for good on this (fuzz_config): read as
  // before this check was added (a plain scalar), at once.
  (void)ParseConfig(" ,-", "t.yaml");
  // Keys that are not names: said so, with the line (an empty key was
  // "unknown config key 'null'", a list one yaml-cpp's "bad conversion").
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {": :\n", "t.yaml: line 1: the top level has an empty key"},
           {"cache:\n  max_bytes: 1G\n  : 5\n", "t.yaml: line 3: 'cache' has an empty key"},
           {"[a, b]: 5\n", "t.yaml: line 1: the top level has a key that is a list or a mapping"}}) {
    auto r = ParseConfig(text, "t.yaml");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::StartsWith(want));
  }
  auto mode = ParseConfig("fuse:\n  file_mode: 0999\n", "t.yaml");
  REQUIRE_FALSE(mode.has_value());
  CHECK_THAT(mode.error().message(), Catch::Contains("fuse.file_mode"));
  auto uid = ParseConfig("fuse:\n  uid: alice\n", "t.yaml");
  REQUIRE_FALSE(uid.has_value());
  CHECK_THAT(uid.error().message(), Catch::Contains("fuse.uid"));
  auto cycle = ParseConfig("cache: &a\n  x: *a\n", "t.yaml");  // an alias of its enclosing node
  REQUIRE_FALSE(cycle.has_value());
  std::string laughs = "a: &a0 [x, x, x, x, x, x, x, x, x, x]\n";  // each level 10 aliases of the one above
  for (int i = 1; i < 9; ++i) {
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) laughs += (j ? ", *a" : "*a") + std::to_string(i - 1);
    laughs += "]\n";
  }
  auto bomb = ParseConfig(laughs, "t.yaml");
  REQUIRE_FALSE(bomb.has_value());
  CHECK_THAT(bomb.error().message(), Catch::Contains("aliases"));
  auto syntax = ParseConfig("cache:\n  max_bytes: [1\n", "t.yaml");
  REQUIRE_FALSE(syntax.has_value());
  CHECK_THAT(syntax.error().message(), Catch::Contains("t.yaml"));
  CHECK_THAT(syntax.error().message(), Catch::Contains("line"));
  auto range = ParseConfig("cache:\n  unit_size_bytes: 1000\n", "t.yaml");
  REQUIRE_FALSE(range.has_value());
  CHECK_THAT(range.error().message(), Catch::Contains("cache.unit_size_bytes"));
  for (const char* bad : {"96K", "4K"}) {  // not a power of two, too small
    auto sub = ParseConfig(std::string("cache:\n  sub_unit_bytes: ") + bad + "\n", "t.yaml");
    REQUIRE_FALSE(sub.has_value());
    CHECK_THAT(sub.error().message(), Catch::Contains("cache.sub_unit_bytes"));
  }
  CHECK(ParseConfig("cache:\n  sub_unit_bytes: 0\n", "t.yaml").has_value());
  // A sub-unit must not cross a unit's end: 128K pieces of 192K units.
  auto straddle = ParseConfig("cache:\n  unit_size_bytes: 192K\n  sub_unit_bytes: 128K\n", "t.yaml");
  REQUIRE_FALSE(straddle.has_value());
  CHECK_THAT(straddle.error().message(), Catch::Contains("does not divide cache.unit_size_bytes"));
  CHECK(ParseConfig("cache:\n  unit_size_bytes: 192K\n  sub_unit_bytes: 64K\n", "t.yaml").has_value());
  CHECK(ParseConfig("cache:\n  unit_size_bytes: 192K\n  sub_unit_bytes: 256K\n", "t.yaml").has_value());  // off
  // Units inline in the index: small ones only (a record is read whole).
  auto inl = ParseConfig("cache:\n  inline_max_bytes: 128K\n", "t.yaml");
  REQUIRE_FALSE(inl.has_value());
  CHECK_THAT(inl.error().message(), Catch::Contains("cache.inline_max_bytes"));
  CHECK(ParseConfig("cache:\n  inline_max_bytes: 0\n", "t.yaml")->cache.inline_max_bytes == 0);
  CHECK(ParseConfig("cache:\n  inline_max_bytes: 64K\n", "t.yaml")->cache.inline_max_bytes == 64 << 10);
  CHECK(ParseConfig("", "t.yaml")->cache.inline_max_bytes == 4096);
  // With the smallest unit, the default sub-unit is not below it: off, not an error.
  CHECK(ParseConfig("cache:\n  unit_size_bytes: 64K\n", "t.yaml").has_value());
  // A budget below two GETs would hold background prefetch jobs queued for good.
  auto budget = ParseConfig("cache:\n  prefetch_budget_bytes: 8M\n", "t.yaml");
  REQUIRE_FALSE(budget.has_value());
  CHECK_THAT(budget.error().message(), Catch::Contains("cache.prefetch_budget_bytes"));
  CHECK(ParseConfig("cache:\n  prefetch_budget_bytes: 16M\n", "t.yaml").has_value());
  CHECK(ParseConfig("cache:\n  prefetch_budget_bytes: 8M\nbackend:\n  max_request_bytes: 4M\n", "t.yaml").has_value());
  auto nested = ParseConfig("cache:\n  max_bytes:\n    a: 1\n", "t.yaml");
  REQUIRE_FALSE(nested.has_value());
  CHECK_THAT(nested.error().message(), Catch::Contains("'cache.max_bytes' must be a single value"));
  auto top = ParseConfig("- a\n- b\n", "t.yaml");
  REQUIRE_FALSE(top.has_value());
  // Times that would wrap where they are used (int ms in libcurl and the
  // retry loop, int64 in freshness), an endpoint without a host, a port out
  // of range, and a section given a value.
  for (const char* y : {"backend:\n  request_timeout_ms: 4294967295\n", "backend:\n  retry_deadline_ms: 3000000000\n",
                        "backend:\n  connect_timeout_ms: 2147483648\n", "metadata:\n  ttl_ms: 18446744073709551615\n",
                        "backend:\n  endpoint: \"http://\"\n", "backend:\n  endpoint: \"https://:9000\"\n",
                        "backend:\n  endpoint: \"http://h:1/?x\"\n", "backend:\n  endpoint: \"http://h:1 \"\n", "metrics:\n  addr: 127.0.0.1:99999\n",
                        "cache: 5\n", "cache: [1, 2]\n", "backend:\n  max_request_bytes: 8388608T\n",
                        "backend:\n  region: \"us\\r\\nX-Evil: 1\"\n", "backend:\n  region: us east\n",
                        // As the mount checks them (config --check said "valid" before).
                        "backend:\n  endpoint: \"http://h:99999\"\n", "backend:\n  endpoint: \"http://u:pw@h:1\"\n"}) {
    auto r = ParseConfig(y, "t.yaml");
    REQUIRE_FALSE(r.has_value());
    const std::string key = std::string(y).substr(0, std::string(y).find(':'));
    CHECK_THAT(r.error().message(), Catch::Contains(key));
    CHECK_THAT(r.error().message(), !Catch::Contains("pw@"));
  }
  CHECK_THAT(ParseConfig("cache: 5\n", "t.yaml").error().message(), Catch::Contains("section"));
  CHECK(ParseConfig("cache:\nstream:\n", "t.yaml").has_value());  // every key commented out
  CHECK(ParseConfig("backend:\n  endpoint: http://127.0.0.1:9000/base\n", "t.yaml").has_value());
}

TEST_CASE("a file nested past the YAML parser's depth limit says so") {
  // yaml-cpp's own message is "bad file" (a tester's 1,000 nested maps).
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "{a: ";
  deep += "1" + std::string(1000, '}') + "\n";
  auto r = ParseConfig(deep, "t.yaml");
  REQUIRE_FALSE(r.has_value());
  CHECK_THAT(r.error().message(), Catch::Contains("t.yaml: line "));
  CHECK_THAT(r.error().message(), Catch::Contains("nested more than 499 levels deep"));
  CHECK_THAT(r.error().message(), !Catch::Contains("bad file"));
}

TEST_CASE("command-line overrides go through the same checks") {
  Config c = Config::Defaults();
  CHECK(SetConfigValue(c, "cache.max_bytes", "1G").ok());
  CHECK(c.cache.max_bytes == 1ull << 30);
  CHECK_FALSE(SetConfigValue(c, "cache.max_bytes", "x").ok());
  CHECK_FALSE(SetConfigValue(c, "nope", "1").ok());
}

TEST_CASE("stream.* keys reach the access stream tree's settings") {
  auto c = ParseConfig("stream:\n  alpha: 0.01\n  window: 512\n  memory_cap_bytes: 1048576\n", "t.yaml");
  REQUIRE(c.has_value());
  auto s = StreamConfigFrom(*c);
  REQUIRE(s.has_value());
  CHECK(s->alpha == 0.01);
  CHECK(s->window == 512);
  CHECK(s->memory_cap_bytes == 1048576);
  CHECK(s->unit_bytes == c->cache.unit_size_bytes);  // follows the cache unit
  auto big = ParseConfig("stream:\n  window: 99999999999\n", "t.yaml");
  REQUIRE_FALSE(big.has_value());
  CHECK_THAT(big.error().message(), Catch::Contains("stream.window"));
}

TEST_CASE("relative paths in a config file are relative to the file") {
  char tmpl[] = "/tmp/igt-cfg-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  {
    std::ofstream(dir + "/c.yaml") << "cache:\n  dir: cachedir\nlogging:\n  file: ../log/x.log\n"
                                      "policy:\n  file: p.yaml\n";
  }
  auto c = LoadConfig(dir + "/c.yaml");
  REQUIRE(c.has_value());
  CHECK(c->cache.dir == dir + "/cachedir");
  CHECK(c->policy.file == dir + "/p.yaml");
  CHECK(c->logging.file == "/tmp/log/x.log");
  {
    std::ofstream(dir + "/abs.yaml") << "policy:\n  file: /etc/igt/p.yaml\n";
  }
  CHECK(LoadConfig(dir + "/abs.yaml")->policy.file == "/etc/igt/p.yaml");
  std::filesystem::remove_all(dir);
}
