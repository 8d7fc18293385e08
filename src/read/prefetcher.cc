// Prefetcher (prefetcher.h).

#include "src/read/prefetcher.h"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <xxhash.h>

namespace igt {
namespace {

// Bytes units [first, last] of `f` hold (the last unit of a file is short:
// a small file costs its size, not a whole unit, against the budget).
uint64_t JobBytes(const FileVersion& f, uint64_t first, uint64_t last, uint64_t unit) {
  return std::min(f.size, (last + 1) * unit) - std::min(f.size, first * unit);
}

}  // namespace

// The key hashed with a seed made of the ETag and the index: 128 bits, so a
// collision (a unit taken for queued and left to its reader) is never seen.
Prefetcher::Tag Prefetcher::TagOf(const FileVersion& f, uint64_t unit) noexcept {
  const XXH128_hash_t h =
      XXH3_128bits_withSeed(f.key.data(), f.key.size(), XXH3_64bits_withSeed(f.etag.data(), f.etag.size(), unit));
  return Tag{h.low64, h.high64};
}

// Built member by member, not as an aggregate temporary: when copying a
// member threw (out of memory) while a Job or UnitKey temporary was being
// aggregate-initialised, the GCC 12 build destroyed a string that had left
// its scope (ASan, stack-use-after-scope, in test_alloc_failure).
Prefetcher::Job Prefetcher::MakeJob(const FileVersion& file, uint64_t first, uint64_t last, uint64_t bytes, bool fill,
                                    bool background, uint64_t fill_id) {
  Job j;
  j.file = file;
  j.first = first;
  j.last = last;
  j.bytes = bytes;
  j.fill = fill;
  j.background = background;
  j.fill_id = fill_id;
  return j;
}

Prefetcher::Prefetcher(ReadPipeline* pipeline, BlockStore* store, Options opts, Hook begin, Hook end)
    : pipeline_(pipeline), store_(store), opts_(opts), begin_(std::move(begin)), end_(std::move(end)) {
  // A thread that cannot be started (a pids or thread limit: EAGAIN) ends
  // the construction with its std::system_error, after the threads started
  // are stopped: left joinable, they made std::terminate abort the daemon
  // with nothing said (a tester's finding).
  try {
    for (size_t i = 0; i < std::max<size_t>(1, opts_.threads); ++i) threads_.emplace_back([this] { Worker(); });
  } catch (...) {
    Stop();
    throw;
  }
}

Prefetcher::~Prefetcher() { Stop(); }

void Prefetcher::Stop() noexcept {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    queue_.clear();
    bg_queue_.clear();
    fills_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

size_t Prefetcher::Submit(const FileVersion& file, uint64_t first, uint64_t last, Priority prio) {
  const uint64_t unit = pipeline_->unit_size();
  if (file.size == 0 || unit == 0) return 0;
  last = std::min(last, (file.size - 1) / unit);
  if (first > last) return 0;
  // A cache that takes no inserts (volume full, write errors): prefetched
  // units would be fetched and thrown away, each read fetching them again.
  if (store_ && store_->inserts_failing()) {
    std::lock_guard lk(mu_);
    stats_.dropped_units += last - first + 1;
    return 0;
  }
  // Skip cached units outside the lock (the store takes its own).
  std::vector<uint64_t> want;
  for (uint64_t u = first; u <= last; ++u)
    if (!store_ || !store_->Contains(UnitKey{file.key, file.etag, u})) want.push_back(u);
  const bool background = prio == Priority::kBackground;
  size_t queued = 0;
  {
    std::lock_guard lk(mu_);
    if (stop_) return 0;
    if (background) last_bg_submit_ = std::chrono::steady_clock::now();
    // Jobs of (the bytes held and these units) / threads, at least
    // kMinSpreadUnits and at most max_job_units: a window's batch goes out
    // on as many threads as the work in hand fills. A batch of 32 units went out as
    // four jobs of 8 on four threads, each GET 25 ms + 8 MiB at a
    // connection's ~90 MB/s (118 ms), where 16 jobs of 2 take 48 ms (the
    // simulator models the same split: igtcache sim's issue_next).
    const uint64_t threads = std::max<size_t>(1, opts_.threads);
    const uint64_t spread = (held_bytes_ + want.size() * unit + threads * unit - 1) / (threads * unit);
    const uint64_t max_units = std::max<uint64_t>(1, opts_.max_job_units);
    const uint64_t job_units = std::clamp<uint64_t>(spread, std::min(kMinSpreadUnits, max_units), max_units);
    size_t i = 0;
    while (i < want.size()) {
      if (units_.count(TagOf(file, want[i]))) {
        ++i;
        continue;
      }
      // A run of adjacent units not queued yet, at most job_units.
      size_t j = i;
      while (j + 1 < want.size() && want[j + 1] == want[j] + 1 && j + 1 - i < job_units &&
             !units_.count(TagOf(file, want[j + 1])))
        ++j;
      const uint64_t bytes = std::max(JobBytes(file, want[i], want[j], unit), kMinJobHeldBytes);
      if (held_bytes_ + bytes > opts_.budget_bytes ||
          (background && bg_held_bytes_ + bytes > opts_.budget_bytes / 2)) {
        stats_.dropped_units += want.size() - i;  // backpressure: drop the rest
        break;
      }
      // The job first, its counters with it: an allocation failure below
      // then leaves units untagged (a duplicate job at worst), never tags or
      // budget without a job to release them.
      (background ? bg_queue_ : queue_).push_back(MakeJob(file, want[i], want[j], bytes, false, background, 0));
      if (!background) try {
          ++queued_readahead_[TagOf(file, kFileTag)];
        } catch (...) {
          // Uncounted: not dropped at its file's close (fetched as before).
        }
      held_bytes_ += bytes;
      if (background) bg_held_bytes_ += bytes;
      stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, held_bytes_);
      stats_.queued_units += j - i + 1;
      queued += j - i + 1;
      for (size_t k = i; k <= j; ++k) units_.insert(TagOf(file, want[k]));
      i = j + 1;
    }
  }
  if (queued) cv_.notify_all();
  return queued;
}

bool Prefetcher::Fill(const FileVersion& file, uint64_t max_bytes) {
  if (file.size == 0) return false;
  // A cache taking no inserts: no new fill (a fill waiting for it still
  // takes its new limit below).
  const bool failing = store_ && store_->inserts_failing();
  const uint64_t limit = max_bytes ? max_bytes : UINT64_MAX;
  {
    std::lock_guard lk(mu_);
    if (stop_) return false;
    if (auto ff = fill_failed_.find(TagOf(file, kFileTag)); ff != fill_failed_.end()) {
      if (std::chrono::steady_clock::now() < ff->second) return false;
      fill_failed_.erase(ff);
    }
    auto it = FindFillLocked(file);
    if (it != fills_.end()) {
      if (it->allowed == UINT64_MAX) return false;  // filling it whole already
      it->allowed = limit == UINT64_MAX ? limit : limit - std::min(limit, it->inflight);
    } else {
      if (failing || fills_.size() >= kMaxFills) return false;
      fills_.push_back(FillState{file, 0, limit, 0, next_fill_id_++});
      ++stats_.fills;
    }
  }
  cv_.notify_all();
  return true;
}

std::deque<Prefetcher::FillState>::iterator Prefetcher::FindFillLocked(const FileVersion& file) {
  return std::find_if(fills_.begin(), fills_.end(), [&](const FillState& f) {
    return f.file.key == file.key && f.file.etag == file.etag;
  });
}

void Prefetcher::DropQueuedLocked() noexcept {
  for (auto* q : {&queue_, &bg_queue_}) {
    for (const Job& j : *q) {
      for (uint64_t u = j.first; u <= j.last; ++u) units_.erase(TagOf(j.file, u));
      held_bytes_ -= j.bytes;
      if (j.background) bg_held_bytes_ -= j.bytes;
      stats_.dropped_units += j.last - j.first + 1;
    }
    q->clear();
  }
  queued_readahead_.clear();
}

void Prefetcher::UncountReadaheadLocked(const FileVersion& file) noexcept {
  auto it = queued_readahead_.find(TagOf(file, kFileTag));
  if (it != queued_readahead_.end() && --it->second == 0) queued_readahead_.erase(it);
}

size_t Prefetcher::DropReadahead(const FileVersion& file) {
  size_t dropped = 0;
  {
    std::lock_guard lk(mu_);
    auto it = queued_readahead_.find(TagOf(file, kFileTag));
    if (it == queued_readahead_.end()) return 0;
    queued_readahead_.erase(it);
    std::erase_if(queue_, [&](const Job& j) {
      if (j.file.key != file.key || j.file.etag != file.etag) return false;
      for (uint64_t u = j.first; u <= j.last; ++u) units_.erase(TagOf(j.file, u));
      held_bytes_ -= j.bytes;
      dropped += j.last - j.first + 1;
      return true;
    });
    stats_.dropped_units += dropped;
  }
  cv_.notify_all();  // budget given back (fills wait for it)
  return dropped;
}

bool Prefetcher::NextJobLocked(Job* job, bool* paused) {
  // A cache that takes no inserts: queued jobs are dropped (their units
  // would be fetched and thrown away) and fills wait, until an insert
  // succeeds again (the workers look every kPausedPoll meanwhile).
  *paused = store_ && store_->inserts_failing();
  if (*paused) {
    DropQueuedLocked();
    return false;
  }
  if (!queue_.empty()) {
    *job = std::move(queue_.front());
    queue_.pop_front();
    UncountReadaheadLocked(job->file);
    return true;
  }
  // Readahead keeps two threads: background work never delays a reader's
  // readahead by more than the GETs already running.
  // (From opts_, not threads_: workers run while the constructor still adds
  // threads.)
  const size_t threads = std::max<size_t>(1, opts_.threads);
  const size_t max_running = threads > 2 ? threads - 2 : 1;
  if (bg_running_ >= max_running) return false;
  if (!bg_queue_.empty()) {
    *job = std::move(bg_queue_.front());
    bg_queue_.pop_front();
  } else if (!NextFillJobLocked(job)) {
    return false;
  }
  ++bg_running_;
  return true;
}

bool Prefetcher::NextFillJobLocked(Job* job) {
  const uint64_t unit = pipeline_->unit_size();
  for (auto it = fills_.begin(); it != fills_.end();) {
    FillState& f = *it;
    const uint64_t n = (f.file.size + unit - 1) / unit;
    // Units cached or queued already are skipped (Contains takes the store's
    // own lock, never ours: the store does not call back into the prefetcher).
    UnitKey probe;  // assigned member by member: see MakeJob
    if (store_) {
      probe.object = f.file.key;
      probe.etag = f.file.etag;
    }
    auto wanted = [&](uint64_t u) {
      if (units_.count(TagOf(f.file, u))) return false;
      probe.index = u;
      return !(store_ && store_->Contains(probe));
    };
    while (f.next < n && !wanted(f.next)) ++f.next;
    const bool limited = f.next < n && JobBytes(f.file, f.next, f.next, unit) > f.allowed;
    if (f.next >= n || limited) {
      // Done, or out of its limit: kept while jobs are in flight (a new
      // limit subtracts them), else forgotten.
      it = f.inflight == 0 ? fills_.erase(it) : std::next(it);
      continue;
    }
    uint64_t last = f.next;
    while (last + 1 < n && last + 1 - f.next < opts_.max_job_units && wanted(last + 1) &&
           JobBytes(f.file, f.next, last + 1, unit) <= f.allowed)
      ++last;
    const uint64_t bytes = JobBytes(f.file, f.next, last, unit);
    // Wait for room. Fills share background's half of the budget (a
    // reader's readahead is never dropped for them either) and, while
    // background Submits come, take at most a quarter (or one job): fills
    // wait for room while a background Submit is dropped without it, so
    // they must not take all of the half. Alone they take the half: with a
    // quarter always, the cold random faults of bench_e2e's model case (a
    // 2 GiB file filled beside them) took 9.7 s instead of 8.0 s.
    const bool share = std::chrono::steady_clock::now() < last_bg_submit_ + opts_.fill_share_hold;
    if (held_bytes_ + bytes > opts_.budget_bytes || bg_held_bytes_ + bytes > opts_.budget_bytes / 2 ||
        (share && fill_held_bytes_ > 0 && fill_held_bytes_ + bytes > opts_.budget_bytes / 4))
      return false;
    *job = MakeJob(f.file, f.next, last, bytes, true, true, f.id);
    held_bytes_ += bytes;
    bg_held_bytes_ += bytes;
    fill_held_bytes_ += bytes;
    stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, held_bytes_);
    f.next = last + 1;
    if (f.allowed != UINT64_MAX) f.allowed -= bytes;
    f.inflight += bytes;
    // Tags last: out of memory here leaves a unit untagged (a duplicate
    // job at worst); the job runs and its end erases the tags there are.
    try {
      for (uint64_t u = job->first; u <= last; ++u) units_.insert(TagOf(f.file, u));
    } catch (const std::bad_alloc&) {
    }
    return true;
  }
  return false;
}

void Prefetcher::Worker() {
  while (true) {
    Job job;
    try {
      std::unique_lock lk(mu_);
      // Timed while paused: nothing is notified when a failing cache takes
      // inserts again.
      bool paused = false;
      while (!stop_ && !NextJobLocked(&job, &paused)) {
        if (paused) cv_.wait_for(lk, kPausedPoll);
        else cv_.wait(lk);
      }
      if (stop_) return;  // checked first: no job was taken
    } catch (const std::exception& e) {
      // Choosing a job allocates (the job's copy of the file's name, a fill's
      // look-ups) before it changes any state: nothing was taken. Out of
      // memory, wait a little rather than spin, then choose again.
      spdlog::error("prefetch: choosing the next job: {}", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    // An exception (out of memory) fails the job, not the daemon (the
    // thread would take it down), and its budget is still given back.
    Status s;
    try {
      if (begin_) begin_(job.file.key, job.first, job.last);
      s = pipeline_->Fetch(job.file, job.first, job.last);
    } catch (const std::exception& e) {
      spdlog::error("prefetch {} [{}, {}]: {}", job.file.key, job.first, job.last, e.what());
      s = Status::Internal("prefetch threw");  // short: no allocation
    } catch (...) {
      s = Status::Internal("prefetch threw");
    }
    try {
      if (end_) end_(job.file.key, job.first, job.last);
    } catch (...) {
      spdlog::error("prefetch {}: its end hook failed", job.file.key);
    }
    if (!s.ok() && spdlog::should_log(spdlog::level::debug)) {
      try {  // ToString allocates
        spdlog::debug("prefetch {} [{}, {}]: {}", job.file.key, job.first, job.last, s.ToString());
      } catch (const std::bad_alloc&) {
      }
    }
    {
      std::lock_guard lk(mu_);
      for (uint64_t u = job.first; u <= job.last; ++u) units_.erase(TagOf(job.file, u));
      held_bytes_ -= job.bytes;
      if (job.background) {  // fills too
        --bg_running_;
        bg_held_bytes_ -= job.bytes;
      }
      if (job.fill) {
        fill_held_bytes_ -= job.bytes;
        auto f = FindFillLocked(job.file);
        if (f != fills_.end() && f->id != job.fill_id) f = fills_.end();  // a later fill of the file
        if (f != fills_.end()) f->inflight -= std::min(f->inflight, job.bytes);
        // A failed fill stops (the reader's own misses still fetch), and
        // the file is not filled again for a while.
        if (!s.ok()) {
          if (f != fills_.end()) fills_.erase(f);
          if (fill_failed_.size() >= kMaxFills * 64) fill_failed_.clear();
          try {
            fill_failed_[TagOf(job.file, kFileTag)] = std::chrono::steady_clock::now() + opts_.fill_retry_after;
          } catch (const std::bad_alloc&) {  // filled again sooner: no harm
          }
        }
      }
      if (s.ok()) stats_.fetched_units += job.last - job.first + 1;
      else ++stats_.failed_jobs;
    }
    cv_.notify_all();  // room in the budget or a thread: waiting work may go on
  }
}

Prefetcher::Stats Prefetcher::stats() const {
  std::lock_guard lk(mu_);
  Stats s = stats_;
  s.held_bytes = held_bytes_;
  s.filling = fills_.size();
  return s;
}

}  // namespace igt
