#include "src/cache/unit_file.h"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace igt::cache {
namespace {

void PutU16(std::string& s, uint16_t v) {
  for (int i = 0; i < 2; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe(std::string_view s, size_t off, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(s[off + i])) << (8 * i);
  return v;
}

uint64_t Hash64(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

Status Corrupt(std::string what) { return Status::Corruption("unit file: " + what); }

// pread exactly n bytes (retrying EINTR/short reads); a short file is corruption.
Status PreadAll(int fd, char* buf, size_t n, uint64_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(fmt::format("unit file read: {}", std::strerror(errno)));
    }
    if (r == 0) return Corrupt(fmt::format("truncated: {} bytes missing at offset {}", n - done, off + done));
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

}  // namespace

std::string UnitId(const UnitKey& key) {
  std::string buf;
  buf.reserve(24 + key.object.size() + key.etag.size());
  PutU64(buf, key.object.size());
  buf += key.object;
  PutU64(buf, key.etag.size());
  buf += key.etag;
  PutU64(buf, key.index);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(buf.data(), buf.size()));
  std::string hex;
  hex.reserve(32);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : c.digest) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 15]);
  }
  return hex;
}

UnitIdBits UnitIdBitsOf(std::string_view id) {
  const auto half = [&](size_t from) {
    uint64_t v = 0;
    for (size_t i = from; i < from + 16; ++i) {
      const char c = i < id.size() ? id[i] : '0';
      const uint64_t d = c >= '0' && c <= '9' ? uint64_t(c - '0') : c >= 'a' && c <= 'f' ? uint64_t(c - 'a' + 10) : 0;
      v = v << 4 | d;
    }
    return v;
  };
  return UnitIdBits{half(0), half(16)};
}

std::string UnitIdOf(const UnitIdBits& bits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(32, '0');
  for (int i = 0; i < 16; ++i) {
    hex[15 - i] = kHex[(bits.hi >> (4 * i)) & 15];
    hex[31 - i] = kHex[(bits.lo >> (4 * i)) & 15];
  }
  return hex;
}

std::string UnitRelPath(std::string_view id) { return fmt::format("units/{}/{}", id.substr(0, 2), id); }

std::string LegacyUnitRelPath(std::string_view id) {
  return fmt::format("units/{}/{}/{}", id.substr(0, 2), id.substr(2, 2), id);
}

uint64_t ObjectKeyHash(std::string_view object) { return Hash64(object); }

uint64_t UnitChunkCount(uint64_t data_len, uint32_t chunk_size) {
  return (data_len + chunk_size - 1) / chunk_size;
}

uint32_t UnitChunkBytesFor(uint64_t data_len) {
  uint32_t c = kUnitMinChunkBytes;
  while (UnitChunkCount(data_len, c) > kUnitMaxChunks) c *= 2;
  return c;
}

uint64_t UnitDiskBytesAtMost(uint64_t data_len) {
  // Padded to one page from kUnitPadMinData; below, the header shares the
  // data's blocks: fixed fields, the longest etag, a checksum per chunk.
  if (data_len >= kUnitPadMinData) return UnitDiskBytes(kUnitDataAlign, data_len);
  const uint64_t header =
      kUnitHeaderFixedBytes + kMaxEtagBytes + 8 * UnitChunkCount(data_len, UnitChunkBytesFor(data_len)) + 8;
  return UnitDiskBytes(header, data_len);
}

uint64_t ObjectDiskBytesAtMost(uint64_t size, uint64_t unit) {
  if (size == 0) return 0;
  if (unit == 0 || size <= unit) return UnitDiskBytesAtMost(size);
  const uint64_t full = size / unit, rest = size % unit;
  return full * UnitDiskBytesAtMost(unit) + (rest ? UnitDiskBytesAtMost(rest) : 0);
}

namespace {
// Header length of a version's layout for the given fields.
uint64_t HeaderLengthFor(uint16_t version, size_t etag_len, uint64_t chunks, uint64_t data_len) {
  const uint64_t packed = kUnitHeaderFixedBytes + etag_len + 8 * chunks + 8;
  if (version == 1 || data_len < kUnitPadMinData) return packed;
  return (packed + kUnitDataAlign - 1) / kUnitDataAlign * kUnitDataAlign;
}
}  // namespace

Result<std::string> EncodeUnitHeader(const UnitKey& key, std::string_view data, uint16_t version) {
  if (version != 1 && version != kUnitFormatVersion)
    return Err(Status::InvalidArgument(fmt::format("unit format version {} unknown", version)));
  if (key.etag.size() > kMaxEtagBytes) {
    return Err(Status::InvalidArgument(
        fmt::format("etag of '{}' is {} bytes, over the {} byte limit", key.object, key.etag.size(), kMaxEtagBytes)));
  }
  if (data.size() > kMaxUnitDataBytes) {
    return Err(Status::InvalidArgument(fmt::format("unit of {} bytes over the {} byte limit", data.size(), kMaxUnitDataBytes)));
  }
  const uint32_t chunk = version == 1 ? kUnitV1ChunkBytes : UnitChunkBytesFor(data.size());
  const uint64_t chunks = UnitChunkCount(data.size(), chunk);
  const size_t header_len = HeaderLengthFor(version, key.etag.size(), chunks, data.size());
  std::string h;
  h.reserve(header_len);
  h.append(kUnitMagic, 4);
  PutU16(h, version);
  PutU16(h, 0);
  PutU32(h, static_cast<uint32_t>(header_len));
  PutU64(h, ObjectKeyHash(key.object));
  PutU64(h, key.index);
  PutU64(h, data.size());
  PutU32(h, chunk);
  PutU16(h, static_cast<uint16_t>(key.etag.size()));
  h += key.etag;
  for (uint64_t c = 0; c < chunks; ++c) {
    PutU64(h, Hash64(data.substr(c * chunk, chunk)));
  }
  h.resize(header_len - 8, '\0');
  PutU64(h, Hash64(h));
  return h;
}

Result<uint32_t> PeekUnitHeaderLength(std::string_view prefix) {
  if (prefix.size() < 12) return Err(Corrupt("shorter than a header"));
  if (std::memcmp(prefix.data(), kUnitMagic, 4) != 0) return Err(Corrupt("bad magic"));
  const auto version = GetLe(prefix, 4, 2);
  if (version != 1 && version != kUnitFormatVersion)
    return Err(Corrupt(fmt::format("unknown format version {}", version)));
  const auto len = GetLe(prefix, 8, 4);
  if (len < kUnitHeaderFixedBytes + 8 || len > kMaxUnitHeaderBytes) {
    return Err(Corrupt(fmt::format("header length {} out of range", len)));
  }
  return static_cast<uint32_t>(len);
}

Result<UnitHeader> DecodeUnitHeader(std::string_view bytes) {
  auto len = PeekUnitHeaderLength(bytes);
  if (!len) return Err(len.error());
  if (bytes.size() < *len) return Err(Corrupt("header truncated"));
  std::string_view b = bytes.substr(0, *len);
  // Check the header checksum first: everything after it may then be trusted
  // to be what the writer wrote (the length checks below catch a writer bug).
  if (Hash64(b.substr(0, b.size() - 8)) != GetLe(b, b.size() - 8, 8)) {
    return Err(Corrupt("header checksum mismatch"));
  }
  UnitHeader h;
  h.header_len = *len;
  h.key_hash = GetLe(b, 12, 8);
  h.index = GetLe(b, 20, 8);
  h.data_len = GetLe(b, 28, 8);
  h.chunk_size = static_cast<uint32_t>(GetLe(b, 36, 4));
  const size_t etag_len = GetLe(b, 40, 2);
  if (h.chunk_size == 0 || h.chunk_size > (64u << 20)) return Err(Corrupt("bad chunk size"));
  if (etag_len > kMaxEtagBytes || h.data_len > kMaxUnitDataBytes) return Err(Corrupt("field out of range"));
  const uint64_t chunks = UnitChunkCount(h.data_len, h.chunk_size);
  if (b.size() != HeaderLengthFor(static_cast<uint16_t>(GetLe(b, 4, 2)), etag_len, chunks, h.data_len)) {
    return Err(Corrupt("header length does not match its fields"));
  }
  h.etag.assign(b.substr(kUnitHeaderFixedBytes, etag_len));
  h.chunk_sums.resize(chunks);
  for (uint64_t c = 0; c < chunks; ++c) {
    h.chunk_sums[c] = GetLe(b, kUnitHeaderFixedBytes + etag_len + 8 * c, 8);
  }
  return h;
}

Status CheckUnitHeaderMatches(const UnitHeader& h, const UnitKey& key) {
  if (h.key_hash != ObjectKeyHash(key.object) || h.etag != key.etag || h.index != key.index) {
    return Corrupt(fmt::format("holds another unit than '{}' #{} (swapped or stale file)", key.object, key.index));
  }
  return Status::Ok();
}

Status VerifyUnitChunk(const UnitHeader& h, uint64_t chunk, std::string_view bytes) {
  if (chunk >= h.chunk_sums.size()) return Corrupt(fmt::format("chunk {} out of range", chunk));
  const uint64_t start = chunk * h.chunk_size;
  const uint64_t want_len = std::min<uint64_t>(h.chunk_size, h.data_len - start);
  if (bytes.size() != want_len) return Corrupt(fmt::format("chunk {} has {} bytes, want {}", chunk, bytes.size(), want_len));
  if (Hash64(bytes) != h.chunk_sums[chunk]) return Corrupt(fmt::format("chunk {} checksum mismatch", chunk));
  return Status::Ok();
}

Result<UnitHeader> ReadUnitHeader(int fd) {
  // One 4 KiB pread covers the header of any unit up to ~500 chunks (32 MiB).
  constexpr size_t kFirstRead = 4096;
  std::string buf(kFirstRead, '\0');
  size_t got = 0;
  while (got < kFirstRead) {
    ssize_t r = ::pread(fd, buf.data() + got, kFirstRead - got, static_cast<off_t>(got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Err(Status::IoError(fmt::format("unit file read: {}", std::strerror(errno))));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  buf.resize(got);
  auto len = PeekUnitHeaderLength(buf);
  if (!len) return Err(len.error());
  if (*len > buf.size()) {
    if (got < kFirstRead) return Err(Corrupt("header truncated"));
    const size_t have = buf.size();
    buf.resize(*len);
    if (auto s = PreadAll(fd, buf.data() + have, *len - have, have); !s.ok()) return Err(s);
  }
  return DecodeUnitHeader(buf);
}

Result<size_t> ReadUnitRange(int fd, const UnitHeader& h, uint64_t offset, size_t len, char* out) {
  if (offset >= h.data_len || len == 0) return size_t{0};
  const uint64_t end = offset + std::min<uint64_t>(len, h.data_len - offset);  // offset + len may wrap
  const uint64_t c0 = offset / h.chunk_size;
  const uint64_t c1 = (end - 1) / h.chunk_size;  // inclusive
  const uint64_t span_start = c0 * h.chunk_size;
  const uint64_t span_end = std::min<uint64_t>(h.data_len, (c1 + 1) * h.chunk_size);
  // When the range is whole chunks (e.g. a whole-unit read) read straight
  // into `out`; otherwise through a buffer. Either way `out` never keeps
  // unverified bytes: on a failed check it is zeroed.
  const bool direct = offset == span_start && end == span_end;
  std::unique_ptr<char[]> buf;  // not zero-filled: every byte is read before use
  char* dst = out;
  if (!direct) {
    buf.reset(new char[span_end - span_start]);
    dst = buf.get();
  }
  const uint64_t span = span_end - span_start;
  auto fail = [&](Status s) {
    if (direct) std::memset(out, 0, span);
    return Err(std::move(s));
  };
  if (auto s = PreadAll(fd, dst, span, h.header_len + span_start); !s.ok()) return fail(s);
  for (uint64_t c = c0; c <= c1; ++c) {
    const uint64_t cs = c * h.chunk_size - span_start;
    const uint64_t ce = std::min<uint64_t>(span, cs + h.chunk_size);
    if (auto s = VerifyUnitChunk(h, c, std::string_view(dst + cs, ce - cs)); !s.ok()) return fail(s);
  }
  if (!direct) std::memcpy(out, buf.get() + (offset - span_start), end - offset);
  return static_cast<size_t>(end - offset);
}

Status WriteUnitFile(int fd, std::string_view header, std::string_view data) {
  for (std::string_view part : {header, data}) {
    while (!part.empty()) {
      ssize_t w = ::write(fd, part.data(), part.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status(errno == ENOSPC || errno == EDQUOT ? Code::kNoSpace
                      : errno == EROFS                   ? Code::kReadOnly
                                                         : Code::kIoError,
                      fmt::format("unit file write: {}", std::strerror(errno)));
      }
      part.remove_prefix(static_cast<size_t>(w));
    }
  }
  return Status::Ok();
}

}  // namespace igt::cache
