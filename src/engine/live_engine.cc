// LiveEngine (live_engine.h).

#include "src/engine/live_engine.h"

#include <chrono>

namespace igt::engine {
namespace {

constexpr size_t kMaxVersions = 262144;  // ~100 B each: ~25 MiB at most

}  // namespace

class LiveEngine::Adapter final : public EvictionPolicy {
 public:
  explicit Adapter(std::shared_ptr<LiveEngine> e) : e_(std::move(e)) {}
  std::string_view name() const override { return e_->policy_; }
  void OnInsert(const std::string& id, uint64_t bytes, uint64_t last_access_us) override {
    OnInsertUnit(id, bytes, last_access_us, UnitMeta{});
  }
  void OnInsertUnit(const std::string& id, uint64_t bytes, uint64_t last_access_us,
                    const UnitMeta& meta) override {
    std::lock_guard lk(e_->mu_);
    // meta.prefetched: the ReadPipeline's Fetch inserted it (a prefetch),
    // not a reader's miss. (Before, units of a prefetch job in progress were
    // looked up by whole-unit number: a reader's own miss of such a unit
    // counted as a prefetch, and sub-units a prefetch fetched did not.)
    // last_access_us: 0 for a fresh insert, the recorded access for a unit
    // restored from the index at start-up (BlockStore::Open).
    e_->engine_->OnInsert(id, meta.object, meta.unit_index, bytes, meta.prefetched, e_->NowUs(),
                          meta.disk_bytes, meta.etag, /*restored=*/last_access_us != 0);
  }
  // Without bytes: the BlockStore's Put of a unit already cached, for a
  // reader's miss whose fetch raced another insert: read, not a hit.
  void OnAccess(const std::string& id) override {
    std::lock_guard lk(e_->mu_);
    e_->engine_->OnHit(id, 0, e_->NowUs(), /*hit=*/false);
  }
  void OnAccessBytes(const std::string& id, uint64_t bytes) override {
    std::lock_guard lk(e_->mu_);
    e_->engine_->OnHit(id, bytes, e_->NowUs());
  }
  void OnRemove(const std::string& id) override {
    std::lock_guard lk(e_->mu_);
    e_->engine_->OnRemove(id);
  }
  std::optional<std::string> PickVictim() override {
    std::lock_guard lk(e_->mu_);
    return e_->engine_->PickVictim(e_->NowUs());
  }
  bool AdmitUnit(const std::string& id, uint64_t bytes, const UnitMeta& meta) override {
    std::lock_guard lk(e_->mu_);
    return e_->engine_->AdmitInsert(meta.object, meta.prefetched, e_->NowUs());
  }
  size_t size() const override {
    std::lock_guard lk(e_->mu_);
    return e_->engine_->cached_units();
  }

 private:
  std::shared_ptr<LiveEngine> e_;
};

Result<std::shared_ptr<LiveEngine>> LiveEngine::Create(EngineOptions opts, stream::AccessStreamTree* tree,
                                                       ListingFn listing, VersionFn version) {
  const std::string policy = opts.policy;
  auto e = PolicyEngine::Create(std::move(opts), tree, std::move(listing));
  if (!e) return Err(e.error());
  return std::shared_ptr<LiveEngine>(new LiveEngine(std::move(*e), policy, std::move(version)));
}

std::unique_ptr<EvictionPolicy> LiveEngine::MakeEvictionAdapter() {
  return std::make_unique<Adapter>(shared_from_this());
}

uint64_t LiveEngine::NowUs() const {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void LiveEngine::NoteGone(const std::vector<std::string>& paths) {
  std::lock_guard lk(mu_);
  std::unordered_set<std::string_view> dirs;
  for (const std::string& p : paths) {
    if (!p.empty() && p.back() == '/') dirs.insert(p);
    else versions_.erase(p);
  }
  if (!dirs.empty()) std::erase_if(versions_, [&](const auto& kv) { return UnderDirs(kv.first, dirs); });
  engine_->NoteGone(paths);
}

std::vector<LivePrefetch> LiveEngine::OnRead(uint64_t now_us, uint32_t pid, const std::string& key,
                                             const std::string& etag, uint64_t offset, uint64_t length,
                                             uint64_t size) {
  std::vector<LivePrefetch> out;
  std::lock_guard lk(mu_);
  if (versions_.size() >= kMaxVersions) versions_.clear();
  auto [seen, first] = versions_.try_emplace(key, Seen{etag, size});
  if (first || seen->second.etag != etag) {
    // Another version than the last read's: if it is the current one (the
    // listed version; a handle may still read an old one), only its units
    // count as the file's cached bytes from now on.
    seen->second = Seen{etag, size};
    if (version_)
      if (auto cur = version_(key); cur && cur->first == etag) engine_->NewVersion(key, etag);
  }
  auto plan = engine_->OnRead(NowUs(), pid, key, offset, length, size);
  for (auto& r : plan) {
    if (!engine_->Admit(r.path)) continue;  // never cached: nothing to fetch ahead (as the simulator)
    // The version: this read's for its own file; for another, the mount's
    // current metadata first (a version some read saw may have been
    // overwritten since: its GETs would fail), else what a read saw.
    std::optional<std::pair<std::string, uint64_t>> v;
    if (r.path == key) v.emplace(etag, size);
    if (!v && version_) v = version_(r.path);
    if (!v)
      if (auto seen = versions_.find(r.path); seen != versions_.end()) v.emplace(seen->second.etag, seen->second.size);
    if (v && !v->first.empty()) out.push_back({std::move(r.path), v->first, v->second, r.first_unit, r.last_unit, r.fill, r.fill_bytes, r.background});
  }
  return out;
}

uint64_t LiveEngine::SubUnitBytes(const std::string& key) const {
  std::lock_guard lk(mu_);
  return engine_->SubUnitBytes(key);
}

bool LiveEngine::Admit(const std::string& key) const {
  if (!never_cache_.load(std::memory_order_acquire)) return true;
  std::lock_guard lk(mu_);
  return engine_->Admit(key);
}

void LiveEngine::NoteNeverCache() {
  bool any = false;
  for (const auto& o : engine_->options().policy_file.overrides) any |= o.never_cache;
  never_cache_.store(any, std::memory_order_release);
}

void LiveEngine::SetCapacity(uint64_t bytes) {
  std::lock_guard lk(mu_);
  engine_->set_capacity_bytes(bytes);
}

uint64_t LiveEngine::CachedBytes(const std::string& key) const {
  std::lock_guard lk(mu_);
  return engine_->CachedBytes(key);
}

int LiveEngine::ForcedLabel(const std::string& key) const {
  std::lock_guard lk(mu_);
  return engine_->ForcedLabel(key);
}

Status LiveEngine::Reload(PolicyFile pf) {
  std::lock_guard lk(mu_);
  Status s = engine_->SetPolicyFile(std::move(pf));
  NoteNeverCache();
  if (s.ok()) reload_error_.clear();
  else NoteReloadFailureLocked(s.message());
  return s;
}

void LiveEngine::NoteWarm(const std::string& key) {
  std::lock_guard lk(mu_);
  engine_->NoteWarm(key, NowUs());
}

void LiveEngine::NoteReloadFailure(const std::string& message) {
  std::lock_guard lk(mu_);
  NoteReloadFailureLocked(message);
}

void LiveEngine::NoteReloadFailureLocked(const std::string& message) {
  ++reload_failures_;
  reload_error_ = message;
}

nlohmann::json LiveEngine::StatsJson() const {
  std::lock_guard lk(mu_);
  auto j = ToJson(engine_->Stats());
  j["policy"] = policy_;
  j["policy_reload_failures"] = reload_failures_;
  j["policy_reload_error"] = reload_error_;
  return j;
}

}  // namespace igt::engine
