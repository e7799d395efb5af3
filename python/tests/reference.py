"""The float64 textbook attention and its backward in NumPy, what every test compares against, the
dense inputs many tests draw, and the check of kattn.attention on them against the textbook."""
import numpy as np


def seen(Nq, Nk, causal, window):
    """[Nq, Nk]: which keys each query sees (causal bottom-right aligned, window (left, right))."""
    i = np.arange(Nq)[:, None] + (Nk - Nq)  # the diagonal key of each query
    j = np.arange(Nk)[None, :]
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    mask = np.ones((Nq, Nk), dtype=bool)
    if left >= 0:
        mask &= j >= i - left
    if right >= 0:
        mask &= j <= i + right
    return mask


def torch_textbook(q, k, v, sinks=None, causal=False, window=None, softcap=0.0, scale=None, alibi_slopes=None):
    """o of [B, H, N, D] tensors in PyTorch ops, so that autograd gives every gradient (the sinks'
    too): GQA by repeating KV heads, the mask of seen(), ALiBi's bias after softcap, the sinks (a
    tensor [Hq], or None) a last column of the scores dropped after the softmax."""
    import torch

    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scale = 1.0 / q.shape[-1] ** 0.5 if scale is None else scale
    s = scale * q @ k.transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        s = s + torch.from_numpy(alibi_bias(q.shape[2], k.shape[2], alibi_slopes)).to(s.dtype)
    s = s.masked_fill(~torch.from_numpy(seen(q.shape[2], k.shape[2], causal, window)), float("-inf"))
    if sinks is None:
        return torch.softmax(s, dim=-1) @ v
    column = sinks.to(s.dtype).view(1, -1, 1, 1).expand(*s.shape[:3], 1)
    return torch.softmax(torch.cat([s, column], dim=-1), dim=-1)[..., :-1] @ v


def alibi_bias(Nq, Nk, slopes):
    """[1, Hq, Nq, Nk]: ALiBi's -slope_h * |i + Nk - Nq - j| (flash-attn's alibi_slopes)."""
    distance = np.abs(np.arange(Nq)[:, None] + (Nk - Nq) - np.arange(Nk)[None, :]).astype(np.float64)
    return -np.asarray(slopes, np.float64).reshape(1, -1, 1, 1) * distance


def textbook(q, k, v, causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None):
    """o [B, Nq, Hq, D], lse [B, Hq, Nq] (natural log) and what the backward needs, in float64.
    sinks: None, or one logit per query head [Hq], one more logit of each row's softmax that carries
    no value (-inf: none on that head). alibi_slopes: None, or one slope per query head [Hq], whose
    bias is added after softcap."""
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
    if alibi_slopes is not None:
        s = s + alibi_bias(Nq, Nk, alibi_slopes)
    s = np.where(seen(Nq, Nk, causal, window), s, -np.inf)
    sink = np.full((1, Hq, 1, 1), -np.inf) if sinks is None else np.asarray(sinks, np.float64).reshape(1, Hq, 1, 1)
    m = np.maximum(s.max(axis=-1, keepdims=True, initial=-np.inf), sink)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    p_sink = np.exp(sink - m)
    l = p.sum(axis=-1, keepdims=True) + p_sink
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(l[..., 0] > 0, np.log(l[..., 0]) + m[..., 0], -np.inf)
        p = np.where(l > 0, p / np.where(l > 0, l, 1), 0.0)
        p_sink = np.where(l > 0, p_sink / np.where(l > 0, l, 1), 0.0)
    o = np.einsum("bhij,bjhd->bihd", p, vv)
    return o, lse, dict(p=p, p_sink=p_sink[..., 0], t=t, kk=kk, vv=vv, scale=scale, G=G, softcap=softcap)


def textbook_backward(q, k, v, dout, **opt):
    """dq, dk, dv of sum(o * dout), and with sinks their gradient dsinks [Hq]."""
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
    if opt.get("sinks") is None:
        return dq, dk, dv
    return dq, dk, dv, -(c["p_sink"] * delta[..., 0]).sum(axis=(0, 2))


def rel_err(a, b):
    """max |a - b| over max(|b|, 1): relative for outputs of order one and more, absolute below (a
    gradient that is 0 in exact arithmetic comes out as a rounding error)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    finite = np.isfinite(b)
    assert np.array_equal(np.isfinite(a), finite), "non-finite values where the textbook has none (or the reverse)"
    if not finite.any():
        return 0.0
    return np.abs(a[finite] - b[finite]).max() / max(np.abs(b[finite]).max(), 1.0)


def round16(x, dtype):
    """float32 values rounded to nearest even in dtype ("float16" or "bfloat16"), as float32."""
    x = np.asarray(x, np.float32)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)  # bfloat16: the upper 16 bits, rounded (finite values)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def textbook16(q, k, v, dtype, causal=False, window=None, softcap=0.0, scale=None):
    """o of the textbook algorithm run in a 16-bit dtype, FlashAttention's baseline: scores
    accumulated in float32 and rounded to dtype, the softmax in float32 with P rounded to dtype,
    P V accumulated in float32 and rounded. q, k, v hold dtype's values; [B, N, H, D] as textbook."""
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    Nq, Hq, D = q.shape[1:]
    Nk, Hkv = k.shape[1], k.shape[2]
    scale = np.float32(1.0 / np.sqrt(D) if scale is None else scale)
    kk, vv = np.repeat(k, Hq // Hkv, axis=2), np.repeat(v, Hq // Hkv, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    if softcap:
        s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
    s = np.where(seen(Nq, Nk, causal, window), round16(s, dtype), np.float32(-np.inf))
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, np.float32(0))
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    p = round16(np.where(l > 0, p / np.where(l > 0, l, 1), 0), dtype)
    return round16(np.einsum("bhij,bjhd->bihd", p, vv), dtype)


def assert_16bit_rule(o, lse, ref_o, ref_lse, tb_o):
    """FlashAttention's accuracy rule for 16-bit storage, against the float64 textbook (ref_o,
    ref_lse) on the same 16-bit inputs: o's max error at most twice that of the textbook run in the
    16-bit type (tb_o; 1e-6 where that one is exact), lse within 1e-5 relative (-inf where ref_lse
    is)."""
    o, ref_o, tb_o, lse = (np.asarray(x, np.float64) for x in (o, ref_o, tb_o, lse))
    err, err_tb = np.abs(o - ref_o).max(initial=0.0), np.abs(tb_o - ref_o).max(initial=0.0)
    assert err <= max(2 * err_tb, 1e-6), f"o: max error {err:.3g}, the textbook's in 16 bits {err_tb:.3g}"
    finite = np.isfinite(ref_lse)
    assert np.array_equal(lse[~finite], ref_lse[~finite]), "lse of rows that see no key"
    lse_err = (np.abs(lse[finite] - ref_lse[finite]) / np.maximum(1.0, np.abs(ref_lse[finite]))).max(initial=0.0)
    assert lse_err <= 1e-5, f"lse: relative error {lse_err:.3g}"


def textbook16_backward(q, k, v, dout, dtype, causal=False, window=None, softcap=0.0, scale=None,
                        d_from_o16=False, rounded=True):
    """dq, dk, dv of the textbook backward run in a 16-bit dtype, as autograd runs textbook16:
    S and P rounded to dtype (the cap's tanh taken of the rounded score, its result rounded), dP =
    dO V^T rounded, dS = P (dP - rowsum(P dP)) rounded (times 1 - tanh^2 under softcap, rounded),
    and dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO accumulated in float32 (over the query heads
    of each KV head too) and rounded once. q, k, v, dout hold dtype's values; [B, N, H, D].
    d_from_o16: rowsum(dO o) with o rounded to dtype in place of rowsum(P dP), as FlashAttention's
    backward and kattn's compute D; rounded=False: the float32 sums before their last rounding."""
    q, k, v, dout = (np.asarray(x, np.float32) for x in (q, k, v, dout))
    B, Nq, Hq, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = np.float32(1.0 / np.sqrt(D) if scale is None else scale)
    kk, vv = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)
    s = round16(np.einsum("bihd,bjhd->bhij", q, kk) * scale, dtype)
    if softcap:
        t = np.tanh(s / np.float32(softcap))
        s = round16(np.float32(softcap) * t, dtype)
    s = np.where(seen(Nq, Nk, causal, window), s, np.float32(-np.inf))
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, np.float32(0))
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    p = np.where(l > 0, p / np.where(l > 0, l, 1), 0).astype(np.float32)
    if d_from_o16:
        o = round16(np.einsum("bhij,bjhd->bihd", p, vv), dtype)
        rowsum = np.einsum("bihd,bihd->bhi", dout, o)[..., None]
    p = round16(p, dtype)
    dp = round16(np.einsum("bihd,bjhd->bhij", dout, vv), dtype)
    if not d_from_o16:
        rowsum = (p * dp).sum(axis=-1, keepdims=True)
    ds = round16(p * (dp - rowsum), dtype)
    if softcap:
        ds = round16(ds * (1 - t * t), dtype)
    last = (lambda a: round16(a, dtype)) if rounded else (lambda a: a)
    dq = last(scale * np.einsum("bhij,bjhd->bihd", ds, kk))
    dk = last(scale * np.einsum("bhij,bihd->bjhd", ds, q).reshape(B, Nk, Hkv, G, D).sum(axis=3))
    dv = last(np.einsum("bhij,bihd->bjhd", p, dout).reshape(B, Nk, Hkv, G, D).sum(axis=3))
    return dq, dk, dv


def o16_allowance(q, k, v, dout, dtype, **opt):
    """What reading o rounded to dtype for D = rowsum(dO o) changes in the 16-bit textbook, per
    gradient (max |difference| before the last rounding): FlashAttention's backward and kattn's
    read that o, autograd's does not, and on rows of a handful of keys it alone can reach the
    textbook's error (a one-key row: exact dS is 0, D = dO o16 against dP = dO v)."""
    a = textbook16_backward(q, k, v, dout, dtype, rounded=False, **opt)
    b = textbook16_backward(q, k, v, dout, dtype, d_from_o16=True, rounded=False, **opt)
    return [float(np.abs(np.asarray(x, np.float64) - y).max(initial=0.0)) for x, y in zip(a, b)]


def grad16_errors(grads, ref, tb):
    """{name: (max error of kattn's gradient, max error of the textbook's in 16 bits)} against the
    float64 reference, for dq, dk, dv (kattn's, the float64 textbook's, the 16-bit textbook's)."""
    out = {}
    for name, a, r, t in zip(("dq", "dk", "dv"), grads, ref, tb):
        a, r, t = (np.asarray(x, np.float64) for x in (a, r, t))
        assert a.shape == r.shape, f"{name}: shape {a.shape}, expected {r.shape}"
        assert np.array_equal(np.isnan(a), np.isnan(r)), f"{name}: NaN where the reference has none, or the reverse"
        out[name] = (np.abs(a - r).max(initial=0.0, where=~np.isnan(r)),
                     np.abs(t - r).max(initial=0.0, where=~np.isnan(r)))
    return out


def assert_16bit_grad_rule(grads, ref, tb, allowance):
    """FlashAttention's rule for the gradients in 16-bit storage: each of dq, dk, dv within twice
    the max error of the textbook backward run in the 16-bit type (tb, textbook16_backward; 1e-6
    where that one is exact) against the float64 textbook backward on the same 16-bit inputs, plus
    what the 16-bit o changes in the textbook (allowance, o16_allowance)."""
    for (name, (err, err_tb)), a in zip(grad16_errors(grads, ref, tb).items(), allowance):
        assert err <= max(2 * err_tb, 1e-6) + a, \
            f"{name}: max error {err:.3g}, the textbook's in 16 bits {err_tb:.3g}, o in 16 bits changes it {a:.3g}"


def dense_qkv(shape, dtype=np.float64, seed=0):
    """q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D], standard normal, of shape (B, Nq, Nk, Hq, Hkv, D)."""
    B, Nq, Nk, Hq, Hkv, D = shape
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((B, Nq, Hq, D), (B, Nk, Hkv, D), (B, Nk, Hkv, D))]


def assert_attention_matches_textbook(shape, seed=0, splits=0, tol=1e-12, **opt):
    """On dense_qkv(shape, seed=seed): kattn.attention's o and lse (with `splits`) within tol
    (relative) of the textbook's under the options opt."""
    import kattn

    q, k, v = dense_qkv(shape, seed=seed)
    o, lse = kattn.attention(q, k, v, return_lse=True, splits=splits, **opt)
    ref_o, ref_lse, _ = textbook(q, k, v, **opt)
    assert rel_err(o, ref_o) <= tol
    assert rel_err(lse, ref_lse) <= tol
