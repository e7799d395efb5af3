"""kattn: exact attention (FlashAttention's IO-aware tiling) on Kokkos, from NumPy.

    import numpy as np, kattn
    q = np.random.randn(2, 1024, 8, 64)          # [batch, seq, heads, head_dim] ("bnhd")
    k = v = np.random.randn(2, 1024, 2, 64)      # GQA: 8 query heads on 2 KV heads
    o, lse = kattn.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = kattn.attention_backward(q, k, v, o, lse, np.ones_like(o), causal=True)
    o, lse = kattn.merge_states(o_parts, lse_parts)  # [S, N, H, D], [S, N, H]: parts over disjoint keys

Arrays are float32 or float64, viewed in place (any strides whose last axis, the head dim, is
contiguous); outputs are new arrays. layout="bhnd" takes [batch, heads, seq, head_dim] instead.
lse is always [batch, heads, seq]. Bad input raises kattn.Error (a ValueError) with kattn's message.
"""

from ._kattn import Error, attention, attention_backward, build_info, merge_states, version

__all__ = ["Error", "attention", "attention_backward", "build_info", "merge_states", "version"]
