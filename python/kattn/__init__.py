"""kattn: exact attention (FlashAttention's IO-aware tiling) on Kokkos, from NumPy and PyTorch.

    import numpy as np, kattn
    q = np.random.randn(2, 1024, 8, 64)          # [batch, seq, heads, head_dim] ("bnhd")
    k = v = np.random.randn(2, 1024, 2, 64)      # GQA: 8 query heads on 2 KV heads
    o, lse = kattn.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = kattn.attention_backward(q, k, v, o, lse, np.ones_like(o), causal=True)
    o = kattn.flash_attn_func(q, k, v, causal=True)    # flash-attn's call (tensors: with autograd)

    import kattn.torch                           # PyTorch: autograd, custom ops, GPU tensors
    o = kattn.torch.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True)  # SDPA's call

Arrays are NumPy arrays or PyTorch tensors (CPU tensors read through DLPack; tensors on kattn's GPU,
in a build with a CUDA or HIP Kokkos, read in place there and run on PyTorch's current stream),
viewed in place (any strides whose last axis, the head dim, is contiguous); results are new arrays
(tensors for tensor inputs). float32 and float64; the attention calls (attention, ragged_attention,
paged_attention, decode, cascade_attention), their backward and merge_states also take 16-bit
storage with float32 accumulation: float16 (NumPy or PyTorch) and bfloat16 (PyTorch), o and the
gradients in that type and lse in float32; the forward calls also take float32 queries over a
float16 or bfloat16 cache. Bad input raises kattn.Error (a ValueError) with kattn's message, which
names the argument.

Options every call takes: causal (bottom-right aligned: query i sees keys j <= i + Nk - Nq),
window=(left, right) (-1: unbounded), softcap, scale (None: 1/sqrt(head_dim)), sinks (None, or one
logit per query head [Hq]: attention sinks; the backward calls then also return their gradient),
alibi_slopes (None, or one slope per query head [Hq]: ALiBi, each score gains
-slope * |i + Nk - Nq - j|),
splits / split_chunk (split-KV; 0: planned), block_q / block_k (tile sizes; 0: tuned), workspace (a
kattn.Workspace() that the calls of a loop share: after the first they take their scratch buffers
from it instead of allocating them; the same results). Dense calls read layout="bnhd" ([B, N, H, D]) unless given
"bhnd" ([B, H, N, D]); kattn.torch.attention takes no default: its caller names the layout.
flash_attn_func and flash_attn_varlen_func are flash-attn's calls, kattn.torch.scaled_dot_product_attention
PyTorch's: each means exactly what it means there.
"""

import numpy as np

from . import _kattn
from ._arrays import arguments, as_array, checked_indptr, dtype_name, index_array, sinks_array, window_pair
from ._kattn import Error, Workspace, build_info, version

__all__ = [
    "Error", "Workspace", "attention", "attention_backward", "build_info", "cascade_attention", "decode",
    "flash_attn_func", "flash_attn_varlen_func", "merge_states", "paged_attention", "paged_attention_backward", "plan",
    "ragged_attention", "ragged_attention_backward", "version",
]


def _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace=None, sinks=None,
             alibi_slopes=None):
    return dict(causal=causal, window=window, softcap=softcap, scale=scale, splits=splits, split_chunk=split_chunk,
                block_q=block_q, block_k=block_k, workspace=workspace, sinks=sinks_array(sinks),
                alibi_slopes=sinks_array(alibi_slopes, "alibi_slopes", "slope"))


def _gradients(out, dq, dk, dv, info, sinks):
    """A backward's results: dq, dk, dv, and with sinks their gradient dsinks [Hq] in float64 (a
    tensor on the gradients' device for tensors)."""
    grads = (out(dq), out(dk), out(dv))
    if sinks is None:
        return grads
    dsinks = np.array(info["dsinks"], dtype=np.float64)
    if not isinstance(grads[0], np.ndarray):
        import torch

        return (*grads, torch.tensor(dsinks, device=grads[0].device))
    return (*grads, dsinks)


def _with_dbias(grads, out, info, bias_grad):
    """A backward's results, with bias_grad the bias's gradient last."""
    return (*grads, out(info["dbias"])) if bias_grad else grads


def _as_arrays(**named):
    """The arguments as NumPy arrays (NumPy arrays, CPU tensors): what kattn.dist reads."""
    return [as_array(x, name) for name, x in named.items()]


def _with_bias(named, bias):
    """(arrays, target, out) of the named arguments and the bias (None: none) on their device, and
    the bias's array as kattn reads it."""
    if bias is None:
        return (*arguments(**named), None)
    arrays, target, out = arguments(**named, bias=bias)
    return arrays[:-1], target, out, arrays[-1]


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None,
              bias=None, layout="bnhd", return_lse=False, splits=0, split_chunk=0, block_q=0, block_k=0,
              workspace=None):
    """o = softmax(scale * q k^T + mask) v over dense keys.

    q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D] (layout "bnhd"; "bhnd": [B, H, N, D]), Hq a multiple of
    Hkv (GQA). sinks: None, or one logit per query head [Hq] (attention sinks: each row's softmax
    also runs over its head's sink, which carries no value). bias: None, or an additive bias of the
    scores [B or 1, Hq or 1, Nq, Nk] (float or bool: 0 where true, -inf where false; its last axis
    contiguous, read in place). Returns o like q (head dim of v), and with return_lse the
    natural-log lse [B, Hq, Nq] (-inf for a row that sees no key; with sinks, the sink is in it).
    """
    (q_, k_, v_), target, out, bias_ = _with_bias(dict(q=q, k=k, v=v), bias)
    opts = _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace, sinks,
                    alibi_slopes)
    o, lse, _ = _kattn.attention(q_, k_, v_, layout, dict(opts, bias=bias_), target)
    return (out(o), out(lse)) if return_lse else out(o)


def attention_backward(q, k, v, o, lse, dout, *, causal=False, window=None, softcap=0.0, scale=None, sinks=None,
                       alibi_slopes=None, bias=None, bias_grad=False, layout="bnhd", deterministic=False, block_q=0,
                       block_k=0, workspace=None):
    """dq, dk, dv of sum(o * dout), for the o and lse kattn.attention returned with the same options;
    with sinks, also dsinks [Hq] (float64), the gradient of the sinks; with bias_grad=True, last,
    dbias, the gradient of the (float) bias: its shape and dtype, summed over its broadcast dims.

    q, k, v, o, dout of one dtype (float16 and bfloat16 too: the gradients in it, lse float32)."""
    arrays, target, out, bias_ = _with_bias(dict(q=q, k=k, v=v, o=o, lse=lse, dout=dout), bias)
    opts = _options(causal, window, softcap, scale, 0, 0, block_q, block_k, workspace, sinks, alibi_slopes)
    dq, dk, dv, info = _kattn.attention_backward(*arrays, layout, dict(opts, bias=bias_), deterministic, target,
                                                 bias_grad)
    return _with_dbias(_gradients(out, dq, dk, dv, info, sinks), out, info, bias_grad)


def ragged_attention(q, k, v, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0, scale=None, sinks=None,
                     alibi_slopes=None, bias=None, return_lse=False, splits=0, split_chunk=0, block_q=0, block_k=0,
                     workspace=None):
    """Attention over a batch of sequences packed without padding (FlashInfer's ragged layout).

    Sequence b owns rows q_indptr[b]:q_indptr[b+1] of q [total_q, Hq, D] and rows
    kv_indptr[b]:kv_indptr[b+1] of k, v [total_kv, Hkv, D]. bias: as kattn.attention's, padded to
    the longest sequence ([B or 1, Hq or 1, max Nq, max Nk]; sequence b reads bias[b, :, :Nq_b,
    :Nk_b]). Returns o like q, and with return_lse lse [total_q, Hq].
    """
    arrays, target, out, bias_ = _with_bias(dict(q=q, k=k, v=v), bias)
    opts = _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace, sinks, alibi_slopes)
    o, lse, _ = _kattn.ragged_attention(*arrays, index_array(q_indptr, "q_indptr"), index_array(kv_indptr, "kv_indptr"),
                                        dict(opts, bias=bias_), target)
    return (out(o), out(lse)) if return_lse else out(o)


def ragged_attention_backward(q, k, v, o, lse, dout, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0,
                              scale=None, sinks=None, alibi_slopes=None, bias=None, bias_grad=False,
                              deterministic=False, block_q=0, block_k=0, workspace=None):
    """dq, dk, dv (shaped as q, k, v) for the o and lse kattn.ragged_attention returned; with sinks,
    also dsinks [Hq] (float64); with bias_grad=True, last, the bias's gradient (its padding 0)."""
    arrays, target, out, bias_ = _with_bias(dict(q=q, k=k, v=v, o=o, lse=lse, dout=dout), bias)
    opts = _options(causal, window, softcap, scale, 0, 0, block_q, block_k, workspace, sinks, alibi_slopes)
    dq, dk, dv, info = _kattn.ragged_attention_backward(
        *arrays, index_array(q_indptr, "q_indptr"), index_array(kv_indptr, "kv_indptr"), dict(opts, bias=bias_),
        deterministic, target, bias_grad)
    return _with_dbias(_gradients(out, dq, dk, dv, info, sinks), out, info, bias_grad)


def _pages(kv_cache):
    """(k_pages, v_pages) from FlashInfer's two forms: a pair of [P, page_size, Hkv, D] arrays, or one
    [P, 2, page_size, Hkv, D] array (read in place: its [:, 0] and [:, 1])."""
    if isinstance(kv_cache, (tuple, list)):
        if len(kv_cache) != 2:
            raise Error(f"kv_cache: expected (k_pages, v_pages), got {len(kv_cache)} arrays")
        return kv_cache[0], kv_cache[1]
    kv = kv_cache if hasattr(kv_cache, "shape") else as_array(kv_cache, "kv_cache")
    if kv.ndim != 5 or kv.shape[1] != 2:
        raise Error(f"kv_cache: expected (k_pages, v_pages) or one [pages, 2, page_size, Hkv, D] array, "
                    f"got shape {tuple(kv.shape)}")
    return kv[:, 0], kv[:, 1]


def _named_pages(k_pages, v_pages):
    return {"kv_cache[0]": k_pages, "kv_cache[1]": v_pages}


def _page_table(kv_page_indptr, kv_page_indices, kv_last_page_len):
    return (index_array(kv_page_indptr, "kv_page_indptr"), index_array(kv_page_indices, "kv_page_indices"),
            index_array(kv_last_page_len, "kv_last_page_len"))


def paged_attention(q, kv_cache, q_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len, *, causal=False,
                    window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None, bias=None, return_lse=False,
                    splits=0, split_chunk=0, block_q=0, block_k=0, workspace=None):
    """Attention over a paged KV cache (vLLM's PagedAttention, FlashInfer's page table).

    kv_cache: (k_pages, v_pages), each [num_pages, page_size, Hkv, D], or one [num_pages, 2,
    page_size, Hkv, D] array. Sequence b's keys are the pages kv_page_indices[kv_page_indptr[b] :
    kv_page_indptr[b+1]], all full but the last, which holds kv_last_page_len[b] keys. Queries are
    ragged: q [total_q, Hq, D] with q_indptr [B + 1]. bias: as ragged_attention's (padded to the
    longest sequence). Returns o like q, and with return_lse lse [total_q, Hq].
    """
    k_pages, v_pages = _pages(kv_cache)
    arrays, target, out, bias_ = _with_bias(dict(q=q, **_named_pages(k_pages, v_pages)), bias)
    opts = _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace, sinks, alibi_slopes)
    o, lse, _ = _kattn.paged_attention(
        *arrays, index_array(q_indptr, "q_indptr"), *_page_table(kv_page_indptr, kv_page_indices, kv_last_page_len),
        dict(opts, bias=bias_), target)
    return (out(o), out(lse)) if return_lse else out(o)


def paged_attention_backward(q, kv_cache, o, lse, dout, q_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len,
                             *, causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None,
                             bias=None, bias_grad=False, deterministic=False, block_q=0, block_k=0, workspace=None):
    """dq [total_q, Hq, D] and dk_pages, dv_pages shaped as the pages (slots no sequence uses get 0);
    with sinks, also dsinks [Hq] (float64); with bias_grad=True, last, the bias's gradient. A page
    listed twice in the table (shared by sequences) is refused."""
    k_pages, v_pages = _pages(kv_cache)
    arrays, target, out, bias_ = _with_bias(dict(q=q, **_named_pages(k_pages, v_pages), o=o, lse=lse, dout=dout), bias)
    opts = _options(causal, window, softcap, scale, 0, 0, block_q, block_k, workspace, sinks, alibi_slopes)
    dq, dk, dv, info = _kattn.paged_attention_backward(
        *arrays, index_array(q_indptr, "q_indptr"), *_page_table(kv_page_indptr, kv_page_indices, kv_last_page_len),
        dict(opts, bias=bias_), deterministic, target, bias_grad)
    return _with_dbias(_gradients(out, dq, dk, dv, info, sinks), out, info, bias_grad)


def decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, window=None, softcap=0.0, scale=None,
           sinks=None, alibi_slopes=None, return_lse=False, splits=0, split_chunk=0, workspace=None):
    """One decoding step: q [B, Hq, D] (one query per sequence) over a paged KV cache, as
    paged_attention with q_indptr = 0, 1, ..., B. Split-KV is planned for the machine unless given."""
    if len(getattr(q, "shape", ())) != 3:
        ndim = len(q.shape) if hasattr(q, "shape") else as_array(q, "q").ndim
        raise Error(f"q: expected a rank-3 array [B, Hq, D] (one query per sequence), got rank {ndim}")
    return paged_attention(q, kv_cache, np.arange(q.shape[0] + 1, dtype=np.int64),
                           kv_page_indptr, kv_page_indices, kv_last_page_len, window=window, softcap=softcap,
                           scale=scale, sinks=sinks, alibi_slopes=alibi_slopes, return_lse=return_lse, splits=splits,
                           split_chunk=split_chunk, workspace=workspace)


def cascade_attention(q, k_prefix, v_prefix, q_indptr, *, kv=None, kv_indptr=None, kv_cache=None,
                      kv_page_indptr=None, kv_page_indices=None, kv_last_page_len=None, causal=False, window=None,
                      softcap=0.0, scale=None, sinks=None, alibi_slopes=None, bias=None, return_lse=False, splits=0,
                      split_chunk=0, block_q=0, block_k=0, workspace=None):
    """Attention over a prefix shared by every sequence (k_prefix, v_prefix [Np, Hkv, D], read once
    for the whole batch), then each sequence's own keys: ragged (kv=(k, v) [total_kv, Hkv, D] with
    kv_indptr) or paged (kv_cache with kv_page_indptr, kv_page_indices, kv_last_page_len). q
    [total_q, Hq, D] with q_indptr. The masks and the score variants see the prefix and the
    sequence's keys as one sequence: ALiBi measures each query's distance within its own prefix +
    suffix, and bias is that of a ragged batch of prefix + suffix, padded to the longest ([B or 1,
    Hq or 1, max Nq, Np + max suffix]; sequence b reads bias[b, :, :Nq_b, :Np + Nk_b], the prefix's
    keys first). Returns o like q, and with return_lse lse [total_q, Hq]. Storage as attention's:
    the prefix in the dtype of the suffix's keys; in 16 bits o is rounded once, after the merge."""
    opts = _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace, sinks,
                    alibi_slopes)
    if (kv is None) == (kv_cache is None):
        raise Error("kv, kv_cache: expected the suffix as ragged keys (kv=(k, v), kv_indptr) or as a paged cache "
                    "(kv_cache and its page table), one of them")
    if kv is not None:
        if kv_indptr is None:
            raise Error("kv_indptr: expected the offsets of the ragged suffix keys")
        if not (isinstance(kv, (tuple, list)) and len(kv) == 2):
            raise Error("kv: expected (k, v), the ragged suffix keys and values")
        arrays, target, out, bias_ = _with_bias(dict(q=q, k_prefix=k_prefix, v_prefix=v_prefix, k=kv[0], v=kv[1]),
                                                bias)
        o, lse = _kattn.cascade_ragged_attention(*arrays, index_array(q_indptr, "q_indptr"),
                                                 index_array(kv_indptr, "kv_indptr"), dict(opts, bias=bias_), target)
    else:
        k_pages, v_pages = _pages(kv_cache)
        arrays, target, out, bias_ = _with_bias(
            dict(q=q, k_prefix=k_prefix, v_prefix=v_prefix, **_named_pages(k_pages, v_pages)), bias)
        o, lse = _kattn.cascade_paged_attention(
            *arrays, index_array(q_indptr, "q_indptr"), *_page_table(kv_page_indptr, kv_page_indices, kv_last_page_len),
            dict(opts, bias=bias_), target)
    return (out(o), out(lse)) if return_lse else out(o)


def merge_states(o_parts, lse_parts, *, dtype=None):
    """The attention over the union of disjoint key sets from the attention over each: o_parts
    [S, N, H, D], lse_parts [S, N, H] (natural log) -> o [N, H, D], lse [N, H].

    o in dtype (None: that of o_parts; "float16" or "bfloat16", or the NumPy or torch dtype, to
    round float32 parts once into 16 bits); lse_parts and lse in o's accumulation type (float32
    for a 16-bit o). The merge runs in that type."""
    arrays, target, out = arguments(o_parts=o_parts, lse_parts=lse_parts)
    o, lse = _kattn.merge_states(*arrays, dtype_name(dtype), target)
    return out(o), out(lse)


# ---- flash-attn's convention

def _flash_refusals(dropout_p, block_table=None):
    if dropout_p != 0.0:
        raise Error(f"dropout_p: expected 0.0 (kattn has no dropout), got {dropout_p}")
    if block_table is not None:
        raise Error("block_table: a paged cache goes through kattn.paged_attention (FlashInfer's page table); "
                    "expected None")


def _flash_dtypes(q, k, v):
    for name, x in (("k", k), ("v", v)):
        if getattr(x, "dtype", None) != getattr(q, "dtype", None):
            raise Error(f"{name}: expected the dtype of q ({getattr(q, 'dtype', type(q).__name__)}), got "
                        f"{getattr(x, 'dtype', type(x).__name__)} "
                        f"(flash-attn's call takes one dtype)")


def _flash_lse(lse):
    """lse as flash-attn returns it (a tensor or an array): +inf, not -inf, for a row that sees no key."""
    empty = lse == -np.inf
    return lse.masked_fill(empty, np.inf) if hasattr(lse, "masked_fill") else np.where(empty, np.inf, lse)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func, by kattn: the same arguments and results, on PyTorch tensors
    (CPU, or kattn's GPU; with gradients) and NumPy arrays.

    q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D] of one dtype (float16, bfloat16, and float32, float64),
    Hq a multiple of Hkv; causal aligned bottom-right (query i sees keys j <= i + Nk - Nq); window_size
    (left, right): query i sees keys i + Nk - Nq - left ... i + Nk - Nq + right (-1: unbounded);
    softcap 0 for none; softmax_scale None: 1/sqrt(D); deterministic: a reproducible backward.
    Returns o [B, Nq, Hq, D], and with return_attn_probs (o, softmax_lse [B, Hq, Nq] float32 (the
    dtype for float64), S_dmask): softmax_lse +inf for a row that sees no key and S_dmask an empty
    tensor, as flash-attn gives them without dropout. alibi_slopes [Hq] adds -slope * |i + Nk -
    Nq - j| to each score, as flash-attn's ([B, Hq] slopes are refused). dropout_p > 0 is
    refused."""
    _flash_refusals(dropout_p)
    _flash_dtypes(q, k, v)
    if not isinstance(q, np.ndarray):
        from . import torch as kattn_torch

        return kattn_torch.flash_attn(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                      deterministic, return_attn_probs)
    o, lse = attention(q, k, v, causal=causal, window=window_pair(window_size, "window_size"), softcap=softcap, scale=softmax_scale,
                       alibi_slopes=alibi_slopes, layout="bnhd", return_lse=True)
    return (o, _flash_lse(lse), np.empty((0,), q.dtype)) if return_attn_probs else o


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func, by kattn: packed sequences, as flash_attn_func.

    q [total_q, Hq, D], k, v [total_k, Hkv, D]; sequence b owns rows cu_seqlens_q[b] :
    cu_seqlens_q[b+1] of q and cu_seqlens_k[b] : cu_seqlens_k[b+1] of k, v (int32 or int64);
    max_seqlen_q, max_seqlen_k at least the longest (checked). Masks per sequence, as
    flash_attn_func's. Returns o [total_q, Hq, D], and with return_attn_probs (o, softmax_lse [Hq,
    total_q], S_dmask). block_table (a paged cache) is refused: kattn.paged_attention takes one."""
    _flash_refusals(dropout_p, block_table)
    _flash_dtypes(q, k, v)
    if not isinstance(q, np.ndarray):
        from . import torch as kattn_torch

        return kattn_torch.flash_attn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                             softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                             return_attn_probs)
    q_indptr = checked_indptr(cu_seqlens_q, max_seqlen_q, "cu_seqlens_q", "max_seqlen_q")
    kv_indptr = checked_indptr(cu_seqlens_k, max_seqlen_k, "cu_seqlens_k", "max_seqlen_k")
    o, lse = ragged_attention(q, k, v, q_indptr, kv_indptr, causal=causal, window=window_pair(window_size, "window_size"),
                              softcap=softcap, scale=softmax_scale, alibi_slopes=alibi_slopes, return_lse=True)
    return (o, np.ascontiguousarray(_flash_lse(lse).T), np.empty((0,), q.dtype)) if return_attn_probs else o


def plan(batch, q_len, kv_len, heads_q, heads_kv, head_dim, *, dtype="float32", causal=False, window=None,
         softcap=0.0, splits=0, split_chunk=0, block_q=0, block_k=0, processors=0):
    """The split-KV plan kattn.attention would run for a dense problem of this shape and dtype
    ("float32", "float64", "float16", "bfloat16") on this machine (processors > 0: planned for that
    many): a dict of splits, chunk (keys per split, 0: equal cuts), units (teams with work),
    units_unsplit, processors and reason."""
    return _kattn.plan(batch, q_len, kv_len, heads_q, heads_kv, head_dim, dtype,
                       _options(causal, window, softcap, None, splits, split_chunk, block_q, block_k), processors)
