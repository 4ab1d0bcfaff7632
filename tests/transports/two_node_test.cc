// The cross-node paths of the host tier, run for real on one machine: under
// two_nodes.sh ranks 0-1 are on node A and ranks 2-3 on node B (each node's
// daemon in its own UTS namespace; TCP between the nodes). The producer is
// rank 0. Every test is collective: all ranks run it, with roles by rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "fanout.h"    // internal: the plan the Publisher routes by
#include "mpi_test_util.h"
#include "mpi_link.h"  // internal: NodeName, kMaxRelayChildren
#include "test_util.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace {

using testing_util::HasPattern;
using testing_util::MakeModel;
using viper::testing_util::Rank;
using viper::testing_util::Size;


// Every rank's node name, in rank order.
std::vector<std::string> NodeNames() {
  char mine[64] = {0};
  internal::NodeName(mine, sizeof(mine));
  std::vector<char> all(sizeof(mine) * Size());
  MPI_Allgather(mine, sizeof(mine), MPI_CHAR, all.data(), sizeof(mine), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> names;
  for (int r = 0; r < Size(); ++r) names.emplace_back(&all[r * sizeof(mine)]);
  return names;
}

// Publishes `versions` models (seeds 20, 21, ...) with `options`; each
// consumer checks it ends with the last one intact and returns its source.
std::string PublishAndReceive(Publisher::Options pub, Subscriber::Options sub, int versions) {
  const uint64_t bytes = (2 << 20) + 12;
  std::string source;
  if (Rank() == 0) {
    auto p = Publisher::Create(pub);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return source;
    for (int v = 0; v < versions; ++v) {
      auto r = (*p)->Publish(MakeModel(bytes, 20 + v), 10 * v);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
    }
    EXPECT_TRUE((*p)->Close().ok());
    auto summary = (*p)->summary();
    EXPECT_TRUE(summary.lost_consumers.empty()) << summary.BriefReport();
    for (const auto& report : (*p)->Reports()) {
      if (report.superseded) continue;
      EXPECT_EQ(report.consumers.size(), static_cast<std::size_t>(Size() - 1)) << report.BriefReport();
      for (const auto& c : report.consumers) EXPECT_TRUE(c.delivered) << report.BriefReport();
    }
  } else {
    auto s = Subscriber::Create(sub);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return source;
    auto last = (*s)->WaitForVersion(versions - 1, 60);
    EXPECT_TRUE(last.ok()) << last.status().ToString() << " " << (*s)->summary().BriefReport();
    if (last.ok()) {
      EXPECT_EQ((*last)->state.metadata.version, static_cast<uint64_t>(versions - 1));
      EXPECT_TRUE(HasPattern((*last)->state, 20 + versions - 1));
      source = (*last)->source;
    }
    EXPECT_TRUE((*s)->WaitUntilDone(30));
    EXPECT_EQ((*s)->summary().rejected, 0u) << (*s)->summary().BriefReport();
  }
  return source;
}

Publisher::Options HostPublisher(HostProtocol protocol, Mode mode) {
  Publisher::Options o;
  o.tier = Tier::kHost;
  o.mode = mode;
  o.host_protocol = protocol;
  o.fanout = Fanout::kNode;
  o.chunk_bytes = 256 << 10;  // several chunks in each relay's pipeline
  o.max_inflight_chunks = 2;
  o.peer_timeout_s = 30;
  return o;
}

Subscriber::Options HostSubscriber(HostProtocol protocol) {
  Subscriber::Options o;
  o.tier = Tier::kHost;
  o.host_protocol = protocol;
  return o;
}

// The launch really is two nodes of two ranks each; without this every
// other test here would pass on one node too.
TEST(TwoNodes, RanksZeroOneOnOneNodeTwoThreeOnAnother) {
  ASSERT_EQ(Size(), 4) << "run under two_nodes.sh with 2 ranks per node";
  const auto names = NodeNames();
  EXPECT_EQ(names[0], names[1]);
  EXPECT_EQ(names[2], names[3]);
  EXPECT_NE(names[0], names[2]);
}

// The node plan the Publisher builds from the consumers' node names: rank 1
// (the producer's node) gets it directly; on node B rank 2 gets it from the
// producer and relays it to rank 3, so the bytes cross once per node.
TEST(TwoNodes, NodePlanRelaysThroughOneConsumerOnTheOtherNode) {
  ASSERT_EQ(Size(), 4);
  const auto names = NodeNames();
  const internal::FanoutPlan plan = internal::PlanFanout(Fanout::kNode, 2, internal::kMaxRelayChildren, 0,
                                                         names[0], {1, 2, 3}, {names[1], names[2], names[3]});
  EXPECT_EQ(plan.parent.at(1), 0);
  EXPECT_EQ(plan.parent.at(2), 0);
  EXPECT_EQ(plan.parent.at(3), 2);
}

// Two-sided with the node plan, sync and async: rank 3's bytes come through
// rank 2's relay over TCP.
TEST(TwoNodes, TwoSidedNodeFanoutDeliversThroughTheRelay) {
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    const std::string source = PublishAndReceive(HostPublisher(HostProtocol::kTwoSided, mode),
                                                 HostSubscriber(HostProtocol::kTwoSided), 3);
    if (Rank() > 0) {
      EXPECT_EQ(source, "rank 0") << ToString(mode);
    }
  }
}

// shm: rank 1 copies out of the producer's segment; node B cannot (another
// node), so ranks 2 and 3 get the two-sided stream, rank 3 through rank 2.
TEST(TwoNodes, ShmServesItsNodeAndStreamsToTheOther) {
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    const std::string source =
        PublishAndReceive(HostPublisher(HostProtocol::kShm, mode), HostSubscriber(HostProtocol::kShm), 3);
    if (Rank() == 1) {
      EXPECT_EQ(source, "rank 0 (shm)") << ToString(mode);
    } else if (Rank() >= 2) {
      EXPECT_EQ(source, "rank 0") << ToString(mode);
    }
  }
}

}  // namespace
}  // namespace transports
}  // namespace viper

int main(int argc, char** argv) {
  auto session = viper::transports::MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  session->reset();
  return rc;
}
