// The fan-out planner (internal): who forwards a version to whom.
#include "fanout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace viper {
namespace transports {
namespace internal {
namespace {

using Ranks = std::vector<int>;

TEST(FanoutPlan, DirectSendsToEveryConsumerFromTheProducer) {
  const FanoutPlan p = PlanFanout(Fanout::kDirect, 2, 32, 0, "a", {1, 2, 3}, {"a", "b", "b"});
  EXPECT_EQ(p.ChildrenOf(0), (Ranks{1, 2, 3}));
  for (int r : {1, 2, 3}) {
    EXPECT_TRUE(p.ChildrenOf(r).empty());
    EXPECT_EQ(p.parent.at(r), 0);
  }
}

TEST(FanoutPlan, NodeOnOneNodeIsDirect) {
  const FanoutPlan p = PlanFanout(Fanout::kNode, 2, 32, 3, "a", {0, 1, 2, 4}, {"a", "a", "a", "a"});
  EXPECT_EQ(p.ChildrenOf(3), (Ranks{0, 1, 2, 4}));
  for (int r : {0, 1, 2, 4}) EXPECT_TRUE(p.ChildrenOf(r).empty());
}

TEST(FanoutPlan, NodeSendsOncePerOtherNode) {
  // Producer 0 on a; 1 on a; 2, 4, 5 on b; 3, 6 on c.
  const FanoutPlan p =
      PlanFanout(Fanout::kNode, 2, 32, 0, "a", {1, 2, 3, 4, 5, 6}, {"a", "b", "c", "b", "b", "c"});
  EXPECT_EQ(p.ChildrenOf(0), (Ranks{1, 2, 3}));  // its node-mate, then one leader per node
  EXPECT_EQ(p.ChildrenOf(2), (Ranks{4, 5}));
  EXPECT_EQ(p.ChildrenOf(3), (Ranks{6}));
  EXPECT_EQ(p.parent.at(5), 2);
  EXPECT_EQ(p.parent.at(6), 3);
  EXPECT_EQ(p.parent.at(1), 0);
}

TEST(FanoutPlan, CrowdedNodeIsATreeOfAtMostMaxChildren) {
  Ranks consumers;
  std::vector<std::string> hosts;
  for (int r = 1; r <= 8; ++r) {
    consumers.push_back(r);
    hosts.push_back("b");
  }
  const FanoutPlan p = PlanFanout(Fanout::kNode, 2, 3, 0, "a", consumers, hosts);
  EXPECT_EQ(p.ChildrenOf(0), (Ranks{1}));
  EXPECT_EQ(p.ChildrenOf(1), (Ranks{2, 3, 4}));
  EXPECT_EQ(p.ChildrenOf(2), (Ranks{5, 6, 7}));
  EXPECT_EQ(p.ChildrenOf(3), (Ranks{8}));
  for (const auto& [rank, children] : p.children) EXPECT_LE(children.size(), 3u);
}

TEST(FanoutPlan, TreeIsAHeapUnderTheProducer) {
  const FanoutPlan p = PlanFanout(Fanout::kTree, 2, 32, 0, "a", {1, 2, 3, 4, 5, 6}, {});
  EXPECT_EQ(p.ChildrenOf(0), (Ranks{1, 2}));
  EXPECT_EQ(p.ChildrenOf(1), (Ranks{3, 4}));
  EXPECT_EQ(p.ChildrenOf(2), (Ranks{5, 6}));
  EXPECT_EQ(p.Subtree(1), (Ranks{1, 3, 4}));
  // Arity 1 is a chain; the producer need not be rank 0.
  const FanoutPlan chain = PlanFanout(Fanout::kTree, 1, 32, 2, "a", {0, 1, 3}, {});
  EXPECT_EQ(chain.ChildrenOf(2), (Ranks{0}));
  EXPECT_EQ(chain.ChildrenOf(0), (Ranks{1}));
  EXPECT_EQ(chain.ChildrenOf(1), (Ranks{3}));
  EXPECT_EQ(chain.Subtree(2), (Ranks{2, 0, 1, 3}));
}

TEST(FanoutPlan, EveryConsumerHasExactlyOneSenderAndIsReached) {
  for (Fanout f : {Fanout::kNode, Fanout::kDirect, Fanout::kTree}) {
    for (int arity : {1, 2, 5}) {
      Ranks consumers;
      std::vector<std::string> hosts;
      for (int r = 1; r < 40; ++r) {
        consumers.push_back(r);
        hosts.push_back(std::string(1, static_cast<char>('a' + r % 4)));
      }
      const FanoutPlan p = PlanFanout(f, arity, 4, 0, "a", consumers, hosts);
      Ranks reached = p.Subtree(0);
      EXPECT_EQ(reached.size(), consumers.size() + 1) << ToString(f) << " arity " << arity;
      EXPECT_EQ(p.parent.size(), consumers.size());
    }
  }
}

TEST(FanoutEnum, RoundTrip) {
  for (Fanout f : {Fanout::kNode, Fanout::kDirect, Fanout::kTree}) {
    EXPECT_EQ(FanoutFromString(ToString(f)), f);
  }
  EXPECT_FALSE(FanoutFromString("ring").has_value());
}

}  // namespace
}  // namespace internal
}  // namespace transports
}  // namespace viper
