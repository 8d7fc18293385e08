#pragma once
// The igtcache configuration: one schema (src/config/schema.cc) drives the
// defaults, YAML parsing, validation, `--help` text and docs/CONFIGURATION.md.
// Every field below has its default in the schema; sizes accept "10G",
// "512M", "4K" or a plain byte count. Unknown keys and bad values are
// rejected with an error that names the key.
// Thread-safety: a Config is a plain value; copy it.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "igtcache/status.h"

namespace igt {

struct Config {
  struct Cache {
    std::string dir;                 // "" -> $XDG_CACHE_HOME/igtcache or ~/.cache/igtcache
    uint64_t max_bytes = 0;
    double min_free_ratio = 0;
    uint64_t unit_size_bytes = 0;
    uint64_t sub_unit_bytes = 0;     // 0: misses always fetch whole units
    uint64_t inline_max_bytes = 0;   // 0: every unit is a file
    std::string eviction;
    uint64_t prefetch_budget_bytes = 0;
  } cache;
  struct Metadata {
    uint64_t ttl_ms = 0;
    uint64_t negative_ttl_ms = 0;
    uint64_t prefetch_dirs = 0;
  } metadata;
  struct Backend {
    std::string endpoint;
    std::string region;
    std::string addressing;
    std::string profile;
    bool no_sign_request = false;
    bool requester_pays = false;
    std::string expected_bucket_owner;  // "" or a 12-digit account id
    uint64_t connect_timeout_ms = 0;
    uint64_t request_timeout_ms = 0;
    uint64_t max_retries = 0;
    uint64_t retry_base_ms = 0;
    uint64_t retry_deadline_ms = 0;
    uint64_t max_connections = 0;
    uint64_t max_request_bytes = 0;
  } backend;
  struct Fuse {
    uint64_t threads = 0;
    uint64_t max_read_bytes = 0;
    uint64_t random_readahead_bytes = 0;
    uint64_t cached_readahead_bytes = 0;
    uint64_t max_background = 0;
    std::string readdirplus;  // auto | always | off
    bool allow_other = false;
    // Owner and permission bits every file and directory shows (FileAttrsOf).
    std::string uid, gid;            // "" = the daemon's own
    std::string file_mode, dir_mode;  // octal
  } fuse;
  struct Policy {
    std::string file;
  } policy;
  struct Logging {
    std::string level;
    std::string file;
  } logging;
  struct MetricsEndpoint {
    std::string addr;                // "" = off; else HOST:PORT
  } metrics;
  // Explicitly set `stream.*` keys (the access stream tree's tunables; see
  // StreamConfigFrom in src/config/stream_settings.h), key -> value.
  std::map<std::string, std::string> stream_params;

  // All defaults from the schema.
  static Config Defaults();
};

// Parses YAML text over the defaults. `origin` names the file in errors.
Result<Config> ParseConfig(const std::string& yaml_text, const std::string& origin);
// Reads and parses a file; "" gives the defaults.
Result<Config> LoadConfig(const std::string& path);
// What the mount shows as every file's and directory's owner and mode
// (fuse.uid, fuse.gid, fuse.file_mode, fuse.dir_mode): with allow_other, the
// kernel checks them (default_permissions). InvalidArgument naming the key.
struct FileAttrs {
  uint32_t uid = 0, gid = 0;
  uint32_t file_mode = 0444, dir_mode = 0555;
};
Result<FileAttrs> FileAttrsOf(const Config& c);

// Checks ranges and enums across fields; names the bad key.
Status Validate(const Config& c);

// Whether cache.eviction runs the policy engine: everything but the plain
// store policies lru and fifo.
bool UsesPolicyEngine(const Config& c);
// Whether policy.file applies: cache.eviction igt only (the baselines run on
// the engine without the policy file's modules, overrides or profiles).
bool UsesPolicyFile(const Config& c);

// Sets one key ("cache.max_bytes") from a string, as a command-line override.
Status SetConfigValue(Config& c, const std::string& key, const std::string& value);

// "10G" -> 10737418240. Suffixes K, M, G, T (powers of 1024), optional "i"/"B".
Result<uint64_t> ParseSize(const std::string& s);
std::string FormatSize(uint64_t bytes);

struct ConfigKeyDoc {
  std::string key;        // "cache.max_bytes"
  std::string type;       // size | int | ratio | bool | string | enum(a|b)
  std::string default_value;
  std::string help;
};
std::vector<ConfigKeyDoc> ConfigSchemaDocs();
// docs/CONFIGURATION.md and examples/igtcache.yaml are generated from these.
std::string ConfigMarkdown();
std::string ConfigExampleYaml();

}  // namespace igt
