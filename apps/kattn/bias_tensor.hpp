// --bias FILE.npy | random: the score bias of a dense call (Options::bias), held for the command's
// lifetime (kattn reads it in place). The array is [B or 1, Hq or 1, Nq, Nk] whatever --layout
// says, kept in the file's type: float32, float64, float16, bf16 bits ('<u2', npy.hpp's
// convention) or bool; `random` draws float32 unit normals [B, Hq, Nq, Nk] (random_variants.hpp).
// The attention call checks the shape against the problem (ragged, paged and cascade calls: padded
// to the longest sequence), naming `bias:`; under --dist each rank takes its slice (BiasSlice).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <vector>

#include "args.hpp"
#include "npy_rows.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

// The part of a whole bias [B or 1, Hq or 1, Nq, Nk] one rank passes under --dist: the bias of the
// scores it computes, a run of query heads (`heads`; length 0: every head) and the runs `runs` of
// axis 2 (query rows) or 3 (keys), the other axes whole. The ring: its rows; decode: its keys;
// ulysses: its heads over every row; hybrid: its heads over its group's rows. A head axis of 1
// in the file (broadcast) is every rank's whole.
struct BiasSlice {
  std::int64_t B = 0, Hq = 0, Nq = 0, Nk = 0;  // the whole problem's
  PositionRun heads;
  int axis = 2;
  std::vector<PositionRun> runs;
  // Whether a bias of shape s (the whole's) broadcasts the heads that ranks split: their shares
  // of its gradient are then summed.
  bool broadcast(const std::vector<std::int64_t>& s) const { return heads.length > 0 && heads.length < Hq && s[1] == 1; }
  // The slice of an array of shape s as runs of [outer, N, inner] (read_rows, write_rows): over
  // axis 2 or 3, or with heads split, over heads x rows as one axis.
  RowBlock block(const std::vector<std::int64_t>& s) const;
  // The shape of the slice of an array of shape s.
  std::vector<std::int64_t> local_shape(std::vector<std::int64_t> s) const;
};

class BiasTensor {
 public:
  // Takes --bias (nothing without it). With `slice`, only that part of a bias of its problem (a
  // rank's under --dist): the whole shape checked, only the slice read (or drawn, with the whole
  // draw's values).
  void read(Args& args, const BiasSlice* slice = nullptr);

  bool active() const { return device_.active(); }
  bool boolean() const { return device_.type == BiasType::boolean; }
  // [batch, heads, Nq, Nk] as held (broadcast dims 1; a slice's extent on its axis).
  std::vector<std::int64_t> shape() const { return {device_.batch, device_.heads, device_.q_len, device_.kv_len}; }
  // The whole bias's shape, of which this may hold a slice.
  const std::vector<std::int64_t>& whole_shape() const { return whole_shape_; }
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
  std::vector<std::int64_t> whole_shape_;
};

}  // namespace cli
}  // namespace kattn
