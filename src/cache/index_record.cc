#include "src/cache/index_record.h"

namespace igt::cache {
namespace {

constexpr uint8_t kRecordVersion = 1;
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
  s.reserve(64 + r.key.object.size() + r.key.etag.size() + r.rel_path.size());
  PutLe(s, kRecordVersion, 1);
  PutStr(s, r.key.object);
  PutStr(s, r.key.etag);
  PutLe(s, r.key.index, 8);
  PutLe(s, r.data_len, 8);
  PutStr(s, r.rel_path);
  PutLe(s, r.last_access_us, 8);
  PutLe(s, r.access_count, 8);
  return s;
}

std::optional<UnitRecord> DecodeUnitRecord(std::string_view bytes) {
  Reader rd{bytes};
  if (rd.Le(1) != kRecordVersion) return std::nullopt;
  UnitRecord r;
  r.key.object = rd.Str();
  r.key.etag = rd.Str();
  r.key.index = rd.Le(8);
  r.data_len = rd.Le(8);
  r.rel_path = rd.Str();
  r.last_access_us = rd.Le(8);
  r.access_count = rd.Le(8);
  if (!rd.ok || !rd.in.empty()) return std::nullopt;
  return r;
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
