#include "src/stream/trace.h"
#include "igtcache/file_check.h"

#include <fcntl.h>
#include <stdio_ext.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace igt::stream {
namespace {

constexpr const char* kColumns[] = {"time_us", "pid", "path", "offset", "length", "file_size"};
constexpr size_t kNumColumns = 6;

bool NeedsQuoting(std::string_view s) {
  return s.find_first_of(",\"\r\n") != std::string_view::npos;
}

void AppendUint(std::string& out, uint64_t v) {
  char tmp[24];
  auto [end, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
  out.append(tmp, end);
}

// Splits one CSV record into fields (RFC 4180 quoting). Returns an error
// description or empty on success. `fields` get views into `line` for
// unquoted fields and into `unquoted` storage for quoted ones.
std::string SplitCsv(std::string_view line, std::string (&store)[kNumColumns + 1],
                     std::string_view (&fields)[kNumColumns + 1], size_t& nfields) {
  nfields = 0;
  size_t i = 0;
  while (true) {
    if (nfields == kNumColumns + 1) {
      // Count the remaining fields only for the message.
      size_t extra = 1;
      bool q = false;
      for (; i < line.size(); ++i) {
        if (line[i] == '"') q = !q;
        else if (line[i] == ',' && !q) ++extra;
      }
      return fmt::format("expected {} columns, got {}", kNumColumns, kNumColumns + extra);
    }
    if (i < line.size() && line[i] == '"') {
      std::string& s = store[nfields];
      s.clear();
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            s.push_back('"');
            i += 2;
          } else {
            closed = true;
            ++i;
            break;
          }
        } else {
          s.push_back(line[i++]);
        }
      }
      if (!closed) return fmt::format("column {} ({}): unterminated quoted field", nfields + 1,
                                      nfields < kNumColumns ? kColumns[nfields] : "extra");
      fields[nfields++] = s;
      if (i == line.size()) return {};
      if (line[i] != ',')
        return fmt::format("column {}: unexpected character after closing quote", nfields);
      ++i;
    } else {
      size_t j = line.find(',', i);
      if (j == std::string_view::npos) {
        fields[nfields++] = line.substr(i);
        return {};
      }
      fields[nfields++] = line.substr(i, j - i);
      i = j + 1;
    }
  }
}

template <class T>
std::string ParseUint(std::string_view field, size_t col, T& out) {
  if (field.empty()) return fmt::format("column {} ({}) is empty", col + 1, kColumns[col]);
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  if (ec == std::errc::result_out_of_range)
    return fmt::format("column {} ({}) is out of range: '{}'", col + 1, kColumns[col], field);
  if (ec != std::errc() || p != field.data() + field.size())
    return fmt::format("column {} ({}) is not a non-negative integer: '{}'", col + 1, kColumns[col], field);
  return {};
}

}  // namespace

void AppendTraceRow(std::string& out, uint64_t time_us, uint32_t pid, std::string_view path,
                    uint64_t offset, uint64_t length, uint64_t file_size) {
  AppendUint(out, time_us);
  out.push_back(',');
  AppendUint(out, pid);
  out.push_back(',');
  if (NeedsQuoting(path)) {
    out.push_back('"');
    for (char c : path) {
      if (c == '"') out.push_back('"');
      out.push_back(c);
    }
    out.push_back('"');
  } else {
    out.append(path);
  }
  out.push_back(',');
  AppendUint(out, offset);
  out.push_back(',');
  AppendUint(out, length);
  out.push_back(',');
  AppendUint(out, file_size);
  out.push_back('\n');
}

Status ParseTraceRow(std::string_view line, TraceRecord& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  thread_local std::string store[kNumColumns + 1];
  std::string_view f[kNumColumns + 1];
  size_t nf = 0;
  if (auto e = SplitCsv(line, store, f, nf); !e.empty()) return Status::InvalidArgument(e);
  if (nf != kNumColumns)
    return Status::InvalidArgument(fmt::format("expected {} columns ({}), got {}", kNumColumns, kTraceHeader, nf));
  std::string e;
  if (e = ParseUint(f[0], 0, out.time_us); !e.empty()) return Status::InvalidArgument(e);
  if (e = ParseUint(f[1], 1, out.pid); !e.empty()) return Status::InvalidArgument(e);
  if (f[2].empty()) return Status::InvalidArgument("column 3 (path) is empty");
  if (f[2].front() == '/')
    return Status::InvalidArgument(fmt::format("column 3 (path) must be relative (no leading '/'): '{}'", f[2]));
  if (f[2].back() == '/')
    return Status::InvalidArgument(fmt::format("column 3 (path) names a directory (trailing '/'): '{}'", f[2]));
  // As a mount names files: no empty, '.' or '..' component, no NUL (a
  // mount never writes such a path; it replayed as a file of its own).
  for (size_t i = 0; i <= f[2].size();) {
    size_t j = f[2].find('/', i);
    if (j == std::string_view::npos) j = f[2].size();
    const std::string_view c = f[2].substr(i, j - i);
    if (c.empty() || c == "." || c == "..")
      return Status::InvalidArgument(
          fmt::format("column 3 (path) has an empty, '.' or '..' component: '{}'", f[2]));
    i = j + 1;
  }
  if (f[2].find('\0') != std::string_view::npos)
    return Status::InvalidArgument(fmt::format("column 3 (path) holds a NUL byte: '{}'", f[2]));
  out.path.assign(f[2]);
  if (e = ParseUint(f[3], 3, out.offset); !e.empty()) return Status::InvalidArgument(e);
  if (e = ParseUint(f[4], 4, out.length); !e.empty()) return Status::InvalidArgument(e);
  if (e = ParseUint(f[5], 5, out.file_size); !e.empty()) return Status::InvalidArgument(e);
  return Status::Ok();
}

// ---------------------------------------------------------------- reader

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  if (IsDirectoryPath(path))
    return Err(Status::InvalidArgument(fmt::format("cannot open trace '{}': it is a directory", path)));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    int err = errno;
    auto msg = fmt::format("cannot open trace '{}': {}", path, std::strerror(err));
    if (err == ENOENT) return Err(Status::NotFound(msg));
    // A path that names no readable file of the caller's is the command line's.
    if (err == EACCES || err == EPERM || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG)
      return Err(Status::InvalidArgument(msg));
    return Err(Status::IoError(msg));
  }
  std::unique_ptr<TraceReader> r(new TraceReader(path, f));
  char* line = nullptr;
  size_t cap = 0;
  ssize_t len = getline(&line, &cap, f);
  std::string header = len > 0 ? std::string(line, static_cast<size_t>(len)) : std::string();
  std::free(line);
  while (!header.empty() && (header.back() == '\n' || header.back() == '\r')) header.pop_back();
  if (header.size() >= 3 && static_cast<unsigned char>(header[0]) == 0xEF) header.erase(0, 3);  // UTF-8 BOM
  if (header != kTraceHeader)
    return Err(r->Fail(1, fmt::format("expected header '{}', got '{}'", kTraceHeader, header)));
  return r;
}

TraceReader::~TraceReader() {
  if (f_) std::fclose(f_);
  std::free(linebuf_);
}

Status TraceReader::Fail(uint64_t line, const std::string& what) const {
  return Status::InvalidArgument(fmt::format("{}:{}: {}", name_, line, what));
}

Result<bool> TraceReader::Next(TraceRecord& out) {
  char*& raw = linebuf_;
  size_t& cap = linebuf_cap_;
  while (true) {
    ssize_t len = getline(&raw, &cap, f_);
    if (len < 0) {
      if (std::ferror(f_)) return Err(Status::IoError(fmt::format("{}: read error", name_)));
      return false;
    }
    uint64_t start_line = next_line_++;
    buf_.assign(raw, static_cast<size_t>(len));
    // A quoted path may contain newlines: keep reading while quotes are open.
    // The quote state is carried over the lines appended (a rescan of the
    // whole record per line was quadratic), and a record is capped: a stray
    // quote must give an error naming its line, not swallow the file.
    constexpr size_t kMaxRecordBytes = 64 << 10;
    auto toggles = [](const char* p, size_t n) {
      bool q = false;
      for (size_t i = 0; i < n; ++i) q ^= p[i] == '"';
      return q;
    };
    bool open = toggles(buf_.data(), buf_.size());
    while (open) {
      if (buf_.size() > kMaxRecordBytes)
        return Err(Fail(start_line, "a quoted field runs on for more than 64 KiB (a stray '\"'?)"));
      ssize_t more = getline(&raw, &cap, f_);
      if (more < 0) return Err(Fail(start_line, "unterminated quoted field at end of file"));
      ++next_line_;
      buf_.append(raw, static_cast<size_t>(more));
      open ^= toggles(raw, static_cast<size_t>(more));
    }
    while (!buf_.empty() && (buf_.back() == '\n' || buf_.back() == '\r')) buf_.pop_back();
    if (buf_.empty()) continue;  // blank line
    if (Status s = ParseTraceRow(buf_, out); !s.ok()) return Err(Fail(start_line, s.message()));
    if (out.time_us < last_time_)
      return Err(Fail(start_line, fmt::format("time_us {} is less than the previous row's {} "
                                              "(rows must be in non-decreasing time)",
                                              out.time_us, last_time_)));
    last_time_ = out.time_us;
    line_ = start_line;
    return true;
  }
}

// ---------------------------------------------------------------- writer

TraceWriter::TraceWriter(std::string path, std::FILE* f, Options opt)
    : path_(std::move(path)), opt_(opt), f_(f) {}

Result<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path, Options opt) {
  // Opened without truncating, locked, then truncated: a file another
  // writer holds (a second mount given the same --trace-out) is refused, not
  // emptied under it (its rows went on at their old offset after a run of
  // NUL bytes: a tester's finding). Devices (/dev/null) are not locked.
  std::FILE* f = nullptr;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(fd);
        if (err == EWOULDBLOCK)
          return Err(Status::InvalidArgument(fmt::format(
              "trace '{}' is being written by another process (another mount's --trace-out?): give each its own file",
              path)));
        return Err(Status::IoError(fmt::format("cannot lock trace '{}': {}", path, std::strerror(err))));
      }
      if (::ftruncate(fd, 0) != 0) {
        const int err = errno;
        ::close(fd);
        return Err(Status::IoError(fmt::format("cannot truncate trace '{}': {}", path, std::strerror(err))));
      }
    }
    f = ::fdopen(fd, "wb");
    if (!f) ::close(fd);
  }
  if (!f) {
    // A path that cannot name a file of ours is the caller's mistake
    // (InvalidArgument); anything else (a full disk, I/O) is the machine's.
    const int err = errno;
    const std::string m = fmt::format("cannot create trace '{}': {}", path, std::strerror(err));
    const bool bad_path = err == ENOENT || err == ENOTDIR || err == EISDIR || err == EACCES || err == EPERM ||
                          err == EROFS || err == ENAMETOOLONG || err == ELOOP;
    return Err(bad_path ? Status::InvalidArgument(m) : Status::IoError(m));
  }
  std::string header(kTraceHeader);
  header.push_back('\n');
  // Written through at once: on a full disk the trace is refused here, not
  // left as a header-sized run of NUL bytes (the flusher's cut back to the
  // last whole row counted a header that never reached the file).
  if (std::fwrite(header.data(), 1, header.size(), f) != header.size() || std::fflush(f) != 0) {
    const int err = errno;
    std::fclose(f);  // not unlinked: it may not be ours to remove (a device, a user's file)
    const std::string m = fmt::format("cannot write trace '{}': {}", path, std::strerror(err));
    return Err(err == ENOSPC || err == EDQUOT ? Status::NoSpace(m) : Status::IoError(m));
  }
  std::unique_ptr<TraceWriter> w(new TraceWriter(path, f, opt));
  w->buf_.reserve(opt.flush_threshold_bytes * 2);
  w->flusher_ = std::thread([p = w.get()] { p->FlushLoop(); });
  return w;
}

TraceWriter::~TraceWriter() {
  if (Status s = Close(); !s.ok()) spdlog::warn("trace writer {}: {}", path_, s.ToString());
}

void TraceWriter::Append(uint64_t time_us, uint32_t pid, std::string_view path, uint64_t offset,
                         uint64_t length, uint64_t file_size) {
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    if (stop_) return;
    // A row is at most path + 6 numbers of <= 20 digits + quoting.
    if (buf_.size() + path.size() * 2 + 130 > opt_.max_buffered_bytes) {
      rows_dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    time_us = std::max(time_us, last_time_us_);
    last_time_us_ = time_us;
    AppendTraceRow(buf_, time_us, pid, path, offset, length, file_size);
    ++rows_in_buf_;
    wake = buf_.size() >= opt_.flush_threshold_bytes;
  }
  if (wake) cv_.notify_one();
}

void TraceWriter::FlushLoop() {
  std::string out;
  out.reserve(opt_.flush_threshold_bytes * 2);
  bool failed = false;  // a write failed: nothing more goes to the file
  long whole = std::ftell(f_);  // the file's size up to its last whole row (the header)
  while (true) {
    uint64_t rows = 0;
    bool stopping;
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(opt_.flush_interval_ms),
                   [&] { return stop_ || buf_.size() >= opt_.flush_threshold_bytes; });
      out.swap(buf_);  // the appenders keep the (cleared) capacity of `out`
      buf_.clear();
      rows = rows_in_buf_;
      rows_in_buf_ = 0;
      stopping = stop_;
    }
    if (!out.empty() && failed) {
      rows_dropped_.fetch_add(rows, std::memory_order_relaxed);
    } else if (!out.empty()) {
      // Flushed every round: a crash loses at most a round, and leaves at
      // most one torn row at the end.
      const size_t n = std::fwrite(out.data(), 1, out.size(), f_);
      if (n != out.size() || std::fflush(f_) != 0) {
        const int err = errno;
        failed = true;
        // Cut a torn row off: rows written after it would merge with it.
        // What stdio still buffers is thrown away first (else fclose would
        // write it past the cut).
        __fpurge(f_);
        if (whole >= 0 && ::ftruncate(::fileno(f_), whole) == 0) std::fseek(f_, whole, SEEK_SET);
        const Status error = Status::IoError(fmt::format("writing trace '{}': {}", path_, std::strerror(err)));
        {
          std::lock_guard lk(mu_);
          if (write_error_.ok()) write_error_ = error;
        }
        rows_dropped_.fetch_add(rows, std::memory_order_relaxed);
        // Said now, not only at the unmount: the trace ends here. (Not under
        // mu_: every read's Append takes it, and the log may be on the
        // disk that just filled up. This thread is the only writer.)
        spdlog::error("trace: {}; the trace ends at its last whole row, later rows are dropped and counted",
                      error.message());
      } else {
        whole += static_cast<long>(n);
        rows_written_.fetch_add(rows, std::memory_order_relaxed);
      }
      out.clear();
    }
    if (stopping) return;
  }
}

Status TraceWriter::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (flusher_.joinable()) flusher_.join();
  // The flusher's last round ran after stop_ was set: nothing is left in buf_.
  Status s;
  {
    std::lock_guard lk(mu_);
    s = write_error_;
  }
  if (!s.ok())
    s = Status(s.code(), fmt::format("{}; {} rows dropped, {} written", s.message(), rows_dropped(), rows_written()));
  if (std::fflush(f_) != 0 && s.ok())
    s = Status::IoError(fmt::format("flushing trace '{}': {}", path_, std::strerror(errno)));
  if (const uint64_t dropped = rows_dropped(); dropped > 0 && s.ok())
    s = Status::IoError(fmt::format("trace '{}' is incomplete: {} rows dropped (the disk did not keep up; "
                                    "{} written)", path_, dropped, rows_written()));
  if (std::fclose(f_) != 0 && s.ok())
    s = Status::IoError(fmt::format("closing trace '{}': {}", path_, std::strerror(errno)));
  f_ = nullptr;
  return s;
}

Status ReadListing(const std::string& path, const std::function<void(std::string path, uint64_t size)>& each) {
  if (IsDirectoryPath(path)) return Status::InvalidArgument(fmt::format("{}: is a directory, not a listing", path));
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  uint64_t line = 0;
  auto fail = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}:{}: {}", path, line, what));
  };
  std::string raw;
  // A path listed twice (sizes that may differ: which one?) is an error.
  std::unordered_map<std::string, uint64_t> seen;  // path -> its line
  while (std::getline(in, raw)) {
    ++line;
    std::string_view l(raw);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (line == 1 && l.substr(0, 3) == "\xEF\xBB\xBF") l.remove_prefix(3);
    if (line == 1) {
      if (l != "path,size") return fail(fmt::format("expected header 'path,size', got '{}'", l));
      continue;
    }
    if (l.empty()) continue;
    std::string p;
    std::string_view rest;
    if (l.front() == '"') {
      size_t i = 1;
      for (; i < l.size(); ++i) {
        if (l[i] != '"') {
          p.push_back(l[i]);
        } else if (i + 1 < l.size() && l[i + 1] == '"') {
          p.push_back('"');
          ++i;
        } else {
          break;
        }
      }
      if (i >= l.size() || i + 1 >= l.size() || l[i + 1] != ',') return fail("unterminated quoted path, or no size after it");
      rest = l.substr(i + 2);
    } else {
      const size_t c = l.find(',');
      if (c == std::string_view::npos || l.find(',', c + 1) != std::string_view::npos)
        return fail("expected 2 columns (path,size); quote a path that has a comma");
      p = std::string(l.substr(0, c));
      rest = l.substr(c + 1);
    }
    uint64_t size = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), size);
    if (ec == std::errc::result_out_of_range) return fail(fmt::format("size out of range: '{}'", rest));
    if (ec != std::errc() || end != rest.data() + rest.size() || rest.empty())
      return fail(fmt::format("size is not a non-negative integer: '{}'", rest));
    if (!p.empty() && p.back() == '/') continue;  // a "folder" marker object: a mount lists it as a directory
    if (p.empty() || p.front() == '/')
      return fail(fmt::format("path must be relative and not empty: '{}'", p));
    if (auto [it, fresh] = seen.try_emplace(p, line); !fresh)
      return fail(fmt::format("'{}' is listed twice (also on line {})", p, it->second));
    each(std::move(p), size);
  }
  if (in.bad()) return fail(fmt::format("read error: {}", std::strerror(errno)));
  if (line == 0) return Status::InvalidArgument(fmt::format("{}: empty (expected header 'path,size')", path));
  return Status::Ok();
}

}  // namespace igt::stream
