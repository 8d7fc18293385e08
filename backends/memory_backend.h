#pragma once
// MemoryBackend: an in-memory object store for unit tests of the layers above
// (Namespace, ReadPipeline, ...). Objects are key -> bytes; the ETag is a hash
// of the content (XXH3-64, hex), so Put() of new bytes changes it and Put() of
// the same bytes does not. Listing follows S3: keys sorted by bytes, any
// delimiter ("" = recursive), max_keys counts objects + prefixes, the
// continuation token is the last key returned.
// Thread-safety: every method may be called concurrently (one mutex).
//
//   auto mem = std::make_shared<igt::MemoryBackend>();
//   mem->Put("dir/a.bin", std::string(4096, 'x'));
//   igt::FaultInjectingBackend faulty(mem);   // see fault_backend.h

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "igtcache/backend.h"

namespace igt {

class MemoryBackend : public Backend {
 public:
  MemoryBackend() = default;

  // Creates or replaces an object. mtime_ns defaults to a counter that grows
  // with every Put (deterministic, no clock).
  void Put(const std::string& key, std::string bytes, int64_t mtime_ns = -1);
  // Removes an object; false if it did not exist.
  bool Delete(const std::string& key);
  void Clear();
  size_t size() const;
  // Current content (empty string if absent) and ETag ("" if absent).
  std::string Get(const std::string& key) const;
  std::string EtagOf(const std::string& key) const;

  // Makes Probe() fail with this status (Ok() restores success).
  void SetProbeStatus(Status s);

  Result<ListPage> List(const ListRequest& req) override;
  Result<ObjectInfo> Stat(const std::string& key) override;
  Result<size_t> Read(const std::string& key, uint64_t offset, size_t length, std::string_view etag,
                      char* out) override;
  Status Probe() override;
  std::string Describe() const override { return "memory://"; }

  // ETag of a byte string as MemoryBackend computes it.
  static std::string ContentEtag(std::string_view bytes);

 private:
  struct Object {
    std::string bytes;
    std::string etag;
    int64_t mtime_ns = 0;
  };
  mutable std::mutex mu_;             // guards everything below; leaf lock
  std::map<std::string, Object> objects_;
  int64_t next_mtime_ns_ = 1'000'000'000;
  Status probe_status_;
};

}  // namespace igt
