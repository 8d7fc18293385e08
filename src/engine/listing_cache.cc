#include "src/engine/listing_cache.h"

namespace igt::engine {

const std::vector<ListedFile>* ListingCache::Get(const std::string& dir, std::shared_ptr<const void> src,
                                                 const std::function<std::vector<ListedFile>()>& convert) {
  for (auto it = slots_.begin(); it != slots_.end(); ++it) {
    if (it->dir != dir) continue;
    if (it->src == src) {
      slots_.splice(slots_.begin(), slots_, it);
      return &slots_.front().files;
    }
    entries_ -= it->files.size();  // refreshed since: converted again
    slots_.erase(it);
    break;
  }
  ++conversions_;
  slots_.push_front(Slot{dir, std::move(src), convert()});
  entries_ += slots_.front().files.size();
  // The two most recent always stay: two scans in two directories larger
  // than kMaxEntries would otherwise convert each on every read.
  while (slots_.size() > 2 && (slots_.size() > kMaxListings || entries_ > kMaxEntries)) {
    entries_ -= slots_.back().files.size();
    slots_.pop_back();
  }
  return &slots_.front().files;
}

}  // namespace igt::engine
