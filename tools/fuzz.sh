#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang + AddressSanitizer + UBSan)
# in build-fuzz and runs each for SECONDS (default 25), two at a time, from
# its seed corpus (tests/fuzz/corpus/<target>, copied: the seeds stay as
# committed). A finding stops with the reproducer's path and a non-zero exit.
#   tools/fuzz.sh [SECONDS] [TARGET...]       e.g. tools/fuzz.sh 600 fuzz_live_config
# Logs and grown corpora stay in build-fuzz/runs/<target>/.
#   tools/fuzz.sh --available                 whether clang with libFuzzer is here (exit 0)
# TAPSTREAM_FUZZ_BUILD: the build directory (default build-fuzz); one already
# configured with TAPSTREAM_FUZZ=ON (tools/test.sh's AddressSanitizer build,
# which holds the tests too) is used as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
available() {
  if ! command -v clang++ >/dev/null; then
    echo "fuzz: skipped: no clang++ (tools/install-deps.sh installs clang and libclang-rt-dev)"
    return 1
  fi
  if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
      clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
    echo "fuzz: skipped: clang++ has no libFuzzer runtime (libclang-rt-dev)"
    return 1
  fi
}
if [ "${1:-}" = --available ]; then
  available
  exit
fi
seconds=${1:-25}
shift || true
available || exit 0
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
build=${TAPSTREAM_FUZZ_BUILD:-build-fuzz}
if ! grep -q '^TAPSTREAM_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_COMPILER=clang -DTAPSTREAM_CUDA=OFF -DTAPSTREAM_TESTS=OFF -DTAPSTREAM_BENCH=OFF \
    -DTAPSTREAM_PYTHON=OFF -DTAPSTREAM_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
fuzzers=$(cd "$build/tests/fuzz" && pwd)

run_one() {
  local t=$1 dir=$build/runs/$1
  rm -rf "$dir" && mkdir -p "$dir/corpus"
  cp tests/fuzz/corpus/"$t"/* "$dir/corpus/"
  if (cd "$dir" && "$fuzzers/$t" corpus -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 >log 2>&1); then
    echo "fuzz: $t: $(grep -E '^#[0-9]+.*DONE' "$dir/log" | tail -1)"
  else
    echo "fuzz: $t FOUND A PROBLEM (log: $dir/log):"
    grep -E 'ERROR|SUMMARY|Test unit written|uncaught|deadly' "$dir/log" | head -8
    return 1
  fi
}

status=0
pids=()
names=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  # Two at a time: each fuzzer is one busy core.
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
