#include "viper/datasets/log_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

namespace viper {
namespace datasets {
namespace {

using Options = LogReader::Options;

StatusOr<TrainingLog> ParseText(const std::string& text, const std::string& name = "run.csv",
                                Options options = {}) {
  return LogReader::Parse(text, name, options);
}

// Expects a failure whose message contains every piece in `pieces`.
void ExpectError(const StatusOr<TrainingLog>& r, std::initializer_list<const char*> pieces) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  for (const char* p : pieces) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << p << "'";
  }
}

TEST(LogReaderTest, OptionsDefaultsAreValid) {
  std::string error;
  EXPECT_TRUE(Options().IsValid(&error)) << error;
}

TEST(LogReaderTest, OptionsRejectCommaInColumnName) {
  Options o;
  o.loss_column = "a,b";
  std::string error;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("loss_column"), std::string::npos);
}

TEST(LogReaderTest, PlainCsvWithOptionalFieldsAbsent) {
  auto r = ParseText(
      "iteration,epoch,wall_time,train_loss,val_loss,val_accuracy\n"
      "1,0,0.5,2.30,,\n"
      "2,0,1.0,2.10,2.20,0.31\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->records[0].iteration, 1);
  EXPECT_EQ(*r->records[0].epoch, 0);
  EXPECT_DOUBLE_EQ(*r->records[0].train_loss, 2.30);
  EXPECT_FALSE(r->records[0].val_loss.has_value());  // empty field = absent, not zero
  EXPECT_FALSE(r->records[0].val_accuracy.has_value());
  EXPECT_DOUBLE_EQ(*r->records[1].val_loss, 2.20);
  EXPECT_DOUBLE_EQ(*r->records[1].val_accuracy, 0.31);
  EXPECT_DOUBLE_EQ(*r->records[1].wall_time_s, 1.0);
}

TEST(LogReaderTest, RecognisesCommonColumnNames) {
  auto r = ParseText("global_step,loss,time,val_acc\n10,1.5,3.0,0.9\n20,1.2,6.0,\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records[1].iteration, 20);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 1.2);
  EXPECT_DOUBLE_EQ(*r->records[0].wall_time_s, 3.0);
  EXPECT_DOUBLE_EQ(*r->records[0].val_accuracy, 0.9);
}

TEST(LogReaderTest, ColumnOverrides) {
  Options o;
  o.iteration_column = "it";
  o.loss_column = "objective";
  auto r = ParseText("it,objective,loss\n1,5.0,9.0\n2,4.0,9.0\n", "x.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 4.0);  // the override wins over 'loss'
}

TEST(LogReaderTest, UnknownOverrideColumnNamesTheHeader) {
  Options o;
  o.loss_column = "nope";
  ExpectError(ParseText("iteration,loss\n1,2\n", "x.csv", o), {"x.csv:1", "unknown column 'nope'", "--loss-column",
                                                               "iteration, loss"});
}

TEST(LogReaderTest, KerasCsvLoggerIsEpochLevel) {
  // Keras writes 0-based epochs; they become iterations 1, 2, 3 so curves start at x = 1.
  auto r = ParseText("epoch,accuracy,loss,val_accuracy,val_loss\n0,0.7,0.8,0.75,0.7\n1,0.8,0.5,0.8,0.55\n"
                     "2,0.85,0.4,0.82,0.5\n",
                     "training.log");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 3u);
  EXPECT_EQ(r->records[0].iteration, 1);
  EXPECT_EQ(*r->records[2].epoch, 2);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 0.5);
  EXPECT_DOUBLE_EQ(*r->records[2].val_loss, 0.5);
  EXPECT_DOUBLE_EQ(*r->records[2].val_accuracy, 0.82);
}

TEST(LogReaderTest, LightningMergesTrainAndValRowsOfOneStep) {
  // Lightning logs train and val metrics of the same step on separate rows.
  auto r = ParseText(
      "epoch,step,train_loss_step,val_loss,val_acc\n"
      "0,49,1.9,,\n"
      "0,99,1.5,,\n"
      "0,99,,1.6,0.55\n"
      "1,149,1.2,,\n",
      "lightning_logs/version_0/metrics.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 3u);
  EXPECT_EQ(r->records[1].iteration, 99);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 1.5);
  EXPECT_DOUBLE_EQ(*r->records[1].val_loss, 1.6);
  EXPECT_DOUBLE_EQ(*r->records[1].val_accuracy, 0.55);
}

TEST(LogReaderTest, JsonLines) {
  auto r = ParseText("{\"step\": 1, \"loss\": 2.5, \"epoch\": 0}\n\n{\"step\": 2, \"loss\": 2.0, \"val_loss\": null}\n",
                     "run.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 2.0);
  EXPECT_FALSE(r->records[1].val_loss.has_value());
}

// The test columns (a sample disjoint from validation, the traffic's truth)
// in every format, under their common names.
TEST(LogReaderTest, PlainCsvReadsTestColumns) {
  auto r = ParseText(
      "iteration,train_loss,val_loss,val_accuracy,test_loss,test_accuracy\n"
      "1,2.3,,,,\n"
      "2,2.1,2.2,0.31,2.25,0.29\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->records[0].test_loss.has_value());  // empty = not evaluated
  EXPECT_DOUBLE_EQ(*r->records[1].test_loss, 2.25);
  EXPECT_DOUBLE_EQ(*r->records[1].test_accuracy, 0.29);
  EXPECT_DOUBLE_EQ(*r->records[1].val_loss, 2.2);  // not confused with the test column
  r = ParseText("step,loss,test/loss,test_acc\n10,1.5,1.7,0.6\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].test_loss, 1.7);
  EXPECT_DOUBLE_EQ(*r->records[0].test_accuracy, 0.6);
}

TEST(LogReaderTest, KerasReadsTestColumns) {
  auto r = ParseText("epoch,loss,val_loss,test_loss,test_accuracy\n0,0.8,0.7,0.72,0.74\n1,0.5,0.55,0.58,0.8\n",
                     "training.log");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->records[1].test_loss, 0.58);
  EXPECT_DOUBLE_EQ(*r->records[1].test_accuracy, 0.8);
}

TEST(LogReaderTest, LightningMergesTestRowsOfOneStep) {
  // Lightning's trainer.test() logs test_loss_epoch/test_acc_epoch on a row
  // of its own; a row with only test metrics is kept and merged.
  auto r = ParseText(
      "epoch,step,train_loss_step,val_loss,test_loss_epoch,test_acc_epoch\n"
      "0,49,1.9,,,\n"
      "0,99,1.5,,,\n"
      "0,99,,1.6,,\n"
      "0,99,,,1.65,0.52\n",
      "lightning_logs/version_0/metrics.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 1.5);
  EXPECT_DOUBLE_EQ(*r->records[1].val_loss, 1.6);
  EXPECT_DOUBLE_EQ(*r->records[1].test_loss, 1.65);
  EXPECT_DOUBLE_EQ(*r->records[1].test_accuracy, 0.52);
  EXPECT_FALSE(r->records[0].test_loss.has_value());
}

TEST(LogReaderTest, JsonLinesReadsTestKeys) {
  auto r = ParseText("{\"step\": 1, \"loss\": 2.5, \"test_loss\": 2.6, \"test_accuracy\": 0.1}\n"
                     "{\"step\": 2, \"loss\": 2.0, \"test/loss\": 2.1, \"test/acc\": 0.2}\n",
                     "run.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].test_loss, 2.6);
  EXPECT_DOUBLE_EQ(*r->records[0].test_accuracy, 0.1);
  EXPECT_DOUBLE_EQ(*r->records[1].test_loss, 2.1);
  EXPECT_DOUBLE_EQ(*r->records[1].test_accuracy, 0.2);
}

// HuggingFace Trainer's log history as JSON lines: the training loss and the
// eval_* metrics of one step on separate lines, fractional epochs, and a
// final summary line whose train_loss is the mean over the run.
TEST(LogReaderTest, HuggingFaceJsonLinesWithEvalLoss) {
  auto r = ParseText(
      "{\"loss\": 1.9, \"grad_norm\": 3.1, \"learning_rate\": 5e-05, \"epoch\": 0.25, \"step\": 50}\n"
      "{\"loss\": 1.2, \"grad_norm\": 2.4, \"learning_rate\": 4e-05, \"epoch\": 0.5, \"step\": 100}\n"
      "{\"eval_loss\": 1.35, \"eval_accuracy\": 0.61, \"eval_runtime\": 2.1, \"epoch\": 0.5, \"step\": 100}\n"
      "{\"loss\": 0.9, \"grad_norm\": 2.0, \"learning_rate\": 3e-05, \"epoch\": 1.0, \"step\": 200}\n"
      "{\"eval_loss\": 1.05, \"eval_accuracy\": 0.7, \"epoch\": 1.0, \"step\": 200}\n"
      "{\"train_runtime\": 80.5, \"train_loss\": 1.3, \"epoch\": 1.0, \"step\": 200}\n",
      "trainer_state.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 3u);
  EXPECT_EQ(r->records[0].iteration, 50);
  EXPECT_EQ(*r->records[0].epoch, 0);  // 0.25 -> epoch 0
  EXPECT_FALSE(r->records[0].val_loss.has_value());
  EXPECT_EQ(r->records[1].iteration, 100);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 1.2);
  EXPECT_DOUBLE_EQ(*r->records[1].val_loss, 1.35);  // eval_loss is the validation loss
  EXPECT_DOUBLE_EQ(*r->records[1].val_accuracy, 0.61);
  EXPECT_EQ(*r->records[2].epoch, 1);
  EXPECT_DOUBLE_EQ(*r->records[2].train_loss, 0.9);  // not the summary's mean 1.3
  EXPECT_DOUBLE_EQ(*r->records[2].val_loss, 1.05);
  // Two lines of one step that both carry a loss are an error naming both lines.
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.5}\n{\"step\": 1, \"loss\": 2.4}\n", "r.jsonl"),
              {"r.jsonl:2", "repeats the training loss", "line 1"});
}

TEST(LogReaderTest, EvalLossOnlyWhereNoValLossColumn) {
  auto r = ParseText("iteration,loss,eval_loss,eval_accuracy\n1,2.0,2.1,0.3\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].val_loss, 2.1);
  EXPECT_DOUBLE_EQ(*r->records[0].val_accuracy, 0.3);
  r = ParseText("iteration,loss,eval_loss,val_loss\n1,2.0,2.1,2.2\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].val_loss, 2.2);  // val_loss wins
  r = ParseText("{\"step\": 1, \"eval/loss\": 0.7}\n", "run.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].val_loss, 0.7);
}

TEST(LogReaderTest, TestColumnOverrides) {
  Options o;
  o.test_loss_column = "traffic_loss";
  o.test_accuracy_column = "traffic_acc";
  auto r = ParseText("iteration,loss,test_loss,traffic_loss,traffic_acc\n1,2.0,9.0,1.8,0.4\n", "x.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].test_loss, 1.8);  // the override wins over 'test_loss'
  EXPECT_DOUBLE_EQ(*r->records[0].test_accuracy, 0.4);
  o.test_accuracy_column.clear();  // an override naming no key of the file is an error (below)
  r = ParseText("{\"step\": 1, \"loss\": 2.0, \"traffic_loss\": 1.7}\n", "x.jsonl", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(*r->records[0].test_loss, 1.7);
  o.test_loss_column.clear();
  o.test_accuracy_column = "nope";
  ExpectError(ParseText("iteration,loss\n1,2\n", "x.csv", o),
              {"x.csv:1", "unknown column 'nope'", "--test-accuracy-column"});
  o.test_loss_column = "a,b";
  std::string error;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("test_loss_column"), std::string::npos) << error;
}

TEST(LogReaderTest, NonFiniteTestLossFollowsThePolicy) {
  ExpectError(ParseText("iteration,loss,test_loss\n1,2.0,1.0\n2,1.9,nan\n", "a.csv"),
              {"a.csv:3", "column 'test_loss'", "test loss is not finite", "--non-finite drop"});
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.0, \"test_accuracy\": \"Infinity\"}\n", "a.jsonl"),
              {"a.jsonl:1", "'test_accuracy'", "not finite"});
  Options o;
  o.non_finite = NonFinitePolicy::kDrop;
  auto r = ParseText("iteration,loss,test_loss\n1,2.0,1.0\n2,1.9,inf\n3,1.8,0.9\n", "a.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->dropped_non_finite, 1);
}

TEST(LogReaderTest, JsonLinesErrorsNameTheLine) {
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"loss\": [1]}\n", "r.jsonl"),
              {"r.jsonl:2", "'loss'", "expected a number"});
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.5}\n{oops\n", "r.jsonl"), {"r.jsonl:2", "not valid JSON"});
  ExpectError(ParseText("{\"loss\": 2.5}\n", "r.jsonl"), {"r.jsonl:1", "no iteration"});
}

TEST(LogReaderTest, EmptyFile) {
  ExpectError(ParseText("", "empty.csv"), {"empty.csv", "empty"});
  ExpectError(ParseText("\n\n", "empty.csv"), {"empty.csv", "empty"});
}

TEST(LogReaderTest, HeaderOnlyHasNoRows) { ExpectError(ParseText("iteration,loss\n", "h.csv"), {"h.csv", "no data rows"}); }

TEST(LogReaderTest, MissingHeader) {
  ExpectError(ParseText("1,2.5\n2,2.4\n", "nohead.csv"), {"nohead.csv:1", "missing header"});
}

TEST(LogReaderTest, NoIterationColumn) {
  ExpectError(ParseText("foo,loss\n1,2\n", "a.csv"), {"a.csv:1", "no iteration column", "--iteration-column"});
}

TEST(LogReaderTest, NoLossColumn) {
  ExpectError(ParseText("iteration,accuracy\n1,0.5\n", "a.csv"), {"a.csv:1", "no loss column"});
}

TEST(LogReaderTest, NonNumericValueNamesLineAndColumn) {
  ExpectError(ParseText("iteration,loss\n1,2.0\n2,abc\n", "a.csv"), {"a.csv:3", "column 'loss'", "'abc'"});
}

TEST(LogReaderTest, WrongFieldCount) {
  ExpectError(ParseText("iteration,loss\n1,2.0,7\n", "a.csv"), {"a.csv:2", "expected 2 fields", "got 3"});
}

TEST(LogReaderTest, NanLossRejectedByDefault) {
  ExpectError(ParseText("iteration,loss\n1,2.0\n2,nan\n", "a.csv"), {"a.csv:3", "not finite", "--non-finite drop"});
  ExpectError(ParseText("iteration,loss\n1,inf\n", "a.csv"), {"a.csv:2", "not finite"});
}

TEST(LogReaderTest, NanLossDroppedAndCountedWhenAllowed) {
  Options o;
  o.non_finite = NonFinitePolicy::kDrop;
  auto r = ParseText("iteration,loss\n1,2.0\n2,nan\n3,-inf\n4,1.5\n", "a.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->dropped_non_finite, 2);
  EXPECT_EQ(r->records[1].iteration, 4);
}

TEST(LogReaderTest, DivergedPolicyKeepsNonFiniteLossesAsInfinity) {
  Options o;
  o.non_finite = NonFinitePolicy::kDiverged;
  auto r = ParseText(
      "iteration,loss,val_loss,val_accuracy,test_loss\n1,2.0,2.1,0.5,2.2\n2,-nan,nan,nan,inf\n3,nan,,,\n", "a.csv",
      o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 3u);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(r->records[1].train_loss, inf);
  EXPECT_EQ(r->records[1].val_loss, inf);
  EXPECT_EQ(r->records[1].test_loss, inf);
  EXPECT_FALSE(r->records[1].val_accuracy.has_value()) << "a NaN accuracy says nothing";
  EXPECT_EQ(r->records[2].train_loss, inf);
  EXPECT_EQ(r->diverged_values, 5);
  EXPECT_EQ(r->dropped_non_finite, 0);
  const LogSummary s = Summarize(*r);
  ASSERT_TRUE(s.first_diverged_iteration.has_value());
  EXPECT_EQ(*s.first_diverged_iteration, 2);
  // A wall time is not a loss: still an error.
  ExpectError(ParseText("iteration,loss,wall_time\n1,2.0,0.5\n2,1.9,nan\n", "w.csv", o), {"w.csv:3", "not finite"});
  // The default names the policy that keeps a diverged run.
  ExpectError(ParseText("iteration,loss\n1,2.0\n2,nan\n", "a.csv"), {"a.csv:3", "--non-finite diverged"});
  auto named = NonFinitePolicyFromString("diverged");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(*named, NonFinitePolicy::kDiverged);
  EXPECT_STREQ(ToString(NonFinitePolicy::kDiverged), "diverged");
}

TEST(LogReaderTest, AllRowsDroppedIsAnError) {
  Options o;
  o.non_finite = NonFinitePolicy::kDrop;
  ExpectError(ParseText("iteration,loss\n1,nan\n", "a.csv", o), {"a.csv", "dropped"});
}

TEST(LogReaderTest, IterationsMustStrictlyIncrease) {
  ExpectError(ParseText("iteration,loss\n1,2.0\n3,1.9\n2,1.8\n", "a.csv"),
              {"a.csv:4", "strictly increasing", "2 follows 3", "line 3"});
  ExpectError(ParseText("iteration,loss\n1,2.0\n1,1.9\n", "a.csv"), {"a.csv:3", "strictly increasing"});
}

TEST(LogReaderTest, NonIntegerIteration) {
  ExpectError(ParseText("iteration,loss\n1.5,2.0\n", "a.csv"), {"a.csv:2", "integer"});
}

TEST(LogReaderTest, MissingFileIsNotFound) {
  auto r = LogReader::ReadFile("/nonexistent/dir/run.csv", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/dir/run.csv"), std::string::npos);
}

TEST(LogReaderTest, DirectoryIsRejected) {
  auto r = LogReader::ReadFile(std::filesystem::temp_directory_path().string(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("directory"), std::string::npos);
}

class GzipFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A private directory with an unpredictable name (mkdtemp, 0700): the
    // files these tests create there cannot be pre-created by another user.
    std::string tmpl = (std::filesystem::temp_directory_path() / "viper-log-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(GzipFileTest, ReadsGzipDirectly) {
  const std::string path = (dir_ / "run.csv.gz").string();
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string text = "iteration,train_loss\n1,2.5\n2,2.25\n";
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  auto r = LogReader::ReadFile(path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 2.25);
  EXPECT_EQ(r->source, path);
}

// Two gzip members one after the other (`cat a.gz b.gz`) are one valid
// file: both are read. Bytes after the last member that are not another
// (two writers at once, a copy over a longer file) used to be ignored by
// zlib without a word, the log read as the part before them: now an error
// naming the file and the byte where the gzip data ends, for logs and
// staleness tables alike (both read through ReadWholeFile).
TEST_F(GzipFileTest, DataAfterTheLastGzipMemberIsDataLoss) {
  auto write_member = [](const std::string& path, const std::string& text, const char* mode) {
    gzFile f = gzopen(path.c_str(), mode);
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
    gzclose(f);
  };
  std::string first = "iteration,train_loss\n", second;
  for (int i = 1; i <= 3000; ++i) first += std::to_string(i) + "," + std::to_string(1.0 / i) + "\n";
  for (int i = 3001; i <= 6000; ++i) second += std::to_string(i) + "," + std::to_string(1.0 / i) + "\n";
  const std::string joined = (dir_ / "joined.csv.gz").string();
  write_member(joined, first, "wb");
  write_member(joined, second, "ab");  // a second member appended
  auto r = LogReader::ReadFile(joined, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 6000u);
  const auto member_end = std::filesystem::file_size(joined);
  for (const std::string& tail : {std::string("garbage after the data"), std::string(1, '\x1f'),
                                  std::string(5000, '\0'), std::string(200000, 'x')}) {
    const std::string damaged = (dir_ / "damaged.csv.gz").string();
    std::filesystem::remove(damaged);
    std::filesystem::copy_file(joined, damaged);
    {
      std::FILE* f = std::fopen(damaged.c_str(), "ab");
      ASSERT_NE(f, nullptr);
      std::fwrite(tail.data(), 1, tail.size(), f);
      std::fclose(f);
    }
    auto d = LogReader::ReadFile(damaged, {});
    ASSERT_FALSE(d.ok()) << tail.size() << " bytes of trailing data were ignored";
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find("damaged.csv.gz"), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find("at byte " + std::to_string(member_end)), std::string::npos)
        << d.status().message();
    EXPECT_NE(d.status().message().find(std::to_string(tail.size()) + " bytes after"), std::string::npos)
        << d.status().message();
  }
}

TEST_F(GzipFileTest, TruncatedGzipIsDataLoss) {
  const std::string full = (dir_ / "full.csv.gz").string();
  gzFile f = gzopen(full.c_str(), "wb");
  std::string text = "iteration,train_loss\n";
  for (int i = 1; i <= 5000; ++i) text += std::to_string(i) + "," + std::to_string(1.0 / i) + "\n";
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  const auto size = std::filesystem::file_size(full);
  const std::string cut = (dir_ / "cut.csv.gz").string();
  std::filesystem::copy_file(full, cut);
  std::filesystem::resize_file(cut, size / 2);
  auto r = LogReader::ReadFile(cut, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cut.csv.gz"), std::string::npos) << r.status().message();
}

// A FIFO named as a log used to block the reader forever in gzopen when no
// writer came; it now fails after Options::pipe_wait_s, naming the
// path, and a FIFO with a writer is read (process substitution, /dev/stdin).
// The staleness reader shares this opening.
TEST_F(GzipFileTest, FifoWithoutWriterFailsWithoutHanging) {
  const std::string path = (dir_ / "run.csv").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  LogReader::Options o;
  o.pipe_wait_s = 0.2;
  auto r = LogReader::ReadFile(path, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("run.csv"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("is a pipe and nothing was written"), std::string::npos)
      << r.status().message();
}

TEST_F(GzipFileTest, FifoWithAWriterIsRead) {
  const std::string path = (dir_ / "piped.csv").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::thread writer([&] {
    FILE* f = std::fopen(path.c_str(), "w");  // blocks until the reader opens
    if (!f) return;
    std::fputs("iteration,train_loss\n1,2.5\n2,2.25\n", f);
    std::fclose(f);
  });
  auto r = LogReader::ReadFile(path, {});
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 2u);
}

TEST_F(GzipFileTest, DeviceIsRefused) {
  if (!std::filesystem::exists("/dev/null")) GTEST_SKIP() << "no /dev/null";
  auto r = LogReader::ReadFile("/dev/null", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a regular file or a pipe"), std::string::npos) << r.status().message();
}

// A symlink the user names is followed to a regular file (it is their own
// path); one that leads to a FIFO is refused like the FIFO.
TEST_F(GzipFileTest, SymlinkToFileIsReadSymlinkToFifoIsRefused) {
  const std::string file = (dir_ / "real.csv").string();
  {
    FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("iteration,train_loss\n1,2.5\n", f);
    std::fclose(f);
  }
  std::filesystem::create_symlink(file, dir_ / "link.csv");
  auto ok = LogReader::ReadFile((dir_ / "link.csv").string(), {});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->records.size(), 1u);
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_symlink(fifo, dir_ / "pipe.csv");
  LogReader::Options o;
  o.pipe_wait_s = 0.2;
  auto bad = LogReader::ReadFile((dir_ / "pipe.csv").string(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is a pipe"), std::string::npos) << bad.status().message();
}

TEST(LogFormatTest, RoundTripsNames) {
  for (LogFormat f : {LogFormat::kAuto, LogFormat::kCsv, LogFormat::kKeras, LogFormat::kLightning,
                      LogFormat::kJsonLines}) {
    auto back = LogFormatFromString(ToString(f));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, f);
  }
  EXPECT_FALSE(LogFormatFromString("xml").ok());
}

TEST(ShippedLogsTest, EveryShippedLogReads) {
  namespace fs = std::filesystem;
  const fs::path dir = ShippedLogDirectory();
  if (!fs::exists(dir)) GTEST_SKIP() << "no shipped logs at " << dir;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".csv") == std::string::npos) continue;
    if (name.find(".staleness.") != std::string::npos) continue;  // a table beside its log, read below
    // As the planning commands read them (a NaN is a diverged model: the
    // shipped diverge-sgd-h256 has them).
    Options o;
    o.non_finite = NonFinitePolicy::kDiverged;
    auto r = LogReader::ReadFile(entry.path().string(), o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_GT(r->records.size(), 100u) << name;
    // Observed (validation) and truth (test, a disjoint sample) at the same rows.
    int64_t val_points = 0, test_points = 0;
    for (const auto& record : r->records) {
      val_points += record.val_loss.has_value();
      test_points += record.test_loss.has_value() && record.test_accuracy.has_value();
      if (record.test_loss) {
        EXPECT_TRUE(record.val_loss.has_value()) << name << " at " << record.iteration;
      }
    }
    EXPECT_GT(val_points, 10) << name;
    EXPECT_EQ(test_points, val_points) << name << " lacks test_loss/test_accuracy where it validated";
    ++count;
  }
  if (count == 0) GTEST_SKIP() << "no shipped logs in " << dir;
  EXPECT_GE(count, 9) << "datasets/README.md lists nine shipped logs";
}

}  // namespace
}  // namespace datasets
}  // namespace viper
