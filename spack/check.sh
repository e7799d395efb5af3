#!/usr/bin/env bash
# Checks the kattn spack repository in this directory. Exits non-zero on any problem.
#
#   1. layout: repo.yaml with "namespace: kattn" and no "api:" key (Package API v1.0, the
#      one layout that both spack 0.22+ and spack 1.x load), packages/kattn/package.py;
#   2. every package.py byte-compiles (python3 -m py_compile);
#   3. flake8 with spack's settings for packages (max-line-length 99, extend-ignore
#      E731,E203 and the star-import codes F403,F405). flake8 comes from Debian's
#      python3-flake8; when it is missing it is apt-get installed if running as root with
#      CI set, otherwise this step is skipped with a message;
#   4. only if a `spack` command is on PATH (or SPACK=/path/to/bin/spack is set):
#      `spack info kattn` and `spack audit packages kattn`, with this repository added
#      through a temporary configuration scope (your spack configuration is not changed).
#
# Usage: spack/check.sh         (from anywhere)
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
status=0
fail() {
    echo "check.sh: FAIL: $*" >&2
    status=1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- 1. layout ------------------------------------------------------------------------
if [[ ! -f "$here/repo.yaml" ]]; then
    fail "missing $here/repo.yaml"
else
    grep -Eq '^[[:space:]]+namespace:[[:space:]]*["'\'']?kattn["'\'']?[[:space:]]*$' \
        "$here/repo.yaml" || fail "repo.yaml must set 'namespace: kattn'"
    if grep -Eq '^[[:space:]]+api:' "$here/repo.yaml"; then
        fail "repo.yaml must not set 'api:' (spack 0.2x cannot load Package API v2 repos)"
    fi
fi
[[ -f "$here/packages/kattn/package.py" ]] || fail "missing packages/kattn/package.py"

shopt -s nullglob
files=("$here"/packages/*/package.py)
shopt -u nullglob
if [[ ${#files[@]} -eq 0 ]]; then
    fail "no packages/*/package.py found"
    exit 1
fi

# A fresh Debian 12 has no python3 at all: in CI (root, CI set) python3-flake8 brings it
# and flake8 before anything needs them; elsewhere step 3 says what is missing.
if [[ "$(id -u)" == 0 && -n "${CI:-}" ]] && ! { /usr/bin/python3 -m flake8 --version ||
    python3 -m flake8 --version; } >/dev/null 2>&1; then
    echo "check.sh: installing python3-flake8 (root, CI=$CI)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-flake8 >/dev/null; } ||
        fail "apt-get install python3-flake8 failed"
fi

# ---- 2. byte-compile ------------------------------------------------------------------
py=$(command -v python3 || true)
if [[ -z "$py" ]]; then
    fail "python3 not found"
else
    # Keep __pycache__ out of the tree.
    if PYTHONPYCACHEPREFIX="$tmp/pycache" "$py" -m py_compile "${files[@]}"; then
        echo "check.sh: py_compile: ok (${#files[@]} file(s))"
    else
        fail "py_compile"
    fi
fi

# ---- 3. flake8 ------------------------------------------------------------------------
find_flake8() {
    local cand
    for cand in python3 /usr/bin/python3; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -m flake8 --version >/dev/null 2>&1; then
            flake8_cmd=("$cand" -m flake8)
            return 0
        fi
    done
    if command -v flake8 >/dev/null 2>&1; then
        flake8_cmd=(flake8)
        return 0
    fi
    return 1
}

flake8_cmd=()
if ! find_flake8; then
    if [[ "$(id -u)" == 0 && -n "${CI:-}" ]]; then
        echo "check.sh: flake8 missing; installing python3-flake8 (root, CI=$CI)"
        export DEBIAN_FRONTEND=noninteractive
        if ! { apt-get update -qq && apt-get install -y -qq python3-flake8 >/dev/null; }; then
            fail "apt-get install python3-flake8 failed"
        fi
        find_flake8 || fail "flake8 still not found after installing python3-flake8"
    else
        echo "check.sh: flake8 not found; SKIPPING the flake8 step" \
            "(install python3-flake8, or run as root with CI set to install it)"
    fi
fi
if [[ ${#flake8_cmd[@]} -gt 0 ]]; then
    # Spack's own settings (.flake8 in spack): max-line-length 99, extend-ignore E731,E203,
    # and for package.py files F403,F405 (they must use `from spack.package import *`).
    if (cd "$here" && "${flake8_cmd[@]}" --isolated --max-line-length=99 \
        --extend-ignore=E731,E203,F403,F405 "${files[@]#"$here"/}"); then
        echo "check.sh: flake8: ok"
    else
        fail "flake8"
    fi
fi

# ---- 4. optional: a real spack --------------------------------------------------------
spack_bin=${SPACK:-$(command -v spack || true)}
if [[ -n "$spack_bin" ]]; then
    mkdir -p "$tmp/scope"
    printf 'repos:\n- %s\n' "$here" >"$tmp/scope/repos.yaml"
    sp=("$spack_bin" -C "$tmp/scope")
    echo "check.sh: using $("$spack_bin" --version 2>/dev/null) at $spack_bin"
    if "${sp[@]}" info kattn >"$tmp/info.txt" 2>&1; then
        echo "check.sh: spack info kattn: ok"
    else
        cat "$tmp/info.txt" >&2
        fail "spack info kattn"
    fi
    # spack 0.22 prints "N issues found" and may exit 0, so look at the text too.
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
