// libFuzzer target: the YAML config loader (igt::ParseConfig + Validate).
// Property: never crashes, hangs or leaks on any input; errors are Status.
#include <cstddef>
#include <cstdint>
#include <string>

#include "igtcache/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = igt::ParseConfig(text, "fuzz.yaml");
  if (c) {
    (void)igt::Validate(*c);
  } else if (c.error().message().empty()) {
    __builtin_trap();  // an error must say what is wrong
  }
  return 0;
}
