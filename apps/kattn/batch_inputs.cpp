#include "batch_inputs.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "kattn/core/key_window.hpp"
#include "kattn/errors.hpp"
#include "kattn/memory.hpp"
#include "dtype.hpp"
#include "paths.hpp"

namespace kattn {
namespace cli {
namespace {

const char* const kIndexFlags[] = {"--q-indptr", "--kv-indptr", "--kv-page-indptr", "--kv-page-indices",
                                   "--kv-last-page-len"};

std::vector<std::int64_t> read_index(const std::string& path, const char* flag) {
  const io::NpyArray a = read_input(flag, path);
  KATTN_REQUIRE(a.is_integer(), flag, " ", path, ": expected int32 or int64 indices, got ", io::name(a.dtype));
  KATTN_REQUIRE(a.shape.size() == 1, flag, " ", path, ": expected a rank-1 array, got rank ", a.shape.size());
  return a.values<std::int64_t>();
}

std::vector<std::int64_t> lengths(Args& args, const char* flag) {
  const auto text = args.value(flag);
  KATTN_REQUIRE(text.has_value(), flag, ": required with --random-ragged (comma-separated lengths, one per sequence)");
  return parse_lengths(*text, flag, std::int64_t(1) << 31);
}

std::vector<std::int64_t> indptr_of(const std::vector<std::int64_t>& lens) {
  std::vector<std::int64_t> p(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), p.begin() + 1);
  return p;
}

// Moves ragged keys [total_kv, Hkv, D] into pages of page_size keys, in order or shuffled.
void to_pages(BatchInputs& in, std::vector<double>& keys, std::vector<double>& values, std::int64_t page_size,
              bool shuffle, std::uint64_t seed) {
  KATTN_REQUIRE(page_size >= 1, "--page-size: expected at least 1 key per page, got ", page_size);
  const std::vector<std::int64_t> kv_lens = in.kv_lens();
  const std::int64_t B = in.batch(), row = in.Hkv * in.D;
  in.page_indptr.assign(B + 1, 0);
  in.last_page_len.assign(B, 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pages = (kv_lens[b] + page_size - 1) / page_size;
    in.page_indptr[b + 1] = in.page_indptr[b] + pages;
    in.last_page_len[b] = pages == 0 ? 0 : kv_lens[b] - (pages - 1) * page_size;
  }
  in.num_pages = in.page_indptr[B];
  in.page_indices.resize(in.num_pages);
  std::iota(in.page_indices.begin(), in.page_indices.end(), 0);
  if (shuffle) std::shuffle(in.page_indices.begin(), in.page_indices.end(), std::mt19937_64(seed));
  std::vector<double> k(in.num_pages * page_size * row, 0.0), v(k.size(), 0.0);
  std::int64_t src = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < kv_lens[b]; ++j, ++src) {
      const std::int64_t dst = in.page_indices[in.page_indptr[b] + j / page_size] * page_size + j % page_size;
      std::copy_n(keys.begin() + src * row, row, k.begin() + dst * row);
      std::copy_n(values.begin() + src * row, row, v.begin() + dst * row);
    }
  keys = std::move(k);
  values = std::move(v);
  in.kv_indptr.clear();
  in.page_size = page_size;
  in.paged = true;
}

// Every value of the array at path (header h), as float64; rows of [N, ...] when given.
std::vector<double> values_of(const std::string& path, const io::NpyHeader& h,
                              const std::vector<PositionRun>* runs = nullptr) {
  const std::int64_t n = h.shape.empty() ? 1 : h.shape[0];
  std::int64_t inner = 1;
  for (std::size_t i = 1; i < h.shape.size(); ++i) inner *= h.shape[i];
  return read_rows(path, h, RowBlock{1, n, inner, runs ? *runs : std::vector<PositionRun>{PositionRun{0, 0, n}}});
}

void check_total(std::int64_t expected, std::int64_t got, const char* what, const char* from) {
  KATTN_REQUIRE(expected == got, what, ": expected ", expected, " rows (the last offset of ", from, "), got ", got);
}

}  // namespace

std::vector<std::int64_t> BatchInputs::q_lens() const {
  std::vector<std::int64_t> l(batch());
  for (std::int64_t b = 0; b < batch(); ++b) l[b] = q_indptr[b + 1] - q_indptr[b];
  return l;
}

std::vector<std::int64_t> BatchInputs::kv_lens() const {
  std::vector<std::int64_t> l(batch());
  for (std::int64_t b = 0; b < batch(); ++b) {
    if (paged) {
      const std::int64_t pages = page_indptr[b + 1] - page_indptr[b];
      l[b] = pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[b];
    } else {
      l[b] = kv_indptr[b + 1] - kv_indptr[b];
    }
  }
  return l;
}

bool wants_batch_inputs(const Args& args) {
  if (args.has("--random-ragged") || args.has("--page-size")) return true;
  for (const char* f : kIndexFlags)
    if (args.has(f)) return true;
  return false;
}

std::vector<double> batch_rows(const BatchInputs& in, const BatchSource& src, BatchArray which,
                               const std::vector<std::int64_t>& rows) {
  const int i = static_cast<int>(which);
  const std::int64_t total = which == BatchArray::q ? in.total_q() : in.kv_rows();
  const std::int64_t width = (which == BatchArray::q ? in.Hq : in.Hkv) * in.D;
  const std::vector<PositionRun> runs = packed_runs(rows);
  std::vector<double> values = src.drawn ? random_normal_rows(RowBlock{1, total, width, runs}, 3 * src.seed + 1 + i)
                                         : values_of(src.paths[i], src.headers[i], &runs);
  round_to(in.dtype, values);
  return values;
}

void load_every_row(BatchInputs& in, const BatchSource& src) {
  const auto every = [](std::int64_t n) {
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
    std::iota(rows.begin(), rows.end(), std::int64_t(0));
    return rows;
  };
  in.q = StoredValues(in.dtype, batch_rows(in, src, BatchArray::q, every(in.total_q())));
  in.k = StoredValues(in.dtype, batch_rows(in, src, BatchArray::k, every(in.kv_rows())));
  in.v = StoredValues(in.dtype, batch_rows(in, src, BatchArray::v, every(in.kv_rows())));
}

BatchInputs read_batch_inputs(Args& args, const char* refuse16, BatchSource* rows_later) {
  BatchInputs in;
  std::vector<double> q, k, v;  // stored in the run's type at the end
  const auto seed_opt = args.integer("--seed", 0, std::numeric_limits<std::int64_t>::max());
  const std::uint64_t seed = static_cast<std::uint64_t>(seed_opt.value_or(0));
  const auto dtype = args.value("--dtype");
  const auto page_size = args.integer("--page-size", 1, std::int64_t(1) << 24);
  const bool shuffle = args.flag("--shuffle-pages");
  const auto ragged = args.integers("--random-ragged", 3);
  const auto random = args.integers("--random", 6);
  if (ragged || random) {
    for (const char* f : kIndexFlags)
      KATTN_REQUIRE(!args.has(f), f, ": index arrays come with input files, not with random inputs");
    KATTN_REQUIRE(!args.has("--q") && !args.has("--k") && !args.has("--v"),
                  "--random: give either random inputs or input files, not both");
    KATTN_REQUIRE(!(ragged && random), "--random-ragged: give either --random or --random-ragged, not both");
    std::vector<std::int64_t> q_lens, kv_lens;
    if (ragged) {
      in.Hq = (*ragged)[0], in.Hkv = (*ragged)[1], in.D = (*ragged)[2];
      q_lens = lengths(args, "--q-lens");
      kv_lens = lengths(args, "--kv-lens");
      KATTN_REQUIRE(q_lens.size() == kv_lens.size(), "--kv-lens: expected ", q_lens.size(),
                    " lengths (one per sequence, as --q-lens), got ", kv_lens.size());
    } else {
      KATTN_REQUIRE(page_size.has_value(), "--random: ragged flags need --page-size");
      const auto& r = *random;
      for (int i : {0, 3, 4, 5}) KATTN_REQUIRE(r[i] >= 1, "--random: B, HQ, HKV and D must be >= 1, got ", r[i]);
      KATTN_REQUIRE(r[1] >= 0 && r[2] >= 0, "--random: NQ and NK must be >= 0");
      in.Hq = r[3], in.Hkv = r[4], in.D = r[5];
      KATTN_REQUIRE(r[0] <= (1 << 24) && r[1] <= (std::int64_t(1) << 31) && r[2] <= (std::int64_t(1) << 31),
                    "--random: with --page-size, expected at most 2^24 sequences of at most 2^31 queries and keys");
      q_lens.assign(r[0], r[1]);
      kv_lens.assign(r[0], r[2]);
    }
    KATTN_REQUIRE(in.Hq >= 1 && in.Hkv >= 1 && in.D >= 1, "--random-ragged: HQ, HKV and D must be >= 1");
    in.q_indptr = indptr_of(q_lens);
    in.kv_indptr = indptr_of(kv_lens);
    // In double: the products of huge arguments must not wrap before they are refused.
    const double elems = std::max(double(in.q_indptr.back()) * double(in.Hq), double(in.kv_indptr.back()) * double(in.Hkv)) *
                         double(in.D);
    KATTN_REQUIRE(elems < 4e9, "--random: ", elems, " elements per array is more than this program will draw");
    in.dtype = run_dtype(dtype, io::DType::f32, "", refuse16);
    if (rows_later) {
      KATTN_REQUIRE(!page_size, "--page-size: --dist ring takes a ragged batch, not a paged cache");
      rows_later->drawn = true;
      rows_later->seed = seed;
      return in;
    }
    kattn::check_memory<Kokkos::HostSpace>(
        8 * std::uint64_t(in.D * (in.q_indptr.back() * in.Hq + 2 * in.kv_indptr.back() * in.Hkv)),
        "--random: the inputs", "q, k and v as float64", "use smaller shapes");
    // The same streams as the dense draw: --random with --page-size sees the same numbers.
    q = random_normal(in.q_indptr.back() * in.Hq * in.D, 3 * seed + 1);
    k = random_normal(in.kv_indptr.back() * in.Hkv * in.D, 3 * seed + 2);
    v = random_normal(in.kv_indptr.back() * in.Hkv * in.D, 3 * seed + 3);
    if (page_size) to_pages(in, k, v, *page_size, shuffle, seed + 7);
  } else {
    KATTN_REQUIRE(!page_size && !shuffle, "--page-size: pages of input files come from --kv-page-indptr, "
                                          "--kv-page-indices and --kv-last-page-len");
    KATTN_REQUIRE(!seed_opt, "--seed: only meaningful with random inputs");
    const auto qf = args.value("--q"), kf = args.value("--k"), vf = args.value("--v");
    KATTN_REQUIRE(qf && kf && vf, "inputs: give --q Q.npy --k K.npy --v V.npy with the index arrays");
    const auto qi = args.value("--q-indptr"), ki = args.value("--kv-indptr");
    const auto pi = args.value("--kv-page-indptr"), px = args.value("--kv-page-indices"),
               pl = args.value("--kv-last-page-len");
    in.paged = pi || px || pl;
    KATTN_REQUIRE(!(in.paged && ki), "--kv-indptr: a paged cache takes --kv-page-indptr, not --kv-indptr");
    if (in.paged)
      KATTN_REQUIRE(pi && px && pl, "paged inputs: give all of --kv-page-indptr, --kv-page-indices and "
                                    "--kv-last-page-len");
    else
      KATTN_REQUIRE(qi && ki, "ragged inputs: give --q-indptr and --kv-indptr");
    KATTN_REQUIRE(!(rows_later && in.paged), "--kv-page-indptr: --dist ring takes a ragged batch, not a paged cache");
    const io::NpyHeader q0 = read_input_header("--q", *qf);
    require_input_dtype("--q", *qf, q0.dtype);
    KATTN_REQUIRE(q0.shape.size() == 3 || (in.paged && !qi && q0.shape.size() == 4), "--q ", *qf,
                  ": expected a rank-3 array [total_q, Hq, D]",
                  in.paged ? " with --q-indptr, or a rank-4 array [B, Nq, Hq, D]" : "", ", got rank ", q0.shape.size());
    if (q0.shape.size() == 3) {
      KATTN_REQUIRE(qi.has_value(), "--q-indptr: required with a rank-3 q");
      in.q_indptr = read_index(*qi, "--q-indptr");
      in.Hq = q0.shape[1], in.D = q0.shape[2];
      KATTN_REQUIRE(!in.q_indptr.empty(), "--q-indptr ", *qi, ": expected B + 1 offsets, got an empty array");
      check_total(in.q_indptr.back(), q0.shape[0], "--q", "--q-indptr");
    } else {  // dense queries of a paged cache: sequence b owns rows b * Nq ..
      const std::int64_t B = q0.shape[0], Nq = q0.shape[1];
      in.Hq = q0.shape[2], in.D = q0.shape[3];
      in.q_indptr.resize(B + 1);
      for (std::int64_t b = 0; b <= B; ++b) in.q_indptr[b] = b * Nq;
    }
    in.dtype = run_dtype(dtype, q0.dtype, *qf, refuse16);
    require_bf16_bits_asked("--q", *qf, q0.dtype, in.dtype, dtype.has_value());
    const std::size_t kv_rank = in.paged ? 4 : 3;
    const char* kv_layout = in.paged ? "[num_pages, page_size, Hkv, D]" : "[total_kv, Hkv, D]";
    const io::NpyHeader kh = read_floating_header(*kf, "--k", kv_rank, kv_layout);
    const io::NpyHeader vh = read_floating_header(*vf, "--v", kv_rank, kv_layout);
    // k against q first, then v against k: the message blames the array that differs.
    KATTN_REQUIRE(kh.shape[kv_rank - 1] == in.D, "--k ", *kf, ": expected head dim ", in.D, " (from q), got ",
                  kh.shape[kv_rank - 1]);
    KATTN_REQUIRE(vh.shape[kv_rank - 1] == in.D, "--v ", *vf, ": expected head dim ", in.D, " (from q and k), got ",
                  vh.shape[kv_rank - 1]);
    KATTN_REQUIRE(kh.shape == vh.shape, "--v ", *vf, ": expected the shape of k");
    require_one_dtype("--k", *kf, kh.dtype, q0.dtype, dtype.has_value());
    require_one_dtype("--v", *vf, vh.dtype, q0.dtype, dtype.has_value());
    require_bf16_bits_asked("--k", *kf, kh.dtype, in.dtype, dtype.has_value());
    require_bf16_bits_asked("--v", *vf, vh.dtype, in.dtype, dtype.has_value());
    in.Hkv = kh.shape[kv_rank - 2];
    if (in.paged) {
      in.num_pages = kh.shape[0];
      in.page_size = kh.shape[1];
      in.page_indptr = read_index(*pi, "--kv-page-indptr");
      in.page_indices = read_index(*px, "--kv-page-indices");
      in.last_page_len = read_index(*pl, "--kv-last-page-len");
    } else {
      in.kv_indptr = read_index(*ki, "--kv-indptr");
      KATTN_REQUIRE(!in.kv_indptr.empty(), "--kv-indptr ", *ki, ": expected B + 1 offsets, got an empty array");
      check_total(in.kv_indptr.back(), kh.shape[0], "--k", "--kv-indptr");
    }
    if (rows_later) {
      rows_later->paths[0] = *qf, rows_later->paths[1] = *kf, rows_later->paths[2] = *vf;
      rows_later->headers[0] = q0, rows_later->headers[1] = kh, rows_later->headers[2] = vh;
      return in;
    }
    q = values_of(*qf, q0);
    k = values_of(*kf, kh);
    v = values_of(*vf, vh);
  }
  for (auto [to, values] : {std::pair{&in.q, &q}, std::pair{&in.k, &k}, std::pair{&in.v, &v}}) {
    round_to(in.dtype, *values);
    *to = StoredValues(in.dtype, *values);
    *values = {};  // each float64 copy freed once stored
  }
  return in;
}

template <class T>
BatchViews<T> make_batch_views(const BatchInputs& in) {
  BatchViews<T> b;
  const std::int64_t rows = in.total_q();
  b.q = to_view<Tensor3<T>>(in.q, "q", rows, in.Hq, in.D);
  b.o = Tensor3<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), rows, in.Hq, in.D);
  b.lse = Tensor2<accumulate_t<T>>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), rows, in.Hq);
  poison(b.o);
  poison(b.lse);
  if (in.paged) return b;
  b.k = to_view<Tensor3<T>>(in.k, "k", in.kv_rows(), in.Hkv, in.D);
  b.v = to_view<Tensor3<T>>(in.v, "v", in.kv_rows(), in.Hkv, in.D);
  b.layout = make_ragged_layout(index_view(in.q_indptr, "q_indptr"), index_view(in.kv_indptr, "kv_indptr"));
  return b;
}
template BatchViews<float> make_batch_views<float>(const BatchInputs&);
template BatchViews<double> make_batch_views<double>(const BatchInputs&);
template BatchViews<bf16> make_batch_views<bf16>(const BatchInputs&);
template BatchViews<fp16> make_batch_views<fp16>(const BatchInputs&);

double batch_attention_flops(const BatchInputs& in, const Options& opt) {
  const std::vector<std::int64_t> ql = in.q_lens(), kl = in.kv_lens();
  double pairs = 0;
  for (std::size_t b = 0; b < ql.size(); ++b) pairs += visible_pairs(ql[b], kl[b], in.Hq, opt);
  return 4.0 * static_cast<double>(in.D) * pairs;
}

}  // namespace cli
}  // namespace kattn
