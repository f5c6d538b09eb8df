#!/usr/bin/env bash
# The GPU run for issue 25 item 2 on the per-channel engines: per-channel
# updates native in the CUDA engine's partitioned path (DiagonalEngine::
# set_paths -> Engine::set_channel_filters: only the named channels are
# transformed and crossfaded). From the repository root, with the binaries of
# a CUDA build (-DCMAKE_CUDA_ARCHITECTURES=90 -DTAPSTREAM_BENCH=ON: tapstream
# and libtapstream_cuda.so, cuda_channel_updates_test, cuda_partitioned_test,
# cuda_engine_test) in one folder:
#   bash bench/gpu/diag-updates.sh BIN_DIR RESULTS_DIR
# 1. the per-channel update suite, then the partitioned path's and the CUDA
#    engine's suites (the head kernel and the tail step changed);
# 2. compute-sanitizer memcheck on the per-channel update suite;
# 3. `tapstream bench updates --diagonal`: the largest channel count whose
#    filters (8192 taps) are all replaced at every 128-frame block with p99.9
#    under half the period, the partitioned path (native per-channel
#    updates) against the default path (whole-bank fallback where the cost
#    model picks another), and an eighth of the channels replaced per block.
# Prints PASS/FAIL lines and the numbers; under 3 minutes.
set -uo pipefail
bin=$(cd "${1:?binaries folder}" && pwd)
out=${2:?results folder}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="$bin:$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
commit=$(cat "$bin/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/env.txt"
echo "commit $commit" | tee -a "$out/env.txt"
status=0
verdict() {  # NAME RC
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; status=1; fi
}

# 1. Tests (a suite that skips counts as failed here: there is a GPU).
for t in cuda_channel_updates_test cuda_partitioned_test cuda_engine_test; do
  [ -x "$bin/$t" ] || { echo "FAIL $t: not in $bin"; status=1; continue; }
  filter='*'
  [ "$t" = cuda_engine_test ] && filter='*Swap*:*swap*:*Crossfade*:*Partitioned*'
  timeout 40 "$bin/$t" --gtest_filter="$filter" >"$out/$t.log" 2>&1
  rc=$?
  [ "$t" = cuda_channel_updates_test ] && grep -qE '^\[  SKIPPED \]' "$out/$t.log" && rc=2
  grep -E '^\[ +(PASSED|FAILED) +\]|^\[  SKIPPED \] [0-9]+ test|Failure$' "$out/$t.log" | head -40
  verdict "$t" $rc
done

# 2. memcheck on the per-channel updates (row moves, packed transforms, the
#    recomputed tails, the head's per-channel fade).
timeout 60 "$sanitizer" --tool memcheck --leak-check no "$bin/cuda_channel_updates_test" \
  --gtest_filter='*BadChannels*:*WholeSwapsAndChannelUpdates*:*TransformsAndCrossfades*' \
  >"$out/sanitizer.log" 2>&1
rc=$?
grep -E 'ERROR SUMMARY|^\[ +(PASSED|FAILED) +\]' "$out/sanitizer.log"
grep -q 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log" || rc=1
verdict "memcheck on the per-channel update tests" $rc

# 3. The diagonal case of `bench updates` (host filters: the per-channel
#    engine takes no device arrays), short probes so that it fits the time.
bench() {  # NAME ARGS...
  local name=$1
  shift
  timeout 35 "$bin/tapstream" bench updates --engines cuda-host --diagonal --blocks 128 \
    --taps 8192 --probe-blocks 100 --measure-blocks 500 --max-paths 2048 --commit "$commit" \
    --json "$out/$name.json" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -E '^cuda-host ' "$out/$name.log" | tail -1 | sed "s/^/$name: /"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; print(r['paths'], r['engine_description'])" \
    "$out/$name.json" 2>/dev/null | sed "s/^/$name: channels, engine: /"
  return $rc
}
bench diagonal-partitioned --kernel partitioned
verdict "bench updates, diagonal, partitioned path, every channel every block" $?
bench diagonal-default
verdict "bench updates, diagonal, default path, every channel every block" $?
bench diagonal-partitioned-eighth --kernel partitioned --fraction 0.125
verdict "bench updates, diagonal, partitioned path, an eighth of the channels every block" $?
native=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['results'][0]['paths'])" \
  "$out/diagonal-partitioned.json" 2>/dev/null || echo 0)
[ "$native" -ge 1 ]
verdict "the partitioned path replaces every channel's 8192 taps at every 128-frame block for $native channels" $?
exit $status
