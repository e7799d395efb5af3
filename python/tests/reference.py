"""The float64 textbook attention and its backward in NumPy, what every test compares against."""
import numpy as np


def textbook(q, k, v, causal=False, window=None, softcap=0.0, scale=None):
    """o [B, Nq, Hq, D], lse [B, Hq, Nq] (natural log) and what the backward needs, in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Nq, Hq, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    kk = np.repeat(k, G, axis=2)  # query head h reads KV head h // G
    vv = np.repeat(v, G, axis=2)
    s = scale * np.einsum("bihd,bjhd->bhij", q, kk)
    t = np.tanh(s / softcap) if softcap else None
    if softcap:
        s = softcap * t
    i = np.arange(Nq)[:, None] + (Nk - Nq)  # the diagonal key of each query (bottom-right aligned)
    j = np.arange(Nk)[None, :]
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    seen = np.ones((Nq, Nk), dtype=bool)
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    s = np.where(seen, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(l[..., 0] > 0, np.log(l[..., 0]) + m[..., 0], -np.inf)
        p = np.where(l > 0, p / np.where(l > 0, l, 1), 0.0)
    o = np.einsum("bhij,bjhd->bihd", p, vv)
    return o, lse, dict(p=p, t=t, kk=kk, vv=vv, scale=scale, G=G, softcap=softcap)


def textbook_backward(q, k, v, dout, **opt):
    o, _, c = textbook(q, k, v, **opt)
    q, dout = np.asarray(q, np.float64), np.asarray(dout, np.float64)
    p, kk, vv = c["p"], c["kk"], c["vv"]
    dv = np.einsum("bhij,bihd->bjhd", p, dout)
    dp = np.einsum("bihd,bjhd->bhij", dout, vv)
    delta = np.einsum("bihd,bihd->bhi", dout, o)[..., None]
    ds = p * (dp - delta)
    if c["softcap"]:
        ds = ds * (1.0 - c["t"] ** 2)
    ds *= c["scale"]
    dq = np.einsum("bhij,bjhd->bihd", ds, kk)
    dk = np.einsum("bhij,bihd->bjhd", ds, q)
    B, Nk, Hkv, D = k.shape
    G = c["G"]
    dk = dk.reshape(B, Nk, Hkv, G, D).sum(axis=3)
    dv = dv.reshape(B, Nk, Hkv, G, D).sum(axis=3)
    return dq, dk, dv


def rel_err(a, b):
    """max |a - b| over max(|b|, 1): relative for outputs of order one and more, absolute below (a
    gradient that is 0 in exact arithmetic comes out as a rounding error)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    finite = np.isfinite(b)
    assert np.array_equal(np.isfinite(a), finite), "non-finite values where the textbook has none (or the reverse)"
    if not finite.any():
        return 0.0
    return np.abs(a[finite] - b[finite]).max() / max(np.abs(b[finite]).max(), 1.0)
