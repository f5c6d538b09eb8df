#!/usr/bin/env bash
# The README's test command: installs the dependencies, builds tapstream
# (with the CUDA engine wherever nvcc is found) and runs every test with ctest;
# then the sanitizer builds of the CPU code: AddressSanitizer +
# UndefinedBehaviorSanitizer over the CPU suites, ThreadSanitizer over the
# pieces that cross threads. GPU tests skip, with their reason, where there is
# no GPU. Set TAPSTREAM_SANITIZERS=0 to skip the sanitizer builds.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
jobs=$(nproc)

echo "== build (Release) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTAPSTREAM_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
echo "== tests =="
# The 10-minute load test (label load) is not part of this run: see README, "Load test".
ctest --test-dir build --output-on-failure -j"$jobs" -LE load
echo "== browser page end to end (headless Chromium) =="
if command -v chromium >/dev/null && command -v node >/dev/null && command -v npm >/dev/null; then
  tools/web-e2e.sh build
else
  echo "skipped: needs chromium (tools/install-deps.sh), node and npm"
fi

if [ "${TAPSTREAM_SANITIZERS:-1}" != 0 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer (CPU code) =="
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTAPSTREAM_CUDA=OFF \
    -DTAPSTREAM_BENCH=OFF \
    "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
    >/dev/null
  cmake --build build-asan -j"$jobs"
  # The real-time JACK test runs once, in the Release build above; the load test never here.
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j"$jobs" \
    -LE 'realtime|load'

  echo "== ThreadSanitizer (rings, swap hand-off, control plane) =="
  tsan_tests=(spsc_ring_test filter_mailbox_test control_socket_test file_watcher_test
              latency_stats_test config_test live_pipeline_test cpu_engine_test daemon_swaps_test
              cpu_nonuniform_engine_test live_zero_latency_test output_stage_test offline_pipeline_test
              swap_fuzz_test live_matrix_pipeline_test deadline_counter_test)
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTAPSTREAM_CUDA=OFF \
    -DTAPSTREAM_BENCH=OFF "-DCMAKE_CXX_FLAGS=-fsanitize=thread" >/dev/null
  present=()
  for t in "${tsan_tests[@]}"; do [ -f "tests/$t.cpp" ] && present+=("$t"); done
  cmake --build build-tsan -j"$jobs" --target tapstream "${present[@]}"
  for t in "${present[@]}"; do
    filter='*'
    # The CPU engine's arithmetic is single-threaded; its worker pool is what crosses threads.
    [ "$t" = cpu_engine_test ] && filter='WorkerPool.*:*Threads*'
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "build-tsan/tests/$t" \
      --gtest_filter="$filter"
  done
fi
echo "== libFuzzer targets, 25 s each (coefficient files, sound files, configuration, control requests) =="
# Longer runs: tools/fuzz.sh 600 (docs/reliability.md). Set TAPSTREAM_FUZZ_SECONDS=0 to skip.
if [ "${TAPSTREAM_FUZZ_SECONDS:-25}" != 0 ]; then
  tools/fuzz.sh "${TAPSTREAM_FUZZ_SECONDS:-25}"
fi
echo "tools/test.sh: all tests passed"
