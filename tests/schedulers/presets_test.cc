// The tier presets: calibrated on the Viper paper's Polaris figures.
#include "viper/schedulers/presets.h"

#include <gtest/gtest.h>

namespace viper {
namespace schedulers {
namespace {

TEST(PresetTest, ReproducesThePaperAsyncUpdateLatency) {
  // By construction the async push delay (snapshot + transfer + load) passes
  // through both calibration points of each tier.
  for (Tier tier : {Tier::kGpu, Tier::kHost, Tier::kPfs}) {
    for (auto [bytes, seconds] : PaperAsyncUpdateLatency(tier)) {
      const auto cost = PresetTierCost(tier, bytes, false, Notification::kPush);
      std::string error;
      ASSERT_TRUE(cost.IsValid(&error)) << ToString(tier) << ": " << error;
      EXPECT_NEAR(cost.ToCheckpointCost().delay_s, seconds, 1e-9) << ToString(tier) << " at " << bytes;
    }
  }
}

TEST(PresetTest, MemoryFirstOrdering) {
  // GPU < host < PFS for both stall and update latency at the paper's 1.7 GB.
  auto c = [](Tier t) { return PresetTierCost(t, 1.7e9, false, Notification::kPush).ToCheckpointCost(); };
  EXPECT_LT(c(Tier::kGpu).delay_s, c(Tier::kHost).delay_s);
  EXPECT_LT(c(Tier::kHost).delay_s, c(Tier::kPfs).delay_s);
  EXPECT_LT(c(Tier::kGpu).stall_s, c(Tier::kHost).stall_s);
  EXPECT_LT(c(Tier::kHost).stall_s, c(Tier::kPfs).stall_s);
  // TC1's 4.7 GB async stall on the GPU tier: 1 s over 16 checkpoints.
  EXPECT_NEAR(PresetTierCost(Tier::kGpu, 4.7e9, false, Notification::kPush).ToCheckpointCost().stall_s, 1.0 / 16.0,
              1e-12);
}

TEST(PresetTest, TierNamesRoundTrip) {
  for (Tier t : {Tier::kGpu, Tier::kHost, Tier::kPfs}) EXPECT_EQ(*TierFromString(ToString(t)), t);
  EXPECT_FALSE(TierFromString("tape").ok());
}

}  // namespace
}  // namespace schedulers
}  // namespace viper
