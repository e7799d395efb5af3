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
#include <type_traits>
#include <vector>

#include "collective_steps.hpp"
#include "dist_commands.hpp"
#include "dist_shard.hpp"
#include "dtype.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/score_bias.hpp"

namespace kattn {
namespace cli {
namespace {

struct DistGrads {
  std::vector<double> dq, dk, dv;  // this rank's positions
  double forward_seconds = 0;      // slowest rank
  SlowestRank slowest;             // of the backward, with the traffic model's bytes (dense inputs)
  std::vector<double> dsinks;      // with --sinks: their gradient (the same on every rank)
  std::vector<double> dbias;       // with --dbias: this rank's query rows of the bias's gradient
};

template <class T, class Shard>
DistGrads grads_as(MPI_Comm comm, const Shard& sh, const dist::DistOptions& d, BackwardOptions bopt,
                   bool dbias_wanted) {
  const auto q = sh.template input<T>(DenseArray::q), dout = sh.template input<T>(DenseArray::extra);
  const auto k = sh.template input<T>(DenseArray::k), v = sh.template input<T>(DenseArray::v);
  using View = std::remove_const_t<decltype(q)>;
  View o("o", q.layout()), dq("dq", q.layout()), dk("dk", k.layout()), dv("dv", k.layout());
  const auto lse = lse_of(q);
  poison(dq);
  poison(dk);
  poison(dv);
  Tensor4<double> dbias;  // the bias's rows, in float64 whatever the bias's type
  if (dbias_wanted) {
    dbias = sh.bias.gradient_view();
    poison(dbias);
    bopt.dbias = score_bias_gradient(dbias);
  }
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  DistGrads g;
  const auto kvs = sh.keys(k, v);
  g.forward_seconds = max_over(comm, dist::attention(comm, space, q, kvs, o, lse, sh.opt, d).seconds);
  MPI_Barrier(comm);
  const dist::DistStats s = dist::attention_backward(comm, space, q, kvs, o, lse, dout, dq, dk, dv, sh.opt, bopt, d);
  g.slowest = slowest_rank(comm, s, sh.model_sent(d, dist::Pass::backward, int(sizeof(T))));
  g.dq = from_view(dq), g.dk = from_view(dk), g.dv = from_view(dv);
  g.dsinks = s.dsinks;
  if (dbias_wanted) g.dbias = from_view(dbias);
  return g;
}

}  // namespace

int grad_distributed(Args& args, const std::string& mode) {
  BackwardOptions bopt;
  std::optional<std::string> dq_path, dk_path, dv_path, dbias_path;
  bool json = false;
  const auto flags = [&](DistFlags& f) {
    KATTN_REQUIRE(shards_sequence(mode), "--dist: grad distributes the sequence (ring, ulysses or hybrid), got '",
                  mode, "'");
    if (auto s = args.value("--dq-strategy")) bopt.dq = parse_dq_strategy(*s);
    f.agreed = {dist::Agreed::integer("--dq-strategy", "dq strategy", static_cast<int>(bopt.dq))};
    dq_path = args.value("--dq"), dk_path = args.value("--dk"), dv_path = args.value("--dv");
    dbias_path = args.value("--dbias");
    KATTN_REQUIRE(!dbias_path || args.has("--bias"), "--dbias: the gradient of the bias given with --bias");
    f.outputs = {{"--dq", dq_path}, {"--dk", dk_path}, {"--dv", dv_path}, {"--dbias", dbias_path}};
    f.check = args.flag("--check");
    json = args.flag("--json");
    KATTN_REQUIRE(!args.value("--o") && !args.value("--lse"),
                  "--o/--lse: not used with --dist (the distributed forward computes o and the LSE)");
  };
  // This rank's part, its gradients written, and rank 0's report and --check.
  return dist_command(args, mode, "grad", flags, [&](MPI_Comm comm, const auto& sh, const DistFlags& f) {
    const int P = ranks_in(comm);
    bopt.deterministic = f.d.deterministic;
    dist::collective_check(comm, [&] {
      KATTN_REQUIRE(!dbias_path || !sh.bias.boolean(), "--dbias: a bool --bias (a mask) has no gradient");
    });
    const DistGrads g = with_storage(sh.dtype, [&](auto t) {
      return grads_as<decltype(t)>(comm, sh, f.d, bopt, dbias_path.has_value());
    });
    if (dq_path) sh.write(*dq_path, Part::q, g.dq);
    if (dk_path) sh.write(*dk_path, Part::kv, g.dk);
    if (dv_path) sh.write(*dv_path, Part::kv, g.dv);
    if (dbias_path) sh.write(*dbias_path, Part::dbias, g.dbias);
    const long long peak_rss = peak_rss_max(comm);          // before --check's rank-0 reference
    std::vector<double> dq_all, dk_all, dv_all, dbias_all;  // --check: every rank's gradients, on rank 0
    if (f.check) {
      dq_all = sh.gather(Part::q, g.dq);
      dk_all = sh.gather(Part::kv, g.dk);
      dv_all = sh.gather(Part::kv, g.dv);
      if (dbias_path) dbias_all = sh.gather(Part::dbias, g.dbias);
    }
    return on_rank0(comm, [&]() -> int {
      std::FILE* text = json ? stderr : stdout;  // --json: standard output holds the JSON alone
      Json j = dist_heading_json(text, "grad", mode, P, f, sh);
      report_dist_backward(text, j, 2.5 * sh.flops, g.forward_seconds, g.slowest, peak_rss);
      if (!g.dsinks.empty()) j.add("dsinks", g.dsinks);
      int status = 0;
      if (f.check) {
        // The whole inputs, on rank 0 only and only for the check.
        const GradientSet tested{std::move(dq_all), std::move(dk_all), std::move(dv_all), g.dsinks,
                                 std::move(dbias_all)};
        status = gradient_verdict(compare_gradients(tested, sh.textbook_backward(dbias_path.has_value())), sh.dtype,
                                  text, j);
      }
      if (json) std::cout << j.str() << "\n";
      return status;
    });
  });
}

}  // namespace cli
}  // namespace kattn
