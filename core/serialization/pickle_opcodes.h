// The pickle vocabulary check_pickle's walk speaks: the Node/Slot model of a
// value on the unpickler's stack, and helpers for opcode names, storage
// element sizes and BINUNICODE bytes. Internal to pickle_check.cpp: not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace basin::pickle {

// What the walk knows of a value: enough to follow storages, OrderedDicts and nesting.
struct Node {
  enum class Kind { kMark, kString, kInt, kGlobal, kTuple, kList, kDict, kOrderedDict, kOther } kind = Kind::kOther;
  std::string text;  // a kString's value; a kGlobal's "module.name"
  int64_t number = 0;
  std::vector<std::shared_ptr<Node>> items;  // a kTuple's elements
  int depth = 0;           // containers nested in it, itself included; final once it is contained
  bool contained = false;  // an element of a tuple, list or dict: no longer filled
  bool memoized = false;
  int key_kinds = 0;                  // a kOrderedDict's keys: 1 strings, 2 integers, 4 others
  std::size_t type_edit = SIZE_MAX;   // a kOrderedDict's edit that names its type
};
using NodePtr = std::shared_ptr<Node>;
using Kind = Node::Kind;

// A value on the stack, and the byte where the opcodes that built it begin:
// a value pushed there instead lands just below it.
struct Slot {
  NodePtr node;
  std::size_t start = 0;
};

/// Bytes per element of the storage types torch.save names, "FloatStorage"
/// and so on; nothing for another name.
std::optional<uint64_t> element_size(const std::string& storage_type);

/// Pickle's name for opcode `op` (protocols 0 to 5) and its byte, for messages.
std::string opcode_name(char op);

/// The BINUNICODE opcode that pushes `text`.
std::string binunicode(const std::string& text);

}  // namespace basin::pickle
