// The live producer's trainer workload re-measuring kept models beside
// training (workflow/src/live_workloads.h: BeginRemeasure, RemeasureMore,
// RemeasureDone, FinishRemeasure): the helper's losses are the ones the
// producer measures on the training path at the point, bit for bit, while
// training goes on.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "have_fashion_mnist.h"
#include "live_workloads.h"
#include "viper/core/training_log.h"

namespace viper {
namespace workflow {
namespace internal {
namespace {

// A small trainer whose traffic rotates from iteration 20 on (so that each
// validation point is a new traffic state), validating every 5 iterations.
LiveRun::Options RotatingTrainer() {
  LiveRun::Options o;
  o.workload = LiveRun::Workload::kTrainer;
  o.strategy = schedulers::StrategyKind::kOnline;
  o.trainer.train_samples = 2000;
  o.trainer.epochs = 2;
  o.trainer.hidden_widths = {32};
  o.trainer.val_every_iterations = 5;
  o.trainer.val_samples = 200;
  o.trainer.drift = Trainer::Drift::kRotation;
  o.trainer.drift_at_iteration = 20;
  o.trainer.drift_duration_iterations = 30;
  return o;
}

// Steps `w` to `iteration`, keeping the model at 10 and 15 (the models it
// re-measures later).
void TrainTo(ProducerWorkload& w, int64_t iteration) {
  LogRecord rec;
  for (int64_t it = 1; it <= iteration; ++it) {
    ASSERT_TRUE(w.Step(&rec).ok());
    if (it == 10 || it == 15) {
      ASSERT_TRUE(w.KeepCurrentModel());
    }
  }
}

// Two workloads trained identically to 30 (the trainer is deterministic):
// one measures on the path, the other beside training.
void TwinsAt30(std::unique_ptr<ProducerWorkload>* on_path, std::unique_ptr<ProducerWorkload>* beside) {
  auto a = MakeProducerWorkload(RotatingTrainer());
  auto b = MakeProducerWorkload(RotatingTrainer());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  *on_path = std::move(*a);
  *beside = std::move(*b);
  TrainTo(**on_path, 30);
  TrainTo(**beside, 30);
}

TEST(LiveWorkloads, KeptModelsReMeasuredBesideTrainingMatchTheMeasurementOnThePath) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed (Debian package dataset-fashion-mnist)";
  // One measures on the path at 30, the other beside training from 30 on.
  std::unique_ptr<ProducerWorkload> on_path, beside;
  ASSERT_NO_FATAL_FAILURE(TwinsAt30(&on_path, &beside));
  const std::vector<int64_t> models = {10, 15, 12};  // 12 is not kept
  std::vector<std::optional<double>> expected;
  for (int64_t m : models) expected.push_back(on_path->RevalidateKept(m));
  ASSERT_TRUE(expected[0] && expected[1]);
  EXPECT_FALSE(expected[2]);

  EXPECT_EQ(beside->RemeasureSeconds(), 0);  // no job yet
  ASSERT_TRUE(beside->BeginRemeasure(models, 3));
  // Training goes on while the helper measures (past the next validation
  // point, whose own drifted sample the trainer gathers meanwhile).
  LogRecord rec;
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(beside->Step(&rec).ok());
  const std::vector<std::optional<double>> got = beside->FinishRemeasure();
  ASSERT_EQ(got.size(), models.size());
  EXPECT_EQ(got[0], expected[0]);
  EXPECT_EQ(got[1], expected[1]);
  EXPECT_FALSE(got[2]);
  EXPECT_TRUE(beside->RemeasureDone());
  EXPECT_GT(beside->RemeasureSeconds(), 0);

  // Measured once per traffic state: asked again on the state of 30 (the
  // path's workload) nothing is evaluated again.
  LiveRun::Summary before, after;
  on_path->SummarizeKept(&before);
  ASSERT_FALSE(on_path->BeginRemeasure({10, 15}, 0));  // nothing new to measure
  const std::vector<std::optional<double>> again = on_path->FinishRemeasure();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0], expected[0]);
  on_path->SummarizeKept(&after);
  EXPECT_EQ(after.kept_evaluations, before.kept_evaluations);
  EXPECT_EQ(after.kept_reused, before.kept_reused + 2);
  // The beside workload is on a new state at 37: its helper starts again,
  // on as many models as it is allowed (the rest unanswered).
  ASSERT_TRUE(beside->BeginRemeasure({10, 15}, 1));
  const std::vector<std::optional<double>> one = beside->FinishRemeasure();
  ASSERT_EQ(one.size(), 2u);
  EXPECT_TRUE(one[0]);
  EXPECT_FALSE(one[1]);
}

// The kept models follow the served version's answer (RemeasureMore), later
// in training but on the point's sample and traffic state: as measured on
// the path at the point, bit for bit.
TEST(LiveWorkloads, ModelsAskedForLaterAreMeasuredOnThePointsSample) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed (Debian package dataset-fashion-mnist)";
  std::unique_ptr<ProducerWorkload> on_path, beside;
  ASSERT_NO_FATAL_FAILURE(TwinsAt30(&on_path, &beside));
  const std::optional<double> at10 = on_path->RevalidateKept(10), at15 = on_path->RevalidateKept(15);
  ASSERT_TRUE(at10 && at15);

  ASSERT_TRUE(beside->BeginRemeasure({10}, 5));  // the "served" model first
  LogRecord rec;
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(beside->Step(&rec).ok());  // past the point of 35
  const std::vector<std::optional<double>> first = beside->FinishRemeasure();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], at10);
  // 10 is answered from the point's state, 15 measured on its sample.
  ASSERT_TRUE(beside->RemeasureMore({15, 10}, 1));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(beside->Step(&rec).ok());
  const std::vector<std::optional<double>> more = beside->FinishRemeasure();
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0], at15);
  EXPECT_EQ(more[1], at10);
  // Measured on the sample of 40 instead, 15 measures differently: the
  // comparison above can tell the samples apart.
  const std::optional<double> now15 = beside->RevalidateKept(15);
  ASSERT_TRUE(now15);
  EXPECT_NE(*now15, *at15);
  // Nothing new left within the budget: answered at once.
  EXPECT_FALSE(beside->RemeasureMore({10, 15}, 0));
  EXPECT_EQ(beside->FinishRemeasure().size(), 2u);
}

}  // namespace
}  // namespace internal
}  // namespace workflow
}  // namespace viper
