#!/usr/bin/env bash
# The Python package the way pip users get it: `pip install .` into a fresh virtual environment
# (Debian's python3, with the current PyTorch, NumPy 2, pytest and mpi4py from PyPI), then the whole
# pytest suite against the installed package (not the build tree), the MPI tests under mpiexec at 2
# ranks, and `pip wheel .` with what the wheel holds. First the two configure-time refusals: an
# interpreter without NumPy, and NumPy 2 with a pybind11 older than 2.12 (Debian's 2.10).
#   scripts/check-pip.sh [extra pip arguments, e.g. -C cmake.define.KATTN_KOKKOS_SOURCE=DIR]
# KATTN_PIP_DIR (default /var/cache/kattn-ci) holds the environment, pip's build directory, a
# wheelhouse and, as PIP_CACHE_DIR unless that is set, pip's cache: PyTorch's wheels (several GB
# with their CUDA libraries) are downloaded once and kept between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dir=${KATTN_PIP_DIR:-/var/cache/kattn-ci}
mkdir -p "$dir"
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$dir/pip} PIP_DISABLE_PIP_VERSION_CHECK=1
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
bash scripts/install-deps.sh pip
venv=$dir/venv-pip
build=$dir/pip-build
# step NAME: a heading with the seconds the previous steps took.
t0=$SECONDS
step() { echo "-- check-pip: $* [$((SECONDS - t0)) s]"; }

# refused PYTHON MESSAGE: configuring the package for PYTHON fails, saying MESSAGE.
refused() {
  local out=$dir/refused
  rm -rf "$out"
  if cmake -S . -B "$out" -DKATTN_ENABLE_PYTHON=ON -DKATTN_ENABLE_TESTS=OFF -DKATTN_ENABLE_CUDA=OFF \
       -DPython_EXECUTABLE="$1" > "$out.log" 2>&1; then
    echo "check-pip: configure for $1 passed; expected a refusal: $2" >&2
    exit 1
  fi
  tr -s '[:space:]' ' ' < "$out.log" | grep -q "$2" || { cat "$out.log" >&2; echo "check-pip: the refusal does not say '$2'" >&2; exit 1; }
  grep -A3 "CMake Error" "$out.log" | head -4
  rm -rf "$out" "$out.log"
}

step "a fresh virtual environment: PyTorch, NumPy, pytest, mpi4py (built for the system MPI)"
rm -rf "$venv" "$build"
/usr/bin/python3 -m venv "$venv"
py=$venv/bin/python
# PyTorch's wheels come through a local wheelhouse: pip downloads only what it lacks (the index
# may not let pip's HTTP cache keep them), then installs from it alone. mpi4py as its source,
# built once into the wheelhouse for the system MPI.
wheels=$dir/wheels
"$py" -m pip download -q -d "$wheels" pip torch numpy pytest
"$py" -m pip download -q -d "$wheels" --no-deps --no-binary mpi4py mpi4py
mpi4py=$(ls -t "$wheels"/mpi4py-*.tar.gz | head -1)
version=${mpi4py##*/mpi4py-}
ls "$wheels/mpi4py-${version%.tar.gz}"-*.whl > /dev/null 2>&1 || "$py" -m pip wheel -q --no-deps -w "$wheels" "$mpi4py"
"$py" -m pip install -q --no-index --find-links "$wheels" --upgrade pip   # -C needs pip 23.1 (Debian's venv has 23.0)
"$py" -m pip install -q --no-index --find-links "$wheels" torch numpy pytest mpi4py
"$py" -c 'import torch, numpy, mpi4py; print("torch", torch.__version__, "numpy", numpy.__version__, "mpi4py", mpi4py.__version__)'
# Wheels of versions no longer installed go.
"$py" - "$wheels" <<'PY'
import importlib.metadata as md, os, re, sys
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
keep = {(norm(d.metadata["Name"]), d.version) for d in md.distributions()}
for f in os.listdir(sys.argv[1]):
    m = re.match(r"(.+?)-(\d[^-]*?)(-|\.tar\.gz$|\.zip$)", f)
    if m and (norm(m.group(1)), m.group(2)) not in keep:
        os.remove(os.path.join(sys.argv[1], f))
PY

step "configure refuses NumPy 2 with pybind11 older than 2.12, and an interpreter without NumPy"
if [ -f /usr/lib/cmake/pybind11/pybind11Config.cmake ] && ! "$py" -c 'import pybind11' 2> /dev/null; then
  refused "$py" "needs pybind11 2.12 or newer"   # the environment has none: Debian's 2.10 is found
fi
rm -rf "$dir/venv-bare"
/usr/bin/python3 -m venv --without-pip "$dir/venv-bare"
refused "$dir/venv-bare/bin/python" "needs NumPy"
rm -rf "$dir/venv-bare"

step "pip install . (MPI layer on; the CUDA kernels are compiled by the CMake builds)"
"$py" -m pip install "$repo" -C build-dir="$build" -C cmake.define.KATTN_ENABLE_MPI=ON \
  -C cmake.define.KATTN_ENABLE_CUDA=OFF "$@"

step "pytest against the installed package"
(cd "$venv" && KATTN_EXPECT_INSTALLED=1 "$py" -m pytest -q -rs -p no:cacheprovider "$repo/python/tests") | tee "$dir/pytest.log"
# This environment has what every PyTorch, torch.compile and kattn.dist test needs: none may skip.
if grep -E "^SKIPPED.*(torch|PyTorch|custom_op|scaled_dot_product|mpi4py|MPI layer)" "$dir/pytest.log"; then
  echo "check-pip: the tests above skipped in an environment that has what they need" >&2
  exit 1
fi

step "the MPI tests at 2 ranks"
(cd "$venv" && mpiexec --oversubscribe -n 2 "$py" -m pytest -q -p no:cacheprovider \
  "$repo/python/tests/test_dist.py" "$repo/python/tests/test_dist16.py" "$repo/python/tests/test_dist_backward.py")

step "pip wheel . (pip's build directory reused)"
rm -rf "$dir/wheel"
"$py" -m pip wheel -q --no-deps -w "$dir/wheel" "$repo" -C build-dir="$build" \
  -C cmake.define.KATTN_ENABLE_MPI=ON -C cmake.define.KATTN_ENABLE_CUDA=OFF "$@"
"$py" -m zipfile -l "$dir"/wheel/kattn-*.whl
step "done"
