#!/usr/bin/env bash
# The device run for issue 8 (non-uniformly partitioned streaming path and
# the capacity benchmark): GPU suites (cuda_engine_test also with the
# partitioned path kept from the cost model), compute-sanitizer on the
# partitioned path (memcheck; racecheck and synccheck on the reset test, where
# head and tail kernels both run), the step/head/call probe, then the capacity
# search. Results go to $OUT (or ./out): tests.log, sanitizer.log,
# probe.jsonl, capacity.json/.log.
#
# Build here (no GPU needed), then bundle (HELPERS.md):
#   ninja -C build cuda_partitioned_test cuda_engine_test cuda_fft_convolver_test \
#     capacity_bench cuda_partitioned_bench tapstream_cuda
#   b=/work/main/.device-bundle/gpu8; mkdir -p $b
#   cp build/tests/cuda_{partitioned,engine,fft_convolver}_test build/bench/capacity_bench \
#      build/bench/cuda_partitioned_bench build/daemon/libtapstream_cuda.so \
#      bench/run-capacity-gpu.sh bench/plot_capacity.py $b/ && git rev-parse --short HEAD >$b/COMMIT
#   /work/shared/device/bundle-libs.sh $b/lib $b/cuda_*_test $b/*_bench $b/libtapstream_cuda.so
# and run with carry [".device-bundle/gpu8"]:
#   cd .device-bundle/gpu8 && bash run-capacity-gpu.sh [--quick]
# --quick: the target cells only (64 frames x 65536 taps for both engines,
# 256 x 262144 for the CUDA engine); without it the whole grid for both
# engines (calls paced at the block period: an hour or more).
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
  timeout 120 ./cuda_partitioned_test
  timeout 100 ./cuda_engine_test
  timeout 60 ./cuda_fft_convolver_test
} 2>&1 | grep -v '^\[ seed\|^cuda (' | tee "$out/tests.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|Failure|error'

{
  timeout 120 "$sanitizer" --tool memcheck --leak-check no ./cuda_partitioned_test \
    --gtest_filter='*Reset*:*Swaps*'
  timeout 60 "$sanitizer" --tool racecheck ./cuda_partitioned_test --gtest_filter='*Reset*'
  timeout 60 "$sanitizer" --tool synccheck ./cuda_partitioned_test --gtest_filter='*Reset*'
} 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|Error' | tee "$out/sanitizer.log"

timeout 90 ./cuda_partitioned_bench steps calls >"$out/probe.jsonl" 2>&1
grep '"call"' "$out/probe.jsonl" | cut -c1-250

args=(--commit "$commit" --json "$out/capacity.json")
if [ $quick = 1 ]; then
  timeout 150 ./capacity_bench "${args[@]/capacity.json/capacity-64.json}" --engines cuda,cpu \
    --blocks 64 --taps 65536 --probe-blocks 300 2>&1 | tee "$out/capacity.log" | grep -v '^  '
  timeout 170 ./capacity_bench "${args[@]/capacity.json/capacity-256.json}" --engines cuda \
    --blocks 256 --taps 262144 --probe-blocks 300 2>&1 | tee -a "$out/capacity.log" | grep -v '^  '
else
  timeout 3000 ./capacity_bench "${args[@]}" 2>&1 | tee "$out/capacity.log" | grep -v '^  '
  python3 plot_capacity.py "$out/capacity.json" --png "$out/capacity.png" | tee -a "$out/capacity.log"
fi
