#include "dsp/cpu/fftw_plan.hpp"

#include <fftw3.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

#include "dsp/model/large_memory.hpp"

namespace tapstream::fftw {

void Free::operator()(float* p) const {
  fftwf_free(p);
}

AlignedFloats::AlignedFloats(std::size_t count) : size_(count) {
  if (count == 0) return;
  // 64-byte alignment (one cache line, one AVX-512 vector) rather than
  // fftwf_malloc's SIMD alignment, which may be only 16 or 32 bytes.
  // Large buffers (staging, delay lines) on huge pages: see large_memory.hpp.
  data_.reset(static_cast<float*>(allocate_large(count * sizeof(float), 64)));
  zero();
}

namespace {

constexpr double kPlanningSeconds = 5.0;  // per plan, when there is no wisdom

std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}

// Guarded by planner_mutex().
PlannerOptions& current_options() {
  static PlannerOptions options;
  return options;
}

// A cache never stops a run: a wisdom file that cannot be read or parsed
// (another user's HOME after `su`, a half-written or foreign file) is named
// in one warning per process and then ignored; plans are measured again and
// the file is rewritten where that is allowed.
void warn_once_about_wisdom(const std::filesystem::path& path, const std::string& problem) {
  static bool warned = false;
  if (warned) return;
  warned = true;
  spdlog::warn("FFTW wisdom cache {}: {}; ignoring it (plans are measured again)", path.string(),
               problem);
}

// Loads the wisdom file once per process and file (caller holds the planner
// mutex).
void load_wisdom_once(const std::filesystem::path& path) {
  static std::filesystem::path loaded;
  if (path.empty() || path == loaded) return;
  loaded = path;
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) {
    if (errno != ENOENT) warn_once_about_wisdom(path, std::strerror(errno));
    return;  // no cache yet: the first run makes it
  }
  const int imported = fftwf_import_wisdom_from_file(file);
  const bool read_error = std::ferror(file) != 0;
  std::fclose(file);
  if (!imported || read_error) {
    fftwf_forget_wisdom();  // whatever part of it was taken in
    warn_once_about_wisdom(path, read_error ? "cannot be read" : "not FFTW wisdom (corrupt?)");
  }
}

// Writes the wisdom beside its final name, then renames, so a reader never sees
// half a file. Failure to save is not an error: the next run measures again.
void save_wisdom(const std::filesystem::path& path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  if (fftwf_export_wisdom_to_filename(tmp.c_str())) {
    std::filesystem::rename(tmp, path, ec);
    if (ec) std::filesystem::remove(tmp, ec);
  }
  if (ec || !std::filesystem::exists(path, ec)) {
    spdlog::debug("cannot save FFTW wisdom to {}: the next run measures its plans again",
                  path.string());
  }
}

}  // namespace

void set_planner_options(PlannerOptions options) {
  const std::lock_guard lock(planner_mutex());
  current_options() = std::move(options);
}

PlannerOptions planner_options() {
  const std::lock_guard lock(planner_mutex());
  return current_options();
}

RealFftPair::RealFftPair(std::size_t n) : n_(n) {
  if (n < 16 || (n & (n - 1)) != 0) {
    throw std::invalid_argument("FFT size " + std::to_string(n) + " is not a power of two >= 16");
  }
  // Plans are made on scratch arrays with the alignment every caller's have.
  AlignedFloats time(n), spectrum(2 * padded_bins(n));
  auto* complex = reinterpret_cast<fftwf_complex*>(spectrum.data());
  const int size = static_cast<int>(n);
  const std::lock_guard lock(planner_mutex());
  const PlannerOptions options = current_options();
  const unsigned flags = options.measure ? FFTW_MEASURE : FFTW_ESTIMATE;
  load_wisdom_once(options.wisdom_file);
  // Wisdom only: if it knows both plans, no measuring (and no saving) happens.
  fftwf_plan f = fftwf_plan_dft_r2c_1d(size, time.data(), complex, FFTW_WISDOM_ONLY | flags);
  fftwf_plan i = fftwf_plan_dft_c2r_1d(size, complex, time.data(), FFTW_WISDOM_ONLY | flags);
  const bool learned = !f || !i;
  // Measuring from scratch takes about 0.5 s (1024 points) to 4 s (131072)
  // per plan on the development machine, once per machine thanks to the wisdom
  // file. The cap only guards against pathological planning times: a tighter
  // one (0.5 s was tried) saves plans up to 50% slower, and saves them for good.
  fftwf_set_timelimit(kPlanningSeconds);
  if (!f) f = fftwf_plan_dft_r2c_1d(size, time.data(), complex, flags);
  if (!i) i = fftwf_plan_dft_c2r_1d(size, complex, time.data(), flags);
  if (!f || !i) {
    if (f) fftwf_destroy_plan(f);
    if (i) fftwf_destroy_plan(i);
    throw std::runtime_error("FFTW could not plan a " + std::to_string(n) + "-point real FFT");
  }
  forward_ = f;
  inverse_ = i;
  if (learned && options.measure) save_wisdom(options.wisdom_file);
}

RealFftPair::~RealFftPair() {
  const std::lock_guard lock(planner_mutex());
  fftwf_destroy_plan(static_cast<fftwf_plan>(forward_));
  fftwf_destroy_plan(static_cast<fftwf_plan>(inverse_));
}

std::shared_ptr<const RealFftPair> RealFftPair::get(std::size_t n) {
  // Plans live for the whole process: a handful of sizes, reused by every engine.
  // The planner mutex is made first so that it outlives the cache (statics die
  // in reverse order), since destroying a pair takes it.
  planner_mutex();
  static std::mutex cache_mutex;
  static std::map<std::size_t, std::shared_ptr<const RealFftPair>> cache;
  const std::lock_guard lock(cache_mutex);
  auto& slot = cache[n];
  if (!slot) slot = std::make_shared<const RealFftPair>(n);
  return slot;
}

void RealFftPair::forward(const float* in, float* spectrum) const {
  // FFTW's new-array execute takes a non-const input; r2c does not write it.
  fftwf_execute_dft_r2c(static_cast<fftwf_plan>(forward_), const_cast<float*>(in),
                        reinterpret_cast<fftwf_complex*>(spectrum));
}

void RealFftPair::inverse(float* spectrum, float* out) const {
  fftwf_execute_dft_c2r(static_cast<fftwf_plan>(inverse_),
                        reinterpret_cast<fftwf_complex*>(spectrum), out);
}

}  // namespace tapstream::fftw
