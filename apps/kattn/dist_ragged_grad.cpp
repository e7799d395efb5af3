#include "dist_ragged_grad.hpp"

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "dist_files.hpp"
#include "dist_io.hpp"
#include "dist_ragged_run.hpp"
#include "dtype.hpp"
#include "grad_check.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/distributed/attention.hpp"
#include "run_check.hpp"

namespace kattn {
namespace cli {
namespace {

struct RaggedGrads {
  std::vector<double> dq, dk, dv;                             // this rank's rows
  double forward_seconds = 0;                                 // slowest rank
  SlowestRank slowest;                                        // of the backward
  std::vector<double> dsinks;                                 // with --sinks (the same on every rank)
};

template <class T>
RaggedGrads grads_as(MPI_Comm comm, const BatchInputs& in, const BatchSource& src, const RaggedDout& dout,
                     const RaggedShard& sh, const Options& opt, const BackwardOptions& bopt,
                     const dist::DistOptions& d) {
  const std::vector<std::int64_t>&q_rows = sh.q_rows, &kv_rows = sh.kv_rows;
  const std::int64_t nq = q_rows.size(), nk = kv_rows.size();
  const auto q = to_view<Tensor3<T>>(batch_rows(in, src, BatchArray::q, q_rows), "q", nq, in.Hq, in.D);
  const auto k = to_view<Tensor3<T>>(batch_rows(in, src, BatchArray::k, kv_rows), "k", nk, in.Hkv, in.D);
  const auto v = to_view<Tensor3<T>>(batch_rows(in, src, BatchArray::v, kv_rows), "v", nk, in.Hkv, in.D);
  const auto dov = to_view<Tensor3<T>>(ragged_dout(dout, in, &q_rows), "do", nq, in.Hq, in.D);
  Tensor3<T> o("o", nq, in.Hq, in.D), dq("dq", nq, in.Hq, in.D), dk("dk", nk, in.Hkv, in.D), dv("dv", nk, in.Hkv, in.D);
  Tensor2<accumulate_t<T>> lse("lse", nq, in.Hq);
  poison(dq);
  poison(dk);
  poison(dv);
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  RaggedGrads g;
  const auto layout = sh.layout();
  const auto kvs = kv::ragged(k, v, layout);
  g.forward_seconds = max_over(comm, dist::attention(comm, space, q, kvs, o, lse, opt, d).seconds);
  MPI_Barrier(comm);
  const dist::DistStats s = dist::attention_backward(comm, space, q, kvs, o, lse, dov, dq, dk, dv, opt, bopt, d);
  g.slowest = slowest_rank(comm, s);
  g.dq = from_view(dq), g.dk = from_view(dk), g.dv = from_view(dv);
  g.dsinks = s.dsinks;
  return g;
}

}  // namespace

int grad_ragged_ring(MPI_Comm comm, const BatchInputs& in, const BatchSource& src, const RaggedDout& dout,
                     const Options& opt, const BackwardOptions& bopt, const dist::DistOptions& d,
                     const GradPaths& paths, bool check, bool json) {
  int P = 1;
  MPI_Comm_size(comm, &P);
  const RaggedShard sh = ragged_shard(comm, in, d);
  const RaggedGrads g =
      with_storage(in.dtype, [&](auto t) { return grads_as<decltype(t)>(comm, in, src, dout, sh, opt, bopt, d); });
  const std::vector<std::int64_t> q_shape{in.total_q(), in.Hq, in.D}, kv_shape{in.kv_rows(), in.Hkv, in.D};
  if (paths.dq) write_packed_rows(comm, *paths.dq, in.dtype, q_shape, sh.q_rows, g.dq);
  if (paths.dk) write_packed_rows(comm, *paths.dk, in.dtype, kv_shape, sh.kv_rows, g.dk);
  if (paths.dv) write_packed_rows(comm, *paths.dv, in.dtype, kv_shape, sh.kv_rows, g.dv);
  const long long peak_rss = peak_rss_max(comm);  // before --check's rank-0 reference
  std::vector<double> dq_all, dk_all, dv_all;     // --check: every rank's gradients, on rank 0
  if (check) {
    dq_all = gather_packed_rows(comm, g.dq, sh.q_rows, in.total_q(), in.Hq * in.D);
    dk_all = gather_packed_rows(comm, g.dk, sh.kv_rows, in.kv_rows(), in.Hkv * in.D);
    dv_all = gather_packed_rows(comm, g.dv, sh.kv_rows, in.kv_rows(), in.Hkv * in.D);
  }
  return on_rank0(comm, [&]() -> int {
    std::FILE* text = json ? stderr : stdout;  // --json: standard output holds the JSON alone
    const char* dtype = dtype_name(in.dtype);
    std::fprintf(text,
                 "kattn grad: %s dtype=%s ragged batch of %lld sequences, %lld queries, %lld keys, Hq=%lld Hkv=%lld "
                 "D=%lld%s\n",
                 dist_heading("ring", P, d).c_str(), dtype, (long long)in.batch(), (long long)in.total_q(),
                 (long long)in.kv_rows(), (long long)in.Hq, (long long)in.Hkv, (long long)in.D,
                 mask_summary(opt).c_str());
    Json j;
    j.add("algo", "flash");
    add_dist_fields(j, "ring", P, d);
    j.add("dtype", dtype).add("layout", "ragged").add("batch", (long long)in.batch());
    j.add("shape", std::vector<long long>{in.batch(), in.total_q(), in.kv_rows(), in.Hq, in.Hkv, in.D});
    j.add("shape_is", "B,total_q,total_kv,Hq,Hkv,D").add("causal", opt.causal);
    report_dist_backward(text, j, 2.5 * batch_attention_flops(in, opt), g.forward_seconds, g.slowest, peak_rss);
    if (!g.dsinks.empty()) j.add("dsinks", g.dsinks);
    int status = 0;
    if (check) {
      // The whole inputs, on rank 0 only and only for the check.
      BatchInputs whole = in;
      load_every_row(whole, src);
      const GradientSet tested{std::move(dq_all), std::move(dk_all), std::move(dv_all), g.dsinks, {}};
      status = gradient_verdict(compare_gradients(tested, ragged_textbook_backward(whole, ragged_dout(dout, whole), opt)),
                                in.dtype, text, j);
    }
    if (json) std::cout << j.str() << "\n";
    return status;
  });
}

}  // namespace cli
}  // namespace kattn
