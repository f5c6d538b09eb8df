#!/usr/bin/env bash
# Issue 8's small-call run in one device call: the GPU suites that cover small
# calls (every small-call mode, the persistent kernel's life cycle, the
# default engine's partitioned choice, the engine suite), compute-sanitizer on
# the persistent kernel, then the streaming round trip of cuda_engine_bench in
# each small-call mode (--engine-option cuda_small_calls=event, spin, persistent).
#
# Build here (no GPU needed), bundle, then run on the device with
# carry: [".device-bundle/NAME"]:
#   ninja -C build cuda_small_calls_test cuda_partitioned_test cuda_engine_test cuda_engine_bench
#   d=/work/main/.device-bundle/NAME; mkdir -p $d
#   cp build/tests/cuda_{small_calls,partitioned,engine}_test build/bench/cuda_engine_bench \
#      bench/run-small-calls-gpu.sh $d/; git rev-parse --short HEAD >$d/COMMIT
#   /work/shared/device/bundle-libs.sh $d/lib $d/cuda_engine_bench $d/cuda_engine_test
#   strip $d/cuda_*   # keeps the bundle under the 64 MiB a call carries
#   command: cd .device-bundle/NAME && bash run-small-calls-gpu.sh
# About 35 s on an H100 (plus the machine's start); SKIP_ENGINE_SUITE=1 saves 13 s.
# Results under $OUT (at most 8 files): env.txt, tests.txt, streaming-MODE.json, bench.txt.
set -uo pipefail
cd "$(dirname "$0")"
out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
commit=$(cat COMMIT 2>/dev/null || echo unknown)
{
  date -u +%FT%TZ
  echo "commit $commit"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

status=0
run() {  # run NAME COMMAND...: logs to tests.txt, remembers a failure
  echo "== $1" | tee -a "$out/tests.txt"
  shift
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-120}" "$@" >>"$out/tests.txt" 2>&1
  local rc=$?
  echo "   rc $rc, $((SECONDS - t0)) s" | tee -a "$out/tests.txt"
  [ $rc -eq 0 ] || status=1
  grep -E '^\[  (PASSED|FAILED) |FAILED  |ERROR SUMMARY|RACECHECK SUMMARY' "$out/tests.txt" | tail -3
}
run small_calls ./cuda_small_calls_test
for mode in event spin persistent; do
  echo "== streaming, small calls: $mode" | tee -a "$out/bench.txt"
  timeout 60 ./cuda_engine_bench --only streaming --engine-option cuda_small_calls=$mode \
    --commit "$commit" --json "$out/streaming-$mode.json" 2>&1 | tee -a "$out/bench.txt" |
    grep -E '^\s+\(' | cut -c1-80
done
echo "== persistent kernel, traced (segments after block 0 saw the doorbell)" | tee -a "$out/bench.txt"
timeout 60 ./cuda_engine_bench --only streaming --blocks 3000 \
  --engine-option cuda_small_calls=persistent --engine-option cuda_persistent_trace=true 2>&1 | grep -E '^\s+\((2, 256|2, 64)' |
  sed -e 's/cuda (NVIDIA[^;]*small calls: //' | tee -a "$out/bench.txt"
run partitioned_default ./cuda_partitioned_test \
  --gtest_filter='*TheDefaultEngine*:*KernelOptionForcesIt*'
run memcheck compute-sanitizer --tool memcheck --error-exitcode 3 ./cuda_small_calls_test \
  --gtest_filter='*SurvivesIdle*:*ClosePromptly*'
run racecheck compute-sanitizer --tool racecheck --error-exitcode 3 ./cuda_small_calls_test \
  --gtest_filter='*SurvivesIdle*'
run synccheck compute-sanitizer --tool synccheck --error-exitcode 3 ./cuda_small_calls_test \
  --gtest_filter='*SurvivesIdle*'
[ "${SKIP_ENGINE_SUITE:-0}" = 1 ] || run engine_suite ./cuda_engine_test
grep -E '^==|rc ' "$out/tests.txt"
exit $status
