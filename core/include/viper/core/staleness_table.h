// The staleness table (DESIGN.md §1): the loss of the model as it was after
// iteration v (a *version*) on the traffic as it is after iteration t >= v.
// Its diagonal (v = t) is what a training log's val/test columns hold; off the
// diagonal it says how a stale version decays when the traffic drifts.
//
// File format (CSV, optionally gzip-compressed, one header line):
//   version_iteration,traffic_iteration,val_loss,val_accuracy,test_loss,test_accuracy
// The accuracy columns are optional. One row per measured pair v <= t; val_*
// is the producer's validation sample, test_* the disjoint traffic sample.
// Readers: datasets/staleness_reader.h. Writers: FormatStalenessCsv and
// WriteStalenessTable below (the trainer, `viper run` and Python's
// StalenessRecorder all write through them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viper/core/status.h"

namespace viper {

struct StalenessRecord {
  int64_t version_iteration = 0;   // v: the model as after this iteration
  int64_t traffic_iteration = 0;   // t >= v: the samples as drifted after this iteration
  double val_loss = 0.0;           // on the producer's validation sample
  double test_loss = 0.0;          // on the disjoint traffic sample (the judge's truth)
  std::optional<double> val_accuracy;   // in [0, 1], where measured
  std::optional<double> test_accuracy;  // in [0, 1], where measured
};

// A whole table, rows sorted by (version_iteration, traffic_iteration),
// no duplicate pair.
struct StalenessTable {
  std::string source;  // file it was read from (for messages)
  std::vector<StalenessRecord> records;
  bool empty() const { return records.empty(); }
};

// The CSV text of `table` (header first; accuracy columns only when some row
// has them; losses with 9 significant digits). Rows in the table's order.
std::string FormatStalenessCsv(const StalenessTable& table);

// Writes `table` as FormatStalenessCsv's text, gzip-compressed (level 9) when
// `path` ends in ".gz", atomically (AtomicFile::CreateFor: a private temporary
// with a random name beside `path`, fsynced and renamed over it, then the
// directory fsynced), so a reader sees the old file or the whole new one.
// Mode 0600 whatever the umask.
Status WriteStalenessTable(const StalenessTable& table, const std::string& path);

}  // namespace viper
