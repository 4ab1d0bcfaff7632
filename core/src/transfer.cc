#include "viper/core/transfer.h"

#include <utility>

namespace viper {
namespace {

// One table per enum: ToString and FromString both read it.
template <typename E, std::size_t N>
using Names = std::pair<E, const char*>[N];

const Names<Tier, 3> kTiers = {{Tier::kGpu, "gpu"}, {Tier::kHost, "host"}, {Tier::kPfs, "pfs"}};
const Names<TransferMode, 2> kModes = {{TransferMode::kSync, "sync"}, {TransferMode::kAsync, "async"}};
const Names<Notify, 2> kNotifies = {{Notify::kPush, "push"}, {Notify::kPoll, "poll"}};

template <typename E, std::size_t N>
const char* Name(const Names<E, N>& table, E value) {
  for (const auto& [v, text] : table) {
    if (v == value) return text;
  }
  return "?";
}

template <typename E, std::size_t N>
StatusOr<E> Lookup(const Names<E, N>& table, const std::string& name, const char* what, const char* expected) {
  for (const auto& [value, text] : table) {
    if (name == text) return value;
  }
  return InvalidArgumentError(std::string("unknown ") + what + " '" + name + "' (expected " + expected + ")");
}

}  // namespace

const char* ToString(Tier tier) { return Name(kTiers, tier); }
const char* ToString(TransferMode mode) { return Name(kModes, mode); }
const char* ToString(Notify notify) { return Name(kNotifies, notify); }

StatusOr<Tier> TierFromString(const std::string& name) {
  return Lookup(kTiers, name, "transport tier", "gpu, host or pfs");
}
StatusOr<TransferMode> TransferModeFromString(const std::string& name) {
  return Lookup(kModes, name, "mode", "sync or async");
}
StatusOr<Notify> NotifyFromString(const std::string& name) {
  return Lookup(kNotifies, name, "notification", "push or poll");
}

}  // namespace viper
