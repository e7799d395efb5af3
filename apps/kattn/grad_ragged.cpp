#include "grad_ragged.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <vector>

#include "batch_inputs.hpp"
#include "dtype.hpp"
#include "grad_check.hpp"
#include "inputs.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_backward.hpp"
#include "paths.hpp"

namespace kattn {
namespace cli {

RaggedDout ragged_dout_source(const std::optional<std::string>& do_file, const std::optional<std::string>& seed,
                              bool files, bool dtype_given, const BatchInputs& in) {
  RaggedDout src;
  if (do_file) {
    src.file = do_file;
    src.header = read_input_header("--do", *do_file);
    require_input_dtype("--do", *do_file, src.header.dtype);
    require_bf16_bits_asked("--do", *do_file, src.header.dtype, in.dtype, dtype_given);
    KATTN_REQUIRE(src.header.shape == in.q_shape(), "--do ", *do_file, ": expected shape [", in.total_q(), ", ", in.Hq,
                  ", ", in.D, "] (the shape of q)");
  } else {
    KATTN_REQUIRE(!files,
                  "--do: give DO.npy [total_q, Hq, D] (the gradient of the loss with respect to o) with "
                  "--q/--k/--v");
    src.seed = seed ? static_cast<std::uint64_t>(parse_integer(*seed, "--seed", 0, INT64_MAX)) : 0;
  }
  return src;
}

std::vector<double> ragged_dout(const RaggedDout& src, const BatchInputs& in, const std::vector<std::int64_t>* rows) {
  const std::int64_t n = in.total_q();
  const RowBlock block{1, n, in.Hq * in.D, rows ? packed_runs(*rows) : std::vector<PositionRun>{PositionRun{0, 0, n}}};
  std::vector<double> dout =
      src.file ? read_rows(*src.file, src.header, block) : random_normal_rows(block, 3 * src.seed + 4);
  round_to(in.dtype, dout);
  return dout;
}

// Sequence by sequence, dense [1, N, H, D] each; dsinks summed over them.
GradientSet ragged_textbook_backward(const BatchInputs& in, const StoredValues& dout, const Options& opt) {
  GradientSet all{std::vector<double>(in.q.size()), std::vector<double>(in.k.size()),
                  std::vector<double>(in.v.size()), std::vector<double>(opt.sinks.size()), {}};
  const std::int64_t qrow = in.Hq * in.D, krow = in.Hkv * in.D;
  for (std::int64_t b = 0; b < in.batch(); ++b) {
    const std::int64_t q0 = in.q_indptr[b], nq = in.q_indptr[b + 1] - q0;
    const std::int64_t k0 = in.kv_indptr[b], nk = in.kv_indptr[b + 1] - k0;
    if (nq == 0 || nk == 0) continue;  // no query sees a key: every gradient is 0
    using T4 = Tensor4<double>;
    const T4 q = to_view<T4>(in.q.widened(q0 * qrow, nq * qrow), "q", 1, nq, in.Hq, in.D);
    const T4 k = to_view<T4>(in.k.widened(k0 * krow, nk * krow), "k", 1, nk, in.Hkv, in.D);
    const T4 v = to_view<T4>(in.v.widened(k0 * krow, nk * krow), "v", 1, nk, in.Hkv, in.D);
    const T4 d = to_view<T4>(dout.widened(q0 * qrow, nq * qrow), "do", 1, nq, in.Hq, in.D);
    T4 dq("dq", 1, nq, in.Hq, in.D), dk("dk", 1, nk, in.Hkv, in.D), dv("dv", 1, nk, in.Hkv, in.D);
    const std::vector<double> dsinks = reference_backward(Kokkos::DefaultExecutionSpace(), q, k, v, d, dq, dk, dv, opt);
    for (std::size_t h = 0; h < dsinks.size(); ++h) all.dsinks[h] += dsinks[h];
    const std::vector<double> hq = from_view(dq), hk = from_view(dk), hv = from_view(dv);
    std::copy(hq.begin(), hq.end(), all.dq.begin() + q0 * qrow);
    std::copy(hk.begin(), hk.end(), all.dk.begin() + k0 * krow);
    std::copy(hv.begin(), hv.end(), all.dv.begin() + k0 * krow);
  }
  return all;
}

DqStrategy parse_dq_strategy(const std::string& s) {
  if (s == "auto") return DqStrategy::automatic;  // name() says "automatic"
  for (DqStrategy d : {DqStrategy::key_chunks, DqStrategy::query_pass, DqStrategy::atomic})
    if (s == name(d)) return d;
  KATTN_REQUIRE(false, "--dq-strategy: expected auto, key-chunks, query-pass or atomic, got '", s, "'");
  return DqStrategy::automatic;
}

}  // namespace cli
}  // namespace kattn
