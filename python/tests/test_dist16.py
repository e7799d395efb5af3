"""kattn.dist in 16-bit storage: float16 NumPy arrays and torch.float16 / torch.bfloat16 CPU
tensors through ring_attention, ulysses_attention and hybrid_attention, each rank's shard gathered
and held to FlashAttention's accuracy rule against the float64 textbook on the same 16-bit inputs;
deterministic bits equal to one rank's; fewer bytes sent than float32; the ring over a ragged
batch the float32 ring rounded once; a rank whose dtype differs refused on every rank.

Run by pytest alone (one rank) and by ctest under mpiexec with several ranks (python.dist16)."""
import re

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI", reason="mpi4py is not installed (Debian: python3-mpi4py)")
import kattn  # noqa: E402
import kattn.dist  # noqa: E402
from reference import assert_16bit_rule, round16, textbook, textbook16  # noqa: E402

if not hasattr(kattn._kattn, "dist_attention"):
    pytest.skip("kattn was built without its MPI layer (-DKATTN_ENABLE_MPI=ON)", allow_module_level=True)

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
U = 2 if P % 2 == 0 else 1  # hybrid's group size
KINDS = ["numpy-float16", "torch-float16", "torch-bfloat16"]


def problem16(kind, nq, nk, hq, hkv, d, seed):
    """q, k, v [B, N, H, D] of unit-normal values rounded to the kind's 16-bit type, as that kind,
    and their float32 values; the same on every rank."""
    rng = np.random.default_rng(seed)
    dtype = "bfloat16" if kind.endswith("bfloat16") else "float16"
    exact = [round16(rng.standard_normal((2, n, h, d)), dtype) for n, h in ((nq, hq), (nk, hkv), (nk, hkv))]
    if kind == "numpy-float16":
        return [x.astype(np.float16) for x in exact], exact, dtype
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    tdtype = torch.bfloat16 if dtype == "bfloat16" else torch.float16
    return [torch.from_numpy(x).to(tdtype) for x in exact], exact, dtype


def call(name, comm, q, k, v, **kw):
    if name == "hybrid":
        return kattn.dist.hybrid_attention(comm, q, k, v, ulysses_size=U if comm.Get_size() == P else 1, **kw)
    return getattr(kattn.dist, name + "_attention")(comm, q, k, v, **kw)


def positions(name, n, comm, **kw):
    return kattn.dist.positions(n, comm, ulysses_size=(U if comm.Get_size() == P else 1) if name == "hybrid" else None,
                                **kw)


def as64(x):
    """A result (array or tensor, any of the four dtypes) as float64 NumPy."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    import torch

    return x.to(torch.float64).numpy()


def gathered(local, pos, n, axis):
    """The whole array from every rank's rows `pos` along `axis` (1 for o, 2 for lse)."""
    parts = COMM.allgather((pos, as64(local)))
    shape = list(parts[0][1].shape)
    shape[axis] = n
    whole = np.full(shape, np.nan)
    for p, part in parts:
        index = [slice(None)] * len(shape)
        index[axis] = p
        whole[tuple(index)] = part
    return whole


@pytest.mark.parametrize("name", ["ring", "ulysses", "hybrid"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "window": (20, 0)}])
@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
def test_16bit_shards_meet_the_rule(name, kind, opt, sharding):
    n = 61
    (q, k, v), exact, dtype = problem16(kind, n, n, 12, 4, 16, seed=n + len(opt))
    pos = positions(name, n, COMM, sharding=sharding)
    o, lse = call(name, COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, return_lse=True, **opt)
    assert type(o) is type(q) and o.dtype == q.dtype and str(lse.dtype).endswith("float32")
    ref_o, ref_lse, _ = textbook(*(x.astype(np.float64) for x in exact), **opt)
    tb_o = textbook16(*exact, dtype, **opt)
    assert_16bit_rule(gathered(o, pos, n, 1), gathered(lse, pos, n, 2), ref_o, ref_lse, tb_o)


@pytest.mark.parametrize("name", ["ring", "ulysses", "hybrid"])
@pytest.mark.parametrize("kind", ["numpy-float16", "torch-bfloat16"])
def test_deterministic_bits_are_one_ranks(name, kind):
    n = 70
    (q, k, v), _, _ = problem16(kind, n, n, 12, 6, 8, seed=3)
    det = dict(causal=True, deterministic=True, chunk=16)
    pos = positions(name, n, COMM, deterministic=True, chunk=16)
    o = call(name, COMM, q[:, pos], k[:, pos], v[:, pos], **det)
    alone = call(name, COMM.Split(COMM.Get_rank(), 0), q, k, v, **det)
    assert as64(o).tobytes() == as64(alone[:, pos]).tobytes()


@pytest.mark.parametrize("name", ["ulysses", "hybrid"])
def test_16bit_sends_fewer_bytes_than_float32(name):
    (q, k, v), exact, _ = problem16("numpy-float16", 64, 64, 12, 4, 16, seed=5)
    pos = positions(name, 64, COMM)
    _, half = call(name, COMM, q[:, pos], k[:, pos], v[:, pos], return_stats=True)
    _, full = call(name, COMM, *(x[:, pos] for x in exact), return_stats=True)
    if P == 1:
        assert half["bytes_sent"] == full["bytes_sent"] == 0
    elif name == "hybrid" and U == 1:  # a ring alone: K/V only
        assert 2 * half["bytes_sent"] == full["bytes_sent"]
    else:  # q, k, v, o in 16 bits, lse in float32 in both
        assert full["bytes_sent"] / 2 < half["bytes_sent"] < full["bytes_sent"] * 0.6


@pytest.mark.parametrize("kind", ["numpy-float16", "torch-bfloat16"])
@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
def test_ragged_ring_in_16_bits_is_the_float32_ring_rounded_once(kind, sharding):
    """A packed batch (an empty sequence among them) through ragged_ring_attention and its
    backward in 16 bits: o and the gradients are the float32 ring's on the same values, rounded
    once, bit for bit; lse is its lse; K/V travel in 16 bits."""
    unit = P * (2 if sharding == "zigzag" else 1)
    indptr = np.cumsum([0] + [unit * n for n in (3, 0, 5, 1)])
    dtype = "bfloat16" if kind.endswith("bfloat16") else "float16"
    rng = np.random.default_rng(21)
    rows = kattn.dist.ragged_positions(indptr, COMM, sharding=sharding)
    exact = [round16(rng.standard_normal((indptr[-1], h, 16)), dtype)[rows] for h in (4, 2, 2, 4)]  # q, k, v, dout
    if kind == "numpy-float16":
        x16 = [x.astype(np.float16) for x in exact]
    else:
        torch = pytest.importorskip("torch", reason="PyTorch is not installed")
        x16 = [torch.from_numpy(x).to(torch.bfloat16) for x in exact]
    q, kw = x16[0], dict(causal=True, sharding=sharding)
    o, lse, s16 = kattn.dist.ragged_ring_attention(COMM, *x16[:3], indptr, indptr, return_lse=True, return_stats=True,
                                                   **kw)
    of, lsef, s32 = kattn.dist.ragged_ring_attention(COMM, *exact[:3], indptr, indptr, return_lse=True,
                                                     return_stats=True, **kw)
    assert type(o) is type(q) and o.dtype == q.dtype
    assert np.array_equal(as64(o), round16(of, dtype)) and np.array_equal(as64(lse), as64(lsef))
    assert 2 * s16["bytes_sent"] == s32["bytes_sent"]
    grads = kattn.dist.ragged_ring_attention_backward(COMM, *x16[:3], o, lse, x16[3], indptr, indptr, **kw)
    wide = kattn.dist.ragged_ring_attention_backward(COMM, *exact[:3], as64(o).astype(np.float32), lsef, exact[3],
                                                     indptr, indptr, **kw)
    for g, w in zip(grads, wide):
        assert g.dtype == q.dtype and np.array_equal(as64(g), round16(w, dtype))
    if kind.startswith("torch"):  # autograd: the same gradients
        import kattn.torch as kattn_torch

        shards = [x.clone().requires_grad_() for x in x16[:3]]
        (kattn_torch.ragged_ring_attention(COMM, *shards, indptr, indptr, **kw) * x16[3]).sum().backward()
        for shard, g in zip(shards, grads):
            assert shard.grad.dtype == q.dtype and np.array_equal(as64(shard.grad), as64(g))


def test_a_rank_with_another_dtype_is_refused_on_every_rank():
    (q, k, v), exact, _ = problem16("numpy-float16", 8, 8, 2, 1, 8, seed=6)
    pos = kattn.dist.positions(8, COMM)
    last = P - 1
    shards = [(x if COMM.Get_rank() == last else e)[:, pos] for x, e in zip((q, k, v), exact)]
    expected = f"q: expected dtype f32 (from rank 0), got f16 on rank {last}" if P > 1 else None
    if expected is None:
        kattn.dist.ring_attention(COMM, *shards)
        return
    with pytest.raises(kattn.Error, match=re.escape(expected)):
        kattn.dist.ring_attention(COMM, *shards)
    with pytest.raises(kattn.Error, match=re.escape("k: expected the dtype of q (float16), got float32")):
        kattn.dist.ring_attention(COMM, q[:, pos], exact[1][:, pos], v[:, pos])
