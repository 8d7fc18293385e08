#pragma once
// Status and Result<T>: the error currency across every module boundary.
//
// A Status is a small value (code + message). Errors carry their meaning from
// where the failure is understood; the FUSE layer maps Code -> errno through a
// single table (fuse/errno_map.h). Result<T> is std::expected<T, Status>.
// Thread-safety: plain values.

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace igt {

enum class Code {
  kOk = 0,
  kNotFound,          // object/key/path does not exist            -> ENOENT
  kInvalidArgument,   // bad input from the user or a caller         -> EINVAL
  kPermissionDenied,  // credentials refused, dir not ours           -> EACCES
  kIoError,           // local or remote I/O failed (after retries)  -> EIO
  kUnavailable,       // backend unreachable / retry budget spent    -> EIO
  kTimeout,           // deadline exceeded                           -> ETIMEDOUT
  kCorruption,        // checksum/header mismatch, malformed reply   -> EIO
  kNoSpace,           // cache volume full or over its limit         -> ENOSPC
  kChanged,           // object's ETag differs from the expected one -> ESTALE
  kBusy,              // resource held by someone else (lock)        -> EBUSY
  kNotSupported,      // operation not supported                     -> ENOTSUP
  kReadOnly,          // write attempted on the read-only mount      -> EROFS
  kInternal,          // a bug                                       -> EIO
};

std::string_view CodeName(Code c);

// The backend could not answer (its retries spent): unreachable, timed out,
// a server error. Not an answer about the object (not found, changed), nor a
// refusal (credentials): what a stale listing, a cached unit, or a moment's
// patience can stand in for.
inline bool BackendUnreachable(Code c) { return c == Code::kUnavailable || c == Code::kIoError || c == Code::kTimeout; }

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status Changed(std::string m) { return {Code::kChanged, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status NotSupported(std::string m) { return {Code::kNotSupported, std::move(m)}; }
  static Status ReadOnly(std::string m) { return {Code::kReadOnly, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotFound: no such key 'a/b'"
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

template <class T>
using Result = std::expected<T, Status>;

inline std::unexpected<Status> Err(Status s) { return std::unexpected<Status>(std::move(s)); }

}  // namespace igt
