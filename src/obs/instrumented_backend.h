#pragma once
// InstrumentedBackend: a decorator that counts every call the mount makes to
// its Backend (list / stat / read / probe) by outcome (igt::Code) and times
// it into a fixed-bucket latency histogram, for the Prometheus endpoint
// (docs/METRICS.md). It adds no behaviour: results pass through unchanged.
//
// Ownership: the decorator owns the inner backend; BackendStats is owned by
// the caller (the mount) and must outlive the decorator and every reader.
// Thread-safety: all counters are relaxed atomics; any thread may record or
// read at any time. A reader may see a histogram whose count and buckets are
// a few samples apart (each field is exact on its own), as with any
// lock-free Prometheus client.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "igtcache/backend.h"
#include "igtcache/status.h"

namespace igt::obs {

enum class BackendOp { kList = 0, kStat, kRead, kProbe };
inline constexpr int kBackendOpCount = 4;
// The S3-style request each op stands for ("get" is a ranged GET).
std::string_view BackendOpName(BackendOp op);  // "list" | "head" | "get" | "probe"

inline constexpr int kCodeCount = static_cast<int>(Code::kInternal) + 1;
// Snake-case label value of a Code: "ok", "not_found", "unavailable", ...
std::string_view CodeLabel(Code c);

// Upper bounds (seconds) of the latency histogram buckets. S3 first-byte
// latency is ~20-30 ms with a p99 of 100-200 ms (DESIGN.md sec. 8); a local
// directory answers in microseconds; retries can take seconds. So: 100 us to
// 10 s, roughly x2.5 per step, plus the implicit +Inf.
inline constexpr std::array<double, 14> kLatencyBucketsS = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   10.0};

struct OpCounters {
  std::array<std::atomic<uint64_t>, kCodeCount> by_code{};             // calls by outcome
  std::array<std::atomic<uint64_t>, kLatencyBucketsS.size() + 1> buckets{};  // non-cumulative; last = +Inf
  std::atomic<uint64_t> latency_sum_ns{0};
  std::atomic<uint64_t> bytes{0};  // bytes returned by successful reads (kRead only)
};

class BackendStats {
 public:
  void Record(BackendOp op, Code code, uint64_t latency_ns, uint64_t bytes);
  const OpCounters& op(BackendOp o) const { return ops_[static_cast<int>(o)]; }
  uint64_t calls(BackendOp o) const;  // all outcomes

 private:
  std::array<OpCounters, kBackendOpCount> ops_;
};

// Wraps `inner`; every call is recorded in `stats` (not owned).
std::unique_ptr<Backend> Instrument(std::unique_ptr<Backend> inner, BackendStats* stats);

}  // namespace igt::obs
