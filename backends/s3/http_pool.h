#pragma once
// A bounded pool of libcurl easy handles for the S3 backend. Each handle keeps
// its own keep-alive connections, so reusing handles reuses connections; DNS
// and TLS sessions are shared across handles through one CURLSH.
// Ownership: the pool owns every handle and the share; Perform() borrows a
// handle for one request and returns it. Thread-safety: Perform() may be
// called from any number of threads; at most max_connections run at once and
// the rest wait (no unbounded growth).

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace igt::s3 {

struct HttpResponse;

struct HttpRequest {
  std::string method = "GET";   // GET | HEAD | PUT | DELETE
  std::string url;              // fully encoded
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view upload;      // PUT body (tests); must outlive Perform()
  // Success bodies (200/206) go to [sink, sink + sink_capacity) when sink is
  // set, else to HttpResponse::body. Error bodies always go to
  // HttpResponse::body (capped at kMaxErrorBody).
  char* sink = nullptr;
  size_t sink_capacity = 0;
  // Optional: called after the transfer; false means the reply was malformed
  // (e.g. a body whose framing disagrees with its Content-Range), so the
  // connection may hold stray bytes: it is closed instead of being reused.
  std::function<bool(const HttpResponse&)> keep_connection;
  // > 0: this request's stall limit instead of the pool's request_timeout_ms.
  int request_timeout_ms = 0;
  // > 0 and shorter: the stall limit alone, the whole-transfer cap kept (a
  // listing in outage mode: cut off when it stalls, not when it is slow).
  int stall_ms = 0;
};

struct HttpResponse {
  int curl_code = 0;            // CURLcode; 0 = transfer completed
  std::string curl_error;       // curl's message when curl_code != 0
  long status = 0;              // HTTP status of the final response
  std::map<std::string, std::string> headers;  // lowercased names, trimmed values
  std::string body;             // see HttpRequest::sink
  size_t sink_bytes = 0;        // bytes written into the sink
  bool overflow = false;        // the server sent more than sink_capacity
  long new_connections = 0;     // connections opened for this request (0 = reused)

  const std::string* Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

struct HttpPoolOptions {
  int max_connections = 32;
  int connect_timeout_ms = 3000;
  // The stall limit: a transfer that moves no byte for this long, or less
  // than kStallBytesPerS on average over a window this long, is aborted. A whole transfer may take this
  // plus its expected bytes at kMinAvgBytesPerS.
  int request_timeout_ms = 30000;
  std::string ca_bundle;  // CURLOPT_CAINFO when non-empty ($AWS_CA_BUNDLE)
};

// Slower than this for request_timeout_ms: stalled.
inline constexpr long kStallBytesPerS = 1024;
// The slowest average a ranged GET may have before the whole-transfer cap.
inline constexpr uint64_t kMinAvgBytesPerS = 32 * 1024;

class HttpPool {
 public:
  explicit HttpPool(HttpPoolOptions opts);
  ~HttpPool();
  HttpPool(const HttpPool&) = delete;
  HttpPool& operator=(const HttpPool&) = delete;

  // Runs one request; never throws. Transport failures are in curl_code.
  HttpResponse Perform(const HttpRequest& req);

  // Aborts the transfers in flight (within about a second: libcurl's
  // progress callback runs at least that often, also while connecting) and
  // fails later ones at once, with curl_code CURLE_ABORTED_BY_CALLBACK and
  // kCancelledMessage. Irreversible; any thread.
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  static constexpr const char* kCancelledMessage = "cancelled: the mount is shutting down";

  // Error bodies beyond this are dropped (they are only parsed for Code/Message).
  static constexpr size_t kMaxErrorBody = 64 * 1024;

 private:
  struct Share;
  void* Acquire();             // CURL*
  void Release(void* handle);

  HttpPoolOptions opts_;
  std::unique_ptr<Share> share_;
  std::mutex mu_;              // guards idle_, created_; leaf lock
  std::condition_variable cv_;
  std::vector<void*> idle_;    // CURL* ready for reuse
  int created_ = 0;            // handles alive (idle + borrowed) <= max_connections
  std::atomic<bool> cancelled_{false};
};

}  // namespace igt::s3
