// Internal: how the transports' polling loops wait.
#pragma once

#include <chrono>
#include <thread>

namespace viper {
namespace transports {
namespace internal {

// Sleeps `sleep_us` after a number of empty polls (spins first, for latency).
class Backoff {
 public:
  explicit Backoff(int sleep_us) : sleep_us_(sleep_us) {}
  void Pause() {
    if (++spins_ < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    }
  }
  void Reset() { spins_ = 0; }

 private:
  int sleep_us_;
  int spins_ = 0;
};

}  // namespace internal
}  // namespace transports
}  // namespace viper
