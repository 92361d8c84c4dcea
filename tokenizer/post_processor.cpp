#include "basin/tokenizer/post_processor.h"

namespace basin::tokenizer {

PostProcessor::PostProcessor(const nlohmann::json& json, const JsonPlace& place) {
  template_ = {kSequence};
  if (!json.is_null()) read(json, place);
}

void PostProcessor::read(const nlohmann::json& json, const JsonPlace& place) {
  const std::string type = place.type(json);
  const auto token_id = [&](const char* key) {
    const auto& pair = place.child(json, key, [](const nlohmann::json& v) { return v.is_array() && v.size() == 2 && is_token_id(v[1]); },
                                   "[token, id]");
    return pair[1].get<int32_t>();
  };
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const JsonPlace list = place / "processors";
    const auto& items = place.child(json, "processors", [](const nlohmann::json& v) { return v.is_array(); }, "a list");
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_object()) throw list[i].error("expected a post-processor, got " + items[i].dump().substr(0, 80));
      read(items[i], list[i]);
    }
    return;
  }
  // Each of the rest adds tokens; tokenizers nests two of them, which no published file does.
  if (template_ != std::vector<int32_t>{kSequence}) {
    throw (place / "type").error("a second post-processor that adds special tokens; basin reads one");
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    template_ = {token_id("cls"), kSequence, token_id("sep")};
    return;
  }
  if (type != "TemplateProcessing") {
    throw (place / "type").error("post-processor '" + type + "' is not supported (basin reads TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing and Sequence)");
  }
  const auto& special = place.child(json, "special_tokens", [](const nlohmann::json& v) { return v.is_object(); }, "an object");
  const auto& single = place.child(json, "single", [](const nlohmann::json& v) { return v.is_array(); }, "a list");
  const JsonPlace items = place / "single";
  template_.clear();
  for (std::size_t i = 0; i < single.size(); ++i) {
    const auto& item = single[i];
    if (item.contains("Sequence")) {
      const std::string id = (items[i] / "Sequence").string(item.at("Sequence"), "id");
      if (id != "A") throw (items[i] / "Sequence" / "id").error("the single template names sequence '" + id + "', expected A");
      template_.push_back(kSequence);
    } else if (item.contains("SpecialToken")) {
      const std::string name = (items[i] / "SpecialToken").string(item.at("SpecialToken"), "id");
      if (!special.contains(name)) throw (place / "special_tokens").error("the template's '" + name + "' is not among them");
      const auto& ids = (place / "special_tokens" / name).child(special.at(name), "ids", [](const nlohmann::json& v) { return v.is_array(); }, "a list of ids");
      for (const auto& id : ids) {
        if (!is_token_id(id)) throw (place / "special_tokens" / name / "ids").error("expected token ids, got " + id.dump());
        template_.push_back(id.get<int32_t>());
      }
    } else {
      throw items[i].error("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + item.dump().substr(0, 80));
    }
  }
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  if (template_ == std::vector<int32_t>{kSequence}) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + template_.size());
  for (const int32_t id : template_) {
    if (id == kSequence) out.insert(out.end(), ids.begin(), ids.end());
    else out.push_back(id);
  }
  return out;
}

}  // namespace basin::tokenizer
