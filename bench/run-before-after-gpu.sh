#!/usr/bin/env bash
# A behaviour-preserving change measured on the GPU in one device run: the
# figures issue 22 names (offline 8 ch x 2^22 at every tap count, small calls
# including (2, 256, 2048), the 64 x 64 routing matrix at 128 frames, and the
# capacity at 64 frames x 65536 taps) and a whole `tapstream process` of a
# file (the path users run, through the engine factory and the pipeline), for the build before and the build
# after, alternated (before, after, before, after) so that drift shows; then
# the GPU suites and compute-sanitizer on the build after.
#
# Build both here with -DCMAKE_CUDA_ARCHITECTURES=90 (targets tapstream,
# tapstream_cuda, cuda_engine_bench, cuda_matrix_bench and the cuda_* tests),
# then pack each (bench/pack-gpu-bundle.sh BUILD DEST), and run with carry
# [".device-bundle"]:
#   bash bench/run-before-after-gpu.sh .device-bundle/before .device-bundle/after WHAT [--quick]
# WHAT: figures (before, after), figures2 (after, before: the second round, in
# the other order), tests (suites and sanitizer on the build after), or all.
# A device command may run 10 minutes: figures and tests fit one call each.
# Results in $OUT: before-after.txt (the figures), tests.txt, sanitizer.txt,
# raw-WHAT.tar.gz (each bench's log and JSON; the device returns at most 8 files).
set -uo pipefail
before=$1 after=$2 what=${3:-all}
quick=${4:-}
out=${OUT:-out}
raw=$out/raw
mkdir -p "$raw"
log=$out/before-after-$what.txt
status=0
for b in "$before" "$after"; do
  [ -d "$b" ] || { [ -f "$b.tar.gz" ] && mkdir -p "$b" && tar -xzf "$b.tar.gz" -C "$b"; }
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$log"
echo "before $(cat "$before/COMMIT") after $(cat "$after/COMMIT"), $(date -u +%FT%TZ)" | tee -a "$log"

# The input of the file-to-file figure: 8 channels x 60 s of float WAV (a
# seeded random signal) and 65536 random taps, made once.
work=${TMPDIR:-/tmp}/before-after-work
make_process_input() {
  [ -f "$work/in.wav" ] && return
  mkdir -p "$work"
  python3 - "$work" <<'PY'
import struct, sys, numpy as np
work = sys.argv[1]
rng = np.random.default_rng(20261125)
channels, rate, frames = 8, 48000, 48000 * 60
x = (0.1 * rng.standard_normal((frames, channels))).astype("<f4")
data = x.tobytes()
with open(f"{work}/in.wav", "wb") as f:
    f.write(b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt ")
    f.write(struct.pack("<IHHIIHH", 16, 3, channels, rate, rate * channels * 4, channels * 4, 32))
    f.write(b"data" + struct.pack("<I", len(data)) + data)
taps = (rng.standard_normal(65536) / 256).astype(np.float32)
np.savetxt(f"{work}/taps.txt", taps, fmt="%.9g")
PY
}

figures() {  # BUNDLE LABEL
  local b=$1 label=$2
  export LD_LIBRARY_PATH=$PWD/$b/lib:/usr/local/cuda/lib64
  echo "=== $label: offline 8 ch x 2^22 (FFT path, direct tuned, auto), ms" | tee -a "$log"
  timeout 240 "$b/cuda_engine_bench" --only offline --taps 32,256,2048,16384,65536,131072 \
    --skip direct:naive,direct:constant,direct:shared_tile,direct:cached_tile \
    --skip-reason "teaching variants: not part of the comparison" \
    --json "$raw/$label-offline.json" >"$raw/$label-offline.log" 2>&1 || status=1
  grep -E '^-- |^  (direct:tuned|fft|auto) ' "$raw/$label-offline.log" | cut -c1-75 | tee -a "$log"
  echo "=== $label: small calls (streaming), us" | tee -a "$log"
  timeout 120 "$b/cuda_engine_bench" --only streaming --blocks 5000 \
    --json "$raw/$label-streaming.json" >"$raw/$label-streaming.log" 2>&1 || status=1
  grep -E '^\s+\(' "$raw/$label-streaming.log" | cut -c1-110 | tee -a "$log"
  echo "=== $label: routing matrix, 128 frames, 8192-tap paths" | tee -a "$log"
  timeout 240 "$b/cuda_matrix_bench" "$raw/$label-matrix.json" --blocks 2000 \
    >"$raw/$label-matrix.log" 2>&1 || status=1
  grep -E '^cuda\S* +64 x 64 |^cuda.*capacity at' "$raw/$label-matrix.log" | cut -c1-120 | tee -a "$log"
  echo "=== $label: tapstream process, 8 ch x 60 s float WAV x 65536 taps, cuda, wall s (3 runs)" | tee -a "$log"
  make_process_input
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    timeout 120 "$b/tapstream" process "$work/in.wav" "$work/out-$label.wav" --taps "$work/taps.txt" \
      --backend cuda >"$raw/$label-process.log" 2>&1 || status=1
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')" | tee -a "$log"
  done
  if [ "$quick" != --quick ]; then
    echo "=== $label: capacity, cuda, 64 frames x 65536 taps (paced)" | tee -a "$log"
    timeout 240 "$b/tapstream" bench capacity --engines cuda --blocks 64 --taps 65536 \
      --measure-blocks 5000 --json "$raw/$label-capacity.json" >"$raw/$label-capacity.log" 2>&1 ||
      status=1
    grep -E 'capacity|fits|over' "$raw/$label-capacity.log" | tail -4 | tee -a "$log"
  fi
}

case $what in
  figures | all)
    figures "$before" before
    figures "$after" after
    ;;&
  figures2 | all)
    figures "$after" after2
    figures "$before" before2
    ;;
esac
[ "$what" = tests ] || [ "$what" = all ] || {
  tar -czf "$out/raw-$what.tar.gz" -C "$out" raw && rm -rf "$raw"
  exit $status
}

export LD_LIBRARY_PATH=$PWD/$after/lib:/usr/local/cuda/lib64
: >"$out/tests.txt"
for t in "$after"/cuda_*_test; do
  echo "== $(basename "$t")" | tee -a "$out/tests.txt"
  (cd "$after" && timeout 300 "./$(basename "$t")" 2>&1) | grep -v '^\[ seed' >>"$out/tests.txt" || status=1
  grep -E "PASSED|FAILED" "$out/tests.txt" | tail -1
done
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
: >"$out/sanitizer.txt"
for t in cuda_small_calls_test cuda_matrix_engine_test cuda_partitioned_test; do
  (cd "$after" && timeout 300 "$sanitizer" --tool memcheck --error-exitcode 3 "./$t" \
    --gtest_filter='-*Probe*' 2>&1) | grep -E 'ERROR SUMMARY|PASSED|FAILED' | tee -a "$out/sanitizer.txt" || status=1
done
tar -czf "$out/raw-$what.tar.gz" -C "$out" raw && rm -rf "$raw"
exit $status
