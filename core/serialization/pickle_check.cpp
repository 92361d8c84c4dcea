// check_pickle: the safety walk over a pickle program's opcodes (class Walk),
// with the stack effects LibTorch's unpickler gives them, and the rewrite of
// what LibTorch cannot read. The values it tracks and the opcode names of its
// messages are in pickle_opcodes.h.
#include "basin/core/serialization/pickle_check.h"

#include <algorithm>
#include <array>
#include <memory>
#include <vector>

#include "basin/core/serialization/pickle_opcodes.h"
#include "basin/core/serialization/zip_directory.h"

namespace basin {

namespace {

constexpr int kMaxDepth = 100;
constexpr std::size_t kMaxKeptText = 256;  // longer strings are never names the walk needs
constexpr const char* kOrderedDict = "collections.OrderedDict";

using pickle::Kind;
using pickle::Node;
using pickle::NodePtr;
using pickle::Slot;
using pickle::binunicode;
using pickle::element_size;
using pickle::opcode_name;

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
    if (!unrewritable_.empty()) throw ArchiveError(unrewritable_);
    std::stable_sort(edits_.begin(), edits_.end(), [](const Edit& a, const Edit& b) {
      return a.at < b.at || (a.at == b.at && a.length < b.length);  // an insertion goes first
    });
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

  std::string where() const { return "data.pkl, byte " + std::to_string(op_at_) + ", " + opcode_name(op_); }
  [[noreturn]] void fail(const std::string& what) const { throw ArchiveError(where() + ": " + what); }
  // The program reads as it is, but a rewrite (needed elsewhere) could not keep its meaning.
  void cannot_rewrite(const std::string& what) {
    if (unrewritable_.empty()) unrewritable_ = where() + ": " + what + ", which basin cannot rewrite for LibTorch";
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
  // None, True, False, floats: one shared node, so the walk's memory stays small.
  const NodePtr& leaf() {
    if (!leaf_) leaf_ = make(Kind::kOther);
    return leaf_;
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
  static bool is_ordered_dict_class(const NodePtr& node) {
    return node->kind == Kind::kGlobal && node->text == kOrderedDict;
  }
  // `items` become elements of a new or growing container: a container holds
  // no container that is still filled later, so depths are final and no
  // value holds itself.
  int contain(const std::vector<Slot>& items) {
    int depth = 0;
    for (const auto& slot : items) {
      if (is_ordered_dict_class(slot.node)) cannot_rewrite("the OrderedDict class is an element");
      slot.node->contained = true;
      depth = std::max(depth, slot.node->depth);
    }
    return depth + 1;
  }
  NodePtr tuple(const std::vector<Slot>& slots) {
    NodePtr node = make(Kind::kTuple, contain(slots));
    for (const auto& slot : slots) node->items.push_back(slot.node);
    return node;
  }

  void push(NodePtr node) { stack_.push_back({std::move(node), op_at_}); }
  void push(NodePtr node, std::size_t start) { stack_.push_back({std::move(node), start}); }
  Slot& top() {
    if (stack_.empty()) fail("needs a value, the stack is empty");
    if (stack_.back().node->kind == Kind::kMark) fail("needs a value, a MARK is on top of the stack");
    return stack_.back();
  }
  Slot pop() {
    Slot slot = top();
    stack_.pop_back();
    return slot;
  }
  std::vector<Slot> pop_to_mark(std::size_t* mark_start = nullptr) {
    const auto mark = std::find_if(stack_.rbegin(), stack_.rend(), [](const Slot& s) { return s.node->kind == Kind::kMark; });
    if (mark == stack_.rend()) fail("needs a MARK, the stack has none");
    if (mark_start) *mark_start = mark->start;
    std::vector<Slot> slots(mark.base(), stack_.end());
    stack_.erase(std::prev(mark.base()), stack_.end());
    return slots;
  }
  // `container` now holds `items`: key, value pairs when `pairs`.
  void fill(Slot& container, const std::vector<Slot>& items, bool pairs) {
    Node& target = *container.node;
    if (target.kind != Kind::kList && target.kind != Kind::kDict && target.kind != Kind::kOrderedDict) {
      fail("adds items to a value that is not a list or a dict");
    }
    const int depth = contain(items);
    if (target.contained) fail("adds items to a container another one already holds (a cycle, or nesting out of order)");
    target.depth = std::max(target.depth, depth);
    if (target.depth > kMaxDepth) fail("values nest deeper than " + std::to_string(kMaxDepth));
    if (target.kind != Kind::kOrderedDict) return;
    rewrite_ = true;
    for (std::size_t i = 0; pairs && i < items.size(); i += 2) {
      const Kind key = items[i].node->kind;
      target.key_kinds |= key == Kind::kString ? 1 : key == Kind::kInt ? 2 : 4;
    }
  }
  // MARK before the first item, the batch opcode instead of the single one
  // (LibTorch 1.13 reads APPENDS and SETITEMS only).
  void batch_instead(std::size_t first_item, char batch_op) {
    edits_.push_back({first_item, 0, "("});
    edits_.push_back({op_at_, 1, std::string(1, batch_op)});
    rewrite_ = true;
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
  // restore_type_tag and each `()` its arguments `({}, "Dict[<key>, Any]")`: a dict.
  void reduce() {
    const Slot args = pop();
    const Slot callable = top();  // the only use of the OrderedDict class that can be rewritten
    stack_.pop_back();
    if (is_ordered_dict_class(callable.node)) {
      if (args.node->kind != Kind::kTuple || !args.node->items.empty()) {
        cannot_rewrite("OrderedDict is called with arguments");
      } else if (args.node->memoized || program_[args.start] != ')') {
        cannot_rewrite("OrderedDict's empty arguments are shared");
      }
      NodePtr dict = make(Kind::kOrderedDict, 1);
      dict->type_edit = edits_.size();
      edits_.push_back({args.start, 1, ""});  // its key type is known at the end (finish_types)
      ordered_dicts_.push_back(dict);
      push(dict, callable.start);
      return;
    }
    push(make(Kind::kOther, args.node->depth), callable.start);
  }

  // LibTorch's BUILD is its REDUCE: it cannot give a dict attributes. Rewritten,
  // an OrderedDict's attributes (state_dict's _metadata) become an entry under
  // kDroppedAttributesKey, which safe_pickle_load then removes.
  void build() {
    const Slot state = pop();
    Slot& target = top();
    if (target.node->kind == Kind::kOrderedDict) {
      edits_.push_back({state.start, 0, "(" + binunicode(kDroppedAttributesKey)});
      edits_.push_back({op_at_, 1, "u"});
      Slot key{text(Kind::kString, kDroppedAttributesKey), state.start};
      fill(target, {key, state}, /*pairs=*/true);
      return;
    }
    if (is_ordered_dict_class(target.node)) cannot_rewrite("the OrderedDict class is built upon");
    const std::size_t start = target.start;
    stack_.pop_back();
    push(make(Kind::kOther, state.node->depth), start);
  }

  // Each OrderedDict's type tag, from the keys it was given.
  void finish_types() {
    for (const auto& dict : ordered_dicts_) {
      std::string key = "str";
      if (dict->key_kinds == 2) key = "int";
      if (dict->key_kinds != 0 && dict->key_kinds != 1 && dict->key_kinds != 2) {
        cannot_rewrite("an OrderedDict has keys of several types or of a type other than str and int");
      }
      edits_[dict->type_edit].replacement = "}" + binunicode("Dict[" + key + ", Any]") + "\x86";
    }
  }

  void step() {
    if (at_ >= program_.size()) fail("the program ends without STOP");
    op_at_ = at_;
    op_ = program_[at_++];
    switch (op_) {
      case '.': {  // STOP
        if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
        if (top().node->kind == Kind::kOrderedDict) rewrite_ = true;
        finish_types();
        stopped_ = true;
        break;
      }
      case '(': push(make(Kind::kMark)); break;
      case 'N': case '\x88': case '\x89': push(leaf()); break;  // None, True, False
      case 'G': unsigned_arg(8); push(leaf()); break;          // BINFLOAT
      case 'K': {  // BININT1: the commonest, from one shared node per value
        const uint64_t value = unsigned_arg(1);
        NodePtr& small = small_integers_[value];
        if (!small) small = integer(static_cast<int64_t>(value));
        push(small);
        break;
      }
      case 'M': push(integer(static_cast<int64_t>(unsigned_arg(2)))); break;
      case 'J': push(integer(static_cast<int32_t>(static_cast<uint32_t>(unsigned_arg(4))))); break;
      case '\x8a': {  // LONG1: LibTorch reads 8 bytes only, so shorter ones are widened
        const std::string_view bytes = take(unsigned_arg(1));
        if (bytes.size() > 8) fail("an integer of " + std::to_string(bytes.size()) + " bytes, more than int64 holds");
        uint64_t value = !bytes.empty() && (static_cast<uint8_t>(bytes.back()) & 0x80) ? ~uint64_t{0} : 0;
        for (auto c = bytes.rbegin(); c != bytes.rend(); ++c) value = value << 8 | static_cast<uint8_t>(*c);
        if (bytes.size() != 8) {
          std::string widened = "\x8a\x08";
          for (int i = 0; i < 8; ++i) widened += static_cast<char>(value >> (8 * i) & 0xFF);
          edits_.push_back({op_at_, at_ - op_at_, widened});
          rewrite_ = true;
        }
        push(integer(static_cast<int64_t>(value)));
        break;
      }
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
      case ']': push(make(Kind::kList, 1)); break;
      case '}': push(make(Kind::kDict, 1)); break;
      case 'l': case 'd': {  // LIST, DICT
        std::size_t start = 0;
        const auto items = pop_to_mark(&start);
        push(make(op_ == 'l' ? Kind::kList : Kind::kDict, contain(items)), start);
        break;
      }
      case 'a': {  // APPEND, which LibTorch lacks: MARK item APPENDS
        const Slot item = pop();
        batch_instead(item.start, 'e');
        fill(top(), {item}, /*pairs=*/false);
        break;
      }
      case 's': {  // SETITEM, which LibTorch 1.13 lacks: MARK key value SETITEMS
        const Slot value = pop();
        const Slot key = pop();
        batch_instead(key.start, 'u');
        fill(top(), {key, value}, /*pairs=*/true);
        break;
      }
      case 'e': { const auto items = pop_to_mark(); fill(top(), items, /*pairs=*/false); break; }  // APPENDS
      case 'u': { const auto items = pop_to_mark(); fill(top(), items, /*pairs=*/true); break; }   // SETITEMS
      case 'Q': {  // BINPERSID
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
  std::string unrewritable_;  // the first reason a rewrite would be wrong
  std::vector<Slot> stack_;
  std::vector<NodePtr> memo_;
  std::vector<Edit> edits_;
  std::vector<NodePtr> ordered_dicts_;
  NodePtr leaf_;
  std::array<NodePtr, 256> small_integers_;
};

}  // namespace

std::optional<std::string> check_pickle(std::string_view program, const StorageRecordSize& storage_record_size) {
  if (program.size() > kMaxPickleBytes) {
    throw ArchiveError("data.pkl is " + std::to_string(program.size()) + " bytes; basin reads pickles up to " +
                       std::to_string(kMaxPickleBytes >> 20) + " MiB (tensors live in their own records)");
  }
  return Walk(program, storage_record_size).run();
}

}  // namespace basin
