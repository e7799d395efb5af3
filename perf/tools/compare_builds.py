#!/usr/bin/env python3
"""Paired speed comparison of one benchmark binary from two builds (e.g. main against a change).

Runs the two binaries alternately (the order flips every round) on the same filter and prints, per
benchmark, the median, min and max over the rounds of the ratio new / base of the CPU time. On a
shared, noisy machine the median of paired ratios is the figure to read, never a lone time.

  perf/tools/compare_builds.py --base ../old/build/perf/bench_forward --new build/perf/bench_forward \
      --filter 'N:4096/D:128' --rounds 5
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(binary, flt, min_time):
    cmd = [binary, f"--benchmark_filter={flt}", "--benchmark_format=json"]
    if min_time:
        cmd.append(f"--benchmark_min_time={min_time}")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {b["name"]: b["cpu_time"] for b in json.loads(out)["benchmarks"] if b.get("run_type", "iteration") == "iteration"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the benchmark binary of the baseline build")
    ap.add_argument("--new", required=True, help="the same benchmark binary of the build compared")
    ap.add_argument("--filter", default=".", help="--benchmark_filter for both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", default="", help="--benchmark_min_time for both (default: the benchmarks' own)")
    a = ap.parse_args()
    ratios = {}
    for r in range(a.rounds):
        order = [("base", a.base), ("new", a.new)]
        if r % 2:
            order.reverse()
        times = {name: run(binary, a.filter, a.min_time) for name, binary in order}
        for bench, t_new in times["new"].items():
            t_base = times["base"].get(bench)
            if t_base:
                ratios.setdefault(bench, []).append(t_new / t_base)
    if not ratios:
        sys.exit("no benchmark matched in both builds")
    print(f"| benchmark | median new/base (CPU) | min | max | rounds |")
    print(f"|---|---|---|---|---|")
    for bench, rs in ratios.items():
        print(f"| {bench} | {statistics.median(rs):.3f} | {min(rs):.3f} | {max(rs):.3f} | {len(rs)} |")


if __name__ == "__main__":
    main()
