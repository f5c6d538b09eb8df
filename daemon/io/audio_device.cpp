#include "daemon/io/audio_device.hpp"

#include <alsa/asoundlib.h>
#include <fmt/format.h>
#include <jack/jack.h>
#include <pa_jack.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace tapstream {

void check_portaudio(PaError error, const char* call) {
  if (error >= 0) return;
  std::string text = Pa_GetErrorText(error);
  if (error == paUnanticipatedHostError) {
    const PaHostErrorInfo* host = Pa_GetLastHostErrorInfo();
    if (host != nullptr && host->errorText != nullptr)
      text += fmt::format(" ({})", host->errorText);
  }
  throw AudioDeviceError(fmt::format("{} failed: {}", call, text));
}

namespace {

// ALSA and JACK print their probing chatter ("ALSA lib pcm.c: Unknown PCM
// cards.pcm.rear", "Cannot connect to server socket") straight to stderr while
// PortAudio looks for devices; it is noise at the default level, so it goes to
// tapstream's log at debug level instead (-v shows it).
extern "C" void alsa_chatter(const char* file, int line, const char* function, int error,
                             const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  spdlog::debug("ALSA {}:{} ({}){}: {}", file, line, function,
                error != 0 ? fmt::format(" error {}", error) : std::string(), text);
}

extern "C" void jack_error_chatter(const char* message) {
  spdlog::debug("JACK: {}", message);
}

extern "C" void jack_info_chatter(const char* message) {
  spdlog::debug("JACK: {}", message);
}

void route_library_chatter_to_the_log() {
  static std::once_flag once;
  std::call_once(once, [] {
    snd_lib_error_set_handler(alsa_chatter);
    jack_set_error_function(jack_error_chatter);
    jack_set_info_function(jack_info_chatter);
  });
}

}  // namespace

PortAudioLibrary::PortAudioLibrary(const std::string& jack_client_name) {
  route_library_chatter_to_the_log();
  // PortAudio keeps the pointer and reads it in Pa_Initialize (when it opens
  // its JACK client): the name must outlive that call.
  static std::string client_name;
  client_name = jack_client_name;
  check_portaudio(PaJack_SetClientName(client_name.c_str()), "PaJack_SetClientName");
  check_portaudio(Pa_Initialize(), "Pa_Initialize");
}

std::string jack_client_name() {
  const char* name = nullptr;
  if (PaJack_GetClientName(&name) != paNoError || name == nullptr) return {};
  return name;
}

PortAudioLibrary::~PortAudioLibrary() {
  Pa_Terminate();
}

std::vector<AudioDeviceInfo> list_audio_devices() {
  const PaDeviceIndex count = Pa_GetDeviceCount();
  check_portaudio(count, "Pa_GetDeviceCount");
  const PaDeviceIndex default_input = Pa_GetDefaultInputDevice();
  const PaDeviceIndex default_output = Pa_GetDefaultOutputDevice();
  std::vector<AudioDeviceInfo> devices;
  for (PaDeviceIndex i = 0; i < count; ++i) {
    const PaDeviceInfo* info = Pa_GetDeviceInfo(i);
    if (info == nullptr) continue;
    const PaHostApiInfo* api = Pa_GetHostApiInfo(info->hostApi);
    AudioDeviceInfo device;
    device.index = i;
    device.name = info->name != nullptr ? info->name : "";
    device.host_api = api != nullptr && api->name != nullptr ? api->name : "?";
    device.max_input_channels = info->maxInputChannels;
    device.max_output_channels = info->maxOutputChannels;
    device.default_sample_rate = info->defaultSampleRate;
    device.default_low_input_latency = info->defaultLowInputLatency;
    device.default_low_output_latency = info->defaultLowOutputLatency;
    device.default_input = i == default_input;
    device.default_output = i == default_output;
    devices.push_back(std::move(device));
  }
  return devices;
}

std::string describe_audio_device(const AudioDeviceInfo& device) {
  std::string marks;
  if (device.default_input) marks += " [default input]";
  if (device.default_output) marks += " [default output]";
  return fmt::format("{:3}  {} ({}): {} in, {} out, {:g} Hz{}", device.index, device.name,
                     device.host_api, device.max_input_channels, device.max_output_channels,
                     device.default_sample_rate, marks);
}

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

int channels_for(const AudioDeviceInfo& device, Direction direction) {
  return direction == Direction::input ? device.max_input_channels : device.max_output_channels;
}

const char* direction_name(Direction direction) {
  return direction == Direction::input ? "input" : "output";
}

std::string candidates(const std::vector<AudioDeviceInfo>& devices, Direction direction) {
  std::string list;
  for (const auto& device : devices) {
    if (channels_for(device, direction) == 0) continue;
    list += fmt::format("{}{} '{}' ({} ch)", list.empty() ? "" : ", ", device.index, device.name,
                        channels_for(device, direction));
  }
  return list.empty() ? "none" : list;
}

}  // namespace

AudioDeviceInfo choose_audio_device(const std::string& selector, Direction direction,
                                    int channels) {
  const auto devices = list_audio_devices();
  const char* which = direction_name(direction);
  const auto usable = [&](const AudioDeviceInfo& device) {
    if (channels_for(device, direction) < channels) {
      throw AudioDeviceError(fmt::format("{} device '{}' ({} '{}') has {} {} channels, {} needed",
                                         which, selector, device.index, device.name,
                                         channels_for(device, direction), which, channels));
    }
    return device;
  };

  if (selector.empty() || selector == "default") {
    for (const auto& device : devices) {
      if (direction == Direction::input ? device.default_input : device.default_output) {
        return usable(device);
      }
    }
    throw AudioDeviceError(fmt::format("no default {} device (devices with {}: {})", which, which,
                                       candidates(devices, direction)));
  }

  int index = -1;
  const auto [end, error] =
      std::from_chars(selector.data(), selector.data() + selector.size(), index);
  if (error == std::errc() && end == selector.data() + selector.size()) {
    for (const auto& device : devices) {
      if (device.index == index) return usable(device);
    }
    throw AudioDeviceError(fmt::format("{} device '{}': no device has that index ({} devices)",
                                       which, selector, devices.size()));
  }

  const std::string wanted = lower(selector);
  std::vector<const AudioDeviceInfo*> matches;
  for (const auto& device : devices) {
    if (channels_for(device, direction) == 0) continue;
    const std::string name = lower(device.name);
    if (name == wanted) return usable(device);
    if (name.find(wanted) != std::string::npos) matches.push_back(&device);
  }
  if (matches.size() == 1) return usable(*matches.front());
  if (matches.empty()) {
    throw AudioDeviceError(fmt::format("{} device '{}': no {} device name contains it ({})", which,
                                       selector, which, candidates(devices, direction)));
  }
  std::string names;
  for (const auto* device : matches) {
    names += fmt::format("{}{} '{}'", names.empty() ? "" : ", ", device->index, device->name);
  }
  throw AudioDeviceError(
      fmt::format("{} device '{}' is ambiguous: it matches {}", which, selector, names));
}

namespace {

// The PortAudio parameters of one direction of a stream.
PaStreamParameters stream_parameters(const AudioStreamOptions& options, Direction direction) {
  PaStreamParameters parameters{};
  parameters.device =
      direction == Direction::input ? *options.input_device : *options.output_device;
  parameters.channelCount =
      direction == Direction::input ? options.input_channels : options.output_channels;
  parameters.sampleFormat = paFloat32;
  const PaDeviceInfo* info = Pa_GetDeviceInfo(parameters.device);
  if (info != nullptr) {
    parameters.suggestedLatency = direction == Direction::input ? info->defaultLowInputLatency
                                                                : info->defaultLowOutputLatency;
  }
  return parameters;
}

bool supports(const AudioStreamOptions& options, double rate) {
  const PaStreamParameters input =
      options.input_device ? stream_parameters(options, Direction::input) : PaStreamParameters{};
  const PaStreamParameters output =
      options.output_device ? stream_parameters(options, Direction::output) : PaStreamParameters{};
  return Pa_IsFormatSupported(options.input_device ? &input : nullptr,
                              options.output_device ? &output : nullptr,
                              rate) == paFormatIsSupported;
}

}  // namespace

bool sample_rate_supported(const AudioStreamOptions& options) {
  return supports(options, options.sample_rate);
}

std::vector<int> offered_sample_rates(const AudioStreamOptions& options) {
  static constexpr int standard[] = {8000,  11025, 16000, 22050,  32000,  44100,  48000,
                                     64000, 88200, 96000, 176400, 192000, 352800, 384000};
  std::vector<int> rates;
  for (const int rate : standard) {
    if (supports(options, rate)) rates.push_back(rate);
  }
  return rates;
}

AudioStream::AudioStream(const AudioStreamOptions& options) : options_(options) {
  if (!options.input_device && !options.output_device) {
    throw AudioDeviceError("an audio stream needs an input or an output device");
  }
  const PaStreamParameters input =
      options.input_device ? stream_parameters(options, Direction::input) : PaStreamParameters{};
  const PaStreamParameters output =
      options.output_device ? stream_parameters(options, Direction::output) : PaStreamParameters{};
  const unsigned long frames =
      options.frames_per_buffer == 0 ? paFramesPerBufferUnspecified : options.frames_per_buffer;
  // No clipping or dithering: the engine's float samples go out untouched.
  check_portaudio(Pa_OpenStream(&stream_, options.input_device ? &input : nullptr,
                                options.output_device ? &output : nullptr, options.sample_rate,
                                frames, paClipOff | paDitherOff, &AudioStream::on_callback, this),
                  "Pa_OpenStream");
}

AudioStream::~AudioStream() {
  if (stream_ == nullptr) return;
  if (started_) Pa_StopStream(stream_);
  Pa_CloseStream(stream_);
}

void AudioStream::start() {
  check_portaudio(Pa_StartStream(stream_), "Pa_StartStream");
  started_ = true;
}

void AudioStream::stop() {
  if (!started_ || stream_ == nullptr) return;
  started_ = false;
  if (Pa_IsStreamStopped(stream_) == 0) check_portaudio(Pa_StopStream(stream_), "Pa_StopStream");
}

bool AudioStream::active() const {
  return stream_ != nullptr && Pa_IsStreamActive(stream_) == 1;
}

double AudioStream::sample_rate() const {
  const PaStreamInfo* info = stream_ != nullptr ? Pa_GetStreamInfo(stream_) : nullptr;
  return info != nullptr ? info->sampleRate : 0.0;
}

double AudioStream::input_latency() const {
  const PaStreamInfo* info = Pa_GetStreamInfo(stream_);
  return info != nullptr ? info->inputLatency : 0.0;
}

double AudioStream::output_latency() const {
  const PaStreamInfo* info = Pa_GetStreamInfo(stream_);
  return info != nullptr ? info->outputLatency : 0.0;
}

int AudioStream::on_callback(const void* input, void* output, unsigned long frames,
                             const PaStreamCallbackTimeInfo*, PaStreamCallbackFlags, void* self) {
  const auto& options = static_cast<AudioStream*>(self)->options_;
  options.callback(static_cast<const float*>(input), static_cast<float*>(output), frames,
                   options.context);
  return paContinue;
}

}  // namespace tapstream
