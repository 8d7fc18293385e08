// libFuzzer target: S3 XML replies (ListObjectsV2 pages, error documents).
// Property: never crashes; a parsed page has no empty keys unless the input
// had one (we only check for crashes and sanitizer reports here).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backends/s3/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  auto page = igt::s3::ParseListObjectsV2(xml);
  if (page) {
    size_t n = 0;
    for (const auto& o : page->objects) n += o.key.size();
    for (const auto& p : page->prefixes) n += p.size();
    (void)n;
  }
  (void)igt::s3::ParseErrorXml(xml);
  (void)igt::s3::ParseIso8601Ns(xml.substr(0, 64));
  return 0;
}
