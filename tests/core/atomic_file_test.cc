// Tests of the project's one atomic-write routine (viper/core/atomic_file.h):
// a private, unpredictable temporary created with O_EXCL|O_NOFOLLOW, never a
// write through a link planted in the directory (issue 26, item 2).
#include "viper/core/atomic_file.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace viper {
namespace {

using ::testing::HasSubstr;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "viper_atomic_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
      }
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0);
    return st.st_mode;
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, WritesPrivatelyAndLeavesNoTemporary) {
  const std::string path = dir_ + "/out.json";
  ASSERT_TRUE(WriteFileAtomically(path, "{}\n").ok());
  EXPECT_EQ(Slurp(path), "{}\n");
  EXPECT_EQ(ModeOf(path) & 07777, 0600u);  // whatever the umask
  EXPECT_EQ(Entries(), std::vector<std::string>{"out.json"});
  AtomicFile::Options report;
  report.mode = 0644;
  ASSERT_TRUE(WriteFileAtomically(path, "{\"a\": 1}\n", report).ok());  // replaces
  EXPECT_EQ(Slurp(path), "{\"a\": 1}\n");
  EXPECT_EQ(ModeOf(path) & 07777, 0644u);
}

TEST_F(AtomicFileTest, TemporaryNamesAreUnpredictable) {
  std::set<std::string> names;
  for (int i = 0; i < 20; ++i) {
    auto file = AtomicFile::CreateFor(dir_ + "/x");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    const std::string& tmp = (*file)->temp_path();
    ASSERT_THAT(tmp, HasSubstr(dir_ + "/.x.tmp-"));
    const std::string suffix = tmp.substr(tmp.rfind(".tmp-") + 5);  // 64 random bits, not the pid
    EXPECT_EQ(suffix.size(), 16u) << tmp;
    EXPECT_EQ(suffix.find_first_not_of("0123456789abcdef"), std::string::npos) << tmp;
    names.insert(tmp);
  }
  EXPECT_EQ(names.size(), 20u);
  EXPECT_TRUE(Entries().empty());  // not committed: removed
}

// A link planted at a name the caller chose (main's pid-named temporaries)
// is refused, never followed; the target keeps its bytes.
TEST_F(AtomicFileTest, CreateRefusesAPlantedLink) {
  const std::string victim = dir_ + "/victim";
  { std::ofstream(victim) << "precious"; }
  const std::string tmp = dir_ + "/.out.json.tmp.1234";
  ASSERT_EQ(::symlink(victim.c_str(), tmp.c_str()), 0);
  auto file = AtomicFile::Create(tmp);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("already there"));
  const std::string dangling = dir_ + "/.dangling.tmp";
  ASSERT_EQ(::symlink((dir_ + "/would-be-created").c_str(), dangling.c_str()), 0);
  EXPECT_FALSE(AtomicFile::Create(dangling).ok());
  EXPECT_EQ(::access((dir_ + "/would-be-created").c_str(), F_OK), -1);
  EXPECT_EQ(Slurp(victim), "precious");
}

// A link at the final name is replaced by the new file, not written through.
TEST_F(AtomicFileTest, CommitReplacesALinkAtTheTarget) {
  const std::string victim = dir_ + "/victim";
  { std::ofstream(victim) << "precious"; }
  const std::string path = dir_ + "/out.json";
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  EXPECT_TRUE(S_ISREG(ModeOf(path)));
  EXPECT_EQ(Slurp(path), "new");
  EXPECT_EQ(Slurp(victim), "precious");
}

TEST_F(AtomicFileTest, MissingDirectoryIsNotFound) {
  Status s = WriteFileAtomically(dir_ + "/no/such/out.json", "x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("does not exist"));
  EXPECT_EQ(WriteFileAtomically(dir_ + "/", "x").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace viper
