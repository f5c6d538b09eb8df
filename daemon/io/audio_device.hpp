#pragma once
// PortAudio as RAII objects: the library (Pa_Initialize/Pa_Terminate), the
// list of devices, the choice of a device by name or index, and one open
// stream (input, output, or both on one callback).

#include <portaudio.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapstream {

class AudioDeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws AudioDeviceError naming `call` and PortAudio's text for `error`.
void check_portaudio(PaError error, const char* call);

// Pa_Initialize for its lifetime. PortAudio counts initialisations, so nested
// guards are fine (only the first one scans the devices and names the JACK
// client); every stream must be closed before its guard goes.
class PortAudioLibrary {
 public:
  // Under JACK, this process is the client `jack_client_name`.
  explicit PortAudioLibrary(
      const std::string& jack_client_name = "tapstream");  // throws AudioDeviceError
  ~PortAudioLibrary();
  PortAudioLibrary(const PortAudioLibrary&) = delete;
  PortAudioLibrary& operator=(const PortAudioLibrary&) = delete;
};

struct AudioDeviceInfo {
  int index = 0;
  std::string name;
  std::string host_api;
  int max_input_channels = 0;
  int max_output_channels = 0;
  double default_sample_rate = 0.0;
  double default_low_input_latency = 0.0;   // seconds
  double default_low_output_latency = 0.0;  // seconds
  bool default_input = false;
  bool default_output = false;
};

// Every device PortAudio sees (a PortAudioLibrary must be alive).
std::vector<AudioDeviceInfo> list_audio_devices();

enum class Direction { input, output };

// Chooses a device: "" or "default" is the host's default device for the
// direction; a number is a device index; anything else is a case-insensitive
// substring of the device name (an exact name wins over substrings). The
// device must have at least `channels` channels in `direction`. Throws
// AudioDeviceError naming the value and listing the candidates when none or
// several match.
AudioDeviceInfo choose_audio_device(const std::string& selector, Direction direction, int channels);

// The real-time callback: `input` and/or `output` hold `frames` interleaved
// frames (null for a direction the stream does not have). It must not lock,
// allocate, log or wait. The stream is stopped by AudioStream::stop(), never
// by the callback.
using AudioCallback = void (*)(const float* input, float* output, std::size_t frames,
                               void* context);

struct AudioStreamOptions {
  std::optional<int> input_device;   // PortAudio device index; none: no input
  std::optional<int> output_device;  // none: no output
  int input_channels = 2;            // they differ for a routing matrix (its inputs and outputs)
  int output_channels = 2;
  double sample_rate = 48000.0;
  // 0: let the host choose (with JACK: its period, without extra buffering).
  unsigned long frames_per_buffer = 0;
  AudioCallback callback = nullptr;
  void* context = nullptr;
};

// Whether the devices of `options` run at its sample rate (and channel count).
bool sample_rate_supported(const AudioStreamOptions& options);
// The standard rates (8000 to 384000 Hz) the devices of `options` accept.
std::vector<int> offered_sample_rates(const AudioStreamOptions& options);

// The JACK client name PortAudio got (JACK adds -01... when the asked one is
// taken); empty without a JACK server.
std::string jack_client_name();

// One open PortAudio stream of float32 interleaved samples. Closed (and
// stopped) by the destructor.
class AudioStream {
 public:
  explicit AudioStream(const AudioStreamOptions& options);  // opens; throws AudioDeviceError
  ~AudioStream();
  AudioStream(const AudioStream&) = delete;
  AudioStream& operator=(const AudioStream&) = delete;

  void start();
  void stop();  // waits for the last callback; safe to call twice
  // True while the stream runs; false after an error stopped it (the device
  // vanished, the server died) or after stop().
  bool active() const;
  // Gives up the stream without closing it (it stays allocated until the
  // process ends). For a JACK stream whose server died: PortAudio's JACK code
  // asserts (aborting the process) when such a stream is stopped or closed.
  void abandon() { stream_ = nullptr; }
  // The rate the stream runs at now, in Hz: under JACK (and PipeWire's JACK)
  // the server's, which may change while the stream runs (PortAudio follows
  // the server's rate callback); 0 without a stream. Off the callback.
  double sample_rate() const;
  // PortAudio's own estimate of the device latencies, in seconds.
  double input_latency() const;
  double output_latency() const;

 private:
  static int on_callback(const void* input, void* output, unsigned long frames,
                         const PaStreamCallbackTimeInfo* time, PaStreamCallbackFlags flags,
                         void* self);

  AudioStreamOptions options_;
  PaStream* stream_ = nullptr;
  bool started_ = false;
};

// One line per device for `tapstream devices` and error messages.
std::string describe_audio_device(const AudioDeviceInfo& device);

}  // namespace tapstream
