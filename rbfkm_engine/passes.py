"""The blocked E/M passes over the data: the only hot loop of a fit.

One *pass* computes the squared distances of a block of rows to the centres (one GEMM),
the responsibilities of the block, and accumulates the block's share of the M-step sums
(:mod:`~rbfkm_engine.mstep`), block after block, so memory never grows as ``n x k``.
:class:`Workspace` holds the data and the buffers every pass reuses, and the labels and
nearest distances of the last pass (used to re-seed empty clusters, to price the local
search's moves and to report hard labels without another pass).

The last pass's labels can hint the next one (between fixed-point iterations few labels
change), and Lloyd keeps its M-step sums between passes and corrects them for the points
that moved. Both are asked for explicitly, per pass, with ``warm=True``: "these centres
are the last pass's centres moved by its M-step". Nothing needs to be invalidated by hand:
a pass without ``warm`` uses neither, and the kept sums are dropped by every method that
writes labels any other way, so they always belong to the labels they sit next to.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch

from . import fused
from .assign import EStep, responsibilities
from .blocks import iter_chunks
from .bounds import Bounds, BoundsUse, near_drift, squared_rounding_error
from .distances import squared_distances, squared_norms
from .memory import gather_block_rows
from .mstep import accumulate, accumulate_spread, count_nonzeros, shared_rows, weighted_sum
from .native import (
    ADD,
    LABEL,
    MOVE,
    Centres,
    ListTrace,
    LloydKernel,
    NeighbourMoves,
    Neighbours,
    RowLists,
    Rows,
    SoftMap,
    SoftParts,
    lloyd_kernel,
)
from .nearest import nearest
from .parallel import BlockPool
from .pauses import Pause
from .progress import Interrupt, IterationStats, interrupter
from .reducer import LOCAL, Reducer
from .reseed import farthest_first

T = TypeVar("T")
#: A block's share of a bounded pass: its sums, its inertia (cold passes) and the
#: kernel's counts (rows relabelled, decided by neighbour lists, candidates scanned).
_BoundedPart = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, tuple[int, int, int]]

#: Lloyd's distance blocks are padded to a multiple of this many columns on the CPU.
ROW_REDUCTION_WIDTH = 16
#: A Lloyd iteration or entmax15 pass of one block that costs at most this many
#: multiply-adds (rows x padded centres x features) is one kernel call on direct
#: distances, whatever the features (:meth:`Workspace.lloyd_iteration`, :meth:`step`):
#: there the ops around a pass cost more than the pass itself.
KERNEL_ITERATION_MAX_WORK = 1 << 22
#: A cluster whose weight in Lloyd's kept sums is at most this fraction of the total is
#: empty: what is left is the rounding residue of the weights of the rows that left it.
EMPTY_WEIGHT_FRACTION = 1e-12
#: The float64 copy of the rows that :meth:`Workspace._weighted_sum_sq` squares at a time
#: stays this small: the sum is made once per fit, and a fit under a memory cap (a mapped
#: file, docs/distributed.md) has no room for a whole block's float64 copy.
SUM_SQ_BYTES = 1 << 20
#: A bounded Lloyd pass at this many centres or more relabels a row whose bounds fail
#: from its old centre's ``NEIGHBOUR_WIDTH`` nearest centres where the triangle
#: inequality lets it (:class:`~rbfkm_engine.native.Neighbours`), not from all ``k``:
#: below, a scan of every centre costs little more than the lists (benchmarks/README.md,
#: "Lloyd at large k").
NEIGHBOUR_MIN_K = 128
NEIGHBOUR_WIDTH = 32
#: What a relabelled row's scan of a list costs beyond its candidates, in candidates;
#: and the cut in candidates per relabelled row for which the lists are kept (see
#: :class:`NeighbourUse`; crossover measured on 3 to 32 features, benchmarks/README.md).
NEIGHBOUR_ROW_COST = 16
NEIGHBOUR_MIN_GAIN = 3
#: Passes without lists after a pass where they did not pay (doubling each time): short,
#: as the first warm pass after a cold one moves most rows and may misjudge the lists.
NEIGHBOUR_PAUSE = 2
#: A pass's lists are kept up from the last ones: every centre's list is checked against
#: its old entries and the ``k / NEIGHBOUR_MOVER_SHARE`` centres that moved farthest
#: since, and a bound on every other centre's move tells which lists may miss a centre
#: (made again by a scan of every centre). Later Lloyd passes move most centres little,
#: so few lists are made again (benchmarks/README.md, "Hard Lloyd: lists kept up").
NEIGHBOUR_MOVER_SHARE = 16
#: A kept-up list whose bound on the centres it leaves out falls below its gap at this
#: position is made again: a row's scan would stop at the bound (16: measured against 8,
#: 4 and 0 at ``k = 4 096``, benchmarks/README.md, "Hard Lloyd: lists kept up").
NEIGHBOUR_KEEP = 16
#: A pass that holds no ``(rows, k)`` distance block (a kernel pass on direct distances,
#: a pass of per-row gathers) may take blocks larger than :attr:`Workspace.chunk_size`
#: (which keeps a block's distances in cache): at most ``BIG_BLOCK_ROWS`` rows,
#: ``BIG_BLOCK_WORK`` multiply-adds (a few tens of milliseconds: a stop request or a time
#: limit ends a pass within a block) and the room the fit's memory bound counts for a
#: chunk (:func:`~rbfkm_engine.memory.gather_block_rows`), and at least ``BIG_BLOCKS``
#: blocks where the chunk allows, whatever the threads (the blocks, and so the order of
#: the sums, do not depend on them). Each block's share of the sums is ``k x d``, and
#: each block its own dispatch.
BIG_BLOCK_ROWS = 1 << 15
BIG_BLOCK_WORK = 1 << 27
BIG_BLOCKS = 8
#: Centres whose neighbour lists one task of the pool makes.
NEIGHBOUR_SPAN = 256


class NeighbourUse:
    """Whether warm bounded passes make neighbour lists, from what the last lists did.

    Without lists a relabelled row computes its distance to all ``k`` centres. With them
    it computes those its old centre's list holds up to the point the triangle inequality
    decides (all ``k`` where it does not), plus a fixed cost of :data:`NEIGHBOUR_ROW_COST`
    candidates (its own centre, the reductions, its bounds), and the pass makes the lists
    (``k`` candidates per centre, shared by the relabelled rows). The lists are kept while
    they cut the candidates per relabelled row by :data:`NEIGHBOUR_MIN_GAIN` or more:
    on low-dimensional data with many centres a row is decided by a dozen candidates; in
    more dimensions, or when few rows move, a scan of every centre costs less. After a
    pass where they did not pay, the next :data:`NEIGHBOUR_PAUSE` passes go without
    them (twice as many after each further such pass), then they are tried again. The
    choice depends on counts, not on timings, so a fit's passes are the same from run to
    run; and it changes the speed, not the labels. ``doubling=False`` keeps the pause at
    :data:`NEIGHBOUR_PAUSE`: annealing's passes cool, and lists that did not pay at one
    temperature may at the next.
    """

    def __init__(self, doubling: bool = True) -> None:
        self._pause = Pause(NEIGHBOUR_PAUSE, None if doubling else NEIGHBOUR_PAUSE)

    def wanted(self) -> bool:
        """Whether the next warm bounded pass makes lists."""
        return self._pause.wanted()

    def record(self, k: int, relabelled: int, decided: int, scanned: int, made: int) -> None:
        """A pass with lists at ``k`` centres: ``relabelled`` rows, ``decided`` of them by
        the lists, which computed ``scanned`` candidates, and ``made`` gaps between centres
        computed to make the lists."""
        if relabelled == 0:
            cost = math.inf
        else:
            candidates = scanned + (relabelled - decided) * k + made
            cost = candidates / relabelled + NEIGHBOUR_ROW_COST
        self._pause.paid(k >= NEIGHBOUR_MIN_GAIN * cost)


class Workspace:
    """The data of one fit, the buffers of its passes and the labels of the last pass.

    ``C`` may hold more rows than ``n_clusters`` while annealing (a centre's twins); the
    stored ``labels`` and ``min_dist`` are those of the last pass, whatever its centres.
    ``check``: the fit's stop check, called before every block (none: never stops).
    ``pool``: the threads the blocks of the main passes (soft, hard, nearest two) are
    spread over (see :mod:`~rbfkm_engine.parallel`); none: one block after another.
    ``reducer``: the fit's collectives (:mod:`~rbfkm_engine.reducer`) when ``X`` is one
    shard of a data-parallel fit: every sum a pass returns is then the sum over all
    shards, while the per-row state (``labels``, ``min_dist``) stays the shard's own.
    """

    def __init__(
        self,
        X: torch.Tensor,
        sample_weight: torch.Tensor | None,
        n_clusters: int,
        chunk_size: int,
        x_sq: torch.Tensor | None = None,
        precision: str = "highest",
        check: Interrupt | None = None,
        pool: BlockPool | None = None,
        reducer: Reducer = LOCAL,
    ) -> None:
        self.X = X
        self.reducer = reducer
        sizes = reducer.gather_ints(X.shape[0])
        # The rows of every shard together, and the global index of this shard's first.
        self.n_total = sum(sizes)
        self.offset = sum(sizes[: reducer.rank])
        # The fit's stop check (:func:`~rbfkm_engine.progress.interrupter`), called before
        # every block of every pass and by the other long loops that get the workspace.
        self.check = interrupter(None) if check is None else check
        self.w = sample_weight
        self.k = n_clusters
        self.pool = BlockPool(1) if pool is None else pool
        self.chunk_size = self.pool.block_rows(X.shape[0], chunk_size)
        self.x_sq = squared_norms(X) if x_sq is None else x_sq
        self._min_dist = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
        self.labels = torch.empty(X.shape[0], dtype=torch.long, device=X.device)
        local_weight = float(X.shape[0] if sample_weight is None else sample_weight.sum())
        (self.total_weight,) = reducer.sum_floats(local_weight)
        # The input precision of hard passes' products on a GPU (see :mod:`.fused`), and
        # whether they run in float32 now whatever it is (Lloyd confirms its fixed points).
        self.precision = precision
        self.exact_products = True
        # Cosine fits: the rows are unit vectors and every M-step puts the centres back on
        # the sphere (their squared distances are then 2 (1 - cos)).
        self.sphere = False
        # Hard passes over every row at once (GPUs: no host synchronisation per block)
        # rather than block by cache-sized block with hints (CPUs).
        self.whole_passes = X.device.type != "cpu"
        # The fused CPU kernel of the hard passes (:mod:`~rbfkm_engine.native`), where it
        # builds; ``None``: they run in torch ops.
        self.kernel: LloydKernel | None = None if self.whole_passes else lloyd_kernel(X, self.w)
        # Lloyd's sums (R^T W X, R^T w) of ``labels``, in float64, kept between hard passes;
        # None whenever ``labels`` were written by anything but a hard pass.
        self._hard_sums: tuple[torch.Tensor, torch.Tensor] | None = None
        # Hamerly's bounds of the kernel's Lloyd passes on few features (made by the
        # first), which hold while ``_hard_sums`` does and the passes keep them; and
        # whether the next pass does (``BoundsUse``: where they pay).
        self._bounds: Bounds | None = None
        self._bounds_use = BoundsUse()
        # What the last neighbour lists leave for the next to be kept up from.
        self._neighbour_last: ListTrace | None = None
        self._neighbours_made = 0
        self._neighbour_use = NeighbourUse()
        # Whether entmax15 passes, and the local search's batches of Hartigan moves, take
        # their rows' candidates from neighbour lists.
        self._soft_neighbour_use = NeighbourUse(doubling=False)
        self.hartigan_neighbour_use = NeighbourUse()
        self._x_sq_max: float | None = None  # see x_sq_max
        self._sum_sq: torch.Tensor | None = None
        # Per thread: the distance block and the argmin keys' block, reused by every pass
        # (see ``_reused_block``), and the layout whose padding the distance block holds
        # (see ``padded_distances``).
        self._local = threading.local()

    @property
    def x_sq_max(self) -> float:
        """The largest squared norm of a row (0 without rows), which the rounding of the
        rows' distances scales with (:func:`~rbfkm_engine.bounds.squared_rounding_error`);
        computed once."""
        if self._x_sq_max is None:
            self._x_sq_max = float(self.x_sq.max()) if self.x_sq.numel() else 0.0
        return self._x_sq_max

    @property
    def min_dist(self) -> torch.Tensor:
        """Each row's squared distance to its nearest centre at the last pass (a pass that
        kept rows by their bounds leaves theirs to be computed here, when first read)."""
        if self._bounds is not None and self._bounds.stale:
            self._bounds.fill_distances(self.X, self.labels, self._min_dist, self.chunks)
        return self._min_dist

    def _forget_lloyd_state(self) -> None:
        """The labels are about to be written by something other than a Lloyd pass: the
        kept sums and bounds no longer describe them."""
        self._hard_sums = None
        if self._bounds is not None:
            self._bounds.forget()

    @property
    def fast_products(self) -> bool:
        """Whether hard passes may run their products below float32: the fused kernel at
        a ``precision`` other than ``"highest"``."""
        return self.whole_passes and self.precision != "highest" and fused.supports(self.X)

    def chunks(self) -> Iterator[slice]:
        """The row blocks of every pass, the fit's ``check`` called before each (a stop
        request ends a pass within one block)."""
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            self.check()
            yield rows

    def map_blocks(self, fn: Callable[[slice], T], rows: int | None = None) -> Iterator[T]:
        """``fn`` of every row block (``rows`` rows, default :attr:`chunk_size`), yielded
        in block order, spread over the pool's threads (a few blocks ahead); the fit's
        ``check`` is called before each. ``fn`` may write its own rows of the per-row
        state (``labels``, ``min_dist``) and nothing else that is shared."""

        def checked(rows: slice) -> T:
            self.check()
            return fn(rows)

        blocks = iter_chunks(self.X.shape[0], rows or self.chunk_size)
        return self.pool.map(checked, list(blocks))

    @property
    def _blocks(self) -> dict[str, torch.Tensor]:
        """This thread's reused blocks."""
        blocks = getattr(self._local, "blocks", None)
        if blocks is None:
            blocks = self._local.blocks = {}
        return blocks

    def weights(self, rows: slice) -> torch.Tensor | None:
        """The block's sample weights (``None``: all 1)."""
        return None if self.w is None else self.w[rows]

    def kernel_for(self, C: torch.Tensor) -> LloydKernel | None:
        """The fused kernel where it can run a pass at the centres ``C`` (there is one,
        and ``C`` is of the data's type), else ``None``."""
        return self.kernel if self.kernel is not None and C.dtype == self.X.dtype else None

    def _rows(self, rows: slice, second: torch.Tensor | None = None) -> Rows:
        """The block as the kernel reads and writes it (with ``second``'s rows where
        the pass is to write each row's second-nearest squared distance)."""
        return Rows(
            self.X[rows],
            self.x_sq[rows],
            self.weights(rows),
            self.labels[rows],
            self._min_dist[rows],
            None if second is None else second[rows],
        )

    # ------------------------------------------------------------------ blocks
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

    def distances(
        self, rows: slice, C: torch.Tensor, c_sq: torch.Tensor, with_norms: bool = False
    ) -> torch.Tensor:
        """``c_sq - 2 X[rows] C^T`` (the block without ``||x||^2``) in a reused block; with
        ``with_norms``, the true squared distances (``||x||^2`` added, clamped at 0).

        The block is overwritten by the next call: use it before asking for another.
        """
        self._local.padded_as = None
        out = self._reused_block("distances", rows.stop - rows.start, C.shape[0], C.dtype)
        if with_norms:
            return squared_distances(self.X[rows], C, self.x_sq[rows], c_sq, out=out)
        return torch.addmm(c_sq, self.X[rows], C.T, alpha=-2.0, out=out)

    def padded_distances(self, rows: slice, C: torch.Tensor, c_sq: torch.Tensor) -> torch.Tensor:
        """:meth:`distances` (without norms) in a block of :func:`row_reduction_width`
        columns, those past ``k`` at ``+inf``, which no minimum picks.

        The GEMM writes the ``k`` real columns only; the padding is written once per fit
        and layout, as nothing else writes there between hard passes.
        """
        k = C.shape[0]
        width = row_reduction_width(k, C.device)
        if width == k:
            return self.distances(rows, C, c_sq)
        block = self._reused_block("distances", rows.stop - rows.start, width, C.dtype)
        layout = (block.data_ptr(), width, k)
        if getattr(self._local, "padded_as", None) != layout:
            capacity = self._blocks["distances"].numel() // width
            whole = self._blocks["distances"][: capacity * width].view(capacity, width)
            whole[:, k:] = float("inf")
            self._local.padded_as = layout
        torch.addmm(c_sq, self.X[rows], C.T, alpha=-2.0, out=block[:, :k])
        return block

    def _nearest(
        self, rows: slice, D: torch.Tensor, hint: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`nearest` for a block from :meth:`distances`: true distances and labels."""
        keys = self._reused_block("argmin keys", D.shape[0], D.shape[1], D.dtype)
        _, min_dist, labels = nearest(D, self.x_sq[rows], hint, scratch=keys)
        return min_dist, labels

    # ------------------------------------------------------------------ passes
    def step(
        self,
        C: torch.Tensor,
        sigma: float,
        assignment: str,
        *,
        warm: bool = False,
        need_spread: bool = False,
        twins_from: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, IterationStats]:
        """One pass: returns the M-step sums ``(R^T W X, R^T w)`` and the statistics.

        ``warm``: ``C`` are the last pass's centres moved by its M-step, so its labels
        hint this pass (and a hard pass corrects its kept sums). Rows of ``C`` from
        ``twins_from`` on are the annealing twins of the rows before them, folded into
        them when counting nonzeros. The distance blocks leave out ``||x||^2``: no map
        depends on a per-row constant, so it is only added back where a true distance is
        reported. Without ``need_spread`` the maps write into the distance block.
        """
        if (assignment == "hard" or sigma <= 0.0) and not need_spread:
            return self._hard_step(C, warm)
        self._forget_lloyd_state()
        soft = SoftMap(sigma, twins_from)
        sums = self._kernel_soft_pass(C, soft, need_spread) if assignment == "entmax15" else None
        if sums is None:
            sums = self._torch_soft_pass(C, assignment, soft, warm, need_spread)
        sums.reduce(self.reducer)
        return sums.num, sums.den, sums.stats(self.n_total)

    def _one_call_iterations(self, k: int) -> bool:
        """Whether a Lloyd iteration at ``k`` centres is one kernel call on small data
        (:meth:`_kernel_iteration`; not on the sphere or a shard)."""
        return not self.sphere and not self.reducer.active and self._small(k)

    def _small(self, k: int) -> bool:
        """Whether the data are one block whose pass against ``k`` centres costs at most
        :data:`KERNEL_ITERATION_MAX_WORK` multiply-adds (rows x padded centres x
        features)."""
        n, d = self.X.shape
        width = row_reduction_width(k, self.X.device)
        return n <= self.chunk_size and n * width * d <= KERNEL_ITERATION_MAX_WORK

    def _kernel_soft_pass(
        self, C: torch.Tensor, soft: SoftMap, need_spread: bool
    ) -> _SoftSums | None:
        """An entmax15 pass by the fused kernel, block by block (each block's share its
        own, added in block order); ``None`` where it does not apply: no kernel, centres of
        another type than the data, or a temperature the type cannot divide by (the torch
        pass makes it hard). The distances are direct where the kernel's Lloyd passes take
        them so, and on small data (:data:`KERNEL_ITERATION_MAX_WORK`), else the block's
        GEMM. Softmax passes stay in torch: their dense map and M-step are vector and GEMM
        work, which torch's ops do faster than a loop over rows."""
        kernel, d, k = self.kernel_for(C), self.X.shape[1], C.shape[0]
        if kernel is None or soft.sigma < torch.finfo(C.dtype).tiny:
            return None
        width = row_reduction_width(k, C.device)
        direct = kernel.direct(d) or self._small(k)
        centres = kernel.centres(C, width, direct=direct)
        c_sq = centres.c_sq[:k].unsqueeze(0)
        lists = self.row_lists(C, centres, self._soft_neighbour_use)

        def block(rows: slice) -> SoftParts:
            D = None if direct else self.padded_distances(rows, C, c_sq)
            part = SoftParts.zeros(k, d, need_spread)
            kernel.soft_block(self._rows(rows), centres, D, soft, part, lists)
            return part

        # Where a pass may take neighbour lists, a row costs a few candidates and a block's
        # share of the sums (k x d) would cost more than its rows in cache-sized blocks:
        # the blocks are those of the passes without a distance block. They do not
        # depend on whether this pass takes lists, so neither do the sums.
        listable = direct and k >= NEIGHBOUR_MIN_K
        rows = self.scan_block_rows(centres) if listable else None
        sums = _SoftSums.of_parts(self.map_blocks(block, rows), C)
        if lists is not None:
            self.lists_used(self._soft_neighbour_use, k, *sums.listed)
        return sums

    def lists_used(self, use: NeighbourUse, k: int, decided: int, scanned: int) -> None:
        """Note in ``use`` what a pass over every row at ``k`` centres got from the lists
        :meth:`row_lists` made for it: the rows they decided and the candidates those
        computed."""
        use.record(k, self.X.shape[0], decided, scanned, made=self._neighbours_made)

    def row_lists(self, C: torch.Tensor, centres: Centres, use: NeighbourUse) -> RowLists | None:
        """Neighbour lists for a pass at ``C`` on direct distances that takes its rows'
        candidates from them where they decide (``None``: every row scans every centre):
        an entmax15 pass, where a list reaches every centre within the map's ``2 sigma``
        of the nearest (at cold temperatures most rows, at hot ones few), or a batch of
        Hartigan moves; ``use`` stops making them while they do not pay."""
        if centres.CT is None:
            return None
        neighbours = self._neighbours(C, centres, use)
        if neighbours is None:
            return None
        c_sq_max = float(centres.c_sq[: C.shape[0]].max())
        error = squared_rounding_error(self.x_sq_max, c_sq_max, C.shape[1], C.dtype)
        return RowLists(neighbours, error)

    def _torch_soft_pass(
        self, C: torch.Tensor, assignment: str, soft: SoftMap, warm: bool, need_spread: bool
    ) -> _SoftSums:
        """A soft pass in torch ops, block by block (see :meth:`step`)."""
        c_sq = squared_norms(C).unsqueeze(0)

        def block(rows: slice) -> _SoftSums:
            D = self.distances(rows, C, c_sq)
            e = responsibilities(
                D,
                soft.sigma,
                assignment,
                row_offset=self.x_sq[rows],
                hint=self.labels[rows] if warm else None,
                overwrite=not need_spread,
                scratch=self._reused_block("argmin keys", D.shape[0], D.shape[1], D.dtype),
            )
            self._min_dist[rows] = e.min_dist
            self.labels[rows] = e.labels
            part = _SoftSums(C)
            part.add(self, rows, D, e, soft.twins_from, need_spread)
            return part

        return _SoftSums.total(self.map_blocks(block), C)

    def _hard_step(
        self, C: torch.Tensor, warm: bool
    ) -> tuple[torch.Tensor, torch.Tensor, IterationStats]:
        """A Lloyd pass that updates the M-step sums only for the points that moved.

        Between Lloyd iterations few labels change, and the sums depend on the labels
        alone (not on the centres), so after the first pass they are kept, in float64, and
        corrected by the moved points' contributions: the pass costs the distance GEMM and
        a row minimum, not a scatter of every point.
        """
        num, den, incremental = self._lloyd_sums(C, warm)
        try:
            if self.whole_passes:
                inertia = self._whole_hard_pass(C, num, den, incremental)
            elif self.kernel is not None:
                inertia = self._fused_pass(C, MOVE if incremental else ADD, num, den)
            else:
                inertia = self._blocked_hard_pass(C, warm, num, den, incremental)
        except BaseException:  # a stop request mid-pass: the kept sums are half-corrected
            self._forget_lloyd_state()
            raise
        if not incremental:
            num, den = num.double(), den.double()
        self._hard_sums = (num, den)
        # The kept sums are the shard's own (its moved points correct them); the centres
        # need every shard's.
        num, den, inertia = self.reducer.sum_many(num, den, inertia)
        return (*self._sums_for_update(C, num, den), _hard_stats(float(inertia), C))

    def _lloyd_sums(self, C: torch.Tensor, warm: bool) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """The sums a Lloyd pass at ``C`` corrects (the kept ones, when ``warm`` and there
        are some) or fills (zeros; float64 for the kernel), and whether they are kept."""
        if warm and self._hard_sums is not None:
            return (*self._hard_sums, True)
        dtype = C.dtype if self.kernel is None else torch.float64  # the kernel's sums
        num = torch.zeros(C.shape, dtype=dtype, device=C.device)
        den = torch.zeros(C.shape[0], dtype=dtype, device=C.device)
        return num, den, False

    @property
    def _empty_weight(self) -> float:
        """A cluster of at most this weight in the kept sums is empty (see
        :data:`EMPTY_WEIGHT_FRACTION`)."""
        return EMPTY_WEIGHT_FRACTION * self.total_weight

    def _sums_for_update(
        self, C: torch.Tensor, num: torch.Tensor, den: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The kept float64 sums as :meth:`update` takes them: in ``C``'s type, an empty
        cluster's weight 0."""
        den_out = torch.where(den > self._empty_weight, den, 0.0)
        return num.to(C.dtype), den_out.to(C.dtype)

    def _blocked_hard_pass(
        self,
        C: torch.Tensor,
        warm: bool,
        num: torch.Tensor,
        den: torch.Tensor,
        incremental: bool,
    ) -> torch.Tensor:
        """The CPU's hard pass, block by cache-sized block, hinted by the last labels;
        adds to the sums and returns the inertia (a float64 tensor). Each block's share of
        the sums is its own, added in block order."""
        c_sq = squared_norms(C).unsqueeze(0)

        def block(rows: slice) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            D = self.padded_distances(rows, C, c_sq)
            old = self.labels[rows] if warm else None
            min_dist, labels = self._nearest(rows, D, old)
            self._min_dist[rows] = min_dist
            wc = self.weights(rows)
            part_num, part_den = torch.zeros_like(num), torch.zeros_like(den)
            if incremental:
                _move_points(part_num, part_den, self.X[rows], wc, old, labels)
            else:
                _add_points(part_num, part_den, self.X[rows], wc, labels)
            self.labels[rows] = labels
            return weighted_sum(min_dist, wc), part_num, part_den

        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        for part_inertia, part_num, part_den in self.map_blocks(block):
            inertia += part_inertia
            num += part_num
            den += part_den
        return inertia

    def _fused_pass(
        self,
        C: torch.Tensor,
        mode: int,
        num: torch.Tensor | None,
        den: torch.Tensor | None,
        *,
        inertia: bool = True,
        second: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """A hard pass by the fused kernel, block by block (see :mod:`.native`): labels and
        distances of every row (and into ``second``, where given, the second-nearest
        squared distances), the sums added to as ``mode`` says (each block's share its
        own, added in block order), on Hamerly's bounds where the Lloyd passes keep them;
        returns the inertia (a float64 tensor; 0 without ``inertia``, where the caller
        takes it from the sums). A ``MOVE`` pass takes it from the float64 sums, whether
        or not its bounds skipped rows (whose distances are not computed)."""
        kernel = self.kernel
        assert kernel is not None
        centres = kernel.centres(C, row_reduction_width(C.shape[0], C.device))
        bounds = self._lloyd_bounds(C, centres.CT is not None)
        lloyd = second is None and num is not None and den is not None
        if bounds is not None and lloyd and self._bounds_use.wanted():  # once a Lloyd pass
            assert num is not None and den is not None
            total = self._bounded_pass(C, centres, bounds, num, den, mode, inertia)
        else:
            if bounds is not None:
                bounds.forget()  # this pass labels the rows without them
            total = self._plain_pass(C, centres, mode, (num, den), second)
        if mode == MOVE and inertia and num is not None and den is not None:
            return self._inertia_of_sums(C, num, den)
        return total

    def _plain_pass(
        self,
        C: torch.Tensor,
        centres: Centres,
        mode: int,
        sums: tuple[torch.Tensor | None, torch.Tensor | None],
        second: torch.Tensor | None,
    ) -> torch.Tensor:
        """:meth:`_fused_pass` without bounds: every row against every centre; returns
        the rows' summed distances (a float64 tensor)."""
        kernel = self.kernel
        assert kernel is not None
        num, den = sums
        c_sq = centres.c_sq[: C.shape[0]].unsqueeze(0)

        def block(rows: slice) -> tuple[float, torch.Tensor | None, torch.Tensor | None]:
            D = None if centres.CT is not None else self.padded_distances(rows, C, c_sq)
            part_num = None if num is None else torch.zeros_like(num)
            part_den = None if den is None else torch.zeros_like(den)
            rows_out = self._rows(rows, second)
            inertia = kernel.block(rows_out, centres, D, part_num, part_den, mode)
            return inertia, part_num, part_den

        total = 0.0
        rows = None if centres.CT is None else self.scan_block_rows(centres)
        for part_inertia, part_num, part_den in self.map_blocks(block, rows):
            total += part_inertia
            if num is not None and part_num is not None:
                num += part_num
            if den is not None and part_den is not None:
                den += part_den
        return torch.tensor(total, dtype=torch.float64, device=C.device)

    def _lloyd_bounds(self, C: torch.Tensor, direct: bool) -> Bounds | None:
        """The workspace's bounds for Lloyd passes at ``C``: for the kernel's direct
        distances, at least two centres, and data whose Lloyd iterations are more than one
        call (:meth:`_one_call_iterations`: those keep no bounds)."""
        if not direct or C.shape[0] < 2 or self._one_call_iterations(C.shape[0]):
            return None
        if self._bounds is None:
            self._bounds = Bounds(self.x_sq, self.kernel)
        return self._bounds

    def _bounded_pass(
        self,
        C: torch.Tensor,
        centres: Centres,
        bounds: Bounds,
        num: torch.Tensor,
        den: torch.Tensor,
        mode: int,
        inertia: bool = True,
    ) -> torch.Tensor:
        """A Lloyd pass with Hamerly's bounds (see :mod:`.bounds`), the sums added to or
        corrected as ``mode`` says. Warm (``MOVE`` where the bounds hold, ``C`` the last
        pass's centres moved): only the rows whose bounds fail are labelled again and
        moved between the kept sums (the kept rows' distances are not computed:
        :attr:`min_dist` fills them in); what the bounds saved goes to
        :class:`~rbfkm_engine.bounds.BoundsUse`. Cold: every row labelled and its bounds
        set. Returns an ``ADD`` pass's inertia from its rows' distances, else 0 (the
        caller takes a ``MOVE`` pass's from the sums)."""
        kernel = self.kernel
        assert kernel is not None
        warm = mode == MOVE and bounds.usable(C)
        neighbours = self._neighbours(C, centres) if warm else None
        gap = None if neighbours is None else neighbours.gap[:, 0]
        drift = bounds.drift(C, gap) if warm else None
        if drift is None:
            bounds.start(C)
        elif neighbours is not None:
            drift.near = near_drift(drift.own, neighbours.order)

        def block(rows: slice) -> _BoundedPart:
            part_num, part_den = torch.zeros_like(num), torch.zeros_like(den)
            wc = self.weights(rows)
            counts = kernel.bounded_block(
                self._rows(rows),
                centres,
                (bounds.upper[rows], bounds.lower[rows]),
                drift,
                bounds.margin,
                (part_num, part_den, mode),
                neighbours,
            )
            summed = mode == ADD and inertia
            part_inertia = weighted_sum(self._min_dist[rows], wc) if summed else None
            return part_num, part_den, part_inertia, counts

        total = torch.zeros((), dtype=torch.float64, device=C.device)
        counts = [0, 0, 0]
        blocks = self.map_blocks(block, self.scan_block_rows(centres))
        for part_num, part_den, part_inertia, part_counts in blocks:
            num += part_num
            den += part_den
            if part_inertia is not None:
                total += part_inertia
            counts = [a + b for a, b in zip(counts, part_counts, strict=True)]
        made = 0 if neighbours is None else self._neighbours_made
        if neighbours is not None:
            self._neighbour_use.record(C.shape[0], *counts, made=made)
        if warm:
            bounds.stale = True
            self._bounds_use.record(self.X.shape[0], centres.width, C.shape[1], (*counts, made))
        return total

    def big_block_rows(self, work_per_row: int = 1) -> int:
        """Rows per block of a pass that holds no ``(rows, k)`` block and does at most
        ``work_per_row`` multiply-adds a row (see :data:`BIG_BLOCK_ROWS`)."""
        n, d = self.X.shape
        share = -(-n // BIG_BLOCKS)
        work = max(1, BIG_BLOCK_WORK // max(1, work_per_row))
        room = gather_block_rows(self.chunk_size, self.k, d)
        return max(self.chunk_size, min(BIG_BLOCK_ROWS, share, work, room))

    def scan_block_rows(self, centres: Centres) -> int:
        """Rows per block of a kernel pass on direct distances that may scan every centre
        for a row (``centres.width`` times the features in multiply-adds)."""
        return self.big_block_rows(centres.width * self.X.shape[1])

    def _neighbours(
        self, C: torch.Tensor, centres: Centres, use: NeighbourUse | None = None
    ) -> Neighbours | None:
        """Each centre's nearest others for a pass at ``C`` (see :data:`NEIGHBOUR_MIN_K`)
        where ``use`` (default: the bounded Lloyd passes') wants them and the lists (``k``
        times ``NEIGHBOUR_WIDTH (d + 3)`` values) take no more room than a block of the
        pass's distances: kept up from the last lists where they are of the same centres
        (see :data:`NEIGHBOUR_MOVER_SHARE`), else made by a scan of every centre."""
        k, d = C.shape
        if k < NEIGHBOUR_MIN_K or NEIGHBOUR_WIDTH * (d + 3) > self.chunk_size:
            return None
        if not (self._neighbour_use if use is None else use).wanted():
            return None
        kernel = self.kernel
        assert kernel is not None
        into = Neighbours.empty(k, d, NEIGHBOUR_WIDTH, C.dtype)
        spans = list(iter_chunks(k, NEIGHBOUR_SPAN))
        last = self._neighbour_last
        if last is None or last.centres.shape != C.shape or k <= NEIGHBOUR_WIDTH:
            for _ in self.pool.map(lambda span: kernel.neighbours(centres, k, into, span), spans):
                pass
            self._neighbours_made = k * k
        else:
            moves = NeighbourMoves.between(last.centres, C, max(1, k // NEIGHBOUR_MOVER_SHARE))
            keep = NEIGHBOUR_KEEP

            def refresh(span: slice) -> int:
                return kernel.refresh_neighbours(centres, k, into, span, last, moves, keep)

            exact = sum(self.pool.map(refresh, spans))
            self._neighbours_made = k * (NEIGHBOUR_WIDTH + moves.movers.numel()) + exact * k
        self._neighbour_last = into.trace(C)
        return into

    def _inertia_of_sums(
        self, C: torch.Tensor, num: torch.Tensor, den: torch.Tensor
    ) -> torch.Tensor:
        """``sum_i w_i ||x_i - c_(label i)||^2`` from the float64 sums of the labels:
        ``sum w ||x||^2 - 2 sum_j c_j . num_j + sum_j den_j ||c_j||^2`` (the data are
        centred, so the cancellation costs a few of float64's digits)."""
        Cd = C.double()
        spread = (den * Cd.square().sum(dim=1)).sum()
        return (self._weighted_sum_sq() - 2.0 * (Cd * num).sum() + spread).clamp_min(0.0)

    def _weighted_sum_sq(self) -> torch.Tensor:
        """``sum_i w_i ||x_i||^2`` in float64 (a float64 tensor), made once per fit: by
        the kernel block by block where it runs (no copy), else by parts of at most
        :data:`SUM_SQ_BYTES` in float64 (a few small ops each)."""
        if self._sum_sq is not None:
            return self._sum_sq
        total = torch.zeros((), dtype=torch.float64, device=self.X.device)
        if self.kernel is not None:
            for rows in self.chunks():
                total += self.kernel.weighted_sum_sq(self.X[rows], self.weights(rows))
        else:
            n, d = self.X.shape
            part = min(self.chunk_size, max(1, SUM_SQ_BYTES // (8 * max(d, 1))))
            for rows in iter_chunks(n, part):
                self.check()
                squares = self.X[rows].double().square().sum(dim=1)  # X may be float64
                total += weighted_sum(squares, self.weights(rows))
        self._sum_sq = total
        return total

    def _whole_hard_pass(
        self, C: torch.Tensor, num: torch.Tensor, den: torch.Tensor, incremental: bool
    ) -> torch.Tensor:
        """A GPU's hard pass: the nearest centres of every row at once, then the sums of
        the moved (or all) points; one host synchronisation (the moved rows' count)."""
        old = self.labels.clone() if incremental else None
        self._nearest_everywhere(C, exact=self.exact_products)
        if old is not None:
            _move_points(num, den, self.X, self.w, old, self.labels)
        else:
            _add_points(num, den, self.X, self.w, self.labels)
        return weighted_sum(self._min_dist, self.w)

    def _nearest_everywhere(self, C: torch.Tensor, exact: bool) -> None:
        """``labels`` and ``min_dist`` of every row at ``C``: by the fused kernel where it
        runs (float32 products when ``exact``, else the fit's precision), else block by
        block through :meth:`_nearest` without hints (on a GPU a plain ``min``: no host
        synchronisation). Ties go to the lowest index."""
        c_sq = squared_norms(C)
        if not self.X.shape[0]:
            return  # an empty shard of a data-parallel fit
        if fused.supports(self.X):
            self.check()  # one kernel for the whole pass
            precision = "highest" if exact else self.precision
            fused.nearest(self.X, self.x_sq, C, c_sq, precision, (self._min_dist, self.labels))
            return
        for rows in self.chunks():
            D = self.distances(rows, C, c_sq.unsqueeze(0))
            self._min_dist[rows], self.labels[rows] = self._nearest(rows, D, None)

    def lloyd_iteration(
        self, C: torch.Tensor, warm: bool
    ) -> tuple[torch.Tensor, float, IterationStats]:
        """One Lloyd iteration from ``C``: a hard pass (``warm`` as :meth:`step`), then
        the new centres (empty clusters re-seeded). Returns them, their squared shift from
        ``C`` and the pass's statistics. With the kernel, the M-step is one call of it, and
        on small data the whole iteration is (:meth:`_kernel_iteration`)."""
        done = self._kernel_iteration(C, warm)
        if done is not None:
            return done
        num, den, stats = self.step(C, 0.0, "hard", warm=warm)
        C_new, _ = self.update(C, num, den)
        return C_new, _squared_shift(C_new, C), stats

    def _kernel_iteration(
        self, C: torch.Tensor, warm: bool
    ) -> tuple[torch.Tensor, float, IterationStats] | None:
        """:meth:`lloyd_iteration` by the kernel, with the labels, distances and kept sums
        of :meth:`step` and the centres of :meth:`update`; ``None`` where it does not apply
        (no kernel, shards, the sphere, centres of another type than the data): the pass,
        then the M-step in one call instead of the dozen ops of :meth:`update` and the
        inertia. Small data (one block, a pass of at most
        :data:`KERNEL_ITERATION_MAX_WORK`) make the pass in one call, on direct distances
        whatever the features and without bounds; larger data block by block
        (:meth:`_fused_pass`). The inertia comes from the float64 sums, as a warm
        pass's does (the rows' float32 distances carry more rounding than a tight fit's
        inertia can bear, and the local search compares inertias to within
        :data:`~rbfkm_engine.swaps.SWAP_MIN_GAIN`)."""
        kernel, n, k = self.kernel_for(C), self.X.shape[0], C.shape[0]
        if kernel is None or self.sphere or self.reducer.active:
            return None
        width = row_reduction_width(k, C.device)
        small = self._one_call_iterations(k)
        num, den, incremental = self._lloyd_sums(C, warm)
        mode = MOVE if incremental else ADD
        C = C.contiguous()
        C_new = torch.empty_like(C)
        mstep = (C, float(self._weighted_sum_sq()), self._empty_weight, C_new)
        if small:
            if self._bounds is not None:
                self._bounds.forget()
            centres = kernel.centres(C, width, direct=True)  # small: no GEMM to amortise
            self.check()
            kernel.block(self._rows(slice(0, n)), centres, None, num, den, mode)
        else:
            try:
                self._fused_pass(C, mode, num, den, inertia=False)
            except BaseException:  # a stop request mid-pass: the kept sums are half-corrected
                self._forget_lloyd_state()
                raise
        inertia, shift, n_empty = kernel.update((num, den), *mstep)
        self._hard_sums = (num, den)
        if n_empty:  # the centres as update() makes them, with its re-seeding
            C_new, _ = self.update(C, *self._sums_for_update(C, num, den))
            shift = _squared_shift(C_new, C)
        return C_new, shift, _hard_stats(inertia, C)

    def update(
        self, C: torch.Tensor, num: torch.Tensor, den: torch.Tensor, *, reseed: bool = True
    ) -> tuple[torch.Tensor, int]:
        """New centres ``num / den``; clusters that received no mass are re-seeded.

        As scikit-learn and faiss do, an empty cluster moves to the point farthest from its
        nearest centre (points of weight 0 are never chosen). With ``reseed=False`` (while
        annealing) an empty centre stays where it is.
        """
        C_new = num / den.clamp_min(torch.finfo(den.dtype).tiny).unsqueeze(1)
        if self.sphere:  # spherical K-Means: the mean's direction
            C_new = C_new / C_new.norm(dim=1, keepdim=True).clamp_min(torch.finfo(C.dtype).tiny)
        empty = den <= 0
        n_empty = int(empty.sum())
        if n_empty and not reseed:
            C_new[empty] = C[empty]
            return C_new, 0
        if n_empty:
            C_new[empty] = farthest_first(self, self.min_dist.clone(), n_empty).to(C_new.dtype)
        return C_new, n_empty

    def hard_labels(self, C: torch.Tensor) -> float:
        """Hard E-step at ``C``: fills ``labels`` and ``min_dist``; returns the inertia.

        Without hints (ties go to the lowest index): ``RBFKMeans.predict`` runs this same
        pass, so the fit's final labels are its labels. Where the last passes were Lloyd
        passes (their kept sums; ``C``: their centres moved, as at the end of a Lloyd
        phase), this one is a Lloyd pass too, on their bounds where those hold: its labels
        are those of a pass over every centre, as a bounded pass keeps a row only where
        its computed distances would keep it, and a row its centre's neighbour list
        decides is decided by the same partial distances (see :mod:`.bounds`); its
        inertia comes from the float64 sums, as theirs does.
        """
        if self.kernel is not None and self._hard_sums is not None and not self.whole_passes:
            num, den = self._hard_sums
            if num.shape == C.shape:
                return self._summed(self._fused_pass(C, MOVE, num, den))
        self._forget_lloyd_state()
        if self.whole_passes:
            self._nearest_everywhere(C, exact=True)
            return self._summed(weighted_sum(self._min_dist, self.w))
        if self.kernel is not None:
            return self._summed(self._fused_pass(C, LABEL, None, None))
        c_sq = squared_norms(C).unsqueeze(0)

        def block(rows: slice) -> torch.Tensor:
            D = self.padded_distances(rows, C, c_sq)
            min_dist, labels = self._nearest(rows, D, None)
            self._min_dist[rows] = min_dist
            self.labels[rows] = labels
            return weighted_sum(min_dist, self.weights(rows))

        return self._summed(_ordered_sum(self.map_blocks(block), C.device))

    def two_nearest(self, C: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Hard E-step at ``C`` that also returns each point's second-nearest squared
        distance (``labels`` and ``min_dist`` hold the nearest); and the inertia. By the
        fused kernel where it runs (one sweep of each row's distances, where a top-2 sort
        of the block costs several). Where the last pass was a Lloyd pass with bounds
        (``C``: its centres moved), a row is labelled from its centre's neighbour list
        where the lists pay (see :meth:`_two_nearest_by_lists`). The pass leaves the kept
        sums, and where Lloyd passes keep bounds the bounds, as a Lloyd pass at ``C``
        would (:meth:`_keep_lloyd_state`): a Lloyd phase from centres near ``C`` (a local
        search's trial) may start warm."""
        second = torch.empty_like(self.min_dist)
        kernel = self.kernel_for(C)
        if kernel is None:
            self._forget_lloyd_state()
            return second, self._summed(self._two_nearest_in_torch(C, second))
        bounds = self._lloyd_bounds(C, kernel.direct(C.shape[1]))
        sums = self._lloyd_sums(C, warm=False)[:2]
        listed = self._two_nearest_by_lists(C, second, sums)
        self._forget_lloyd_state()
        if not listed:
            self._fused_pass(C, ADD, *sums, second=second)
        self._keep_lloyd_state(C, second, sums, bounds)
        # From the float64 sums, as a kernel Lloyd iteration's (the local search compares
        # the two): the rows' float32 distances sum to a few 1e-5 of a tight fit's
        # inertia at many centres.
        return second, self._summed(self._inertia_of_sums(C, *sums))

    def _two_nearest_in_torch(self, C: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """:meth:`two_nearest` by torch ops: a top-2 of each block's distances."""
        c_sq = squared_norms(C).unsqueeze(0)

        def block(rows: slice) -> torch.Tensor:
            D = self.padded_distances(rows, C, c_sq)
            values, labels = torch.topk(D, 2, dim=1, largest=False)
            values.add_(self.x_sq[rows].unsqueeze(1)).clamp_min_(0.0)
            self._min_dist[rows] = values[:, 0]
            second[rows] = values[:, 1]
            self.labels[rows] = labels[:, 0]
            return weighted_sum(values[:, 0], self.weights(rows))

        return _ordered_sum(self.map_blocks(block), C.device)

    def _keep_lloyd_state(
        self,
        C: torch.Tensor,
        second: torch.Tensor,
        sums: tuple[torch.Tensor, torch.Tensor],
        bounds: Bounds | None,
    ) -> None:
        """After a pass that labelled every row at ``C`` with its exact nearest and
        ``second``-nearest squared distances and added it to ``sums``: the kept sums and,
        where Lloyd passes keep ``bounds``, the bounds a bounded Lloyd pass at ``C``
        leaves (each row's upper bound its distance, its lower bound the second, less the
        margin), so that the next Lloyd pass may be warm."""
        self._hard_sums = sums
        if bounds is None:
            return
        bounds.start(C)
        margin = bounds.margin
        torch.sqrt(self._min_dist, out=bounds.upper).add_(2.0 * margin)
        torch.sqrt(second, out=bounds.lower).sub_(margin)

    def _two_nearest_by_lists(
        self,
        C: torch.Tensor,
        second: torch.Tensor,
        sums: tuple[torch.Tensor, torch.Tensor],
    ) -> bool:
        """:meth:`two_nearest` from neighbour lists (:meth:`_neighbours`), every row added
        to ``sums``; ``False`` (nothing done) where the last pass was not a bounded Lloyd
        pass at ``C``'s shape (whose labels are the rows' starting centres) or the lists
        do not run. A row's scan of its centre's list stops once the triangle inequality
        decides its nearest and second nearest; both are then those of a scan of every
        centre (the same partial distances), and a row it does not decide scans every
        centre."""
        kernel, bounds = self.kernel_for(C), self._bounds
        if kernel is None or bounds is None or not bounds.usable(C):
            return False
        centres = kernel.centres(C, row_reduction_width(C.shape[0], C.device))
        neighbours = None if centres.CT is None else self._neighbours(C, centres)
        if neighbours is None:
            return False
        margin = bounds.margin_at(C)

        def block(rows: slice) -> tuple[int, int, tuple[torch.Tensor, torch.Tensor]]:
            part = (torch.zeros_like(sums[0]), torch.zeros_like(sums[1]))
            _, decided, scanned = kernel.two_nearest_listed(
                self._rows(rows, second), centres, neighbours, margin, part
            )
            return decided, scanned, part

        decided, scanned = 0, 0
        blocks = self.map_blocks(block, self.scan_block_rows(centres))
        for part_decided, part_scanned, (part_num, part_den) in blocks:
            decided += part_decided
            scanned += part_scanned
            sums[0].add_(part_num)
            sums[1].add_(part_den)
        self.lists_used(self._neighbour_use, C.shape[0], decided, scanned)
        return True

    def _summed(self, local: torch.Tensor) -> float:
        """A float64 scalar of this shard summed over every shard."""
        return float(self.reducer.sum(local))

    def mean(self) -> torch.Tensor:
        """The weighted mean of the data, ``(1, d)``: the centre a grown fit starts from."""
        X, w = self.X, self.w
        if not self.reducer.active:
            return (X.mean(dim=0) if w is None else (w.unsqueeze(1) * X).sum(dim=0) / w.sum())[None]
        total = X.sum(dim=0) if w is None else (w.unsqueeze(1) * X).sum(dim=0)
        (total,) = self.reducer.sum_many(total)
        return (total / self.total_weight)[None]

    def follow(self, successors: torch.Tensor) -> None:
        """The centres were re-arranged, the row ``j`` of the last pass's now at
        ``successors[j]``: each label follows its centre, so that the next pass's rows
        start their neighbour lists from a centre near them (any label is a valid start,
        a far one only a slower one)."""
        self._forget_lloyd_state()
        last = successors.numel() - 1
        self.labels.copy_(successors.to(self.labels.device)[self.labels.clamp(0, last)])

    def snapshot(self) -> Snapshot:
        """Copies of ``labels``, ``min_dist`` and what a warm Lloyd pass would start from
        (the kept sums and the bounds), for :meth:`restore`."""
        labels, min_dist = self.labels.clone(), self.min_dist.clone()
        if self._hard_sums is None:
            return Snapshot(labels, min_dist)
        sums = (self._hard_sums[0].clone(), self._hard_sums[1].clone())
        bounds = self._bounds
        if bounds is None or bounds.centres is None:  # passes without them (see BoundsUse)
            return Snapshot(labels, min_dist, sums)
        kept = (bounds.upper.clone(), bounds.lower.clone(), bounds.centres, bounds.margin)
        return Snapshot(labels, min_dist, sums, kept)

    def restore(self, saved: Snapshot) -> None:
        """Put back the state of a :meth:`snapshot` (no pass needed)."""
        self._forget_lloyd_state()
        self.labels.copy_(saved.labels)
        self._min_dist.copy_(saved.min_dist)
        if saved.sums is None:
            return
        self._hard_sums = saved.sums
        if saved.bounds is None or self._bounds is None:
            return
        upper, lower, centres, margin = saved.bounds
        self._bounds.upper.copy_(upper)
        self._bounds.lower.copy_(lower)
        self._bounds.centres, self._bounds.margin = centres, margin

    def add_farthest(self, C: torch.Tensor, n_new: int) -> torch.Tensor:
        """Append ``n_new`` centres, each the point farthest from all centres so far."""
        self.hard_labels(C)
        closest = self.min_dist.clone()
        if n_new <= 0:
            return C
        return torch.cat([C, farthest_first(self, closest, n_new).to(C.dtype)])


@dataclass
class Snapshot:
    """A workspace's state for :meth:`Workspace.restore`: the rows' labels and nearest
    distances and, where a warm Lloyd pass could start from them, the kept sums and the
    bounds (``upper``, ``lower``, the centres they hold for and the margin)."""

    labels: torch.Tensor
    min_dist: torch.Tensor
    sums: tuple[torch.Tensor, torch.Tensor] | None = None
    bounds: tuple[torch.Tensor, torch.Tensor, torch.Tensor, float] | None = None


class _SoftSums:
    """The M-step sums and the statistics of a soft pass, block by block."""

    def __init__(self, C: torch.Tensor) -> None:
        self.num = torch.zeros_like(C)
        self.den = torch.zeros(C.shape[0], dtype=C.dtype, device=C.device)
        self.spread = torch.zeros(C.shape[0], dtype=C.dtype, device=C.device)
        self.objective = torch.zeros((), dtype=torch.float64, device=C.device)
        self.inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        self.nnz = 0
        self.n_soft = 0
        self.soft_weight = 0.0
        self.shared_weight = 0.0
        # The rows a kernel pass's neighbour lists served, and the candidates they computed.
        self.listed = (0, 0)

    def add(
        self,
        ws: Workspace,
        rows: slice,
        D: torch.Tensor,
        e: EStep,
        twins_from: int | None,
        spread: bool,
    ) -> None:
        """Add one block's E-step ``e`` (``D``: its distance block without norms)."""
        wc = ws.weights(rows)
        self.objective += weighted_sum(e.energy, wc)
        self.inertia += weighted_sum(e.min_dist, wc)
        R = e.responsibilities
        self.nnz += count_nonzeros(R, twins_from)
        self.n_soft += e.n_soft
        soft_weight = _weight_of(e.soft_index, e.n_soft, wc)
        self.soft_weight += soft_weight
        if e.soft_index is None or twins_from is None:
            self.shared_weight += soft_weight
        else:
            shared = shared_rows(R, e.soft_index, twins_from)
            self.shared_weight += _weight_of(shared, int(shared.shape[0]), wc)
        accumulate(self.num, self.den, ws.X[rows], wc, R)
        if spread:
            accumulate_spread(self.spread, D, ws.x_sq[rows], e, wc)

    @staticmethod
    def total(parts: Iterator[_SoftSums], C: torch.Tensor) -> _SoftSums:
        """The sums of a pass from its blocks' (added in block order; zero for a shard
        without rows)."""
        sums = next(parts, None)
        if sums is None:
            return _SoftSums(C)
        for part in parts:
            sums.num += part.num
            sums.den += part.den
            sums.spread += part.spread
            sums.objective += part.objective
            sums.inertia += part.inertia
            sums.nnz += part.nnz
            sums.n_soft += part.n_soft
            sums.soft_weight += part.soft_weight
            sums.shared_weight += part.shared_weight
        return sums

    @classmethod
    def of_parts(cls, parts: Iterator[SoftParts], C: torch.Tensor) -> _SoftSums:
        """The sums of a pass from the kernel's blocks (added in block order, as they
        come), in ``C``'s type; zero for a shard without rows."""
        first = next(parts, None)
        if first is None:
            return cls(C)
        for part in parts:
            first.num += part.num
            first.den += part.den
            first.stats += part.stats
            if first.spread is not None and part.spread is not None:
                first.spread += part.spread
        sums = cls.__new__(cls)  # every field set here: no zeros to overwrite
        sums.num, sums.den = first.num.to(C.dtype), first.den.to(C.dtype)
        sums.spread = (
            torch.zeros_like(sums.den) if first.spread is None else first.spread.to(C.dtype)
        )
        # The first block's parts are this pass's own: its sums may be kept, not copied.
        sums.objective, sums.inertia = first.stats[0], first.stats[1]
        nnz, n_soft, soft_weight, shared_weight, listed, candidates = first.stats[2:].tolist()
        sums.nnz, sums.n_soft, sums.soft_weight = int(nnz), int(n_soft), soft_weight
        sums.shared_weight = shared_weight
        sums.listed = (int(listed), int(candidates))
        return sums

    def reduce(self, reducer: Reducer) -> None:
        """Every shard's sums in place of this shard's (one collective)."""
        if not reducer.active:
            return
        counts = torch.tensor(
            [self.nnz, self.n_soft, self.soft_weight, self.shared_weight], dtype=torch.float64
        )
        self.num, self.den, self.spread, self.objective, self.inertia, counts = reducer.sum_many(
            self.num, self.den, self.spread, self.objective, self.inertia, counts
        )
        self.nnz, self.n_soft = int(counts[0]), int(counts[1])
        self.soft_weight, self.shared_weight = float(counts[2]), float(counts[3])

    def stats(self, n: int) -> IterationStats:
        return IterationStats(
            objective=float(self.objective),
            inertia=float(self.inertia),
            mean_nnz=self.nnz / n,
            n_soft=self.n_soft,
            soft_weight=self.soft_weight,
            spread=self.spread,
            shared_weight=self.shared_weight,
        )


def _weight_of(rows: torch.Tensor | None, count: int, w: torch.Tensor | None) -> float:
    """The weight of a block's ``rows`` (``count`` of them; all weigh 1 without ``w`` or
    without the rows' indices)."""
    return float(count) if w is None or rows is None else float(w[rows].sum())


def _ordered_sum(parts: Iterator[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The float64 sum of the blocks' partial sums, in block order."""
    total = torch.zeros((), dtype=torch.float64, device=device)
    for part in parts:
        total += part
    return total


def _add_points(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    labels: torch.Tensor,
) -> None:
    """Add the block's points to the sums of their clusters."""
    if w is None:
        num.index_add_(0, labels, X)
        den.index_add_(0, labels, torch.ones(labels.shape[0], dtype=X.dtype, device=X.device))
    else:
        num.index_add_(0, labels, X * w.unsqueeze(1))
        den.index_add_(0, labels, w)


def _move_points(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    old: torch.Tensor,
    labels: torch.Tensor,
) -> None:
    """Move the block's points whose label changed from ``old`` between the (float64) sums."""
    moved = torch.nonzero(labels != old).squeeze(1)
    if not moved.numel():
        return
    Xm = X[moved].double()
    if w is None:
        mass = torch.ones(moved.shape[0], dtype=torch.float64, device=X.device)
    else:
        mass = w[moved].double()
        Xm = Xm * mass.unsqueeze(1)
    num.index_add_(0, labels[moved], Xm)
    num.index_add_(0, old[moved], Xm, alpha=-1.0)
    den.index_add_(0, labels[moved], mass)
    den.index_add_(0, old[moved], mass, alpha=-1.0)


def row_reduction_width(k: int, device: torch.device) -> int:
    """Columns of a hard pass's distance block: ``k`` rounded up to a multiple of
    ``ROW_REDUCTION_WIDTH`` on the CPU, where a row minimum over other widths runs
    several times slower than over a multiple of 16."""
    if device.type != "cpu":
        return k
    return k + (-k % ROW_REDUCTION_WIDTH)


def _hard_stats(inertia: float, C: torch.Tensor) -> IterationStats:
    """A hard pass's statistics: its inertia is its objective, every row is hard."""
    zeros = torch.zeros(C.shape[0], dtype=C.dtype, device=C.device)
    return IterationStats(inertia, inertia, 1.0, 0, 0.0, zeros)


def _squared_shift(C_new: torch.Tensor, C: torch.Tensor) -> float:
    """``||C_new - C||^2`` over every centre: how far an M-step moved them."""
    return float(((C_new - C) ** 2).sum())
