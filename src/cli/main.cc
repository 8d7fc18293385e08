// The `igtcache` command: mount, stats, config. See docs/CLI.md.
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "fuse/fuse_fs.h"
#include "igtcache/config.h"
#include "igtcache/version.h"
#include "src/cli/mount_cmd.h"
#include "src/engine/policy_file.h"
#include "src/obs/prometheus_exporter.h"
#include "src/cli/ops_cmds.h"
#include "src/config/stream_settings.h"
#include "src/sim/simulator.h"
#include "src/stream/classify.h"

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A first argument that is neither an option nor a command: CLI11 says only
// "A subcommand is required". The error names it, and the command it is
// likely a typo of (`umount`, `moutn`).
std::string UnknownCommandError(CLI::App& app, const std::string& word) {
  std::string names, near;
  // Suggested: the commands nearest, at most 2 edits away and at most half
  // the word's length (or starting with the word).
  const size_t limit = std::min<size_t>(2, word.size() / 2);
  size_t best = limit + 1;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    const std::string& n = sub->get_name();
    names += (names.empty() ? "" : ", ") + n;
    const size_t d = !word.empty() && n.starts_with(word) ? 0 : EditDistance(word, n);
    if (d < best) near.clear(), best = d;
    if (d == best) near += (near.empty() ? "'" : " or '") + n + "'";
  }
  return fmt::format("igtcache: error: unknown command '{}'{}; the commands are {} (igtcache --help)", word,
                     near.empty() ? "" : fmt::format(" (did you mean {}?)", near), names);
}

// `igtcache sim`: the trace simulator (src/sim/simulator.h).
int RunSimCmd(igt::sim::SimOptions o, const std::string& cache_size, const std::string& unit_size) {
  auto cs = igt::ParseSize(cache_size);
  if (!cs) {
    std::fprintf(stderr, "igtcache: error: --cache-size: %s\n", igt::Escaped(cs.error().message()).c_str());
    return igt::kExitUsage;
  }
  o.cache_bytes = *cs;
  if (!unit_size.empty()) {
    auto us = igt::ParseSize(unit_size);
    if (!us) {
      std::fprintf(stderr, "igtcache: error: --unit-size: %s\n", igt::Escaped(us.error().message()).c_str());
      return igt::kExitUsage;
    }
    o.unit_bytes = *us;
    o.unit_bytes_set = true;
  }
  // As a mount says it: a baseline runs without the policy file's overrides.
  if (o.policy != "igt" && !o.config_path.empty())
    if (auto c = igt::LoadConfig(o.config_path); c && !c->policy.file.empty())
      std::fprintf(stderr, "igtcache: warning: %s: config key 'policy.file' is not used by --policy %s (its "
                   "overrides, pins and quotas apply to igt only)\n", o.config_path.c_str(), o.policy.c_str());
  o.warn = [](const std::string& w) { std::fprintf(stderr, "igtcache: warning: %s\n", igt::Escaped(w).c_str()); };
  auto j = igt::sim::RunSim(o);
  if (!j) {
    igt::PrintError(j.error().message());
    // A missing or bad --trace, --listing or --config is the command line's.
    const auto code = j.error().code();
    return code == igt::Code::kInvalidArgument || code == igt::Code::kNotFound ? igt::kExitUsage : igt::kExitError;
  }
  // igt plans from listings (warm-ups, an epoch's unread items): without
  // one it sees only the files read, which no mount knows in advance. (Said
  // of a run that ran: not before an error.)
  if (o.policy == "igt" && o.listing_path.empty())
    std::fprintf(stderr, "igtcache: note: no --listing: the trace's files stand for the data set's listing, so "
                 "igt's plans know which files will be read (docs/TRACES.md, \"Listings\")\n");
  std::cout << j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return igt::kExitOk;
}

int RunClassify(const std::string& trace, const std::string& listing, const std::string& config_path) {
  auto cfg = igt::LoadConfig(config_path);
  if (!cfg) {
    igt::PrintError(cfg.error().message());
    return igt::kExitUsage;
  }
  auto scfg = igt::StreamConfigFrom(*cfg);
  if (!scfg) {
    igt::PrintError(scfg.error().message());
    return igt::kExitUsage;
  }
  auto j = igt::stream::ClassifyTrace(trace, *scfg, listing);
  if (!j) {
    igt::PrintError(j.error().message());
    // A missing or bad --trace, --listing or --config is the command line's.
    const auto code = j.error().code();
    return code == igt::Code::kInvalidArgument || code == igt::Code::kNotFound ? igt::kExitUsage : igt::kExitError;
  }
  std::cout << j->dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";  // paths: any bytes
  return igt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // At most 2 malloc arenas per core (glibc's default is 8): the daemon's
  // FUSE, fetch and maintenance threads each took one, and the free memory
  // kept in each made its RSS creep (a tester: 35 -> 75 MiB and level with
  // MALLOC_ARENA_MAX=2, 79 -> 146 MiB and rising without). Before any
  // thread starts; MALLOC_ARENA_MAX in the environment wins.
  if (!std::getenv("MALLOC_ARENA_MAX"))
    ::mallopt(M_ARENA_MAX, static_cast<int>(std::max(2L, 2 * ::sysconf(_SC_NPROCESSORS_ONLN))));
  // mount(8) / fstab entry point: `mount.fuse.igtcache SOURCE DIR -o OPTS`.
  if (auto helper = igt::ParseMountHelper(std::vector<std::string>(argv, argv + argc))) {
    if (!*helper) {
      igt::PrintError(helper->error().message());
      return igt::kExitUsage;
    }
    for (const auto& w : (*helper)->warnings) std::fprintf(stderr, "igtcache: warning: %s\n", igt::Escaped(w).c_str());
    return (*helper)->fake ? igt::kExitOk : igt::RunMount((*helper)->mount);
  }
  CLI::App app{"igtcache: mount a cloud bucket with an adaptive SSD cache for AI workloads", "igtcache"};
  app.footer("igtcache help COMMAND (or igtcache COMMAND --help) shows a command's options.");
  app.set_version_flag("--version", std::string("igtcache ") + igt::kVersion);
  app.require_subcommand(1);
  // Parse errors read like every other error of the command.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return "igtcache: error: " + CLI::FailureMessage::simple(a, e);
  });

  // An option given an empty value (`--cache-size "$UNSET"`) is an error, not
  // the default.
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("an empty value is not allowed") : std::string(); },
      "NONEMPTY");
  // A finite number in [lo, hi] (CLI::Range lets NaN through); a whole one
  // for an integer option (else CLI11's "Could not convert: --jobs = 1.5").
  auto number_in = [](double lo, double hi, bool whole) {
    return CLI::Validator(
        [lo, hi, whole](std::string& v) {
          char* end = nullptr;
          const double x = whole ? static_cast<double>(std::strtoll(v.c_str(), &end, 10)) : std::strtod(v.c_str(), &end);
          const char* kind = whole ? "a whole number" : "a number";
          // Whole: decimal digits, no leading 0 (the option's own conversion
          // reads "010" as octal 8).
          const bool octal = whole && v.size() > 1 && v[0] == '0';
          if (v.empty() || *end != '\0' || !std::isfinite(x) || octal)
            return fmt::format("'{}' is not {}{} (expected one in [{}, {}])", v, kind,
                               octal ? " without leading zeros" : "", lo, hi);
          if (x < lo || x > hi) return fmt::format("{} is out of range: must be in [{}, {}]", v, lo, hi);
          return std::string();
        },
        fmt::format("in [{}, {}]", lo, hi));
  };
  auto in_range = [&](double lo, double hi) { return number_in(lo, hi, false); };
  auto whole_in_range = [&](double lo, double hi) { return number_in(lo, hi, true); };
  igt::MountArgs m;
  auto* mount = app.add_subcommand("mount", "Mount SOURCE (file:///dir or s3://bucket[/prefix]) on MOUNTPOINT");
  mount->add_option("SOURCE", m.source, "file:///abs/dir or s3://bucket[/prefix]")->required();
  mount->add_option("MOUNTPOINT", m.mountpoint, "Existing directory, outside a file:// source (its entries are hidden while mounted)")->required();
  mount->add_option("--config", m.config_path, "YAML config file (see examples/igtcache.yaml)")->check(non_empty);
  mount->add_option("--cache-dir", m.cache_dir, "Cache directory (cache.dir)")->check(non_empty);
  mount->add_option("--cache-size", m.cache_size, "Cache size limit, e.g. 10G (cache.max_bytes)")->check(non_empty);
  mount->add_flag("-f,--foreground", m.foreground, "Stay in the foreground, log to stderr (or logging.file if set)");
  mount->add_option("-o", m.fuse_opts, "Extra FUSE mount options (comma-separated)")->allow_extra_args(false);
  mount->add_option("--endpoint", m.endpoint, "S3 endpoint URL (backend.endpoint; default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the profile's endpoint_url)")->check(non_empty);
  mount->add_option("--region", m.region, "S3 region (backend.region)")->check(non_empty);
  mount->add_option("--profile", m.profile, "AWS profile: its credentials, region and endpoint_url (backend.profile)")->check(non_empty);
  mount->add_option("--addressing", m.addressing, "auto | path | virtual (backend.addressing)")->check(non_empty);
  mount->add_flag("--requester-pays", m.requester_pays,
                  "Read a Requester Pays bucket: this account pays for the requests (backend.requester_pays)");
  mount->add_option("--expected-bucket-owner", m.expected_bucket_owner,
                    "Refuse a bucket of another AWS account: its 12-digit id (backend.expected_bucket_owner)")
      ->check(non_empty);
  mount->add_option("--log-level", m.log_level, "trace|debug|info|warn|error|off (logging.level)")->check(non_empty);
  mount->add_option("--log-file", m.log_file, "Log file (logging.file)")->check(non_empty);
  mount->add_option("--trace-out", m.trace_out, "Record every read as a trace CSV (docs/TRACES.md)")->check(non_empty);
  mount->add_option("--metrics-addr", m.metrics_addr,
                    "Serve Prometheus metrics on HOST:PORT, e.g. 127.0.0.1:9100 (metrics.addr; off by default)")->check(non_empty);

  igt::StatsArgs sa;
  auto* stats = app.add_subcommand(
      "stats", "Live counters of a mount: a table on a terminal, JSON with --json or when piped");
  stats->add_option("MOUNTPOINT", sa.mountpoint, "An igtcache mount point")->required();
  stats->add_flag("--json", sa.json, "Print JSON (the default when stdout is not a terminal)");
  auto* watch = stats->add_flag("-w,--watch", sa.watch, "Refresh until interrupted (JSON: one object per line)");
  stats->add_option("--interval", sa.interval_s, "Seconds between --watch refreshes (default 2)")
      ->check(in_range(0.1, 3600))
      ->needs(watch);

  igt::WarmArgs wa;
  auto* warm = app.add_subcommand("warm", "Fetch files or directories of a mount into its cache");
  warm->add_option("PATH", wa.paths, "Files or directories inside an igtcache mount")->required();
  warm->add_option("-j,--jobs", wa.jobs, "Parallel readers (default 8)")->check(whole_in_range(1, 256));
  bool warm_quiet = false;
  warm->add_flag("-q,--quiet", warm_quiet, "No progress output, only the summary");

  igt::UnmountArgs ua;
  auto* unmount = app.add_subcommand("unmount", "Unmount an igtcache mount and wait for its daemon to exit");
  unmount->add_option("MOUNTPOINT", ua.mountpoint, "An igtcache mount point")->required();
  unmount->add_flag("-z,--lazy", ua.lazy, "Lazy unmount: detach now, finish when no longer busy");
  unmount->add_option("--timeout", ua.timeout_s, "Seconds to wait for the daemon to exit (default 30; 0: do not wait)")->check(in_range(0, 86400));

  std::string trace_in, classify_listing, classify_config;
  auto* classify = app.add_subcommand("classify", "Label the access streams of a trace (JSON)");
  classify->add_option("--trace", trace_in, "Trace CSV (docs/TRACES.md)")->required()->check(non_empty);
  classify->add_option("--listing", classify_listing,
                       "CSV path,size of every object, read or not (default: the trace's files)")
      ->check(non_empty);
  classify->add_option("--config", classify_config, "YAML config (stream.* keys)")->check(non_empty);

  igt::sim::SimOptions so;
  std::string sim_cache_size, sim_unit_size;
  auto* sim = app.add_subcommand("sim", "Replay a trace through the cache policies over a modeled backend (JSON)");
  sim->add_option("--trace", so.trace_path, "Trace CSV (docs/TRACES.md)")->required()->check(non_empty);
  sim->add_option("--cache-size", sim_cache_size, "Simulated cache size, e.g. 2G")->required()->check(non_empty);
  sim->add_option("--listing", so.listing_path,
                  "CSV path,size of every object, read or not (default: the trace's files)")
      ->check(non_empty);
  sim->add_option("--policy", so.policy, "igt | lru | lfu | fifo | 2random | lru-readahead | belady")
      ->capture_default_str()
      ->check(non_empty);
  sim->add_option("--config", so.config_path,
                  "YAML config (stream.*, cache.unit_size_bytes, cache.sub_unit_bytes, cache.prefetch_budget_bytes, "
                  "backend.max_request_bytes, policy.file)")
      ->check(non_empty);
  sim->add_option("--unit-size", sim_unit_size, "Cache unit (default cache.unit_size_bytes, 1M)")->check(non_empty);
  sim->add_option("--latency-ms", so.latency_ms, "Modeled time to first byte")->check(in_range(0, 1e6))->capture_default_str();
  sim->add_option("--bandwidth", so.bandwidth_bytes_per_s, "Modeled bytes/s per connection")->check(in_range(1, 1e13))->capture_default_str();
  sim->add_option("--connections", so.connections, "Modeled backend connections")
      ->check(whole_in_range(1, 65536))
      ->capture_default_str();

  bool markdown = false, example = false;
  auto* config = app.add_subcommand(
      "config", "Print the configuration reference: an example YAML file with every key (the default), or --markdown; "
      "--check FILE validates a config file");
  auto* md_flag = config->add_flag("--markdown", markdown, "docs/CONFIGURATION.md");
  auto* ex_flag =
      config->add_flag("--example", example, "examples/igtcache.yaml (every key with its default)")->excludes(md_flag);
  std::string config_check;
  config->add_option("--check", config_check, "Validate a YAML config file: exit 0 if valid, else the error")
      ->check(non_empty)
      ->excludes(md_flag)
      ->excludes(ex_flag);

  const auto is_command = [&](const std::string& w) {
    const auto subs = app.get_subcommands([](CLI::App*) { return true; });
    return std::any_of(subs.begin(), subs.end(), [&](const CLI::App* a) { return a->check_name(w); });
  };
  if (argc >= 2 && std::string_view(argv[1]) == "help") {  // `help`, `help mount`: as git takes them
    if (argc == 2) {
      std::cout << app.help();
      return igt::kExitOk;
    }
    if (is_command(argv[2])) {
      std::cout << app.get_subcommand(argv[2])->help("igtcache");
      return igt::kExitOk;
    }
    std::fprintf(stderr, "%s\n", UnknownCommandError(app, argv[2]).c_str());
    return igt::kExitUsage;
  }
  if (argc > 1 && argv[1][0] != '-' && !is_command(argv[1])) {
    std::fprintf(stderr, "%s\n", UnknownCommandError(app, argv[1]).c_str());
    return igt::kExitUsage;
  }
  // An option before any command: CLI11 said only "A subcommand is required".
  if (argc > 1 && argv[1][0] == '-') {
    const std::string_view o = argv[1];
    if (o != "-h" && o != "--help" && o != "--version") {
      std::fprintf(stderr, "igtcache: error: unknown option '%s' (the options are a command's: "
                   "igtcache COMMAND --help; igtcache --help lists the commands)\n", argv[1]);
      return igt::kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    // `sim --policy NAME` picks the policy; a mount takes it from its config.
    if (rc != 0 && argc > 1 && std::string_view(argv[1]) == "mount")
      for (int i = 2; i < argc; ++i)
        if (const std::string_view o = argv[i]; o.starts_with("--policy") || o.starts_with("--eviction")) {
          std::fprintf(stderr, "igtcache: hint: a mount's eviction policy is the config key cache.eviction and its "
                       "policy file policy.file: put them in a file given with --config (igtcache config --example "
                       "lists every key)\n");
          break;
        }
    // `--cache_dir` (an fstab option's spelling): CLI11 said only "arguments
    // were not expected", naming them in reverse order (a tester).
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      if (rc != 0 && argc > 1 && sub->get_name() == argv[1])
        for (int i = 2; i < argc; ++i) {
          std::string flag(argv[i]);
          flag = flag.substr(0, flag.find('='));  // (a value may hold '_': --cache-dir=/var/my_cache)
          if (!flag.starts_with("--") || flag.find('_') == std::string::npos) continue;
          std::string dashed = flag;
          std::replace(dashed.begin(), dashed.end(), '_', '-');
          bool known = false;
          for (const CLI::Option* o : sub->get_options())
            known = known || o->check_lname(dashed.substr(2));
          if (known)
            std::fprintf(stderr, "igtcache: hint: %s is spelt %s (with '-')\n", flag.c_str(), dashed.c_str());
        }
    return rc == 0 ? 0 : igt::kExitUsage;
  }
  if (*mount) return igt::RunMount(m);
  if (*stats) return igt::RunStats(sa);
  if (*warm) {
    wa.progress = !warm_quiet;
    return igt::RunWarm(wa);
  }
  if (*unmount) return igt::RunUnmount(ua);
  if (*classify) return RunClassify(trace_in, classify_listing, classify_config);
  if (*sim) return RunSimCmd(so, sim_cache_size, sim_unit_size);
  if (*config && !config_check.empty()) {
    auto c = igt::LoadConfig(config_check);
    if (!c) {
      igt::PrintError(c.error().message());
      return igt::kExitUsage;
    }
    // The metrics address as the mount checks it (an IPv6 one needs a
    // server built with IPv6).
    if (!c->metrics.addr.empty())
      if (auto s = igt::obs::ValidateMetricsAddr(c->metrics.addr); !s.ok()) {
        std::fprintf(stderr, "igtcache: error: %s: config key 'metrics.addr': %s\n", config_check.c_str(),
                     s.message().c_str());
        return igt::kExitUsage;
      }
    // The policy file too, as a mount with the policy engine loads it, with
    // the mount's warnings.
    if (igt::UsesPolicyFile(*c)) {
      auto pf = igt::engine::LoadPolicyFile(c->policy.file, igt::engine::PolicyFileUse::kOnce);
      if (!pf) {
        std::fprintf(stderr, "igtcache: error: %s: config key 'policy.file': %s\n", config_check.c_str(),
                     igt::Escaped(pf.error().message()).c_str());
        return igt::kExitUsage;
      }
      for (const auto& w : igt::engine::PolicyWarnings(*pf, c->policy.file, c->cache.max_bytes))
        std::fprintf(stderr, "igtcache: warning: %s\n", igt::Escaped(w).c_str());
    } else if (!c->policy.file.empty()) {
      std::fprintf(stderr, "igtcache: warning: %s: config key 'policy.file' is not used: it applies to "
                   "cache.eviction igt, not '%s'\n", config_check.c_str(), c->cache.eviction.c_str());
    }
    std::cout << config_check << ": valid\n";
    return igt::kExitOk;
  }
  if (*config) {
    std::cout << (markdown ? igt::ConfigMarkdown() : igt::ConfigExampleYaml());
    return 0;
  }
  return igt::kExitUsage;
}
