#include "viper/core/checksum.h"

#include <cstdio>
#include <cstdlib>

#include "viper/core/status.h"
#include "xxh3_isa.h"

namespace viper {
namespace {

using internal::Xxh3Isa;

// The implementations this CPU runs, widest last.
std::vector<const Xxh3Isa*> Runnable() {
  std::vector<const Xxh3Isa*> isas = {&internal::kXxh3Baseline};
#if VIPER_XXH3_X86_VARIANTS
  // __builtin_cpu_supports also checks that the OS saves the wider registers.
  if (__builtin_cpu_supports("avx2")) isas.push_back(&internal::kXxh3Avx2);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f")) isas.push_back(&internal::kXxh3Avx512);
#endif
  return isas;
}

const Xxh3Isa* Find(const std::string& name) {
  for (const Xxh3Isa* isa : Runnable()) {
    if (name == isa->name) return isa;
  }
  return nullptr;
}

const Xxh3Isa& InUse() {
  static const Xxh3Isa* const isa = [] {
    const char* wanted = std::getenv("VIPER_XXH3");
    if (wanted == nullptr || *wanted == '\0') return Runnable().back();
    if (const Xxh3Isa* found = Find(wanted)) return found;
    std::string names;
    for (const std::string& n : Xxh3Implementations()) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "viper: VIPER_XXH3=%s is not an XXH3 implementation this CPU runs (%s); using %s\n",
                 wanted, names.c_str(), Runnable().back()->name);
    return Runnable().back();
  }();
  return *isa;
}

}  // namespace

uint64_t Xxh3_64(const void* data, std::size_t size) { return InUse().oneshot(data, size); }

const char* Xxh3Implementation() { return InUse().name; }

std::vector<std::string> Xxh3Implementations() {
  std::vector<std::string> names;
  for (const Xxh3Isa* isa : Runnable()) names.emplace_back(isa->name);
  return names;
}

Xxh3Hasher::Xxh3Hasher() : isa_(&InUse()), state_(isa_->create()) { VIPER_CHECK(state_ != nullptr); }

Xxh3Hasher::Xxh3Hasher(const std::string& implementation) : isa_(Find(implementation)), state_(nullptr) {
  VIPER_CHECK(isa_ != nullptr);
  state_ = isa_->create();
  VIPER_CHECK(state_ != nullptr);
}

Xxh3Hasher::~Xxh3Hasher() { isa_->destroy(state_); }

void Xxh3Hasher::Update(const void* data, std::size_t size) { isa_->update(state_, data, size); }

uint64_t Xxh3Hasher::Digest() const { return isa_->digest(state_); }

std::string ChecksumToHex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::optional<uint64_t> ChecksumFromHex(const std::string& hex) {
  if (hex.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace viper
