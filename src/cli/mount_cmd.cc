#include "src/cli/mount_cmd.h"

#include <fcntl.h>
#include <sys/file.h>
#include <malloc.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <csignal>
#include <chrono>
#include <condition_variable>
#include <system_error>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fuse/fuse_fs.h"
#include "igtcache/backends.h"
#include "igtcache/block_store.h"
#include "igtcache/metrics.h"
#include "igtcache/s3_names.h"
#include "igtcache/version.h"
#include "src/config/stream_settings.h"
#include "src/cli/ops_cmds.h"
#include "src/fs/namespace.h"
#include "src/engine/live_engine.h"
#include "src/engine/listing_cache.h"
#include "src/read/prefetcher.h"
#include "src/stream/access_stream_tree.h"
#include "src/stream/trace.h"
#include "src/read/read_pipeline.h"
#include "src/obs/instrumented_backend.h"
#include "src/obs/prometheus_exporter.h"

namespace igt {
namespace {

// SIGHUP: reload the policy file (policy.file) without touching the cache.
// The handler only raises this flag; the maintenance thread does the work.
std::atomic<bool> g_reload_policy{false};
void OnSighup(int) { g_reload_policy.store(true); }

namespace fs = std::filesystem;

struct Failure {
  int code;
  std::string message;
};

// `path` as one shell word, to paste into a command a message suggests:
// as it is when plain, else in single quotes.
std::string ShellWord(const std::string& path) {
  const bool plain = !path.empty() && std::all_of(path.begin(), path.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("/._-+,:=@%", c) != nullptr;
  });
  if (plain) return path;
  std::string out = "'";
  for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string DefaultCacheDir() {
  // A relative $XDG_CACHE_HOME is ignored, as the XDG spec says (it made a
  // cache dir under the working directory).
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/igtcache";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/igtcache";
  return "/var/cache/igtcache";
}

// Warnings logged before the mount's log is set up (the cache's start-up
// findings: an index moved aside, records dropped, unit files deleted): a
// daemon's early logger prints only errors, so they are held here, told to
// the user by the Reporter and written to the log file once it is open.
// Made for the info level, it holds the start-up's info lines for the log
// file only (the cache's load summary, the endpoint and credentials'
// sources: a daemon's log had none of them but the credentials').
class HeldWarnings final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit HeldWarnings(spdlog::level::level_enum keep = spdlog::level::warn) : keep_(keep) {}
  // Those not returned by an earlier call.
  std::vector<std::string> Unreported() {
    std::lock_guard<std::mutex> l(mutex_);
    std::vector<std::string> out(held_.begin() + static_cast<std::ptrdiff_t>(reported_), held_.end());
    reported_ = held_.size();
    return out;
  }
  std::vector<std::string> All() {
    std::lock_guard<std::mutex> l(mutex_);
    return held_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    if (m.level != keep_) return;  // errors: printed as they come (the stderr sink)
    std::string_view text(m.payload.data(), m.payload.size());
    if (text.starts_with("igtcache: ")) text.remove_prefix(10);  // the Reporter says it
    if (held_.size() < kMaxHeld) held_.emplace_back(text);
    else if (held_.size() == kMaxHeld) held_.emplace_back("... and more lines, not kept");
  }
  void flush_() override {}

 private:
  static constexpr size_t kMaxHeld = 100;
  const spdlog::level::level_enum keep_;
  std::vector<std::string> held_;
  size_t reported_ = 0;
};

// An flock of a mount point's directory (the underlying one: taken before
// the mount), held while a mount is set up on it (RunMount). Best effort: a
// directory that cannot be opened for reading (mode 0300 is enough to mount
// on) is not locked, and the checks after say what else is wrong with it.
// Waits at most kWaitS for another holder, then fails.
class MountpointLock {
 public:
  static constexpr int kWaitS = 120;
  MountpointLock(const fs::path& mp, bool skip) {
    if (skip) return;
    fd_ = ::open(mp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) {
      spdlog::debug("mount point {}: not locked while mounting (open: {})", mp.string(), std::strerror(errno));
      return;
    }
    for (int i = 0; ::flock(fd_, LOCK_EX | LOCK_NB) != 0; ++i) {
      if (errno != EWOULDBLOCK && errno != EINTR) return;  // not lockable here: best effort
      if (i == 0)
        std::fprintf(stderr, "igtcache: mount point '%s' is locked (another igtcache mount starting on it?): "
                     "waiting up to %d s\n", Escaped(mp.string()).c_str(), kWaitS);
      if (i >= kWaitS * 10) {
        ::close(std::exchange(fd_, -1));
        timed_out_ = true;
        return;
      }
      ::usleep(100'000);
    }
  }
  ~MountpointLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  MountpointLock(const MountpointLock&) = delete;
  MountpointLock& operator=(const MountpointLock&) = delete;
  bool timed_out() const { return timed_out_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
  bool timed_out_ = false;
};

// Reports the mount's outcome to the waiting parent (daemon mode) or to
// stderr (foreground).
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  // Held warnings are told first, before whatever is reported next.
  void Tell(std::shared_ptr<HeldWarnings> held) { held_ = std::move(held); }
  void Fail(const std::string& msg) {
    TellHeld();
    CloseRelease();
    std::string line = "igtcache: error: " + Escaped(msg) + "\n";
    if (fd_ >= 0) {
      (void)!write(fd_, line.data(), line.size());
      close(fd_);
      fd_ = -1;
    } else {
      std::fputs(line.c_str(), stderr);
    }
  }
  // A warning for the user before the mount is ready: to the waiting parent
  // (which prints it on its stderr) or to stderr.
  void Warn(const std::string& msg) {
    TellHeld();
    WarnNow(msg);
  }
  // A descriptor closed once the mount is ready or has failed (the mount
  // point's lock, MountpointLock).
  void ReleaseWhenDone(int fd) { release_fd_ = fd; }
  ~Reporter() { CloseRelease(); }
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;
  // False if the waiting parent is gone (killed by Ctrl-C or `timeout`):
  // it has already reported a failure, so the mount must not stay. Best
  // effort: a parent killed after this write but before its read is not seen.
  bool Ready() {
    TellHeld();
    CloseRelease();
    if (fd_ < 0) return true;
    const bool ok = write(fd_, "OK\n", 3) == 3;  // SIGPIPE is ignored: EPIPE
    close(fd_);
    fd_ = -1;
    return ok;
  }

 private:
  void CloseRelease() {
    if (release_fd_ >= 0) ::close(std::exchange(release_fd_, -1));
  }
  int release_fd_ = -1;
  void WarnNow(const std::string& msg) {
    std::string line = "igtcache: warning: " + Escaped(msg) + "\n";
    if (fd_ >= 0) (void)!write(fd_, line.data(), line.size());
    else std::fputs(line.c_str(), stderr);
  }
  void TellHeld() {
    if (held_)
      for (const auto& w : held_->Unreported()) WarnNow(w);
  }

  int fd_;
  std::shared_ptr<HeldWarnings> held_;
};

class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    AppendEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

void EscapeControlCharacters(spdlog::logger& logger) {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<EscapedMessage>('*').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %*");
  logger.set_formatter(std::move(f));
}

Status SetUpLogging(const Config& c, bool foreground, const std::string& cache_dir) {
  try {
    std::string file = c.logging.file;
    if (file.empty() && !foreground) file = cache_dir + "/igtcache.log";
    std::shared_ptr<spdlog::logger> logger;
    if (file.empty())
      logger = spdlog::stderr_logger_mt("igtcache");
    else
      logger = spdlog::basic_logger_mt("igtcache", file);
    EscapeControlCharacters(*logger);
    logger->set_level(spdlog::level::from_str(c.logging.level));
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
    spdlog::flush_every(std::chrono::seconds(2));
  } catch (const spdlog::spdlog_ex& e) {
    return Status::InvalidArgument(fmt::format("cannot set up logging: {}", e.what()));
  }
  return Status::Ok();
}

// Where the S3 endpoint, region and credentials came from is logged at
// info (held for a daemon's log file until it is open: HeldWarnings).
Result<std::unique_ptr<Backend>> BuildBackend(const SourceUrl& url, const Config& c, Metrics* m) {
  if (url.kind == SourceUrl::Kind::kFile) return MakeLocalBackend(url.path);
  S3Options o;
  o.bucket = url.bucket;
  o.prefix = url.prefix;
  o.endpoint = c.backend.endpoint;
  // Where the endpoint and region came from, for messages: the config (or
  // its command-line option), else the environment and the profile as the
  // AWS CLI takes them: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the
  // profile's endpoint_url (none of them with
  // AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true); $AWS_REGION,
  // $AWS_DEFAULT_REGION, the profile's region. Before 2026-11-30 only
  // $AWS_ENDPOINT_URL was read: a tester's AWS_ENDPOINT_URL_S3 for a local
  // store mounted a bucket of that name on AWS instead.
  std::string endpoint_from = "backend.endpoint";
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  if (o.endpoint.empty()) {
    if (!IgnoreConfiguredEndpoints()) {
      for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"})
        if (o.endpoint.empty() && !env(name).empty()) {
          o.endpoint = env(name);
          endpoint_from = fmt::format("${}", name);
        }
      if (o.endpoint.empty()) {
        // A `services` section is not read: said, since the AWS CLI would
        // take its s3 endpoint_url (before the profile's own).
        std::string services_at;
        if (const std::string sv = ProfileConfigSetting(c.backend.profile, "services", &services_at); !sv.empty())
          spdlog::warn("s3: {} names services '{}', which igtcache does not read: its s3 endpoint_url is not used "
                       "(set backend.endpoint, --endpoint or $AWS_ENDPOINT_URL_S3)",
                       services_at.substr(services_at.find(" of ") + 4), sv);
        o.endpoint = ProfileConfigSetting(c.backend.profile, "endpoint_url", &endpoint_from);
      }
    }
  }
  // Said in the daemon's log too (held until it is open: HeldWarnings).
  std::string where_note;
  if (!o.endpoint.empty() && endpoint_from != "backend.endpoint")
    where_note = fmt::format("s3: endpoint {} (from {})", o.endpoint, endpoint_from);
  // Before the region is asked (DiscoverBucketRegion): its HEAD goes where
  // the mount's requests will.
  o.addressing = c.backend.addressing;
  o.connect_timeout_ms = static_cast<int>(c.backend.connect_timeout_ms);
  std::string region_from = "backend.region";
  o.region = c.backend.region;
  if (o.region.empty()) {
    region_from = "$AWS_REGION or $AWS_DEFAULT_REGION";
    if (env("AWS_REGION").empty() && env("AWS_DEFAULT_REGION").empty())
      o.region = ProfileConfigSetting(c.backend.profile, "region", &region_from);
    if (o.region.empty()) o.region = RegionFromEnv();
    if (region_from.starts_with("region of profile"))
      where_note += fmt::format("{}s3: region {} (from {})", where_note.empty() ? "" : "; ", o.region, region_from);
    // No region set anywhere, on AWS: the bucket's, as S3 tells it (one
    // unsigned HEAD), rather than us-east-1, whose requests another
    // region's bucket refuses (301 PermanentRedirect, "check the region"),
    // as the AWS SDKs' redirect handling finds it. A bucket that does not
    // say, or does not answer within 2 s, leaves us-east-1 (said). Not
    // asked of other stores: what they name there need not be a region
    // they sign for.
    if (env("AWS_REGION").empty() && env("AWS_DEFAULT_REGION").empty() && region_from.starts_with("$") &&
        IsAwsS3Endpoint(o.endpoint)) {
      if (std::string found = DiscoverBucketRegion(o, 2000); found.empty()) {
        where_note += fmt::format("{}s3: region {}: no region is set and S3 did not name the bucket's within 2 s "
                                  "(set --region if the bucket is elsewhere)",
                                  where_note.empty() ? "" : "; ", o.region);
      } else if (found != o.region) {
        region_from = "the bucket's region as S3 gave it; no region was set";
        o.region = found;
        where_note += fmt::format("{}s3: region {} ({}: --region skips asking)", where_note.empty() ? "" : "; ",
                                  o.region, region_from);
      }
    }
  }
  if (!where_note.empty()) spdlog::info("{}", where_note);
  // Before any credential request signs with it (STS, SSO): the config's
  // region was checked with the config, the others are checked here.
  if (std::string why = RegionNameProblem(o.region); !why.empty())
    return Err(Status::InvalidArgument(fmt::format("region '{}' {} (from {})", o.region, why, region_from)));
  o.no_sign_request = c.backend.no_sign_request;
  o.requester_pays = c.backend.requester_pays;
  o.expected_bucket_owner = c.backend.expected_bucket_owner;
  if (o.requester_pays) spdlog::info("s3: Requester Pays: every request says this account pays for it");
  if (!o.expected_bucket_owner.empty())
    spdlog::info("s3: every request asks that the bucket belong to account {}", o.expected_bucket_owner);
  o.request_timeout_ms = static_cast<int>(c.backend.request_timeout_ms);
  o.max_retries = static_cast<int>(c.backend.max_retries);
  o.retry_base_ms = static_cast<int>(c.backend.retry_base_ms);
  o.retry_deadline_ms = static_cast<int>(c.backend.retry_deadline_ms);
  o.max_connections = static_cast<int>(c.backend.max_connections);
  o.metrics = m;
  if (o.no_sign_request) {
    spdlog::info("s3: requests are not signed (backend.no_sign_request: a public bucket)");
  } else {
    auto cred = ResolveCredentials(c.backend.profile, o.region);
    if (!cred)  // the message starts "no AWS credentials: ..."
      return Err(Status::PermissionDenied(
          fmt::format("{} (mounting s3://{}/{}; or set backend.no_sign_request for a public bucket)",
                      cred.error().message(), url.bucket, url.prefix)));
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string note = !cred->expires_unix_s ? fmt::format("s3: credentials from {}", cred->source)
            : cred->expires_unix_s > now
                ? fmt::format("s3: credentials from {}, temporary (expire in {} s): renewed before they expire",
                              cred->source, cred->expires_unix_s - now)
                : fmt::format("s3: credentials from {}, temporary, and they expired {} s ago: S3 may refuse them",
                              cred->source, now - cred->expires_unix_s);
    spdlog::info("{}", note);
    o.credentials = *cred;
    o.refresh_credentials = [profile = c.backend.profile, region = o.region] {
      return ResolveCredentials(profile, region);
    };
  }
  auto b = MakeS3Backend(o);
  // Named where the user set it.
  if (!b && endpoint_from != "backend.endpoint" && b.error().code() == Code::kInvalidArgument &&
      b.error().message().starts_with("endpoint '"))
    return Err(Status::InvalidArgument(endpoint_from + ": " + b.error().message()));
  return b;
}

// The block store keeps unit files open (a quarter of the soft fd limit at
// most) and the kernel's usual soft limit of 1024 is a shell default, not a
// resource bound: raise it to the hard limit, as servers and Go programs
// (rclone among them) do at start-up.
void RaiseFdLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  const rlim_t was = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (r.rlim_cur == RLIM_INFINITY) {
    // Above fs.nr_open setrlimit fails: take that ceiling instead.
    rlim_t nr_open = 1 << 20;
    if (std::FILE* f = std::fopen("/proc/sys/fs/nr_open", "r")) {
      unsigned long v = 0;
      if (std::fscanf(f, "%lu", &v) == 1 && v > 0) nr_open = v;
      std::fclose(f);
    }
    r.rlim_cur = nr_open;
  }
  if (setrlimit(RLIMIT_NOFILE, &r) == 0)
    spdlog::debug("fd limit raised from {} to {}", was, r.rlim_cur);
  else
    spdlog::debug("fd limit stays {}: {}", was, std::strerror(errno));
}

// Everything after argument parsing; runs in the daemon child or in the
// foreground process. Returns once the file system is unmounted.
int Serve(const MountArgs& a, Config cfg, const SourceUrl& url, Reporter& rep, bool foreground) {
  // SIGHUP's handler first: its default action ended the daemon (exit 129,
  // nothing logged) if one came while it started (a large cache takes
  // seconds; a `systemctl reload` or logrotate right after a restart). A
  // reload asked for meanwhile runs once the mount is up.
  {
    struct sigaction sa {};
    sa.sa_handler = OnSighup;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, nullptr);
  }
  // Signals with nothing to do here: their default action ended the daemon
  // and left its mount answering ENOTCONN (a stray `kill -USR1`).
  std::signal(SIGUSR1, SIG_IGN);
  std::signal(SIGUSR2, SIG_IGN);
  // A file size limit (ulimit -f) below a unit file: a write beyond it fails
  // with EFBIG, a failed insert as any other (served from the source,
  // counted in cache_write_errors), instead of SIGXFSZ killing the daemon
  // with nothing logged (a tester's finding).
  std::signal(SIGXFSZ, SIG_IGN);
  // Until the cache dir is known to be usable, log to stderr (a daemon's
  // log file lives in the cache dir by default); errors reach the user
  // through `rep` anyway.
  auto held = std::make_shared<HeldWarnings>();
  auto held_info = std::make_shared<HeldWarnings>(spdlog::level::info);
  // Kept alive until Serve returns: threads that logged through it (RocksDB's,
  // the credential renewal) may still hold it when the log file replaces it.
  std::shared_ptr<spdlog::logger> early;
  {
    auto err_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    held->set_level(spdlog::level::warn);
    held_info->set_level(spdlog::level::info);
    early = std::make_shared<spdlog::logger>("igtcache-early", spdlog::sinks_init_list{err_sink, held, held_info});
    EscapeControlCharacters(*early);
    // A daemon's stderr is the mount command's until it is ready: its
    // warnings go through the Reporter (held), once.
    err_sink->set_level(foreground ? spdlog::level::from_str(cfg.logging.level) : spdlog::level::err);
    if (!foreground) rep.Tell(held);
    early->set_level(std::min(spdlog::level::info, spdlog::level::from_str(cfg.logging.level)));
    spdlog::set_default_logger(early);
  }
  RaiseFdLimit();
  // A hard limit too low for the connections: a socket() failing with
  // EMFILE reads as the source being unreachable (a tester's run at 48 fds
  // went into outage mode with nothing said of the limit). The cache takes
  // at most a quarter of the limit for its open unit files.
  if (rlimit r{}; url.kind == SourceUrl::Kind::kS3 && getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    const uint64_t want = 4 * cfg.backend.max_connections + 64;
    if (r.rlim_cur < want)
      rep.Warn(fmt::format("the open file limit is {} (ulimit -n; its hard limit is {}): below {} for "
                           "backend.max_connections {}, connections to the source may fail for want of file "
                           "descriptors, which looks like an outage; raise it or lower backend.max_connections",
                           r.rlim_cur, r.rlim_max, want, cfg.backend.max_connections));
  }
  Metrics metrics;
  auto backend = BuildBackend(url, cfg, &metrics);
  if (!backend) {
    std::string msg = backend.error().message();
    // A directory whose name has a '%' in it: the URL's escapes were decoded.
    if (url.kind == SourceUrl::Kind::kFile && backend.error().code() == Code::kNotFound &&
        a.source.find('%') != std::string::npos) {
      std::string raw = a.source.substr(a.source.find("://") + 3);
      if (raw.starts_with("localhost/")) raw.erase(0, 9);
      std::error_code ec;
      if (raw != url.path && std::filesystem::is_directory(raw, ec))
        msg += fmt::format(" ('%XX' in a file:// URL is an escape, '%20' a space; for the directory '{}' write "
                           "each '%' in it as '%25')", raw);
    }
    rep.Fail(msg);
    // A bad endpoint or addressing setting (also from the environment or the AWS profile) is
    // bad configuration.
    return backend.error().code() == Code::kInvalidArgument ? kExitUsage : kExitError;
  }
  obs::BackendStats backend_stats;  // per-request outcomes and latency, for /metrics
  *backend = obs::Instrument(std::move(*backend), &backend_stats);
  // A source that cannot be reached is refused, unless the cache dir holds
  // what an earlier mount of it listed (decided once the cache dir is open,
  // below): a restart during an outage (a crash, a reboot) then serves the
  // cache, as the mount before it did.
  // Only a source that does not answer (refused, timed out): an error reply
  // (kIoError: a redirect to another region, a 4xx, a non-S3 server, a 5xx)
  // is more often a setting to fix than an outage.
  // One short attempt first: when it finds the source unreachable and the
  // cache dir has something to serve, the mount comes up at once (a stalled
  // bucket held a restart for the whole retry budget, 60 s by default);
  // else the whole budget is spent as before, here for an error reply (a 5xx
  // may pass) or below once the cache dir is known to hold nothing.
  auto unreachable = [](const Status& s) { return s.code() == Code::kUnavailable || s.code() == Code::kTimeout; };
  Status probe = (*backend)->QuickProbe();
  if (!probe.ok() && !unreachable(probe)) probe = (*backend)->Probe();
  if (!probe.ok() && !unreachable(probe)) {
    rep.Fail(fmt::format("source {} is not usable: {}", (*backend)->Describe(), probe.message()));
    return kExitError;
  }
  // A source that lists nothing mounts as an empty directory, which is what
  // a mistyped prefix looks like: said, not refused (a new bucket is empty).
  std::vector<std::string> startup_warnings;  // logged once logging is set up
  auto warn_if_empty = [&] {
    auto page = (*backend)->List(ListRequest{.prefix = "", .delimiter = "/", .continuation_token = {}, .max_keys = 1});
    if (!page || !page->objects.empty() || !page->prefixes.empty() || !page->next_token.empty()) return;
    startup_warnings.push_back(fmt::format("source {} lists no objects: the mount will be empty (check the bucket and "
                                           "prefix: a prefix names a directory of keys, not an object)",
                                           (*backend)->Describe()));
    rep.Warn(startup_warnings.back());
  };
  if (probe.ok()) warn_if_empty();
  // The access stream tree sees every read the kernel sends (DESIGN.md sec. 3 step 2).
  auto scfg = StreamConfigFrom(cfg);
  if (!scfg) {
    rep.Fail(scfg.error().message());
    return kExitUsage;
  }
  stream::AccessStreamTree tree(*scfg);
  // The policy engine (DESIGN.md sec. 6) when cache.eviction names one of its
  // policies: it picks the store's victims and plans prefetches.
  // The engine sees directory listings and object versions through the
  // Namespace built below; reads, the only callers, start after it exists,
  // and ns_view is cleared before it goes away.
  std::atomic<Namespace*> ns_view{nullptr};
  auto lcache = std::make_shared<engine::ListingCache>();  // used under the engine's lock
  engine::ListingFn listing_fn = [&ns_view, lcache](std::string_view dir) -> const std::vector<ListedFile>* {
    Namespace* n = ns_view.load();
    if (!n) return nullptr;
    std::string key(dir);
    if (!key.empty() && key.back() == '/') key.pop_back();
    auto l = n->CachedListing(key);
    if (!l) return nullptr;
    return lcache->Get(key, l, [&] {
      std::vector<ListedFile> files;
      files.reserve(l->entries.size());
      for (const auto& e : l->entries) {
        std::string path = key.empty() ? e.name : key + "/" + e.name;
        if (e.is_dir) path += '/';
        files.push_back({std::move(path), e.is_dir ? 0 : e.size, e.is_dir});
      }
      return files;
    });
  };
  engine::LiveEngine::VersionFn version_fn =
      [&ns_view](const std::string& key) -> std::optional<std::pair<std::string, uint64_t>> {
    Namespace* n = ns_view.load();
    if (!n) return std::nullopt;
    auto e = n->CachedEntry(key);
    if (!e) return std::nullopt;
    return std::make_pair(e->etag, e->size);
  };
  std::shared_ptr<engine::LiveEngine> live;
  if (UsesPolicyEngine(cfg)) {
    engine::EngineOptions eo;
    eo.policy = cfg.cache.eviction;
    eo.unit_bytes = cfg.cache.unit_size_bytes;
    eo.sub_unit_bytes = cfg.cache.sub_unit_bytes;
    eo.capacity_bytes = cfg.cache.max_bytes;
    if (UsesPolicyFile(cfg)) {
      auto pf = engine::LoadPolicyFile(cfg.policy.file, engine::PolicyFileUse::kMount);
      if (!pf) {
        // Named like `config --check` names it: the config file, the key, the policy file.
        rep.Fail(fmt::format("{}config key 'policy.file': {}", a.config_path.empty() ? "" : a.config_path + ": ",
                             pf.error().message()));
        return kExitUsage;
      }
      for (auto& w : engine::PolicyWarnings(*pf, cfg.policy.file, cfg.cache.max_bytes))
        startup_warnings.push_back(std::move(w));
      eo.policy_file = std::move(*pf);
    }
    eo.next_files = [&ns_view](std::string_view path, size_t n) {
      std::vector<ListedFile> out;
      Namespace* ns = ns_view.load();
      if (!ns) return out;
      const size_t slash = path.rfind('/');
      const std::string key(slash == std::string_view::npos ? std::string_view() : path.substr(0, slash));
      const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
      auto l = ns->CachedListing(key);
      if (!l) return out;
      // Entries are sorted by name: the files after this one, directories skipped.
      auto it = std::upper_bound(l->entries.begin(), l->entries.end(), name,
                                 [](std::string_view nm, const DirEntry& e) { return nm < e.name; });
      for (; it != l->entries.end() && out.size() < n; ++it)
        if (!it->is_dir) out.push_back({key.empty() ? it->name : key + "/" + it->name, it->size, false});
      return out;
    };
    auto le = engine::LiveEngine::Create(std::move(eo), &tree, listing_fn, version_fn);
    if (!le) {
      rep.Fail(fmt::format("config key 'cache.eviction': {}", le.error().message()));
      return kExitUsage;
    }
    live = std::move(*le);
  }
  BlockStoreOptions bo;
  bo.dir = cfg.cache.dir;
  bo.max_bytes = cfg.cache.max_bytes;
  bo.min_free_ratio = cfg.cache.min_free_ratio;
  bo.inline_max_bytes = cfg.cache.inline_max_bytes;
  bo.eviction = cfg.cache.eviction;
  if (live) bo.make_policy = [live] { return live->MakeEvictionAdapter(); };
  auto store = BlockStore::Open(bo, &metrics);
  if (!store) {
    const std::string& m = store.error().message();
    rep.Fail(m.find(cfg.cache.dir) != std::string::npos
                 ? m
                 : fmt::format("cache dir '{}': {}", cfg.cache.dir, m));
    return kExitError;
  }
  if (const uint64_t limit = (*store)->limit_bytes(); limit < cfg.cache.max_bytes) {
    startup_warnings.push_back(fmt::format(
        "cache.max_bytes is {}, more than the cache volume of '{}' holds with cache.min_free_ratio ({:.0f}%) of it "
        "kept free: the cache is limited to {}",
        FormatSize(cfg.cache.max_bytes), cfg.cache.dir, cfg.cache.min_free_ratio * 100, FormatSize(limit)));
    rep.Warn(startup_warnings.back());
    if (live) live->SetCapacity(limit);
  }
  // The unit size the cache dir's units were cut with (recorded on first use).
  if (auto s = CheckUnitSize(**store, cfg.cache.unit_size_bytes); !s.ok()) {
    if (s.code() == Code::kInvalidArgument) {
      rep.Fail(fmt::format("config key 'cache.unit_size_bytes' is {} bytes, but cache dir '{}' {}; use another "
                           "cache.dir (or delete that one) to change the unit size",
                           cfg.cache.unit_size_bytes, cfg.cache.dir, s.message()));
      return kExitUsage;
    }
    rep.Fail(fmt::format("cache dir '{}': {}{}", cfg.cache.dir, s.message(),
                         s.code() == Code::kCorruption ? "; delete that cache dir (or use another cache.dir)" : ""));
    return kExitError;
  }
  if (!probe.ok()) {
    // Asked before CheckSource, which drops another source's listings: a
    // refused mount (a mistyped endpoint) leaves the cache dir as it was.
    auto recorded = RecordedSource(**store);
    if (!recorded || *recorded != (*backend)->Describe() || !HasSavedListing(**store, "")) {
      probe = (*backend)->Probe();  // nothing to serve instead: the whole retry budget
      if (!probe.ok()) {
        rep.Fail(fmt::format("source {} is not usable: {}", (*backend)->Describe(), probe.message()));
        return kExitError;
      }
      warn_if_empty();
    } else {
      (*backend)->NoteUnreachable();
      startup_warnings.push_back(fmt::format(
          "source {} did not answer ({}): mounted on what cache dir '{}' holds (the listings and data an earlier "
          "mount saved); until it answers, reads of anything else fail with EIO after one attempt (at most {:.0f} s "
          "without progress)",
          (*backend)->Describe(), probe.message(), cfg.cache.dir,
          std::min<double>(cfg.backend.request_timeout_ms, Backend::kQuickProbeMs) / 1000));
      rep.Warn(startup_warnings.back());
    }
  }
  // The source its saved listings came from: another one's are dropped.
  auto previous_source = CheckSource(**store, (*backend)->Describe());
  if (!previous_source) {
    rep.Fail(fmt::format("cache dir '{}': {}", cfg.cache.dir, previous_source.error().message()));
    return kExitError;
  }
  if (auto s = SetUpLogging(cfg, foreground, cfg.cache.dir); !s.ok()) {
    rep.Fail(s.message());
    return kExitUsage;
  }
  // The mount command said these on its stderr (Reporter::Warn, RunMount);
  // the log file has them too (a daemon's, or one set with logging.file; not
  // stderr twice). So for the unused policy file below.
  if (!foreground || !cfg.logging.file.empty()) {
    for (const auto& l : held_info->All()) spdlog::info("{}", l);
    for (const auto& w : held->All()) spdlog::warn("{}", w);
    for (const auto& w : startup_warnings) spdlog::warn("{}", w);
  }
  if (!UsesPolicyFile(cfg) && !cfg.policy.file.empty() && (!foreground || !cfg.logging.file.empty()))
    spdlog::warn("config key 'policy.file' ('{}') is not used: it applies to cache.eviction igt, not '{}' "
                 "(its overrides, pins and quotas are not applied either)",
                 cfg.policy.file, cfg.cache.eviction);
  if (*previous_source)
    spdlog::warn("cache dir '{}' was last mounted with source {}, now {}: its saved directory listings were "
                 "dropped (cached units stay, and are served only for objects of the same key and version)",
                 cfg.cache.dir, **previous_source, (*backend)->Describe());
  Namespace ns(backend->get(), store->get(), &metrics, Namespace::Options{.ttl_ms = cfg.metadata.ttl_ms, .prefetch_dirs = cfg.metadata.prefetch_dirs});
  ns_view = &ns;
  struct ClearView {
    std::atomic<Namespace*>& v;
    ~ClearView() { v = nullptr; }
  } clear_ns_view{ns_view};
  ReadPipeline::Options rpo{.unit_size = cfg.cache.unit_size_bytes, .max_request_bytes = cfg.backend.max_request_bytes};
  // Misses that cannot be kept (a file read through, a cache taking no
  // inserts) fetch sub-units (cache.sub_unit_bytes) under every policy; igt
  // also in files read at random.
  rpo.sub_unit_size = cfg.cache.sub_unit_bytes;
  if (live && cfg.cache.eviction == "igt")
    rpo.sub_units = [live](const FileVersion& f) { return live->SubUnitBytes(f.key) != 0; };
  // The policy file's never-cache prefixes are read through, not stored.
  if (live) rpo.admit = [live](const FileVersion& f) { return live->Admit(f.key); };
  ReadPipeline pipeline(backend->get(), store->get(), &metrics, std::move(rpo));
  // Prefetch plans run in the background under cache.prefetch_budget_bytes.
  std::unique_ptr<Prefetcher> prefetcher;
  // With one connection, none is left to prefetch with: a prefetch would
  // hold the connection a reader's miss waits for.
  if (live && cfg.backend.max_connections >= 2) {
    Prefetcher::Options po;
    po.budget_bytes = cfg.cache.prefetch_budget_bytes;
    po.max_job_units = std::max<uint64_t>(1, cfg.backend.max_request_bytes / cfg.cache.unit_size_bytes);
    // Half the connections (16 of the default 32), the rest left to the
    // readers' misses. It was 8 whatever backend.max_connections said: at
    // ~25 ms to the first byte, 8 GETs at once of small files are ~320
    // files a second, short of a multi-GPU job's epoch.
    // Never more than half: a reader's miss must find a connection free.
    po.threads = std::clamp<size_t>(cfg.backend.max_connections / 2, 1, 64);
    prefetcher = std::make_unique<Prefetcher>(&pipeline, store->get(), po);
  }
  std::unique_ptr<stream::TraceWriter> trace;
  if (!a.trace_out.empty()) {
    auto t = stream::TraceWriter::Open(a.trace_out);
    if (!t) {
      rep.Fail(fmt::format("--trace-out '{}': {}", a.trace_out, t.error().message()));
      // A path that cannot be created is the command line's; a full disk or
      // an I/O error is a runtime failure.
      return t.error().code() == Code::kInvalidArgument ? kExitUsage : kExitError;
    }
    trace = std::move(*t);
  }
  const auto started = std::chrono::steady_clock::now();
  auto now_us = [started] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now() - started).count());
  };
  const std::string source = (*backend)->Describe();
  BlockStore* st = store->get();
  Prefetcher* pfr = prefetcher.get();
  const uint64_t unit_bytes = pipeline.unit_size();
  // The Prometheus endpoint's address once it serves, with the port it got
  // (`:0` picks one): set below, read by every stats call.
  auto metrics_at = std::make_shared<std::atomic<int>>(0);
  const std::string metrics_host = cfg.metrics.addr.substr(0, cfg.metrics.addr.rfind(':'));
  auto stats_json = [&metrics, st, started, source, &ns, &tree, live, pfr, unit_bytes, metrics_at, metrics_host]() {
    nlohmann::json j;
    for (const auto& [k, v] : metrics.Snapshot()) j[k] = v;
    if (const int port = metrics_at->load(); port > 0) j["metrics_addr"] = fmt::format("{}:{}", metrics_host, port);
    j["cache_used_bytes"] = st->used_bytes();
    j["cache_limit_bytes"] = st->limit_bytes();
    j["cache_unit_bytes"] = unit_bytes;
    j["cache_units"] = st->unit_count();
    j["cache_inline_units"] = st->inline_unit_count();
    j["cache_inline_max_bytes"] = st->inline_max_bytes();
    j["open_unit_files"] = st->open_unit_files();
    j["inodes"] = ns.inode_count();
    j["hidden_names"] = ns.hidden_names();
    j["pid"] = static_cast<int64_t>(getpid());
    j["source"] = source;
    j["version"] = kVersion;
    j["uptime_s"] = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::steady_clock::now() - started).count();
    j["streams"] = stream::StreamsToJson(tree.Snapshot())["streams"];
    auto mem = tree.Memory();
    j["stream_tree_nodes"] = mem.nodes;
    j["stream_tree_bytes"] = mem.bytes;
    if (live) {
      j["engine"] = live->StatsJson();
      if (pfr) {
        const auto ps = pfr->stats();
        j["engine"]["prefetcher"] = {{"queued_units", ps.queued_units}, {"dropped_units", ps.dropped_units},
                                     {"fetched_units", ps.fetched_units}, {"failed_jobs", ps.failed_jobs},
                                     {"held_bytes", ps.held_bytes}, {"peak_held_bytes", ps.peak_held_bytes},
                                     {"fills", ps.fills}, {"filling", ps.filling}};
      }
    }
    // Names are the bucket's bytes: invalid UTF-8 is replaced, never thrown
    // (an exception here ended the daemon from a noexcept FUSE callback).
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  FuseFs::Options fo;
  fo.mountpoint = a.mountpoint;
  fo.fsname = url.kind == SourceUrl::Kind::kFile ? "file://" + url.path
                                                : "s3://" + url.bucket + "/" + url.prefix;
  fo.extra_opts = a.fuse_opts;
  fo.config = cfg;
  // SIGHUP reloads the policy file instead of unmounting (SIGINT/SIGTERM still
  // unmount); with lru or fifo it is logged and ignored.
  fo.on_sighup = OnSighup;
  // Once unmounted (or on SIGINT/SIGTERM), backend calls in progress (a read
  // or a background listing retrying through an outage) end at once instead
  // of holding the exit for the retry budget.
  fo.on_session_end = [b = backend->get(), &ns] {
    spdlog::info("session ended: cancelling backend requests in progress");
    ns.BeginShutdown();
    b->Cancel();
  };
  FuseFs fuse(&ns, &pipeline, &metrics, stats_json, fo);
  stream::TraceWriter* tw = trace.get();
  fuse.set_access_hook([&tree, tw, now_us](uint64_t pid, const std::string& key, uint64_t off,
                                           uint64_t len, uint64_t size) {
    const uint64_t t = now_us();
    tree.Record(t, static_cast<uint32_t>(pid), key, off, len, size);
    if (tw) tw->Append(t, static_cast<uint32_t>(pid), key, off, len, size);
  });
  if (live)
    fuse.set_read_hook([live, pfr, now_us](uint64_t pid, const FileVersion& f, uint64_t off,
                                           uint64_t len) -> std::function<void()> {
      auto plan = live->OnRead(now_us(), static_cast<uint32_t>(pid), f.key, f.etag, off, len, f.size);
      if (plan.empty() || !pfr) return {};
      return [pfr, plan = std::move(plan), key = f.key, off] {
        for (const auto& p : plan) {
          const FileVersion fv{p.key, p.etag, p.size, {}};
          const size_t q = p.fill ? size_t(pfr->Fill(fv, p.fill_bytes))
                                  : pfr->Submit(fv, p.first_unit, p.last_unit,
                                                p.background ? Prefetcher::Priority::kBackground
                                                             : Prefetcher::Priority::kReadahead);
          spdlog::debug("plan after {}@{}: {} [{}, {}] queued {}", key, off >> 20, p.key, p.first_unit, p.last_unit, q);
        }
      };
    });
  // `igtcache warm` (kWarmIoctl): the range's units are fetched into the
  // cache as a warm-up, which the policy engine holds for the job to come
  // (LiveEngine::NoteWarm); the stream tree does not see it (it is not how
  // the job reads). In batches of 4 units: at most 4 units of buffers per
  // warm reader, as its reads of 1 MiB took before.
  fuse.set_warm_hook([&pipeline, live](const FileVersion& f, uint64_t offset, uint64_t length) -> Status {
    const uint64_t unit = pipeline.unit_size();
    if (f.size == 0 || length == 0 || offset >= f.size || unit == 0) return Status::Ok();
    if (live) live->NoteWarm(f.key);
    const uint64_t last = (std::min(f.size, offset + std::min(length, f.size - offset)) - 1) / unit;
    for (uint64_t u = offset / unit; u <= last; u += 4)
      if (auto s = pipeline.Fetch(f, u, std::min(last, u + 3)); !s.ok()) return s;
    return Status::Ok();
  });
  if (prefetcher)
    fuse.set_release_hook([p = prefetcher.get()](const FileVersion& f) { (void)p->DropReadahead(f); });
  // Per-file kernel readahead: small for a file whose block stream is random
  // or skewed, or sequential but less than half cached (mmap faults then read
  // little around each fault; a sequential reader has the prefetcher ahead of
  // it and its own read size still sets the request size); larger for a
  // sequential one mostly cached (its reads wait on the cache's disk, so
  // several requests in flight pay); max_read for a file not labelled yet.
  // A label an override forces (policy file `pattern:`) is the file's.
  fuse.set_readahead_hook([&tree, &cfg, live](const std::string& key, uint64_t size) -> uint64_t {
    const int forced = live ? live->ForcedLabel(key) : -1;
    stream::Label label = static_cast<stream::Label>(forced);
    if (forced < 0) {
      auto info = tree.Find(key);
      if (!info || info->granularity != "block") return cfg.fuse.max_read_bytes;
      label = info->label;
    }
    if (label == stream::Label::kRandom || label == stream::Label::kSkewed) return cfg.fuse.random_readahead_bytes;
    if (label == stream::Label::kSequential && live && size > 0)
      return 2 * live->CachedBytes(key) >= size ? cfg.fuse.cached_readahead_bytes : cfg.fuse.random_readahead_bytes;
    return cfg.fuse.max_read_bytes;
  });
  ns.set_listing_hook([&tree, now_us](const std::string& dir_key, size_t entries) {  // now_us dies before ns
    tree.NoteListing(dir_key, entries, now_us());
  });
  // A relisting's changes (Namespace::set_relist_hook): the kernel drops the
  // entries of names gone or changed (then forgets the inodes of those gone),
  // the engine and the stream tree forget the names gone. The hook may run
  // on a namespace thread until ns goes, after fuse: it reaches fuse through
  // fuse_view, cleared under its lock before fuse is destroyed.
  struct FuseView {
    std::mutex mu;
    FuseFs* fuse = nullptr;  // guarded by mu
  };
  auto fuse_view = std::make_shared<FuseView>();
  fuse_view->fuse = &fuse;
  struct ClearFuseView {
    std::shared_ptr<FuseView> v;
    ~ClearFuseView() {
      std::lock_guard lk(v->mu);
      v->fuse = nullptr;
    }
  } clear_fuse_view{fuse_view};
  ns.set_relist_hook([&ns, &tree, fuse_view, live](const std::string& dir_key, const Namespace::ListingDiff& diff) {
    {
      std::lock_guard lk(fuse_view->mu);
      if (fuse_view->fuse) {
        fuse_view->fuse->DropEntries(ns.LiveEntries(dir_key, diff.gone));
        fuse_view->fuse->DropEntries(ns.LiveEntries(dir_key, diff.changed));
        // New names a lookup was told do not exist: listed now, so no
        // longer absent for open and stat either (a job polling for a
        // marker file saw it in readdir and got ENOENT opening it for up to
        // negative_ttl_ms more; a tester's finding).
        if (!diff.added.empty())
          if (auto parent = ns.DirIno(dir_key)) fuse_view->fuse->DropNegatives(*parent, diff.added);
      }
    }
    if (diff.gone.empty()) return;
    std::vector<std::string> paths;
    paths.reserve(diff.gone.size());
    for (const DirEntry& e : diff.gone)
      paths.push_back((dir_key.empty() ? "" : dir_key + "/") + e.name + (e.is_dir ? "/" : ""));
    tree.Forget(paths);
    if (live) live->NoteGone(paths);
  });
  // Maintenance: detector re-tests and ageing, once a second.
  std::mutex maint_mu;
  std::condition_variable maint_cv;
  bool maint_stop = false;  // guarded by maint_mu
  std::thread maintenance([&] {
    std::unique_lock lk(maint_mu);
    uint64_t engine_limit = (*store)->limit_bytes();  // what the engine plans against
    uint64_t rounds = 0;
    while (!maint_cv.wait_for(lk, std::chrono::seconds(1), [&] { return maint_stop; })) {
      // Free heap pages glibc keeps go back to the system once a minute: a
      // tester's daemon reading 2,000 files at random grew 79 -> 146 MiB
      // over an hour with the memory in use flat at ~30 MiB (malloc_trim
      // brought it to 88). See also main()'s arena cap.
      if (++rounds % 60 == 0) ::malloc_trim(0);
      // An exception (out of memory) skips this round; escaping the thread
      // it would end the daemon.
      try {
        tree.Maintain(now_us());
        // A cache dir deleted under the mount, noticed with every read a
        // hit too (the unit files it still held open kept their space); the
        // access state saved off the read path.
        (*store)->Maintain();
        // The store's limit drops while a volume refuses writes it did not
        // foresee (a quota): the engine's free space and readahead share
        // follow it.
        if (const uint64_t l = (*store)->limit_bytes(); live && l != engine_limit) {
          live->SetCapacity(l);
          engine_limit = l;
        }
        if (!g_reload_policy.exchange(false)) continue;
        if (!live || !UsesPolicyFile(cfg)) {
          spdlog::warn("policy: SIGHUP ignored: cache.eviction '{}' uses no policy file", cfg.cache.eviction);
        } else if (cfg.policy.file.empty()) {
          // The built-in profile: nothing to read again.
          spdlog::warn("policy: SIGHUP ignored: no policy.file is configured (the built-in 'training' profile "
                       "is in use); name one in the config to reload it");
        } else {
          auto pf = engine::LoadPolicyFile(cfg.policy.file, engine::PolicyFileUse::kReload);
          if (pf)
            for (const auto& w : engine::PolicyWarnings(*pf, cfg.policy.file, (*store)->limit_bytes()))
              spdlog::warn("policy: {}", w);
          Status rs = pf ? live->Reload(std::move(*pf)) : pf.error();
          if (!pf) live->NoteReloadFailure(rs.message());
          if (rs.ok()) spdlog::info("policy: reloaded '{}'", cfg.policy.file);
          else spdlog::error("policy: reload of '{}' failed, keeping the old policy: {}", cfg.policy.file, rs.ToString());
          // The parse's nodes are freed: their heap goes back to the system.
          // A rejected 6.7 MB file of 200,000 overrides kept the daemon at
          // ~500 MB resident for good (a black-box tester's finding).
          ::malloc_trim(0);
        }
      } catch (const std::exception& e) {
        spdlog::error("maintenance: {} (a SIGHUP reload under way is lost: send it again)", e.what());
      } catch (...) {
        spdlog::error("maintenance: unknown exception (a SIGHUP reload under way is lost: send it again)");
      }
    }
  });
  struct Joiner {
    std::function<void()> f;
    ~Joiner() { f(); }
  } join_maintenance{[&] {
    {
      std::lock_guard lk(maint_mu);
      maint_stop = true;
    }
    maint_cv.notify_all();
    maintenance.join();
    if (trace)
      if (auto s = trace->Close(); !s.ok()) spdlog::error("trace: {}", s.ToString());
  }};
  // Declared after everything a scrape reads, so it stops serving first.
  std::unique_ptr<obs::MetricsServer> metrics_server;
  if (!cfg.metrics.addr.empty()) {
    auto ms = obs::MetricsServer::Start(cfg.metrics.addr, stats_json, &backend_stats);
    if (!ms) {
      rep.Fail(fmt::format("config key 'metrics.addr': {}", ms.error().message()));
      return ms.error().code() == Code::kInvalidArgument ? kExitUsage : kExitError;
    }
    metrics_server = std::move(*ms);
    metrics_at->store(metrics_server->port());
    spdlog::info("metrics: Prometheus endpoint on {} (port {})", cfg.metrics.addr, metrics_server->port());
  }
  if (auto s = fuse.Mount(); !s.ok()) {
    rep.Fail(s.message());
    return s.code() == Code::kInvalidArgument ? kExitUsage : kExitError;  // bad -o options: usage
  }
  spdlog::info("igtcache {} mounted {} on {} (cache {} limit {})", kVersion, source, a.mountpoint,
               cfg.cache.dir, FormatSize((*store)->limit_bytes()));
  spdlog::default_logger()->flush();  // in the log file when the mount command returns
  if (!rep.Ready()) {
    spdlog::error("the mount command that started this daemon is gone (interrupted?): unmounting");
    spdlog::default_logger()->flush();
    return kExitError;  // fuse's destructor unmounts
  }
  if (!foreground) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDOUT_FILENO);
      dup2(devnull, STDERR_FILENO);
      if (devnull > 2) close(devnull);
    }
  }
  auto s = fuse.Run();
  spdlog::info("unmounted {}", a.mountpoint);
  spdlog::default_logger()->flush();
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace

int RunMount(const MountArgs& a) {
  auto fail = [](int code, const std::string& m) {
    PrintError(m);
    return code;
  };
  auto cfg = LoadConfig(a.config_path);
  if (!cfg) return fail(kExitUsage, cfg.error().message());
  struct Override {
    const char* key;
    const std::string& value;
  };
  const std::string requester_pays = a.requester_pays ? "true" : "";
  // -o max_read=N is fuse.max_read_bytes: passed to libfuse as it was, it
  // differed from what init() sets, libfuse refused the kernel's INIT after
  // the mount had been reported ready, and the command said mounted, exit 0,
  // with nothing mounted.
  std::vector<std::string> fuse_opts;
  std::string max_read;
  for (const auto& group : a.fuse_opts) {
    if (group.empty()) return fail(kExitUsage, "-o needs a value (an empty option list was given)");
    std::string rest;
    for (const std::string& o : SplitComma(group)) {
      if (auto flag = HelperOptionFlag(o)) {
        // libfuse said only "fuse: unknown option(s)".
        return fail(kExitUsage, fmt::format("-o {}: an option of the mount(8) helper (mount -t fuse.igtcache, "
                                            "/etc/fstab); igtcache mount takes it as {}",
                                            o, *flag));
      } else if (o.rfind("max_read=", 0) == 0) {
        max_read = o.substr(9);
      } else if (o == "rw" || o == "ro") {
        // The mount is read-only whatever -o says: passed on, "rw" made
        // /proc/mounts say rw (writes still failed, EROFS).
        if (o == "rw")
          std::fprintf(stderr, "igtcache: warning: -o rw ignored: the mount is read-only\n");
      } else if (MountBookkeepingOption(o)) {
        // Copied from an fstab line: libfuse said "unknown option(s)".
      } else if (!o.empty()) {
        rest += (rest.empty() ? "" : ",") + o;
      }
    }
    if (!rest.empty()) fuse_opts.push_back(std::move(rest));
  }
  if (!max_read.empty()) {
    if (auto s = SetConfigValue(*cfg, "fuse.max_read_bytes", max_read); !s.ok())
      return fail(kExitUsage, fmt::format("{} (from -o max_read)", s.message()));
    // The kernel readahead of files read at random is at most max_read: its
    // 128K default is taken down with a smaller -o max_read (it was refused,
    // naming a key the user had not set).
    cfg->fuse.random_readahead_bytes = std::min(cfg->fuse.random_readahead_bytes, cfg->fuse.max_read_bytes);
  }
  for (const Override& o : {Override{"cache.dir", a.cache_dir}, {"cache.max_bytes", a.cache_size},
                            {"backend.endpoint", a.endpoint}, {"backend.region", a.region},
                            {"backend.profile", a.profile}, {"backend.addressing", a.addressing},
                            {"logging.level", a.log_level}, {"logging.file", a.log_file},
                            {"metrics.addr", a.metrics_addr},
                            {"backend.expected_bucket_owner", a.expected_bucket_owner},
                            {"backend.requester_pays", requester_pays}}) {
    if (o.value.empty()) continue;
    if (auto s = SetConfigValue(*cfg, o.key, o.value); !s.ok())
      return fail(kExitUsage, fmt::format("{} (from the command line)", s.message()));
  }
  if (auto s = Validate(*cfg); !s.ok()) return fail(kExitUsage, s.message());
  auto url = ParseSourceUrl(a.source);
  if (!url) return fail(kExitUsage, url.error().message());
  if (url->kind == SourceUrl::Kind::kFile) {
    std::string unused;
    for (const auto& [flag, v] : {std::pair<const char*, const std::string&>{"--endpoint", a.endpoint},
                                  {"--region", a.region}, {"--profile", a.profile}, {"--addressing", a.addressing},
                                  {"--expected-bucket-owner", a.expected_bucket_owner},
                                  {"--requester-pays", requester_pays}})
      if (!v.empty()) unused += (unused.empty() ? "" : ", ") + std::string(flag);
    if (!unused.empty())
      std::fprintf(stderr, "igtcache: warning: %s: for s3:// sources, not used with a file:// source\n",
                   unused.c_str());
  }

  std::error_code ec;
  const fs::path mp = NormalizeMountpoint(a.mountpoint);
  const auto already = [&] {
    return fail(kExitUsage, fmt::format("mount point '{}' is already an igtcache mount (a live one, or one left "
                                        "behind by a daemon that died): run igtcache unmount {} first",
                                        a.mountpoint, ShellWord(a.mountpoint)));
  };
  // Before anything stats it: a stat of a mount whose daemon hangs hangs.
  if (IsIgtcacheMount(mp.string())) return already();
  // Two mounts started at once on one mount point both passed that check
  // and stacked, the lower one hidden (a tester, 2026-11-30: 3 of 5 tries
  // with two cache dirs). The check is made again, and the mount, under an
  // flock of the mount point's directory, held until the mount is ready or
  // has failed: the second waits, then finds the first's mount. Under an
  // automount point (x-systemd.automount) the directory is not opened, and
  // below a path is compared as written: opening or resolving it would wait
  // for the very mount this command is making.
  const bool autofs = IsMountOfType(mp.string(), "autofs");
  MountpointLock mp_lock(mp, autofs);
  if (mp_lock.timed_out())
    return fail(kExitError, fmt::format("mount point '{}' stayed locked for {} s (another igtcache mount starting "
                                        "on it, or another process holding an flock of it)",
                                        a.mountpoint, MountpointLock::kWaitS));
  if (IsIgtcacheMount(mp.string())) return already();
  // Spelled through a symlink, the mount point is mounted on (and listed in
  // /proc/self/mountinfo as) the path it resolves to: checked under that
  // name too, now that the lock has opened it anyway.
  if (!autofs) {
    std::error_code e;
    const fs::path resolved = fs::weakly_canonical(mp, e);
    if (!e && resolved != mp && IsIgtcacheMount(NormalizeMountpoint(resolved.string()))) return already();
  }
  if (!fs::is_directory(mp, ec)) {
    if (ec.value() == ENOTCONN)
      return fail(kExitUsage, fmt::format("mount point '{}' is a FUSE mount whose daemon has gone: run "
                                          "'fusermount3 -u {}' first",
                                          a.mountpoint, a.mountpoint));
    return fail(kExitUsage, fmt::format("mount point '{}' is not an existing directory", a.mountpoint));
  }
  MountArgs args = a;
  args.mountpoint = mp.string();
  args.fuse_opts = std::move(fuse_opts);  // without max_read (above)
  const bool default_cache_dir = cfg->cache.dir.empty();
  if (default_cache_dir) cfg->cache.dir = DefaultCacheDir();
  cfg->cache.dir = fs::absolute(cfg->cache.dir, ec).lexically_normal().string();
  // Paths the mount would reach through itself: its reads would wait on its
  // own replies (a deadlock even SIGKILL does not end), or a walk of the
  // mount would find the mount again inside it.
  {
    auto real = [autofs](const fs::path& p) {
      std::error_code e;
      auto r = autofs ? fs::absolute(p, e).lexically_normal() : fs::weakly_canonical(p, e);
      return fs::path(NormalizeMountpoint((e ? p : r).string()));  // no trailing '/'
    };
    auto within = [](const fs::path& inner, const fs::path& outer) {
      auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
      return o == outer.end();
    };
    const fs::path rmp = real(mp);
    if (url->kind == SourceUrl::Kind::kFile) {
      const fs::path src = real(url->path);
      if (within(rmp, src) || within(src, rmp))
        return fail(kExitUsage, fmt::format("source '{}' and mount point '{}' overlap: the mount would read its "
                                            "own files through itself; mount on a directory outside the source",
                                            a.source, a.mountpoint));
    }
    if (within(real(cfg->cache.dir), rmp))
      return fail(kExitUsage, fmt::format("cache dir '{}' is inside mount point '{}': the mount would hide it; use "
                                          "a cache dir outside the mount point",
                                          cfg->cache.dir, a.mountpoint));
    // Inside a file:// source, what the daemon writes would be listed and
    // served by the mount itself: its cache's units, index and log (a walk
    // or a warm of the mount would read the cache through itself, and the
    // source would change under the mount as the daemon writes).
    const fs::path file_src = url->kind == SourceUrl::Kind::kFile ? real(url->path) : fs::path();
    if (!file_src.empty() && within(real(cfg->cache.dir), file_src))
      return fail(kExitUsage, fmt::format("cache dir '{}'{} is inside source '{}': the mount would serve its own "
                                          "cache files; use a cache dir outside the source (--cache-dir DIR)",
                                          cfg->cache.dir, default_cache_dir ? " (the default)" : "", a.source));
    // Files the daemon writes: under the mount point they would be hidden
    // by the mount (written to the directory beneath it, seen only after the
    // unmount).
    for (const auto& [what, path] : {std::pair<const char*, std::string>{"--trace-out", a.trace_out},
                                     {"log file", cfg->logging.file}}) {
      if (path.empty()) continue;
      std::error_code e;
      const fs::path abs = fs::absolute(path, e);
      if (e) continue;
      if (within(real(abs), rmp))
        return fail(kExitUsage, fmt::format("{} '{}' is inside mount point '{}': the mount would hide it; write "
                                            "it outside the mount point",
                                            what, path, a.mountpoint));
      if (!file_src.empty() && within(real(abs), file_src))
        return fail(kExitUsage, fmt::format("{} '{}' is inside source '{}': the mount would list and serve it as "
                                            "it is written; write it outside the source",
                                            what, path, a.source));
      // Not over the cache's own files (a --trace-out naming index/CURRENT
      // destroyed the index): in the cache dir, only beside them, as the
      // daemon's default log file (igtcache.log) is.
      const fs::path rabs = real(abs), rcache = real(cfg->cache.dir);
      const std::string name = rabs.filename().string();
      if (within(rabs, rcache) &&
          (rabs.parent_path() != rcache || name == "LOCK" || name.starts_with("index") || name.starts_with("units")))
        return fail(kExitUsage, fmt::format("{} '{}' would overwrite the cache's own files in cache dir '{}'; write "
                                            "it elsewhere (beside them, e.g. {}/trace.csv, is fine)",
                                            what, path, cfg->cache.dir, cfg->cache.dir));
    }
    // One file for both: the log's lines went into the trace. The log is
    // logging.file, or a daemon's default <cache dir>/igtcache.log (which
    // the message above named as a fine place for a trace before
    // 2026-11-30: a tester's trace and log overwrote each other).
    const std::string log_file =
        !cfg->logging.file.empty() ? cfg->logging.file : a.foreground ? std::string() : cfg->cache.dir + "/igtcache.log";
    if (!a.trace_out.empty() && !log_file.empty()) {
      std::error_code e1, e2;
      const fs::path t = fs::absolute(a.trace_out, e1), l = fs::absolute(log_file, e2);
      if (!e1 && !e2 && real(t) == real(l))
        return fail(kExitUsage, fmt::format("--trace-out '{}' is the log file: the log would be written into the "
                                            "trace; give them two files",
                                            a.trace_out));
    }
  }
  // Said here, before the daemon starts: its own warnings go to its log.
  if (!UsesPolicyFile(*cfg) && !cfg->policy.file.empty())
    std::fprintf(stderr, "igtcache: warning: config key 'policy.file' ('%s') is not used: it applies to "
                 "cache.eviction igt, not '%s' (its overrides, pins and quotas are not applied either)\n",
                 cfg->policy.file.c_str(), cfg->cache.eviction.c_str());
  if (UsesPolicyFile(*cfg) && !cfg->policy.file.empty())
    if (auto pf = engine::LoadPolicyFile(cfg->policy.file, engine::PolicyFileUse::kMount))
      for (const auto& w : engine::PolicyWarnings(*pf, cfg->policy.file, cfg->cache.max_bytes))
        std::fprintf(stderr, "igtcache: warning: %s\n", w.c_str());
  // FUSE mounts over a non-empty directory (libfuse 3 dropped the check);
  // its entries are hidden until the unmount. Said, not refused. Not looked
  // at under an automount point (x-systemd.automount): listing it would
  // wait for the very mount this command is making.
  if (fs::directory_iterator it = autofs ? fs::directory_iterator()
                                                                         : fs::directory_iterator(mp, ec);
      !ec && it != fs::directory_iterator())
    std::fprintf(stderr, "igtcache: warning: mount point '%s' is not empty: its entries are hidden while it is "
                 "mounted\n", a.mountpoint.c_str());
  if (!cfg->logging.file.empty()) {
    cfg->logging.file = fs::absolute(cfg->logging.file, ec).string();
    // spdlog would create a missing directory, a mistyped one included (as
    // root, anywhere): a log file goes in a directory that exists, as a
    // --trace-out does.
    const fs::path dir = fs::path(cfg->logging.file).parent_path();
    if (!fs::is_directory(dir, ec))
      return fail(kExitUsage, fmt::format("log file '{}': directory '{}' {}", cfg->logging.file, dir.string(),
                                          fs::exists(dir, ec) ? "is not a directory" : "does not exist"));
  }
  if (!cfg->policy.file.empty())  // read again on SIGHUP, after the daemon left this dir
    cfg->policy.file = fs::absolute(cfg->policy.file, ec).string();
  if (!args.trace_out.empty()) {
    auto abs = fs::absolute(args.trace_out, ec);
    if (ec) return fail(kExitUsage, fmt::format("--trace-out '{}': {}", args.trace_out, ec.message()));
    args.trace_out = abs.string();
  }
  if (!a.foreground) {
    // The daemon works from "/" (it must not keep the caller's directory
    // busy): files named by relative paths in the environment, read again
    // later (credentials on refresh, the CA bundle on each new connection),
    // are made absolute first.
    for (const char* var : {"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_CA_BUNDLE", "AWS_WEB_IDENTITY_TOKEN_FILE",
                            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"}) {
      const char* raw = std::getenv(var);
      if (!raw || !*raw) continue;
      // ~ and $NAME first, as the credentials chain reads these two (made
      // absolute first, a daemon read ~/creds as ./~/creds: a review).
      const std::string v = std::string_view(var).starts_with("AWS_SHARED") || std::string_view(var) == "AWS_CONFIG_FILE"
                                ? ExpandAwsPath(raw)
                                : std::string(raw);
      if (v[0] == '/') {
        ::setenv(var, v.c_str(), 1);
        continue;
      }
      auto abs = fs::absolute(v, ec);
      if (ec) return fail(kExitUsage, fmt::format("${} '{}': {}", var, v, ec.message()));
      ::setenv(var, abs.c_str(), 1);
    }
  }

  // Serve, with an exception out of it (a thread that could not be started
  // under a pids or thread limit: std::system_error) said, not std::terminate.
  auto serve = [&](Reporter& rep, bool foreground) {
    try {
      return Serve(args, *cfg, *url, rep, foreground);
    } catch (const std::system_error& e) {
      const std::string m = fmt::format("cannot start: {} (a limit on threads or processes: pids.max, ulimit -u?)",
                                        e.what());
      spdlog::error("{}", m);
      rep.Fail(m);
    } catch (const std::exception& e) {
      spdlog::error("cannot start: {}", e.what());
      rep.Fail(std::string("cannot start: ") + e.what());
    }
    return kExitError;
  };
  if (a.foreground) {
    Reporter rep(-1);
    rep.ReleaseWhenDone(mp_lock.Release());
    return serve(rep, true);
  }
  // Daemon: the child does all the work and tells the parent how the mount
  // went through a pipe, so errors still reach the terminal and the exit
  // code, and nothing stays mounted after a failure.
  // O_CLOEXEC: fusermount3, which the child runs to mount, must not hold
  // the write end (with auto_unmount it lives as long as the mount, and the
  // parent would wait for it). The parent also stops reading at "OK".
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return fail(kExitError, std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return fail(kExitError, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(p[0]);
    // The parent holds the mount point's lock until it hears how the mount
    // went; this copy would hold it for the daemon's life.
    if (const int fd = mp_lock.Release(); fd >= 0) ::close(fd);  // the lock stays with the parent's descriptor
    setsid();
    // Every path is absolute by now (above); a daemon keeping the caller's
    // directory busy would stop it from being unmounted.
    std::signal(SIGPIPE, SIG_IGN);  // a gone parent is an EPIPE (Reporter::Ready), not death
    Reporter rep(p[1]);
    if (chdir("/") != 0) {
      rep.Fail(std::string("chdir /: ") + std::strerror(errno));
      _exit(kExitError);
    }
    int rc = serve(rep, false);
    if (auto l = spdlog::default_logger()) l->flush();  // _exit skips the logger's teardown
    _exit(rc);
  }
  close(p[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  // Warnings may come first, one per line; then "OK" or the error.
  const auto ok_at = [&msg]() -> size_t {
    if (msg.rfind("OK\n", 0) == 0) return 0;
    const size_t at = msg.find("\nOK\n");
    return at == std::string::npos ? at : at + 1;
  };
  while (ok_at() == std::string::npos &&
         ((n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)))
    if (n > 0) msg.append(buf, static_cast<size_t>(n));
  close(p[0]);
  if (const size_t at = ok_at(); at != std::string::npos) {
    std::fputs(msg.substr(0, at).c_str(), stderr);
    return kExitOk;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (msg.empty()) msg = "igtcache: error: the mount daemon exited before the mount was ready\n";
  std::fputs(msg.c_str(), stderr);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : kExitError;
  return rc == 0 ? kExitError : rc;
}

}  // namespace igt
