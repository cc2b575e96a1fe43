"""Farthest-first seeding: each new centre the point farthest from the centres and the
points taken before it; never a point of weight 0 while others remain."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine import reseed
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import FitInterrupted
from rbfkm_engine.reseed import FARTHEST_CANDIDATES, _picks, _Pool, farthest_first

from .conftest import workspace_on


def points(case: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn((6000, 3), generator=g, dtype=torch.float64)
    if case == "duplicates":  # many equal distances: the candidates' check fails, full passes
        X = X[torch.randint(0, 12, (6000,), generator=g)]
    w = None
    if case == "weights":  # weight-0 points are never taken
        w = torch.rand(6000, generator=g, dtype=torch.float64)
        w[torch.rand(6000, generator=g) < 0.3] = 0.0
    return X, w


def _take_farthest(ws: Workspace, closest: torch.Tensor) -> torch.Tensor:
    """The point farthest from the centres (``closest``, lowered to count it as one), by a
    pass over every row: the reference the pools must match."""
    score = closest if ws.w is None else torch.where(ws.w > 0, closest, -1.0)
    far = int(torch.argmax(score))
    point = ws.X[far : far + 1]
    torch.minimum(closest, (ws.X - point).square().sum(dim=1), out=closest)
    return point[0]


@pytest.mark.parametrize("case", ("distinct", "duplicates", "weights"))
@pytest.mark.parametrize("n_new", (1, 3, 40))
@pytest.mark.parametrize("path", ("kernel", "torch"))  # who makes the picks in the pool
def test_farthest_first_equals_one_full_pass_per_pick(
    case: str, n_new: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, w = points(case)
    fp = workspace_on(path, X, w, 4, chunk_size=1024)
    monkeypatch.setattr(reseed, "PICK_BLOCK", 3 * 500)  # torch picks: blocks of 500 rows
    fp.hard_labels(X[:4].clone())
    closest = fp.min_dist.clone()
    expected = torch.stack([_take_farthest(fp, closest) for _ in range(n_new)])
    pools: list[int] = []
    picks = reseed._picks
    monkeypatch.setattr(
        reseed, "_picks", lambda ws, pool, *a: (pools.append(len(pool.P)), picks(ws, pool, *a))[1]
    )
    got = farthest_first(fp, fp.min_dist.clone(), n_new)
    if case != "duplicates" and n_new < 40:  # the picks come from the candidates alone
        assert pools and max(pools) < X.shape[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_farthest_first_on_a_line() -> None:
    # Points 0..10 with a centre at 0: 10 is farthest, then 5, then one of 2, 3, 7 and 8
    # (all 4 away): the lowest index, as argmax's.
    X = torch.arange(11, dtype=torch.float64).unsqueeze(1)
    ws = Workspace(X, None, 1, chunk_size=4)
    ws.hard_labels(X[:1])
    picks = farthest_first(ws, ws.min_dist.clone(), 3)
    assert picks.squeeze(1).tolist() == [10.0, 5.0, 2.0]


def test_weight_zero_points_are_never_taken() -> None:
    # Once every weighted point is a centre, a pick repeats one (it weighs as little as a
    # point of weight 0 would).
    X = torch.arange(6, dtype=torch.float64).unsqueeze(1)
    w = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])  # the far half weighs nothing
    ws = Workspace(X, w, 1, chunk_size=4)
    ws.hard_labels(X[:1])
    picks = farthest_first(ws, ws.min_dist.clone(), 4).squeeze(1).tolist()
    assert picks == [2.0, 1.0, 0.0, 0.0]


def test_the_candidate_pool_grows_until_it_holds_the_picks() -> None:
    # Twice the pool's size of points on one spot and as many spread out: the first pick
    # empties the spot's distances, so later picks lie outside the first pool.
    g = torch.Generator().manual_seed(1)
    spot = torch.full((2 * FARTHEST_CANDIDATES, 2), 100.0, dtype=torch.float64)
    spread = torch.rand((2 * FARTHEST_CANDIDATES, 2), generator=g, dtype=torch.float64)
    X = torch.cat([spot, spread])
    ws = Workspace(X, None, 1, chunk_size=512)
    ws.hard_labels(torch.zeros((1, 2), dtype=torch.float64))
    closest = ws.min_dist.clone()
    expected = torch.stack([_take_farthest(ws, closest) for _ in range(5)])
    got = farthest_first(ws, ws.min_dist.clone(), 5)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(got[0], spot[0])


@pytest.mark.parametrize("n", (50, 3000))  # all rows a pass per pick; a pool of candidates
def test_farthest_first_checks_before_every_pick(n: int) -> None:
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    calls: list[int] = []
    ws = Workspace(X, None, 8, 64, check=lambda: calls.append(1))
    closest = ((X - X[0]) ** 2).sum(dim=1)
    picks = farthest_first(ws, closest.clone(), 5)
    assert picks.shape == (5, 3) and len(calls) >= 5

    def stop() -> None:
        raise FitInterrupted

    with pytest.raises(FitInterrupted):
        farthest_first(Workspace(X, None, 8, 64, check=stop), closest.clone(), 5)


@pytest.mark.parametrize("path", ("kernel", "torch"))
def test_a_pick_among_equal_distances_takes_the_lowest_index(path: str) -> None:
    X = torch.tensor([[0.0], [10.0], [-10.0], [1.0]], dtype=torch.float64)
    ws = workspace_on(path, X, None, 1, chunk_size=4)
    values = torch.tensor([1.0, 100.0, 100.0, 1.0], dtype=torch.float64)
    pool = _Pool(X, values, torch.tensor([7, 5, 3, 9]))
    picks = _picks(ws, pool, torch.tensor(-1.0, dtype=torch.float64), 2)
    assert picks is not None
    # -10 and 10 tie; -10 is the row of lower index (3 against 5). Then 10, 400 from it.
    assert picks.squeeze(1).tolist() == [-10.0, 10.0]
    assert values.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert _picks(ws, pool, torch.tensor(1.0, dtype=torch.float64), 1) is None
