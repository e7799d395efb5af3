"""16-bit storage from PyTorch: torch.bfloat16 and torch.float16 CPU tensors (read in place through
DLPack) in the forward calls, the backward, kattn.torch.attention's autograd, merge_states and
cascade_attention, float32 queries over a bfloat16 cache, under FlashAttention's accuracy rule;
gradients of float32 queries over a 16-bit cache are refused."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402
from reference import assert_16bit_grad_rule, assert_16bit_rule, round16, textbook, textbook16  # noqa: E402
from reference import o16_allowance, textbook16_backward, textbook_backward  # noqa: E402
from test_kinds import KV_LENS, Q_LENS, pages_of, ragged_batch  # noqa: E402
from test_storage16 import expect_float32_rows, expect_rows_rule, problem16  # noqa: E402
from test_storage16_merge import expect_rounded_once, whole_sequences  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
OPTIONS = [{}, {"causal": True}, {"window": (9, 4)}, {"causal": True, "softcap": 30.0}, {"softcap": 2.0, "scale": 0.3}]


def tensors16(b, hq, hkv, nq, nk, d, dtype, seed=0):
    """q [B, Hq, Nq, D], k, v [B, Hkv, Nk, D] of unit-normal values in dtype."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g).to(dtype) for s in ((b, hq, nq, d), (b, hkv, nk, d), (b, hkv, nk, d)))


def bnhd64(t):
    """A [B, H, N, D] tensor's values as a float64 [B, N, H, D] array."""
    return t.to(torch.float64).numpy().transpose(0, 2, 1, 3)


def expect_bhnd_rule(o, lse, q, k, v, dtype, **opt):
    assert isinstance(o, torch.Tensor) and o.dtype == DTYPES[dtype] and o.shape == q.shape
    assert lse.dtype == torch.float32
    qn, kn, vn = (bnhd64(t) for t in (q, k, v))
    ref_o, ref_lse, _ = textbook(qn, kn, vn, **opt)
    assert_16bit_rule(bnhd64(o), lse.numpy(), ref_o, ref_lse, textbook16(qn, kn, vn, dtype, **opt))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt", OPTIONS)
@pytest.mark.parametrize("shape", [(2, 4, 2, 33, 40, 16), (1, 8, 1, 1, 300, 64), (1, 2, 2, 70, 70, 32)])
def test_16bit_tensors_meet_the_rule(dtype, opt, shape):
    q, k, v = tensors16(*shape, DTYPES[dtype], seed=len(opt))
    o, lse = kattn.attention(q, k, v, layout="bhnd", return_lse=True, **opt)
    expect_bhnd_rule(o, lse, q, k, v, dtype, **opt)
    assert torch.equal(kattn.torch.attention(q, k, v, layout="bhnd", **opt), o)  # the autograd function's forward


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_tensors_are_read_in_place_whatever_their_strides(dtype):
    q, k, v = tensors16(2, 4, 2, 17, 29, 32, DTYPES[dtype], seed=1)
    a = kattn._arrays.as_array(q, "q")
    assert a.__array_interface__["data"][0] == q.data_ptr() and a.itemsize == 2
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # [B, N, H, D] views of the same memory
    at = kattn._arrays.as_array(qt, "q")
    assert at.__array_interface__["data"][0] == q.data_ptr() and at.strides == tuple(2 * s for s in qt.stride())
    o = kattn.attention(q, k, v, layout="bhnd", causal=True)
    assert torch.equal(kattn.attention(qt, kt, vt, causal=True).transpose(1, 2), o)


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_ragged_and_paged_tensors_meet_the_rule(dtype):
    # The values drawn in float32, rounded to dtype by PyTorch; the reference reads them back.
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 8, 2, 32, dtype=np.float32, seed=2)
    qt, kt, vt = (torch.from_numpy(x).to(DTYPES[dtype]) for x in (q, k, v))
    q, k, v = (t.to(torch.float64).numpy() for t in (qt, kt, vt))
    o, lse = kattn.ragged_attention(qt, kt, vt, qi, ki, causal=True, return_lse=True)
    assert o.dtype == DTYPES[dtype] and lse.dtype == torch.float32
    expect_rows_rule(o.to(torch.float64).numpy(), lse.numpy(), q, k, v, qi, ki, dtype, causal=True)
    (kp, vp), pi, idx, last = pages_of(k, v, ki, 16, seed=2)  # unused slots hold NaN
    cache = torch.from_numpy(np.stack((kp, vp), axis=1)).to(DTYPES[dtype])  # one [P, 2, 16, Hkv, D] tensor
    o, lse = kattn.paged_attention(qt, cache, qi, pi, idx, last, causal=True, return_lse=True)
    expect_rows_rule(o.to(torch.float64).numpy(), lse.numpy(), q, k, v, qi, ki, dtype, causal=True)


@pytest.mark.parametrize("splits", [0, 3])
def test_bfloat16_decode_and_float32_queries_over_a_bfloat16_cache(splits):
    _, k, v, qi, ki = ragged_batch([1] * 4, [500, 1, 0, 77], 8, 2, 64, dtype=np.float32, seed=splits)
    k, v = (torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy() for x in (k, v))
    (kp, vp), pi, idx, last = pages_of(k, v, ki, 16, seed=splits)
    kp, vp = (torch.from_numpy(x).to(torch.bfloat16) for x in (kp, vp))
    q32 = torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(splits))
    q16 = q32.to(torch.bfloat16)
    o, lse = kattn.decode(q16, (kp, vp), pi, idx, last, return_lse=True, splits=splits)
    assert o.dtype == torch.bfloat16
    expect_rows_rule(o.to(torch.float64).numpy(), lse.numpy(), q16.to(torch.float64).numpy(), k, v, qi, ki, "bfloat16")
    o, lse = kattn.decode(q32, (kp, vp), pi, idx, last, return_lse=True, splits=splits)  # mixed storage
    assert isinstance(o, torch.Tensor)
    expect_float32_rows(o.numpy(), lse.numpy(), q32.numpy(), k, v, qi, ki)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt", OPTIONS)
@pytest.mark.parametrize("shape", [(2, 4, 2, 33, 40, 16), (1, 8, 1, 1, 300, 64), (1, 3, 1, 20, 20, 8)])
def test_autograd_in_16bit_meets_the_rule(dtype, opt, shape):
    q, k, v = (t.requires_grad_() for t in tensors16(*shape, DTYPES[dtype], seed=len(opt)))
    dout = tensors16(*shape, DTYPES[dtype], seed=100)[0]
    o = kattn.torch.attention(q, k, v, layout="bhnd", deterministic=True, **opt)
    o.backward(dout)
    grads = (q.grad, k.grad, v.grad)
    assert all(g.dtype == DTYPES[dtype] and g.shape == t.shape for g, t in zip(grads, (q, k, v)))
    x = [bnhd64(t.detach()) for t in (q, k, v, dout)]
    assert_16bit_grad_rule([bnhd64(g) for g in grads], textbook_backward(*x, **opt),
                           textbook16_backward(*x, dtype, **opt), o16_allowance(*x, dtype, **opt))
    # The plain functions on the same tensors: the same gradients, as tensors of the dtype.
    qd, kd, vd = (t.detach() for t in (q, k, v))
    o2, lse = kattn.attention(qd, kd, vd, layout="bhnd", return_lse=True, **opt)
    plain = kattn.attention_backward(qd, kd, vd, o2, lse, dout, layout="bhnd", deterministic=True, **opt)
    assert all(isinstance(p, torch.Tensor) and torch.equal(p, g) for p, g in zip(plain, grads))


@pytest.mark.parametrize("dtype", DTYPES)
def test_autograd_in_16bit_bnhd_views_and_a_non_contiguous_incoming_gradient(dtype):
    q, k, v = tensors16(1, 4, 2, 30, 45, 32, DTYPES[dtype], seed=3)
    qb, kb, vb = (t.transpose(1, 2).requires_grad_() for t in (q, k, v))  # [B, N, H, D] views
    o = kattn.torch.attention(qb, kb, vb, causal=True, layout="bnhd", deterministic=True)
    dout = torch.randn(1, 30, 4, 32).to(DTYPES[dtype]).transpose(-1, -2).contiguous().transpose(-1, -2)
    assert dout.stride(-1) != 1
    o.backward(dout)
    ref = [t.detach().requires_grad_() for t in (q, k, v)]
    kattn.torch.attention(*ref, causal=True, layout="bhnd", deterministic=True).backward(dout.transpose(1, 2))
    for g, r in zip((qb.grad, kb.grad, vb.grad), ref):
        assert g.dtype == DTYPES[dtype] and torch.equal(g.transpose(1, 2), r.grad)


def test_autograd_refuses_float32_queries_over_a_16bit_cache_that_require_grad():
    q, k, v = tensors16(1, 2, 1, 4, 4, 8, torch.float16)
    # float32 queries over a float16 cache: kattn's backward takes q, k, v of one dtype.
    message = "requires grad, but q is torch.float32 over a torch.float16 k, v, and kattn's backward takes q, k, v " \
              "of one dtype"
    q32 = torch.randn(1, 2, 4, 8, requires_grad=True)
    with pytest.raises(kattn.Error, match=re.escape("q: " + message)):
        kattn.torch.attention(q32, k, v, layout="bhnd")
    with pytest.raises(kattn.Error, match=re.escape("v: " + message)):
        kattn.torch.attention(q32.detach(), k, v.requires_grad_(), layout="bhnd")
    with torch.no_grad():  # no graph: the forward alone
        o = kattn.torch.attention(q32, k, v, layout="bhnd")
    assert o.dtype == torch.float32 and not o.requires_grad


def test_16bit_second_derivatives_are_refused_not_dropped():
    q, k, v = (t.requires_grad_() for t in tensors16(1, 1, 1, 3, 3, 4, torch.bfloat16))
    o = kattn.torch.attention(q, k, v, layout="bhnd")
    with pytest.raises(RuntimeError, match=re.escape("second derivatives (create_graph=True) are not supported")):
        torch.autograd.grad(o.sum(), q, create_graph=True)


CUTS = [0, 20, 21, 90]  # three disjoint key ranges, one of a single key


def exact16(arrays, dtype):
    """float64 arrays rounded to dtype: tensors of dtype, and their exact values as float64 arrays."""
    exact = [round16(a, dtype).astype(np.float64) for a in arrays]
    return [torch.from_numpy(a).to(DTYPES[dtype]) for a in exact], exact


def parts_of(q, k, v):
    """Attention of q [1, Nq, Hq, D] ("bnhd") over each range of CUTS: o_parts [S, Nq, Hq, D], lse_parts
    [S, Nq, Hq]."""
    parts = [kattn.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in zip(CUTS, CUTS[1:])]
    return torch.stack([o[0] for o, _ in parts]), torch.stack([lse[0].T for _, lse in parts])


@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_of_16bit_parts_and_of_float32_parts_rounded_once(dtype):
    (q, k, v), (q64, k64, v64) = exact16(problem16((1, 9, 90, 4, 2, 16), seed=9), dtype)
    o, lse = kattn.merge_states(*parts_of(q, k, v))
    assert o.dtype == DTYPES[dtype] and lse.dtype == torch.float32
    ref_o, ref_lse, _ = textbook(q64, k64, v64)
    assert_16bit_rule(o.to(torch.float64).numpy(), lse.numpy(), ref_o[0], ref_lse[0].T,
                      textbook16(q64, k64, v64, dtype)[0])
    # float32 queries over the 16-bit keys: float32 parts, merged in float32 and rounded once.
    o, lse = kattn.merge_states(*parts_of(q.float(), k, v), dtype=DTYPES[dtype])
    assert o.dtype == DTYPES[dtype] and lse.dtype == torch.float32
    expect_rounded_once(o.to(torch.float64).numpy(), ref_o[0], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("suffix", ["ragged", "paged"])
def test_cascade_meets_the_rule(dtype, suffix):
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, 4, 2, 16, seed=5)
    kp, vp = np.random.default_rng(5).standard_normal((2, 11, 2, 16))
    (q, k, v, kp, vp), exact = exact16((q, k, v, kp, vp), dtype)
    if suffix == "ragged":
        o, lse = kattn.cascade_attention(q, kp, vp, qi, kv=(k, v), kv_indptr=ki, causal=True, return_lse=True)
    else:
        cache, pi, idx, last = pages_of(exact[1], exact[2], ki, 4, seed=2)  # unused slots hold NaN
        pages = [torch.from_numpy(c).to(DTYPES[dtype]) for c in cache]
        o, lse = kattn.cascade_attention(q, kp, vp, qi, kv_cache=pages, kv_page_indptr=pi, kv_page_indices=idx,
                                         kv_last_page_len=last, causal=True, return_lse=True)
    assert o.dtype == DTYPES[dtype] and lse.dtype == torch.float32
    kw, vw, kiw = whole_sequences(exact[1], exact[2], ki, exact[3], exact[4])
    expect_rows_rule(o.to(torch.float64).numpy(), lse.numpy(), exact[0], kw, vw, qi, kiw, dtype, causal=True)
