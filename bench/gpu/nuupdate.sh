#!/usr/bin/env bash
# Issue 25 item 2 on the CPU non-uniform (live) engine: per-channel updates
# and whole banks play from the next call (dsp/cpu/cpu_nonuniform_engine.cpp).
# No GPU needed: this is for the H100 host's 16 quiet cores, against the
# loaded 2-core VM the change was made on. From the repository root, with the
# binaries of a build with -DTAPSTREAM_BENCH=ON (tapstream,
# channel_updates_test, cpu_nonuniform_engine_test) in one folder:
#   bash bench/gpu/nuupdate.sh BIN_DIR RESULTS_DIR
# 1. the per-channel update suite and the non-uniform engine's suite, three
#    times each (they race the engine's preparer and tail workers);
# 2. `tapstream bench updates --diagonal --live`: the largest channel count
#    whose filters (8192 taps) are replaced at every 128-frame block, every
#    channel and an eighth of them, on the live engine, with p99.9 under half
#    the period (the update's post in the call, its transform on the
#    preparer, its catch-up on the tail workers).
# 3. the same-period load test for 2 minutes, where jackd is installed.
# Prints PASS/FAIL lines and the numbers; about 6 minutes.
set -uo pipefail
bin=$(cd "${1:?binaries folder}" && pwd)
out=${2:?results folder}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
commit=$(cat "$bin/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
{ nproc; uptime; echo "commit $commit"; } | tee "$out/env.txt"
status=0
verdict() {  # NAME RC
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1 (exit $2)"; status=1; fi
}

for t in channel_updates_test cpu_nonuniform_engine_test; do
  [ -x "$bin/$t" ] || { echo "FAIL $t: not in $bin"; status=1; continue; }
  for run in 1 2 3; do
    timeout 300 "$bin/$t" >"$out/$t.$run.log" 2>&1
    verdict "$t (run $run)" $?
  done
done

for fraction in 1 0.125; do
  json="$out/updates-live-diagonal-fraction-$fraction.json"
  timeout 300 "$bin/tapstream" bench updates --engines cpu --diagonal --live --blocks 128 \
    --taps 8192 --every 1 --fraction "$fraction" --probe-blocks 300 --measure-blocks 1000 \
    --max-paths 1024 --json "$json" --commit "$commit" >"$out/updates-$fraction.txt" 2>&1
  rc=$?
  verdict "bench updates --diagonal --live --fraction $fraction" $rc
  tail -3 "$out/updates-$fraction.txt"
done
# 3. The same-period load test (8 ch x 65536 taps, 64-frame periods, a whole-bank
#    swap every 3 s: each swap's catch-up is now one burst per tail worker), 2
#    minutes, where jackd and the test are there (run as root for --realtime).
if [ -x "$bin/daemon_load_test" ] && [ -x /usr/bin/jackd ]; then
  TAPSTREAM_LOAD_SECONDS=120 timeout 400 "$bin/daemon_load_test" \
    --gtest_filter='DaemonLoad.ZeroLatency*' >"$out/daemon_load_zero.log" 2>&1
  verdict "daemon_load_test ZeroLatency (120 s)" $?
  grep -E "^summary" "$out/daemon_load_zero.log"
else
  echo "SKIP daemon_load_test ZeroLatency: no $bin/daemon_load_test or no /usr/bin/jackd"
fi
echo "results in $out"
exit $status
