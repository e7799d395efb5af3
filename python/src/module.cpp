// kattn's Python module (kattn._kattn; the package kattn wraps it and owns the signatures): the
// single-process calls over NumPy arrays, dense, ragged and paged keys, their backward, cascades,
// the merge of partial states and the planner. Every one of them takes 16-bit storage too
// (dtypes.hpp says which combinations). Kokkos starts on import and stops at exit; the GIL is
// released while the kernels run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>

#include "arrays.hpp"
#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/merge.hpp"
#include "kattn/plan_splits.hpp"
#include "kattn/version.hpp"

#ifdef KATTN_PYTHON_WITH_MPI
void bind_dist(pybind11::module_& m);
#endif

namespace {

using namespace kattn_python;

py::dict plan_dict(const kattn::SplitPlan& p) {
  py::dict d;
  d["splits"] = p.splits, d["chunk"] = p.chunk, d["units"] = p.units, d["units_unsplit"] = p.units_unsplit;
  d["processors"] = p.processors, d["reason"] = p.reason;
  return d;
}

py::dict backward_dict(const kattn::BackwardInfo& b) {
  py::dict d;
  d["dq_strategy"] = kattn::name(b.dq), d["deterministic"] = b.deterministic, d["chunks"] = b.chunks;
  d["block_q"] = b.block_q, d["block_k"] = b.block_k, d["workspace_bytes"] = b.workspace_bytes;
  return d;
}

kattn::BackwardOptions backward_options(bool deterministic) {
  kattn::BackwardOptions b;
  b.deterministic = deterministic;
  return b;
}

// ---- dense: q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D] in layout L; lse [B, Hq, Nq]

// Q: the storage of q and o, KV: that of k and v; lse in accumulate_t<Q>.
template <class Q, class KV>
py::tuple dense_forward(const py::array& q, const py::array& k, const py::array& v, const Layout& L,
                        const kattn::Options& opt) {
  using Acc = kattn::accumulate_t<Q>;
  const auto qv = view4<Q>(q, "q", L);
  const auto kv = view4<KV>(k, "k", L), vv = view4<KV>(v, "v", L);
  py::array o = new4<Q>(qv.extent(0), qv.extent(1), qv.extent(2), vv.extent(3), L);
  py::array lse = new_array<Acc>({qv.extent(0), qv.extent(2), qv.extent(1)});
  const auto ov = view4<Q>(o, "o", L);
  const auto lv = view_n<Acc, 3>(lse, "lse");
  kattn::SplitPlan plan;
  run_released([&] { plan = kattn::attention(Space(), qv, kattn::kv::dense(kv, vv), ov, lv, opt); });
  return py::make_tuple(o, lse, plan_dict(plan));
}

// T: the storage of every array but lse, which is in accumulate_t<T>; the gradients come back in T.
template <class T>
py::tuple dense_backward(const py::array& q, const py::array& k, const py::array& v, const py::array& o,
                         const py::array& lse, const py::array& dout, const Layout& L, const kattn::Options& opt,
                         bool deterministic) {
  const auto qv = view4<T>(q, "q", L), kv = view4<T>(k, "k", L), vv = view4<T>(v, "v", L);
  const auto ov = view4<T>(o, "o", L), dov = view4<T>(dout, "dout", L);
  const auto lv = view_n<kattn::accumulate_t<T>, 3>(lse, "lse");
  py::array dq = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), qv.extent(3), L);
  py::array dk = new4<T>(kv.extent(0), kv.extent(1), kv.extent(2), kv.extent(3), L);
  py::array dv = new4<T>(vv.extent(0), vv.extent(1), vv.extent(2), vv.extent(3), L);
  const auto dqv = view4<T>(dq, "dq", L), dkv = view4<T>(dk, "dk", L), dvv = view4<T>(dv, "dv", L);
  kattn::BackwardInfo info;
  run_released([&] {
    info = kattn::attention_backward(Space(), qv, kattn::kv::dense(kv, vv), ov, lv, dov, dqv, dkv, dvv, opt,
                                     backward_options(deterministic));
  });
  return py::make_tuple(dq, dk, dv, backward_dict(info));
}

// ---- ragged and paged: q [total_q, Hq, D]; lse [total_q, Hq]; k, v [total_kv, Hkv, D] (ragged)
// or pages [num_pages, page_size, Hkv, D] (paged). The layout is made once per call.

struct RaggedIndex {
  IndexArray q_indptr, kv_indptr;
  RaggedIndex(const py::object& qi, const py::object& ki)
      : q_indptr(index_array(qi, "q_indptr")), kv_indptr(index_array(ki, "kv_indptr")) {}
  template <class KV, class VV>
  auto kv(const KV& k, const VV& v) const {
    return kattn::kv::ragged(k, v, kattn::make_ragged_layout<Kokkos::HostSpace>(q_indptr.view, kv_indptr.view));
  }
};

struct PagedIndex {
  IndexArray q_indptr, page_indptr, page_indices, last_page_len;
  PagedIndex(const py::object& qi, const py::object& pi, const py::object& idx, const py::object& last)
      : q_indptr(index_array(qi, "q_indptr")),
        page_indptr(index_array(pi, "kv_page_indptr")),
        page_indices(index_array(idx, "kv_page_indices")),
        last_page_len(index_array(last, "kv_last_page_len")) {}
  template <class KV, class VV>
  auto kv(const KV& k, const VV& v) const {
    return kattn::kv::paged(k, v,
                            kattn::make_paged_layout<Kokkos::HostSpace>(q_indptr.view, page_indptr.view,
                                                                        page_indices.view, last_page_len.view,
                                                                        static_cast<std::int64_t>(k.extent(1))));
  }
};

template <class Q, class KV, int KR, class Index>
py::tuple packed_forward(const py::array& q, const py::array& k, const py::array& v, const Index& index,
                         const kattn::Options& opt) {
  using Acc = kattn::accumulate_t<Q>;
  const auto qv = view_n<Q, 3>(q, "q");
  const auto kv = view_n<KV, KR>(k, "k"), vv = view_n<KV, KR>(v, "v");
  py::array o = new_array<Q>({qv.extent(0), qv.extent(1), vv.extent(KR - 1)});
  py::array lse = new_array<Acc>({qv.extent(0), qv.extent(1)});
  const auto ov = view_n<Q, 3>(o, "o");
  const auto lv = view_n<Acc, 2>(lse, "lse");
  const auto keys = index.kv(kv, vv);
  kattn::SplitPlan plan;
  run_released([&] { plan = kattn::attention(Space(), qv, keys, ov, lv, opt); });
  return py::make_tuple(o, lse, plan_dict(plan));
}

template <class T, int KR, class Index>
py::tuple packed_backward(const py::array& q, const py::array& k, const py::array& v, const py::array& o,
                          const py::array& lse, const py::array& dout, const Index& index, const kattn::Options& opt,
                          bool deterministic) {
  const auto qv = view_n<T, 3>(q, "q"), ov = view_n<T, 3>(o, "o"), dov = view_n<T, 3>(dout, "dout");
  const auto kv = view_n<T, KR>(k, "k"), vv = view_n<T, KR>(v, "v");
  const auto lv = view_n<kattn::accumulate_t<T>, 2>(lse, "lse");
  py::array dq = new_array<T>({qv.extent(0), qv.extent(1), qv.extent(2)});
  py::array dk(numpy_dtype<T>(), std::vector<py::ssize_t>(k.shape(), k.shape() + KR));
  py::array dv(numpy_dtype<T>(), std::vector<py::ssize_t>(v.shape(), v.shape() + KR));
  const auto dqv = view_n<T, 3>(dq, "dq");
  const auto dkv = view_n<T, KR>(dk, "dk"), dvv = view_n<T, KR>(dv, "dv");
  const auto keys = index.kv(kv, vv);
  kattn::BackwardInfo info;
  run_released([&] {
    info = kattn::attention_backward(Space(), qv, keys, ov, lv, dov, dqv, dkv, dvv, opt,
                                     backward_options(deterministic));
  });
  return py::make_tuple(dq, dk, dv, backward_dict(info));
}

// Cascade: a prefix k_prefix, v_prefix [Np, Hkv, D] every sequence sees, then each sequence's own
// keys (ragged or paged, KR the rank of their arrays). Q: the storage of q and o, KV: that of the
// prefix and the suffix; lse in accumulate_t<Q>.
template <class Q, class KV, int KR, class Index>
py::tuple cascade_forward(const py::array& q, const py::array& k_prefix, const py::array& v_prefix,
                          const py::array& k, const py::array& v, const Index& index, const kattn::Options& opt) {
  using Acc = kattn::accumulate_t<Q>;
  const auto qv = view_n<Q, 3>(q, "q");
  const auto kp = view_n<KV, 3>(k_prefix, "k_prefix"), vp = view_n<KV, 3>(v_prefix, "v_prefix");
  const auto kv = view_n<KV, KR>(k, "k"), vv = view_n<KV, KR>(v, "v");
  py::array o = new_array<Q>({qv.extent(0), qv.extent(1), vv.extent(KR - 1)});
  py::array lse = new_array<Acc>({qv.extent(0), qv.extent(1)});
  const auto ov = view_n<Q, 3>(o, "o");
  const auto lv = view_n<Acc, 2>(lse, "lse");
  const auto keys = kattn::kv::cascade(kp, vp, index.kv(kv, vv));
  run_released([&] { kattn::attention(Space(), qv, keys, ov, lv, opt); });
  return py::make_tuple(o, lse);
}

// f(Q{}, KV{}) for the storage of a forward call (kattn::bf16 and kattn::fp16 included).
template <class F>
py::tuple by_storage(const py::array& q, const py::array& k, const py::array& v, F&& f) {
  return with_storage(forward_storage(q, k, v), f);
}

// The same for a cascade, whose prefix is stored as its suffix's keys and values.
template <class F>
py::tuple by_cascade_storage(const py::array& q, const py::array& k_prefix, const py::array& v_prefix,
                             const py::array& k, const py::array& v, F&& f) {
  const ForwardStorage s = forward_storage(q, k, v);
  require_same_dtype(k_prefix, "k_prefix", k, "k");
  require_same_dtype(v_prefix, "v_prefix", k, "k");
  return with_storage(s, f);
}

// f(T{}) for the storage of a backward call (kattn::bf16 and kattn::fp16 included).
template <class F>
py::tuple by_backward_storage(const py::array& q, const py::array& k, const py::array& v, const py::array& o,
                              const py::array& lse, const py::array& dout, F&& f) {
  return with_dtype(backward_storage(q, k, v, o, lse, dout), f);
}

// P: the storage of the parts' o, S: that of o; every lse in accumulate_t<S>.
template <class P, class S>
py::tuple merge_as(const py::array& o_parts, const py::array& lse_parts) {
  using Acc = kattn::accumulate_t<S>;
  const auto ov = view_n<P, 4>(o_parts, "o_parts");
  const auto lv = view_n<Acc, 3>(lse_parts, "lse_parts");
  py::array o = new_array<S>({ov.extent(1), ov.extent(2), ov.extent(3)});
  py::array lse = new_array<Acc>({ov.extent(1), ov.extent(2)});
  const auto o_out = view_n<S, 3>(o, "o");
  const auto lse_out = view_n<Acc, 2>(lse, "lse");
  run_released([&] { kattn::merge(Space(), ov, lv, o_out, lse_out); });
  return py::make_tuple(o, lse);
}

}  // namespace

PYBIND11_MODULE(_kattn, m) {
  m.doc() = "kattn: exact attention (FlashAttention's tiling) on Kokkos; see the package kattn";
  if (!Kokkos::is_initialized()) {
    Kokkos::initialize();
    // Stop Kokkos when the interpreter exits (after every array the module made is gone).
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
      if (Kokkos::is_initialized()) Kokkos::finalize();
    }));
  }
  // kattn.Error: a ValueError carrying kattn's message (it names the argument).
  py::register_exception<kattn::Error>(m, "Error", PyExc_ValueError);
  register_bfloat16(m);
  bind_workspace(m);

  m.def("version", [] { return kattn::build_info().version; });
  m.def("build_info", [] {
    const kattn::BuildInfo b = kattn::build_info();
    py::dict d;
    d["version"] = b.version, d["kokkos"] = b.kokkos_version, d["kokkos_kernels"] = b.kokkos_kernels_version;
    d["backends"] = b.backends, d["options"] = b.options, d["compiler"] = b.compiler, d["build"] = b.build;
    return d;
  });

  m.def("attention", [](const py::array& q, const py::array& k, const py::array& v, const std::string& layout,
                        const py::dict& kw) {
    const kattn::Options opt = options_of(kw);
    const Layout L = Layout::parse(layout);
    return by_storage(q, k, v, [&](auto tq, auto tkv) {
      return dense_forward<decltype(tq), decltype(tkv)>(q, k, v, L, opt);
    });
  });
  m.def("attention_backward", [](const py::array& q, const py::array& k, const py::array& v, const py::array& o,
                                 const py::array& lse, const py::array& dout, const std::string& layout,
                                 const py::dict& kw, bool deterministic) {
    const kattn::Options opt = options_of(kw);
    const Layout L = Layout::parse(layout);
    return by_backward_storage(q, k, v, o, lse, dout, [&](auto t) {
      return dense_backward<decltype(t)>(q, k, v, o, lse, dout, L, opt, deterministic);
    });
  });

  m.def("ragged_attention", [](const py::array& q, const py::array& k, const py::array& v, const py::object& q_indptr,
                               const py::object& kv_indptr, const py::dict& kw) {
    const kattn::Options opt = options_of(kw);
    const RaggedIndex index(q_indptr, kv_indptr);
    return by_storage(q, k, v, [&](auto tq, auto tkv) {
      return packed_forward<decltype(tq), decltype(tkv), 3>(q, k, v, index, opt);
    });
  });
  m.def("ragged_attention_backward",
        [](const py::array& q, const py::array& k, const py::array& v, const py::array& o, const py::array& lse,
           const py::array& dout, const py::object& q_indptr, const py::object& kv_indptr, const py::dict& kw,
           bool deterministic) {
          const kattn::Options opt = options_of(kw);
          const RaggedIndex index(q_indptr, kv_indptr);
          return by_backward_storage(q, k, v, o, lse, dout, [&](auto t) {
            return packed_backward<decltype(t), 3>(q, k, v, o, lse, dout, index, opt, deterministic);
          });
        });

  m.def("paged_attention", [](const py::array& q, const py::array& k_pages, const py::array& v_pages,
                              const py::object& q_indptr, const py::object& page_indptr,
                              const py::object& page_indices, const py::object& last_page_len, const py::dict& kw) {
    const kattn::Options opt = options_of(kw);
    const PagedIndex index(q_indptr, page_indptr, page_indices, last_page_len);
    return by_storage(q, k_pages, v_pages, [&](auto tq, auto tkv) {
      return packed_forward<decltype(tq), decltype(tkv), 4>(q, k_pages, v_pages, index, opt);
    });
  });
  m.def("paged_attention_backward",
        [](const py::array& q, const py::array& k_pages, const py::array& v_pages, const py::array& o,
           const py::array& lse, const py::array& dout, const py::object& q_indptr, const py::object& page_indptr,
           const py::object& page_indices, const py::object& last_page_len, const py::dict& kw, bool deterministic) {
          const kattn::Options opt = options_of(kw);
          const PagedIndex index(q_indptr, page_indptr, page_indices, last_page_len);
          return by_backward_storage(q, k_pages, v_pages, o, lse, dout, [&](auto t) {
            return packed_backward<decltype(t), 4>(q, k_pages, v_pages, o, lse, dout, index, opt, deterministic);
          });
        });

  m.def("cascade_ragged_attention", [](const py::array& q, const py::array& k_prefix, const py::array& v_prefix,
                                       const py::array& k, const py::array& v, const py::object& q_indptr,
                                       const py::object& kv_indptr, const py::dict& kw) {
    const kattn::Options opt = options_of(kw);
    const RaggedIndex index(q_indptr, kv_indptr);
    return by_cascade_storage(q, k_prefix, v_prefix, k, v, [&](auto tq, auto tkv) {
      return cascade_forward<decltype(tq), decltype(tkv), 3>(q, k_prefix, v_prefix, k, v, index, opt);
    });
  });
  m.def("cascade_paged_attention", [](const py::array& q, const py::array& k_prefix, const py::array& v_prefix,
                                      const py::array& k_pages, const py::array& v_pages, const py::object& q_indptr,
                                      const py::object& page_indptr, const py::object& page_indices,
                                      const py::object& last_page_len, const py::dict& kw) {
    const kattn::Options opt = options_of(kw);
    const PagedIndex index(q_indptr, page_indptr, page_indices, last_page_len);
    return by_cascade_storage(q, k_prefix, v_prefix, k_pages, v_pages, [&](auto tq, auto tkv) {
      return cascade_forward<decltype(tq), decltype(tkv), 4>(q, k_prefix, v_prefix, k_pages, v_pages, index, opt);
    });
  });

  // o_dtype: o's dtype by name, "" for that of o_parts.
  m.def("merge_states", [](const py::array& o_parts, const py::array& lse_parts, const std::string& o_dtype) {
    return with_merge_storage(merge_storage(o_parts, lse_parts, o_dtype), [&](auto tp, auto to) {
      return merge_as<decltype(tp), decltype(to)>(o_parts, lse_parts);
    });
  });

  m.def("plan", [](std::int64_t batch, std::int64_t q_len, std::int64_t kv_len, int heads_q, int heads_kv,
                   int head_dim, const std::string& dtype, const py::dict& kw, int processors) {
    const kattn::Options opt = options_of(kw);
    if (processors < 0) throw kattn::Error("processors: expected 0 (this machine's) or more, got " + std::to_string(processors));
    const auto plan_in = [&](auto storage) {  // 16-bit storage tiles as float32 does (it computes in float)
      return plan_dict(kattn::plan_splits<decltype(storage)>(Space(), batch, q_len, kv_len, heads_q, heads_kv,
                                                             head_dim, opt, processors));
    };
    return with_dtype(dtype_named(dtype, "dtype"), plan_in);
  });

#ifdef KATTN_PYTHON_WITH_MPI
  bind_dist(m);
#endif
}
