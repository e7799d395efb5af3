"""16-bit storage from PyTorch: torch.bfloat16 and torch.float16 CPU tensors (read in place through
DLPack) in the forward calls and in kattn.torch.attention without gradients, float32 queries over a
bfloat16 cache, under FlashAttention's accuracy rule; autograd and the calls 16-bit storage has not
reached (merge, cascade) refuse them."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402
from reference import assert_16bit_rule, textbook, textbook16  # noqa: E402
from test_kinds import KV_LENS, Q_LENS, pages_of, ragged_batch  # noqa: E402
from test_storage16 import expect_float32_rows, expect_rows_rule  # noqa: E402

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
    assert torch.equal(kattn.torch.attention(q, k, v, **opt), o)  # the autograd function's forward


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


def test_autograd_refuses_16bit_inputs_that_require_grad():
    q, k, v = tensors16(1, 2, 1, 4, 4, 8, torch.bfloat16)
    with pytest.raises(kattn.Error, match=re.escape("q: requires grad, but the inputs hold torch.bfloat16 and "
                                                    "kattn's backward takes float32 and float64 only, for now")):
        kattn.torch.attention(q.requires_grad_(), k, v)
    # float32 queries needing grad over a float16 cache: the backward would need the cache's type.
    q32 = torch.randn(1, 2, 4, 8, requires_grad=True)
    with pytest.raises(kattn.Error, match=re.escape("q: requires grad, but the inputs hold torch.float16")):
        kattn.torch.attention(q32, k.half(), v.half())
    with torch.no_grad():  # no graph: the forward alone
        o = kattn.torch.attention(q32, k.half(), v.half())
    assert o.dtype == torch.float32 and not o.requires_grad


FLOAT_ONLY = "expected float32 or float64, got {} (16-bit storage is not in kattn's merge, cascade or MPI calls yet)"


@pytest.mark.parametrize("dtype", DTYPES)
def test_calls_without_16bit_storage_refuse_16bit_tensors(dtype):
    q, k, v = tensors16(1, 2, 1, 4, 4, 8, DTYPES[dtype])
    o, lse = kattn.attention(q, k, v, layout="bhnd", return_lse=True)
    message = re.escape(FLOAT_ONLY.format(dtype))
    with pytest.raises(kattn.Error, match="o_parts: " + message):
        kattn.merge_states(o, lse.to(DTYPES[dtype]))
    q3, k3, v3 = (t[0].transpose(0, 1) for t in (q, k, v))  # [N, H, D]
    with pytest.raises(kattn.Error, match="q: " + message):
        kattn.cascade_attention(q3, k3, v3, [0, 4], kv=(k3, v3), kv_indptr=[0, 4])
