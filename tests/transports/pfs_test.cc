// PFS tier without MPI: atomic files, O_DIRECT, failures, corrupt and
// truncated versions, polling consumers, async supersession.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <random>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <chrono>
#include <thread>
#include <type_traits>
#include <vector>

#include "test_util.h"
#include "viper/core/atomic_file.h"
#include "viper/core/log.h"
#include "viper/core/safetensors.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace {

using testing_util::HasPattern;
using testing_util::MakeModel;
using testing_util::MakeTempDir;
using testing_util::PfsPublisherOptions;
using testing_util::PollSubscriberOptions;

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

// One vocabulary (viper/core/transfer.h): the transports', the simulator's
// and the planners' names are the same types, parsed in one place.
TEST(TransportEnums, OneDefinitionInCore) {
  static_assert(std::is_same_v<Tier, viper::Tier>);
  static_assert(std::is_same_v<Mode, viper::TransferMode>);
  static_assert(std::is_same_v<Notify, viper::Notify>);
  auto bad = viper::TierFromString("nvme");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'nvme' (expected gpu, host or pfs)"), std::string::npos)
      << bad.status().ToString();
  EXPECT_FALSE(viper::TransferModeFromString("lazy").ok());
  EXPECT_EQ(*viper::NotifyFromString("poll"), Notify::kPoll);
}

// The one atomic-write routine the codec and the PFS store share: nothing
// visible under the target until the commit; an abandoned or failed write
// leaves no temporary.
TEST(AtomicFile, CommitMovesIntoPlaceAndAbandonRemovesTheTemporary) {
  const std::string dir = MakeTempDir();
  const std::string target = dir + "/f.bin", tmp = dir + "/.f.bin.tmp";
  {
    auto file = AtomicFile::Create(tmp);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_EQ(::write((*file)->fd(), "abc", 3), 3);
    EXPECT_NE(::access(target.c_str(), F_OK), 0);  // not visible before the commit
  }
  EXPECT_NE(::access(tmp.c_str(), F_OK), 0);  // abandoned: removed
  auto file = AtomicFile::Create(tmp);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(::write((*file)->fd(), "abc", 3), 3);
  ASSERT_TRUE((*file)->CommitTo(target).ok());
  struct stat st;
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 3);
  EXPECT_NE(::access(tmp.c_str(), F_OK), 0);
  // A rename that fails (the target is a directory) reports it and cleans up.
  ASSERT_EQ(::mkdir((dir + "/d").c_str(), 0755), 0);
  auto again = AtomicFile::Create(tmp);
  ASSERT_TRUE(again.ok());
  Status s = (*again)->CommitTo(dir + "/d");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("renaming"), std::string::npos) << s.ToString();
  again->reset();
  EXPECT_NE(::access(tmp.c_str(), F_OK), 0);
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

class PfsStoreRoundTrip : public ::testing::TestWithParam<std::tuple<bool, int, PfsStore::Layout>> {};

TEST_P(PfsStoreRoundTrip, WritesCompleteFilesAndReadsThemBack) {
  const auto [o_direct, threads, layout] = GetParam();
  PfsStore::Options o;
  o.dir = MakeTempDir();
  o.layout = layout;
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
  if (layout == PfsStore::Layout::kTfServing) {
    EXPECT_EQ(store.PathFor(3), o.dir + "/3/model.safetensors");
    EXPECT_EQ(DirEntries(o.dir + "/3"), std::vector<std::string>{"model.safetensors"});
  }
  AlignedBuffer back;
  auto n = store.Read(3, &back);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, size);
  EXPECT_EQ(std::memcmp(back.data(), src->data(), size), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, PfsStoreRoundTrip,
                         ::testing::Values(std::make_tuple(false, 1, PfsStore::Layout::kFlat),
                                           std::make_tuple(false, 4, PfsStore::Layout::kFlat),
                                           std::make_tuple(true, 1, PfsStore::Layout::kFlat),
                                           std::make_tuple(true, 3, PfsStore::Layout::kFlat),
                                           std::make_tuple(false, 1, PfsStore::Layout::kTfServing),
                                           std::make_tuple(true, 3, PfsStore::Layout::kTfServing)));

// Writes `bytes` to `path` as they are (hostile and foreign files).
void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file of `json` (length prefix, no padding) and `data`.
std::string RawSafetensors(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + data;
}

// What the reference safetensors library writes: no viper.* key at all.
const std::string kPlainFile =
    RawSafetensors(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "xy");

std::string Serialized(uint64_t version, uint32_t seed) {
  ModelState m = MakeModel(4096, seed);
  m.metadata.version = version;
  m.metadata.iteration = static_cast<int64_t>(10 * version);
  auto bytes = safetensors::Serialize(m);
  EXPECT_TRUE(bytes.ok());
  return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

TEST(PfsStore, LayoutNamesRoundTrip) {
  for (auto l : {PfsStore::Layout::kFlat, PfsStore::Layout::kTfServing}) {
    EXPECT_EQ(PfsStore::LayoutFromString(PfsStore::ToString(l)), l);
  }
  EXPECT_FALSE(PfsStore::LayoutFromString("tfserving").has_value());
  EXPECT_EQ(PfsStore::VersionFromDirName("12"), 12u);
  EXPECT_FALSE(PfsStore::VersionFromDirName(".12.tmp-1-0").has_value());
  EXPECT_FALSE(PfsStore::VersionFromDirName("").has_value());
  EXPECT_FALSE(PfsStore::VersionFromDirName("12345678901234567890").has_value());  // 20 digits
}

TEST(PfsStore, ReadCheckedSaysHowFarAVersionIsTrusted) {
  for (auto layout : {PfsStore::Layout::kFlat, PfsStore::Layout::kTfServing}) {
    SCOPED_TRACE(PfsStore::ToString(layout));
    PfsStore::Options o;
    o.dir = MakeTempDir();
    o.layout = layout;
    o.keep_versions = 0;
    PfsStore store(o);
    auto put = [&](uint64_t v, const std::string& bytes) {
      ASSERT_TRUE(store.Write(v, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()).ok());
    };
    put(1, Serialized(1, 3));
    put(2, kPlainFile);
    put(3, Serialized(4, 5));  // viper.version 4 in the file of version 3
    put(4, "\x08\0\0\0\0\0\0\0" + std::string(8, '['));
    AlignedBuffer buffer;
    auto v1 = store.ReadChecked(1, &buffer);
    ASSERT_TRUE(v1.ok()) << v1.status().ToString();
    EXPECT_TRUE(v1->verified());
    EXPECT_EQ(v1->TrustText(), "verified (data+header)");
    EXPECT_EQ(v1->state.metadata.iteration, 10);
    EXPECT_TRUE(HasPattern(v1->state, 3));
    auto v2 = store.ReadChecked(2, &buffer);
    ASSERT_TRUE(v2.ok()) << v2.status().ToString();
    EXPECT_FALSE(v2->verified());
    EXPECT_EQ(v2->TrustText(), "unverified (no Viper checksum)");
    EXPECT_EQ(v2->state.metadata.version, 2u);  // from the name
    auto v3 = store.ReadChecked(3, &buffer);
    EXPECT_EQ(v3.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(v3.status().message().find("the file name says version 3, its metadata (viper.version) 4"),
              std::string::npos)
        << v3.status().ToString();
    auto v4 = store.ReadChecked(4, &buffer);
    EXPECT_EQ(v4.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v4.status().message().find(store.PathFor(4)), std::string::npos) << v4.status().ToString();

    PfsStore::Options strict = o;
    strict.require_checksum = true;
    auto refused = PfsStore(strict).ReadChecked(2, &buffer);
    EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(refused.status().message().find("unverified"), std::string::npos) << refused.status().ToString();
  }
}

TEST(PfsStore, PruneKeepsTheNewestAndTheProtected) {
  PfsStore::Options o;
  o.dir = MakeTempDir();
  o.layout = PfsStore::Layout::kTfServing;
  o.keep_versions = 0;  // keep everything on write
  PfsStore store(o);
  const std::string bytes = Serialized(0, 1);
  for (uint64_t v = 1; v <= 5; ++v) {
    ASSERT_TRUE(store.Write(v, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()).ok());
  }
  auto removed = store.Prune(2, {1});
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(*store.ListVersions(), (std::vector<uint64_t>{1, 4, 5}));
  EXPECT_EQ(DirEntries(o.dir).size(), 3u);  // the version directories went too
  EXPECT_TRUE(store.Prune(0)->empty());     // 0 removes nothing
}

TEST(PfsStore, MissingDirectoryIsAnErrorNotACrash) {
  PfsStore::Options o;
  o.dir = "/nonexistent/viper-dir";
  PfsStore store(o);
  std::vector<std::byte> data(100);
  auto stats = store.Write(1, data.data(), data.size());
  ASSERT_FALSE(stats.ok());
  // The atomic write reports a missing parent as NotFound (ENOENT), other
  // failures as IoError: either way an error naming the directory.
  EXPECT_TRUE(stats.status().code() == StatusCode::kNotFound || stats.status().code() == StatusCode::kIoError)
      << stats.status().ToString();
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

TEST(PfsPublisher, PollingConsumerSkipsHostileFilesWithAReason) {
  // Each hostile class in the model directory, newer than the good version 0:
  // the consumer refuses every one with a reason and keeps serving version 0
  // (no crash, no stall, nothing corrupt served).
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPublisherOptions(dir, Mode::kSync));
  ASSERT_TRUE(pub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(100000, 6), 10).ok());  // version 0
  std::string many_tensors = "{";
  for (int i = 0; i <= 1000; ++i) {
    many_tensors += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  std::string damaged = Serialized(5, 9);
  damaged.replace(damaged.find("\"viper.checksum\""), 16, "\"Viper.checksum\"");
  std::string edited = Serialized(6, 9);
  edited.replace(edited.find("\"viper.iteration\":\"60\""), 22, "\"viper.iteration\":\"70\"");
  WriteRaw(dir + "/model-v1.safetensors", RawSafetensors(std::string(600000, '['), ""));
  WriteRaw(dir + "/model-v2.safetensors", RawSafetensors(R"({"a":)" + std::string(300000, '[') +
                                                             std::string(300000, ']') + "}", ""));
  WriteRaw(dir + "/model-v3.safetensors",
           RawSafetensors(R"({"__metadata__":{"viper.version":"3"},"__metadata__":{}})", ""));
  WriteRaw(dir + "/model-v4.safetensors", kPlainFile);  // unverified: Viper's consumer requires a checksum
  WriteRaw(dir + "/model-v5.safetensors", damaged);
  WriteRaw(dir + "/model-v6.safetensors", edited);
  auto sub = Subscriber::Create(PollSubscriberOptions(dir));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  auto got = (*sub)->WaitForVersion(0, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->state.metadata.version, 0u);
  EXPECT_TRUE(HasPattern((*got)->state, 6));
  (*sub)->Stop();
  auto rejections = (*sub)->Rejections();
  ASSERT_EQ(rejections.size(), 6u) << (*sub)->summary().BriefReport();
  const std::vector<std::string> reasons = {"header checksum mismatch", "'Viper.checksum' is not a key Viper writes",
                                            "unverified", "duplicate key '__metadata__'",
                                            "entry must be an object", "header must be a JSON object"};
  for (std::size_t i = 0; i < rejections.size(); ++i) {
    EXPECT_EQ(rejections[i].version, 6u - i);
    EXPECT_NE(rejections[i].status.message().find(reasons[i]), std::string::npos)
        << rejections[i].status.ToString();
    EXPECT_LT(rejections[i].status.message().size(), 600u);
  }
}

TEST(PfsPublisher, UnverifiedFilesAreServedOnlyWhenAllowedAndSaySo) {
  // A TF Serving layout directory: Viper's version 0, then another writer's
  // plain file as version 1.
  const std::string dir = MakeTempDir();
  auto popts = PfsPublisherOptions(dir, Mode::kSync);
  popts.pfs_layout = PfsStore::Layout::kTfServing;
  auto pub = Publisher::Create(popts);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  ASSERT_TRUE((*pub)->Publish(MakeModel(100000, 8), 10).ok());
  ASSERT_EQ(DirEntries(dir + "/0"), std::vector<std::string>{"model.safetensors"});
  ASSERT_EQ(mkdir((dir + "/1").c_str(), 0755), 0);
  WriteRaw(dir + "/1/model.safetensors", kPlainFile);

  auto sopts = PollSubscriberOptions(dir);
  sopts.pfs_layout = PfsStore::Layout::kTfServing;
  auto strict = Subscriber::Create(sopts);  // the default: a checksum is required
  ASSERT_TRUE(strict.ok());
  auto v0 = (*strict)->WaitForVersion(0, 10);
  ASSERT_TRUE(v0.ok()) << v0.status().ToString();
  EXPECT_TRUE((*v0)->verified);
  EXPECT_EQ((*v0)->state.metadata.version, 0u);
  (*strict)->Stop();
  ASSERT_EQ((*strict)->Rejections().size(), 1u);
  EXPECT_NE((*strict)->Rejections()[0].status.message().find("unverified"), std::string::npos);

  sopts.pfs_require_checksum = false;
  auto lenient = Subscriber::Create(sopts);
  ASSERT_TRUE(lenient.ok());
  auto v1 = (*lenient)->WaitForVersion(1, 10);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_FALSE((*v1)->verified);
  EXPECT_EQ((*v1)->state.metadata.version, 1u);  // from the directory name
  ASSERT_EQ((*v1)->state.size(), 1u);
  EXPECT_EQ((*v1)->state.tensors()[0].name, "a");
}

// The library reports through the installed log sink (viper/core/log.h),
// not by printing: a rejected version reaches it as a warning.
TEST(PfsPublisher, RejectionIsReportedToTheInstalledLogSink) {
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPublisherOptions(dir, Mode::kSync));
  ASSERT_TRUE(pub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(20000, 1), 10).ok());
  const std::string p = dir + "/model-v0.safetensors";
  struct stat st;
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  ASSERT_EQ(truncate(p.c_str(), st.st_size - 100), 0);
  std::mutex mu;
  std::vector<std::string> lines;
  LogSink previous = SetLogSink([&](LogLevel level, const std::string& component, const std::string& message) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(std::string(ToString(level)) + " " + component + ": " + message);
  });
  {
    auto sub = Subscriber::Create(PollSubscriberOptions(dir));
    ASSERT_TRUE(sub.ok());
    for (int i = 0; i < 200 && (*sub)->Rejections().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE((*sub)->Rejections().empty());
  }
  SetLogSink(previous);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("warning transports: rejected version 0 from " + p, 0), 0u) << lines[0];
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

// pfs_delta: each version after the first is written as a delta against the
// previous one (a small file), and a polling consumer rebuilds and verifies
// it: every served version bit-identical to what was published, including
// one read from a fresh consumer that must walk the whole chain.
TEST(PfsPublisher, DeltaVersionsAreRebuiltBitIdenticalByAPollingConsumer) {
  const std::string dir = MakeTempDir();
  Publisher::Options po = PfsPublisherOptions(dir, Mode::kSync);
  po.pfs_delta = true;
  auto pub = Publisher::Create(po);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  ModelState m = MakeModel(400000, 7);
  auto sub = Subscriber::Create(PollSubscriberOptions(dir));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  std::mt19937 rng(11);
  for (uint64_t v = 0; v < 5; ++v) {
    // Before the publish: the consumer may serve v before Publish returns.
    const uint64_t moved_before = (*sub)->summary().bytes_moved;
    if (v > 0) {
      // About 1% of one tensor's elements change; the others stay (frozen).
      Tensor& x = m.mutable_tensors()[1];
      uint32_t* p = x.As<uint32_t>();
      std::uniform_int_distribution<int64_t> at(0, x.NumElements() - 1);
      for (int64_t k = 0; k < x.NumElements() / 100; ++k) p[at(rng)] ^= 0x00010000u;
    }
    auto r = (*pub)->Publish(m, static_cast<int64_t>(10 * (v + 1)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (v == 0) {
      EXPECT_EQ(r->encoding, "full");
    } else {
      EXPECT_EQ(r->encoding, "delta of version " + std::to_string(v - 1)) << r->BriefReport();
      EXPECT_LT(r->written_bytes, r->bytes / 10) << r->BriefReport();
      struct stat st;
      EXPECT_EQ(::stat((dir + "/model-v" + std::to_string(v) + ".delta").c_str(), &st), 0) << v;
    }
    auto got = (*sub)->WaitForVersion(v, 10);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if ((*got)->state.metadata.version == v && v > 0 && (*sub)->summary().delta_versions > 0) {
      // The consumer held v - 1 (it polls each version before the next is
      // published): it read v's delta file only, not the chain's full base.
      struct stat st;
      ASSERT_EQ(::stat((dir + "/model-v" + std::to_string(v) + ".delta").c_str(), &st), 0);
      EXPECT_EQ((*sub)->summary().bytes_moved - moved_before, static_cast<uint64_t>(st.st_size))
          << "version " << v << ": " << (*sub)->summary().BriefReport();
    }
    ASSERT_EQ((*got)->state.tensors().size(), m.tensors().size());
    for (size_t t = 0; t < m.tensors().size(); ++t) {
      const Tensor& a = (*got)->state.tensors()[t];
      const Tensor& b = m.tensors()[t];
      ASSERT_EQ(a.size_bytes, b.size_bytes);
      EXPECT_EQ(std::memcmp(a.data, b.data, b.size_bytes), 0) << "version " << v << " tensor " << t;
    }
  }
  // Each delta version was rebuilt from the version held (v1..v4).
  EXPECT_EQ((*sub)->summary().delta_versions, 4u) << (*sub)->summary().BriefReport();
  // The cost samples carry the bytes a delta version's transfer wrote, not
  // the image's: the cost model sees what updates really move.
  int small_transfers = 0;
  for (const auto& c : (*pub)->CostSamples()) {
    if (c.phase == "transfer" && c.bytes < m.tensors()[1].size_bytes / 10) ++small_transfers;
  }
  EXPECT_EQ(small_transfers, 4);
  (*sub)->Stop();
  // A consumer that starts now holds no base: it reads v4 through its chain.
  auto fresh = Subscriber::Create(PollSubscriberOptions(dir));
  ASSERT_TRUE(fresh.ok());
  auto last = (*fresh)->WaitForVersion(4, 10);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(std::memcmp((*last)->state.tensors()[1].data, m.tensors()[1].data, m.tensors()[1].size_bytes), 0);
  // A delta publisher needs the pfs tier and the flat layout.
  Publisher::Options bad = po;
  bad.pfs_layout = PfsStore::Layout::kTfServing;
  std::string error;
  EXPECT_FALSE(bad.IsValid(&error));
  EXPECT_NE(error.find("pfs_delta"), std::string::npos) << error;
}

TEST(PfsPublisher, DirectoryThatCannotBeMadeFailsAtCreate) {
  // A missing directory is created (pfs_security_test.cc); one under a
  // regular file cannot be.
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/file") << "x";
  auto pub = Publisher::Create(PfsPublisherOptions(dir + "/file/viper", Mode::kSync));
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.status().code(), StatusCode::kIoError) << pub.status().ToString();
}

TEST(Transports, HostTierWithoutMpiInitIsAnErrorNotACrash) {
  Publisher::Options o;  // tier host: needs MPI initialised by the app
  auto pub = Publisher::Create(o);
  ASSERT_FALSE(pub.ok());
  EXPECT_TRUE(pub.status().code() == StatusCode::kFailedPrecondition ||
              pub.status().code() == StatusCode::kUnavailable)
      << pub.status().ToString();
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
