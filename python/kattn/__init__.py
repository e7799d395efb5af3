"""kattn: exact attention (FlashAttention's IO-aware tiling) on Kokkos, from NumPy and PyTorch.

    import numpy as np, kattn
    q = np.random.randn(2, 1024, 8, 64)          # [batch, seq, heads, head_dim] ("bnhd")
    k = v = np.random.randn(2, 1024, 2, 64)      # GQA: 8 query heads on 2 KV heads
    o, lse = kattn.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = kattn.attention_backward(q, k, v, o, lse, np.ones_like(o), causal=True)

    import kattn.torch                           # autograd on CPU tensors, layout "bhnd"
    o = kattn.torch.attention(q_t, k_t, v_t, causal=True)

Arrays are float32 or float64 NumPy arrays or PyTorch CPU tensors (read through DLPack), viewed in
place (any strides whose last axis, the head dim, is contiguous); results are new arrays (tensors
for tensor inputs). The attention calls (attention, ragged_attention, paged_attention, decode,
cascade_attention), their backward and merge_states also take 16-bit storage with float32
accumulation: float16 (NumPy or PyTorch) and bfloat16 (PyTorch), o and the gradients in that type
and lse in float32; the forward calls also take float32 queries over a float16 or bfloat16 cache.
Bad input raises kattn.Error (a ValueError) with kattn's message, which names the argument.

Options every call takes: causal (bottom-right aligned), window=(left, right) (-1: unbounded),
softcap, scale (None: 1/sqrt(head_dim)), splits / split_chunk (split-KV; 0: planned), block_q /
block_k (tile sizes; 0: tuned), workspace (a kattn.Workspace() that the calls of a loop share: after
the first they take their scratch buffers from it instead of allocating them; the same results).
"""

import numpy as np

from . import _kattn
from ._arrays import as_array, dtype_name, index_array, returner
from ._kattn import Error, Workspace, build_info, version

__all__ = [
    "Error", "Workspace", "attention", "attention_backward", "build_info", "cascade_attention", "decode", "merge_states", "paged_attention",
    "paged_attention_backward", "plan", "ragged_attention", "ragged_attention_backward", "version",
]


def _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace=None):
    return dict(causal=causal, window=window, softcap=softcap, scale=scale, splits=splits, split_chunk=split_chunk,
                block_q=block_q, block_k=block_k, workspace=workspace)


def _as_arrays(**named):
    return [as_array(x, name) for name, x in named.items()]


def attention(q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bnhd", return_lse=False,
              splits=0, split_chunk=0, block_q=0, block_k=0, workspace=None):
    """o = softmax(scale * q k^T + mask) v over dense keys.

    q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D] (layout "bnhd"; "bhnd": [B, H, N, D]), Hq a multiple of
    Hkv (GQA). Returns o like q (head dim of v), and with return_lse the natural-log lse [B, Hq, Nq]
    (-inf for a row that sees no key).
    """
    out = returner(q)
    o, lse, _ = _kattn.attention(*_as_arrays(q=q, k=k, v=v), layout,
                                 _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace))
    return (out(o), out(lse)) if return_lse else out(o)


def attention_backward(q, k, v, o, lse, dout, *, causal=False, window=None, softcap=0.0, scale=None, layout="bnhd",
                       deterministic=False, block_q=0, block_k=0, workspace=None):
    """dq, dk, dv of sum(o * dout), for the o and lse kattn.attention returned with the same options.

    q, k, v, o, dout of one dtype (float16 and bfloat16 too: the gradients in it, lse float32)."""
    out = returner(q)
    dq, dk, dv, _ = _kattn.attention_backward(*_as_arrays(q=q, k=k, v=v, o=o, lse=lse, dout=dout), layout,
                                              _options(causal, window, softcap, scale, 0, 0, block_q, block_k, workspace),
                                              deterministic)
    return out(dq), out(dk), out(dv)


def ragged_attention(q, k, v, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0, scale=None,
                     return_lse=False, splits=0, split_chunk=0, block_q=0, block_k=0, workspace=None):
    """Attention over a batch of sequences packed without padding (FlashInfer's ragged layout).

    Sequence b owns rows q_indptr[b]:q_indptr[b+1] of q [total_q, Hq, D] and rows
    kv_indptr[b]:kv_indptr[b+1] of k, v [total_kv, Hkv, D]. Returns o like q, and with return_lse
    lse [total_q, Hq].
    """
    out = returner(q)
    o, lse, _ = _kattn.ragged_attention(*_as_arrays(q=q, k=k, v=v), index_array(q_indptr, "q_indptr"),
                                        index_array(kv_indptr, "kv_indptr"),
                                        _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace))
    return (out(o), out(lse)) if return_lse else out(o)


def ragged_attention_backward(q, k, v, o, lse, dout, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0,
                              scale=None, deterministic=False, block_q=0, block_k=0, workspace=None):
    """dq, dk, dv (shaped as q, k, v) for the o and lse kattn.ragged_attention returned."""
    out = returner(q)
    dq, dk, dv, _ = _kattn.ragged_attention_backward(
        *_as_arrays(q=q, k=k, v=v, o=o, lse=lse, dout=dout), index_array(q_indptr, "q_indptr"),
        index_array(kv_indptr, "kv_indptr"), _options(causal, window, softcap, scale, 0, 0, block_q, block_k, workspace),
        deterministic)
    return out(dq), out(dk), out(dv)


def _pages(kv_cache):
    """(k_pages, v_pages) from FlashInfer's two forms: a pair of [P, page_size, Hkv, D] arrays, or one
    [P, 2, page_size, Hkv, D] array (read in place: its [:, 0] and [:, 1])."""
    if isinstance(kv_cache, (tuple, list)):
        if len(kv_cache) != 2:
            raise Error(f"kv_cache: expected (k_pages, v_pages), got {len(kv_cache)} arrays")
        return as_array(kv_cache[0], "kv_cache[0]"), as_array(kv_cache[1], "kv_cache[1]")
    kv = as_array(kv_cache, "kv_cache")
    if kv.ndim != 5 or kv.shape[1] != 2:
        raise Error(f"kv_cache: expected (k_pages, v_pages) or one [pages, 2, page_size, Hkv, D] array, "
                    f"got shape {kv.shape}")
    return kv[:, 0], kv[:, 1]


def paged_attention(q, kv_cache, q_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len, *, causal=False,
                    window=None, softcap=0.0, scale=None, return_lse=False, splits=0, split_chunk=0, block_q=0,
                    block_k=0, workspace=None):
    """Attention over a paged KV cache (vLLM's PagedAttention, FlashInfer's page table).

    kv_cache: (k_pages, v_pages), each [num_pages, page_size, Hkv, D], or one [num_pages, 2,
    page_size, Hkv, D] array. Sequence b's keys are the pages kv_page_indices[kv_page_indptr[b] :
    kv_page_indptr[b+1]], all full but the last, which holds kv_last_page_len[b] keys. Queries are
    ragged: q [total_q, Hq, D] with q_indptr [B + 1]. Returns o like q, and with return_lse lse
    [total_q, Hq].
    """
    out = returner(q)
    k_pages, v_pages = _pages(kv_cache)
    o, lse, _ = _kattn.paged_attention(
        as_array(q, "q"), k_pages, v_pages, index_array(q_indptr, "q_indptr"),
        index_array(kv_page_indptr, "kv_page_indptr"), index_array(kv_page_indices, "kv_page_indices"),
        index_array(kv_last_page_len, "kv_last_page_len"),
        _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace))
    return (out(o), out(lse)) if return_lse else out(o)


def paged_attention_backward(q, kv_cache, o, lse, dout, q_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len,
                             *, causal=False, window=None, softcap=0.0, scale=None, deterministic=False, block_q=0,
                             block_k=0, workspace=None):
    """dq [total_q, Hq, D] and dk_pages, dv_pages shaped as the pages (slots no sequence uses get 0).
    A page listed twice in the table (shared by sequences) is refused."""
    out = returner(q)
    k_pages, v_pages = _pages(kv_cache)
    dq, dk, dv, _ = _kattn.paged_attention_backward(
        as_array(q, "q"), k_pages, v_pages, *_as_arrays(o=o, lse=lse, dout=dout), index_array(q_indptr, "q_indptr"),
        index_array(kv_page_indptr, "kv_page_indptr"), index_array(kv_page_indices, "kv_page_indices"),
        index_array(kv_last_page_len, "kv_last_page_len"),
        _options(causal, window, softcap, scale, 0, 0, block_q, block_k, workspace), deterministic)
    return out(dq), out(dk), out(dv)


def decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, window=None, softcap=0.0, scale=None,
           return_lse=False, splits=0, split_chunk=0, workspace=None):
    """One decoding step: q [B, Hq, D] (one query per sequence) over a paged KV cache, as
    paged_attention with q_indptr = 0, 1, ..., B. Split-KV is planned for the machine unless given."""
    qa = as_array(q, "q")
    if qa.ndim != 3:
        raise Error(f"q: expected a rank-3 array [B, Hq, D] (one query per sequence), got rank {qa.ndim}")
    return paged_attention(q, kv_cache, np.arange(qa.shape[0] + 1, dtype=np.int64),
                           kv_page_indptr, kv_page_indices, kv_last_page_len, window=window, softcap=softcap,
                           scale=scale, return_lse=return_lse, splits=splits, split_chunk=split_chunk,
                           workspace=workspace)


def cascade_attention(q, k_prefix, v_prefix, q_indptr, *, kv=None, kv_indptr=None, kv_cache=None,
                      kv_page_indptr=None, kv_page_indices=None, kv_last_page_len=None, causal=False, window=None,
                      softcap=0.0, scale=None, return_lse=False, splits=0, split_chunk=0, block_q=0, block_k=0,
                      workspace=None):
    """Attention over a prefix shared by every sequence (k_prefix, v_prefix [Np, Hkv, D], read once
    for the whole batch), then each sequence's own keys: ragged (kv=(k, v) [total_kv, Hkv, D] with
    kv_indptr) or paged (kv_cache with kv_page_indptr, kv_page_indices, kv_last_page_len). q
    [total_q, Hq, D] with q_indptr. The masks see the prefix and the sequence's keys as one
    sequence. Returns o like q, and with return_lse lse [total_q, Hq]. Storage as attention's: the
    prefix in the dtype of the suffix's keys; in 16 bits o is rounded once, after the merge."""
    out = returner(q)
    opts = _options(causal, window, softcap, scale, splits, split_chunk, block_q, block_k, workspace)
    q_, kp, vp = _as_arrays(q=q, k_prefix=k_prefix, v_prefix=v_prefix)
    if (kv is None) == (kv_cache is None):
        raise Error("kv, kv_cache: expected the suffix as ragged keys (kv=(k, v), kv_indptr) or as a paged cache "
                    "(kv_cache and its page table), one of them")
    if kv is not None:
        if kv_indptr is None:
            raise Error("kv_indptr: expected the offsets of the ragged suffix keys")
        if not (isinstance(kv, (tuple, list)) and len(kv) == 2):
            raise Error("kv: expected (k, v), the ragged suffix keys and values")
        k, v = as_array(kv[0], "k"), as_array(kv[1], "v")
        o, lse = _kattn.cascade_ragged_attention(q_, kp, vp, k, v, index_array(q_indptr, "q_indptr"),
                                                 index_array(kv_indptr, "kv_indptr"), opts)
    else:
        k_pages, v_pages = _pages(kv_cache)
        o, lse = _kattn.cascade_paged_attention(
            q_, kp, vp, k_pages, v_pages, index_array(q_indptr, "q_indptr"),
            index_array(kv_page_indptr, "kv_page_indptr"), index_array(kv_page_indices, "kv_page_indices"),
            index_array(kv_last_page_len, "kv_last_page_len"), opts)
    return (out(o), out(lse)) if return_lse else out(o)


def merge_states(o_parts, lse_parts, *, dtype=None):
    """The attention over the union of disjoint key sets from the attention over each: o_parts
    [S, N, H, D], lse_parts [S, N, H] (natural log) -> o [N, H, D], lse [N, H].

    o in dtype (None: that of o_parts; "float16" or "bfloat16", or the NumPy or torch dtype, to
    round float32 parts once into 16 bits); lse_parts and lse in o's accumulation type (float32
    for a 16-bit o). The merge runs in that type."""
    out = returner(o_parts)
    o, lse = _kattn.merge_states(*_as_arrays(o_parts=o_parts, lse_parts=lse_parts), dtype_name(dtype))
    return out(o), out(lse)


def plan(batch, q_len, kv_len, heads_q, heads_kv, head_dim, *, dtype="float32", causal=False, window=None,
         softcap=0.0, splits=0, split_chunk=0, block_q=0, block_k=0, processors=0):
    """The split-KV plan kattn.attention would run for a dense problem of this shape and dtype
    ("float32", "float64", "float16", "bfloat16") on this machine (processors > 0: planned for that
    many): a dict of splits, chunk (keys per split, 0: equal cuts), units (teams with work),
    units_unsplit, processors and reason."""
    return _kattn.plan(batch, q_len, kv_len, heads_q, heads_kv, head_dim, dtype,
                       _options(causal, window, softcap, None, splits, split_chunk, block_q, block_k), processors)
