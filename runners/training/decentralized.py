"""Local and decentralized data-parallel training: ``local_sgd`` and ``dpsgd``.

Both take a local SGD step ``x_i <- x_i - lr * g_i`` on every rank, then communicate models, not gradients:

* ``local_sgd`` (Stich, ICLR 2019; Lin et al., ICLR 2020) averages the models over all ranks with one
  all-reduce every ``H`` steps (after steps H, 2H, ...) and communicates nothing in between; with ``H = 1``
  it is synchronous SGD on the concatenated batch (to float32 rounding).
* ``dpsgd`` (Lian et al., NeurIPS 2017) gossips after every local step: rank i replaces its model by
  ``sum_j W_ij x_j`` with W = :func:`convergence.mixing_matrix` of ``topology`` (default ``ring``:
  Metropolis weights 1/3 on itself and each ring neighbour; 1/2 each for two ranks), the same step as
  :mod:`convergence.sim_algorithms`. Each rank sends its whole model to, and receives one from, every j
  with ``W_ij != 0`` by point-to-point ``isend`` / ``irecv`` (gloo and NCCL both have them), so a ring
  costs two neighbour exchanges per step whatever the number of ranks. Every receive is posted before any
  send: gloo's tcp pair sends a message only after the peer's receive notice, and a rank's notices leave
  through the same queue as its data, so a rank that sent first would hold its notice behind its whole model
  and the two directions of the exchange would cross one after the other. Measured on two emulated
  200 Mbit/s nodes, 8 MiB each way: 694 ms sending first, 351 ms receiving first (one way: 351 ms).

Models are the parameters and the floating-point buffers (e.g. BatchNorm's running statistics), flattened
into one message per dtype. All ranks start from the group's first rank's model (broadcast at construction,
as DDP does). ``StepResult.exposed_comm`` is the averaging or the exchange; ``update`` the SGD step and the
mixing; ``extra["communicated"]`` is 1 on steps that communicated.
"""

from __future__ import annotations

from typing import Any

from costmodels.errors import CommscopeError

from .base import TECHNIQUES, LossFn, StepResult, Technique, Trainer
from .compressed.shared import _global_rank, _int_option, broadcast_from_first


def _model_tensors(model: Any) -> list[Any]:
    return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]


def _flat_by_dtype(tensors: list[Any]) -> list[tuple[list[Any], Any]]:
    """[(tensors of one dtype, their values flattened into one new tensor)]."""
    import torch

    groups: dict[Any, list[Any]] = {}
    for t in tensors:
        groups.setdefault(t.dtype, []).append(t)
    return [(ts, torch.cat([t.detach().reshape(-1) for t in ts])) for ts in groups.values()]


def _copy_back(tensors: list[Any], flat: Any) -> None:
    for t, piece in zip(tensors, flat.split([t.numel() for t in tensors]), strict=True):
        t.data.copy_(piece.view_as(t))


class _LocalStep(Trainer):
    """A local SGD step on every rank, then :meth:`communicate` (timed as exposed communication)."""

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        super().__init__(model, lr, group, **options)
        self.iteration = 0
        broadcast_from_first(model, group)

    def communicate(self) -> tuple[bool, float]:
        """Returns (whether it communicated, seconds spent mixing after the exchange)."""
        raise NotImplementedError

    def step(self, inputs: Any, targets: Any, loss_fn: LossFn) -> StepResult:
        import torch

        from .exact_common import sgd_

        t0 = self.clock()
        for p in self.model.parameters():
            p.grad = None
        loss = loss_fn(self.model(inputs), targets)
        t1 = self.clock()
        loss.backward()
        t2 = self.clock()
        sgd_(list(self.model.parameters()), self.lr)
        t3 = self.clock()
        with torch.no_grad():
            communicated, mixing = self.communicate()
        t4 = self.clock()
        self.iteration += 1
        return StepResult(loss=float(loss.detach()), total=t4 - t0, forward=t1 - t0, backward=t2 - t1,
                          exposed_comm=t4 - t3 - mixing, update=t3 - t2 + mixing,
                          extra={"communicated": float(communicated)})


class LocalSGD(_LocalStep):
    def __init__(self, model: Any, lr: float, group: Any = None, *, H: int) -> None:
        self.H = _int_option("H", H, 1)
        super().__init__(model, lr, group, H=H)

    def communicate(self) -> tuple[bool, float]:
        import torch.distributed as dist

        if (self.iteration + 1) % self.H:
            return False, 0.0
        for tensors, flat in _flat_by_dtype(_model_tensors(self.model)):
            dist.all_reduce(flat, group=self.group)
            _copy_back(tensors, flat.div_(self.world_size))
        return True, 0.0


class DPSGD(_LocalStep):
    def __init__(self, model: Any, lr: float, group: Any = None, *, topology: str) -> None:
        from convergence.topology import TOPOLOGIES

        if not isinstance(topology, str):
            raise CommscopeError(f"topology must be a name ({', '.join(TOPOLOGIES.names())}), got {topology!r}")
        TOPOLOGIES.get(topology)  # an unknown name raises, listing the known ones
        self.topology = topology
        super().__init__(model, lr, group, topology=topology)
        from convergence import mixing_matrix

        w = mixing_matrix(topology, self.world_size)
        self.mixing = w
        self.self_weight = float(w[self.rank, self.rank])
        self.neighbours = [(j, float(w[self.rank, j])) for j in range(self.world_size)
                           if j != self.rank and w[self.rank, j] != 0]

    def communicate(self) -> tuple[bool, float]:
        import torch
        import torch.distributed as dist

        if not self.neighbours:
            return False, 0.0
        mixing = 0.0
        for tensors, flat in _flat_by_dtype(_model_tensors(self.model)):
            requests, received = [], []
            peers = [(_global_rank(self.group, j), w) for j, w in self.neighbours]
            for peer, w in peers:  # every receive posted before any send (see the module docstring)
                buf = torch.empty_like(flat)
                requests.append(dist.irecv(buf, src=peer, group=self.group))
                received.append((w, buf))
            requests += [dist.isend(flat, dst=peer, group=self.group) for peer, _ in peers]
            for r in requests:
                r.wait()
            t0 = self.clock()
            mixed = flat * self.self_weight
            for w, buf in received:
                mixed.add_(buf, alpha=w)
            _copy_back(tensors, mixed)
            mixing += self.clock() - t0
        return True, mixing


for _t in (
    Technique("local_sgd", "local SGD: H local steps, then the models averaged by one all-reduce", LocalSGD,
              exact=False, schedule="local_sgd", bound="local_sgd", options={"H": 8}, replicas_differ=True),
    Technique("dpsgd", "D-PSGD: a local step, then gossip with the topology's mixing matrix (ring: Metropolis "
              "weights 1/3) by point-to-point exchange with each neighbour", DPSGD, exact=False, bound="dpsgd",
              schedule="dpsgd",
              options={"topology": "ring"}, replicas_differ=True),
):
    TECHNIQUES.register(_t)
