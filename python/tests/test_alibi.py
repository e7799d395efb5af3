"""ALiBi (alibi_slopes=, one slope per query head: each score gains -slope * |i + Nk - Nq - j|) in
the NumPy-level calls against the float64 textbook with the same bias (dense forward and backward,
ragged, paged and cascade per sequence, flash-attn's call), kattn.torch's autograd against PyTorch's
autograd of the textbook, and the refusals."""

import numpy as np
import pytest

import kattn
from reference import (assert_attention_matches_textbook, dense_qkv, rel_err, textbook, textbook_backward,
                       torch_textbook)
from test_kinds import KV_LENS, Q_LENS, pages_of, ragged_batch

VARIANTS = [{}, {"causal": True}, {"window": (3, 1)}, {"softcap": 2.0, "scale": 0.3},
            {"causal": True, "sinks": [0.5, -1.0, 2.0, 0.0]}]
SHAPES = [(2, 7, 9, 4, 2, 8), (1, 12, 5, 4, 4, 16), (2, 1, 30, 4, 1, 16)]


def slopes_for(hq, seed=0):
    return np.random.default_rng(200 + seed).uniform(0.0, 0.8, hq)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("splits", [0, 1, 3])
def test_forward_float64_matches_the_textbook(variant, shape, splits):
    assert_attention_matches_textbook(shape, seed=splits, splits=splits, alibi_slopes=slopes_for(shape[3], splits),
                                      **variant)


@pytest.mark.parametrize("variant", VARIANTS[:4])
def test_backward_float64_matches_the_textbook(variant):
    q, k, v = dense_qkv(SHAPES[0], seed=5)
    dout = np.random.default_rng(6).standard_normal(q.shape)
    slopes = slopes_for(4, 5)
    o, lse = kattn.attention(q, k, v, alibi_slopes=slopes, return_lse=True, **variant)
    grads = kattn.attention_backward(q, k, v, o, lse, dout, alibi_slopes=slopes, **variant)
    for got, want in zip(grads, textbook_backward(q, k, v, dout, alibi_slopes=slopes, **variant)):
        assert rel_err(got, want) <= 1e-10


def test_ragged_and_paged_match_the_textbook_per_sequence():
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 16, seed=1)
    slopes = slopes_for(4, 1)
    pages, pi, idx, last = pages_of(k, v, ki, 8, seed=1)
    for o in (kattn.ragged_attention(q, k, v, qi, ki, causal=True, alibi_slopes=slopes),
              kattn.paged_attention(q, pages, qi, pi, idx, last, causal=True, alibi_slopes=slopes)):
        for b in range(len(qi) - 1):
            rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
            ref, _, _ = textbook(q[None, rows], k[None, keys], v[None, keys], causal=True, alibi_slopes=slopes)
            assert rel_err(o[rows], ref[0]) <= 1e-12


@pytest.mark.parametrize("suffix", ["ragged", "paged"])
@pytest.mark.parametrize("variant", [{}, {"causal": True}, {"causal": True, "softcap": 2.0, "scale": 0.3,
                                                             "sinks": [0.5, -1.0, 2.0, 0.0]}])
def test_cascade_measures_each_request_over_its_prefix_and_suffix(suffix, variant):
    """A prefix key's distance depends on the request's suffix length: the cascade equals the
    textbook over each request's own prefix + suffix."""
    q_lens, suffix_lens = [3, 0, 1, 5, 2], [40, 7, 0, 130, 1]
    q, k, v, qi, ki = ragged_batch(q_lens, suffix_lens, 4, 2, 16, seed=7)
    rng = np.random.default_rng(8)
    kp, vp = (rng.standard_normal((23, 2, 16)) for _ in range(2))
    slopes = slopes_for(4, 7)
    if suffix == "ragged":
        keys = dict(kv=(k, v), kv_indptr=ki)
    else:
        pages, pi, idx, last = pages_of(k, v, ki, 8, seed=7)
        keys = dict(kv_cache=pages, kv_page_indptr=pi, kv_page_indices=idx, kv_last_page_len=last)
    o, lse = kattn.cascade_attention(q, kp, vp, qi, alibi_slopes=slopes, return_lse=True, **keys, **variant)
    for b in range(len(q_lens)):
        rows, own = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        whole = [np.concatenate([p, x[own]])[None] for p, x in ((kp, k), (vp, v))]
        ref_o, ref_lse, _ = textbook(q[None, rows], *whole, alibi_slopes=slopes, **variant)
        assert rel_err(o[rows], ref_o[0]) <= 1e-12
        assert rel_err(lse[rows], ref_lse[0].T) <= 1e-12


def test_flash_attn_func_takes_flash_attn_slopes():
    q, k, v = dense_qkv((1, 6, 10, 2, 1, 8), seed=2)
    slopes = np.array([0.25, 0.0625], np.float32)  # flash-attn's are float32
    o = kattn.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    ref, _, _ = textbook(q, k, v, causal=True, alibi_slopes=slopes)
    assert rel_err(o, ref) <= 1e-12


@pytest.mark.parametrize("slopes, message", [
    ([0.5, 0.25], "alibi_slopes: expected one slope per query head (4), got 2"),
    ([0.5, np.nan, 0.1, 0.2], "alibi_slopes: expected finite slopes, got nan"),
    ("steep", "alibi_slopes: expected one slope per query head (floats)"),
])
def test_bad_slopes_are_refused_naming_them(slopes, message):
    q, k, v = dense_qkv(SHAPES[0])
    with pytest.raises(kattn.Error, match=message.replace("(", r"\(").replace(")", r"\)")):
        kattn.attention(q, k, v, alibi_slopes=slopes)


# ---- PyTorch tensors: kattn.torch.attention and flash_attn_func with autograd

@pytest.mark.parametrize("variant", [{}, {"causal": True}, {"causal": True, "softcap": 3.0}])
def test_torch_gradients_match_autograd_of_the_textbook(variant):
    torch = pytest.importorskip("torch")
    import kattn.torch  # noqa: F401  (needs PyTorch)

    q, k, v = (torch.from_numpy(x.transpose(0, 2, 1, 3).copy()) for x in dense_qkv((2, 9, 13, 4, 2, 8), seed=7))
    slopes = slopes_for(4, 7)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = torch_textbook(*ref_leaves, alibi_slopes=slopes, **variant)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = kattn.torch.attention(*leaves, layout="bhnd", alibi_slopes=torch.from_numpy(slopes), **variant)
    assert rel_err(o.detach().numpy(), ref.detach().numpy()) <= 1e-12
    dout = torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(8))
    (o * dout).sum().backward()
    (ref * dout).sum().backward()
    for got, want in zip(leaves, ref_leaves):
        assert rel_err(got.grad.numpy(), want.grad.numpy()) <= 1e-10


def test_flash_attn_func_on_tensors_takes_the_slopes():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in dense_qkv((1, 6, 10, 2, 1, 8), seed=3))
    slopes = torch.tensor([0.25, 0.0625], dtype=torch.float32)
    o = kattn.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes)
    ref, _, _ = textbook(q.numpy(), k.numpy(), v.numpy(), causal=True, alibi_slopes=slopes.numpy())
    assert rel_err(o.numpy(), ref) <= 1e-12


def test_slopes_that_require_grad_are_refused():
    torch = pytest.importorskip("torch")
    import kattn.torch  # noqa: F401  (needs PyTorch)

    q, k, v = (torch.from_numpy(x.transpose(0, 2, 1, 3).copy()) for x in dense_qkv(SHAPES[0]))
    with pytest.raises(kattn.Error, match="alibi_slopes"):
        kattn.torch.attention(q, k, v, layout="bhnd", alibi_slopes=torch.ones(4, requires_grad=True))
