#pragma once
// ListingCache: directory listings converted for the engine's ListingFn
// (ListedFile paths), kept for the few directories read most recently.
//
// The engine asks for the listing of the directory of the file being read
// (next files of a scan) on nearly every first read of a small file. With one
// converted listing kept, two scans in two directories (two jobs, or workers
// split by class directory) converted a whole listing on every read, under
// the engine's lock: O(entries) per read. Now up to kMaxListings listings and
// kMaxEntries entries in all are kept, least recently used dropped first;
// the two most recent always stay, whatever their size. A listing is converted again only
// when its source changed (a refresh) or it was dropped.
//
// Thread-safety: none (the caller's lock: the engine's). Ownership: keeps the
// source of each kept listing alive (so its identity cannot be reused).

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "igtcache/policy.h"

namespace igt::engine {

class ListingCache {
 public:
  static constexpr size_t kMaxListings = 16;
  static constexpr size_t kMaxEntries = size_t{1} << 18;

  // The listing of `dir` whose source is `src`, converted by `convert` if not
  // kept. Valid until the next call.
  const std::vector<ListedFile>* Get(const std::string& dir, std::shared_ptr<const void> src,
                                     const std::function<std::vector<ListedFile>()>& convert);
  size_t conversions() const { return conversions_; }
  size_t kept() const { return slots_.size(); }

 private:
  struct Slot {
    std::string dir;
    std::shared_ptr<const void> src;
    std::vector<ListedFile> files;
  };
  std::list<Slot> slots_;  // front: most recently used
  size_t entries_ = 0;
  size_t conversions_ = 0;
};

}  // namespace igt::engine
