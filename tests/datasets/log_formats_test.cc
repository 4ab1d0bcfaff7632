// The formats people actually have (datasets/testdata, one real-shaped file
// per format and quirk) and every class of hostile input: each is read
// correctly or refused with a message naming the line and the value.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "viper/datasets/log_reader.h"

namespace viper {
namespace datasets {
namespace {

namespace fs = std::filesystem;
using Options = LogReader::Options;

std::string Data(const std::string& name) { return TestDataDirectory() + "/" + name; }

StatusOr<TrainingLog> Read(const std::string& name, Options o = {}) { return LogReader::ReadFile(Data(name), o); }

StatusOr<TrainingLog> ParseText(const std::string& text, const std::string& name = "run.csv", Options o = {}) {
  return LogReader::Parse(text, name, o);
}

void ExpectError(const StatusOr<TrainingLog>& r, std::initializer_list<const char*> pieces) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  for (const char* p : pieces) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << p << "'";
  }
}

int64_t Count(const TrainingLog& log, std::optional<double> LogRecord::*field) {
  int64_t n = 0;
  for (const auto& r : log.records) n += (r.*field).has_value();
  return n;
}

// --- TFRecord / protobuf encoding for in-memory event files ---------------

std::string Varint(uint64_t v) {
  std::string s;
  do {
    unsigned char b = v & 0x7F;
    v >>= 7;
    if (v) b |= 0x80;
    s += static_cast<char>(b);
  } while (v);
  return s;
}
std::string Key(int field, int wire) { return Varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
std::string Bytes(int field, const std::string& data) { return Key(field, 2) + Varint(data.size()) + data; }
template <typename T>
std::string Raw(T v) {
  std::string s(sizeof v, '\0');
  std::memcpy(&s[0], &v, sizeof v);  // little-endian host (x86-64, aarch64)
  return s;
}
std::string Event(double wall, int64_t step, const std::string& summary) {
  std::string e = Key(1, 1) + Raw(wall);
  if (step != 0) e += Key(2, 0) + Varint(static_cast<uint64_t>(step));
  return e + Bytes(5, summary);
}
std::string Simple(const std::string& tag, float v) { return Bytes(1, Bytes(1, tag) + Key(2, 5) + Raw(v)); }
std::string DoubleTensor(const std::string& tag, double v) {
  const std::string tensor = Key(1, 0) + Varint(2) + Bytes(2, "") + Bytes(6, Raw(v));
  return Bytes(1, Bytes(1, tag) + Bytes(8, tensor));
}
std::string Record(const std::string& payload) {
  const std::string len = Raw(static_cast<uint64_t>(payload.size()));
  return len + Raw(MaskedCrc32c(len.data(), len.size())) + payload + Raw(MaskedCrc32c(payload.data(), payload.size()));
}

// --- the testdata files ------------------------------------------------------

TEST(LogFormatsTest, Crc32cMatchesTheCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C catalogue's check value
}

TEST(LogFormatsTest, KerasCsvLoggerMapsEpochsToIterations) {
  auto r = Read("keras_training.log");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "keras");
  ASSERT_EQ(r->records.size(), 17u);
  EXPECT_EQ(r->records.front().iteration, 1);  // 0-based epochs, no mapping given
  EXPECT_TRUE(r->wall_time_column.empty());
  EXPECT_FALSE(r->HasWallTime());
  Options o;
  o.iterations_per_epoch = 937;
  r = Read("keras_training.log", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.front().iteration, 937);
  EXPECT_EQ(r->records.back().iteration, 17 * 937);
  EXPECT_EQ(*r->records.back().epoch, 16);
  EXPECT_EQ(r->epoch_level_iterations_per_epoch, 937);
  const LogSummary s = Summarize(*r);
  ASSERT_TRUE(s.iterations_per_epoch.has_value());
  EXPECT_DOUBLE_EQ(*s.iterations_per_epoch, 937);
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 17);
}

TEST(LogFormatsTest, EpochLevelMappingOverflowIsAnError) {
  Options o;
  o.iterations_per_epoch = int64_t{1} << 50;
  ExpectError(ParseText("epoch,loss\n0,2.0\n100,1.0\n", "k.csv", o), {"k.csv:3", "epoch 100", "beyond"});
  ExpectError(ParseText("epoch,loss\n0,2.0\n1.5,1.0\n", "k.csv"), {"k.csv:3", "integer epoch", "1.5"});
}

TEST(LogFormatsTest, LightningMetricsCsv) {
  auto r = Read("lightning/metrics.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "lightning");
  EXPECT_EQ(r->records.front().iteration, 49);
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 40);
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 10);
  EXPECT_TRUE(r->records[3].val_loss.has_value());  // step 199: train and val rows merged
  EXPECT_TRUE(r->records[3].train_loss.has_value());
}

TEST(LogFormatsTest, HuggingFaceTrainerState) {
  auto r = Read("hf/trainer_state.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "hf-trainer-state");
  EXPECT_EQ(r->skipped_summary_rows, 1);
  ASSERT_EQ(r->records.size(), 60u);
  EXPECT_EQ(r->records.back().iteration, 600);
  // The last loss point is step 600's logged loss, not the summary's run mean 0.9123.
  ASSERT_TRUE(r->records.back().train_loss.has_value());
  EXPECT_NE(*r->records.back().train_loss, 0.9123);
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 6);  // eval_loss merged into the steps
  EXPECT_EQ(Count(*r, &LogRecord::val_accuracy), 6);
  EXPECT_EQ(*r->records.back().epoch, 3);
  EXPECT_FALSE(r->HasWallTime());
  const LogSummary s = Summarize(*r);
  EXPECT_DOUBLE_EQ(*s.last_loss, *r->records.back().train_loss);
}

TEST(LogFormatsTest, HuggingFaceStructureErrors) {
  ExpectError(ParseText("{\"log_history\": {\"step\": 1}}", "trainer_state.json"), {"'log_history' is object"});
  ExpectError(ParseText("{\"log_history\": []}", "trainer_state.json"), {"empty"});
  ExpectError(ParseText("{\"log_history\": [{\"step\": 1, \"loss\": 1.0}, 7]}", "trainer_state.json"),
              {"log_history[1]", "expected a JSON object"});
  // Only the summary: no loss point at all.
  ExpectError(ParseText("{\"log_history\": [{\"step\": 9, \"train_loss\": 1.0, \"train_runtime\": 3}]}",
                        "trainer_state.json"),
              {"no "});
}

TEST(LogFormatsTest, TensorBoardCsvExport) {
  auto r = Read("run-version_0-tag-train_loss.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "tensorboard-csv");
  ASSERT_EQ(r->records.size(), 200u);
  EXPECT_EQ(r->records.front().iteration, 10);
  EXPECT_DOUBLE_EQ(*r->records.front().wall_time_s, 0.0);  // Unix times rebased to the first row
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 200);
  const LogSummary s = Summarize(*r);
  ASSERT_TRUE(s.seconds_per_iteration.has_value());
  EXPECT_NEAR(*s.seconds_per_iteration, 0.05, 0.005);
  // The val series: the tag in TensorBoard's download name says which loss.
  r = Read("run-version_0-tag-val_loss.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 20);
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 0);
  EXPECT_TRUE(r->EvaluationOnly());
  // Or the user says so.
  Options o;
  o.val_loss_column = "Value";
  r = Read("run-version_0-tag-train_loss.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 200);
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 0);
}

TEST(LogFormatsTest, TensorBoardJsonExport) {
  auto r = Read("run-version_0-tag-train_loss.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "tensorboard-json");
  ASSERT_EQ(r->records.size(), 200u);
  auto csv = Read("run-version_0-tag-train_loss.csv");
  ASSERT_TRUE(csv.ok());
  for (size_t i = 0; i < 200; ++i) {
    EXPECT_EQ(r->records[i].iteration, csv->records[i].iteration);
    EXPECT_NEAR(*r->records[i].train_loss, *csv->records[i].train_loss, 1e-9);
  }
  ExpectError(ParseText("[[1.0, 1, 2.0], [2.0, \"2\", 1.9]]", "x.json"), {"entry 2", "step", "expected a number"});
  ExpectError(ParseText("[[1.0, 1]]", "x.json"), {"entry 1", "[wall_time, step, value]"});
}

TEST(LogFormatsTest, TfEventsFromPyTorchSimpleValues) {
  auto r = Read("tb-pytorch/events.out.tfevents.1700000000.host.4242.0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "tfevents");
  ASSERT_EQ(r->records.size(), 200u);
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 200);  // train/loss
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 20);     // val/loss; lr and the histogram ignored
  EXPECT_EQ(r->records.front().iteration, 10);
  EXPECT_DOUBLE_EQ(*r->records.front().wall_time_s, 0.0);
  const LogSummary s = Summarize(*r);
  ASSERT_TRUE(s.seconds_per_iteration.has_value());
  EXPECT_NEAR(*s.seconds_per_iteration, 0.05, 0.005);
  // Tags chosen by the user; a tag that is not there lists those that are.
  Options o;
  o.loss_tag = "lr";
  r = Read("tb-pytorch/events.out.tfevents.1700000000.host.4242.0", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(*r->records.front().train_loss, 0.1 * (1 - 10 / 2000.0), 1e-6);
  o.loss_tag = "Loss/Train";
  ExpectError(Read("tb-pytorch/events.out.tfevents.1700000000.host.4242.0", o),
              {"unknown tag 'Loss/Train'", "--loss-tag", "train/loss", "lr", "val/loss"});
}

TEST(LogFormatsTest, RunDirectoryWithOneLogIsRead) {
  auto r = LogReader::ReadFile(Data("tb-pytorch"), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "tfevents");
  EXPECT_NE(r->source.find("events.out.tfevents.1700000000.host.4242.0"), std::string::npos);
  r = LogReader::ReadFile(Data("hf"), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "hf-trainer-state");
  ExpectError(LogReader::ReadFile(TestDataDirectory(), {}), {"is a directory", "expected a log file"});
}

TEST(LogFormatsTest, TfEventsFromTf2TensorScalars) {
  auto r = Read("tb-tf2/events.out.tfevents.1700000000.tf2host.777.0.v2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 40u);
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 40);  // epoch_loss, tensor_content
  EXPECT_EQ(Count(*r, &LogRecord::val_loss), 40);    // epoch_val_loss, float_val; the image skipped
  EXPECT_GT(*r->records.front().train_loss, *r->records.back().train_loss);
}

TEST(LogFormatsTest, TfEventsInMemory) {
  std::string file = Record(Event(100.0, 0, "")) + Record(Event(101.0, 5, Simple("Loss", 2.0f))) +
                     Record(Event(102.5, 10, Simple("Loss", 1.5f) + DoubleTensor("eval/loss", 1.75)));
  auto r = ParseText(file, "events.out.tfevents.x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 1.5);  // tag 'Loss' matches 'loss' case-insensitively
  EXPECT_DOUBLE_EQ(*r->records[1].val_loss, 1.75);   // a double tensor
  EXPECT_DOUBLE_EQ(*r->records[1].wall_time_s, 1.5);
  // Detected from the content under another name.
  EXPECT_TRUE(ParseText(file, "run.bin").ok());
  // A second value of one tag at one step: a restarted run (below).
  r = ParseText(file + Record(Event(103.0, 10, Simple("loss", 1.4f))), "events.out.tfevents.x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ(static_cast<float>(*r->records[1].train_loss), 1.4f);  // the later value wins
  EXPECT_EQ(r->restarts, 1);
}

// Issue 26, item 12: a restarted run's event file, its steps going back.
// TensorBoard discards the orphaned values (a tag's values at and after the
// step it went back to) and plots the rest: so does the reader, and says so.
TEST(LogFormatsTest, TfEventsRestartDiscardsOrphanedSteps) {
  std::string file = Record(Event(100.0, 0, ""));
  for (int step = 1; step <= 5; ++step) {  // the first run: steps 1..5
    file += Record(Event(100.0 + step, step, Simple("loss", 10.0f - static_cast<float>(step))));
  }
  for (int step = 3; step <= 7; ++step) {  // resumed from step 3's checkpoint
    file += Record(Event(200.0 + step, step, Simple("loss", 20.0f - static_cast<float>(step))));
  }
  auto r = ParseText(file, "events.out.tfevents.x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 7u);  // steps 1, 2 of the first run; 3..7 of the second
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 8.0);   // step 2, first run
  EXPECT_DOUBLE_EQ(*r->records[2].train_loss, 17.0);  // step 3, second run
  EXPECT_EQ(r->records.back().iteration, 7);
  EXPECT_EQ(r->restarts, 1);
  EXPECT_EQ(r->discarded_orphaned_rows, 3);  // steps 3, 4, 5 of the first run
}

TEST(LogFormatsTest, TensorBoardExportsOfARestartedRun) {
  const std::string csv =
      "Wall time,Step,Value\n1000,1,5\n1001,2,4\n1002,3,3\n1003,4,2\n2000,2,4.5\n2001,3,3.5\n2002,5,1\n";
  auto r = ParseText(csv, "run-tag-train_loss.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 4u);  // step 1; then 2, 3, 5 of the resumed run
  EXPECT_EQ(r->records[1].iteration, 2);
  EXPECT_DOUBLE_EQ(*r->records[1].train_loss, 4.5);
  EXPECT_EQ(r->records[3].iteration, 5);
  EXPECT_EQ(r->discarded_orphaned_rows, 3);  // steps 2, 3, 4 of the first run
  EXPECT_EQ(r->restarts, 1);
  const std::string json = "[[1000, 1, 5], [1001, 2, 4], [1002, 3, 3], [2000, 3, 3.5], [2001, 4, 2.5]]";
  r = ParseText(json, "run-tag-train_loss.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 4u);
  EXPECT_DOUBLE_EQ(*r->records[2].train_loss, 3.5);
  EXPECT_EQ(r->discarded_orphaned_rows, 1);
  // Other formats still require increasing iterations.
  EXPECT_FALSE(ParseText("iteration,loss\n1,2.0\n3,1.9\n2,1.8\n", "a.csv").ok());
}

TEST(LogFormatsTest, TfEventsHostileFraming) {
  const std::string good = Record(Event(100.0, 0, "")) + Record(Event(101.0, 5, Simple("loss", 2.0f)));
  std::string bad = good;
  bad[bad.size() - 1] ^= 0x5A;
  ExpectError(ParseText(bad, "events.out.tfevents.x"), {"record 2", "data's CRC-32C"});
  bad = good;
  bad[good.size() / 2 + 10] ^= 0x01;
  EXPECT_FALSE(ParseText(bad, "events.out.tfevents.x").ok());
  bad = good;
  bad[8] ^= 0x01;  // the length's CRC
  ExpectError(ParseText(bad, "events.out.tfevents.x"), {"record 1", "length's CRC-32C"});
  ExpectError(ParseText(good.substr(0, good.size() - 7), "events.out.tfevents.x"), {"record 2", "cut short"});
  ExpectError(ParseText(good.substr(0, good.size() - 30), "events.out.tfevents.x"), {"record 2"});
  const std::string huge = Raw(uint64_t{1} << 62);
  ExpectError(ParseText(huge + Raw(MaskedCrc32c(huge.data(), 8)) + std::string(16, '\0'), "events.out.tfevents.x"),
              {"record 1", "runs past the end"});
  ExpectError(ParseText(Record("\x2a\xff\xff\xff\x0f\x01"), "events.out.tfevents.x"), {"record 1", "malformed"});
  ExpectError(ParseText(Record(Event(1.0, -5, Simple("loss", 1.0f))), "events.out.tfevents.x"),
              {"record 1", "step -5 is negative"});
  ExpectError(ParseText(Record(Event(1.0, 5, Simple("lr", 1.0f) + Simple("grad_norm", 2.0f))), "events.out.tfevents.x"),
              {"no scalar tag", "--loss-tag", "lr, grad_norm"});
  ExpectError(ParseText(Record(Event(1.0, 5, "")), "events.out.tfevents.x"), {"no scalar values"});
  ExpectError(ParseText("", "events.out.tfevents.x"), {"empty"});
  // Unix wall times going back between steps are not a clock.
  ExpectError(ParseText(Record(Event(10.0, 1, Simple("loss", 1.0f))) + Record(Event(9.0, 2, Simple("loss", 0.9f))),
                        "events.out.tfevents.x"),
              {"record 2", "goes back"});
}

TEST(LogFormatsTest, Detectron2TimeIsSecondsPerIteration) {
  auto r = Read("detectron2/metrics.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "detectron2");
  EXPECT_TRUE(r->wall_time_from_durations);
  ASSERT_EQ(r->records.size(), 50u);
  EXPECT_EQ(r->records.front().iteration, 19);
  EXPECT_FALSE(r->records.front().wall_time_s.has_value());  // the first window has no time
  EXPECT_DOUBLE_EQ(*r->records[1].wall_time_s, 0.0);
  const LogSummary s = Summarize(*r);
  ASSERT_TRUE(s.seconds_per_iteration.has_value());
  EXPECT_NEAR(*s.seconds_per_iteration, 0.35, 0.02);
  EXPECT_EQ(Count(*r, &LogRecord::train_loss), 50);  // total_loss; the eval entry merged into 999
  // Read as a clock, the same column is refused with the hint.
  Options o;
  o.format = LogFormat::kJsonLines;
  ExpectError(Read("detectron2/metrics.json", o), {"metrics.json:", "'time' goes back", "--time-is-duration"});
}

TEST(LogFormatsTest, EvaluationOnlyLogIsValid) {
  auto r = Read("eval_only.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->EvaluationOnly());
  EXPECT_EQ(r->ValLossPoints(), 40);
  EXPECT_EQ(r->records.back().iteration, 100000);
}

TEST(LogFormatsTest, QuirksReadCorrectly) {
  for (const char* name : {"mixed_case.csv", "bom.csv", "cr_only.csv"}) {
    auto r = Read(name);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->format, "csv") << name << " (a BOM must not make it a Keras log)";
    EXPECT_EQ(r->records.size(), 60u) << name;
    EXPECT_EQ(r->records.back().iteration, 600) << name;
    EXPECT_TRUE(r->HasWallTime()) << name;
  }
  // Keras with a BOM stays Keras.
  auto r = ParseText("\xEF\xBB\xBF" "epoch,loss,val_loss\n0,2.0,2.1\n1,1.5,1.6\n", "log.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "keras");
  // CRLF.
  r = ParseText("Iteration,LOSS\r\n1,2.0\r\n2,1.5\r\n", "x.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 2u);
}

// --- hostile classes -----------------------------------------------------------

TEST(LogHostileTest, IterationOutOfRangeNamesLineAndValue) {
  ExpectError(ParseText("iteration,loss\n1,2.0\ninf,1.9\n", "a.csv"), {"a.csv:3", "iteration inf", "out of range"});
  ExpectError(ParseText("iteration,loss\n1,2.0\n1e19,1.9\n", "a.csv"), {"a.csv:3", "iteration 1e+19", "out of range"});
  ExpectError(ParseText("iteration,loss\n1,2.0\nnan,1.9\n", "a.csv"), {"a.csv:3", "iteration nan"});
  ExpectError(ParseText("iteration,loss\n-3,2.0\n", "a.csv"), {"a.csv:2", "iteration -3", "out of range"});
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.0}\n{\"step\": 1e300, \"loss\": 1.9}\n", "a.jsonl"),
              {"a.jsonl:2", "iteration 1e+300"});
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.0}\n{\"step\": \"nan\", \"loss\": 1.9}\n", "a.jsonl"),
              {"a.jsonl:2", "iteration nan"});
  ExpectError(ParseText("{\"step\": 18446744073709551615, \"loss\": 2.0}\n", "a.jsonl"), {"a.jsonl:1", "out of range"});
}

TEST(LogHostileTest, EpochOutOfRange) {
  ExpectError(ParseText("epoch,loss,val_loss\n0,2.0,2.1\nnan,1.9,2.0\n", "k.csv"), {"k.csv:3", "epoch nan", "out of range"});
  ExpectError(ParseText("step,epoch,loss\n1,0,2.0\n2,1e30,1.9\n", "l.csv"), {"l.csv:3", "epoch 1e+30", "out of range"});
  ExpectError(ParseText("step,epoch,loss\n1,-1,2.0\n", "l.csv"), {"l.csv:2", "epoch -1"});
}

TEST(LogHostileTest, NulAndHexInsideANumber) {
  ExpectError(ParseText(std::string("iteration,loss\n1,2\0.0\n2,1.9\n", 29), "n.csv"),
              {"n.csv:2", "column 'loss'", "expected a number", "\\x00"});
  ExpectError(ParseText("iteration,loss\n0x10,2.0\n", "h.csv"), {"h.csv:2", "expected a number", "'0x10'"});
  ExpectError(ParseText(std::string("iteration\0,loss\n1,2.0\n", 22), "h.csv"), {"no iteration"});
}

TEST(LogHostileTest, WallTimesNegativeOrGoingBackAreNamed) {
  ExpectError(ParseText("iteration,loss,wall_time\n1,2.0,-0.01\n2,1.9,0.5\n", "w.csv"),
              {"w.csv:2", "wall time -0.01 is negative"});
  ExpectError(ParseText("iteration,loss,time\n1,2.0,0.35\n2,1.9,0.33\n3,1.8,0.36\n", "w.csv"),
              {"w.csv:3", "column 'time' goes back from 0.35 (line 2) to 0.33", "not a clock", "--time-is-duration"});
  // Read as durations when asked: seconds per iteration accumulate.
  Options o;
  o.time_is_duration = true;
  auto r = ParseText("iteration,loss,time\n10,2.0,0.35\n20,1.9,0.33\n30,1.8,0.37\n", "w.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->wall_time_from_durations);
  EXPECT_DOUBLE_EQ(*r->records[0].wall_time_s, 0.0);
  EXPECT_NEAR(*r->records[1].wall_time_s, 3.3, 1e-12);
  EXPECT_NEAR(*r->records[2].wall_time_s, 7.0, 1e-12);
  ExpectError(ParseText("iteration,loss,time\n10,2.0,0.35\n20,1.9,-0.01\n", "w.csv", o),
              {"w.csv:3", "-0.01 seconds per iteration is negative"});
  ExpectError(ParseText("iteration,loss,time\n10,2.0,0.35\n20,1.9,1e308\n", "w.csv", o),
              {"w.csv:3", "overflow"});
  // A JSON value of the wrong type names the key and the type.
  ExpectError(ParseText("{\"step\": 1, \"loss\": true}\n", "b.jsonl"), {"b.jsonl:1", "'loss'", "got boolean"});
}

TEST(LogHostileTest, MessagesQuoteABoundedExcerpt) {
  std::string header, row;
  for (int i = 0; i < 1000000; ++i) {
    header += (i ? "," : "") + std::string("c") + std::to_string(i);
  }
  Options o;
  o.max_line_bytes = int64_t{1} << 24;
  auto r = ParseText(header + "\n", "wide.csv", o);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 2000u) << "an unbounded message";
  EXPECT_NE(r.status().message().find("1000000 in all"), std::string::npos) << r.status().message();
  r = ParseText("iteration,loss\n1," + std::string(500000, '7') + "x\n", "long.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 400u);
  EXPECT_NE(r.status().message().find("(500001 bytes)"), std::string::npos) << r.status().message();
}

TEST(LogHostileTest, LimitsOnLineLengthAndRows) {
  Options o;
  o.max_line_bytes = 100;
  ExpectError(ParseText("iteration,loss\n1," + std::string(200, '1') + "\n", "l.csv", o),
              {"l.csv:2", "longer than the limit of 100 bytes", "--max-line-bytes"});
  o = Options();
  o.max_rows = 3;
  std::string text = "iteration,loss\n";
  for (int i = 1; i <= 5; ++i) text += std::to_string(i) + ",1.0\n";
  ExpectError(ParseText(text, "r.csv", o), {"r.csv:5", "more than 3 rows", "--max-rows"});
  ExpectError(ParseText("{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":1}\n{\"step\":3,\"loss\":1}\n{\"step\":4,\"loss\":1}\n",
                        "r.jsonl", o),
              {"r.jsonl:4", "more than 3"});
  o = Options();
  o.max_bytes = 10;
  ExpectError(ParseText(text, "r.csv", o), {"larger than the limit of 10 bytes"});
}

TEST(LogHostileTest, DevZeroEndsQuicklyWithAClearError) {
  if (!fs::exists("/dev/zero")) GTEST_SKIP();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = LogReader::ReadFile("/dev/zero", {});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ExpectError(r, {"/dev/zero", "not a regular file or a pipe"});
  EXPECT_LT(s, 5.0);
}

TEST(LogHostileTest, CrOnlyAndHeaderless) {
  ExpectError(ParseText("0\r1\r2\r", "c.csv"), {"c.csv:1", "missing header", "'0'"});
  auto r = ParseText("iteration,loss\r1,2.0\r2,1.5\r", "c.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 2u);
}

TEST(LogHostileTest, DeepJsonNesting) {
  ExpectError(ParseText(std::string(300000, '[') + std::string(300000, ']'), "deep.json"), {"nested deeper than 64"});
  ExpectError(ParseText("{\"step\": 1, \"loss\": " + std::string(200000, '[') + "\n", "deep.jsonl"),
              {"deep.jsonl:1", "nested deeper"});
  ExpectError(ParseText("{\"log_history\": " + std::string(100000, '[') + "}", "trainer_state.json"),
              {"nested deeper"});
}

TEST(LogHostileTest, SummaryIsNotALossPoint) {
  auto r = ParseText("{\"step\": 100, \"loss\": 1.5}\n{\"step\": 200, \"loss\": 1.2}\n"
                     "{\"step\": 200, \"train_loss\": 1.9, \"train_runtime\": 80.5}\n",
                     "hf.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->skipped_summary_rows, 1);
  EXPECT_DOUBLE_EQ(*Summarize(*r).last_loss, 1.2);
  ExpectError(ParseText("{\"train_runtime\": 80.5, \"train_loss\": 1.3, \"step\": 200}\n", "s.jsonl"), {"s.jsonl"});
}

TEST(LogHostileTest, RepeatedColumnIsAmbiguous) {
  ExpectError(ParseText("iteration,loss,Loss\n1,2.0,3.0\n", "d.csv"), {"d.csv:1", "appears twice", "columns 2 and 3"});
  ExpectError(ParseText("{\"step\": 1, \"loss\": 2.0, \"LOSS\": 3.0}\n", "d.jsonl"), {"d.jsonl:1", "appears twice"});
}

TEST(LogHostileTest, OptionsAreChecked) {
  Options o;
  o.iterations_per_epoch = -1;
  std::string error;
  EXPECT_FALSE(o.IsValid(&error));
  o = Options();
  o.max_rows = 0;
  EXPECT_FALSE(o.IsValid(&error));
  o = Options();
  o.loss_tag = std::string("a\0b", 3);
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_FALSE(LogFormatFromString("protobuf").ok());
  for (const char* name : {"csv", "keras", "lightning", "jsonl", "hf-trainer-state", "tensorboard-csv",
                           "tensorboard-json", "tfevents", "detectron2"}) {
    auto f = LogFormatFromString(name);
    ASSERT_TRUE(f.ok()) << name;
    EXPECT_STREQ(ToString(*f), name);
  }
}

// Every seed of the fuzz corpus: the valid logs read, every hostile-* file
// is refused with a message, none crashes.
TEST(LogHostileTest, FuzzCorpusSeeds) {
  const fs::path dir = fs::path(TestDataDirectory()) / ".." / ".." / "fuzz" / "corpus" / "log_reader";
  if (!fs::exists(dir)) GTEST_SKIP() << "no corpus at " << dir;
  int hostile = 0, valid = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    // A gzipped seed is read as a user's file is (ReadFile inflates it).
    const bool gzipped = name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0;
    auto r = gzipped ? LogReader::ReadFile(e.path().string(), {}) : LogReader::Parse(ss.str(), name, {});
    if (name.rfind("hostile-", 0) == 0) {
      EXPECT_FALSE(r.ok()) << name << " was accepted";
      if (!r.ok()) {
        EXPECT_LT(r.status().message().size(), 2000u) << name;
      }
      ++hostile;
    } else {
      EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
      ++valid;
    }
  }
  EXPECT_GE(hostile, 20);
  EXPECT_GE(valid, 10);
}

}  // namespace
}  // namespace datasets
}  // namespace viper
