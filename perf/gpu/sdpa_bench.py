#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on the shapes bench_cuda times, each backend
(FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION) separately; prints JSON lines.

Forward: bf16, B=1, H=16, N=16384, D=128, causal and not; inputs are made as [B, N, H, D]
(kattn's layout) and passed as the transposed view [B, H, N, D]; the contiguous
[B, H, N, D] layout is timed too, and the best of all is what the report compares with.
Forward across shapes (not with --quick): bench_cuda's forward_shapes, [B, N, H, D] transposed.
Decode: q [1, 32, 1, 128], k/v [1, 8, ctx, 128] (enable_gqa=True), ctx 32K/64K/128K;
per-call time of 20 back-to-back calls, like bench_cuda.
Median of repeated runs, 3 input sets rotated, random normal data.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

QUICK = "--quick" in sys.argv
REPS = 5 if QUICK else 15
BACKENDS = {
    "FLASH_ATTENTION": SDPBackend.FLASH_ATTENTION,
    "EFFICIENT_ATTENTION": SDPBackend.EFFICIENT_ATTENTION,
    "CUDNN_ATTENTION": SDPBackend.CUDNN_ATTENTION,
}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def time_ms(fn, nsets, inner=1):
    for i in range(3):
        fn(i % nsets)
    torch.cuda.synchronize()
    ts = []
    for r in range(REPS):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(inner):
            fn((r + i) % nsets)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    return median(ts)


def emit(d):
    print("JSON " + json.dumps(d), flush=True)


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    torch.manual_seed(0)

    # copy bandwidth through PyTorch (bytes read + written)
    n = 1 << 29  # bf16 elements = 1 GiB
    src = torch.randn(n, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_ms(lambda i: dst.copy_(src), 1)
    emit({"bench": "torch_copy", "gbs": 2 * n * 2 / (ms * 1e-3) / 1e9})
    del src, dst

    B, H, D = 1, 16, 128
    N = 4096 if QUICK else 16384
    sets = 3
    bnhd = [[torch.randn(B, N, H, D, device=dev, dtype=torch.bfloat16) for _ in range(3)] for _ in range(sets)]
    bhnd = [[t.transpose(1, 2).contiguous() for t in s] for s in bnhd]
    for causal in (False, True):
        flops = 4.0 * B * H * N * N * D * (0.5 if causal else 1.0)
        for layout, data in (("bnhd-view", [[t.transpose(1, 2) for t in s] for s in bnhd]), ("bhnd", bhnd)):
            for name, be in BACKENDS.items():
                rec = {"bench": "torch_forward", "backend": name, "layout": layout, "causal": causal,
                       "B": B, "H": H, "N": N, "D": D}
                try:
                    with sdpa_kernel([be]):
                        def fn(i):
                            q, k, v = data[i]
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        ms = time_ms(fn, sets)
                    rec.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
                except Exception as e:  # a backend that does not take this shape/layout
                    rec.update(error=str(e).splitlines()[0][:160])
                emit(rec)
    del bnhd, bhnd
    torch.cuda.empty_cache()

    # bench_cuda's forward_shapes: D = 64/128/256, N = 1K/4K/16K, B = 16K / N, H = 2048 / D,
    # [B, N, H, D] inputs passed transposed, one input set (each call reads 12-100 MB).
    for D2 in ([] if QUICK else [64, 128, 256]):
        for N2 in (1024, 4096, 16384):
            B2, H2 = 16384 // N2, 2048 // D2
            qkv = [torch.randn(B2, N2, H2, D2, device=dev, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3)]
            for causal in (False, True):
                flops = 4.0 * B2 * H2 * N2 * N2 * D2 * (0.5 if causal else 1.0)
                for name, be in BACKENDS.items():
                    rec = {"bench": "torch_forward_shapes", "backend": name, "causal": causal,
                           "B": B2, "H": H2, "N": N2, "D": D2}
                    try:
                        with sdpa_kernel([be]):
                            ms = time_ms(lambda i: F.scaled_dot_product_attention(*qkv, is_causal=causal), 1)
                        rec.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
                    except Exception as e:
                        rec.update(error=str(e).splitlines()[0][:160])
                    emit(rec)
            del qkv
            torch.cuda.empty_cache()

    hq, hkv = 32, 8
    for ctx in ([32768] if QUICK else [32768, 65536, 131072]):
        q = [torch.randn(1, hq, 1, D, device=dev, dtype=torch.bfloat16) for _ in range(sets)]
        kv = [(torch.randn(1, hkv, ctx, D, device=dev, dtype=torch.bfloat16),
               torch.randn(1, hkv, ctx, D, device=dev, dtype=torch.bfloat16)) for _ in range(sets)]
        nbytes = 2.0 * ctx * hkv * D * 2
        for name, be in BACKENDS.items():
            rec = {"bench": "torch_decode", "backend": name, "ctx": ctx, "Hq": hq, "Hkv": hkv, "D": D}
            try:
                with sdpa_kernel([be]):
                    def fn(i):
                        return F.scaled_dot_product_attention(q[i], kv[i][0], kv[i][1], enable_gqa=True)
                    ms = time_ms(fn, sets, inner=20)
                rec.update(us=ms * 1e3, gbs=nbytes / (ms * 1e-3) / 1e9)
            except Exception as e:
                rec.update(error=str(e).splitlines()[0][:160])
            emit(rec)
        del q, kv
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
