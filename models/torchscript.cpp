// A model from Python: torch.jit.script(model).save("model.pt").
//
//     {"model": {"torchscript": "model.pt"}}
//
// Its parameters and buffers are the module's own tensors, under the
// module's own (PyTorch's) names: basin trains them in place, so every
// algorithm, precision, parallel mode and checkpoint sees them as it sees a
// C++ model's. It declares no units: under zero3 it is one unit (1/N at
// rest, whole during a step). At the end basin-train saves it as
// TorchScript again (model.pt in the run directory) beside its state_dict.
//
// Its forward is called forward(x) for logits; a module that computes its
// own loss ("loss": "model") takes forward(x, y) and returns the batch's
// mean loss; with forward(self, x, y: Optional[Tensor] = None) it gives
// both, and the test accuracy is measured from forward(x).
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include "basin/core/config/config_error.h"
#include "basin/core/model/model.h"

namespace basin {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, std::min<std::size_t>(text.find('\n'), 200)); }

/// Holds a scripted submodule's tensors under its name; its own train() /
/// eval() reach the submodule (an algorithm may set one block's mode alone).
class ScriptedChild : public torch::nn::Module {
 public:
  ScriptedChild(const std::string& name, torch::jit::Module scripted)
      : torch::nn::Module(name), scripted_(std::move(scripted)) {}
  void train(bool on) override {
    torch::nn::Module::train(on);
    scripted_.train(on);
  }

 private:
  torch::jit::Module scripted_;
};

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(Params& params, const DatasetInfo& /*info*/) {
    key_ = params.path_of("torchscript");
    const std::string& key = key_;
    path_ = params.string("torchscript");
    (void)params.string("name", "torchscript");
    const std::string where = "config key '" + key + "': '" + path_ + "'";
    if (FILE* file = std::fopen(path_.c_str(), "rb")) {
      std::fclose(file);
    } else {
      throw ConfigError(where + " cannot be read");
    }
    try {
      module_ = torch::jit::load(path_, c10::Device(c10::kCPU));  // a file saved from a GPU loads here too
    } catch (const std::exception& error) {
      throw ConfigError(where + " is not a TorchScript file (torch.jit.save's): " + first_line(error.what()));
    }
    if (!module_.find_method("forward")) {
      throw ConfigError(where + " has no forward method; basin calls forward(x) with a batch of inputs");
    }
    // forward(x) gives logits; forward(x, y) may return the loss ("loss": "model"), and forward(x, y=None) both.
    const auto& arguments = module_.get_method("forward").function().getSchema().arguments();
    int64_t required = 0;
    for (std::size_t i = 1; i < arguments.size(); ++i) required += arguments[i].default_value().has_value() ? 0 : 1;
    takes_targets_ = arguments.size() >= 3;
    gives_logits_ = required <= 1;
    if (arguments.size() < 2 || required > 2) {
      throw ConfigError(where + ": forward takes " + std::to_string(arguments.size() - 1) + " arguments (" +
                        std::to_string(required) + " required); basin calls forward(x), or forward(x, y) under "
                        "\"loss\": \"model\"");
    }
    mirror(module_, *this);
  }

  bool computes_loss() const override { return takes_targets_; }
  bool gives_logits() const override { return gives_logits_; }

  at::Tensor forward_loss(const at::Tensor& inputs, const at::Tensor& targets) override {
    return tensor_from(module_.forward({inputs, targets}), "the loss, a scalar");
  }

  at::Tensor forward(const at::Tensor& inputs) override {
    return tensor_from(module_.forward({inputs}), "a tensor of logits [batch, classes]");
  }

  void train(bool on) override {
    Model::train(on);
    module_.train(on);  // its own flag: dropout and BatchNorm read it
  }

  void export_trained(const std::string& dir) override {
    Model::export_trained(dir);
    // In eval mode, as Python would use it; through a temporary file, so a failed write leaves none.
    const bool training = is_training();
    module_.train(false);
    const std::string path = dir + "/model.pt", temporary = path + ".tmp";
    try {
      module_.save(temporary);
    } catch (...) {
      module_.train(training);
      std::remove(temporary.c_str());
      throw;
    }
    module_.train(training);
    if (std::rename(temporary.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write '" + path + "'");
  }

 private:
  at::Tensor tensor_from(const c10::IValue& out, const std::string& expected) const {
    if (!out.isTensor()) {
      throw ConfigError("config key '" + key_ + "': the forward of '" + path_ + "' returned " + out.tagKind() +
                        "; expected " + expected);
    }
    return out.toTensor();
  }

  /// The module's tensors registered here under the same names: one tensor
  /// each, so a step or a load here is one in the module.
  static void mirror(const torch::jit::Module& from, torch::nn::Module& to) {
    for (const auto& p : from.named_parameters(/*recurse=*/false)) to.register_parameter(p.name, p.value, p.value.requires_grad());
    for (const auto& b : from.named_buffers(/*recurse=*/false)) to.register_buffer(b.name, b.value);
    for (const auto& child : from.named_children()) {
      auto holder = std::make_shared<ScriptedChild>(child.name, child.value);
      mirror(child.value, *holder);
      to.register_module(child.name, holder);
    }
  }

  std::string key_, path_;
  torch::jit::Module module_;
  bool takes_targets_ = false, gives_logits_ = true;
};

BASIN_REGISTER(model_registry(), "torchscript", TorchScriptModel);

}  // namespace
}  // namespace basin
