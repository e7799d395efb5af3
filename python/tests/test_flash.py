"""kattn.flash_attn_func and kattn.flash_attn_varlen_func: flash-attn's calls, meaning what they
mean there (causal aligned bottom-right, its window, its return_attn_probs results), against the
float64 textbook, on NumPy arrays and on PyTorch tensors (with gradients; any torch)."""
import re

import numpy as np
import pytest

import kattn
from reference import rel_err, textbook, textbook_backward
from test_kinds import ragged_batch, textbook_rows, textbook_rows_backward

# (B, Nq, Nk, Hq, Hkv, D): Nq below, above and at Nk, GQA, odd sizes
SHAPES = [(2, 9, 27, 4, 2, 16), (1, 27, 9, 6, 2, 8), (1, 1, 129, 3, 3, 32), (2, 40, 40, 2, 1, 5)]
# flash-attn's arguments: bottom-right causal, windows on either side, both, softcap, scale
MASKS = [{}, {"causal": True}, {"window_size": (3, 0)}, {"window_size": (-1, 2)}, {"window_size": (4, 4)},
         {"causal": True, "window_size": (5, -1)}, {"softcap": 2.0, "softmax_scale": 0.3}]


def textbook_options(opt):
    """flash-attn's argument names as the textbook's (the same meaning)."""
    return dict(causal=opt.get("causal", False), window=opt.get("window_size"), softcap=opt.get("softcap", 0.0),
                scale=opt.get("softmax_scale"))


def problem(shape, seed):
    B, Nq, Nk, Hq, Hkv, D = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, Nq, Hq, D)), rng.standard_normal((B, Nk, Hkv, D)), rng.standard_normal(
        (B, Nk, Hkv, D))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_numpy_forward_matches_the_textbook(shape, mask):
    opt = MASKS[mask]
    q, k, v = problem(shape, seed=mask + shape[1])
    o = kattn.flash_attn_func(q, k, v, **opt)
    ref, ref_lse, _ = textbook(q, k, v, **textbook_options(opt))
    assert o.shape == q.shape and rel_err(o, ref) <= 1e-12
    o2, lse, s_dmask = kattn.flash_attn_func(q, k, v, return_attn_probs=True, **opt)
    assert np.array_equal(o, o2) and s_dmask.shape == (0,)
    # flash-attn's lse: [B, Hq, Nq], +inf (not -inf) for a row that sees no key
    assert lse.shape == ref_lse.shape
    assert np.array_equal(np.isposinf(lse), np.isneginf(ref_lse))
    seen = np.isfinite(ref_lse)
    assert np.abs(lse[seen] - ref_lse[seen]).max(initial=0.0) <= 1e-12


def test_a_row_that_sees_no_key_gives_o_zero_and_lse_plus_infinity():
    q, k, v = problem((1, 5, 2, 1, 1, 8), seed=1)  # bottom-right causal: queries 0..2 see no key
    o, lse, _ = kattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.all(o[0, :3] == 0) and np.all(lse[0, 0, :3] == np.inf) and np.all(np.isfinite(lse[0, 0, 3:]))


def test_varlen_numpy_forward_matches_the_textbook_per_sequence():
    q_lens, kv_lens = [3, 0, 17, 1, 9], [5, 4, 17, 9, 1]
    q, k, v, qi, ki = ragged_batch(q_lens, kv_lens, 4, 2, 8, seed=2)
    for opt in MASKS:
        o, lse, s_dmask = kattn.flash_attn_varlen_func(q, k, v, qi.astype(np.int32), ki.astype(np.int32),
                                                       max(q_lens), max(kv_lens), return_attn_probs=True, **opt)
        assert lse.shape == (4, q.shape[0]) and lse.flags.c_contiguous and s_dmask.shape == (0,)
        for b in range(len(q_lens)):
            rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
            ref, ref_lse = textbook_rows(q[rows], k[keys], v[keys], **textbook_options(opt))
            assert rel_err(o[rows], ref) <= 1e-12
            assert np.array_equal(np.isposinf(lse[:, rows].T), np.isneginf(ref_lse))


def test_varlen_checks_max_seqlen():
    q, k, v, qi, ki = ragged_batch([3, 7], [4, 2], 2, 2, 8, seed=3)
    with pytest.raises(kattn.Error, match=re.escape("max_seqlen_q: expected at least the longest sequence (7 rows "
                                                    "of cu_seqlens_q), got 6")):
        kattn.flash_attn_varlen_func(q, k, v, qi, ki, 6, 4)


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: kattn.flash_attn_func(q, k, v, dropout_p=0.1), "dropout_p: expected 0.0 (kattn has no dropout)"),
    (lambda q, k, v: kattn.flash_attn_func(q, k, v, alibi_slopes=np.ones((1, 2))),
     "alibi_slopes: expected a rank-1 array of one slope per query head, got rank 2"),
    (lambda q, k, v: kattn.flash_attn_func(q, k.astype(np.float32), v), "k: expected the dtype of q (float64)"),
    (lambda q, k, v: kattn.flash_attn_func(q, k, v, window_size=(1,)), "window_size: expected (left, right)"),
    (lambda q, k, v: kattn.flash_attn_varlen_func(q[0], k[0], v[0], [0, 4], [0, 6], 4, 6, block_table=[[0]]),
     "block_table: a paged cache goes through kattn.paged_attention"),
])
def test_what_kattn_does_not_do_is_refused_naming_it(call, message):
    q, k, v = problem((1, 4, 6, 2, 2, 8), seed=4)
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(q, k, v)


# ---- PyTorch tensors: autograd

try:
    import torch
except ImportError:  # the NumPy tests above run without PyTorch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (Debian: python3-torch)")


def tensors(shape, seed, dtype=None):
    return [torch.from_numpy(x).to(dtype or torch.float64).requires_grad_() for x in problem(shape, seed)]


@needs_torch
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask", range(len(MASKS)))
def test_tensor_forward_and_gradients_match_the_textbook(shape, mask):
    opt = MASKS[mask]
    q, k, v = tensors(shape, seed=3 * mask + shape[2])
    o, lse, s_dmask = kattn.flash_attn_func(q, k, v, return_attn_probs=True, **opt)
    assert isinstance(o, torch.Tensor) and s_dmask.shape == (0,) and not lse.requires_grad
    dout = np.random.default_rng(mask).standard_normal(o.shape)
    grads = torch.autograd.grad(o, (q, k, v), torch.from_numpy(dout))
    arrays = [t.detach().numpy() for t in (q, k, v)]
    ref, ref_lse, _ = textbook(*arrays, **textbook_options(opt))
    assert rel_err(o.detach(), ref) <= 1e-12
    assert np.array_equal(np.isposinf(lse.numpy()), np.isneginf(ref_lse))
    for g, r in zip(grads, textbook_backward(*arrays, dout, **textbook_options(opt))):
        assert rel_err(g, r) <= 1e-10


@needs_torch
def test_tensor_gradcheck_and_a_deterministic_backward():
    q, k, v = tensors((1, 5, 7, 4, 2, 8), seed=5)
    for opt in ({"causal": True}, {"window_size": (2, 1), "softcap": 3.0}):
        assert torch.autograd.gradcheck(lambda a, b, c: kattn.flash_attn_func(a, b, c, **opt), (q, k, v))
    once = torch.autograd.grad(kattn.flash_attn_func(q, k, v, causal=True, deterministic=True).sum(), (q, k, v))
    again = torch.autograd.grad(kattn.flash_attn_func(q, k, v, causal=True, deterministic=True).sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(once, again))


@needs_torch
def test_varlen_tensor_forward_and_gradients_match_the_textbook_per_sequence():
    q_lens, kv_lens = [3, 0, 17, 1], [5, 4, 9, 9]
    arrays = ragged_batch(q_lens, kv_lens, 4, 2, 8, seed=6)
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in arrays[:3])
    qi, ki = (torch.from_numpy(x).to(torch.int32) for x in arrays[3:])
    dout = np.random.default_rng(7).standard_normal(q.shape)
    opt = {"causal": True, "window_size": (4, -1)}
    o = kattn.flash_attn_varlen_func(q, k, v, qi, ki, max(q_lens), max(kv_lens), **opt)
    grads = torch.autograd.grad(o, (q, k, v), torch.from_numpy(dout))
    for b in range(len(q_lens)):
        rows, keys = slice(qi[b], qi[b + 1]), slice(ki[b], ki[b + 1])
        qa, ka, va = (x.detach().numpy() for x in (q[rows], k[keys], v[keys]))
        ref, _ = textbook_rows(qa, ka, va, **textbook_options(opt))
        assert rel_err(o[rows].detach(), ref) <= 1e-12
        for g, r in zip((grads[0][rows], grads[1][keys], grads[2][keys]),
                        textbook_rows_backward(qa, ka, va, dout[rows], **textbook_options(opt))):
            assert rel_err(g, r) <= 1e-10
    assert torch.autograd.gradcheck(
        lambda a, b, c: kattn.flash_attn_varlen_func(a, b, c, qi, ki, max(q_lens), max(kv_lens), causal=True),
        (q, k, v))


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_tensors_as_flash_attn_takes_them(dtype):
    q, k, v = (t.detach().to(getattr(torch, dtype)) for t in tensors((2, 33, 50, 4, 2, 64), seed=8))
    o, lse, _ = kattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert o.dtype == q.dtype and lse.dtype == torch.float32
    ref, _, _ = textbook(*(t.float().numpy() for t in (q, k, v)), causal=True)
    assert np.abs(o.double().numpy() - ref).max() <= (8e-3 if dtype == "float16" else 6e-2)
