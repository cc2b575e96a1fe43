"""Choosing ``k`` from the path of one annealed fit (``n_clusters="auto"``).

Every criterion looks at the counts ``2 .. max_clusters`` of the k path
(:mod:`~rbfkm_engine.kpath`), each settled by a short Lloyd finish:

- ``"silhouette"`` (the default): the mean silhouette of a seeded sample of rows
  (Rousseeuw, 1987) under the count's labels.
- ``"lifetime"``: the count that lives over the widest range of temperatures,
  ``log(sigma_appear / sigma_split)``, as in deterministic annealing (Rose, 1998): a
  structure of ``k`` clusters is stable from the temperature where its last cluster formed
  down to the one where some cluster's own spread makes it split.
- ``"bic"``: the Bayesian information criterion of a mixture of spherical Gaussians of
  one shared variance at the count's centres (X-means, Pelleg and Moore, 2000).

The criteria were compared on synthetic and real labelled sets (benchmarks/choose_k.py,
benchmarks/README.md); the default is the one that recovered the true ``k`` most often
there. None has a parameter fitted to those sets. The lifetime suffers from the twins'
schedule: a count lives a whole number of temperatures (``log(1/cooling)`` each), and
merges and skipped counts blur it. Ties go to the smaller ``k``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .kpath import PathCount

#: The criteria ``choose`` knows, the default first.
CRITERIA = ("silhouette", "lifetime", "bic")


def choose(
    criterion: str,
    path: list[PathCount],
    max_clusters: int,
    X_sample: torch.Tensor,
    total_weight: float,
) -> int:
    """The ``k`` the ``criterion`` picks among the path's counts ``2 .. max_clusters``;
    the largest count reached when none of them can be scored (a path that never split
    gives 1)."""
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
