#!/usr/bin/env bash
# A flake hunt: runs the chosen tests ROUNDS times under a CPU load generator
# (one busy process per core, for the whole hunt) and prints, for each test,
# how many rounds it ran and how many it failed. docs/reliability.md records
# the hunts.
#
#   tools/flake-hunt.sh ROUNDS [SELECTION]
#
# SELECTION: ctest labels, as a regular expression that matches whole labels
# (default `timing|realtime`: every test that touches JACK, sockets, the
# websocket, threads, child processes, signals or clocks, see
# tests/CMakeLists.txt), or else a regular expression over test names (ctest
# -R), e.g. 'JackWebApi|FileWatcher'. The tests come from an existing build (BUILD_DIR, default build; build
# them first, e.g. `cmake --build build --target tapstream`, then the tests).
#
# Environment: BUILD_DIR; FLAKE_HUNT_JOBS (ctest -j, default the number of
# cores); FLAKE_HUNT_LOAD=0 for no load generator; FLAKE_HUNT_LOGS (where each
# round's ctest output goes, default BUILD_DIR/flake-hunt); FLAKE_HUNT_UNTIL (a
# time `date -d` reads, e.g. 21:35: no round starts after it, and the table
# counts the rounds that ran). The 60 s JACK
# stream (JackEndToEnd) runs TAPSTREAM_JACK_SECONDS seconds, 10 unless set:
# what can flake is its set-up and timing, not its length.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:?usage: tools/flake-hunt.sh ROUNDS [LABEL|REGEX]}
selection=${2:-timing|realtime}
build=${BUILD_DIR:-build}
jobs=${FLAKE_HUNT_JOBS:-$(nproc)}
logs=${FLAKE_HUNT_LOGS:-$build/flake-hunt}
export TAPSTREAM_JACK_SECONDS=${TAPSTREAM_JACK_SECONDS:-10}

[ -f "$build/CTestTestfile.cmake" ] || {
  echo "flake-hunt: no ctest tree in $build (configure and build first)" >&2
  exit 2
}
if ctest --test-dir "$build" --print-labels | sed -n 's/^  *//p' | grep -Eqx -- "$selection"; then
  select=(-L "^($selection)\$")
else
  select=(-R "$selection")
fi
# The load test (10 minutes) never runs here.
select+=(-LE load)
if [ "$(ctest --test-dir "$build" -N "${select[@]}" | sed -n 's/^Total Tests: //p')" = 0 ]; then
  echo "flake-hunt: no test matches '$selection' in $build" >&2
  exit 2
fi

# The load generator: one busy shell per core, stopped (by their process ids)
# however the hunt ends.
burners=()
stop_burners() {
  local pid
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null || true; done
  burners=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM
if [ "${FLAKE_HUNT_LOAD:-1}" != 0 ]; then
  for _ in $(seq "$(nproc)"); do
    bash -c 'while :; do :; done' &
    burners+=($!)
  done
fi

burner_count=${#burners[@]}
mkdir -p "$logs"
results="$logs/results.txt"  # one line per test and round: NAME RESULT
: >"$results"
started=$(date +%s)
echo "flake hunt: $rounds rounds of ctest ${select[*]} -j$jobs in $build, under $burner_count busy" \
  "processes on $(nproc) cores; logs in $logs"
until_s=
if [ -n "${FLAKE_HUNT_UNTIL:-}" ]; then until_s=$(date -d "$FLAKE_HUNT_UNTIL" +%s); fi
ran=0
for round in $(seq "$rounds"); do
  round_start=$(date +%s)
  if [ -n "$until_s" ] && [ "$round_start" -ge "$until_s" ]; then
    echo "FLAKE_HUNT_UNTIL ($FLAKE_HUNT_UNTIL) reached: stopping after $ran of $rounds rounds"
    break
  fi
  ran=$round
  log="$logs/round-$round.log"
  ctest --test-dir "$build" "${select[@]}" -j"$jobs" --output-on-failure >"$log" 2>&1 || true
  # "  3/41 Test  #3: Suite.Name ....................   Passed    0.12 sec", with
  # "  # GetParam() = ..." after the name of a parameterised test.
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+)( +#.*)? \.+ *(\*\*\*)?([A-Za-z]+( Run)?).*/\1 \4/p' \
    "$log" >>"$results"
  failed=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+)( +#.*)? \.+ *\*\*\*([A-Z][a-z]+).*/\1 \3/p' \
    "$log" | awk '$2 != "Skipped" { printf "%s ", $1 }')
  echo "round $round/$rounds: $(($(date +%s) - round_start)) s, failed: ${failed:-none}"
done
stop_burners

echo
echo "flake hunt: $ran rounds in $(($(date +%s) - started)) s ($(nproc) cores, $burner_count busy processes, ctest -j$jobs)"
printf '%-80s %5s %8s\n' test runs failures
# Anything but Passed or Skipped (a GPU test without a GPU: GTEST_SKIP, with
# its reason) is a failure: Failed, Timeout, Exception, Not Run.
awk '{ runs[$1]++; if ($2 != "Passed" && $2 != "Skipped") fail[$1]++ }
     END { for (t in runs) printf "%-80s %5d %8d\n", t, runs[t], fail[t] + 0 }' "$results" |
  sort -k3,3nr -k1,1
total_failures=$(awk '$2 != "Passed" && $2 != "Skipped"' "$results" | wc -l)
echo "total failures: $total_failures"
[ "$total_failures" = 0 ]
