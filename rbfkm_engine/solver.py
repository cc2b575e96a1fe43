"""The annealed fixed-point solver behind :class:`~rbfkm_engine.RBFKMeans`.

One *iteration* is an E-step (responsibilities of every point, block by block) fused with
the accumulation of the M-step ``c_j = sum_i w_i R_ij x_i / sum_i w_i R_ij``: dense
responsibilities go through one GEMM ``R^T X`` per block, sparse ones (entmax15 at low
temperature, hard) through ``index_add_`` over their few support slots, so there is never
a Python loop over points. At each temperature the iteration is repeated until the centres
move less than ``tol``, at most ``iterations_per_sigma`` times (once at the default
cooling: warm starts make that enough, see
:func:`~rbfkm_engine.anneal.iterations_per_temperature`); the temperature then falls
geometrically, and a final phase of hard (Lloyd) iterations ends on a true K-Means fixed
point. Annealed fits grow their centres from the weighted mean by twin splits and merge
centres that fall back together (:func:`anneal`); Lloyd passes keep the M-step sums and
correct them for the points that moved. Annealed fits end with a search for moves out of
poor fixed points (split-merges, Hartigan moves and centre swaps: :func:`refine`, math in
:mod:`rbfkm_engine.swaps`), each followed by Lloyd to a new fixed point.

This module knows tensors only; validation and conversions live in ``model.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .anneal import collapsed_objective, grow_twin_linearly
from .assign import EStep, SparseResponsibilities, nearest, responsibilities
from .distances import iter_chunks, squared_distances, squared_norms
from .init import sample_proportional
from .swaps import (
    HARTIGAN_ROUNDS,
    SPLIT_MERGE_TRIALS,
    SPLIT_POWER_ITERATIONS,
    SPLIT_TWO_MEANS_ITERATIONS,
    SWAP_CANDIDATES,
    SWAP_MIN_GAIN,
    SWAP_PATIENCE,
    SWAP_TRIALS,
    hartigan_targets,
    ranked_split_merges,
    removal_costs,
    split_gain,
    swap_costs,
)

#: Annealing hands over to Lloyd once at most this fraction of the points (by weight) is
#: still soft: the M-step is then the K-Means one but for those few points, and the colder
#: temperatures would only repeat Lloyd at the price of an entmax pass each (on the hard
#: set, half of the temperatures).
SOFT_FRACTION_STOP = 3e-2
#: Share of ``max_iter`` kept for the final Lloyd phase.
LLOYD_SHARE = 0.2
#: A new twin is displaced by this fraction of its cluster's rms radius ...
PERTURB = 3e-2
#: ... and becomes a centre once the pair is this fraction of the radius apart.
SPLIT = 1e-1
#: The first twin grows by the linearised map, without passes over the data, while its
#: offset stays below this fraction of the radius (see ``grow_twin_linearly``).
LINEAR_TWIN_LIMIT = SPLIT / 2
#: Lloyd's distance blocks are padded to a multiple of this many columns on the CPU.
_ROW_REDUCTION_WIDTH = 16
#: Re-seeding ``n`` empty clusters looks for them among the ``max(_FARTHEST_CANDIDATES,
#: 16 n)`` points farthest from the centres first (``FixedPointIteration._farthest_first``).
_FARTHEST_CANDIDATES = 1024
_FARTHEST_GROWTH = 8
#: A trial's Lloyd phase may be abandoned after this many iterations (``_bound_to_end_above``).
TRIAL_CHECK_AFTER = 3


@dataclass(frozen=True)
class FitProgress:
    """What a fit callback is told after each fixed-point iteration."""

    sigma: float  # temperature of the iteration; 0.0 in the final Lloyd phase
    iteration: int  # iterations so far, all temperatures together
    objective: float  # J_sigma at the centres the iteration started from
    fraction: float  # estimate of the share of the fit done, in [0, 1]
    phase: str  # "anneal", "lloyd", or "swap" (the Lloyd phase after a swap)


Callback = Callable[[FitProgress], "bool | None"]


@dataclass
class IterationStats:
    """Totals of one pass over the data (weighted)."""

    objective: float
    inertia: float
    mean_nnz: float
    n_soft: int
    soft_weight: float  # weight of the n_soft points
    spread: torch.Tensor  # per centre: sum_i w_i R_ij D_ij


@dataclass
class SolverResult:
    centres: torch.Tensor
    labels: torch.Tensor
    inertia: float
    n_iter: int
    sigma: float
    history: list[dict[str, float]] = field(default_factory=list)
    converged: bool = True
    stopped_early: bool = False


class FixedPointIteration:
    """Buffers and the fused E/M pass for one data set.

    Keeps per-point nearest distances and labels of the last pass, used to re-seed empty
    clusters and to report hard labels without another distance computation.
    """

    def __init__(
        self,
        X: torch.Tensor,
        sample_weight: torch.Tensor | None,
        n_clusters: int,
        chunk_size: int,
        x_sq: torch.Tensor | None = None,
    ) -> None:
        self.X = X
        self.w = sample_weight
        self.k = n_clusters
        self.chunk_size = chunk_size
        self.x_sq = squared_norms(X) if x_sq is None else x_sq
        self.min_dist = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
        self.labels = torch.empty(X.shape[0], dtype=torch.long, device=X.device)
        # Number of centres ``labels`` refers to; 0 when they are stale (see ``forget``).
        self._labels_for = 0
        # Lloyd's sums (R^T W X, R^T w) for ``labels``, in float64, kept between hard passes.
        self._hard_sums: tuple[torch.Tensor, torch.Tensor] | None = None
        self.total_weight = float(X.shape[0] if sample_weight is None else sample_weight.sum())
        # The distance block and the argmin keys' block, reused by every pass (see
        # ``_reused_block``), and the layout whose padding the distance block holds (see
        # ``_padded_distances``).
        self._blocks: dict[str, torch.Tensor] = {}
        self._padded_as: tuple[int, int, int] | None = None

    def _reused_block(self, name: str, m: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """An ``(m, width)`` block of the buffer ``name``, allocated once per fit.

        Every pass makes such blocks per chunk; allocating fresh ones each time fragments
        the C heap (glibc keeps freed blocks of this size mapped once its mmap threshold
        has risen to them) until the process holds several times the block, and costs page
        faults. Nothing keeps a block past its chunk, so one buffer serves them all.
        """
        buffer = self._blocks.get(name)
        if buffer is None or buffer.numel() < m * width or buffer.dtype != dtype:
            rows = min(self.chunk_size, self.X.shape[0])
            buffer = torch.empty(rows * width, dtype=dtype, device=self.X.device)
            self._blocks[name] = buffer
        return buffer[: m * width].view(m, width)

    def _distances(
        self, rows: slice, C: torch.Tensor, c_sq: torch.Tensor, with_norms: bool = False
    ) -> torch.Tensor:
        """``c_sq - 2 X[rows] C^T`` (the block without ``||x||^2``) in a reused block; with
        ``with_norms``, the true squared distances (``||x||^2`` added, clamped at 0)."""
        self._padded_as = None
        out = self._reused_block("distances", rows.stop - rows.start, C.shape[0], C.dtype)
        if with_norms:
            return squared_distances(self.X[rows], C, self.x_sq[rows], c_sq, out=out)
        return torch.addmm(c_sq, self.X[rows], C.T, alpha=-2.0, out=out)

    def _padded_distances(self, rows: slice, C: torch.Tensor, c_sq: torch.Tensor) -> torch.Tensor:
        """:meth:`_distances` (without norms) in a block of :func:`_row_reduction_width`
        columns, those past ``k`` at ``+inf``, which no minimum picks.

        The GEMM writes the ``k`` real columns only; the padding is written once per fit
        and layout, as nothing else writes there between hard passes.
        """
        k = C.shape[0]
        width = _row_reduction_width(k, C.device)
        if width == k:
            return self._distances(rows, C, c_sq)
        block = self._reused_block("distances", rows.stop - rows.start, width, C.dtype)
        layout = (block.data_ptr(), width, k)
        if self._padded_as != layout:
            capacity = self._blocks["distances"].numel() // width
            whole = self._blocks["distances"][: capacity * width].view(capacity, width)
            whole[:, k:] = float("inf")
            self._padded_as = layout
        torch.addmm(c_sq, self.X[rows], C.T, alpha=-2.0, out=block[:, :k])
        return block

    def _nearest(
        self, rows: slice, D: torch.Tensor, hint: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`nearest` for a block from :meth:`_distances`: true distances and labels."""
        keys = self._reused_block("argmin keys", D.shape[0], D.shape[1], D.dtype)
        _, min_dist, labels = nearest(D, self.x_sq[rows], hint, scratch=keys)
        return min_dist, labels

    def step(
        self,
        C: torch.Tensor,
        sigma: float,
        assignment: str,
        *,
        need_spread: bool = False,
        twins_from: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, IterationStats]:
        """One pass: returns the M-step sums ``(R^T W X, R^T w)`` and the statistics.

        ``C`` may hold more rows than ``n_clusters``: rows from ``twins_from`` on are the
        annealing twins of the rows before them, folded into them when counting nonzeros.
        The distance blocks leave out ``||x||^2``: no map depends on a per-row constant, so
        it is only added back where a true distance is reported. Without ``need_spread``
        the maps write their responsibilities into the distance block.
        """
        if (assignment == "hard" or sigma <= 0.0) and not need_spread:
            return self._hard_step(C)
        self._hard_sums = None
        X, w = self.X, self.w
        num = torch.zeros_like(C)
        den = torch.zeros(C.shape[0], dtype=C.dtype, device=C.device)
        spread = torch.zeros(C.shape[0], dtype=C.dtype, device=C.device)
        objective = torch.zeros((), dtype=torch.float64, device=C.device)
        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        nnz = 0
        n_soft = 0
        soft_weight = 0.0
        c_sq = squared_norms(C).unsqueeze(0)
        hints = self._labels_for == C.shape[0]

        def hint_for(rows: slice) -> torch.Tensor | None:
            return self.labels[rows] if hints else None

        for rows in iter_chunks(X.shape[0], self.chunk_size):
            Xc = X[rows]
            wc = None if w is None else w[rows]
            x_sq = self.x_sq[rows]
            D = self._distances(rows, C, c_sq)
            e = responsibilities(
                D,
                sigma,
                assignment,
                row_offset=x_sq,
                hint=hint_for(rows),
                overwrite=not need_spread,
                scratch=self._reused_block("argmin keys", D.shape[0], D.shape[1], D.dtype),
            )
            self.min_dist[rows] = e.min_dist
            self.labels[rows] = e.labels
            objective += _weighted_sum(e.energy, wc)
            inertia += _weighted_sum(e.min_dist, wc)
            R = e.responsibilities
            nnz += _count_nonzeros(R, twins_from)
            n_soft += e.n_soft
            if wc is None or e.soft_index is None:
                soft_weight += e.n_soft
            else:
                soft_weight += float(wc[e.soft_index].sum())
            _accumulate(num, den, Xc, wc, R)
            if need_spread:
                _accumulate_spread(spread, D, x_sq, e, wc)
        self._labels_for = C.shape[0]
        stats = IterationStats(
            objective=float(objective),
            inertia=float(inertia),
            mean_nnz=nnz / X.shape[0],
            n_soft=n_soft,
            soft_weight=soft_weight,
            spread=spread,
        )
        return num, den, stats

    def _hard_step(self, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, IterationStats]:
        """A Lloyd pass that updates the M-step sums only for the points that moved.

        Between Lloyd iterations few labels change, and the sums depend on the labels
        alone (not on the centres), so after the first pass they are kept, in float64, and
        corrected by the moved points' contributions: the pass costs the distance GEMM and
        a row minimum, not a scatter of every point.
        """
        X, w = self.X, self.w
        incremental = self._hard_sums is not None and self._labels_for == C.shape[0]
        if incremental:
            num64, den64 = self._hard_sums
        else:
            num = torch.zeros_like(C)
            den = torch.zeros(C.shape[0], dtype=C.dtype, device=C.device)
        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        c_sq = squared_norms(C).unsqueeze(0)
        hints = self._labels_for == C.shape[0]
        for rows in iter_chunks(X.shape[0], self.chunk_size):
            Xc = X[rows]
            wc = None if w is None else w[rows]
            D = self._padded_distances(rows, C, c_sq)
            old = self.labels[rows] if hints else None
            min_dist, labels = self._nearest(rows, D, old)
            self.min_dist[rows] = min_dist
            inertia += _weighted_sum(min_dist, wc)
            if incremental:
                moved = torch.nonzero(labels != old).squeeze(1)
                if moved.numel():
                    Xm = Xc[moved].double()
                    mass = (
                        torch.ones(moved.shape[0], dtype=torch.float64, device=C.device)
                        if wc is None
                        else wc[moved].double()
                    )
                    if wc is not None:
                        Xm = Xm * mass.unsqueeze(1)
                    num64.index_add_(0, labels[moved], Xm)
                    num64.index_add_(0, old[moved], Xm, alpha=-1.0)
                    den64.index_add_(0, labels[moved], mass)
                    den64.index_add_(0, old[moved], mass, alpha=-1.0)
            elif wc is None:
                num.index_add_(0, labels, Xc)
                den.index_add_(0, labels, torch.ones_like(min_dist))
            else:
                num.index_add_(0, labels, Xc * wc.unsqueeze(1))
                den.index_add_(0, labels, wc)
            self.labels[rows] = labels
        if not incremental:
            num64, den64 = num.double(), den.double()
        self._hard_sums = (num64, den64)
        self._labels_for = C.shape[0]
        total = float(inertia)
        stats = IterationStats(
            objective=total,
            inertia=total,
            mean_nnz=1.0,
            n_soft=0,
            soft_weight=0.0,
            spread=torch.zeros(C.shape[0], dtype=C.dtype, device=C.device),
        )
        # A cluster that lost all its points can keep a rounding residue of its weights.
        den_out = torch.where(den64 > 1e-12 * self.total_weight, den64, 0.0)
        return num64.to(C.dtype), den_out.to(C.dtype), stats

    def forget(self) -> None:
        """The centres were re-arranged: the stored labels no longer hint the next pass."""
        self._labels_for = 0
        self._hard_sums = None

    def update(
        self, C: torch.Tensor, num: torch.Tensor, den: torch.Tensor, *, reseed: bool = True
    ) -> tuple[torch.Tensor, int]:
        """New centres ``num / den``; clusters that received no mass are re-seeded.

        As scikit-learn and faiss do, an empty cluster moves to the point farthest from its
        nearest centre (points of weight 0 are never chosen). With ``reseed=False`` (while
        annealing) an empty centre stays where it is.
        """
        C_new = num / den.clamp_min(torch.finfo(den.dtype).tiny).unsqueeze(1)
        empty = den <= 0
        n_empty = int(empty.sum())
        if n_empty and not reseed:
            C_new[empty] = C[empty]
            return C_new, 0
        if n_empty:
            C_new[empty] = self._farthest_first(self.min_dist.clone(), n_empty).to(C_new.dtype)
        return C_new, n_empty

    def _farthest_first(self, closest: torch.Tensor, n_new: int) -> torch.Tensor:
        """``n_new`` points, each the farthest from the centres and the points taken before
        it (``closest``: each point's squared distance to the centres; a copy it may
        overwrite). Points of weight 0 are never taken while others remain.

        Taking a point only lowers the others' distances, so while every pick stays above
        the largest distance outside the ``m`` farthest points, the picks among those ``m``
        are the picks among all: they run there, on ``m`` rows instead of a pass over
        ``X`` per pick. When that check fails the pool grows ``_FARTHEST_GROWTH``-fold; a
        pool as large as ``X`` is the plain pass per pick.
        """
        n = closest.shape[0]
        score = closest if self.w is None else torch.where(self.w > 0, closest, -1.0)
        m = max(_FARTHEST_CANDIDATES, 16 * n_new)
        while m < n:
            picks = self._farthest_among(score, m, n_new)
            if picks is not None:
                return picks
            m *= _FARTHEST_GROWTH
        return torch.stack([self._take_farthest(closest) for _ in range(n_new)])

    def _farthest_among(self, score: torch.Tensor, m: int, n_new: int) -> torch.Tensor | None:
        """:meth:`_farthest_first` among the ``m`` top-``score`` points, or ``None`` where
        a pick would not be above every point outside them."""
        top, order = torch.topk(score, m + 1)
        candidates, outside = order[:m], top[m]
        values = top[:m].clone()
        P, p_sq = self.X[candidates], self.x_sq[candidates]
        taken: list[int] = []
        for _ in range(n_new):
            best = values.max()
            if not best > outside:
                return None
            ties = torch.nonzero(values == best).squeeze(1)
            j = int(ties[torch.argmin(candidates[ties])])  # argmax's tie: the lowest index
            taken.append(j)
            d_new = squared_distances(P, P[j : j + 1], p_sq).squeeze(1)
            torch.minimum(values, d_new.to(values.dtype), out=values)
        return P[taken]

    def _take_farthest(self, closest: torch.Tensor) -> torch.Tensor:
        """The point farthest from the centres (``closest``: each point's squared distance
        to them, updated in place to count the returned point as a centre).

        Farthest-first, one point at a time: copies of a point are never taken twice, so
        repeating a point and weighting it give the same centres.
        """
        score = closest if self.w is None else torch.where(self.w > 0, closest, -1.0)
        far = int(torch.argmax(score))
        point = self.X[far : far + 1]
        d_new = squared_distances(self.X, point, self.x_sq).squeeze(1)
        torch.minimum(closest, d_new.to(closest.dtype), out=closest)
        return point[0]

    def add_farthest(self, C: torch.Tensor, n_new: int) -> torch.Tensor:
        """Append ``n_new`` centres, each the point farthest from all centres so far."""
        self.hard_labels(C)
        closest = self.min_dist.clone()
        if n_new <= 0:
            return C
        return torch.cat([C, self._farthest_first(closest, n_new).to(C.dtype)])

    def hard_labels(self, C: torch.Tensor) -> float:
        """Hard E-step at ``C``: fills ``labels`` and ``min_dist``; returns the inertia.

        Without hints (ties go to the lowest index): ``RBFKMeans.predict`` runs this same
        pass, so the fit's final labels are its labels.
        """
        c_sq = squared_norms(C).unsqueeze(0)
        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            D = self._padded_distances(rows, C, c_sq)
            min_dist, labels = self._nearest(rows, D, None)
            self.min_dist[rows] = min_dist
            self.labels[rows] = labels
            inertia += _weighted_sum(min_dist, None if self.w is None else self.w[rows])
        self._labels_for = C.shape[0]
        self._hard_sums = None
        return float(inertia)

    def two_nearest(self, C: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Hard E-step at ``C`` that also returns each point's second-nearest squared
        distance (``labels`` and ``min_dist`` hold the nearest); and the inertia."""
        c_sq = squared_norms(C).unsqueeze(0)
        second = torch.empty_like(self.min_dist)
        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            D = self._padded_distances(rows, C, c_sq)
            values, labels = torch.topk(D, 2, dim=1, largest=False)
            values.add_(self.x_sq[rows].unsqueeze(1)).clamp_min_(0.0)
            self.min_dist[rows] = values[:, 0]
            second[rows] = values[:, 1]
            self.labels[rows] = labels[:, 0]
            inertia += _weighted_sum(values[:, 0], None if self.w is None else self.w[rows])
        self.forget()
        return second, float(inertia)

    def captured_means(self, P: torch.Tensor) -> torch.Tensor:
        """Each candidate centre moved to the (weighted) mean of the points it would take
        from their nearest centre, at the distances of the last :meth:`two_nearest`.

        One Lloyd step for the newcomer alone: in many dimensions a data point is a poor
        centre (about twice its cluster's mean squared radius away from the others), so
        swaps priced at the point itself would hardly ever pay.
        """
        p_sq = squared_norms(P)
        num = torch.zeros_like(P)
        den = torch.zeros(P.shape[0], dtype=P.dtype, device=P.device)
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            dp = self._distances(rows, P, p_sq, with_norms=True)
            taken = (dp < self.min_dist[rows].unsqueeze(1)).to(P.dtype)
            if self.w is not None:
                taken.mul_(self.w[rows].unsqueeze(1))
            num.addmm_(taken.T, self.X[rows])
            den.add_(taken.sum(dim=0))
        return torch.where((den > 0).unsqueeze(1), num / den.clamp_min(1e-300).unsqueeze(1), P)

    def removal_costs(self, second: torch.Tensor) -> torch.Tensor:
        """``(k,)`` inertia added by deleting each centre, at the labels and distances of
        the last :meth:`two_nearest` (see :mod:`.swaps`)."""
        return removal_costs(self.min_dist, second, self.labels, self.w, self.k)

    def cluster_halves(
        self, C: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every cluster of the last pass's ``labels`` split in two: the halves' means
        ``(k, 2, d)`` and weights ``(k, 2)``, for all clusters at once.

        The halves start on either side of the cluster's principal axis through ``C`` (a
        few power iterations of its scatter matrix, from a random direction) and are
        refined by 2-means within the cluster. Each step is one pass: a point's projection
        on its own cluster's axis is a column of an ``(n, k)`` GEMM, the sums are made by
        ``index_add_`` over ``k`` or ``2 k`` slots.
        """
        k, d = C.shape
        X, w, labels = self.X, self.w, self.labels
        device = C.device if generator is None else generator.device
        axis = torch.randn((k, d), generator=generator, dtype=torch.float64, device=device)
        axis = axis.to(device=C.device, dtype=C.dtype)

        def own_projection(rows: slice, V: torch.Tensor) -> torch.Tensor:
            # x_i . V[label_i] for the block: a (rows, k) GEMM and a gather, cheaper than
            # gathering a (rows, d) block of V's rows.
            lab = labels[rows].unsqueeze(1)
            return torch.mm(X[rows], V.T).gather(1, lab).squeeze(1)

        for _ in range(SPLIT_POWER_ITERATIONS):
            # scatter_c v = sum_i w_i (x_i - c) (x_i - c) . v over the cluster's points
            axis = axis / axis.norm(dim=1, keepdim=True).clamp_min(1e-30)
            along = torch.zeros_like(C)  # sum_i w_i x_i (x_i - c) . v
            weight_along = torch.zeros(k, dtype=C.dtype, device=C.device)
            c_along = (C * axis).sum(dim=1)
            for rows in iter_chunks(X.shape[0], self.chunk_size):
                lab = labels[rows]
                proj = own_projection(rows, axis).sub_(c_along[lab])
                if w is not None:
                    proj.mul_(w[rows])
                along.index_add_(0, lab, X[rows] * proj.unsqueeze(1))
                weight_along.index_add_(0, lab, proj)
            scatter = along - C * weight_along.unsqueeze(1)
            axis = torch.where(scatter.norm(dim=1, keepdim=True) > 0, scatter, axis)
        # Side of each point: first along the axis, then by the nearer half's mean.
        normal, offset_at = axis, (axis * C).sum(dim=1)

        def half_of(rows: slice) -> torch.Tensor:  # slot 2 label + side
            lab = labels[rows]
            side = (own_projection(rows, normal) > offset_at[lab]).long()
            return side.add_(lab, alpha=2)

        for _ in range(SPLIT_TWO_MEANS_ITERATIONS + 1):
            halves, mass = self._slot_means(half_of, C.repeat_interleave(2, dim=0))
            halves = halves.view(k, 2, d)
            # Nearer to half 1 than to half 0: x . (s1 - s0) > (|s1|^2 - |s0|^2) / 2.
            normal = halves[:, 1] - halves[:, 0]
            offset_at = 0.5 * (squared_norms(halves[:, 1]) - squared_norms(halves[:, 0]))
        return halves, mass.view(k, 2)

    def _slot_means(
        self, slot_of: Callable[[slice], torch.Tensor], fallback: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(Weighted) means and weights of the points by slot, ``slot_of(rows)`` giving the
        slots of a block; an empty slot keeps its row of ``fallback`` (one per slot)."""
        n_slots = fallback.shape[0]
        num = torch.zeros_like(fallback)
        mass = torch.zeros(n_slots, dtype=fallback.dtype, device=fallback.device)
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            slot = slot_of(rows)
            if self.w is None:
                num.index_add_(0, slot, self.X[rows])
                mass += torch.bincount(slot, minlength=n_slots).to(mass.dtype)
            else:
                num.index_add_(0, slot, self.X[rows] * self.w[rows].unsqueeze(1))
                mass.index_add_(0, slot, self.w[rows])
        means = num / mass.clamp_min(1e-30).unsqueeze(1)
        return torch.where((mass > 0).unsqueeze(1), means, fallback), mass

    def label_means(
        self, labels: torch.Tensor, C: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and weights of the clusters of ``labels``; an empty one keeps ``C``'s row."""
        return self._slot_means(lambda rows: labels[rows], C)

    def hartigan_moves(self, labels: torch.Tensor, means: torch.Tensor, mass: torch.Tensor) -> int:
        """Move every point of ``labels`` (in place) that a Hartigan step would move, all at
        once.

        ``means`` and ``mass``: of the clusters of ``labels`` (:meth:`label_means`).
        Returns the number of points moved (see :func:`~rbfkm_engine.swaps.hartigan_targets`).
        """
        c_sq = squared_norms(means)
        moved = 0
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            D = self._distances(rows, means, c_sq, with_norms=True)
            wc = None if self.w is None else self.w[rows]
            new = hartigan_targets(D, labels[rows], mass, wc)
            moved += int((new != labels[rows]).sum())
            labels[rows] = new
        return moved

    def swap_costs(self, P: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """``(k, B)`` inertia after replacing centre ``j`` by candidate centre ``P[b]``, at
        the labels and distances of the last :meth:`two_nearest` (see :mod:`.swaps`)."""
        p_sq = squared_norms(P)
        base = torch.zeros(P.shape[0], dtype=torch.float64, device=P.device)
        delta = torch.zeros((self.k, P.shape[0]), dtype=torch.float64, device=P.device)
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            dp = self._distances(rows, P, p_sq, with_norms=True)
            wc = None if self.w is None else self.w[rows]
            b, d = swap_costs(self.min_dist[rows], second[rows], self.labels[rows], wc, dp, self.k)
            base += b
            delta += d
        return delta + base.unsqueeze(0)


def _weighted_sum(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """``sum_i w_i v_i`` (``w = 1`` when ``None``) accumulated in float64."""
    return (values if weights is None else weights * values).sum(dtype=torch.float64)


def _row_reduction_width(k: int, device: torch.device) -> int:
    """Columns of a hard pass's distance block: ``k`` rounded up to a multiple of
    ``_ROW_REDUCTION_WIDTH`` on the CPU, where a row minimum over other widths runs
    several times slower (k = 50: 5x slower than k = 64)."""
    if device.type != "cpu":
        return k
    return k + (-k % _ROW_REDUCTION_WIDTH)


def _count_nonzeros(R: torch.Tensor | SparseResponsibilities, twins_from: int | None) -> int:
    """Nonzeros of one block, a centre's twin counted with the centre."""
    if isinstance(R, SparseResponsibilities):
        if twins_from is None or R.soft_rows.numel() == 0:
            return R.nnz()
        n_hard = R.n_rows - R.soft_rows.shape[0]
        if R.soft_cols is not None:
            # Distinct (row, centre) pairs among the nonzeros, a twin mapped to its centre.
            r, s = torch.nonzero(R.soft_vals, as_tuple=True)
            centre = R.soft_cols[r, s].remainder(twins_from)
            return n_hard + int(torch.unique(r * twins_from + centre).numel())
        block = R.soft_block
        folded = block[:, :twins_from] + block[:, twins_from:]
        return n_hard + int(torch.count_nonzero(folded))
    if twins_from is not None:
        R = R[:, :twins_from] + R[:, twins_from:]
    return int(torch.count_nonzero(R))


def _accumulate(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    R: torch.Tensor | SparseResponsibilities,
) -> None:
    """Add one block's ``R^T W X`` to ``num`` and ``R^T w`` to ``den`` (in place)."""
    if not isinstance(R, SparseResponsibilities):
        R = R.to(X.dtype)
        if w is not None:
            R = R * w.unsqueeze(1)
        num.addmm_(R.T, X)
        den.add_(R.sum(dim=0))
        return
    soft = R.soft_rows.numel() > 0
    if R.soft_rows.shape[0] < R.n_rows:
        _accumulate_hard_rows(num, den, X, w, R)
    if soft:
        block = R.soft_block.to(X.dtype)
        if w is not None:
            block = block * _rows(w, R).unsqueeze(1)
        num.addmm_(block.T, _rows(X, R))
        den.add_(block.sum(dim=0))


def _accumulate_hard_rows(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    R: SparseResponsibilities,
) -> None:
    """The one-hot rows' share of :func:`_accumulate`."""
    soft = R.soft_rows.numel() > 0
    first = R.first.to(X.dtype)
    if w is not None:
        first = first * w
    if w is None and 2 * R.soft_rows.shape[0] < R.n_rows:
        # Every row at its label, minus the few soft rows: cheaper than scaling X by
        # ``first``.
        num.index_add_(0, R.labels, X)
        if soft:
            num.index_add_(0, R.labels[R.soft_rows], X[R.soft_rows], alpha=-1.0)
    else:
        num.index_add_(0, R.labels, X * first.unsqueeze(1))
    den.index_add_(0, R.labels, first)


def _rows(A: torch.Tensor, R: SparseResponsibilities) -> torch.Tensor:
    """``A[R.soft_rows]``, without the copy when every row is soft."""
    return A if R.soft_rows.shape[0] == R.n_rows else A[R.soft_rows]


def _accumulate_spread(
    spread: torch.Tensor,
    D: torch.Tensor,
    x_sq: torch.Tensor,
    e: EStep,
    w: torch.Tensor | None,
) -> None:
    """Add the per-centre distortion ``sum_i w_i R_ij ||x_i - c_j||^2`` to ``spread``.

    ``D`` is the block without ``||x||^2`` (see :meth:`FixedPointIteration.step`).
    """
    R = e.responsibilities
    if isinstance(R, SparseResponsibilities):
        if R.soft_rows.shape[0] < R.n_rows:  # the one-hot rows
            first = R.first if w is None else R.first * w
            spread.index_add_(0, R.labels, (first * e.min_dist).to(spread.dtype))
        if R.soft_cols is not None:
            rows = R.soft_rows.unsqueeze(1)
            dist = torch.take(D, rows * D.shape[1] + R.soft_cols).add_(x_sq[rows]).clamp_min_(0.0)
            vals = R.soft_vals if w is None else R.soft_vals * w[rows]
            spread.index_add_(0, R.soft_cols.flatten(), (vals * dist).flatten())
        elif R.soft_rows.numel():
            dist = (_rows(D, R) + _rows(x_sq, R).unsqueeze(1)).clamp_min_(0.0)
            block = R.soft_block if w is None else R.soft_block * _rows(w, R).unsqueeze(1)
            spread.add_((block * dist).sum(dim=0))
        return
    Rw = R if w is None else R * w.unsqueeze(1)
    spread.add_((Rw * (D + x_sq.unsqueeze(1)).clamp_min_(0.0)).sum(dim=0))


class _Budget:
    """Iteration bookkeeping shared by the phases, and the progress callback."""

    def __init__(
        self,
        max_iter: int,
        callback: Callback | None,
        offset: float,
        scale: float,
        iteration_offset: int = 0,
    ) -> None:
        self.max_iter = max_iter
        self.n_iter = 0
        self.iteration_offset = iteration_offset
        self.callback = callback
        self.offset = offset
        self.scale = scale
        self.stopped = False
        # Iterations done when the first Lloyd phase began (progress of the Lloyd phases
        # after swaps continues from there).
        self.lloyd_from: int | None = None

    def tick(self, sigma: float, objective: float, fraction: float, phase: str) -> None:
        self.n_iter += 1
        if self.callback is None:
            return
        info = FitProgress(
            sigma=sigma,
            iteration=self.iteration_offset + self.n_iter,
            objective=objective,
            fraction=min(1.0, self.offset + self.scale * fraction),
            phase=phase,
        )
        if self.callback(info):
            self.stopped = True


def _record(
    history: list[dict[str, float]], sigma: float, stats: IterationStats, iters: int
) -> None:
    history.append(
        {
            "sigma": float(sigma),
            "objective": stats.objective,
            "inertia": stats.inertia,
            "iterations": iters,
            "mean_nnz": stats.mean_nnz,
        }
    )


def anneal(
    fp: FixedPointIteration,
    C: torch.Tensor,
    *,
    n_clusters: int,
    assignment: str,
    schedule: list[float],
    iterations_per_sigma: int,
    budget_iter: int,
    tol: float,
    budget: _Budget,
    history: list[dict[str, float]],
    generator: torch.Generator | None,
    split: bool,
    verbose: bool,
    covariance: torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """Warm-started fixed-point iterations over the temperature schedule.

    With ``split=True`` the centres start as one point (the weighted mean) plus a twin: a
    copy displaced by ``PERTURB`` times the cluster's rms radius. Above its critical
    temperature a pair falls back together; below it the twins move apart, and once their
    distance exceeds ``SPLIT`` times the radius the twin becomes a centre of its own (with a
    new twin) until there are ``n_clusters``. The number of centres a region of the data
    receives is thus decided by the data's own phase transitions, not by the initial
    centres. Returns the centres and the last temperature.

    ``covariance``: the data's weighted covariance (float64), when the caller has it. The
    lone first pair then skips the hottest temperatures, where its offset is far below
    the radius, by the linearised map (:func:`~rbfkm_engine.anneal.grow_twin_linearly`);
    their records hold the collapsed state's statistics and 0 iterations.
    """
    k = n_clusters
    twins: torch.Tensor | None = None
    if split:
        C = C[:1]
    sigma_reached = schedule[0] if schedule else 0.0

    def new_twins(centres: torch.Tensor, radius2: torch.Tensor) -> torch.Tensor:
        u = torch.randn(
            centres.shape, generator=generator, dtype=torch.float64, device=generator.device
        )
        u = (u / u.norm(dim=1, keepdim=True).clamp_min(1e-300)).to(
            device=centres.device, dtype=centres.dtype
        )
        return centres + PERTURB * radius2.clamp_min(0.0).sqrt().unsqueeze(1) * u

    def rescaled_twins(
        centres: torch.Tensor, twins: torch.Tensor, radius2: torch.Tensor
    ) -> torch.Tensor:
        # Above its critical temperature the fixed-point map shrinks a twin's offset most
        # slowly along the cluster's principal axis: a power iteration, whose direction
        # is kept and only its length reset to PERTURB radii. A fresh random offset would
        # start that alignment again and split the pair several temperatures late.
        offset = twins - centres
        norm = offset.norm(dim=1, keepdim=True)
        fresh = new_twins(centres, radius2)
        scale = PERTURB * radius2.clamp_min(0.0).sqrt().unsqueeze(1) / norm.clamp_min(1e-300)
        return torch.where(norm > 0, centres + offset * scale, fresh)

    start = 0
    if split and k > 1 and covariance is not None:
        radius2 = covariance.trace()  # of the one centre, the weighted mean
        radius = float(radius2.sqrt())
        offset = new_twins(C, radius2.to(C.dtype).reshape(1))[0] - C[0]
        start, offset = grow_twin_linearly(
            covariance,
            offset,
            schedule,
            assignment,
            floor=PERTURB * radius,
            limit=LINEAR_TWIN_LIMIT * radius,
        )
        twins = C + offset.to(C.dtype)
        inertia = float(radius2) * fp.total_weight
        for sigma in schedule[:start]:
            collapsed = IterationStats(
                objective=collapsed_objective(inertia, fp.total_weight, sigma, assignment),
                inertia=inertia,
                mean_nnz=1.0,  # the twin counts with its centre
                n_soft=fp.X.shape[0],
                soft_weight=fp.total_weight,
                spread=torch.full((1,), inertia, dtype=C.dtype, device=C.device),
            )
            _record(history, sigma, collapsed, 0)
            sigma_reached = sigma
        if verbose and start:
            print(f"sigma={schedule[0]:.4g}..{schedule[start - 1]:.4g} twin grown linearly")
    elif split and k > 1:
        _, den, stats = fp.step(C, schedule[0], assignment, need_spread=True)
        twins = new_twins(C, stats.spread / den.clamp_min(1e-300))

    for t, sigma in enumerate(schedule[start:], start):
        if budget.n_iter >= budget_iter or budget.stopped:
            break
        remaining = len(schedule) - t
        cap = min(
            iterations_per_sigma,
            max(2, math.ceil(2 * (budget_iter - budget.n_iter) / remaining)),
        )
        iters = 0
        stats = None
        while iters < cap and budget.n_iter < budget_iter:
            full = C if twins is None else torch.cat([C, twins])
            num, den, stats = fp.step(
                full,
                sigma,
                assignment,
                need_spread=split,
                twins_from=None if twins is None else C.shape[0],
            )
            full_new, _ = fp.update(full, num, den, reseed=False)
            shift = float(((full_new - full) ** 2).sum())
            m = C.shape[0]
            C = full_new[:m]
            if twins is not None:
                twins = full_new[m:]
            iters += 1
            fraction = (1.0 - LLOYD_SHARE) * (t + min(1.0, iters / cap)) / len(schedule)
            budget.tick(sigma, stats.objective, fraction, "anneal")
            if budget.stopped or shift <= tol:
                break
        assert stats is not None
        sigma_reached = sigma
        _record(history, sigma, stats, iters)
        m = C.shape[0]
        if twins is not None:
            mass = den[:m] + den[m:]
            radius2 = (stats.spread[:m] + stats.spread[m:]) / mass.clamp_min(1e-300)
        elif split:
            radius2 = stats.spread[:m] / den[:m].clamp_min(1e-300)
        if split and (keep := _coincident_survivors(C, radius2)) is not None:
            # Centres that fell back together (above their local critical temperature)
            # are one cluster: free the slot, so that a region that splits later gets it.
            fp.forget()
            C, radius2 = C[keep], radius2[keep]
            twins = new_twins(C, radius2)
        elif twins is not None:
            sep2 = ((C - twins) ** 2).sum(dim=1)
            splitting = torch.nonzero(sep2 > SPLIT**2 * radius2).squeeze(1)
            if splitting.numel():
                fp.forget()
                order = torch.argsort(sep2[splitting], descending=True)
                chosen = splitting[order[: k - m]]
                C = torch.cat([C, twins[chosen]])
                radius2 = torch.cat([radius2, radius2[chosen]])
                if C.shape[0] >= k:
                    twins = None
                else:
                    # Pairs still on their way apart keep their twins (starting them again
                    # would delay their split by several temperatures); the two halves of
                    # each split get new ones.
                    fresh = new_twins(C, radius2)
                    keep = torch.zeros(C.shape[0], dtype=torch.bool, device=C.device)
                    keep[:m] = True
                    keep[chosen] = False
                    twins = torch.where(keep.unsqueeze(1), torch.cat([twins, fresh[m:]]), fresh)
            else:
                # Twins still moving apart keep going; collapsed ones are pushed back out
                # along their offset, which the iterations have turned towards the
                # direction the pair splits along (see rescaled_twins).
                collapsed = sep2 < PERTURB**2 * radius2
                rescaled = rescaled_twins(C, twins, radius2)
                twins = torch.where(collapsed.unsqueeze(1), rescaled, twins)
        if verbose:
            print(
                f"sigma={sigma:.4g} iters={iters} centres={C.shape[0]} "
                f"J={stats.objective:.6g} inertia={stats.inertia:.6g} "
                f"nnz/row={stats.mean_nnz:.3g} soft={stats.n_soft}"
            )
        if twins is None and stats.soft_weight <= SOFT_FRACTION_STOP * fp.total_weight:
            break
    if C.shape[0] < k:
        C = fp.add_farthest(C, k - C.shape[0])
    fp.forget()
    return C, sigma_reached


def _coincident_survivors(C: torch.Tensor, radius2: torch.Tensor) -> torch.Tensor | None:
    """Mask of the centres to keep when some have merged, else ``None``.

    Two centres closer than ``SPLIT`` times the smaller of their rms radii are one
    cluster; the later one goes (by index, so that the outcome does not hinge on rounding).
    Radii have a floor relative to the typical one: a cluster of coincident points has
    radius 0, and two centres on it are duplicates up to rounding.
    """
    m = C.shape[0]
    if m < 2:
        return None
    C64 = C.double()
    d2 = torch.cdist(C64, C64).pow_(2)
    radius2 = radius2.double().clamp_min(1e-8 * float(radius2.double().mean()))
    limit = SPLIT**2 * torch.minimum(radius2.unsqueeze(0), radius2.unsqueeze(1))
    close = torch.triu(d2 < limit, diagonal=1)
    if not bool(close.any()):
        return None
    keep = torch.ones(m, dtype=torch.bool, device=C.device)
    for i, j in close.nonzero().tolist():
        if keep[i]:
            keep[j] = False
    return keep


def _bound_to_end_above(inertias: list[float], level: float) -> bool:
    """Whether a Lloyd phase with these inertias so far will likely end above ``level``.

    Lloyd's inertia falls by shrinking steps, about geometrically once the labels settle:
    after ``TRIAL_CHECK_AFTER`` iterations the remaining fall is estimated as the last
    step times ``r / (1 - r)``, ``r`` the ratio of the last two steps (doubled, to err on
    the side of going on). A phase already below ``level`` always goes on.
    """
    if len(inertias) < TRIAL_CHECK_AFTER:
        return False
    before, last = inertias[-3] - inertias[-2], inertias[-2] - inertias[-1]
    if inertias[-1] < level or before <= 0.0 or last < 0.0:
        return False
    ratio = 2.0 * last / before
    if ratio >= 1.0:
        return False
    return inertias[-1] - last * ratio / (1.0 - ratio) >= level


def lloyd(
    fp: FixedPointIteration,
    C: torch.Tensor,
    *,
    tol: float,
    budget: _Budget,
    history: list[dict[str, float]],
    verbose: bool,
    phase: str = "lloyd",
    abandon_above: float | None = None,
) -> tuple[torch.Tensor, bool]:
    """Hard iterations until the centres move less than ``tol`` (a K-Means fixed point).

    ``abandon_above``: a trial's Lloyd phase stops, unconverged, once its inertia is
    bound to end above this (see :func:`_bound_to_end_above`).
    """
    converged = False
    iters = 0
    seen: list[float] = []
    if budget.lloyd_from is None:
        budget.lloyd_from = budget.n_iter
    room = max(1, budget.max_iter - budget.lloyd_from)
    last = None
    while not budget.stopped and budget.n_iter < budget.max_iter:
        num, den, last = fp.step(C, 0.0, "hard")
        C_new, _ = fp.update(C, num, den)
        shift = float(((C_new - C) ** 2).sum())
        C = C_new
        iters += 1
        done = (budget.n_iter + 1 - budget.lloyd_from) / room
        budget.tick(0.0, last.objective, (1.0 - LLOYD_SHARE) + LLOYD_SHARE * done, phase)
        # Re-seeding an empty cluster moves its centre, so it shows in the shift; where it
        # cannot move (every point coincides with a centre) this is still a fixed point.
        if shift <= tol:
            converged = True
            break
        seen.append(last.objective)
        if abandon_above is not None and _bound_to_end_above(seen, abandon_above):
            break
    if last is not None:
        _record(history, 0.0, last, iters)
        if verbose:
            print(f"lloyd iters={iters} inertia={last.inertia:.6g} converged={converged}")
    return C, converged


def refine(
    fp: FixedPointIteration,
    C: torch.Tensor,
    *,
    tol: float,
    budget: _Budget,
    history: list[dict[str, float]],
    generator: torch.Generator | None,
    verbose: bool,
) -> torch.Tensor:
    """Moves out of the Lloyd fixed point ``C`` while they reach better fixed points.

    Three searches, in turn (math in :mod:`~rbfkm_engine.swaps`): split-merges
    (:func:`_split_merges`: delete a centre, split a cluster in two), one batch of
    Hartigan moves (:func:`_hartigan`), then point swaps. Each swap round draws
    ``SWAP_CANDIDATES`` points by squared distance, moves each to the mean of the points it
    would take (:meth:`FixedPointIteration.captured_means`) and prices it against every
    centre (one pass, :func:`~rbfkm_engine.swaps.swap_costs`); the best swap is made when it
    lowers the inertia by more than ``SWAP_MIN_GAIN``, and the first ``SWAP_TRIALS`` best
    ones that do not pay at once are tried all the same (a centre that leaves a region
    split in two often pays only after Lloyd has re-centred the others). The swap search
    stops after ``SWAP_PATIENCE`` rounds in a row without a kept swap. Every move is
    followed by Lloyd (:func:`_settle`; its iterations count in ``max_iter``, one record
    per kept move goes to the history) and kept only if its fixed point is better; a trial
    bound to end worse is abandoned early, and one whose Lloyd phase cannot finish is
    undone, so the result is always a converged fixed point no worse than ``C``.
    """
    if fp.k < 2:
        return C
    second, inertia = fp.two_nearest(C)
    C, second, inertia, swaps = _split_merges(
        fp,
        C,
        second,
        inertia,
        tol=tol,
        budget=budget,
        history=history,
        generator=generator,
        verbose=verbose,
    )
    C, second, inertia, kept = _hartigan(
        fp, C, second, inertia, tol=tol, budget=budget, history=history, verbose=verbose
    )
    swaps += kept
    failures = 0
    trials = SWAP_TRIALS
    while failures < SWAP_PATIENCE and not budget.stopped and budget.n_iter < budget.max_iter:
        score = fp.min_dist if fp.w is None else fp.w * fp.min_dist
        if not float(score.sum()) > 0.0:
            break  # every point sits on a centre
        P = fp.X[sample_proportional(score, SWAP_CANDIDATES, generator)]
        P = fp.captured_means(P)
        costs = fp.swap_costs(P, second)
        best = int(torch.argmin(costs))
        j, b = divmod(best, costs.shape[1])
        if not float(costs[j, b]) < (1.0 - SWAP_MIN_GAIN) * inertia:
            if trials <= 0:
                failures += 1
                continue
            trials -= 1
        trial = C.clone()
        trial[j] = P[b].to(C.dtype)
        C, second, inertia, kept, converged = _settle(
            fp, C, second, inertia, trial, tol=tol, budget=budget, history=history, verbose=verbose
        )
        if not kept:
            failures += 1
            if not converged:
                break
            continue
        failures = 0
        swaps += 1
    if verbose:
        print(f"moves kept={swaps} inertia={inertia:.6g}")
    fp.forget()
    return C


def _settle(
    fp: FixedPointIteration,
    C: torch.Tensor,
    second: torch.Tensor,
    inertia: float,
    trial: torch.Tensor,
    *,
    tol: float,
    budget: _Budget,
    history: list[dict[str, float]],
    verbose: bool,
) -> tuple[torch.Tensor, torch.Tensor, float, bool, bool]:
    """Lloyd from ``trial``, kept when it converges to a fixed point better than ``C``.

    Returns the centres, their second-nearest distances and inertia (``fp`` holds their
    labels), whether the trial was kept and whether its Lloyd phase converged. A trial
    that is not kept leaves no record in ``history``, and ``fp`` gets ``C``'s labels and
    distances back from a copy, not from another pass.
    """
    saved = fp.labels.clone(), fp.min_dist.clone()
    fp.forget()
    records = len(history)
    level = (1.0 - SWAP_MIN_GAIN) * inertia
    trial, converged = lloyd(
        fp,
        trial,
        tol=tol,
        budget=budget,
        history=history,
        verbose=verbose,
        phase="swap",
        abandon_above=level,
    )
    # The last record is the inertia before the last (tiny) shift, which cannot raise it.
    if converged and history[-1]["inertia"] < level:
        second_new, inertia_new = fp.two_nearest(trial)
        return trial, second_new, inertia_new, True, True
    abandoned = not converged and not budget.stopped and budget.n_iter < budget.max_iter
    del history[records:]
    fp.labels.copy_(saved[0])
    fp.min_dist.copy_(saved[1])
    fp.forget()
    return C, second, inertia, False, converged or abandoned


def _hartigan(
    fp: FixedPointIteration,
    C: torch.Tensor,
    second: torch.Tensor,
    inertia: float,
    *,
    tol: float,
    budget: _Budget,
    history: list[dict[str, float]],
    verbose: bool,
) -> tuple[torch.Tensor, torch.Tensor, float, bool]:
    """Batches of Hartigan moves from the labels of ``C`` (see :mod:`.swaps`), then Lloyd,
    kept when that fixed point is better. Returns as :func:`_settle`, and whether kept."""
    labels = fp.labels.clone()  # moved on a copy: fp keeps C's, for _settle to restore
    means, mass = fp.label_means(labels, C)
    for _ in range(HARTIGAN_ROUNDS):
        if fp.hartigan_moves(labels, means, mass) == 0:
            break
        means, mass = fp.label_means(labels, means)
    if torch.equal(means, C):
        return C, second, inertia, False
    C, second, inertia, kept, _ = _settle(
        fp, C, second, inertia, means, tol=tol, budget=budget, history=history, verbose=verbose
    )
    if verbose:
        print(f"hartigan kept={kept} inertia={inertia:.6g}")
    return C, second, inertia, kept


def _split_merges(
    fp: FixedPointIteration,
    C: torch.Tensor,
    second: torch.Tensor,
    inertia: float,
    *,
    tol: float,
    budget: _Budget,
    history: list[dict[str, float]],
    generator: torch.Generator | None,
    verbose: bool,
) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """Split-merge moves (see :mod:`.swaps`) while one reaches a better fixed point.

    At each fixed point the ``SPLIT_MERGE_TRIALS`` best-priced moves are tried in turn
    with Lloyd; the first that ends better is kept and the search starts again from it.
    Returns the centres, second-nearest distances, inertia and the number of moves kept.
    """
    kept_moves = 0
    moves: list[tuple[int, int]] | None = None
    failures = 0
    while not budget.stopped and budget.n_iter < budget.max_iter:
        if moves is None:
            halves, mass = fp.cluster_halves(C, generator)
            gain = split_gain(mass, halves)
            moves = ranked_split_merges(gain, fp.removal_costs(second), SPLIT_MERGE_TRIALS)
        if failures >= len(moves):
            break
        j, c = moves[failures]
        trial = C.clone()
        trial[c], trial[j] = halves[c, 0], halves[c, 1]
        C, second, inertia, kept, converged = _settle(
            fp, C, second, inertia, trial, tol=tol, budget=budget, history=history, verbose=verbose
        )
        if kept:
            kept_moves += 1
            moves, failures = None, 0
        else:
            failures += 1
            if not converged:
                break
    if verbose:
        print(f"split-merges={kept_moves} inertia={inertia:.6g}")
    return C, second, inertia, kept_moves


def solve(
    X: torch.Tensor,
    sample_weight: torch.Tensor | None,
    C0: torch.Tensor | None,
    *,
    n_clusters: int,
    assignment: str,
    schedule: list[float],
    max_iter: int,
    tol: float,
    chunk_size: int,
    iterations_per_sigma: int = 1,
    covariance: torch.Tensor | None = None,
    x_sq: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    callback: Callback | None = None,
    progress_offset: float = 0.0,
    progress_scale: float = 1.0,
    iteration_offset: int = 0,
    verbose: bool = False,
) -> SolverResult:
    """Anneal over ``schedule`` (empty: plain Lloyd from ``C0``), then Lloyd to a fixed point.

    ``tol`` is absolute: the sum over centres of the squared centre shift. ``max_iter``
    counts every iteration, all temperatures together; a share of it (``LLOYD_SHARE``) is
    kept for the Lloyd phase. With ``C0=None`` annealing starts from the weighted mean and
    grows the centres by phase transitions (see :func:`anneal`); otherwise from ``C0``.
    ``iterations_per_sigma``: fixed-point iterations at one temperature at most.
    ``covariance``: the data's weighted covariance, when the caller has it (see
    :func:`anneal`).
    ``x_sq``: the rows' squared norms, when the caller has them (read only).
    """
    fp = FixedPointIteration(X, sample_weight, n_clusters, chunk_size, x_sq)
    budget = _Budget(max_iter, callback, progress_offset, progress_scale, iteration_offset)
    history: list[dict[str, float]] = []
    split = C0 is None
    if C0 is None:
        w = sample_weight
        mean = X.mean(dim=0) if w is None else (w.unsqueeze(1) * X).sum(dim=0) / w.sum()
        C = mean.unsqueeze(0)
    else:
        C = C0.clone()
    sigma = 0.0
    if schedule:
        anneal_budget = max_iter - max(1, math.ceil(LLOYD_SHARE * max_iter))
        C, sigma = anneal(
            fp,
            C,
            n_clusters=n_clusters,
            assignment=assignment,
            schedule=schedule,
            iterations_per_sigma=iterations_per_sigma,
            covariance=covariance,
            budget_iter=anneal_budget,
            tol=tol,
            budget=budget,
            history=history,
            generator=generator,
            split=split,
            verbose=verbose,
        )
    if C.shape[0] < n_clusters:  # no schedule (constant data): seed the rest, then Lloyd
        C = fp.add_farthest(C, n_clusters - C.shape[0])
    C, converged = lloyd(fp, C, tol=tol, budget=budget, history=history, verbose=verbose)
    if schedule and converged:
        C = refine(
            fp,
            C,
            tol=tol,
            budget=budget,
            history=history,
            generator=generator,
            verbose=verbose,
        )
    inertia = fp.hard_labels(C)
    return SolverResult(
        centres=C,
        labels=fp.labels.clone(),
        inertia=inertia,
        n_iter=budget.n_iter,
        sigma=sigma,
        history=history,
        converged=converged,
        stopped_early=budget.stopped,
    )
