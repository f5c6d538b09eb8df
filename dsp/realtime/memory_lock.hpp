#pragma once
// Locking the process's memory for the audio path (mlockall), and what to
// tell the user when the system refuses it.
//
// A page of the engine's spectra or of a ring swapped out, or not yet
// faulted in, costs the callback a page fault of microseconds (minor) to
// milliseconds (major) in the middle of a period. mlockall(MCL_CURRENT |
// MCL_FUTURE) keeps every page resident and faults new mappings in when they
// are made, off the callback. Without CAP_IPC_LOCK the kernel allows it only
// within RLIMIT_MEMLOCK (8 MiB by default on Debian, far below a daemon's
// size), and then locks nothing.

#include <sys/resource.h>

#include <string>

namespace tapstream {

struct MemoryLock {
  bool locked = false;
  int error = 0;      // mlockall's errno when refused
  rlim_t limit = 0;   // RLIMIT_MEMLOCK's soft limit (RLIM_INFINITY: none)
  long size_kib = 0;  // the process's size then (VmSize), what locking needs
};

// mlockall(MCL_CURRENT | MCL_FUTURE), with what a refusal needs to be explained.
MemoryLock lock_all_memory();

// One line for the log: what was locked, or why not and how to allow it.
std::string describe(const MemoryLock& lock);

}  // namespace tapstream
