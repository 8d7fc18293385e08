#include "src/cache/cache_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "src/cache/unit_file.h"

namespace igt::cache {

std::string ErrnoText(int err) { return std::strerror(err); }

Status MakeDirIfMissing(const std::string& path) {
  if (::mkdir(path.c_str(), kDirMode) == 0) {
    if (::chmod(path.c_str(), kDirMode) != 0) {
      return Status::IoError(fmt::format("cannot chmod {}: {}", path, ErrnoText(errno)));
    }
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::Ok();
  const int err = errno;
  return Status(err == EACCES || err == EPERM ? Code::kPermissionDenied
                : err == EROFS                ? Code::kReadOnly
                : err == ENOSPC || err == EDQUOT ? Code::kNoSpace
                                              : Code::kIoError,
                fmt::format("cannot create directory {}: {}", path, ErrnoText(err)));
}

Status EnsureCacheDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("cache dir is empty");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return Status::IoError(fmt::format("cannot access cache dir {}: {}", dir, ErrnoText(errno)));
    }
    // Create missing components one by one, each 0700.
    std::filesystem::path p(dir);
    std::filesystem::path cur;
    for (const auto& part : p) {
      cur /= part;
      if (cur == cur.root_path()) continue;
      struct stat cst {};
      if (::stat(cur.c_str(), &cst) == 0) continue;
      auto s = MakeDirIfMissing(cur.string());
      if (!s.ok()) {
        return Status(s.code(), fmt::format("cannot create cache dir {}: {}", dir, s.message()));
      }
    }
    if (::stat(dir.c_str(), &st) != 0) {
      return Status::IoError(fmt::format("cannot access cache dir {}: {}", dir, ErrnoText(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(fmt::format("cache dir {} is not a directory", dir));
  if (st.st_uid != ::geteuid()) {
    return Status::PermissionDenied(
        fmt::format("cache dir {} is owned by uid {}, not by this user (uid {}); refusing to use it", dir,
                    st.st_uid, ::geteuid()));
  }
  // Writable by others (world or group): they could swap units/ for a tree
  // of their own, and unit checksums are not keyed, so planted units would
  // be served as the bucket's bytes.
  if (st.st_mode & (S_IWOTH | S_IWGRP)) {
    return Status::PermissionDenied(fmt::format(
        "cache dir {} is {}-writable (mode {:o}); refusing to use it (chmod 700 it or pick another dir)", dir,
        (st.st_mode & S_IWOTH) ? "world" : "group", st.st_mode & 07777));
  }
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Status::PermissionDenied(fmt::format("cache dir {} is not writable: {}", dir, ErrnoText(errno)));
  }
  return Status::Ok();
}

Status EnsurePrivateSubdir(const std::string& path) {
  if (auto s = MakeDirIfMissing(path); !s.ok()) return s;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {  // a symlink is not followed: not a directory of ours
    return Status::IoError(fmt::format("cannot access {}: {}", path, ErrnoText(errno)));
  }
  if (S_ISLNK(st.st_mode))
    return Status::InvalidArgument(fmt::format(
        "{} is a symbolic link, not a directory: links in the cache dir are not followed (make the cache dir "
        "itself the link, or point cache.dir at the target)",
        path));
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(fmt::format("{} is not a directory", path));
  if ((st.st_mode & 07777) != kDirMode && ::chmod(path.c_str(), kDirMode) != 0) {
    return Status::PermissionDenied(fmt::format("cannot chmod {} to 0700: {}", path, ErrnoText(errno)));
  }
  return Status::Ok();
}

Result<int> LockCacheDir(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kFileMode);  // never truncate a link's target
  if (fd < 0) {
    const int err = errno;
    return Err(Status(err == EACCES ? Code::kPermissionDenied : Code::kIoError,
                      fmt::format("cannot open lock file {}: {}", path, ErrnoText(err))));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string pid = "unknown";
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) {
      pid.assign(buf, static_cast<size_t>(n));
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    }
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Err(Status::Busy(fmt::format("cache dir {} is in use by another igtcache process (pid {})", dir, pid)));
    }
    return Err(Status::IoError(fmt::format("cannot lock {}: {}", path, ErrnoText(err))));
  }
  (void)::fchmod(fd, kFileMode);
  const std::string me = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    // The flock is the lock; the pid in the file only names the holder in
    // another process's message. A volume full or over its quota refused
    // it, and with it a remount that would have made room (a tester's btrfs
    // qgroup: "cannot write lock file ...: Disk quota exceeded").
    if (err != ENOSPC && err != EDQUOT) {
      ::close(fd);
      return Err(Status::IoError(fmt::format("cannot write lock file {}: {}", path, ErrnoText(err))));
    }
  }
  return fd;
}

namespace {

// Whether `path` is a regular file (not a link) that starts as a unit file
// does (kUnitMagic).
bool IsUnitFile(const std::filesystem::directory_entry& e) {
  std::error_code ec;
  if (e.is_symlink(ec) || !e.is_regular_file(ec) || ec) return false;
  const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char magic[sizeof kUnitMagic] = {};
  const bool ok = ::pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
                  std::memcmp(magic, kUnitMagic, sizeof magic) == 0;
  ::close(fd);
  return ok;
}

// Whether `path` (tmp/ or units/) holds nothing but igtcache's unit files:
// in tmp/ directly, in units/ in fan-out directories named by a hex pair. A
// cache dir deleted with `rm -rf` while mounted can keep a few: the daemon
// moved a unit into units/xx/ while rm was emptying it, so rm could not
// remove it, and the next mount refused the dir as not igtcache's (a
// tester's finding). At most kMaxFiles are looked at.
bool OnlyUnitFiles(const std::filesystem::path& path, bool fanout) {
  constexpr size_t kMaxFiles = 10000;
  size_t seen = 0;
  std::error_code ec;
  auto only_units = [&](const std::filesystem::path& d) {
    for (auto it = std::filesystem::directory_iterator(d, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
      if (++seen > kMaxFiles || !IsUnitFile(*it)) return false;
    return !ec;
  };
  if (!fanout) return only_units(path);
  for (auto it = std::filesystem::directory_iterator(path, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code sec;
    const bool hex_pair = name.size() == 2 && std::isxdigit(static_cast<unsigned char>(name[0])) &&
                          std::isxdigit(static_cast<unsigned char>(name[1]));
    if (!hex_pair || it->is_symlink(sec) || !it->is_directory(sec) || sec || !only_units(it->path())) return false;
  }
  return !ec;
}

}  // namespace

Status ClaimCacheDir(const std::string& dir) {
  const std::string marker = dir + "/" + kMarkerName;
  struct stat st {};
  if (::lstat(marker.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return Status::InvalidArgument(fmt::format("{} is not a regular file; is {} a cache dir?", marker, dir));
    return Status::Ok();
  }
  if (errno != ENOENT) return Status::IoError(fmt::format("cannot access {}: {}", marker, ErrnoText(errno)));
  // A cache dir of a version before the marker: its RocksDB index and LOCK.
  const bool legacy = ::lstat((dir + "/index/CURRENT").c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                      ::lstat((dir + "/LOCK").c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (!legacy) {
    // Else nothing but what a first start leaves (an empty tmp/ or units/,
    // or ones holding only unit files, the lock, the log): the store deletes what it does not know in tmp/
    // and units/, so a directory of the user's is never taken over.
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code sec;
      // tmp/ or units/, empty or holding only unit files (OnlyUnitFiles).
      const bool unit_dir = (name == "tmp" || name == "units") && !it->is_symlink(sec) &&
                             it->is_directory(sec) && !sec && OnlyUnitFiles(it->path(), name == "units");
      // A volume's own lost+found (the cache dir at the root of a volume of
      // its own): never touched by the store.
      if (name == "lost+found" && !it->is_symlink(sec) && it->is_directory(sec) && !sec) continue;
      if (unit_dir || ((name == "LOCK" || name == "igtcache.log") && it->is_regular_file(sec) && !sec)) continue;
      return Status::InvalidArgument(fmt::format(
          "cache dir {} holds '{}', which igtcache did not write, and no {} file: refusing to use it (igtcache "
          "deletes what it does not know in its cache dir); give an empty or new directory, e.g. {}/igtcache-cache",
          dir, name, kMarkerName, dir));
    }
    if (ec) return Status::IoError(fmt::format("cannot list cache dir {}: {}", dir, ec.message()));
  }
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kFileMode);
  if (fd < 0 && errno != EEXIST) {
    const int err = errno;
    return Status(err == ENOSPC ? Code::kNoSpace : err == EROFS ? Code::kReadOnly : Code::kIoError,
                  fmt::format("cannot create {}: {}", marker, ErrnoText(err)));
  }
  if (fd >= 0) {
    static constexpr char kText[] = "An igtcache cache dir: igtcache owns everything in it.\n";
    const bool ok = ::write(fd, kText, sizeof kText - 1) == static_cast<ssize_t>(sizeof kText - 1);
    const int err = errno;
    ::close(fd);
    if (!ok) {
      ::unlink(marker.c_str());
      return Status::IoError(fmt::format("cannot write {}: {}", marker, ErrnoText(err)));
    }
  }
  return Status::Ok();
}

Status ClearDir(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    std::error_code rec;
    std::filesystem::remove_all(it->path(), rec);
    if (rec) return Status::IoError(fmt::format("cannot remove {}: {}", it->path().string(), rec.message()));
  }
  if (ec) return Status::IoError(fmt::format("cannot list {}: {}", dir, ec.message()));
  return Status::Ok();
}

}  // namespace igt::cache
