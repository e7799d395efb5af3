// `kattn run --dist` and `kattn grad --dist` as one pipeline, run_pipeline.hpp's stages over the
// ranks: flags (every rank) -> the shard, this rank's inputs -> the call (kattn::dist::attention,
// attention_backward) -> every rank's part of the outputs written in place -> --check's gather on
// rank 0 -> rank 0's report and check. What differs between run and grad (their flags, call,
// report and check) is cmd_dist.cpp's.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "args.hpp"
#include "collective_steps.hpp"
#include "console.hpp"
#include "dist_shard.hpp"
#include "dtype.hpp"
#include "json.hpp"
#include "kattn/distributed/collective.hpp"
#include "mpi_session.hpp"
#include "paths.hpp"

namespace kattn {
namespace cli {

// What a distributed call leaves on this rank: the values of each of DistFlags::outputs, in their
// order (this rank's part; rank 0 every rank's after --check's gather), and its report's numbers.
struct DistResult {
  std::vector<std::vector<double>> values;
  SlowestRank slowest;         // of the timed call, with the traffic model's bytes (dense inputs)
  double forward_seconds = 0;  // grad: the forward's, slowest rank
  std::vector<double> dsinks;  // grad with --sinks: their gradient (the same on every rank)
};

// A distributed command: one MPI session; every flag read on every rank (`own`: the command's,
// then read_dist_flags), then compared, before any other collective step, so that a flag given on
// one rank only (an MPMD launch) fails on every rank alike instead of hanging; rank 0's output
// paths checked; then on this rank's shard, dense or ragged, `call(t, comm, shard, flags)` (t a
// value of the storage type; a DistResult), the outputs written, gathered for --check, and on rank 0 the heading,
// `report(shard, result, peak_rss, text, j)` (the time line and its JSON) and with --check
// `check(shard, result, text, j)` (its exit status). Returns rank 0's exit status on every rank.
template <class Own, class Call, class Report, class Check>
int dist_pipeline(Args& args, const std::string& mode, const char* command, const Console& console, Own&& own,
                  Call&& call, Report&& report, Check&& check) {
  MpiSession mpi;
  return mpi.run([&]() -> int {
    const MPI_Comm comm = MPI_COMM_WORLD;
    DistFlags f;
    dist::collective_check(comm, [&] {
      own(f);
      read_dist_flags(args, mode, mpi.size(), command == std::string("grad") ? "--do" : "", f);
      args.finish();
    });
    agree_on_command(comm, mode, f.opt, f.d, f.check, f.agreed);
    dist::collective_check(comm, [&] {
      if (mpi.rank() != 0) return;  // rank 0 writes
      for (const DistOutput& out : f.outputs)
        if (out.path) check_output_file(out.flag, *out.path);
    });
    const auto stages = [&](const auto& sh) {
      DistResult r = with_storage(sh.dtype, [&](auto t) { return call(t, comm, sh, f); });
      for (std::size_t i = 0; i < f.outputs.size(); ++i)
        if (f.outputs[i].path) sh.write(*f.outputs[i].path, f.outputs[i].part, r.values[i]);
      const long long peak_rss = peak_rss_max(comm);  // before --check's rank-0 reference
      for (std::size_t i = 0; f.check && i < f.outputs.size(); ++i)
        if (f.outputs[i].part != Part::dbias || f.outputs[i].path)  // dbias: computed when written
          r.values[i] = sh.gather(f.outputs[i].part, r.values[i]);
      return on_rank0(comm, [&]() -> int {
        std::FILE* text = console.text();
        Json j = dist_heading_json(text, command, mode, mpi.size(), f, sh);
        report(sh, r, peak_rss, text, j);
        const int status = f.check ? check(sh, r, text, j) : 0;
        console.finish(j);
        return status;
      });
    };
    if (f.batch) return stages(RaggedShard(comm, mode, command, f));
    return stages(DenseShard(comm, mode, command, f));
  });
}

}  // namespace cli
}  // namespace kattn
