// kattn.dist's bindings (built when kattn has its MPI layer): ring attention, head sharding
// (Ulysses) and hybrid over the ranks of an mpi4py communicator, and their gradients, in float32,
// float64, float16 or bfloat16 (lse in the accumulation type), over dense shards or, for the ring,
// a ragged batch; and which global positions or rows a rank's shard holds. The communicator comes
// as its Fortran handle (mpi4py's Comm.py2f), so the module needs no mpi4py headers; MPI itself is
// started and stopped by mpi4py.
#include <mpi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "arrays.hpp"
#include "kattn/dist/collective.hpp"
#include "kattn/dist/hybrid.hpp"
#include "kattn/dist/hybrid_backward.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/dist/ragged_layout.hpp"
#include "kattn/dist/ring.hpp"
#include "kattn/dist/ring_backward.hpp"
#include "kattn/dist/ulysses.hpp"
#include "kattn/dist/ulysses_backward.hpp"
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
  return d;
}

enum class DenseCall { ring, ulysses, hybrid };

DenseCall call_of(const std::string& name) {
  if (name == "ring") return DenseCall::ring;
  if (name == "ulysses") return DenseCall::ulysses;
  return DenseCall::hybrid;
}

// Array checks run on every rank through collective_check: a bad array on one rank is the same
// kattn::Error on all of them, never a rank left waiting in the ring.
template <class T>
py::tuple dense_as(DenseCall call, MPI_Comm comm, const py::array& q, const py::array& k, const py::array& v,
                   const Layout& L, const kattn::Options& opt, const kattn::dist::DistOptions& d) {
  using Acc = kattn::accumulate_t<T>;
  Strided<T, 4> qv, kv, vv, ov;
  Strided<Acc, 3> lv;
  py::array o, lse;
  kattn::dist::collective_check(kattn::dist::library_comm(comm), [&] {
    qv = view4<T>(q, "q", L), kv = view4<T>(k, "k", L), vv = view4<T>(v, "v", L);
    o = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), vv.extent(3), L);
    lse = new_array<Acc>({qv.extent(0), qv.extent(2), qv.extent(1)});
    ov = view4<T>(o, "o", L);
    lv = view_n<Acc, 3>(lse, "lse");
  });
  kattn::dist::DistStats stats;
  run_released([&] {
    const auto dense = kattn::kv::dense(kv, vv);
    if (call == DenseCall::ring)
      stats = kattn::dist::ring_attention(comm, Space(), qv, dense, ov, lv, opt, d);
    else if (call == DenseCall::ulysses)
      stats = kattn::dist::ulysses_attention(comm, Space(), qv, dense, ov, lv, opt, d);
    else
      stats = kattn::dist::hybrid_attention(comm, Space(), qv, dense, ov, lv, opt, d);
  });
  return py::make_tuple(o, lse, stats_dict(stats));
}

// A ragged batch: this rank's packed rows q [nq, Hq, D], k, v [nk, Hkv, D]; q_local, kv_local their
// indptr (kattn::dist::ragged_local_indptr of the batch's).
template <class T>
py::tuple ragged_as(MPI_Comm comm, const py::array& q, const py::array& k, const py::array& v,
                    const std::vector<std::int64_t>& q_local, const std::vector<std::int64_t>& kv_local,
                    const kattn::Options& opt, const kattn::dist::DistOptions& d) {
  using Acc = kattn::accumulate_t<T>;
  Strided<T, 3> qv, kv, vv, ov;
  Strided<Acc, 2> lv;
  py::array o, lse;
  kattn::dist::collective_check(kattn::dist::library_comm(comm), [&] {
    qv = view_n<T, 3>(q, "q"), kv = view_n<T, 3>(k, "k"), vv = view_n<T, 3>(v, "v");
    o = new_array<T>({qv.extent(0), qv.extent(1), vv.extent(2)});
    lse = new_array<Acc>({qv.extent(0), qv.extent(1)});
    ov = view_n<T, 3>(o, "o");
    lv = view_n<Acc, 2>(lse, "lse");
  });
  const Index qi(q_local.data(), q_local.size()), ki(kv_local.data(), kv_local.size());
  kattn::dist::DistStats stats;
  run_released([&] {
    const auto keys = kattn::kv::ragged(kv, vv, kattn::make_ragged_layout<Kokkos::HostSpace>(qi, ki));
    stats = kattn::dist::ring_attention(comm, Space(), qv, keys, ov, lv, opt, d);
  });
  return py::make_tuple(o, lse, stats_dict(stats));
}

// The gradients of dense_as' call: this rank's shards q, k, v, o, dout (in T) and lse (in
// accumulate_t<T>, as the forward returned it); dq, dk, dv come back in T, shaped as q, k, v.
template <class T>
py::tuple dense_backward_as(DenseCall call, MPI_Comm comm, const py::array& q, const py::array& k, const py::array& v,
                            const py::array& o, const py::array& lse, const py::array& dout, const Layout& L,
                            const kattn::Options& opt, const kattn::dist::DistOptions& d) {
  using Acc = kattn::accumulate_t<T>;
  Strided<T, 4> qv, kv, vv, ov, dov, dqv, dkv, dvv;
  Strided<Acc, 3> lv;
  py::array dq, dk, dv;
  kattn::dist::collective_check(kattn::dist::library_comm(comm), [&] {
    qv = view4<T>(q, "q", L), kv = view4<T>(k, "k", L), vv = view4<T>(v, "v", L);
    ov = view4<T>(o, "o", L), dov = view4<T>(dout, "dout", L);
    lv = view_n<Acc, 3>(lse, "lse");
    dq = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), qv.extent(3), L);
    dk = new4<T>(kv.extent(0), kv.extent(1), kv.extent(2), kv.extent(3), L);
    dv = new4<T>(vv.extent(0), vv.extent(1), vv.extent(2), vv.extent(3), L);
    dqv = view4<T>(dq, "dq", L), dkv = view4<T>(dk, "dk", L), dvv = view4<T>(dv, "dv", L);
  });
  kattn::BackwardOptions bopt;
  bopt.deterministic = d.deterministic;
  kattn::dist::DistStats stats;
  run_released([&] {
    const auto dense = kattn::kv::dense(kv, vv);
    if (call == DenseCall::ring)
      stats = kattn::dist::ring_attention_backward(comm, Space(), qv, dense, ov, lv, dov, dqv, dkv, dvv, opt, bopt, d);
    else if (call == DenseCall::ulysses)
      stats =
          kattn::dist::ulysses_attention_backward(comm, Space(), qv, dense, ov, lv, dov, dqv, dkv, dvv, opt, bopt, d);
    else
      stats =
          kattn::dist::hybrid_attention_backward(comm, Space(), qv, dense, ov, lv, dov, dqv, dkv, dvv, opt, bopt, d);
  });
  return py::make_tuple(dq, dk, dv, stats_dict(stats));
}

// The gradients of ragged_as' call: this rank's packed rows, lse [nq, Hq] as the forward returned it.
template <class T>
py::tuple ragged_backward_as(MPI_Comm comm, const py::array& q, const py::array& k, const py::array& v,
                             const py::array& o, const py::array& lse, const py::array& dout,
                             const std::vector<std::int64_t>& q_local, const std::vector<std::int64_t>& kv_local,
                             const kattn::Options& opt, const kattn::dist::DistOptions& d) {
  using Acc = kattn::accumulate_t<T>;
  Strided<T, 3> qv, kv, vv, ov, dov, dqv, dkv, dvv;
  Strided<Acc, 2> lv;
  py::array dq, dk, dv;
  kattn::dist::collective_check(kattn::dist::library_comm(comm), [&] {
    qv = view_n<T, 3>(q, "q"), kv = view_n<T, 3>(k, "k"), vv = view_n<T, 3>(v, "v");
    ov = view_n<T, 3>(o, "o"), dov = view_n<T, 3>(dout, "dout");
    lv = view_n<Acc, 2>(lse, "lse");
    dq = new_array<T>({qv.extent(0), qv.extent(1), qv.extent(2)});
    dk = new_array<T>({kv.extent(0), kv.extent(1), kv.extent(2)});
    dv = new_array<T>({vv.extent(0), vv.extent(1), vv.extent(2)});
    dqv = view_n<T, 3>(dq, "dq"), dkv = view_n<T, 3>(dk, "dk"), dvv = view_n<T, 3>(dv, "dv");
  });
  const Index qi(q_local.data(), q_local.size()), ki(kv_local.data(), kv_local.size());
  kattn::dist::DistStats stats;
  run_released([&] {
    const auto keys = kattn::kv::ragged(kv, vv, kattn::make_ragged_layout<Kokkos::HostSpace>(qi, ki));
    stats = kattn::dist::ring_attention_backward(comm, Space(), qv, keys, ov, lv, dov, dqv, dkv, dvv, opt, {}, d);
  });
  return py::make_tuple(dq, dk, dv, stats_dict(stats));
}

std::vector<std::int64_t> indptr_of(const py::object& obj, const char* name) {
  const IndexArray a = index_array(obj, name);
  return std::vector<std::int64_t>(a.view.data(), a.view.data() + a.view.extent(0));
}

// What a distributed binding reads before its call, inside collective_check so that whatever one
// rank refuses every rank refuses with the same message (no rank left waiting): what the Python
// layer refused, the options, the sharding, and the storage of q, which `same` (q first, then
// the arrays stored as q) must share.
struct CallArgs {
  kattn::Options opt;
  kattn::dist::DistOptions d;
  Dtype dtype = Dtype::float32;
  std::vector<py::array> same;
};

CallArgs read_call_args(const std::string& refused, const std::vector<std::pair<py::object, const char*>>& same,
                        const py::dict& kw, const std::string& sharding, const py::object& workspace) {
  if (!refused.empty()) throw kattn::Error(refused);
  CallArgs a;
  for (const auto& [obj, name] : same) a.same.push_back(py::array::ensure(obj));
  a.opt = options_of(kw);
  a.opt.workspace = workspace_of(workspace);
  a.d.sharding = sharding_of(sharding);
  a.dtype = storage_of(a.same[0], same[0].second);
  for (std::size_t i = 1; i < same.size(); ++i) require_same_dtype(a.same[i], same[i].second, a.same[0], "q");
  return a;
}

// The forward's lse, in the accumulation type (its dtype is checked with its view).
py::array lse_of(const py::object& lse) {
  py::array a = py::array::ensure(lse);
  if (!a) throw kattn::Error("lse: expected an array, got " + std::string(py::str(py::type::handle_of(lse).attr("__name__"))));
  return a;
}

// Dense calls: the mode (deterministic, chunk) and hybrid's group size on top.
CallArgs read_dense_args(const std::string& refused, const std::vector<std::pair<py::object, const char*>>& same,
                         const py::dict& kw, const std::string& sharding, bool deterministic, std::int64_t chunk,
                         int ulysses_size, const py::object& workspace) {
  CallArgs a = read_call_args(refused, same, kw, sharding, workspace);
  a.d.deterministic = deterministic;
  a.d.chunk = chunk;
  a.d.ulysses_size = ulysses_size;
  return a;
}

// A ragged batch: the mode, and this rank's indptr from the batch's.
CallArgs read_ragged_args(MPI_Comm comm, const std::string& refused,
                          const std::vector<std::pair<py::object, const char*>>& same, const py::dict& kw,
                          const std::string& sharding, bool deterministic, std::int64_t chunk,
                          const py::object& q_indptr, const py::object& kv_indptr, std::vector<std::int64_t>& q_local,
                          std::vector<std::int64_t>& kv_local, const py::object& workspace) {
  CallArgs a = read_call_args(refused, same, kw, sharding, workspace);
  a.d.deterministic = deterministic;
  a.d.chunk = chunk;
  int P = 1, rank = 0;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &rank);
  q_local = kattn::dist::ragged_local_indptr(indptr_of(q_indptr, "q_indptr"), rank, P, a.d, "q_indptr");
  kv_local = kattn::dist::ragged_local_indptr(indptr_of(kv_indptr, "kv_indptr"), rank, P, a.d, "kv_indptr");
  return a;
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
  // call: "ring", "ulysses" or "hybrid" (the package's names); ulysses_size: hybrid's U (0: all
  // ranks). refused: what the Python layer refused on this rank ("" for nothing); the arrays are
  // then None.
  m.def("dense_attention",
        [](const std::string& call, std::int64_t comm_handle, const py::object& q, const py::object& k,
           const py::object& v, const std::string& layout, const py::dict& kw, const std::string& sharding,
           bool deterministic, std::int64_t chunk, int ulysses_size, const std::string& refused,
           const py::object& workspace) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);  // kattn's checks apart from the caller's traffic
          CallArgs a;
          Layout L{};
          kattn::dist::collective_check(checks, [&] {
            a = read_dense_args(refused, {{q, "q"}, {k, "k"}, {v, "v"}}, kw, sharding, deterministic, chunk,
                                ulysses_size, workspace);
            L = Layout::parse(layout);
          });
          return with_agreed_dtype(checks, a.dtype, [&](auto t) {
            return dense_as<decltype(t)>(call_of(call), comm, a.same[0], a.same[1], a.same[2], L, a.opt, a.d);
          });
        });
  // The gradients of dense_attention's call: o and lse as it returned them, dout stored as q.
  m.def("dense_attention_backward",
        [](const std::string& call, std::int64_t comm_handle, const py::object& q, const py::object& k,
           const py::object& v, const py::object& o, const py::object& lse, const py::object& dout,
           const std::string& layout, const py::dict& kw, const std::string& sharding, bool deterministic,
           std::int64_t chunk, int ulysses_size, const std::string& refused, const py::object& workspace) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);
          CallArgs a;
          Layout L{};
          py::array lse_array;
          kattn::dist::collective_check(checks, [&] {
            a = read_dense_args(refused, {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {dout, "dout"}}, kw, sharding,
                                deterministic, chunk, ulysses_size, workspace);
            lse_array = lse_of(lse);
            L = Layout::parse(layout);
          });
          return with_agreed_dtype(checks, a.dtype, [&](auto t) {
            return dense_backward_as<decltype(t)>(call_of(call), comm, a.same[0], a.same[1], a.same[2], a.same[3],
                                                  lse_array, a.same[4], L, a.opt, a.d);
          });
        });
  // Ring attention over a ragged batch: q_indptr, kv_indptr are the whole batch's (every rank the
  // same), q, k, v this rank's rows of it (ragged_positions).
  m.def("ragged_ring_attention",
        [](std::int64_t comm_handle, const py::object& q, const py::object& k, const py::object& v,
           const py::object& q_indptr, const py::object& kv_indptr, const py::dict& kw, const std::string& sharding,
           bool deterministic, std::int64_t chunk, const std::string& refused, const py::object& workspace) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);
          CallArgs a;
          std::vector<std::int64_t> q_local, kv_local;
          kattn::dist::collective_check(checks, [&] {
            a = read_ragged_args(comm, refused, {{q, "q"}, {k, "k"}, {v, "v"}}, kw, sharding, deterministic, chunk,
                                 q_indptr, kv_indptr, q_local, kv_local, workspace);
          });
          return with_agreed_dtype(checks, a.dtype, [&](auto t) {
            return ragged_as<decltype(t)>(comm, a.same[0], a.same[1], a.same[2], q_local, kv_local, a.opt, a.d);
          });
        });
  // Its gradients: o and lse as it returned them, dout stored as q.
  m.def("ragged_ring_attention_backward",
        [](std::int64_t comm_handle, const py::object& q, const py::object& k, const py::object& v, const py::object& o,
           const py::object& lse, const py::object& dout, const py::object& q_indptr, const py::object& kv_indptr,
           const py::dict& kw, const std::string& sharding, bool deterministic, std::int64_t chunk,
           const std::string& refused, const py::object& workspace) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);
          CallArgs a;
          py::array lse_array;
          std::vector<std::int64_t> q_local, kv_local;
          kattn::dist::collective_check(checks, [&] {
            a = read_ragged_args(comm, refused, {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {dout, "dout"}}, kw, sharding,
                                 deterministic, chunk, q_indptr, kv_indptr, q_local, kv_local, workspace);
            lse_array = lse_of(lse);
          });
          return with_agreed_dtype(checks, a.dtype, [&](auto t) {
            return ragged_backward_as<decltype(t)>(comm, a.same[0], a.same[1], a.same[2], a.same[3], lse_array,
                                                   a.same[4], q_local, kv_local, a.opt, a.d);
          });
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
  // ulysses_size > 0: hybrid's layout (kattn::dist::hybrid_layout) for that U.
  m.def("shard_positions", [](std::int64_t length, int ranks, int rank, const std::string& sharding, std::int64_t align,
                              int ulysses_size) {
    if (length < 0) throw kattn::Error("length: expected >= 0 positions, got " + std::to_string(length));
    if (ranks < 1 || rank < 0 || rank >= ranks)
      throw kattn::Error("rank: expected 0 .. " + std::to_string(ranks - 1) + ", got " + std::to_string(rank));
    if (align < 1) throw kattn::Error("chunk: expected >= 0 keys, got " + std::to_string(align));
    kattn::dist::DistOptions d;
    d.sharding = sharding_of(sharding), d.deterministic = align > 1, d.chunk = align, d.ulysses_size = ulysses_size;
    const kattn::dist::SequenceLayout layout = ulysses_size > 0
                                                   ? kattn::dist::hybrid_layout(length, ranks, d)
                                                   : kattn::dist::SequenceLayout(length, ranks, d.sharding, align);
    py::array_t<std::int64_t> pos(layout.local_length(rank));
    auto* out = pos.mutable_data();
    for (const auto& s : layout.segments_of(rank))
      for (std::int64_t i = 0; i < s.length; ++i) out[s.local + i] = s.global + i;
    return pos;
  });
}
