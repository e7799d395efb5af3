"""kattn for PyTorch: attention with autograd on CPU tensors and, in a kattn built with a CUDA or HIP
Kokkos, on that GPU's tensors (read in place, run on PyTorch's current stream).

    import kattn.torch
    o = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)  # SDPA's call: [B, H, N, D]
    o = kattn.flash_attn_func(q, k, v, causal=True)                         # flash-attn's: [B, N, H, D]
    o = kattn.torch.attention(q, k, v, causal=True, layout="bnhd")          # kattn's options (window, ...)
    o.sum().backward()                                                     # kattn's backward

scaled_dot_product_attention takes torch.nn.functional.scaled_dot_product_attention's arguments and
means what they mean there (is_causal aligned top-left, GQA only with enable_gqa=True); what kattn
does not do (a mask tensor, dropout) is refused, never ignored. kattn.flash_attn_func and
kattn.flash_attn_varlen_func (the package's, also for NumPy arrays) are flash-attn's (causal aligned
bottom-right, its window). attention is kattn's own call: its layout is named in every call
("bnhd", the order of kattn.attention's default, or "bhnd"), so that no tensor is read in a layout
its caller did not mean.

With a torch that has torch.library.custom_op (2.4 or newer) the calls are the custom ops
kattn::attention and kattn::ragged_attention, their backward kattn::attention_backward and
kattn::ragged_attention_backward, with fake implementations: torch.compile(fullgraph=True) traces
them. With an older torch they are autograd.Functions around the same kernels.

The forward keeps o and lse for the backward (not the attention matrix); lse is not differentiable
(kattn's backward takes no gradient of it). attention and scaled_dot_product_attention take
sinks=, a tensor [Hq] of attention sinks (one logit per query head), with its gradient.

float32, float64, float16 and bfloat16 with gradients (16-bit: fp32 accumulation, the gradients
rounded once to the inputs' dtype); attention also takes float32 q over a 16-bit k, v, forward only
(kattn's backward has no such mixed storage, so such a call whose inputs require grad is refused).
Across MPI ranks (kattn built with its MPI layer, mpi4py): ring_attention(comm, q, k, v, ...),
ulysses_attention, hybrid_attention, grid_attention and ragged_ring_attention take each rank's shard of CPU tensors
and give its gradients; their backward is collective, as their forward.
"""

import collections
import weakref

import torch

from . import _kattn
from ._arrays import arguments, checked_indptr, index_array, sinks_array, window_pair

Error = _kattn.Error

# ---- the options every kernel call carries, as the ops' scalar arguments

_Options = collections.namedtuple(
    "_Options",
    "causal window_left window_right softcap scale diagonal_shift block_q block_k workspace deterministic alibi_slopes")
_OPTION_SCHEMA = ("bool causal, int window_left, int window_right, float softcap, float scale, int diagonal_shift, "
                  "int block_q, int block_k, int workspace, bool deterministic, float[] alibi_slopes")

# Workspaces by id: an op's arguments are tensors and scalars, so a call names its workspace by id.
# A workspace that is gone is simply not used (the results are the same without one).
_workspaces = weakref.WeakValueDictionary()


def _options(causal=False, window=None, softcap=0.0, scale=None, diagonal_shift=0, block_q=0, block_k=0,
             workspace=None, deterministic=False, window_name="window", scale_name="scale", alibi_slopes=None):
    if scale is not None and float(scale) == 0.0:
        raise Error(f"{scale_name}: expected a non-zero value (None for 1/sqrt(head dim))")
    ws = 0
    if workspace is not None:
        if not isinstance(workspace, _kattn.Workspace):
            raise Error(f"workspace: expected a kattn.Workspace or None, got {type(workspace).__name__}")
        ws = id(workspace)
        _workspaces[ws] = workspace
    left, right = window_pair(window, window_name)
    # ALiBi's slopes as a list of floats (an op's arguments; empty: none). They take no gradient.
    slopes = sinks_array(alibi_slopes, "alibi_slopes", "slope")
    return _Options(bool(causal), left, right, float(softcap), 0.0 if scale is None else float(scale),
                    int(diagonal_shift), int(block_q), int(block_k), ws, bool(deterministic),
                    [] if slopes is None else [float(x) for x in slopes.reshape(-1)])


def _kw(opts, sinks):
    """The options and the sinks (a tensor or None) as kattn._kattn reads them."""
    return dict(causal=opts.causal, window=(opts.window_left, opts.window_right), softcap=opts.softcap,
                scale=opts.scale or None, diagonal_shift=opts.diagonal_shift, block_q=opts.block_q,
                block_k=opts.block_k, workspace=_workspaces.get(opts.workspace) if opts.workspace else None,
                sinks=None if sinks is None else sinks_array(sinks.detach()),
                alibi_slopes=list(opts.alibi_slopes) or None)


def _checked_sinks(sinks):
    """The sinks of a call: None, or a floating-point tensor [Hq] (on any device: kattn reads a
    host copy), refused here, before any op is traced, when they are not."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor):
        raise Error(f"sinks: expected a torch.Tensor [Hq] (one logit per query head) or None, got "
                    f"{type(sinks).__name__}")
    if sinks.dim() != 1 or not sinks.is_floating_point():
        raise Error(f"sinks: expected a rank-1 floating-point tensor [Hq] (one logit per query head), got rank "
                    f"{sinks.dim()} {sinks.dtype}")
    return sinks


def _checked_bias(bias, name):
    """A call's bias: None or a tensor (with a gradient where it requires one)."""
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor):
        raise Error(f"{name}: expected a torch.Tensor or None, got {type(bias).__name__}")
    return bias


def _dsinks(info, sinks, like):
    """The sinks' gradient from a backward's info, in the sinks' dtype and on their device (an empty
    tensor like `like` without sinks: an op returns tensors only)."""
    if sinks is None:
        return like.new_empty((0,))
    return torch.tensor(info["dsinks"], dtype=sinks.dtype, device=sinks.device)


# ---- the kernels (what the ops run): inputs read in place, new outputs

def _inputs(q, k, v):
    return arguments(q=q.detach(), k=k.detach(), v=v.detach())


def _backward_inputs(q, k, v, o, lse, dout):
    return arguments(q=q.detach(), k=k.detach(), v=v.detach(), o=o.detach(), lse=lse.detach(), dout=dout.detach())


def _detached(t):
    return None if t is None else t.detach()


def _dense_forward(q, k, v, sinks, bias, layout, *opts):
    from . import _with_bias

    arrays, target, out, bias_ = _with_bias(dict(q=q.detach(), k=k.detach(), v=v.detach()), _detached(bias))
    o, lse, _ = _kattn.attention(*arrays, layout, dict(_kw(_Options(*opts), sinks), bias=bias_), target)
    return out(o), out(lse)


def _dense_backward(q, k, v, sinks, o, lse, dout, bias_grad, bias, layout, *opts):
    from . import _with_bias

    opts = _Options(*opts)
    named = dict(q=q.detach(), k=k.detach(), v=v.detach(), o=o.detach(), lse=lse.detach(), dout=dout.detach())
    arrays, target, out, bias_ = _with_bias(named, _detached(bias))
    dq, dk, dv, info = _kattn.attention_backward(*arrays, layout, dict(_kw(opts, sinks), bias=bias_),
                                                 opts.deterministic, target, bias_grad)
    dbias = out(info["dbias"]) if bias_grad else q.new_empty((0,))
    return out(dq), out(dk), out(dv), _dsinks(info, sinks, q), dbias


def _ragged_forward(q, k, v, sinks, q_indptr, kv_indptr, max_seqlen_q, max_seqlen_k, *opts):
    qi = checked_indptr(q_indptr, max_seqlen_q, "cu_seqlens_q", "max_seqlen_q")
    ki = checked_indptr(kv_indptr, max_seqlen_k, "cu_seqlens_k", "max_seqlen_k")
    arrays, target, out = _inputs(q, k, v)
    o, lse, _ = _kattn.ragged_attention(*arrays, qi, ki, _kw(_Options(*opts), sinks), target)
    return out(o), out(lse)


def _ragged_backward(q, k, v, sinks, o, lse, dout, bias_grad, q_indptr, kv_indptr, max_seqlen_q, max_seqlen_k,
                     *opts):
    opts = _Options(*opts)
    arrays, target, out = _backward_inputs(q, k, v, o, lse, dout)
    dq, dk, dv, info = _kattn.ragged_attention_backward(*arrays, index_array(q_indptr, "cu_seqlens_q"),
                                                        index_array(kv_indptr, "cu_seqlens_k"), _kw(opts, sinks),
                                                        opts.deterministic, target)
    return out(dq), out(dk), out(dv), _dsinks(info, sinks, q), q.new_empty((0,))  # ragged calls take no bias


# ---- what the outputs look like (the fake implementations torch.compile traces with)

def _accumulation(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _dense_forward_fake(q, k, v, sinks, bias, layout, *opts):
    n, h = (1, 2) if layout == "bnhd" else (2, 1)
    return (q.new_empty((*q.shape[:-1], v.shape[-1])),
            q.new_empty((q.shape[0], q.shape[h], q.shape[n]), dtype=_accumulation(q.dtype)))


def _ragged_forward_fake(q, k, v, *rest):
    return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty(q.shape[:2], dtype=_accumulation(q.dtype))


def _backward_fake(q, k, v, sinks, o, lse, dout, bias_grad, *rest):
    bias = rest[0] if bias_grad else None  # the dense op's first argument after dout
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty((0,)) if sinks is None else sinks.new_empty(sinks.shape),
            q.new_empty((0,)) if bias is None else bias.new_empty(bias.shape))


# ---- autograd: forward(q, k, v, sinks, *rest) -> (o, lse);
# backward(q, k, v, sinks, o, lse, dout, bias_grad, *rest) -> (dq, dk, dv, dsinks, dbias) (dsinks
# empty without sinks, dbias without bias_grad: the bias, rest[0] of the dense op, requires grad)

def _saved(ctx, name):
    """What a forward saved, for a backward that runs outside autograd."""
    # Grad mode is on here only under create_graph=True: kattn's backward has no graph of its
    # own, so a second derivative (e.g. a gradient penalty) would silently lose this term.
    if torch.is_grad_enabled():
        raise RuntimeError(f"kattn.torch.{name}: second derivatives (create_graph=True) are not supported")
    return [None if t is None else t.detach() for t in ctx.saved_tensors]  # o comes back needing grad


def _prepared_dout(dout, q):
    """dL/do as kattn's backward reads it: q's dtype, the head dim contiguous."""
    dout = dout.detach()
    if dout.dtype != q.dtype:
        dout = dout.to(q.dtype)
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    return dout


def _save(ctx, inputs, output):
    q, k, v, sinks, *rest = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, sinks, o, lse)
    ctx.rest = rest
    ctx.mark_non_differentiable(lse)


def _gradients(ctx, backward, dout, with_bias):
    """The gradients of an op's inputs; with_bias: its rest[0] is a bias (its gradient when asked)."""
    q, k, v, sinks, o, lse = _saved(ctx, "attention")
    bias_grad = with_bias and ctx.needs_input_grad[4]
    dq, dk, dv, dsinks, dbias = backward(q, k, v, sinks, o, lse, _prepared_dout(dout, q), bias_grad, *ctx.rest)
    rest = [None] * len(ctx.rest)
    if bias_grad:
        rest[0] = dbias
    return (dq, dk, dv, None if sinks is None else dsinks, *rest)


_CUSTOM_OPS = all(hasattr(torch.library, f) for f in ("custom_op", "register_fake", "register_autograd"))


def _op(name, arguments, forward, backward, forward_fake, with_bias=False):
    """kattn::<name> and kattn::<name>_backward as torch custom ops (or, in an older torch, an
    autograd.Function around the same kernels); returns the function that applies the forward
    with autograd. with_bias: the first of `arguments` is a bias, with a gradient."""
    if _CUSTOM_OPS:
        lib = torch.library
        forward_op = lib.custom_op(f"kattn::{name}", forward, mutates_args=(),
                                   schema=f"(Tensor q, Tensor k, Tensor v, Tensor? sinks, {arguments}) "
                                          f"-> (Tensor, Tensor)")
        backward_op = lib.custom_op(
            f"kattn::{name}_backward", backward, mutates_args=(),
            schema=f"(Tensor q, Tensor k, Tensor v, Tensor? sinks, Tensor o, Tensor lse, Tensor dout, bool bias_grad, "
                   f"{arguments}) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")
        lib.register_fake(f"kattn::{name}", forward_fake)
        lib.register_fake(f"kattn::{name}_backward", _backward_fake)
        lib.register_autograd(f"kattn::{name}",
                              lambda ctx, dout, dlse: _gradients(ctx, backward_op, dout, with_bias),
                              setup_context=_save)
        return forward_op

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sinks, *rest):
            output = forward(q, k, v, sinks, *rest)
            _save(ctx, (q, k, v, sinks, *rest), output)
            return output

        @staticmethod
        def backward(ctx, dout, dlse):
            return _gradients(ctx, backward, dout, with_bias)

    return Function.apply


_attention_op = _op("attention", f"Tensor? bias, str layout, {_OPTION_SCHEMA}", _dense_forward, _dense_backward,
                    _dense_forward_fake, with_bias=True)
_ragged_op = _op("ragged_attention",
                 f"Tensor q_indptr, Tensor kv_indptr, int max_seqlen_q, int max_seqlen_k, {_OPTION_SCHEMA}",
                 _ragged_forward, _ragged_backward, _ragged_forward_fake)


# ---- kattn's own call

def _require_tensors(**named):
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise Error(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _required_layout(layout, call):
    if layout is None:
        raise Error(f"layout: {call} reads q, k, v in the layout its caller names: \"bnhd\" ([B, N, H, D], "
                    f"kattn.attention's default and flash-attn's order) or \"bhnd\" ([B, H, N, D], as "
                    f"scaled_dot_product_attention); or call kattn.torch.scaled_dot_product_attention or "
                    f"kattn.flash_attn_func, whose layouts are theirs")
    return layout


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None,
              bias=None, layout=None, deterministic=False, block_q=0, block_k=0, workspace=None):
    """o = softmax(scale * q k^T + mask) v with gradients for q, k, v (and sinks).

    layout (required): "bnhd", q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D]; or "bhnd", q [B, Hq, Nq, D],
    k, v [B, Hkv, Nk, D]. Hq a multiple of Hkv (GQA); causal is bottom-right aligned (the usual
    lower triangle when Nq == Nk), as in every kattn call; window = (left, right) keys each side
    (-1: unbounded); scale None: 1/sqrt(D); sinks None, or a tensor [Hq] of one logit per query
    head (attention sinks: each row's softmax also runs over its head's sink, which carries no
    value; on any device, read through a host copy, which waits for its stream; its gradient comes
    in its dtype, on its device); alibi_slopes None, or one slope per query head [Hq] (ALiBi: each
    score gains -slope * |i + Nk - Nq - j|; a sequence or a tensor, read through a host copy, with
    no gradient); bias None, or an additive bias of the scores [B or 1, Hq or 1, Nq, Nk] on q's device
    (float, or bool: 0 where true, -inf where false; its last axis contiguous; a float bias that
    requires grad gets its gradient, summed over its broadcast dims).
    Tensors on the CPU or kattn's GPU whose last axis is contiguous, of
    one dtype: float32, float64, float16 or bfloat16 (o and the gradients in it); float32 q over a
    float16 or bfloat16 k, v without gradients. deterministic: a bitwise
    reproducible backward for every thread count. workspace: a kattn.Workspace the forward and the
    backward take their scratch buffers from (a training loop passes the same one to every step).
    """
    layout = _required_layout(layout, "kattn.torch.attention")
    _require_tensors(q=q, k=k, v=v)
    sinks = _checked_sinks(sinks)
    if q.dtype == torch.float32 and k.dtype in (torch.float16, torch.bfloat16) and torch.is_grad_enabled():
        for t, name in ((q, "q"), (k, "k"), (v, "v"), (sinks, "sinks")):
            if t is not None and t.requires_grad:
                raise Error(f"{name}: requires grad, but q is torch.float32 over a {k.dtype} k, v, and kattn's "
                            f"backward takes q, k, v of one dtype; detach them (forward only) or give them one dtype")
    opts = _options(causal, window, softcap, scale, 0, block_q, block_k, workspace, deterministic,
                    alibi_slopes=alibi_slopes)
    return _attention_op(q, k, v, sinks, _checked_bias(bias, "bias"), layout, *opts)[0]


# ---- PyTorch's convention

def _one_dtype(names, tensors, call):
    first = tensors[0]
    for name, t in zip(names[1:], tensors[1:]):
        if t.dtype != first.dtype:
            raise Error(f"{name}: expected the dtype of {names[0]} ({first.dtype}), got {t.dtype} ({call} takes one "
                        f"dtype)")


def _bhnd(t, batch):
    """[..., H, N, D] with the batch dims `batch` (broadcast, without a copy) as [B, H, N, D]."""
    if t.dim() == 2:
        return t[None, None]
    if t.dim() == 3:
        return t[None]
    t = t.expand(*batch, *t.shape[-3:])
    return t if t.dim() == 4 else t.reshape(-1, *t.shape[-3:])


def _sdpa_bias(mask, batch, heads, nq, nk):
    """SDPA's attn_mask [..., L, S] as kattn's bias [B or 1, Hq or 1, L, S], read in place: a batch or
    head dim the mask broadcasts stays 1 (read once; its gradient summed by kattn), the others are
    views of the mask (a copy only where its keys are not contiguous)."""
    shape = (*batch, heads, nq, nk)
    try:
        fits = torch.broadcast_shapes(tuple(mask.shape), shape) == torch.Size(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise Error(f"attn_mask: expected a shape that broadcasts to {shape}, got {tuple(mask.shape)}")
    m = mask.reshape((1,) * (len(shape) - mask.dim()) + tuple(mask.shape))
    m = m.expand(*m.shape[:-2], nq, nk)
    lead = tuple(m.shape[:-3])
    if all(n == 1 for n in lead):
        m = m.reshape(1, *m.shape[-3:])
    else:
        m = m.expand(*batch, *m.shape[-3:]).reshape(-1, *m.shape[-3:])
    return m.contiguous() if m.stride(-1) != 1 and nk > 1 else m


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                                 enable_gqa=False, sinks=None):
    """torch.nn.functional.scaled_dot_product_attention, by kattn: the same arguments, meaning what
    they mean there, with gradients.

    query [..., Hq, L, E], key and value [..., Hkv, S, E] (any leading batch dims, broadcast; none
    for [L, E] and [H, L, E]; kattn's value has the head dim E of query and key), one dtype; is_causal: query i sees keys j <= i
    (aligned top-left, as PyTorch's); scale None: 1/sqrt(E); Hkv != Hq (grouped-query attention)
    only with enable_gqa=True, Hq a multiple of Hkv. Returns [..., Hq, L, E]. attn_mask: a bool
    mask (True: attend) or a float bias added to the scores, broadcastable to [..., Hq, L, S] (with
    its gradient where it requires grad); not with is_causal, as in PyTorch. dropout_p > 0 is refused with a kattn.Error.
    kattn's own addition: sinks, a tensor [Hq] of attention sinks, as kattn.torch.attention's (with
    their gradient)."""
    _require_tensors(query=query, key=key, value=value)
    attn_mask = _checked_bias(attn_mask, "attn_mask")
    if attn_mask is not None and is_causal:
        raise Error("attn_mask: expected None with is_causal=True (PyTorch refuses both too)")
    if dropout_p != 0.0:
        raise Error(f"dropout_p: expected 0.0 (kattn has no dropout), got {dropout_p}")
    names, tensors = ("query", "key", "value"), (query, key, value)
    _one_dtype(names, tensors, "scaled_dot_product_attention")
    for name, t in zip(names, tensors):
        if t.dim() < 2 or t.dim() != query.dim():
            raise Error(f"{name}: expected the rank of query ({query.dim()}, at least 2: [..., L, E]), got {t.dim()}")
    try:
        batch = torch.broadcast_shapes(*(t.shape[:-3] for t in tensors))
    except RuntimeError:
        raise Error(f"key: expected batch dims that broadcast with query's {tuple(query.shape[:-3])}, got "
                    f"{tuple(key.shape[:-3])} (value: {tuple(value.shape[:-3])})") from None
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        name, t = ("key", key) if key.shape[-1] != query.shape[-1] else ("value", value)
        raise Error(f"{name}: expected the head dim of query and key ({query.shape[-1]}), got {t.shape[-1]} (kattn's "
                    f"Ev is E)")
    heads = [t.shape[-3] if t.dim() >= 3 else 1 for t in tensors]
    if heads[2] != heads[1]:
        raise Error(f"value: expected the heads of key ({heads[1]}, dim -3), got {heads[2]}")
    if heads[1] != heads[0]:
        if not enable_gqa:
            raise Error(f"key: expected the heads of query ({heads[0]}, dim -3), got {heads[1]}: different head "
                        f"counts (grouped-query attention) need enable_gqa=True, as in PyTorch")
        if heads[0] % heads[1] != 0:
            raise Error(f"key: the number of heads in key and value ({heads[1]}) must divide the number of heads in "
                        f"query ({heads[0]})")
    q, k, v = (_bhnd(t, batch) for t in tensors)
    shift = 0
    if is_causal:  # top-left: query i sees keys j <= i; kattn's causal is bottom-right
        nq, nk = q.shape[2], k.shape[2]
        if nk > nq:  # keys past the last query are seen by none: the square problem, kattn's causal
            k, v = k[:, :, :nq], v[:, :, :nq]
        else:
            shift = nq - nk
    bias = None if attn_mask is None else _sdpa_bias(attn_mask, batch, heads[0], query.shape[-2], key.shape[-2])
    o = _attention_op(q, k, v, _checked_sinks(sinks), bias, "bhnd", *_options(is_causal, None, 0.0, scale, shift))[0]
    return o.reshape(*batch, *o.shape[1:]) if query.dim() >= 4 else o.reshape(o.shape[4 - query.dim():])


# ---- flash-attn's convention (kattn.flash_attn_func and kattn.flash_attn_varlen_func on tensors)

def flash_attn(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs):
    """kattn.flash_attn_func on tensors, once the package has refused what kattn does not do."""
    from . import _flash_lse

    _require_tensors(q=q, k=k, v=v)
    opts = _options(causal, window_size, softcap, softmax_scale, deterministic=deterministic,
                    window_name="window_size", scale_name="softmax_scale", alibi_slopes=alibi_slopes)
    o, lse = _attention_op(q, k, v, None, None, "bnhd", *opts)
    return (o, _flash_lse(lse), q.new_empty((0,))) if return_attn_probs else o


def flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                      window_size, softcap, alibi_slopes, deterministic, return_attn_probs):
    """kattn.flash_attn_varlen_func on tensors, likewise."""
    from . import _flash_lse

    _require_tensors(q=q, k=k, v=v)
    opts = _options(causal, window_size, softcap, softmax_scale, deterministic=deterministic,
                    window_name="window_size", scale_name="softmax_scale", alibi_slopes=alibi_slopes)
    o, lse = _ragged_op(q, k, v, None, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), *opts)
    return (o, _flash_lse(lse).t().contiguous(), q.new_empty((0,))) if return_attn_probs else o


# ---- across MPI ranks

class _DistAttention(torch.autograd.Function):
    """A kattn.dist call and its backward: forward(q, k, v, sinks) -> (o, lse), backward(q, k, v,
    o, lse, dout, sinks) -> (dq, dk, dv[, dsinks]), both collective over the call's communicator."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, name, forward, backward):
        q_, k_, v_ = (t.detach() for t in (q, k, v))
        sinks_ = sinks.detach() if isinstance(sinks, torch.Tensor) else sinks  # kattn.dist refuses bad ones
        o, lse = forward(q_, k_, v_, s=sinks_)
        ctx.save_for_backward(q_, k_, v_, o, lse)
        ctx.name, ctx.backward_call, ctx.sinks = name, backward, sinks_
        return o

    @staticmethod
    def backward(ctx, dout):
        q, k, v, o, lse = _saved(ctx, ctx.name)
        grads = ctx.backward_call(q, k, v, o, lse, _prepared_dout(dout, q), s=ctx.sinks)
        sinks = ctx.sinks
        dsinks = grads[3].to(sinks.dtype).to(sinks.device) if isinstance(sinks, torch.Tensor) else None
        return grads[0], grads[1], grads[2], dsinks, None, None, None


def _dist(name, comm, q, k, v, *index, sinks=None, **kw):
    """kattn.dist.<name> and its <name>_backward as one autograd call (to q, k, v and a sinks
    tensor); index: arguments after q, k, v that both take (a ragged batch's indptr)."""
    import kattn.dist as kd

    _require_tensors(q=q, k=k, v=v)
    forward, backward = getattr(kd, name), getattr(kd, name + "_backward")
    return _DistAttention.apply(q, k, v, sinks, name,
                                lambda *a, s: forward(comm, *a, *index, return_lse=True, sinks=s, **kw),
                                lambda *a, s: backward(comm, *a, *index, sinks=s, **kw))


def ring_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None,
                   layout=None, sharding="contiguous", deterministic=False, chunk=0, workspace=None):
    """kattn.dist.ring_attention with gradients for this rank's shards of q, k and v.

    layout (required, as attention's): "bnhd", q [B, nq, Hq, D], k, v [B, nk, Hkv, D]; or "bhnd",
    q [B, Hq, nq, D], k, v [B, Hkv, nk, D]: this rank's positions, kattn.dist.positions(N, comm, ...)
    of the sequence axis; float32, float64, float16 or bfloat16 CPU tensors. Options as for
    kattn.dist.ring_attention. The backward is collective like the forward: every rank of `comm`
    must run it (each rank's loss may be anything of its o). workspace: a kattn.Workspace the
    forward and the backward take their buffers from.
    """
    return _dist("ring_attention", comm, q, k, v, causal=causal, window=window, softcap=softcap, scale=scale,
                 sinks=sinks, alibi_slopes=alibi_slopes, layout=_required_layout(layout, "kattn.torch.ring_attention"),
                 sharding=sharding, deterministic=deterministic, chunk=chunk, workspace=workspace)


def ulysses_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, sinks=None,
                      alibi_slopes=None, layout=None, sharding="contiguous", deterministic=False, chunk=0,
                      workspace=None):
    """kattn.dist.ulysses_attention (head sharding) with gradients, as ring_attention."""
    return _dist("ulysses_attention", comm, q, k, v, causal=causal, window=window, softcap=softcap, scale=scale,
                 sinks=sinks, alibi_slopes=alibi_slopes, layout=_required_layout(layout, "kattn.torch.ulysses_attention"),
                 sharding=sharding, deterministic=deterministic, chunk=chunk, workspace=workspace)


def hybrid_attention(comm, q, k, v, *, ulysses_size=0, causal=False, window=None, softcap=0.0, scale=None,
                     sinks=None, alibi_slopes=None, layout=None, sharding="contiguous", deterministic=False, chunk=0,
                     workspace=None):
    """kattn.dist.hybrid_attention (head sharding in groups of ulysses_size, a ring across them)
    with gradients, as ring_attention; shards: kattn.dist.positions(N, comm, ulysses_size=...)."""
    return _dist("hybrid_attention", comm, q, k, v, ulysses_size=ulysses_size, causal=causal, window=window,
                 softcap=softcap, scale=scale, sinks=sinks, alibi_slopes=alibi_slopes,
                 layout=_required_layout(layout, "kattn.torch.hybrid_attention"),
                 sharding=sharding, deterministic=deterministic, chunk=chunk, workspace=workspace)


def grid_attention(comm, q, k, v, *, grid=None, causal=False, window=None, softcap=0.0, scale=None, sinks=None,
                   alibi_slopes=None, layout=None, sharding="contiguous", deterministic=False, chunk=0, workspace=None):
    """kattn.dist.grid_attention (the ranks a rows x cols grid: grid=(rows, cols), None for the most
    square shape) with gradients, as ring_attention; shards as the ring's."""
    return _dist("grid_attention", comm, q, k, v, grid=grid, causal=causal, window=window, softcap=softcap,
                 scale=scale, sinks=sinks, alibi_slopes=alibi_slopes,
                 layout=_required_layout(layout, "kattn.torch.grid_attention"),
                 sharding=sharding, deterministic=deterministic, chunk=chunk, workspace=workspace)


def ragged_ring_attention(comm, q, k, v, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0, scale=None,
                          sinks=None, alibi_slopes=None, sharding="contiguous", deterministic=False, chunk=0,
                          workspace=None):
    """kattn.dist.ragged_ring_attention with gradients: q [nq, Hq, D], k, v [nk, Hkv, D], this
    rank's rows (kattn.dist.ragged_positions, with the same deterministic and chunk) of a packed
    batch whose offsets q_indptr, kv_indptr every rank gives whole; float32, float64, float16 or
    bfloat16. The backward is collective, as ring_attention's."""
    return _dist("ragged_ring_attention", comm, q, k, v, q_indptr, kv_indptr, causal=causal, window=window,
                 softcap=softcap, scale=scale, sinks=sinks, alibi_slopes=alibi_slopes, sharding=sharding,
                 deterministic=deterministic, chunk=chunk, workspace=workspace)
