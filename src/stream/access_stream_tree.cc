#include "src/stream/access_stream_tree.h"

#include <algorithm>
#include <deque>
#include <map>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

namespace igt::stream {
namespace detail {

// Test-and-test-and-set spin lock: the critical sections on the read path
// are a few dozen instructions (a re-test, every K samples, is the longest:
// tens of microseconds), so waiters spin briefly and then yield.
class SpinLock {
 public:
  void lock() {
    while (f_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; f_.load(std::memory_order_relaxed); ++spins) {
        if (spins > 64) std::this_thread::yield();  // ~64 pause-free loads, then yield
      }
    }
  }
  void unlock() { f_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> f_{false};
};

struct RingEntry {
  uint64_t time_us;
  uint32_t child;
  uint32_t pid;
};

// A node's sample ring and detection state. Guarded by Node::mu.
struct StreamState {
  // Circular buffer: `count` valid entries ending just before `next`. It
  // starts small and is re-allocated (oldest first) up to the window when
  // full; if memory is refused it simply overwrites (a smaller window).
  std::vector<RingEntry> ring;
  uint32_t count = 0;
  uint32_t next = 0;
  uint64_t samples = 0;
  uint32_t since_test = 0;
  uint64_t last_test_us = 0;
  uint64_t last_sample_us = 0;
  Label label = Label::kUnknown;
  Label pending = Label::kUnknown;  // candidate new label (hysteresis)
  uint32_t pending_votes = 0;
  bool ever_labelled = false;
  uint64_t cut_samples = 0;  // `samples` at the last change point (RunTestLocked)
  bool queued = false;       // in AccessStreamTree::pending_
  uint64_t vote_samples = 0; // `samples` at the last counted vote for `pending`
  DetectResult shown;  // the test behind `label` (latest test while never labelled)

  const RingEntry& oldest(size_t i) const {  // i-th oldest valid entry
    const size_t sz = ring.size();
    return ring[(next + sz - count + i) % sz];
  }
};

// Change point (RunTestLocked): the newest samples tested apart from the
// rest of the window. 64 is twice min_samples' default: enough for the
// binomial test to see a scan (or its absence) at alpha/2, and a quarter of
// the default window, so a phase change is seen after 64 samples instead of
// the ~200 it takes to outvote a full window of the old phase.
constexpr size_t kRecentSamples = 64;

// Maintain re-tests a labelled stream that is still being read at most every
// this many retest periods (a quiet one after one period).
constexpr uint64_t kActiveRetestPeriods = 8;

// Per-reader position in a file, to tell continuations from new visits.
struct PidCursor {
  uint32_t pid = 0;
  uint32_t seen_s = 0;              // 1 + the second of its last read; 0: a free slot
  uint64_t end = 0;                 // end offset of this pid's last read
  uint64_t last_block = UINT64_MAX; // last block that read touched
  uint64_t last_off = 0;            // offset of this pid's last read
  // A readahead window's top read ahead of the reader, its sample deferred
  // (RecordInFile): 1 + its first block (0: none), and the first block of
  // the gap below it.
  uint32_t pend = 0;
  uint32_t pend_from = 0;
  // A reader keeps other positions in a file (RecordInFile): the runs it
  // jumped away from (up to kRunsPerReader - 1), resumed if it comes back
  // there. `second` marks such a slot; `sub` tags a run's samples (the
  // sample's reader is pid ^ sub << 30) so that the detector sees each
  // run's own steps.
  bool second = false;
  uint8_t sub = 0;
  uint16_t left = 0;  // a kept run: when it was left, counted per reader (wraps)
  uint8_t steps = 0;  // reads that went on its run (saturating at 255)
  // Its last read's millisecond (wrapping), and whether the reads coming
  // within kPieceMs of each other up to it began with a jump (pieces of one
  // read: RecordInFile). In the padding.
  bool burst_jump = false;
  uint16_t last_ms = 0;
};
static_assert(sizeof(PidCursor) == 48);
// Runs one reader keeps in a file: an HDF5 file's x[i], y[i], z[i], w[i]
// read in lockstep. (With two, three regions read in turn overwrote the run
// the reader came back to each time, every read a jump: labelled skewed, 2.6x
// lru-readahead's modeled time in a review's trace.)
constexpr size_t kRunsPerReader = 4;
constexpr uint32_t kRunTagShift = 30;
constexpr uint64_t kMinBlocksForRuns = 64;
// The pieces of one read (RecordInFile) come within this many milliseconds.
constexpr uint16_t kPieceMs = 2;
// Readers remembered per file: kCursors inline, and more (doubling, up to
// kMaxFileCursors in all) allocated when a file has more readers at once:
// ranks of a multi-GPU job loading one checkpoint, or a loader's thread pool
// (FUSE names the calling thread, so each thread is a reader). A new reader
// takes a free slot, else the slot of a reader idle for kCursorIdleS (a
// DataLoader's workers are new processes every epoch: a file read once per
// epoch must not collect their cursors), else more slots; with all of those
// live, the reader is not tracked (RecordInFile). A reader whose slot is
// taken makes its next read a new visit and a sample of the block it is in:
// with 4 cursors, 8 staggered readers of one file made every read such a
// sample (16 per 1 MiB block in 64 KiB reads) and the file was labelled
// skewed; `igtcache sim` fetched 2,176 MiB of a 64 MiB file with a 32 MiB
// cache. (With 64 slots a reviewer's 96 and 128 readers did the same.)
constexpr size_t kCursors = 4;
constexpr size_t kMaxFileCursors = 256;
constexpr uint32_t kCursorIdleS = 10;

using ChildMap = std::map<std::string, Node*, std::less<>>;

// Children of a directory node. `mu` guards everything here; `listed` is
// atomic. INVARIANT: slots[c->slot] == c for every child c in map, and
// c->self points at c's map entry; pruned children leave a null slot that is
// reused only after the parent's ring has turned over (so old ring entries
// never count for a new child).
struct DirState {
  mutable std::shared_mutex mu;
  ChildMap map;  // sorted: listing order, for "next file" steps
  // Hash index over the same children (keys view map's strings): lookups on
  // the read path cost ~2 cache misses instead of log2(N) in the map.
  std::unordered_map<std::string_view, Node*> index;
  std::vector<Node*> slots;
  std::deque<std::pair<uint32_t, uint64_t>> free_slots;  // (slot, parent samples at free)
  std::atomic<uint64_t> listed{0};
};

struct Node {
  // Constant after creation (published under the parent's DirState::mu).
  Node* parent = nullptr;
  bool is_dir = false;
  uint32_t slot = 0;
  ChildMap::iterator self{};
  std::unique_ptr<DirState> dir;  // directories only

  SpinLock mu;  // guards the fields below up to `stream`, and *stream
  uint64_t file_size = 0;
  uint32_t heat = 0;
  uint64_t heat_time_us = 0;
  std::array<PidCursor, kCursors> cursors{};
  std::unique_ptr<std::vector<PidCursor>> more_cursors;  // when needed (kMaxFileCursors)
  uint8_t cursor_victim = 0;
  // Every reader slot, inline ones first (mu held).
  template <class Fn>
  void ForEachCursor(Fn&& fn) {
    for (auto& cu : cursors) fn(cu);
    if (more_cursors)
      for (auto& cu : *more_cursors) fn(cu);
  }
  std::unique_ptr<StreamState> stream;

  std::atomic<uint64_t> last_access_us{0};
  std::atomic<uint64_t> samples_seen{0};
  std::atomic<uint64_t> bytes{0};     // accounted; frozen once retired
  std::atomic<bool> retired{false};   // set under mu (and dir->mu) by the pruner
};

}  // namespace detail

using detail::DirState;
using detail::Node;
using detail::RingEntry;
using detail::StreamState;

namespace {

// libstdc++ std::map node: 32-byte header + std::string (32) + Node* (8),
// plus malloc's 8-byte chunk header, rounded to 16: 80 bytes.
constexpr uint64_t kMapEntryBytes = 80;
// std::unordered_map node: next pointer + string_view + Node* + cached hash
// (40) + malloc header, rounded to 16 = 48; plus one 8-byte bucket per entry
// at load factor 1: 56 bytes.
constexpr uint64_t kIndexEntryBytes = 56;
// malloc chunk overhead per separate allocation (glibc: 8, rounded to 16).
constexpr uint64_t kAllocOverhead = 16;
// Up to this many blocks of one read become samples (a FUSE read is at most
// max_read = 1 MiB; larger reads from other callers are folded).
constexpr uint64_t kMaxBlocksPerRead = 8;
// First ring allocation, then doubling up to the window.
constexpr uint32_t kInitialRing = 16;
// Pruning frees down to this fraction of the cap, so that the next prune is
// many creations away (amortises the tree walk).
constexpr double kPruneLowWater = 0.9;

uint64_t NameBytes(std::string_view key) {
  // std::string keeps <= 15 chars inline (SSO); longer names allocate.
  return key.size() > 15 ? key.size() + 1 + kAllocOverhead : 0;
}

uint64_t NodeBytes(std::string_view key, bool is_dir) {
  uint64_t b = sizeof(Node) + kAllocOverhead + kMapEntryBytes + kIndexEntryBytes + NameBytes(key) +
               sizeof(Node*);
  if (is_dir) b += sizeof(DirState) + kAllocOverhead;
  return b;
}

// PushSample's look back for a reader's own latest sample on a node.
constexpr size_t kSameAgainLook = 32;

thread_local uint32_t t_shard = [] {
  static std::atomic<uint32_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}();

bool DirSucc(const void* ctx, uint32_t a, uint32_t b, uint32_t gap) {
  auto* d = static_cast<const DirState*>(ctx);  // d->mu held shared by the caller
  if (a >= d->slots.size() || b >= d->slots.size()) return false;
  const Node* na = d->slots[a];
  const Node* nb = d->slots[b];
  if (!na || !nb || na == nb) return false;
  auto it = na->self;
  for (uint32_t i = 0; i < gap; ++i) {
    if (++it == d->map.end()) return false;
    if (it->second == nb) return true;
  }
  return false;
}

}  // namespace

class AccessStreamTree::EpochGuard {
 public:
  explicit EpochGuard(const AccessStreamTree& t) : t_(t) {
    auto& sh = t_.shards_[t_shard % kEpochShards];
    while (true) {
      e_ = t_.epoch_.load(std::memory_order_seq_cst);
      sh.active[e_ % 3].fetch_add(1, std::memory_order_seq_cst);
      if (t_.epoch_.load(std::memory_order_seq_cst) == e_) break;
      sh.active[e_ % 3].fetch_sub(1, std::memory_order_seq_cst);
    }
    shard_ = &sh;
  }
  ~EpochGuard() { shard_->active[e_ % 3].fetch_sub(1, std::memory_order_release); }

 private:
  const AccessStreamTree& t_;
  EpochShard* shard_ = nullptr;
  uint64_t e_ = 0;
};

AccessStreamTree::AccessStreamTree(StreamConfig cfg) : cfg_([&] {
  cfg.window = std::clamp<uint32_t>(cfg.window, 16, 1u << 20);
  cfg.min_samples = std::clamp<uint32_t>(cfg.min_samples, 2, cfg.window);
  cfg.retest_every_samples = std::max<uint32_t>(cfg.retest_every_samples, 1);
  cfg.hysteresis_tests = std::max<uint32_t>(cfg.hysteresis_tests, 1);
  cfg.sequential_gap = std::clamp<uint32_t>(cfg.sequential_gap, 1, 64);
  cfg.unit_bytes = std::max<uint64_t>(cfg.unit_bytes, 1);
  cfg.heat_half_life_ms = std::max<uint64_t>(cfg.heat_half_life_ms, 1);
  return cfg;
}()) {
  root_ = new Node;
  root_->is_dir = true;
  root_->dir = std::make_unique<DirState>();
  uint64_t b = NodeBytes("", true);
  root_->bytes = b;
  total_bytes_ = b;
  nodes_ = 1;
}

static void DeleteSubtree(Node* n) {
  if (n->dir) {
    for (auto& [k, c] : n->dir->map) DeleteSubtree(c);
  }
  delete n;
}

AccessStreamTree::~AccessStreamTree() {
  DeleteSubtree(root_);
  for (auto& r : retired_)
    for (Node* n : r) DeleteSubtree(n);
}

// ------------------------------------------------------------ memory

bool AccessStreamTree::TryReserve(uint64_t bytes) {
  uint64_t cur = total_bytes_.load(std::memory_order_relaxed);
  while (cur + bytes <= cfg_.memory_cap_bytes) {
    if (total_bytes_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) return true;
  }
  return false;
}

bool AccessStreamTree::Reserve(uint64_t bytes) {
  if (TryReserve(bytes)) return true;
  EnforceCap(bytes);
  return TryReserve(bytes);
}

void AccessStreamTree::Unreserve(uint64_t bytes) { total_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }

void AccessStreamTree::EnforceCap(uint64_t need) {
  std::unique_lock lk(prune_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return;  // another thread is pruning; this access may be dropped
  TryReclaimLocked();
  const double low = kPruneLowWater * static_cast<double>(cfg_.memory_cap_bytes);
  uint64_t target = low > static_cast<double>(need) ? static_cast<uint64_t>(low) - need : 0;
  // Nodes already retired free their bytes once the epoch moves on (this
  // caller may hold a guard that keeps it from moving): while the live
  // bytes are under the target, another walk over the tree would prune
  // nothing.
  if (total_bytes_.load() + need > cfg_.memory_cap_bytes &&
      total_bytes_.load() - retired_bytes_.load() > target)
    PruneLocked(0, target);
  TryReclaimLocked();
}

void AccessStreamTree::TryReclaimLocked() {
  uint64_t e = epoch_.load(std::memory_order_seq_cst);
  for (auto& sh : shards_)
    if (sh.active[(e + 2) % 3].load(std::memory_order_seq_cst) != 0) return;  // readers left in e-1
  epoch_.store(e + 1, std::memory_order_seq_cst);
  auto& bucket = retired_[(e + 1) % 3];  // retired during e-2: nobody can hold them
  for (Node* n : bucket) {
    uint64_t b = n->bytes.load();
    retired_bytes_.fetch_sub(b, std::memory_order_relaxed);
    total_bytes_.fetch_sub(b, std::memory_order_relaxed);
    if (n->stream && n->stream->queued) {  // no reader left to touch it
      std::lock_guard plk(pending_mu_);
      pending_.erase(n);
    }
    delete n;  // retired nodes have no children (only empty directories are pruned)
  }
  bucket.clear();
}

template <class Fn>
void AccessStreamTree::ForEachNode(Fn&& fn) const {
  std::vector<Node*> stack{root_};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    fn(n);
    if (!n->dir) continue;
    const size_t at = stack.size();
    {
      std::shared_lock lk(n->dir->mu);
      for (auto& kv : n->dir->map) stack.push_back(kv.second);
    }
    std::reverse(stack.begin() + at, stack.end());  // first child on top
  }
}

template <class Fn>
void AccessStreamTree::ForEachNodeWithPath(Fn&& fn) const {
  std::vector<std::pair<Node*, std::string>> stack;
  stack.emplace_back(root_, std::string());
  std::vector<std::pair<std::string, Node*>> kids;
  while (!stack.empty()) {
    auto [n, path] = std::move(stack.back());
    stack.pop_back();
    fn(n, path);
    if (!n->dir) continue;
    kids.clear();
    {
      std::shared_lock lk(n->dir->mu);
      for (auto& [k, c] : n->dir->map) kids.emplace_back(k, c);
    }
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.emplace_back(it->second, path + it->first);
  }
}

size_t AccessStreamTree::PruneLocked(uint64_t older_than_us, uint64_t target_bytes) {
  struct Cand {
    uint64_t last;
    Node* n;
  };
  std::vector<Cand> cands;
  {
    EpochGuard g(*this);
    ForEachNode([&](Node* n) {
      if (n == root_) return;
      if (n->dir) {
        std::shared_lock lk(n->dir->mu);
        if (!n->dir->map.empty()) return;
      }
      uint64_t last = n->last_access_us.load(std::memory_order_relaxed);
      if (older_than_us == 0 || last < older_than_us) cands.push_back({last, n});
    });
  }
  // Pruner holds prune_mu_: no other thread unlinks or frees, so `cands`
  // stay valid without a guard.
  std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.last < b.last; });
  size_t pruned = 0;
  for (const Cand& c : cands) {
    if (older_than_us == 0 && total_bytes_.load() - retired_bytes_.load() <= target_bytes) break;
    if (UnlinkLocked(c.n)) ++pruned;
  }
  return pruned;
}

bool AccessStreamTree::UnlinkLocked(Node* n) {
  Node* p = n->parent;
  DirState& pd = *p->dir;
  std::unique_lock plk(pd.mu);
  if (n->slot >= pd.slots.size() || pd.slots[n->slot] != n) return false;
  {
    std::lock_guard nlk(n->mu);
    if (n->dir) {
      std::unique_lock dlk(n->dir->mu);
      if (!n->dir->map.empty()) return false;  // gained a child since the walk
      n->retired.store(true);
    } else {
      n->retired.store(true);
    }
    if (n->stream) stream_nodes_.fetch_sub(1, std::memory_order_relaxed);
  }
  pd.index.erase(std::string_view(n->self->first));
  pd.map.erase(n->self);
  pd.slots[n->slot] = nullptr;
  pd.free_slots.emplace_back(n->slot, p->samples_seen.load(std::memory_order_relaxed));
  retired_bytes_.fetch_add(n->bytes.load(), std::memory_order_relaxed);
  retired_[epoch_.load() % 3].push_back(n);
  nodes_.fetch_sub(1, std::memory_order_relaxed);
  pruned_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// ------------------------------------------------------------ recording

Node* AccessStreamTree::FindOrCreate(Node* parent, std::string_view key, bool is_dir, uint64_t now_us) {
  DirState& d = *parent->dir;
  {
    std::shared_lock lk(d.mu);
    auto it = d.index.find(key);
    if (it != d.index.end()) return it->second;
  }
  const uint64_t need = NodeBytes(key, is_dir);
  if (!Reserve(need)) return nullptr;
  std::unique_lock lk(d.mu);
  if (parent->retired.load()) {
    Unreserve(need);
    return nullptr;
  }
  if (auto it = d.index.find(key); it != d.index.end()) {
    Unreserve(need);
    return it->second;
  }
  auto* c = new Node;
  c->parent = parent;
  c->is_dir = is_dir;
  if (is_dir) c->dir = std::make_unique<DirState>();
  c->bytes.store(need, std::memory_order_relaxed);
  c->last_access_us.store(now_us, std::memory_order_relaxed);
  c->heat_time_us = now_us;
  c->self = d.map.emplace(std::string(key), c).first;
  d.index.emplace(std::string_view(c->self->first), c);
  const uint64_t parent_samples = parent->samples_seen.load(std::memory_order_relaxed);
  if (!d.free_slots.empty() && parent_samples - d.free_slots.front().second > cfg_.window) {
    c->slot = d.free_slots.front().first;
    d.free_slots.pop_front();
    d.slots[c->slot] = c;
  } else {
    c->slot = static_cast<uint32_t>(d.slots.size());
    d.slots.push_back(c);
  }
  nodes_.fetch_add(1, std::memory_order_relaxed);
  return c;
}

void AccessStreamTree::Record(uint64_t time_us, uint32_t pid, std::string_view path, uint64_t offset,
                              uint64_t length, uint64_t file_size) {
  EpochGuard g(*this);
  std::array<Node*, kMaxDepth + 1> chain;
  uint32_t depth = 0;
  chain[0] = root_;
  Node* cur = root_;
  size_t pos = 0;
  bool dropped = false;
  while (pos < path.size() && depth < kMaxDepth) {
    size_t slash = path.find('/', pos);
    if (slash == pos) {  // empty component ("a//b" or a leading '/')
      ++pos;
      continue;
    }
    const bool last = slash == std::string_view::npos;
    // Directory keys keep their '/', so file "a" and directory "a/" differ and
    // sort as the bucket lists them.
    std::string_view key = last ? path.substr(pos) : path.substr(pos, slash - pos + 1);
    Node* child = FindOrCreate(cur, key, !last, time_us);
    if (!child) {
      dropped = true;
      break;
    }
    chain[++depth] = child;
    cur = child;
    if (last) break;
    pos = slash + 1;
  }
  if (dropped) dropped_.fetch_add(1, std::memory_order_relaxed);

  bool new_visit = true;
  bool other_part = false;
  Node* leaf = chain[depth];
  if (!leaf->is_dir && !dropped) {
    new_visit = RecordInFile(leaf, time_us, pid, offset, length, file_size, &other_part);
  } else {
    leaf->last_access_us.store(time_us, std::memory_order_relaxed);
  }
  for (uint32_t d = depth; d-- > 0;) {
    Node* n = chain[d];
    n->last_access_us.store(time_us, std::memory_order_relaxed);
    // Not for the reader's own latest child again: its next file in the
    // same subdirectory, or another part of the file it read last (a
    // zip-format item, torch.save's .pt or an .npz, read at its central
    // directory at the end, then from its start: two samples of one item
    // in a row, and a folder of them was labelled skewed, LFU: a review's
    // trace of 400 such files of 2 MiB, 3 shuffled epochs, 4 workers, 100
    // MiB cache, fetched 18,363 MiB in sim, lru 2,384; now labelled random,
    // 3,497). The same bytes read again are a repeat (a hot item).
    if (new_visit)
      PushSample(n, chain[d + 1]->slot, pid, time_us, /*same_again=*/chain[d + 1]->is_dir || (d + 1 == depth && other_part));
  }
  // A ring or stream could not get memory under a node lock: prune now that
  // no lock is held.
  if (want_prune_.load(std::memory_order_relaxed) && want_prune_.exchange(false)) EnforceCap(0);
}

bool AccessStreamTree::RecordInFile(Node* f, uint64_t t, uint32_t pid, uint64_t off, uint64_t len,
                                    uint64_t fsize, bool* other_part) {
  f->last_access_us.store(t, std::memory_order_relaxed);
  std::lock_guard lk(f->mu);
  f->file_size = fsize;
  // The reader's position, and the runs it jumped away from (if kept).
  detail::PidCursor* c = nullptr;
  std::array<detail::PidCursor*, detail::kRunsPerReader - 1> runs{};
  size_t nruns = 0;
  auto find_runs = [&] {
    c = nullptr;
    nruns = 0;
    f->ForEachCursor([&](detail::PidCursor& cu) {
      if (!cu.seen_s || cu.pid != pid) return;
      if (!cu.second) c = &cu;
      else if (nruns < runs.size()) runs[nruns++] = &cu;
    });
  };
  find_runs();
  // The kept run left last; the tags of the kept runs; the first tag not in
  // `used` (at most four cursors per reader: one of the 2-bit tags is free).
  auto latest_run = [&] {
    detail::PidCursor* l = nullptr;
    for (size_t i = 0; i < nruns; ++i)
      if (!l || static_cast<int16_t>(runs[i]->left - l->left) > 0) l = runs[i];
    return l;
  };
  auto tags_used = [&] {
    uint32_t used = 0;
    for (size_t i = 0; i < nruns; ++i) used |= 1u << runs[i]->sub;
    return used;
  };
  auto free_tag = [](uint32_t used) {
    uint8_t t = 0;
    while (used & (1u << t)) ++t;
    return t;
  };
  if (!c && nruns > 0) {  // its position's slot went to another reader (NewCursorLocked)
    c = runs[--nruns];
    c->second = false;
  }
  // Continues the reader's last read: starts where it ended, or near it.
  // FUSE's threads deliver one reader's in-flight requests (the kernel's
  // readahead: several max_read chunks at once) in any order, so a read up
  // to 8 of its own lengths behind or ahead of the end still continues; a
  // strict match made each swap a new visit of the file (and a directory
  // scan looked unknown or skewed). Random reads are short: their slack is
  // small.
  // (That decides the visit only: block samples still take a read that
  // starts exactly at the end as the continuation, so a random reader's
  // samples are all counted.)
  // Reads of 128 KiB or more are the kernel's readahead (or a loader's
  // chunks): 8 MiB, the reach of a readahead window served out of order (an
  // mmap's window of 4 MiB comes last page first: its last piece, ~0.5 MiB,
  // lies 4 MiB behind the window's first).
  const uint64_t slack = len >= (128u << 10) ? 8u << 20 : 8 * std::max<uint64_t>(len, 4096);
  // 1 + the second, never 0 (a free slot), compared wrap-safe (a trace's
  // times may be anything).
  const uint32_t now_s = static_cast<uint32_t>((t / 1'000'000) % 0xFFFFFFFFu) + 1;
  auto near_end = [&](const detail::PidCursor& cu) {
    return off != 0 && off + slack >= cu.end && off <= cu.end + slack;
  };
  // A reader moving forward inside the block it is in, or into the next one
  // (a strided scan: 4 KiB every 64 KiB), stays in its visit: each read was
  // a new visit of the file with a sample of that same block, steps never
  // "next" piling up on one block and, a visit each, on the file in its
  // directory (both labelled skewed: a review of the detection layer).
  auto in_block = [&](const detail::PidCursor& cu) {
    return !near_end(cu) && off > cu.last_off && cu.last_block != UINT64_MAX && fsize > cfg_.unit_bytes &&
           off / cfg_.unit_bytes - cu.last_block <= 1 && off / cfg_.unit_bytes >= cu.last_block;
  };
  // Sizes and offsets near 2^64 must not wrap (a sparse file:// file).
  const uint64_t end = len > UINT64_MAX - off ? UINT64_MAX : off + len;
  const uint64_t nblocks = fsize > cfg_.unit_bytes ? fsize / cfg_.unit_bytes + (fsize % cfg_.unit_bytes != 0) : 0;
  // Another part of the file than this reader's latest read (its tail,
  // then its start): the reader is still at the item.
  *other_part = c && (end <= c->last_off || off >= c->end);
  // Back at the run it jumped away from: that run goes on, and the one it
  // left is kept in turn. One reader reading two regions of a file in
  // lockstep (an HDF5 file's x[i] then y[i], i in order) made each read a
  // jump, each block sampled again and again: labelled skewed (a review of
  // the detection layer: modeled 2.3x lru's time).
  // Also when both are near (the regions' ends within a read's slack of
  // each other) and only the kept run's is exactly where the read starts.
  // A run's samples carry its tag; its deferred window top is sampled when
  // the run is left (else lost with its slot).
  auto run_pid = [&](const detail::PidCursor& cu) { return pid ^ (uint32_t{cu.sub} << detail::kRunTagShift); };
  auto flush_pend = [&](detail::PidCursor& cu) {
    if (cu.pend) PushSampleLocked(f, cu.pend - 1, run_pid(cu), t);
    cu.pend = 0;
  };
  // A piece of one read the kernel split around pages it has cached, sent
  // after a later piece: FUSE sends the pieces at once and in any order (a
  // 1 MiB read over units 1010-1011 as 1010 high, 1011 low, 1010 low, 1011
  // high; 4 pieces of unit 103 going down and up in 50 us). Each piece going
  // back was a jump, its block sampled again, and uniform 1 MiB reads of a
  // 2 GiB object whose page cache had holes were labelled skewed (a live
  // tester: 3 runs in 11, p down to 1e-8; random once each read's pieces
  // were merged). Such a piece: smaller than a unit, within kPieceMs of the
  // reader's last read, in a burst of reads that began with a jump (not a
  // scan's readahead requests out of order, each evidence of the scan),
  // ending below where the last read began, in its block or the one
  // before. The reader's visit goes on, no sample, and it stays at its
  // furthest block. (Whole units read at random one block back, and a read
  // of the same bytes again, are not pieces.)
  const uint16_t now_ms = static_cast<uint16_t>(t / 1000);
  const uint64_t b_first = off / cfg_.unit_bytes, b_last = (std::max(end, off + 1) - 1) / cfg_.unit_bytes;
  auto in_burst = [&](const detail::PidCursor& cu) {
    return len > 0 && len < cfg_.unit_bytes && cu.burst_jump && cu.last_block != UINT64_MAX &&
           fsize > cfg_.unit_bytes && static_cast<uint16_t>(now_ms - cu.last_ms) <= detail::kPieceMs;
  };
  auto piece = [&](const detail::PidCursor& cu) {
    return in_burst(cu) && end <= cu.last_off && b_first + 1 >= cu.last_block && b_last <= cu.last_block;
  };
  auto near_run = [&](const detail::PidCursor& cu) { return near_end(cu) || in_block(cu) || piece(cu); };
  if (c) {
    // The kept run the read goes on, the one it starts exactly at first.
    // Only the run left last is resumed by a read near its end (a read's
    // slack, 8 MiB for reads of 128 KiB or more) or in or just past its
    // block (a strided run); the others by a read starting exactly at their
    // end: the more runs a random reader keeps, the likelier such a read by
    // chance (4 readers of 1 MiB blocks of a file of 18 at random: most
    // reads resumed some run, their samples tagged anew, a change of phase).
    detail::PidCursor* const latest = latest_run();
    detail::PidCursor* back = nullptr;
    for (size_t i = 0; i < nruns; ++i)
      if ((runs[i] == latest ? near_run(*runs[i]) : off != 0 && runs[i]->end == off) &&
          (!back || (runs[i]->end == off && back->end != off)))
        back = runs[i];
    if (back && (!near_run(*c) || (back->end == off && c->end != off))) {
      if (nblocks > 0) flush_pend(*c);
      const uint16_t last_left = latest->left;
      std::swap(*c, *back);
      c->second = false;
      back->second = true;
      back->left = static_cast<uint16_t>(last_left + 1);  // the run left last now (a review)
      // A run resumed gets a tag of its own (it may share one with the
      // runs it was left from: see the jump below).
      if (const uint32_t used = tags_used(); used & (1u << c->sub)) c->sub = free_tag(used);
    }
  }
  const bool near = c && near_run(*c);
  const bool cont = near && c->end == off;
  if (c && !near && c->last_block != UINT64_MAX) {
    // A jump: the run left behind is kept as one of the reader's other
    // positions, its samples tagged apart. The new run takes the place and
    // tag of the kept run it goes on from in its region (the run of two
    // reads or more ending nearest below it: a DataLoader worker's x rows of
    // its next batch after those of its last; not a single read, else a
    // random reader's reads fell into rising chains, each its tag's steps
    // forward, and looked sequential); else another slot (NewCursorLocked)
    // while the reader keeps fewer than kRunsPerReader - 1, with a tag none
    // of its runs has; else the place and tag of the run left longest ago.
    // (New slots and tags
    // for each batch labelled 4 unshuffled workers reading x[i], y[i] in
    // batches sequential sooner, and the engine fetched 2,120 MiB where it
    // had fetched 1,175 in `igtcache sim`.)
    detail::PidCursor* slot = nullptr;
    for (size_t i = 0; i < nruns; ++i)
      if (runs[i]->steps > 0 && runs[i]->end <= off && (!slot || runs[i]->end > slot->end)) slot = runs[i];
    uint8_t sub = slot ? slot->sub : 0;
    // More than one run kept in a file of kMinBlocksForRuns blocks or more
    // only: in fewer, a random reader's reads land exactly on its kept runs'
    // ends by chance often (4 readers of 1 MiB blocks of a file of 17 at
    // random: their samples tagged anew at each, a change of phase).
    const size_t keep = nblocks >= detail::kMinBlocksForRuns ? runs.size() : 1;
    if (!slot && nruns < keep) {
      slot = NewCursorLocked(f, pid, now_s, /*second=*/true);
      // More slots may have been made: c and the runs may have moved.
      if (slot) {
        slot->seen_s = 0;  // not one of the reader's until set below (a free slot to find_runs)
        find_runs();
        slot->seen_s = now_s;
        sub = free_tag(tags_used() | 1u << c->sub);
      }
    }
    const uint16_t left = nruns > 0 ? latest_run()->left : 0;
    if (!slot && nruns > 0) {
      slot = runs[0];
      for (size_t i = 1; i < nruns; ++i)
        if (static_cast<int16_t>(runs[i]->left - slot->left) < 0) slot = runs[i];
      sub = slot->sub;
    }
    if (slot) {
      flush_pend(*c);
      *slot = *c;
      slot->second = true;
      slot->left = static_cast<uint16_t>(left + 1);
      // A single read left behind passes its tag on: a reader jumping at
      // random keeps one, as before runs were kept (a tag per run made its
      // samples look like several readers', and a scanner's steps beside
      // four such readers of a 24-unit hot set outweighed theirs: labelled
      // sequential at times). Its run gets a tag of its own if resumed.
      if (c->steps > 0) c->sub = sub;
      c->steps = 0;
    }
  }
  if (!c) c = NewCursorLocked(f, pid, now_s);
  if (!c) {
    // Every slot is a live reader's (more than kMaxFileCursors readers of
    // one file). This reader is not tracked: its read
    // continues if it is near any reader's (no samples: the tracked readers'
    // label the file), else it is a new visit with its block's sample.
    // (Taking a live reader's slot instead makes every read of readers in
    // turn a new visit: the file labelled skewed, a file sample per read.)
    bool near_any = false;
    f->ForEachCursor([&](const detail::PidCursor& cu) { near_any = near_any || near_end(cu); });
    if (!near_any && nblocks > 0)
      PushSampleLocked(f, static_cast<uint32_t>(std::min(off / cfg_.unit_bytes, nblocks - 1)), pid, t);
    return !near_any;
  }
  c->seen_s = now_s;
  const uint32_t spid = run_pid(*c);
  if (nblocks > 0 && near && !cont && end == c->last_off && len < cfg_.unit_bytes) {
    // A piece that ends where this reader's last read began: its readahead
    // window going down. The kernel sends an mmap's readahead window last
    // page first (4 MiB as 1 MiB at its top, then 3.1, 2.6, ... 1.0 MiB):
    // each piece sampled as a jump made a front-to-back mmap scan skewed (a
    // black-box test: 3.5x lru's time with a cache half the file). No
    // sample; once the window is read down to the gap its top left, the
    // window's blocks are sampled in order (below). (Any piece behind the
    // furthest read, as first written, took most reads of a random reader
    // of a small file once it had read near its end: skewed.)
    if (c->pend && off / cfg_.unit_bytes <= c->pend_from) {
      for (uint64_t b = c->pend_from; b <= c->last_block && b < uint64_t{c->pend_from} + kMaxBlocksPerRead; ++b)
        PushSampleLocked(f, static_cast<uint32_t>(b), spid, t);
      c->pend = 0;
    }
  } else if (nblocks > 0) {
    // A deferred window top whose window was not read down: its jump sample.
    if (c->pend) {
      PushSampleLocked(f, c->pend - 1, spid, t);
      c->pend = 0;
    }
    uint64_t b0 = std::min(off / cfg_.unit_bytes, nblocks - 1);
    const uint64_t b1 = std::min((std::max(end, off + 1) - 1) / cfg_.unit_bytes, nblocks - 1);
    // The top of a readahead window read ahead of the reader, leaving a gap
    // (an mmap's: near, forward, not where the last read ended, not on a
    // unit boundary, at least 128 KiB): its sample waits for the pieces
    // going down. The window read whole is its blocks in order, a scan;
    // sampled at once, 0, 3, 7, 11, ... were jumps (labelled random).
    if (near && !cont && off > c->end && off % cfg_.unit_bytes != 0 && len >= (128u << 10) &&
        c->last_block != UINT64_MAX && b0 > c->last_block + 1 && b0 - c->last_block <= kMaxBlocksPerRead) {
      c->pend = static_cast<uint32_t>(b0) + 1;
      c->pend_from = static_cast<uint32_t>(c->last_block + 1);
      c->last_block = b1;
      c->end = std::max(c->end, end);
      c->last_off = off;
      c->last_ms = now_ms;
      c->steps = static_cast<uint8_t>(std::min(c->steps + 1, 255));
      return false;
    }
    // A piece of a read split around cached pages (piece above), or one
    // going on from the reader's block into the next, not where its last
    // piece ended (the read's second unit; one read in one piece samples
    // its first unit only): no sample.
    const bool hole = !cont && (piece(*c) || (near && in_burst(*c) && off > c->last_off && b0 == c->last_block &&
                                              b1 == c->last_block + 1));
    if (hole) b0 = b1 + 1;
    else if (cont && b0 == c->last_block) ++b0;
    // A read that is no continuation but stays in the reader's block, on
    // bytes it has not just read (its own requests out of order, a strided
    // read forward): no sample, the block sampled already (a self-step,
    // never "next": 10% of 128 KiB requests swapped made a scan unknown). A
    // read again of what it read is a repeat, sampled.
    else if (near && !cont && b0 == c->last_block && b1 == c->last_block && (end <= c->last_off || off >= c->end))
      b0 = b1 + 1;
    // A jump is one event: its first block only. Otherwise a reader jumping
    // with multi-block reads (mmap faults read ~1 MiB around each fault)
    // would look half sequential; the blocks a continuing read adds are
    // each evidence of a scan.
    const uint64_t upto = cont ? b1 : b0;
    for (uint64_t b = b0; b <= upto && b <= b1 && b < b0 + kMaxBlocksPerRead; ++b)
      PushSampleLocked(f, static_cast<uint32_t>(b), spid, t);
    c->last_block = hole ? std::max(c->last_block, b1) : b1;
  }
  // A burst begins with a read more than kPieceMs after the reader's last.
  if (static_cast<uint16_t>(now_ms - c->last_ms) > detail::kPieceMs) c->burst_jump = !cont;
  c->end = near ? std::max(c->end, end) : end;
  c->last_off = off;
  c->last_ms = now_ms;
  c->steps = near ? static_cast<uint8_t>(std::min(c->steps + 1, 255)) : 0;
  return !near;
}

detail::PidCursor* AccessStreamTree::NewCursorLocked(Node* f, uint32_t pid, uint32_t now_s, bool second) {
  // A free slot first. For a new reader, else the reader idle longest (if
  // idle kCursorIdleS: taking the first idle one while a slot was free made
  // a reader that paused a new visit on its return), else more slots, else
  // another reader's second position (a new reader before a run left
  // behind; taken before more slots, a lockstep reader beside a process per
  // lookup lost its second at each lookup: a review). For a kept run, else
  // an idle slot, else more slots (more slots before idle ones, a file's
  // slots grew to 256 with each epoch's new DataLoader workers: a review).
  // (Kept runs were capped at 16 slots in all: 32 readers each reading two
  // regions of one file in lockstep had none, the file labelled skewed;
  // `igtcache sim` with a 64 MiB cache fetched 55,364 MiB, now 13,610,
  // lru-readahead 27,160.)
  detail::PidCursor* free_slot = nullptr;
  detail::PidCursor* idlest = nullptr;
  detail::PidCursor* other_second = nullptr;
  uint32_t most_idle = 0;
  f->ForEachCursor([&](detail::PidCursor& cu) {
    if (free_slot) return;
    if (!cu.seen_s) {
      free_slot = &cu;
      return;
    }
    if (cu.pid == pid) return;  // the reader's own position (a second's caller)
    if (cu.second && !other_second) other_second = &cu;
    // Signed: reads of concurrent threads reach here out of order, and a
    // live reader's second may be just after now_s (wraps safely too).
    const int32_t idle = static_cast<int32_t>(now_s - cu.seen_s);
    if (idle > static_cast<int32_t>(detail::kCursorIdleS) && static_cast<uint32_t>(idle) > most_idle) {
      most_idle = static_cast<uint32_t>(idle);
      idlest = &cu;
    }
  });
  detail::PidCursor* c = free_slot;
  if (!c) c = idlest;
  // (Growing moves the extra slots: idlest and other_second are used below
  // only when nothing grew.)
  const size_t have = f->more_cursors ? f->more_cursors->size() : 0;
  constexpr size_t limit = detail::kMaxFileCursors;
  if (!c && detail::kCursors + have < limit && !f->retired.load(std::memory_order_relaxed)) {
    const size_t grow = std::min(have == 0 ? detail::kCursors : have, limit - detail::kCursors - have);
    const uint64_t need = grow * sizeof(detail::PidCursor) +
                          (have == 0 ? sizeof(std::vector<detail::PidCursor>) + 2 * kAllocOverhead : 0);
    if (TryReserve(need)) {  // no pruning here: f->mu is held
      if (!f->more_cursors) f->more_cursors = std::make_unique<std::vector<detail::PidCursor>>();
      f->more_cursors->reserve(have + grow);
      f->more_cursors->resize(have + grow);
      f->bytes.fetch_add(need, std::memory_order_relaxed);
      c = &(*f->more_cursors)[have];
    }
  }
  if (second) {
    if (c) {
      *c = detail::PidCursor{pid, now_s, 0, UINT64_MAX};
      c->second = true;
    }
    return c;
  }
  if (!c) c = other_second;
  if (!c) {
    // Every slot is a live reader's; without the extra slots (the memory
    // cap) the inline ones are taken in turn, as they always were.
    if (f->more_cursors) return nullptr;
    c = &f->cursors[f->cursor_victim % detail::kCursors];
    f->cursor_victim = static_cast<uint8_t>((f->cursor_victim + 1) % detail::kCursors);
  }
  *c = detail::PidCursor{pid, now_s, 0, UINT64_MAX};
  return c;
}

void AccessStreamTree::PushSample(Node* n, uint32_t child, uint32_t pid, uint64_t t, bool same_again) {
  std::lock_guard lk(n->mu);
  // A reader's next file in the same subdirectory is no new step of the
  // directory above: a listing-order scan of class directories gave their
  // parent c000 100 times, then c001 100 times, steps never "next" and a
  // pile-up on a few children, and the dataset's root was labelled skewed
  // (sim of 3 scans of 20 class directories, 100 MiB cache: 2,001 MiB
  // fetched, the same files in one flat directory 372; a review of the
  // detection layer). The sample is counted (samples_seen), not kept.
  // This reader's latest sample, among the node's newest kSameAgainLook
  // (readers scanning side by side interleave theirs).
  if (same_again && n->stream && n->stream->count > 0) {
    const StreamState& s = *n->stream;
    const size_t look = std::min<size_t>(s.count, kSameAgainLook);
    for (size_t i = 1; i <= look; ++i) {
      const RingEntry& e = s.ring[(s.next + s.ring.size() - i) % s.ring.size()];
      if (e.pid != pid) continue;
      if (e.child == child) {
        n->samples_seen.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      break;
    }
  }
  PushSampleLocked(n, child, pid, t);
}

void AccessStreamTree::PushSampleLocked(Node* n, uint32_t child, uint32_t pid, uint64_t t) {
  n->samples_seen.fetch_add(1, std::memory_order_relaxed);
  // Heat: +1 per sample, halved every half-life (integer shifts, lazily).
  const uint64_t half_us = cfg_.heat_half_life_ms * 1000;
  if (t > n->heat_time_us + half_us) {
    uint64_t periods = (t - n->heat_time_us) / half_us;
    n->heat = periods >= 32 ? 0 : n->heat >> periods;
    n->heat_time_us += periods * half_us;
  }
  if (n->heat < UINT32_MAX) ++n->heat;

  if (!n->stream) {
    if (n->retired.load(std::memory_order_relaxed)) return;
    const uint64_t need = sizeof(StreamState) + kAllocOverhead;
    if (!TryReserve(need)) {
      want_prune_.store(true, std::memory_order_relaxed);
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    n->stream = std::make_unique<StreamState>();
    n->bytes.fetch_add(need, std::memory_order_relaxed);
    stream_nodes_.fetch_add(1, std::memory_order_relaxed);
  }
  StreamState& s = *n->stream;
  if (s.count == s.ring.size() && s.ring.size() < cfg_.window && !n->retired.load(std::memory_order_relaxed)) {
    const size_t old_sz = s.ring.size();
    const size_t new_sz = std::min<size_t>(cfg_.window, std::max<size_t>(kInitialRing, old_sz * 2));
    const uint64_t grow = (new_sz - old_sz) * sizeof(RingEntry) + (old_sz == 0 ? kAllocOverhead : 0);
    // No pruning here: a node lock is held (see the lock order).
    if (TryReserve(grow)) {
      std::vector<RingEntry> bigger(new_sz);
      for (size_t i = 0; i < s.count; ++i) bigger[i] = s.oldest(i);
      s.ring.swap(bigger);
      s.next = s.count;
      n->bytes.fetch_add(grow, std::memory_order_relaxed);
    } else {
      want_prune_.store(true, std::memory_order_relaxed);
    }
  }
  if (s.ring.empty()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  s.ring[s.next] = RingEntry{t, child, pid};
  s.next = static_cast<uint32_t>((s.next + 1) % s.ring.size());
  if (s.count < s.ring.size()) ++s.count;
  ++s.samples;
  ++s.since_test;
  s.last_sample_us = t;
  if (s.samples >= cfg_.min_samples && s.since_test >= cfg_.retest_every_samples) RunTestLocked(n, t);
  if (s.since_test > 0 && s.samples >= cfg_.min_samples && !s.queued && cfg_.retest_period_ms > 0) {
    std::lock_guard plk(pending_mu_);
    pending_.insert(n);
    s.queued = true;  // Maintain tests it once retest_period_ms has passed
  }
}

// ------------------------------------------------------------ detection

void AccessStreamTree::RunTestLocked(Node* n, uint64_t now_us) {
  StreamState& s = *n->stream;
  std::vector<uint32_t> children, pids;  // not thread_local: see detector.h
  const size_t sz = s.count;
  children.resize(sz);
  pids.resize(sz);
  for (size_t i = 0; i < sz; ++i) {
    const RingEntry& e = s.oldest(i);
    children[i] = e.child;
    pids[i] = e.pid;
  }
  DetectInput in;
  // The Zipf exponent of a skewed result is fitted here, once per test (~25
  // bisection steps over harmonic sums: tens of microseconds), not by every
  // Find on the read path.
  in.fit_zipf = true;
  std::shared_lock<std::shared_mutex> dir_lk;
  if (n->dir) {
    dir_lk = std::shared_lock(n->dir->mu);
    in.n_children = std::max<uint64_t>(n->dir->listed.load(std::memory_order_relaxed), n->dir->map.size());
    in.successor = SuccessorFn{n->dir.get(), &DirSucc};
    in.subset_uniform = true;
  } else {
    in.n_children = n->file_size / cfg_.unit_bytes + (n->file_size % cfg_.unit_bytes != 0);
    in.successor = IndexSuccessor();
    in.blocks = true;
    in.first_window = s.samples <= cfg_.window;
  }
  // Change point: the newest kRecentSamples alone say "scan" where the
  // stream is labelled random or skewed, or the reverse (a weights file
  // scanned, then faulted at random), or they carry a clear label where the
  // whole window turned unknown (half one phase, half the next). The older
  // samples describe a phase that is over: they are dropped, and the newest
  // ones' test is the first vote for the new label (hysteresis as usual).
  DetectResult r;
  bool changed = false;
  // One cut per phase: until kRecentSamples new samples came in after a
  // cut, the older part of the window is the new phase's own.
  // At least min_samples of them: Detect says unknown below that, and a
  // larger min_samples turned the check off.
  const size_t recent = std::max<size_t>(detail::kRecentSamples, cfg_.min_samples);
  // A scan is not cut off by newest samples of too many readers to show
  // their steps (each reader's first sample in them has none): 96 threads
  // each reading its own slice of a file were "random" in every 64 newest
  // samples, and the scan was relabelled random (a black-box test: 5.4x
  // lru's bytes). Cuts to a scan, or between other labels, are as before.
  auto few_readers = [&] {
    std::vector<uint32_t> p;
    p.assign(pids.end() - static_cast<std::ptrdiff_t>(recent), pids.end());
    std::sort(p.begin(), p.end());
    return static_cast<size_t>(std::unique(p.begin(), p.end()) - p.begin()) <= recent / 4;
  };
  if (s.ever_labelled && sz > recent && s.samples >= s.cut_samples + recent) {
    in.children = std::span<const uint32_t>(children).last(recent);
    in.pids = std::span<const uint32_t>(pids).last(recent);
    r = Detect(in, cfg_);
    changed = r.label != Label::kUnknown &&
              (s.label == Label::kUnknown || (r.label == Label::kSequential) != (s.label == Label::kSequential));
    if (changed && s.label == Label::kSequential && !few_readers()) changed = false;
  }
  // No cut to a scan, and no vote for one, while the whole window shows
  // short runs (Detect; DetectResult::short_runs_seen): rows of a few blocks
  // read at random, with few jumps in a window of a few dozen samples (the
  // newest ones, a window cut short, a stream's first), look like a scan
  // now and then by chance, and each such cut began two votes for
  // "sequential" (8 MiB rows read at random by two readers: 60 rows in
  // 1,400 read under that label). A cut is held only while the newest
  // samples themselves come in runs of a few blocks (runs_short): a scan
  // that follows the rows has one long run, and was held until the rows
  // were under 4 in 7 of the window (128 scan reads in the test "rows read at
  // random, then a scan"; 64 now, as after random faults; a review). The window's
  // own result then votes as usual (random, skewed), and a held vote for
  // "sequential" ends the votes for it pending (a review: they were kept).
  bool hold = false, whole_tested = false;
  if (changed && r.label == Label::kSequential && r.runs_short) {
    in.children = children;
    in.pids = pids;
    DetectResult whole = Detect(in, cfg_);
    if (whole.short_runs_seen) {
      changed = false;
      whole_tested = true;
      r = whole;
      hold = r.label == Label::kSequential;
    }
  }
  if (changed) {
    s.count = recent;
    s.cut_samples = s.samples;
    change_points_.fetch_add(1, std::memory_order_relaxed);
  } else if (!whole_tested) {
    in.children = children;
    in.pids = pids;
    r = Detect(in, cfg_);
    hold = r.label == Label::kSequential && s.label != Label::kSequential && r.short_runs_seen;
  }
  if (dir_lk.owns_lock()) dir_lk.unlock();
  s.since_test = 0;
  s.last_test_us = now_us;
  if (hold) {
    s.pending = s.label;
    s.pending_votes = 0;
    return;
  }
  // Hysteresis (see StreamConfig::hysteresis_tests).
  if (r.label == s.label) {
    s.shown = r;
    s.pending = s.label;  // the next vote for another label starts afresh
    s.pending_votes = 0;
  } else if (!s.ever_labelled) {
    s.shown = r;
    if (r.label != Label::kUnknown) {
      s.label = r.label;
      s.ever_labelled = true;
    }
  } else {
    // Between the labels that significance tests tell apart (random,
    // skewed, unknown), a vote counts only once half the window is new since
    // the last one: tests every retest_every_samples share most of their
    // window, so "consecutive" tests were nearly one test, and a chance
    // result (probability alpha per test) held for two of them. A uniformly
    // read directory of 1,000 children flipped between random and skewed
    // every few seconds, and each flip handed its cached units to a new
    // module. A change to or from sequential (a ratio of next steps over a
    // threshold, and the change-point check) keeps counting every test.
    const bool spaced = s.label != Label::kSequential && r.label != Label::kSequential;
    if (r.label == s.pending) {
      if (!spaced || s.samples >= s.vote_samples + std::max<uint64_t>(1, s.count / 2)) {
        ++s.pending_votes;
        s.vote_samples = s.samples;
      }
    } else {
      s.pending = r.label;
      s.pending_votes = 1;
      s.vote_samples = s.samples;
    }
    if (s.pending_votes >= cfg_.hysteresis_tests) {
      s.label = r.label;
      s.shown = r;
      s.pending_votes = 0;
    }
  }
}

size_t AccessStreamTree::RetestAll(bool only_pending) {
  EpochGuard g(*this);
  size_t tests = 0;
  ForEachNode([&](Node* n) {
    std::lock_guard lk(n->mu);
    if (!n->stream || n->stream->samples < cfg_.min_samples) return;
    if (only_pending && n->stream->since_test == 0) return;
    RunTestLocked(n, n->stream->last_sample_us);
    ++tests;
  });
  return tests;
}

bool AccessStreamTree::Retest(std::string_view node_path) {
  EpochGuard g(*this);
  Node* n = Lookup(node_path, false, 0);
  if (!n) return false;
  std::lock_guard lk(n->mu);
  if (!n->stream || n->stream->samples < cfg_.min_samples) return false;
  RunTestLocked(n, n->stream->last_sample_us);
  return true;
}

void AccessStreamTree::Maintain(uint64_t now_us) {
  std::lock_guard plk(prune_mu_);  // nothing is unlinked or freed meanwhile
  const uint64_t idle_us = cfg_.idle_prune_ms * 1000;
  if (idle_us > 0 && now_us > idle_us && now_us >= last_idle_prune_us_ + std::max<uint64_t>(1'000'000, idle_us / 16)) {
    last_idle_prune_us_ = now_us;
    PruneLocked(now_us - idle_us, 0);
  }
  if (cfg_.retest_period_ms > 0) {
    std::unordered_set<Node*> queued;
    {
      std::lock_guard lk(pending_mu_);
      queued.swap(pending_);
    }
    const uint64_t period = uint64_t{cfg_.retest_period_ms} * 1000;
    for (Node* n : queued) {  // each test is the node's own: the order does not matter
      std::lock_guard lk(n->mu);
      StreamState& s = *n->stream;
      // A labelled stream still being read is tested by its own samples
      // (every retest_every_samples): it is due here once it went quiet (no
      // sample for a period) or its last test is kActiveRetestPeriods
      // periods old. Re-testing every such stream each period cost ~24 ms a
      // second with ~900 class directories read (bench_detection.sh).
      const bool quiet = now_us >= s.last_sample_us + period;
      const uint64_t wait = quiet || !s.ever_labelled ? period : detail::kActiveRetestPeriods * period;
      if (!n->retired.load() && s.since_test > 0 && now_us < s.last_test_us + wait) {
        try {
          std::lock_guard plk2(pending_mu_);
          pending_.insert(n);  // not due yet
          continue;
        } catch (const std::exception&) {  // cannot keep it queued: test it now
        }
      }
      s.queued = false;  // its next sample queues it again, should the test fail
      try {
        if (!n->retired.load() && s.since_test > 0) RunTestLocked(n, now_us);
      } catch (const std::exception&) {
        // Out of memory, a math library's domain error: the other queued
        // streams still get theirs.
      }
    }
  }
  // Nodes retired in epoch e are freed when the epoch reaches e + 3.
  for (int i = 0; i < 3; ++i) TryReclaimLocked();
}

size_t AccessStreamTree::Forget(const std::vector<std::string>& paths) {
  std::lock_guard plk(prune_mu_);  // nothing else is unlinked or freed meanwhile
  size_t pruned = 0;
  std::vector<Node*> nodes;  // pre-order: each below its parent
  for (const std::string& p : paths) {
    if (p.empty() || p == "/") continue;  // never the root
    nodes.clear();
    {
      EpochGuard g(*this);
      Node* n = Lookup(p, false, 0);
      if (!n || n == root_ || n->is_dir != (p.back() == '/')) continue;
      std::vector<Node*> stack{n};
      while (!stack.empty()) {
        Node* c = stack.back();
        stack.pop_back();
        nodes.push_back(c);
        if (!c->dir) continue;
        std::shared_lock lk(c->dir->mu);
        for (auto& kv : c->dir->map) stack.push_back(kv.second);
      }
    }
    // Children first: a directory is unlinked once empty.
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
      if (UnlinkLocked(*it)) ++pruned;
  }
  TryReclaimLocked();
  return pruned;
}

// ------------------------------------------------------------ queries

void AccessStreamTree::NoteListing(std::string_view dir_path, uint64_t n_children, uint64_t now_us) {
  EpochGuard g(*this);
  Node* cur = root_;
  size_t pos = 0;
  uint32_t depth = 0;
  while (pos < dir_path.size() && depth < kMaxDepth) {
    size_t slash = dir_path.find('/', pos);
    if (slash == pos) {
      ++pos;
      continue;
    }
    std::string key(dir_path.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos));
    key.push_back('/');
    Node* c = FindOrCreate(cur, key, true, std::max(now_us, cur->last_access_us.load(std::memory_order_relaxed)));
    if (!c || !c->dir) return;
    if (now_us > c->last_access_us.load(std::memory_order_relaxed))
      c->last_access_us.store(now_us, std::memory_order_relaxed);
    cur = c;
    ++depth;
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  cur->dir->listed.store(n_children, std::memory_order_relaxed);
}

Node* AccessStreamTree::Lookup(std::string_view p, bool, uint64_t) const {
  if (p == "/") p = "";
  Node* cur = root_;
  size_t pos = 0;
  while (pos < p.size()) {
    size_t slash = p.find('/', pos);
    if (slash == pos) {
      ++pos;
      continue;
    }
    const bool last = slash == std::string_view::npos;
    std::string_view key = last ? p.substr(pos) : p.substr(pos, slash - pos + 1);
    if (!cur->dir) return nullptr;
    {
      std::shared_lock lk(cur->dir->mu);
      auto it = cur->dir->index.find(key);
      if (it == cur->dir->index.end()) return nullptr;
      cur = it->second;
    }
    if (last) break;
    pos = slash + 1;
  }
  return cur;
}

StreamInfo AccessStreamTree::InfoLocked(const Node* n, std::string path) const {
  StreamInfo i;
  i.path = path.empty() ? "/" : std::move(path);
  i.granularity = n->is_dir ? "file" : "block";
  i.bytes = n->bytes.load(std::memory_order_relaxed);
  i.heat = n->heat;
  i.last_access_us = n->last_access_us.load(std::memory_order_relaxed);
  if (n->dir) {
    std::shared_lock lk(n->dir->mu);  // a node's own DirState under its mu: allowed
    i.n_children = std::max<uint64_t>(n->dir->listed.load(std::memory_order_relaxed),
                                      n->dir->slots.size() - n->dir->free_slots.size());
  } else {
    i.n_children = n->file_size > cfg_.unit_bytes ? (n->file_size + cfg_.unit_bytes - 1) / cfg_.unit_bytes : 0;
  }
  if (const StreamState* s = n->stream.get()) {
    i.label = s->label;
    i.samples = s->samples;
    i.last_test_us = s->last_test_us;
    i.statistic = s->shown.statistic;
    i.p_value = s->shown.p_value;
    i.zipf_s = s->label == Label::kSkewed ? s->shown.zipf_s : 0.0;
    i.test = s->shown.test;
    i.window_samples = s->count;
  }
  return i;
}

std::vector<StreamInfo> AccessStreamTree::Snapshot(bool all) const {
  EpochGuard g(*this);
  std::vector<StreamInfo> out;
  ForEachNodeWithPath([&](Node* n, const std::string& path) {
    std::lock_guard lk(n->mu);
    if (!n->stream) return;
    if (!all && n->stream->samples < cfg_.min_samples) return;
    out.push_back(InfoLocked(n, path));
  });
  std::sort(out.begin(), out.end(), [](const StreamInfo& a, const StreamInfo& b) { return a.path < b.path; });
  return out;
}

std::optional<StreamInfo> AccessStreamTree::Find(std::string_view node_path) const {
  EpochGuard g(*this);
  Node* n = Lookup(node_path, false, 0);
  if (!n) return std::nullopt;
  std::string path(node_path == "/" ? "" : node_path);
  std::lock_guard lk(n->mu);
  return InfoLocked(n, std::move(path));
}

GoverningStreams AccessStreamTree::Governing(std::string_view file_path) const {
  EpochGuard g(*this);
  GoverningStreams gs;
  Node* cur = root_;
  std::string path;
  auto consider = [&](Node* n) {
    std::lock_guard lk(n->mu);
    const StreamState* s = n->stream.get();
    if (!s || s->label == Label::kUnknown || s->samples < cfg_.min_samples) return;
    StreamInfo i = InfoLocked(n, path);
    if (!gs.retention) gs.retention = i;
    gs.prefetch = std::move(i);
  };
  consider(cur);
  size_t pos = 0;
  while (pos < file_path.size()) {
    size_t slash = file_path.find('/', pos);
    if (slash == pos) {
      ++pos;
      continue;
    }
    const bool last = slash == std::string_view::npos;
    std::string_view key = last ? file_path.substr(pos) : file_path.substr(pos, slash - pos + 1);
    {
      std::shared_lock lk(cur->dir->mu);
      auto it = cur->dir->index.find(key);
      if (it == cur->dir->index.end()) break;
      cur = it->second;
    }
    path += key;
    consider(cur);
    if (last || !cur->dir) break;
    pos = slash + 1;
  }
  return gs;
}

TreeMemoryStats AccessStreamTree::Memory() const {
  TreeMemoryStats m;
  m.nodes = nodes_.load();
  m.stream_nodes = stream_nodes_.load();
  m.bytes = total_bytes_.load();
  m.retired_bytes = retired_bytes_.load();
  m.cap_bytes = cfg_.memory_cap_bytes;
  m.pruned_nodes = pruned_.load();
  m.dropped_records = dropped_.load();
  m.change_points = change_points_.load();
  m.bytes_per_node = m.nodes ? static_cast<double>(m.bytes - m.retired_bytes) / m.nodes : 0;
  return m;
}

nlohmann::json StreamsToJson(const std::vector<StreamInfo>& streams) {
  auto finite = [](double v) { return std::isfinite(v) ? v : 0.0; };
  nlohmann::json arr = nlohmann::json::array();
  for (const StreamInfo& s : streams) {
    nlohmann::json j;
    j["path"] = s.path;
    j["granularity"] = std::string(s.granularity);
    j["pattern"] = std::string(LabelName(s.label));
    j["samples"] = s.samples;
    j["statistic"] = finite(s.statistic);
    j["p_value"] = finite(s.p_value);
    if (s.label == Label::kSkewed) j["zipf_s"] = finite(s.zipf_s);
    arr.push_back(std::move(j));
  }
  return nlohmann::json{{"streams", std::move(arr)}};
}

}  // namespace igt::stream
