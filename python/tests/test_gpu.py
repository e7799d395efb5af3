"""PyTorch tensors on the GPU: read in place by a kattn built with a CUDA (or HIP) Kokkos, run on
PyTorch's current stream, the hand-written kernels for the 16-bit problems they take and the
portable ones otherwise, forward and backward. Skipped without a GPU (perf/gpu/device_check.sh
runs them on one); a GPU tensor given to a host-only build is refused by name."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402
from reference import assert_16bit_rule, textbook, textbook16  # noqa: E402

GPU = "hip" if getattr(torch.version, "hip", None) else "cuda"
HAS_GPU = torch.cuda.is_available()
needs_gpu_build = pytest.mark.skipif(not HAS_GPU or kattn._kattn.device != GPU,
                                     reason=f"needs a GPU and kattn built with a {GPU.upper()} Kokkos "
                                            f"(this kattn: {kattn._kattn.device or 'host only'})")


def tensors(shape, dtype=torch.float64, device="cuda", seed=0):
    """q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D] from (B, Nq, Nk, Hq, Hkv, D)."""
    B, Nq, Nk, Hq, Hkv, D = shape
    g = torch.Generator().manual_seed(seed)
    made = [torch.randn(B, n, h, D, dtype=torch.float64, generator=g) for n, h in ((Nq, Hq), (Nk, Hkv), (Nk, Hkv))]
    return [t.to(dtype).to(device) for t in made]


@pytest.mark.skipif(not HAS_GPU or kattn._kattn.device == GPU, reason="needs a GPU and a kattn built without it")
def test_a_host_only_build_refuses_gpu_tensors_by_name():
    q, k, v = tensors((1, 4, 4, 2, 2, 8))
    with pytest.raises(kattn.Error, match=re.escape(f"q: a tensor on {q.device}")):
        kattn.attention(q, k, v)


@needs_gpu_build
@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"window_size": (7, 2), "softcap": 5.0}])
def test_float64_forward_and_backward_equal_the_cpus(opt):
    cpu = [t.requires_grad_() for t in tensors((2, 33, 70, 4, 2, 16), device="cpu", seed=1)]
    gpu = [t.detach().cuda().requires_grad_() for t in cpu]
    o_cpu, o_gpu = kattn.flash_attn_func(*cpu, **opt), kattn.flash_attn_func(*gpu, **opt)
    assert o_gpu.device == gpu[0].device
    assert (o_gpu.cpu() - o_cpu).abs().max() <= 1e-12
    dout = torch.randn_like(o_cpu)
    for g, c in zip(torch.autograd.grad(o_gpu, gpu, dout.cuda()), torch.autograd.grad(o_cpu, cpu, dout)):
        assert g.device == gpu[0].device and (g.cpu() - c).abs().max() <= 1e-11


@needs_gpu_build
def test_sdpa_and_the_plain_calls_on_gpu_tensors():
    q, k, v = (t.transpose(1, 2) for t in tensors((1, 9, 27, 6, 2, 8), seed=2))
    o = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref = kattn.torch.scaled_dot_product_attention(*(t.cpu() for t in (q, k, v)), is_causal=True, enable_gqa=True)
    assert o.is_cuda and (o.cpu() - ref).abs().max() <= 1e-12
    o, lse = kattn.attention(q, k, v, layout="bhnd", return_lse=True)  # tensors in, tensors out, no autograd
    assert o.is_cuda and lse.is_cuda


@needs_gpu_build
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_forward_runs_the_hand_written_kernel_and_meets_the_rule(dtype):
    q, k, v = tensors((2, 300, 300, 8, 2, 128), dtype=getattr(torch, dtype), seed=3)
    arrays, target, _ = kattn._arrays.arguments(q=q, k=k, v=v)
    o, lse, plan = kattn._kattn.attention(*arrays, "bnhd", {"causal": True}, target)
    assert "hand-written CUDA kernel" in plan["reason"]
    stored = [t.float().cpu().numpy() for t in (q, k, v)]
    ref_o, ref_lse, _ = textbook(*stored, causal=True)
    assert_16bit_rule(o.float().cpu().numpy(), lse.cpu().numpy(), ref_o, ref_lse,
                      textbook16(*stored, dtype, causal=True))
    assert torch.equal(kattn.flash_attn_func(q, k, v, causal=True), o)


@needs_gpu_build
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_gradients_near_float64s(dtype):
    q, k, v = (t.requires_grad_() for t in tensors((1, 100, 100, 4, 2, 64), dtype=getattr(torch, dtype), seed=4))
    o = kattn.flash_attn_func(q, k, v, causal=True)
    dout = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), dout)
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = torch.autograd.grad(kattn.flash_attn_func(*wide, causal=True), wide, dout.double())
    eps = torch.finfo(getattr(torch, dtype)).eps
    for g, r in zip(grads, ref):
        assert g.dtype == q.dtype and (g.double() - r).abs().max() <= 8 * eps * max(1.0, r.abs().max())


@needs_gpu_build
def test_the_call_runs_on_pytorchs_current_stream():
    base = tensors((1, 128, 128, 4, 4, 64), dtype=torch.float32, seed=5)
    expected = kattn.flash_attn_func(*(t.cpu() for t in base), causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # keeps the side stream busy: its work below runs after
        q, k, v = (t * 1 for t in base)  # made on the side stream, after the sleep
        o = kattn.flash_attn_func(q, k, v, causal=True)
        done = torch.cuda.Event()
        done.record(side)
    assert not done.query()  # queued behind the sleep, not run at once on another stream
    side.synchronize()
    assert (o.cpu() - expected).abs().max() <= 1e-5


@needs_gpu_build
def test_packed_and_paged_batches_on_the_gpu():
    lens = [5, 0, 40, 17]
    indptr = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32)
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(int(indptr[-1]), h, 64, generator=g, dtype=torch.float64) for h in (4, 2, 2))
    o = kattn.flash_attn_varlen_func(q.cuda(), k.cuda(), v.cuda(), indptr.cuda(), indptr.cuda(), 40, 40, causal=True)
    assert (o.cpu() - kattn.flash_attn_varlen_func(q, k, v, indptr, indptr, 40, 40, causal=True)).abs().max() <= 1e-12
    # A decoding step over a paged bf16 cache (the hand-written decode): one page per 16 keys.
    pages = torch.randn(8, 2, 16, 2, 128, generator=g).to(torch.bfloat16)
    qd = torch.randn(2, 8, 128, generator=g).to(torch.bfloat16)
    table = (np.array([0, 3, 5]), np.array([4, 0, 7, 1, 2]), np.array([9, 16]))
    cpu = kattn.decode(qd, pages, *table)
    gpu = kattn.decode(qd.cuda(), pages.cuda(), *table)
    assert gpu.is_cuda and (gpu.float().cpu() - cpu.float()).abs().max() <= 2e-2


@needs_gpu_build
def test_tensors_on_two_devices_are_refused_naming_the_argument():
    q, k, v = tensors((1, 4, 4, 2, 2, 8))
    with pytest.raises(kattn.Error, match=re.escape(f"k: expected a tensor on {q.device} (q's device), got one on cpu")):
        kattn.flash_attn_func(q, k.cpu(), v)


@needs_gpu_build
def test_a_model_compiles_with_fullgraph_on_the_gpu():
    if not kattn.torch._CUSTOM_OPS:
        pytest.skip("needs torch.library.custom_op (torch >= 2.4)")
    from test_compile import Block

    torch.manual_seed(7)
    model = Block().cuda()
    x = torch.randn(2, 12, 32, device="cuda")
    cu = torch.tensor([0, 12, 24], dtype=torch.int32, device="cuda")
    eager = model(x, cu)
    out = torch.compile(model, fullgraph=True)(x, cu)
    assert (out - eager).abs().max() <= 1e-5
