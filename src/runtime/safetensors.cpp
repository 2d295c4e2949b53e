#include "runtime/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "anvil/error.h"
#include "runtime/io.h"

namespace anvil::runtime {
namespace {

using nlohmann::json;

constexpr const char* kOp = "[safetensors]";

template <typename... Args>
[[noreturn]] void fail(const std::string& where, Args&&... args) {
  format_fail(kOp, where, std::forward<Args>(args)...);
}

// The safetensors dtype names anvil holds; others (F8_E8M0, F4, F6_*) are refused by name.
bool safetensors_dtype(const std::string& n, DType& out) {
  static const std::map<std::string, DType> names = {
      {"BOOL", kBool},     {"U8", kUInt8},       {"I8", kInt8},          {"U16", kUInt16},
      {"I16", kInt16},     {"U32", kUInt32},     {"I32", kInt32},        {"U64", kUInt64},
      {"I64", kInt64},     {"F16", kFloat16},    {"BF16", kBFloat16},    {"F32", kFloat32},
      {"F64", kFloat64},   {"C64", kComplex64},  {"F8_E4M3", kFloat8_e4m3fn}, {"F8_E5M2", kFloat8_e5m2}};
  const auto it = names.find(n);
  if (it == names.end()) return false;
  out = it->second;
  return true;
}

// JSON with a duplicate-key check at every object level (nlohmann keeps the last silently).
json parse_json_unique(const char* begin, const char* end, const std::string& where, const char* what) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!keys.back().insert(k).second) duplicate = k;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    fail(where, what, " is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) fail(where, what, " has the key \"", duplicate, "\" twice");
  return j;
}

// "[2, 3]" (anvil::shape_str lives with the Tensor printing code, which the fuzz target leaves out).
std::string dims_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const json& v) {
  const std::string t = "tensor \"" + name + "\"";
  if (!v.is_object()) fail(where, t, " is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) fail(where, t, " has no \"", field, "\"");
  SafetensorsEntry e;
  e.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) fail(where, t, ": dtype is not a string");
  if (!safetensors_dtype(dt.get<std::string>(), e.dtype))
    fail(where, t, ": dtype ", dt.get<std::string>(), " is not supported");
  const json& sh = v["shape"];
  if (!sh.is_array()) fail(where, t, ": shape is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : sh) {
    uint64_t n = 0;
    if (!as_u64(d, n) || n > static_cast<uint64_t>(INT64_MAX)) fail(where, t, ": shape ", sh.dump(), " holds a value that is not a size");
    e.shape.push_back(static_cast<int64_t>(n));
    if (n != 0 && numel > UINT64_MAX / n) overflow = true;
    numel *= n;
  }
  const uint64_t elem = element_size(e.dtype);
  if (overflow || (numel != 0 && numel > UINT64_MAX / elem) || numel * elem > static_cast<uint64_t>(INT64_MAX))
    fail(where, t, ": shape ", dims_str(e.shape), " of ", dtype_name(e.dtype), " overflows 64-bit sizes");
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !as_u64(off[0], e.begin) || !as_u64(off[1], e.end))
    fail(where, t, ": data_offsets must be two non-negative integers, got ", off.dump());
  if (e.end < e.begin) fail(where, t, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end - e.begin != numel * elem)
    fail(where, t, ": data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes, shape ",
         dims_str(e.shape), " of ", dtype_name(e.dtype), " needs ", numel * elem);
  return e;
}


}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& where) {
  if (size < 8) fail(where, "the file is ", size, " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kSafetensorsMaxHeader) fail(where, "the header length ", n, " exceeds the limit of ", kSafetensorsMaxHeader, " bytes");
  if (n > size - 8) fail(where, "the header length ", n, " runs past the end of the file (", size, " bytes)");
  const char* h = reinterpret_cast<const char*>(data + 8);
  const json j = parse_json_unique(h, h + n, where, "the header");
  if (!j.is_object()) fail(where, "the header is not a JSON object");

  SafetensorsHeader r;
  r.data_offset = 8 + n;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail(where, "__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail(where, "__metadata__ value of \"", mk, "\" is not a string");
        r.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    r.tensors.push_back(parse_entry(where, key, v));
  }
  std::stable_sort(r.tensors.begin(), r.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_bytes = size - r.data_offset;
  uint64_t at = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : r.tensors) {
    if (e.begin != at) {
      if (prev) fail(where, "tensor \"", e.name, "\" starts at byte ", e.begin, " of the data but \"", prev->name,
                     "\" ends at ", at, e.begin > at ? " (a gap)" : " (an overlap)");
      fail(where, "the first tensor \"", e.name, "\" starts at byte ", e.begin, " of the data, not 0");
    }
    at = e.end;
    prev = &e;
  }
  if (at > data_bytes) fail(where, "the tensors end at byte ", at, " of the data but the file holds ", data_bytes);
  if (at < data_bytes) fail(where, "the tensors end at byte ", at, " of the data, ", data_bytes - at, " trailing bytes follow");
  return r;
}

std::vector<std::pair<std::string, std::string>> parse_weight_map(const std::string& text, const std::string& where) {
  const json j = parse_json_unique(text.data(), text.data() + text.size(), where, "the index");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(where, "the index has no \"weight_map\" object");
  std::vector<std::pair<std::string, std::string>> r;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(where, "weight_map entry of \"", name, "\" is not a string");
    const std::string f = file.get<std::string>();
    const bool plain = !f.empty() && f != "." && f != ".." && f.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
    if (!plain) fail(where, "weight_map file \"", f, "\" of \"", name, "\" is not a plain file name");
    r.emplace_back(name, f);
  }
  return r;
}

}  // namespace anvil::runtime
