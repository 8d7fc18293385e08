// Trace-driven simulator (simulator.h).

#include "src/sim/simulator.h"
#include "igtcache/file_check.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <tuple>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "igtcache/block_store.h"
#include "igtcache/config.h"
#include "src/config/stream_settings.h"
#include "src/engine/policy_engine.h"
#include "src/read/prefetcher.h"
#include "src/stream/access_stream_tree.h"
#include "src/stream/trace.h"

namespace igt::sim {
namespace {

constexpr uint64_t kMaintainEveryUs = 200000;  // tree upkeep every 200 ms of trace time

struct Row {
  uint64_t t_us;
  uint32_t pid;
  uint32_t file;  // index into Trace::files
  uint64_t off, len;
};

struct FileInfo {
  std::string path;
  uint64_t size = 0;
};

struct Trace {
  std::vector<Row> rows;
  std::vector<FileInfo> files;
  // Directory ("" root, "a/") -> files directly in it, listing order.
  std::unordered_map<std::string, std::vector<ListedFile>> listing;
  // Directory -> distinct direct children (files and subdirectories).
  std::unordered_map<std::string, uint64_t> n_children;
};

std::string Parent(std::string_view p) {
  auto s = p.rfind('/');
  return s == std::string_view::npos ? std::string() : std::string(p.substr(0, s + 1));
}

// The listing's objects into `t.files`: objects the trace does not read are
// added without rows; a size that differs from the trace's takes the larger.
Status LoadListing(const std::string& path, Trace& t, std::unordered_map<std::string, uint32_t>& ids) {
  return stream::ReadListing(path, [&](std::string p, uint64_t size) {
    auto [it, fresh] = ids.try_emplace(p, uint32_t(t.files.size()));
    if (fresh) t.files.push_back({std::move(p), size});
    t.files[it->second].size = std::max(t.files[it->second].size, size);
  });
}

Result<Trace> LoadTrace(const std::string& path, const std::string& listing_path) {
  auto rd = stream::TraceReader::Open(path);
  if (!rd) return Err(rd.error());
  Trace t;
  std::unordered_map<std::string, uint32_t> ids;
  stream::TraceRecord r;
  while (true) {
    auto more = (*rd)->Next(r);
    if (!more) return Err(more.error());
    if (!*more) break;
    auto [it, fresh] = ids.try_emplace(r.path, uint32_t(t.files.size()));
    if (fresh) t.files.push_back({r.path, r.file_size});
    t.files[it->second].size = std::max(t.files[it->second].size, r.file_size);
    // The length the file has bytes for, as the mount records and replays it
    // (a trace may carry what the kernel asked for, past EOF). This also
    // keeps offset + length from wrapping.
    const uint64_t len = stream::BytesInFile(r.offset, r.length, r.file_size);
    t.rows.push_back({r.time_us, r.pid, it->second, r.offset, len});
  }
  if (!listing_path.empty())
    if (Status s = LoadListing(listing_path, t, ids); !s.ok()) return Err(s);
  std::unordered_map<std::string, std::set<std::string>> children;
  for (const auto& f : t.files) {
    t.listing[Parent(f.path)].push_back({f.path, f.size});
    // Every ancestor directory counts its direct child.
    std::string_view p = f.path;
    while (true) {
      std::string dir = Parent(p);
      std::string child(p.substr(dir.size()));
      children[dir].insert(child);
      if (dir.empty()) break;
      p = std::string_view(f.path).substr(0, dir.size() - 1);
    }
  }
  // Subdirectories are listed in their parent too, as in a mount's listings.
  for (const auto& [d, c] : children)
    if (!d.empty()) t.listing[Parent(std::string_view(d).substr(0, d.size() - 1))].push_back({d, 0, true});
  for (auto& [d, l] : t.listing)
    std::sort(l.begin(), l.end(), [](const ListedFile& a, const ListedFile& b) { return a.path < b.path; });
  for (auto& [d, c] : children) t.n_children[d] = c.size();
  return t;
}

// The backend: connections with the time each is next free (seconds).
class Backend {
 public:
  Backend(const SimOptions& o) : lat_(o.latency_ms / 1000.0), bw_(o.bandwidth_bytes_per_s), free_(o.connections, 0.0) {}
  // Starts a GET at time `t`; returns its start (first byte at start+lat).
  double Get(double t, uint64_t bytes) {
    auto it = std::min_element(free_.begin(), free_.end());
    const double start = std::max(t, *it);
    *it = start + lat_ + double(bytes) / bw_;
    ++requests_;
    bytes_ += bytes;
    return start;
  }
  // When byte `k` (1-based count) of a GET started at `start` has arrived.
  double Arrival(double start, uint64_t k) const { return start + lat_ + double(k) / bw_; }
  size_t IdleAt(double t) const {
    return size_t(std::count_if(free_.begin(), free_.end(), [t](double f) { return f <= t; }));
  }
  uint64_t requests() const { return requests_; }
  uint64_t bytes() const { return bytes_; }

 private:
  double lat_, bw_;
  std::vector<double> free_;
  uint64_t requests_ = 0, bytes_ = 0;
};

uint64_t UnitCount(uint64_t size, uint64_t unit) { return size == 0 ? 1 : (size + unit - 1) / unit; }
uint64_t UnitBytes(uint64_t size, uint64_t unit, uint64_t idx) {
  const uint64_t start = idx * unit;
  return start >= size ? 0 : std::min(unit, size - start);
}

// A store unit (a whole unit or a sub-unit) of one file.
struct Piece {
  std::string id;
  uint64_t off, len;  // the file's bytes it holds
  uint64_t index;     // unit index or SubUnitIndex()
};

struct Counters {
  uint64_t requests = 0, hit_requests = 0, req_bytes = 0, hit_bytes = 0;
  uint64_t prefetch_bytes = 0;
  // Per top-level directory (one workload of a mixed trace).
  struct Part {
    uint64_t requests = 0, req_bytes = 0, hit_bytes = 0;
    double stall = 0;
  };
  std::map<std::string, Part> parts;
  void Add(const std::string& path, uint64_t req, uint64_t hit, double stall) {
    auto s = path.find('/');
    Part& p = parts[s == std::string::npos ? std::string("/") : path.substr(0, s + 1)];
    ++p.requests;
    p.req_bytes += req;
    p.hit_bytes += hit;
    p.stall += stall;
  }
};

// Per-reader closed-loop clocks, run as a discrete-event simulation: each
// reader (pid) issues its reads in trace order; a read is issued when the
// reader's previous read completed plus the trace gap between the two (its
// compute time); reads of all readers are processed in order of issue time,
// so the cache and the connections see them as they would happen.
//
// A reader that began after others had ended (in the trace) starts after
// they end here too, with the same gap: its start is its trace time moved by
// the largest delay (modeled end - trace end) of those readers. A
// DataLoader without persistent workers starts new processes each epoch;
// started at their trace times they overlapped the previous epoch's
// workers whenever the replay ran slower than the recording, and could not
// start sooner when it ran faster. Readers that overlap in the trace keep
// their own clocks (no order between them is known).
class Clocks {
 public:
  explicit Clocks(const std::vector<Row>& rows) : rows_(rows) {
    t0_ = rows.empty() ? 0 : rows.front().t_us;
    // With every read a hit, each reader ends at its last trace time.
    no_stall_end = rows.empty() ? 0 : double(rows.back().t_us - t0_) / 1e6;
    std::map<uint32_t, size_t> slot;
    for (size_t i = 0; i < rows.size(); ++i) {
      auto [it, fresh] = slot.try_emplace(rows[i].pid, per_pid_.size());
      if (fresh) per_pid_.push_back({rows[i].pid, {}, 0});
      per_pid_[it->second].rows.push_back(i);
    }
    // Readers by trace end; each reader waits for the prefix of that order
    // that ended before it began (rows are in time order: first rows too).
    by_end_.resize(per_pid_.size());
    std::iota(by_end_.begin(), by_end_.end(), size_t{0});
    std::stable_sort(by_end_.begin(), by_end_.end(), [&](size_t a, size_t b) { return LastUs(a) < LastUs(b); });
    done_.assign(per_pid_.size(), false);
    delay_prefix_.assign(1, 0.0);
    for (size_t p = 0; p < per_pid_.size(); ++p) {
      const uint64_t first = FirstUs(p);
      const size_t before = size_t(std::lower_bound(by_end_.begin(), by_end_.end(), first,
                                                    [&](size_t q, uint64_t t) { return LastUs(q) < t; }) -
                                   by_end_.begin());
      if (before == 0) {
        heap_.push({double(first - t0_) / 1e6, seq_++, p});
      } else {
        waiting_.emplace(before, p);
      }
    }
  }
  // The next read to process (in issue-time order); false when all are done.
  bool Next(size_t* row, double* issue) {
    if (heap_.empty()) return false;
    auto [t, seq, p] = heap_.top();
    heap_.pop();
    current_ = p;
    *row = per_pid_[p].rows[per_pid_[p].pos];
    *issue = t;
    return true;
  }
  // The read returned by the last Next() completed at `t`.
  void Complete(size_t row, double issue, double t) {
    Reader& rd = per_pid_[current_];
    end = std::max(end, t);
    stall += t - issue;
    pid_end[rd.pid] = t;
    if (++rd.pos < rd.rows.size()) {
      const size_t next = rd.rows[rd.pos];
      heap_.push({t + double(rows_[next].t_us - rows_[row].t_us) / 1e6, seq_++, current_});
      return;
    }
    // The reader ended: readers that began after every reader up to the
    // longest finished prefix (by trace end) had ended may start.
    done_[current_] = true;
    while (delay_prefix_.size() - 1 < by_end_.size() && done_[by_end_[delay_prefix_.size() - 1]]) {
      const size_t q = by_end_[delay_prefix_.size() - 1];
      const double delay = pid_end.at(per_pid_[q].pid) - double(LastUs(q) - t0_) / 1e6;
      delay_prefix_.push_back(delay_prefix_.size() == 1 ? delay : std::max(delay_prefix_.back(), delay));
    }
    const size_t finished = delay_prefix_.size() - 1;
    while (!waiting_.empty() && waiting_.begin()->first <= finished) {
      auto [before, p] = *waiting_.begin();
      waiting_.erase(waiting_.begin());
      const double start = double(FirstUs(p) - t0_) / 1e6 + delay_prefix_[before];
      heap_.push({std::max(start, t), seq_++, p});
    }
  }
  uint64_t t0() const { return t0_; }

  double end = 0;
  double stall = 0;  // sum over reads of (completion - issue)
  double no_stall_end = 0;  // the makespan if no read ever waited (a bound for any policy)
  std::map<uint32_t, double> pid_end;

 private:
  struct Reader {
    uint32_t pid;
    std::vector<size_t> rows;
    size_t pos;
  };
  uint64_t FirstUs(size_t p) const { return rows_[per_pid_[p].rows.front()].t_us; }
  uint64_t LastUs(size_t p) const { return rows_[per_pid_[p].rows.back()].t_us; }
  using Event = std::tuple<double, uint64_t, size_t>;  // issue time, tie-break, reader
  const std::vector<Row>& rows_;
  uint64_t t0_ = 0;
  std::vector<Reader> per_pid_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap_;
  uint64_t seq_ = 0;
  size_t current_ = 0;
  std::vector<size_t> by_end_;    // readers by trace end
  std::vector<bool> done_;
  // delay_prefix_[k]: the largest (modeled end - trace end) of by_end_'s
  // first k readers, once all k ended (delay_prefix_[0] = 0).
  std::vector<double> delay_prefix_;
  std::multimap<size_t, size_t> waiting_;  // readers that wait for a prefix: its length -> reader
};

nlohmann::json Output(const SimOptions& o, const Counters& c, const Backend& be, uint64_t prefetch_wasted,
                      const Clocks& clk, uint64_t unit) {
  const double modeled = clk.end;
  nlohmann::json j;
  j["policy"] = o.policy;
  j["cache_size"] = o.cache_bytes;
  j["requests"] = c.requests;
  j["hit_ratio"] = c.requests ? double(c.hit_requests) / double(c.requests) : 0.0;
  j["byte_hit_ratio"] = c.req_bytes ? double(c.hit_bytes) / double(c.req_bytes) : 0.0;
  j["backend_bytes"] = be.bytes();
  j["backend_requests"] = be.requests();
  j["prefetch_bytes"] = c.prefetch_bytes;
  j["prefetch_wasted_bytes"] = prefetch_wasted;
  j["modeled_time_s"] = modeled;
  j["details"] = {{"unit_bytes", unit},
                  {"requested_bytes", c.req_bytes},
                  {"hit_bytes", c.hit_bytes},
                  {"latency_ms", o.latency_ms},
                  {"bandwidth_bytes_per_s", o.bandwidth_bytes_per_s},
                  {"connections", o.connections},
                  {"max_request_bytes", o.max_request_bytes},
                  {"prefetch_budget_bytes", o.prefetch_budget_bytes},
                  {"stall_time_s", clk.stall},
                  {"no_stall_time_s", clk.no_stall_end}};
  nlohmann::json ends = nlohmann::json::object();
  for (const auto& [pid, t] : clk.pid_end) ends[std::to_string(pid)] = t;
  j["details"]["reader_end_s"] = ends;
  nlohmann::json parts = nlohmann::json::object();
  for (const auto& [dir, p] : c.parts)
    parts[dir] = {{"requests", p.requests},
                  {"byte_hit_ratio", p.req_bytes ? double(p.hit_bytes) / double(p.req_bytes) : 0.0},
                  {"stall_time_s", p.stall}};
  j["details"]["by_top_dir"] = parts;
  return j;
}

// ---------------------------------------------------------------------------
// Engine policies (igt and the online baselines).

Result<nlohmann::json> RunEngine(const SimOptions& o, const Trace& tr, uint64_t unit, uint64_t sub_unit,
                                 const stream::StreamConfig& scfg, const engine::PolicyFile& pf) {
  std::unique_ptr<stream::AccessStreamTree> tree;
  if (o.policy == "igt") {
    tree = std::make_unique<stream::AccessStreamTree>(scfg);
    for (const auto& [dir, n] : tr.n_children) tree->NoteListing(dir, n);
  }
  engine::EngineOptions eo;
  eo.policy = o.policy;
  eo.unit_bytes = unit;
  eo.sub_unit_bytes = sub_unit;
  eo.capacity_bytes = o.cache_bytes;
  eo.policy_file = pf;
  eo.seed = o.seed;
  eo.miss_latency_us = o.latency_ms * 1000;
  eo.bandwidth_bytes_per_s = o.bandwidth_bytes_per_s;
  engine::ListingFn listing = [&tr](std::string_view dir) -> const std::vector<ListedFile>* {
    auto it = tr.listing.find(std::string(dir));
    return it == tr.listing.end() ? nullptr : &it->second;
  };
  auto eng = engine::PolicyEngine::Create(eo, tree.get(), listing);
  if (!eng) return Err(eng.error());
  engine::PolicyEngine& e = **eng;

  Backend be(o);
  Counters c;
  Clocks clk(tr.rows);
  std::unordered_map<std::string, double> ready;  // cached unit id -> arrival time
  std::vector<std::pair<double, uint64_t>> pf_inflight;  // (done, bytes) of prefetch GETs
  struct Fill {
    uint32_t file;
    uint64_t next, last;  // units still to fetch
    uint64_t allowed;     // bytes it may still fetch (UINT64_MAX: no limit)
  };
  std::vector<Fill> fills;  // queued fills (PrefetchRange::fill)
  uint64_t next_maintain = clk.t0() + kMaintainEveryUs;

  auto unit_id = [](const std::string& path, uint64_t idx) {
    std::string id = path;
    id += '#';
    id += std::to_string(idx);
    return id;
  };
  // As ReadPipeline: a unit with sub-units cached or in flight is never
  // fetched whole (whatever the file's label now), by a read or a prefetch.
  const uint64_t sub_size = sub_unit > 0 && sub_unit < unit ? sub_unit : 0;
  std::unordered_set<std::string> sub_files;  // files a sub-unit was ever inserted for
  auto sub_taken = [&](const FileInfo& f, uint64_t i) {
    if (sub_size == 0 || !sub_files.count(f.path)) return false;
    bool taken = false;
    ForEachSubUnit(i * unit, std::min(f.size, (i + 1) * unit), sub_size, [&](uint64_t idx, uint64_t) {
      taken = taken || ready.count(unit_id(f.path, idx)) != 0;
    });
    return taken;
  };
  // Evicts until `need` more bytes fit.
  auto make_room = [&](double now, uint64_t need) {
    const uint64_t now_us = uint64_t(now * 1e6);
    while (e.cached_bytes() + need > o.cache_bytes) {
      auto v = e.PickVictim(now_us);
      if (!v || !e.Contains(*v)) break;
      e.OnRemove(*v);
      ready.erase(*v);
    }
  };
  // Fetches `ps` (pieces of `f`, none cached, in offset order) as GETs of
  // adjacent pieces, each at most max_request_bytes, starting at `t`; inserts
  // them. Returns the arrival of the last byte.
  auto fetch_pieces = [&](const FileInfo& f, const std::vector<Piece>& ps, double t, bool prefetch) {
    double done = t;
    for (size_t i = 0; i < ps.size();) {
      uint64_t bytes = ps[i].len;
      size_t j = i + 1;
      while (j < ps.size() && ps[j].off == ps[j - 1].off + ps[j - 1].len && bytes + ps[j].len <= o.max_request_bytes)
        bytes += ps[j++].len;
      const double start = be.Get(t, bytes);
      uint64_t k = 0;
      for (size_t m = i; m < j; ++m) {
        k += ps[m].len;
        const double arrive = be.Arrival(start, k);
        done = std::max(done, arrive);
        if (!e.Admit(f.path)) continue;
        // As the BlockStore: an insert that must evict asks first.
        if (e.cached_bytes() + ps[m].len > o.cache_bytes && !e.AdmitInsert(f.path, prefetch, uint64_t(t * 1e6)))
          continue;
        // Room first, then the insert, as the BlockStore: inserted first, the
        // unit could be its own victim (lfu: a count of 1 among units read
        // twice; a reviewer: lfu fetched 4.7 GiB where lru fetched 0.7).
        make_room(t, ps[m].len);
        ready[ps[m].id] = arrive;
        if (IsSubUnit(ps[m].index)) sub_files.insert(f.path);
        e.OnInsert(ps[m].id, f.path, ps[m].index, ps[m].len, prefetch, uint64_t(t * 1e6));
        make_room(t, 0);
      }
      if (prefetch) {
        c.prefetch_bytes += bytes;
        pf_inflight.emplace_back(be.Arrival(start, bytes), bytes);
      }
      i = j;
    }
    return done;
  };
  // Unit i, and units [first, last], of `f` as pieces.
  auto unit_piece = [&](const FileInfo& f, uint64_t i) {
    return Piece{unit_id(f.path, i), i * unit, UnitBytes(f.size, unit, i), i};
  };
  auto unit_pieces = [&](const FileInfo& f, uint64_t first, uint64_t last) {
    std::vector<Piece> ps;
    for (uint64_t i = first; i <= last; ++i) ps.push_back(unit_piece(f, i));
    return ps;
  };
  std::unordered_map<std::string, uint32_t> file_ids;
  for (uint32_t i = 0; i < tr.files.size(); ++i) file_ids[tr.files[i].path] = i;

  size_t ri;
  double issue;
  while (clk.Next(&ri, &issue)) {
    const Row& r = tr.rows[ri];
    const FileInfo& f = tr.files[r.file];
    const uint64_t issue_us = uint64_t(issue * 1e6);
    if (tree) {
      const uint64_t t = clk.t0() + issue_us;  // the tree sees the simulated time
      tree->Record(t, r.pid, f.path, r.off, r.len, f.size);
      if (t >= next_maintain) {
        tree->Maintain(t);
        next_maintain = t + kMaintainEveryUs;
      }
    }
    auto plan = e.OnRead(issue_us, r.pid, f.path, r.off, r.len, f.size);

    // Demand: the units of the read. One at or past EOF reads no byte: not a
    // request (it would count as a hit).
    uint64_t len = stream::BytesInFile(r.off, r.len, f.size);
    if (len > 0) ++c.requests;
    c.req_bytes += len;
    double done = issue;
    uint64_t hit = 0;
    if (len > 0) {
      // A piece is a hit if it has arrived, a miss that waits if it is in
      // flight; missing pieces are fetched (whole units, or the sub-units the
      // read covers in a file read at random: PolicyEngine::SubUnitBytes).
      // A file never kept (never_cache) is fetched in the sub-units a read
      // covers whatever its size, as a mount reads it through
      // (ReadPipeline::ReadOnce).
      uint64_t sub = e.SubUnitBytes(f.path);
      if (sub == 0 && sub_size > 0 && !e.Admit(f.path)) sub = sub_size;
      std::vector<Piece> missing;
      auto look = [&](const std::string& id, uint64_t bytes) {
        auto it = ready.find(id);
        if (it == ready.end()) return false;
        const bool cached = it->second <= issue;
        if (cached) hit += bytes;
        else done = std::max(done, it->second);  // in flight: a miss that waits
        e.OnHit(id, bytes, issue_us, /*hit=*/cached);  // read either way; a stream hit if cached
        return true;
      };
      for (uint64_t i = r.off / unit; i <= (r.off + len - 1) / unit; ++i) {
        const uint64_t lo = std::max(r.off, i * unit), hi = std::min(r.off + len, (i + 1) * unit);
        const std::string id = unit_id(f.path, i);
        if (look(id, hi - lo)) continue;
        if (sub == 0 && !sub_taken(f, i)) {
          missing.push_back(unit_piece(f, i));
          continue;
        }
        ForEachSubUnit(lo, hi, sub_size, [&](uint64_t idx, uint64_t p) {
          std::string sid = unit_id(f.path, idx);
          if (!look(sid, std::min(hi, p + sub_size) - std::max(lo, p)))
            missing.push_back({std::move(sid), p, std::min(sub_size, f.size - p), idx});
        });
      }
      if (!missing.empty()) done = std::max(done, fetch_pieces(f, missing, issue, false));
    }
    c.hit_bytes += hit;
    if (len > 0 && hit == len) ++c.hit_requests;
    c.Add(f.path, len, hit, done - issue);
    clk.Complete(ri, issue, done);

    // Prefetch plan, under the bandwidth and in-flight budget: a range is
    // fetched in GETs of at most max_request_bytes, each on a connection
    // idle now while another stays idle for demand reads; the rest of the
    // plan is dropped. A fill (PrefetchRange::fill) is queued instead and
    // pumped after every read while more connections are idle (the live
    // Prefetcher runs it as a background task that waits for room).
    std::erase_if(pf_inflight, [&](const auto& p) { return p.first <= issue; });
    uint64_t inflight = 0;
    for (const auto& p : pf_inflight) inflight += p.second;
    // Issues the next GET of units [*i, last] of `pf` if `min_idle`
    // connections are idle and the budget allows, of at most `*allowed`
    // bytes (taken off it; null: no limit); false if it cannot.
    // A unit with sub-units cached or in flight gets its missing sub-units,
    // in a GET of their own (as ReadPipeline::Fetch).
    auto missing_subs = [&](const FileInfo& pf, uint64_t i) {
      std::vector<Piece> ps;
      ForEachSubUnit(i * unit, std::min(pf.size, (i + 1) * unit), sub_size, [&](uint64_t idx, uint64_t p) {
        std::string sid = unit_id(pf.path, idx);
        if (!ready.count(sid)) ps.push_back({std::move(sid), p, std::min(sub_size, pf.size - p), idx});
      });
      return ps;
    };
    auto issue_next = [&](const FileInfo& pf, uint64_t* i, uint64_t last, size_t min_idle, uint64_t* allowed) {
      std::vector<Piece> subs;
      while (*i <= last) {
        if (ready.count(unit_id(pf.path, *i))) {
          ++*i;
        } else if (sub_taken(pf, *i)) {
          if (!(subs = missing_subs(pf, *i)).empty()) break;
          ++*i;
        } else {
          break;
        }
      }
      if (*i > last) return true;
      uint64_t max_bytes = allowed ? std::min(o.max_request_bytes, *allowed) : o.max_request_bytes;
      // A readahead range is spread over the prefetch connections, as the
      // live Prefetcher spreads it over its threads (Prefetcher::Submit): GETs
      // of (the bytes in flight and this range) / (connections left to
      // prefetch), at least kMinSpreadUnits. A window's batch of 32 units
      // went out as four 8 MiB GETs on four connections, the reader waiting
      // 118 ms for the last of them where 12 GETs of 3 units take 60 ms. Not
      // fills, whose GETs are whole max_request_bytes (the live
      // Prefetcher's too).
      if (!allowed) {
        const uint64_t conns = std::max<uint64_t>(1, o.connections - std::min<uint64_t>(o.connections - 1, min_idle));
        const uint64_t ahead = (last - *i + 1) * unit + inflight;
        const uint64_t per = std::max<uint64_t>(Prefetcher::kMinSpreadUnits, (ahead + conns * unit - 1) / (conns * unit));
        max_bytes = std::min(max_bytes, per * unit);
      }
      uint64_t j = *i, bytes = 0;
      if (!subs.empty()) {
        for (const auto& p : subs) bytes += p.len;
      } else {
        bytes = UnitBytes(pf.size, unit, j);
      }
      if (allowed && bytes > *allowed) return false;
      while (subs.empty() && j + 1 <= last && !ready.count(unit_id(pf.path, j + 1)) && !sub_taken(pf, j + 1) &&
             bytes + UnitBytes(pf.size, unit, j + 1) <= max_bytes)
        bytes += UnitBytes(pf.size, unit, ++j);
      if (be.IdleAt(issue) < min_idle || inflight + bytes > o.prefetch_budget_bytes) return false;
      fetch_pieces(pf, subs.empty() ? unit_pieces(pf, *i, j) : subs, issue, true);
      inflight += bytes;
      if (allowed && *allowed != UINT64_MAX) *allowed -= bytes;
      *i = j + 1;
      return true;
    };
    bool stop = false;
    for (const auto& pr : plan) {
      auto fid = file_ids.find(pr.path);
      if (fid == file_ids.end() || !e.Admit(pr.path)) continue;
      const FileInfo& pf_file = tr.files[fid->second];
      if (pf_file.size == 0) continue;  // nothing to fetch (the live Prefetcher skips it too)
      const uint64_t last = std::min(pr.last_unit, UnitCount(pf_file.size, unit) - 1);
      if (pr.fill) {
        // As the live Prefetcher: a new limit replaces that of a partial
        // fill under way (units already inserted count in the engine's room).
        const uint64_t limit = pr.fill_bytes ? pr.fill_bytes : UINT64_MAX;
        auto it = std::find_if(fills.begin(), fills.end(), [&](const Fill& fl) { return fl.file == fid->second; });
        if (it == fills.end()) fills.push_back({fid->second, pr.first_unit, last, limit});
        else if (it->allowed != UINT64_MAX) it->allowed = limit;
        continue;
      }
      for (uint64_t i = pr.first_unit; !stop && i <= last;) stop = !issue_next(pf_file, &i, last, 2, nullptr);
    }
    // Fills leave two idle connections (demand and readahead).
    for (auto& fl : fills)
      while (fl.next <= fl.last && issue_next(tr.files[fl.file], &fl.next, fl.last, 3, &fl.allowed)) {}
    std::erase_if(fills, [&](const Fill& fl) {
      return fl.next > fl.last || fl.allowed < UnitBytes(tr.files[fl.file].size, unit, fl.next);
    });
  }
  const auto st = e.Stats();
  uint64_t wasted = st.prefetch_wasted_bytes;
  // Prefetched units never read by the end of the trace are waste too.
  wasted += st.prefetch_bytes - std::min(st.prefetch_bytes, st.prefetch_hit_bytes + st.prefetch_wasted_bytes);
  auto j = Output(o, c, be, wasted, clk, unit);
  j["details"]["engine"] = engine::ToJson(st);
  if (tree) j["details"]["tree_nodes"] = tree->Memory().nodes;
  return j;
}

// ---------------------------------------------------------------------------
// belady: Belady's MIN with bypass over whole units, demand fetches only
// (simulator.h says what it is and is not a bound on).

Result<nlohmann::json> RunBelady(const SimOptions& o, const Trace& tr, uint64_t unit) {
  // Unit touches in trace order and, for each, the position of the next
  // touch of the same unit.
  struct Touch {
    uint64_t uid;
    uint64_t next;
  };
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  std::vector<Touch> touches;
  std::vector<uint32_t> row_first;  // first touch index of each row
  row_first.reserve(tr.rows.size() + 1);
  for (const Row& r : tr.rows) {
    row_first.push_back(uint32_t(touches.size()));
    const FileInfo& f = tr.files[r.file];
    const uint64_t len = stream::BytesInFile(r.off, r.len, f.size);
    if (len == 0) continue;
    for (uint64_t i = r.off / unit; i <= (r.off + len - 1) / unit; ++i)
      touches.push_back({(uint64_t(r.file) << 32) | i, kNever});
  }
  row_first.push_back(uint32_t(touches.size()));
  // Each unit's first touch; the chain of `next` links its others.
  std::unordered_map<uint64_t, uint64_t> pending;  // uid -> first touch not replayed yet (cursor)
  {
    for (uint64_t k = touches.size(); k-- > 0;) {
      auto it = pending.find(touches[k].uid);
      touches[k].next = it == pending.end() ? kNever : it->second;
      pending[touches[k].uid] = k;
    }
  }
  // The replay issues rows in closed-loop order (each reader at its own
  // pace), not in trace order: a lagging reader's touch of a unit can come
  // after a later row's. A unit's next use is its first touch not replayed
  // yet, in trace order; a replayed touch's own `next` could point into the
  // past (a unit then ranked as needed soonest and never evicted) or be
  // kNever while a lagging reader still has a touch to come.
  std::vector<uint8_t> replayed(touches.size(), 0);
  auto replay = [&](uint64_t k) {  // marks touch k replayed; the unit's next use
    replayed[k] = 1;
    uint64_t& cur = pending[touches[k].uid];
    while (cur != kNever && replayed[cur]) cur = touches[cur].next;
    return cur;
  };
  Backend be(o);
  Counters c;
  Clocks clk(tr.rows);
  std::set<std::pair<uint64_t, uint64_t>> by_next;            // (next use, uid)
  std::unordered_map<uint64_t, std::pair<uint64_t, double>> cached;  // uid -> (next use, ready)
  uint64_t used = 0;
  auto ubytes = [&](uint64_t uid) { return UnitBytes(tr.files[uid >> 32].size, unit, uid & 0xffffffffu); };

  size_t ri;
  double issue;
  while (clk.Next(&ri, &issue)) {
    const Row& r = tr.rows[ri];
    const FileInfo& f = tr.files[r.file];
    const uint64_t len = stream::BytesInFile(r.off, r.len, f.size);
    if (len > 0) ++c.requests;  // past EOF: no byte read, not a hit
    c.req_bytes += len;
    double done = issue;
    uint64_t hit = 0;
    std::vector<std::pair<uint64_t, uint64_t>> miss;  // (touch index, the unit's next use)
    for (uint64_t k = row_first[ri]; k < row_first[ri + 1]; ++k) {
      const uint64_t uid = touches[k].uid, i = uid & 0xffffffffu;
      const uint64_t lo = std::max(r.off, i * unit), hi = std::min(r.off + len, (i + 1) * unit);
      const uint64_t next = replay(k);
      auto it = cached.find(uid);
      if (it != cached.end()) {
        if (it->second.second <= issue) hit += hi - lo;
        else done = std::max(done, it->second.second);
        by_next.erase({it->second.first, uid});
        it->second.first = next;
        by_next.insert({next, uid});
      } else {
        miss.emplace_back(k, next);
      }
    }
    // Fetch misses in runs of adjacent units.
    auto index_of = [&](size_t m) { return touches[miss[m].first].uid & 0xffffffffu; };
    for (size_t a = 0; a < miss.size();) {
      size_t b = a;
      uint64_t bytes = UnitBytes(f.size, unit, index_of(a));
      while (b + 1 < miss.size() && index_of(b + 1) == index_of(b) + 1 &&
             bytes + UnitBytes(f.size, unit, index_of(b + 1)) <= o.max_request_bytes) {
        ++b;
        bytes += UnitBytes(f.size, unit, index_of(b));
      }
      const double start = be.Get(issue, bytes);
      uint64_t kbytes = 0;
      for (size_t m = a; m <= b; ++m) {
        const uint64_t uid = touches[miss[m].first].uid, next = miss[m].second;
        const uint64_t ub = UnitBytes(f.size, unit, index_of(m));
        kbytes += ub;
        const double arrive = be.Arrival(start, kbytes);
        done = std::max(done, arrive);
        if (next == kNever || ub > o.cache_bytes) continue;  // never used again: do not admit
        // Evict the furthest-next-use units if those used after this one
        // make room for it; else evict nothing and do not admit it (units
        // of unequal sizes: evicting some, then not admitting, only lost
        // them; a review's finding, 2026-11-30).
        auto first_victim = by_next.end();
        uint64_t freed = 0;
        while (used - freed + ub > o.cache_bytes && first_victim != by_next.begin()) {
          auto far = std::prev(first_victim);
          if (far->first <= next) break;
          freed += ubytes(far->second);
          first_victim = far;
        }
        if (used - freed + ub > o.cache_bytes) continue;
        for (auto v = first_victim; v != by_next.end(); ++v) cached.erase(v->second);
        by_next.erase(first_victim, by_next.end());
        used -= freed;
        cached[uid] = {next, arrive};
        by_next.insert({next, uid});
        used += ub;
      }
      a = b + 1;
    }
    c.hit_bytes += hit;
    if (len > 0 && hit == len) ++c.hit_requests;
    c.Add(f.path, len, hit, done - issue);
    clk.Complete(ri, issue, done);
  }
  return Output(o, c, be, 0, clk, unit);
}

}  // namespace

std::vector<std::string> SimPolicyNames() {
  auto n = engine::EnginePolicyNames();
  n.push_back("belady");
  return n;
}

Result<nlohmann::json> RunSim(const SimOptions& o) {
  auto names = SimPolicyNames();
  if (std::find(names.begin(), names.end(), o.policy) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    return Err(Status::InvalidArgument("--policy: unknown policy '" + o.policy + "' (known: " + known + ")"));
  }
  if (o.cache_bytes == 0) return Err(Status::InvalidArgument("--cache-size: must be > 0"));
  if (o.connections == 0) return Err(Status::InvalidArgument("--connections: must be > 0"));
  auto cfg = LoadConfig(o.config_path);
  if (!cfg) return Err(cfg.error());
  if (o.unit_bytes_set) {
    cfg->cache.unit_size_bytes = o.unit_bytes;
    // The simulator's GETs have their own cap (SimOptions): only the unit's
    // bounds matter here.
    cfg->backend.max_request_bytes = std::max(cfg->backend.max_request_bytes, o.unit_bytes);
    // The same bounds as a mount's (a 1-byte unit made an id per byte).
    if (auto s = Validate(*cfg); !s.ok()) return Err(Status::InvalidArgument("--unit-size: " + s.message()));
  }
  // A config file a mount uses may set keys sim takes from its own flags:
  // said, not silently ignored (a user replaying with the mount's file).
  if (o.warn && !o.config_path.empty())
    if (auto defaults = LoadConfig(""); defaults) {
      if (cfg->cache.eviction != defaults->cache.eviction && cfg->cache.eviction != o.policy)
        o.warn(fmt::format("{}: cache.eviction '{}' is not used: sim runs --policy {}", o.config_path,
                           cfg->cache.eviction, o.policy));
      if (cfg->cache.max_bytes != defaults->cache.max_bytes && cfg->cache.max_bytes != o.cache_bytes)
        o.warn(fmt::format("{}: cache.max_bytes is not used: sim's cache is --cache-size", o.config_path));
    }
  auto scfg = StreamConfigFrom(*cfg);
  if (!scfg) return Err(scfg.error());
  const uint64_t unit = cfg->cache.unit_size_bytes;
  if (unit == 0) return Err(Status::InvalidArgument("--unit-size: must be > 0"));
  // As a mount requires: a cache that holds no whole unit caches nothing.
  if (o.cache_bytes < unit)
    return Err(Status::InvalidArgument(fmt::format("--cache-size: {} bytes is less than one unit ({} bytes)",
                                                   o.cache_bytes, unit)));
  engine::PolicyFile pf;
  if (o.policy_file) {
    pf = *o.policy_file;
  } else {
    auto loaded = engine::LoadPolicyFile(cfg->policy.file, engine::PolicyFileUse::kOnce);
    // Named as a mount and `config --check` name it: the config file first.
    if (!loaded)
      return Err(Status(loaded.error().code(), (o.config_path.empty() ? "" : o.config_path + ": ") +
                                                   "config key 'policy.file': " + loaded.error().message()));
    pf = *loaded;
    if (o.warn && o.policy == "igt")
      for (const auto& w : engine::PolicyWarnings(pf, cfg->policy.file, o.cache_bytes)) o.warn(w);
  }
  auto tr = LoadTrace(o.trace_path, o.listing_path);
  if (!tr) return Err(tr.error());
  // The prefetch budget and the largest GET a mount with this config would
  // have (the GET cap was 8 MiB whatever the config said).
  SimOptions mo = o;
  mo.prefetch_budget_bytes = cfg->cache.prefetch_budget_bytes;
  if (!o.config_path.empty()) mo.max_request_bytes = cfg->backend.max_request_bytes;
  if (o.policy == "belady") return RunBelady(mo, *tr, unit);
  return RunEngine(mo, *tr, unit, cfg->cache.sub_unit_bytes, *scfg, pf);
}

}  // namespace igt::sim
