// The PFS tier's delta files (PfsStore::WriteDelta, Chain, Read of a delta
// version): chains rebuilt and verified, a full version every
// delta_chain_max + 1 and when the delta is not smaller, keep-N keeping the
// bases a kept delta needs, and missing or damaged links as errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "viper/core/safetensors.h"
#include "viper/transports/pfs_store.h"

namespace viper {
namespace transports {
namespace {

using Bytes = std::vector<std::byte>;
using testing_util::MakeTempDir;

// A small model whose tensors change by chosen fractions between versions.
class Trainer {
 public:
  explicit Trainer(uint64_t seed) : rng_(seed) {
    for (int t = 0; t < 4; ++t) {
      tensors_.push_back(Tensor::Allocate("layer" + std::to_string(t), t % 2 ? DType::kBF16 : DType::kF32,
                                          {1000 + 7 * t}));
      for (std::size_t i = 0; i < tensors_.back().size_bytes; ++i) tensors_.back().data[i] = std::byte(rng_());
    }
  }
  // Changes `fraction` of every tensor's elements; returns the next image.
  Bytes Step(double fraction) {
    std::bernoulli_distribution pick(fraction);
    for (Tensor& t : tensors_) {
      const std::size_t e = DTypeSize(t.dtype);
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        if (pick(rng_)) t.data[i * e] ^= static_cast<std::byte>(1 + rng_() % 255);
      }
    }
    return Image(++version_);
  }
  Bytes Image(uint64_t version) const {
    ModelState m;
    for (const Tensor& t : tensors_) {
      auto copy = Tensor::FromBytes(t.name, t.dtype, t.shape, t.data, t.size_bytes);
      EXPECT_TRUE(m.Add(std::move(*copy)).ok());
    }
    m.metadata.version = version;
    auto image = safetensors::Serialize(m);
    EXPECT_TRUE(image.ok());
    return *image;
  }
  uint64_t version() const { return version_; }

 private:
  std::mt19937_64 rng_;
  std::vector<Tensor> tensors_;
  uint64_t version_ = 0;
};

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

PfsStore MakeStore(const std::string& dir, int keep, int chain_max = 8) {
  PfsStore::Options o;
  o.dir = dir;
  o.keep_versions = keep;
  o.delta_chain_max = chain_max;
  return PfsStore(o);
}

// Writes version 1 full and versions 2..last as deltas of the one before
// (`fraction` of the elements changed each time); returns the images by
// version (images[0] empty), or fewer on a failed write.
std::vector<Bytes> WriteChain(const PfsStore& store, Trainer* trainer, uint64_t last, double fraction) {
  std::vector<Bytes> images{{}};
  images.push_back(trainer->Step(0.0));
  if (!store.Write(1, images[1].data(), images[1].size()).ok()) return images;
  for (uint64_t v = 2; v <= last; ++v) {
    images.push_back(trainer->Step(fraction));
    auto w = store.WriteDelta(v, images[v].data(), images[v].size(), images[v - 1].data(), images[v - 1].size());
    EXPECT_TRUE(w.ok() && w->delta) << (w.ok() ? w->delta_report : w.status().ToString());
    if (!w.ok()) images.pop_back();
  }
  return images;
}

// Reads `version` through ReadChecked and compares it with `image`.
void ExpectReads(const PfsStore& store, uint64_t version, const Bytes& image) {
  AlignedBuffer buffer;
  auto checked = store.ReadChecked(version, &buffer);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_TRUE(checked->verified());
  ASSERT_EQ(checked->bytes, image.size());
  EXPECT_EQ(std::memcmp(buffer.data(), image.data(), image.size()), 0) << "version " << version;
}

TEST(PfsDelta, ChainIsRebuiltAndVerified) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 0);
  Trainer trainer(1);
  std::vector<Bytes> images{{}};
  images.push_back(trainer.Step(0.0));
  ASSERT_TRUE(store.Write(1, images[1].data(), images[1].size()).ok());
  for (uint64_t v = 2; v <= 5; ++v) {
    images.push_back(trainer.Step(0.02));
    auto w = store.WriteDelta(v, images[v].data(), images[v].size(), images[v - 1].data(), images[v - 1].size());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE(w->delta) << w->delta_report;
    EXPECT_EQ(w->base_version, v - 1);
    EXPECT_EQ(w->path, store.DeltaPathFor(v));
    EXPECT_LT(w->bytes, images[v].size() / 4);  // 2% of the elements changed
  }
  EXPECT_TRUE(Exists(store.PathFor(1)));
  EXPECT_FALSE(Exists(store.PathFor(5)));
  auto versions = store.ListVersions();
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  auto chain = store.Chain(5);
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  EXPECT_EQ(*chain, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  auto file = store.Describe(3);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->delta);
  EXPECT_EQ(file->base_version, 2u);
  EXPECT_EQ(file->image_bytes, images[3].size());
  for (uint64_t v = 1; v <= 5; ++v) ExpectReads(store, v, images[v]);
  AlignedBuffer buffer;
  auto checked = store.ReadChecked(5, &buffer);
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ(checked->chain, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(store.Identify(5).ok());
}

TEST(PfsDelta, ReadFromAppliesOnlyTheDeltasAfterTheHeldVersion) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 0);
  Trainer trainer(8);
  const std::vector<Bytes> images = WriteChain(store, &trainer, 5, 0.02);
  ASSERT_EQ(images.size(), 6u);
  // A consumer holding v2 (its back buffer) reads only v3, v4 and v5's deltas.
  auto back_or = AlignedBuffer::Allocate(images[2].size() + 4096);
  ASSERT_TRUE(back_or.ok());
  AlignedBuffer back = std::move(*back_or);
  std::memcpy(back.data(), images[2].data(), images[2].size());
  std::vector<uint64_t> chain;
  auto size = store.ReadFrom(5, 2, images[2].size(), &back, &chain);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(chain, (std::vector<uint64_t>{3, 4, 5}));
  ASSERT_EQ(*size, images[5].size());
  EXPECT_EQ(std::memcmp(back.data(), images[5].data(), images[5].size()), 0);
  // Holding a version off the chain (v7 does not exist): the whole chain is read.
  auto whole = store.ReadFrom(4, 7, images[5].size(), &back, &chain);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(chain, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(std::memcmp(back.data(), images[4].data(), images[4].size()), 0);
  // A buffer that claims v3 but holds v4: the delta's base check refuses it.
  auto wrong = store.ReadFrom(5, 3, images[4].size(), &back, &chain);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition) << wrong.status().ToString();
}

TEST(PfsDelta, FullVersionEveryChainMaxPlusOneAndWhenNotSmaller) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 0, /*chain_max=*/2);
  Trainer trainer(2);
  Bytes previous = trainer.Step(0.0);
  ASSERT_TRUE(store.Write(1, previous.data(), previous.size()).ok());
  std::vector<bool> delta;
  for (uint64_t v = 2; v <= 7; ++v) {
    Bytes image = trainer.Step(v == 6 ? 1.0 : 0.01);  // v6: every element changed
    auto w = store.WriteDelta(v, image.data(), image.size(), previous.data(), previous.size());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    delta.push_back(w->delta);
    previous = image;
  }
  // v2, v3 deltas; v4 full (chain of 2 deltas reached); v5 delta; v6 full
  // (dense: not smaller); v7 delta.
  EXPECT_EQ(delta, (std::vector<bool>{true, true, false, true, false, true}));
  EXPECT_TRUE(Exists(store.PathFor(4)));
  EXPECT_TRUE(Exists(store.PathFor(6)));
}

TEST(PfsDelta, KeepNKeepsTheBasesAKeptDeltaNeeds) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, /*keep=*/2);
  Trainer trainer(3);
  Bytes previous = trainer.Step(0.0);
  ASSERT_TRUE(store.Write(1, previous.data(), previous.size()).ok());
  for (uint64_t v = 2; v <= 5; ++v) {
    Bytes image = trainer.Step(0.01);
    ASSERT_TRUE(store.WriteDelta(v, image.data(), image.size(), previous.data(), previous.size()).ok());
    previous = image;
  }
  // Keep 2 means v4 and v5, but v5 is a delta of v4 of v3 of v2 of v1: all stay.
  EXPECT_EQ(*store.ListVersions(), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  Bytes full = trainer.Step(1.0);
  ASSERT_TRUE(store.WriteDelta(6, full.data(), full.size(), previous.data(), previous.size()).ok());
  previous = full;
  Bytes next = trainer.Step(0.01);
  auto w = store.WriteDelta(7, next.data(), next.size(), previous.data(), previous.size());
  ASSERT_TRUE(w.ok() && w->delta);
  // Now v6 (full) and v7 (its delta) are all the two newest need.
  EXPECT_EQ(*store.ListVersions(), (std::vector<uint64_t>{6, 7}));
  ExpectReads(store, 7, next);
  // Prune(1) keeps v7 and so its base v6.
  auto removed = store.Prune(1);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
}

TEST(PfsDelta, MissingOrDamagedLinksAreErrorsNeverImages) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 0);
  Trainer trainer(4);
  const std::vector<Bytes> images = WriteChain(store, &trainer, 4, 0.05);
  ASSERT_EQ(images.size(), 5u);
  AlignedBuffer buffer;
  // A flipped byte in the middle link.
  {
    std::fstream f(store.DeltaPathFor(3), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c;
    f.seekg(200);
    f.get(c);
    f.seekp(200);
    f.put(static_cast<char>(c ^ 0x20));
  }
  auto r = store.ReadChecked(4, &buffer);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  EXPECT_NE(r.status().message().find("model-v3.delta"), std::string::npos) << r.status().ToString();
  ExpectReads(store, 2, images[2]);  // the links before it still read
  // The link removed: NotFound, naming it.
  ASSERT_EQ(::unlink(store.DeltaPathFor(3).c_str()), 0);
  auto missing = store.ReadChecked(4, &buffer);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("delta of version 3"), std::string::npos) << missing.status().ToString();
  EXPECT_FALSE(store.Read(4, &buffer).ok());
  // The full base replaced by another model's version 1: its checksum differs.
  Trainer other(99);
  const Bytes foreign = other.Step(0.0);
  ASSERT_TRUE(store.Write(1, foreign.data(), foreign.size()).ok());
  auto wrong = store.ReadChecked(2, &buffer);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition) << wrong.status().ToString();
}

TEST(PfsDelta, BaseNotInTheStoreOrTfServingWritesFull) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 0);
  Trainer trainer(5);
  Bytes v1 = trainer.Step(0.0), v2 = trainer.Step(0.01);
  auto w = store.WriteDelta(2, v2.data(), v2.size(), v1.data(), v1.size());  // v1 was never written
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->delta);
  EXPECT_NE(w->delta_report.find("not readable"), std::string::npos) << w->delta_report;
  ExpectReads(store, 2, v2);
  // A store whose v2 is another image than the base given.
  Trainer other(6);
  Bytes o2 = other.Image(2), o3 = other.Step(0.01);
  auto w2 = store.WriteDelta(3, o3.data(), o3.size(), o2.data(), o2.size());
  ASSERT_TRUE(w2.ok());
  EXPECT_FALSE(w2->delta);
  EXPECT_NE(w2->delta_report.find("checksum"), std::string::npos) << w2->delta_report;

  PfsStore::Options tf;
  tf.dir = MakeTempDir();
  tf.layout = PfsStore::Layout::kTfServing;
  PfsStore tf_store(tf);
  ASSERT_TRUE(tf_store.Write(1, v1.data(), v1.size()).ok());
  auto w3 = tf_store.WriteDelta(2, v2.data(), v2.size(), v1.data(), v1.size());
  ASSERT_TRUE(w3.ok());
  EXPECT_FALSE(w3->delta);
}

TEST(PfsDelta, RewritingAVersionReplacesItsOtherKind) {
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 0);
  Trainer trainer(7);
  Bytes v1 = trainer.Step(0.0), v2 = trainer.Step(0.01);
  ASSERT_TRUE(store.Write(1, v1.data(), v1.size()).ok());
  ASSERT_TRUE(store.WriteDelta(2, v2.data(), v2.size(), v1.data(), v1.size()).ok());
  ASSERT_TRUE(Exists(store.DeltaPathFor(2)));
  ASSERT_TRUE(store.Write(2, v2.data(), v2.size()).ok());
  EXPECT_FALSE(Exists(store.DeltaPathFor(2)));
  EXPECT_TRUE(Exists(store.PathFor(2)));
}

TEST(PfsDelta, OptionsCheckTheChainLength) {
  PfsStore::Options o;
  o.dir = "/tmp";
  std::string error;
  EXPECT_TRUE(o.IsValid(&error)) << error;
  o.delta_chain_max = 0;
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("delta_chain_max"), std::string::npos);
}

// Seeded: versions with random changed fractions written as deltas or full,
// keep 3, some delta files corrupted after the write and some readers that
// restart: every read is the exact image or an error.
TEST(PfsDelta, RandomisedChainsReadOnlyExactImages) {
  constexpr int kVersions = 400;
  const std::string dir = MakeTempDir();
  PfsStore store = MakeStore(dir, 3, 4);
  Trainer trainer(27);
  std::mt19937_64 rng(2727);
  std::uniform_real_distribution<double> unit(0, 1);
  Bytes previous = trainer.Step(0.0);
  ASSERT_TRUE(store.Write(1, previous.data(), previous.size()).ok());
  int deltas = 0, errors = 0, exact = 0;
  std::vector<uint64_t> corrupted;  // versions whose delta file was damaged
  for (uint64_t v = 2; v <= kVersions; ++v) {
    const double u = unit(rng);
    Bytes image = trainer.Step(u < 0.1 ? 1.0 : u < 0.2 ? 0.0 : 0.05 * unit(rng));
    auto w = store.WriteDelta(v, image.data(), image.size(), previous.data(), previous.size());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    deltas += w->delta;
    if (w->delta && unit(rng) < 0.05) {
      // Damage the delta just written (a torn or rotted file).
      std::fstream f(w->path, std::ios::in | std::ios::out | std::ios::binary);
      const std::streamoff at = static_cast<std::streamoff>(rng() % w->bytes);
      char c;
      f.seekg(at);
      f.get(c);
      f.seekp(at);
      f.put(static_cast<char>(c ^ (1 + rng() % 255)));
      corrupted.push_back(v);
    }
    AlignedBuffer buffer;  // a restarted reader: nothing held
    auto r = store.ReadChecked(v, &buffer);
    bool chain_damaged = false;
    auto chain = store.Chain(v);
    if (!chain.ok()) {
      chain_damaged = true;  // only a damaged delta header breaks a chain here
    } else {
      for (uint64_t c : *chain) {
        chain_damaged = chain_damaged || std::find(corrupted.begin(), corrupted.end(), c) != corrupted.end();
      }
    }
    if (r.ok()) {
      ASSERT_FALSE(chain_damaged) << "v" << v << " read through a damaged delta";
      ASSERT_EQ(r->bytes, image.size());
      ASSERT_EQ(std::memcmp(buffer.data(), image.data(), image.size()), 0) << "v" << v;
      ++exact;
    } else {
      ASSERT_TRUE(chain_damaged) << "v" << v << ": " << r.status().ToString();
      ++errors;
    }
    previous = image;
  }
  EXPECT_GT(deltas, kVersions / 2);
  EXPECT_GT(errors, 0);
  EXPECT_GT(exact, kVersions / 2);
}

}  // namespace
}  // namespace transports
}  // namespace viper
