#!/usr/bin/env bash
# The README's test command: installs the dependencies, builds tapstream
# (with the CUDA engine wherever nvcc is found) and runs every test with ctest;
# the browser page end to end; then the sanitizer builds of the CPU code:
# AddressSanitizer + UndefinedBehaviorSanitizer over the CPU suites,
# ThreadSanitizer over the pieces that cross threads; and the libFuzzer
# targets. GPU tests skip, with their reason, where there is no GPU.
#
# Each stage prints its duration (`== stage NAME: N s ==`). The test runs that
# mostly wait (real-time streams, child processes) go on in the background
# while the next build compiles; their output is printed, in order, when they
# are waited for.
#
# Environment:
#   TAPSTREAM_SANITIZERS=0       skip the sanitizer builds (and the fuzzing)
#   TAPSTREAM_FUZZ_SECONDS=N     seconds per fuzz target (default 25; 0 skips)
#   TAPSTREAM_CUDA_ARCHITECTURES CMAKE_CUDA_ARCHITECTURES of the Release build
#                                (default: the project's, 80-real 90-real 90-virtual)
#   TAPSTREAM_OVERLAP=0          run every stage in turn (no test run beside a build)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
overlap=${TAPSTREAM_OVERLAP:-1}
if command -v ccache >/dev/null; then
  # Paths relative to the clone, so that another clone (CI's fresh one) hits
  # what this machine compiled before; never required.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi

run_started=$(date +%s)
stage_name=
stage_started=0
stage() {  # stage NAME: ends the stage before (printing its duration), starts NAME
  stage_end
  stage_name=$1
  stage_started=$(date +%s)
  echo "== $stage_name =="
}
stage_end() {
  [ -n "$stage_name" ] && echo "== stage $stage_name: $(($(date +%s) - stage_started)) s =="
  stage_name=
}

# Background test runs: started with `background NAME COMMAND...`, their
# output in a log, printed by `finish NAME` (which fails if the run failed).
declare -A bg_pid bg_log bg_started
background() {
  local name=$1
  shift
  bg_log[$name]=$(mktemp "/tmp/tapstream-test-$name-XXXXXX.log")
  bg_started[$name]=$(date +%s)
  # Always a child process: there `set -e` holds (it is off in a function
  # whose status is tested).
  "$@" >"${bg_log[$name]}" 2>&1 &
  bg_pid[$name]=$!
  if [ "$overlap" != 1 ]; then
    local status=0
    wait "${bg_pid[$name]}" || status=$?
    bg_pid[$name]=-$status
  fi
}
finish() {
  local name=$1 status=0
  if [ "${bg_pid[$name]}" -gt 0 ]; then
    wait "${bg_pid[$name]}" || status=$?
  else
    status=$((-bg_pid[$name]))
  fi
  echo "== $name (ran beside the builds) =="
  cat "${bg_log[$name]}"
  rm -f "${bg_log[$name]}"
  echo "== stage $name: $(($(date +%s) - bg_started[$name])) s (finished $(($(date +%s) - run_started)) s into the run) =="
  if [ "$status" != 0 ]; then
    echo "tools/test.sh: $name FAILED" >&2
    exit "$status"
  fi
}

stage "dependencies"
tools/install-deps.sh

stage "build (Release)"
release_options=(-DCMAKE_BUILD_TYPE=Release -DTAPSTREAM_WERROR=ON)
if [ -n "${TAPSTREAM_CUDA_ARCHITECTURES:-}" ]; then
  release_options+=("-DCMAKE_CUDA_ARCHITECTURES=$TAPSTREAM_CUDA_ARCHITECTURES")
fi
cmake -S . -B build "${release_options[@]}" >/dev/null
cmake --build build -j"$jobs"

release_tests() {
  # The 10-minute load test (label load) is not part of this run: see README, "Load test".
  ctest --test-dir build --output-on-failure -j"$jobs" -LE load || return
  echo "== browser page end to end (headless Chromium) =="
  if command -v chromium >/dev/null && command -v node >/dev/null && command -v npm >/dev/null; then
    tools/web-e2e.sh build
  else
    echo "skipped: needs chromium (tools/install-deps.sh), node and npm"
  fi
}
stage_end
background "tests (Release) and browser page" release_tests

if [ "${TAPSTREAM_SANITIZERS:-1}" != 0 ]; then
  # The suites each sanitizer build runs, and only those are built: every
  # suite but the JACK and PipeWire ones (label realtime: real-time streams,
  # run once in the Release build above), the load test and the CUDA ones (no CUDA here).
  # The Python module is not built there (an instrumented module cannot load
  # into an uninstrumented interpreter); its suites run in the Release build.
  asan_tests=()
  for f in tests/*_test.cpp; do
    t=$(basename "$f" .cpp)
    case $t in jack_* | pipewire_* | daemon_load_test | cuda_*) ;; *) asan_tests+=("$t") ;; esac
  done

  # AddressSanitizer + UBSan, and the fuzz targets from the same objects
  # where clang has libFuzzer (one build of the library instead of two:
  # tools/fuzz.sh then only links its targets); else gcc, as before.
  stage "build (AddressSanitizer + UBSan)"
  fuzz_targets=()
  if [ "${TAPSTREAM_FUZZ_SECONDS:-25}" != 0 ] && tools/fuzz.sh --available; then
    for f in tests/fuzz/fuzz_*.cpp; do fuzz_targets+=("$(basename "$f" .cpp)"); done
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_C_COMPILER=clang -DTAPSTREAM_CUDA=OFF -DTAPSTREAM_BENCH=OFF -DTAPSTREAM_PYTHON=OFF -DTAPSTREAM_FUZZ=ON \
      >/dev/null
  else
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTAPSTREAM_CUDA=OFF \
      -DTAPSTREAM_BENCH=OFF -DTAPSTREAM_PYTHON=OFF \
      "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
      >/dev/null
  fi
  cmake --build build-asan -j"$jobs" --target tapstream "${asan_tests[@]}" "${fuzz_targets[@]}"
  stage_end
  finish "tests (Release) and browser page"

  asan_run() {
    # Not here: the suites not built above (ctest lists them as *_NOT_BUILT),
    # and live_latency_test, whose assertions are times: under a sanitizer
    # (and the fuzzer's coverage instrumentation) it would time those; its
    # claim is checked in the Release run, its engine code in cpu_engine_test.
    ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j"$jobs" \
      -LE 'realtime|load' -E '_NOT_BUILT$|^(CpuEngineLatency|CudaEngineLatency)\.'
  }
  background "tests (AddressSanitizer + UBSan)" asan_run

  stage "build (ThreadSanitizer)"
  # The rings, the swap hand-off, the control plane.
  tsan_tests=(spsc_ring_test filter_mailbox_test control_socket_test file_watcher_test
              latency_stats_test config_test live_pipeline_test cpu_engine_test daemon_swaps_test
              cpu_nonuniform_engine_test live_zero_latency_test output_stage_test offline_pipeline_test
              swap_fuzz_test live_matrix_pipeline_test deadline_counter_test trace_ring_test
              cpu_matrix_realtime_test channel_updates_test)
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTAPSTREAM_CUDA=OFF \
    -DTAPSTREAM_BENCH=OFF -DTAPSTREAM_PYTHON=OFF "-DCMAKE_CXX_FLAGS=-fsanitize=thread" >/dev/null
  present=()
  for t in "${tsan_tests[@]}"; do [ -f "tests/$t.cpp" ] && present+=("$t"); done
  cmake --build build-tsan -j"$jobs" --target tapstream "${present[@]}"
  stage_end
  finish "tests (AddressSanitizer + UBSan)"

  stage "tests (ThreadSanitizer)"
  for t in "${present[@]}"; do
    filter='*'
    # The CPU engine's arithmetic is single-threaded; its worker pool is what crosses threads.
    [ "$t" = cpu_engine_test ] && filter='WorkerPool.*:*Threads*'
    # The live engine's updates cross its preparer and tail workers; the uniform engine's do not.
    [ "$t" = channel_updates_test ] && filter='NonUniform*'
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "build-tsan/tests/$t" \
      --gtest_filter="$filter"
  done

else
  stage_end
  finish "tests (Release) and browser page"
fi

fuzz_seconds=${TAPSTREAM_FUZZ_SECONDS:-25}
stage "libFuzzer targets, $fuzz_seconds s each (coefficient files, sound files, configuration, control requests)"
# Longer runs: tools/fuzz.sh 600 (docs/reliability.md). TAPSTREAM_FUZZ_SECONDS=0 skips.
if [ "$fuzz_seconds" != 0 ]; then
  # The AddressSanitizer build holds the fuzz targets where it was made with them.
  if grep -q '^TAPSTREAM_FUZZ:BOOL=ON' build-asan/CMakeCache.txt 2>/dev/null; then
    export TAPSTREAM_FUZZ_BUILD=build-asan
  fi
  tools/fuzz.sh "$fuzz_seconds"
fi
stage_end
echo "tools/test.sh: all tests passed in $(($(date +%s) - run_started)) s"
