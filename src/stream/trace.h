#pragma once
// Read traces (docs/TRACES.md): one CSV row per read as the FUSE layer sees
// it, header exactly `time_us,pid,path,offset,length,file_size`, path relative
// to the mount root (no leading '/'), rows in non-decreasing time. A path that
// contains ',', '"', CR or LF is quoted as in RFC 4180 ("" inside quotes).
//
//   TraceReader  streams a trace file row by row; every error is an
//                InvalidArgument naming the file, the line and what is wrong.
//   TraceWriter  records the live mount: Append() only formats into an
//                in-memory buffer under a short mutex (no I/O, no allocation
//                once the buffer has grown); a background thread writes the
//                buffer out. If the disk cannot keep up, rows beyond
//                max_buffered_bytes are dropped and counted, never blocking
//                the read path.
// Thread-safety: TraceReader is single-threaded. TraceWriter::Append is safe
// from any number of threads; Open/Close from one owner thread.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "igtcache/status.h"

namespace igt::stream {

inline constexpr std::string_view kTraceHeader = "time_us,pid,path,offset,length,file_size";

// The bytes of a read of [offset, offset + length) that a file of
// `file_size` has: 0 at or past its end. What the mount records, and what
// sim and classify replay (a trace from elsewhere may carry the length the
// kernel asked for).
inline uint64_t BytesInFile(uint64_t offset, uint64_t length, uint64_t file_size) {
  return offset >= file_size ? 0 : std::min(length, file_size - offset);
}

struct TraceRecord {
  uint64_t time_us = 0;    // microseconds, any fixed origin; non-decreasing
  uint32_t pid = 0;        // reader process
  std::string path;        // relative to the mount root, '/'-separated
  uint64_t offset = 0;     // bytes
  uint64_t length = 0;     // bytes requested
  uint64_t file_size = 0;  // the object's size in bytes
};

// Appends one CSV row (with '\n') for `r` to `out`; quotes the path if needed.
void AppendTraceRow(std::string& out, uint64_t time_us, uint32_t pid, std::string_view path,
                    uint64_t offset, uint64_t length, uint64_t file_size);

// Parses one data row (no line terminator) into `out`. On error returns
// InvalidArgument "<what is wrong>" (without the line prefix).
Status ParseTraceRow(std::string_view line, TraceRecord& out);

// Reads a listing CSV (docs/TRACES.md, "Listings": header `path,size`; a
// path containing `,` or `"` is quoted, inner quotes doubled) and calls
// `each` for every object row ("folder" markers ending in '/' skipped).
// Errors: InvalidArgument "<file>:<line>: <what>".
Status ReadListing(const std::string& path, const std::function<void(std::string path, uint64_t size)>& each);

class TraceReader {
 public:
  // Opens the file and checks the header line.
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Reads the next row into `out`. Returns true on a row, false at the end of
  // the file, or InvalidArgument "<file>:<line>: <what>". Blank lines are
  // skipped; quoted paths may span lines (RFC 4180).
  Result<bool> Next(TraceRecord& out);
  uint64_t line() const { return line_; }  // line number of the last row read

 private:
  TraceReader(std::string name, std::FILE* f) : name_(std::move(name)), f_(f) {}
  Status Fail(uint64_t line, const std::string& what) const;
  std::string name_;
  std::FILE* f_;
  uint64_t line_ = 1;       // line of the last row returned (header = 1)
  uint64_t next_line_ = 2;  // line number where the next row starts
  uint64_t last_time_ = 0;
  std::string buf_;
  char* linebuf_ = nullptr;  // getline() buffer, reused across rows (malloc'd)
  size_t linebuf_cap_ = 0;
};

class TraceWriter {
 public:
  struct Options {
    // Flush the buffer at least this often. Default: 200 ms
    uint32_t flush_interval_ms = 200;
    // Wake the flusher early once this many bytes are buffered. Default: 1 MiB
    size_t flush_threshold_bytes = 1 << 20;
    // Rows that would grow the buffer beyond this are dropped (disk too slow).
    // Default: 64 MiB
    size_t max_buffered_bytes = 64 << 20;
  };

  // Creates/truncates `path`, writes the header, starts the flusher thread.
  static Result<std::unique_ptr<TraceWriter>> Open(const std::string& path, Options opt);
  static Result<std::unique_ptr<TraceWriter>> Open(const std::string& path) { return Open(path, Options{}); }
  ~TraceWriter();  // Close()s if still open; errors are logged only

  // Cheap: formats one row into the buffer under a short mutex. Rows stay in
  // non-decreasing time (the format's rule): a time below the last row's,
  // taken by a thread that appended late, is written as the last row's.
  void Append(uint64_t time_us, uint32_t pid, std::string_view path, uint64_t offset,
              uint64_t length, uint64_t file_size);
  void Append(const TraceRecord& r) { Append(r.time_us, r.pid, r.path, r.offset, r.length, r.file_size); }

  // Stops the flusher, writes everything buffered, closes the file. The first
  // write/close error seen since Open is returned, else an error if rows were
  // dropped (the trace is incomplete). Idempotent. After a failed write
  // nothing more is written, and the file is cut back to its last whole row.
  Status Close();

  uint64_t rows_written() const { return rows_written_.load(std::memory_order_relaxed); }
  uint64_t rows_dropped() const { return rows_dropped_.load(std::memory_order_relaxed); }

 private:
  TraceWriter(std::string path, std::FILE* f, Options opt);
  void FlushLoop();

  const std::string path_;
  const Options opt_;
  std::FILE* f_;  // owned by the flusher thread while it runs, then by Close()

  std::mutex mu_;               // guards buf_, rows_in_buf_, stop_, write_error_
  std::condition_variable cv_;  // flusher waits on it
  std::string buf_;             // rows appended since the last swap (guarded by mu_)
  uint64_t rows_in_buf_ = 0;    // (guarded by mu_)
  uint64_t last_time_us_ = 0;   // time of the last row appended (guarded by mu_)
  bool stop_ = false;           // (guarded by mu_)
  Status write_error_;          // first write error (guarded by mu_)
  bool closed_ = false;         // owner thread only

  std::atomic<uint64_t> rows_written_{0};
  std::atomic<uint64_t> rows_dropped_{0};
  std::thread flusher_;
};

}  // namespace igt::stream
