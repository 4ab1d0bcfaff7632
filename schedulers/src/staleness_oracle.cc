// The oracle on a staleness surface (staleness.h): EvaluateOnSurface and the
// dynamic programme SolveOptimalOnSurface with its re-publish search. The
// producer's clock and the timeline each version is served on are
// staleness_slots.h; the surface itself (table reading, interpolation,
// integrals) is staleness.cc; the causal pair bound is staleness_bound.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "staleness_slots.h"
#include "viper/schedulers/staleness.h"

namespace viper {
namespace schedulers {

using internal::Clock;
using internal::Slot;
using internal::SlotCost;

StatusOr<SurfaceEvaluation> EvaluateOnSurface(const Problem& p, const StalenessSurface& s,
                                              const Schedule& schedule, const std::vector<int64_t>& published,
                                              const std::vector<int64_t>& kept,
                                              const std::vector<std::pair<int64_t, double>>& pauses,
                                              const std::vector<std::pair<int64_t, double>>& waits) {
  VIPER_RETURN_IF_ERROR(p.Validate());
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] <= p.warmup_iterations || kept[i] > p.total_iterations || (i > 0 && kept[i] <= kept[i - 1])) {
      return InvalidArgumentError("kept[" + std::to_string(i) + "] = " + std::to_string(kept[i]) +
                                  " is not increasing inside (W, N]");
    }
  }
  for (size_t k = 0; k < schedule.size(); ++k) {
    if (schedule[k] <= p.warmup_iterations || schedule[k] > p.total_iterations ||
        (k > 0 && schedule[k] <= schedule[k - 1])) {
      return InvalidArgumentError("schedule[" + std::to_string(k) + "] = " + std::to_string(schedule[k]) +
                                  " is not increasing inside (W, N]");
    }
    if (!published.empty() && (published[k] < p.warmup_iterations || published[k] > schedule[k])) {
      return InvalidArgumentError("published[" + std::to_string(k) + "] = " + std::to_string(published[k]) +
                                  " is not a model of an iteration in [W, " + std::to_string(schedule[k]) + "]");
    }
  }
  if (!published.empty() && published.size() != schedule.size()) {
    return InvalidArgumentError("published has " + std::to_string(published.size()) + " entries for " +
                                std::to_string(schedule.size()) + " checkpoints");
  }
  VIPER_RETURN_IF_ERROR(s.CheckCovers(p.warmup_iterations, p.total_iterations));
  const int64_t m = static_cast<int64_t>(schedule.size());
  Clock clock(p, s);
  SurfaceEvaluation e;
  // Pauses and waits: (iteration, seconds), increasing inside (W, N].
  auto check_spans = [&](const char* name, const std::vector<std::pair<int64_t, double>>& v) -> Status {
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].first <= p.warmup_iterations || v[i].first > p.total_iterations ||
          (i > 0 && v[i].first <= v[i - 1].first) || !(v[i].second >= 0) || !std::isfinite(v[i].second)) {
        return InvalidArgumentError(std::string(name) + "[" + std::to_string(i) + "] at " +
                                    std::to_string(v[i].first) +
                                    " is not an increasing iteration inside (W, N] with seconds >= 0");
      }
    }
    return Status::Ok();
  };
  VIPER_RETURN_IF_ERROR(check_spans("pauses", pauses));
  VIPER_RETURN_IF_ERROR(check_spans("waits", waits));
  // What checkpoint k's decision waited (0 for version 0 and where none).
  auto wait = [&](int64_t k) {
    if (k == 0) return 0.0;
    const int64_t at = schedule[static_cast<size_t>(k - 1)];
    const auto w = std::lower_bound(waits.begin(), waits.end(), at,
                                    [](const std::pair<int64_t, double>& e, int64_t it) { return e.first < it; });
    return w != waits.end() && w->first == at ? w->second : 0.0;
  };
  const internal::Holds holds = internal::MergeHolds(kept, p.cost.keep_copy_s, pauses);
  const double copies = internal::HeldUpTo(holds, p.total_iterations, true);
  e.window_end_s = p.WindowEnd(m) + (p.requests.window == WindowKind::kWhileTraining ? copies : 0.0);
  const double R = e.window_end_s, delta = p.cost.delay_s;
  // A_k and T_k of every version (k = 0..m), then each version's share;
  // checkpoint k starts after the copies up to its iteration.
  auto T = [&](int64_t k) {
    if (k == 0) return 0.0;
    const int64_t at = schedule[static_cast<size_t>(k - 1)];
    return p.CheckpointStart(at, k) + internal::HeldUpTo(holds, at, true);
  };
  auto A = [&](int64_t k) { return k == 0 ? 0.0 : T(k) + wait(k) + delta; };
  for (int64_t k = 0; k <= m; ++k) {
    const double a = A(k);
    if (a >= R) break;
    const double b = std::min(R, k < m ? A(k + 1) : R);
    Slot slot;
    slot.at = k == 0 ? p.warmup_iterations : schedule[static_cast<size_t>(k - 1)];
    slot.version0 = k == 0;
    slot.T = T(k);
    slot.wait_s = wait(k);
    if (k < m) slot.next = schedule[static_cast<size_t>(k)];
    const int64_t model = k == 0 || published.empty() ? slot.at : published[static_cast<size_t>(k - 1)];
    VIPER_ASSIGN_OR_RETURN(double c, SlotCost(p, s, clock, slot, model, b - T(k), &holds));
    e.cil += c;
  }
  e.objective = e.cil + p.price_per_slowdown_s * (static_cast<double>(m) * p.cost.stall_s + copies);
  return e;
}

StatusOr<SurfaceSolution> SolveOptimalOnSurface(const Problem& p, const StalenessSurface& s,
                                                const std::vector<int64_t>& extra, int64_t max_candidates,
                                                double max_republish_work, const Schedule& fixed_prefix) {
  VIPER_RETURN_IF_ERROR(p.Validate());
  const int64_t W = p.warmup_iterations, N = p.total_iterations;
  VIPER_RETURN_IF_ERROR(s.CheckCovers(W, N));
  if (s.Diverged(W)) {
    return InvalidArgumentError(s.source() + ": the model at the end of the warm-up (iteration " + std::to_string(W) +
                                ") diverged (its loss is +inf): there is no version to serve");
  }
  // A diverged version is never a candidate: it must never be served.
  // A fixed prefix: its checkpoints are candidates 1..r, taken in order, and
  // the free candidates come after its last.
  for (size_t q = 0; q < fixed_prefix.size(); ++q) {
    if (fixed_prefix[q] <= W || fixed_prefix[q] > N || (q > 0 && fixed_prefix[q] <= fixed_prefix[q - 1]) ||
        s.Diverged(fixed_prefix[q])) {
      return InvalidArgumentError("fixed_prefix[" + std::to_string(q) + "] = " + std::to_string(fixed_prefix[q]) +
                                  " is not an increasing, finite version inside (W, N]");
    }
  }
  const int64_t r = static_cast<int64_t>(fixed_prefix.size());
  const int64_t free_after = r > 0 ? fixed_prefix.back() : W;
  std::vector<int64_t> cand;
  for (int64_t v : s.Versions()) {
    if (v > free_after && v <= N && !s.Diverged(v)) cand.push_back(v);
  }
  for (int64_t v : extra) {
    if (v > free_after && v <= N && !s.Diverged(v)) cand.push_back(v);
  }
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  cand.insert(cand.begin(), fixed_prefix.begin(), fixed_prefix.end());
  const int64_t C = static_cast<int64_t>(cand.size());
  if (C > max_candidates) {
    return InvalidArgumentError(s.source() + ": " + std::to_string(C) + " candidate versions in (W, N]; the exact "
                                "oracle on a staleness table takes at most " + std::to_string(max_candidates) +
                                " (thin the table's versions)");
  }
  const double tau = p.seconds_per_iteration, sigma = p.cost.stall_s, delta = p.cost.delay_s;
  const double price = p.price_per_slowdown_s * sigma;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t g = p.min_spacing_iterations;
  const bool while_training = p.requests.window == WindowKind::kWhileTraining;
  const bool wall = p.requests.traffic_clock == TrafficClock::kWall;
  const int64_t kmax = std::min<int64_t>(C, p.MaxCheckpoints());
  SurfaceSolution sol;
  sol.candidates = C;
  // Re-publishing: every checkpoint may publish any earlier candidate (or
  // version 0) instead of its own model. A segment's cost is then the
  // cheapest model over it: C^3 / 6 model-segment costs (times the layers
  // under the wall clock), searched when within max_republish_work.
  // (Under the producer clock the segment costs are computed once, whatever the layers.)
  const double layers = wall ? static_cast<double>(std::max<int64_t>(kmax, 1)) : 1.0;
  const double work = layers * std::pow(static_cast<double>(C) + 1, 3) / 6.0;
  sol.republish_searched = max_republish_work > 0 && work <= max_republish_work;
  // pos[0] = W (version 0), pos[1..C] the candidates.
  std::vector<int64_t> pos(static_cast<size_t>(C + 1));
  pos[0] = W;
  for (int64_t i = 0; i < C; ++i) pos[static_cast<size_t>(i + 1)] = cand[static_cast<size_t>(i)];
  auto at = [&](int64_t i) { return pos[static_cast<size_t>(i)]; };
  Clock clock(p, s);
  // Training seconds between two checkpoints' iterations.
  auto TrainingSpan = [&](int64_t a, int64_t b) {
    return clock.uniform() ? static_cast<double>(b - a) * tau : p.Elapsed(b) - p.Elapsed(a);
  };
  // The cheapest model slot `slot` (of candidate index i) can serve to
  // local time `end_local`: its own, or with re-publishing any of 0..i.
  auto best = [&](int64_t i, const Slot& slot, double end_local, int64_t* model) -> StatusOr<double> {
    double c_best = inf;
    int64_t u_best = i;
    for (int64_t u = sol.republish_searched ? 0 : i; u <= i; ++u) {
      VIPER_ASSIGN_OR_RETURN(double c, SlotCost(p, s, clock, slot, at(u), end_local));
      if (c < c_best || (c == c_best && u == i)) {
        c_best = c;
        u_best = u;
      }
    }
    if (model) *model = at(u_best);
    return c_best;
  };
  // Segment i -> j: version i from A_i to A_j, j being checkpoint k (k only
  // matters under the wall clock: the stalls before i set where the traffic is).
  auto seg = [&](int64_t i, int64_t j, int64_t k, int64_t* model) -> StatusOr<double> {
    Slot slot{at(i), i == 0, i == 0 ? 0.0 : p.CheckpointStart(at(i), k - 1), at(j)};
    const double end = i == 0 ? TrainingSpan(W, at(j)) + delta : TrainingSpan(at(i), at(j)) + sigma + delta;
    return best(i, slot, end, model);
  };
  // Version i as the last, with k checkpoints through it.
  auto last = [&](int64_t i, int64_t k, int64_t* model) -> StatusOr<double> {
    const double R = p.WindowEnd(k);
    const double T = i == 0 ? 0.0 : p.CheckpointStart(at(i), k);
    if (i > 0 && T + delta >= R) return inf;  // never servable in the window
    return best(i, Slot{at(i), i == 0, T, std::nullopt}, R - T, model);
  };
  auto spaced = [&](int64_t i, int64_t j) { return i == 0 || at(j) - at(i) >= g; };
  // With a fixed prefix, candidate j <= r follows j - 1 only, a later one
  // follows the prefix's last or a later one, and a schedule ends at r or later.
  auto allowed = [&](int64_t i, int64_t j) { return j <= r ? i == j - 1 : i >= r; };
  double best_total = inf;
  if (r == 0) {
    VIPER_ASSIGN_OR_RETURN(best_total, last(0, 0, nullptr));
  }
  std::vector<int64_t> path;  // candidate indices of the optimum's checkpoints
  if (while_training && kmax >= C && !wall) {
    // One count-free pass: the last version's share does not depend on m.
    std::vector<double> D(static_cast<size_t>(C + 1), inf);
    std::vector<int64_t> from(static_cast<size_t>(C + 1), -1);
    D[0] = 0;
    int64_t best_j = 0;
    for (int64_t j = 1; j <= C; ++j) {
      for (int64_t i = 0; i < j; ++i) {
        if (!allowed(i, j) || !spaced(i, j) || D[static_cast<size_t>(i)] == inf) continue;
        VIPER_ASSIGN_OR_RETURN(double c, seg(i, j, 0, nullptr));
        const double x = D[static_cast<size_t>(i)] + c + price;
        if (x < D[static_cast<size_t>(j)]) {
          D[static_cast<size_t>(j)] = x;
          from[static_cast<size_t>(j)] = i;
        }
      }
      // While training R - T_j = (N - s_j) tau + sigma whatever the count (k = 1 here).
      if (j < r || D[static_cast<size_t>(j)] == inf) continue;
      VIPER_ASSIGN_OR_RETURN(double tail, last(j, 1, nullptr));
      if (D[static_cast<size_t>(j)] + tail < best_total) {
        best_total = D[static_cast<size_t>(j)] + tail;
        best_j = j;
      }
    }
    for (int64_t j = best_j; j > 0; j = from[static_cast<size_t>(j)]) path.push_back(j);
    sol.layers = 1;
  } else {
    // Layered by count: the window's end (fixed) or a binding budget couples
    // the last version's share to the number of checkpoints; under the wall
    // clock every version's share depends on how many stalls came before it.
    // Under the producer clock segment costs are count-free: computed once.
    std::vector<double> S(wall ? 0 : static_cast<size_t>((C + 1) * (C + 1)), inf);
    auto S_at = [&](int64_t i, int64_t j) -> double& { return S[static_cast<size_t>(i * (C + 1) + j)]; };
    for (int64_t j = 1; j <= C && !wall; ++j) {
      for (int64_t i = 0; i < j; ++i) {
        if (!spaced(i, j)) continue;
        VIPER_ASSIGN_OR_RETURN(S_at(i, j), seg(i, j, 0, nullptr));
      }
    }
    std::vector<double> prev(static_cast<size_t>(C + 1), inf), cur(static_cast<size_t>(C + 1));
    std::vector<std::vector<int64_t>> from;
    prev[0] = 0;
    int64_t best_k = 0, best_j = 0;
    for (int64_t k = 1; k <= kmax; ++k) {
      std::fill(cur.begin(), cur.end(), inf);
      from.emplace_back(static_cast<size_t>(C + 1), -1);
      double layer_min = inf;
      for (int64_t j = k; j <= C; ++j) {
        // Version j must be servable inside the window to matter.
        if (p.CheckpointStart(at(j), k) + delta >= p.WindowEnd(k)) continue;
        for (int64_t i = k - 1; i < j; ++i) {
          const double d = prev[static_cast<size_t>(i)];
          if (d == inf || !allowed(i, j)) continue;
          double c = inf;
          if (!wall) {
            c = S_at(i, j);
          } else if (spaced(i, j)) {
            VIPER_ASSIGN_OR_RETURN(c, seg(i, j, k, nullptr));
          }
          if (c == inf) continue;
          if (d + c + price < cur[static_cast<size_t>(j)]) {
            cur[static_cast<size_t>(j)] = d + c + price;
            from.back()[static_cast<size_t>(j)] = i;
          }
        }
        const double x = cur[static_cast<size_t>(j)];
        if (x == inf) continue;
        layer_min = std::min(layer_min, x);
        if (j < r) continue;  // the prefix is not complete yet
        VIPER_ASSIGN_OR_RETURN(double tail, last(j, k, nullptr));
        if (x + tail < best_total) {
          best_total = x + tail;
          best_k = k;
          best_j = j;
        }
      }
      sol.layers = k;
      // Every cost is >= 0: a layer whose cheapest state already costs the
      // best complete schedule cannot lead to a better one.
      if (!(layer_min < best_total)) break;
      prev.swap(cur);
    }
    for (int64_t k = best_k, j = best_j; k > 0; --k) {
      path.push_back(j);
      j = from[static_cast<size_t>(k - 1)][static_cast<size_t>(j)];
    }
  }
  std::reverse(path.begin(), path.end());
  if (best_total == inf) {
    return InvalidArgumentError(s.source() + ": no schedule completes the fixed prefix of " + std::to_string(r) +
                                " checkpoints inside the window, spacing and budget");
  }
  // The model each checkpoint publishes: the cheapest over its segment, as
  // the passes above charged it.
  const int64_t m = static_cast<int64_t>(path.size());
  for (int64_t q = 0; q < m; ++q) {
    const int64_t i = path[static_cast<size_t>(q)];
    int64_t model = at(i);
    if (q + 1 < m) {
      VIPER_RETURN_IF_ERROR(seg(i, path[static_cast<size_t>(q + 1)], q + 2, &model).status());
    } else {
      VIPER_RETURN_IF_ERROR(last(i, m, &model).status());
    }
    sol.schedule.push_back(at(i));
    sol.published.push_back(model);
    if (model != at(i)) ++sol.republished;
  }
  if (sol.republished == 0) sol.published.clear();
  sol.objective = best_total;
  return sol;
}

}  // namespace schedulers
}  // namespace viper
