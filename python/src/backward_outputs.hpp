// A backward call's kattn::BackwardOptions as the Python layer asks for them, shared by the local
// calls (module.cpp) and kattn.dist's (dist.cpp): deterministic, and with bias_grad the bias's
// gradient into a new array of the bias's shape and dtype, made where the call's Target makes its
// outputs.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "arrays.hpp"
#include "kattn/backward.hpp"
#include "kattn/errors.hpp"
#include "kattn/score_bias.hpp"

namespace kattn_python {

class BackwardOutputs {
 public:
  // Throws kattn::Error for bias_grad without a bias, or with a boolean one (a mask).
  BackwardOutputs(const Target& t, const kattn::ScoreBias& bias, bool deterministic, bool bias_grad) {
    bopt_.deterministic = deterministic;
    if (!bias_grad) return;
    if (!bias.active()) throw kattn::Error("bias_grad: the gradient of a bias, but the call has no bias");
    const std::vector<py::ssize_t> shape{bias.batch, bias.heads, bias.q_len, bias.kv_len};
    switch (bias.type) {
      case kattn::BiasType::f32: dbias_ = t.output<float>(shape, "dbias"); break;
      case kattn::BiasType::f64: dbias_ = t.output<double>(shape, "dbias"); break;
      case kattn::BiasType::bf16: dbias_ = t.output<kattn::bf16>(shape, "dbias"); break;
      case kattn::BiasType::f16: dbias_ = t.output<kattn::fp16>(shape, "dbias"); break;
      case kattn::BiasType::boolean: throw kattn::Error("bias_grad: a boolean bias (a mask) has no gradient");
    }
    kattn::ScoreBiasGradient& d = bopt_.dbias;
    d.data = dbias_.data, d.type = bias.type;
    d.batch = bias.batch, d.heads = bias.heads, d.q_len = bias.q_len, d.kv_len = bias.kv_len;
    d.stride_q = bias.kv_len, d.stride_head = bias.q_len * bias.kv_len, d.stride_batch = bias.heads * d.stride_head;
  }
  const kattn::BackwardOptions& options() const { return bopt_; }
  // The local calls' info dict: the BackwardInfo and "dbias" (with bias_grad).
  py::dict info(const kattn::BackwardInfo& b) const {
    py::dict d;
    d["dq_strategy"] = kattn::name(b.dq), d["deterministic"] = b.deterministic, d["chunks"] = b.chunks;
    d["block_q"] = b.block_q, d["block_k"] = b.block_k, d["workspace_bytes"] = b.workspace_bytes;
    d["dsinks"] = b.dsinks;  // a list of floats, one per query head; empty without sinks
    add_dbias(d);
    return d;
  }
  // d["dbias"] = the bias's gradient, with bias_grad (else d unchanged).
  void add_dbias(py::dict& d) const {
    if (bopt_.dbias.active()) d["dbias"] = dbias_.owner;
  }

 private:
  kattn::BackwardOptions bopt_;
  Array dbias_;
};

}  // namespace kattn_python
