#include "fanout.h"

#include <algorithm>

namespace viper {
namespace transports {
namespace internal {
namespace {

// Arranges `nodes` (nodes[0] already placed, the others not) as a heap of
// `arity`: node j sends to nodes arity*j+1 ... arity*j+arity.
void Heap(const std::vector<int>& nodes, std::size_t arity, FanoutPlan* plan) {
  for (std::size_t i = 1; i < nodes.size(); ++i) {
    const int from = nodes[(i - 1) / arity];
    plan->children[from].push_back(nodes[i]);
    plan->parent[nodes[i]] = from;
  }
}

}  // namespace

const std::vector<int>& FanoutPlan::ChildrenOf(int rank) const {
  static const std::vector<int> kNone;
  auto it = children.find(rank);
  return it == children.end() ? kNone : it->second;
}

std::vector<int> FanoutPlan::Subtree(int rank) const {
  std::vector<int> out = {rank};
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (int c : ChildrenOf(out[i])) out.push_back(c);
  }
  return out;
}

FanoutPlan PlanFanout(Fanout fanout, int arity, int max_children, int producer, const std::string& producer_host,
                      const std::vector<int>& consumers, const std::vector<std::string>& hosts) {
  FanoutPlan plan;
  const std::size_t cap = static_cast<std::size_t>(std::max(1, max_children));
  if (fanout == Fanout::kTree) {
    std::vector<int> nodes = {producer};
    nodes.insert(nodes.end(), consumers.begin(), consumers.end());
    Heap(nodes, std::min<std::size_t>(std::max(1, arity), cap), &plan);
    return plan;
  }
  // kDirect, and kNode's consumers on the producer's node: straight from the
  // producer (it is the MPI library that copies, in parallel per receiver).
  std::vector<std::string> order;  // other nodes, by their lowest consumer rank
  std::map<std::string, std::vector<int>> by_node;
  for (std::size_t i = 0; i < consumers.size(); ++i) {
    const std::string& h = i < hosts.size() ? hosts[i] : producer_host;
    if (fanout == Fanout::kDirect || h == producer_host) {
      plan.children[producer].push_back(consumers[i]);
      plan.parent[consumers[i]] = producer;
      continue;
    }
    if (by_node.find(h) == by_node.end()) order.push_back(h);
    by_node[h].push_back(consumers[i]);
  }
  for (const std::string& h : order) {
    const std::vector<int>& members = by_node[h];
    plan.children[producer].push_back(members[0]);
    plan.parent[members[0]] = producer;
    Heap(members, cap, &plan);
  }
  return plan;
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
