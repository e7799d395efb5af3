"""kattn across MPI ranks from Python: kattn.dist.attention, the one door of the MPI layer (the
scheme an argument: ring attention, head sharding (Ulysses), their hybrid, a sharded KV cache),
over an mpi4py communicator, and its gradients (kattn.torch's ring_attention etc. wrap them for
autograd).

    from mpi4py import MPI
    import kattn.dist
    pos = kattn.dist.positions(N, MPI.COMM_WORLD)            # this rank's global positions
    o = kattn.dist.attention(MPI.COMM_WORLD, q[:, pos], k[:, pos], v[:, pos], causal=True)   # scheme="ring"

Each rank passes its shard (the positions `positions` names, in global order) of q, k and v; o is
this rank's shard of the output (scheme="sharded_kv": every rank passes all the queries and its
keys, and gets the whole o). q, k, v share one dtype: float32, float64, float16 or bfloat16 (NumPy
arrays, or PyTorch CPU tensors; lse is float32 for the 16-bit types), and the 16-bit types travel
between ranks in 16 bits. Collective: every rank calls with the same options; bad input on any
rank raises the same kattn.Error on every rank. Needs kattn built with its MPI layer
(-DKATTN_ENABLE_MPI=ON) and mpi4py on the same MPI. ring_attention, ulysses_attention,
hybrid_attention and ragged_ring_attention (and their _backward) are the door with that scheme.
"""

from . import _as_arrays, _gradients, _kattn, _with_dbias
from ._arrays import returner, sinks_array

__all__ = ["Workspace", "SCHEMES", "positions", "attention", "attention_backward", "ring_attention",
           "ulysses_attention", "hybrid_attention", "grid_attention", "ragged_positions", "ragged_ring_attention",
           "ring_attention_backward", "ulysses_attention_backward", "hybrid_attention_backward",
           "grid_attention_backward", "ragged_ring_attention_backward"]

# The schemes of kattn.dist.attention (docs/distributed.md, "Which scheme when").
SCHEMES = ("ring", "ulysses", "hybrid", "sharded_kv", "grid")

# Workspace(): buffers kept between calls (kattn.Workspace; docs/workspace.md): pass the same
# workspace= to the calls of a loop (forward and backward alike). One per rank, one call at a time.
Workspace = _kattn.Workspace


def _require_mpi():
    if not hasattr(_kattn, "dist_attention"):
        raise _kattn.Error("kattn.dist: this kattn was built without its MPI layer (-DKATTN_ENABLE_MPI=ON)")


def _align(deterministic, chunk):
    return (chunk if chunk > 0 else 1024) if deterministic else 1


def positions(length, comm, *, scheme="ring", sharding="contiguous", deterministic=False, chunk=0,
              ulysses_size=None):
    """The global positions (int64, ascending) of a sequence of `length` that this rank's shard
    holds under `scheme`: contiguous (rank r the r-th run) or zigzag (the sequence cut into 2P
    segments, rank r holding segments r and 2P-1-r, which balances a causal mask). In deterministic
    mode segment boundaries are multiples of the key chunk (default 1024). scheme="hybrid" (or
    ulysses_size given): the ring's layout over the P / ulysses_size groups, each group's share cut
    over its members. scheme="sharded_kv": the keys of a cache in rank order (the queries are every
    rank's)."""
    _require_mpi()
    if ulysses_size is not None and scheme == "ring":
        scheme = "hybrid"
    u = comm.Get_size() if not ulysses_size else ulysses_size
    return _kattn.shard_positions(length, comm.Get_size(), comm.Get_rank(), scheme, sharding,
                                  _align(deterministic, chunk), u if scheme == "hybrid" else 0)


def _arrays(**named):
    """The arguments as NumPy arrays, and "" or what was refused: a refusal goes to kattn, which
    raises it on every rank (no rank left in the ring)."""
    try:
        return _as_arrays(**named), ""
    except _kattn.Error as e:
        return [None] * len(named), str(e)


def _sinks(sinks, refused, name="sinks", what="logit"):
    """A per-head option (sinks, alibi_slopes) as kattn reads it, and what was refused so far or by
    it (raised on every rank)."""
    try:
        return sinks_array(sinks, name, what), refused
    except _kattn.Error as e:
        return None, refused or str(e)


def _results(out, values, stats, return_stats):
    result = tuple(out(x) for x in values) + ((stats,) if return_stats else ())
    return result[0] if len(result) == 1 else result


def _grid(grid, refused):
    """grid=(rows, cols) as kattn reads it ((0, 0): chosen), and what was refused so far or by it
    (raised on every rank)."""
    if grid is None:
        return (0, 0), refused
    try:
        rows, cols = (int(x) for x in grid)
        return (rows, cols), refused
    except (TypeError, ValueError):
        return (0, 0), refused or f"grid: expected (rows, cols), got {grid!r}"


def attention(comm, q, k, v, *, scheme="ring", q_indptr=None, kv_indptr=None, ulysses_size=0, grid=None,
              causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None, bias=None,
              layout="bnhd", sharding="contiguous", deterministic=False, chunk=0, return_lse=False, return_stats=False,
              workspace=None):
    """Exact attention over the ranks of `comm`, spread by `scheme`:

    "ring"        the sequence sharded, K/V passed round a ring;
    "ulysses"     the sequence sharded, all-to-alls give each rank Hq / P heads (Hq a multiple of P);
    "hybrid"      ulysses inside groups of `ulysses_size` ranks (0: all), the ring across them;
    "sharded_kv"  the KV cache sharded, the queries (and o) the same on every rank (decode);
    "grid"        the ranks a rows x cols grid (`grid`=(rows, cols), rows * cols = P; None: the most
                  square shape): queries gathered along a grid column, K/V along a grid row, the
                  results merged along the column (a ragged batch one sequence at a time;
                  (1, P) moves what the ring moves). Shards as the ring's.

    Dense shards: q [B, nq, Hq, D], k, v [B, nk, Hkv, D] (layout "bnhd"; "bhnd" too), this rank's
    positions as positions(N, comm, scheme=..., ...) gives them. A ragged batch (ring or grid):
    q_indptr, kv_indptr [B + 1] the whole batch's offsets, the same on every rank, and q [nq, Hq, D],
    k, v [nk, Hkv, D] this rank's rows (ragged_positions). causal is bottom-right aligned on the
    global sequence (each sequence's own in a ragged batch). deterministic: bitwise the same o for
    every rank count and sharding (keys folded in global chunks of `chunk`, 0 = 1024). sinks: one
    logit per query head, alibi_slopes one slope per query head, as for kattn.attention (every
    scheme takes both). bias (dense shards): the additive bias of the scores this rank computes, so
    that no bias value moves: scheme "ring", its query rows over every key of the sequence,
    [B or 1, Hq or 1, nq, Nk] (bias[:, :, i] belongs to this rank's query i); "ulysses", its Hq / P
    query heads (rank r: heads r Hq/P ..) over every query row and key in global order,
    [B or 1, Hq/P or 1, Nq, Nk]; "sharded_kv", every query row over its own keys,
    [B or 1, Hq or 1, Nq, nk] (bias[..., j] belongs to its key j). The other schemes refuse one. Returns o (and lse [B, Hq, nq] or [nq, Hq], and this rank's
    stats dict)."""
    _require_mpi()
    arrays, refused = _arrays(q=q, k=k, v=v)
    sinks, refused = _sinks(sinks, refused)
    alibi, refused = _sinks(alibi_slopes, refused, "alibi_slopes", "slope")
    shape, refused = _grid(grid, refused)
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale, sinks=sinks, alibi_slopes=alibi, bias=bias)
    dist = dict(scheme=scheme, sharding=sharding, deterministic=deterministic, chunk=chunk, ulysses_size=ulysses_size,
                grid=shape)
    o, lse, stats = _kattn.dist_attention(comm.py2f(), *arrays, q_indptr, kv_indptr, layout, opts, dist, refused,
                                          workspace)
    return _results(returner(q), (o, lse) if return_lse else (o,), stats, return_stats)


def attention_backward(comm, q, k, v, o, lse, dout, *, scheme="ring", q_indptr=None, kv_indptr=None, ulysses_size=0,
                       grid=None, causal=False, window=None, softcap=0.0, scale=None, sinks=None, alibi_slopes=None,
                       bias=None, bias_grad=False, layout="bnhd", sharding="contiguous", deterministic=False, chunk=0,
                       return_stats=False, workspace=None):
    """The gradients of attention (schemes ring, ulysses, hybrid, grid): dq, dk, dv, this rank's shards of
    dL/dq, dL/dk, dL/dv (in q's dtype, shaped as q, k, v), from this rank's q, k, v, dout = dL/do,
    and o, lse as attention returned them (return_lse=True). The options must be the forward's.
    deterministic: bitwise the same gradients for every rank count and sharding. 16-bit shards:
    float32 accumulation, the gradients rounded once. With sinks, also their gradient dsinks [Hq]
    (float64) over every rank's rows, the same on every rank. With bias_grad=True (scheme "ring" or
    "ulysses", a float bias), last, dbias: the gradient of this rank's bias (its rows, or its heads),
    in its bias's shape and dtype (summed over its broadcast dims)."""
    _require_mpi()
    arrays, refused = _arrays(q=q, k=k, v=v, o=o, lse=lse, dout=dout)
    sink_values, refused = _sinks(sinks, refused)
    alibi, refused = _sinks(alibi_slopes, refused, "alibi_slopes", "slope")
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale, sinks=sink_values, alibi_slopes=alibi,
                bias=bias)
    shape, refused = _grid(grid, refused)
    dist = dict(scheme=scheme, sharding=sharding, deterministic=deterministic, chunk=chunk, ulysses_size=ulysses_size,
                grid=shape)
    dq, dk, dv, stats = _kattn.dist_attention_backward(comm.py2f(), *arrays, q_indptr, kv_indptr, layout, opts, dist,
                                                       refused, workspace, bias_grad)
    out = returner(q)
    grads = _with_dbias(_gradients(out, dq, dk, dv, stats, sinks), out, stats, bias_grad)
    return grads + (stats,) if return_stats else grads


def ring_attention(comm, q, k, v, **kw):
    """attention(comm, q, k, v, scheme="ring", **kw): the sequence sharded, K/V passed round a ring."""
    return attention(comm, q, k, v, scheme="ring", **kw)


def ring_attention_backward(comm, q, k, v, o, lse, dout, **kw):
    """attention_backward(..., scheme="ring", **kw): the gradients of ring_attention."""
    return attention_backward(comm, q, k, v, o, lse, dout, scheme="ring", **kw)


def ulysses_attention(comm, q, k, v, **kw):
    """attention(comm, q, k, v, scheme="ulysses", **kw): heads sharded by all-to-all (Hq a multiple
    of the rank count)."""
    return attention(comm, q, k, v, scheme="ulysses", **kw)


def ulysses_attention_backward(comm, q, k, v, o, lse, dout, **kw):
    """attention_backward(..., scheme="ulysses", **kw): the gradients of ulysses_attention."""
    return attention_backward(comm, q, k, v, o, lse, dout, scheme="ulysses", **kw)


def hybrid_attention(comm, q, k, v, **kw):
    """attention(comm, q, k, v, scheme="hybrid", **kw): head sharding inside groups of
    ulysses_size ranks (0: all), the ring across the groups; shards positions(N, comm,
    ulysses_size=...)."""
    return attention(comm, q, k, v, scheme="hybrid", **kw)


def hybrid_attention_backward(comm, q, k, v, o, lse, dout, **kw):
    """attention_backward(..., scheme="hybrid", **kw): the gradients of hybrid_attention."""
    return attention_backward(comm, q, k, v, o, lse, dout, scheme="hybrid", **kw)


def grid_attention(comm, q, k, v, *, grid=None, **kw):
    """attention(comm, q, k, v, scheme="grid", grid=(rows, cols), **kw): the ranks a rows x cols
    grid (None: the most square shape); shards as the ring's (positions(N, comm))."""
    return attention(comm, q, k, v, scheme="grid", grid=grid, **kw)


def grid_attention_backward(comm, q, k, v, o, lse, dout, *, grid=None, **kw):
    """attention_backward(..., scheme="grid", grid=(rows, cols), **kw): the gradients of grid_attention."""
    return attention_backward(comm, q, k, v, o, lse, dout, scheme="grid", grid=grid, **kw)


def ragged_positions(indptr, comm, *, sharding="contiguous", deterministic=False, chunk=0):
    """The packed rows (int64) of a ragged batch that this rank holds, in its order: every sequence
    (rows indptr[b]:indptr[b+1]) is cut as a sequence is for ring_attention (P equal runs, or 2P
    zigzag segments), its length a multiple of P (2P for zigzag). With deterministic=True (give
    the call's chunk too), every sequence is cut on whole chunks instead, any length."""
    _require_mpi()
    return _kattn.ragged_positions(indptr, comm.Get_size(), comm.Get_rank(), sharding, deterministic, chunk)


def ragged_ring_attention(comm, q, k, v, q_indptr, kv_indptr, **kw):
    """attention(comm, q, k, v, q_indptr=..., kv_indptr=..., **kw): ring attention over a ragged
    batch of packed sequences (varlen, cu_seqlens), each one sharded over `comm`'s ranks. Returns
    o [nq, Hq, D] (and lse [nq, Hq], and this rank's stats dict)."""
    return attention(comm, q, k, v, scheme="ring", q_indptr=q_indptr, kv_indptr=kv_indptr, **kw)


def ragged_ring_attention_backward(comm, q, k, v, o, lse, dout, q_indptr, kv_indptr, **kw):
    """The gradients of ragged_ring_attention: dq [nq, Hq, D], dk, dv [nk, Hkv, D], this rank's rows."""
    return attention_backward(comm, q, k, v, o, lse, dout, scheme="ring", q_indptr=q_indptr, kv_indptr=kv_indptr,
                              **kw)
