"""Offline checks of the kattn spack recipe (no spack needed): imports package.py against a
small stand-in for the parts of spack's package API it uses, then checks what spack's review
and a site install depend on. Run by check.sh:

    python3 check_recipe.py <spack_repo/kattn/packages/kattn/package.py> <kattn source root> [-v]

The stand-in records directives (version, variant, depends_on, conflicts, ...) and mimics
CMakePackage.define / define_from_variant as spack writes them ("-DNAME:BOOL=ON"); it does not
concretize. Exit status 1 on any failure.
"""

import importlib.util
import os
import re
import stat
import subprocess
import sys
import tempfile
import types

# CudaPackage.cuda_arch_values and ROCmPackage.amdgpu_targets of spack's builtin repository
# (2026); only iterated over, and checked against the conflicts.
CUDA_ARCH_VALUES = (
    "10 11 12 13 20 21 30 32 35 37 50 52 53 60 61 62 70 72 75 80 86 87 89 90 90a "
    "100 100a 100f 101 101a 101f 103 103a 103f 110 110a 110f 120 120a 120f 121 121a 121f"
).split()
AMDGPU_TARGETS = "gfx900 gfx906 gfx908 gfx90a gfx940 gfx942 gfx950 gfx1030 gfx1100".split()
# cuda_arch values no Kokkos release has an architecture for (the builtin kokkos recipe's
# spack_cuda_arch_map), and those only Kokkos 5.1 and newer have.
NO_KOKKOS_ARCH = ("101", "110")
KOKKOS_5_1_ONLY = ("103", "121")
# Blackwell: Kokkos 4.6.01 and newer (BLACKWELL100, BLACKWELL120).
KOKKOS_4_6_01 = ("100", "120")

failures = []
passed = []
verbose = "-v" in sys.argv


def check(ok, what):
    (passed if ok else failures).append(what)
    if verbose or not ok:
        print(f"check_recipe: {'ok' if ok else 'FAIL'}: {what}")


# ---- the stand-in for spack's package API ------------------------------------------------
directives = []  # (name, args, kwargs) in the order the class body calls them


def _directive(name):
    def record(*args, **kwargs):
        directives.append((name, args, kwargs))

    record.__name__ = name
    return record


def _decorator(name):
    def make(*args, **kwargs):
        def wrap(fn):
            fn.__dict__.setdefault("spack_decorators", []).append((name, args, kwargs))
            return fn

        return wrap

    return make


class ProcessError(Exception):
    pass


class Executable:
    def __init__(self, path):
        self.path = path

    def __call__(self, *args, output=None, error=None):
        run = subprocess.run([self.path, *args], capture_output=True, text=True)
        if run.returncode != 0:
            raise ProcessError(f"{self.path} exited with {run.returncode}")
        return run.stdout


def which(path, required=False):
    if os.access(path, os.X_OK):
        return Executable(path)
    if required:
        raise ProcessError(f"{path} not found")
    return None


class Prefix(str):
    """A path whose attributes are subpaths, as spack's Prefix: prefix.bin.kattn."""

    def __getattr__(self, name):
        return Prefix(os.path.join(self, name))


class FakeSpec:
    """Variants and dependencies only; satisfies() knows "+v", "~v" and "v=x" terms."""

    def __init__(self, variants, deps):
        self.variants = {k: types.SimpleNamespace(value=v) for k, v in variants.items()}
        self.deps = deps

    def satisfies(self, constraint):
        for term in constraint.split():
            if term[0] in "+~":
                if bool(self.variants[term[1:]].value) != (term[0] == "+"):
                    return False
            elif "=" in term:
                name, value = term.split("=", 1)
                if str(self.variants[name].value) != value:
                    return False
            else:
                raise ValueError(f"FakeSpec cannot evaluate {term!r}")
        return True

    def __getitem__(self, name):
        return self.deps[name]


def _define(name, value):
    if isinstance(value, bool):
        return f"-D{name}:BOOL={'ON' if value else 'OFF'}"
    return f"-D{name}:STRING={value}"


class PackageBase:
    run_tests = False

    def __init__(self, spec, prefix="/prefix/kattn"):
        self.spec = spec
        self.prefix = Prefix(prefix)

    def __getitem__(self, name):
        return self.spec[name]

    define = staticmethod(_define)

    def define_from_variant(self, name, variant):
        return _define(name, self.spec.variants[variant].value)


class CMakePackage(PackageBase):
    pass


class CudaPackage(PackageBase):
    cuda_arch_values = tuple(CUDA_ARCH_VALUES)


class ROCmPackage(PackageBase):
    amdgpu_targets = tuple(AMDGPU_TARGETS)


def install_stand_in():
    api = types.ModuleType("spack.package")
    directive_names = "version variant depends_on extends conflicts requires license maintainers"
    for name in directive_names.split():
        setattr(api, name, _directive(name))
    api.run_after = _decorator("run_after")
    api.on_package_attributes = _decorator("on_package_attributes")
    api.which, api.Executable, api.ProcessError = which, Executable, ProcessError
    api.join_path = os.path.join
    api.__all__ = [n for n in vars(api) if not n.startswith("_")]
    modules = {"spack": types.ModuleType("spack"), "spack.package": api}
    for name, cls in (("cmake", CMakePackage), ("cuda", CudaPackage), ("rocm", ROCmPackage)):
        mod = types.ModuleType(f"spack_repo.builtin.build_systems.{name}")
        setattr(mod, cls.__name__, cls)
        modules[mod.__name__] = mod
    for name in ("spack_repo", "spack_repo.builtin", "spack_repo.builtin.build_systems"):
        modules[name] = types.ModuleType(name)
    sys.modules.update(modules)


def load(path):
    spec = importlib.util.spec_from_file_location("kattn_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Kattn


# ---- the checks ----------------------------------------------------------------------------
def of(name):
    return [(a, k) for n, a, k in directives if n == name]


def variants():
    return {a[0]: k for a, k in of("variant")}


def check_identity(Kattn, root):
    check(bool(Kattn.__doc__ and Kattn.__doc__.strip()), "the package has a docstring")
    claimed = [a for a in ("homepage", "url", "git") if getattr(Kattn, a, None)]
    check(not claimed, f"no public home claimed (homepage, url, git unset; set: {claimed})")
    lic = [a[0] for a, _ in of("license")]
    with open(os.path.join(root, "LICENSE")) as f:
        spdx = re.search(r"SPDX-License-Identifier: ([^)\n]+)", f.read())
    check(
        lic == ["Apache-2.0 WITH LLVM-exception"] and spdx and spdx.group(1) == lic[0],
        f"license({lic}) is the one in LICENSE ({spdx and spdx.group(1)})",
    )
    names = [n for a, _ in of("maintainers") for n in a]
    if not names:
        print("check_recipe: note: no maintainers yet (spack's builtin repository needs one)")
    versions = of("version")
    check(
        all("sha256" in k or {"branch", "tag", "commit"} & set(k) for _, k in versions),
        "every version has a sha256 (release) or a git ref (fetched from a site's clone)",
    )
    check(("main",) in [a for a, _ in versions], 'version("main") exists for `spack develop`')


def check_variants():
    vs = variants()
    check("tests" not in vs, "no tests variant (spack's --test=root / self.run_tests instead)")
    check("benchmarks" not in vs, "no benchmarks variant (perf/ programs are not installed)")
    check("shared" in vs, "a shared variant")
    check(all(k.get("description") for k in vs.values()), "every variant has a description")


def conflict_msgs(arch):
    """Messages of the conflicts on +cuda or ^kokkos that cuda_arch=arch triggers."""
    msgs = []
    for a, k in of("conflicts"):
        when = k.get("when", "")
        if re.search(rf"(^| )cuda_arch={arch}( |$)", when):
            msgs.append((a[0], k.get("msg", "")))
    return msgs


def check_cuda_arch():
    for arch in CUDA_ARCH_VALUES:
        plain = re.sub(r"[a-z]+$", "", arch)
        msgs = conflict_msgs(arch)
        if plain in NO_KOKKOS_ARCH:
            check(
                any(c == "+cuda" and arch in m for c, m in msgs),
                f"cuda_arch={arch} refused with a message naming it",
            )
        elif plain in KOKKOS_5_1_ONLY:
            check(
                any(c.startswith("^kokkos@:5.0") and arch in m for c, m in msgs),
                f"cuda_arch={arch} refused with Kokkos older than 5.1",
            )
        elif plain in KOKKOS_4_6_01:
            check(
                [c for c, _ in msgs] == ["^kokkos@:4.6.00"] and arch in msgs[0][1],
                f"cuda_arch={arch} refused with Kokkos 4.6.00 and older only",
            )
        elif plain in ("80", "90"):
            check(not msgs, f"cuda_arch={arch} allowed")
    forwarded = {k.get("when"): a[0] for a, k in of("depends_on")}
    check(
        forwarded.get("+cuda cuda_arch=90a") == "kokkos cuda_arch=90",
        "cuda_arch=90a reaches Kokkos as cuda_arch=90",
    )


def package(Kattn, run_tests=False, **variants_set):
    values = {
        "mpi": True,
        "openmp": True,
        "shared": True,
        "kokkos_kernels": False,
        "cuda": False,
        "rocm": False,
        "python": False,
    }
    values.update(variants_set)
    nvcc_wrapper = "/kokkos-nvcc-wrapper/bin/nvcc_wrapper"
    deps = {
        "kokkos": types.SimpleNamespace(prefix=Prefix("/kokkos"), kokkos_cxx=nvcc_wrapper),
        "kokkos-kernels": types.SimpleNamespace(prefix=Prefix("/kokkos-kernels")),
        "cuda": types.SimpleNamespace(prefix=Prefix("/cuda")),
        "hip": types.SimpleNamespace(prefix=Prefix("/hip"), hipcc="/hip/bin/hipcc"),
        "python": types.SimpleNamespace(
            command=types.SimpleNamespace(path="/python/bin/python3"),
            platlib="lib/python3.11/site-packages",
        ),
    }
    pkg = Kattn(FakeSpec(values, deps))
    pkg.run_tests = run_tests
    pkg.stage = types.SimpleNamespace(path="/stage", source_path="/stage/kattn")
    return pkg


def cmake_args(Kattn, run_tests=False, **variants_set):
    return package(Kattn, run_tests, **variants_set).cmake_args()


class Recorder:
    """A stand-in python Executable: records each command line."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)


def check_pip_route(Kattn):
    """+python: after the CMake install, pip builds the package from pyproject.toml with the CMake
    build's options (except those pyproject.toml owns) into the python's platlib in the prefix."""
    hooks = [
        d for d in getattr(Kattn.install_python, "spack_decorators", []) if d[0] == "run_after"
    ]
    check(
        hooks == [("run_after", ("install",), {"when": "+python"})], "+python: pip after install"
    )
    pkg = package(Kattn, python=True)
    python = Recorder()
    pkg.spec.deps["python"].command = python
    pkg.install_python()
    call = python.calls[0] if len(python.calls) == 1 else ()
    check(call[:3] == ("-m", "pip", "install"), f"+python: python -m pip install ({call[:3]})")
    check(call[-1:] == ("/stage/kattn",), "+python: pip builds the staged source")
    for want in (
        "--no-build-isolation",
        "--no-index",
        "--target=/prefix/kattn/lib/python3.11/site-packages",
        "--config-settings=cmake.define.KATTN_ENABLE_MPI=ON",
        "--config-settings=cmake.define.Kokkos_ROOT=/kokkos",
        "--config-settings=cmake.define.KATTN_NATIVE_ARCH=OFF",
    ):
        check(want in call, f"+python: pip {want}")
    owned = [a for a in call if re.search(r"define\.(KATTN_ENABLE_PYTHON|BUILD_SHARED_LIBS)=", a)]
    check(not owned, f"+python: pyproject.toml's own options left to it ({owned})")


def check_cmake_args(Kattn, root):
    args = cmake_args(Kattn)
    for want in (
        "-DKATTN_ENABLE_MPI:BOOL=ON",
        "-DKATTN_ENABLE_CUDA:BOOL=OFF",
        "-DBUILD_SHARED_LIBS:BOOL=ON",
        "-DKATTN_ENABLE_KOKKOSKERNELS:BOOL=OFF",
        "-DKATTN_ENABLE_TESTS:BOOL=OFF",
        "-DKATTN_NATIVE_ARCH:BOOL=OFF",
        "-DKokkos_ROOT:STRING=/kokkos",
    ):
        check(want in args, f"default spec: {want}")
    check(not any("KokkosKernels_ROOT" in a for a in args), "default spec: no KokkosKernels_ROOT")
    args = cmake_args(Kattn, run_tests=True, shared=False, kokkos_kernels=True, mpi=False)
    for want in (
        "-DBUILD_SHARED_LIBS:BOOL=OFF",
        "-DKATTN_ENABLE_KOKKOSKERNELS:BOOL=ON",
        "-DKokkosKernels_ROOT:STRING=/kokkos-kernels",
        "-DKATTN_ENABLE_TESTS:BOOL=ON",
        "-DKATTN_ENABLE_MPI:BOOL=OFF",
    ):
        check(want in args, f"~shared +kokkos_kernels ~mpi, --test=root: {want}")
    args = cmake_args(Kattn, cuda=True, cuda_arch="90a")
    for want in (
        "-DCMAKE_CUDA_ARCHITECTURES:STRING=90a",
        "-DCMAKE_CXX_COMPILER:STRING=/kokkos-nvcc-wrapper/bin/nvcc_wrapper",
        "-DCMAKE_CUDA_COMPILER:STRING=/cuda/bin/nvcc",
    ):
        check(want in args, f"+cuda cuda_arch=90a: {want}")
    check("-DKATTN_ENABLE_PYTHON:BOOL=OFF" in cmake_args(Kattn), "CMake builds no Python package")
    check(
        ("python",) in [a for a, k in of("extends") if k.get("when") == "+python"],
        "+python extends python",
    )
    check_pip_route(Kattn)
    args = cmake_args(Kattn, rocm=True, amdgpu_target="gfx90a")
    check("-DCMAKE_CXX_COMPILER:STRING=/hip/bin/hipcc" in args, "+rocm: hipcc")

    # Every kattn option the recipe sets exists in kattn's CMake.
    sources = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
        sources += [os.path.join(dirpath, f) for f in files if f == "CMakeLists.txt"]
    text = "".join(open(p).read() for p in sources)
    names = {
        re.match(r"-D(\w+)", a).group(1) for a in cmake_args(Kattn, cuda=True, cuda_arch="90")
    }
    for name in sorted(n for n in names if n.startswith("KATTN_") or n == "BUILD_SHARED_LIBS"):
        check(
            re.search(rf"option\({name}\b", text) is not None, f"kattn's CMake has option {name}"
        )


def check_smoke_test(Kattn):
    hooks = [
        d for d in getattr(Kattn.check_install, "spack_decorators", []) if d[0] == "run_after"
    ]
    check(hooks == [("run_after", ("install",), {})], "check_install runs after install")
    check(callable(getattr(Kattn, "test_run", None)), "a stand-alone test (spack test run)")
    outcomes = {}
    for name, script in (
        ("passes", "echo 'max abs err 1e-7 ok'"),
        ("fails", "echo 'check FAILED'"),
        ("exit3", "exit 3"),
    ):
        with tempfile.TemporaryDirectory() as prefix:
            os.mkdir(os.path.join(prefix, "bin"))
            program = os.path.join(prefix, "bin", "kattn")
            with open(program, "w") as f:
                f.write(f"#!/bin/sh\n{script}\n")
            os.chmod(program, stat.S_IRWXU)
            pkg = Kattn(FakeSpec({}, {}), prefix=prefix)
            try:
                pkg.test_run()
                outcomes[name] = "passed"
            except (AssertionError, ProcessError):
                outcomes[name] = "failed"
    check(
        outcomes == {"passes": "passed", "fails": "failed", "exit3": "failed"},
        f"test_run passes on success, fails on FAIL output and on exit 3 ({outcomes})",
    )


def check_documented_specs(readme):
    """Each `spack install|spec|develop ... kattn ...` line of the README uses variants and
    values the recipe has."""
    vs = variants()
    values = {"cuda_arch": set(CUDA_ARCH_VALUES), "amdgpu_target": set(AMDGPU_TARGETS)}
    bad = []
    count = 0
    for line in open(readme):
        m = re.search(
            r"\$ spack (?:-e \S+ )?(?:install|spec|develop)\b.*?\bkattn(@\S+)?\s(.*)", line
        )
        if not m:
            continue
        count += 1
        for term in m.group(2).split("#")[0].split():
            if term.startswith("^"):
                break  # dependencies' variants are theirs
            if term[0] in "+~":
                ok = term[1:] in vs or term[1:] in ("cuda", "rocm")
            elif "=" in term and not term.startswith("-"):
                name, value = term.split("=", 1)
                ok = value in values.get(name, ())
            else:
                continue
            if not ok:
                bad.append(f"{term} in: {line.strip()}")
    check(
        count > 0 and not bad, f"the README's {count} spack command lines use real variants {bad}"
    )


def main():
    recipe, root = sys.argv[1], sys.argv[2]
    install_stand_in()
    Kattn = load(recipe)
    check_identity(Kattn, root)
    check_variants()
    check_cuda_arch()
    check_cmake_args(Kattn, root)
    check_smoke_test(Kattn)
    check_documented_specs(os.path.join(root, "spack", "README.md"))
    print(f"check_recipe: {len(passed)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
