// Performance model of the grid scheme (dist::Scheme::grid, the library's
// distributed/detail/grid.cpp), beside scaling_model.hpp's ring: the bytes a rank sends, its time
// at P ranks on an R x C grid, and the shape the model finds fastest. Plain arithmetic, no MPI:
// `kattn-scale model --dist grid` prints it, the tests compare its bytes with dist::traffic.
//
// The schedule it follows, as grid.cpp runs it: rank (g, c) computes the query shards of its grid
// column against the keys of its grid row, R blocks of n queries x C n keys (n = N / P). Every
// input is posted before the first kernel: its query shard to the R - 1 ranks of its column, its
// K/V shard (the keys each column sees) to the C - 1 ranks of its row, and the same arrive. The blocks for other
// ranks' queries run first, each walking the row's key shards from its own on, waiting for each
// shard as it needs it; each finished block's rows (o and lse) go back to the query shard's owner
// at once; the rank's own block runs last, then it folds the R blocks of its rows in grid-row order.
//
// The links: every message of a rank travels over its node's link (NVLink, shared memory) or the
// network (a rank's share of its NIC), as Cluster says; rank r sits on node r / ranks_per_node.
// The transfers a rank has in flight on one link share it equally (processor sharing: the smaller
// ones land first), each after the link's latency; results queue behind the inputs the rank is
// still sending on that link. Every rank's timeline is simulated, so a result's arrival is when
// its sender's block finished and its link carried it.
//
// What it leaves out: the grid's backward (forward only), deterministic mode (its per-chunk
// partials), windows, and causal masks over contiguous shards (unbalanced): the model takes
// dense or causal-zigzag problems only, where every query shard sees part of every key shard.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kattn/errors.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace scaling {

struct GridShape {
  int rows = 1, cols = 1;
};

// The messages of one grid rank (bytes), as traffic.cpp's grid_traffic counts them: queries and
// results travel in the accumulation type (4 bytes, 8 for f64; 16-bit queries are widened), K/V
// as stored.
struct GridMessages {
  double q = 0;       // its query shard, to each other rank of its column
  double result = 0;  // a block's finished rows (o, lse), back to the query shard's owner
  double kv = 0;      // its K and V shard, to each other rank of its row
};

inline GridMessages grid_messages(const RingModelInput& in) {
  const double n = double(in.tokens) / in.ranks, B = in.batch, H = in.heads_q, D = in.head_dim;
  const double acc = in.bytes_per_value == 8 ? 8 : 4;
  return {B * n * H * D * acc, B * n * H * (D + 1) * acc, 2.0 * B * n * in.heads_kv * D * in.bytes_per_value};
}

// The share of key shard `owner`'s K/V that the queries of grid column `col` see (1 or 1/2). Dense:
// all of it. Causal over zigzag shards (rank j holds segments j and 2P - 1 - j of 2P): segment j is
// seen by every other rank's later segment; segment 2P - 1 - j only by a rank i <= j, so it goes
// to column col only when the column's first rank, col itself, lies before j.
inline double grid_kv_share(const RingModelInput& in, int owner, int col) {
  return !in.causal || col < owner ? 1.0 : 0.5;
}

// Bytes rank `rank` sends and receives in the forward on an R x C grid: its query shard to the
// R - 1 other ranks of its column and the finished rows of the R - 1 blocks it computes for them
// back (every query shard sees some key of every grid row), the keys of its K/V shard that each of
// the C - 1 other columns sees. A 1 x P grid is the ring's K/V traffic exactly.
struct GridRankBytes {
  double sent = 0, received = 0;
};
inline GridRankBytes grid_rank_bytes(const RingModelInput& in, GridShape s, int rank) {
  const GridMessages m = grid_messages(in);
  const int g = rank / s.cols, c = rank % s.cols;
  GridRankBytes b;
  b.sent = b.received = (s.rows - 1) * (m.q + m.result);
  for (int k = 0; k < s.cols; ++k)
    if (k != c) {
      b.sent += grid_kv_share(in, rank, k) * m.kv;
      b.received += grid_kv_share(in, g * s.cols + k, c) * m.kv;
    }
  return b;
}

// The most any rank sends (what `kattn-scale measure` reports as bytes_sent_per_rank): dense, every
// rank alike; causal, the last rank, which sends all of its keys.
inline double grid_bytes_per_rank(const RingModelInput& in, GridShape s) {
  double most = 0;
  for (int r = 0; r < in.ranks; ++r) most = std::max(most, grid_rank_bytes(in, s, r).sent);
  return most;
}

// Every shape rows x cols = P, rows ascending (1 x P first: the ring's pattern of K/V).
inline std::vector<GridShape> grid_shapes(int P) {
  std::vector<GridShape> out;
  for (int r = 1; r <= P; ++r)
    if (P % r == 0) out.push_back({r, P / r});
  return out;
}

struct GridModel {
  GridShape shape;
  double tokens_per_rank = 0;
  double flops_per_rank = 0;         // useful forward work of a rank
  double block_compute_seconds = 0;  // one block: n queries against the row's C n keys
  double inputs_seconds = 0;         // the slowest rank's last input (query shard or K/V) in
  bool crosses_nodes = false;        // some message leaves its node
  double compute_seconds = 0;        // a rank's kernels, folds, merges and overheads
  double exposed_comm_seconds = 0;   // seconds - compute_seconds of the slowest rank
  double seconds = 0;                // the slowest rank's
  double ideal_seconds = 0;          // the rank's work at the baseline's kernel rate
  double efficiency = 1;
  double bytes_per_rank = 0;  // sent by one rank
};

namespace parts {

// One link direction shared by transfers that all start at `start`: when each lands (processor
// sharing: k transfers split the rate; the smallest finish first), latency included.
inline std::vector<double> shared_arrivals(const std::vector<double>& bytes, const Link& link, double start) {
  std::vector<std::size_t> order(bytes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bytes[a] < bytes[b]; });
  std::vector<double> at(bytes.size());
  double done = 0, t = start;  // bytes of the finished ones; the time the last one finished
  for (std::size_t k = 0; k < order.size(); ++k) {
    const double left = bytes[order[k]] - done, sharing = double(order.size() - k);
    t += left * sharing / link.bytes_per_second;
    done = bytes[order[k]];
    at[order[k]] = t + link.latency_seconds;
  }
  return at;
}

}  // namespace parts

// The grid's forward on in.ranks = shape.rows x shape.cols ranks. Throws kattn::Error for what the
// model does not cover (a backward, causal contiguous shards, a shape that is not P).
inline GridModel model_grid(const RingModelInput& in, GridShape shape) {
  const int P = in.ranks, R = shape.rows, C = shape.cols;
  KATTN_REQUIRE(R >= 1 && C >= 1 && std::int64_t(R) * C == P, "grid model: expected rows x cols = the ", P,
                " ranks, got ", R, " x ", C);
  KATTN_REQUIRE(in.backward_ratio == 0, "grid model: forward only (the grid's backward is not modelled)");
  KATTN_REQUIRE(!in.causal || in.zigzag,
                "grid model: a causal mask needs zigzag shards (contiguous ones leave the grid unbalanced)");
  GridModel m;
  m.shape = shape;
  const double N = double(in.tokens), n = N / P;
  const Cluster& cl = in.cluster;
  const GridMessages msg = grid_messages(in);
  const double c = in.causal ? 0.5 : 1.0;  // zigzag: every (query shard, key shard) pair has half its pairs
  m.tokens_per_rank = n;
  m.flops_per_rank = 4.0 * in.head_dim * in.heads_q * in.batch * n * N * c;
  m.bytes_per_rank = grid_bytes_per_rank(in, shape);
  // A piece: n queries against one rank's n keys (the kernel's size, as in the ring), folded into
  // the block's rows; the merge folds R blocks' rows into the rank's.
  const double piece = 4.0 * in.head_dim * in.heads_q * in.batch * n * n * c / in.rate.at(n);
  double fold = 0;
  if (cl.memory_bytes_per_second > 0)
    fold = cl.merge_passes * in.batch * n * in.heads_q * (in.head_dim + 1) * 4.0 / cl.memory_bytes_per_second;
  const double piece_cost = piece + (P > 1 ? fold + cl.step_overhead_seconds : 0.0);
  m.block_compute_seconds = C * piece;
  const double merge = P > 1 ? R * fold : 0.0;
  m.compute_seconds = R * C * piece_cost + merge;

  const auto node = [&](int r) { return cl.ranks_per_node > 0 ? r / cl.ranks_per_node : 0; };
  const auto at = [&](int g, int k) { return g * C + k; };
  // Per rank: when each input lands (q from column mate g, K/V from row mate k), when each result
  // it sends lands at its owner ([sender][row of the owner]), and when its outgoing links are free.
  std::vector<std::vector<double>> q_at(P, std::vector<double>(R, 0.0)), kv_at(P, std::vector<double>(C, 0.0));
  std::vector<std::vector<double>> result_at(P, std::vector<double>(R, 0.0));
  std::vector<double> own_done(P, 0.0), sends_done(P, 0.0);
  for (int rank = 0; rank < P; ++rank) {
    const int g = rank / C, k0 = rank % C;
    // Inputs in, per link.
    for (int inter = 0; inter < 2; ++inter) {
      const Link& link = inter ? cl.inter : cl.intra;
      std::vector<double> bytes;
      std::vector<std::pair<bool, int>> who;  // (query shard?, row or column)
      for (int r = 0; r < R; ++r)
        if (r != g && (node(at(r, k0)) != node(rank)) == bool(inter)) bytes.push_back(msg.q), who.push_back({true, r});
      for (int k = 0; k < C; ++k)
        if (k != k0 && (node(at(g, k)) != node(rank)) == bool(inter))
          bytes.push_back(grid_kv_share(in, at(g, k), k0) * msg.kv), who.push_back({false, k});
      if (bytes.empty()) continue;
      if (inter) m.crosses_nodes = true;
      const std::vector<double> t = parts::shared_arrivals(bytes, link, 0.0);
      for (std::size_t i = 0; i < t.size(); ++i) {
        (who[i].first ? q_at[rank][who[i].second] : kv_at[rank][who[i].second]) = t[i];
        m.inputs_seconds = std::max(m.inputs_seconds, t[i]);
      }
    }
    // Its own inputs leave on the same links meanwhile: each link is free for results once they are out.
    double out_free[2] = {0, 0};
    for (int r = 0; r < R; ++r)
      if (r != g) out_free[node(at(r, k0)) != node(rank)] += msg.q;
    for (int k = 0; k < C; ++k)
      if (k != k0) out_free[node(at(g, k)) != node(rank)] += grid_kv_share(in, rank, k) * msg.kv;
    out_free[0] /= cl.intra.bytes_per_second;
    out_free[1] = out_free[1] > 0 ? out_free[1] / cl.inter.bytes_per_second : 0.0;
    // The blocks: other rows' query shards in row order, then its own; results sent as each finishes.
    double t = 0;
    for (int step = 0; step < R; ++step) {
      const int r = step < R - 1 ? (step < g ? step : step + 1) : g;
      if (r != g) t = std::max(t, q_at[rank][r]);
      for (int i = 0; i < C; ++i) {
        const int k = (k0 + i) % C;
        if (k != k0) t = std::max(t, kv_at[rank][k]);
        t += piece_cost;
      }
      if (r == g) continue;
      const int owner = at(r, k0);
      const int inter = node(owner) != node(rank);
      const Link& link = inter ? cl.inter : cl.intra;
      const double start = std::max(t, out_free[inter]);
      out_free[inter] = start + msg.result / link.bytes_per_second;
      result_at[rank][r] = out_free[inter] + link.latency_seconds;
    }
    own_done[rank] = t;
    sends_done[rank] = std::max(out_free[0], out_free[1]);
  }
  for (int rank = 0; rank < P; ++rank) {
    const int g = rank / C, k0 = rank % C;
    double t = own_done[rank];
    for (int r = 0; r < R; ++r)
      if (r != g) t = std::max(t, result_at[at(r, k0)][g]);
    t = std::max(t + merge, sends_done[rank]);
    m.seconds = std::max(m.seconds, t);
  }
  m.exposed_comm_seconds = std::max(0.0, m.seconds - m.compute_seconds);
  m.ideal_seconds = parts::ideal_seconds(in, m.flops_per_rank, n);
  m.efficiency = m.seconds > 0 ? m.ideal_seconds / m.seconds : 1.0;
  return m;
}

// Every shape of in.ranks, modelled: the fastest; on a tie the fewer bytes, then the fewer rows.
// `all` (optional) receives every shape's model in grid_shapes order.
inline GridModel best_grid(const RingModelInput& in, std::vector<GridModel>* all = nullptr) {
  GridModel best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (GridShape s : grid_shapes(in.ranks)) {
    const GridModel m = model_grid(in, s);
    if (all) all->push_back(m);
    const bool faster = m.seconds < best.seconds * (1 - 1e-12);
    const bool tie = !faster && m.seconds <= best.seconds * (1 + 1e-12);
    if (faster || (tie && m.bytes_per_rank < best.bytes_per_rank)) best = m;
  }
  return best;
}

}  // namespace scaling
}  // namespace kattn
