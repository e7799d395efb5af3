// kattn io: the HBM-traffic model of FlashAttention's Algorithms 0 and 1 for one head
// (FlashAttention, section 3.2 and Theorem 2).
#include <cmath>
#include <cstdio>
#include <iostream>

#include "args.hpp"
#include "commands.hpp"
#include "json.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

int cmd_io(Args& args) {
  if (args.help("usage: kattn io --n N --d D [--sram-kb KB] [--bytes B] [--bandwidth BYTES_PER_S] [--derate F] "
                "[--json]\n"))
    return 0;
  const auto n_opt = args.integer("--n", 1, std::int64_t(1) << 40);
  const auto d_opt = args.integer("--d", 1, std::int64_t(1) << 20);
  const double sram_kb = args.number("--sram-kb").value_or(192.0);
  const double elem_bytes = static_cast<double>(args.integer("--bytes", 1, 64).value_or(2));
  const double bandwidth = args.number("--bandwidth").value_or(3.35e12);
  const double derate = args.number("--derate").value_or(0.8);
  const bool json = args.flag("--json");
  args.finish();
  KATTN_REQUIRE(n_opt.has_value(), "--n: required (sequence length)");
  KATTN_REQUIRE(d_opt.has_value(), "--d: required (head dim)");
  KATTN_REQUIRE(sram_kb > 0, "--sram-kb: expected a positive size, got ", sram_kb);
  KATTN_REQUIRE(bandwidth > 0, "--bandwidth: expected a positive bandwidth, got ", bandwidth);
  KATTN_REQUIRE(derate > 0 && derate <= 1, "--derate: expected a factor in (0, 1], got ", derate);
  const double N = static_cast<double>(*n_opt), d = static_cast<double>(*d_opt);

  // Algorithm 0 writes and reads S and P: 4Nd + 4N^2 elements. Algorithm 1 with M elements of
  // SRAM uses key tiles of Bc = ceil(M / 4d), so Tc = ceil(N / Bc) passes over Q and O.
  const double M = std::floor(sram_kb * 1024.0 / elem_bytes);
  const double Bc = std::ceil(M / (4.0 * d));
  KATTN_REQUIRE(Bc >= 1, "--sram-kb: too small for one key of head dim ", d);
  const double Tc = std::ceil(N / Bc);
  const double standard = 4.0 * N * d + 4.0 * N * N;
  const double tiled = 2.0 * N * d + Tc * (3.0 * N * d + 4.0 * N);
  const double rate = derate * bandwidth;
  const double nn_bytes = N * N * elem_bytes;

  std::FILE* text = json ? stderr : stdout;  // --json: standard output holds the JSON alone
  std::fprintf(text, "standard attention (Algorithm 0): %.0f elements, %.1f MB, %.1f us\n", standard,
              standard * elem_bytes / 1e6, standard * elem_bytes / rate * 1e6);
  std::fprintf(text, "tiled attention (Algorithm 1):    %.0f elements, %.1f MB, %.1f us (Bc = %.0f keys, Tc = %.0f passes)\n",
              tiled, tiled * elem_bytes / 1e6, tiled * elem_bytes / rate * 1e6, Bc, Tc);
  std::fprintf(text, "reduction: %.1fx; one N x N matrix: %.1f MB (never written when tiled)\n", standard / tiled,
              nn_bytes / 1e6);
  if (json) {
    Json j;
    j.add("n", N).add("d", d).add("sram_kb", sram_kb).add("bytes_per_element", elem_bytes);
    j.add("bandwidth", bandwidth).add("derate", derate);
    j.add("standard_elements", standard).add("standard_bytes", standard * elem_bytes);
    j.add("standard_seconds", standard * elem_bytes / rate);
    j.add("tiled_elements", tiled).add("tiled_bytes", tiled * elem_bytes).add("tiled_seconds", tiled * elem_bytes / rate);
    j.add("block_k", Bc).add("passes", Tc).add("reduction", standard / tiled).add("nxn_bytes", nn_bytes);
    std::cout << j.str() << "\n";
  }
  return 0;
}

}  // namespace cli
}  // namespace kattn
