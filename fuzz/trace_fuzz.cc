// libFuzzer target: trace CSV rows (igt::stream::ParseTraceRow).
// Property: never crashes; a row that parses, written back with
// AppendTraceRow, parses to the same record (round trip).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/stream/trace.h"

using igt::stream::TraceRecord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (!in.empty()) {
    auto nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
    TraceRecord r;
    if (!igt::stream::ParseTraceRow(line, r).ok()) continue;
    std::string row;
    igt::stream::AppendTraceRow(row, r.time_us, r.pid, r.path, r.offset, r.length, r.file_size);
    if (row.empty() || row.back() != '\n') __builtin_trap();
    row.pop_back();
    TraceRecord back;
    if (!igt::stream::ParseTraceRow(row, back).ok()) __builtin_trap();
    if (back.time_us != r.time_us || back.pid != r.pid || back.path != r.path || back.offset != r.offset ||
        back.length != r.length || back.file_size != r.file_size)
      __builtin_trap();
  }
  return 0;
}
