// LiveRun options, enums and the output formats (no MPI needed).
#include <gtest/gtest.h>

#include <string>

#include "viper/workflow/live.h"

namespace viper {
namespace workflow {
namespace {

TEST(LiveOptions, DefaultsAreValid) {
  LiveRun::Options o;
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
}

TEST(LiveOptions, InvalidFieldsAreNamed) {
  std::string error;
  LiveRun::Options o;
  o.strategy = schedulers::StrategyKind::kOracle;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("strategy"), std::string::npos) << error;

  o = LiveRun::Options();
  o.notify = transports::Notify::kPoll;  // poll scans a directory: needs the pfs tier
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("notify"), std::string::npos) << error;

  o = LiveRun::Options();
  o.tier = transports::Tier::kPfs;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("pfs_dir"), std::string::npos) << error;

  o = LiveRun::Options();
  o.workload = LiveRun::Workload::kReplay;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("log_path"), std::string::npos) << error;

  o = LiveRun::Options();
  o.requests_per_s = 0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("requests_per_s"), std::string::npos) << error;

  o = LiveRun::Options();
  o.trainer.batch_size = 0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("trainer."), std::string::npos) << error;

  // The planner's bound on kept models, [0, 1000]; its default (8) is the run's.
  EXPECT_EQ(LiveRun::Options().keep_versions, schedulers::OnlinePlanner::Options().keep_versions);
  for (int bad : {-1, 1001}) {
    o = LiveRun::Options();
    o.keep_versions = bad;
    EXPECT_FALSE(o.IsValid(&error)) << bad;
    EXPECT_EQ(error.rfind("keep_versions", 0), 0u) << error;
  }
  o = LiveRun::Options();
  o.keep_versions = 0;
  EXPECT_TRUE(o.IsValid(&error)) << error;

  // A given planning cost is checked as the planner would.
  o = LiveRun::Options();
  o.plan_cost = schedulers::CheckpointCost{-1.0, 0.1};
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_EQ(error.rfind("plan_cost", 0), 0u) << error;
  o.plan_cost = schedulers::CheckpointCost{0.001, 0.002};
  EXPECT_TRUE(o.IsValid(&error)) << error;
}

TEST(LiveOptions, DriftAndSubsetsAreValidated) {
  std::string error;
  // A label swap in the middle of a 3-epoch run on 2,000 images (93 iterations).
  LiveRun::Options o;
  o.trainer.train_samples = 2000;
  o.trainer.epochs = 3;
  o.trainer.drift = Trainer::Drift::kLabelSwap;
  o.trainer.drift_at_iteration = 50;
  EXPECT_TRUE(o.IsValid(&error)) << error;

  LiveRun::Options bad = o;
  bad.trainer.drift_at_iteration = 0;  // required with a drift
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_at_iteration"), std::string::npos) << error;

  bad = o;
  bad.trainer.drift_at_iteration = 94;  // after N = 93: the drift would never happen
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_at_iteration"), std::string::npos) << error;
  EXPECT_NE(error.find("93"), std::string::npos) << error;
  bad.trainer.max_iterations = 0;
  bad.trainer.drift_at_iteration = 93;  // the last iteration is allowed
  EXPECT_TRUE(bad.IsValid(&error)) << error;
  bad.trainer.max_iterations = 60;  // a cap shortens the run
  EXPECT_FALSE(bad.IsValid(&error));

  bad = o;
  bad.trainer.drift_swap_class_b = bad.trainer.drift_swap_class_a;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_swap_class_b"), std::string::npos) << error;

  bad = o;
  bad.trainer.drift = Trainer::Drift::kRotation;
  bad.trainer.drift_rotation_degrees = 400;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_rotation_degrees"), std::string::npos) << error;
  bad.trainer.drift_rotation_degrees = 90;
  bad.trainer.drift_duration_iterations = -1;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_duration_iterations"), std::string::npos) << error;

  bad = o;
  bad.trainer.drift = Trainer::Drift::kClassIncremental;
  bad.trainer.drift_initial_classes = 10;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_initial_classes"), std::string::npos) << error;

  // The consumers need a test subset, disjoint from validation and within the split.
  bad = o;
  bad.trainer.test_samples = 0;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.test_samples"), std::string::npos) << error;
  bad.trainer.test_samples = 9000;  // 2,000 + 9,000 > 10,000
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("val_samples + test_samples"), std::string::npos) << error;

  // A replay has no trainer to drift.
  bad = o;
  bad.workload = LiveRun::Workload::kReplay;
  bad.log_path = "some.csv";
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift"), std::string::npos) << error;
  bad.trainer.drift = Trainer::Drift::kNone;
  EXPECT_TRUE(bad.IsValid(&error)) << error;
}

// The drift kinds a live run takes (every one drifts the consumers'
// traffic) and its staleness table's options.
TEST(LiveOptions, NewDriftKindsAndTheStalenessTableAreValidated) {
  std::string error;
  LiveRun::Options o;
  o.trainer.train_samples = 2000;
  o.trainer.epochs = 3;  // 93 iterations
  o.trainer.drift_at_iteration = 40;
  for (auto kind : {Trainer::Drift::kClassIncremental, Trainer::Drift::kLabelSwap, Trainer::Drift::kRotation,
                    Trainer::Drift::kRecurring, Trainer::Drift::kPriorShift}) {
    LiveRun::Options k = o;
    k.trainer.drift = kind;
    EXPECT_TRUE(k.IsValid(&error)) << Trainer::ToString(kind) << ": " << error;
  }
  LiveRun::Options bad = o;
  bad.trainer.drift = Trainer::Drift::kRecurring;
  bad.trainer.drift_period_iterations = 0;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_period_iterations"), std::string::npos) << error;
  bad = o;
  bad.trainer.drift = Trainer::Drift::kPriorShift;
  bad.trainer.drift_prior_mass = 0;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_prior_mass"), std::string::npos) << error;
  bad.trainer.drift_prior_mass = 0.9;
  bad.trainer.drift_prior_classes = {0, 0};
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.drift_prior_classes"), std::string::npos) << error;

  // The table: trainer only, validation points and a bound of 0 or >= 2.
  LiveRun::Options table = o;
  table.trainer.staleness_table = true;
  EXPECT_TRUE(table.IsValid(&error)) << error;
  bad = table;
  bad.trainer.staleness_max_versions = 1;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.staleness_max_versions"), std::string::npos) << error;
  bad = table;
  bad.trainer.val_every_iterations = 0;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.val_every_iterations"), std::string::npos) << error;
  bad = table;
  bad.workload = LiveRun::Workload::kReplay;
  bad.log_path = "some.csv";
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("trainer.staleness_table"), std::string::npos) << error;
}

TEST(LiveOptions, WorkloadRoundTrips) {
  for (auto w : {LiveRun::Workload::kTrainer, LiveRun::Workload::kReplay}) {
    auto back = LiveRun::WorkloadFromString(LiveRun::ToString(w));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, w);
  }
  EXPECT_FALSE(LiveRun::WorkloadFromString("bogus").ok());
}

LiveRun::Summary TwoVersionSummary() {
  LiveRun::Summary s;
  s.consumers = 1;
  s.training_end_s = 2.0;
  LiveRun::VersionStats v0, v1;
  v1.version = 1;
  v1.iteration = 20;
  v1.checkpoint_s = 1.0;
  v1.stall_s = 0.01;
  v1.delivered_to = 1;
  v1.update_latency_s = 0.05;
  s.versions = {v0, v1};
  s.request_log = {{1, 0.5, 0, 10, 2.0, 0.5}, {1, 1.5, 1, 20, 1.0, 0.5, 25, 24}};
  return s;
}

TEST(LiveOutput, RequestCsvHasOneRowPerRequest) {
  const std::string csv = TwoVersionSummary().RequestCsv();
  EXPECT_EQ(csv,
            "consumer,time_s,version,iteration,loss,staleness_s,traffic_iteration,true_iteration\n"
            "1,0.500000,0,10,2,0.500000,-1,-1\n"
            "1,1.500000,1,20,1,0.500000,25,24\n");
}

TEST(LiveOutput, ChromeTraceHasEveryTrack) {
  const std::string t = TwoVersionSummary().ChromeTrace();
  for (const char* track :
       {"\"producer\"", "\"transfer\"", "\"notification\"", "\"consumer 1\"", "serve v0", "serve v1"}) {
    EXPECT_NE(t.find(track), std::string::npos) << track;
  }
}

TEST(LiveOutput, CompareNeedsAProducerSummary) {
  EXPECT_FALSE(CompareWithSimulation(LiveRun::Summary(), LiveRun::Options()).ok());
}

}  // namespace
}  // namespace workflow
}  // namespace viper
