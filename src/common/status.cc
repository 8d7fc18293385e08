#include "igtcache/status.h"

namespace igt {

std::string_view CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kPermissionDenied: return "PermissionDenied";
    case Code::kIoError: return "IoError";
    case Code::kUnavailable: return "Unavailable";
    case Code::kTimeout: return "Timeout";
    case Code::kCorruption: return "Corruption";
    case Code::kNoSpace: return "NoSpace";
    case Code::kChanged: return "Changed";
    case Code::kBusy: return "Busy";
    case Code::kNotSupported: return "NotSupported";
    case Code::kReadOnly: return "ReadOnly";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

}  // namespace igt
