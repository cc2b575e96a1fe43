"""EMA centroid updates and dead-centre re-seeding by the engine's farthest-point rule."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.nn import CentroidEMA, RBFKMeansLayer
from rbfkm_engine.nn.fixed_point import m_step


def _layer(k: int = 3, d: int = 2, assignment: str = "softmax") -> RBFKMeansLayer:
    torch.manual_seed(0)
    return RBFKMeansLayer(k, d, assignment=assignment, sigma=0.5).double()


def test_first_update_is_the_m_step() -> None:
    layer = _layer()
    ema = CentroidEMA(3, 2, decay=0.9, eps=1e-12, dead_mass=0.0).double()
    x = torch.randn(40, 2, dtype=torch.float64)
    r = layer(x).detach()
    expected = m_step(x, r, layer.centroids.detach(), "euclidean")
    ema.update(layer, x, r)
    torch.testing.assert_close(layer.centroids.detach(), expected)


def test_updates_are_moving_averages() -> None:
    layer = _layer()
    ema = CentroidEMA(3, 2, decay=0.75, eps=1e-12, dead_mass=0.0).double()
    gen = torch.Generator().manual_seed(1)
    x1, x2 = (torch.randn(30, 2, generator=gen, dtype=torch.float64) for _ in range(2))
    r1 = layer(x1).detach()
    ema.update(layer, x1, r1)
    r2 = layer(x2).detach()
    ema.update(layer, x2, r2)
    mass = 0.75 * r1.sum(0) + 0.25 * r2.sum(0)
    sums = 0.75 * r1.T @ x1 + 0.25 * r2.T @ x2
    torch.testing.assert_close(ema.mass, mass)
    torch.testing.assert_close(layer.centroids.detach(), sums / mass[:, None])


def test_dead_centres_go_farthest_first() -> None:
    # Two centres far from every point get no mass: they are re-seeded at the point
    # farthest from the live centre, then at the point farthest from both.
    layer = _layer(k=3, assignment="hard")
    x = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [0.0, 3.0], [4.0, 1.0]]).double()
    with torch.no_grad():
        layer.centroids.copy_(torch.tensor([[0.0, 0.0], [100.0, 100.0], [-100.0, 100.0]]))
    ema = CentroidEMA(3, 2, decay=0.5, dead_mass=0.5).double()
    dead = ema.update(layer, x, layer(x).detach())
    assert dead.tolist() == [1, 2]
    torch.testing.assert_close(layer.centroids.detach()[1], x[2], atol=1e-4, rtol=0)
    torch.testing.assert_close(layer.centroids.detach()[2], x[3], atol=1e-4, rtol=0)
    assert ema.mass[1:].tolist() == [1.0, 1.0]


def test_ema_training_reaches_kmeans_on_blobs() -> None:
    gen = torch.Generator().manual_seed(2)
    means = torch.tensor([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]])
    x = torch.cat([torch.randn(100, 2, generator=gen) * 0.3 + m for m in means])
    layer = RBFKMeansLayer(3, 2, assignment="hard")
    with torch.no_grad():  # all three centres in one blob: two must be re-seeded
        layer.centroids.copy_(torch.tensor([[4.0, 0.1], [4.1, 0.0], [50.0, 50.0]]))
    ema = CentroidEMA(3, 2, decay=0.5, dead_mass=0.5)
    for _ in range(30):
        batch = x[torch.randperm(300, generator=gen)[:64]]
        ema.update(layer, batch, layer(batch))
    found = layer.centroids.detach()
    nearest = torch.cdist(means, found).amin(dim=1)
    assert torch.all(nearest < 0.5), found


def test_cosine_centres_are_unit_vectors() -> None:
    torch.manual_seed(3)
    layer = RBFKMeansLayer(3, 4, assignment="softmax", metric="cosine")
    ema = CentroidEMA(3, 4)
    x = torch.randn(50, 4) * 7
    ema.update(layer, x, layer(x))
    torch.testing.assert_close(layer.centroids.detach().norm(dim=1), torch.ones(3))


@pytest.mark.parametrize(("kwargs", "name"), [({"decay": 1.0}, "decay"), ({"eps": 0.0}, "eps")])
def test_parameter_validation(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        CentroidEMA(3, 2, **kwargs)
