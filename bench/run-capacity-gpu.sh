#!/usr/bin/env bash
# The device run for issue 8 (non-uniformly partitioned streaming path and
# the capacity benchmark): GPU suites, compute-sanitizer on the partitioned
# path (memcheck; racecheck and synccheck on a stream that keeps the tail
# stream busy), the latency cases, then the capacity search for both engines.
# Results go to $OUT (or ./out): tests.log, sanitizer.log, capacity.json/.log.
#
# Build here (no GPU needed), then bundle (HELPERS.md):
#   ninja -C build cuda_partitioned_test cuda_engine_test cuda_fft_convolver_test capacity_bench
#   b=/work/main/.device-bundle/gpu8; mkdir -p $b
#   cp build/tests/cuda_*_test build/bench/capacity_bench bench/run-capacity-gpu.sh \
#      bench/plot_capacity.py $b/ && git rev-parse HEAD >$b/COMMIT
#   /work/shared/device/bundle-libs.sh $b/lib $b/cuda_*_test $b/capacity_bench
# and run with carry [".device-bundle/gpu8"]:
#   cd .device-bundle/gpu8 && bash run-capacity-gpu.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")"
out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
commit=$(cat COMMIT 2>/dev/null || echo unknown)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
quick=0
[ "${1:-}" = --quick ] && quick=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/env.txt"

{
  timeout 240 ./cuda_partitioned_test
  timeout 200 ./cuda_engine_test
  timeout 60 ./cuda_fft_convolver_test
} 2>&1 | grep -v '^\[ seed\|^cuda (' | tee "$out/tests.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|Failure|error'

{
  timeout 150 "$sanitizer" --tool memcheck --leak-check no ./cuda_partitioned_test \
    --gtest_filter='*Reset*:*Swaps*'
  timeout 120 "$sanitizer" --tool racecheck ./cuda_partitioned_test --gtest_filter='*Reset*'
  timeout 120 "$sanitizer" --tool synccheck ./cuda_partitioned_test --gtest_filter='*Reset*'
} 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|Error' | tee "$out/sanitizer.log"

args=(--commit "$commit" --json "$out/capacity.json")
if [ $quick = 1 ]; then
  args+=(--blocks 64,256 --taps 65536,262144 --probe-blocks 300 --measure-blocks 10000)
fi
timeout 420 ./capacity_bench "${args[@]}" 2>&1 | tee "$out/capacity.log" | grep -v '^  '
python3 plot_capacity.py "$out/capacity.json" --png "$out/capacity.png" | tee -a "$out/capacity.log"
