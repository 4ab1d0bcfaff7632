// PFS tier without MPI: atomic files, O_DIRECT, failures, corrupt and
// truncated versions, polling consumers, async supersession.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "test_util.h"
#include "viper/core/safetensors.h"
#include "viper/transports/gpu_channel.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace {

using testing_util::HasPattern;
using testing_util::MakeModel;
using testing_util::MakeTempDir;

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.push_back(e->d_name);
    }
    closedir(d);
  }
  return names;
}

TEST(TransportOptions, DefaultsAreValid) {
  std::string error;
  EXPECT_TRUE(Publisher::Options().IsValid(&error)) << error;
  EXPECT_TRUE(Subscriber::Options().IsValid(&error)) << error;
  PfsStore::Options pfs;
  EXPECT_FALSE(pfs.IsValid(&error));  // the directory has no default
  EXPECT_NE(error.find("dir"), std::string::npos);
  pfs.dir = "/tmp";
  EXPECT_TRUE(pfs.IsValid(&error)) << error;
}

TEST(TransportOptions, InvalidFieldsAreNamed) {
  std::string error;
  Publisher::Options p;
  p.notify = Notify::kPoll;  // poll needs pfs
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("notify"), std::string::npos);
  p = Publisher::Options();
  p.chunk_bytes = 0;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("chunk_bytes"), std::string::npos);
  p = Publisher::Options();
  p.tree_arity = 0;
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("tree_arity"), std::string::npos);
  p = Publisher::Options();
  p.fanout = Fanout::kTree;
  p.host_protocol = HostProtocol::kOneSided;  // relays forward two-sided messages only
  EXPECT_FALSE(p.IsValid(&error));
  EXPECT_NE(error.find("fanout"), std::string::npos);
  Subscriber::Options s;
  s.tier = Tier::kPfs;
  EXPECT_FALSE(s.IsValid(&error));
  EXPECT_NE(error.find("pfs_dir"), std::string::npos);
}

TEST(TransportEnums, RoundTrip) {
  for (Tier t : {Tier::kGpu, Tier::kHost, Tier::kPfs}) EXPECT_EQ(TierFromString(ToString(t)), t);
  for (Mode m : {Mode::kSync, Mode::kAsync}) EXPECT_EQ(ModeFromString(ToString(m)), m);
  for (Notify n : {Notify::kPush, Notify::kPoll}) EXPECT_EQ(NotifyFromString(ToString(n)), n);
  for (HostProtocol p : {HostProtocol::kTwoSided, HostProtocol::kOneSided}) {
    EXPECT_EQ(HostProtocolFromString(ToString(p)), p);
  }
  EXPECT_FALSE(TierFromString("nvme").has_value());
}

TEST(PfsStore, FileNames) {
  EXPECT_EQ(PfsStore::VersionFromFileName("model-v12.safetensors"), 12u);
  EXPECT_FALSE(PfsStore::VersionFromFileName(".model-v12.safetensors.tmp-1-0").has_value());
  EXPECT_FALSE(PfsStore::VersionFromFileName("model-v.safetensors").has_value());
  EXPECT_FALSE(PfsStore::VersionFromFileName("model-v1x.safetensors").has_value());
  PfsStore::Options o;
  o.dir = "/d";
  EXPECT_EQ(PfsStore(o).PathFor(3), "/d/model-v3.safetensors");
}

class PfsStoreRoundTrip : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(PfsStoreRoundTrip, WritesCompleteFilesAndReadsThemBack) {
  const auto [o_direct, threads] = GetParam();
  PfsStore::Options o;
  o.dir = MakeTempDir();
  o.o_direct = o_direct;
  o.writer_threads = threads;
  o.io_chunk_bytes = 64 * 1024;  // several calls per writer
  o.keep_versions = 2;
  PfsStore store(o);
  // 1 MB + 123 bytes: not a multiple of the 4096 alignment.
  const uint64_t size = (1 << 20) + 123;
  auto src = AlignedBuffer::Allocate(size);
  ASSERT_TRUE(src.ok());
  for (uint64_t i = 0; i < size; ++i) src->data()[i] = static_cast<std::byte>(i * 7 + 1);
  for (uint64_t v = 1; v <= 3; ++v) {
    auto stats = store.Write(v, src->data(), size);
    if (!stats.ok() && stats.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << "O_DIRECT not supported here: " << stats.status().ToString();
    }
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->path, store.PathFor(v));
    struct stat st;
    ASSERT_EQ(stat(stats->path.c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);  // O_DIRECT padding truncated away
  }
  // keep_versions = 2 leaves versions 2 and 3, and no temporaries.
  auto versions = store.ListVersions();
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(DirEntries(o.dir).size(), 2u);
  AlignedBuffer back;
  auto n = store.Read(3, &back);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, size);
  EXPECT_EQ(std::memcmp(back.data(), src->data(), size), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, PfsStoreRoundTrip,
                         ::testing::Values(std::make_tuple(false, 1), std::make_tuple(false, 4),
                                           std::make_tuple(true, 1), std::make_tuple(true, 3)));

TEST(PfsStore, MissingDirectoryIsAnErrorNotACrash) {
  PfsStore::Options o;
  o.dir = "/nonexistent/viper-dir";
  PfsStore store(o);
  std::vector<std::byte> data(100);
  auto stats = store.Write(1, data.data(), data.size());
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kIoError);
  EXPECT_NE(stats.status().message().find("/nonexistent/viper-dir"), std::string::npos);
  EXPECT_FALSE(store.ListVersions().ok());
}

TEST(PfsStore, FullDiskLeavesNoFileUnderAnyName) {
  // RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG, as a full disk
  // fails with ENOSPC: the write must fail and remove its temporary.
  PfsStore::Options o;
  o.dir = MakeTempDir();
  PfsStore store(o);
  std::vector<std::byte> data(1 << 20, std::byte{1});
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  auto stats = store.Write(7, data.data(), data.size());
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kIoError) << stats.status().ToString();
  EXPECT_TRUE(DirEntries(o.dir).empty()) << "a partial file was left behind";
}

Publisher::Options PfsPublisherOptions(const std::string& dir, Mode mode) {
  Publisher::Options o;
  o.tier = Tier::kPfs;
  o.notify = Notify::kPoll;
  o.mode = mode;
  o.pfs_dir = dir;
  o.pfs_keep_versions = 0;
  return o;
}

Subscriber::Options PollSubscriberOptions(const std::string& dir) {
  Subscriber::Options o;
  o.tier = Tier::kPfs;
  o.notify = Notify::kPoll;
  o.pfs_dir = dir;
  o.poll_period_s = 0.02;
  return o;
}

TEST(PfsPublisher, WritesValidSafetensorsFiles) {
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPublisherOptions(dir, Mode::kSync));
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  ModelState m = MakeModel(300000, 5);
  auto r = (*pub)->Publish(m, 42);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->version, 0u);  // the first version is the warm-up model, version 0
  EXPECT_TRUE(r->sent);
  // The file is a plain safetensors file any reader accepts (its header is
  // padded with spaces to 4096 bytes).
  safetensors::ParseOptions po;
  po.require_checksum = true;
  auto back = safetensors::ReadFile(dir + "/model-v0.safetensors", po);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->metadata.version, 0u);
  EXPECT_EQ(back->metadata.iteration, 42);
  EXPECT_TRUE(HasPattern(*back, 5));
  auto samples = (*pub)->CostSamples();
  ASSERT_GE(samples.size(), 2u);  // a stall and a transfer sample
  EXPECT_EQ(samples[0].phase, "stall");
}

TEST(PfsPublisher, CallbackGivenToCreateSeesAVersionThatIsThereAtOnce) {
  // Version 0 is in the directory before the consumer starts, so its first
  // scan swaps it in at once: a callback passed to Create sees it (one set
  // afterwards may not).
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPublisherOptions(dir, Mode::kSync));
  ASSERT_TRUE(pub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(200000, 4), 10).ok());
  std::mutex mu;
  std::vector<uint64_t> seen;
  auto sub = Subscriber::Create(PollSubscriberOptions(dir), [&](std::shared_ptr<const ModelVersion> v) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(v->state.metadata.version);
  });
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE((*sub)->WaitForVersion(0, 10).ok());
  (*sub)->Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, std::vector<uint64_t>{0});
}

TEST(PfsPublisher, PollingConsumerServesNewestAndRejectsCorruptAndTruncated) {
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPublisherOptions(dir, Mode::kSync));
  ASSERT_TRUE(pub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(200000, 1), 10).ok());  // version 0
  auto sub = Subscriber::Create(PollSubscriberOptions(dir));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  auto v0 = (*sub)->WaitForVersion(0, 10);
  ASSERT_TRUE(v0.ok()) << v0.status().ToString();
  EXPECT_TRUE(HasPattern((*v0)->state, 1));

  // Version 1 corrupt: one data byte flipped after the write (the checksum no longer matches).
  ASSERT_TRUE((*pub)->Publish(MakeModel(200000, 2), 20).ok());
  (*sub)->Stop();  // stop polling while the file is tampered with
  {
    std::fstream f(dir + "/model-v1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1000, std::ios::end);
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(-1000, std::ios::end);
    f.write(&c, 1);
  }
  // Version 2 truncated by 100 bytes.
  ASSERT_TRUE((*pub)->Publish(MakeModel(200000, 3), 30).ok());
  {
    const std::string p = dir + "/model-v2.safetensors";
    struct stat st;
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    ASSERT_EQ(truncate(p.c_str(), st.st_size - 100), 0);
  }
  auto sub2 = Subscriber::Create(PollSubscriberOptions(dir));
  ASSERT_TRUE(sub2.ok());
  // Newest first: 2 (truncated) and 1 (corrupt) are rejected, 0 is served.
  auto got = (*sub2)->WaitForVersion(0, 10);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->state.metadata.version, 0u);
  EXPECT_TRUE(HasPattern((*got)->state, 1));
  auto rejections = (*sub2)->Rejections();
  ASSERT_EQ(rejections.size(), 2u) << (*sub2)->summary().BriefReport();
  EXPECT_EQ(rejections[0].version, 2u);
  EXPECT_EQ(rejections[1].version, 1u);
  EXPECT_EQ(rejections[1].status.code(), StatusCode::kDataLoss) << rejections[1].status.ToString();
  // A good version 3 is picked up on a later poll.
  ASSERT_TRUE((*pub)->Publish(MakeModel(200000, 4), 40).ok());
  auto v3 = (*sub2)->WaitForVersion(3, 10);
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  EXPECT_TRUE(HasPattern((*v3)->state, 4));
}

TEST(PfsPublisher, HeldVersionStaysIntactWhileNewerArrive) {
  const std::string dir = MakeTempDir();
  // The receiving thread counts: atomic, and declared before the subscriber
  // so that it outlives the subscriber's thread on every path.
  std::atomic<int> callbacks{0};
  auto pub = Publisher::Create(PfsPublisherOptions(dir, Mode::kSync));
  ASSERT_TRUE(pub.ok());
  auto sub = Subscriber::Create(PollSubscriberOptions(dir));
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(100000, 11), 1).ok());
  auto held = (*sub)->WaitForVersion(0, 10);
  ASSERT_TRUE(held.ok());
  (*sub)->SetCallback([&](std::shared_ptr<const ModelVersion>) { ++callbacks; });
  for (uint32_t v = 1; v <= 4; ++v) {
    ASSERT_TRUE((*pub)->Publish(MakeModel(100000, 11 + v), v).ok());
    ASSERT_TRUE((*sub)->WaitForVersion(v, 10).ok());
  }
  (*sub)->Stop();
  // Four newer versions went through the landing buffers; the held one was
  // never overwritten (its buffer is not reused while referenced).
  EXPECT_TRUE(HasPattern((*held)->state, 11));
  EXPECT_EQ((*sub)->Current()->state.metadata.version, 4u);
  EXPECT_TRUE(HasPattern((*sub)->Current()->state, 15));
  EXPECT_GE(callbacks.load(), 1);
}

TEST(PfsPublisher, AsyncNewerSnapshotSupersedesUnsent) {
  const std::string dir = MakeTempDir();
  auto opts = PfsPublisherOptions(dir, Mode::kAsync);
  auto pub = Publisher::Create(opts);
  ASSERT_TRUE(pub.ok());
  const int kVersions = 8;
  for (int v = 0; v < kVersions; ++v) {
    auto r = (*pub)->Publish(MakeModel(2 << 20, 100 + v), v);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->stall_s, r->snapshot_s);  // async: the stall is the snapshot only
  }
  ASSERT_TRUE((*pub)->Flush().ok());
  auto summary = (*pub)->summary();
  // Every version is either sent or superseded, and the newest is always sent.
  EXPECT_EQ(summary.sent + summary.superseded, static_cast<uint64_t>(kVersions)) << summary.BriefReport();
  auto reports = (*pub)->Reports();
  ASSERT_EQ(reports.size(), static_cast<std::size_t>(kVersions));
  EXPECT_TRUE(reports.back().sent);
  safetensors::ParseOptions po;
  po.require_checksum = true;
  auto last = safetensors::ReadFile(dir + "/model-v7.safetensors", po);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE(HasPattern(*last, 107));
  ASSERT_TRUE((*pub)->Close().ok());
}

TEST(PfsPublisher, MissingDirectoryFailsAtCreate) {
  auto pub = Publisher::Create(PfsPublisherOptions("/nonexistent/viper", Mode::kSync));
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.status().code(), StatusCode::kIoError);
}

TEST(Transports, HostTierWithoutMpiInitIsAnErrorNotACrash) {
  Publisher::Options o;  // tier host: needs MPI initialised by the app
  auto pub = Publisher::Create(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_TRUE(pub.status().code() == StatusCode::kFailedPrecondition ||
              pub.status().code() == StatusCode::kUnavailable)
      << pub.status().ToString();
}

TEST(GpuTier, WithoutDeviceReportsUnavailable) {
  std::string reason;
  if (GpuChannel::DeviceAvailable(&reason)) GTEST_SKIP() << "a CUDA device is present; see the MPI GPU test";
  EXPECT_EQ(reason.rfind("no CUDA device", 0), 0u) << reason;
  auto ch = GpuChannel::Create(GpuChannel::Options());
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kUnavailable) << ch.status().ToString();
}

TEST(GpuTier, DefaultOptionsAreValid) {
  std::string error;
  EXPECT_TRUE(GpuChannel::Options().IsValid(&error)) << error;
  GpuChannel::Options o;
  o.pipeline_depth = 1;  // the pipelined path needs two chunks in flight
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("pipeline_depth"), std::string::npos);
}

TEST(CostSamples, CsvHasTheCostModelHeader) {
  const std::string path = MakeTempDir() + "/samples.csv";
  ASSERT_TRUE(WriteCostSamplesCsv(path, {{Tier::kHost, Mode::kAsync, "stall", 1000, 0.5}}).ok());
  ASSERT_TRUE(WriteCostSamplesCsv(path, {{Tier::kPfs, Mode::kSync, "load", 2000, 0.25}}, true).ok());
  std::ifstream in(path);
  std::string l1, l2, l3;
  std::getline(in, l1);
  std::getline(in, l2);
  std::getline(in, l3);
  EXPECT_EQ(l1, "tier,mode,phase,bytes,seconds");
  EXPECT_EQ(l2, "host,async,stall,1000,0.5");
  EXPECT_EQ(l3, "pfs,sync,load,2000,0.25");
}

}  // namespace
}  // namespace transports
}  // namespace viper
