"""kattn.torch.scaled_dot_product_attention: PyTorch's call, meaning what it means there.

Against PyTorch's own scaled_dot_product_attention (its math backend, float64) where the torch has
one with enable_gqa (2.5 or newer: CI's venv); against a float64 NumPy textbook of SDPA's
semantics (is_causal aligned top-left) with any torch, Debian's 1.13 included."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402

F = torch.nn.functional


def _has_sdpa_with_gqa():
    try:
        F.scaled_dot_product_attention(*(torch.zeros(1, h, 1, 1) for h in (2, 1, 1)), enable_gqa=True)
        return True
    except (AttributeError, TypeError, RuntimeError):
        return False


HAS_SDPA = _has_sdpa_with_gqa()
needs_sdpa = pytest.mark.skipif(not HAS_SDPA, reason=f"needs PyTorch's scaled_dot_product_attention with enable_gqa "
                                                     f"(torch >= 2.5; this is {torch.__version__}): runs in CI's venv")


def pytorch_sdpa(*args, **kw):
    """PyTorch's own, on its math backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(*args, **kw)
    except ImportError:
        return F.scaled_dot_product_attention(*args, **kw)


def textbook_sdpa(q, k, v, is_causal=False, scale=None):
    """SDPA's semantics in float64 NumPy: [..., H, L, E] (batch dims equal), GQA by repeating KV
    heads, is_causal: query i sees keys j <= i."""
    q, k, v = (np.asarray(x.detach(), np.float64) for x in (q, k, v))
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        k, v = (np.repeat(x, q.shape[-3] // k.shape[-3], axis=-3) for x in (k, v))
    s = (1 / np.sqrt(q.shape[-1]) if scale is None else scale) * q @ np.swapaxes(k, -1, -2)
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def tensors(q_shape, k_shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, dtype=dtype, generator=g).requires_grad_() for s in (q_shape, k_shape, k_shape)]


# (query shape, key shape, enable_gqa): Nq != Nk both ways, GQA, odd sizes
CASES = [
    ((2, 4, 9, 16), (2, 4, 27, 16), False),
    ((1, 6, 27, 8), (1, 2, 9, 8), True),
    ((1, 3, 1, 32), (1, 3, 129, 32), False),
    ((2, 2, 40, 5), (2, 1, 40, 5), True),
    ((3, 1, 7, 4), (3, 1, 1, 4), False),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_forward_matches_the_sdpa_textbook(case, is_causal, scale):
    q_shape, k_shape, gqa = case
    q, k, v = tensors(q_shape, k_shape, seed=len(q_shape) + q_shape[2])
    o = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=gqa)
    assert o.shape == q.shape[:-1] + v.shape[-1:]
    assert np.abs(o.detach().numpy() - textbook_sdpa(q, k, v, is_causal, scale)).max() <= 1e-12


@needs_sdpa
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_forward_and_gradients_equal_pytorchs_sdpa(case, is_causal, scale):
    q_shape, k_shape, gqa = case
    q, k, v = tensors(q_shape, k_shape, seed=3 * q_shape[2] + k_shape[2])
    kw = dict(is_causal=is_causal, scale=scale, enable_gqa=gqa)
    o, ref = kattn.torch.scaled_dot_product_attention(q, k, v, **kw), pytorch_sdpa(q, k, v, **kw)
    assert (o - ref).abs().max() <= 1e-12
    dout = torch.randn_like(o)
    for g, r in zip(torch.autograd.grad(o, (q, k, v), dout), torch.autograd.grad(ref, (q, k, v), dout)):
        assert (g - r).abs().max() <= 1e-11 * max(1.0, r.abs().max())


@needs_sdpa
@pytest.mark.parametrize("shapes", [
    ((7, 8), (5, 8)),  # [L, E]
    ((3, 7, 8), (3, 12, 8)),  # [H, L, E]
    ((2, 3, 2, 7, 8), (2, 3, 2, 12, 8)),  # two batch dims
    ((2, 3, 7, 8), (1, 3, 12, 8)),  # a batch dim broadcast
])
def test_other_ranks_and_broadcast_batch_dims_as_pytorch(shapes):
    q, k, v = tensors(*shapes, seed=11)
    for is_causal in (False, True):
        o = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        ref = pytorch_sdpa(q, k, v, is_causal=is_causal)
        assert o.shape == ref.shape and (o - ref).abs().max() <= 1e-12
        grads = torch.autograd.grad(o.sum(), (q, k, v))
        for g, r in zip(grads, torch.autograd.grad(ref.sum(), (q, k, v))):
            assert g.shape == r.shape and (g - r).abs().max() <= 1e-11


@needs_sdpa
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
def test_float32_and_16_bit_tensors_near_pytorchs(dtype, tol):
    q, k, v = (t.detach().to(dtype) for t in tensors((2, 4, 33, 64), (2, 2, 50, 64), seed=5))
    o = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref = pytorch_sdpa(*(t.double() for t in (q, k, v)), is_causal=True, enable_gqa=True)
    assert o.dtype == dtype and (o.double() - ref).abs().max() <= tol


def test_gradcheck():
    q, k, v = tensors((1, 4, 5, 8), (1, 2, 7, 8), seed=7)
    for is_causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, c: kattn.torch.scaled_dot_product_attention(a, b, c, is_causal=is_causal, enable_gqa=True),
            (q, k, v))
    q, k, v = tensors((1, 2, 9, 4), (1, 2, 3, 4), seed=8)  # more queries than keys: a shifted diagonal
    assert torch.autograd.gradcheck(
        lambda a, b, c: kattn.torch.scaled_dot_product_attention(a, b, c, is_causal=True), (q, k, v))


def test_is_causal_is_top_left_where_kattns_causal_is_bottom_right():
    q, k, v = (t.detach() for t in tensors((1, 2, 4, 8), (1, 2, 10, 8), seed=9))
    top_left = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(top_left, kattn.torch.attention(q, k[:, :, :4], v[:, :, :4], causal=True, layout="bhnd"))
    bottom_right = kattn.torch.attention(q, k, v, causal=True, layout="bhnd")
    assert (top_left - bottom_right).abs().max() > 0.1


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.bool)),
     "attn_mask: expected a shape that broadcasts to (1, 2, 4, 6), got (5, 6)"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k, v, dropout_p=0.1), "dropout_p: expected 0.0"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k[:, :1], v[:, :1]),
     "key: expected the heads of query (2, dim -3), got 1: different head counts (grouped-query attention) need "
     "enable_gqa=True"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k.float(), v), "key: expected the dtype of query"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k, v[0]), "value: expected the rank of query (4"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k, v[..., :5]),
     "value: expected the head dim of query and key (8), got 5 (kattn's Ev is E)"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q, k, v, scale=0.0), "scale: expected a non-zero"),
    (lambda q, k, v: kattn.torch.scaled_dot_product_attention(q.numpy(), k, v), "query: expected a torch.Tensor"),
])
def test_what_kattn_does_not_do_is_refused_naming_it(call, message):
    q, k, v = (t.detach() for t in tensors((1, 2, 4, 8), (1, 2, 6, 8), seed=10))
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(q, k, v)


def test_a_tensor_on_a_device_kattn_does_not_run_on_is_refused_by_name():
    # (kattn.torch's custom ops give a meta tensor the fake implementation's result, as any op does.)
    q, k, v = (torch.empty(1, 2, 4, 8, device="meta") for _ in range(3))
    with pytest.raises(kattn.Error, match=re.escape("q: a tensor on meta: kattn takes NumPy arrays, CPU tensors")):
        kattn.attention(q, k, v)
    with pytest.raises(kattn.Error, match=re.escape("k: expected a tensor on the CPU (q's device), got one on meta")):
        kattn.attention(torch.zeros(1, 2, 4, 8), k, v)
