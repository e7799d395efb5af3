#!/usr/bin/env python3
"""Reads the logs device_check.sh wrote (JSON lines from bench_cuda and sdpa_bench.py,
test logs, sanitizer logs) and prints the short table, last. Usage: report.py OUTDIR"""
import json
import os
import re
import sys

out = sys.argv[1]


def jsonl(name):
    path = os.path.join(out, name)
    rows = []
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            if line.startswith("JSON "):
                try:
                    rows.append(json.loads(line[5:]))
                except ValueError:
                    pass
    return rows


def last_line(name, pattern):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return "not run"
    hits = [l.strip() for l in open(path, errors="replace") if re.search(pattern, l)]
    return hits[-1] if hits else "no result line (see %s)" % name


k = jsonl("bench_cuda.log")
t = jsonl("sdpa.log")
copy = next((r["gbs"] for r in k if r["bench"] == "copy"), None)

print("\n==== kattn CUDA check: tests ====")
names = ["host", "decode", "graphs"] + sorted(f[5:-4] for f in os.listdir(out) if f.startswith("test_forward") and f.endswith(".log"))
for name in names:
    rc = open(os.path.join(out, f"test_{name}.rc")).read().strip() if os.path.exists(os.path.join(out, f"test_{name}.rc")) else "?"
    print(f"test_{name:15s} rc={rc:7s} {last_line(f'test_{name}.log', r'passed, .* failed|SKIP')}")
for name in sorted(f for f in os.listdir(out) if f.startswith("sanitizer_") and f.endswith(".log")):
    print(f"{name[:-4]:32s} {last_line(name, r'ERROR SUMMARY|RACECHECK SUMMARY|timed out|not found|Device not supported')}")
sass = os.path.join(out, "sass_summary.txt")
if os.path.exists(sass):
    print("SASS: " + " | ".join(l.strip() for l in open(sass)))

print("\n==== kattn CUDA check: speed (H200 targets) ====")
print(f"{'shape':44s} {'kattn':>12s} {'torch best':>24s} {'target':>22s}")
for causal in (False, True):
    ks = [r for r in k if r["bench"] == "forward" and r["causal"] == causal and r["kernel"].startswith("sm90")]
    best = max(ks, key=lambda r: r["tflops"]) if ks else None
    ts = [r for r in t if r["bench"] == "torch_forward" and r["causal"] == causal and "tflops" in r]
    tb = max(ts, key=lambda r: r["tflops"]) if ts else None
    n = (best or tb or {"N": "?"})["N"]
    shape = f"fwd bf16 D128 N{n} {'causal' if causal else 'non-causal'} TFLOP/s"
    ks_ = f"{best['tflops']:.0f} ({best['kernel']})" if best else "n/a"
    ts_ = f"{tb['tflops']:.0f} ({tb['backend'][:5]},{tb['layout']})" if tb else "n/a"
    tgt = ">=600 and > torch" if not causal else "> torch"
    ok = best and tb and best["tflops"] > tb["tflops"] and (causal or best["tflops"] >= 600)
    print(f"{shape:44s} {ks_:>12s} {ts_:>24s} {tgt:>18s} {'MET' if ok else 'MISSED'}")
for r in [r for r in k if r["bench"] == "decode"]:
    ts = [x for x in t if x["bench"] == "torch_decode" and x["ctx"] == r["ctx"] and "gbs" in x]
    tb = max(ts, key=lambda x: x["gbs"]) if ts else None
    frac = r["gbs"] / copy if copy else 0
    shape = f"decode bf16 B1 Hkv8 ctx {r['ctx']//1024}K GB/s (splits {r['splits']})"
    ts_ = f"{tb['gbs']:.0f} ({tb['backend'][:5]})" if tb else "n/a"
    print(f"{shape:44s} {r['gbs']:7.0f} {100*frac:3.0f}% {ts_:>24s} {'>=90% of copy':>18s} {'MET' if frac >= 0.9 else 'MISSED'}")
print(f"{'copy bandwidth D2D (read+write) GB/s':44s} {copy if copy else 0:12.0f}")
