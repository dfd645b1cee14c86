"""Work on torchrun ranks, both sides of it: the launcher (torchrun command lines for one node or an emulated
cluster, run and waited for: :mod:`.launcher`) and the rank side (joining the process group, the hang watchdog,
the one-line error protocol: :mod:`.rank`), and :mod:`.lifeline`, which keeps torchrun, its ranks and other children
from outliving the process that started them. Sweeps, training and validation all run through these."""
