# Copyright kattn contributors. See the LICENSE file at the root of kattn.
#
# SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
import re

from spack_repo.builtin.build_systems.cmake import CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.build_systems.rocm import ROCmPackage

from spack.package import *


class Kattn(CMakePackage, CudaPackage, ROCmPackage):
    """Exact attention at scale: FlashAttention-style tiled attention and split-KV decode
    written with Kokkos, optional hand-written CUDA kernels for Hopper, and an optional MPI
    layer for very long sequences."""

    # kattn has no public repository yet, so no homepage, url or git here: a site installs
    # from a clone, with `spack develop` or with `git` set in packages.yaml
    # (package_attributes). Numbered versions with checksums come with the first release.
    # maintainers(...) takes the GitHub handles of kattn's maintainers once it has that home.

    license("Apache-2.0 WITH LLVM-exception")

    version("main", branch="main")

    variant("mpi", default=True, description="Build the MPI layer (distributed attention)")
    variant("openmp", default=True, description="Use the Kokkos OpenMP host backend")
    variant("shared", default=True, description="Build shared libraries")
    variant(
        "python",
        default=False,
        description="Build the Python package kattn with pip (pyproject.toml), as pip users do",
    )
    variant(
        "kokkos_kernels",
        default=False,
        description="Link Kokkos Kernels (kattn only reports its version)",
    )

    # Kokkos (and therefore kattn) is built for exactly ONE device architecture, so the
    # multi-valued cuda_arch / amdgpu_target variants of CudaPackage / ROCmPackage are
    # redefined as single-valued, as the builtin kokkos recipe does.
    variant(
        "cuda_arch",
        description="CUDA architecture (exactly one; forwarded to Kokkos)",
        values=("none",) + CudaPackage.cuda_arch_values,
        default="none",
        multi=False,
        sticky=True,
        when="+cuda",
    )
    variant(
        "amdgpu_target",
        description="AMD GPU architecture (exactly one; forwarded to Kokkos)",
        values=("none",) + ROCmPackage.amdgpu_targets,
        default="none",
        multi=False,
        sticky=True,
        when="+rocm",
    )

    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")
    # CMAKE_CUDA_ARCHITECTURES accepts arch-specific values such as "90a" from CMake 3.25 on.
    depends_on("cmake@3.25:", type="build", when="+cuda")

    depends_on("kokkos@3.4:")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos-kernels@3.4:", when="+kokkos_kernels")
    depends_on("mpi", when="+mpi")
    extends("python", when="+python")
    depends_on("python@3.8:", type=("build", "link", "run"), when="+python")
    depends_on("py-pip", type="build", when="+python")
    depends_on("py-scikit-build-core@0.10:", type="build", when="+python")
    depends_on("py-pybind11@2.6:", type="build", when="+python")
    # NumPy 2 reads its arrays through pybind11 2.12 and newer (kattn's CMake refuses older ones).
    depends_on("py-pybind11@2.12:", type="build", when="+python ^py-numpy@2:")
    depends_on("py-numpy", type=("build", "run"), when="+python")
    depends_on("py-mpi4py", type="run", when="+python+mpi")  # kattn.dist
    depends_on("googletest", type="test")

    conflicts(
        "+shared",
        when="^kokkos~shared~pic",
        msg="a shared kattn needs a shared or position-independent Kokkos (kokkos+shared or +pic)",
    )
    conflicts(
        "+python",
        when="^kokkos~shared~pic",
        msg="the Python extension module needs a shared or position-independent Kokkos",
    )

    # ---- CUDA ------------------------------------------------------------------------
    conflicts("+cuda", when="cuda_arch=none", msg="+cuda needs a cuda_arch, e.g. cuda_arch=90")
    conflicts("+cuda", when="+rocm", msg="kattn builds for CUDA or ROCm, not both")

    # The compute capabilities Kokkos has an architecture for, and the Kokkos versions too
    # old for them (the builtin kokkos recipe's spack_cuda_arch_map). Any other cuda_arch
    # concretizes and then stops inside Kokkos' build, so it is refused here.
    kokkos_cuda_archs = {
        "80": None,
        "86": None,
        "87": "@:4.6",
        "89": "@:4.0.00",
        "90": None,
        "100": "@:4.6.00",  # Blackwell from Kokkos 4.6.01 on
        "103": "@:5.0",
        "120": "@:4.6.00",
        "121": "@:5.0",
    }

    depends_on("kokkos+cuda", when="+cuda")
    depends_on("kokkos-kernels+cuda", when="+kokkos_kernels+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        # Kokkos knows plain compute capabilities only: "90a" and "100f" reach it as "90"
        # and "100". Forwarded one value at a time (Kokkos takes exactly one cuda_arch), as
        # the builtin arborx recipe does.
        _plain = re.sub(r"[a-z]+$", "", _arch)
        _when = f"+cuda cuda_arch={_arch}"
        depends_on(f"kokkos cuda_arch={_plain}", when=_when)
        depends_on(f"kokkos-kernels cuda_arch={_plain}", when=f"+kokkos_kernels {_when}")
        if int(_plain) < 80:
            conflicts(
                "+cuda",
                when=f"cuda_arch={_arch}",
                msg=f"kattn's hand-written CUDA kernels need sm_80 or newer (the Hopper paths "
                f"need sm_90a); cuda_arch={_arch} is not supported",
            )
        elif _plain not in kokkos_cuda_archs:
            conflicts(
                "+cuda",
                when=f"cuda_arch={_arch}",
                msg=f"Kokkos has no architecture for cuda_arch={_arch}; choose one of "
                + ", ".join(kokkos_cuda_archs),
            )
        elif kokkos_cuda_archs[_plain]:
            _old = kokkos_cuda_archs[_plain]
            conflicts(
                f"^kokkos{_old}",
                when=_when,
                msg=f"cuda_arch={_arch} needs a newer Kokkos (kokkos{_old} has no architecture "
                "for it)",
            )

    # kattn uses device lambdas. Kokkos 5 always enables them and no longer has the
    # cuda_lambda variant, so only ask for it from Kokkos 4 and older (as arborx does).
    requires("^kokkos+cuda_lambda", when="+cuda ^kokkos@:4")
    # kattn compiles its C++ with Kokkos' compiler (nvcc_wrapper), as the builtin
    # kokkos-kernels and arborx recipes do; a CUDA Kokkos built by GCC needs +wrapper.
    requires(
        "^kokkos+wrapper",
        when="+cuda",
        msg="kattn+cuda builds with Kokkos' nvcc_wrapper and needs ^kokkos+wrapper",
    )

    # ---- ROCm (through the Kokkos HIP backend; the hand-written kernels are CUDA only) --
    conflicts("+rocm", when="amdgpu_target=none", msg="+rocm needs an amdgpu_target")
    for _target in ROCmPackage.amdgpu_targets:
        depends_on(f"kokkos+rocm amdgpu_target={_target}", when=f"+rocm amdgpu_target={_target}")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("KATTN_ENABLE_MPI", "mpi"),
            self.define_from_variant("KATTN_ENABLE_CUDA", "cuda"),
            self.define_from_variant("KATTN_ENABLE_KOKKOSKERNELS", "kokkos_kernels"),
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            # +python: pip builds the package after the install (install_python), not CMake.
            self.define("KATTN_ENABLE_PYTHON", False),
            # The unit tests are built when spack runs them (--test=root, CMakePackage's
            # check); the benchmarks in perf/ are never installed.
            self.define("KATTN_ENABLE_TESTS", self.run_tests),
            self.define("KATTN_ENABLE_BENCHMARKS", False),
            self.define("Kokkos_ROOT", self["kokkos"].prefix),
            # spack's compiler wrapper already adds the flags of the spec's target; kattn's
            # default -march=native would build for the build host instead.
            self.define("KATTN_NATIVE_ARCH", False),
        ]
        if spec.satisfies("+kokkos_kernels"):
            args.append(self.define("KokkosKernels_ROOT", self["kokkos-kernels"].prefix))
        if spec.satisfies("+cuda"):
            # The arch asked for, "90a" included (Kokkos itself gets "90"): CMake's CUDA
            # compiler check uses it. kattn's kernels/cuda chooses its own -gencode per file
            # (sm_80 and sm_90 for the portable kernels, sm_90a for the Hopper ones).
            args.append(self.define("CMAKE_CUDA_ARCHITECTURES", spec.variants["cuda_arch"].value))
            args.append(self.define("CMAKE_CUDA_COMPILER", spec["cuda"].prefix.bin.nvcc))
            # kernels/cuda treats warnings as errors by default (for kattn's CI); another
            # nvcc may warn where CI's does not, and that must not stop an install.
            args.append(self.define("KATTN_CUDA_WERROR", False))
            args.append(self.define("CMAKE_CXX_COMPILER", self["kokkos"].kokkos_cxx))
        if spec.satisfies("+rocm"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["hip"].hipcc))
        return args

    # ---- the Python package ------------------------------------------------------------
    # Options of the CMake build that pyproject.toml sets itself: the extension module alone,
    # with libkattn linked into it.
    pip_owned_options = ("KATTN_ENABLE_PYTHON", "KATTN_ENABLE_TESTS", "BUILD_SHARED_LIBS")

    def pip_config_settings(self):
        """The CMake build's options as scikit-build-core's settings (cmake.define.NAME=VALUE)."""
        settings = [f"build-dir={join_path(self.stage.path, 'spack-build-python')}"]
        for arg in self.cmake_args():
            name, value = re.match(r"-D(\w+)(?::\w+)?=(.*)", arg).groups()
            if name not in self.pip_owned_options:
                settings.append(f"cmake.define.{name}={value}")
        return settings

    @run_after("install", when="+python")
    def install_python(self):
        """The Python package kattn as `pip install .` builds it (pyproject.toml,
        scikit-build-core) for the spec's python, with the options of the CMake build, into the
        prefix's platlib (where spack's extension activation and `spack load` look)."""
        python = self["python"].command
        target = join_path(self.prefix, self["python"].platlib)
        settings = [f"--config-settings={s}" for s in self.pip_config_settings()]
        pip_args = ["--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
        source = self.stage.source_path
        python("-m", "pip", "install", *pip_args, f"--target={target}", *settings, source)

    # ---- tests ----------------------------------------------------------------------
    smoke_args = ("run", "--random", "1,256,256,4,4,64", "--check")

    def run_smoke(self):
        """Solve one small random problem and compare it with the float64 reference: `kattn
        run --check` exits non-zero (which fails the test) when the error is too large."""
        kattn = which(self.prefix.bin.kattn, required=True)
        out = kattn(*self.smoke_args, output=str, error=str)
        assert "fail" not in out.lower(), f"kattn {' '.join(self.smoke_args)}: {out}"

    def test_run(self):
        """kattn run --random 1,256,256,4,4,64 --check"""
        self.run_smoke()

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_install(self):
        """`spack install --test=root` also runs the smoke test right after install."""
        self.run_smoke()
