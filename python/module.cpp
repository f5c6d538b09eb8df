// The tapstream Python module's compiled part (`tapstream._tapstream`;
// python/tapstream/__init__.py is the package): Engine and Matrix over the one
// model (a RoutingMatrix run by a MatrixEngine from the engine factory, a
// filter per channel being the diagonal matrix), and the process command for
// process_file. NumPy blocks are read and written in place where their memory
// order allows, with the GIL released while the engine works; CUDA arrays go
// through tapstream._device_arrays.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/commands/command.hpp"
#include "daemon/config/config.hpp"
#include "daemon/config/matrix_config.hpp"
#include "daemon/engine_factory.hpp"
#include "daemon/fftw_environment.hpp"
#include "python/device_arrays.hpp"
#include "python/engine_session.hpp"
#include "python/numpy_blocks.hpp"
#include "python/process_command_runner.hpp"
#include "python/python_filters.hpp"

namespace py = pybind11;
using namespace py::literals;

namespace tapstream::python {
namespace {

constexpr std::size_t kMostBlockFrames = std::size_t(1) << 20;

// A routing matrix as Python holds it: immutable, shared with the engines
// that run it; `file` is the TOML file it was read from (empty: made in Python).
struct PyMatrix {
  std::shared_ptr<const RoutingMatrix> matrix;
  std::string file;
};

PyMatrix make_matrix(std::size_t inputs, std::size_t outputs, const py::iterable& paths) {
  std::vector<MatrixPath> model;
  for (py::handle path : paths) model.push_back(path_from(path, model.size()));
  return {
      std::make_shared<const RoutingMatrix>(RoutingMatrix::make(inputs, outputs, std::move(model))),
      {}};
}

PyMatrix matrix_from_toml(const std::filesystem::path& file, int sample_rate) {
  std::error_code error;
  if (!std::filesystem::exists(file, error)) {
    throw py::value_error("Matrix.from_toml: " + file.string() + ": no such file");
  }
  MatrixFileOptions options;
  options.sample_rate = sample_rate;
  RoutingMatrix matrix = [&] {
    const py::gil_scoped_release release;
    return load_matrix_file(file, options);
  }();
  return {std::make_shared<const RoutingMatrix>(std::move(matrix)), file.string()};
}

py::list matrix_paths(const PyMatrix& m) {
  py::list paths;
  for (const MatrixPath& p : m.matrix->paths()) {
    py::array_t<float> taps(py::ssize_t(p.taps.size()));
    std::copy(p.taps.begin(), p.taps.end(), taps.mutable_data());
    paths.append(py::make_tuple(p.input, p.output, taps, p.gain_db, p.delay_frames, p.invert));
  }
  return paths;
}

std::string matrix_repr(const PyMatrix& m) {
  return "tapstream.Matrix(" + std::to_string(m.matrix->inputs()) + " inputs, " +
         std::to_string(m.matrix->outputs()) + " outputs, " +
         std::to_string(m.matrix->paths().size()) + " paths, " +
         std::to_string(m.matrix->max_taps()) + " taps at most" +
         (m.file.empty() ? "" : ", from " + m.file) + ")";
}

// What Engine() and set_filters() take: a Matrix, or filters per channel.
RoutingMatrix matrix_of(py::handle filters) {
  if (py::isinstance<PyMatrix>(filters)) return *filters.cast<const PyMatrix&>().matrix;
  return RoutingMatrix::diagonal(bank_from(filters));
}

// The bytes an array's elements span, first to one past the last.
std::pair<std::uintptr_t, std::uintptr_t> extent(const py::array& a) {
  auto low = reinterpret_cast<std::uintptr_t>(a.data()), high = low;
  if (a.size() == 0) return {low, low};
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    const py::ssize_t reach = (a.shape(d) - 1) * a.strides(d);
    if (reach < 0) low -= std::uintptr_t(-reach);
    if (reach > 0) high += std::uintptr_t(reach);
  }
  return {low, high + std::uintptr_t(a.itemsize())};
}

bool overlap(const py::array& a, const py::array& b) {
  const auto [a_low, a_high] = extent(a);
  const auto [b_low, b_high] = extent(b);
  return a_low < b_high && b_low < a_high;
}

// The same for NumPy blocks read by numpy_block().
std::pair<std::uintptr_t, std::uintptr_t> extent(const NumpyBlock& b) {
  auto low = reinterpret_cast<std::uintptr_t>(b.data), high = low;
  if (b.rows == 0 || b.columns == 0) return {low, low};
  for (const auto& [count, stride] :
       {std::pair{b.rows, b.row_stride}, {b.columns, b.column_stride}}) {
    const std::ptrdiff_t reach = (count - 1) * stride * std::ptrdiff_t(sizeof(float));
    if (reach < 0) low -= std::uintptr_t(-reach);
    if (reach > 0) high += std::uintptr_t(reach);
  }
  return {low, high + sizeof(float)};
}

bool overlap(const NumpyBlock& a, const NumpyBlock& b) {
  const auto [a_low, a_high] = extent(a);
  const auto [b_low, b_high] = extent(b);
  return a_low < b_high && b_low < a_high;
}

bool is_device_array(py::handle x) {
  return !py::isinstance<py::array>(x) &&
         (py::hasattr(x, "__cuda_array_interface__") || py::hasattr(x, "__dlpack__"));
}

// A set_paths key: an (input, output) pair of indices.
std::pair<std::size_t, std::size_t> path_key(py::handle key) {
  if (!py::isinstance<py::tuple>(key) || py::len(key) != 2) {
    throw py::type_error("set_paths: keys are (input, output) pairs, got " +
                         std::string(py::str(py::repr(key))));
  }
  const auto pair = py::reinterpret_borrow<py::tuple>(key);
  const long long input = pair[0].cast<long long>(), output = pair[1].cast<long long>();
  if (input < 0 || output < 0) {
    throw py::value_error("set_paths: (" + std::to_string(input) + ", " + std::to_string(output) +
                          ") is no path: indices count from 0");
  }
  return {std::size_t(input), std::size_t(output)};
}

std::string path_name(const std::pair<std::size_t, std::size_t>& pair) {
  return "set_paths: input " + std::to_string(pair.first) + " -> output " +
         std::to_string(pair.second);
}

class PyEngine {
 public:
  PyEngine(py::handle filters, const std::string& backend, std::size_t max_block,
           std::optional<std::size_t> max_taps) {
    if (max_block == 0 || max_block > kMostBlockFrames) {
      throw py::value_error("max_block is " + std::to_string(max_block) + ": must be 1.." +
                            std::to_string(kMostBlockFrames));
    }
    RoutingMatrix matrix = matrix_of(filters);
    EngineOptions options;
    options.max_block_frames = max_block;
    options.max_taps = max_taps.value_or(0);
    if (max_taps && *max_taps < matrix.max_taps()) {
      throw py::value_error("max_taps is " + std::to_string(*max_taps) +
                            ", below the longest filter's " + std::to_string(matrix.max_taps()) +
                            " taps (delay included)");
    }
    const Backend chosen = parse_backend(backend);
    const py::gil_scoped_release release;
    std::unique_ptr<MatrixEngine> engine = make_engine(chosen, matrix, options);
    session_ = std::make_shared<EngineSession>(std::move(engine), std::move(matrix));
  }

  py::object process(py::handle x, py::handle out) {
    // A loop's calls: a float32 NumPy block in, a new array or a fitting out=.
    NumpyBlock fast_in, fast_out;
    if (numpy_block(x.ptr(), fast_in) && std::size_t(fast_in.rows) == session_->inputs()) {
      const auto rows = std::ptrdiff_t(session_->outputs());
      if (out.is_none()) {
        auto output = py::reinterpret_steal<py::object>(new_float32_array(rows, fast_in.columns));
        if (!output) throw py::error_already_set();
        numpy_block(output.ptr(), fast_out);
        filter(fast_in, fast_out.data);
        return output;
      }
      if (numpy_block(out.ptr(), fast_out) && fast_out.c_order && fast_out.writable &&
          fast_out.rows == rows && fast_out.columns == fast_in.columns &&
          !overlap(fast_in, fast_out)) {
        filter(fast_in, fast_out.data);
        return py::reinterpret_borrow<py::object>(out);
      }
    }
    if (const DeviceArrayKind kind = device_array_kind(x); kind != DeviceArrayKind::none) {
      return process_device_array(kind, x, out);
    }
    if (is_device_array(x)) {
      if (!out.is_none()) {
        throw py::type_error("process: out= takes NumPy blocks, CuPy arrays and PyTorch tensors");
      }
      return py::module_::import("tapstream._device_arrays").attr("process")(py::cast(this), x);
    }
    // Everything else, checked, each problem named.
    const HostBlock in = host_block(x);
    py::array_t<float> output = output_for(py::reinterpret_borrow<py::object>(out), in.frames);
    if (!out.is_none() && overlap(in.array, output)) {
      throw py::value_error(
          "process: out shares memory with the block; the engine needs them apart");
    }
    float* out_data = output.mutable_data();
    {
      const py::gil_scoped_release release;
      session_->process(in.samples, out_data, in.frames);
    }
    return output;
  }

  // A PyTorch or CuPy array on the GPU, read and written there; the output is
  // a new array of the same kind, or `out` (the same kind, C-ordered).
  py::object process_device_array(DeviceArrayKind kind, py::handle x, py::handle out) {
    const DeviceBlock in = device_block(kind, x, "process", true);
    if (in.rows != session_->inputs()) {
      throw py::value_error("process: the block has " + std::to_string(in.rows) +
                            " channels; the engine has " + std::to_string(session_->inputs()) +
                            " inputs");
    }
    if (in.device != device_) {
      throw py::value_error("process: the array is on GPU " + std::to_string(in.device) +
                            "; the engine runs on GPU " + std::to_string(device_));
    }
    const std::size_t rows = session_->outputs(), frames = in.columns;
    DeviceBlock output;
    if (out.is_none()) {
      output = new_device_block(kind, in.array, in.device, rows, frames);
    } else {
      if (device_array_kind(out) != kind) {
        throw py::type_error(
            "process: out must be an array of the block's kind (" +
            std::string(kind == DeviceArrayKind::torch ? "a PyTorch tensor" : "a CuPy array") +
            " on the GPU)");
      }
      output = device_block(kind, out, "process: out", false);
      if (output.rows != rows || output.columns != frames || output.device != in.device) {
        throw py::value_error("process: out must be a C-ordered (" + std::to_string(rows) + ", " +
                              std::to_string(frames) + ") float32 array on GPU " +
                              std::to_string(in.device));
      }
      const std::uintptr_t in_end = in.data + in.rows * frames * sizeof(float);
      const std::uintptr_t out_end = output.data + rows * frames * sizeof(float);
      if (frames != 0 && in.data < out_end && output.data < in_end) {
        throw py::value_error(
            "process: out shares memory with the block; the engine needs them apart");
      }
    }
    if (frames != 0) {
      const std::uintptr_t stream = current_stream(kind, in.device);
      process_device(in.data, output.data, frames, stream, in.device);
    }
    return output.array;
  }

  // The device-array path's way in (tapstream._device_arrays): C-ordered
  // (inputs, frames) and (outputs, frames) float32 arrays on GPU `device`.
  void process_device(std::uintptr_t in, std::uintptr_t out, std::size_t frames,
                      std::uintptr_t stream, int device) {
    if (device != device_) {
      throw py::value_error("process: the array is on GPU " + std::to_string(device) +
                            "; the engine runs on GPU " + std::to_string(device_));
    }
    bool done = false;
    {
      const py::gil_scoped_release release;
      done = session_->process_device(reinterpret_cast<const float*>(in),
                                      reinterpret_cast<float*>(out), frames,
                                      reinterpret_cast<void*>(stream));
    }
    if (!done) {
      throw py::type_error("process: the " + session_->engine().name() +
                           " engine filters host memory; pass a NumPy array (e.g. x.get() or "
                           "x.cpu().numpy()), or use backend=\"cuda\"");
    }
  }

  std::vector<double> time_engine_calls(py::handle x, std::size_t calls) {
    const HostBlock in = host_block(x);
    const std::size_t frames = in.frames;
    if (in.samples.frame_stride != 1 || in.samples.channel_stride != std::ptrdiff_t(frames) ||
        frames == 0 || frames > session_->engine().max_block_frames()) {
      throw py::value_error("_time_engine_calls: a C-ordered block of 1..max_block frames");
    }
    py::array_t<float> output = output_for(py::none(), frames);
    float* out_data = output.mutable_data();
    const py::gil_scoped_release release;
    return session_->time_engine_calls(in.samples.data, out_data, frames, calls);
  }

  double last_engine_call_us() const { return session_->last_call_us(); }

  std::vector<double> time_device_calls(std::uintptr_t in, std::uintptr_t out, std::size_t frames,
                                        std::uintptr_t stream, std::size_t calls) {
    const py::gil_scoped_release release;
    return session_->time_device_calls(reinterpret_cast<const float*>(in),
                                       reinterpret_cast<float*>(out), frames,
                                       reinterpret_cast<void*>(stream), calls);
  }

  void set_filters(py::handle filters, bool crossfade) {
    const bool is_matrix = py::isinstance<PyMatrix>(filters);
    if (!is_matrix && !session_->routing()->is_diagonal()) {
      throw py::value_error(
          "set_filters: this engine runs a routing matrix; give a Matrix with the same paths, "
          "or new taps for some paths with set_paths");
    }
    const RoutingMatrix next = matrix_of(filters);
    const py::gil_scoped_release release;
    session_->set_matrix(next, crossfade);
  }

  // set_paths(paths, crossfade, pairs): `paths` a dict of taps by pair, or
  // with `pairs`, a 2-D array whose row k is the taps of pairs[k].
  void set_paths_of(py::handle paths, bool crossfade, py::handle pairs) {
    if (pairs.is_none()) {
      if (!py::isinstance<py::dict>(paths)) {
        throw py::type_error(
            "set_paths: expected a dict {(input, output): taps}, or a 2-D array of taps with "
            "pairs=[(input, output), ...], got " +
            std::string(py::str(py::type::handle_of(paths).attr("__name__"))));
      }
      set_paths(py::reinterpret_borrow<py::dict>(paths), crossfade);
      return;
    }
    std::vector<std::pair<std::size_t, std::size_t>> keys;
    std::set<std::pair<std::size_t, std::size_t>> seen;
    for (const py::handle key : pairs) {
      keys.push_back(path_key(key));
      if (!seen.insert(keys.back()).second) {
        throw py::value_error("set_paths: (" + std::to_string(keys.back().first) + ", " +
                              std::to_string(keys.back().second) + ") twice in pairs");
      }
    }
    const auto check_rows = [&](std::size_t rows, std::size_t columns) {
      if (rows != keys.size()) {
        throw py::value_error("set_paths: " + std::to_string(rows) + " rows of taps for " +
                              std::to_string(keys.size()) + " pairs");
      }
      if (columns == 0) throw py::value_error("set_paths: no taps (rows of 0 columns)");
    };
    if (const DeviceArrayKind kind = device_array_kind(paths); kind != DeviceArrayKind::none) {
      const DeviceBlock rows = device_block(kind, paths, "set_paths: the rows of taps", true);
      check_rows(rows.rows, rows.columns);
      if (rows.device != device_) {
        throw py::value_error("set_paths: the taps are on GPU " + std::to_string(rows.device) +
                              "; the engine runs on GPU " + std::to_string(device_));
      }
      std::map<std::pair<std::size_t, std::size_t>, std::span<const float>> by_pair;
      const auto* data = reinterpret_cast<const float*>(rows.data);
      for (std::size_t k = 0; k < keys.size(); ++k)
        by_pair[keys[k]] = {data + k * rows.columns, rows.columns};
      const std::uintptr_t stream = current_stream(kind, rows.device);
      {
        const py::gil_scoped_release release;
        if (session_->set_paths_device(by_pair, crossfade, reinterpret_cast<void*>(stream))) return;
      }
    }
    // Host memory (device rows for an engine without a device path are copied here).
    const auto rows = taps_rows(paths, "set_paths: the rows of taps");
    check_rows(std::size_t(rows.shape(0)), std::size_t(rows.shape(1)));
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> by_pair;
    const auto columns = std::size_t(rows.shape(1));
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const float* row = rows.data() + k * columns;
      by_pair[keys[k]] = std::vector<float>(row, row + columns);
    }
    const py::gil_scoped_release release;
    session_->set_paths(std::move(by_pair), crossfade);
  }

  void set_paths(const py::dict& taps, bool crossfade) {
    bool on_device = false;
    for (const auto& entry : taps) on_device = on_device || is_device_array(entry.second);
    if (on_device) {
      const std::optional<bool> read_here = set_paths_device_arrays(taps, crossfade);
      if (read_here ? *read_here : set_paths_device(taps, crossfade)) return;
    }
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> by_pair;
    for (const auto& [key, value] : taps) {
      const auto pair = path_key(key);
      by_pair[pair] = taps_from(value, path_name(pair));
    }
    const py::gil_scoped_release release;
    session_->set_paths(std::move(by_pair), crossfade);
  }

  void reset() {
    const py::gil_scoped_release release;
    session_->reset();
  }

  // set_paths with CuPy arrays and PyTorch tensors on the GPU, read here:
  // nullopt where some taps are anything else (set_paths_device takes them,
  // through tapstream._device_arrays); false where the engine has no device
  // path (the caller copies them to the host).
  std::optional<bool> set_paths_device_arrays(const py::dict& taps, bool crossfade) {
    std::vector<DeviceArrayKind> kinds;
    kinds.reserve(taps.size());
    for (const auto& entry : taps) {
      kinds.push_back(device_array_kind(entry.second));
      if (kinds.back() == DeviceArrayKind::none) return std::nullopt;
    }
    std::vector<DeviceBlock> kept;  // holds converted copies until the engine has read them
    kept.reserve(taps.size());
    std::map<std::pair<std::size_t, std::size_t>, std::span<const float>> by_pair;
    DeviceArrayKind first = DeviceArrayKind::none, other = DeviceArrayKind::none;
    std::size_t k = 0;
    for (const auto& [key, value] : taps) {
      const auto pair = path_key(key);
      const std::string what = path_name(pair);
      const DeviceArrayKind kind = kinds[k++];
      DeviceBlock block = device_taps(kind, value, what);
      if (!kept.empty() && block.device != kept.front().device) {
        throw py::value_error(what + ": taps on GPU " + std::to_string(block.device) +
                              ", others on GPU " + std::to_string(kept.front().device));
      }
      if (first == DeviceArrayKind::none) first = kind;
      if (kind != first) other = kind;
      by_pair[pair] = {reinterpret_cast<const float*>(block.data), block.columns};
      kept.push_back(std::move(block));
    }
    if (kept.empty()) return std::nullopt;
    const int device = kept.front().device;
    if (device != device_) {
      throw py::value_error("set_paths: the taps are on GPU " + std::to_string(device) +
                            "; the engine runs on GPU " + std::to_string(device_));
    }
    // The engine waits (on the device) for one stream; the other library's is waited for here.
    if (other != DeviceArrayKind::none) {
      py::module_::import("tapstream._device_arrays")
          .attr("_synchronize")(current_stream(other, device),
                                other == DeviceArrayKind::torch ? "torch" : "cupy");
    }
    const std::uintptr_t stream = current_stream(first, device);
    const py::gil_scoped_release release;
    return session_->set_paths_device(by_pair, crossfade, reinterpret_cast<void*>(stream));
  }

  // set_paths with CUDA arrays: their device memory goes to the engine
  // (tapstream._device_arrays.device_paths gathers it, every array on the
  // engine's GPU and complete on one stream). False where no taps are in GPU
  // memory or the engine has no device path (the CPU engine): the caller
  // copies them to the host.
  bool set_paths_device(const py::dict& taps, bool crossfade) {
    const py::object found =
        py::module_::import("tapstream._device_arrays").attr("device_paths")(taps);
    if (found.is_none()) return false;  // CPU tensors: through host memory
    const py::tuple gathered = found.cast<py::tuple>();
    // ([(input, output, pointer, count)], stream, device, arrays kept alive)
    const auto entries = gathered[0].cast<py::list>();
    const auto stream = gathered[1].cast<std::uintptr_t>();
    const int device = gathered[2].cast<int>();
    if (device != device_) {
      throw py::value_error("set_paths: the taps are on GPU " + std::to_string(device) +
                            "; the engine runs on GPU " + std::to_string(device_));
    }
    std::map<std::pair<std::size_t, std::size_t>, std::span<const float>> by_pair;
    for (const py::handle entry : entries) {
      const auto item = entry.cast<py::tuple>();
      const long long input = item[0].cast<long long>(), output = item[1].cast<long long>();
      if (input < 0 || output < 0) {
        throw py::value_error("set_paths: (" + std::to_string(input) + ", " +
                              std::to_string(output) + ") is no path: indices count from 0");
      }
      by_pair[{std::size_t(input), std::size_t(output)}] = {
          reinterpret_cast<const float*>(item[2].cast<std::uintptr_t>()),
          item[3].cast<std::size_t>()};
    }
    const py::gil_scoped_release release;
    return session_->set_paths_device(by_pair, crossfade, reinterpret_cast<void*>(stream));
  }

  std::size_t inputs() const { return session_->inputs(); }
  std::size_t outputs() const { return session_->outputs(); }
  std::size_t max_block() const { return session_->engine().max_block_frames(); }
  std::size_t max_taps() const { return session_->engine().max_taps(); }
  std::string backend() const { return session_->engine().name(); }
  std::string description() const { return session_->engine().description(); }
  PyMatrix matrix() const { return {session_->matrix(), {}}; }

 private:
  // The fast path's engine call, the GIL released.
  void filter(const NumpyBlock& in, float* out) {
    const StridedBlock samples{in.data, in.row_stride, in.column_stride};
    const py::gil_scoped_release release;
    session_->process(samples, out, std::size_t(in.columns));
  }

  // A NumPy block (kept alive by `array`) and where its samples are.
  struct HostBlock {
    py::array array;
    StridedBlock samples;
    std::size_t frames = 0;
  };

  // A NumPy block's samples where they are, after every check.
  HostBlock host_block(py::handle x) const {
    py::array block = py::array::ensure(x);
    if (!block) {
      throw py::type_error("process: expected a (channels, frames) float32 array, got " +
                           std::string(py::str(py::type::handle_of(x).attr("__name__"))));
    }
    if (!py::isinstance<py::array_t<float>>(block)) {
      const std::string from =
          py::isinstance<py::array>(x)
              ? ""
              : " from a " + std::string(py::str(py::type::handle_of(x).attr("__name__")));
      throw py::type_error("process: the block must be float32, got " +
                           std::string(py::str(block.dtype())) + from + " (x.astype(np.float32))");
    }
    if (block.ndim() != 2) {
      throw py::value_error("process: expected a 2-D (channels, frames) block, got " +
                            std::to_string(block.ndim()) + " dimensions");
    }
    const auto channels = std::size_t(block.shape(0));
    if (channels != session_->inputs()) {
      throw py::value_error("process: the block has " + std::to_string(channels) +
                            " channels; the engine has " + std::to_string(session_->inputs()) +
                            " inputs");
    }
    const auto item = py::ssize_t(sizeof(float));
    if (block.strides(0) % item != 0 || block.strides(1) % item != 0 ||
        reinterpret_cast<std::uintptr_t>(block.data()) % alignof(float) != 0) {
      throw py::value_error(
          "process: the block's samples are not aligned float32 (a view into packed "
          "records?); pass np.ascontiguousarray(x)");
    }
    const StridedBlock samples{static_cast<const float*>(block.data()), block.strides(0) / item,
                               block.strides(1) / item};
    return {block, samples, std::size_t(block.shape(1))};
  }

  // `out` when given (checked), else a new (outputs, frames) array.
  py::array_t<float> output_for(py::object out, std::size_t frames) const {
    const auto rows = py::ssize_t(session_->outputs()), columns = py::ssize_t(frames);
    if (out.is_none()) return py::array_t<float>({rows, columns});
    if (!py::isinstance<py::array_t<float>>(out)) {
      throw py::type_error("process: out must be a float32 NumPy array");
    }
    auto array = out.cast<py::array_t<float>>();
    if (array.ndim() != 2 || array.shape(0) != rows || array.shape(1) != columns ||
        !(array.flags() & py::array::c_style) || !array.writeable()) {
      throw py::value_error("process: out must be a writable C-ordered (" + std::to_string(rows) +
                            ", " + std::to_string(columns) + ") float32 array");
    }
    return array;
  }

  std::shared_ptr<EngineSession> session_;
  int device_ = 0;  // the GPU a CUDA engine runs on (EngineOptions::device)
};

// Python's exception for the C++ one being handled, as pybind11's dispatcher
// makes it: the module's translators, then pybind11's own.
void set_python_error() {
  if (py::detail::apply_exception_translators(
          py::detail::get_local_internals().registered_exception_translators) ||
      py::detail::apply_exception_translators(
          py::detail::get_internals().registered_exception_translators)) {
    return;
  }
  PyErr_SetString(PyExc_SystemError, "tapstream: an exception no translator took");
}

constexpr const char* kProcessDoc =
    R"(process(x, out=None)

Filters x, a (inputs, frames) float32 array of any number of frames (any
memory order), and returns the (outputs, frames) float32 output. A CUDA
array (CuPy, PyTorch, anything with __cuda_array_interface__ or DLPack) on the
CUDA engine is read and written on the device and the same kind of array is
returned. out: a C-ordered (outputs, frames) float32 array to write into (and
return) instead of a new one: a NumPy array for a NumPy block, an array of the
block's kind on its GPU for a CuPy array or PyTorch tensor. Raises ValueError
when x's channel count is not the engine's inputs, TypeError when x is not
float32.)";

// Engine.process as a METH_FASTCALL method of the class: the arguments
// parsed here, then PyEngine::process.
PyObject* engine_process(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "process() takes x and out, got %zd positional arguments", nargs);
    return nullptr;
  }
  PyObject* x = nargs > 0 ? args[0] : nullptr;
  PyObject* out = nargs > 1 ? args[1] : nullptr;
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    PyObject** slot = PyUnicode_CompareWithASCIIString(name, "x") == 0     ? &x
                      : PyUnicode_CompareWithASCIIString(name, "out") == 0 ? &out
                                                                           : nullptr;
    if (slot == nullptr) {
      PyErr_Format(PyExc_TypeError, "process() got an unexpected keyword argument '%U'", name);
      return nullptr;
    }
    if (*slot != nullptr) {
      PyErr_Format(PyExc_TypeError, "process() got multiple values for argument '%U'", name);
      return nullptr;
    }
    *slot = args[nargs + k];
  }
  if (x == nullptr) {
    PyErr_SetString(PyExc_TypeError, "process() missing required argument 'x'");
    return nullptr;
  }
  try {
    auto& engine = py::cast<PyEngine&>(py::handle(self));
    return engine.process(x, out == nullptr ? Py_None : out).release().ptr();
  } catch (...) {
    set_python_error();
    return nullptr;
  }
}

PyMethodDef engine_process_method{
    "process", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&engine_process)),
    METH_FASTCALL | METH_KEYWORDS, kProcessDoc};

int process_command(const std::vector<std::string>& arguments) {
  const py::gil_scoped_release release;
  return run_process_command(arguments);
}

}  // namespace
}  // namespace tapstream::python

PYBIND11_MODULE(_tapstream, m) {
  using namespace tapstream;
  using namespace tapstream::python;
  m.doc() = "tapstream's engines (see the package tapstream)";
  // A library says nothing unless something is wrong (the executable's -v is not here).
  spdlog::set_level(spdlog::level::warn);
  // The FFTW planning and wisdom of the executable (TAPSTREAM_FFTW_WISDOM,
  // TAPSTREAM_FFTW_PLANNER), so that the CPU engine plans as `tapstream` does.
  fftw::set_planner_options(fftw_planner_from_environment());

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  py::class_<PyMatrix>(
      m, "Matrix", R"(A routing matrix: inputs in, outputs out, each output the sum of its paths.

Matrix(inputs, outputs, paths), each path a tuple
(input, output, taps[, gain_db[, delay_frames[, invert]]]): channels count
from 0; taps a 1-D float32 or float64 array; gain_db (default 0.0) scales the
taps, delay_frames (default 0) delays them, invert (default False) flips their
polarity. An input or output out of range, the same pair twice, a path with
no taps or a non-finite tap raise ValueError naming the path.

Matrix.from_toml(file) reads a matrix file (docs/routing-matrix.md).
A Matrix whose paths are input c -> output c for every channel runs on the
per-channel engines, like the filters it describes.)")
      .def(py::init(&make_matrix), "inputs"_a, "outputs"_a, "paths"_a)
      .def_static("from_toml", &matrix_from_toml, "file"_a, "sample_rate"_a = 0,
                  R"(Reads a matrix file (TOML: [[path]] tables or [dense]; coefficient files
relative to it). sample_rate (Hz, 0: no check) must match every impulse
response that declares a rate. Raises ValueError naming the file, the path
and the reason.)")
      .def_property_readonly("inputs", [](const PyMatrix& x) { return x.matrix->inputs(); })
      .def_property_readonly("outputs", [](const PyMatrix& x) { return x.matrix->outputs(); })
      .def_property_readonly(
          "max_taps", [](const PyMatrix& x) { return x.matrix->max_taps(); },
          "The longest path's taps, its delay included.")
      .def_property_readonly(
          "file", [](const PyMatrix& x) { return x.file; },
          "The TOML file it was read from ('' for a matrix made in Python).")
      .def_property_readonly("paths", &matrix_paths,
                             "The paths as (input, output, taps, gain_db, delay_frames, invert).")
      .def("__repr__", &matrix_repr);

  py::class_<PyEngine>(
      m, "Engine",
      R"(A streaming FIR engine: Engine(filters, backend="auto", max_block=4096, max_taps=None).

filters: a float32 (channels, taps) array or a list of 1-D arrays of any
lengths (a filter per channel: channel c in -> channel c out), or a Matrix.
backend: "cpu", "cuda" or "auto" (the GPU when one works, else the CPU).
max_block: the frames one engine call takes (longer process() calls are
split). max_taps: the longest filter a later set_filters may bring (default:
the longest given now).

process(x) filters the next frames of one continuous stream: the output is
exactly the causal convolution of everything processed so far, however the
stream is cut into calls. One thread at a time uses the engine; the GIL is
released while it works.)")
      .def(py::init<py::handle, const std::string&, std::size_t, std::optional<std::size_t>>(),
           "filters"_a, "backend"_a = "auto", "max_block"_a = 4096, "max_taps"_a = py::none())
      .def("set_filters", &PyEngine::set_filters, "filters"_a, "crossfade"_a = true,
           R"(Replaces every filter (the same forms as Engine's filters; a Matrix with
the same paths for a matrix engine). Takes effect at the next process(); with
crossfade, its first engine block (min(frames, max_block) frames) fades from
the old filters' output to the new ones', so the swap makes no click; the
input history is kept, nothing is lost.)")
      .def("set_paths", &PyEngine::set_paths_of, "paths"_a, "crossfade"_a = true,
           "pairs"_a = py::none(),
           R"(New taps for some paths: {(input, output): taps, ...}, or with
pairs=[(input, output), ...] a 2-D array whose row k is the taps of pairs[k]
(one array for many paths: a batch from a simulator, read in one go). Every
other path, and every path's gain, delay and polarity, stays. Takes effect like
set_filters; the engine transforms only the named paths, so many paths may
change before every process() call. Taps may be CUDA arrays (CuPy, PyTorch,
all on the engine's GPU): the CUDA engine then reads and transforms them on
the device, with no copy through the host (Engine.matrix cannot show such
taps afterwards). Raises ValueError for a pair that is no path of the matrix,
or taps the engine refuses (too many, NaN or infinite).)")
      .def("reset", &PyEngine::reset, "Forgets the input history, as if the stream started again.")
      .def("_time_engine_calls", &PyEngine::time_engine_calls, "x"_a, "calls"_a,
           "The engine's own microseconds for each of `calls` calls on x (no module in between).")
      .def("_time_device_calls", &PyEngine::time_device_calls, "x"_a, "out"_a, "frames"_a,
           "stream"_a, "calls"_a)
      .def_property_readonly("_last_engine_call_us", &PyEngine::last_engine_call_us,
                             "The engine's own microseconds in the last process() call.")
      .def_property_readonly("inputs", &PyEngine::inputs)
      .def_property_readonly("outputs", &PyEngine::outputs)
      .def_property_readonly("max_block", &PyEngine::max_block)
      .def_property_readonly("max_taps", &PyEngine::max_taps)
      .def_property_readonly("backend", &PyEngine::backend,
                             "The engine that runs: 'cpu' or 'cuda'.")
      .def_property_readonly("description", &PyEngine::description)
      .def_property_readonly("matrix", &PyEngine::matrix,
                             "The matrix as last set (per-channel filters: the diagonal).")
      .def("__repr__",
           [](const PyEngine& e) { return "tapstream.Engine(" + e.description() + ")"; });

  // Engine.process: see engine_process.
  PyObject* process_method = PyDescr_NewMethod(
      reinterpret_cast<PyTypeObject*>(m.attr("Engine").ptr()), &engine_process_method);
  if (process_method == nullptr) throw py::error_already_set();
  m.attr("Engine").attr("process") = py::reinterpret_steal<py::object>(process_method);

  m.def("_process_command", &process_command, "arguments"_a,
        "Runs `tapstream process ARGUMENTS...`; returns its exit status.");
}
