// The staleness surface of staleness.h: the table read into rows, its
// interpolation and integrals. The oracle on it is staleness_oracle.cc.
#include "viper/schedulers/staleness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace viper {
namespace schedulers {

const char* ToString(StalenessSample sample) {
  return sample == StalenessSample::kValidation ? "val_loss" : "test_loss";
}

namespace {

std::string Pair(int64_t v, double t) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "(version %lld, traffic %.10g)", static_cast<long long>(v), t);
  return buf;
}

// Linear interpolation on knots xs (increasing) with values ys; constant
// beyond the ends. A knot of +inf (a diverged version's diagonal) makes the
// whole interval on either side of it +inf: between a measured model and a
// diverged one nothing says when it diverged.
double Lerp(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const size_t j = static_cast<size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  if (x == xs[j - 1]) return ys[j - 1];
  if (std::isinf(ys[j - 1]) || std::isinf(ys[j])) return std::numeric_limits<double>::infinity();
  const double w = (x - xs[j - 1]) / (xs[j] - xs[j - 1]);
  return ys[j - 1] + w * (ys[j] - ys[j - 1]);
}

}  // namespace

StatusOr<StalenessSurface> StalenessSurface::Make(const StalenessTable& table, StalenessSample sample) {
  const std::string& src = table.source.empty() ? std::string("staleness table") : table.source;
  if (table.records.empty()) return InvalidArgumentError(src + ": the staleness table has no rows");
  std::vector<StalenessRecord> rec = table.records;
  std::sort(rec.begin(), rec.end(), [](const StalenessRecord& a, const StalenessRecord& b) {
    return a.version_iteration != b.version_iteration ? a.version_iteration < b.version_iteration
                                                      : a.traffic_iteration < b.traffic_iteration;
  });
  StalenessSurface s;
  s.source_ = src;
  s.sample_ = sample;
  s.min_loss_ = std::numeric_limits<double>::infinity();
  auto value = [&](const StalenessRecord& r) { return sample == StalenessSample::kTest ? r.test_loss : r.val_loss; };
  for (size_t i = 0; i < rec.size(); ++i) {
    const auto& r = rec[i];
    const double x = value(r);
    if (r.traffic_iteration < r.version_iteration) {
      return InvalidArgumentError(src + ": pair " + Pair(r.version_iteration, static_cast<double>(r.traffic_iteration)) +
                                  " has traffic before the version (expected traffic_iteration >= version_iteration)");
    }
    // +inf is a diverged model (NonFinitePolicy::kDiverged); NaN is not a loss.
    if (std::isnan(x) || x < 0 || x == -std::numeric_limits<double>::infinity()) {
      return InvalidArgumentError(src + ": " + ToString(sample) + " of pair " +
                                  Pair(r.version_iteration, static_cast<double>(r.traffic_iteration)) +
                                  " must be >= 0 (or +inf: a diverged model)");
    }
    if (i > 0 && rec[i - 1].version_iteration == r.version_iteration &&
        rec[i - 1].traffic_iteration == r.traffic_iteration) {
      return InvalidArgumentError(src + ": pair " + Pair(r.version_iteration, static_cast<double>(r.traffic_iteration)) +
                                  " appears twice");
    }
    if (std::isfinite(x)) s.min_loss_ = std::min(s.min_loss_, x);
    if (r.traffic_iteration == r.version_iteration) {
      s.diag_v_.push_back(static_cast<double>(r.version_iteration));
      s.diag_l_.push_back(x);
    }
  }
  if (s.diag_v_.empty()) {
    return InvalidArgumentError(src + ": no diagonal row (version_iteration = traffic_iteration); the diagonal is "
                                "each version on its own traffic, as the training log has it");
  }
  for (size_t i = 0; i < rec.size();) {
    Row row;
    row.version = rec[i].version_iteration;
    const double v = static_cast<double>(row.version);
    size_t j = i;
    const bool has_diag = rec[j].traffic_iteration == row.version;
    const double d = has_diag ? value(rec[j]) : s.Diagonal(v);
    // A diverged version (its own-time loss +inf) is +inf on every traffic;
    // its row says nothing about decay and judges no other version.
    row.diverged = std::isinf(d);
    row.traffic.push_back(v);
    row.excess.push_back(0.0);
    if (has_diag) ++j;
    for (; j < rec.size() && rec[j].version_iteration == row.version; ++j) {
      const double x = value(rec[j]);
      if (std::isinf(x) && !row.diverged) {
        return InvalidArgumentError(
            src + ": " + ToString(sample) + " of pair " +
            Pair(row.version, static_cast<double>(rec[j].traffic_iteration)) + " is +inf (a diverged model) but " +
            "version " + std::to_string(row.version) + "'s own-time loss is finite: a model that diverged is " +
            "diverged on every traffic, so give +inf on its diagonal too");
      }
      row.traffic.push_back(static_cast<double>(rec[j].traffic_iteration));
      row.excess.push_back(row.diverged ? 0.0 : x - d);
    }
    row.prefix.assign(row.traffic.size(), 0.0);
    row.min_excess = 0.0;
    for (size_t k = 1; k < row.traffic.size(); ++k) {
      row.prefix[k] = row.prefix[k - 1] + 0.5 * (row.excess[k] + row.excess[k - 1]) * (row.traffic[k] - row.traffic[k - 1]);
      row.min_excess = std::min(row.min_excess, row.excess[k]);
    }
    s.rows_.push_back(std::move(row));
    i = j;
  }
  return s;
}

double StalenessSurface::Diagonal(double version) const { return Lerp(diag_v_, diag_l_, version); }

double StalenessSurface::Excess(const Row& row, double x) { return Lerp(row.traffic, row.excess, x); }

double StalenessSurface::ExcessIntegral(const Row& row, double x) {
  const auto& t = row.traffic;
  if (x <= t.front()) return 0.0;
  if (x >= t.back()) return row.prefix.back();
  const size_t j = static_cast<size_t>(std::upper_bound(t.begin(), t.end(), x) - t.begin()) - 1;
  const double px = Excess(row, x);
  return row.prefix[j] + 0.5 * (row.excess[j] + px) * (x - t[j]);
}

const StalenessSurface::Row* StalenessSurface::RowFor(int64_t version, double traffic) const {
  auto it = std::upper_bound(rows_.begin(), rows_.end(), version,
                             [](int64_t v, const Row& r) { return v < r.version; });
  while (it != rows_.begin()) {
    --it;
    if (!it->diverged && it->traffic.back() >= traffic) return &*it;
  }
  return nullptr;
}

Status StalenessSurface::NotCovered(int64_t version, double traffic) const {
  std::string m = source_ + ": the staleness table does not cover " + Pair(version, traffic) + ": ";
  if (version < rows_.front().version) {
    m += "its first version is " + std::to_string(rows_.front().version);
  } else {
    double reach = 0;
    for (const auto& r : rows_) {
      if (r.version <= version) reach = std::max(reach, r.traffic.back());
    }
    char buf[160];
    std::snprintf(buf, sizeof(buf), "the rows of versions <= %lld reach traffic %.10g at most",
                  static_cast<long long>(version), reach);
    m += buf;
  }
  return OutOfRangeError(m + " (measure that pair, or a longer row of an older version)");
}

StatusOr<double> StalenessSurface::At(int64_t version, double traffic) const {
  if (!(traffic >= static_cast<double>(version))) {
    return InvalidArgumentError(source_ + ": " + Pair(version, traffic) + " asks for traffic before the version");
  }
  const double v = static_cast<double>(version);
  const double d = Diagonal(v);
  if (std::isinf(d)) return d;  // a diverged model: +inf whatever rows reach `traffic`
  const Row* row = RowFor(version, traffic);
  if (!row) return NotCovered(version, traffic);
  return std::max(0.0, d + Excess(*row, traffic) - Excess(*row, v));
}

StatusOr<double> StalenessSurface::Integral(int64_t version, double p0, double p1) const {
  const double v = static_cast<double>(version);
  if (!(p0 >= v) || !(p1 >= p0)) {
    return InvalidArgumentError(source_ + ": integral over traffic [" + std::to_string(p0) + ", " +
                                std::to_string(p1) + "] of version " + std::to_string(version));
  }
  if (p1 == p0) return 0.0;
  if (Diverged(version)) return std::numeric_limits<double>::infinity();
  const Row* row = RowFor(version, p1);
  if (!row) return NotCovered(version, p1);
  const double c = Diagonal(v) - Excess(*row, v);
  if (c + row->min_excess >= 0) {
    return c * (p1 - p0) + ExcessIntegral(*row, p1) - ExcessIntegral(*row, p0);
  }
  // Somewhere c + P < 0: the loss is clamped at 0, so integrate piece by piece
  // (linear within each knot interval).
  double sum = 0;
  const auto& t = row->traffic;
  double a = p0;
  while (a < p1) {
    const size_t j = static_cast<size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin());
    const double b = j < t.size() ? std::min(p1, t[j]) : p1;
    const double fa = c + Excess(*row, a), fb = c + Excess(*row, b);
    if (fa >= 0 && fb >= 0) {
      sum += 0.5 * (fa + fb) * (b - a);
    } else if (fa > 0 || fb > 0) {
      const double pos = std::max(fa, fb), neg = std::min(fa, fb);
      sum += 0.5 * pos * (b - a) * pos / (pos - neg);
    }
    a = b;
  }
  return sum;
}

Status StalenessSurface::CheckCovers(int64_t first_version, int64_t last_traffic) const {
  if (RowFor(first_version, static_cast<double>(last_traffic))) return Status::Ok();
  return NotCovered(first_version, static_cast<double>(last_traffic));
}

bool StalenessSurface::Diverged(int64_t version) const { return std::isinf(Diagonal(static_cast<double>(version))); }

std::vector<int64_t> StalenessSurface::Versions() const {
  std::vector<int64_t> v;
  v.reserve(rows_.size());
  for (const auto& r : rows_) v.push_back(r.version);
  return v;
}

std::vector<StalenessSurface::GridPoint> StalenessSurface::Grid() const {
  std::vector<GridPoint> g;
  for (const auto& r : rows_) {
    const double d = Diagonal(static_cast<double>(r.version));
    for (size_t k = 0; k < r.traffic.size(); ++k) {
      g.push_back({r.version, r.traffic[k], r.diverged ? d : d + r.excess[k]});
    }
  }
  return g;
}

std::optional<StalenessSurface::Change> StalenessSurface::FirstChange(double relative_tolerance) const {
  double first = std::numeric_limits<double>::infinity();
  for (const auto& r : rows_) {
    if (r.diverged) continue;
    const double own = std::fabs(Diagonal(static_cast<double>(r.version)));
    for (size_t k = 1; k < r.traffic.size(); ++k) {
      if (r.traffic[k] >= first) break;
      if (std::fabs(r.excess[k]) > relative_tolerance * own) first = r.traffic[k];
    }
  }
  if (!std::isfinite(first)) return std::nullopt;
  Change c;
  c.first_changed = first;
  c.last_unchanged = static_cast<double>(rows_.front().version);
  for (const auto& r : rows_) {
    for (double t : r.traffic) {
      if (t < first) c.last_unchanged = std::max(c.last_unchanged, t);
    }
  }
  return c;
}

}  // namespace schedulers
}  // namespace viper
