"""Choosing ``k`` from the path of one annealed fit (``n_clusters="auto"``).

Every criterion looks at the counts ``2 .. max_clusters`` of the k path
(:mod:`~rbfkm_engine.kpath`), each settled by a short Lloyd finish:

- ``"gap"`` (the default): the gap statistic (Tibshirani, Walther and Hastie, 2001) with
  every ``log W_k`` read off a k path: the data's, and those of :data:`GAP_REFERENCES`
  uniform reference sets in the box of the data's principal axes, each one annealed fit
  of its own (:class:`GapReference`): ``1 + B`` fits instead of ``K (1 + B)``. ``k`` is
  the smallest count with ``Gap(k) >= Gap(k') - s_k'``, ``k'`` the next count.
- ``"silhouette"``: the mean silhouette of a seeded sample of rows (Rousseeuw, 1987)
  under the count's labels.
- ``"lifetime"``: the count that lives over the widest range of temperatures,
  ``log(sigma_appear / sigma_split)``, as in deterministic annealing (Rose, 1998): a
  structure of ``k`` clusters is stable from the temperature where its last cluster formed
  down to the one where some cluster's own spread makes it split.
- ``"bic"``: the Bayesian information criterion of a mixture of spherical Gaussians of
  one shared variance at the count's centres (X-means, Pelleg and Moore, 2000).

The criteria were compared on synthetic and real labelled sets (benchmarks/choose_k.py,
benchmarks/README.md); the default is the one that recovered the true ``k`` most often
there. None has a parameter fitted to those sets (the gap's ``B = 5`` references is
Tibshirani's own order of magnitude; each has at most :data:`GAP_REFERENCE_ROWS` rows, so
their cost does not grow with the data). The lifetime suffers from the twins' schedule: a
count lives a whole number of temperatures (``log(1/cooling)`` each), and merges and
skipped counts blur it. Ties go to the smaller ``k``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from .blocks import iter_chunks
from .kpath import PathCount
from .reducer import LOCAL, Reducer

#: The criteria ``choose`` knows, the default first.
CRITERIA = ("gap", "silhouette", "lifetime", "bic")
#: Reference sets of the ``"gap"`` criterion, and the rows of each (at most the data's).
GAP_REFERENCES = 5
GAP_REFERENCE_ROWS = 2000
#: Rows per block when projecting the data on its principal axes.
_PROJECT_ROWS = 65536


@dataclass(frozen=True)
class GapReference:
    """The reference side of the gap statistic, per count ``k`` reached on every reference
    path: ``mean_log[k]``, the mean over the reference sets of ``log`` of the inertia per
    unit of weight, and ``spread[k] = sd_k sqrt(1 + 1/B)``."""

    mean_log: dict[int, float]
    spread: dict[int, float]

    @classmethod
    def from_paths(cls, paths: list[dict[int, float]]) -> GapReference:
        """From each reference set's inertia per row, by count."""
        shared = set.intersection(*(set(path) for path in paths)) if paths else set()
        mean_log, spread = {}, {}
        for k in sorted(shared):
            logs = np.log([path[k] for path in paths])
            mean_log[k] = float(logs.mean())
            spread[k] = float(logs.std()) * math.sqrt(1.0 + 1.0 / len(paths))
        return cls(mean_log, spread)


def principal_box_samples(
    X: torch.Tensor,
    mean: torch.Tensor,
    cov: torch.Tensor | None,
    generator: torch.Generator,
    rows: int,
    reducer: Reducer = LOCAL,
) -> list[torch.Tensor]:
    """:data:`GAP_REFERENCES` sets of ``rows`` points drawn uniformly in the box the data
    span along their principal axes (the eigenvectors of ``cov``; the coordinate axes when
    the fit had no room for the covariance, ``None``), in ``X``'s frame; over shards the
    box is the union's and every rank draws the same sets."""
    d = X.shape[1]
    if cov is None:
        axes = torch.eye(d, dtype=torch.float64, device=X.device)
    else:
        axes = torch.linalg.eigh(cov.double().cpu()).eigenvectors.to(X.device)
    low = torch.full((d,), math.inf, dtype=torch.float64, device=X.device)
    high = torch.full((d,), -math.inf, dtype=torch.float64, device=X.device)
    for block in iter_chunks(X.shape[0], _PROJECT_ROWS):
        projected = (X[block].double() - mean.double()) @ axes
        low = torch.minimum(low, projected.min(dim=0).values)
        high = torch.maximum(high, projected.max(dim=0).values)
    bounds = reducer.gather(torch.cat([-low, high]).cpu()).amax(dim=0).to(X.device)
    low, high = -bounds[:d], bounds[d:]
    sets = []
    for _ in range(GAP_REFERENCES):
        uniform = torch.rand(
            (rows, d), generator=generator, dtype=torch.float64, device=generator.device
        ).to(X.device)
        points = (low + uniform * (high - low)) @ axes.T + mean.double()
        sets.append(points.to(X.dtype))
    return sets


def gap_choice(
    path: list[PathCount], reference: GapReference, total_weight: float, max_clusters: int
) -> int | None:
    """Tibshirani's rule over the path's counts ``2 .. max_clusters`` that have an inertia
    and a reference: the smallest ``k`` whose gap is at least the next count's less its
    spread; the largest such count when none is; ``None`` when there is none."""
    gaps = {
        count.k: reference.mean_log[count.k] - math.log(count.inertia / total_weight)
        for count in path
        if 2 <= count.k <= max_clusters
        and count.inertia is not None
        and count.inertia > 0
        and count.k in reference.mean_log
    }
    ks = sorted(gaps)
    for k, after in itertools.pairwise(ks):
        if gaps[k] >= gaps[after] - reference.spread[after]:
            return k
    return ks[-1] if ks else None


def choose(
    criterion: str,
    path: list[PathCount],
    max_clusters: int,
    X_sample: torch.Tensor,
    total_weight: float,
    reference: GapReference | None = None,
) -> int:
    """The ``k`` the ``criterion`` picks among the path's counts ``2 .. max_clusters``
    (``reference``: the gap statistic's, for ``"gap"``); the largest count reached when
    none of them can be scored (a path that never split gives 1)."""
    if criterion == "gap":
        assert reference is not None, "the gap criterion needs its reference paths"
        k = gap_choice(path, reference, total_weight, max_clusters)
        return k if k is not None else max((c.k for c in path if c.k <= max_clusters), default=1)
    candidates = [count for count in path if 2 <= count.k <= max_clusters]
    scores = {
        "lifetime": lifetime_scores,
        "bic": lambda cs: bic_scores(cs, X_sample.shape[1], total_weight),
        "silhouette": lambda cs: silhouette_scores(cs, X_sample),
    }[criterion](candidates)
    if not scores:
        reached = [count.k for count in path if count.k <= max_clusters]
        return max(reached, default=1)
    best = max(scores.values())
    return min(k for k, score in scores.items() if score == best)


def lifetime_scores(path: list[PathCount]) -> dict[int, float]:
    """``log(sigma_appear / sigma_split)`` of each count that both appeared and split
    while annealing."""
    return {
        count.k: math.log(count.sigma_appear / count.sigma_split)
        for count in path
        if count.sigma_appear is not None and count.sigma_split is not None
    }


def bic_scores(path: list[PathCount], n_features: int, total_weight: float) -> dict[int, float]:
    """BIC (larger is better) of each count with an inertia: spherical Gaussians of one
    variance ``inertia / (d (W - k))`` at the centres, mixing weights the cluster masses,
    ``k - 1 + k d + 1`` parameters; weights count as repeated points."""
    scores = {}
    W, d = total_weight, n_features
    for count in path:
        if count.inertia is None or count.sizes is None or W <= count.k:
            continue
        variance = count.inertia / (d * (W - count.k))
        if variance <= 0.0:
            continue
        sizes = count.sizes[count.sizes > 0].cpu().numpy()
        loglik = (
            float(np.sum(sizes * np.log(sizes / W)))
            - 0.5 * W * d * math.log(2.0 * math.pi * variance)
            - 0.5 * d * (W - count.k)
        )
        n_params = count.k * (d + 1)
        scores[count.k] = loglik - 0.5 * n_params * math.log(W)
    return scores


def silhouette_scores(path: list[PathCount], X_sample: torch.Tensor) -> dict[int, float]:
    """Mean silhouette of the sample rows under each count's labels (Euclidean distances
    in the fit's frame; on the unit sphere they rank as cosine distances)."""
    D = torch.cdist(X_sample.double(), X_sample.double())
    scores = {}
    for count in path:
        labels = count.sample_labels
        if labels is None:
            continue
        score = silhouette(D, labels)
        if score is not None:
            scores[count.k] = score
    return scores


def silhouette(D: torch.Tensor, labels: torch.Tensor) -> float | None:
    """Mean silhouette from a full distance matrix ``D`` of the rows and their labels
    (``None`` with fewer than 2 clusters or no cluster of 2 rows); a row alone in its
    cluster scores 0, as in scikit-learn."""
    used, labels = torch.unique(labels, return_inverse=True)
    k, n = used.numel(), labels.numel()
    if k < 2 or k >= n:
        return None
    onehot = torch.zeros(n, k, dtype=D.dtype, device=D.device)
    onehot[torch.arange(n, device=D.device), labels] = 1.0
    sums = D @ onehot  # (n, k): summed distance of each row to each cluster
    counts = onehot.sum(dim=0)
    own = counts[labels]
    a = sums[torch.arange(n, device=D.device), labels] / (own - 1).clamp_min(1.0)
    others = sums / counts
    others[torch.arange(n, device=D.device), labels] = math.inf
    b = others.min(dim=1).values
    s = torch.where(own > 1, (b - a) / torch.maximum(a, b).clamp_min(1e-300), 0.0)
    return float(s.mean())
