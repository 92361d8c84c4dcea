#pragma once

// Checkpoints compared to the bit, for the tests that reshard and join them.

#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "basin/core/base/state_dict.h"

namespace basin::test {

/// Equal to the bit: tensors by shape and value, dicts key by key, lists
/// item by item, anything else by ==; `where` names the entry in failures.
inline void expect_same(const c10::IValue& a, const c10::IValue& b, const std::string& where) {
  if (a.isTensor() && b.isTensor()) {
    EXPECT_EQ(a.toTensor().sizes(), b.toTensor().sizes()) << where;
    EXPECT_TRUE(a.toTensor().sizes() == b.toTensor().sizes() && at::equal(a.toTensor(), b.toTensor())) << where;
  } else if (a.isGenericDict() && b.isGenericDict()) {
    const StateDict x = a.toGenericDict(), y = b.toGenericDict();
    EXPECT_EQ(x.size(), y.size()) << where;
    for (const auto& entry : x) {
      const std::string key = entry.key().isString() ? entry.key().toStringRef() : std::to_string(entry.key().toInt());
      if (!y.contains(entry.key())) {
        ADD_FAILURE() << where << "." << key << " is missing";
        continue;
      }
      expect_same(entry.value(), y.at(entry.key()), where + "." + key);
    }
  } else if (a.isList() && b.isList()) {
    ASSERT_EQ(a.toListRef().size(), b.toListRef().size()) << where;
    for (std::size_t i = 0; i < a.toListRef().size(); ++i) {
      expect_same(a.toListRef()[i], b.toListRef()[i], where + "[" + std::to_string(i) + "]");
    }
  } else {
    EXPECT_TRUE(a == b) << where << ": " << a << " and " << b;
  }
}

}  // namespace basin::test
