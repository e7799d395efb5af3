"""kattn across MPI ranks from Python: ring attention over an mpi4py communicator.

    from mpi4py import MPI
    import kattn.dist
    pos = kattn.dist.positions(N, MPI.COMM_WORLD)            # this rank's global positions
    o = kattn.dist.ring_attention(MPI.COMM_WORLD, q[:, pos], k[:, pos], v[:, pos], causal=True)

Each rank passes its shard (the positions `positions` names, in global order) of q, k and v; o is
this rank's shard of the output. Collective: every rank calls with the same options; bad input on
any rank raises the same kattn.Error on every rank. Needs kattn built with its MPI layer
(-DKATTN_ENABLE_MPI=ON) and mpi4py on the same MPI.
"""

from . import _kattn
from ._arrays import as_array, returner

__all__ = ["positions", "ring_attention"]


def _require_mpi():
    if not hasattr(_kattn, "ring_attention"):
        raise _kattn.Error("kattn.dist: this kattn was built without its MPI layer (-DKATTN_ENABLE_MPI=ON)")


def _align(deterministic, chunk):
    return (chunk if chunk > 0 else 1024) if deterministic else 1


def positions(length, comm, *, sharding="contiguous", deterministic=False, chunk=0):
    """The global positions (int64, ascending) of a sequence of `length` that this rank's shard
    holds: contiguous (rank r the r-th run) or zigzag (the sequence cut into 2P segments, rank r
    holding segments r and 2P-1-r, which balances a causal mask). In deterministic mode segment
    boundaries are multiples of the key chunk (default 1024)."""
    _require_mpi()
    return _kattn.shard_positions(length, comm.Get_size(), comm.Get_rank(), sharding, _align(deterministic, chunk))


def ring_attention(comm, q, k, v, *, causal=False, window=None, softcap=0.0, scale=None, layout="bnhd",
                   sharding="contiguous", deterministic=False, chunk=0, return_lse=False, return_stats=False):
    """Exact attention over a sequence sharded over `comm`'s ranks (ring attention).

    q [B, nq, Hq, D], k, v [B, nk, Hkv, D] (layout "bnhd"; "bhnd" too): this rank's positions, as
    positions(Nq or Nk, comm, ...) gives them. causal is bottom-right aligned on the global
    sequence. deterministic: bitwise the same o for every rank count and sharding (keys folded in
    global chunks of `chunk`). Returns o (and lse [B, Hq, nq], and this rank's stats dict).
    """
    _require_mpi()
    out = returner(q)
    opts = dict(causal=causal, window=window, softcap=softcap, scale=scale)
    try:  # a refusal here goes to kattn, which raises it on every rank (no rank left in the ring)
        arrays, refused = [as_array(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"))], ""
    except _kattn.Error as e:
        arrays, refused = [None] * 3, str(e)
    o, lse, stats = _kattn.ring_attention(comm.py2f(), *arrays, layout, opts, sharding, deterministic, chunk, refused)
    result = (out(o),) + ((out(lse),) if return_lse else ()) + ((stats,) if return_stats else ())
    return result[0] if len(result) == 1 else result
