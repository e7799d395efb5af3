#include "dist_files.hpp"

#include "dense_layout.hpp"
#include "dist_io.hpp"
#include "dtype.hpp"
#include "kattn/distributed/collective.hpp"

namespace kattn {
namespace cli {
namespace {

// Rank 0 creates the file with its header; after that (the check is collective, so a barrier)
// every rank writes its rows. A failure on any rank ends every rank with its message.
void write_positions(MPI_Comm comm, const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                     const RowBlock& rows, const std::vector<double>& values) {
  dist::collective_check(comm, [&] {
    if (rank_of(comm) == 0) create_npy(path, dtype, shape);
  });
  dist::collective_check(comm, [&] { write_rows(path, dtype, shape, rows, values); });
}

}  // namespace

std::vector<PositionRun> runs_of(const dist::SequenceLayout& layout, int rank) {
  std::vector<PositionRun> runs;
  if (rank >= layout.ranks()) return runs;
  for (const dist::Segment& s : layout.segments_of(rank)) runs.push_back(PositionRun{s.global, s.local, s.length});
  return runs;
}

DenseInputs describe_on_every_rank(MPI_Comm comm, const char* command, const std::vector<std::string>& input_args,
                                   const std::string& extra, DenseSource& source) {
  DenseInputs in;
  dist::collective_check(comm, [&] {
    Args inputs(command, input_args);
    in = describe_dense_inputs(inputs, extra, source, nullptr);  // every storage type
    inputs.finish();
  });
  dist::collective_agree(
      comm, {dist::Agreed::integer("--q", "batch", in.B), dist::Agreed::integer("--q", "query positions", in.Nq),
             dist::Agreed::integer("--k", "key positions", in.Nk), dist::Agreed::integer("--q", "heads", in.Hq),
             dist::Agreed::integer("--k", "KV heads", in.Hkv), dist::Agreed::integer("--q", "head dim", in.D),
             dist::Agreed::integer("--dtype", "dtype (0 f32, 1 f64, 2 f16, 3 bf16)", static_cast<int>(in.dtype)),
             dist::Agreed::boolean("--random", "random inputs", source.random),
             dist::Agreed::boolean(extra.empty() ? "inputs" : extra.c_str(), "an extra input", source.has_extra)});
  return in;
}

Options with_bias_slice(MPI_Comm comm, const char* command, const std::vector<std::string>& input_args,
                        const BiasSlice& slice, BiasTensor& bias, Options opt) {
  dist::collective_check(comm, [&] {
    Args inputs(command, input_args);
    bias.read(inputs, &slice);
  });
  if (bias.active()) opt.bias = bias.device();
  return opt;
}

void write_dense_positions(MPI_Comm comm, const std::string& path, const DenseInputs& in, std::int64_t H,
                           const dist::SequenceLayout& layout, const std::vector<double>& local) {
  const std::vector<PositionRun> runs = runs_of(layout, rank_of(comm));
  const bool bnhd = in.layout == Layout::bnhd;
  // The file's own order, with the sequence in the middle: [B, N, H * D] or [B * H, N, D].
  const RowBlock rows{bnhd ? in.B : in.B * H, layout.length(), bnhd ? H * in.D : in.D, runs};
  write_positions(comm, path, in.dtype, file_shape(in.layout, in.B, layout.length(), H, in.D), rows,
                  from_bnhd(in.layout, in.B, rows.local_length(), H, in.D, local));
}

void write_lse_positions(MPI_Comm comm, const std::string& path, const DenseInputs& in, std::int64_t H,
                         const dist::SequenceLayout& layout, const std::vector<double>& local) {
  const RowBlock rows{in.B * H, layout.length(), 1, runs_of(layout, rank_of(comm))};
  write_positions(comm, path, lse_dtype(in.dtype), {in.B, H, layout.length()}, rows, local);
}

void write_dbias(MPI_Comm comm, const std::string& path, const std::vector<std::int64_t>& shape,
                 const std::function<BiasSlice(int rank)>& slice_of, const std::vector<double>& local) {
  const BiasSlice slice = slice_of(rank_of(comm));
  if (!slice.broadcast(shape)) return write_positions(comm, path, io::DType::f64, shape, slice.block(shape), local);
  // Ranks that share rows hold shares of their gradient: summed on rank 0, which writes it whole.
  const std::int64_t size = shape[0] * shape[1] * shape[2] * shape[3];
  const std::vector<double> sum =
      gather_blocks(comm, local, size, [&](int r) { return slice_of(r).block(shape); }, true);
  RowBlock whole{1, size, 1, {}};
  if (rank_of(comm) == 0) whole.runs = {PositionRun{0, 0, size}};
  write_positions(comm, path, io::DType::f64, shape, whole, sum);
}

void write_packed_rows(MPI_Comm comm, const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& rows, const std::vector<double>& local) {
  std::int64_t width = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) width *= shape[i];
  write_positions(comm, path, dtype, shape, RowBlock{1, shape[0], width, packed_runs(rows)}, local);
}

}  // namespace cli
}  // namespace kattn
