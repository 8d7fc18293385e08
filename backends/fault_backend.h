#pragma once
// FaultInjectingBackend: a test decorator around any Backend that counts
// calls and injects latency, failures and bad read results, so the layers
// above can be tested against a misbehaving store (mountpoint-s3 style).
//
//   auto mem = std::make_shared<igt::MemoryBackend>();
//   igt::FaultInjectingBackend fb(mem);
//   fb.FailNext(2, igt::Code::kUnavailable);            // next 2 calls fail
//   fb.FailNext(1, igt::Code::kIoError, igt::FaultInjectingBackend::kRead);
//   fb.SetFailureProbability(0.1, igt::Code::kIoError, /*seed=*/42);
//   fb.SetReadFault(igt::FaultInjectingBackend::ReadFault::kCorrupt);
//   fb.SetBeforeCall([&](auto op, const std::string& key) { /* block, count */ });
//   fb.counts().reads, fb.counts().read_bytes ...
//
// Order of effects for one call: counters++, before-call hook, latency,
// scheduled failures (FailNext), random failure, then the real call, then
// the read fault on a successful Read. Injected failures do not reach the
// inner backend. Ownership: shares the inner backend (shared_ptr).
// Thread-safety: all methods may be called concurrently.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "igtcache/backend.h"

namespace igt {

class FaultInjectingBackend : public Backend {
 public:
  // Operation bits, for FailNext's `ops` mask and the before-call hook.
  enum Op : unsigned { kList = 1, kStat = 2, kRead = 4, kProbe = 8, kAll = 15 };

  enum class ReadFault {
    kNone,
    kCorrupt,   // flip one byte of every successful non-empty read (the middle byte)
    kTruncate,  // report only half the bytes read (rounded down) of every read
  };

  struct Counts {
    uint64_t lists = 0;
    uint64_t stats = 0;
    uint64_t reads = 0;
    uint64_t read_bytes = 0;      // bytes returned to the caller by successful reads
    uint64_t probes = 0;
    uint64_t injected_failures = 0;
  };

  explicit FaultInjectingBackend(std::shared_ptr<Backend> inner);

  // Sleep this long at the start of every call (0 = none).
  void SetLatency(std::chrono::microseconds latency);
  // Fail the next `n` calls matching `ops` with `code` (cumulative with
  // earlier FailNext calls: the latest code is used).
  void FailNext(int n, Code code, unsigned ops = kAll);
  // Fail each call matching `ops` with probability p (seeded, deterministic).
  void SetFailureProbability(double p, Code code, uint64_t seed = 1, unsigned ops = kAll);
  void SetReadFault(ReadFault f);
  // Called (outside any lock) at the start of every call; may block.
  void SetBeforeCall(std::function<void(Op, const std::string& key)> hook);
  // Clears every injected behaviour (not the counters).
  void Reset();

  Counts counts() const;
  void ResetCounts();
  Backend& inner() { return *inner_; }

  Result<ListPage> List(const ListRequest& req) override;
  Result<ObjectInfo> Stat(const std::string& key) override;
  Result<size_t> Read(const std::string& key, uint64_t offset, size_t length, std::string_view etag,
                      char* out) override;
  Status Probe() override;
  Status QuickProbe() override;
  std::string Describe() const override { return "fault(" + inner_->Describe() + ")"; }
  void Cancel() override { inner_->Cancel(); }
  void NoteUnreachable() override { inner_->NoteUnreachable(); }

 private:
  // Counts the call, runs hook and latency, and decides on an injected failure.
  Status Enter(Op op, const std::string& key);

  std::shared_ptr<Backend> inner_;
  mutable std::mutex mu_;  // guards everything below; never held across inner_ calls or the hook
  std::chrono::microseconds latency_{0};
  int fail_next_ = 0;
  unsigned fail_next_ops_ = kAll;
  Code fail_next_code_ = Code::kIoError;
  double fail_p_ = 0;
  unsigned fail_p_ops_ = kAll;
  Code fail_p_code_ = Code::kIoError;
  std::mt19937_64 rng_{1};
  ReadFault read_fault_ = ReadFault::kNone;
  std::shared_ptr<std::function<void(Op, const std::string&)>> hook_;
  Counts counts_;
};

}  // namespace igt
