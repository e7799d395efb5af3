// kattn.dist's bindings (built when kattn has its MPI layer): ring attention, head sharding
// (Ulysses) and hybrid over the ranks of an mpi4py communicator, in float32, float64, float16 or
// bfloat16 (lse in the accumulation type), and which global positions a rank's shard holds. The
// communicator comes as
// its Fortran handle (mpi4py's Comm.py2f), so the module needs no mpi4py headers; MPI itself is
// started and stopped by mpi4py.
#include <mpi.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "kattn/dist/collective.hpp"
#include "kattn/dist/hybrid.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/dist/ragged_layout.hpp"
#include "kattn/dist/ring.hpp"
#include "kattn/dist/ulysses.hpp"

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

std::vector<std::int64_t> indptr_of(const py::object& obj, const char* name) {
  const IndexArray a = index_array(obj, name);
  return std::vector<std::int64_t>(a.view.data(), a.view.data() + a.view.extent(0));
}

}  // namespace

void bind_dist(py::module_& m) {
  // call: "ring", "ulysses" or "hybrid" (the package's names); ulysses_size: hybrid's U (0: all
  // ranks). refused: what the Python layer refused on this rank ("" for nothing); q, k, v are then
  // None.
  m.def("dense_attention",
        [](const std::string& call, std::int64_t comm_handle, const py::object& q_obj, const py::object& k_obj,
           const py::object& v_obj, const std::string& layout, const py::dict& kw, const std::string& sharding,
           bool deterministic, std::int64_t chunk, int ulysses_size, const std::string& refused) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);  // kattn's checks apart from the caller's traffic
          // Whatever one rank refuses, every rank refuses with the same message (no rank left waiting).
          kattn::Options opt;
          Layout L{};
          kattn::dist::DistOptions d;
          Dtype dtype = Dtype::float32;
          py::array q, k, v;
          kattn::dist::collective_check(checks, [&] {
            if (!refused.empty()) throw kattn::Error(refused);
            q = py::array::ensure(q_obj), k = py::array::ensure(k_obj), v = py::array::ensure(v_obj);
            opt = options_of(kw);
            L = Layout::parse(layout);
            d.sharding = sharding_of(sharding);
            d.deterministic = deterministic;
            d.chunk = chunk;
            d.ulysses_size = ulysses_size;
            dtype = storage_of(q, "q");
            require_same_dtype(k, "k", q, "q");
            require_same_dtype(v, "v", q, "q");
          });
          return with_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            kattn::dist::collective_agree(checks, {kattn::dist::Agreed::dtype<T>("q")});
            return dense_as<T>(call_of(call), comm, q, k, v, L, opt, d);
          });
        });
  // Ring attention over a ragged batch: q_indptr, kv_indptr are the whole batch's (every rank the
  // same), q, k, v this rank's rows of it (ragged_positions).
  m.def("ragged_ring_attention",
        [](std::int64_t comm_handle, const py::object& q_obj, const py::object& k_obj, const py::object& v_obj,
           const py::object& q_indptr, const py::object& kv_indptr, const py::dict& kw, const std::string& sharding,
           const std::string& refused) {
          const MPI_Comm comm = comm_of(comm_handle);
          const MPI_Comm checks = kattn::dist::library_comm(comm);
          int P = 1;
          MPI_Comm_size(comm, &P);
          kattn::Options opt;
          kattn::dist::DistOptions d;
          Dtype dtype = Dtype::float32;
          py::array q, k, v;
          std::vector<std::int64_t> q_local, kv_local;
          kattn::dist::collective_check(checks, [&] {
            if (!refused.empty()) throw kattn::Error(refused);
            q = py::array::ensure(q_obj), k = py::array::ensure(k_obj), v = py::array::ensure(v_obj);
            opt = options_of(kw);
            d.sharding = sharding_of(sharding);
            dtype = storage_of(q, "q");
            if (dtype != Dtype::float32 && dtype != Dtype::float64)
              throw kattn::Error("q: the ring over a ragged batch runs in float32 or float64");
            require_same_dtype(k, "k", q, "q");
            require_same_dtype(v, "v", q, "q");
            q_local = kattn::dist::ragged_local_indptr(indptr_of(q_indptr, "q_indptr"), P, d.sharding, "q_indptr");
            kv_local = kattn::dist::ragged_local_indptr(indptr_of(kv_indptr, "kv_indptr"), P, d.sharding, "kv_indptr");
          });
          return with_dtype(dtype, [&](auto t) {
            using T = decltype(t);
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
              kattn::dist::collective_agree(checks, {kattn::dist::Agreed::dtype<T>("q")});
              return ragged_as<T>(comm, q, k, v, q_local, kv_local, opt, d);
            } else {
              return py::tuple();  // refused above
            }
          });
        });
  // The packed rows of a ragged batch (indptr [B + 1]) that `rank` of `ranks` holds, in its local order.
  m.def("ragged_positions", [](const py::object& indptr, int ranks, int rank, const std::string& sharding) {
    if (ranks < 1 || rank < 0 || rank >= ranks)
      throw kattn::Error("rank: expected 0 .. " + std::to_string(ranks - 1) + ", got " + std::to_string(rank));
    const std::vector<std::int64_t> rows =
        kattn::dist::ragged_positions(indptr_of(indptr, "indptr"), rank, ranks, sharding_of(sharding), "indptr");
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
