// Races between publishing and reading, without MPI, in randomised
// interleavings (the seed is printed; VIPER_RACES_SEED replays one):
//  - the PFS tier: an async publisher (its two staging buffers, the sender
//    thread, atomic files, old versions deleted) and a polling subscriber
//    (its landing buffers), read by threads that hold versions while newer
//    ones arrive;
//  - the staging double buffer the host tier's async publisher sends from:
//    a snapshot into one buffer while the other is read, a pending one
//    superseded.
// Every version a reader gets must parse with its checksum verified, carry
// the pattern of the version it claims, be as long as that version was, and
// stay so for as long as it is held. Run under ThreadSanitizer by
// scripts/sanitize.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "staging.h"  // internal
#include "test_util.h"
#include "viper/core/safetensors.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace {

using testing_util::HasPattern;
using testing_util::MakeModel;

constexpr int kTensors = 3;

// The model published as version `v`: its size varies (so the staging and
// landing buffers are regrown and reused in every order) and a few are
// large enough for the snapshot to be split over the copy threads.
uint64_t BytesFor(uint64_t v) {
  if (v % 2500 == 1249) return 9ull << 20;  // > 2 * kMinBytesPerCopyThread
  static const uint64_t kSizes[] = {96, 2000, 24000, 700};
  return kSizes[(v * 7919) % 4];
}
uint32_t SeedFor(uint64_t v) { return static_cast<uint32_t>(v * 2 + 1); }
ModelState ModelFor(uint64_t v) { return MakeModel(BytesFor(v), SeedFor(v), kTensors); }

// Empty when the `size` bytes at `bytes` are version `v` whole: they parse
// with the checksum required and verified, and hold exactly ModelFor(v).
std::string CheckImage(std::shared_ptr<const void> owner, const std::byte* bytes, uint64_t size, uint64_t v) {
  safetensors::ParseOptions po;
  po.verify_checksum = true;
  po.require_checksum = true;
  auto m = safetensors::Parse(std::move(owner), bytes, size, po);
  if (!m.ok()) return "version " + std::to_string(v) + ": " + m.status().ToString();
  if (m->metadata.version != v) {
    return "version " + std::to_string(v) + " carries version " + std::to_string(m->metadata.version);
  }
  if (m->tensors().size() != static_cast<std::size_t>(kTensors)) {
    return "version " + std::to_string(v) + " has " + std::to_string(m->tensors().size()) + " tensors";
  }
  const int64_t per = static_cast<int64_t>(BytesFor(v) / kTensors / 4);
  for (int t = 0; t < kTensors; ++t) {
    if (m->tensors()[t].NumElements() != per + 1 + t) {
      return "version " + std::to_string(v) + ": tensor " + std::to_string(t) + " has " +
             std::to_string(m->tensors()[t].NumElements()) + " elements, expected " + std::to_string(per + 1 + t);
    }
  }
  if (!HasPattern(*m, SeedFor(v))) return "version " + std::to_string(v) + " does not hold its pattern";
  return "";
}

std::string CheckVersion(const ModelVersion& mv) {
  std::string e = CheckImage(mv.bytes_owner, mv.bytes, mv.size_bytes, mv.state.metadata.version);
  if (e.empty() && !HasPattern(mv.state, SeedFor(mv.state.metadata.version))) {
    e = "version " + std::to_string(mv.state.metadata.version) + ": served tensors lack the pattern";
  }
  return e;
}

uint32_t RaceSeed() {
  if (const char* s = std::getenv("VIPER_RACES_SEED")) return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
  return std::random_device{}();
}

// A random pause: mostly none or a short spin, sometimes a yield, rarely a
// sleep (sleeps are long on a loaded machine; spins keep the test fast).
void Jitter(std::mt19937& rng) {
  const uint32_t r = rng() % 64;
  if (r < 24) return;
  if (r < 52) {
    const uint32_t n = rng() % 2000;
    for (volatile uint32_t i = 0; i < n; i = i + 1) {
    }
    return;
  }
  if (r < 63) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20));
}

// Collects the first failure seen by any thread.
class Failures {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.empty()) first_ = what;
    ++count_;
  }
  std::string Report() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_ == 0 ? "" : std::to_string(count_) + " failure(s), the first: " + first_;
  }

 private:
  mutable std::mutex mu_;
  std::string first_;
  int count_ = 0;
};

std::string ShmOrTmpDir() {
  // tmpfs when there is one: the PFS tier fsyncs every file and its directory.
  const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::string tmpl = std::string(base) + "/viper-races-XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

void RemoveDir(const std::string& dir) {
  if (dir.empty()) return;
  (void)std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(Races, PfsPollingReadersOnlyEverSeeWholeVerifiedVersions) {
  const uint32_t seed = RaceSeed();
  SCOPED_TRACE("VIPER_RACES_SEED=" + std::to_string(seed));
  const uint64_t kVersions = 10000;
  const std::string dir = ShmOrTmpDir();
  ASSERT_FALSE(dir.empty());

  Publisher::Options po;
  po.tier = Tier::kPfs;
  po.notify = Notify::kPoll;
  po.mode = Mode::kAsync;
  po.pfs_dir = dir;
  po.pfs_keep_versions = 2;  // older files are deleted while the reader may be listing them
  po.snapshot_threads = 2;
  auto pub = Publisher::Create(po);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();

  Failures failures;
  std::atomic<uint64_t> swaps{0};
  Subscriber::Options so;
  so.tier = Tier::kPfs;
  so.notify = Notify::kPoll;
  so.pfs_dir = dir;
  so.poll_period_s = 0.0002;
  auto sub = Subscriber::Create(so, [&](std::shared_ptr<const ModelVersion> v) {
    ++swaps;
    const std::string e = CheckVersion(*v);
    if (!e.empty()) failures.Add("callback: " + e);
  });
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();

  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  auto reader = [&](uint32_t reader_seed) {
    std::mt19937 rng(reader_seed);
    std::deque<std::shared_ptr<const ModelVersion>> held;
    uint64_t last = 0;
    bool any = false;
    while (!done.load()) {
      std::shared_ptr<const ModelVersion> v = (*sub)->Current();
      if (!v) {
        std::this_thread::yield();
        continue;
      }
      const uint64_t ver = v->state.metadata.version;
      if (any && ver < last) {
        failures.Add("Current() went back from version " + std::to_string(last) + " to " + std::to_string(ver));
      }
      last = ver;
      any = true;
      const std::string e = CheckVersion(*v);
      if (!e.empty()) failures.Add("reader: " + e);
      ++reads;
      // Hold some versions for a while, as a slow request would, and check
      // they are still whole when let go (their buffers must not be reused).
      if (rng() % 8 == 0) held.push_back(std::move(v));
      if (held.size() > 1 + rng() % 4) {
        const std::string h = CheckVersion(*held.front());
        if (!h.empty()) failures.Add("held: " + h);
        held.pop_front();
      }
      Jitter(rng);
    }
    for (const auto& h : held) {
      const std::string e = CheckVersion(*h);
      if (!e.empty()) failures.Add("held at the end: " + e);
    }
  };
  std::thread r1(reader, seed + 1), r2(reader, seed + 2);

  std::mt19937 rng(seed);
  for (uint64_t v = 0; v < kVersions; ++v) {
    auto r = (*pub)->Publish(ModelFor(v), static_cast<int64_t>(v));
    if (!r.ok()) {
      failures.Add("Publish " + std::to_string(v) + ": " + r.status().ToString());
      break;
    }
    if (r->version != v) failures.Add("Publish " + std::to_string(v) + " got version " + std::to_string(r->version));
    Jitter(rng);
    if (rng() % 256 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));  // let the sender catch up
  }
  Status flushed = (*pub)->Flush();
  auto last = (*sub)->WaitForVersion(kVersions - 1, 60);
  done = true;
  r1.join();
  r2.join();
  (*sub)->Stop();
  ASSERT_TRUE(flushed.ok()) << flushed.ToString();
  ASSERT_TRUE(last.ok()) << "the newest version never arrived: " << last.status().ToString();
  EXPECT_EQ((*last)->state.metadata.version, kVersions - 1);
  EXPECT_EQ(failures.Report(), "");

  // Every version was published; each one was either written or superseded
  // by a newer snapshot before its turn, and the newest was written.
  auto summary = (*pub)->summary();
  EXPECT_EQ(summary.published, kVersions);
  EXPECT_EQ(summary.sent + summary.superseded, kVersions) << summary.BriefReport();
  EXPECT_TRUE((*pub)->Reports().back().sent);
  // A version the reader listed may be deleted (keep 2) before it is read:
  // that is a rejection, never a torn one (DataLoss would be).
  for (const auto& rej : (*sub)->Rejections()) {
    EXPECT_NE(rej.status.code(), StatusCode::kDataLoss) << rej.source << ": " << rej.status.ToString();
  }
  EXPECT_GT(swaps.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  std::printf("[ races    ] pfs: %llu versions published (%llu written, %llu superseded), %llu swapped in, "
              "%llu reads, %zu vanished before read\n",
              static_cast<unsigned long long>(kVersions), static_cast<unsigned long long>(summary.sent),
              static_cast<unsigned long long>(summary.superseded), static_cast<unsigned long long>(swaps.load()),
              static_cast<unsigned long long>(reads.load()), (*sub)->Rejections().size());
  ASSERT_TRUE((*pub)->Close().ok());
  RemoveDir(dir);
}

// The async publisher's two staging buffers (internal::StagedVersion), as the
// host tier sends from them: the producer snapshots into the buffer that is
// not being sent, superseding an unsent snapshot there; the sender finalizes
// and reads the other. Every image the sender reads must be whole.
TEST(Races, StagingDoubleBufferSendsOnlyWholeImages) {
  const uint32_t seed = RaceSeed();
  SCOPED_TRACE("VIPER_RACES_SEED=" + std::to_string(seed));
  const uint64_t kVersions = 10000;
  internal::StagedVersion staging[2];
  std::mutex mu;
  std::condition_variable cv;
  int pending = -1, sending = -1;
  bool closed = false;
  uint64_t sent = 0, superseded = 0, last_sent = 0;
  bool any_sent = false;
  Failures failures;

  std::thread sender([&] {
    std::mt19937 rng(seed + 1);
    for (;;) {
      int idx;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return pending >= 0 || closed; });
        if (pending < 0) break;
        idx = sending = pending;
        pending = -1;
      }
      internal::StagedVersion& s = staging[idx];
      Status st = s.Finalize();
      if (!st.ok()) {
        failures.Add("Finalize: " + st.ToString());
      } else {
        // Read the image in place, as a send does; the producer meanwhile
        // snapshots into the other buffer.
        Jitter(rng);
        const std::string e = CheckImage(nullptr, s.image(), s.image_bytes(), s.version());
        if (!e.empty()) failures.Add("sent: " + e);
        if (any_sent && s.version() <= last_sent) {
          failures.Add("sent version " + std::to_string(s.version()) + " after " + std::to_string(last_sent));
        }
        last_sent = s.version();
        any_sent = true;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        sending = -1;
        ++sent;
      }
      cv.notify_all();
    }
  });

  std::mt19937 rng(seed);
  for (uint64_t v = 0; v < kVersions; ++v) {
    const ModelState m = ModelFor(v);
    int idx;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (pending >= 0) {
        idx = pending;
        pending = -1;
        ++superseded;
      } else {
        idx = sending == 0 ? 1 : 0;
      }
    }
    Status st = staging[idx].Snapshot(m, v, static_cast<int64_t>(v), 0, 0, /*hash_while_copying=*/false,
                                      /*copy_threads=*/2);
    if (!st.ok()) {
      failures.Add("Snapshot " + std::to_string(v) + ": " + st.ToString());
      break;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      pending = idx;
    }
    cv.notify_all();
    Jitter(rng);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending < 0 && sending < 0; });
    closed = true;
  }
  cv.notify_all();
  sender.join();
  EXPECT_EQ(failures.Report(), "");
  EXPECT_EQ(sent + superseded, kVersions);
  EXPECT_TRUE(any_sent);
  EXPECT_EQ(last_sent, kVersions - 1);
  std::printf("[ races    ] staging: %llu snapshots, %llu sent, %llu superseded\n",
              static_cast<unsigned long long>(kVersions), static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(superseded));
}

}  // namespace
}  // namespace transports
}  // namespace viper
