// Prefetcher (prefetcher.h).

#include "src/read/prefetcher.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace igt {
namespace {

std::string UnitTag(const FileVersion& f, uint64_t u) {
  std::string s = f.etag;
  s += '#';
  s += f.key;
  s += '#';
  s += std::to_string(u);
  return s;
}

}  // namespace

Prefetcher::Prefetcher(ReadPipeline* pipeline, BlockStore* store, Options opts, Hook begin, Hook end)
    : pipeline_(pipeline), store_(store), opts_(opts), begin_(std::move(begin)), end_(std::move(end)) {
  for (size_t i = 0; i < std::max<size_t>(1, opts_.threads); ++i) threads_.emplace_back([this] { Worker(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

size_t Prefetcher::Submit(const FileVersion& file, uint64_t first, uint64_t last) {
  const uint64_t unit = pipeline_->unit_size();
  if (file.size == 0 || unit == 0) return 0;
  last = std::min(last, (file.size - 1) / unit);
  if (first > last) return 0;
  // Skip cached units outside the lock (the store takes its own).
  std::vector<uint64_t> want;
  for (uint64_t u = first; u <= last; ++u)
    if (!store_ || !store_->Contains(UnitKey{file.key, file.etag, u})) want.push_back(u);
  size_t queued = 0;
  {
    std::lock_guard lk(mu_);
    if (stop_) return 0;
    size_t i = 0;
    while (i < want.size()) {
      if (units_.count(UnitTag(file, want[i]))) {
        ++i;
        continue;
      }
      // A run of adjacent units not queued yet, at most max_job_units.
      size_t j = i;
      while (j + 1 < want.size() && want[j + 1] == want[j] + 1 && j + 1 - i < opts_.max_job_units &&
             !units_.count(UnitTag(file, want[j + 1])))
        ++j;
      const uint64_t bytes = (want[j] - want[i] + 1) * unit;
      if (held_bytes_ + bytes > opts_.budget_bytes) {
        stats_.dropped_units += want.size() - i;  // backpressure: drop the rest
        break;
      }
      for (size_t k = i; k <= j; ++k) units_.insert(UnitTag(file, want[k]));
      queue_.push_back(Job{file, want[i], want[j], bytes});
      held_bytes_ += bytes;
      stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, held_bytes_);
      stats_.queued_units += j - i + 1;
      queued += j - i + 1;
      i = j + 1;
    }
  }
  if (queued) cv_.notify_all();
  return queued;
}

void Prefetcher::Worker() {
  while (true) {
    Job job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (begin_) begin_(job.file.key, job.first, job.last);
    Status s = pipeline_->Fetch(job.file, job.first, job.last);
    if (end_) end_(job.file.key, job.first, job.last);
    if (!s.ok()) spdlog::debug("prefetch {} [{}, {}]: {}", job.file.key, job.first, job.last, s.ToString());
    std::lock_guard lk(mu_);
    for (uint64_t u = job.first; u <= job.last; ++u) units_.erase(UnitTag(job.file, u));
    held_bytes_ -= job.bytes;
    if (s.ok()) stats_.fetched_units += job.last - job.first + 1;
    else ++stats_.failed_jobs;
  }
}

Prefetcher::Stats Prefetcher::stats() const {
  std::lock_guard lk(mu_);
  Stats s = stats_;
  s.held_bytes = held_bytes_;
  return s;
}

}  // namespace igt
