// The heavy headers nearly every basin translation unit needs, compiled once.
// The programs, tests and benchmarks reuse this PCH (cmake/BasinPch.cmake), so
// keep it to what most of them include.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
