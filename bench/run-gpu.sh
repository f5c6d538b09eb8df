#!/usr/bin/env bash
# The one script a device run executes for issue 3's benchmarks: tapstream's
# CUDA engine benchmark (if built), then the peers and floors (bench/peers.py),
# then the side-by-side table. Results go to $OUT (or ./out when unset):
#   env.txt            the machine: GPU, driver, tools found
#   engine.json/.log   bench/cuda_engine_bench output (parts merged)
#   peers.json/.log    bench/peers.py output, with the side-by-side table
#
# Build first, on the build machine (no GPU needed there):
#   cmake -S . -B build-gpu-bench -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
#         -DTAPSTREAM_TESTS=OFF
#   cmake --build build-gpu-bench --target cuda_engine_bench -j2
#   /work/shared/device/bundle-libs.sh build-gpu-bench/libs build-gpu-bench/bench/cuda_engine_bench
#   git rev-parse HEAD >build-gpu-bench/COMMIT   # the device copy has no .git
# then run with carry: ["build-gpu-bench"] and `bash bench/run-gpu.sh`.
#
# usage: run-gpu.sh [--peers-only] [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu-bench}
peers_only=0
quick=()
for arg in "$@"; do
  case $arg in
    --peers-only) peers_only=1 ;;
    --quick) quick=(--quick) ;;
    *) echo "run-gpu.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
export PYTHONUNBUFFERED=1

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv 2>&1
  echo "nsys: $(command -v nsys || echo 'not on PATH')"
  ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null
  echo "ncu: $(command -v ncu || echo 'not on PATH')"
  ls /usr/local/cuda/lib64/libcupti.so* 2>/dev/null
  python3 -c 'import torch, torchaudio, cupy; print("torch", torch.__version__, "torchaudio", torchaudio.__version__, "cupy", cupy.__version__)' 2>&1
  python3 -c "import inspect, cupyx.scipy.signal as s; print(\"oaconvolve\", inspect.signature(s.oaconvolve))" 2>&1
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

engine_args=()
if [ "$peers_only" = 0 ]; then
  bench=$build/bench/cuda_engine_bench
  if [ -x "$bench" ]; then
    echo "== tapstream cuda_engine_bench"
    export TAPSTREAM_COMMIT=$(cat "$build/COMMIT" 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
    export LD_LIBRARY_PATH=$build/libs:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    ldd "$bench" | grep "not found"
    # One process per part, so that a kernel fault in one (a sticky CUDA error
    # ends its context) costs only that part; the parts' JSON are merged below.
    taps_list=(32 256 2048 16384 131072)
    [ ${#quick[@]} -gt 0 ] && taps_list=(32 2048)
    parts=()
    run_bench() {
      "$bench" "$@" 2>&1 | tee -a "$out/engine.log"
      return "${PIPESTATUS[0]}"
    }
    for taps in "${taps_list[@]}"; do
      skip=()
      # Each process knows no smaller size to predict from: leave out by hand the
      # teaching variants that take 2 to 3.6 s per run at 131072 taps.
      [ "$taps" = 131072 ] && skip=(--skip direct:naive,direct:constant,direct:shared_tile,direct:cached_tile
        --skip-reason "not run: 2.0-3.6 s per run (measured once on an H100: naive 2768 ms, constant 2768 ms, shared_tile 2008 ms, cached_tile 3628 ms; bench/results/engine-h100-20261122-call2.json)")
      run_bench --only ceilings,offline --taps "$taps" --json "$out/engine-offline-$taps.json" "${skip[@]}"
      echo "cuda_engine_bench offline $taps taps: exit status $?"
      parts+=("$out/engine-offline-$taps.json")
    done
    # The FFT path without the fused kernels (separate cuFFT passes), for comparison.
    run_bench --only ceilings,offline --taps 2048,16384,131072 --engine-option fft_fused=false \
      --json "$out/engine-offline-unfused.json" \
      --skip direct:naive,direct:constant,direct:shared_tile,direct:cached_tile,direct:tuned \
      --skip-reason "not run with fft_fused=false (direct form does not use it)"
    echo "cuda_engine_bench offline FFT unfused: exit status $?"
    parts+=("fft_unfused=$out/engine-offline-unfused.json")
    # The multi-partition kernels' candidate partitions at 131072 taps (the
    # automatic choice is one of them): fft_partition, FFT path only.
    [ ${#quick[@]} -gt 0 ] || for partition in 4096 8192 16384; do
      run_bench --only offline --taps 131072 --engine-option "fft_partition=$partition" \
        --json "$out/engine-offline-partition-$partition.json" \
        --skip direct:naive,direct:constant,direct:shared_tile,direct:cached_tile,direct:tuned,auto \
        --skip-reason "not run with fft_partition (the FFT path's partition only)"
      echo "cuda_engine_bench offline 131072 taps, partition $partition: exit status $?"
      parts+=("partition_$partition=$out/engine-offline-partition-$partition.json")
    done
    # One filter shared by all channels (taps fit in a constant bank up to 8192 taps).
    run_bench --only ceilings,offline --shared --taps 256,2048 --json "$out/engine-offline-shared.json" \
      --skip direct:naive,direct:constant,direct:shared_tile,direct:cached_tile \
      --skip-reason "not run with a shared filter (teaching variants: see the per-channel runs)"
    echo "cuda_engine_bench offline shared filter: exit status $?"
    parts+=("$out/engine-offline-shared.json")
    run_bench --only streaming,overlap,timeline --json "$out/engine-stream.json" "${quick[@]}"
    echo "cuda_engine_bench streaming/overlap/timeline: exit status $?"
    parts+=("$out/engine-stream.json")
    # The same blocks with the engine's zero-copy path off (always copy in, filter, copy out).
    echo "== streaming again with cuda_zero_copy_samples=0 (copy path)" | tee -a "$out/engine.log"
    run_bench --only streaming --engine-option cuda_zero_copy_samples=0 \
      --json "$out/engine-stream-copy.json" "${quick[@]}"
    echo "cuda_engine_bench streaming (copy path): exit status $?"
    parts+=("copy_path=$out/engine-stream-copy.json")
    python3 - "$out/engine.json" "${parts[@]}" <<'PY'
import json, sys
merged = {"offline": []}
for arg in sys.argv[2:]:
    prefix, _, path = arg.rpartition("=")
    try:
        with open(path) as f:
            part = json.load(f)
    except (OSError, ValueError) as e:
        merged.setdefault("missing_parts", []).append(f"{path}: {e}")
        continue
    for key, value in part.items():
        if prefix:
            if key not in ("info", "device"):
                merged[f"{key}_{prefix}"] = value
        elif key == "offline":
            merged["offline"] += value
        elif key not in merged:
            merged[key] = value
with open(sys.argv[1], "w") as f:
    json.dump(merged, f, indent=1)
print("merged", len(sys.argv) - 2, "parts into", sys.argv[1], "missing:", merged.get("missing_parts", "none"))
PY
    rm -f "$out"/engine-offline-*.json "$out"/engine-stream*.json
    [ -s "$out/engine.json" ] && engine_args=(--engine "$out/engine.json")
  else
    echo "no $bench: build it first (see the head of this script); running the peers only"
  fi
fi

echo "== peers and floors"
python3 bench/peers.py --out "$out/peers.json" "${engine_args[@]}" "${quick[@]}" 2>&1 | tee "$out/peers.log"
echo "peers.py exit status ${PIPESTATUS[0]}"
