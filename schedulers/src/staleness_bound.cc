// The causal bound (staleness.h, SolveCausalBound, and its two-run form
// SolveCausalPairBound): the best any planner that decides from what the
// producer measures can do on runs that look the same until the traffic
// passes a point, one point per run. One backward pass per run (its best
// continuation from every checkpoint decided after it parts) and one forward
// pass over the decisions runs share.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "staleness_slots.h"
#include "viper/schedulers/staleness.h"

namespace viper {
namespace schedulers {

using internal::Clock;
using internal::Slot;
using internal::SlotCost;

namespace {
// The most slot costs one run's backward pass may take (about a minute here).
constexpr double kMaxBoundWork = 2e8;
}  // namespace

double SurfacesAgreeUntil(const StalenessSurface& a, const StalenessSurface& b, int64_t from) {
  // Every measured pair by traffic, then version: (traffic, version) -> loss.
  std::map<std::pair<double, int64_t>, double> ga, gb;
  for (const auto& g : a.Grid()) ga[{g.traffic, g.version}] = g.loss;
  for (const auto& g : b.Grid()) gb[{g.traffic, g.version}] = g.loss;
  std::set<double> traffic;
  for (const auto& [key, loss] : ga) traffic.insert(key.first);
  for (const auto& [key, loss] : gb) traffic.insert(key.first);
  double agreed = static_cast<double>(from);
  for (double t : traffic) {
    // Both hold the same pairs at this traffic point, with the same losses.
    auto ia = ga.lower_bound({t, std::numeric_limits<int64_t>::min()});
    auto ib = gb.lower_bound({t, std::numeric_limits<int64_t>::min()});
    for (; ia != ga.end() && ia->first.first == t; ++ia, ++ib) {
      if (ib == gb.end() || ib->first != ia->first || ib->second != ia->second) return agreed;
    }
    if (ib != gb.end() && ib->first.first == t) return agreed;
    agreed = std::max(agreed, t);
  }
  return agreed;
}

StatusOr<CausalBound> SolveCausalBound(const Problem& p, const std::vector<const StalenessSurface*>& runs,
                                       const std::vector<double>& parts_at,
                                       const std::vector<std::vector<double>>& weights, int64_t max_candidates) {
  VIPER_RETURN_IF_ERROR(p.Validate());
  const size_t M = runs.size();
  if (M < 2) return InvalidArgumentError("causal bound: needs at least two runs, got " + std::to_string(M));
  if (parts_at.size() != M) {
    return InvalidArgumentError("causal bound: " + std::to_string(parts_at.size()) + " parting points for " +
                                std::to_string(M) + " runs");
  }
  const int64_t W = p.warmup_iterations, N = p.total_iterations;
  for (const StalenessSurface* s : runs) {
    VIPER_RETURN_IF_ERROR(s->CheckCovers(W, N));
    if (s->Diverged(W)) {
      return InvalidArgumentError("the model at the end of the warm-up (iteration " + std::to_string(W) +
                                  ") diverged on one of the runs: there is no version to serve");
    }
  }
  if (weights.empty()) return InvalidArgumentError("no weights for the causal bound");
  for (const std::vector<double>& w : weights) {
    double sum = 0;
    for (double x : w) {
      if (!(x > 0 && x < 1)) {
        return InvalidArgumentError("causal bound: weight " + std::to_string(x) + " is not inside (0, 1)");
      }
      sum += x;
    }
    if (w.size() != M || std::abs(sum - 1) > 1e-9) {
      return InvalidArgumentError("causal bound: each weight vector needs " + std::to_string(M) +
                                  " weights summing to 1");
    }
  }
  // The candidates: grid versions of any run inside (W, N] that diverged on none.
  auto diverged = [&](int64_t v) {
    return std::any_of(runs.begin(), runs.end(), [&](const StalenessSurface* s) { return s->Diverged(v); });
  };
  std::vector<int64_t> cand;
  for (const StalenessSurface* s : runs) {
    for (int64_t v : s->Versions()) {
      if (v > W && v <= N && !diverged(v)) cand.push_back(v);
    }
  }
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  const int64_t C = static_cast<int64_t>(cand.size());
  if (C > max_candidates) {
    return InvalidArgumentError("causal bound: " + std::to_string(C) + " candidate versions; at most " +
                                std::to_string(max_candidates));
  }
  const int64_t kmax = std::min<int64_t>(C, p.MaxCheckpoints());
  // The backward passes cost about C^3 K / 6 slot costs each (a few
  // seconds at 10^7 on one core), one per run.
  const double work = std::pow(static_cast<double>(C) + 1, 3) * static_cast<double>(kmax) / 6.0;
  if (work > kMaxBoundWork) {
    char buf[240];
    std::snprintf(buf, sizeof(buf),
                  "causal bound: %lld candidate versions and up to %lld checkpoints make about %.3g slot costs "
                  "a run; at most %.3g (thin the tables' versions)",
                  static_cast<long long>(C), static_cast<long long>(kmax), work, kMaxBoundWork);
    return InvalidArgumentError(buf);
  }
  // Each run's exact optimum, re-publishing searched as below.
  const double unlimited = std::numeric_limits<double>::infinity();
  std::vector<double> optimum(M);
  for (size_t m = 0; m < M; ++m) {
    VIPER_ASSIGN_OR_RETURN(SurfaceSolution o, SolveOptimalOnSurface(p, *runs[m], {}, max_candidates, unlimited));
    if (!(o.objective > 0)) {
      return InvalidArgumentError("causal bound: a run's optimum costs nothing; regret is undefined");
    }
    optimum[m] = o.objective;
  }
  std::vector<int64_t> pos(static_cast<size_t>(C + 1));
  pos[0] = W;
  for (int64_t i = 0; i < C; ++i) pos[static_cast<size_t>(i + 1)] = cand[static_cast<size_t>(i)];
  auto at = [&](int64_t i) { return pos[static_cast<size_t>(i)]; };
  const double sigma = p.cost.stall_s, delta = p.cost.delay_s, price = p.price_per_slowdown_s * sigma;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t g = p.min_spacing_iterations;
  const bool wall = p.requests.traffic_clock == TrafficClock::kWall;
  std::vector<std::unique_ptr<Clock>> clocks;
  for (const StalenessSurface* s : runs) clocks.push_back(std::make_unique<Clock>(p, *s));
  auto span = [&](int64_t a, int64_t b) {
    return clocks[0]->uniform() ? static_cast<double>(b - a) * p.seconds_per_iteration
                                : p.Elapsed(b) - p.Elapsed(a);
  };
  // Candidate i as the k-th checkpoint (i = 0, k = 0: the warm-up's model)
  // serving model u until checkpoint j (j < 0: to the window's end), on run m.
  auto slot_cost = [&](size_t m, int64_t i, int64_t k, int64_t j, int64_t u) -> StatusOr<double> {
    const double T = i == 0 ? 0.0 : p.CheckpointStart(at(i), k);
    if (j < 0) {
      const double R = p.WindowEnd(k);
      if (i > 0 && T + delta >= R) return inf;
      return SlotCost(p, *runs[m], *clocks[m], Slot{at(i), i == 0, T, std::nullopt}, at(u), R - T);
    }
    const double end = i == 0 ? span(W, at(j)) + delta : span(at(i), at(j)) + sigma + delta;
    return SlotCost(p, *runs[m], *clocks[m], Slot{at(i), i == 0, T, at(j)}, at(u), end);
  };
  auto servable = [&](int64_t j, int64_t k) { return p.CheckpointStart(at(j), k) + delta < p.WindowEnd(k); };
  auto spaced = [&](int64_t i, int64_t j) { return i == 0 || at(j) - at(i) >= g; };
  // Whether checkpoint j as the k-th is decided on run m with the runs that
  // have not parted: the traffic at its start (the producer's measurement
  // there) is at or before parts_at[m].
  auto shared = [&](size_t m, int64_t j, int64_t k) {
    if (j == 0) return true;
    const double traffic = wall ? std::min(static_cast<double>(N),
                                           clocks[0]->After(static_cast<double>(W), p.CheckpointStart(at(j), k)))
                                : static_cast<double>(at(j));
    return traffic <= parts_at[m];
  };
  const size_t K = static_cast<size_t>(kmax + 2);
  auto idx = [&](int64_t j, int64_t k) { return static_cast<size_t>(j) * K + static_cast<size_t>(k); };
  // Each run's best cost from checkpoint j as the k-th on, every later
  // choice its own (its model the cheapest of 0..j, as the oracle's).
  // The best continuation's choices: the next checkpoint (-1: none) and
  // the model this one publishes.
  struct Backward {
    std::vector<double> F;
    std::vector<int64_t> next, model;
  };
  auto backward = [&](size_t m) -> StatusOr<Backward> {
    Backward b{std::vector<double>(static_cast<size_t>(C + 1) * K, inf),
               std::vector<int64_t>(static_cast<size_t>(C + 1) * K, -1),
               std::vector<int64_t>(static_cast<size_t>(C + 1) * K, 0)};
    for (int64_t k = kmax; k >= 1; --k) {
      for (int64_t j = C; j >= k; --j) {
        if (!servable(j, k)) continue;
        double best = inf;
        const size_t x = idx(j, k);
        for (int64_t u = 0; u <= j; ++u) {
          VIPER_ASSIGN_OR_RETURN(double c, slot_cost(m, j, k, -1, u));
          if (c < best) {
            best = c;
            b.model[x] = u;
          }
        }
        for (int64_t j2 = j + 1; j2 <= C && k < kmax; ++j2) {
          const double rest = b.F[idx(j2, k + 1)];
          if (!spaced(j, j2) || !(rest + price < best)) continue;
          for (int64_t u = 0; u <= j; ++u) {
            VIPER_ASSIGN_OR_RETURN(double c, slot_cost(m, j, k, j2, u));
            if (c + price + rest < best) {
              best = c + price + rest;
              b.next[x] = j2;
              b.model[x] = u;
            }
          }
        }
        b.F[x] = best;
      }
    }
    return b;
  };
  std::vector<Backward> B;
  for (size_t m = 0; m < M; ++m) {
    VIPER_ASSIGN_OR_RETURN(Backward b, backward(m));
    B.push_back(std::move(b));
  }
  // From a shared checkpoint i (the k-th) publishing u: run m's best
  // continuation, its next checkpoint (-1: none) decided after it parts.
  auto after = [&](size_t m, int64_t i, int64_t k, int64_t u, int64_t* next) -> StatusOr<double> {
    VIPER_ASSIGN_OR_RETURN(double best, slot_cost(m, i, k, -1, u));
    *next = -1;
    for (int64_t j2 = i + 1; j2 <= C && k < kmax; ++j2) {
      const double rest = B[m].F[idx(j2, k + 1)];
      if (shared(m, j2, k + 1) || !spaced(i, j2) || !(rest + price < best)) continue;
      VIPER_ASSIGN_OR_RETURN(double c, slot_cost(m, i, k, j2, u));
      if (c + price + rest < best) {
        best = c + price + rest;
        *next = j2;
      }
    }
    return best;
  };
  // The shared states, once: every (i, k) some runs decide together, the
  // runs that do (`in`), and each one's cost if it parts there, per model
  // u the state publishes (indexed [m][u]; empty for runs not in it).
  struct Shared {
    int64_t i, k;
    std::vector<bool> in;
    std::vector<std::vector<double>> after;
    std::vector<std::vector<int64_t>> next;
  };
  std::vector<Shared> states;
  for (int64_t k = 0; k <= kmax; ++k) {
    for (int64_t i = k == 0 ? 0 : k; i <= (k == 0 ? 0 : C); ++i) {
      if (i > 0 && !servable(i, k)) continue;
      Shared st{i, k, std::vector<bool>(M), std::vector<std::vector<double>>(M),
                std::vector<std::vector<int64_t>>(M)};
      bool any = false;
      for (size_t m = 0; m < M; ++m) any |= st.in[m] = shared(m, i, k);
      if (!any) continue;
      for (size_t m = 0; m < M; ++m) {
        if (!st.in[m]) continue;
        for (int64_t u = 0; u <= i; ++u) {
          int64_t nx = -1;
          VIPER_ASSIGN_OR_RETURN(double c, after(m, i, k, u, &nx));
          st.after[m].push_back(c);
          st.next[m].push_back(nx);
        }
      }
      states.push_back(std::move(st));
    }
  }
  // The forward pass, every weight vector at once, so that each shared
  // segment (i, k-1) -> (j, k) is costed once (per run still in at the
  // destination and model the source publishes) and nothing is stored
  // beyond the states. A run in at the source and not at the destination
  // parts at the source. States are in order of k: every predecessor of a
  // state comes first; by_k lists them per k.
  std::vector<std::vector<size_t>> by_k(static_cast<size_t>(kmax + 1));
  for (size_t x = 0; x < states.size(); ++x) by_k[static_cast<size_t>(states[x].k)].push_back(x);
  // The forward pass's slot costs, refused above the backward passes' budget.
  double forward_work = 0;
  for (size_t y = 0; y < states.size(); ++y) {
    if (states[y].k == 0) continue;
    double runs_in = 0;
    for (size_t m = 0; m < M; ++m) runs_in += states[y].in[m];
    for (size_t x : by_k[static_cast<size_t>(states[y].k - 1)]) {
      if (states[x].i < states[y].i) forward_work += runs_in * static_cast<double>(states[x].i + 1);
    }
  }
  if (forward_work > static_cast<double>(M) * kMaxBoundWork) {
    char buf[240];
    std::snprintf(buf, sizeof(buf),
                  "causal bound: the decisions the runs share make about %.3g slot costs; at most %.3g (fewer "
                  "runs, runs that part sooner, or thinner tables)",
                  forward_work, static_cast<double>(M) * kMaxBoundWork);
    return InvalidArgumentError(buf);
  }
  const size_t Q = weights.size();
  std::vector<std::vector<double>> w(Q, std::vector<double>(M));
  for (size_t q = 0; q < Q; ++q) {
    for (size_t m = 0; m < M; ++m) w[q][m] = weights[q][m] / optimum[m];
  }
  // D[q][x]: the weighted cost of reaching shared state x, with the runs
  // that parted on the way; from / from_model: the predecessor and what it
  // published.
  std::vector<std::vector<double>> D(Q, std::vector<double>(states.size(), inf));
  std::vector<std::vector<size_t>> from(Q, std::vector<size_t>(states.size(), 0));
  std::vector<std::vector<int64_t>> from_model(Q, std::vector<int64_t>(states.size(), 0));
  std::vector<double> total(Q, inf);
  std::vector<size_t> last(Q, 0);
  std::vector<int64_t> last_model(Q, 0);
  for (size_t q = 0; q < Q; ++q) D[q][0] = 0;
  std::vector<double> seg(M);
  for (size_t y = 0; y < states.size(); ++y) {
    const Shared& to = states[y];
    if (to.k > 0) {
      for (size_t x : by_k[static_cast<size_t>(to.k - 1)]) {
        const Shared& src = states[x];
        if (to.i <= src.i || !spaced(src.i, to.i)) continue;
        bool reached = false;
        for (size_t q = 0; q < Q; ++q) reached |= D[q][x] < inf;
        if (!reached) continue;
        for (int64_t u = 0; u <= src.i; ++u) {
          for (size_t m = 0; m < M; ++m) {
            if (!to.in[m]) continue;
            VIPER_ASSIGN_OR_RETURN(seg[m], slot_cost(m, src.i, src.k, to.i, u));
          }
          for (size_t q = 0; q < Q; ++q) {
            if (D[q][x] == inf) continue;
            double c = D[q][x];
            for (size_t m = 0; m < M; ++m) {
              if (to.in[m]) {
                c += w[q][m] * (seg[m] + price);
              } else if (src.in[m]) {
                c += w[q][m] * src.after[m][static_cast<size_t>(u)];
              }
            }
            if (c < D[q][y]) {
              D[q][y] = c;
              from[q][y] = x;
              from_model[q][y] = u;
            }
          }
        }
      }
    }
    for (size_t q = 0; q < Q; ++q) {
      if (D[q][y] == inf) continue;
      for (size_t u = 0; u <= static_cast<size_t>(to.i); ++u) {
        double c = D[q][y];
        for (size_t m = 0; m < M; ++m) {
          if (to.in[m]) c += w[q][m] * to.after[m][u];
        }
        if (c < total[q]) {
          total[q] = c;
          last[q] = y;
          last_model[q] = static_cast<int64_t>(u);
        }
      }
    }
  }
  CausalBound out;
  out.objectives = optimum;
  out.candidates = C;
  out.shared_decisions = static_cast<int64_t>(states.size()) - 1;
  out.bound = -inf;
  for (size_t q = 0; q < Q; ++q) {
    const std::vector<double>& weight = weights[q];
    const double bound = total[q] - 1.0;
    out.by_weights.emplace_back(weight, bound);
    if (!(bound > out.bound)) continue;
    out.bound = bound;
    out.weights = weight;
    // The schedules that reach it: the shared path (each state with the
    // model it publishes), then each run's own from where it parted.
    std::vector<std::pair<size_t, int64_t>> path;  // (state, model), warm-up first
    int64_t model = last_model[q];
    for (size_t y = last[q];; y = from[q][y]) {
      path.emplace_back(y, model);
      if (y == 0) break;
      model = from_model[q][y];
    }
    std::reverse(path.begin(), path.end());
    out.schedules.assign(M, {});
    out.published.assign(M, {});
    out.shared_checkpoints.assign(M, 0);
    for (size_t m = 0; m < M; ++m) {
      size_t q = 0;  // the last state on the path run m is in
      while (q + 1 < path.size() && states[path[q + 1].first].in[m]) ++q;
      for (size_t r = 1; r <= q; ++r) {
        out.schedules[m].push_back(at(states[path[r].first].i));
        out.published[m].push_back(at(path[r].second));
      }
      out.shared_checkpoints[m] = static_cast<int64_t>(q);
      const Shared& st = states[path[q].first];
      const int64_t u = path[q].second;
      for (int64_t j = st.next[m][static_cast<size_t>(u)], k = st.k + 1; j >= 0; j = B[m].next[idx(j, k)], ++k) {
        out.schedules[m].push_back(at(j));
        out.published[m].push_back(at(B[m].model[idx(j, k)]));
      }
    }
  }
  return out;
}

StatusOr<CausalPairBound> SolveCausalPairBound(const Problem& p, const StalenessSurface& sa,
                                               const StalenessSurface& sb, double diverge_traffic,
                                               const std::vector<double>& lambdas, int64_t max_candidates) {
  if (lambdas.empty()) return InvalidArgumentError("no weights for the causal pair bound");
  std::vector<std::vector<double>> weights;
  for (double l : lambdas) {
    if (!(l > 0 && l < 1)) {
      return InvalidArgumentError("causal pair bound: weight " + std::to_string(l) + " is not inside (0, 1)");
    }
    weights.push_back({l, 1 - l});
  }
  VIPER_ASSIGN_OR_RETURN(CausalBound b,
                         SolveCausalBound(p, {&sa, &sb}, {diverge_traffic, diverge_traffic}, weights, max_candidates));
  CausalPairBound out;
  out.bound = b.bound;
  out.lambda = b.weights[0];
  for (const auto& [w, bound] : b.by_weights) out.by_lambda.emplace_back(w[0], bound);
  out.objective_a = b.objectives[0];
  out.objective_b = b.objectives[1];
  out.shared_decisions = b.shared_decisions;
  out.candidates = b.candidates;
  out.schedule_a = b.schedules[0];
  out.schedule_b = b.schedules[1];
  out.published_a = b.published[0];
  out.published_b = b.published[1];
  out.shared_checkpoints = b.shared_checkpoints[0];
  return out;
}

}  // namespace schedulers
}  // namespace viper
