#!/usr/bin/env python3
"""Where kattn stands against this CPU's ceilings: every one-core and two-thread target of the
CPU speed work, measured on the machine at hand, as one markdown table.

Each figure is a ratio taken inside one benchmark process (a kernel against the FMA peak or read
ceiling measured in the same process, a kernel against another one timed alternately), or the
ratio of one build's times at one and two threads run back to back. Rounds repeat everything;
the table gives the median and the range over the rounds. Noisy machines: read the medians.

  perf/tools/cpu_targets.py --serial build-dev --openmp build-omp --rounds 3

--serial: a build of kattn's benchmarks (-DKATTN_ENABLE_BENCHMARKS=ON) on any Kokkos; its host
space runs on one thread (OMP_NUM_THREADS=1). --openmp: the same on a Kokkos with OpenMP, for the
two-thread rows (left out: those rows are skipped). The textbook rows need bench_textbook_blas
(built where OpenBLAS is found); OPENBLAS_CORETYPE is passed through, and the table names the
kernels OpenBLAS ran.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

N = "N:4096"


def bench(build, binary, flt, threads=1, env=None):
    """Runs one benchmark binary; returns {name: benchmark dict}."""
    path = os.path.join(build, "perf", binary)
    e = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false", OPENBLAS_NUM_THREADS=str(threads))
    e.update(env or {})
    out = subprocess.run([path, f"--benchmark_filter={flt}", "--benchmark_format=json"], check=True,
                         capture_output=True, text=True, env=e).stdout
    return {b["name"].split("/min_time")[0].split("/iterations")[0]: b for b in json.loads(out)["benchmarks"]}


def one(results, prefix):
    """The single benchmark named prefix, or prefix and more path elements."""
    prefix = prefix.rstrip("/")
    hits = [b for name, b in results.items() if name == prefix or name.startswith(prefix + "/")]
    if len(hits) != 1:
        sys.exit(f"cpu_targets: {len(hits)} benchmarks named {prefix}*")
    return hits[0]


class Table:
    def __init__(self):
        self.rows = {}  # label -> (target text, met(x), [values], note)

    def add(self, label, target, met, value, note=""):  # target "": a ceiling, no verdict
        row = self.rows.setdefault(label, [target, met, [], set()])
        row[2].append(value)
        if note:
            row[3].add(note)

    def markdown(self):
        lines = ["| target | wanted | median | rounds | met |", "|---|---|---:|---|---|"]
        for label, (target, met, values, notes) in self.rows.items():
            med = statistics.median(values)
            spread = ", ".join(f"{v:.3f}" for v in values)
            note = f" ({'; '.join(sorted(notes))})" if notes else ""
            verdict = ("yes" if met(med) else "no") if met else ""
            lines.append(f"| {label}{note} | {target or 'ceiling'} | **{med:.3f}** | {spread} | {verdict} |")
        return "\n".join(lines)


def at_least(x):
    return f">= {x}", lambda v: v >= x


def at_most(x):
    return f"<= {x}", lambda v: v <= x


def serial_round(build, t):
    peaks = bench(build, "bench_peaks", "BM_FmaPeak|BM_StreamRead/")
    t.add("FMA peak, float (GFLOP/s)", "", None, one(peaks, "BM_FmaPeakFloat")["GFLOP/s"])
    t.add("FMA peak, double (GFLOP/s)", "", None, one(peaks, "BM_FmaPeakDouble")["GFLOP/s"])
    t.add("read ceiling, one thread (GB/s)", "", None, one(peaks, "BM_StreamRead")["GB/s"])

    fwd = bench(build, "bench_forward", f"BM_Attention<(float|double), Algo::tiled>/{N}/D:(64|128)/causal:0/")
    for ty, d, goal in (("float", 128, 0.85), ("float", 64, 0.75), ("double", 128, 0.80), ("double", 64, 0.80)):
        b = one(fwd, f"BM_Attention<{ty}, Algo::tiled>/{N}/D:{d}/causal:0")
        t.add(f"forward {ty}, D = {d}, one core: fraction of the FMA peak", *at_least(goal), b["frac_peak"])

    heads = bench(build, "bench_forward", f"BM_InterleavedHeads<float>/{N}/D:128/H:(8|16)/")
    for h in (8, 16):
        b = one(heads, f"BM_InterleavedHeads<float>/{N}/D:128/H:{h}/")
        t.add(f"forward, {h} interleaved heads: rate over one head's", *at_least(0.97), b["ratio_median"])

    ratio = bench(build, "bench_backward", f"BM_BackwardForwardRatio<float>/{N}/D:128/causal:0/")
    t.add("backward / forward, float, D = 128", *at_most(2.4),
          one(ratio, f"BM_BackwardForwardRatio<float>/{N}/D:128/causal:0")["ratio_median_wall"])

    dec = bench(build, "bench_decode", "BM_Decode<float>/B:1/N:65536/Hkv:8/G:(1|8)/split:0/page:0/shuffled:1/block_k:0")
    for g, goal in ((1, 0.85), (8, 0.75)):
        b = one(dec, f"BM_Decode<float>/B:1/N:65536/Hkv:8/G:{g}/")
        t.add(f"decode, 8 KV heads x {g} query heads, 64K keys, one thread: fraction of the read ceiling",
              *at_least(goal), b["frac_stream"])


def textbook_round(build, t, threads):
    path = os.path.join(build, "perf", "bench_textbook_blas")
    if not os.path.exists(path):
        return
    r = bench(build, "bench_textbook_blas", f"BM_TiledOverTextbookBlas<float, Pass::(forward|backward)>/{N}/D:128/",
              threads=threads)
    for p, goal in (("forward", 1.6), ("backward", 1.4)):
        b = one(r, f"BM_TiledOverTextbookBlas<float, Pass::{p}>/{N}/D:128")
        t.add(f"{p} over the textbook on OpenBLAS, {threads} thread{'s' if threads > 1 else ''}", *at_least(goal),
              b["speedup_median"], b.get("label", ""))


def two_thread_round(build, t, rnd):
    cases = (("bench_forward", f"BM_Attention<float, Algo::tiled>/{N}/D:128/causal:1/", "causal forward", 1.8),
             ("bench_backward", f"BM_Backward<float, Algo::tiled>/{N}/D:128/causal:1/dq:0/", "causal backward", 1.8),
             # Decode with one split: both threads busy (one idle reads 1.0); memory-bound at 1:1,
             # where two threads share the read bandwidth, so not 2.
             ("bench_decode", "BM_Decode<float>/B:1/N:65536/Hkv:8/G:1/split:0/page:0/shuffled:1/block_k:0",
              "decode, 8 KV heads x 1, one split", 1.3),
             ("bench_decode", "BM_Decode<float>/B:1/N:65536/Hkv:8/G:8/split:0/page:0/shuffled:1/block_k:0",
              "decode, 8 KV heads x 8, one split", 1.3))
    for binary, flt, label, goal in cases:
        times = {}
        for threads in ((1, 2) if rnd % 2 == 0 else (2, 1)):
            times[threads] = next(iter(bench(build, binary, flt, threads).values()))["real_time"]
        t.add(f"{label}: two threads over one", *at_least(goal), times[1] / times[2])


def machine():
    info = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    flags = info.get("Flags", "").split()
    simd = "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2")
    return (f"{info.get('Model name', platform.processor())}, family {info.get('CPU family', '?')} model "
            f"{info.get('Model', '?')}, {info.get('CPU(s)', '?')} CPUs, {simd}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serial", required=True, help="build directory for the one-core rows")
    ap.add_argument("--openmp", help="build directory on a Kokkos with OpenMP, for the two-thread rows")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    t = Table()
    for rnd in range(args.rounds):
        print(f"cpu_targets: round {rnd + 1} of {args.rounds}", file=sys.stderr)
        serial_round(args.serial, t)
        textbook_round(args.serial, t, 1)
        if args.openmp:
            two_thread_round(args.openmp, t, rnd)
            textbook_round(args.openmp, t, 2)
    print(f"Machine: {machine()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}\n")
    print(t.markdown())


if __name__ == "__main__":
    main()
