// The staleness-table reader: good tables (with and without accuracies, any
// column order and case, rows in any order, gzip, CRLF, BOM) and one test per
// class of hostile input, each checking that the message names the file, the
// line, the column and the offending value.
#include "viper/datasets/staleness_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>

#include "viper/core/staleness_table.h"

namespace viper {
namespace datasets {
namespace {

namespace fs = std::filesystem;
using Options = StalenessReader::Options;

constexpr const char* kHeader =
    "version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,test_accuracy\n";

StatusOr<StalenessTable> ParseText(const std::string& text, Options options = {}) {
  return StalenessReader::Parse(text, "t.csv", options);
}

// Expects a failure whose message contains every piece in `pieces`.
void ExpectError(const StatusOr<StalenessTable>& r, std::initializer_list<std::string> pieces) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  for (const std::string& p : pieces) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message '" << r.status().message() << "' lacks '" << p << "'";
  }
}

// A table with row `row` (after the full header, as line 2).
StatusOr<StalenessTable> OneRow(const std::string& row) {
  return ParseText(std::string(kHeader) + row + "\n");
}

TEST(StalenessReaderTest, OptionsDefaultsAreValid) {
  std::string error;
  EXPECT_TRUE(Options().IsValid(&error)) << error;
  EXPECT_EQ(Options().max_rows, kDefaultMaxRows);
  EXPECT_EQ(Options().max_line_bytes, kDefaultMaxLineBytes);
  EXPECT_EQ(Options().max_bytes, kDefaultMaxBytes);
}

TEST(StalenessReaderTest, OptionsNameTheBadLimit) {
  for (const char* field : {"max_line_bytes", "max_rows", "max_bytes"}) {
    Options o;
    if (std::string(field) == "max_line_bytes") o.max_line_bytes = 0;
    if (std::string(field) == "max_rows") o.max_rows = -1;
    if (std::string(field) == "max_bytes") o.max_bytes = 0;
    std::string error;
    EXPECT_FALSE(o.IsValid(&error)) << field;
    EXPECT_NE(error.find(field), std::string::npos) << error;
    ExpectError(ParseText(std::string(kHeader) + "0,0,1,,1,\n", o), {"options", field});
  }
}

TEST(StalenessReaderTest, ReadsTableWithAccuracies) {
  auto r = ParseText(std::string(kHeader) +
                     "0,0,2.5,0.1,2.6,0.12\n"
                     "0,100,2.7,,2.9,0.08\n"
                     "100,100,1.5,0.6,1.55,\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source, "t.csv");
  ASSERT_EQ(r->records.size(), 3u);
  const StalenessRecord& a = r->records[0];
  EXPECT_EQ(a.version_iteration, 0);
  EXPECT_EQ(a.traffic_iteration, 0);
  EXPECT_DOUBLE_EQ(a.val_loss, 2.5);
  EXPECT_DOUBLE_EQ(*a.val_accuracy, 0.1);
  EXPECT_DOUBLE_EQ(a.test_loss, 2.6);
  EXPECT_DOUBLE_EQ(*a.test_accuracy, 0.12);
  // An empty accuracy cell is absent, not 0.
  EXPECT_FALSE(r->records[1].val_accuracy.has_value());
  EXPECT_DOUBLE_EQ(*r->records[1].test_accuracy, 0.08);
  EXPECT_FALSE(r->records[2].test_accuracy.has_value());
  EXPECT_EQ(r->records[2].version_iteration, 100);
}

TEST(StalenessReaderTest, ReadsTableWithoutAccuracies) {
  auto r =
      ParseText("version_iteration,traffic_iteration,val_loss,test_loss\n0,50,1.25,1.5\n50,50,0.75,0.8\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->records[0].traffic_iteration, 50);
  EXPECT_DOUBLE_EQ(r->records[0].val_loss, 1.25);
  EXPECT_DOUBLE_EQ(r->records[0].test_loss, 1.5);
  EXPECT_FALSE(r->records[0].val_accuracy.has_value());
  EXPECT_FALSE(r->records[0].test_accuracy.has_value());
  EXPECT_DOUBLE_EQ(r->records[1].val_loss, 0.75);
}

TEST(StalenessReaderTest, ColumnsInAnyOrderAndCase) {
  // The values land by name: test_loss first in the file is still test_loss.
  auto r =
      ParseText("Test_Loss,TRAFFIC_ITERATION,test_accuracy,val_loss,Version_Iteration\n3.5,20,0.25,1.5,10\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 1u);
  EXPECT_EQ(r->records[0].version_iteration, 10);
  EXPECT_EQ(r->records[0].traffic_iteration, 20);
  EXPECT_DOUBLE_EQ(r->records[0].val_loss, 1.5);
  EXPECT_DOUBLE_EQ(r->records[0].test_loss, 3.5);
  EXPECT_DOUBLE_EQ(*r->records[0].test_accuracy, 0.25);
  EXPECT_FALSE(r->records[0].val_accuracy.has_value());
}

TEST(StalenessReaderTest, RowsAreSortedByVersionThenTraffic) {
  auto r = ParseText(
      "version_iteration,traffic_iteration,val_loss,test_loss\n"
      "20,30,6,6\n"
      "0,30,3,3\n"
      "20,20,5,5\n"
      "0,0,1,1\n"
      "0,10,2,2\n"
      "10,30,4,4\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 6u);
  // The val_loss of each row is its rank in (v, t) order.
  for (size_t i = 0; i < r->records.size(); ++i) {
    EXPECT_DOUBLE_EQ(r->records[i].val_loss, static_cast<double>(i + 1)) << "record " << i;
  }
  EXPECT_EQ(r->records[2].traffic_iteration, 30);
  EXPECT_EQ(r->records[3].version_iteration, 10);
}

TEST(StalenessReaderTest, BlankLinesCrlfBomAndLastLineWithoutNewline) {
  auto r = StalenessReader::Parse(
      "\xEF\xBB\xBFversion_iteration,traffic_iteration,val_loss,test_loss\r\n\r\n0,0,1,2\r\n   \r\n\n5,7,3,4",
      "b.csv", {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->records[1].traffic_iteration, 7);
  EXPECT_DOUBLE_EQ(r->records[1].test_loss, 4.0);
  // Blank lines still count: the bad row is line 6 of the file.
  ExpectError(
      StalenessReader::Parse("version_iteration,traffic_iteration,val_loss,test_loss\r\n\r\n0,0,1,2\r\n"
                             "\r\n\r\n1,0,1,2\r\n",
                             "b.csv", {}),
      {"b.csv:6:"});
}

TEST(StalenessReaderTest, IterationsAtTheBounds) {
  const std::string max = std::to_string(kMaxLogIteration);
  auto r = OneRow("0," + max + ",0,,0,");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records[0].traffic_iteration, kMaxLogIteration);
  EXPECT_EQ(r->records[0].version_iteration, 0);
  EXPECT_DOUBLE_EQ(r->records[0].val_loss, 0.0);  // a loss of 0 is allowed
  auto z = OneRow("007,8,1,0,1,1");               // leading zeros are digits; accuracy 0 and 1 are in range
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(z->records[0].version_iteration, 7);
}

// The writer's text reads back as the same table.
TEST(StalenessReaderTest, ReadsWhatFormatStalenessCsvWrites) {
  StalenessTable t;
  t.records.push_back({0, 0, 2.5, 2.625, 0.125, std::nullopt});
  t.records.push_back({0, 937, 2.75, 3.0, std::nullopt, 0.5});
  t.records.push_back({937, 937, 0.375, 0.4375, 0.875, 0.8125});
  for (bool accuracy : {true, false}) {
    if (!accuracy) {
      for (auto& rec : t.records) rec.val_accuracy = rec.test_accuracy = std::nullopt;
    }
    auto r = StalenessReader::Parse(FormatStalenessCsv(t), "w.csv", {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->records.size(), t.records.size());
    for (size_t i = 0; i < t.records.size(); ++i) {
      const StalenessRecord& a = t.records[i];
      const StalenessRecord& b = r->records[i];
      EXPECT_EQ(a.version_iteration, b.version_iteration);
      EXPECT_EQ(a.traffic_iteration, b.traffic_iteration);
      EXPECT_EQ(a.val_loss, b.val_loss);  // dyadic values: exact in 9 digits
      EXPECT_EQ(a.test_loss, b.test_loss);
      EXPECT_EQ(a.val_accuracy, b.val_accuracy);
      EXPECT_EQ(a.test_accuracy, b.test_accuracy);
    }
  }
}

class StalenessFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("viper-staleness-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string WriteGzip(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (f) {
      gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
      gzclose(f);
    }
    return path;
  }
  std::string WritePlain(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

TEST_F(StalenessFileTest, ReadsPlainAndGzipFiles) {
  const std::string text = std::string(kHeader) + "5,9,1.5,0.5,1.75,0.25\n0,9,2.5,,2.75,\n";
  for (const std::string& path : {WritePlain("s.csv", text), WriteGzip("s.csv.gz", text),
                                  WriteGzip("gzip-under-another-name.csv", text)}) {
    auto r = StalenessReader::ReadFile(path, {});
    ASSERT_TRUE(r.ok()) << path << ": " << r.status().ToString();
    EXPECT_EQ(r->source, path);
    ASSERT_EQ(r->records.size(), 2u);
    EXPECT_EQ(r->records[0].version_iteration, 0);  // sorted
    EXPECT_DOUBLE_EQ(r->records[1].test_loss, 1.75);
    EXPECT_DOUBLE_EQ(*r->records[1].val_accuracy, 0.5);
  }
}

TEST_F(StalenessFileTest, ErrorsInAGzipFileNameItsLines) {
  const std::string path = WriteGzip("bad.csv.gz", std::string(kHeader) + "0,0,1,,1,\n3,2,1,,1,\n");
  ExpectError(StalenessReader::ReadFile(path, {}), {path + ":3:", "3", "2"});
}

TEST_F(StalenessFileTest, TruncatedGzipIsDataLoss) {
  std::string text = kHeader;
  for (int i = 0; i < 5000; ++i)
    text += "0," + std::to_string(i) + "," + std::to_string(1.0 / (i + 1)) + ",,1,\n";
  const std::string full = WriteGzip("full.csv.gz", text);
  const std::string cut = (dir_ / "cut.csv.gz").string();
  fs::copy_file(full, cut);
  fs::resize_file(cut, fs::file_size(full) / 2);
  auto r = StalenessReader::ReadFile(cut, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("cut.csv.gz"), std::string::npos) << r.status().message();
}

TEST_F(StalenessFileTest, MissingFileIsNotFound) {
  auto r = StalenessReader::ReadFile((dir_ / "nope.csv").string(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope.csv"), std::string::npos);
}

// The byte limit counts what the gzip stream inflates to, not the file.
TEST_F(StalenessFileTest, ByteLimitAppliesAfterDecompression) {
  std::string text = kHeader;
  for (int i = 0; i < 2000; ++i) text += "0," + std::to_string(i) + ",1,,1,\n";
  const std::string path = WriteGzip("big.csv.gz", text);
  ASSERT_LT(fs::file_size(path), 16000u);
  Options o;
  o.max_bytes = 16000;
  auto r = StalenessReader::ReadFile(path, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("16000"), std::string::npos) << r.status().message();
  o.max_bytes = static_cast<int64_t>(text.size());
  EXPECT_TRUE(StalenessReader::ReadFile(path, o).ok());
}

// ---------------------------------------------------------------------------
// Hostile input, one class per test.

TEST(StalenessHostileTest, UnknownColumnIsNamedAndTheKnownOnesListed) {
  ExpectError(ParseText("version_iteration,traffic_iteration,val_loss,test_loss,lr\n0,0,1,1,0.1\n"),
              {"t.csv:1:", "column 5", "unknown column 'lr'", "version_iteration", "traffic_iteration",
               "val_loss", "val_accuracy", "test_loss", "test_accuracy"});
  // A header of numbers: probably no header at all.
  ExpectError(ParseText("0,0,1,1\n"), {"t.csv:1:", "'0'", "is the header missing"});
  // A very long unknown name is quoted as an excerpt.
  auto r = ParseText("version_iteration,traffic_iteration,val_loss,test_loss," + std::string(100000, 'x') +
                     "\n0,0,1,1,1\n");
  ExpectError(r, {"t.csv:1:", "unknown column 'xxx", "(100000 bytes)"});
  EXPECT_LT(r.status().message().size(), 600u);
}

TEST(StalenessHostileTest, MissingRequiredColumn) {
  const char* names[] = {"version_iteration", "traffic_iteration", "val_loss", "test_loss"};
  for (const char* missing : names) {
    std::string header;
    for (const char* n : names) {
      if (n != missing) header += (header.empty() ? "" : ",") + std::string(n);
    }
    ExpectError(ParseText(header + "\n0,0,1\n"), {"t.csv:1:", std::string("no column '") + missing + "'"});
  }
}

TEST(StalenessHostileTest, RepeatedColumn) {
  ExpectError(ParseText("version_iteration,traffic_iteration,val_loss,test_loss,VAL_LOSS\n0,0,1,1,2\n"),
              {"t.csv:1:", "'VAL_LOSS' appears twice", "columns 3 and 5"});
}

TEST(StalenessHostileTest, EmptyFileAndHeaderWithoutRows) {
  ExpectError(ParseText(""), {"t.csv", "empty"});
  ExpectError(ParseText("\xEF\xBB\xBF\n \r\n"), {"t.csv", "empty"});
  ExpectError(ParseText(std::string("\n") + kHeader + "\n\n"), {"t.csv:2:", "no rows"});
}

TEST(StalenessHostileTest, NegativeIteration) {
  ExpectError(OneRow("-5,0,1,,1,"), {"t.csv:2:", "column 'version_iteration'", "'-5'", "negative"});
  ExpectError(OneRow("0,-1,1,,1,"), {"t.csv:2:", "column 'traffic_iteration'", "'-1'", "negative"});
}

TEST(StalenessHostileTest, IterationNotAnInteger) {
  for (const char* bad : {"2.5", "2.0", "+3", "1e3", "0x10", "3 4", "nan", "inf", "--1", "-"}) {
    ExpectError(OneRow(std::string(bad) + ",10,1,,1,"),
                {"t.csv:2:", "column 'version_iteration'", "'" + std::string(bad) + "'", "digits only"});
  }
}

TEST(StalenessHostileTest, IterationOutOfRange) {
  const std::string over = std::to_string(kMaxLogIteration + 1);
  ExpectError(OneRow("0," + over + ",1,,1,"),
              {"t.csv:2:", "column 'traffic_iteration'", over, "out of range"});
  // Far beyond int64: refused before it can overflow, quoted as an excerpt.
  auto r = OneRow("0," + std::string(5000, '9') + ",1,,1,");
  ExpectError(r, {"t.csv:2:", "column 'traffic_iteration'", "out of range", "(5000 bytes)"});
  EXPECT_LT(r.status().message().size(), 400u);
}

TEST(StalenessHostileTest, EmptyRequiredCell) {
  ExpectError(OneRow(",0,1,,1,"), {"t.csv:2:", "column 'version_iteration'", "empty cell"});
  ExpectError(OneRow("0,,1,,1,"), {"t.csv:2:", "column 'traffic_iteration'", "empty cell"});
  ExpectError(OneRow("0,0,,,1,"), {"t.csv:2:", "column 'val_loss'", "empty cell"});
  ExpectError(OneRow("0,0,1,,,"), {"t.csv:2:", "column 'test_loss'", "empty cell"});
}

TEST(StalenessHostileTest, VersionAfterTraffic) {
  ExpectError(ParseText(std::string(kHeader) + "0,0,1,,1,\n\n900,899,1,,1,\n"),
              {"t.csv:4:", "column 'version_iteration'", "900", "899", "traffic_iteration"});
}

TEST(StalenessHostileTest, LossNotFiniteOrNegative) {
  ExpectError(OneRow("0,0,nan,,1,"), {"t.csv:2:", "column 'val_loss'", "'nan'", "not a number"});
  ExpectError(OneRow("0,0,1,,inf,"), {"t.csv:2:", "column 'test_loss'", "'inf'", "not finite"});
  ExpectError(OneRow("0,0,1,,1e999,"), {"t.csv:2:", "column 'test_loss'", "'1e999'", "not finite"});
  ExpectError(OneRow("0,0,-0.5,,1,"), {"t.csv:2:", "column 'val_loss'", "'-0.5'", "negative"});
  ExpectError(OneRow("0,0,1,,-inf,"), {"t.csv:2:", "column 'test_loss'", "'-inf'", "negative"});
  ExpectError(OneRow("0,0,null,,1,"), {"t.csv:2:", "column 'val_loss'", "'null'"});
  ExpectError(OneRow("0,0,0x1p3,,1,"), {"t.csv:2:", "column 'val_loss'", "'0x1p3'"});
  ExpectError(OneRow("0,0,1.5kg,,1,"), {"t.csv:2:", "column 'val_loss'", "'1.5kg'"});
}

TEST(StalenessReaderTest, NonFiniteLossesFollowThePolicy) {
  const std::string text = std::string(kHeader) + "0,0,1,0.5,1.1,0.5\n0,5,1.2,,1.3,\n5,5,nan,nan,-nan,0.1\n";
  ExpectError(ParseText(text), {"t.csv:4:", "column 'val_loss'", "--non-finite diverged"});
  Options o;
  o.non_finite = NonFinitePolicy::kDiverged;
  auto t = ParseText(text, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->records.size(), 3u);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(t->records[2].val_loss, inf);
  EXPECT_EQ(t->records[2].test_loss, inf);
  EXPECT_FALSE(t->records[2].val_accuracy.has_value());
  EXPECT_EQ(t->records[2].test_accuracy, 0.1);
  o.non_finite = NonFinitePolicy::kDrop;
  auto d = ParseText(text, o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->records.size(), 2u) << "the NaN row is dropped (its pair is then missing)";
  // Under diverged a negative finite loss is still an error.
  o.non_finite = NonFinitePolicy::kDiverged;
  ExpectError(ParseText(std::string(kHeader) + "0,0,-1,,1,\n", o), {"t.csv:2:", "negative"});
}

TEST(StalenessHostileTest, AccuracyOutsideZeroOne) {
  ExpectError(OneRow("0,0,1,1.5,1,"), {"t.csv:2:", "column 'val_accuracy'", "'1.5'", "above 1"});
  ExpectError(OneRow("0,0,1,,1,-0.1"), {"t.csv:2:", "column 'test_accuracy'", "'-0.1'", "negative"});
  ExpectError(OneRow("0,0,1,nan,1,"), {"t.csv:2:", "column 'val_accuracy'", "'nan'", "not a number"});
  ExpectError(OneRow("0,0,1,,1,None"), {"t.csv:2:", "column 'test_accuracy'", "'None'"});
}

TEST(StalenessHostileTest, RepeatedPairNamesBothLines) {
  ExpectError(ParseText(std::string(kHeader) + "0,5,1,,1,\n3,5,1,,1,\n0,0,1,,1,\n0,5,2,,2,\n"),
              {"t.csv:5:", "version_iteration 0", "traffic_iteration 5", "repeats line 2"});
}

TEST(StalenessHostileTest, WrongNumberOfFields) {
  ExpectError(OneRow("0,0,1,,1"), {"t.csv:2:", "expected 6 fields", "got 5", "'0,0,1,,1'"});
  ExpectError(OneRow("0,0,1,,1,,"), {"t.csv:2:", "expected 6 fields", "got 7"});
}

TEST(StalenessHostileTest, LongLine) {
  Options o;
  o.max_line_bytes = 64;
  auto r = ParseText(std::string("version_iteration,traffic_iteration,val_loss,test_loss\n0,0,1,1\n0,1,") +
                         std::string(100, '1') + ",1\n",
                     o);
  ExpectError(r, {"t.csv:3:", "longer than the limit of 64 bytes"});
  // A long cell under the default limit is quoted, not copied.
  auto big = OneRow("0,0," + std::string(200000, '7') + ".5x,,1,");
  ExpectError(big, {"t.csv:2:", "column 'val_loss'"});
  EXPECT_LT(big.status().message().size(), 400u);
}

TEST(StalenessHostileTest, TooManyRows) {
  Options o;
  o.max_rows = 2;
  const std::string two = std::string(kHeader) + "0,0,1,,1,\n\n0,1,1,,1,\n";
  EXPECT_TRUE(ParseText(two, o).ok());  // exactly at the limit; blank lines are not rows
  ExpectError(ParseText(two + "0,2,1,,1,\n", o), {"t.csv:5:", "more than 2 rows"});
}

TEST(StalenessHostileTest, TooManyBytes) {
  Options o;
  o.max_bytes = 40;
  ExpectError(ParseText(std::string(kHeader) + "0,0,1,,1,\n", o), {"t.csv", "limit of 40 bytes"});
}

TEST(StalenessHostileTest, BinaryGarbageIsQuotedEscaped) {
  static const char kRow[] = "0,0,\x01\xff\0\x7f,,1,\n";
  auto r = ParseText(std::string(kHeader) + std::string(kRow, sizeof kRow - 1));
  ExpectError(r, {"t.csv:2:", "column 'val_loss'", "\\x01\\xFF\\x00\\x7F"});
}

// Every prefix of a good table is read or refused, never more: a cut in a
// row's middle is an error naming that line or reads as a shorter table.
TEST(StalenessHostileTest, EveryPrefixIsReadOrRefused) {
  const std::string text =
      std::string(kHeader) + "0,0,2.5,0.25,2.75,0.5\n0,10,3.5,,3.75,\n10,10,1.5,0.5,1.25,0.75\n";
  int ok = 0;
  for (size_t n = 0; n <= text.size(); ++n) {
    auto r = ParseText(text.substr(0, n));
    if (r.ok()) {
      ++ok;
      EXPECT_LE(r->records.size(), 3u);
    } else {
      EXPECT_NE(r.status().message().find("t.csv"), std::string::npos) << r.status().message();
    }
  }
  EXPECT_GE(ok, 3);  // at least the prefixes ending after each row's last digit
}

// Every seed of the fuzz corpus (fuzz/corpus/staleness): the valid tables
// read, every hostile-* file is refused with a bounded message.
TEST(StalenessHostileTest, FuzzCorpusSeeds) {
  const fs::path dir = fs::path(TestDataDirectory()) / ".." / ".." / "fuzz" / "corpus" / "staleness";
  if (!fs::exists(dir)) GTEST_SKIP() << "no corpus at " << dir;
  int hostile = 0, valid = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const bool gzipped = name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0;
    auto r = gzipped ? StalenessReader::ReadFile(e.path().string(), {})
                     : StalenessReader::Parse(ss.str(), name, {});
    if (name.rfind("hostile-", 0) == 0) {
      EXPECT_FALSE(r.ok()) << name << " was accepted";
      if (!r.ok()) {
        EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
        EXPECT_LT(r.status().message().size(), 2000u) << name;
      }
      ++hostile;
    } else {
      EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
      ++valid;
    }
  }
  EXPECT_GE(hostile, 10);
  EXPECT_GE(valid, 4);
}

}  // namespace
}  // namespace datasets
}  // namespace viper
