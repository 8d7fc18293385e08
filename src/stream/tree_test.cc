// AccessStreamTree: granularity, continuations, JSON, governing streams,
// memory cap, pruning, hysteresis and concurrent recording.
#include <cmath>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "src/stream/access_stream_tree.h"
#include "src/stream/detector.h"

using namespace igt::stream;

namespace {
constexpr uint64_t kMiB = 1 << 20;

// Shard training in miniature: `shards` files of `blocks` MiB, shard order
// shuffled per epoch, dealt to `workers` pids, each shard read front to back
// in `read` byte pieces; the workers' reads interleave.
void ShardTraining(AccessStreamTree& tree, uint64_t& t, int shards, int blocks, int epochs, int workers,
                   uint64_t read, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int e = 0; e < epochs; ++e) {
    std::vector<int> order(shards);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t base = 0; base < order.size(); base += workers) {
      const uint64_t size = uint64_t(blocks) * kMiB;
      for (uint64_t off = 0; off < size; off += read) {
        for (int w = 0; w < workers && base + w < order.size(); ++w) {
          char path[64];
          std::snprintf(path, sizeof path, "shards/shard-%05d.tar", order[base + w]);
          tree.Record(t += 50, 500 + w, path, off, read, size);
        }
      }
    }
  }
}
}  // namespace

TEST_CASE("shard training: directory random at file level, shards sequential at block level", "[tree]") {
  AccessStreamTree tree;
  tree.NoteListing("shards", 24);
  uint64_t t = 0;
  ShardTraining(tree, t, 24, 40, 4, 2, 256 << 10, 1);
  tree.RetestAll(true);
  auto dir = tree.Find("shards/");
  REQUIRE(dir);
  CHECK(dir->granularity == "file");
  CHECK(dir->samples == 24 * 4);  // one visit per shard per epoch, 256 KiB reads are continuations
  CHECK(dir->label == Label::kRandom);
  int sequential = 0;
  for (const StreamInfo& s : tree.Snapshot()) {
    if (s.path.starts_with("shards/shard-")) {
      CHECK(s.granularity == "block");
      CHECK(s.samples == 40 * 4);  // one sample per block per epoch
      sequential += s.label == Label::kSequential;
    }
  }
  CHECK(sequential == 24);
  // The root sees only one child: nothing to test.
  auto root = tree.Find("/");
  REQUIRE(root);
  CHECK(root->label == Label::kUnknown);
}

TEST_CASE("a listing-order scan of a directory is sequential at file level", "[tree]") {
  AccessStreamTree tree;
  uint64_t t = 0;
  // Two preprocessing processes scan different halves, interleaved; files of
  // 3 MiB read in 1 MiB pieces.
  for (int i = 0; i < 200; ++i) {
    for (int p = 0; p < 2; ++p) {
      char path[64];
      std::snprintf(path, sizeof path, "raw/part%d/img_%06d.jpg", p, i);
      for (uint64_t off = 0; off < 3 * kMiB; off += kMiB) tree.Record(t += 10, 77 + p, path, off, kMiB, 3 * kMiB);
    }
  }
  tree.RetestAll(true);
  for (const char* d : {"raw/part0/", "raw/part1/"}) {
    auto s = tree.Find(d);
    REQUIRE(s);
    CHECK(s->samples == 200);
    CHECK(s->label == Label::kSequential);
    CHECK(s->test == TestKind::kBinomial);
    CHECK(s->statistic > 0.95);
    CHECK(s->p_value < 1e-6);
  }
  // 3-block files have 3 samples each: below min_samples, not reported.
  for (const StreamInfo& s : tree.Snapshot()) CHECK_FALSE(s.path.ends_with(".jpg"));
}

TEST_CASE("a scan by one process per file (a shell loop, find -exec) is sequential, random ones stay random",
          "[tree]") {
  AccessStreamTree tree;
  uint64_t t = 0;
  uint32_t pid = 1000;
  // `for f in scan/*; do cat "$f"; done`: a new pid per file, in listing
  // order; `for f in $(ls pick | shuf)`: the same, in a random order. Each
  // reader's one sample had no step before (both labelled random).
  std::vector<int> order(200);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (int i = 0; i < 200; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "scan/f%04d.bin", i);
    tree.Record(t += 10, pid++, path, 0, 4096, 4096);
    std::snprintf(path, sizeof path, "pick/f%04d.bin", order[i]);
    tree.Record(t += 10, pid++, path, 0, 4096, 4096);
  }
  tree.RetestAll(true);
  auto scan = tree.Find("scan/");
  REQUIRE(scan);
  CHECK(scan->label == Label::kSequential);
  auto pick = tree.Find("pick/");
  REQUIRE(pick);
  CHECK(pick->label == Label::kRandom);
}

TEST_CASE("a scan whose reads FUSE delivers out of order is still one visit per file", "[tree]") {
  AccessStreamTree tree;
  uint64_t t = 0;
  // 200 files of 1 MiB read in 128 KiB requests; in each file two pairs of
  // requests arrive swapped (FUSE's threads answer a reader's in-flight
  // readahead requests in any order).
  constexpr uint64_t kChunk = 128 << 10;
  for (int i = 0; i < 200; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "data/f_%06d.bin", i);
    std::vector<uint64_t> offs;
    for (uint64_t off = 0; off < kMiB; off += kChunk) offs.push_back(off);
    std::swap(offs[1], offs[2]);
    std::swap(offs[5], offs[6]);
    for (uint64_t off : offs) tree.Record(t += 10, 42, path, off, kChunk, kMiB);
  }
  tree.RetestAll(true);
  auto s = tree.Find("data/");
  REQUIRE(s);
  CHECK(s->samples == 200);  // a strict end == offset match made 600 visits
  CHECK(s->label == Label::kSequential);
}

TEST_CASE("a listing-order scan of class directories leaves their parent unskewed", "[tree]") {
  // 20 class directories of 100 files, read in listing order by one
  // process. Each file visit sampled its class directory in the parent:
  // c000 100 times, then c001: steps never "next", a pile-up on one child,
  // and the parent (the dataset's retention stream) was labelled skewed.
  AccessStreamTree tree;
  tree.NoteListing("train", 20);
  uint64_t t = 0;
  for (int c = 0; c < 20; ++c)
    for (int i = 0; i < 100; ++i) {
      char path[64];
      std::snprintf(path, sizeof path, "train/c%03d/img_%04d.jpg", c, i);
      tree.Record(t += 10, 5, path, 0, 100 << 10, 100 << 10);
    }
  tree.RetestAll(true);
  auto train = tree.Find("train/");
  REQUIRE(train);
  CHECK(train->samples == 20);  // one a class directory
  CHECK(train->label != Label::kSkewed);
  for (const char* d : {"train/c000/", "train/c019/"}) CHECK(tree.Find(d)->label == Label::kSequential);
  // Two processes scanning side by side (each its half of the classes):
  // their samples interleave, and each one's own latest counts.
  AccessStreamTree two;
  two.NoteListing("val", 20);
  for (int i = 0; i < 100 * 10; ++i)
    for (int p = 0; p < 2; ++p) {
      char path[64];
      std::snprintf(path, sizeof path, "val/c%03d/img_%04d.jpg", p * 10 + i / 100, i % 100);
      two.Record(t += 10, 6 + p, path, 0, 100 << 10, 100 << 10);
    }
  two.RetestAll(true);
  auto val = two.Find("val/");
  REQUIRE(val);
  CHECK(val->samples == 20);
  CHECK(val->label != Label::kSkewed);
}

TEST_CASE("a strided scan and reordered 128 KiB requests are sequential at block level", "[tree]") {
  AccessStreamTree tree;
  uint64_t t = 0;
  // 4 KiB every 64 KiB, front to back (a column of a columnar file): each
  // read a new visit with a sample of the block it was in (self-steps):
  // skewed.
  for (uint64_t off = 0; off < 64 * kMiB; off += 64 << 10) tree.Record(t += 10, 3, "cols/a.parquet", off, 4096, 64 * kMiB);
  // 128 KiB requests of a 64 MiB file, one pair in ten swapped (FUSE's
  // threads): the early one sampled the block its reader was in: unknown.
  constexpr uint64_t kChunk = 128 << 10;
  std::vector<uint64_t> offs;
  for (uint64_t off = 0; off < 64 * kMiB; off += kChunk) offs.push_back(off);
  for (size_t i = 1; i + 1 < offs.size(); i += 10) std::swap(offs[i], offs[i + 1]);
  for (uint64_t off : offs) tree.Record(t += 10, 4, "ckpt/model.bin", off, kChunk, 64 * kMiB);
  tree.RetestAll(true);
  for (const char* f : {"cols/a.parquet", "ckpt/model.bin"}) {
    auto s = tree.Find(f);
    REQUIRE(s);
    INFO(f);
    CHECK(s->samples == 64);  // a block each
    CHECK(s->label == Label::kSequential);
  }
  // Read again at random, a block read twice in a row is a repeat: sampled.
  for (int i = 0; i < 2; ++i) tree.Record(t += 10, 4, "ckpt/model.bin", 5 * kMiB, kMiB, 64 * kMiB);
  CHECK(tree.Find("ckpt/model.bin")->samples == 66);
}

TEST_CASE("files of 2 blocks read front to back every epoch are not random", "[tree]") {
  // Too few blocks for the sequential test: the even spread made them
  // random (sub-unit fetches, readahead cut).
  AccessStreamTree tree;
  uint64_t t = 0;
  for (int e = 0; e < 40; ++e)
    for (int f = 0; f < 4; ++f)
      for (uint64_t off = 0; off < 2 * kMiB; off += 128 << 10) {
        char path[32];
        std::snprintf(path, sizeof path, "sm/f%d.bin", f);
        tree.Record(t += 100, 9, path, off, 128 << 10, 2 * kMiB);
      }
  tree.RetestAll(true);
  auto s = tree.Find("sm/f0.bin");
  REQUIRE(s);
  CHECK(s->samples >= 40);
  CHECK(s->label == Label::kUnknown);
}

TEST_CASE("a few hot files of a large directory read at random are skewed, not a scan", "[tree]") {
  // 4 hot files of 10,000 listed, read at random: "next" steps are found
  // among the children read, ~5 in 12 of them by chance; against p0 =
  // gap / 10,000 that was a significant scan (mixed: unknown).
  AccessStreamTree tree;
  tree.NoteListing("inf", 10000);
  std::mt19937 rng(5);
  const int hot[] = {1200, 1201, 1202, 1203};
  uint64_t t = 0;
  for (int i = 0; i < 600; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "inf/item_%05d.bin", hot[rng() % 4]);
    tree.Record(t += 1000, 7, path, 0, 50000, 50000);
  }
  tree.RetestAll(true);
  auto s = tree.Find("inf/");
  REQUIRE(s);
  CHECK(s->label == Label::kSkewed);
}

TEST_CASE("many readers of one file a block apart: the file is sequential, each block a sample per reader", "[tree]") {
  // 8 and 48 readers (ranks of a job loading one checkpoint) read a 64 MiB
  // file in turn in 64 KiB reads, each 1 MiB behind the one before. The
  // tree remembered 4 readers per file: every read of the others was a new
  // visit and a sample of its block, 16 per block, and the file was
  // labelled skewed.
  // (With 64 slots, 96 and 128 readers did the same: a reviewer's trace.
  // Beyond 256 a reader is not tracked: only its reads near another's
  // continue; run here for its path, not asserted.)
  for (int readers : {8, 48, 96, 200, 300}) {
    AccessStreamTree tree;
    uint64_t t = 0;
    constexpr uint64_t kSize = 64 * kMiB, kRead = 64 << 10;
    std::vector<int64_t> pos(readers);
    for (int i = 0; i < readers; ++i) pos[i] = -int64_t(i) * int64_t(kMiB);
    for (bool more = true; more;) {
      more = false;
      for (int i = 0; i < readers; ++i) {
        if (pos[i] >= int64_t(kSize)) continue;
        more = true;
        if (pos[i] >= 0) tree.Record(t += 10, 100 + i, "ckpt/model.bin", pos[i], kRead, kSize);
        pos[i] += kRead;
      }
    }
    tree.RetestAll(true);
    auto s = tree.Find("ckpt/model.bin");
    REQUIRE(s);
    INFO(readers << " readers");
    if (readers > 256) continue;  // untracked readers 1 MiB apart: each read a new visit (not asserted)
    CHECK(s->samples == uint64_t(64 * readers));
    CHECK(s->label == Label::kSequential);
    auto dir = tree.Find("ckpt/");  // a new visit is a file sample here
    CHECK((!dir || dir->samples <= uint64_t(readers)));
  }
}

TEST_CASE("readers one after another (new DataLoader workers each epoch) do not collect cursors", "[tree][memory]") {
  // 1,000 files, each read once per epoch by a worker process made for that
  // epoch: 8 epochs, 8 pids per file, a minute apart. Idle readers' slots
  // are reused; extra slots are for readers at the same time only (without
  // the reuse each file would hold 60 more, ~1.5 KB: 1.5 MB here).
  AccessStreamTree tree;
  uint64_t after_first = 0;
  for (int epoch = 0; epoch < 8; ++epoch) {
    for (int i = 0; i < 1000; ++i) {
      char path[64];
      std::snprintf(path, sizeof path, "train/f_%04d.bin", (i * 7919) % 1000);
      tree.Record(uint64_t(epoch) * 60'000'000 + uint64_t(i) * 1000, 1000 + epoch * 10 + i % 4, path, 0, 100 << 10,
                  100 << 10);
    }
    if (epoch == 0) after_first = tree.Memory().bytes;
  }
  CHECK(tree.Memory().bytes < after_first + (100 << 10));
}

TEST_CASE("a reader that pauses keeps its place in a file while slots are free", "[tree]") {
  // 40 files of 4 MiB: reader 1 reads 2 MiB of each, pauses 15 s (a new
  // reader comes meanwhile), then reads on. The new reader took the first
  // idle slot, reader 1's, though three were free: reader 1's return was a
  // new visit of every file (120 file samples at the directory, not 80).
  AccessStreamTree tree;
  uint64_t t = 1'000'000;
  for (int i = 0; i < 40; ++i) {
    const std::string p = "d/f" + std::to_string(i) + ".bin";
    tree.Record(t += 1000, 1, p, 0, 1 << 20, 4 * kMiB);
    tree.Record(t += 1000, 1, p, 1 << 20, 1 << 20, 4 * kMiB);
  }
  t += 15'000'000;
  for (int i = 0; i < 40; ++i) tree.Record(t += 1000, 2, "d/f" + std::to_string(i) + ".bin", 0, 1 << 20, 4 * kMiB);
  for (int i = 0; i < 40; ++i) {
    const std::string p = "d/f" + std::to_string(i) + ".bin";
    tree.Record(t += 1000, 1, p, 2 << 20, 1 << 20, 4 * kMiB);
  }
  auto d = tree.Find("d/");
  REQUIRE(d);
  CHECK(d->samples == 80);
}

TEST_CASE("96 threads each reading its own slice of one file: sequential", "[tree]") {
  // A parallel checkpoint loader: thread i reads [i/96, (i+1)/96) of a
  // 2 GiB file front to back in 128 KiB reads, the threads in turn (FUSE
  // names each thread). The newest 64 samples hold one of each of 64
  // readers, no step of any: the change-point check called them random
  // and relabelled the file (a black-box test: 5.4x lru's bytes live).
  AccessStreamTree tree;
  constexpr uint64_t kSize = 2048 * kMiB, kRead = 128 << 10;
  constexpr int kThreads = 96;
  const uint64_t slice = kSize / kThreads;
  std::vector<uint64_t> pos(kThreads);
  for (int i = 0; i < kThreads; ++i) pos[i] = i * slice;
  uint64_t t = 0;
  for (bool more = true; more;) {
    more = false;
    for (int i = 0; i < kThreads; ++i) {
      if (pos[i] >= (i + 1) * slice) continue;
      more = true;
      tree.Record(t += 50, 1000 + i, "ckpt/model.bin", pos[i], std::min(kRead, (i + 1) * slice - pos[i]), kSize);
      pos[i] += kRead;
    }
  }
  tree.RetestAll(true);
  auto s = tree.Find("ckpt/model.bin");
  REQUIRE(s);
  CHECK(s->label == Label::kSequential);
}

TEST_CASE("96 threads' first reads of their own slices of one file: not random", "[tree]") {
  // Each thread's first block, in turn: every sample a reader's first, each
  // stepped to from another reader's. That shows where the readers start,
  // not how each goes on: labelled random, the file was fetched in
  // sub-units with no readahead until every thread had read its second
  // block. Unknown until readers step on their own; then sequential.
  AccessStreamTree tree;
  constexpr uint64_t kSize = 512 * kMiB, kRead = 128 << 10;
  constexpr int kThreads = 96;
  const uint64_t slice = kSize / kThreads;
  uint64_t t = 0;
  for (int i = 0; i < kThreads; ++i) tree.Record(t += 50, 1000 + i, "ckpt/model.bin", i * slice, kRead, kSize);
  tree.RetestAll(true);
  auto s = tree.Find("ckpt/model.bin");
  REQUIRE(s);
  CHECK(s->label == Label::kUnknown);
  // A third of them read on into their next block: their own steps say scan.
  for (int i = 0; i < kThreads / 3; ++i)
    tree.Record(t += 50, 1000 + i, "ckpt/model.bin", i * slice + kMiB, kRead, kSize);
  tree.RetestAll(true);
  s = tree.Find("ckpt/model.bin");
  REQUIRE(s);
  CHECK(s->label == Label::kSequential);
}

TEST_CASE("a thread pool reading a file in chunks, each thread the next one: sequential", "[tree]") {
  // 4 and 8 threads, 1 MiB chunks taken in turn (a parallel downloader, a
  // loader's thread pool), delivered slightly out of order. Each thread's
  // own steps are as long as the pool: labelled random, the file was
  // fetched in sub-units without readahead (a reviewer's trace). Random reads by as many
  // threads stay random (the merged order of random reads is no scan).
  for (int threads : {4, 8}) {
    AccessStreamTree tree;
    constexpr uint64_t kSize = 1024 * kMiB;
    std::mt19937 rng(threads);
    uint64_t t = 0;
    for (uint64_t c = 0; c < kSize / kMiB; c += threads) {
      std::vector<int> order(threads);
      std::iota(order.begin(), order.end(), 0);
      for (int k = 0; k + 1 < threads; ++k)  // neighbours' requests arrive swapped now and then
        if (rng() % 3 == 0) std::swap(order[k], order[k + 1]);
      for (int k : order) tree.Record(t += 200, 500 + k, "ckpt/model.bin", (c + k) * kMiB, kMiB, kSize);
    }
    for (int i = 0; i < 1024; ++i)
      tree.Record(t += 200, 700 + i % threads, "emb/table.bin", (rng() % kSize) & ~uint64_t{4095}, 4096, kSize);
    tree.RetestAll(true);
    auto s = tree.Find("ckpt/model.bin");
    REQUIRE(s);
    INFO(threads << " threads: " << s->statistic << " p " << s->p_value);
    CHECK(s->label == Label::kSequential);
    auto r = tree.Find("emb/table.bin");
    REQUIRE(r);
    CHECK(r->label == Label::kRandom);
  }
}

TEST_CASE("a thread pool reading a file in chunks of several blocks taken in turn: sequential", "[tree]") {
  // 4 and 8 threads, chunks of 4 and 8 MiB (a parallel downloader's parts,
  // `aws s3 cp`'s 8 MiB), each read in 1 MiB pieces as the kernel sends them,
  // the threads' pieces interleaved. Each thread's runs are a chunk long and
  // the merged order jumps back a pool's width at each round: short runs
  // (Detect), and files under ~1 GiB (no sweep test: the window spans too
  // much of the file) were labelled random, fetched in sub-units (a review
  // of the short-runs rule). Checked after every round once a window is in.
  for (uint64_t size_mib : {256, 512}) {
    for (int threads : {4, 8}) {
      for (uint64_t chunk : {4, 8}) {
        AccessStreamTree tree;
        const uint64_t size = size_mib * kMiB;
        std::mt19937 rng(static_cast<uint32_t>(threads * 100 + chunk));
        uint64_t t = 0, samples = 0;
        int wrong = 0;
        for (uint64_t c = 0; c < size_mib; c += threads * chunk) {
          for (uint64_t piece = 0; piece < chunk; ++piece) {
            std::vector<int> order(threads);
            std::iota(order.begin(), order.end(), 0);
            std::shuffle(order.begin(), order.end(), rng);
            for (int k : order) {
              const uint64_t b = c + k * chunk + piece;
              if (b < size_mib) tree.Record(t += 200, 500 + k, "dl/part.bin", b * kMiB, kMiB, size), ++samples;
            }
          }
          auto s = tree.Find("dl/part.bin");
          if (samples >= 256 && (!s || s->label != Label::kSequential)) ++wrong;
        }
        auto s = tree.Find("dl/part.bin");
        REQUIRE(s);
        INFO(size_mib << " MiB, " << threads << " threads, " << chunk << " MiB chunks: " << wrong
                      << " rounds not sequential, last " << LabelName(s->label));
        CHECK(wrong == 0);
        CHECK(s->label == Label::kSequential);
      }
    }
  }
}

TEST_CASE("a thread pool taking chunks of one block in turn is sequential: two passes", "[tree]") {
  // 4 and 8 threads (a DataLoader's workers) each taking the next 1 MiB
  // chunk of its own in turn (thread k reads chunks k, k + threads, ...),
  // each in 128 KiB pieces, each piece taking 100-300 us, so the threads
  // drift apart; a 512 MiB file read twice. Each thread steps by the pool's
  // size, never "next"; drifting apart, the merged order is not "next"
  // either, and the file is too small for the sweep test: it was labelled
  // random about half the time, each piece then fetched in sub-units with
  // no readahead (scripts/bench_rows.sh pool-4x1m-128k). Checked at every
  // 64th piece once a window is in.
  for (int threads : {4, 8}) {
    AccessStreamTree tree;
    constexpr uint64_t kSize = 512 * kMiB, kPiece = 128 << 10;
    std::mt19937 rng(static_cast<uint32_t>(threads));
    std::uniform_int_distribution<uint64_t> cost(100, 300);
    int wrong = 0, checks = 0;
    uint64_t samples = 0;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<uint64_t> clock(threads, 0), off(threads);
      for (int k = 0; k < threads; ++k) off[k] = k * kMiB;
      for (;;) {
        int k = -1;
        for (int j = 0; j < threads; ++j)
          if (off[j] < kSize && (k < 0 || clock[j] < clock[k])) k = j;
        if (k < 0) break;
        const uint64_t t = pass * 100'000'000 + clock[k];
        tree.Record(t, 700 + 10 * pass + k, "dl/train.bin", off[k], kPiece, kSize);
        clock[k] += cost(rng);
        off[k] += kPiece;
        if (off[k] % kMiB == 0) off[k] += (threads - 1) * kMiB;  // the thread's next chunk
        if (++samples >= 8 * 256 && samples % 64 == 0) {
          auto s = tree.Find("dl/train.bin");
          ++checks;
          if (!s || s->label != Label::kSequential) ++wrong;
        }
      }
    }
    INFO(threads << " threads: " << wrong << " of " << checks << " checks not sequential");
    CHECK(wrong * 20 <= checks);
  }
}

TEST_CASE("rows of a few blocks read at random are random or skewed and not a scan", "[tree]") {
  // 4 MiB rows of a 2 GiB file read in 1 MiB reads (as the kernel sends
  // them): 3 steps in 4 "next", which labelled the file sequential (readahead
  // past each row, evict-behind evicting rows read again: a tester's live
  // run). Rows chosen uniformly: random; by a Zipf law: skewed; in 8 MiB
  // rows by two readers: random. Checked at every retest, not only at the
  // end: a few rows among the newest samples look like a scan by chance.
  // A scan whose reads arrive out of order, and one taking a random jump now
  // and then, stay sequential.
  constexpr uint64_t kSize = 2048 * kMiB;
  auto rows = [&](uint64_t row_blocks, int readers, bool zipf, Label want, bool together = false) {
    AccessStreamTree tree;
    std::mt19937 rng(static_cast<uint32_t>(row_blocks * 10 + readers));
    const uint64_t n = kSize / kMiB / row_blocks;
    std::vector<double> w(n);
    for (uint64_t i = 0; i < n; ++i) w[i] = zipf ? 1.0 / double(i + 1) : 1.0;
    std::shuffle(w.begin(), w.end(), rng);  // the hot rows anywhere in the file
    std::discrete_distribution<uint64_t> pick(w.begin(), w.end());
    uint64_t t = 0;
    int wrong = 0;
    const int batch = together ? readers : 1;
    for (int i = 0; i < 1500; i += batch) {
      // Together: the readers' rows at once, piece by piece (as a replay or
      // a live mount interleaves them): each row a new tag of its reader, a
      // few jumps in the newest samples but a start every row (runs_short).
      // Else each row read whole by the readers in turn.
      std::vector<uint64_t> r(batch);
      for (auto& x : r) x = pick(rng);
      for (uint64_t b = 0; b < row_blocks; ++b)
        for (int k = 0; k < batch; ++k)
          tree.Record(t += 200, 600 + (together ? k : i % readers), "emb/rows.bin", (r[k] * row_blocks + b) * kMiB,
                      kMiB, kSize);
      auto s = tree.Find("emb/rows.bin");
      if (i >= 100 && s->label != want) ++wrong;
    }
    INFO(row_blocks << " blocks a row, " << readers << " readers, together " << together << ", zipf " << zipf << ": " << wrong
                    << " rows with another label");
    CHECK(wrong == 0);
  };
  rows(4, 1, false, Label::kRandom);
  rows(4, 1, true, Label::kSkewed);
  rows(8, 2, false, Label::kRandom);
  rows(8, 2, false, Label::kRandom, true);
  AccessStreamTree tree;
  std::mt19937 rng(3);
  uint64_t t = 0;
  std::vector<uint64_t> blocks(kSize / kMiB);
  std::iota(blocks.begin(), blocks.end(), 0);
  for (size_t i = 0; i + 1 < blocks.size(); ++i)
    if (rng() % 5 == 0) std::swap(blocks[i], blocks[i + 1]);
  for (uint64_t b : blocks) tree.Record(t += 200, 900, "ckpt/a.bin", b * kMiB, kMiB, kSize);
  for (uint64_t b = 0; b < kSize / kMiB; ++b)
    tree.Record(t += 200, 901, "ckpt/b.bin", (rng() % 20 == 0 ? rng() % (kSize / kMiB) : b) * kMiB, kMiB, kSize);
  CHECK(tree.Find("ckpt/a.bin")->label == Label::kSequential);
  CHECK(tree.Find("ckpt/b.bin")->label == Label::kSequential);
}

TEST_CASE("1 MiB reads at random split around cached pages, pieces out of order: not skewed", "[tree]") {
  // What a live mount sees when the page cache holds parts of a file: a
  // read reaches FUSE as the pieces not cached (4-400 KiB, holes between
  // them), sent at once and in any order (in a tester's trace of 1,500
  // reads, 2,329 requests). Each piece going back was a jump, its block
  // sampled again: uniform reads labelled skewed (3 live runs in 11). Two
  // reads in five split so, several seeds, checked at every read past the
  // first windows. (Every read split so is unknown: the pieces going on into
  // a read's second unit are "next" steps; a read in one piece samples its
  // first unit only.)
  constexpr uint64_t kSize = 2048 * kMiB;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    AccessStreamTree tree;
    std::mt19937_64 rng(seed);
    uint64_t t = 0;
    int skewed = 0;
    for (int i = 0; i < 1500; ++i) {
      const uint64_t off = (rng() % (kSize - kMiB)) & ~uint64_t{4095};
      std::vector<std::pair<uint64_t, uint64_t>> pieces;  // offset, length
      if (rng() % 5 < 2) {
        for (uint64_t p = off; p < off + kMiB;) {
          const uint64_t n = std::min<uint64_t>(off + kMiB - p, 4096 * (1 + rng() % (rng() % 4 == 0 ? 100 : 4)));
          if (rng() % 3 != 0) pieces.emplace_back(p, n);  // else cached: a hole
          p += n + 4096 * (rng() % 8);
        }
        for (size_t k = 0; k + 1 < pieces.size(); ++k)
          if (rng() % 3 == 0) std::swap(pieces[k], pieces[k + 1]);  // FUSE's threads, any order
      } else {
        pieces.emplace_back(off, kMiB);
      }
      for (const auto& [o, n] : pieces) tree.Record(t += 7, 4000, "obj2g", o, n, kSize);
      t += 50'000;
      if (i >= 600) skewed += tree.Find("obj2g")->label == Label::kSkewed;
    }
    INFO("seed " << seed << ": " << skewed << " reads after the 600th labelled skewed");
    CHECK(skewed == 0);
    CHECK(tree.Find("obj2g")->label == Label::kRandom);
  }
}

TEST_CASE("one reader reading two regions of a file in lockstep: sequential", "[tree]") {
  // An HDF5-like file read x[i] then y[i], i in order (150 KiB images, 8-byte
  // labels; two arrays of 64 KiB rows), two epochs: each read was a jump
  // from the other region, its block sampled again and again: skewed (a
  // review of the detection layer). The reader's second position (the run
  // it jumped from) now resumes. The regions' ends come within a read's
  // slack of each other near the end of x: the run the read starts exactly
  // at is taken. A reader jumping at random beside it stays random.
  // (Not yet: a y region smaller than a small read's slack, 32 KiB, is read
  // again in the second epoch as near-behind reads, each sampled: skewed.)
  for (auto [xs, ys, n] : {std::tuple<uint64_t, uint64_t, uint64_t>{153600, 8, 6400}, {65536, 65536, 4096}}) {
    AccessStreamTree tree;
    const uint64_t x0 = 4096, y0 = x0 + n * xs, size = y0 + n * ys;
    std::mt19937 rng(static_cast<uint32_t>(xs));
    uint64_t t = 0;
    for (int e = 0; e < 2; ++e)
      for (uint64_t i = 0; i < n; ++i) {
        tree.Record(t += 200, 900, "data/train.h5", x0 + i * xs, xs, size);
        tree.Record(t += 200, 900, "data/train.h5", y0 + i * ys, ys, size);
        if (i % 4 == 0) tree.Record(t += 200, 901, "data/emb.h5", (rng() % size) & ~uint64_t{4095}, 4096, size);
      }
    tree.RetestAll(true);
    auto s = tree.Find("data/train.h5");
    REQUIRE(s);
    INFO(xs << "/" << ys << ": " << LabelName(s->label) << " " << s->statistic << " p " << s->p_value
            << " samples " << s->samples);
    CHECK(s->label == Label::kSequential);
    auto r = tree.Find("data/emb.h5");
    REQUIRE(r);
    CHECK(r->label == Label::kRandom);
  }
}

TEST_CASE("one reader reading three or four regions of a file in lockstep: sequential", "[tree]") {
  // x[i], y[i], z[i] (and w[i]), rows of 64 KiB, two epochs: with one kept
  // run per reader, the run it came back to had been overwritten each time,
  // every read a jump: skewed (a review's trace: 2.6x lru-readahead's modeled
  // time). A random reader of another file stays random; so does one reader
  // jumping at random in a file of 64 MiB, its kept runs near a read by
  // chance only now and then.
  for (uint64_t k : {3, 4}) {
    AccessStreamTree tree;
    constexpr uint64_t kRow = 64 << 10, kRows = 1024, kX0 = 4096;
    const uint64_t size = kX0 + k * kRows * kRow;
    std::mt19937 rng(static_cast<uint32_t>(k));
    uint64_t t = 0;
    for (int e = 0; e < 2; ++e)
      for (uint64_t i = 0; i < kRows; ++i) {
        for (uint64_t r = 0; r < k; ++r) tree.Record(t += 200, 900, "data/train.h5", kX0 + (r * kRows + i) * kRow, kRow, size);
        tree.Record(t += 200, 901, "data/emb.h5", (rng() % size) & ~uint64_t{4095}, 4096, size);
        tree.Record(t += 200, 902, "data/rows.bin", (rng() % (64 * kMiB)) & ~uint64_t{4095}, 4096, 64 * kMiB);
      }
    tree.RetestAll(true);
    auto s = tree.Find("data/train.h5");
    REQUIRE(s);
    INFO(k << " regions: " << LabelName(s->label) << " " << s->statistic << " p " << s->p_value << " samples "
           << s->samples);
    CHECK(s->label == Label::kSequential);
    for (const char* path : {"data/emb.h5", "data/rows.bin"}) {
      auto r = tree.Find(path);
      REQUIRE(r);
      INFO(path << ": " << LabelName(r->label));
      CHECK(r->label == Label::kRandom);
    }
  }
}

TEST_CASE("random reads of a file by a pid per lookup: random past the first window", "[tree]") {
  // 1,000 pids in turn, each a 4 KiB read at random: none steps on its own
  // (one sample each per window). Unknown in the first window (the rule
  // for readers' first samples), then random.
  AccessStreamTree tree;
  constexpr uint64_t kSize = 1024 * kMiB;
  std::mt19937 rng(4);
  uint64_t t = 0;
  for (int i = 0; i < 4000; ++i)
    tree.Record(t += 50, 10000 + i % 1000, "emb/table.bin", (rng() % (kSize >> 12)) << 12, 4096, kSize);
  tree.RetestAll(true);
  auto s = tree.Find("emb/table.bin");
  REQUIRE(s);
  CHECK(s->label == Label::kRandom);
}

TEST_CASE("an mmap scan's readahead windows, last page first: one visit, sequential", "[tree]") {
  // The kernel sends each 4 MiB window of an mmap's readahead as 1 MiB at
  // its top, then ~0.5 MiB pieces downwards. Each piece was sampled as a
  // jump (the file labelled skewed), and the window's last piece, 4 MiB
  // behind its first, was a new visit of the file.
  // As recorded live: the first window 3.5 MiB after the fault's 1 MiB,
  // then windows of 4 MiB (their tops 3.5, 7.5, 11.5 MiB, ...).
  AccessStreamTree tree;
  constexpr uint64_t kSize = 512 * kMiB, kWin = 4 * kMiB;
  uint64_t t = 0;
  tree.Record(t += 100, 7, "m/big.bin", 0, kMiB, kSize);
  for (uint64_t w = kMiB; w + kWin <= kSize; w = (w == kMiB ? w + kWin - kMiB / 2 : w + kWin)) {
    const uint64_t top = (w == kMiB ? w + kWin - kMiB / 2 : w + kWin) - kMiB;
    tree.Record(t += 100, 7, "m/big.bin", top, kMiB, kSize);
    for (uint64_t p = top; p > w;) {
      const uint64_t len = std::min<uint64_t>(528384, p - w);
      p -= len;
      tree.Record(t += 100, 7, "m/big.bin", p, len, kSize);
    }
  }
  tree.RetestAll(true);
  auto f = tree.Find("m/big.bin");
  REQUIRE(f);
  CHECK(f->label == Label::kSequential);  // each window's blocks in order, once read down
  CHECK(f->samples >= 500);
  auto d = tree.Find("m/");
  CHECK((!d || d->samples <= 1));
}

TEST_CASE("random reads of 128 KiB in a small file stay random (readahead-sized reads)", "[tree]") {
  // One reader, uniform random 128 KiB reads in an 8 MiB file. A rule that
  // took any piece behind the reader's furthest read as its readahead out
  // of order (no sample) kept ~7% of the samples once the reader had read
  // near the end: block 0 and the last ones, labelled skewed (a review).
  AccessStreamTree tree;
  std::mt19937 rng(5);
  constexpr uint64_t kSize = 8 * kMiB, kRead = 128 << 10;
  uint64_t t = 0;
  for (int i = 0; i < 2000; ++i)
    tree.Record(t += 1000, 9, "r/small.bin", (rng() % (kSize / kRead)) * kRead, kRead, kSize);
  tree.RetestAll(true);
  auto f = tree.Find("r/small.bin");
  REQUIRE(f);
  CHECK(f->samples > 1500);
  CHECK(f->label == Label::kRandom);
}

TEST_CASE("JSON output has exactly the documented fields", "[tree]") {
  AccessStreamTree tree;
  tree.NoteListing("items/", 1000);
  std::mt19937 rng(3);
  std::vector<double> w(1000);
  for (int i = 0; i < 1000; ++i) w[i] = std::pow(i + 1.0, -1.0);
  std::discrete_distribution<int> zipf(w.begin(), w.end());
  uint64_t t = 0;
  for (int i = 0; i < 600; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "items/item%04d.bin", zipf(rng));
    tree.Record(t += 5, 9, path, 0, 4096, 4096);
  }
  tree.RetestAll(true);
  nlohmann::json j = StreamsToJson(tree.Snapshot());
  REQUIRE(j.contains("streams"));
  // "items/" only: the root has one sample (its reader stays in items/: a
  // reader's next file in the same subdirectory is no new step of the root).
  REQUIRE(j["streams"].size() == 1);
  auto root = tree.Find("/");
  REQUIRE(root.has_value());
  CHECK(root->samples == 1);
  CHECK(root->label == Label::kUnknown);
  const nlohmann::json all = StreamsToJson(tree.Snapshot(/*all=*/true));
  REQUIRE(all["streams"].size() == 2);
  CHECK(all["streams"][0]["path"] == "/");
  CHECK(all["streams"][0]["pattern"] == "unknown");
  CHECK_FALSE(all["streams"][0].contains("zipf_s"));
  const auto& s = j["streams"][0];
  CHECK(s["path"] == "items/");
  CHECK(s["granularity"] == "file");
  CHECK(s["pattern"] == "skewed");
  CHECK(s["samples"] == 600);
  CHECK(s["p_value"].get<double>() < 0.001);
  CHECK(s["zipf_s"].get<double>() == Approx(1.0).margin(0.25));
  std::set<std::string> keys;
  for (auto& [k, v] : s.items()) keys.insert(k);
  CHECK(keys == std::set<std::string>{"path", "granularity", "pattern", "samples", "statistic", "p_value", "zipf_s"});
}

TEST_CASE("governing streams: lowest confident for prefetch, highest for retention", "[tree]") {
  AccessStreamTree tree;
  tree.NoteListing("shards", 24);
  uint64_t t = 0;
  ShardTraining(tree, t, 24, 40, 4, 1, kMiB, 2);
  tree.RetestAll(true);
  GoverningStreams g = tree.Governing("shards/shard-00003.tar");
  REQUIRE(g.prefetch);
  REQUIRE(g.retention);
  CHECK(g.prefetch->path == "shards/shard-00003.tar");
  CHECK(g.prefetch->label == Label::kSequential);
  CHECK(g.retention->path == "shards/");
  CHECK(g.retention->label == Label::kRandom);
  GoverningStreams none = tree.Governing("elsewhere/x");
  CHECK_FALSE(none.prefetch);
  CHECK_FALSE(none.retention);
}

TEST_CASE("hysteresis: a label changes only after consecutive agreeing tests", "[tree]") {
  StreamConfig cfg;
  cfg.window = 64;
  cfg.min_samples = 32;
  cfg.retest_every_samples = 16;
  cfg.hysteresis_tests = 3;
  AccessStreamTree tree(cfg);
  const uint64_t size = 4096 * kMiB;
  uint64_t t = 0;
  for (uint64_t b = 0; b < 64; ++b) tree.Record(t += 10, 1, "big.bin", b * kMiB, kMiB, size);
  REQUIRE(tree.Find("big.bin")->label == Label::kSequential);
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint64_t> any(0, 4095);
  int tests_until_change = 0;
  for (int i = 0; i < 64 * 16 && tree.Find("big.bin")->label == Label::kSequential; ++i) {
    tree.Record(t += 10, 1, "big.bin", any(rng) * kMiB, 4096, size);
    if ((i + 1) % 16 == 0) ++tests_until_change;
  }
  CHECK(tree.Find("big.bin")->label == Label::kRandom);
  // The window needs a few tests to fill with random steps, then 3 votes.
  CHECK(tests_until_change >= 3);
}

TEST_CASE("hysteresis: a directory read uniformly over 1,000 children keeps its label", "[tree]") {
  // An image-folder data set (1,000 class directories) read in shuffled
  // epochs. Tests run every 16 samples over a 256-sample window: votes from
  // tests that share most of their window used to turn a chance result
  // into a label change (random <-> skewed every few seconds).
  StreamConfig cfg;
  AccessStreamTree tree(cfg);
  std::mt19937 rng(11);
  std::vector<int> order(50'000);
  std::iota(order.begin(), order.end(), 0);
  uint64_t t = 0;
  int changes = 0;
  bool labelled = false;
  Label last = Label::kUnknown;
  for (int epoch = 0; epoch < 2; ++epoch) {
    // Fisher-Yates with the engine's own draws (std::shuffle's differ
    // between standard libraries).
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
    for (int i : order) {
      char path[64];
      std::snprintf(path, sizeof path, "train/n%05d/img_%07d.jpg", i % 1000, i);
      tree.Record(t += 500, 7, path, 0, 110'000, 110'000);
      auto info = tree.Find("train/");
      if (info && info->label != last) {
        if (labelled) ++changes;
        labelled = true;
        last = info->label;
      }
    }
  }
  CHECK(last == Label::kRandom);
  // 46 changes before votes were spaced; spaced by half a window, a chance
  // result still passes now and then (two votes 128 samples apart share
  // half their window). Spacing by a whole window made Zipf streams miss
  // their label at 256 samples (accuracy_test).
  CHECK(changes <= 4);
}

TEST_CASE("hysteresis: a real change from random to skewed still comes within two windows", "[tree]") {
  StreamConfig cfg;
  AccessStreamTree tree(cfg);
  std::mt19937 rng(12);
  uint64_t t = 0;
  auto read = [&](int child) {
    char path[64];
    std::snprintf(path, sizeof path, "items/f%05d", child);
    tree.Record(t += 500, 3, path, 0, 4096, 4096);
  };
  tree.NoteListing("items/", 1000);
  for (int i = 0; i < 5000; ++i) read(int(rng() % 1000));
  REQUIRE(tree.Find("items/")->label == Label::kRandom);
  // Zipf(1.2) popularity over the same 1,000 files.
  std::vector<double> cdf(1000);
  double sum = 0;
  for (int i = 0; i < 1000; ++i) cdf[i] = sum += std::pow(i + 1.0, -1.2);
  int n = 0;
  while (tree.Find("items/")->label != Label::kSkewed && n < 4 * int(cfg.window)) {
    const double u = double(rng()) / double(rng.max()) * sum;
    read(int(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin()));
    ++n;
  }
  CHECK(tree.Find("items/")->label == Label::kSkewed);
  CHECK(n <= 2 * int(cfg.window));
}

TEST_CASE("Maintain tests a quiet stream once retest_period_ms has passed, not before", "[tree]") {
  StreamConfig cfg;
  cfg.retest_every_samples = 1000;  // no test from the samples themselves
  cfg.retest_period_ms = 1000;
  AccessStreamTree tree(cfg);
  for (int i = 0; i < 40; ++i) {
    char path[32];
    std::snprintf(path, sizeof path, "d/f%03d", i);
    tree.Record(1'000 + i, 1, path, 0, 4096, 4096);
  }
  REQUIRE(tree.Find("d/")->samples == 40);
  CHECK(tree.Find("d/")->label == Label::kUnknown);  // never tested
  tree.Maintain(500'000);  // queued, not due yet: kept for the next round
  CHECK(tree.Find("d/")->label == Label::kUnknown);
  tree.Maintain(1'500'000);
  CHECK(tree.Find("d/")->label == Label::kSequential);
  // Tested: nothing new since, so later rounds leave it alone.
  CHECK(tree.RetestAll(true) == 0);
  tree.Maintain(3'000'000);
  CHECK(tree.Find("d/")->label == Label::kSequential);
}

TEST_CASE("Maintain leaves a labelled stream still being read to its own samples, for 8 periods at most", "[tree]") {
  StreamConfig cfg;
  cfg.retest_every_samples = 1000;  // no test from the samples themselves
  cfg.retest_period_ms = 1000;
  AccessStreamTree tree(cfg);
  uint64_t t = 0;
  int i = 0;
  auto read = [&] {  // the next file of a scan, every 100 ms
    char path[32];
    std::snprintf(path, sizeof path, "d/f%04d", i++);
    t += 100'000;
    tree.Record(t, 1, path, 0, 4096, 4096);
  };
  while (i < 40) read();
  tree.Maintain(t);  // never labelled: due one period after its last test (never)
  REQUIRE(tree.Find("d/")->label == Label::kSequential);
  const uint64_t first = tree.Find("d/")->last_test_us;
  CHECK(first == t);
  // Read on: Maintain each 100 ms leaves it for 8 periods.
  while (t < first + 7'900'000) {
    read();
    tree.Maintain(t);
    REQUIRE(tree.Find("d/")->last_test_us == first);
  }
  read();
  read();
  tree.Maintain(t);  // 8 s since its last test
  CHECK(tree.Find("d/")->last_test_us == t);
  // Quiet: tested one period after its last sample.
  read();
  const uint64_t last_read = t;
  tree.Maintain(t + 900'000);
  CHECK(tree.Find("d/")->last_test_us < last_read);
  tree.Maintain(t + 1'000'000);
  CHECK(tree.Find("d/")->last_test_us == t + 1'000'000);
}

TEST_CASE("memory cap is enforced, idle nodes are pruned", "[tree][memory]") {
  StreamConfig cfg;
  cfg.memory_cap_bytes = 256 << 10;
  AccessStreamTree tree(cfg);
  uint64_t t = 0;
  uint64_t max_bytes = 0;
  for (int i = 0; i < 40000; ++i) {
    char path[96];
    std::snprintf(path, sizeof path, "d%02d/sub%03d/a-rather-long-file-name-%07d.bin", i % 7, i % 113, i);
    tree.Record(t += 10, 1 + i % 3, path, 0, 2 * kMiB, 64 * kMiB);
    max_bytes = std::max(max_bytes, tree.Memory().bytes);
  }
  TreeMemoryStats m = tree.Memory();
  CHECK(max_bytes <= cfg.memory_cap_bytes);
  CHECK(m.pruned_nodes > 0);
  CHECK(m.nodes > 100);  // still tracking plenty
  CHECK(m.bytes_per_node > 0);
  // A hot directory keeps working under the cap.
  for (int i = 0; i < 300; ++i) {
    char path[64];
    std::snprintf(path, sizeof path, "scan/f%05d", i);
    tree.Record(t += 10, 9, path, 0, 4096, 4096);
    max_bytes = std::max(max_bytes, tree.Memory().bytes);
  }
  tree.RetestAll(true);
  CHECK(max_bytes <= cfg.memory_cap_bytes);
  auto scan = tree.Find("scan/");
  REQUIRE(scan);
  CHECK(scan->label == Label::kSequential);

  // Idle pruning: everything but "scan/" was last read long before.
  StreamConfig icfg;
  icfg.idle_prune_ms = 2000;
  AccessStreamTree idle(icfg);
  idle.Record(1'000'000, 1, "old/a", 0, 1, 1);
  idle.Record(9'000'000, 1, "new/b", 0, 1, 1);
  uint64_t before = idle.Memory().bytes;
  idle.Maintain(9'500'000);  // "old/a" idle 8.5 s > 2 s: pruned, then "old/" next round
  idle.Maintain(9'600'000);  // the idle walk runs at most once a second: nothing pruned
  CHECK(idle.Find("old/"));
  idle.Maintain(10'500'000);  // "new/b" idle 1.5 s: kept
  CHECK_FALSE(idle.Find("old/a"));
  CHECK_FALSE(idle.Find("old/"));
  CHECK(idle.Find("new/b"));
  CHECK(idle.Memory().bytes < before);
  CHECK(idle.Memory().retired_bytes == 0);  // freed: no reader was running
}

TEST_CASE("8 threads recording concurrently: exact counts and labels", "[tree][concurrency]") {
  AccessStreamTree tree;
  constexpr int kThreads = 8, kBlocks = 512;
  std::atomic<uint64_t> clock{0};
  std::vector<std::thread> ts;
  for (int th = 0; th < kThreads; ++th) {
    ts.emplace_back([&, th] {
      char own[64];
      std::snprintf(own, sizeof own, "jobs/job%d/model.bin", th);
      for (int b = 0; b < kBlocks; ++b) {
        tree.Record(clock++, 100 + th, own, uint64_t(b) * kMiB, kMiB, kBlocks * kMiB);
        // Everyone also reads small files in one shared directory.
        char shared[64];
        std::snprintf(shared, sizeof shared, "shared/f%05d", (b * 37 + th * 1001) % 2000);
        tree.Record(clock++, 100 + th, shared, 0, 100, 100);
      }
    });
  }
  // A reader thread snapshots and maintains while they record.
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) {
      (void)tree.Snapshot(true);
      tree.Maintain(clock.load());
      (void)tree.Governing("shared/f00001");
    }
  });
  for (auto& t : ts) t.join();
  done = true;
  reader.join();
  tree.RetestAll(true);
  for (int th = 0; th < kThreads; ++th) {
    auto s = tree.Find("jobs/job" + std::to_string(th) + "/model.bin");
    REQUIRE(s);
    CHECK(s->samples == kBlocks);
    CHECK(s->label == Label::kSequential);
  }
  auto shared = tree.Find("shared/");
  REQUIRE(shared);
  CHECK(shared->samples == kThreads * kBlocks);
  CHECK(tree.Memory().dropped_records == 0);
}

TEST_CASE("8 threads recording under a tight memory cap with concurrent pruning", "[tree][concurrency][memory]") {
  StreamConfig cfg;
  cfg.memory_cap_bytes = 128 << 10;
  cfg.idle_prune_ms = 1;
  AccessStreamTree tree(cfg);
  std::atomic<uint64_t> clock{0};
  std::atomic<uint64_t> max_bytes{0};
  std::vector<std::thread> ts;
  for (int th = 0; th < 8; ++th) {
    ts.emplace_back([&, th] {
      std::mt19937 rng(th);
      for (int i = 0; i < 20000; ++i) {
        char path[64];
        std::snprintf(path, sizeof path, "d%d/s%d/f%d", int(rng() % 5), int(rng() % 50), int(rng() % 3000));
        // 1 ms per record: Maintain's idle walk (at most once a second) runs
        // during the test.
        tree.Record(clock.fetch_add(1000), th, path, (rng() % 8) * kMiB, kMiB, 8 * kMiB);
        uint64_t b = tree.Memory().bytes, cur = max_bytes.load();
        while (b > cur && !max_bytes.compare_exchange_weak(cur, b)) {
        }
      }
    });
  }
  std::atomic<bool> done{false};
  std::thread maint([&] {
    while (!done) {
      tree.Maintain(clock.load());
      (void)tree.Snapshot(true);
    }
  });
  for (auto& t : ts) t.join();
  done = true;
  maint.join();
  CHECK(max_bytes.load() <= cfg.memory_cap_bytes);
  CHECK(tree.Memory().pruned_nodes > 0);
}

namespace {
// A weights file of `blocks` MiB scanned in 1 MiB reads, then faulting at
// random: the scan, and one 4 KiB fault per call.
void ScanFile(AccessStreamTree& tree, uint64_t& t, const std::string& path, uint64_t blocks, uint64_t size) {
  for (uint64_t b = 0; b < blocks; ++b) tree.Record(t += 10, 1, path, b * kMiB, kMiB, size);
}
void Fault(AccessStreamTree& tree, uint64_t& t, const std::string& path, std::mt19937& rng, uint64_t size) {
  const uint64_t b = std::uniform_int_distribution<uint64_t>(0, size / kMiB - 1)(rng);
  tree.Record(t += 10, 1, path, b * kMiB + 4096, 4096, size);
}
}  // namespace

TEST_CASE("a phase change (scan, then random faults) relabels after the newest samples, not a whole window", "[tree]") {
  // A 2 GiB weights file scanned in 1 MiB reads (256 blocks sampled, the
  // whole window), then faulted at random. The newest 64 samples say
  // "random" while the label is sequential: the older ones are dropped and
  // two tests (64 + 16 samples) relabel it. Without the cut, ~200 faults
  // were needed to outvote the scan. Then a scan again: back to sequential.
  AccessStreamTree tree;
  constexpr uint64_t kSize = 2048 * kMiB;
  const std::string path = "models/w.safetensors";
  uint64_t t = 0;
  ScanFile(tree, t, path, 300, kSize);
  REQUIRE(tree.Find(path)->label == Label::kSequential);
  std::mt19937 rng(5);
  int faults = 0;
  for (; tree.Find(path)->label == Label::kSequential && faults < 400; ++faults) Fault(tree, t, path, rng, kSize);
  CHECK(tree.Find(path)->label == Label::kRandom);
  CHECK(faults <= 96);
  CHECK(tree.Memory().change_points == 1);
  int reads = 0;
  for (uint64_t b = 1000; tree.Find(path)->label != Label::kSequential && reads < 400; ++b, ++reads)
    tree.Record(t += 10, 1, path, b * kMiB, kMiB, kSize);
  CHECK(tree.Find(path)->label == Label::kSequential);
  CHECK(reads <= 96);
  CHECK(tree.Memory().change_points == 2);
}

TEST_CASE("rows read at random, then a scan: relabelled as soon as after faults", "[tree]") {
  // 4 MiB rows of a 2 GiB file read at random in 1 MiB pieces (random), then
  // the file scanned. The whole window shows short runs until the rows are
  // under 4 in 7 of it: the cut to "sequential" was held ~110 samples (a
  // review). The newest samples, one long run, are no rows: the cut comes
  // as after random faults (the test above).
  AccessStreamTree tree;
  constexpr uint64_t kSize = 2048 * kMiB;
  const std::string path = "emb/rows.bin";
  std::mt19937 rng(11);
  uint64_t t = 0;
  for (int i = 0; i < 300; ++i) {
    const uint64_t row = rng() % (kSize / kMiB / 4);
    for (uint64_t b = 0; b < 4; ++b) tree.Record(t += 200, 600, path, (row * 4 + b) * kMiB, kMiB, kSize);
  }
  REQUIRE(tree.Find(path)->label == Label::kRandom);
  int reads = 0;
  for (uint64_t b = 0; tree.Find(path)->label != Label::kSequential && reads < 400; ++b, ++reads)
    tree.Record(t += 200, 600, path, b * kMiB, kMiB, kSize);
  CHECK(tree.Find(path)->label == Label::kSequential);
  CHECK(reads <= 96);
}

TEST_CASE("Var of the distinct count keeps its precision for huge N", "[detector]") {
  // Against the textbook formula in long double, while that is still exact
  // enough itself (small N).
  for (double big_n : {2.0, 3.0, 10.0, 1000.0}) {
    for (double n : {2.0, 10.0, 256.0, 5000.0}) {
      const long double N = big_n, q1 = std::pow(1.0L - 1.0L / N, n), q2 = std::pow(1.0L - 2.0L / N, n);
      const long double want = N * (N - 1) * q2 + N * q1 - N * N * q1 * q1;
      INFO("N " << big_n << " n " << n);
      CHECK(DistinctVariance(n, big_n) == Approx(double(want)).epsilon(1e-6).margin(1e-9));
    }
  }
  // Two draws: D is 1 with probability 1/N, else 2.
  // (The terms left cancel at about n, not N^2: relative error ~1e-16 N / n.)
  for (double big_n : {1e6, 1e9})
    CHECK(DistinctVariance(2, big_n) == Approx((1 / big_n) * (1 - 1 / big_n)).epsilon(1e-5));
  // n << N: Var[D] ~ n^2 / (2N) (collisions are rare pairs); the old form
  // gave rounding noise far larger than that past N ~ 1e8.
  for (double big_n : {1e9, 1e12, 1e15}) {
    const double n = 256;
    INFO("N " << big_n);
    CHECK(DistinctVariance(n, big_n) == Approx(n * (n - 1) / (2 * big_n)).epsilon(1e-3));
  }
}

TEST_CASE("the phase-change check still runs when min_samples is above 64", "[tree]") {
  StreamConfig cfg;
  cfg.min_samples = 100;
  AccessStreamTree tree(cfg);
  constexpr uint64_t kSize = 2048 * kMiB;
  const std::string path = "models/w.bin";
  uint64_t t = 0;
  ScanFile(tree, t, path, 300, kSize);
  REQUIRE(tree.Find(path)->label == Label::kSequential);
  std::mt19937 rng(5);
  for (int faults = 0; faults < 160; ++faults) Fault(tree, t, path, rng, kSize);
  CHECK(tree.Memory().change_points == 1);  // was 0: the 64 newest were always "too few"
  CHECK(tree.Find(path)->label == Label::kRandom);
}

TEST_CASE("Forget prunes the nodes of gone files and of gone directories with all below them") {
  AccessStreamTree tree(StreamConfig{});
  uint64_t t = 1;
  for (int i = 0; i < 20; ++i) tree.Record(t++, 1, "a/f" + std::to_string(i), 0, 4096, 4096);
  for (int i = 0; i < 5; ++i) tree.Record(t++, 1, "a/sub/g" + std::to_string(i), 0, 4096, 4096);
  tree.Record(t++, 1, "b/h", 0, 4096, 4096);
  const size_t before = tree.Memory().nodes;
  CHECK(tree.Forget({"a/f3", "a/sub/", "missing/x", "b/h/"}) == 1 + 6);  // "b/h/" names no directory
  CHECK(tree.Memory().nodes == before - 7);
  CHECK_FALSE(tree.Find("a/f3").has_value());
  CHECK_FALSE(tree.Find("a/sub/g0").has_value());
  CHECK(tree.Find("a/f4").has_value());
  CHECK(tree.Find("b/h").has_value());
  // Read again: a new node.
  tree.Record(t++, 1, "a/f3", 0, 4096, 4096);
  CHECK(tree.Find("a/f3").has_value());
}
