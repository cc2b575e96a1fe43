"""Hamerly's bounds: the rows whose nearest centre a Lloyd pass must look for again.

Hamerly, "Making k-means even faster" (SDM 2010). Each row keeps an upper bound ``u`` on
its distance to its own centre and a lower bound ``l`` on its distance to every other.
When the centres move, ``u`` grows by how far the row's centre moved and ``l`` shrinks by
the farthest any other centre moved. A row with ``u <= max(l, s_a)`` (``s_a``: half the
distance from its centre to the nearest other) keeps its label with no distance computed;
for the others ``u`` is tightened to the distance to their own centre, and where the test
still fails they get the distances to every centre. Between Lloyd iterations few rows fail.
The per-row work is the fused kernel's (``lloyd_bounded`` in ``lloyd_kernel.c``); this
module keeps the bounds and what each pass needs from the centres.

The labels are those of a pass without bounds up to ties within rounding: its squared
distances are ``||c||^2 - 2 x.c + ||x||^2``, off by a rounding error that grows with the
norms, so the bounds carry a margin (:func:`rounding_margin`) wide enough that a row kept
by its bounds is one whose computed distances would keep it too.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .distances import squared_norms
from .pauses import Pause

if TYPE_CHECKING:
    from .native import LloydKernel

#: Centres whose gaps to the others are computed at a time (a block of that many rows
#: against every centre), so the gaps of 16 000 centres need no ``k x k`` matrix.
GAP_BLOCK = 1024
#: Up to this many multiply-adds (``k^2 d``) the kernel computes the centres' gaps from
#: their differences with their moves, one call for a dozen torch ops; beyond, a GEMM per
#: block of centres (:func:`half_gaps`) is the faster.
DIRECT_GAP_MAX_WORK = 1 << 18
#: What the kernel's Lloyd passes cost, in multiply-adds of a row's distances, for
#: :class:`BoundsUse` (measured on 3 to 32 features, benchmarks/README.md, "Bounds where they
#: pay"): a pass without bounds costs ``SCAN_ROW_COST`` per row beyond its ``width x d``
#: products (its nearest centre, the sums); with them every row's bounds are moved and
#: tested (``BOUND_ROW_COST``), and a row they do not keep costs ``RELABEL_COST`` times a
#: row of the pass without (its second-nearest centre too, and both roots), or, where its
#: centre's neighbour list decided it, ``RELABEL_COST`` times ``LIST_ROW_COST`` beyond the
#: candidates it computed (reading the list, the triangle inequality's test per candidate).
SCAN_ROW_COST = 300
BOUND_ROW_COST = 240
RELABEL_COST = 1.6
LIST_ROW_COST = 630
#: Passes without bounds after a pass where they did not pay, doubling each time up to
#: ``BOUNDS_PAUSE_MAX``: trying them again costs a pass that sets every row's.
BOUNDS_PAUSE = 2
BOUNDS_PAUSE_MAX = 16


def squared_rounding_error(
    x_sq_max: float, c_sq_max: float, n_features: int, dtype: torch.dtype
) -> float:
    """``E``, the rounding error of a computed squared distance ``||c||^2 - 2 x.c +
    ||x||^2``: a dot product of ``d`` terms is off by about ``sqrt(d)`` units in the last
    place of ``|x| |c|`` (fused, blocked sums: not the worst case, ``d`` units), and the
    sum adds ``||x||^2`` and ``||c||^2``."""
    eps = torch.finfo(dtype).eps
    return (2.0 * math.sqrt(n_features) + 4.0) * eps * (x_sq_max + c_sq_max)


def rounding_margin(x_sq_max: float, c_sq_max: float, n_features: int, dtype: torch.dtype) -> float:
    """The margin, in distance units, that covers the rounding of squared distances:
    squared distances more than ``2 E`` apart (:func:`squared_rounding_error`) keep their
    order, as do distances ``tau = sqrt(2 E)`` apart."""
    return math.sqrt(2.0 * squared_rounding_error(x_sq_max, c_sq_max, n_features, dtype))


@dataclass
class Drift:
    """How the centres moved since the last pass, per centre: ``own`` its own move,
    ``others`` the largest move of any other centre, and ``half_gap`` half its distance
    to the nearest other centre, less the margin. ``near``: where the pass has neighbour
    lists, the largest move of any centre in each centre's list (:func:`near_drift`).

    With lists, a row of centre ``a`` is at least ``lower - near[a]`` from the centres
    of ``a``'s list, and at least the list's last gap less its distance to ``c_a`` from
    every centre left out, however far those moved. At large ``k`` the farthest move of
    any centre (a re-seeded one, say) is many times the moves around ``a``, and with
    ``others`` alone almost every row's bounds fail at every pass."""

    own: torch.Tensor
    others: torch.Tensor
    half_gap: torch.Tensor
    near: torch.Tensor | None = None


class Bounds:
    """Every row's bounds and the centres of the pass that set them (``upper``: the bound
    on the distance to the row's centre plus the margin; ``lower``: on the distance to any
    other; distances, not squared)."""

    def __init__(self, x_sq: torch.Tensor, kernel: LloydKernel | None = None) -> None:
        """``kernel``: the fit's, which computes the drift where it runs (the centres
        of its type, on the CPU); ``None``: torch ops."""
        self.kernel = kernel
        self.upper = torch.empty_like(x_sq)
        self.lower = torch.empty_like(x_sq)
        self.centres: torch.Tensor | None = None
        self.margin = 0.0
        self._x_sq_max = float(x_sq.max()) if x_sq.numel() else 0.0
        self._lock = threading.Lock()
        # Whether the last pass left some rows' nearest distances unset (the rows its
        # bounds kept); see :meth:`fill_distances`.
        self.stale = False

    def usable(self, C: torch.Tensor) -> bool:
        """Whether the bounds hold for the last pass's centres and ``C`` has their shape
        (so ``C`` may be those centres moved)."""
        return self.centres is not None and self.centres.shape == C.shape

    def start(self, C: torch.Tensor) -> None:
        """A pass at ``C`` sets every row's bounds."""
        self.margin = self.margin_at(C)
        self.centres = C.clone()
        self.stale = False

    def margin_at(self, C: torch.Tensor) -> float:
        """The rounding margin (:func:`rounding_margin`) of the rows' distances to ``C``."""
        c_sq_max = float(squared_norms(C).max())
        return rounding_margin(self._x_sq_max, c_sq_max, C.shape[1], C.dtype)

    def forget(self) -> None:
        """The labels are about to be written otherwise: the bounds no longer hold."""
        self.centres = None
        self.stale = False

    def drift(self, C: torch.Tensor, nearest_gap: torch.Tensor | None = None) -> Drift:
        """How ``C`` moved from the last pass's centres; ``C`` becomes those centres.
        ``nearest_gap``: each centre's distance to its nearest other, where the caller
        has it (else computed here)."""
        assert self.centres is not None
        old, self.centres = self.centres, C.clone()
        kernel = self.kernel
        if kernel is not None and C.dtype == kernel.dtype and C.device.type == "cpu":
            return self._kernel_drift(kernel, C, old, nearest_gap)
        own = (C - old).square_().sum(dim=1).sqrt_()
        others = torch.zeros_like(own)
        if own.shape[0] > 1:
            top, where = torch.topk(own, 2)
            others.fill_(float(top[0]))
            others[where[0]] = top[1]
        return Drift(own, others, self._half_gaps(C, nearest_gap))

    def _half_gaps(self, C: torch.Tensor, nearest_gap: torch.Tensor | None) -> torch.Tensor:
        """Half each centre's gap to its nearest other (``nearest_gap``'s where given,
        else :func:`half_gaps`), less the margin."""
        half_gap = half_gaps(C) if nearest_gap is None else nearest_gap.mul(0.5)
        return half_gap.sub_(self.margin)

    def _kernel_drift(
        self,
        kernel: LloydKernel,
        C: torch.Tensor,
        old: torch.Tensor,
        nearest_gap: torch.Tensor | None,
    ) -> Drift:
        """:meth:`drift` by the kernel: the moves in one call, with the gaps where the
        centres are few (:data:`DIRECT_GAP_MAX_WORK`). Its moves are rounded up and its
        gaps down, from float64 differences: bounds at least as safe as the torch ops'."""
        k, d = C.shape
        gaps = nearest_gap is None and k * k * d <= DIRECT_GAP_MAX_WORK
        own, others, half_gap = kernel.centre_drift(
            C.contiguous(), old.contiguous(), self.margin, gaps
        )
        return Drift(own, others, half_gap if gaps else self._half_gaps(C, nearest_gap))

    def fill_distances(
        self,
        X: torch.Tensor,
        labels: torch.Tensor,
        out: torch.Tensor,
        blocks: Callable[[], Iterable[slice]],
    ) -> None:
        """Each row's squared distance to its centre of the last pass into ``out``, where
        a pass left them unset (once, whichever thread asks first)."""
        with self._lock:
            if not self.stale or self.centres is None:
                return
            for rows in blocks():
                out[rows] = (X[rows] - self.centres[labels[rows]]).square_().sum(dim=1)
            self.stale = False


class BoundsUse:
    """Whether the kernel's Lloyd passes keep Hamerly's bounds, from what the last warm
    pass with them cost against a pass without.

    A pass with bounds moves and tests every row's, and labels again only the rows they
    do not keep; one without labels every row, at less cost a row. Where the centres move
    far (the first iterations from a random start) or the rows' distances are cheap (few
    centres, few features), most rows fail their bounds and the pass without is the
    faster. After a pass where the bounds did not pay (:data:`SCAN_ROW_COST` and the
    constants beside it), the next :data:`BOUNDS_PAUSE` passes go without (twice as many
    after each further such pass, up to :data:`BOUNDS_PAUSE_MAX`: :mod:`.pauses`), then a
    pass sets every row's bounds and the next shows whether they pay. The choice depends
    on counts, not on timings, so a fit's passes are the same from run to run; and it
    changes the speed, not the labels (a row kept by its bounds is one every centre's
    distances keep)."""

    def __init__(self) -> None:
        self._pause = Pause(BOUNDS_PAUSE, BOUNDS_PAUSE_MAX)

    def wanted(self) -> bool:
        """Whether the next Lloyd pass keeps bounds (asked once a pass)."""
        return self._pause.wanted()

    def record(self, rows: int, width: int, d: int, counts: tuple[int, int, int, int]) -> None:
        """A warm pass with bounds over ``rows`` rows against ``width`` (padded) centres of
        ``d`` features, its ``counts``: rows labelled again, how many of them neighbour
        lists decided, the candidates those computed, and the gaps between centres
        computed to make the lists."""
        relabelled, decided, scanned, made = counts
        row = SCAN_ROW_COST + width * d
        listed = decided * LIST_ROW_COST + scanned * d
        relabelling = RELABEL_COST * ((relabelled - decided) * row + listed)
        bounded = rows * BOUND_ROW_COST + relabelling + made * d
        self._pause.paid(bounded <= rows * row)


def near_drift(own: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The largest of the moves ``own`` among the centres of each neighbour list
    (``order``: ``k x width`` centre indices, -1 past the others; 0 for an empty list)."""
    moved = own[order.clamp_min(0).long()]
    return moved.masked_fill_(order < 0, 0.0).amax(dim=1)


def half_gaps(C: torch.Tensor) -> torch.Tensor:
    """Half the distance from each centre to its nearest other centre (``inf`` for a
    lone centre), ``GAP_BLOCK`` centres at a time."""
    k = C.shape[0]
    c_sq = squared_norms(C)
    gaps = torch.empty(k, dtype=C.dtype, device=C.device)
    for start in range(0, k, GAP_BLOCK):
        stop = min(start + GAP_BLOCK, k)
        D = torch.addmm(c_sq.unsqueeze(0), C[start:stop], C.T, alpha=-2.0)
        D.add_(c_sq[start:stop].unsqueeze(1))
        D[:, start:stop].fill_diagonal_(float("inf"))
        gaps[start:stop] = D.amin(dim=1)
    return gaps.clamp_min_(0.0).sqrt_().mul_(0.5)
