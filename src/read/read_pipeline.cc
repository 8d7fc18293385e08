#include "src/read/read_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <future>
#include <new>
#include <optional>
#include <cstring>
#include <fmt/format.h>
#include <vector>

namespace igt {

// One in-flight fetch of one unit; followers wait on it.
struct ReadPipeline::Flight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // guarded by mu
  Status status;           // guarded by mu
  // The whole unit once done && status.ok(): `size` bytes at `data`, inside
  // `buf` (the buffer of the GET that fetched it, shared by its units: no
  // copy per unit). Guarded by mu.
  std::shared_ptr<const char[]> buf;
  const char* data = nullptr;
  size_t size = 0;
  // Led by Fetch (a prefetch): a reader that waited on it and saw it fail
  // tries once itself, as if it had missed alone. Set before it is shared.
  bool prefetch = false;
  // Ended by Abandon: if it could not be taken out of the table, the next
  // AddNeedLocked replaces it instead of joining it.
  std::atomic<bool> abandoned{false};
};

// A store unit (a whole unit or a sub-unit) this call is responsible for.
struct ReadPipeline::Need {
  uint64_t index;     // UnitKey::index
  uint64_t off, len;  // the object's bytes it holds
  std::shared_ptr<Flight> flight;
  bool leader;
};

// Calls Abandon on scope exit by an exception.
class ReadPipeline::LeadGuard {
 public:
  LeadGuard(ReadPipeline* p, const FileVersion& f, std::vector<Need>& needs)
      : p_(p), f_(f), needs_(needs), exceptions_(std::uncaught_exceptions()) {}
  ~LeadGuard() {
    if (std::uncaught_exceptions() > exceptions_) p_->Abandon(f_, needs_);
  }
  LeadGuard(const LeadGuard&) = delete;
  LeadGuard& operator=(const LeadGuard&) = delete;

 private:
  ReadPipeline* p_;
  const FileVersion& f_;
  std::vector<Need>& needs_;
  int exceptions_;
};

namespace {
// Room for one more element, growing geometrically (reserve(size() + 1)
// alone would reallocate at every push_back).
template <class V>
void ReserveOne(V& v) {
  if (v.size() == v.capacity()) v.reserve(std::max<size_t>(8, 2 * v.capacity()));
}
}  // namespace

ReadPipeline::ReadPipeline(Backend* backend, BlockStore* store, Metrics* metrics, Options opts)
    : backend_(backend), store_(store), metrics_(metrics), opts_(std::move(opts)) {}

std::string ReadPipeline::FlightKey(const FileVersion& f, uint64_t index) const {
  std::string k = f.key;
  k.push_back('\0');
  k += f.etag;
  k.push_back('\0');
  k += std::to_string(index);
  return k;
}

bool ReadPipeline::InFlight(const FileVersion& file, uint64_t index) {
  std::lock_guard lk(mu_);
  return InFlightLocked(file, index);
}

void ReadPipeline::Unlist(const FileVersion& file, uint64_t index) {
  std::lock_guard lk(mu_);
  flights_.erase(FlightKey(file, index));
}

void ReadPipeline::Abandon(const FileVersion& file, std::vector<Need>& needs) noexcept {
  for (auto& n : needs) {
    if (!n.leader || !n.flight) continue;
    auto& fl = n.flight;
    {
      std::lock_guard lk(fl->mu);
      if (fl->done) continue;
    }
    // Out of the table first (only if it is still ours), so a later reader
    // starts a new flight instead of joining this failed one.
    fl->abandoned = true;
    try {
      std::lock_guard lk(mu_);
      auto it = flights_.find(FlightKey(file, n.index));
      if (it != flights_.end() && it->second == fl) flights_.erase(it);
    } catch (...) {
      // No memory for the key: it stays listed, marked abandoned, and the
      // next AddNeedLocked for it starts a new flight in its place.
    }
    {
      std::lock_guard lk(fl->mu);
      try {
        fl->status = Status::Internal("read abandoned (out of memory or an internal error); retry");
      } catch (...) {
        // Left ok with no data: a follower's collect reports a short unit.
      }
      fl->done = true;
    }
    fl->cv.notify_all();
  }
}

void ReadPipeline::AddNeed(const FileVersion& file, uint64_t index, uint64_t off, uint64_t len,
                           std::vector<Need>& needs) {
  std::lock_guard lk(mu_);
  AddNeedLocked(file, index, off, len, needs);
}

bool ReadPipeline::AddSubNeed(const FileVersion& file, uint64_t unit, uint64_t index, uint64_t off,
                              uint64_t len, bool kept, std::vector<Need>& needs) {
  std::lock_guard lk(mu_);
  if (InFlightLocked(file, unit)) return false;
  // Came in since (read from the store instead). Not for a file read
  // through: its cached units are not served.
  if (kept && store_ && store_->Contains(UnitKey{file.key, file.etag, unit})) return false;
  AddNeedLocked(file, index, off, len, needs);
  return true;
}

bool ReadPipeline::AddWholeNeed(const FileVersion& file, uint64_t unit, std::vector<Need>& needs, bool* cached_now) {
  const uint64_t U = opts_.unit_size, ustart = unit * U;
  std::lock_guard lk(mu_);
  if (!InFlightLocked(file, unit)) {
    if (SubUnitTakenLocked(file, unit)) return false;
    // A flight leaves the table after its Put (under mu_): not in flight and
    // in the store means put since the reader looked.
    if (cached_now && store_ && store_->Contains(UnitKey{file.key, file.etag, unit})) {
      *cached_now = true;
      return false;
    }
  }
  AddNeedLocked(file, unit, ustart, std::min(U, file.size - ustart), needs);
  return true;
}

bool ReadPipeline::JoinWholeNeed(const FileVersion& file, uint64_t unit, std::vector<Need>& needs) {
  const uint64_t U = opts_.unit_size, ustart = unit * U;
  std::lock_guard lk(mu_);
  if (!InFlightLocked(file, unit)) return false;
  AddNeedLocked(file, unit, ustart, std::min(U, file.size - ustart), needs);
  return true;
}

bool ReadPipeline::InFlightLocked(const FileVersion& file, uint64_t index) const {
  auto it = flights_.find(FlightKey(file, index));
  return it != flights_.end() && !it->second->abandoned;  // an abandoned one is replaced by the next need
}

bool ReadPipeline::TakenLocked(const FileVersion& file, uint64_t index) const {
  // A flight is registered under mu_ and leaves the table after its Put:
  // a piece not in flight now is either cached now or not started.
  return InFlightLocked(file, index) ||
         (store_ && store_->Contains(UnitKey{file.key, file.etag, index}));
}

bool ReadPipeline::SubUnitTakenLocked(const FileVersion& file, uint64_t unit) const {
  const uint64_t U = opts_.unit_size, sub = opts_.sub_unit_size;
  if (sub == 0 || sub >= U || file.size <= U) return false;
  const uint64_t ustart = unit * U, uend = std::min(file.size, ustart + U);
  bool taken = false;
  ForEachSubUnit(ustart, uend, sub, [&](uint64_t idx, uint64_t) { taken = taken || TakenLocked(file, idx); });
  return taken;
}

void ReadPipeline::AddNeedLocked(const FileVersion& file, uint64_t index, uint64_t off, uint64_t len,
                                 std::vector<Need>& needs) {
  auto key = FlightKey(file, index);
  ReserveOne(needs);  // the push_back after a registration cannot throw
  if (auto it = flights_.find(key); it != flights_.end() && !it->second->abandoned) {
    needs.push_back({index, off, len, it->second, false});
    if (metrics_) Add(metrics_->singleflight_waits);
  } else if (it != flights_.end()) {
    auto fl = std::make_shared<Flight>();
    it->second = fl;
    needs.push_back({index, off, len, fl, true});
  } else {
    auto fl = std::make_shared<Flight>();
    flights_.emplace(std::move(key), fl);
    needs.push_back({index, off, len, fl, true});
  }
}

bool ReadPipeline::Keep(const FileVersion& file) const {
  // No version (an S3-compatible server that lists no ETag): its units could
  // not be told from another version's, and no GET could be checked.
  if (file.etag.empty()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      spdlog::warn("'{}' has no ETag in its listing: such objects are read through, never cached", file.key);
    return false;
  }
  return !opts_.admit || opts_.admit(file);
}

Status ReadPipeline::FetchRuns(const FileVersion& file, std::vector<Need>& needs, bool demand) {
  const uint64_t max_run = std::max(opts_.max_request_bytes, opts_.unit_size);
  // A unit may have been inserted by a fetch that finished between our store
  // lookup and our becoming its leader (Put happens before the flight ends):
  // look again so each unit is fetched once. (Not for a file read through:
  // its cached units are not to be served, Read's `hit`.)
  if (store_ && Keep(file)) {
    for (auto& n : needs) {
      if (!n.leader) continue;
      const UnitKey key{file.key, file.etag, n.index};
      if (!store_->Contains(key)) continue;  // the usual case: no buffer needed
      std::shared_ptr<char[]> data(new (std::nothrow) char[n.len]);
      if (!data) continue;  // fetched below instead (no exception may leave with flights open)
      auto hit = store_->Read(key, 0, n.len, data.get(), /*hit=*/false);
      if (!hit || *hit != n.len) continue;
      Unlist(file, n.index);
      {
        std::lock_guard lk(n.flight->mu);
        n.flight->data = data.get();
        n.flight->size = n.len;
        n.flight->buf = std::move(data);
        n.flight->done = true;
      }
      n.flight->cv.notify_all();
      n.leader = false;
    }
  }
  // Runs of adjacent pieces we lead, each one ranged GET of at most max_run.
  struct Run {
    size_t i, j;  // needs[i, j)
    uint64_t off, len;
    std::shared_ptr<char[]> buf;  // not zero-filled: the GET writes it all
    Status st;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < needs.size();) {
    if (!needs[i].leader) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < needs.size() && needs[j].leader && needs[j].off == needs[j - 1].off + needs[j - 1].len &&
           needs[j].off + needs[j].len - needs[i].off <= max_run)
      ++j;
    runs.push_back(Run{i, j, needs[i].off, needs[j - 1].off + needs[j - 1].len - needs[i].off, {}, {}});
    i = j;
  }
  // A run's one ranged GET into r.buf, its outcome in r.st. No exception
  // leaves: every flight must be completed below, or its waiters would hang.
  auto fetch = [&](Run& r) {
    try {
      r.buf.reset(new char[r.len]);
      if (metrics_) Add(metrics_->backend_get_requests);
      auto got = backend_->Read(file.FetchKey(), r.off, r.len, file.etag, r.buf.get());
      if (!got) {
        r.st = got.error();
        return;
      }
      if (metrics_) Add(metrics_->backend_get_bytes, *got);
      if (*got != r.len)
        r.st = Status::Changed(fmt::format("'{}' returned {} bytes at offset {}, expected {}: the "
                                           "object changed size", file.key, *got, r.off, r.len));
    } catch (const std::exception& e) {
      r.st = Status::Internal(fmt::format("backend read: {}", e.what()));
    } catch (...) {
      r.st = Status::Internal("backend read: unknown exception");
    }
  };
  // Inserts a fetched run's pieces and ends their flights (waiters see r.st).
  Status first_error;
  const bool keep = store_ && Keep(file);
  auto complete = [&](Run& r) {
    for (size_t k = r.i; k < r.j; ++k) {
      const char* unit_data = nullptr;
      if (r.st.ok()) {
        unit_data = r.buf.get() + (needs[k].off - r.off);
        // A Put that throws (out of memory) leaves the unit uncached; the
        // bytes fetched are still served.
        if (keep) try {
            (void)store_->Put(UnitKey{file.key, file.etag, needs[k].index}, {unit_data, needs[k].len},
                              /*prefetched=*/!demand);
          } catch (const std::exception&) {
          }
      }
      auto& fl = needs[k].flight;
      Unlist(file, needs[k].index);
      {
        std::lock_guard lk(fl->mu);
        fl->status = r.st;
        if (unit_data) {
          fl->buf = r.buf;
          fl->data = unit_data;
          fl->size = needs[k].len;
        }
        fl->done = true;
      }
      fl->cv.notify_all();
    }
    if (!r.st.ok() && first_error.ok()) first_error = r.st;
    r.buf.reset();  // the flights keep it while they are read
  };
  if (!demand) {
    // A prefetch: one GET per run, in turn (one buffer at a time: the
    // prefetcher's memory bound counts one run per thread). Fetch hands
    // over one run at a time; after a failed run the others end with its
    // error at once (their followers try themselves) instead of waiting
    // behind more GETs, each with its retries.
    for (auto& r : runs) {
      if (first_error.ok()) fetch(r);
      else r.st = first_error;
      complete(r);
    }
    return first_error;
  }
  // A reader waits for all of its misses: one GET per run, up to
  // kMaxParallelRuns at once (a read whose units are partly cached has
  // several runs; in turn they would cost a first byte each). Run k > 0 of a
  // batch on a thread of its own, or inline if none can be started. Large
  // runs are not split: on the emulated cloud (bench_e2e, the mix) four
  // 256 KiB GETs per 1 MiB miss were slower than one, the server's
  // per-request cost outweighing the bandwidth.
  for (size_t b = 0; b < runs.size(); b += kMaxParallelRuns) {
    const size_t e = std::min(runs.size(), b + kMaxParallelRuns);
    std::vector<std::future<void>> others(e - b - 1);  // one left invalid: fetched inline
    for (size_t k = b + 1; k < e; ++k) {
      try {
        others[k - b - 1] = std::async(std::launch::async, fetch, std::ref(runs[k]));
      } catch (...) {
        fetch(runs[k]);
      }
    }
    // Each run's flights end once its GET and those of the runs before it
    // in the batch are back (a reader joined to the first run waits for
    // that GET only; before, every run waited for all of them).
    fetch(runs[b]);
    complete(runs[b]);
    for (size_t k = b + 1; k < e; ++k) {
      if (others[k - b - 1].valid()) others[k - b - 1].get();
      complete(runs[k]);
    }
  }
  return first_error;
}

void ReadPipeline::RememberFailure(uint64_t reader, const FileVersion& file, uint64_t off, uint64_t end,
                                   const Status& st) {
  std::lock_guard lk(failures_mu_);
  const auto now = std::chrono::steady_clock::now();
  const auto ttl = std::chrono::milliseconds(opts_.failure_memo_ms);
  while (!failures_.empty() && (failures_.size() >= kMaxFailures || now - failures_.front().when >= ttl))
    failures_.pop_front();
  failures_.push_back({reader, file.key, file.etag, off, end, st, now});
  failures_size_ = failures_.size();
}

std::optional<Status> ReadPipeline::TakeFailure(uint64_t reader, const FileVersion& file, uint64_t off,
                                                uint64_t end) {
  if (reader == 0 || failures_size_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  std::lock_guard lk(failures_mu_);
  const auto now = std::chrono::steady_clock::now();
  const auto ttl = std::chrono::milliseconds(opts_.failure_memo_ms);
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if (it->reader != reader || it->key != file.key || it->etag != file.etag || off >= it->end || it->off >= end ||
        now - it->when >= ttl)
      continue;
    const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->when).count();
    Status st(it->status.code(), fmt::format("{} (the same read failed {} ms ago; not asked again so soon)",
                                             it->status.message(), ago));
    failures_.erase(it);
    failures_size_ = failures_.size();
    return st;
  }
  return std::nullopt;
}

Result<size_t> ReadPipeline::Read(const FileVersion& file, uint64_t offset, size_t length, char* out,
                                  const std::function<void()>& looked_up, uint64_t reader, bool* repeated) {
  bool from_memo = false;
  auto r = ReadOnce(file, offset, length, out, looked_up, reader, from_memo);
  if (repeated) *repeated = !r && from_memo;
  if (!r && !from_memo && reader != 0 && opts_.failure_memo_ms > 0 && BackendUnreachable(r.error().code())) {
    try {
      RememberFailure(reader, file, offset, std::min<uint64_t>(file.size, offset + length), r.error());
    } catch (...) {
      // No memory: not remembered (the next read asks the backend).
    }
  }
  return r;
}

Result<size_t> ReadPipeline::ReadOnce(const FileVersion& file, uint64_t offset, size_t length, char* out,
                                      const std::function<void()>& looked_up, uint64_t reader, bool& from_memo) {
  if (offset >= file.size || length == 0) {
    if (looked_up) looked_up();
    return size_t{0};
  }
  const uint64_t U = opts_.unit_size;
  const uint64_t end = std::min<uint64_t>(file.size, offset + length);
  const uint64_t first = offset / U, last = (end - 1) / U;

  // Copies [from, to) from store unit `index` holding the object's bytes from
  // `base` on; false on a miss. A file not admitted (no version, or under a
  // never_cache prefix, perhaps one a reload just added over cached units)
  // is read through: its cached units are never served, and age out.
  std::optional<bool> keep;
  // Hits and misses counted once the read succeeds (Flush): a failed read
  // returns no bytes, and its misses counted against none (read_bytes)
  // lowered the byte hit ratio during a source's outage or churn.
  struct Counts {
    uint64_t hit_units = 0, hit_bytes = 0, miss_units = 0, miss_bytes = 0;
    void Flush(Metrics* m) const {
      if (!m) return;
      Add(m->cache_hit_units, hit_units);
      Add(m->cache_hit_bytes, hit_bytes);
      Add(m->cache_miss_units, miss_units);
      Add(m->cache_miss_bytes, miss_bytes);
    }
  } counts;
  auto hit = [&](uint64_t index, uint64_t base, uint64_t from, uint64_t to) {
    if (!store_) return false;
    if (!keep) keep = Keep(file);
    if (!*keep) return false;
    auto n = store_->Read(UnitKey{file.key, file.etag, index}, from - base, to - from, out + (from - offset));
    if (!n || *n != to - from) return false;
    ++counts.hit_units;
    counts.hit_bytes += to - from;
    return true;
  };
  auto miss = [&](uint64_t bytes) {
    ++counts.miss_units;
    counts.miss_bytes += bytes;
  };
  const uint64_t S = opts_.sub_unit_size;
  const bool can_sub = S > 0 && S < U;
  std::optional<bool> subs;  // misses fetch sub-units: asked on the first miss
  std::vector<Need> needs;
  LeadGuard guard(this, file, needs);
  // Before this read fetches [from, to) itself (not when another fetch of
  // it is under way, which it joins): this reader's read of it failed a
  // moment ago (the kernel reading a page of a failed readahead again) and
  // fails again at once.
  std::optional<Status> memo;
  auto failed_before = [&](uint64_t index, uint64_t from, uint64_t to) {
    if (!memo && reader != 0 && failures_size_.load(std::memory_order_relaxed) > 0 && !InFlight(file, index))
      memo = TakeFailure(reader, file, from, to);
    return memo.has_value();
  };
  for (uint64_t u = first; u <= last; ++u) {
    const uint64_t ustart = u * U;
    const uint64_t from = std::max(offset, ustart), to = std::min(end, ustart + U);
    if (hit(u, ustart, from, to)) continue;
    // Sub-units when the file reads at random, and when what is fetched
    // cannot be kept (a file read through, a cache taking no inserts): a
    // whole unit would be fetched again by each read of a part of it.
    // Whatever its size when it is never kept: a never_cache file of one
    // unit fetched the whole unit for each 4 KiB page the kernel asked (a
    // tester: 256 GETs, 256 MiB for a 1 MiB file read in O_DIRECT pages).
    // Not for a file of one unit while inserts fail: once they work again
    // its sub-units would be stored, and its whole unit beside them
    // (SubUnitTakenLocked looks at larger files only; a review).
    if (!subs) {
      if (!keep) keep = Keep(file);
      subs = can_sub && (!store_ || !*keep ||
                         (file.size > U && (store_->inserts_failing() || (opts_.sub_units && opts_.sub_units(file)))));
    }
    // Whole: joins a whole flight, or starts one unless sub-units of the
    // unit are cached or in flight (the file was read at random before).
    if (!*subs && failed_before(u, from, to)) break;
    // Put since the look above (only for a file whose units are served):
    // read from the cache; if that fails too, fetched as before.
    bool cached_now = false;
    bool* put_meanwhile = keep.value_or(false) ? &cached_now : nullptr;
    if (!*subs && AddWholeNeed(file, u, needs, put_meanwhile)) {
      miss(to - from);
      continue;
    }
    if (cached_now && hit(u, ustart, from, to)) continue;
    if (cached_now && AddWholeNeed(file, u, needs)) {
      miss(to - from);
      continue;
    }
    // Sub-units: a whole unit already in flight is waited for instead.
    if (*subs && JoinWholeNeed(file, u, needs)) {
      miss(to - from);
      continue;
    }
    // A whole-unit prefetch may start between the check above and our
    // first sub-unit flight: AddSubNeed sees it under the same lock that
    // registers ours, and then the rest of the unit waits for it instead.
    std::optional<uint64_t> whole_from;
    ForEachSubUnit(from, to, S, [&](uint64_t idx, uint64_t p) {
      if (whole_from || memo) return;
      const uint64_t a = std::max(from, p), b = std::min(to, p + S);
      if (hit(idx, p, a, b)) return;
      if (failed_before(idx, a, b)) return;
      if (AddSubNeed(file, u, idx, p, std::min(S, file.size - p), *keep, needs)) {
        miss(b - a);
        return;
      }
      whole_from = a;
    });
    if (memo) break;
    if (whole_from) {
      miss(to - *whole_from);
      AddNeed(file, u, ustart, std::min(U, file.size - ustart), needs);
    }
  }
  if (memo) {
    // The flights this read started end (their followers fetch for
    // themselves); no plan is run for a read that fails.
    Abandon(file, needs);
    from_memo = true;
    if (metrics_) Add(metrics_->read_failures_repeated);
    return Err(*memo);
  }
  if (looked_up) looked_up();
  if (needs.empty()) {
    counts.Flush(metrics_);
    return static_cast<size_t>(end - offset);
  }
  if (!keep) keep = store_ && Keep(file);  // before collect: not under a flight's lock

  // Copies every needed piece's bytes (ours and those fetched by other
  // threads) into `out`; the first failure goes to `st`. A piece whose
  // prefetch failed goes to `retry` when given (the backend's own retries
  // were the prefetch's, not this reader's).
  auto collect = [&](std::vector<Need>& ns, Status& st, std::vector<Need>* retry) {
    for (auto& n : ns) {
      std::unique_lock lk(n.flight->mu);
      n.flight->cv.wait(lk, [&] { return n.flight->done; });
      if (!n.flight->status.ok()) {
        // A failed prefetch, or a flight its leader abandoned (an exception
        // in another reader's call): this reader tries once itself.
        if (retry && !n.leader && (n.flight->prefetch || n.flight->abandoned) &&
            n.flight->status.code() != Code::kChanged) {
          retry->push_back({n.index, n.off, n.len, nullptr, false});
        } else if (st.ok()) {
          st = n.flight->status;
        }
        continue;
      }
      const uint64_t from = std::max(offset, n.off), to = std::min(end, n.off + n.len);
      // A piece another fetch brought in (a prefetch the reader caught up
      // with): read it from the store once inserted, so the store and the
      // policy engine see the read (else a prefetched unit read this way stays
      // "unread" for the engine and holds readahead room until evicted).
      if (!n.leader && store_ && *keep) {  // not for a file read through
        lk.unlock();
        auto got = store_->Read(UnitKey{file.key, file.etag, n.index}, from - n.off, to - from, out + (from - offset),
                                /*hit=*/false);
        if (got && *got == to - from) continue;
        lk.lock();
      }
      if (n.flight->size < to - n.off) {
        if (st.ok()) st = Status::Internal("short unit in flight");
        continue;
      }
      std::memcpy(out + (from - offset), n.flight->data + (from - n.off), to - from);
    }
  };
  Status st = FetchRuns(file, needs, /*demand=*/true);
  // Our own fetches failed: the read fails now, not after the fetches it
  // joined (another reader's, a prefetch) have spent their retry budget.
  // Those flights belong to their leaders, who complete them.
  if (!st.ok()) return Err(st);
  std::vector<Need> failed;
  collect(needs, st, &failed);
  if (st.ok() && !failed.empty()) {
    std::vector<Need> again;
    LeadGuard again_guard(this, file, again);
    for (const auto& n : failed) AddNeed(file, n.index, n.off, n.len, again);
    st = FetchRuns(file, again, /*demand=*/true);
    if (!st.ok()) return Err(st);  // as above: not after the flights it joined
    collect(again, st, nullptr);
  }
  if (!st.ok()) return Err(st);
  counts.Flush(metrics_);
  return static_cast<size_t>(end - offset);
}

Status ReadPipeline::Fetch(const FileVersion& file, uint64_t first_unit, uint64_t last_unit) {
  if (file.size == 0) return Status::Ok();
  if (!Keep(file)) return Status::Ok();  // not to be kept: nothing to fetch
  const uint64_t U = opts_.unit_size;
  last_unit = std::min(last_unit, (file.size - 1) / U);
  // A unit some of whose sub-units are cached or being fetched gets its
  // missing sub-units instead: fetching it whole would fetch those bytes
  // twice.
  std::vector<Need> needs;
  LeadGuard guard(this, file, needs);
  auto lead = [&](uint64_t index, uint64_t off, uint64_t len) {  // mu_ held
    auto fl = std::make_shared<Flight>();
    fl->prefetch = true;
    ReserveOne(needs);  // the push_back after a registration cannot throw
    flights_.insert_or_assign(FlightKey(file, index), fl);  // over an abandoned one still listed
    needs.push_back({index, off, len, fl, true});
  };
  // Pieces are registered one run (one GET) at a time, each fetched before
  // the next is registered: a reader that needs a later piece leads its own
  // GET instead of waiting behind the runs before it (a fill of a file
  // whose sub-units are partly cached has many), and after a failed run the
  // rest of the range is left to its readers.
  const uint64_t max_run = std::max(opts_.max_request_bytes, opts_.unit_size);
  auto flush = [&]() -> Status {
    if (needs.empty()) return Status::Ok();
    Status st = FetchRuns(file, needs, /*demand=*/false);
    needs.clear();
    return st;
  };
  // Registers a piece; false (nothing registered) if it must start a new run
  // first: not adjacent to the pieces held, or past max_run with them.
  auto add = [&](uint64_t index, uint64_t off, uint64_t len) {  // mu_ held
    if (!needs.empty() && (off != needs.back().off + needs.back().len || off + len - needs.front().off > max_run))
      return false;
    lead(index, off, len);
    return true;
  };
  for (uint64_t u = first_unit; u <= last_unit; ++u) {
    const uint64_t ustart = u * U, uend = std::min(file.size, ustart + U);
    // The unit's pieces to fetch: the whole unit, or its missing sub-units.
    struct Piece {
      uint64_t index, off, len;
      bool whole;  // the whole unit, not a sub-unit
    };
    std::vector<Piece> pieces;
    {
      // In flight or cached, under mu_: a unit neither is not started, so
      // its flight needs no look in the store (which would count as a read).
      std::lock_guard lk(mu_);
      if (TakenLocked(file, u)) continue;
      if (!SubUnitTakenLocked(file, u)) {
        pieces.push_back({u, ustart, uend - ustart, true});
      } else {
        const uint64_t S = opts_.sub_unit_size;
        ForEachSubUnit(ustart, uend, S, [&](uint64_t idx, uint64_t p) {
          if (!TakenLocked(file, idx)) pieces.push_back({idx, p, std::min(S, file.size - p), false});
        });
      }
    }
    // Taken since we looked (another fetch or a reader); a whole unit some
    // of whose sub-units a reader took meanwhile is left to its readers
    // (fetched whole, those bytes would come twice). mu_ held.
    auto taken = [&](const Piece& pc) { return TakenLocked(file, pc.index) || (pc.whole && SubUnitTakenLocked(file, u)); };
    for (const Piece& pc : pieces) {
      {
        std::lock_guard lk(mu_);
        if (taken(pc) || add(pc.index, pc.off, pc.len)) continue;
      }
      if (Status st = flush(); !st.ok()) return st;
      std::lock_guard lk(mu_);
      if (!taken(pc)) lead(pc.index, pc.off, pc.len);
    }
  }
  return flush();
}

}  // namespace igt
