// Tests of Status, StatusOr and the early-return macros.
#include "viper/core/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace viper {
namespace {

using ::testing::HasSubstr;

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = InvalidArgumentError("--warmup must be positive, got -3");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--warmup must be positive, got -3");
  EXPECT_EQ(s.ToString(), "InvalidArgument: --warmup must be positive, got -3");
}

TEST(StatusTest, EveryHelperMapsToItsCode) {
  EXPECT_EQ(InvalidArgumentError("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NotFoundError("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(OutOfRangeError("x").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(DataLossError("x").code(), StatusCode::kDataLoss);
  EXPECT_EQ(FailedPreconditionError("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(UnavailableError("x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(IoError("x").code(), StatusCode::kIoError);
  EXPECT_EQ(AbortedError("x").code(), StatusCode::kAborted);
  EXPECT_EQ(InternalError("x").code(), StatusCode::kInternal);
}

TEST(StatusTest, CodeNames) {
  EXPECT_STREQ(ToString(StatusCode::kOk), "OK");
  EXPECT_STREQ(ToString(StatusCode::kInvalidArgument), "InvalidArgument");
  EXPECT_STREQ(ToString(StatusCode::kNotFound), "NotFound");
  EXPECT_STREQ(ToString(StatusCode::kOutOfRange), "OutOfRange");
  EXPECT_STREQ(ToString(StatusCode::kDataLoss), "DataLoss");
  EXPECT_STREQ(ToString(StatusCode::kFailedPrecondition), "FailedPrecondition");
  EXPECT_STREQ(ToString(StatusCode::kUnavailable), "Unavailable");
  EXPECT_STREQ(ToString(StatusCode::kIoError), "IoError");
  EXPECT_STREQ(ToString(StatusCode::kAborted), "Aborted");
  EXPECT_STREQ(ToString(StatusCode::kInternal), "Internal");
}

TEST(StatusTest, WithContextPrefixesErrorsOnly) {
  Status s = NotFoundError("no column 'loss'").WithContext("run.csv:1");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "run.csv:1: no column 'loss'");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
  EXPECT_EQ(Status::Ok().WithContext("ignored").message(), "");
}

TEST(StatusTest, ErrnoErrorEndsWithStrerror) {
  Status s = ErrnoError("cannot open 'x'", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "cannot open 'x': No such file or directory");
}

TEST(StatusOrTest, HoldsValue) {
  StatusOr<std::string> v = std::string("model");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(*v, "model");
  EXPECT_EQ(v->size(), 5u);
  EXPECT_EQ(v.value(), "model");
  std::string moved = std::move(v).value();
  EXPECT_EQ(moved, "model");
}

TEST(StatusOrTest, HoldsError) {
  StatusOr<int> v = DataLossError("checksum mismatch");
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(v.status().message(), "checksum mismatch");
}

TEST(StatusOrTest, OkStatusWithoutValueBecomesInternal) {
  // A StatusOr must hold either a value or an error; an OK status alone is a bug.
  StatusOr<int> v = Status::Ok();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

TEST(StatusOrDeathTest, ValueOfErrorAborts) {
  StatusOr<int> v = NotFoundError("gone");
  EXPECT_DEATH((void)v.value(), "value\\(\\) on a failed StatusOr: NotFound: gone");
}

TEST(StatusDeathTest, CheckAbortsWithTheCondition) {
  EXPECT_DEATH(VIPER_CHECK(1 + 1 == 3), "VIPER_CHECK failed: 1 \\+ 1 == 3");
}

// Helpers for the macro tests.
Status FailIf(bool fail) { return fail ? OutOfRangeError("too big") : Status::Ok(); }
StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Status ReturnIfError(bool fail, int* reached) {
  VIPER_RETURN_IF_ERROR(FailIf(fail));
  *reached = 1;
  return Status::Ok();
}

StatusOr<int> Quarter(int x) {
  VIPER_ASSIGN_OR_RETURN(int h, Half(x));
  VIPER_ASSIGN_OR_RETURN(int q, Half(h));  // two uses in one scope must not clash
  return q;
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsEarly) {
  int reached = 0;
  Status s = ReturnIfError(true, &reached);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(ReturnIfError(false, &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, AssignOrReturn) {
  auto q = Quarter(20);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, 5);
  // 6 / 2 = 3 is odd: the second step fails and its message comes back.
  auto bad = Quarter(6);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("3 is odd"));
}

}  // namespace
}  // namespace viper
