#include "basin/tokenizer/pre_tokenizers.h"

#include <algorithm>

#include <utf8proc.h>

#include "basin/tokenizer/byte_level.h"
#include "basin/tokenizer/regex.h"
#include "basin/tokenizer/tokenizers_unicode.h"
#include "basin/tokenizer/unicode_text.h"

namespace basin::tokenizer {
namespace {

// A piece cut into parts that each match the pattern or lie between matches.
struct Part {
  std::size_t begin, end;
  bool is_match;
};

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The pieces `parts` become under `behavior`, as tokenizers' NormalizedString::split has it;
// returns where in `piece` the first of them begins (npos: none).
std::size_t emit(const std::string& piece, std::vector<Part> parts, Behavior behavior, std::vector<std::string>& out) {
  std::vector<Part> merged;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Part& part : parts) if (!part.is_match) merged.push_back(part);
      break;
    case Behavior::kIsolated:
      merged = std::move(parts);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& part : parts) {
        if (part.is_match && !previous_match && !merged.empty()) merged.back().end = part.end;
        else merged.push_back(part);
        previous_match = part.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto part = parts.rbegin(); part != parts.rend(); ++part) {
        if (part->is_match && !previous_match && !merged.empty()) merged.back().begin = part->begin;
        else merged.push_back(*part);
        previous_match = part->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case Behavior::kContiguous:
      for (const Part& part : parts) {
        if (part.is_match == previous_match && !merged.empty()) merged.back().end = part.end;
        else merged.push_back(part);
        previous_match = part.is_match;
      }
      break;
  }
  std::size_t first = std::string::npos;
  for (const Part& part : merged) {
    if (part.end == part.begin) continue;
    if (first == std::string::npos) first = part.begin;
    out.push_back(piece.substr(part.begin, part.end - part.begin));
  }
  return first;
}

// Whether the first piece emitted from `pieces` (emit's returns, in order) begins the text.
class StartTracker {
 public:
  void emitted(std::size_t piece_index, std::size_t first) {
    if (seen_ || first == std::string::npos) return;
    seen_ = true;
    at_start_ = piece_index == 0 && first == 0;
  }
  void update(bool& at_text_start) const { at_text_start = at_text_start && seen_ && at_start_; }

 private:
  bool seen_ = false, at_start_ = false;
};

// Matches at [begin, end) ranges, with the gaps between them, covering `length` bytes.
class PartsBuilder {
 public:
  explicit PartsBuilder(bool invert) : invert_(invert) {}
  void match(std::size_t begin, std::size_t end) {
    if (begin > at_) parts_.push_back({at_, begin, invert_});
    parts_.push_back({begin, end, !invert_});
    at_ = end;
  }
  std::vector<Part> finish(std::size_t length) {
    if (length > at_ || parts_.empty()) parts_.push_back({at_, length, invert_});
    return std::move(parts_);
  }

 private:
  bool invert_;
  std::size_t at_ = 0;
  std::vector<Part> parts_;
};

class Split final : public PreTokenizer {
 public:
  Split(std::unique_ptr<Regex> regex, std::string literal, Behavior behavior, bool invert)
      : regex_(std::move(regex)), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}

  void split(std::vector<std::string>& pieces, bool& at_text_start) const override {
    std::vector<std::string> out;
    StartTracker start;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::string& piece = pieces[i];
      PartsBuilder parts(invert_);
      if (regex_) {
        regex_->for_each_match(piece, [&](std::size_t begin, std::size_t end) { parts.match(begin, end); });
      } else if (!literal_.empty()) {
        for (std::size_t at = piece.find(literal_); at != std::string::npos; at = piece.find(literal_, at + literal_.size())) {
          parts.match(at, at + literal_.size());
        }
      }
      start.emitted(i, emit(piece, parts.finish(piece.size()), behavior_, out));
    }
    start.update(at_text_start);
    pieces = std::move(out);
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's split, which ByteLevel applies when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), regex_(use_regex ? std::make_unique<Split>(std::make_unique<Regex>(kGpt2Pattern), "", Behavior::kIsolated, false) : nullptr) {}

  void split(std::vector<std::string>& pieces, bool& at_text_start) const override {
    if (add_prefix_space_) {
      for (std::string& piece : pieces) if (piece.empty() || piece[0] != ' ') piece.insert(0, " ");
    }
    if (regex_) regex_->split(pieces, at_text_start);
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
    std::string mapped;
    for (std::string& piece : pieces) {
      mapped.clear();
      alphabet.encode(piece, mapped);
      piece.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Split> regex_;
};

// Cuts at each code point `is_delimiter` accepts, each a match of its own, as
// tokenizers' split with a char predicate (Digits, Punctuation, WhitespaceSplit).
class CodePointSplit final : public PreTokenizer {
 public:
  CodePointSplit(bool (*is_delimiter)(char32_t), Behavior behavior) : is_delimiter_(is_delimiter), behavior_(behavior) {}
  void split(std::vector<std::string>& pieces, bool& at_text_start) const override {
    std::vector<std::string> out;
    StartTracker start;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::string& piece = pieces[i];
      PartsBuilder parts(false);
      for (std::size_t pos = 0; pos < piece.size();) {
        const std::size_t begin = pos;
        if (is_delimiter_(next_code_point(piece, pos))) parts.match(begin, pos);
      }
      start.emitted(i, emit(piece, parts.finish(piece.size()), behavior_, out));
    }
    start.update(at_text_start);
    pieces = std::move(out);
  }

 private:
  bool (*is_delimiter_)(char32_t);
  Behavior behavior_;
};

// Rust's char::is_numeric: Nd, Nl, No.
bool is_numeric(char32_t c) {
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL || category == UTF8PROC_CATEGORY_NO;
}

// tokenizers' Whitespace, the regex \w+|[^\w\s]+ with what lies between
// dropped: runs of word characters and runs of other characters that are not
// whitespace, each a piece.
class Whitespace final : public PreTokenizer {
 public:
  void split(std::vector<std::string>& pieces, bool& at_text_start) const override {
    enum class Kind { kSpace, kWord, kOther };
    std::vector<std::string> out;
    StartTracker start;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::string& piece = pieces[i];
      PartsBuilder parts(true);  // the runs are kept, the gaps removed
      Kind run = Kind::kSpace;
      std::size_t run_begin = 0;
      for (std::size_t pos = 0; pos < piece.size();) {
        const std::size_t begin = pos;
        const char32_t c = next_code_point(piece, pos);
        const Kind kind = is_whitespace(c) ? Kind::kSpace : is_regex_word_character(c) ? Kind::kWord : Kind::kOther;
        if (kind == run) continue;
        if (run != Kind::kSpace) parts.match(run_begin, begin);
        run = kind;
        run_begin = begin;
      }
      if (run != Kind::kSpace) parts.match(run_begin, piece.size());
      start.emitted(i, emit(piece, parts.finish(piece.size()), Behavior::kRemoved, out));
    }
    start.update(at_text_start);
    pieces = std::move(out);
  }
};

enum class Prepend { kAlways, kFirst, kNever };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}

  void split(std::vector<std::string>& pieces, bool& at_text_start) const override {
    std::vector<std::string> out;
    StartTracker start;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      std::string piece = replace_all(pieces[i], " ", replacement_);
      const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && i == 0 && at_text_start);
      if (prepend && piece.compare(0, replacement_.size(), replacement_) != 0) piece.insert(0, replacement_);
      if (!split_) {
        start.emitted(i, piece.empty() ? std::string::npos : 0);
        out.push_back(std::move(piece));
        continue;
      }
      PartsBuilder parts(false);
      for (std::size_t at = piece.find(replacement_); at != std::string::npos; at = piece.find(replacement_, at + replacement_.size())) {
        parts.match(at, at + replacement_.size());
      }
      start.emitted(i, emit(piece, parts.finish(piece.size()), Behavior::kMergedWithNext, out));
    }
    start.update(at_text_start);
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::vector<std::string>& pieces, bool& at_text_start) const override {
    for (const auto& step : steps_) step->split(pieces, at_text_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Behavior behavior_from_json(const nlohmann::json& json, const JsonPlace& place) {
  const std::string name = place.string(json, "behavior");
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw (place / "behavior").error("'" + name + "' is none of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

std::unique_ptr<PreTokenizer> split_from_json(const nlohmann::json& json, const JsonPlace& place) {
  const JsonPlace at = place / "pattern";
  const nlohmann::json& pattern = place.child(json, "pattern", [](const nlohmann::json& v) { return v.is_object(); }, "{\"Regex\": ...} or {\"String\": ...}");
  std::unique_ptr<Regex> regex;
  std::string literal;
  if (pattern.contains("Regex") == pattern.contains("String")) {
    throw at.error("expected one of {\"Regex\": ...} and {\"String\": ...}, got " + pattern.dump().substr(0, 80));
  }
  if (pattern.contains("Regex")) {
    try {
      regex = std::make_unique<Regex>(at.string(pattern, "Regex"));
    } catch (const std::invalid_argument& bad) {
      throw (at / "Regex").error(std::string("the regex does not compile: ") + bad.what());
    }
  } else {
    literal = at.string(pattern, "String");
  }
  return std::make_unique<Split>(std::move(regex), literal, behavior_from_json(json, place), place.boolean(json, "invert", false));
}

std::unique_ptr<PreTokenizer> metaspace_from_json(const nlohmann::json& json, const JsonPlace& place) {
  Prepend prepend = place.boolean(json, "add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
  if (json.contains("prepend_scheme")) {
    const std::string scheme = place.string(json, "prepend_scheme");
    if (scheme == "always") prepend = Prepend::kAlways;
    else if (scheme == "first") prepend = Prepend::kFirst;
    else if (scheme == "never") prepend = Prepend::kNever;
    else throw (place / "prepend_scheme").error("'" + scheme + "' is none of always, first, never");
  }
  return std::make_unique<Metaspace>(place.character(json, "replacement"), prepend, place.boolean(json, "split", true));
}

}  // namespace

std::unique_ptr<PreTokenizer> pre_tokenizer_from_json(const nlohmann::json& json, const JsonPlace& place) {
  if (json.is_null()) return nullptr;
  const std::string type = place.type(json);
  if (type == "Split") return split_from_json(json, place);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(place.boolean(json, "add_prefix_space", true), place.boolean(json, "use_regex", true));
  }
  if (type == "Digits") {
    const bool individual = place.boolean(json, "individual_digits", false);
    return std::make_unique<CodePointSplit>(is_numeric, individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  if (type == "Punctuation") {
    const Behavior behavior = json.contains("behavior") ? behavior_from_json(json, place) : Behavior::kIsolated;
    return std::make_unique<CodePointSplit>(is_tokenizers_punctuation, behavior);
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<CodePointSplit>(is_whitespace, Behavior::kRemoved);
  if (type == "Metaspace") return metaspace_from_json(json, place);
  if (type == "Sequence") return std::make_unique<Sequence>(place.sequence(json, "pretokenizers", pre_tokenizer_from_json));
  throw (place / "type").error("pre-tokenizer '" + type + "' is not supported (basin reads Split, ByteLevel, Digits, Punctuation, Whitespace, WhitespaceSplit, Metaspace and Sequence)");
}

}  // namespace basin::tokenizer
