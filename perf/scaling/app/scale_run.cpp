// kattn-scale measure: one row of a weak or strong scaling study at the rank count of this
// MPI job. Every rank draws random values for its own shard (values do not change the work),
// runs warm-up and timed repetitions, and rank 0 appends one row per repetition to the CSV. With
// --nocomm-baseline every repetition also runs the same ring with the transfers removed, right
// after the real one, so the communication cost is measured in one run on one machine state.
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "collective_steps.hpp"
#include "dtype.hpp"
#include "json.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/errors.hpp"
#include "kattn/workspace.hpp"
#include "machine_load.hpp"
#include "mpi_session.hpp"
#include "paths.hpp"
#include "random_normal.hpp"
#include "scale_commands.hpp"
#include "scale_csv.hpp"
#include "scale_model_grid.hpp"

namespace kattn {
namespace cli {
namespace {

struct Config {
  std::string study = "weak", mode = "ring", dtype = "f32";
  int ulysses_size = 0;  // hybrid: the ranks of a head-sharding group (fewer ranks: one group of them all)
  std::int64_t tokens = 4096;
  int batch = 1, heads_q = 1, heads_kv = 1, dim = 64, queries = 1, repeat = 3, warmup = 1;
  bool causal = false, nocomm = false, json = false;
  bool backward = false;     // each repetition a forward and its backward (training's pair of calls)
  bool workspace = true;     // the calls share one kattn::Workspace, as a loop of calls would (--no-workspace: not)
  int threads_per_rank = 1;  // host threads computing: process CPU time counts every one
  double load_avg = -1;      // rank 0's one-minute load average when the runs start
  dist::DistOptions d;
  std::string csv;
};

// One timed call, reduced over the ranks.
struct Sample {
  double seconds = 0, compute_max = 0, compute_min = 0, compute_mean = 0, comm_max = 0, flops = 0;
  double cpu_max = 0, cpu_min = 0;  // compute in process CPU time: the work, whoever else used the core
  double call_cpu_max = 0;          // the whole call (compute, copies, MPI) in process CPU time
  double call_cpu_sum = 0;          // the same summed over the ranks: what the cores did
  std::int64_t bytes_max = 0;
};

double reduce(double x, MPI_Op op) {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return x;
}

Sample reduce_sample(const dist::DistStats& s, double call_cpu, int P) {
  Sample r;
  r.call_cpu_max = reduce(call_cpu, MPI_MAX);
  r.call_cpu_sum = reduce(call_cpu, MPI_SUM);
  r.seconds = reduce(s.seconds, MPI_MAX);
  r.compute_max = reduce(s.compute_seconds, MPI_MAX);
  r.compute_min = reduce(s.compute_seconds, MPI_MIN);
  r.compute_mean = reduce(s.compute_seconds, MPI_SUM) / P;
  r.comm_max = reduce(s.comm_seconds, MPI_MAX);
  r.cpu_max = reduce(s.compute_cpu_seconds, MPI_MAX);
  r.cpu_min = reduce(s.compute_cpu_seconds, MPI_MIN);
  r.flops = reduce(s.flops, MPI_SUM);
  r.bytes_max = static_cast<std::int64_t>(reduce(double(s.bytes_sent), MPI_MAX));
  return r;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Rank 0's progress line on long runs: at most one per second once a run passes two seconds,
// rewritten in place on a terminal.
class Progress {
 public:
  explicit Progress(int rank) : rank_(rank), tty_(isatty(2)), start_(now()) {}
  void update(const std::string& what) {
    if (rank_ != 0) return;
    const double t = now();
    if (t - start_ < 2.0 || t - last_ < (tty_ ? 1.0 : 10.0)) return;
    last_ = t;
    std::fprintf(stderr, "%skattn-scale measure: %s, %.0f s%s", tty_ ? "\r" : "", what.c_str(), t - start_, tty_ ? "" : "\n");
    std::fflush(stderr);
    printed_ = true;
  }
  void done() {
    if (rank_ == 0 && printed_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  int rank_;
  bool tty_;
  double start_, last_ = 0;
  bool printed_ = false;
};

template <class T>
using V4 = Kokkos::View<T****, Kokkos::LayoutRight>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight>;

template <class View>
void fill_random(const View& v, std::uint64_t seed) {
  auto h = Kokkos::create_mirror_view(v);
  const std::vector<double> x = random_normal(h.span(), seed);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = narrow<typename View::non_const_value_type>(x[i]);
  Kokkos::deep_copy(v, h);
}

// Every timed repetition of the real run (and of the comm-removed one when asked), with the
// best and median of each.
struct Result {
  std::vector<Sample> real, nocomm;
  Sample best, best_nocomm;
  double median = 0, median_nocomm = 0;
  double cpu_ring = 0, cpu_nocomm = 0;  // best whole-call CPU time of each
  double cpu_ring_median = 0, cpu_nocomm_median = 0;
  double balance_cpu_median = 0;  // median over repetitions of slowest / fastest compute CPU time
  int repetitions = 0;
};

// The rows of --nocomm-baseline's comm-removed ring.
std::string nocomm_name(const Config& c) { return c.workspace ? "ring-nocomm" : "ring-nocomm-no-workspace"; }

// The options of the call at P ranks: hybrid's groups of min(U, P) ranks.
dist::DistOptions call_options(const Config& c, int P) {
  dist::DistOptions d = c.d;
  if (c.mode == "hybrid") d.ulysses_size = std::min(c.ulysses_size, P);
  return d;
}

// The positions each rank holds (keys; queries too but in decode).
dist::SequenceLayout key_layout(const Config& c, std::int64_t N, int P) { return dist::layout_of(N, P, call_options(c, P)); }

template <class T>
Result measure(const Config& c, int rank, int P, Progress& progress) {
  const std::int64_t N = c.study == "weak" ? c.tokens * P : c.tokens;
  const bool decode = c.mode == "decode";
  const dist::SequenceLayout kl = key_layout(c, N, P);
  const std::size_t nk = static_cast<std::size_t>(kl.local_length(rank));
  const std::size_t nq = decode ? static_cast<std::size_t>(c.queries) : nk;
  V4<T> q("q", c.batch, nq, c.heads_q, c.dim), k("k", c.batch, nk, c.heads_kv, c.dim),
      v("v", c.batch, nk, c.heads_kv, c.dim);
  V4<T> o("o", c.batch, nq, c.heads_q, c.dim);
  V3<accumulate_t<T>> lse("lse", c.batch, c.heads_q, nq);
  fill_random(q, decode ? 99 : 100 + 3 * rank);  // decode: the same queries everywhere
  fill_random(k, 101 + 3 * rank);
  fill_random(v, 102 + 3 * rank);
  V4<T> dout, dq, dk, dv;  // --backward
  if (c.backward) {
    dout = V4<T>("dout", c.batch, nq, c.heads_q, c.dim), dq = V4<T>("dq", c.batch, nq, c.heads_q, c.dim);
    dk = V4<T>("dk", c.batch, nk, c.heads_kv, c.dim), dv = V4<T>("dv", c.batch, nk, c.heads_kv, c.dim);
    fill_random(dout, 103 + 3 * rank);
  }
  Options opt;
  opt.causal = c.causal;
  const Kokkos::DefaultExecutionSpace space;
  std::vector<Sample> real, nocomm;
  const int total = c.warmup + c.repeat;
  Workspace workspace;  // the buffers of every call (the warm-up allocates them)
  if (c.workspace) opt.workspace = &workspace;
  for (int r = 0; r < total; ++r) {
    for (int variant = 0; variant < (c.nocomm ? 2 : 1); ++variant) {
      dist::DistOptions d = call_options(c, P);
      d.communicate = variant == 0;
      const std::string what = std::string(r < c.warmup ? "warm-up" : "repetition") + " " +
                               std::to_string(r < c.warmup ? r + 1 : r - c.warmup + 1) + "/" +
                               std::to_string(r < c.warmup ? c.warmup : c.repeat) + (variant ? " (comm removed)" : "");
      d.progress = [&](int step, int steps) {
        progress.update(what + ", step " + std::to_string(step) + "/" + std::to_string(steps));
      };
      space.fence();
      MPI_Barrier(MPI_COMM_WORLD);
      const double cpu0 = cpu_now();
      dist::DistStats s = dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, d);
      if (c.backward) {
        const dist::DistStats g =
            dist::attention_backward(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, {}, d);
        // The pair of calls as one sample.
        s.seconds += g.seconds, s.compute_seconds += g.compute_seconds;
        s.compute_cpu_seconds += g.compute_cpu_seconds, s.comm_seconds += g.comm_seconds;
        s.flops += g.flops, s.bytes_sent += g.bytes_sent;
      }
      const Sample sample = reduce_sample(s, cpu_now() - cpu0, P);
      progress.update(what + " done");
      if (r >= c.warmup) (variant ? nocomm : real).push_back(sample);
    }
  }
  const auto best_of = [](const std::vector<Sample>& v, double* median) {
    std::vector<double> seconds;
    for (const Sample& s : v) seconds.push_back(s.seconds);
    *median = spread_of(seconds).median;
    return *std::min_element(v.begin(), v.end(), [](const Sample& a, const Sample& b) { return a.seconds < b.seconds; });
  };
  const auto cpu_of = [&](const std::vector<Sample>& v, double* med) {
    std::vector<double> x;
    for (const Sample& s : v) x.push_back(s.call_cpu_max);
    const Spread sp = spread_of(x);
    *med = sp.median;
    return sp.min;
  };
  Result res;
  res.repetitions = static_cast<int>(real.size());
  res.best = best_of(real, &res.median);
  res.cpu_ring = cpu_of(real, &res.cpu_ring_median);
  std::vector<double> balance;
  for (const Sample& s : real)
    if (s.cpu_min > 0) balance.push_back(s.cpu_max / s.cpu_min);
  if (!balance.empty()) res.balance_cpu_median = spread_of(balance).median;
  if (c.nocomm) {
    res.best_nocomm = best_of(nocomm, &res.median_nocomm);
    res.cpu_nocomm = cpu_of(nocomm, &res.cpu_nocomm_median);
  }
  res.real = std::move(real);
  res.nocomm = std::move(nocomm);
  return res;
}

// The CSV row of one repetition; `existing` is the CSV before this run (for the one-rank baseline).
ScaleRow make_row(const Config& c, int P, const Sample& s, const std::string& algorithm, int repetition,
                  const std::vector<ScaleRow>& existing) {
  const std::int64_t N = c.study == "weak" ? c.tokens * P : c.tokens;
  const auto f = [](const char* fmt, double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, x);
    return std::string(buf);
  };
  // K/V travel in the storage type (16 bits for bf16, f16), decode's partial rows in its
  // accumulation type.
  const io::DType dtype = parse_dtype(c.dtype);
  const int value_bytes = with_storage(dtype, [](auto t) { return int(sizeof(t)); });
  // The most any rank sends (the CSV's bytes column is the most any rank sent): forward, and with
  // --backward the backward too; sent(rank, backward) is the traffic model's.
  Options opt;
  opt.causal = c.causal;
  const auto most_sent = [&](const auto& sent) {
    double most = 0;
    for (int r = 0; r < P; ++r) most = std::max(most, double(sent(r, false) + (c.backward ? sent(r, true) : 0)));
    return most;
  };
  double model_bytes = 0;
  if (algorithm != nocomm_name(c)) {
    dist::TrafficProblem pr;
    pr.Nq = c.mode == "decode" ? c.queries : N, pr.Nk = N;
    pr.batch = c.batch, pr.heads_q = c.heads_q, pr.heads_kv = c.heads_kv, pr.head_dim = c.dim;
    pr.bytes_per_value = value_bytes;
    const dist::DistOptions d = call_options(c, P);
    model_bytes = most_sent([&](int r, bool backward) {
      return dist::traffic(pr, opt, d, P, r, backward ? dist::Pass::backward : dist::Pass::forward).sent;
    });
  }
  ScaleRow row;
  row.field = {{"study", c.study},
               {"ranks", std::to_string(P)},
               {"tokens", std::to_string(N)},
               {"tokens_per_rank", f("%.0f", double(N) / P)},
               {"algorithm", algorithm},
               {"dtype", c.dtype},
               {"batch", std::to_string(c.batch)},
               {"heads_q", std::to_string(c.heads_q)},
               {"heads_kv", std::to_string(c.heads_kv)},
               {"dim", std::to_string(c.dim)},
               {"causal", c.causal ? "1" : "0"},
               {"sharding", dist::name(c.mode == "decode" ? dist::Sharding::contiguous : c.d.sharding)},
               {"seconds", f("%.6g", s.seconds)},
               {"compute_seconds", f("%.6g", s.compute_max)},
               {"compute_seconds_min", f("%.6g", s.compute_min)},
               {"exposed_comm_seconds", f("%.6g", s.comm_max)},
               {"bytes_sent_per_rank", std::to_string(s.bytes_max)},
               {"model_bytes_per_rank", f("%.0f", model_bytes)},
               {"tflops_per_rank", f("%.6g", s.flops / P / s.seconds / 1e12)},
               {"compute_cpu_seconds", f("%.6g", s.cpu_max)},
               {"compute_cpu_seconds_min", f("%.6g", s.cpu_min)},
               {"repetition", std::to_string(repetition)},
               {"threads_per_rank", std::to_string(c.threads_per_rank)},
               {"load_avg", f("%.2f", c.load_avg)},
               {"cpu_seconds", f("%.6g", s.call_cpu_sum)}};
  // Without a one-rank row of the same study in the CSV: the mean fraction of the wall time the
  // ranks spend computing (1 at one rank).
  row.field["efficiency"] = f("%.6f", P == 1 ? 1.0 : std::min(1.0, s.compute_mean / s.seconds));
  row.field["baseline"] = P == 1 ? "self" : "busy";
  if (P > 1) {
    std::string baseline;
    const double eff = efficiency_against_one_rank(row, existing, &baseline);
    row.field["efficiency"] = f("%.6f", eff);
    row.field["baseline"] = baseline;
  }
  const double cpu_eff = P == 1 ? 1.0 : cpu_efficiency_against_one_rank(row, existing);
  row.field["efficiency_cpu"] = cpu_eff > 0 ? f("%.6f", cpu_eff) : "";
  return row;
}

}  // namespace

static const char* const kUsage =
    "usage: mpirun -np P kattn-scale measure [--study weak|strong] [--tokens N]\n"
    "                 [--dist ring|decode|ulysses|hybrid|grid] [--ulysses-size U] [--grid R,C] [--batch B]\n"
    "                 [--heads HQ,HKV]\n"
    "                 [--dim D] [--queries NQ]\n"
    "                 [--dtype f32|f64|bf16|f16]\n"
    "                 [--causal] [--zigzag] [--deterministic] [--chunk KEYS] [--repeat R] [--warmup W]\n"
    "                 [--nocomm-baseline] [--backward] [--no-workspace] [--csv FILE] [--json]\n"
    "         weak: --tokens is per rank; strong: --tokens is the whole sequence (ring, ulysses,\n"
    "         hybrid) or KV cache (decode). Hybrid: groups of U ranks share heads (fewer ranks: one\n"
    "         group). Grid: R x C = P (default: the library's, the most square). --backward: each\n"
    "         repetition is a forward and its backward. The calls share one kattn::Workspace;\n"
    "         --no-workspace: each allocates its own buffers (rows NAME-no-workspace).\n"
    "         Appends one row per timed repetition to --csv (and as many for the comm-removed ring\n"
    "         with --nocomm-baseline).\n";

int scale_measure(Args& args) {
  if (args.help(kUsage)) return 0;
  MpiSession mpi;
  return mpi.run([&]() -> int {
    const int rank = mpi.rank(), P = mpi.size();
    Config c;
    // Every flag is read on every rank, then compared, before any other collective step: a flag
    // given on one rank only (an MPMD launch) fails on every rank alike instead of hanging.
    dist::collective_check(MPI_COMM_WORLD, [&] {
      c.study = args.value("--study").value_or(c.study);
      c.mode = args.value("--dist").value_or(c.mode);
      c.ulysses_size = static_cast<int>(args.integer("--ulysses-size", 1, 1 << 20).value_or(0));
      const auto grid = args.value("--grid");
      if (grid) {
        const scaling::GridShape g = parse_grid_shape(*grid);
        c.d.grid = {g.rows, g.cols};
      }
      c.tokens = args.integer("--tokens", 1, std::int64_t(1) << 40).value_or(c.tokens);
      c.batch = static_cast<int>(args.integer("--batch", 1, 1 << 20).value_or(c.batch));
      if (auto h = args.integers("--heads", 2)) c.heads_q = int((*h)[0]), c.heads_kv = int((*h)[1]);
      c.dim = static_cast<int>(args.integer("--dim", 1, 1 << 16).value_or(c.dim));
      c.queries = static_cast<int>(args.integer("--queries", 1, 1 << 20).value_or(c.queries));
      c.dtype = args.value("--dtype").value_or(c.dtype);
      c.causal = args.flag("--causal");
      if (args.flag("--zigzag")) c.d.sharding = dist::Sharding::zigzag;
      c.d.deterministic = args.flag("--deterministic");
      c.d.chunk = args.integer("--chunk", 1, std::int64_t(1) << 40).value_or(0);
      c.repeat = static_cast<int>(args.integer("--repeat", 1, 1000).value_or(c.repeat));
      c.warmup = static_cast<int>(args.integer("--warmup", 0, 1000).value_or(c.warmup));
      c.nocomm = args.flag("--nocomm-baseline");
      c.backward = args.flag("--backward");
      c.workspace = !args.flag("--no-workspace");
      c.csv = args.value("--csv").value_or("");
      c.json = args.flag("--json");
      args.finish();
      KATTN_REQUIRE(c.study == "weak" || c.study == "strong", "--study: expected weak or strong, got '", c.study, "'");
      KATTN_REQUIRE(c.mode == "ring" || c.mode == "decode" || c.mode == "ulysses" || c.mode == "hybrid" ||
                        c.mode == "grid",
                    "--dist: expected ring, decode, ulysses, hybrid or grid, got '", c.mode, "'");
      c.d.scheme = c.mode == "decode" ? dist::Scheme::sharded_kv : dist::scheme_named(c.mode, "--dist");
      KATTN_REQUIRE(!grid || c.mode == "grid", "--grid: only for --dist grid");
      KATTN_REQUIRE(!grid || std::int64_t(c.d.grid.rows) * c.d.grid.cols == P, "--grid: expected ROWS x COLS = the ",
                    P, " ranks, got ", *grid);
      KATTN_REQUIRE(c.mode == "hybrid" ? c.ulysses_size > 0 : c.ulysses_size == 0,
                    c.mode == "hybrid" ? "--ulysses-size: required with --dist hybrid (the ranks of one head-sharding "
                                         "group, all of them when fewer)"
                                       : "--ulysses-size: only for --dist hybrid");
      KATTN_REQUIRE(c.dtype == "f32" || c.dtype == "f64" || c.dtype == "bf16" || c.dtype == "f16",
                    "--dtype: expected f32, f64, bf16 or f16, got '", c.dtype, "'");
      KATTN_REQUIRE(c.heads_q >= 1 && c.heads_kv >= 1 && c.heads_q % c.heads_kv == 0,
                    "--heads: expected HQ,HKV with HQ a multiple of HKV, got ", c.heads_q, ",", c.heads_kv);
      KATTN_REQUIRE(!c.nocomm || (c.mode == "ring" && !c.d.deterministic && !c.backward),
                    "--nocomm-baseline: only for the ring's forward (not --deterministic, --backward or decode)");
      KATTN_REQUIRE(!c.backward || c.mode != "decode", "--backward: not for --dist decode (no gradients)");
      KATTN_REQUIRE(c.mode != "decode" || c.d.sharding == dist::Sharding::contiguous,
                    "--zigzag: not for --dist decode");
    });
    Options shape;
    shape.causal = c.causal;
    std::vector<dist::Agreed> fields = dist::option_fields(shape, c.d);  // the scheme and its options
    const std::vector<dist::Agreed> study = {
         dist::Agreed::integer("--tokens", "tokens", c.tokens), dist::Agreed::integer("--dim", "dim", c.dim),
         dist::Agreed::integer("--batch", "batch", c.batch), dist::Agreed::integer("--heads", "query heads", c.heads_q),
         dist::Agreed::integer("--heads", "KV heads", c.heads_kv),
         dist::Agreed::integer("--queries", "queries", c.queries),
         dist::Agreed::integer("--ulysses-size", "head-sharding group", c.ulysses_size),
         dist::Agreed::integer("--repeat", "repetitions", c.repeat),
         dist::Agreed::integer("--warmup", "warm-up runs", c.warmup),
         dist::Agreed::boolean("--nocomm-baseline", "baseline", c.nocomm),
         dist::Agreed::boolean("--backward", "backward", c.backward),
         dist::Agreed::boolean("--no-workspace", "buffers per call", !c.workspace),
         dist::Agreed::boolean("--study", "strong scaling", c.study == "strong"),
         with_storage(parse_dtype(c.dtype), [](auto t) { return dist::Agreed::dtype<decltype(t)>("--dtype"); })};
    fields.insert(fields.end(), study.begin(), study.end());
    dist::collective_agree(MPI_COMM_WORLD, fields);
    // Rank 0 appends to the CSV at the end: a path it cannot write fails on every rank, before the runs.
    dist::collective_check(MPI_COMM_WORLD, [&] {
      if (rank == 0 && !c.csv.empty()) check_output_file("--csv", c.csv);
    });

    // On a GPU one host thread drives the device: its process CPU time is not the work.
    c.threads_per_rank = std::is_same<Kokkos::DefaultExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value
                             ? Kokkos::DefaultExecutionSpace().concurrency()
                             : 1;
    c.load_avg = load_average();
    Progress progress(rank);
    const Result r =
        with_storage(parse_dtype(c.dtype), [&](auto t) { return measure<decltype(t)>(c, rank, P, progress); });
    progress.done();
    const long long peak_rss = peak_rss_max(MPI_COMM_WORLD);
    return on_rank0(MPI_COMM_WORLD, [&]() -> int {
      // Hybrid's rows name their group size: studies of different U are different studies.
      const std::string algorithm = (c.mode == "hybrid" ? "hybrid-u" + std::to_string(c.ulysses_size) : c.mode) +
                                    (c.d.deterministic ? "-deterministic" : "") + (c.backward ? "-fwd-bwd" : "") +
                                    (c.workspace ? "" : "-no-workspace");
      std::vector<ScaleRow> existing;
      if (!c.csv.empty() && P > 1) {
        try {
          existing = read_scale_csv(c.csv);
        } catch (const Error&) {
          // No file yet (or not a scaling CSV): efficiency stays the busy fraction.
        }
      }
      // One CSV row per repetition: the report draws the spread from them.
      std::vector<ScaleRow> rows;
      for (std::size_t i = 0; i < r.real.size(); ++i)
        rows.push_back(make_row(c, P, r.real[i], algorithm, int(i) + 1, existing));
      for (std::size_t i = 0; i < r.nocomm.size(); ++i)
        rows.push_back(make_row(c, P, r.nocomm[i], nocomm_name(c), int(i) + 1, existing));
      const ScaleRow row = make_row(c, P, r.best, algorithm, 0, existing);
      const auto print = [&](const ScaleRow& w, double median) {
        std::printf(
            "kattn-scale measure: %s %s P=%d tokens=%s (%s per rank) %s: %.6f s (median %.6f s of %d repetitions), compute "
            "%s s (fastest rank %s s), exposed comm %s s, sent %s B/rank (model %s), %s TFLOP/s per rank, "
            "efficiency %s (%s), in CPU time %s; %s thread(s) per rank, load %s\n",
            w.str("study").c_str(), w.str("algorithm").c_str(), P, w.str("tokens").c_str(),
            w.str("tokens_per_rank").c_str(), w.str("dtype").c_str(), w.num("seconds"), median, r.repetitions,
            w.str("compute_seconds").c_str(), w.str("compute_seconds_min").c_str(), w.str("exposed_comm_seconds").c_str(),
            w.str("bytes_sent_per_rank").c_str(), w.str("model_bytes_per_rank").c_str(), w.str("tflops_per_rank").c_str(),
            w.str("efficiency").c_str(), w.str("baseline").c_str(),
            w.str("efficiency_cpu").empty() ? "unknown (no one-rank rows)" : w.str("efficiency_cpu").c_str(),
            w.str("threads_per_rank").c_str(), w.str("load_avg").c_str());
      };
      print(row, r.median);
      if (!c.csv.empty()) append_scale_csv(c.csv, rows);
      Json j;
      for (const std::string& col : scale_columns())
        if (col != "repetition") j.add(col, row.str(col));
      j.add("seconds_median", r.median).add("repetitions", r.repetitions).add("peak_rss_bytes_max", peak_rss);
      if (c.nocomm) {
        print(make_row(c, P, r.best_nocomm, nocomm_name(c), 0, existing), r.median_nocomm);
        const double loss = r.best.seconds / r.best_nocomm.seconds - 1.0;
        const double loss_median = r.median / r.median_nocomm - 1.0;
        std::printf(
            "communication cost: ring %.6f s against %.6f s with the transfers removed: %+.2f%% (medians: "
            "%+.2f%%)\n",
            r.best.seconds, r.best_nocomm.seconds, 100 * loss, 100 * loss_median);
        j.add("nocomm_seconds", r.best_nocomm.seconds).add("comm_loss", loss).add("comm_loss_median", loss_median);
        // On a shared machine the wall clock mostly measures who else ran; CPU time measures the work.
        const double cpu_loss = r.cpu_ring / r.cpu_nocomm - 1.0;
        const double cpu_loss_median = r.cpu_ring_median / r.cpu_nocomm_median - 1.0;
        std::printf(
            "communication cost in CPU time (whole call, slowest rank, %d repetitions): best ring %.6f s against "
            "%.6f s: %+.2f%%; medians %.6f s against %.6f s: %+.2f%%; exposed waiting %.6f s of %.6f s wall "
            "(%.4f%%)\n",
            r.repetitions, r.cpu_ring, r.cpu_nocomm, 100 * cpu_loss, r.cpu_ring_median, r.cpu_nocomm_median,
            100 * cpu_loss_median, r.best.comm_max, r.best.seconds, 100 * r.best.comm_max / r.best.seconds);
        j.add("comm_loss_cpu", cpu_loss).add("comm_loss_cpu_median", cpu_loss_median);
        j.add("exposed_comm_fraction", r.best.comm_max / r.best.seconds);
      }
      if (P > 1 && r.best.compute_min > 0) {
        std::printf("compute balance: slowest rank %.6f s, fastest %.6f s: %.3fx wall clock", r.best.compute_max,
                    r.best.compute_min, r.best.compute_max / r.best.compute_min);
        j.add("compute_balance", r.best.compute_max / r.best.compute_min);
        if (r.best.cpu_min > 0) {
          std::printf("; CPU time %.6f s against %.6f s: %.3fx (median over repetitions %.3fx)", r.best.cpu_max,
                      r.best.cpu_min, r.best.cpu_max / r.best.cpu_min, r.balance_cpu_median);
          j.add("compute_balance_cpu", r.best.cpu_max / r.best.cpu_min)
              .add("compute_balance_cpu_median", r.balance_cpu_median);
        }
        std::printf("\n");
      }
      if (c.json) std::cout << j.str() << "\n";
      return 0;
    });
  });
}

}  // namespace cli
}  // namespace kattn
