// --bias FILE.npy | random: the score bias of a dense call (Options::bias), held for the command's
// lifetime (kattn reads it in place). The array is [B or 1, Hq or 1, Nq, Nk] whatever --layout
// says, kept in the file's type: float32, float64, float16, bf16 bits ('<u2', npy.hpp's
// convention) or bool; `random` draws float32 unit normals [B, Hq, Nq, Nk] (random_variants.hpp).
// The attention call checks the shape against the problem (ragged, paged and cascade calls: padded
// to the longest sequence), naming `bias:`; the ring takes each rank's query rows (BiasRows).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <vector>

#include "args.hpp"
#include "npy_rows.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

struct BiasRows {
  std::int64_t B = 0, Hq = 0, Nq = 0, Nk = 0;  // the whole problem's
  std::vector<PositionRun> runs;               // the query positions read
};

class BiasTensor {
 public:
  // Takes --bias (nothing without it). With `rows`, only those query positions (dim 2) of a bias of
  // their problem, [B or 1, Hq or 1, n, Nk] (a rank's rows for the ring): the whole shape checked,
  // only the rows read (or drawn, with the whole draw's values).
  void read(Args& args, const BiasRows* rows = nullptr);

  bool active() const { return device_.active(); }
  bool boolean() const { return device_.type == BiasType::boolean; }
  // [batch, heads, Nq, Nk] as given (broadcast dims 1).
  std::vector<std::int64_t> shape() const { return {device_.batch, device_.heads, device_.q_len, device_.kv_len}; }
  // A float64 array of the bias's shape for its gradient (--dbias), whatever the bias's type.
  Kokkos::View<double****, Kokkos::LayoutRight> gradient_view() const {
    return Kokkos::View<double****, Kokkos::LayoutRight>("dbias", device_.batch, device_.heads, device_.q_len,
                                                         device_.kv_len);
  }
  // The bias where the call's execution space reads it.
  const ScoreBias& device() const { return device_; }
  // opt with the bias in host memory instead (the same memory on CPU builds): for the host
  // references of --check.
  Options on_host(Options opt) const;

 private:
  Kokkos::View<unsigned char*> bytes_;  // the elements as stored, in the default memory space
  Kokkos::View<unsigned char*>::HostMirror host_bytes_;
  ScoreBias device_, host_;
};

}  // namespace cli
}  // namespace kattn
