#!/usr/bin/env bash
# Issue 8 item 4 on the device: the multi-partition overlap-save kernels'
# tests, compute-sanitizer memcheck on them, and the offline benchmark
# (8 ch x 2^22 frames, whole signal in one call) at 16384, 65536 and 131072
# taps for each candidate partition, the cuFFT passes (fft_fused=false)
# alongside. Runs from a bundle built on the development machine:
#   d=.device-bundle/offline8; mkdir -p $d
#   cp build/tests/cuda_fft_convolver_test build/tests/cuda_engine_test \
#      build/bench/cuda_engine_bench $d/
#   /work/shared/device/bundle-libs.sh $d/lib $d/cuda_fft_convolver_test \
#      $d/cuda_engine_test $d/cuda_engine_bench
#   cp bench/run-offline8-gpu.sh $d/; git rev-parse --short HEAD >$d/COMMIT
# then, on the device, with carry [".device-bundle/offline8"] (results and logs in $OUT):
#   bash bench/run-offline8-gpu.sh   or   bash .device-bundle/offline8/run-offline8-gpu.sh
# profile: Nsight Compute's DRAM bytes and duration of each of the three
# kernels for one whole-signal pass at 131072 taps (P = 8192), from the
# test binary's timing test.
# usage: run-offline8-gpu.sh [tests|bench|profile|memcheck|suites]...
#        (default: all, in that order)
# The device copies only the checkout its session started in, so the script
# also runs from a copy of itself inside the bundle (the bundle is then the
# script's own folder): carry the bundle alone and run
#   bash .device-bundle/offline8/run-offline8-gpu.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/cuda_fft_convolver_test" ]; then
  b=${BUNDLE:-$here}
else
  b=${BUNDLE:-$here/../.device-bundle/offline8}
fi
out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TAPSTREAM_COMMIT=$(cat "$b/COMMIT" 2>/dev/null || echo unknown)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests bench profile memcheck suites)
new_tests='FftConvolver.SegmentKernels*:FftConvolver.PartitionCounts*:FftConvolver.CrossfadeBetweenSegment*:FftConvolver.ResetForgetsTheHistoryOfSegment*:FftConvolver.LongFilters*'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "commit $TAPSTREAM_COMMIT"
skip=direct:naive,direct:constant,direct:shared_tile,direct:cached_tile,direct:tuned,auto

bench() {  # TAPS PARTITION (auto / old / a power of two)
  local option=()
  case $2 in
    auto) ;;
    old) option=(--engine-option fft_fused=false) ;;
    *) option=(--engine-option "fft_partition=$2") ;;
  esac
  timeout 60 "$b/cuda_engine_bench" --only offline --taps "$1" "${option[@]}" \
    --json "$out/offline-$1-$2.json" --skip "$skip" --skip-reason "FFT path only" \
    >"$out/offline-$1-$2.log" 2>&1
  local status=$?
  grep -E '^  fft ' "$out/offline-$1-$2.log" | sed "s/^/$1 taps, partition $2: /"
  [ $status = 0 ] || { echo "$1 taps, partition $2: exit status $status"; tail -3 "$out/offline-$1-$2.log"; }
}

for step in "${steps[@]}"; do
  echo "== $step ($(date -u +%T))"
  case $step in
    bench)
      for taps in 131072 65536 16384; do
        for partition in auto old 4096 8192 16384; do bench "$taps" "$partition"; done
      done
      # Calls of 65536 frames (8 segments of 8192 a call), new path against the cuFFT passes
      # at the same partition: one timed pass each, from the test binary's timing test.
      for shape in 131072:65536:0 65536:65536:0; do
        TAPSTREAM_FFT_TIMING_ONLY=$shape timeout 60 "$b/cuda_fft_convolver_test" \
          --gtest_also_run_disabled_tests --gtest_filter='*PrintsThroughputOfBenchmarkShapes' \
          >"$out/calls-${shape//:/-}.log" 2>&1
        grep -E '^ +[0-9]+ +[0-9]+ ' "$out/calls-${shape//:/-}.log"
      done ;;
    tests)
      # With the fused single-partition kernel's own tests (its FFT moved to shared_memory_fft.cuh).
      timeout 120 "$b/cuda_fft_convolver_test" \
        --gtest_filter="$new_tests:FftConvolver.FusedKernel*:FftConvolver.CrossfadeBetweenFusedRuns*" \
        >"$out/tests.log" 2>&1
      echo "exit status $?"
      grep -E '^\[  (FAILED|     OK|  PASSED) |FAILED|Failure|error' "$out/tests.log" | head -40 ;;
    profile)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      [ -n "$ncu" ] || { echo "no ncu"; continue; }
      for partition in 8192 16384; do
        TAPSTREAM_FFT_TIMING_ONLY=131072:4194304:$partition timeout 90 "$ncu" --clock-control none \
          -k regex:'forward_spectrum|sliding_mac|inverse_spectrum' -c 3 \
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
          "$b/cuda_fft_convolver_test" --gtest_also_run_disabled_tests \
          --gtest_filter='*PrintsThroughputOfBenchmarkShapes' >"$out/ncu-$partition.log" 2>&1
        echo "partition $partition: exit status $?"
        grep -E 'spectrum_kernel|sliding_mac|dram__bytes|gpu__time|kernK|sep ' "$out/ncu-$partition.log" | head -30
      done ;;
    memcheck)
      # The small tests first, so that a time-out in the long one keeps their summary.
      for filter in 'FftConvolver.ResetForgetsTheHistoryOfSegment*:FftConvolver.CrossfadeBetweenSegment*' \
                    'FftConvolver.SegmentKernels*'; do
        timeout 75 compute-sanitizer --tool memcheck --error-exitcode 3 "$b/cuda_fft_convolver_test" \
          --gtest_filter="$filter" >>"$out/memcheck.log" 2>&1
        echo "$filter: exit status $?"
      done
      grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/memcheck.log" | head -20 ;;
    suites)
      for t in cuda_fft_convolver_test cuda_engine_test; do
        timeout 200 "$b/$t" --gtest_filter=-"$new_tests" >"$out/$t.log" 2>&1
        echo "$t: exit status $?"
        grep -E '^\[  (FAILED|  PASSED) ' "$out/$t.log" | head -20
      done ;;
    *) echo "unknown step $step" ;;
  esac
done
