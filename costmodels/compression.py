"""Gradient compressors: bytes on the wire, the primitive they need, their cost and their constants.

Each :class:`Compressor` maps a gradient of d elements of the profile's dtype (``value_bytes`` each:
fp32 4, fp16/bf16 2) to the bytes one worker puts on the wire, names the collective primitive it needs
(``allreduce`` when the compressed tensors can be summed in place, ``allgather`` when every worker needs
every other worker's message: the volume then grows with p), prices encode and decode as passes over
memory on a stated device, and gives the constant the convergence bounds need: ``delta``
(contraction, biased compressors with error feedback: E||C(x) - x||^2 <= (1 - delta)||x||^2) or
``omega`` (variance, unbiased: E||C(x) - x||^2 <= omega ||x||^2).

Decoding (derived here; every term is bytes moved at ``MEMORY_BYTES_PER_S``):

- sparse formats (top-k, DGC, random-k) scatter-add the received (index, value) pairs into a dense
  destination: the f received messages are read once (f x wire bytes) and the destination, d values,
  is written once (``torch.zeros`` + ``index_add_``), so decode = (f wire + d value_bytes) / bandwidth,
  not f dense passes;
- dense formats (quantisers, signs) decode each received message like one encode: f x encode;
- casts (fp16, bf16) cast the summed message back: read 2 d, write value_bytes d (nothing to do, and
  nothing saved, when the gradient already has the cast's dtype);
- PowerSGD follows ``powerSGD_hook``: see :func:`powersgd_passes`.

Names are ``name`` or ``name:parameter``: ``topk:0.01`` (density), ``qsgd:8`` (bits), ``powersgd:4``
(rank), ``randomk:0.01``, ``dgc:0.001``, ``signsgd:8`` (bits per element on the wire: 1 packed, 8 as int8
codes, what commscope's runners send; likewise ``ef_signsgd`` and ``terngrad``, 2 packed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CommscopeError
from .profiles import DTYPE_BYTES
from .registry import Registry

MEMORY_BYTES_PER_S = 900e9 * 0.7  # V100 HBM2 at 70%, as in the shipped profiles
INDEX_BYTES = 4  # int32 indices
MIN_COMPRESSION_RATE = 2  # powerSGD_hook's PowerSGDState default: compress when (n + m) r * 2 < n m
Shape = tuple[int, ...] | None


def _value_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise CommscopeError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Compressor:
    """A registered compressor; ``parameter`` is its knob (density, bits, rank) with a default.

    ``wire(d, param, shape, value_bytes)`` -> bytes one worker sends for d elements; ``passes`` ->
    memory passes over the d x value_bytes gradient to encode; ``sparse``: decoding scatters received
    (index, value) pairs; ``cast_to``: the dtype a cast compressor casts to; ``delta(d, param)`` /
    ``omega(d, param)`` -> the bound constant (None when it has none); ``wire_only``: the parameter sets only
    the width of a code on the wire (signs, ternary), not what the compressor computes or its constants.
    """

    name: str
    description: str
    source: str
    primitive: str
    parameter: str | None
    default: float | None
    wire: Callable[[int, float | None, Shape, int], float]
    passes: float
    delta: Callable[[int, float | None], float | None] = lambda d, q: None
    omega: Callable[[int, float | None], float | None] = lambda d, q: None
    error_feedback: bool = False
    check: Callable[[float], str | None] = lambda q: None
    sparse: bool = False
    cast_to: str | None = None
    wire_only: bool = False

    def resolve(self, value: float | None) -> float | None:
        if self.parameter is None:
            if value is not None:
                raise CommscopeError(f"compressor {self.name} takes no parameter, got {value!r}")
            return None
        v = self.default if value is None else value
        problem = self.check(float(v))  # type: ignore[arg-type]
        if problem:
            raise CommscopeError(f"compressor {self.name}: {self.parameter} {problem}, got {v!r}")
        return float(v)  # type: ignore[arg-type]

    def wire_bytes(self, elements: int, value: float | None = None, shape: Shape = None,
                   dtype: str = "float32") -> float:
        """Bytes one worker sends for a gradient of ``elements`` values of ``dtype``."""
        return float(self.wire(int(elements), self.resolve(value), shape, _value_bytes(dtype)))

    def messages(self, elements: int, value: float | None = None, shape: Shape = None,
                 dtype: str = "float32") -> tuple[float, ...]:
        """The wire bytes split by the messages a bucket sends them in: ``(wire,)``, or PowerSGD's
        (uncompressed, P, Q), three all-reduces per bucket in ``powerSGD_hook``."""
        if self.name != "powersgd":
            return (self.wire_bytes(elements, value, shape, dtype),)
        vb = _value_bytes(dtype)
        compressed, n, m, r = powersgd_split(int(elements), self.resolve(value), shape)
        return (0.0, float(n * r * vb), float(m * r * vb)) if compressed else (float(elements * vb), 0.0, 0.0)

    def encode_time(self, elements: int, value: float | None = None, shape: Shape = None,
                    dtype: str = "float32") -> float:
        """Seconds to compress one gradient of ``elements`` values of ``dtype`` on the reference device."""
        vb = _value_bytes(dtype)
        if self.name == "powersgd":
            compressed, *_ = powersgd_split(int(elements), self.resolve(value), shape)
            return powersgd_passes(compressed)[0] * elements * vb / MEMORY_BYTES_PER_S
        if self.cast_to is not None:  # read value_bytes, write the cast's bytes per element
            return 0.0 if dtype == self.cast_to else elements * (vb + DTYPE_BYTES[self.cast_to]) / MEMORY_BYTES_PER_S
        return self.passes * elements * vb / MEMORY_BYTES_PER_S

    def decode_time(self, elements: int, value: float | None = None, shape: Shape = None,
                    dtype: str = "float32", fan_in: int = 1) -> float:
        """Seconds to decode ``fan_in`` received messages of one gradient (see the module docstring)."""
        vb = _value_bytes(dtype)
        if self.sparse:
            return (fan_in * self.wire_bytes(elements, value, shape, dtype) + elements * vb) / MEMORY_BYTES_PER_S
        if self.name == "powersgd":
            compressed, *_ = powersgd_split(int(elements), self.resolve(value), shape)
            return powersgd_passes(compressed)[1] * elements * vb / MEMORY_BYTES_PER_S
        return fan_in * self.encode_time(elements, value, shape, dtype)

    def constants(self, elements: int, value: float | None = None) -> dict[str, float | None]:
        q = self.resolve(value)
        return {"delta": self.delta(elements, q), "omega": self.omega(elements, q)}

    def model_constants(self, tensors: Sequence[tuple[int, tuple[int, ...] | None]], value: float | None = None
                        ) -> dict[str, float | None]:
        """delta and omega of compressing every tensor (elements, shape) of a model on its own, as the
        schedules do. Errors add up over tensors: ||x - C(x)||^2 = sum_j ||x_j - C(x_j)||^2 <= sum_j
        (1 - delta_j) ||x_j||^2 <= (1 - min_j delta_j) ||x||^2, so delta = min_j delta_j and, likewise,
        omega = max_j omega_j. PowerSGD sends the tensors ``powerSGD_hook`` does not compress (vectors,
        matrices below its compression rate) as they are (delta_j = 1) and factorises the others on
        their own (first dimension x the rest)."""
        q = self.resolve(value)
        sized = [(int(d), shape) for d, shape in tensors if int(d) > 0]
        if not sized:
            raise CommscopeError("a model needs at least one tensor with parameters to compress")
        if self.name == "powersgd":
            return {"delta": min(_powersgd_delta(d, q, shape) if powersgd_split(d, q, shape)[0] else 1.0
                                 for d, shape in sized), "omega": None}
        distinct = sorted({d for d, _ in sized})
        ds = [self.delta(d, q) for d in distinct]
        om = [self.omega(d, q) for d in distinct]
        return {"delta": None if any(x is None for x in ds) else min(ds),  # type: ignore[type-var]
                "omega": None if any(x is None for x in om) else max(om)}  # type: ignore[type-var]


def _matrix(elements: int, shape: Shape) -> tuple[int, int]:
    """PowerSGD's view of a tensor, ``tensor.view(shape[0], -1)`` in ``powerSGD_hook``: (first dimension,
    product of the rest), a vector being n x 1; without a shape, the most square factorisation n x m = d
    (an approximation, stated as such)."""
    if shape:
        return int(shape[0]), int(math.prod(shape[1:]))
    n = math.isqrt(elements)
    while n > 1 and elements % n:
        n -= 1
    return n, elements // max(n, 1)


def powersgd_split(elements: int, rank: float | None, shape: Shape) -> tuple[bool, int, int, int]:
    """(compressed?, n, m, r) of one tensor in ``powerSGD_hook`` (torch/distributed/algorithms/
    ddp_comm_hooks/powerSGD_hook.py, ``_should_compress``): the n x m matrix gets rank r = min(n, m, rank)
    factors P (n x r) and Q (m x r) when (n + m) r * min_compression_rate < n m (default rate 2), and is
    all-reduced uncompressed otherwise (every vector: (n + 1) * 2 >= n)."""
    n, m = _matrix(elements, shape)
    r = min(int(rank or 1), n, m)
    return (n + m) * r * MIN_COMPRESSION_RATE < n * m, n, m, r


def powersgd_passes(compressed: bool) -> tuple[int, int]:
    """(encode, decode) memory passes over a tensor's d x value_bytes bytes in ``powerSGD_hook`` with its
    defaults (error feedback and warm start on). The products of the gradient with rank-r factors read
    the gradient once (2 r FLOPs per 4 bytes read: below a V100's 17 FLOP/B ridge for r < 35, so
    memory-bound). Derived here from the hook's steps; factors of n r or m r values are left out:

    - compressed, encode 6: error added (read gradient and error, write: 3), clone kept for the error (2),
      P = M Q (read M: 1); decode 5: Q = M^T P between the two all-reduces (read M: 1), M = P Q^T (write: 1),
      new error = clone - M (read 2, write 1: 3);
    - uncompressed, encode 7: error added (3), clone (2), copied into the contiguous buffer (2); decode 7:
      divided by p (2), copied back (2), new error (3).
    """
    return (6, 5) if compressed else (7, 7)


def _powersgd_wire(d: int, q: float | None, shape: Shape, value_bytes: int) -> float:
    compressed, n, m, r = powersgd_split(d, q, shape)
    return float((n + m) * r * value_bytes if compressed else d * value_bytes)


def _powersgd_delta(d: int, q: float | None, shape: Shape = None) -> float:
    """Contraction of the exact rank-r truncation of an n x m matrix: ||M - M_r||^2 <= (1 - r/min(n, m))||M||^2
    (Eckart-Young: the r largest of min(n, m) squared singular values are at least their share), so
    delta = r / min(n, m), on the tensor's (first dimension x the rest), else the most square
    factorisation of d. PowerSGD's warm-started power iteration approaches this truncation (Vogels et
    al. 2019, Sec. 3); it is not guaranteed per step. (A model's tensors that ``powerSGD_hook`` leaves
    uncompressed have delta 1: :meth:`Compressor.model_constants`.)"""
    _, n, m, r = powersgd_split(d, q, shape)
    return min(1.0, r / min(n, m))


def _density(q: float) -> str | None:
    return None if 0 < q <= 1 else "must be a density in (0, 1]"


def _bits(q: float) -> str | None:
    return None if q == int(q) and 2 <= q <= 16 else "must be an integer number of bits in [2, 16]"


def _code_bits(q: float, least: int) -> str | None:
    """Bits per element on the wire of a sign or ternary code: ``least`` packed, up to 32 (an int32 each)."""
    return None if q == int(q) and least <= q <= 32 else f"must be an integer number of bits in [{least}, 32]"


def _qsgd_omega(d: int, bits: int) -> float:
    """QSGD's variance with s = 2^(b-1) - 1 levels (one bit is the sign): min(d/s^2, sqrt(d)/s)."""
    s = 2 ** (bits - 1) - 1
    return min(d / s**2, math.sqrt(d) / s)


def _k(d: int, q: float | None) -> int:
    return max(1, math.ceil(d * (q or 0)))


COMPRESSORS: Registry[Compressor] = Registry("compressor")
for _c in (
    Compressor("fp16", "cast to IEEE half precision; summed in place",
               "PyTorch DDP comm hook fp16_compress_hook; rounding error <= 2^-11 relative per element in the "
               "normal range, so delta = 1 - 2^-22", "allreduce", None, None, lambda d, q, s, vb: 2.0 * d, 0.0,
               delta=lambda d, q: 1 - 2.0**-22, cast_to="float16"),
    Compressor("bf16", "cast to bfloat16; summed in place",
               "PyTorch DDP comm hook bf16_compress_hook; rounding error <= 2^-8 relative, so delta = 1 - 2^-16",
               "allreduce", None, None, lambda d, q, s, vb: 2.0 * d, 0.0, delta=lambda d, q: 1 - 2.0**-16,
               cast_to="bfloat16"),
    Compressor("topk", "k largest-magnitude values and their int32 indices, error feedback",
               "Aji & Heafield, EMNLP 2017; Stich et al., NeurIPS 2018 (delta = k/d)", "allgather", "density",
               0.01, lambda d, q, s, vb: _k(d, q) * (vb + INDEX_BYTES), 10.0, delta=lambda d, q: _k(d, q) / d,
               error_feedback=True, check=_density, sparse=True),
    Compressor("randomk", "k random coordinates chosen with a seed shared by all workers: summed in place",
               "Stich et al., NeurIPS 2018 (rand-k: delta = k/d); Wangni et al., NeurIPS 2018", "allreduce",
               "density", 0.01, lambda d, q, s, vb: _k(d, q) * vb, 1.0, delta=lambda d, q: _k(d, q) / d,
               omega=lambda d, q: d / _k(d, q) - 1, error_feedback=True, check=_density, sparse=True),
    Compressor("dgc", "threshold estimated from a 1% sample, values above it with indices, error feedback",
               "Lin et al., 'Deep gradient compression', ICLR 2018", "allgather", "density", 0.001,
               lambda d, q, s, vb: _k(d, q) * (vb + INDEX_BYTES), 3.0, delta=lambda d, q: _k(d, q) / d,
               error_feedback=True, check=_density, sparse=True),
    Compressor("qsgd", "stochastic quantisation to s = 2^(b-1) - 1 levels per sign, plus the norm",
               "Alistarh et al., 'QSGD', NeurIPS 2017, Lemma 3.1: omega = min(d/s^2, sqrt(d)/s)", "allgather",
               "bits", 8.0, lambda d, q, s, vb: d * (q or 8) / 8 + vb, 3.0,
               omega=lambda d, q: _qsgd_omega(d, int(q or 8)), check=_bits),
    Compressor("terngrad", "stochastic ternary {-1, 0, 1} times the max norm (2 bits per element packed; "
               "terngrad:8 for one byte per element)",
               "Wen et al., 'TernGrad', NeurIPS 2017; variance from E||Q||^2 <= ||g||_inf ||g||_1 <= sqrt(d)||g||^2",
               "allgather", "bits", 2.0, lambda d, q, s, vb: d * (q or 2) / 8 + vb, 3.0,
               omega=lambda d, q: math.sqrt(d) - 1, check=lambda q: _code_bits(q, 2), wire_only=True),
    Compressor("signsgd", "signs only (1 bit per element packed; signsgd:8 for one byte per element), aggregated "
               "by majority vote",
               "Bernstein et al., 'signSGD', ICML 2018 / ICLR 2019 (majority vote; bound in l1, no delta/omega)",
               "allgather", "bits", 1.0, lambda d, q, s, vb: d * (q or 1) / 8, 2.0, check=lambda q: _code_bits(q, 1),
               wire_only=True),
    Compressor("ef_signsgd", "scaled signs (||g||_1/d) sign(g) with error feedback (1 bit per element packed)",
               "Karimireddy et al., 'Error feedback fixes SignSGD', ICML 2019, Lemma 8: "
               "delta = ||g||_1^2/(d ||g||^2) >= 1/d", "allgather", "bits", 1.0,
               lambda d, q, s, vb: d * (q or 1) / 8 + vb, 3.0, delta=lambda d, q: 1 / d, error_feedback=True,
               check=lambda q: _code_bits(q, 1), wire_only=True),
    Compressor("powersgd", "rank-r factors P (n x r) and Q (m x r) by one power iteration; per DDP bucket three "
               "all-reduces: the uncompressed tensors, all Ps, all Qs",
               "Vogels, Karimireddy, Jaggi, 'PowerSGD', NeurIPS 2019; PyTorch powerSGD_hook (per bucket: "
               "tensors with (n + m) r * 2 >= n m, vectors included, all-reduced uncompressed; P = M Q "
               "all-reduced, Q = M^T P all-reduced; encode and decode memory passes: see powersgd_passes)",
               "allreduce", "rank", 4.0, _powersgd_wire, 0.0, delta=lambda d, q: _powersgd_delta(d, q),
               error_feedback=True,
               check=lambda q: None if q == int(q) and q >= 1 else "must be a positive integer rank"),
):
    COMPRESSORS.register(_c)


def compressors() -> list[str]:
    """Names of the registered compressors."""
    return COMPRESSORS.names()


def parse_compressor(spec: str) -> tuple[Compressor, float | None]:
    """``"topk:0.01"`` -> (the topk entry, 0.01); ``"fp16"`` -> (fp16, None)."""
    if not isinstance(spec, str) or not spec.strip():
        raise CommscopeError(f"a compressor is a name or name:parameter (e.g. topk:0.01), got {spec!r}")
    name, _, value = spec.partition(":")
    entry = COMPRESSORS.get(name.strip())
    if not value:
        return entry, entry.resolve(None)
    if entry.parameter is None:
        raise CommscopeError(f"compressor {entry.name} takes no parameter, got {spec!r}")
    try:
        v = float(value)
    except ValueError:
        raise CommscopeError(f"compressor {entry.name}: {entry.parameter} must be a number, got {value!r}") from None
    return entry, entry.resolve(v)


def codec_key(spec: str) -> str:
    """The one name of a compressor and its parameter, under which a profile keeps measured codec times:
    ``"topk:0.01"``, ``"topk"`` (the default density) -> ``"topk:0.01"``; ``"qsgd:8.0"`` -> ``"qsgd:8"``; ``"fp16"``."""
    entry, q = parse_compressor(spec)
    return entry.name if q is None else f"{entry.name}:{q:g}"


def scaled_to_measured(encode: np.ndarray, grad_bytes: np.ndarray, decode1: float, decode0: float,
                       measured: Mapping[str, Any], primitive: str) -> tuple[np.ndarray, float, float]:
    """The modelled per-layer encode and decode(f) = D0 + f (D1 - D0) scaled to a measured codec (see
    :func:`costmodels.schedules.core.compress`); returns (encode per layer, D1, D0)."""
    e_total, d_total = float(measured["encode_s"]), float(measured["decode_s"])
    modelled = float(encode.sum())
    if modelled > 0:
        encode = encode * (e_total / modelled)
    else:
        encode = grad_bytes * (e_total / grad_bytes.sum()) if grad_bytes.sum() > 0 else encode
    f = int(measured["ranks"]) if primitive == "allgather" else 1
    at_f = decode0 + f * (decode1 - decode0)
    if at_f <= 0:  # the model decodes nothing: the measured decode is a fixed cost per wire byte
        return encode, d_total, d_total
    return encode, decode1 * d_total / at_f, decode0 * d_total / at_f


def compressor(name: str) -> Compressor:
    """The registered compressor called ``name`` (without a parameter)."""
    return COMPRESSORS.get(name)
