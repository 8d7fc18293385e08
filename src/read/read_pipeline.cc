#include "src/read/read_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
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
  std::string data;        // the whole unit, once done && status.ok()
};

// A unit this call is responsible for.
struct ReadPipeline::Need {
  uint64_t unit;
  std::shared_ptr<Flight> flight;
  bool leader;
};

ReadPipeline::ReadPipeline(Backend* backend, BlockStore* store, Metrics* metrics, Options opts)
    : backend_(backend), store_(store), metrics_(metrics), opts_(opts) {}

std::string ReadPipeline::FlightKey(const FileVersion& f, uint64_t unit) const {
  std::string k = f.key;
  k.push_back('\0');
  k += f.etag;
  k.push_back('\0');
  k += std::to_string(unit);
  return k;
}

Status ReadPipeline::FetchRuns(const FileVersion& file, std::vector<Need>& needs) {
  const uint64_t U = opts_.unit_size;
  const uint64_t max_units = std::max<uint64_t>(1, opts_.max_request_bytes / U);
  Status first_error;
  std::string buf;
  // A unit may have been inserted by a fetch that finished between our store
  // lookup and our becoming its leader (Put happens before the flight ends):
  // look again so each unit is fetched once.
  if (store_) {
    for (auto& n : needs) {
      if (!n.leader) continue;
      const uint64_t ulen = std::min(U, file.size - n.unit * U);
      std::string data(ulen, '\0');
      auto hit = store_->Read(UnitKey{file.key, file.etag, n.unit}, 0, ulen, data.data());
      if (!hit || *hit != ulen) continue;
      {
        std::lock_guard lk(n.flight->mu);
        n.flight->data = std::move(data);
        n.flight->done = true;
      }
      n.flight->cv.notify_all();
      {
        std::lock_guard lk(mu_);
        flights_.erase(FlightKey(file, n.unit));
      }
      n.leader = false;
    }
  }
  for (size_t i = 0; i < needs.size();) {
    if (!needs[i].leader) {
      ++i;
      continue;
    }
    size_t j = i + 1;  // extend the run over adjacent units we lead
    while (j < needs.size() && needs[j].leader && needs[j].unit == needs[j - 1].unit + 1 &&
           j - i < max_units)
      ++j;
    const uint64_t off = needs[i].unit * U;
    const uint64_t end = std::min(file.size, (needs[j - 1].unit + 1) * U);
    const size_t len = static_cast<size_t>(end - off);
    buf.resize(len);
    if (metrics_) Add(metrics_->backend_get_requests);
    auto got = backend_->Read(file.key, off, len, file.etag, buf.data());
    Status st;
    if (!got) {
      st = got.error();
    } else if (*got != len) {
      st = Status::Changed(fmt::format("'{}' returned {} bytes at offset {}, expected {}: the "
                                       "object changed size", file.key, *got, off, len));
    }
    if (got && metrics_) Add(metrics_->backend_get_bytes, *got);
    for (size_t k = i; k < j; ++k) {
      const uint64_t uoff = needs[k].unit * U - off;
      const uint64_t ulen = std::min(U, file.size - needs[k].unit * U);
      std::string unit_data;
      if (st.ok()) {
        unit_data.assign(buf.data() + uoff, ulen);
        if (store_) (void)store_->Put(UnitKey{file.key, file.etag, needs[k].unit}, unit_data);
      }
      auto& fl = needs[k].flight;
      {
        std::lock_guard lk(fl->mu);
        fl->status = st;
        fl->data = std::move(unit_data);
        fl->done = true;
      }
      fl->cv.notify_all();
      std::lock_guard lk(mu_);
      flights_.erase(FlightKey(file, needs[k].unit));
    }
    if (!st.ok() && first_error.ok()) first_error = st;
    i = j;
  }
  return first_error;
}

Result<size_t> ReadPipeline::Read(const FileVersion& file, uint64_t offset, size_t length,
                                  char* out) {
  if (offset >= file.size || length == 0) return size_t{0};
  const uint64_t U = opts_.unit_size;
  const uint64_t end = std::min<uint64_t>(file.size, offset + length);
  const uint64_t first = offset / U, last = (end - 1) / U;

  std::vector<Need> needs;
  for (uint64_t u = first; u <= last; ++u) {
    const uint64_t ustart = u * U;
    const uint64_t from = std::max(offset, ustart), to = std::min(end, ustart + U);
    if (store_) {
      auto hit = store_->Read(UnitKey{file.key, file.etag, u}, from - ustart, to - from,
                              out + (from - offset));
      if (hit && *hit == to - from) {
        if (metrics_) {
          Add(metrics_->cache_hit_units);
          Add(metrics_->cache_hit_bytes, to - from);
        }
        continue;
      }
    }
    if (metrics_) {
      Add(metrics_->cache_miss_units);
      Add(metrics_->cache_miss_bytes, to - from);
    }
    std::lock_guard lk(mu_);
    auto key = FlightKey(file, u);
    if (auto it = flights_.find(key); it != flights_.end()) {
      needs.push_back({u, it->second, false});
      if (metrics_) Add(metrics_->singleflight_waits);
    } else {
      auto fl = std::make_shared<Flight>();
      flights_.emplace(key, fl);
      needs.push_back({u, fl, true});
    }
  }
  if (needs.empty()) return static_cast<size_t>(end - offset);

  Status st = FetchRuns(file, needs);
  // Copy every needed unit's bytes (ours and those fetched by other threads).
  for (auto& n : needs) {
    std::unique_lock lk(n.flight->mu);
    n.flight->cv.wait(lk, [&] { return n.flight->done; });
    if (!n.flight->status.ok()) {
      if (st.ok()) st = n.flight->status;
      continue;
    }
    const uint64_t ustart = n.unit * U;
    const uint64_t from = std::max(offset, ustart), to = std::min(end, ustart + U);
    if (n.flight->data.size() < to - ustart) {
      if (st.ok()) st = Status::Internal("short unit in flight");
      continue;
    }
    std::memcpy(out + (from - offset), n.flight->data.data() + (from - ustart), to - from);
  }
  if (!st.ok()) return Err(st);
  return static_cast<size_t>(end - offset);
}

Status ReadPipeline::Fetch(const FileVersion& file, uint64_t first_unit, uint64_t last_unit) {
  if (file.size == 0) return Status::Ok();
  const uint64_t U = opts_.unit_size;
  last_unit = std::min(last_unit, (file.size - 1) / U);
  std::vector<Need> needs;
  for (uint64_t u = first_unit; u <= last_unit; ++u) {
    if (store_ && store_->Contains(UnitKey{file.key, file.etag, u})) continue;
    std::lock_guard lk(mu_);
    auto key = FlightKey(file, u);
    if (flights_.count(key)) continue;  // someone is already fetching it
    auto fl = std::make_shared<Flight>();
    flights_.emplace(key, fl);
    needs.push_back({u, fl, true});
  }
  return FetchRuns(file, needs);
}

}  // namespace igt
