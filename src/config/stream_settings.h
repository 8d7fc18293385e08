#pragma once
// The `stream.*` config keys applied to the access stream tree's settings.
#include "igtcache/config.h"
#include "src/stream/stream_config.h"

namespace igt {
// Defaults of StreamConfig, unit_bytes from cache.unit_size_bytes, then the
// explicitly set `stream.*` keys; validated (errors name the key).
Result<stream::StreamConfig> StreamConfigFrom(const Config& c);
}  // namespace igt
