// Status and StatusOr<T>: how bad input, bad configuration and missing
// hardware come back to the caller (STYLE.md §5). No exceptions cross a
// folder boundary; broken invariants use VIPER_CHECK and abort.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace viper {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input or configuration; the message names it
  kNotFound,            // a file, column or key that is not there
  kOutOfRange,          // a value outside what is accepted
  kDataLoss,            // corrupt or truncated data (checksum, short file)
  kFailedPrecondition,  // the system is not in a state to do this
  kUnavailable,         // missing hardware or feature (no GPU, no MPI)
  kIoError,             // an operating-system call failed
  kAborted,             // a peer died, or the user interrupted
  kInternal,            // a bug: should not happen
};

const char* ToString(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy with "<context>: " put before the message.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
// An IoError whose message ends with strerror(errno_value).
Status ErrnoError(const std::string& what, int errno_value);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = InternalError("StatusOr constructed from an OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { CheckOk(); return *value_; }
  const T& value() const& { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    if (!status_.ok()) {
      std::fprintf(stderr, "viper: value() on a failed StatusOr: %s\n", status_.ToString().c_str());
      std::abort();
    }
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace viper

// Abort with a message when an invariant is broken (a bug, not bad input).
#define VIPER_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: VIPER_CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                         \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

// Return early from a function returning Status or StatusOr<T>.
#define VIPER_RETURN_IF_ERROR(expr)           \
  do {                                        \
    ::viper::Status viper_status_ = (expr);   \
    if (!viper_status_.ok()) return viper_status_; \
  } while (0)

#define VIPER_CONCAT_INNER(a, b) a##b
#define VIPER_CONCAT(a, b) VIPER_CONCAT_INNER(a, b)
// VIPER_ASSIGN_OR_RETURN(auto x, MaybeX()); returns the status on failure.
#define VIPER_ASSIGN_OR_RETURN(lhs, rexpr)                          \
  auto VIPER_CONCAT(viper_or_, __LINE__) = (rexpr);                 \
  if (!VIPER_CONCAT(viper_or_, __LINE__).ok())                      \
    return VIPER_CONCAT(viper_or_, __LINE__).status();              \
  lhs = std::move(VIPER_CONCAT(viper_or_, __LINE__)).value()
