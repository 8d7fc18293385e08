#include "src/fs/namespace.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <system_error>
#include <nlohmann/json.hpp>

namespace igt {

int64_t NowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {

// Persisted listing format version: bump when the CBOR layout changes so an
// old record is ignored (relisted) rather than misread.
constexpr int kListingFormat = 1;

std::string MetaKey(const std::string& dir_key) { return "l/" + dir_key; }

std::string EncodeListing(const DirListing& l) {
  nlohmann::json j;
  j["v"] = kListingFormat;
  j["t"] = l.fetched_ms;
  if (l.list_ms > 0) j["d"] = l.list_ms;  // optional: records before it read as 0
  auto& e = j["e"] = nlohmann::json::array();
  for (const auto& d : l.entries) {
    e.push_back({d.name, d.is_dir, d.size, d.mtime_ns, d.etag});
    if (!d.data_key.empty()) e.back().push_back(d.data_key);  // optional: records before it have 5
  }
  auto bytes = nlohmann::json::to_cbor(j);
  return std::string(bytes.begin(), bytes.end());
}

std::shared_ptr<DirListing> DecodeListing(const std::string& s) {
  try {
    auto j = nlohmann::json::from_cbor(s);
    if (j.value("v", 0) != kListingFormat) return nullptr;
    auto l = std::make_shared<DirListing>();
    l->fetched_ms = j.at("t").get<int64_t>();
    l->list_ms = j.value("d", int64_t{0});
    for (const auto& e : j.at("e")) {
      DirEntry d{e.at(0).get<std::string>(), e.at(1).get<bool>(), e.at(2).get<uint64_t>(),
                 e.at(3).get<int64_t>(), e.at(4).get<std::string>(),
                 e.size() > 5 ? e.at(5).get<std::string>() : std::string()};
      if (!Namespace::SafeName(d.name)) return nullptr;
      l->entries.push_back(std::move(d));
    }
    return l;
  } catch (const nlohmann::json::exception&) {
    return nullptr;  // a bad record is just a cache miss
  }
}

// How often a directory whose refresh failed is retried while its stale
// listing is served: bounds the extra latency an outage adds to lookups.
constexpr int64_t kStaleRetryMs = 1000;
// A lookup in a directory a read found out of date waits out at most this
// many refreshes that began before the latest note (Listing), then takes
// what it gets (notes that keep coming cannot hold it for good).
constexpr int kChangedRefetches = 2;
// Directories whose unsaved listing is remembered (Namespace::unpersisted_).
constexpr size_t kMaxUnpersisted = 65536;

std::string ChildKey(const std::string& dir_key, std::string_view name) {
  return dir_key.empty() ? std::string(name) : dir_key + "/" + std::string(name);
}

// A key's directory and last component ("a/b.jpg" -> "a", "b.jpg";
// "b.jpg" -> "", "b.jpg"; "" for the root -> "", "").
std::pair<std::string_view, std::string_view> SplitKey(std::string_view key) {
  const size_t slash = key.rfind('/');
  if (slash == std::string_view::npos) return {std::string_view(), key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}
std::string_view NameOf(std::string_view key) { return SplitKey(key).second; }

// The version an inode number is derived from: the ETag, or for a server
// that lists none, the size and modification time (as SameVersion); none for
// a directory (its mtime is when the mount started).
std::string VersionOf(bool is_dir, const std::string& etag, uint64_t size, int64_t mtime_ns) {
  if (is_dir) return {};
  return etag.empty() ? fmt::format("{}:{}", size, mtime_ns) : etag;
}

}  // namespace

const DirEntry* DirListing::Find(std::string_view name) const {
  auto it = std::lower_bound(entries.begin(), entries.end(), name,
                             [](const DirEntry& e, std::string_view n) { return e.name < n; });
  return (it != entries.end() && it->name == name) ? &*it : nullptr;
}

struct Namespace::Fetch {
  std::mutex mu;
  std::condition_variable cv;
  int64_t started_ms = 0;  // set before it is shared
  bool background = false;  // a walk's (set before it is shared)
  // The leader read the persisted listing already (Listing): `persisted`,
  // if fresh, or nothing. Set before it is shared; Complete reads it.
  bool looked = false;
  std::shared_ptr<DirListing> persisted;
  // changed_seq_ when it began (set before it is shared): a note of a
  // change made later may postdate its LIST (Listing).
  uint64_t note_seq = 0;
  bool done = false;  // guarded by mu
  Result<std::shared_ptr<const DirListing>> result = Err(Status::Internal("pending"));
};

Namespace::Namespace(Backend* backend, BlockStore* store, Metrics* metrics, Options opts)
    : backend_(backend), store_(store), metrics_(metrics), opts_(opts) {
  Inode root{kRootIno, kRootIno, InodeAttr{kRootIno, true, "", 0, 0, "", {}}, 0, 1};
  dir_mtime_ns_ = Now() * 1000000;
  root.attr.mtime_ns = dir_mtime_ns_;
  OwnKey(&inodes_.emplace(kRootIno, root).first->second);
}

Namespace::~Namespace() {
  BeginShutdown();
  std::deque<std::pair<std::string, std::shared_ptr<Fetch>>> unstarted;
  {
    std::lock_guard lk(walk_mu_);
    walk_stop_ = true;
    walk_queue_.clear();
    unstarted.swap(refresh_queue_);
  }
  walk_cv_.notify_all();
  // Refreshes never started: their waiters are woken (before the join, in
  // case one is a background thread).
  for (auto& [key, fetch] : unstarted) {
    std::lock_guard lk(fetch->mu);
    fetch->result = Err(Status::Unavailable("unmounting"));
    fetch->done = true;
    fetch->cv.notify_all();
  }
  for (auto& t : walk_threads_) t.join();
}

void Namespace::NoteWalk(const std::string& dir_key) {
  // With ttl 0 every listing is stale at once: a prefetched one would never be used.
  if (opts_.prefetch_dirs == 0 || opts_.ttl_ms == 0 || dir_key.empty()) return;
  const auto [parent_view, name_view] = SplitKey(dir_key);
  const std::string parent(parent_view), name(name_view);
  {
    // A walk: a second child of the same parent read in a row.
    std::lock_guard lk(walk_mu_);
    walk_ahead_.erase(dir_key);  // read: no longer ahead of the walk
    if (walk_last_.size() >= 4096) walk_last_.clear();
    auto [it, added] = walk_last_.try_emplace(parent, name);
    const bool walking = !added && it->second != name;
    it->second = name;
    if (!walking) return;
  }
  std::shared_ptr<const DirListing> siblings, own;
  {
    std::lock_guard lk(listings_mu_);
    if (auto it = listings_.find(parent); it != listings_.end()) siblings = it->second;
    if (auto it = listings_.find(dir_key); it != listings_.end()) own = it->second;
    if (!siblings) return;
    // The bucket cannot be reached: the walk is served stale listings, and
    // fetching more would spend a retry budget on a thread each.
    if (last_unreachable_ms_ > 0 && Now() - last_unreachable_ms_ < kSlowBucketMs) return;
  }
  // The walker goes into this directory's subdirectories first (depth first:
  // ls -R, os.walk, find), then on to the next siblings in listing order.
  if (own) QueueBackground(UnlistedSubdirs(dir_key, *own, 0, kWalkAhead), /*descend=*/true, /*front=*/true);
  const auto next = std::upper_bound(siblings->entries.begin(), siblings->entries.end(), name,
                                     [](const std::string& n, const DirEntry& d) { return n < d.name; });
  QueueBackground(UnlistedSubdirs(parent, *siblings, static_cast<size_t>(next - siblings->entries.begin()),
                                  opts_.prefetch_dirs),
                  /*descend=*/true);
}

std::vector<std::string> Namespace::UnlistedSubdirs(const std::string& dir_key, const DirListing& l, size_t from,
                                                    size_t limit) {
  std::vector<std::string> out;
  std::lock_guard lk(listings_mu_);
  // Files between the directories skipped: a bounded scan.
  for (size_t i = from; i < l.entries.size() && i - from < 4096 && out.size() < limit; ++i) {
    const DirEntry& e = l.entries[i];
    if (!e.is_dir) continue;
    std::string key = dir_key.empty() ? e.name : dir_key + "/" + e.name;
    if (auto it = listings_.find(key); it != listings_.end() && Fresh(*it->second)) continue;
    if (fetches_.contains(key)) continue;
    out.push_back(std::move(key));
  }
  return out;
}

bool Namespace::StartWalkThreads() {
  try {
    while (walk_threads_.size() < std::max<uint64_t>(1, opts_.prefetch_threads))
      walk_threads_.emplace_back([this] { WalkWorker(); });
  } catch (const std::system_error& e) {  // run with what started
    spdlog::debug("namespace: cannot start a background thread: {}", e.what());
  }
  return !walk_threads_.empty();
}

void Namespace::QueueBackground(std::vector<std::string> want, bool descend, bool front) {
  if (want.empty()) return;
  {
    std::lock_guard lk(walk_mu_);
    if (walk_stop_) return;
    // A walk's descent stays within kWalkAhead listings ahead of the walkers.
    if (descend) {
      const int64_t now = Now();
      std::erase_if(walk_ahead_, [&](const auto& e) { return now - e.second >= kWalkAheadIdleMs; });
    }
    // At the front in their order: the first is listed first.
    std::vector<WalkItem> added;
    for (auto& k : want) {
      if (descend && walk_ahead_.size() >= kWalkAhead) break;
      if (!walk_queued_.insert(k).second) continue;
      if (descend) walk_ahead_.emplace(k, Now());
      added.push_back({std::move(k), descend});
    }
    if (front) walk_queue_.insert(walk_queue_.begin(), std::make_move_iterator(added.begin()),
                                  std::make_move_iterator(added.end()));
    else walk_queue_.insert(walk_queue_.end(), std::make_move_iterator(added.begin()),
                            std::make_move_iterator(added.end()));
    StartWalkThreads();  // a hint only if none starts
  }
  walk_cv_.notify_all();
}

bool Namespace::QueueRefresh(const std::string& dir_key, std::shared_ptr<Fetch> fetch, bool bucket_slow) {
  {
    std::lock_guard lk(walk_mu_);
    if (walk_stop_ || !StartWalkThreads()) return false;
    // To an idle thread; when all are busy (walks, other refreshes), the
    // caller refreshes it itself, which a bucket that answers makes quick
    // (queued behind many, its wait could be the whole stale wait). Not when
    // the bucket is slow: then a refresh may take the whole retry budget,
    // and it waits in the queue while the caller gets the stale listing.
    if (!bucket_slow && walk_busy_ + refresh_queue_.size() >= walk_threads_.size()) return false;
    refresh_queue_.emplace_back(dir_key, std::move(fetch));
  }
  walk_cv_.notify_one();
  return true;
}

void Namespace::WalkWorker() {
  std::unique_lock lk(walk_mu_);
  while (true) {
    walk_cv_.wait(lk, [&] { return walk_stop_ || !walk_queue_.empty() || !refresh_queue_.empty(); });
    if (walk_stop_) return;
    ++walk_busy_;
    if (!refresh_queue_.empty()) {
      auto [key, fetch] = std::move(refresh_queue_.front());
      refresh_queue_.pop_front();
      lk.unlock();
      try {
        Complete(key, fetch);  // (an exception ends the fetch, failed)
      } catch (const std::exception& e) {  // out of memory: not out of the thread (std::terminate)
        spdlog::debug("refresh of '{}/': {}", key, e.what());
      }
      lk.lock();
      --walk_busy_;
      continue;
    }
    WalkItem item = std::move(walk_queue_.front());
    walk_queue_.pop_front();
    const std::string& key = item.key;
    // Queued again from here on: a relist that finds a newer note of a
    // change (Complete) queues its directory again while this one is under
    // way, and the entry left here dropped it.
    walk_queued_.erase(key);
    lk.unlock();
    try {
      auto r = Listing(key, /*background=*/true);  // single-flight with the walker's own ReadDir
      if (!r) spdlog::debug("walk prefetch of '{}/': {}", key, r.error().ToString());
      // Depth first, as the walker: this directory's subdirectories come next
      // (not below a stale listing: the bucket did not answer).
      if (r && item.descend && Fresh(**r))
        QueueBackground(UnlistedSubdirs(key, **r, 0, kWalkAhead), /*descend=*/true, /*front=*/true);
    } catch (const std::exception& e) {  // out of memory: not out of the thread (std::terminate)
      spdlog::debug("walk prefetch of '{}/': {}", key, e.what());
    }
    lk.lock();
    --walk_busy_;
  }
}

bool Namespace::SafeName(std::string_view n) {
  return !n.empty() && n != "." && n != ".." && n.size() <= 255 &&
         n.find('/') == std::string_view::npos && n.find('\0') == std::string_view::npos;
}

int64_t Namespace::Now() const { return opts_.clock_ms ? opts_.clock_ms() : NowMs(); }

bool Namespace::Fresh(int64_t fetched_ms) const {
  // A time in the future (the wall clock stepped back) is stale: else it
  // would stay fresh for the size of the step plus the TTL.
  const int64_t age = Now() - fetched_ms;
  return age >= 0 && age < static_cast<int64_t>(opts_.ttl_ms);
}

bool Namespace::Fresh(const DirListing& l) const {
  const int64_t age = Now() - l.fetched_ms;
  return age >= 0 && age < std::max(static_cast<int64_t>(opts_.ttl_ms), opts_.ttl_ms > 0 ? 2 * l.list_ms : 0);
}

size_t Namespace::listed_entries() const {
  std::lock_guard lk(listings_mu_);
  return listed_entries_;
}

size_t Namespace::inode_count() const {
  std::lock_guard lk(mu_);
  return inodes_.size();
}

void Namespace::NoteHidden(const std::string& dir_key, uint64_t n) {
  std::lock_guard lk(hidden_mu_);
  auto it = hidden_.find(dir_key);
  if (it != hidden_.end()) {
    hidden_total_ -= it->second;
    if (n == 0) hidden_.erase(it);
    else it->second = n;
  } else if (n > 0 && hidden_.size() < kMaxHiddenDirs) {
    hidden_.emplace(dir_key, n);
  } else {
    n = 0;  // past kMaxHiddenDirs directories: not counted
  }
  hidden_total_ += n;
}

uint64_t Namespace::hidden_names() const {
  std::lock_guard lk(hidden_mu_);
  return hidden_total_;
}

Result<std::shared_ptr<const DirListing>> Namespace::FetchListing(const std::string& dir_key) {
  auto listing = std::make_shared<DirListing>();
  listing->fetched_ms = Now();
  listing->seq = listing_seq_.fetch_add(1) + 1;
  std::map<std::string, DirEntry> merged;  // sorted, dirs shadow same-named files
  ListRequest req;
  req.prefix = dir_key.empty() ? "" : dir_key + "/";
  // Keys hidden, by reason: names unsafe for a file system, and objects
  // whose name is also a directory's (`a` beside `a/b`: the directory wins,
  // and the object was hidden without a word: a tester's finding).
  struct Hidden {
    size_t n = 0;
    std::string examples;  // the first few, for the warning
    void Add(std::string_view key) {
      if (++n > 3) return;
      if (!examples.empty()) examples += ", ";
      // Raw: the mount's log escapes control bytes and backslashes itself
      // (escaped here too, a NUL was logged as "\x5cx00").
      examples += fmt::format("'{}'", key);
    }
  } unsafe, shadowed, outside;
  do {
    if (stopping_.load()) return Err(Status::Unavailable("unmounting"));
    if (metrics_) Add(metrics_->backend_list_requests);
    auto page = backend_->List(req);
    if (!page) return Err(page.error());
    for (const auto& o : page->objects) {
      std::string_view name(o.key);
      // Keys not under the prefix asked for (a server or proxy that does
      // not follow the S3 API): cut at the prefix's length, "outside" was
      // listed as "tside" (a tester's fake server).
      if (!name.starts_with(req.prefix)) {
        outside.Add(o.key);
        continue;
      }
      name.remove_prefix(req.prefix.size());
      if (name.empty()) {  // the directory's own marker ("dir/")
        if (o.size > 0) shadowed.Add(o.key);  // its bytes cannot be read
        continue;
      }
      if (!SafeName(name)) {  // "a/../b", over-long names
        unsafe.Add(o.key);
        continue;
      }
      auto [at, added] = merged.try_emplace(std::string(name), DirEntry{std::string(name), false, o.size, o.mtime_ns, o.etag, o.data_key});
      if (!added && at->second.is_dir) shadowed.Add(o.key);
    }
    for (const auto& p : page->prefixes) {
      std::string_view name(p);
      if (!name.starts_with(req.prefix)) {
        outside.Add(p);
        continue;
      }
      name.remove_prefix(req.prefix.size());
      if (!name.empty() && name.back() == '/') name.remove_suffix(1);
      if (!SafeName(name)) {
        unsafe.Add(p);
        continue;
      }
      if (auto at = merged.find(std::string(name)); at != merged.end() && !at->second.is_dir) shadowed.Add(req.prefix + at->first);
      merged.insert_or_assign(std::string(name), DirEntry{std::string(name), true, 0, 0, "", {}});
    }
    req.continuation_token = page->next_token;
  } while (!req.continuation_token.empty());
  listing->list_ms = std::max<int64_t>(0, Now() - listing->fetched_ms);
  if (opts_.ttl_ms > 0 && listing->list_ms > static_cast<int64_t>(opts_.ttl_ms)) {
    bool first = false;
    {
      std::lock_guard lk(hidden_mu_);
      if (slow_warned_.size() >= kMaxHiddenDirs) slow_warned_.clear();
      first = slow_warned_.insert(dir_key).second;
    }
    spdlog::log(first ? spdlog::level::warn : spdlog::level::debug,
                "listing of {} took {:.1f} s, longer than metadata.ttl_ms ({:.1f} s): it is listed again at most "
                "every {:.1f} s",
                dir_key.empty() ? std::string("the top directory") : "'" + dir_key + "/'", listing->list_ms / 1e3,
                opts_.ttl_ms / 1e3, 2 * listing->list_ms / 1e3);
  }
  NoteHidden(dir_key, unsafe.n + shadowed.n + outside.n);
  if (unsafe.n + shadowed.n + outside.n) {
    // Once per directory and mount, then at debug level: a directory
    // relisted every TTL repeated it.
    bool first = false;
    {
      std::lock_guard lk(hidden_mu_);
      if (hidden_warned_.size() >= 4096) hidden_warned_.clear();
      first = hidden_warned_.insert(dir_key).second;
    }
    const std::string where = dir_key.empty() ? std::string("the top directory") : "'" + dir_key + "/'";
    const auto level = first ? spdlog::level::warn : spdlog::level::debug;
    if (unsafe.n)
      spdlog::log(level, "listing of {}: {} key(s) with names unsafe for a file system are hidden: {}{}", where,
                  unsafe.n, unsafe.examples, unsafe.n > 3 ? ", ..." : "");
    if (shadowed.n)
      spdlog::log(level,
                  "listing of {}: {} object(s) hidden because a directory has the same name (a key K beside keys "
                  "K/..., or a directory marker K/ with content: the directory is shown): {}{}",
                  where, shadowed.n, shadowed.examples, shadowed.n > 3 ? ", ..." : "");
    if (outside.n)
      spdlog::log(level,
                  "listing of {}: the source returned {} key(s) outside the prefix '{}' it was asked for, ignored "
                  "(a server or proxy that does not follow the S3 API?): {}{}",
                  where, outside.n, req.prefix, outside.examples, outside.n > 3 ? ", ..." : "");
  }
  listing->entries.reserve(merged.size());
  for (auto& [_, e] : merged) listing->entries.push_back(std::move(e));
  merged.clear();  // before the encoding below: a huge directory held both at once
  if (store_) {
    // Not persisted (a full or read-only cache volume): the copy in the
    // index is older than this one and is not loaded again in this mount,
    // and deleted if the index lets it (a later mount). Loaded (a listing
    // dropped from memory for room, an outage) it was given a new place in
    // the fetch order and moved names back to older versions, deleted
    // objects with them.
    const Status saved = store_->PutMeta(MetaKey(dir_key), EncodeListing(*listing));
    {
      std::lock_guard lk(listings_mu_);
      if (saved.ok()) {
        unpersisted_.erase(dir_key);
      } else {
        if (unpersisted_.size() >= kMaxUnpersisted) unpersisted_.clear();  // bounded (a full volume for long)
        unpersisted_[dir_key] = listing->fetched_ms;
      }
    }
    if (!saved.ok()) {
      spdlog::debug("listing of '{}' not persisted: {}", dir_key, saved.ToString());
      store_->DeleteMeta(MetaKey(dir_key));
    }
  }
  return std::shared_ptr<const DirListing>(std::move(listing));
}

std::shared_ptr<DirListing> Namespace::LoadPersisted(const std::string& dir_key) {
  auto raw = store_->GetMeta(MetaKey(dir_key));
  std::shared_ptr<DirListing> l = raw ? DecodeListing(*raw) : nullptr;
  std::lock_guard lk(listings_mu_);
  if (auto u = unpersisted_.find(dir_key); l && u != unpersisted_.end() && l->fetched_ms < u->second) return nullptr;
  return l;
}

Result<std::shared_ptr<const DirListing>> Namespace::Listing(const std::string& dir_key, bool background) {
  std::shared_ptr<Fetch> fetch;
  std::shared_ptr<const DirListing> stale_listing;  // what the leader may serve meanwhile
  bool changed = false, bucket_slow = false;  // past the loop: this caller leads the fetch
  // Not in memory (a mount started on the persisted listings of an earlier
  // one, or a listing dropped for room): the persisted listing is read (the
  // lock let go meanwhile, then the look begins again). A stale one is taken
  // in and served while the refresh runs, as one kept in memory would be
  // (also to the lookups and walks that come meanwhile: it is in memory
  // before the refresh is published); a fresh one goes to Complete with the
  // fetch, which serves it without asking the bucket or the index again.
  std::shared_ptr<DirListing> persisted;
  bool looked = false;  // the persisted listing was read (persisted: it, if any)
  // One caller reads it (loading_), the others wait for it, then look again:
  // they find it in memory (stale) or its fetch under way (fresh, or none).
  // Each decoded it before: 16 loader workers after a remount, 16 decodes of
  // a large directory's listing at once (its memory 16 times over).
  bool loading = false;
  // A read found the listing out of date after the refresh under way began:
  // that refresh's LIST may predate the change, so its result is waited
  // for and not taken: the look begins again (its leader left the note,
  // the next fetch answers it). Before, the reopening lookup got the old
  // version's inode again, and the read failed again.
  int refetches = 0;
  while (true) {
    std::unique_lock lk(listings_mu_);
    if (loading) {  // read: the waiters look again once this look is done (the lock let go)
      loading_.erase(dir_key);
      loading = false;
      loaded_cv_.notify_all();
    }
    std::shared_ptr<const DirListing> stale;
    // A read found this listing out of date: it is not served to lookups
    // until listed again (except while the bucket is down, below).
    changed = changed_.contains(dir_key);
    auto it = listings_.find(dir_key);
    // (Not while a fetch serves the saved listing, fresh: it is joined.)
    if (auto f = fetches_.find(dir_key); it == listings_.end() && !looked && !background && store_ &&
                                         (f == fetches_.end() || !f->second->persisted)) {
      if (loading_.contains(dir_key)) {
        loaded_cv_.wait(lk, [&] { return !loading_.contains(dir_key); });
        continue;
      }
      loading_.insert(dir_key);
      loading = true;
      lk.unlock();
      looked = true;
      try {
        persisted = LoadPersisted(dir_key);
      } catch (...) {  // (out of memory) the waiters must not wait for good
        lk.lock();
        loading_.erase(dir_key);
        loaded_cv_.notify_all();
        throw;
      }
      continue;
    }
    if (it == listings_.end() && persisted && !changed && !Fresh(*persisted)) {
      persisted->seq = listing_seq_.fetch_add(1) + 1;  // as Complete's: a place in the fetch order
      KeepListingLocked(dir_key, persisted);
      it = listings_.find(dir_key);
    }
    if (it != listings_.end()) {
      it->second->used.store(++use_clock_, std::memory_order_relaxed);
      if (!changed && Fresh(*it->second)) return it->second;
      stale = it->second;
      // The bucket failed the last refresh: keep serving the stale listing
      // at once. The retry (at most once per kStaleRetryMs) runs in the
      // background: a bucket that accepts connections and never answers
      // would otherwise hold every lookup in the directory for the whole
      // retry budget.
      // A walk prefetch keeps to that pace too; only the queued retry asks.
      if (auto r = retry_after_ms_.find(dir_key);
          r != retry_after_ms_.end() && !(background && refresh_due_.erase(dir_key))) {
        const bool retry = !background && Now() >= r->second && !fetches_.contains(dir_key);
        if (retry) {
          r->second = Now() + kStaleRetryMs;
          refresh_due_.insert(dir_key);
        }
        lk.unlock();
        if (retry) QueueBackground({dir_key});
        return stale;
      }
    }
    if (auto it = fetches_.find(dir_key); it != fetches_.end()) {
      // A refresh under way: the listing it replaces is served meanwhile
      // (only its leader waits, however long the bucket takes), unless a
      // read found it out of date. A background caller never waits on
      // another's refresh (it may be queued behind this very thread).
      if (stale && (!changed || background)) return stale;
      fetch = it->second;
      auto c = changed_.find(dir_key);
      const bool refetch =
          !background && c != changed_.end() && c->second > fetch->note_seq && refetches < kChangedRefetches;
      lk.unlock();
      std::unique_lock flk(fetch->mu);
      fetch->cv.wait(flk, [&] { return fetch->done; });
      if (!refetch) return fetch->result;
      ++refetches;
      continue;
    } else {
      fetch = std::make_shared<Fetch>();
      fetch->started_ms = Now();
      fetch->note_seq = changed_seq_;
      fetch->background = background;
      fetch->looked = looked;
      if (looked && persisted && Fresh(*persisted)) fetch->persisted = persisted;
      fetches_.emplace(dir_key, fetch);
      stale_listing = stale;
      // The bucket is slow: a listing failed for it lately, or a lookup's
      // listing (not a walk's: a big directory's pages take their time) has
      // been under way for longer than a lookup waits.
      const int64_t now = fetch->started_ms;
      bucket_slow = last_unreachable_ms_ > 0 && now - last_unreachable_ms_ < kSlowBucketMs;
      for (const auto& [k, f] : fetches_)
        if (!bucket_slow && !f->background && f->started_ms + static_cast<int64_t>(opts_.stale_wait_ms) < now)
          bucket_slow = true;
    }
    break;
  }
  // The refresh of a stale listing: a lookup waits for it only so long, then
  // gets the stale listing while the refresh goes on in the background (a
  // bucket that stopped answering would otherwise hold this lookup for the
  // whole retry budget, and the unmount with it).
  // Not with ttl_ms 0 (no stale listing wanted), nor for a listing a read
  // found out of date.
  // This thread owns the fetch until a refresh is queued: an exception
  // before then ends it, failed (AbandonFetch).
  try {
    if (!(stale_listing && !background && !changed && opts_.ttl_ms > 0 && QueueRefresh(dir_key, fetch, bucket_slow)))
      return CompleteFetch(dir_key, fetch);
  } catch (...) {
    AbandonFetch(dir_key, fetch);
    throw;
  }
  std::unique_lock lk(fetch->mu);
  if (fetch->cv.wait_for(lk, std::chrono::milliseconds(opts_.stale_wait_ms), [&] { return fetch->done; }))
    return fetch->result;
  return stale_listing;
}

Result<std::shared_ptr<const DirListing>> Namespace::Complete(const std::string& dir_key,
                                                              const std::shared_ptr<Fetch>& fetch) {
  try {
    return CompleteFetch(dir_key, fetch);
  } catch (...) {
    AbandonFetch(dir_key, fetch);
    throw;
  }
}

// (Out of memory.) The fetch ends, failed: its waiters, and every later
// lookup in the directory, waited on it for good (a tester's run under
// `ulimit -v`: a directory's lookups hung, readers in D state).
void Namespace::AbandonFetch(const std::string& dir_key, const std::shared_ptr<Fetch>& fetch) noexcept {
  {
    std::lock_guard lk(listings_mu_);
    if (auto it = fetches_.find(dir_key); it != fetches_.end() && it->second == fetch) fetches_.erase(it);
  }
  {
    std::lock_guard lk(fetch->mu);
    if (!fetch->done) {
      try {
        fetch->result = Err(Status::IoError("listing " + dir_key + " failed: out of memory?"));
      } catch (...) {  // keeps its "pending" error
      }
      fetch->done = true;
    }
  }
  fetch->cv.notify_all();
}

Result<std::shared_ptr<const DirListing>> Namespace::CompleteFetch(const std::string& dir_key,
                                                                   const std::shared_ptr<Fetch>& fetch) {
  Result<std::shared_ptr<const DirListing>> result = Err(Status::Internal("unset"));
  // A persisted listing from an earlier mount, if still fresh. Not once this
  // mount has its own (then the persisted one is the same or older, e.g. a
  // listing NoteChanged made stale).
  bool in_memory = false;
  uint64_t note = 0;  // the latest NoteChanged before this fetch
  {
    std::lock_guard lk(listings_mu_);
    in_memory = listings_.contains(dir_key);
    if (auto c = changed_.find(dir_key); c != changed_.end()) note = c->second;
  }
  // (Not for a directory a read found out of date: its persisted listing is
  // the one that was.) A listing loaded so is the latest fetched (each fetch
  // is persisted), maybe dropped from memory since: it gets a place in the
  // fetch order, else it would count as older than the inodes made from it.
  // A persisted listing too old to serve is what a fetch replaces: its
  // removals are told (Relisted) as an in-memory one's are, after a restart
  // or once the listing was dropped from memory for room.
  std::shared_ptr<const DirListing> persisted_old;
  if (store_ && !in_memory && note == 0) {
    std::shared_ptr<DirListing> l = fetch->persisted;
    if (!fetch->looked) l = LoadPersisted(dir_key);
    if (l && Fresh(*l)) {
      l->seq = listing_seq_.fetch_add(1) + 1;
      result = std::shared_ptr<const DirListing>(l);
    } else {
      persisted_old = l;
    }
  }
  bool fetched = false, stale = false;
  if (!result) {
    result = FetchListing(dir_key);
    fetched = static_cast<bool>(result);
  }
  // A listing answered NotFound: the bucket itself is gone (S3's
  // NoSuchBucket; a missing prefix lists empty, in every backend). Deleted,
  // recreated, or a store restarted empty: served as an outage is, not as
  // an empty bucket. Before, once the listings' TTL ran out every file,
  // cached ones too, was ENOENT, the mount's root included, with nothing
  // logged (a black-box tester's finding).
  const bool source_gone = !result && result.error().code() == Code::kNotFound;
  if (!result && (BackendUnreachable(result.error().code()) || source_gone)) {
    // Bucket unreachable: a stale listing beats an error (cached data stays
    // readable during an outage).
    std::shared_ptr<const DirListing> old;
    {
      std::lock_guard lk(listings_mu_);
      if (auto it = listings_.find(dir_key); it != listings_.end()) old = it->second;
    }
    if (!old && store_) old = LoadPersisted(dir_key);
    if (old) {
      if (!stopping_.load() && !serving_stale_.exchange(true))
        spdlog::warn("source {} ({}); serving cached listings and data until it is back",
                     source_gone ? "gone" : "unreachable", result.error().ToString());
      result = old;
      stale = true;
    }
  }
  // Gone with no listing kept: an outage too (EIO), not "no such
  // directory": a directory the parent's listing names could not be opened
  // with ENOENT, which a dataset scanner takes for a missing directory (a
  // tester's finding; the proxy down gave EIO).
  if (!result && source_gone)
    result = Err(Status::Unavailable(result.error().message() + " (the source is gone: the bucket or source "
                                                                "directory no longer exists)"));
  std::shared_ptr<const DirListing> replaced;  // the listing a fetched one replaces (Relisted)
  bool relist_again = false;
  {
    std::lock_guard lk(listings_mu_);
    if (fetched) {
      if (auto it = listings_.find(dir_key); it != listings_.end()) replaced = it->second;
      else replaced = persisted_old;
    }
    if (result) KeepListingLocked(dir_key, *result);
    // Served stale: retried later. Otherwise (fetched, or an error other
    // than an unreachable bucket, e.g. access denied) the next lookup asks
    // the bucket itself and sees the outcome.
    // The source answered: every directory served stale in the outage is
    // refreshed as any stale listing is, on its next lookup (until then
    // their listings stayed past max_listed_entries, never trimmed, for
    // directories not visited again).
    if (stale) retry_after_ms_[dir_key] = Now() + kStaleRetryMs;
    else if (fetched) {
      // Holds past their time: directories not visited since (a hold still
      // running keeps its pacing: the source may answer for some
      // directories and not others).
      const int64_t now = Now();
      std::erase_if(retry_after_ms_, [&](const auto& e) {
        if (e.second > now) return false;
        refresh_due_.erase(e.first);  // a queued retry then refreshes as a walk does
        return true;
      });
      retry_after_ms_.erase(dir_key);
    }
    else retry_after_ms_.erase(dir_key);
    if (stale || (!result && (BackendUnreachable(result.error().code()) || source_gone)))
      last_unreachable_ms_ = Now();
    // Fetched after the latest note of a change: up to date again. (A note
    // made during the fetch stays: the LIST may predate that change.)
    if (auto c = changed_.find(dir_key); fetched && c != changed_.end()) {
      if (c->second == note) changed_.erase(c);
      else relist_again = true;
    }
    fetches_.erase(dir_key);
  }
  // A note made during the fetch: listed again at once, as NoteChanged
  // does (it queued nothing then: the relist under way was to answer it).
  if (relist_again) QueueBackground({dir_key}, /*descend=*/false, /*front=*/true);
  if (fetched && serving_stale_.exchange(false)) spdlog::info("source reachable again");
  if (result && listing_hook_) listing_hook_(dir_key, (*result)->entries.size());
  {
    std::lock_guard lk(fetch->mu);
    fetch->result = result;
    fetch->done = true;
  }
  fetch->cv.notify_all();  // lookups waiting on this listing go on before the hook's work
  if (replaced && replaced != *result)
    if (auto diff = DiffListings(*replaced, **result); !diff.empty()) Relisted(dir_key, diff);
  return result;
}

namespace {
// Whether directory `dir_key` ("a/b") is one of `dirs` ("a/b/") or below one.
bool AtOrUnder(const std::string& dir_key, const std::unordered_set<std::string>& dirs) {
  const std::string k = dir_key + "/";
  for (size_t i = k.find('/'); i != std::string::npos; i = k.find('/', i + 1))
    if (dirs.contains(k.substr(0, i + 1))) return true;
  return false;
}
}  // namespace

void Namespace::Relisted(const std::string& dir_key, const ListingDiff& diff) {
  // Listings of directories gone, and of every directory below them, are
  // dropped from memory and from the index: a bucket whose directories roll
  // (a directory per checkpoint step) kept each for good.
  std::unordered_set<std::string> gone_dirs;  // "a/b/"
  for (const DirEntry& e : diff.gone)
    if (e.is_dir) gone_dirs.insert(ChildKey(dir_key, e.name) + "/");
  if (!gone_dirs.empty()) {
    {
      // Their hidden keys went with them (hidden_names).
      std::lock_guard lk(hidden_mu_);
      for (auto it = hidden_.begin(); it != hidden_.end();) {
        if (AtOrUnder(it->first, gone_dirs)) {
          hidden_total_ -= std::min(hidden_total_, it->second);
          it = hidden_.erase(it);
        } else {
          ++it;
        }
      }
    }
    {
      std::lock_guard lk(listings_mu_);
      for (auto it = listings_.begin(); it != listings_.end();) {
        if (AtOrUnder(it->first, gone_dirs)) {
          listed_entries_ -= it->second->entries.size();
          it = listings_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (store_)
      for (const std::string& d : gone_dirs) {
        store_->DeleteMeta(MetaKey(d.substr(0, d.size() - 1)));
        if (auto r = store_->DeleteMetaPrefix(MetaKey(d)); !r)
          spdlog::debug("listings below '{}' not dropped from the index: {}", d, r.error().ToString());
      }
  }
  if (!relist_hook_) return;
  // One at a time: two relistings of a directory report in their order.
  std::lock_guard lk(relist_mu_);
  try {
    relist_hook_(dir_key, diff);
  } catch (const std::exception& e) {  // out of memory: the next relisting reports again what is still gone
    spdlog::warn("relisting of '{}': its changes were not all applied: {}", dir_key, e.what());
  }
}

void Namespace::KeepListingLocked(const std::string& dir_key, std::shared_ptr<const DirListing> l) {
  l->used.store(++use_clock_, std::memory_order_relaxed);
  auto& slot = listings_[dir_key];
  if (slot) listed_entries_ -= slot->entries.size();
  listed_entries_ += l->entries.size();
  slot = std::move(l);
  if (listed_entries_ <= opts_.max_listed_entries) return;
  // Held by nobody else (an open directory handle, the engine's recent
  // listings), and none a read marked out of date (its persisted copy would
  // come back as if current) or served stale in an outage (the only copy
  // the mount may get for a while).
  // Least recently used first (a big directory read all the time stays
  // while small ones come and go), then by fetch order.
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> idle;
  for (const auto& [k, v] : listings_)
    if (k != dir_key && v.use_count() == 1 && !changed_.contains(k) && !retry_after_ms_.contains(k))
      idle.emplace_back(v->used.load(std::memory_order_relaxed), v->seq, &k);
  std::sort(idle.begin(), idle.end());
  const size_t target = opts_.max_listed_entries / 4 * 3;
  size_t dropped = 0;
  for (const auto& [used, seq, k] : idle) {
    if (listed_entries_ <= target) break;
    auto it = listings_.find(*k);
    listed_entries_ -= it->second->entries.size();
    listings_.erase(it);
    ++dropped;
  }
  spdlog::debug("namespace: dropped {} idle listings from memory ({} entries kept)", dropped, listed_entries_);
}

std::shared_ptr<const DirListing> Namespace::CachedListing(const std::string& dir_key) {
  std::lock_guard lk(listings_mu_);
  auto it = listings_.find(dir_key);
  return it == listings_.end() ? nullptr : it->second;
}

void Namespace::NoteChanged(const std::string& key, const std::string& etag) {
  const auto [dir_view, name] = SplitKey(key);
  const std::string dir(dir_view);
  bool marked = false;
  {
    std::lock_guard lk(listings_mu_);
    auto it = listings_.find(dir);
    const DirEntry* e = it == listings_.end() ? nullptr : it->second->Find(name);
    // Once per version: after the relist the listing no longer names it. A
    // listing dropped from memory (KeepListingLocked) cannot tell: its copy
    // in the index may name that version, so the directory is listed again.
    const bool listed = it == listings_.end() || (e && !e->is_dir && e->etag == etag);
    // A listing fetched since the last note of this version that still
    // names it (a store whose listings lag its GETs, or a GET failing for
    // another reason) is not fetched again for 5 s (or the TTL if shorter):
    // each failed read listed the directory again (a reviewer's key that
    // the server listed but no GET found: a LIST per read).
    auto n = noted_.find(key);
    const int64_t now = Now();
    const int64_t age = it == listings_.end() ? -1 : now - it->second->fetched_ms;
    const bool confirmed = n != noted_.end() && n->second.etag == etag && age >= 0 &&
                           it->second->fetched_ms >= n->second.ms &&
                           age < std::min<int64_t>(opts_.ttl_ms, kRelistConfirmedMs);
    if (listed && !confirmed) {
      if (!changed_.contains(dir) || n == noted_.end() || n->second.etag != etag) {
        marked = !changed_.contains(dir);
        changed_[dir] = ++changed_seq_;
        if (noted_.size() >= 4096) noted_.clear();
        noted_[key] = {etag, now, false};
      } else if (!n->second.renewed) {
        // The same failure again while the directory is marked: the mark is
        // renewed once (a relist under way may have begun before the change,
        // and clears only the mark it began after: Complete), its time kept.
        // Renewed at every failed read, a key the store lists but does not
        // serve kept its directory relisted back to back (a review).
        changed_[dir] = ++changed_seq_;
        n->second.renewed = true;
      }
    }
  }
  if (marked) {
    spdlog::info("'{}' changed in the bucket: '{}/' is listed again now", key, dir);
    // At once, in the background (the reader's next lookup waits for it):
    // the listing's other changes (names changed or deleted beside this one)
    // reach the kernel without waiting for a lookup there.
    QueueBackground({dir}, /*descend=*/false, /*front=*/true);
  }
}

std::optional<std::pair<uint64_t, std::string>> Namespace::EntryOf(uint64_t ino) const {
  std::lock_guard lk(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end() || ino == kRootIno) return std::nullopt;
  return std::make_pair(it->second.parent, std::string(NameOf(it->second.attr.key)));
}

Namespace::ListingDiff Namespace::DiffListings(const DirListing& old, const DirListing& now) {
  ListingDiff d;
  auto n = now.entries.begin();
  for (const DirEntry& e : old.entries) {
    while (n != now.entries.end() && n->name < e.name) ++n;
    if (n == now.entries.end() || n->name != e.name || n->is_dir != e.is_dir) d.gone.push_back(e);
    else if (!e.is_dir && (VersionOf(false, e.etag, e.size, e.mtime_ns) != VersionOf(false, n->etag, n->size, n->mtime_ns) ||
                           e.data_key != n->data_key))
      d.changed.push_back(*n);
  }
  auto o = old.entries.begin();
  for (const DirEntry& e : now.entries) {
    while (o != old.entries.end() && o->name < e.name) ++o;
    if (o == old.entries.end() || o->name != e.name || o->is_dir != e.is_dir) d.added.push_back(e);
  }
  return d;
}

std::vector<std::pair<uint64_t, std::string>> Namespace::LiveEntries(const std::string& dir_key,
                                                                     const std::vector<DirEntry>& entries) const {
  std::vector<std::pair<uint64_t, std::string>> live;
  std::lock_guard lk(mu_);
  const auto parent = DirInoLocked(dir_key);
  if (!parent) return live;  // the kernel has no entry below a directory it does not know
  for (const DirEntry& e : entries) {
    if (by_key_.contains(KeyRef{ChildKey(dir_key, e.name), e.is_dir})) live.emplace_back(*parent, e.name);
  }
  return live;
}

std::optional<uint64_t> Namespace::DirIno(const std::string& dir_key) const {
  std::lock_guard lk(mu_);
  return DirInoLocked(dir_key);
}

std::optional<uint64_t> Namespace::DirInoLocked(const std::string& dir_key) const {
  if (dir_key.empty()) return kRootIno;
  auto d = by_key_.find(KeyRef{dir_key, true});
  if (d == by_key_.end()) return std::nullopt;
  return (*d)->ino;
}

std::optional<DirEntry> Namespace::CachedEntry(const std::string& key) {
  const auto [dir, name] = SplitKey(key);
  auto l = CachedListing(std::string(dir));
  if (!l) return std::nullopt;
  const DirEntry* e = l->Find(name);
  if (!e || e->is_dir) return std::nullopt;
  return *e;
}

Result<InodeAttr> Namespace::Child(const std::string& dir_key, std::string_view name, uint64_t* listing_seq) {
  auto listing = Listing(dir_key);
  if (!listing) return Err(listing.error());
  *listing_seq = (*listing)->seq;
  const DirEntry* e = (*listing)->Find(name);
  if (!e) return Err(Status::NotFound(ChildKey(dir_key, name)));
  return EntryAttr(dir_key, **listing, *e);
}

InodeAttr Namespace::EntryAttr(const std::string& dir_key, const DirListing& l, const DirEntry& e) {
  InodeAttr a;
  {
    std::lock_guard lk(listings_mu_);
    a.stale = !Fresh(l) || changed_.contains(dir_key);
  }
  a.is_dir = e.is_dir;
  a.key = ChildKey(dir_key, e.name);
  a.size = e.size;
  a.mtime_ns = e.is_dir ? dir_mtime_ns_ : e.mtime_ns;
  a.etag = e.etag;
  a.data_key = e.data_key;
  a.listing_ms = l.fetched_ms;
  return a;
}

bool SameVersion(const InodeAttr& a, const InodeAttr& b) {
  if (a.data_key != b.data_key) return false;  // a link turned to another file
  if (!a.etag.empty() || !b.etag.empty()) return a.etag == b.etag;
  return a.size == b.size && a.mtime_ns == b.mtime_ns;
}

Result<std::string> Namespace::DirKeyOf(uint64_t ino) const {
  std::lock_guard lk(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return Err(Status::NotFound("stale parent inode"));
  if (!it->second.attr.is_dir) return Err(Status::InvalidArgument("not a directory"));
  return it->second.attr.key;
}

Result<InodeAttr> Namespace::Lookup(uint64_t parent, std::string_view name) {
  if (!SafeName(name)) return Err(Status::NotFound(std::string(name)));
  auto dir_key = DirKeyOf(parent);
  if (!dir_key) return Err(dir_key.error());
  uint64_t listing_seq = 0;
  auto child = Child(*dir_key, name, &listing_seq);
  if (!child) return Err(child.error());
  return AddLookup(parent, *child, listing_seq);
}

Result<InodeAttr> Namespace::LookupListed(uint64_t parent, const DirListing& l, const DirEntry& e) {
  auto dir_key = DirKeyOf(parent);
  if (!dir_key) return Err(dir_key.error());
  // A newer listing is in memory (a refresh since the handle was opened):
  // the name as it lists it. Else an entry of the handle's listing could
  // bring back an object deleted since (a relisting dropped its kernel
  // entry, the kernel forgot its inode) as a new inode every read of which
  // fails, or an older version.
  if (auto cur = CachedListing(*dir_key); cur && cur->seq > l.seq) {
    const DirEntry* now = cur->Find(e.name);
    if (!now || now->is_dir != e.is_dir) return Err(Status::NotFound(ChildKey(*dir_key, e.name)));
    return AddLookup(parent, EntryAttr(*dir_key, *cur, *now), cur->seq);
  }
  return AddLookup(parent, EntryAttr(*dir_key, l, e), l.seq);
}

InodeAttr Namespace::AddLookup(uint64_t parent, const InodeAttr& child, uint64_t listing_seq) {
  std::lock_guard lk(mu_);
  auto it = by_key_.find(KeyRef{child.key, child.is_dir});
  if (it != by_key_.end()) {
    Inode& n = **it;
    // An older listing than the inode's (a lookup that got the listing a
    // refresh was replacing) must not move the name back to an older version.
    const bool older = listing_seq < n.listing_seq;
    if (older || child.is_dir || SameVersion(n.attr, child)) {
      if (!older) {
        n.attr = child;
        n.attr.ino = n.ino;
        n.attr.stale = false;  // kept per lookup, not per inode
        n.attr_ms = child.listing_ms;
        n.listing_seq = listing_seq;
        n.superseded = false;  // its version is the name's again
      }
      InodeAttr out = n.attr;  // before the count: a copy that throws counts no reference
      out.stale = child.stale || older;
      ++n.nlookup;
      return out;
    }
    // Another version of the object: a new inode. The old one keeps the
    // version it had for the handles open on it (the kernel would otherwise
    // give it the new size and cut their reads short with a silent EOF).
    n.superseded = true;
  }
  uint64_t ino = InoOf(child.key + (child.is_dir ? "/" : ""), VersionOf(child.is_dir, child.etag, child.size, child.mtime_ns));
  while (inodes_.contains(ino)) ino = ino + 1 < Namespace::kInoLimit ? ino + 1 : 2;
  InodeAttr a = child;
  a.ino = ino;
  a.stale = false;
  auto at = inodes_.emplace(ino, Inode{ino, parent, a, child.listing_ms, 1, listing_seq}).first;
  try {
    OwnKey(&at->second);
    a.stale = child.stale;
    return a;
  } catch (...) {  // out of memory: the kernel never sees the inode, which must not stay counted
    if (auto k = by_key_.find(KeyOf(&at->second)); k != by_key_.end() && *k == &at->second) by_key_.erase(k);
    inodes_.erase(at);
    throw;
  }
}

size_t Namespace::ByKeyHash::operator()(KeyRef r) const noexcept {
  return XXH3_64bits_withSeed(r.key.data(), r.key.size(), r.dir ? 1 : 0);
}

void Namespace::OwnKey(Inode* n) {
  // The previous owner's node is reused: nothing allocated, nothing to undo
  // (AddLookup), when there is one.
  if (auto o = by_key_.find(KeyOf(n)); o != by_key_.end()) {
    auto node = by_key_.extract(o);
    node.value() = n;
    by_key_.insert(std::move(node));
    return;
  }
  by_key_.insert(n);
}

uint64_t Namespace::InoOf(std::string_view key_slash, std::string_view version) {
  std::string b;
  b.reserve(key_slash.size() + 1 + version.size());
  b.append(key_slash);
  b.push_back('\0');  // ("ab", "c") != ("a", "bc")
  b.append(version);
  const uint64_t h = XXH3_64bits(b.data(), b.size()) & (Namespace::kInoLimit - 1);
  return h < 2 ? h + 2 : h;
}

uint64_t Namespace::EntryIno(uint64_t dir, const DirEntry& e) const {
  std::lock_guard lk(mu_);
  auto d = inodes_.find(dir);
  std::string k = ChildKey(d == inodes_.end() ? std::string() : d->second.attr.key, e.name);
  if (e.is_dir) k.push_back('/');
  const std::string version = VersionOf(e.is_dir, e.etag, e.size, e.mtime_ns);
  if (auto it = by_key_.find(KeyOf(k)); it != by_key_.end()) {
    const InodeAttr& a = (*it)->attr;
    if (VersionOf(a.is_dir, a.etag, a.size, a.mtime_ns) == version) return (*it)->ino;
  }
  return InoOf(k, version);
}

uint64_t Namespace::ParentOf(uint64_t ino) const {
  std::lock_guard lk(mu_);
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? kRootIno : it->second.parent;
}

bool Namespace::Forget(uint64_t ino, uint64_t nlookup) {
  if (ino == kRootIno) return false;
  std::lock_guard lk(mu_);
  auto it = inodes_.find(ino);  // looked up again under the lock before erasing
  if (it == inodes_.end()) return true;
  if (it->second.nlookup < nlookup) {
    spdlog::critical("lookup count underflow on inode {} ({} < {})", ino, it->second.nlookup, nlookup);
    std::abort();
  }
  it->second.nlookup -= nlookup;
  if (it->second.nlookup == 0) {
    // A superseded inode no longer owns its key.
    auto k = by_key_.find(KeyOf(&it->second));
    if (k != by_key_.end() && *k == &it->second) by_key_.erase(k);
    inodes_.erase(it);
    return true;
  }
  return false;
}

Result<InodeAttr> Namespace::GetAttr(uint64_t ino) {
  std::string parent_key, name;
  {
    std::lock_guard lk(mu_);
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) return Err(Status::NotFound("stale inode"));
    if (ino == kRootIno || it->second.superseded || Fresh(it->second.attr_ms)) return it->second.attr;
    auto p = inodes_.find(it->second.parent);
    if (p == inodes_.end()) return it->second.attr;
    parent_key = p->second.attr.key;
    name = NameOf(it->second.attr.key);
  }
  // Stale: refresh from the parent's listing (one LIST per directory, not a HEAD per file).
  uint64_t listing_seq = 0;
  auto child = Child(parent_key, name, &listing_seq);
  std::lock_guard lk(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return Err(Status::NotFound("stale inode"));
  Inode& n = it->second;
  if (!child && child.error().code() != Code::kNotFound) {
    // Backend trouble: keep serving what we know, kept briefly by the kernel
    // (its listing's TTL is over: a zero timeout would ask again at every stat).
    InodeAttr out = n.attr;
    out.stale = true;
    return out;
  }
  // An older listing than the inode's, naming it or not (a NotFound from
  // it marked a live inode superseded, its attributes frozen for good).
  if (listing_seq != 0 && listing_seq < n.listing_seq) return n.attr;
  if (!child || child->is_dir != n.attr.is_dir || (!child->is_dir && !SameVersion(n.attr, *child))) {
    // Deleted, replaced by a directory (or a file by a directory), or
    // another version. A file inode keeps its own version's attributes for
    // the handles open on it, as an unlinked file does (fstat, lseek to the
    // end); the name leads elsewhere, or nowhere, at its next lookup. A
    // directory inode keeps its attributes too, as a removed directory does
    // (fstat of an open directory, stat of a process's working directory:
    // they failed with ENOENT before 2026-11-28).
    n.superseded = true;
    return n.attr;
  }
  n.attr.size = child->size;
  n.attr.mtime_ns = child->mtime_ns;
  n.attr.etag = child->etag;
  n.attr.data_key = child->data_key;
  n.attr.listing_ms = child->listing_ms;
  n.attr_ms = child->listing_ms;
  n.listing_seq = listing_seq;
  InodeAttr out = n.attr;
  out.stale = child->stale;  // per reply, not per inode
  return out;
}

Result<std::shared_ptr<const DirListing>> Namespace::ReadDir(uint64_t ino) {
  std::string key;
  {
    std::lock_guard lk(mu_);
    auto it = inodes_.find(ino);
    if (it == inodes_.end()) return Err(Status::NotFound("stale inode"));
    if (!it->second.attr.is_dir) return Err(Status::InvalidArgument("not a directory"));
    key = it->second.attr.key;
  }
  auto l = Listing(key);
  if (l) NoteWalk(key);
  return l;
}

bool HasSavedListing(BlockStore& store, const std::string& dir_key) {
  auto raw = store.GetMeta(MetaKey(dir_key));
  return raw && DecodeListing(*raw) != nullptr;
}

}  // namespace igt
