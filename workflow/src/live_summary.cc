#include "live_summary.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace viper {
namespace workflow {
namespace internal {
namespace {

// Iterations done at `time_s` (since the common origin), from the timeline.
int64_t IterationsDoneAt(const std::vector<std::pair<double, int64_t>>& timeline, int64_t first, double time_s) {
  auto e = std::upper_bound(timeline.begin(), timeline.end(),
                            std::make_pair(time_s, std::numeric_limits<int64_t>::max()));
  return e == timeline.begin() ? first - 1 : std::prev(e)->second;
}

}  // namespace

std::map<uint64_t, size_t> SummarizeVersions(const std::vector<Published>& published,
                                             const std::vector<transports::Publisher::VersionReport>& reports,
                                             const std::map<int, ConsumerResults>& results, double t_warm,
                                             transports::Mode mode, LiveRun::Summary* summary) {
  LiveRun::Summary& s = *summary;
  std::map<uint64_t, size_t> index;
  std::map<uint64_t, double> start_of;  // version -> T_k (version 0: its actual publish start)
  for (const auto& p : published) {
    LiveRun::VersionStats v;
    v.version = p.version;
    v.iteration = p.iteration;
    v.model_iteration = p.model_iteration;
    v.checkpoint_s = p.version == 0 ? 0.0 : p.start_s;
    v.stall_s = p.report.stall_s;
    for (const auto& r : reports) {
      if (r.version != p.version) continue;
      v.snapshot_s = r.snapshot_s;
      v.transfer_s = r.transfer_s;
      v.notify_s = r.notify_s;
      v.superseded = r.superseded;
      v.bytes = r.bytes;
      v.written_bytes = r.written_bytes;
      v.encoding = r.encoding;
    }
    if (p.version > 0) s.total_stall_s += v.stall_s;
    index[v.version] = s.versions.size();
    start_of[p.version] = p.start_s;
    s.versions.push_back(v);
  }
  for (const auto& [rank, res] : results) {
    for (const auto& sw : res.swaps) {
      auto f = index.find(sw.version);
      if (f == index.end()) continue;
      auto& v = s.versions[f->second];
      const double latency = sw.time_s - t_warm - start_of[sw.version];
      const double load = sw.receive_s + sw.verify_s;
      v.delivered_to += 1;
      v.update_latency_s += latency;
      v.max_update_latency_s = std::max(v.max_update_latency_s, latency);
      v.load_s += load;
      const double sent = mode == transports::Mode::kSync ? v.stall_s : v.snapshot_s + v.transfer_s;
      v.discovery_s += std::max(0.0, latency - sent - load);
    }
  }
  const int reporting = static_cast<int>(results.size());
  double latency_sum = 0;
  int latency_n = 0;
  s.every_version_delivered = reporting == s.consumers;
  for (auto& v : s.versions) {
    if (v.delivered_to > 0) {
      v.update_latency_s /= v.delivered_to;
      v.load_s /= v.delivered_to;
      v.discovery_s /= v.delivered_to;
      if (v.version > 0) {
        latency_sum += v.update_latency_s;
        ++latency_n;
      }
    }
    if (!v.superseded && v.delivered_to < reporting) s.every_version_delivered = false;
  }
  if (latency_n > 0) s.mean_update_latency_s = latency_sum / latency_n;
  return index;
}

void SummarizeRequests(const std::map<int, ConsumerResults>& results, double t_warm,
                     const std::map<uint64_t, size_t>& index,
                     const std::vector<std::pair<double, int64_t>>& timeline, int64_t first,
                     LiveRun::Summary* summary) {
  LiveRun::Summary& s = *summary;
  double stale_sum = 0, bias_sum = 0, abs_sum = 0;
  int64_t judged = 0;
  for (const auto& [rank, res] : results) {
    for (const auto& r : res.requests) {
      LiveRun::Request q;
      q.consumer = rank;
      q.time_s = r.time_s - t_warm;
      if (q.time_s > s.training_end_s) continue;
      q.version = r.version;
      q.iteration = r.iteration;
      q.loss = r.loss;
      q.traffic_iteration = r.traffic_iteration;
      if (q.traffic_iteration >= 0 && !timeline.empty()) {
        q.true_iteration = IterationsDoneAt(timeline, first, r.time_s);
        const double d = static_cast<double>(q.traffic_iteration - q.true_iteration);
        bias_sum += d;
        abs_sum += std::fabs(d);
        ++judged;
      }
      auto f = index.find(q.version);
      q.staleness_s = q.time_s - (f == index.end() ? 0.0 : s.versions[f->second].checkpoint_s);
      stale_sum += q.staleness_s;
      s.cil += q.loss;
      if (f != index.end()) {
        s.versions[f->second].requests += 1;
        s.versions[f->second].loss_sum += q.loss;
      }
      s.request_log.push_back(q);
    }
  }
  s.requests = static_cast<int64_t>(s.request_log.size());
  if (s.requests > 0) s.mean_staleness_s = stale_sum / static_cast<double>(s.requests);
  if (judged > 0) {
    s.traffic_iteration_bias = bias_sum / static_cast<double>(judged);
    s.traffic_iteration_mae = abs_sum / static_cast<double>(judged);
  }
}

}  // namespace internal
}  // namespace workflow
}  // namespace viper
