// Unit file format: header round trip, checksums, range reads, corruption.

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>
#include <cstdlib>
#include <random>
#include <string>

#include "src/cache/index_record.h"
#include "src/cache/unit_file.h"

namespace igt::cache {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A unit file in a temp file, deleted on scope exit.
struct TempUnit {
  std::string path;
  int fd = -1;
  TempUnit(const UnitKey& key, std::string_view data, uint16_t version = kUnitFormatVersion) {
    char tmpl[] = "/tmp/igt_unit_XXXXXX";
    fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    path = tmpl;
    auto h = EncodeUnitHeader(key, data, version);
    REQUIRE(h.has_value());
    REQUIRE(WriteUnitFile(fd, *h, data).ok());
  }
  ~TempUnit() {
    ::close(fd);
    ::unlink(path.c_str());
  }
  void Flip(uint64_t file_off) {
    char c;
    REQUIRE(::pread(fd, &c, 1, file_off) == 1);
    c ^= 0x5a;
    REQUIRE(::pwrite(fd, &c, 1, file_off) == 1);
  }
};

TEST_CASE("unit id is stable, hex, and separates fields", "[unit_file]") {
  UnitKey a{"dir/file", "etag1", 3};
  CHECK(UnitId(a) == UnitId(a));
  CHECK(UnitId(a).size() == 32);
  CHECK(UnitId(a).find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(UnitId(a) != UnitId(UnitKey{"dir/file", "etag1", 4}));
  CHECK(UnitId(a) != UnitId(UnitKey{"dir/file", "etag2", 3}));
  // Length prefixes: moving bytes between fields changes the id.
  CHECK(UnitId(UnitKey{"ab", "c", 0}) != UnitId(UnitKey{"a", "bc", 0}));
  const std::string id = UnitId(a);
  CHECK(UnitRelPath(id) == "units/" + id.substr(0, 2) + "/" + id);
  CHECK(LegacyUnitRelPath(id) == "units/" + id.substr(0, 2) + "/" + id.substr(2, 2) + "/" + id);
}

TEST_CASE("a unit id's bits: the block store's key in memory, back to the same id", "[unit_file]") {
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = UnitId(UnitKey{"obj/" + std::to_string(i), "e", uint64_t(i % 7)});
    const UnitIdBits b = UnitIdBitsOf(id);
    CHECK(UnitIdOf(b) == id);
    CHECK(UnitIdBitsHash{}(id) == UnitIdBitsHash{}(b));
    CHECK(UnitIdBitsEq{}(id, b));
    seen.insert({b.hi, b.lo});
  }
  CHECK(seen.size() == 1000);
  CHECK(UnitIdOf(UnitIdBitsOf("0123456789abcdeffedcba9876543210")) == "0123456789abcdeffedcba9876543210");
  CHECK(UnitIdBitsOf("0123456789abcdeffedcba9876543210") == UnitIdBits{0x0123456789abcdefULL, 0xfedcba9876543210ULL});
}

TEST_CASE("header round trip", "[unit_file]") {
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{65536}, size_t{65537}, size_t{1} << 20);
  UnitKey key{"a/b.bin", "\"d41d8cd98f00b204e9800998ecf8427e\"", 7};
  const std::string data = Bytes(n, 1);
  auto h = EncodeUnitHeader(key, data);
  REQUIRE(h.has_value());
  const uint32_t cs = UnitChunkBytesFor(n);
  CHECK(cs == kUnitMinChunkBytes);  // 4 KiB chunks up to 1 MiB
  const uint64_t packed = kUnitHeaderFixedBytes + key.etag.size() + 8 * UnitChunkCount(n, cs) + 8;
  if (n >= kUnitPadMinData) {
    CHECK(h->size() % kUnitDataAlign == 0);  // the data starts page-aligned
    CHECK(h->size() >= packed);
    CHECK(h->size() < packed + kUnitDataAlign);
  } else {
    CHECK(h->size() == packed);  // small units are not padded
  }
  auto len = PeekUnitHeaderLength(*h);
  REQUIRE(len.has_value());
  CHECK(*len == h->size());
  auto d = DecodeUnitHeader(*h + data);  // trailing data is ignored
  REQUIRE(d.has_value());
  CHECK(d->header_len == h->size());
  CHECK(d->data_len == n);
  CHECK(d->index == 7);
  CHECK(d->etag == key.etag);
  CHECK(d->key_hash == ObjectKeyHash(key.object));
  CHECK(d->chunk_size == cs);
  CHECK(d->chunk_sums.size() == UnitChunkCount(n, cs));
  CHECK(CheckUnitHeaderMatches(*d, key).ok());
  for (uint64_t c = 0; c < d->chunk_sums.size(); ++c) {
    const std::string_view chunk = std::string_view(data).substr(c * cs, cs);
    CHECK(VerifyUnitChunk(*d, c, chunk).ok());
  }
}

TEST_CASE("header mismatches are corruption", "[unit_file]") {
  UnitKey key{"obj", "e1", 2};
  const std::string data = Bytes(100000, 2);
  auto h = EncodeUnitHeader(key, data);
  REQUIRE(h.has_value());
  auto d = DecodeUnitHeader(*h);
  REQUIRE(d.has_value());
  CHECK(CheckUnitHeaderMatches(*d, UnitKey{"obj2", "e1", 2}).code() == Code::kCorruption);
  CHECK(CheckUnitHeaderMatches(*d, UnitKey{"obj", "e2", 2}).code() == Code::kCorruption);
  CHECK(CheckUnitHeaderMatches(*d, UnitKey{"obj", "e1", 3}).code() == Code::kCorruption);

  // Every single-byte flip anywhere in the header is caught.
  for (size_t i = 0; i < h->size(); ++i) {
    std::string bad = *h;
    bad[i] ^= 0x01;
    auto r = DecodeUnitHeader(bad);
    INFO("byte " << i);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Code::kCorruption);
  }
  // Truncated headers.
  CHECK_FALSE(DecodeUnitHeader(h->substr(0, 8)).has_value());
  CHECK_FALSE(DecodeUnitHeader(h->substr(0, h->size() - 1)).has_value());
  CHECK_FALSE(DecodeUnitHeader("").has_value());
  // A flipped data byte fails its chunk.
  std::string chunk = data.substr(d->chunk_size, d->chunk_size);
  CHECK(VerifyUnitChunk(*d, 1, chunk).ok());
  chunk[5] ^= 1;
  CHECK(VerifyUnitChunk(*d, 1, chunk).code() == Code::kCorruption);
  CHECK(VerifyUnitChunk(*d, 1, chunk.substr(1)).code() == Code::kCorruption);
  CHECK(VerifyUnitChunk(*d, 999, chunk).code() == Code::kCorruption);
}

TEST_CASE("disk use of a unit file, and the bound warm plans with", "[unit_file]") {
  // A file takes whole 4 KiB blocks.
  CHECK(UnitDiskBytes(100, 1000) == 4096);
  CHECK(UnitDiskBytes(4096, 1 << 20) == (1 << 20) + 4096);
  CHECK(UnitDiskBytes(0, 0) == 0);
  // The bound holds for any key and etag (the longest etag included), and is
  // within a block of the real thing.
  for (const std::string& etag : {std::string("e"), std::string(kMaxEtagBytes, 'x')}) {
    for (uint64_t n : {1ull, 100ull, 4095ull, 4096ull, 10240ull, 65535ull, 65536ull, 110000ull, 1ull << 20,
                       (3ull << 20) + 7}) {
      INFO("etag " << etag.size() << " bytes, data " << n);
      const std::string data = Bytes(n, 5);
      auto h = EncodeUnitHeader(UnitKey{"k/" + std::to_string(n), etag, 0}, data);
      REQUIRE(h.has_value());
      const uint64_t real = UnitDiskBytes(h->size(), n);
      CHECK(real <= UnitDiskBytesAtMost(n));
      CHECK(UnitDiskBytesAtMost(n) - real <= 4096);
    }
  }
  CHECK(UnitDiskBytesAtMost(10240) == 12288);  // a 10 KiB file: its header shares the last block
  CHECK(UnitDiskBytesAtMost(110000) == 4096 + 110592);
  // Objects: whole units of `unit` bytes, each with its header.
  CHECK(ObjectDiskBytesAtMost(0, 1 << 20) == 0);
  CHECK(ObjectDiskBytesAtMost(3 << 20, 1 << 20) == 3 * ((1 << 20) + 4096));
  CHECK(ObjectDiskBytesAtMost((2 << 20) + 10240, 1 << 20) == 2 * ((1 << 20) + 4096) + 12288);
}

TEST_CASE("encode rejects oversized etags", "[unit_file]") {
  UnitKey key{"obj", std::string(kMaxEtagBytes + 1, 'e'), 0};
  auto h = EncodeUnitHeader(key, "x");
  REQUIRE_FALSE(h.has_value());
  CHECK(h.error().code() == Code::kInvalidArgument);
  key.etag.resize(kMaxEtagBytes);
  CHECK(EncodeUnitHeader(key, "x").has_value());
}

TEST_CASE("range reads on a unit file", "[unit_file]") {
  UnitKey key{"big", "v1", 0};
  const std::string data = Bytes((1 << 20) + 123, 3);
  TempUnit u(key, data);
  auto h = ReadUnitHeader(u.fd);
  REQUIRE(h.has_value());
  CHECK(h->data_len == data.size());

  std::mt19937 rng(4);
  for (int i = 0; i < 200; ++i) {
    const uint64_t off = rng() % (data.size() + 10);
    const size_t len = rng() % 300000;
    std::string out(len, '\0');
    auto n = ReadUnitRange(u.fd, *h, off, len, out.data());
    REQUIRE(n.has_value());
    const size_t want = off >= data.size() ? 0 : std::min<size_t>(len, data.size() - off);
    REQUIRE(*n == want);
    REQUIRE(out.substr(0, *n) == data.substr(std::min<size_t>(off, data.size()), want));
  }

  SECTION("a corrupt chunk fails only reads that touch it") {
    const uint64_t C = h->chunk_size;
    u.Flip(h->header_len + 3 * C + 17);
    char buf[4096];
    CHECK(ReadUnitRange(u.fd, *h, 0, sizeof buf, buf).has_value());
    CHECK(ReadUnitRange(u.fd, *h, 4 * C, sizeof buf, buf).has_value());
    auto bad = ReadUnitRange(u.fd, *h, 3 * C + 4000, sizeof buf, buf);
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().code() == Code::kCorruption);
    // A range spanning chunks 2..3 also fails.
    CHECK_FALSE(ReadUnitRange(u.fd, *h, 3 * C - 10, 100, buf).has_value());
  }
  SECTION("a truncated file is corruption") {
    REQUIRE(::ftruncate(u.fd, h->header_len + data.size() - 1) == 0);
    char buf[16];
    auto r = ReadUnitRange(u.fd, *h, data.size() - 8, 8, buf);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(ReadUnitRange(u.fd, *h, 0, 8, buf).has_value());
  }
  SECTION("a header flip is caught by ReadUnitHeader") {
    u.Flip(25);
    auto r = ReadUnitHeader(u.fd);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Code::kCorruption);
  }
}

TEST_CASE("version 1 files (64 KiB chunks, no padding) are still read", "[unit_file]") {
  UnitKey key{"old", "v", 2};
  const std::string data = Bytes(300000, 8);
  TempUnit u(key, data, /*version=*/1);
  auto h = ReadUnitHeader(u.fd);
  REQUIRE(h.has_value());
  CHECK(h->chunk_size == kUnitV1ChunkBytes);
  CHECK(h->header_len == kUnitHeaderFixedBytes + key.etag.size() + 8 * 5 + 8);
  CHECK(CheckUnitHeaderMatches(*h, key).ok());
  std::string out(data.size(), '\0');
  REQUIRE(ReadUnitRange(u.fd, *h, 0, out.size(), out.data()) == data.size());
  CHECK(out == data);
  char buf[100];
  REQUIRE(ReadUnitRange(u.fd, *h, 200000, sizeof buf, buf) == sizeof buf);
  CHECK(std::string(buf, sizeof buf) == data.substr(200000, sizeof buf));
}

TEST_CASE("headers longer than the first read are read whole", "[unit_file]") {
  // Only version 1 writes headers over a page (version 2 caps the chunks).
  UnitKey key{"huge", "v", 1};
  const std::string data = Bytes(64u << 20, 5);  // 1024 chunks: 8 KiB of checksums
  TempUnit u(key, data, /*version=*/1);
  auto h = ReadUnitHeader(u.fd);
  REQUIRE(h.has_value());
  CHECK(h->header_len > 4096);
  char buf[10];
  auto n = ReadUnitRange(u.fd, *h, data.size() - 10, 10, buf);
  REQUIRE(n.has_value());
  CHECK(std::string(buf, 10) == data.substr(data.size() - 10));
}

TEST_CASE("index record round trip and rejection", "[index_record]") {
  UnitRecord r = FileUnitRecord(UnitKey{"a/b", "etag", 9}, 1234, "units/aa/bb/x", 111);
  r.access_count = 5;
  const std::string enc = EncodeUnitRecord(r);
  auto d = DecodeUnitRecord(enc);
  REQUIRE(d.has_value());
  CHECK(d->key.object == "a/b");
  CHECK(d->key.etag == "etag");
  CHECK(d->key.index == 9);
  CHECK(d->data_len == 1234);
  CHECK(d->rel_path == "units/aa/bb/x");
  CHECK(d->last_access_us == 111);
  CHECK(d->access_count == 5);
  for (size_t i = 0; i < enc.size(); ++i) CHECK_FALSE(DecodeUnitRecord(enc.substr(0, i)).has_value());
  CHECK_FALSE(DecodeUnitRecord(enc + "x").has_value());
  std::string bad = enc;
  bad[0] = 9;
  CHECK_FALSE(DecodeUnitRecord(bad).has_value());
  CHECK_FALSE(d->is_inline);
}

TEST_CASE("an inline unit's record holds its bytes under a checksum", "[index_record]") {
  const std::string data = "a small object's bytes";
  const UnitRecord r = InlineUnitRecord(UnitKey{"a/b", "etag", 0}, data, 7);
  const std::string enc = EncodeUnitRecord(r);
  CHECK(enc[0] == 2);  // a version older builds do not read (they drop it)
  auto d = DecodeUnitRecord(enc);
  REQUIRE(d.has_value());
  CHECK(d->is_inline);
  CHECK(d->inline_data_ok);
  CHECK(d->inline_data == data);
  CHECK(d->rel_path.empty());
  CHECK(d->key.object == "a/b");
  CHECK(d->last_access_us == 7);
  CHECK(InlineRecordDiskBytes(enc.size()) == enc.size() + 34);
  for (size_t i = 0; i < enc.size(); ++i) CHECK_FALSE(DecodeUnitRecord(enc.substr(0, i)).has_value());
  CHECK_FALSE(DecodeUnitRecord(enc + "x").has_value());
  // A flipped data byte: decoded, but marked as failing its checksum.
  std::string flipped = enc;
  flipped[enc.size() - 3] ^= 0x20;
  auto f = DecodeUnitRecord(flipped);
  REQUIRE(f.has_value());
  CHECK_FALSE(f->inline_data_ok);
  // Its length must be the record's data length; an inline record names no file.
  UnitRecord wrong_len = r;
  wrong_len.data_len = data.size() + 1;
  CHECK_FALSE(DecodeUnitRecord(EncodeUnitRecord(wrong_len)).has_value());
  UnitRecord with_path = r;
  with_path.rel_path = "units/aa/bb/x";
  CHECK_FALSE(DecodeUnitRecord(EncodeUnitRecord(with_path)).has_value());
  // What igtcache warm plans with bounds any record: the longest etag, a
  // key of the length given.
  for (size_t n : {0, 1, 512, 4096, 65536}) {
    const std::string key(300, 'k');
    const auto rec = InlineUnitRecord(UnitKey{key, std::string(kMaxEtagBytes, 'e'), 3}, std::string(n, 'd'), 99);
    CHECK(InlineRecordDiskBytes(EncodeUnitRecord(rec).size()) == InlineDiskBytesAtMost(n, key.size()));
  }
  // A large object's small last unit goes inline: priced as a record, not
  // a file (whose bound can be below a record's: 3,900 bytes in one block).
  CHECK(CachedObjectDiskBytesAtMost(3900, 1 << 20, 4096, 300) == InlineDiskBytesAtMost(3900, 300));
  CHECK(CachedObjectDiskBytesAtMost((1 << 20) + 3900, 1 << 20, 4096, 300) ==
        UnitDiskBytesAtMost(1 << 20) + InlineDiskBytesAtMost(3900, 300));
  CHECK(CachedObjectDiskBytesAtMost((1 << 20) + 3900, 1 << 20, 0, 300) == ObjectDiskBytesAtMost((1 << 20) + 3900, 1 << 20));
  CHECK(CachedObjectDiskBytesAtMost(0, 1 << 20, 4096, 300) == 0);
  // An empty object inline.
  const UnitRecord empty = InlineUnitRecord(UnitKey{"e", "x", 0}, "", 0);
  auto e = DecodeUnitRecord(EncodeUnitRecord(empty));
  REQUIRE(e.has_value());
  CHECK(e->inline_data_ok);
  CHECK(e->inline_data.empty());
}

}  // namespace
}  // namespace igt::cache

namespace igt::cache {
namespace {

TEST_CASE("whole-chunk reads go straight to the caller's buffer, zeroed on failure", "[unit_file]") {
  UnitKey key{"direct", "v", 0};
  const uint64_t C = UnitChunkBytesFor(1);
  const std::string data = Bytes(3 * C + 500, 9);
  TempUnit u(key, data);
  auto h = ReadUnitHeader(u.fd);
  REQUIRE(h.has_value());
  REQUIRE(h->chunk_size == C);
  std::string out(data.size(), 'x');
  REQUIRE(ReadUnitRange(u.fd, *h, 0, out.size(), out.data()) == data.size());
  CHECK(out == data);
  std::string mid(C, 'x');
  REQUIRE(ReadUnitRange(u.fd, *h, C, mid.size(), mid.data()) == C);
  CHECK(mid == data.substr(C, C));
  u.Flip(h->header_len + 2 * C);
  std::fill(out.begin(), out.end(), 'x');
  REQUIRE_FALSE(ReadUnitRange(u.fd, *h, 0, out.size(), out.data()).has_value());
  CHECK(out == std::string(out.size(), '\0'));
}

}  // namespace
}  // namespace igt::cache
