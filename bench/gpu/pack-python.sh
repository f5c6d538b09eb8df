#!/usr/bin/env bash
# Packs what bench/gpu/python.sh needs on the GPU machine, built here (no GPU
# needed): BUILD, a CUDA build (-DCMAKE_CUDA_ARCHITECTURES=90 -DTAPSTREAM_BENCH=ON)
# with `tapstream tapstream_cuda cuda_matrix_engine_test` built, and PYBUILD, a
# build of the module for the GPU machine's CPython 3.12:
#   cmake -S . -B build-py312 -DTAPSTREAM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
#     -DTAPSTREAM_TESTS=OFF -DTAPSTREAM_BENCH=OFF -DCMAKE_BUILD_TYPE=Release \
#     "-DTAPSTREAM_PYTHON_INCLUDE_DIR=/work/py312/Include;/work/py312" \
#     -DTAPSTREAM_PYTHON_SOABI=cpython-312-x86_64-linux-gnu \
#     -DTAPSTREAM_PYBIND11_INCLUDE_DIR=/work/pybind11-2.13.6/include
#   cmake --build build-py312 -j2 --target tapstream_python
# (/work/py312: CPython 3.12.5's source with its ./configure run, for pyconfig.h).
# DEST then holds: tapstream, libtapstream_cuda.so, cuda_matrix_engine_test,
# python/tapstream/ (the package: __init__.py, _device_arrays.py, the module
# _tapstream.cpython-312-x86_64-linux-gnu.so and BUILD's libtapstream_cuda.so beside
# it), lib/ (the shared libraries these need that the GPU machine lacks), COMMIT.
#   usage: bench/gpu/pack-python.sh BUILD PYBUILD DEST
set -euo pipefail
build=$1 pybuild=$2 dest=$3
rm -rf "$dest" && mkdir -p "$dest/python"
cp "$build/daemon/tapstream" "$build/daemon/libtapstream_cuda.so" \
  "$build/tests/cuda_matrix_engine_test" "$dest/"
cp -r "$pybuild/python/tapstream" "$dest/python/"
rm -rf "$dest/python/tapstream/__pycache__"
cp "$build/daemon/libtapstream_cuda.so" "$dest/python/tapstream/"  # the same engine for both
ls "$dest/python/tapstream/"_tapstream.cpython-312-x86_64-linux-gnu.so >/dev/null
git rev-parse --short HEAD >"$dest/COMMIT"
/work/shared/device/bundle-libs.sh "$dest/lib" "$dest/tapstream" "$dest/libtapstream_cuda.so" \
  "$dest/cuda_matrix_engine_test" "$dest/python/tapstream/"*.so
strip --strip-debug "$dest/tapstream" "$dest/cuda_matrix_engine_test" "$dest"/*.so \
  "$dest/python/tapstream/"*.so 2>/dev/null || true
du -sh "$dest"
