"""The k path: every count of centres a grown fit reaches while annealing.

A grown fit passes through 1, 2, ... centres by phase transitions (see
:mod:`~rbfkm_engine.twins`); each count lives from the temperature at which it appeared
to the one at which one of its clusters split again. :class:`PathRecorder` notes those
transitions and the centres of each count just before it split (its coldest annealed
state). With ``n_clusters="auto"``, :func:`settle_path` then gives every count a short
Lloyd finish from those centres (or from the coldest centres merged down to its count,
whichever ends lower), its inertia, cluster masses and the labels of a seeded sample of
rows, which is all the criteria of :mod:`~rbfkm_engine.choose_k` need: one fit instead of
one per ``k``. A fit with a fixed ``k`` keeps the path as annealing left it, which costs
no pass over the data.

Everything here is in the fit's frame; :mod:`~rbfkm_engine.model` converts to the data's
units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .passes import Workspace

#: Lloyd iterations of a path count's finish (fewer once the centres stop moving).
PATH_LLOYD_ITERATIONS = 10
#: Counts of centres up to this many keep their centres on the path of a fit with a
#: fixed ``n_clusters`` (all of them with ``n_clusters="auto"``): the snapshots hold
#: ``sum_k k`` centres.
PATH_CENTRES_LIMIT = 64
#: Rows of the seeded sample whose labels each count keeps (for a silhouette).
PATH_SAMPLE_ROWS = 1000


@dataclass(frozen=True)
class KPathRecord:
    """One count of centres on a fitted estimator's ``k_path_``, in the data's units.

    ``k``: the count; ``sigma_appear``: the temperature at which annealing reached it
    (``None`` when it was only reached by seeding, when annealing skipped it and
    ``n_clusters="auto"`` filled it in by merging the coldest centres, or for a fit that
    did not anneal);
    ``sigma_split``: the temperature at which it split again (``None`` for the last);
    ``centers``: with ``n_clusters="auto"`` after a short Lloyd finish from its annealed
    centres, with a fixed ``k`` as annealing left them (``None`` beyond the counts that
    keep centres, see :data:`PATH_CENTRES_LIMIT`); ``inertia``: of the settled centres
    (``n_clusters="auto"``; with a fixed ``k`` only the last count, the fit itself, has
    one).
    """

    k: int
    sigma_appear: float | None
    sigma_split: float | None
    inertia: float | None
    centers: Any = None

    @property
    def lifetime(self) -> float | None:
        """``log(sigma_appear / sigma_split)``: the range of temperatures the count lives
        over (``None`` unless it both appeared and split while annealing)."""
        if self.sigma_appear is None or self.sigma_split is None:
            return None
        return math.log(self.sigma_appear / self.sigma_split)


@dataclass
class PathCount:
    """One count of centres on the path, in the fit's frame.

    ``sigma_appear``: the temperature at which the count appeared (``None``: it was only
    reached by seeding after annealing); ``sigma_split``: the one at which it split again
    (``None`` for the last). ``centres``: as annealing left them, until
    :func:`settle_path` replaces them (``None`` beyond :data:`PATH_CENTRES_LIMIT`);
    ``inertia``, ``sizes`` (weighted cluster masses) and ``sample_labels`` come from the
    count's short Lloyd finish.
    """

    k: int
    sigma_appear: float | None
    sigma_split: float | None
    centres: torch.Tensor | None = None
    inertia: float | None = None
    sizes: torch.Tensor | None = None
    sample_labels: torch.Tensor | None = None


class PathRecorder:
    """Notes the transitions of the count of centres during annealing.

    ``limit``: counts up to this many keep their centres. The count 1 (the weighted mean)
    appears at the hottest temperature.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.appear: dict[int, float] = {}
        self.split: dict[int, tuple[float, torch.Tensor | None]] = {}

    def start(self, sigma: float, count: int) -> None:
        """Annealing begins at ``sigma`` with ``count`` centres."""
        self.appear.setdefault(count, sigma)

    def change(self, sigma: float, before: torch.Tensor, count: int) -> None:
        """After the temperature ``sigma`` the centres ``before`` became ``count``."""
        m = before.shape[0]
        if m == count:
            return
        # A merge (fewer centres) is no split: the count lives on until one of its
        # clusters splits for good.
        if count > m and m in self.appear and m not in self.split:
            self.split[m] = (sigma, before.clone() if m <= self.limit else None)
        self.appear.setdefault(count, sigma)

    def counts(self, final: torch.Tensor, up_to: int) -> list[PathCount]:
        """The counts reached, up to ``up_to`` centres, ending with the fit's own ``final``
        centres when their count is among them (it has not split: ``sigma_split=None``)."""
        k_final = final.shape[0]
        path = []
        for k in sorted(set(self.appear) | {k_final}):
            if k > up_to:
                break
            if k == k_final:
                keep = final if k <= self.limit else None
                path.append(PathCount(k, self.appear.get(k), None, keep))
            elif k in self.split:
                sigma, centres = self.split[k]
                path.append(PathCount(k, self.appear.get(k), sigma, centres))
        return path


def settle_path(
    ws: Workspace,
    path: list[PathCount],
    tol: float,
    generator: torch.Generator | None,
    coldest: torch.Tensor,
    fill_to: int = 0,
) -> torch.Tensor:
    """Give each count with centres a short Lloyd finish (at most
    :data:`PATH_LLOYD_ITERATIONS`), its inertia, weighted sizes and the labels of a
    seeded sample of rows; returns that sample's rows.

    Over the shards of a data-parallel fit every quantity is the union's: the masses and
    sizes are summed over the shards, and the sample is drawn from the rows of every shard
    (the same draws on every rank), so each rank settles and scores the same path.

    Each count is finished from the lower-inertia of two starts: its centres as annealing
    left them, and the ``coldest`` centres (the most the fit grew) merged down to its
    count by Ward's rule (:func:`ward_levels`). Annealing may split a cluster
    before the one that merges two (a twin pair that drifts apart at a temperature where
    it would later fall back together); merging the coldest centres gives the same count
    the partition the finer structure implies. Counts up to ``fill_to`` that annealing
    skipped (several pairs split at one temperature) join the path from the merged start
    alone, without temperatures, so that every ``k`` can be chosen. Runs after the fit's
    own last pass: it reuses the workspace's labels and buffers.
    """
    sample = PathSample(ws, generator)
    settled = [count.k for count in path if count.centres is not None]
    if not settled and not fill_to:
        return sample.rows()
    ws.hard_labels(coldest)
    masses = _sizes(ws, coldest.shape[0])
    merged = ward_levels(coldest, masses, max([*settled, fill_to]))
    if ws.sphere:  # merged directions, back on the sphere
        merged = {k: C / C.norm(dim=1, keepdim=True) for k, C in merged.items()}
    reached = {count.k for count in path}
    for k in range(1, fill_to + 1):
        if k not in reached and k in merged:
            path.append(PathCount(k, None, None, merged[k]))
    path.sort(key=lambda count: count.k)
    for count in path:
        if count.centres is None:
            continue
        starts = [C for C in (count.centres, merged.get(count.k)) if C is not None]
        start = min(starts, key=ws.hard_labels) if len(starts) > 1 else starts[0]
        C = settle(ws, start, tol)
        count.centres = C
        count.inertia = ws.hard_labels(C)
        count.sizes = _sizes(ws, C.shape[0])
        count.sample_labels = sample.labels()
    return sample.rows()


def _sizes(ws: Workspace, k: int) -> torch.Tensor:
    """The weighted mass of each of the ``k`` clusters of the workspace's labels, over
    every shard."""
    return ws.reducer.sum(torch.bincount(ws.labels, weights=ws.w, minlength=k).double())


def ward_levels(C: torch.Tensor, masses: torch.Tensor, up_to: int) -> dict[int, torch.Tensor]:
    """``C`` merged pair by pair, the pair whose merge raises the inertia least first
    (Ward: ``M_a M_b / (M_a + M_b) ||c_a - c_b||^2``, the merged centre their weighted
    mean); the centres at every count up to ``up_to``. Centres of no mass are dropped."""
    keep = masses > 0
    centres, mass = C[keep].double(), masses[keep]
    levels: dict[int, torch.Tensor] = {}
    while centres.shape[0] >= 1:
        m = centres.shape[0]
        if m <= up_to:
            levels[m] = centres.to(C.dtype)
        if m == 1:
            break
        d2 = torch.cdist(centres, centres).pow_(2)
        cost = d2 * (mass[:, None] * mass[None, :]) / (mass[:, None] + mass[None, :])
        cost.fill_diagonal_(torch.inf)
        a, b = divmod(int(torch.argmin(cost)), m)
        total = mass[a] + mass[b]
        merged = (mass[a] * centres[a] + mass[b] * centres[b]) / total
        rest = [i for i in range(m) if i not in (a, b)]
        centres = torch.cat([centres[rest], merged[None]])
        mass = torch.cat([mass[rest], total[None]])
    return levels


def settle(ws: Workspace, C: torch.Tensor, tol: float) -> torch.Tensor:
    """Up to :data:`PATH_LLOYD_ITERATIONS` Lloyd iterations from ``C`` (empty clusters
    re-seeded, as Lloyd does); stops once the centres move less than ``tol``."""
    for iteration in range(PATH_LLOYD_ITERATIONS):
        C, shift, _ = ws.lloyd_iteration(C, warm=iteration > 0)
        if shift <= tol:
            break
    return C


class PathSample:
    """At most :data:`PATH_SAMPLE_ROWS` distinct rows of the union of the shards, drawn by
    the fit's generator (all rows when there are no more): every rank draws the same global
    indices and fills in the rows of its own shard."""

    def __init__(self, ws: Workspace, generator: torch.Generator | None) -> None:
        self.ws = ws
        n, device = ws.n_total, ws.X.device
        if n <= PATH_SAMPLE_ROWS:
            chosen = torch.arange(n, device=device)
        else:
            gen_device = device if generator is None else generator.device
            chosen = torch.randperm(n, generator=generator, device=gen_device)[:PATH_SAMPLE_ROWS]
            chosen = chosen.to(device)
        local = chosen - ws.offset
        mine = (local >= 0) & (local < ws.X.shape[0])
        self.size = chosen.shape[0]
        self.positions = torch.nonzero(mine).squeeze(1)
        self.local_rows = local[mine]

    def _union(self, part: torch.Tensor, trailing: tuple[int, ...]) -> torch.Tensor:
        """``part`` (this shard's sampled rows of something) at its places in the sample,
        summed over the shards: the whole sample on every rank."""
        whole = torch.zeros((self.size, *trailing), dtype=part.dtype, device=part.device)
        whole[self.positions] = part
        return self.ws.reducer.sum(whole)

    def rows(self) -> torch.Tensor:
        """The sampled rows of the data."""
        return self._union(self.ws.X[self.local_rows], (self.ws.X.shape[1],))

    def labels(self) -> torch.Tensor:
        """The workspace's current labels of the sampled rows."""
        return self._union(self.ws.labels[self.local_rows], ())
