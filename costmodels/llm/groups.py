"""Where a communication group's ranks sit, and the environment that its collectives see.

A group of k ranks whose neighbours are ``stride`` ranks apart (:meth:`PlanArray.stride`) has
r = min(k, max(1, g // stride)) ranks in each node of g GPUs (derived here, for strides and sizes that
divide each other, as the planner's powers of two and node-sized tensor groups do). Every GPU belongs to
one group of each kind, and all groups of a kind communicate at the same time, so the g / r groups of a
node that leave it share its NICs.

:func:`group_view` turns the environment into the one that a single group sees, so that
:func:`costmodels.choose` (the library layer) prices the group's collectives as they run:

* a group inside a node (r = k) keeps the environment: the library puts its k ranks in one node;
* a group that spans nodes sees nodes of r GPUs, and its share of the node's NICs as one NIC of
  ``beta * g / (r * nics_per_node)`` s/byte (e.g. a data-parallel group of one GPU per DGX node: one 200 Gb/s
  HDR NIC each).

An environment whose only link is NVLink or PCIe (``link`` not ``network``) is one node: every group is
inside it. Point-to-point messages (pipeline sends, ring-attention exchanges) are not collectives:
:func:`p2p_time` prices them as alpha + n beta on the link that the neighbours cross (the intra-node link,
or the GPU's share of its node's NICs), stated here, outside the library's tuning model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..environment import Environment
from ..environment_array import DESCRIPTORS, EnvironmentArray


def nodes_of(env: Environment) -> int:
    """GPUs per node as the placement sees them (0: the whole environment is one node)."""
    return 0 if env.link != "network" else env.gpus_per_node


def ranks_per_node(k: Any, stride: Any, env: Environment) -> np.ndarray:
    """r: ranks of one group in a node (see the module docstring)."""
    k = np.asarray(k, dtype=np.int64)
    g = nodes_of(env)
    if g == 0:
        return k
    return np.minimum(k, np.maximum(1, g // np.asarray(stride, dtype=np.int64)))


def inside_node(k: Any, stride: Any, env: Environment) -> np.ndarray:
    """Whether a group of k ranks ``stride`` apart lies inside one node."""
    return ranks_per_node(k, stride, env) >= np.asarray(k)


def group_view(k: Any, stride: Any, env: Environment) -> EnvironmentArray:
    """The environment one group of k ranks ``stride`` apart sees (arrays broadcast over k and stride)."""
    k, stride = np.broadcast_arrays(np.asarray(k, dtype=np.int64), np.asarray(stride, dtype=np.int64))
    shape = k.shape
    intra_alpha = env.intra_alpha if env.two_level else env.alpha
    intra_beta = env.intra_beta if env.two_level else env.beta
    base = {"alpha": np.full(shape, env.alpha), "gamma": np.full(shape, env.gamma),
            "intra_alpha": np.full(shape, intra_alpha), "intra_beta": np.full(shape, intra_beta)}
    descriptors = {d: getattr(env, d) for d in DESCRIPTORS}
    g = nodes_of(env)
    if g <= 1:  # one node, or one GPU per node: the environment as it is
        return EnvironmentArray(**base, beta=np.full(shape, env.beta), gpus_per_node=np.full(shape, env.gpus_per_node),
                                nics_per_node=np.full(shape, env.nics_per_node), names=env.name,
                                descriptors=descriptors)
    r = ranks_per_node(k, stride, env)
    inside = r >= k
    beta = np.where(inside, env.beta, env.beta * g / (r * env.nics_per_node))
    return EnvironmentArray(**base, beta=beta, gpus_per_node=np.where(inside, g, r),
                            nics_per_node=np.where(inside, env.nics_per_node, 1), names=env.name,
                            descriptors=descriptors)


def p2p_time(nbytes: Any, k: Any, stride: Any, env: Environment) -> np.ndarray:
    """One point-to-point message between neighbours of a group of k ranks ``stride`` apart: alpha + n beta of
    the link crossed; 0 for a group of one. Across nodes every GPU of a node sends at once, so each has
    nics_per_node / g of the node's NICs (see the module docstring)."""
    k = np.asarray(k)
    n = np.asarray(nbytes, dtype=np.float64)
    g = nodes_of(env)
    inside = inside_node(k, stride, env)
    intra_alpha = env.intra_alpha if env.two_level else env.alpha
    intra_beta = env.intra_beta if env.two_level else env.beta
    share = env.beta * max(g, 1) / env.nics_per_node
    t = np.where(inside, intra_alpha + n * intra_beta, env.alpha + n * share)
    return np.where(k > 1, t, 0.0)
