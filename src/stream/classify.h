#pragma once
// Offline classification of a read trace (`igtcache classify --trace FILE`):
// replays the trace through the same AccessStreamTree and detectors the live
// mount uses and returns the streams as JSON (see StreamsToJson).
//
// ReplayTrace makes two passes over the file: the first validates every row
// and counts each directory's distinct children (the trace's stand-in for a
// directory listing, N of the uniformity test); the second records every row.
// Thread-safety: the functions are reentrant; the tree passed in may be
// shared with other threads.

#include <string>

#include <nlohmann/json.hpp>

#include "igtcache/status.h"
#include "src/stream/access_stream_tree.h"
#include "src/stream/stream_config.h"

namespace igt::stream {

// Errors: NotFound/IoError for the file, InvalidArgument "<file>:<line>: <what>"
// for a malformed row (nothing is recorded then). `listing_path` (optional,
// docs/TRACES.md "Listings"): objects the trace does not read count as
// their directories' children too, as a mount's listings make them.
Status ReplayTrace(const std::string& trace_path, AccessStreamTree& tree, const std::string& listing_path = {});

// Validates `cfg`, replays the trace, re-tests every stream with new samples,
// and returns {"streams": [...]} for every node with >= min_samples samples.
Result<nlohmann::json> ClassifyTrace(const std::string& trace_path, const StreamConfig& cfg,
                                     const std::string& listing_path = {});

}  // namespace igt::stream
