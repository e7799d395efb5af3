"""kattn.torch.attention (autograd) and PyTorch CPU tensors through DLPack, against PyTorch's own
attention math in float64."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402
from reference import torch_textbook  # noqa: E402


def tensors(b, hq, hkv, nq, nk, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, dtype=dtype, generator=g).requires_grad_()  # noqa: E731
    return make(b, hq, nq, d), make(b, hkv, nk, d), make(b, hkv, nk, d)


OPTIONS = [{}, {"causal": True}, {"window": (3, 1)}, {"softcap": 2.0, "scale": 0.3}, {"causal": True, "window": (4, -1)}]


@pytest.mark.parametrize("opt", OPTIONS)
@pytest.mark.parametrize("shape", [(1, 2, 2, 5, 5, 4), (2, 4, 2, 6, 9, 8), (1, 3, 1, 1, 7, 4)])
def test_gradcheck_in_float64(opt, shape):
    q, k, v = tensors(*shape, seed=len(opt))
    assert torch.autograd.gradcheck(lambda a, b, c: kattn.torch.attention(a, b, c, layout="bhnd", **opt), (q, k, v))


@pytest.mark.parametrize("opt", OPTIONS)
def test_forward_and_gradients_equal_pytorch_math(opt):
    q, k, v = tensors(2, 4, 2, 33, 40, 16, seed=3)
    dout = torch.randn(2, 4, 33, 16, dtype=torch.float64)
    o = kattn.torch.attention(q, k, v, layout="bhnd", **opt)
    grads = torch.autograd.grad(o, (q, k, v), dout)
    ref = torch_textbook(q, k, v, **opt)
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
    assert (o - ref).abs().max() <= 1e-12
    for g, r in zip(grads, ref_grads):
        assert (g - r).abs().max() <= 1e-10 * max(1.0, r.abs().max())


def test_float32_and_the_bnhd_layout():
    q, k, v = tensors(1, 4, 4, 50, 50, 32, dtype=torch.float32, seed=4)
    qb, kb, vb = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))  # [B, N, H, D] views
    o = kattn.torch.attention(qb, kb, vb, causal=True, layout="bnhd")
    o.sum().backward()
    ref = torch_textbook(q, k, v, causal=True)
    ref.sum().backward()
    assert o.dtype == torch.float32
    assert (o.transpose(1, 2) - ref).abs().max() <= 2e-5
    assert (qb.grad.transpose(1, 2) - q.grad).abs().max() <= 1e-4


def test_a_non_contiguous_incoming_gradient():
    q, k, v = tensors(1, 2, 2, 8, 8, 8, seed=5)
    o = kattn.torch.attention(q, k, v, layout="bhnd")
    dout = torch.randn(1, 2, 8, 8, dtype=torch.float64).transpose(-1, -2).contiguous().transpose(-1, -2)
    assert dout.stride(-1) != 1
    g = torch.autograd.grad(o, q, dout)[0]
    assert (g - torch.autograd.grad(torch_textbook(q, k, v), q, dout)[0]).abs().max() <= 1e-12


def test_plain_functions_take_tensors_in_place_and_give_tensors():
    q, k, v = (t.detach() for t in tensors(2, 4, 2, 9, 9, 8, seed=6))
    o, lse = kattn.attention(q, k, v, layout="bhnd", return_lse=True)
    assert isinstance(o, torch.Tensor) and isinstance(lse, torch.Tensor) and o.shape == q.shape
    assert (o - torch_textbook(q, k, v)).abs().max() <= 1e-12
    dq, dk, dv = kattn.attention_backward(q, k, v, o, lse, torch.ones_like(o), layout="bhnd")
    assert isinstance(dq, torch.Tensor) and dk.shape == k.shape
    # Read in place: the array kattn sees is the tensor's memory.
    a = kattn._arrays.as_array(q, "q")
    assert a.__array_interface__["data"][0] == q.data_ptr()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v: kattn.attention(q, k, v), "q: requires grad; use kattn.torch (attention"),
        (lambda q, k, v: kattn.torch.attention(q.detach().numpy(), k, v, layout="bhnd"), "q: expected a torch.Tensor"),
        (lambda q, k, v: kattn.torch.attention(q, k.float(), v, layout="bhnd"), "k: expected the dtype of q"),
        (lambda q, k, v: kattn.torch.attention(q, k[:, :, :, :2], v, layout="bhnd"), "k: expected head dim"),
        (lambda q, k, v: kattn.torch.attention(q, k, v, layout="nbhd"), "layout: expected"),
        (lambda q, k, v: kattn.torch.attention(q, k, v, layout="bhnd", window=(1,)), "window: expected (left, right)"),
    ],
)
def test_bad_input_raises_kattn_error(call, message):
    q, k, v = tensors(1, 2, 1, 4, 4, 8, seed=7)
    with pytest.raises(kattn.Error, match=re.escape(message)):
        call(q, k, v)


def test_second_derivatives_are_refused_not_dropped():
    q, k, v = tensors(1, 1, 1, 3, 3, 4, seed=8)
    o = kattn.torch.attention(q, k, v, layout="bhnd")
    with pytest.raises(RuntimeError, match=re.escape("second derivatives (create_graph=True) are not supported")):
        torch.autograd.grad(o.sum(), q, create_graph=True)
