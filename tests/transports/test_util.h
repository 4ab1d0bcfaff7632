// Shared helpers of the transports tests: deterministic models, temp dirs,
// and the options of a polling PFS pair.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "viper/core/model_state.h"
#include "viper/transports/publisher.h"
#include "viper/transports/subscriber.h"

namespace viper {
namespace transports {
namespace testing_util {

// A model of `tensors` F32 tensors with about `bytes` bytes in all, filled
// with a pattern that depends on `seed` (so versions differ byte-wise).
inline ModelState MakeModel(uint64_t bytes, uint32_t seed, int tensors = 3) {
  ModelState m;
  const uint64_t per = bytes / tensors / 4;
  for (int t = 0; t < tensors; ++t) {
    // Odd element counts: tensor boundaries fall off any alignment.
    const int64_t n = static_cast<int64_t>(per) + 1 + t;
    Tensor x = Tensor::Allocate("layer" + std::to_string(t) + ".weight", DType::kF32, {n});
    uint32_t* p = x.As<uint32_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = seed * 2654435761u + static_cast<uint32_t>(i) * 40503u + t;
    (void)m.Add(std::move(x));
  }
  return m;
}

// True when `m` holds exactly the pattern MakeModel(bytes, seed, tensors) made.
inline bool HasPattern(const ModelState& m, uint32_t seed) {
  int t = 0;
  for (const Tensor& x : m.tensors()) {
    const uint32_t* p = x.As<uint32_t>();
    for (int64_t i = 0; i < x.NumElements(); ++i) {
      if (p[i] != seed * 2654435761u + static_cast<uint32_t>(i) * 40503u + t) return false;
    }
    ++t;
  }
  return t > 0;
}

inline std::string MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/viper-transports-XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

// A PFS publisher writing into `dir` for polling consumers, keeping every
// version.
inline Publisher::Options PfsPublisherOptions(const std::string& dir, Mode mode) {
  Publisher::Options o;
  o.tier = Tier::kPfs;
  o.notify = Notify::kPoll;
  o.mode = mode;
  o.pfs_dir = dir;
  o.pfs_keep_versions = 0;
  return o;
}

// A consumer polling `dir` every 20 ms.
inline Subscriber::Options PollSubscriberOptions(const std::string& dir) {
  Subscriber::Options o;
  o.tier = Tier::kPfs;
  o.notify = Notify::kPoll;
  o.pfs_dir = dir;
  o.poll_period_s = 0.02;
  return o;
}

}  // namespace testing_util
}  // namespace transports
}  // namespace viper
