#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace basin {

/// The size in bytes of the archive record that holds storage `key`, or
/// nothing when the archive has no such record.
using StorageRecordSize = std::function<std::optional<uint64_t>(const std::string& key)>;

/// The largest pickle program basin reads. A state_dict's is tens of kB
/// (tensors live in their own records); the cap bounds the walk's memory.
inline constexpr std::size_t kMaxPickleBytes = std::size_t{4} << 20;

/// The key under which a rewritten program stores an OrderedDict's
/// attributes in the dict itself; safe_pickle_load removes it.
inline constexpr const char* kDroppedAttributesKey = "__basin_ordered_dict_attributes__";

/// Walks a pickle program (the data.pkl of torch.save or torch::pickle_save)
/// through the opcodes LibTorch's unpickler reads, with its stack effects,
/// building nothing, before LibTorch reads it.
///
/// Throws ArchiveError, naming the byte and opcode, where LibTorch would
/// allocate what the bytes claim rather than what they hold, or recurse
/// without bound: a length past the end (a 4 GiB string reserved for a 1 kB
/// file), a memo id out of order, a storage larger than its record (read
/// past the end later), nesting deeper than 100, a container that holds
/// itself or is filled after another holds it, a program over
/// kMaxPickleBytes.
///
/// Returns a rewritten program where Python's pickles use what LibTorch
/// cannot read: a filled collections.OrderedDict (what `model.state_dict()`
/// is) becomes a dict through LibTorch's own restore_type_tag, tagged
/// Dict[str, Any] or Dict[int, Any] by its keys, and its attributes
/// (state_dict's `_metadata`) an entry under kDroppedAttributesKey; SETITEM
/// and APPEND (Python's for one entry) become SETITEMS and APPENDS; a LONG1
/// shorter than 8 bytes is widened. Returns nothing when the program reads as
/// it is. Throws ArchiveError when a rewrite is needed but would change what
/// the program means (an OrderedDict with mixed keys, or used other than as
/// OrderedDict()).
std::optional<std::string> check_pickle(std::string_view program, const StorageRecordSize& storage_record_size);

}  // namespace basin
