#include "daemon/commands/response_plot.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include "daemon/commands/command.hpp"
#include "dsp/design/filter_response.hpp"
#include "dsp/files/temporary_file.hpp"

extern char** environ;

namespace tapstream {

namespace fs = std::filesystem;

namespace {

// At most this many points per curve: enough for a 1200-pixel-wide panel, and
// an SVG of a 65536-tap filter stays a few hundred kilobytes.
constexpr std::size_t max_points = 2048;
// Below the peak by more than this, the magnitude panel shows nothing more.
constexpr double magnitude_span_db = 160.0;

// A directory only this process uses (mode 0700), removed with its contents.
class PrivateTempDir {
 public:
  PrivateTempDir() {
    std::string pattern = (fs::temp_directory_path() / "tapstream-plot-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error(fmt::format("cannot make a temporary directory in {}: {}",
                                           fs::temp_directory_path().string(),
                                           std::strerror(errno)));
    }
    path_ = pattern;
  }
  ~PrivateTempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A string in gnuplot's single quotes: only a quote needs escaping, doubled.
std::string single_quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A title in double quotes (noenhanced): backslashes and quotes escaped,
// control characters (a newline in a file name) shown as spaces.
std::string double_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out + "\"";
}

std::string number(double value) {
  return std::isfinite(value) ? fmt::format("{:.9g}", value) : std::string("NaN");
}

// Grid indices 1..last (log axis) or 0..last, at most max_points of them,
// spaced evenly on the axis the panel uses.
std::vector<std::size_t> plotted_bins(std::size_t bins, bool linear) {
  std::vector<std::size_t> picked;
  const std::size_t first = linear ? 0 : 1, last = bins - 1;
  if (last - first + 1 <= max_points) {
    for (std::size_t k = first; k <= last; ++k) picked.push_back(k);
    return picked;
  }
  for (std::size_t i = 0; i < max_points; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(max_points - 1);
    const double at = linear ? first + t * static_cast<double>(last - first)
                             : std::pow(static_cast<double>(last), t);
    const auto k = static_cast<std::size_t>(std::lround(at));
    if (picked.empty() || k > picked.back()) picked.push_back(k);
  }
  return picked;
}

struct Ranges {
  double f_low = std::numeric_limits<double>::infinity(), f_high = 0.0;
  double db_high = -std::numeric_limits<double>::infinity();
  double db_low = std::numeric_limits<double>::infinity();
  double delay_low = std::numeric_limits<double>::infinity();
  double delay_high = -std::numeric_limits<double>::infinity();
};

// Writes response<i>.dat (Hz, dB, phase in degrees, group delay in ms) and
// impulse<i>.dat (ms, amplitude) and widens the panels' ranges.
void write_data(const PlottedFilter& filter, std::size_t index, const fs::path& dir, bool linear,
                Ranges& ranges) {
  const FrequencyResponse response = frequency_response(filter.taps, filter.sample_rate);
  double peak = 0.0;
  for (const auto& v : response.value) peak = std::max(peak, std::abs(v));
  std::ofstream data(dir / fmt::format("response{}.dat", index));
  for (const std::size_t k : plotted_bins(response.value.size(), linear)) {
    const double magnitude = std::abs(response.value[k]);
    const double db = magnitude > 0.0 ? to_db(magnitude) : std::numeric_limits<double>::quiet_NaN();
    // In the stopband (60 dB below the peak) the phase says nothing useful and
    // wraps wildly: not drawn.
    const bool audible = magnitude > peak * 1e-3;
    const double phase = audible ? std::arg(response.value[k]) * 180.0 / std::numbers::pi
                                 : std::numeric_limits<double>::quiet_NaN();
    const double delay_ms = 1000.0 * response.group_delay_frames[k] / filter.sample_rate;
    data << number(response.frequency_hz[k]) << ' ' << number(db) << ' ' << number(phase) << ' '
         << number(delay_ms) << '\n';
    if (std::isfinite(db)) ranges.db_low = std::min(ranges.db_low, db);
    // The delay axis follows the passband (within 60 dB of the peak), not the
    // spikes beside the stopband's zeros.
    if (std::isfinite(delay_ms) && magnitude > peak * 1e-3) {
      ranges.delay_low = std::min(ranges.delay_low, delay_ms);
      ranges.delay_high = std::max(ranges.delay_high, delay_ms);
    }
  }
  if (peak > 0.0) ranges.db_high = std::max(ranges.db_high, to_db(peak));
  ranges.f_low = std::min(ranges.f_low, response.frequency_hz[linear ? 0 : 1]);
  ranges.f_high = std::max(ranges.f_high, response.frequency_hz.back());
  if (!data) throw std::runtime_error("cannot write the plot's data in " + dir.string());

  // A long impulse response is drawn as its envelope: each bucket's minimum
  // and maximum, so that no peak is lost.
  std::ofstream impulse(dir / fmt::format("impulse{}.dat", index));
  const std::size_t n = filter.taps.size();
  const std::size_t bucket = std::max<std::size_t>(1, (n + max_points - 1) / max_points);
  for (std::size_t start = 0; start < n; start += bucket) {
    const auto first = filter.taps.begin() + static_cast<std::ptrdiff_t>(start);
    const auto end = filter.taps.begin() + static_cast<std::ptrdiff_t>(std::min(n, start + bucket));
    const auto [low, high] = std::minmax_element(first, end);
    const double ms = 1000.0 * static_cast<double>(start) / filter.sample_rate;
    impulse << number(ms) << ' ' << number(*low) << '\n';
    if (bucket > 1) impulse << number(ms) << ' ' << number(*high) << '\n';
  }
  if (!impulse) throw std::runtime_error("cannot write the plot's data in " + dir.string());
}

std::string script(const std::vector<PlottedFilter>& filters, const std::string& terminal,
                   const fs::path& dir, const fs::path& picture, const PlotOptions& options,
                   const Ranges& ranges) {
  std::ostringstream gp;
  gp << "set terminal " << terminal << "\n";
  gp << "set output " << single_quoted(picture.string()) << "\n";
  gp << "set datafile missing 'NaN'\nset grid\nset key top right opaque box\n";
  gp << "set multiplot layout 2,2";
  if (!options.title.empty()) gp << " title " << double_quoted(options.title);
  gp << "\n";
  const auto curves = [&](const std::string& prefix, const std::string& columns) {
    std::string line = "plot ";
    for (std::size_t i = 0; i < filters.size(); ++i) {
      if (i > 0) line += ", \\\n     ";
      line += single_quoted((dir / fmt::format("{}{}.dat", prefix, i)).string()) + " using " +
              columns + " with lines lw 1.5 title " + double_quoted(filters[i].label);
    }
    return line + "\n";
  };
  gp << "set xlabel 'frequency (Hz)'\n";
  gp << "set xrange [" << number(ranges.f_low) << ":" << number(ranges.f_high) << "]\n";
  if (!options.linear_frequency) gp << "set logscale x 10\n";
  // Magnitude: from the highest peak (rounded up to 10 dB) down 160 dB at most.
  const double top =
      std::isfinite(ranges.db_high) ? 10.0 * std::ceil(ranges.db_high / 10.0 + 0.05) : 10.0;
  const double bottom =
      std::isfinite(ranges.db_low)
          ? std::max(10.0 * std::floor(ranges.db_low / 10.0 - 0.05), top - magnitude_span_db)
          : top - magnitude_span_db;
  gp << "set ylabel 'magnitude (dB)'\nset yrange [" << number(bottom) << ":" << number(top)
     << "]\n";
  gp << curves("response", "1:2");
  gp << "set ylabel 'phase (degrees)'\nset yrange [-180:180]\nset ytics 90\n";
  gp << curves("response", "1:3");
  gp << "set ytics autofreq\nset ylabel 'group delay (ms)'\n";
  if (std::isfinite(ranges.delay_low)) {
    const double pad = std::max(0.1 * (ranges.delay_high - ranges.delay_low), 0.05);
    gp << "set yrange [" << number(ranges.delay_low - pad) << ":" << number(ranges.delay_high + pad)
       << "]\n";
  } else {
    gp << "set autoscale y\n";
  }
  gp << curves("response", "1:4");
  gp << "unset logscale x\nset autoscale x\nset autoscale y\n";
  gp << "set xlabel 'time (ms)'\nset ylabel 'amplitude'\n";
  gp << curves("impulse", "1:2");
  gp << "unset multiplot\n";
  return gp.str();
}

constexpr const char* gnuplot_missing =
    "gnuplot is not installed (or not on PATH): tapstream draws with it; install the "
    "gnuplot-nox package (tools/install-deps.sh does)";

// Runs `gnuplot SCRIPT` with its output in `log`; throws with its message
// when it cannot be started or fails.
void run_gnuplot(const fs::path& script_file, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string program = "gnuplot", argument = script_file.string();
  char* argv[] = {program.data(), argument.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) throw std::runtime_error(gnuplot_missing);
  if (spawned != 0) {
    throw std::runtime_error(std::string("cannot start gnuplot: ") + std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waiting for gnuplot failed");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::ifstream in(log);
  std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!message.empty() && std::isspace(static_cast<unsigned char>(message.back()))) {
    message.pop_back();
  }
  if (message.size() > 600) message = "..." + message.substr(message.size() - 600);
  throw std::runtime_error(
      (WIFEXITED(status) ? fmt::format("gnuplot failed (exit status {})", WEXITSTATUS(status))
                         : std::string("gnuplot was killed")) +
      (message.empty() ? std::string() : ": " + message));
}

}  // namespace

void require_gnuplot() {
  // Where posix_spawnp will look: PATH, else the system's default path.
  const char* path = std::getenv("PATH");
  const std::string directories = path != nullptr ? path : "/bin:/usr/bin";
  std::size_t start = 0;
  while (start <= directories.size()) {
    const std::size_t end = std::min(directories.find(':', start), directories.size());
    const std::string directory = directories.substr(start, end - start);
    const fs::path program = fs::path(directory.empty() ? "." : directory) / "gnuplot";
    std::error_code error;
    if (fs::is_regular_file(program, error) && ::access(program.c_str(), X_OK) == 0) return;
    start = end + 1;
  }
  throw std::runtime_error(gnuplot_missing);
}

std::string plot_terminal_for(const fs::path& output) {
  std::string extension = output.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (extension == ".svg") {
    return "svg size 1200,900 dynamic noenhanced font 'sans,11' background '#ffffff'";
  }
  if (extension == ".png") {
    return "pngcairo size 1200,900 noenhanced font 'sans,10' background '#ffffff'";
  }
  throw UsageError("'" + output.string() + "': a picture is .svg or .png (got '" +
                   (extension.empty() ? std::string("no extension") : extension) + "')");
}

void plot_responses(const std::vector<PlottedFilter>& filters, const fs::path& output,
                    const PlotOptions& options) {
  const std::string terminal = plot_terminal_for(output);
  if (filters.empty()) throw std::invalid_argument("nothing to plot");
  const PrivateTempDir dir;
  Ranges ranges;
  for (std::size_t i = 0; i < filters.size(); ++i) {
    write_data(filters[i], i, dir.path(), options.linear_frequency, ranges);
  }
  const fs::path picture = dir.path() / ("picture" + output.extension().string());
  const fs::path script_file = dir.path() / "plot.gp";
  {
    std::ofstream out(script_file);
    out << script(filters, terminal, dir.path(), picture, options, ranges);
    if (!out) throw std::runtime_error("cannot write the plot's script in " + dir.path().string());
  }
  run_gnuplot(script_file, dir.path() / "gnuplot.log");

  // gnuplot wrote into the private directory; the destination changes only
  // now, in one rename.
  std::ifstream drawn(picture, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(drawn)),
                          std::istreambuf_iterator<char>());
  if (bytes.empty()) throw std::runtime_error("gnuplot drew nothing (empty picture)");
  try {
    TemporaryFile file(output);
    std::size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(file.fd(), bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("cannot write: ") + std::strerror(errno));
      written += static_cast<std::size_t>(n);
    }
    file.commit();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(output.string() + ": " + e.what());
  }
}

}  // namespace tapstream
