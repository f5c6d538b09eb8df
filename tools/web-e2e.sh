#!/usr/bin/env bash
# End-to-end test of the browser page in Debian's headless Chromium
# (web/e2e/page.mjs): a daemon streams a 440 Hz sine from a file paced at the
# sample rate to a recorded file; the page moves the master fader to -20 dB
# and uploads a 3-tap filter (|H(440 Hz)| = -1.16 dB), then a broken one.
# Checks: the recording's level falls by 21.2 dB from its start to its end,
# the swap and the refusal show on the page, the page's JavaScript is under
# 200 KB, and a reload of the page takes < 1 s (the median of five; the
# target is 300 ms, printed beside the measurement: docs/api.md has it; CI
# machines are slower).
# Screenshots: $TAPSTREAM_E2E_SHOTS (default: a temporary directory).
# Usage: tools/web-e2e.sh [BUILD_DIR]   (needs chromium, node, npm, sox)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d /tmp/tapstream-e2e-XXXXXX)
shots=${TAPSTREAM_E2E_SHOTS:-$work}
mkdir -p "$shots"
daemon=
cleanup() { [ -n "$daemon" ] && kill "$daemon" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

(cd web/e2e && npm ci --no-audit --no-fund --silent)
sox -n -r 48000 -c 2 -b 16 "$work/in.wav" synth 30 sine 440 vol 0.5
echo 1.0 > "$work/unit.txt"
printf '0.5\n0.25\n0.125\n' > "$work/three-taps.txt"
printf '0.5\nnot-a-number\n' > "$work/broken.txt"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/live.toml" <<TOML
sample_rate = 48000
block_frames = 256
channels = 2
[input]
file = "in.wav"
[output]
file = "out.wav"
[filter]
file = "unit.txt"
max_taps = 1024
[control]
socket = "sock/control.sock"
[web]
port = $port
root = "$PWD/web"
TOML
"$build/daemon/tapstream" run --config "$work/live.toml" >"$work/daemon.out" 2>"$work/daemon.err" &
daemon=$!
# Up once it says so (30 s at most: CI runs this beside a build).
for _ in $(seq 300); do grep -q "web: http" "$work/daemon.out" && break; sleep 0.1; done
grep -q "web: http" "$work/daemon.out" ||
  { echo "web-e2e: the daemon did not start its web server in 30 s" >&2; cat "$work/daemon.err" >&2; exit 1; }
sleep 1  # a second at full level before the fader moves
result=$(node web/e2e/page.mjs "http://127.0.0.1:$port/" "$work/three-taps.txt" "$work/broken.txt" "$shots")
echo "page: $result"
python3 - "$result" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"page: loaded in {r['navigation_ms']:.0f} ms cold, {r['reload_navigation_ms']:.0f} ms on reload "
      f"(median of {r['reload_navigation_ms_all']}; target < 300 ms); "
      f"{r['transfer_bytes'] / 1000:.1f} KB in all, JavaScript "
      f"{r['script_bytes'] / 1000:.1f} KB (target < 200 KB)")
PY
sleep 1
kill -TERM "$daemon"
status=0
wait "$daemon" || status=$?
daemon=
# A clean stop on SIGTERM exits 128 + 15 (README, exit codes).
[ "$status" -eq 143 ] || { echo "web-e2e: daemon exited $status after SIGTERM, not 143" >&2; cat "$work/daemon.err" >&2; exit 1; }
level() { sox "$work/out.wav" -n trim "$1" "$2" stats 2>&1 | awk '/RMS lev dB/ {print $4}'; }
start_db=$(level 0.2 0.5)
end=$(soxi -D "$work/out.wav")
end_db=$(level "$(awk "BEGIN { print $end - 0.6 }")" 0.5)
echo "recording: RMS $start_db dB at the start, $end_db dB at the end"
python3 - "$result" "$start_db" "$end_db" <<'PY'
import json, sys
result, start, end = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
problems = []
drop = start - end
if abs(drop - 21.16) > 0.5:
    problems.append(f"level fell by {drop:.2f} dB, expected 21.16 (fader -20 dB, filter -1.16 dB)")
if "installed" not in result["upload_message"] or result["first_filter_taps"] != "3":
    problems.append(f"swap not shown: {result['upload_message']!r}, taps {result['first_filter_taps']}")
# The refusal names the file and the line; no reply quotes a file's text
# (docs/security.md), so the bad token itself is not expected.
if "broken.txt:2: cannot parse" not in result["bad_upload_message"]:
    problems.append(f"refusal not shown: {result['bad_upload_message']!r}")
if not 0 < result["script_bytes"] < 200_000:
    problems.append(f"JavaScript of {result['script_bytes']} bytes (target < 200 KB)")
if result["reload_navigation_ms"] > 1000:  # target 300 ms; slack for loaded CI machines
    problems.append(f"page loaded in {result['reload_navigation_ms']:.0f} ms (> 1000)")
for p in problems:
    print("web-e2e: FAILED:", p)
sys.exit(1 if problems else 0)
PY
echo "web-e2e: passed (screenshots in $shots)"
