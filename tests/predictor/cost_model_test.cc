#include "viper/predictor/cost_model.h"

#include <gtest/gtest.h>

#include <random>

namespace viper {
namespace predictor {
namespace {

TEST(CostModel, DefaultOptionsAreValid) {
  CostModel::Options o;
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.huber_relative_scale = 0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("huber_relative_scale"), std::string::npos);
}

// Samples from latency 2 ms and 10 GB/s with 2% multiplicative noise at sizes
// from 1 MB to 4 GB: the fit recovers both within 5% (the noise is 2%, and 40
// samples average it down).
TEST(CostModel, RecoversLatencyAndBandwidth) {
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::vector<CostSample> samples;
  for (int rep = 0; rep < 5; ++rep) {
    for (double bytes : {1e6, 4e6, 16e6, 64e6, 256e6, 1e9, 2e9, 4e9}) {
      samples.push_back({"host", "sync", CostPhase::kTransfer, bytes, (0.002 + bytes / 10e9) * (1 + noise(rng))});
    }
  }
  // One wild outlier (a page-cache miss, 10x) must not move the fit much (Huber loss).
  samples.push_back({"host", "sync", CostPhase::kTransfer, 64e6, 10 * (0.002 + 64e6 / 10e9)});
  auto model = CostModel::Fit(samples, CostModel::Options());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto c = model->Get("host", "sync", CostPhase::kTransfer);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->latency_s, 0.002, 0.0001);
  EXPECT_NEAR(c->bandwidth_Bps, 10e9, 0.5e9);
  EXPECT_EQ(c->samples, samples.size());
  auto missing = model->Get("gpu", "sync", CostPhase::kLoad);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("host/sync/transfer"), std::string::npos);
}

TEST(CostModel, NeedsTwoSizesAndNamesTheGroup) {
  std::vector<CostSample> s = {{"pfs", "async", CostPhase::kStall, 1e6, 0.01},
                               {"pfs", "async", CostPhase::kStall, 1e6, 0.011}};
  auto model = CostModel::Fit(s, CostModel::Options());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("tier pfs, mode async, phase stall"), std::string::npos)
      << model.status().message();
}

TEST(CostModel, ManualModel) {
  CostModel m;
  ASSERT_TRUE(m.Set("gpu", "sync", CostPhase::kTransfer, 0.001, 100e9).ok());
  EXPECT_FALSE(m.Set("gpu", "sync", CostPhase::kTransfer, 0.001, 0).ok());
  auto c = m.Get("gpu", "sync", CostPhase::kTransfer);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->Seconds(1e9), 0.011, 1e-12);  // 1 ms + 1 GB / 100 GB/s
}

TEST(CostSamples, ParsesCsvAnyColumnOrder) {
  const std::string text =
      "# from the transports benchmark\n"
      "bytes,seconds,tier,mode,phase,extra\n"
      "1000000,0.0021,host,sync,transfer,x\n"
      "\n"
      "2000000,0.0022,gpu,async,load,y\n";
  auto s = ParseCostSamplesCsv(text, "t.csv");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].tier, "gpu");
  EXPECT_EQ((*s)[1].phase, CostPhase::kLoad);
  EXPECT_DOUBLE_EQ((*s)[0].bytes, 1e6);
}

TEST(CostSamples, CsvErrorsNameFileLineAndField) {
  auto bad_number = ParseCostSamplesCsv("tier,mode,phase,bytes,seconds\nhost,sync,transfer,12x,0.1\n", "b.csv");
  ASSERT_FALSE(bad_number.ok());
  EXPECT_NE(bad_number.status().message().find("b.csv:2"), std::string::npos) << bad_number.status().message();
  EXPECT_NE(bad_number.status().message().find("'bytes'"), std::string::npos);

  auto bad_phase = ParseCostSamplesCsv("tier,mode,phase,bytes,seconds\nhost,sync,send,1,0.1\n", "p.csv");
  ASSERT_FALSE(bad_phase.ok());
  EXPECT_NE(bad_phase.status().message().find("p.csv:2: field 'phase'"), std::string::npos)
      << bad_phase.status().message();

  auto no_column = ParseCostSamplesCsv("tier,mode,phase,bytes\nhost,sync,load,1\n", "h.csv");
  ASSERT_FALSE(no_column.ok());
  EXPECT_NE(no_column.status().message().find("'seconds'"), std::string::npos);

  auto short_row = ParseCostSamplesCsv("tier,mode,phase,bytes,seconds\nhost,sync\n", "s.csv");
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("s.csv:2"), std::string::npos);

  auto zero_time = ParseCostSamplesCsv("tier,mode,phase,bytes,seconds\nhost,sync,load,1,0\n", "z.csv");
  ASSERT_FALSE(zero_time.ok());
  EXPECT_NE(zero_time.status().message().find("'seconds'"), std::string::npos);
}

TEST(CostSamples, ParsesJsonAndNamesBadElement) {
  auto ok = ParseCostSamplesJson(
      R"([{"tier":"pfs","mode":"sync","phase":"stall","bytes":1e6,"seconds":0.5}])", "j.json");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[0].phase, CostPhase::kStall);
  auto bad = ParseCostSamplesJson(
      R"([{"tier":"pfs","mode":"sync","phase":"stall","bytes":1e6,"seconds":0.5},
          {"tier":"pfs","mode":"sync","phase":"stall","bytes":"big","seconds":0.5}])",
      "j.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("element 1: key 'bytes'"), std::string::npos) << bad.status().message();
}

// 100 iterations per epoch at 0.05 s each, logged every 10 iterations, and a
// 2 s evaluation pause at every epoch boundary: the median ignores the
// pauses, and the pause is reported separately.
TEST(IterationTime, MedianAndEpochPause) {
  TrainingLog log;
  log.source = "mem";
  double t = 0;
  for (int it = 10; it <= 1000; it += 10) {
    LogRecord r;
    r.iteration = it;
    r.epoch = (it - 1) / 100;
    t += 10 * 0.05;
    if (it > 10 && (it - 1) / 100 != (it - 11) / 100) t += 2.0;
    r.wall_time_s = t;
    log.records.push_back(r);
  }
  auto est = EstimateIterationTime(log);
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  EXPECT_NEAR(est->seconds_per_iteration, 0.05, 1e-9);
  ASSERT_TRUE(est->epoch_pause_s.has_value());
  EXPECT_NEAR(*est->epoch_pause_s, 2.0, 1e-6);
  ASSERT_TRUE(est->seconds_per_epoch.has_value());
  EXPECT_NEAR(*est->seconds_per_epoch, 100 * 0.05 + 2.0, 1e-6);
}

TEST(IterationTime, RejectsMissingOrBackwardTimes) {
  TrainingLog log;
  log.source = "mem";
  LogRecord r;
  r.iteration = 1;
  log.records.push_back(r);
  EXPECT_FALSE(EstimateIterationTime(log).ok());
  log.records[0].wall_time_s = 5.0;
  r.iteration = 2;
  r.wall_time_s = 4.0;
  log.records.push_back(r);
  auto e = EstimateIterationTime(log);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("row 2"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace predictor
}  // namespace viper
