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
  s.request_log = {{1, 0.5, 0, 10, 2.0, 0.5}, {1, 1.5, 1, 20, 1.0, 0.5}};
  return s;
}

TEST(LiveOutput, RequestCsvHasOneRowPerRequest) {
  const std::string csv = TwoVersionSummary().RequestCsv();
  EXPECT_EQ(csv,
            "consumer,time_s,version,iteration,loss,staleness_s\n"
            "1,0.500000,0,10,2,0.500000\n"
            "1,1.500000,1,20,1,0.500000\n");
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
