// How every kernel scales scores, written once: s = scale * q.k with scale = 1/sqrt(head_dim)
// unless given, worked in log2 units so that exp2 gives exp. Without softcap, q (or K^T) is
// multiplied on load by scale * log2(e); with softcap C, by scale alone, the kernel takes
// C * tanh(s / C) in natural units and multiplies by log2(e) (cap_log2 = C * log2(e)). No Kokkos.
#pragma once

#include <cmath>

#include "kattn/core/state.hpp"

namespace kattn {

struct ScoreScaling {
  double scale = 1.0;     // the score scale itself (natural units): dS picks it up in the backward
  double q_scale = 1.0;   // what q (or K^T) is multiplied by on load
  double cap_log2 = 0.0;  // softcap * log2(e); 0 = no softcap
  double inv_cap = 0.0;   // 1 / softcap; 0 = no softcap

  // scale: 0 means 1/sqrt(head_dim); softcap: 0 means none.
  static ScoreScaling make(int head_dim, double scale, double softcap) {
    ScoreScaling s;
    s.scale = scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
    if (softcap > 0.0) {
      s.q_scale = s.scale;
      s.cap_log2 = softcap * kLog2e;
      s.inv_cap = 1.0 / softcap;
    } else {
      s.q_scale = s.scale * kLog2e;
    }
    return s;
  }
};

}  // namespace kattn
