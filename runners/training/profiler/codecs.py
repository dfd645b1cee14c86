"""Encode and decode seconds of the compressed techniques on this host: ``commscope validate``'s profile stage (all
ranks at once, :func:`synchronised_codecs`) and ``commscope profile --codecs`` (one process, :func:`measure_codecs`).

The cost models price a compressor's encode and decode as memory passes at a reference device's bandwidth
(:mod:`costmodels.compression`). A CPU rank's encoders are not memory-bound: top-k selection, the random
numbers of stochastic rounding and index scatters run far below memory bandwidth, and on 23 MB of gradients
they took 26-146 ms an iteration where the passes price them under a millisecond (the two-rank full suite
shipped in ``bench/results/validation_2ranks_full`` before this measurement existed). So the profile stage
measures them, on the runners' own code:

each compressed technique's trainer that compresses after ``backward`` (:class:`~runners.training.compressed.
shared._Compressed`) runs its ``exchange`` on the model's real gradients, fresh from an untimed backward each
iteration, with its communication
replaced by the rank's own message (every rank's message taken as this rank's, so the decoder sees the
sizes and counts it sees in training, and nothing crosses the network). In ``commscope validate`` all ranks
run at once and start each iteration together (a barrier, outside the timed region), as they share the cores
while training. The timed compression before the message is the encode, after it the decode; per iteration
the max over ranks (a synchronous step waits for the slowest), then the median over iterations. DDP
communication hooks (PowerSGD, fp16) compress inside ``backward`` between their all-reduces, and are timed by
clocking the hook itself against DDP's all-reduce hook on a group of one rank (:func:`_hook_codec`). The profile
keeps them in ``metadata['codecs']`` (:data:`costmodels.profiles.CODEC_FIELDS`), where :func:`costmodels.schedules.core.
compress` takes them in place of the memory passes. Alone (``commscope profile``) the process is a group of one:
the decode is timed for one message, and the model's shape of decode over messages carries it to p ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class _Spans:
    """Stands in for a trainer's phase timer: keeps each timed phase in order, (phase, seconds)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.spans: list[tuple[str, float]] = []

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = self.clock()
        try:
            yield
        finally:
            self.spans.append((phase, self.clock() - t0))

    def encode_decode(self) -> tuple[float, float]:
        """Compression seconds before the first message, and after the last."""
        comm = [i for i, (phase, _) in enumerate(self.spans) if phase != "compression"]
        first, last = (comm[0], comm[-1]) if comm else (len(self.spans), len(self.spans))
        return (sum(t for _, t in self.spans[:first]), sum(t for _, t in self.spans[last + 1:]))


def _local(trainer: Any, world: int) -> None:
    """Replace the trainer's collectives by this rank's own message (all-gather: ``world`` references to it,
    all-reduce: the tensor as it is), so that its encoder and decoder run with nothing on the network."""
    trainer.all_gather = lambda tensor: [tensor] * world
    trainer.all_reduce = lambda tensor: tensor


def measured_techniques(techniques: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any], str]]:
    """(name, options, codec key) of the techniques whose codec :func:`synchronised_codecs` measures: those with a
    compressor that compress after ``backward`` or in a DDP communication hook."""
    from costmodels.compression import codec_key
    from runners.training import technique as get_technique
    from runners.training.pricing import schedule_call

    out = []
    for name, options in techniques:
        tech = get_technique(name)
        if tech.compressor is None or _kind(tech) is None:
            continue
        spec = schedule_call(name, options)[1]
        assert spec is not None
        out.append((name, dict(options), codec_key(spec)))
    return out


def _kind(tech: Any) -> str | None:
    """``"exchange"`` (compresses after backward), ``"ddp_hook"`` (a DDP communication hook), else None."""
    from runners.training.compressed.ddp_hooks import _HookedDDP
    from runners.training.compressed.shared import _Compressed

    if not isinstance(tech.factory, type):
        return None
    if issubclass(tech.factory, _Compressed):
        return "exchange"
    if issubclass(tech.factory, _HookedDDP):
        return "ddp_hook"
    return None


def _exchange_codec(ctx: Any, tech: Any, entry: Any, options: dict[str, Any], batch: tuple[Any, Any], seed: int,
                    lr: float, iterations: int, warmup: int) -> tuple[list[float], list[float], int, str]:
    """Per iteration (encode, decode) seconds of a technique that compresses after backward (module docstring)."""
    torch = ctx.torch
    model = entry.builder(seed=seed).to(ctx.device)
    trainer = tech.build(model, lr, None, **options)
    _local(trainer, ctx.world)
    enc, dec = [], []
    for k in range(warmup + iterations):
        # fresh gradients from an untimed backward, as training hands them over: reusing one set times the
        # encoders on memory already warm, 0.3-0.8 ms (10-33%) below training on resnet_small's 47 tensors
        for _, p in trainer.named:
            p.grad = None
        entry.loss_fn(model(batch[0]), batch[1]).backward()
        grads = [torch.zeros(p.numel(), dtype=trainer.dtype, device=trainer.device) if p.grad is None
                 else p.grad.detach().reshape(-1) for _, p in trainer.named]
        ctx.dist.barrier()
        spans = _Spans(trainer.clock)
        with torch.no_grad():
            trainer.exchange(grads, spans)
        if k >= warmup:
            e, d = spans.encode_decode()
            enc.append(e)
            dec.append(d)
    return enc, dec, warmup, "the runner's exchange with local messages"


class _HookClock:
    """A DDP communication hook that adds up, per backward, the seconds from each of its calls to its future's
    completion (:func:`_hook_codec`); the same signature as the hook it wraps, which DDP checks."""

    def __init__(self, hook: Any, clock: Any) -> None:
        import inspect
        import threading

        self.hook, self.clock, self.total, self.lock = hook, clock, 0.0, threading.Lock()
        self.__name__ = self.__qualname__ = f"{getattr(hook, '__name__', 'hook')}_clocked"
        self.__signature__ = inspect.signature(hook)

    def __call__(self, state: Any, bucket: Any) -> Any:
        t0 = self.clock()

        def done(fut: Any) -> Any:
            with self.lock:  # gloo completes futures on its worker threads
                self.total += self.clock() - t0
            return fut.value()

        return self.hook(state, bucket).then(done)


def _clocked(factory: type, hook: Any = None) -> type:
    """``factory`` (a :class:`~runners.training.compressed.ddp_hooks._HookedDDP`) with its hook, or ``hook`` in its
    place, wrapped in a :class:`_HookClock` kept as ``hook_clock``; inside :class:`~runners.training.compressed.
    ddp_hooks.BucketsInOrder` where the hook chains its buckets, so a bucket's wait for the one before is not
    counted."""
    from runners.training.compressed.ddp_hooks import BucketsInOrder

    def make_hook(self: Any) -> tuple[Any, Any]:
        state, inner = (self.group, hook) if hook is not None else factory.make_hook(self)
        if isinstance(inner, BucketsInOrder):
            inner.hook = self.hook_clock = _HookClock(inner.hook, self.clock)
            return state, inner
        self.hook_clock = _HookClock(inner, self.clock)
        return state, self.hook_clock

    return type(f"Clocked{factory.__name__}", (factory,), {"make_hook": make_hook})


def _hook_codec(ctx: Any, tech: Any, entry: Any, options: dict[str, Any], batch: tuple[Any, Any], seed: int,
                lr: float, iterations: int, warmup: int, local: Any) -> tuple[list[float], list[float], int, str]:
    """Per iteration (encode, decode) seconds of a DDP communication hook (PowerSGD, fp16).

    The hook's compression runs inside ``backward``, between its all-reduces, on a group of this rank alone (its
    all-reduces then move nothing), after the hook's own start (``start_powerSGD_iter``: plain all-reduces
    before it). On CPUs each bucket's hook is clocked from its call to its future's completion (:class:`_HookClock`)
    and the backward's sum is set against the median of the same sum for DDP's own all-reduce hook
    (``default_hooks.allreduce_hook``: DDP's plain all-reduce and division, on the same buckets), alternated
    iteration by iteration. Timing whole steps instead, the hooked minus the plain, let backward's compute noise
    in: on resnet_small (one rank, 4 samples, three runs, 13 iterations each) step differences of 1.7, 6.2 and
    6.8 ms had standard deviations of 1.3, 1.2 and 1.6 ms (2 of 13 negative in the first run, whose steps were
    2.5 times shorter); the clocked hooks' differences, 1.4, 5.6 and 6.5 ms, had 0.8, 0.8 and 0.7 ms. On CUDA
    the clock synchronises the device, which
    inside a hook would wait for backward's kernels, so there the steps are timed whole. The difference, at least
    0, is split between encode and decode as the cost model splits the hook's work
    (:meth:`costmodels.compression.Compressor.encode_time` and ``decode_time`` over the model's tensors).
    """
    import dataclasses
    import statistics

    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from costmodels.compression import parse_compressor
    from runners.training import technique as get_technique
    from runners.training.compressed.ddp_hooks import _HookedDDP
    from runners.training.pricing import schedule_call, steady_warmup

    warmup = steady_warmup(tech.name, options, warmup)  # past the hook's uncompressed start, as validate trains
    by_hook = ctx.device.type != "cuda"
    hooked_tech = dataclasses.replace(tech, factory=_clocked(tech.factory)) if by_hook else tech
    hooked = hooked_tech.build(entry.builder(seed=seed).to(ctx.device), lr, local, **options)
    if by_hook:
        plain = _clocked(_HookedDDP, default_hooks.allreduce_hook)(entry.builder(seed=seed).to(ctx.device), lr, local)
    else:  # no clock inside a hook on CUDA: plain DDP (fusion, the same buckets) timed by whole steps
        plain = get_technique("fusion").build(entry.builder(seed=seed).to(ctx.device), lr, local)
    pairs = []
    for k in range(warmup + iterations):
        times = []
        for trainer in (hooked, plain):
            if by_hook:
                trainer.hook_clock.total = 0.0
            ctx.dist.barrier()
            total = trainer.step(batch[0], batch[1], entry.loss_fn).total
            times.append(trainer.hook_clock.total if by_hook else total)
        if k >= warmup:
            pairs.append(times)
    if by_hook:  # the plain hook's median: one slow all-reduce hand-off does not count against one iteration
        base = statistics.median(t for _, t in pairs)
        diffs = [max(0.0, t - base) for t, _ in pairs]
    else:
        diffs = [max(0.0, t - u) for t, u in pairs]
    spec = schedule_call(tech.name, options)[1]
    assert spec is not None
    c, q = parse_compressor(spec)
    shapes = [(p.numel(), tuple(p.shape)) for p in hooked.model.parameters() if p.requires_grad]
    e_model = sum(c.encode_time(d, q, shape) for d, shape in shapes)
    d_model = sum(c.decode_time(d, q, shape, fan_in=ctx.world) for d, shape in shapes)
    share = e_model / (e_model + d_model) if e_model + d_model > 0 else 1.0
    how = ("each bucket's hook clocked from call to completion, less the median of DDP's all-reduce hook so clocked"
           if by_hook else "DDP step with the hook minus DDP's step with its all-reduce hook")
    return ([t * share for t in diffs], [t * (1 - share) for t in diffs], warmup,
            f"{how}, on a group of one rank, split {share:.2f} encode as the cost model splits it")


def synchronised_codecs(ctx: Any, model_name: str, batch_size: int, techniques: Sequence[tuple[str, dict[str, Any]]],
                        iterations: int, warmup: int, seed: int = 0, lr: float = 0.05) -> dict[str, dict[str, Any]]:
    """Median over iterations of the slowest rank's encode and decode seconds per compressed technique, keyed by
    :func:`costmodels.compression.codec_key` (see the module docstring); every rank returns the same."""
    from runners.training import technique as get_technique
    from runners.training import zoo

    torch = ctx.torch
    entry = zoo.model(model_name)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 3000 + ctx.rank)
    x, y = entry.example_batch(batch_size, gen)
    batch = (x.to(ctx.device), y.to(ctx.device))
    picked = measured_techniques(techniques)
    local = None
    if any(_kind(get_technique(name)) == "ddp_hook" for name, _, _ in picked):
        groups = [ctx.dist.new_group([r]) for r in range(ctx.world)]  # every rank creates every group, in order
        local = groups[ctx.rank]
    out: dict[str, dict[str, Any]] = {}
    for name, options, key in picked:
        tech = get_technique(name)
        if _kind(tech) == "exchange":
            enc, dec, after, how = _exchange_codec(ctx, tech, entry, options, batch, seed, lr, iterations, warmup)
        else:
            enc, dec, after, how = _hook_codec(ctx, tech, entry, options, batch, seed, lr, iterations, warmup, local)
        t = torch.tensor([enc, dec], dtype=torch.float64).T.contiguous()
        ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MAX)
        med = t.median(dim=0).values
        out[key] = {"encode_s": float(med[0]), "decode_s": float(med[1]), "ranks": int(ctx.world), "technique": name,
                    "how": f"{how}, median of {len(enc)} after {after} of the slowest of {ctx.world} ranks in step"}
    return out


def measure_codecs(model_name: str, batch_size: int, techniques: Sequence[str], device: Any, iterations: int,
                   warmup: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    """:func:`synchronised_codecs` in this process alone (a one-rank gloo group on a private file store, set up and
    torn down here; refused when this process already belongs to a group)."""
    import tempfile
    import types

    import torch
    import torch.distributed as dist

    from costmodels.errors import CommscopeError

    if dist.is_initialized():
        raise CommscopeError("measuring codecs alone needs a process outside any torch.distributed group")
    picked = measured_techniques([(name, {}) for name in techniques])
    missing = sorted(set(techniques) - {name for name, _, _ in picked})
    if missing:
        raise CommscopeError(f"codecs are timed for the compressed techniques ({', '.join(compressed_techniques())}), "
                             f"got {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="commscope-codecs-") as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            ctx = types.SimpleNamespace(torch=torch, dist=dist, rank=0, world=1, device=torch.device(device))
            return synchronised_codecs(ctx, model_name, batch_size, [(n, o) for n, o, _ in picked], iterations,
                                       warmup, seed)
        finally:
            dist.destroy_process_group()


def compressed_techniques() -> list[str]:
    """The registered techniques whose codec is timed (see :func:`measured_techniques`)."""
    from runners.training import techniques

    return [name for name, _, _ in measured_techniques([(t, {}) for t in techniques()])]
