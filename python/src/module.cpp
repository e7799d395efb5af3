// kattn's Python module (kattn._kattn; the package kattn wraps it): NumPy arrays in and out, no
// copies. Inputs are viewed in place through their strides (any layout whose last, head-dim axis
// is contiguous); outputs are new C-ordered arrays in the caller's layout. Kokkos starts on import
// and stops at exit; the GIL is released while the kernels run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <Kokkos_Core.hpp>

#include <array>
#include <cstdint>
#include <string>

#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/merge.hpp"
#include "kattn/version.hpp"

namespace py = pybind11;

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
template <class T, int R>
struct Rank;
template <class T>
struct Rank<T, 2> {
  using type = T**;
};
template <class T>
struct Rank<T, 3> {
  using type = T***;
};
template <class T>
struct Rank<T, 4> {
  using type = T****;
};
template <class T, int R>
using Strided = Kokkos::View<typename Rank<T, R>::type, Kokkos::LayoutStride, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

// Axes of the library's order ([B, N, H, D] for q, k, v, o; [B, H, N] for lse) in the array.
struct Layout {
  std::array<int, 4> bnhd;  // array axis of b, n, h, d
  static Layout parse(const std::string& name) {
    if (name == "bnhd") return {{0, 1, 2, 3}};
    if (name == "bhnd") return {{0, 2, 1, 3}};
    throw kattn::Error("layout: expected \"bnhd\" or \"bhnd\", got \"" + name + "\"");
  }
};

template <class T>
const T* data_of(const py::array& a) {
  return static_cast<const T*>(a.data());
}

// A rank-R NumPy array as a strided view whose dim i is the array's axis axes[i].
template <class T, int R>
Strided<T, R> strided(const py::array& a, const char* name, const std::array<int, R>& axes) {
  if (a.ndim() != R)
    throw kattn::Error(std::string(name) + ": expected a rank-" + std::to_string(R) + " array, got rank " +
                       std::to_string(a.ndim()));
  Kokkos::LayoutStride ls;
  std::size_t packed = 1;  // an empty array's strides may read 0: then packed ones (nothing is read)
  for (int i = R - 1; i >= 0; --i) {
    const int ax = axes[i];
    if (a.strides(ax) % py::ssize_t(sizeof(T)) != 0 || a.strides(ax) < 0)
      throw kattn::Error(std::string(name) + ": strides must be non-negative multiples of the element size");
    ls.dimension[i] = static_cast<std::size_t>(a.shape(ax));
    ls.stride[i] = a.size() == 0 ? packed : static_cast<std::size_t>(a.strides(ax) / py::ssize_t(sizeof(T)));
    packed *= ls.dimension[i] > 0 ? ls.dimension[i] : 1;
  }
  return Strided<T, R>(const_cast<T*>(data_of<T>(a)), ls);
}

// q, k, v, o and their gradients in the library's [B, N, H, D] order.
template <class T>
Strided<T, 4> view4(const py::array& a, const char* name, const Layout& L) {
  return strided<T, 4>(a, name, L.bnhd);
}

// An array in its own order ([B, H, N] for lse, [S, N, H, D] for merge parts).
template <class T, int R>
Strided<T, R> view_n(const py::array& a, const char* name) {
  std::array<int, R> axes;
  for (int i = 0; i < R; ++i) axes[i] = i;
  return strided<T, R>(a, name, axes);
}

// A new C-ordered array shaped like the library's [B, N, H, D] extents in layout L.
template <class T>
py::array_t<T> new4(std::size_t b, std::size_t n, std::size_t h, std::size_t d, const Layout& L) {
  std::array<py::ssize_t, 4> shape{};
  const std::size_t ext[4] = {b, n, h, d};
  for (int i = 0; i < 4; ++i) shape[L.bnhd[i]] = py::ssize_t(ext[i]);
  return py::array_t<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

kattn::Options options_of(bool causal, const py::object& window, double softcap, const py::object& scale) {
  kattn::Options o;
  o.causal = causal;
  if (!window.is_none()) {
    std::pair<std::int64_t, std::int64_t> w;
    try {
      w = window.cast<std::pair<std::int64_t, std::int64_t>>();
    } catch (const py::cast_error&) {
      throw kattn::Error("window: expected (left, right), two integers (-1: unbounded), got " +
                         std::string(py::repr(window)));
    }
    o.window_left = w.first;
    o.window_right = w.second;
  }
  o.softcap = softcap;
  if (!scale.is_none()) {
    o.scale = scale.cast<double>();
    if (o.scale == 0.0) throw kattn::Error("scale: expected a non-zero value (None for 1/sqrt(head dim))");
  }
  kattn::validate(o);
  return o;
}

// 'f' (float32) or 'd' (float64), else a kattn::Error naming the argument.
char float_kind(const py::array& a, const char* name) {
  if (a.dtype().is(py::dtype::of<float>())) return 'f';
  if (a.dtype().is(py::dtype::of<double>())) return 'd';
  throw kattn::Error(std::string(name) + ": expected float32 or float64, got " + std::string(py::str(a.dtype())));
}

char dtype_of(const py::array& q, const py::array& k, const py::array& v) {
  const char t = float_kind(q, "q");
  if (!k.dtype().is(q.dtype()) || !v.dtype().is(q.dtype()))
    throw kattn::Error("k, v: expected the dtype of q (" + std::string(py::str(q.dtype())) + "), got " +
                       std::string(py::str(k.dtype())) + " and " + std::string(py::str(v.dtype())));
  return t;
}

template <class T>
py::object attention_as(const py::array& q, const py::array& k, const py::array& v, const kattn::Options& opt,
                        const Layout& L, bool return_lse) {
  const auto qv = view4<T>(q, "q", L), kv = view4<T>(k, "k", L), vv = view4<T>(v, "v", L);
  py::array_t<T> o = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), vv.extent(3), L);
  py::array_t<T> lse({py::ssize_t(qv.extent(0)), py::ssize_t(qv.extent(2)), py::ssize_t(qv.extent(1))});
  const auto ov = view4<T>(o, "o", L);
  const auto lv = view_n<T, 3>(lse, "lse");
  {
    py::gil_scoped_release release;
    kattn::attention(Space(), qv, kattn::kv::dense(kv, vv), ov, lv, opt);
    Space().fence();
  }
  if (return_lse) return py::make_tuple(o, lse);
  return o;
}

template <class T>
py::tuple backward_as(const py::array& q, const py::array& k, const py::array& v, const py::array& o,
                      const py::array& lse, const py::array& dout, const kattn::Options& opt, const Layout& L,
                      bool deterministic) {
  const auto qv = view4<T>(q, "q", L), kv = view4<T>(k, "k", L), vv = view4<T>(v, "v", L);
  const auto ov = view4<T>(o, "o", L), dov = view4<T>(dout, "dout", L);
  const auto lv = view_n<T, 3>(lse, "lse");
  py::array_t<T> dq = new4<T>(qv.extent(0), qv.extent(1), qv.extent(2), qv.extent(3), L);
  py::array_t<T> dk = new4<T>(kv.extent(0), kv.extent(1), kv.extent(2), kv.extent(3), L);
  py::array_t<T> dv = new4<T>(vv.extent(0), vv.extent(1), vv.extent(2), vv.extent(3), L);
  const auto dqv = view4<T>(dq, "dq", L), dkv = view4<T>(dk, "dk", L), dvv = view4<T>(dv, "dv", L);
  kattn::BackwardOptions bopt;
  bopt.deterministic = deterministic;
  {
    py::gil_scoped_release release;
    kattn::attention_backward(Space(), qv, kattn::kv::dense(kv, vv), ov, lv, dov, dqv, dkv, dvv, opt, bopt);
    Space().fence();
  }
  return py::make_tuple(dq, dk, dv);
}

template <class T>
py::tuple merge_as(const py::array& o_parts, const py::array& lse_parts) {
  const auto ov = view_n<T, 4>(o_parts, "o_parts");
  const auto lv = view_n<T, 3>(lse_parts, "lse_parts");
  py::array_t<T> o({py::ssize_t(ov.extent(1)), py::ssize_t(ov.extent(2)), py::ssize_t(ov.extent(3))});
  py::array_t<T> lse({py::ssize_t(ov.extent(1)), py::ssize_t(ov.extent(2))});
  const auto o_out = view_n<T, 3>(o, "o");
  const auto lse_out = view_n<T, 2>(lse, "lse");
  {
    py::gil_scoped_release release;
    kattn::merge(Space(), ov, lv, o_out, lse_out);
    Space().fence();
  }
  return py::make_tuple(o, lse);
}

void require_same_dtype(const py::array& a, const char* name, const py::array& like, const char* like_name) {
  if (!a.dtype().is(like.dtype()))
    throw kattn::Error(std::string(name) + ": expected the dtype of " + like_name + " (" +
                       std::string(py::str(like.dtype())) + "), got " + std::string(py::str(a.dtype())));
}

}  // namespace

PYBIND11_MODULE(_kattn, m) {
  m.doc() = "kattn: exact attention (FlashAttention's tiling) on Kokkos";
  if (!Kokkos::is_initialized()) {
    Kokkos::initialize();
    // Stop Kokkos when the interpreter exits (after every array the module made is gone).
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
      if (Kokkos::is_initialized()) Kokkos::finalize();
    }));
  }
  // kattn.Error: a ValueError carrying kattn's message (it names the argument).
  py::register_exception<kattn::Error>(m, "Error", PyExc_ValueError);

  m.def("version", [] { return kattn::build_info().version; }, "kattn's version, e.g. \"0.1.0\"");
  m.def("build_info", [] {
    const kattn::BuildInfo b = kattn::build_info();
    py::dict d;
    d["version"] = b.version, d["kokkos"] = b.kokkos_version, d["kokkos_kernels"] = b.kokkos_kernels_version;
    d["backends"] = b.backends, d["options"] = b.options, d["compiler"] = b.compiler, d["build"] = b.build;
    return d;
  });

  m.def(
      "attention",
      [](const py::array& q, const py::array& k, const py::array& v, bool causal, const py::object& window,
         double softcap, const py::object& scale, const std::string& layout, bool return_lse) -> py::object {
        const kattn::Options opt = options_of(causal, window, softcap, scale);
        const Layout L = Layout::parse(layout);
        return dtype_of(q, k, v) == 'f' ? attention_as<float>(q, k, v, opt, L, return_lse)
                                        : attention_as<double>(q, k, v, opt, L, return_lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("causal") = false,
      py::arg("window") = py::none(), py::arg("softcap") = 0.0, py::arg("scale") = py::none(),
      py::arg("layout") = "bnhd", py::arg("return_lse") = false);

  m.def(
      "merge_states",
      [](const py::array& o_parts, const py::array& lse_parts) -> py::tuple {
        const char t = float_kind(o_parts, "o_parts");
        require_same_dtype(lse_parts, "lse_parts", o_parts, "o_parts");
        return t == 'f' ? merge_as<float>(o_parts, lse_parts) : merge_as<double>(o_parts, lse_parts);
      },
      py::arg("o_parts"), py::arg("lse_parts"));

  m.def(
      "attention_backward",
      [](const py::array& q, const py::array& k, const py::array& v, const py::array& o, const py::array& lse,
         const py::array& dout, bool causal, const py::object& window, double softcap, const py::object& scale,
         const std::string& layout, bool deterministic) -> py::tuple {
        const kattn::Options opt = options_of(causal, window, softcap, scale);
        const Layout L = Layout::parse(layout);
        const char t = dtype_of(q, k, v);
        require_same_dtype(o, "o", q, "q");
        require_same_dtype(lse, "lse", q, "q");
        require_same_dtype(dout, "dout", q, "q");
        return t == 'f' ? backward_as<float>(q, k, v, o, lse, dout, opt, L, deterministic)
                        : backward_as<double>(q, k, v, o, lse, dout, opt, L, deterministic);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("dout"), py::kw_only(),
      py::arg("causal") = false, py::arg("window") = py::none(), py::arg("softcap") = 0.0,
      py::arg("scale") = py::none(), py::arg("layout") = "bnhd", py::arg("deterministic") = false);
}
