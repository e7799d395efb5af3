"""kattn attention as a PyTorch autograd function on CPU tensors.

    import kattn.torch
    o = kattn.torch.attention(q, k, v, causal=True)   # q [B, Hq, N, D], k, v [B, Hkv, Nk, D]
    o.sum().backward()                               # q.grad, k.grad, v.grad from kattn's backward

Layout "bhnd" by default, as torch.nn.functional.scaled_dot_product_attention takes; "bnhd" also.
Across MPI ranks (kattn built with its MPI layer, mpi4py): ring_attention(comm, q, k, v, ...),
ulysses_attention, hybrid_attention and ragged_ring_attention take each rank's shard and give its
gradients; their backward is collective, as their forward.
The forward keeps o and lse for the backward (not the attention matrix). float32, float64, float16
and bfloat16 with gradients (16-bit: fp32 accumulation, the gradients rounded once to the inputs'
dtype); float32 q over a 16-bit k, v runs forward only: kattn's backward has no such mixed storage,
so such a call whose inputs require grad is refused.
"""

import torch

from . import _kattn
from ._arrays import as_array, to_tensor


def _saved(ctx, name):
    """What a forward saved, for a backward that runs outside autograd."""
    # Grad mode is on here only under create_graph=True: kattn's backward has no graph of its
    # own, so a second derivative (e.g. a gradient penalty) would silently lose this term.
    if torch.is_grad_enabled():
        raise RuntimeError(f"kattn.torch.{name}: second derivatives (create_graph=True) are not supported")
    return [t.detach() for t in ctx.saved_tensors]  # o comes back as an output needing grad


def _prepared_dout(dout, q):
    """dL/do as kattn's backward reads it: q's dtype, the head dim contiguous."""
    dout = dout.detach()
    if dout.dtype != q.dtype:
        dout = dout.to(q.dtype)
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    return dout


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
        q, k, v, o, lse = _saved(ctx, "attention")
        dout = _prepared_dout(dout, q)
        arrays = [as_array(t, name) for t, name in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (lse, "lse"),
                                                     (dout, "dout"))]
        dq, dk, dv, _ = _kattn.attention_backward(*arrays, ctx.layout, ctx.opts, ctx.deterministic)
        return to_tensor(dq), to_tensor(dk), to_tensor(dv), None, None, None


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bhnd", deterministic=False,
              block_q=0, block_k=0, workspace=None):
    """o = softmax(scale * q k^T + mask) v with gradients for q, k and v.

    q [B, Hq, Nq, D], k, v [B, Hkv, Nk, D] (layout "bhnd"; "bnhd": [B, N, H, D]); Hq a multiple of
    Hkv (GQA); causal is bottom-right aligned (the usual lower triangle when Nq == Nk); window =
    (left, right) keys each side (-1: unbounded); scale None: 1/sqrt(D). CPU tensors whose last axis
    is contiguous, of one dtype: float32, float64, float16 or bfloat16 (o and the gradients in
    it); float32 q over a float16 or bfloat16 k, v without gradients. deterministic: a bitwise
    reproducible backward for every thread count. workspace: a kattn.Workspace the forward and the
    backward take their scratch buffers from (a training loop passes the same one to every step).
    """
    _require_tensors(q, k, v)
    if q.dtype == torch.float32 and k.dtype in (torch.float16, torch.bfloat16) and torch.is_grad_enabled():
        for t, name in ((q, "q"), (k, "k"), (v, "v")):
            if t.requires_grad:
                raise _kattn.Error(f"{name}: requires grad, but q is torch.float32 over a {k.dtype} k, v, and "
                                   f"kattn's backward takes q, k, v of one dtype; detach them (forward only) or "
                                   f"give them one dtype")
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale, block_q=block_q, block_k=block_k,
                workspace=workspace)
    return _Attention.apply(q, k, v, layout, opts, deterministic)


class _DistAttention(torch.autograd.Function):
    """A kattn.dist call and its backward: forward(q, k, v) -> (o, lse), backward(q, k, v, o, lse,
    dout) -> (dq, dk, dv), both collective over the call's communicator."""

    @staticmethod
    def forward(ctx, q, k, v, name, forward, backward):
        q_, k_, v_ = (t.detach() for t in (q, k, v))
        o, lse = forward(q_, k_, v_)
        ctx.save_for_backward(q_, k_, v_, o, lse)
        ctx.name, ctx.backward_call = name, backward
        return o

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o, lse = _saved(ctx, ctx.name)
        dq, dk, dv = ctx.backward_call(q, k, v, o, lse, _prepared_dout(dout, q))
        return dq, dk, dv, None, None, None


def _require_tensors(q, k, v):
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor):
            raise _kattn.Error(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _dist(name, comm, q, k, v, *index, **kw):
    """kattn.dist.<name> and its <name>_backward as one autograd call; index: arguments after q, k,
    v that both take (a ragged batch's indptr)."""
    import kattn.dist as kd

    _require_tensors(q, k, v)
    forward, backward = getattr(kd, name), getattr(kd, name + "_backward")
    return _DistAttention.apply(q, k, v, name, lambda *a: forward(comm, *a, *index, return_lse=True, **kw),
                                lambda *a: backward(comm, *a, *index, **kw))


def ring_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bhnd",
                   sharding="contiguous", deterministic=False, chunk=0, workspace=None):
    """kattn.dist.ring_attention with gradients for this rank's shards of q, k and v.

    q [B, Hq, nq, D], k, v [B, Hkv, nk, D] (layout "bhnd"; "bnhd" too): this rank's positions,
    kattn.dist.positions(N, comm, ...) of the sequence axis; float32, float64, float16 or bfloat16
    CPU tensors. Options as for kattn.dist.ring_attention. The backward is collective like the
    forward: every rank of `comm` must run it (each rank's loss may be anything of its o).
    workspace: a kattn.Workspace the forward and the backward take their buffers from.
    """
    return _dist("ring_attention", comm, q, k, v, causal=causal, window=window, softcap=softcap, scale=scale,
                 layout=layout, sharding=sharding, deterministic=deterministic, chunk=chunk, workspace=workspace)


def ulysses_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bhnd",
                      sharding="contiguous", deterministic=False, chunk=0, workspace=None):
    """kattn.dist.ulysses_attention (head sharding) with gradients, as ring_attention."""
    return _dist("ulysses_attention", comm, q, k, v, causal=causal, window=window, softcap=softcap, scale=scale,
                 layout=layout, sharding=sharding, deterministic=deterministic, chunk=chunk, workspace=workspace)


def hybrid_attention(comm, q, k, v, *, ulysses_size=0, causal=False, window=None, softcap=0.0, scale=None,
                     layout="bhnd", sharding="contiguous", deterministic=False, chunk=0, workspace=None):
    """kattn.dist.hybrid_attention (head sharding in groups of ulysses_size, a ring across them)
    with gradients, as ring_attention; shards: kattn.dist.positions(N, comm, ulysses_size=...)."""
    return _dist("hybrid_attention", comm, q, k, v, ulysses_size=ulysses_size, causal=causal, window=window,
                 softcap=softcap, scale=scale, layout=layout, sharding=sharding, deterministic=deterministic,
                 chunk=chunk, workspace=workspace)


def ragged_ring_attention(comm, q, k, v, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0, scale=None,
                          sharding="contiguous", deterministic=False, chunk=0, workspace=None):
    """kattn.dist.ragged_ring_attention with gradients: q [nq, Hq, D], k, v [nk, Hkv, D], this
    rank's rows (kattn.dist.ragged_positions, with the same deterministic and chunk) of a packed
    batch whose offsets q_indptr, kv_indptr every rank gives whole; float32, float64, float16 or
    bfloat16. The backward is collective, as ring_attention's."""
    return _dist("ragged_ring_attention", comm, q, k, v, q_indptr, kv_indptr, causal=causal, window=window,
                 softcap=softcap, scale=scale, sharding=sharding, deterministic=deterministic, chunk=chunk,
                 workspace=workspace)
