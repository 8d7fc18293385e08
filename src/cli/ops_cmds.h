#pragma once
// The operator commands of `igtcache` beyond mount: stats (table / JSON /
// watch), warm (fetch files into the cache through the mount), unmount, and
// the mount(8) helper entry point (`mount -t fuse.igtcache`, /etc/fstab).
// See docs/CLI.md. Each Run* returns the process exit code (mount_cmd.h) and
// prints errors as one line on stderr.
// Thread-safety: command entry points, called once from main.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "igtcache/status.h"
#include "src/cli/mount_cmd.h"

namespace igt {

// --- helpers shared by the commands
// "/mnt/x/" -> "/mnt/x" (absolute, no trailing slash).
std::string NormalizeMountpoint(const std::string& path);
// True if `mnt` (normalized) is listed in /proc/self/mounts as fuse.igtcache.
bool IsIgtcacheMount(const std::string& mnt);
// Whether /proc/self/mounts has a mount of `fstype` ("autofs", ...) at `mnt`.
bool IsMountOfType(const std::string& mnt, std::string_view fstype);
// The file system type of the topmost mount at `mnt` ("tmpfs"), if any.
std::optional<std::string> MountTypeAt(const std::string& mnt);
// The user the igtcache mount at `mnt` belongs to (its `user_id=` option in
// /proc/self/mounts), if listed.
std::optional<uid_t> IgtcacheMountOwner(const std::string& mnt);
// The mount point of the igtcache mount containing `path`, if any. The
// path as given: see ResolveSymlinks for one through symlinks.
std::optional<std::string> FindIgtcacheMount(const std::string& path);
// `path` normalized with its symlinks resolved, for when it does not name a
// mount as given (/proc/self/mounts lists real paths). Stats no mount point
// it can tell is one (a hung daemon would hang the caller).
std::string ResolveSymlinks(const std::string& path);
// Reads and parses MNT/.igtcache.stats; errors name the mount point. In a
// child process, given kStatsWaitS: a daemon that does not answer is an
// error, not a wait for good.
inline constexpr double kStatsWaitS = 10;
Result<nlohmann::json> ReadStats(const std::string& mountpoint);
// The same, in this process (already a child of RunWithin's).
Result<nlohmann::json> ReadStatsHere(const std::string& mountpoint);
// Runs `work` in a child process and returns what it returned, or nullopt
// when it has not ended within `limit_s`: every call on a mount whose
// daemon does not answer waits for it, and only SIGKILL ends that wait
// (the child is killed, and left behind if even that does not end it).
std::optional<std::string> RunWithin(const std::function<std::string()>& work, double limit_s);

// --- igtcache stats MOUNTPOINT [--json] [--watch [--interval S]]
struct StatsArgs {
  std::string mountpoint;
  bool json = false;         // also implied when stdout is not a terminal
  bool watch = false;
  double interval_s = 2.0;   // --watch refresh period
};
int RunStats(const StatsArgs& a);
// The readable table (exposed for tests). `prev`/`dt_s` give rates when set.
// Unlabelled streams that hold nothing are left out. At most
// `max_stream_rows` stream rows, those holding the most bytes, in their
// order (the rest counted in one line); paths cut to their end so that a
// row fits `max_cols` columns (--watch fits the terminal).
std::string StatsTable(const nlohmann::json& j, const nlohmann::json* prev, double dt_s,
                       size_t max_stream_rows = SIZE_MAX, size_t max_cols = SIZE_MAX);

// --- igtcache warm PATH... [--jobs N]
struct WarmArgs {
  std::vector<std::string> paths;
  int jobs = 8;
  bool progress = true;  // progress output (bar on a terminal, lines otherwise)
};
int RunWarm(const WarmArgs& a);

// --- igtcache unmount MOUNTPOINT [--lazy] [--timeout S]
struct UnmountArgs {
  std::string mountpoint;
  bool lazy = false;
  double timeout_s = 30;  // wait this long for the daemon to exit
};
int RunUnmount(const UnmountArgs& a);

// --- mount(8) helper. Recognises
//   mount.fuse.igtcache SOURCE MOUNTPOINT [-sfnv] [-o OPTS] [-t TYPE]   (argv[0] name)
//   igtcache SOURCE MOUNTPOINT [-o OPTS]                               (from mount.fuse3)
// Returns nullopt when argv is not a helper call (normal CLI). -o options:
// igtcache's own (config=, cache_dir=, cache_size=, endpoint=, region=,
// profile=, addressing=, log_level=, log_file=, metrics_addr=, trace_out=),
// mount(8)/systemd bookkeeping (defaults, auto, noauto, user, users, nouser,
// nofail, _netdev, rw, ro, comment=, x-*) dropped, everything else passed to
// FUSE (allow_other, nodev, ...).
struct HelperCall {
  MountArgs mount;
  bool fake = false;  // -f: do everything but mount (mount(8) "fake")
  // Said on stderr before the mount: an option of ours given twice (the
  // last wins, as mount(8) merges fstab's options and the command line's).
  std::vector<std::string> warnings;
};
std::optional<Result<HelperCall>> ParseMountHelper(const std::vector<std::string>& argv);

// "a,b,,c" -> {"a", "b", "", "c"} (mount -o option lists).
std::vector<std::string> SplitComma(const std::string& s);
// For an option of the mount(8) helper (cache_size=10G, ...): the
// `igtcache mount` flag that does the same (--cache-size); nullopt for
// others (FUSE's).
std::optional<std::string> HelperOptionFlag(std::string_view opt);
// fstab's and systemd's own options (nofail, _netdev, noauto, x-*, ...):
// nothing to igtcache or FUSE; the helper and `igtcache mount -o` drop them.
bool MountBookkeepingOption(const std::string& o);

}  // namespace igt
