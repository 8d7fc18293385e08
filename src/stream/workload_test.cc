// Multi-granularity on generated workload traces: runs the real generator
// (scripts/gen_trace.py, /usr/bin/python3) and the real classifier
// (ClassifyTrace) and checks each workload's labels. The script is found from
// this file's path, so no build-system wiring is needed.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <unistd.h>

#include "src/stream/classify.h"

using namespace igt::stream;

namespace {

std::string RepoRoot() {
  std::string f = __FILE__;  // <root>/src/stream/workload_test.cc
  for (int i = 0; i < 3; ++i) f = f.substr(0, f.rfind('/'));
  return f;
}

// Generates a trace and classifies it; returns path -> stream JSON.
std::map<std::string, nlohmann::json> Classify(const std::string& workload, int seed) {
  std::string out = "/tmp/igt_stream_workload_" + std::to_string(::getpid()) + "_" + workload + ".csv";
  std::string cmd = "/usr/bin/python3 '" + RepoRoot() + "/scripts/gen_trace.py' --workload " + workload +
                    " --seed " + std::to_string(seed) + " --out '" + out + "' 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto j = ClassifyTrace(out, StreamConfig{});
  std::remove(out.c_str());
  REQUIRE(j.has_value());
  std::map<std::string, nlohmann::json> by_path;
  for (const auto& s : (*j)["streams"]) by_path[s["path"].get<std::string>()] = s;
  return by_path;
}

std::string Pattern(const std::map<std::string, nlohmann::json>& m, const std::string& path) {
  auto it = m.find(path);
  if (it == m.end()) return "(missing)";
  return it->second["pattern"].get<std::string>();
}

}  // namespace

TEST_CASE("trace (b): shard directory random at file level, shards sequential at block level", "[workload]") {
  for (int seed : {1, 2, 3}) {
    auto m = Classify("b", seed);
    INFO("seed " << seed);
    CHECK(Pattern(m, "shards/") == "random");
    CHECK(m["shards/"]["granularity"] == "file");
    int shards = 0, sequential = 0;
    for (const auto& [path, s] : m) {
      if (!path.starts_with("shards/train-")) continue;
      ++shards;
      CHECK(s["granularity"] == "block");
      sequential += s["pattern"] == "sequential";
    }
    CHECK(shards == 32);
    CHECK(sequential == shards);
  }
}

TEST_CASE("trace (f): every workload's directory gets its own label despite interleaving", "[workload]") {
  for (int seed : {1, 2}) {
    auto m = Classify("f", seed);
    INFO("seed " << seed);
    CHECK(Pattern(m, "images/train/") == "random");        // (a) shuffled epochs
    CHECK(Pattern(m, "shards/") == "random");              // (b) shard order
    CHECK(Pattern(m, "shards/train-00000.tar") == "sequential");
    CHECK(Pattern(m, "models/llm/model-00001-of-00004.safetensors") == "sequential");  // (c)
    CHECK(Pattern(m, "inference/items/") == "skewed");     // (d) popular items
    CHECK(Pattern(m, "inference/embeddings.bin") == "skewed");
    CHECK(Pattern(m, "raw/docs/") == "sequential");        // (e) listing-order scan
    CHECK(m["inference/items/"]["zipf_s"].get<double>() > 0.5);
    for (const auto& [path, s] : m) {
      // Every reported large file of (b) and (c) is sequential at block level.
      if (path.starts_with("shards/train-") || path.starts_with("models/llm/")) {
        CHECK(s["pattern"] == "sequential");
      }
    }
  }
}

// Not run by default: prints the classification of $IGT_TRACE.
TEST_CASE("classify $IGT_TRACE", "[.classify]") {
  const char* p = std::getenv("IGT_TRACE");
  REQUIRE(p);
  auto j = ClassifyTrace(p, StreamConfig{});
  if (!j) FAIL(j.error().ToString());
  std::cout << j->dump(1) << "\n";
}
