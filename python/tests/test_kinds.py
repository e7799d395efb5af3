"""Ragged batches, paged caches, decode and the planner against the float64 textbook, one
sequence at a time."""
import re

import numpy as np
import pytest

import kattn
from reference import rel_err, textbook, textbook_backward

MASKS = [{}, {"causal": True}, {"window": (5, 2)}, {"causal": True, "softcap": 20.0}]


def textbook_rows(q, k, v, **opt):
    """o [n, Hq, D], lse [n, Hq] of one sequence's rows (keys may be none)."""
    if k.shape[0] == 0 or q.shape[0] == 0:
        return np.zeros(q.shape[:2] + (v.shape[2],)), np.full(q.shape[:2], -np.inf)
    o, lse, _ = textbook(q[None], k[None], v[None], **opt)
    return o[0], lse[0].T


def textbook_rows_backward(q, k, v, dout, **opt):
    if k.shape[0] == 0 or q.shape[0] == 0:
        return np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    return (g[0] for g in textbook_backward(q[None], k[None], v[None], dout[None], **opt))


def ragged_batch(q_lens, kv_lens, hq, hkv, d, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    q_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int64)
    kv_indptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int64)
    q = rng.standard_normal((q_indptr[-1], hq, d)).astype(dtype)
    k = rng.standard_normal((kv_indptr[-1], hkv, d)).astype(dtype)
    v = rng.standard_normal((kv_indptr[-1], hkv, d)).astype(dtype)
    return q, k, v, q_indptr, kv_indptr


def pages_of(k, v, kv_indptr, page_size, seed):
    """The ragged keys laid out in shuffled pages (one spare page left unused):
    (k_pages, v_pages), kv_page_indptr, kv_page_indices, kv_last_page_len."""
    rng = np.random.default_rng(seed)
    counts = [-(-(b - a) // page_size) for a, b in zip(kv_indptr, kv_indptr[1:])]
    total = sum(counts) + 1
    slots = rng.permutation(total)
    kp = np.full((total, page_size) + k.shape[1:], np.nan)  # unused slots hold NaN: they must not be read
    vp = np.full((total, page_size) + v.shape[1:], np.nan)
    indices, last, used = [], [], 0
    for b, (a, e) in enumerate(zip(kv_indptr, kv_indptr[1:])):
        for p in range(counts[b]):
            page = slots[used]
            used += 1
            lo, hi = a + p * page_size, min(a + (p + 1) * page_size, e)
            kp[page, : hi - lo], vp[page, : hi - lo] = k[lo:hi], v[lo:hi]
            indices.append(page)
        last.append(0 if counts[b] == 0 else (e - a) - (counts[b] - 1) * page_size)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return (kp.astype(k.dtype), vp.astype(v.dtype)), indptr, np.array(indices, np.int64), np.array(last, np.int64)


Q_LENS, KV_LENS = [3, 0, 1, 17, 5], [40, 7, 0, 17, 130]  # empty queries, empty keys, decode, prefill


@pytest.mark.parametrize("mask", range(len(MASKS)))
@pytest.mark.parametrize("heads", [(4, 2), (3, 3), (8, 1)])
@pytest.mark.parametrize("splits", [0, 3, 200])  # 200: more splits than any sequence has keys
def test_ragged_forward_matches_the_textbook_per_sequence(mask, heads, splits):
    opt = MASKS[mask]
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, *heads, 16, seed=mask)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, return_lse=True, splits=splits, **opt)
    assert o.shape == q.shape and lse.shape == q.shape[:2]
    for b in range(len(Q_LENS)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o, ref_lse = textbook_rows(q[rows], k[keys], v[keys], **opt)
        assert rel_err(o[rows], ref_o) <= 1e-12
        assert rel_err(lse[rows], ref_lse) <= 1e-12


@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_ragged_backward_matches_the_textbook_per_sequence(mask):
    opt = MASKS[mask]
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 8, seed=20 + mask)
    dout = np.random.default_rng(mask).standard_normal(q.shape)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, return_lse=True, **opt)
    dq, dk, dv = kattn.ragged_attention_backward(q, k, v, o, lse, dout, qi, ki, block_q=8, block_k=8, **opt)
    for b in range(len(Q_LENS)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref = textbook_rows_backward(q[rows], k[keys], v[keys], dout[rows], **opt)
        for got, want in zip((dq[rows], dk[keys], dv[keys]), ref):
            assert rel_err(got, want) <= 1e-10


@pytest.mark.parametrize("page_size", [1, 3, 16])
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_paged_forward_equals_ragged_on_the_same_keys(page_size, mask):
    opt = MASKS[mask]
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 16, seed=page_size)
    cache, pi, idx, last = pages_of(k, v, ki, page_size, seed=mask)
    o, lse = kattn.paged_attention(q, cache, qi, pi, idx, last, return_lse=True, **opt)
    for b in range(len(Q_LENS)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o, ref_lse = textbook_rows(q[rows], k[keys], v[keys], **opt)
        assert rel_err(o[rows], ref_o) <= 1e-12
        assert rel_err(lse[rows], ref_lse) <= 1e-12
    # FlashInfer's other form: one [pages, 2, page_size, Hkv, D] array, read in place.
    combined = np.stack(cache, axis=1)
    assert np.array_equal(kattn.paged_attention(q, combined, qi, pi, idx, last, **opt), o)


def test_paged_backward_matches_the_textbook_and_zeroes_unused_slots():
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 8, seed=7)
    cache, pi, idx, last = pages_of(k, v, ki, 4, seed=3)
    dout = np.random.default_rng(1).standard_normal(q.shape)
    o, lse = kattn.paged_attention(q, cache, qi, pi, idx, last, return_lse=True, causal=True)
    dq, dk_pages, dv_pages = kattn.paged_attention_backward(q, cache, o, lse, dout, qi, pi, idx, last, causal=True)
    assert dk_pages.shape == cache[0].shape
    # The gradients of the keys, gathered back from the pages in ragged order.
    order = [(idx[p], s) for b in range(len(KV_LENS)) for p in range(pi[b], pi[b + 1])
             for s in range(4 if p + 1 < pi[b + 1] else last[b])]
    dk = np.array([dk_pages[p, s] for p, s in order]).reshape(k.shape)
    dv = np.array([dv_pages[p, s] for p, s in order]).reshape(v.shape)
    for b in range(len(Q_LENS)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref = textbook_rows_backward(q[rows], k[keys], v[keys], dout[rows], causal=True)
        for got, want in zip((dq[rows], dk[keys], dv[keys]), ref):
            assert rel_err(got, want) <= 1e-10
    used = np.zeros(dk_pages.shape[:2], bool)
    for p, s in order:
        used[p, s] = True
    assert np.all(dk_pages[~used] == 0.0) and np.all(dv_pages[~used] == 0.0)


def test_paged_backward_refuses_a_shared_page():
    q, k, v, qi, ki = ragged_batch([1, 1], [4, 4], 2, 1, 8, seed=2)
    cache, pi, idx, last = pages_of(k, v, ki, 4, seed=0)
    idx[1] = idx[0]  # both sequences read one page: the forward may, the backward may not
    o, lse = kattn.paged_attention(q, cache, qi, pi, idx, last, return_lse=True)
    with pytest.raises(kattn.Error, match="kv_page_indices"):
        kattn.paged_attention_backward(q, cache, o, lse, np.ones_like(o), qi, pi, idx, last)


@pytest.mark.parametrize("splits", [0, 1, 4, 64])
def test_decode_over_a_paged_cache(splits):
    kv_lens = [300, 1, 0, 77]
    q, k, v, _, ki = ragged_batch([1] * 4, kv_lens, 8, 2, 32, seed=splits)
    cache, pi, idx, last = pages_of(k, v, ki, 16, seed=splits)
    o, lse = kattn.decode(q, cache, pi, idx, last, return_lse=True, splits=splits)
    assert o.shape == q.shape
    for b in range(4):
        keys = slice(ki[b], ki[b + 1])
        ref_o, ref_lse = textbook_rows(q[b : b + 1], k[keys], v[keys])
        assert rel_err(o[b : b + 1], ref_o) <= 1e-12
        assert rel_err(lse[b : b + 1], ref_lse) <= 1e-12


def test_float32_ragged_and_index_arrays_of_any_integer_kind():
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 64, dtype=np.float32, seed=5)
    o = kattn.ragged_attention(q, k, v, qi.astype(np.int32), list(ki), causal=True)
    assert o.dtype == np.float32
    for b in range(len(Q_LENS)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        assert rel_err(o[rows], textbook_rows(q[rows], k[keys], v[keys], causal=True)[0]) <= 2e-5


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v, qi, ki: kattn.ragged_attention(q, k, v, qi.astype(float), ki), "q_indptr: expected a rank-1 integer"),
        (lambda q, k, v, qi, ki: kattn.ragged_attention(q, k, v, qi, ki[:-1]), "kv_indptr"),
        (lambda q, k, v, qi, ki: kattn.ragged_attention(q, k, v, qi[::-1].copy(), ki), "q_indptr"),
        (lambda q, k, v, qi, ki: kattn.ragged_attention(q[:-1], k, v, qi, ki), "q:"),
        (lambda q, k, v, qi, ki: kattn.paged_attention(q, (k[None], v[None]), qi, [0, 1, 1, 1, 1, 1], [5],
                                                       [1, 0, 0, 0, 0], ), "kv_page_indices"),
        (lambda q, k, v, qi, ki: kattn.paged_attention(q, (k[None],), qi, [0], [], []), "kv_cache: expected (k_pages, v_pages)"),
        (lambda q, k, v, qi, ki: kattn.paged_attention(q, k, qi, [0], [], []), "kv_cache: expected"),
        (lambda q, k, v, qi, ki: kattn.decode(q[None], (k[None], v[None]), [0, 1], [0], [1]), "q: expected a rank-3 array"),
    ],
)
def test_bad_ragged_and_paged_input_raises_naming_the_argument(call, message):
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 8, seed=0)
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(q, k, v, qi, ki)


def test_plan_says_what_attention_would_do():
    one = kattn.plan(1, 1, 65536, 8, 8, 128, processors=1)
    many = kattn.plan(1, 1, 65536, 8, 8, 128, processors=64)
    assert one["splits"] == 1 and many["splits"] > 1 and many["processors"] == 64
    assert kattn.plan(1, 1, 100, 8, 8, 128, splits=5)["splits"] == 5
    assert kattn.plan(2, 1, 1000, 8, 8, 64, split_chunk=300)["splits"] == 4
    assert isinstance(many["reason"], str) and many["reason"]
    with pytest.raises(kattn.Error, match="dtype"):
        kattn.plan(1, 1, 10, 1, 1, 8, dtype="int8")
    with pytest.raises(kattn.Error, match="heads"):
        kattn.plan(1, 1, 10, 3, 2, 8)


@pytest.mark.parametrize("mask", range(len(MASKS)))
@pytest.mark.parametrize("suffix", ["ragged", "paged"])
def test_cascade_is_attention_over_the_prefix_and_each_sequence(mask, suffix):
    opt = MASKS[mask]
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 16, seed=30 + mask)
    rng = np.random.default_rng(mask)
    kp, vp = rng.standard_normal((2, 23, 2, 16))  # a prefix of 23 keys every sequence sees
    if "window" in opt:  # refused by the library, with a message that says what to do instead
        with pytest.raises(kattn.Error, match="window: cascade attention takes no sliding window"):
            kattn.cascade_attention(q, kp, vp, qi, kv=(k, v), kv_indptr=ki, **opt)
        return
    if suffix == "ragged":
        o, lse = kattn.cascade_attention(q, kp, vp, qi, kv=(k, v), kv_indptr=ki, return_lse=True, **opt)
    else:
        cache, pi, idx, last = pages_of(k, v, ki, 8, seed=mask)
        o, lse = kattn.cascade_attention(q, kp, vp, qi, kv_cache=cache, kv_page_indptr=pi, kv_page_indices=idx,
                                         kv_last_page_len=last, return_lse=True, **opt)
    for b in range(len(Q_LENS)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o, ref_lse = textbook_rows(q[rows], np.concatenate([kp, k[keys]]), np.concatenate([vp, v[keys]]), **opt)
        assert rel_err(o[rows], ref_o) <= 1e-12
        assert rel_err(lse[rows], ref_lse) <= 1e-12


def test_cascade_needs_one_suffix():
    q, k, v, qi, ki = ragged_batch([1], [4], 2, 1, 8, seed=0)
    with pytest.raises(kattn.Error, match=re.escape("kv, kv_cache: expected the suffix")):
        kattn.cascade_attention(q, k, v, qi)
    with pytest.raises(kattn.Error, match="kv_indptr"):
        kattn.cascade_attention(q, k, v, qi, kv=(k, v))
