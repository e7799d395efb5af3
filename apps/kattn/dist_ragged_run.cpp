#include "dist_ragged_run.hpp"

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <vector>

#include "dist_files.hpp"
#include "dist_io.hpp"
#include "dtype.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/ragged_layout.hpp"
#include "kattn/distributed/attention.hpp"
#include "run_check.hpp"

namespace kattn {
namespace cli {

std::vector<double> gather_packed_rows(MPI_Comm comm, const std::vector<double>& local,
                                       const std::vector<std::int64_t>& rows, std::int64_t total, std::int64_t width) {
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  const int n = static_cast<int>(rows.size());
  std::vector<int> counts(P), offsets(P);
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  int all_rows = 0;
  for (int r = 0; r < P; ++r) offsets[r] = all_rows, all_rows += counts[r];
  std::vector<std::int64_t> where(rank == 0 ? all_rows : 0);
  MPI_Gatherv(rows.data(), n, MPI_INT64_T, where.data(), counts.data(), offsets.data(), MPI_INT64_T, 0, comm);
  std::vector<int> value_counts(P), value_offsets(P);
  for (int r = 0; r < P; ++r) value_counts[r] = counts[r] * int(width), value_offsets[r] = offsets[r] * int(width);
  std::vector<double> values(rank == 0 ? std::size_t(all_rows) * width : 0);
  MPI_Gatherv(local.data(), n * int(width), MPI_DOUBLE, values.data(), value_counts.data(), value_offsets.data(),
              MPI_DOUBLE, 0, comm);
  if (rank != 0) return {};
  std::vector<double> out(std::size_t(total) * width);
  for (std::size_t i = 0; i < where.size(); ++i)
    std::copy(values.begin() + i * width, values.begin() + (i + 1) * width, out.begin() + where[i] * width);
  return out;
}

RaggedLayout<Kokkos::DefaultExecutionSpace::memory_space> RaggedShard::layout() const {
  return make_ragged_layout(index_view(q_local, "q_indptr"), index_view(kv_local, "kv_indptr"));
}

RaggedShard ragged_shard(MPI_Comm comm, const BatchInputs& in, const dist::DistOptions& d) {
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  RaggedShard sh;
  dist::collective_check(comm, [&] {
    sh.q_rows = dist::ragged_positions(in.q_indptr, rank, P, d, "--q-indptr");
    sh.kv_rows = dist::ragged_positions(in.kv_indptr, rank, P, d, "--kv-indptr");
    sh.q_local = dist::ragged_local_indptr(in.q_indptr, rank, P, d, "--q-indptr");
    sh.kv_local = dist::ragged_local_indptr(in.kv_indptr, rank, P, d, "--kv-indptr");
  });
  return sh;
}

namespace {

struct RaggedRun {
  std::vector<double> o, lse;  // this rank's rows
  SlowestRank slowest;
};

template <class T>
RaggedRun run_as(MPI_Comm comm, const BatchInputs& in, const BatchSource& src, const RaggedShard& sh,
                 const Options& opt, const dist::DistOptions& d) {
  const std::vector<std::int64_t>&q_rows = sh.q_rows, &kv_rows = sh.kv_rows;
  const std::int64_t nq = q_rows.size(), nk = kv_rows.size();
  const auto q = to_view<Tensor3<T>>(batch_rows(in, src, BatchArray::q, q_rows), "q", nq, in.Hq, in.D);
  const auto k = to_view<Tensor3<T>>(batch_rows(in, src, BatchArray::k, kv_rows), "k", nk, in.Hkv, in.D);
  const auto v = to_view<Tensor3<T>>(batch_rows(in, src, BatchArray::v, kv_rows), "v", nk, in.Hkv, in.D);
  Tensor3<T> o(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), nq, in.Hq, in.D);
  Tensor2<accumulate_t<T>> lse(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), nq, in.Hq);
  poison(o);
  poison(lse);
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  RaggedRun run;
  run.slowest = slowest_rank(comm, dist::attention(comm, space, q, kv::ragged(k, v, sh.layout()), o, lse, opt, d));
  run.o = from_view(o);
  run.lse = from_view(lse);
  return run;
}

}  // namespace

int run_ragged_ring(MPI_Comm comm, const BatchInputs& in, const BatchSource& src, const Options& opt,
                    const dist::DistOptions& d, const std::optional<std::string>& out_path,
                    const std::optional<std::string>& lse_path, bool check, const Console& console) {
  int P = 1;
  MPI_Comm_size(comm, &P);
  const RaggedShard sh = ragged_shard(comm, in, d);
  const RaggedRun run =
      with_storage(in.dtype, [&](auto t) { return run_as<decltype(t)>(comm, in, src, sh, opt, d); });
  if (out_path) write_packed_rows(comm, *out_path, in.dtype, {in.total_q(), in.Hq, in.D}, sh.q_rows, run.o);
  if (lse_path) write_packed_rows(comm, *lse_path, lse_dtype(in.dtype), {in.total_q(), in.Hq}, sh.q_rows, run.lse);
  const long long peak_rss = peak_rss_max(comm);  // before --check's rank-0 reference
  std::vector<double> o_all, lse_all;             // --check: every rank's outputs, on rank 0
  if (check) {
    o_all = gather_packed_rows(comm, run.o, sh.q_rows, in.total_q(), in.Hq * in.D);
    lse_all = gather_packed_rows(comm, run.lse, sh.q_rows, in.total_q(), in.Hq);
  }
  return on_rank0(comm, [&]() -> int {
    std::FILE* text = console.text();
    std::fprintf(text,
                 "kattn run: %s algo=flash dtype=%s ragged batch of %lld sequences, %lld queries, %lld keys, Hq=%lld "
                 "Hkv=%lld D=%lld%s\n",
                 dist_heading("ring", P, d).c_str(), dtype_name(in.dtype), (long long)in.batch(),
                 (long long)in.total_q(), (long long)in.kv_rows(), (long long)in.Hq, (long long)in.Hkv,
                 (long long)in.D, mask_summary(opt).c_str());
    Json j;
    j.add("algo", "flash");
    add_dist_fields(j, "ring", P, d);
    j.add("dtype", dtype_name(in.dtype)).add("layout", "ragged").add("batch", (long long)in.batch());
    j.add("shape", std::vector<long long>{in.batch(), in.total_q(), in.kv_rows(), in.Hq, in.Hkv, in.D});
    j.add("shape_is", "B,total_q,total_kv,Hq,Hkv,D").add("causal", opt.causal);
    report_dist_forward(text, j, batch_attention_flops(in, opt), P, run.slowest, peak_rss);
    int status = 0;
    if (check) {
      // The whole inputs, on rank 0 only and only for the check.
      BatchInputs whole = in;
      load_every_row(whole, src);
      status = check_outputs(host_params(whole, o_all, lse_all), opt, CheckSettings{true, 0}, in.dtype, console, j,
                             "run");
    }
    console.finish(j);
    return status;
  });
}

}  // namespace cli
}  // namespace kattn
