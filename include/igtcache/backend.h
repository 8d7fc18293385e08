#pragma once
// The object-store interface every source implements (backends/): a local
// directory (file://), S3 (s3://), and test decorators that inject latency and
// faults. All calls are blocking and safe to call from many threads at once.
// Keys are relative to the source root (the backend applies bucket/prefix).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "igtcache/status.h"
#include "igtcache/types.h"

namespace igt {

struct Metrics;

struct ListRequest {
  std::string prefix;              // "" for the root, else ends with '/' for a dir
  std::string delimiter = "/";     // "" lists recursively
  std::string continuation_token;  // from the previous page's next_token
  int max_keys = 1000;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // One page of a listing. Objects and prefixes are full keys relative to the
  // source root. NotFound is never returned for an empty prefix: empty page.
  virtual Result<ListPage> List(const ListRequest& req) = 0;

  // Metadata of one object; Code::kNotFound if absent.
  virtual Result<ObjectInfo> Stat(const std::string& key) = 0;

  // Reads [offset, offset + length) into `out` (which has room for `length`
  // bytes) and returns the number of bytes read, which is short only at the
  // end of the object. If `etag` is non-empty and the object's current ETag
  // differs, returns Code::kChanged and no bytes are trusted.
  virtual Result<size_t> Read(const std::string& key, uint64_t offset, size_t length,
                              std::string_view etag, char* out) = 0;

  // Checks at mount time that the source exists and is readable, with an
  // error that names the problem (no such bucket, bad credentials, endpoint
  // unreachable). Cheap: one request.
  virtual Status Probe() = 0;

  // Probe() with one attempt and a short timeout (kQuickProbeMs): asked
  // first when a mount starts, so that a restart during an outage can come
  // up on the cache dir's saved listings without waiting out the retry
  // budget; Probe() is asked after it failed when the cache dir holds
  // nothing to serve. Sources that never block for long need not act.
  virtual Status QuickProbe() { return Probe(); }
  static constexpr int kQuickProbeMs = 5000;

  // The mount came up on its cache dir because the source did not answer
  // QuickProbe: later requests fail fast (one short attempt) until the
  // source answers one, instead of each waiting out the retry budget.
  // Sources that never block for long need not act.
  virtual void NoteUnreachable() {}

  // "file:///data", "s3://bucket/prefix @ http://127.0.0.1:9000": for logs
  // and stats. Never contains credentials.
  virtual std::string Describe() const = 0;

  // The mount is going away: calls in flight end soon (a transfer aborts, a
  // wait between retries ends) and later calls fail at once, all with
  // Code::kUnavailable, so that an unmount or a SIGTERM during an outage does
  // not wait out the retry budget. Irreversible; safe from any thread.
  // Sources that never block for long (a local directory) need not act.
  virtual void Cancel() {}
};

}  // namespace igt
