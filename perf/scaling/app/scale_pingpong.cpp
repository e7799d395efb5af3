// kattn-scale pingpong: the link between ranks 0 and 1, for the scaling model. Rank 0 sends a
// message of each size, rank 1 returns it; the one-way time is half the median round trip, and
// a least-squares line through the sizes gives latency + bytes / bandwidth (scaling::fit_link).
// With --both-ways the two ranks send each other a message of each size at once, as a ring step
// or an all-to-all does, and the time is the median exchange's. With --peers K every rank sends a
// message of each size to each of the K ranks after it and receives one from each of the K before
// it, all at once (K = 1: a ring step; K = 2 or 3: a grid's inputs), and the samples are the K
// messages a rank moves each way against the slowest rank's time: the link as a rank sees it when
// all ranks use theirs. Run the two ranks on one node for
// the intra-node link (--bandwidth/--latency of kattn-scale model), on two nodes for the inter-node one
// (--inter-bandwidth/--inter-latency).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "collective_steps.hpp"
#include "json.hpp"
#include "kattn/distributed/collective.hpp"
#include "model/scaling_calibration.hpp"
#include "kattn/errors.hpp"
#include "machine_load.hpp"
#include "scale_commands.hpp"
#include "mpi_session.hpp"
#include "scale_csv.hpp"

namespace kattn {
namespace cli {
namespace {

// The one-way time of `bytes` between ranks 0 and 1: half the median of `repeat` round trips,
// after two untimed ones. Other ranks wait.
double one_way_seconds(int rank, std::vector<char>& buffer, std::size_t bytes, int repeat) {
  std::vector<double> round_trips;
  const int count = static_cast<int>(bytes);
  for (int r = 0; r < repeat + 2; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buffer.data(), count, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), count, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buffer.data(), count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
    if (r >= 2) round_trips.push_back(MPI_Wtime() - t0);
  }
  return spread_of(round_trips).median / 2;
}

// The time of ranks 0 and 1 sending each other `bytes` at once: the median of `repeat`
// exchanges, after two untimed ones. Other ranks wait.
double exchange_seconds(int rank, std::vector<char>& out, std::vector<char>& in, std::size_t bytes, int repeat) {
  std::vector<double> times;
  const int count = static_cast<int>(bytes);
  for (int r = 0; r < repeat + 2; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (rank < 2)
      MPI_Sendrecv(out.data(), count, MPI_BYTE, 1 - rank, 0, in.data(), count, MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    // The slower of the two: an exchange is done when both are.
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= 2) times.push_back(t);
  }
  return spread_of(times).median;
}

// Every rank sends `bytes` to each of the K ranks after it and receives as much from the K before
// it, all at once: the slowest rank's time, the median of `repeat` rounds after two untimed ones.
double peers_seconds(int rank, int P, int K, std::vector<char>& out, std::vector<char>& in, std::size_t bytes,
                     int repeat) {
  std::vector<double> times;
  const int count = static_cast<int>(bytes);
  for (int r = 0; r < repeat + 2; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    std::vector<MPI_Request> reqs(2 * K);
    for (int d = 1; d <= K; ++d) {
      MPI_Irecv(in.data() + (d - 1) * bytes, count, MPI_BYTE, (rank - d + P) % P, d, MPI_COMM_WORLD, &reqs[2 * d - 2]);
      MPI_Isend(out.data(), count, MPI_BYTE, (rank + d) % P, d, MPI_COMM_WORLD, &reqs[2 * d - 1]);
    }
    MPI_Waitall(2 * K, reqs.data(), MPI_STATUSES_IGNORE);
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= 2) times.push_back(t);
  }
  return spread_of(times).median;
}

}  // namespace

static const char* const kUsage =
    "usage: mpirun -np 2 kattn-scale pingpong [--both-ways] [--sizes BYTES,...] [--repeat R] [--json]\n"
    "       mpirun -np P kattn-scale pingpong --peers K [--sizes BYTES,...] [--repeat R] [--json]   (K < P)\n";

int scale_pingpong(Args& args) {
  if (args.help(kUsage)) return 0;
  MpiSession mpi;
  return mpi.run([&]() -> int {
    const int rank = mpi.rank(), P = mpi.size();
    std::vector<std::int64_t> sizes;
    int repeat = 20;
    bool json = false, both_ways = false;
    int peers = 0;
    dist::collective_check(MPI_COMM_WORLD, [&] {
      const std::string list = args.value("--sizes").value_or("8,1024,65536,1048576,16777216");
      repeat = static_cast<int>(args.integer("--repeat", 1, 100000).value_or(repeat));
      json = args.flag("--json");
      both_ways = args.flag("--both-ways");
      peers = static_cast<int>(args.integer("--peers", 1, 1 << 20).value_or(0));
      args.finish();
      KATTN_REQUIRE(peers == 0 || !both_ways, "--peers: not with --both-ways (K = 1 on two ranks is the same)");
      KATTN_REQUIRE(peers < P, "--peers: expected fewer than the ", P, " ranks, got ", peers);
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t end = std::min(list.find(',', at), list.size());
        sizes.push_back(parse_integer(list.substr(at, end - at), "--sizes", 1, std::int64_t(1) << 30));
        at = end + 1;
      }
      KATTN_REQUIRE(sizes.size() >= 2, "--sizes: expected at least two message sizes, got ", sizes.size());
      KATTN_REQUIRE(P >= 2, "pingpong: needs two ranks (mpirun -np 2), got ", P);
    });
    const double load = load_average();
    const std::size_t largest = static_cast<std::size_t>(*std::max_element(sizes.begin(), sizes.end()));
    std::vector<char> buffer(largest, 1), received(both_ways ? largest : std::size_t(peers) * largest, 0);
    std::vector<scaling::LinkSample> samples;
    for (std::int64_t b : sizes)
      samples.push_back(
          peers > 0 ? scaling::LinkSample{double(peers) * b,
                                          peers_seconds(rank, P, peers, buffer, received, std::size_t(b), repeat)}
                    : scaling::LinkSample{double(b),
                                          both_ways ? exchange_seconds(rank, buffer, received, std::size_t(b), repeat)
                                                    : one_way_seconds(rank, buffer, std::size_t(b), repeat)});
    return on_rank0(MPI_COMM_WORLD, [&]() -> int {
      const scaling::Link link = scaling::fit_link(samples);
      if (peers > 0)
        std::printf(
            "kattn-scale pingpong --peers %d: every rank of %d sending to %d ranks and receiving from %d at once, "
            "median of %d rounds per size (bytes: what a rank sends, all its messages), load %.2f\n",
            peers, P, peers, peers, repeat, load);
      else if (both_ways)
        std::printf(
            "kattn-scale pingpong --both-ways: ranks 0 and 1 of %d sending each other at once, median of %d "
            "exchanges per size, load %.2f\n",
            P, repeat, load);
      else
        std::printf("kattn-scale pingpong: ranks 0 and 1 of %d, median of %d round trips per size, load %.2f\n", P,
                    repeat, load);
      std::printf("%14s %14s %14s\n", "bytes", peers > 0 ? "round us" : both_ways ? "exchange us" : "one-way us",
                  "GB/s each way");
      for (const scaling::LinkSample& s : samples)
        std::printf("%14.0f %14.3f %14.4g\n", s.bytes, s.seconds * 1e6, s.bytes / s.seconds / 1e9);
      std::printf("fit: latency %.3g us, bandwidth %.4g GB/s (model: --latency %.3g --bandwidth %.4g)\n",
                  link.latency_seconds * 1e6, link.bytes_per_second / 1e9, link.latency_seconds, link.bytes_per_second);
      if (json) {
        Json j;
        std::vector<long long> bytes;
        for (std::int64_t b : sizes) bytes.push_back(b);
        j.add("latency_seconds", link.latency_seconds).add("bytes_per_second", link.bytes_per_second);
        j.add("sizes", bytes).add("repetitions", repeat).add("load_avg", load).add("ranks", P);
        j.add("both_ways", both_ways).add("peers", peers);
        std::cout << j.str() << "\n";
      }
      return 0;
    });
  });
}

}  // namespace cli
}  // namespace kattn
