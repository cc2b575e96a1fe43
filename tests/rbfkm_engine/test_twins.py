"""Centres grown by phase transitions: a pair splits just below its critical temperature,
coincident centres merge, collapsed twins are pushed back out along their direction."""

from __future__ import annotations

import math

import pytest
import torch

from rbfkm_engine import twins
from rbfkm_engine.moments import largest_eigenvalue, weighted_covariance
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import FitInterrupted
from rbfkm_engine.temperature import critical_temperature, geometric_schedule
from rbfkm_engine.twins import PERTURB, SPLIT, Twins, coincident_survivors

from .conftest import blob_tensor
from .test_trades import full_twins, two_close_and_one_wide


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def two_blobs() -> torch.Tensor:
    """Two blobs at (-5, 0) and (5, 0): the critical temperature is set by their distance."""
    return blob_tensor([[-5.0, 0.0], [5.0, 0.0]], n_per=60, spread=0.5, seed=0)


def iterate(ws: Workspace, twins: Twins, sigma: float, assignment: str, iters: int):
    """Fixed-point iterations of the stacked centres at ``sigma``; the last pass's masses
    and statistics."""
    for _ in range(iters):
        full = twins.stacked()
        num, den, stats = ws.step(
            full, sigma, assignment, need_spread=True, twins_from=twins.twins_from
        )
        new, _ = ws.update(full, num, den, reseed=False)
        twins.unstack(new)
    return den, stats


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_a_pair_splits_at_the_first_temperature_below_the_critical_one(assignment: str) -> None:
    X = two_blobs()
    tc = critical_temperature(largest_eigenvalue(weighted_covariance(X)), 2, assignment)
    ws = Workspace(X, None, 2, chunk_size=64)
    twins = Twins(X.mean(dim=0, keepdim=True), 2, generator())
    temperatures = geometric_schedule(1.3 * tc, 0.01 * tc, 0.9)
    _, den, stats = ws.step(twins.centres, temperatures[0], assignment, need_spread=True)
    twins.launch(stats.spread / den)
    assert twins.twins_from == 1
    split_at = None
    for sigma in temperatures:
        den, stats = iterate(ws, twins, sigma, assignment, 30)
        changed = twins.after_temperature(twins.radii(den, stats.spread))
        assert changed is (twins.twins is None)
        if changed:
            split_at = sigma
            break
        # Above the critical temperature the pair falls back together, and is pushed back
        # out to PERTURB radii, along the axis it will split on.
        offset = twins.twins - twins.centres
        assert abs(float(offset[0, 0])) > 10 * abs(float(offset[0, 1]))
    assert split_at is not None
    assert 0.9 * tc < split_at < tc
    assert twins.centres.shape == (2, 2)
    # The two halves are on either side of the gap between the blobs.
    assert float(twins.centres[:, 0].min()) < 0.0 < float(twins.centres[:, 0].max())
    # Below the split the centres go to the blobs.
    for sigma in temperatures[temperatures.index(split_at) + 1 :]:
        iterate(ws, twins, sigma, assignment, 5)
    torch.testing.assert_close(
        twins.centres[twins.centres[:, 0].argsort()],
        torch.stack([X[:60].mean(dim=0), X[60:].mean(dim=0)]),
        atol=1e-6,
        rtol=0,
    )


def test_coincident_centres_merge_and_the_later_index_goes() -> None:
    radius2 = torch.ones(4, dtype=torch.float64)
    C = torch.tensor([[0.0, 0.05], [5.0, 0.0], [0.0, 0.0], [9.0, 9.0]], dtype=torch.float64)
    keep = coincident_survivors(C, radius2)
    assert keep is not None and keep.tolist() == [True, True, False, True]
    # Three centres together: only the first stays.
    C3 = torch.tensor([[0.0, 0.0], [0.02, 0.0], [0.0, 0.02]], dtype=torch.float64)
    assert coincident_survivors(C3, radius2[:3]).tolist() == [True, False, False]


def test_centres_apart_or_alone_do_not_merge() -> None:
    C = torch.tensor([[0.0, 0.0], [0.2, 0.0]], dtype=torch.float64)
    radius2 = torch.ones(2, dtype=torch.float64)
    assert coincident_survivors(C, radius2) is None  # 0.2 apart > SPLIT x radius
    assert coincident_survivors(C[:1], radius2[:1]) is None
    # The smaller of the two radii counts.
    near = torch.tensor([[0.0, 0.0], [0.05, 0.0]], dtype=torch.float64)
    assert coincident_survivors(near, torch.tensor([1.0, 0.01], dtype=torch.float64)) is None


def test_centres_on_a_cluster_of_radius_zero_merge() -> None:
    # Two centres on a cluster of identical points have radius 0: the floor relative to
    # the typical radius still sees them as one.
    C = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 1e-9], [8.0, 0.0]], dtype=torch.float64)
    radius2 = torch.tensor([0.0, 0.0, 4.0], dtype=torch.float64)
    assert coincident_survivors(C, radius2).tolist() == [True, False, True]


def test_a_merge_frees_a_slot_and_relaunches_the_twins() -> None:
    C = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 0.01]], dtype=torch.float64)
    twins = Twins(C, 4, generator())
    twins.centres = C
    radius2 = torch.tensor([1.0, 4.0, 1.0], dtype=torch.float64)
    assert twins.after_temperature(radius2)
    torch.testing.assert_close(twins.centres, C[:2])
    assert twins.twins is not None and twins.twins_from == 2
    distance = (twins.twins - twins.centres).norm(dim=1)
    torch.testing.assert_close(distance, PERTURB * radius2[:2].sqrt())


def test_radii_count_a_twin_with_its_centre() -> None:
    X = two_blobs()
    ws = Workspace(X, None, 2, chunk_size=64)
    C = X[[0, 60]] + 0.1
    twins = Twins(C, 4, generator())
    twins.centres = C
    twins.launch(torch.ones(2, dtype=torch.float64))
    full = twins.stacked()
    _, den, stats = ws.step(full, 2.0, "softmax", need_spread=True, twins_from=2)
    R = torch.softmax(-(torch.cdist(X, full) ** 2) / 2.0, dim=1)
    D = torch.cdist(X, full) ** 2
    spread, mass = (R * D).sum(dim=0), R.sum(dim=0)
    expected = (spread[:2] + spread[2:]) / (mass[:2] + mass[2:])
    torch.testing.assert_close(twins.radii(den, stats.spread), expected, rtol=1e-10, atol=0)
    twins.twins = None
    torch.testing.assert_close(
        twins.radii(den[:2], stats.spread[:2]), spread[:2] / mass[:2], rtol=1e-6, atol=0
    )


def test_stacked_and_unstack_round_trip() -> None:
    C = torch.tensor([[0.0, 0.0], [5.0, 1.0]], dtype=torch.float64)
    twins = Twins(C, 4, generator())
    twins.centres = C
    assert twins.twins is None and twins.twins_from is None
    assert twins.stacked() is C
    twins.launch(torch.ones(2, dtype=torch.float64))
    full = twins.stacked()
    assert full.shape == (4, 2) and twins.twins_from == 2
    torch.testing.assert_close(full[:2], C)
    moved = full + 1.0
    twins.unstack(moved)
    torch.testing.assert_close(twins.centres, C + 1.0)
    torch.testing.assert_close(twins.stacked(), moved)


def test_collapsed_twins_are_rescaled_along_their_direction() -> None:
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    radius2 = torch.tensor([4.0, 1.0], dtype=torch.float64)
    twins = Twins(C, 4, generator())
    twins.centres = C
    direction = torch.tensor([[0.6, 0.8], [0.0, -1.0]], dtype=torch.float64)
    twins.twins = C + 1e-6 * direction  # far below PERTURB radii: collapsed
    assert not twins.after_temperature(radius2)
    offset = twins.twins - twins.centres
    torch.testing.assert_close(offset, PERTURB * radius2.sqrt().unsqueeze(1) * direction)


def test_a_twin_on_its_centre_gets_a_fresh_direction() -> None:
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    twins = Twins(C, 4, generator())
    twins.centres = C
    twins.twins = C.clone()
    assert not twins.after_temperature(torch.ones(2, dtype=torch.float64))
    distance = (twins.twins - twins.centres).norm(dim=1)
    torch.testing.assert_close(distance, torch.full((2,), PERTURB, dtype=torch.float64))


def test_twins_moving_apart_are_left_alone() -> None:
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    twins = Twins(C, 4, generator())
    twins.centres = C
    between = math.sqrt(PERTURB * SPLIT)  # PERTURB < between < SPLIT (radius 1)
    twins.twins = C + torch.tensor([[between, 0.0], [0.0, between]], dtype=torch.float64)
    before = twins.twins.clone()
    assert not twins.after_temperature(torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(twins.twins, before)


def test_the_widest_pairs_split_into_the_free_slots() -> None:
    # Three pairs apart beyond SPLIT radii, one slot left: the widest one splits.
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0]], dtype=torch.float64)
    twins = Twins(C, 4, generator())
    twins.centres = C
    twins.twins = C + torch.tensor([[0.2, 0.0], [0.5, 0.0], [0.3, 0.0]], dtype=torch.float64)
    assert twins.after_temperature(torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(
        twins.centres, torch.cat([C, C[1:2] + torch.tensor([[0.5, 0.0]], dtype=torch.float64)])
    )
    assert twins.twins is None  # n_clusters reached


def test_after_a_split_the_halves_get_fresh_twins_and_the_others_keep_theirs() -> None:
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    twins = Twins(C, 5, generator())
    twins.centres = C
    moving = torch.tensor([[0.0, 0.05]], dtype=torch.float64)  # apart, below SPLIT
    twins.twins = C + torch.cat([torch.tensor([[0.5, 0.0]], dtype=torch.float64), moving])
    assert twins.after_temperature(torch.ones(2, dtype=torch.float64))
    assert twins.centres.shape == (3, 2) and twins.twins_from == 3
    torch.testing.assert_close(twins.twins[1], C[1] + moving[0])  # kept
    distance = (twins.twins - twins.centres).norm(dim=1)
    torch.testing.assert_close(distance[[0, 2]], torch.full((2,), PERTURB, dtype=torch.float64))


def test_twins_without_a_generator_draw_on_the_centres_device() -> None:
    # FitContext's generator may be None: fresh twins then come from torch's global
    # generator on the centres' device, not from ``None.device``.
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    twins = Twins(C, 4, None)
    twins.centres = C
    twins.launch(torch.ones(2, dtype=torch.float64))
    assert twins.twins is not None and twins.twins.device == C.device
    distance = (twins.twins - twins.centres).norm(dim=1)
    torch.testing.assert_close(distance, torch.full((2,), PERTURB, dtype=torch.float64))


@pytest.mark.parametrize("m", (3, 40, 300))
def test_coincident_survivors_by_blocks_keeps_the_same_centres(
    m: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many near-duplicate centres (chains of merges) checked whole, then 7 rows at a time.
    gen = torch.Generator().manual_seed(m)
    C = torch.randn(m, 2, generator=gen, dtype=torch.float64)
    C = torch.cat([C, C[: m // 2] + 1e-3 * torch.randn(m // 2, 2, generator=gen)])
    radius2 = torch.rand(C.shape[0], generator=gen, dtype=torch.float64) * 0.05
    whole = coincident_survivors(C, radius2)
    monkeypatch.setattr(twins, "MERGE_BLOCK_ENTRIES", 7 * C.shape[0])
    monkeypatch.setattr(twins, "_sweep_pairs", lambda *args: None)  # too many pairs
    calls: list[int] = []
    blocked = coincident_survivors(C, radius2, check=lambda: calls.append(1))
    assert whole is not None and blocked is not None
    assert torch.equal(whole, blocked)
    assert len(calls) == math.ceil(C.shape[0] / 7)

    def stop() -> None:
        raise FitInterrupted

    with pytest.raises(FitInterrupted):
        coincident_survivors(C, radius2, check=stop)


@pytest.mark.parametrize(("m", "d"), [(3000, 2), (2100, 3), (2500, 8), (2200, 40)])
def test_coincident_survivors_from_a_sweep_are_those_of_the_whole_matrix(
    m: int, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond one block the pairs to test come from a sweep along the widest coordinate:
    the same centres kept as from every pair (chains of merges among near-duplicates),
    and the blocks again where the sweep finds too many candidates."""
    gen = torch.Generator().manual_seed(m)
    C = torch.randn(m, d, generator=gen, dtype=torch.float64)
    C = torch.cat([C, C[: m // 3] + 1e-3 * torch.randn(m // 3, d, generator=gen, dtype=C.dtype)])
    radius2 = torch.rand(C.shape[0], generator=gen, dtype=torch.float64) * 0.1
    assert C.shape[0] ** 2 > twins.MERGE_BLOCK_ENTRIES  # the sweep's side
    swept = coincident_survivors(C, radius2)
    floored = radius2.clamp_min(1e-8 * float(radius2.mean()))
    whole = twins._blocked_survivors(C, floored, None)
    assert swept is not None and whole is not None and int((~swept).sum()) > m // 10
    assert torch.equal(swept, whole)
    monkeypatch.setattr(twins, "MERGE_BLOCK_ENTRIES", C.shape[0] + 1)
    assert twins._sweep_pairs(C, floored) is None
    calls: list[int] = []
    again = coincident_survivors(C, radius2, check=lambda: calls.append(1))
    assert again is not None and torch.equal(again, whole) and len(calls) > 1


def test_a_centre_without_mass_has_radius_zero_in_float32() -> None:
    # A float32 pass gives an empty centre mass 0; its radius is 0, not 0 / 0, and the
    # merge test still sees the two coincident centres beside it.
    C = torch.tensor([[0.0, 0.0], [0.0, 0.001], [9.0, 9.0]])
    twins = Twins(C, 4, generator())
    twins.centres = C
    den = torch.tensor([5.0, 5.0, 0.0])
    spread = torch.tensor([5.0, 5.0, 0.0])
    radius2 = twins.radii(den, spread)
    assert radius2.tolist() == [1.0, 1.0, 0.0]
    assert coincident_survivors(C, radius2).tolist() == [True, False, True]


def test_successors_follow_a_trade() -> None:
    """The close pair merges into row 0 and the wide pair's twin takes the freed slot:
    the dropped centre's rows go to the merged one, the split twin's to its new centre,
    the other twins' to their centres' new twins."""
    X = two_close_and_one_wide()
    grown = full_twins(X, trade=True)
    ws = Workspace(X, None, 3, chunk_size=64)
    _, den, stats = ws.step(grown.stacked(), 0.05, "entmax15", need_spread=True, twins_from=3)
    assert grown.after_temperature(grown.radii(den, stats.spread), den)
    assert grown.successors is not None
    assert grown.successors.tolist() == [0, 0, 1, 3, 3, 2]


def test_successors_of_a_full_fit_that_does_not_trade_are_the_centres() -> None:
    X = two_close_and_one_wide()
    grown = full_twins(X, trade=False)
    ws = Workspace(X, None, 3, chunk_size=64)
    _, den, stats = ws.step(grown.stacked(), 0.05, "entmax15", need_spread=True, twins_from=3)
    assert grown.after_temperature(grown.radii(den, stats.spread), den)
    assert grown.twins is None and grown.successors is not None
    assert grown.successors.tolist() == [0, 1, 2, 0, 1, 2]


def test_successors_follow_a_split_into_a_free_slot() -> None:
    """Centre 1's twin moved off and becomes centre 2; centre 0's collapsed twin stays
    its twin (row 3 of the new stacking)."""
    C = torch.tensor([[0.0, 0.0], [10.0, 0.0]])
    grown = Twins(C[:1], 4, generator())
    grown.centres = C.clone()
    grown.twins = C + torch.tensor([[1e-3, 0.0], [3.0, 0.0]])
    assert grown.after_temperature(torch.ones(2))
    assert grown.centres.shape[0] == 3 and grown.successors is not None
    assert grown.successors.tolist() == [0, 1, 3, 2]


def test_successors_follow_a_merge() -> None:
    """Centre 1 fell onto centre 0: its rows and its twin's go to row 0, a valid start."""
    C = torch.tensor([[0.0, 0.0], [1e-4, 0.0], [10.0, 0.0]])
    grown = Twins(C[:1], 3, generator())
    grown.centres = C.clone()
    grown.twins = C + 0.05  # on their way apart: no split yet
    assert grown.after_temperature(torch.ones(3))
    assert grown.centres.shape[0] == 2 and grown.successors is not None
    assert grown.successors.tolist() == [0, 0, 1, 2, 0, 3]


def test_the_survivors_of_a_merge_keep_their_twins() -> None:
    """Fresh twins would start aligning with their clusters' axes again."""
    C = torch.tensor([[0.0, 0.0], [1e-4, 0.0], [10.0, 0.0]])
    grown = Twins(C[:1], 3, generator())
    grown.centres = C.clone()
    grown.twins = C + torch.tensor([[0.05, 0.0], [0.0, 0.06], [0.0, 0.07]])
    before = grown.twins.clone()
    assert grown.after_temperature(torch.ones(3))
    torch.testing.assert_close(grown.centres, C[[0, 2]])
    assert grown.twins is not None
    torch.testing.assert_close(grown.twins, before[[0, 2]])


def test_a_pair_splits_in_the_temperature_two_centres_merge() -> None:
    """Centre 1 fell onto centre 0 and centre 2's twin moved off: the freed slot goes to
    the twin at once, and the successors compose the merge's and the split's."""
    C = torch.tensor([[0.0, 0.0], [1e-4, 0.0], [10.0, 0.0]])
    grown = Twins(C[:1], 3, generator())
    grown.centres = C.clone()
    grown.twins = C + torch.tensor([[0.05, 0.0], [0.0, 0.05], [3.0, 0.0]])
    assert grown.after_temperature(torch.ones(3))
    torch.testing.assert_close(grown.centres, torch.tensor([[0.0, 0.0], [10.0, 0.0], [13.0, 0.0]]))
    assert grown.twins is None and grown.successors is not None
    assert grown.successors.tolist() == [0, 0, 1, 0, 0, 2]


def test_a_trade_in_the_temperature_two_centres_merge_is_priced_by_the_survivors() -> None:
    """Centre 1 fell onto centre 0; the pairs 3 and 4 both split, one into the freed slot,
    the other by a trade that merges the close clusters 0 and 2 (rows 1 and 2 after the
    merge): the merged centre is their mean by the pass's masses of the survivors' rows."""
    X = blob_tensor(
        [[0.0, 0.0], [0.6, 0.0], [20.0, 0.0], [30.0, 0.0], [50.0, 0.0], [61.0, 0.0]],
        n_per=50,
        spread=0.2,
        seed=1,
    )
    blob = [X[50 * j : 50 * (j + 1)].mean(0) for j in range(6)]
    C = torch.stack([blob[0], blob[0] + 1e-5, blob[1], blob[2], blob[4]])
    grown = Twins(C[:1], 5, generator(), trade=True)
    grown.centres = C.clone()
    grown.twins = torch.stack([C[0] + 0.01, C[1] - 0.01, C[2] + 0.01, blob[3], blob[5]])
    ws = Workspace(X, None, 5, chunk_size=64)
    full = grown.stacked()
    _, den, stats = ws.step(full, 0.05, "entmax15", need_spread=True, twins_from=5)
    assert grown.after_temperature(grown.radii(den, stats.spread), den)
    rows = [0, 5, 2, 7]  # clusters 0 and 2, each centre and twin
    mass = den[rows].unsqueeze(1)
    merged = (mass * full[rows]).sum(0) / mass.sum()
    assert grown.centres.shape[0] == 5
    torch.testing.assert_close(grown.centres[0], merged)
    grown_from = {tuple(c) for c in grown.centres[1:].tolist()}
    assert grown_from == {tuple(full[j].tolist()) for j in (3, 4, 8, 9)}
