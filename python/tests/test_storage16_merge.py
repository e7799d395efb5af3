"""16-bit storage in merge_states and cascade_attention from NumPy (float16 arrays; PyTorch's float16
and bfloat16 tensors: test_torch16.py), under FlashAttention's rule against the float64 textbook
over the union of the keys on the same 16-bit inputs; float32 partials rounded once into a 16-bit o;
float32 queries over a 16-bit cascade; bad dtypes refused naming the argument."""
import re

import numpy as np
import pytest

import kattn
from reference import assert_16bit_rule, round16, textbook, textbook16
from test_kinds import KV_LENS, Q_LENS, pages_of, ragged_batch
from test_storage16 import expect_float32_rows, expect_rows_rule, problem16

CUTS = [0, 20, 21, 90]  # three disjoint key ranges, one of a single key


def parts_of(q, k, v, cuts=CUTS, **opt):
    """Attention of q [1, Nq, Hq, D] over each key range of k, v: o_parts [S, Nq, Hq, D] and lse_parts
    [S, Nq, Hq], of q's dtype and float32."""
    parts = [kattn.attention(q, k[:, a:b], v[:, a:b], return_lse=True, **opt) for a, b in zip(cuts, cuts[1:])]
    return np.stack([o[0] for o, _ in parts]), np.stack([lse[0].T for _, lse in parts])


def expect_merged_rule(o, lse, q, k, v, dtype="float16"):
    """o [Nq, Hq, D], lse [Nq, Hq] merged from q [1, ...] over parts of k, v, under the rule."""
    ref_o, ref_lse, _ = textbook(q, k, v)
    assert_16bit_rule(o, lse, ref_o[0], ref_lse[0].T, textbook16(q, k, v, dtype)[0])


def expect_rounded_once(o, ref, dtype, delta=1e-5):
    """Every element of o is the float64 value ref (computed in float32: within delta) rounded once
    to dtype: a second rounding (16-bit partials, a 16-bit running o) shows as elements an ulp off."""
    ref = np.asarray(ref, np.float64)
    lo, hi = round16(ref - delta, dtype), round16(ref + delta, dtype)
    o = np.asarray(o, np.float64)
    off = ~((o >= lo) & (o <= hi))
    assert not off.any(), f"{off.sum()} elements not rounded once, e.g. {o[off][:3]} for {ref[off][:3]}"


def test_float16_parts_merge_into_float16_under_the_rule():
    q, k, v = problem16((1, 9, 90, 4, 2, 16), seed=6)
    o_parts, lse_parts = parts_of(q, k, v)
    assert o_parts.dtype == np.float16 and lse_parts.dtype == np.float32
    o, lse = kattn.merge_states(o_parts, lse_parts)
    assert o.shape == (9, 4, 16) and o.dtype == np.float16 and lse.dtype == np.float32
    expect_merged_rule(o, lse, q, k, v)


def test_float32_parts_are_rounded_once_into_float16():
    # float32 queries over the float16 keys: float32 partials, merged in float32 and rounded once.
    q, k, v = problem16((1, 9, 90, 4, 2, 16), seed=7)
    o_parts, lse_parts = parts_of(q.astype(np.float32), k, v)
    assert o_parts.dtype == np.float32
    for dtype in ("float16", np.float16, np.dtype("float16")):
        o, lse = kattn.merge_states(o_parts, lse_parts, dtype=dtype)
        assert o.dtype == np.float16 and lse.dtype == np.float32
        expect_merged_rule(o, lse, q, k, v)
        expect_rounded_once(o, textbook(q, k, v)[0][0], "float16")


def test_float16_merge_takes_empty_parts_and_no_parts():
    q, k, v = problem16((1, 4, 30, 2, 2, 8), seed=8)
    o_parts, lse_parts = parts_of(q, k, v, cuts=[0, 30])
    empty_o = np.full_like(o_parts, np.nan)[:1]  # a part that saw no key has no weight, whatever its o
    empty_lse = np.full_like(lse_parts, -np.inf)[:1]
    o, lse = kattn.merge_states(np.concatenate([empty_o, o_parts]), np.concatenate([empty_lse, lse_parts]))
    expect_merged_rule(o, lse, q, k, v)
    o, lse = kattn.merge_states(o_parts[:0], lse_parts[:0])
    assert o.dtype == np.float16 and np.all(o == 0) and np.all(lse == -np.inf)


def whole_sequences(k, v, ki, kp, vp):
    """The ragged keys with the shared prefix in front of each sequence's: k, v, kv_indptr."""
    ks, vs, lens = [], [], []
    for a, b in zip(ki, ki[1:]):
        ks += [kp, k[a:b]]
        vs += [vp, v[a:b]]
        lens.append(len(kp) + b - a)
    return np.concatenate(ks), np.concatenate(vs), np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def cascade16(q, k, v, qi, ki, kp, vp, suffix, **opt):
    """kattn.cascade_attention of the ragged batch's suffix keys, ragged or in pages of 8."""
    if suffix == "ragged":
        return kattn.cascade_attention(q, kp, vp, qi, kv=(k, v), kv_indptr=ki, return_lse=True, **opt)
    cache, pi, idx, last = pages_of(k, v, ki, 8, seed=1)  # unused slots hold NaN
    return kattn.cascade_attention(q, kp, vp, qi, kv_cache=cache, kv_page_indptr=pi, kv_page_indices=idx,
                                   kv_last_page_len=last, return_lse=True, **opt)


@pytest.mark.parametrize("suffix", ["ragged", "paged"])
@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "softcap": 20.0, "scale": 0.3}])
@pytest.mark.parametrize("heads", [(4, 2), (8, 1)])
def test_float16_cascade_meets_the_rule(suffix, opt, heads):
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, *heads, 32, dtype=np.float16, seed=len(opt))
    kp, vp = np.random.default_rng(2).standard_normal((2, 23, heads[1], 32)).astype(np.float16)
    o, lse = cascade16(q, k, v, qi, ki, kp, vp, suffix, **opt)
    assert o.dtype == np.float16 and lse.dtype == np.float32 and o.shape == q.shape
    kw, vw, kiw = whole_sequences(k, v, ki, kp, vp)
    expect_rows_rule(o, lse, q, kw, vw, qi, kiw, **opt)


@pytest.mark.parametrize("suffix", ["ragged", "paged"])
def test_float32_queries_over_a_float16_cascade(suffix):
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 16, dtype=np.float16, seed=4)
    q = q.astype(np.float32)
    kp, vp = np.random.default_rng(3).standard_normal((2, 9, 2, 16)).astype(np.float16)
    o, lse = cascade16(q, k, v, qi, ki, kp, vp, suffix, causal=True)
    kw, vw, kiw = whole_sequences(k, v, ki, kp, vp)
    expect_float32_rows(o, lse, q, kw, vw, qi, kiw, causal=True)


MERGE_CASES = [
    (lambda o, lse: kattn.merge_states(o, lse.astype(np.float16)),
     "lse_parts: expected float32 (the accumulation type of a float16 o), got float16"),
    (lambda o, lse: kattn.merge_states(o.astype(np.int16), lse), "o_parts: expected float32, float64, float16 or "
     "bfloat16, got int16"),
    (lambda o, lse: kattn.merge_states(o, lse, dtype="float32"), "dtype: expected the dtype of o_parts (float16), "
     "got float32"),
    (lambda o, lse: kattn.merge_states(o.astype(np.float64), lse.astype(np.float64), dtype="bfloat16"),
     "dtype: expected the dtype of o_parts (float64), got bfloat16"),
    (lambda o, lse: kattn.merge_states(o.astype(np.float32), lse, dtype="half"),
     'dtype: expected "float32", "float64", "float16" or "bfloat16", got "half"'),
    (lambda o, lse: kattn.merge_states(o.astype(np.float32), lse, dtype=np.int8),
     'dtype: expected "float32", "float64", "float16" or "bfloat16", got "int8"'),
]


@pytest.mark.parametrize("case", range(len(MERGE_CASES)))
def test_merge_refuses_bad_dtypes_naming_the_argument(case):
    call, message = MERGE_CASES[case]
    q, k, v = problem16((1, 4, 8, 2, 1, 8), seed=1)
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(*parts_of(q, k, v, cuts=[0, 3, 8]))


CASCADE_CASES = [
    (lambda q, kp, k: (q, kp.astype(np.float32), kp, k, k), "k_prefix: expected the dtype of k (float16), got float32"),
    (lambda q, kp, k: (q, kp, kp.astype(np.float64), k, k), "v_prefix: expected the dtype of k (float16), got float64"),
    (lambda q, kp, k: (q, kp, kp, k.astype(np.float32), k), "k: expected the dtype of q (float16), got float32"),
    (lambda q, kp, k: (q, kp, kp, k, k.astype(np.float32)), "v: expected the dtype of k (float16), got float32"),
    (lambda q, kp, k: (q.astype(np.int8), kp, kp, k, k), "q: expected float32, float64, float16 or bfloat16, got int8"),
]


@pytest.mark.parametrize("case", range(len(CASCADE_CASES)))
def test_cascade_refuses_bad_dtypes_naming_the_argument(case):
    arrays, message = CASCADE_CASES[case]
    q, k, _, qi, ki = ragged_batch([2, 1], [3, 4], 2, 1, 8, dtype=np.float16, seed=0)
    q, kp, vp, k, v = arrays(q, k[:2], k)
    with pytest.raises(kattn.Error, match=re.escape(message)):
        kattn.cascade_attention(q, kp, vp, qi, kv=(k, v), kv_indptr=ki)
