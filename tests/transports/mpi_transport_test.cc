// Host tier and push notification over MPI. Run under mpirun with NP 2 and
// NP 3 (fan-out): rank 0 publishes, every other rank subscribes. Every test is
// collective: all ranks run it, with roles by rank.
#include <gtest/gtest.h>
#include <mpi.h>
#include <dirent.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "mpi_test_util.h"
#include "mpi_link.h"     // internal: the wire protocol, for a hand-made producer
#include "shm_segment.h"  // internal: the shm protocol's segment, likewise
#include "tier_host.h"    // internal: the host tier's announcement payload, likewise
#include "test_util.h"
#include "viper/config.h"
#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/transports/delta.h"
#include "viper/transports/device_memory.h"
#include "viper/transports/mpi_session.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

#if VIPER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace viper {
namespace transports {
namespace {

using testing_util::HasPattern;
using testing_util::MakeModel;
using viper::testing_util::Rank;
using viper::testing_util::Size;


// A temp directory made on rank 0, its name sent to all ranks.
std::string SharedTempDir() {
  char name[256] = {0};
  if (Rank() == 0) {
    std::string d = testing_util::MakeTempDir();
    std::snprintf(name, sizeof(name), "%s", d.c_str());
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
  return name;
}

struct Scenario {
  Publisher::Options pub;
  Subscriber::Options sub;
};

Scenario HostScenario(Mode mode, HostProtocol protocol) {
  Scenario s;
  s.pub.tier = Tier::kHost;
  s.pub.mode = mode;
  s.pub.host_protocol = protocol;
  s.pub.peer_timeout_s = 20;
  s.sub.tier = Tier::kHost;
  s.sub.host_protocol = protocol;
  s.sub.window_slot_bytes = 8 << 20;
  return s;
}

// Publishes `versions` models of `bytes` (seeds 10, 11, ...); subscribers
// check they end with the last one, byte for byte.
void RunFanOut(const Scenario& s, uint64_t bytes, int versions) {
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    for (int v = 0; v < versions; ++v) {
      auto r = (*pub)->Publish(MakeModel(bytes, 10 + v), 100 * v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (s.pub.mode == Mode::kSync) {
        // Sync: every consumer has acknowledged before Publish returns.
        ASSERT_EQ(r->consumers.size(), static_cast<std::size_t>(Size() - 1)) << r->BriefReport();
        for (const auto& c : r->consumers) {
          EXPECT_TRUE(c.delivered) << r->BriefReport();
          // Every version is a new model (another seed): nothing to diff, full.
          EXPECT_EQ(c.bytes_moved, r->bytes) << "rank " << c.rank << ": " << r->BriefReport();
        }
      }
    }
    ASSERT_TRUE((*pub)->Close().ok());
    auto summary = (*pub)->summary();
    EXPECT_TRUE(summary.lost_consumers.empty()) << summary.BriefReport();
    EXPECT_EQ(summary.sent + summary.superseded, static_cast<uint64_t>(versions));
    auto reports = (*pub)->Reports();
    ASSERT_FALSE(reports.empty());
    EXPECT_TRUE(reports.back().sent) << reports.back().BriefReport();
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto last = (*sub)->WaitForVersion(versions - 1, 60);
    ASSERT_TRUE(last.ok()) << last.status().ToString() << " " << (*sub)->summary().BriefReport();
    EXPECT_EQ((*last)->state.metadata.version, static_cast<uint64_t>(versions - 1));
    EXPECT_EQ((*last)->state.metadata.iteration, 100 * (versions - 1));
    EXPECT_TRUE(HasPattern((*last)->state, 10 + versions - 1));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    auto summary = (*sub)->summary();
    EXPECT_TRUE(summary.producer_finished) << summary.BriefReport();
    EXPECT_EQ(summary.rejected, 0u) << summary.BriefReport();
  }
}

TEST(MpiHost, TwoSidedSyncFanOut) {
  RunFanOut(HostScenario(Mode::kSync, HostProtocol::kTwoSided), 3 << 20, 3);
}

TEST(MpiHost, OneSidedSyncFanOut) {
  RunFanOut(HostScenario(Mode::kSync, HostProtocol::kOneSided), 3 << 20, 3);
}

TEST(MpiHost, ShmSyncFanOut) {
  RunFanOut(HostScenario(Mode::kSync, HostProtocol::kShm), 3 << 20, 3);
}

TEST(MpiHost, ShmAsyncSupersedesAndDeliversNewest) {
  RunFanOut(HostScenario(Mode::kAsync, HostProtocol::kShm), 4 << 20, 6);
}

TEST(MpiHost, ShmConsumersThatDoNotMapTheSegmentGetTheStreamInstead) {
  // The last rank stands for a consumer on another node (allow_shm = false):
  // it receives each version over MPI, alone (np 2) or while the other
  // consumer copies it out of shared memory (np 3).
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    Scenario s = HostScenario(mode, HostProtocol::kShm);
    const bool over_mpi = Rank() == Size() - 1;
    s.sub.allow_shm = !over_mpi;
    if (Rank() == 0) {
      auto pub = Publisher::Create(s.pub);
      ASSERT_TRUE(pub.ok()) << pub.status().ToString();
      for (int v = 0; v < 3; ++v) {
        auto r = (*pub)->Publish(MakeModel((2 << 20) + 12, 30 + v), v);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
      }
      ASSERT_TRUE((*pub)->Close().ok());
      EXPECT_TRUE((*pub)->summary().lost_consumers.empty()) << (*pub)->summary().BriefReport();
      for (const auto& r : (*pub)->Reports()) {
        if (!r.sent) continue;
        ASSERT_EQ(r.consumers.size(), static_cast<std::size_t>(Size() - 1)) << r.BriefReport();
        for (const auto& c : r.consumers) EXPECT_TRUE(c.delivered) << r.BriefReport();
      }
    } else {
      auto sub = Subscriber::Create(s.sub);
      ASSERT_TRUE(sub.ok()) << sub.status().ToString();
      auto last = (*sub)->WaitForVersion(2, 60);
      ASSERT_TRUE(last.ok()) << last.status().ToString();
      EXPECT_TRUE(HasPattern((*last)->state, 32));
      EXPECT_EQ((*last)->source.find("(shm)") == std::string::npos, over_mpi) << (*last)->source;
      EXPECT_TRUE((*sub)->WaitUntilDone(30));
      EXPECT_EQ((*sub)->summary().rejected, 0u) << (*sub)->summary().BriefReport();
    }
  }
}

// Names of the shared-memory segments of this job's producers in /dev/shm.
std::vector<std::string> ViperSegments() {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "viper-", 6) == 0 && std::strstr(e->d_name, "-r0-")) out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// Segments linked now that were not in `before`. /dev/shm is shared with
// every MPI job on the machine (CTest runs two at a time): another job's
// segment is linked only between its creation and its consumers opening it,
// and one that disappears is no concern, so a name counts only when it stays
// new for a second; a leftover of this job stays for good.
std::vector<std::string> NewSegments(const std::vector<std::string>& before) {
  std::vector<std::string> extra;
  for (int attempt = 0; attempt < 20; ++attempt) {
    extra.clear();
    for (const std::string& name : ViperSegments()) {
      if (std::find(before.begin(), before.end(), name) == before.end()) extra.push_back(name);
    }
    if (extra.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return extra;
}

// /dev/shm smaller than the segment (as in a container with Docker's
// default 64 MB): the producer cannot reserve the segment, warns, and sends
// every version two-sided; nothing is left in /dev/shm. Runs only under
// small_dev_shm.sh (CTest transports.mpi_small_dev_shm), which gives the job
// its own 16 MiB /dev/shm and sets VIPER_TEST_SMALL_DEV_SHM.
TEST(MpiHost, ShmWithoutRoomInDevShmFallsBackToTwoSided) {
  if (std::getenv("VIPER_TEST_SMALL_DEV_SHM") == nullptr) {
    GTEST_SKIP() << "needs a small /dev/shm: run under tests/transports/small_dev_shm.sh";
  }
  constexpr uint64_t kModelBytes = 24 << 20;
  struct statvfs fs;
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  ASSERT_LT(static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize, kModelBytes) << "/dev/shm is not small here";
  for (bool staged : {true, false}) {  // segment asked for in Create / at the first publish
    SCOPED_TRACE(staged ? "staging_bytes set" : "no staging_bytes");
    Scenario s = HostScenario(Mode::kSync, HostProtocol::kShm);
    if (staged) s.pub.staging_bytes = kModelBytes + (1 << 20);
    if (Rank() == 0) {
      auto pub = Publisher::Create(s.pub);
      ASSERT_TRUE(pub.ok()) << pub.status().ToString();
      for (int v = 0; v < 2; ++v) {
        auto r = (*pub)->Publish(MakeModel(kModelBytes, 40 + v), v);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        ASSERT_EQ(r->consumers.size(), static_cast<std::size_t>(Size() - 1)) << r->BriefReport();
        for (const auto& c : r->consumers) EXPECT_TRUE(c.delivered) << r->BriefReport();
      }
      ASSERT_TRUE((*pub)->Close().ok());
      EXPECT_TRUE(ViperSegments().empty()) << "a segment was left in /dev/shm";
    } else {
      auto sub = Subscriber::Create(s.sub);
      ASSERT_TRUE(sub.ok()) << sub.status().ToString();
      auto last = (*sub)->WaitForVersion(1, 60);
      ASSERT_TRUE(last.ok()) << last.status().ToString();
      EXPECT_TRUE(HasPattern((*last)->state, 41));
      EXPECT_EQ((*last)->source.find("(shm)"), std::string::npos) << (*last)->source;
      EXPECT_TRUE((*sub)->WaitUntilDone(30));
      EXPECT_EQ((*sub)->summary().rejected, 0u) << (*sub)->summary().BriefReport();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(MpiHost, ShmModelThatGrowsGetsANewSegmentAndNoneIsLeftBehind) {
  // 1 MB, then 3 MB (more than the first segment's 1/8 headroom; async: than
  // the staging segment), then 1 MB again: the consumers map the new segment
  // and keep serving; once each version is through, no segment's name is
  // left in /dev/shm. Sync copies into one segment; async stages in two.
  const uint64_t sizes[] = {1 << 20, 3 << 20, 1 << 20};
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    Scenario s = HostScenario(mode, HostProtocol::kShm);
    if (Rank() == 0) {
      const std::vector<std::string> before = ViperSegments();
      auto pub = Publisher::Create(s.pub);
      ASSERT_TRUE(pub.ok()) << pub.status().ToString();
      for (int v = 0; v < 3; ++v) {
        auto r = (*pub)->Publish(MakeModel(sizes[v], 20 + v), v);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        ASSERT_TRUE((*pub)->Flush().ok());
        EXPECT_EQ(NewSegments(before), std::vector<std::string>{}) << "a segment is still linked after version " << v;
      }
      ASSERT_TRUE((*pub)->Close().ok());
      const auto reports = (*pub)->Reports();
      ASSERT_EQ(reports.size(), 3u);
      for (const auto& r : reports) {
        ASSERT_EQ(r.consumers.size(), static_cast<std::size_t>(Size() - 1)) << r.BriefReport();
        for (const auto& c : r.consumers) EXPECT_TRUE(c.delivered) << r.BriefReport();
      }
    } else {
      auto sub = Subscriber::Create(s.sub);
      ASSERT_TRUE(sub.ok()) << sub.status().ToString();
      for (int v = 0; v < 3; ++v) {
        auto got = (*sub)->WaitForVersion(v, 60);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        if ((*got)->state.metadata.version == static_cast<uint64_t>(v)) {
          EXPECT_TRUE(HasPattern((*got)->state, 20 + v));
          EXPECT_NE((*got)->source.find("(shm)"), std::string::npos) << (*got)->source;
        }
      }
      EXPECT_TRUE((*sub)->WaitUntilDone(30));
      EXPECT_EQ((*sub)->summary().rejected, 0u) << (*sub)->summary().BriefReport();
    }
  }
}

TEST(MpiHost, AsyncSupersedesAndDeliversNewest) {
  RunFanOut(HostScenario(Mode::kAsync, HostProtocol::kTwoSided), 4 << 20, 6);
}

TEST(MpiHost, SmallChunksExerciseTheLargeMessagePath) {
  // Versions over 2 GiB go out in chunks of chunk_bytes; a 4 KiB chunk on a
  // 1 MB model takes the same path with ~250 chunks and a ragged last one.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  s.pub.chunk_bytes = 4096;
  s.pub.max_inflight_chunks = 4;
  RunFanOut(s, (1 << 20) + 4, 2);
  Scenario o = HostScenario(Mode::kSync, HostProtocol::kOneSided);
  o.pub.chunk_bytes = 4096;
  RunFanOut(o, (1 << 20) + 4, 2);
}

// Fan-out through relays: every consumer ends with the same verified bytes
// whichever rank forwarded them (at np 3 with arity 1, rank 1 forwards every
// message to rank 2; fanout node is direct on one node).
class MpiFanout : public ::testing::TestWithParam<std::tuple<Fanout, int, Mode>> {};

TEST_P(MpiFanout, EveryConsumerGetsEveryVersionIntact) {
  const auto [fanout, arity, mode] = GetParam();
  Scenario s = HostScenario(mode, HostProtocol::kTwoSided);
  s.pub.fanout = fanout;
  s.pub.tree_arity = arity;
  s.pub.chunk_bytes = 256 << 10;  // several chunks in the pipeline
  s.pub.max_inflight_chunks = 2;
  RunFanOut(s, (3 << 20) + 12, mode == Mode::kSync ? 3 : 5);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, MpiFanout,
    ::testing::Values(std::make_tuple(Fanout::kTree, 1, Mode::kSync), std::make_tuple(Fanout::kTree, 2, Mode::kSync),
                      std::make_tuple(Fanout::kTree, 1, Mode::kAsync),
                      std::make_tuple(Fanout::kDirect, 2, Mode::kSync),
                      std::make_tuple(Fanout::kNode, 2, Mode::kAsync)));

// For a rank that speaks the wire protocol itself: its private
// communicator and the session id, as Publisher/Subscriber::Create get
// them (collective with the other ranks' Create).
StatusOr<uint64_t> JoinByHand(MPI_Comm* comm) {
  if (MPI_Comm_dup(MPI_COMM_WORLD, comm) != MPI_SUCCESS) return AbortedError("MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  return internal::AgreeOnSession(*comm, 0);
}

// For a rank that speaks the wire protocol itself and stopped receiving:
// takes in what the producer (rank 0) still sends it (freed sends), so that
// nothing is left half-sent at MPI_Finalize; returns after 0.5 s of quiet.
void DrainProducerData(MPI_Comm comm) {
  for (int quiet = 0; quiet < 50;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(0, internal::kTagData, comm, &flag, &st);
    if (!flag) {
      ++quiet;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<std::byte> sink(static_cast<std::size_t>(n));
    MPI_Recv(sink.data(), n, MPI_BYTE, 0, internal::kTagData, comm, MPI_STATUS_IGNORE);
    quiet = 0;
  }
}

TEST(MpiFaults, RelayThatStopsForwardingCostsItsReceiversOneVersionOnly) {
  // np 3, a chain 0 -> 1 -> 2. Rank 1 speaks the wire protocol itself: it
  // accepts version 0, takes its route, then never receives or forwards.
  // The producer drops rank 1 after peer_timeout_s; rank 2 reports version
  // 0 as not delivered (Unavailable, no rejection of its producer), stays
  // subscribed, and gets version 1 straight from the producer.
  if (Size() != 3) GTEST_SKIP() << "runs at np 3 (a chain of two consumers)";
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  s.pub.fanout = Fanout::kTree;
  s.pub.tree_arity = 1;
  s.pub.peer_timeout_s = 4.0;
  s.pub.chunk_bytes = 1 << 20;  // rendezvous messages: they wait for a receive
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    auto r0 = (*pub)->Publish(MakeModel(4 << 20, 50), 0);
    ASSERT_TRUE(r0.ok()) << r0.status().ToString();
    auto r1 = (*pub)->Publish(MakeModel(4 << 20, 51), 1);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    bool relay_lost = false, receiver_told = false;
    for (const auto& c : r0->consumers) {
      if (c.rank == 1) relay_lost = c.lost;
      if (c.rank == 2) receiver_told = !c.lost && !c.delivered && c.message.find("Unavailable") != std::string::npos;
    }
    EXPECT_TRUE(relay_lost) << r0->BriefReport();
    EXPECT_TRUE(receiver_told) << r0->BriefReport();
    ASSERT_EQ(r1->consumers.size(), 1u) << r1->BriefReport();
    EXPECT_EQ(r1->consumers[0].rank, 2);
    EXPECT_TRUE(r1->consumers[0].delivered) << r1->BriefReport();
    EXPECT_EQ((*pub)->summary().lost_consumers, std::vector<int>{1});
    ASSERT_TRUE((*pub)->Close().ok());
    MPI_Barrier(MPI_COMM_WORLD);  // closed
    MPI_Barrier(MPI_COMM_WORLD);  // rank 1 has drained
  } else if (Rank() == 1) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    internal::Announce a;
    MPI_Recv(&a, sizeof(a), MPI_BYTE, 0, internal::kTagAnnounce, comm, MPI_STATUS_IGNORE);
    auto payload = internal::DecodeHostPayload(a);
    ASSERT_TRUE(payload.ok()) << payload.status().ToString();
    EXPECT_EQ(payload->routed, 1u);
    internal::Ready ready;
    ready.session = *session;
    ready.version = a.version;
    ready.accept = 1;
    ASSERT_TRUE(internal::SendPod(comm, 0, internal::kTagReady, ready, 30).ok());
    internal::Route route;
    MPI_Recv(&route, sizeof(route), MPI_BYTE, 0, internal::kTagRoute, comm, MPI_STATUS_IGNORE);
    EXPECT_EQ(route.parent, 0);
    ASSERT_EQ(route.children_count, 1);
    EXPECT_EQ(route.children[0], 2);
    MPI_Barrier(MPI_COMM_WORLD);  // the producer has closed
    DrainProducerData(comm);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto v = (*sub)->WaitForVersion(1, 60);
    ASSERT_TRUE(v.ok()) << v.status().ToString() << "; " << (*sub)->summary().BriefReport();
    EXPECT_TRUE(HasPattern((*v)->state, 51));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    auto rejections = (*sub)->Rejections();
    ASSERT_EQ(rejections.size(), 1u) << (*sub)->summary().BriefReport();
    EXPECT_EQ(rejections[0].version, 0u);
    EXPECT_EQ(rejections[0].status.code(), StatusCode::kUnavailable) << rejections[0].status.ToString();
    EXPECT_TRUE((*sub)->summary().producer_finished) << (*sub)->summary().BriefReport();
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(MpiHost, TensorsOfOneArenaAreSentAcrossTheirBoundaries) {
  // Tensors that are views into one allocation are sent as one range, so
  // chunks (4 KiB here) straddle tensor boundaries; sync and async alike.
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    Scenario s = HostScenario(mode, HostProtocol::kTwoSided);
    s.pub.chunk_bytes = 4096;
    s.pub.max_inflight_chunks = 3;
    if (Rank() == 0) {
      auto pub = Publisher::Create(s.pub);
      ASSERT_TRUE(pub.ok()) << pub.status().ToString();
      const ModelState spread = MakeModel((1 << 20) + 12, 50);
      uint64_t total = 0;
      for (const Tensor& t : spread.tensors()) total += t.size_bytes;
      auto arena = std::shared_ptr<std::byte[]>(new std::byte[total]);
      ModelState packed;
      uint64_t off = 0;
      for (const Tensor& t : spread.tensors()) {
        Tensor v = t;
        v.owner = std::shared_ptr<void>(arena, arena.get());
        v.data = arena.get() + off;
        std::memcpy(v.data, t.data, t.size_bytes);
        off += t.size_bytes;
        ASSERT_TRUE(packed.Add(std::move(v)).ok());
      }
      auto r = (*pub)->Publish(packed, 1);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_TRUE((*pub)->Close().ok());
      auto reports = (*pub)->Reports();
      ASSERT_EQ(reports.size(), 1u);
      ASSERT_EQ(reports[0].consumers.size(), static_cast<std::size_t>(Size() - 1))
          << reports[0].BriefReport();
      for (const auto& c : reports[0].consumers) EXPECT_TRUE(c.delivered) << reports[0].BriefReport();
    } else {
      auto sub = Subscriber::Create(s.sub);
      ASSERT_TRUE(sub.ok()) << sub.status().ToString();
      auto v = (*sub)->WaitForVersion(0, 60);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      EXPECT_TRUE(HasPattern((*v)->state, 50));
      EXPECT_TRUE((*sub)->WaitUntilDone(30));
      EXPECT_EQ((*sub)->summary().rejected, 0u);
    }
  }
}

// A version image made by hand, for the tests that speak the wire protocol
// themselves: header with the checksum, then the data (1 MB, MakeModel's
// pattern with `seed`); with `corrupt`, one data byte flipped after the
// checksum was taken.
struct HandMadeImage {
  Status status;
  std::vector<std::byte> bytes;
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;
};
HandMadeImage MakeImage(uint64_t version, uint32_t seed, bool corrupt) {
  HandMadeImage out;
  ModelState m = MakeModel(1 << 20, seed);
  m.metadata.version = version;
  m.metadata.iteration = static_cast<int64_t>(version);
  auto image = safetensors::Serialize(m);
  if (!image.ok()) {
    out.status = image.status();
    return out;
  }
  out.bytes = std::move(*image);
  uint64_t json_bytes = 0;
  for (int i = 0; i < 8; ++i) json_bytes |= std::to_integer<uint64_t>(out.bytes[i]) << (8 * i);
  out.header_bytes = 8 + json_bytes;
  out.data_bytes = out.bytes.size() - out.header_bytes;
  if (corrupt) out.bytes[out.header_bytes + out.data_bytes / 2] ^= std::byte{1};
  return out;
}

// Receives every consumer's acknowledgement of hand-made version `version`:
// rejected as DataLoss when it was `corrupt`, else servable.
void ExpectAcks(MPI_Comm comm, uint64_t version, bool corrupt) {
  for (int r = 1; r < Size(); ++r) {
    internal::Ack ack;
    MPI_Recv(&ack, sizeof(ack), MPI_BYTE, r, internal::kTagAck, comm, MPI_STATUS_IGNORE);
    EXPECT_EQ(ack.version, version);
    EXPECT_EQ(ack.ok, corrupt ? 0 : 1);
    if (corrupt) {
      EXPECT_EQ(static_cast<StatusCode>(ack.code), StatusCode::kDataLoss);
    }
  }
}

// The announcement of hand-made version `version` over `protocol`, with the
// host tier's payload `p` (its header_bytes set here).
internal::Announce MakeAnnounce(uint64_t session, HostProtocol protocol, uint64_t version,
                                const HandMadeImage& made, internal::HostPayload p = {}) {
  internal::Announce a;
  a.session = session;
  a.kind = internal::kAnnounceHost;
  a.protocol = static_cast<uint32_t>(protocol);
  a.version = version;
  a.iteration = static_cast<int64_t>(version);
  a.image_bytes = made.bytes.size();
  p.header_bytes = made.header_bytes;
  internal::SetTierPayload(p, &a);
  a.sent_wtime = MonotonicSeconds();
  return a;
}

// Rank 0 as a hand-made two-sided producer: sends version `version`
// (pattern `seed`, one data byte flipped when `corrupt`) to every other rank
// as the wire protocol says (plan, data chunks, header), after `spoil` has
// had its way with the announcement. Expects every consumer to answer
// Ready with `accept` and to acknowledge it as servable unless `rejected`.
void StreamMadeByHand(MPI_Comm comm, uint64_t session, uint64_t version, HandMadeImage made,
                      const std::function<void(internal::Announce*)>& spoil, bool accept, bool rejected);
void StreamByHand(MPI_Comm comm, uint64_t session, uint64_t version, uint32_t seed, bool corrupt,
                  const std::function<void(internal::Announce*)>& spoil, bool accept, bool rejected) {
  HandMadeImage made = MakeImage(version, seed, corrupt);
  ASSERT_TRUE(made.status.ok()) << made.status.ToString();
  StreamMadeByHand(comm, session, version, std::move(made), spoil, accept, rejected);
}

// StreamByHand's wire half, for any hand-made image: consumers that accept
// must answer on the MPI (two-sided) path.
void StreamMadeByHand(MPI_Comm comm, uint64_t session, uint64_t version, HandMadeImage made,
                      const std::function<void(internal::Announce*)>& spoil, bool accept, bool rejected) {
  std::vector<std::byte>* image = &made.bytes;
  const uint64_t header_bytes = made.header_bytes, data_bytes = made.data_bytes;
  std::vector<internal::Chunk> chunks(1);
  internal::AppendChunks(image->data() + header_bytes, data_bytes, 256 << 10, &chunks);
  std::vector<uint64_t> plan;
  for (std::size_t i = 1; i < chunks.size(); ++i) plan.push_back(chunks[i].size);
  chunks[0] = {reinterpret_cast<std::byte*>(plan.data()), plan.size() * sizeof(uint64_t)};
  chunks.push_back({image->data(), header_bytes});
  internal::HostPayload payload;
  payload.data_chunks = plan.size();
  internal::Announce a = MakeAnnounce(session, HostProtocol::kTwoSided, version, made, payload);
  if (spoil) spoil(&a);
  std::vector<internal::ChunkedTransfer> transfers;
  for (int r = 1; r < Size(); ++r) {
    ASSERT_TRUE(internal::SendPod(comm, r, internal::kTagAnnounce, a, 30).ok());
    internal::Ready ready;
    MPI_Recv(&ready, sizeof(ready), MPI_BYTE, r, internal::kTagReady, comm, MPI_STATUS_IGNORE);
    ASSERT_EQ(ready.accept, accept ? 1 : 0) << "version " << version;
    if (!accept) continue;
    ASSERT_EQ(ready.path, internal::kPathMpi) << "version " << version;
    internal::ChunkedTransfer t;
    t.peer = r;
    t.send = true;
    t.chunks = &chunks;
    transfers.push_back(std::move(t));
  }
  internal::RunChunked(comm, 4, &transfers, MonotonicSeconds() + 20);
  for (const auto& t : transfers) ASSERT_FALSE(t.failed);
  ExpectAcks(comm, version, rejected);
}

// Rank 0 as a hand-made producer: goodbye to every other rank, then frees `comm`.
void SayGoodbyeByHand(MPI_Comm* comm, uint64_t session) {
  internal::Announce bye;
  bye.session = session;
  bye.kind = internal::kAnnounceBye;
  for (int r = 1; r < Size(); ++r)
    ASSERT_TRUE(internal::SendPod(*comm, r, internal::kTagAnnounce, bye, 30).ok());
  MPI_Comm_free(comm);
}

TEST(MpiHost, StreamedVersionWithCorruptDataIsRejectedNotServed) {
  // Rank 0 speaks the two-sided wire protocol (mpi_link.h) itself: version 0
  // has one data byte flipped after its checksum was taken, version 1 is
  // intact. Consumers hash the data as it lands, reject version 0 as
  // DataLoss without serving it, and serve version 1.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  if (Rank() == 0) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    for (uint64_t v = 0; v < 2 && !HasFatalFailure(); ++v) {
      StreamByHand(comm, *session, v, static_cast<uint32_t>(40 + v), /*corrupt=*/v == 0, nullptr, /*accept=*/true,
                   /*rejected=*/v == 0);
    }
    SayGoodbyeByHand(&comm, *session);
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto v = (*sub)->WaitForVersion(1, 30);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(HasPattern((*v)->state, 41));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    auto rejections = (*sub)->Rejections();
    ASSERT_EQ(rejections.size(), 1u);
    EXPECT_EQ(rejections[0].version, 0u);
    EXPECT_EQ(rejections[0].status.code(), StatusCode::kDataLoss) << rejections[0].status.ToString();
    EXPECT_NE(rejections[0].status.message().find("checksum mismatch"), std::string::npos)
        << rejections[0].status.ToString();
  }
}

TEST(MpiHost, AnnouncementWithABadTierPayloadIsRefusedNotRead) {
  // Rank 0 speaks the wire protocol itself. Version 0's host payload claims
  // more bytes than an announcement holds, version 1's is cut short, and
  // version 2's shm segment name is not terminated: each is refused (a Ready
  // with accept 0, then a DataLoss acknowledgement) by the host tier's
  // decoder before any receive path reads it. Version 3 is intact: served.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  if (Rank() == 0) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    const std::function<void(internal::Announce*)> spoil[] = {
        [](internal::Announce* a) { a->payload_bytes = internal::kMaxTierPayloadBytes + 1; },
        [](internal::Announce* a) { a->payload_bytes = sizeof(internal::HostPayload) - 1; },
        [](internal::Announce* a) {
          internal::HostPayload p = *internal::DecodeHostPayload(*a);
          std::memset(p.shm_name, 'x', sizeof(p.shm_name));
          internal::SetTierPayload(p, a);
        },
        nullptr};
    for (uint64_t v = 0; v < 4 && !HasFatalFailure(); ++v) {
      StreamByHand(comm, *session, v, static_cast<uint32_t>(60 + v), /*corrupt=*/false, spoil[v],
                   /*accept=*/v == 3, /*rejected=*/v != 3);
    }
    SayGoodbyeByHand(&comm, *session);
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto v = (*sub)->WaitForVersion(3, 30);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(HasPattern((*v)->state, 63));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    auto rejections = (*sub)->Rejections();
    ASSERT_EQ(rejections.size(), 3u);
    const char* why[] = {"more than an announcement holds", "(truncated)", "not terminated"};
    for (uint64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(rejections[i].version, i);
      EXPECT_EQ(rejections[i].status.code(), StatusCode::kDataLoss) << rejections[i].status.ToString();
      EXPECT_NE(rejections[i].status.message().find(why[i]), std::string::npos) << rejections[i].status.ToString();
    }
  }
}

TEST(MpiHost, ShmVersionWithCorruptDataIsRejectedAndAStalledOneLosesTheProducer) {
  // Rank 0 speaks the shm protocol (shm_segment.h) itself. Version 0 has one
  // data byte flipped after its checksum was taken: rejected as DataLoss,
  // never served. Version 1 is intact and published in two steps with a
  // pause (consumers first see half of it): served. Version 2
  // stops half-way: the consumers give up after transfer_timeout_s, treat the
  // producer as lost and keep serving version 1.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kShm);
  s.sub.transfer_timeout_s = 2;
  if (Rank() == 0) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    char host[64] = {0};
    internal::NodeName(host, sizeof(host));
    const std::string name = "/viper-test-" + std::to_string(getpid()) + "-r0-g1";
    auto segment = internal::ShmSegment::Create(name, 4 << 20);
    ASSERT_TRUE(segment.ok()) << segment.status().ToString();
    internal::ShmControl* control = (*segment)->control();
    for (uint64_t v = 0; v < 3; ++v) {
      HandMadeImage made = MakeImage(v, static_cast<uint32_t>(50 + v), /*corrupt=*/v == 0);
      ASSERT_TRUE(made.status.ok()) << made.status.ToString();
      std::vector<std::byte>* image = &made.bytes;
      const uint64_t header_bytes = made.header_bytes, data_bytes = made.data_bytes;
      control->complete.store(0);
      control->data_bytes.store(0);
      control->version.store(v);
      internal::HostPayload payload;
      std::snprintf(payload.shm_name, sizeof(payload.shm_name), "%s", name.c_str());
      payload.shm_payload_bytes = (*segment)->payload_bytes();
      internal::Announce a = MakeAnnounce(*session, HostProtocol::kShm, v, made, payload);
      std::memcpy(a.host, host, sizeof(a.host));
      a.sent_wtime = MonotonicSeconds();
      for (int r = 1; r < Size(); ++r) {
        ASSERT_TRUE(internal::SendPod(comm, r, internal::kTagAnnounce, a, 30).ok());
        internal::Ready ready;
        MPI_Recv(&ready, sizeof(ready), MPI_BYTE, r, internal::kTagReady, comm, MPI_STATUS_IGNORE);
        ASSERT_EQ(ready.accept, 1);
      }
      std::byte* data = (*segment)->payload() + header_bytes;
      const uint64_t half = data_bytes / 2;
      std::memcpy(data, image->data() + header_bytes, half);
      control->data_bytes.store(half);
      if (v == 2) break;  // stalls here
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::memcpy(data + half, image->data() + header_bytes + half, data_bytes - half);
      control->data_bytes.store(data_bytes);
      std::memcpy((*segment)->payload(), image->data(), header_bytes);
      control->complete.store(v + 1);
      ExpectAcks(comm, v, /*corrupt=*/v == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the consumers have given up on version 2
    MPI_Comm_free(&comm);
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    MPI_Barrier(MPI_COMM_WORLD);
    auto current = (*sub)->Current();
    ASSERT_NE(current, nullptr);
    EXPECT_EQ(current->state.metadata.version, 1u);
    EXPECT_TRUE(HasPattern(current->state, 51));
    auto summary = (*sub)->summary();
    EXPECT_TRUE(summary.producer_lost) << summary.BriefReport();
    auto rejections = (*sub)->Rejections();
    ASSERT_EQ(rejections.size(), 2u);
    EXPECT_EQ(rejections[0].version, 0u);
    EXPECT_EQ(rejections[0].status.code(), StatusCode::kDataLoss) << rejections[0].status.ToString();
    EXPECT_NE(rejections[0].status.message().find("checksum mismatch"), std::string::npos)
        << rejections[0].status.ToString();
    EXPECT_EQ(rejections[1].version, 2u);
    EXPECT_EQ(rejections[1].status.code(), StatusCode::kAborted) << rejections[1].status.ToString();
  }
}

// Memory MPI may still read (internal::KeepUntilFinalize) outlives its
// owner's last reference and is released at MPI_Finalize; main checks the
// release after its session has finalized.
std::weak_ptr<const void> kept_until_finalize;

TEST(MpiLink, KeepUntilFinalizeHoldsMemoryUntilMpiFinalize) {
  auto memory = std::make_shared<std::vector<char>>(4096, 'x');
  kept_until_finalize = memory;
  internal::KeepUntilFinalize(memory);
  internal::KeepUntilFinalize(nullptr);  // nothing to keep: ignored
  memory.reset();
  EXPECT_FALSE(kept_until_finalize.expired());
}

TEST(MpiHost, OneSidedVersionLargerThanWindowIsRefused) {
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kOneSided);
  s.sub.window_slot_bytes = 1 << 20;
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok());
    auto r = (*pub)->Publish(MakeModel(2 << 20, 1), 1);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const auto& c : r->consumers) {
      EXPECT_FALSE(c.delivered);
      EXPECT_FALSE(c.lost);  // refused, still a consumer
    }
    ASSERT_TRUE((*pub)->Close().ok());
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok());
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    EXPECT_EQ((*sub)->Current(), nullptr);
    EXPECT_EQ((*sub)->summary().rejected, 1u);
  }
}

TEST(MpiPfs, PushNotificationLoadsTheFile) {
  const std::string dir = SharedTempDir();
  Scenario s;
  s.pub.tier = Tier::kPfs;
  s.pub.notify = Notify::kPush;
  s.pub.mode = Mode::kSync;
  s.pub.pfs_dir = dir;
  s.sub.tier = Tier::kPfs;
  s.sub.notify = Notify::kPush;
  s.sub.pfs_dir = dir;
  RunFanOut(s, 2 << 20, 2);
}

TEST(MpiGpuTier, WithoutADeviceCreateSaysWhy) {
  // Without CUDA or a device (tier_gpu_stub.cc, or no device at run time)
  // both sides open their control (collective) and then report Unavailable.
  std::string reason;
  if (CudaDeviceAvailable(&reason)) GTEST_SKIP() << "a CUDA device is present; see DeviceModelReachesEveryConsumer";
  Status st;
  if (Rank() == 0) {
    Publisher::Options o;
    o.tier = Tier::kGpu;
    st = Publisher::Create(o).status();
  } else {
    Subscriber::Options o;
    o.tier = Tier::kGpu;
    st = Subscriber::Create(o).status();
  }
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("no CUDA device"), std::string::npos) << st.ToString();
}

// The gpu tier through Publisher/Subscriber: device tensors in, device
// tensors out, byte for byte, by CUDA IPC (same node) or through pinned host
// memory (allow_ipc = false), in sync and async mode, to every consumer.
class MpiGpuTier : public ::testing::TestWithParam<std::tuple<Mode, bool>> {};

TEST_P(MpiGpuTier, DeviceModelReachesEveryConsumer) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) GTEST_SKIP() << reason;
  const auto [mode, allow_ipc] = GetParam();
  const uint64_t bytes = 5 << 20;
  const int versions = 3;
  if (Rank() == 0) {
    Publisher::Options o;
    o.tier = Tier::kGpu;
    o.mode = mode;
    o.peer_timeout_s = 30;
    o.chunk_bytes = 1 << 20;  // several pinned chunks on the host path
    auto pub = Publisher::Create(o);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    for (int v = 0; v < versions; ++v) {
      auto device_model = CopyToDevice(MakeModel(bytes, 30 + v));
      ASSERT_TRUE(device_model.ok()) << device_model.status().ToString();
      auto r = (*pub)->Publish(*device_model, 10 * v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (mode == Mode::kSync) {
        ASSERT_EQ(r->consumers.size(), static_cast<std::size_t>(Size() - 1)) << r->BriefReport();
        for (const auto& c : r->consumers) {
          EXPECT_TRUE(c.delivered) << r->BriefReport();
          EXPECT_EQ(c.bytes_moved, r->bytes) << "rank " << c.rank << ": " << r->BriefReport();
        }
      }
      if (mode == Mode::kAsync) {
        ASSERT_TRUE((*pub)->Flush().ok());  // every version travels
      }
    }
    ASSERT_TRUE((*pub)->Close().ok());
    auto summary = (*pub)->summary();
    EXPECT_TRUE(summary.lost_consumers.empty()) << summary.BriefReport();
    EXPECT_EQ(summary.sent, static_cast<uint64_t>(versions)) << summary.BriefReport();
  } else {
    Subscriber::Options so;
    so.tier = Tier::kGpu;
    so.allow_ipc = allow_ipc;
    so.transfer_timeout_s = 30;
    std::vector<uint64_t> seen;  // from the first version on: the callback is set in Create
    auto sub = Subscriber::Create(
        so, [&](std::shared_ptr<const ModelVersion> v) { seen.push_back(v->state.metadata.version); });
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto last = (*sub)->WaitForVersion(versions - 1, 60);
    ASSERT_TRUE(last.ok()) << last.status().ToString() << " " << (*sub)->summary().BriefReport();
    EXPECT_EQ((*last)->memory, MemoryKind::kDevice);
    EXPECT_EQ((*last)->tier, Tier::kGpu);
    for (const Tensor& t : (*last)->state.tensors()) EXPECT_EQ(t.memory, MemoryKind::kDevice) << t.name;
    EXPECT_NE((*last)->source.find(allow_ipc ? "cuda-ipc" : "pinned-host"), std::string::npos)
        << (*last)->source;
    EXPECT_EQ((*last)->state.metadata.iteration, 10 * (versions - 1));
    auto host = CopyToHost((*last)->state);
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    EXPECT_TRUE(HasPattern(*host, 30 + versions - 1));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    auto summary = (*sub)->summary();
    EXPECT_TRUE(summary.producer_finished) << summary.BriefReport();
    EXPECT_EQ(summary.rejected, 0u) << summary.BriefReport();
    EXPECT_EQ(summary.received, static_cast<uint64_t>(versions)) << summary.BriefReport();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(ModesAndPaths, MpiGpuTier,
                         ::testing::Combine(::testing::Values(Mode::kSync, Mode::kAsync), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(ToString(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_ipc" : "_pinned_host");
                         });

TEST(MpiFaults, SilentProducerLeavesLastGoodVersion) {
  // The producer publishes version 0 and then goes silent for longer than
  // the consumers' producer_timeout_s (as a dead producer would): consumers
  // keep serving version 0 and report the producer lost.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  s.sub.producer_timeout_s = 2.0;
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok());
    ASSERT_TRUE((*pub)->Publish(MakeModel(1 << 20, 3), 7).ok());
    MPI_Barrier(MPI_COMM_WORLD);  // consumers have timed out
    ASSERT_TRUE((*pub)->Close().ok());
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok());
    ASSERT_TRUE((*sub)->WaitForVersion(0, 30).ok());
    auto next = (*sub)->WaitForVersion(1, 30);
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), StatusCode::kAborted) << next.status().ToString();
    EXPECT_NE(next.status().message().find("keeping version 0"), std::string::npos)
        << next.status().message();
    EXPECT_TRUE((*sub)->summary().producer_lost);
    ASSERT_NE((*sub)->Current(), nullptr);
    EXPECT_TRUE(HasPattern((*sub)->Current()->state, 3));
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

class MpiFaultsByProtocol : public ::testing::TestWithParam<HostProtocol> {};

TEST_P(MpiFaultsByProtocol, UnresponsiveConsumerIsDroppedNotWaitedOnForever) {
  // The last rank stops receiving (as a dead or hung consumer would). The
  // producer gives up on it after peer_timeout_s, keeps serving the others,
  // and never waits on it again. The live consumers wait for the bytes
  // longer than their own transfer_timeout_s, since the producer first
  // waits up to peer_timeout_s for every consumer's answer.
  Scenario s = HostScenario(Mode::kSync, GetParam());
  // Long enough that a live consumer on a loaded 2-core VM always answers.
  s.pub.peer_timeout_s = 4.0;
  s.sub.transfer_timeout_s = 2.0;
  const int dead = Size() - 1;
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok());
    MPI_Barrier(MPI_COMM_WORLD);  // the dead rank has stopped
    auto r1 = (*pub)->Publish(MakeModel(1 << 20, 20), 1);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    auto r2 = (*pub)->Publish(MakeModel(1 << 20, 21), 2);
    ASSERT_TRUE(r2.ok()) << r2.status().ToString();
    for (const auto& c : r1->consumers) {
      if (c.rank == dead) {
        EXPECT_TRUE(c.lost) << r1->BriefReport();
      } else {
        EXPECT_TRUE(c.delivered) << r1->BriefReport();
      }
    }
    // The second version is not sent to the lost consumer at all.
    EXPECT_EQ(r2->consumers.size(), static_cast<std::size_t>(Size() - 2)) << r2->BriefReport();
    EXPECT_EQ((*pub)->summary().lost_consumers, std::vector<int>{dead});
    ASSERT_TRUE((*pub)->Close().ok());
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok());
    if (Rank() == dead) (*sub)->Stop();
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() != dead) {
      auto v = (*sub)->WaitForVersion(1, 30);
      ASSERT_TRUE(v.ok()) << v.status().ToString() << "; " << (*sub)->summary().BriefReport();
      EXPECT_TRUE(HasPattern((*v)->state, 21));
      EXPECT_TRUE((*sub)->WaitUntilDone(30));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// The test name of a host protocol parameter.
std::string ProtocolName(const ::testing::TestParamInfo<HostProtocol>& p) {
  return p.param == HostProtocol::kShm ? std::string("Shm") : std::string("TwoSided");
}

INSTANTIATE_TEST_SUITE_P(Protocols, MpiFaultsByProtocol,
                         ::testing::Values(HostProtocol::kTwoSided, HostProtocol::kShm),
                         ProtocolName);

TEST(MpiFaults, ShmConsumerThatNeverCopiesIsDroppedAndTheOthersGoOn) {
  // The last rank speaks the shm protocol itself: it maps the segment,
  // accepts version 0 from shared memory, then neither copies nor
  // acknowledges (as a hung consumer would). The producer drops it after
  // peer_timeout_s, the other consumers have version 0, and version 1
  // (written into the same segment) reaches them without it.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kShm);
  s.pub.peer_timeout_s = 4.0;
  const int hung = Size() - 1;
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    auto r0 = (*pub)->Publish(MakeModel(2 << 20, 60), 0);
    ASSERT_TRUE(r0.ok()) << r0.status().ToString();
    auto r1 = (*pub)->Publish(MakeModel(2 << 20, 61), 1);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    ASSERT_EQ(r0->consumers.size(), static_cast<std::size_t>(Size() - 1)) << r0->BriefReport();
    for (const auto& c : r0->consumers) {
      if (c.rank == hung) {
        EXPECT_TRUE(c.lost) << r0->BriefReport();
        EXPECT_NE(c.message.find("acknowledgement"), std::string::npos) << r0->BriefReport();
      } else {
        EXPECT_TRUE(c.delivered) << r0->BriefReport();
      }
    }
    ASSERT_EQ(r1->consumers.size(), static_cast<std::size_t>(Size() - 2)) << r1->BriefReport();
    for (const auto& c : r1->consumers) EXPECT_TRUE(c.delivered) << r1->BriefReport();
    EXPECT_EQ((*pub)->summary().lost_consumers, std::vector<int>{hung});
    ASSERT_TRUE((*pub)->Close().ok());
    MPI_Barrier(MPI_COMM_WORLD);
  } else if (Rank() == hung) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    internal::Announce a;
    MPI_Recv(&a, sizeof(a), MPI_BYTE, 0, internal::kTagAnnounce, comm, MPI_STATUS_IGNORE);
    auto payload = internal::DecodeHostPayload(a);
    ASSERT_TRUE(payload.ok()) << payload.status().ToString();
    ASSERT_NE(payload->shm_name[0], '\0') << "version 0 was not offered through shared memory";
    auto segment = internal::ShmSegment::Open(payload->shm_name, payload->shm_payload_bytes);
    ASSERT_TRUE(segment.ok()) << segment.status().ToString();
    EXPECT_EQ((*segment)->control()->version.load(), a.version);
    internal::Ready ready;
    ready.session = *session;
    ready.version = a.version;
    ready.accept = 1;
    ready.path = internal::kPathShm;
    internal::NodeName(ready.host, sizeof(ready.host));
    ASSERT_TRUE(internal::SendPod(comm, 0, internal::kTagReady, ready, 30).ok());
    MPI_Barrier(MPI_COMM_WORLD);  // the producer has closed
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto v = (*sub)->WaitForVersion(1, 30);
    ASSERT_TRUE(v.ok()) << v.status().ToString() << "; " << (*sub)->summary().BriefReport();
    EXPECT_TRUE(HasPattern((*v)->state, 61));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    EXPECT_EQ((*sub)->summary().rejected, 0u) << (*sub)->summary().BriefReport();
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// The control page of the viper shared-memory segment this process has
// mapped (a Subscriber maps its producer's segment on the first shm
// announcement), or nullptr if none is mapped yet.
const internal::ShmControl* MappedShmControl() {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return nullptr;
  char line[1024];
  const internal::ShmControl* control = nullptr;
  while (control == nullptr && std::fgets(line, sizeof(line), maps) != nullptr) {
    if (std::strstr(line, "/dev/shm/viper-") == nullptr) continue;
    control = reinterpret_cast<const internal::ShmControl*>(std::strtoull(line, nullptr, 16));
  }
  std::fclose(maps);
  return control;
}

// True once process `pid` (on this node) has exited: gone, or a zombie.
// A process as /proc/<pid>/stat shows it: its state and its start time
// (clock ticks after boot), or nullopt when there is no such process.
struct ProcStat {
  char state = '?';
  unsigned long long start_ticks = 0;
};
std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  // The command name may hold spaces and parentheses: the fields follow the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  ProcStat st;
  std::string skip;
  rest >> st.state;
  for (int field = 4; field < 22 && rest; ++field) rest >> skip;  // ppid .. itrealvalue
  rest >> st.start_ticks;
  if (!rest) return std::nullopt;
  return st;
}
// Whether the process that had `pid` and started at `start_ticks` has
// exited: gone, a zombie, or its pid now names another process started
// later (pids wrap at 32768 on the 2-core VM). On a loaded VM the wait
// below once found the dead rank exited and the assertion's second read
// found it running (cause not found; a reused pid would do it): one read
// decides now.
bool ProcessExited(pid_t pid, unsigned long long start_ticks) {
  const auto st = ReadProcStat(pid);
  return !st || st->state == 'Z' || st->state == 'X' || st->start_ticks != start_ticks;
}

// A consumer process that really dies (_exit, no MPI_Finalize) during a
// publish. Open MPI 4.1 ends the whole job when a rank exits that way unless
// mpirun runs with orte_enable_recovery=1, so this runs only when
// VIPER_TEST_KILL_RANK=1 is set: CTest's transports.mpi_kill_np3_* set both,
// one job per protocol (the killed rank stays dead), and judge the output
// (mpirun's exit status does not carry a failure once a rank has died).
// Version 0 is 128 MB. shm: the rank dies as soon as the producer's progress
// in the segment it has mapped is past zero, i.e. while both are copying.
// Two-sided: it dies 250 ms after the publish starts (on a fast machine
// that can be after version 0 has arrived). The producer publishes versions
// 1 and 2 only once the rank's process has exited, so the rank is lost in
// exactly one version (0 when it died mid-transfer), never sent to again,
// and the live consumer gets all three.
class MpiKillByProtocol : public ::testing::TestWithParam<HostProtocol> {};

TEST_P(MpiKillByProtocol, ConsumerKilledDuringPublishIsDropped) {
  if (std::getenv("VIPER_TEST_KILL_RANK") == nullptr) {
    GTEST_SKIP() << "needs VIPER_TEST_KILL_RANK=1 and mpirun with orte_enable_recovery=1";
  }
  if (Size() < 3) GTEST_SKIP() << "needs a surviving consumer besides the killed one (np >= 3)";
  const bool shm = GetParam() == HostProtocol::kShm;
  Scenario s = HostScenario(Mode::kSync, GetParam());
  // Long enough for the survivor's handshake and version 0 in 64 KiB steps
  // on a loaded machine (2 s dropped it too, with two busy loops on 2 cores:
  // issue 26); the dead rank is then dropped after this long.
  s.pub.peer_timeout_s = 15.0;
  s.pub.chunk_bytes = 64 << 10;  // two-sided: many small chunks, the transfer takes a while
  s.pub.max_inflight_chunks = 1;
  const int dead = Size() - 1;
  std::vector<int> pids(static_cast<std::size_t>(Size()));
  const int my_pid = static_cast<int>(::getpid());
  MPI_Gather(&my_pid, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (Rank() == 0) {
    // The dead rank's start time while it is alive (it waits at the barrier below).
    const pid_t dead_pid = static_cast<pid_t>(pids[static_cast<std::size_t>(dead)]);
    const auto dead_stat = ReadProcStat(dead_pid);
    ASSERT_TRUE(dead_stat.has_value()) << "rank " << dead << " (pid " << dead_pid << ") is not on this node";
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok());
    // Two-sided, 16 MiB: the survivor gets no byte until the dead rank's
    // handshake has timed out, then must receive version 0 within
    // peer_timeout_s; 128 MiB in 64 KiB steps took longer than 15 s beside
    // two busy loops (issue 26). Shm keeps 128 MiB: the dying rank must
    // still be copying version 0 when it exits (16 MiB was copied and
    // acknowledged first, 1 run in 9).
    const uint64_t first_bytes = shm ? (128ull << 20) : (16ull << 20);
    const std::vector<ModelState> models = {MakeModel(first_bytes, 30), MakeModel(1 << 20, 31), MakeModel(1 << 20, 32)};
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<Publisher::VersionReport> reports;
    for (std::size_t v = 0; v < models.size(); ++v) {
      if (v == 1) {  // the rank is gone before version 1 (same node: its pid is visible)
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        bool exited = false;
        while (!(exited = ProcessExited(dead_pid, dead_stat->start_ticks)) &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        ASSERT_TRUE(exited) << "rank " << dead << " (pid " << dead_pid << ") still runs after 30 s";
      }
      auto r = (*pub)->Publish(models[v], static_cast<int64_t>(10 * v));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      reports.push_back(*r);
    }
    int lost_in = -1;  // the version whose report has the dead rank lost
    for (std::size_t i = 0; i < reports.size(); ++i) {
      for (const auto& c : reports[i].consumers) {
        if (c.rank != dead) {
          EXPECT_TRUE(c.delivered) << reports[i].BriefReport();
        } else if (c.lost) {
          EXPECT_EQ(lost_in, -1) << "lost twice: " << reports[i].BriefReport();
          lost_in = static_cast<int>(i);
        } else {
          EXPECT_EQ(lost_in, -1) << "sent to after it was lost: " << reports[i].BriefReport();
        }
      }
    }
    EXPECT_GE(lost_in, 0) << "the killed rank was never reported lost";
    std::printf("the killed rank was lost in version %d (%s)\n", lost_in,
                lost_in == 0 ? "mid-transfer" : "it died after version 0 had arrived");
    if (shm) {
      EXPECT_EQ(lost_in, 0) << "the shm consumer dies while copying version 0";
    }
    EXPECT_EQ(reports.back().consumers.size(), static_cast<std::size_t>(Size() - 2)) << reports.back().BriefReport();
    EXPECT_EQ((*pub)->summary().lost_consumers, std::vector<int>{dead});
    ASSERT_TRUE((*pub)->Close().ok());
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok());
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == dead) {
      if (shm) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        const internal::ShmControl* control = nullptr;
        while (std::chrono::steady_clock::now() < deadline &&
               (control == nullptr || control->data_bytes.load(std::memory_order_acquire) == 0)) {
          if (control == nullptr) control = MappedShmControl();
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
      std::fflush(nullptr);
      _exit(0);  // dies without MPI_Finalize
    }
    auto v = (*sub)->WaitForVersion(2, 60);  // versions 0, 1, 2
    ASSERT_TRUE(v.ok()) << v.status().ToString() << "; " << (*sub)->summary().BriefReport();
    EXPECT_TRUE(HasPattern((*v)->state, 32));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    EXPECT_EQ((*sub)->summary().rejected, 0u) << (*sub)->summary().BriefReport();
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, MpiKillByProtocol,
                         ::testing::Values(HostProtocol::kTwoSided, HostProtocol::kShm),
                         ProtocolName);


// ---------------------------------------------------------------- host deltas (issue 27)

// A model that moves a little each version: `Step` flips bits in a random
// `fraction` of its elements (rng seeded, so every rank makes the same
// sequence and a consumer can check each served version byte for byte).
class Evolving {
 public:
  // `only` >= 0: a frozen backbone, only tensor `only` (of 3) changes.
  Evolving(uint64_t bytes, uint32_t seed, int only = -1) : model_(MakeModel(bytes, seed)), rng_(seed), only_(only) {}
  void Step(double fraction) {
    std::bernoulli_distribution pick(fraction);
    int index = 0;
    for (Tensor& t : model_.mutable_tensors()) {
      if (only_ >= 0 && index++ != only_) continue;
      uint32_t* p = t.As<uint32_t>();
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        if (pick(rng_)) p[i] ^= 1u + static_cast<uint32_t>(rng_() % 0xffff);
      }
    }
  }
  const ModelState& model() const { return model_; }

 private:
  ModelState model_;
  std::mt19937 rng_;
  int only_;
};

bool SameTensors(const ModelState& a, const ModelState& b) {
  if (a.tensors().size() != b.tensors().size()) return false;
  for (std::size_t t = 0; t < a.tensors().size(); ++t) {
    const Tensor& x = a.tensors()[t];
    const Tensor& y = b.tensors()[t];
    if (x.size_bytes != y.size_bytes || std::memcmp(x.data, y.data, x.size_bytes) != 0) return false;
  }
  return true;
}

// Each consumer's served versions, kept by the subscriber's callback.
struct Served {
  std::mutex mu;
  std::map<uint64_t, std::shared_ptr<const ModelVersion>> versions;
  Subscriber::Callback Callback() {
    return [this](std::shared_ptr<const ModelVersion> v) {
      std::lock_guard<std::mutex> lock(mu);
      versions[v->state.metadata.version] = std::move(v);
    };
  }
};

// Rank 0: publishes `versions` versions of `model` with `s.pub` (sync),
// each after the first one step of 2% on, every consumer answering and
// delivered; `check` sees each version's report.
void PublishEvolving(const Scenario& s, Evolving* model, int versions,
                     const std::function<void(int, const Publisher::VersionReport&)>& check) {
  auto pub = Publisher::Create(s.pub);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  for (int v = 0; v < versions; ++v) {
    if (v > 0) model->Step(0.02);
    auto r = (*pub)->Publish(model->model(), v);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->consumers.size(), static_cast<std::size_t>(Size() - 1)) << r->BriefReport();
    for (const auto& c : r->consumers) EXPECT_TRUE(c.delivered) << r->BriefReport();
    check(v, *r);
  }
  ASSERT_TRUE((*pub)->Close().ok());
}

struct DeltaCase {
  const char* name;
  HostProtocol protocol;
  DeltaMode delta;
  bool expect_delta;  // whether consumers get deltas (auto over shm: the full copy)
};

class MpiHostDelta : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(MpiHostDelta, EveryDeltaVersionServedIsBitIdenticalToAFullSend) {
  // Versions 1..5 each change about 2% of the elements. A consumer holding
  // the previous version gets a delta (delta on) and serves exactly what a
  // full send would have brought; with auto, on the producer's node (all
  // ranks here), the producer sends the full copy and says so.
  const DeltaCase c = GetParam();
  Scenario s = HostScenario(Mode::kSync, c.protocol);
  s.pub.delta = c.delta;
  constexpr int kVersions = 6;
  constexpr uint64_t kBytes = 4 << 20;
  Evolving model(kBytes, 90);
  if (Rank() == 0) {
    PublishEvolving(s, &model, kVersions, [&](int v, const Publisher::VersionReport& r) {
      for (const auto& cr : r.consumers) {
        if (v > 0 && c.expect_delta) {
          EXPECT_EQ(cr.encoding, "delta of version " + std::to_string(v - 1)) << r.BriefReport();
          EXPECT_EQ(cr.bytes_moved, r.written_bytes) << r.BriefReport();
          // 2% of 4-byte elements changed: positions (~1 byte) + values (4 bytes) each.
          EXPECT_LT(cr.bytes_moved, r.bytes / 5) << r.BriefReport();
        } else {
          EXPECT_EQ(cr.encoding, "full") << r.BriefReport();
          EXPECT_EQ(cr.bytes_moved, r.bytes) << r.BriefReport();
        }
      }
      if (v > 0 && c.expect_delta) {
        EXPECT_NE(r.encoding.find("delta v" + std::to_string(v)), std::string::npos) << r.BriefReport();
      }
    });
  } else {
    Served served;
    auto sub = Subscriber::Create(s.sub, served.Callback());
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60));
    const auto summary = (*sub)->summary();
    EXPECT_EQ(summary.received, static_cast<uint64_t>(kVersions)) << summary.BriefReport();
    EXPECT_EQ(summary.rejected, 0u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_versions, c.expect_delta ? kVersions - 1u : 0u) << summary.BriefReport();
    std::lock_guard<std::mutex> lock(served.mu);
    for (int v = 0; v < kVersions; ++v) {
      if (v > 0) model.Step(0.02);
      auto it = served.versions.find(v);
      ASSERT_NE(it, served.versions.end()) << "version " << v << " was not served";
      EXPECT_TRUE(SameTensors(it->second->state, model.model())) << "version " << v;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Protocols, MpiHostDelta,
    ::testing::Values(DeltaCase{"TwoSidedOn", HostProtocol::kTwoSided, DeltaMode::kOn, true},
                      // Auto on one node: the link is shared memory, the full copy is faster.
                      DeltaCase{"TwoSidedAuto", HostProtocol::kTwoSided, DeltaMode::kAuto, false},
                      DeltaCase{"TwoSidedOff", HostProtocol::kTwoSided, DeltaMode::kOff, false},
                      DeltaCase{"ShmOn", HostProtocol::kShm, DeltaMode::kOn, true},
                      DeltaCase{"ShmAuto", HostProtocol::kShm, DeltaMode::kAuto, false}),
    [](const ::testing::TestParamInfo<DeltaCase>& info) { return std::string(info.param.name); });

// The gpu tier with delta on (issue 27): a consumer that copies by CUDA IPC
// and holds the previous version gets the records diffed on the producer's
// device, applies them on its own and serves exactly what a full send would
// have brought; through the pinned-host pipeline every version is full.
// Skips without a device.
class MpiGpuDelta : public ::testing::TestWithParam<bool> {};  // allow_ipc

TEST_P(MpiGpuDelta, EveryDeltaVersionServedIsBitIdenticalToAFullSend) {
  std::string reason;
  if (!CudaDeviceAvailable(&reason)) GTEST_SKIP() << reason;
  const bool ipc = GetParam();
  constexpr int kVersions = 6;
  Evolving model(4 << 20, 91);
  if (Rank() == 0) {
    Publisher::Options o;
    o.tier = Tier::kGpu;
    o.mode = Mode::kSync;
    o.delta = DeltaMode::kOn;
    o.peer_timeout_s = 30;
    o.chunk_bytes = 1 << 20;
    auto pub = Publisher::Create(o);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    for (int v = 0; v < kVersions; ++v) {
      if (v > 0) model.Step(0.02);
      auto device_model = CopyToDevice(model.model());
      ASSERT_TRUE(device_model.ok()) << device_model.status().ToString();
      auto r = (*pub)->Publish(*device_model, v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->consumers.size(), static_cast<std::size_t>(Size() - 1)) << r->BriefReport();
      for (const auto& cr : r->consumers) {
        EXPECT_TRUE(cr.delivered) << r->BriefReport();
        if (v > 0 && ipc) {
          EXPECT_EQ(cr.encoding, "delta of version " + std::to_string(v - 1)) << r->BriefReport();
          // 2% of 4-byte elements changed: the header and the records, well under a fifth.
          EXPECT_LT(cr.bytes_moved, r->bytes / 5) << r->BriefReport();
        } else {
          EXPECT_EQ(cr.encoding, "full") << r->BriefReport();
          EXPECT_EQ(cr.bytes_moved, r->bytes) << r->BriefReport();
        }
      }
      if (v > 0) {
        EXPECT_NE(r->encoding.find("delta v" + std::to_string(v)), std::string::npos) << r->BriefReport();
      }
    }
    ASSERT_TRUE((*pub)->Close().ok());
  } else {
    Subscriber::Options so;
    so.tier = Tier::kGpu;
    so.allow_ipc = ipc;
    so.transfer_timeout_s = 30;
    Served served;
    auto sub = Subscriber::Create(so, served.Callback());
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60));
    const auto summary = (*sub)->summary();
    EXPECT_EQ(summary.received, static_cast<uint64_t>(kVersions)) << summary.BriefReport();
    EXPECT_EQ(summary.rejected, 0u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_versions, ipc ? kVersions - 1u : 0u) << summary.BriefReport();
    std::lock_guard<std::mutex> lock(served.mu);
    for (int v = 0; v < kVersions; ++v) {
      if (v > 0) model.Step(0.02);
      auto it = served.versions.find(v);
      ASSERT_NE(it, served.versions.end()) << "version " << v << " was not served";
      auto host = CopyToHost(it->second->state);
      ASSERT_TRUE(host.ok()) << host.status().ToString();
      EXPECT_TRUE(SameTensors(*host, model.model())) << "version " << v;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Paths, MpiGpuDelta, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "ipc" : "pinned_host"); });

// The image of `m` as version `version` (Serialize: Viper's format-2 header).
std::vector<std::byte> ImageOf(ModelState m, uint64_t version) {
  m.metadata.version = version;
  m.metadata.iteration = static_cast<int64_t>(version);
  auto image = safetensors::Serialize(m);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? *image : std::vector<std::byte>{};
}

void PutU64(std::byte* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}

// A hand-made image of Serialize's bytes.
HandMadeImage Made(const std::vector<std::byte>& image) {
  HandMadeImage made;
  made.bytes = image;
  uint64_t json_bytes = 0;
  for (int i = 0; i < 8; ++i) json_bytes |= std::to_integer<uint64_t>(image[i]) << (8 * i);
  made.header_bytes = 8 + json_bytes;
  made.data_bytes = image.size() - made.header_bytes;
  return made;
}

// How a hand-made delta is spoiled.
enum class Spoil {
  kNone,
  kFlippedByte,  // one body byte flipped: the body checksum no longer matches
  kForged,       // a changed value altered and both codec checksums recomputed: the rebuilt image fails its checksum
};

// `target` encoded against `base`, spoiled as asked.
std::vector<std::byte> DeltaOf(const std::vector<std::byte>& base, const std::vector<std::byte>& target, Spoil spoil) {
  std::vector<std::byte> out(target.size());
  auto e = delta::Encode(base.data(), base.size(), target.data(), target.size(), out.data(), out.size());
  EXPECT_TRUE(e.ok() && !e->full) << (e.ok() ? e->BriefReport() : e.status().ToString());
  if (!e.ok() || e->full) return {};
  out.resize(e->delta_bytes);
  if (spoil == Spoil::kNone) return out;
  // The last byte is a changed element's new value (the last record's payload ends with values).
  out.back() ^= std::byte{0x40};
  if (spoil == Spoil::kForged) {
    // Offsets of the fixed header (delta.h): body XXH3 at 80, the header's own at 88.
    const uint64_t body = out.size() - delta::kFixedHeaderBytes;
    PutU64(out.data() + 80, Xxh3_64(out.data() + delta::kFixedHeaderBytes, body));
    PutU64(out.data() + 88, Xxh3_64(out.data(), 88));
  }
  return out;
}

// Rank 0 as a hand-made producer of a delta: announces version `version`
// (image `target`) offering `d` against `base_version`/`base_checksum`;
// every consumer must answer Ready on the delta path naming that base,
// receive the delta, and acknowledge as servable unless `rejected`.
void DeltaByHand(MPI_Comm comm, uint64_t session, uint64_t version, const std::vector<std::byte>& target,
                 std::vector<std::byte> d, uint64_t base_version, uint64_t base_checksum, bool rejected) {
  const HandMadeImage made = Made(target);
  internal::HostPayload p;
  p.data_chunks = 1;
  p.delta_bytes = d.size();
  p.delta_chunk_bytes = 64 << 10;  // several messages
  p.delta_base_version = base_version;
  p.delta_base_checksum = base_checksum;
  internal::Announce a = MakeAnnounce(session, HostProtocol::kTwoSided, version, made, p);
  std::vector<internal::Chunk> chunks;
  internal::AppendChunks(d.data(), d.size(), p.delta_chunk_bytes, &chunks);
  std::vector<internal::ChunkedTransfer> transfers;
  for (int r = 1; r < Size(); ++r) {
    ASSERT_TRUE(internal::SendPod(comm, r, internal::kTagAnnounce, a, 30).ok());
    internal::Ready ready;
    MPI_Recv(&ready, sizeof(ready), MPI_BYTE, r, internal::kTagReady, comm, MPI_STATUS_IGNORE);
    ASSERT_EQ(ready.accept, 1) << "version " << version;
    ASSERT_EQ(ready.path, internal::kPathDelta) << "version " << version;
    EXPECT_EQ(ready.held_version, base_version);
    EXPECT_EQ(ready.held_checksum, base_checksum);
    internal::ChunkedTransfer t;
    t.peer = r;
    t.send = true;
    t.chunks = &chunks;
    transfers.push_back(std::move(t));
  }
  internal::RunChunked(comm, 4, &transfers, MonotonicSeconds() + 20);
  for (const auto& t : transfers) ASSERT_FALSE(t.failed);
  ExpectAcks(comm, version, rejected);
}

TEST(MpiHostDeltaFaults, CorruptDeltasAreNeverServedAndAnotherBaseGetsTheFullVersion) {
  // Rank 0 speaks the wire protocol itself. v0 full (seed 70); v1 a delta
  // against v0 with a flipped byte (body checksum: refused before anything
  // is written); v2 a forged delta (checksums recomputed: the rebuilt image
  // fails viper.checksum); both rejected as DataLoss, v0 stays served. v3 is
  // offered as a delta against v2, which no consumer holds: each takes the
  // full stream instead. v4, a good delta against v3: served bit-identical.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  const ModelState m0 = MakeModel(1 << 20, 70);
  // A copy of `from` with every 97th element of tensor 1 changed.
  auto changed = [](const ModelState& from, uint32_t salt) {
    ModelState m;
    for (const Tensor& t : from.tensors()) {
      auto copy = Tensor::FromBytes(t.name, t.dtype, t.shape, t.data, t.size_bytes);
      EXPECT_TRUE(copy.ok());
      (void)m.Add(std::move(*copy));
    }
    uint32_t* p = m.mutable_tensors()[1].As<uint32_t>();
    for (int64_t i = 0; i < m.tensors()[1].NumElements(); i += 97) p[i] ^= salt;
    return m;
  };
  const ModelState m1 = changed(m0, 0x10001u);
  const std::vector<std::byte> i0 = ImageOf(m0, 0), i1 = ImageOf(m1, 1), i2 = ImageOf(m1, 2);
  auto id0 = delta::Identify(i0.data(), i0.size());
  ASSERT_TRUE(id0.ok()) << id0.status().ToString();
  if (Rank() == 0) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    StreamByHand(comm, *session, 0, 70, /*corrupt=*/false, nullptr, /*accept=*/true, /*rejected=*/false);
    DeltaByHand(comm, *session, 1, i1, DeltaOf(i0, i1, Spoil::kFlippedByte), 0, id0->checksum, /*rejected=*/true);
    DeltaByHand(comm, *session, 2, i2, DeltaOf(i0, i2, Spoil::kForged), 0, id0->checksum, /*rejected=*/true);
    // v3 = MakeModel(.., 73) streamed whole, its announcement offering a delta against v2.
    auto offer = [&](internal::Announce* a) {
      internal::HostPayload p = *internal::DecodeHostPayload(*a);
      p.delta_bytes = 4096;
      p.delta_chunk_bytes = 4096;
      p.delta_base_version = 2;
      p.delta_base_checksum = 12345;
      internal::SetTierPayload(p, a);
    };
    StreamByHand(comm, *session, 3, 73, /*corrupt=*/false, offer, /*accept=*/true, /*rejected=*/false);
    const std::vector<std::byte> i3 = MakeImage(3, 73, false).bytes;
    const std::vector<std::byte> i4b = ImageOf(changed(MakeModel(1 << 20, 73), 0x30003u), 4);
    auto id3 = delta::Identify(i3.data(), i3.size());
    ASSERT_TRUE(id3.ok()) << id3.status().ToString();
    DeltaByHand(comm, *session, 4, i4b, DeltaOf(i3, i4b, Spoil::kNone), 3, id3->checksum, /*rejected=*/false);
    SayGoodbyeByHand(&comm, *session);
  } else {
    auto sub = Subscriber::Create(s.sub);
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    auto v = (*sub)->WaitForVersion(4, 30);
    ASSERT_TRUE(v.ok()) << v.status().ToString() << "; " << (*sub)->summary().BriefReport();
    EXPECT_TRUE(SameTensors((*v)->state, changed(MakeModel(1 << 20, 73), 0x30003u)));
    EXPECT_TRUE((*sub)->WaitUntilDone(30));
    auto rejections = (*sub)->Rejections();
    ASSERT_EQ(rejections.size(), 2u) << (*sub)->summary().BriefReport();
    for (uint64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(rejections[i].version, i + 1);
      EXPECT_EQ(rejections[i].status.code(), StatusCode::kDataLoss) << rejections[i].status.ToString();
    }
    const auto summary = (*sub)->summary();
    EXPECT_EQ(summary.received, 3u) << summary.BriefReport();  // v0, v3 (full), v4 (delta)
    EXPECT_EQ(summary.delta_versions, 1u) << summary.BriefReport();
  }
}

// Versions of the randomised runs: VIPER_DELTA_VERSIONS (default 200; the
// long run of issue 27 sets 10000).
int DeltaVersions() {
  const char* env = std::getenv("VIPER_DELTA_VERSIONS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 200;
}

// What the randomised by-hand producer does with a version.
enum class Send { kDelta, kFlipped, kForged, kWrongBase, kFull };

// Rank 0 as a hand-made producer: version `version` (image `image`) as a
// delta against `*held` (what every consumer serves), good (kDelta) or
// spoiled (kFlipped, kForged: every consumer rejects it); a good one is
// then what they serve.
void SendDeltaByHand(MPI_Comm comm, uint64_t session, int version, const std::vector<std::byte>& image, Send what,
                     std::vector<std::byte>* held) {
  const Spoil spoil =
      what == Send::kDelta ? Spoil::kNone : (what == Send::kFlipped ? Spoil::kFlippedByte : Spoil::kForged);
  auto id = delta::Identify(held->data(), held->size());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  DeltaByHand(comm, session, static_cast<uint64_t>(version), image, DeltaOf(*held, image, spoil), id->version,
              id->checksum, /*rejected=*/spoil != Spoil::kNone);
  if (spoil == Spoil::kNone) *held = image;
}

// The randomised sequence every rank makes alike (seeded): each version's
// model (random changed fraction: mostly 0-5%, sometimes 30% or all) and
// what the producer does with it.
class RandomVersions {
 public:
  explicit RandomVersions(uint32_t seed) : model_(256 << 10, seed), rng_(seed * 7 + 1) {}
  Send Next() {
    std::uniform_real_distribution<double> u(0, 1);
    const double kind = u(rng_);
    const double fraction = kind < 0.05 ? 1.0 : (kind < 0.15 ? 0.3 : u(rng_) * 0.05);
    model_.Step(fraction);
    const double what = u(rng_);
    if (what < 0.55) return Send::kDelta;
    if (what < 0.67) return Send::kFlipped;
    if (what < 0.79) return Send::kForged;
    if (what < 0.9) return Send::kWrongBase;
    return Send::kFull;
  }
  const ModelState& model() const { return model_.model(); }

 private:
  Evolving model_;
  std::mt19937 rng_;
};

TEST(MpiHostDeltaFaults, RandomisedDeltaVersionsServeOnlyExactImages) {
  // Rank 0 speaks the wire protocol itself, DeltaVersions() versions: good
  // deltas against the version the consumers hold, deltas with a flipped
  // byte, forged deltas (checksums recomputed), offers against a base no
  // consumer holds (they take the full stream), full versions. A delta that
  // is not smaller (all elements changed) goes full. Consumers regenerate the
  // same sequence and compare every version they serve with it: 0 torn, 0
  // corrupt served; every spoiled delta rejected as DataLoss.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  const int n = DeltaVersions();
  RandomVersions seq(2027);
  if (Rank() == 0) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    std::vector<std::byte> held;  // what every consumer serves
    for (int v = 0; v < n && !HasFatalFailure(); ++v) {
      Send what = seq.Next();
      const std::vector<std::byte> image = ImageOf(seq.model(), static_cast<uint64_t>(v));
      std::vector<std::byte> d;
      if (!held.empty() && what != Send::kFull && what != Send::kWrongBase) {
        std::vector<std::byte> out(image.size());
        auto e = delta::Encode(held.data(), held.size(), image.data(), image.size(), out.data(), out.size());
        ASSERT_TRUE(e.ok()) << e.status().ToString();
        if (e->full) what = Send::kFull;  // not smaller
      }
      if (held.empty() && what != Send::kWrongBase) what = Send::kFull;
      if (what == Send::kFull || what == Send::kWrongBase) {
        std::function<void(internal::Announce*)> offer;
        if (what == Send::kWrongBase) {
          offer = [](internal::Announce* a) {
            internal::HostPayload p = *internal::DecodeHostPayload(*a);
            p.delta_bytes = 4096;
            p.delta_chunk_bytes = 4096;
            p.delta_base_version = 1ull << 40;  // no consumer holds it
            p.delta_base_checksum = 1;
            internal::SetTierPayload(p, a);
          };
        }
        StreamMadeByHand(comm, *session, v, Made(image), offer, /*accept=*/true, /*rejected=*/false);
        held = image;
        continue;
      }
      SendDeltaByHand(comm, *session, v, image, what, &held);
    }
    SayGoodbyeByHand(&comm, *session);
  } else {
    // The receiving thread calls back in version order: check each served
    // version against the regenerated sequence.
    std::mutex mu;
    int next = 0;
    uint64_t exact = 0, wrong = 0, expected_rejections = 0;
    auto sub = Subscriber::Create(s.sub, [&](std::shared_ptr<const ModelVersion> got) {
      std::lock_guard<std::mutex> lock(mu);
      const int v = static_cast<int>(got->state.metadata.version);
      while (next <= v) {
        (void)seq.Next();
        ++next;
      }
      (SameTensors(got->state, seq.model()) ? exact : wrong)++;
    });
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60 + n * 0.05));
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(wrong, 0u) << "versions served that differ from the full send";
    const auto summary = (*sub)->summary();
    EXPECT_EQ(exact + summary.rejected, static_cast<uint64_t>(n)) << summary.BriefReport();
    for (const auto& r : (*sub)->Rejections()) {
      ++expected_rejections;
      EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status.ToString();
    }
    EXPECT_GT(summary.delta_versions, 0u) << summary.BriefReport();
    // Runs of good deltas bring the back buffer forward.
    EXPECT_GT(summary.delta_copies_avoided, 0u) << summary.BriefReport();
    EXPECT_GT(expected_rejections, 0u) << summary.BriefReport();
    std::printf("[ delta ] rank %d: %d versions, %llu served bit-identical (%llu from deltas, %llu of them in the "
                "back buffer brought forward), %llu rejected, 0 torn, %llu corrupt served\n",
                Rank(), n, static_cast<unsigned long long>(exact),
                static_cast<unsigned long long>(summary.delta_versions),
                static_cast<unsigned long long>(summary.delta_copies_avoided),
                static_cast<unsigned long long>(summary.rejected), static_cast<unsigned long long>(wrong));
  }
}

TEST(MpiHostDelta, RandomisedVersionsThroughAPublisherAndRestartedConsumers) {
  // A real Publisher (two-sided and shm, delta on; sync and async; relayed
  // along a chain and direct), random changed fractions, and every 25
  // versions a new Publisher/Subscriber pair (a restarted consumer holds
  // nothing: its first version is full).
  // Consumers compare every version they serve with the regenerated
  // sequence (async: the newest is sent, older ones superseded).
  const int n = std::max(DeltaVersions() / 4, 25);
  int total_deltas = 0, total_forward = 0;
  for (int run = 0; run * 25 < n; ++run) {
    const bool shm = run % 2 == 1;
    Scenario s = HostScenario(run % 3 == 2 ? Mode::kAsync : Mode::kSync,
                              shm ? HostProtocol::kShm : HostProtocol::kTwoSided);
    s.pub.delta = DeltaMode::kOn;
    // Pairs of runs alternate a chain (at np 3: rank 1 relays the full
    // streams and the deltas to rank 2) and the producer sending each
    // consumer its own (the default plan on one node).
    s.pub.fanout = (run / 2) % 2 == 0 ? Fanout::kTree : Fanout::kNode;
    s.pub.tree_arity = 1;
    RandomVersions seq(500 + static_cast<uint32_t>(run));
    const int versions = std::min(25, n - run * 25);
    if (Rank() == 0) {
      auto pub = Publisher::Create(s.pub);
      ASSERT_TRUE(pub.ok()) << pub.status().ToString();
      for (int v = 0; v < versions; ++v) {
        (void)seq.Next();
        auto r = (*pub)->Publish(seq.model(), v);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (s.pub.mode == Mode::kSync) {
          for (const auto& c : r->consumers) {
            EXPECT_TRUE(c.delivered) << r->BriefReport();
            // The first version of a pair is full: nobody holds a base.
            if (v == 0) {
              EXPECT_EQ(c.encoding, "full") << r->BriefReport();
            }
          }
        }
      }
      ASSERT_TRUE((*pub)->Close().ok());
      EXPECT_TRUE((*pub)->summary().lost_consumers.empty()) << (*pub)->summary().BriefReport();
    } else {
      std::mutex mu;
      int next = 0;
      uint64_t exact = 0, wrong = 0;
      auto sub = Subscriber::Create(s.sub, [&](std::shared_ptr<const ModelVersion> got) {
        std::lock_guard<std::mutex> lock(mu);
        const int v = static_cast<int>(got->state.metadata.version);
        while (next <= v) {
          (void)seq.Next();
          ++next;
        }
        (SameTensors(got->state, seq.model()) ? exact : wrong)++;
      });
      ASSERT_TRUE(sub.ok()) << sub.status().ToString();
      EXPECT_TRUE((*sub)->WaitUntilDone(120));
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(wrong, 0u) << "run " << run;
      EXPECT_EQ((*sub)->summary().rejected, 0u) << (*sub)->summary().BriefReport();
      ASSERT_TRUE((*sub)->Current() != nullptr);
      EXPECT_EQ((*sub)->Current()->state.metadata.version, static_cast<uint64_t>(versions - 1));
      total_deltas += static_cast<int>((*sub)->summary().delta_versions);
      total_forward += static_cast<int>((*sub)->summary().delta_copies_avoided);
    }
  }
  if (Rank() != 0) {
    EXPECT_GT(total_deltas, 0);
    EXPECT_GT(total_forward, 0);
    std::printf("[ delta ] rank %d: %d versions through Publishers, %d from deltas, %d of them in the back buffer "
                "brought forward\n",
                Rank(), n, total_deltas, total_forward);
  }
}

// The consumer's back buffer (issue 27: a delta applied without an extra
// copy of the model), on a frozen backbone (one tensor of three changes):
// version 1 is rebuilt in a whole copy of the served version 0; from version
// 2 on, the back buffer still holds the version before the served one, and
// the consumer brings it forward by copying only what the last delta
// changed (the header and the changed tensor), then applies the new delta
// with the whole rebuilt image hashed. Every version served is bit-identical
// to a full send. (With the whole copy every time, delta_copies_avoided is 0
// and delta_copied_bytes 9 images.)
// What bringing a back buffer forward copies when only tensor `index` of
// `v` changed: its header and that tensor.
uint64_t ChangedBytes(const ModelVersion& v, int index) {
  const std::byte* first = v.bytes + v.size_bytes;
  for (const Tensor& t : v.state.tensors()) first = std::min<const std::byte*>(first, t.data);
  return static_cast<uint64_t>(first - v.bytes) + v.state.tensors()[static_cast<std::size_t>(index)].size_bytes;
}

class MpiHostDeltaBackBuffer : public ::testing::TestWithParam<HostProtocol> {};

TEST_P(MpiHostDeltaBackBuffer, SteadyDeltaVersionsCopyOnlyWhatTheLastDeltaChanged) {
  Scenario s = HostScenario(Mode::kSync, GetParam());
  s.pub.delta = DeltaMode::kOn;
  constexpr int kVersions = 10;
  constexpr uint64_t kBytes = 2 << 20;
  Evolving model(kBytes, 91, /*only=*/1);
  if (Rank() == 0) {
    PublishEvolving(s, &model, kVersions, [](int v, const Publisher::VersionReport& r) {
      for (const auto& c : r.consumers) {
        EXPECT_EQ(c.encoding, v == 0 ? std::string("full") : "delta of version " + std::to_string(v - 1))
            << r.BriefReport();
      }
    });
  } else {
    // The callback (the receiving thread) checks each version and keeps
    // none: the back buffer is free when the next delta comes.
    std::mutex mu;
    int next = 0;
    uint64_t exact = 0, wrong = 0;
    std::set<uint64_t> image_bytes, changed_bytes;  // every version's: one value each
    auto sub = Subscriber::Create(s.sub, [&](std::shared_ptr<const ModelVersion> got) {
      std::lock_guard<std::mutex> lock(mu);
      const int v = static_cast<int>(got->state.metadata.version);
      for (; next <= v; ++next) {
        if (next > 0) model.Step(0.02);
      }
      (SameTensors(got->state, model.model()) ? exact : wrong)++;
      image_bytes.insert(got->size_bytes);
      changed_bytes.insert(ChangedBytes(*got, 1));
    });
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60));
    std::lock_guard<std::mutex> lock(mu);
    const auto summary = (*sub)->summary();
    EXPECT_EQ(wrong, 0u) << "versions served that differ from the full send";
    EXPECT_EQ(exact, static_cast<uint64_t>(kVersions)) << summary.BriefReport();
    EXPECT_EQ(summary.received, static_cast<uint64_t>(kVersions)) << summary.BriefReport();
    EXPECT_EQ(summary.rejected, 0u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_versions, kVersions - 1u) << summary.BriefReport();
    // Version 1 copies the whole image (the back buffer held nothing known);
    // 2..9 bring the back buffer forward: the header and tensor 1 each.
    EXPECT_EQ(summary.delta_copies_avoided, kVersions - 2u) << summary.BriefReport();
    ASSERT_EQ(image_bytes.size(), 1u);
    ASSERT_EQ(changed_bytes.size(), 1u);
    EXPECT_LT(*changed_bytes.begin(), *image_bytes.begin() / 2);
    EXPECT_EQ(summary.delta_copied_bytes, *image_bytes.begin() + (kVersions - 2u) * *changed_bytes.begin())
        << summary.BriefReport();
  }
}

INSTANTIATE_TEST_SUITE_P(Protocols, MpiHostDeltaBackBuffer,
                         ::testing::Values(HostProtocol::kTwoSided, HostProtocol::kShm),
                         ProtocolName);

TEST(MpiHostDeltaFaults, WhenTheBackBufferCannotBeBroughtForwardTheServedImageIsCopiedWhole) {
  // Rank 0 speaks the wire protocol itself; each version changes 2% of the
  // elements of tensor 1 (of 3), and each good delta is against the version
  // the consumers serve. Where the back buffer cannot be brought forward
  // (copying the header and tensor 1 from the served image), the consumer
  // copies the served image whole, and every version served is still exact:
  //   v0 full; v1 delta: copy (no buffer known to hold anything);
  //   v2 delta: forward;
  //   v3 delta: copy (a reader holds v1, the back buffer; the callback keeps
  //     it until v3 is served); v4 delta: forward (the buffer of v2);
  //   v5 full; v6 delta: copy (the last delta rebuilt v4, not v5);
  //   v7 forged delta: brought forward, then refused (DataLoss: the rebuilt
  //     image fails its checksum), the back buffer spoiled;
  //   v8 delta: copy (no buffer holds v5 any more); v9 delta: forward;
  //   v10 delta with a flipped byte: brought forward, refused (DataLoss);
  //   v11 delta: copy; v12 delta: forward;
  //   v13 full with a data byte flipped: it lands in the back buffer (which
  //     held v11) and is refused (DataLoss); v14 delta: copy (the pool
  //     forgot what the back buffer held when it was handed out; brought
  //     forward, v14 would keep v13's flipped byte, fail its checksum and be
  //     lost);
  //   v15 delta: forward.
  // So 11 versions from deltas: 6 copies, 5 (v2, v4, v9, v12, v15) forward.
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  const std::vector<Send> script = {Send::kFull,  Send::kDelta, Send::kDelta,  Send::kDelta, Send::kDelta,
                                    Send::kFull,  Send::kDelta, Send::kForged, Send::kDelta, Send::kDelta,
                                    Send::kFlipped, Send::kDelta, Send::kDelta, Send::kFull, Send::kDelta,
                                    Send::kDelta};
  constexpr int kCorruptFull = 13;
  const int n = static_cast<int>(script.size());
  Evolving model(1 << 20, 92, /*only=*/1);
  if (Rank() == 0) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    std::vector<std::byte> held;  // what every consumer serves
    for (int v = 0; v < n && !HasFatalFailure(); ++v) {
      if (v > 0) model.Step(0.02);
      const std::vector<std::byte> image = ImageOf(model.model(), static_cast<uint64_t>(v));
      const Send what = script[static_cast<std::size_t>(v)];
      if (what == Send::kFull) {
        HandMadeImage made = Made(image);
        if (v == kCorruptFull) made.bytes[made.header_bytes + made.data_bytes / 2] ^= std::byte{1};
        StreamMadeByHand(comm, *session, v, made, nullptr, /*accept=*/true, /*rejected=*/v == kCorruptFull);
        if (v != kCorruptFull) held = image;
        continue;
      }
      SendDeltaByHand(comm, *session, v, image, what, &held);
    }
    SayGoodbyeByHand(&comm, *session);
  } else {
    std::mutex mu;
    int next = 0;
    uint64_t exact = 0, wrong = 0;
    std::shared_ptr<const ModelVersion> reader;  // holds v1 until v3 is served
    uint64_t image_bytes = 0, changed_bytes = 0;
    auto sub = Subscriber::Create(s.sub, [&](std::shared_ptr<const ModelVersion> got) {
      std::lock_guard<std::mutex> lock(mu);
      const int v = static_cast<int>(got->state.metadata.version);
      for (; next <= v; ++next) {
        if (next > 0) model.Step(0.02);
      }
      (SameTensors(got->state, model.model()) ? exact : wrong)++;
      image_bytes = got->size_bytes;
      changed_bytes = ChangedBytes(*got, 1);
      if (v == 1) reader = got;
      if (v == 3) reader.reset();
    });
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60));
    std::lock_guard<std::mutex> lock(mu);
    const auto summary = (*sub)->summary();
    EXPECT_EQ(wrong, 0u) << "versions served that differ from the full send";
    EXPECT_EQ(exact, static_cast<uint64_t>(n - 3)) << summary.BriefReport();
    EXPECT_EQ(summary.received, static_cast<uint64_t>(n - 3)) << summary.BriefReport();
    const auto rejections = (*sub)->Rejections();
    ASSERT_EQ(rejections.size(), 3u) << summary.BriefReport();
    EXPECT_EQ(rejections[0].version, 7u);
    EXPECT_EQ(rejections[1].version, 10u);
    EXPECT_EQ(rejections[2].version, static_cast<uint64_t>(kCorruptFull));
    for (const auto& r : rejections) EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status.ToString();
    EXPECT_EQ(summary.delta_versions, 11u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_copies_avoided, 5u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_copied_bytes, 6 * image_bytes + 5 * changed_bytes) << summary.BriefReport();
  }
}

// ------------------------------------------- fan-out relays forwarding deltas

// The host tier's delta takers routed through their own fan-out plan
// (issue 27 item 3): every version served is bit-identical to a full send,
// each consumer is moved the delta alone, and the producer sends it only to
// the root's children of the plan (relays forward it to the others).
class MpiFanoutDelta : public ::testing::TestWithParam<std::tuple<Fanout, int>> {};

TEST_P(MpiFanoutDelta, RelaysForwardTheDeltaAndEveryVersionIsBitIdentical) {
  const auto [fanout, arity] = GetParam();
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  s.pub.delta = DeltaMode::kOn;
  s.pub.fanout = fanout;
  s.pub.tree_arity = arity;
  s.pub.chunk_bytes = 32 << 10;  // the delta (~2% of 4 MiB changed) is several messages
  constexpr int kVersions = 5;
  Evolving model(4 << 20, 92);
  const int consumers = Size() - 1;
  // Tree: the producer sends to min(arity, consumers) ranks; direct: to all.
  const uint64_t root_children =
      static_cast<uint64_t>(fanout == Fanout::kDirect ? consumers : std::min(arity, consumers));
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    for (int v = 0; v < kVersions; ++v) {
      if (v > 0) model.Step(0.02);
      auto r = (*pub)->Publish(model.model(), v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->consumers.size(), static_cast<std::size_t>(consumers)) << r->BriefReport();
      for (const auto& c : r->consumers) {
        EXPECT_TRUE(c.delivered) << r->BriefReport();
        if (v == 0) {
          EXPECT_EQ(c.encoding, "full") << r->BriefReport();
          EXPECT_EQ(c.bytes_moved, r->bytes) << r->BriefReport();
        } else {
          EXPECT_EQ(c.encoding, "delta of version " + std::to_string(v - 1)) << r->BriefReport();
          EXPECT_EQ(c.bytes_moved, r->written_bytes) << "rank " << c.rank << ": " << r->BriefReport();
          EXPECT_LT(c.bytes_moved, r->bytes / 5) << r->BriefReport();
        }
      }
      if (v == 0) {
        // The whole image (plus the chunk plan, 8 bytes per message) per child of the root.
        EXPECT_GE(r->sent_bytes, root_children * r->bytes) << r->BriefReport();
        EXPECT_LE(r->sent_bytes, root_children * (r->bytes + 8 * (r->bytes / s.pub.chunk_bytes + 8)))
            << r->BriefReport();
      } else {
        // One delta per child of the root, not one per taker.
        EXPECT_EQ(r->sent_bytes, root_children * r->written_bytes) << r->BriefReport();
      }
    }
    ASSERT_TRUE((*pub)->Close().ok());
    EXPECT_TRUE((*pub)->summary().lost_consumers.empty()) << (*pub)->summary().BriefReport();
  } else {
    Served served;
    auto sub = Subscriber::Create(s.sub, served.Callback());
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60));
    const auto summary = (*sub)->summary();
    EXPECT_EQ(summary.received, static_cast<uint64_t>(kVersions)) << summary.BriefReport();
    EXPECT_EQ(summary.rejected, 0u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_versions, kVersions - 1u) << summary.BriefReport();
    std::lock_guard<std::mutex> lock(served.mu);
    for (int v = 0; v < kVersions; ++v) {
      if (v > 0) model.Step(0.02);
      auto it = served.versions.find(v);
      ASSERT_NE(it, served.versions.end()) << "version " << v << " was not served";
      EXPECT_TRUE(SameTensors(it->second->state, model.model())) << "version " << v;
    }
  }
}

// np 5, arity 2: 0 -> 1, 2 and 1 -> 3, 4 (rank 1 relays); arity 1: a chain
// of 4; direct: the producer sends every taker its delta (the reference).
INSTANTIATE_TEST_SUITE_P(Plans, MpiFanoutDelta,
                         ::testing::Values(std::make_tuple(Fanout::kTree, 2),
                                           std::make_tuple(Fanout::kTree, 1),
                                           std::make_tuple(Fanout::kDirect, 2)));

TEST(MpiFanoutDeltaFaults, RelayDroppedMidDeltaCostsItsSubtreeOneVersionThenFull) {
  // np 5, tree of arity 2, delta on. Rank 1 speaks the wire protocol itself:
  // it refuses version 0 (the others take it full: 0 -> 2, 3; 2 -> 4), then
  // answers version 1's delta offer naming the base offered (so the delta
  // plan over the takers 1..4 is 0 -> 1, 2; 1 -> 3, 4), takes its route,
  // forwards the delta's first message to 3 and 4, and stops. Ranks 3 and 4
  // then hold a partial delta: they serve nothing torn (Unavailable, not
  // served, still subscribed) and keep version 0; the producer drops rank 1;
  // rank 2 serves version 1 from its delta. Version 2 (a delta against 1)
  // reaches rank 2 as a delta and ranks 3 and 4, which do not hold version
  // 1, whole; every version served is bit-identical.
  if (Size() != 5) GTEST_SKIP() << "runs at np 5 (a relay with two receivers beside a direct taker)";
  Scenario s = HostScenario(Mode::kSync, HostProtocol::kTwoSided);
  s.pub.delta = DeltaMode::kOn;
  s.pub.fanout = Fanout::kTree;
  s.pub.tree_arity = 2;
  s.pub.peer_timeout_s = 6.0;    // the relay's receivers give up after 0.75 of it (4.5 s)
  s.pub.chunk_bytes = 32 << 10;  // the delta is several messages
  constexpr int kVersions = 3;
  Evolving model(4 << 20, 93);
  if (Rank() == 0) {
    auto pub = Publisher::Create(s.pub);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    std::vector<Publisher::VersionReport> reports;
    for (int v = 0; v < kVersions; ++v) {
      if (v > 0) model.Step(0.02);
      auto r = (*pub)->Publish(model.model(), v);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      reports.push_back(*r);
    }
    auto result = [&](int v, int rank) {
      for (const auto& c : reports[static_cast<std::size_t>(v)].consumers) {
        if (c.rank == rank) return c;
      }
      ADD_FAILURE() << "no result for rank " << rank << ": "
                    << reports[static_cast<std::size_t>(v)].BriefReport();
      return Publisher::ConsumerResult{};
    };
    const std::string r1 = reports[1].BriefReport(), r2 = reports[2].BriefReport();
    EXPECT_GT(reports[1].written_bytes, 0u) << r1;
    EXPECT_TRUE(result(1, 1).lost) << r1;
    EXPECT_TRUE(result(1, 2).delivered) << r1;
    EXPECT_EQ(result(1, 2).encoding, "delta of version 0") << r1;
    for (int rank : {3, 4}) {
      const auto c = result(1, rank);
      EXPECT_FALSE(c.delivered) << r1;
      EXPECT_FALSE(c.lost) << r1;
      EXPECT_NE(c.message.find("Unavailable"), std::string::npos) << r1;
    }
    ASSERT_EQ(reports[2].consumers.size(), 3u) << r2;
    EXPECT_EQ(result(2, 2).encoding, "delta of version 1") << r2;
    EXPECT_EQ(result(2, 2).bytes_moved, reports[2].written_bytes) << r2;
    for (int rank : {2, 3, 4}) EXPECT_TRUE(result(2, rank).delivered) << r2;
    for (int rank : {3, 4}) {
      EXPECT_EQ(result(2, rank).encoding, "full") << r2;
      EXPECT_EQ(result(2, rank).bytes_moved, reports[2].bytes) << r2;
    }
    EXPECT_EQ((*pub)->summary().lost_consumers, std::vector<int>{1});
    ASSERT_TRUE((*pub)->Close().ok());
    MPI_Barrier(MPI_COMM_WORLD);  // closed
    MPI_Barrier(MPI_COMM_WORLD);  // rank 1 has drained
  } else if (Rank() == 1) {
    MPI_Comm comm = MPI_COMM_NULL;
    auto session = JoinByHand(&comm);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    internal::Ready ready;
    ready.session = *session;
    internal::Announce a;
    MPI_Recv(&a, sizeof(a), MPI_BYTE, 0, internal::kTagAnnounce, comm, MPI_STATUS_IGNORE);
    ready.version = a.version;
    ready.accept = 0;  // version 0: refused
    ASSERT_TRUE(internal::SendPod(comm, 0, internal::kTagReady, ready, 30).ok());
    MPI_Recv(&a, sizeof(a), MPI_BYTE, 0, internal::kTagAnnounce, comm, MPI_STATUS_IGNORE);
    auto payload = internal::DecodeHostPayload(a);
    ASSERT_TRUE(payload.ok()) << payload.status().ToString();
    EXPECT_EQ(a.version, 1u);
    EXPECT_EQ(payload->routed, 1u);
    ASSERT_GT(payload->delta_bytes, payload->delta_chunk_bytes) << "the delta must be several messages";
    ready.version = a.version;
    ready.accept = 1;
    ready.path = internal::kPathDelta;
    ready.held_version = payload->delta_base_version;  // as if it held the base
    ready.held_checksum = payload->delta_base_checksum;
    ASSERT_TRUE(internal::SendPod(comm, 0, internal::kTagReady, ready, 30).ok());
    internal::Route route;
    MPI_Recv(&route, sizeof(route), MPI_BYTE, 0, internal::kTagRoute, comm, MPI_STATUS_IGNORE);
    EXPECT_EQ(route.parent, 0);
    ASSERT_EQ(route.children_count, 2);
    EXPECT_EQ(route.children[0], 3);
    EXPECT_EQ(route.children[1], 4);
    // The delta's first message, forwarded; then this relay stops.
    std::vector<std::byte> first(payload->delta_chunk_bytes);
    MPI_Recv(first.data(), static_cast<int>(first.size()), MPI_BYTE, 0, internal::kTagData, comm,
             MPI_STATUS_IGNORE);
    for (int child : {3, 4}) {
      EXPECT_TRUE(
          internal::SendBytesWithin(comm, child, internal::kTagData, first.data(), first.size(), 10).ok());
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the producer has closed
    DrainProducerData(comm);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    Served served;
    auto sub = Subscriber::Create(s.sub, served.Callback());
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_TRUE((*sub)->WaitUntilDone(60));
    const auto summary = (*sub)->summary();
    const bool behind_relay = Rank() != 2;
    EXPECT_TRUE(summary.producer_finished) << summary.BriefReport();
    EXPECT_EQ(summary.received, behind_relay ? 2u : 3u) << summary.BriefReport();
    EXPECT_EQ(summary.delta_versions, behind_relay ? 0u : 2u) << summary.BriefReport();
    const auto rejections = (*sub)->Rejections();
    if (behind_relay) {
      ASSERT_EQ(rejections.size(), 1u) << summary.BriefReport();
      EXPECT_EQ(rejections[0].version, 1u);
      EXPECT_EQ(rejections[0].status.code(), StatusCode::kUnavailable) << rejections[0].status.ToString();
      EXPECT_NE(rejections[0].status.message().find("relay rank 1"), std::string::npos)
          << rejections[0].status.ToString();
    } else {
      EXPECT_TRUE(rejections.empty()) << summary.BriefReport();
    }
    {
      std::lock_guard<std::mutex> lock(served.mu);
      for (int v = 0; v < kVersions; ++v) {
        if (v > 0) model.Step(0.02);
        auto it = served.versions.find(v);
        if (behind_relay && v == 1) {
          EXPECT_EQ(it, served.versions.end()) << "version 1 served behind the stopped relay";
          continue;
        }
        ASSERT_NE(it, served.versions.end()) << "version " << v << " was not served";
        EXPECT_TRUE(SameTensors(it->second->state, model.model())) << "version " << v;
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
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
  if ((*session)->size() < 2) {
    std::fprintf(stderr, "run under mpirun -np 2 or more (one producer, consumers)\n");
    return 1;
  }
  const int rc = RUN_ALL_TESTS();
  if (std::getenv("VIPER_TEST_KILL_RANK") != nullptr) {
    // A job that has lost a rank ends without MPI_Finalize: Open MPI 4.1's
    // finalize waited for ever on the dead rank in 2 of 6 runs at np 3.
    std::fflush(nullptr);
    _exit(rc);
  }
  session->reset();
  if (viper::transports::kept_until_finalize.use_count() > 0) {
    std::fprintf(stderr, "KeepUntilFinalize: the kept memory was not released at MPI_Finalize\n");
    return 1;
  }
  return rc;
}
