#!/usr/bin/env bash
# The README's first command: installs the dependencies, builds tapstream
# (Release, in build/, with the CUDA engine wherever nvcc is found), designs a
# low-pass filter and filters a shipped real recording through it, then says
# where the result is. Safe to run again: every step overwrites its own output
# (the outputs appear by rename, so a failed run leaves the previous ones).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh

echo "== build (Release) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target tapstream

tapstream=build/daemon/tapstream
recording=config/examples/Front_Center.wav  # 48 kHz mono speech (see config/examples/README.md)
filter=out/lowpass-1500hz.txt
result=out/Front_Center-lowpass-1500hz.wav
mkdir -p out

echo "== design: a 1023-tap low-pass at 1.5 kHz for 48 kHz audio =="
"$tapstream" design lowpass --rate 48000 --cutoff 1500 --taps 1023 --window kaiser --beta 8.6 \
  -o "$filter"

echo "== process: filter the recording (CUDA engine when a GPU works, else the CPU engine) =="
"$tapstream" process "$recording" "$result" --taps "$filter" --backend auto --tail

echo
echo "demo: filter   $(realpath "$filter")"
echo "demo: input    $(realpath "$recording")"
echo "demo: result   $(realpath "$result")"
