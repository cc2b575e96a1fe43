"""The passes over the data that price the local search's moves.

Each runs block by block (the sweeps of Hartigan's method, sequential, row by row) over a
:class:`~rbfkm_engine.passes.Workspace` after
:meth:`~rbfkm_engine.passes.Workspace.two_nearest` (whose labels and nearest and
second-nearest distances they read); the per-block math lives in
:mod:`~rbfkm_engine.swaps`, the search itself in :mod:`~rbfkm_engine.local_search`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from .distances import squared_norms
from .native import HartiganState, LabelledRows, Rows
from .passes import Workspace, row_reduction_width
from .swaps import (
    HARTIGAN_MIN_GAIN,
    SPLIT_POWER_ITERATIONS,
    SPLIT_TWO_MEANS_ITERATIONS,
    hartigan_targets,
    swap_costs,
)

#: Up to this many centres :func:`_own_projection` makes a GEMM; past it, a gather (the
#: crossover measured over 3 to 784 features; benchmarks/README.md).
PROJECTION_GEMM_MAX_K = 64


def captured_means(ws: Workspace, P: torch.Tensor) -> torch.Tensor:
    """Each candidate centre moved to the (weighted) mean of the points it would take
    from their nearest centre, at the distances of the last ``two_nearest``.

    One Lloyd step for the newcomer alone: in many dimensions a data point is a poor
    centre (about twice its cluster's mean squared radius away from the others), so swaps
    priced at the point itself would hardly ever pay.
    """
    p_sq = squared_norms(P)

    def block(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        dp = ws.distances(rows, P, p_sq, with_norms=True)
        taken = (dp < ws.min_dist[rows].unsqueeze(1)).to(P.dtype)
        if ws.w is not None:
            taken.mul_(ws.w[rows].unsqueeze(1))
        return taken.T @ ws.X[rows], taken.sum(dim=0)

    num, den = _added(ws, ws.map_blocks(block), torch.zeros_like(P), P.new_zeros(P.shape[0]))
    return torch.where((den > 0).unsqueeze(1), num / den.clamp_min(1e-300).unsqueeze(1), P)


def swap_costs_of(ws: Workspace, P: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """``(k, B)`` inertia after replacing centre ``j`` by candidate centre ``P[b]``, at the
    labels and distances of the last ``two_nearest`` (see :mod:`~rbfkm_engine.swaps`)."""
    p_sq = squared_norms(P)

    def block(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        dp = ws.distances(rows, P, p_sq, with_norms=True)
        wc = ws.weights(rows)
        return swap_costs(ws.min_dist[rows], second[rows], ws.labels[rows], wc, dp, ws.k)

    base = torch.zeros(P.shape[0], dtype=torch.float64, device=P.device)
    delta = torch.zeros((ws.k, P.shape[0]), dtype=torch.float64, device=P.device)
    base, delta = _added(ws, ws.map_blocks(block), base, delta)
    return delta + base.unsqueeze(0)


#: A block's points as a pass over some of them sees them: their rows, labels (or slots)
#: and weights (``None``: all 1).
Points = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


def slot_means(
    ws: Workspace,
    slot_of: Callable[[slice], Points],
    fallback: torch.Tensor,
    rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Weighted) means and weights of the points by slot, ``slot_of(rows)`` giving a
    block's points and their slots; an empty slot keeps its row of ``fallback`` (one per
    slot). ``rows``: per block, where ``slot_of`` allows more than the chunk."""
    n_slots = fallback.shape[0]

    def block(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        X, slot, w = slot_of(rows)
        num = torch.zeros_like(fallback)
        if w is None:
            num.index_add_(0, slot, X)
            return num, torch.bincount(slot, minlength=n_slots).to(fallback.dtype)
        mass = torch.zeros(n_slots, dtype=fallback.dtype, device=fallback.device)
        num.index_add_(0, slot, X * w.unsqueeze(1))
        return num, mass.index_add_(0, slot, w)

    num, mass = _added(
        ws, ws.map_blocks(block, rows), torch.zeros_like(fallback), fallback.new_zeros(n_slots)
    )
    means = num / mass.clamp_min(1e-30).unsqueeze(1)
    return torch.where((mass > 0).unsqueeze(1), means, fallback), mass


def label_means(
    ws: Workspace, labels: torch.Tensor, C: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Means and weights of the clusters of ``labels``; an empty one keeps ``C``'s row."""

    def points(rows: slice) -> Points:
        return ws.X[rows], labels[rows], ws.weights(rows)

    return slot_means(ws, points, C, ws.big_block_rows())


def hartigan_moves(
    ws: Workspace, labels: torch.Tensor, means: torch.Tensor, mass: torch.Tensor
) -> int:
    """Move every point of ``labels`` (in place) that a Hartigan step would move, all at
    once; returns how many moved.

    ``means`` and ``mass``: of the clusters of ``labels`` (:func:`label_means`); see
    :func:`~rbfkm_engine.swaps.hartigan_targets`, which the kernel's batch
    (:func:`_kernel_batch`) computes without its ``(rows, k)`` temporaries where it runs.
    """
    c_sq = squared_norms(means)
    in_kernel = _kernel_batch(ws, labels, means, mass)
    if in_kernel is not None:
        return in_kernel()

    def block(rows: slice) -> int:
        D = ws.distances(rows, means, c_sq, with_norms=True)
        new = hartigan_targets(D, labels[rows], mass, ws.weights(rows))
        moved = int((new != labels[rows]).sum())
        labels[rows] = new
        return moved

    return int(ws.reducer.sum(torch.tensor(sum(ws.map_blocks(block)))))


def _kernel_batch(
    ws: Workspace, labels: torch.Tensor, means: torch.Tensor, mass: torch.Tensor
) -> Callable[[], int] | None:
    """:func:`hartigan_moves` by the kernel: one sweep of each row's distances, direct or
    from the block's GEMM, or, on direct distances with every cluster weighing something,
    from the means' neighbour lists where they decide (``Workspace.row_lists``); ``None``
    where it does not run (no kernel, means of another type than the data). The moves do
    not depend on the blocks: direct passes take the large ones."""
    kernel = ws.kernel_for(means)
    if kernel is None:
        return None
    k = means.shape[0]
    width = row_reduction_width(k, means.device)
    centres = kernel.centres(means.contiguous(), width)
    c_sq = centres.c_sq[:k].unsqueeze(0)
    padded = torch.ones(width, dtype=means.dtype)
    padded[:k] = mass
    keep = 1.0 - HARTIGAN_MIN_GAIN
    least = float(mass.min())
    lists = ws.row_lists(means, centres, ws.hartigan_neighbour_use) if least > 0.0 else None

    def block(rows: slice) -> tuple[int, int, int]:
        D = None if centres.CT is not None else ws.padded_distances(rows, means, c_sq)
        part = Rows(ws.X[rows], ws.x_sq[rows], ws.weights(rows), labels[rows], ws.min_dist[rows])
        return kernel.hartigan_batch(part, centres, D, padded, keep, lists, least)

    def run() -> int:
        rows = ws.scan_block_rows(centres) if centres.CT is not None else None
        parts = list(ws.map_blocks(block, rows))
        moved, decided, scanned = (sum(part[i] for part in parts) for i in range(3))
        if lists is not None:
            ws.lists_used(ws.hartigan_neighbour_use, k, decided, scanned)
        return int(ws.reducer.sum(torch.tensor(moved)))

    return run


def hartigan_sweep(ws: Workspace, state: HartiganState) -> int | None:
    """One sweep of Hartigan's method: every point in turn moved (``state.labels`` in
    place) when that lowers the inertia, ``state``'s means and masses following each move;
    returns how many moved (``state.gain``: the inertia they saved).

    Sequential moves cannot overshoot as :func:`hartigan_moves`' batch can, so the sweeps
    reach fixed points the batch does not. Block after block, in order, on one thread (the
    fit's ``check`` before each). ``None`` where they cannot run: without the kernel (a
    GPU, no compiler), or on one shard of a data-parallel fit (a sweep needs every row in
    turn).
    """
    if not sweeps_run(ws):
        return None
    assert ws.kernel is not None
    state.path.zero_()
    moves, state.gain = 0, 0.0
    for rows in ws.chunks():
        X, w = ws.X[rows], ws.weights(rows)
        moved, saved = ws.kernel.hartigan_sweep(X, w, state, rows, HARTIGAN_MIN_GAIN)
        moves += moved
        state.gain += saved
    state.travel = float(state.path.max())
    return moves


def sweeps_run(ws: Workspace) -> bool:
    """Whether :func:`hartigan_sweep` runs on ``ws`` (see there)."""
    return ws.kernel is not None and not ws.reducer.active


def cluster_halves(
    ws: Workspace,
    C: torch.Tensor,
    generator: torch.Generator | None,
    only: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every cluster of the last pass's labels split in two: the halves' means
    ``(k, 2, d)`` and weights ``(k, 2)``, for all clusters at once; with ``only`` (a
    ``(k,)`` mask), for those clusters alone (the others' rows are ``C``'s, weight 0), in
    passes over their points alone.

    The halves start on either side of the cluster's principal axis through ``C`` (a few
    power iterations of its scatter matrix, from a random direction) and are refined by
    2-means within the cluster. Each step is one pass: a point's projection on its own
    cluster's axis (:func:`_own_projection`), the sums made by ``index_add_`` over ``k``
    or ``2 k`` slots; in large blocks where the projections gather (nothing per block is
    ``(rows, k)``, and each block's sums are). Where the kernel runs (and the fit is not
    data-parallel), each step is one kernel call per block instead, in float64: on small
    data the torch passes' dozens of ops per step were most of a pricing's cost.
    """
    k, d = C.shape
    device = C.device if generator is None else generator.device
    axis = torch.randn((k, d), generator=generator, dtype=torch.float64, device=device)
    kernel = ws.kernel_for(C)
    if kernel is not None and not ws.reducer.active:

        def blocks() -> Iterator[LabelledRows]:
            for rows in ws.chunks():
                yield ws.X[rows], ws.weights(rows), ws.labels[rows]

        steps = (SPLIT_POWER_ITERATIONS, SPLIT_TWO_MEANS_ITERATIONS)
        halves, mass = kernel.cluster_halves(blocks, C, axis, only, steps)
        return halves.to(C.dtype), mass.to(C.dtype)
    rows = _projection_block_rows(ws, k)
    axis = _principal_axes(ws, C, axis.to(device=C.device, dtype=C.dtype), only, rows)
    # Side of each point: first along the axis, then by the nearer half's mean.
    normal, offset_at = axis, (axis * C).sum(dim=1)

    def half_of(rows: slice) -> Points:  # slot 2 label + side
        X, lab, w = _members(ws, rows, only)
        side = (_own_projection(X, lab, normal) > offset_at[lab]).long()
        return X, side.add_(lab, alpha=2), w

    for _ in range(SPLIT_TWO_MEANS_ITERATIONS + 1):
        halves, mass = slot_means(ws, half_of, C.repeat_interleave(2, dim=0), rows)
        halves = halves.view(k, 2, d)
        # Nearer to half 1 than to half 0: x . (s1 - s0) > (|s1|^2 - |s0|^2) / 2.
        normal = halves[:, 1] - halves[:, 0]
        offset_at = 0.5 * (squared_norms(halves[:, 1]) - squared_norms(halves[:, 0]))
    return halves, mass.view(k, 2)


def _members(ws: Workspace, rows: slice, only: torch.Tensor | None) -> Points:
    """The block's points in the clusters ``only`` marks (all of them without it)."""
    X, lab, w = ws.X[rows], ws.labels[rows], ws.weights(rows)
    if only is None:
        return X, lab, w
    keep = torch.nonzero(only[lab]).squeeze(1)
    return X[keep], lab[keep], None if w is None else w[keep]


def _principal_axes(
    ws: Workspace,
    C: torch.Tensor,
    axis: torch.Tensor,
    only: torch.Tensor | None,
    rows: int | None,
) -> torch.Tensor:
    """Power iterations of each cluster's scatter matrix about ``C``, from ``axis`` (of
    the clusters ``only`` marks, where given; ``rows`` per block)."""
    k = C.shape[0]
    for _ in range(SPLIT_POWER_ITERATIONS):
        # scatter_c v = sum_i w_i (x_i - c) (x_i - c) . v over the cluster's points
        axis = axis / axis.norm(dim=1, keepdim=True).clamp_min(1e-30)
        c_along = (C * axis).sum(dim=1)

        def block(
            rows: slice, axis: torch.Tensor = axis, c_along: torch.Tensor = c_along
        ) -> tuple[torch.Tensor, torch.Tensor]:
            X, lab, w = _members(ws, rows, only)
            proj = _own_projection(X, lab, axis).sub_(c_along[lab])
            if w is not None:
                proj.mul_(w)
            along = torch.zeros_like(C).index_add_(0, lab, X * proj.unsqueeze(1))
            weight = torch.zeros(k, dtype=C.dtype, device=C.device).index_add_(0, lab, proj)
            return along, weight

        # sum_i w_i x_i (x_i - c) . v and sum_i w_i (x_i - c) . v, per cluster
        parts = ws.map_blocks(block, rows)
        along, weight_along = _added(ws, parts, torch.zeros_like(C), C.new_zeros(k))
        scatter = along - C * weight_along.unsqueeze(1)
        axis = torch.where(scatter.norm(dim=1, keepdim=True) > 0, scatter, axis)
    return axis


def _added(
    ws: Workspace,
    parts: Iterator[tuple[torch.Tensor, torch.Tensor]],
    *zeros: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The blocks' pairs of partial sums added, in block order, then over every shard
    (``zeros``: the sums of a shard without rows). Added in place into the first block's
    pair: each block's sums are its own."""
    first, second = next(parts, zeros)
    for a, b in parts:
        first.add_(a)
        second.add_(b)
    first, second = ws.reducer.sum_many(first, second)
    return first, second


def _projection_block_rows(ws: Workspace, k: int) -> int | None:
    """Rows per block of the passes that project rows on their cluster's axis: large
    blocks where :func:`_own_projection` gathers, the chunk where it makes a GEMM."""
    return ws.big_block_rows() if k > PROJECTION_GEMM_MAX_K else None


def _own_projection(X: torch.Tensor, lab: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``x_i . V[lab_i]`` for the rows ``X``. With few centres a ``(rows, k)`` GEMM and a
    gather beat gathering a ``(rows, d)`` block of ``V``'s rows; its cost grows with ``k``
    while the gather's does not, so past :data:`PROJECTION_GEMM_MAX_K` centres the rows
    of ``V`` are gathered."""
    if V.shape[0] > PROJECTION_GEMM_MAX_K:
        return torch.linalg.vecdot(X, V[lab])
    return torch.mm(X, V.T).gather(1, lab.unsqueeze(1)).squeeze(1)
