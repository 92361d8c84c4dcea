// The pickle vocabulary check_pickle's walk speaks (pickle_opcodes.h): the
// element sizes of torch.save's storage types, pickle's opcode names, and
// BINUNICODE bytes.
#include "basin/core/serialization/pickle_opcodes.h"

#include <map>

#include <c10/core/ScalarType.h>

namespace basin::pickle {

// Bytes per element of the storage types torch.save names, "FloatStorage" and so on.
std::optional<uint64_t> element_size(const std::string& storage_type) {
  static const std::map<std::string, uint64_t> sizes = [] {
    std::map<std::string, uint64_t> map;
#define BASIN_STORAGE_SIZE(ctype, name) map[#name "Storage"] = sizeof(ctype);
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(BASIN_STORAGE_SIZE)
#undef BASIN_STORAGE_SIZE
    return map;
  }();
  const auto found = sizes.find(storage_type);
  if (found == sizes.end()) return std::nullopt;
  return found->second;
}

// Pickle's names for its opcodes (protocols 0 to 5), for messages.
std::string opcode_name(char op) {
  static const std::map<char, const char*> names = {
      {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
      {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
      {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
      {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
      {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
      {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
      {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"},
      {'\x80', "PROTO"}, {'\x81', "NEWOBJ"}, {'\x82', "EXT1"}, {'\x83', "EXT2"}, {'\x84', "EXT4"},
      {'\x85', "TUPLE1"}, {'\x86', "TUPLE2"}, {'\x87', "TUPLE3"}, {'\x88', "NEWTRUE"}, {'\x89', "NEWFALSE"},
      {'\x8a', "LONG1"}, {'\x8b', "LONG4"}, {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"},
      {'\x8c', "SHORT_BINUNICODE"}, {'\x8d', "BINUNICODE8"}, {'\x8e', "BINBYTES8"}, {'\x8f', "EMPTY_SET"},
      {'\x90', "ADDITEMS"}, {'\x91', "FROZENSET"}, {'\x92', "NEWOBJ_EX"}, {'\x93', "STACK_GLOBAL"},
      {'\x94', "MEMOIZE"}, {'\x95', "FRAME"}, {'\x96', "BYTEARRAY8"}, {'\x97', "NEXT_BUFFER"},
      {'\x98', "READONLY_BUFFER"}};
  static const char* const hex = "0123456789abcdef";
  const auto code = static_cast<uint8_t>(op);
  const auto found = names.find(op);
  return std::string(found == names.end() ? "byte" : found->second) + " (0x" + hex[code >> 4] + hex[code & 15] + ")";
}

std::string binunicode(const std::string& text) {
  std::string op = "X";
  for (int i = 0; i < 4; ++i) op += static_cast<char>(text.size() >> (8 * i) & 0xFF);
  return op + text;
}

}  // namespace basin::pickle
