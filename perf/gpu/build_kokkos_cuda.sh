#!/usr/bin/env bash
# Builds Kokkos 4.x for CUDA (Serial + Cuda, sm_90 by default) and Kokkos Kernels (headers only,
# nothing instantiated) into PREFIX, on a machine with nvcc and no GPU, for perf/gpu/pack.sh.
# Sources are public releases fetched by hand (never committed here); about 5 minutes on 2 cores.
#
#   bash perf/gpu/build_kokkos_cuda.sh KOKKOS_SRC KERNELS_SRC PREFIX      (ARCH=HOPPER90 to change)
#
# Kokkos 4.6.x with CUDA 13: nvcc_wrapper's default sm_70 is gone from nvcc 13, and three runtime
# calls changed signature in CUDA 13 (cudaGraphAddDependencies gained edge data; cudaMemAdvise and
# cudaMemPrefetchAsync take a cudaMemLocation). The source copy in PREFIX/src gets the fixes below,
# guarded by CUDART_VERSION; later Kokkos releases carry them (the edits then find nothing to do).
set -euo pipefail
[ $# -eq 3 ] || { sed -n 2,12p "$0"; exit 2; }
KOKKOS_SRC=$(realpath "$1")
KERNELS_SRC=$(realpath "$2")
PREFIX=$(realpath -m "$3")
ARCH=${ARCH:-HOPPER90}
JOBS=${JOBS:-$(nproc)}
export PATH=/usr/local/cuda/bin:$PATH
GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)

mkdir -p "$PREFIX/src"
rm -rf "$PREFIX/src/kokkos"
cp -r "$KOKKOS_SRC" "$PREFIX/src/kokkos"
python3 - "$PREFIX/src/kokkos" <<'EOF'
import pathlib, sys
root = pathlib.Path(sys.argv[1])
wrapper = root / "bin/nvcc_wrapper"
w = wrapper.read_text()
w = w.replace('default_arch="sm_70"', 'default_arch="${NVCC_WRAPPER_DEFAULT_ARCH:-sm_90}"')
wrapper.write_text(w)
inst = root / "core/src/Cuda/Kokkos_Cuda_Instance.hpp"
s = inst.read_text()
edits = [
    ("    return cudaGraphAddDependencies(graph, from, to, numDependencies);",
     "#if CUDART_VERSION >= 13000\n    return cudaGraphAddDependencies(graph, from, to, nullptr, numDependencies);\n#else\n"
     "    return cudaGraphAddDependencies(graph, from, to, numDependencies);\n#endif"),
    ("    return cudaMemAdvise(devPtr, count, advice, device);",
     "#if CUDART_VERSION >= 13000\n    cudaMemLocation location{};\n"
     "    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;\n"
     "    location.id = device;\n    return cudaMemAdvise(devPtr, count, advice, location);\n#else\n"
     "    return cudaMemAdvise(devPtr, count, advice, device);\n#endif"),
    ("    return cudaMemPrefetchAsync(devPtr, count, dstDevice,\n                                get_input_stream(stream));",
     "#if CUDART_VERSION >= 13000\n    cudaMemLocation location{};\n"
     "    location.type = dstDevice == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;\n"
     "    location.id = dstDevice;\n"
     "    return cudaMemPrefetchAsync(devPtr, count, location, 0, get_input_stream(stream));\n#else\n"
     "    return cudaMemPrefetchAsync(devPtr, count, dstDevice,\n                                get_input_stream(stream));\n#endif"),
]
patched = "CUDART_VERSION >= 13000" in s  # a release that has the fixes, or a second run
for old, new in edits:
    if not patched and s.count(old) == 1:
        s = s.replace(old, new)
inst.write_text(s)
EOF

cmake -S "$PREFIX/src/kokkos" -B "$PREFIX/build-kokkos" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$PREFIX/src/kokkos/bin/nvcc_wrapper" -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_"$ARCH"=ON \
  -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON  # [issue 58] linkable into the Python extension module too
cmake --build "$PREFIX/build-kokkos" -j "$JOBS"
cmake --install "$PREFIX/build-kokkos"

KK_OFF=()
for f in ETI_ONLY ADD_DEFAULT_ETI ENABLE_TESTS ENABLE_EXAMPLES ENABLE_PERFTESTS ENABLE_BENCHMARKS ENABLE_DOCS \
         INST_DOUBLE INST_FLOAT INST_HALF INST_BHALF INST_COMPLEX_DOUBLE INST_COMPLEX_FLOAT INST_ORDINAL_INT \
         INST_ORDINAL_INT64_T INST_OFFSET_INT INST_OFFSET_SIZE_T INST_LAYOUTLEFT INST_LAYOUTRIGHT \
         INST_EXECSPACE_CUDA INST_EXECSPACE_SERIAL INST_MEMSPACE_CUDASPACE INST_MEMSPACE_CUDAUVMSPACE \
         INST_MEMSPACE_HOSTSPACE ENABLE_TPL_BLAS ENABLE_TPL_LAPACK ENABLE_TPL_CBLAS ENABLE_TPL_LAPACKE \
         ENABLE_TPL_MKL ENABLE_TPL_CUBLAS ENABLE_TPL_CUSPARSE ENABLE_TPL_CUSOLVER; do
  KK_OFF+=("-DKokkosKernels_$f=OFF")
done
cmake -S "$KERNELS_SRC" -B "$PREFIX/build-kernels" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$PREFIX/bin/nvcc_wrapper" -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" -DKokkos_ROOT="$PREFIX" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "${KK_OFF[@]}"
cmake --build "$PREFIX/build-kernels" -j "$JOBS"
cmake --install "$PREFIX/build-kernels"
echo "build_kokkos_cuda: Kokkos ($ARCH) and Kokkos Kernels in $PREFIX"
