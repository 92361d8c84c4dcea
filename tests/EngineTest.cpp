#include <gtest/gtest.h>

#include "basin/core/engine/algorithm.h"
#include "basin/core/engine/callback.h"
#include "basin/core/engine/engine.h"
#include "basin/core/engine/logger.h"

namespace basin {
namespace {

using Journal = std::vector<std::string>;

// Records each application into a shared journal; matches the events it is given.
class RecordingAlgorithm : public Algorithm {
 public:
  RecordingAlgorithm(std::string name, Journal& journal, std::vector<Event> events)
      : name_(std::move(name)), journal_(journal), events_(std::move(events)) {}
  std::string name() const override { return name_; }
  bool match(Event event, const State&) const override {
    return std::find(events_.begin(), events_.end(), event) != events_.end();
  }
  void apply(Event event, State&, Logger&) override { journal_.push_back(name_ + ":" + event_name(event)); }

 private:
  std::string name_;
  Journal& journal_;
  std::vector<Event> events_;
};

class RecordingCallback : public Callback {
 public:
  RecordingCallback(std::string name, Journal& journal) : name_(std::move(name)), journal_(journal) {}
  std::string name() const override { return name_; }
  bool on_fit_start(const State&, Logger&) override { return note("fit_start"); }
  bool on_after_step(const State&, Logger&) override { return note("after_step"); }

 private:
  bool note(const char* event) {
    journal_.push_back(name_ + ":" + event);
    return false;
  }
  std::string name_;
  Journal& journal_;
};

class RecordingLogger : public LoggerDestination {
 public:
  explicit RecordingLogger(Journal& journal) : journal_(journal) {}
  std::string name() const override { return "logger"; }
  bool on_fit_start(const State&, Logger&) override { return note("fit_start"); }
  bool on_after_step(const State&, Logger&) override { return note("after_step"); }
  void log_record(const Json& record) override { records.push_back(record); }
  std::vector<Json> records;

 private:
  bool note(const char* event) {
    journal_.push_back(std::string("logger:") + event);
    return false;
  }
  Journal& journal_;
};

TEST(EngineTest, AlgorithmsRunFirstInOrderThenCallbacksThenLoggers) {
  State state;
  Engine engine(state);
  Journal journal;
  const std::vector<Event> events = {Event::FIT_START, Event::AFTER_STEP};
  // Registered out of group order on purpose: the groups decide, not the calls.
  engine.add_logger(std::make_shared<RecordingLogger>(journal));
  engine.add_callback(std::make_shared<RecordingCallback>("cb", journal));
  engine.add_algorithm(std::make_shared<RecordingAlgorithm>("a", journal, events));
  engine.add_algorithm(std::make_shared<RecordingAlgorithm>("b", journal, events));

  engine.run(Event::FIT_START);
  EXPECT_EQ(journal, (Journal{"a:fit_start", "b:fit_start", "cb:fit_start", "logger:fit_start"}));

  journal.clear();
  engine.run(Event::AFTER_STEP);
  EXPECT_EQ(journal, (Journal{"b:after_step", "a:after_step", "cb:after_step", "logger:after_step"}));
}

TEST(EngineTest, TraceListsEachKindOfApplicationOnceInOrderAndCountsThem) {
  State state;
  Engine engine(state);
  Journal journal;
  engine.add_algorithm(std::make_shared<RecordingAlgorithm>("a", journal, std::vector<Event>{Event::INIT}));
  engine.add_algorithm(
      std::make_shared<RecordingAlgorithm>("b", journal, std::vector<Event>{Event::INIT, Event::AFTER_LOAD}));
  engine.run(Event::INIT);
  engine.run(Event::FIT_START);  // nobody matches: no trace
  for (int i = 0; i < 1000; ++i) engine.run(Event::AFTER_LOAD);  // as an algorithm acting every step does
  engine.run(Event::INIT);
  EXPECT_EQ(engine.trace(), (std::vector<std::string>{"a/init", "b/init", "b/after_load"}));
  EXPECT_EQ(engine.applications("b/after_load"), 1000);
  EXPECT_EQ(engine.applications("a/init"), 2);
  EXPECT_EQ(engine.applications("a/after_load"), 0);
}

// Changes max_steps at FIT_START; a callback must never see the old value then.
class SetsMaxSteps : public Algorithm {
 public:
  std::string name() const override { return "sets_max_steps"; }
  bool match(Event event, const State&) const override { return event == Event::FIT_START; }
  void apply(Event, State& state, Logger&) override { state.max_steps = 42; }
};

class WatchesMaxSteps : public Callback {
 public:
  std::string name() const override { return "watcher"; }
  bool on_init(const State& state, Logger&) override { return seen.push_back(state.max_steps), false; }
  bool on_fit_start(const State& state, Logger&) override { return seen.push_back(state.max_steps), false; }
  std::vector<int64_t> seen;
};

TEST(EngineTest, CallbackSeesAnAlgorithmsChangeOnlyAfterItRan) {
  State state;
  state.max_steps = 7;
  Engine engine(state);
  auto watcher = std::make_shared<WatchesMaxSteps>();
  engine.add_callback(watcher);  // registered before the algorithm
  engine.add_algorithm(std::make_shared<SetsMaxSteps>());
  engine.run(Event::INIT);
  engine.run(Event::FIT_START);
  EXPECT_EQ(watcher->seen, (std::vector<int64_t>{7, 42}));
}

class Throws : public Algorithm {
 public:
  std::string name() const override { return "thrower"; }
  bool match(Event event, const State&) const override { return event == Event::BEFORE_STEP; }
  void apply(Event, State&, Logger&) override { throw std::runtime_error("boom"); }
};

TEST(EngineTest, ExceptionNamesAlgorithmAndEvent) {
  State state;
  Engine engine(state);
  engine.add_algorithm(std::make_shared<Throws>());
  try {
    engine.run(Event::BEFORE_STEP);
    FAIL() << "expected EngineError";
  } catch (const EngineError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'thrower'"), std::string::npos) << message;
    EXPECT_NE(message.find("'before_step'"), std::string::npos) << message;
    EXPECT_NE(message.find("boom"), std::string::npos) << message;
  }
}

class StopsAtBatchEnd : public Callback {
 public:
  std::string name() const override { return "stopper"; }
  bool on_batch_end(const State&, Logger&) override { return true; }
};

TEST(EngineTest, CallbackReturningTrueRequestsStop) {
  State state;
  Engine engine(state);
  engine.add_callback(std::make_shared<StopsAtBatchEnd>());
  EXPECT_FALSE(engine.run(Event::BATCH_START));
  EXPECT_FALSE(state.stop_requested);
  EXPECT_TRUE(engine.run(Event::BATCH_END));
  EXPECT_TRUE(state.stop_requested);
}

TEST(EngineTest, LoggerMergesAlgorithmValuesIntoTheNextRecord) {
  State state;
  Engine engine(state);
  Journal journal;
  auto logger = std::make_shared<RecordingLogger>(journal);
  engine.add_logger(logger);
  engine.logger().log("sam/grad_norm", 1.5);
  engine.logger().emit(Json{{"step", 1}});
  engine.logger().emit(Json{{"step", 2}});
  ASSERT_EQ(logger->records.size(), 2u);
  EXPECT_EQ(logger->records[0]["sam/grad_norm"], 1.5);
  EXPECT_FALSE(logger->records[1].contains("sam/grad_norm"));
}

TEST(EventTest, NamesRoundTripAndUnknownNamesListKnownOnes) {
  for (Event event : all_events()) EXPECT_EQ(event_from_name(event_name(event)), event);
  EXPECT_EQ(std::string(event_name(Event::AFTER_SHARDING)), "after_sharding");
  try {
    event_from_name("after_lunch");
    FAIL();
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("after_sharding"), std::string::npos);
  }
  EXPECT_TRUE(is_after_event(Event::AFTER_STEP));
  EXPECT_FALSE(is_after_event(Event::BEFORE_STEP));
}

}  // namespace
}  // namespace basin
