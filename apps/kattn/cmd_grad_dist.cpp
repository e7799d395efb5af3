// kattn grad --dist ring|ulysses|hybrid: gradients over the ranks of MPI_COMM_WORLD. Every rank reads
// (or draws) only its positions of q, k, v and dO; the scheme's forward makes o and the LSE, its
// backward the gradients, and every rank writes its rows of them in place. --check gathers them on
// rank 0 and compares them with the float64 textbook backward there. In bf16/f16 the inputs are
// rounded to the type, the gradients written in it, and --check takes the type's bound.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "batch_inputs.hpp"
#include "bias_tensor.hpp"
#include "dist_commands.hpp"
#include "dist_ragged_grad.hpp"
#include "dtype.hpp"
#include "grad_check.hpp"
#include "dist_files.hpp"
#include "dist_io.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "paths.hpp"
#include "run_check.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/reference_backward.hpp"
#include "kattn/score_bias.hpp"
#include "mpi_session.hpp"

namespace kattn {
namespace cli {
namespace {

struct DistGrads {
  std::vector<double> dq, dk, dv;  // this rank's positions
  dist::SequenceLayout q_layout, kv_layout;
  double forward_seconds = 0;  // slowest rank
  SlowestRank slowest;         // of the backward, with the traffic model's bytes
  std::vector<double> dsinks;  // with --sinks: their gradient (the same on every rank)
  std::vector<double> dbias;   // with --dbias: this rank's query rows of the bias's gradient
  std::vector<std::int64_t> bias_shape;  // the whole bias's
};

template <class T>
DistGrads run_as(MPI_Comm comm, const DenseInputs& in, const DenseSource& src, const BiasTensor& bias,
                 const Options& opt, const dist::DistOptions& d, BackwardOptions bopt, bool dbias_wanted) {
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  const dist::SequenceLayout ql = dist::layout_of(in.Nq, P, d), kl = dist::layout_of(in.Nk, P, d);
  const std::int64_t nq = ql.local_length(rank), nk = kl.local_length(rank);
  const auto rows = [&](DenseArray a, const dist::SequenceLayout& l) {
    return dense_rows(in, src, a, runs_of(l, rank));
  };
  Tensor4<double> dbias;  // the bias's rows, in float64 whatever the bias's type
  if (dbias_wanted) {
    const std::vector<std::int64_t> b = bias.shape();
    dbias = Tensor4<double>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dbias"), b[0], b[1], b[2], b[3]);
    poison(dbias);
    bopt.dbias = score_bias_gradient(dbias);
  }
  const auto q = to_view<Tensor4<T>>(rows(DenseArray::q, ql), "q", in.B, nq, in.Hq, in.D);
  const auto dout = to_view<Tensor4<T>>(rows(DenseArray::extra, ql), "do", in.B, nq, in.Hq, in.D);
  const auto k = to_view<Tensor4<T>>(rows(DenseArray::k, kl), "k", in.B, nk, in.Hkv, in.D);
  const auto v = to_view<Tensor4<T>>(rows(DenseArray::v, kl), "v", in.B, nk, in.Hkv, in.D);
  Tensor4<T> o("o", in.B, nq, in.Hq, in.D), dq("dq", in.B, nq, in.Hq, in.D);
  Tensor3<accumulate_t<T>> lse("lse", in.B, in.Hq, nq);
  Tensor4<T> dk("dk", in.B, nk, in.Hkv, in.D), dv("dv", in.B, nk, in.Hkv, in.D);
  poison(dq);
  poison(dk);
  poison(dv);
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  DistGrads g;
  const auto forward = dist::attention(comm, space, q, kv::dense(k, v), o, lse, opt, d);
  g.forward_seconds = max_over(comm, forward.seconds);
  MPI_Barrier(comm);
  const dist::DistStats s =
      dist::attention_backward(comm, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, bopt, d);
  g.slowest = slowest_rank(
      comm, s, double(dist::traffic(traffic_problem(in, sizeof(T)), opt, d, P, rank, dist::Pass::backward).sent));
  g.q_layout = ql;
  g.kv_layout = kl;
  g.dq = from_view(dq);
  g.dk = from_view(dk);
  g.dv = from_view(dv);
  g.dsinks = s.dsinks;
  if (dbias_wanted) {
    g.dbias = from_view(dbias);
    g.bias_shape = bias.shape();
    g.bias_shape[2] = in.Nq;
  }
  return g;
}

}  // namespace

int grad_distributed(Args& args, const std::string& mode) {
  MpiSession mpi;
  return mpi.run([&]() -> int {
    const MPI_Comm comm = MPI_COMM_WORLD;
    const int rank = mpi.rank(), P = mpi.size();
    // Every flag is read on every rank, then compared, before any other collective step: a flag
    // given on one rank only (an MPMD launch) fails on every rank alike instead of hanging.
    dist::DistOptions d;
    BackwardOptions bopt;
    Options opt;
    std::optional<std::string> dq_path, dk_path, dv_path, dbias_path;
    bool check = false, json = false;
    std::vector<std::string> input_args;  // the input flags, read by every rank (and rank 0's --check)
    std::optional<std::string> bias_file;
    std::optional<BatchInputs> batch;     // a ragged batch (--dist ring): its indices, every rank
    BatchSource batch_src;                // ... where each rank reads (or draws) its rows
    RaggedDout batch_dout;                // ... and those of its dO
    dist::collective_check(comm, [&] {
      KATTN_REQUIRE(shards_sequence(mode), "--dist: grad distributes the sequence (ring, ulysses or hybrid), got '",
                    mode, "'");
      read_grid(args, mode, P, d);
      if (args.flag("--zigzag")) d.sharding = dist::Sharding::zigzag;
      d.deterministic = args.flag("--deterministic");
      d.chunk = args.integer("--chunk", 1, std::int64_t(1) << 40).value_or(0);
      bopt.deterministic = d.deterministic;
      if (auto s = args.value("--dq-strategy")) bopt.dq = parse_dq_strategy(*s);
      dq_path = args.value("--dq"), dk_path = args.value("--dk"), dv_path = args.value("--dv");
      check = args.flag("--check");
      json = args.flag("--json");
      KATTN_REQUIRE(!args.value("--o") && !args.value("--lse"),
                    "--o/--lse: not used with --dist (the distributed forward computes o and the LSE)");
      bias_file = args.value("--bias");  // read by every rank, its rows (with_bias_rows)
      dbias_path = args.value("--dbias");
      KATTN_REQUIRE(!dbias_path || bias_file, "--dbias: the gradient of the bias given with --bias");
      opt = read_options(args);
      if (wants_batch_inputs(args)) {
        KATTN_REQUIRE(mode == "ring", "--dist ", mode, ": a ragged batch goes round the ring only (--dist ring)");
        KATTN_REQUIRE(!bias_file, "--bias: --dist ring takes a bias with dense inputs, not a ragged batch");
        const auto do_file = args.value("--do");
        const auto seed = args.peek("--seed");
        const bool files = args.has("--q"), dtype_given = args.has("--dtype");
        batch = read_batch_inputs(args, nullptr, &batch_src);
        batch_dout = ragged_dout_source(do_file, seed, files, dtype_given, *batch);
      }
      for (const char* f : {"--random", "--seed", "--dtype", "--layout", "--q", "--k", "--v", "--do"})
        if (auto value = args.value(f)) input_args.insert(input_args.end(), {f, *value});
      args.finish();
    });
    agree_on_command(comm, mode, opt, d, check,
                     {dist::Agreed::integer("--dq-strategy", "dq strategy", static_cast<int>(bopt.dq))});
    std::FILE* text = json ? stderr : stdout;  // --json: standard output holds the JSON alone
    dist::collective_check(comm, [&] {
      if (rank != 0) return;  // rank 0 writes
      if (dq_path) check_output_file("--dq", *dq_path);
      if (dk_path) check_output_file("--dk", *dk_path);
      if (dv_path) check_output_file("--dv", *dv_path);
      if (dbias_path) check_output_file("--dbias", *dbias_path);
    });
    if (batch)
      return grad_ragged_ring(comm, *batch, batch_src, batch_dout, opt, bopt, d, {dq_path, dk_path, dv_path}, check,
                              json);

    DenseSource src;
    const DenseInputs in = describe_on_every_rank(comm, "grad", input_args, "--do", src);
    dist::collective_check(comm, [&] {
      KATTN_REQUIRE(src.has_extra,
                    "--do: give DO.npy (the gradient of the loss with respect to o) with --q/--k/--v, or use --random");
    });
    BiasTensor bias;  // this rank's query rows of --bias
    const Options opt_rows = with_bias_rows(comm, "grad", with_bias_flag(input_args, bias_file), in,
                                            runs_of(dist::layout_of(in.Nq, P, d), rank), bias, opt);
    dist::collective_check(comm, [&] {
      KATTN_REQUIRE(!dbias_path || !bias.boolean(), "--dbias: a bool --bias (a mask) has no gradient");
    });
    const DistGrads g = with_storage(in.dtype, [&](auto t) {
      return run_as<decltype(t)>(comm, in, src, bias, opt_rows, d, bopt, dbias_path.has_value());
    });
    if (dq_path) write_dense_positions(comm, *dq_path, in, in.Hq, g.q_layout, g.dq);
    if (dk_path) write_dense_positions(comm, *dk_path, in, in.Hkv, g.kv_layout, g.dk);
    if (dv_path) write_dense_positions(comm, *dv_path, in, in.Hkv, g.kv_layout, g.dv);
    if (dbias_path) write_dbias_positions(comm, *dbias_path, g.bias_shape, g.q_layout, g.dbias);
    const long long peak_rss = peak_rss_max(comm);  // before --check's rank-0 reference
    std::vector<double> dq_all, dk_all, dv_all, dbias_all;  // --check: every rank's gradients, on rank 0
    if (check) {
      if (dbias_path)
        dbias_all = gather_positions(comm, g.dbias, g.bias_shape[0] * g.bias_shape[1], g.bias_shape[3], g.q_layout);
      dq_all = gather_positions(comm, g.dq, in.B, in.Hq * in.D, g.q_layout);
      dk_all = gather_positions(comm, g.dk, in.B, in.Hkv * in.D, g.kv_layout);
      dv_all = gather_positions(comm, g.dv, in.B, in.Hkv * in.D, g.kv_layout);
    }
    return on_rank0(comm, [&]() -> int {
      const char* dtype = dtype_name(in.dtype);
      std::fprintf(text, "kattn grad: %s dtype=%s B=%lld Nq=%lld Nk=%lld Hq=%lld Hkv=%lld D=%lld%s\n",
                   dist_heading(mode, P, d).c_str(), dtype, (long long)in.B, (long long)in.Nq, (long long)in.Nk,
                   (long long)in.Hq, (long long)in.Hkv, (long long)in.D, mask_summary(opt_rows).c_str());
      Json j;
      j.add("algo", "flash");
      add_dist_fields(j, mode, P, d);
      j.add("dtype", dtype).add("shape", in.shape()).add("causal", opt.causal);
      report_dist_backward(text, j, 2.5 * attention_flops(in, opt), g.forward_seconds, g.slowest, peak_rss);
      if (!g.dsinks.empty()) j.add("dsinks", g.dsinks);
      int status = 0;
      if (check) {
        // The whole inputs, on rank 0 only and only for the check.
        Args inputs("grad", with_bias_flag(input_args, bias_file));
        BiasTensor bias;
        bias.read(inputs);
        std::vector<double> dout;
        const DenseInputs full = read_dense_inputs(inputs, "--do", &dout, nullptr);
        const GradientSet tested{std::move(dq_all), std::move(dk_all), std::move(dv_all), g.dsinks,
                                 std::move(dbias_all)};
        Options with_bias = opt;
        if (bias.active()) with_bias.bias = bias.device();
        const GradientSet ref = dense_textbook_backward(full, dout, with_bias, nullptr, dbias_path ? &bias : nullptr);
        status = gradient_verdict(compare_gradients(tested, ref), in.dtype, text, j);
      }
      if (json) std::cout << j.str() << "\n";
      return status;
    });
  });
}

}  // namespace cli
}  // namespace kattn
