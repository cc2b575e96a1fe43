"""Slots traded while annealing: Ward's prices, the matching of splits with merges, and a
full fit's twins handing a slot from two close clusters to one that splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine.kdtree import TREE_MAX_FEATURES
from rbfkm_engine.passes import Workspace
from rbfkm_engine.trades import (
    Clusters,
    Trade,
    matched_trades,
    merge_costs,
    nearest_means,
    ward_gains,
)
from rbfkm_engine.twins import Twins

from .conftest import blob_tensor


def test_ward_gains_cluster_means_and_merged_centres() -> None:
    centres = np.array([[0.0, 0.0], [4.0, 0.0], [9.0, 9.0]])
    twins = np.array([[2.0, 0.0], [4.0, 3.0], [9.0, 8.0]])
    mc, mt = np.array([1.0, 2.0, 0.0]), np.array([3.0, 2.0, 0.0])
    sep2 = ((centres - twins) ** 2).sum(axis=1)
    np.testing.assert_allclose(ward_gains(mc, mt, sep2), [3.0, 9.0, 0.0])
    clusters = Clusters.of(centres, twins, mc, mt)
    np.testing.assert_allclose(clusters.mass, [4.0, 4.0, 0.0])
    # A cluster without mass keeps its centre as its mean.
    np.testing.assert_allclose(clusters.mean, [[1.5, 0.0], [4.0, 1.5], [9.0, 9.0]])
    merged = clusters.merged([Trade(kept=0, dropped=1, split=2)])
    np.testing.assert_allclose(merged, [[2.75, 0.75]])


@pytest.mark.parametrize("block_entries", (1 << 22, 7))
def test_nearest_means_and_merge_costs_match_brute_force(block_entries: int) -> None:
    rng = np.random.default_rng(3)
    mean, mass = rng.normal(size=(23, 4)), rng.random(23) + 0.5
    d2 = ((mean[:, None, :] - mean[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(d2, np.inf)
    nearest, cost = merge_costs(Clusters(mass, mean), block_entries)
    assert nearest.tolist() == d2.argmin(axis=1).tolist()
    other = mass[nearest]
    np.testing.assert_allclose(cost, mass * other / (mass + other) * d2.min(axis=1), rtol=1e-12)
    one, inf = nearest_means(mean[:1], block_entries)
    assert one.tolist() == [0] and inf.tolist() == [np.inf]


@pytest.mark.parametrize("d", (2, 3, 16, 17))
def test_nearest_means_beyond_one_block_match_brute_force(d: int) -> None:
    """Past one block (a k-d tree up to TREE_MAX_FEATURES features, blocks beyond):
    the nearest other mean and its squared distance, duplicates included."""
    rng = np.random.default_rng(d)
    mean = rng.normal(size=(600, d))
    mean[500:510] = mean[:10]  # coincident means: each other's nearest, at 0
    d2 = ((mean[:, None, :] - mean[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(d2, np.inf)
    calls: list[int] = []
    nearest, dist = nearest_means(mean, 600 * 50, check=lambda: calls.append(1))
    rows = np.arange(600)
    assert (nearest != rows).all()
    # Of two means equally near (a coincident pair seen from elsewhere), either.
    np.testing.assert_allclose(d2[rows, nearest], d2.min(axis=1), rtol=1e-12)
    np.testing.assert_allclose(dist, d2.min(axis=1), rtol=1e-9, atol=1e-12)
    assert nearest[:10].tolist() == list(range(500, 510))
    assert len(calls) == (1 if d <= TREE_MAX_FEATURES else 12)


def test_matched_trades_pair_the_largest_gains_with_the_cheapest_merges() -> None:
    # Merges: 0-1 costs 1, 2-3 costs 2, 4-5 costs 10. Splits: 6 gains 5, 7 gains 3, 8 gains 1.
    nearest = [1, 0, 3, 2, 5, 4, 0, 0, 0]
    costs = [1.0, 1.0, 2.0, 2.0, 10.0, 10.0, 50.0, 50.0, 50.0]
    made = matched_trades([8, 6, 7], [1.0, 5.0, 3.0], nearest, costs, busy=set())
    assert made == [Trade(kept=0, dropped=1, split=6), Trade(kept=2, dropped=3, split=7)]
    # A cluster with a free slot takes no part; a gain that does not exceed the cost waits.
    made = matched_trades([6, 7], [5.0, 3.0], nearest, costs, busy={0})
    assert made == [Trade(kept=2, dropped=3, split=6)]
    assert matched_trades([6], [1.0], nearest, costs, busy=set()) == []


def test_a_split_never_pays_for_its_own_merge() -> None:
    # The cheapest merge holds the best split's own cluster: the next merge pays for it.
    nearest = [1, 0, 3, 2]
    costs = [1.0, 1.0, 2.0, 2.0]
    made = matched_trades([0], [5.0], nearest, costs, busy=set())
    assert made == [Trade(kept=2, dropped=3, split=0)]


def two_close_and_one_wide() -> torch.Tensor:
    """Two close narrow blobs (one cluster's worth) and a wide pair of blobs far away."""
    return blob_tensor(
        [[0.0, 0.0], [0.6, 0.0], [20.0, 0.0], [30.0, 0.0]], n_per=50, spread=0.2, seed=1
    )


def full_twins(X: torch.Tensor, trade: bool) -> Twins:
    """Three centres with their twins: two on the close blobs, one between the wide pair
    whose twin has moved to one of them."""
    C = torch.stack([X[:50].mean(0), X[50:100].mean(0), X[100:].mean(0)])
    twins = Twins(C[:1], 3, torch.Generator().manual_seed(0), trade=trade)
    twins.centres = C.clone()
    twins.twins = torch.stack([C[0] + 0.01, C[1] + 0.01, X[150:].mean(0)])
    twins.centres[2] = X[100:150].mean(0)
    return twins


@pytest.mark.parametrize("trade", (True, False))
def test_a_full_fit_trades_the_close_pair_for_the_wide_split(trade: bool) -> None:
    X = two_close_and_one_wide()
    twins = full_twins(X, trade)
    ws = Workspace(X, None, 3, chunk_size=64)
    full = twins.stacked()
    _, den, stats = ws.step(full, 0.05, "entmax15", need_spread=True, twins_from=3)
    radius2 = twins.radii(den, stats.spread)
    before = twins.centres.clone()
    twins.after_temperature(radius2, den)
    if not trade:  # no slot to split into: the centres stay, the twins go
        torch.testing.assert_close(twins.centres, before)
        assert twins.twins is None
        return
    blobs = torch.stack([X[i : i + 50].mean(0) for i in (0, 50, 100, 150)])
    both = X[:100].mean(0)
    expected = torch.stack([both, blobs[2], blobs[3]])
    torch.testing.assert_close(twins.centres, expected, atol=0.05, rtol=0)
    assert twins.twins is not None and twins.twins.shape == (3, 2)


def test_pricing_waits_longer_after_each_pricing_that_finds_no_trade() -> None:
    twins = Twins(torch.zeros(1, 2), 3, None, trade=True)
    priced = []
    for outcome in [False, False, False, True, False]:
        while not twins._prices_now(free=0):
            priced.append(".")
        priced.append("T" if outcome else "-")
        twins._priced(outcome)
    # Waits of 1, 2 and 4 temperatures after pricings without a trade; none after a trade.
    assert "".join(priced) == "-.-..-....T-"
    assert twins._prices_now(free=0) is False
    assert twins._prices_now(free=1) is True  # free slots: always priced


def test_a_fixed_k_trades_but_auto_k_and_spherical_fits_do_not() -> None:
    from rbfkm_engine.solver import AutoK, _start

    from .conftest import make_context

    X = two_close_and_one_wide()
    ctx = make_context(X, 3)
    mean = X.mean(dim=0, keepdim=True)
    assert _start(ctx, mean, 3, None).trade is True
    assert _start(ctx, mean, 3, AutoK(max_clusters=3, criterion="gap")).trade is False
    ctx.passes.sphere = True
    assert _start(ctx, mean, 3, None).trade is False


def first_lloyd(history: list[dict[str, float]]) -> float:
    """The inertia of the Lloyd fixed point the annealing reached (before the search)."""
    annealed = False
    for record in history:
        if record["sigma"] > 0:
            annealed = True
        elif annealed:
            return record["inertia"]
    raise AssertionError("no annealed Lloyd record")


def test_trades_give_dense_regions_their_centres(monkeypatch: pytest.MonkeyPatch) -> None:
    # Heavy-tailed 2-d data at k = 32: the widest regions (the tails) take the slots
    # first. The same fits with their twins kept but no trade made (every matching empty)
    # reach an annealed fixed point well above the one trades reach.
    from rbfkm_engine import RBFKMeans
    from rbfkm_engine import twins as twins_module

    X = np.exp(np.random.default_rng(0).normal(0.0, 1.0, (4000, 2))).astype(np.float32)

    def annealed() -> float:
        fits = [RBFKMeans(n_clusters=32, random_state=s, max_iter=100).fit(X) for s in range(3)]
        return float(np.mean([first_lloyd(f.history_) for f in fits]))

    traded = annealed()
    monkeypatch.setattr(twins_module, "matched_trades", lambda *args: [])
    assert traded < 0.97 * annealed()
