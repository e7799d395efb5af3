// kattn run --dist and kattn grad --dist: the commands over the ranks of MPI_COMM_WORLD
// (dist_pipeline.hpp). Every rank reads (or draws) only the positions the sharding gives it, runs
// its part and writes its rows of the outputs in place; --check gathers them on rank 0 and compares
// them with the float64 reference there (run) or the float64 textbook backward (grad). In bf16/f16
// the inputs are rounded to the type as the one-process commands round them, o and the gradients
// written in it, lse in f32.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dist_commands.hpp"
#include "dist_pipeline.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/score_bias.hpp"

namespace kattn {
namespace cli {
namespace {

// The lse of queries q: [B, Hq, n] for dense [B, n, Hq, D], [n, Hq] for packed rows [n, Hq, D].
template <class T>
Tensor3<accumulate_t<T>> lse_of(const Tensor4<T>& q) {
  return Tensor3<accumulate_t<T>>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), q.extent(0), q.extent(2),
                                  q.extent(1));
}
template <class T>
Tensor2<accumulate_t<T>> lse_of(const Tensor3<T>& q) {
  return Tensor2<accumulate_t<T>>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), q.extent(0), q.extent(1));
}

// run's call: o and lse (decode: on rank 0 only, which checks and writes them).
template <class T, class Shard>
DistResult run_as(MPI_Comm comm, const Shard& sh, dist::DistOptions d) {
  const auto q = sh.template input<T>(DenseArray::q);
  const auto k = sh.template input<T>(DenseArray::k), v = sh.template input<T>(DenseArray::v);
  std::remove_const_t<decltype(q)> o(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), q.layout());
  const auto lse = lse_of(q);
  poison(o);
  poison(lse);
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  if (d.scheme == dist::Scheme::sharded_kv) d.root = 0;
  const dist::DistStats stats = dist::attention(comm, space, q, sh.keys(k, v), o, lse, sh.opt, d);
  DistResult run;
  run.slowest = slowest_rank(comm, stats, sh.model_sent(d, dist::Pass::forward, int(sizeof(T))));
  run.values = {{}, {}};
  if (sh.holds_outputs) run.values = {from_view(o), from_view(lse)};
  return run;
}

// grad's call: the scheme's forward makes o and the LSE, its backward dq, dk, dv (and dbias when
// wanted: this rank's slice of it, in float64 whatever the bias's type).
template <class T, class Shard>
DistResult grads_as(MPI_Comm comm, const Shard& sh, const dist::DistOptions& d, BackwardOptions bopt,
                    bool dbias_wanted) {
  const auto q = sh.template input<T>(DenseArray::q), dout = sh.template input<T>(DenseArray::extra);
  const auto k = sh.template input<T>(DenseArray::k), v = sh.template input<T>(DenseArray::v);
  using View = std::remove_const_t<decltype(q)>;
  View o("o", q.layout()), dq("dq", q.layout()), dk("dk", k.layout()), dv("dv", k.layout());
  const auto lse = lse_of(q);
  poison(dq);
  poison(dk);
  poison(dv);
  Tensor4<double> dbias;
  if (dbias_wanted) {
    dbias = sh.bias.gradient_view();
    poison(dbias);
    bopt.dbias = score_bias_gradient(dbias);
  }
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  MPI_Barrier(comm);
  DistResult g;
  const auto kvs = sh.keys(k, v);
  g.forward_seconds = max_over(comm, dist::attention(comm, space, q, kvs, o, lse, sh.opt, d).seconds);
  MPI_Barrier(comm);
  const dist::DistStats s = dist::attention_backward(comm, space, q, kvs, o, lse, dout, dq, dk, dv, sh.opt, bopt, d);
  g.slowest = slowest_rank(comm, s, sh.model_sent(d, dist::Pass::backward, int(sizeof(T))));
  g.values = {from_view(dq), from_view(dk), from_view(dv), dbias_wanted ? from_view(dbias) : std::vector<double>()};
  g.dsinks = s.dsinks;
  return g;
}

}  // namespace

int run_distributed(Args& args, const std::string& mode) {
  Console console;
  const auto flags = [&](DistFlags& f) {
    KATTN_REQUIRE(mode_number(mode) >= 0, "--dist: expected ring, ulysses, hybrid, grid or decode, got '", mode, "'");
    const std::string algo = args.value("--algo").value_or("flash");
    KATTN_REQUIRE(algo == "flash", "--algo: --dist runs the tiled algorithm on every rank (flash), got '", algo, "'");
    f.outputs = {{"--out", args.value("--out"), Part::q}, {"--lse", args.value("--lse"), Part::lse}};
    f.check = args.flag("--check");
    KATTN_REQUIRE(!args.has("--check-rows"), "--check-rows: --dist checks every row (--check)");
    console = read_console(args);
  };
  const auto call = [](auto t, MPI_Comm comm, const auto& sh, const DistFlags& f) {
    return run_as<decltype(t)>(comm, sh, f.d);
  };
  const auto report = [](const auto& sh, const DistResult& r, long long peak_rss, std::FILE* text, Json& j) {
    report_dist_forward(text, j, sh.flops, ranks_in(MPI_COMM_WORLD), r.slowest, peak_rss);
  };
  // The whole inputs, on rank 0 only and only for the check.
  const auto check = [&](const auto& sh, const DistResult& r, std::FILE*, Json& j) {
    return sh.check_run(r.values[0], r.values[1], console, j);
  };
  return dist_pipeline(args, mode, "run", console, flags, call, report, check);
}

int grad_distributed(Args& args, const std::string& mode) {
  BackwardOptions bopt;
  bool dbias_wanted = false;
  Console console;  // --json alone: standard output holds the JSON
  const auto flags = [&](DistFlags& f) {
    KATTN_REQUIRE(shards_sequence(mode), "--dist: grad distributes the sequence (ring, ulysses, hybrid or grid), got '", mode,
                  "'");
    if (auto s = args.value("--dq-strategy")) bopt.dq = parse_dq_strategy(*s);
    f.agreed = {dist::Agreed::integer("--dq-strategy", "dq strategy", static_cast<int>(bopt.dq))};
    f.outputs = {{"--dq", args.value("--dq"), Part::q},
                 {"--dk", args.value("--dk"), Part::kv},
                 {"--dv", args.value("--dv"), Part::kv},
                 {"--dbias", args.value("--dbias"), Part::dbias}};
    dbias_wanted = f.outputs[3].path.has_value();
    KATTN_REQUIRE(!dbias_wanted || args.has("--bias"), "--dbias: the gradient of the bias given with --bias");
    f.check = args.flag("--check");
    console.json = args.flag("--json");
    KATTN_REQUIRE(!args.value("--o") && !args.value("--lse"),
                  "--o/--lse: not used with --dist (the distributed forward computes o and the LSE)");
  };
  const auto call = [&](auto t, MPI_Comm comm, const auto& sh, const DistFlags& f) {
    dist::collective_check(comm, [&] {
      KATTN_REQUIRE(!dbias_wanted || !sh.bias.boolean(), "--dbias: a bool --bias (a mask) has no gradient");
    });
    bopt.deterministic = f.d.deterministic;
    return grads_as<decltype(t)>(comm, sh, f.d, bopt, dbias_wanted);
  };
  const auto report = [](const auto& sh, const DistResult& r, long long peak_rss, std::FILE* text, Json& j) {
    report_dist_backward(text, j, 2.5 * sh.flops, r.forward_seconds, r.slowest, peak_rss);
    if (!r.dsinks.empty()) j.add("dsinks", r.dsinks);
  };
  // The whole inputs, on rank 0 only and only for the check.
  const auto check = [&](const auto& sh, const DistResult& r, std::FILE* text, Json& j) {
    const GradientSet tested{r.values[0], r.values[1], r.values[2], r.dsinks, r.values[3]};
    return gradient_verdict(compare_gradients(tested, sh.textbook_backward(dbias_wanted)), sh.dtype, text, j);
  };
  return dist_pipeline(args, mode, "grad", console, flags, call, report, check);
}

}  // namespace cli
}  // namespace kattn
