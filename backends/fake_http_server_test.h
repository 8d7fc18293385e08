#pragma once
// Test-only: a scripted in-process HTTP server on 127.0.0.1 (the S3 backend's
// and the credential providers' tests). One request per connection.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace igt::testing {

// Binds `fd` (a TCP socket) to a free port of 127.0.0.1: the port.
inline uint16_t BindLoopback(int fd) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// One request per connection; replies come from a FIFO script (an empty
// script answers 500). Records each request's head (request line + headers).
class FakeServer {
 public:
  FakeServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    port_ = BindLoopback(fd_);
    REQUIRE(::listen(fd_, 16) == 0);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void Push(std::string raw) {
    std::lock_guard l(mu_);
    script_.push_back(std::move(raw));
  }
  std::vector<std::string> requests() {
    std::lock_guard l(mu_);
    return requests_;
  }
  // The bodies of the requests (as long as their Content-Length says), in
  // the order of requests().
  std::vector<std::string> bodies() {
    std::lock_guard l(mu_);
    return bodies_;
  }

  static std::string Reply(int status, const std::vector<std::string>& headers, const std::string& body,
                           bool auto_length = true) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " X\r\nConnection: close\r\n";
    for (const auto& h : headers) r += h + "\r\n";
    if (auto_length) r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    return r + "\r\n" + body;
  }

 private:
  // The body after the head: what came with it, then up to Content-Length.
  static std::string ReadBody(int c, const std::string& head, size_t body_at) {
    std::string lower = head.substr(0, body_at);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const size_t k = lower.find("\r\ncontent-length:");
    if (k == std::string::npos) return {};
    const size_t want = std::strtoul(lower.c_str() + k + 17, nullptr, 10);
    std::string body = head.substr(body_at);
    char buf[4096];
    while (body.size() < want) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      body.append(buf, static_cast<size_t>(n));
    }
    return body;
  }
  void Loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<size_t>(n));
      }
      std::string reply;
      {
        std::lock_guard l(mu_);
        const size_t hend = head.find("\r\n\r\n");
        requests_.push_back(head.substr(0, hend));
        bodies_.push_back(hend == std::string::npos ? std::string() : ReadBody(c, head, hend + 4));
        if (script_.empty()) {
          reply = Reply(500, {}, "<Error><Code>InternalError</Code><Message>unscripted</Message></Error>");
        } else {
          reply = std::move(script_.front());
          script_.pop_front();
        }
      }
      // "STALL:" replies send their bytes, then go quiet until the client
      // gives up (or the server stops).
      bool stall = reply.starts_with("STALL:");
      if (stall) reply.erase(0, 6);
      // "SLOW:" replies go out at 100 KB/s (10 KB every 100 ms).
      const bool slow = reply.starts_with("SLOW:");
      if (slow) reply.erase(0, 5);
      size_t off = 0;
      while (off < reply.size() && !stop_) {
        const size_t chunk = slow ? std::min<size_t>(10'000, reply.size() - off) : reply.size() - off;
        ssize_t n = ::send(c, reply.data() + off, chunk, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
        if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      while (stall && !stop_) {
        pollfd cp{c, POLLIN, 0};
        if (::poll(&cp, 1, 20) > 0) {
          char tmp[256];
          if (::recv(c, tmp, sizeof tmp, 0) <= 0) break;  // client hung up
        }
      }
      ::shutdown(c, SHUT_RDWR);
      ::close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;  // guards script_, requests_
  std::deque<std::string> script_;
  std::vector<std::string> requests_, bodies_;
};

}  // namespace igt::testing
