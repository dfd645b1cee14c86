"""The sympy symbols of the alpha-beta-gamma (Hockney) cost models, and an exact base-2 log.

Notation follows Thakur, Rabenseifner and Gropp (IJHPCA 2005): ``p`` processes, ``n`` bytes,
``alpha`` seconds per message, ``beta`` seconds per byte on the wire, ``gamma`` seconds per byte
of reduction arithmetic. Two-level (hierarchical) models add the intra-node link
(``alpha_intra``, ``beta_intra``), ``g`` GPUs per node and ``r`` NICs per node in use.
"""

from __future__ import annotations

import sympy as sp

p = sp.Symbol("p", positive=True, integer=True)
"""Number of participating ranks (workers)."""
n = sp.Symbol("n", nonnegative=True)
"""Message size in bytes (nccl-tests convention: the whole buffer; see ``PRIMITIVES``)."""
alpha = sp.Symbol("alpha", nonnegative=True)
"""Latency per message (s) of the (inter-node) link."""
beta = sp.Symbol("beta", positive=True)
"""Inverse bandwidth (s/byte) of the (inter-node) link."""
gamma = sp.Symbol("gamma", nonnegative=True)
"""Reduction cost (s/byte reduced)."""
alpha_intra = sp.Symbol(r"alpha_intra", nonnegative=True)
"""Latency per message (s) of the intra-node link."""
beta_intra = sp.Symbol(r"beta_intra", positive=True)
"""Inverse bandwidth (s/byte) of the intra-node link."""
g = sp.Symbol("g", positive=True, integer=True)
"""GPUs (ranks) per node."""
r = sp.Symbol("r", positive=True, integer=True)
"""NICs per node used by the inter-node phase (at most g)."""
k = sp.Symbol("k", positive=True, integer=True)
"""Number of parameter servers."""
rho = sp.Symbol("rho", positive=True)
"""Density of a sparsified gradient: k/d, the fraction of elements sent."""
iota = sp.Symbol("iota", nonnegative=True)
"""Index bytes per value byte of a sparse message (int32 indices of fp32 values: 1)."""


class lg(sp.Function):  # noqa: N801 - the usual name of the binary logarithm
    """Binary logarithm ``log2(x)``.

    A function of its own (rather than ``log(x)/log(2)``) so that exact powers of two simplify
    to integers, LaTeX shows ``\\log_2``, and numerical code calls ``numpy.log2``, which is exact
    at powers of two; ``ceiling(log(8)/log(2))`` in floating point is 4, ``ceil(log2(8))`` is 3.
    """

    nargs = 1

    @classmethod
    def eval(cls, x: sp.Expr) -> sp.Expr | None:
        if x.is_Integer and x > 0:
            v = int(x)
            if v & (v - 1) == 0:
                return sp.Integer(v.bit_length() - 1)
        if x.is_Pow and x.base == 2:
            return x.exp
        return None

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return 1 / (self.args[0] * sp.log(2))

    def _eval_rewrite_as_log(self, x: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.log(x) / sp.log(2)

    def _eval_evalf(self, prec: int) -> sp.Expr:
        return (sp.log(self.args[0]) / sp.log(2))._eval_evalf(prec)

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_positive

    def _eval_is_nonnegative(self) -> bool | None:
        x = self.args[0]
        if x.is_integer and x.is_positive:
            return True
        return None

    def _numpycode(self, printer: object) -> str:
        return f"{printer._module_format('numpy.log2')}({printer._print(self.args[0])})"  # type: ignore[attr-defined]

    def _pythoncode(self, printer: object) -> str:
        return f"{printer._module_format('math.log2')}({printer._print(self.args[0])})"  # type: ignore[attr-defined]

    _lambdacode = _pythoncode
    _mpmathcode = None

    def _latex(self, printer: object, exp: object = None) -> str:
        arg = printer._print(self.args[0])  # type: ignore[attr-defined]
        s = rf"\log_{{2}} {arg}" if self.args[0].is_Symbol else rf"\log_{{2}}\left({arg}\right)"
        return rf"\left({s}\right)^{{{exp}}}" if exp is not None else s


def clg(x: sp.Expr) -> sp.Expr:
    """``ceil(log2 x)``: rounds of a binomial tree / recursive doubling on x ranks."""
    return sp.ceiling(lg(x))


def flg(x: sp.Expr) -> sp.Expr:
    """``floor(log2 x)``: the exponent of the largest power of two not above x."""
    return sp.floor(lg(x))


mu = sp.Symbol("mu", nonnegative=True)
"""Host memory copy cost (s/byte) of a collective library's own buffer copies on a rank (``Environment.host_copy``)."""
phi = sp.Symbol("phi", nonnegative=True)
"""Extra cost (s/byte) of a library buffer that the host maps afresh: page faults (``Environment.host_fault``)."""
