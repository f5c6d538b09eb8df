#!/usr/bin/env bash
# The device run for issue 25 items 2 and 3 (per-path updates at block rate):
# the CUDA matrix engine's update suites (host and device taps) with
# compute-sanitizer's memcheck on them, then `tapstream bench updates` for
# the CUDA engine with filters from device arrays and from host arrays and
# for the CPU matrix engine, at 64 and 128 frames and 2048/8192/32768 taps,
# every path replaced every block. Results go to $OUT (or ./out):
# tests.log, sanitizer.log, updates-<engine>.json/.log.
#
# Build here (no GPU needed):
#   cmake --build build -j2 --target tapstream tapstream_cuda cuda_matrix_engine_test
# and run from the repository root on the GPU machine:
#   bash bench/run-updates-gpu.sh [--quick]
# --quick: 300 probe blocks and 3000 confirming blocks per cell (about 4
# minutes per engine); without it 1000 and 10000 (about 10 minutes each).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
blocks=(--probe-blocks 1000 --measure-blocks 10000)
[ "${1:-}" = --quick ] && blocks=(--probe-blocks 300 --measure-blocks 3000)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/env.txt"

timeout 300 build/tests/cuda_matrix_engine_test 2>&1 | grep -v '^seed' | tee "$out/tests.log" |
  grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|Failure|error'
timeout 300 "$sanitizer" --tool memcheck --leak-check no build/tests/cuda_matrix_engine_test \
  --gtest_filter='TapsFrom/*:CudaPathUpdatesMemory.*' 2>&1 |
  grep -E 'ERROR SUMMARY|PASSED|FAILED|Error' | tee "$out/sanitizer.log"

for engine in cuda-device cuda-host cpu; do
  timeout 590 build/daemon/tapstream bench updates --engines "$engine" --blocks 64,128 \
    --taps 2048,8192,32768 --every 1 "${blocks[@]}" --commit "$commit" \
    --json "$out/updates-$engine.json" 2>&1 | tee "$out/updates-$engine.log" | grep -v '^  '
done
