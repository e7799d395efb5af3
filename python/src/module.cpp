// kattn's Python module (kattn._kattn; the package kattn wraps it and owns the signatures): the
// single-process calls, dense, ragged and paged keys, their backward, cascades, the merge of
// partial states and the planner, over NumPy arrays on the host or, in a build whose Kokkos has
// CUDA or HIP, over PyTorch's tensors on that GPU (arrays.hpp: Array, Target). Every one of them
// takes 16-bit storage too (dtypes.hpp says which combinations). Kokkos starts on import and stops
// at exit; the GIL is released while the kernels run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>

#include "arrays.hpp"
#include "backward_outputs.hpp"
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

// Each call below runs on `space` (the host, or a GPU stream: Target::run_on) over views in its
// memory space, makes its outputs where the target makes them and returns their owners.

// ---- dense: q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D] in layout L; lse [B, Hq, Nq]

// Q: the storage of q and o, KV: that of k and v; lse in accumulate_t<Q>.
template <class Q, class KV, class ExecSpace>
py::tuple dense_forward(const ExecSpace& space, const Target& t, const Array& q, const Array& k, const Array& v,
                        const Layout& L, const kattn::Options& opt) {
  using Mem = typename ExecSpace::memory_space;
  using Acc = kattn::accumulate_t<Q>;
  const auto qv = view4<Q, Mem>(q, "q", L);
  const auto kv = view4<KV, Mem>(k, "k", L), vv = view4<KV, Mem>(v, "v", L);
  const Array o = t.output<Q>(L.shape(qv.extent(0), qv.extent(1), qv.extent(2), vv.extent(3)), "o");
  const Array lse = t.output<Acc>(extents({qv.extent(0), qv.extent(2), qv.extent(1)}), "lse");
  const auto ov = view4<Q, Mem>(o, "o", L);
  const auto lv = view_n<Acc, 3, Mem>(lse, "lse");
  kattn::SplitPlan plan;
  run_released(space, [&] { plan = kattn::attention(space, qv, kattn::kv::dense(kv, vv), ov, lv, opt); });
  return py::make_tuple(o.owner, lse.owner, plan_dict(plan));
}

// T: the storage of every array but lse, which is in accumulate_t<T>; the gradients come back in T
// (with bias_grad, the bias's in its own dtype: the info's "dbias").
template <class T, class ExecSpace>
py::tuple dense_backward(const ExecSpace& space, const Target& t, const Array& q, const Array& k, const Array& v,
                         const Array& o, const Array& lse, const Array& dout, const Layout& L,
                         const kattn::Options& opt, bool deterministic, bool bias_grad) {
  using Mem = typename ExecSpace::memory_space;
  const auto qv = view4<T, Mem>(q, "q", L), kv = view4<T, Mem>(k, "k", L), vv = view4<T, Mem>(v, "v", L);
  const auto ov = view4<T, Mem>(o, "o", L), dov = view4<T, Mem>(dout, "dout", L);
  const auto lv = view_n<kattn::accumulate_t<T>, 3, Mem>(lse, "lse");
  const Array dq = t.output<T>(q.shape, "dq"), dk = t.output<T>(k.shape, "dk"), dv = t.output<T>(v.shape, "dv");
  const auto dqv = view4<T, Mem>(dq, "dq", L), dkv = view4<T, Mem>(dk, "dk", L), dvv = view4<T, Mem>(dv, "dv", L);
  const BackwardOutputs out(t, opt.bias, deterministic, bias_grad);
  kattn::BackwardInfo info;
  run_released(space, [&] {
    info = kattn::attention_backward(space, qv, kattn::kv::dense(kv, vv), ov, lv, dov, dqv, dkv, dvv, opt,
                                     out.options());
  });
  return py::make_tuple(dq.owner, dk.owner, dv.owner, out.info(info));
}

// ---- ragged and paged: q [total_q, Hq, D]; lse [total_q, Hq]; k, v [total_kv, Hkv, D] (ragged)
// or pages [num_pages, page_size, Hkv, D] (paged). The layout is made once per call, its index
// arrays on the host (copied to the space's memory).

struct RaggedIndex {
  IndexArray q_indptr, kv_indptr;
  RaggedIndex(const py::object& qi, const py::object& ki)
      : q_indptr(index_array(qi, "q_indptr")), kv_indptr(index_array(ki, "kv_indptr")) {}
  template <class Mem, class KV, class VV>
  auto kv(const KV& k, const VV& v) const {
    return kattn::kv::ragged(k, v, kattn::make_ragged_layout<Mem>(q_indptr.view, kv_indptr.view));
  }
};

struct PagedIndex {
  IndexArray q_indptr, page_indptr, page_indices, last_page_len;
  PagedIndex(const py::object& qi, const py::object& pi, const py::object& idx, const py::object& last)
      : q_indptr(index_array(qi, "q_indptr")),
        page_indptr(index_array(pi, "kv_page_indptr")),
        page_indices(index_array(idx, "kv_page_indices")),
        last_page_len(index_array(last, "kv_last_page_len")) {}
  template <class Mem, class KV, class VV>
  auto kv(const KV& k, const VV& v) const {
    return kattn::kv::paged(k, v,
                            kattn::make_paged_layout<Mem>(q_indptr.view, page_indptr.view, page_indices.view,
                                                          last_page_len.view, static_cast<std::int64_t>(k.extent(1))));
  }
};

template <class Q, class KV, int KR, class Index, class ExecSpace>
py::tuple packed_forward(const ExecSpace& space, const Target& t, const Array& q, const Array& k, const Array& v,
                         const Index& index, const kattn::Options& opt) {
  using Mem = typename ExecSpace::memory_space;
  using Acc = kattn::accumulate_t<Q>;
  const auto qv = view_n<Q, 3, Mem>(q, "q");
  const auto kv = view_n<KV, KR, Mem>(k, "k"), vv = view_n<KV, KR, Mem>(v, "v");
  const Array o = t.output<Q>(extents({qv.extent(0), qv.extent(1), vv.extent(KR - 1)}), "o");
  const Array lse = t.output<Acc>(extents({qv.extent(0), qv.extent(1)}), "lse");
  const auto ov = view_n<Q, 3, Mem>(o, "o");
  const auto lv = view_n<Acc, 2, Mem>(lse, "lse");
  const auto keys = index.template kv<Mem>(kv, vv);
  kattn::SplitPlan plan;
  run_released(space, [&] { plan = kattn::attention(space, qv, keys, ov, lv, opt); });
  return py::make_tuple(o.owner, lse.owner, plan_dict(plan));
}

template <class T, int KR, class Index, class ExecSpace>
py::tuple packed_backward(const ExecSpace& space, const Target& t, const Array& q, const Array& k, const Array& v,
                          const Array& o, const Array& lse, const Array& dout, const Index& index,
                          const kattn::Options& opt, bool deterministic, bool bias_grad) {
  using Mem = typename ExecSpace::memory_space;
  const auto qv = view_n<T, 3, Mem>(q, "q"), ov = view_n<T, 3, Mem>(o, "o"), dov = view_n<T, 3, Mem>(dout, "dout");
  const auto kv = view_n<T, KR, Mem>(k, "k"), vv = view_n<T, KR, Mem>(v, "v");
  const auto lv = view_n<kattn::accumulate_t<T>, 2, Mem>(lse, "lse");
  const Array dq = t.output<T>(q.shape, "dq"), dk = t.output<T>(k.shape, "dk"), dv = t.output<T>(v.shape, "dv");
  const auto dqv = view_n<T, 3, Mem>(dq, "dq");
  const auto dkv = view_n<T, KR, Mem>(dk, "dk"), dvv = view_n<T, KR, Mem>(dv, "dv");
  const auto keys = index.template kv<Mem>(kv, vv);
  const BackwardOutputs out(t, opt.bias, deterministic, bias_grad);
  kattn::BackwardInfo info;
  run_released(space, [&] {
    info = kattn::attention_backward(space, qv, keys, ov, lv, dov, dqv, dkv, dvv, opt, out.options());
  });
  return py::make_tuple(dq.owner, dk.owner, dv.owner, out.info(info));
}

// Cascade: a prefix k_prefix, v_prefix [Np, Hkv, D] every sequence sees, then each sequence's own
// keys (ragged or paged, KR the rank of their arrays). Q: the storage of q and o, KV: that of the
// prefix and the suffix; lse in accumulate_t<Q>.
template <class Q, class KV, int KR, class Index, class ExecSpace>
py::tuple cascade_forward(const ExecSpace& space, const Target& t, const Array& q, const Array& k_prefix,
                          const Array& v_prefix, const Array& k, const Array& v, const Index& index,
                          const kattn::Options& opt) {
  using Mem = typename ExecSpace::memory_space;
  using Acc = kattn::accumulate_t<Q>;
  const auto qv = view_n<Q, 3, Mem>(q, "q");
  const auto kp = view_n<KV, 3, Mem>(k_prefix, "k_prefix"), vp = view_n<KV, 3, Mem>(v_prefix, "v_prefix");
  const auto kv = view_n<KV, KR, Mem>(k, "k"), vv = view_n<KV, KR, Mem>(v, "v");
  const Array o = t.output<Q>(extents({qv.extent(0), qv.extent(1), vv.extent(KR - 1)}), "o");
  const Array lse = t.output<Acc>(extents({qv.extent(0), qv.extent(1)}), "lse");
  const auto ov = view_n<Q, 3, Mem>(o, "o");
  const auto lv = view_n<Acc, 2, Mem>(lse, "lse");
  const auto keys = kattn::kv::cascade(kp, vp, index.template kv<Mem>(kv, vv));
  run_released(space, [&] { kattn::attention(space, qv, keys, ov, lv, opt); });
  return py::make_tuple(o.owner, lse.owner);
}

// P: the storage of the parts' o, S: that of o; every lse in accumulate_t<S>.
template <class P, class S, class ExecSpace>
py::tuple merge_as(const ExecSpace& space, const Target& t, const Array& o_parts, const Array& lse_parts) {
  using Mem = typename ExecSpace::memory_space;
  using Acc = kattn::accumulate_t<S>;
  const auto ov = view_n<P, 4, Mem>(o_parts, "o_parts");
  const auto lv = view_n<Acc, 3, Mem>(lse_parts, "lse_parts");
  const Array o = t.output<S>(extents({ov.extent(1), ov.extent(2), ov.extent(3)}), "o");
  const Array lse = t.output<Acc>(extents({ov.extent(1), ov.extent(2)}), "lse");
  const auto o_out = view_n<S, 3, Mem>(o, "o");
  const auto lse_out = view_n<Acc, 2, Mem>(lse, "lse");
  run_released(space, [&] { kattn::merge(space, ov, lv, o_out, lse_out); });
  return py::make_tuple(o.owner, lse.owner);
}

// The arguments of a call, read as its target reads them (q first: its name is the call's).
struct Call {
  Target target;
  std::vector<Array> arrays;
  Call(const py::object& target, std::initializer_list<std::pair<py::object, const char*>> named)
      : target(Target::of(target)) {
    for (const auto& [obj, name] : named) arrays.push_back(this->target.input(obj, name));
  }
  const Array& operator[](std::size_t i) const { return arrays[i]; }
  // f(space) on the call's target.
  template <class F>
  py::tuple run(F&& f) const {
    return target.run_on(f);
  }
};

// The storage of a forward call, of a cascade (its prefix stored as its suffix's keys and values)
// and of a backward call.
ForwardStorage forward_storage_of(const Array& q, const Array& k, const Array& v) {
  return forward_storage(q.dtype, k.dtype, v.dtype);
}
ForwardStorage cascade_storage_of(const Array& q, const Array& k_prefix, const Array& v_prefix, const Array& k,
                                  const Array& v) {
  const ForwardStorage s = forward_storage_of(q, k, v);
  require_same_dtype(k_prefix.dtype, "k_prefix", k.dtype, "k");
  require_same_dtype(v_prefix.dtype, "v_prefix", k.dtype, "k");
  return s;
}
Dtype backward_storage_of(const Call& c) {
  return backward_storage(c[0].dtype, c[1].dtype, c[2].dtype, c[3].dtype, c[4].dtype, c[5].dtype);
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

  // The GPU backend whose tensors the calls take ("cuda", "hip", or "" for a host-only build) and
  // the GPU Kokkos runs on (-1 without one).
#ifdef KATTN_PYTHON_DEVICE
  m.attr("device") = KATTN_PYTHON_DEVICE;
  m.def("device_id", [] { return device_id(); });
#else
  m.attr("device") = "";
  m.def("device_id", [] { return -1; });
#endif

  m.def("version", [] { return kattn::build_info().version; });
  m.def("build_info", [] {
    const kattn::BuildInfo b = kattn::build_info();
    py::dict d;
    d["version"] = b.version, d["kokkos"] = b.kokkos_version, d["kokkos_kernels"] = b.kokkos_kernels_version;
    d["backends"] = b.backends, d["options"] = b.options, d["compiler"] = b.compiler, d["build"] = b.build;
    return d;
  });

  // Every attention call takes its arrays (NumPy arrays, or tensor descriptors on a GPU), what it
  // needs besides, and last its target (None: the host; see Target).
  m.def("attention", [](const py::object& q, const py::object& k, const py::object& v, const std::string& layout,
                        const py::dict& kw, const py::object& target) {
    const kattn::Options opt = options_of(kw);
    const Layout L = Layout::parse(layout);
    const Call c(target, {{q, "q"}, {k, "k"}, {v, "v"}});
    return c.run([&](const auto& space) {
      return with_storage(forward_storage_of(c[0], c[1], c[2]), [&](auto tq, auto tkv) {
        return dense_forward<decltype(tq), decltype(tkv)>(space, c.target, c[0], c[1], c[2], L, opt);
      });
    });
  });
  m.def("attention_backward", [](const py::object& q, const py::object& k, const py::object& v, const py::object& o,
                                 const py::object& lse, const py::object& dout, const std::string& layout,
                                 const py::dict& kw, bool deterministic, const py::object& target, bool bias_grad) {
    const kattn::Options opt = options_of(kw);
    const Layout L = Layout::parse(layout);
    const Call c(target, {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {lse, "lse"}, {dout, "dout"}});
    return c.run([&](const auto& space) {
      return with_dtype(backward_storage_of(c), [&](auto t) {
        return dense_backward<decltype(t)>(space, c.target, c[0], c[1], c[2], c[3], c[4], c[5], L, opt,
                                           deterministic, bias_grad);
      });
    });
  }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("dout"), py::arg("layout"),
     py::arg("kw"), py::arg("deterministic"), py::arg("target"), py::arg("bias_grad") = false);

  m.def("ragged_attention", [](const py::object& q, const py::object& k, const py::object& v,
                               const py::object& q_indptr, const py::object& kv_indptr, const py::dict& kw,
                               const py::object& target) {
    const kattn::Options opt = options_of(kw);
    const Call c(target, {{q, "q"}, {k, "k"}, {v, "v"}});
    const RaggedIndex index(q_indptr, kv_indptr);
    return c.run([&](const auto& space) {
      return with_storage(forward_storage_of(c[0], c[1], c[2]), [&](auto tq, auto tkv) {
        return packed_forward<decltype(tq), decltype(tkv), 3>(space, c.target, c[0], c[1], c[2], index, opt);
      });
    });
  });
  m.def("ragged_attention_backward",
        [](const py::object& q, const py::object& k, const py::object& v, const py::object& o, const py::object& lse,
           const py::object& dout, const py::object& q_indptr, const py::object& kv_indptr, const py::dict& kw,
           bool deterministic, const py::object& target, bool bias_grad) {
          const kattn::Options opt = options_of(kw);
          const Call c(target, {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {lse, "lse"}, {dout, "dout"}});
          const RaggedIndex index(q_indptr, kv_indptr);
          return c.run([&](const auto& space) {
            return with_dtype(backward_storage_of(c), [&](auto t) {
              return packed_backward<decltype(t), 3>(space, c.target, c[0], c[1], c[2], c[3], c[4], c[5], index, opt,
                                                     deterministic, bias_grad);
            });
          });
        },
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("dout"), py::arg("q_indptr"),
        py::arg("kv_indptr"), py::arg("kw"), py::arg("deterministic"), py::arg("target"), py::arg("bias_grad") = false);

  m.def("paged_attention", [](const py::object& q, const py::object& k_pages, const py::object& v_pages,
                              const py::object& q_indptr, const py::object& page_indptr,
                              const py::object& page_indices, const py::object& last_page_len, const py::dict& kw,
                              const py::object& target) {
    const kattn::Options opt = options_of(kw);
    const Call c(target, {{q, "q"}, {k_pages, "k"}, {v_pages, "v"}});
    const PagedIndex index(q_indptr, page_indptr, page_indices, last_page_len);
    return c.run([&](const auto& space) {
      return with_storage(forward_storage_of(c[0], c[1], c[2]), [&](auto tq, auto tkv) {
        return packed_forward<decltype(tq), decltype(tkv), 4>(space, c.target, c[0], c[1], c[2], index, opt);
      });
    });
  });
  m.def("paged_attention_backward",
        [](const py::object& q, const py::object& k_pages, const py::object& v_pages, const py::object& o,
           const py::object& lse, const py::object& dout, const py::object& q_indptr, const py::object& page_indptr,
           const py::object& page_indices, const py::object& last_page_len, const py::dict& kw, bool deterministic,
           const py::object& target, bool bias_grad) {
          const kattn::Options opt = options_of(kw);
          const Call c(target, {{q, "q"}, {k_pages, "k"}, {v_pages, "v"}, {o, "o"}, {lse, "lse"}, {dout, "dout"}});
          const PagedIndex index(q_indptr, page_indptr, page_indices, last_page_len);
          return c.run([&](const auto& space) {
            return with_dtype(backward_storage_of(c), [&](auto t) {
              return packed_backward<decltype(t), 4>(space, c.target, c[0], c[1], c[2], c[3], c[4], c[5], index, opt,
                                                     deterministic, bias_grad);
            });
          });
        },
        py::arg("q"), py::arg("k_pages"), py::arg("v_pages"), py::arg("o"), py::arg("lse"), py::arg("dout"),
        py::arg("q_indptr"), py::arg("page_indptr"), py::arg("page_indices"), py::arg("last_page_len"), py::arg("kw"),
        py::arg("deterministic"), py::arg("target"), py::arg("bias_grad") = false);

  m.def("cascade_ragged_attention", [](const py::object& q, const py::object& k_prefix, const py::object& v_prefix,
                                       const py::object& k, const py::object& v, const py::object& q_indptr,
                                       const py::object& kv_indptr, const py::dict& kw, const py::object& target) {
    const kattn::Options opt = options_of(kw);
    const Call c(target, {{q, "q"}, {k_prefix, "k_prefix"}, {v_prefix, "v_prefix"}, {k, "k"}, {v, "v"}});
    const RaggedIndex index(q_indptr, kv_indptr);
    return c.run([&](const auto& space) {
      return with_storage(cascade_storage_of(c[0], c[1], c[2], c[3], c[4]), [&](auto tq, auto tkv) {
        return cascade_forward<decltype(tq), decltype(tkv), 3>(space, c.target, c[0], c[1], c[2], c[3], c[4], index,
                                                               opt);
      });
    });
  });
  m.def("cascade_paged_attention", [](const py::object& q, const py::object& k_prefix, const py::object& v_prefix,
                                      const py::object& k_pages, const py::object& v_pages, const py::object& q_indptr,
                                      const py::object& page_indptr, const py::object& page_indices,
                                      const py::object& last_page_len, const py::dict& kw, const py::object& target) {
    const kattn::Options opt = options_of(kw);
    const Call c(target,
                 {{q, "q"}, {k_prefix, "k_prefix"}, {v_prefix, "v_prefix"}, {k_pages, "k"}, {v_pages, "v"}});
    const PagedIndex index(q_indptr, page_indptr, page_indices, last_page_len);
    return c.run([&](const auto& space) {
      return with_storage(cascade_storage_of(c[0], c[1], c[2], c[3], c[4]), [&](auto tq, auto tkv) {
        return cascade_forward<decltype(tq), decltype(tkv), 4>(space, c.target, c[0], c[1], c[2], c[3], c[4], index,
                                                               opt);
      });
    });
  });

  // o_dtype: o's dtype by name, "" for that of o_parts.
  m.def("merge_states", [](const py::object& o_parts, const py::object& lse_parts, const std::string& o_dtype,
                           const py::object& target) {
    const Call c(target, {{o_parts, "o_parts"}, {lse_parts, "lse_parts"}});
    return c.run([&](const auto& space) {
      return with_merge_storage(merge_storage(c[0].dtype, c[1].dtype, o_dtype), [&](auto tp, auto to) {
        return merge_as<decltype(tp), decltype(to)>(space, c.target, c[0], c[1]);
      });
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
