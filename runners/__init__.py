"""commscope's measuring half: the command line (:mod:`.cli`), the results store (:mod:`.results`), measuring
the network (:mod:`.measure`), torchrun plumbing (:mod:`.torchrun`), real training, its models and profiler
(:mod:`.training`), the predicted-vs-measured suite (:mod:`.validate`) and shipped reference data (:mod:`.reference`).

Everything that touches torch.distributed, devices, processes or result files lives here. The command line needs
only the core dependencies; parts that need PyTorch import it lazily through :func:`runners._extras.require`, which
names the ``[runners]`` extra when it is missing.
"""
