#pragma once
// `igtcache mount`: assembles backend -> BlockStore -> Namespace ->
// ReadPipeline -> FuseFs in that order and tears them down in reverse.
#include <string>
#include <string_view>
#include <vector>

#include "igtcache/config.h"

namespace igt {

struct MountArgs {
  std::string source;
  std::string mountpoint;
  std::string config_path;
  std::string cache_dir, cache_size, endpoint, region, profile, addressing, log_level, log_file;
  std::string trace_out;
  std::string metrics_addr;  // --metrics-addr (metrics.addr)
  std::string expected_bucket_owner;  // --expected-bucket-owner (backend.expected_bucket_owner)
  bool requester_pays = false;        // --requester-pays (backend.requester_pays)
  std::vector<std::string> fuse_opts;
  bool foreground = false;
};

// Returns the process exit code. Errors are printed as one line on stderr.
int RunMount(const MountArgs& a);

// Text for a log line or the user's terminal with its control characters
// and backslashes escaped (\xNN): an object key, a trace's path or an S3
// server's error message may hold a newline or an escape sequence, and must
// not forge a log line or drive the terminal showing it.
template <class Out>
void AppendEscaped(std::string_view text, Out& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f && c != '\\') {  // a backslash too: told apart from an escape
      out.push_back(c);
      continue;
    }
    const char esc[4] = {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    out.append(esc, esc + 4);
  }
}
// `text` escaped as AppendEscaped does (ops_common.cc).
std::string Escaped(std::string_view text);
// Prints "igtcache: error: <message>\n" to stderr, the message escaped.
void PrintError(std::string_view message);

// Exit codes, documented in docs/CLI.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;   // runtime failure (backend, mount, cache dir)
inline constexpr int kExitUsage = 2;   // bad command line or config

}  // namespace igt
