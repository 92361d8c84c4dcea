#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace basin {

/// The size in bytes of the archive record that holds storage `key`, or
/// nothing when the archive has no such record.
using StorageRecordSize = std::function<std::optional<uint64_t>(const std::string& key)>;

/// The key under which a rewritten program stores an OrderedDict's
/// attributes in the dict itself; safe_pickle_load removes it.
inline constexpr const char* kDroppedAttributesKey = "__basin_ordered_dict_attributes__";

/// Walks a pickle program (the data.pkl of torch.save or torch::pickle_save)
/// through the opcodes LibTorch's unpickler reads, with its stack effects,
/// building nothing, before LibTorch reads it.
///
/// Throws ArchiveError, naming the byte and opcode, where LibTorch would
/// allocate what the bytes claim rather than what they hold: a length past
/// the end (a 4 GiB string reserved for a 1 kB file), a memo id out of
/// order, a storage larger than its record (read past the end later), and
/// nesting deeper than 100.
///
/// Returns a rewritten program when the pickle fills a collections.OrderedDict
/// (what Python's `model.state_dict()` is), which LibTorch cannot rebuild, or
/// uses SETITEM (Python's for one-entry dicts), which LibTorch 1.13 lacks: each
/// SETITEM becomes a SETITEMS, each OrderedDict a dict (through LibTorch's own
/// restore_type_tag) and its attributes (state_dict's `_metadata`) an entry
/// under kDroppedAttributesKey. Returns nothing when the program reads as it
/// is. Throws ArchiveError when the program uses OrderedDict in a way the
/// rewrite does not cover.
std::optional<std::string> check_pickle(std::string_view program, const StorageRecordSize& storage_record_size);

}  // namespace basin
