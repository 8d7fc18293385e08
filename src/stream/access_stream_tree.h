#pragma once
// AccessStreamTree (DESIGN.md sec. 5): the recent reads of one mount,
// organised by namespace level, each level labelled by the detectors.
//
// Nodes: root ("/") -> directories ("a/b/") -> files ("a/b/f.bin"). A node
// sees its subtree's accesses at its children's granularity: a directory
// records which child (file or subdirectory) each new visit goes to
// ("file" granularity); a file larger than one unit records which block
// ("block" granularity). Blocks are not nodes of their own: they are the
// file node's child indices. Files of at most one unit are leaves.
//
// Samples. A read that continues the same reader's previous read of the same
// file (offset == end of that pid's last read) is a continuation: it is not a
// new visit for any directory, and it is a new sample for the file only when
// it enters a new block. So a file read front to back in 128 KiB pieces is one
// sample for its directory and one sample per block for itself.
//
// Memory. Each node with a stream keeps a ring of the last `window` samples
// (child, time, pid; 16 bytes each, grown on demand), its label and last test.
// Every byte is accounted; creating a node or growing a ring beyond
// `memory_cap_bytes` first prunes the least recently used leaves down to 90%
// of the cap, and if that is impossible the access is dropped (counted). The
// cap bounds all node memory including pruned nodes not yet freed.
//
// Thread-safety. Every public method is safe from any number of threads.
// Record() takes no global lock: it takes each node's spin lock on its path
// in turn (never two at once) and a directory's shared lock for lookups;
// creating a node takes that directory's lock exclusively. Pruned nodes are
// freed by epoch-based reclamation, once no Record() that might still hold
// them is running. Lock order: prune_mu_ -> DirState::mu of a parent ->
// Node::mu of a child -> DirState::mu of that child. A thread holding a
// Node::mu may take only that same node's DirState::mu (shared).

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/stream/detector.h"
#include "src/stream/stream_config.h"

namespace igt::stream {

namespace detail {
struct Node;
struct PidCursor;
}

// One stream (a node with samples), as reported by classify and stats.
struct StreamInfo {
  std::string path;              // "/" root, "a/b/" directory, "a/b/f.bin" file
  std::string_view granularity;  // "file" (directory nodes) | "block" (file nodes)
  Label label = Label::kUnknown;
  uint64_t samples = 0;          // samples recorded since the node was created
  double statistic = 0;          // of the test behind the label (see TestKind)
  double p_value = 1;
  double zipf_s = 0;             // skewed only
  TestKind test = TestKind::kNone;
  uint64_t n_children = 0;       // N used by the tests (listing size / blocks)
  uint64_t window_samples = 0;   // samples in the ring
  uint64_t bytes = 0;            // accounted memory of this node
  uint64_t heat = 0;             // aged access counter
  uint64_t last_access_us = 0;
  uint64_t last_test_us = 0;     // when the stream was last tested (0: never)
};

// The two streams that govern a read (DESIGN.md sec. 5): the lowest
// confidently labelled node on its path (prefetch) and the highest
// (retention and space). Confident = label != unknown and >= min_samples.
struct GoverningStreams {
  std::optional<StreamInfo> prefetch;
  std::optional<StreamInfo> retention;
};

struct TreeMemoryStats {
  uint64_t nodes = 0;           // linked nodes, root included
  uint64_t stream_nodes = 0;    // nodes that have a sample ring
  uint64_t bytes = 0;           // accounted bytes, pruned-not-yet-freed included
  uint64_t retired_bytes = 0;   // pruned nodes waiting for readers to drain
  uint64_t cap_bytes = 0;
  uint64_t pruned_nodes = 0;    // since creation
  uint64_t dropped_records = 0; // accesses not fully recorded: cap reached
  uint64_t change_points = 0;   // since creation: windows cut to their newest samples (RunTestLocked)
  double bytes_per_node = 0;    // bytes / nodes
};

class AccessStreamTree {
 public:
  // `cfg` should have passed Validate(); out-of-range fields are clamped.
  explicit AccessStreamTree(StreamConfig cfg = {});
  ~AccessStreamTree();
  AccessStreamTree(const AccessStreamTree&) = delete;
  AccessStreamTree& operator=(const AccessStreamTree&) = delete;

  // One read as the FUSE layer sees it. `path` relative to the mount root
  // ('/'-separated, no leading '/'; at most kMaxDepth components are tracked).
  // O(depth); allocation-free once the nodes exist.
  void Record(uint64_t time_us, uint32_t pid, std::string_view path, uint64_t offset,
              uint64_t length, uint64_t file_size);

  // The directory `dir_path` ("" or "/" = root, "a/b" or "a/b/") has
  // `n_children` entries in its listing: N for the uniformity test. Without
  // it N is the number of children seen so far, which hides skew until most
  // children have been seen. Creates the directory node if needed.
  // `now_us`: the caller's clock; the directory counts as used then, so a
  // listing fetched before the first read of its directory (a mount's
  // start) is not pruned as idle at the next Maintain, its size with it.
  // 0: the parent's last use (trace replays, which note listings first).
  void NoteListing(std::string_view dir_path, uint64_t n_children, uint64_t now_us = 0);

  // Periodic upkeep (the mount's maintenance thread, e.g. every second):
  // re-tests streams with new samples whose last test is older than
  // retest_period_ms (8 periods for a labelled stream still being read: its
  // own samples test it every retest_every_samples), prunes nodes idle for idle_prune_ms (a walk over the
  // tree, at most every idle_prune_ms / 16), frees pruned nodes no reader
  // can hold. Its cost follows the streams read since their last test, not
  // the size of the tree.
  void Maintain(uint64_t now_us);
  // Objects the source no longer has (a relisting found them gone): the
  // nodes of these files, and of these directories ("a/b/") with all below
  // them, are pruned now rather than after idle_prune_ms. Returns the
  // number of nodes pruned.
  size_t Forget(const std::vector<std::string>& paths);

  // Re-tests every stream with >= min_samples (only those with samples since
  // their last test if `only_pending`). Returns the number of tests run.
  size_t RetestAll(bool only_pending);
  // Re-tests one stream now; false if there is none with >= min_samples.
  bool Retest(std::string_view node_path);

  // Every stream with >= min_samples (or every node with a ring if `all`),
  // sorted by path.
  std::vector<StreamInfo> Snapshot(bool all = false) const;
  // The stream at `node_path` ("/" root, "a/" directory, "a/f" file).
  std::optional<StreamInfo> Find(std::string_view node_path) const;
  GoverningStreams Governing(std::string_view file_path) const;

  TreeMemoryStats Memory() const;
  const StreamConfig& config() const { return cfg_; }

  // Deeper path components are folded into the deepest tracked directory.
  static constexpr uint32_t kMaxDepth = 64;

 private:
  class EpochGuard;
  using Node = detail::Node;

  Node* FindOrCreate(Node* parent, std::string_view key, bool is_dir, uint64_t now_us);
  Node* Lookup(std::string_view node_path, bool create, uint64_t now_us) const;
  // `other_part`: set when the read is a new visit by a reader whose latest
  // read of the file did not cover any of these bytes (Record).
  bool RecordInFile(Node* f, uint64_t t, uint32_t pid, uint64_t off, uint64_t len, uint64_t fsize,
                    bool* other_part);
  // A cursor for a reader new to file f (f->mu held): a free or idle slot,
  // more slots once those are all busy, else another reader's second
  // position; null when every one is a live reader's (without the extra
  // slots, the memory cap: an inline one in turn).
  // `second`: a slot for a run a reader jumped away from (never another
  // reader's); the caller sets it up.
  detail::PidCursor* NewCursorLocked(Node* f, uint32_t pid, uint32_t now_s, bool second = false);
  // `same_again`: no sample when the node's last one is this reader's on
  // this child (a child directory: the reader's next file in it).
  void PushSample(Node* n, uint32_t child, uint32_t pid, uint64_t t, bool same_again = false);
  void PushSampleLocked(Node* n, uint32_t child, uint32_t pid, uint64_t t);
  void RunTestLocked(Node* n, uint64_t now_us);
  StreamInfo InfoLocked(const Node* n, std::string path) const;

  // Accounts `bytes` against the cap. Reserve() may prune first and must be
  // called with no node or directory lock held; TryReserve() never prunes.
  bool Reserve(uint64_t bytes);
  bool TryReserve(uint64_t bytes);
  void Unreserve(uint64_t bytes);
  void EnforceCap(uint64_t need);
  // prune_mu_ held. Removes leaves idle since `older_than_us` (all leaves
  // if 0) in LRU order until accounted bytes <= target.
  size_t PruneLocked(uint64_t older_than_us, uint64_t target_bytes);
  bool UnlinkLocked(Node* n);
  void TryReclaimLocked();

  // Depth first, children in key order; the caller holds an EpochGuard.
  // ForEachNode builds no paths: the idle-prune walk visits every node, and
  // a path string per node was most of its cost.
  template <class Fn>
  void ForEachNode(Fn&& fn) const;  // fn(Node*)
  template <class Fn>
  void ForEachNodeWithPath(Fn&& fn) const;  // fn(Node*, const std::string& path)

  const StreamConfig cfg_;
  Node* root_;

  std::atomic<uint64_t> total_bytes_{0};
  std::atomic<uint64_t> retired_bytes_{0};
  std::atomic<uint64_t> nodes_{0};
  std::atomic<uint64_t> stream_nodes_{0};
  std::atomic<uint64_t> pruned_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> change_points_{0};
  std::atomic<bool> want_prune_{false};  // a locked path was refused memory

  // Epoch-based reclamation: a reader registers in the current epoch's
  // counter of its shard; the epoch advances from e only when nobody is left
  // in e-1, and nodes retired in e-2 are then freed.
  static constexpr size_t kEpochShards = 16;  // spreads reader counters over cache lines
  struct alignas(64) EpochShard {
    std::atomic<int64_t> active[3] = {0, 0, 0};
  };
  mutable std::array<EpochShard, kEpochShards> shards_;
  std::atomic<uint64_t> epoch_{0};

  // Streams with samples not tested yet (StreamState::queued), for Maintain:
  // its walk over every node each second took ~48 ms on 154,000 nodes
  // (scripts/bench_detection.sh).
  // Lock order: Node::mu, then pending_mu_. A node is taken out before it
  // is freed (TryReclaimLocked).
  std::mutex pending_mu_;
  std::unordered_set<detail::Node*> pending_;  // guarded by pending_mu_
  uint64_t last_idle_prune_us_ = 0;      // guarded by prune_mu_

  std::mutex prune_mu_;                 // guards retired_ and serialises pruning
  std::vector<Node*> retired_[3];       // by epoch % 3 (guarded by prune_mu_)
};

// {"streams": [{"path", "granularity", "pattern", "samples", "statistic",
// "p_value", "zipf_s" (skewed only)}, ...]}
nlohmann::json StreamsToJson(const std::vector<StreamInfo>& streams);

}  // namespace igt::stream
