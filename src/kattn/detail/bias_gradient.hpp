// The bias tensor's gradient (BackwardOptions::dbias) around the passes that form it. The key
// pass (and the textbook) write each score's P (dP - D) once, in the accumulation type T, to a
// target of the problem's full shape [B, Hq, Nq, Nk]:
//   - dbias itself when it has that shape and type T (nothing to sum or round);
//   - else a workspace, summed over dbias's broadcast dims (sequences, then heads, in order: the
//     same bits for every schedule) and rounded once into dbias.
// Entries no pass reaches (keys no query sees, skipped tiles) are 0: the target starts zeroed.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>

#include "kattn/compat.hpp"
#include "kattn/core/score_bias.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

// Rows (b, h, i) of a bias-shaped array set to 0.
template <class T>
struct ZeroBiasRows {
  ScoreBiasGradient d;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t b, const std::int64_t h, const std::int64_t i) const {
    T* row = d.template row_out<T>(static_cast<int>(b), static_cast<int>(h), i);
    for (std::int64_t j = 0; j < d.kv_len; ++j) row[j] = T{};  // +0 in every element type
  }
};

// Row (bb, hb, i) of dbias (element type B) = the sum of the full-shape rows it broadcasts to.
template <class T, class B>
struct SumBiasRows {
  const T* full = nullptr;  // [batch, heads, q_len, kv_len], contiguous
  std::int64_t batch = 0, heads = 0;
  ScoreBiasGradient d;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t bb, const std::int64_t hb, const std::int64_t i) const {
    constexpr int kChunk = 64;  // keys summed at once: each source row is read in runs
    B* out = d.template row_out<B>(static_cast<int>(bb), static_cast<int>(hb), i);
    const std::int64_t b0 = d.batch == 1 ? 0 : bb, b1 = d.batch == 1 ? batch : bb + 1;
    const std::int64_t h0 = d.heads == 1 ? 0 : hb, h1 = d.heads == 1 ? heads : hb + 1;
    for (std::int64_t j0 = 0; j0 < d.kv_len; j0 += kChunk) {
      const int n = static_cast<int>(d.kv_len - j0 < kChunk ? d.kv_len - j0 : kChunk);
      T acc[kChunk];
      for (int j = 0; j < n; ++j) acc[j] = T(0);
      for (std::int64_t b = b0; b < b1; ++b)
        for (std::int64_t h = h0; h < h1; ++h) {
          const T* row = full + ((b * heads + h) * d.q_len + i) * d.kv_len + j0;
          for (int j = 0; j < n; ++j) acc[j] += row[j];
        }
      for (int j = 0; j < n; ++j) out[j0 + j] = narrow<B>(acc[j]);
    }
  }
};

// Every element of dbias (any element type) set to 0: where no block of a distributed backward
// writes (keys no query sees).
template <class ExecSpace>
void zero_bias_gradient(const ExecSpace& space, const ScoreBiasGradient& dbias) {
  if (!dbias.active()) return;
  using Rows = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
  dbias.dispatch([&](auto tag) {
    using B = decltype(tag);
    if constexpr (!std::is_same_v<B, bool>)
      Kokkos::parallel_for("kattn::backward::dbias_zero",
                           Rows(space, {0, 0, 0}, {dbias.batch, dbias.heads, dbias.q_len}), ZeroBiasRows<B>{dbias});
  });
}

template <class ExecSpace, class T>
class BiasGradient {
 public:
  using Mem = typename ExecSpace::memory_space;
  using Rows = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;

  // dbias of a problem of `batch` sequences and `heads` query heads (checked against the bias by
  // require_bias_gradient); inactive: nothing to do.
  BiasGradient(const ExecSpace& space, const ScoreBiasGradient& dbias, std::int64_t batch, std::int64_t heads,
               Workspace* held)
      : space_(space), dbias_(dbias), batch_(batch), heads_(heads) {
    if (!dbias.active()) return;
    const bool broadcast = (dbias.batch == 1 && batch > 1) || (dbias.heads == 1 && heads > 1);
    if (!broadcast && dbias.type == bias_type_of<T>()) {
      target_ = dbias;
      Kokkos::parallel_for("kattn::backward::dbias_zero", rows(dbias.batch, dbias.heads), ZeroBiasRows<T>{dbias});
      return;
    }
    const std::uint64_t values =
        saturating_mul(saturating_mul(batch, heads), saturating_mul(dbias.q_len, dbias.kv_len));
    require_memory<Mem>(held, saturating_mul(values, sizeof(T)), "kattn::backward: the bias gradient's sum",
                        concat(batch, " sequences x ", heads, " heads x ", dbias.q_len, " queries x ", dbias.kv_len,
                               " keys x ", sizeof(T), " bytes"),
                        "give dbias the problem's full shape [B, Hq, Nq, Nk] in the accumulation type (float for "
                        "16-bit inputs), which is written in place");
    full_ = take_zeroed<T, Mem>(held, space, "kattn::backward::dbias_sum", static_cast<std::size_t>(values));
    sum_ = true;
    target_.data = full_.data();
    target_.type = bias_type_of<T>();
    target_.batch = batch, target_.heads = heads, target_.q_len = dbias.q_len, target_.kv_len = dbias.kv_len;
    target_.stride_q = dbias.kv_len;
    target_.stride_head = dbias.q_len * dbias.kv_len;
    target_.stride_batch = heads * target_.stride_head;
  }

  // Where the passes write P (dP - D), of type T and the problem's shape; inactive without dbias.
  const ScoreBiasGradient& target() const { return target_; }

  // dbias from the target, once the passes that write it have run (queued on the space).
  void finish() const {
    if (!sum_) return;
    dbias_.dispatch([&](auto tag) {
      using B = decltype(tag);
      if constexpr (!std::is_same_v<B, bool>)
        Kokkos::parallel_for("kattn::backward::dbias_sum", rows(dbias_.batch, dbias_.heads),
                             SumBiasRows<T, B>{full_.data(), batch_, heads_, dbias_});
    });
  }

 private:
  Rows rows(std::int64_t batch, std::int64_t heads) const {
    return Rows(space_, {0, 0, 0}, {batch, heads, dbias_.q_len});
  }

  ExecSpace space_;
  ScoreBiasGradient dbias_, target_;
  std::int64_t batch_ = 0, heads_ = 0;
  bool sum_ = false;  // the target is full_, summed into dbias by finish()
  Kokkos::View<T*, Mem> full_;
};

}  // namespace detail
}  // namespace kattn
