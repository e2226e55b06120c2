// JSON read from outside (requests, graph files, hardware profiles, cluster files, checkpoints):
// one parser entry that bounds the nesting and one way to turn the JSON library's exceptions into
// messages without its internal codes.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace dtensor {

// Deeper than any of dtensor's formats nests (a graph file's argument lists are the deepest, < 10).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. Throws dtensor::Error starting with `what` (e.g. "graph JSON", "hardware profile
// h100.json") when it is not JSON (with the library's position and reason, without its
// "[json.exception...]" code) or nests arrays/objects deeper than `max_depth`: a hostile input cannot
// exhaust the stack when the value is later printed in a message or destroyed.
nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

// e.what(), without the JSON library's "[json.exception.<kind>.<id>] " prefix when it has one.
std::string json_error_message(const std::exception& e);

}  // namespace dtensor
