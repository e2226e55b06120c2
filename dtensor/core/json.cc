#include "dtensor/core/json.h"

#include "dtensor/core/error.h"

namespace dtensor {

std::string json_error_message(const std::exception& e) {
  std::string_view m = e.what();
  if (m.rfind("[json.exception.", 0) == 0) {
    const size_t end = m.find("] ");
    if (end != std::string_view::npos) m.remove_prefix(end + 2);
  }
  return std::string(m);
}

nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth) {
  // The nesting bound by a scan of the brackets outside strings before parsing: the library's
  // callback parser would do it, but its end_object walks the parent's items (quadratic on a
  // 200k-node graph file).
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      DT_CHECK(++depth <= max_depth, what, ": JSON nested deeper than ", max_depth, " levels; accepted: at most ",
               max_depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    DT_FAIL(what, ": invalid JSON: ", json_error_message(e));
  }
}

}  // namespace dtensor
