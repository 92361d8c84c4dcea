#include "basin/callbacks/grad_scaler.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/engine/logger.h"

namespace basin {

namespace {

GradScalerOptions options_from(Params& p) {
  GradScalerOptions o;
  o.init_scale = p.positive("init_scale", o.init_scale);
  o.growth_factor = p.number("growth_factor", o.growth_factor, 1.0);
  o.backoff_factor = p.number("backoff_factor", o.backoff_factor, 0.0, 1.0);
  if (o.backoff_factor <= 0 || o.backoff_factor >= 1) p.fail("backoff_factor", "a number in (0, 1)", p.raw("backoff_factor"));
  o.growth_interval = p.integer("growth_interval", o.growth_interval, 1);
  o.enabled = p.boolean("enabled", o.enabled);
  o.fused = p.boolean("fused", o.fused);
  return o;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options),
      scale_(at::full({1}, options.init_scale, at::kFloat)),
      growth_tracker_(at::zeros({1}, at::kInt)),
      found_inf_(at::zeros({1}, at::kFloat)) {
  if (!(options_.init_scale > 0) || !std::isfinite(options_.init_scale)) {
    throw std::invalid_argument("GradScaler: init_scale must be a positive finite number");
  }
}

GradScaler::GradScaler(Params& params) : GradScaler(options_from(params)) {}

void GradScaler::install(State& state) {
  state.scaler = shared_from_this();  // the trainer and SAM reach it through the state's slot
}

bool GradScaler::on_batch_end(const State& state, Logger& logger) {
  if (options_.enabled && state.timestamp.step % state.log_every == 0) logger.log("loss_scale", current_scale());
  return false;
}

void GradScaler::to_device(const at::Device& device) {
  if (scale_.device() == device) return;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  found_inf_ = found_inf_.to(device);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled) return loss;
  to_device(loss.device());
  return loss * scale_.to(loss.scalar_type());
}

bool GradScaler::unscale_and_check(const std::vector<at::Tensor>& grads, Communicator* communicator) {
  if (!options_.enabled) return true;
  if (!grads.empty()) to_device(grads.front().device());
  at::Tensor found = at::zeros({1}, at::TensorOptions(at::kFloat).device(scale_.device()));
  if (!grads.empty()) {
    const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
    if (options_.fused && compat::fused_amp_kernels_on(grads.front().device().type())) {
      // The fused kernel wants one dtype per call.
      std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
      for (const auto& g : grads) by_dtype[g.scalar_type()].push_back(g);
      for (auto& [dtype, group] : by_dtype) at::_amp_foreach_non_finite_check_and_unscale_(group, found, inv_scale);
    } else {
      at::NoGradGuard no_grad;
      for (const auto& g : grads) {
        g.mul_(inv_scale);
        // Checked after unscaling, so an unscale that overflows is caught too.
        found = at::maximum(found, at::logical_not(g.isfinite().all()).to(at::kFloat).reshape({1}));
      }
    }
  }
  if (communicator != nullptr && communicator->world_size() > 1) {
    std::vector<at::Tensor> verdict{found};
    communicator->all_reduce_max(verdict);  // any rank's overflow is every rank's
    found = verdict.front();
  }
  found_inf_ = at::maximum(found_inf_, found);
  return found.item<float>() == 0.0f;
}

bool GradScaler::step_found_inf() const { return found_inf_.item<float>() != 0.0f; }

void GradScaler::update() {
  if (!options_.enabled) return;
  if (options_.fused && compat::fused_amp_kernels_on(scale_.device().type())) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
  } else {
    // The arithmetic of ATen's kernels: products in double, stored as float.
    float scale = scale_.item<float>();
    int tracker = growth_tracker_.item<int>();
    if (step_found_inf()) {
      scale = static_cast<float>(scale * options_.backoff_factor);
      tracker = 0;
    } else if (tracker + 1 == options_.growth_interval) {
      const auto grown = static_cast<float>(scale * options_.growth_factor);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      ++tracker;
    }
    scale_.fill_(scale);
    growth_tracker_.fill_(tracker);
  }
  found_inf_.zero_();
}

double GradScaler::current_scale() const { return scale_.item<double>(); }

int64_t GradScaler::growth_tracker() const { return growth_tracker_.item<int64_t>(); }

StateDict GradScaler::state_dict() const {
  StateDict state = new_state_dict();
  state.insert("scale", current_scale());
  state.insert("growth_tracker", growth_tracker());
  state.insert("init_scale", options_.init_scale);
  state.insert("growth_factor", options_.growth_factor);
  state.insert("backoff_factor", options_.backoff_factor);
  state.insert("growth_interval", options_.growth_interval);
  state.insert("enabled", options_.enabled);
  return state;
}

void GradScaler::load_state_dict(const StateDict& state) {
  options_.init_scale = state.at("init_scale").toDouble();
  options_.growth_factor = state.at("growth_factor").toDouble();
  options_.backoff_factor = state.at("backoff_factor").toDouble();
  options_.growth_interval = state.at("growth_interval").toInt();
  options_.enabled = state.at("enabled").toBool();
  scale_.fill_(state.at("scale").toDouble());
  growth_tracker_.fill_(state.at("growth_tracker").toInt());
  found_inf_.zero_();
}

BASIN_REGISTER(callback_registry(), "grad_scaler", GradScaler);

}  // namespace basin
