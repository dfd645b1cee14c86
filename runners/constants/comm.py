"""The few collectives a constants measurement needs, also without a process group (one rank, tests).

:class:`Group` wraps ``torch.distributed``'s default group when one is initialised, and is a group of one
rank otherwise: ``mean`` averages a tensor over ranks (all-reduce, then / world size) and ``gather``
collects a picklable object from every rank (``all_gather_object``).
"""

from __future__ import annotations

from typing import Any


class Group:
    """The ranks taking part: the default process group if there is one, else this process alone."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist if dist.is_available() and dist.is_initialized() else None
        self.world = self.dist.get_world_size() if self.dist else 1
        self.rank = self.dist.get_rank() if self.dist else 0

    def mean(self, tensor: Any) -> Any:
        """The average of ``tensor`` over the ranks (a new tensor; the argument is left as it was)."""
        out = tensor.clone()
        if self.dist and self.world > 1:
            self.dist.all_reduce(out)
            out /= self.world
        return out

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        if not self.dist or self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out
