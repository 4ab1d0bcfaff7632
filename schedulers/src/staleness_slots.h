// Internal to viper::schedulers: the producer's clock on a staleness surface
// and the cost of one version's slot on the timeline, shared by the oracle
// (staleness_oracle.cc) and the causal pair bound (staleness_bound.cc).
// Not installed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "viper/schedulers/staleness.h"

namespace viper {
namespace schedulers {
namespace internal {

// One stretch of the producer's timeline: `len_s` seconds during which its
// position moves linearly from `from` to `to` (training) or stays (from == to:
// a stall, or after training ended, with len_s = infinity).
struct Piece {
  double len_s;
  double from, to;
};

// The producer's clock for the surface costs: uniform (tau per iteration),
// or the log's own per-iteration times (Problem::elapsed_s, a bound's).
// Training from position p0 to p1 takes Elapsed(p1) - Elapsed(p0) seconds,
// and the time integral of L(v, position) over it is, on the uneven clock,
// G_v(p1) - G_v(p0) with G_v(p) = the integral over [W, p] of L(v, q) times
// the seconds per iteration at q (piecewise constant), kept per model.
class Clock {
 public:
  Clock(const Problem& p, const StalenessSurface& s) : p_(p), s_(s) {}
  bool uniform() const { return p_.elapsed_s.empty(); }
  // Seconds of training from position a to b (a <= b, iterations).
  double Span(double a, double b) const {
    if (uniform()) return (b - a) * p_.seconds_per_iteration;
    return p_.ElapsedAt(b) - p_.ElapsedAt(a);
  }
  // The position `dt` seconds of training after position `from`.
  double After(double from, double dt) const {
    if (uniform()) return from + dt / p_.seconds_per_iteration;
    return p_.PositionAt(p_.ElapsedAt(from) + dt);
  }
  // The time integral of L(v, .) while training moves from p0 to p1.
  StatusOr<double> Integral(int64_t v, double p0, double p1) {
    if (uniform()) {
      VIPER_ASSIGN_OR_RETURN(double integral, s_.Integral(v, p0, p1));
      return p_.seconds_per_iteration * integral;
    }
    VIPER_ASSIGN_OR_RETURN(double g1, G(v, p1));
    VIPER_ASSIGN_OR_RETURN(double g0, G(v, p0));
    return g1 - g0;
  }

 private:
  // At most this many prefix entries per model: G_v is kept every stride_
  // iterations (memory C x kMaxPrefix doubles whatever N) and completed
  // from the nearest kept entry below, at most stride_ - 1 iterations.
  static constexpr int64_t kMaxPrefix = 4096;
  int64_t Stride() const {
    const int64_t n = p_.total_iterations - p_.warmup_iterations;
    return std::max<int64_t>(1, (n + kMaxPrefix - 1) / kMaxPrefix);
  }
  // t_i x the integral of L(v, .) over [i - 1, i].
  StatusOr<double> Step(int64_t v, int64_t i) const {
    const double t = p_.Elapsed(i) - p_.Elapsed(i - 1);
    if (!(t > 0)) return 0.0;
    VIPER_ASSIGN_OR_RETURN(double integral,
                           s_.Integral(v, static_cast<double>(i - 1), static_cast<double>(i)));
    return t * integral;
  }
  StatusOr<double> G(int64_t v, double p) {
    const int64_t W = p_.warmup_iterations, N = p_.total_iterations, stride = Stride();
    // From the model's own iteration on: no traffic before it meets it.
    const int64_t from = std::max(W, v);
    std::vector<double>& g = g_[v];  // g[k] = G_v(W + k stride)
    if (g.empty()) {
      g.assign(static_cast<size_t>((N - W) / stride + 1), 0.0);
      double sum = 0;
      for (int64_t i = from + 1; i <= N; ++i) {
        VIPER_ASSIGN_OR_RETURN(double step, Step(v, i));
        sum += step;
        if ((i - W) % stride == 0) g[static_cast<size_t>((i - W) / stride)] = sum;
      }
    }
    const double x = std::min(std::max(p, static_cast<double>(from)), static_cast<double>(N));
    const int64_t i = std::min(static_cast<int64_t>(std::floor(x)), N);
    const int64_t k = (i - W) / stride, base = W + k * stride;
    double sum = g[static_cast<size_t>(k)];
    for (int64_t j = std::max(base, from) + 1; j <= i; ++j) {
      VIPER_ASSIGN_OR_RETURN(double step, Step(v, j));
      sum += step;
    }
    if (i < N && x > static_cast<double>(i)) {
      const double t = p_.Elapsed(i + 1) - p_.Elapsed(i);
      if (t > 0) {
        VIPER_ASSIGN_OR_RETURN(double part, s_.Integral(v, static_cast<double>(i), x));
        sum += t * part;
      }
    }
    return sum;
  }

  const Problem& p_;
  const StalenessSurface& s_;
  std::map<int64_t, std::vector<double>> g_;
};

// rate x integral over local time [a, b] of L(v, p(x)) (+ the linear drift
// rho x x, local time counted from the version's checkpoint start).
inline StatusOr<double> LocalCost(Clock& clock, const StalenessSurface& s, int64_t v, const Piece* pieces,
                                  size_t n, double a, double b, double rate, double rho) {
  if (!(b > a)) return 0.0;
  double sum = 0, start = 0;
  for (size_t i = 0; i < n && start < b; ++i) {
    const Piece& pc = pieces[i];
    const double end = start + pc.len_s;
    const double x0 = std::max(a, start), x1 = std::min(b, end);
    if (x1 > x0) {
      if (pc.from == pc.to) {
        VIPER_ASSIGN_OR_RETURN(double l, s.At(v, pc.from));
        sum += l * (x1 - x0);
      } else {
        const double p0 = clock.After(pc.from, x0 - start), p1 = clock.After(pc.from, x1 - start);
        VIPER_ASSIGN_OR_RETURN(double integral, clock.Integral(v, p0, std::min(p1, pc.to)));
        sum += integral;
      }
    }
    start = end;
  }
  return rate * (sum + 0.5 * rho * (b * b - a * a));
}

// The timeline from a version's checkpoint start (or from the end of the
// warm-up for version 0, at = W): its own stall (not for version 0), training
// to the next checkpoint and its stall (when there is one), training to N,
// then N forever.
inline size_t LocalPieces(const Problem& p, const Clock& clock, int64_t at, bool version0,
                          std::optional<int64_t> next, Piece* out) {
  const double sigma = p.cost.stall_s;
  const double N = static_cast<double>(p.total_iterations);
  const double inf = std::numeric_limits<double>::infinity();
  size_t n = 0;
  const double s = static_cast<double>(at);
  if (!version0) out[n++] = Piece{sigma, s, s};
  if (next) {
    const double x = static_cast<double>(*next);
    out[n++] = Piece{clock.Span(s, x), s, x};
    out[n++] = Piece{sigma, x, x};
    out[n++] = Piece{clock.Span(x, N), x, N};
  } else {
    out[n++] = Piece{clock.Span(s, N), s, N};
  }
  out[n++] = Piece{inf, N, N};
  return n;
}

// The producer's holds besides its checkpoints' stalls, as (iteration,
// seconds) with increasing iterations: the keep copies (Plan::kept, each
// cost.keep_copy_s) and the re-measuring pauses (Plan::pauses) at the end of
// their iterations, merged where both fall at one.
using Holds = std::vector<std::pair<int64_t, double>>;
inline Holds MergeHolds(const std::vector<int64_t>& kept, double keep_copy_s,
                        const std::vector<std::pair<int64_t, double>>& pauses) {
  Holds out;
  out.reserve(kept.size() + pauses.size());
  size_t i = 0, j = 0;
  while (i < kept.size() || j < pauses.size()) {
    const bool take_copy = j >= pauses.size() || (i < kept.size() && kept[i] <= pauses[j].first);
    const int64_t at = take_copy ? kept[i] : pauses[j].first;
    const double s = take_copy ? keep_copy_s : pauses[j].second;
    if (take_copy) {
      ++i;
    } else {
      ++j;
    }
    if (!out.empty() && out.back().first == at) {
      out.back().second += s;
    } else {
      out.emplace_back(at, s);
    }
  }
  return out;
}

// The seconds of the holds that come before the end of `iteration`'s
// training is reached again: those at iterations below it, and at it too
// when `at_too` (a hold comes before a checkpoint there).
inline double HeldUpTo(const Holds& holds, int64_t iteration, bool at_too) {
  double s = 0;
  for (const auto& [at, seconds] : holds) {
    if (at > iteration || (at == iteration && !at_too)) break;
    s += seconds;
  }
  return s;
}

// LocalPieces with the producer's holds: under the producer clock the
// traffic stays at a hold's iteration while it lasts; a hold at the slot's
// own checkpoint came before it, one at `next` comes before that
// checkpoint's stall.
inline std::vector<Piece> LocalPiecesWithCopies(const Problem& p, const Clock& clock, int64_t at,
                                                bool version0, std::optional<int64_t> next,
                                                const Holds& holds) {
  const double sigma = p.cost.stall_s;
  const int64_t N = p.total_iterations;
  std::vector<Piece> out;
  const double s = static_cast<double>(at);
  if (!version0) out.push_back(Piece{sigma, s, s});
  // Training from `from` to `to`, stopping for each copy in (from, to].
  auto train = [&](int64_t from, int64_t to) {
    double x = static_cast<double>(from);
    const auto after = std::upper_bound(holds.begin(), holds.end(), from,
                                        [](int64_t it, const auto& h) { return it < h.first; });
    for (auto c = after; c != holds.end() && c->first <= to; ++c) {
      const double y = static_cast<double>(c->first);
      out.push_back(Piece{clock.Span(x, y), x, y});
      out.push_back(Piece{c->second, y, y});
      x = y;
    }
    out.push_back(Piece{clock.Span(x, static_cast<double>(to)), x, static_cast<double>(to)});
  };
  if (next) {
    train(at, *next);
    const double x = static_cast<double>(*next);
    out.push_back(Piece{sigma, x, x});
    train(*next, N);
  } else {
    train(at, N);
  }
  out.push_back(Piece{std::numeric_limits<double>::infinity(), static_cast<double>(N), static_cast<double>(N)});
  return out;
}

// Under the wall clock (TrafficClock::kWall) the traffic is at W + x / tau
// at wall time x until it reaches N, whatever the producer does: from a
// version's checkpoint start T it moves linearly from W + T / tau to N, then
// stays at N.
inline size_t WallPieces(const Problem& p, const Clock& clock, double T, Piece* out) {
  const double W = static_cast<double>(p.warmup_iterations), N = static_cast<double>(p.total_iterations);
  const double inf = std::numeric_limits<double>::infinity();
  const double p0 = std::min(N, clock.After(W, T));
  size_t n = 0;
  if (p0 < N) out[n++] = Piece{clock.Span(p0, N), p0, N};
  out[n++] = Piece{inf, N, N};
  return n;
}

// One version's place on the timeline: the checkpoint at iteration `at`
// (version 0: at = W) that started at wall time T (version 0: 0), followed by
// the checkpoint at `next` (none: it is the last).
struct Slot {
  int64_t at = 0;
  bool version0 = false;
  double T = 0;
  std::optional<int64_t> next;
  // Seconds its decision waited (EvaluateOnSurface's waits): it becomes
  // servable that much after T + delay.
  double wait_s = 0;
};

// The cost of serving the model of iteration `model` in `slot` from its
// servable time to local time `end_local` (seconds since the slot's
// checkpoint start): the slot's own model, or an older one it re-publishes.
// `kept`: the producer's holds (EvaluateOnSurface; none for the oracle).
inline StatusOr<double> SlotCost(const Problem& p, const StalenessSurface& s, Clock& clock, const Slot& slot,
                                 int64_t model, double end_local, const Holds* kept = nullptr) {
  if (kept && !kept->empty() && p.requests.traffic_clock != TrafficClock::kWall) {
    const std::vector<Piece> pieces = LocalPiecesWithCopies(p, clock, slot.at, slot.version0, slot.next, *kept);
    const double begin = slot.version0 ? 0.0 : p.cost.delay_s + slot.wait_s;
    return LocalCost(clock, s, model, pieces.data(), pieces.size(), begin, end_local, p.requests.RatePerSecond(),
                     p.drift_per_s);
  }
  Piece pieces[6];
  const size_t n = p.requests.traffic_clock == TrafficClock::kWall
                       ? WallPieces(p, clock, slot.T, pieces)
                       : LocalPieces(p, clock, slot.at, slot.version0, slot.next, pieces);
  const double begin = slot.version0 ? 0.0 : p.cost.delay_s + slot.wait_s;
  return LocalCost(clock, s, model, pieces, n, begin, end_local, p.requests.RatePerSecond(), p.drift_per_s);
}

}  // namespace internal
}  // namespace schedulers
}  // namespace viper
