// The PFS tier against another local user and against earlier runs (issue
// 26): a private model directory (created 0700, files 0600, a foreign-owned
// or group/other-writable one refused), a consumer that serves only its own
// run's versions, reads that never follow a link nor block on a FIFO,
// removals that never leave the directory, the leftovers of dead writers
// removed, a full disk at the keep-N limit, a refused version retried once
// its file changes.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "hmac_sha256.h"
#include "shm_segment.h"
#include "test_util.h"
#include "viper/core/safetensors.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/private_dir.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace {

using testing_util::HasPattern;
using testing_util::MakeModel;
using testing_util::MakeTempDir;

Publisher::Options PfsPub(const std::string& dir, const std::string& session = "") {
  Publisher::Options o;
  o.tier = Tier::kPfs;
  o.notify = Notify::kPoll;
  o.mode = Mode::kSync;
  o.pfs_dir = dir;
  o.pfs_keep_versions = 0;
  o.session_id = session;
  return o;
}

Subscriber::Options PollSub(const std::string& dir, const std::string& session = "") {
  Subscriber::Options o;
  o.tier = Tier::kPfs;
  o.notify = Notify::kPoll;
  o.pfs_dir = dir;
  o.poll_period_s = 0.02;
  o.session_id = session;
  return o;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// A pid that is certainly dead: a child that exited and was reaped.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// Item 12 and 5: a missing directory is created, privately; the model files
// are 0600 whatever the umask.
TEST(PfsSecurity, PublisherCreatesAMissingDirectoryPrivatelyAndWritesPrivateFiles) {
  const std::string base = MakeTempDir();
  const std::string dir = base + "/runs/model";
  const mode_t old = ::umask(0);  // the most permissive umask: modes must not depend on it
  auto pub = Publisher::Create(PfsPub(dir));
  ::umask(old);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_EQ(ModeOf(base + "/runs"), 0700u);
  const mode_t old2 = ::umask(0);
  auto r = (*pub)->Publish(MakeModel(50000, 1), 1);
  ::umask(old2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ModeOf(dir + "/model-v0.safetensors"), 0600u);
  // tf-serving: the version directory is private too.
  Publisher::Options tf = PfsPub(base + "/tf");
  tf.pfs_layout = PfsStore::Layout::kTfServing;
  auto tfpub = Publisher::Create(tf);
  ASSERT_TRUE(tfpub.ok()) << tfpub.status().ToString();
  ASSERT_TRUE((*tfpub)->Publish(MakeModel(50000, 1), 1).ok());
  EXPECT_EQ(ModeOf(base + "/tf/0"), 0700u);
  EXPECT_EQ(ModeOf(base + "/tf/0/model.safetensors"), 0600u);
}

// Item 3: a directory others may write into, another user's, or a link to
// one, is refused by the producer and by the consumer, with the reason.
TEST(PfsSecurity, ForeignOrWritableDirectoryIsRefused) {
  const std::string dir = MakeTempDir();
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  auto pub = Publisher::Create(PfsPub(dir));
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("group or others may write"), std::string::npos)
      << pub.status().ToString();
  auto sub = Subscriber::Create(PollSub(dir));
  ASSERT_FALSE(sub.ok());
  EXPECT_NE(sub.status().message().find("group or others may write"), std::string::npos);
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  EXPECT_TRUE(Publisher::Create(PfsPub(dir)).ok());
  // A link to a private directory is not the directory.
  const std::string link = MakeTempDir() + "/link";
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  auto linked = Publisher::Create(PfsPub(link));
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("symbolic link"), std::string::npos) << linked.status().ToString();
  if (::geteuid() != 0) GTEST_SKIP() << "another user's directory needs root (chown)";
  const std::string theirs = MakeTempDir();
  ASSERT_EQ(::chown(theirs.c_str(), 4242, 4242), 0);  // as if uid 4242 had made it first
  auto foreign = Publisher::Create(PfsPub(theirs));
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("belongs to uid 4242"), std::string::npos)
      << foreign.status().ToString();
  auto foreign_sub = Subscriber::Create(PollSub(theirs));
  ASSERT_FALSE(foreign_sub.ok());
}

// Items 3 and 4: another run's versions (an earlier run's, or planted ones
// with valid checksums and higher numbers) are never served; this run's are.
TEST(PfsSecurity, ConsumerServesOnlyItsOwnRunsVersions) {
  const std::string dir = MakeTempDir();
  {
    auto stale = Publisher::Create(PfsPub(dir, NewSessionId()));
    ASSERT_TRUE(stale.ok());
    for (int v = 0; v < 13; ++v) ASSERT_TRUE((*stale)->Publish(MakeModel(20000, 900 + v), v).ok());
  }
  const std::string session = NewSessionId();
  EXPECT_EQ(session.size(), 32u);
  EXPECT_NE(session, NewSessionId());
  auto sub = Subscriber::Create(PollSub(dir, session));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  // A writer without a session id is not this run either.
  {
    auto anonymous = Publisher::Create(PfsPub(MakeTempDir()));
    ASSERT_TRUE(anonymous.ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ((*sub)->Current(), nullptr) << "another run's version was served";
  // This run's versions 0 and 1 (lower numbers than the stale 12).
  auto pub = Publisher::Create(PfsPub(dir, session));
  ASSERT_TRUE(pub.ok());
  // Its versions start at 0 and overwrite the stale 0 and 1; 2..12 stay.
  ASSERT_TRUE((*pub)->Publish(MakeModel(20000, 7), 100).ok());
  auto got = (*sub)->WaitForVersion(0, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(HasPattern((*got)->state, 7));
  ASSERT_TRUE((*pub)->Publish(MakeModel(20000, 8), 200).ok());
  got = (*sub)->WaitForVersion(1, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->state.metadata.version, 1u);
  EXPECT_TRUE(HasPattern((*got)->state, 8));
  (*sub)->Stop();
  EXPECT_EQ((*sub)->Current()->state.metadata.version, 1u);
  bool named = false;
  for (const auto& r : (*sub)->Rejections()) {
    named = named || r.status.message().find("not a version of this run") != std::string::npos;
  }
  EXPECT_TRUE(named) << (*sub)->summary().BriefReport();
}

// Item 8: a FIFO named like a model neither hangs the poll loop nor its
// stop(); a link to a root-only file is refused without reading it.
TEST(PfsSecurity, FifoOrLinkNamedLikeAModelIsRefusedWithoutBlocking) {
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPub(dir));
  ASSERT_TRUE(pub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(20000, 3), 1).ok());  // version 0
  ASSERT_EQ(::mkfifo((dir + "/model-v5.safetensors").c_str(), 0600), 0);
  const std::string secret = MakeTempDir() + "/secret";
  std::ofstream(secret) << "TOP-SECRET-BYTES";
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  ASSERT_EQ(::symlink(secret.c_str(), (dir + "/model-v6.safetensors").c_str()), 0);
  auto sub = Subscriber::Create(PollSub(dir));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  auto got = (*sub)->WaitForVersion(0, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Stop() must return (on main it never did: the open of the FIFO blocked).
  auto stopped = std::async(std::launch::async, [&] { (*sub)->Stop(); });
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "Stop() hung";
  EXPECT_EQ((*sub)->Current()->state.metadata.version, 0u);
  int fifo = 0, link = 0;
  for (const auto& r : (*sub)->Rejections()) {
    EXPECT_EQ(r.status.message().find("TOP-SECRET"), std::string::npos) << r.status.ToString();
    if (r.version == 5 && r.status.message().find("not a regular file") != std::string::npos) ++fifo;
    if (r.version == 6 && r.status.message().find("symbolic link") != std::string::npos) ++link;
  }
  EXPECT_EQ(fifo, 1) << (*sub)->summary().BriefReport();
  EXPECT_EQ(link, 1) << (*sub)->summary().BriefReport();
}

// Item 7: the producer's rewrite of a tf-serving version whose directory is
// a link elsewhere removes the link, never what it points to; pruning
// leaves such a link alone.
TEST(PfsSecurity, RewriteAndPruneNeverDeleteThroughALink) {
  const std::string dir = MakeTempDir(), elsewhere = MakeTempDir();
  std::ofstream(elsewhere + "/model.safetensors") << "precious";
  ASSERT_EQ(::symlink(elsewhere.c_str(), (dir + "/2").c_str()), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), (dir + "/1").c_str()), 0);
  PfsStore::Options o;
  o.dir = dir;
  o.layout = PfsStore::Layout::kTfServing;
  o.keep_versions = 1;
  PfsStore store(o);
  auto listed = store.ListVersions();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty()) << "a link is not a version";
  const std::string bytes(5000, 'x');
  for (uint64_t v : {2, 3}) {
    auto w = store.Write(v, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  EXPECT_TRUE(Exists(elsewhere + "/model.safetensors")) << "deleted through the link";
  struct stat st;
  ASSERT_EQ(::lstat((dir + "/1").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "pruning touched a link";
  auto pruned = store.Prune(1);
  ASSERT_TRUE(pruned.ok());
  EXPECT_TRUE(Exists(elsewhere + "/model.safetensors"));
  EXPECT_TRUE(Exists(dir + "/3/model.safetensors"));
}

// Item 9: temporaries of dead writers (their pid is in the name) are removed
// by the next write and by pruning; a live writer's are kept. A dead
// producer's shared-memory segment is removed by the next producer.
TEST(PfsSecurity, DeadWritersLeftoversAreRemoved) {
  const std::string dir = MakeTempDir();
  const pid_t dead = DeadPid();
  const std::string dead_tmp = dir + "/.model-v0.safetensors.tmp-" + std::to_string(dead) + "-0";
  const std::string live_tmp = dir + "/.model-v0.safetensors.tmp-" + std::to_string(::getppid()) + "-0";
  std::ofstream(dead_tmp) << std::string(1000, 'a');
  std::ofstream(live_tmp) << std::string(1000, 'a');
  PfsStore::Options o;
  o.dir = dir;
  PfsStore store(o);
  const std::string bytes(5000, 'x');
  ASSERT_TRUE(store.Write(1, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()).ok());
  EXPECT_FALSE(Exists(dead_tmp)) << "a dead writer's temporary survived the next write";
  EXPECT_TRUE(Exists(live_tmp)) << "a live writer's temporary was removed";
  // keep-N pruning (model-dir) removes them too; tf-serving's are directories.
  PfsStore::Options t = o;
  t.layout = PfsStore::Layout::kTfServing;
  const std::string dead_dir = dir + "/.4.tmp-" + std::to_string(dead) + "-3";
  ASSERT_EQ(::mkdir(dead_dir.c_str(), 0700), 0);
  std::ofstream(dead_dir + "/model.safetensors") << "partial";
  ASSERT_TRUE(PfsStore(t).Prune(5).ok());
  EXPECT_FALSE(Exists(dead_dir));
  ::unlink(live_tmp.c_str());

  // The shared-memory segment of a producer killed before its consumers'
  // Ready: left linked, its pid in the name.
  const std::string seg = "/viper-" + std::to_string(dead) + "-00000000deadbeef-r0-g1";
  const std::string live_seg = "/viper-" + std::to_string(::getppid()) + "-00000000deadbeef-r0-g1";
  for (const auto& name : {seg, live_seg}) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) GTEST_SKIP() << "no POSIX shared memory here";
    ASSERT_EQ(::ftruncate(fd, 8192), 0);
    ::close(fd);
  }
  const auto removed = internal::RemoveDeadSegments();
  EXPECT_FALSE(Exists("/dev/shm" + seg)) << "a dead producer's segment survived";
  EXPECT_TRUE(Exists("/dev/shm" + live_seg)) << "a live producer's segment was removed";
  ::shm_unlink(live_seg.c_str());
  ::shm_unlink(seg.c_str());
  EXPECT_EQ(removed.size(), 1u);
}

// Item 10: at the keep-N limit on a full disk, the store prunes first and
// the write succeeds: the disk need not hold N + 1 versions. Needs a small
// tmpfs (root).
TEST(PfsSecurity, FullDiskAtTheKeepLimitPrunesBeforeWriting) {
  const std::string dir = MakeTempDir();
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here (" << std::strerror(errno) << "): needs root";
  }
  PfsStore::Options o;
  o.dir = dir;
  o.keep_versions = 2;
  PfsStore store(o);
  const std::string bytes(450 * 1024, 'x');  // two fit in 1 MiB, three do not
  Status last = Status::Ok();
  for (uint64_t v = 0; v < 5; ++v) {
    auto w = store.Write(v, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
    if (!w.ok()) last = w.status();
  }
  auto versions = store.ListVersions();
  ::umount2(dir.c_str(), MNT_DETACH);
  ASSERT_TRUE(last.ok()) << last.ToString();
  ASSERT_TRUE(versions.ok());
  ASSERT_FALSE(versions->empty());
  EXPECT_EQ(versions->back(), 4u);
}

// Item 11 (C++ side): a refused version is read again once its file
// changes (fixed or replaced), not refused for ever.
TEST(PfsSecurity, RefusedVersionIsRetriedWhenItsFileChanges) {
  const std::string dir = MakeTempDir();
  auto pub = Publisher::Create(PfsPub(dir));
  ASSERT_TRUE(pub.ok());
  ASSERT_TRUE((*pub)->Publish(MakeModel(20000, 1), 1).ok());  // version 0
  auto sub = Subscriber::Create(PollSub(dir));
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE((*sub)->WaitForVersion(0, 10).ok());
  // Version 1 lands broken (truncated), is refused, then is fixed in place.
  PfsStore::Options so;
  so.dir = dir;
  so.keep_versions = 0;
  ModelState m = MakeModel(20000, 2);
  m.metadata.version = 1;
  auto bytes = safetensors::Serialize(m);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(PfsStore(so).Write(1, bytes->data(), bytes->size() / 2).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ((*sub)->Current()->state.metadata.version, 0u);
  EXPECT_GE((*sub)->Rejections().size(), 1u);
  ASSERT_TRUE(PfsStore(so).Write(1, bytes->data(), bytes->size()).ok());
  auto got = (*sub)->WaitForVersion(1, 10);
  ASSERT_TRUE(got.ok()) << "the fixed version was never retried: " << got.status().ToString();
  EXPECT_TRUE(HasPattern((*got)->state, 2));
}

// Item 3's keyed digest: with a key file, a consumer serves only versions
// made by a key holder; a version with valid checksums and the right session
// id but made without the key (or with another) is refused. The key file
// itself must be private.
TEST(PfsSecurity, KeyedDigestProvesOrigin) {
  const std::string keys = MakeTempDir();
  auto key_file = [&](const std::string& name, const std::string& bytes, mode_t mode) {
    const std::string path = keys + "/" + name;
    std::ofstream(path) << bytes;
    ::chmod(path.c_str(), mode);
    return path;
  };
  const std::string key = key_file("key", "0123456789abcdef0123456789abcdef", 0600);
  const std::string other = key_file("other", "fedcba9876543210fedcba9876543210", 0600);
  // The digest itself: RFC 4231 test case 2.
  internal::HmacSha256 h("Jefe");
  const std::string m = "what do ya want for nothing?";
  h.Update(m.data(), m.size());
  EXPECT_EQ(h.HexDigest(), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key others may read, or too short, is refused.
  Publisher::Options bad = PfsPub(MakeTempDir());
  bad.hmac_key_file = key_file("readable", "0123456789abcdef0123456789abcdef", 0644);
  auto refused = Publisher::Create(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("others may read it"), std::string::npos) << refused.status().ToString();
  bad.hmac_key_file = key_file("short", "abc", 0600);
  EXPECT_FALSE(Publisher::Create(bad).ok());

  const std::string dir = MakeTempDir(), session = NewSessionId();
  Subscriber::Options so = PollSub(dir, session);
  so.hmac_key_file = key;
  auto sub = Subscriber::Create(so);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  {
    // Same session id, valid checksums, no key / another key: refused.
    auto forged = Publisher::Create(PfsPub(dir, session));
    ASSERT_TRUE(forged.ok());
    ASSERT_TRUE((*forged)->Publish(MakeModel(20000, 66), 1).ok());  // version 0
    Publisher::Options wrong = PfsPub(dir, session);
    wrong.hmac_key_file = other;
    auto wrong_key = Publisher::Create(wrong);
    ASSERT_TRUE(wrong_key.ok()) << wrong_key.status().ToString();
    ASSERT_TRUE((*wrong_key)->Publish(MakeModel(20000, 67), 1).ok());  // version 0 again
    ASSERT_TRUE((*wrong_key)->Publish(MakeModel(20000, 68), 2).ok());  // version 1
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ((*sub)->Current(), nullptr) << "a version made without the key was served";
  Publisher::Options good = PfsPub(dir, session);
  good.hmac_key_file = key;
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    good.mode = mode;
    auto pub = Publisher::Create(good);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*pub)->Publish(MakeModel(20000, 70 + i), 10 + i).ok());
    ASSERT_TRUE((*pub)->Close().ok());
  }
  auto got = (*sub)->WaitForVersion(2, 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString() << " " << (*sub)->summary().BriefReport();
  EXPECT_TRUE(HasPattern((*got)->state, 72));
  bool named = false;
  for (const auto& r : (*sub)->Rejections()) {
    named = named || r.status.message().find("viper-run.hmac") != std::string::npos;
  }
  EXPECT_TRUE(named) << (*sub)->summary().BriefReport();
}

}  // namespace
}  // namespace transports
}  // namespace viper
