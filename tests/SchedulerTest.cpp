#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include "basin/core/optim/hyperparameters.h"
#include "basin/core/optim/scheduler.h"
#include "test_util.h"

namespace basin {
namespace {

std::shared_ptr<Scheduler> scheduler_from(const std::string& text) {
  Params params(Json::parse(text), "schedulers[0]");
  return make_scheduler(params);
}

// factor(t) of a schedule over units 0..n-1, after set_horizon(horizon).
std::vector<double> factors(const std::string& text, int64_t n, int64_t horizon = 100) {
  Params params(Json::parse(text), "schedulers[0]");
  auto schedule = schedule_registry().create(params.string("name"), params);
  schedule->set_horizon(horizon);
  std::vector<double> out;
  for (int64_t t = 0; t < n; ++t) out.push_back(schedule->factor(t));
  return out;
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-12) << "t=" << i;
}

TEST(SchedulerTest, EachScheduleFollowsItsFormula) {
  expect_near_all(factors(R"({"name": "constant", "factor": 0.5, "steps": 2})", 4), {0.5, 0.5, 1, 1});
  expect_near_all(factors(R"({"name": "step", "step_size": 2, "gamma": 0.1})", 5), {1, 1, 0.1, 0.1, 0.01});
  expect_near_all(factors(R"({"name": "multistep", "milestones": [1, 3], "gamma": 0.5})", 5), {1, 0.5, 0.5, 0.25, 0.25});
  expect_near_all(factors(R"({"name": "exponential", "gamma": 0.9})", 3), {1, 0.9, 0.81});
  expect_near_all(factors(R"({"name": "linear_warmup", "warmup": 4})", 6), {0, 0.25, 0.5, 0.75, 1, 1});
  expect_near_all(factors(R"({"name": "linear_warmup", "warmup": 2, "start_factor": 0.5})", 3), {0.5, 0.75, 1});
  // Warmup 2 from 0, then half a cosine over the remaining 4 units to final_factor 0.1,
  // held after. The cosine values are what PyTorch's CosineAnnealingLR(T_max=4,
  // eta_min=0.1) gives a base lr of 1.
  expect_near_all(factors(R"({"name": "cosine_warmup", "warmup": 2, "total": 6, "final_factor": 0.1})", 8),
                  {0, 0.5, 1.0, 0.8681980515339464, 0.55, 0.23180194846605368, 0.1, 0.1});
  expect_near_all(factors(R"({"name": "polynomial", "total": 4, "power": 2})", 6), {1, 0.5625, 0.25, 0.0625, 0, 0});
  expect_near_all(factors(R"({"name": "sequential", "milestones": [2],
      "schedules": [{"name": "linear_warmup", "warmup": 2}, {"name": "exponential", "gamma": 0.5}]})", 5),
                  {0, 0.5, 1, 0.5, 0.25});
}

TEST(SchedulerTest, LengthlessSchedulesSpanTheRun) {
  // No "total": the cosine ends at the horizon the trainer gives (here 10).
  const auto f = factors(R"({"name": "cosine_warmup", "warmup": 0})", 11, 10);
  EXPECT_NEAR(f[0], 1.0, 1e-12);
  EXPECT_NEAR(f[5], 0.5, 1e-12);
  EXPECT_NEAR(f[10], 0.0, 1e-12);
  const auto p = factors(R"({"name": "polynomial"})", 5, 4);
  EXPECT_NEAR(p[2], 0.5, 1e-12);
  // Sequential gives its last schedule what remains of the run.
  const auto s = factors(R"({"name": "sequential", "milestones": [2],
      "schedules": [{"name": "constant"}, {"name": "cosine_warmup"}]})", 7, 6);
  EXPECT_NEAR(s[4], 0.5, 1e-12);
  EXPECT_NEAR(s[6], 0.0, 1e-12);
}

// A resumed run whose length changed (another world size) sets the horizon
// again: a lengthless schedule takes the new one, a configured total stays.
TEST(SchedulerTest, ANewHorizonMovesALengthlessScheduleAndNotAConfiguredTotal) {
  for (const char* text : {R"({"name": "cosine_warmup", "warmup": 0})", R"({"name": "polynomial"})",
                           R"({"name": "sequential", "milestones": [2], "schedules": [{"name": "constant"}, {"name": "cosine_warmup"}]})"}) {
    SCOPED_TRACE(text);
    Params params(Json::parse(text), "schedulers[0]");
    auto schedule = schedule_registry().create(params.string("name"), params);
    schedule->set_horizon(100);
    EXPECT_GT(schedule->factor(10), 0.5);
    schedule->set_horizon(10);
    EXPECT_NEAR(schedule->factor(10), 0.0, 1e-12);
  }
  Params params(Json::parse(R"({"name": "cosine_warmup", "total": 20})"), "schedulers[0]");
  auto fixed = schedule_registry().create(params.string("name"), params);
  fixed->set_horizon(100);
  fixed->set_horizon(10);
  EXPECT_NEAR(fixed->factor(10), 0.5, 1e-12);
}

TEST(SchedulerTest, DrivesEveryGroupFromItsOwnBaseValue) {
  auto a = at::zeros({1}), b = at::zeros({1});
  torch::optim::SGD sgd({torch::optim::OptimizerParamGroup({a}), torch::optim::OptimizerParamGroup({b})},
                        torch::optim::SGDOptions(0.2));
  sgd.param_groups()[1].options().set_lr(0.4);
  auto scheduler = scheduler_from(R"({"name": "step", "step_size": 1, "gamma": 0.5})");
  scheduler->attach(sgd, 10);
  scheduler->step(sgd);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.1);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[1].options().get_lr(), 0.2);
}

TEST(SchedulerTest, DrivesAnyNumericHyperparameter) {
  auto a = at::zeros({1});
  torch::optim::SGD sgd({a}, torch::optim::SGDOptions(0.1).momentum(0.8));
  auto scheduler = scheduler_from(R"({"name": "linear_warmup", "warmup": 2, "hyperparameter": "momentum"})");
  scheduler->attach(sgd, 10);
  EXPECT_DOUBLE_EQ(get_hyperparameter(sgd.param_groups()[0].options(), "momentum"), 0.0);
  scheduler->step(sgd);
  EXPECT_DOUBLE_EQ(get_hyperparameter(sgd.param_groups()[0].options(), "momentum"), 0.4);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.1);  // untouched
  EXPECT_EQ(scheduler->interval(), Scheduler::Interval::kStep);
  EXPECT_EQ(scheduler_from(R"({"name": "constant", "interval": "epoch"})")->interval(), Scheduler::Interval::kEpoch);
}

TEST(SchedulerTest, StateDictRoundTripResumesTheSchedule) {
  auto a = at::zeros({1});
  torch::optim::SGD first({a}, torch::optim::SGDOptions(1.0));
  auto original = scheduler_from(R"({"name": "exponential", "gamma": 0.5})");
  original->attach(first, 10);
  for (int i = 0; i < 3; ++i) original->step(first);
  const StateDict saved = original->state_dict();

  torch::optim::SGD second({a}, torch::optim::SGDOptions(0.125));  // already decayed, as in a checkpoint
  auto resumed = scheduler_from(R"({"name": "exponential", "gamma": 0.5})");
  resumed->attach(second, 10);
  resumed->load_state_dict(saved);
  resumed->step(second);
  original->step(first);
  EXPECT_EQ(resumed->count(), 4);
  EXPECT_DOUBLE_EQ(second.param_groups()[0].options().get_lr(), first.param_groups()[0].options().get_lr());
  EXPECT_DOUBLE_EQ(second.param_groups()[0].options().get_lr(), 0.0625);
}

TEST(SchedulerTest, BadSchedulesNameTheKey) {
  auto message_of = [](const std::string& text) { return test::config_error_of([&] { scheduler_from(text); }); };
  EXPECT_NE(message_of(R"({"name": "multistep", "milestones": [3, 1]})").find("'schedulers[0].milestones'"), std::string::npos);
  EXPECT_NE(message_of(R"({"name": "cosine_warmup", "warmup": 10, "total": 5})").find("'schedulers[0].total'"), std::string::npos);
  EXPECT_NE(message_of(R"({"name": "exponential", "gamma": -1})").find("'schedulers[0].gamma'"), std::string::npos);
  EXPECT_NE(message_of(R"({"name": "linear_warmup", "warmup": 2, "interval": "month"})").find("step, epoch"), std::string::npos);
  EXPECT_NE(message_of(R"({"name": "sequential", "milestones": [], "schedules": [{"name": "constant"}, {"name": "constant"}]})")
                .find("'schedulers[0].milestones'"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"name": "sequential", "milestones": [2], "schedules": [{"name": "constant"}, {"name": "cosine"}]})")
                .find("schedulers[0].schedules[1]"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"name": "warmup"})").find("known: constant, cosine_warmup"), std::string::npos);
}

}  // namespace
}  // namespace basin
