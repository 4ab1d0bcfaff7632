// The PFS tier's consumer bringing its back buffer forward (tier_pfs.cc,
// back_buffer.h): a delta version is rebuilt in the landing buffer that
// holds the version served before the current one, by copying only what the
// last delta file wrote, when that is known; otherwise the served image is
// copied whole. Every served image is compared byte for byte with the
// version as written whole, and the bytes copied are counted exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "tier_pfs.h"
#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/transports/pfs_store.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace internal {
namespace {

using Bytes = std::vector<std::byte>;
using testing_util::MakeTempDir;

constexpr int kTensors = 8;
constexpr int64_t kElements = 16384;  // 64 KiB of F32 per tensor

// A model with a frozen backbone: only the last of its 8 F32 tensors trains
// (about 1% of its elements per version).
class FrozenTrainer {
 public:
  FrozenTrainer() : rng_(27) {
    for (int t = 0; t < kTensors; ++t) {
      tensors_.push_back(Tensor::Allocate("layer" + std::to_string(t), DType::kF32, {kElements}));
      for (std::size_t i = 0; i < tensors_.back().size_bytes; ++i)
        tensors_.back().data[i] = std::byte(rng_());
    }
  }
  // The next version's image; `iteration` goes into its header (more
  // digits: a longer header).
  Bytes Step(uint64_t version, int64_t iteration) {
    Tensor& head = tensors_.back();
    uint32_t* p = head.As<uint32_t>();
    std::uniform_int_distribution<int64_t> at(0, kElements - 1);
    for (int k = 0; k < kElements / 100; ++k) p[at(rng_)] ^= 0x00010000u;
    ModelState m;
    for (const Tensor& t : tensors_) {
      auto copy = Tensor::FromBytes(t.name, t.dtype, t.shape, t.data, t.size_bytes);
      EXPECT_TRUE(m.Add(std::move(*copy)).ok());
    }
    m.metadata.version = version;
    m.metadata.iteration = iteration;
    auto image = safetensors::Serialize(m);
    EXPECT_TRUE(image.ok());
    return *image;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<Tensor> tensors_;
};

// What a delta that changed only the trained tensor writes into `image`:
// the header up to the data section and the last tensor.
uint64_t HeaderAndHeadBytes(const Bytes& image) {
  safetensors::ParseInfo info;
  auto state = safetensors::Parse(nullptr, image.data(), image.size(), {}, &info);
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  return state.ok() ? info.data_offset + state->tensors().back().size_bytes : 0;
}

// Where tensor `name`'s data starts in `image`.
uint64_t OffsetOf(const Bytes& image, const std::string& name) {
  auto state = safetensors::Parse(nullptr, image.data(), image.size());
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  const Tensor* t = state.ok() ? state->Find(name) : nullptr;
  return t != nullptr ? static_cast<uint64_t>(t->data - image.data()) : 0;
}

// A consumer as the Subscriber runs one, without its thread: PfsReceiver::Load
// with the served version, then the landed image parsed with its checksum
// verified (hashed again here, whatever Landed::streamed says) and served;
// the version served before is released (unless the test keeps it).
class Consumer {
 public:
  explicit Consumer(const std::string& dir) {
    Subscriber::Options o;
    o.tier = Tier::kPfs;
    o.notify = Notify::kPoll;
    o.pfs_dir = dir;
    receiver_ = std::make_unique<PfsReceiver>(o, &pool_, [this] { return served_; });
  }

  // Loads and serves `version`; what landed, or why it was not served.
  StatusOr<Landed> Take(uint64_t version) {
    StatusOr<Landed> landed = receiver_->Load(version, served_);
    if (!landed.ok()) return landed.status();
    safetensors::ParseOptions po;
    po.require_checksum = true;
    po.verify_checksum = true;
    safetensors::ParseInfo info;
    const std::byte* bytes = landed->buffer->data();
    auto state = safetensors::Parse(landed->buffer, bytes, landed->size, po, &info);
    if (!state.ok()) return state.status();
    if (landed->streamed && landed->data_offset != info.data_offset) return DataLossError("data offset");
    auto v = std::make_shared<ModelVersion>();
    v->state = std::move(*state);
    v->bytes_owner = landed->buffer;
    v->bytes = bytes;
    v->size_bytes = landed->size;
    v->checksum = ChecksumFromHex(info.metadata.at("viper.checksum")).value_or(0);
    v->tier = Tier::kPfs;
    landed->buffer->SetReadOnly(true);  // as the Subscriber serves it
    buffers_.push_back({version, landed->buffer});
    served_ = std::move(v);
    landed->buffer.reset();  // the served version holds it now
    return landed;
  }

  const std::shared_ptr<const ModelVersion>& served() const { return served_; }

  // Flips the byte at `offset` of the landing buffer `version` was served
  // from, without telling the pool: a buffer that no longer holds what the
  // pool says it does. False when that buffer is gone.
  bool Corrupt(uint64_t version, uint64_t offset) {
    for (auto& [v, weak] : buffers_) {
      if (v != version) continue;
      std::shared_ptr<AlignedBuffer> b = weak.lock();
      if (!b) return false;
      b->SetReadOnly(false);
      b->data()[offset] ^= std::byte{0x40};
      b->SetReadOnly(true);
      return true;
    }
    return false;
  }

 private:
  LandingPool pool_;
  std::unique_ptr<PfsReceiver> receiver_;
  std::shared_ptr<const ModelVersion> served_;
  std::vector<std::pair<uint64_t, std::weak_ptr<AlignedBuffer>>> buffers_;  // by version served
};

class PfsBackBuffer : public ::testing::Test {
 protected:
  PfsBackBuffer() : dir_(MakeTempDir()), store_(StoreOptions(dir_)), consumer_(dir_) {
    images_.emplace_back();
  }

  static PfsStore::Options StoreOptions(const std::string& dir) {
    PfsStore::Options o;
    o.dir = dir;
    o.keep_versions = 0;
    o.delta_chain_max = 32;
    return o;
  }
  // Writes the next version: as a delta of the one before (`full` false),
  // checked to be written as one, or whole.
  void Write(bool full = false, int64_t iteration = 7) {
    const uint64_t v = images_.size();
    images_.push_back(trainer_.Step(v, iteration));
    const Bytes& image = images_[v];
    if (full || v == 1) {
      ASSERT_TRUE(store_.Write(v, image.data(), image.size()).ok());
      return;
    }
    auto w = store_.WriteDelta(v, image.data(), image.size(), images_[v - 1].data(), images_[v - 1].size());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(w->delta) << w->delta_report;
  }
  // Serves version `v` and checks it is the image written, bit for bit, and
  // what landed says: rebuilt from deltas or read whole, brought forward or
  // copied whole, and the bytes copied from the served image.
  enum class Expect { kReadWhole, kCopiedWhole, kBroughtForward };
  void Serve(uint64_t v, Expect expect) {
    SCOPED_TRACE("version " + std::to_string(v));
    const uint64_t served_size = consumer_.served() ? consumer_.served()->size_bytes : 0;
    auto landed = consumer_.Take(v);
    ASSERT_TRUE(landed.ok()) << landed.status().ToString();
    ASSERT_EQ(consumer_.served()->size_bytes, images_[v].size());
    EXPECT_EQ(std::memcmp(consumer_.served()->bytes, images_[v].data(), images_[v].size()), 0);
    EXPECT_EQ(consumer_.served()->state.metadata.version, v);
    EXPECT_EQ(landed->from_delta, expect != Expect::kReadWhole);
    EXPECT_EQ(landed->brought_forward, expect == Expect::kBroughtForward);
    switch (expect) {
      case Expect::kReadWhole:
        EXPECT_EQ(landed->copied_bytes, 0u);
        break;
      case Expect::kCopiedWhole:
        EXPECT_EQ(landed->copied_bytes, served_size);
        EXPECT_TRUE(landed->streamed);  // Apply verified it: not hashed again
        break;
      case Expect::kBroughtForward:
        // The last delta changed the head only: its header and that tensor.
        EXPECT_EQ(landed->copied_bytes, HeaderAndHeadBytes(images_[v - 1]));
        EXPECT_LT(landed->copied_bytes * 7, served_size);  // 1 of 8 tensors and a header
        EXPECT_TRUE(landed->streamed);
        break;
    }
  }

  std::string dir_;
  PfsStore store_;
  Consumer consumer_;
  FrozenTrainer trainer_;
  std::vector<Bytes> images_;  // by version; [0] empty
};

// Version 1 is read whole, version 2 (the first delta) copies the served
// image whole, and from version 3 on the back buffer, holding the version
// before the served one, is brought forward: only the header and the
// trained tensor are copied.
TEST_F(PfsBackBuffer, SteadyFrozenBackboneDeltasCopyOnlyWhatTheLastDeltaWrote) {
  for (int v = 1; v <= 10; ++v) Write();
  Serve(1, Expect::kReadWhole);
  Serve(2, Expect::kCopiedWhole);
  for (uint64_t v = 3; v <= 10; ++v) Serve(v, Expect::kBroughtForward);
}

// Every case where the back buffer cannot be brought forward copies the
// served image whole, and every version served is exact.
TEST_F(PfsBackBuffer, WhenTheBackBufferCannotBeBroughtForwardTheServedImageIsCopiedWhole) {
  for (int v = 1; v <= 7; ++v) Write();
  Serve(1, Expect::kReadWhole);
  Serve(2, Expect::kCopiedWhole);
  Serve(3, Expect::kBroughtForward);
  // Version 4 skipped: 5 is read as a chain of two delta files from 3.
  Serve(5, Expect::kCopiedWhole);
  // What the chain's last delta wrote is relative to 4, which this consumer
  // never held: nothing to bring forward.
  Serve(6, Expect::kCopiedWhole);
  Serve(7, Expect::kBroughtForward);
  // A full version in between: read whole; the delta after it has nothing
  // remembered to bring forward.
  Write(/*full=*/true);
  Serve(8, Expect::kReadWhole);
  for (int v = 9; v <= 13; ++v) Write();
  Serve(9, Expect::kCopiedWhole);
  Serve(10, Expect::kBroughtForward);
  // A reader still holds version 10 when 12 comes: the buffer holding it
  // (the back buffer for 12) is not free.
  std::shared_ptr<const ModelVersion> reader = consumer_.served();
  Serve(11, Expect::kBroughtForward);  // its back buffer held 9: free
  Serve(12, Expect::kCopiedWhole);
  reader.reset();
  Serve(13, Expect::kBroughtForward);
}

// A back buffer that no longer holds what the pool says (a byte flipped
// behind its back, where the last delta did not write) is brought forward
// and the delta applied, and the rebuilt image fails its verification: the
// version is never served, the consumer keeps the one it serves, and the
// next version (a chain of two delta files from it) arrives exact.
TEST_F(PfsBackBuffer, ACorruptBackBufferIsNeverServed) {
  for (int v = 1; v <= 7; ++v) Write();
  Serve(1, Expect::kReadWhole);
  Serve(2, Expect::kCopiedWhole);
  Serve(3, Expect::kBroughtForward);
  // The back buffer for 4 holds version 2; flip a byte of its first tensor.
  const uint64_t frozen = OffsetOf(images_[2], "layer0");
  ASSERT_GT(frozen, 0u);
  ASSERT_TRUE(consumer_.Corrupt(2, frozen + 100));
  auto bad = consumer_.Take(4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << bad.status().ToString();
  EXPECT_NE(bad.status().ToString().find("model-v4.delta"), std::string::npos) << bad.status().ToString();
  ASSERT_EQ(consumer_.served()->state.metadata.version, 3u);
  EXPECT_EQ(std::memcmp(consumer_.served()->bytes, images_[3].data(), images_[3].size()), 0);
  // The failed read left nothing to bring forward: 5 from 3 reads two delta
  // files into a whole copy, then 6 copies whole and 7 brings forward.
  Serve(5, Expect::kCopiedWhole);
  Serve(6, Expect::kCopiedWhole);
  Serve(7, Expect::kBroughtForward);
}

// A delta whose header is longer than its base's (more digits in the
// iteration) moves the whole data section: nothing to bring forward for the
// next version, which copies whole; the one after brings forward again.
TEST_F(PfsBackBuffer, AHeaderOfAnotherSizeIsCopiedWhole) {
  for (int v = 1; v <= 3; ++v) Write();
  Write(false, /*iteration=*/1234567890123);
  Write(false, 1234567890124);
  Write(false, 1234567890125);
  ASSERT_NE(images_[4].size(), images_[3].size());
  ASSERT_EQ(images_[5].size(), images_[4].size());
  Serve(1, Expect::kReadWhole);
  Serve(2, Expect::kCopiedWhole);
  Serve(3, Expect::kBroughtForward);
  Serve(4, Expect::kBroughtForward);  // 3 was rebuilt from 2: brought forward, then the header grows
  Serve(5, Expect::kCopiedWhole);
  Serve(6, Expect::kBroughtForward);
}

// Through a Publisher (pfs_delta) and a polling Subscriber: a frozen
// backbone's delta versions, each polled before the next is published,
// are rebuilt in the back buffer brought forward from the third version on,
// bit-identical to the published model; the summary counts them.
TEST(PfsBackBufferSubscriber, FrozenBackboneDeltasAreBroughtForwardAndServedExact) {
  const std::string dir = MakeTempDir();
  Publisher::Options po = testing_util::PfsPublisherOptions(dir, Mode::kSync);
  po.pfs_delta = true;
  auto pub = Publisher::Create(po);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  auto sub = Subscriber::Create(testing_util::PollSubscriberOptions(dir));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ModelState m = testing_util::MakeModel(800000, 9, /*tensors=*/8);
  std::mt19937 rng(5);
  constexpr uint64_t kVersions = 7;
  uint64_t image_bytes = 0;
  for (uint64_t v = 0; v < kVersions; ++v) {
    if (v > 0) {
      Tensor& head = m.mutable_tensors().back();
      uint32_t* p = head.As<uint32_t>();
      std::uniform_int_distribution<int64_t> at(0, head.NumElements() - 1);
      for (int64_t k = 0; k < head.NumElements() / 50; ++k) p[at(rng)] ^= 0x00010000u;
    }
    auto r = (*pub)->Publish(m, static_cast<int64_t>(v + 1));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->encoding, v == 0 ? "full" : "delta of version " + std::to_string(v - 1)) << r->BriefReport();
    image_bytes = r->bytes;
    auto got = (*sub)->WaitForVersion(v, 30);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ((*got)->state.metadata.version, v);
    for (size_t t = 0; t < m.tensors().size(); ++t) {
      const Tensor& a = (*got)->state.tensors()[t];
      ASSERT_EQ(a.size_bytes, m.tensors()[t].size_bytes);
      EXPECT_EQ(std::memcmp(a.data, m.tensors()[t].data, a.size_bytes), 0)
          << "version " << v << " tensor " << t;
    }
    got->reset();  // nobody but the subscriber holds it: its buffer is the next back buffer
  }
  const Subscriber::Summary s = (*sub)->summary();
  EXPECT_EQ(s.delta_versions, kVersions - 1) << s.BriefReport();
  // Version 1 copies version 0 whole; 2..6 bring the back buffer forward,
  // each copying the header and the head (1/8 of the data) only.
  EXPECT_EQ(s.delta_copies_avoided, kVersions - 2) << s.BriefReport();
  EXPECT_GT(s.delta_copied_bytes, image_bytes);
  EXPECT_LT(s.delta_copied_bytes, image_bytes + (kVersions - 2) * (image_bytes / 4)) << s.BriefReport();
  (*sub)->Stop();
}

}  // namespace
}  // namespace internal
}  // namespace transports
}  // namespace viper
