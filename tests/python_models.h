#pragma once

// Models scripted in Python and data saved from Python, for the tests that
// train them in basin (TorchScriptTest, ImageFolderTest, CheckpointTest).
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace basin::test {

// Net: a small CNN with BatchNorm on 1x4x4 inputs, 3 classes. LossNet: the
// same layers, forward(x) its logits and forward(x, y) its cross-entropy.
// OwnLossNet: forward(x, y) alone, a loss of its own (cross-entropy plus a
// penalty on the logits). Mlp: 16 inputs, 3 classes.
inline const char* kPythonModels = R"(import torch
from typing import Optional
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(64, 3)
    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))
class LossNet(Net):
    def forward(self, x, y: Optional[torch.Tensor] = None):
        logits = self.head(torch.relu(self.bn(self.conv(x))).flatten(1))
        if y is None:
            return logits
        return torch.nn.functional.cross_entropy(logits, y)
class OwnLossNet(Net):
    def forward(self, x, y):
        logits = self.head(torch.relu(self.bn(self.conv(x))).flatten(1))
        return torch.nn.functional.cross_entropy(logits, y) + 0.01 * logits.pow(2).mean()
class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)
        self.out = torch.nn.Linear(8, 3)
    def forward(self, x):
        return self.out(torch.tanh(self.fc(x.flatten(1))))
)";

/// Writes models.py, the scripted models net.pt, lossnet.pt, ownloss.pt and
/// mlp.pt, and a learnable task train.pt / test.pt (1x4x4 inputs, 3
/// classes) into `dir`.
inline void write_python_inputs(const TempDir& dir) {
  write_text(dir.file("models.py"), kPythonModels);
  const auto python = run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import torch, models\n"
      "torch.manual_seed(0)\n"
      "torch.jit.script(models.Net()).save('net.pt'); torch.jit.script(models.Mlp()).save('mlp.pt')\n"
      "torch.jit.script(models.LossNet()).save('lossnet.pt'); torch.jit.script(models.OwnLossNet()).save('ownloss.pt')\n"
      "w = torch.randn(16, 3)\n"
      "for name, n in (('train', 256), ('test', 128)):\n"
      "  x = torch.randn(n, 1, 4, 4)\n"
      "  torch.save({'x': x, 'y': (x.reshape(n, 16) @ w).argmax(1)}, name + '.pt')\"");
  ASSERT_EQ(python.exit_code, 0) << python.output;
}

/// A config that trains the scripted `model` of `dir` with SAM on its train.pt.
inline Json python_model_config(const TempDir& dir, const std::string& model) {
  Json config = smoke_config();
  config["model"] = {{"torchscript", dir.file(model)}};
  config["data"] = {{"name", "tensors"}, {"train", dir.file("train.pt")}, {"test", dir.file("test.pt")}, {"batch_size", 32}};
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["max_epochs"] = 3;
  return config;
}

}  // namespace basin::test
