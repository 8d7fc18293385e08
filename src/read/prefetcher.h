#pragma once
// Prefetcher: runs prefetch plans in the background (DESIGN.md sec. 3 step
// 5) with a small pool of threads calling ReadPipeline::Fetch, under a global
// budget.
//
// Budget and backpressure: every queued or running job holds its bytes
// (the bytes of its units: a small file counts its size, but at least
// kMinJobHeldBytes) against `budget_bytes`; a plan that does not fit is
// dropped (counted), never queued without bound and never blocking the read
// path. So the memory prefetching can hold is at most budget_bytes of
// queued work plus `threads` GET bodies of at most max_request_bytes in
// flight, however many files are open. Units already cached or already queued
// are skipped at Submit.
// Priorities: readahead (units a reader is about to ask for) runs first.
// Background jobs (speculative: an epoch's unread items, warm-ups) and fills
// run only on threads readahead leaves idle, never on the last two, and
// background jobs hold at most half the budget: however much speculation is
// queued, a reader's readahead is neither dropped for it nor queued behind it.
// Hooks: `begin`/`end` bracket each job, on the worker thread (tests gate a
// job with them). Inserts of a job are marked as prefetches by the
// ReadPipeline itself (BlockStore::Put's `prefetched`).
// Thread-safety: Submit and stats are safe from any thread. The destructor
// drops queued jobs and joins the workers (running fetches complete).

#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "igtcache/block_store.h"
#include "src/read/read_pipeline.h"

namespace igt {

class Prefetcher {
 public:
  // What a queued job holds of the budget at least. A job's own bookkeeping
  // (its file's key and ETag, its units' tags, its queue slot) is a few
  // hundred bytes: jobs of files of a few bytes each counted only those, so
  // an epoch of a million tiny files could queue all of them, hundreds of
  // MB outside the budget (a 20,000-file epoch queued 20,000 jobs). With
  // this floor the default budget queues at most 32,768 jobs.
  static constexpr uint64_t kMinJobHeldBytes = 4096;
  // Submit spreads a run over the threads in jobs of at least this many
  // units (fewer only where the run is shorter): a 1-unit GET spends 25 ms
  // of its 36.6 ms waiting for the first byte (1 MiB at 90 MB/s), and with
  // every connection busy, 1-unit jobs took up to 75% longer than 8-unit
  // ones (a review's traces in `igtcache sim`: eight shards read a record
  // each in turn, pools of 8-16 workers). The simulator uses it too.
  static constexpr uint64_t kMinSpreadUnits = 2;
  struct Options {
    size_t threads = 8;                 // Default: 8 fetches at once
    uint64_t budget_bytes = 128 << 20;  // Default: 128 MiB queued + running
    uint64_t max_job_units = 8;         // a job is at most 8 units (one ranged GET); fewer when
                                        // the work in hand is spread over the threads (Submit)
    // After a fill's GET fails, Fill refuses that file for this long: a
    // partial fill is proposed again on every read, and must not keep an
    // unreachable or failing backend busy with a new job per read.
    std::chrono::milliseconds fill_retry_after{10'000};
    // Fills keep to a quarter of the budget for this long after a
    // background Submit (a speculative plan must find room: it is dropped,
    // not queued, when there is none).
    std::chrono::milliseconds fill_share_hold{2'000};
  };
  using Hook = std::function<void(const std::string& key, uint64_t first, uint64_t last)>;
  enum class Priority { kReadahead, kBackground };

  // `store` may be null (no skip of cached units). Not owned.
  Prefetcher(ReadPipeline* pipeline, BlockStore* store, Options opts, Hook begin = {}, Hook end = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues units [first, last] of `file` (clamped to the file). Returns the
  // number of units queued; the rest were cached, already queued, or dropped
  // for the budget.
  size_t Submit(const FileVersion& file, uint64_t first, uint64_t last, Priority prio = Priority::kReadahead);

  // The file's last handle closed: its queued readahead jobs (not running
  // ones, which readers may have joined; not background work or fills,
  // which are for reads to come) are dropped, their budget given back.
  // Returns the units dropped. O(1) when none is queued.
  size_t DropReadahead(const FileVersion& file);

  // Fetches every unit of `file` not cached yet, in the background, with the
  // threads Submit's jobs leave free and within background's half of the
  // budget, of which fills hold at most a quarter of the budget (or one job)
  // while background Submits came within fill_share_hold (else the whole
  // half: a file filled alone, e.g. a model faulted at random, fills twice
  // as fast): a fill is never dropped for the budget, it waits for room (at most kMaxFills files at once;
  // more are refused). With `max_bytes` > 0 it starts jobs of at most that
  // many bytes in all (a partial fill); called again for a file being
  // filled, it sets the fill's limit to `max_bytes` less the bytes of its
  // jobs still in flight (0 lifts the limit). Returns false if refused (the
  // file's last fill failed less than fill_retry_after ago, kMaxFills files
  // are being filled, or a new fill while the cache takes no inserts:
  // running fills wait then) or if the file is being filled without a
  // limit already.
  bool Fill(const FileVersion& file, uint64_t max_bytes = 0);
  static constexpr size_t kMaxFills = 16;

  struct Stats {
    uint64_t queued_units = 0, dropped_units = 0, fetched_units = 0, failed_jobs = 0;
    uint64_t fills = 0, filling = 0;  // fills started; files being filled now
    uint64_t held_bytes = 0, peak_held_bytes = 0;
  };
  Stats stats() const;

 private:
  // Stops and joins the workers (the destructor; a constructor that failed).
  void Stop() noexcept;
  // A unit (key, etag, index) or a file version (index kFileTag): XXH3-128,
  // a value, so that looking one up or erasing it never allocates (the
  // bookkeeping after a job must not throw: it gives the budget back).
  struct Tag {
    uint64_t lo = 0, hi = 0;
    bool operator==(const Tag&) const = default;
  };
  struct TagHash {
    size_t operator()(const Tag& t) const noexcept { return t.lo; }
  };
  static constexpr uint64_t kFileTag = UINT64_MAX;
  static Tag TagOf(const FileVersion& f, uint64_t unit) noexcept;
  struct Job {
    FileVersion file;
    uint64_t first = 0, last = 0, bytes = 0;
    bool fill = false, background = false;  // a fill is background too
    uint64_t fill_id = 0;  // FillState::id of a fill's job
  };
  struct FillState {
    FileVersion file;
    uint64_t next = 0;  // first unit not looked at yet
    uint64_t allowed = 0;   // bytes it may still start (UINT64_MAX: no limit)
    uint64_t inflight = 0;  // bytes of its jobs being fetched
    // Which fill: a job that ends after its fill was dropped (a failure) and
    // the file filled again must not count against the new one.
    uint64_t id = 0;
  };
  static Job MakeJob(const FileVersion& file, uint64_t first, uint64_t last, uint64_t bytes, bool fill,
                     bool background, uint64_t fill_id);
  void Worker();
  // Under mu_: the next job to run, readahead first, then background jobs
  // and fills as their share of the threads allows; false if none may run.
  // `paused`: none because the cache takes no inserts.
  bool NextJobLocked(Job* job, bool* paused);
  // Under mu_: drops every queued job, giving back its tags and budget.
  void DropQueuedLocked() noexcept;
  static constexpr std::chrono::milliseconds kPausedPoll{500};
  // Under mu_: the next run of a fill's units to fetch, if the budget allows.
  bool NextFillJobLocked(Job* job);
  // Under mu_: the fill of this version of a file, or fills_.end().
  std::deque<FillState>::iterator FindFillLocked(const FileVersion& file);

  ReadPipeline* pipeline_;
  BlockStore* store_;
  const Options opts_;
  Hook begin_, end_;

  mutable std::mutex mu_;        // guards everything below
  std::condition_variable cv_;
  std::deque<Job> queue_;     // readahead
  std::deque<Job> bg_queue_;  // background
  std::deque<FillState> fills_;
  uint64_t next_fill_id_ = 1;
  // key + etag of files whose last fill job failed -> until when Fill
  // refuses them (bounded: cleared past kMaxFills * 64 entries).
  std::unordered_map<Tag, std::chrono::steady_clock::time_point, TagHash> fill_failed_;
  size_t bg_running_ = 0;     // background and fill jobs being fetched
  uint64_t bg_held_bytes_ = 0;    // held by background jobs, fills included (<= budget / 2)
  uint64_t fill_held_bytes_ = 0;  // held by fill jobs (<= budget / 4, or one job, after background work)
  std::chrono::steady_clock::time_point last_bg_submit_{};  // the last background Submit
  std::unordered_set<Tag, TagHash> units_;  // units (etag, key, index) queued or running
  // File versions (TagOf(file, kFileTag)) -> their jobs in queue_ (DropReadahead).
  std::unordered_map<Tag, uint32_t, TagHash> queued_readahead_;
  void UncountReadaheadLocked(const FileVersion& file) noexcept;
  uint64_t held_bytes_ = 0;
  bool stop_ = false;
  Stats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace igt
