"""Slots traded between clusters while annealing: a split that pays for a merge.

A cluster splits once the temperature falls below its own critical one, which its spread
sets, not its mass (:mod:`~rbfkm_engine.twins`). With ``k`` slots the widest regions take
them first, and when the last slot is gone every cluster has about the same extent,
dense or sparse, while K-Means' optimum gives dense regions smaller cells. A full fit
therefore keeps its twins: each pair, a centre and its twin, is its cluster split in two,
and the split would lower the objective by Ward's gain

    M_c M_t / (M_c + M_t) ||c - t||^2        (M: the masses the pass gave each half)

while merging two clusters ``a`` and ``b`` into the mean of their means ``mu`` raises it
by ``M_a M_b / (M_a + M_b) ||mu_a - mu_b||^2``. After each temperature, the pairs that
split and found no free slot are matched, the largest gain first, with the cheapest
merges of a cluster and the cluster of the nearest mean, no cluster in two moves, while
the gain exceeds the cost. The prices are those of the soft state the pass left; as the
temperature falls they tend to the hard ones, so a slot moves only where K-Means'
objective says it pays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kdtree import TREE_MAX_FEATURES, nearest_others
from .progress import Interrupt


@dataclass(frozen=True)
class Trade:
    """One traded slot: cluster ``dropped`` merges into ``kept``, and ``split``'s twin
    becomes a centre of its own."""

    kept: int
    dropped: int
    split: int


@dataclass(frozen=True)
class Clusters:
    """The clusters of a full fit, each its centre and twin together (float64 arrays on
    the host: a few dozen small ops a temperature, which numpy runs without torch's
    per-op cost)."""

    mass: np.ndarray  # (m,)
    mean: np.ndarray  # (m, d)

    @classmethod
    def of(
        cls,
        centres: np.ndarray,
        twins: np.ndarray,
        mass_centres: np.ndarray,
        mass_twins: np.ndarray,
    ) -> Clusters:
        """Masses and means; a cluster with no mass keeps its centre as its mean."""
        mass = mass_centres + mass_twins
        total = mass_centres[:, None] * centres + mass_twins[:, None] * twins
        empty = mass <= 0
        mean = total / np.where(empty, 1.0, mass)[:, None]
        if empty.any():
            mean[empty] = centres[empty]
        return cls(mass, mean)

    def merged(self, trades: list[Trade]) -> np.ndarray:
        """Each trade's merged centre: the mean of its two clusters (rows in order)."""
        kept = np.array([t.kept for t in trades], dtype=np.int64)
        dropped = np.array([t.dropped for t in trades], dtype=np.int64)
        a, b = self.mass[kept, None], self.mass[dropped, None]
        both = np.maximum(a + b, np.finfo(np.float64).tiny)
        return (a * self.mean[kept] + b * self.mean[dropped]) / both


def ward_gains(mass_centres: np.ndarray, mass_twins: np.ndarray, sep2: np.ndarray) -> np.ndarray:
    """Each pair's split gain, ``M_c M_t / (M_c + M_t) ||c - t||^2``."""
    both = np.maximum(mass_centres + mass_twins, np.finfo(np.float64).tiny)
    return mass_centres * mass_twins / both * sep2


def nearest_means(
    mean: np.ndarray, block_entries: int, check: Interrupt | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each mean's nearest other mean and the squared distance to it, a block of rows
    at a time (about ``block_entries`` distances, two such arrays at once: the budget
    of the merge test's blocks, ``twins.MERGE_BLOCK_ENTRIES``), with ``check`` (the
    fit's stop check) before each block; beyond one block, in at most
    :data:`TREE_MAX_FEATURES` features, from a k-d tree (:func:`_tree_nearest`)."""
    m = mean.shape[0]
    nearest = np.zeros(m, dtype=np.int64)
    d2 = np.full(m, np.inf)
    if m < 2:
        return nearest, d2
    if m * m > block_entries and mean.shape[1] <= TREE_MAX_FEATURES:
        if check is not None:
            check()
        return _tree_nearest(mean)
    norms = (mean * mean).sum(axis=1)
    rows = max(1, block_entries // m)
    for start in range(0, m, rows):
        if check is not None:
            check()
        stop = min(start + rows, m)
        # ||a||^2 + ||b||^2 - 2 a.b, in place but for the sum of the norms.
        block = mean[start:stop] @ mean.T
        block *= -2.0
        block += norms[start:stop, None] + norms[None, :]
        own = np.arange(start, stop)
        block[own - start, own] = np.inf
        nearest[start:stop] = block.argmin(axis=1)
        d2[start:stop] = np.maximum(block[own - start, nearest[start:stop]], 0.0)
    return nearest, d2


def _tree_nearest(mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nearest_means` from a k-d tree of the means: each one's two nearest, itself
    and the other (either first where another mean coincides with it; of means equally
    near, any may come back, where the blocks give the lowest index)."""
    distance, index = nearest_others(mean, 2)
    own = index[:, 0] == np.arange(mean.shape[0])
    nearest = np.where(own, index[:, 1], index[:, 0])
    return nearest, np.where(own, distance[:, 1], distance[:, 0]) ** 2


def merge_costs(
    clusters: Clusters, block_entries: int, check: Interrupt | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each cluster's nearest (by means, see :func:`nearest_means`) and the Ward cost of
    merging the two."""
    nearest, d2 = nearest_means(clusters.mean, block_entries, check)
    mass = clusters.mass
    other = mass[nearest]
    both = np.maximum(mass + other, np.finfo(np.float64).tiny)
    return nearest, mass * other / both * d2


def matched_trades(
    waiting: list[int],
    gains: list[float],
    nearest: list[int],
    costs: list[float],
    busy: set[int],
) -> list[Trade]:
    """The trades of splits ``waiting`` (gains ``gains``, in the same order) against the
    merges of each cluster ``a`` with ``nearest[a]`` (cost ``costs[a]``): the largest gain
    with the cheapest merge while the gain exceeds the cost, no cluster in two moves nor
    in ``busy`` (those given a free slot)."""
    splits = sorted(zip(gains, waiting, strict=True), key=lambda pair: -pair[0])
    merges = sorted(range(len(costs)), key=costs.__getitem__)
    used = set(busy)
    made: list[Trade] = []
    s = 0
    for a in merges:
        b = nearest[a]
        if a in used or b in used or a == b:
            continue
        while s < len(splits) and splits[s][1] in used:
            s += 1
        if s == len(splits) or not splits[s][0] > costs[a]:
            break
        j = splits[s][1]
        if j in (a, b):
            continue  # the split's own cluster: try the next merge
        made.append(Trade(kept=min(a, b), dropped=max(a, b), split=j))
        used.update((a, b, j))
        s += 1
    return made
