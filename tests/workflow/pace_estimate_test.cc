// The consumers' estimate of the producer's iteration under drifting
// traffic (workflow/src/live_exchange.h, EstimateIteration): extrapolated
// from the last pace announcement, held while the producer says it holds.
#include <gtest/gtest.h>

#include "live_exchange.h"

namespace viper {
namespace workflow {
namespace internal {
namespace {

PaceMessage At(int64_t iteration, double time_s, int64_t holding = 0) {
  PaceMessage m;
  m.iteration = iteration;
  m.time_s = time_s;
  m.seconds_per_iteration = 0.001;  // the warm-up's tau
  m.total_iterations = 1000;
  m.holding = holding;
  return m;
}

TEST(PaceEstimate, ExtrapolatesAtThePaceBetweenTheLastTwoAnnouncements) {
  const PaceMessage before = At(100, 1.00), last = At(110, 1.02);  // 2 ms an iteration
  EXPECT_EQ(EstimateIteration(last, &before, 0, 1.051), 125);
  EXPECT_EQ(EstimateIteration(last, nullptr, 0, 1.0505), 140);  // one announcement: the warm-up's tau
  EXPECT_EQ(EstimateIteration(last, &before, 130, 1.051), 130);  // never behind the served version
  EXPECT_EQ(EstimateIteration(last, &before, 0, 9.0), 1000);    // never past N
}

TEST(PaceEstimate, AHoldStopsTheEstimateUntilTrainingResumes) {
  // Planning for 100 ms at 110: without the hold the estimate ran 50
  // iterations ahead at the burst's pace.
  const PaceMessage burst = At(100, 1.00), hold = At(110, 1.02, 1);
  EXPECT_EQ(EstimateIteration(hold, &burst, 0, 1.12), 110);
  // Training resumed at 1.12: the pace between the hold and the first
  // announcement after it spans the pause, so the warm-up's tau is used.
  const PaceMessage resumed = At(111, 1.121);
  EXPECT_EQ(EstimateIteration(resumed, &hold, 0, 1.1265), 116);
}

}  // namespace
}  // namespace internal
}  // namespace workflow
}  // namespace viper
