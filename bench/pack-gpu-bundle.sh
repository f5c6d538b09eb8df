#!/usr/bin/env bash
# Packs a CUDA build (built here, -DCMAKE_CUDA_ARCHITECTURES=90) for the GPU
# machine: the tapstream executable with its CUDA module, the CUDA benches and
# the cuda_* test executables, the shared libraries the GPU machine lacks, and
# the commit, as DEST.tar.gz (the carried tree is limited to 64 MiB).
#   usage: bench/pack-gpu-bundle.sh BUILD DEST [COMMIT]
set -euo pipefail
build=$1 dest=$2 commit=${3:-$(git rev-parse --short HEAD)}
rm -rf "$dest" && mkdir -p "$dest"
cp "$build/daemon/tapstream" "$build/daemon/libtapstream_cuda.so" "$dest/"
cp "$build"/bench/cuda_engine_bench "$build"/bench/cuda_matrix_bench "$dest/"
cp "$build"/bench/matrix_delay_bench "$dest/" 2>/dev/null || true
cp "$build"/tests/cuda_*_test "$dest/" 2>/dev/null || true
echo "$commit" >"$dest/COMMIT"
bundle=/work/shared/device/bundle-libs.sh
"$bundle" "$dest/lib" "$dest/tapstream" "$dest/libtapstream_cuda.so" "$dest"/cuda_*
strip --strip-debug "$dest"/cuda_* "$dest/tapstream" "$dest/libtapstream_cuda.so" 2>/dev/null || true
tar -czf "$dest.tar.gz" -C "$dest" . && rm -rf "$dest"
du -h "$dest.tar.gz"
