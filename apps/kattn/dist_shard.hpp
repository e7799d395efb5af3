// The input kind of `run --dist` and `grad --dist`: the flags both read and the problem as one
// rank holds it. A shard is dense inputs (each rank its positions of
// [B, N, H, D], dist_files.hpp) or a ragged batch (each rank its packed rows of every sequence,
// --dist ring); the commands' pipeline is written once over either (dist_pipeline.hpp), as
// run_pipeline.hpp's is over the one-process input kinds.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "batch_inputs.hpp"
#include "bias_tensor.hpp"
#include "console.hpp"
#include "dist_files.hpp"
#include "dist_io.hpp"
#include "grad_check.hpp"
#include "grad_ragged.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace cli {

// The parts of a shard's arrays: shaped like q (o, dq), like k (dk, dv), lse, the bias (dbias).
enum class Part { q, kv, lse, dbias };

// An output of a distributed command: its flag, its path (none: not written) and its part.
struct DistOutput {
  const char* flag = "";
  std::optional<std::string> path;
  Part part = Part::q;
};

// The flags read by every rank inside the command's first collective_check: the command's own
// (check, outputs, agreed) and the shared ones, read_dist_flags: the scheme's, the variant's and the
// inputs' (`extra`: a further input beside q, k, v, "--do" for grad, "" for run). A ragged batch's
// indices are read there (--dist ring only, without --bias).
struct DistFlags {
  bool check = false;
  std::vector<DistOutput> outputs;       // checked by rank 0 first
  std::vector<dist::Agreed> agreed;      // the command's, compared
  dist::DistOptions d;
  Options opt;
  std::vector<std::string> input_args;   // the dense input flags, read by every rank (and rank 0's --check)
  std::optional<std::string> bias_file;  // --bias, read by every rank (its rows)
  std::optional<BatchInputs> batch;      // a ragged batch: its indices, every rank
  BatchSource batch_src;                 // ... where each rank reads (or draws) its rows
  RaggedDout batch_dout;                 // ... and those of its dO (with extra "--do")
};
void read_dist_flags(Args& args, const std::string& mode, int ranks, const std::string& extra, DistFlags& f);

inline const char* label_of(DenseArray a) {
  return a == DenseArray::q ? "q" : a == DenseArray::k ? "k" : a == DenseArray::v ? "v" : "do";
}
inline bool is_kv(DenseArray a) { return a == DenseArray::k || a == DenseArray::v; }

// What the flows do with a shard besides its typed views, set by each kind's constructor.
struct ShardOps {
  io::DType dtype = io::DType::f32;
  Options opt;                                    // the flags' with this rank's slice of --bias
  BiasTensor bias;                                // dense inputs: this rank's slice of --bias
  bool holds_outputs = true;                      // decode: rank 0 alone
  std::string shape[2];                           // the heading's shape: grad's, run's (with the files' layout)
  double flops = 0;                               // of the forward
  std::function<void(Json&, bool run)> describe;  // the JSON's fields of the shape
  // This rank's part of an output written in place, or gathered on rank 0 (for --check).
  std::function<void(const std::string&, Part, const std::vector<double>&)> write;
  std::function<std::vector<double>(Part, const std::vector<double>&)> gather;
  // --check on rank 0: the whole inputs read, and the float64 reference against the gathered
  // outputs (run; its exit status) or the float64 textbook backward (grad; dbias when asked).
  std::function<int(const std::vector<double>&, const std::vector<double>&, const Console&, Json&)> check_run;
  std::function<GradientSet(bool dbias)> textbook_backward;
  double model_sent(const dist::DistOptions&, dist::Pass, int) const { return -1; }  // no model
  ShardOps() = default;
  ShardOps(const ShardOps&) = delete;  // the functions hold `this`
  ShardOps& operator=(const ShardOps&) = delete;
};

// Dense inputs: this rank's positions of q (decode: all of them) and of k, v and dO.
class DenseShard : public ShardOps {
 public:
  DenseShard(MPI_Comm comm, const std::string& mode, const char* command, const DistFlags& f);
  template <class T>
  Tensor4<T> input(DenseArray a) const {
    const dist::SequenceLayout& l = is_kv(a) ? kv_layout_ : q_layout_;
    const int r = rank_ < l.ranks() ? rank_ : 0;
    return to_view<Tensor4<T>>(dense_rows(in_, src_, a, runs_of(l, r)), label_of(a), in_.B, l.local_length(r),
                               is_kv(a) ? in_.Hkv : in_.Hq, in_.D);
  }
  template <class K>
  auto keys(const K& k, const K& v) const {
    return kv::dense(k, v);
  }
  // The traffic model's bytes this rank sends in `pass`, arrays of `bytes` per value.
  double model_sent(const dist::DistOptions& d, dist::Pass pass, int bytes) const;

 private:
  // The slice of --bias `rank` passes: the bias of the scores it computes (decode: its keys;
  // ulysses and hybrid: its query heads over its group's rows; the ring, and grid, which refuses a
  // bias: its query rows).
  BiasSlice bias_slice(int rank) const;
  MPI_Comm comm_;
  int rank_ = 0;
  std::string mode_;
  int ulysses_size_ = 1;  // hybrid's group size
  std::vector<std::string> input_args_;  // with --bias
  DenseSource src_;
  DenseInputs in_;
  dist::SequenceLayout q_layout_, kv_layout_;
};

// A ragged batch round the ring: this rank's packed rows of every sequence (dist::ragged_positions).
class RaggedShard : public ShardOps {
 public:
  RaggedShard(MPI_Comm comm, const std::string& mode, const char* command, const DistFlags& f);
  template <class T>
  Tensor3<T> input(DenseArray a) const {
    const std::vector<std::int64_t>& rows = is_kv(a) ? kv_rows_ : q_rows_;
    return to_view<Tensor3<T>>(
        a == DenseArray::extra ? ragged_dout(dout_, in_, &q_rows_) : batch_rows(in_, src_, BatchArray(int(a)), rows),
        label_of(a), std::int64_t(rows.size()), is_kv(a) ? in_.Hkv : in_.Hq, in_.D);
  }
  template <class K>
  auto keys(const K& k, const K& v) const {
    return kv::ragged(k, v, layout_);
  }

 private:
  const BatchInputs& in_;
  const BatchSource& src_;
  const RaggedDout& dout_;
  std::vector<std::int64_t> q_rows_, kv_rows_;                        // this rank's packed rows
  RaggedLayout<Kokkos::DefaultExecutionSpace::memory_space> layout_;  // their local indptr
};

// Rank 0's heading line (`command`: run names the algorithm) and the JSON's fields it names.
Json dist_heading_json(std::FILE* text, const char* command, const std::string& mode, int ranks, const DistFlags& f,
                       const ShardOps& sh);

}  // namespace cli
}  // namespace kattn
