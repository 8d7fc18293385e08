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

// The ETag of a local file: hex "<size>-<mtime_ns>-<inode>-<ctime_ns>". Any
// write (new mtime), truncate (size) or replace-by-rename (inode) changes
// it; ctime, which no user can set, also catches a rewrite whose mtime was
// set back (`cp -p`, `touch -r`, tar) onto a reused inode number. (A chmod
// changes it too: the file is then fetched again, never served stale.)
std::string Etag(uint64_t size, int64_t mtime_ns, uint64_t inode, int64_t ctime_ns);

}  // namespace igt::local
