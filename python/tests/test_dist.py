"""kattn.dist.ring_attention over an mpi4py communicator equals single-process attention.

Run by pytest alone (one rank) and by ctest under mpiexec with several ranks
(python.dist_mpi): every rank checks its own shard."""
import re

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI", reason="mpi4py is not installed (Debian: python3-mpi4py)")
import kattn  # noqa: E402
import kattn.dist  # noqa: E402
from workspace_check import expect_reused  # noqa: E402

if not hasattr(kattn._kattn, "dist_attention"):
    pytest.skip("kattn was built without its MPI layer (-DKATTN_ENABLE_MPI=ON)", allow_module_level=True)

COMM = MPI.COMM_WORLD


def global_problem(nq, nk, hq, hkv, d, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)  # the same on every rank
    return (rng.standard_normal((2, n, h, d)).astype(dtype) for n, h in ((nq, hq), (nk, hkv), (nk, hkv)))


@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"window": (7, 0)}, {"causal": True, "softcap": 10.0}])
@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("lengths", [(50, 50), (13, 41), (3, 3)])  # fewer positions than ranks too
def test_ring_equals_attention_on_every_shard(opt, sharding, lengths):
    nq, nk = lengths
    q, k, v = global_problem(nq, nk, 4, 2, 16, seed=nq + nk)
    ref_o, ref_lse = kattn.attention(q, k, v, return_lse=True, **opt)
    qp = kattn.dist.positions(nq, COMM, sharding=sharding)
    kp = kattn.dist.positions(nk, COMM, sharding=sharding)
    o, lse = kattn.dist.ring_attention(COMM, q[:, qp], k[:, kp], v[:, kp], sharding=sharding, return_lse=True, **opt)
    assert np.abs(o - ref_o[:, qp]).max(initial=0.0) <= 1e-12
    finite = np.isfinite(ref_lse[:, :, qp])
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.abs(lse[finite] - ref_lse[:, :, qp][finite]).max(initial=0.0) <= 1e-12


@pytest.mark.parametrize("scheme", ["ring", "ulysses", "hybrid"])
def test_alibi_slopes_on_every_scheme_equal_attention_with_them(scheme):
    # 12 query heads divide over 1 to 4 ranks (ulysses); each rank's heads take their own slopes.
    n, hq = 48, 12
    q, k, v = global_problem(n, n, hq, 4, 8, seed=11)
    slopes = np.linspace(0.0, 1.0, hq)
    ref_o, ref_lse = kattn.attention(q, k, v, causal=True, alibi_slopes=slopes, return_lse=True)
    size = {"ulysses_size": 0} if scheme == "hybrid" else {}
    pos = kattn.dist.positions(n, COMM, scheme=scheme, **size)
    o, lse = kattn.dist.attention(COMM, q[:, pos], k[:, pos], v[:, pos], scheme=scheme, causal=True,
                                  alibi_slopes=slopes, return_lse=True, **size)
    assert np.abs(o - ref_o[:, pos]).max(initial=0.0) <= 1e-12
    assert np.abs(lse - ref_lse[:, :, pos]).max(initial=0.0) <= 1e-12
    dout = np.random.default_rng(12).standard_normal(q.shape)
    ref = kattn.attention_backward(q, k, v, ref_o, ref_lse, dout, causal=True, alibi_slopes=slopes)
    grads = kattn.dist.attention_backward(COMM, q[:, pos], k[:, pos], v[:, pos], o, lse, dout[:, pos], scheme=scheme,
                                          causal=True, alibi_slopes=slopes, **size)
    for got, want in zip(grads, ref):
        assert np.abs(got - want[:, pos]).max(initial=0.0) <= 1e-10


def _grid_shapes(p):
    return [(r, p // r) for r in range(1, p + 1) if p % r == 0] + [None]


@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"window": (7, 0)}])
@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
def test_grid_equals_attention_for_every_shape(opt, sharding):
    q, k, v = global_problem(50, 50, 4, 2, 16, seed=21)
    ref_o, ref_lse = kattn.attention(q, k, v, return_lse=True, **opt)
    pos = kattn.dist.positions(50, COMM, scheme="grid", sharding=sharding)
    for grid in _grid_shapes(COMM.Get_size()):
        o, lse = kattn.dist.attention(COMM, q[:, pos], k[:, pos], v[:, pos], scheme="grid", grid=grid,
                                      sharding=sharding, return_lse=True, **opt)
        assert np.abs(o - ref_o[:, pos]).max(initial=0.0) <= 1e-12
        assert np.abs(lse - ref_lse[:, :, pos]).max(initial=0.0) <= 1e-12
    # deterministic: one rank's bits
    qp = kattn.dist.positions(50, COMM, scheme="grid", sharding=sharding, deterministic=True, chunk=8)
    alone = kattn.dist.ring_attention(COMM.Split(COMM.Get_rank(), 0), q, k, v, deterministic=True, chunk=8, **opt)
    for grid in _grid_shapes(COMM.Get_size()):
        o = kattn.dist.grid_attention(COMM, q[:, qp], k[:, qp], v[:, qp], grid=grid, sharding=sharding,
                                      deterministic=True, chunk=8, **opt)
        assert np.array_equal(o, alone[:, qp])


@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "window": (3, 0)}])
def test_ragged_grid_equals_ragged_attention(opt):
    P = COMM.Get_size()
    lens = [4 * P, 0, 2 * P, 6 * P]
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rng = np.random.default_rng(13)
    q, k, v = (rng.standard_normal((indptr[-1], h, 16)) for h in (4, 2, 2))
    ref_o, ref_lse = kattn.ragged_attention(q, k, v, indptr, indptr, return_lse=True, **opt)
    for sharding in ("contiguous", "zigzag"):
        rows = kattn.dist.ragged_positions(indptr, COMM, sharding=sharding)
        for grid in _grid_shapes(P):
            o, lse = kattn.dist.attention(COMM, q[rows], k[rows], v[rows], scheme="grid", grid=grid,
                                          q_indptr=indptr, kv_indptr=indptr, sharding=sharding, return_lse=True,
                                          **opt)
            assert np.abs(o - ref_o[rows]).max(initial=0.0) <= 1e-12
            assert np.abs(lse - ref_lse[rows]).max(initial=0.0) <= 1e-12


def test_grid_shape_not_the_rank_count_raises_on_every_rank():
    q, k, v = global_problem(8, 8, 2, 1, 8, seed=5)
    pos = kattn.dist.positions(8, COMM)
    p = COMM.Get_size()
    with pytest.raises(kattn.Error, match=re.escape(f"grid: expected rows x cols = the {p} ranks, got {p + 1} x 1")):
        kattn.dist.attention(COMM, q[:, pos], k[:, pos], v[:, pos], scheme="grid", grid=(p + 1, 1))
    with pytest.raises(kattn.Error, match=re.escape("grid: expected (rows, cols), got 3")):
        kattn.dist.attention(COMM, q[:, pos], k[:, pos], v[:, pos], scheme="grid", grid=3)
    with pytest.raises(kattn.Error, match=re.escape(f"grid: expected rows x cols = the {p} ranks, got {p + 1} x 1")):
        kattn.dist.attention_backward(COMM, q[:, pos], k[:, pos], v[:, pos], q[:, pos], np.zeros((2, 2, len(pos))),
                                      q[:, pos], scheme="grid", grid=(p + 1, 1))


def test_deterministic_mode_is_bitwise_the_single_rank_result():
    q, k, v = global_problem(70, 70, 2, 1, 8, seed=3)
    qp = kattn.dist.positions(70, COMM, deterministic=True, chunk=16)
    o = kattn.dist.ring_attention(COMM, q[:, qp], k[:, qp], v[:, qp], causal=True, deterministic=True, chunk=16)
    # What one rank alone gets with the same chunk: every rank count gives these bits.
    alone = kattn.dist.ring_attention(COMM.Split(COMM.Get_rank(), 0), q, k, v, causal=True, deterministic=True,
                                      chunk=16)
    assert np.array_equal(o, alone[:, qp])


def test_bhnd_layout_and_stats():
    q, k, v = global_problem(40, 40, 4, 4, 8, seed=4)
    pos = kattn.dist.positions(40, COMM)
    o, stats = kattn.dist.ring_attention(COMM, *(x[:, pos].transpose(0, 2, 1, 3) for x in (q, k, v)), layout="bhnd",
                                         return_stats=True)
    assert np.abs(o.transpose(0, 2, 1, 3) - kattn.attention(q, k, v)[:, pos]).max() <= 1e-12
    assert stats["steps"] >= 1 and stats["seconds"] >= 0.0


def test_bad_input_on_one_rank_raises_the_same_error_on_every_rank():
    q, k, v = global_problem(8, 8, 2, 1, 8, seed=5)
    pos = kattn.dist.positions(8, COMM)
    last = COMM.Get_size() - 1
    kk = k[:, pos][..., :4] if COMM.Get_rank() == last else k[:, pos]  # the wrong head dim on the last rank
    with pytest.raises(kattn.Error) as e:
        kattn.dist.ring_attention(COMM, q[:, pos], kk, v[:, pos])
    messages = COMM.allgather(str(e.value))
    assert len(set(messages)) == 1 and "k:" in messages[0]
    # An int32 shard on one rank: still every rank raises.
    qq = q[:, pos].astype(np.int32) if COMM.Get_rank() == last else q[:, pos]
    with pytest.raises(kattn.Error, match=re.escape("q: expected float32, float64, float16 or bfloat16, got int32")):
        kattn.dist.ring_attention(COMM, qq, k[:, pos], v[:, pos])
    with pytest.raises(kattn.Error, match=re.escape('sharding: expected "contiguous" or "zigzag"')):
        kattn.dist.ring_attention(COMM, q[:, pos], k[:, pos], v[:, pos], sharding="striped")


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"causal": True, "softcap": 5.0},
                                 {"causal": True, "window": (3, 0)}, {"window": (2, 5)}])
def test_ragged_ring_equals_ragged_attention_on_every_rank(sharding, opt):
    # Lengths multiples of 2P: every sequence divides into zigzag's pieces; one is empty.
    P = COMM.Get_size()
    lens = [4 * P, 0, 2 * P, 6 * P]
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rng = np.random.default_rng(11)  # the same on every rank
    q, k, v = (rng.standard_normal((indptr[-1], h, 16)) for h in (4, 2, 2))
    ref_o, ref_lse = kattn.ragged_attention(q, k, v, indptr, indptr, return_lse=True, **opt)
    rows = kattn.dist.ragged_positions(indptr, COMM, sharding=sharding)
    o, lse = kattn.dist.ragged_ring_attention(COMM, q[rows], k[rows], v[rows], indptr, indptr, sharding=sharding,
                                              return_lse=True, **opt)
    assert o.shape == (len(rows), 4, 16)
    assert np.abs(o - ref_o[rows]).max(initial=0.0) <= 1e-12
    assert np.abs(lse - ref_lse[rows]).max(initial=0.0) <= 1e-12


def test_ragged_ring_refuses_lengths_the_ranks_cannot_cut_on_every_rank():
    P = COMM.Get_size()
    indptr = np.array([0, 2 * P + 1], dtype=np.int64)  # not a multiple of 2P: zigzag refuses it
    x = np.zeros((1, 1, 8))
    with pytest.raises(kattn.Error, match="q_indptr: sequence 0 has"):
        kattn.dist.ragged_ring_attention(COMM, x, x, x, indptr, indptr, sharding="zigzag")


@pytest.mark.parametrize("name", ["ring", "ulysses", "hybrid"])
def test_a_workspace_serves_a_loop_of_calls_with_the_same_results(name):
    # Hq = 12 divides over 1-4 ranks; each call's forward and backward take their buffers from ws.
    q, k, v = global_problem(64, 64, 12, 6, 8, seed=12)
    dout = np.random.default_rng(13).standard_normal(q.shape)
    size = {"ulysses_size": 0} if name == "hybrid" else {}
    pos = kattn.dist.positions(64, COMM, **size)
    fwd = getattr(kattn.dist, name + "_attention")
    bwd = getattr(kattn.dist, name + "_attention_backward")
    args = (COMM, q[:, pos], k[:, pos], v[:, pos])

    def step(**kw):
        o, lse = fwd(*args, causal=True, return_lse=True, **size, **kw)
        return (o, lse) + bwd(*args, o, lse, dout[:, pos], causal=True, **size, **kw)

    expect_reused(step)
    assert kattn.dist.Workspace is kattn.Workspace
    with pytest.raises(kattn.Error, match="workspace: expected a kattn.Workspace or None, got dict"):
        fwd(*args, workspace={})


@pytest.mark.parametrize("opt", [{}, {"causal": True}, {"window": (5, 0)}])
@pytest.mark.parametrize("deterministic", [False, True])
def test_sharded_kv_decodes_the_whole_cache_on_every_rank(opt, deterministic):
    # One door, the scheme an argument: the queries on every rank, the cache in rank order.
    q, k, v = global_problem(3, 77, 4, 2, 16, seed=7)
    ref_o, ref_lse = kattn.attention(q, k, v, return_lse=True, **opt)
    kp = kattn.dist.positions(77, COMM, scheme="sharded_kv", deterministic=deterministic, chunk=8)
    o, lse = kattn.dist.attention(COMM, q, k[:, kp], v[:, kp], scheme="sharded_kv", deterministic=deterministic,
                                  chunk=8, return_lse=True, **opt)
    assert np.abs(o - ref_o).max() <= 1e-12
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.abs(lse[finite] - ref_lse[finite]).max(initial=0.0) <= 1e-12


@pytest.mark.parametrize("opt", [{}, {"causal": True, "window": (30, 0), "softcap": 5.0},
                                 {"causal": True, "sinks": [0.5, -1.0, 2.0, 0.0]}])
@pytest.mark.parametrize("bias_shape", [(2, 4), (1, 1)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_sharded_kv_takes_each_ranks_key_columns_of_a_bias(opt, bias_shape, deterministic):
    """Decode with a bias: every rank passes every query row over its own keys (the whole bias's
    columns kp); o and lse are one process's with the whole bias. A bias of every key is refused on
    every rank, naming it."""
    q, k, v = global_problem(3, 77, 4, 2, 16, seed=9)
    bias = np.random.default_rng(10).standard_normal(bias_shape + (3, 77))
    ref_o, ref_lse = kattn.attention(q, k, v, return_lse=True, bias=bias, **opt)
    kp = kattn.dist.positions(77, COMM, scheme="sharded_kv", deterministic=deterministic, chunk=8)
    mine = np.ascontiguousarray(bias[..., kp])
    o, lse = kattn.dist.attention(COMM, q, k[:, kp], v[:, kp], scheme="sharded_kv", deterministic=deterministic,
                                  chunk=8, return_lse=True, bias=mine, **opt)
    assert np.abs(o - ref_o).max() <= 1e-12
    assert np.abs(lse - ref_lse).max() <= 1e-12
    if COMM.Get_size() > 1:
        with pytest.raises(kattn.Error, match=re.escape("bias: expected [2 or 1, 4 or 1, 3, ")):
            kattn.dist.attention(COMM, q, k[:, kp], v[:, kp], scheme="sharded_kv", deterministic=deterministic,
                                 chunk=8, bias=bias, **opt)


def test_the_door_names_what_a_scheme_does_not_take():
    q, k, v = global_problem(8, 8, 2, 1, 8, seed=8)
    pos = kattn.dist.positions(8, COMM)
    with pytest.raises(kattn.Error, match="scheme: expected ring, ulysses, hybrid, sharded-kv or grid, got 'striped'"):
        kattn.dist.attention(COMM, q[:, pos], k[:, pos], v[:, pos], scheme="striped")
    o, lse = kattn.dist.attention(COMM, q[:, pos], k[:, pos], v[:, pos], return_lse=True)
    with pytest.raises(kattn.Error, match="scheme: sharded-kv has no backward"):
        kattn.dist.attention_backward(COMM, q[:, pos], k[:, pos], v[:, pos], o, lse, o, scheme="sharded_kv")
