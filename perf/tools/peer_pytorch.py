#!/usr/bin/env python3
"""kattn against the peer a CPU user would pick: PyTorch's own CPU scaled_dot_product_attention,
forward and backward, float32 / bfloat16 / float16 / float64, on the same shapes, as one markdown
table of ratios.

Each case alternates the two sides round by round: `kattn run|grad --random ... --repeat R --json`
(its median call) and a PyTorch process timing the same call R times after a warm-up (its median).
A ratio is PyTorch's time over kattn's (above 1: kattn is faster); the table gives each side's
median rate and the median ratio over the rounds, with every round's ratio. Decode rows are in GB/s
of K and V read. The heading names the CPU, its matrix and bf16 flags, the kernel each side ran
(kattn: its CPU products for bf16, from `kattn --version`; PyTorch: the SDPA backend it chose and
its CPU capability) and the thread counts.

  perf/tools/peer_pytorch.py --kattn build/bin/kattn --python /path/to/venv/bin/python --rounds 3
  perf/tools/peer_pytorch.py ... --threads 2 --kattn build-omp/bin/kattn   # Kokkos OpenMP build
  perf/tools/peer_pytorch.py ... --only "bf16"                             # cases whose label matches

--python: an interpreter with a current torch (pip, in a virtual environment outside the
repository: it is a peer to measure against, not a dependency). Threads: OMP_NUM_THREADS for
kattn (a Serial build runs on one core whatever it says) and torch.set_num_threads for PyTorch.
KATTN_CPU_PRODUCTS in the environment passes through to kattn (e.g. widened, to measure the exact
path).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

# (label, command, dtype, B, Nq, Nk, Hq, Hkv, D, causal); command run = forward, grad = backward.
CASES = [
    ("forward bf16, D = 128", "run", "bf16", 1, 4096, 4096, 1, 1, 128, False),
    ("forward bf16, D = 64", "run", "bf16", 1, 4096, 4096, 1, 1, 64, False),
    ("forward bf16, D = 128, causal", "run", "bf16", 1, 4096, 4096, 1, 1, 128, True),
    ("forward bf16, D = 64, causal", "run", "bf16", 1, 4096, 4096, 1, 1, 64, True),
    ("backward bf16, N = 2048, D = 128", "grad", "bf16", 1, 2048, 2048, 1, 1, 128, False),
    ("forward f16, D = 128", "run", "f16", 1, 4096, 4096, 1, 1, 128, False),
    ("backward f16, N = 2048, D = 128", "grad", "f16", 1, 2048, 2048, 1, 1, 128, False),
    ("forward f32, D = 128", "run", "f32", 1, 4096, 4096, 1, 1, 128, False),
    ("forward f32, D = 64", "run", "f32", 1, 4096, 4096, 1, 1, 64, False),
    ("forward f32, D = 128, causal", "run", "f32", 1, 4096, 4096, 1, 1, 128, True),
    ("forward f32, 8 heads, N = 2048", "run", "f32", 1, 2048, 2048, 8, 8, 128, False),
    ("backward f32, N = 2048, D = 128", "grad", "f32", 1, 2048, 2048, 1, 1, 128, False),
    ("forward f64, N = 2048, D = 128", "run", "f64", 1, 2048, 2048, 1, 1, 128, False),
    ("backward f64, N = 1024, D = 128", "grad", "f64", 1, 1024, 1024, 1, 1, 128, False),
    ("decode f32, 64K keys, 8 KV heads, 1:1", "run", "f32", 1, 1, 65536, 8, 8, 128, False),
    ("decode bf16, 64K keys, 8 KV heads, 1:1", "run", "bf16", 1, 1, 65536, 8, 8, 128, False),
    ("decode f32, 64K keys, GQA 64:8", "run", "f32", 1, 1, 65536, 64, 8, 128, False),
    ("decode bf16, 64K keys, GQA 64:8", "run", "bf16", 1, 1, 65536, 64, 8, 128, False),
]

TORCH_DTYPE = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}
BYTES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2}

# The PyTorch side: one case, R timed calls after a warm-up; prints JSON (median seconds, backend).
WORKER = r"""
import json, sys, time, statistics, torch
import torch.nn.functional as F
a = json.loads(sys.argv[1])
torch.set_num_threads(a["threads"])
torch.manual_seed(0)
dt = getattr(torch, a["dtype"])
grad = a["command"] == "grad"
q = torch.randn(a["B"], a["Hq"], a["Nq"], a["D"], dtype=dt, requires_grad=grad)
k = torch.randn(a["B"], a["Hkv"], a["Nk"], a["D"], dtype=dt, requires_grad=grad)
v = torch.randn(a["B"], a["Hkv"], a["Nk"], a["D"], dtype=dt, requires_grad=grad)
# SDPA's is_causal is aligned top-left; kattn's bottom-right: the same for Nq == Nk.
kw = dict(is_causal=a["causal"], enable_gqa=a["Hq"] != a["Hkv"])
try:
    backend = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}.get(
        int(torch._fused_sdp_choice(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=a["causal"], scale=None,
                                    enable_gqa=kw["enable_gqa"])), "?")
except Exception as e:  # private API: report what is known
    backend = "unknown (%s)" % type(e).__name__
if grad:
    o = F.scaled_dot_product_attention(q, k, v, **kw)
    do = torch.randn_like(o)
    call = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
else:
    call = lambda: F.scaled_dot_product_attention(q, k, v, **kw)
call()
ts = []
for _ in range(a["repeat"]):
    t0 = time.perf_counter()
    call()
    ts.append(time.perf_counter() - t0)
print(json.dumps({"seconds": statistics.median(ts), "backend": backend,
                  "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}))
"""


def kattn_seconds(kattn, case, threads, repeat):
    label, command, dtype, B, Nq, Nk, Hq, Hkv, D, causal = case
    argv = [kattn, command, "--random", f"{B},{Nq},{Nk},{Hq},{Hkv},{D}", "--dtype", dtype, "--repeat", str(repeat),
            "--json"] + (["--causal"] if causal else [])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def torch_run(python, case, threads, repeat):
    label, command, dtype, B, Nq, Nk, Hq, Hkv, D, causal = case
    arg = dict(command=command, dtype=TORCH_DTYPE[dtype], B=B, Nq=Nq, Nk=Nk, Hq=Hq, Hkv=Hkv, D=D, causal=causal,
               threads=threads, repeat=repeat)
    out = subprocess.run([python, "-c", WORKER, json.dumps(arg)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def work(case):
    """(amount, unit): GFLOP of the call (2.5x the forward's for the backward), or GB of K and V for decode."""
    label, command, dtype, B, Nq, Nk, Hq, Hkv, D, causal = case
    if Nq == 1:
        return 2.0 * B * Nk * Hkv * D * BYTES[dtype] / 1e9, "GB/s"
    pairs = Nq * Nk if not causal else sum(min(Nk, i + 1 + Nk - Nq) for i in range(Nq))
    return (4.0 * B * Hq * D * pairs * (2.5 if command == "grad" else 1.0)) / 1e9, "GFLOP/s"


def cpu_heading():
    info = {}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    flags = set(info.get("Flags", "").split())
    wanted = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
    have = " ".join(f for f in wanted if f in flags) or "none of " + ", ".join(wanted)
    return (f"{info.get('Model name', '?')} (family {info.get('CPU family', '?')}, model {info.get('Model', '?')}); "
            f"flags: {have}")


def kattn_products(kattn):
    text = subprocess.run([kattn, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"^cpu products: (.*)$", text, re.M)
    env = os.environ.get("KATTN_CPU_PRODUCTS")
    return (m.group(1) if m else "unknown") + (f" (KATTN_CPU_PRODUCTS={env})" if env else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kattn", required=True, help="the kattn program")
    ap.add_argument("--python", required=True, help="a python with a current torch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per side and round")
    ap.add_argument("--only", default="", help="a regular expression: the cases whose label matches")
    args = ap.parse_args()
    cases = [c for c in CASES if re.search(args.only, c[0])]
    rows = {}
    torch_info = {}
    for rnd in range(args.rounds):
        for case in cases:
            print(f"peer_pytorch: round {rnd + 1}/{args.rounds}: {case[0]}", file=sys.stderr)
            # Alternate which side goes first, round by round.
            sides = ("kattn", "torch") if rnd % 2 == 0 else ("torch", "kattn")
            t = {}
            for side in sides:
                if side == "kattn":
                    t["kattn"] = kattn_seconds(args.kattn, case, args.threads, args.repeat)
                else:
                    r = torch_run(args.python, case, args.threads, args.repeat)
                    t["torch"] = r["seconds"]
                    torch_info = r
                    rows.setdefault(case[0], {}).setdefault("backend", set()).add(r["backend"])
            row = rows.setdefault(case[0], {})
            row.setdefault("kattn", []).append(t["kattn"])
            row.setdefault("torch", []).append(t["torch"])
            row.setdefault("ratio", []).append(t["torch"] / t["kattn"])
    print(f"CPU: {cpu_heading()}")
    print(f"kattn: {args.kattn}, {args.threads} thread(s); its bf16 products: {kattn_products(args.kattn)}")
    print(f"PyTorch {torch_info.get('torch', '?')}, {args.threads} thread(s), CPU capability "
          f"{torch_info.get('capability', '?')}; {args.rounds} rounds of {args.repeat} timed calls per side\n")
    print("| case | kattn | PyTorch | PyTorch SDPA backend | kattn / PyTorch (median) | rounds |")
    print("|---|---:|---:|---|---:|---|")
    for case in cases:
        row = rows[case[0]]
        amount, unit = work(case)
        rate = lambda ts: amount / statistics.median(ts)
        spread = ", ".join(f"{x:.2f}" for x in row["ratio"])
        print(f"| {case[0]} | {rate(row['kattn']):.1f} {unit} | {rate(row['torch']):.1f} {unit} | "
              f"{'/'.join(sorted(row['backend']))} | **{statistics.median(row['ratio']):.2f}** | {spread} |")


if __name__ == "__main__":
    main()
