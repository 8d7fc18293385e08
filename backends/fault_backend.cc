#include "backends/fault_backend.h"

#include <thread>

namespace igt {

FaultInjectingBackend::FaultInjectingBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

void FaultInjectingBackend::SetLatency(std::chrono::microseconds latency) {
  std::lock_guard lock(mu_);
  latency_ = latency;
}

void FaultInjectingBackend::FailNext(int n, Code code, unsigned ops) {
  std::lock_guard lock(mu_);
  fail_next_ += n;
  fail_next_code_ = code;
  fail_next_ops_ = ops;
}

void FaultInjectingBackend::SetFailureProbability(double p, Code code, uint64_t seed, unsigned ops) {
  std::lock_guard lock(mu_);
  fail_p_ = p;
  fail_p_code_ = code;
  fail_p_ops_ = ops;
  rng_.seed(seed);
}

void FaultInjectingBackend::SetReadFault(ReadFault f) {
  std::lock_guard lock(mu_);
  read_fault_ = f;
}

void FaultInjectingBackend::SetBeforeCall(std::function<void(Op, const std::string&)> hook) {
  std::lock_guard lock(mu_);
  hook_ = hook ? std::make_shared<std::function<void(Op, const std::string&)>>(std::move(hook)) : nullptr;
}

void FaultInjectingBackend::Reset() {
  std::lock_guard lock(mu_);
  latency_ = std::chrono::microseconds(0);
  fail_next_ = 0;
  fail_p_ = 0;
  read_fault_ = ReadFault::kNone;
  hook_.reset();
}

FaultInjectingBackend::Counts FaultInjectingBackend::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

void FaultInjectingBackend::ResetCounts() {
  std::lock_guard lock(mu_);
  counts_ = Counts{};
}

Status FaultInjectingBackend::Enter(Op op, const std::string& key) {
  std::shared_ptr<std::function<void(Op, const std::string&)>> hook;
  std::chrono::microseconds latency{0};
  {
    std::lock_guard lock(mu_);
    switch (op) {
      case kList: ++counts_.lists; break;
      case kStat: ++counts_.stats; break;
      case kRead: ++counts_.reads; break;
      case kProbe: ++counts_.probes; break;
      default: break;
    }
    hook = hook_;
    latency = latency_;
  }
  if (hook) (*hook)(op, key);
  if (latency.count() > 0) std::this_thread::sleep_for(latency);
  std::lock_guard lock(mu_);
  std::string_view name = op == kList ? "List" : op == kStat ? "Stat" : op == kRead ? "Read" : "Probe";
  if (fail_next_ > 0 && (fail_next_ops_ & op)) {
    --fail_next_;
    ++counts_.injected_failures;
    return Status(fail_next_code_, "injected failure in " + std::string(name) + " '" + key + "'");
  }
  if (fail_p_ > 0 && (fail_p_ops_ & op) && std::uniform_real_distribution<double>(0, 1)(rng_) < fail_p_) {
    ++counts_.injected_failures;
    return Status(fail_p_code_, "injected random failure in " + std::string(name) + " '" + key + "'");
  }
  return Status::Ok();
}

Result<ListPage> FaultInjectingBackend::List(const ListRequest& req) {
  if (Status s = Enter(kList, req.prefix); !s.ok()) return Err(s);
  return inner_->List(req);
}

Result<ObjectInfo> FaultInjectingBackend::Stat(const std::string& key) {
  if (Status s = Enter(kStat, key); !s.ok()) return Err(s);
  return inner_->Stat(key);
}

Result<size_t> FaultInjectingBackend::Read(const std::string& key, uint64_t offset, size_t length,
                                           std::string_view etag, char* out) {
  if (Status s = Enter(kRead, key); !s.ok()) return Err(s);
  auto r = inner_->Read(key, offset, length, etag, out);
  if (!r) return r;
  size_t n = *r;
  ReadFault fault;
  {
    std::lock_guard lock(mu_);
    fault = read_fault_;
  }
  if (fault == ReadFault::kCorrupt && n > 0) out[n / 2] = static_cast<char>(out[n / 2] ^ 0x5a);
  if (fault == ReadFault::kTruncate) n /= 2;
  std::lock_guard lock(mu_);
  counts_.read_bytes += n;
  return n;
}

Status FaultInjectingBackend::Probe() {
  if (Status s = Enter(kProbe, ""); !s.ok()) return s;
  return inner_->Probe();
}

Status FaultInjectingBackend::QuickProbe() {
  if (Status s = Enter(kProbe, ""); !s.ok()) return s;
  return inner_->QuickProbe();
}

}  // namespace igt
