#include "basin/core/serialization/safetensors_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/config/config_error.h"
#include "basin/core/config/json.h"

namespace basin {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // the safetensors library's own limit
constexpr std::size_t kMaxTensors = 1 << 20;       // a model of a million tensors is no model
constexpr int kMaxDepth = 3;                       // {name: {"shape": [size]}}

/// The header's JSON: plain nlohmann::json (a std::map: the insertion-ordered
/// Json scans its keys on every insert, quadratic in a header of many), with
/// nesting refused past what the format has, before it is built.
using Header = nlohmann::json;

/// A header value in a message: short, and never a walk down an untrusted tree.
std::string shown(const Header& value) {
  if (value.is_structured()) {
    bool flat = value.size() <= 8;
    for (const Header& item : value) flat = flat && item.is_primitive();
    if (!flat) return std::string("a JSON ") + value.type_name();
  }
  const std::string text = value.dump();
  return text.size() <= 80 ? text : text.substr(0, 80) + "...";
}

struct DtypeName {
  const char* name;
  at::ScalarType type;
};

constexpr DtypeName kDtypes[] = {{"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},
                                 {"BF16", at::kBFloat16}, {"I64", at::kLong}, {"I32", at::kInt},
                                 {"I16", at::kShort}, {"I8", at::kChar}, {"U8", at::kByte},
                                 {"BOOL", at::kBool}};

/// One tensor's entry of the header, checked against itself (not yet against the file).
struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

class Refusal {
 public:
  Refusal(const std::string& path, const std::string& key) : where_("config key '" + key + "': '" + path + "'") {}
  [[noreturn]] void operator()(const std::string& what) const { throw ConfigError(where_ + " " + what); }

 private:
  std::string where_;
};

uint64_t read_le64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

Entry parse_entry(const std::string& name, const Header& value, const Refusal& refuse) {
  const std::string tensor = "tensor '" + name + "'";
  if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets")) {
    refuse("has a header entry for " + tensor + " without dtype, shape and data_offsets");
  }
  Entry entry{name, at::kFloat, {}, 0, 0};
  const Header& dtype = value.at("dtype");
  const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeName& d) {
    return dtype.is_string() && dtype.get<std::string>() == d.name;
  });
  if (known == std::end(kDtypes)) {
    refuse("gives " + tensor + " dtype " + shown(dtype) + "; expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL");
  }
  entry.type = known->type;
  uint64_t elements = 1;
  const Header& shape = value.at("shape");
  if (!shape.is_array()) refuse("gives " + tensor + " shape " + shown(shape) + "; expected a list of sizes");
  uint64_t extent = 1;  // the product with empty dimensions as 1: what strides are made of
  for (const Header& size : shape) {
    if (!size.is_number_unsigned() || size.get<uint64_t>() > (uint64_t{1} << 40) ||
        __builtin_mul_overflow(elements, size.get<uint64_t>(), &elements) ||
        __builtin_mul_overflow(extent, std::max<uint64_t>(size.get<uint64_t>(), 1), &extent) ||
        extent > (uint64_t{1} << 62)) {
      refuse("gives " + tensor + " shape " + shown(shape) + "; expected sizes a tensor can have");
    }
    entry.shape.push_back(static_cast<int64_t>(size.get<uint64_t>()));
  }
  const Header& offsets = value.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned() ||
      offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>()) {
    refuse("gives " + tensor + " data_offsets " + shown(offsets) + "; expected [begin, end] with begin <= end");
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(c10::elementSize(entry.type)), &bytes) ||
      bytes != entry.end - entry.begin) {
    refuse("gives " + tensor + " " + std::to_string(entry.end - entry.begin) + " bytes; its dtype " +
           dtype.get<std::string>() + " and shape " + shown(shape) + " need " + std::to_string(bytes));
  }
  return entry;
}

}  // namespace

const at::Tensor* find_tensor(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return &tensor;
  }
  return nullptr;
}

NamedTensors read_safetensors_file(const std::string& path, const std::string& key) {
  const Refusal refuse(path, key);
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse(std::string("cannot be read: ") + std::strerror(errno));
  std::error_code error;
  const uint64_t file_bytes = std::filesystem::file_size(path, error);
  if (error) refuse("cannot be read: " + error.message());
  unsigned char length_bytes[8];
  if (file_bytes < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8)) {
    refuse("is " + std::to_string(file_bytes) + " bytes long; a safetensors file starts with an 8-byte header length");
  }
  const uint64_t header_bytes = read_le64(length_bytes);
  if (header_bytes > file_bytes - 8 || header_bytes > kMaxHeaderBytes) {
    refuse("claims a header of " + std::to_string(header_bytes) + " bytes in a file of " + std::to_string(file_bytes) +
           " (at most 100 MiB, inside the file)");
  }
  std::string header_text(header_bytes, '\0');
  if (!in.read(header_text.data(), static_cast<std::streamsize>(header_bytes))) refuse("ends inside its header");
  Header header;
  bool too_deep = false;
  try {
    header = Header::parse(header_text, [&](int depth, Header::parse_event_t, Header&) {
      if (depth > kMaxDepth) {
        too_deep = true;
        throw std::length_error("nested too deep");
      }
      return true;
    });
  } catch (const std::exception& parse_error) {
    if (too_deep) refuse("has a header nested deeper than a safetensors header is");
    refuse(std::string("has a header that is not JSON: ") + parse_error.what());
  }
  if (!header.is_object()) refuse("has a header that is not a JSON object of tensors");
  if (header.size() > kMaxTensors) {
    refuse("lists " + std::to_string(header.size()) + " tensors; expected at most " + std::to_string(kMaxTensors));
  }
  // The file's order is the data's: entries sorted by where their bytes start.
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    entries.push_back(parse_entry(name, value, refuse));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  NamedTensors tensors;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& entry = entries[i];
    if (entry.end > data_bytes) {
      refuse("places tensor '" + entry.name + "' at bytes [" + std::to_string(entry.begin) + ", " +
             std::to_string(entry.end) + ") of a data section of " + std::to_string(data_bytes));
    }
    if (i > 0 && entry.begin < entries[i - 1].end) {
      refuse("places tensors '" + entries[i - 1].name + "' and '" + entry.name + "' on the same bytes");
    }
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions(entry.type));
    in.seekg(static_cast<std::streamoff>(8 + header_bytes + entry.begin));
    if (!in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(entry.end - entry.begin))) {
      refuse("ends inside tensor '" + entry.name + "'");
    }
    if (entry.type == at::kBool && tensor.view(at::kByte).gt(1).any().item<bool>()) {
      refuse("holds BOOL tensor '" + entry.name + "' with bytes other than 0 and 1");
    }
    tensors.emplace_back(entry.name, tensor);
  }
  return tensors;
}

void write_safetensors_file(const std::string& path, const NamedTensors& tensors,
                            const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (header.contains(name)) throw std::runtime_error("write_safetensors_file: '" + path + "' given '" + name + "' twice");
    const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                    [&](const DtypeName& d) { return d.type == tensor.scalar_type(); });
    if (known == std::end(kDtypes)) {
      throw std::runtime_error("write_safetensors_file: tensor '" + name + "' has a dtype safetensors lacks");
    }
    data.push_back(tensor.detach().cpu().contiguous());
    const uint64_t bytes = static_cast<uint64_t>(data.back().numel()) * data.back().element_size();
    header[name] = Json{{"dtype", known->name}, {"shape", tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const at::Tensor& tensor : data) {
      out.write(static_cast<const char*>(tensor.data_ptr()), static_cast<std::streamsize>(tensor.numel() * tensor.element_size()));
    }
    if (!out.flush()) {
      std::remove(temporary.c_str());
      throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    throw std::runtime_error("cannot write '" + path + "': " + error.message());
  }
}

}  // namespace basin
