#pragma once
// What yaml-cpp takes without a word, and the config file and the policy
// file both reject, naming the line:
// - duplicate keys: yaml-cpp keeps every pair of a mapping, so
//   `max_bytes: 1G` followed by `max_bytes: 2G` would load, one of the two
//   winning; also a dotted key beside the nested one (`cache.max_bytes: 1G`
//   and `cache: {max_bytes: 2G}`);
// - a second document (after `---`): YAML::Load reads the first only, so
//   whatever followed was neither applied nor checked.

#include <string>

#include <yaml-cpp/yaml.h>

#include "igtcache/status.h"

namespace igt {

// InvalidArgument "ORIGIN: line N: duplicate key 'a.b'" for the first
// repeated key found (depth first; keys compared by dotted path), else Ok.
Status RejectDuplicateKeys(const YAML::Node& node, const std::string& origin);

// The document of `text` (a null node for an empty text); InvalidArgument
// "ORIGIN: line N: a second YAML document ..." if there is more than one.
// Throws YAML::Exception on a syntax error, as YAML::Load.
Result<YAML::Node> LoadOneDocument(const std::string& text, const std::string& origin);

}  // namespace igt
