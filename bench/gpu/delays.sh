#!/usr/bin/env bash
# The GPU run for issue 24 item 4 (delays that cost nothing on the CUDA
# matrix engine) and the H100 half of its SOFA target. From the repository
# root, with the binaries of a CUDA build (-DCMAKE_CUDA_ARCHITECTURES=90
# -DTAPSTREAM_BENCH=ON: tapstream and libtapstream_cuda.so, matrix_delay_bench,
# cuda_matrix_engine_test, cuda_devices_test, cuda_live_matrix_test) in one
# folder:
#   bash bench/gpu/delays.sh BIN_DIR RESULTS_DIR
# 1. the CUDA matrix engine's suite (delays at any call size, across calls
#    and crossfaded swaps that move delays, per-path updates on delayed
#    paths, the factory's room), then compute-sanitizer's memcheck on the
#    delay tests (the MAC reads its delay line q segments back);
# 2. bench: 2 -> 64, 128 paths of 4096 taps, delays up to 24,000 frames
#    against none, CUDA and CPU engines, calls back to back (target: within
#    10 %);
# 3. SOFA on the GPU: the largest N -> 2 matrix of 512-tap HRIRs whose
#    paced 64-frame calls stay under half the period at p99.9 (`tapstream
#    bench updates` with no update after the first), then the daemon on
#    paced file endpoints (no JACK there) at 64-frame periods in zero-latency
#    mode with that many sources: 0 late periods over 20 s.
# Prints PASS/FAIL lines and the numbers; about 8 minutes.
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

# 1. Tests.
for t in cuda_matrix_engine_test cuda_devices_test cuda_live_matrix_test; do
  [ -x "$bin/$t" ] || { echo "FAIL $t: not in $bin"; status=1; continue; }
  timeout 240 "$bin/$t" >"$out/$t.log" 2>&1
  rc=$?
  grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|Failure$|^cuda: matrix' "$out/$t.log" | sort | uniq -c | head -40
  verdict "$t" $rc
done
timeout 200 "$sanitizer" --tool memcheck --leak-check no "$bin/cuda_matrix_engine_test" \
  --gtest_filter='MacKernels/CudaMatrixEngineTest.DelaysCost*:MacKernels/CudaMatrixEngineTest.SwapsThatMoveDelays*:CudaMatrixEngineDelays.*:TapsFrom/CudaPathUpdates.UpdatesAtEveryCall*' \
  >"$out/sanitizer.log" 2>&1
rc=$?
grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) \]' "$out/sanitizer.log"
grep -q 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log" || rc=1
verdict "memcheck on the delay tests" $rc

# 2. Delays against none, both engines (the ratio is the target).
timeout 240 "$bin/matrix_delay_bench" --engines cuda,cpu --blocks 64,256,16384 --seconds 4 \
  --rounds 3 --folded 2>&1 | tee "$out/matrix-delay-bench.txt"
cuda_ok=1
grep -E '^cuda ' "$out/matrix-delay-bench.txt" | grep -qv ' met ' && cuda_ok=0
grep -qE '^cuda .* met ' "$out/matrix-delay-bench.txt" || cuda_ok=0
verdict "cuda: 2 -> 64 with delays up to 24,000 frames within 10 % of none" $((1 - cuda_ok))

# 3. SOFA: the largest source count at 64-frame periods.
timeout 200 "$bin/tapstream" bench updates --engines cuda-host --blocks 64 --taps 512 \
  --outputs 2 --every 1000000 --probe-blocks 300 --measure-blocks 3000 --max-paths 65536 \
  --commit "$commit" --json "$out/sofa-capacity-cuda.json" 2>&1 | tee "$out/sofa-capacity-cuda.log" |
  grep -v '^  '
paths=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['results'][0]['paths'])" \
  "$out/sofa-capacity-cuda.json" 2>/dev/null || echo 0)
sources=$((paths / 2))
echo "engine: largest SOFA source count (512-tap HRIRs, 2 ears) at 64-frame periods, p99.9 under half the period: $sources"
[ "$sources" -ge 64 ]
verdict "cuda engine carries at least 64 sources at 64-frame periods ($sources)" $?
if [ "$sources" -gt 0 ]; then
  timeout 150 python3 bench/live-targets.py sofa --engine cuda --endpoint files \
    --tapstream "$bin/tapstream" --sources "$sources" --seconds 20 \
    --json "$out/sofa-daemon-cuda.json" 2>&1 | tee "$out/sofa-daemon-cuda.txt"
  verdict "daemon, cuda, $sources sources at 64-frame periods: 0 late periods over 20 s" $?
fi
exit $status
