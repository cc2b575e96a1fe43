"""Initial centres: greedy k-means++ and weighted random points."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans
from rbfkm_engine.init import kmeans_plusplus, random_init
from rbfkm_engine.progress import FitInterrupted

from .conftest import well_separated_blobs

InitFn = Callable[..., torch.Tensor]
INITS: tuple[InitFn, ...] = (kmeans_plusplus, random_init)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def row_indices(X: torch.Tensor, C: torch.Tensor) -> list[int]:
    """Index of the row of X that each centre copies (fails if a centre is not a data point)."""
    out = []
    for c in C:
        hits = torch.nonzero(torch.eq(X, c).all(dim=1)).ravel()
        assert hits.numel() >= 1, f"centre {c.tolist()} is not a data point"
        out.append(int(hits[0]))
    return out


def blobs_tensor(n: int = 300, k: int = 5, seed: int = 0) -> tuple[torch.Tensor, np.ndarray]:
    data = well_separated_blobs(n=n, k=k, d=2, seed=seed)
    return torch.from_numpy(data.X), data.y


@pytest.mark.parametrize("init", INITS)
def test_shape_dtype_and_points_of_the_data(init: InitFn) -> None:
    X, _ = blobs_tensor()
    for dtype in (torch.float32, torch.float64):
        C = init(X.to(dtype), 5, generator=gen(0))
        assert C.shape == (5, 2) and C.dtype == dtype
        row_indices(X.to(dtype), C)


@pytest.mark.parametrize("init", INITS)
def test_reproducible_with_the_same_generator_seed(init: InitFn) -> None:
    X, _ = blobs_tensor()
    torch.testing.assert_close(init(X, 5, generator=gen(3)), init(X, 5, generator=gen(3)))
    draws = {init(X, 5, generator=gen(s)).numpy().tobytes() for s in range(6)}
    assert len(draws) > 1


@pytest.mark.parametrize("init", INITS)
def test_distinct_points(init: InitFn) -> None:
    X, _ = blobs_tensor(n=60)
    for seed in range(10):
        idx = row_indices(X, init(X, 8, generator=gen(seed)))
        assert len(set(idx)) == 8, idx


@pytest.mark.parametrize("init", INITS)
def test_k_equals_n_picks_every_point(init: InitFn) -> None:
    X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [3.0, 3.0]], dtype=torch.float64)
    idx = row_indices(X, init(X, 4, generator=gen(0)))
    assert sorted(idx) == [0, 1, 2, 3]


@pytest.mark.parametrize("init", INITS)
def test_zero_weight_points_are_never_chosen(init: InitFn) -> None:
    X, _ = blobs_tensor(n=100)
    w = torch.ones(100, dtype=torch.float64)
    banned = torch.arange(0, 100, 3)
    w[banned] = 0.0
    # Put the banned points far away: k-means++ would love them if it ignored the weights.
    X = X.clone()
    X[banned] += 1e3
    for seed in range(15):
        idx = row_indices(X, init(X, 6, sample_weight=w, generator=gen(seed)))
        assert not set(idx) & set(banned.tolist()), idx


@pytest.mark.parametrize("init", INITS)
def test_weights_bias_the_draw(init: InitFn) -> None:
    # One heavy point among many light ones at the same spread: it is picked far more often.
    X = torch.randn(50, 2, generator=gen(1), dtype=torch.float64)
    w = torch.full((50,), 1e-3, dtype=torch.float64)
    w[17] = 1e3
    hits = sum(
        17 in row_indices(X, init(X, 2, sample_weight=w, generator=gen(s))) for s in range(20)
    )
    assert hits >= 18


def test_kmeans_plusplus_covers_separated_blobs() -> None:
    X, y = blobs_tensor(n=500, k=5)
    covered = 0
    for seed in range(20):
        idx = row_indices(X, kmeans_plusplus(X, 5, generator=gen(seed)))
        covered += len(set(y[idx].tolist())) == 5
    # D^2 sampling almost always puts one seed in each far-apart blob; uniform sampling
    # does so with probability 5!/5^5 ~ 4%.
    assert covered >= 18


def test_kmeans_plusplus_fewer_distinct_points_than_k() -> None:
    X = torch.tensor([[0.0, 0.0]] * 5 + [[2.0, 0.0]] * 5, dtype=torch.float64)
    C = kmeans_plusplus(X, 4, generator=gen(0))
    assert torch.isfinite(C).all()
    row_indices(X, C)
    assert {tuple(c.tolist()) for c in C} == {(0.0, 0.0), (2.0, 0.0)}


def test_kmeans_plusplus_precomputed_norms() -> None:
    X, _ = blobs_tensor()
    a = kmeans_plusplus(X, 4, generator=gen(5))
    b = kmeans_plusplus(X, 4, generator=gen(5), x_sq=(X * X).sum(dim=1))
    torch.testing.assert_close(a, b)


# ------------------------------------------------------------------- through the estimator


@pytest.mark.filterwarnings("ignore:RBFKMeans did not converge")
@pytest.mark.parametrize("init", ("k-means++", "random"))
def test_estimator_init_reproducible(init: str) -> None:
    X, _ = blobs_tensor()
    params = dict(n_clusters=5, assignment="hard", init=init, device="cpu", max_iter=1)
    a = RBFKMeans(random_state=4, **params).fit(X.numpy())
    b = RBFKMeans(random_state=4, **params).fit(X.numpy())
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)


def test_estimator_init_respects_zero_weights() -> None:
    X, _ = blobs_tensor(n=100)
    X = X.numpy().copy()
    w = np.ones(100)
    w[:10] = 0.0
    X[:10] += 1e4
    m = RBFKMeans(n_clusters=5, assignment="hard", device="cpu", random_state=0)
    m.fit(X, sample_weight=w)
    assert np.abs(m.cluster_centers_).max() < 100.0


@pytest.mark.parametrize(
    "bad",
    [np.zeros((4, 2)), np.zeros((5, 3)), np.zeros(5), np.full((5, 2), np.inf)],
)
def test_estimator_init_array_validation(bad: np.ndarray) -> None:
    X, _ = blobs_tensor()
    with pytest.raises(ValueError, match="init"):
        RBFKMeans(n_clusters=5, init=bad, device="cpu").fit(X.numpy())


def test_estimator_init_array_is_not_modified() -> None:
    X, _ = blobs_tensor()
    init = X.numpy()[:5].copy()
    keep = init.copy()
    RBFKMeans(n_clusters=5, init=init, device="cpu").fit(X.numpy())
    np.testing.assert_array_equal(init, keep)


def test_kmeans_plusplus_checks_before_every_step() -> None:
    X = torch.from_numpy(well_separated_blobs(200, 4).X)
    calls: list[int] = []
    ref = kmeans_plusplus(X, 12, generator=torch.Generator().manual_seed(0))
    got = kmeans_plusplus(
        X, 12, generator=torch.Generator().manual_seed(0), check=lambda: calls.append(1)
    )
    assert torch.equal(ref, got) and len(calls) == 11

    def stop() -> None:
        raise FitInterrupted

    with pytest.raises(FitInterrupted):
        kmeans_plusplus(X, 12, generator=torch.Generator().manual_seed(0), check=stop)
