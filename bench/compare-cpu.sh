#!/usr/bin/env bash
# Side by side on one offline job: `tapstream process --backend cpu`, BruteFIR
# and `sox ... fir`: 60 s of stereo 48 kHz float noise through 4096 and 65536
# random taps, file in and file out. Prints wall and CPU times, the throughput
# ratios tapstream / BruteFIR (target 2.5x) and tapstream / sox fir (target
# 1.5x), and checks that tapstream's output equals BruteFIR's within 1e-5
# (relative, whole file) once BruteFIR's partition delay is aligned. Then the
# pipeline's own cost (a 1-tap identity filter against `sox in out` and `cp`),
# the start-up (a 10 ms file, target 30 ms) and a batch of BATCH_FILES
# two-second files against a shell loop of single runs. Writes JSON with the
# machine, date and commit.
#
#   bench/compare-cpu.sh [BUILD_DIR]        (default: build)
#   RUNS=5 TAPS="4096 65536" OUT_JSON=path bench/compare-cpu.sh build-cpu
#
# Times are the minimum over RUNS runs (after one warm-up run that lets each
# tool cache its FFTW plans): on a shared machine the minimum is the run least
# disturbed by other processes. CPU time is perf's task-clock summed over all
# threads and processes of the tool (BruteFIR forks one process per filter).
# BruteFIR is given several partitionings and the fastest is reported.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[[ $build = /* ]] || build=$root/$build
tapstream=$build/daemon/tapstream
driver=$build/bench/cpu_engine_bench
runs=${RUNS:-5}
taps_list=${TAPS:-4096 65536}
seconds=60
rate=48000
out_json=${OUT_JSON:-$root/bench/results/compare-cpu-$(date -u +%F).json}

for tool in sox brutefir python3; do
  command -v $tool >/dev/null || { echo "compare-cpu: $tool not found (tools/install-deps.sh installs it)" >&2; exit 1; }
done
[[ -x $tapstream ]] || { echo "compare-cpu: $tapstream not built" >&2; exit 1; }
have_perf=0
perf stat -x, -e task-clock true >/dev/null 2>&1 && have_perf=1

work=$(mktemp -d /tmp/compare-cpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
export TAPSTREAM_FFTW_WISDOM=$work/tapstream-wisdom

# 60 s of stereo white noise, float WAV for tapstream and sox, raw float for BruteFIR.
sox -R -n -r $rate -c 2 -b 32 -e floating-point "$work/noise.wav" synth $seconds whitenoise vol 0.5
sox "$work/noise.wav" -t f32 "$work/noise.f32"
frames=$((seconds * rate))

# Random taps (seeded), as text (sox, tapstream) and raw float32 (BruteFIR, tapstream .f32).
python3 - "$work" $taps_list <<'PY'
import array, random, sys
work = sys.argv[1]
for m in map(int, sys.argv[2:]):
    rng = random.Random(m)
    h = [rng.gauss(0.0, 1.0) / m ** 0.5 for _ in range(m)]
    with open(f"{work}/h{m}.txt", "w") as f:
        f.write("".join("%.9g\n" % x for x in h))
    h32 = array.array("f", [float("%.9g" % x) for x in h])
    with open(f"{work}/h{m}.f32", "wb") as f:
        h32.tofile(f)
PY

# Arithmetic on decimals (awk is everywhere; bc is not).
calc() { awk "BEGIN { print $* }"; }

# Runs "$@" and prints "wall_seconds cpu_seconds" (cpu 0 without perf).
measure() {
  local start end cpu=0
  start=$(date +%s.%N)
  if ((have_perf)); then
    cpu=$(perf stat -x, -e task-clock -o "$work/perf.txt" "$@" >/dev/null 2>"$work/stderr.txt" &&
      awk -F, '/task-clock/ {print $1 / 1000}' "$work/perf.txt")
  else
    "$@" >/dev/null 2>"$work/stderr.txt"
  fi
  end=$(date +%s.%N)
  echo "$(calc "$end - $start") ${cpu:-0}"
}

# Minimum wall and CPU time over $runs runs, after one warm-up.
best_of() {
  local best_wall=999999 best_cpu=999999 wall cpu
  "$@" >/dev/null 2>"$work/stderr.txt" || {
    echo "compare-cpu: failed: $*" >&2
    cat "$work/stderr.txt" >&2
    exit 1
  }
  for ((i = 0; i < runs; i++)); do
    read -r wall cpu < <(measure "$@")
    best_wall=$(calc "($wall < $best_wall) ? $wall : $best_wall")
    best_cpu=$(calc "($cpu < $best_cpu) ? $cpu : $best_cpu")
  done
  printf '%.3f %.3f\n' "$best_wall" "$best_cpu"
}

brutefir_config() {  # m partition blocks -> config file path
  local m=$1 p=$2 k=$3 cfg=$work/brutefir-$1-$2.conf
  cat >"$cfg" <<CFG
float_bits: 32;
sampling_rate: $rate;
filter_length: $p,$k;
overflow_warnings: false;
show_progress: false;
lock_memory: false;
modules_path: "/usr/lib/brutefir";
convolver_config: "$work/brutefir-wisdom";
coeff 0 { filename: "$work/h$m.f32"; format: "FLOAT_LE"; };
input "l", "r" { device: "file" { path: "$work/noise.f32"; }; sample: "FLOAT_LE"; channels: 2; };
output "l", "r" { device: "file" { path: "$work/brutefir-$m.f32"; }; sample: "FLOAT_LE"; channels: 2; };
filter "fl" { from_inputs: "l"; to_outputs: "l"; coeff: 0; };
filter "fr" { from_inputs: "r"; to_outputs: "r"; coeff: 0; };
CFG
  echo "$cfg"
}

commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
machine=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
date_utc=$(date -u +%FT%TZ)
echo "machine: $machine, $cores cores; load average: $(cut -d' ' -f1-3 /proc/loadavg); $date_utc; commit $commit"
echo "job: $seconds s stereo $rate Hz float32 noise, file in, file out; best of $runs runs"
printf '%-7s %-34s %9s %9s %14s\n' taps tool wall_s cpu_s samples/wall-s
json_rows=()
status=0
for m in $taps_list; do
  samples=$((frames * 2))
  # tapstream, the user's command.
  read -r ts_wall ts_cpu < <(best_of "$tapstream" -q process "$work/noise.wav" \
    "$work/tapstream-$m.wav" --taps "$work/h$m.f32" --backend cpu)
  ts_desc=$("$tapstream" process "$work/noise.wav" "$work/tapstream-$m.wav" --taps "$work/h$m.f32" \
    --backend cpu 2>&1 | sed -n 's/.*through \(.*\) in [0-9.]* s.*/\1/p' | head -1)
  printf '%-7s %-34s %9s %9s %14.4g\n' $m "tapstream process --backend cpu" $ts_wall $ts_cpu \
    "$(calc "$samples / $ts_wall")"
  # The engine alone (no sound-file library), for reference.
  if [[ -x $driver ]]; then
    read -r dr_wall dr_cpu < <(best_of "$driver" --raw "$work/noise.f32" "$work/driver-$m.f32" "$work/h$m.f32")
    printf '%-7s %-34s %9s %9s %14.4g\n' $m "cpu_engine_bench --raw (engine)" $dr_wall $dr_cpu \
      "$(calc "$samples / $dr_wall")"
  fi
  # BruteFIR: several partitionings, keep the fastest.
  bf_wall=999999 bf_cpu=0 bf_p=0
  for p in 1024 4096 8192 16384 65536; do
    ((p >= m / 64 && p <= m * 2)) || continue
    k=$(((m + p - 1) / p))
    cfg=$(brutefir_config $m $p $k)
    read -r w c < <(best_of brutefir -nodefault "$cfg")
    printf '%-7s %-34s %9s %9s %14.4g\n' $m "brutefir filter_length $p,$k" $w $c \
      "$(calc "$samples / $w")"
    if (($(calc "$w < $bf_wall"))); then bf_wall=$w bf_cpu=$c bf_p=$p; fi
  done
  # Keep the output of the fastest configuration for the comparison.
  brutefir -nodefault "$(brutefir_config $m $bf_p $(((m + bf_p - 1) / bf_p)))" >/dev/null 2>&1
  # sox fir (fewer runs: it is the slow one).
  saved_runs=$runs runs=1
  read -r sx_wall sx_cpu < <(best_of sox "$work/noise.wav" "$work/sox-$m.wav" fir "$work/h$m.txt")
  runs=$saved_runs
  printf '%-7s %-34s %9s %9s %14.4g\n' $m "sox fir" $sx_wall $sx_cpu "$(calc "$samples / $sx_wall")"

  ratio=$(calc "$bf_wall / $ts_wall")
  cpu_ratio=$(calc "($ts_cpu > 0) ? $bf_cpu / $ts_cpu : 0")
  sox_ratio=$(calc "$sx_wall / $ts_wall")
  printf '        throughput tapstream / BruteFIR: %.2fx wall (target 2.5x), %.2fx CPU time\n' $ratio $cpu_ratio
  printf '        throughput tapstream / sox fir: %.2fx wall (target 1.5x)\n' $sox_ratio

  # Exactness against BruteFIR, after its partition delay.
  check=$(python3 - "$work/tapstream-$m.wav" "$work/brutefir-$m.f32" $bf_p <<'PY'
import array, math, struct, sys
def load_raw(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a
def load_wav_float(path):
    # The samples of a float32 WAV, read directly (sox would clip them to +-1).
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", path + ": not a WAV file"
    pos = 12
    while pos + 8 <= len(data):
        tag, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if tag == b"fmt ":
            fmt, bits = struct.unpack("<H", data[pos + 8:pos + 10])[0], struct.unpack("<H", data[pos + 22:pos + 24])[0]
            assert bits == 32 and fmt in (3, 0xFFFE), path + ": not float32"
        if tag == b"data":
            a = array.array("f")
            a.frombytes(data[pos + 8:pos + 8 + size])
            return a
        pos += 8 + size + (size & 1)
    raise SystemExit(path + ": no data chunk")
ts, bf, p = load_wav_float(sys.argv[1]), load_raw(sys.argv[2]), int(sys.argv[3])
def error(delay, limit=None):
    # BruteFIR's output is tapstream's delayed by `delay` frames (2 samples each).
    d = 2 * delay
    n = min(len(ts), len(bf) - d)
    if limit:
        n = min(n, limit)
    num = den = 0.0
    for i in range(n):
        r = ts[i]
        e = bf[i + d] - r
        num += e * e
        den += r * r
    return math.sqrt(num / den) if den else math.sqrt(num), n
candidates = sorted({0, p, 2 * p, 3 * p})
delay = min(candidates, key=lambda c: error(c, 200000)[0])
err, n = error(delay)
print(f"{delay} {err:.3e} {n // 2}")
PY
)
  read -r delay err compared <<<"$check"
  ok=$(python3 -c "print('pass' if $err <= 1e-5 else 'FAIL')")
  [[ $ok = pass ]] || status=1
  echo "        tapstream vs BruteFIR: relative error $err over $compared frames, BruteFIR delay $delay frames: $ok"
  json_rows+=("{\"taps\": $m, \"tapstream\": {\"wall_s\": $ts_wall, \"cpu_s\": $ts_cpu, \"engine\": \"$ts_desc\"}, \"engine_only\": {\"wall_s\": ${dr_wall:-null}, \"cpu_s\": ${dr_cpu:-null}}, \"brutefir\": {\"wall_s\": $bf_wall, \"cpu_s\": $bf_cpu, \"filter_length\": \"$bf_p,$(((m + bf_p - 1) / bf_p))\"}, \"sox\": {\"wall_s\": $sx_wall, \"cpu_s\": $sx_cpu}, \"ratio_wall\": $(printf '%.3f' $ratio), \"ratio_wall_vs_sox\": $(printf '%.3f' $sox_ratio), \"ratio_cpu\": $(printf '%.3f' $cpu_ratio), \"relative_error_vs_brutefir\": $err, \"brutefir_delay_frames\": $delay}")
done

# The pipeline's own cost: a 1-tap identity filter against copying the file.
echo "1.0" >"$work/identity.txt"
read -r id_wall id_cpu < <(best_of "$tapstream" -q process "$work/noise.wav" "$work/identity.wav" \
  --taps "$work/identity.txt" --backend cpu)
read -r soxcp_wall soxcp_cpu < <(best_of sox "$work/noise.wav" "$work/soxcopy.wav")
read -r cp_wall cp_cpu < <(best_of cp "$work/noise.wav" "$work/copy.wav")
printf '%-7s %-34s %9s %9s\n' 1 "tapstream (identity filter)" $id_wall $id_cpu
printf '%-7s %-34s %9s %9s\n' - "sox in.wav out.wav (copy)" $soxcp_wall $soxcp_cpu
printf '%-7s %-34s %9s %9s\n' - "cp" $cp_wall $cp_cpu

# Start-up: a 10 ms file (median of 11 runs: the minimum would hide the usual cost).
sox -R -n -r $rate -c 2 -b 32 -e floating-point "$work/short.wav" synth 0.01 whitenoise vol 0.5
startup=()
for ((i = 0; i < 11; i++)); do
  read -r w c < <(measure "$tapstream" -q process "$work/short.wav" "$work/short-out.wav" \
    --taps "$work/identity.txt" --backend cpu)
  startup+=("$w")
done
startup_median=$(printf '%s\n' "${startup[@]}" | sort -g | sed -n 6p)
printf 'a 10 ms file through the CPU engine: median %.3f s of 11 (target 0.030 s)\n' $startup_median

# A batch of two-second stereo files: one process against a loop of one process per file.
batch_files=${BATCH_FILES:-100}
mkdir -p "$work/batch" "$work/batch-out" "$work/loop-out"
sox -R -n -r $rate -c 2 -b 32 -e floating-point "$work/two.wav" synth 2 whitenoise vol 0.5
for ((i = 0; i < batch_files; i++)); do cp "$work/two.wav" "$work/batch/f$i.wav"; done
start=$(date +%s.%N)
"$tapstream" -q process "$work/batch" --out-dir "$work/batch-out" --taps "$work/h4096.f32" --backend cpu
batch_wall=$(calc "$(date +%s.%N) - $start")
start=$(date +%s.%N)
for f in "$work"/batch/*.wav; do
  "$tapstream" -q process "$f" "$work/loop-out/$(basename "$f")" --taps "$work/h4096.f32" --backend cpu
done
loop_wall=$(calc "$(date +%s.%N) - $start")
printf 'batch of %d two-second files, 4096 taps: %.3f s in one process, %.3f s in a loop (%.2fx; target 5x)\n' \
  $batch_files $batch_wall $loop_wall "$(calc "$loop_wall / $batch_wall")"

mkdir -p "$(dirname "$out_json")"
{
  echo "{"
  echo "  \"benchmark\": \"compare-cpu.sh\","
  echo "  \"commit\": \"$commit\","
  echo "  \"machine\": {\"cpu\": \"$machine\", \"cores\": $cores, \"load_average\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"},"
  echo "  \"date\": \"$date_utc\","
  echo "  \"job\": \"$seconds s stereo $rate Hz float32 white noise, file in and out; min of $runs runs\","
  echo "  \"results\": ["
  for ((i = 0; i < ${#json_rows[@]}; i++)); do
    sep=,; ((i == ${#json_rows[@]} - 1)) && sep=
    echo "    ${json_rows[$i]}$sep"
  done
  echo "  ],"
  echo "  \"identity\": {\"tapstream_wall_s\": $id_wall, \"sox_copy_wall_s\": $soxcp_wall, \"cp_wall_s\": $cp_wall},"
  echo "  \"startup_10ms_file_median_s\": $startup_median,"
  echo "  \"batch\": {\"files\": $batch_files, \"seconds_each\": 2, \"taps\": 4096, \"batch_wall_s\": $batch_wall, \"loop_wall_s\": $loop_wall}"
  echo "}"
} >"$out_json"
echo "wrote $out_json"
exit $status
