"""Moves out of poor Lloyd fixed points: centre swaps, split-merges and Hartigan moves.

Each move is priced here exactly, before any other centre moves; the solver
(:func:`~rbfkm_engine.local_search.refine`) follows the promising ones with Lloyd and keeps a
move only if the new fixed point is better.

Lloyd's fixed points include poor ones where one region holds a centre too many and
another a centre too few: no Lloyd step moves a centre across. A swap does. Following the
local search of Lattanzi and Sohler (2019, "A better k-means++ algorithm via local
search"), candidate points are drawn with probability proportional to ``w_i d1_i``
(``d1_i``: squared distance to the nearest centre); the solver moves each to the mean of
the points it would take (:func:`~rbfkm_engine.search_passes.captured_means`).
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
after Lloyd: a poor fixed point can have no swap that pays at once while several of its
best-priced swaps reach a better fixed point after Lloyd. The solver therefore also
tries a few (``SWAP_TRIALS``) of the best-priced swaps that do not pay at once, and
keeps one only if its fixed point is better.

A point swap moves a centre to where one point draws a cluster of its own. A poor fixed
point of the other common kind has two centres sharing one natural cluster and one centre
covering two: there the better move is a *split-merge*, which deletes centre ``j`` (its
points go to their second-nearest centre, at the exact cost
``sum_{l_i = j} w_i (d2_i - d1_i)``, :func:`removal_costs`) and puts it into cluster
``c``, split in two by 2-means. The split lowers the inertia by the between-halves sum of
squares

.. math::

    \\mathrm{gain}(c) = \\frac{M_0 M_1}{M_0 + M_1} \\|s_0 - s_1\\|^2,

(``M_h``, ``s_h``: weight and mean of each half), so ``gain(c) - removal(j)`` prices the
move before any other centre moves (:func:`ranked_split_merges`). On digits, the move so
priced best reaches the best known fixed point from each poor one seen, although it never
pays at once; the solver tries the best few with Lloyd and keeps one only if its fixed
point is better.

Lloyd moves a point only when another centre is nearer, although the move also shifts
both means: taking a point of weight ``w`` out of cluster ``l`` (weight ``M_l``) lowers
its sum of squares by ``M_l / (M_l - w) w D_l`` and adding it to ``j`` raises that of
``j`` by ``M_j / (M_j + w) w D_j`` (Hartigan and Wong, 1979), so a point on a boundary
may gain by moving although it is nearer its own centre. Every Hartigan optimum is a
Lloyd fixed point, not the reverse: a Lloyd fixed point slightly above the best one can
have a few dozen such points. :func:`hartigan_targets` moves all of them at once; the solver
repeats that with fresh means until none is left, then settles with Lloyd.
"""

from __future__ import annotations

import math

import torch

#: Candidate points priced per round.
SWAP_CANDIDATES = 16
#: The search stops after this many rounds in a row without a swap that pays: a round
#: prices 16 random candidates, so one round without a swap is weak evidence that none
#: pays (benchmarks/README.md, "Swaps: three rounds").
SWAP_PATIENCE = 3
#: Swaps that do not pay at once but are tried anyway, with Lloyd to a new fixed point.
SWAP_TRIALS = 3
#: A swap must lower the inertia by more than this fraction (float32 distances carry
#: rounding of about 1e-7 relative to ``||x||^2``).
SWAP_MIN_GAIN = 1e-5
#: Split-merge moves tried with Lloyd in a row without a better fixed point, at most.
SPLIT_MERGE_TRIALS = 2
#: A batch of split-merge moves (:func:`disjoint_split_merges`) moves at most this share of
#: the ``k`` centres; batches of fewer than two moves are left to the one-by-one search.
REBALANCE_SHARE = 1 / 8
#: Power iterations for each cluster's principal axis, then 2-means iterations.
SPLIT_POWER_ITERATIONS = 3
SPLIT_TWO_MEANS_ITERATIONS = 3
#: Batches of Hartigan moves at most before the Lloyd phase that settles them.
HARTIGAN_ROUNDS = 10
#: Sweeps of sequential Hartigan moves at most; they stop earlier, at the first that
#: saves less than a kept move must (``SWAP_MIN_GAIN``).
HARTIGAN_SWEEPS = 50
#: The nearest clusters, by their means' distances, that a sweep of Hartigan moves keeps
#: sorted per cluster (it prices a point's candidates in that order, up to where none can
#: pay): ``k x HARTIGAN_NEIGHBOURS`` indices and distances.
HARTIGAN_NEIGHBOURS = 256
#: A Hartigan move must lower its point's cost by more than this fraction (rounding).
HARTIGAN_MIN_GAIN = 1e-6


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


def removal_costs(
    nearest: torch.Tensor,
    second: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor | None,
    n_clusters: int,
) -> torch.Tensor:
    """One block's share of the inertia added by deleting each centre, ``(k,)`` float64.

    Deleting centre ``j`` sends its points to their second-nearest centre.
    """
    extra = (second - nearest).double()
    if weights is not None:
        extra = extra * weights.double()
    cost = torch.zeros(n_clusters, dtype=torch.float64, device=nearest.device)
    return cost.index_add_(0, labels, extra)


def split_gain(mass: torch.Tensor, halves: torch.Tensor) -> torch.Tensor:
    """``(k,)`` inertia removed by splitting each cluster into its two halves.

    ``mass``: ``(k, 2)`` weights of the halves; ``halves``: ``(k, 2, d)`` their means.
    """
    m = mass.double()
    total = m.sum(dim=1)
    between = ((halves[:, 0] - halves[:, 1]).double() ** 2).sum(dim=1)
    return torch.where(total > 0, m[:, 0] * m[:, 1] / total.clamp_min(1e-300), 0.0) * between


def ranked_split_merges(
    gain: torch.Tensor, removal: torch.Tensor, n_moves: int
) -> list[tuple[int, int]]:
    """The ``n_moves`` best-priced moves ``(j, c)``: delete ``j``, split ``c`` (``j != c``),
    best first, among the moves that split a cluster at all.

    Only the ``n_moves + 1`` cheapest deletions are paired with the ``n_moves + 1`` best
    splits: a pair outside them ranks below ``n_moves`` pairs that differ from it in that
    index alone (one of those may be a ``j = c``), so the moves are those of every pair
    priced, without a ``k x k`` matrix to sort for a few moves.
    """
    many = min(gain.shape[0], n_moves + 1)
    rows = torch.topk(removal, many, largest=False).indices
    cols = torch.topk(torch.where(gain > 0, gain, -math.inf), many).indices
    score = gain[cols].unsqueeze(0) - removal[rows].unsqueeze(1)  # score[j, c]
    score[rows.unsqueeze(1) == cols.unsqueeze(0)] = -math.inf
    score[:, gain[cols] <= 0] = -math.inf
    flat = score.flatten()
    order = torch.argsort(flat, descending=True)[:n_moves]
    return [
        (int(rows[f // many]), int(cols[f % many])) for f in order.tolist() if flat[f] > -math.inf
    ]


def disjoint_split_merges(
    gain: torch.Tensor, removal: torch.Tensor, n_moves: int
) -> list[tuple[int, int]]:
    """Up to ``n_moves`` split-merge moves ``(j, c)``, no cluster in two of them, each
    priced to pay on its own (``gain[c] > removal[j]``): the cheapest deletions paired in
    turn with the best splits still free."""
    splits = iter(torch.argsort(gain, descending=True).tolist())
    used: set[int] = set()
    moves: list[tuple[int, int]] = []
    for j in torch.argsort(removal).tolist():
        if len(moves) >= n_moves:
            break
        if j in used:
            continue
        c = next((c for c in splits if c not in used and c != j), None)
        if c is None or not float(gain[c]) > float(removal[j]):
            break
        used.update((j, c))
        moves.append((j, c))
    return moves


def hartigan_targets(
    D: torch.Tensor, labels: torch.Tensor, mass: torch.Tensor, weights: torch.Tensor | None
) -> torch.Tensor:
    """One block's labels after a batch of Hartigan moves.

    ``D``: ``(m, k)`` true squared distances to the cluster means, ``mass``: ``(k,)`` the
    clusters' weights. A point moves to the cluster ``j`` that minimises
    ``M_j / (M_j + w) D_j`` when that is below ``M_l / (M_l - w) D_l``, its own cluster's
    (a cluster never gives up its last point).
    """
    w = torch.ones_like(D[:, 0]) if weights is None else weights.to(D.dtype)
    own_mass = mass[labels]
    rest = own_mass - w
    own = D.gather(1, labels.unsqueeze(1)).squeeze(1)
    leave = own * own_mass / rest.clamp_min(1e-30)
    join = D * (mass.unsqueeze(0) / (mass.unsqueeze(0) + w.unsqueeze(1)))
    join.scatter_(1, labels.unsqueeze(1), math.inf)
    best, target = join.min(dim=1)
    move = (best < (1.0 - HARTIGAN_MIN_GAIN) * leave) & (rest > 0) & (w > 0)
    return torch.where(move, target, labels)
