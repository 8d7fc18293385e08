#define FUSE_USE_VERSION 312
#include "fuse/fuse_fs.h"

#include <fuse3/fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "fuse/errno_map.h"

namespace igt {
namespace {

// Reserved inode of the hidden stats file: the namespace's numbers are below
// it (Namespace::kInoLimit).
constexpr fuse_ino_t kStatsIno = Namespace::kInoLimit;

// An open handle: a regular file pinned to the version seen at open (so one
// read never mixes versions), a directory snapshot, or the stats file.
struct Handle {
  enum class Kind { kFile, kDir, kStats } kind;
  FileVersion file;                            // kFile (key: InodeAttr::DataKey; fetch_key: a link's name)
  std::shared_ptr<const DirListing> listing;   // kDir
  std::string content;                         // kStats
  bool direct_io = false;                      // kFile: opened with fi->direct_io (not page-cached)
  bool listed = false;                         // kDir: a readdir from offset 0 was answered (Rewound)
};

Handle* H(fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }

// A Handle travels from the thread that opens it to the threads that read
// and release it through the kernel (fi->fh), an ordering ThreadSanitizer
// cannot see (libfuse and /dev/fuse are not instrumented): it reports a race
// on every first read. Under TSan, each handle operation does an acq_rel RMW
// on one atomic before it touches the handle and before it replies, which
// makes the kernel's ordering visible. No-op in normal builds.
// Read and lookup failures are logged at most kWarnPerSecond times a
// second (every failure is still counted in the metrics): a busy job
// against an unreachable bucket must not flood the log. A summary line says
// how many were left out.
constexpr int kWarnPerSecond = 10;
bool WarnAllowed() {
  static std::atomic<int64_t> window{0};
  static std::atomic<int> count{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t w = window.load(std::memory_order_relaxed);
  if (w != now && window.compare_exchange_strong(w, now)) {
    const int dropped = count.exchange(0) - kWarnPerSecond;
    if (dropped > 0) spdlog::warn("{} more read/lookup failure warnings in the last period not shown", dropped);
  }
  return count.fetch_add(1, std::memory_order_relaxed) < kWarnPerSecond;
}

// Runs `f`, an advisory step of a request; an exception is logged (rate
// limited) and dropped.
template <class F>
void Guarded(const char* what, const std::string& key, F&& f) noexcept {
  try {
    f();
  } catch (const std::exception& e) {
    if (WarnAllowed()) spdlog::error("{} failed on '{}': {}", what, key, e.what());
  } catch (...) {
    if (WarnAllowed()) spdlog::error("{} failed on '{}': unknown exception", what, key);
  }
}

// A request handler run so that an exception (std::bad_alloc, a bug)
// fails that request, not the daemon: libfuse calls the handlers from C,
// where an exception could not go, and one leaving a noexcept function
// calls std::terminate (the mount then answers ENOTCONN). Each handler
// replies as its last step, so an exception comes before any reply.
// Not for forget, which is never replied to.
template <auto Fn>
struct Safe;
template <class... A, void (*Fn)(fuse_req_t, A...)>
struct Safe<Fn> {
  static void Call(fuse_req_t req, A... a) noexcept {
    int err = EIO;
    try {
      Fn(req, a...);
      return;
    } catch (const std::bad_alloc&) {
      err = ENOMEM;
      if (WarnAllowed()) spdlog::error("a FUSE request failed: out of memory");
    } catch (const std::exception& e) {
      if (WarnAllowed()) spdlog::error("a FUSE request failed: {}", e.what());
    } catch (...) {
      if (WarnAllowed()) spdlog::error("a FUSE request failed: unknown exception");
    }
    fuse_reply_err(req, err);
  }
};

// Reply buffers of reads, reused: not thread_local, whose first use on
// each of libfuse's worker threads (started and ended as load comes and
// goes) registers a TLS destructor, and glibc aborts the process when it
// cannot allocate for that (a tester's run under `ulimit -v`: SIGABRT,
// "failed to register TLS destructor"). A failed allocation here is a
// bad_alloc, which fails the one read.
class ReadBuffers {
 public:
  struct Buf {
    std::unique_ptr<char[]> data;
    size_t size = 0;
  };
  Buf Take(size_t size) {
    {
      std::lock_guard lk(mu_);
      for (size_t i = free_.size(); i-- > 0;)
        if (free_[i].size >= size) {
          Buf b = std::move(free_[i]);
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return b;
        }
    }
    return Buf{std::unique_ptr<char[]>(new char[size]), size};
  }
  void Give(Buf b) noexcept {
    std::lock_guard lk(mu_);
    if (free_.size() < kKeep) try {
        free_.push_back(std::move(b));
      } catch (...) {
      }
  }

 private:
  static constexpr size_t kKeep = 64;  // beyond the FUSE threads reading at once: freed
  std::mutex mu_;
  std::vector<Buf> free_;
};
ReadBuffers g_read_buffers;

#if defined(__SANITIZE_THREAD__)
std::atomic<uint64_t> g_handoff{0};
inline void KernelHandoff() { g_handoff.fetch_add(1, std::memory_order_acq_rel); }
#else
inline void KernelHandoff() {}
#endif

FuseFs* Self(fuse_req_t req) { return static_cast<FuseFs*>(fuse_req_userdata(req)); }

double TtlSeconds(const Config& c) { return static_cast<double>(c.metadata.ttl_ms) / 1000.0; }
// How long the kernel keeps an entry taken from a stale listing.
constexpr double kStaleEntrySeconds = 1.0;

// How long the kernel may keep an entry or attributes: what is left of the
// TTL of the listing they came from (a whole TTL from now would let a change
// stay hidden for up to two), briefly if that listing is stale.
double TimeoutSeconds(const Config& c, const InodeAttr& a) {
  const double ttl = TtlSeconds(c);
  if (a.stale) return std::min(ttl, kStaleEntrySeconds);
  if (a.listing_ms == 0) return ttl;
  const double age = static_cast<double>(NowMs() - a.listing_ms) / 1000.0;
  // Past the TTL yet fresh: a listing whose LIST outlasted the TTL (it is
  // fresh for twice its LIST's time, Namespace::Fresh): briefly, as a stale
  // one's, not 0 (every stat a round trip to the daemon).
  if (ttl - age <= 0) return std::min(ttl, kStaleEntrySeconds);
  return std::clamp(ttl - age, 0.0, ttl);
}

struct stat ToStat(const InodeAttr& a, uint64_t unit_size, const FileAttrs& fa) {
  struct stat st {};
  st.st_ino = a.ino;
  st.st_mode = a.is_dir ? (S_IFDIR | fa.dir_mode) : (S_IFREG | fa.file_mode);
  st.st_nlink = 1;  // unknown link count: find(1) then does not assume leaf dirs
  st.st_uid = fa.uid;
  st.st_gid = fa.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st.st_blksize = static_cast<blksize_t>(std::min<uint64_t>(unit_size, 1 << 20));
  // Floor division: a time before 1970 still has 0 <= tv_nsec < 1e9.
  const int64_t sec = a.mtime_ns / 1000000000 - (a.mtime_ns % 1000000000 < 0 ? 1 : 0);
  st.st_mtim.tv_sec = sec;
  st.st_mtim.tv_nsec = a.mtime_ns - sec * 1000000000;
  st.st_ctim = st.st_mtim;
  st.st_atim = st.st_mtim;
  return st;
}

struct stat StatsFileStat(const FileAttrs& fa) {
  struct stat st {};
  st.st_ino = kStatsIno;
  // It names the files read: as readable as they are, and always by the
  // daemon's own user (`igtcache stats`, `warm` and `unmount` read it).
  st.st_mode = S_IFREG | fa.file_mode | 0400;
  st.st_nlink = 1;
  st.st_uid = ::getuid();
  st.st_gid = fa.gid;
  return st;
}

}  // namespace

struct FuseFs::Impl {
  static void Reply(fuse_req_t req, const Status& s) { fuse_reply_err(req, ToErrno(s)); }

  static void Init(void* userdata, fuse_conn_info* conn) {
    auto* self = static_cast<FuseFs*>(userdata);
    const auto& c = self->opts_.config;
    const unsigned max_read = static_cast<unsigned>(c.fuse.max_read_bytes);
    // libfuse 3.14 only honours -o max_read when init() sets it as well.
    conn->max_read = max_read;
    // max_pages is derived from max_write: without it the kernel splits
    // reads at 128 KiB. Nothing is ever written (read-only mount).
    conn->max_write = max_read;
    // Kernel readahead up to one request: sequential readers get 1 MiB reads.
    conn->max_readahead = max_read;
    // Room for many concurrent readahead requests (many DataLoader workers).
    conn->max_background = static_cast<unsigned>(c.fuse.max_background);
    conn->congestion_threshold = conn->max_background * 3 / 4;
    // Lookups and readdirs in one directory may run in parallel: the
    // Namespace is thread-safe and a DataLoader opens files concurrently.
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    // readdirplus (an entry's attributes with its name: `ls -l` needs no
    // lookup per entry): fuse.readdirplus, `auto` as the kernel sees fit
    // (READDIRPLUS_AUTO), `always` for every batch, `off` never.
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
    if (c.fuse.readdirplus != "off" && (conn->capable & FUSE_CAP_READDIRPLUS)) {
      conn->want |= FUSE_CAP_READDIRPLUS;
      if (c.fuse.readdirplus != "always" && (conn->capable & FUSE_CAP_READDIRPLUS_AUTO))
        conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
    }
    // Reads of one file may be in flight together (readahead + reader).
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    // We decide page-cache validity ourselves (keep_cache while the ETag
    // holds); mtime-based invalidation would only add doubt.
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
    spdlog::info("fuse: max_read={} max_background={} proto {}.{}", conn->max_read,
                 conn->max_background, conn->proto_major, conn->proto_minor);
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    auto* self = Self(req);
    spdlog::trace("fuse: lookup '{}' in inode {}", name, parent);
    fuse_entry_param e{};
    if (parent == Namespace::kRootIno && std::strcmp(name, kStatsFileName) == 0) {
      e.ino = kStatsIno;
      e.attr = StatsFileStat(self->attrs_);
      fuse_reply_entry(req, &e);
      return;
    }
    if (self->metrics_) Add(self->metrics_->lookups);
    // Longer than a name can be (statfs says 255; FUSE passes up to 1024):
    // ENAMETOOLONG, as a local file system says, not "no such file".
    if (std::strlen(name) > 255) {
      fuse_reply_err(req, ENAMETOOLONG);
      return;
    }
    const uint64_t relist_gen = self->relist_gen_.load();
    auto a = self->ns_->Lookup(parent, name);
    if (!a) {
      if (a.error().code() == Code::kNotFound) {
        // Negative entry: the kernel remembers the absence for a while.
        e.ino = 0;
        e.entry_timeout = static_cast<double>(self->opts_.config.metadata.negative_ttl_ms) / 1000.0;
        if (self->opts_.config.metadata.negative_ttl_ms > 0) {
          self->NoteNegative(parent, name);
          if (self->relist_gen_.load() != relist_gen) e.entry_timeout = 0;  // a relisting ran meanwhile
        }
        fuse_reply_entry(req, &e);
        return;
      }
      if (WarnAllowed()) spdlog::warn("lookup '{}': {}", name, a.error().ToString());
      Reply(req, a.error());
      return;
    }
    e.ino = a->ino;
    e.attr = ToStat(*a, self->pipeline_->unit_size(), self->attrs_);
    // An entry from a stale listing (a refresh under way, the bucket down,
    // or a read found it out of date) is kept briefly: else the kernel would
    // hold it, maybe an old version, for a whole TTL.
    e.attr_timeout = e.entry_timeout = TimeoutSeconds(self->opts_.config, *a);
    if (fuse_reply_entry(req, &e) != 0) self->ns_->Forget(a->ino, 1);  // request was interrupted
  }

  // The kernel forgets an inode when it drops it, page cache included; a
  // forget of part of its count (a revalidate that found another inode, a
  // readdirplus entry it dropped) leaves it, pages and all.
  static void ForgetOne(FuseFs* self, fuse_ino_t ino, uint64_t n) {
    if (ino != kStatsIno && self->ns_->Forget(ino, n)) self->ForgetVersion(ino);
  }
  static void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t n) noexcept {
    ForgetOne(Self(req), ino, n);
    fuse_reply_none(req);
  }

  static void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* f) noexcept {
    for (size_t i = 0; i < count; ++i) ForgetOne(Self(req), f[i].ino, f[i].nlookup);
    fuse_reply_none(req);
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    auto* self = Self(req);
    if (ino == kStatsIno) {
      auto st = StatsFileStat(self->attrs_);
      fuse_reply_attr(req, &st, 0);
      return;
    }
    auto a = self->ns_->GetAttr(ino);
    if (!a) return Reply(req, a.error());
    auto st = ToStat(*a, self->pipeline_->unit_size(), self->attrs_);
    fuse_reply_attr(req, &st, TimeoutSeconds(self->opts_.config, *a));
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    auto* self = Self(req);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
      fuse_reply_err(req, EROFS);
      return;
    }
    if (ino == kStatsIno) {
      auto h = std::make_unique<Handle>(Handle{Handle::Kind::kStats, {}, nullptr, self->stats_json_(), false, false});
      fi->direct_io = 1;  // size is not known ahead; never page-cached
      fi->fh = reinterpret_cast<uint64_t>(h.get());
      KernelHandoff();
      if (fuse_reply_open(req, fi) == 0) h.release();
      return;
    }
    auto a = self->ns_->GetAttr(ino);
    if (!a) return Reply(req, a.error());
    if (a->is_dir) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    // Reads, the cache and the engine go by the key holding the bytes: a
    // link's target's (docs/SEMANTICS.md, "Names").
    const std::string& key = a->DataKey();
    FileVersion fv{key, a->etag, a->size, a->data_key.empty() ? std::string() : a->key};
    auto h = std::make_unique<Handle>(Handle{Handle::Kind::kFile, std::move(fv), nullptr, {}, false});
    // Nothing after OpenVersion may throw (Safe replies for an exception,
    // and the version would stay counted open): the hooks only advise.
    self->OpenVersion(ino, a->etag, fi);
    h->direct_io = fi->direct_io != 0;
    Add(self->metrics_->opens);
    spdlog::trace("fuse: open '{}' ({} bytes) by pid {}", a->key, a->size, fuse_req_ctx(req)->pid);
    Guarded("open hook", key, [&] {
      if (self->open_hook_) self->open_hook_(fuse_req_ctx(req)->pid, key, a->size);
      // The kernel copies the mount's readahead into the file when the open
      // returns, so setting it now gives this file its own (per-file
      // readahead without a kernel interface for it). Two opens racing may
      // swap their values: a matter of speed only, never of data.
      if (self->readahead_hook_) self->SetReadahead(self->readahead_hook_(key, a->size));
    });
    fi->fh = reinterpret_cast<uint64_t>(h.get());
    KernelHandoff();
    if (fuse_reply_open(req, fi) == 0) h.release();
    else self->CloseVersion(ino, a->etag);  // interrupted: no handle
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    auto* self = Self(req);
    KernelHandoff();
    Handle* h = H(fi);
    if (h->kind == Handle::Kind::kStats) {
      // Copy out of the handle first: once the reply is written the reader
      // may close and a Release on another thread free the handle while
      // fuse_reply_buf is still returning (found by ASan).
      const auto& c = h->content;
      size_t from = std::min<size_t>(static_cast<size_t>(off), c.size());
      const std::string out(c, from, std::min(size, c.size() - from));
      KernelHandoff();
      fuse_reply_buf(req, out.data(), out.size());
      return;
    }
    // Every reply is ReadFile's last step: an exception there (an
    // allocation on its error path) came before any reply.
    // A failed read through the page cache is asked again by the kernel at
    // once (a page of a failed readahead); a direct one is not.
    const bool page_cached = !h->direct_io && !(fi->flags & O_DIRECT);
    try {
      ReadFile(req, ino, size, off, h, page_cached);
    } catch (...) {
      Add(self->metrics_->read_errors);
      fuse_reply_err(req, EIO);
    }
  }

  static void ReadFile(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, Handle* h, bool page_cached) {
    auto* self = Self(req);
    Add(self->metrics_->read_requests);
    // Recorded as the request arrives, not once served: requests the kernel
    // sends together (readahead windows of several max_read requests) are
    // served in any order, and that order would hide a sequential reader
    // from the stream tree.
    const uint64_t o = static_cast<uint64_t>(off), fsz = h->file.size;
    const uint64_t len = o < fsz ? std::min<uint64_t>(size, fsz - o) : 0;
    const uint64_t pid = fuse_req_ctx(req)->pid;
    spdlog::trace("fuse: read '{}' [{}, +{}) by pid {}", h->file.key, o, len, pid);
    // The hooks (stream tree, policy engine, prefetcher) only advise: one
    // that throws (out of memory, a bug) costs this read its prefetches, not
    // its data, and never the daemon (these handlers are noexcept).
    Guarded("access hook", h->file.key, [&] {
      if (self->access_hook_) self->access_hook_(pid, h->file.key, o, len, fsz);
    });
    // The policy engine sees the read before the cache does (as in the
    // simulator): its hits then belong to this read, and its plan is
    // submitted while the read's own misses are being fetched.
    std::function<void()> plan;
    Guarded("policy engine", h->file.key, [&] {
      if (self->read_hook_) plan = self->read_hook_(pid, h->file, o, len);
    });
    std::function<void()> run_plan;
    if (plan) run_plan = [&] { Guarded("prefetch plan", h->file.key, plan); };
    ReadBuffers::Buf buf;
    struct GiveBack {
      ReadBuffers::Buf& b;
      ~GiveBack() {
        if (b.data) g_read_buffers.Give(std::move(b));
      }
    } give_back{buf};
    Result<size_t> n = Err(Status::Internal("read failed"));
    bool repeated = false;
    try {
      buf = g_read_buffers.Take(std::max<size_t>(size, 1));
      // The reader is named only where the kernel retries (the failure memo).
      n = self->pipeline_->Read(h->file, o, size, buf.data.get(), run_plan, page_cached ? pid : 0, &repeated);
    } catch (const std::exception& e) {
      n = Err(Status::Internal(e.what()));
    } catch (...) {
      n = Err(Status::Internal("unknown exception"));
    }
    if (!n) {
      // The kernel's retry of a page that just failed is one failure the
      // reader sees, counted once (read_failures_repeated counts the retry):
      // a tester's 10 failed reads through the page cache showed 20.
      if (!repeated) Add(self->metrics_->read_errors);
      if (WarnAllowed()) spdlog::warn("read '{}' [{}, +{}): {}", h->file.key, off, size, n.error().ToString());
      // A changed or deleted object is reported as EIO to the reader
      // (ESTALE confuses tools into retrying the path forever, and read(2)
      // has no ENOENT: readers take it for a missing path, not a failed
      // read); the next open sees the new version (or ENOENT).
      // Before the reply: once it is sent the reader may close (h is freed)
      // and open again, which should then see the bucket as it is.
      const bool changed = n.error().code() == Code::kChanged || n.error().code() == Code::kNotFound;
      if (changed) self->NoteChanged(ino, h->file.FetchKey(), h->file.etag);
      KernelHandoff();
      Reply(req, changed ? Status::IoError("") : n.error());
      return;
    }
    Add(self->metrics_->read_bytes, *n);
    KernelHandoff();
    fuse_reply_buf(req, buf.data.get(), *n);
  }

  // `igtcache warm` (kWarmIoctl): fetch a range of an open file into the
  // cache. Other ioctls: ENOTTY.
  static void Ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi, unsigned flags,
                    const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
    KernelHandoff();
    auto* self = Self(req);
    Handle* h = H(fi);
    if (static_cast<unsigned long>(cmd) != kWarmIoctl || !self->warm_hook_ ||
        h->kind != Handle::Kind::kFile || in_bufsz < sizeof(WarmRange) || (flags & FUSE_IOCTL_COMPAT)) {
      fuse_reply_err(req, ENOTTY);
      return;
    }
    WarmRange r;
    std::memcpy(&r, in_buf, sizeof r);
    // One call holds a FUSE thread while it fetches: at most kMaxWarmBytes
    // (the caller goes on from where it returned: warm asks for 64 MiB).
    if (r.length > kMaxWarmBytes) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    Status s;
    try {
      s = self->warm_hook_(h->file, r.offset, r.length);
    } catch (const std::exception& e) {
      s = Status::Internal(e.what());
    } catch (...) {
      s = Status::Internal("warm: unknown exception");
    }
    if (!s.ok()) {
      if (WarnAllowed()) spdlog::warn("warm '{}' [{}, +{}): {}", h->file.key, r.offset, r.length, s.ToString());
      const bool changed = s.code() == Code::kChanged || s.code() == Code::kNotFound;
      if (changed) self->NoteChanged(ino, h->file.FetchKey(), h->file.etag);
      KernelHandoff();
      Reply(req, changed ? Status::IoError("") : s);
      return;
    }
    KernelHandoff();
    fuse_reply_ioctl(req, 0, nullptr, 0);
  }

  static void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept {
    KernelHandoff();
    Handle* h = H(fi);
    FuseFs* self = Self(req);
    // The last handle of this version: readahead queued for it is dropped
    // (a header reader that opens, reads 4 KiB and closes thousands of
    // files left each one's window to be fetched for nobody).
    if (h->kind == Handle::Kind::kFile && self->CloseVersion(ino, h->file.etag) && self->release_hook_) try {
        self->release_hook_(h->file);
      } catch (...) {
      }
    delete h;
    fuse_reply_err(req, 0);
  }

  static void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    spdlog::trace("fuse: opendir inode {}", ino);
    auto l = Self(req)->ns_->ReadDir(ino);
    if (!l) {
      // Said, as for lookups and reads: an EIO with nothing logged left a
      // user no way to tell why a directory cannot be listed.
      if (l.error().code() != Code::kNotFound && WarnAllowed())
        spdlog::warn("opendir inode {}: {}", ino, l.error().ToString());
      return Reply(req, l.error());
    }
    auto h = std::make_unique<Handle>(Handle{Handle::Kind::kDir, {}, *l, {}, false, false});
    fi->fh = reinterpret_cast<uint64_t>(h.get());
    // No kernel readdir cache: it is one per directory, shared by every
    // handle, while offsets here index this handle's own snapshot; a scan
    // resumed over another handle's newer listing would skip or repeat
    // names. Readdir is answered from memory anyway.
    KernelHandoff();
    if (fuse_reply_open(req, fi) == 0) h.release();
  }

  // The entries of directory `ino`'s listing `l` from offset `off` on:
  // fn(offset, name, st, entry) with the plain attributes readdir reports
  // (st_ino, st_mode) and the listing's entry (null for "." and ".."),
  // until fn returns false. Offsets: 0 ".", 1 "..", 2+i entries[i]; the
  // offset given with an entry is that of the next one.
  template <class Fn>
  static void ForEachDirent(FuseFs* self, fuse_ino_t ino, const DirListing& l, off_t off, Fn&& fn) {
    const auto& entries = l.entries;
    for (off_t i = off; i < static_cast<off_t>(entries.size()) + 2; ++i) {
      struct stat st {};
      const char* name;
      const DirEntry* e = nullptr;
      if (i == 0) {
        name = ".";
        st.st_ino = ino;
        st.st_mode = S_IFDIR;
      } else if (i == 1) {
        name = "..";
        st.st_ino = self->ns_->ParentOf(ino);
        st.st_mode = S_IFDIR;
      } else {
        e = &entries[static_cast<size_t>(i - 2)];
        // An object of that name at the root is shadowed by the stats file
        // (a lookup gives the stats): not listed either.
        if (ino == Namespace::kRootIno && e->name == kStatsFileName) {
          if (!self->stats_name_warned_.exchange(true))
            spdlog::warn("the source's object '{}' at the top of the mount is hidden: the name is igtcache's "
                         "stats file (docs/METRICS.md)",
                         kStatsFileName);
          continue;
        }
        name = e->name.c_str();
        st.st_ino = self->ns_->EntryIno(ino, *e);  // what a lookup of it gives (d_ino == st_ino)
        st.st_mode = e->is_dir ? S_IFDIR : S_IFREG;
      }
      if (!fn(i, name, st, e)) break;
    }
  }

  // A readdir from offset 0 after the first (rewinddir, lseek to 0) starts
  // over on the directory's listing as it is now (within its TTL, the same
  // one), as POSIX has rewinddir see changes; before, a handle kept its
  // opendir snapshot for good (a daemon polling a directory through one
  // handle never saw a new name). A failed listing keeps the snapshot.
  // The kernel serialises a handle's readdirs (its position lock).
  static void Rewound(FuseFs* self, fuse_ino_t ino, off_t off, Handle* h) {
    if (off != 0) return;
    if (h->listed)
      if (auto l = self->ns_->ReadDir(ino)) h->listing = *l;
    h->listed = true;
  }

  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    auto* self = Self(req);
    KernelHandoff();
    Rewound(self, ino, off, H(fi));
    std::vector<char> buf(size);
    size_t used = 0;
    ForEachDirent(self, ino, *H(fi)->listing, off, [&](off_t i, const char* name, const struct stat& st, const DirEntry*) {
      size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, i + 1);
      if (need > size - used) return false;
      used += need;
      return true;
    });
    KernelHandoff();
    fuse_reply_buf(req, buf.data(), used);
  }

  // readdir with each entry's inode and attributes (FUSE_CAP_READDIRPLUS,
  // fuse.readdirplus: `auto` lets the kernel ask for it for the first batch
  // of a directory, and the next ones while the entries are being looked
  // up, e.g. `ls -l`). Each entry given with an inode is a lookup the kernel
  // will forget ("." and ".." are not, as the kernel skips them); entries
  // that do not fit, or a reply the kernel never took, give their
  // references back. `ls -l` of 50,000 files in one directory made 50,000
  // lookup round trips after its readdir.
  static void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
    auto* self = Self(req);
    KernelHandoff();
    Rewound(self, ino, off, H(fi));
    const DirListing& listing = *H(fi)->listing;
    std::vector<char> buf(size);
    size_t used = 0;
    // Inodes given a lookup reference in this reply: given back unless the
    // kernel took the reply, also when something throws on the way (Safe
    // then replies ENOMEM or EIO and the kernel never sees them). Reserved
    // for every entry that can fit, so that recording one cannot throw.
    struct Counted {
      Namespace& ns;
      std::vector<uint64_t> inos;
      bool taken = false;
      ~Counted() {
        if (!taken)
          for (uint64_t n : inos) ns.Forget(n, 1);
      }
    } counted{*self->ns_, {}};
    counted.inos.reserve(size / fuse_add_direntry_plus(req, nullptr, 0, "", nullptr, 0) + 1);
    const uint64_t unit = self->pipeline_->unit_size();
    ForEachDirent(self, ino, listing, off, [&](off_t i, const char* name, const struct stat& st, const DirEntry* de) {
      // Its size first: a lookup the kernel would never see has effects (a
      // new version's inode supersedes the old one).
      if (fuse_add_direntry_plus(req, nullptr, 0, name, nullptr, 0) > size - used) return false;
      fuse_entry_param e{};
      e.attr = st;
      // Deleted since this handle's listing (a newer one no longer names
      // it), or the directory's inode went (a forget raced): the name as the
      // handle's listing has it, with no inode (a stat of it looks it up,
      // and finds it gone).
      if (de)
        if (auto a = self->ns_->LookupListed(ino, listing, *de)) {
          counted.inos.push_back(a->ino);
          e.ino = a->ino;
          e.attr = ToStat(*a, unit, self->attrs_);
          e.attr_timeout = e.entry_timeout = TimeoutSeconds(self->opts_.config, *a);
        }
      used += fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, i + 1);  // fits (sized above)
      return true;
    });
    KernelHandoff();
    // Not taken if interrupted: the kernel saw none of them.
    counted.taken = fuse_reply_buf(req, buf.data(), used) == 0;
    if (counted.taken && self->metrics_) Add(self->metrics_->readdirplus_entries, counted.inos.size());
  }

  static void ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) noexcept {
    KernelHandoff();
    delete H(fi);
    fuse_reply_err(req, 0);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) noexcept {
    struct statvfs sv {};
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    // A bucket has no fixed size: a large, empty volume (as mountpoint-s3
    // and gcsfuse report), not a full one that trips disk-full alarms.
    sv.f_blocks = 1ull << 40;
    sv.f_bfree = sv.f_blocks;
    sv.f_bavail = sv.f_blocks;
    sv.f_files = 1ull << 32;
    sv.f_ffree = sv.f_files;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
  }

  static void ReadOnly(fuse_req_t req) { fuse_reply_err(req, EROFS); }
  static void Mkdir(fuse_req_t r, fuse_ino_t, const char*, mode_t) noexcept { ReadOnly(r); }
  static void Unlink(fuse_req_t r, fuse_ino_t, const char*) noexcept { ReadOnly(r); }
  static void Rename(fuse_req_t r, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) noexcept { ReadOnly(r); }
  static void Create(fuse_req_t r, fuse_ino_t, const char*, mode_t, fuse_file_info*) noexcept { ReadOnly(r); }
  static void SetAttr(fuse_req_t r, fuse_ino_t, struct stat*, int, fuse_file_info*) noexcept { ReadOnly(r); }
  static void Write(fuse_req_t r, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) noexcept { ReadOnly(r); }
};

FuseFs::FuseFs(Namespace* ns, ReadPipeline* pipeline, Metrics* metrics,
               std::function<std::string()> stats_json, Options opts)
    : ns_(ns), pipeline_(pipeline), metrics_(metrics), stats_json_(std::move(stats_json)),
      opts_(std::move(opts)) {
  // Validated with the config (Validate); a config built in code that skips
  // it gets the defaults (the daemon's ids, 0444 and 0555).
  attrs_.uid = ::getuid();
  attrs_.gid = ::getgid();
  if (auto a = FileAttrsOf(opts_.config)) attrs_ = *a;
}

FuseFs::~FuseFs() {
  if (se_) {
    if (handlers_set_) fuse_remove_signal_handlers(se_);
    if (mounted_) fuse_session_unmount(se_);
    fuse_session_destroy(se_);
  }
}

Status FuseFs::Mount() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = Impl::Init;
    o.lookup = Safe<Impl::Lookup>::Call;
    o.forget = Impl::Forget;
    o.forget_multi = Impl::ForgetMulti;
    o.getattr = Safe<Impl::GetAttr>::Call;
    o.open = Safe<Impl::Open>::Call;
    o.read = Safe<Impl::Read>::Call;
    o.release = Impl::Release;
    o.opendir = Safe<Impl::OpenDir>::Call;
    o.readdir = Safe<Impl::ReadDir>::Call;
    o.readdirplus = Safe<Impl::ReadDirPlus>::Call;
    o.releasedir = Impl::ReleaseDir;
    o.statfs = Impl::StatFs;
    o.mkdir = Impl::Mkdir;
    o.unlink = Impl::Unlink;
    o.rmdir = Impl::Unlink;
    o.rename = Impl::Rename;
    o.create = Impl::Create;
    o.setattr = Impl::SetAttr;
    o.write = Impl::Write;
    o.ioctl = Safe<Impl::Ioctl>::Call;
    return o;
  }();

  // ',' separates -o options and '\\' escapes: both escaped, as libfuse's
  // option parser reads them (the source shows as it is in /proc/mounts).
  std::string fsname;
  for (char c : opts_.fsname) {
    if (c == ',' || c == '\\') fsname.push_back('\\');
    fsname.push_back(c);
  }
  // default_permissions always: the kernel checks the modes (files 0444,
  // dirs 0555). Without it (before 2026-11-29, unless allow_other) nothing
  // was checked: access(X_OK) said every file was executable (`find
  // -executable` listed them all; exec then failed).
  std::string o = fmt::format("ro,fsname={},subtype=igtcache,max_read={},default_permissions", fsname,
                              opts_.config.fuse.max_read_bytes);
  // allow_other may come from the config or a raw -o.
  bool allow_other = opts_.config.fuse.allow_other;
  for (const auto& x : opts_.extra_opts) {
    std::string_view rest = x;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      if (rest.substr(0, comma) == "allow_other") allow_other = true;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (allow_other) o += ",allow_other";
  std::vector<std::string> argv_s = {"igtcache", "-o", o};
  for (const auto& x : opts_.extra_opts) {
    argv_s.push_back("-o");
    argv_s.push_back(x);
  }
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  se_ = fuse_session_new(&args, &ops, sizeof(ops), this);
  fuse_opt_free_args(&args);
  if (!se_) return Status::InvalidArgument("invalid FUSE options (see the message above)");
  if (fuse_set_signal_handlers(se_) != 0) return Status::Internal("cannot install signal handlers");
  handlers_set_ = true;
  if (opts_.on_sighup) {
    struct sigaction sa {};
    sa.sa_handler = opts_.on_sighup;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, nullptr);
  }
  if (fuse_session_mount(se_, opts_.mountpoint.c_str()) != 0)
    return Status::IoError(fmt::format("cannot mount on '{}' (is it an existing directory, "
                                       "not already mounted, and is /dev/fuse usable?)",
                                       opts_.mountpoint));
  mounted_ = true;
  RaiseReadahead();
  return Status::Ok();
}

// The kernel caps a FUSE mount's readahead at its bdi default (128 KiB)
// whatever init() asks, so sequential readers would get 128 KiB requests.
// As root we raise /sys/class/bdi/<dev>/read_ahead_kb to max_read, as other
// FUSE file systems do; unprivileged, this quietly keeps the default. The
// device comes from /proc/self/mountinfo: a stat() of the mount point would
// wait on our own not-yet-running loop.
void FuseFs::RaiseReadahead() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, parent, dev, root, mnt;
    ls >> id >> parent >> dev >> root >> mnt;
    if (mnt != opts_.mountpoint) continue;  // last match wins: the newest mount
    const std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
    std::ofstream ra(path);
    if (ra) ra << opts_.config.fuse.max_read_bytes / 1024;
    if (!ra) {
      spdlog::debug("cannot raise readahead via {} (not root?)", path);
      continue;
    }
    std::lock_guard lk(ra_mu_);
    ra_path_ = path;
    ra_kb_ = opts_.config.fuse.max_read_bytes / 1024;
  }
}

void FuseFs::SetReadahead(uint64_t bytes) {
  const uint64_t kb = bytes / 1024;
  std::lock_guard lk(ra_mu_);
  if (kb == 0 || ra_path_.empty() || kb == ra_kb_) return;
  std::ofstream ra(ra_path_);
  if (ra) ra << kb;
  if (ra) ra_kb_ = kb;
}

Status FuseFs::Run() {
  // The drain's buffer (DrainWhileNotifying), taken before any thread
  // starts: after a loop that ended for want of memory it may not be had,
  // and a bad_alloc then would leave the notifier joinable (std::terminate
  // with the mount up; a review's finding). libfuse 3.14's own size
  // (fuse_i.h: FUSE_MAX_MAX_PAGES pages and a header): the largest request
  // the kernel sends.
  constexpr size_t kMaxPages = 256, kHeaderBytes = 0x1000;
  std::vector<char> drain_buf(kMaxPages * static_cast<size_t>(::getpagesize()) + kHeaderBytes);
  std::unique_ptr<fuse_loop_config, decltype(&fuse_loop_cfg_destroy)> cfg_owner(fuse_loop_cfg_create(),
                                                                                &fuse_loop_cfg_destroy);
  fuse_loop_config* cfg = cfg_owner.get();
  if (!cfg) throw std::bad_alloc();
  fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(opts_.config.fuse.threads));
  fuse_loop_cfg_set_idle_threads(cfg, static_cast<unsigned>(std::max<uint64_t>(1, opts_.config.fuse.threads / 2)));
  {
    std::lock_guard lk(watch_mu_);
    loop_done_ = session_ended_ = false;
  }
  notifier_done_ = false;
  std::thread watcher([this] { WatchSession(); });
  std::thread notifier;
  try {
    notifier = std::thread([this] { SendInvalidations(); });
  } catch (...) {  // a thread limit: the watcher must not be left joinable (std::terminate)
    {
      std::lock_guard lk(watch_mu_);
      loop_done_ = true;
    }
    watch_cv_.notify_all();
    watcher.join();
    throw;
  }
  int rc = fuse_session_loop_mt(se_, cfg);
  {
    std::lock_guard lk(watch_mu_);
    loop_done_ = true;
  }
  watch_cv_.notify_all();
  watcher.join();
  DrainWhileNotifying(drain_buf);
  notifier.join();
  cfg_owner.reset();
  if (handlers_set_) {
    fuse_remove_signal_handlers(se_);
    handlers_set_ = false;
  }
  if (mounted_) {
    fuse_session_unmount(se_);
    mounted_ = false;
  }
  // libfuse ends the loop when a worker cannot allocate its request buffer
  // (a tester's run under ulimit -v): named, not a bare -12.
  if (rc == -ENOMEM)
    return Status::IoError("FUSE loop ended: out of memory (libfuse could not allocate a request buffer; a memory "
                           "or address-space limit such as ulimit -v?)");
  if (rc != 0 && rc != SIGINT && rc != SIGTERM && rc != SIGHUP)
    return Status::IoError(fmt::format("FUSE loop ended with {}", rc));
  return Status::Ok();
}

// libfuse has no callback for the end of the session: this polls it, so
// that on_session_end runs while the loop still waits for its workers.
// Ends with the loop; on_session_end has then run once.
void FuseFs::WatchSession() {
  std::unique_lock lk(watch_mu_);
  while (true) {
    watch_cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return loop_done_; });
    const bool end = !session_ended_ && (loop_done_ || fuse_session_exited(se_));
    if (end) session_ended_ = true;
    const bool done = loop_done_;
    lk.unlock();
    if (end && opts_.on_session_end) opts_.on_session_end();
    watch_cv_.notify_all();  // the notifier and readers waiting on it stop
    if (done) return;
    lk.lock();
  }
}

// The notifier may be blocked in the kernel on a directory's lock that a
// lookup there holds while it waits for its reply, and the loop's workers,
// gone, will never read that lookup: joined as it was, the daemon hung on
// SIGTERM with the mount up (a reviewer's finding; the window is the up to
// 100 ms before WatchSession marks the session ended). Requests are read
// and answered here until the notifier is back (the session has ended:
// they fail fast, the backend's requests cancelled). An unmount or a
// connection abort ends the notify (and the reads) by itself.
void FuseFs::DrainWhileNotifying(std::vector<char>& mem) {
  if (notifier_done_.load()) return;
  // Read here, not by fuse_session_receive_buf: libfuse drops a request it
  // has read once the session is marked exited (its receive returns 0), and
  // a second SIGINT or SIGTERM marks it again at any moment, so the lookup
  // that holds the lock could be the one dropped (a review's finding).
  // Non-blocking: a request poll saw can be gone by the read (its sender
  // killed), and a blocking read would then wait for the next one.
  const int fd = fuse_session_fd(se_);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  while (!notifier_done_.load()) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 50);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (!(p.revents & POLLIN)) {
      if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) break;  // the connection is gone
      continue;
    }
    const ssize_t n = ::read(fd, mem.data(), mem.size());
    if (n < 0) {
      // ENOENT: the request was interrupted before it was read.
      if (errno == EINTR || errno == EAGAIN || errno == ENOENT) continue;
      break;  // ENODEV: unmounted
    }
    fuse_buf buf{};
    buf.size = static_cast<size_t>(n);
    buf.mem = mem.data();
    fuse_session_process_buf(se_, &buf);
  }
}

// Sends the entry invalidations NoteChanged and DropEntries queue (NoteChanged's
// first: a reader waits for each), on a thread of its own:
// one can block in the kernel on its directory's lock (a lookup there
// waiting for a FUSE thread), which must not delay the end of the session.
void FuseFs::SendInvalidations() {
  struct Done {
    std::atomic<bool>& done;
    ~Done() { done.store(true); }
  } done{notifier_done_};
  std::unique_lock lk(watch_mu_);
  while (true) {
    watch_cv_.wait(lk, [&] { return loop_done_ || !urgent_entries_.empty() || !inval_entries_.empty(); });
    if (loop_done_) return;
    const bool urgent = !urgent_entries_.empty();
    auto& q = urgent ? urgent_entries_ : inval_entries_;
    auto [parent, name] = std::move(q.front());
    q.pop_front();
    if (session_ended_) {
      if (urgent) ++urgent_sent_;
      continue;
    }
    lk.unlock();
    // ENOENT: the kernel no longer has the entry, nothing to drop.
    int e = fuse_lowlevel_notify_inval_entry(se_, parent, name.c_str(), name.size());
    if (e != 0 && e != -ENOENT) spdlog::debug("inval_entry {}/{}: {}", parent, name, std::strerror(-e));
    lk.lock();
    if (urgent) ++urgent_sent_;
    watch_cv_.notify_all();
  }
}

void FuseFs::NoteChanged(uint64_t ino, const std::string& key, const std::string& etag) {
  ns_->NoteChanged(key, etag);
  auto entry = ns_->EntryOf(ino);
  if (!entry) return;
  std::unique_lock lk(watch_mu_);
  if (loop_done_ || session_ended_) return;
  // Once per inode (one version); a second reader of it waits for the same
  // invalidation (it returned at once: its reopen found the old entry).
  // The number is the count of urgent entries ever queued, not the sent
  // ones plus the queue: one being sent is in neither, and a reader waited
  // for the one before its own.
  uint64_t mine = 0;
  if (auto it = invalidated_.find(ino); it != invalidated_.end()) {
    mine = it->second;
  } else {
    if (invalidated_.size() >= 65536) invalidated_.clear();
    urgent_entries_.push_back(std::move(*entry));
    mine = ++urgent_queued_;
    invalidated_.emplace(ino, mine);
    watch_cv_.notify_all();
  }
  // The reader's next open should find the entry gone: wait (bounded) for it.
  watch_cv_.wait_for(lk, std::chrono::seconds(1),
                     [&] { return urgent_sent_ >= mine || loop_done_ || session_ended_; });
}

namespace {
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void FuseFs::NoteNegative(uint64_t parent, std::string_view name) {
  const int64_t now = SteadyMs(), ttl = static_cast<int64_t>(opts_.config.metadata.negative_ttl_ms);
  try {
    std::lock_guard lk(neg_mu_);
    if (negatives_count_ >= kMaxNegatives) {
      const size_t before = negatives_count_;
      for (auto p = negatives_.begin(); p != negatives_.end();) {
        negatives_count_ -= std::erase_if(p->second, [&](const auto& e) { return now - e.second > ttl; });
        p = p->second.empty() ? negatives_.erase(p) : std::next(p);
      }
      if (negatives_count_ > before / 2) {  // not even half freed: all go, not a scan per lookup
        negatives_.clear();
        negatives_count_ = 0;
      }
    }
    auto [it, fresh] = negatives_[parent].insert_or_assign(std::string(name), now);
    negatives_count_ += fresh;
  } catch (const std::exception&) {
    // No memory: this one waits out its negative TTL.
  }
}

void FuseFs::DropNegatives(uint64_t parent, const std::vector<DirEntry>& added) {
  relist_gen_.fetch_add(1);
  // A second of slack: the kernel's TTL runs from its own receipt of the reply.
  const int64_t now = SteadyMs(), ttl = static_cast<int64_t>(opts_.config.metadata.negative_ttl_ms) + 1000;
  std::vector<std::pair<uint64_t, std::string>> drop;
  {
    std::lock_guard lk(neg_mu_);
    auto p = negatives_.find(parent);
    if (p == negatives_.end()) return;
    auto& names = p->second;
    // The parent's negative entries are walked, each looked up in `added`
    // (sorted): a relisting adding 100,000 names to a directory with a few
    // negative entries costs a few binary searches, not 100,000 lookups.
    for (auto it = names.begin(); it != names.end();) {
      const bool listed = std::binary_search(added.begin(), added.end(), it->first,
                                             [](const auto& x, const auto& y) {
                                               if constexpr (std::is_same_v<std::decay_t<decltype(x)>, DirEntry>)
                                                 return x.name < y;
                                               else
                                                 return x < y.name;
                                             });
      if (!listed) {
        ++it;
        continue;
      }
      if (now - it->second <= ttl) drop.emplace_back(parent, it->first);
      it = names.erase(it);
      --negatives_count_;
    }
    if (names.empty()) negatives_.erase(p);
  }
  DropEntries(std::move(drop));
}

void FuseFs::DropEntries(std::vector<std::pair<uint64_t, std::string>> entries) {
  if (entries.empty()) return;
  std::lock_guard lk(watch_mu_);
  if (loop_done_ || session_ended_) return;
  for (auto& e : entries) inval_entries_.push_back(std::move(e));
  watch_cv_.notify_all();
}

// The page cache of `ino` for an open of version `etag` (fi->keep_cache,
// fi->direct_io), counting the handle. The cache is kept while the
// version is the same; a new version drops it, unless handles of the old
// one are still open: then the new handle reads around it (direct_io) and
// the old ones keep theirs. Never two versions' pages in one cache. (A file
// inode is one version since the Namespace gives a new version a new inode:
// the direct_io case is a safeguard.)
uint64_t FuseFs::VersionHash(std::string_view etag) {
  return etag.empty() ? 0 : XXH3_64bits(etag.data(), etag.size()) | 1;
}

void FuseFs::OpenVersion(uint64_t ino, const std::string& etag, fuse_file_info* fi) {
  const uint64_t v = VersionHash(etag);
  std::lock_guard lk(etag_mu_);
  auto& pc = page_cache_[ino];
  pc.forgotten = false;
  if (pc.version != v && pc.OpenOn(pc.version) != pc.open.end()) {  // counts of 0 are erased
    fi->direct_io = 1;
    fi->keep_cache = 0;
  } else {
    fi->keep_cache = pc.version == v && v != 0 ? 1 : 0;
    pc.version = v;
  }
  if (auto o = pc.OpenOn(v); o != pc.open.end()) ++o->second;
  else pc.open.emplace_back(v, 1);
}

bool FuseFs::CloseVersion(uint64_t ino, const std::string& etag) {
  const uint64_t v = VersionHash(etag);
  std::lock_guard lk(etag_mu_);
  auto it = page_cache_.find(ino);
  if (it == page_cache_.end()) return false;
  auto& open = it->second.open;
  auto o = it->second.OpenOn(v);
  if (o == open.end() || --o->second > 0) return false;
  open.erase(o);
  if (open.empty() && it->second.forgotten) page_cache_.erase(it);
  else if (open.empty()) open = {};  // its memory too: most inodes are not open
  return true;
}

void FuseFs::ForgetVersion(uint64_t ino) {
  {
    std::lock_guard lk(etag_mu_);
    if (auto it = page_cache_.find(ino); it != page_cache_.end()) {
      if (it->second.open.empty()) page_cache_.erase(it);
      else it->second.forgotten = true;
    }
  }
  // An inode number comes back for the same key and version (Namespace::
  // InoOf): once the kernel forgot it, its next change must be invalidated
  // again.
  std::lock_guard lk(watch_mu_);
  invalidated_.erase(ino);
}

}  // namespace igt
