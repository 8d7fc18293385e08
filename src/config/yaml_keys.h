#pragma once
// Duplicate keys in a YAML mapping. yaml-cpp keeps every pair of a mapping,
// so `max_bytes: 1G` followed by `max_bytes: 2G` would load without a word,
// one of the two winning. The config file and the policy file both reject
// them, naming the key (dotted path) and its line.

#include <string>

#include <yaml-cpp/yaml.h>

#include "igtcache/status.h"

namespace igt {

// InvalidArgument "ORIGIN: line N: duplicate key 'a.b'" for the first
// repeated key found (depth first), else Ok.
Status RejectDuplicateKeys(const YAML::Node& node, const std::string& origin);

}  // namespace igt
