"""kattn attention as a PyTorch autograd function on CPU tensors.

    import kattn.torch
    o = kattn.torch.attention(q, k, v, causal=True)   # q [B, Hq, N, D], k, v [B, Hkv, Nk, D]
    o.sum().backward()                               # q.grad, k.grad, v.grad from kattn's backward

Layout "bhnd" by default, as torch.nn.functional.scaled_dot_product_attention takes; "bnhd" also.
The forward keeps o and lse for the backward (not the attention matrix). float32, float64, float16
and bfloat16 with gradients (16-bit: fp32 accumulation, the gradients rounded once to the inputs'
dtype); float32 q over a 16-bit k, v runs forward only: kattn's backward has no such mixed storage,
so such a call whose inputs require grad is refused.
"""

import torch

from . import _kattn
from ._arrays import as_array, to_tensor


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, layout, opts, deterministic):
        q_, k_, v_ = (t.detach() for t in (q, k, v))
        o, lse, _ = _kattn.attention(as_array(q_, "q"), as_array(k_, "k"), as_array(v_, "v"), layout, opts)
        o, lse = to_tensor(o), to_tensor(lse)
        ctx.save_for_backward(q_, k_, v_, o, lse)
        ctx.layout, ctx.opts, ctx.deterministic = layout, opts, deterministic
        return o

    @staticmethod
    def backward(ctx, dout):
        # Grad mode is on here only under create_graph=True: kattn's backward has no graph of its
        # own, so a second derivative (e.g. a gradient penalty) would silently lose this term.
        if torch.is_grad_enabled():
            raise RuntimeError("kattn.torch.attention: second derivatives (create_graph=True) are not supported")
        q, k, v, o, lse = (t.detach() for t in ctx.saved_tensors)  # o comes back as an output needing grad
        dout = dout.detach()
        if dout.dtype != q.dtype:
            dout = dout.to(q.dtype)
        if dout.stride(-1) != 1:  # kattn reads the head dim contiguously
            dout = dout.contiguous()
        arrays = [as_array(t, name) for t, name in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (lse, "lse"),
                                                     (dout, "dout"))]
        dq, dk, dv, _ = _kattn.attention_backward(*arrays, ctx.layout, ctx.opts, ctx.deterministic)
        return to_tensor(dq), to_tensor(dk), to_tensor(dv), None, None, None


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bhnd", deterministic=False,
              block_q=0, block_k=0):
    """o = softmax(scale * q k^T + mask) v with gradients for q, k and v.

    q [B, Hq, Nq, D], k, v [B, Hkv, Nk, D] (layout "bhnd"; "bnhd": [B, N, H, D]); Hq a multiple of
    Hkv (GQA); causal is bottom-right aligned (the usual lower triangle when Nq == Nk); window =
    (left, right) keys each side (-1: unbounded); scale None: 1/sqrt(D). CPU tensors whose last axis
    is contiguous, of one dtype: float32, float64, float16 or bfloat16 (o and the gradients in
    it); float32 q over a float16 or bfloat16 k, v without gradients. deterministic: a bitwise
    reproducible backward for every thread count.
    """
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor):
            raise _kattn.Error(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if q.dtype == torch.float32 and k.dtype in (torch.float16, torch.bfloat16) and torch.is_grad_enabled():
        for t, name in ((q, "q"), (k, "k"), (v, "v")):
            if t.requires_grad:
                raise _kattn.Error(f"{name}: requires grad, but q is torch.float32 over a {k.dtype} k, v, and "
                                   f"kattn's backward takes q, k, v of one dtype; detach them (forward only) or "
                                   f"give them one dtype")
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale, block_q=block_q, block_k=block_k)
    return _Attention.apply(q, k, v, layout, opts, deterministic)
