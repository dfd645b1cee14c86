"""commscope's convergence half: rate bounds of distributed SGD variants and time-to-accuracy.

Pure math (numpy, sympy, scipy), like :mod:`costmodels`, which it may import to turn iteration
counts into wall-clock time. The bound registry arrives with the convergence issue; this package
exists now so that the distribution's layout (costmodels, convergence, runners, app) is fixed.
"""
