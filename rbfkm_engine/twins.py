"""Centres grown by phase transitions: each centre's twin, its split and merges.

A grown fit starts from one centre, the weighted mean, plus a *twin*: a copy displaced by
``PERTURB`` times the cluster's rms radius. Above its critical temperature a pair falls
back together; below it the twins move apart, and once their distance exceeds ``SPLIT``
times the radius the twin becomes a centre of its own (both halves get new twins) until
there are ``n_clusters``. Centres that fall back together are merged, freeing their slot
for a later split. The number of centres a region of the data receives is thus decided by
the data's own phase transitions, not by a random draw of initial centres. A fit of a
fixed ``n_clusters`` keeps its twins once it has them all and trades slots: a split that
pays for the merge of two other clusters gets the merged one's slot
(:mod:`~rbfkm_engine.trades`).
"""

from __future__ import annotations

import torch

from .progress import Interrupt
from .temperature import grow_twin_linearly
from .trades import Clusters, Trade, matched_trades, merge_costs, ward_gains

#: A new twin is displaced by this fraction of its cluster's rms radius ...
PERTURB = 3e-2
#: ... and becomes a centre once the pair is this fraction of the radius apart.
SPLIT = 1e-1
#: The first twin grows by the linearised map, without passes over the data, while its
#: offset stays below this fraction of the radius (see ``grow_twin_linearly``).
LINEAR_TWIN_LIMIT = SPLIT / 2
#: Pairwise distances :func:`coincident_survivors` and the trades' pricing form at once (a
#: block of rows; 32 MB).
MERGE_BLOCK_ENTRIES = 1 << 22


class Twins:
    """The centres of a grown fit and the twins of those that may still split.

    ``twins`` is ``None`` once there are ``n_clusters`` centres (until a merge frees a
    slot), unless ``trade``: then the twins stay, and a pair that splits with no free slot
    may take one from two clusters it pays to merge. The annealing loop iterates on
    :meth:`stacked` and hands the result back to :meth:`unstack`; after each temperature
    :meth:`after_temperature` splits, merges, trades or re-launches the twins.
    """

    def __init__(
        self,
        mean: torch.Tensor,
        n_clusters: int,
        generator: torch.Generator | None,
        check: Interrupt | None = None,
        trade: bool = False,
    ) -> None:
        self.check = check  # the fit's stop check, for the O(m^2) merge test
        self.trade = trade
        # Temperatures a full trading fit still waits before it prices trades again, and
        # how long it waits after the next pricing that finds none (see _split).
        self.trade_wait, self.trade_backoff = 0, 1
        self.centres = mean[:1]
        self.twins: torch.Tensor | None = None
        self.n_clusters = n_clusters
        self.generator = generator
        # After a re-arrangement (see after_temperature): for each row of the old
        # stacked(), the row of the new one that stands where it stood.
        self.successors: torch.Tensor | None = None

    @property
    def twins_from(self) -> int | None:
        """The row of :meth:`stacked` where the twins start (``None``: no twins)."""
        return None if self.twins is None else self.centres.shape[0]

    def stacked(self) -> torch.Tensor:
        """The centres, then their twins: the rows one fixed-point iteration moves."""
        return self.centres if self.twins is None else torch.cat([self.centres, self.twins])

    def unstack(self, full: torch.Tensor) -> None:
        """Take back the rows of :meth:`stacked` after an iteration moved them."""
        m = self.centres.shape[0]
        self.centres = full[:m]
        if self.twins is not None:
            self.twins = full[m:]

    def launch(self, radius2: torch.Tensor) -> None:
        """Give every centre a fresh twin (``radius2``: the centres' mean squared radii)."""
        self.twins = self._fresh(self.centres, radius2)

    def launch_linearly(
        self, covariance: torch.Tensor, schedule: list[float], assignment: str
    ) -> int:
        """Give the lone first centre its twin and advance it through the hottest
        temperatures by the linearised map (:func:`~rbfkm_engine.temperature.grow_twin_linearly`),
        without passes over the data. Returns how many temperatures were so skipped."""
        radius2 = covariance.trace()  # of the one centre, the weighted mean
        radius = float(radius2.sqrt())
        C = self.centres
        offset = self._fresh(C, radius2.to(C.dtype).reshape(1))[0] - C[0]
        start, offset = grow_twin_linearly(
            covariance,
            offset,
            schedule,
            assignment,
            floor=PERTURB * radius,
            limit=LINEAR_TWIN_LIMIT * radius,
        )
        self.twins = C + offset.to(C.dtype)
        return start

    def radii(self, den: torch.Tensor, spread: torch.Tensor) -> torch.Tensor:
        """Each centre's mean squared radius from a pass's masses and spreads, a centre's
        twin counted with it."""
        # A centre with no mass has radius 0. The floor is the dtype's: 1e-300 is 0 in
        # float32, where 0 / 0 made a NaN radius, and with it the mean radius the merge
        # test floors every radius by, so that no centres could merge.
        m, tiny = self.centres.shape[0], torch.finfo(den.dtype).tiny
        if self.twins is None:
            return spread[:m] / den[:m].clamp_min(tiny)
        mass = den[:m] + den[m:]
        return (spread[:m] + spread[m:]) / mass.clamp_min(tiny)

    def after_temperature(self, radius2: torch.Tensor, mass: torch.Tensor | None = None) -> bool:
        """Merge the centres that fell back together, split the pairs that moved apart,
        push collapsed twins back out. Returns whether the centres were re-arranged
        (merged or split), so that the last labels no longer describe them;
        :attr:`successors` then maps them to rows of the new :meth:`stacked`.
        ``mass``: the pass's masses of :meth:`stacked`, which a trading fit prices its
        trades by (none without them; after a merge, the survivors' own)."""
        keep = coincident_survivors(self.centres, radius2, self.check)
        merged = None
        if keep is not None:
            # Centres that fell back together (above their local critical temperature)
            # are one cluster: free the slot, so that a region that splits now or later
            # gets it.
            merged = _merge_successors(keep, self.twins is not None)
            self.successors = merged
            self.centres, radius2 = self.centres[keep], radius2[keep]
            if self.twins is None:
                self.launch(radius2)
                return True
            # The survivors keep their twins and may split at once: at many centres a few
            # merge at most temperatures, and fresh twins, or no splits where some
            # merged, held back every split for as long.
            self.twins = self.twins[keep]
            if mass is not None:
                mass = torch.cat([mass[: keep.numel()][keep], mass[keep.numel() :][keep]])
        if self.twins is None:
            return False
        sep2 = ((self.centres - self.twins) ** 2).sum(dim=1)
        splitting = torch.nonzero(sep2 > SPLIT**2 * radius2).squeeze(1)
        if splitting.numel() and self._split(splitting, sep2, radius2, mass):
            if merged is not None:
                assert self.successors is not None
                self.successors = self.successors[merged]
            return True
        # Twins still moving apart keep going; collapsed ones are pushed back out along
        # their offset, which the iterations have turned towards the direction the pair
        # splits along (see _rescaled).
        collapsed = sep2 < PERTURB**2 * radius2
        if bool(collapsed.any()):  # else nothing to push (and no random draw to make)
            rescaled = self._rescaled(radius2)
            self.twins = torch.where(collapsed.unsqueeze(1), rescaled, self.twins)
        return merged is not None

    def _split(
        self,
        splitting: torch.Tensor,
        sep2: torch.Tensor,
        radius2: torch.Tensor,
        mass: torch.Tensor | None,
    ) -> bool:
        """The widest-apart ``splitting`` pairs (as many as there are free slots) become
        two centres each; a trading fit's other splits take slots by :meth:`_trades`.
        Returns whether any did (a full trading fit may find no trade that pays)."""
        assert self.twins is not None
        C, m = self.centres, self.centres.shape[0]
        free = self.n_clusters - m
        if free > 0:
            order = torch.argsort(sep2[splitting], descending=True)
            chosen, waiting = splitting[order[:free]], splitting[order[free:]]
        else:  # a full trading fit: every split waits (the common case, priced on the host)
            chosen, waiting = splitting[:0], splitting
        trades: list[Trade] = []
        if self.trade and mass is not None and waiting.numel() and self._prices_now(free):
            trades, C = self._trades(waiting, chosen, sep2, mass)
            self._priced(bool(trades))
        if self.trade and not trades and not chosen.numel():
            return False
        if trades:
            traded = torch.tensor([t.split for t in trades], dtype=chosen.dtype)
            chosen = torch.cat([chosen, traded.to(chosen.device)])
        self._grow(C, chosen, radius2, trades)
        return True

    def _grow(
        self, C: torch.Tensor, chosen: torch.Tensor, radius2: torch.Tensor, trades: list[Trade]
    ) -> None:
        """The twins of ``chosen`` become centres after ``C`` (the centres, merged ones
        moved); each trade's ``dropped`` goes, and its ``kept`` gets a new twin."""
        assert self.twins is not None
        twins, m = self.twins, self.centres.shape[0]
        C = torch.cat([C, twins[chosen]])
        radius2 = torch.cat([radius2, radius2[chosen]])
        if C.shape[0] >= self.n_clusters and not self.trade:
            self.centres, self.twins = C, None
            self.successors = _grow_successors(m, chosen, [], None)
            return
        # Pairs still on their way apart keep their twins (starting them again would delay
        # their split by several temperatures); the two halves of each split and every
        # merged centre get new ones.
        fresh = self._fresh(C, radius2)
        keep = torch.zeros(C.shape[0], dtype=torch.bool, device=C.device)
        keep[:m] = True
        keep[chosen] = False
        alive = torch.ones_like(keep)
        for trade in trades:
            keep[trade.kept] = False
            alive[trade.dropped] = False
        twins = torch.where(keep.unsqueeze(1), torch.cat([twins, fresh[m:]]), fresh)
        self.centres, self.twins = C[alive], twins[alive]
        self.successors = _grow_successors(m, chosen, trades, alive)

    def _prices_now(self, free: int) -> bool:
        """Whether to price trades at this temperature. A full fit whose last pricing
        found no trade that pays is near the allocation its prices ask for: it waits one
        temperature before the next pricing, twice as many after each further pricing
        that finds none, and prices at every temperature again once one finds a trade.
        Pricing is a few hundred small host operations, several times a soft pass of a
        table of a few hundred rows; the waits keep it to a few per fit where no slot
        moves. (Pricings while slots are still free count as well.)"""
        if free > 0 or self.trade_wait == 0:
            return True
        self.trade_wait -= 1
        return False

    def _priced(self, traded: bool) -> None:
        """Note a pricing's outcome for :meth:`_prices_now`."""
        if traded:
            self.trade_wait, self.trade_backoff = 0, 1
        else:
            self.trade_wait, self.trade_backoff = self.trade_backoff, 2 * self.trade_backoff

    def _trades(
        self, waiting: torch.Tensor, chosen: torch.Tensor, sep2: torch.Tensor, mass: torch.Tensor
    ) -> tuple[list[Trade], torch.Tensor]:
        """The trades of the splits ``waiting`` for a slot (:mod:`~rbfkm_engine.trades`),
        the ``chosen`` clusters, which took the free slots, left out; and the centres
        with each trade's ``kept`` at its merged mean (the caller drops the others)."""
        assert self.twins is not None
        C, m = self.centres, self.centres.shape[0]
        # Two transfers to the host, not four: the rows, then the masses and separations.
        rows_host = torch.cat([C, self.twins]).detach().double().cpu().numpy()
        centres, twins = rows_host[:m], rows_host[m:]
        sums = torch.cat([mass.double(), sep2.double()]).detach().cpu().numpy()
        masses, distances = sums[: 2 * m], sums[2 * m :]
        clusters = Clusters.of(centres, twins, masses[:m], masses[m:])
        rows = waiting.tolist()
        gains = ward_gains(masses[:m][rows], masses[m:][rows], distances[rows])
        nearest, costs = merge_costs(clusters, MERGE_BLOCK_ENTRIES, self.check)
        trades = matched_trades(
            rows, gains.tolist(), nearest.tolist(), costs.tolist(), set(chosen.tolist())
        )
        if trades:
            C = C.clone()
            kept = torch.tensor([t.kept for t in trades], device=C.device)
            C[kept] = torch.from_numpy(clusters.merged(trades)).to(C.device, C.dtype)
        return trades, C

    def _fresh(self, centres: torch.Tensor, radius2: torch.Tensor) -> torch.Tensor:
        """Twins of ``centres`` in random directions, ``PERTURB`` radii away."""
        # Drawn on the generator's device (a CUDA generator cannot fill a CPU tensor, nor
        # the reverse); without one, from torch's global generator on the centres' device.
        device = centres.device if self.generator is None else self.generator.device
        u = torch.randn(centres.shape, generator=self.generator, dtype=torch.float64, device=device)
        u = (u / u.norm(dim=1, keepdim=True).clamp_min(1e-300)).to(
            device=centres.device, dtype=centres.dtype
        )
        return centres + PERTURB * radius2.clamp_min(0.0).sqrt().unsqueeze(1) * u

    def _rescaled(self, radius2: torch.Tensor) -> torch.Tensor:
        """The twins at ``PERTURB`` radii from their centres along their current offsets.

        Above its critical temperature the fixed-point map shrinks a twin's offset most
        slowly along the cluster's principal axis: a power iteration, whose direction is
        kept and only its length reset. A fresh random offset would start that alignment
        again and split the pair several temperatures late.
        """
        assert self.twins is not None
        centres = self.centres
        offset = self.twins - centres
        norm = offset.norm(dim=1, keepdim=True)
        fresh = self._fresh(centres, radius2)
        scale = PERTURB * radius2.clamp_min(0.0).sqrt().unsqueeze(1) / norm.clamp_min(1e-300)
        return torch.where(norm > 0, centres + offset * scale, fresh)


def _grow_successors(
    m: int, chosen: torch.Tensor, trades: list[Trade], alive: torch.Tensor | None
) -> torch.Tensor:
    """:attr:`Twins.successors` of :meth:`Twins._grow` from ``m`` centres and their twins:
    a centre stays where it was (among the ``alive`` ones; a trade's dropped centre goes
    to the merged cluster it joined), the twin of a ``chosen`` centre is the new centre
    after them, and any other twin is its centre's twin (its centre, where no twins
    remain: ``alive`` is ``None``)."""
    device = chosen.device
    grown = m + chosen.numel()
    target = torch.arange(grown, device=device)
    for trade in trades:
        target[trade.dropped] = trade.kept
    if alive is None:
        rank, twins_from = target, None
    else:
        rank = (torch.cumsum(alive.long(), 0) - 1)[target]
        twins_from = int(alive.sum())
    twin = rank[:m].clone() if twins_from is None else twins_from + rank[:m]
    twin[chosen] = rank[m + torch.arange(chosen.numel(), device=device)]
    return torch.cat([rank[:m], twin])


def _merge_successors(keep: torch.Tensor, twins: bool) -> torch.Tensor:
    """:attr:`Twins.successors` of a merge that keeps the centres ``keep`` (a mask) and
    gives each a new twin: a kept centre and its twin stay with it, a merged one goes to
    row 0 (any row is a valid start for the neighbour lists, only a slower one)."""
    rank = torch.cumsum(keep.long(), 0) - 1
    rank[~keep] = 0
    if not twins:
        return rank
    twin = int(keep.sum()) + rank
    twin[~keep] = 0
    return torch.cat([rank, twin])


def coincident_survivors(
    C: torch.Tensor, radius2: torch.Tensor, check: Interrupt | None = None
) -> torch.Tensor | None:
    """Mask of the centres to keep when some have merged, else ``None``.

    Two centres closer than ``SPLIT`` times the smaller of their rms radii are one
    cluster; the later one goes (by index, so that the outcome does not hinge on rounding).
    Radii have a floor relative to the typical one: a cluster of coincident points has
    radius 0, and two centres on it are duplicates up to rounding.

    Up to ``sqrt(MERGE_BLOCK_ENTRIES)`` centres the ``m x m`` distances are formed at once.
    Beyond, the pairs close enough to test come from a sweep along the centres' widest
    coordinate (:func:`_sweep_pairs`), where there are at most ``MERGE_BLOCK_ENTRIES`` of
    them, else from the whole matrix a block of rows at a time (about
    ``MERGE_BLOCK_ENTRIES`` at once, each row against the centres after it: at
    ``m = 200 000`` the whole matrix would be 320 GB), with ``check`` (the fit's stop
    check) before each block. Either way the pairs are visited in the order the whole
    matrix would give them (a distance of another computation may round differently in
    its last bit, which decides a merge only for a pair exactly at the limit).
    """
    m = C.shape[0]
    if m < 2:
        return None
    C64 = C.double()
    radius2 = radius2.double().clamp_min(1e-8 * float(radius2.double().mean()))
    pairs = _sweep_pairs(C64, radius2) if m * m > MERGE_BLOCK_ENTRIES else None
    if pairs is None:
        return _blocked_survivors(C64, radius2, check)
    if check is not None:
        check()
    i, j = pairs
    d2 = (C64[i] - C64[j]).square_().sum(dim=1)
    close = d2 < SPLIT**2 * torch.minimum(radius2[i], radius2[j])
    if not bool(close.any()):
        return None
    keep = torch.ones(m, dtype=torch.bool, device=C.device)
    for a, b in zip(i[close].tolist(), j[close].tolist(), strict=True):
        if keep[a]:
            keep[b] = False
    return keep


def _sweep_pairs(
    C64: torch.Tensor, radius2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Every pair ``i < j`` of centres that may be closer than ``SPLIT`` times the smaller
    radius, in the whole matrix's order, or ``None`` where there are more than
    ``MERGE_BLOCK_ENTRIES`` candidates. A pair that close is as close along any one
    coordinate, so after sorting the centres along their widest one each need only be
    paired with those after it within ``SPLIT`` times its own radius there."""
    m = C64.shape[0]
    axis = int(C64.var(dim=0).argmax())
    coordinate, order = torch.sort(C64[:, axis], stable=True)
    reach = SPLIT * radius2[order].sqrt() * (1 + 1e-9) + 1e-300
    ends = torch.searchsorted(coordinate, coordinate + reach, right=True)
    counts = ends - torch.arange(1, m + 1, device=C64.device)
    counts.clamp_(min=0)
    total = int(counts.sum())
    if total > MERGE_BLOCK_ENTRIES:
        return None
    first = torch.repeat_interleave(torch.arange(m, device=C64.device), counts)
    starts = torch.cumsum(counts, 0) - counts
    second = first + 1 + torch.arange(total, device=C64.device) - starts[first]
    a, b = order[first], order[second]
    i, j = torch.minimum(a, b), torch.maximum(a, b)
    ranked = torch.argsort(i * m + j)
    return i[ranked], j[ranked]


def _blocked_survivors(
    C64: torch.Tensor, radius2: torch.Tensor, check: Interrupt | None
) -> torch.Tensor | None:
    """:func:`coincident_survivors` from the whole matrix of distances, by blocks."""
    m = C64.shape[0]
    # cdist's own choice for the whole matrix, kept for every block: the same distances.
    mode = "use_mm_for_euclid_dist" if m > 25 else "donot_use_mm_for_euclid_dist"
    rows = max(1, MERGE_BLOCK_ENTRIES // m)
    keep: torch.Tensor | None = None
    for start in range(0, m, rows):
        if check is not None:
            check()
        block = slice(start, min(start + rows, m))
        d2 = torch.cdist(C64[block], C64[start:], compute_mode=mode).pow_(2)
        limit = SPLIT**2 * torch.minimum(radius2[block].unsqueeze(1), radius2[start:].unsqueeze(0))
        close = torch.triu(d2 < limit, diagonal=1)  # local diagonal = global diagonal
        if not bool(close.any()):
            continue
        if keep is None:
            keep = torch.ones(m, dtype=torch.bool, device=C64.device)
        for i, j in close.nonzero().tolist():
            if keep[start + i]:
                keep[start + j] = False
    return keep
