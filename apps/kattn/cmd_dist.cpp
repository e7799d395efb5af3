// kattn run --dist ring|ulysses|hybrid|decode: the `run` command over the ranks of MPI_COMM_WORLD. Every
// rank reads (or draws) only the positions the sharding gives it, runs its part and writes its
// rows of the outputs in place; --check gathers the outputs on rank 0 and compares them with the
// float64 reference there (on_rank0: a failure there ends every rank). In bf16/f16 the inputs are
// rounded to the type as the one-process run rounds them, o is written in it and lse in f32.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "collective_steps.hpp"
#include "dist_commands.hpp"
#include "dist_shard.hpp"
#include "dtype.hpp"
#include "kattn/distributed/attention.hpp"

namespace kattn {
namespace cli {
namespace {

struct DistRun {
  std::vector<double> o, lse;  // this rank's positions (decode: all of them, on rank 0 only)
  SlowestRank slowest;         // with the traffic model's bytes (dense inputs)
};

template <class T, class Shard>
DistRun run_as(MPI_Comm comm, const Shard& sh, dist::DistOptions d) {
  const auto q = sh.template input<T>(DenseArray::q);
  const auto k = sh.template input<T>(DenseArray::k), v = sh.template input<T>(DenseArray::v);
  std::remove_const_t<decltype(q)> o(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), q.layout());
  const auto lse = lse_of(q);
  poison(o);
  poison(lse);
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  if (d.scheme == dist::Scheme::sharded_kv) d.root = 0;  // rank 0 checks and writes
  const dist::DistStats stats = dist::attention(comm, space, q, sh.keys(k, v), o, lse, sh.opt, d);
  DistRun run;
  run.slowest = slowest_rank(comm, stats, sh.model_sent(d, dist::Pass::forward, int(sizeof(T))));
  if (sh.holds_outputs) {
    run.o = from_view(o);
    run.lse = from_view(lse);
  }
  return run;
}

}  // namespace

int run_distributed(Args& args, const std::string& mode) {
  std::optional<std::string> out_path, lse_path;
  Console console;
  const auto flags = [&](DistFlags& f) {
    KATTN_REQUIRE(mode_number(mode) >= 0, "--dist: expected ring, ulysses, hybrid, grid or decode, got '", mode, "'");
    const std::string algo = args.value("--algo").value_or("flash");
    KATTN_REQUIRE(algo == "flash", "--algo: --dist runs the tiled algorithm on every rank (flash), got '", algo, "'");
    out_path = args.value("--out");
    lse_path = args.value("--lse");
    f.outputs = {{"--out", out_path}, {"--lse", lse_path}};
    f.check = args.flag("--check");
    KATTN_REQUIRE(!args.has("--check-rows"), "--check-rows: --dist checks every row (--check)");
    console = read_console(args);
  };
  // This rank's part, its outputs written, and rank 0's report and --check.
  return dist_command(args, mode, "run", flags, [&](MPI_Comm comm, const auto& sh, const DistFlags& f) {
    const int P = ranks_in(comm);
    const DistRun run = with_storage(sh.dtype, [&](auto t) { return run_as<decltype(t)>(comm, sh, f.d); });
    if (out_path) sh.write(*out_path, Part::q, run.o);
    if (lse_path) sh.write(*lse_path, Part::lse, run.lse);
    const long long peak_rss = peak_rss_max(comm);  // before --check's rank-0 reference
    std::vector<double> o_all, lse_all;             // --check: every rank's outputs, on rank 0
    if (f.check) {
      o_all = sh.gather(Part::q, run.o);
      lse_all = sh.gather(Part::lse, run.lse);
    }
    return on_rank0(comm, [&]() -> int {
      std::FILE* text = console.text();
      Json j = dist_heading_json(text, "run", mode, P, f, sh);
      report_dist_forward(text, j, sh.flops, P, run.slowest, peak_rss);
      // The whole inputs, on rank 0 only and only for the check.
      const int status = f.check ? sh.check_run(o_all, lse_all, console, j) : 0;
      console.finish(j);
      return status;
    });
  });
}

}  // namespace cli
}  // namespace kattn
