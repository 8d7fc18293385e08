#include "src/obs/instrumented_backend.h"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace igt::obs {

std::string_view BackendOpName(BackendOp op) {
  switch (op) {
    case BackendOp::kList: return "list";
    case BackendOp::kStat: return "head";
    case BackendOp::kRead: return "get";
    case BackendOp::kProbe: return "probe";
  }
  return "unknown";
}

std::string_view CodeLabel(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kNotFound: return "not_found";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kIoError: return "io_error";
    case Code::kUnavailable: return "unavailable";
    case Code::kTimeout: return "timeout";
    case Code::kCorruption: return "corruption";
    case Code::kNoSpace: return "no_space";
    case Code::kChanged: return "changed";
    case Code::kBusy: return "busy";
    case Code::kNotSupported: return "not_supported";
    case Code::kReadOnly: return "read_only";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

void BackendStats::Record(BackendOp op, Code code, uint64_t latency_ns, uint64_t bytes) {
  OpCounters& c = ops_[static_cast<int>(op)];
  const int ci = static_cast<int>(code);
  c.by_code[ci >= 0 && ci < kCodeCount ? ci : static_cast<int>(Code::kInternal)].fetch_add(
      1, std::memory_order_relaxed);
  const double s = static_cast<double>(latency_ns) * 1e-9;
  size_t b = 0;
  while (b < kLatencyBucketsS.size() && s > kLatencyBucketsS[b]) ++b;
  c.buckets[b].fetch_add(1, std::memory_order_relaxed);
  c.latency_sum_ns.fetch_add(latency_ns, std::memory_order_relaxed);
  if (bytes) c.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

uint64_t BackendStats::calls(BackendOp o) const {
  uint64_t n = 0;
  for (const auto& c : op(o).by_code) n += c.load(std::memory_order_relaxed);
  return n;
}

namespace {

class InstrumentedBackend final : public Backend {
 public:
  InstrumentedBackend(std::unique_ptr<Backend> inner, BackendStats* stats)
      : inner_(std::move(inner)), stats_(stats) {}

  Result<ListPage> List(const ListRequest& req) override {
    Timer t;
    auto r = inner_->List(req);
    Done(BackendOp::kList, r ? Status::Ok() : r.error(), t, 0, [&] {
      return fmt::format("'{}'{}{}", req.prefix, req.continuation_token.empty() ? "" : " (next page)",
                         r ? fmt::format(": {} objects, {} prefixes", r->objects.size(), r->prefixes.size()) : "");
    });
    return r;
  }
  Result<ObjectInfo> Stat(const std::string& key) override {
    Timer t;
    auto r = inner_->Stat(key);
    Done(BackendOp::kStat, r ? Status::Ok() : r.error(), t, 0, [&] { return fmt::format("'{}'", key); });
    return r;
  }
  Result<size_t> Read(const std::string& key, uint64_t offset, size_t length, std::string_view etag,
                      char* out) override {
    Timer t;
    auto r = inner_->Read(key, offset, length, etag, out);
    Done(BackendOp::kRead, r ? Status::Ok() : r.error(), t, r ? *r : 0,
         [&] { return fmt::format("'{}' [{}, +{})", key, offset, length); });
    return r;
  }
  Status Probe() override { return TimedProbe(&Backend::Probe); }
  Status QuickProbe() override { return TimedProbe(&Backend::QuickProbe); }
  std::string Describe() const override { return inner_->Describe(); }
  void Cancel() override { inner_->Cancel(); }
  void NoteUnreachable() override { inner_->NoteUnreachable(); }

 private:
  struct Timer {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    uint64_t ns() const {
      return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - start).count());
    }
  };
  Status TimedProbe(Status (Backend::*probe)()) {
    Timer t;
    Status s = (inner_.get()->*probe)();
    Done(BackendOp::kProbe, s, t, 0, [this] { return Describe(); });
    return s;
  }

  // Counted, and at debug level logged: one line per backend call (after
  // its retries), `what` made only when the line is written.
  template <class F>
  void Done(BackendOp op, const Status& s, const Timer& t, uint64_t bytes, F&& what) {
    const uint64_t ns = t.ns();
    stats_->Record(op, s.code(), ns, bytes);
    if (!spdlog::should_log(spdlog::level::debug)) return;
    spdlog::debug("backend: {} {} -> {}{} in {:.1f} ms", BackendOpName(op), what(),
                  s.ok() ? "ok" : s.ToString(), bytes ? fmt::format(", {} bytes", bytes) : "",
                  static_cast<double>(ns) / 1e6);
  }

  const std::unique_ptr<Backend> inner_;
  BackendStats* const stats_;
};

}  // namespace

std::unique_ptr<Backend> Instrument(std::unique_ptr<Backend> inner, BackendStats* stats) {
  return std::make_unique<InstrumentedBackend>(std::move(inner), stats);
}

}  // namespace igt::obs
