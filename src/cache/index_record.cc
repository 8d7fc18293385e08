#include "src/cache/index_record.h"

#include <xxhash.h>

#include "src/cache/unit_file.h"

namespace igt::cache {
namespace {

constexpr uint8_t kRecordVersion = 1;
constexpr uint8_t kInlineRecordVersion = 2;
constexpr uint8_t kAccessVersion = 1;

void PutLe(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void PutStr(std::string& s, std::string_view v) {
  PutLe(s, v.size(), 4);
  s += v;
}

struct Reader {
  std::string_view in;
  bool ok = true;
  uint64_t Le(int n) {
    if (in.size() < size_t(n)) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
    in.remove_prefix(n);
    return v;
  }
  std::string Str() {
    const uint64_t n = Le(4);
    if (!ok || in.size() < n) {
      ok = false;
      return {};
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
};

}  // namespace

std::string EncodeUnitRecord(const UnitRecord& r) {
  std::string s;
  s.reserve(80 + r.key.object.size() + r.key.etag.size() + r.rel_path.size() + r.inline_data.size());
  PutLe(s, r.is_inline ? kInlineRecordVersion : kRecordVersion, 1);
  PutStr(s, r.key.object);
  PutStr(s, r.key.etag);
  PutLe(s, r.key.index, 8);
  PutLe(s, r.data_len, 8);
  PutStr(s, r.rel_path);
  PutLe(s, r.last_access_us, 8);
  PutLe(s, r.access_count, 8);
  if (r.is_inline) {
    PutLe(s, XXH3_64bits(r.inline_data.data(), r.inline_data.size()), 8);
    PutStr(s, r.inline_data);
  }
  return s;
}

std::optional<UnitRecord> DecodeUnitRecord(std::string_view bytes) {
  Reader rd{bytes};
  const uint64_t version = rd.Le(1);
  if (version != kRecordVersion && version != kInlineRecordVersion) return std::nullopt;
  UnitRecord r;
  r.is_inline = version == kInlineRecordVersion;
  r.key.object = rd.Str();
  r.key.etag = rd.Str();
  r.key.index = rd.Le(8);
  r.data_len = rd.Le(8);
  r.rel_path = rd.Str();
  r.last_access_us = rd.Le(8);
  r.access_count = rd.Le(8);
  if (r.is_inline) {
    const uint64_t sum = rd.Le(8);
    r.inline_data = rd.Str();
    if (!r.rel_path.empty() || r.inline_data.size() != r.data_len) return std::nullopt;
    r.inline_data_ok = XXH3_64bits(r.inline_data.data(), r.inline_data.size()) == sum;
  }
  if (!rd.ok || !rd.in.empty()) return std::nullopt;
  return r;
}

UnitRecord InlineUnitRecord(const UnitKey& key, std::string_view data, uint64_t last_access_us) {
  UnitRecord r;
  r.key = key;
  r.data_len = data.size();
  r.last_access_us = last_access_us;
  r.is_inline = true;
  r.inline_data = data;
  r.inline_data_ok = true;
  return r;
}

UnitRecord FileUnitRecord(const UnitKey& key, uint64_t data_len, std::string rel_path, uint64_t last_access_us) {
  UnitRecord r;
  r.key = key;
  r.data_len = data_len;
  r.rel_path = std::move(rel_path);
  r.last_access_us = last_access_us;
  return r;
}

uint64_t InlineDiskBytesAtMost(uint64_t data_len, size_t object_key_bytes) {
  // version, object, etag, index, data_len, rel_path (empty), last access,
  // count, checksum, data: EncodeUnitRecord's fields.
  return InlineRecordDiskBytes(1 + 4 + object_key_bytes + 4 + kMaxEtagBytes + 8 + 8 + 4 + 8 + 8 + 8 + 4 + data_len);
}

uint64_t CachedObjectDiskBytesAtMost(uint64_t size, uint64_t unit, uint64_t inline_max, size_t object_key_bytes) {
  auto one = [&](uint64_t n) {
    return inline_max > 0 && n <= inline_max ? InlineDiskBytesAtMost(n, object_key_bytes) : UnitDiskBytesAtMost(n);
  };
  if (size == 0) return 0;  // nothing to read, nothing cached
  if (unit == 0 || size <= unit) return one(size);
  const uint64_t rest = size % unit;
  return size / unit * one(unit) + (rest ? one(rest) : 0);
}

uint64_t InlineRecordDiskBytes(size_t value_bytes) {
  return kUnitKeyPrefix.size() + 32 + value_bytes;  // "u/" + the 32 hex digits of the id
}

std::string EncodeAccessState(const AccessState& a) {
  std::string s;
  s.reserve(17);
  PutLe(s, kAccessVersion, 1);
  PutLe(s, a.last_access_us, 8);
  PutLe(s, a.access_count, 8);
  return s;
}

std::optional<AccessState> DecodeAccessState(std::string_view bytes) {
  Reader rd{bytes};
  if (rd.Le(1) != kAccessVersion) return std::nullopt;
  AccessState a;
  a.last_access_us = rd.Le(8);
  a.access_count = rd.Le(8);
  if (!rd.ok || !rd.in.empty()) return std::nullopt;
  return a;
}

}  // namespace igt::cache
