// Ragged and paged inputs of `kattn run` (CLI.md's layouts): from .npy files with their index
// arrays, or drawn at random with given per-sequence lengths, optionally stored in a paged cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "inputs.hpp"
#include "kattn/io/npy.hpp"
#include "kattn/ragged.hpp"
#include "npy_rows.hpp"

namespace kattn {
namespace cli {

// q [total_q, Hq, D]; k, v [total_kv, Hkv, D] (ragged) or [num_pages, page_size, Hkv, D] (paged).
struct BatchInputs {
  bool paged = false;
  io::DType dtype = io::DType::f32;
  std::int64_t Hq = 0, Hkv = 0, D = 0;
  std::vector<std::int64_t> q_indptr, kv_indptr;                           // kv_indptr: ragged only
  std::vector<std::int64_t> page_indptr, page_indices, last_page_len;      // paged only
  std::int64_t page_size = 0, num_pages = 0;
  StoredValues q, k, v;  // in dtype

  std::int64_t batch() const { return static_cast<std::int64_t>(q_indptr.size()) - 1; }
  std::int64_t total_q() const { return q_indptr.back(); }
  std::vector<std::int64_t> q_lens() const;
  std::vector<std::int64_t> kv_lens() const;
  // Rows of k and v: total_kv when ragged, num_pages * page_size when paged.
  std::int64_t kv_rows() const { return paged ? num_pages * page_size : kv_indptr.back(); }
  // The files' shapes: q's (o, dq, dO), k's (v, dk, dv) and lse's.
  std::vector<std::int64_t> q_shape() const { return {total_q(), Hq, D}; }
  std::vector<std::int64_t> kv_shape() const {
    if (paged) return {num_pages, page_size, Hkv, D};
    return {kv_rows(), Hkv, D};
  }
  std::vector<std::int64_t> lse_shape() const { return {total_q(), Hq}; }
};

// Where a ragged batch's values come from, for reading (or drawing) only some of their rows: the
// files and their headers, or the seed of the draw.
struct BatchSource {
  bool drawn = false;
  std::uint64_t seed = 0;
  std::string paths[3];  // q, k, v
  io::NpyHeader headers[3];
};
enum class BatchArray { q = 0, k = 1, v = 2 };

// True when the arguments ask for a ragged or paged batch (then read_batch_inputs applies, else
// read_dense_inputs): --random-ragged, --page-size, or any of the index array flags.
bool wants_batch_inputs(const Args& args);

//   --q Q.npy --k K.npy --v V.npy with --q-indptr and --kv-indptr (ragged) or --kv-page-indptr,
//   --kv-page-indices and --kv-last-page-len (paged; q may then be dense [B, Nq, Hq, D]);
//   --random-ragged HQ,HKV,D --q-lens L,... --kv-lens L,... [--page-size P [--shuffle-pages]];
//   --random B,NQ,NK,HQ,HKV,D --page-size P [--shuffle-pages] (the dense draw, paged);
// with [--seed N] [--dtype f32|f64|bf16|f16] as for dense inputs (`refuse16` as there).
// rows_later: a ragged batch's values are not loaded (q, k and v stay empty); *rows_later says
// where they are, for batch_rows. Paged inputs are refused then.
BatchInputs read_batch_inputs(Args& args, const char* refuse16 = kFloatOnly, BatchSource* rows_later = nullptr);

// Rows `rows` (packed indices) of q, k or v, in that order, with the values read_batch_inputs
// loads (the same draw), rounded to in.dtype.
std::vector<double> batch_rows(const BatchInputs& in, const BatchSource& src, BatchArray which,
                               const std::vector<std::int64_t>& rows);
// q, k and v whole (what read_batch_inputs would have loaded), from src.
void load_every_row(BatchInputs& in, const BatchSource& src);

// A ragged or paged batch's queries as a view and its outputs o [total_q, Hq, D], lse [total_q, Hq]
// (in float for 16-bit T), filled with NaN; for a ragged batch also k, v and their layout (a paged
// batch's k and v are [num_pages, page_size, Hkv, D]: its caller makes them).
template <class T>
struct BatchViews {
  Tensor3<T> q, k, v, o;
  Tensor2<accumulate_t<T>> lse;
  RaggedLayout<Kokkos::DefaultExecutionSpace::memory_space> layout;
};
template <class T>
BatchViews<T> make_batch_views(const BatchInputs& in);

// 4 D x (visible query-key pairs) per query head, summed over the sequences.
double batch_attention_flops(const BatchInputs& in, const Options& opt);

}  // namespace cli
}  // namespace kattn
