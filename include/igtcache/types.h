#pragma once
// Plain value types shared by every layer: object metadata and listing pages.
// Keys are always relative to the mounted source root ("dir/file.jpg", no
// leading slash); a backend applies its own bucket prefix internally.

#include <cstdint>
#include <string>
#include <vector>

namespace igt {

struct ObjectInfo {
  std::string key;        // relative to the source root, no leading '/'
  uint64_t size = 0;      // bytes
  int64_t mtime_ns = 0;   // last modified, ns since the epoch
  std::string etag;       // opaque version id; changes whenever the bytes change
  // The key whose bytes these are, when another key holds them (a file://
  // source's symbolic link, or a file under a linked directory: the
  // target's path in the source); empty: `key` itself. Names of one object
  // share one cached copy and one fetch (docs/SEMANTICS.md, "Names").
  std::string data_key;
};

struct ListPage {
  std::vector<ObjectInfo> objects;    // keys directly under the prefix (with delimiter)
  std::vector<std::string> prefixes;  // common prefixes, full keys ending in '/'
  std::string next_token;             // empty when this is the last page
};

}  // namespace igt
