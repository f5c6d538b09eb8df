// `process --shard slurm` under a real Slurm: a single-node cluster (munged,
// slurmctld and slurmd, Debian's munge and slurm-wlm) started in the test's
// own temporary folder on free ports, then config/slurm-array.sh submitted as
// a 4-task array over a folder of files; every input must be filtered by
// exactly one task and every output appear once. Each daemon runs in its own
// process group, which the guard ends (SIGTERM, then SIGKILL) whatever
// happens to the test. Any user can run it (the daemons run as that user,
// who also submits the jobs); it skips, saying why, where Slurm or munge is
// not installed (tools/install-deps.sh installs them).

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sndfile.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/process_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

extern char** environ;

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::TempDir;
using testing::wait_until;

std::string find_program(const std::string& name) {
  for (const char* dir :
       {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"}) {
    const fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// A port on 127.0.0.1 that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

// A daemon in a process group of its own, output in `log`; the destructor
// ends the whole group: SIGTERM, then SIGKILL after 5 s. Should the test
// process die without its destructors, the daemon gets SIGTERM from the
// kernel (PR_SET_PDEATHSIG).
class DaemonGroup {
 public:
  DaemonGroup(const std::vector<std::string>& argv, const fs::path& log) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls until exec. A group of its own, and
      // SIGTERM when the test process dies, even by SIGKILL (a ctest timeout).
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(out, 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out);
    ::close(in);
  }
  ~DaemonGroup() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      // The poll of a wait for the daemon's exit, bounded by the 5 s deadline above.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Whatever else the daemon started in its group.
    ::kill(-pid_, SIGKILL);
  }
  DaemonGroup(const DaemonGroup&) = delete;
  DaemonGroup& operator=(const DaemonGroup&) = delete;

  bool running() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

// Runs a shell command with SLURM_CONF set; its exit status, output in `log`.
int shell(const std::string& command, const fs::path& conf, const fs::path& log) {
  const std::string line =
      "SLURM_CONF='" + conf.string() + "' " + command + " >'" + log.string() + "' 2>&1 </dev/null";
  const int status = std::system(line.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// munged, slurmctld and slurmd of a one-node cluster in `dir`, ended (with
// any job left) when it goes.
class SlurmCluster {
 public:
  explicit SlurmCluster(const fs::path& dir) : dir_(dir), conf_(dir / "slurm.conf") {}
  ~SlurmCluster() {
    if (daemons_.size() == 3) {
      // Jobs left by a failed test die with the cluster, not after it.
      shell("scancel --full --signal=KILL --user=" + user(), conf_, dir_ / "scancel.log");
    }
    while (!daemons_.empty()) daemons_.pop_back();  // slurmd, slurmctld, then munged
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  static std::string user() {
    const passwd* entry = ::getpwuid(::geteuid());
    return entry != nullptr ? entry->pw_name : "root";
  }

  const fs::path& conf() const { return conf_; }

  // Empty when the cluster runs; else what went wrong.
  std::string start() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string node = host;
    node = node.substr(0, node.find('.'));
    for (const char* folder : {"munge", "state", "spool"}) fs::create_directories(dir_ / folder);
    {
      // A fresh random key (munge takes any 32 bytes or more), only for us.
      std::random_device random;
      std::ofstream key(dir_ / "munge/munge.key", std::ios::binary);
      for (int i = 0; i < 128; ++i) key.put(char(random() & 0xff));
    }
    fs::permissions(dir_ / "munge/munge.key", fs::perms::owner_read | fs::perms::owner_write);
    const fs::path socket = dir_ / "munge/munge.socket";
    // --force: munged refuses a socket in a folder that other users cannot
    // enter, and the test's folder is private (mode 0700) on purpose.
    daemons_.push_back(std::make_unique<DaemonGroup>(
        std::vector<std::string>{find_program("munged"), "--foreground", "--force",
                                 "--socket=" + socket.string(),
                                 "--key-file=" + (dir_ / "munge/munge.key").string(),
                                 "--pid-file=" + (dir_ / "munge/munged.pid").string(),
                                 "--seed-file=" + (dir_ / "munge/munged.seed").string(),
                                 "--log-file=" + (dir_ / "munge/munged.log").string()},
        dir_ / "munged.out"));
    if (!wait_until(
            testing::long_wait, [&] { return fs::exists(socket); }, "munge's socket")) {
      return "munged did not start: " + read_text(dir_ / "munged.out");
    }
    const std::string d = dir_.string();
    std::ofstream(conf_) << "ClusterName=tapstreamtest\n"
                         << "SlurmctldHost=" << node << "(127.0.0.1)\n"
                         << "SlurmUser=" << user() << "\nSlurmdUser=" << user() << "\n"
                         << "SlurmctldPort=" << free_port() << "\nSlurmdPort=" << free_port()
                         << "\n"
                         << "AuthType=auth/munge\nCredType=cred/munge\n"
                         << "AuthInfo=socket=" << socket.string() << "\n"
                         << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d
                         << "/spool\n"
                         << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d
                         << "/slurmd.pid\n"
                         << "SlurmctldLogFile=" << d << "/slurmctld.log\nSlurmdLogFile=" << d
                         << "/slurmd.log\n"
                         << "PlugStackConfig=" << d << "/plugstack.conf\n"
                         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
                         << "SchedulerType=sched/builtin\nJobCompType=jobcomp/none\n"
                         << "JobAcctGatherType=jobacct_gather/none\n"
                         << "AccountingStorageType=accounting_storage/none\n"
                         << "MpiDefault=none\nReturnToService=2\n"
                         << "SlurmdParameters=config_overrides\n"
                         << "NodeName=" << node << " NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN\n"
                         << "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    std::ofstream(dir_ / "plugstack.conf") << "";
    daemons_.push_back(std::make_unique<DaemonGroup>(
        std::vector<std::string>{find_program("slurmctld"), "-D", "-i", "-f", conf_.string()},
        dir_ / "slurmctld.out"));
    daemons_.push_back(std::make_unique<DaemonGroup>(
        std::vector<std::string>{find_program("slurmd"), "-D", "-f", conf_.string()},
        dir_ / "slurmd.out"));
    // Ready when the node is idle.
    const auto idle = [&] {
      return shell("sinfo --noheader --format=%t", conf_, dir_ / "sinfo.log") == 0 &&
             read_text(dir_ / "sinfo.log").rfind("idle", 0) == 0;
    };
    const auto ended = [&] { return !daemons_[1]->running() || !daemons_[2]->running(); };
    if (!wait_until(
            testing::long_wait, [&] { return ended() || idle(); }, "an idle node",
            std::chrono::milliseconds(200)) ||
        ended()) {
      return "the cluster did not start: slurmctld: " + read_text(dir_ / "slurmctld.out") +
             read_text(dir_ / "slurmctld.log") + "\nslurmd: " + read_text(dir_ / "slurmd.out") +
             "\nsinfo: " + read_text(dir_ / "sinfo.log");
    }
    return "";
  }

 private:
  fs::path dir_;
  fs::path conf_;
  std::vector<std::unique_ptr<DaemonGroup>> daemons_;  // munged, slurmctld, slurmd
};

void write_sound(const fs::path& file, std::size_t frames, std::uint64_t seed) {
  SF_INFO info{};
  info.channels = 1;
  info.samplerate = 16000;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  std::vector<float> samples = testing::random_signal(frames, seed);
  for (float& x : samples) x *= 0.25f;
  SNDFILE* f = sf_open(file.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << file;
  sf_writef_float(f, samples.data(), sf_count_t(frames));
  sf_close(f);
}

TEST(SlurmArray, FourArrayTasksFilterEveryFileOfAFolderExactlyOnce) {
  for (const char* program : {"munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel"}) {
    if (find_program(program).empty()) {
      GTEST_SKIP() << program << " is not installed (tools/install-deps.sh installs munge and "
                   << "slurm-wlm)";
    }
  }
  TempDir dir("tapstream-slurm");
  SlurmCluster cluster(dir.path());
  const std::string problem = cluster.start();
  ASSERT_EQ(problem, "");

  fs::create_directories(dir / "in");
  std::set<std::string> names;
  for (int i = 0; i < 10; ++i) {
    const std::string name = "utterance-" + std::to_string(i) + ".wav";
    write_sound(dir / "in" / name, 1600 + 100 * std::size_t(i), std::uint64_t(i));
    names.insert(name);
  }
  std::ofstream(dir / "room.txt") << "0.5\n0.25\n0.125\n";
  const std::string script = std::string(TAPSTREAM_SOURCE_DIR) + "/config/slurm-array.sh";
  const std::string command = "TAPSTREAM='" + std::string(TAPSTREAM_BINARY) +
                              "' sbatch --parsable --array=0-3 --output='" +
                              (dir / "task-%a.log").string() + "' --chdir='" + dir.path().string() +
                              "' '" + script + "' in --out-dir out --taps room.txt --backend cpu";
  const auto submitted = std::chrono::steady_clock::now();
  ASSERT_EQ(shell(command, cluster.conf(), dir / "sbatch.log"), 0) << read_text(dir / "sbatch.log");
  const std::string submission = read_text(dir / "sbatch.log");
  const std::string job = submission.substr(0, submission.find_first_of(";\n"));
  // Done when all four tasks have ended (sbatch --wait would poll every few seconds).
  const auto states = [&] {
    shell("scontrol --oneliner show job " + job, cluster.conf(), dir / "scontrol.log");
    return read_text(dir / "scontrol.log");
  };
  const auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  const auto ended = [&] {
    const std::string text = states();
    std::size_t tasks = 0;
    for (const char* end : {"JobState=COMPLETED", "JobState=FAILED", "JobState=CANCELLED",
                            "JobState=TIMEOUT", "JobState=NODE_FAIL", "JobState=OUT_OF_MEMORY"}) {
      tasks += count(text, end);
    }
    return tasks == 4;
  };
  const auto logs = [&] {
    std::string text = "job " + job + ": " + states();
    for (int task = 0; task < 4; ++task) {
      text += "\ntask " + std::to_string(task) + ": " +
              read_text(dir / ("task-" + std::to_string(task) + ".log"));
    }
    return text;
  };
  ASSERT_TRUE(wait_until(std::chrono::seconds(45), ended, logs, std::chrono::milliseconds(200)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
  ASSERT_EQ(count(states(), "JobState=COMPLETED"), 4u) << logs();
  std::cout << "the array ran in " << seconds << " s\n";

  std::set<std::string> written;
  for (const auto& entry : fs::directory_iterator(dir / "out")) {
    written.insert(entry.path().filename().string());
  }
  EXPECT_EQ(written, names) << logs();
  // Each input named by exactly one task's log, and each task said which shard it was.
  std::map<std::string, int> filtered_by;
  for (int task = 0; task < 4; ++task) {
    const std::string log = read_text(dir / ("task-" + std::to_string(task) + ".log"));
    EXPECT_NE(log.find("shard " + std::to_string(task) + " of 4"), std::string::npos) << log;
    EXPECT_NE(log.find("files done"), std::string::npos) << log;
    for (const std::string& name : names) {
      if (log.find("in/" + name + " -> out/" + name) != std::string::npos) ++filtered_by[name];
    }
  }
  for (const std::string& name : names) EXPECT_EQ(filtered_by[name], 1) << name << "\n" << logs();
}

}  // namespace
}  // namespace tapstream
