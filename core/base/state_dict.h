#pragma once

#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

namespace basin {

/// What `state_dict()` returns everywhere: string keys to tensors, numbers,
/// strings, lists or nested dicts. `torch::pickle_save` writes it so that
/// Python's `torch.load` opens it.
using StateDict = c10::impl::GenericDict;

/// An empty StateDict with string keys (c10's typed Dict has no default one).
inline StateDict new_state_dict() { return StateDict(c10::StringType::get(), c10::AnyType::get()); }

}  // namespace basin
