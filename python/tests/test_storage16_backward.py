"""The backward in 16-bit storage from NumPy: float16 arrays and kattn's bfloat16 (the bits of a
torch.bfloat16 tensor), dense (both layouts, every mask, GQA), ragged and paged, under
FlashAttention's rule: dq, dk, dv within twice the error of the textbook backward run in the 16-bit
type, against the float64 textbook backward on the same 16-bit inputs."""
import re

import numpy as np
import pytest

import kattn
from reference import assert_16bit_grad_rule, o16_allowance, round16, textbook_backward, textbook16_backward
from test_attention import SHAPES, VARIANTS
from test_kinds import KV_LENS, MASKS, Q_LENS, pages_of, ragged_batch

DTYPES = ["float16", "bfloat16"]


def stored(x, dtype):
    """float values as an array of dtype (float16, or kattn's bfloat16 holding the rounded bits)."""
    if dtype == "float16":
        return np.asarray(x).astype(np.float16)
    bits = round16(x, "bfloat16").view(np.uint32) >> 16
    return bits.astype(np.uint16).view(kattn._kattn.bfloat16)


def values(a):
    """The float64 values of a float16 or bfloat16 array."""
    if a.dtype == kattn._kattn.bfloat16:
        return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def dense16(shape, dtype, seed):
    """q, k, v [B, N, H, D] and dout like q of unit-normal values in dtype."""
    B, Nq, Nk, Hq, Hkv, D = shape
    rng = np.random.default_rng(seed)
    return tuple(stored(rng.standard_normal(s), dtype) for s in ((B, Nq, Hq, D), (B, Nk, Hkv, D), (B, Nk, Hkv, D),
                                                                  (B, Nq, Hq, D)))


def expect_grads(grads, inputs, dtype, **opt):
    """dq, dk, dv of kattn on q, k, v, dout [B, N, H, D] in dtype: in dtype, under the rule."""
    assert all(g.dtype == inputs[0].dtype for g in grads)
    x = [values(a) for a in inputs]
    assert_16bit_grad_rule([values(g) for g in grads], textbook_backward(*x, **opt),
                           textbook16_backward(*x, dtype, **opt), o16_allowance(*x, dtype, **opt))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)  # GQA among them
@pytest.mark.parametrize("variant", range(len(VARIANTS)))  # causal, window, softcap, scale
def test_dense_backward_meets_the_rule(dtype, shape, variant):
    opt = VARIANTS[variant]
    q, k, v, dout = dense16(shape, dtype, seed=variant + 10 * shape[1])
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    assert lse.dtype == np.float32
    grads = kattn.attention_backward(q, k, v, o, lse, dout, **opt)
    expect_grads(grads, (q, k, v, dout), dtype, **opt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bhnd_layout_and_strided_views_are_read_in_place(dtype):
    opt = {"causal": True, "window": (20, -1)}
    q, k, v, dout = dense16((2, 37, 50, 4, 2, 24), dtype, seed=5)
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    grads = kattn.attention_backward(q, k, v, o, lse, dout, deterministic=True, **opt)
    expect_grads(grads, (q, k, v, dout), dtype, **opt)
    # [B, H, N, D] arrays of their own, and transposed views of the bnhd memory (not contiguous).
    for arrays in (tuple(np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v, o, dout)),
                   tuple(x.transpose(0, 2, 1, 3) for x in (q, k, v, o, dout))):
        qt, kt, vt, ot, dot = arrays
        got = kattn.attention_backward(qt, kt, vt, ot, lse, dot, layout="bhnd", deterministic=True, **opt)
        for g, want in zip(got, grads):
            assert g.dtype == want.dtype and np.array_equal(values(g).transpose(0, 2, 1, 3), values(want))
    big = np.zeros((q.shape[0], 2 * q.shape[1]) + q.shape[2:], q.dtype)  # every other row of a longer array
    big[:, ::2] = dout
    assert not big[:, ::2].flags.c_contiguous
    got = kattn.attention_backward(q, k, v, o, lse, big[:, ::2], deterministic=True, **opt)
    assert all(np.array_equal(values(g), values(want)) for g, want in zip(got, grads))


def rows16(q_lens, kv_lens, dtype, seed):
    """A ragged batch (8 query heads on 2 KV heads, head dim 16) in dtype with dout, and its float64
    values."""
    q, k, v, qi, ki = ragged_batch(q_lens, kv_lens, 8, 2, 16, seed=seed)
    dout = np.random.default_rng(seed + 1).standard_normal(q.shape)
    arrays = [stored(x, dtype) for x in (q, k, v, dout)]
    return arrays, [values(a) for a in arrays], qi, ki


def reference_rows(x, qi, ki, dtype, **opt):
    """The float64 and the 16-bit textbook backward of a ragged batch (x: q, k, v, dout values),
    sequence by sequence: (dq, dk, dv) of each, and the rule's allowance (the largest of any
    sequence)."""
    q, k, v, dout = x
    ref = [np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)]
    tb = [np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)]
    allowance = [0.0, 0.0, 0.0]
    for b in range(len(qi) - 1):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        if qi[b] == qi[b + 1] or ki[b] == ki[b + 1]:
            continue  # no query or no key: gradients 0
        one = [a[None] for a in (q[rows], k[keys], v[keys], dout[rows])]
        for out, grads in ((ref, textbook_backward(*one, **opt)), (tb, textbook16_backward(*one, dtype, **opt))):
            for o, g, at in zip(out, grads, (rows, keys, keys)):
                o[at] = g[0]
        allowance = [max(a, b) for a, b in zip(allowance, o16_allowance(*one, dtype, **opt))]
    return ref, tb, allowance


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_ragged_backward_meets_the_rule(dtype, mask):
    opt = MASKS[mask]
    (q, k, v, dout), x, qi, ki = rows16(Q_LENS, KV_LENS, dtype, seed=mask)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, return_lse=True, **opt)
    grads = kattn.ragged_attention_backward(q, k, v, o, lse, dout, qi, ki, block_q=8, block_k=8, **opt)
    assert all(g.dtype == q.dtype for g in grads)
    assert_16bit_grad_rule([values(g) for g in grads], *reference_rows(x, qi, ki, dtype, **opt))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_paged_backward_meets_the_rule_and_zeroes_unused_slots(dtype, page_size, mask):
    opt = MASKS[mask]
    (q, k, v, dout), x, qi, ki = rows16(Q_LENS, KV_LENS, dtype, seed=page_size + mask)
    (kp, vp), pi, idx, last = pages_of(x[1], x[2], ki, page_size, seed=mask)  # unused slots hold NaN
    cache = (stored(kp, dtype), stored(vp, dtype))
    o, lse = kattn.paged_attention(q, cache, qi, pi, idx, last, return_lse=True, **opt)
    dq, dk_pages, dv_pages = kattn.paged_attention_backward(q, cache, o, lse, dout, qi, pi, idx, last, **opt)
    assert dk_pages.shape == kp.shape and dk_pages.dtype == q.dtype
    # The gradients of the keys, gathered back from the pages in ragged order.
    order = [(idx[p], s) for b in range(len(ki) - 1) for p in range(pi[b], pi[b + 1])
             for s in range(page_size if p + 1 < pi[b + 1] else last[b])]
    dk = np.array([values(dk_pages)[p, s] for p, s in order]).reshape(k.shape)
    dv = np.array([values(dv_pages)[p, s] for p, s in order]).reshape(v.shape)
    assert_16bit_grad_rule([values(dq), dk, dv], *reference_rows(x, qi, ki, dtype, **opt))
    used = np.zeros(dk_pages.shape[:2], bool)
    for p, s in order:
        used[p, s] = True
    assert np.all(values(dk_pages)[~used] == 0.0) and np.all(values(dv_pages)[~used] == 0.0)
    # FlashInfer's other form: one [pages, 2, page_size, Hkv, D] array, read in place.
    combined = np.stack(cache, axis=1)
    again = kattn.paged_attention_backward(q, combined, o, lse, dout, qi, pi, idx, last, deterministic=True, **opt)
    once = kattn.paged_attention_backward(q, cache, o, lse, dout, qi, pi, idx, last, deterministic=True, **opt)
    assert all(np.array_equal(values(a), values(b)) for a, b in zip(again, once))


SMALL = (1, 8, 8, 4, 2, 16)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v, o, lse, dout: kattn.attention_backward(q.astype(np.float32), k, v, o, lse, dout),
         "k: expected the dtype of q (float32), got float16 (float32 queries over a 16-bit cache have no backward"),
        (lambda q, k, v, o, lse, dout: kattn.attention_backward(q, k, v.astype(np.float32), o, lse, dout),
         "v: expected the dtype of q (float16), got float32"),
        (lambda q, k, v, o, lse, dout: kattn.attention_backward(q, k, v, o.astype(np.float32), lse, dout),
         "o: expected the dtype of q (float16), got float32"),
        (lambda q, k, v, o, lse, dout: kattn.attention_backward(q, k, v, o, lse, stored(dout, "bfloat16")),
         "dout: expected the dtype of q (float16), got bfloat16"),
        (lambda q, k, v, o, lse, dout: kattn.attention_backward(q, k, v, o, lse.astype(np.float16), dout),
         "lse: expected float32 (the forward's lse for float16 q), got float16"),
        (lambda q, k, v, o, lse, dout: kattn.attention_backward(q, k, v, o, lse[:, :1], dout), "lse"),
        (lambda q, k, v, o, lse, dout: kattn.ragged_attention_backward(q[0], k[0], v[0], o[0], lse[0].T,
                                                                       dout[0].astype(np.float32), [0, 8], [0, 8]),
         "dout: expected the dtype of q (float16), got float32"),
        (lambda q, k, v, o, lse, dout: kattn.paged_attention_backward(q[0].astype(np.float32), (k, v), o[0],
                                                                      lse[0].T, dout[0], [0, 8], [0, 1], [0], [8]),
         "k: expected the dtype of q (float32), got float16 (float32 queries over a 16-bit cache have no backward"),
    ],
)
def test_bad_16bit_backward_input_raises_naming_the_argument(call, message):
    q, k, v, dout = dense16(SMALL, "float16", seed=1)
    o, lse = kattn.attention(q, k, v, return_lse=True)
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(q, k, v, o, lse, dout)
