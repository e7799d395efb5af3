#!/usr/bin/env python3
"""Summary of perf/gpu/device_check.sh (the Kokkos kernels): reads the logs in OUT (argument 1) and writes
OUT/summary.md (also printed): the card and its FMA peaks, the test result, and per target
kattn (Kokkos, CUDA backend) against PyTorch SDPA on the same shapes, with issue 10's bars:
  float64 forward N=16384 D=128: >= 50% of the float64 FMA peak and >= 5x PyTorch's MATH SDPA
  float64 decode 128K: >= 80% of the measured device copy bandwidth.
Peaks: SMs x FMA units per SM (Hopper: 64 float64, 128 float32) x 2 x the card's max SM clock
(nvidia-smi clocks.max.sm); the H200 SXM datasheet gives about 34 and 67 TFLOP/s.
"""
import csv
import json
import os
import re
import sys


def json_lines(path):
    recs = []
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            if line.startswith("JSON "):
                try:
                    recs.append(json.loads(line[5:]))
                except json.JSONDecodeError:
                    pass
    return recs


def card(out):
    name, clock_mhz, sms = "unknown", 1980.0, 132
    path = os.path.join(out, "nvidia-smi.txt")
    if os.path.exists(path):
        rows = list(csv.reader(open(path)))
        if len(rows) >= 2:
            head = [h.strip() for h in rows[0]]
            vals = dict(zip(head, [v.strip() for v in rows[1]]))
            name = vals.get("name", name)
            m = re.match(r"([\d.]+)", vals.get("clocks.max.sm [MHz]", ""))
            if m:
                clock_mhz = float(m.group(1))
    dev = next((r for r in json_lines(os.path.join(out, "sdpa_fp.log")) if r.get("bench") == "torch_device"), None)
    if dev:
        sms = int(dev["sms"])
    return name, clock_mhz, sms


def tests(out, suite):
    """The GoogleTest shards of `suite` (device_check.sh's SUITE.I.log): passed and failed counts."""
    logs = sorted(f for f in os.listdir(out) if re.fullmatch(re.escape(suite) + r"\.\d+\.log", f))
    if not logs:
        return "not run"
    passed = failed = 0
    unfinished = []
    for f in logs:
        txt = open(os.path.join(out, f), errors="replace").read()
        p = re.findall(r"\[  PASSED  \] (\d+) test", txt)
        q = re.findall(r"\[  FAILED  \] (\d+) test", txt)
        if not p and not q:
            unfinished.append(f)
        passed += int(p[-1]) if p else 0
        failed += int(q[-1]) if q else 0
    text = f"{passed} passed, {failed} failed in {len(logs)} shards"
    if unfinished:
        text += " (no summary: " + ", ".join(unfinished) + ")"
    return text


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    name, clock_mhz, sms = card(out)
    peak64 = sms * 64 * 2 * clock_mhz * 1e6 / 1e12
    peak32 = sms * 128 * 2 * clock_mhz * 1e6 / 1e12
    kat = json_lines(os.path.join(out, "bench_kokkos.log"))
    tor = json_lines(os.path.join(out, "sdpa_fp.log"))
    lines = [f"# kattn Kokkos kernels on {name} (CUDA backend)", "",
             f"- card: {name}, {sms} SMs, max SM clock {clock_mhz:.0f} MHz: FMA peaks "
             f"float64 {peak64:.1f} TFLOP/s, float32 {peak32:.1f} TFLOP/s",
             f"- tests on the CUDA space (kattn_tests): {tests(out, 'kattn_tests')}",
             f"- tests on the Serial space of the CUDA build (kattn_tests_serial): {tests(out, 'kattn_tests_serial')}"]
    copy = next((r for r in kat if r.get("bench") == "kokkos_copy"), None)
    tcopy = next((r for r in tor if r.get("bench") == "torch_copy"), None)
    copy_gbs = copy["gbs"] if copy else (tcopy["gbs"] if tcopy else None)
    lines.append(f"- device copy bandwidth (read + written): Kokkos deep_copy "
                 f"{copy['gbs']:.0f} GB/s" if copy else "- Kokkos copy: not measured")
    if tcopy:
        lines[-1] += f", PyTorch copy_ {tcopy['gbs']:.0f} GB/s"
    lines += ["", "| case | kattn | PyTorch SDPA (backend) | kattn / PyTorch | fraction of ceiling | bar |",
              "|---|---|---|---|---|---|"]
    for dtype, peak in (("float64", peak64), ("float32", peak32)):
        k = next((r for r in kat if r.get("bench") == "kattn_forward" and r.get("dtype") == dtype), None)
        ts = [r for r in tor if r.get("bench") == "torch_forward" and r.get("dtype") == dtype and "tflops" in r]
        t = max(ts, key=lambda r: r["tflops"]) if ts else None
        ks = (f"{k['tflops']:.2f} TFLOP/s ({k['ms']:.1f} ms, tiles {k['block_q']}x{k['block_k']}, "
              f"err {k['spot_max_abs_err']:.1e})") if k else "not run"
        tstr = f"{t['tflops']:.2f} TFLOP/s ({t['backend']})" if t else "not run"
        ratio = k["tflops"] / t["tflops"] if k and t else None
        frac = k["tflops"] / peak if k else None
        bar = ""
        if dtype == "float64" and k:
            ok = frac >= 0.5 and ratio is not None and ratio >= 5
            bar = f"{'MET' if ok else 'MISSED'} (>= 50% of peak and >= 5x MATH)"
        shape = f"B={k['B']} H={k['H']} N={k['N']} D={k['D']}" if k else ""
        lines.append(f"| forward {dtype} {shape} | {ks} | {tstr} | "
                     f"{'%.2fx' % ratio if ratio else '-'} | {'%.1f%% of FMA peak' % (100 * frac) if frac else '-'} "
                     f"| {bar} |")
    for dtype, peak in (("float64", peak64), ("float32", peak32)):
        k = next((r for r in kat if r.get("bench") == "kattn_backward" and r.get("dtype") == dtype), None)
        if k:
            lines.append(f"| backward {dtype} B={k['B']} H={k['H']} N={k['N']} D={k['D']} | {k['tflops']:.2f} TFLOP/s "
                         f"({k['ms']:.1f} ms, tiles {k['block_q']}x{k['block_k']}, dV sum err "
                         f"{k['spot_dv_sum_rel_err']:.1e}) | - | - | {100 * k['tflops'] / peak:.1f}% of FMA peak | |")
    for dtype in ("float64", "float32"):
        k = next((r for r in kat if r.get("bench") == "kattn_decode" and r.get("dtype") == dtype), None)
        ts = [r for r in tor if r.get("bench") == "torch_decode" and r.get("dtype") == dtype and "gbs" in r]
        t = max(ts, key=lambda r: r["gbs"]) if ts else None
        ks = (f"{k['gbs']:.0f} GB/s ({k['us']:.0f} us, {k['splits']} splits, err {k['spot_max_abs_err']:.1e})"
              if k else "not run")
        tstr = f"{t['gbs']:.0f} GB/s ({t['backend']})" if t else "not run"
        ratio = k["gbs"] / t["gbs"] if k and t else None
        frac = k["gbs"] / copy_gbs if k and copy_gbs else None
        bar = f"{'MET' if frac >= 0.8 else 'MISSED'} (>= 80% of copy)" if dtype == "float64" and frac else ""
        shape = f"B=1 Hq={k['Hq']} Hkv={k['Hkv']} ctx={k['ctx']}" if k else ""
        lines.append(f"| decode {dtype} {shape} | {ks} | {tstr} | {'%.2fx' % ratio if ratio else '-'} | "
                     f"{'%.0f%% of copy' % (100 * frac) if frac else '-'} | {bar} |")
    errs = [r for r in tor if "error" in r]
    if errs:
        lines += ["", "PyTorch backends that refused a case:"]
        lines += [f"- {r['bench']} {r.get('dtype')} {r.get('backend')}: {r['error']}" for r in errs]
    f32 = [r for r in tor if r.get("bench") == "torch_forward" and "rel_l2_vs_float64" in r]
    if f32:
        lines += ["", "PyTorch float32 forward, relative L2 difference from its float64 MATH result: " +
                  ", ".join(f"{r['backend']} {r['rel_l2_vs_float64']:.1e}" for r in f32)]
    sweep = json_lines(os.path.join(out, "bench_sweep.log"))
    for bench in ("kattn_forward", "kattn_backward"):
        rows = [r for r in sweep if r.get("bench") == bench]
        if rows:
            lines += ["", f"{bench} tiles (N={rows[0]['N']}; automatic = tile_search.hpp's): " + ", ".join(
                f"{r['dtype']} {r['block_q']}x{r['block_k']} {r['tiles']}"
                + (f" (level {r['scratch_level']})" if "scratch_level" in r else "") + f" {r['tflops']:.2f} TFLOP/s"
                for r in rows)]
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "summary.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
