#pragma once
// The one table from igt::Code to the errno a FUSE reply carries.
#include <cerrno>

#include "igtcache/status.h"

namespace igt {

inline int ToErrno(Code c) {
  switch (c) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kPermissionDenied: return EACCES;
    case Code::kTimeout: return ETIMEDOUT;
    case Code::kNoSpace: return ENOSPC;
    case Code::kChanged: return ESTALE;
    case Code::kBusy: return EBUSY;
    case Code::kNotSupported: return ENOTSUP;
    case Code::kReadOnly: return EROFS;
    case Code::kIoError:
    case Code::kUnavailable:
    case Code::kCorruption:
    case Code::kInternal: return EIO;
  }
  return EIO;
}

inline int ToErrno(const Status& s) { return ToErrno(s.code()); }

}  // namespace igt
