// The causal pair bound (staleness.h, SolveCausalPairBound): the best any
// planner that decides from what the producer measures can do on two runs
// that look the same until the traffic passes a point. Two backward passes
// (each run's best continuation from every checkpoint decided after that
// point) and one forward pass over the decisions both runs share.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
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
// The most slot costs the backward passes may take (about a minute here).
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

StatusOr<CausalPairBound> SolveCausalPairBound(const Problem& p, const StalenessSurface& sa,
                                               const StalenessSurface& sb, double diverge_traffic,
                                               const std::vector<double>& lambdas, int64_t max_candidates) {
  VIPER_RETURN_IF_ERROR(p.Validate());
  const int64_t W = p.warmup_iterations, N = p.total_iterations;
  VIPER_RETURN_IF_ERROR(sa.CheckCovers(W, N));
  VIPER_RETURN_IF_ERROR(sb.CheckCovers(W, N));
  if (sa.Diverged(W) || sb.Diverged(W)) {
    return InvalidArgumentError("the model at the end of the warm-up (iteration " + std::to_string(W) +
                                ") diverged on one of the runs: there is no version to serve");
  }
  if (lambdas.empty()) return InvalidArgumentError("no weights for the causal pair bound");
  for (double l : lambdas) {
    if (!(l > 0 && l < 1)) {
      return InvalidArgumentError("causal pair bound: weight " + std::to_string(l) + " is not inside (0, 1)");
    }
  }
  // The candidates: grid versions of either run inside (W, N] that diverged on neither.
  std::vector<int64_t> cand;
  for (const StalenessSurface* s : {&sa, &sb}) {
    for (int64_t v : s->Versions()) {
      if (v > W && v <= N && !sa.Diverged(v) && !sb.Diverged(v)) cand.push_back(v);
    }
  }
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  const int64_t C = static_cast<int64_t>(cand.size());
  if (C > max_candidates) {
    return InvalidArgumentError("causal pair bound: " + std::to_string(C) + " candidate versions; at most " +
                                std::to_string(max_candidates));
  }
  const int64_t kmax = std::min<int64_t>(C, p.MaxCheckpoints());
  // The backward passes cost about C^3 K / 6 slot costs each (a few
  // seconds at 10^7 on one core).
  const double work = std::pow(static_cast<double>(C) + 1, 3) * static_cast<double>(kmax) / 6.0;
  if (work > kMaxBoundWork) {
    char buf[200];
    std::snprintf(
        buf, sizeof(buf),
        "causal pair bound: %lld candidate versions and up to %lld checkpoints make about %.3g slot "
        "costs; at most %.3g (thin the tables' versions)",
        static_cast<long long>(C), static_cast<long long>(kmax), work, kMaxBoundWork);
    return InvalidArgumentError(buf);
  }
  // Each run's exact optimum, re-publishing searched as below.
  const double unlimited = std::numeric_limits<double>::infinity();
  VIPER_ASSIGN_OR_RETURN(SurfaceSolution oa, SolveOptimalOnSurface(p, sa, {}, max_candidates, unlimited));
  VIPER_ASSIGN_OR_RETURN(SurfaceSolution ob, SolveOptimalOnSurface(p, sb, {}, max_candidates, unlimited));
  if (!(oa.objective > 0 && ob.objective > 0)) {
    return InvalidArgumentError("causal pair bound: a run's optimum costs nothing; regret is undefined");
  }
  std::vector<int64_t> pos(static_cast<size_t>(C + 1));
  pos[0] = W;
  for (int64_t i = 0; i < C; ++i) pos[static_cast<size_t>(i + 1)] = cand[static_cast<size_t>(i)];
  auto at = [&](int64_t i) { return pos[static_cast<size_t>(i)]; };
  const double sigma = p.cost.stall_s, delta = p.cost.delay_s, price = p.price_per_slowdown_s * sigma;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t g = p.min_spacing_iterations;
  const bool wall = p.requests.traffic_clock == TrafficClock::kWall;
  Clock clock_a(p, sa), clock_b(p, sb);
  auto span = [&](int64_t a, int64_t b) {
    return clock_a.uniform() ? static_cast<double>(b - a) * p.seconds_per_iteration
                             : p.Elapsed(b) - p.Elapsed(a);
  };
  // Candidate i as the k-th checkpoint (i = 0, k = 0: the warm-up's model)
  // serving model u until checkpoint j (j < 0: to the window's end).
  auto slot_cost = [&](const StalenessSurface& s, Clock& clock, int64_t i, int64_t k, int64_t j,
                       int64_t u) -> StatusOr<double> {
    const double T = i == 0 ? 0.0 : p.CheckpointStart(at(i), k);
    if (j < 0) {
      const double R = p.WindowEnd(k);
      if (i > 0 && T + delta >= R) return inf;
      return SlotCost(p, s, clock, Slot{at(i), i == 0, T, std::nullopt}, at(u), R - T);
    }
    const double end = i == 0 ? span(W, at(j)) + delta : span(at(i), at(j)) + sigma + delta;
    return SlotCost(p, s, clock, Slot{at(i), i == 0, T, at(j)}, at(u), end);
  };
  auto servable = [&](int64_t j, int64_t k) { return p.CheckpointStart(at(j), k) + delta < p.WindowEnd(k); };
  auto spaced = [&](int64_t i, int64_t j) { return i == 0 || at(j) - at(i) >= g; };
  // Whether checkpoint j as the k-th is decided before the runs differ: the
  // traffic at its start (the producer's measurement there) is at or before
  // diverge_traffic.
  auto shared = [&](int64_t j, int64_t k) {
    if (j == 0) return true;
    const double traffic = wall ? std::min(static_cast<double>(N),
                                           clock_a.After(static_cast<double>(W), p.CheckpointStart(at(j), k)))
                                : static_cast<double>(at(j));
    return traffic <= diverge_traffic;
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
  auto backward = [&](const StalenessSurface& s, Clock& clock) -> StatusOr<Backward> {
    Backward b{std::vector<double>(static_cast<size_t>(C + 1) * K, inf),
               std::vector<int64_t>(static_cast<size_t>(C + 1) * K, -1),
               std::vector<int64_t>(static_cast<size_t>(C + 1) * K, 0)};
    for (int64_t k = kmax; k >= 1; --k) {
      for (int64_t j = C; j >= k; --j) {
        if (!servable(j, k)) continue;
        double best = inf;
        const size_t x = idx(j, k);
        for (int64_t u = 0; u <= j; ++u) {
          VIPER_ASSIGN_OR_RETURN(double c, slot_cost(s, clock, j, k, -1, u));
          if (c < best) {
            best = c;
            b.model[x] = u;
          }
        }
        for (int64_t j2 = j + 1; j2 <= C && k < kmax; ++j2) {
          const double rest = b.F[idx(j2, k + 1)];
          if (!spaced(j, j2) || !(rest + price < best)) continue;
          for (int64_t u = 0; u <= j; ++u) {
            VIPER_ASSIGN_OR_RETURN(double c, slot_cost(s, clock, j, k, j2, u));
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
  VIPER_ASSIGN_OR_RETURN(Backward Ba, backward(sa, clock_a));
  VIPER_ASSIGN_OR_RETURN(Backward Bb, backward(sb, clock_b));
  // From a shared checkpoint i (the k-th) publishing u: each run's best
  // continuation, its next checkpoint (-1: none) decided after the runs differ.
  auto after = [&](const StalenessSurface& s, Clock& clock, const Backward& B, int64_t i, int64_t k,
                   int64_t u, int64_t* next) -> StatusOr<double> {
    VIPER_ASSIGN_OR_RETURN(double best, slot_cost(s, clock, i, k, -1, u));
    *next = -1;
    for (int64_t j2 = i + 1; j2 <= C && k < kmax; ++j2) {
      const double rest = B.F[idx(j2, k + 1)];
      if (shared(j2, k + 1) || !spaced(i, j2) || !(rest + price < best)) continue;
      VIPER_ASSIGN_OR_RETURN(double c, slot_cost(s, clock, i, k, j2, u));
      if (c + price + rest < best) {
        best = c + price + rest;
        *next = j2;
      }
    }
    return best;
  };
  // The shared states and their costs per run, once: every (i, k) decided
  // before the runs differ, every model u it may publish.
  struct Shared {
    int64_t i, k;
    std::vector<double> after_a, after_b;  // by u
    std::vector<int64_t> next_a, next_b;   // by u: each run's next checkpoint
  };
  std::vector<Shared> states;
  for (int64_t k = 0; k <= kmax; ++k) {
    for (int64_t i = k == 0 ? 0 : k; i <= (k == 0 ? 0 : C); ++i) {
      if (i > 0 && (!servable(i, k) || !shared(i, k))) continue;
      Shared st{i, k, {}, {}, {}, {}};
      for (int64_t u = 0; u <= i; ++u) {
        int64_t na = -1, nb = -1;
        VIPER_ASSIGN_OR_RETURN(double ca, after(sa, clock_a, Ba, i, k, u, &na));
        VIPER_ASSIGN_OR_RETURN(double cb, after(sb, clock_b, Bb, i, k, u, &nb));
        st.after_a.push_back(ca);
        st.after_b.push_back(cb);
        st.next_a.push_back(na);
        st.next_b.push_back(nb);
      }
      states.push_back(std::move(st));
    }
  }
  // Shared segments (i, k-1) -> (j, k), by destination: where from, and
  // both runs' cost per model the source publishes.
  struct Incoming {
    size_t from;
    std::vector<double> cost_a, cost_b;  // by u
  };
  std::vector<std::vector<Incoming>> into(states.size());
  for (size_t x = 0; x < states.size(); ++x) {
    for (size_t y = 0; y < states.size(); ++y) {
      const Shared &from = states[x], &to = states[y];
      if (to.k != from.k + 1 || to.i <= from.i || !spaced(from.i, to.i)) continue;
      Incoming in{x, {}, {}};
      for (int64_t u = 0; u <= from.i; ++u) {
        VIPER_ASSIGN_OR_RETURN(double a, slot_cost(sa, clock_a, from.i, from.k, to.i, u));
        VIPER_ASSIGN_OR_RETURN(double b, slot_cost(sb, clock_b, from.i, from.k, to.i, u));
        in.cost_a.push_back(a);
        in.cost_b.push_back(b);
      }
      into[y].push_back(std::move(in));
    }
  }
  CausalPairBound out;
  out.objective_a = oa.objective;
  out.objective_b = ob.objective;
  out.candidates = C;
  out.shared_decisions = static_cast<int64_t>(states.size()) - 1;
  out.bound = -inf;
  for (double lambda : lambdas) {
    const double wa = lambda / oa.objective, wb = (1 - lambda) / ob.objective;
    // D[x]: the weighted cost of reaching shared state x (states are in
    // order of k, so every predecessor comes first).
    std::vector<double> D(states.size(), inf);
    std::vector<size_t> from(states.size(), 0);
    std::vector<int64_t> from_model(states.size(), 0);  // what the predecessor published
    D[0] = 0;
    double total = inf;
    size_t last = 0;
    int64_t last_model = 0;
    for (size_t y = 0; y < states.size(); ++y) {
      for (const Incoming& in : into[y]) {
        if (D[in.from] == inf) continue;
        for (size_t u = 0; u < in.cost_a.size(); ++u) {
          const double x = D[in.from] + wa * in.cost_a[u] + wb * in.cost_b[u] + (wa + wb) * price;
          if (x < D[y]) {
            D[y] = x;
            from[y] = in.from;
            from_model[y] = static_cast<int64_t>(u);
          }
        }
      }
      if (D[y] == inf) continue;
      for (size_t u = 0; u < states[y].after_a.size(); ++u) {
        const double x = D[y] + wa * states[y].after_a[u] + wb * states[y].after_b[u];
        if (x < total) {
          total = x;
          last = y;
          last_model = static_cast<int64_t>(u);
        }
      }
    }
    const double bound = total - 1.0;
    out.by_lambda.emplace_back(lambda, bound);
    if (!(bound > out.bound)) continue;
    out.bound = bound;
    out.lambda = lambda;
    // The schedules that reach it: the shared checkpoints (each with the
    // model it publishes), then each run's own.
    Schedule shared_schedule;
    std::vector<int64_t> shared_published;
    int64_t model = last_model;
    for (size_t y = last; y != 0; y = from[y]) {
      shared_schedule.push_back(at(states[y].i));
      shared_published.push_back(at(model));
      model = from_model[y];
    }
    std::reverse(shared_schedule.begin(), shared_schedule.end());
    std::reverse(shared_published.begin(), shared_published.end());
    auto rest = [&](const Backward& B, int64_t next, Schedule* schedule, std::vector<int64_t>* published) {
      *schedule = shared_schedule;
      *published = shared_published;
      for (int64_t j = next, k = states[last].k + 1; j >= 0; j = B.next[idx(j, k)], ++k) {
        schedule->push_back(at(j));
        published->push_back(at(B.model[idx(j, k)]));
      }
    };
    const size_t u = static_cast<size_t>(last_model);
    rest(Ba, states[last].next_a[u], &out.schedule_a, &out.published_a);
    rest(Bb, states[last].next_b[u], &out.schedule_b, &out.published_b);
    out.shared_checkpoints = static_cast<int64_t>(shared_schedule.size());
  }
  return out;
}

}  // namespace schedulers
}  // namespace viper
