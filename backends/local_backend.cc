// The local-directory backend (file://). See local_backend.h.

#include "backends/local_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "igtcache/backends.h"

namespace igt {
namespace local {

Status ValidateKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("empty key");
  if (key.find('\0') != std::string_view::npos) return Status::InvalidArgument("key contains NUL");
  if (key.front() == '/') return Status::InvalidArgument("absolute key '" + std::string(key) + "'");
  size_t pos = 0;
  while (pos <= key.size()) {
    size_t slash = key.find('/', pos);
    std::string_view seg = key.substr(pos, slash == std::string_view::npos ? key.npos : slash - pos);
    if (seg == "..") return Status::InvalidArgument("key '" + std::string(key) + "' has a '..' segment");
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  return Status::Ok();
}

std::string Etag(uint64_t size, int64_t mtime_ns, uint64_t inode, int64_t btime_ns) {
  return fmt::format("{:x}-{:x}-{:x}-{:x}", size, static_cast<uint64_t>(mtime_ns), inode,
                     static_cast<uint64_t>(btime_ns));
}

namespace {

// Recursive listings stop descending past this depth (guards symlink loops
// that the (dev, inode) ancestor check cannot see, e.g. across bind mounts).
constexpr int kMaxDepth = 256;

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

std::string EtagOf(const struct stat& st, int64_t btime_ns) {
  return Etag(static_cast<uint64_t>(st.st_size), MtimeNs(st), st.st_ino, btime_ns);
}

// Birth time in ns of `path` (statx's arguments), 0 where the file system
// keeps none.
int64_t BirthNs(int dirfd, const char* path, int flags) {
  struct statx sx {};
  if (::statx(dirfd, path, flags, STATX_BTIME, &sx) != 0 || !(sx.stx_mask & STATX_BTIME)) return 0;
  return static_cast<int64_t>(sx.stx_btime.tv_sec) * 1000000000LL + sx.stx_btime.tv_nsec;
}

Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(msg);
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(msg);
    default:
      return Status::IoError(msg);
  }
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// One entry of a directory listing, in S3 key order.
struct Entry {
  std::string key;  // full key; directories end with '/'
  bool dir = false;
  struct stat st {};
  int64_t btime_ns = 0;  // files: birth time (BirthNs), for the ETag
  std::string data_key;  // files reached through a link: the target's key (ObjectInfo::data_key)
};

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(std::string root) : root_(std::move(root)) {}

  Result<ListPage> List(const ListRequest& req) override {
    if (!req.delimiter.empty() && req.delimiter != "/") {
      return Err(Status::NotSupported("local backend lists with delimiter '/' or '' only"));
    }
    if (req.prefix.find('\0') != std::string::npos || req.prefix.starts_with("/")) {
      return Err(Status::InvalidArgument("bad list prefix '" + req.prefix + "'"));
    }
    if (!req.prefix.empty()) {
      if (auto s = ValidateKey(req.prefix); !s.ok()) return Err(s);
    }
    // The source directory itself gone (renamed, deleted, its file system
    // unmounted) is an outage, not an empty bucket: the mount keeps serving
    // its stale listings and cached data (as for an S3 outage) instead of
    // showing an empty tree.
    if (RootGone()) return Err(Gone());
    const size_t max_keys = static_cast<size_t>(std::max(req.max_keys, 1));
    // Split "a/b/na" into directory "a/b/" and name filter "na".
    auto slash = req.prefix.rfind('/');
    std::string dir = slash == std::string::npos ? "" : req.prefix.substr(0, slash + 1);
    std::string name_filter = slash == std::string::npos ? req.prefix : req.prefix.substr(slash + 1);

    ListPage page;
    std::vector<Entry> out;
    const std::string& token = req.continuation_token;
    if (req.delimiter.empty()) {
      auto s = Walk(dir, name_filter, token, max_keys + 1, 0, out);
      if (!s.ok()) return Err(s);
    } else {
      auto entries = SortedDir(dir, name_filter, token);
      if (!entries) return Err(entries.error());
      const auto& all = **entries;
      auto it = token.empty() ? all.begin()
                              : std::upper_bound(all.begin(), all.end(), token,
                                                 [](const std::string& t, const Entry& e) { return t < e.key; });
      for (; it != all.end() && out.size() <= max_keys; ++it) out.push_back(*it);
      if (out.size() <= max_keys) ForgetPages(dir, name_filter);  // the last page
    }
    if (out.size() > max_keys) {
      out.resize(max_keys);
      page.next_token = out.back().key;
    }
    for (auto& e : out) {
      if (e.dir) {
        page.prefixes.push_back(std::move(e.key));
      } else {
        page.objects.push_back(Info(std::move(e.key), e.st, e.btime_ns));
        page.objects.back().data_key = std::move(e.data_key);
      }
    }
    return page;
  }

  Result<ObjectInfo> Stat(const std::string& key) override {
    int fd = -1;
    std::string real;
    if (auto s = OpenKey(key, &fd, &real); !s.ok()) return Err(s);
    FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Err(ErrnoStatus(errno, "fstat '" + key + "'"));
    ObjectInfo info = Info(key, st, BirthNs(fd, "", AT_EMPTY_PATH));
    info.data_key = DataKey(key, real);  // realpath once (it was resolved again here)
    return info;
  }

  Result<size_t> Read(const std::string& key, uint64_t offset, size_t length, std::string_view etag,
                      char* out) override {
    int fd = -1;
    if (auto s = OpenKey(key, &fd); !s.ok()) return Err(s);
    FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Err(ErrnoStatus(errno, "fstat '" + key + "'"));
    const int64_t btime_ns = BirthNs(fd, "", AT_EMPTY_PATH);  // one file: the same after
    std::string before = EtagOf(st, btime_ns);
    if (!etag.empty() && before != etag) {
      return Err(Status::Changed("file '" + key + "' changed: ETag " + before + ", expected " +
                                 std::string(etag)));
    }
    size_t done = 0;
    while (done < length) {
      ssize_t n = ::pread(fd, out + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Err(ErrnoStatus(errno, "read '" + key + "'"));
      }
      if (n == 0) break;  // EOF
      done += static_cast<size_t>(n);
    }
    // A write during the read would leave a mix of versions: check again.
    if (!etag.empty()) {
      if (::fstat(fd, &st) != 0) return Err(ErrnoStatus(errno, "fstat '" + key + "'"));
      std::string after = EtagOf(st, btime_ns);
      if (after != before) {
        return Err(Status::Changed("file '" + key + "' changed while being read"));
      }
    }
    return done;
  }

  Status Probe() override {
    struct stat st {};
    if (::stat(root_.c_str(), &st) != 0) return ErrnoStatus(errno, "source directory " + root_);
    if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("source " + root_ + " is not a directory");
    DIR* d = ::opendir(root_.c_str());
    if (!d) return ErrnoStatus(errno, "cannot list source directory " + root_);
    ::closedir(d);
    return Status::Ok();
  }

  std::string Describe() const override { return "file://" + root_; }

 private:
  static ObjectInfo Info(std::string key, const struct stat& st, int64_t btime_ns) {
    ObjectInfo info;
    info.key = std::move(key);
    info.size = static_cast<uint64_t>(st.st_size);
    info.mtime_ns = MtimeNs(st);
    info.etag = EtagOf(st, btime_ns);
    return info;
  }

  // True if `real` (a realpath) is the root or below it.
  bool Inside(const std::string& real) const {
    if (root_ == "/") return true;
    return real == root_ || (real.size() > root_.size() && real.starts_with(root_) &&
                             real[root_.size()] == '/');
  }

  // The key of `real` (a realpath inside the root) when it is not `key`
  // itself, else "" (ObjectInfo::data_key).
  std::string DataKey(const std::string& key, const std::string& real) const {
    std::string rel = root_ == "/" ? real.substr(1) : real.substr(std::min(real.size(), root_.size() + 1));
    return rel == key ? std::string() : rel;
  }

  // Resolves root/rel following symlinks; NotFound if it leaves the root.
  Result<std::string> Resolve(const std::string& rel) const {
    std::string path = root_ == "/" ? "/" + rel : root_ + "/" + rel;
    char buf[PATH_MAX];
    if (!::realpath(path.c_str(), buf)) {
      if (errno == ENAMETOOLONG)
        return Err(Status::IoError(fmt::format("'{}': its path in the source is {} bytes, longer than the system's "
                                               "limit ({}); it cannot be listed or read through a file:// source",
                                               rel, path.size(), PATH_MAX)));
      return Err(ErrnoStatus(errno, "'" + rel + "'"));
    }
    std::string real(buf);
    if (!Inside(real)) return Err(Status::NotFound("'" + rel + "' points outside the source root"));
    return real;
  }

  // Opens a key as a regular file inside the root. (A symlink swapped
  // between realpath and open could still race; the source is trusted to
  // not be adversarial while mounted, and O_NOFOLLOW closes the last hop.)
  // The source directory itself is gone (renamed, deleted): an outage, not
  // a missing object.
  bool RootGone() const {
    struct stat st {};
    return ::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode);
  }
  Status Gone() const { return Status::Unavailable("source directory " + root_ + " is gone (renamed or deleted?)"); }

  // `*real_out` (if given): the realpath opened, for Stat's data_key.
  Status OpenKey(const std::string& key, int* fd, std::string* real_out = nullptr) const {
    if (auto s = ValidateKey(key); !s.ok()) return s;
    if (key.back() == '/') return Status::NotFound("'" + key + "' is a prefix, not an object");
    auto real = Resolve(key);
    if (!real) return RootGone() ? Gone() : real.error();
    int f = ::open(real->c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (f < 0) {
      const int e = errno;
      return RootGone() ? Gone() : ErrnoStatus(e, "open '" + key + "'");
    }
    struct stat st {};
    if (::fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(f);
      return Status::NotFound("'" + key + "' is not a regular file");
    }
    *fd = f;
    if (real_out) *real_out = std::move(*real);
    return Status::Ok();
  }

  using DirIds = std::set<std::pair<dev_t, ino_t>>;

  // (dev, inode) of the root and of each directory on the path of `dir`
  // ("" or "a/b/", whose realpath is `dir_real`), as listed: the
  // directories a symlink in `dir` must not lead back to. (A recursive
  // listing needs no check of its own: each level's ReadDir hides them.)
  DirIds PathDirs(const std::string& dir, const std::string& dir_real) const {
    DirIds ids;
    struct stat st {};
    if (::stat(root_.c_str(), &st) == 0) ids.insert({st.st_dev, st.st_ino});
    for (size_t slash = dir.find('/'); slash + 1 < dir.size(); slash = dir.find('/', slash + 1)) {
      auto real = Resolve(dir.substr(0, slash));  // the directories above `dir`
      if (real && ::stat(real->c_str(), &st) == 0) ids.insert({st.st_dev, st.st_ino});
    }
    if (::stat(dir_real.c_str(), &st) == 0) ids.insert({st.st_dev, st.st_ino});
    return ids;
  }

  // Classifies one entry of a directory on the path of the directories
  // `path_dirs`, whose real path is `dir_real` if it is reached through a
  // link ("" if not); false if it is to be skipped.
  bool Classify(int dirfd, const DirIds& path_dirs, const std::string& rel_key, const char* name,
                const std::string& dir_real, Entry* e) const {
    struct stat st {};
    if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
    std::optional<int64_t> btime_ns;  // of the link's target
    // Each hidden entry told at debug level: a user missing a name can
    // find out why.
    auto hidden = [&](const char* why) {
      spdlog::debug("'{}' in the source is hidden: {}", rel_key, why);
      return false;
    };
    std::string real_path;  // a file's realpath when reached through a link (data_key)
    if (S_ISLNK(st.st_mode)) {
      auto real = Resolve(rel_key);
      if (!real) return hidden("a symbolic link that dangles or leads outside the source");
      if (::stat(real->c_str(), &st) != 0) return hidden("a symbolic link whose target cannot be read");
      if (S_ISREG(st.st_mode)) {
        btime_ns = BirthNs(AT_FDCWD, real->c_str(), 0);
        real_path = std::move(*real);
      }
      // A link to this directory or one above it on the listed path
      // ("loop -> .", "up -> ..", or a -> ../c beside c/d -> ../a) would
      // show an endless tree (loop/loop/...), each level with new inodes,
      // which find, du and `igtcache warm` cannot tell for a cycle.
      if (S_ISDIR(st.st_mode) && path_dirs.contains({st.st_dev, st.st_ino}))
        return hidden("a symbolic link to a directory above it (a loop)");
    }
    if (S_ISREG(st.st_mode)) {
      e->key = rel_key;
      e->dir = false;
      e->btime_ns = btime_ns ? *btime_ns : BirthNs(dirfd, name, AT_SYMLINK_NOFOLLOW);
      // Its bytes are another key's when it is a link, or in a directory
      // reached through one (dir_real is not the listed path): the names
      // share one cached copy (a Hugging Face cache's snapshots/ links and
      // its blobs/, read through both, were fetched and cached twice: a
      // tester's finding).
      if (real_path.empty() && !dir_real.empty()) real_path = (dir_real == "/" ? "" : dir_real) + "/" + name;
      if (!real_path.empty()) e->data_key = DataKey(rel_key, real_path);
    } else if (S_ISDIR(st.st_mode)) {
      e->key = rel_key + "/";
      e->dir = true;
    } else {
      return hidden("not a regular file or directory (a FIFO, socket or device)");
    }
    e->st = st;
    return true;
  }

  // Entries of directory `dir` ("" or "a/b/") whose names start with
  // `name_filter`, sorted by key bytes. A missing directory is empty.
  Result<std::vector<Entry>> ReadDir(const std::string& dir, const std::string& name_filter) const {
    std::vector<Entry> out;
    std::string path = root_;
    if (!dir.empty()) {
      auto real = Resolve(dir.substr(0, dir.size() - 1));
      if (!real) {
        if (real.error().code() == Code::kNotFound) return out;
        return Err(real.error());
      }
      path = *real;
    }
    DIR* d = ::opendir(path.c_str());
    if (!d) {
      if (errno == ENOENT || errno == ENOTDIR) return out;
      return Err(ErrnoStatus(errno, "cannot list '" + dir + "'"));
    }
    std::unique_ptr<DIR, int (*)(DIR*)> guard(d, &::closedir);
    const DirIds path_dirs = PathDirs(dir, path);
    // The directory's real path when it is reached through a link (its
    // files' bytes are under that path: Entry::data_key), else "".
    const std::string listed = dir.empty() ? root_ : (root_ == "/" ? "" : root_) + "/" + dir.substr(0, dir.size() - 1);
    const std::string linked_dir = path == listed ? std::string() : path;
    while (dirent* de = ::readdir(d)) {
      const char* name = de->d_name;
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
      if (!std::string_view(name).starts_with(name_filter)) continue;
      Entry e;
      if (Classify(::dirfd(d), path_dirs, dir + name, name, linked_dir, &e)) out.push_back(std::move(e));
    }
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
    return out;
  }

  // ReadDir for a listing's pages: the first page (no token) reads the
  // directory, and the entries of a directory longer than one page are kept
  // for its next pages (asked with a token within kPagesKept), which then
  // cost their own entries only. Each page read it whole before (with a
  // stat of every entry): a 200,000-file directory took 8 minutes to list.
  // Like an S3 listing's, its later pages show the directory as it was when
  // the listing began (unless they come after kPagesKept: read again).
  using Entries = std::shared_ptr<const std::vector<Entry>>;
  Result<Entries> SortedDir(const std::string& dir, const std::string& name_filter, const std::string& token) {
    const std::string key = dir + '\0' + name_filter;
    const auto now = std::chrono::steady_clock::now();
    if (!token.empty()) {
      std::lock_guard lk(pages_mu_);
      if (auto it = pages_.find(key); it != pages_.end() && now - it->second.at < kPagesKept) {
        it->second.at = now;
        return it->second.entries;
      }
    }
    auto read = ReadDir(dir, name_filter);
    if (!read) return Err(read.error());
    auto entries = std::make_shared<const std::vector<Entry>>(std::move(*read));
    std::lock_guard lk(pages_mu_);
    SweepPagesLocked(now);
    // Too many listings at once, or too many entries kept in all (a
    // 1,000,000-entry directory keeps ~200 MB): the least recently paged go,
    // never the one just read.
    pages_.erase(key);
    auto kept_entries = [&] {
      size_t n = entries->size();
      for (const auto& [k, p] : pages_) n += p.entries->size();
      return n;
    };
    while (!pages_.empty() && (pages_.size() >= kMaxKeptListings || kept_entries() > kMaxKeptEntries)) {
      auto oldest = std::min_element(pages_.begin(), pages_.end(),
                                     [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
      pages_.erase(oldest);
    }
    pages_[key] = Kept{entries, now};
    return entries;
  }
  void ForgetPages(const std::string& dir, const std::string& name_filter) {
    std::lock_guard lk(pages_mu_);
    pages_.erase(dir + '\0' + name_filter);
    SweepPagesLocked(std::chrono::steady_clock::now());  // an abandoned listing is not kept past kPagesKept
  }
  void SweepPagesLocked(std::chrono::steady_clock::time_point now) {
    std::erase_if(pages_, [&](const auto& p) { return now - p.second.at >= kPagesKept; });
  }
  static constexpr std::chrono::milliseconds kPagesKept{30'000};
  static constexpr size_t kMaxKeptListings = 16;
  static constexpr size_t kMaxKeptEntries = 2'000'000;
  struct Kept {
    Entries entries;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex pages_mu_;
  std::map<std::string, Kept> pages_;  // dir '\0' name filter -> its entries

  // Depth-first walk in key order, appending files with key > token until
  // `limit` are collected. Subtrees entirely <= token are skipped unread.
  Status Walk(const std::string& dir, const std::string& name_filter, const std::string& token,
              size_t limit, int depth, std::vector<Entry>& out) const {
    if (depth > kMaxDepth) return Status::Ok();
    auto entries = ReadDir(dir, name_filter);
    if (!entries) {
      // An unreadable subdirectory must not hide the rest of the tree.
      return depth == 0 ? entries.error() : Status::Ok();
    }
    for (auto& e : *entries) {
      if (out.size() >= limit) return Status::Ok();
      if (!e.dir) {
        if (token.empty() || e.key > token) out.push_back(std::move(e));
        continue;
      }
      // Every key below e.key starts with it: skip if they are all <= token.
      if (!token.empty() && e.key <= token && !token.starts_with(e.key)) continue;
      auto s = Walk(e.key, "", token, limit, depth + 1, out);  // no cycles: ReadDir hides them
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  const std::string root_;  // realpath of the source directory
};

}  // namespace
}  // namespace local

Result<std::unique_ptr<Backend>> MakeLocalBackend(const std::string& root_dir) {
  if (root_dir.empty() || root_dir.front() != '/') {
    return Err(Status::InvalidArgument("local source '" + root_dir + "' must be an absolute path"));
  }
  char buf[PATH_MAX];
  if (!::realpath(root_dir.c_str(), buf)) {
    int err = errno;
    if (err == ENOENT) return Err(Status::NotFound("source directory " + root_dir + " does not exist"));
    return Err(Status::IoError("source directory " + root_dir + ": " + std::strerror(err)));
  }
  auto backend = std::make_unique<local::LocalBackend>(buf);
  if (Status s = backend->Probe(); !s.ok()) return Err(s);
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace igt
