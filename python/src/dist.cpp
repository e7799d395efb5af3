// kattn.dist's bindings (built when kattn has its MPI layer): kattn::dist::attention and
// attention_backward over the ranks of an mpi4py communicator, the scheme an argument (ring,
// ulysses, hybrid, sharded_kv), in float32, float64, float16 or bfloat16 (lse in the accumulation
// type), over dense shards or, for the ring, a ragged batch; and which global positions or rows a
// rank's shard holds. The communicator comes as its Fortran handle (mpi4py's Comm.py2f), so the
// module needs no mpi4py headers; MPI itself is started and stopped by mpi4py.
#include <mpi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "backward_outputs.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/ragged_layout.hpp"
#include "workspace.hpp"

namespace {

using namespace kattn_python;

kattn::dist::Sharding sharding_of(const std::string& name) {
  if (name == "contiguous") return kattn::dist::Sharding::contiguous;
  if (name == "zigzag") return kattn::dist::Sharding::zigzag;
  throw kattn::Error("sharding: expected \"contiguous\" or \"zigzag\", got \"" + name + "\"");
}

MPI_Comm comm_of(std::int64_t handle) {
  int started = 0;
  MPI_Initialized(&started);
  if (!started) throw kattn::Error("comm: MPI is not initialized (import mpi4py.MPI first)");
  const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  if (comm == MPI_COMM_NULL) throw kattn::Error("comm: expected a communicator, got MPI.COMM_NULL");
  return comm;
}

py::dict stats_dict(const kattn::dist::DistStats& s) {
  py::dict d;
  d["seconds"] = s.seconds, d["compute_seconds"] = s.compute_seconds, d["comm_seconds"] = s.comm_seconds;
  d["bytes_sent"] = s.bytes_sent, d["messages_sent"] = s.messages_sent, d["flops"] = s.flops, d["steps"] = s.steps;
  if (!s.dsinks.empty()) d["dsinks"] = s.dsinks;  // the backward with sinks: their gradient
  return d;
}

std::vector<std::int64_t> indptr_of(const py::object& obj, const char* name) {
  const IndexArray a = index_array(obj, name);
  return std::vector<std::int64_t>(a.view.data(), a.view.data() + a.view.extent(0));
}

// What a call reads before kattn's, inside collective_check so that whatever one rank refuses every
// rank refuses with the same message (no rank left waiting): what the Python layer refused, the
// options, the DistOptions, the storage of q, which `same` (q first, then the arrays stored as q)
// must share, and for a ragged batch (indptrs given) this rank's local indptrs.
struct CallArgs {
  kattn::Options opt;
  kattn::dist::DistOptions d;
  Dtype dtype = Dtype::float32;
  std::vector<py::array> same;
  py::array lse;  // the backward's: the forward's lse, in the accumulation type
  Layout layout{};
  bool ragged = false;
  std::vector<std::int64_t> q_local, kv_local;
};

CallArgs read_call_args(MPI_Comm comm, const std::vector<std::pair<py::object, const char*>>& same,
                        const py::object& q_indptr, const py::object& kv_indptr, const std::string& layout,
                        const py::dict& kw, const py::dict& dist_kw, const std::string& refused,
                        const py::object& workspace) {
  if (!refused.empty()) throw kattn::Error(refused);
  CallArgs a;
  for (const auto& [obj, name] : same) a.same.push_back(py::array::ensure(obj));
  a.opt = options_of(kw);
  a.opt.workspace = workspace_of(workspace);
  a.d.scheme = kattn::dist::scheme_named(dist_kw["scheme"].cast<std::string>());
  a.d.sharding = sharding_of(dist_kw["sharding"].cast<std::string>());
  a.d.deterministic = dist_kw["deterministic"].cast<bool>();
  a.d.chunk = dist_kw["chunk"].cast<std::int64_t>();
  a.d.ulysses_size = dist_kw["ulysses_size"].cast<int>();
  if (dist_kw.contains("grid")) {
    const py::tuple grid = dist_kw["grid"].cast<py::tuple>();
    a.d.grid.rows = grid[0].cast<int>(), a.d.grid.cols = grid[1].cast<int>();
  }
  a.dtype = storage_of(a.same[0], same[0].second);
  for (std::size_t i = 1; i < same.size(); ++i) require_same_dtype(a.same[i], same[i].second, a.same[0], "q");
  a.layout = Layout::parse(layout);
  a.ragged = !q_indptr.is_none();
  if (a.ragged) {
    int P = 1, rank = 0;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &rank);
    a.q_local = kattn::dist::ragged_local_indptr(indptr_of(q_indptr, "q_indptr"), rank, P, a.d, "q_indptr");
    a.kv_local = kattn::dist::ragged_local_indptr(indptr_of(kv_indptr, "kv_indptr"), rank, P, a.d, "kv_indptr");
  }
  return a;
}

// The forward's lse, in the accumulation type (its dtype is checked with its view).
py::array lse_of(const py::object& lse) {
  py::array a = py::array::ensure(lse);
  if (!a) throw kattn::Error("lse: expected an array, got " + std::string(py::str(py::type::handle_of(lse).attr("__name__"))));
  return a;
}

// o and lse of this rank (dense: [B, n, Hq, D] as the layout says and [B, Hq, n]; ragged: [n, Hq,
// D] and [n, Hq]). Array checks run on every rank through collective_check: a bad array on one rank
// is the same kattn::Error on all of them, never a rank left waiting.
template <class T>
py::tuple forward_as(MPI_Comm comm, const CallArgs& a) {
  using Acc = kattn::accumulate_t<T>;
  const MPI_Comm checks = kattn::dist::library_comm(comm);
  py::array o, lse;
  kattn::dist::DistStats stats;
  if (!a.ragged) {
    Strided<T, 4> qv, kv, vv, ov;
    Strided<Acc, 3> lv;
    kattn::dist::collective_check(checks, [&] {
      qv = view4<T>(a.same[0], "q", a.layout), kv = view4<T>(a.same[1], "k", a.layout);
      vv = view4<T>(a.same[2], "v", a.layout);
      o = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), vv.extent(3), a.layout);
      lse = new_array<Acc>({qv.extent(0), qv.extent(2), qv.extent(1)});
      ov = view4<T>(o, "o", a.layout);
      lv = view_n<Acc, 3>(lse, "lse");
    });
    run_released([&] { stats = kattn::dist::attention(comm, Space(), qv, kattn::kv::dense(kv, vv), ov, lv, a.opt, a.d); });
    return py::make_tuple(o, lse, stats_dict(stats));
  }
  Strided<T, 3> qv, kv, vv, ov;
  Strided<Acc, 2> lv;
  kattn::dist::collective_check(checks, [&] {
    qv = view_n<T, 3>(a.same[0], "q"), kv = view_n<T, 3>(a.same[1], "k"), vv = view_n<T, 3>(a.same[2], "v");
    o = new_array<T>({qv.extent(0), qv.extent(1), vv.extent(2)});
    lse = new_array<Acc>({qv.extent(0), qv.extent(1)});
    ov = view_n<T, 3>(o, "o");
    lv = view_n<Acc, 2>(lse, "lse");
  });
  const Index qi(a.q_local.data(), a.q_local.size()), ki(a.kv_local.data(), a.kv_local.size());
  run_released([&] {
    const auto keys = kattn::kv::ragged(kv, vv, kattn::make_ragged_layout<Kokkos::HostSpace>(qi, ki));
    stats = kattn::dist::attention(comm, Space(), qv, keys, ov, lv, a.opt, a.d);
  });
  return py::make_tuple(o, lse, stats_dict(stats));
}

// dq, dk, dv of this rank, shaped as q, k, v (in T), from this rank's q, k, v, o, dout (a.same, in
// T) and the forward's lse (in accumulate_t<T>); with bias_grad (out), the stats' "dbias": this
// rank's rows of the bias's gradient, shaped as its bias.
template <class T>
py::tuple backward_as(MPI_Comm comm, const CallArgs& a, const BackwardOutputs& out) {
  using Acc = kattn::accumulate_t<T>;
  const MPI_Comm checks = kattn::dist::library_comm(comm);
  py::array dq, dk, dv;
  kattn::dist::DistStats stats;
  if (!a.ragged) {
    Strided<T, 4> qv, kv, vv, ov, dov, dqv, dkv, dvv;
    Strided<Acc, 3> lv;
    kattn::dist::collective_check(checks, [&] {
      const Layout& L = a.layout;
      qv = view4<T>(a.same[0], "q", L), kv = view4<T>(a.same[1], "k", L), vv = view4<T>(a.same[2], "v", L);
      ov = view4<T>(a.same[3], "o", L), dov = view4<T>(a.same[4], "dout", L);
      lv = view_n<Acc, 3>(a.lse, "lse");
      dq = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), qv.extent(3), L);
      dk = new4<T>(kv.extent(0), kv.extent(1), kv.extent(2), kv.extent(3), L);
      dv = new4<T>(vv.extent(0), vv.extent(1), vv.extent(2), vv.extent(3), L);
      dqv = view4<T>(dq, "dq", L), dkv = view4<T>(dk, "dk", L), dvv = view4<T>(dv, "dv", L);
    });
    run_released([&] {
      stats = kattn::dist::attention_backward(comm, Space(), qv, kattn::kv::dense(kv, vv), ov, lv, dov, dqv, dkv, dvv,
                                              a.opt, out.options(), a.d);
    });
    py::dict info = stats_dict(stats);
    out.add_dbias(info);
    return py::make_tuple(dq, dk, dv, info);
  }
  Strided<T, 3> qv, kv, vv, ov, dov, dqv, dkv, dvv;
  Strided<Acc, 2> lv;
  kattn::dist::collective_check(checks, [&] {
    qv = view_n<T, 3>(a.same[0], "q"), kv = view_n<T, 3>(a.same[1], "k"), vv = view_n<T, 3>(a.same[2], "v");
    ov = view_n<T, 3>(a.same[3], "o"), dov = view_n<T, 3>(a.same[4], "dout");
    lv = view_n<Acc, 2>(a.lse, "lse");
    dq = new_array<T>({qv.extent(0), qv.extent(1), qv.extent(2)});
    dk = new_array<T>({kv.extent(0), kv.extent(1), kv.extent(2)});
    dv = new_array<T>({vv.extent(0), vv.extent(1), vv.extent(2)});
    dqv = view_n<T, 3>(dq, "dq"), dkv = view_n<T, 3>(dk, "dk"), dvv = view_n<T, 3>(dv, "dv");
  });
  const Index qi(a.q_local.data(), a.q_local.size()), ki(a.kv_local.data(), a.kv_local.size());
  run_released([&] {
    const auto keys = kattn::kv::ragged(kv, vv, kattn::make_ragged_layout<Kokkos::HostSpace>(qi, ki));
    stats = kattn::dist::attention_backward(comm, Space(), qv, keys, ov, lv, dov, dqv, dkv, dvv, a.opt, out.options(),
                                            a.d);
  });
  py::dict info = stats_dict(stats);
  out.add_dbias(info);
  return py::make_tuple(dq, dk, dv, info);
}

// f(T{}) for the call's storage, once every rank has agreed on it.
template <class F>
py::tuple with_agreed_dtype(MPI_Comm checks, Dtype dtype, F&& f) {
  return with_dtype(dtype, [&](auto t) {
    kattn::dist::collective_agree(checks, {kattn::dist::Agreed::dtype<decltype(t)>("q")});
    return f(t);
  });
}

}  // namespace

void bind_dist(py::module_& m) {
  // The one door. dist_kw: scheme ("ring", "ulysses", "hybrid", "sharded_kv", "grid"), sharding,
  // deterministic, chunk, ulysses_size (hybrid's U; 0: all ranks), grid ((rows, cols); (0, 0): chosen). q_indptr, kv_indptr: None for
  // dense shards, else the whole ragged batch's (every rank the same; q, k, v this rank's rows).
  // refused: what the Python layer refused on this rank ("" for nothing); the arrays are then None.
  m.def("dist_attention",
        [](std::int64_t comm_handle, const py::object& q, const py::object& k, const py::object& v,
           const py::object& q_indptr, const py::object& kv_indptr, const std::string& layout, const py::dict& kw,
           const py::dict& dist_kw, const std::string& refused, const py::object& workspace) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);  // kattn's checks apart from the caller's traffic
          CallArgs a;
          kattn::dist::collective_check(checks, [&] {
            a = read_call_args(comm, {{q, "q"}, {k, "k"}, {v, "v"}}, q_indptr, kv_indptr, layout, kw, dist_kw, refused,
                               workspace);
          });
          return with_agreed_dtype(checks, a.dtype, [&](auto t) { return forward_as<decltype(t)>(comm, a); });
        });
  // Its gradients: o and lse as it returned them, dout stored as q; bias_grad: the bias's too (the
  // stats' "dbias"; a call without a float bias is refused on every rank).
  m.def("dist_attention_backward",
        [](std::int64_t comm_handle, const py::object& q, const py::object& k, const py::object& v, const py::object& o,
           const py::object& lse, const py::object& dout, const py::object& q_indptr, const py::object& kv_indptr,
           const std::string& layout, const py::dict& kw, const py::dict& dist_kw, const std::string& refused,
           const py::object& workspace, bool bias_grad) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);
          CallArgs a;
          std::optional<BackwardOutputs> out;
          kattn::dist::collective_check(checks, [&] {
            a = read_call_args(comm, {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {dout, "dout"}}, q_indptr, kv_indptr,
                               layout, kw, dist_kw, refused, workspace);
            a.lse = lse_of(lse);
            out.emplace(Target{}, a.opt.bias, a.d.deterministic, bias_grad);
          });
          return with_agreed_dtype(checks, a.dtype, [&](auto t) { return backward_as<decltype(t)>(comm, a, *out); });
        });
  // The packed rows of a ragged batch (indptr [B + 1]) that `rank` of `ranks` holds, in its local
  // order (on whole chunks of each sequence in deterministic mode).
  m.def("ragged_positions", [](const py::object& indptr, int ranks, int rank, const std::string& sharding,
                               bool deterministic, std::int64_t chunk) {
    kattn::dist::DistOptions d;
    d.sharding = sharding_of(sharding);
    d.deterministic = deterministic;
    d.chunk = chunk;
    const std::vector<std::int64_t> rows =
        kattn::dist::ragged_positions(indptr_of(indptr, "indptr"), rank, ranks, d, "indptr");
    py::array_t<std::int64_t> out(static_cast<py::ssize_t>(rows.size()));
    std::copy(rows.begin(), rows.end(), out.mutable_data());
    return out;
  });
  // The positions of a sequence of `length` that `rank` of `ranks` holds under the scheme
  // (kattn::dist::layout_of).
  m.def("shard_positions", [](std::int64_t length, int ranks, int rank, const std::string& scheme,
                              const std::string& sharding, std::int64_t align, int ulysses_size) {
    if (length < 0) throw kattn::Error("length: expected >= 0 positions, got " + std::to_string(length));
    if (ranks < 1 || rank < 0 || rank >= ranks)
      throw kattn::Error("rank: expected 0 .. " + std::to_string(ranks - 1) + ", got " + std::to_string(rank));
    if (align < 1) throw kattn::Error("chunk: expected >= 0 keys, got " + std::to_string(align));
    kattn::dist::DistOptions d;
    d.scheme = kattn::dist::scheme_named(scheme);
    d.sharding = sharding_of(sharding), d.deterministic = align > 1, d.chunk = align, d.ulysses_size = ulysses_size;
    const kattn::dist::SequenceLayout layout = kattn::dist::layout_of(length, ranks, d);
    py::array_t<std::int64_t> pos(layout.local_length(rank));
    auto* out = pos.mutable_data();
    for (const auto& s : layout.segments_of(rank))
      for (std::int64_t i = 0; i < s.length; ++i) out[s.local + i] = s.global + i;
    return pos;
  });
}
