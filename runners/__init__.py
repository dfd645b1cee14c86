"""commscope's measuring half: command line, collective sweeps, profiling and training runs.

Everything that touches torch.distributed, devices, processes or result files lives here. The
command line (:mod:`runners.cli`) needs only the core dependencies; parts that need PyTorch
import it lazily through :func:`runners._extras.require`, which names the ``[runners]`` extra
when it is missing.
"""
