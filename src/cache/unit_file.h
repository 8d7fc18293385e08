#pragma once
// Unit file format and unit identity of the SSD tier (DESIGN.md sec. 4).
//
// A unit file is a header followed by the unit's data. The header, all
// integers little-endian:
//
//   off  size  field
//   0    4     magic "IGTU"
//   4    2     format version (kUnitFormatVersion)
//   6    2     reserved, 0
//   8    4     header length in bytes (= offset of the data)
//   12   8     key hash: XXH3-64 of the object key
//   20   8     unit index
//   28   8     data length in bytes
//   36   4     chunk size in bytes (UnitChunkBytesFor(data length))
//   40   2     etag length (<= kMaxEtagBytes)
//   42   n     etag bytes
//   ..   8*c   XXH3-64 of each data chunk, c = ceil(data length / chunk size)
//   ..   p     zeros (version 2, data of 64 KiB or more): the header ends
//              on a 4 KiB boundary
//   ..   8     XXH3-64 of every header byte before it
//
// Version 2 (written now) pads the header so that the data starts at a
// 4 KiB-aligned file offset, and uses 4 KiB chunks up to 1 MiB units (at most
// 256 chunks: larger units get larger chunks): a page-aligned 4 KiB read of
// the object is one page of the unit file, read and verified alone.
// Version 1 files (no padding, 64 KiB chunks) are still read. Per-chunk
// checksums let a read verify only the chunks it touches. The header
// names the unit it holds (key hash, etag, index, length), so a file under
// the wrong name (swapped, stale) is caught, not served. Every mismatch is
// Code::kCorruption; a failed system call is kIoError.
//
// Everything here is a pure function or works on a caller's fd; no state.
// Thread-safety: all functions are reentrant.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "igtcache/block_store.h"
#include "igtcache/status.h"

namespace igt::cache {

inline constexpr char kUnitMagic[4] = {'I', 'G', 'T', 'U'};
inline constexpr uint16_t kUnitFormatVersion = 2;
// Data alignment in the file (version 2), and the smallest chunk: a page.
inline constexpr uint32_t kUnitDataAlign = 4096;
// Units with less data than this are not padded (read whole anyway; a page
// of padding would double the disk use of a file of a few KiB).
inline constexpr uint64_t kUnitPadMinData = 64 * 1024;
inline constexpr uint32_t kUnitMinChunkBytes = 4096;
// Chunks per unit at most when writing: the header stays within one page.
inline constexpr uint64_t kUnitMaxChunks = 256;
// Chunk size of every version 1 file.
inline constexpr uint32_t kUnitV1ChunkBytes = 64 * 1024;
// S3 ETags are 32-34 chars (multipart "-N" suffix); versions ids are longer
// but well under this. A bound keeps a corrupt header from allocating much.
inline constexpr size_t kMaxEtagBytes = 128;
// 1 GiB: far above any sensible unit (default 1 MiB).
inline constexpr uint64_t kMaxUnitDataBytes = 1ull << 30;
// Bytes of the header before the etag.
inline constexpr size_t kUnitHeaderFixedBytes = 42;
// Largest header a reader accepts: that of a version 1 file of the largest
// unit (64 KiB chunks: 16384 checksums, 128 KiB).
inline constexpr size_t kMaxUnitHeaderBytes =
    kUnitHeaderFixedBytes + kMaxEtagBytes + 8 * (kMaxUnitDataBytes / kUnitV1ChunkBytes) + 8;

// File system block the cache's disk use is counted in (ext4, xfs, btrfs:
// 4 KiB): a file takes whole blocks.
inline constexpr uint64_t kDiskBlockBytes = 4096;
// What a unit file of `header_len` + `data_len` bytes takes on the volume,
// counted against the cache limit (cache.max_bytes).
constexpr uint64_t UnitDiskBytes(uint64_t header_len, uint64_t data_len) {
  return (header_len + data_len + kDiskBlockBytes - 1) / kDiskBlockBytes * kDiskBlockBytes;
}

// At most what a unit of `data_len` bytes takes on the volume, whatever its
// key and etag (written as version 2).
uint64_t UnitDiskBytesAtMost(uint64_t data_len);
// At most what an object of `size` bytes takes cached as whole units of
// `unit` bytes, for planning what fits (igtcache warm).
uint64_t ObjectDiskBytesAtMost(uint64_t size, uint64_t unit);

struct UnitHeader {
  uint32_t header_len = 0;
  uint64_t key_hash = 0;
  uint64_t index = 0;
  uint64_t data_len = 0;
  uint32_t chunk_size = kUnitMinChunkBytes;
  std::string etag;
  std::vector<uint64_t> chunk_sums;  // one per chunk
};

// Stable id of a unit: XXH3-128 (hex, 32 chars) over the length-prefixed
// object key, etag and the unit index. Also the unit's file name.
std::string UnitId(const UnitKey& key);
// A unit id as the 16 bytes its 32 hex digits spell: the block store's
// key in memory (a string of 32 chars does not fit a std::string's inline
// buffer: 80 bytes a copy against 16).
struct UnitIdBits {
  uint64_t hi = 0, lo = 0;
  bool operator==(const UnitIdBits&) const = default;
};
// `id` must be one UnitId made (32 lowercase hex digits): anything else
// (another length, upper case) maps quietly onto some 128-bit value, taken
// for the id that spells it. Every id the block store handles comes from
// UnitId or is checked against it (start-up).
UnitIdBits UnitIdBitsOf(std::string_view id);
std::string UnitIdOf(const UnitIdBits& bits);  // UnitIdOf(UnitIdBitsOf(id)) == id
// The bits are an XXH3-128 digest already: either half is a good hash. The
// string form hashes alike (heterogeneous lookups: a map keyed by bits
// found with the string id).
struct UnitIdBitsHash {
  using is_transparent = void;
  size_t operator()(const UnitIdBits& b) const noexcept { return static_cast<size_t>(b.lo); }
  size_t operator()(std::string_view id) const noexcept { return (*this)(UnitIdBitsOf(id)); }
};
struct UnitIdBitsEq {
  using is_transparent = void;
  bool operator()(const UnitIdBits& a, const UnitIdBits& b) const noexcept { return a == b; }
  bool operator()(std::string_view a, const UnitIdBits& b) const noexcept { return UnitIdBitsOf(a) == b; }
  bool operator()(const UnitIdBits& a, std::string_view b) const noexcept { return a == UnitIdBitsOf(b); }
};
// "units/xx/<id>" relative to the cache dir (xx = the id's first hex pair).
std::string UnitRelPath(std::string_view id);
// Where a unit file was kept before 2026-11-29: "units/xx/yy/<id>" (yy =
// the second pair). Start-up moves such a file to UnitRelPath.
std::string LegacyUnitRelPath(std::string_view id);
// XXH3-64 of the object key (the header's key hash).
uint64_t ObjectKeyHash(std::string_view object);

// The header bytes for `data` of unit `key`. InvalidArgument if the etag or
// data are over their bounds. `version` 1 (64 KiB chunks, no padding) is
// for tests of reading files an older igtcache wrote.
Result<std::string> EncodeUnitHeader(const UnitKey& key, std::string_view data,
                                     uint16_t version = kUnitFormatVersion);

// Validates magic and version of a header prefix (>= 12 bytes) and returns
// the header length it announces, within bounds.
Result<uint32_t> PeekUnitHeaderLength(std::string_view prefix);
// Decodes and verifies a complete header (`bytes` may be longer; only the
// announced length is read). Corruption on any inconsistency.
Result<UnitHeader> DecodeUnitHeader(std::string_view bytes);
// Corruption unless the header describes unit `key`.
Status CheckUnitHeaderMatches(const UnitHeader& h, const UnitKey& key);

// Chunk c covers data bytes [c*chunk_size, min(data_len, (c+1)*chunk_size)).
uint64_t UnitChunkCount(uint64_t data_len, uint32_t chunk_size);
// The chunk size a unit of `data_len` bytes is written with: 4 KiB, doubled
// until at most kUnitMaxChunks chunks cover the data.
uint32_t UnitChunkBytesFor(uint64_t data_len);
// Corruption unless `bytes` (the whole chunk c) matches its checksum.
Status VerifyUnitChunk(const UnitHeader& h, uint64_t chunk, std::string_view bytes);

// --- fd helpers (pread/write on an open unit file) ---

// Reads and decodes the header of an open unit file.
Result<UnitHeader> ReadUnitHeader(int fd);
// Copies data bytes [offset, offset+len) (clamped to data_len) into `out`,
// reading and verifying only the chunks touched. Returns the bytes copied.
// On an error `out` holds no unverified bytes (it is left alone or zeroed).
Result<size_t> ReadUnitRange(int fd, const UnitHeader& h, uint64_t offset, size_t len, char* out);
// Writes header + data at the start of `fd` (a fresh file).
Status WriteUnitFile(int fd, std::string_view header, std::string_view data);

}  // namespace igt::cache
