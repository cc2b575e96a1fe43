"""DKM's fixed-point iterations: Lloyd at zero temperature, gradients through them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from rbfkm_engine.nn import RBFKMeansLayer
from rbfkm_engine.nn.fixed_point import m_step

from ..conftest import well_separated_blobs


def test_m_step_is_weighted_mean_and_keeps_empty_centres() -> None:
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]], dtype=torch.float64)
    r = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    c = torch.full((3, 2), 7.0, dtype=torch.float64)
    new = m_step(x, r, c, "euclidean")
    expected = torch.tensor([[2 / 3, 0.0], [2 / 3, 8 / 3], [7.0, 7.0]], dtype=torch.float64)
    torch.testing.assert_close(new, expected)


@pytest.mark.parametrize("assignment", ("softmax", "entmax15", "hard", "hard_st"))
def test_zero_temperature_iterations_are_lloyd(assignment: str) -> None:
    data = well_separated_blobs(n=200, k=4, d=3, seed=1)
    X = torch.from_numpy(data.X).double()
    init = X[[0, 1, 2, 3]].clone()
    n_iter = 3
    km = KMeans(4, init=init.numpy(), n_init=1, max_iter=n_iter, tol=0.0, algorithm="lloyd")
    km.fit(data.X.astype(np.float64))
    layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=1e-12, n_iter=n_iter).double()
    with torch.no_grad():
        layer.centroids.copy_(init)
    out = layer.cluster(X)
    np.testing.assert_allclose(out.centroids.detach().numpy(), km.cluster_centers_, atol=1e-9)
    np.testing.assert_array_equal(out.responsibilities.argmax(dim=1).numpy(), km.labels_)


def test_gradients_flow_through_iterations() -> None:
    torch.manual_seed(0)
    layer = RBFKMeansLayer(3, 2, assignment="softmax", sigma=0.5, n_iter=2).double()
    x = torch.randn(20, 2, dtype=torch.float64, requires_grad=True)
    layer(x)[:, 0].sum().backward()
    assert layer.centroids.grad is not None and layer.centroids.grad.abs().sum() > 0
    # The iterated centres depend on x: the gradient differs from the one-step layer's.
    plain = RBFKMeansLayer(3, 2, assignment="softmax", sigma=0.5).double()
    plain.load_state_dict(layer.state_dict())
    x0 = x.detach().clone().requires_grad_(True)
    plain(x0)[:, 0].sum().backward()
    assert not torch.allclose(x.grad, x0.grad)


def test_batched_iterations_give_each_batch_its_centres() -> None:
    torch.manual_seed(1)
    layer = RBFKMeansLayer(3, 2, assignment="entmax15", sigma=0.3, n_iter=3).double()
    x = torch.randn(4, 15, 2, dtype=torch.float64)
    out = layer.cluster(x)
    assert out.centroids.shape == (4, 3, 2)
    for b in range(4):
        one = layer.cluster(x[b])
        torch.testing.assert_close(out.responsibilities[b], one.responsibilities)
        torch.testing.assert_close(out.centroids[b], one.centroids)
