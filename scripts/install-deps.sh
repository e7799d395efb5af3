#!/usr/bin/env bash
# Installs kattn's build dependencies from Debian 12's packages when any is missing.
#   scripts/install-deps.sh [fuzz] [ccache] [pip]   (fuzz: also clang and libFuzzer, for scripts/fuzz.sh;
#                                                   ccache: the compiler cache .ci/run builds through;
#                                                   pip: venv, for scripts/check-pip.sh)
set -euo pipefail

packages=(
  build-essential cmake
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev liblapack-dev libblas-dev  # Kokkos 3.4.1 (Serial)
  libopenmpi-dev openmpi-bin                                                        # MPI layer
  libgtest-dev libgmock-dev libbenchmark-dev                                        # tests and benchmarks
  python3-dev python3-pybind11 python3-numpy python3-pytest                         # the Python package
  python3-torch python3-mpi4py                                                      # its PyTorch and mpi4py parts
)
for extra in "$@"; do
  case $extra in
    fuzz) packages+=(clang libclang-rt-14-dev) ;;                                   # libFuzzer (scripts/fuzz.sh)
    ccache) packages+=(ccache) ;;                                                   # .ci/run's compiler cache
    pip) packages+=(python3-venv) ;;                                                # scripts/check-pip.sh
    *) echo "install-deps.sh: unknown extra '$extra' (expected fuzz, ccache or pip)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "kattn needs: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
