"""kattn across MPI ranks from Python: ring attention, head sharding (Ulysses) and hybrid over an
mpi4py communicator, and their gradients (kattn.torch's ring_attention etc. wrap them for autograd).

    from mpi4py import MPI
    import kattn.dist
    pos = kattn.dist.positions(N, MPI.COMM_WORLD)            # this rank's global positions
    o = kattn.dist.ring_attention(MPI.COMM_WORLD, q[:, pos], k[:, pos], v[:, pos], causal=True)

Each rank passes its shard (the positions `positions` names, in global order) of q, k and v; o is
this rank's shard of the output. q, k, v share one dtype: float32, float64, float16 or bfloat16
(NumPy arrays, or PyTorch CPU tensors; lse is float32 for the 16-bit types), and the 16-bit types
travel between ranks in 16 bits. Collective: every rank calls with the same options; bad input on
any rank raises the same kattn.Error on every rank. Needs kattn built with its MPI layer
(-DKATTN_ENABLE_MPI=ON) and mpi4py on the same MPI.
"""

from . import _as_arrays, _kattn
from ._arrays import returner

__all__ = ["Workspace", "positions", "ring_attention", "ulysses_attention", "hybrid_attention", "ragged_positions",
           "ragged_ring_attention", "ring_attention_backward", "ulysses_attention_backward",
           "hybrid_attention_backward", "ragged_ring_attention_backward"]


# Workspace(): buffers kept between calls (kattn.Workspace; docs/workspace.md): pass the same
# workspace= to the calls of a loop (forward and backward alike). One per rank, one call at a time.
Workspace = _kattn.Workspace


def _require_mpi():
    if not hasattr(_kattn, "dense_attention"):
        raise _kattn.Error("kattn.dist: this kattn was built without its MPI layer (-DKATTN_ENABLE_MPI=ON)")


def _align(deterministic, chunk):
    return (chunk if chunk > 0 else 1024) if deterministic else 1


def positions(length, comm, *, sharding="contiguous", deterministic=False, chunk=0, ulysses_size=None):
    """The global positions (int64, ascending) of a sequence of `length` that this rank's shard
    holds: contiguous (rank r the r-th run) or zigzag (the sequence cut into 2P segments, rank r
    holding segments r and 2P-1-r, which balances a causal mask). In deterministic mode segment
    boundaries are multiples of the key chunk (default 1024). ulysses_size: the positions of
    hybrid_attention with that group size (the ring's layout over the P / ulysses_size groups, each
    group's share cut over its members); None for ring_attention and ulysses_attention."""
    _require_mpi()
    u = comm.Get_size() if ulysses_size == 0 else (ulysses_size or 0)
    return _kattn.shard_positions(length, comm.Get_size(), comm.Get_rank(), sharding, _align(deterministic, chunk), u)


def _arrays(**named):
    """The arguments as NumPy arrays, and "" or what was refused: a refusal goes to kattn, which
    raises it on every rank (no rank left in the ring)."""
    try:
        return _as_arrays(**named), ""
    except _kattn.Error as e:
        return [None] * len(named), str(e)


def _results(out, values, stats, return_stats):
    result = tuple(out(x) for x in values) + ((stats,) if return_stats else ())
    return result[0] if len(result) == 1 else result


def _dense(call, comm, q, k, v, layout, opts, sharding, deterministic, chunk, ulysses_size, return_lse,
           return_stats, workspace):
    _require_mpi()
    arrays, refused = _arrays(q=q, k=k, v=v)
    o, lse, stats = _kattn.dense_attention(call, comm.py2f(), *arrays, layout, opts, sharding, deterministic, chunk,
                                           ulysses_size, refused, workspace)
    return _results(returner(q), (o, lse) if return_lse else (o,), stats, return_stats)


def _dense_backward(call, comm, q, k, v, o, lse, dout, layout, opts, sharding, deterministic, chunk, ulysses_size,
                    return_stats, workspace):
    _require_mpi()
    arrays, refused = _arrays(q=q, k=k, v=v, o=o, lse=lse, dout=dout)
    dq, dk, dv, stats = _kattn.dense_attention_backward(call, comm.py2f(), *arrays, layout, opts, sharding,
                                                        deterministic, chunk, ulysses_size, refused, workspace)
    return _results(returner(q), (dq, dk, dv), stats, return_stats)


def ring_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bnhd",
                   sharding="contiguous", deterministic=False, chunk=0, return_lse=False, return_stats=False,
                   workspace=None):
    """Exact attention over a sequence sharded over `comm`'s ranks (ring attention).

    q [B, nq, Hq, D], k, v [B, nk, Hkv, D] (layout "bnhd"; "bhnd" too): this rank's positions, as
    positions(Nq or Nk, comm, ...) gives them. causal is bottom-right aligned on the global
    sequence. deterministic: bitwise the same o for every rank count and sharding (keys folded in
    global chunks of `chunk`). Returns o (and lse [B, Hq, nq], and this rank's stats dict).
    """
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    return _dense("ring", comm, q, k, v, layout, opts, sharding, deterministic, chunk, 0, return_lse, return_stats,
                  workspace)


def ring_attention_backward(comm, q, k, v, o, lse, dout, *, causal=False, window=None, softcap=0.0, scale=None,
                            layout="bnhd", sharding="contiguous", deterministic=False, chunk=0, return_stats=False, workspace=None):
    """The gradients of ring_attention: dq, dk, dv, this rank's shards of dL/dq, dL/dk, dL/dv (in
    q's dtype, shaped as q, k, v), from this rank's shards q, k, v, dout = dL/do, and o, lse as
    ring_attention returned them (return_lse=True). The options must be the forward's.
    deterministic: bitwise the same gradients for every rank count and sharding. 16-bit shards:
    float32 accumulation, k and v travel in 16 bits, the gradients rounded once."""
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    return _dense_backward("ring", comm, q, k, v, o, lse, dout, layout, opts, sharding, deterministic, chunk, 0,
                           return_stats, workspace)


def ulysses_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bnhd",
                      sharding="contiguous", deterministic=False, chunk=0, return_lse=False, return_stats=False,
                   workspace=None):
    """Exact attention sharded over heads (DeepSpeed-Ulysses): arguments, shards and results as for
    ring_attention; Hq must be a multiple of the rank count. All-to-alls give each rank the whole
    sequence of Hq/P heads; deterministic: bitwise the same o for every rank count."""
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    return _dense("ulysses", comm, q, k, v, layout, opts, sharding, deterministic, chunk, 0, return_lse, return_stats,
                  workspace)


def ulysses_attention_backward(comm, q, k, v, o, lse, dout, *, causal=False, window=None, softcap=0.0, scale=None,
                               layout="bnhd", sharding="contiguous", deterministic=False, chunk=0,
                               return_stats=False, workspace=None):
    """The gradients of ulysses_attention, as ring_attention_backward's of ring_attention."""
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    return _dense_backward("ulysses", comm, q, k, v, o, lse, dout, layout, opts, sharding, deterministic, chunk, 0,
                           return_stats, workspace)


def hybrid_attention(comm, q, k, v, *, ulysses_size=0, causal=False, window=None, softcap=0.0, scale=None,
                     layout="bnhd", sharding="contiguous", deterministic=False, chunk=0, return_lse=False,
                     return_stats=False, workspace=None):
    """Head sharding inside groups of `ulysses_size` ranks (0: all) and ring attention across the
    groups. Shards: positions(N, comm, ulysses_size=..., ...); Hq a multiple of ulysses_size.
    Otherwise as ring_attention; deterministic: the ring's bits for every grid."""
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    return _dense("hybrid", comm, q, k, v, layout, opts, sharding, deterministic, chunk, ulysses_size, return_lse,
                  return_stats, workspace)


def hybrid_attention_backward(comm, q, k, v, o, lse, dout, *, ulysses_size=0, causal=False, window=None,
                              softcap=0.0, scale=None, layout="bnhd", sharding="contiguous", deterministic=False,
                              chunk=0, return_stats=False, workspace=None):
    """The gradients of hybrid_attention, as ring_attention_backward's of ring_attention."""
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    return _dense_backward("hybrid", comm, q, k, v, o, lse, dout, layout, opts, sharding, deterministic, chunk,
                           ulysses_size, return_stats, workspace)


def ragged_positions(indptr, comm, *, sharding="contiguous", deterministic=False, chunk=0):
    """The packed rows (int64) of a ragged batch that this rank holds, in its order: every sequence
    (rows indptr[b]:indptr[b+1]) is cut as a sequence is for ring_attention (P equal runs, or 2P
    zigzag segments), its length a multiple of P (2P for zigzag). With deterministic=True (give
    the call's chunk too), every sequence is cut on whole chunks instead, any length."""
    _require_mpi()
    return _kattn.ragged_positions(indptr, comm.Get_size(), comm.Get_rank(), sharding, deterministic, chunk)


def ragged_ring_attention(comm, q, k, v, q_indptr, kv_indptr, *, causal=False, window=None, softcap=0.0, scale=None,
                          sharding="contiguous", deterministic=False, chunk=0, return_lse=False, return_stats=False,
                   workspace=None):
    """Ring attention over a ragged batch of packed sequences (varlen, cu_seqlens), each one
    sharded over `comm`'s ranks.

    q_indptr, kv_indptr [B + 1]: the whole batch's offsets, the same on every rank. q [nq, Hq, D],
    k, v [nk, Hkv, D]: this rank's rows, q[ragged_positions(q_indptr, comm)] of the packed arrays
    (and so for k, v). One dtype, as ring_attention's (16-bit k, v travel in 16 bits, o is rounded
    once); causal and window (each sequence's own, bottom-right aligned when a sequence has more
    keys than queries), softcap and scale. deterministic=True: every sequence's bits the same on any number
    of ranks (its keys folded in fixed chunks of `chunk`, 0 = 1024); the rows are then
    ragged_positions(..., deterministic=True, chunk=chunk), any lengths. Returns o [nq, Hq, D] (and
    lse [nq, Hq], and this rank's stats dict)."""
    _require_mpi()
    arrays, refused = _arrays(q=q, k=k, v=v)
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    o, lse, stats = _kattn.ragged_ring_attention(comm.py2f(), *arrays, q_indptr, kv_indptr, opts, sharding,
                                                 deterministic, chunk, refused, workspace)
    return _results(returner(q), (o, lse) if return_lse else (o,), stats, return_stats)


def ragged_ring_attention_backward(comm, q, k, v, o, lse, dout, q_indptr, kv_indptr, *, causal=False, window=None,
                                   softcap=0.0, scale=None, sharding="contiguous", deterministic=False, chunk=0,
                                   return_stats=False, workspace=None):
    """The gradients of ragged_ring_attention: dq [nq, Hq, D], dk, dv [nk, Hkv, D], this rank's
    rows, from this rank's rows q, k, v, dout = dL/do, and o, lse as ragged_ring_attention returned
    them (return_lse=True). The options must be the forward's. 16-bit rows: float32 accumulation,
    k and v travel in 16 bits, the gradients rounded once."""
    _require_mpi()
    arrays, refused = _arrays(q=q, k=k, v=v, o=o, lse=lse, dout=dout)
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    dq, dk, dv, stats = _kattn.ragged_ring_attention_backward(comm.py2f(), *arrays, q_indptr, kv_indptr, opts,
                                                              sharding, deterministic, chunk, refused, workspace)
    return _results(returner(q), (dq, dk, dv), stats, return_stats)
