// Uses an installed kattn: the tiled forward on a small random problem (GQA, causal, awkward
// sizes), checked against kattn's float64 textbook reference; then a bad shape, which must be
// refused with kattn::Error. Exit status 0 only if all agree.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdio>
#include <kattn/errors.hpp>
#include <kattn/attention.hpp>
#include <kattn/reference.hpp>
#include <kattn/version.hpp>
#include <limits>
#include <random>

namespace {

using View4 = Kokkos::View<double****, Kokkos::LayoutRight>;
using View3 = Kokkos::View<double***, Kokkos::LayoutRight>;

void fill_normal(const View4& v, unsigned seed) {
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = dist(gen);
  Kokkos::deep_copy(v, h);
}

template <class View>
double max_abs_diff(const View& a, const View& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double err = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) {
    const double d = std::abs(ha.data()[i] - hb.data()[i]);
    err = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(err, d);  // NaN: unwritten
  }
  return err;
}

int run() {
  const int B = 2, Nq = 37, Nk = 53, Hq = 4, Hkv = 2, D = 24;
  View4 q("q", B, Nq, Hq, D), k("k", B, Nk, Hkv, D), v("v", B, Nk, Hkv, D);
  View4 o("o", B, Nq, Hq, D), o_ref("o_ref", B, Nq, Hq, D);
  View3 lse("lse", B, Hq, Nq), lse_ref("lse_ref", B, Hq, Nq);
  fill_normal(q, std::random_device{}());
  fill_normal(k, std::random_device{}());
  fill_normal(v, std::random_device{}());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Kokkos::deep_copy(o, nan);
  Kokkos::deep_copy(lse, nan);

  kattn::Options opt;
  opt.causal = true;
  const Kokkos::DefaultExecutionSpace space;
  kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
  kattn::reference(space, q, k, v, o_ref, lse_ref, opt);
  space.fence();
  const double err_o = max_abs_diff(o, o_ref), err_lse = max_abs_diff(lse, lse_ref);
  std::printf(
      "forward vs reference (double, B=%d Nq=%d Nk=%d Hq=%d Hkv=%d D=%d, causal): "
      "max abs err o %.3e, lse %.3e\n",
      B, Nq, Nk, Hq, Hkv, D, err_o, err_lse);
  if (!(err_o <= 1e-12 && err_lse <= 1e-12)) {
    std::fprintf(stderr, "consumer: FAIL: error above 1e-12\n");
    return 1;
  }

  View4 k_bad("k_bad", B, Nk, Hkv, D + 1);
  try {
    kattn::attention(space, q, kattn::kv::dense(k_bad, v), o, lse, opt);
    std::fprintf(stderr, "consumer: FAIL: a head-dim mismatch was not refused\n");
    return 1;
  } catch (const kattn::Error& e) {
    std::printf("bad shape refused: %s\n", e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  std::printf("%s", kattn::version_text().c_str());
  const int status = run();
  Kokkos::finalize();
  std::printf("consumer: %s\n", status == 0 ? "ok" : "FAILED");
  return status;
}
