// Locking the daemon's memory (dsp/realtime/memory_lock.hpp): a refusal is
// reported with the limit that refused it, the size that was asked, and how to
// allow it, for the log line `tapstream run` writes.

#include "dsp/realtime/memory_lock.hpp"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "tests/sanitized_build.hpp"

namespace tapstream {
namespace {

// Drops CAP_IPC_LOCK from the calling process (root's way past RLIMIT_MEMLOCK).
bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  std::array<__user_cap_data_struct, _LINUX_CAPABILITY_U32S_3> data{};
  if (syscall(SYS_capget, &header, data.data()) != 0) return false;
  const unsigned bit = 1u << (CAP_IPC_LOCK % 32);
  data[CAP_IPC_LOCK / 32].effective &= ~bit;
  data[CAP_IPC_LOCK / 32].permitted &= ~bit;
  data[CAP_IPC_LOCK / 32].inheritable &= ~bit;
  return syscall(SYS_capset, &header, data.data()) == 0;
}

struct ChildLock {
  bool ran = false;
  MemoryLock lock;
  std::string message;
};

// lock_all_memory() in a child process (so that this test process stays as
// it was); with `limit_bytes`, under that RLIMIT_MEMLOCK and without CAP_IPC_LOCK.
ChildLock lock_in_child(std::optional<rlim_t> limit_bytes) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    if (limit_bytes) {
      const rlimit limit{*limit_bytes, *limit_bytes};
      if (!drop_ipc_lock() || setrlimit(RLIMIT_MEMLOCK, &limit) != 0) _exit(2);
    }
    const MemoryLock lock = lock_all_memory();
    const std::string text = std::to_string(lock.locked) + " " + std::to_string(lock.error) + " " +
                             std::to_string(lock.limit) + " " + std::to_string(lock.size_kib) +
                             "\n" + describe(lock);
    const ssize_t written = write(pipe_fds[1], text.data(), text.size());
    _exit(written == ssize_t(text.size()) ? 0 : 3);
  }
  close(pipe_fds[1]);
  std::string text;
  std::array<char, 4096> buffer{};
  for (ssize_t n; (n = read(pipe_fds[0], buffer.data(), buffer.size())) > 0;)
    text.append(buffer.data(), n);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ChildLock result;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return result;
  int locked = 0;
  unsigned long long limit = 0;
  long size = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%d %d %llu %ld\n%n", &locked, &result.lock.error, &limit, &size,
                  &consumed) != 4) {
    return result;
  }
  result.ran = true;
  result.lock.locked = locked != 0;
  result.lock.limit = limit;
  result.lock.size_kib = size;
  result.message = text.substr(consumed);
  return result;
}

TEST(MemoryLock, ARefusalNamesTheLimitTheProcessSizeAndHowToAllowIt) {
  // sanitizer_common's interceptor: the sanitizers cannot lock their shadow memory.
  if (testing::kSanitizedBuild) GTEST_SKIP() << "a sanitizer makes mlockall a no-op that succeeds";
  const ChildLock child = lock_in_child(64 * 1024);
  ASSERT_TRUE(child.ran) << "the child could not drop CAP_IPC_LOCK or lower its limit";
  EXPECT_FALSE(child.lock.locked) << "a test process is larger than 64 KiB";
  EXPECT_TRUE(child.lock.error == ENOMEM || child.lock.error == EPERM) << child.lock.error;
  EXPECT_EQ(child.lock.limit, 64u * 1024u);
  EXPECT_GT(child.lock.size_kib, 64);
  EXPECT_NE(child.message.find("memory not locked"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find("RLIMIT_MEMLOCK 64 KiB"), std::string::npos) << child.message;
  EXPECT_NE(child.message.find(std::to_string(child.lock.size_kib / 1024) + " MiB"),
            std::string::npos)
      << child.message;
  EXPECT_NE(child.message.find("ulimit -l unlimited"), std::string::npos) << child.message;
}

TEST(MemoryLock, WhereTheSystemAllowsItTheWholeProcessIsLockedAndSaysSo) {
  // sanitizer_common's interceptor: the sanitizers cannot lock their shadow memory.
  if (testing::kSanitizedBuild) GTEST_SKIP() << "a sanitizer makes mlockall a no-op that succeeds";
  const ChildLock child = lock_in_child(std::nullopt);
  ASSERT_TRUE(child.ran);
  if (!child.lock.locked) GTEST_SKIP() << "not allowed here: " << child.message;
  EXPECT_TRUE(child.lock.locked) << child.message;
  EXPECT_EQ(child.lock.error, 0);
  EXPECT_NE(child.message.find("memory locked"), std::string::npos) << child.message;
}

}  // namespace
}  // namespace tapstream
