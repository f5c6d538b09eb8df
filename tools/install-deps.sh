#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of tapstream from Debian's
# package manager. The same script serves fresh machines and CI, so that what
# works here works there. Safe to run again: apt skips what is installed.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git clang-format
  libsndfile1-dev        # sound files (WAV, FLAC, ...)
  portaudio19-dev        # live audio devices
  libasound2-dev         # ALSA error handler: its probing chatter goes to the log
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libfftw3-dev           # CPU engine's FFTs (single precision, libfftw3f)
  libtomlplusplus-dev    # configuration files
  libmysofa-dev          # SOFA HRTF sets for binaural matrices ([sofa] in a matrix file)
  libsoxr-dev            # resampling a filter made for another rate ([filter] resample, $samplerate$)
  libcli11-dev           # command line
  nlohmann-json3-dev     # every JSON tapstream reads or writes (control socket, info, benches)
  gnuplot-nox            # `tapstream plot` and `design --plot` draw with gnuplot
  clang libclang-rt-dev  # libFuzzer targets (tests/fuzz, tools/fuzz.sh): clang and its fuzzer runtime
  libboost-dev           # Boost.Beast: the websocket API and browser page
  jackd2                 # JACK's dummy server for the live tests
  pipewire pipewire-bin pipewire-jack   # tests/pipewire_jack_test: a private PipeWire, pw-jack, pw-metadata
  libjack-jackd2-dev     # the JACK end-to-end test is a JACK client (feeder, recorder)
  jconvolver             # bench/compare-jconvolver.sh: the zero-latency convolver tapstream is compared with
  alsa-utils             # real recordings under /usr/share/sounds/alsa used by tests
  brutefir sox           # peers in bench/compare-cpu.sh
  slurm-wlm munge        # tests/slurm_array_test.cpp: a one-node Slurm runs config/slurm-array.sh
  chromium               # the browser page's end-to-end test (tools/web-e2e.sh, with node + npm)
  pybind11-dev python3-dev python3-numpy   # the Python module (python/) and its tests
)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# jackd2 asks whether to enable real-time scheduling; answer once, non-interactively.
echo "jackd2 jackd/tweak_rt_limits boolean false" | $sudo debconf-set-selections
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
