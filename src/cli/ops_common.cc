// Helpers shared by the operator commands (see ops_cmds.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "fuse/fuse_fs.h"
#include "src/cli/ops_cmds.h"

namespace igt {

std::string Escaped(std::string_view text) {
  std::string out;
  AppendEscaped(text, out);
  return out;
}

void PrintError(std::string_view message) {
  std::fprintf(stderr, "igtcache: error: %s\n", Escaped(message).c_str());
}

namespace fs = std::filesystem;

std::string NormalizeMountpoint(const std::string& path) {
  std::error_code ec;
  std::string p = fs::absolute(path, ec).lexically_normal().string();
  if (ec) p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

namespace {
// /proc/self/mounts escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      o += s[i];
    }
  }
  return o;
}
}  // namespace

namespace {
// The options field of a mount of `fstype` (any type if empty, its type
// then in `*type_out`) at `mnt`: the last one listed (the mount on top of
// any others of that type there).
std::optional<std::string> MountOptions(const std::string& mnt, std::string_view fstype,
                                        std::string* type_out = nullptr) {
  std::ifstream in("/proc/self/mounts");
  std::string line;
  std::optional<std::string> found;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string dev, dir, type, opts;
    if (ls >> dev >> dir >> type >> opts && (fstype.empty() || type == fstype) && Unescape(dir) == mnt) {
      found = opts;
      if (type_out) *type_out = type;
    }
  }
  return found;
}
}  // namespace

std::optional<std::string> MountTypeAt(const std::string& mnt) {
  std::string type;
  if (!MountOptions(mnt, "", &type)) return std::nullopt;
  return type;
}

bool IsMountOfType(const std::string& mnt, std::string_view fstype) { return MountOptions(mnt, fstype).has_value(); }

std::optional<uid_t> IgtcacheMountOwner(const std::string& mnt) {
  const auto opts = MountOptions(mnt, "fuse.igtcache");
  if (!opts) return std::nullopt;
  std::istringstream ls(*opts);
  for (std::string o; std::getline(ls, o, ',');)
    if (o.starts_with("user_id=")) {
      char* end = nullptr;
      const unsigned long uid = std::strtoul(o.c_str() + 8, &end, 10);
      if (end != o.c_str() + 8 && *end == '\0') return static_cast<uid_t>(uid);
    }
  return std::nullopt;
}

bool IsIgtcacheMount(const std::string& mnt) { return IsMountOfType(mnt, "fuse.igtcache"); }

std::string ResolveSymlinks(const std::string& path) {
  // Not fs::canonical(path): it would stat the last component, and if that
  // is the mount point of a hung daemon, hang. The parent is resolved unless
  // it is inside a mount (as given), the last component only read as a link
  // (lstat, readlink), and a mount point is never stat'ed. (A mount reached
  // through a symlink in the parent is stat'ed: its real path is not known
  // before.)
  fs::path p = NormalizeMountpoint(path);
  std::error_code ec;
  for (int hops = 0; hops < 40; ++hops) {  // as the kernel's MAXSYMLINKS
    if (IsIgtcacheMount(p.string()) || p.filename().empty()) return p.string();
    // A parent inside a mount: resolving it would stat that mount's root.
    if (FindIgtcacheMount(p.parent_path().string())) return p.string();
    const fs::path parent = fs::canonical(p.parent_path(), ec);
    if (ec) return p.string();
    const fs::path q = parent / p.filename();
    if (IsIgtcacheMount(q.string())) return q.string();
    if (!fs::is_symlink(fs::symlink_status(q, ec)) || ec) return q.string();
    const fs::path target = fs::read_symlink(q, ec);
    if (ec) return q.string();
    p = NormalizeMountpoint((target.is_absolute() ? target : parent / target).string());
  }
  return p.string();
}

std::optional<std::string> FindIgtcacheMount(const std::string& path) {
  fs::path p = NormalizeMountpoint(path);
  while (true) {
    if (IsIgtcacheMount(p.string())) return p.string();
    if (!p.has_parent_path() || p.parent_path() == p) return std::nullopt;
    p = p.parent_path();
  }
}

std::optional<std::string> RunWithin(const std::function<std::string()>& work, double limit_s) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return work();
  const pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return work();
  }
  if (child == 0) {
    close(fds[0]);
    const std::string out = work();
    for (size_t off = 0; off < out.size();) {
      const ssize_t n = write(fds[1], out.data() + off, out.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  bool eof = false;
  while (!eof) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fds[0], POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) eof = true;
    else got.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (!eof) kill(child, SIGKILL);
  // Reaped if it goes within a second. A request the daemon has taken and
  // sits on keeps the child waiting whatever the signal (the kernel waits
  // it out): then it is left behind (init reaps it once this command ends,
  // or once the daemon answers), not waited for.
  int st = 0;
  const auto reap_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (true) {
    const pid_t w = waitpid(child, &st, WNOHANG);
    if (w == child || (w < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= reap_until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!eof) return std::nullopt;
  return got;
}

Result<nlohmann::json> ReadStatsHere(const std::string& mountpoint) {
  const std::string mnt = NormalizeMountpoint(mountpoint);
  const std::string path = mnt + "/" + kStatsFileName;
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    if (!IsIgtcacheMount(mnt)) {
      std::error_code ec;
      if (!fs::exists(mnt, ec) && !ec) return Err(Status::NotFound(fmt::format("'{}' does not exist", mountpoint)));
      return Err(Status::NotFound(fmt::format("'{}' is not an igtcache mount point", mountpoint)));
    }
    // FUSE refuses every other user, root too, on a mount without allow_other.
    if (err == EACCES || err == EPERM)
      return Err(Status::PermissionDenied(fmt::format(
          "'{}' is an igtcache mount of another user (mounted without allow_other): {}", mountpoint,
          std::strerror(err))));
    return Err(Status::Unavailable(fmt::format("igtcache mount point '{}' does not answer ({}: {}); is the daemon alive?",
                                               mountpoint, path, std::strerror(err))));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    auto j = nlohmann::json::parse(ss.str());
    if (!j.is_object()) throw std::runtime_error("not an object");
    return j;
  } catch (const std::exception& e) {
    return Err(Status::Corruption(fmt::format("'{}': unreadable stats ({})", mountpoint, e.what())));
  }
}

Result<nlohmann::json> ReadStats(const std::string& mountpoint) {
  // In a child, given kStatsWaitS: a daemon that does not answer (stopped,
  // hung) held `igtcache stats` and `warm` for good (a new user's finding).
  // The child sends "K" and the stats, or "E", the error's code and message.
  auto out = RunWithin(
      [&] {
        auto j = ReadStatsHere(mountpoint);
        if (j) return "K" + j->dump();
        return fmt::format("E{} {}", static_cast<int>(j.error().code()), j.error().message());
      },
      kStatsWaitS);
  if (!out)
    return Err(Status::Unavailable(fmt::format("igtcache mount point '{}' does not answer within {:.0f} s (its daemon "
                                               "stopped or hung?)",
                                               mountpoint, kStatsWaitS)));
  if (out->starts_with("K")) {
    try {
      return nlohmann::json::parse(out->substr(1));
    } catch (const std::exception& e) {
      return Err(Status::Corruption(fmt::format("'{}': unreadable stats ({})", mountpoint, e.what())));
    }
  }
  int code = static_cast<int>(Code::kInternal), used = 0;
  if (out->starts_with("E") && std::sscanf(out->c_str() + 1, "%d %n", &code, &used) >= 1)
    return Err(Status(static_cast<Code>(code), out->substr(1 + static_cast<size_t>(used))));
  return Err(Status::Internal(fmt::format("'{}': the stats reader ended without an answer", mountpoint)));
}

}  // namespace igt
