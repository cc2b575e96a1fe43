"""Centre swaps: replace one centre by a better-placed one when that lowers the inertia.

Lloyd's fixed points include poor ones where one region holds a centre too many and
another a centre too few: no Lloyd step moves a centre across. A swap does. Following the
local search of Lattanzi and Sohler (2019, "A better k-means++ algorithm via local
search"), candidate points are drawn with probability proportional to ``w_i d1_i``
(``d1_i``: squared distance to the nearest centre); the solver moves each to the mean of
the points it would take (:meth:`~rbfkm_engine.solver.FixedPointIteration.captured_means`).
The inertia after replacing centre ``j`` by a candidate ``p``, before any re-centring, is
exact from the two nearest squared distances ``d1_i <= d2_i`` and the label ``l_i`` of
every point:

.. math::

    \\mathrm{cost}(j, p) = \\sum_i w_i \\min(d^{(-j)}_i, \\|x_i - p\\|^2), \\qquad
    d^{(-j)}_i = d2_i \\text{ if } l_i = j \\text{ else } d1_i,

which splits into ``sum_i w_i min(d1_i, dp_i)`` (the same for every ``j``) plus, for the
points of cluster ``j``, ``w_i (min(d2_i, dp_i) - min(d1_i, dp_i))``. One pass over the
points thus prices all ``k x B`` swaps of ``B`` candidates: an ``index_add_`` over the
labels. The solver takes the best swap when it lowers the inertia and lets Lloyd settle.

That price is the inertia before any other centre moves, so it misses swaps that pay only
after Lloyd: on scikit-learn's digits, a poor fixed point 1% above the best one has no
swap that pays at once, while about a third of its best-priced swaps reach a better fixed
point after Lloyd. The solver therefore also tries a few (``SWAP_TRIALS``) of the
best-priced swaps that do not pay at once, and keeps one only if its fixed point is
better.
"""

from __future__ import annotations

import torch

#: Candidate points priced per round.
SWAP_CANDIDATES = 16
#: The search stops after this many rounds in a row without a swap that pays.
SWAP_PATIENCE = 10
#: Swaps that do not pay at once but are tried anyway, with Lloyd to a new fixed point.
SWAP_TRIALS = 4
#: A swap must lower the inertia by more than this fraction (float32 distances carry
#: rounding of about 1e-7 relative to ``||x||^2``).
SWAP_MIN_GAIN = 1e-5


def swap_costs(
    nearest: torch.Tensor,
    second: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor | None,
    candidate_dist: torch.Tensor,
    n_clusters: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block's share of the swap costs, in float64.

    Parameters
    ----------
    nearest, second : (m,) squared distances to the nearest and second-nearest centre
    labels : (m,) int64, the nearest centre
    weights : (m,) sample weights or ``None``
    candidate_dist : (m, B) squared distances to the ``B`` candidates
    n_clusters : k

    Returns
    -------
    ``base`` (B,) and ``delta`` (k, B): ``cost(j, b)`` is the sum over blocks of
    ``base[b] + delta[j, b]``.
    """
    kept = torch.minimum(candidate_dist, nearest.unsqueeze(1))
    without = torch.minimum(candidate_dist, second.unsqueeze(1)).sub_(kept)
    if weights is not None:
        kept.mul_(weights.unsqueeze(1))
        without.mul_(weights.unsqueeze(1))
    base = kept.sum(dim=0, dtype=torch.float64)
    delta = torch.zeros(
        (n_clusters, candidate_dist.shape[1]), dtype=torch.float64, device=nearest.device
    )
    delta.index_add_(0, labels, without.double())
    return base, delta
