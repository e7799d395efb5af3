"""Gradients across MPI ranks from Python: kattn.dist's *_backward functions and kattn.torch's
distributed autograd functions give every rank its shard of the one-process gradients (float64, to
1e-12), deterministic gradients bitwise one rank's, and a bad argument on one rank the same error
on every rank.

Run by pytest alone (one rank) and by ctest under mpiexec with several ranks (python.dist.np*)."""
import re

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI", reason="mpi4py is not installed (Debian: python3-mpi4py)")
import kattn  # noqa: E402
import kattn.dist  # noqa: E402

if not hasattr(kattn._kattn, "dist_attention_backward"):
    pytest.skip("kattn was built without its MPI layer (-DKATTN_ENABLE_MPI=ON)", allow_module_level=True)

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
U = 2 if P % 2 == 0 else 1  # hybrid's group size
NAMES = ["ring", "ulysses", "hybrid", "grid"]


def problem(n, hq, hkv, d, seed):
    """q, k, v, dout [2, n, H, D] in float64, the same on every rank."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, n, h, d)) for h in (hq, hkv, hkv, hq)]


def group_size(name, comm):
    return (U if comm.Get_size() == P else 1) if name == "hybrid" else None


def forward(name, comm, q, k, v, **kw):
    extra = {"ulysses_size": group_size(name, comm)} if name == "hybrid" else {}
    return getattr(kattn.dist, name + "_attention")(comm, q, k, v, return_lse=True, **extra, **kw)


def backward(name, comm, q, k, v, o, lse, dout, **kw):
    extra = {"ulysses_size": group_size(name, comm)} if name == "hybrid" else {}
    return getattr(kattn.dist, name + "_attention_backward")(comm, q, k, v, o, lse, dout, **extra, **kw)


def positions(name, n, comm, **kw):
    return kattn.dist.positions(n, comm, ulysses_size=group_size(name, comm), **kw)


def assert_close(got, ref):
    assert got.shape == ref.shape
    assert np.abs(got - ref).max(initial=0.0) <= 1e-12 * max(1.0, np.abs(ref).max(initial=0.0))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "window": (9, 0)}, {"softcap": 5.0}])
@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
def test_gradients_are_the_shards_of_one_process(name, opt, sharding):
    n = 37  # not a multiple of 2P at 2 or 3 ranks: uneven shards
    q, k, v, dout = problem(n, 12, 4, 16, seed=n + len(opt))
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    ref = kattn.attention_backward(q, k, v, o, lse, dout, **opt)
    pos = positions(name, n, COMM, sharding=sharding)
    o_r, lse_r = forward(name, COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, **opt)
    grads = backward(name, COMM, q[:, pos], k[:, pos], v[:, pos], o_r, lse_r, dout[:, pos], sharding=sharding, **opt)
    for got, whole in zip(grads, ref):
        assert_close(got, whole[:, pos])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
def test_sinks_forward_and_gradients_are_one_process_and_dsinks_the_same_bits(name, sharding):
    n = 37
    q, k, v, dout = problem(n, 12, 4, 16, seed=41)
    sinks = np.linspace(-2.0, 3.0, 12)
    sinks[5] = -np.inf
    opt = dict(causal=True, sinks=sinks)
    o, lse = kattn.attention(q, k, v, return_lse=True, **opt)
    dq, dk, dv, dsinks = kattn.attention_backward(q, k, v, o, lse, dout, **opt)
    pos = positions(name, n, COMM, sharding=sharding)
    o_r, lse_r = forward(name, COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, **opt)
    assert_close(o_r, o[:, pos])
    assert_close(lse_r, lse[:, :, pos])
    got = backward(name, COMM, q[:, pos], k[:, pos], v[:, pos], o_r, lse_r, dout[:, pos], sharding=sharding, **opt)
    assert len(got) == 4
    for g, whole in zip(got[:3], (dq, dk, dv)):
        assert_close(g, whole[:, pos])
    # An exact sum over every rank's rows: o differs from one process's in its last bits, so dsinks
    # is compared to 1e-12; on every rank it is the same bits.
    assert_close(got[3], dsinks)
    assert len({x.tobytes() for x in COMM.allgather(got[3])}) == 1


def test_bad_sinks_are_refused_on_every_rank():
    q, k, v, _ = problem(8, 4, 2, 8, seed=1)
    pos = positions("ring", 8, COMM)
    with pytest.raises(kattn.Error, match="sinks"):
        kattn.dist.ring_attention(COMM, q[:, pos], k[:, pos], v[:, pos], sinks=[[1.0]] if COMM.Get_rank() == 0 else [1.0] * 4)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_gradients_are_bitwise_one_ranks(name):
    n = 70
    q, k, v, dout = problem(n, 24, 12, 8, seed=3)  # Ulysses' deterministic mode: whole GQA groups at 1-4 ranks
    det = dict(causal=True, deterministic=True, chunk=16)
    pos = positions(name, n, COMM, deterministic=True, chunk=16)
    o, lse = forward(name, COMM, q[:, pos], k[:, pos], v[:, pos], **det)
    grads = backward(name, COMM, q[:, pos], k[:, pos], v[:, pos], o, lse, dout[:, pos], **det)
    alone = COMM.Split(COMM.Get_rank(), 0)
    o1, lse1 = forward(name, alone, q, k, v, **det)
    for got, whole in zip(grads, backward(name, alone, q, k, v, o1, lse1, dout, **det)):
        assert got.tobytes() == np.ascontiguousarray(whole[:, pos]).tobytes()


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "softcap": 5.0},
                                 {"causal": True, "window": (3, 0)}, {"window": (2, 5)}])
def test_ragged_gradients_are_the_rows_of_one_process(sharding, opt):
    lens = [4 * P, 0, 2 * P, 6 * P]  # multiples of 2P (zigzag's pieces); one empty sequence
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rng = np.random.default_rng(17)
    q, k, v, dout = (rng.standard_normal((indptr[-1], h, 16)) for h in (4, 2, 2, 4))
    o, lse = kattn.ragged_attention(q, k, v, indptr, indptr, return_lse=True, **opt)
    ref = kattn.ragged_attention_backward(q, k, v, o, lse, dout, indptr, indptr, **opt)
    rows = kattn.dist.ragged_positions(indptr, COMM, sharding=sharding)
    o_r, lse_r = kattn.dist.ragged_ring_attention(COMM, q[rows], k[rows], v[rows], indptr, indptr, sharding=sharding,
                                                  return_lse=True, **opt)
    grads = kattn.dist.ragged_ring_attention_backward(COMM, q[rows], k[rows], v[rows], o_r, lse_r, dout[rows], indptr,
                                                      indptr, sharding=sharding, **opt)
    for got, whole in zip(grads, ref):
        assert_close(got, whole[rows])


@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "window": (6, 0)}])
def test_deterministic_ragged_ring_is_bitwise_one_ranks(opt):
    """Deterministic mode over a ragged batch: any lengths (each sequence cut on whole chunks), o,
    lse and the gradients bitwise what one rank alone gets, and close to one process's."""
    lens = [37, 0, 1, 70, 16]
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rng = np.random.default_rng(29)
    q, k, v, dout = (rng.standard_normal((indptr[-1], h, 8)) for h in (4, 2, 2, 4))
    det = dict(deterministic=True, chunk=8, **opt)

    def run(comm, rows):
        o, lse = kattn.dist.ragged_ring_attention(comm, q[rows], k[rows], v[rows], indptr, indptr, return_lse=True,
                                                  **det)
        grads = kattn.dist.ragged_ring_attention_backward(comm, q[rows], k[rows], v[rows], o, lse, dout[rows], indptr,
                                                          indptr, **det)
        return (o, lse, *grads)

    alone = run(COMM.Split(COMM.Get_rank(), 0), np.arange(indptr[-1]))
    rows = kattn.dist.ragged_positions(indptr, COMM, deterministic=True, chunk=8)
    for got, one in zip(run(COMM, rows), alone):
        assert got.tobytes() == np.ascontiguousarray(one[rows]).tobytes()
    o, lse = kattn.ragged_attention(q, k, v, indptr, indptr, return_lse=True, **opt)
    for got, whole in zip(alone, (o, lse, *kattn.ragged_attention_backward(q, k, v, o, lse, dout, indptr, indptr,
                                                                           **opt))):
        assert_close(got, whole)


def test_a_bad_dout_or_lse_on_one_rank_is_refused_on_every_rank():
    n = 16
    q, k, v, dout = problem(n, 2, 1, 8, seed=5)
    pos = kattn.dist.positions(n, COMM)
    o, lse = kattn.dist.ring_attention(COMM, q[:, pos], k[:, pos], v[:, pos], return_lse=True)
    last = COMM.Get_rank() == P - 1
    bad_dout = dout[:, pos][..., :4] if last else dout[:, pos]  # the wrong head dim on the last rank
    with pytest.raises(kattn.Error) as e:
        kattn.dist.ring_attention_backward(COMM, q[:, pos], k[:, pos], v[:, pos], o, lse, bad_dout)
    messages = COMM.allgather(str(e.value))
    assert len(set(messages)) == 1 and "do: expected head dim 8" in messages[0]
    with pytest.raises(kattn.Error, match=re.escape("lse: expected a NumPy array or a CPU tensor")):
        kattn.dist.ring_attention_backward(COMM, q[:, pos], k[:, pos], v[:, pos], o, None if last else lse,
                                           dout[:, pos])
    with pytest.raises(kattn.Error, match="lse"):  # lse in float32 under float64 shards
        kattn.dist.ring_attention_backward(COMM, q[:, pos], k[:, pos], v[:, pos], o,
                                           lse.astype(np.float32) if last else lse, dout[:, pos])


@pytest.mark.parametrize("name", NAMES)
def test_torch_autograd_gives_each_rank_its_gradients(name):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import kattn.torch

    n = 45
    arrays = [torch.from_numpy(x.transpose(0, 2, 1, 3).copy()) for x in problem(n, 6 * U, 3, 16, seed=9)]
    q, k, v, dout = arrays  # [B, H, N, D]
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    (kattn.torch.attention(*whole, causal=True, layout="bhnd") * dout).sum().backward()
    pos = torch.from_numpy(positions(name, n, COMM, sharding="zigzag"))
    shards = [x[:, :, pos].clone().requires_grad_() for x in (q, k, v)]
    call = getattr(kattn.torch, name + "_attention")
    extra = {"ulysses_size": U} if name == "hybrid" else {}
    o = call(COMM, *shards, causal=True, layout="bhnd", sharding="zigzag", **extra)
    (o * dout[:, :, pos]).sum().backward()
    for shard, ref in zip(shards, whole):
        assert_close(shard.grad.numpy(), ref.grad[:, :, pos].numpy())


@pytest.mark.parametrize("opt", [{"causal": True}, {"causal": True, "window": (5, 0)},
                                 {"causal": True, "deterministic": True, "chunk": 4}])
def test_torch_autograd_over_a_ragged_batch(opt):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import kattn.torch

    mode = {key: opt.pop(key) for key in ("deterministic", "chunk") if key in opt}
    lens = [2 * P, 6 * P, 4 * P] if not mode else [5, 27, 9]  # the deterministic mode takes any lengths
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rng = np.random.default_rng(23)
    q, k, v, dout = (torch.from_numpy(rng.standard_normal((indptr[-1], h, 8))) for h in (2, 1, 1, 2))
    o, lse = kattn.ragged_attention(q, k, v, indptr, indptr, return_lse=True, **opt)
    ref = kattn.ragged_attention_backward(q, k, v, o, lse, dout, indptr, indptr, **opt)
    opt.update(mode)
    rows = torch.from_numpy(kattn.dist.ragged_positions(indptr, COMM, **mode))
    shards = [x[rows].clone().requires_grad_() for x in (q, k, v)]
    o_r = kattn.torch.ragged_ring_attention(COMM, *shards, indptr, indptr, **opt)
    assert_close(o_r.detach().numpy(), o[rows].numpy())
    (o_r * dout[rows]).sum().backward()
    for shard, whole in zip(shards, ref):
        assert_close(shard.grad.numpy(), whole[rows].numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_autograd_in_16_bits(dtype):
    """16-bit shards run the same backward (float accumulation, gradients rounded once; the C++
    tests hold it to FlashAttention's rule): here, within two 16-bit epsilons (relative to the
    largest gradient) of float64's gradients on the same rounded inputs."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import kattn.torch

    n = 40
    q, k, v, dout = (torch.from_numpy(x.transpose(0, 2, 1, 3).copy()) for x in problem(n, 4, 2, 16, seed=12))
    tdtype = getattr(torch, dtype)
    q, k, v, dout = (x.to(tdtype) for x in (q, k, v, dout))  # the inputs as stored, rounded
    whole = [x.double().requires_grad_() for x in (q, k, v)]
    (kattn.torch.attention(*whole, causal=True, layout="bhnd") * dout.double()).sum().backward()
    pos = torch.from_numpy(kattn.dist.positions(n, COMM, sharding="zigzag"))
    shards = [x[:, :, pos].clone().requires_grad_() for x in (q, k, v)]
    o = kattn.torch.ring_attention(COMM, *shards, causal=True, layout="bhnd", sharding="zigzag")
    assert o.dtype == tdtype
    (o * dout[:, :, pos]).sum().backward()
    for shard, ref in zip(shards, whole):
        assert shard.grad.dtype == tdtype
        expected = ref.grad[:, :, pos]
        bound = 2 * torch.finfo(tdtype).eps * expected.abs().max().item()  # measured: a fifth of it
        assert (shard.grad.double() - expected).abs().max().item() <= bound


def test_torch_autograd_reaches_the_sinks():
    """kattn.torch's distributed calls take a sinks tensor: its gradient is that of every rank's
    loss together (the ring's dk and dv are too), the same on every rank: one process's sinks.grad."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import kattn.torch

    n = 29
    q, k, v, dout = (torch.from_numpy(x.transpose(0, 2, 1, 3).copy()) for x in problem(n, 4, 2, 8, seed=5))
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    sinks_whole = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    (kattn.torch.attention(*whole, causal=True, sinks=sinks_whole, layout="bhnd") * dout).sum().backward()
    pos = torch.from_numpy(kattn.dist.positions(n, COMM, sharding="zigzag"))
    shards = [x[:, :, pos].clone().requires_grad_() for x in (q, k, v)]
    sinks = sinks_whole.detach().clone().requires_grad_()
    o = kattn.torch.ring_attention(COMM, *shards, causal=True, sinks=sinks, layout="bhnd", sharding="zigzag")
    (o * dout[:, :, pos]).sum().backward()
    for shard, ref in zip(shards, whole):
        assert_close(shard.grad.numpy(), ref.grad[:, :, pos].numpy())
    assert_close(sinks.grad.numpy(), sinks_whole.grad.numpy())


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("bias_shape", [(2, 12), (1, 12), (2, 1)])
def test_ring_takes_each_ranks_rows_of_a_bias(sharding, bias_shape):
    """A bias on the ring: each rank passes its query rows over every key; o and the gradients are
    the shards of one process's with the whole bias. Other schemes refuse one on every rank."""
    n = 37
    q, k, v, dout = problem(n, 12, 4, 16, seed=41)
    bias = np.random.default_rng(43).standard_normal(bias_shape + (n, n))
    opt = dict(causal=True, window=(20, 0))
    o, lse = kattn.attention(q, k, v, return_lse=True, bias=bias, **opt)
    ref = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, **opt)
    pos = positions("ring", n, COMM, sharding=sharding)
    mine = np.ascontiguousarray(bias[:, :, pos])
    o_r, lse_r = forward("ring", COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, bias=mine, **opt)
    assert_close(o_r, o[:, pos])
    grads = backward("ring", COMM, q[:, pos], k[:, pos], v[:, pos], o_r, lse_r, dout[:, pos], sharding=sharding,
                     bias=mine, **opt)
    for got, whole in zip(grads, ref):
        assert_close(got, whole[:, pos])
    refused = "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got grid"
    with pytest.raises(kattn.Error, match=re.escape(refused)):
        forward("grid", COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, bias=mine, **opt)


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("bias_shape", [(2, 12), (1, 12), (2, 1), (1, 1)])
def test_ring_bias_grad_is_each_ranks_rows_of_one_process_dbias(sharding, bias_shape):
    """bias_grad=True on the ring: last, this rank's rows of the bias's gradient (summed over the
    bias's broadcast dims, in its shape and dtype), the rows of one process's dbias."""
    n = 37
    q, k, v, dout = problem(n, 12, 4, 16, seed=47)
    bias = np.random.default_rng(53).standard_normal(bias_shape + (n, n))
    opt = dict(causal=True, window=(20, 0), softcap=5.0)
    o, lse = kattn.attention(q, k, v, return_lse=True, bias=bias, **opt)
    *ref, dbias = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, bias_grad=True, **opt)
    pos = positions("ring", n, COMM, sharding=sharding)
    mine = np.ascontiguousarray(bias[:, :, pos])
    o_r, lse_r = forward("ring", COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, bias=mine, **opt)
    *grads, dbias_r = backward("ring", COMM, q[:, pos], k[:, pos], v[:, pos], o_r, lse_r, dout[:, pos],
                               sharding=sharding, bias=mine, bias_grad=True, **opt)
    for got, whole in zip(grads, ref):
        assert_close(got, whole[:, pos])
    assert dbias_r.dtype == mine.dtype
    assert_close(dbias_r, dbias[:, :, pos])


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("bias_heads", [12, 1])
def test_ulysses_takes_each_ranks_heads_of_a_bias(sharding, bias_heads):
    """A bias under ulysses: each rank passes its heads over every query row and key (a one-head bias
    as it is); o, the gradients and dbias (its heads', or their sum) are one process's."""
    n, hq = 37, 12
    q, k, v, dout = problem(n, hq, 4, 16, seed=59)
    drawn = np.random.default_rng(61).standard_normal((2, bias_heads, n, n))
    bias = np.broadcast_to(drawn, (2, hq, n, n)).copy()
    opt = dict(causal=True, window=(20, 0), softcap=5.0)
    o, lse = kattn.attention(q, k, v, return_lse=True, bias=bias, **opt)
    *ref, dbias = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, bias_grad=True, **opt)
    pos = positions("ulysses", n, COMM, sharding=sharding)
    heads = slice(COMM.Get_rank() * hq // P, (COMM.Get_rank() + 1) * hq // P)
    mine = np.ascontiguousarray(drawn[:, heads] if bias_heads == hq else drawn)
    o_r, lse_r = forward("ulysses", COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, bias=mine, **opt)
    assert_close(o_r, o[:, pos])
    *grads, dbias_r = backward("ulysses", COMM, q[:, pos], k[:, pos], v[:, pos], o_r, lse_r, dout[:, pos],
                               sharding=sharding, bias=mine, bias_grad=True, **opt)
    for got, whole in zip(grads, ref):
        assert_close(got, whole[:, pos])
    assert_close(dbias_r, dbias[:, heads] if bias_heads == hq else dbias[:, heads].sum(axis=1, keepdims=True))


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("bias_heads", [12, 1])
def test_hybrid_takes_each_ranks_heads_over_its_groups_rows_of_a_bias(sharding, bias_heads):
    """A bias under hybrid: each rank passes its heads (those of its member index in its group of U)
    over its group's query rows (the ring's over the groups: the positions of the communicator of
    the ranks with its member index) and every key; o, the gradients and dbias are one process's."""
    n, hq = 37, 12
    q, k, v, dout = problem(n, hq, 4, 16, seed=67)
    drawn = np.random.default_rng(71).standard_normal((2, bias_heads, n, n))
    bias = np.broadcast_to(drawn, (2, hq, n, n)).copy()
    opt = dict(causal=True, window=(20, 0), softcap=5.0)
    o, lse = kattn.attention(q, k, v, return_lse=True, bias=bias, **opt)
    *ref, dbias = kattn.attention_backward(q, k, v, o, lse, dout, bias=bias, bias_grad=True, **opt)
    pos = positions("hybrid", n, COMM, sharding=sharding)
    group, member = divmod(COMM.Get_rank(), U)
    ring = COMM.Split(member, group)  # the ring across the groups
    rows = positions("ring", n, ring, sharding=sharding)
    ring.Free()
    heads = slice(member * hq // U, (member + 1) * hq // U)
    mine = np.ascontiguousarray((drawn[:, heads] if bias_heads == hq else drawn)[:, :, rows])
    o_r, lse_r = forward("hybrid", COMM, q[:, pos], k[:, pos], v[:, pos], sharding=sharding, bias=mine, **opt)
    assert_close(o_r, o[:, pos])
    assert_close(lse_r, lse[:, :, pos])
    *grads, dbias_r = backward("hybrid", COMM, q[:, pos], k[:, pos], v[:, pos], o_r, lse_r, dout[:, pos],
                               sharding=sharding, bias=mine, bias_grad=True, **opt)
    for got, whole in zip(grads, ref):
        assert_close(got, whole[:, pos])
    expected = dbias[:, heads] if bias_heads == hq else dbias[:, heads].sum(axis=1, keepdims=True)
    assert_close(dbias_r, expected[:, :, rows])


def test_bias_grad_is_refused_on_every_rank_without_a_float_bias_or_off_the_ring():
    n = 16
    q, k, v, dout = problem(n, 4, 2, 8, seed=7)
    pos = positions("ring", n, COMM)
    shards = (q[:, pos], k[:, pos], v[:, pos])
    o, lse = forward("ring", COMM, *shards)
    with pytest.raises(kattn.Error, match=re.escape("bias_grad: the gradient of a bias, but the call has no bias")):
        backward("ring", COMM, *shards, o, lse, dout[:, pos], bias_grad=True)
    mask = np.ones((1, 1, len(pos), n), dtype=bool)
    with pytest.raises(kattn.Error, match=re.escape("bias_grad: a boolean bias (a mask) has no gradient")):
        backward("ring", COMM, *shards, o, lse, dout[:, pos], bias=mask, bias_grad=True)
    bias = np.zeros((1, 1, len(pos), n))
    refused = "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got grid"
    with pytest.raises(kattn.Error, match=re.escape(refused)):
        backward("grid", COMM, *shards, o, lse, dout[:, pos], bias=bias, bias_grad=True)
