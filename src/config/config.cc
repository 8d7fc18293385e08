// Config schema, YAML parsing and validation. The kSchema table below is the
// single source of truth for every key: its type, default, and help text.

#include "igtcache/config.h"
#include "igtcache/file_check.h"
#include "igtcache/s3_names.h"

#include "src/config/stream_settings.h"
#include "src/config/yaml_keys.h"
#include "src/stream/stream_config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cerrno>
#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace igt {
namespace {

enum class Type { kSize, kInt, kRatio, kBool, kString, kEnum };

struct Key {
  const char* key;
  Type type;
  const char* default_value;
  const char* help;
  const char* choices;  // kEnum: "a|b|c"
  std::function<void(Config&, const std::string&)> set;  // value already checked
};

Result<uint64_t> ParseUint(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    return Err(Status::InvalidArgument("'" + s + "' is not a non-negative integer"));
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return Err(Status::InvalidArgument("'" + s + "' is too large"));
  return v;
}

Result<bool> ParseBool(const std::string& s) {
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  return Err(Status::InvalidArgument("'" + s + "' is not a boolean (true/false)"));
}

Result<double> ParseRatio(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 1)
    return Err(Status::InvalidArgument("'" + s + "' is not a ratio in [0, 1]"));
  return v;
}

#define SET_STR(f) [](Config& c, const std::string& v) { c.f = v; }
#define SET_U64(f) [](Config& c, const std::string& v) { c.f = *ParseUint(v); }
#define SET_SIZE(f) [](Config& c, const std::string& v) { c.f = *ParseSize(v); }
#define SET_BOOL(f) [](Config& c, const std::string& v) { c.f = *ParseBool(v); }
#define SET_RATIO(f) [](Config& c, const std::string& v) { c.f = *ParseRatio(v); }

const std::vector<Key>& Schema() {
  static const std::vector<Key> k = {
      {"cache.dir", Type::kString, "",
       "Cache directory (unit files + RocksDB index). Empty: $XDG_CACHE_HOME/igtcache, else "
       "~/.cache/igtcache, else /var/cache/igtcache without $HOME. Created 0700; refused if group- or world-writable or owned by another user. "
       "One daemon per directory (lock file). igtcache owns what is in it (an IGTCACHE file marks it): an existing "
       "directory holding anything else (a home directory, a project) is refused, nothing in it touched.",
       nullptr, SET_STR(cache.dir)},
      {"cache.max_bytes", Type::kSize, "10G",
       "Upper bound on the cache's disk use: the unit files, each counted in whole 4 KiB blocks "
       "with its header, and the records of units kept inline (cache.inline_max_bytes); the rest "
       "of the index and the directories come on top (docs/ARCHITECTURE.md). Least "
       "valuable units are evicted beyond it. At most what the cache volume holds with "
       "cache.min_free_ratio of it free, less 9.4 MiB for the index's log and tables (at most half the "
       "volume): a larger value is lowered to that at start-up, with a warning.", nullptr,
       SET_SIZE(cache.max_bytes)},
      {"cache.min_free_ratio", Type::kRatio, "0.05",
       "Free space to keep on the cache volume, as a fraction of its size, and free inodes, as a fraction "
       "of its inodes (a unit file takes one). Inserts evict (or are skipped) to keep them.",
       nullptr, SET_RATIO(cache.min_free_ratio)},
      {"cache.unit_size_bytes", Type::kSize, "1M",
       "Cache unit: large objects are cached in blocks of this size; smaller objects whole. A multiple of "
       "64K from 64K to 64M (above 8M, raise backend.max_request_bytes to it too). "
       "Larger units mean fewer requests, more read amplification for random access. A cache dir records "
       "the size on first use; a mount with another size, or over units with no record of their size, is "
       "refused (units cut with one size would serve wrong bytes under another).",
       nullptr, SET_SIZE(cache.unit_size_bytes)},
      {"cache.sub_unit_bytes", Type::kSize, "64K",
       "With policy engine `igt`, a miss in a file whose reads are labelled random or skewed "
       "fetches and caches only the pieces of this size that the read covers, not the whole "
       "unit (a 64 KiB lookup then costs a 64 KiB GET, and the cache holds 16x more hot rows). "
       "Under every policy, a miss that cannot be kept (a never_cache file, a cache taking no "
       "inserts) fetches these pieces too. "
       "0 turns it off, and so does a size not below cache.unit_size_bytes; otherwise a power "
       "of two from 64K that divides cache.unit_size_bytes.",
       nullptr, SET_SIZE(cache.sub_unit_bytes)},
      {"cache.inline_max_bytes", Type::kSize, "4K",
       "Units (small objects) of at most this many bytes are kept inline in the cache index: one "
       "RocksDB record holding their bytes and a checksum, instead of a unit file of whole 4 KiB "
       "blocks with an inode, written as a temp file and renamed into place. They count their "
       "record's size against cache.max_bytes (a 512-byte object about 670 bytes, not 4 KiB), so "
       "the same limit holds several times more small files, and inserting one costs no file "
       "creation. 0 makes every unit a file. At most 64K. Changing it keeps what is cached: each "
       "unit stays as it was written.",
       nullptr, SET_SIZE(cache.inline_max_bytes)},
      {"cache.eviction", Type::kEnum, "igt",
       "Eviction policy of the SSD tier. `igt`: the pattern-driven policy engine (per-stream "
       "eviction, space allocation and prefetching, docs/POLICIES.md, tuned by policy.file); "
       "`lfu`, `2random`, `lru-readahead` run on the same engine; `lru`, `fifo` are the plain "
       "store policies.",
       "igt|lru|fifo|lfu|2random|lru-readahead", SET_STR(cache.eviction)},
      {"cache.prefetch_budget_bytes", Type::kSize, "128M",
       "Prefetching budget (policy engine only): bytes of queued and running prefetches at most "
       "(a job of a small file counts 4 KiB at least: its bookkeeping); plans beyond it are "
       "dropped, so prefetch memory stays bounded however many files are open. At least twice "
       "backend.max_request_bytes.",
       nullptr, SET_SIZE(cache.prefetch_budget_bytes)},
      {"metadata.ttl_ms", Type::kInt, "60000",
       "How long directory listings and object attributes are trusted before the bucket is "
       "asked again (also the kernel's entry/attr timeout). Kept in the index across "
       "remounts. Lower: sees bucket changes sooner; higher: fewer LIST requests.",
       nullptr, SET_U64(metadata.ttl_ms)},
      {"metadata.prefetch_dirs", Type::kInt, "8",
       "Directory walks (ls -R, os.walk, a dataset scan): once two sibling directories were read "
       "in a row, the listings of the next this many siblings are fetched in the background "
       "(4 at once), and, depth first, the subdirectories of those and of the directory just "
       "read, at most 64 listings ahead of the walk. 0: off.",
       nullptr, SET_U64(metadata.prefetch_dirs)},
      {"metadata.negative_ttl_ms", Type::kInt, "5000",
       "How long the kernel may remember that a name does not exist.", nullptr,
       SET_U64(metadata.negative_ttl_ms)},
      {"backend.endpoint", Type::kString, "",
       "S3 endpoint URL (http://host:port). Empty: $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL, else the AWS profile's "
       "endpoint_url (none with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true), else AWS for the region.",
       nullptr, SET_STR(backend.endpoint)},
      {"backend.region", Type::kString, "",
       "S3 region used for signing. Empty: $AWS_REGION, else $AWS_DEFAULT_REGION, else the AWS profile's region, "
       "else (on AWS) the bucket's region as S3 gives it (one unsigned HEAD at mount), else us-east-1.", nullptr,
       SET_STR(backend.region)},
      {"backend.addressing", Type::kEnum, "auto",
       "path: http://endpoint/bucket/key; virtual: http://bucket.endpoint/key; auto: path for "
       "an endpoint that is not AWS's (MinIO, Ceph RGW, ...), IP-address endpoints, host names without "
       "a dot (localhost, a compose service), buckets with dots and legacy bucket names (uppercase, "
       "'_': path only), virtual otherwise (as the AWS CLI does).",
       "auto|path|virtual", SET_STR(backend.addressing)},
      {"backend.profile", Type::kString, "",
       "AWS profile (~/.aws/credentials and ~/.aws/config: keys, credential_process or a role to "
       "assume), used even when the AWS_* keys are set. Empty: the AWS CLI's chain: the AWS_* keys, a web identity, $AWS_PROFILE or "
       "'default', the container endpoint, EC2 instance metadata (docs/CLI.md, CREDENTIALS). The profile's region and "
       "endpoint_url are used when backend.region / backend.endpoint and the environment set none.",
       nullptr, SET_STR(backend.profile)},
      {"backend.no_sign_request", Type::kBool, "false",
       "Send unsigned requests (public buckets); no credentials needed.", nullptr,
       SET_BOOL(backend.no_sign_request)},
      {"backend.requester_pays", Type::kBool, "false",
       "Read a Requester Pays bucket: every request says the mount's account pays for it "
       "(x-amz-request-payer: requester); without it S3 answers every request to such a bucket "
       "with 403. Needs signed requests. Amazon S3; other stores ignore the header.", nullptr, SET_BOOL(backend.requester_pays)},
      {"backend.expected_bucket_owner", Type::kString, "",
       "The 12-digit account id the bucket must belong to: S3 refuses (403) every request to a bucket "
       "of another account (x-amz-expected-bucket-owner), so a bucket name taken over by someone else "
       "is not read. Empty: not checked. Amazon S3 only: other stores (MinIO, R2, ...) ignore the header, "
       "and the check with it.", nullptr, SET_STR(backend.expected_bucket_owner)},
      {"backend.connect_timeout_ms", Type::kInt, "3000", "TCP/TLS connect timeout per attempt.",
       nullptr, SET_U64(backend.connect_timeout_ms)},
      {"backend.request_timeout_ms", Type::kInt, "30000",
       "A request that moves no byte, or less than 1 KiB/s on average, for this long is aborted and retried; "
       "a ranged GET may take "
       "this long plus its bytes at 32 KiB/s in all (a large GET on a slow link is not cut off while it "
       "makes progress).", nullptr,
       SET_U64(backend.request_timeout_ms)},
      {"backend.max_retries", Type::kInt, "5",
       "Retries after the first attempt on 5xx, SlowDown, timeouts and dropped connections "
       "(exponential backoff with full jitter).",
       nullptr, SET_U64(backend.max_retries)},
      {"backend.retry_base_ms", Type::kInt, "100", "First retry delay; doubles per retry.",
       nullptr, SET_U64(backend.retry_base_ms)},
      {"backend.retry_deadline_ms", Type::kInt, "60000",
       "Time budget of one request across its retries: no retry starts past it (the attempt under way may "
       "run on, up to backend.request_timeout_ms).", nullptr,
       SET_U64(backend.retry_deadline_ms)},
      {"backend.max_connections", Type::kInt, "32",
       "Pooled, reused HTTP connections. The prefetcher fetches on half of them at most (on 1 to 64 threads; "
       "with 1 connection, nothing is prefetched).", nullptr,
       SET_U64(backend.max_connections)},
      {"backend.max_request_bytes", Type::kSize, "8M",
       "Adjacent cache misses are coalesced into one ranged GET of at most this size (at least "
       "cache.unit_size_bytes, at most 1G).", nullptr,
       SET_SIZE(backend.max_request_bytes)},
      {"fuse.threads", Type::kInt, "16", "FUSE worker threads (max idle threads of the loop).",
       nullptr, SET_U64(fuse.threads)},
      {"fuse.max_read_bytes", Type::kSize, "1M",
       "Largest read request the kernel sends (max_read; also max_pages).", nullptr,
       SET_SIZE(fuse.max_read_bytes)},
      {"fuse.random_readahead_bytes", Type::kSize, "128K",
       "Kernel readahead for a file opened while its block stream is labelled random or skewed, "
       "or sequential with less than half of it cached (an mmap page fault reads this much around "
       "the fault); a file not labelled yet gets max_read. Set per open through the mount's "
       "read_ahead_kb, so root only (else the kernel default).",
       nullptr, SET_SIZE(fuse.random_readahead_bytes)},
      {"fuse.cached_readahead_bytes", Type::kSize, "4M",
       "Kernel readahead for a file opened while its block stream is labelled sequential and at "
       "least half of it is cached (a policy engine: not with cache.eviction lru or fifo): several max_read requests in flight keep "
       "the cache's disk busy. Root only, like random_readahead_bytes.",
       nullptr, SET_SIZE(fuse.cached_readahead_bytes)},
      {"fuse.max_background", Type::kInt, "64",
       "Kernel limit on outstanding background requests (readahead).", nullptr,
       SET_U64(fuse.max_background)},
      {"fuse.readdirplus", Type::kEnum, "auto",
       "Directory listings hand the kernel each entry's attributes (readdirplus), so a stat after a "
       "readdir needs no lookup round trip. `auto`: when the kernel sees stats follow (the first batch "
       "of a directory; `ls -l`, `os.scandir` + `entry.stat()`); `always`: for every batch (also "
       "`find -ls`, `du`, `os.listdir` then `stat`), at the cost of an inode in the daemon and the "
       "kernel for every entry listed, stat'ed or not; `off`: plain readdir.",
       "auto|always|off", SET_STR(fuse.readdirplus)},
      {"fuse.allow_other", Type::kBool, "false",
       "Let other users access the mount. With or without it the kernel checks fuse.uid, fuse.gid, "
       "fuse.file_mode and fuse.dir_mode (default_permissions).", nullptr,
       SET_BOOL(fuse.allow_other)},
      {"fuse.uid", Type::kString, "",
       "Owner (numeric uid) of every file and directory of the mount. Empty: the daemon's.", nullptr,
       SET_STR(fuse.uid)},
      {"fuse.gid", Type::kString, "",
       "Group (numeric gid) of every file and directory of the mount. Empty: the daemon's.", nullptr,
       SET_STR(fuse.gid)},
      {"fuse.file_mode", Type::kString, "0444",
       "Permission bits of every file (octal). The mount shows every object the daemon can read "
       "with these bits, whatever its mode in a file:// source: with allow_other, narrow them "
       "(e.g. 0440 with fuse.gid) to keep other users out.", nullptr,
       SET_STR(fuse.file_mode)},
      {"fuse.dir_mode", Type::kString, "0555", "Permission bits of every directory (octal).", nullptr,
       SET_STR(fuse.dir_mode)},
      {"policy.file", Type::kString, "",
       "Policy file (YAML): per-pattern prefetch/eviction modules, per-path overrides, "
       "profiles; see docs/POLICIES.md. Empty: built-in defaults. Reloaded on SIGHUP. Used with "
       "cache.eviction igt only (the baselines ignore it, with a warning).",
       nullptr, SET_STR(policy.file)},
      {"logging.level", Type::kEnum, "info", "Log level.", "trace|debug|info|warn|error|off",
       SET_STR(logging.level)},
      {"logging.file", Type::kString, "",
       "Log file. Empty: stderr in the foreground; <cache.dir>/igtcache.log when daemonized.",
       nullptr, SET_STR(logging.file)},
      {"metrics.addr", Type::kString, "",
       "Serve Prometheus metrics at http://HOST:PORT/metrics (e.g. 127.0.0.1:9100; port 0 picks "
       "one). Empty: off. See docs/METRICS.md.",
       nullptr, SET_STR(metrics.addr)},
  };
  // The access stream tree's tunables (src/stream/stream_config.h) under
  // `stream.`: their docs and defaults come from the stream module.
  static const std::vector<Key> all = [] {
    std::vector<Key> v = k;
    static const std::vector<stream::ParamDoc> docs = stream::StreamParamDocs();
    static std::vector<std::string> helps;
    helps.reserve(docs.size());
    for (const auto& d : docs) {
      // The unit in words; the type follows in brackets ("[int]").
      helps.push_back(d.help + (d.unit.empty() || d.unit == "ratio" ? "" : " (" + d.unit + ")") + ".");
      Type t = d.type == "double" ? Type::kRatio : Type::kInt;
      std::string key = d.key;
      v.push_back({d.key.c_str(), t, d.default_value.c_str(), helps.back().c_str(), nullptr,
                   [key](Config& c, const std::string& val) { c.stream_params[key] = val; }});
    }
    return v;
  }();
  return all;
}

const Key* FindKey(const std::string& key) {
  for (const auto& k : Schema())
    if (key == k.key) return &k;
  return nullptr;
}

std::string TypeName(const Key& k) {
  switch (k.type) {
    case Type::kSize: return "size";
    case Type::kInt: return "int";
    case Type::kRatio: return "ratio";
    case Type::kBool: return "bool";
    case Type::kString: return "string";
    case Type::kEnum: return std::string("enum(") + k.choices + ")";
  }
  return "?";
}

Status CheckValue(const Key& k, const std::string& v) {
  auto bad = [&](const Status& s) {
    return Status::InvalidArgument(fmt::format("config key '{}': {}", k.key, s.message()));
  };
  switch (k.type) {
    case Type::kSize:
      if (auto r = ParseSize(v); !r) return bad(r.error());
      break;
    case Type::kInt:
      if (auto r = ParseUint(v); !r) return bad(r.error());
      break;
    case Type::kRatio:
      if (auto r = ParseRatio(v); !r) return bad(r.error());
      break;
    case Type::kBool:
      if (auto r = ParseBool(v); !r) return bad(r.error());
      break;
    case Type::kString:
      break;
    case Type::kEnum: {
      std::string choices = std::string("|") + k.choices + "|";
      if (v.find('|') != std::string::npos || choices.find("|" + v + "|") == std::string::npos)
        return Status::InvalidArgument(
            fmt::format("config key '{}': '{}' is not one of {}", k.key, v, k.choices));
      break;
    }
  }
  return Status::Ok();
}

// A policy file's top-level keys given as a config: said, since both are YAML
// and the examples/ directory holds both.
Status UnknownKey(const std::string& origin, const std::string& key) {
  const bool policy_key = key == "profile" || key == "patterns" || key == "overrides" || key == "allocation";
  return Status::InvalidArgument(fmt::format(
      "{}: unknown config key '{}'{}", origin, key,
      !policy_key ? ""
      : key == "profile"
          ? " (the credentials profile is backend.profile; a policy file's 'profile' belongs in the file "
            "named by policy.file)"
          : " (this looks like a policy file: name it in a config file as policy.file, or check it with "
            "'igtcache config --check' on a config that does)"));
}

Status Walk(const YAML::Node& node, const std::string& prefix, Config& c, const std::string& origin) {
  if (!node.IsMap())
    return Status::InvalidArgument(fmt::format(
        "{}: '{}' must be a mapping of keys", origin, prefix.empty() ? "(top level)" : prefix));
  for (const auto& kv : node) {
    // An empty key (`: x`) or a list as a key: said with its line (it was
    // "unknown config key 'null'", or yaml-cpp's "bad conversion").
    if (!kv.first.IsScalar() || kv.first.IsNull())
      return Status::InvalidArgument(fmt::format(
          "{}: line {}: {} has {}", origin, kv.first.Mark().line + 1,
          prefix.empty() ? std::string("the top level") : "'" + prefix + "'",
          kv.first.IsNull() ? "an empty key" : "a key that is a list or a mapping, not a name"));
    std::string name = kv.first.Scalar();
    std::string key = prefix.empty() ? name : prefix + "." + name;
    const YAML::Node& v = kv.second;
    bool is_section = false;
    for (const auto& k : Schema())
      if (std::string(k.key).rfind(key + ".", 0) == 0) is_section = true;
    if (v.IsMap()) {
      if (!is_section && FindKey(key))
        return Status::InvalidArgument(
            fmt::format("{}: config key '{}' must be a single value, not a mapping", origin, key));
      if (!is_section) return UnknownKey(origin, key);
      if (auto s = Walk(v, key, c, origin); !s.ok()) return s;
      continue;
    }
    if (is_section) {
      if (v.IsNull()) continue;  // a section with every key commented out
      return Status::InvalidArgument(
          fmt::format("{}: '{}' is a section: it must be a mapping of keys (e.g. '{}:' then indented keys)",
                      origin, key, key));
    }
    const Key* k = FindKey(key);
    if (!k) return UnknownKey(origin, key);
    if (!v.IsScalar() && !v.IsNull())
      return Status::InvalidArgument(
          fmt::format("{}: config key '{}' must be a single value", origin, key));
    std::string value = v.IsNull() ? std::string() : v.Scalar();
    if (auto s = CheckValue(*k, value); !s.ok())
      return Status::InvalidArgument(origin + ": " + s.message());
    k->set(c, value);
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ParseSize(const std::string& in) {
  std::string s = in;
  if (s.empty()) return Err(Status::InvalidArgument("empty size"));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string num = s.substr(0, i), suf = s.substr(i);
  if (num.empty() || std::count(num.begin(), num.end(), '.') > 1 ||
      num.find_first_of("0123456789") == std::string::npos)
    return Err(Status::InvalidArgument("'" + in + "' is not a size (examples: 10G, 512M, 4096)"));
  for (auto& ch : suf) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (!suf.empty() && suf.back() == 'B') suf.pop_back();
  if (suf.size() == 2 && suf.back() == 'I') suf.pop_back();  // KiB, MiB: not a bare "i" or "iB"
  uint64_t mult = 1;
  if (suf == "") mult = 1;
  else if (suf == "K") mult = 1ull << 10;
  else if (suf == "M") mult = 1ull << 20;
  else if (suf == "G") mult = 1ull << 30;
  else if (suf == "T") mult = 1ull << 40;
  else return Err(Status::InvalidArgument("'" + in + "' has an unknown size suffix (use K, M, G, T)"));
  // A whole number exactly (through a double, 9223372036854775807 came out
  // as ...808); a fraction (1.5G) through a double.
  if (num.find('.') == std::string::npos) {
    uint64_t v = 0;
    const auto r = std::from_chars(num.data(), num.data() + num.size(), v);
    if (r.ec != std::errc() || v > UINT64_MAX / mult) return Err(Status::InvalidArgument("'" + in + "' is too large"));
    return v * mult;
  }
  // A fraction of a byte: "quota: 1.5" meant 1 byte (a tester's finding).
  if (mult == 1)
    return Err(Status::InvalidArgument("'" + in + "' is a fraction of a byte: give a whole number of bytes or a "
                                       "suffix (1.5G)"));
  double v = std::strtod(num.c_str(), nullptr);
  double bytes = v * static_cast<double>(mult);
  if (bytes > 1.8e19) return Err(Status::InvalidArgument("'" + in + "' is too large"));
  return static_cast<uint64_t>(bytes);
}

std::string FormatSize(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

Config Config::Defaults() {
  Config c;
  for (const auto& k : Schema()) k.set(c, k.default_value);
  c.stream_params.clear();  // only explicitly set stream keys are recorded
  return c;
}

Status SetConfigValue(Config& c, const std::string& key, const std::string& value) {
  const Key* k = FindKey(key);
  if (!k) return Status::InvalidArgument(fmt::format("unknown config key '{}'", key));
  if (auto s = CheckValue(*k, value); !s.ok()) return s;
  k->set(c, value);
  return Status::Ok();
}

Result<Config> ParseConfig(const std::string& text, const std::string& origin) {
  Config c = Config::Defaults();
  YAML::Node root;
  try {
    auto doc = LoadOneDocument(text, origin);
    if (!doc) return Err(doc.error());
    root = *doc;
  } catch (const YAML::Exception& e) {
    return Err(Status::InvalidArgument(fmt::format("{}: invalid YAML at line {}, column {}: {}",
                                                   origin, e.mark.line + 1, e.mark.column + 1,
                                                   e.msg)));
  }
  if (root.IsNull()) return c;  // empty file: all defaults
  try {
    if (auto s = RejectDuplicateKeys(root, origin); !s.ok()) return Err(s);
    if (auto s = Walk(root, "", c, origin); !s.ok()) return Err(s);
  } catch (const YAML::Exception& e) {
    return Err(Status::InvalidArgument(fmt::format("{}: {}", origin, e.what())));
  }
  if (auto s = Validate(c); !s.ok())
    return Err(Status::InvalidArgument(origin + ": " + s.message()));
  return c;
}

Result<Config> LoadConfig(const std::string& path) {
  if (path.empty()) return Config::Defaults();
  if (IsDirectoryPath(path))
    return Err(Status::InvalidArgument(fmt::format("config file '{}' is a directory", path)));
  std::ifstream in(path);
  if (!in)
    return Err(Status::InvalidArgument(
        fmt::format("cannot read config file '{}': {}", path, std::strerror(errno))));
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = ParseConfig(ss.str(), path);
  if (!c) return c;
  // Paths in the file are relative to the file, not to whoever runs the
  // mount: an fstab mount runs from /, and a SIGHUP reload after the daemon
  // left its working directory.
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  for (std::string* p : {&c->cache.dir, &c->logging.file, &c->policy.file})
    if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (base / *p).lexically_normal().string();
  return c;
}

Status Validate(const Config& c) {
  auto bad = [](const char* key, const std::string& why) {
    return Status::InvalidArgument(fmt::format("config key '{}': {}", key, why));
  };
  constexpr uint64_t kMinUnit = 64 << 10;  // the checksum chunk size: smaller units waste headers
  constexpr uint64_t kMaxUnit = 64 << 20;  // a unit is fetched and held whole in memory
  if (c.cache.unit_size_bytes < kMinUnit || c.cache.unit_size_bytes > kMaxUnit ||
      (c.cache.unit_size_bytes % kMinUnit) != 0)
    return bad("cache.unit_size_bytes", "must be a multiple of 64K between 64K and 64M");
  if (c.cache.sub_unit_bytes != 0 &&
      (c.cache.sub_unit_bytes < kMinUnit || (c.cache.sub_unit_bytes & (c.cache.sub_unit_bytes - 1)) != 0))
    return bad("cache.sub_unit_bytes", "must be 0 (off) or a power of two from 64K");
  // A sub-unit across a unit's end would be fetched with both units.
  if (c.cache.sub_unit_bytes != 0 && c.cache.sub_unit_bytes < c.cache.unit_size_bytes &&
      c.cache.unit_size_bytes % c.cache.sub_unit_bytes != 0)
    return bad("cache.sub_unit_bytes",
               fmt::format("{} does not divide cache.unit_size_bytes ({}): a piece would cross a unit's end",
                           c.cache.sub_unit_bytes, c.cache.unit_size_bytes));
  if (c.cache.inline_max_bytes > kMinUnit)
    return bad("cache.inline_max_bytes", "must be at most 64K (larger units belong in files)");
  // A unit's file is its data plus a header page (cache.max_bytes counts disk use).
  if (c.cache.max_bytes < c.cache.unit_size_bytes + 4096)
    return bad("cache.max_bytes", fmt::format("{} bytes is less than one unit file: at least {} bytes "
                                              "(cache.unit_size_bytes {} + 4K)",
                                              c.cache.max_bytes, c.cache.unit_size_bytes + 4096,
                                              c.cache.unit_size_bytes));
  if (c.cache.min_free_ratio >= 1.0) return bad("cache.min_free_ratio", "must be below 1");
  if (c.fuse.threads < 1 || c.fuse.threads > 1024) return bad("fuse.threads", "must be 1..1024");
  if (c.fuse.max_read_bytes < 4096 || c.fuse.max_read_bytes > (1u << 20) ||
      (c.fuse.max_read_bytes % 4096) != 0)
    return bad("fuse.max_read_bytes", "must be a multiple of 4K between 4K and 1M");
  if (c.fuse.random_readahead_bytes < 4096 || c.fuse.random_readahead_bytes > c.fuse.max_read_bytes ||
      (c.fuse.random_readahead_bytes % 4096) != 0)
    return bad("fuse.random_readahead_bytes", "must be a multiple of 4K between 4K and fuse.max_read_bytes");
  if (c.fuse.cached_readahead_bytes < c.fuse.max_read_bytes || c.fuse.cached_readahead_bytes > (64u << 20) ||
      (c.fuse.cached_readahead_bytes % 4096) != 0)
    return bad("fuse.cached_readahead_bytes", "must be a multiple of 4K between fuse.max_read_bytes and 64M");
  if (c.fuse.max_background < 1 || c.fuse.max_background > 65535)
    return bad("fuse.max_background", "must be 1..65535");
  if (auto a = FileAttrsOf(c); !a) return a.error();
  if (c.backend.max_connections < 1 || c.backend.max_connections > 1024)
    return bad("backend.max_connections", "must be 1..1024");
  if (c.backend.max_retries > 100) return bad("backend.max_retries", "must be at most 100");
  if (c.backend.requester_pays && c.backend.no_sign_request)
    return bad("backend.requester_pays", "needs signed requests: S3 refuses an unsigned one (unset "
                                         "backend.no_sign_request)");
  if (const std::string& o = c.backend.expected_bucket_owner;
      !o.empty() && (o.size() != 12 || o.find_first_not_of("0123456789") != std::string::npos))
    return bad("backend.expected_bucket_owner", "'" + o + "' is not an AWS account id (12 digits)");
  if (c.backend.connect_timeout_ms < 1) return bad("backend.connect_timeout_ms", "must be > 0");
  if (c.backend.request_timeout_ms < 1) return bad("backend.request_timeout_ms", "must be > 0");
  // Times are kept in milliseconds as int (libcurl, the retry loop) and
  // int64 (freshness): bounds far below where they would wrap.
  constexpr uint64_t kDayMs = 86'400'000;
  for (auto [key, v] : {std::pair<const char*, uint64_t>{"backend.connect_timeout_ms", c.backend.connect_timeout_ms},
                        {"backend.request_timeout_ms", c.backend.request_timeout_ms},
                        {"backend.retry_base_ms", c.backend.retry_base_ms},
                        {"backend.retry_deadline_ms", c.backend.retry_deadline_ms}})
    if (v > kDayMs) return bad(key, fmt::format("{} is more than a day ({} ms)", v, kDayMs));
  for (auto [key, v] : {std::pair<const char*, uint64_t>{"metadata.ttl_ms", c.metadata.ttl_ms},
                        {"metadata.negative_ttl_ms", c.metadata.negative_ttl_ms}})
    if (v > 365 * kDayMs) return bad(key, fmt::format("{} is more than a year ({} ms)", v, 365 * kDayMs));
  if (c.backend.max_request_bytes < c.cache.unit_size_bytes)
    return bad("backend.max_request_bytes",
               fmt::format("{} bytes must be at least cache.unit_size_bytes ({} bytes): a unit is fetched by one "
                           "GET (its default is 8M: a unit size above it needs this key set too)",
                           c.backend.max_request_bytes, c.cache.unit_size_bytes));
  // Each GET's bytes are held in memory (and twice this is checked below).
  if (c.backend.max_request_bytes > (1ull << 30)) return bad("backend.max_request_bytes", "must be at most 1G");
  // A prefetch job is one GET of up to max_request_bytes, and background
  // work (fills, epoch items, warm-ups) holds at most half the budget: a
  // smaller budget would queue such jobs for good.
  if (c.cache.prefetch_budget_bytes < 2 * c.backend.max_request_bytes)
    return bad("cache.prefetch_budget_bytes",
               fmt::format("must be at least twice backend.max_request_bytes ({} bytes): a background "
                           "prefetch job is one GET of up to that size and may take half the budget",
                           2 * c.backend.max_request_bytes));
  // As the S3 backend checks them (which also takes them from the
  // environment and the AWS profile: BuildBackend): named here by key.
  if (std::string why = RegionNameProblem(c.backend.region); !why.empty())
    return bad("backend.region", "'" + c.backend.region + "' " + why);
  if (!c.backend.endpoint.empty())
    if (std::string why = EndpointProblem(c.backend.endpoint); !why.empty())
      return bad("backend.endpoint", "'" + EndpointForMessage(c.backend.endpoint) + "' " + why);
  if (!c.metrics.addr.empty()) {
    const auto colon = c.metrics.addr.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == c.metrics.addr.size() ||
        c.metrics.addr.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      return bad("metrics.addr", "'" + c.metrics.addr + "' must be HOST:PORT, e.g. 127.0.0.1:9100");
    if (c.metrics.addr.size() - colon - 1 > 5 || std::stoul(c.metrics.addr.substr(colon + 1)) > 65535)
      return bad("metrics.addr", "'" + c.metrics.addr + "': the port must be 0..65535");
  }
  if (auto sc = StreamConfigFrom(c); !sc) return sc.error();
  return Status::Ok();
}

bool UsesPolicyEngine(const Config& c) { return c.cache.eviction != "lru" && c.cache.eviction != "fifo"; }
bool UsesPolicyFile(const Config& c) { return c.cache.eviction == "igt"; }

Result<stream::StreamConfig> StreamConfigFrom(const Config& c) {
  stream::StreamConfig s;
  s.unit_bytes = c.cache.unit_size_bytes;  // follows the cache unit unless set
  for (const auto& [key, v] : c.stream_params)
    if (auto st = stream::SetParam(s, key, v); !st.ok())
      return Err(Status::InvalidArgument("config key '" + key + "': " + st.message()));
  if (auto st = stream::Validate(s); !st.ok()) return Err(st);
  return s;
}

std::vector<ConfigKeyDoc> ConfigSchemaDocs() {
  std::vector<ConfigKeyDoc> out;
  for (const auto& k : Schema()) out.push_back({k.key, TypeName(k), k.default_value, k.help});
  return out;
}

std::string ConfigMarkdown() {
  std::string s =
      "# Configuration\n\n"
      "<!-- Generated from src/config/config.cc by `igtcache config --markdown`. "
      "Do not edit: a test fails when this file and the schema differ. -->\n\n"
      "igtcache reads a YAML file given with `--config FILE`. Every key is optional; unknown "
      "keys and bad values are rejected with an error naming the key. Sizes accept `10G`, "
      "`512M`, `4K` or a byte count, in powers of 1024 (`10G`, `10GiB` and `10GB` are all 10 x 2^30 bytes). Command-line flags (`--cache-dir`, "
      "`--cache-size`, `--endpoint`, `--region`, ...) override the file. Relative paths in the "
      "file (`cache.dir`, `logging.file`, `policy.file`) are relative to the file's directory; "
      "on the command line, to the working directory. A key given twice is an error naming it (until "
      "2026-11-24 one of the two was used without a word: a file that did that must be fixed).\n\n"
      "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& d : ConfigSchemaDocs())
    s += fmt::format("| `{}` | {} | `{}` | {} |\n", d.key, d.type,
                     d.default_value.empty() ? "\"\"" : d.default_value, d.help);
  return s;
}

std::string ConfigExampleYaml() {
  std::string s =
      "# igtcache configuration: every key with its default.\n"
      "# Generated by `igtcache config --example`; see docs/CONFIGURATION.md.\n";
  std::string section;
  for (const auto& d : ConfigSchemaDocs()) {
    auto dot = d.key.find('.');
    std::string sec = d.key.substr(0, dot), name = d.key.substr(dot + 1);
    if (sec != section) {
      s += "\n" + sec + ":\n";
      section = sec;
    }
    // Wrap the help text as comments.
    std::string line = "  #";
    std::istringstream words(d.help + " [" + d.type + "]");
    std::string w;
    while (words >> w) {
      if (line.size() + w.size() > 88) {
        s += line + "\n";
        line = "  #";
      }
      line += " " + w;
    }
    s += line + "\n";
    std::string v = d.default_value.empty() ? "\"\"" : d.default_value;
    s += "  " + name + ": " + v + "\n";
  }
  return s;
}

Result<FileAttrs> FileAttrsOf(const Config& c) {
  FileAttrs a;
  auto id = [](const std::string& key, const std::string& v, uint32_t own) -> Result<uint32_t> {
    if (v.empty()) return own;
    auto n = ParseUint(v);
    if (!n || *n >= UINT32_MAX)
      return Err(Status::InvalidArgument(fmt::format("config key '{}': must be a number (a numeric id), got '{}'", key, v)));
    return static_cast<uint32_t>(*n);
  };
  auto mode = [](const std::string& key, const std::string& v) -> Result<uint32_t> {
    if (v.empty() || v.size() > 4 || v.find_first_not_of("01234567") != std::string::npos)
      return Err(Status::InvalidArgument(
          fmt::format("config key '{}': must be octal permission bits such as 0440, got '{}'", key, v)));
    return static_cast<uint32_t>(std::stoul(v, nullptr, 8) & 0777);
  };
  auto uid = id("fuse.uid", c.fuse.uid, ::getuid());
  if (!uid) return Err(uid.error());
  auto gid = id("fuse.gid", c.fuse.gid, ::getgid());
  if (!gid) return Err(gid.error());
  auto fm = mode("fuse.file_mode", c.fuse.file_mode);
  if (!fm) return Err(fm.error());
  auto dm = mode("fuse.dir_mode", c.fuse.dir_mode);
  if (!dm) return Err(dm.error());
  a.uid = *uid;
  a.gid = *gid;
  a.file_mode = *fm;
  a.dir_mode = *dm;
  return a;
}

namespace {
// Deeper than any key of ours; an alias of an enclosing node (`a: &x {b: *x}`)
// makes the graph a cycle, and only this bound ends the walk.
constexpr int kMaxYamlDepth = 32;

// Nodes walked at most: aliases repeated at each level ("billion laughs")
// expand exponentially within the depth bound.
constexpr size_t kMaxYamlNodes = 100000;

Status RejectDuplicatesAt(const YAML::Node& n, const std::string& origin, const std::string& path, int depth,
                          size_t& nodes, std::set<std::string>& seen) {
  if (depth > kMaxYamlDepth && (n.IsMap() || n.IsSequence()))
    return Status::InvalidArgument(fmt::format("{}: nested deeper than {} levels (an alias of an enclosing node?)",
                                               origin, kMaxYamlDepth));
  if (++nodes > kMaxYamlNodes)
    return Status::InvalidArgument(
        fmt::format("{}: more than {} values once aliases are expanded", origin, kMaxYamlNodes));
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
      const std::string full = path.empty() ? key : path + "." + key;
      // By dotted path over the whole document: `cache.max_bytes` beside
      // `cache: {max_bytes: ...}` is the key twice as well.
      if (it->first.IsScalar() && !seen.insert(full).second)
        return Status::InvalidArgument(
            fmt::format("{}: line {}: duplicate key '{}'", origin, it->first.Mark().line + 1, full));
      if (auto s = RejectDuplicatesAt(it->second, origin, full, depth + 1, nodes, seen); !s.ok()) return s;
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      if (auto s = RejectDuplicatesAt(n[i], origin, fmt::format("{}[{}]", path, i), depth + 1, nodes, seen);
          !s.ok())
        return s;
  }
  return Status::Ok();
}
}  // namespace

Status RejectDuplicateKeys(const YAML::Node& node, const std::string& origin) {
  size_t nodes = 0;
  std::set<std::string> seen;
  return RejectDuplicatesAt(node, origin, "", 0, nodes, seen);
}

Result<YAML::Node> LoadOneDocument(const std::string& text, const std::string& origin) {
  // Not YAML::LoadAll: yaml-cpp 0.7's loops for good, allocating, on some
  // input (" ,-", found by fuzz_config). The markers are found by a scan of
  // the lines instead: at column 0, "---" starts a document and "..." ends
  // one (inside any block or flow value they would be indented or quoted).
  // Content in a document after the first is an error: after a second
  // "---" (the first may be empty: "---" then "---"), or after a "...".
  size_t pos = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a BOM (yaml-cpp skips it too)
  bool doc = false, content = false, second = false;
  for (size_t line = 0; pos <= text.size(); ++line) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view l(text.data() + pos, eol - pos);
    pos = eol + 1;
    auto marker = [&](std::string_view m) {
      return l.starts_with(m) && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
    };
    std::string_view rest = l;
    if (marker("---")) {
      if (doc || content) second = true;
      doc = true;
      rest = l.substr(3);
    } else if (marker("...")) {
      second = true;  // whatever follows is another document
      rest = l.substr(3);
    }
    const size_t first = rest.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || rest[first] == '#') continue;
    if (!content && !second && rest.data() == l.data() && l.starts_with('%')) continue;  // a directive
    if (second)
      return Err(Status::InvalidArgument(
          fmt::format("{}: line {}: a second YAML document: a file holds one (remove the '---' and what "
                      "follows, or merge them)",
                      origin, line + 1)));
    content = true;
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp says "bad file" (a tester's 1,000 nested maps read so).
    return Err(Status::InvalidArgument(fmt::format("{}: line {}: nested more than {} levels deep (YAML parser's limit)",
                                                   origin, e.mark.line + 1, e.depth() - 1)));
  }
}

}  // namespace igt
