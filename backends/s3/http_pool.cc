#include "backends/s3/http_pool.h"

#include <curl/curl.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <array>
#include <cctype>
#include <cstring>

namespace igt::s3 {
namespace {

std::once_flag g_curl_init;

// Success bodies without a sink (ListObjectsV2 XML) are bounded too: a page
// of 1,000 keys of 1 KiB each is ~1.5 MB, so 64 MiB is generous.
constexpr size_t kMaxUnsunkBody = 64u << 20;

struct TransferCtx {
  CURL* handle = nullptr;
  const HttpRequest* req = nullptr;
  HttpResponse* resp = nullptr;
  bool decided = false;  // whether this response's body goes to the sink
  bool to_sink = false;
  // The stall check (OnProgress).
  const HttpPool* pool = nullptr;
  std::chrono::milliseconds stall_limit{0};
  std::chrono::steady_clock::time_point last_byte{};     // when the bytes moved last grew
  std::chrono::steady_clock::time_point window_start{};  // the current check window's
  curl_off_t moved = 0;                                   // bytes down and up so far
  curl_off_t window_bytes = 0;                            // `moved` at window_start
  bool stalled = false;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* ctx = static_cast<TransferCtx*>(user);
  std::string_view line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) {  // a new response (e.g. after 100 Continue)
    ctx->resp->headers.clear();
    ctx->decided = false;
    return size * n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  ctx->resp->headers[name] = std::string(value);
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* ctx = static_cast<TransferCtx*>(user);
  size_t len = size * n;
  if (!ctx->decided) {
    long status = 0;
    curl_easy_getinfo(ctx->handle, CURLINFO_RESPONSE_CODE, &status);
    ctx->to_sink = ctx->req->sink != nullptr && (status == 200 || status == 206);
    ctx->decided = true;
  }
  HttpResponse& r = *ctx->resp;
  if (ctx->to_sink) {
    if (len > ctx->req->sink_capacity - r.sink_bytes) {
      r.overflow = true;
      return 0;  // aborts the transfer with CURLE_WRITE_ERROR
    }
    std::memcpy(ctx->req->sink + r.sink_bytes, data, len);
    r.sink_bytes += len;
    return len;
  }
  long status = 0;
  curl_easy_getinfo(ctx->handle, CURLINFO_RESPONSE_CODE, &status);
  size_t cap = (status >= 200 && status < 300) ? kMaxUnsunkBody : HttpPool::kMaxErrorBody;
  if (r.body.size() < cap) r.body.append(data, std::min(len, cap - r.body.size()));
  if (status >= 200 && status < 300 && r.body.size() >= cap) {
    r.overflow = true;
    return 0;
  }
  return len;
}

// Non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK).
// Aborts a cancelled transfer, and a stalled one: no byte moved for the
// stall limit, or under kStallBytesPerS on average over a window of it.
// libcurl's own low-speed check (kept as a backstop) averages over its last
// few seconds, so a transfer that stopped dead after a fast start was
// aborted up to 6 s past the limit (a tester: 8.5-9 s with 2 s).
int OnProgress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t ulnow) {
  auto* ctx = static_cast<TransferCtx*>(user);
  if (ctx->pool->cancelled()) return 1;
  const auto now = std::chrono::steady_clock::now();
  if (dlnow + ulnow > ctx->moved) {
    // The average's windows start at the first byte: connect and time to
    // first byte are the "no byte" rule's (else a small reply whose bytes
    // began late was failed as slow, a review's finding).
    if (ctx->moved == 0) ctx->window_start = now;
    ctx->moved = dlnow + ulnow;
    ctx->last_byte = now;
  }
  bool stalled = now - ctx->last_byte >= ctx->stall_limit;
  if (!stalled && ctx->moved > 0 && now - ctx->window_start >= ctx->stall_limit) {
    const auto window_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - ctx->window_start).count();
    stalled = ctx->moved - ctx->window_bytes < kStallBytesPerS * window_ms / 1000;
    ctx->window_start = now;
    ctx->window_bytes = ctx->moved;
  }
  if (!stalled) return 0;
  ctx->stalled = true;
  return 1;
}

}  // namespace

struct HttpPool::Share {
  CURLSH* sh = nullptr;
  std::array<std::mutex, CURL_LOCK_DATA_LAST> locks;  // one per curl_lock_data

  static void Lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
    static_cast<Share*>(user)->locks[data].lock();
  }
  static void Unlock(CURL*, curl_lock_data data, void* user) {
    static_cast<Share*>(user)->locks[data].unlock();
  }
};

HttpPool::HttpPool(HttpPoolOptions opts) : opts_(std::move(opts)), share_(std::make_unique<Share>()) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (opts_.max_connections < 1) opts_.max_connections = 1;
  share_->sh = curl_share_init();
  if (share_->sh) {
    curl_share_setopt(share_->sh, CURLSHOPT_LOCKFUNC, &Share::Lock);
    curl_share_setopt(share_->sh, CURLSHOPT_UNLOCKFUNC, &Share::Unlock);
    curl_share_setopt(share_->sh, CURLSHOPT_USERDATA, share_.get());
    curl_share_setopt(share_->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
}

HttpPool::~HttpPool() {
  // Every borrowed handle has been released: Perform() is synchronous.
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
  if (share_->sh) curl_share_cleanup(share_->sh);
}

void HttpPool::Cancel() {
  {
    std::lock_guard lock(mu_);  // so a waiter in Acquire() cannot miss it
    cancelled_ = true;
  }
  cv_.notify_all();
}

// Returns nullptr once cancelled.
void* HttpPool::Acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return cancelled() || !idle_.empty() || created_ < opts_.max_connections; });
  if (cancelled()) return nullptr;
  if (!idle_.empty()) {
    void* h = idle_.back();
    idle_.pop_back();
    return h;
  }
  ++created_;
  lock.unlock();
  CURL* h = curl_easy_init();
  if (!h) {
    lock.lock();
    --created_;
    cv_.notify_one();
  }
  return h;
}

void HttpPool::Release(void* handle) {
  {
    std::lock_guard lock(mu_);
    idle_.push_back(handle);
  }
  cv_.notify_one();
}

HttpResponse HttpPool::Perform(const HttpRequest& req) {
  HttpResponse resp;
  CURL* h = static_cast<CURL*>(Acquire());
  if (!h) {
    const bool c = cancelled();
    resp.curl_code = c ? CURLE_ABORTED_BY_CALLBACK : CURLE_FAILED_INIT;
    resp.curl_error = c ? kCancelledMessage : "curl_easy_init failed";
    return resp;
  }
  curl_easy_reset(h);  // keeps live connections, DNS and TLS session caches
  char errbuf[CURL_ERROR_SIZE] = {0};
  TransferCtx ctx{h, &req, &resp};
  ctx.pool = this;
  ctx.last_byte = ctx.window_start = std::chrono::steady_clock::now();

  curl_slist* hdrs = nullptr;
  for (const auto& [name, value] : req.headers) {
    hdrs = curl_slist_append(hdrs, (name + ": " + value).c_str());
  }
  hdrs = curl_slist_append(hdrs, "Expect:");  // no 100-continue round trip on PUT

  const int timeout_ms = req.request_timeout_ms > 0 ? req.request_timeout_ms : opts_.request_timeout_ms;
  long stall_s = std::max(1, (timeout_ms + 999) / 1000);
  ctx.stall_limit = std::chrono::milliseconds(std::max(1, req.stall_ms > 0 ? std::min(req.stall_ms, timeout_ms) : timeout_ms));
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  // The path goes out as signed: curl would otherwise squash "/./" and
  // "/../" segments of a key, and request (or sign) another one.
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts_.connect_timeout_ms));
  // A stalled transfer (under kStallBytesPerS for request_timeout_ms) is
  // aborted. The whole-transfer cap grows with the bytes expected, so a
  // large ranged GET on a slow link is not aborted and restarted from zero
  // while it makes progress (at kMinAvgBytesPerS it still ends).
  const uint64_t expect = req.sink ? req.sink_capacity : 0;
  const uint64_t total_ms = uint64_t(timeout_ms) + expect * 1000 / kMinAvgBytesPerS;
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::min<uint64_t>(total_ms, LONG_MAX)));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, kStallBytesPerS);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall_s);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  if (share_->sh) curl_easy_setopt(h, CURLOPT_SHARE, share_->sh);
  if (!opts_.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, opts_.ca_bundle.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &ctx);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &ctx);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &OnProgress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &ctx);
  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method == "PUT") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.upload.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.upload.size()));
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  CURLcode rc = curl_easy_perform(h);
  resp.curl_code = static_cast<int>(rc);
  if (rc == CURLE_ABORTED_BY_CALLBACK && cancelled()) {
    resp.curl_error = kCancelledMessage;
  } else if (rc == CURLE_ABORTED_BY_CALLBACK && ctx.stalled) {
    // A timeout, as libcurl's own low-speed abort is (retried as one).
    resp.curl_code = static_cast<int>(CURLE_OPERATION_TIMEDOUT);
    resp.curl_error = fmt::format("stalled: less than {} bytes/s for {} ms, {} bytes moved", kStallBytesPerS,
                                  ctx.stall_limit.count(), static_cast<long long>(ctx.moved));
  } else if (rc != CURLE_OK) {
    resp.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    while (!resp.curl_error.empty() && resp.curl_error.back() == '\n') resp.curl_error.pop_back();
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &resp.new_connections);
  // The handle must not keep pointers into this call's stack.
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(hdrs);
  if (req.keep_connection && !req.keep_connection(resp)) {
    curl_easy_cleanup(h);  // closes its connections: nothing stray is read later
    {
      std::lock_guard lock(mu_);
      --created_;
    }
    cv_.notify_one();
    return resp;
  }
  Release(h);
  return resp;
}

}  // namespace igt::s3
