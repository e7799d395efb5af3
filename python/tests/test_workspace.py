"""kattn.Workspace in the single-process calls: a loop of calls given one takes its scratch
buffers from it after the first (split partials, the backward's row sums and dQ partials, the
16-bit backward's float copies, the cascade's partials), with the results of calls without one."""
import numpy as np
import pytest

import kattn
from workspace_check import expect_reused


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_a_training_step_takes_its_buffers_from_the_workspace(dtype):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 40, 4, 16)).astype(dtype)
    k, v = (rng.standard_normal((2, 90, 2, 16)).astype(dtype) for _ in range(2))
    dout = rng.standard_normal(q.shape).astype(dtype)

    def step(**kw):
        o, lse = kattn.attention(q, k, v, causal=True, splits=3, return_lse=True, **kw)
        return (o, lse) + kattn.attention_backward(q, k, v, o, lse, dout, causal=True, **kw)

    expect_reused(step)


def test_ragged_decode_and_cascade_take_their_buffers_from_the_workspace():
    rng = np.random.default_rng(6)
    q_indptr, kv_indptr = np.array([0, 3, 4, 4, 11]), np.array([0, 250, 290, 299, 599])
    q = rng.standard_normal((11, 4, 16)).astype(np.float32)
    k, v = (rng.standard_normal((599, 2, 16)).astype(np.float32) for _ in range(2))
    kp, vp = (rng.standard_normal((50, 2, 16)).astype(np.float32) for _ in range(2))

    def step(**kw):
        o, lse = kattn.ragged_attention(q, k, v, q_indptr, kv_indptr, splits=4, return_lse=True, **kw)
        c = kattn.cascade_attention(q, kp, vp, q_indptr, kv=(k, v), kv_indptr=kv_indptr, causal=True, **kw)
        return o, lse, c

    expect_reused(step)


def test_a_workspace_says_what_it_holds():
    ws = kattn.Workspace()
    assert repr(ws) == "kattn.Workspace(bytes=0, allocations=0)"
    q = np.zeros((1, 8, 2, 8), np.float32)
    kattn.attention_backward(q, q, q, q, np.zeros((1, 2, 8), np.float32), q, workspace=ws)
    assert repr(ws) == f"kattn.Workspace(bytes={ws.bytes}, allocations={ws.allocations})" and ws.bytes > 0


def test_a_workspace_of_another_type_is_refused():
    q = np.zeros((1, 4, 1, 8), np.float32)
    with pytest.raises(kattn.Error, match="workspace: expected a kattn.Workspace or None, got dict"):
        kattn.attention(q, q, q, workspace={})


def test_torch_attention_shares_a_workspace_between_forward_and_backward():
    torch = pytest.importorskip("torch")
    import kattn.torch

    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 4, 64, 16, generator=gen, requires_grad=True) for _ in range(3))

    def step(**kw):
        for t in (q, k, v):
            t.grad = None
        o = kattn.torch.attention(q, k, v, causal=True, layout="bhnd", **kw)
        o.square().sum().backward()
        return tuple(t.detach().numpy().copy() for t in (o, q.grad, k.grad, v.grad))

    expect_reused(step)
