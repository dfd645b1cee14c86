"""One collective at one size, ready to call: its buffers, the call (native, or the documented equivalent
where the backend lacks the op) and its check.

Buffers an op reduces into are restored from a copy before each iteration (:attr:`Prepared.prepare`,
outside the timed part), so that values never grow to inf. The equivalents:

- reduce_scatter: all_reduce of the whole buffer, each rank keeping its own shard
- allgather: all_gather into a list of per-rank shards
- all_to_all: one isend/irecv per pair of ranks
- reduce: all_reduce, the root using the result
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runners.torchrun.rank import Context

from .options import DTYPES, EQUIVALENTS, OPS, REDUCING, ROOTED, BenchError, Options, config_of
from .patterns import _pattern, _summed, _torch_dtype, _wrong


@dataclass
class Prepared:
    """One op at one size, ready to call: buffers allocated and filled."""

    op: str
    nbytes: int
    count: int
    dtype: str
    call: Callable[[], None]
    prepare: Callable[[], None] | None  # restores a buffer the op reduces into (not timed)
    verify: Callable[[], int]  # wrong elements on this rank after a fresh fill and one call
    equivalent: str | None
    redop: str
    root: int
    peer: int | None = None

    def config(self, opts: Options, world: int) -> dict[str, Any]:
        return config_of(self.op, self.nbytes, opts, world, self.equivalent is not None)


def _native(ctx: Context, name: str, old: str) -> Callable[..., Any]:
    """torch's current name of a collective, or the one older torch releases have."""
    return getattr(ctx.dist, name, None) or getattr(ctx.dist, old)


def build(ctx: Context, op: str, nbytes: int, dtype: str, root: int = 0, equivalent: bool = False) -> Prepared:
    """Buffers and the call of ``op`` on ``nbytes`` (already rounded), native or its equivalent."""
    t, dist, rank, world = ctx.torch, ctx.dist, ctx.rank, ctx.world
    size = DTYPES[dtype][1]
    count = nbytes // size
    chunk = count // world
    tdt = _torch_dtype(ctx, dtype)
    eq = EQUIVALENTS[op] if equivalent else None
    redop = "sum" if op in REDUCING else "none"
    rooted = root if op in ROOTED else -1

    def make(call: Callable[[], None], verify: Callable[[], int], prepare: Callable[[], None] | None = None,
             peer: int | None = None) -> Prepared:
        return Prepared(op, nbytes, count, dtype, call, prepare, verify, eq, redop, rooted, peer)

    if op == "allreduce" or (op == "reduce" and equivalent) or (op == "reduce_scatter" and equivalent):
        src = _pattern(ctx, count, rank, dtype)
        buf = src.clone()

        def restore() -> None:
            buf.copy_(src)

        def call() -> None:
            dist.all_reduce(buf)

        def verify() -> int:
            restore()
            call()
            if op == "allreduce":
                return _wrong(ctx, buf, _summed(ctx, count), dtype)
            if op == "reduce":
                return _wrong(ctx, buf, _summed(ctx, count), dtype) if rank == root else 0
            return _wrong(ctx, buf[rank * chunk:(rank + 1) * chunk], _summed(ctx, chunk, rank * chunk), dtype)

        return make(call, verify, restore)

    if op == "reduce_scatter":
        inp = _pattern(ctx, count, rank, dtype)
        out = t.empty(chunk, dtype=tdt, device=ctx.device)
        rs = _native(ctx, "reduce_scatter_single", "reduce_scatter_tensor")

        def call() -> None:
            rs(out, inp)

        def verify() -> int:
            out.fill_(-1)
            call()
            return _wrong(ctx, out, _summed(ctx, chunk, rank * chunk), dtype)

        return make(call, verify)

    if op == "allgather":
        inp = _pattern(ctx, chunk, rank, dtype)
        out = t.empty(count, dtype=tdt, device=ctx.device)
        if equivalent:
            shards = list(out.split(chunk))

            def call() -> None:
                dist.all_gather(shards, inp)
        else:
            ag = _native(ctx, "all_gather_single", "all_gather_into_tensor")

            def call() -> None:
                ag(out, inp)

        def verify() -> int:
            out.fill_(-1)
            call()
            expected = t.cat([_pattern(ctx, chunk, r, dtype) for r in range(world)]).to(t.float64)
            return _wrong(ctx, out, expected, dtype)

        return make(call, verify)

    if op == "broadcast":
        src = _pattern(ctx, count, root, dtype)
        buf = src.clone()

        def call() -> None:
            dist.broadcast(buf, root)

        def verify() -> int:
            if rank == root:
                buf.copy_(src)
            else:
                buf.fill_(-1)
            call()
            return _wrong(ctx, buf, src.to(t.float64), dtype)

        return make(call, verify)

    if op == "reduce":
        src = _pattern(ctx, count, rank, dtype)
        buf = src.clone()

        def restore() -> None:
            buf.copy_(src)

        def call() -> None:
            dist.reduce(buf, root)

        def verify() -> int:
            restore()
            call()
            return _wrong(ctx, buf, _summed(ctx, count), dtype) if rank == root else 0

        return make(call, verify, restore)

    if op == "all_to_all":
        inp = _pattern(ctx, count, rank, dtype)
        out = t.empty(count, dtype=tdt, device=ctx.device)
        if equivalent:
            ins, outs = list(inp.split(chunk)), list(out.split(chunk))
            pairs = []  # one batch: NCCL groups them (no order deadlock), gloo posts them all at once
            for k in range(1, world):
                dst, src_ = (rank + k) % world, (rank - k) % world
                pairs += [dist.P2POp(dist.irecv, outs[src_], src_), dist.P2POp(dist.isend, ins[dst], dst)]

            def call() -> None:
                works = dist.batch_isend_irecv(pairs) if pairs else []
                outs[rank].copy_(ins[rank])
                for w in works:
                    w.wait()
        else:

            def call() -> None:
                dist.all_to_all_single(out, inp)

        def verify() -> int:
            out.fill_(-1)
            call()
            expected = t.cat([_pattern(ctx, chunk, r, dtype, start=rank * chunk) for r in range(world)])
            return _wrong(ctx, out, expected.to(t.float64), dtype)

        return make(call, verify)

    if op == "sendrecv":
        if world < 2:
            raise BenchError("sendrecv needs at least 2 ranks")
        peer = world - 1
        sbuf = _pattern(ctx, count, rank, dtype)
        rbuf = t.empty(count, dtype=tdt, device=ctx.device)
        if rank == 0:

            def call() -> None:
                dist.send(sbuf, peer)
                dist.recv(rbuf, peer)
        elif rank == peer:

            def call() -> None:
                dist.recv(rbuf, 0)
                dist.send(sbuf, 0)
        else:

            def call() -> None:
                return None

        def verify() -> int:
            rbuf.fill_(-1)
            call()
            if rank not in (0, peer):
                return 0
            return _wrong(ctx, rbuf, _pattern(ctx, count, peer if rank == 0 else 0, dtype).to(t.float64), dtype)

        return make(call, verify, peer=peer)

    raise BenchError(f"unknown op {op!r}; choose from: {', '.join(OPS)}")
