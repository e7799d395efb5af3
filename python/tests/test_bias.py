"""The bias tensor (bias= on kattn.attention and its backward, kattn.torch.attention, and
scaled_dot_product_attention's attn_mask) against the float64 textbook with the same bias (in
NumPy, and in PyTorch ops for autograd): float and bool, every broadcast shape, with gradients for
q, k, v and the bias itself; ragged, paged and cascade calls; and the refusals."""

import numpy as np
import pytest

import kattn
from reference import alibi_bias, rel_err, textbook_backward
from test_kinds import pages_of, ragged_batch

B, NQ, NK, HQ, HKV, D = 2, 9, 13, 4, 2, 8


def dense(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((B, NQ, HQ, D), (B, NK, HKV, D), (B, NK, HKV, D))]


def bias_for(shape, seed=0, dtype=np.float64):
    rng = np.random.default_rng(50 + seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.75
    b = 2.0 * rng.standard_normal(shape)
    b[rng.random(shape) < 0.05] = -np.inf
    return b.astype(dtype)


def as_float(bias):
    return np.where(bias, 0.0, -np.inf) if bias.dtype == np.bool_ else bias.astype(np.float64)


def central_difference(loss, x, e, h=1e-6):
    """(loss() with element e of x raised by h - with it lowered by h) / 2h; x is restored."""
    flat = x.reshape(-1)
    x0 = flat[e]
    flat[e] = x0 + h
    up = loss()
    flat[e] = x0 - h
    down = loss()
    flat[e] = x0
    return (up - down) / (2 * h)


def textbook_with_bias(q, k, v, bias, causal=False):
    """o, lse of the textbook with the bias added to the scores (the NumPy reference's own steps)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    G = q.shape[2] // k.shape[2]
    kk, vv = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) / np.sqrt(q.shape[-1]) + as_float(bias)
    if causal:
        i = np.arange(q.shape[1])[:, None] + (k.shape[1] - q.shape[1])
        s = np.where(np.arange(k.shape[1])[None, :] <= i, s, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(l > 0, p / np.where(l > 0, l, 1), 0.0)
        lse = np.where(l[..., 0] > 0, np.log(l[..., 0]) + m[..., 0], -np.inf)
    return np.einsum("bhij,bjhd->bihd", p, vv), lse


@pytest.mark.parametrize("shape", [(B, HQ, NQ, NK), (1, 1, NQ, NK), (B, 1, NQ, NK), (1, HQ, NQ, NK)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.bool_])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_the_textbook_with_the_bias(shape, dtype, causal):
    q, k, v = dense(1)
    bias = bias_for(shape, 1, dtype)
    o, lse = kattn.attention(q, k, v, bias=bias, causal=causal, return_lse=True)
    ref_o, ref_lse = textbook_with_bias(q, k, v, bias, causal)
    assert rel_err(o, ref_o) <= 1e-12
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    finite = np.isfinite(ref_lse)
    assert np.abs(lse[finite] - ref_lse[finite]).max(initial=0.0) <= 1e-12


def test_a_bias_of_zeros_is_no_bias():
    q, k, v = dense(2)
    want = kattn.attention(q, k, v, causal=True)
    got = kattn.attention(q, k, v, causal=True, bias=np.zeros((1, 1, NQ, NK)))
    assert rel_err(got, want) <= 1e-15


def test_backward_gradients_with_the_bias():
    q, k, v = dense(3)
    dout = np.random.default_rng(4).standard_normal(q.shape)
    bias = bias_for((B, HQ, NQ, NK), 3)
    bias[~np.isfinite(bias)] = -30.0  # the finite-difference check below needs finite scores
    o, lse = kattn.attention(q, k, v, bias=bias, return_lse=True)
    dq, dk, dv = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias)
    # Central differences of sum(o * dout) in q, k and v at a few elements.
    for x, g in ((q, dq), (k, dk), (v, dv)):
        for e in (0, 17, x.size - 1):
            fd = central_difference(lambda: (kattn.attention(q, k, v, bias=bias) * dout).sum(), x, e)
            assert abs(g.reshape(-1)[e] - fd) <= 1e-7 * max(1.0, abs(g.reshape(-1)[e]))
    # A bias of zeros gives the textbook's gradients without one.
    dq0, _, _ = textbook_backward(q, k, v, dout)
    dq1, _, _ = kattn.attention_backward(q, k, v, *kattn.attention(q, k, v, return_lse=True), dout,
                                         bias=np.zeros((1, 1, NQ, NK)))
    assert rel_err(dq1, dq0) <= 1e-10


def textbook_dbias(q, k, v, dout, bias, causal=False):
    """d(sum(o * dout)) / d(bias): P (dP - D) per score (0 where P = 0), summed over the bias's
    broadcast dims."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    G = q.shape[2] // k.shape[2]
    kk, vv = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)
    o, lse = textbook_with_bias(q, k, v, bias, causal)
    s = np.einsum("bihd,bjhd->bhij", q, kk) / np.sqrt(q.shape[-1]) + as_float(bias)
    if causal:
        i = np.arange(q.shape[1])[:, None] + (k.shape[1] - q.shape[1])
        s = np.where(np.arange(k.shape[1])[None, :] <= i, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(lse)[..., None], np.exp(s - np.where(np.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    dp = np.einsum("bihd,bjhd->bhij", dout, vv)
    d = np.einsum("bihd,bihd->bhi", dout, o)[..., None]
    ds = np.where(p == 0, 0.0, p * (dp - d))
    axes = tuple(a for a in (0, 1) if bias.shape[a] == 1)
    return ds.sum(axis=axes, keepdims=True)


@pytest.mark.parametrize("shape", [(B, HQ, NQ, NK), (1, 1, NQ, NK), (B, 1, NQ, NK), (1, HQ, NQ, NK)])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_gives_the_bias_its_gradient(shape, causal):
    q, k, v = dense(7)
    dout = np.random.default_rng(8).standard_normal(q.shape)
    bias = bias_for(shape, 7)
    o, lse = kattn.attention(q, k, v, bias=bias, causal=causal, return_lse=True)
    *grads, dbias = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, causal=causal, bias_grad=True)
    assert dbias.shape == shape and dbias.dtype == np.float64
    want = textbook_dbias(q, k, v, dout, bias, causal)
    assert np.abs(dbias - want).max() <= 1e-12
    for got, ref in zip(grads, kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, causal=causal)):
        assert np.array_equal(got, ref)
    # float32: the bias's dtype, within float's rounding.
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    b32 = bias.astype(np.float32)
    o, lse = kattn.attention(q32, k32, v32, bias=b32, causal=causal, return_lse=True)
    *_, d32 = kattn.attention_backward(q32, k32, v32, o, lse, dout.astype(np.float32), bias=b32, causal=causal,
                                       bias_grad=True)
    assert d32.dtype == np.float32
    assert np.abs(d32 - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


def test_the_bias_gradient_matches_finite_differences():
    q, k, v = dense(9)
    dout = np.random.default_rng(10).standard_normal(q.shape)
    bias = 2.0 * np.random.default_rng(11).standard_normal((1, HQ, NQ, NK))
    o, lse = kattn.attention(q, k, v, bias=bias, return_lse=True)
    *_, dbias = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, bias_grad=True)
    for e in (0, 31, bias.size - 1):
        fd = central_difference(lambda: (kattn.attention(q, k, v, bias=bias) * dout).sum(), bias, e)
        assert abs(dbias.reshape(-1)[e] - fd) <= 1e-7


def test_a_mask_has_no_gradient():
    q, k, v = dense(12)
    keep = bias_for((1, 1, NQ, NK), 12, np.bool_)
    o, lse = kattn.attention(q, k, v, bias=keep, return_lse=True)
    with pytest.raises(kattn.Error, match=r"bias_grad: a boolean bias \(a mask\) has no gradient"):
        kattn.attention_backward(q, k, v, o, lse, o, bias=keep, bias_grad=True)
    with pytest.raises(kattn.Error, match="bias_grad: the gradient of a bias, but the call has no bias"):
        kattn.attention_backward(q, k, v, o, lse, o, bias_grad=True)


@pytest.mark.parametrize("bias, message", [
    (np.zeros((B, HQ, NK, NQ)), "bias: expected [2 or 1, 4 or 1, 9, 13], got [2, 4, 13, 9]"),
    (np.zeros((NQ, NK)), "bias: expected a rank-4 array [B or 1, Hq or 1, Nq, Nk], got rank 2"),
    (np.zeros((1, 1, NQ, NK), np.int32), "bias: expected float32, float64, float16, bfloat16 or bool, got int32"),
    (np.zeros((1, 1, NK, NQ)).transpose(0, 1, 3, 2), "bias: expected contiguous keys"),
])
def test_bad_biases_are_refused_naming_them(bias, message):
    q, k, v = dense()
    with pytest.raises(kattn.Error, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        kattn.attention(q, k, v, bias=bias)


# ---- PyTorch: kattn.torch.attention(bias=) and SDPA's attn_mask, against autograd of SDPA's math

@pytest.mark.parametrize("mask_shape", [(NQ, NK), (HQ, NQ, NK), (B, 1, NQ, NK), (B, HQ, NQ, NK)])
@pytest.mark.parametrize("boolean", [False, True])
def test_sdpa_attn_mask_matches_pytorch(mask_shape, boolean):
    torch = pytest.importorskip("torch")
    import kattn.torch  # noqa: F401  (needs PyTorch)

    g = torch.Generator().manual_seed(5)
    q = torch.randn(B, HQ, NQ, D, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(B, HQ, NK, D, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(B, HQ, NK, D, dtype=torch.float64, generator=g, requires_grad=True)
    mask = torch.rand(mask_shape, generator=g) < 0.8 if boolean else torch.randn(mask_shape, generator=g,
                                                                                   dtype=torch.float64,
                                                                                   requires_grad=True)
    if boolean:
        mask[..., 0] = True  # every row sees a key (PyTorch gives NaN for a row it masks whole)
    o = kattn.torch.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, *(() if boolean else (mask,)))]
    additive = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf")) if boolean else leaves[3]
    scores = leaves[0] @ leaves[1].transpose(-1, -2) / D ** 0.5 + additive  # SDPA's math, in PyTorch ops
    ref = torch.softmax(scores, dim=-1) @ leaves[2]
    assert rel_err(o.detach().numpy(), ref.detach().numpy()) <= 1e-12
    dout = torch.randn(o.shape, dtype=o.dtype, generator=g)
    (o * dout).sum().backward()
    (ref * dout).sum().backward()
    for got, want in zip((q, k, v, *(() if boolean else (mask,))), leaves):
        assert rel_err(got.grad.numpy(), want.grad.numpy()) <= 1e-10


@pytest.mark.parametrize("shape", [(B, HQ, NQ, NK), (1, HQ, NQ, NK), (B, 1, NQ, NK), (1, 1, NQ, NK)])
def test_torch_attention_gives_the_bias_its_gradient(shape):
    torch = pytest.importorskip("torch")
    import kattn.torch  # noqa: F401  (needs PyTorch)

    q, k, v = (torch.from_numpy(x).requires_grad_() for x in dense(6))
    bias = torch.from_numpy(bias_for(shape, 6)).requires_grad_()
    o = kattn.torch.attention(q, k, v, bias=bias, layout="bnhd", causal=True)
    ref_o, _ = textbook_with_bias(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), bias.detach().numpy(),
                                  causal=True)
    assert rel_err(o.detach().numpy(), ref_o) <= 1e-12
    dout = torch.from_numpy(np.random.default_rng(13).standard_normal(o.shape))
    (o * dout).sum().backward()
    want = textbook_dbias(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), dout.numpy(),
                          bias.detach().numpy(), causal=True)
    assert bias.grad.shape == bias.shape
    assert np.abs(bias.grad.numpy() - want).max() <= 1e-12
    # A bias that needs no gradient gets none, and costs the backward nothing.
    fixed = bias.detach()
    kattn.torch.attention(q, k, v, bias=fixed, layout="bnhd").sum().backward()
    assert fixed.grad is None


def test_torch_refuses_is_causal_with_a_mask():
    torch = pytest.importorskip("torch")
    import kattn.torch  # noqa: F401  (needs PyTorch)

    q, k, v = (torch.from_numpy(x) for x in dense(6))
    bias = torch.from_numpy(bias_for((1, HQ, NQ, NK), 6))
    with pytest.raises(kattn.Error, match="attn_mask: expected None with is_causal=True"):
        kattn.torch.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=True)


# ---- ragged batches and paged caches: the bias padded to the longest sequence

@pytest.mark.parametrize("bias_shape", [(3, HQ), (1, 1)])
def test_ragged_and_paged_calls_read_each_sequences_corner(bias_shape):
    rng = np.random.default_rng(21)
    q_lens, kv_lens = [4, 0, 9], [7, 3, 12]
    q = rng.standard_normal((sum(q_lens), HQ, D))
    k, v = (rng.standard_normal((sum(kv_lens), HKV, D)) for _ in range(2))
    dout = rng.standard_normal(q.shape)
    bias = bias_for((*bias_shape, max(q_lens), max(kv_lens)), 21)
    qi, ki = np.cumsum([0, *q_lens]), np.cumsum([0, *kv_lens])
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, bias=bias, causal=True, return_lse=True)
    *_, dbias = kattn.ragged_attention_backward(q, k, v, o, lse, dout, qi, ki, bias=bias, causal=True, bias_grad=True)
    want = np.zeros_like(dbias)
    for b, (nq, nk) in enumerate(zip(q_lens, kv_lens)):
        if nq == 0:
            continue
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        corner = bias[min(b, bias.shape[0] - 1):][:1, :, :nq, :nk]
        one = [x[None] for x in (q[rows], k[keys], v[keys])]
        ref_o, ref_lse = kattn.attention(*one, bias=corner, causal=True, return_lse=True)
        assert rel_err(o[rows], ref_o[0]) <= 1e-12
        want[min(b, bias.shape[0] - 1):][:1, :, :nq, :nk] += textbook_dbias(*one, dout[rows][None], corner, causal=True)
    assert np.abs(dbias - want).max() <= 1e-12
    # The same keys in pages of 4: the same result.
    pages, table, indptr, last = [], [], [0], []
    for b, nk in enumerate(kv_lens):
        n = (nk + 3) // 4
        for p in range(n):
            page = np.zeros((2, 4, HKV, D))
            take = slice(ki[b] + 4 * p, min(ki[b] + 4 * p + 4, ki[b + 1]))
            page[0, :take.stop - take.start], page[1, :take.stop - take.start] = k[take], v[take]
            table.append(len(pages))
            pages.append(page)
        indptr.append(indptr[-1] + n)
        last.append(nk - 4 * (n - 1) if n else 0)
    paged = kattn.paged_attention(q, np.stack(pages), qi, np.array(indptr), np.array(table), np.array(last),
                                  bias=bias, causal=True)
    assert rel_err(paged, o) <= 1e-13


# ---- cascades: the bias of a ragged batch of prefix + suffix

@pytest.mark.parametrize("bias_shape", [(4, HQ), (1, 1), (4, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.bool_])
@pytest.mark.parametrize("suffix", ["ragged", "paged"])
def test_cascade_reads_each_requests_prefix_and_suffix_corner(bias_shape, dtype, suffix):
    """bias [B or 1, Hq or 1, max Nq, Np + max suffix]: request b reads bias[b, :, :Nq_b, :Np + Nk_b],
    the prefix's keys first; with ALiBi measured within the request."""
    q_lens, suffix_lens, np_ = [4, 0, 9, 1], [7, 3, 12, 0], 10
    q, k, v, qi, ki = ragged_batch(q_lens, suffix_lens, HQ, HKV, D, seed=31)
    rng = np.random.default_rng(32)
    kp, vp = (rng.standard_normal((np_, HKV, D)) for _ in range(2))
    bias = bias_for((*bias_shape, max(q_lens), np_ + max(suffix_lens)), 31, dtype)
    slopes = np.array([0.5, 0.0, 0.25, 1.0])
    if suffix == "ragged":
        keys = dict(kv=(k, v), kv_indptr=ki)
    else:
        pages, pi, idx, last = pages_of(k, v, ki, 4, seed=31)
        keys = dict(kv_cache=pages, kv_page_indptr=pi, kv_page_indices=idx, kv_last_page_len=last)
    o, lse = kattn.cascade_attention(q, kp, vp, qi, bias=bias, alibi_slopes=slopes, causal=True, return_lse=True,
                                     **keys)
    for b, (nq, nk) in enumerate(zip(q_lens, suffix_lens)):
        if nq == 0:
            continue
        rows, own = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        corner = as_float(bias[min(b, bias.shape[0] - 1):][:1, :, :nq, :np_ + nk]) + alibi_bias(nq, np_ + nk, slopes)
        whole = [np.concatenate([p, x[own]])[None] for p, x in ((kp, k), (vp, v))]
        ref_o, ref_lse = textbook_with_bias(q[rows][None], *whole, corner, causal=True)
        assert rel_err(o[rows], ref_o[0]) <= 1e-12
        ref_lse = ref_lse[0].T
        assert np.array_equal(np.isneginf(lse[rows]), np.isneginf(ref_lse))
        finite = np.isfinite(ref_lse)
        assert np.abs(lse[rows][finite] - ref_lse[finite]).max(initial=0.0) <= 1e-12


def test_cascade_refuses_a_bias_of_the_prefix_alone():
    q = np.zeros((3, HQ, D))
    kp = vp = np.zeros((10, HKV, D))
    k = v = np.zeros((5, HKV, D))
    with pytest.raises(kattn.Error, match=r"bias: expected \[2 or 1, 4 or 1, 2, 13\] \(the longest request's "
                                          r"queries; the prefix's keys, then the longest suffix's\), got \[2, 4, 2, 10\]"):
        kattn.cascade_attention(q, kp, vp, np.array([0, 2, 3]), kv=(k, v), kv_indptr=np.array([0, 3, 5]),
                                bias=np.zeros((2, HQ, 2, 10)))
