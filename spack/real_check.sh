#!/usr/bin/env bash
# The kattn recipe under a real spack, offline (for developers; CI runs the fast spack/check.sh).
# Everything Debian 12 has is an external (gcc, cmake, Open MPI, GoogleTest, python, ...); Kokkos
# comes from a local source mirror made from a Kokkos git repository (`git archive` of its tag,
# which gives the release tarball byte for byte, checked against the builtin recipe's sha256), and
# kattn from a local git repository holding this clone's HEAD as branch main (package_attributes).
#
#   SPACK_ROOT=<spack 1.1 checkout> SPACK_PACKAGES=<spack-packages checkout, e.g. releases/v2025.11>
#   KOKKOS_GIT=<kokkos git repository with tag 4.6.01> bash spack/real_check.sh [STEP...]
#
# Steps (all by default): audit (spack info, spack audit packages), spec (what the recipe allows and
# refuses, concretized), install (`spack install --test=root kattn +mpi ^kokkos@4.6.01+openmp`: the
# unit tests under ctest, then the smoke test), test (`spack test run kattn`), consumer
# (tests/consumer against the spack prefix only), python (`kattn +python`, built with pip through
# pyproject.toml, imported and called). WORK (default /var/tmp/kattn-spack) holds spack's
# configuration, store, stages and the mirror; SPACK_PYTHON a python with clingo (default: a venv
# made in WORK with `pip install clingo`, spack's concretizer; spack does not bootstrap it offline).
# The spack configuration of the user and the site is not read (SPACK_DISABLE_LOCAL_CONFIG).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(dirname "$here")
: "${SPACK_ROOT:?set SPACK_ROOT to a spack 1.1 checkout}"
: "${SPACK_PACKAGES:?set SPACK_PACKAGES to a spack-packages checkout (its repos/spack_repo/builtin)}"
: "${KOKKOS_GIT:?set KOKKOS_GIT to a kokkos git repository}"
work=${WORK:-/var/tmp/kattn-spack}
kokkos_version=4.6.01
jobs=${JOBS:-$(nproc)}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(audit spec install test consumer python)
mkdir -p "$work"
work=$(cd "$work" && pwd)
scope=$work/scope
mkdir -p "$scope" "$work/mirror/kokkos" "$work/ext"

# ---- spack's python, with clingo -----------------------------------------------------------
if [ -z "${SPACK_PYTHON:-}" ]; then
  if [ ! -x "$work/venv/bin/python" ]; then
    /usr/bin/python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install -q clingo
  fi
  SPACK_PYTHON=$work/venv/bin/python
fi
export SPACK_PYTHON SPACK_DISABLE_LOCAL_CONFIG=1 SPACK_USER_CACHE_PATH=$work/user-cache
spack() { "$SPACK_ROOT/bin/spack" -C "$scope" "$@"; }

# ---- the Kokkos mirror: the release tarball from its git tag, checked -----------------------
tarball=$work/mirror/kokkos/kokkos-$kokkos_version.tar.gz
git -C "$KOKKOS_GIT" archive --format=tar.gz --prefix="kokkos-$kokkos_version/" "$kokkos_version" > "$tarball"
want=$(sed -n "s/.*version(\"$kokkos_version\", sha256=\"\([0-9a-f]*\)\".*/\1/p" \
  "$SPACK_PACKAGES/repos/spack_repo/builtin/packages/kokkos/package.py")
got=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "real_check: kokkos-$kokkos_version.tar.gz from $KOKKOS_GIT has sha256 $got, the recipe wants $want" >&2
  exit 1
fi
mkdir -p "$work/mirror/_source-cache/archive/${want:0:2}"
ln -sf "$tarball" "$work/mirror/_source-cache/archive/${want:0:2}/$want.tar.gz"

# ---- kattn: this clone's HEAD as branch main of a local repository --------------------------
rm -rf "$work/kattn.git"
git init -q --bare "$work/kattn.git"
git -C "$src" push -q "$work/kattn.git" +HEAD:refs/heads/main
echo "real_check: kattn $(git -C "$src" rev-parse --short HEAD) as branch main of $work/kattn.git"

# ---- scikit-build-core, which Debian 12 lacks, for +python: an external prefix of its own, with
# the packaging it needs (its metadata code wants packaging.utils.InvalidName, which Debian's 23.0
# lacks; this prefix comes first on the build's path) ----
site=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("purelib", vars={"base": ""}).lstrip("/"))')
if [ ! -d "$work/ext/scikit-build-core/$site/scikit_build_core" ] || [ ! -d "$work/ext/scikit-build-core/$site/packaging" ]; then
  /usr/bin/python3 -m pip install -q --no-deps --upgrade --target "$work/ext/scikit-build-core/$site" \
    scikit-build-core pathspec 'packaging>=24'
fi
skbuild_version=$(/usr/bin/python3 -c "import sys; sys.path.insert(0, '$work/ext/scikit-build-core/$site')
import scikit_build_core; print(scikit_build_core.__version__)")

# ---- configuration ----------------------------------------------------------------------
cat > "$scope/config.yaml" <<EOF
config:
  install_tree:
    root: $work/opt
  build_stage: [$work/stage]
  test_stage: $work/test-stage
  source_cache: $work/source-cache
  misc_cache: $work/misc-cache
  build_jobs: $jobs
EOF
printf 'repos:\n  builtin: %s\n  kattn: %s\n' "$SPACK_PACKAGES/repos/spack_repo/builtin" "$here/spack_repo/kattn" \
  > "$scope/repos.yaml"
printf 'mirrors::\n  local: file://%s\n' "$work/mirror" > "$scope/mirrors.yaml"
printf 'bootstrap:\n  enable: false\n' > "$scope/bootstrap.yaml"
# external NAME VERSION [PREFIX]: a packages.yaml entry for what Debian installed.
external() { printf '  %s:\n    buildable: false\n    externals:\n    - spec: %s@%s\n      prefix: %s\n' "$1" "$1" "$2" "${3:-/usr}"; }
deb() { dpkg-query -W -f='${Version}' "$1" | sed 's/^[0-9]*://; s/[-+~].*//'; }
{
  cat <<EOF
packages:
  kattn:
    package_attributes:
      git: file://$work/kattn.git
  mpi:
    buildable: false
  gcc:
    buildable: false
    externals:
    - spec: gcc@$(gcc -dumpfullversion) languages:='c,c++,fortran'
      prefix: /usr
      extra_attributes:
        compilers:
          c: /usr/bin/gcc
          cxx: /usr/bin/g++
          fortran: /usr/bin/gfortran
EOF
  external cmake "$(deb cmake)"
  external gmake "$(deb make)"
  external ninja "$(deb ninja-build)"
  external pkgconf "$(deb pkgconf)"
  external openmpi "$(deb libopenmpi-dev)"
  external googletest "$(deb libgtest-dev)"
  external perl "$(deb perl)"
  external python "$(/usr/bin/python3 -c 'import platform; print(platform.python_version())')"
  external py-pip "$(deb python3-pip)"
  external py-numpy "$(deb python3-numpy)"
  external py-pybind11 "$(deb python3-pybind11)"
  external py-pytest "$(deb python3-pytest)"
  external py-mpi4py "$(deb python3-mpi4py)"
  external py-scikit-build-core "$skbuild_version" "$work/ext/scikit-build-core"
  external python-venv 1.0
} > "$scope/packages.yaml"

log=$work/logs
mkdir -p "$log"
# run NAME COMMAND...: one timed step, its output in $log/NAME.log.
run() {
  local name=$1 t0=$SECONDS
  shift
  echo "== $name: $*"
  if ! "$@" > "$log/$name.log" 2>&1; then
    tail -40 "$log/$name.log" >&2
    echo "real_check: FAIL: $name ($log/$name.log)" >&2
    exit 1
  fi
  echo "   ok, $((SECONDS - t0)) s ($log/$name.log)"
}
# refused NAME SPEC MESSAGE: `spack spec SPEC` fails with MESSAGE.
refused() {
  echo "== $1: spack spec $2 is refused"
  if spack spec "$2" > "$log/$1.log" 2>&1; then
    echo "real_check: FAIL: spack spec $2 concretized" >&2
    exit 1
  fi
  grep -q "$3" "$log/$1.log" || { cat "$log/$1.log" >&2; echo "real_check: FAIL: no '$3' in the refusal" >&2; exit 1; }
  echo "   ok: $3"
}

kattn_spec="kattn +mpi ^kokkos@$kokkos_version+openmp"
for step in "${steps[@]}"; do
  case $step in
    audit)
      run info spack info kattn
      run audit spack audit packages kattn
      ;;
    spec)
      run spec spack spec "$kattn_spec"
      # The GPU specs only concretize (nothing is built): CUDA 12.9, which Kokkos 4.6 takes.
      for arch in 90 90a 100 120; do
        run "spec-cuda$arch" spack spec "kattn +cuda cuda_arch=$arch ^kokkos@$kokkos_version ^cuda@12.9"
      done
      refused spec-cuda100-kokkos4.6.00 "kattn +cuda cuda_arch=100 ^kokkos@4.6.00 ^cuda@12.9" "needs a newer Kokkos"
      refused spec-cuda87 "kattn +cuda cuda_arch=87 ^kokkos@$kokkos_version ^cuda@12.9" "needs a newer Kokkos"
      refused spec-cuda70 "kattn +cuda cuda_arch=70 ^cuda@12.9" "sm_80 or newer"
      refused spec-cuda101 "kattn +cuda cuda_arch=101 ^cuda@12.9" "no architecture for cuda_arch=101"
      ;;
    install)
      run install spack install --test=root -j "$jobs" "$kattn_spec"
      summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log/install.log" | tail -1)
      echo "   ctest: $summary"
      ;;
    test)
      run test spack test run kattn
      ;;
    consumer)
      prefix=$(spack location -i "$kattn_spec")
      rm -rf "$work/consumer"
      run consumer-configure cmake -S "$src/tests/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_BUILD_TYPE=Release
      run consumer-build cmake --build "$work/consumer" -j "$jobs"
      run consumer-run "$work/consumer/consumer"
      ;;
    python)
      py_spec="kattn +python ~mpi ^kokkos@$kokkos_version+openmp"
      run python-install spack install -j "$jobs" "$py_spec"
      prefix=$(spack location -i "$py_spec")
      run python-import env -u PYTHONPATH "$SPACK_ROOT/bin/spack" -C "$scope" build-env "$py_spec" -- \
        /usr/bin/python3 -c "import sys, numpy as np
sys.path.insert(0, '$prefix/$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("platlib", vars={"platbase": ""}).lstrip("/"))')')
import kattn
q = np.random.default_rng(0).standard_normal((1, 5, 2, 8))
print(kattn.__file__, kattn.version(), kattn.attention(q, q, q).shape)"
      cat "$log/python-import.log"
      ;;
    *) echo "real_check: unknown step '$step'" >&2; exit 2 ;;
  esac
done
echo "real_check: all steps passed (${steps[*]}) in $((SECONDS / 60)) min"
