// `igtcache unmount MOUNTPOINT`: fusermount3 -u (-uz with --lazy), then waits
// for the daemon to exit so that callers (systemd ExecStop, scripts) know the
// cache is flushed and unlocked when it returns.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "fuse/fuse_fs.h"
#include "src/cli/ops_cmds.h"

namespace igt {
namespace {

// Runs argv, returns (exit status, stderr text).
std::pair<int, std::string> Run(const std::vector<std::string>& args) {
  int p[2];
  if (pipe(p) != 0) return {-1, "pipe failed"};
  pid_t pid = fork();
  if (pid < 0) return {-1, "fork failed"};
  if (pid == 0) {
    dup2(p[1], STDERR_FILENO);
    close(p[0]);
    close(p[1]);
    std::vector<char*> av;
    for (const auto& s : args) av.push_back(const_cast<char*>(s.c_str()));
    av.push_back(nullptr);
    execvp(av[0], av.data());
    std::fprintf(stderr, "cannot run %s", av[0]);
    _exit(127);
  }
  close(p[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) err.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, err};
}

std::string UserName(uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  return pw ? fmt::format("{}, uid {}", pw->pw_name, uid) : fmt::format("uid {}", uid);
}

bool Alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie (exited, not yet reaped by its parent) counts as gone.
  FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (!f) return false;
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  auto rp = s.rfind(')');
  return !(rp != std::string::npos && rp + 2 < s.size() && s[rp + 2] == 'Z');
}

// What the mount's daemon says of itself: its pid (or why it is unknown),
// or that it is gone (a daemon that died leaves the mount answering
// ENOTCONN).
struct DaemonProbe {
  bool answered = true;  // false: no answer within the probe's time
  bool gone = false;
  pid_t pid = 0;
  std::string no_pid;  // why the pid is unknown
};

DaemonProbe AskDaemon(const std::string& mnt) {
  DaemonProbe p;
  // The mount point's own attributes may still be in the kernel's cache
  // (a stat just before the kill): opening the stats file asks the daemon.
  struct stat mst {};
  p.gone = ::stat(mnt.c_str(), &mst) != 0 && errno == ENOTCONN;
  if (!p.gone) {
    const int fd = ::open((mnt + "/" + kStatsFileName).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
    else p.gone = errno == ENOTCONN;
  }
  if (auto j = ReadStatsHere(mnt)) {  // already in a child (ProbeDaemon)
    p.pid = static_cast<pid_t>(j->value("pid", int64_t{0}));
    if (p.pid <= 0) p.no_pid = "its stats name no pid";
  } else {
    p.no_pid = j.error().message();
  }
  return p;
}

// AskDaemon in a child process, given `limit_s`: every call on a mount
// whose daemon does not answer (stopped, deadlocked) waits for it, and
// only SIGKILL ends the wait. Before, unmount hung there for good, its
// --timeout and --lazy unused (a systemd ExecStop or a Kubernetes preStop
// until their own limits).
DaemonProbe ProbeDaemon(const std::string& mnt, double limit_s) {
  auto got = RunWithin(
      [&] {
        const DaemonProbe p = AskDaemon(mnt);
        return fmt::format("{} {} {}", p.gone ? 1 : 0, static_cast<int64_t>(p.pid), p.no_pid);
      },
      limit_s);
  DaemonProbe p;
  int gone = 0;
  long long pid = 0;
  int used = 0;
  if (!got || std::sscanf(got->c_str(), "%d %lld %n", &gone, &pid, &used) < 2) {
    p.answered = false;
    p.no_pid = "it does not answer";
    return p;
  }
  p.gone = gone != 0;
  p.pid = static_cast<pid_t>(pid);
  p.no_pid = got->substr(std::min(got->size(), static_cast<size_t>(used)));
  return p;
}

}  // namespace

int RunUnmount(const UnmountArgs& a) {
  std::string mnt = NormalizeMountpoint(a.mountpoint);
  if (!IsIgtcacheMount(mnt)) mnt = ResolveSymlinks(mnt);  // a symlink to the mount point
  if (!IsIgtcacheMount(mnt)) {
    struct stat st {};
    // A path inside a mount names that mount (asked first: a stat of it
    // would wait for that mount's daemon).
    if (auto outer = FindIgtcacheMount(mnt))
      std::fprintf(stderr, "igtcache: error: '%s' is not a mount point; it is inside the igtcache mount '%s'\n",
                   igt::Escaped(a.mountpoint).c_str(), outer->c_str());
    else if (::lstat(mnt.c_str(), &st) != 0 && errno == ENOENT)
      std::fprintf(stderr, "igtcache: error: '%s' does not exist\n", igt::Escaped(a.mountpoint).c_str());
    else if (auto type = MountTypeAt(mnt))  // it said "not mounted" (a tester's tmpfs)
      std::fprintf(stderr, "igtcache: error: '%s' is not an igtcache mount (it is a %s mount; unmount it with "
                   "umount)\n", igt::Escaped(a.mountpoint).c_str(), type->c_str());
    else
      std::fprintf(stderr, "igtcache: error: '%s' is not mounted (no igtcache mount there)\n", igt::Escaped(a.mountpoint).c_str());
    return kExitError;
  }
  // A daemon that died (killed, crashed) leaves its mount answering ENOTCONN:
  // unmounting it is all there is to do, and nothing holds the cache dir.
  // One that does not answer within half the --timeout (0.5 to 10 s) is
  // unmounted without waiting for it: its pid is unknown.
  const DaemonProbe probe = ProbeDaemon(mnt, std::clamp(a.timeout_s / 2, 0.5, 10.0));
  const bool daemon_gone = probe.gone;
  const pid_t pid = probe.pid;
  const std::string& no_pid = probe.no_pid;
  if (!probe.answered)
    std::fprintf(stderr,
                 "igtcache: warning: the daemon of '%s' does not answer (stopped or hung?); unmounting anyway, "
                 "lazily: files still open on it stay open, and keep the daemon, until closed\n",
                 igt::Escaped(a.mountpoint).c_str());
  // "Busy" a moment after the last file on the mount was closed (this
  // command's own stats file among them) can pass: asked again for up to
  // 2 s (within --timeout) before it is an error. A file really held open
  // stays busy and is named below.
  const auto busy_until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(2.0, std::max(0.0, a.timeout_s)));
  // A daemon that does not answer: lazily (the probe's child may still hold
  // a request on the mount, which makes it busy).
  const bool lazy = a.lazy || !probe.answered;
  auto [rc, err] = Run({"fusermount3", lazy ? "-uz" : "-u", mnt});
  while (rc != 0 && err.find("busy") != std::string::npos && std::chrono::steady_clock::now() < busy_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::tie(rc, err) = Run({"fusermount3", lazy ? "-uz" : "-u", mnt});
  }
  if (rc != 0) {
    std::string why = err.empty() ? fmt::format("fusermount3 exited {}", rc) : err;
    // fusermount3 looks only at the caller's own mounts ("entry for ... not
    // found in /etc/mtab"): a mount of another user is named as such.
    if (const auto owner = IgtcacheMountOwner(mnt); owner && *owner != ::getuid() && ::getuid() != 0)
      why = fmt::format("it is a mount of another user ({}): only that user or root can unmount it", UserName(*owner));
    if (err.find("busy") != std::string::npos)
      why += " (files open or a process has its working directory there; close them, or use --lazy)";
    std::fprintf(stderr, "igtcache: error: cannot unmount '%s': %s\n", igt::Escaped(a.mountpoint).c_str(), why.c_str());
    return kExitError;
  }
  if (a.timeout_s <= 0) return kExitOk;  // --timeout 0: unmounted, the daemon's exit not waited for
  if (!no_pid.empty() && !daemon_gone) {
    // E.g. root unmounting another user's mount without allow_other: FUSE
    // denies root the stats file. Unmounted, but whether the daemon has
    // flushed and released the cache dir is unknown: not a plain success.
    std::fprintf(stderr,
                 "igtcache: warning: unmounted '%s', but cannot wait for its daemon to exit (%s); its cache dir "
                 "stays locked until it does\n",
                 igt::Escaped(a.mountpoint).c_str(), no_pid.c_str());
    return kExitError;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.timeout_s);
  while (Alive(pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (Alive(pid)) {
    std::fprintf(stderr, "igtcache: warning: unmounted '%s', but daemon pid %d is still running after %.0f s%s\n",
                 igt::Escaped(a.mountpoint).c_str(), static_cast<int>(pid), a.timeout_s,
                 a.lazy ? " (after a lazy unmount it serves the files still open until they are closed; "
                          "kill -TERM it to end it now)"
                        : "");
    return kExitError;
  }
  return kExitOk;
}

}  // namespace igt
