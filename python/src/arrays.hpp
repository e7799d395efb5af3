// The arguments of kattn's calls as kattn's views, where the call runs, and kattn's options from the
// Python layer's keyword arguments: what every binding of the module shares.
//
// An argument is an Array: memory, shape, byte strides and dtype, read in place (never copied),
// from a NumPy array on the host or from the descriptor kattn.torch makes of a tensor on a GPU. A
// call's Target says where it runs and where its outputs come from: the host, with new NumPy
// arrays, or the GPU of the tensors, on PyTorch's current stream, with new tensors from PyTorch's
// allocator. Outputs are C-ordered, their strides written out from the element size (never
// derived by NumPy from the dtype's size field, which moved in NumPy 2 and reads 0 through a
// pybind11 older than 2.12).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtypes.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "workspace.hpp"

// The GPU backend whose tensors the module takes (at most one: CUDA or HIP, as Kokkos was built).
#if defined(KOKKOS_ENABLE_CUDA)
#define KATTN_PYTHON_DEVICE "cuda"
#elif defined(KOKKOS_ENABLE_HIP)
#define KATTN_PYTHON_DEVICE "hip"
#endif

namespace kattn_python {

namespace py = pybind11;

using Space = Kokkos::DefaultHostExecutionSpace;

template <class T, int R>
struct Rank;
template <class T>
struct Rank<T, 1> {
  using type = T*;
};
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
template <class T, int R, class Mem = Kokkos::HostSpace>
using Strided = Kokkos::View<typename Rank<T, R>::type, Kokkos::LayoutStride, Mem, Kokkos::MemoryUnmanaged>;
using Index = Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

// An argument's memory as kattn reads it. `owner` keeps it alive: the NumPy array, or the tensor
// (for an output, what the call returns).
struct Array {
  void* data = nullptr;
  std::vector<py::ssize_t> shape, strides;  // strides in bytes
  std::string dtype;                        // "float32", ..., "bfloat16", or another name (refused)
  py::object owner;
  int ndim() const { return static_cast<int>(shape.size()); }
  py::ssize_t size() const {
    py::ssize_t n = 1;
    for (py::ssize_t e : shape) n *= e;
    return n;
  }
};

inline Array host_array(const py::array& a) {
  Array out;
  out.data = const_cast<void*>(a.data());
  out.shape.assign(a.shape(), a.shape() + a.ndim());
  out.strides.assign(a.strides(), a.strides() + a.ndim());
  out.dtype = dtype_name(a);
  out.owner = a;
  return out;
}

// A tensor's descriptor from kattn.torch: (data_ptr, shape, strides in bytes, dtype name, tensor).
inline Array described_array(const py::handle& d, const char* name) {
  const auto t = py::reinterpret_borrow<py::tuple>(d);
  if (!py::isinstance<py::tuple>(d) || t.size() != 5)
    throw kattn::Error(std::string(name) + ": expected a tensor's descriptor (the package makes it)");
  Array out;
  out.data = reinterpret_cast<void*>(t[0].cast<std::uintptr_t>());
  out.shape = t[1].cast<std::vector<py::ssize_t>>();
  out.strides = t[2].cast<std::vector<py::ssize_t>>();
  out.dtype = t[3].cast<std::string>();
  out.owner = t[4];
  if (out.strides.size() != out.shape.size())
    throw kattn::Error(std::string(name) + ": a descriptor's strides and shape differ in rank");
  return out;
}

// A shape from a view's extents.
inline std::vector<py::ssize_t> extents(std::initializer_list<std::size_t> e) {
  return std::vector<py::ssize_t>(e.begin(), e.end());
}

// A new C-ordered NumPy array of storage type T.
template <class T>
py::array numpy_array(const std::vector<py::ssize_t>& shape) {
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = sizeof(T);
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  return py::array(numpy_dtype<T>(), shape, strides);
}

#ifdef KATTN_PYTHON_DEVICE
#if defined(KOKKOS_ENABLE_CUDA)
using Device = Kokkos::Cuda;
using DeviceStream = cudaStream_t;
inline int device_id() { return Device().cuda_device(); }
#else
using Device = Kokkos::HIP;
using DeviceStream = hipStream_t;
inline int device_id() { return Device().hip_device(); }
#endif

// The execution space instance over a PyTorch stream (a cudaStream_t or hipStream_t as an integer),
// made once per stream and kept until Kokkos finalizes (making one allocates its scratch).
inline Device device_space(std::uintptr_t stream) {
  static std::map<std::uintptr_t, Device>* instances = [] {
    auto* made = new std::map<std::uintptr_t, Device>;
    Kokkos::push_finalize_hook([made] { made->clear(); });
    return made;
  }();
  auto it = instances->find(stream);
  if (it == instances->end()) it = instances->emplace(stream, Device(reinterpret_cast<DeviceStream>(stream))).first;
  return it->second;
}
#endif

// Where a call runs: the host (the Python layer passes None), or the GPU of the tensors it was
// given (the Python layer passes (alloc, stream): alloc(shape, dtype) makes a tensor there and
// returns its descriptor; stream is PyTorch's current one).
struct Target {
  py::object alloc;
  std::uintptr_t stream = 0;

  static Target of(const py::object& target) {
    Target t;
    if (target.is_none()) return t;
    const auto pair = target.cast<py::tuple>();
#ifndef KATTN_PYTHON_DEVICE
    throw kattn::Error("q: a tensor on a GPU, but this kattn was built for the host only");
#endif
    t.alloc = pair[0];
    t.stream = pair[1].cast<std::uintptr_t>();
    return t;
  }
  bool on_device() const { return static_cast<bool>(alloc); }

  // An input: a NumPy array on the host, a descriptor on the GPU.
  Array input(const py::handle& obj, const char* name) const {
    if (on_device()) return described_array(obj, name);
    const py::array a = py::array::ensure(obj);
    if (!a) throw kattn::Error(std::string(name) + ": expected an array");
    return host_array(a);
  }

  // A new output of storage type T.
  template <class T>
  Array output(const std::vector<py::ssize_t>& shape, const char* name) const {
    if (!on_device()) return host_array(numpy_array<T>(shape));
    return described_array(alloc(py::tuple(py::cast(shape)), dtype_name<T>()), name);
  }

  // f(space) on this target's execution space instance.
  template <class F>
  auto run_on(F&& f) const {
#ifdef KATTN_PYTHON_DEVICE
    if (on_device()) return f(device_space(stream));
#endif
    return f(Space());
  }
};

// Axes of the library's order ([B, N, H, D] for q, k, v, o; [B, H, N] for lse) in the array.
struct Layout {
  std::array<int, 4> bnhd;  // array axis of b, n, h, d
  static Layout parse(const std::string& name) {
    if (name == "bnhd") return {{0, 1, 2, 3}};
    if (name == "bhnd") return {{0, 2, 1, 3}};
    throw kattn::Error("layout: expected \"bnhd\" or \"bhnd\", got \"" + name + "\"");
  }
  // The array shape of the library's [B, N, H, D] extents.
  std::vector<py::ssize_t> shape(std::size_t b, std::size_t n, std::size_t h, std::size_t d) const {
    std::vector<py::ssize_t> s(4);
    const std::size_t ext[4] = {b, n, h, d};
    for (int i = 0; i < 4; ++i) s[bnhd[i]] = py::ssize_t(ext[i]);
    return s;
  }
};

// A rank-R array as a strided view in Mem whose dim i is the array's axis axes[i].
template <class T, int R, class Mem = Kokkos::HostSpace>
Strided<T, R, Mem> strided(const Array& a, const char* name, const std::array<int, R>& axes) {
  if (a.ndim() != R)
    throw kattn::Error(std::string(name) + ": expected a rank-" + std::to_string(R) + " array, got rank " +
                       std::to_string(a.ndim()));
  Kokkos::LayoutStride ls;
  std::size_t packed = 1;  // an empty array's strides may read 0: then packed ones (nothing is read)
  for (int i = R - 1; i >= 0; --i) {
    const int ax = axes[i];
    if (a.strides[ax] % py::ssize_t(sizeof(T)) != 0 || a.strides[ax] < 0)
      throw kattn::Error(std::string(name) + ": strides must be non-negative multiples of the element size");
    ls.dimension[i] = static_cast<std::size_t>(a.shape[ax]);
    ls.stride[i] = a.size() == 0 ? packed : static_cast<std::size_t>(a.strides[ax] / py::ssize_t(sizeof(T)));
    packed *= ls.dimension[i] > 0 ? ls.dimension[i] : 1;
  }
  return Strided<T, R, Mem>(static_cast<T*>(a.data), ls);
}

// q, k, v, o and their gradients in the library's [B, N, H, D] order.
template <class T, class Mem = Kokkos::HostSpace>
Strided<T, 4, Mem> view4(const Array& a, const char* name, const Layout& L) {
  return strided<T, 4, Mem>(a, name, L.bnhd);
}
template <class T>
Strided<T, 4> view4(const py::array& a, const char* name, const Layout& L) {
  return view4<T>(host_array(a), name, L);
}

// An array in its own order ([B, H, N] for lse, [total, H, D] for ragged rows, ...).
template <class T, int R, class Mem = Kokkos::HostSpace>
Strided<T, R, Mem> view_n(const Array& a, const char* name) {
  std::array<int, R> axes;
  for (int i = 0; i < R; ++i) axes[i] = i;
  return strided<T, R, Mem>(a, name, axes);
}
template <class T, int R>
Strided<T, R> view_n(const py::array& a, const char* name) {
  return view_n<T, R>(host_array(a), name);
}

// New C-ordered NumPy arrays: shaped like the library's [B, N, H, D] extents in layout L, or by extents.
template <class T>
py::array new4(std::size_t b, std::size_t n, std::size_t h, std::size_t d, const Layout& L) {
  return numpy_array<T>(L.shape(b, n, h, d));
}
template <class T>
py::array new_array(std::initializer_list<std::size_t> e) {
  return numpy_array<T>(extents(e));
}

// An index array (indptr, page table) as int64: integers only (a float array is refused, not
// truncated); copied when it is not already contiguous int64. The holder keeps the copy alive.
struct IndexArray {
  py::array_t<std::int64_t> holder;
  Index view;
};
inline IndexArray index_array(const py::object& obj, const char* name) {
  const py::array a = py::array::ensure(obj);
  if (!a || a.ndim() != 1 || (a.dtype().kind() != 'i' && a.dtype().kind() != 'u'))
    throw kattn::Error(std::string(name) + ": expected a rank-1 integer array, got " +
                       std::string(py::repr(obj)).substr(0, 80));
  IndexArray out;
  out.holder = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  out.view = Index(out.holder.data(), static_cast<std::size_t>(out.holder.size()));
  return out;
}

// Options::sinks from the Python layer's sinks (None, or what the package made of them: float64
// values on the host), refused unless rank 1 (their count is kattn's check: one per query head).
// A per-head option (sinks, alibi_slopes): a rank-1 array of one `what` per query head.
inline std::vector<double> per_head_of(const py::handle& value, const char* name, const char* what) {
  const auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(value);
  if (!a || a.ndim() != 1)
    throw kattn::Error(std::string(name) + ": expected a rank-1 array of one " + what + " per query head, got " +
                       (a ? "rank " + std::to_string(a.ndim()) : std::string(py::repr(value)).substr(0, 80)));
  return std::vector<double>(a.data(), a.data() + a.size());
}

// Options::bias from an array [B or 1, Hq or 1, Nq, Nk] (a NumPy array, or a tensor's descriptor)
// of float32, float64, float16, bfloat16 or bool whose last axis is contiguous. Read in place: the
// caller's dict holds the array for the call.
inline kattn::ScoreBias bias_of(const py::handle& value) {
  const Array a = py::isinstance<py::array>(value) ? host_array(py::reinterpret_borrow<py::array>(value))
                                                  : described_array(value, "bias");
  if (a.ndim() != 4)
    throw kattn::Error("bias: expected a rank-4 array [B or 1, Hq or 1, Nq, Nk], got rank " + std::to_string(a.ndim()));
  kattn::ScoreBias s;
  py::ssize_t item = 0;
  if (a.dtype == "float32") s.type = kattn::BiasType::f32, item = 4;
  else if (a.dtype == "float64") s.type = kattn::BiasType::f64, item = 8;
  else if (a.dtype == "float16") s.type = kattn::BiasType::f16, item = 2;
  else if (a.dtype == "bfloat16") s.type = kattn::BiasType::bf16, item = 2;
  else if (a.dtype == "bool") s.type = kattn::BiasType::boolean, item = 1;
  else
    throw kattn::Error("bias: expected float32, float64, float16, bfloat16 or bool, got " + a.dtype);
  for (int d = 0; d < 4; ++d)
    if (a.strides[d] % item != 0) throw kattn::Error("bias: expected strides in whole elements");
  if (a.shape[3] > 1 && a.strides[3] != item)
    throw kattn::Error("bias: expected contiguous keys (stride 1 along axis 3), got a stride of " +
                       std::to_string(a.strides[3] / item) + " elements");
  s.data = a.size() > 0 ? a.data : nullptr;
  s.batch = a.shape[0], s.heads = a.shape[1], s.q_len = a.shape[2], s.kv_len = a.shape[3];
  s.stride_batch = a.strides[0] / item, s.stride_head = a.strides[1] / item, s.stride_q = a.strides[2] / item;
  return s;
}

// kattn::Options from the Python layer's keyword arguments (a dict: causal, window, softcap,
// scale, diagonal_shift, sinks, alibi_slopes, bias, splits, split_chunk, block_q, block_k, workspace),
// validated.
inline kattn::Options options_of(const py::dict& kw) {
  kattn::Options o;
  for (const auto& item : kw) {
    const std::string key = py::str(item.first);
    const py::handle value = item.second;
    const auto as = [&](auto kind, const char* expected) {
      try {
        return value.cast<decltype(kind)>();
      } catch (const py::cast_error&) {
        throw kattn::Error(key + ": expected " + expected + ", got " + std::string(py::repr(value)));
      }
    };
    if (key == "causal") {
      o.causal = as(bool{}, "True or False");
    } else if (key == "window") {
      if (value.is_none()) continue;
      const auto w = as(std::pair<std::int64_t, std::int64_t>{}, "(left, right), two integers (-1: unbounded)");
      o.window_left = w.first;
      o.window_right = w.second;
    } else if (key == "softcap") {
      o.softcap = as(double{}, "a number");
    } else if (key == "scale") {
      if (value.is_none()) continue;
      o.scale = as(double{}, "a number");
      if (o.scale == 0.0) throw kattn::Error("scale: expected a non-zero value (None for 1/sqrt(head dim))");
    } else if (key == "sinks") {
      if (value.is_none()) continue;
      o.sinks = per_head_of(value, "sinks", "logit");
    } else if (key == "bias") {
      if (value.is_none()) continue;
      o.bias = bias_of(value);
    } else if (key == "alibi_slopes") {
      if (value.is_none()) continue;
      o.alibi_slopes = per_head_of(value, "alibi_slopes", "slope");
    } else if (key == "diagonal_shift") {
      o.diagonal_shift = as(std::int64_t{}, "an integer");
    } else if (key == "splits") {
      o.splits = as(int{}, "an integer");
    } else if (key == "split_chunk") {
      o.split_chunk = as(std::int64_t{}, "an integer");
    } else if (key == "block_q") {
      o.block_q = as(int{}, "an integer");
    } else if (key == "block_k") {
      o.block_k = as(int{}, "an integer");
    } else if (key == "workspace") {
      o.workspace = workspace_of(value);
    } else {
      throw kattn::Error(key + ": not an option of kattn's attention");
    }
  }
  kattn::validate(o);
  return o;
}

// Runs body with the GIL released. On the host it waits for the space (the results are NumPy
// arrays read next); on a GPU it returns once the kernels are queued on PyTorch's stream, which
// orders them before whatever PyTorch runs next on it.
template <class ExecSpace, class Body>
void run_released(const ExecSpace& space, Body&& body) {
  py::gil_scoped_release release;
  body();
  if (!Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible) return;
  space.fence();
}
template <class Body>
void run_released(Body&& body) {
  run_released(Space(), body);
}

}  // namespace kattn_python
