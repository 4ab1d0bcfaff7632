// The live producer's kept models (workflow/src/kept_models.h): copies that
// do not share the trained parameters, freed when no longer wanted, each
// measured once per traffic state.
#include "kept_models.h"

#include <gtest/gtest.h>

#include <cstring>

namespace viper {
namespace workflow {
namespace internal {
namespace {

Mlp SmallMlp(uint64_t seed) {
  Mlp::Options o;
  o.input_features = 6;
  o.hidden_widths = {4};
  o.num_classes = 3;
  auto m = Mlp::Create(o, seed);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

TEST(KeptModels, KeepsACopyTheTrainingDoesNotChange) {
  Mlp model = SmallMlp(1);
  KeptModels kept;
  kept.Keep(10, model);
  const float before = model.parameter(0)[0];
  model.parameter(0)[0] = before + 1.0f;  // the trainer goes on updating in place
  const Mlp* copy = kept.Find(10);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->parameter(0)[0], before);
  EXPECT_EQ(copy->state().TotalBytes(), model.state().TotalBytes());
  kept.Keep(10, model);  // held already: not replaced
  EXPECT_EQ(kept.Find(10)->parameter(0)[0], before);
  EXPECT_EQ(kept.size(), 1);
  EXPECT_EQ(kept.Find(11), nullptr);
}

TEST(KeptModels, RetainFreesWhatIsNotWanted) {
  Mlp model = SmallMlp(2);
  KeptModels kept;
  for (int64_t it : {5, 10, 15}) kept.Keep(it, model);
  kept.Retain({15, 5, 99});
  EXPECT_EQ(kept.size(), 2);
  EXPECT_NE(kept.Find(5), nullptr);
  EXPECT_EQ(kept.Find(10), nullptr);
  EXPECT_NE(kept.Find(15), nullptr);
  EXPECT_EQ(kept.peak(), 3);  // three were held at once
  EXPECT_EQ(kept.peak_bytes(), 3 * model.SizeBytes());
}

TEST(KeptModels, MeasuresEachTrafficStateOnce) {
  Mlp model = SmallMlp(3);
  KeptModels kept;
  kept.Keep(7, model);
  int calls = 0;
  auto evaluate = [&](const Mlp&) { return 0.5 + ++calls; };
  TrafficState upright, rotated;
  rotated.rotation_degrees = 90;
  EXPECT_EQ(kept.Loss(7, upright, evaluate), 1.5);
  EXPECT_EQ(kept.Loss(7, rotated, evaluate), 2.5);
  EXPECT_EQ(kept.Loss(7, upright, evaluate), 1.5);  // equal traffic, equal bits: not evaluated again
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(kept.evaluations(), 2);
  EXPECT_EQ(kept.reused(), 1);
  EXPECT_FALSE(kept.Loss(8, upright, evaluate).has_value());  // not kept
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace internal
}  // namespace workflow
}  // namespace viper
