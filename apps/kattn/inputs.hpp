// What `run` and the other attention subcommands share: reading the inputs (.npy files or
// random ones), the variant flags, moving arrays to and from Kokkos views, error measures.
#pragma once

#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "random_normal.hpp"
#include "args.hpp"
#include "dense_layout.hpp"
#include "dtype.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/io/npy.hpp"
#include "kattn/options.hpp"
#include "npy_rows.hpp"

namespace kattn {
namespace cli {

// An input's values held in the run's storage type: float64, float32, or float16 / bf16 bits (as an
// .npy file holds them), so a 16-bit run keeps 2 bytes per value. Made from values already rounded
// to the type (exactly), widened to float64 where a check needs them.
class StoredValues {
 public:
  StoredValues() = default;
  StoredValues(io::DType dtype, const std::vector<double>& rounded);
  io::DType dtype() const { return dtype_; }
  std::size_t size() const { return bytes_.size() / io::size_of(dtype_); }
  const unsigned char* bytes() const { return bytes_.data(); }
  // Elements [first, first + count) in float64; every element by default.
  std::vector<double> widened(std::size_t first = 0, std::size_t count = std::size_t(-1)) const;

 private:
  io::DType dtype_ = io::DType::f64;
  std::vector<unsigned char> bytes_;
};

// Dense inputs in [B, N, H, D] order, values already rounded to the chosen dtype and held in it;
// `layout` is that of the files (read and written).
struct DenseInputs {
  std::int64_t B = 0, Nq = 0, Nk = 0, Hq = 0, Hkv = 0, D = 0;
  io::DType dtype = io::DType::f32;
  Layout layout = Layout::bnhd;
  StoredValues q, k, v;
  std::vector<long long> shape() const { return {B, Nq, Nk, Hq, Hkv, D}; }
};

// Where the values of dense inputs come from, known once their shapes are checked: the files
// (paths and headers of q, k, v and the extra array) or the random draw's seed.
struct DenseSource {
  bool random = false;
  std::uint64_t seed = 0;
  bool has_extra = false;  // an extra array to read or draw (e.g. dO)
  std::array<std::string, 4> paths;
  std::array<io::NpyHeader, 4> headers;
};
enum class DenseArray { q = 0, k = 1, v = 2, extra = 3 };

// What read_dense_inputs checks, from the files' headers alone: the dims, dtype and layout, no
// values (in.q, in.k, in.v stay empty); `source` says where the values are.
DenseInputs describe_dense_inputs(Args& args, const std::string& extra, DenseSource& source,
                                  const char* refuse16 = kFloatOnly);

// One array's values at some runs of its positions, [B, n, H, D] in bnhd order, rounded to in.dtype:
// read in place from its file, or drawn as the whole array would be (the same values at every
// rank count, each draw of the stream made but only the runs' kept).
std::vector<double> dense_rows(const DenseInputs& in, const DenseSource& source, DenseArray which,
                               const std::vector<PositionRun>& runs);

// --q/--k/--v files or --random B,NQ,NK,HQ,HKV,D [--seed N]; --dtype f32|f64|bf16|f16 (default:
// the files' dtype, which must then be the same for all; f32 for random inputs); --layout.
// `extra` names a further [B, Nq, Hq, D] file to read with them (e.g. "--do"); its values land
// in extra_values, held in the run's type as q, k and v are. `refuse16` says why bf16/f16 are
// refused (dtype.hpp), nullptr to take them.
DenseInputs read_dense_inputs(Args& args, const std::string& extra = "", StoredValues* extra_values = nullptr,
                              const char* refuse16 = kFloatOnly);

class BiasTensor;
// --causal, --window L,R, --softcap C, --scale S, --block-q N, --block-k N, --splits N, --split-chunk N,
// --cpu-products P, --sinks FILE.npy|random, --alibi-slopes FILE.npy|random|standard, and --bias
// FILE.npy|random where `bias` holds it for the call (kattn run and grad); null: --bias is refused.
Options read_options(Args& args, BiasTensor* bias = nullptr);
// The values of a per-head option (--sinks, --alibi-slopes) from a 1-D array of floats, one `what`
// per query head (the attention call checks the count).
std::vector<double> read_per_head(const char* flag, const char* what, const std::string& path);
// The mask and score options a run's heading names: " causal", " window=L,R", " softcap=C",
// " sinks", " alibi", " bias" (each only when set), empty for a plain full mask.
std::string mask_summary(const Options& opt);

// The CPU products a forward of `dtype` storage runs under opt.cpu_products (the JSON's
// "cpu_products"); null when the program's kernels run on a GPU, where the option means nothing.
const char* forward_cpu_products(const char* dtype, const Options& opt);

// Comma-separated integers in [0, max] of any count ("--q-lens 60,0,6"), for `flag`.
std::vector<std::int64_t> parse_lengths(const std::string& text, const char* flag, std::int64_t max);

// The values random_normal(rows.outer * rows.N * rows.inner, seed) holds at the rows' runs.
std::vector<double> random_normal_rows(const RowBlock& rows, std::uint64_t seed);

template <class T>
using Tensor4 = Kokkos::View<T****, Kokkos::LayoutRight>;
template <class T>
using Tensor3 = Kokkos::View<T***, Kokkos::LayoutRight>;
template <class T>
using Tensor2 = Kokkos::View<T**, Kokkos::LayoutRight>;

template <class View>
View to_view(const std::vector<double>& values, const std::string& label, std::int64_t n0, std::int64_t n1,
             std::int64_t n2, std::int64_t n3 = -1);
// The same from values held in a storage type (their bits copied when the view holds that type).
template <class View>
View to_view(const StoredValues& values, const std::string& label, std::int64_t n0, std::int64_t n1, std::int64_t n2,
             std::int64_t n3 = -1);
template <class View>
std::vector<double> from_view(const View& view);
// Index values (indptr, page indices) as a view of the default execution space.
Kokkos::View<std::int64_t*> index_view(const std::vector<std::int64_t>& values, const char* label);
// Fills a view with NaN, so an element a kernel forgets to write shows.
template <class View>
void poison(const View& view);

// The inputs as views and the outputs o [B, Nq, Hq, D], lse [B, Hq, Nq] (in float for 16-bit T),
// filled with NaN.
template <class T>
struct DenseViews {
  Tensor4<T> q, k, v, o;
  Tensor3<accumulate_t<T>> lse;
};
template <class T>
DenseViews<T> make_dense_views(const DenseInputs& in);

struct ErrorStats {
  double max_abs = 0;  // max |out - ref| over the elements finite in both
  double rel = 0;      // ||out - ref|| / ||ref|| over the same
  // Elements non-finite in out or ref where the other differs (NaN against a number, inf of the
  // other sign, ...), and the index of the first; non-finite in both, the same (NaN and NaN,
  // -inf and -inf: a NaN input, the lse of a row that sees no key).
  std::int64_t nonfinite = 0, first_nonfinite = -1, nonfinite_matched = 0;
};
ErrorStats compare(const std::vector<double>& out, const std::vector<double>& ref);

// The (query, key) pairs of one sequence's Hq query heads that the key window keeps, and the
// block mask when given: the program's one count of them (flop rates; the check's progress
// counts its rows by the same KeyWindow).
double visible_pairs(std::int64_t q_len, std::int64_t kv_len, std::int64_t Hq, const Options& opt,
                     const BlockMask* mask = nullptr);
// 4 D x the visible pairs of dense inputs: the multiply-adds of S = Q K^T and O = P V.
double attention_flops(const DenseInputs& in, const Options& opt, const BlockMask* mask = nullptr);

// Writes a dense [B, N, H, D] array (values in bnhd order) in the inputs' dtype and layout.
void write_dense(const std::string& path, const DenseInputs& in, std::int64_t N, std::int64_t H,
                 const std::vector<double>& values);
void write_dense(const std::string& path, const DenseInputs& in, std::int64_t N, std::int64_t H,
                 const StoredValues& values);

// The header of a floating input array (read_input_header, require_input_dtype) of rank `rank`;
// `dims` names its dimensions in the message ("[B, Nq, Hq, D]").
io::NpyHeader read_floating_header(const std::string& path, const std::string& flag, std::size_t rank,
                                   const std::string& dims);

// Refuses inputs of mixed dtypes without --dtype (they would be converted silently).
void require_one_dtype(const std::string& flag, const std::string& path, io::DType dtype, io::DType first,
                       bool dtype_given);

// Writes values as a float32, float64, float16 or bf16 ('<u2' bits) .npy file.
void write_array(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                 const std::vector<double>& values);
// The same from stored values (their bytes as they are when they are held in dtype).
void write_array(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                 const StoredValues& values);

}  // namespace cli
}  // namespace kattn
