#!/usr/bin/env python3
"""Paired speed of one `kattn run` (or `kattn grad`: --command grad) with and without some flags
(e.g. a score variant's cost).

Runs `kattn run ARGS --repeat N --json` and the same with FLAGS added, alternately (the order flips
every round), and prints the median, min and max over the rounds of the ratio with / without of
the median call time. On a shared, noisy machine the median of paired ratios is the figure to read.

  perf/tools/compare_flags.py --kattn build/bin/kattn --flags "--sinks sinks.npy" \
      -- --random 1,2048,2048,8,8,128 --causal
"""
import argparse
import json
import shlex
import statistics
import subprocess


def seconds(kattn, command, args, repeat):
    cmd = [kattn, command, *args, "--repeat", str(repeat), "--json", "--quiet"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kattn", required=True, help="the kattn program")
    ap.add_argument("--flags", required=True, help="the flags whose cost is measured, as one string")
    ap.add_argument("--command", choices=["run", "grad"], default="run", help="the kattn command timed")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5, help="--repeat of each run (its median call time is used)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the arguments of the kattn command")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    extra = shlex.split(a.flags)
    ratios = []
    for r in range(a.rounds):
        runs = [("without", args), ("with", args + extra)]
        if r % 2:
            runs.reverse()
        t = {name: seconds(a.kattn, a.command, run_args, a.repeat) for name, run_args in runs}
        ratios.append(t["with"] / t["without"])
    print(f"{a.command} {' '.join(args)} | {a.flags}: with / without median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {a.rounds} rounds)")


if __name__ == "__main__":
    main()
