// The element types of kattn's arrays: float32 and float64 everywhere, float16 and bfloat16 in the
// attention calls, their backward, the merge, the cascade and kattn.dist. NumPy has no bfloat16:
// kattn's is a structured dtype holding kattn::bf16's bits, what the package makes of a
// torch.bfloat16 tensor (its memory, read in place). Here: which
// type an array holds, its name in messages, the dtype of new arrays, and the storage combinations
// of the forward (q's type throughout, or float32 queries over a float16 or bfloat16 cache), of the
// backward (q's type throughout, lse in its accumulation type) and of the merge (o in any type, the
// parts' o in it or, for a 16-bit o, in float32; every lse in o's accumulation type).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <type_traits>

#include "kattn/core/storage.hpp"
#include "kattn/errors.hpp"

namespace kattn_python {

namespace py = pybind11;

enum class Dtype { float32, float64, float16, bfloat16 };

// Registers kattn::bf16 as a NumPy dtype (a one-field structured type, "bits": uint16) and exposes
// it to the package as _kattn.bfloat16. Called once, at import.
inline void register_bfloat16(py::module_& m) {
  PYBIND11_NUMPY_DTYPE(kattn::bf16, bits);
  m.attr("bfloat16") = py::dtype::of<kattn::bf16>();
}

// The NumPy dtype of kattn's storage type T.
template <class T>
py::dtype numpy_dtype() {
  if constexpr (std::is_same_v<T, kattn::fp16>)
    return py::dtype("float16");
  else
    return py::dtype::of<T>();  // float, double, and kattn::bf16 once registered
}

inline py::dtype numpy_dtype(Dtype t) {
  if (t == Dtype::float32) return numpy_dtype<float>();
  if (t == Dtype::float64) return numpy_dtype<double>();
  if (t == Dtype::float16) return numpy_dtype<kattn::fp16>();
  return numpy_dtype<kattn::bf16>();
}

inline const char* name(Dtype t) {
  if (t == Dtype::float32) return "float32";
  if (t == Dtype::float64) return "float64";
  if (t == Dtype::float16) return "float16";
  return "bfloat16";
}

// The dtype of a name the package passes ("float32", "float64", "float16", "bfloat16"), else a
// kattn::Error naming the argument `arg`.
inline Dtype dtype_named(const std::string& text, const char* arg) {
  for (Dtype t : {Dtype::float32, Dtype::float64, Dtype::float16, Dtype::bfloat16})
    if (text == name(t)) return t;
  throw kattn::Error(std::string(arg) + ": expected \"float32\", \"float64\", \"float16\" or \"bfloat16\", got \"" +
                     text + "\"");
}

inline bool holds(const py::array& a, Dtype t) { return a.dtype().equal(numpy_dtype(t)); }

inline bool is_16bit(Dtype t) { return t == Dtype::float16 || t == Dtype::bfloat16; }

// The type lse and partial states are in: float32 for the 16-bit types, else t.
inline Dtype accumulation(Dtype t) { return is_16bit(t) ? Dtype::float32 : t; }

// The dtype's name for messages: "bfloat16" for kattn's, NumPy's name otherwise.
inline std::string dtype_name(const py::array& a) {
  return holds(a, Dtype::bfloat16) ? "bfloat16" : std::string(py::str(a.dtype()));
}

// The name of storage type T.
template <class T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, double>)
    return name(Dtype::float64);
  else if constexpr (std::is_same_v<T, kattn::fp16>)
    return name(Dtype::float16);
  else if constexpr (std::is_same_v<T, kattn::bf16>)
    return name(Dtype::bfloat16);
  else
    return name(Dtype::float32);
}

// Below, arguments go by their dtype's name (an Array's dtype, or dtype_name of a NumPy array).

// The storage of an argument of an attention call or its backward, else a kattn::Error naming it.
inline Dtype storage_of(const std::string& dtype, const char* arg) {
  for (Dtype t : {Dtype::float32, Dtype::float64, Dtype::float16, Dtype::bfloat16})
    if (dtype == name(t)) return t;
  throw kattn::Error(std::string(arg) + ": expected float32, float64, float16 or bfloat16, got " + dtype);
}
inline Dtype storage_of(const py::array& a, const char* arg) { return storage_of(dtype_name(a), arg); }

inline void require_same_dtype(const std::string& dtype, const char* arg, const std::string& like,
                               const char* like_arg) {
  if (dtype != like)
    throw kattn::Error(std::string(arg) + ": expected the dtype of " + like_arg + " (" + like + "), got " + dtype);
}
inline void require_same_dtype(const py::array& a, const char* arg, const py::array& like, const char* like_arg) {
  require_same_dtype(dtype_name(a), arg, dtype_name(like), like_arg);
}

// The storage of a forward call: q's, and the cache's (k and v share it), which is q's or, under
// float32 queries, float16 or bfloat16.
struct ForwardStorage {
  Dtype q, kv;
};
inline ForwardStorage forward_storage(const std::string& q, const std::string& k, const std::string& v) {
  const ForwardStorage s{storage_of(q, "q"), storage_of(k, "k")};
  if (s.kv != s.q && !(s.q == Dtype::float32 && is_16bit(s.kv)))
    throw kattn::Error(
        std::string("k: expected the dtype of q (") + name(s.q) + ")" +
        (s.q == Dtype::float32 ? ", or float16 or bfloat16 (a 16-bit cache under float32 queries)" : "") + ", got " +
        k);
  require_same_dtype(v, "v", k, "k");
  return s;
}

// f(Q{}, KV{}) for the storage types (q and o's, k and v's) of s; lse is in accumulate_t<Q>.
template <class F>
auto with_storage(const ForwardStorage& s, F&& f) {
  if (s.q == Dtype::float64) return f(double{}, double{});
  if (s.q == Dtype::float16) return f(kattn::fp16{}, kattn::fp16{});
  if (s.q == Dtype::bfloat16) return f(kattn::bf16{}, kattn::bf16{});
  if (s.kv == Dtype::float16) return f(float{}, kattn::fp16{});
  if (s.kv == Dtype::bfloat16) return f(float{}, kattn::bf16{});
  return f(float{}, float{});
}

// The storage of a backward call, q's: k, v, o and dout share it, and lse is in its accumulation
// type (float32 for the 16-bit types). Float32 queries over a 16-bit cache have no backward.
inline Dtype backward_storage(const std::string& q, const std::string& k, const std::string& v, const std::string& o,
                              const std::string& lse, const std::string& dout) {
  const Dtype t = storage_of(q, "q");
  if (t == Dtype::float32 && (k == name(Dtype::float16) || k == name(Dtype::bfloat16)))
    throw kattn::Error("k: expected the dtype of q (float32), got " + k +
                       " (float32 queries over a 16-bit cache have no backward: give q, k, v one type)");
  require_same_dtype(k, "k", q, "q");
  require_same_dtype(v, "v", q, "q");
  require_same_dtype(o, "o", q, "q");
  require_same_dtype(dout, "dout", q, "q");
  const Dtype acc = accumulation(t);
  if (lse != name(acc))
    throw kattn::Error(std::string("lse: expected ") + name(acc) + " (the forward's lse for " + name(t) + " q), got " +
                       lse);
  return t;
}

// f(T{}) for the storage type of t (kattn::bf16 and kattn::fp16 included).
template <class F>
auto with_dtype(Dtype t, F&& f) {
  if (t == Dtype::float64) return f(double{});
  if (t == Dtype::float16) return f(kattn::fp16{});
  if (t == Dtype::bfloat16) return f(kattn::bf16{});
  return f(float{});
}

// The storage of a merge: o's (`o_dtype`, or that of the parts' o when empty) and that of the parts'
// o, which is o's or, for a 16-bit o, float32 (float partials merged into a 16-bit o are rounded
// once); every lse is in o's accumulation type.
struct MergeStorage {
  Dtype parts, o;
};
inline MergeStorage merge_storage(const std::string& o_parts, const std::string& lse_parts, const std::string& o_dtype) {
  const MergeStorage s{storage_of(o_parts, "o_parts"),
                       o_dtype.empty() ? storage_of(o_parts, "o_parts") : dtype_named(o_dtype, "dtype")};
  if (s.parts != s.o && !(s.parts == Dtype::float32 && is_16bit(s.o)))
    throw kattn::Error(std::string("dtype: expected the dtype of o_parts (") + name(s.parts) + ")" +
                       (s.parts == Dtype::float32 ? ", or float16 or bfloat16 (float32 parts rounded once)" : "") +
                       ", got " + name(s.o));
  const Dtype acc = accumulation(s.o);
  if (lse_parts != name(acc))
    throw kattn::Error(std::string("lse_parts: expected ") + name(acc) + " (the accumulation type of a " + name(s.o) +
                       " o), got " + lse_parts);
  return s;
}

// f(P{}, S{}) for the storage of a merge: P the parts' o, S o's (kattn::bf16 and kattn::fp16 included).
template <class F>
auto with_merge_storage(const MergeStorage& s, F&& f) {
  if (s.parts != s.o) return s.o == Dtype::float16 ? f(float{}, kattn::fp16{}) : f(float{}, kattn::bf16{});
  return with_dtype(s.o, [&](auto t) { return f(t, t); });
}

}  // namespace kattn_python
