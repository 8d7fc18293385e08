// `igtcache warm PATH...`: fetches files (or whole directory trees) of an
// igtcache mount into its SSD cache, in parallel, by an ioctl on each file
// (kWarmIoctl: the daemon fetches the range as a warm-up, which its policy
// engine holds for the job to come). A daemon without it gets the file read
// through: O_DIRECT where the mount allows it (so page-cache copies cannot
// hide a read from the daemon) and POSIX_FADV_DONTNEED after each chunk
// either way (so warming does not flush the page cache).
//
// Cache limit: the mount's stats give cache_limit_bytes; files are taken in
// the order given (directories walked in sorted order) while they fit in the
// limit, and those that do not fit are reported (count, bytes, first names)
// instead of churning the cache.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fuse/fuse_fs.h"
#include "igtcache/config.h"
#include "src/cache/index_record.h"
#include "src/cache/unit_file.h"
#include "src/cli/ops_cmds.h"
#include "src/engine/policy_file.h"

namespace igt {
namespace {

const char* Files(size_t n) { return n == 1 ? "file" : "files"; }


namespace fs = std::filesystem;

constexpr size_t kChunk = 1 << 20;       // one FUSE max_read request
constexpr size_t kDirectAlign = 4096;    // O_DIRECT buffer alignment
constexpr int kMaxJobs = 256;            // more readers than FUSE threads only queue
constexpr size_t kListNotFit = 5;        // names shown of files not read (not fitting, never cached)

struct Item {
  std::string path;
  uint64_t size = 0;
};

// A name from the bucket as printed: control characters escaped (\xNN: a
// key holding a newline or an escape sequence must not forge a line or
// drive the terminal), quoted when it holds a space or a quote.
std::string Shown(std::string_view path) {
  std::string e = Escaped(path);
  if (e.find_first_of(" '") == std::string::npos) return e;
  std::string q = "'";
  for (char c : e) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// " a b c ... and 7 more" and the end of the line: the first names of a list.
void PrintFirstNames(const std::vector<Item>& items) {
  for (size_t i = 0; i < items.size() && i < kListNotFit; ++i) std::printf(" %s", Shown(items[i].path).c_str());
  if (items.size() > kListNotFit) std::printf(" ... and %zu more", items.size() - kListNotFit);
  std::printf("\n");
}

struct Progress {
  std::atomic<uint64_t> files_done{0}, bytes_done{0}, errors{0};
  // A file failed with ENOTCONN / ECONNABORTED: the mount's daemon is gone,
  // and every file left would fail the same way.
  std::atomic<bool> mount_gone{false};
  // The mount's cache took no write for a while and its writes failed:
  // what is left would be read and not cached (stopped early).
  std::atomic<bool> writes_failing{false};
};

// Returns strerror(e), noting in `p` an error that means the daemon is gone.
std::string FileError(int e, Progress& p) {
  if (e == ENOTCONN || e == ECONNABORTED) p.mount_gone = true;
  return std::strerror(e);
}

std::string Eta(double s) {
  if (s < 0 || s > 360000) return "--:--";
  auto t = static_cast<uint64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

// Warms one file; returns an error text or "". The mount fetches it into
// its cache as a warm-up (kWarmIoctl, in chunks of kIoctlChunk for the
// progress): the daemon holds such units for the job to come, and its
// access stream tree does not take them for the job's reads. A daemon
// without the ioctl (ENOTTY) gets the file read through instead.
// A file is warmed in pieces of kPieceBytes, which the workers share: one
// ioctl fetches its range a few units at a time, so a large checkpoint
// warmed by one worker went at about one connection's speed (a 1.5 GiB
// file: 29 s against 5.4 s for `cat`, a black-box test).
constexpr uint64_t kIoctlChunk = kMaxWarmBytes;
constexpr uint64_t kPieceBytes = kIoctlChunk;
// Warms bytes [begin, end) of one file (end == 0: to its end).
std::string WarmFile(const Item& it, char* buf, Progress& p, uint64_t begin = 0, uint64_t end = 0) {
  if (end == 0 || end > it.size) end = it.size;
  int fd = open(it.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && errno == EINVAL) fd = open(it.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError(errno, p);
  uint64_t off = begin;
  std::string err;
  bool by_ioctl = true;
  while (by_ioctl && off < end) {
    WarmRange r{off, std::min<uint64_t>(kIoctlChunk, end - off)};
    if (ioctl(fd, kWarmIoctl, &r) != 0) {
      if (errno == EINTR) continue;
      if (errno == ENOTTY || errno == ENOSYS || errno == EINVAL) {
        by_ioctl = false;  // read it through, from where the ioctls stopped
        break;
      }
      err = FileError(errno, p);
      close(fd);
      return err;
    }
    off += r.length;
    p.bytes_done.fetch_add(r.length, std::memory_order_relaxed);
  }
  if (by_ioctl) {
    close(fd);
    return err;
  }
  while (off < end) {
    ssize_t n = pread(fd, buf, std::min<uint64_t>(kChunk, end - off), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && off == begin) {  // O_DIRECT refused at read time: buffered
      int fl = fcntl(fd, F_GETFL);
      if (fl >= 0 && (fl & O_DIRECT) && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0) continue;
    }
    if (n < 0) {
      err = FileError(errno, p);
      break;
    }
    if (n == 0) break;
    (void)posix_fadvise(fd, static_cast<off_t>(off), n, POSIX_FADV_DONTNEED);
    off += static_cast<uint64_t>(n);
    p.bytes_done.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  }
  close(fd);
  return err;
}

// Expands files and directories (recursively, sorted) into regular files.
void Collect(const fs::path& p, std::vector<Item>& out, std::vector<std::string>& errors) {
  std::error_code ec;
  auto st = fs::symlink_status(p, ec);
  if (ec) {
    errors.push_back(fmt::format("{}: {}", p.string(), ec.message()));
    return;
  }
  if (fs::is_regular_file(st)) {
    if (p.filename() == kStatsFileName) return;
    out.push_back({p.string(), static_cast<uint64_t>(fs::file_size(p, ec))});
    return;
  }
  if (!fs::is_directory(st)) return;
  std::vector<fs::path> children;
  for (fs::directory_iterator d(p, ec), end; !ec && d != end; d.increment(ec)) children.push_back(d->path());
  if (ec) errors.push_back(fmt::format("{}: {}", p.string(), ec.message()));
  std::sort(children.begin(), children.end());
  for (const auto& c : children) Collect(c, out, errors);
}

}  // namespace

int RunWarm(const WarmArgs& a) {
  auto fail = [](int code, const std::string& m) {
    igt::PrintError(m);
    return code;
  };
  if (a.paths.empty()) return fail(kExitUsage, "warm: no paths given");
  const int jobs = std::clamp(a.jobs, 1, kMaxJobs);

  // Group the paths by mount; every path must be inside an igtcache mount.
  std::map<std::string, std::vector<std::string>> by_mount;
  std::vector<std::string> mount_order;
  for (const auto& p : a.paths) {
    std::string path = NormalizeMountpoint(p);
    auto m = FindIgtcacheMount(path);
    if (!m) {  // through a symlink?
      path = ResolveSymlinks(path);
      m = FindIgtcacheMount(path);
    }
    if (!m) return fail(kExitUsage, fmt::format("'{}' is not inside an igtcache mount", p));
    if (!by_mount.count(*m)) mount_order.push_back(*m);
    by_mount[*m].push_back(path);
  }

  int rc = kExitOk;
  for (const auto& mnt : mount_order) {
    auto stats = ReadStats(mnt);
    if (!stats) return fail(kExitError, stats.error().message());
    const uint64_t limit = stats->value("cache_limit_bytes", uint64_t{0});
    const uint64_t used = stats->value("cache_used_bytes", uint64_t{0});
    // An older daemon does not report its unit size: assume the default.
    const uint64_t unit = stats->value("cache_unit_bytes", uint64_t{1} << 20);
    const uint64_t inline_max = stats->value("cache_inline_max_bytes", uint64_t{0});
    // The object key is the path below the mount point after the source's
    // prefix: shorter than the path and the source's URL together.
    const size_t key_bound = stats->value("source", std::string()).size();

    std::vector<Item> all;
    std::vector<std::string> errors;
    for (const auto& p : by_mount[mnt]) Collect(p, all, errors);
    {  // A file named twice (itself and through its directory) is read once.
      std::set<std::string> seen;
      all.erase(std::remove_if(all.begin(), all.end(), [&](const Item& it) { return !seen.insert(it.path).second; }),
                all.end());
    }
    for (const auto& e : errors) std::fprintf(stderr, "igtcache: warm: %s\n", igt::Escaped(e).c_str());
    if (!errors.empty()) rc = kExitError;
    if (all.empty() && !errors.empty()) continue;  // no plan of nothing after the errors

    // Files under a never_cache prefix of the mount's policy (the longest
    // prefix covering a file decides, as in the engine) are not read: the
    // mount would fetch them and cache nothing.
    std::vector<engine::PathOverride> overrides;
    std::vector<std::pair<std::string, uint64_t>> pinned;  // pinned prefixes and the bytes they hold
    if (auto e = stats->find("engine"); e != stats->end() && e->is_object())
      if (auto ovs = e->find("overrides"); ovs != e->end() && ovs->is_array())
        for (const auto& o : *ovs)
          if (o.is_object() && o.contains("prefix") && o["prefix"].is_string()) {
            overrides.push_back({.prefix = o["prefix"].get<std::string>(), .never_cache = o.value("never_cache", false),
                                 .quota_bytes = o.value("quota_bytes", uint64_t{0})});
            if (o.value("pin", false)) pinned.emplace_back(overrides.back().prefix, o.value("cached_bytes", uint64_t{0}));
          }
    engine::OverrideIndex override_index;
    override_index.Build(overrides);
    // A file's path from the mount's root, as the policy file's prefixes are.
    const auto rel = [&](const Item& it) {
      return std::string_view(it.path).substr(std::min(it.path.size(), mnt.size() + 1));
    };
    std::vector<Item> never;
    uint64_t never_bytes = 0;
    std::erase_if(all, [&](const Item& it) {
      const engine::PathOverride* best = override_index.Find(rel(it));
      if (!best || !best->never_cache) return false;
      never_bytes += it.size;
      never.push_back(it);
      return true;
    });

    // What fits: first fit in the given order, within the cache limit, which
    // counts disk use (each unit's header and whole blocks, or a small
    // object's record inline in the index; at most this for whole units,
    // which a file read through from its start is cached as).
    // A pinned prefix's units are evicted only when nothing else can be:
    // the room is the limit less what they hold (before 2026-11-29 a warm-up
    // planned against the whole limit beside 8 MiB pinned in a 12 MiB cache,
    // said all fitted, and the mount evicted most of what it fetched). Not
    // a pinned prefix this warm-up reads in: its files are counted below.
    uint64_t pinned_bytes = 0;
    // By whole components, as the engine (a pinned "data" does not cover
    // "database/": a warm-up of that planned over the pinned space, and the
    // mount evicted what it fetched; a review's finding).
    for (const auto& [prefix, bytes] : pinned) {
      const engine::PathOverride pin{.prefix = prefix};
      const bool warmed = std::any_of(all.begin(), all.end(), [&](const Item& it) {
        return pin.Covers(rel(it));
      });
      if (!warmed) pinned_bytes += bytes;
    }
    std::vector<Item> todo, skipped, over_quota;
    uint64_t budget = limit - std::min(limit, pinned_bytes), total = 0, skipped_bytes = 0, over_quota_bytes = 0;
    // A prefix with a quota keeps at most that (its units beyond it are the
    // mount's first victims): its files fit within it too, counted as if
    // nothing of the prefix were cached (as the cache's room is counted:
    // which of them are is not known here).
    std::map<const engine::PathOverride*, uint64_t> quota_left;
    for (const auto& o : overrides)
      if (o.quota_bytes > 0) quota_left[&o] = o.quota_bytes;
    for (auto& it : all) {
      const uint64_t disk = cache::CachedObjectDiskBytesAtMost(it.size, unit, inline_max, it.path.size() + key_bound);
      const engine::PathOverride* ov = override_index.Find(rel(it));
      auto q = ov ? quota_left.find(ov) : quota_left.end();
      if (q != quota_left.end() && it.size > q->second) {
        over_quota_bytes += it.size;
        over_quota.push_back(std::move(it));
      } else if (disk <= budget) {
        budget -= disk;
        total += it.size;
        if (q != quota_left.end()) q->second -= it.size;
        todo.push_back(std::move(it));
      } else {
        skipped_bytes += it.size;
        skipped.push_back(std::move(it));
      }
    }
    const auto& given = by_mount[mnt];
    const std::string what = given.size() == 1 ? Shown(given[0]) : fmt::format("{} paths in {}", given.size(), Shown(mnt));
    const std::string pin_note = pinned_bytes ? fmt::format(", {} of it pinned", FormatSize(pinned_bytes)) : "";
    if (a.progress)  // -q: the summary only
      std::printf("warm: %s: %zu %s, %s to read (cache %s used of %s%s)\n", what.c_str(), todo.size(),
                  Files(todo.size()), FormatSize(total).c_str(), FormatSize(used).c_str(), FormatSize(limit).c_str(),
                  pin_note.c_str());
    if (!never.empty()) {
      std::printf("warm: not read: %zu %s, %s under a never_cache prefix of the mount's policy file (nothing there "
                  "is cached):",
                  never.size(), Files(never.size()), FormatSize(never_bytes).c_str());
      PrintFirstNames(never);
    }
    const uint64_t evictable = used - std::min(used, pinned_bytes);  // pinned bytes stay
    if (a.progress && evictable > budget)
      // An upper bound: files of the plan already cached need no room, and
      // which they are is not known here (a tester's second warm of a cached
      // file read this note, then "0 B fetched").
      std::printf("warm: note: up to %s of older cached data may be evicted to make room (less if some of these "
                  "files are cached already)\n",
                  FormatSize(evictable - budget).c_str());
    std::fflush(stdout);

    Progress prog;
    // The pieces to warm, in order: (file, first byte); a file's pieces
    // left, and whether one failed (its first error is told).
    std::vector<std::pair<size_t, uint64_t>> pieces;
    for (size_t i = 0; i < todo.size(); ++i)
      for (uint64_t off = 0; off == 0 || off < todo[i].size; off += kPieceBytes) pieces.emplace_back(i, off);
    std::unique_ptr<std::atomic<uint64_t>[]> pieces_left(new std::atomic<uint64_t>[todo.size()]);
    std::unique_ptr<std::atomic<bool>[]> file_failed(new std::atomic<bool>[todo.size()]);
    for (size_t i = 0; i < todo.size(); ++i) {
      pieces_left[i] = todo[i].size == 0 ? 1 : (todo[i].size + kPieceBytes - 1) / kPieceBytes;
      file_failed[i] = false;
    }
    std::atomic<size_t> next{0};
    std::mutex err_mu;
    std::vector<std::string> read_errors;  // guarded by err_mu
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    const int n_workers = std::min<int>(jobs, static_cast<int>(pieces.size()));
    std::atomic<int> running{n_workers};  // the progress loop stops when none is left
    for (int w = 0; w < n_workers; ++w) {
      workers.emplace_back([&] {
        struct Done {
          std::atomic<int>& n;
          ~Done() { n.fetch_sub(1); }
        } done{running};
        void* raw = nullptr;
        if (posix_memalign(&raw, kDirectAlign, kChunk) != 0) return;  // the others read its share
        std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(raw), &std::free);
        for (size_t k; !prog.mount_gone && !prog.writes_failing && (k = next.fetch_add(1)) < pieces.size();) {
          const auto [i, off] = pieces[k];
          // A piece of a file that failed already is not read (the error is told once).
          std::string e = file_failed[i] ? "" : WarmFile(todo[i], buf.get(), prog, off, off + kPieceBytes);
          // The daemon is gone: counted with the files not read, one line.
          if (!e.empty() && prog.mount_gone) continue;
          if (!e.empty() && !file_failed[i].exchange(true)) {
            prog.errors.fetch_add(1);
            std::lock_guard lk(err_mu);
            read_errors.push_back(fmt::format("{}: {}", todo[i].path, e));
          }
          if (pieces_left[i].fetch_sub(1) == 1) prog.files_done.fetch_add(1);
        }
      });
    }

    // Progress: a bar redrawn in place on a terminal, a line every few
    // seconds otherwise.
    const bool tty = isatty(STDERR_FILENO);
    const auto period = std::chrono::milliseconds(tty ? 200 : 5000);
    auto show = [&](bool final) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const uint64_t b = prog.bytes_done.load(), f = prog.files_done.load();
      const double rate = el > 0 ? static_cast<double>(b) / el : 0;
      const double eta = rate > 0 ? static_cast<double>(total - std::min(b, total)) / rate : -1;
      if (tty) {
        constexpr int kWidth = 30;  // bar characters
        const double frac = total ? static_cast<double>(b) / static_cast<double>(total)
                                  : (todo.empty() ? 1.0 : static_cast<double>(f) / static_cast<double>(todo.size()));
        const int fill = static_cast<int>(std::min(1.0, frac) * kWidth);
        std::fprintf(stderr, "\r[%s%s] %3.0f%%  %zu/%zu files  %s/%s  %s/s  ETA %s  ",
                     std::string(static_cast<size_t>(fill), '#').c_str(),
                     std::string(static_cast<size_t>(kWidth - fill), '.').c_str(), 100 * std::min(1.0, frac),
                     static_cast<size_t>(f), todo.size(), FormatSize(b).c_str(), FormatSize(total).c_str(),
                     FormatSize(static_cast<uint64_t>(rate)).c_str(), final ? "0:00" : Eta(eta).c_str());
        if (final) std::fputc('\n', stderr);
      } else if (!final) {
        std::fprintf(stderr, "warm: %zu/%zu files, %s of %s, %s/s, ETA %s\n", static_cast<size_t>(f),
                     todo.size(), FormatSize(b).c_str(), FormatSize(total).c_str(),
                     FormatSize(static_cast<uint64_t>(rate)).c_str(), Eta(eta).c_str());
      }
      std::fflush(stderr);
    };
    {
      // Every second, the mount's counters: two seconds or more in which it
      // fetched from the source and its cache writes failed while nothing
      // was inserted stop the warm-up (a full or read-only
      // cache volume: the rest would be read for nothing). Before, warm read
      // all of it from the source (a tester's full volume: 36 MiB read,
      // every insert failed). A second of hits only, or of slow GETs, or
      // of inserts the policy declined, is not one.
      auto next_show = std::chrono::steady_clock::now() + period;
      auto next_look = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      auto counter = [](const nlohmann::json& j, const char* k) { return j.value(k, uint64_t{0}); };
      std::optional<nlohmann::json> last;
      if (stats) last = *stats;
      // Since the mount last inserted or declined a unit (or warm began):
      // when, and its counters then. Two looks in a row that each saw GETs
      // end and writes fail missed a volume that was full all along when
      // slow GETs ended every other second (a CI run read all 64 MiB).
      auto quiet_since = std::chrono::steady_clock::now();
      std::optional<nlohmann::json> at_quiet = last;
      while (prog.files_done.load() < todo.size() && running.load() > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const auto now = std::chrono::steady_clock::now();
        if (a.progress && now >= next_show) {
          show(false);
          next_show += period;
        }
        if (last && now >= next_look) {
          next_look = now + std::chrono::seconds(1);
          if (auto st = ReadStats(mnt)) {
            auto grew = [&](const char* k) { return counter(*st, k) > counter(*last, k); };
            if (grew("cache_insert_units") || grew("cache_insert_declined")) {
              quiet_since = now;
              at_quiet = *st;
            }
            auto grew_quiet = [&](const char* k) { return counter(*st, k) > counter(*at_quiet, k); };
            if (now - quiet_since >= std::chrono::seconds(2) && grew_quiet("backend_get_bytes") &&
                grew_quiet("cache_write_errors"))
              prog.writes_failing = true;
            last = std::move(*st);
          }
        }
      }
    }
    for (auto& t : workers) t.join();
    // Files not done and not counted already as failed (a piece of one
    // failed before the daemon went while another was being read).
    // Counted apart from those that failed (all were "failed" in the
    // summary: a tester's one EIO and two files never tried read "3 failed").
    size_t left = 0;
    for (size_t i = 0; i < todo.size(); ++i) left += pieces_left[i] > 0 && !file_failed[i];
    if (left > 0 && prog.writes_failing && !prog.mount_gone) {
      read_errors.push_back(fmt::format("stopped early, {} files not read: the mount's cache takes no writes (for "
                                        "two seconds its cache_write_errors grew and nothing was inserted)",
                                        left));
    } else if (left > 0) {
      // The daemon is gone, or every worker failed to get its read buffer.
      read_errors.push_back(prog.mount_gone ? fmt::format("{} files not read: the mount's daemon is gone", left)
                                            : fmt::format("{} files not read: no reader could allocate its {} buffer",
                                                          left, FormatSize(kChunk)));
    }
    if (a.progress && tty) show(true);
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    for (const auto& e : read_errors) std::fprintf(stderr, "igtcache: warm: %s\n", igt::Escaped(e).c_str());
    if (!read_errors.empty()) rc = kExitError;
    auto after = ReadStats(mnt);
    // How much a counter of the mount grew while warm ran (0 without stats).
    auto grew = [&](const char* counter) {
      if (!after) return uint64_t{0};
      const uint64_t was = stats->value(counter, uint64_t{0}), now = after->value(counter, uint64_t{0});
      return now - std::min(was, now);
    };
    // Read, but not cached: the cache volume failed the daemon's writes (a
    // full or read-only disk, a removed cache dir). The job to come would
    // read all of it from the bucket.
    if (after && after->value("cache_dir_gone", uint64_t{0}) != 0) {
      // Its inserts are no longer tried, so no write error says so.
      std::fprintf(stderr,
                   "igtcache: warm: %s: the mount's cache dir was deleted under it (cache_dir_gone): nothing is "
                   "cached until it is mounted again\n",
                   mnt.c_str());
      rc = kExitError;
    } else if (const uint64_t failed = grew("cache_write_errors"); failed > 0) {
      std::fprintf(stderr,
                   "igtcache: warm: %s: %llu cache writes failed on the mount meanwhile (cache_write_errors; the "
                   "daemon's log says why): what they held, maybe some of what warm read, is not cached\n",
                   mnt.c_str(), static_cast<unsigned long long>(failed));
      rc = kExitError;
    }
    // Neither failed nor left unread (the daemon gone: "read 2600 files" beside
    // "2600 files not read", a tester's finding).
    const size_t read_ok = todo.size() - std::min<size_t>(prog.errors.load() + left, todo.size());
    // What the mount fetched from the source meanwhile: files already cached
    // are read too (from the cache), so "read" alone overstates the warm-up.
    // Other readers of the mount count in it as well.
    const std::string fetched =
        after ? fmt::format(", {} fetched from the source", FormatSize(grew("backend_get_bytes"))) : "";
    const std::string failed_note = (prog.errors.load() ? fmt::format(", {} failed", prog.errors.load()) : "") +
                                    (left ? fmt::format(", {} not read", left) : "");
    std::printf("warm: read %zu %s, %s in %.1f s (%s/s)%s%s; cache now %s of %s\n", read_ok, Files(read_ok),
                FormatSize(prog.bytes_done.load()).c_str(), el,
                FormatSize(el > 0 ? static_cast<uint64_t>(static_cast<double>(prog.bytes_done.load()) / el) : 0).c_str(),
                fetched.c_str(), failed_note.c_str(),
                after ? FormatSize(after->value("cache_used_bytes", uint64_t{0})).c_str() : "?",
                FormatSize(limit).c_str());
    if (!over_quota.empty()) {
      std::printf("warm: did not fit: %zu %s, %s beyond the quota of their prefix in the mount's policy file:",
                  over_quota.size(), Files(over_quota.size()), FormatSize(over_quota_bytes).c_str());
      PrintFirstNames(over_quota);
    }
    if (!skipped.empty()) {
      std::printf("warm: did not fit: %zu %s, %s (cache limit %s%s):", skipped.size(), Files(skipped.size()),
                  FormatSize(skipped_bytes).c_str(), FormatSize(limit).c_str(),
                  pinned_bytes ? fmt::format(", {} pinned", FormatSize(pinned_bytes)).c_str() : "");
      PrintFirstNames(skipped);
    }
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace igt
