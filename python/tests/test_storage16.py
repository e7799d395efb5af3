"""16-bit storage from NumPy: float16 arrays in the forward calls (dense, ragged, paged, decode) and
float32 queries over a float16 cache, under FlashAttention's accuracy rule against the float64
textbook on the same float16 inputs. The backward: test_storage16_backward.py; merge and cascade:
test_storage16_merge.py."""
import re

import numpy as np
import pytest

import kattn
from reference import assert_16bit_rule, rel_err, textbook, textbook16
from test_attention import SHAPES, VARIANTS
from test_kinds import KV_LENS, MASKS, Q_LENS, pages_of, ragged_batch, textbook_rows


def problem16(shape, seed):
    B, Nq, Nk, Hq, Hkv, D = shape
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float16) for s in ((B, Nq, Hq, D), (B, Nk, Hkv, D), (B, Nk, Hkv, D)))


def expect_dense_rule(o, lse, q, k, v, **opt):
    """o [B, Nq, Hq, D] and lse [B, Hq, Nq] of kattn on float16 q, k, v, under the rule."""
    assert o.dtype == np.float16 and lse.dtype == np.float32
    ref_o, ref_lse, _ = textbook(q, k, v, **opt)
    assert_16bit_rule(o, lse, ref_o, ref_lse, textbook16(q, k, v, "float16", **opt))


@pytest.mark.parametrize("shape", SHAPES)  # GQA among them
@pytest.mark.parametrize("variant", range(len(VARIANTS)))  # causal, window, softcap, scale
def test_float16_dense_meets_the_rule(shape, variant):
    opt = VARIANTS[variant]
    q, k, v = problem16(shape, seed=variant + 10 * shape[1])
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    expect_dense_rule(o, lse, q, k, v, **opt)


@pytest.mark.parametrize("splits", [0, 1, 7, 400])  # 400: more splits than keys
def test_float16_split_kv_meets_the_rule(splits):
    q, k, v = problem16((2, 1, 300, 8, 2, 64), seed=splits)
    o, lse = kattn.attention(q, k, v, return_lse=True, splits=splits)
    expect_dense_rule(o, lse, q, k, v)


def test_float16_bhnd_layout_and_strided_views_are_read_in_place():
    q, k, v = problem16((2, 37, 50, 4, 2, 24), seed=5)
    o, lse = kattn.attention(q, k, v, causal=True, window=(20, -1), return_lse=True)
    expect_dense_rule(o, lse, q, k, v, causal=True, window=(20, -1))
    # [B, H, N, D] arrays of their own, and transposed views of the bnhd memory (not contiguous).
    for qt, kt, vt in (tuple(np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)),
                       tuple(x.transpose(0, 2, 1, 3) for x in (q, k, v))):
        ot, lset = kattn.attention(qt, kt, vt, causal=True, window=(20, -1), layout="bhnd", return_lse=True)
        assert ot.shape == qt.shape and ot.dtype == np.float16
        assert np.array_equal(ot.transpose(0, 2, 1, 3), o) and np.array_equal(lset, lse)
    big_q = np.full((q.shape[0], 2 * q.shape[1]) + q.shape[2:], np.nan, np.float16)
    big_q[:, ::2] = q
    assert not big_q[:, ::2].flags.c_contiguous
    assert np.array_equal(kattn.attention(big_q[:, ::2], k, v, causal=True, window=(20, -1)), o)


def textbook16_rows(q, k, v, dtype, **opt):
    """The textbook's o [n, Hq, D] in a 16-bit dtype, of one sequence's rows (keys may be none)."""
    if k.shape[0] == 0 or q.shape[0] == 0:
        return np.zeros(q.shape[:2] + (v.shape[2],))
    return textbook16(q[None], k[None], v[None], dtype, **opt)[0]


def expect_rows_rule(o, lse, q, k, v, qi, ki, dtype="float16", **opt):
    """Ragged o [total_q, Hq, D], lse [total_q, Hq] of kattn on q, k, v in dtype under the rule,
    taken over every sequence's rows (q, k, v: the 16-bit values, any NumPy float type)."""
    ref_o, ref_lse, tb_o = np.zeros(o.shape), np.zeros(lse.shape), np.zeros(o.shape)
    for b in range(len(qi) - 1):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o[rows], ref_lse[rows] = textbook_rows(q[rows], k[keys], v[keys], **opt)
        tb_o[rows] = textbook16_rows(q[rows], k[keys], v[keys], dtype, **opt)
    assert_16bit_rule(o, lse, ref_o, ref_lse, tb_o)


@pytest.mark.parametrize("mask", range(len(MASKS)))
@pytest.mark.parametrize("heads", [(4, 2), (8, 1)])
@pytest.mark.parametrize("splits", [0, 3])
def test_float16_ragged_meets_the_rule(mask, heads, splits):
    opt = MASKS[mask]
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, *heads, 32, dtype=np.float16, seed=mask)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, return_lse=True, splits=splits, **opt)
    assert o.dtype == np.float16 and lse.dtype == np.float32
    expect_rows_rule(o, lse, q, k, v, qi, ki, **opt)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_float16_paged_meets_the_rule_in_both_cache_forms(page_size, mask):
    opt = MASKS[mask]
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 16, dtype=np.float16, seed=page_size)
    cache, pi, idx, last = pages_of(k, v, ki, page_size, seed=mask)  # unused slots hold NaN
    assert cache[0].dtype == np.float16
    o, lse = kattn.paged_attention(q, cache, qi, pi, idx, last, return_lse=True, **opt)
    assert o.dtype == np.float16 and lse.dtype == np.float32
    expect_rows_rule(o, lse, q, k, v, qi, ki, **opt)
    combined = np.stack(cache, axis=1)  # [pages, 2, page_size, Hkv, D], read in place
    assert np.array_equal(kattn.paged_attention(q, combined, qi, pi, idx, last, **opt), o)


@pytest.mark.parametrize("splits", [0, 1, 5])
def test_float16_decode_meets_the_rule(splits):
    q, k, v, qi, ki = ragged_batch([1] * 4, [700, 1, 0, 77], 8, 2, 64, dtype=np.float16, seed=splits)
    cache, pi, idx, last = pages_of(k, v, ki, 16, seed=splits)
    o, lse = kattn.decode(q, cache, pi, idx, last, return_lse=True, splits=splits)
    assert o.shape == q.shape and o.dtype == np.float16
    expect_rows_rule(o, lse, q, k, v, qi, ki)


def expect_float32_rows(o, lse, q, k, v, qi, ki, **opt):
    """o, lse of float32 queries over 16-bit keys: computed in float32, so within float32's bound
    of the float64 textbook on the same (16-bit) keys and values."""
    assert o.dtype == np.float32 and lse.dtype == np.float32
    for b in range(len(qi) - 1):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o, ref_lse = textbook_rows(q[rows], k[keys], v[keys], **opt)
        assert rel_err(o[rows], ref_o) <= 2e-5
        assert rel_err(lse[rows], ref_lse) <= 2e-5


@pytest.mark.parametrize("splits", [0, 4])
def test_float32_decode_over_a_float16_cache_in_both_forms(splits):
    _, k, v, qi, ki = ragged_batch([1] * 4, [300, 1, 0, 77], 8, 2, 64, dtype=np.float16, seed=splits)
    q = np.random.default_rng(splits).standard_normal((4, 8, 64)).astype(np.float32)
    cache, pi, idx, last = pages_of(k, v, ki, 16, seed=splits)
    for kv_cache in (cache, np.stack(cache, axis=1)):
        o, lse = kattn.decode(q, kv_cache, pi, idx, last, return_lse=True, splits=splits)
        expect_float32_rows(o, lse, q, k, v, qi, ki)


def test_float32_queries_over_float16_dense_ragged_and_paged_keys():
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 32, dtype=np.float16, seed=3)
    q = q.astype(np.float32)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, causal=True, return_lse=True)
    expect_float32_rows(o, lse, q, k, v, qi, ki, causal=True)
    cache, pi, idx, last = pages_of(k, v, ki, 8, seed=3)
    o, lse = kattn.paged_attention(q, cache, qi, pi, idx, last, causal=True, return_lse=True)
    expect_float32_rows(o, lse, q, k, v, qi, ki, causal=True)
    qd = np.random.default_rng(1).standard_normal((2, 9, 4, 32)).astype(np.float32)
    _, kd, vd = problem16((2, 9, 40, 4, 2, 32), seed=1)
    od, lsed = kattn.attention(qd, kd, vd, causal=True, return_lse=True)
    ref_o, ref_lse, _ = textbook(qd, kd, vd, causal=True)
    assert od.dtype == np.float32 and rel_err(od, ref_o) <= 2e-5 and rel_err(lsed, ref_lse) <= 2e-5


def test_plan_takes_the_16bit_dtypes():
    for dtype in ("float16", "bfloat16"):
        assert kattn.plan(1, 1, 65536, 8, 8, 128, dtype=dtype, processors=64) == \
            kattn.plan(1, 1, 65536, 8, 8, 128, dtype="float32", processors=64)


SMALL = (1, 8, 8, 4, 2, 16)
MIXED_K = "k: expected the dtype of q (float32), or float16 or bfloat16 (a 16-bit cache under float32 queries), got "


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v: kattn.attention(q.astype(np.int8), k, v),
         "q: expected float32, float64, float16 or bfloat16, got int8"),
        (lambda q, k, v: kattn.attention(q.astype(np.float32), k.astype(np.float64), v), MIXED_K + "float64"),
        (lambda q, k, v: kattn.attention(q.astype(np.float64), k, v),
         "k: expected the dtype of q (float64), got float16"),
        (lambda q, k, v: kattn.attention(q, k.astype(np.float32), v),
         "k: expected the dtype of q (float16), got float32"),
        (lambda q, k, v: kattn.attention(q.astype(np.float32), k, v.astype(np.float32)),
         "v: expected the dtype of k (float16), got float32"),
        (lambda q, k, v: kattn.attention(q[..., ::2], k[..., ::2], v[..., ::2]), "head dim"),
    ],
)
def test_bad_16bit_input_raises_naming_the_argument(call, message):
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(*problem16(SMALL, seed=1))
