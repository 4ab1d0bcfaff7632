// Tests of Summarize() on small hand-made training logs.
#include "viper/core/training_log.h"

#include <gtest/gtest.h>

namespace viper {
namespace {

LogRecord Row(int64_t iteration, std::optional<int64_t> epoch, std::optional<double> wall,
              std::optional<double> loss, std::optional<double> val_loss = std::nullopt) {
  LogRecord r;
  r.iteration = iteration;
  r.epoch = epoch;
  r.wall_time_s = wall;
  r.train_loss = loss;
  r.val_loss = val_loss;
  return r;
}

// Ten iterations, 0.5 s each: epoch 0 = iterations 1-4, epoch 1 = 5-8,
// epoch 2 = 9-10 (still running). Iteration 4 logged only a validation loss.
TrainingLog HandMadeLog() {
  TrainingLog log;
  log.source = "hand-made";
  const double loss[11] = {0, 2.0, 1.5, 1.2, 0, 0.9, 0.6, 0.2, 0.4, 0.3, 0.25};
  for (int64_t i = 1; i <= 10; ++i) {
    const int64_t epoch = (i - 1) / 4;
    if (i == 4) {
      log.records.push_back(Row(i, epoch, 0.5 * i, std::nullopt, 1.1));
    } else {
      log.records.push_back(
          Row(i, epoch, 0.5 * i, loss[i], i == 8 ? std::optional<double>(0.45) : std::nullopt));
    }
  }
  log.dropped_non_finite = 2;
  return log;
}

TEST(SummarizeTest, HandMadeLog) {
  const LogSummary s = Summarize(HandMadeLog());
  EXPECT_EQ(s.rows, 10);
  EXPECT_EQ(s.first_iteration, 1);
  EXPECT_EQ(s.last_iteration, 10);
  ASSERT_TRUE(s.epochs.has_value());
  EXPECT_EQ(*s.epochs, 3);
  // Epoch lengths are measured end to end: epoch 1 ends 8 - 4 = 4 iterations
  // after epoch 0; epoch 2 (2 iterations so far) is partial and dropped, and
  // epoch 0 has no previous end. The median of {4} is 4.
  ASSERT_TRUE(s.iterations_per_epoch.has_value());
  EXPECT_DOUBLE_EQ(*s.iterations_per_epoch, 4.0);
  // Wall time 0.5 s at iteration 1 and 5.0 s at iteration 10: 4.5 s / 9 = 0.5 s.
  ASSERT_TRUE(s.seconds_per_iteration.has_value());
  EXPECT_DOUBLE_EQ(*s.seconds_per_iteration, 0.5);
  // Training losses: first 2.0 (iteration 1), last 0.25 (iteration 10), the
  // minimum 0.2 at iteration 7; iteration 4 has none and is skipped.
  EXPECT_DOUBLE_EQ(*s.first_loss, 2.0);
  EXPECT_DOUBLE_EQ(*s.last_loss, 0.25);
  EXPECT_DOUBLE_EQ(*s.min_loss, 0.2);
  EXPECT_EQ(*s.min_loss_iteration, 7);
  EXPECT_EQ(s.val_points, 2);  // iterations 4 and 8
  EXPECT_EQ(s.dropped_non_finite, 2);
}

TEST(SummarizeTest, EmptyLogHasNoOptionalFields) {
  TrainingLog log;
  log.dropped_non_finite = 1;
  const LogSummary s = Summarize(log);
  EXPECT_EQ(s.rows, 0);
  EXPECT_FALSE(s.epochs.has_value());
  EXPECT_FALSE(s.iterations_per_epoch.has_value());
  EXPECT_FALSE(s.seconds_per_iteration.has_value());
  EXPECT_FALSE(s.first_loss.has_value());
  EXPECT_FALSE(s.min_loss_iteration.has_value());
  EXPECT_EQ(s.dropped_non_finite, 1);
}

TEST(SummarizeTest, AbsentFieldsStayAbsent) {
  // No epochs, no wall times: those summaries are absent, not zero.
  TrainingLog log;
  log.records = {Row(10, std::nullopt, std::nullopt, 3.0), Row(20, std::nullopt, std::nullopt, 1.0)};
  const LogSummary s = Summarize(log);
  EXPECT_FALSE(s.epochs.has_value());
  EXPECT_FALSE(s.iterations_per_epoch.has_value());
  EXPECT_FALSE(s.seconds_per_iteration.has_value());
  EXPECT_DOUBLE_EQ(*s.min_loss, 1.0);
  EXPECT_EQ(*s.min_loss_iteration, 20);
  EXPECT_EQ(s.val_points, 0);
}

TEST(SummarizeTest, SingleEpochCountsItsIterations) {
  // One epoch holding iterations 5..9: its length is 9 - 5 + 1 = 5.
  TrainingLog log;
  for (int64_t i = 5; i <= 9; ++i) log.records.push_back(Row(i, 0, std::nullopt, 1.0));
  const LogSummary s = Summarize(log);
  EXPECT_EQ(*s.epochs, 1);
  EXPECT_DOUBLE_EQ(*s.iterations_per_epoch, 5.0);
}

TEST(SummarizeTest, MedianEpochLengthIgnoresAnOddEpoch) {
  // Epochs end at iterations 100, 200, 300, 450 (a long one), 550, 560
  // (partial). Complete lengths after the first: {100, 100, 150, 100}; the
  // median is 100.
  TrainingLog log;
  const int64_t ends[] = {100, 200, 300, 450, 550, 560};
  for (int64_t e = 0; e < 6; ++e) log.records.push_back(Row(ends[e], e, std::nullopt, 1.0));
  const LogSummary s = Summarize(log);
  EXPECT_EQ(*s.epochs, 6);
  EXPECT_DOUBLE_EQ(*s.iterations_per_epoch, 100.0);
}

TEST(TrainingLogTest, CountsTimedRowsAndSeries) {
  TrainingLog log;
  EXPECT_FALSE(log.HasWallTime());
  EXPECT_FALSE(log.EvaluationOnly());
  LogRecord a;
  a.iteration = 10;
  a.val_loss = 2.0;
  a.wall_time_s = 1.0;
  LogRecord b = a;
  b.iteration = 20;
  b.wall_time_s.reset();
  log.records = {a, b};
  EXPECT_EQ(log.TimedRows(), 1);
  EXPECT_FALSE(log.HasWallTime());  // one timed row is no time span
  EXPECT_TRUE(log.EvaluationOnly());
  EXPECT_EQ(log.ValLossPoints(), 2);
  log.records[1].wall_time_s = 3.0;
  log.records[1].train_loss = 1.5;
  EXPECT_TRUE(log.HasWallTime());
  EXPECT_FALSE(log.EvaluationOnly());
  const LogSummary s = Summarize(log);
  EXPECT_EQ(s.train_points, 1);
  EXPECT_EQ(s.timed_rows, 2);
  EXPECT_DOUBLE_EQ(*s.seconds_per_iteration, 0.2);
}

}  // namespace
}  // namespace viper
