#pragma once
// Internal helpers of the local-directory backend (file://), exposed for
// tests. The backend itself is created with igt::MakeLocalBackend().
// The directory tree is the bucket: files are objects, directories are
// prefixes ("sub/"). Symlinks are followed only while they stay inside the
// root; sockets, FIFOs and devices are invisible. Thread-safety: pure helpers;
// the backend object is safe to use from many threads (it has no mutable state).

#include <cstdint>
#include <string>
#include <string_view>

#include "igtcache/status.h"

namespace igt::local {

// Rejects keys that could escape the root: absolute, containing NUL, or a
// ".." segment (InvalidArgument). Empty keys are rejected as well.
Status ValidateKey(std::string_view key);

// The ETag of a local file: hex "<size>-<mtime_ns>-<inode>-<btime_ns>". Any
// write (new mtime), truncate (size) or replace-by-rename (inode) changes
// it; the birth time (statx; 0 where the file system keeps none) also tells
// a new file that reused a freed inode number and got its mtime set back
// (tar, `cp -p` of a new file, `touch -r`) from the one it replaced. Not
// ctime: a chmod or chown would then fail every open reader of the file.
std::string Etag(uint64_t size, int64_t mtime_ns, uint64_t inode, int64_t btime_ns);

}  // namespace igt::local
