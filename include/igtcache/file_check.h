// A directory given where a file is expected. std::ifstream and fopen open a
// directory on Linux and read it as empty, so a config, policy file, trace
// or listing named by a directory would be taken for an empty file (the
// defaults applied, silently). The loaders ask this first.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace igt {

inline bool IsDirectoryPath(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

}  // namespace igt
