#!/usr/bin/env bash
# tapstream's same-period mode against jconvolver (zita-convolver), each alone
# on the same private JACK dummy server: same channels, same filter, same
# period. For each it reports the added latency (jack_iodelay looped through
# channel 1, minus JACK's own one-period loop), the CPU it used (all its
# threads, from /proc over a window of real-time streaming) and the late
# periods (tapstream's own count; JACK's xruns in the window for both).
#
#   bench/compare-jconvolver.sh [channels ...]      default: 16 32 64
#   PERIOD=64 TAPS=65536 SECONDS_EACH=30 TAPSTREAM=build/daemon/tapstream
#   CONVOLVERS="jconvolver tapstream" (or one of them)
#
# The machine's 1-minute load average is taken at the end of every window and
# printed beside its numbers: on a shared machine the CPU shares and the
# dummy driver's xruns are only as good as the quiet around them.
#
# Needs jackd2, jconvolver and jack_iodelay (tools/install-deps.sh) and a
# Release build. Prints a table and writes bench/results/compare-jconvolver-*.json.
# JACK runs with real-time priority (-R) when allowed, as a live setup does.
set -euo pipefail

cd "$(dirname "$0")/.."
PERIOD=${PERIOD:-64}
TAPS=${TAPS:-65536}
SECONDS_EACH=${SECONDS_EACH:-30}
TAPSTREAM=${TAPSTREAM:-build/daemon/tapstream}
CONVOLVERS=${CONVOLVERS:-jconvolver tapstream}  # one of them alone: a rerun after a change
RATE=48000
CHANNEL_COUNTS=("$@")
[ ${#CHANNEL_COUNTS[@]} -eq 0 ] && CHANNEL_COUNTS=(16 32 64)
for tool in jackd jconvolver jack_iodelay jack_lsp jack_connect; do
  command -v "$tool" >/dev/null || { echo "compare-jconvolver: $tool not found (tools/install-deps.sh)" >&2; exit 1; }
done
[ -x "$TAPSTREAM" ] || { echo "compare-jconvolver: $TAPSTREAM not built" >&2; exit 1; }

work=$(mktemp -d /tmp/tapstream-jconv-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export JACK_NO_AUDIO_RESERVATION=1
export JACK_DEFAULT_SERVER="tapstream-jconv-$$"

# One filter for every channel: a direct path (so that jack_iodelay locks on
# it) and a noise tail over all TAPS taps (the work does not depend on values).
python3 - "$work" "$TAPS" "$RATE" <<'EOF'
import random, struct, sys
work, taps, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(10)
h = [1.0] + [random.uniform(-1e-3, 1e-3) for _ in range(taps - 1)]
with open(f"{work}/h.txt", "w") as f:
    f.write("\n".join(repr(v) for v in h) + "\n")
data = struct.pack(f"<{taps}f", *h)
fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
with open(f"{work}/h.wav", "wb") as f:
    f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE")
    f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt)
    f.write(b"data" + struct.pack("<I", len(data)) + data)
EOF

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wait_for_port() {  # pattern
  # (grep reads all: -q would end jack_lsp with SIGPIPE, a failure under pipefail)
  for _ in $(seq 100); do jack_lsp 2>/dev/null | grep "$1" >/dev/null && return 0; sleep 0.1; done
  return 1
}

start_jack() {  # channels
  local rt=--no-realtime
  [ "$(id -u)" -eq 0 ] && rt=--realtime
  jackd -S "$rt" -t 10000 -d dummy -r "$RATE" -p "$PERIOD" -C "$1" -P "$1" \
    >"$work/jackd.log" 2>&1 &
  jack_pid=$!
  pids+=("$jack_pid")
  for _ in $(seq 100); do jack_lsp >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "compare-jconvolver: jackd did not come up" >&2
  cat "$work/jackd.log" >&2
  exit 1
}
stop() {  # pid: SIGTERM, then SIGKILL after 5 s (jackd may not answer the first)
  kill "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# jack_iodelay's test signal into every input matching $3 (the dummy
# driver's capture ports are silent, and a convolver may skip silent input),
# its round trip through in $1 -> out $2, in frames, in $trip. It keeps
# running (pid $io) so that the CPU window that follows filters a signal.
start_round_trip() {  # input port, output port, pattern of all inputs
  stdbuf -o0 jack_iodelay >"$work/iodelay.txt" 2>&1 </dev/null &
  io=$!
  pids+=("$io")
  wait_for_port jack_delay:in
  for port in $(jack_lsp | grep -E "$3"); do jack_connect jack_delay:out "$port"; done
  jack_connect "$2" jack_delay:in
  sleep 4
  trip=$(tr '\r' '\n' <"$work/iodelay.txt" | awk '/total roundtrip latency/ {v=$1} END {print v+0}')
}

results=()
printf '%-10s %4s %6s %6s %10s %8s %7s %7s %6s\n' convolver ch period taps added_fr cpu_pct late jxruns load
for channels in "${CHANNEL_COUNTS[@]}"; do
  for convolver in $CONVOLVERS; do
    start_jack "$channels"
    if [ "$convolver" = jconvolver ]; then
      {
        echo "/convolver/new $channels $channels $PERIOD $TAPS 1.0"
        echo "/impulse/read 1 1 1 0 0 0 1 $work/h.wav"
        for c in $(seq 2 "$channels"); do echo "/impulse/copy $c $c 1 1"; done
        for c in $(seq 1 "$channels"); do
          echo "/input/name $c in_$c system:capture_$c"
          echo "/output/name $c out_$c system:playback_$c"
        done
      } >"$work/jconvolver.conf"
      jconvolver -N jconvolver "$work/jconvolver.conf" >"$work/conv.log" 2>&1 &
      conv=$!
      in_port=jconvolver:in_1
      out_port=jconvolver:out_1
    else
      cat >"$work/tapstream.toml" <<EOF
sample_rate = $RATE
block_frames = $PERIOD
channels = $channels
latency = "zero"
[input]
device = "system"
[output]
device = "system"
[filter]
file = "h.txt"
watch = false
[engine]
backend = "cpu"
[control]
socket = "$work/ctl.sock"
EOF
      "$TAPSTREAM" run --config "$work/tapstream.toml" >"$work/conv.log" 2>&1 &
      conv=$!
      in_port=""
    fi
    pids+=("$conv")
    if [ "$convolver" = tapstream ]; then
      wait_for_port 'tapstream.*:out_1' || { cat "$work/conv.log" >&2; exit 1; }
      in_port=$(jack_lsp | grep -m1 'tapstream.*:in_1$')
      out_port=$(jack_lsp | grep -m1 'tapstream.*:out_1$')
    else
      wait_for_port "$out_port" || { cat "$work/conv.log" >&2; exit 1; }
    fi
    sleep 1
    inputs='^jconvolver:in_'
    [ "$convolver" = tapstream ] && inputs='^tapstream.*:in_'
    start_round_trip "$in_port" "$out_port" "$inputs"
    added=$((${trip%.*} - PERIOD))
    xruns0=$(grep -c XRun "$work/jackd.log" || true)
    late0=0
    if [ "$convolver" = tapstream ]; then
      late0=$("$TAPSTREAM" ctl --socket "$work/ctl.sock" status | python3 -c 'import json,sys; print(json.load(sys.stdin)["late_periods"])')
    fi
    t0=$(cpu_ticks "$conv")
    sleep "$SECONDS_EACH"
    t1=$(cpu_ticks "$conv")
    xruns=$(($(grep -c XRun "$work/jackd.log" || true) - xruns0))
    late=n/a
    if [ "$convolver" = tapstream ]; then
      late1=$("$TAPSTREAM" ctl --socket "$work/ctl.sock" status | python3 -c 'import json,sys; print(json.load(sys.stdin)["late_periods"])')
      late=$((late1 - late0))
    fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    cpu=$(awk -v d=$((t1 - t0)) -v t="$ticks" -v s="$SECONDS_EACH" 'BEGIN {printf "%.1f", 100 * d / t / s}')
    printf '%-10s %4d %6d %6d %10d %8s %7s %7d %6s\n' "$convolver" "$channels" "$PERIOD" "$TAPS" \
      "$added" "$cpu" "$late" "$xruns" "$load"
    results+=("{\"convolver\":\"$convolver\",\"channels\":$channels,\"period\":$PERIOD,\"taps\":$TAPS,\"round_trip_frames\":$trip,\"added_frames\":$added,\"cpu_percent\":$cpu,\"late_periods\":\"$late\",\"jack_xruns\":$xruns,\"seconds\":$SECONDS_EACH,\"load_average_1min\":$load}")
    stop "$io"
    stop "$conv"
    stop "$jack_pid"
  done
done

mkdir -p bench/results
out="bench/results/compare-jconvolver-$(date -u +%Y%m%dT%H%M%SZ).json"
{
  printf '{"commit":"%s","machine":"%s, %s cores","date":"%s","load_average":"%s","rows":[' \
    "$(git rev-parse --short HEAD)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(nproc)" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)"
  (IFS=,; printf '%s' "${results[*]}")
  printf ']}\n'
} >"$out"
echo "saved $out"

# The table and chart for docs/performance.md: CPU of one core per convolver
# and channel count, one '#' per 2 %.
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\n| convolver | ch | added frames | CPU % of one core | late periods | JACK xruns | load avg |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for row in r["rows"]:
    print("| %s | %d | %d | %.1f | %s | %d | %.2f |" % (
        row["convolver"], row["channels"], row["added_frames"], row["cpu_percent"],
        row["late_periods"], row["jack_xruns"], row["load_average_1min"]))
print("\n```")
for row in r["rows"]:
    print("%-10s %2d ch %5.1f %% %s" % (row["convolver"], row["channels"], row["cpu_percent"],
                                        "#" * int(round(row["cpu_percent"] / 2))))
print("```")
PY
