#!/usr/bin/env bash
# The GPU machine's run for issue 25 (helper h-updates): the CUDA matrix
# engine's per-path update suites, the Python module's CuPy and PyTorch cases
# on CPython 3.12, the module's overhead (bench/python_overhead.py) and the
# `tapstream bench updates` grid (64 and 128 frames x 2048 / 8192 / 32768
# taps, cuda-device, cuda-host, cpu, every path replaced every block), one
# PASS / FAIL line per part. Self-checking; at most about 9.5 minutes.
#
#   bash bench/gpu/python.sh BINARIES RESULTS
#
# BINARIES (bench/gpu/pack-python.sh BUILD PYBUILD BINARIES, built on the
# development machine with -DCMAKE_CUDA_ARCHITECTURES=90,
# the module with -DTAPSTREAM_PYTHON_INCLUDE_DIR="/work/py312/Include;/work/py312"
# -DTAPSTREAM_PYTHON_SOABI=cpython-312-x86_64-linux-gnu):
#   tapstream, libtapstream_cuda.so, cuda_matrix_engine_test,
#   python/tapstream/ (__init__.py, _device_arrays.py,
#     _tapstream.cpython-312-x86_64-linux-gnu.so, libtapstream_cuda.so),
#   lib/ (shared/device/bundle-libs.sh of the executables and the module).
set -uo pipefail
bin=$(realpath "${1:?usage: $0 BINARIES RESULTS}")
out=$(realpath -m "${2:?usage: $0 BINARIES RESULTS}")
mkdir -p "$out"
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
py=$(command -v python3.12 || command -v python3)
fails=0
verdict() {  # NAME STATUS
  if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1 (status $2)"; fails=$((fails + 1)); fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/env.txt"
"$py" --version | tee -a "$out/env.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$out/env.txt"

# 1. The engine's update suites (host and device taps, the fade of changed
# paths only, taps past their allocation).
timeout 150 "$bin/cuda_matrix_engine_test" --gtest_brief=1 >"$out/cuda_matrix_engine_test.log" 2>&1
verdict "cuda_matrix_engine_test" $?
grep -E '^\[  (PASSED|FAILED|SKIPPED) \]|Failure' "$out/cuda_matrix_engine_test.log" | head -20

# 2. The updates grid, one run (JSON written after every cell, so that a
# run cut short keeps what it measured).
timeout 300 "$bin/tapstream" bench updates --engines cuda-device,cuda-host,cpu --blocks 64,128 \
  --taps 2048,8192,32768 --every 1 --probe-blocks 150 --measure-blocks 1500 --max-paths 8192 \
  --commit "$(cat "$bin/COMMIT" 2>/dev/null || git rev-parse --short HEAD)" \
  --json "$out/updates-grid.json" >"$out/updates-grid.log" 2>&1
verdict "bench updates grid (18 cells)" $?
grep -vE '^  ' "$out/updates-grid.log" | tail -24
python3 - "$out/updates-grid.json" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["results"]
print(f"{len(cells)} of 18 cells measured")
for c in cells:
    print(f"  {c['engine']:11s} {c['frames']:4d} x {c['taps']:6d}: {c['paths']:6d} paths "
          f"(p99.9 {c['p999_us']:.1f} of {c['budget_us']:.1f} us, update p50 {c['update_p50_us']:.1f})")
target = [c for c in cells if (c["engine"], c["frames"], c["taps"]) == ("cuda-device", 128, 8192)]
sys.exit(0 if target and target[0]["paths"] >= 1024 else 1)
PY
verdict "target: >= 1024 paths of 8192 taps every 128-frame block from device arrays" $?

# 3. The module on CPython 3.12: its suites (the CuPy and PyTorch cases
# included), from the source tree's tests, the module from BINARIES.
export PYTHONPATH="$bin/python" PYTHONDONTWRITEBYTECODE=1
export TAPSTREAM_SOURCE_DIR=$PWD TAPSTREAM_BINARY="$bin/tapstream"
"$py" -c 'import tapstream; e = tapstream.Engine([[1.0, 0.5]], backend="cuda"); print(e.description)' \
  >"$out/module.log" 2>&1
verdict "the module loads and makes a CUDA engine" $?
cat "$out/module.log"
(cd python/tests && timeout 120 "$py" -m unittest -v test_device_arrays test_engine test_matrix \
  test_errors) >"$out/python-tests.log" 2>&1
status=$?
grep -qE 'skipped .*(CuPy|PyTorch|GPU|CUDA)' "$out/python-tests.log" && status=1  # a GPU case skipped
verdict "Python suites (CuPy and PyTorch cases run, none skipped)" $status
grep -E '^(Ran|OK|FAILED)|skipped|Error' "$out/python-tests.log" | head -20

# 4. The module's overhead: <= 5 % at 8 ch x 65536 taps x 64 frames.
timeout 60 "$py" bench/python_overhead.py --backend cuda --calls 1000 --rounds 3 \
  --json "$out/python-overhead.json" >"$out/python-overhead.log" 2>&1
verdict "python_overhead.py ran" $?
cat "$out/python-overhead.log"
grep -q 'target <= 5 % added: numpy -> new numpy array: .*: met' "$out/python-overhead.log"
verdict "the module adds <= 5 % (numpy in, new numpy array out, p50)" $?

# 5. memcheck on the update suites that write the spare set and the fades.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 60 "$sanitizer" --tool memcheck --leak-check no "$bin/cuda_matrix_engine_test" \
  --gtest_filter='TapsFrom/CudaPathUpdates.FewPaths*:TapsFrom/CudaPathUpdates.Bad*:CudaPathUpdatesMemory.*' \
  >"$out/sanitizer.log" 2>&1
status=$?
grep -q 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log" || status=1
verdict "memcheck of the update suites" $status
grep -E 'ERROR SUMMARY' "$out/sanitizer.log"

echo "$fails part(s) failed"
[ "$fails" = 0 ]
