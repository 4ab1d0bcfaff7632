#include "stream_hash.h"

#include <sched.h>

#include <algorithm>

namespace viper {
namespace transports {
namespace internal {

SliceHasher::SliceHasher(std::vector<ByteRange> ranges, bool use_thread) : ranges_(std::move(ranges)) {
  if (ranges_.empty()) done_ = true;
  if (use_thread && !done()) {
    worker_ = std::thread([this] {
      while (!done() && !stop_.load(std::memory_order_relaxed)) Hash(1 << 20);
    });
  }
}

SliceHasher::~SliceHasher() {
  stop_ = true;
  if (worker_.joinable()) worker_.join();
}

bool SliceHasher::Step(uint64_t max_bytes) {
  if (worker_.joinable() || done()) return false;
  Hash(max_bytes);
  return true;
}

void SliceHasher::Hash(uint64_t max_bytes) {
  uint64_t budget = max_bytes;
  while (budget > 0 && index_ < ranges_.size()) {
    const ByteRange& r = ranges_[index_];
    const uint64_t n = std::min(budget, r.size - offset_);
    if (n > 0) hasher_.Update(r.data + offset_, n);
    offset_ += n;
    budget -= n;
    if (offset_ >= r.size) {
      ++index_;
      offset_ = 0;
    }
  }
  if (index_ >= ranges_.size()) done_.store(true, std::memory_order_release);
}

uint64_t SliceHasher::Digest() const { return hasher_.Digest(); }

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  return std::max(1, CPU_COUNT(&set));
}

LandingHasher::LandingHasher(const std::byte* base, bool use_thread) : base_(base) {
  if (use_thread) worker_ = std::thread([this] { Run(); });
}

LandingHasher::~LandingHasher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void LandingHasher::Landed(uint64_t end) {
  if (!worker_.joinable()) {
    if (end > hashed_) hasher_.Update(base_ + hashed_, end - hashed_);
    hashed_ = std::max(hashed_, end);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    landed_ = std::max(landed_, end);
  }
  cv_.notify_all();
}

uint64_t LandingHasher::Finish() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  return hasher_.Digest();
}

void LandingHasher::Run() {
  // Hashes whatever has landed, then waits for more; after stop_ it returns
  // once caught up.
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return landed_ > hashed_ || stop_; });
    if (landed_ > hashed_) {
      const uint64_t end = landed_;
      lock.unlock();
      hasher_.Update(base_ + hashed_, end - hashed_);
      hashed_ = end;
      lock.lock();
      continue;
    }
    break;  // stop_ and caught up
  }
}

}  // namespace internal
}  // namespace transports
}  // namespace viper
