#include "backends/memory_backend.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace igt {

std::string MemoryBackend::ContentEtag(std::string_view bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

void MemoryBackend::Put(const std::string& key, std::string bytes, int64_t mtime_ns) {
  std::lock_guard lock(mu_);
  Object& o = objects_[key];
  o.etag = ContentEtag(bytes);
  o.bytes = std::move(bytes);
  // Each Put advances the synthetic clock by 1 ms.
  o.mtime_ns = mtime_ns >= 0 ? mtime_ns : (next_mtime_ns_ += 1'000'000);
}

bool MemoryBackend::Delete(const std::string& key) {
  std::lock_guard lock(mu_);
  return objects_.erase(key) > 0;
}

void MemoryBackend::Clear() {
  std::lock_guard lock(mu_);
  objects_.clear();
}

size_t MemoryBackend::size() const {
  std::lock_guard lock(mu_);
  return objects_.size();
}

std::string MemoryBackend::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? std::string() : it->second.bytes;
}

std::string MemoryBackend::EtagOf(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? std::string() : it->second.etag;
}

void MemoryBackend::SetProbeStatus(Status s) {
  std::lock_guard lock(mu_);
  probe_status_ = std::move(s);
}

Result<ListPage> MemoryBackend::List(const ListRequest& req) {
  std::lock_guard lock(mu_);
  ListPage page;
  const size_t max_keys = static_cast<size_t>(std::max(req.max_keys, 1));
  const std::string& token = req.continuation_token;
  size_t emitted = 0;
  std::string last;
  auto it = objects_.lower_bound(std::max(req.prefix, token));
  for (; it != objects_.end() && it->first.starts_with(req.prefix); ++it) {
    const std::string& key = it->first;
    std::string entry_key = key;
    bool is_prefix = false;
    if (!req.delimiter.empty()) {
      auto d = key.find(req.delimiter, req.prefix.size());
      if (d != std::string::npos) {
        entry_key = key.substr(0, d + req.delimiter.size());
        is_prefix = true;
      }
    }
    if (!token.empty() && entry_key <= token) continue;
    if (is_prefix && !page.prefixes.empty() && page.prefixes.back() == entry_key) continue;
    if (emitted == max_keys) {
      page.next_token = last;
      break;
    }
    if (is_prefix) {
      page.prefixes.push_back(entry_key);
    } else {
      page.objects.push_back(ObjectInfo{key, it->second.bytes.size(), it->second.mtime_ns, it->second.etag, {}});
    }
    last = entry_key;
    ++emitted;
  }
  return page;
}

Result<ObjectInfo> MemoryBackend::Stat(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Err(Status::NotFound("no such key '" + key + "'"));
  return ObjectInfo{key, it->second.bytes.size(), it->second.mtime_ns, it->second.etag, {}};
}

Result<size_t> MemoryBackend::Read(const std::string& key, uint64_t offset, size_t length,
                                   std::string_view etag, char* out) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Err(Status::NotFound("no such key '" + key + "'"));
  const Object& o = it->second;
  if (!etag.empty() && etag != o.etag) {
    return Err(Status::Changed("key '" + key + "' changed: ETag " + o.etag + ", expected " +
                               std::string(etag)));
  }
  if (offset >= o.bytes.size()) return size_t{0};
  size_t n = std::min<uint64_t>(length, o.bytes.size() - offset);
  std::memcpy(out, o.bytes.data() + offset, n);
  return n;
}

Status MemoryBackend::Probe() {
  std::lock_guard lock(mu_);
  return probe_status_;
}

}  // namespace igt
