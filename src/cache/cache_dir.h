#pragma once
// Cache directory plumbing: private directory creation/checks, the LOCK file
// that keeps a second daemon out, and small file helpers. Every path we create
// gets an explicit chmod (0700 dirs, 0600 files) so the modes do not depend on
// the process umask.
// Thread-safety: plain functions on paths; reentrant.

#include <string>

#include "igtcache/status.h"

namespace igt::cache {

inline constexpr unsigned kDirMode = 0700;
inline constexpr unsigned kFileMode = 0600;

// Creates `dir` (and missing parents) 0700, or checks an existing one: it must
// be a directory owned by this user and not world-writable
// (PermissionDenied otherwise). Errors name the path and the errno text.
Status EnsureCacheDir(const std::string& dir);
// Creates a private subdirectory (0700) if absent; chmods it 0700 if it is ours.
Status EnsurePrivateSubdir(const std::string& path);
// mkdir(path, 0700) + chmod; Ok if it already exists.
Status MakeDirIfMissing(const std::string& path);

// Takes flock(LOCK_EX|LOCK_NB) on <dir>/LOCK and writes our pid into it.
// Returns the fd holding the lock (close it to release). Busy, naming the
// holder's pid, if another process -- or another open in this process; flock
// belongs to the open file description -- holds it.
Result<int> LockCacheDir(const std::string& dir);

// The file that makes a directory an igtcache cache dir (ClaimCacheDir).
inline constexpr const char* kMarkerName = "IGTCACHE";

// Makes sure `dir` (checked by EnsureCacheDir) is igtcache's before anything
// in it is deleted: it holds kMarkerName, or is a cache dir of a version
// before the marker (index/CURRENT and LOCK), or holds nothing but an empty
// tmp/ or units/, LOCK, igtcache.log and lost+found (the root of a volume
// of its own). The marker is then written.
// InvalidArgument naming an entry otherwise: a user's directory given as
// the cache dir (the store clears tmp/ and deletes unknown files in units/).
Status ClaimCacheDir(const std::string& dir);

// Removes every entry directly in `dir` (files; subdirectories recursively).
Status ClearDir(const std::string& dir);

// "strerror(errno)" text for messages.
std::string ErrnoText(int err);

}  // namespace igt::cache
