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

// `text` with control characters and backslashes as \xNN: for the terminal
// or a log line (an object key or a trace's path may hold an escape sequence).
std::string Escaped(std::string_view text);

// Exit codes, documented in docs/CLI.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;   // runtime failure (backend, mount, cache dir)
inline constexpr int kExitUsage = 2;   // bad command line or config

}  // namespace igt
