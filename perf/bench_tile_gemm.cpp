// The tile products of the tiled kernels: kattn's register-blocked micro-kernel
// (detail::TeamTileGemm) against Kokkos Kernels' KokkosBatched::TeamGemm on the same scratch
// tiles. DESIGN.md: the hand-written loop stays only while it wins here.
//   S^T = K Q^T   (keys x rows x D)     O^T += V^T P^T  (D x rows x keys)
// kattn's three micro-tile shapes (tuning.hpp; they differ only with 16 vector registers): the
// plain R x J, the wide R x 3 vectors (the forward's and the key pass's S and dP), the tall
// 6 x J (the key pass's dK, dV, dQ). Every shape divides every M and N below.
#include <Kokkos_Core.hpp>
#include <KokkosBatched_Gemm_Decl.hpp>
#include <KokkosBatched_Gemm_Team_Impl.hpp>
#include <benchmark/benchmark.h>

#include "kattn/detail/tile_gemm.hpp"
#include "kattn/detail/tuning.hpp"
#include "machine.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Member = Kokkos::TeamPolicy<Space>::member_type;
template <class T>
using Scratch2 = Kokkos::View<T**, Kokkos::LayoutRight, Space::scratch_memory_space, Kokkos::MemoryUnmanaged>;

enum class Impl { kattn, kattn_wide, kattn_tall, kk_team_blocked, kk_team_unblocked };

// kattn's micro-tile shape for each of its three variants.
template <class T, Impl impl>
struct KattnShape {
  using Tn = kattn::detail::Tuning<Space, T>;
  static constexpr int rows = impl == Impl::kattn_tall ? Tn::tall_micro_rows : Tn::micro_rows;
  static constexpr int cols = impl == Impl::kattn_wide ? Tn::wide_micro_cols : Tn::micro_cols;
};

// Each team computes C (m x n) = A (m x k) B (k x n) `reps` times on its scratch tiles.
template <class T, Impl impl>
struct TileProducts {
  int m, n, k, reps;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    Scratch2<T> A(member.team_scratch(1), m, k), B(member.team_scratch(1), k, n), C(member.team_scratch(1), m, n);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, m * k), [&](int i) { A.data()[i] = T(1) / (1 + i % 7); });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, k * n), [&](int i) { B.data()[i] = T(1) / (1 + i % 5); });
    member.team_barrier();
    for (int r = 0; r < reps; ++r) {
      if (impl == Impl::kk_team_blocked) {
        KokkosBatched::TeamGemm<Member, KokkosBatched::Trans::NoTranspose, KokkosBatched::Trans::NoTranspose,
                                KokkosBatched::Algo::Gemm::Blocked>::invoke(member, T(1), A, B, T(0), C);
      } else if (impl == Impl::kk_team_unblocked) {
        KokkosBatched::TeamGemm<Member, KokkosBatched::Trans::NoTranspose, KokkosBatched::Trans::NoTranspose,
                                KokkosBatched::Algo::Gemm::Unblocked>::invoke(member, T(1), A, B, T(0), C);
      } else {
        using Shape = KattnShape<T, impl>;
        kattn::detail::TeamTileGemm<Shape::rows, Shape::cols>::invoke(member, m, n, k, A.data(), k, 1, B.data(), n,
                                                                      C.data(), n, static_cast<T*>(nullptr));
      }
      member.team_barrier();
    }
  }
};

template <class T, Impl impl>
void BM_TileGemm(benchmark::State& state) {
  const int m = int(state.range(0)), n = int(state.range(1)), k = int(state.range(2));
  const int teams = 64, reps = 20;
  const double peak = std::is_same<T, float>::value ? kattn::perf::fma_peak_gflops_float()
                                                    : kattn::perf::fma_peak_gflops_double();
  TileProducts<T, impl> f{m, n, k, reps};
  const std::size_t bytes = Scratch2<T>::shmem_size(m, k) + Scratch2<T>::shmem_size(k, n) + Scratch2<T>::shmem_size(m, n);
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) {
    Kokkos::parallel_for("bench_tile_gemm",
                         Kokkos::TeamPolicy<Space>(teams, 1).set_scratch_size(1, Kokkos::PerTeam(bytes)), f);
    Kokkos::fence();
  }
  const double flops = 2.0 * m * n * k * reps * teams;
  const double gflops = flops / timer.seconds(state.iterations()) / 1e9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["frac_peak"] = gflops / peak;
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({96, 96, 128})->Args({120, 96, 64})->Args({96, 96, 64})->Args({120, 96, 120});
  b->ArgNames({"M", "N", "K"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_TileGemm, float, Impl::kattn)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, float, Impl::kattn_wide)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, float, Impl::kattn_tall)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, float, Impl::kk_team_blocked)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, float, Impl::kk_team_unblocked)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, double, Impl::kattn)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, double, Impl::kattn_wide)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, double, Impl::kattn_tall)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, double, Impl::kk_team_blocked)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TileGemm, double, Impl::kk_team_unblocked)->Apply(shapes);

}  // namespace
