#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention in float64 and float32 on the shapes bench_kokkos_gpu
times (perf/gpu/device_check.sh); prints JSON lines ("JSON {...}").

Forward: B=1, H=16, N=16384, D=128, non-causal, contiguous [B, H, N, D] (PyTorch's own layout).
  float64: the MATH backend (the only one that takes float64).
  float32: every backend that takes it (MATH, EFFICIENT_ATTENTION; FLASH and CUDNN refuse
  float32 and say so), each with its relative L2 difference from the float64 result on the
  same inputs. TF32 stays off (PyTorch's default for matmul), so MATH is true float32.
Decode: q [1, 32, 1, 128], k/v [1, 8, 128K, 128], enable_gqa=True, per-call time of 20
  back-to-back calls; GB/s counts K and V read once.
Also the device copy bandwidth through PyTorch (bytes read + written), float64, 1 GiB.
Median of repeated runs after warm-up, device events, random normal data.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

QUICK = "--quick" in sys.argv
REPS = 3 if QUICK else 7
BACKENDS = {
    "MATH": SDPBackend.MATH,
    "EFFICIENT_ATTENTION": SDPBackend.EFFICIENT_ATTENTION,
    "FLASH_ATTENTION": SDPBackend.FLASH_ATTENTION,
    "CUDNN_ATTENTION": SDPBackend.CUDNN_ATTENTION,
}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def time_ms(fn, inner=1, reps=REPS):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    return median(ts)


def emit(d):
    print("JSON " + json.dumps(d), flush=True)


def rel_l2(a, b):
    return float(torch.linalg.vector_norm((a.double() - b.double()).flatten())
                 / torch.linalg.vector_norm(b.double().flatten()))


def forward(dev):
    B, H, D = 1, 16, 128
    N = 2048 if QUICK else 16384
    flops = 4.0 * B * H * N * N * D
    q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=torch.float64) for _ in range(3))
    ref = None
    for dtype, names in ((torch.float64, ["MATH"]), (torch.float32, list(BACKENDS))):
        qq, kk, vv = (t.to(dtype) for t in (q, k, v))
        for name in names:
            rec = {"bench": "torch_forward", "dtype": str(dtype).replace("torch.", ""), "backend": name,
                   "B": B, "H": H, "N": N, "D": D, "causal": False}
            try:
                with sdpa_kernel([BACKENDS[name]]):
                    out = F.scaled_dot_product_attention(qq, kk, vv)
                    ms = time_ms(lambda: F.scaled_dot_product_attention(qq, kk, vv))
                rec.update(ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
                if dtype == torch.float64:
                    ref = out
                elif ref is not None:
                    rec.update(rel_l2_vs_float64=rel_l2(out, ref))
                del out
            except Exception as e:  # a backend that does not take this dtype, or out of memory
                rec.update(error=str(e).splitlines()[0][:160])
            torch.cuda.empty_cache()
            emit(rec)
        del qq, kk, vv
    del q, k, v, ref
    torch.cuda.empty_cache()


def decode(dev):
    hq, hkv, D = 32, 8, 128
    ctx = 16384 if QUICK else 131072
    for dtype, names in ((torch.float64, ["MATH"]), (torch.float32, list(BACKENDS))):
        q = torch.randn(1, hq, 1, D, device=dev, dtype=dtype)
        k = torch.randn(1, hkv, ctx, D, device=dev, dtype=dtype)
        v = torch.randn(1, hkv, ctx, D, device=dev, dtype=dtype)
        nbytes = 2.0 * ctx * hkv * D * q.element_size()
        for name in names:
            rec = {"bench": "torch_decode", "dtype": str(dtype).replace("torch.", ""), "backend": name,
                   "ctx": ctx, "Hq": hq, "Hkv": hkv, "D": D}
            try:
                with sdpa_kernel([BACKENDS[name]]):
                    ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), inner=20)
                rec.update(us=ms * 1e3, gbs=nbytes / (ms * 1e-3) / 1e9)
            except Exception as e:
                rec.update(error=str(e).splitlines()[0][:160])
            emit(rec)
        del q, k, v
        torch.cuda.empty_cache()


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"allow_tf32(matmul)={torch.backends.cuda.matmul.allow_tf32}", flush=True)
    props = torch.cuda.get_device_properties(0)
    emit({"bench": "torch_device", "name": props.name, "sms": props.multi_processor_count,
          "memory_gib": props.total_memory / 2**30})
    torch.manual_seed(0)
    n = (1 << 24) if QUICK else (1 << 27)  # float64 elements: 1 GiB
    src = torch.randn(n, device=dev, dtype=torch.float64)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), inner=5)
    emit({"bench": "torch_copy", "gbs": 2 * n * 8 / (ms * 1e-3) / 1e9})
    del src, dst
    torch.cuda.empty_cache()
    what = sys.argv[1:] and [a for a in sys.argv[1:] if not a.startswith("--")]
    if not what or "decode" in what:
        decode(dev)
    if not what or "fwd" in what:
        forward(dev)


if __name__ == "__main__":
    main()
