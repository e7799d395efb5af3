#!/usr/bin/env bash
# Checks the kattn spack repository in this directory, offline. Exits non-zero on any problem.
#
#   1. layout: spack_repo/kattn/repo.yaml with "namespace: kattn" and "api: v2.x" (Package
#      API v2, spack 1.0 and newer), spack_repo/kattn/packages/kattn/package.py;
#   2. every package.py byte-compiles (python3 -m py_compile);
#   3. style with spack's settings for packages (line length 99): black --check, flake8
#      (extend-ignore E731,E203 and the star-import codes F403,F405), and ruff format/check
#      with the builtin repository's rules (ruff.toml) when ruff is installed. black and flake8
#      come from Debian (black, python3-flake8; run by Debian's /usr/bin/python3, which sees them
#      where another python3 earlier in PATH would not): when missing they are apt-get
#      installed if running as root with CI set, otherwise that step is skipped with a message;
#   4. check_recipe.py: the recipe imported against a stand-in for spack's package API
#      (license, no public home claimed, variants, cuda_arch conflicts, cmake_args for several
#      specs against kattn's CMake options, the smoke test on stand-in programs, and the spack
#      command lines of README.md);
#   5. only if a `spack` command is on PATH (or SPACK=/path/to/bin/spack is set):
#      `spack info kattn` and `spack audit packages kattn`, with this repository added and
#      `git` pointed at this clone (package_attributes, as README.md tells sites to) through a
#      temporary configuration scope (your spack configuration is not changed).
#
# Usage: spack/check.sh         (from anywhere)
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$here/spack_repo/kattn
status=0
fail() {
    echo "check.sh: FAIL: $*" >&2
    status=1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- 1. layout ------------------------------------------------------------------------
if [[ ! -f "$repo/repo.yaml" ]]; then
    fail "missing $repo/repo.yaml"
else
    grep -Eq '^[[:space:]]+namespace:[[:space:]]*["'\'']?kattn["'\'']?[[:space:]]*$' \
        "$repo/repo.yaml" || fail "repo.yaml must set 'namespace: kattn'"
    grep -Eq '^[[:space:]]+api:[[:space:]]*["'\'']?v2\.[0-9]+["'\'']?[[:space:]]*$' \
        "$repo/repo.yaml" || fail "repo.yaml must set 'api: v2.N' (Package API v2)"
fi
[[ -f "$repo/packages/kattn/package.py" ]] || fail "missing packages/kattn/package.py"

shopt -s nullglob
files=("$repo"/packages/*/package.py)
shopt -u nullglob
if [[ ${#files[@]} -eq 0 ]]; then
    fail "no packages/*/package.py found"
    exit 1
fi
rel=("${files[@]#"$here"/}")

# A fresh Debian 12 has no python3 at all: in CI (root, CI set) the Debian packages bring it,
# black and flake8 before anything needs them; elsewhere step 3 says what is missing.
# Debian's interpreter when there is one (a pyenv python3 may come first in PATH).
py() { if [[ -x /usr/bin/python3 ]]; then /usr/bin/python3 "$@"; else python3 "$@"; fi; }
has_python() { [[ -x /usr/bin/python3 ]] || command -v python3 >/dev/null 2>&1; }
has_module() { has_python && py -m "$1" --version >/dev/null 2>&1; }
if [[ "$(id -u)" == 0 && -n "${CI:-}" ]] && ! { has_module flake8 && has_module black; }; then
    echo "check.sh: installing python3-flake8 black (root, CI=$CI)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        python3-flake8 black >/dev/null; } ||
        fail "apt-get install python3-flake8 black failed"
fi

# ---- 2. byte-compile ------------------------------------------------------------------
if ! has_python; then
    fail "python3 not found"
    exit 1
fi
# Keep __pycache__ out of the tree.
if PYTHONPYCACHEPREFIX="$tmp/pycache" py -m py_compile "${files[@]}" "$here/check_recipe.py"; then
    echo "check.sh: py_compile: ok (${#files[@]} recipe(s), check_recipe.py)"
else
    fail "py_compile"
fi

# ---- 3. style -------------------------------------------------------------------------
cd "$here" || exit 1
if has_module black; then
    if py -m black --check --quiet --line-length 99 "${rel[@]}" check_recipe.py; then
        echo "check.sh: black: ok ($(py -m black --version | head -1))"
    else
        py -m black --diff --quiet --line-length 99 "${rel[@]}" check_recipe.py >&2
        fail "black would reformat (run: black --line-length 99 spack/...)"
    fi
else
    echo "check.sh: black not found; SKIPPING black (install Debian's black)"
fi
if has_module flake8; then
    # Spack's settings for package.py files: they must use `from spack.package import *`.
    if py -m flake8 --isolated --max-line-length=99 \
        --extend-ignore=E731,E203,F403,F405 "${rel[@]}" check_recipe.py; then
        echo "check.sh: flake8: ok"
    else
        fail "flake8"
    fi
else
    echo "check.sh: flake8 not found; SKIPPING flake8 (install python3-flake8)"
fi
if command -v ruff >/dev/null 2>&1; then
    if ruff format --config ruff.toml --check --quiet "${rel[@]}" check_recipe.py &&
        ruff check --config ruff.toml --no-fix --quiet "${rel[@]}" check_recipe.py; then
        echo "check.sh: ruff: ok ($(ruff --version))"
    else
        fail "ruff (spack's builtin repository rules, ruff.toml)"
    fi
else
    echo "check.sh: ruff not found; SKIPPING ruff (pip install ruff)"
fi

# ---- 4. the recipe against a stand-in for spack's package API --------------------------
if PYTHONPYCACHEPREFIX="$tmp/pycache" py check_recipe.py \
    "$repo/packages/kattn/package.py" "$(dirname "$here")"; then
    echo "check.sh: check_recipe.py: ok"
else
    fail "check_recipe.py"
fi

# ---- 5. optional: a real spack --------------------------------------------------------
spack_bin=${SPACK:-$(command -v spack || true)}
if [[ -n "$spack_bin" ]]; then
    mkdir -p "$tmp/scope"
    printf 'repos:\n  kattn: %s\n' "$repo" >"$tmp/scope/repos.yaml"
    printf 'packages:\n  kattn:\n    package_attributes:\n      git: %s\n' \
        "file://$(dirname "$here")" >"$tmp/scope/packages.yaml"
    sp=("$spack_bin" -C "$tmp/scope")
    echo "check.sh: using $("$spack_bin" --version 2>/dev/null) at $spack_bin"
    if "${sp[@]}" info kattn >"$tmp/info.txt" 2>&1; then
        echo "check.sh: spack info kattn: ok"
    else
        cat "$tmp/info.txt" >&2
        fail "spack info kattn"
    fi
    if "${sp[@]}" audit packages kattn >"$tmp/audit.txt" 2>&1 &&
        ! grep -Eq '[1-9][0-9]* issues? found|^[0-9]+\. ' "$tmp/audit.txt"; then
        echo "check.sh: spack audit packages kattn: ok"
    else
        cat "$tmp/audit.txt" >&2
        fail "spack audit packages kattn"
    fi
else
    echo "check.sh: no spack on PATH (set SPACK=/path/to/spack/bin/spack); skipping spack checks"
fi

if [[ $status -eq 0 ]]; then
    echo "check.sh: all checks passed"
fi
exit $status
