#include "dsp/realtime/memory_lock.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace tapstream {

namespace {

// VmSize from /proc/self/status, in KiB (0 if unreadable).
long process_size_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::strtol(line.c_str() + 7, nullptr, 10);
  }
  return 0;
}

std::string kib_text(unsigned long long kib) {
  return kib >= 10 * 1024 ? std::to_string(kib / 1024) + " MiB" : std::to_string(kib) + " KiB";
}

}  // namespace

MemoryLock lock_all_memory() {
  MemoryLock lock;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) lock.limit = limit.rlim_cur;
  lock.size_kib = process_size_kib();
  lock.locked = mlockall(MCL_CURRENT | MCL_FUTURE) == 0;
  if (!lock.locked) lock.error = errno;
  return lock;
}

std::string describe(const MemoryLock& lock) {
  if (lock.locked) {
    return "memory locked (mlockall): the audio path's pages stay resident";
  }
  const std::string limit = lock.limit == RLIM_INFINITY ? "unlimited" : kib_text(lock.limit / 1024);
  return "memory not locked (mlockall: " + std::string(std::strerror(lock.error)) +
         "; RLIMIT_MEMLOCK " + limit + ", the process is " + kib_text(lock.size_kib) +
         " and grows with the filters): a page the callback touches may fault in the middle of "
         "a period. Allow it with `ulimit -l unlimited` before starting, or memlock unlimited "
         "for the user in /etc/security/limits.d (as JACK's audio group has it)";
}

}  // namespace tapstream
