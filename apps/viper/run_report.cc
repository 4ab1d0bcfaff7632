#include "run_report.h"

#if VIPER_HAVE_MPI
#include <string>

namespace viper {
namespace cli {

nlohmann::json RunSummaryJson(const workflow::LiveRun::Summary& s) {
  nlohmann::json j;
  j["termination"] = s.termination;
  j["message"] = s.message;
  j["workload"] = s.workload;
  j["tier"] = s.tier;
  j["mode"] = s.mode;
  j["notify"] = s.notify;
  j["fanout"] = s.fanout;
  j["host_protocol"] = s.host_protocol;
  j["strategy"] = s.strategy;
  j["consumers"] = s.consumers;
  j["lost_consumers"] = s.lost_consumers;
  j["warmup_iterations"] = s.warmup_iterations;
  j["total_iterations"] = s.total_iterations;
  j["iterations_done"] = s.iterations_done;
  j["seconds_per_iteration"] = s.seconds_per_iteration;
  j["planned_stall_s"] = s.planned_stall_s;
  j["planned_delay_s"] = s.planned_delay_s;
  j["metric"] = s.metric;
  if (!s.online_metric.empty()) j["online_metric"] = s.online_metric;
  j["plan_report"] = s.plan_report;
  j["planning_s"] = s.planning_s;
  j["schedule"] = s.schedule;
  // As viper plan names it: the model each checkpoint published (parallel to schedule).
  j["published"] = s.published;
  j["republished"] = s.republished;
  j["keep_versions"] = s.keep_versions;
  j["kept_models"] = {{"evaluations", s.kept_evaluations},
                      {"reused", s.kept_reused},
                      {"peak", s.kept_peak},
                      {"peak_bytes", s.kept_peak_bytes}};
  j["remeasure"] = s.remeasure_beside ? "beside" : "pause";
  if (s.remeasure_beside) {
    double waited = 0;
    for (const auto& w : s.remeasure_waits) waited += w.second;
    j["remeasure_waits"] = {{"decisions", s.remeasure_waits.size()}, {"seconds", waited}, {"calm_points", s.calm_points}, {"followed_points", s.followed_points}};
  }
  if (s.keep_versions > 0) {
    j["kept_models"]["regime_ends"] = s.regime_ends;
    j["kept_models"]["copies"] = s.copies;
  }
  j["training_end_s"] = s.training_end_s;
  j["total_stall_s"] = s.total_stall_s;
  j["no_checkpoint_training_s"] = s.no_checkpoint_training_s;
  j["slowdown_fraction"] = s.slowdown_fraction;
  j["cil"] = s.cil;
  j["cil_per_consumer"] = s.cil_per_consumer;
  j["requests"] = s.requests;
  j["mean_staleness_s"] = s.mean_staleness_s ? nlohmann::json(*s.mean_staleness_s) : nlohmann::json();
  j["traffic_iteration_bias"] =
      s.traffic_iteration_bias ? nlohmann::json(*s.traffic_iteration_bias) : nlohmann::json();
  j["traffic_iteration_mae"] = s.traffic_iteration_mae ? nlohmann::json(*s.traffic_iteration_mae) : nlohmann::json();
  j["mean_update_latency_s"] =
      s.mean_update_latency_s ? nlohmann::json(*s.mean_update_latency_s) : nlohmann::json();
  j["every_version_delivered"] = s.every_version_delivered;
  for (const auto& v : s.versions) {
    j["versions"].push_back({{"version", v.version},
                             {"iteration", v.iteration},
                             {"model_iteration", v.model_iteration},
                             {"checkpoint_s", v.checkpoint_s},
                             {"stall_s", v.stall_s},
                             {"snapshot_s", v.snapshot_s},
                             {"transfer_s", v.transfer_s},
                             {"notify_s", v.notify_s},
                             {"discovery_s", v.discovery_s},
                             {"load_s", v.load_s},
                             {"update_latency_s", v.update_latency_s},
                             {"max_update_latency_s", v.max_update_latency_s},
                             {"delivered_to", v.delivered_to},
                             {"superseded", v.superseded},
                             {"requests", v.requests},
                             {"loss_sum", v.loss_sum},
                             {"bytes", v.bytes},
                             {"written_bytes", v.written_bytes},
                             {"encoding", v.encoding}});
  }
  return j;
}

void PrintRunSummary(const workflow::LiveRun::Summary& s, FILE* out) {
  std::fprintf(out, "%7s %9s %9s %9s %10s %9s %9s %10s %9s %8s %9s\n", "version", "iteration", "T_k s", "stall ms",
              "transfer ms", "load ms", "disc. ms", "update ms", "delivered", "requests", "mean loss");
  for (const auto& v : s.versions) {
    const std::string again =
        v.model_iteration != v.iteration ? " re-publishes the model of " + std::to_string(v.model_iteration) : "";
    std::fprintf(out, "%7llu %9lld %9.3f %9.2f %10.2f %9.2f %9.2f %10.2f %6d/%-2d %8lld %9.4f%s%s\n",
                static_cast<unsigned long long>(v.version), static_cast<long long>(v.iteration),
                v.checkpoint_s, v.stall_s * 1e3, v.transfer_s * 1e3, v.load_s * 1e3, v.discovery_s * 1e3,
                v.update_latency_s * 1e3, v.delivered_to, s.consumers, static_cast<long long>(v.requests),
                v.requests ? v.loss_sum / static_cast<double>(v.requests) : 0.0,
                v.superseded ? " superseded" : "", again.c_str());
  }
  std::fprintf(out, "\nW=%lld N=%lld tau=%.2f ms, plan: %s\n", static_cast<long long>(s.warmup_iterations),
              static_cast<long long>(s.total_iterations), s.seconds_per_iteration * 1e3,
              s.plan_report.c_str());
  std::fprintf(out, 
      "CIL %.2f over %lld requests (%.2f per consumer), mean staleness %.2f s, mean update latency %.2f ms\n",
      s.cil, static_cast<long long>(s.requests), s.cil_per_consumer, s.mean_staleness_s.value_or(0),
      s.mean_update_latency_s.value_or(0) * 1e3);
  std::fprintf(out, 
      "training %.2f s, stall %.3f s, planning %.3f s -> slowdown %.2f%% vs %.2f s without checkpoints\n",
      s.training_end_s, s.total_stall_s, s.planning_s, s.slowdown_fraction * 100, s.no_checkpoint_training_s);
  std::fprintf(out, "every version delivered to every consumer: %s\n", s.every_version_delivered ? "yes" : "no");
  if (s.keep_versions > 0) {
    std::fprintf(out, "re-publishing: %lld of %zu checkpoints re-published a kept model; kept models (the served "
                "one included) measured %lld times (%lld more from an equal traffic), at most %lld copies (%.2f MB)\n",
                static_cast<long long>(s.republished), s.schedule.size(), static_cast<long long>(s.kept_evaluations),
                static_cast<long long>(s.kept_reused), static_cast<long long>(s.kept_peak),
                static_cast<double>(s.kept_peak_bytes) / 1e6);
    // The copies the producer made for a regime's end (at most 20 named).
    std::fprintf(out, "regime ends (--keep-regime-ends %s): %zu copies of the model kept unpublished%s",
                 s.regime_ends.c_str(), s.copies.size(), s.copies.empty() ? "" : ", at iterations");
    for (size_t i = 0; i < s.copies.size() && i < 20; ++i) std::fprintf(out, " %lld", static_cast<long long>(s.copies[i]));
    if (s.copies.size() > 20) std::fprintf(out, " ... (%zu more)", s.copies.size() - 20);
    std::fprintf(out, "\n");
  }
  if (s.traffic_iteration_mae) {
    std::fprintf(out, "drifting traffic: consumers' estimate of the producer's iteration off by %.1f on average "
                "(bias %+.1f iterations)\n",
                *s.traffic_iteration_mae, *s.traffic_iteration_bias);
  }
  if (!s.message.empty()) std::fprintf(out, "%s\n", s.message.c_str());
}

}  // namespace cli
}  // namespace viper
#endif
