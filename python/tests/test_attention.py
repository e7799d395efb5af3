"""kattn.attention and kattn.attention_backward against the float64 textbook in NumPy."""
import re

import numpy as np
import pytest

import kattn
from reference import rel_err, textbook, textbook_backward


SHAPES = [(1, 1, 1, 1, 1, 8), (2, 33, 40, 4, 2, 16), (1, 1, 300, 8, 1, 32), (1, 70, 70, 2, 2, 64), (2, 5, 3, 6, 3, 8)]
VARIANTS = [
    {},
    {"causal": True},
    {"window": (9, 4)},
    {"causal": True, "window": (20, -1)},
    {"softcap": 2.5, "scale": 0.4},
    {"causal": True, "softcap": 30.0},
]


def problem(shape, dtype, seed):
    B, Nq, Nk, Hq, Hkv, D = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Nq, Hq, D)).astype(dtype)
    k = rng.standard_normal((B, Nk, Hkv, D)).astype(dtype)
    v = rng.standard_normal((B, Nk, Hkv, D)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_forward_float64_matches_the_textbook(shape, variant):
    opt = VARIANTS[variant]
    q, k, v = problem(shape, np.float64, seed=variant + 10 * shape[1])
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    ref_o, ref_lse, _ = textbook(q, k, v, **opt)
    assert o.shape == q.shape[:3] + (v.shape[3],) and o.dtype == np.float64
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert rel_err(o, ref_o) <= 1e-12
    assert rel_err(lse, ref_lse) <= 1e-12


@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_forward_float32(variant):
    opt = VARIANTS[variant]
    q, k, v = problem((2, 65, 130, 4, 2, 64), np.float32, seed=variant)
    o = kattn.attention(q, k, v, **opt)
    assert o.dtype == np.float32
    assert rel_err(o, textbook(q, k, v, **opt)[0]) <= 2e-5


def test_rows_that_see_no_key_get_zero_and_minus_infinity():
    # Causal with more queries than keys: the first Nq - Nk rows see nothing.
    q, k, v = problem((1, 10, 4, 2, 1, 8), np.float64, seed=3)
    o, lse = kattn.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(o[:, :6] == 0.0)
    assert np.all(lse[:, :, :6] == -np.inf)
    assert rel_err(o, textbook(q, k, v, causal=True)[0]) <= 1e-12


def test_bhnd_layout_and_strided_views_are_read_in_place():
    q, k, v = problem((2, 37, 50, 4, 2, 16), np.float64, seed=5)
    ref = kattn.attention(q, k, v, causal=True)
    # [B, H, N, D] arrays (here: transposed views of the same memory, so not C-contiguous).
    qt, kt, vt = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    ot = kattn.attention(qt, kt, vt, causal=True, layout="bhnd")
    assert ot.shape == qt.shape
    assert np.array_equal(ot.transpose(0, 2, 1, 3), ref)
    # Every other position of a longer array: a strided view, read in place.
    big_q = np.full((q.shape[0], 2 * q.shape[1]) + q.shape[2:], np.nan)
    big_q[:, ::2] = q
    assert not big_q[:, ::2].flags.c_contiguous
    assert np.array_equal(kattn.attention(big_q[:, ::2], k, v, causal=True), ref)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1, 4), (2, 33, 40, 4, 2, 16), (1, 20, 20, 6, 3, 8)])
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_backward_float64_matches_the_textbook(shape, variant):
    opt = VARIANTS[variant]
    q, k, v = problem(shape, np.float64, seed=100 + variant)
    dout = np.random.default_rng(variant).standard_normal(q.shape)
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    dq, dk, dv = kattn.attention_backward(q, k, v, o, lse, dout, **opt)
    ref = textbook_backward(q, k, v, dout, **opt)
    for got, want in zip((dq, dk, dv), ref):
        assert got.shape == want.shape
        assert rel_err(got, want) <= 1e-10


def test_backward_deterministic_is_bitwise_repeatable():
    q, k, v = problem((1, 64, 64, 4, 1, 16), np.float64, seed=9)
    dout = np.ones_like(q)
    o, lse = kattn.attention(q, k, v, causal=True, return_lse=True)
    a = kattn.attention_backward(q, k, v, o, lse, dout, causal=True, deterministic=True)
    b = kattn.attention_backward(q, k, v, o, lse, dout, causal=True, deterministic=True)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v: kattn.attention(q, k[..., :8], v), "k: expected head dim 16 (from q), got 8"),
        (lambda q, k, v: kattn.attention(q.astype(np.int64), k, v), "q: expected float32, float64, float16 or bfloat16, got int64"),
        (lambda q, k, v: kattn.attention(q, k.astype(np.float32), v), "k: expected the dtype of q"),
        (lambda q, k, v: kattn.attention(q[0], k, v), "q: expected a rank-4 array"),
        (lambda q, k, v: kattn.attention(q, k, v, layout="nhbd"), "layout: expected"),
        (lambda q, k, v: kattn.attention(q, k, v, window=(-5, 0)), "window:"),
        (lambda q, k, v: kattn.attention(q, k, v, window=(1, 2, 3)), "window: expected (left, right)"),
        (lambda q, k, v: kattn.attention(q, k, v, softcap=-1.0), "softcap"),
        (lambda q, k, v: kattn.attention(q, k, v, scale=0.0), "scale: expected a non-zero value"),
        (lambda q, k, v: kattn.attention(q[..., ::2], k[..., ::2], v[..., ::2]), "head dim"),
        (lambda q, k, v: kattn.attention(q[:, :, :3], k, v), "q:"),
    ],
)
def test_bad_input_raises_kattn_error_naming_the_argument(call, message):
    q, k, v = problem((1, 8, 8, 4, 2, 16), np.float64, seed=1)
    with pytest.raises(kattn.Error, match=re.escape(message)) as e:
        call(q, k, v)
    assert isinstance(e.value, ValueError)


def test_backward_refuses_an_lse_of_the_wrong_shape():
    q, k, v = problem((1, 8, 8, 2, 1, 8), np.float64, seed=2)
    o, lse = kattn.attention(q, k, v, return_lse=True)
    with pytest.raises(kattn.Error, match="lse"):
        kattn.attention_backward(q, k, v, o, lse.transpose(0, 2, 1).copy(), np.ones_like(o))


@pytest.mark.parametrize("batch, nq, nk", [(0, 4, 4), (1, 0, 4), (1, 3, 0)])
def test_empty_problems(batch, nq, nk):
    q, k, v = problem((batch, nq, nk, 2, 1, 8), np.float64, seed=4)
    o, lse = kattn.attention(q, k, v, return_lse=True)
    assert o.shape == q.shape and lse.shape == (batch, 2, nq)
    assert np.all(o == 0.0) and np.all(lse == -np.inf)  # no key: o = 0, lse = -inf


def test_version():
    assert kattn.version().count(".") == 2
    assert "kokkos" in kattn.build_info()


def test_merge_states_of_key_splits_is_attention_over_all_keys():
    # Attention over three disjoint key ranges (the split-KV or cascade parts), merged: [S, N, H, D].
    q, k, v = problem((1, 9, 90, 4, 2, 16), np.float64, seed=6)
    cuts = [0, 20, 21, 90]  # one part of a single key
    parts = [kattn.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in zip(cuts, cuts[1:])]
    o_parts = np.stack([o[0] for o, _ in parts])  # [S, Nq, Hq, D] for batch 0
    lse_parts = np.stack([lse[0].T for _, lse in parts])  # [S, Nq, Hq]
    o, lse = kattn.merge_states(o_parts, lse_parts)
    ref_o, ref_lse, _ = textbook(q, k, v)
    assert o.shape == (9, 4, 16) and lse.shape == (9, 4)
    assert rel_err(o, ref_o[0]) <= 1e-12
    assert rel_err(lse, ref_lse[0].T) <= 1e-12


def test_merge_states_propagates_nan_and_takes_empty_parts():
    o_parts = np.zeros((2, 1, 1, 4))
    lse_parts = np.array([[[0.0]], [[-np.inf]]])  # part 1 saw no key: it adds nothing
    o_parts[0] = 1.0
    o, lse = kattn.merge_states(o_parts, lse_parts)
    assert np.all(o == 1.0) and lse[0, 0] == 0.0
    o_parts[0, 0, 0, 2] = np.nan
    o, _ = kattn.merge_states(o_parts, lse_parts)
    assert np.isnan(o[0, 0, 2]) and np.all(o[0, 0, [0, 1, 3]] == 1.0)


def test_merge_states_refuses_mismatched_parts():
    with pytest.raises(kattn.Error, match="lse_parts"):
        kattn.merge_states(np.zeros((2, 3, 4, 8)), np.zeros((3, 3, 4)))
    with pytest.raises(kattn.Error, match=re.escape("lse_parts: expected float64 (the accumulation type of a float64")):
        kattn.merge_states(np.zeros((2, 3, 4, 8)), np.zeros((2, 3, 4), np.float32))
