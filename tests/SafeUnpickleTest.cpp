// safe_pickle_load on crafted archives: each lie a file can tell about its
// own sizes is refused, naming it, before LibTorch allocates what it claims;
// a Python state_dict (an OrderedDict) reads as a plain dict.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "basin/core/serialization/pickle_check.h"
#include "basin/core/serialization/safe_unpickle.h"
#include "basin/core/serialization/zip_directory.h"

namespace basin {
namespace {

// Writes pickle opcodes by hand, as protocol 2 does.
class Program {
 public:
  Program& op(char code) { return append(std::string(1, code)); }
  Program& u8(uint32_t v) { return op(static_cast<char>(v)); }
  Program& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(v >> (8 * i) & 0xFF);
    return *this;
  }
  Program& string(const std::string& s) { return op('X').u32(static_cast<uint32_t>(s.size())).append(s); }
  Program& global(const std::string& module, const std::string& name) { return op('c').append(module + "\n" + name + "\n"); }
  Program& integer(uint32_t v) { return op('J').u32(v); }  // BININT
  Program& put(uint32_t id) { return op('q').u8(id); }
  Program& ordered_dict() { return global("collections", "OrderedDict").op(')').op('R'); }
  // _rebuild_tensor_v2(storage '0' of `numel` floats, offset 0, (size,), (1,), False, OrderedDict())
  Program& tensor(uint32_t numel, uint32_t size) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').string("storage").global("torch", "FloatStorage").string("0").string("cpu").integer(numel).op('t').op('Q');
    integer(0).op('(').integer(size).op('t').op('(').integer(1).op('t').op('\x89').ordered_dict().op('t');
    return op('R');
  }
  Program& append(const std::string& bytes) {
    text += bytes;
    return *this;
  }
  std::string text = "\x80\x02";  // PROTO 2
};

// A zip as torch.save lays it out: data.pkl, storages under data/.
std::vector<char> archive(const std::string& program, const std::vector<float>& storage = {1.5f, -2.0f}) {
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&out](const void* data, size_t n) {
    out.insert(out.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return n;
  });
  writer.writeRecord("data.pkl", program.data(), program.size());
  writer.writeRecord("data/0", storage.data(), storage.size() * sizeof(float));
  writer.writeEndOfFile();
  return out;
}

std::string error_of(const std::vector<char>& bytes) {
  try {
    safe_pickle_load(bytes);
  } catch (const ArchiveError& error) {
    return error.what();
  }
  return "(no ArchiveError)";
}

// Rewrites a 32-bit field of the central directory header of entry `name`.
void patch_directory(std::vector<char>& zip, const std::string& name, std::size_t field, uint32_t value) {
  const std::string header = "PK\x01\x02";
  for (std::size_t at = 0; at + 46 + name.size() <= zip.size(); ++at) {
    if (std::string(&zip[at], 4) == header && std::string(&zip[at + 46], name.size()) == name) {
      for (int i = 0; i < 4; ++i) zip[at + field + static_cast<std::size_t>(i)] = static_cast<char>(value >> (8 * i));
      return;
    }
  }
  FAIL() << "no directory entry " << name;
}

TEST(SafeUnpickleTest, HandWrittenArchiveReadsAsLibTorchReadsIt) {
  Program program;
  program.op('}').op('(').string("w").tensor(2, 2).op('u').op('.');
  const auto value = safe_pickle_load(archive(program.text));
  const at::Tensor w = value.toGenericDict().at("w").toTensor();
  EXPECT_TRUE(at::equal(w, at::tensor({1.5f, -2.0f})));
  // And a file LibTorch wrote itself.
  const auto saved = torch::jit::pickle_save(c10::IValue(at::arange(6.0).view({2, 3})));
  EXPECT_TRUE(at::equal(safe_pickle_load(saved).toTensor(), at::arange(6.0).view({2, 3})));
}

TEST(SafeUnpickleTest, AStringLongerThanTheFileIsRefusedBeforeItIsReserved) {
  Program program;
  program.op('X').u32(0xFF000000).append("abc").op('.');
  const std::string error = error_of(archive(program.text));
  EXPECT_NE(error.find("claims 4278190080 bytes, 4 remain"), std::string::npos) << error;
  EXPECT_NE(error.find("data.pkl, byte 2, BINUNICODE (0x58)"), std::string::npos) << error;
}

TEST(SafeUnpickleTest, AStorageLargerThanItsRecordIsRefused) {
  Program program;
  program.op('}').op('(').string("w").tensor(1000, 2).op('u').op('.');
  const std::string error = error_of(archive(program.text));
  EXPECT_NE(error.find("storage '0' claims 1000 elements of 4 bytes, its record holds 8 bytes"), std::string::npos)
      << error;
}

TEST(SafeUnpickleTest, ATensorReachingPastItsStorageIsRefused) {
  Program program;
  program.op('}').op('(').string("w").tensor(2, 200).op('u').op('.');
  const std::string error = error_of(archive(program.text));
  EXPECT_NE(error.find("a tensor of shape [200], strides [1] and offset 0 reaches past its 8-byte storage"),
            std::string::npos)
      << error;
}

TEST(SafeUnpickleTest, MemoIdsOutOfOrderAndDeepNestingAreRefused) {
  Program out_of_order;
  out_of_order.string("a").put(7).op('.');
  EXPECT_NE(error_of(archive(out_of_order.text)).find("memo id 7 out of order (next is 0)"), std::string::npos);

  Program never_stored;
  never_stored.op('h').u8(3).op('.');
  EXPECT_NE(error_of(archive(never_stored.text)).find("memo id 3 was never stored"), std::string::npos);

  // Lists appended each into the one before: 100 levels pass, 101 do not.
  for (const int levels : {100, 101}) {
    Program deep;
    for (int i = 1; i < levels; ++i) deep.op(']').op('(');
    deep.op(']');
    for (int i = 1; i < levels; ++i) deep.op('e');
    deep.op('.');
    const std::string error = error_of(archive(deep.text));
    if (levels == 100) {
      EXPECT_EQ(error, "(no ArchiveError)");
    } else {
      EXPECT_NE(error.find("values nest deeper than 100"), std::string::npos) << error;
    }
  }
}

TEST(SafeUnpickleTest, AValueThatHoldsItselfIsRefusedAndSharedValuesAreVisitedOnce) {
  Program cycle;  // l = []; l.append(l); l.append(l)
  cycle.op(']').put(0).op('(').op('h').u8(0).op('h').u8(0).op('e').op('.');
  const std::string error = error_of(archive(cycle.text));
  EXPECT_NE(error.find("adds items to a container another one already holds"), std::string::npos) << error;

  // t = (t, t) sixty times: 2^60 paths through 61 values; the load visits each once.
  Program shared;
  shared.op(']');
  for (uint32_t i = 0; i < 60; ++i) shared.put(i).op('h').u8(i).op('\x86');
  shared.op('.');
  const c10::IValue value = safe_pickle_load(archive(shared.text));
  ASSERT_TRUE(value.isTuple());
  EXPECT_EQ(value.toTuple()->elements().size(), 2u);
}

TEST(SafeUnpickleTest, OpcodesPythonWritesAndLibTorchLacksAreRewritten) {
  // [-1, 2**32] as Python writes it: APPEND for each item, LONG1 of 1 and 5 bytes.
  Program list;
  list.op(']').op('\x8a').u8(1).u8(0xFF).op('a').op('\x8a').u8(5).u32(0).u8(1).op('a').op('.');
  const auto items = safe_pickle_load(archive(list.text)).toList();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items.get(0).toInt(), -1);
  EXPECT_EQ(items.get(1).toInt(), int64_t{1} << 32);

  // OrderedDict({0: w}) with SETITEM: a dict with an integer key (an optimizer's state).
  Program by_index;
  by_index.ordered_dict().integer(0).tensor(2, 2).op('s').op('.');
  const auto dict = safe_pickle_load(archive(by_index.text)).toGenericDict();
  ASSERT_EQ(dict.size(), 1u);
  EXPECT_TRUE(at::equal(dict.at(int64_t{0}).toTensor(), at::tensor({1.5f, -2.0f})));

  // Keys of two types cannot be one LibTorch dict type: refused, naming the byte.
  Program mixed;
  mixed.ordered_dict().op('(').integer(0).integer(1).string("a").integer(2).op('u').op('.');
  const std::string error = error_of(archive(mixed.text));
  EXPECT_NE(error.find("an OrderedDict has keys of several types"), std::string::npos) << error;
}

TEST(SafeUnpickleTest, ZipEntriesThatLieAboutTheirSizeOrAreCompressedAreRefused) {
  Program program;
  program.op('}').op('(').string("w").tensor(2, 2).op('u').op('.');
  const std::vector<char> good = archive(program.text);
  std::size_t records = 0;
  for (const auto& entry : read_zip_directory(std::string_view(good.data(), good.size()))) {
    ++records;
    EXPECT_LE(entry.offset + entry.size, good.size()) << entry.name;
  }
  EXPECT_GE(records, 3u);  // data.pkl, data/0, version

  std::vector<char> huge = good;  // both sizes of data/0 claim 4 GB
  patch_directory(huge, "archive/data/0", 20, 0xF0000000);
  patch_directory(huge, "archive/data/0", 24, 0xF0000000);
  const std::string error = error_of(huge);
  EXPECT_NE(error.find("zip entry 'archive/data/0' claims 4026531840 bytes past the end"), std::string::npos) << error;

  std::vector<char> deflated = good;
  patch_directory(deflated, "archive/data.pkl", 10, 8);  // method: deflate (a 16-bit field; the next is the time)
  EXPECT_NE(error_of(deflated).find("zip entry 'archive/data.pkl' is compressed (method 8"), std::string::npos);

  EXPECT_NE(error_of(std::vector<char>(good.begin(), good.begin() + 100)).find("not a zip archive"), std::string::npos);
}

TEST(SafeUnpickleTest, AnOrderedDictStateDictReadsAsAPlainDictWithoutItsMetadata) {
  // What torch.save(model.state_dict()) writes: OrderedDict() filled by
  // SETITEMS, then BUILD with {'_metadata': OrderedDict({'': {'version': 1}})}.
  Program program;
  program.global("collections", "OrderedDict").put(0).op(')').op('R').put(1);
  program.op('(').string("w").tensor(2, 2).op('u');
  program.op('}').string("_metadata").op('h').u8(0).op(')').op('R');
  program.op('(').string("").op('}').string("version").integer(1).op('s').op('u');
  program.op('s').op('b').op('.');
  const std::vector<char> bytes = archive(program.text);

  const auto rewritten = check_pickle(program.text, [](const std::string&) { return uint64_t{8}; });
  ASSERT_TRUE(rewritten.has_value());
  const c10::IValue value = safe_pickle_load(bytes);
  ASSERT_TRUE(value.isGenericDict());
  const auto dict = value.toGenericDict();
  EXPECT_EQ(dict.size(), 1u);  // the metadata is gone
  EXPECT_TRUE(at::equal(dict.at("w").toTensor(), at::tensor({1.5f, -2.0f})));
  // A plain dict of tensors needs no rewrite: only the tensors' hook arguments are OrderedDicts.
  Program plain;
  plain.op('}').op('(').string("w").tensor(2, 2).op('u').op('.');
  EXPECT_FALSE(check_pickle(plain.text, [](const std::string&) { return uint64_t{8}; }).has_value());
}

}  // namespace
}  // namespace basin
