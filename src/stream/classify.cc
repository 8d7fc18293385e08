#include "src/stream/classify.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "src/stream/trace.h"

namespace igt::stream {

Status ReplayTrace(const std::string& trace_path, AccessStreamTree& tree, const std::string& listing_path) {
  // Read twice (below): a pipe would be empty the second time.
  struct stat st {};
  if (::stat(trace_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return Status::InvalidArgument(fmt::format("{}: not a regular file (the trace is read twice: save a piped "
                                               "trace to a file first)", trace_path));
  // Pass 1: validate, and collect each directory's distinct children (the
  // listing's objects too).
  std::unordered_map<std::string, std::unordered_set<std::string>> children;  // dir -> child keys
  {
    auto reader = TraceReader::Open(trace_path);
    if (!reader) return reader.error();
    std::unordered_set<std::string> seen_paths;
    TraceRecord r;
    auto count = [&](const std::string& path) {
      if (!seen_paths.insert(path).second) return;
      std::string_view p = path;
      size_t pos = 0;
      while (pos < p.size()) {
        size_t slash = p.find('/', pos);
        if (slash == pos) {
          ++pos;
          continue;
        }
        const bool last = slash == std::string_view::npos;
        std::string dir(p.substr(0, pos));
        std::string key(last ? p.substr(pos) : p.substr(pos, slash - pos + 1));
        children[dir].insert(std::move(key));
        if (last) break;
        pos = slash + 1;
      }
    };
    while (true) {
      auto more = (*reader)->Next(r);
      if (!more) return more.error();
      if (!*more) break;
      count(r.path);
    }
    if (!listing_path.empty())
      if (Status s = ReadListing(listing_path, [&](std::string path, uint64_t) { count(path); }); !s.ok()) return s;
  }
  for (const auto& [dir, kids] : children) tree.NoteListing(dir, kids.size());
  children.clear();

  // Pass 2: replay.
  auto reader = TraceReader::Open(trace_path);
  if (!reader) return reader.error();
  TraceRecord r;
  while (true) {
    auto more = (*reader)->Next(r);
    if (!more) return more.error();
    if (!*more) break;
    // The bytes the file has, as a mount records them.
    tree.Record(r.time_us, r.pid, r.path, r.offset, BytesInFile(r.offset, r.length, r.file_size), r.file_size);
  }
  return Status::Ok();
}

Result<nlohmann::json> ClassifyTrace(const std::string& trace_path, const StreamConfig& cfg,
                                     const std::string& listing_path) {
  if (Status s = Validate(cfg); !s.ok()) return Err(std::move(s));
  AccessStreamTree tree(cfg);
  if (Status s = ReplayTrace(trace_path, tree, listing_path); !s.ok()) return Err(std::move(s));
  tree.RetestAll(/*only_pending=*/true);
  return StreamsToJson(tree.Snapshot());
}

}  // namespace igt::stream
