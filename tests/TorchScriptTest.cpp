// "model": {"torchscript": ...}: a model scripted in Python, trained by
// basin-train with SAM (one process and two), handed back to Python as
// TorchScript and as a state_dict; one SAM step against Python's own.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config.h"
#include "basin/core/model/model.h"
#include "python_models.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kRun = BASIN_RUN_EXE;

// Which test samples an evaluation in a format of unit roundoff `unit` could
// class otherwise than the exact one: those whose exact (float64) margin over
// another class is within both logits' error bounds. Each bound is Higham's
// running one through Net's layers, every value rounded and every sum kept in
// that format (autocast keeps some in fp32, which errs less): an inner product
// of n terms with inputs, weights and result rounded errs at most
// gamma(n + 3) (|W| |x| + |b|), plus |W| times its input's error; BatchNorm's
// affine map at most gamma(8) of its terms; relu none; and each rounded
// value at most 2^-25 more where it underflows into fp16's subnormals. The
// worst case is loose (39 of 128 samples for the trained Net, whose fp16 and
// fp32 accuracies were equal) but holds on any CPU's kernels.
const char* kRoundingTies = R"(import copy, torch
def rounding_ties(net, x, unit):
    g = lambda n: n * unit / (1 - n * unit)
    tiny = 2.0 ** -25
    net = copy.deepcopy(net).double().eval(); x = x.double()
    conv, bn, head = net.conv, net.bn, net.head
    with torch.no_grad():
        n = conv.weight[0].numel() + 1
        c = conv(x)
        e = g(n + 3) * torch.nn.functional.conv2d(x.abs(), conv.weight.abs(), conv.bias.abs(), padding=conv.padding) + (n + 3) * tiny
        s = bn.weight / (bn.running_var + bn.eps).sqrt()
        y = bn(c)
        e = s.abs()[:, None, None] * e * (1 + g(8)) + g(8) * (((c - bn.running_mean[:, None, None]) * s[:, None, None]).abs() + bn.bias.abs()[:, None, None]) + 8 * tiny
        r = torch.relu(y).flatten(1); e = e.flatten(1)
        n = head.weight.shape[1]
        logits = head(r)
        e = e @ head.weight.abs().t() + g(n + 3) * ((r + e) @ head.weight.abs().t() + head.bias.abs()) + (n + 3) * tiny
        top = logits.argmax(1, keepdim=True)
        within = (logits.gather(1, top) - logits) <= (e.gather(1, top) + e)
        within.scatter_(1, top, False)
    return int(within.any(1).sum())
)";

/// Python loads the run's model.pt and state_dict.pt: the scripted module
/// and the eager class with the state_dict give the same outputs, bit for
/// bit, and the test accuracy basin reported; training moved the weights and
/// BatchNorm's statistics. `autocast` ("bfloat16") evaluates as basin did
/// under amp_bf16. `measured_in_fp16`: basin's accuracy comes from an fp16
/// evaluation and Python's from fp32, so they may differ by the samples
/// whose class fp16's rounding (or fp32's) could change (kRoundingTies).
void expect_python_reads_the_trained_model(const test::TempDir& dir, const std::string& run_dir,
                                           const std::string& autocast = "", bool measured_in_fp16 = false) {
  test::write_text(dir.file("rounding.py"), kRoundingTies);
  const auto python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import sys, json, torch, models, contextlib, rounding\n"
      "run = sys.argv[1]\n"
      "m = torch.jit.load(run + '/model.pt').eval()\n"
      "n = models.Net(); n.load_state_dict(torch.load(run + '/state_dict.pt', weights_only=True)); n.eval()\n"
      "d = torch.load('test.pt')\n"
      "cast = " + (autocast.empty() ? "contextlib.nullcontext()" : "torch.autocast('cpu', dtype=torch." + autocast + ")") + "\n"
      "with torch.no_grad(), cast: a, b = m(d['x']), n(d['x'])\n"
      "assert torch.equal(a, b), (a - b).abs().max()\n"
      "accuracy = (a.argmax(1) == d['y']).double().mean().item()\n"
      "reported = json.load(open(run + '/summary.json'))['test_accuracy']\n"
      "ties = rounding.rounding_ties(n, d['x'], 2.0 ** -11 + 2.0 ** -24) if sys.argv[2] == 'fp16' else 0\n"
      "assert abs(accuracy - reported) <= (ties + 1e-9) / len(d['y']), (accuracy, reported, ties)\n"
      "start = torch.jit.load('net.pt')\n"
      "assert not torch.equal(start.head.weight, m.head.weight)\n"
      "assert not torch.equal(start.bn.running_mean, m.bn.running_mean)\n"
      "print('python: test accuracy', accuracy, 'samples within rounding of a tie', ties)\" " + run_dir + " " +
      (measured_in_fp16 ? "fp16" : "fp32"));
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

TEST(TorchScriptTest, ABatchNormCnnScriptedInPythonTrainsWithSamAndComesBackToPython) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  test::write_text(dir.file("config.json"), test::python_model_config(dir, "net.pt").dump());
  const auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_python_reads_the_trained_model(dir, dir.file("run"));
  // Two ranks (ddp, zero1, zero2, then zero3, where the module is one unit): the same, read back in Python.
  for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
    Json config = test::python_model_config(dir, "net.pt");
    config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
    test::write_text(dir.file("config.json"), config.dump());
    const std::string run_dir = dir.file("run-" + mode);
    const auto ranks = test::run_command(kRun + " --nproc 2 -- " + kTrain + " --config " + dir.file("config.json") +
                                         " --run-dir " + run_dir, 300);
    ASSERT_EQ(ranks.exit_code, 0) << mode << "\n" << ranks.output;
    expect_python_reads_the_trained_model(dir, run_dir);
  }
}

// amp_bf16: the module's forward runs under basin's autocast, and Python's
// torch.autocast (bf16) gives the same outputs and accuracy; init_from
// starts a run from that run's state_dict.pt (lr 0: its parameters stay).
TEST(TorchScriptTest, UnderAmpBf16AndFromInitFromTheModuleTrainsAndComesBack) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "net.pt");
  config["precision"] = "amp_bf16";
  test::write_text(dir.file("config.json"), config.dump());
  auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("bf16"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_python_reads_the_trained_model(dir, dir.file("bf16"), "bfloat16");

  config = test::python_model_config(dir, "net.pt");
  config.erase("algorithms");
  config["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0})");
  config["init_from"] = dir.file("bf16/state_dict.pt");
  test::write_text(dir.file("config.json"), config.dump());
  run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("init"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import torch\n"
      "trained = torch.load('bf16/state_dict.pt', weights_only=True)\n"
      "started = torch.jit.load('init/model.pt')\n"
      "for name, p in started.named_parameters(): assert torch.equal(p, trained[name]), name\n"
      "assert not torch.equal(torch.jit.load('net.pt').head.weight, started.head.weight)\n"
      "print('python: init_from took the trained parameters')\"");
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

// amp_fp16 (CPU autocast to float16 from LibTorch 2.5, with the grad scaler
// it brings): the module trains and comes back; Python, in fp32, gets
// bit-equal outputs from model.pt and the state_dict, and about the
// accuracy basin measured in fp16.
TEST(TorchScriptTest, UnderAmpFp16TheModuleTrainsWithTheGradScalerAndComesBack) {
  if (!compat::kCpuAutocastFp16) {
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << "'s CPU autocast has no float16 (2.5 and later have)";
  }
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "net.pt");
  config["precision"] = "amp_fp16";
  test::write_text(dir.file("config.json"), config.dump());
  const auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("fp16"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json summary = Json::parse(test::read_text(dir.file("fp16/summary.json")));
  EXPECT_GT(summary["test_accuracy"].get<double>(), 0.5);  // 3 classes: chance is 1/3
  // Python evaluates in fp32: the accuracy basin measured in fp16 but for the
  // samples fp16's rounding could class otherwise.
  expect_python_reads_the_trained_model(dir, dir.file("fp16"), "", true);
}

// A block's own eval() reaches the scripted block: its BatchNorm stops
// moving its statistics while the rest of the model trains.
TEST(TorchScriptTest, ABlocksOwnModeReachesTheScriptedBlock) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Params params(Json{{"torchscript", dir.file("net.pt")}}, "model");
  auto model = model_registry().create("torchscript", params, DatasetInfo{{1, 4, 4}, 3});
  model->train();
  at::Tensor running_mean;
  for (const auto& b : model->named_buffers()) {
    if (b.key() == "bn.running_mean") running_mean = b.value();
  }
  ASSERT_TRUE(running_mean.defined());
  const at::Tensor before = running_mean.clone();
  model->named_children()["bn"]->eval();
  at::NoGradGuard no_grad;
  model->forward(at::randn({8, 1, 4, 4}));
  EXPECT_TRUE(at::equal(running_mean, before)) << "the block in eval mode moved its statistics";
  model->named_children()["bn"]->train();
  model->forward(at::randn({8, 1, 4, 4}));
  EXPECT_FALSE(at::equal(running_mean, before)) << "the block in training mode kept its statistics";
}

// One SAM step (SGD, the whole training set as one batch) on the scripted
// MLP equals Python's: g at w, e = rho g / ||g||, g' at w + e, w - lr g'.
TEST(TorchScriptTest, OneSamStepEqualsTheStepComputedInPythonWithSamsFormula) {
  if (!test::have_python_torch()) GTEST_SKIP() << "Python's torch is not installed (Debian package python3-torch)";
  test::TempDir dir;
  test::write_python_inputs(dir);
  if (HasFatalFailure()) return;
  Json config = test::python_model_config(dir, "mlp.pt");
  config["data"]["batch_size"] = 256;
  config["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.5})");
  config["max_steps"] = 1;
  test::write_text(dir.file("config.json"), config.dump());
  const auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto python = test::run_command(
      "env -C " + dir.path().string() + " /usr/bin/python3 -c \"import sys, torch\n"
      "m = torch.jit.load('mlp.pt'); d = torch.load('train.pt'); p = list(m.parameters())\n"
      "loss = lambda: torch.nn.functional.cross_entropy(m(d['x']), d['y'])\n"
      "g = torch.autograd.grad(loss(), p)\n"
      "norm = torch.sqrt(sum((t.double() ** 2).sum() for t in g)).item()\n"
      "e = [0.05 * t / (norm + 1e-12) for t in g]\n"
      "with torch.no_grad():\n"
      "  for w, s in zip(p, e): w.add_(s)\n"
      "g2 = torch.autograd.grad(loss(), p)\n"
      "with torch.no_grad():\n"
      "  for w, s, t in zip(p, e, g2): w.sub_(s).sub_(0.5 * t)\n"
      "basin = torch.load(sys.argv[1] + '/state_dict.pt', weights_only=True)\n"
      "worst = max((basin[k] - v).abs().max().item() for k, v in m.state_dict().items())\n"
      "moved = max((torch.jit.load('mlp.pt').state_dict()[k] - v).abs().max().item() for k, v in m.state_dict().items())\n"
      "print('python: largest difference', worst, 'step', moved)\n"
      "assert moved > 1e-3 and worst <= 1e-5, (worst, moved)\" " + dir.file("run"));
  EXPECT_EQ(python.exit_code, 0) << python.output;
}

TEST(TorchScriptTest, AFileThatIsNotTorchScriptOrAModuleWithoutForwardIsOneLineAndExitTwo) {
  test::TempDir dir;
  Json config = test::smoke_config();
  test::write_text(dir.file("text.pt"), "not TorchScript");
  std::vector<std::pair<std::string, std::string>> cases = {
      {dir.file("text.pt"), "is not a TorchScript file"}, {dir.file("missing.pt"), "cannot be read"}};
  if (test::have_python_torch()) {
    // TorchScript compiles from source files: the class goes in one.
    test::write_text(dir.file("no_forward.py"), "import torch\nclass NoForward(torch.nn.Module):\n"
                                                "    @torch.jit.export\n    def f(self, x):\n        return x\n");
    const auto python = test::run_command("env -C " + dir.path().string() + " /usr/bin/python3 -c \"import torch, no_forward\n"
                                          "torch.jit.script(no_forward.NoForward()).save('no_forward.pt')\"");
    ASSERT_EQ(python.exit_code, 0) << python.output;
    cases.emplace_back(dir.file("no_forward.pt"), "has no forward method");
  }
  for (const auto& [file, says] : cases) {
    config["model"] = {{"torchscript", file}};
    test::write_text(dir.file("config.json"), config.dump());
    const auto run = test::run_command(kTrain + " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"));
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("'model.torchscript'"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(file), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(says), std::string::npos) << run.output;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  }
}

}  // namespace
}  // namespace basin
