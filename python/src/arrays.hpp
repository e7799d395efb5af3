// NumPy arrays as kattn's views, and kattn's options from the Python layer's keyword arguments:
// what every binding of the module shares. Inputs are viewed in place through their strides (no
// copies); outputs are new C-ordered arrays.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dtypes.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"
#include "workspace.hpp"

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
template <class T, int R>
using Strided = Kokkos::View<typename Rank<T, R>::type, Kokkos::LayoutStride, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
using Index = Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

// Axes of the library's order ([B, N, H, D] for q, k, v, o; [B, H, N] for lse) in the array.
struct Layout {
  std::array<int, 4> bnhd;  // array axis of b, n, h, d
  static Layout parse(const std::string& name) {
    if (name == "bnhd") return {{0, 1, 2, 3}};
    if (name == "bhnd") return {{0, 2, 1, 3}};
    throw kattn::Error("layout: expected \"bnhd\" or \"bhnd\", got \"" + name + "\"");
  }
};

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
  return Strided<T, R>(const_cast<T*>(static_cast<const T*>(a.data())), ls);
}

// q, k, v, o and their gradients in the library's [B, N, H, D] order.
template <class T>
Strided<T, 4> view4(const py::array& a, const char* name, const Layout& L) {
  return strided<T, 4>(a, name, L.bnhd);
}

// An array in its own order ([B, H, N] for lse, [total, H, D] for ragged rows, ...).
template <class T, int R>
Strided<T, R> view_n(const py::array& a, const char* name) {
  std::array<int, R> axes;
  for (int i = 0; i < R; ++i) axes[i] = i;
  return strided<T, R>(a, name, axes);
}

// A new C-ordered array of storage type T shaped like the library's [B, N, H, D] extents in layout L.
template <class T>
py::array new4(std::size_t b, std::size_t n, std::size_t h, std::size_t d, const Layout& L) {
  std::array<py::ssize_t, 4> shape{};
  const std::size_t ext[4] = {b, n, h, d};
  for (int i = 0; i < 4; ++i) shape[L.bnhd[i]] = py::ssize_t(ext[i]);
  return py::array(numpy_dtype<T>(), std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

// A new C-ordered array of storage type T and the given extents.
template <class T>
py::array new_array(std::initializer_list<std::size_t> extents) {
  std::vector<py::ssize_t> shape;
  for (std::size_t e : extents) shape.push_back(py::ssize_t(e));
  return py::array(numpy_dtype<T>(), shape);
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

// kattn::Options from the Python layer's keyword arguments (a dict: causal, window, softcap,
// scale, splits, split_chunk, block_q, block_k, workspace), validated.
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

// Runs body with the GIL released and waits for the space.
template <class Body>
void run_released(Body&& body) {
  py::gil_scoped_release release;
  body();
  Space().fence();
}

}  // namespace kattn_python
