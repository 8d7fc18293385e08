// Trace CSV reader/writer: round trip, quoting, and errors naming the line.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <sys/resource.h>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>
#include <vector>
#include <fstream>
#include <string>

#include "src/stream/classify.h"
#include "src/stream/trace.h"

using namespace igt::stream;

namespace {
std::string TempPath(const std::string& name) {
  return "/tmp/igt_stream_test_" + std::to_string(::getpid()) + "_" + name;
}
void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}
std::string ReadError(const std::string& text) {
  std::string p = TempPath("bad.csv");
  WriteFile(p, text);
  auto r = TraceReader::Open(p);
  std::string msg;
  if (!r) {
    msg = r.error().message();
  } else {
    TraceRecord rec;
    while (true) {
      auto n = (*r)->Next(rec);
      if (!n) {
        msg = n.error().message();
        REQUIRE(n.error().code() == igt::Code::kInvalidArgument);
        break;
      }
      if (!*n) break;
    }
  }
  std::remove(p.c_str());
  return msg;
}
}  // namespace

TEST_CASE("trace rows round-trip, with RFC 4180 quoting of odd paths", "[trace]") {
  std::string csv(kTraceHeader);
  csv += "\n";
  AppendTraceRow(csv, 10, 7, "a/b.bin", 0, 4096, 1 << 20);
  AppendTraceRow(csv, 10, 8, "dir, with comma/\"quoted\".jpg", 5, 6, 7);
  AppendTraceRow(csv, 12, 9, "multi\nline", 1, 2, 3);
  REQUIRE(csv.find("\"dir, with comma/\"\"quoted\"\".jpg\"") != std::string::npos);
  std::string p = TempPath("rt.csv");
  WriteFile(p, csv);
  auto r = TraceReader::Open(p);
  REQUIRE(r.has_value());
  TraceRecord rec;
  REQUIRE(*(*r)->Next(rec));
  CHECK(rec.time_us == 10);
  CHECK(rec.pid == 7);
  CHECK(rec.path == "a/b.bin");
  CHECK(rec.length == 4096);
  CHECK(rec.file_size == (1 << 20));
  REQUIRE(*(*r)->Next(rec));
  CHECK(rec.path == "dir, with comma/\"quoted\".jpg");
  CHECK(rec.offset == 5);
  REQUIRE(*(*r)->Next(rec));
  CHECK(rec.path == "multi\nline");
  CHECK((*r)->line() == 4);
  CHECK_FALSE(*(*r)->Next(rec));
  std::remove(p.c_str());
}

TEST_CASE("malformed traces give an error naming the line", "[trace]") {
  const std::string h = std::string(kTraceHeader) + "\n";
  CHECK_THAT(ReadError("time,pid,path\n1,2,a,0,1,1\n"), Catch::Contains(":1: expected header"));
  CHECK_THAT(ReadError(h + "1,2,a,0,1,1\n2,3,b,0,1\n"), Catch::Contains(":3: expected 6 columns") );
  CHECK_THAT(ReadError(h + "1,2,a,0,1,1\n2,3,b,0,1,1,9\n"), Catch::Contains(":3: expected 6 columns"));
  CHECK_THAT(ReadError(h + "1,2,a,0,1,1\n2,x3,b,0,1,1\n"),
             Catch::Contains(":3: column 2 (pid) is not a non-negative integer: 'x3'"));
  CHECK_THAT(ReadError(h + "1,2,a,zero,1,1\n"), Catch::Contains(":2: column 4 (offset)"));
  CHECK_THAT(ReadError(h + "1,2,a,0,-1,1\n"), Catch::Contains(":2: column 5 (length)"));
  CHECK_THAT(ReadError(h + "1,2,a,0,1,\n"), Catch::Contains(":2: column 6 (file_size) is empty"));
  CHECK_THAT(ReadError(h + "5,2,a,0,1,1\n5,2,a,1,1,1\n\n4,2,a,2,1,1\n"),
             Catch::Contains(":5: time_us 4 is less than the previous row's 5"));
  CHECK_THAT(ReadError(h + "1,2,/abs/path,0,1,1\n"), Catch::Contains(":2: column 3 (path) must be relative"));
  CHECK_THAT(ReadError(h + "1,2,\"open,0,1,1\n"), Catch::Contains(":2: unterminated quoted field"));
  CHECK_THAT(ReadError(h + "1,2,,0,1,1\n"), Catch::Contains(":2: column 3 (path) is empty"));
  // Paths a mount never writes (it replayed them as files of their own).
  for (const char* p : {"../a", "./a", "a//b", "a/./b", "a/..", ".."})
    CHECK_THAT(ReadError(h + "1,2," + p + ",0,1,1\n"), Catch::Contains(":2: column 3 (path) has an empty, '.' or '..' component"));
  CHECK_THAT(ReadError(h + std::string("1,2,a\0b,0,1,1\n", 14)), Catch::Contains(":2: column 3 (path) holds a NUL byte"));
  CHECK_THAT(ReadError(h + "99999999999999999999999,2,a,0,1,1\n"), Catch::Contains(":2: column 1 (time_us) is out of range"));
  // CRLF line ends are accepted.
  CHECK(ReadError(std::string(kTraceHeader) + "\r\n1,2,a,0,1,1\r\n") == "");
}

TEST_CASE("ClassifyTrace reports a malformed line and a missing file", "[trace]") {
  std::string p = TempPath("bad2.csv");
  WriteFile(p, std::string(kTraceHeader) + "\n1,2,a,0,1,1\n2,2,a,0,1\n");
  auto j = ClassifyTrace(p, StreamConfig{});
  REQUIRE_FALSE(j.has_value());
  CHECK(j.error().code() == igt::Code::kInvalidArgument);
  CHECK_THAT(j.error().message(), Catch::Contains(p + ":3: expected 6 columns"));
  std::remove(p.c_str());
  auto m = ClassifyTrace(TempPath("does_not_exist.csv"), StreamConfig{});
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code() == igt::Code::kNotFound);
  StreamConfig bad;
  bad.alpha = 2;
  auto v = ClassifyTrace(p, bad);
  REQUIRE_FALSE(v.has_value());
  CHECK_THAT(v.error().message(), Catch::Contains("stream.alpha"));
}

TEST_CASE("ClassifyTrace with a listing: files nobody read count as children", "[trace]") {
  // 4 of 48 class directories read evenly: the trace alone sees 4 children
  // (uniform: random); the listing shows 48, of which 4 are hot (skewed), as
  // a mount labels it.
  std::string trace = std::string(kTraceHeader) + "\n", listing = "path,size\n";
  for (int c = 0; c < 48; ++c)
    for (int f = 0; f < 40; ++f) listing += "train/c" + std::to_string(c) + "/f" + std::to_string(f) + ",100\n";
  std::mt19937_64 rng(3);
  for (int i = 0; i < 400; ++i) {
    const int c = int(rng() % 4) * 12, f = int(rng() % 40);
    trace += std::to_string(i * 1000) + ",7,train/c" + std::to_string(c) + "/f" + std::to_string(f) + ",0,100,100\n";
  }
  const std::string tp = TempPath("cls.csv"), lp = TempPath("cls_listing.csv");
  WriteFile(tp, trace);
  WriteFile(lp, listing);
  auto pattern_of = [](const nlohmann::json& j, const std::string& path) {
    for (const auto& s : j["streams"])
      if (s["path"] == path) return s["pattern"].get<std::string>();
    return std::string("(none)");
  };
  auto alone = ClassifyTrace(tp, StreamConfig{});
  auto listed = ClassifyTrace(tp, StreamConfig{}, lp);
  REQUIRE(alone.has_value());
  REQUIRE(listed.has_value());
  CHECK(pattern_of(*alone, "train/") == "random");
  CHECK(pattern_of(*listed, "train/") == "skewed");
  // A bad listing is named with its line.
  WriteFile(lp, "path,size\ntrain/a,ten\n");
  auto bad = ClassifyTrace(tp, StreamConfig{}, lp);
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message(), Catch::Contains(lp + ":2: size is not a non-negative integer"));
  std::remove(tp.c_str());
  std::remove(lp.c_str());
}

// The rows of the trace at `p`, read back.
std::vector<TraceRecord> RowsIn(const std::string& p) {
  auto r = TraceReader::Open(p);
  REQUIRE(r.has_value());
  std::vector<TraceRecord> rows;
  TraceRecord rec;
  while (true) {
    auto more = (*r)->Next(rec);
    REQUIRE(more.has_value());
    if (!*more) return rows;
    rows.push_back(rec);
  }
}

TEST_CASE("TraceWriter writes every appended row from many threads", "[trace]") {
  std::string p = TempPath("w.csv");
  TraceWriter::Options opt;
  opt.flush_interval_ms = 5;
  opt.flush_threshold_bytes = 4096;
  auto w = TraceWriter::Open(p, opt);
  REQUIRE(w.has_value());
  constexpr int kThreads = 8, kRows = 5000;
  std::vector<std::thread> ts;
  std::atomic<uint64_t> clock{0};
  std::mutex order;  // rows must be in non-decreasing time: take time and append together
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kRows; ++i) {
        std::lock_guard lk(order);
        (*w)->Append(clock++, 100 + t, "d,ir/f" + std::to_string(t), uint64_t(i) * 10, 10, 1000000);
      }
    });
  }
  for (auto& t : ts) t.join();
  REQUIRE((*w)->Close().ok());
  CHECK((*w)->rows_written() == kThreads * kRows);
  CHECK((*w)->rows_dropped() == 0);
  const auto rows = RowsIn(p);
  for (uint64_t n = 0; n < rows.size(); ++n) CHECK(rows[n].time_us == n);
  CHECK(rows.size() == kThreads * kRows);
  std::remove(p.c_str());
}

TEST_CASE("a row appended late with an earlier time is written in order (concurrent FUSE threads)") {
  const std::string p = TempPath("late");
  {
    auto w = TraceWriter::Open(p);
    REQUIRE(w.has_value());
    (*w)->Append(101, 1, "a", 0, 10, 100);
    (*w)->Append(100, 2, "b", 0, 10, 100);  // its thread took the time first, appended second
    (*w)->Append(102, 1, "a", 10, 10, 100);
    REQUIRE((*w)->Close().ok());
  }
  auto r = TraceReader::Open(p);
  REQUIRE(r.has_value());
  TraceRecord rec;
  std::vector<uint64_t> times;
  while (true) {
    auto more = (*r)->Next(rec);
    REQUIRE(more.has_value());  // the reader rejects time going backwards
    if (!*more) break;
    times.push_back(rec.time_us);
  }
  CHECK(times == std::vector<uint64_t>{101, 101, 102});
  std::remove(p.c_str());
}

TEST_CASE("a stray quote is an error naming its line, not the rest of the file read as one row") {
  const std::string p = TempPath("stray");
  {
    std::ofstream f(p);
    f << "time_us,pid,path,offset,length,file_size\n0,1,a,0,10,100\n1,1,5\" floppy.img,0,10,10\n";
    for (int i = 0; i < 20000; ++i) f << i + 2 << ",1,b,0,10,100\n";
  }
  auto r = TraceReader::Open(p);
  REQUIRE(r.has_value());
  TraceRecord rec;
  REQUIRE((*r)->Next(rec).value());
  auto bad = (*r)->Next(rec);
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message(), Catch::Contains(":3:"));
  std::remove(p.c_str());
}

TEST_CASE("TraceWriter on a full disk is refused at open, with the reason", "[trace]") {
  // /dev/full takes the open and fails every write with ENOSPC. Before, the
  // header stayed in stdio's buffer, the open succeeded, and the first
  // failed flush cut the file back to a header-sized run of NUL bytes.
  if (::access("/dev/full", W_OK) != 0) return;  // no such device here: nothing to check
  auto w = TraceWriter::Open("/dev/full", {});
  REQUIRE_FALSE(w.has_value());
  CHECK_THAT(w.error().message(), Catch::Contains("No space left on device"));
  CHECK(w.error().code() == igt::Code::kNoSpace);  // the mount exits 1 (runtime), not 2 (usage)
}

TEST_CASE("TraceWriter: a trace another writer holds is refused, not emptied under it", "[trace]") {
  // Two mounts given one --trace-out: the second truncated the file and the
  // first went on writing at its old offset after a run of NUL bytes.
  char tmpl[] = "/tmp/igt-trace-lock-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    auto a = TraceWriter::Open(tmpl, {});
    REQUIRE(a.has_value());
    (*a)->Append(1, 7, "x/a.bin", 0, 10, 10);
    auto b = TraceWriter::Open(tmpl, {});
    REQUIRE_FALSE(b.has_value());
    CHECK_THAT(b.error().message(), Catch::Contains("being written by another process"));
    REQUIRE((*a)->Close().ok());
  }
  CHECK(RowsIn(tmpl).size() == 1);
  auto again = TraceWriter::Open(tmpl, {});  // its writer gone: truncated and written anew
  REQUIRE(again.has_value());
  REQUIRE((*again)->Close().ok());
  CHECK(RowsIn(tmpl).empty());
  ::unlink(tmpl);
}

TEST_CASE("TraceWriter: a write that fails later ends the trace at its last whole row", "[trace]") {
  // RLIMIT_FSIZE with SIGXFSZ ignored: a write past the limit fails with
  // EFBIG, as a disk filling up mid-trace does with ENOSPC. (ctest runs each
  // test case in a process of its own; the limit is put back anyway.)
  const std::string p = TempPath("fsize.csv");
  struct FsizeLimit {  // put back however the test ends
    rlimit old{};
    void (*old_handler)(int) = SIG_DFL;
    bool set = false;
    bool handler_set = false;
    explicit FsizeLimit(rlim_t bytes) {
      if (::getrlimit(RLIMIT_FSIZE, &old) != 0) return;
      old_handler = std::signal(SIGXFSZ, SIG_IGN);
      handler_set = true;
      rlimit lim = old;
      lim.rlim_cur = bytes;
      set = ::setrlimit(RLIMIT_FSIZE, &lim) == 0;
    }
    ~FsizeLimit() {  // only what the constructor changed
      if (set) ::setrlimit(RLIMIT_FSIZE, &old);
      if (handler_set) std::signal(SIGXFSZ, old_handler);
    }
  };
  auto limit = std::make_unique<FsizeLimit>(2000);
  REQUIRE(limit->set);
  TraceWriter::Options o;
  o.flush_interval_ms = 5;
  auto w = TraceWriter::Open(p, o);
  REQUIRE(w.has_value());
  auto wait_for = [](auto done) {
    for (int i = 0; i < 10000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
  };
  for (int i = 0; i < 10; ++i) (*w)->Append(i, 1, "a/file", i * 4096, 4096, 1 << 20);
  REQUIRE(wait_for([&] { return (*w)->rows_written() == 10; }));
  // Past the limit: the first row alone does not fit (a 2 KB path), so the
  // write that holds it fails however the flusher splits the rows.
  (*w)->Append(10, 1, std::string(2000, 'x'), 0, 4096, 1 << 20);
  for (int i = 1; i < 100; ++i) (*w)->Append(10 + i, 1, "a/file", i * 4096, 4096, 1 << 20);
  REQUIRE(wait_for([&] { return (*w)->rows_dropped() == 100; }));
  (*w)->Append(200, 1, "a/file", 0, 4096, 1 << 20);  // after the failure: dropped, counted
  igt::Status s = (*w)->Close();
  limit.reset();
  CHECK_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("File too large") && Catch::Contains("101 rows dropped, 10 written"));
  auto r = TraceReader::Open(p);  // the header and the 10 rows, no torn row
  REQUIRE(r.has_value());
  TraceRecord rec;
  int rows = 0;
  while (true) {
    auto more = (*r)->Next(rec);
    REQUIRE(more.has_value());
    if (!*more) break;
    ++rows;
  }
  CHECK(rows == 10);
  std::remove(p.c_str());
}
