#include "basin/core/serialization/pickle_check.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include <c10/core/ScalarType.h>

#include "basin/core/serialization/zip_directory.h"

namespace basin {

namespace {

constexpr int kMaxDepth = 100;
constexpr std::size_t kMaxKeptText = 256;  // longer strings are never names the walk needs
constexpr const char* kOrderedDict = "collections.OrderedDict";

// What the walk knows of a value: enough to follow storages and OrderedDicts.
struct Node {
  enum class Kind { kMark, kString, kInt, kGlobal, kTuple, kOrderedDict, kOther } kind = Kind::kOther;
  std::string text;  // a kString's value; a kGlobal's "module.name"
  int64_t number = 0;
  std::vector<std::shared_ptr<Node>> items;  // a kTuple's elements
  int depth = 0;                             // containers nested in it, itself included
  bool memoized = false;
};
using NodePtr = std::shared_ptr<Node>;
using Kind = Node::Kind;

// A value on the stack, and the byte where the opcodes that built it begin:
// a value pushed there instead lands just below it.
struct Slot {
  NodePtr node;
  std::size_t start = 0;
};

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

std::string binunicode(const std::string& text) {
  std::string op = "X";
  for (int i = 0; i < 4; ++i) op += static_cast<char>(text.size() >> (8 * i) & 0xFF);
  return op + text;
}

// Walks the opcodes LibTorch's unpickler reads, with its stack effects.
class Walk {
 public:
  Walk(std::string_view program, const StorageRecordSize& record_size)
      : program_(program), record_size_(record_size) {}

  std::optional<std::string> run() {
    op_ = program_.empty() ? 0 : program_[0];
    if (program_.size() < 2 || op_ != '\x80' || program_[1] != 2) fail("a pickle starts with PROTO 2");
    at_ = 2;
    while (!stopped_) step();
    if (!rewrite_) return std::nullopt;
    if (!rewritable_) fail("uses collections.OrderedDict other than as OrderedDict(), which basin cannot rewrite");
    // An insertion goes before a replacement at the same byte.
    std::stable_sort(edits_.begin(), edits_.end(),
                     [](const Edit& a, const Edit& b) { return a.at < b.at || (a.at == b.at && a.length < b.length); });
    std::string rewritten;
    std::size_t copied = 0;
    for (const Edit& edit : edits_) {
      rewritten.append(program_.substr(copied, edit.at - copied)).append(edit.replacement);
      copied = edit.at + edit.length;
    }
    return rewritten.append(program_.substr(copied));
  }

 private:
  struct Edit {
    std::size_t at;
    std::size_t length;  // bytes replaced; 0 inserts
    std::string replacement;
  };

  [[noreturn]] void fail(const std::string& what) const {
    static const char* const hex = "0123456789abcdef";
    const auto code = static_cast<uint8_t>(op_);
    throw ArchiveError("data.pkl, byte " + std::to_string(op_at_) + " (opcode 0x" + hex[code >> 4] + hex[code & 15] +
                       "): " + what);
  }

  std::string_view take(uint64_t n) {
    if (n > program_.size() - at_) {
      fail("claims " + std::to_string(n) + " bytes, " + std::to_string(program_.size() - at_) + " remain");
    }
    const std::string_view bytes = program_.substr(at_, n);
    at_ += n;
    return bytes;
  }
  uint64_t unsigned_arg(int width) {
    const std::string_view bytes = take(static_cast<uint64_t>(width));
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(bytes[static_cast<std::size_t>(i)]);
    return value;
  }
  std::string_view line() {
    const std::size_t end = program_.find('\n', at_);
    if (end == std::string_view::npos) fail("a text argument has no end of line");
    const std::size_t length = end - at_;
    return take(length + 1).substr(0, length);
  }

  NodePtr make(Kind kind, int depth = 0) {
    if (depth > kMaxDepth) fail("values nest deeper than " + std::to_string(kMaxDepth));
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->depth = depth;
    return node;
  }
  NodePtr text(Kind kind, std::string_view value) {
    if (value.size() > kMaxKeptText) return make(Kind::kOther);
    NodePtr node = make(kind);
    node->text = std::string(value);
    return node;
  }
  NodePtr integer(int64_t value) {
    NodePtr node = make(Kind::kInt);
    node->number = value;
    return node;
  }
  static int deepest(const std::vector<Slot>& slots) {
    int depth = 0;
    for (const auto& slot : slots) depth = std::max(depth, slot.node->depth);
    return depth;
  }
  NodePtr tuple(const std::vector<Slot>& slots) {
    NodePtr node = make(Kind::kTuple, deepest(slots) + 1);
    for (const auto& slot : slots) node->items.push_back(slot.node);
    return node;
  }

  // A value the current opcode pushed, or built from values that began at `start`.
  void push(NodePtr node) { stack_.push_back({std::move(node), op_at_}); }
  void push(NodePtr node, std::size_t start) { stack_.push_back({std::move(node), start}); }
  Slot& top() {
    if (stack_.empty() || stack_.back().node->kind == Kind::kMark) fail("needs a value, the stack has none");
    return stack_.back();
  }
  // Takes a value off the stack to use it: only OrderedDict() may use the OrderedDict class.
  Slot pop() {
    Slot slot = top();
    stack_.pop_back();
    if (slot.node->kind == Kind::kGlobal && slot.node->text == kOrderedDict) rewritable_ = false;
    return slot;
  }
  std::vector<Slot> pop_to_mark(std::size_t* mark_start = nullptr) {
    const auto mark = std::find_if(stack_.rbegin(), stack_.rend(), [](const Slot& s) { return s.node->kind == Kind::kMark; });
    if (mark == stack_.rend()) fail("needs a MARK, the stack has none");
    if (mark_start) *mark_start = mark->start;
    std::vector<Slot> slots(mark.base(), stack_.end());
    stack_.erase(std::prev(mark.base()), stack_.end());
    for (const auto& slot : slots) {
      if (slot.node->kind == Kind::kGlobal && slot.node->text == kOrderedDict) rewritable_ = false;
    }
    return slots;
  }
  // `container` now holds `items` (an append, a setitem).
  void fill(Slot& container, const std::vector<Slot>& items) {
    container.node->depth = std::max(container.node->depth, deepest(items) + 1);
    if (container.node->depth > kMaxDepth) fail("values nest deeper than " + std::to_string(kMaxDepth));
    if (container.node->kind == Kind::kOrderedDict) rewrite_ = true;
  }

  // Memo ids other than the next one cost LibTorch memory in proportion to the id.
  void put(uint64_t id) {
    if (id != memo_.size()) fail("memo id " + std::to_string(id) + " out of order (next is " + std::to_string(memo_.size()) + ")");
    top().node->memoized = true;
    memo_.push_back(top().node);
  }
  void get(uint64_t id) {
    if (id >= memo_.size()) fail("memo id " + std::to_string(id) + " was never stored");
    push(memo_[id]);
  }

  // A tensor's storage: ('storage', torch.<Type>Storage, key, location, numel).
  void check_storage(const NodePtr& id) {
    const auto& items = id->items;
    if (id->kind != Kind::kTuple || items.size() != 5 || items[0]->kind != Kind::kString ||
        items[0]->text != "storage" || items[1]->kind != Kind::kGlobal || items[2]->kind != Kind::kString ||
        items[4]->kind != Kind::kInt) {
      fail("a persistent id that is not ('storage', type, key, location, size)");
    }
    const std::string& type = items[1]->text;
    const auto size = type.rfind("torch.", 0) == 0 ? element_size(type.substr(6)) : std::nullopt;
    if (!size) fail("unknown storage type '" + type + "'");
    const std::string& key = items[2]->text;
    const int64_t numel = items[4]->number;
    const auto record = record_size_(key);
    if (!record) fail("storage '" + key + "' has no record data/" + key + " in the archive");
    if (numel < 0 || static_cast<uint64_t>(numel) > *record / *size) {
      fail("storage '" + key + "' claims " + std::to_string(numel) + " elements of " + std::to_string(*size) +
           " bytes, its record holds " + std::to_string(*record) + " bytes");
    }
  }

  // LibTorch reads OrderedDict() as None. Rewritten, the class becomes
  // restore_type_tag and each `()` its arguments `({}, "Dict[str, Any]")`: a dict.
  void reduce() {
    const Slot args = pop_args();
    const Slot callable = top();
    stack_.pop_back();
    const bool ordered_dict = callable.node->kind == Kind::kGlobal && callable.node->text == kOrderedDict;
    if (ordered_dict && args.node->kind == Kind::kTuple && args.node->items.empty()) {
      if (args.node->memoized || program_[args.start] != ')') rewritable_ = false;
      edits_.push_back({args.start, 1, "}" + binunicode("Dict[str, Any]") + "\x86"});
      push(make(Kind::kOrderedDict, 1), callable.start);
      return;
    }
    if (ordered_dict) rewritable_ = false;
    push(make(Kind::kOther, args.node->depth), callable.start);
  }
  Slot pop_args() {
    Slot slot = top();
    stack_.pop_back();
    return slot;
  }

  // LibTorch's BUILD is its REDUCE: it cannot give a dict attributes. Rewritten,
  // an OrderedDict's attributes (state_dict's _metadata) become an entry under
  // kDroppedAttributesKey, which safe_pickle_load then removes.
  void build() {
    const Slot state = pop_args();
    Slot& target = top();
    if (target.node->kind == Kind::kOrderedDict) {
      edits_.push_back({state.start, 0, "(" + binunicode(kDroppedAttributesKey)});
      edits_.push_back({op_at_, 1, "u"});
      fill(target, {state});
      return;
    }
    if (target.node->kind == Kind::kGlobal && target.node->text == kOrderedDict) rewritable_ = false;
    const std::size_t start = target.start;
    stack_.pop_back();
    push(make(Kind::kOther, state.node->depth), start);
  }

  void step() {
    if (at_ >= program_.size()) fail("the program ends without STOP");
    op_at_ = at_;
    op_ = program_[at_++];
    switch (op_) {
      case '.': {  // STOP
        if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
        if (top().node->kind == Kind::kOrderedDict) rewrite_ = true;
        stopped_ = true;
        break;
      }
      case '(': push(make(Kind::kMark)); break;
      case 'N': case '\x88': case '\x89': push(make(Kind::kOther)); break;  // None, True, False
      case 'K': push(integer(static_cast<int64_t>(unsigned_arg(1)))); break;
      case 'M': push(integer(static_cast<int64_t>(unsigned_arg(2)))); break;
      case 'J': push(integer(static_cast<int32_t>(static_cast<uint32_t>(unsigned_arg(4))))); break;
      case '\x8a': {  // LONG1: LibTorch reads only 8-byte ones
        if (unsigned_arg(1) != 8) fail("LibTorch reads only 8-byte LONG1 integers");
        push(integer(static_cast<int64_t>(unsigned_arg(8))));
        break;
      }
      case 'G': unsigned_arg(8); push(make(Kind::kOther)); break;          // BINFLOAT
      case 'X': push(text(Kind::kString, take(unsigned_arg(4)))); break;  // BINUNICODE
      case 'c': {                                                         // GLOBAL module\nname\n
        const std::string module(line());
        const std::string name(line());
        if (module + "." + name == kOrderedDict) {
          edits_.push_back({op_at_, at_ - op_at_, "ctorch.jit._pickle\nrestore_type_tag\n"});
        }
        push(text(Kind::kGlobal, module + "." + name));
        break;
      }
      case ')': push(tuple({})); break;
      case 't': {
        std::size_t start = 0;
        const auto items = pop_to_mark(&start);
        push(tuple(items), start);
        break;
      }
      case '\x85': case '\x86': case '\x87': {  // TUPLE1..3
        std::vector<Slot> items(static_cast<std::size_t>(op_ - '\x84'));
        for (auto item = items.rbegin(); item != items.rend(); ++item) *item = pop();
        push(tuple(items), items.front().start);
        break;
      }
      case ']': case '}': push(make(Kind::kOther, 1)); break;  // empty list, dict
      case 'l': case 'd': {                                     // LIST, DICT
        std::size_t start = 0;
        const auto items = pop_to_mark(&start);
        push(make(Kind::kOther, deepest(items) + 1), start);
        break;
      }
      case 's': {  // SETITEM, which LibTorch 1.13 lacks: rewritten as MARK key value SETITEMS
        const Slot value = pop();
        const Slot key = pop();
        edits_.push_back({key.start, 0, "("});
        edits_.push_back({op_at_, 1, "u"});
        rewrite_ = true;
        fill(top(), {key, value});
        break;
      }
      case 'e': case 'u': { const auto items = pop_to_mark(); fill(top(), items); break; }  // APPENDS, SETITEMS
      case 'Q': {                                                                           // BINPERSID
        const Slot id = pop();
        check_storage(id.node);
        push(make(Kind::kOther), id.start);
        break;
      }
      case 'R': reduce(); break;
      case 'b': build(); break;
      case '\x81': pop(); break;  // NEWOBJ: LibTorch drops the arguments, keeps the class for BUILD
      case 'q': put(unsigned_arg(1)); break;
      case 'r': put(unsigned_arg(4)); break;
      case 'h': get(unsigned_arg(1)); break;
      case 'j': get(unsigned_arg(4)); break;
      default: fail("not an opcode LibTorch reads");
    }
  }

  std::string_view program_;
  const StorageRecordSize& record_size_;
  std::size_t at_ = 0;
  std::size_t op_at_ = 0;
  char op_ = 0;
  bool stopped_ = false;
  bool rewrite_ = false;
  bool rewritable_ = true;
  std::vector<Slot> stack_;
  std::vector<NodePtr> memo_;
  std::vector<Edit> edits_;
};

}  // namespace

std::optional<std::string> check_pickle(std::string_view program, const StorageRecordSize& storage_record_size) {
  return Walk(program, storage_record_size).run();
}

}  // namespace basin
