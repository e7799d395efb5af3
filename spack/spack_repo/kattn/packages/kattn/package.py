# Spack recipe for kattn.
#
# Written for Package API v1.0 (see ../../repo.yaml) so that ONE file loads on spack 0.22+
# and on spack 1.x: "from spack.package import *" is all it imports, and spack 1.x adds the
# build-system classes (CMakePackage, CudaPackage, ROCmPackage) to v1.0 packages by itself.
import os
import re

from spack.package import *


def _kokkos_cuda_arch(arch):
    """Kokkos knows the plain compute capabilities only ("90", not "90a" or "100f"), so the
    arch-specific ("a") and family ("f") suffixes are dropped for the Kokkos builds."""
    return re.sub(r"[a-z]+$", "", arch)


def _arch_number(arch):
    return int(re.match(r"\d+", arch).group(0))


class Kattn(CMakePackage, CudaPackage, ROCmPackage):
    """Exact attention at scale: FlashAttention-style tiled attention and split-KV decode
    written with Kokkos and Kokkos Kernels, optional hand-written CUDA kernels for Hopper,
    and an optional MPI layer for very long sequences."""

    homepage = "https://github.com/kattn/kattn"
    git = "https://github.com/kattn/kattn.git"

    # Only a branch version for now. Spack treats "main" (like "develop" or "master") as an
    # "infinity" version: newer than any numbered release, fetched from git, never
    # checksummed. A numbered release must come with the sha256 of its tarball, e.g.
    #     url = "https://github.com/kattn/kattn/archive/refs/tags/v0.1.0.tar.gz"
    #     version("0.1.0", sha256="<sha256 of that tarball>")
    # A version("0.1.0") without a checksum would be rejected by `spack audit` and by
    # `spack install` (unless --no-checksum), so none is listed until a release exists.
    version("main", branch="main")

    variant("mpi", default=True, description="Build the MPI layer (distributed attention)")
    variant("openmp", default=True, description="Use the Kokkos OpenMP host backend")
    variant("tests", default=False, description="Build the unit tests (GoogleTest)")
    variant("benchmarks", default=False, description="Build the benchmarks (Google Benchmark)")

    # Kokkos (and therefore kattn) is built for exactly ONE device architecture, so the
    # multi-valued cuda_arch / amdgpu_target variants of CudaPackage / ROCmPackage are
    # redefined as single-valued, the same way the builtin kokkos recipe does it.
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

    # No depends_on("c"): spack 0.22 does not know "c" as a language (only "cxx"), so kattn's
    # CMake must stay C++-only: project(kattn LANGUAGES CXX) and find_package(MPI COMPONENTS CXX).
    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")
    # CMAKE_CUDA_ARCHITECTURES accepts arch-specific values such as "90a" from CMake 3.25 on.
    depends_on("cmake@3.25:", type="build", when="+cuda")

    depends_on("kokkos@3.4:")
    depends_on("kokkos-kernels@3.4:")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("mpi", when="+mpi")
    depends_on("googletest", type=("build", "test"), when="+tests")
    depends_on("benchmark", when="+benchmarks")

    # ---- CUDA ------------------------------------------------------------------------
    conflicts("+cuda", when="cuda_arch=none", msg="+cuda needs a cuda_arch, e.g. cuda_arch=90")
    conflicts("+cuda", when="+rocm", msg="kattn builds for CUDA or ROCm, not both")

    depends_on("kokkos+cuda", when="+cuda")
    depends_on("kokkos-kernels+cuda", when="+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        # Forward the architecture to Kokkos ONE value at a time (Kokkos accepts exactly
        # one cuda_arch), as the builtin cabana and arborx recipes do. This is done for the
        # unsupported values too, so that the conflict below is the only error shown.
        _kk = f"+cuda cuda_arch={_kokkos_cuda_arch(_arch)}"
        depends_on(f"kokkos{_kk}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"kokkos-kernels{_kk}", when=f"+cuda cuda_arch={_arch}")
        if _arch_number(_arch) < 80:
            conflicts(
                "+cuda",
                when=f"cuda_arch={_arch}",
                msg=f"kattn's hand-written CUDA kernels need sm_80 or newer (the Hopper paths "
                f"need sm_90a); cuda_arch={_arch} is not supported",
            )

    # kattn uses device lambdas. Kokkos 5 always enables them and no longer has the
    # cuda_lambda variant, so only ask for it from Kokkos 4 and older (as arborx does).
    requires("^kokkos+cuda_lambda", when="+cuda ^kokkos@:4")
    # kattn compiles its C++ with Kokkos' nvcc_wrapper (CMAKE_CXX_COMPILER below), like the
    # builtin kokkos-kernels and arborx recipes. Kokkos only provides it with
    # +wrapper, and a CUDA Kokkos built by GCC without it stops in its own cmake step
    # ("Kokkos requires +wrapper when using +cuda without %clang ..."), so ask for it here.
    requires(
        "^kokkos+wrapper",
        when="+cuda",
        msg="kattn+cuda builds with Kokkos' nvcc_wrapper and needs ^kokkos+wrapper",
    )

    # ---- ROCm (through the Kokkos HIP backend; the hand-written kernels are CUDA only) --
    conflicts("+rocm", when="amdgpu_target=none", msg="+rocm needs an amdgpu_target")
    for _target in ROCmPackage.amdgpu_targets:
        depends_on(
            f"kokkos+rocm amdgpu_target={_target}", when=f"+rocm amdgpu_target={_target}"
        )

    # Kokkos' own CMake checks that a CUDA-enabled Kokkos is used with nvcc_wrapper or
    # clang as the C++ compiler; the same holds for everything that builds against it.
    def _kokkos_cxx(self):
        kokkos = self.spec["kokkos"]
        # spack 1.x: a property of the kokkos package.
        cxx = getattr(kokkos.package, "kokkos_cxx", None)
        if cxx is None:
            # spack 0.2x: set on the spec by Kokkos.setup_dependent_package.
            cxx = getattr(kokkos, "kokkos_cxx", None)
        if cxx is None and kokkos.satisfies("+wrapper"):
            cxx = join_path(self.spec["kokkos-nvcc-wrapper"].prefix.bin, "nvcc_wrapper")
        return cxx

    def _hipcc(self):
        hip = self.spec["hip"]
        # Set on the spec by Hip.setup_dependent_package (spack 0.2x and 1.x).
        return getattr(hip, "hipcc", None) or join_path(hip.prefix.bin, "hipcc")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("KATTN_ENABLE_MPI", "mpi"),
            self.define_from_variant("KATTN_ENABLE_CUDA", "cuda"),
            self.define_from_variant("KATTN_ENABLE_TESTS", "tests"),
            self.define_from_variant("KATTN_ENABLE_BENCHMARKS", "benchmarks"),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
            # spack's compiler wrapper already adds the flags of the spec's target; kattn's
            # default -march=native would build for the build host instead.
            self.define("KATTN_NATIVE_ARCH", False),
        ]
        if spec.satisfies("+cuda"):
            # The arch asked for, "90a" included (Kokkos itself gets "90"): CMake's CUDA
            # compiler check uses it. kattn's kernels/cuda chooses its own -gencode per file
            # (sm_80 and sm_90 for the portable kernels, sm_90a for the Hopper ones).
            args.append(
                self.define("CMAKE_CUDA_ARCHITECTURES", spec.variants["cuda_arch"].value)
            )
            args.append(self.define("CMAKE_CUDA_COMPILER", spec["cuda"].prefix.bin.nvcc))
            # kernels/cuda treats warnings as errors by default (for kattn's CI); a user's
            # nvcc may warn where CI's does not, and that must not stop an install.
            args.append(self.define("KATTN_CUDA_WERROR", False))
            cxx = self._kokkos_cxx()
            if cxx:
                args.append(self.define("CMAKE_CXX_COMPILER", cxx))
        if spec.satisfies("+rocm"):
            args.append(self.define("CMAKE_CXX_COMPILER", self._hipcc()))
        return args

    # ---- tests ----------------------------------------------------------------------
    _smoke_args = ("run", "--random", "1,256,256,4,4,64", "--check")

    def _run_smoke(self):
        """Run one small random problem and compare it with the reference."""
        path = join_path(self.prefix.bin, "kattn")
        assert os.path.isfile(path), f"{path} was not installed"
        kattn = Executable(path)
        # A non-zero exit status raises ProcessError, which fails the test: `kattn run
        # --check` exits with 3 when its error against the float64 reference is too large.
        out = kattn(*self._smoke_args, output=str, error=str)
        assert "fail" not in out.lower(), f"'kattn {' '.join(self._smoke_args)}': {out}"
        assert "mismatch" not in out.lower(), f"'kattn {' '.join(self._smoke_args)}': {out}"
        return out

    def test_run(self):
        """kattn run --random 1,256,256,4,4,64 --check"""
        self._run_smoke()

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_install(self):
        """`spack install --test=root kattn` runs the smoke test right after install."""
        self._run_smoke()
