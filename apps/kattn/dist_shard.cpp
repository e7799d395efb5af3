#include "dist_shard.hpp"

#include <algorithm>
#include <cstdint>

#include "dtype.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/ragged_layout.hpp"
#include "run_check.hpp"
#include "run_pipeline.hpp"

namespace kattn {
namespace cli {
namespace {

// Rank 0 gets the packed [total, width] array of every rank's rows (`rows`: their packed
// indices); the others an empty vector.
std::vector<double> gather_packed_rows(MPI_Comm comm, const std::vector<double>& local,
                                       const std::vector<std::int64_t>& rows, std::int64_t total, std::int64_t width) {
  const int rank = rank_of(comm), P = ranks_in(comm);
  const int n = static_cast<int>(rows.size());
  std::vector<int> counts(P), offsets(P);
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  int all_rows = 0;
  for (int r = 0; r < P; ++r) offsets[r] = all_rows, all_rows += counts[r];
  std::vector<std::int64_t> where(rank == 0 ? all_rows : 0);
  MPI_Gatherv(rows.data(), n, MPI_INT64_T, where.data(), counts.data(), offsets.data(), MPI_INT64_T, 0, comm);
  std::vector<int> value_counts(P), value_offsets(P);
  for (int r = 0; r < P; ++r) value_counts[r] = counts[r] * int(width), value_offsets[r] = offsets[r] * int(width);
  std::vector<double> values(rank == 0 ? std::size_t(all_rows) * width : 0);
  MPI_Gatherv(local.data(), n * int(width), MPI_DOUBLE, values.data(), value_counts.data(), value_offsets.data(),
              MPI_DOUBLE, 0, comm);
  if (rank != 0) return {};
  std::vector<double> out(std::size_t(total) * width);
  for (std::size_t i = 0; i < where.size(); ++i)
    std::copy(values.begin() + i * width, values.begin() + (i + 1) * width, out.begin() + where[i] * width);
  return out;
}

}  // namespace

void read_dist_flags(Args& args, const std::string& mode, int ranks, const std::string& extra, DistFlags& f) {
  read_grid(args, mode, ranks, f.d);
  if (args.flag("--zigzag")) f.d.sharding = dist::Sharding::zigzag;
  KATTN_REQUIRE(shards_sequence(mode) || f.d.sharding == dist::Sharding::contiguous,
                "--zigzag: only for --dist ring, ulysses, hybrid or grid (decode shards the KV cache in rank order)");
  f.d.deterministic = args.flag("--deterministic");
  f.d.chunk = args.integer("--chunk", 1, std::int64_t(1) << 40).value_or(0);
  f.bias_file = args.value("--bias");
  f.opt = read_options(args);
  if (wants_batch_inputs(args)) {
    KATTN_REQUIRE(mode == "ring", "--dist ", mode, ": a ragged batch goes round the ring only (--dist ring)");
    KATTN_REQUIRE(!f.bias_file, "--bias: --dist ring takes a bias with dense inputs, not a ragged batch");
    const auto extra_file = extra.empty() ? std::nullopt : args.value(extra);
    const auto seed = args.peek("--seed");
    const bool files = args.has("--q"), dtype_given = args.has("--dtype");
    f.batch = read_batch_inputs(args, nullptr, &f.batch_src);
    if (!extra.empty()) f.batch_dout = ragged_dout_source(extra_file, seed, files, dtype_given, *f.batch);
  }
  for (const std::string flag : {"--random", "--seed", "--dtype", "--layout", "--q", "--k", "--v", extra.c_str()})
    if (auto value = flag.empty() ? std::nullopt : args.value(flag))
      f.input_args.insert(f.input_args.end(), {flag, *value});
}

Json dist_heading_json(std::FILE* text, const char* command, const std::string& mode, int ranks, const DistFlags& f,
                       const ShardOps& sh) {
  const bool run = command == std::string("run");
  const char* dtype = dtype_name(sh.dtype);
  std::fprintf(text, "kattn %s: %s%s dtype=%s%s%s\n", command, dist_heading(mode, ranks, f.d).c_str(),
               run ? " algo=flash" : "", dtype, sh.shape[run].c_str(), mask_summary(sh.opt).c_str());
  Json j;
  j.add("algo", "flash");
  add_dist_fields(j, mode, ranks, f.d);
  j.add("dtype", dtype);
  sh.describe(j, run);
  j.add("causal", sh.opt.causal);
  return j;
}

DenseShard::DenseShard(MPI_Comm comm, const std::string& mode, const char* command, const DistFlags& f)
    : comm_(comm), rank_(rank_of(comm)), mode_(mode), ulysses_size_(dist::ulysses_ranks(ranks_in(comm), f.d)), input_args_(f.input_args) {
  const int P = ranks_in(comm);
  const bool grad = command == std::string("grad");
  in_ = describe_on_every_rank(comm, command, input_args_, grad ? "--do" : "", src_);
  dist::collective_check(comm, [&] {
    KATTN_REQUIRE(!grad || src_.has_extra,
                  "--do: give DO.npy (the gradient of the loss with respect to o) with --q/--k/--v, or use --random");
  });
  // decode: every rank takes all the queries and its contiguous part of the keys.
  q_layout_ = shards_sequence(mode) ? dist::layout_of(in_.Nq, P, f.d) : dist::SequenceLayout(in_.Nq, 1, f.d.sharding);
  kv_layout_ = dist::layout_of(in_.Nk, P, f.d);
  holds_outputs = rank_ < q_layout_.ranks();
  if (f.bias_file) input_args_.insert(input_args_.end(), {"--bias", *f.bias_file});
  opt = with_bias_slice(comm, command, input_args_, bias_slice(rank_), bias, f.opt);
  dtype = in_.dtype;
  shape[0] = dense_heading(in_);
  shape[1] = std::string(" layout=") + name(in_.layout) + shape[0];
  flops = attention_flops(in_, opt);
  describe = [this](Json& j, bool run) {
    if (run) j.add("dims", name(in_.layout));
    j.add("shape", in_.shape());
    if (run) j.add("shape_is", "B,Nq,Nk,Hq,Hkv,D");
  };
  write = [this](const std::string& path, Part part, const std::vector<double>& local) {
    const bool q = part != Part::kv;
    if (part == Part::lse) return write_lse_positions(comm_, path, in_, in_.Hq, q_layout_, local);
    if (part == Part::dbias)
      return write_dbias(comm_, path, bias.whole_shape(), [this](int r) { return bias_slice(r); }, local);
    write_dense_positions(comm_, path, in_, q ? in_.Hq : in_.Hkv, q ? q_layout_ : kv_layout_, local);
  };
  // Each part as [outer, N, inner] over the positions; dbias as the ranks' slices of it.
  gather = [this](Part part, const std::vector<double>& local) {
    if (part == Part::dbias) {
      const std::vector<std::int64_t>& s = bias.whole_shape();
      return gather_blocks(comm_, local, s[0] * s[1] * s[2] * s[3], [&](int r) { return bias_slice(r).block(s); },
                           bias_slice(rank_).broadcast(s));
    }
    const std::int64_t outer = part == Part::lse ? in_.B * in_.Hq : in_.B;
    const std::int64_t inner = part == Part::lse ? 1 : (part == Part::q ? in_.Hq : in_.Hkv) * in_.D;
    return gather_positions(comm_, local, outer, inner, part == Part::kv ? kv_layout_ : q_layout_);
  };
  check_run = [this, command](const std::vector<double>& o, const std::vector<double>& lse, const Console& console,
                              Json& j) {
    Args inputs(command, input_args_);
    BiasTensor whole_bias;
    whole_bias.read(inputs);
    const DenseInputs whole = read_dense_inputs(inputs, "", nullptr, nullptr);
    return check_outputs(host_params(whole, o, lse), whole_bias.on_host(opt), CheckSettings{true, 0}, in_.dtype,
                         console, j, "run");
  };
  textbook_backward = [this, command](bool dbias) {
    Args inputs(command, input_args_);
    BiasTensor whole_bias;
    whole_bias.read(inputs);
    StoredValues dout;
    const DenseInputs whole = read_dense_inputs(inputs, "--do", &dout, nullptr);
    Options with_bias = opt;
    if (whole_bias.active()) with_bias.bias = whole_bias.device();
    return dense_textbook_backward(whole, dout, with_bias, nullptr, dbias ? &whole_bias : nullptr);
  };
}

BiasSlice DenseShard::bias_slice(int rank) const {
  if (mode_ == "decode") return BiasSlice{in_.B, in_.Hq, in_.Nq, in_.Nk, {}, 3, runs_of(kv_layout_, rank)};
  if (mode_ == "ulysses" || mode_ == "hybrid") {
    // The head split's contract: member u of a group of U ranks computes heads [u h, (u + 1) h)
    // over the group's rows (hybrid: its members' rows in member order; ulysses: one group, every
    // row in order).
    const int U = mode_ == "ulysses" ? ranks_in(comm_) : ulysses_size_;
    const std::int64_t heads = in_.Hq / U;
    const int u = rank % U, first = rank - u;
    std::vector<PositionRun> rows;
    if (mode_ == "ulysses") rows = {PositionRun{0, 0, in_.Nq}};
    std::int64_t n = 0;
    for (int member = first; mode_ == "hybrid" && member < first + U; ++member)
      for (PositionRun r : runs_of(q_layout_, member)) {
        r.local = n, n += r.length;
        rows.push_back(r);
      }
    return BiasSlice{in_.B, in_.Hq, in_.Nq, in_.Nk, {u * heads, 0, heads}, 2, rows};
  }
  return BiasSlice{in_.B, in_.Hq, in_.Nq, in_.Nk, {}, 2, runs_of(q_layout_, rank)};
}

double DenseShard::model_sent(const dist::DistOptions& d, dist::Pass pass, int bytes) const {
  return double(dist::traffic(traffic_problem(in_, bytes), opt, d, ranks_in(comm_), rank_, pass).sent);
}

RaggedShard::RaggedShard(MPI_Comm comm, const std::string&, const char*, const DistFlags& f)
    : in_(*f.batch), src_(f.batch_src), dout_(f.batch_dout) {
  const int rank = rank_of(comm), P = ranks_in(comm);
  std::vector<std::int64_t> q_local, kv_local;
  dist::collective_check(comm, [&] {
    q_rows_ = dist::ragged_positions(in_.q_indptr, rank, P, f.d, "--q-indptr");
    kv_rows_ = dist::ragged_positions(in_.kv_indptr, rank, P, f.d, "--kv-indptr");
    q_local = dist::ragged_local_indptr(in_.q_indptr, rank, P, f.d, "--q-indptr");
    kv_local = dist::ragged_local_indptr(in_.kv_indptr, rank, P, f.d, "--kv-indptr");
  });
  layout_ = make_ragged_layout(index_view(q_local, "q_indptr"), index_view(kv_local, "kv_indptr"));
  dtype = in_.dtype;
  opt = f.opt;
  shape[0] = shape[1] = ragged_heading(in_);
  flops = batch_attention_flops(in_, opt);
  describe = [this](Json& j, bool) { describe_ragged(j, in_); };
  write = [this, comm](const std::string& path, Part part, const std::vector<double>& local) {
    const bool q = part != Part::kv, lse = part == Part::lse;
    const std::vector<std::int64_t> shape = lse ? in_.lse_shape() : q ? in_.q_shape() : in_.kv_shape();
    write_packed_rows(comm, path, lse ? lse_dtype(dtype) : dtype, shape, q ? q_rows_ : kv_rows_, local);
  };
  gather = [this, comm](Part part, const std::vector<double>& local) {
    const bool q = part != Part::kv;
    return gather_packed_rows(comm, local, q ? q_rows_ : kv_rows_, q ? in_.total_q() : in_.kv_rows(),
                              part == Part::lse ? in_.Hq : (q ? in_.Hq : in_.Hkv) * in_.D);
  };
  check_run = [this](const std::vector<double>& o, const std::vector<double>& lse, const Console& console, Json& j) {
    BatchInputs whole = in_;
    load_every_row(whole, src_);
    return check_outputs(host_params(whole, o, lse), opt, CheckSettings{true, 0}, in_.dtype, console, j, "run");
  };
  textbook_backward = [this](bool) {
    BatchInputs whole = in_;
    load_every_row(whole, src_);
    return ragged_textbook_backward(whole, StoredValues(dtype, ragged_dout(dout_, whole)), opt);
  };
}

}  // namespace cli
}  // namespace kattn
