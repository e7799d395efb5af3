// kattn run --dist ring|ulysses|hybrid|decode: the `run` command over the ranks of MPI_COMM_WORLD. Every
// rank reads (or draws) only the positions the sharding gives it, runs its part and writes its
// rows of the outputs in place; --check gathers the outputs on rank 0 and compares them with the
// float64 reference there (on_rank0: a failure there ends every rank). In bf16/f16 the inputs are
// rounded to the type as the one-process run rounds them, o is written in it and lse in f32.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "batch_inputs.hpp"
#include "bias_tensor.hpp"
#include "dist_commands.hpp"
#include "dist_ragged_run.hpp"
#include "dtype.hpp"
#include "dist_files.hpp"
#include "dist_io.hpp"
#include "inputs.hpp"
#include "console.hpp"
#include "json.hpp"
#include "paths.hpp"
#include "run_check.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "mpi_session.hpp"

namespace kattn {
namespace cli {
namespace {

struct DistRun {
  std::vector<double> o, lse;       // this rank's positions (decode: all of them, on rank 0 only)
  dist::SequenceLayout out_layout;  // the positions of o and lse each rank holds
  SlowestRank slowest;              // with the traffic model's bytes
};

template <class T>
DistRun run_as(MPI_Comm comm, const std::string& mode, const DenseInputs& in, const DenseSource& src,
               const Options& opt, const dist::DistOptions& d) {
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  const bool sharded = shards_sequence(mode);
  // decode: every rank takes all the queries and its contiguous part of the keys.
  const dist::SequenceLayout ql = sharded ? dist::layout_of(in.Nq, P, d) : dist::SequenceLayout(in.Nq, 1, d.sharding);
  const dist::SequenceLayout kl = dist::layout_of(in.Nk, P, d);
  const std::int64_t nq = sharded ? ql.local_length(rank) : in.Nq, nk = kl.local_length(rank);
  const auto qv = to_view<Tensor4<T>>(dense_rows(in, src, DenseArray::q, runs_of(ql, sharded ? rank : 0)), "q", in.B,
                                      nq, in.Hq, in.D);
  const auto kview =
      to_view<Tensor4<T>>(dense_rows(in, src, DenseArray::k, runs_of(kl, rank)), "k", in.B, nk, in.Hkv, in.D);
  const auto vv =
      to_view<Tensor4<T>>(dense_rows(in, src, DenseArray::v, runs_of(kl, rank)), "v", in.B, nk, in.Hkv, in.D);
  Tensor4<T> o(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), in.B, nq, in.Hq, in.D);
  Tensor3<accumulate_t<T>> lse(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), in.B, in.Hq, nq);
  poison(o);
  poison(lse);
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  DistRun run;
  dist::DistOptions dd = d;
  if (d.scheme == dist::Scheme::sharded_kv) dd.root = 0;  // rank 0 checks and writes
  const dist::DistStats stats = dist::attention(comm, space, qv, kv::dense(kview, vv), o, lse, opt, dd);
  const double model = double(dist::traffic(traffic_problem(in, sizeof(T)), opt, dd, P, rank, dist::Pass::forward).sent);
  run.slowest = slowest_rank(comm, stats, model);
  run.out_layout = ql;
  if (sharded || rank == 0) {
    run.o = from_view(o);
    run.lse = from_view(lse);
  }
  return run;
}

}  // namespace

int run_distributed(Args& args, const std::string& mode) {
  MpiSession mpi;
  return mpi.run([&]() -> int {
    const MPI_Comm comm = MPI_COMM_WORLD;
    const int rank = mpi.rank(), P = mpi.size();
    // Every flag is read on every rank, then compared, before any other collective step: a flag
    // given on one rank only (an MPMD launch) fails on every rank alike instead of hanging.
    dist::DistOptions d;
    Options opt;
    std::optional<std::string> out_path, lse_path;
    bool check = false;
    Console console;
    std::vector<std::string> input_args;  // the input flags, read by every rank (and rank 0's --check)
    std::optional<std::string> bias_file;
    std::optional<BatchInputs> batch;     // a ragged batch (--dist ring): its indices, every rank
    BatchSource batch_src;                // ... and where each rank reads (or draws) its rows
    dist::collective_check(comm, [&] {
      KATTN_REQUIRE(mode_number(mode) >= 0, "--dist: expected ring, ulysses, hybrid, grid or decode, got '", mode,
                    "'");
      read_grid(args, mode, P, d);
      if (args.flag("--zigzag")) d.sharding = dist::Sharding::zigzag;
      d.deterministic = args.flag("--deterministic");
      d.chunk = args.integer("--chunk", 1, INT64_MAX / 4).value_or(0);
      KATTN_REQUIRE(shards_sequence(mode) || d.sharding == dist::Sharding::contiguous,
                    "--zigzag: only for --dist ring, ulysses, hybrid or grid (decode shards the KV cache in rank "
                    "order)");
      const std::string algo = args.value("--algo").value_or("flash");
      KATTN_REQUIRE(algo == "flash", "--algo: --dist runs the tiled algorithm on every rank (flash), got '", algo, "'");
      out_path = args.value("--out");
      lse_path = args.value("--lse");
      check = args.flag("--check");
      KATTN_REQUIRE(!args.has("--check-rows"), "--check-rows: --dist checks every row (--check)");
      console = read_console(args);
      bias_file = args.value("--bias");  // read by every rank, its rows (with_bias_rows)
      opt = read_options(args);
      if (wants_batch_inputs(args)) {
        KATTN_REQUIRE(mode == "ring", "--dist ", mode, ": a ragged batch goes round the ring only (--dist ring)");
        KATTN_REQUIRE(!bias_file, "--bias: --dist ring takes a bias with dense inputs, not a ragged batch");
        batch = read_batch_inputs(args, nullptr, &batch_src);
      }
      for (const char* f : {"--random", "--seed", "--dtype", "--layout", "--q", "--k", "--v"})
        if (auto value = args.value(f)) input_args.insert(input_args.end(), {f, *value});
      args.finish();
    });
    agree_on_command(comm, mode, opt, d, check);
    dist::collective_check(comm, [&] {
      if (rank != 0) return;  // rank 0 writes
      if (out_path) check_output_file("--out", *out_path);
      if (lse_path) check_output_file("--lse", *lse_path);
    });
    if (batch) return run_ragged_ring(comm, *batch, batch_src, opt, d, out_path, lse_path, check, console);

    DenseSource src;
    const DenseInputs in = describe_on_every_rank(comm, "run", input_args, "", src);
    BiasTensor bias;  // this rank's query rows of --bias (decode: every rank all of them)
    const dist::SequenceLayout ql = shards_sequence(mode) ? dist::layout_of(in.Nq, P, d) : dist::SequenceLayout(in.Nq, 1, d.sharding);
    const Options opt_rows = with_bias_rows(comm, "run", with_bias_flag(input_args, bias_file), in,
                                            runs_of(ql, shards_sequence(mode) ? rank : 0), bias, opt);
    const DistRun run =
        with_storage(in.dtype, [&](auto t) { return run_as<decltype(t)>(comm, mode, in, src, opt_rows, d); });
    if (out_path) write_dense_positions(comm, *out_path, in, in.Hq, run.out_layout, run.o);
    if (lse_path) write_lse_positions(comm, *lse_path, in, in.Hq, run.out_layout, run.lse);
    const long long peak_rss = peak_rss_max(comm);  // before --check's rank-0 reference
    std::vector<double> o_all, lse_all;             // --check: every rank's outputs, on rank 0
    if (check && shards_sequence(mode)) {
      o_all = gather_positions(comm, run.o, in.B, in.Hq * in.D, run.out_layout);
      lse_all = gather_positions(comm, run.lse, in.B * in.Hq, 1, run.out_layout);
    } else if (check) {  // decode: rank 0 holds them all
      o_all = run.o;
      lse_all = run.lse;
    }
    return on_rank0(comm, [&]() -> int {
      std::FILE* text = console.text();
      const double flops = attention_flops(in, opt);
      const char* dtype = dtype_name(in.dtype);
      std::fprintf(text, "kattn run: %s algo=flash dtype=%s layout=%s B=%lld Nq=%lld Nk=%lld Hq=%lld Hkv=%lld D=%lld%s\n",
                   dist_heading(mode, P, d).c_str(), dtype, name(in.layout), (long long)in.B, (long long)in.Nq,
                   (long long)in.Nk, (long long)in.Hq, (long long)in.Hkv, (long long)in.D, mask_summary(opt_rows).c_str());
      Json j;
      j.add("algo", "flash");
      add_dist_fields(j, mode, P, d);
      j.add("dtype", dtype).add("dims", name(in.layout)).add("shape", in.shape());
      j.add("shape_is", "B,Nq,Nk,Hq,Hkv,D").add("causal", opt.causal);
      report_dist_forward(text, j, flops, P, run.slowest, peak_rss);
      int status = 0;
      if (check) {
        // The whole inputs, on rank 0 only and only for the check.
        Args inputs("run", with_bias_flag(input_args, bias_file));
        BiasTensor bias;
        bias.read(inputs);
        const DenseInputs whole = read_dense_inputs(inputs, "", nullptr, nullptr);
        status = check_outputs(host_params(whole, o_all, lse_all), bias.on_host(opt), CheckSettings{true, 0}, in.dtype,
                               console, j, "run");
      }
      console.finish(j);
      return status;
    });
  });
}

}  // namespace cli
}  // namespace kattn
