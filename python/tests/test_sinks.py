"""Attention sinks (sinks=, one logit per query head that takes part in each row's softmax and carries
no value) in every call that takes them, against the float64 textbook with the sink as one more
logit: the NumPy-level calls and their dsinks, kattn.torch's autograd and torch.compile, and the
refusals."""

import numpy as np
import pytest

import kattn
from reference import (assert_attention_matches_textbook, dense_qkv, rel_err, textbook, textbook_backward,
                       torch_textbook)
from test_kinds import KV_LENS, Q_LENS, pages_of, ragged_batch

VARIANTS = [{}, {"causal": True}, {"window": (3, 1)}, {"softcap": 2.0, "scale": 0.3},
            {"causal": True, "window": (4, -1)}]
# B, Nq, Nk, Hq, Hkv, D: GQA; more queries than keys (causal: rows that see no key); one query.
SHAPES = [(2, 7, 9, 4, 2, 8), (1, 12, 5, 3, 3, 16), (2, 1, 30, 8, 1, 16)]


def sinks_for(hq, seed=0):
    """A head's sink of either sign and order one to a few, and head 1 without one (-inf)."""
    s = 2.0 * np.random.default_rng(100 + seed).standard_normal(hq)
    if hq > 1:
        s[1] = -np.inf
    return s


# ---- NumPy: forward

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("splits", [0, 1, 3])
def test_forward_float64_matches_the_textbook_with_the_sink_as_one_more_logit(variant, shape, splits):
    assert_attention_matches_textbook(shape, seed=splits, splits=splits, sinks=sinks_for(shape[3], splits), **variant)


def test_rows_that_see_no_key_get_zero_and_their_sink_as_lse():
    q, k, v = dense_qkv((1, 4, 2, 3, 3, 8))  # causal, 4 queries over 2 keys: rows 0 and 1 see none
    sinks = np.array([0.75, -np.inf, -2.5])
    o, lse = kattn.attention(q, k, v, causal=True, sinks=sinks, return_lse=True)
    assert np.all(o[:, :2] == 0)
    assert rel_err(lse[0, :, :2], np.repeat(sinks[:, None], 2, axis=1)) <= 1e-15  # via log2 units: rounded
    assert np.all(np.isfinite(lse[0, [0, 2], 2:]))


def test_sinks_of_minus_infinity_are_no_sinks_bit_for_bit():
    q, k, v = dense_qkv(SHAPES[0])
    o, lse = kattn.attention(q, k, v, causal=True, return_lse=True)
    o_inf, lse_inf = kattn.attention(q, k, v, causal=True, sinks=[-np.inf] * 4, return_lse=True)
    assert np.array_equal(o, o_inf) and np.array_equal(lse, lse_inf)


def test_sinks_in_any_float_dtype_or_a_sequence_mean_the_same_logits():
    q, k, v = dense_qkv(SHAPES[0])
    sinks = np.array([0.5, -1.25, 2.0, 0.0])  # exact in float16
    want = kattn.attention(q, k, v, sinks=sinks)
    for given in (sinks.astype(np.float32), sinks.astype(np.float16), list(sinks), tuple(sinks)):
        assert np.array_equal(kattn.attention(q, k, v, sinks=given), want)


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_float32(variant):
    q, k, v = dense_qkv(SHAPES[0], np.float32, seed=1)
    sinks = sinks_for(4, 1).astype(np.float32)
    o, lse = kattn.attention(q, k, v, sinks=sinks, return_lse=True, **variant)
    ref_o, ref_lse, _ = textbook(q, k, v, sinks=sinks, **variant)
    assert o.dtype == np.float32
    assert rel_err(o, ref_o) <= 2e-6
    assert rel_err(lse, ref_lse) <= 2e-6


def as_bfloat16(a):
    """a rounded to bfloat16, as a torch.bfloat16 CPU tensor (NumPy has no bfloat16)."""
    torch = pytest.importorskip("torch", reason="bfloat16 arrays are PyTorch tensors")
    return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(torch.bfloat16)


# A loose bound on 16-bit results against the float64 textbook on the same 16-bit inputs: a few
# times the type's rounding error at these sizes (measured, forward and gradients: up to 5e-4 for
# float16, 4e-3 for bfloat16).
TOL16 = [("float16", 2e-3), ("bfloat16", 1.5e-2)]


@pytest.mark.parametrize("dtype, tol", TOL16)
def test_16bit_storage_within_a_loose_bound(dtype, tol):
    q, k, v = dense_qkv((2, 9, 13, 4, 2, 16), np.float32, seed=2)
    sinks = sinks_for(4, 2)
    if dtype == "float16":
        q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
        exact = [x.astype(np.float64) for x in (q16, k16, v16)]
    else:
        q16, k16, v16 = (as_bfloat16(x) for x in (q, k, v))
        exact = [x.double().numpy() for x in (q16, k16, v16)]
    o, lse = kattn.attention(q16, k16, v16, causal=True, sinks=sinks, return_lse=True)
    ref_o, ref_lse, _ = textbook(*exact, causal=True, sinks=sinks)
    o = o.astype(np.float64) if dtype == "float16" else o.double().numpy()
    lse = np.asarray(lse, np.float64)
    assert rel_err(o, ref_o) <= tol
    assert rel_err(lse, ref_lse) <= 1e-5


# ---- NumPy: ragged, paged, decode, cascade, one sequence at a time

HEADS = (4, 2)


def sequence_textbook(q, k, v, **opt):
    """o [n, Hq, D], lse [n, Hq] of one sequence's rows (its keys may be none)."""
    o, lse, _ = textbook(q[None], k[None], v[None], **opt)
    return o[0], lse[0].T


def expect_sequences(o, lse, q, k, v, qi, ki, **opt):
    for b in range(len(qi) - 1):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o, ref_lse = sequence_textbook(q[rows], k[keys], v[keys], **opt)
        assert rel_err(o[rows], ref_o) <= 1e-12
        assert rel_err(lse[rows], ref_lse) <= 1e-12


@pytest.mark.parametrize("variant", [{}, {"causal": True, "softcap": 20.0}, {"window": (5, 2)}])
@pytest.mark.parametrize("splits", [0, 3])
def test_ragged_and_paged_forward_match_the_textbook_per_sequence(variant, splits):
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, *HEADS, 16, seed=splits)
    sinks = sinks_for(HEADS[0], splits)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, sinks=sinks, return_lse=True, splits=splits, **variant)
    expect_sequences(o, lse, q, k, v, qi, ki, sinks=sinks, **variant)
    pages, pi, idx, last = pages_of(k, v, ki, 8, seed=splits)
    o, lse = kattn.paged_attention(q, pages, qi, pi, idx, last, sinks=sinks, return_lse=True, splits=splits,
                                   **variant)
    expect_sequences(o, lse, q, k, v, qi, ki, sinks=sinks, **variant)


def test_decode_matches_the_textbook_per_sequence():
    kv_lens = [9, 0, 40, 1]
    _, k, v, _, ki = ragged_batch([0] * 4, kv_lens, *HEADS, 16, seed=4)
    q = np.random.default_rng(5).standard_normal((4, HEADS[0], 16))
    sinks = sinks_for(HEADS[0], 4)
    pages, pi, idx, last = pages_of(k, v, ki, 4, seed=4)
    o, lse = kattn.decode(q, pages, pi, idx, last, sinks=sinks, return_lse=True, splits=3)
    expect_sequences(o, lse, q, k, v, np.arange(5), ki, sinks=sinks)


@pytest.mark.parametrize("suffix", ["ragged", "paged"])
def test_cascade_matches_the_textbook_over_prefix_and_suffix(suffix):
    q, k, v, qi, ki = ragged_batch(Q_LENS, KV_LENS, *HEADS, 16, seed=6)
    rng = np.random.default_rng(7)
    kp, vp = (rng.standard_normal((11, HEADS[1], 16)) for _ in range(2))
    sinks = sinks_for(HEADS[0], 6)
    if suffix == "ragged":
        keys = dict(kv=(k, v), kv_indptr=ki)
    else:
        pages, pi, idx, last = pages_of(k, v, ki, 8, seed=6)
        keys = dict(kv_cache=pages, kv_page_indptr=pi, kv_page_indices=idx, kv_last_page_len=last)
    o, lse = kattn.cascade_attention(q, kp, vp, qi, causal=True, sinks=sinks, return_lse=True, **keys)
    for b in range(len(Q_LENS)):
        rows, own = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref_o, ref_lse = sequence_textbook(q[rows], np.concatenate([kp, k[own]]), np.concatenate([vp, v[own]]),
                                           causal=True, sinks=sinks)
        assert rel_err(o[rows], ref_o) <= 1e-12
        assert rel_err(lse[rows], ref_lse) <= 1e-12


# ---- NumPy: backward

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_float64_gives_dsinks_and_matches_the_textbook(variant, shape):
    q, k, v = dense_qkv(shape, seed=3)
    sinks = sinks_for(shape[3], 3)
    o, lse = kattn.attention(q, k, v, sinks=sinks, return_lse=True, **variant)
    dout = np.random.default_rng(8).standard_normal(o.shape)
    for deterministic in (False, True):
        grads = kattn.attention_backward(q, k, v, o, lse, dout, sinks=sinks, deterministic=deterministic, **variant)
        ref = textbook_backward(q, k, v, dout, sinks=sinks, **variant)
        assert len(grads) == 4 and grads[3].shape == (shape[3],) and grads[3].dtype == np.float64
        for g, r in zip(grads, ref):
            assert rel_err(g, r) <= 1e-12
        assert grads[3][1] == 0  # the head without a sink


def test_backward_without_sinks_returns_dq_dk_dv_as_before():
    q, k, v = dense_qkv(SHAPES[0])
    o, lse = kattn.attention(q, k, v, return_lse=True)
    assert len(kattn.attention_backward(q, k, v, o, lse, np.ones_like(o))) == 3


def test_ragged_and_paged_backward_give_dsinks_summed_over_every_sequence():
    q_lens, kv_lens = [3, 0, 6, 5], [8, 4, 6, 0]  # a sequence without queries, one without keys
    q, k, v, qi, ki = ragged_batch(q_lens, kv_lens, *HEADS, 8, seed=9)
    sinks = sinks_for(HEADS[0], 9)
    o, lse = kattn.ragged_attention(q, k, v, qi, ki, causal=True, sinks=sinks, return_lse=True)
    dout = np.random.default_rng(10).standard_normal(o.shape)
    dq, dk, dv, dsinks = kattn.ragged_attention_backward(q, k, v, o, lse, dout, qi, ki, causal=True, sinks=sinks)
    want = np.zeros(HEADS[0])
    for b in range(len(q_lens)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        ref = textbook_backward(q[None, rows], k[None, keys], v[None, keys], dout[None, rows], causal=True,
                                sinks=sinks)
        for g, r in zip((dq[rows], dk[keys], dv[keys]), ref):
            assert rel_err(g, r[0]) <= 1e-12
        want += ref[3]
    assert rel_err(dsinks, want) <= 1e-12
    pages, pi, idx, last = pages_of(k, v, ki, 4, seed=9)
    _, _, _, paged_dsinks = kattn.paged_attention_backward(q, pages, o, lse, dout, qi, pi, idx, last, causal=True,
                                                           sinks=sinks)
    assert rel_err(paged_dsinks, want) <= 1e-12


# ---- refusals

def refusals():
    q, k, v = dense_qkv(SHAPES[0])
    o, lse = kattn.attention(q, k, v, return_lse=True)
    return [
        (lambda: kattn.attention(q, k, v, sinks=[0.0] * 3), r"sinks: expected one logit per query head \(4\), got 3"),
        (lambda: kattn.attention(q, k, v, sinks=np.zeros((1, 4))), "sinks: expected a rank-1 array"),
        (lambda: kattn.attention(q, k, v, sinks=0.5), "sinks: expected a rank-1 array"),
        (lambda: kattn.attention(q, k, v, sinks="high"), "sinks: expected one logit per query head"),
        (lambda: kattn.attention_backward(q, k, v, o, lse, o, sinks=[0.0] * 5),
         r"sinks: expected one logit per query head \(4\), got 5"),
        (lambda: kattn.ragged_attention(q[0], k[0], v[0], [0, 7], [0, 9], sinks=[[0.0] * 4]),
         "sinks: expected a rank-1 array"),
    ]


@pytest.mark.parametrize("case", range(len(refusals())))
def test_bad_sinks_raise_kattn_error_naming_sinks(case):
    call, message = refusals()[case]
    with pytest.raises(kattn.Error, match=message):
        call()


# ---- PyTorch: autograd, the SDPA call, torch.compile

def torch_or_skip():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
    import kattn.torch  # noqa: F401

    return torch


def leaf_tensors(b, hq, hkv, nq, nk, d, dtype=None, seed=0):
    torch = torch_or_skip()
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, dtype=dtype or torch.float64, generator=g).requires_grad_()  # noqa: E731
    return make(b, hq, nq, d), make(b, hkv, nk, d), make(b, hkv, nk, d), make(hq)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_torch_autograd_matches_autograd_of_the_textbook(variant, layout):
    torch = torch_or_skip()
    q, k, v, sinks = leaf_tensors(2, 4, 2, 9, 11, 8, seed=len(variant))
    dout = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    to = (lambda t: t) if layout == "bhnd" else (lambda t: t.transpose(1, 2))
    o = to(kattn.torch.attention(to(q), to(k), to(v), sinks=sinks, layout=layout, **variant))
    grads = torch.autograd.grad(o, (q, k, v, sinks), dout)
    ref = torch_textbook(q, k, v, sinks, **variant)
    ref_grads = torch.autograd.grad(ref, (q, k, v, sinks), dout)
    assert (o - ref).abs().max() <= 1e-12
    for g, r in zip(grads, ref_grads):
        assert g.shape == r.shape and g.dtype == r.dtype
        assert (g - r).abs().max() <= 1e-10


def test_torch_gradcheck_in_float64():
    torch = torch_or_skip()
    q, k, v, sinks = leaf_tensors(1, 2, 1, 3, 4, 4, seed=11)
    assert torch.autograd.gradcheck(
        lambda a, b, c, s: kattn.torch.attention(a, b, c, sinks=s, layout="bhnd", causal=True, softcap=3.0),
        (q, k, v, sinks))


def test_torch_sinks_gradient_in_their_dtype_and_without_grad_for_q():
    torch = torch_or_skip()
    q, k, v, sinks = leaf_tensors(1, 4, 2, 5, 6, 8, seed=12)
    s32 = sinks.detach().float().requires_grad_()
    kattn.torch.attention(q.detach(), k.detach(), v.detach(), sinks=s32, layout="bhnd").sum().backward()
    kattn.torch.attention(q, k, v, sinks=sinks, layout="bhnd").sum().backward()
    assert s32.grad.dtype == torch.float32 and q.grad is not None
    assert (s32.grad.double() - sinks.grad).abs().max() <= 1e-6
    # sinks that need no gradient get none; q, k, v theirs
    q.grad = None
    kattn.torch.attention(q, k, v, sinks=sinks.detach(), layout="bhnd").sum().backward()
    assert q.grad is not None


@pytest.mark.parametrize("dtype, tol", TOL16)
def test_torch_16bit_autograd_within_a_loose_bound(dtype, tol):
    torch = torch_or_skip()
    t = getattr(torch, dtype)
    q, k, v, sinks = leaf_tensors(1, 4, 2, 16, 20, 16, dtype=t, seed=13)
    o = kattn.torch.attention(q, k, v, sinks=sinks, layout="bhnd", causal=True)
    dout = torch.randn(o.shape, generator=torch.Generator().manual_seed(14))
    grads = torch.autograd.grad(o, (q, k, v, sinks), dout.to(t))
    exact = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    ref = torch_textbook(*exact, causal=True)
    ref_grads = torch.autograd.grad(ref, exact, dout.double())
    assert o.dtype == t and all(g.dtype == t for g in grads)
    assert rel_err(o.detach().double().numpy(), ref.detach().numpy()) <= tol
    for g, r in zip(grads, ref_grads):
        assert rel_err(g.double().numpy(), r.numpy()) <= tol


@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_takes_sinks_with_their_gradient(is_causal):
    torch = torch_or_skip()
    q, k, v, sinks = leaf_tensors(2, 4, 2, 7, 7, 8, seed=15)
    o = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True, sinks=sinks)
    ref = torch_textbook(q, k, v, sinks, causal=is_causal)  # Nq == Nk: top-left is bottom-right
    dout = torch.randn(o.shape, dtype=torch.float64)
    for g, r in zip(torch.autograd.grad(o, (q, k, v, sinks), dout), torch.autograd.grad(ref, (q, k, v, sinks), dout)):
        assert (g - r).abs().max() <= 1e-10


def test_numpy_level_calls_take_tensors_and_give_dsinks_as_a_tensor():
    torch = torch_or_skip()
    q, k, v, sinks = (t.detach() for t in leaf_tensors(1, 4, 2, 5, 6, 8, seed=16))
    o, lse = kattn.attention(q, k, v, sinks=sinks, layout="bhnd", return_lse=True)
    grads = kattn.attention_backward(q, k, v, o, lse, torch.ones_like(o), sinks=sinks, layout="bhnd")
    assert all(isinstance(g, torch.Tensor) for g in grads) and grads[3].shape == (4,)
    ref = textbook_backward(*(t.numpy().transpose(0, 2, 1, 3) for t in (q, k, v, torch.ones_like(o))),
                            sinks=sinks.numpy())
    assert rel_err(grads[3].numpy(), ref[3]) <= 1e-12


def torch_refusals():
    torch = torch_or_skip()
    q, k, v, sinks = (t.detach() for t in leaf_tensors(1, 4, 2, 5, 6, 8))
    return [
        (lambda: kattn.torch.attention(q, k, v, sinks=sinks[None], layout="bhnd"), "sinks: expected a rank-1"),
        (lambda: kattn.torch.attention(q, k, v, sinks=[0.0] * 4, layout="bhnd"), "sinks: expected a torch.Tensor"),
        (lambda: kattn.torch.attention(q, k, v, sinks=torch.zeros(4, dtype=torch.int64), layout="bhnd"),
         "sinks: expected a rank-1 floating-point tensor"),
        (lambda: kattn.torch.attention(q, k, v, sinks=sinks[:3], layout="bhnd"),
         r"sinks: expected one logit per query head \(4\), got 3"),
        (lambda: kattn.torch.scaled_dot_product_attention(q, k, v, enable_gqa=True, sinks=sinks[:2]),
         r"sinks: expected one logit per query head \(4\), got 2"),
        (lambda: kattn.attention(q, k, v, sinks=sinks.requires_grad_(), layout="bhnd"), "sinks: requires grad"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_torch_bad_sinks_raise_kattn_error_naming_sinks(case):
    call, message = torch_refusals()[case]
    with pytest.raises(kattn.Error, match=message):
        call()


def custom_ops_or_skip():
    torch = torch_or_skip()
    if not kattn.torch._CUSTOM_OPS:
        pytest.skip(f"needs torch.library.custom_op (torch >= 2.4; this is {torch.__version__}): runs in CI's venv")
    return torch


def test_compiled_with_fullgraph_matches_eager():
    torch = custom_ops_or_skip()
    q, k, v, sinks = leaf_tensors(2, 4, 2, 9, 9, 8, seed=17)

    def f(q, k, v, sinks):
        return kattn.torch.attention(q, k, v, sinks=2 * sinks, layout="bhnd", causal=True).square().sum()

    eager = torch.autograd.grad(f(q, k, v, sinks), (q, k, v, sinks))
    compiled = torch.compile(f, fullgraph=True)
    loss = compiled(q, k, v, sinks)
    assert (loss - f(q, k, v, sinks)).abs() <= 1e-12
    for g, r in zip(torch.autograd.grad(loss, (q, k, v, sinks)), eager):
        assert (g - r).abs().max() <= 1e-11


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_op_with_sinks_passes_opcheck(dtype):
    torch = custom_ops_or_skip()
    t = getattr(torch, dtype)
    q, k, v, sinks = (x.detach().to(t) for x in leaf_tensors(2, 4, 2, 5, 5, 8, seed=18))
    q, k, v = (x.transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))  # bnhd (compile: bhnd)
    options = kattn.torch._options(causal=True, window=(3, -1))
    torch.library.opcheck(torch.ops.kattn.attention.default,
                          (q, k, v, sinks.requires_grad_(), None, "bnhd", *options))
